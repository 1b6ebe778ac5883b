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

/// Copies the folder `from` and everything below it to `to` (created as
/// needed; files are copied by content).
pub fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    for e in walkdir::WalkDir::new(from) {
        let e = e?;
        let rel = e.path().strip_prefix(from)?;
        let dest = to.join(rel);
        if e.file_type().is_dir() {
            create_dir_all(&dest)?;
        } else {
            std::fs::copy(e.path(), &dest)
                .with_context(|| format!("copying {}", e.path().display()))?;
        }
    }
    Ok(())
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

/// Exchanges two existing directory entries: after the call `a` holds what
/// `b` held and vice versa. Atomic where the system has the call — Linux
/// `renameat2(RENAME_EXCHANGE)`, macOS `renamex_np(RENAME_SWAP)` — so there
/// is no instant at which either path is missing. Elsewhere, or where the
/// file system refuses the atomic call, [`exchange_by_renames`].
pub fn exchange(a: &Path, b: &Path) -> Result<()> {
    match exchange_atomic(a, b) {
        Ok(()) => Ok(()),
        Err(e) if atomic_unsupported(&e) => exchange_by_renames(a, b),
        Err(e) => bail!(
            "atomically exchanging {} and {}: {e}",
            a.display(),
            b.display()
        ),
    }
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
fn c_path(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains NUL"))
}

#[cfg(target_os = "linux")]
fn exchange_atomic(a: &Path, b: &Path) -> std::io::Result<()> {
    let (ca, cb) = (c_path(a)?, c_path(b)?);
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
    os_result(rc)
}

#[cfg(target_os = "macos")]
fn exchange_atomic(a: &Path, b: &Path) -> std::io::Result<()> {
    let (ca, cb) = (c_path(a)?, c_path(b)?);
    // SAFETY: both pointers are valid NUL-terminated strings for the call's duration.
    let rc = unsafe { libc::renamex_np(ca.as_ptr(), cb.as_ptr(), libc::RENAME_SWAP) };
    os_result(rc)
}

/// A C call's return code: 0 is success, anything else the thread's errno.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn os_result(rc: libc::c_int) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn exchange_atomic(_a: &Path, _b: &Path) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

/// The system or the file system has no atomic exchange (an old kernel, a
/// file system without RENAME_EXCHANGE / RENAME_SWAP, another OS).
fn atomic_unsupported(e: &std::io::Error) -> bool {
    // ENOTSUP and EOPNOTSUPP are one value on Linux, two on macOS
    let code = e.raw_os_error();
    e.kind() == std::io::ErrorKind::Unsupported
        || [libc::ENOSYS, libc::EINVAL, libc::ENOTSUP, libc::EOPNOTSUPP]
            .iter()
            .any(|c| code == Some(*c))
}

/// The portable exchange, by three renames: `a` → `a`'s `.exchange` sibling,
/// `b` → `a`, the sibling → `b`. Not atomic: between the first and the second
/// rename `a` is missing, and a crash there leaves its old content at the
/// sibling (named in any error). A failed second or third rename is undone.
pub fn exchange_by_renames(a: &Path, b: &Path) -> Result<()> {
    let held = sibling(a, "exchange");
    if held.exists() {
        bail!(
            "exchanging {} and {}: {} exists (left by an interrupted exchange? it holds what {} held)",
            a.display(),
            b.display(),
            held.display(),
            a.display()
        );
    }
    std::fs::rename(a, &held)
        .with_context(|| format!("renaming {} to {}", a.display(), held.display()))?;
    rename_or_undo(b, a, || std::fs::rename(&held, a))?;
    rename_or_undo(&held, b, || {
        std::fs::rename(a, b)?;
        std::fs::rename(&held, a)
    })
}

/// Renames `from` to `to`; where that fails, runs `undo` and says whether it worked.
fn rename_or_undo(
    from: &Path,
    to: &Path,
    undo: impl FnOnce() -> std::io::Result<()>,
) -> Result<()> {
    std::fs::rename(from, to).or_else(|e| {
        let undone = if undo().is_ok() { "done" } else { "failed" };
        Err(e).with_context(|| {
            format!(
                "renaming {} to {} (undo: {undone})",
                from.display(),
                to.display()
            )
        })
    })
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

/// A path as the file system resolves it: canonical where it exists, else
/// its nearest existing ancestor canonicalized with the rest appended (the
/// rest lexically normalized: `.` dropped, `..` popped).
pub fn resolved(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut tail = Vec::new();
    let mut cur = abs.as_path();
    loop {
        if let Ok(c) = std::fs::canonicalize(cur) {
            let mut out = c;
            for part in tail.iter().rev() {
                match part {
                    std::path::Component::ParentDir => {
                        out.pop();
                    }
                    std::path::Component::Normal(n) => out.push(n),
                    _ => {}
                }
            }
            return out;
        }
        match (cur.parent(), cur.components().next_back()) {
            (Some(parent), Some(last)) => {
                tail.push(last);
                cur = parent;
            }
            _ => return abs,
        }
    }
}

/// Refuses a directory that a command would replace or delete wholesale
/// when it is `/`, the user's home (or a directory above it), or a
/// directory holding (or being) one of `protected` — the project, the
/// cache. No flag overrides this: the forge never deletes what it did not
/// create, and these it certainly did not.
pub fn refuse_protected(dir: &Path, protected: &[(&str, PathBuf)]) -> Result<()> {
    let d = resolved(dir);
    if d.parent().is_none() {
        bail!(
            "{} is the file system's root; polykv-forge never replaces it",
            dir.display()
        );
    }
    let mut all: Vec<(&str, PathBuf)> = protected
        .iter()
        .map(|(what, p)| (*what, resolved(p)))
        .collect();
    all.extend(dirs::home_dir().map(|h| ("your home directory", resolved(&h))));
    for (what, p) in all {
        if p.starts_with(&d) {
            let how = if p == d { "is" } else { "holds" };
            bail!(
                "{} {how} {what} ({}); polykv-forge never replaces or deletes such a directory, --force included: name another directory",
                dir.display(),
                p.display()
            );
        }
    }
    Ok(())
}

/// Whether `dir` holds anything: false when it is missing or an empty
/// directory, an error when it exists and is not a directory.
pub fn occupied(dir: &Path) -> Result<bool> {
    if !dir.exists() {
        return Ok(false);
    }
    if !dir.is_dir() {
        bail!("{} exists and is not a directory", dir.display());
    }
    Ok(std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .next()
        .is_some())
}

/// Converts a path to an absolute one without requiring it to exist.
pub fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_dirs(root: &Path) -> (PathBuf, PathBuf) {
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        std::fs::write(a.join("x"), "from a").unwrap();
        std::fs::write(b.join("y"), "from b").unwrap();
        (a, b)
    }

    fn assert_exchanged(a: &Path, b: &Path) {
        assert_eq!(std::fs::read_to_string(a.join("y")).unwrap(), "from b");
        assert_eq!(std::fs::read_to_string(b.join("x")).unwrap(), "from a");
        assert!(!a.join("x").exists() && !b.join("y").exists());
    }

    #[test]
    fn exchange_swaps_two_directories() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two_dirs(dir.path());
        exchange(&a, &b).unwrap();
        assert_exchanged(&a, &b);
    }

    /// The portable path (used where no atomic exchange exists), run here too.
    #[test]
    fn fallback_swaps_two_directories_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two_dirs(dir.path());
        exchange_by_renames(&a, &b).unwrap();
        assert_exchanged(&a, &b);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn fallback_undoes_a_failed_exchange() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::create_dir(&a).unwrap();
        std::fs::write(a.join("x"), "from a").unwrap();
        let e = exchange_by_renames(&a, &dir.path().join("missing")).unwrap_err();
        assert!(format!("{e:#}").contains("undo: done"), "{e:#}");
        assert_eq!(std::fs::read_to_string(a.join("x")).unwrap(), "from a");
        assert!(!sibling(&a, "exchange").exists());
    }

    #[test]
    fn fallback_refuses_a_leftover_of_an_interrupted_exchange() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two_dirs(dir.path());
        std::fs::create_dir(sibling(&a, "exchange")).unwrap();
        let e = exchange_by_renames(&a, &b).unwrap_err().to_string();
        assert!(e.contains("interrupted exchange"), "{e}");
        assert!(a.join("x").exists() && b.join("y").exists());
    }

    #[test]
    fn unsupported_errors_are_recognised() {
        assert!(atomic_unsupported(&std::io::Error::from_raw_os_error(
            libc::EINVAL
        )));
        assert!(atomic_unsupported(&std::io::Error::from(
            std::io::ErrorKind::Unsupported
        )));
        assert!(!atomic_unsupported(&std::io::Error::from_raw_os_error(
            libc::ENOENT
        )));
    }
}
