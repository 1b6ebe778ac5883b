//! `edit` and `export`: the series as an ordinary git stack (one commit for
//! the base, one per patch) and back to canonical patch files.

use anyhow::{bail, Context, Result};
use git2::{Oid, Repository, Signature, Time};
use serde::Serialize;
use std::path::{Path, PathBuf};

use crate::chain::lock::Lock;
use crate::chain::{apply, export, series, PatchFile, Series};
use crate::fsx;

/// The trailer that ties a commit to its patch file name.
pub const TRAILER: &str = "Polykv-Patch: ";
/// The branch `edit` creates.
pub const BRANCH: &str = "polykv";

fn signature() -> Result<Signature<'static>> {
    // Fixed identity and time: the same series always gives the same commit ids.
    Ok(Signature::new(
        "polykv-forge",
        "polykv-forge@localhost",
        &Time::new(1_700_000_000, 0),
    )?)
}

/// Commit message for a patch: its description plus the name trailer.
fn message_for(p: &PatchFile) -> String {
    let m = p.message();
    if m.is_empty() {
        format!("{}\n\n{TRAILER}{}\n", p.stem(), p.stem())
    } else {
        format!("{m}\n\n{TRAILER}{}\n", p.stem())
    }
}

/// Splits a commit message into (description, patch stem from the trailer).
fn parse_message(msg: &str) -> (String, Option<String>) {
    let trimmed = msg.trim_end();
    if let Some(pos) = trimmed.rfind('\n').map(|p| p + 1).or(Some(0)) {
        let last = &trimmed[pos..];
        if let Some(stem) = last.strip_prefix(TRAILER) {
            return (
                trimmed[..pos].trim().to_string(),
                Some(stem.trim().to_string()),
            );
        }
    }
    (trimmed.trim().to_string(), None)
}

#[derive(Debug, Serialize)]
pub struct EditReport {
    pub dir: String,
    /// The stack's commits (none in a dry run).
    pub base_commit: Option<String>,
    pub head: Option<String>,
    pub patches: usize,
    pub dry_run: bool,
}

/// Whether `dir` is a stack `edit` made: a git repository at its top with
/// the base reference `edit` writes.
pub fn is_stack(dir: &Path) -> bool {
    dir.join(".git").is_dir()
        && Repository::open(dir)
            .ok()
            .filter(|r| {
                r.workdir()
                    .is_some_and(|w| fsx::resolved(w) == fsx::resolved(dir))
            })
            .is_some_and(|r| r.find_reference("refs/polykv/base").is_ok())
}

/// Where `edit` writes a stack, and how.
#[derive(Clone, Copy)]
pub struct StackDir<'a> {
    pub dir: &'a Path,
    /// Replace a stack `edit` made (its changes are lost).
    pub force: bool,
    pub dry_run: bool,
    /// Directories the stack must never be or hold (`Project::protected`).
    pub protected: &'a [(&'static str, PathBuf)],
}

