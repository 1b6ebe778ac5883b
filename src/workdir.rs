//! The applied working tree (default `work/llama.cpp`): written atomically
//! (a staging copy swapped in with one atomic rename-exchange), rewriting only
//! files whose bytes change so unchanged files keep their mtimes, under a
//! lock, with a state file recording what was written so hand edits show as drift.

use anyhow::{bail, Context, Result};
use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::fsx;
use crate::tree::{self, Entry, MODE_LINK};

pub const STATE_FILE: &str = ".polykv-forge-state.json";
const STATE_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileStat {
    pub oid: String,
    pub mode: u32,
    pub size: u64,
    pub mtime_ns: i128,
    pub ino: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatePatch {
    pub file: String,
    pub sha256: String,
    pub tree: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub version: u32,
    pub base_tree: String,
    pub patches: Vec<StatePatch>,
    pub tree: String,
    pub files: BTreeMap<String, FileStat>,
}

/// What a workdir looks like now.
#[derive(Debug, Serialize)]
pub struct Inspection {
    pub exists: bool,
    /// The state file, when the workdir was written by polykv-forge.
    #[serde(skip)]
    pub state: Option<State>,
    pub modified: Vec<String>,
    pub deleted: Vec<String>,
    pub untracked: Vec<String>,
}

impl Inspection {
    pub fn drifted(&self) -> bool {
        !self.modified.is_empty() || !self.deleted.is_empty()
    }
}

fn stat_of(meta: &std::fs::Metadata, oid: Oid, mode: u32) -> FileStat {
    FileStat {
        oid: oid.to_string(),
        mode,
        size: meta.len(),
        mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
        ino: meta.ino(),
    }
}

fn mode_of(meta: &std::fs::Metadata) -> u32 {
    if meta.file_type().is_symlink() {
        MODE_LINK
    } else {
        tree::mode_for_permissions(meta.mode())
    }
}

/// The blob id of a file on disk (a symlink hashes its target).
fn hash_file(path: &Path, meta: &std::fs::Metadata) -> Result<Oid> {
    let data = if meta.file_type().is_symlink() {
        std::fs::read_link(path)
            .with_context(|| format!("reading link {}", path.display()))?
            .as_os_str()
            .as_bytes()
            .to_vec()
    } else {
        fsx::read(path)?
    };
    Ok(Oid::hash_object(git2::ObjectType::Blob, &data)?)
}

fn rel_string(rel: &Path) -> Result<String> {
    rel.to_str()
        .map(str::to_string)
        .with_context(|| format!("{}: path is not UTF-8", rel.display()))
}

/// Compares the workdir with its state file. Cheap when nothing changed:
/// files whose size, mtime and inode match the state are not read.
pub fn inspect(dir: &Path) -> Result<Inspection> {
    let mut ins = Inspection {
        exists: dir.exists(),
        state: None,
        modified: Vec::new(),
        deleted: Vec::new(),
        untracked: Vec::new(),
    };
    if !ins.exists {
        return Ok(ins);
    }
    let state_path = dir.join(STATE_FILE);
    if !state_path.exists() {
        return Ok(ins);
    }
    let state: State = serde_json::from_slice(&fsx::read(&state_path)?)
        .with_context(|| format!("parsing {}", state_path.display()))?;
    if state.version != STATE_VERSION {
        bail!(
            "{}: state version {} is not {STATE_VERSION}; remove the workdir and apply again",
            state_path.display(),
            state.version
        );
    }
    let mut seen = std::collections::HashSet::new();
    for e in walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || e.file_name() != ".git")
    {
        let e = e.with_context(|| format!("walking {}", dir.display()))?;
        if e.depth() == 0 || e.file_type().is_dir() {
            continue;
        }
        let rel = rel_string(e.path().strip_prefix(dir).context("walked outside")?)?;
        if rel == STATE_FILE {
            continue;
        }
        let meta = e
            .path()
            .symlink_metadata()
            .with_context(|| format!("reading {}", e.path().display()))?;
        match state.files.get(&rel) {
            None => ins.untracked.push(rel),
            Some(st) => {
                seen.insert(rel.clone());
                let mode = mode_of(&meta);
                let now = stat_of(&meta, Oid::zero(), mode);
                let same_stat = now.size == st.size
                    && now.mtime_ns == st.mtime_ns
                    && now.ino == st.ino
                    && mode == st.mode;
                if !same_stat {
                    let oid = hash_file(e.path(), &meta)?;
                    if oid.to_string() != st.oid || mode != st.mode {
                        ins.modified.push(rel);
                    }
                }
            }
        }
    }
    for p in state.files.keys() {
        if !seen.contains(p) {
            ins.deleted.push(p.clone());
        }
    }
    ins.state = Some(state);
    Ok(ins)
}

