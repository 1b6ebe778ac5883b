//! `rebase`: move the whole chain onto a new upstream pin. Each patch is
//! replayed onto the new base: strictly if it still applies, otherwise by a
//! per-file 3-way merge whose common ancestor is the patch's own pre-image on
//! the old base (always in the cache). Nothing is written unless every patch
//! lands; the report says per patch what happened and where upstream moved
//! under it.

use anyhow::{Context, Result};
use git2::{IndexEntry, IndexTime, Oid, Repository};
use serde::Serialize;
use std::collections::BTreeMap;

use crate::chain::parsed::Change;
use crate::chain::{apply, export, markers, series, PatchFile};
use crate::tree::{self, TreeWriter};

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PatchOutcome {
    /// Applies strictly on the new base.
    Clean,
    /// The 3-way merge succeeded; the patch is regenerated against the new base.
    Merged,
    /// Every change of the patch is already in the new base.
    AlreadyUpstream,
    /// At least one file did not merge.
    Conflict,
}

impl std::fmt::Display for PatchOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PatchOutcome::Clean => "clean",
            PatchOutcome::Merged => "merged",
            PatchOutcome::AlreadyUpstream => "already-upstream",
            PatchOutcome::Conflict => "conflict",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    pub path: String,
    /// clean, merged, conflict, already-upstream, added, deleted, followed-rename.
    pub result: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Conflict regions: ours (new upstream) and theirs (the patch), each trimmed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<ConflictRegion>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConflictRegion {
    pub upstream: String,
    pub patch: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PatchReport {
    pub patch: String,
    pub outcome: PatchOutcome,
    pub files: Vec<FileReport>,
    /// Upstream changes within 3 lines of the patch's hunks (semantic drift).
    pub drift: Vec<String>,
    /// Markers the patch had that its rebased text no longer has.
    pub markers_vanished: Vec<String>,
    /// Set when an earlier patch conflicted: this one was replayed on that
    /// patch's conflicted result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_conflict: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RebaseReport {
    pub from_tree: String,
    pub to_commit: String,
    pub to_tree: String,
    pub patches: Vec<PatchReport>,
    /// What verify finds in the rebased series as it would be written
    /// (markers, ownership, generated files); filled in by the caller, which
    /// stages and verifies the series before writing it.
    pub checks: Vec<String>,
    pub ok: bool,
    pub written: bool,
    pub dropped: Vec<String>,
}

/// A rebased patch, not yet written.
pub struct NewPatch {
    pub file_name: String,
    pub bytes: Vec<u8>,
    pub tree: Oid,
    pub message: String,
    pub conflicted: bool,
}

fn entry(path: &str, e: &tree::Entry) -> IndexEntry {
    IndexEntry {
        ctime: IndexTime::new(0, 0),
        mtime: IndexTime::new(0, 0),
        dev: 0,
        ino: 0,
        mode: e.mode,
        uid: 0,
        gid: 0,
        file_size: 0,
        id: e.oid,
        flags: path.len().min(0xfff) as u16,
        flags_extended: 0,
        path: path.as_bytes().to_vec(),
    }
}

type Files = BTreeMap<Vec<u8>, tree::Entry>;

fn get<'a>(files: &'a Files, path: &str) -> Option<&'a tree::Entry> {
    files.get(path.as_bytes())
}

fn write_tree(repo: &Repository, files: &Files) -> Result<Oid> {
    let mut w = TreeWriter::new(repo)?;
    for (p, e) in files {
        w.add_oid(p, e.mode, e.oid)?;
    }
    w.write()
}

/// Old-side line ranges (1-based, inclusive) of a patch's hunks per file.
fn hunk_ranges(p: &PatchFile) -> Result<BTreeMap<String, Vec<(u32, u32)>>> {
    let mut out: BTreeMap<String, Vec<(u32, u32)>> = BTreeMap::new();
    for f in &p.parsed()?.files {
        // (a created file is keyed by its new path, as libgit2 names both sides of it)
        let path = f.old_path.clone().unwrap_or_else(|| f.path().to_string());
        for h in &f.hunks {
            out.entry(path.clone()).or_default().push(h.old_range());
        }
    }
    Ok(out)
}

/// Lines upstream changed (old-side ranges) between two versions of a file.
fn changed_ranges(old: &[u8], new: &[u8]) -> Result<Vec<(u32, u32, u32)>> {
    let mut opts = git2::DiffOptions::new();
    opts.context_lines(0);
    let patch = git2::Patch::from_buffers(old, None, new, None, Some(&mut opts))?;
    let mut out = Vec::new();
    for h in 0..patch.num_hunks() {
        let (hunk, _) = patch.hunk(h)?;
        let start = hunk.old_start().max(1);
        let end = start + hunk.old_lines().max(1) - 1;
        out.push((start, end, hunk.old_lines().max(hunk.new_lines())));
    }
    Ok(out)
}

