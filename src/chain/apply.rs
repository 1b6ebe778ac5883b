//! Strict application of one patch to a tree in the cache: zero fuzz, zero
//! offset (libgit2's `apply_to_tree` matches each hunk's context at exactly
//! its stated line), after checking every path the patch names.

use anyhow::Result;
use git2::{ApplyOptions, Diff, Oid, Repository};
use std::cell::RefCell;

use crate::chain::reverse;
use crate::chain::PatchFile;
use crate::error::ApplyError;
use crate::tree::MODE_LINK;

/// Applies `patch` (or its inverse) to `tree`; returns the resulting tree id.
/// Failures to apply come back as an [`ApplyError`] inside the anyhow error.
pub fn apply(repo: &Repository, tree: Oid, patch: &PatchFile, reversed: bool) -> Result<Oid> {
    let fail = |path: &str, hunk: &str, reason: String| ApplyError {
        patch: patch.file_name.clone(),
        path: path.to_string(),
        hunk: hunk.to_string(),
        reason,
        reverse: reversed,
    };
    let text = if reversed {
        reverse::invert(&patch.diff).map_err(|e| fail("", "", format!("{e:#}")))?
    } else {
        patch.diff.clone()
    };
    let crlf = crlf_hint(&text);
    let diff = parse(&text).map_err(|reason| {
        // libgit2 counts lines from the diff body; a reader counts from the
        // top of the patch file, description included.
        let reason = if reversed {
            reason
        } else {
            file_line_numbers(
                &reason,
                patch.description.iter().filter(|&&b| b == b'\n').count(),
            )
        };
        fail("", "", format!("{reason}{crlf}"))
    })?;
    let base = repo.find_tree(tree)?;
    check_deltas(&diff, &base).map_err(|(path, reason)| fail(&path, "", reason))?;

    let current_path = RefCell::new(String::new());
    let current_hunk = RefCell::new(String::new());
    let mut opts = ApplyOptions::new();
    opts.delta_callback(|d| {
        if let Some(d) = d {
            let p = d.new_file().path().or(d.old_file().path());
            *current_path.borrow_mut() = p.map(|p| p.display().to_string()).unwrap_or_default();
            current_hunk.borrow_mut().clear();
        }
        true
    });
    opts.hunk_callback(|h| {
        if let Some(h) = h {
            *current_hunk.borrow_mut() = String::from_utf8_lossy(h.header()).into_owned();
        }
        true
    });
    let index = repo.apply_to_tree(&base, &diff, Some(&mut opts));
    drop(opts);
    let mut index = match index {
        Ok(i) => i,
        Err(e) => {
            let reason = if current_hunk.borrow().is_empty() {
                format!(
                    "{} (the file's pre-image does not match){crlf}",
                    e.message()
                )
            } else {
                format!(
                    "{}: the hunk's context or removed lines are not at exactly that line (no fuzz, no offset){crlf}",
                    e.message()
                )
            };
            return Err(fail(&current_path.borrow(), &current_hunk.borrow(), reason).into());
        }
    };
    keep_rename_modes(&diff, &base, &mut index)?;
    Ok(index.write_tree_to(repo)?)
}

/// A pure rename (`similarity index 100%`, no `index` or `new mode` line)
/// keeps its file's mode, as `git apply` keeps it; libgit2 parses the mode as
/// unknown and writes 100644, dropping an executable bit. Found by the
/// property tests in `reverse` (an empty executable file moved).
fn keep_rename_modes(diff: &Diff, base: &git2::Tree, index: &mut git2::Index) -> Result<()> {
    for d in diff.deltas() {
        if d.status() != git2::Delta::Renamed || u32::from(d.new_file().mode()) != 0 {
            continue;
        }
        let (Some(old), Some(new)) = (d.old_file().path(), d.new_file().path()) else {
            continue;
        };
        let Ok(before) = base.get_path(old) else {
            continue;
        };
        if let Some(mut entry) = index.get_path(new, 0) {
            let mode = before.filemode() as u32;
            if entry.mode != mode {
                entry.mode = mode;
                index.add(&entry)?;
            }
        }
    }
    Ok(())
}

/// A note for a failure when the patch's own header lines (`diff --git`,
/// `---`, `+++`, `@@`) end in CR: the file was saved with CRLF line endings
/// (an editor, `core.autocrlf`), which no hunk can match. Empty otherwise
/// (content lines of a CRLF file legitimately end in CR).
fn crlf_hint(text: &[u8]) -> String {
    let n = text
        .split(|&b| b == b'\n')
        .filter(|l| {
            l.ends_with(b"\r")
                && [&b"diff --git "[..], b"--- ", b"+++ ", b"@@ "]
                    .iter()
                    .any(|p| l.starts_with(p))
        })
        .count();
    if n == 0 {
        String::new()
    } else {
        format!(
            "\n        the patch file has CRLF line endings ({n} header line(s) end in CR): it was saved by an editor or git with core.autocrlf; convert it back to LF (e.g. `dos2unix`) or re-export it"
        )
    }
}

