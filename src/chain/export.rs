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
