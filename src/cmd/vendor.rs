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
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

pub fn run(
    project: &Project,
    source: Option<&str>,
    refresh: bool,
    dry_run: bool,
) -> Result<Vendored> {
    let t = Instant::now();
    let store = project.store()?;
    if dry_run {
        // What a run would do: nothing when the cache holds the pinned tree,
        // else try the sources in order (the first that yields the tree wins).
        let pin = project.manifest.tree_oid()?;
        let record = store
            .base_record(pin)
            .filter(|_| store.has_base(pin) && !refresh);
        let source = match (&record, source) {
            (Some(r), _) => r.source.clone(),
            (None, Some(s)) => format!("would try {s}"),
            (None, None) => format!(
                "would try {}",
                project
                    .manifest
                    .upstream
                    .sources
                    .iter()
                    .map(|s| s.describe())
                    .collect::<Vec<_>>()
                    .join(", then ")
            ),
        };
        return Ok(Vendored {
            ok: true,
            commit: project.manifest.upstream.commit.clone(),
            tree: pin.to_string(),
            source,
            files: 0,
            cached: record.is_some(),
            seconds: t.elapsed().as_secs_f64(),
            dry_run,
        });
    }
    let (_, base) = project.base(&store, source, refresh)?;
    Ok(Vendored {
        ok: true,
        commit: project.manifest.upstream.commit.clone(),
        tree: base.tree.clone(),
        source: base.source.clone(),
        files: base.files,
        cached: base.cached,
        seconds: t.elapsed().as_secs_f64(),
        dry_run,
    })
}

impl Report for Vendored {
    fn human(&self) -> String {
        if self.dry_run {
            return format!(
                "vendor (dry run): upstream {} tree {}: {}; nothing written",
                short(&self.commit),
                self.tree,
                if self.cached {
                    format!("in the cache (from {})", self.source)
                } else {
                    self.source.clone()
                }
            );
        }
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