/// Rewrites libgit2's `at line N` (counted from the diff body) as a line of
/// the patch file, whose description takes `offset` lines before the body.
fn file_line_numbers(reason: &str, offset: usize) -> String {
    let Some(i) = reason.find("at line ") else {
        return reason.to_string();
    };
    let start = i + "at line ".len();
    let digits: String = reason[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    match digits.parse::<usize>() {
        Ok(n) => format!(
            "{}at line {} of the patch file{}",
            &reason[..i],
            n + offset,
            &reason[start + digits.len()..]
        ),
        Err(_) => reason.to_string(),
    }
}

/// Parses diff text, refusing binary patches and copies up front.
pub fn parse(text: &[u8]) -> std::result::Result<Diff<'static>, String> {
    for line in text.split(|&b| b == b'\n') {
        if line.starts_with(b"GIT binary patch") || line.starts_with(b"Binary files ") {
            return Err(
                "binary file patch: polykv-forge carries text patches only; put binary data in a generator or a fetched asset"
                    .into(),
            );
        }
        if line.starts_with(b"copy from ") || line.starts_with(b"copy to ") {
            return Err("copy patches are not supported; add the new file instead".into());
        }
        check_header_paths(line)?;
    }
    let diff = Diff::from_buffer(text)
        .map_err(|e| format!("malformed or truncated patch text: {}", e.message()))?;
    if diff.deltas().len() == 0 {
        return Err("the patch contains no file changes".into());
    }
    Ok(diff)
}

/// Checks the paths as written in header lines, before libgit2 normalizes
/// them (it would read `b//etc/x` as `etc/x`).
fn check_header_paths(line: &[u8]) -> std::result::Result<(), String> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut paths: Vec<Vec<u8>> = Vec::new();
    if let Some(rest) = line.strip_prefix(b"diff --git ") {
        let (a, b) = reverse::git_header_paths(rest).map_err(|e| format!("{e:#}"))?;
        paths.push(a);
        paths.push(b);
    } else if let Some(rest) = line
        .strip_prefix(b"--- ")
        .or_else(|| line.strip_prefix(b"+++ "))
    {
        if rest != b"/dev/null" {
            let p = rest
                .strip_prefix(b"a/")
                .or_else(|| rest.strip_prefix(b"b/"))
                .ok_or_else(|| {
                    format!(
                        "path `{}` lacks the a/ or b/ prefix",
                        String::from_utf8_lossy(rest)
                    )
                })?;
            paths.push(p.to_vec());
        }
    } else if let Some(rest) = line
        .strip_prefix(b"rename from ")
        .or_else(|| line.strip_prefix(b"rename to "))
    {
        paths.push(rest.to_vec());
    }
    for p in paths {
        crate::paths::check_relative(&p).map_err(|e| format!("{e:#}"))?;
    }
    Ok(())
}

/// Every path must stay inside the tree, avoid `.git`, not pass through a
/// symlink of the tree it applies to, and not create symlinks or binaries.
fn check_deltas(diff: &Diff, base: &git2::Tree) -> std::result::Result<(), (String, String)> {
    for d in diff.deltas() {
        for f in [d.old_file(), d.new_file()] {
            let Some(p) = f.path_bytes() else { continue };
            let shown = String::from_utf8_lossy(p).into_owned();
            crate::paths::check_relative(p).map_err(|e| (shown.clone(), format!("{e:#}")))?;
            let comps: Vec<&[u8]> = p.split(|&b| b == b'/').collect();
            for i in 1..comps.len() {
                let prefix = comps[..i].join(&b'/');
                let prefix_str = String::from_utf8_lossy(&prefix).into_owned();
                if let Ok(entry) = base.get_path(std::path::Path::new(&prefix_str)) {
                    if entry.filemode() as u32 == MODE_LINK {
                        return Err((
                            shown,
                            format!("the path goes through the symlink `{prefix_str}` and could escape the tree"),
                        ));
                    }
                }
            }
        }
        if d.flags().is_binary() {
            let p = d.new_file().path().or(d.old_file().path());
            return Err((
                p.map(|p| p.display().to_string()).unwrap_or_default(),
                "binary file patch: polykv-forge carries text patches only".into(),
            ));
        }
        if d.new_file().mode() == git2::FileMode::Link && d.status() != git2::Delta::Deleted {
            let p = d.new_file().path().map(|p| p.display().to_string());
            return Err((
                p.unwrap_or_default(),
                "the patch creates or changes a symlink; patches may not add symlinks".into(),
            ));
        }
    }
    Ok(())
}

/// Applies a whole sequence; returns the tree after each patch.
pub fn forward(repo: &Repository, base: Oid, patches: &[PatchFile]) -> Result<Vec<Oid>> {
    let mut trees = Vec::with_capacity(patches.len());
    let mut t = base;
    for p in patches {
        t = apply(repo, t, p, false)?;
        trees.push(t);
    }
    Ok(trees)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::series;

    /// A pure rename of an executable file keeps the executable bit, both
    /// ways (libgit2 alone writes 100644).
    #[test]
    fn a_pure_rename_keeps_the_files_mode() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(tmp.path()).unwrap();
        let tree = |path: &str| {
            let empty = repo.treebuilder(None).unwrap().write().unwrap();
            let empty = repo.find_tree(empty).unwrap();
            let blob = repo.blob(b"#!/bin/sh\necho hi\n").unwrap();
            let mut b = git2::build::TreeUpdateBuilder::new();
            b.upsert(path, blob, git2::FileMode::BlobExecutable);
            b.create_updated(&repo, &empty).unwrap()
        };
        let (a, b) = (tree("scripts/run.sh"), tree("tools/run.sh"));
        let diff = b"diff --git a/scripts/run.sh b/tools/run.sh\nsimilarity index 100%\nrename from scripts/run.sh\nrename to tools/run.sh\n";
        let p = PatchFile::from_bytes("0001-move.patch", series::compose("move\n", diff)).unwrap();
        assert_eq!(apply(&repo, a, &p, false).unwrap(), b);
        assert_eq!(apply(&repo, b, &p, true).unwrap(), a);
    }
}
