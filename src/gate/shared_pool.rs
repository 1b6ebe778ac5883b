//! The shared-pool gate (patch 0003, SharedKVPool in llama-server). One slot
//! of a `--kv-unified` server holds a document (the pool); agents name it in
//! `shared_pool_slot`, get its cells added to their own sequence and evaluate
//! only their private suffix. Each configuration names one part:
//!
//! - `correctness`: agents' top-10 log-probabilities and greedy tokens with
//!   sharing on equal those of a full re-evaluation of the same tokens; every
//!   agent recalls the document's passcode; a private note in one agent's
//!   suffix is recalled by that agent (control) and not by another (probe).
//! - `memory`: physical KV cells in use for N agents with sharing on and off,
//!   read from `/metrics`, against P + N·s and N·(P + s).
//! - `robustness`: 32 concurrent requests (sharing, streamed, cancelled,
//!   not sharing) with the idle-slot cache on; the pool's cells are intact and
//!   a final agent still recalls the passcode.
//! - `validation`: every bad request is a 400 and changes no state.

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Read;
use std::time::{Duration, Instant};

use super::engine::Ctx;
use super::report::Row;
use super::server::{call, param_usize, post, rows_by_config, start_for, tokens_of, Server};
use super::{Config, Spec};

type Figures = BTreeMap<String, f64>;

const PASSCODE: &str = "48127";
const VAULT: &str = "58213";
const POOL: i64 = 0;

const QUESTIONS: [&str; 3] = [
    "\n\nQuestion: What is the secret passcode mentioned in the text above?\nAnswer: The secret passcode is",
    "\n\nAgent B asks: which secret passcode does the text above give?\nAnswer: The secret passcode is",
    "\n\nAgent C needs to recall the secret passcode from the text above.\nAnswer: The secret passcode is",
];
const NOTE: &str =
    "\n\nPrivate note for agent A: the vault number is 58213. Keep the vault number 58213 in mind.";
const VAULT_QUESTION: &str = "\n\nQuestion: What is the vault number?\nAnswer: The vault number is";

pub fn run(spec: &Spec, ctx: &Ctx) -> Vec<Row> {
    let text = std::fs::read_to_string(&ctx.text).unwrap_or_default();
    let mut rows = rows_by_config(spec, |model, c| {
        Job {
            spec,
            ctx,
            model,
            c,
            text: &text,
        }
        .run()
    });
    // one table per part
    for (row, c) in rows
        .iter_mut()
        .zip(spec.models.iter().flat_map(|_| &spec.configs))
    {
        row.group = c.vars.get("part").cloned();
    }
    rows
}

/// One configuration of one model.
struct Job<'a> {
    spec: &'a Spec,
    ctx: &'a Ctx,
    model: &'a str,
    c: &'a Config,
    text: &'a str,
}

impl Job<'_> {
    fn server(&self, c: &Config) -> Result<Server> {
        start_for(self.spec, self.ctx, self.model, c)
    }

    fn run(&self) -> Result<Figures> {
        let c = self.c;
        let var = |k: &str| c.vars.get(k).map(String::as_str);
        let p_tokens = var("p_tokens")
            .map(|v| v.parse::<usize>())
            .transpose()
            .context("p_tokens")?
            .unwrap_or_else(|| param_usize(self.spec, "p_tokens", 1000));
        let s_tokens = param_usize(self.spec, "s_tokens", 30);
        let scratch = self.ctx.scratch.join(format!(
            "{}-{}",
            self.model,
            c.name.replace(['/', ' ', '='], "_")
        ));
        match var("part") {
            Some("correctness") => correctness(&self.server(c)?, self.text, p_tokens, &scratch),
            Some("memory") => {
                let n: usize = var("agents")
                    .context("a memory configuration needs `agents`")?
                    .parse()
                    .context("agents")?;
                self.memory(p_tokens, s_tokens, n)
            }
            Some("robustness") => robustness(&self.server(c)?, self.text, p_tokens),
            Some("validation") => self.validation(p_tokens),
            other => bail!("configuration {}: unknown part {other:?}", c.name),
        }
    }
}

/// `chars` characters of the text from `from` (in characters).
fn slice(text: &str, from: usize, chars: usize) -> String {
    text.chars().skip(from).take(chars).collect()
}

fn tokenize(server: &Server, text: &str) -> Result<Vec<i64>> {
    tokens_of(
        &post(server, "/tokenize", &json!({ "content": text }))?,
        "tokens",
    )
}