/// What `sync` did (or, with dry-run, would do).
#[derive(Debug, Serialize, Default)]
pub struct SyncReport {
    pub workdir: String,
    pub tree: String,
    pub already: bool,
    pub written: usize,
    /// Files of the old tree that the new one does not have.
    pub removed: usize,
    pub kept: usize,
    pub untracked_kept: usize,
    /// Hand edits lost under `--force`: modified files rewritten, untracked
    /// files where the chain puts a file (the deleted ones come back).
    pub discarded: usize,
    pub dry_run: bool,
}

pub struct SyncRequest<'a> {
    pub dir: &'a Path,
    pub target: Oid,
    pub base: Oid,
    pub patches: Vec<StatePatch>,
    pub dry_run: bool,
    pub force: bool,
    pub wait: bool,
    /// The lock file serializing writers of this workdir (in the cache, see
    /// [`lock_path`]); a dry run takes none.
    pub lock: PathBuf,
    /// Directories the workdir must never be or hold (`Project::protected`).
    pub protected: &'a [(&'static str, PathBuf)],
}

/// The lock of the workdir `dir`: a file in the cache's `locks/` named by a
/// hash of the workdir's resolved path, so that a lock never lands beside a
/// directory the tool does not own (`--workdir /tmp` would put it in `/`).
pub fn lock_path(cache_root: &Path, dir: &Path) -> PathBuf {
    let key = crate::source::sha256_hex(fsx::resolved(dir).as_os_str().as_bytes());
    cache_root
        .join("locks")
        .join(format!("workdir-{}.lock", &key[..16]))
}

/// Refuses a workdir the forge must not replace: `/`, a home, a directory
/// holding the project or the cache, and any non-empty directory the forge
/// did not write (no state file) — `--force` overrides none of these; it
/// only lets hand edits inside a forge-made workdir be discarded.
fn refuse_foreign(dir: &Path, protected: &[(&str, PathBuf)]) -> Result<()> {
    fsx::refuse_protected(dir, protected)?;
    if fsx::occupied(dir)? && !dir.join(STATE_FILE).exists() {
        bail!(
            "{} exists and was not written by polykv-forge (no {STATE_FILE}); it only ever replaces a workdir it made, --force included. Name a new or empty directory with --workdir, or move this one away",
            dir.display()
        );
    }
    Ok(())
}

