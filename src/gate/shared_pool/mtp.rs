//! The mtp-server gate (patch 0009): llama-server drafting with an MTP head
//! (`--spec-type draft-mtp`) over the polykv caches, several slots, a
//! `--kv-unified` cache, on models test-polykv-mtp generates (random weights;
//! no real small MTP model is reachable). Each configuration names one part:
//!
//! - `gemma4`: a Gemma-4 target and its assistant (`-md`). A speculative
//!   server and a plain one (same cache) answer the same agents, sent at once
//!   to 4 slots: their greedy tokens must agree; where they part, the plain
//!   run's top-1/top-2 margin must be below `max_margin` (llama.cpp's CPU
//!   kernels are not batch-invariant, and a verification batch is a batch).
//!   One request goes to each server alone first: a turbo or tcq K is stored
//!   less the mean of the first ubatch a cache takes, and agents sent at once
//!   to a fresh server make a first ubatch that depends on the server's
//!   batching, which MTP changes. V sink cells (polykv3) are the first cells
//!   of the unified cache, whichever agent's tokens the server put there: with
//!   agents at once that too follows the batching (row `... at once`,
//!   reported, not held); one after another (`sequential`), every agent's
//!   first token takes the first cell in both servers.
//!   Every speculative answer drafted. A shared-pool request, which a
//!   sliding-window cache cannot serve, is a 400 with the reason and leaves
//!   the server serving.
//! - `nextn`: a GLM-4-MoE with a NextN layer (its draft cache its own). Agents
//!   sharing a pool's prefix (`shared_pool_slot`) with speculative decoding on
//!   get the tokens the same agents get without sharing, drafting all along;
//!   the pool's cells are intact afterwards and a last agent still gets the
//!   same answer. (This tree's loader cannot load a NextN file without its MTP
//!   layer, so there is no plain server to compare with here; test-polykv-mtp
//!   compares speculative with plain decoding in-process.)

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::client::*;
use super::*;
use crate::gate::server::{call, param_f64s, start, tokens_of};

const P_TOKENS: usize = 200;
const S_TOKENS: usize = 20;

pub fn run(spec: &Spec, ctx: &GateCtx) -> Vec<Row> {
    let made = generate(spec, ctx);
    spec.configs
        .iter()
        .map(|c| {
            let t = Instant::now();
            crate::progress::note(&format!("gate {}: {}", spec.name, c.name));
            let figures = made
                .as_ref()
                .map_err(|e| anyhow::anyhow!("{e:#}"))
                .and_then(|m| part(spec, ctx, c, m));
            let mut row = Row {
                model: "-".into(),
                config: c.name.clone(),
                group: c.vars.get("part").cloned(),
                ..Default::default()
            };
            match figures {
                Ok(f) => row.figures = f,
                Err(e) => row.error = Some(format!("{e:#}")),
            }
            row.seconds = t.elapsed().as_secs_f64();
            row
        })
        .collect()
}

/// The generated models' files.
struct Models {
    target: PathBuf,
    assistant: PathBuf,
    nextn: PathBuf,
}

fn generate(spec: &Spec, ctx: &GateCtx) -> Result<Models> {
    std::fs::create_dir_all(&ctx.scratch)?;
    let bin = ctx.bin_dir.join("test-polykv-mtp");
    let log = ctx.scratch.join("generate.log");
    let _ = std::fs::remove_file(&log);
    let dir = ctx.scratch.display().to_string();
    for arch in ["gemma4", "glm4moe"] {
        let argv: Vec<String> = [
            bin.display().to_string(),
            "--arch".into(),
            arch.into(),
            "-o".into(),
            dir.clone(),
        ]
        .to_vec();
        crate::gate::engine::run_command(
            &argv,
            &BTreeMap::new(),
            &log,
            std::time::Duration::from_secs(spec.timeout_s),
        )
        .with_context(|| format!("generating the {arch} model(s); log: {}", log.display()))?;
    }
    Ok(Models {
        target: ctx.scratch.join("gemma4-target.gguf"),
        assistant: ctx.scratch.join("gemma4-assistant.gguf"),
        nextn: ctx.scratch.join("glm4moe-nextn.gguf"),
    })
}

