//! Markers: every hunk that adds lines to an upstream file carries
//! `polykv: NNNN` (its patch number) on an added line; every file the chain
//! creates names its patch in its first lines; every marker in the patched
//! tree names a patch of the chain. Exemptions live in `patches/markers.toml`.

use anyhow::{Context, Result};
use git2::{Oid, Repository};
use serde::Deserialize;
use std::collections::{BTreeSet, HashSet};
use std::path::Path;

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
        let diff = crate::chain::apply::parse(&p.diff)
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.file_name))?;
        let tag = p.tag();
        for idx in 0..diff.deltas().len() {
            let Some(delta) = diff.get_delta(idx) else {
                continue;
            };
            let path = delta
                .new_file()
                .path()
                .or(delta.old_file().path())
                .map(|x| x.display().to_string())
                .unwrap_or_default();
            if delta.status() == git2::Delta::Deleted {
                continue;
            }
            touched.insert(path.clone());
            if rules.exempt(&tag, &path) {
                continue;
            }
            let old_path = delta
                .old_file()
                .path()
                .map(|x| x.display().to_string())
                .unwrap_or_default();
            if delta.status() == git2::Delta::Added {
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
            if !in_base(&old_path) {
                continue; // a file an earlier patch of the chain created
            }
            let Some(patch) = git2::Patch::from_diff(&diff, idx)? else {
                continue;
            };
            for h in 0..patch.num_hunks() {
                let (hunk, nlines) = patch.hunk(h)?;
                let header = String::from_utf8_lossy(hunk.header())
                    .trim_end()
                    .to_string();
                let mut added = false;
                let mut marked = false;
                for l in 0..nlines {
                    let line = patch.line_in_hunk(h, l)?;
                    if line.origin() == '+' {
                        added = true;
                        marked |= has_marker(line.content(), p.number);
                    }
                }
                if added && !marked {
                    problems.push(format!(
                        "{}: {path}: hunk `{header}` adds lines to an upstream file without a `polykv: {tag}` marker on an added line",
                        p.file_name
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
