//! The resolved project ("high" arguments): root, manifest, patches,
//! cache; and the operations commands share — the verified base, the series,
//! the applied tree for builds, running one gate.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

use crate::chain::{self, Series};
use crate::manifest::Manifest;
use crate::source::{self, Base};
use crate::store::Store;
use crate::{edit, workdir};

/// The resolved project: root, manifest, patches directory.
pub struct Project {
    pub root: PathBuf,
    pub manifest: Manifest,
    pub patches_dir: PathBuf,
    pub cache: Option<PathBuf>,
    /// The tree the chain ends at and its patch count, computed once per
    /// command (the base materialized, the series applied forward).
    chain_tip: std::sync::OnceLock<(String, usize)>,
    /// This machine's build facts, probed once per variant (CPU, CUDA, Metal).
    hosts: [std::sync::OnceLock<crate::build::Host>; 3],
}

impl Project {
    /// `project`: the root, else the nearest directory upwards holding the manifest.
    pub fn resolve(project: Option<&Path>, cache: Option<&Path>) -> Result<Project> {
        let root = match project {
            Some(p) => crate::fsx::absolute(p)?,
            None => find_root()?,
        };
        // A series write interrupted between its two renames left the new
        // pin inside patches/: it belongs to the patches there, so it is the
        // manifest read; only a command that writes moves it into place
        // (`finish_pending`), so read-only commands change nothing.
        let pending = edit::pending_manifest(&root);
        let manifest = match &pending {
            Some(p) => {
                crate::progress::note(
                    "patches/ holds an interrupted series write (a new pin): read as written; the next apply, edit, export, gen or rebase finishes it",
                );
                Manifest::load(p)?
            }
            None => Manifest::load(&root.join(crate::manifest::FILE_NAME))?,
        };
        Ok(Project {
            patches_dir: crate::layout::Layout::new(&root).patches(),
            root,
            manifest,
            cache: cache.map(Path::to_path_buf),
            chain_tip: std::sync::OnceLock::new(),
            hosts: Default::default(),
        })
    }

    /// The project's folders, named once.
    pub fn layout(&self) -> crate::layout::Layout {
        crate::layout::Layout::new(&self.root)
    }

    /// Rolls an interrupted series write forward (the new manifest into
    /// place); called by the commands that write, before they do.
    pub fn finish_pending(&self) -> Result<()> {
        edit::finish_pending(&self.root)?;
        Ok(())
    }

    /// Reads a pin file (vendor-manifest.toml's form); returns it and its text.
    pub fn pin_manifest(&self, path: &Path) -> Result<(Manifest, String)> {
        let path = crate::fsx::absolute(path)?;
        let text = crate::fsx::read_to_string(&path)?;
        Ok((Manifest::load(&path)?, text))
    }

    /// The cache root: `--cache`, else `POLYKV_FORGE_CACHE`, else the user's cache directory.
    pub fn cache_root(&self) -> Result<PathBuf> {
        match &self.cache {
            Some(c) => crate::fsx::absolute(c),
            None => Store::default_root(),
        }
    }

    /// The directories no command may replace or delete, nor one holding
    /// them (`fsx::refuse_protected`): the project and the cache.
    pub fn protected(&self) -> Result<Vec<(&'static str, PathBuf)>> {
        Ok(vec![
            ("the project", self.root.clone()),
            ("the cache", self.cache_root()?),
        ])
    }

    pub fn store(&self) -> Result<Store> {
        Store::open(&self.cache_root()?)
    }

    pub fn base(
        &self,
        store: &Store,
        source: Option<&str>,
        refresh: bool,
    ) -> Result<(git2::Oid, Base)> {
        let base = source::ensure_base(
            store,
            &self.manifest,
            &source::Request {
                override_source: source.map(str::to_string),
                refresh,
            },
        )?;
        Ok((self.manifest.tree_oid()?, base))
    }

    pub fn series(&self) -> Result<Series> {
        Series::load(&self.patches_dir)
    }

    /// The tree the chain ends at and its number of patches: the base
    /// materialized and the series applied once per command, then reused
    /// (by every gate of a `gate run`, by `build` twice).
    fn chain_tip(&self) -> Result<(String, usize)> {
        if let Some(tip) = self.chain_tip.get() {
            return Ok(tip.clone());
        }
        let store = self.store()?;
        let (base, _) = self.base(&store, None, false)?;
        let series = self.series()?;
        let trees = chain::apply::forward(&store.repo, base, &series.patches)?;
        let tip = (
            trees.last().copied().unwrap_or(base).to_string(),
            series.patches.len(),
        );
        Ok(self.chain_tip.get_or_init(|| tip).clone())
    }

