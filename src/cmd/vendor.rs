//! `vendor`: materialize the pinned upstream tree into the cache and verify its tree id.

use anyhow::Result;
use serde::Serialize;
use std::time::Instant;

use super::{short, Report};
use crate::project::Project;

#[derive(Serialize)]
pub struct Vendored {
    pub ok: bool,
    pub commit: String,
    pub tree: String,
    pub source: String,
    pub files: usize,
    pub cached: bool,
    pub seconds: f64,
}

pub fn run(project: &Project, source: Option<&str>, refresh: bool) -> Result<Vendored> {
    let t = Instant::now();
    let store = project.store()?;
    let (_, base) = project.base(&store, source, refresh)?;
    Ok(Vendored {
        ok: true,
        commit: project.manifest.upstream.commit.clone(),
        tree: base.tree.clone(),
        source: base.source.clone(),
        files: base.files,
        cached: base.cached,
        seconds: t.elapsed().as_secs_f64(),
    })
}

impl Report for Vendored {
    fn human(&self) -> String {
        format!(
            "vendor: upstream {} tree {} ({} files) from {}{} in {:.2}s",
            short(&self.commit),
            self.tree,
            self.files,
            self.source,
            if self.cached { " (cached)" } else { "" },
            self.seconds
        )
    }
}
