//! One gate run as plan → execute. [`plan`] resolves what a gate needs
//! against the workspace — the variant's artifacts checked against their
//! manifest, its binaries, its models — and gives a typed [`Plan`]: what
//! would run, or a typed [`Skip`] with its reason (`gate run --dry-run`
//! prints it). [`execute`] runs a plan; [`run`] does both and saves the
//! result to `build/gates/<gate>.json`.

use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::report::{GateResult, Status};
use super::{Kind, Spec};
use crate::build::Variant;
use crate::layout::Layout;
use crate::manifest::Model;
use crate::store::Store;

/// What a gate run needs from the command's resolved project: the applied
/// tree's build plans (the host probed once), the cache and the layout.
pub trait Workspace {
    /// The build plan of `variant` (default targets) for the chain's applied tree.
    fn build_plan(&self, variant: Variant) -> Result<crate::build::Plan>;
    fn store(&self) -> Result<Store>;
    /// The test models the manifest pins.
    fn models(&self) -> &[Model];
    /// The pinned upstream tree (the evaluation text is read from it).
    fn base_tree(&self) -> Result<git2::Oid>;
    fn layout(&self) -> Layout;
    fn cache_root(&self) -> Result<PathBuf>;
}

/// Why a gate does not run. Every variant but [`Skip::Artifacts`] is a skip
/// ("skipped: why"); stale or foreign artifacts fail the gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Skip {
    /// This machine cannot build the variant.
    CannotBuild { variant: String, why: String },
    /// The variant is not built.
    NotBuilt { variant: String },
    /// The build directory's artifacts do not match their manifest or the chain.
    Artifacts { why: String },
    /// A binary the gate runs is not in the build.
    MissingBinary { binary: String, build_dir: String },
    /// A model the gate reads is not fetched.
    MissingModel { model: String },
}

impl Skip {
    pub fn reason(&self) -> String {
        match self {
            Skip::CannotBuild { variant, why } => {
                format!("the {variant} variant cannot be built here: {why}")
            }
            Skip::NotBuilt { variant } => {
                format!("the {variant} variant is not built (run `polykv-forge build --{variant}`)")
            }
            Skip::Artifacts { why } => why.clone(),
            Skip::MissingBinary { binary, build_dir } => {
                format!(
                    "binary {binary} is not in {build_dir} (add it with `build --target {binary}`)"
                )
            }
            Skip::MissingModel { model } => {
                format!("model {model} is not fetched (run `polykv-forge model fetch {model}`)")
            }
        }
    }

    /// Stale or foreign artifacts are refused, not skipped.
    pub fn is_failure(&self) -> bool {
        matches!(self, Skip::Artifacts { .. })
    }
}

/// A gate ready to run: every prerequisite checked.
#[derive(Debug, Clone, Serialize)]
pub struct RunPlan {
    pub gate: String,
    pub kind: Kind,
    pub variant: &'static str,
    pub build_dir: PathBuf,
    /// The applied tree and artifact key the build was made for.
    pub tree: String,
    pub artifact_key: String,
    /// The binaries it runs, by path.
    pub binaries: Vec<PathBuf>,
    /// Model name → the fetched file.
    pub models: BTreeMap<String, PathBuf>,
    /// Installed into the gate's Python environment when it runs.
    pub python_packages: Vec<String>,
    /// Configurations.
    pub configs: Vec<String>,
    /// Rows it runs: each model × the configurations that run for it.
    pub rows: usize,
    #[serde(skip)]
    spec: Spec,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "plan", rename_all = "snake_case")]
pub enum Plan {
    Run(Box<RunPlan>),
    Skip {
        gate: String,
        #[serde(flatten)]
        skip: Skip,
        reason: String,
    },
}

impl Plan {
    fn skip(spec: &Spec, skip: Skip) -> Plan {
        Plan::Skip {
            gate: spec.name.clone(),
            reason: skip.reason(),
            skip,
        }
    }
}

/// Resolves `spec`'s prerequisites in `ws`; reads only (no build, no download).
pub fn plan(spec: &Spec, ws: &dyn Workspace) -> Result<Plan> {
    let variant = spec.variant.name().to_string();
    let build_plan = ws.build_plan(spec.variant)?;
    let build_dir = PathBuf::from(&build_plan.build_dir);
    if crate::build::load_manifest(&build_dir)?.is_none() {
        return Ok(Plan::skip(
            spec,
            match &build_plan.blocked {
                Some(why) => Skip::CannotBuild {
                    variant,
                    why: why.clone(),
                },
                None => Skip::NotBuilt { variant },
            },
        ));
    }
    let manifest = match crate::build::check(&build_plan) {
        Ok(m) => m,
        Err(e) => {
            return Ok(Plan::skip(
                spec,
                Skip::Artifacts {
                    why: format!("{e:#}"),
                },
            ))
        }
    };
    let bin_dir = build_dir.join("bin");
    let mut binaries = Vec::new();
    for b in &spec.binaries {
        let p = bin_dir.join(b);
        if !p.is_file() {
            return Ok(Plan::skip(
                spec,
                Skip::MissingBinary {
                    binary: b.clone(),
                    build_dir: build_plan.build_dir.clone(),
                },
            ));
        }
        binaries.push(p);
    }
    let store = ws.store()?;
    let mut models = BTreeMap::new();
    for name in &spec.models {
        let m = crate::model::find(ws.models(), name)?;
        match crate::model::cached(&store, m) {
            Some(p) => {
                models.insert(name.clone(), p);
            }
            None => {
                return Ok(Plan::skip(
                    spec,
                    Skip::MissingModel {
                        model: name.clone(),
                    },
                ))
            }
        }
    }
    Ok(Plan::Run(Box::new(RunPlan {
        gate: spec.name.clone(),
        kind: spec.kind,
        variant: spec.variant.name(),
        build_dir,
        tree: manifest.tree,
        artifact_key: manifest.key,
        binaries,
        models,
        python_packages: spec.python_packages.clone(),
        configs: spec.configs.iter().map(|c| c.name.clone()).collect(),
        rows: spec.row_count(),
        spec: spec.clone(),
    })))
}