/// Materialises the stack in `to.dir` (which must not exist, be empty, or —
/// with `force` — be a stack `edit` made).
pub fn edit(
    store_repo: &Repository,
    base: Oid,
    upstream_commit: &str,
    s: &Series,
    to: &StackDir,
) -> Result<EditReport> {
    let StackDir {
        dir,
        force,
        dry_run,
        protected,
    } = *to;
    fsx::refuse_protected(dir, protected)?;
    let replace = fsx::occupied(dir)?;
    if replace && !is_stack(dir) {
        bail!(
            "{} exists and is not a stack made by `polykv-forge edit` (no git repository with refs/polykv/base); it only ever replaces a stack it made, --force included. Name a new or empty directory with --dir, or move this one away",
            dir.display()
        );
    }
    if replace && !force {
        bail!(
            "{} already exists; export it first, or pass --force to replace it (its changes are lost)",
            dir.display()
        );
    }
    // The chain must apply before anything existing is touched: a failing
    // `edit --force` leaves the old stack as it was.
    let trees = apply::forward(store_repo, base, &s.patches)?;
    if dry_run {
        return Ok(EditReport {
            dir: dir.display().to_string(),
            base_commit: None,
            head: None,
            patches: s.patches.len(),
            dry_run,
        });
    }
    // Build in a sibling, move into place: never a half-made stack.
    let staging = fsx::sibling(dir, "edit-staging");
    fsx::remove_dir_all_if_exists(&staging)?;
    fsx::create_dir_all(&staging)?;
    let repo = Repository::init(&staging)
        .with_context(|| format!("creating a git repository in {}", staging.display()))?;
    // Share the cache's objects instead of copying 170 MB.
    let objects = store_repo.path().join("objects");
    fsx::write_atomic(
        &staging.join(".git/objects/info/alternates"),
        format!("{}\n", objects.display()).as_bytes(),
    )?;
    let repo = {
        drop(repo);
        Repository::open(&staging)?
    };
    let sig = signature()?;
    let base_tree = repo.find_tree(base)?;
    let base_msg = format!(
        "polykv-forge base: upstream {upstream_commit}\n\nPristine pinned tree {base}. Do not edit this commit; `export` refuses a stack whose base differs.\n"
    );
    let mut parent = repo.commit(None, &sig, &sig, &base_msg, &base_tree, &[])?;
    let base_commit = parent;
    for (p, t) in s.patches.iter().zip(&trees) {
        let tree = repo.find_tree(*t)?;
        let pc = repo.find_commit(parent)?;
        parent = repo.commit(None, &sig, &sig, &message_for(p), &tree, &[&pc])?;
    }
    let head = repo.find_commit(parent)?;
    repo.branch(BRANCH, &head, true)?;
    repo.reference("refs/polykv/base", base_commit, true, "polykv-forge edit")?;
    repo.set_head(&format!("refs/heads/{BRANCH}"))?;
    let pb = crate::progress::bar(0, "checking out");
    let mut co = git2::build::CheckoutBuilder::new();
    co.force();
    co.progress(|_, cur, total| {
        pb.set_length(total as u64);
        pb.set_position(cur as u64);
    });
    repo.checkout_head(Some(&mut co))
        .context("checking out the stack")?;
    pb.finish_and_clear();
    drop(co);
    drop(head);
    drop(base_tree);
    drop(repo);
    // Only now is the old stack (empty, or replaced with --force) removed:
    // moved aside first, so that a crash leaves one of the two whole.
    let old = fsx::sibling(dir, "edit-old");
    fsx::remove_dir_all_if_exists(&old)?;
    if dir.exists() {
        std::fs::rename(dir, &old)
            .with_context(|| format!("moving the old stack {} aside", dir.display()))?;
    }
    std::fs::rename(&staging, dir)
        .with_context(|| format!("moving the stack to {}", dir.display()))?;
    fsx::remove_dir_all_if_exists(&old)?;
    Ok(EditReport {
        dir: dir.display().to_string(),
        base_commit: Some(base_commit.to_string()),
        head: Some(parent.to_string()),
        patches: s.patches.len(),
        dry_run,
    })
}

#[derive(Debug, Serialize)]
pub struct ExportReport {
    pub dir: String,
    pub written: Vec<String>,
    pub removed: Vec<String>,
    pub unchanged: Vec<String>,
    pub dry_run: bool,
    /// What `verify` finds in the exported series beyond its own proofs
    /// (markers, ownership, generated files): written anyway, to be fixed.
    pub problems: Vec<String>,
}

/// A patch computed from the stack, not yet written.
struct Planned {
    file_name: String,
    bytes: Vec<u8>,
    tree: Oid,
}

