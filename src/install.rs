//! The one way something is installed into the cache: under a lock, made in
//! a temporary folder beside its place, checked by the maker, and renamed
//! into place, so that an interrupted or failed install leaves nothing that
//! looks ready and two processes never make it at once. Used by the CUDA
//! toolkit, the gates' Python environments, the test models and the pinned
//! source's sdist. The advisory file locks live here too.

use anyhow::{Context, Result};
use std::fs::File;
use std::path::{Path, PathBuf};

/// Takes an exclusive advisory lock on `path`, waiting (with a message) when
/// another process holds it.
pub fn lock_file(path: &Path) -> Result<File> {
    let file = open_lock(path)?;
    if file.try_lock().is_err() {
        crate::progress::note(&format!(
            "waiting for the lock {} held by another polykv-forge",
            path.display()
        ));
        file.lock()
            .with_context(|| format!("locking {}", path.display()))?;
    }
    Ok(file)
}

/// Takes the lock if free; `Ok(None)` when another process holds it.
pub fn try_lock_file(path: &Path) -> Result<Option<File>> {
    let file = open_lock(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

fn open_lock(path: &Path) -> Result<File> {
    File::options()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("opening lock file {}", path.display()))
}

/// What to install where.
pub struct Install<'a> {
    /// The file or folder being installed.
    pub dest: &'a Path,
    /// The lock file that serializes installs of it.
    pub lock: &'a Path,
    /// Whether what is at `dest` is complete (a marker, a size, a hash).
    pub ready: &'a dyn Fn(&Path) -> bool,
    /// Make it again even when it is ready.
    pub refresh: bool,
}

impl Install<'_> {
    /// Returns `dest`, made by `make` unless it is ready. `make` gets the
    /// path to create (file or folder; it does not exist yet) and an empty
    /// scratch folder for downloads, removed afterwards; whatever it made is
    /// renamed to `dest`, replacing an incomplete or refreshed one.
    pub fn run(&self, make: impl FnOnce(&Path, &Path) -> Result<()>) -> Result<PathBuf> {
        let dest = self.dest;
        if !self.refresh && (self.ready)(dest) {
            return Ok(dest.to_path_buf());
        }
        let parent = dest.parent().context("an install path has no parent")?;
        crate::fsx::create_dir_all(parent)?;
        if let Some(d) = self.lock.parent() {
            crate::fsx::create_dir_all(d)?;
        }
        let _lock = lock_file(self.lock)?;
        // another process may have made it while this one waited
        if !self.refresh && (self.ready)(dest) {
            return Ok(dest.to_path_buf());
        }
        let name = dest
            .file_name()
            .context("an install path has no file name")?
            .to_string_lossy();
        let stage = tempfile::Builder::new()
            .prefix(&format!(".{name}.tmp-"))
            .tempdir_in(parent)
            .with_context(|| format!("creating a staging folder in {}", parent.display()))?;
        let item = stage.path().join("item");
        let scratch = stage.path().join("scratch");
        crate::fsx::create_dir_all(&scratch)?;
        make(&item, &scratch)?;
        if dest.is_dir() {
            std::fs::remove_dir_all(dest)
                .with_context(|| format!("removing the old {}", dest.display()))?;
        } else if dest.exists() {
            std::fs::remove_file(dest)
                .with_context(|| format!("removing the old {}", dest.display()))?;
        }
        std::fs::rename(&item, dest)
            .with_context(|| format!("moving {} into place", dest.display()))?;
        crate::fsx::sync_dir(parent).ok();
        Ok(dest.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn made_once_then_reused() {
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("things").join("thing");
        let lock = root.path().join("things.lock");
        let ready = |p: &Path| p.join("done").is_file();
        let install = Install {
            dest: &dest,
            lock: &lock,
            ready: &ready,
            refresh: false,
        };
        let mut made = 0;
        for _ in 0..2 {
            install
                .run(|p, _| {
                    made += 1;
                    std::fs::create_dir(p)?;
                    std::fs::write(p.join("done"), "")?;
                    Ok(())
                })
                .unwrap();
        }
        assert_eq!(made, 1);
        assert_eq!(left(&root.path().join("things")), ["thing"]);
    }

    #[test]
    fn a_failed_make_leaves_nothing_and_keeps_the_old_one() {
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("model.gguf");
        let lock = root.path().join("models.lock");
        std::fs::write(&dest, "old").unwrap();
        let never = |_: &Path| false;
        let install = Install {
            dest: &dest,
            lock: &lock,
            ready: &never,
            refresh: false,
        };
        let err = install
            .run(|p, scratch| {
                std::fs::write(p, "half")?;
                std::fs::write(scratch.join("download"), "x")?;
                anyhow::bail!("the hash does not match")
            })
            .unwrap_err();
        assert!(err.to_string().contains("hash"), "{err}");
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "old");
        assert_eq!(left(root.path()), ["model.gguf", "models.lock"]);
        // a successful one replaces it, file for file
        install.run(|p, _| Ok(std::fs::write(p, "new")?)).unwrap();
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "new");
        assert_eq!(left(root.path()), ["model.gguf", "models.lock"]);
    }
}
