//! File-system helpers whose errors always name their path, plus atomic
//! writes and atomic directory swaps.

use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

pub fn read_to_string(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

pub fn create_dir_all(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).with_context(|| format!("creating directory {}", path.display()))
}

pub fn remove_dir_all_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory, fsync, rename. Readers see the old content or the new, never half.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".polykv-tmp-")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    tmp.write_all(bytes)
        .with_context(|| format!("writing {}", tmp.path().display()))?;
    tmp.as_file()
        .sync_all()
        .with_context(|| format!("syncing {}", tmp.path().display()))?;
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("renaming into place {}", path.display()))?;
    Ok(())
}

/// Atomically exchanges two existing directory entries (Linux renameat2 with
/// RENAME_EXCHANGE): after the call `a` holds what `b` held and vice versa.
/// There is no instant at which either path is missing.
pub fn exchange(a: &Path, b: &Path) -> Result<()> {
    let ca = CString::new(a.as_os_str().as_bytes()).context("path contains NUL")?;
    let cb = CString::new(b.as_os_str().as_bytes()).context("path contains NUL")?;
    // SAFETY: both pointers are valid NUL-terminated strings for the call's duration.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        bail!(
            "atomically exchanging {} and {}: {err}",
            a.display(),
            b.display()
        );
    }
    Ok(())
}

/// Fsyncs a directory so that renames inside it are durable.
pub fn sync_dir(path: &Path) -> Result<()> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    f.sync_all()
        .with_context(|| format!("syncing directory {}", path.display()))
}

/// A sibling path of `path` with a suffix, e.g. `work/llama.cpp` → `work/.llama.cpp.staging`.
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = path.parent().unwrap_or(Path::new("."));
    parent.join(format!(".{name}.{suffix}"))
}

/// Converts a path to an absolute one without requiring it to exist.
pub fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}