/// Writes `patches/` back from the stack in `from`, canonically. Long
/// (about 170 lines): one transaction — refuse a bad stack, render and
/// prove every patch, then one swap — kept in one place so no path writes
/// before every check has passed.
pub fn export(
    store_repo: &Repository,
    base: Oid,
    from: &Path,
    patches_dir: &Path,
    dry_run: bool,
    new_manifest: Option<&str>,
    registered: &[&dyn crate::chain::verify::Registered],
) -> Result<ExportReport> {
    let repo = Repository::open(from).with_context(|| {
        format!(
            "{} is not a git repository made by `polykv-forge edit`",
            from.display()
        )
    })?;
    if repo.state() != git2::RepositoryState::Clean {
        bail!(
            "{}: a git operation is in progress ({:?}); finish or abort it first",
            from.display(),
            repo.state()
        );
    }
    // Untracked files count too: a new file left out of a commit would be
    // silently missing from the export.
    let statuses = repo.statuses(Some(
        git2::StatusOptions::new()
            .include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_ignored(false),
    ))?;
    if !statuses.is_empty() {
        let mut names: Vec<String> = statuses
            .iter()
            .take(10)
            .map(|e| {
                let st = e.status();
                let kind = if st.is_wt_new() || st.is_index_new() {
                    "untracked"
                } else if st.is_wt_deleted() || st.is_index_deleted() {
                    "deleted"
                } else {
                    "modified"
                };
                // The path as git stores it, relative to the stack's top,
                // quoted so that a name like `..lock` reads as a name.
                let path = String::from_utf8_lossy(e.path_bytes());
                format!("{kind}: {path:?}")
            })
            .collect();
        if statuses.len() > 10 {
            names.push(format!("… and {} more", statuses.len() - 10));
        }
        bail!(
            "{}: uncommitted changes in {} file(s); commit them (a new commit, or `git commit --amend`/fixup) before exporting:\n  {}",
            from.display(),
            statuses.len(),
            names.join("\n  ")
        );
    }
    let head = repo
        .head()
        .context("the stack has no HEAD")?
        .peel_to_commit()?;
    // Walk back to the root, refusing merges.
    let mut commits = vec![head.clone()];
    let mut c = head;
    while c.parent_count() > 0 {
        if c.parent_count() > 1 {
            bail!(
                "commit {} is a merge; the stack must be linear (rebase it)",
                c.id()
            );
        }
        c = c.parent(0)?;
        commits.push(c.clone());
    }
    commits.reverse();
    let root = &commits[0];
    if root.tree_id() != base {
        bail!(
            "the stack's base commit {} has tree {}, not the pinned tree {base}; refusing to export against another base",
            root.id(),
            root.tree_id()
        );
    }
    // Compute every patch first; nothing is written unless all succeed.
    let mut planned: Vec<Planned> = Vec::new();
    let mut last_number = 0u32;
    let mut prev_tree = base;
    for c in &commits[1..] {
        let msg = c
            .message()
            .with_context(|| format!("commit {}: message is not UTF-8", c.id()))?;
        let (description, stem) = parse_message(msg);
        let (number, stem) = match stem {
            Some(stem) => {
                let n = series::parse_name(&format!("{stem}.patch"))
                    .with_context(|| format!("commit {}: bad {TRAILER}trailer", c.id()))?;
                (n, stem)
            }
            None => {
                let n = last_number + 1;
                let subject = description.lines().next().unwrap_or("");
                (n, format!("{n:04}-{}", series::slugify(subject)))
            }
        };
        if number <= last_number {
            bail!(
                "commit {} ({stem}) comes after patch {last_number:04}; patch numbers must increase along the stack (renumber its {TRAILER}trailer)",
                c.id()
            );
        }
        last_number = number;
        // Copy the stack's objects into the cache so the chain can be checked there.
        let tree = copy_tree(&repo, store_repo, c.tree_id())?;
        let diff = export::render(store_repo, prev_tree, tree)
            .with_context(|| format!("commit {} ({stem})", c.id()))?;
        if diff.is_empty() {
            bail!(
                "commit {} ({stem}) changes nothing; drop it or squash it",
                c.id()
            );
        }
        if let Some(line) = conflict_marker(&diff) {
            bail!(
                "commit {} ({stem}) adds a conflict marker line `{line}`; resolve the conflict and amend the commit",
                c.id()
            );
        }
        let file_name = format!("{stem}.patch");
        let bytes = series::compose(&description, &diff);
        // Prove the written text reproduces the commit exactly.
        let pf = PatchFile::from_bytes(&file_name, bytes.clone())?;
        let got = apply::apply(store_repo, prev_tree, &pf, false)?;
        if got != tree {
            bail!("{file_name}: the exported text does not reproduce commit {} (tree {got} vs {tree})", c.id());
        }
        planned.push(Planned {
            file_name,
            bytes,
            tree,
        });
        prev_tree = tree;
    }
    let lock = Lock::of(
        base,
        planned
            .iter()
            .map(|p| (p.file_name.as_str(), p.bytes.as_slice(), Some(p.tree))),
    );
    let old = Series::load(patches_dir)?;
    let mut report = ExportReport {
        dir: patches_dir.display().to_string(),
        written: Vec::new(),
        removed: Vec::new(),
        unchanged: Vec::new(),
        dry_run,
        problems: Vec::new(),
    };
    for p in &planned {
        match old.patches.iter().find(|o| o.file_name == p.file_name) {
            Some(o) if o.bytes == p.bytes => report.unchanged.push(p.file_name.clone()),
            _ => report.written.push(p.file_name.clone()),
        }
    }
    for o in &old.patches {
        if !planned.iter().any(|p| p.file_name == o.file_name) {
            report.removed.push(o.file_name.clone());
        }
    }
    let lock_text = lock.render();
    let lock_same = std::fs::read_to_string(patches_dir.join(crate::chain::lock::FILE_NAME))
        .is_ok_and(|old| old == lock_text);
    let files: Vec<(String, Vec<u8>)> = planned
        .into_iter()
        .map(|p| (p.file_name, p.bytes))
        .collect();
    // Plan → stage → verify the staged series → one commit.
    let staged = stage_series(patches_dir, &files, &lock_text, new_manifest, dry_run)?;
    report.problems = staged.verify(store_repo, base, registered)?;
    let unchanged = report.written.is_empty()
        && report.removed.is_empty()
        && lock_same
        && new_manifest.is_none();
    if !dry_run && !unchanged {
        staged.commit()?;
    }
    Ok(report)
}

