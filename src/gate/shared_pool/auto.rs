//! The auto-share gate (patch 0007, `llama-server --kv-share-prefix auto`):
//! requests that name no pool get, by reference, the cells of the longest
//! prefix of their prompt that another slot holds, or wait for the slot that
//! is evaluating it. Clients change nothing: no request here names a pool,
//! and the agents name no slot. Each configuration names one part:
//!
//! - `correctness`: five agents over one document, one after another, with
//!   sharing on; every answer (top-10 log-probabilities, greedy tokens) against
//!   a full evaluation of the same tokens on a server with sharing off, twice
//!   in two slots (the placement floor); recall, a private note's control and
//!   probe.
//! - `memory`: physical cells for N agents sent at once, sharing on and off:
//!   on, exactly the cells of the prompts' prefix tree (P + N·s when the
//!   suffixes share nothing); off, N·(P + s).
//! - `ttft`: time to first token of agents 2..N with sharing on and off, the
//!   ratio in one run.
//! - `robustness`: 32 concurrent mixed requests with cancellations, the
//!   idle-slot cache on: no errors, no private code leaks into another
//!   agent's answer, the document is still recalled after.
//! - `eviction`: a cache too small for everything: the idle slot that frees
//!   the most cells is purged first; a prefix a running agent shares is never
//!   freed under it (its answer equals a fresh evaluation's).
//! - `openai`: the `openai` Python package, unmodified, on `/v1/chat/completions`
//!   and `/v1/completions` (gates/auto-share-openai.py).

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::client::*;
use super::correctness::{agents, compare, Verdict};
use super::*;

pub fn run(spec: &Spec, ctx: &GateCtx) -> Vec<Row> {
    run_parts(spec, ctx, |j| j.run_auto())
}

/// A request as an unmodified client sends it: no slot, no pool, the prompt cache on.
fn plain(prompt: &[i64], n_predict: usize) -> Value {
    let mut b = ask(prompt, n_predict, 0, None);
    if let Some(o) = b.as_object_mut() {
        o.remove("id_slot");
        o.insert("cache_prompt".into(), json!(true));
    }
    b
}