fn part(spec: &Spec, ctx: &GateCtx, c: &Config, m: &Models) -> Result<Figures> {
    let var = |k: &str| c.vars.get(k).map(String::as_str);
    let kv: Vec<String> = var("kv")
        .context("a configuration needs `kv` (its cache arguments)")?
        .split_whitespace()
        .map(String::from)
        .collect();
    let threads = param_usize(spec, "threads", 2).to_string();
    let server = |model: &Path, extra: &[&str], tag: &str| -> Result<Server> {
        let port = crate::http::free_port()?;
        let mut argv: Vec<String> = vec![
            ctx.bin_dir.join("llama-server").display().to_string(),
            "-m".into(),
            model.display().to_string(),
        ];
        argv.extend(extra.iter().map(|s| s.to_string()));
        argv.extend(kv.iter().cloned());
        argv.extend(
            [
                "-fa",
                "on",
                "-np",
                "4",
                "--kv-unified",
                "-c",
                "4096",
                "-t",
                &threads,
                "--cache-ram",
                "0",
                "--metrics",
                "--no-webui",
                "--host",
                "127.0.0.1",
                "--port",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        argv.push(port.to_string());
        let log = ctx.scratch.join(format!(
            "{}-{tag}-server.log",
            c.name.replace(['/', ' '], "_")
        ));
        start(&argv, &c.env, port, &log)
    };
    let mtp = ["--spec-type", "draft-mtp"];
    match var("part") {
        Some("gemma4") => {
            let a = m.assistant.display().to_string();
            let mut with_draft = vec!["-md", a.as_str()];
            with_draft.extend(mtp);
            let spec_srv = server(&m.target, &with_draft, "mtp")?;
            let plain_srv = server(&m.target, &[], "plain")?;
            let max_margin = param_f64s(spec, "max_margin", &[0.1])[0];
            gemma4(
                &spec_srv,
                &plain_srv,
                max_margin,
                var("sequential") == Some("1"),
            )
        }
        Some("nextn") => {
            let kd: Vec<&str> = match var("draft_kv") {
                Some(d) => d.split_whitespace().collect(),
                None => Vec::new(),
            };
            let mut extra: Vec<&str> = mtp.to_vec();
            extra.extend(kd);
            nextn(&server(&m.nextn, &extra, "mtp")?)
        }
        other => anyhow::bail!("configuration {}: unknown part {other:?}", c.name),
    }
}

/// The shared prefix and each agent's own suffix: fixed pseudo-random token
/// ids (the generated models' vocabulary is 256 tokens).
fn prompts(n_agents: usize) -> (Vec<i64>, Vec<Vec<i64>>) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % 256) as i64
    };
    let p: Vec<i64> = (0..P_TOKENS).map(|_| next()).collect();
    let s = (0..n_agents)
        .map(|_| (0..S_TOKENS).map(|_| next()).collect())
        .collect();
    (p, s)
}

fn body(prompt: &[i64], n_predict: usize) -> Value {
    json!({
        "prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "n_probs": 2,
        "ignore_eos": true, "return_tokens": true, "cache_prompt": false,
    })
}

fn draft_n(v: &Value) -> f64 {
    v["timings"]["draft_n"].as_f64().unwrap_or(0.0)
}

/// One agent after another when `sequential`: every agent's tokens then take
/// the same cells in both servers.
fn answers(port: u16, bodies: Vec<Value>, sequential: bool) -> Result<Vec<Value>> {
    if !sequential {
        return concurrently(port, bodies);
    }
    bodies
        .into_iter()
        .map(|b| {
            let (st, v) = call(port, "POST", "/completion", Some(&b))?;
            ensure!(st == 200, "/completion answered {st}: {v}");
            Ok(v)
        })
        .collect()
}