/// The conflict regions one merge made: those closed by `>>>>>>> label`
/// (its patch's file name). A file replayed after an earlier patch's
/// conflict still holds that conflict's markers; those regions, even one
/// nested inside a region of this merge, are that patch's, not this one's.
fn conflict_regions(merged: &[u8], label: &str) -> Vec<ConflictRegion> {
    let text = String::from_utf8_lossy(merged);
    let mut out = Vec::new();
    // Open regions, innermost last: whether past `=======`, its two sides.
    let mut open: Vec<(bool, Vec<&str>, Vec<&str>)> = Vec::new();
    for l in text.lines() {
        if l.starts_with("<<<<<<<") {
            open.push((false, Vec::new(), Vec::new()));
            continue;
        }
        if l.starts_with("=======") {
            if let Some(top) = open.last_mut() {
                if !top.0 {
                    top.0 = true;
                    continue;
                }
            }
        }
        if let Some(rest) = l.strip_prefix(">>>>>>>") {
            if let Some((_, ours, theirs)) = open.pop() {
                if rest.trim() == label {
                    let cut = |v: &Vec<&str>| {
                        let mut s: Vec<&str> = v.iter().take(12).copied().collect();
                        if v.len() > 12 {
                            s.push("…");
                        }
                        s.join("\n")
                    };
                    out.push(ConflictRegion {
                        upstream: cut(&ours),
                        patch: cut(&theirs),
                    });
                }
                continue;
            }
        }
        if let Some((past, ours, theirs)) = open.last_mut() {
            if *past {
                theirs.push(l);
            } else {
                ours.push(l);
            }
        }
    }
    out
}

/// Upstream renames between two bases: old path → new path.
fn upstream_renames(repo: &Repository, old: Oid, new: Oid) -> Result<BTreeMap<String, String>> {
    let (a, b) = (repo.find_tree(old)?, repo.find_tree(new)?);
    let mut diff = repo.diff_tree_to_tree(Some(&a), Some(&b), None)?;
    let mut find = git2::DiffFindOptions::new();
    find.renames(true).rename_threshold(50).rename_limit(5000);
    diff.find_similar(Some(&mut find))?;
    let mut out = BTreeMap::new();
    for d in diff.deltas() {
        if d.status() == git2::Delta::Renamed {
            if let (Some(o), Some(n)) = (d.old_file().path(), d.new_file().path()) {
                out.insert(o.display().to_string(), n.display().to_string());
            }
        }
    }
    Ok(out)
}

fn count_markers_added(diff: &[u8], number: u32) -> usize {
    diff.split(|&b| b == b'\n')
        .filter(|l| l.starts_with(b"+") && !l.starts_with(b"+++"))
        .map(|l| {
            markers::find(l)
                .iter()
                .filter(|(n, _)| *n == number)
                .count()
        })
        .sum()
}

/// Upstream changes within 3 lines of the patch's hunks, per file.
fn drift(
    repo: &Repository,
    p: &PatchFile,
    old_before: &Files,
    start_files: &Files,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (path, ranges) in hunk_ranges(p)? {
        let (Some(ob), Some(nb)) = (get(old_before, &path), get(start_files, &path)) else {
            continue;
        };
        if ob.oid == nb.oid {
            continue;
        }
        let changes = changed_ranges(&tree::blob(repo, ob.oid)?, &tree::blob(repo, nb.oid)?)?;
        let mut lines = 0;
        let mut hunks = 0;
        for (s, e) in &ranges {
            let near: Vec<_> = changes
                .iter()
                .filter(|(cs, ce, _)| *cs <= e + 3 && *ce + 3 >= *s)
                .collect();
            if !near.is_empty() {
                hunks += 1;
                lines += near.iter().map(|c| c.2).sum::<u32>();
            }
        }
        if hunks > 0 {
            out.push(format!(
                "upstream changed {lines} line(s) within 3 lines of {hunks} of {}'s {} hunk(s) in {path}",
                p.tag(),
                ranges.len()
            ));
        }
    }
    Ok(out)
}

