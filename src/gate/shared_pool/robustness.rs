//! Part `robustness`: 32 concurrent requests (sharing, streamed, cancelled,
//! not sharing); the pool stays intact.

use super::super::server::Server;
use super::*;
use anyhow::{Context, Result};
use serde_json::json;

pub(super) fn robustness(server: &Server, text: &str, p: usize) -> Result<Figures> {
    let port = server.port();
    let (_, doc) = document(server, text, p)?;
    fill_pool(port, POOL, &doc)?;
    let question = tokenize(server, QUESTIONS[0])?;
    let cancelled_before = cancelled_total(port)?;
    let mut jobs = Vec::new();
    for i in 0..32usize {
        let sfx = tokenize(
            server,
            &format!("\n\nRequest {i}: name one topic of the text above.\nAnswer:"),
        )?;
        let kind = i % 4;
        let body = match kind {
            3 => {
                // not sharing: its own prompt, another part of the text
                let own = tokenize(server, &slice(text, 20_000 + 1_500 * i, 1_500))?;
                json!({ "prompt": own, "n_predict": 8, "temperature": 0.0, "ignore_eos": true })
            }
            _ => {
                let mut b = ask(&cat(&doc, &sfx), 8, 0, Some(p));
                b["stream"] = json!(kind != 0);
                // any free slot: 32 requests queue for 8
                b.as_object_mut().map(|o| o.remove("id_slot"));
                b
            }
        };
        jobs.push((kind, body));
    }
    let outcomes = mixed(port, &jobs, 8);
    let mut figures = tally(&outcomes)?;
    wait_idle(port)?;
    // What the server counts, not what the client did: a dropped stream it did not
    // cancel (it ran to the end) is not a cancellation.
    let n_cancelled = cancelled_total(port)? - cancelled_before;
    let pool = slots(port)?
        .into_iter()
        .find(|s| s["id"] == json!(POOL))
        .context("/slots lists no pool slot")?;
    let intact =
        pool["is_shared_pool"] == json!(true) && pool["n_kv_cells"].as_u64() == Some(p as u64);
    let last = complete(port, ask(&cat(&doc, &question), 12, 1, Some(p)))?;
    let recall = last.text.contains(PASSCODE) && last.cache_n as usize == p;
    figures.extend([
        ("cancelled".into(), n_cancelled),
        ("pool_intact".into(), intact as u8 as f64),
        (
            "pool_cells".into(),
            pool["n_kv_cells"].as_f64().unwrap_or(-1.0),
        ),
        ("final_recall".into(), recall as u8 as f64),
    ]);
    Ok(figures)
}
