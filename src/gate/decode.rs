//! The decode gate: single-token decode agreement. The reference
//! configuration (f16 KV) greedily continues a prompt cut from the evaluation
//! text; every configuration is then teacher-forced along that continuation,
//! one token per request, so each prediction after the first comes from a
//! one-token decode step (`timings.prompt_n` = 1, counted as proof). The
//! figure is the share of steps whose greedy token equals the reference's:
//! decode-only corruption shows here even when batched perplexity is fine.

use anyhow::{bail, Context, Result};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Instant;

use super::engine::GateCtx;
use super::report::Row;
use super::server::{param_usize, post, start_for, tokens_of, Server};
use super::{Config, Spec};

/// The prompt (`n` tokens of the text) and the reference's greedy continuation.
fn reference(server: &Server, text: &str, n: usize, gen: usize) -> Result<(Vec<i64>, Vec<i64>)> {
    // Ten characters per token is more than enough text for any tokenizer.
    let sample: String = text.chars().take(n * 10).collect();
    let mut prompt = tokens_of(
        &post(server, "/tokenize", &json!({ "content": sample }))?,
        "tokens",
    )?;
    if prompt.len() < n {
        bail!(
            "the evaluation text gives only {} tokens; the gate needs {n}",
            prompt.len()
        );
    }
    prompt.truncate(n);
    let v = post(
        server,
        "/completion",
        &json!({
            "prompt": prompt,
            "n_predict": gen,
            "temperature": 0.0,
            "top_k": 1,
            "ignore_eos": true,
            "return_tokens": true,
            "cache_prompt": false,
        }),
    )?;
    let generated = tokens_of(&v, "tokens")?;
    if generated.len() != gen {
        bail!(
            "the reference generated {} tokens, not {gen}",
            generated.len()
        );
    }
    Ok((prompt, generated))
}

/// Teacher-forced greedy agreement along `generated`.
fn agreement(server: &Server, prompt: &[i64], generated: &[i64]) -> Result<BTreeMap<String, f64>> {
    let mut agree = 0usize;
    let mut single = 0usize;
    let mut first_miss = generated.len();
    let mut context: Vec<i64> = prompt.to_vec();
    for (i, &want) in generated.iter().enumerate() {
        let v = post(
            server,
            "/completion",
            &json!({
                "prompt": context,
                "n_predict": 1,
                "temperature": 0.0,
                "top_k": 1,
                "ignore_eos": true,
                "return_tokens": true,
                "cache_prompt": true,
            }),
        )?;
        let got = tokens_of(&v, "tokens")?;
        if got.first() == Some(&want) {
            agree += 1;
        } else if first_miss == generated.len() {
            first_miss = i;
        }
        if i > 0 && v["timings"]["prompt_n"].as_u64() == Some(1) {
            single += 1;
        }
        context.push(want);
    }
    let n = generated.len() as f64;
    Ok(BTreeMap::from([
        ("top1_agree_pct".to_string(), 100.0 * agree as f64 / n),
        ("single_token_steps".to_string(), single as f64),
        ("first_miss".to_string(), first_miss as f64),
    ]))
}

pub fn run(spec: &Spec, ctx: &GateCtx) -> Vec<Row> {
    let n_prompt = param_usize(spec, "prompt_tokens", 1024);
    let n_gen = param_usize(spec, "gen_tokens", 256);
    let ref_name = spec
        .params
        .get("reference")
        .and_then(|v| v.as_str())
        .unwrap_or("f16")
        .to_string();
    let text = std::fs::read_to_string(&ctx.text).unwrap_or_default();
    let mut rows = Vec::new();
    for model in &spec.models {
        let t = Instant::now();
        crate::progress::note(&format!(
            "gate {}: {model} reference ({ref_name})",
            spec.name
        ));
        let reference = spec
            .configs
            .iter()
            .find(|c| c.name == ref_name)
            .with_context(|| format!("the reference configuration `{ref_name}` is not listed"))
            .and_then(|c: &Config| {
                let server = start_for(spec, ctx, model, c)?;
                reference(&server, &text, n_prompt, n_gen)
            });
        let ref_seconds = t.elapsed().as_secs_f64();
        for c in spec.configs.iter().filter(|c| c.runs_on(model)) {
            let t = Instant::now();
            let mut row = Row {
                model: model.clone(),
                config: c.name.clone(),
                ..Default::default()
            };
            match &reference {
                Err(e) => row.error = Some(format!("reference: {e:#}")),
                Ok((prompt, generated)) => {
                    crate::progress::note(&format!("gate {}: {model} {}", spec.name, c.name));
                    match start_for(spec, ctx, model, c)
                        .and_then(|server| agreement(&server, prompt, generated))
                    {
                        Ok(f) => row.figures = f,
                        Err(e) => row.error = Some(format!("{e:#}")),
                    }
                }
            }
            row.seconds =
                t.elapsed().as_secs_f64() + if c.name == ref_name { ref_seconds } else { 0.0 };
            rows.push(row);
        }
    }
    rows
}
