//! `verify`: prove the chain (strict apply, lock, reverse, re-export,
//! ownership, markers, generated files).

use anyhow::Result;
use serde::Serialize;
use std::fmt::Write;
use std::time::Instant;

use super::Report;
use crate::chain;
use crate::project::Project;

#[derive(Serialize)]
pub struct Verified {
    pub ok: bool,
    pub pin: crate::manifest::Upstream,
    pub source: String,
    #[serde(flatten)]
    pub report: chain::verify::VerifyReport,
    pub seconds: f64,
}

/// Every check over the chain on its verified base (the registered ones
/// included); also which source served the base.
pub fn check_chain(
    project: &Project,
    source: Option<&str>,
) -> Result<(chain::verify::VerifyReport, String)> {
    let store = project.store()?;
    let (base, b) = project.base(&store, source, false)?;
    let series = project.series()?;
    let report = chain::verify::run(
        &store.repo,
        base,
        &series.patches,
        &project.patches_dir,
        &project.root,
        &crate::gen::checks(),
    )?;
    Ok((report, b.source.clone()))
}

pub fn run(project: &Project, source: Option<&str>) -> Result<Verified> {
    let t = Instant::now();
    let (report, source) = check_chain(project, source)?;
    Ok(Verified {
        ok: report.ok,
        pin: project.manifest.upstream.clone(),
        source,
        report,
        seconds: t.elapsed().as_secs_f64(),
    })
}

impl Report for Verified {
    fn human(&self) -> String {
        let (u, r) = (&self.pin, &self.report);
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = writeln!(s, "pin     {}", super::pin_line(u, &r.base_tree));
        let _ = writeln!(s, "source  {}", self.source);
        let _ = writeln!(s, "chain   {} patch(es)", r.patches.len());
        for c in &r.checks {
            let tag = match (&c.skipped, c.ok) {
                (Some(_), _) => "skip",
                (None, true) => "ok",
                (None, false) => "FAIL",
            };
            let _ = writeln!(s, "  {tag:<5} {}", c.name());
            if let Some(why) = &c.skipped {
                let _ = writeln!(s, "        skipped: {why}");
            }
            for p in &c.problems {
                for (i, line) in p.lines().enumerate() {
                    let _ = writeln!(s, "        {}{line}", if i == 0 { "- " } else { "  " });
                }
            }
        }
        let _ = write!(
            s,
            "verify: {} — final tree {} ({:.2}s)",
            if r.ok { "ok" } else { "FAILED" },
            r.final_tree.as_deref().unwrap_or("-"),
            self.seconds
        );
        s
    }

    fn exit_code(&self) -> i32 {
        if self.ok {
            0
        } else {
            1
        }
    }
}
