//! `rebase`: replay the chain onto a new pin (strict apply or a 3-way merge
//! per file) and, when every patch lands, write the manifest's pin, the
//! patches and the lock together; `--write-conflicts` leaves the rebased
//! stack with its conflicts marked for `edit`-style resolution.

use anyhow::Result;
use std::fmt::Write;
use std::path::Path;

use super::{short, Report};
use crate::chain::{self, lock::Lock, Series};
use crate::project::Project;
use crate::source;

pub struct Args<'a> {
    /// The new pin: a TOML file with an [upstream] table.
    pub to: &'a Path,
    pub to_source: Option<&'a str>,
    pub drop_upstreamed: bool,
    pub write_conflicts: Option<&'a Path>,
    pub dry_run: bool,
    pub source: Option<&'a str>,
}

#[derive(serde::Serialize)]
#[serde(transparent)]
pub struct Rebased {
    pub report: crate::rebase::RebaseReport,
    /// Where `--write-conflicts` left the stack, and the pin file.
    #[serde(skip)]
    conflicts: Option<(String, String)>,
}

pub fn run(project: &Project, a: &Args) -> Result<Rebased> {
    let store = project.store()?;
    let (old_base, _) = project.base(&store, a.source, false)?;
    let (new_m, pin_text) = project.pin_manifest(a.to)?;
    let nb = source::ensure_base(
        &store,
        &new_m,
        &source::Request {
            override_source: a.to_source.map(str::to_string),
            refresh: false,
        },
    )?;
    let new_base = git2::Oid::from_str(&nb.tree)?;
    let series = project.series()?;
    let (mut report, rebased) = crate::rebase::plan(
        &store.repo,
        old_base,
        new_base,
        &new_m.upstream.commit,
        &series.patches,
        a.drop_upstreamed,
    )?;
    let mut conflicts = None;
    if let Some(dir) = a.write_conflicts {
        let dir = crate::fsx::absolute(dir)?;
        let stack = Series {
            dir: project.patches_dir.clone(),
            patches: rebased
                .iter()
                .map(|n| chain::PatchFile::from_bytes(&n.file_name, n.bytes.clone()))
                .collect::<Result<_>>()?,
        };
        crate::edit::edit(
            &store.repo,
            new_base,
            &new_m.upstream.commit,
            &stack,
            &crate::edit::StackDir {
                dir: &dir,
                force: false,
                dry_run: false,
                protected: &project.protected()?,
            },
        )?;
        conflicts = Some((dir.display().to_string(), a.to.display().to_string()));
    }
    crate::failpoint::hit("rebase-before-write");
    // Staged (outside the project for a dry run) and verified with every
    // check, so a dry run reports what a real run would refuse.
    if report.ok {
        let lock = Lock::of(
            new_base,
            rebased
                .iter()
                .map(|n| (n.file_name.as_str(), n.bytes.as_slice(), Some(n.tree))),
        );
        let manifest_path = project.root.join(crate::manifest::FILE_NAME);
        let manifest_text = crate::rebase::replace_upstream(
            &crate::fsx::read_to_string(&manifest_path)?,
            &pin_text,
        )?;
        let files: Vec<(String, Vec<u8>)> = rebased
            .iter()
            .map(|n| (n.file_name.clone(), n.bytes.clone()))
            .collect();
        let staged = crate::edit::stage_series(
            &project.patches_dir,
            &files,
            &lock.render(),
            Some(&manifest_text),
            a.dry_run,
        )?;
        report
            .checks
            .extend(staged.verify(&store.repo, new_base, &crate::gen::checks())?);
        if !report.checks.is_empty() {
            report.ok = false;
        } else if !a.dry_run {
            staged.commit()?;
            report.written = true;
        }
    }
    Ok(Rebased { report, conflicts })
}

impl Report for Rebased {
    fn human(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        macro_rules! say {
            ($($t:tt)*) => {
                let _ = writeln!(out, $($t)*);
            };
        }
        if let Some((dir, pin)) = &self.conflicts {
            say!(
                "rebase: the rebased stack is in {dir} (conflicts marked); resolve, `git commit --amend`, then\n  polykv-forge export --from {dir} --pin {pin}"
            );
        }
        let r = &self.report;
        say!(
            "rebase: {} → {} (commit {})",
            short(&r.from_tree),
            short(&r.to_tree),
            short(&r.to_commit)
        );
        say!("| patch | outcome | files | drift |");
        say!("|---|---|---|---|");
        for p in &r.patches {
            let files: Vec<String> = p
                .files
                .iter()
                .map(|f| format!("{} {}", f.path, f.result))
                .collect();
            say!(
                "| {} | {}{} | {} | {} |",
                p.patch,
                p.outcome,
                p.after_conflict
                    .as_deref()
                    .map(|c| format!(" (after the conflict in {c})"))
                    .unwrap_or_default(),
                files.join("; "),
                if p.drift.is_empty() {
                    "-".to_string()
                } else {
                    p.drift.join("; ")
                }
            );
        }
        for p in &r.patches {
            for f in &p.files {
                if let Some(d) = &f.detail {
                    say!("  {}: {}: {d}", p.patch, f.path);
                }
                for (i, c) in f.conflicts.iter().enumerate() {
                    say!("  {}: {}: conflict {}:", p.patch, f.path, i + 1);
                    say!(
                        "    upstream:\n      {}",
                        c.upstream.replace('\n', "\n      ")
                    );
                    say!("    patch:\n      {}", c.patch.replace('\n', "\n      "));
                }
            }
            for m in &p.markers_vanished {
                say!("  {m}");
            }
        }
        for c in &r.checks {
            say!("  check: {c}");
        }
        for d in &r.dropped {
            say!("  dropped (already upstream): {d}");
        }
        let undecided = r.patches.iter().any(|p| {
            p.outcome == crate::rebase::PatchOutcome::AlreadyUpstream
                && !r.dropped.contains(&p.patch)
        });
        if undecided {
            say!("  some patches are already upstream: rerun with --drop-upstreamed to drop them");
        }
        say!(
            "rebase: {}",
            match (r.ok, r.written) {
                (true, true) =>
                    "ok — vendor-manifest.toml, patches/ and patches.lock updated together",
                (true, false) => "ok (dry run: nothing written)",
                (false, _) => "not done — nothing written (see above)",
            }
        );
        out.trim_end().to_string()
    }

    fn exit_code(&self) -> i32 {
        if self.report.ok {
            0
        } else {
            1
        }
    }
}
