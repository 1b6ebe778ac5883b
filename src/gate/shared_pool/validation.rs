//! Part `validation`: every bad request is a 400 and changes no state.

use anyhow::{ensure, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::super::server::call;
use super::*;

impl Job<'_> {
    /// Long (about 250 lines): one scenario of 16 bad requests against one
    /// server, each checked against the state the previous ones left; cut
    /// apart, the state checks between them would be lost from view.
    pub(super) fn validation(&self, p: usize) -> Result<Figures> {
        let (text, c) = (self.text, self.c);
        let server = self.server(c)?;
        let port = server.port();
        let (doc_text, doc) = document(&server, text, p)?;
        fill_pool(port, POOL, &doc)?;
        let question = tokenize(&server, QUESTIONS[0])?;
        let other = tokenize(&server, &slice(text, 30_000, 2_000))?;
        let agent = cat(&doc, &question);
        let share = |extra: Value| {
            let mut b = json!({ "prompt": agent, "n_predict": 4, "shared_pool_slot": POOL });
            if let (Some(b), Some(e)) = (b.as_object_mut(), extra.as_object()) {
                b.extend(e.clone());
            }
            b
        };
        let n_slots = slots(port)?.len() as i64;
        let cases: Vec<(&str, &str, Value)> = vec![
            // id_slot = n_slots used to wrap onto the pool itself and abort the server (GGML_ASSERT)
            (
                "id_slot out of range, sharing",
                "/completion",
                share(json!({ "id_slot": n_slots })),
            ),
            (
                "negative id_slot",
                "/completion",
                json!({ "prompt": other, "n_predict": 4, "id_slot": -5 }),
            ),
            // a request without shared_pool_keep must not overwrite a pool
            (
                "plain request into the pool slot",
                "/completion",
                json!({ "prompt": other, "n_predict": 4, "id_slot": POOL }),
            ),
            (
                "unknown slot",
                "/completion",
                share(json!({ "shared_pool_slot": n_slots + 3 })),
            ),
            (
                "P = 0",
                "/completion",
                share(json!({ "shared_prefix_n_tokens": 0 })),
            ),
            (
                "P larger than the pool",
                "/completion",
                share(json!({ "shared_prefix_n_tokens": p + 10 })),
            ),
            (
                "pool is the request's own slot",
                "/completion",
                share(json!({ "id_slot": POOL })),
            ),
            (
                "prefix does not match",
                "/completion",
                json!({ "prompt": other, "n_predict": 4, "shared_pool_slot": POOL, "shared_prefix_n_tokens": 10 }),
            ),
            (
                "no common prefix",
                "/completion",
                json!({ "prompt": other, "n_predict": 4, "shared_pool_slot": POOL }),
            ),
            (
                "empty pool slot",
                "/completion",
                share(json!({ "shared_pool_slot": 5 })),
            ),
            (
                "not an integer",
                "/completion",
                share(json!({ "shared_pool_slot": "0" })),
            ),
            (
                "without cache_prompt",
                "/completion",
                share(json!({ "cache_prompt": false })),
            ),
            (
                "unknown slot (/v1/completions)",
                "/v1/completions",
                share(json!({ "shared_pool_slot": n_slots + 3 })),
            ),
            (
                "unknown slot (/v1/chat/completions)",
                "/v1/chat/completions",
                json!({ "messages": [{ "role": "user", "content": "hi" }], "max_tokens": 4, "shared_pool_slot": n_slots + 3 }),
            ),
        ];
        let mut answered_400 = 0usize;
        let mut unchanged = 0usize;
        let mut misses = Vec::new();
        for (name, path, body) in &cases {
            let before = state(port)?;
            let (st, v) = call(port, "POST", path, Some(body))?;
            let after = state(port)?;
            if st == 400 {
                answered_400 += 1;
            } else {
                misses.push(format!("{name}: answered {st} {v}"));
            }
            if before == after {
                unchanged += 1;
            } else {
                misses.push(format!("{name}: state changed from {before} to {after}"));
            }
        }
        // The pool is busy filling: a sharing request must be refused, not wait or share half a prefix.
        let busy = std::thread::scope(|sc| -> Result<bool> {
            // longer than one batch (2048 tokens): the server looks at new requests between batches
            let long = tokenize(&server, &slice(text, 40_000, 12_000))?;
            let filler = sc.spawn(move || fill_pool(port, 1, &long));
            let t = Instant::now();
            while !slots(port)?
                .iter()
                .any(|s| s["id"] == json!(1) && s["is_processing"] == json!(true))
            {
                ensure!(
                    t.elapsed() < Duration::from_secs(60),
                    "slot 1 never started filling"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let (st, v) = call(
                port,
                "POST",
                "/completion",
                Some(
                    &json!({ "prompt": cat(&other, &question), "n_predict": 4, "shared_pool_slot": 1 }),
                ),
            )?;
            filler
                .join()
                .map_err(|_| anyhow::anyhow!("the filling thread panicked"))??;
            if st != 400 {
                misses.push(format!("pool busy filling: answered {st} {v}"));
            }
            Ok(st == 400 && v.to_string().contains("busy"))
        })?;
        // The OpenAI-style endpoints share too: /v1/completions with the same tokens,
        // /v1/chat/completions over a pool filled through the chat template.
        let (st, v) = call(
            port,
            "POST",
            "/v1/completions",
            Some(&share(json!({ "n_predict": 12, "temperature": 0.0 }))),
        )?;
        let oai = st == 200
            && v["choices"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .contains(PASSCODE)
            && v["timings"]["cache_n"].as_u64() == Some(p as u64);
        if !oai {
            misses.push(format!("/v1/completions sharing: {st} {v}"));
        }
        let system = json!({ "role": "system", "content": doc_text });
        let (st, v) = call(
            port,
            "POST",
            "/v1/chat/completions",
            Some(&json!({
                "messages": [system], "max_tokens": 0, "id_slot": 2, "shared_pool_keep": true,
            })),
        )?;
        ensure!(
            st == 200,
            "filling a pool through the chat endpoint: {st} {v}"
        );
        let (st, v) = call(
            port,
            "POST",
            "/v1/chat/completions",
            Some(&json!({
                "messages": [system, { "role": "user", "content": "What is the secret passcode mentioned in the text above?" }],
                "max_tokens": 16, "temperature": 0.0, "shared_pool_slot": 2,
            })),
        )?;
        let chat =
            st == 200 && v["timings"]["cache_n"].as_u64().unwrap_or(0) as usize >= p * 9 / 10;
        if !chat {
            misses.push(format!("/v1/chat/completions sharing: {st} {v}"));
        }
        // Restoring a saved slot into a pool is refused; erasing it is the one way to release it,
        // after which the slot runs plain requests again.
        let (st, v) = call(
            port,
            "POST",
            "/slots/2?action=restore",
            Some(&json!({ "filename": "none.bin" })),
        )?;
        let restore_refused = st == 400 && v.to_string().contains("shared KV pool");
        if !restore_refused {
            misses.push(format!("restore into a pool: {st} {v}"));
        }
        let (st_erase, v_erase) = call(
            port,
            "POST",
            &format!("/slots/{POOL}?action=erase"),
            Some(&json!({})),
        )?;
        let released = slots(port)?
            .iter()
            .any(|s| s["id"] == json!(POOL) && s["is_shared_pool"] == json!(false));
        let (st_plain, v_plain) = call(
            port,
            "POST",
            "/completion",
            Some(&json!({ "prompt": other, "n_predict": 2, "id_slot": POOL })),
        )?;
        let pool_released = st_erase == 200 && released && st_plain == 200;
        if !pool_released {
            misses.push(format!(
                "release by erase: {st_erase} {v_erase}; released {released}; then a plain request: {st_plain} {v_plain}"
            ));
        }
        let hostile = super::hostile::hostile(port, n_slots, text, &mut misses)?;
        // A slot saved from this cache, for a restore into other cache types below.
        let (st, v) = call(
            port,
            "POST",
            "/slots/1?action=save",
            Some(&json!({ "filename": "validation-slot.bin" })),
        )?;
        ensure!(st == 200, "saving slot 1: {st} {v}");
        drop(server);
        // A server without a unified KV cache refuses every sharing request;
        // with q8_0 K/V it refuses the saved slot, saying why (#39 item 8).
        let mut split = c.clone();
        split
            .vars
            .insert("unified".into(), "--no-kv-unified".into());
        split.vars.insert("k".into(), "q8_0".into());
        split.vars.insert("v".into(), "q8_0".into());
        let server = self.server(&split)?;
        let (st, v) = call(
            server.port(),
            "POST",
            "/slots/0?action=restore",
            Some(&json!({ "filename": "validation-slot.bin" })),
        )?;
        // llama.cpp's reason (here the stream count: one unified stream saved, one
        // per slot now; with one stream it names the key type), not only the
        // generic "No available space in KV cache or invalid slot save file".
        let restore_reason = st == 400 && v.to_string().contains("mismatch");
        if !restore_reason {
            misses.push(format!("restoring an f16 slot into a q8_0 cache: {st} {v}"));
        }
        let (st, v) = call(
            server.port(),
            "POST",
            "/completion",
            Some(&json!({ "prompt": agent, "n_predict": 4, "shared_pool_slot": 1 })),
        )?;
        let not_unified = st == 400 && v.to_string().contains("--kv-unified");
        if !not_unified {
            misses.push(format!("without --kv-unified: {st} {v}"));
        }
        std::fs::write(
            self.ctx
                .scratch
                .join(format!("{}-validation.txt", self.model)),
            misses.join("\n") + "\n",
        )
        .ok();
        let n = cases.len() as f64;
        let mut figures = hostile;
        figures.extend(BTreeMap::from([
            ("cases".into(), n + 2.0),
            (
                "refused_400".into(),
                (answered_400 + busy as usize + not_unified as usize) as f64 / (n + 2.0),
            ),
            ("state_unchanged".into(), unchanged as f64 / n),
            ("oai_completions_shared".into(), oai as u8 as f64),
            ("chat_shared".into(), chat as u8 as f64),
            ("restore_refused".into(), restore_refused as u8 as f64),
            ("restore_reason".into(), restore_reason as u8 as f64),
            ("pool_released".into(), pool_released as u8 as f64),
        ]));
        Ok(figures)
    }
}