fn gemma4(
    spec_srv: &Server,
    plain_srv: &Server,
    max_margin: f64,
    sequential: bool,
) -> Result<Figures> {
    let n_agents = 8;
    let n_predict = 48;
    let (p, s) = prompts(n_agents);
    let bodies: Vec<Value> = s.iter().map(|si| body(&cat(&p, si), n_predict)).collect();
    // A turbo or tcq K is stored less the mean of the first ubatch the cache takes: agents sent at once
    // to a fresh server land in a first ubatch that depends on how the server batches them, which MTP
    // changes. One request first, alone, gives both caches the same mean, so that what is compared is
    // the drafting.
    for srv in [spec_srv, plain_srv] {
        complete(srv.port(), body(&cat(&p, &s[0]), 1))?;
    }
    let with = answers(spec_srv.port(), bodies.clone(), sequential)?;
    let without = answers(plain_srv.port(), bodies, sequential)?;
    let (mut same_tokens, mut total, mut identical, mut diverged) =
        (0usize, 0usize, 0usize, 0usize);
    let mut worst: f64 = 0.0;
    let mut drafted_min = f64::INFINITY;
    for (a, b) in with.iter().zip(&without) {
        let ta = tokens_of(a, "tokens")?;
        let tb = tokens_of(b, "tokens")?;
        ensure!(
            ta.len() == n_predict && tb.len() == n_predict,
            "an answer is short"
        );
        let agree = ta.iter().zip(&tb).take_while(|(x, y)| x == y).count();
        same_tokens += agree;
        total += n_predict;
        drafted_min = drafted_min.min(draft_n(a));
        if agree == n_predict {
            identical += 1;
            continue;
        }
        diverged += 1;
        // the plain run's two best log-probabilities where the runs part
        let top = b["completion_probabilities"][agree]["top_logprobs"]
            .as_array()
            .context("the plain answer has no probabilities")?;
        let lp = |i: usize| top.get(i).and_then(|t| t["logprob"].as_f64());
        let margin = match (lp(0), lp(1)) {
            (Some(x), Some(y)) => x - y,
            _ => f64::INFINITY,
        };
        worst = worst.max(margin);
    }
    // a pool on a sliding-window cache: refused with the reason, the server still serves
    let (st, v) = call(
        spec_srv.port(),
        "POST",
        "/completion",
        Some(
            &json!({ "prompt": p, "n_predict": 0, "id_slot": 0, "shared_pool_keep": true, "cache_prompt": true }),
        ),
    )?;
    let refused = st == 400
        && v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("sliding-window"));
    let alive = complete(spec_srv.port(), body(&cat(&p, &s[0]), 4)).is_ok();
    Ok(BTreeMap::from([
        ("agents".into(), n_agents as f64),
        ("identical_agents".into(), identical as f64),
        (
            "identical_pct".into(),
            100.0 * same_tokens as f64 / total as f64,
        ),
        ("diverged".into(), diverged as f64),
        ("max_div_margin".into(), worst),
        ("div_ok".into(), (worst < max_margin) as u8 as f64),
        ("draft_n_min".into(), drafted_min),
        ("pool_refused".into(), refused as u8 as f64),
        ("alive".into(), alive as u8 as f64),
    ]))
}

fn nextn(srv: &Server) -> Result<Figures> {
    let port = srv.port();
    let n_agents = 3;
    let n_predict = 48;
    let (p, s) = prompts(n_agents);
    // without sharing, one after another
    let alone = answers(
        port,
        s.iter().map(|si| body(&cat(&p, si), n_predict)).collect(),
        true,
    )?;
    // the pool, then the same agents sharing its prefix, at once
    fill_pool(port, POOL, &p)?;
    let shared_body = |si: &[i64]| {
        let mut b = body(&cat(&p, si), n_predict);
        b["shared_pool_slot"] = json!(POOL);
        b["cache_prompt"] = json!(true);
        b
    };
    let shared = concurrently(port, s.iter().map(|si| shared_body(si)).collect())?;
    let mut identical = 0usize;
    let mut drafted_min = f64::INFINITY;
    let mut prefix_shared = true;
    for (a, b) in shared.iter().zip(&alone) {
        identical += (tokens_of(a, "tokens")? == tokens_of(b, "tokens")?) as usize;
        drafted_min = drafted_min.min(draft_n(a)).min(draft_n(b));
        prefix_shared &= a["timings"]["cache_n"].as_u64() == Some(P_TOKENS as u64);
    }
    wait_idle(port)?;
    let pool = slots(port)?
        .into_iter()
        .find(|sl| sl["id"] == json!(POOL))
        .context("/slots lists no pool slot")?;
    let intact = pool["is_shared_pool"] == json!(true)
        && pool["n_kv_cells"].as_u64() == Some(P_TOKENS as u64);
    let (st, last) = call(port, "POST", "/completion", Some(&shared_body(&s[0])))?;
    ensure!(st == 200, "/completion answered {st}: {last}");
    let last_same = tokens_of(&last, "tokens")? == tokens_of(&alone[0], "tokens")?;
    Ok(BTreeMap::from([
        ("agents".into(), n_agents as f64),
        ("identical_shared".into(), identical as f64),
        ("prefix_shared".into(), prefix_shared as u8 as f64),
        ("draft_n_min".into(), drafted_min),
        ("pool_intact".into(), intact as u8 as f64),
        ("last_agent_same".into(), last_same as u8 as f64),
    ]))
}
