//! `apply`: apply the series strictly and write the result to the workdir atomically.

use anyhow::Result;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

use super::{short, Report};
use crate::chain;
use crate::project::Project;
use crate::workdir;

pub struct Args<'a> {
    /// Apply only up to and including this patch number.
    pub upto: Option<u32>,
    pub workdir: Option<&'a Path>,
    pub dry_run: bool,
    pub force: bool,
    pub wait: bool,
    pub source: Option<&'a str>,
}

#[derive(Serialize)]
pub struct ApplyReport {
    #[serde(flatten)]
    pub sync: workdir::SyncReport,
    #[serde(skip)]
    patches: usize,
    #[serde(skip)]
    last: String,
    #[serde(skip)]
    dry_run: bool,
    #[serde(skip)]
    seconds: f64,
}

pub fn run(project: &Project, a: &Args) -> Result<ApplyReport> {
    let t = Instant::now();
    let store = project.store()?;
    let (base, _) = project.base(&store, a.source, false)?;
    let series = project.series()?;
    let patches = series.upto(a.upto)?;
    let trees = chain::apply::forward(&store.repo, base, patches)?;
    // The series must be the one its lock vouches for, as `verify` demands:
    // a patch edited by hand without `export` is refused, not applied.
    // (The bare base, `--upto 0000` or an empty series, needs no lock.)
    let lock = if patches.is_empty() {
        Vec::new()
    } else {
        chain::lock::problems(&project.patches_dir, base, patches, &trees, true)
    };
    if !lock.is_empty() {
        return Err(crate::error::CheckFailed {
            summary: format!(
                "the series does not match patches/{}; nothing applied:\n  {}\n(a patch changed by hand? bring it in with `polykv-forge edit`, commit, then `polykv-forge export`, which rewrites the lock)",
                chain::lock::FILE_NAME,
                lock.join("\n  ")
            ),
        }
        .into());
    }
    let target = trees.last().copied().unwrap_or(base);
    let dir = super::dir_or(a.workdir, project.default_workdir())?;
    let cache_root = project.cache_root()?;
    let protected = project.protected()?;
    let sync = workdir::sync(
        &store.repo,
        &workdir::SyncRequest {
            dir: &dir,
            target,
            base,
            patches: patches
                .iter()
                .zip(&trees)
                .map(|(p, t)| workdir::StatePatch {
                    file: p.file_name.clone(),
                    sha256: p.sha256.clone(),
                    tree: t.to_string(),
                })
                .collect(),
            dry_run: a.dry_run,
            force: a.force,
            wait: a.wait,
            lock: workdir::lock_path(&cache_root, &dir),
            protected: &protected,
        },
    )?;
    Ok(ApplyReport {
        sync,
        patches: patches.len(),
        last: patches
            .last()
            .map(|p| p.file_name.clone())
            .unwrap_or_else(|| "(base only)".into()),
        dry_run: a.dry_run,
        seconds: t.elapsed().as_secs_f64(),
    })
}

impl Report for ApplyReport {
    fn human(&self) -> String {
        let r = &self.sync;
        let last = &self.last;
        if r.already {
            return format!(
                "apply: {} already holds tree {} (up to {last}); 0 files touched",
                r.workdir,
                short(&r.tree)
            );
        }
        let verb = if self.dry_run {
            "would apply"
        } else {
            "applied"
        };
        let mut extra = String::new();
        if r.untracked_kept > 0 {
            extra.push_str(&format!(", {} untracked kept", r.untracked_kept));
        }
        if r.discarded > 0 {
            extra.push_str(&format!(", {} hand edit(s) discarded", r.discarded));
        }
        format!(
            "apply: {verb} {} patch(es) up to {last} → tree {} in {}: {} written, {} removed, {} unchanged{extra} ({:.2}s)",
            self.patches,
            short(&r.tree),
            r.workdir,
            r.written,
            r.removed,
            r.kept,
            self.seconds
        )
    }
}