/// Makes the workdir hold exactly `target` (plus any untracked files it had).
/// One transaction under the workdir's lock — ownership, state, drift,
/// plan, staged copy, one swap — so that no step can run out of order.
pub fn sync(repo: &Repository, req: &SyncRequest) -> Result<SyncReport> {
    let dir = req.dir;
    // Ownership is checked before the lock (a refused directory gets no
    // lock file, no staging sibling, nothing) and again under it.
    refuse_foreign(dir, req.protected)?;
    let _guard = if req.dry_run {
        None
    } else {
        if let Some(parent) = req.lock.parent() {
            fsx::create_dir_all(parent)?;
        }
        Some(if req.wait {
            crate::install::lock_file(&req.lock)?
        } else {
            crate::install::try_lock_file(&req.lock)?.with_context(|| {
                format!(
                    "{} is locked by another polykv-forge run (lock {}); wait for it or drop --no-wait",
                    dir.display(),
                    req.lock.display()
                )
            })?
        })
    };
    crate::failpoint::hit("apply-holding-lock");
    // A staging directory left by an interrupted run holds either a partial
    // new tree or the old tree after the swap; the workdir itself is whole.
    let staging = fsx::sibling(dir, "staging");
    if !req.dry_run {
        fsx::remove_dir_all_if_exists(&staging)?;
    }

    refuse_foreign(dir, req.protected)?;
    let ins = inspect(dir)?;
    if ins.drifted() && !req.force {
        let mut list: Vec<String> = ins
            .modified
            .iter()
            .map(|p| format!("modified: {p}"))
            .collect();
        list.extend(ins.deleted.iter().map(|p| format!("deleted:  {p}")));
        let more = list.len().saturating_sub(20);
        list.truncate(20);
        bail!(
            "{} has hand edits that applying would lose:\n  {}{}\nsave them (e.g. `polykv-forge edit`), or pass --force to discard them",
            dir.display(),
            list.join("\n  "),
            if more > 0 { format!("\n  … and {more} more") } else { String::new() }
        );
    }
    let target_s = req.target.to_string();
    let mut report = SyncReport {
        workdir: dir.display().to_string(),
        tree: target_s.clone(),
        dry_run: req.dry_run,
        ..Default::default()
    };
    let entries = tree::list(repo, req.target)?;
    let old_files: BTreeMap<String, FileStat> = ins
        .state
        .as_ref()
        .map(|s| s.files.clone())
        .unwrap_or_default();
    if let Some(st) = &ins.state {
        if st.tree == target_s && !ins.drifted() {
            report.already = true;
            report.kept = entries.len();
            // Keep the recorded chain in step (e.g. a renamed patch, same tree).
            if !req.dry_run && st.patches.len() != req.patches.len() {
                write_state(dir, req, old_files)?;
            }
            return Ok(report);
        }
    }
    // A file can be reused (hard-linked) only when it is still there as
    // the state recorded it.
    let changed: std::collections::HashSet<&String> =
        ins.modified.iter().chain(&ins.deleted).collect();
    let reusable = |rel: &str, e: &Entry| -> bool {
        old_files.get(rel).is_some_and(|st| {
            st.oid == e.oid.to_string() && st.mode == e.mode && !changed.contains(&rel.to_string())
        })
    };
    for (rel, e) in &entries {
        let rel = String::from_utf8_lossy(rel).into_owned();
        if ins.exists && reusable(&rel, e) {
            report.kept += 1;
        } else {
            report.written += 1;
        }
    }
    report.removed = old_files
        .keys()
        .filter(|k| !entries.contains_key(k.as_bytes()))
        .count();
    let mut clashing = 0;
    for u in &ins.untracked {
        if entries.contains_key(u.as_bytes()) {
            if !req.force {
                bail!(
                    "{}: an untracked file is where the chain puts a file; move it away or pass --force",
                    dir.join(u).display()
                );
            }
            clashing += 1;
        }
    }
    report.discarded = ins.modified.len() + clashing;
    report.untracked_kept = ins.untracked.len() - clashing;
    if req.dry_run {
        return Ok(report);
    }

    if let Err(e) = stage(repo, req, &ins, &entries, &reusable, &staging) {
        // Never leave a half-made staging tree for the next run to trip on.
        let _ = fsx::remove_dir_all_if_exists(&staging);
        return Err(e);
    }
    crate::failpoint::hit("apply-before-swap");
    if dir.exists() {
        fsx::exchange(&staging, dir)?;
        crate::failpoint::hit("apply-after-swap");
        fsx::remove_dir_all_if_exists(&staging)?;
    } else {
        if let Some(parent) = dir.parent() {
            fsx::create_dir_all(parent)?;
        }
        std::fs::rename(&staging, dir)
            .with_context(|| format!("moving the staging tree to {}", dir.display()))?;
    }
    if let Some(parent) = dir.parent() {
        fsx::sync_dir(parent)?;
    }
    Ok(report)
}

