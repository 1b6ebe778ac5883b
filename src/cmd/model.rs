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
}

#[derive(Serialize)]
#[serde(transparent)]
pub struct Models(pub Vec<Row>);

/// The models named (all when none), fetched when `fetch`, else where the
/// cache holds them.
pub fn run(project: &Project, names: &[String], fetch: bool) -> Result<Models> {
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
        let path = if fetch {
            Some(crate::model::fetch(&store, m)?)
        } else {
            crate::model::cached(&store, m)
        };
        rows.push(Row {
            name: m.name.clone(),
            file: m.file.clone(),
            sha256: m.sha256.clone(),
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
                    r.path
                        .as_deref()
                        .unwrap_or("not fetched (polykv-forge model fetch)")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}