/// Merges the patch file by file (3-way, following upstream renames) where
/// it did not apply strictly; returns the patch's outcome.
fn merge_files(
    repo: &Repository,
    p: &PatchFile,
    renames: &BTreeMap<String, String>,
    old_before: &Files,
    old_after: &Files,
    files: &mut Files,
    reports: &mut Vec<FileReport>,
) -> Result<PatchOutcome> {
    let mut any_conflict = false;
    let mut any_change = false;
    for f in &p.parsed()?.files {
        let (o, n, change) = (f.old_path.clone(), f.new_path.clone(), f.change);
        let mut fr = FileReport {
            path: n.clone().or(o.clone()).unwrap_or_default(),
            result: String::new(),
            detail: None,
            conflicts: Vec::new(),
        };
        match change {
            Change::Added => {
                let path = n.unwrap_or_default();
                let theirs = get(old_after, &path).context("added file missing")?.clone();
                match get(files, &path) {
                    Some(e) if e.oid == theirs.oid => fr.result = "already-upstream".into(),
                    Some(_) => {
                        fr.result = "conflict".into();
                        fr.detail = Some("upstream now has a different file at this path".into());
                        any_conflict = true;
                    }
                    None => {
                        files.insert(path.clone().into_bytes(), theirs);
                        fr.result = "added".into();
                        any_change = true;
                    }
                }
            }
            Change::Deleted => {
                let path = o.unwrap_or_default();
                let base = get(old_before, &path)
                    .context("deleted file missing")?
                    .clone();
                match get(files, &path) {
                    None => fr.result = "already-upstream".into(),
                    Some(e) if e.oid == base.oid => {
                        files.remove(path.as_bytes());
                        fr.result = "deleted".into();
                        any_change = true;
                    }
                    Some(_) => {
                        fr.result = "conflict".into();
                        fr.detail = Some("the patch deletes a file upstream changed".into());
                        any_conflict = true;
                    }
                }
            }
            _ => {
                let old_path = o.clone().unwrap_or_default();
                let new_path = n.clone().unwrap_or_default();
                let base = get(old_before, &old_path)
                    .context("pre-image missing")?
                    .clone();
                let theirs = get(old_after, &new_path)
                    .context("post-image missing")?
                    .clone();
                // Follow an upstream rename of the file when git finds one.
                let (ours_path, followed) = if get(files, &old_path).is_some() {
                    (old_path.clone(), None)
                } else if let Some(r) = renames.get(&old_path).filter(|r| get(files, r).is_some()) {
                    (r.clone(), Some(r.clone()))
                } else {
                    fr.result = "conflict".into();
                    fr.detail = Some(format!(
                        "upstream deleted {old_path}, which the patch changes"
                    ));
                    any_conflict = true;
                    reports.push(fr);
                    continue;
                };
                let ours = get(files, &ours_path).context("ours missing")?.clone();
                let dest = if followed.is_some() || old_path == new_path {
                    ours_path.clone()
                } else {
                    new_path.clone()
                };
                let mut opts = git2::MergeFileOptions::new();
                opts.ancestor_label("patch pre-image")
                    .our_label("upstream")
                    .their_label(&p.file_name)
                    .style_diff3(false);
                let m = repo.merge_file_from_index(
                    &entry(&old_path, &base),
                    &entry(&ours_path, &ours),
                    &entry(&new_path, &theirs),
                    Some(&mut opts),
                )?;
                let content = m.content().to_vec();
                let oid = repo.blob(&content)?;
                if ours_path != dest {
                    files.remove(ours_path.as_bytes());
                }
                files.insert(
                    dest.clone().into_bytes(),
                    tree::Entry {
                        mode: theirs.mode,
                        oid,
                    },
                );
                if !m.is_automergeable() {
                    fr.result = "conflict".into();
                    fr.conflicts = conflict_regions(&content, &p.file_name);
                    any_conflict = true;
                } else if oid == ours.oid && ours_path == dest {
                    fr.result = "already-upstream".into();
                } else {
                    fr.result = "merged".into();
                    any_change = true;
                }
                if let Some(r) = followed {
                    fr.detail = Some(format!("followed upstream rename {old_path} → {r}"));
                    fr.path = dest;
                }
            }
        }
        reports.push(fr);
    }
    Ok(if any_conflict {
        PatchOutcome::Conflict
    } else if !any_change {
        PatchOutcome::AlreadyUpstream
    } else {
        PatchOutcome::Merged
    })
}