/// Builds the staging tree: hard links for unchanged files, fresh writes
/// otherwise, and everything untracked of the old workdir carried over
/// (files hard-linked, symlinks recreated, directories — `.git` ones and
/// empty ones included — made), then the state file.
fn stage(
    repo: &Repository,
    req: &SyncRequest,
    ins: &Inspection,
    entries: &BTreeMap<Vec<u8>, Entry>,
    reusable: &dyn Fn(&str, &Entry) -> bool,
    staging: &Path,
) -> Result<()> {
    let dir = req.dir;
    let pb = crate::progress::bar(entries.len() as u64, "writing workdir");
    fsx::create_dir_all(staging)?;
    let mut files = BTreeMap::new();
    for (rel_b, e) in entries {
        let rel = String::from_utf8_lossy(rel_b).into_owned();
        let dest = tree::path_of(staging, rel_b);
        if let Some(parent) = dest.parent() {
            fsx::create_dir_all(parent)?;
        }
        if ins.exists && reusable(&rel, e) {
            let src = tree::path_of(dir, rel_b);
            std::fs::hard_link(&src, &dest)
                .with_context(|| format!("linking {} into the staging tree", src.display()))?;
        } else {
            tree::write_entry(repo, e, &dest)?;
        }
        let meta = dest
            .symlink_metadata()
            .with_context(|| format!("reading {}", dest.display()))?;
        files.insert(rel, stat_of(&meta, e.oid, e.mode));
        pb.inc(1);
    }
    if ins.exists {
        let old: std::collections::HashSet<&str> = ins
            .state
            .as_ref()
            .map(|s| s.files.keys().map(String::as_str).collect())
            .unwrap_or_default();
        carry_untracked(dir, staging, &old, entries)?;
    }
    pb.finish_and_clear();
    write_state(staging, req, files)
}

/// Carries what the forge did not write from the old workdir into the
/// staging tree: every path neither in the old state nor in the new tree.
fn carry_untracked(
    dir: &Path,
    staging: &Path,
    old: &std::collections::HashSet<&str>,
    entries: &BTreeMap<Vec<u8>, Entry>,
) -> Result<()> {
    for e in walkdir::WalkDir::new(dir).sort_by_file_name().min_depth(1) {
        let e = e.with_context(|| format!("walking {}", dir.display()))?;
        let rel_path = e.path().strip_prefix(dir).context("walked outside")?;
        let rel = rel_string(rel_path)?;
        if rel == STATE_FILE || old.contains(rel.as_str()) || entries.contains_key(rel.as_bytes()) {
            continue;
        }
        let dest = staging.join(rel_path);
        let ft = e.file_type();
        if ft.is_dir() {
            // Files create their parents; only an empty directory needs
            // making (a directory of tracked files may be a file now).
            let empty = std::fs::read_dir(e.path())
                .with_context(|| format!("listing {}", e.path().display()))?
                .next()
                .is_none();
            if empty && !dest.exists() {
                fsx::create_dir_all(&dest)?;
            }
            continue;
        }
        if let Some(parent) = dest.parent() {
            fsx::create_dir_all(parent)?;
        }
        if ft.is_symlink() {
            let target = std::fs::read_link(e.path())
                .with_context(|| format!("reading link {}", e.path().display()))?;
            std::os::unix::fs::symlink(&target, &dest)
                .with_context(|| format!("keeping untracked link {}", e.path().display()))?;
        } else {
            std::fs::hard_link(e.path(), &dest)
                .with_context(|| format!("keeping untracked {}", e.path().display()))?;
        }
    }
    Ok(())
}

fn write_state(dir: &Path, req: &SyncRequest, files: BTreeMap<String, FileStat>) -> Result<()> {
    let state = State {
        version: STATE_VERSION,
        base_tree: req.base.to_string(),
        patches: req.patches.clone(),
        tree: req.target.to_string(),
        files,
    };
    fsx::write_atomic(&dir.join(STATE_FILE), &serde_json::to_vec(&state)?)
}
