//! The shared-pool gate's llama-server client: tokens, the pool slot,
//! `/metrics` (parsed apart from fetching), `/slots`, completions, concurrent
//! and cancelled requests, the prompts the parts build.

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

use super::super::server::{call, post, tokens_of, Server};
use super::*;

/// `chars` characters of the text from `from` (in characters).
pub(super) fn slice(text: &str, from: usize, chars: usize) -> String {
    text.chars().skip(from).take(chars).collect()
}

pub(super) fn tokenize(server: &Server, text: &str) -> Result<Vec<i64>> {
    tokens_of(
        &post(server, "/tokenize", &json!({ "content": text }))?,
        "tokens",
    )
}

/// The document: `p` tokens of the text with the passcode line in the middle.
pub(super) fn document(server: &Server, text: &str, p: usize) -> Result<(String, Vec<i64>)> {
    let mut doc = slice(text, 0, p * 8);
    let mut mid = doc.len() / 3;
    while !doc.is_char_boundary(mid) {
        mid -= 1;
    }
    let mut at = doc[..mid].rfind('\n').map(|i| i + 1).unwrap_or(0);
    while !doc.is_char_boundary(at) {
        at -= 1;
    }
    doc.insert_str(
        at,
        &format!("\nThe secret passcode is {PASSCODE}. Remember it: the passcode is {PASSCODE}.\n"),
    );
    let mut tokens = tokenize(server, &doc)?;
    ensure!(
        tokens.len() >= p,
        "the evaluation text gives {} tokens, the gate needs {p}",
        tokens.len()
    );
    tokens.truncate(p);
    let kept = detokenize(server, &tokens)?;
    ensure!(
        kept.contains(PASSCODE),
        "the passcode fell outside the first {p} tokens"
    );
    Ok((kept, tokens))
}

pub(super) fn detokenize(server: &Server, tokens: &[i64]) -> Result<String> {
    let v = post(server, "/detokenize", &json!({ "tokens": tokens }))?;
    Ok(v["content"].as_str().unwrap_or_default().to_string())
}

pub(super) fn cat(a: &[i64], b: &[i64]) -> Vec<i64> {
    a.iter().chain(b).copied().collect()
}

/// Fills slot `id` with `tokens` and makes it a pool.
pub(super) fn fill_pool(port: u16, id: i64, tokens: &[i64]) -> Result<()> {
    let (st, v) = call(
        port,
        "POST",
        "/completion",
        Some(&json!({
            "prompt": tokens, "n_predict": 0, "id_slot": id,
            "shared_pool_keep": true, "cache_prompt": true,
        })),
    )?;
    ensure!(st == 200, "filling pool slot {id}: {st} {v}");
    Ok(())
}

/// `llamacpp:NAME VALUE` lines of a Prometheus text, by NAME (comments and
/// other families left out).
pub(super) fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some((k, v)) = line.split_once(' ') {
            if let (Some(k), Ok(v)) = (k.strip_prefix("llamacpp:"), v.trim().parse::<f64>()) {
                out.insert(k.to_string(), v);
            }
        }
    }
    out
}

/// The server's `/metrics`, which must carry patch 0007's KV figures.
pub(super) fn metrics(port: u16) -> Result<BTreeMap<String, f64>> {
    let (st, text) = crate::http::request(port, "GET", "/metrics", None, Duration::from_secs(60))?;
    ensure!(
        st == 200,
        "/metrics answered {st} (the server needs --metrics)"
    );
    let out = parse_metrics(&text);
    for k in ["kv_cells", "kv_cells_used", "kv_cell_refs", "kv_bytes"] {
        ensure!(
            out.contains_key(k),
            "/metrics has no llamacpp:{k} (is patch 0007 in the build?)"
        );
    }
    Ok(out)
}

pub(super) fn slots(port: u16) -> Result<Vec<Value>> {
    let (st, v) = call(port, "GET", "/slots", None)?;
    ensure!(st == 200, "/slots answered {st}");
    v.as_array().cloned().context("/slots is not an array")
}

