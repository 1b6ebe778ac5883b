//! `export`: write patches/ and patches.lock back from a stack made by `edit`,
//! canonically (optionally against a new pin).

use anyhow::Result;
use std::fmt::Write;
use std::path::Path;

use super::Report;
use crate::edit::{self, ExportReport};
use crate::project::Project;
use crate::source;

pub struct Args<'a> {
    pub from: Option<&'a Path>,
    /// A TOML file with an [upstream] table: export against this pin.
    pub pin: Option<&'a Path>,
    pub dry_run: bool,
    pub source: Option<&'a str>,
}

pub fn run(project: &Project, a: &Args) -> Result<ExportReport> {
    let store = project.store()?;
    let (base, new_manifest) = match a.pin {
        None => (project.base(&store, a.source, false)?.0, None),
        Some(pin) => {
            let (m, text) = project.pin_manifest(pin)?;
            let b = source::ensure_base(
                &store,
                &m,
                &source::Request {
                    override_source: a.source.map(str::to_string),
                    refresh: false,
                },
            )?;
            // Only [upstream] moves: the models and every other table stay.
            let manifest_path = project.root.join(crate::manifest::FILE_NAME);
            let text = crate::rebase::replace_upstream(
                &crate::fsx::read_to_string(&manifest_path)?,
                &text,
            )?;
            (git2::Oid::from_str(&b.tree)?, Some(text))
        }
    };
    let from = super::dir_or(a.from, project.layout().edit_stack())?;
    edit::export(
        &store.repo,
        base,
        &from,
        &project.patches_dir,
        a.dry_run,
        new_manifest.as_deref(),
        &crate::gen::checks(),
    )
}

impl Report for ExportReport {
    fn human(&self) -> String {
        let mut s = self.summary();
        // Writing into a String cannot fail.
        if !self.problems.is_empty() {
            let _ = write!(
                s,
                "\n  verify will fail until these are fixed in the stack (or exempted in patches/):"
            );
            for p in &self.problems {
                let _ = write!(s, "\n  - {p}");
            }
        }
        s
    }
}

impl ExportReport {
    fn summary(&self) -> String {
        if self.written.is_empty() && self.removed.is_empty() {
            return format!(
                "export: patches/ already matches the stack ({} patch file(s) unchanged)",
                self.unchanged.len()
            );
        }
        let verb = if self.dry_run { "would write" } else { "wrote" };
        let mut s = format!(
            "export: {verb} {} patch file(s), {} unchanged, {} removed, and patches.lock",
            self.written.len(),
            self.unchanged.len(),
            self.removed.len()
        );
        // Writing into a String cannot fail.
        for w in &self.written {
            let _ = write!(s, "\n  write   {w}");
        }
        for w in &self.removed {
            let _ = write!(s, "\n  remove  {w}");
        }
        s
    }
}
