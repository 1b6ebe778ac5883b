//! Markers: every hunk that adds lines to an upstream file carries
//! `polykv: NNNN` (its patch number) on an added line; every file the chain
//! creates names its patch in its first lines; every marker in the patched
//! tree names a patch of the chain. Exemptions live in `patches/markers.toml`.

use anyhow::{Context, Result};
use git2::{Oid, Repository};
use serde::Deserialize;
use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use crate::chain::parsed::Change;
use crate::chain::PatchFile;

pub const FILE_NAME: &str = "markers.toml";
/// How many leading lines of a new file may hold its header marker.
pub const HEADER_LINES: usize = 10;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Markers {
    #[serde(default)]
    pub exempt: Vec<Exempt>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exempt {
    pub patch: String,
    pub path: String,
    pub reason: String,
}

impl Markers {
    pub fn load(dir: &Path) -> Result<Markers> {
        let p = dir.join(FILE_NAME);
        if !p.exists() {
            return Ok(Markers::default());
        }
        let text = crate::fsx::read_to_string(&p)?;
        let m: Markers =
            toml::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
        for e in &m.exempt {
            if e.reason.trim().is_empty() {
                anyhow::bail!(
                    "{}: the exemption for {} in {} needs a reason",
                    p.display(),
                    e.path,
                    e.patch
                );
            }
        }
        Ok(m)
    }

    fn exempt(&self, patch: &str, path: &str) -> bool {
        self.exempt
            .iter()
            .any(|e| e.patch == patch && e.path == path)
    }
}

/// All marker numbers (`polykv: NNNN`) in `text`, with their 1-based line.
pub fn find(text: &[u8]) -> Vec<(u32, usize)> {
    const PAT: &[u8] = b"polykv: ";
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'\n' {
            line += 1;
        } else if text[i..].starts_with(PAT) {
            let d = &text[i + PAT.len()..];
            if d.len() >= 4
                && d[..4].iter().all(|b| b.is_ascii_digit())
                && d.get(4).is_none_or(|b| !b.is_ascii_digit())
            {
                let n = std::str::from_utf8(&d[..4])
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                out.push((n, line));
            }
        }
        i += 1;
    }
    out
}

fn has_marker(text: &[u8], number: u32) -> bool {
    find(text).iter().any(|(n, _)| *n == number)
}

/// Checks the chain; `trees[k]` is the tree after `patches[k]`.
pub fn check(
    repo: &Repository,
    base: Oid,
    patches: &[PatchFile],
    trees: &[Oid],
    rules: &Markers,
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let base_tree = repo.find_tree(base)?;
    let in_base = |p: &str| base_tree.get_path(Path::new(p)).is_ok();
    let numbers: HashSet<u32> = patches.iter().map(|p| p.number).collect();
    let mut touched: BTreeSet<String> = BTreeSet::new();
    for (k, p) in patches.iter().enumerate() {
        let tag = p.tag();
        for f in &p.parsed()?.files {
            if f.change == Change::Deleted {
                continue;
            }
            let path = f.path().to_string();
            touched.insert(path.clone());
            if rules.exempt(&tag, &path) {
                continue;
            }
            if f.change == Change::Added {
                let tree = repo.find_tree(trees[k])?;
                let entry = tree.get_path(Path::new(&path))?;
                let blob = repo.find_blob(entry.id())?;
                let head: Vec<u8> = blob
                    .content()
                    .split_inclusive(|&b| b == b'\n')
                    .take(HEADER_LINES)
                    .flatten()
                    .copied()
                    .collect();
                if !has_marker(&head, p.number) {
                    problems.push(format!(
                        "{}: new file {path} lacks a header naming its patch (`polykv: {tag}` within its first {HEADER_LINES} lines)",
                        p.file_name
                    ));
                }
                continue;
            }
            if !in_base(f.old_path.as_deref().unwrap_or_default()) {
                continue; // a file an earlier patch of the chain created
            }
            for h in &f.hunks {
                let mut added = h.added().peekable();
                if added.peek().is_some() && !added.any(|l| has_marker(l, p.number)) {
                    problems.push(format!(
                        "{}: {path}: hunk `{}` adds lines to an upstream file without a `polykv: {tag}` marker on an added line",
                        p.file_name, h.header
                    ));
                }
            }
        }
    }
    if let Some(last) = trees.last() {
        let tree = repo.find_tree(*last)?;
        for path in &touched {
            let Ok(entry) = tree.get_path(Path::new(path)) else {
                continue;
            };
            let Ok(blob) = repo.find_blob(entry.id()) else {
                continue;
            };
            for (n, line) in find(blob.content()) {
                if !numbers.contains(&n) {
                    problems.push(format!(
                        "{path}:{line}: marker `polykv: {n:04}` names no patch of the chain"
                    ));
                }
            }
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_markers() {
        let t = b"a\n// polykv: 0003 hook\nb polykv: 12345\n/* polykv: 0010 */\n";
        assert_eq!(find(t), vec![(3, 2), (10, 4)]);
    }
}
