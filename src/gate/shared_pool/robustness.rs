//! Part `robustness`: 32 concurrent requests (sharing, streamed, cancelled,
//! not sharing); the pool stays intact.

use anyhow::{bail, ensure, Context, Result};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::super::server::{call, Server};
use super::*;

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
    let outcomes: Vec<(usize, Result<()>)> = std::thread::scope(|sc| {
        let hs: Vec<_> = jobs
            .iter()
            .map(|(kind, body)| {
                sc.spawn(move || -> (usize, Result<()>) {
                    let r = if *kind == 2 {
                        cancelled(port, body)
                    } else {
                        call(port, "POST", "/completion", Some(body)).and_then(|(st, v)| {
                            ensure!(st == 200, "answered {st}: {v}");
                            // a whole answer (kind 1 streams: its events are not one JSON body):
                            // the server says it stopped, after the tokens asked for
                            ensure!(
                                *kind == 1
                                    || (v["stop"] == json!(true)
                                        && v["tokens_predicted"].as_u64() == Some(8)),
                                "an incomplete answer: {v}"
                            );
                            Ok(())
                        })
                    };
                    (*kind, r)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| (9, Err(anyhow::anyhow!("a request thread panicked"))))
            })
            .collect()
    });
    let errors: Vec<String> = outcomes
        .iter()
        .filter_map(|(_, r)| r.as_ref().err().map(|e| format!("{e:#}")))
        .collect();
    let done = outcomes
        .iter()
        .filter(|(k, r)| *k != 2 && r.is_ok())
        .count();
    let streams_dropped = outcomes
        .iter()
        .filter(|(k, r)| *k == 2 && r.is_ok())
        .count();
    // Let the server notice the dropped streams, then look at the pool.
    let t = Instant::now();
    while slots(port)?
        .iter()
        .any(|s| s["is_processing"] == json!(true))
    {
        ensure!(
            t.elapsed() < Duration::from_secs(120),
            "slots still busy 120 s after the last reply"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
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
    if !errors.is_empty() {
        bail!(
            "{} of 32 requests failed; first: {}",
            errors.len(),
            errors[0]
        );
    }
    Ok(BTreeMap::from([
        ("requests".into(), jobs.len() as f64),
        ("completed".into(), done as f64),
        ("streams_dropped".into(), streams_dropped as f64),
        ("cancelled".into(), n_cancelled),
        ("errors".into(), errors.len() as f64),
        ("pool_intact".into(), intact as u8 as f64),
        (
            "pool_cells".into(),
            pool["n_kv_cells"].as_f64().unwrap_or(-1.0),
        ),
        ("final_recall".into(), recall as u8 as f64),
    ]))
}
