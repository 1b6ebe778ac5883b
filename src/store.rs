//! The content-addressed cache: one bare git repository holding every verified
//! base tree (and every tree the chain produces), keyed by git tree id, plus
//! a record of which source served each base. The only module that opens it.

use anyhow::{Context, Result};
use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::fsx;

pub struct Store {
    pub root: PathBuf,
    pub repo: Repository,
}

/// Where a verified base tree came from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceRecord {
    pub tree: String,
    pub source: String,
    pub files: usize,
    pub imported_at_unix: u64,
}

/// An exclusive lock on the cache, held while importing.
pub struct CacheLock {
    _file: File,
}

impl Store {
    /// `POLYKV_FORGE_CACHE`, else the XDG cache directory + `polykv-forge`.
    pub fn default_root() -> Result<PathBuf> {
        if let Some(p) = std::env::var_os("POLYKV_FORGE_CACHE") {
            return fsx::absolute(Path::new(&p));
        }
        let base = dirs::cache_dir()
            .context("no cache directory: set XDG_CACHE_HOME or HOME, or POLYKV_FORGE_CACHE")?;
        Ok(base.join("polykv-forge"))
    }

    pub fn open(root: &Path) -> Result<Store> {
        fsx::create_dir_all(root)?;
        let git_dir = root.join("objects-v1.git");
        let repo = if git_dir.join("HEAD").exists() {
            Repository::open_bare(&git_dir)
                .with_context(|| format!("opening the cache repository {}", git_dir.display()))?
        } else {
            let _lock = lock_file(&root.join("lock"))?;
            if git_dir.join("HEAD").exists() {
                Repository::open_bare(&git_dir)
            } else {
                // Initialise next to it, then move into place: never a half-made cache.
                let tmp = tempfile::Builder::new()
                    .prefix(".init-")
                    .tempdir_in(root)
                    .with_context(|| format!("creating a directory in {}", root.display()))?;
                let path = tmp.path().join("repo.git");
                Repository::init_bare(&path)
                    .with_context(|| format!("initialising {}", path.display()))?;
                std::fs::rename(&path, &git_dir)
                    .with_context(|| format!("moving the new cache to {}", git_dir.display()))?;
                Repository::open_bare(&git_dir)
            }
            .with_context(|| format!("opening the cache repository {}", git_dir.display()))?
        };
        Ok(Store {
            root: root.to_path_buf(),
            repo,
        })
    }

    pub fn lock(&self) -> Result<CacheLock> {
        Ok(CacheLock {
            _file: lock_file(&self.root.join("lock"))?,
        })
    }

    fn base_ref(tree: Oid) -> String {
        format!("refs/polykv/bases/{tree}")
    }

    fn record_path(&self, tree: Oid) -> PathBuf {
        self.root.join("bases").join(format!("{tree}.json"))
    }

    /// Whether a verified base tree with this id is in the cache.
    pub fn has_base(&self, tree: Oid) -> bool {
        self.repo.find_reference(&Store::base_ref(tree)).is_ok()
            && self.repo.find_tree(tree).is_ok()
    }

    /// Marks a tree that hashed to the pin as a verified base.
    pub fn add_base(&self, tree: Oid, record: &SourceRecord) -> Result<()> {
        let json = serde_json::to_vec_pretty(record)?;
        fsx::write_atomic(&self.record_path(tree), &json)?;
        self.repo
            .reference(
                &Store::base_ref(tree),
                tree,
                true,
                "polykv-forge: verified base",
            )
            .with_context(|| format!("recording base tree {tree} in the cache"))?;
        Ok(())
    }

    pub fn base_record(&self, tree: Oid) -> Option<SourceRecord> {
        let bytes = std::fs::read(self.record_path(tree)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub fn downloads_dir(&self) -> PathBuf {
        self.root.join("downloads")
    }
}

use crate::install::lock_file;