/// What the KV holds, to compare before and after a refused request.
pub(super) fn state(port: u16) -> Result<String> {
    let m = metrics(port)?;
    let s: Vec<String> = slots(port)?
        .iter()
        .map(|s| {
            format!(
                "{}:{}:{}:{}:{}",
                s["id"],
                s["is_shared_pool"],
                s["shared_pool_slot"],
                s["shared_prefix_n_tokens"],
                s["n_kv_cells"]
            )
        })
        .collect();
    Ok(format!(
        "used {} refs {} slots {}",
        m["kv_cells_used"],
        m["kv_cell_refs"],
        s.join(",")
    ))
}

pub(super) struct Answer {
    pub(super) tokens: Vec<i64>,
    pub(super) text: String,
    /// per generated token: id → logprob of the top 10
    pub(super) top: Vec<BTreeMap<i64, f64>>,
    pub(super) cache_n: u64,
    pub(super) prompt_n: u64,
}

pub(super) fn complete(port: u16, body: Value) -> Result<Answer> {
    let (st, v) = call(port, "POST", "/completion", Some(&body))?;
    ensure!(st == 200, "/completion answered {st}: {v}");
    let mut top = Vec::new();
    for p in v["completion_probabilities"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mut m = BTreeMap::new();
        for t in p["top_logprobs"].as_array().into_iter().flatten() {
            if let (Some(id), Some(lp)) = (t["id"].as_i64(), t["logprob"].as_f64()) {
                m.insert(id, lp);
            }
        }
        top.push(m);
    }
    Ok(Answer {
        tokens: tokens_of(&v, "tokens")?,
        text: v["content"].as_str().unwrap_or_default().to_string(),
        top,
        cache_n: v["timings"]["cache_n"].as_u64().unwrap_or(0),
        prompt_n: v["timings"]["prompt_n"].as_u64().unwrap_or(0),
    })
}

pub(super) fn ask(prompt: &[i64], n_predict: usize, slot: usize, share: Option<usize>) -> Value {
    let mut body = json!({
        "prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "n_probs": 10,
        "ignore_eos": true, "return_tokens": true, "cache_prompt": share.is_some(), "id_slot": slot,
    });
    if let Some(p) = share {
        body["shared_pool_slot"] = json!(POOL);
        body["shared_prefix_n_tokens"] = json!(p);
    }
    body
}

/// A full evaluation in slot `slot`, no sharing, the prompt cache on (the
/// cells stay resident to be counted).
pub(super) fn in_slot(prompt: &[i64], n_predict: usize, slot: usize) -> Value {
    let mut b = ask(prompt, n_predict, slot, None);
    b["cache_prompt"] = json!(true);
    b
}

/// A private suffix of exactly `s` tokens for agent `i`.
pub(super) fn suffix(server: &Server, i: usize, s: usize) -> Result<Vec<i64>> {
    let q = format!(
        "\n\nAgent {i} of the team writes: please summarize the part of the text above that matters most for task number {i}, in plain words, with care and in detail."
    );
    let mut t = tokenize(server, &q.repeat(2))?;
    ensure!(
        t.len() >= s,
        "the suffix text gives only {} tokens",
        t.len()
    );
    t.truncate(s);
    Ok(t)
}

