//! The shared-pool gate (patch 0007, SharedKVPool in llama-server). One slot
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
//! - `validation`: every bad request is a 400 and changes no state; the
//!   requests that aborted or misrouted the server (#39) are answered
//!   (`hostile`, also the auto-share gate's `hostile` part).

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;

pub mod auto;
mod client;
mod correctness;
mod hostile;
mod memory;
pub mod mtp;
mod robustness;
mod validation;

use client::*;
use correctness::correctness;
use robustness::robustness;

use super::engine::GateCtx;
use super::report::Row;
use super::server::{param_usize, rows_by_config, start_for, Server};
use super::{Config, Spec};

pub(super) type Figures = BTreeMap<String, f64>;

pub(super) const PASSCODE: &str = "48127";
pub(super) const VAULT: &str = "58213";
pub(super) const POOL: i64 = 0;

pub(super) const QUESTIONS: [&str; 3] = [
    "\n\nQuestion: What is the secret passcode mentioned in the text above?\nAnswer: The secret passcode is",
    "\n\nAgent B asks: which secret passcode does the text above give?\nAnswer: The secret passcode is",
    "\n\nAgent C needs to recall the secret passcode from the text above.\nAnswer: The secret passcode is",
];
pub(super) const NOTE: &str =
    "\n\nPrivate note for agent A: the vault number is 58213. Keep the vault number 58213 in mind.";
pub(super) const VAULT_QUESTION: &str =
    "\n\nQuestion: What is the vault number?\nAnswer: The vault number is";

pub fn run(spec: &Spec, ctx: &GateCtx) -> Vec<Row> {
    run_parts(spec, ctx, |j| j.run())
}

/// One row per model × configuration, measured by `part`, grouped in one
/// table per part.
pub(super) fn run_parts(
    spec: &Spec,
    ctx: &GateCtx,
    part: impl Fn(&Job) -> Result<Figures>,
) -> Vec<Row> {
    let text = std::fs::read_to_string(&ctx.text).unwrap_or_default();
    let mut rows = rows_by_config(spec, |model, c| {
        part(&Job {
            spec,
            ctx,
            model,
            c,
            text: &text,
        })
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
pub(super) struct Job<'a> {
    pub(super) spec: &'a Spec,
    pub(super) ctx: &'a GateCtx,
    pub(super) model: &'a str,
    pub(super) c: &'a Config,
    pub(super) text: &'a str,
}

impl Job<'_> {
    pub(super) fn server(&self, c: &Config) -> Result<Server> {
        start_for(self.spec, self.ctx, self.model, c)
    }

    /// A configuration's variable.
    pub(super) fn var(&self, k: &str) -> Option<&str> {
        self.c.vars.get(k).map(String::as_str)
    }

    /// A count from the configuration's variables, else the gate's params.
    pub(super) fn count(&self, k: &str, default: usize) -> Result<usize> {
        match self.var(k) {
            Some(v) => v.parse().with_context(|| format!("{k} = {v:?}")),
            None => Ok(param_usize(self.spec, k, default)),
        }
    }

    /// The scratch path of this row's files.
    pub(super) fn scratch(&self) -> std::path::PathBuf {
        self.ctx.scratch.join(format!(
            "{}-{}",
            self.model,
            self.c.name.replace(['/', ' ', '='], "_")
        ))
    }

    fn run(&self) -> Result<Figures> {
        let c = self.c;
        let var = |k: &str| self.var(k);
        let p_tokens = self.count("p_tokens", 1000)?;
        let s_tokens = param_usize(self.spec, "s_tokens", 30);
        let scratch = self.scratch();
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

#[cfg(test)]
mod tests {
    use super::correctness::compare;
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
