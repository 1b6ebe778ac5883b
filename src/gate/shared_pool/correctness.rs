//! Part `correctness`: agents sharing the pool answer as a full
//! re-evaluation of the same tokens does; recall, control and probe.

use anyhow::{ensure, Context, Result};
use std::collections::BTreeMap;

use super::super::server::Server;
use super::*;

/// Two answers to the same tokens: the largest |Δ logprob| over the top-10
/// ids both list, up to and including the first position where the greedy
/// tokens differ (after it the contexts differ); that position, if any.
/// Refused (an error, not a perfect 0) when either answer lacks one
/// probability entry per generated token or a compared position shares no id.
pub(super) fn compare(a: &Answer, b: &Answer) -> Result<(f64, Option<usize>)> {
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

/// The agents of a correctness part: (name, suffix text, what its answer
/// must contain, what it must not). Three ask for the document's passcode;
/// "A-control" must recall the private note in its own suffix, "probe" asks
/// for it without having it.
pub(super) type Agent = (&'static str, String, &'static str, Option<&'static str>);

pub(super) fn agents() -> Vec<Agent> {
    vec![
        ("A", format!("{NOTE}{}", QUESTIONS[0]), PASSCODE, None),
        ("B", QUESTIONS[1].to_string(), PASSCODE, None),
        ("C", QUESTIONS[2].to_string(), PASSCODE, None),
        ("A-control", format!("{NOTE}{VAULT_QUESTION}"), VAULT, None),
        ("probe", VAULT_QUESTION.to_string(), "", Some(VAULT)),
    ]
}

pub(super) fn correctness(
    server: &Server,
    text: &str,
    p: usize,
    scratch: &std::path::Path,
) -> Result<Figures> {
    let port = server.port();
    let (_, doc) = document(server, text, p)?;
    fill_pool(port, POOL, &doc)?;
    let agents = agents();
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
    let mut verdict = Verdict::default();
    for (agent, (prompt, on)) in agents.iter().zip(&shared) {
        let off = complete(port, ask(prompt, n_gen, slot_off, None))?;
        let off2 = complete(port, ask(prompt, n_gen, slot_off2, None))?;
        let from_pool = on.cache_n as usize == p && on.prompt_n as usize == prompt.len() - p;
        verdict.agent(agent, on, &off, &off2, from_pool)?;
    }
    Ok(verdict.figures(p, "prefix_from_pool", agents.len(), scratch))
}

/// What the agents of a correctness part add up to: each agent's answer
/// with sharing against two full evaluations of its tokens without it (two
/// cell placements: the floor placement alone moves logprobs by).
#[derive(Default)]
pub(super) struct Verdict {
    max_d: f64,
    noise: f64,
    identical: usize,
    recalled: usize,
    shared: usize,
    control: f64,
    leak: f64,
    agents: usize,
    log: Vec<String>,
}

impl Verdict {
    /// One agent: `on` its answer with sharing, `off` and `off2` the unshared
    /// ones; `shared`: it started from cells another slot holds.
    pub(super) fn agent(
        &mut self,
        (name, suffix, want, not): &Agent,
        on: &Answer,
        off: &Answer,
        off2: &Answer,
        shared: bool,
    ) -> Result<()> {
        let (d, split) = compare(on, off).with_context(|| format!("agent {name}"))?;
        let (d_noise, split_noise) =
            compare(off, off2).with_context(|| format!("agent {name}, unshared twice"))?;
        self.max_d = self.max_d.max(d);
        self.noise = self.noise.max(d_noise);
        self.identical += split.is_none() as usize;
        self.shared += shared as usize;
        self.agents += 1;
        let hit = !want.is_empty() && on.text.contains(want);
        match *name {
            "A-control" => self.control = hit as u8 as f64,
            "probe" => self.leak = not.is_some_and(|x| on.text.contains(x)) as u8 as f64,
            _ => self.recalled += hit as usize,
        }
        self.log.push(format!(
            "{name}: {suffix:?}\n  shared    (cache_n {}, prompt_n {}): {:?}\n  unshared  (cache_n {}, prompt_n {}): {:?}\n  unshared' (other cells): {:?}\n  max |dlogprob| shared vs unshared {d:.3e} (tokens differ at {split:?}); unshared vs unshared' {d_noise:.3e} (at {split_noise:?})",
            on.cache_n, on.prompt_n, on.text, off.cache_n, off.prompt_n, off.text, off2.text
        ));
        Ok(())
    }

    /// The figures; `shared_key` names the fraction of the `could_share`
    /// agents that started from shared cells. The per-agent log goes beside
    /// the scratch file (best effort: it is for reading, not for the verdict).
    pub(super) fn figures(
        self,
        p: usize,
        shared_key: &str,
        could_share: usize,
        scratch: &std::path::Path,
    ) -> Figures {
        std::fs::write(scratch.with_extension("txt"), self.log.join("\n") + "\n").ok();
        BTreeMap::from([
            ("p_tokens".into(), p as f64),
            ("max_dlogprob".into(), self.max_d),
            ("placement_dlogprob".into(), self.noise),
            (
                "greedy_identical".into(),
                self.identical as f64 / self.agents as f64,
            ),
            ("recall".into(), self.recalled as f64 / 3.0),
            ("control_recall".into(), self.control),
            ("private_leak".into(), self.leak),
            (shared_key.into(), self.shared as f64 / could_share as f64),
        ])
    }
}