/// Cells of the prefix tree of `prompts`: what ideal sharing stores.
fn prefix_tree_cells(prompts: &[Vec<i64>]) -> usize {
    let mut sorted: Vec<&Vec<i64>> = prompts.iter().collect();
    sorted.sort();
    let total: usize = sorted.iter().map(|p| p.len()).sum();
    let common: usize = sorted
        .windows(2)
        .map(|w| {
            w[0].iter()
                .zip(w[1].iter())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .sum();
    total - common
}

const AUTO_REQUESTS: &str = "kv_share_auto_requests_total";

impl Job<'_> {
    /// This row's server with sharing `share` ("auto" or "off").
    fn server_sharing(&self, share: &str) -> Result<Server> {
        let mut c = self.c.clone();
        c.vars.insert("share".into(), share.into());
        self.server(&c)
    }

    pub(super) fn run_auto(&self) -> Result<Figures> {
        let p = self.count("p_tokens", 1000)?;
        let s = self.count("s_tokens", 30)?;
        match self.var("part") {
            Some("correctness") => self.auto_correctness(p),
            Some("memory") => self.auto_memory(p, s, self.count("agents", 8)?),
            Some("ttft") => self.auto_ttft(p, s, self.count("agents", 4)?),
            Some("robustness") => self.auto_robustness(p),
            Some("eviction") => self.auto_eviction(p),
            Some("openai") => self.auto_openai(p),
            Some("hostile") => self.auto_hostile(),
            other => bail!("configuration {}: unknown part {other:?}", self.c.name),
        }
    }

    /// The requests that aborted or misrouted the server (#39), with
    /// automatic sharing on.
    fn auto_hostile(&self) -> Result<Figures> {
        let server = self.server_sharing("auto")?;
        let n_slots = slots(server.port())?.len() as i64;
        let mut misses = Vec::new();
        let figures = super::hostile::hostile(server.port(), n_slots, self.text, &mut misses)?;
        std::fs::write(
            self.scratch().with_extension("hostile.txt"),
            misses.join("\n") + "\n",
        )
        .ok();
        Ok(figures)
    }

    fn auto_correctness(&self, p: usize) -> Result<Figures> {
        let n_gen = 16;
        let server = self.server_sharing("auto")?;
        let port = server.port();
        let (_, doc) = document(&server, self.text, p)?;
        let agents = agents();
        let prompts: Vec<Vec<i64>> = agents
            .iter()
            .map(|(_, sfx, _, _)| Ok(cat(&doc, &tokenize(&server, sfx)?)))
            .collect::<Result<_>>()?;
        let before = figure(&metrics(port)?, AUTO_REQUESTS)?;
        let on: Vec<Answer> = prompts
            .iter()
            .map(|pr| complete(port, plain(pr, n_gen)))
            .collect::<Result<_>>()?;
        let auto_requests = figure(&metrics(port)?, AUTO_REQUESTS)? - before;
        drop(server);
        // Sharing off: each prompt evaluated in full, in two slots.
        let server = self.server_sharing("off")?;
        let port = server.port();
        let mut verdict = Verdict::default();
        for (i, (agent, (prompt, on))) in agents.iter().zip(prompts.iter().zip(&on)).enumerate() {
            let off = complete(port, ask(prompt, n_gen, 1, None))?;
            let off2 = complete(port, ask(prompt, n_gen, 2, None))?;
            // agents after the first start from the document's cells, held by another slot
            let shared = i > 0
                && on.cache_n as usize >= p
                && (on.cache_n + on.prompt_n) as usize == prompt.len();
            verdict.agent(agent, on, &off, &off2, shared)?;
        }
        let mut figures = verdict.figures(p, "prefix_shared", agents.len() - 1, &self.scratch());
        figures.insert("auto_requests".into(), auto_requests);
        Ok(figures)
    }

    fn auto_memory(&self, p: usize, s: usize, n: usize) -> Result<Figures> {
        let server = self.server_sharing("auto")?;
        let port = server.port();
        let (_, doc) = document(&server, self.text, p)?;
        let prompts: Vec<Vec<i64>> = (0..n)
            .map(|i| Ok(cat(&doc, &suffix(&server, i, s)?)))
            .collect::<Result<_>>()?;
        let m0 = metrics(port)?;
        // all at once, no slot named: one token each (nothing generated enters the cache)
        concurrently(port, prompts.iter().map(|pr| plain(pr, 1)).collect())?;
        let on = metrics(port)?;
        drop(server);
        let server = self.server_sharing("off")?;
        let port = server.port();
        concurrently(
            port,
            prompts
                .iter()
                .enumerate()
                .map(|(i, pr)| in_slot(pr, 1, i + 1))
                .collect(),
        )?;
        let off = metrics(port)?;
        drop(server);
        let want_on = prefix_tree_cells(&prompts) as f64;
        let want_off = prompts.iter().map(Vec::len).sum::<usize>() as f64;
        let cells_on = figure(&on, "kv_cells_used")?;
        let cells_off = figure(&off, "kv_cells_used")?;
        let bytes_per_cell = figure(&on, "kv_bytes")? / figure(&on, "kv_cells")?.max(1.0);
        let mib = |cells: f64| cells * bytes_per_cell / (1024.0 * 1024.0);
        Ok(BTreeMap::from([
            ("agents".into(), n as f64),
            ("p_tokens".into(), p as f64),
            ("s_tokens".into(), s as f64),
            ("cells_auto".into(), cells_on),
            ("cells_auto_expected".into(), want_on),
            ("cells_off".into(), cells_off),
            ("cells_off_expected".into(), want_off),
            (
                "cells_exact".into(),
                (cells_on == want_on && cells_off == want_off) as u8 as f64,
            ),
            ("mib_auto".into(), mib(cells_on)),
            ("mib_off".into(), mib(cells_off)),
            ("ratio".into(), cells_off / cells_on.max(1.0)),
            (
                "auto_requests".into(),
                figure(&on, AUTO_REQUESTS)? - figure(&m0, AUTO_REQUESTS)?,
            ),
            (
                "waits".into(),
                figure(&on, "kv_share_auto_waits_total")?
                    - figure(&m0, "kv_share_auto_waits_total")?,
            ),
        ]))
    }

    /// Wall time of a one-token answer (the first token) for agents 1..n after
    /// agent 0 evaluated the document; with sharing off every agent has its own slot.
    fn auto_ttft(&self, p: usize, s: usize, n: usize) -> Result<Figures> {
        let mut mean_ms = Vec::new();
        for share in ["auto", "off"] {
            let server = self.server_sharing(share)?;
            let port = server.port();
            let (_, doc) = document(&server, self.text, p)?;
            let mut times = Vec::new();
            for i in 0..n {
                let prompt = cat(&doc, &suffix(&server, i, s)?);
                let body = if share == "auto" {
                    plain(&prompt, 1)
                } else {
                    in_slot(&prompt, 1, i + 1)
                };
                let t = Instant::now();
                let a = complete(port, body)?;
                if i > 0 {
                    times.push(t.elapsed().as_secs_f64() * 1e3);
                    let from_cache = a.cache_n as usize >= p;
                    ensure!(
                        from_cache == (share == "auto"),
                        "agent {i} with sharing {share}: cache_n {} (document {p} tokens)",
                        a.cache_n
                    );
                }
            }
            mean_ms.push(times.iter().sum::<f64>() / times.len().max(1) as f64);
        }
        Ok(BTreeMap::from([
            ("agents".into(), n as f64),
            ("ttft_auto_ms".into(), mean_ms[0]),
            ("ttft_off_ms".into(), mean_ms[1]),
            ("ttft_ratio".into(), mean_ms[1] / mean_ms[0].max(1e-9)),
        ]))
    }

    fn auto_robustness(&self, p: usize) -> Result<Figures> {
        let server = self.server_sharing("auto")?;
        let port = server.port();
        let (_, doc) = document(&server, self.text, p)?;
        let code = |i: usize| 10_000 + (i * 7_919) % 89_999;
        let before = metrics(port)?;
        let mut jobs = Vec::new();
        for i in 0..32usize {
            let kind = i % 4;
            let body = if kind == 3 {
                // not sharing: its own prompt, another part of the text
                let own = tokenize(&server, &slice(self.text, 20_000 + 1_500 * i, 1_500))?;
                json!({ "prompt": own, "n_predict": 8, "temperature": 0.0, "ignore_eos": true })
            } else {
                let sfx = tokenize(
                    &server,
                    &format!(
                        "\n\nRequest {i}: my private code is {}. What is my private code?\nAnswer: Your private code is",
                        code(i)
                    ),
                )?;
                let mut b = plain(&cat(&doc, &sfx), 8);
                b["stream"] = json!(kind != 0);
                b
            };
            jobs.push((kind, body));
        }
        let outcomes = mixed(port, &jobs, 8);
        let mut figures = tally(&outcomes)?;
        wait_idle(port)?;
        // another request's private code in a whole answer is a leak
        let mut leaks = 0usize;
        for (i, (kind, r)) in outcomes.iter().enumerate() {
            if let (0, Ok(v)) = (kind, r) {
                let text = v["content"].as_str().unwrap_or_default();
                leaks += (0..32)
                    .filter(|&j| j != i && j % 4 != 3 && text.contains(&code(j).to_string()))
                    .count();
            }
        }
        let after = metrics(port)?;
        let question = tokenize(&server, QUESTIONS[0])?;
        let last = complete(port, plain(&cat(&doc, &question), 12))?;
        figures.extend([
            (
                "cancelled".into(),
                figure(&after, "tasks_cancelled_total")?
                    - figure(&before, "tasks_cancelled_total")?,
            ),
            ("private_leak".into(), leaks as f64),
            (
                "auto_requests".into(),
                figure(&after, AUTO_REQUESTS)? - figure(&before, AUTO_REQUESTS)?,
            ),
            (
                "final_recall".into(),
                last.text.contains(PASSCODE) as u8 as f64,
            ),
        ]);
        Ok(figures)
    }

    /// A cache that cannot hold everything (`ctx` set small by the row): agent
    /// A (idle) and agent B (generating) share the document; two unrelated
    /// long prompts C and D follow; D does not fit until an idle slot is
    /// purged. Run with sharing on, then off for the floor of B's answer under
    /// the same pressure, then B alone for the reference.
    fn auto_eviction(&self, p: usize) -> Result<Figures> {
        let n_gen = self.count("n_gen", 200)?;
        let long = self.count("long_tokens", 1600)?;
        let server = self.server_sharing("auto")?;
        let (_, doc) = document(&server, self.text, p)?;
        let own = |from: usize| -> Result<Vec<i64>> {
            let mut t = tokenize(&server, &slice(self.text, from, long * 8))?;
            ensure!(
                t.len() >= long,
                "the evaluation text gives {} tokens",
                t.len()
            );
            t.truncate(long);
            Ok(t)
        };
        let prompts = [
            cat(&doc, &suffix(&server, 0, 30)?),
            cat(&doc, &suffix(&server, 1, 30)?),
            own(40_000)?,
            own(60_000)?,
        ];
        let on = pressure(&server, &prompts, p, n_gen)?;
        drop(server);
        let off = pressure(&self.server_sharing("off")?, &prompts, p, n_gen)?;
        let server = self.server_sharing("off")?;
        let reference = complete(server.port(), ask(&prompts[1], n_gen, 1, None))?;
        let (d, split) = compare(&on.b, &reference).context("agent B, sharing on")?;
        let (d_floor, _) = compare(&off.b, &reference).context("agent B, sharing off")?;
        let (d_on_off, _) = compare(&on.b, &off.b).context("agent B, sharing on vs off")?;
        Ok(BTreeMap::from([
            ("kv_cells".into(), on.n_cells as f64),
            ("b_shared".into(), (on.b.cache_n as usize >= p) as u8 as f64),
            ("b_running_at_purge".into(), on.b_running as u8 as f64),
            ("b_identical".into(), split.is_none() as u8 as f64),
            ("b_max_dlogprob".into(), d),
            ("pressure_dlogprob_off".into(), d_floor),
            ("b_vs_off_dlogprob".into(), d_on_off),
            ("b_shared_cells".into(), on.b_shared_cells as f64),
            ("idle_sharer_kept".into(), on.a_kept as u8 as f64),
            ("most_private_purged".into(), on.c_purged as u8 as f64),
        ]))
    }

    fn auto_openai(&self, p: usize) -> Result<Figures> {
        let python = self
            .ctx
            .python
            .as_ref()
            .context("the gate has no Python environment (python_packages)")?;
        let server = self.server_sharing("auto")?;
        let (doc_text, _) = document(&server, self.text, p)?;
        let doc_file = self.scratch().with_extension("doc.txt");
        crate::fsx::write_atomic(&doc_file, doc_text.as_bytes())?;
        let script = self.ctx.gates_dir.join("auto-share-openai.py");
        let out = crate::proc::Cmd::new(python)
            .arg(&script)
            .arg("--port")
            .arg(server.port().to_string())
            .arg("--doc")
            .arg(&doc_file)
            .timeout(Duration::from_secs(self.spec.timeout_s))
            .read()
            .with_context(|| format!("{} failed", script.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last = stdout
            .lines()
            .last()
            .context("the client printed nothing")?;
        let v: BTreeMap<String, f64> = serde_json::from_str(last)
            .with_context(|| format!("the client's figures: {last:?}"))?;
        Ok(v)
    }
}

/// What the eviction scenario left.
struct Pressure {
    n_cells: usize,
    /// B's answer
    b: Answer,
    /// B was still generating when D was answered
    b_running: bool,
    /// B's cells another slot held too, right after D
    b_shared_cells: u64,
    /// A's slot still held all its cells after D
    a_kept: bool,
    /// C's slot was emptied
    c_purged: bool,
}

/// A (one token), then B (`n_gen` tokens) running while C and D (one token
/// each) come, no slot named: `prompts` = [A, B, C, D].
fn pressure(server: &Server, prompts: &[Vec<i64>; 4], p: usize, n_gen: usize) -> Result<Pressure> {
    let port = server.port();
    let [a, b, c, d] = prompts;
    let n_cells = figure(&metrics(port)?, "kv_cells")? as usize;
    let (ab, abc) = (
        a.len() + b.len() + n_gen,
        a.len() + b.len() + n_gen + c.len(),
    );
    ensure!(
        abc - p < n_cells && ab - p + c.len() + d.len() > n_cells,
        "the row's ctx ({n_cells} cells) must hold A, B and C but not D as well"
    );
    complete(port, plain(a, 1))?;
    let idle_slot_of = |tokens: &[i64]| -> Result<Value> {
        slots(port)?
            .into_iter()
            .find(|s| {
                s["n_kv_cells"].as_u64() == Some(tokens.len() as u64)
                    && s["is_processing"] == json!(false)
            })
            .map(|s| s["id"].clone())
            .context("no idle slot holds the prompt's cells")
    };
    let slot_a = idle_slot_of(a)?;
    std::thread::scope(|sc| -> Result<Pressure> {
        let hb = sc.spawn(|| complete(port, plain(b, n_gen)));
        // B is running before C and D come
        let t = Instant::now();
        while !slots(port)?
            .iter()
            .any(|s| s["is_processing"] == json!(true) && s["n_kv_cells"].as_u64() > Some(p as u64))
        {
            ensure!(
                t.elapsed() < Duration::from_secs(120),
                "agent B did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        complete(port, plain(c, 1))?;
        let slot_c = idle_slot_of(c)?;
        complete(port, plain(d, 1))?;
        let b_running = !hb.is_finished();
        let now = slots(port)?;
        let b_shared_cells = now
            .iter()
            .filter(|s| s["is_processing"] == json!(true))
            .filter_map(|s| s["n_kv_cells_shared"].as_u64())
            .max()
            .unwrap_or(0);
        let cells = |id: &Value| {
            now.iter()
                .find(|s| &s["id"] == id)
                .and_then(|s| s["n_kv_cells"].as_u64())
        };
        let b = hb
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("agent B's thread panicked")))?;
        Ok(Pressure {
            n_cells,
            b,
            b_running,
            b_shared_cells,
            a_kept: cells(&slot_a) == Some(a.len() as u64),
            c_purged: cells(&slot_c) == Some(0),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_tree_counts_each_shared_prefix_once() {
        let doc: Vec<i64> = (0..100).collect();
        let a = cat(&doc, &[1000, 1, 2]);
        let b = cat(&doc, &[1000, 5, 6, 7]);
        let c = cat(&doc, &[2000]);
        // 100 shared, then 1000 shared by a and b, then their own tails
        assert_eq!(
            prefix_tree_cells(&[a.clone(), b.clone(), c.clone()]),
            100 + 1 + 2 + 3 + 1
        );
        assert_eq!(prefix_tree_cells(std::slice::from_ref(&a)), a.len());
        // identical prompts are one copy
        assert_eq!(prefix_tree_cells(&[a.clone(), a.clone()]), a.len());
        assert_eq!(prefix_tree_cells(&[vec![1], vec![2]]), 2);
    }

    #[test]
    fn a_plain_request_names_no_slot_and_no_pool() {
        let b = plain(&[1, 2, 3], 4);
        assert!(b.get("id_slot").is_none(), "{b}");
        assert!(b.get("shared_pool_slot").is_none(), "{b}");
        assert_eq!(b["cache_prompt"], json!(true));
        assert_eq!(b["n_predict"], json!(4));
    }
}
