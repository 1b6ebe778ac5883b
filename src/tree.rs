//! Git tree ids computed by us, never read from a `.git` we were handed:
//! importing files (from a directory or an archive stream) into the cache's
//! object database, listing trees, and writing trees out to directories.

use anyhow::{bail, Context, Result};
use git2::{IndexEntry, IndexTime, Oid, Repository};
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

pub const MODE_FILE: u32 = 0o100644;
pub const MODE_EXEC: u32 = 0o100755;
pub const MODE_LINK: u32 = 0o120000;
pub const MODE_TREE: u32 = 0o040000;

/// Builds a tree in the object database from (path, mode, bytes) entries.
pub struct TreeWriter<'r> {
    repo: &'r Repository,
    index: git2::Index,
    count: usize,
}

impl<'r> TreeWriter<'r> {
    pub fn new(repo: &'r Repository) -> Result<TreeWriter<'r>> {
        Ok(TreeWriter {
            repo,
            index: git2::Index::new().context("creating an in-memory index")?,
            count: 0,
        })
    }

    /// Adds one file. `path` is `/`-separated, relative, already validated.
    pub fn add(&mut self, path: &[u8], mode: u32, data: &[u8]) -> Result<Oid> {
        crate::paths::check_relative(path)?;
        let oid = self
            .repo
            .blob(data)
            .context("writing a blob to the cache")?;
        self.add_oid(path, mode, oid)?;
        Ok(oid)
    }

    pub fn add_oid(&mut self, path: &[u8], mode: u32, oid: Oid) -> Result<()> {
        let entry = IndexEntry {
            ctime: IndexTime::new(0, 0),
            mtime: IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode,
            uid: 0,
            gid: 0,
            file_size: 0,
            id: oid,
            flags: path.len().min(0xfff) as u16,
            flags_extended: 0,
            path: path.to_vec(),
        };
        self.index
            .add(&entry)
            .with_context(|| format!("adding {} to the tree", String::from_utf8_lossy(path)))?;
        self.count += 1;
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn write(mut self) -> Result<Oid> {
        self.index
            .write_tree_to(self.repo)
            .context("writing the tree to the cache (conflicting paths, e.g. a file and a directory of the same name?)")
    }
}

/// The mode git records for a file with these permission bits.
pub fn mode_for_permissions(perm: u32) -> u32 {
    if perm & 0o111 != 0 {
        MODE_EXEC
    } else {
        MODE_FILE
    }
}

/// Imports a directory. `skip` gets the relative path and returns true for
/// entries to leave out (e.g. a state file). `.git` entries are always left out.
pub fn import_dir(
    repo: &Repository,
    dir: &Path,
    skip: &dyn Fn(&[u8]) -> bool,
) -> Result<(Oid, usize)> {
    let pb = crate::progress::bar(0, "hashing files");
    let mut w = TreeWriter::new(repo)?;
    let walker = walkdir::WalkDir::new(dir)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || e.file_name() != ".git");
    for entry in walker {
        let entry = entry.with_context(|| format!("walking {}", dir.display()))?;
        if entry.depth() == 0 {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(dir)
            .context("walked outside the directory")?;
        let rel = rel.as_os_str().as_bytes();
        if skip(rel) {
            continue;
        }
        let ft = entry.file_type();
        if ft.is_dir() {
            continue;
        }
        if ft.is_symlink() {
            let target = std::fs::read_link(entry.path())
                .with_context(|| format!("reading link {}", entry.path().display()))?;
            let target = target.as_os_str().as_bytes();
            if !crate::paths::symlink_stays_inside(rel, target) {
                bail!(
                    "{}: symlink points outside the tree ({})",
                    entry.path().display(),
                    String::from_utf8_lossy(target)
                );
            }
            w.add(rel, MODE_LINK, target)?;
        } else if ft.is_file() {
            let meta = entry
                .metadata()
                .with_context(|| format!("reading metadata of {}", entry.path().display()))?;
            let data = crate::fsx::read(entry.path())?;
            w.add(rel, mode_for_permissions(meta.permissions().mode()), &data)?;
        } else {
            bail!(
                "{}: not a regular file, directory or symlink",
                entry.path().display()
            );
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    let n = w.len();
    Ok((w.write()?, n))
}

/// One blob entry of a tree, flattened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub mode: u32,
    pub oid: Oid,
}

/// Flattens a tree into path → entry (blobs and links only).
pub fn list(repo: &Repository, tree: Oid) -> Result<BTreeMap<Vec<u8>, Entry>> {
    let tree = repo
        .find_tree(tree)
        .with_context(|| format!("tree {tree} is not in the cache"))?;
    let mut out = BTreeMap::new();
    let mut err = None;
    tree.walk(git2::TreeWalkMode::PreOrder, |root, e| {
        if e.kind() == Some(git2::ObjectType::Blob) {
            let mut p = root.as_bytes().to_vec();
            p.extend_from_slice(e.name_bytes());
            out.insert(
                p,
                Entry {
                    mode: e.filemode() as u32,
                    oid: e.id(),
                },
            );
        } else if e.kind() == Some(git2::ObjectType::Commit) {
            err = Some(format!("{}{}", root, e.name().unwrap_or("?")));
            return git2::TreeWalkResult::Abort;
        }
        git2::TreeWalkResult::Ok
    })
    .context("walking a tree")?;
    if let Some(p) = err {
        bail!("tree contains a submodule entry at {p}, which polykv-forge does not support");
    }
    Ok(out)
}

/// Reads a blob's bytes.
pub fn blob(repo: &Repository, oid: Oid) -> Result<Vec<u8>> {
    Ok(repo
        .find_blob(oid)
        .with_context(|| format!("blob {oid} is not in the cache"))?
        .content()
        .to_vec())
}

/// Writes one entry to `dest` (which must not exist).
pub fn write_entry(repo: &Repository, entry: &Entry, dest: &Path) -> Result<()> {
    let data = blob(repo, entry.oid)?;
    if entry.mode == MODE_LINK {
        let target = std::ffi::OsStr::from_bytes(&data);
        std::os::unix::fs::symlink(target, dest)
            .with_context(|| format!("creating symlink {}", dest.display()))?;
    } else {
        std::fs::write(dest, &data).with_context(|| format!("writing {}", dest.display()))?;
        if entry.mode == MODE_EXEC {
            std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("setting permissions on {}", dest.display()))?;
        }
    }
    Ok(())
}

pub fn path_of(dir: &Path, rel: &[u8]) -> std::path::PathBuf {
    dir.join(std::ffi::OsStr::from_bytes(rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_ids_match_git() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(tmp.path().join("r.git")).unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir_all(src.join("a/b")).unwrap();
        std::fs::write(src.join("a/b/c.txt"), b"hello\r\nworld").unwrap();
        std::fs::write(src.join("x.sh"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(src.join("x.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("a/b/c.txt", src.join("link")).unwrap();
        std::fs::create_dir_all(src.join("empty")).unwrap();
        std::fs::write(src.join(".git"), b"gitdir: elsewhere\n").unwrap();
        let (ours, n) = import_dir(&repo, &src, &|_| false).unwrap();
        assert_eq!(n, 3);
        // Same files through git's own index.
        let out = std::process::Command::new("git")
            .args(["-c", "core.autocrlf=false", "init", "-q"])
            .current_dir(tmp.path().join("src"))
            .status();
        if out.is_ok() {
            std::fs::remove_file(src.join(".git")).ok();
            let g = |args: &[&str]| {
                std::process::Command::new("git")
                    .args(args)
                    .current_dir(&src)
                    .output()
                    .unwrap()
            };
            g(&["init", "-q"]);
            g(&["-c", "core.autocrlf=false", "add", "-A"]);
            let theirs = g(&["write-tree"]);
            let theirs = String::from_utf8(theirs.stdout).unwrap();
            assert_eq!(ours.to_string(), theirs.trim());
        }
        // Round trip through a directory.
        let listed = list(&repo, ours).unwrap();
        assert_eq!(listed.len(), 3);
        assert_eq!(listed[&b"x.sh".to_vec()].mode, MODE_EXEC);
        assert_eq!(listed[&b"link".to_vec()].mode, MODE_LINK);
    }

    #[test]
    fn outside_symlink_rejected() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(tmp.path().join("r.git")).unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::os::unix::fs::symlink("../../etc/passwd", src.join("evil")).unwrap();
        let err = import_dir(&repo, &src, &|_| false).unwrap_err();
        assert!(format!("{err:#}").contains("outside the tree"), "{err:#}");
    }
}