/// The first added line that is a merge conflict marker, if any.
pub fn conflict_marker(diff: &[u8]) -> Option<String> {
    diff.split(|&b| b == b'\n')
        .filter_map(|l| l.strip_prefix(b"+"))
        .find(|l| l.starts_with(b"<<<<<<< ") || l.starts_with(b">>>>>>> "))
        .map(|l| String::from_utf8_lossy(l).into_owned())
}

/// Where a manifest waiting to be moved into place lives (see `write_series`).
pub const PENDING_MANIFEST: &str = ".pending-vendor-manifest.toml";

/// The new manifest an interrupted series write left in patches/, if any.
pub fn pending_manifest(root: &Path) -> Option<PathBuf> {
    let p = crate::layout::Layout::new(root)
        .patches()
        .join(PENDING_MANIFEST);
    p.exists().then_some(p)
}

/// Finishes a series write that was interrupted between its two renames:
/// the patches are in place, the manifest that goes with them is beside
/// them. Rolls forward. Returns whether anything was done.
pub fn finish_pending(root: &Path) -> Result<bool> {
    let pending = crate::layout::Layout::new(root)
        .patches()
        .join(PENDING_MANIFEST);
    if !pending.exists() {
        return Ok(false);
    }
    let dest = root.join(crate::manifest::FILE_NAME);
    std::fs::rename(&pending, &dest)
        .with_context(|| format!("moving {} to {}", pending.display(), dest.display()))?;
    crate::progress::note("finished an interrupted series write: vendor-manifest.toml updated");
    Ok(true)
}

/// A series written into a staging directory (patches, lock, the policy
/// files of patches/, and a new manifest when the pin moves), verified
/// there, then put in place by one atomic directory exchange (`commit`).
/// Dropped uncommitted, the staging directory is removed.
pub struct Staged {
    staging: PathBuf,
    /// A temporary directory for a dry run (never committed).
    _temp: Option<tempfile::TempDir>,
    dir: PathBuf,
    manifest: bool,
}

/// Stages the series for `dir` (patches/): beside it, or with `dry_run` in
/// a temporary directory outside the project.
pub fn stage_series(
    dir: &Path,
    planned: &[(String, Vec<u8>)],
    lock: &str,
    manifest: Option<&str>,
    dry_run: bool,
) -> Result<Staged> {
    fsx::create_dir_all(dir)?;
    let (staging, temp) = if dry_run {
        let t = tempfile::tempdir().context("creating a temporary directory")?;
        (crate::layout::Layout::new(t.path()).patches(), Some(t))
    } else {
        (fsx::sibling(dir, "export-staging"), None)
    };
    fsx::remove_dir_all_if_exists(&staging)?;
    fsx::create_dir_all(&staging)?;
    let staged = Staged {
        staging,
        _temp: temp,
        dir: dir.to_path_buf(),
        manifest: manifest.is_some(),
    };
    let staging = &staged.staging;
    // Keep every other file of patches/ (ownership.toml, markers.toml, README…).
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".patch")
            || name == crate::chain::lock::FILE_NAME
            || name == PENDING_MANIFEST
        {
            continue;
        }
        let to = staging.join(&name);
        if e.file_type()?.is_dir() {
            fsx::copy_dir(&e.path(), &to)?;
        } else {
            std::fs::copy(e.path(), &to)
                .with_context(|| format!("copying {}", e.path().display()))?;
        }
    }
    for (name, bytes) in planned {
        std::fs::write(staging.join(name), bytes).with_context(|| format!("writing {name}"))?;
    }
    std::fs::write(staging.join(crate::chain::lock::FILE_NAME), lock)
        .context("writing the lock")?;
    if let Some(m) = manifest {
        std::fs::write(staging.join(PENDING_MANIFEST), m).context("writing the new manifest")?;
    }
    Ok(staged)
}

