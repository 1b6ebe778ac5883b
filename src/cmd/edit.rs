//! `edit`: materialize the series as a git stack (one commit per patch) to edit with git.

use anyhow::Result;
use std::path::Path;

use super::{short, Report};
use crate::edit::{self, EditReport};
use crate::project::Project;

pub fn run(
    project: &Project,
    dir: Option<&Path>,
    force: bool,
    source: Option<&str>,
) -> Result<EditReport> {
    let store = project.store()?;
    let (base, _) = project.base(&store, source, false)?;
    let series = project.series()?;
    let dir = super::dir_or(dir, project.root.join("work").join("edit"))?;
    edit::edit(
        &store.repo,
        base,
        &project.manifest.upstream.commit,
        &series,
        &dir,
        force,
    )
}

impl Report for EditReport {
    fn human(&self) -> String {
        format!(
            "edit: {} patch(es) as commits on branch `{}` in {} (base commit {})\n  change them with git (commit --amend, rebase -i, new commits), then run `polykv-forge export`",
            self.patches,
            edit::BRANCH,
            self.dir,
            short(&self.base_commit)
        )
    }
}