/// Runs the requests concurrently; every one must succeed.
pub(super) fn concurrently(port: u16, bodies: Vec<Value>) -> Result<Vec<Value>> {
    let results: Vec<Result<Value>> = std::thread::scope(|sc| {
        let hs: Vec<_> = bodies
            .into_iter()
            .map(|b| {
                sc.spawn(move || -> Result<Value> {
                    let (st, v) = call(port, "POST", "/completion", Some(&b))?;
                    ensure!(st == 200, "/completion answered {st}: {v}");
                    Ok(v)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a request thread panicked")))
            })
            .collect()
    });
    results.into_iter().collect()
}

/// A streamed completion dropped after its first event: the server cancels it.
pub(super) fn cancelled(port: u16, body: &Value) -> Result<()> {
    let (status, mut stream) = crate::http::post_streaming(
        port,
        "/completion",
        &body.to_string(),
        Duration::from_secs(600),
    )?;
    let mut buf = [0u8; 512];
    if status != 200 {
        let k = stream.read(&mut buf).unwrap_or(0);
        bail!(
            "the stream answered {status}: {}",
            String::from_utf8_lossy(&buf[..k.min(60)])
        );
    }
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("data:") {
        let k = stream.read(&mut buf)?;
        ensure!(k > 0, "the stream ended before its first event");
        seen.extend_from_slice(&buf[..k]);
    }
    // Dropping the stream closes the connection.
    Ok(())
}

/// Runs mixed requests at once, by kind: 2 is a stream dropped after its
/// first event (`cancelled`), 1 a stream read to its end, others whole
/// answers that must stop after `n_predict` tokens. Each outcome with its
/// kind; a whole answer's reply comes back.
pub(super) fn mixed(
    port: u16,
    jobs: &[(usize, Value)],
    n_predict: u64,
) -> Vec<(usize, Result<Value>)> {
    std::thread::scope(|sc| {
        let hs: Vec<_> = jobs
            .iter()
            .map(|(kind, body)| {
                sc.spawn(move || -> (usize, Result<Value>) {
                    let r = if *kind == 2 {
                        cancelled(port, body).map(|()| Value::Null)
                    } else {
                        call(port, "POST", "/completion", Some(body)).and_then(|(st, v)| {
                            ensure!(st == 200, "answered {st}: {v}");
                            // a whole answer (kind 1 streams: its events are not one JSON body):
                            // the server says it stopped, after the tokens asked for
                            ensure!(
                                *kind == 1
                                    || (v["stop"] == json!(true)
                                        && v["tokens_predicted"].as_u64() == Some(n_predict)),
                                "an incomplete answer: {v}"
                            );
                            Ok(v)
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
    })
}

/// What `mixed` gave, as figures: the requests, the answers completed (kinds
/// other than 2) and the streams dropped as asked (kind 2), the errors (an
/// error fails the part: a server request must never fail here).
pub(super) fn tally(outcomes: &[(usize, Result<Value>)]) -> Result<Figures> {
    let errors: Vec<String> = outcomes
        .iter()
        .filter_map(|(_, r)| r.as_ref().err().map(|e| format!("{e:#}")))
        .collect();
    if let Some(first) = errors.first() {
        bail!(
            "{} of {} requests failed; first: {first}",
            errors.len(),
            outcomes.len()
        );
    }
    let ok = |want_dropped: bool| {
        outcomes
            .iter()
            .filter(|(k, r)| (*k == 2) == want_dropped && r.is_ok())
            .count() as f64
    };
    Ok(Figures::from([
        ("requests".into(), outcomes.len() as f64),
        ("completed".into(), ok(false)),
        ("streams_dropped".into(), ok(true)),
        ("errors".into(), errors.len() as f64),
    ]))
}

/// Waits until no slot is processing (the server has noticed dropped streams).
pub(super) fn wait_idle(port: u16) -> Result<()> {
    let t = std::time::Instant::now();
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
    Ok(())
}

/// Running tasks the server says their clients cancelled (patch 0007's counter).
pub(super) fn cancelled_total(port: u16) -> Result<f64> {
    figure(&metrics(port)?, "tasks_cancelled_total")
}

/// One figure of a `/metrics` read, by name without the `llamacpp:` prefix.
pub(super) fn figure(m: &BTreeMap<String, f64>, k: &str) -> Result<f64> {
    m.get(k)
        .copied()
        .with_context(|| format!("/metrics has no llamacpp:{k} (is patch 0007 in the build?)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_lines_are_read_by_name() {
        let text = "# HELP llamacpp:kv_cells cells\n# TYPE llamacpp:kv_cells gauge\nllamacpp:kv_cells 16384\nllamacpp:kv_cells_used 1030\nprocess_cpu 3\nllamacpp:bad x\n";
        let m = parse_metrics(text);
        assert_eq!(m.get("kv_cells"), Some(&16384.0));
        assert_eq!(m.get("kv_cells_used"), Some(&1030.0));
        assert_eq!(m.len(), 2, "{m:?}");
    }
}