impl Staged {
    /// Runs every check of `verify` (and the `registered` ones) on the
    /// staged series. Its own proofs (apply, lock, reverse, export) must
    /// hold, else the write is refused; the policy checks' problems
    /// (markers, ownership, generated files) are returned.
    pub fn verify(
        &self,
        repo: &Repository,
        base: Oid,
        registered: &[&dyn crate::chain::verify::Registered],
    ) -> Result<Vec<String>> {
        use crate::chain::verify::CheckId;
        let series = Series::load(&self.staging)?;
        // Family files (kernels/*.toml) are the project's, beside the real
        // patches/, wherever the series is staged (a dry run stages in /tmp).
        let root = self.dir.parent().unwrap_or(Path::new("."));
        let r = crate::chain::verify::run(
            repo,
            base,
            &series.patches,
            &self.staging,
            root,
            registered,
        )?;
        let proofs = [
            CheckId::Apply,
            CheckId::Lock,
            CheckId::Reverse,
            CheckId::Export,
        ];
        let failed: Vec<String> = r
            .checks
            .iter()
            .filter(|c| proofs.contains(&c.id) && !c.ok)
            .flat_map(|c| c.problems.iter().map(move |p| format!("{}: {p}", c.name())))
            .collect();
        if !failed.is_empty() {
            bail!(
                "the series as it would be written fails its own proofs; nothing written:\n  {}",
                failed.join("\n  ")
            );
        }
        Ok(r.checks
            .iter()
            .filter(|c| !proofs.contains(&c.id))
            .flat_map(|c| c.problems.iter().map(move |p| format!("{}: {p}", c.name())))
            .collect())
    }

    /// Puts the staged series in place in one atomic directory exchange;
    /// a new manifest travels inside it and is renamed into place right
    /// after (rolled forward by `finish_pending` if the process dies in
    /// between).
    pub fn commit(self) -> Result<()> {
        crate::failpoint::hit("series-before-swap");
        fsx::exchange(&self.staging, &self.dir)?;
        crate::failpoint::hit("series-after-swap");
        if self.manifest {
            if let Some(root) = self.dir.parent() {
                finish_pending(root)?;
            }
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // After a commit this holds the old series (swapped out).
        let _ = fsx::remove_dir_all_if_exists(&self.staging);
    }
}

/// Copies a tree (and everything under it) from one repository's objects to
/// another's, skipping what is already there.
fn copy_tree(from: &Repository, to: &Repository, tree: Oid) -> Result<Oid> {
    let to_odb = to.odb()?;
    if to_odb.exists(tree) {
        return Ok(tree);
    }
    let from_odb = from.odb()?;
    let mut stack = vec![tree];
    while let Some(id) = stack.pop() {
        if to_odb.exists(id) {
            continue;
        }
        let obj = from_odb.read(id)?;
        if obj.kind() == git2::ObjectType::Tree {
            let t = from.find_tree(id)?;
            for e in t.iter() {
                match e.kind() {
                    Some(git2::ObjectType::Tree) | Some(git2::ObjectType::Blob) => {
                        stack.push(e.id())
                    }
                    _ => bail!(
                        "tree {id} holds a submodule entry, which polykv-forge does not support"
                    ),
                }
            }
        }
        let written = to_odb.write(obj.kind(), obj.data())?;
        debug_assert_eq!(written, id);
    }
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let (d, s) = parse_message("Title\n\nBody\n\nPolykv-Patch: 0002-x\n");
        assert_eq!(d, "Title\n\nBody");
        assert_eq!(s.as_deref(), Some("0002-x"));
        let (d, s) = parse_message("Just a title\n");
        assert_eq!(d, "Just a title");
        assert!(s.is_none());
    }
}