/// Replays `patches` (proven on `old_base`) onto `new_base`. Writes nothing.
pub fn plan(
    repo: &Repository,
    old_base: Oid,
    new_base: Oid,
    to_commit: &str,
    patches: &[PatchFile],
    drop_upstreamed: bool,
) -> Result<(RebaseReport, Vec<NewPatch>)> {
    let old_trees = apply::forward(repo, old_base, patches)
        .context("the current chain does not apply on the current pin; fix that first (`polykv-forge verify`)")?;
    let renames = upstream_renames(repo, old_base, new_base)?;
    let mut report = RebaseReport {
        from_tree: old_base.to_string(),
        to_commit: to_commit.to_string(),
        to_tree: new_base.to_string(),
        patches: Vec::new(),
        checks: Vec::new(),
        ok: true,
        written: false,
        dropped: Vec::new(),
    };
    let mut out = Vec::new();
    let mut cur = new_base;
    let mut conflicted_at: Option<String> = None;
    for (k, p) in patches.iter().enumerate() {
        let before = if k == 0 { old_base } else { old_trees[k - 1] };
        let after = old_trees[k];
        let mut pr = PatchReport {
            patch: p.file_name.clone(),
            outcome: PatchOutcome::Clean,
            files: Vec::new(),
            drift: Vec::new(),
            markers_vanished: Vec::new(),
            after_conflict: conflicted_at.clone(),
        };
        let old_before = tree::list(repo, before)?;
        let old_after = tree::list(repo, after)?;
        let mut files = tree::list(repo, cur)?;
        let start_files = files.clone();

        // Drift: upstream changes near this patch's hunks.
        pr.drift = drift(repo, p, &old_before, &start_files)?;

        let strict = apply::apply(repo, cur, p, false);
        let new_tree = match strict {
            Ok(t) => {
                for f in &p.parsed()?.files {
                    pr.files.push(FileReport {
                        path: f.path().to_string(),
                        result: "clean".into(),
                        detail: None,
                        conflicts: Vec::new(),
                    });
                }
                t
            }
            Err(_) => {
                pr.outcome = merge_files(
                    repo,
                    p,
                    &renames,
                    &old_before,
                    &old_after,
                    &mut files,
                    &mut pr.files,
                )?;
                write_tree(repo, &files)?
            }
        };
        // The rebased text, canonical, against the new base.
        let conflicted = pr.outcome == PatchOutcome::Conflict;
        if pr.outcome == PatchOutcome::AlreadyUpstream {
            if drop_upstreamed {
                report.dropped.push(p.file_name.clone());
            } else {
                report.ok = false;
            }
            report.patches.push(pr);
            continue;
        }
        let diff = export::render(repo, cur, new_tree)
            .with_context(|| format!("rendering the rebased {}", p.file_name))?;
        let before_markers = count_markers_added(&p.diff, p.number);
        let after_markers = count_markers_added(&diff, p.number);
        if after_markers < before_markers {
            pr.markers_vanished.push(format!(
                "{}: {} of its {before_markers} `polykv: {}` marker line(s) vanished in the rebase",
                p.file_name,
                before_markers - after_markers,
                p.tag()
            ));
        }
        if conflicted {
            report.ok = false;
            conflicted_at.get_or_insert_with(|| p.file_name.clone());
        }
        out.push(NewPatch {
            file_name: p.file_name.clone(),
            bytes: series::compose(&p.message(), &diff),
            tree: new_tree,
            message: p.message(),
            conflicted,
        });
        report.patches.push(pr);
        cur = new_tree;
    }
    Ok((report, out))
}

/// Replaces `[upstream]` of the manifest text with the new pin's, keeping the rest.
pub fn replace_upstream(manifest_text: &str, pin_text: &str) -> Result<String> {
    let mut doc: toml_edit::DocumentMut = manifest_text
        .parse()
        .context("parsing vendor-manifest.toml")?;
    let pin: toml_edit::DocumentMut = pin_text.parse().context("parsing the new pin")?;
    let up = pin
        .get("upstream")
        .context("the new pin has no [upstream] table")?;
    doc["upstream"] = up.clone();
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::conflict_regions;

    #[test]
    fn conflict_regions_are_those_of_this_merge_only() {
        // An earlier patch's conflict left in the file, one of this merge's
        // beside it, and one of this merge's holding an earlier one.
        let merged = "a\n<<<<<<< upstream\nu1\n=======\np1\n>>>>>>> 0003-k.patch\nb\n\
<<<<<<< upstream\nu2\n=======\np2\n>>>>>>> 0005-s.patch\nc\n\
<<<<<<< upstream\n<<<<<<< upstream\nx\n=======\ny\n>>>>>>> 0003-k.patch\nu3\n=======\np3\n>>>>>>> 0005-s.patch\n";
        let r = conflict_regions(merged.as_bytes(), "0005-s.patch");
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].upstream.as_str(), r[0].patch.as_str()), ("u2", "p2"));
        assert_eq!((r[1].upstream.as_str(), r[1].patch.as_str()), ("u3", "p3"));
        assert_eq!(conflict_regions(merged.as_bytes(), "0003-k.patch").len(), 2);
    }
}
