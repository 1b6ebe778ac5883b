//! `model fetch | list`: the test models pinned by sha256 in the manifest.

use anyhow::Result;
use serde::Serialize;

use super::Report;
use crate::project::Project;

#[derive(Serialize)]
pub struct Row {
    pub name: String,
    pub file: String,
    pub sha256: String,
    pub path: Option<String>,
    /// With `fetch --dry-run`: not in the cache, would be fetched.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub would_fetch: bool,
}

#[derive(Serialize)]
#[serde(transparent)]
pub struct Models(pub Vec<Row>);

/// The models named (all when none), fetched when `fetch` (with `dry_run`,
/// only which would be), else where the cache holds them.
pub fn run(project: &Project, names: &[String], fetch: bool, dry_run: bool) -> Result<Models> {
    let store = project.store()?;
    let models = &project.manifest.models;
    let chosen: Vec<&crate::model::Model> = if names.is_empty() {
        models.iter().collect()
    } else {
        names
            .iter()
            .map(|n| crate::model::find(models, n))
            .collect::<Result<_>>()?
    };
    let mut rows = Vec::new();
    for m in chosen {
        let path = if fetch && !dry_run {
            Some(crate::model::fetch(&store, m)?)
        } else {
            crate::model::cached(&store, m)
        };
        rows.push(Row {
            name: m.name.clone(),
            file: m.file.clone(),
            sha256: m.sha256.clone(),
            would_fetch: fetch && dry_run && path.is_none(),
            path: path.map(|p| p.display().to_string()),
        });
    }
    Ok(Models(rows))
}

impl Report for Models {
    fn human(&self) -> String {
        self.0
            .iter()
            .map(|r| {
                format!(
                    "{:<14} {}",
                    r.name,
                    match (&r.path, r.would_fetch) {
                        (Some(p), _) => p.as_str(),
                        (None, true) => "would be fetched with pip download",
                        (None, false) => "not fetched (polykv-forge model fetch)",
                    }
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}