/// Runs a plan: the gate's Python environment (a failure to install it is a
/// skip), its parts by kind, then the judgement against its thresholds and
/// committed baseline.
pub fn execute(p: &RunPlan, ws: &dyn Workspace) -> Result<GateResult> {
    let spec = &p.spec;
    let python = if spec.python_packages.is_empty() {
        None
    } else {
        crate::progress::note(&format!(
            "gate {}: Python environment ({})",
            spec.name,
            spec.python_packages.join(" ")
        ));
        match crate::pip::venv(&ws.cache_root()?, &spec.python_packages) {
            Ok(py) => Some(py),
            Err(e) => {
                return Ok(GateResult::skipped(
                    spec,
                    format!("its Python packages could not be installed: {e:#}"),
                ))
            }
        }
    };
    let layout = ws.layout();
    let out_dir = layout.gate_results();
    let store = ws.store()?;
    let text = super::text::write_eval_text(&store.repo, ws.base_tree()?, &out_dir)?;
    let scratch = out_dir.join(&spec.name);
    crate::fsx::create_dir_all(&scratch)?;
    let ctx = super::engine::GateCtx {
        bin_dir: p.build_dir.join("bin"),
        tree: p.tree.clone(),
        models: p.models.clone(),
        text,
        scratch,
        python,
        gates_dir: layout.gates(),
    };
    let rows = match spec.kind {
        Kind::Command => super::engine::run_commands(spec, &ctx),
        Kind::Needle => super::needle::run(spec, &ctx),
        Kind::Decode => super::decode::run(spec, &ctx),
        Kind::SharedPool => super::shared_pool::run(spec, &ctx),
        Kind::AutoShare => super::shared_pool::auto::run(spec, &ctx),
        Kind::MtpServer => super::shared_pool::mtp::run(spec, &ctx),
    };
    let baseline = super::baseline::load(&layout.gates(), &spec.name)?;
    let mut result = GateResult {
        gate: spec.name.clone(),
        description: spec.description.clone(),
        status: Status::Failed,
        reason: None,
        benchmark: spec.benchmark,
        variant: spec.variant.name().to_string(),
        seconds: 0.0,
        artifact_key: Some(p.artifact_key.clone()),
        tree: Some(p.tree.clone()),
        columns: Vec::new(),
        rows,
        notes: Vec::new(),
    };
    super::engine::judge(spec, &mut result, baseline.as_ref());
    Ok(result)
}

/// Plans and runs one gate, and writes its result as the gate's latest.
pub fn run(spec: &Spec, ws: &dyn Workspace) -> Result<GateResult> {
    let t = Instant::now();
    let out_dir = ws.layout().gate_results();
    crate::fsx::create_dir_all(&out_dir)?;
    let result = match plan(spec, ws)? {
        Plan::Run(p) => {
            let mut r = execute(&p, ws)?;
            if r.status != Status::Skipped {
                r.seconds = t.elapsed().as_secs_f64();
            }
            r
        }
        Plan::Skip { skip, .. } => {
            let mut r = GateResult::skipped(spec, skip.reason());
            if skip.is_failure() {
                r.status = Status::Failed;
            }
            r
        }
    };
    save_result(&out_dir, &result)?;
    Ok(result)
}

/// Writes `<dir>/<gate>.json`, the gate's latest result.
pub fn save_result(dir: &Path, r: &GateResult) -> Result<()> {
    crate::fsx::write_atomic(
        &dir.join(format!("{}.json", r.gate)),
        &serde_json::to_vec_pretty(r)?,
    )
}

/// Judges `r`, the stored result of `spec`, again against the committed
/// baseline `b` (after `gate baseline` wrote it from that result): its
/// figures are those measured, every check is evaluated anew, and the result
/// is saved with a note saying where its floors came from. The spec is taken
/// as that run had it (without its manual rows when the result has none).
pub fn rejudge(
    spec: &Spec,
    mut r: GateResult,
    b: &super::baseline::Baseline,
    results_dir: &Path,
) -> Result<GateResult> {
    super::engine::judge(&spec.as_run(&r), &mut r, Some(b));
    r.notes.push(
        "Judged against the baseline committed from this run (`gate baseline`), without running again."
            .into(),
    );
    save_result(results_dir, &r)?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_reasons_name_the_fix_and_only_stale_artifacts_fail() {
        let s = Skip::NotBuilt {
            variant: "cpu".into(),
        };
        assert!(s.reason().contains("polykv-forge build --cpu"));
        assert!(!s.is_failure());
        let m = Skip::MissingModel {
            model: "smollm2".into(),
        };
        assert!(m.reason().contains("model fetch smollm2"));
        assert!(Skip::Artifacts {
            why: "stale".into()
        }
        .is_failure());
        let j = serde_json::to_value(Skip::MissingBinary {
            binary: "llama-server".into(),
            build_dir: "build/cpu".into(),
        })
        .unwrap();
        assert_eq!(j["kind"], "missing_binary");
        assert_eq!(j["binary"], "llama-server");
    }
}
