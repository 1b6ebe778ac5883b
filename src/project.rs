//! The resolved project ("high" arguments): root, manifest, patches,
//! cache; and the operations commands share — the verified base, the series,
//! the applied tree for builds, running one gate.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

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

    /// Runs one gate: prerequisites (artifacts verified against their
    /// manifest, binaries, models), then its commands; writes its JSON.
    pub fn run_gate(
        &self,
        spec: &crate::gate::Spec,
        dir: &Path,
    ) -> Result<crate::gate::report::GateResult> {
        use crate::gate::report::Status;
        let t = Instant::now();
        let out_dir = self.layout().gate_results();
        crate::fsx::create_dir_all(&out_dir)?;
        let mut result = self.gate_inner(spec, dir, &out_dir)?;
        if result.status != Status::Skipped {
            result.seconds = t.elapsed().as_secs_f64();
        }
        self.save_result(&result)?;
        Ok(result)
    }

    /// Writes `build/gates/<gate>.json`, the gate's latest result.
    fn save_result(&self, r: &crate::gate::report::GateResult) -> Result<()> {
        crate::fsx::write_atomic(
            &self
                .layout()
                .gate_results()
                .join(format!("{}.json", r.gate)),
            &serde_json::to_vec_pretty(r)?,
        )
    }

    /// Judges `r`, the stored result of `spec`, again against the committed
    /// baseline `b` (after `gate baseline` wrote it from that result): its
    /// figures are those measured, every check is evaluated anew, and the
    /// result is saved with a note saying where its floors came from. The
    /// spec is taken as that run had it (without its manual rows when the
    /// result has none of them).
    pub fn rejudge(
        &self,
        spec: &crate::gate::Spec,
        mut r: crate::gate::report::GateResult,
        b: &crate::gate::baseline::Baseline,
    ) -> Result<crate::gate::report::GateResult> {
        crate::gate::engine::judge(&spec.as_run(&r), &mut r, Some(b));
        r.notes.push(
            "Judged against the baseline committed from this run (`gate baseline`), without running again."
                .into(),
        );
        self.save_result(&r)?;
        Ok(r)
    }

    pub fn gate_inner(
        &self,
        spec: &crate::gate::Spec,
        dir: &Path,
        out_dir: &Path,
    ) -> Result<crate::gate::report::GateResult> {
        use crate::gate::report::{GateResult, Status};
        let applied = self.applied(dir, false)?;
        let plan = crate::build::plan(
            &self.root,
            &applied,
            &crate::build::Request {
                variant: spec.variant,
                targets: Vec::new(),
                jobs: None,
                cuda_arch: None,
                fa_quants: None,
                cache_root: self.cache_root()?,
            },
        )?;
        let build_dir = PathBuf::from(&plan.build_dir);
        if crate::build::load_manifest(&build_dir)?.is_none() {
            let why = match &plan.blocked {
                Some(b) => format!(
                    "the {} variant cannot be built here: {b}",
                    spec.variant.name()
                ),
                None => format!(
                    "the {} variant is not built (run `polykv-forge build --{}`)",
                    spec.variant.name(),
                    spec.variant.name()
                ),
            };
            return Ok(GateResult::skipped(spec, why));
        }
        // Stale or foreign artifacts are refused, not skipped.
        let manifest = match crate::build::check(&plan) {
            Ok(m) => m,
            Err(e) => {
                let mut r = GateResult::skipped(spec, format!("{e:#}"));
                r.status = Status::Failed;
                return Ok(r);
            }
        };
        for b in &spec.binaries {
            if !build_dir.join("bin").join(b).is_file() {
                return Ok(GateResult::skipped(
                    spec,
                    format!(
                        "binary {b} is not in {} (add it with `build --target {b}`)",
                        plan.build_dir
                    ),
                ));
            }
        }
        let store = self.store()?;
        let mut models = std::collections::BTreeMap::new();
        for name in &spec.models {
            let m = crate::model::find(&self.manifest.models, name)?;
            match crate::model::cached(&store, m) {
                Some(p) => {
                    models.insert(name.clone(), p);
                }
                None => {
                    return Ok(GateResult::skipped(
                        spec,
                        format!(
                            "model {name} is not fetched (run `polykv-forge model fetch {name}`)"
                        ),
                    ))
                }
            }
        }
        let python = if spec.python_packages.is_empty() {
            None
        } else {
            crate::progress::note(&format!(
                "gate {}: Python environment ({})",
                spec.name,
                spec.python_packages.join(" ")
            ));
            match crate::pip::venv(&self.cache_root()?, &spec.python_packages) {
                Ok(p) => Some(p),
                Err(e) => {
                    return Ok(GateResult::skipped(
                        spec,
                        format!("its Python packages could not be installed: {e:#}"),
                    ))
                }
            }
        };
        let base = self.manifest.tree_oid()?;
        let text = crate::gate::text::write_eval_text(&store.repo, base, out_dir)?;
        let scratch = out_dir.join(&spec.name);
        crate::fsx::create_dir_all(&scratch)?;
        let ctx = crate::gate::engine::GateCtx {
            bin_dir: build_dir.join("bin"),
            tree: manifest.tree.clone(),
            models,
            text,
            scratch,
            python,
            gates_dir: self.layout().gates(),
        };
        let rows = match spec.kind {
            crate::gate::Kind::Command => crate::gate::engine::run_commands(spec, &ctx),
            crate::gate::Kind::Needle => crate::gate::needle::run(spec, &ctx),
            crate::gate::Kind::Decode => crate::gate::decode::run(spec, &ctx),
            crate::gate::Kind::SharedPool => crate::gate::shared_pool::run(spec, &ctx),
            crate::gate::Kind::AutoShare => crate::gate::shared_pool::auto::run(spec, &ctx),
            crate::gate::Kind::MtpServer => crate::gate::shared_pool::mtp::run(spec, &ctx),
        };
        let baseline = crate::gate::baseline::load(&self.layout().gates(), &spec.name)?;
        let mut result = GateResult {
            gate: spec.name.clone(),
            description: spec.description.clone(),
            status: Status::Failed,
            reason: None,
            benchmark: spec.benchmark,
            variant: spec.variant.name().to_string(),
            seconds: 0.0,
            artifact_key: Some(manifest.key.clone()),
            tree: Some(manifest.tree.clone()),
            columns: Vec::new(),
            rows,
            notes: Vec::new(),
        };
        crate::gate::engine::judge(spec, &mut result, baseline.as_ref());
        Ok(result)
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
