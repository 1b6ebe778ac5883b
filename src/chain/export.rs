//! The one canonical text of a patch between two trees: 3 lines of context,
//! a/ b/ prefixes, full blob ids, no timestamps, fixed rename detection,
//! paths in git's order. `verify` regenerates every patch with this and
//! compares bytes; `export` writes it.

use anyhow::{bail, Context, Result};
use git2::{DiffFindOptions, DiffFormat, DiffOptions, Oid, Repository};

/// Renders the canonical diff from `old` to `new`.
pub fn render(repo: &Repository, old: Oid, new: Oid) -> Result<Vec<u8>> {
    let old_t = repo.find_tree(old).with_context(|| format!("tree {old}"))?;
    let new_t = repo.find_tree(new).with_context(|| format!("tree {new}"))?;
    let mut opts = DiffOptions::new();
    opts.context_lines(3)
        .interhunk_lines(0)
        .id_abbrev(40)
        .indent_heuristic(true)
        .ignore_submodules(true);
    let mut diff = repo
        .diff_tree_to_tree(Some(&old_t), Some(&new_t), Some(&mut opts))
        .context("diffing two trees")?;
    let mut find = DiffFindOptions::new();
    find.renames(true)
        .rename_threshold(50)
        .rename_limit(1000)
        .copies(false)
        .break_rewrites(false);
    diff.find_similar(Some(&mut find))
        .context("detecting renames")?;
    let mut out = Vec::new();
    let mut binary: Option<String> = None;
    diff.print(DiffFormat::Patch, |delta, _hunk, line| {
        if delta.flags().is_binary() && binary.is_none() {
            binary = delta
                .new_file()
                .path()
                .or(delta.old_file().path())
                .map(|p| p.display().to_string());
        }
        match line.origin() {
            '+' | '-' | ' ' => out.push(line.origin() as u8),
            _ => {}
        }
        out.extend_from_slice(line.content());
        true
    })
    .context("printing a diff")?;
    if let Some(p) = binary {
        bail!("{p}: binary change; polykv-forge carries text patches only");
    }
    let out = modes_first(&out);
    for d in diff.deltas() {
        if d.new_file().mode() == git2::FileMode::Link && d.status() != git2::Delta::Deleted {
            bail!(
                "{}: the change adds or edits a symlink; patches may not carry symlinks",
                d.new_file()
                    .path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            );
        }
    }
    Ok(out)
}

/// Puts `old mode`/`new mode` lines first in each file's extended header, as
/// git writes them. libgit2 prints a rename's `similarity`/`rename` lines
/// before a mode change, and its own parser then refuses the patch ("invalid
/// patch header"); found by the property tests in `reverse`.
fn modes_first(diff: &[u8]) -> Vec<u8> {
    let lines: Vec<&[u8]> = diff.split_inclusive(|&b| b == b'\n').collect();
    let mut out = Vec::with_capacity(diff.len());
    let mut i = 0;
    while i < lines.len() {
        out.extend_from_slice(lines[i]);
        if !lines[i].starts_with(b"diff --git ") {
            i += 1;
            continue;
        }
        i += 1;
        let start = i;
        while i < lines.len()
            && !lines[i].starts_with(b"--- ")
            && !lines[i].starts_with(b"@@ ")
            && !lines[i].starts_with(b"diff --git ")
        {
            i += 1;
        }
        let header = &lines[start..i];
        let is_mode = |l: &&[u8]| l.starts_with(b"old mode ") || l.starts_with(b"new mode ");
        for l in header.iter().filter(|l| is_mode(l)) {
            out.extend_from_slice(l);
        }
        for l in header.iter().filter(|l| !is_mode(l)) {
            out.extend_from_slice(l);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_lines_come_before_a_rename() {
        let printed = b"diff --git a/z b/a\nsimilarity index 66%\nrename from z\nrename to a\nold mode 100755\nnew mode 100644\nindex e0a0741049fc05c6bc8e0a4ab8fab0a2918a0bbe..a19063a8ba0c6de8d1f9bb8ffa5a09bb4255e053\n--- a/z\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n";
        let git = b"diff --git a/z b/a\nold mode 100755\nnew mode 100644\nsimilarity index 66%\nrename from z\nrename to a\nindex e0a0741049fc05c6bc8e0a4ab8fab0a2918a0bbe..a19063a8ba0c6de8d1f9bb8ffa5a09bb4255e053\n--- a/z\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n";
        assert!(
            crate::chain::apply::parse(printed).is_err(),
            "libgit2 now parses its own order: drop modes_first"
        );
        assert_eq!(modes_first(printed), git.to_vec());
        let parsed = crate::chain::apply::parse(&modes_first(printed));
        assert!(parsed.is_ok(), "{:?}", parsed.err());
        // Already in git's order, or no header: unchanged.
        assert_eq!(modes_first(git), git.to_vec());
        let plain = b"diff --git a/f b/f\nindex 1..2 100644\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-old mode 1\n+new mode 2\n";
        assert_eq!(modes_first(plain), plain.to_vec());
    }
}
