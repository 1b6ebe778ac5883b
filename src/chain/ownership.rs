//! Path ownership: a file the chain adds is created by exactly one patch, and
//! no patch deletes or renames an upstream file unless `patches/ownership.toml`
//! allows it, with a reason.

use crate::chain::parsed::Change;
use anyhow::{Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

use crate::chain::PatchFile;

pub const FILE_NAME: &str = "ownership.toml";

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Ownership {
    #[serde(default)]
    pub allow: Vec<Allow>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allow {
    pub patch: String,
    pub path: String,
    pub action: Action,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    Delete,
    Rename,
}

impl Ownership {
    pub fn load(dir: &Path) -> Result<Ownership> {
        let p = dir.join(FILE_NAME);
        if !p.exists() {
            return Ok(Ownership::default());
        }
        let text = crate::fsx::read_to_string(&p)?;
        toml::from_str(&text).with_context(|| format!("parsing {}", p.display()))
    }

    fn allows(&self, patch: &str, path: &str, action: Action) -> bool {
        self.allow
            .iter()
            .any(|a| a.patch == patch && a.path == path && a.action == action)
    }
}

/// Checks the chain; returns one line per violation.
pub fn check(
    patches: &[PatchFile],
    base_has: &dyn Fn(&str) -> bool,
    rules: &Ownership,
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut creator: BTreeMap<String, String> = BTreeMap::new();
    for p in patches {
        for f in &p.parsed()?.files {
            let (old, new) = (f.old_path.clone(), f.new_path.clone());
            match f.change {
                Change::Added => {
                    let path = new.unwrap_or_default();
                    if let Some(first) = creator.get(&path) {
                        problems.push(format!(
                            "{path}: created by {first} and again by {}; a file the chain adds has exactly one owner",
                            p.file_name
                        ));
                    } else {
                        creator.insert(path, p.file_name.clone());
                    }
                }
                Change::Deleted => {
                    let path = old.unwrap_or_default();
                    if base_has(&path) && !rules.allows(&p.tag(), &path, Action::Delete) {
                        problems.push(format!(
                            "{}: deletes the upstream file {path}; allow it in patches/{FILE_NAME} with a reason",
                            p.file_name
                        ));
                    }
                }
                Change::Renamed => {
                    let path = old.unwrap_or_default();
                    if base_has(&path) && !rules.allows(&p.tag(), &path, Action::Rename) {
                        problems.push(format!(
                            "{}: renames the upstream file {path}; allow it in patches/{FILE_NAME} with a reason",
                            p.file_name
                        ));
                    }
                    let to = new.unwrap_or_default();
                    if let Some(first) = creator.get(&to) {
                        problems.push(format!(
                            "{to}: created by {first} and again by {} (rename)",
                            p.file_name
                        ));
                    } else {
                        creator.insert(to, p.file_name.clone());
                    }
                }
                Change::Modified => {}
            }
        }
    }
    Ok(problems)
}
