//! `build`: a variant of the applied workdir (CMake + Ninja), stamped with an
//! artifact manifest; `--dry-run` shows the plan, `--check` verifies the
//! stamped artifacts, `--compile-check` compiles the chain's CUDA objects.

use anyhow::Result;
use serde::Serialize;
use std::fmt::Write;
use std::path::Path;
use std::time::Instant;

use super::{short, Report};
use crate::build::{self, BuildManifest, BuildOutcome, CompileCheck, Plan, Variant};
use crate::project::Project;

pub struct Args<'a> {
    pub variant: Variant,
    pub targets: Vec<String>,
    pub jobs: Option<usize>,
    pub cuda_arch: Option<String>,
    pub dry_run: bool,
    pub check: bool,
    pub compile_check: bool,
    pub objects: &'a [String],
    pub workdir: Option<&'a Path>,
}

/// One of the four things `build` does; the JSON is the inner value's.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Built {
    Plan(Plan),
    Checked {
        #[serde(flatten)]
        manifest: BuildManifest,
        #[serde(skip)]
        build_dir: String,
    },
    CompileChecked {
        #[serde(flatten)]
        out: CompileCheck,
        #[serde(skip)]
        variant: Variant,
    },
    Built {
        #[serde(flatten)]
        out: BuildOutcome,
        #[serde(skip)]
        plan: Box<Plan>,
        #[serde(skip)]
        seconds: f64,
    },
}

pub fn run(project: &Project, a: &Args) -> Result<Built> {
    let dir = super::dir_or(a.workdir, project.default_workdir())?;
    let plan = project.build_plan(
        &dir,
        false,
        &build::Request {
            variant: a.variant,
            targets: a.targets.clone(),
            jobs: a.jobs,
            cuda_arch: a.cuda_arch.clone(),
            fa_quants: None,
            cache_root: project.cache_root()?,
        },
    )?;
    if a.dry_run {
        return Ok(Built::Plan(plan));
    }
    if a.check {
        let manifest = build::check(&plan)?;
        return Ok(Built::Checked {
            manifest,
            build_dir: plan.build_dir.clone(),
        });
    }
    if let Some(why) = &plan.blocked {
        anyhow::bail!(
            "cannot build the {} variant on this machine: {why}\n  `polykv-forge build --{} --dry-run` prints the exact commands",
            a.variant.name(),
            a.variant.name()
        );
    }
    // The workdir must hold exactly the chain the plan was made for.
    project.applied(&dir, true)?;
    if a.compile_check {
        let instances = crate::gen::cuda_instances(&project.patches_dir)?;
        let objs = build::cuda_check_objects(&project.series()?.patches, &instances, a.objects)?;
        let out = build::compile_check(&plan, &objs)?;
        return Ok(Built::CompileChecked {
            out,
            variant: a.variant,
        });
    }
    let t = Instant::now();
    let out = build::run(&plan)?;
    Ok(Built::Built {
        out,
        plan: Box::new(plan),
        seconds: t.elapsed().as_secs_f64(),
    })
}

impl Report for Built {
    fn human(&self) -> String {
        let mut s = String::new();
        // Writing into a String cannot fail.
        match self {
            Built::Plan(plan) => {
                let _ = writeln!(
                    s,
                    "# variant {} — cache key {}",
                    plan.variant.name(),
                    plan.key
                );
                let _ = writeln!(s, "# applied tree {}", plan.tree);
                for c in &plan.compilers {
                    let _ = writeln!(s, "# compiler: {c}");
                }
                if let Some(why) = &plan.blocked {
                    let _ = writeln!(s, "# cannot run on this machine: {why}");
                }
                let _ = writeln!(s, "{}", crate::proc::show(&plan.configure));
                let _ = write!(s, "{}", crate::proc::show(&plan.build));
            }
            Built::Checked {
                manifest,
                build_dir,
            } => {
                let _ = write!(
                    s,
                    "build --check: {} artifact(s) in {build_dir} match the manifest (key {}…, tree {})",
                    manifest.artifacts.len(),
                    short(&manifest.key),
                    short(&manifest.tree)
                );
            }
            Built::CompileChecked { out, variant } => {
                let _ = write!(
                    s,
                    "build: compile check of the {} variant: {} object(s), no warning, {:.0}s",
                    variant.name(),
                    out.objects.len(),
                    out.seconds
                );
                for o in &out.objects {
                    let _ = write!(s, "\n  {o}");
                }
            }
            Built::Built { out, plan, seconds } if out.up_to_date => {
                let _ = write!(
                    s,
                    "build: {} is up to date (key {}…, {} artifact(s) intact) in {seconds:.2}s",
                    plan.build_dir,
                    short(&plan.key),
                    out.manifest.artifacts.len()
                );
            }
            Built::Built { out, plan, .. } => {
                let _ = write!(
                    s,
                    "build: {} variant built in {:.0}s → {} ({} artifact(s), manifest {})",
                    plan.variant.name(),
                    out.manifest.seconds,
                    plan.build_dir,
                    out.manifest.artifacts.len(),
                    build::MANIFEST
                );
            }
        }
        s
    }
}
