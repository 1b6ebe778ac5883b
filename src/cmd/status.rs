//! `status`: pin, source, chain, workdir state (clean / applied up to N / drifted).

use anyhow::Result;
use serde::Serialize;
use std::fmt::Write;
use std::path::Path;

use super::Report;
use crate::project::Project;
use crate::status;

#[derive(Serialize)]
pub struct Status {
    pub pin: crate::manifest::Upstream,
    pub vendored: bool,
    pub source: Option<String>,
    pub chain: Vec<status::ChainRow>,
    pub workdir: status::WorkdirStatus,
}

pub fn run(project: &Project, workdir: Option<&Path>) -> Result<Status> {
    let store = project.store()?;
    let pin = project.manifest.tree_oid()?;
    let record = store.base_record(pin);
    let vendored = store.has_base(pin);
    let series = project.series()?;
    let chain = status::chain_rows(&series.patches)?;
    let dir = super::dir_or(workdir, project.default_workdir())?;
    let workdir = status::workdir_status(&dir, &series.patches)?;
    Ok(Status {
        pin: project.manifest.upstream.clone(),
        vendored,
        source: record.map(|r| r.source),
        chain,
        workdir,
    })
}

impl Report for Status {
    fn human(&self) -> String {
        let u = &self.pin;
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = writeln!(s, "pin      {}", super::pin_line(u, &u.tree));
        let _ = writeln!(
            s,
            "source   {}",
            match (&self.source, self.vendored) {
                (Some(src), true) => src.clone(),
                _ => "not vendored yet (run `polykv-forge vendor`)".into(),
            }
        );
        let _ = writeln!(s, "chain    {} patch(es)", self.chain.len());
        for r in &self.chain {
            let _ = writeln!(
                s,
                "  {}  {:<44} {:>3} file(s)  +{} -{}",
                r.number, r.file, r.files, r.added, r.removed
            );
        }
        let w = &self.workdir;
        let what = match w.state.as_str() {
            "clean" | "drifted" => format!(
                "{}, applied up to {}{}",
                w.state,
                w.applied_upto
                    .as_deref()
                    .filter(|s| !s.is_empty())
                    .unwrap_or("the base"),
                if w.current {
                    ""
                } else {
                    " (not the current chain: run apply)"
                }
            ),
            st => st.to_string(),
        };
        let _ = write!(s, "workdir  {} — {what}", w.path);
        for m in &w.modified {
            let _ = write!(s, "\n  modified  {m}");
        }
        for d in &w.deleted {
            let _ = write!(s, "\n  deleted   {d}");
        }
        if w.untracked > 0 {
            let _ = write!(
                s,
                "\n  {} untracked file(s) kept across applies",
                w.untracked
            );
        }
        s
    }
}