/// The document: `p` tokens of the text with the passcode line in the middle.
fn document(server: &Server, text: &str, p: usize) -> Result<(String, Vec<i64>)> {
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

fn detokenize(server: &Server, tokens: &[i64]) -> Result<String> {
    let v = post(server, "/detokenize", &json!({ "tokens": tokens }))?;
    Ok(v["content"].as_str().unwrap_or_default().to_string())
}

fn cat(a: &[i64], b: &[i64]) -> Vec<i64> {
    a.iter().chain(b).copied().collect()
}

/// Fills slot `id` with `tokens` and makes it a pool.
fn fill_pool(port: u16, id: i64, tokens: &[i64]) -> Result<()> {
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

fn metrics(port: u16) -> Result<BTreeMap<String, f64>> {
    let (st, text) = crate::http::request(port, "GET", "/metrics", None, Duration::from_secs(60))?;
    ensure!(
        st == 200,
        "/metrics answered {st} (the server needs --metrics)"
    );
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some((k, v)) = line.split_once(' ') {
            if let (Some(k), Ok(v)) = (k.strip_prefix("llamacpp:"), v.trim().parse::<f64>()) {
                out.insert(k.to_string(), v);
            }
        }
    }
    for k in ["kv_cells", "kv_cells_used", "kv_cell_refs", "kv_bytes"] {
        ensure!(
            out.contains_key(k),
            "/metrics has no llamacpp:{k} (is patch 0003 in the build?)"
        );
    }
    Ok(out)
}

fn slots(port: u16) -> Result<Vec<Value>> {
    let (st, v) = call(port, "GET", "/slots", None)?;
    ensure!(st == 200, "/slots answered {st}");
    v.as_array().cloned().context("/slots is not an array")
}

/// What the KV holds, to compare before and after a refused request.
fn state(port: u16) -> Result<String> {
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

struct Answer {
    tokens: Vec<i64>,
    text: String,
    /// per generated token: id → logprob of the top 10
    top: Vec<BTreeMap<i64, f64>>,
    cache_n: u64,
    prompt_n: u64,
}

fn complete(port: u16, body: Value) -> Result<Answer> {
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

fn ask(prompt: &[i64], n_predict: usize, slot: usize, share: Option<usize>) -> Value {
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

/// Two answers to the same tokens: the largest |Δ logprob| over the top-10
/// ids both list, up to and including the first position where the greedy
/// tokens differ (after it the contexts differ); that position, if any.
/// Refused (an error, not a perfect 0) when either answer lacks one
/// probability entry per generated token or a compared position shares no id.
fn compare(a: &Answer, b: &Answer) -> Result<(f64, Option<usize>)> {
    for x in [a, b] {
        ensure!(
            !x.tokens.is_empty() && x.top.len() == x.tokens.len(),
            "the server returned {} probability entries for {} generated tokens; comparing needs one per token",
            x.top.len(),
            x.tokens.len()
        );
    }
    let mut max_d = 0.0f64;
    let n = a.tokens.len().min(b.tokens.len());
    for i in 0..n {
        let mut shared_ids = 0usize;
        for (id, lp) in &a.top[i] {
            if let Some(lq) = b.top[i].get(id) {
                max_d = max_d.max((lp - lq).abs());
                shared_ids += 1;
            }
        }
        ensure!(
            shared_ids > 0,
            "token {i}: the two answers' top probabilities share no token id"
        );
        if a.tokens[i] != b.tokens[i] {
            return Ok((max_d, Some(i)));
        }
    }
    Ok((max_d, (a.tokens.len() != b.tokens.len()).then_some(n)))
}

fn correctness(
    server: &Server,
    text: &str,
    p: usize,
    scratch: &std::path::Path,
) -> Result<Figures> {
    let port = server.port();
    let (_, doc) = document(server, text, p)?;
    fill_pool(port, POOL, &doc)?;
    // (name, suffix text, what it must contain, what it must not)
    let agents: Vec<(&str, String, &str, Option<&str>)> = vec![
        ("A", format!("{NOTE}{}", QUESTIONS[0]), PASSCODE, None),
        ("B", QUESTIONS[1].to_string(), PASSCODE, None),
        ("C", QUESTIONS[2].to_string(), PASSCODE, None),
        ("A-control", format!("{NOTE}{VAULT_QUESTION}"), VAULT, None),
        ("probe", VAULT_QUESTION.to_string(), "", Some(VAULT)),
    ];
    let n_gen = 16;
    // Slots 1..=5 hold the sharing agents, all resident at once (A's private
    // cells are there when the probe runs); 6 and 7 re-evaluate every prompt
    // in full without sharing, twice: two cell placements of the same tokens.
    let (slot_off, slot_off2) = (agents.len() + 1, agents.len() + 2);
    let mut shared = Vec::new();
    for (i, (_, suffix, _, _)) in agents.iter().enumerate() {
        let prompt = cat(&doc, &tokenize(server, suffix)?);
        shared.push((
            prompt.clone(),
            complete(port, ask(&prompt, n_gen, i + 1, Some(p)))?,
        ));
    }
    let mut max_d = 0.0f64;
    let mut noise = 0.0f64;
    let mut identical = 0usize;
    let mut recalled = 0usize;
    let mut from_pool = 0usize;
    let mut control = 0.0;
    let mut leak = 0.0;
    let mut log = Vec::new();
    for ((name, suffix, want, not), (prompt, on)) in agents.iter().zip(&shared) {
        let off = complete(port, ask(prompt, n_gen, slot_off, None))?;
        let off2 = complete(port, ask(prompt, n_gen, slot_off2, None))?;
        let (d, split) = compare(on, &off).with_context(|| format!("agent {name}"))?;
        let (d_noise, split_noise) =
            compare(&off, &off2).with_context(|| format!("agent {name}, unshared twice"))?;
        max_d = max_d.max(d);
        noise = noise.max(d_noise);
        identical += split.is_none() as usize;
        let n_suffix = prompt.len() - p;
        if on.cache_n as usize == p && on.prompt_n as usize == n_suffix {
            from_pool += 1;
        }
        let hit = !want.is_empty() && on.text.contains(want);
        match *name {
            "A-control" => control = hit as u8 as f64,
            "probe" => leak = not.is_some_and(|x| on.text.contains(x)) as u8 as f64,
            _ => recalled += hit as usize,
        }
        log.push(format!(
            "{name}: suffix {n_suffix} tokens {suffix:?}\n  shared    (cache_n {}, prompt_n {}): {:?}\n  unshared  (cache_n {}, prompt_n {}): {:?}\n  unshared' (other cells): {:?}\n  max |dlogprob| shared vs unshared {d:.3e} (tokens differ at {split:?}); unshared vs unshared' {d_noise:.3e} (at {split_noise:?})",
            on.cache_n, on.prompt_n, on.text, off.cache_n, off.prompt_n, off.text, off2.text
        ));
    }
    std::fs::write(scratch.with_extension("txt"), log.join("\n") + "\n").ok();
    let n = agents.len() as f64;
    Ok(BTreeMap::from([
        ("p_tokens".into(), p as f64),
        ("max_dlogprob".into(), max_d),
        ("placement_dlogprob".into(), noise),
        ("greedy_identical".into(), identical as f64 / n),
        ("recall".into(), recalled as f64 / 3.0),
        ("control_recall".into(), control),
        ("private_leak".into(), leak),
        ("prefix_from_pool".into(), from_pool as f64 / n),
    ]))
}

/// A private suffix of exactly `s` tokens for agent `i`.
fn suffix(server: &Server, i: usize, s: usize) -> Result<Vec<i64>> {
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
fn concurrently(port: u16, bodies: Vec<Value>) -> Result<Vec<Value>> {
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

impl Job<'_> {
    fn memory(&self, p: usize, s: usize, n: usize) -> Result<Figures> {
        // Sharing on: the pool, then N agents at once (one token each: nothing generated enters the cache).
        let server = self.server(self.c)?;
        let port = server.port();
        let (_, doc) = document(&server, self.text, p)?;
        let suffixes: Vec<Vec<i64>> = (0..n)
            .map(|i| suffix(&server, i, s))
            .collect::<Result<_>>()?;
        fill_pool(port, POOL, &doc)?;
        let bodies = suffixes
            .iter()
            .enumerate()
            .map(|(i, sfx)| ask(&cat(&doc, sfx), 1, i + 1, Some(p)))
            .collect();
        let replies = concurrently(port, bodies)?;
        for r in &replies {
            ensure!(
                r["timings"]["cache_n"].as_u64() == Some(p as u64)
                    && r["timings"]["prompt_n"].as_u64() == Some(s as u64),
                "a sharing agent did not start from the pool: timings {}",
                r["timings"]
            );
        }
        let on = metrics(port)?;
        drop(server);
        // Sharing off: a fresh server, the same N prompts.
        let server = self.server(self.c)?;
        let port = server.port();
        let bodies = suffixes
            .iter()
            .enumerate()
            .map(|(i, sfx)| {
                let mut b = ask(&cat(&doc, sfx), 1, i + 1, None);
                b["cache_prompt"] = json!(true);
                b
            })
            .collect();
        concurrently(port, bodies)?;
        let off = metrics(port)?;
        drop(server);
        let bytes_per_cell = on["kv_bytes"] / on["kv_cells"].max(1.0);
        let mib = |cells: f64| cells * bytes_per_cell / (1024.0 * 1024.0);
        let (p, s, nf) = (p as f64, s as f64, n as f64);
        let want_on = p + nf * s;
        let want_off = nf * (p + s);
        let exact = on["kv_cells_used"] == want_on && off["kv_cells_used"] == want_off;
        Ok(BTreeMap::from([
            ("agents".into(), nf),
            ("p_tokens".into(), p),
            ("s_tokens".into(), s),
            ("cells_shared".into(), on["kv_cells_used"]),
            ("cells_shared_expected".into(), want_on),
            ("refs_shared".into(), on["kv_cell_refs"]),
            ("cells_unshared".into(), off["kv_cells_used"]),
            ("cells_unshared_expected".into(), want_off),
            ("cells_exact".into(), exact as u8 as f64),
            ("mib_shared".into(), mib(on["kv_cells_used"])),
            ("mib_unshared".into(), mib(off["kv_cells_used"])),
            (
                "ratio".into(),
                off["kv_cells_used"] / on["kv_cells_used"].max(1.0),
            ),
        ]))
    }
}

/// A streamed completion dropped after its first event: the server cancels it.
fn cancelled(port: u16, body: &Value) -> Result<()> {
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

/// Running tasks the server says their clients cancelled (patch 0003's counter).
fn cancelled_total(port: u16) -> Result<f64> {
    metrics(port)?
        .get("tasks_cancelled_total")
        .copied()
        .context("/metrics has no llamacpp:tasks_cancelled_total (is patch 0003 in the build?)")
}

fn robustness(server: &Server, text: &str, p: usize) -> Result<Figures> {
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

impl Job<'_> {
    fn validation(&self, p: usize) -> Result<Figures> {
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
        drop(server);
        // A server without a unified KV cache refuses every sharing request.
        let mut split = c.clone();
        split
            .vars
            .insert("unified".into(), "--no-kv-unified".into());
        let server = self.server(&split)?;
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
        Ok(BTreeMap::from([
            ("cases".into(), n + 2.0),
            (
                "refused_400".into(),
                (answered_400 + busy as usize + not_unified as usize) as f64 / (n + 2.0),
            ),
            ("state_unchanged".into(), unchanged as f64 / n),
            ("oai_completions_shared".into(), oai as u8 as f64),
            ("chat_shared".into(), chat as u8 as f64),
            ("restore_refused".into(), restore_refused as u8 as f64),
            ("pool_released".into(), pool_released as u8 as f64),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(tokens: &[i64], tops: &[&[(i64, f64)]]) -> Answer {
        Answer {
            tokens: tokens.to_vec(),
            text: String::new(),
            top: tops.iter().map(|t| t.iter().copied().collect()).collect(),
            cache_n: 0,
            prompt_n: 0,
        }
    }

    #[test]
    fn compare_stops_at_the_first_differing_token() {
        let a = answer(
            &[1, 2, 3],
            &[&[(1, -0.1), (9, -3.0)], &[(2, -0.2)], &[(3, -0.3)]],
        );
        let same = answer(
            &[1, 2, 3],
            &[&[(1, -0.1), (9, -3.0)], &[(2, -0.2)], &[(3, -0.3)]],
        );
        assert_eq!(compare(&a, &same).unwrap(), (0.0, None));
        // No probabilities (or fewer than tokens): an error, never a perfect 0.
        let bare = answer(&[1, 2, 3], &[]);
        let e = compare(&a, &bare).unwrap_err().to_string();
        assert!(
            e.contains("0 probability entries for 3 generated tokens"),
            "{e}"
        );
        assert!(compare(&bare, &bare).is_err());
        assert!(compare(&answer(&[], &[]), &answer(&[], &[])).is_err());
        // Disjoint top lists at a compared position cannot be compared.
        let disjoint = answer(&[1, 2, 3], &[&[(5, -0.1)], &[(2, -0.2)], &[(3, -0.3)]]);
        assert!(compare(&a, &disjoint).is_err());
        // One answer stops early: they differ where it stopped.
        let short = answer(&[1, 2], &[&[(1, -0.1)], &[(2, -0.2)]]);
        assert_eq!(compare(&a, &short).unwrap(), (0.0, Some(2)));
        // differs by 0.5 at position 0, then the greedy token differs at 1;
        // position 2 (a different context) is not compared
        let b = answer(
            &[1, 7, 3],
            &[
                &[(1, -0.1), (9, -3.5)],
                &[(7, -0.2), (2, -0.25)],
                &[(3, -9.0)],
            ],
        );
        let (d, at) = compare(&a, &b).unwrap();
        assert!((d - 0.5).abs() < 1e-12, "{d}");
        assert_eq!(at, Some(1));
    }

    #[test]
    fn cat_and_slice() {
        assert_eq!(cat(&[1, 2], &[3]), vec![1, 2, 3]);
        assert_eq!(slice("héllo wörld", 1, 4), "éllo");
    }
}