    /// The applied tree for a build. With `strict`, the workdir must hold
    /// the current chain without hand edits; otherwise the chain's tree is
    /// computed in the cache (for `--dry-run`).
    pub fn applied(&self, dir: &Path, strict: bool) -> Result<crate::build::AppliedTree> {
        let (tree, patches) = self.chain_tip()?;
        if strict {
            let ins = workdir::inspect(dir)?;
            let at = ins.state.as_ref().map(|s| s.tree.clone());
            if at.as_deref() != Some(tree.as_str()) {
                anyhow::bail!(
                    "{} does not hold the current chain (tree {tree}); run `polykv-forge apply` first",
                    dir.display()
                );
            }
            if ins.drifted() {
                anyhow::bail!(
                    "{} has hand edits ({} modified, {} deleted); a build would not match its stamp. Run `polykv-forge status`",
                    dir.display(),
                    ins.modified.len(),
                    ins.deleted.len()
                );
            }
        }
        let release_number = self
            .manifest
            .upstream
            .release
            .as_deref()
            .and_then(|r| r.trim_start_matches('b').parse().ok());
        Ok(crate::build::AppliedTree {
            workdir: dir.to_path_buf(),
            tree,
            patches,
            release_number,
            commit: self.manifest.upstream.commit.clone(),
        })
    }

    /// The applied tree the chain in patches/ ends at (patches.lock's last
    /// line; the base when the series is empty).
    pub fn chain_tree(&self) -> Result<String> {
        match crate::chain::lock::Lock::load(&self.patches_dir)? {
            Some(lock) => Ok(lock
                .lines
                .last()
                .map_or(lock.base.clone(), |l| l.tree.clone())),
            None if self.series()?.patches.is_empty() => Ok(self.manifest.upstream.tree.clone()),
            None => anyhow::bail!("patches/patches.lock is missing; run `polykv-forge export`"),
        }
    }

    pub fn default_workdir(&self) -> PathBuf {
        self.layout().workdir()
    }

    /// This machine's facts for a build of `variant`, probed on first use.
    pub fn host(&self, variant: crate::build::Variant) -> Result<&crate::build::Host> {
        use crate::build::Variant;
        let i = match variant {
            Variant::Cpu => 0,
            Variant::Cuda => 1,
            Variant::Metal => 2,
        };
        if let Some(h) = self.hosts[i].get() {
            return Ok(h);
        }
        let h = crate::build::Host::probe(variant, &self.cache_root()?);
        Ok(self.hosts[i].get_or_init(|| h))
    }

    /// The build plan of `req` for the chain's tree in `dir` (see [`Project::applied`]).
    pub fn build_plan(
        &self,
        dir: &Path,
        strict: bool,
        req: &crate::build::Request,
    ) -> Result<crate::build::Plan> {
        let applied = self.applied(dir, strict)?;
        crate::build::plan(&self.root, &applied, req, self.host(req.variant)?)
    }

    /// The project as the gates see it, with the applied tree in `dir`.
    pub fn gate_workspace<'a>(&'a self, dir: &Path) -> GateWorkspace<'a> {
        GateWorkspace {
            project: self,
            workdir: dir.to_path_buf(),
        }
    }
}

/// [`crate::gate::plan::Workspace`] over a project and its workdir.
pub struct GateWorkspace<'a> {
    project: &'a Project,
    workdir: PathBuf,
}

impl crate::gate::plan::Workspace for GateWorkspace<'_> {
    fn build_plan(&self, variant: crate::build::Variant) -> Result<crate::build::Plan> {
        self.project.build_plan(
            &self.workdir,
            false,
            &crate::build::Request {
                variant,
                targets: Vec::new(),
                jobs: None,
                cuda_arch: None,
                fa_quants: None,
                cache_root: self.project.cache_root()?,
            },
        )
    }
    fn store(&self) -> Result<Store> {
        self.project.store()
    }
    fn models(&self) -> &[crate::manifest::Model] {
        &self.project.manifest.models
    }
    fn base_tree(&self) -> Result<git2::Oid> {
        self.project.manifest.tree_oid()
    }
    fn layout(&self) -> crate::layout::Layout {
        self.project.layout()
    }
    fn cache_root(&self) -> Result<PathBuf> {
        self.project.cache_root()
    }
}

pub fn find_root() -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let mut dir: &Path = &cwd;
    loop {
        if dir.join(crate::manifest::FILE_NAME).is_file() {
            return Ok(dir.to_path_buf());
        }
        match dir.parent() {
            Some(p) => dir = p,
            None => anyhow::bail!(
                "no {} in {} or any directory above it; run inside a polykv-forge project or pass --project",
                crate::manifest::FILE_NAME,
                cwd.display()
            ),
        }
    }
}
