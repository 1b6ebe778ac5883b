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
    dry_run: bool,
    source: Option<&str>,
) -> Result<EditReport> {
    let store = project.store()?;
    let (base, _) = project.base(&store, source, false)?;
    let series = project.series()?;
    let dir = super::dir_or(dir, project.layout().edit_stack())?;
    let protected = project.protected()?;
    edit::edit(
        &store.repo,
        base,
        &project.manifest.upstream.commit,
        &series,
        &edit::StackDir {
            dir: &dir,
            force,
            dry_run,
            protected: &protected,
        },
    )
}

impl Report for EditReport {
    fn human(&self) -> String {
        if self.dry_run {
            return format!(
                "edit: would create {} patch(es) as commits on branch `{}` in {} (the chain applies); nothing written",
                self.patches,
                edit::BRANCH,
                self.dir
            );
        }
        format!(
            "edit: {} patch(es) as commits on branch `{}` in {} (base commit {})\n  change them with git (commit --amend, rebase -i, new commits), then run `polykv-forge export`",
            self.patches,
            edit::BRANCH,
            self.dir,
            short(self.base_commit.as_deref().unwrap_or(""))
        )
    }
}
