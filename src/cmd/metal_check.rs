//! `metal-check`: the applied tree's Metal sources checked on any OS
//! (type-check against a model of MSL, the host's kernel names linted
//! against the instances, the turbo functions run on the CPU against the C
//! reference, and with `--planted` one planted error per check). See
//! `crate::metal` and docs/turbo-kv-metal.md.

use anyhow::{Context, Result};
use serde::Serialize;
use std::fmt::Write;
use std::path::Path;

use super::Report;
use crate::metal::{self, Checked};
use crate::project::Project;

#[derive(Serialize)]
pub struct MetalCheck {
    pub tree: String,
    pub ok: bool,
    #[serde(flatten)]
    pub checked: Checked,
    pub seconds: f64,
}

pub fn run(project: &Project, workdir: Option<&Path>, planted: bool) -> Result<MetalCheck> {
    let t0 = std::time::Instant::now();
    let tree = super::dir_or(workdir, project.default_workdir())?;
    let layout = project.layout();
    let ggml_base = layout.build("cpu").join("bin");
    if !ggml_base.is_dir() {
        anyhow::bail!(
            "{} is missing: run `polykv-forge build --cpu` first (the lint's host driver and the CPU run link ggml-base)",
            ggml_base.display()
        );
    }
    let build = layout.root.join("build");
    crate::fsx::create_dir_all(&build)?;
    // a scratch folder of our own, removed when the check ends
    let scratch = tempfile::Builder::new()
        .prefix("metal-check-")
        .tempdir_in(&build)
        .with_context(|| format!("making a scratch folder in {}", build.display()))?;
    let setup = metal::Setup {
        tree: tree.clone(),
        model: layout.metal_model(),
        ggml_base,
        scratch: scratch.path().to_path_buf(),
        jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    let checked = metal::run(&setup, planted)?;
    Ok(MetalCheck {
        tree: tree.display().to_string(),
        ok: checked.ok(),
        checked,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// A compile stage's line (`label`, then how many of the `what` pass) and its
/// failures.
fn compiled(s: &mut String, label: &str, what: &str, results: &[metal::LibraryResult]) {
    let failed: Vec<_> = results.iter().filter(|l| !l.ok).collect();
    let _ = writeln!(
        s,
        "  {label:<11} {} of {} {what} pass{}",
        results.len() - failed.len(),
        results.len(),
        if failed.is_empty() { "" } else { ":" }
    );
    failures(s, &failed);
}

/// The compile errors of failed files, indented under their name.
fn failures(s: &mut String, failed: &[&metal::LibraryResult]) {
    for l in failed {
        let _ = writeln!(
            s,
            "    {}:\n      {}",
            l.library,
            l.errors.replace('\n', "\n      ")
        );
    }
}

impl Report for MetalCheck {
    fn human(&self) -> String {
        let c = &self.checked;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "metal-check of {} with {} (a model of MSL, not Apple's compiler)",
            self.tree, c.compiler.version
        );
        compiled(&mut s, "type-check", "Metal libraries", &c.libraries);
        compiled(
            &mut s,
            "embedding",
            "libraries as CMake's embedding writes them (headers inlined)",
            &c.embedded,
        );
        let hf: Vec<_> = c.host.syntax.iter().filter(|l| !l.ok).collect();
        let _ = writeln!(
            s,
            "  host        {} host sources' syntax {}; supports_op accepts {} and refuses {} turbo ops; {} kernel names asked for",
            c.host.syntax.len(),
            if hf.is_empty() { "ok" } else { "FAILS" },
            c.host.accepted,
            c.host.refused,
            c.lint.requested
        );
        failures(&mut s, &hf);
        let _ = writeln!(
            s,
            "  lint        {} kernels, {} block/reader pairs checked ({} of types it does not know): {}",
            c.lint.kernels,
            c.lint.readers_checked,
            c.lint.readers_unknown,
            if c.lint.problems.is_empty() {
                "no problem".to_string()
            } else {
                format!("{} problem(s)", c.lint.problems.len())
            }
        );
        for p in &c.lint.problems {
            let _ = writeln!(s, "    {p}");
        }
        let _ = writeln!(s, "  cpu run     {}", c.exec.summary);
        if !c.exec.ok {
            for l in c.exec.lines.iter().filter(|l| !l.contains(": 0 differ")) {
                let _ = writeln!(s, "    {l}");
            }
        }
        for p in &c.planted {
            let _ = writeln!(
                s,
                "  planted     {:<10} {}: {}{}",
                p.check,
                p.name,
                if p.caught { "caught" } else { "NOT CAUGHT" },
                if p.detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", p.detail.trim())
                }
            );
        }
        let _ = write!(
            s,
            "metal-check: {} ({:.1}s)",
            if self.ok { "ok" } else { "FAILED" },
            self.seconds
        );
        s
    }

    fn exit_code(&self) -> i32 {
        if self.ok {
            0
        } else {
            1
        }
    }
}
