//! The needle gate: a passcode hidden at several depths of haystacks of
//! several lengths (in tokens) cut from the evaluation text, asked for at the
//! end through llama-server's `/completion` endpoint, greedy. Recall per
//! KV configuration.

use anyhow::Result;
use serde_json::json;

use super::engine::GateCtx;
use super::report::Row;
use super::server::{count_tokens, param_f64s, post, rows_by_config, start_for};
use super::Spec;

/// A deterministic 5-digit code per case.
fn code(len: usize, depth: f64) -> u32 {
    let mut x = (len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((depth * 1000.0) as u64);
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    10_000 + (x % 90_000) as u32
}

const QUESTION: &str = "\n\nQuestion: What is the secret passcode mentioned in the text above?\nAnswer: The secret passcode is";

/// Builds a prompt of about `tokens` tokens with the needle at `depth` (0..1).
fn haystack(text: &str, chars_per_token: f64, tokens: usize, depth: f64, code: u32) -> String {
    let want = (tokens as f64 * chars_per_token) as usize;
    let mut hay: String = text.chars().take(want).collect();
    // Cut at a line end so the needle sits between lines.
    // The byte offset may fall inside a multi-byte character: back off to a
    // character boundary before slicing (0 always is one).
    let mut at = (((hay.len() as f64) * depth) as usize).min(hay.len());
    while !hay.is_char_boundary(at) {
        at -= 1;
    }
    let at = hay[..at].rfind('\n').map(|p| p + 1).unwrap_or(0);
    let needle = format!("\nThe secret passcode is {code}. Remember it: the passcode is {code}.\n");
    hay.insert_str(at, &needle);
    hay.push_str(QUESTION);
    hay
}

pub fn run(spec: &Spec, ctx: &GateCtx) -> Vec<Row> {
    let lengths: Vec<usize> = param_f64s(spec, "lengths", &[1500.0, 6000.0])
        .into_iter()
        .map(|v| v as usize)
        .collect();
    let depths = param_f64s(spec, "depths", &[0.1, 0.5, 0.9]);
    let text = std::fs::read_to_string(&ctx.text).unwrap_or_default();
    rows_by_config(spec, |model, c| {
        one(spec, ctx, model, c, &text, &lengths, &depths)
    })
}

fn one(
    spec: &Spec,
    ctx: &GateCtx,
    model: &str,
    c: &super::Config,
    text: &str,
    lengths: &[usize],
    depths: &[f64],
) -> Result<std::collections::BTreeMap<String, f64>> {
    let server = start_for(spec, ctx, model, c)?;
    // Characters per token of this text for this model, measured.
    let sample: String = text.chars().take(20_000).collect();
    let n = count_tokens(&server, &sample)?.max(1);
    let cpt = sample.chars().count() as f64 / n as f64;
    let mut figs = std::collections::BTreeMap::new();
    let mut found_all = 0usize;
    let mut total = 0usize;
    let mut cases = Vec::new();
    for &len in lengths {
        let mut found = 0usize;
        for &d in depths {
            let code = code(len, d);
            let prompt = haystack(text, cpt, len, d, code);
            let v = post(
                &server,
                "/completion",
                &json!({
                    "prompt": prompt,
                    "n_predict": 12,
                    "temperature": 0.0,
                    "top_k": 1,
                    // Haystacks of one length share the text before the needle; reusing
                    // those cells is the same computation, only faster.
                    "cache_prompt": true,
                }),
            )?;
            let answer = v["content"].as_str().unwrap_or("").to_string();
            let hit = answer.contains(&code.to_string());
            found += hit as usize;
            let n_prompt = v["tokens_evaluated"].as_u64().unwrap_or(0);
            let n_new = v["timings"]["prompt_n"].as_u64().unwrap_or(0);
            cases.push(format!(
                "len {len} depth {d}: prompt {n_prompt} tokens ({n_new} not cached), code {code}, answer {:?} → {}",
                answer.trim(),
                if hit { "found" } else { "missed" }
            ));
        }
        figs.insert(format!("recall_{len}"), found as f64 / depths.len() as f64);
        found_all += found;
        total += depths.len();
    }
    figs.insert("recall".into(), found_all as f64 / total.max(1) as f64);
    std::fs::write(
        ctx.scratch.join(format!("{model}-{}-cases.txt", c.name)),
        cases.join("\n") + "\n",
    )
    .ok();
    drop(server);
    Ok(figs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn haystacks_hold_the_needle_and_end_with_the_question() {
        let text = "line one\nline two\nline three\nline four\n".repeat(100);
        let h = haystack(&text, 4.0, 100, 0.5, 12345);
        assert!(h.contains("The secret passcode is 12345."));
        assert!(h.ends_with(QUESTION));
        let pos = h.find("12345").unwrap() as f64 / h.len() as f64;
        assert!((0.3..0.7).contains(&pos), "{pos}");
        assert_ne!(code(1500, 0.1), code(1500, 0.5));
    }

    #[test]
    fn haystacks_of_multibyte_text_are_cut_at_character_boundaries() {
        // Every depth lands inside some 3-byte character of this text.
        let text = "日本語のテキスト\nもう一行\n".repeat(50);
        for d in [0.0, 0.1, 0.33, 0.5, 0.77, 0.9, 1.0] {
            let h = haystack(&text, 3.0, 120, d, 54321);
            assert!(h.contains("The secret passcode is 54321."), "{d}");
            assert!(h.ends_with(QUESTION));
        }
    }
}
