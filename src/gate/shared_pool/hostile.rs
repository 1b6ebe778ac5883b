//! Requests that aborted or misrouted llama-server before #39, run against
//! one server (the shared-pool gate's `validation` part and the auto-share
//! gate's `hostile` part): each must be answered — a 400 for what is out of
//! range or not JSON, a 200 for the legal request that used to abort — and
//! the server must still be up at the end.

use anyhow::Result;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

use super::super::server::call;
use super::*;

/// Runs the cases on the server at `port` (`n_slots` slots, the last of
/// them idle and free to plant a prompt in) and returns its figures:
/// `hostile_cases`, `hostile_400` (the fraction of the bad requests
/// answered 400), `idle_source_shared` (the request naming an idle slot
/// that its own prompt would pick ran in another slot and shared from it:
/// it used to hit a GGML_ASSERT and kill the server), `alive`. Misses go to
/// `misses` with what the server answered.
pub(super) fn hostile(
    port: u16,
    n_slots: i64,
    text: &str,
    misses: &mut Vec<String>,
) -> Result<Figures> {
    let planted = n_slots - 1;
    let prompt = slice(text, 5_000, 1_200);
    let longer = format!("{prompt} And so the story goes on.");
    // 1. A prompt in the last slot, then a request naming that idle,
    //    non-pool slot as its pool whose prompt the slot picker would place
    //    in that very slot (longest common prefix).
    let (st, v) = call(
        port,
        "POST",
        "/completion",
        Some(&json!({ "prompt": prompt, "n_predict": 2, "id_slot": planted })),
    )?;
    anyhow::ensure!(st == 200, "planting a prompt in slot {planted}: {st} {v}");
    let (st, v) = call(
        port,
        "POST",
        "/completion",
        Some(&json!({ "prompt": longer, "n_predict": 2, "shared_pool_slot": planted })),
    )?;
    let ran_in = v["id_slot"].as_i64().unwrap_or(-1);
    let shared = st == 200
        && ran_in >= 0
        && ran_in != planted
        && v["timings"]["cache_n"].as_u64().unwrap_or(0) > 0;
    if !shared {
        misses.push(format!(
            "a request naming idle slot {planted} as its pool: {st}, ran in slot {ran_in}: {v}"
        ));
    }
    // Slot `planted` became a pool: release it, as a client would.
    let (st, v) = call(
        port,
        "POST",
        &format!("/slots/{planted}?action=erase"),
        Some(&json!({})),
    )?;
    if st != 200 {
        misses.push(format!("erasing pool slot {planted}: {st} {v}"));
    }

    // 2. Numbers that used to be narrowed (wrapped) into another value.
    let body = |extra: Value| {
        let mut b = json!({ "prompt": "The capital of France is", "n_predict": 2 });
        if let (Some(b), Some(e)) = (b.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        b.to_string()
    };
    let cases: Vec<(&str, String)> = vec![
        // 2^32 + 1 ran in slot 1
        (
            "id_slot 2^32+1",
            body(json!({ "id_slot": 4_294_967_297_i64 })),
        ),
        (
            "id_slot -(2^32)+1",
            body(json!({ "id_slot": -4_294_967_295_i64 })),
        ),
        ("id_slot 1.5", body(json!({ "id_slot": 1.5 }))),
        // 2^64 - 1 read as -1: sharing silently off
        (
            "shared_pool_slot 2^64-1",
            body(json!({ "shared_pool_slot": u64::MAX })),
        ),
        (
            "shared_prefix_n_tokens 2^32+5",
            body(json!({ "shared_pool_slot": 0, "shared_prefix_n_tokens": 4_294_967_301_i64 })),
        ),
        // 1e30 read as -2147483648
        ("n_predict 1e30", body(json!({ "n_predict": 1e30 }))),
        (
            "n_predict 2^31",
            body(json!({ "n_predict": 2_147_483_648_i64 })),
        ),
        (
            "n_predict 2^64",
            r#"{"prompt":"hi","n_predict":18446744073709551616}"#.into(),
        ),
        // not JSON: was a 500
        ("truncated JSON", r#"{"prompt":"hi""#.into()),
        ("empty body", String::new()),
        ("binary body", "\u{1}\u{2}\u{fffd}".into()),
    ];
    let mut answered_400 = 0usize;
    for (name, raw) in &cases {
        let (st, text) = crate::http::request(
            port,
            "POST",
            "/completion",
            Some(raw),
            Duration::from_secs(300),
        )?;
        if st == 400 {
            answered_400 += 1;
        } else {
            misses.push(format!(
                "{name}: answered {st} {}",
                text.chars().take(300).collect::<String>()
            ));
        }
    }
    let (st, _) = call(port, "GET", "/health", None)?;
    let alive = st == 200;
    Ok(BTreeMap::from([
        ("hostile_cases".into(), cases.len() as f64 + 1.0),
        (
            "hostile_400".into(),
            answered_400 as f64 / cases.len() as f64,
        ),
        ("idle_source_shared".into(), shared as u8 as f64),
        ("alive".into(), alive as u8 as f64),
    ]))
}
