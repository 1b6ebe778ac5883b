//! Command-line interface: clap parsing, resolution into settings, dispatch,
//! human or JSON output, and exit codes (0 ok, 1 a check failed, 2 usage or
//! environment error).

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

use crate::chain::{self, Series};
use crate::error::CheckFailed;
use crate::project::Project;
use crate::source;
use crate::{edit, status, workdir};

#[derive(Parser, Debug)]
#[command(
    name = "polykv-forge",
    version,
    about = "Pin upstream llama.cpp by content and carry a strictly proven patch series on top of it",
    after_help = "Exit codes: 0 ok, 1 a check failed, 2 usage or environment error."
)]
struct Cli {
    /// Machine-readable output: one JSON document on stdout, errors included
    /// (`{"ok": false, "error": {"kind": ..., "message": ...}}`).
    #[arg(long, global = true)]
    json: bool,
    /// Project root (default: the nearest directory upwards holding vendor-manifest.toml).
    #[arg(long, global = true, env = "POLYKV_FORGE_PROJECT")]
    project: Option<PathBuf>,
    /// Cache directory (default: $XDG_CACHE_HOME/polykv-forge).
    #[arg(long, global = true, env = "POLYKV_FORGE_CACHE")]
    cache: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Debug, Clone, Default)]
struct SourceArgs {
    /// Use this directory or archive (PATH[#subdir]) as the upstream source instead of the manifest's list.
    #[arg(long, env = "POLYKV_FORGE_SOURCE")]
    source: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Materialize the pinned upstream tree into the cache and verify its tree id.
    Vendor {
        #[command(flatten)]
        src: SourceArgs,
        /// Import again even when the cache already holds the tree.
        #[arg(long)]
        refresh: bool,
    },
    /// Apply the series strictly and write the result to the workdir atomically.
    Apply {
        /// Apply only up to and including this patch number (e.g. 0003).
        #[arg(long, value_parser = parse_number)]
        upto: Option<u32>,
        /// The workdir (default: work/llama.cpp in the project).
        #[arg(long)]
        workdir: Option<PathBuf>,
        /// Check and report what would change; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Discard hand edits in the workdir (or replace a directory not written by polykv-forge).
        #[arg(long)]
        force: bool,
        /// Fail instead of waiting when another run holds the workdir's lock.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        src: SourceArgs,
    },
    /// Prove the chain: strict apply, lock, reverse, re-export, ownership, markers.
    Verify {
        #[command(flatten)]
        src: SourceArgs,
    },
    /// Materialize the series as a git stack (one commit per patch) to edit with git.
    Edit {
        /// Where to create the stack (default: work/edit in the project).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Replace an existing stack (its unexported changes are lost).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        src: SourceArgs,
    },
    /// Write patches/ and patches.lock back from a stack made by `edit`, canonically.
    Export {
        /// The stack (default: work/edit in the project).
        #[arg(long)]
        from: Option<PathBuf>,
        /// Export against this new pin (a TOML file with an [upstream] table, e.g. after
        /// `rebase --write-conflicts`); vendor-manifest.toml's pin is updated with the patches.
        #[arg(long, value_name = "PIN_FILE")]
        pin: Option<PathBuf>,
        /// Report what would change; write nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        src: SourceArgs,
    },
    /// Build a variant of the applied workdir (CMake + Ninja), stamped with an artifact manifest.
    Build {
        /// The CPU variant (default).
        #[arg(long, conflicts_with_all = ["cuda", "metal"])]
        cpu: bool,
        /// CUDA, with ggml backends as loadable modules (libggml-cuda.so).
        #[arg(long, conflicts_with = "metal")]
        cuda: bool,
        /// Metal with the embedded library (macOS).
        #[arg(long)]
        metal: bool,
        /// Build this target (repeatable); default: the binaries the gates need.
        #[arg(long = "target", value_name = "T")]
        targets: Vec<String>,
        /// Parallel jobs for Ninja (default: Ninja's own choice).
        #[arg(long)]
        jobs: Option<usize>,
        /// CUDA architectures, e.g. `80;90` (default: from nvcc's list).
        #[arg(long)]
        cuda_arch: Option<String>,
        /// Print the exact configure and build commands and the cache key; run nothing.
        #[arg(long)]
        dry_run: bool,
        /// Verify the artifacts on disk against the build's manifest; build nothing.
        #[arg(long)]
        check: bool,
        /// With --cuda: configure, then compile only the CUDA objects the
        /// chain's types reach (the type-dispatching units and every .cu file
        /// the patches add or modify); an error or any warning fails. No GPU needed.
        #[arg(long, requires = "cuda", conflicts_with_all = ["check", "dry_run"])]
        compile_check: bool,
        /// With --compile-check: one more .cu file (relative to ggml/src/ggml-cuda/; repeatable).
        #[arg(long = "object", value_name = "FILE", requires = "compile_check")]
        objects: Vec<String>,
        #[arg(long)]
        workdir: Option<PathBuf>,
    },
    /// Gates: checks in numbers that the fork does what it claims.
    Gate {
        #[command(subcommand)]
        cmd: GateCmd,
    },
    /// Generate code: write the files patches/generated.toml declares into the
    /// edit stack, or (--check) prove the chain carries exactly them.
    #[command(args_conflicts_with_subcommands = true)]
    Gen {
        #[command(subcommand)]
        cmd: Option<GenCmd>,
        /// Compare the chain's final tree with the generators; write nothing.
        #[arg(long)]
        check: bool,
        /// The edit stack to write into (default: work/edit in the project).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        #[command(flatten)]
        src: SourceArgs,
    },
    /// Test models: fetch them (pinned by sha256) or list them.
    Model {
        #[command(subcommand)]
        cmd: ModelCmd,
    },
    /// Toolkits from PyPI for builds on machines without one (compile checks).
    Toolkit {
        #[command(subcommand)]
        cmd: ToolkitCmd,
    },
    /// Move the whole chain onto a new upstream pin, with a report per patch.
    Rebase {
        /// The new pin: a TOML file with an [upstream] table in vendor-manifest.toml's form.
        #[arg(long, value_name = "PIN_FILE")]
        to: PathBuf,
        /// Source override for the new pin (directory or archive, PATH[#subdir]).
        #[arg(long)]
        to_source: Option<String>,
        /// Drop patches whose every change is already upstream.
        #[arg(long)]
        drop_upstreamed: bool,
        /// Materialize the rebased stack, conflicts marked, as a git stack in DIR
        /// (writes DIR, so it cannot go with --dry-run).
        #[arg(long, value_name = "DIR", conflicts_with = "dry_run")]
        write_conflicts: Option<PathBuf>,
        /// Report only; write nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        src: SourceArgs,
    },
    /// Show the pin, its source, the chain and the workdir's state.
    Status {
        #[arg(long)]
        workdir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum GateCmd {
    /// List the gates in gates/.
    List {},
    /// Run gates by name, or all of them.
    Run {
        names: Vec<String>,
        #[arg(long)]
        all: bool,
        /// Treat a skipped gate as a failure (CI: everything must really run).
        #[arg(long)]
        require_all: bool,
        #[arg(long)]
        workdir: Option<PathBuf>,
    },
    /// Commit the latest passing results of gates as their baselines
    /// (gates/baselines/NAME.json): the floors of their `[baseline]` figures.
    Baseline {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Markdown tables of the latest results in build/gates/ (for docs/ and closing notes).
    /// Results measured on another applied tree than the chain's are refused (exit 1).
    Report {
        /// Render results from another applied tree too, marked stale.
        #[arg(long)]
        allow_stale: bool,
    },
}

#[derive(Subcommand, Debug)]
enum GenCmd {
    /// Converged Lloyd-Max codebooks for the coordinates of rotated unit vectors.
    Codebooks {
        /// Bits per coordinate (repeatable; default 2, 3, 4).
        #[arg(long = "bits", value_name = "B")]
        bits: Vec<u32>,
        /// Group dimension (the rotation group: 128, or 64 for head dim 64).
        #[arg(long, default_value_t = 128)]
        dim: u32,
        #[arg(long, value_enum, default_value_t = crate::gen::codebook::Dist::Gaussian)]
        dist: crate::gen::codebook::Dist,
        /// Print a C header (the form the turbo patch carries).
        #[arg(long)]
        c_header: bool,
    },
}

#[derive(Subcommand, Debug)]
enum ToolkitCmd {
    /// Install CUDA 13.0's nvcc, headers and cuBLAS (to link) from PyPI wheels
    /// into the cache; `build --cuda` then finds it when CUDA_HOME and PATH have none.
    Cuda {
        /// Install again even when the cache has it.
        #[arg(long)]
        refresh: bool,
    },
}

#[derive(Subcommand, Debug)]
enum ModelCmd {
    /// Fetch models into the cache (all when none is named).
    Fetch { names: Vec<String> },
    /// List the pinned models and whether they are cached.
    List {},
}

fn parse_number(s: &str) -> std::result::Result<u32, String> {
    let digits = s.split('-').next().unwrap_or(s);
    digits
        .parse::<u32>()
        .map_err(|_| format!("`{s}` is not a patch number (e.g. 0003)"))
}

fn print_rebase(r: &crate::rebase::Report) {
    println!(
        "rebase: {} → {} (commit {})",
        short(&r.from_tree),
        short(&r.to_tree),
        short(&r.to_commit)
    );
    println!("| patch | outcome | files | drift |");
    println!("|---|---|---|---|");
    for p in &r.patches {
        let files: Vec<String> = p
            .files
            .iter()
            .map(|f| format!("{} {}", f.path, f.result))
            .collect();
        println!(
            "| {} | {}{} | {} | {} |",
            p.patch,
            p.outcome,
            p.after_conflict
                .as_deref()
                .map(|c| format!(" (after the conflict in {c})"))
                .unwrap_or_default(),
            files.join("; "),
            if p.drift.is_empty() {
                "-".to_string()
            } else {
                p.drift.join("; ")
            }
        );
    }
    for p in &r.patches {
        for f in &p.files {
            if let Some(d) = &f.detail {
                println!("  {}: {}: {d}", p.patch, f.path);
            }
            for (i, c) in f.conflicts.iter().enumerate() {
                println!("  {}: {}: conflict {}:", p.patch, f.path, i + 1);
                println!(
                    "    upstream:\n      {}",
                    c.upstream.replace('\n', "\n      ")
                );
                println!("    patch:\n      {}", c.patch.replace('\n', "\n      "));
            }
        }
        for m in &p.markers_vanished {
            println!("  {m}");
        }
    }
    for c in &r.checks {
        println!("  check: {c}");
    }
    for d in &r.dropped {
        println!("  dropped (already upstream): {d}");
    }
    let undecided = r.patches.iter().any(|p| {
        p.outcome == crate::rebase::Outcome::AlreadyUpstream && !r.dropped.contains(&p.patch)
    });
    if undecided {
        println!("  some patches are already upstream: rerun with --drop-upstreamed to drop them");
    }
    println!(
        "rebase: {}",
        match (r.ok, r.written) {
            (true, true) => "ok — vendor-manifest.toml, patches/ and patches.lock updated together",
            (true, false) => "ok (dry run: nothing written)",
            (false, _) => "not done — nothing written (see above)",
        }
    );
}

fn print_gate(r: &crate::gate::report::GateResult) {
    use crate::gate::report::Status;
    match r.status {
        Status::Skipped => println!(
            "gate {}: skipped: {}\n",
            r.gate,
            r.reason.as_deref().unwrap_or("")
        ),
        s => {
            println!(
                "gate {}: {} ({:.0}s){}",
                r.gate,
                if s == Status::Passed {
                    "passed"
                } else {
                    "FAILED"
                },
                r.seconds,
                r.reason
                    .as_deref()
                    .map(|x| format!(" — {x}"))
                    .unwrap_or_default()
            );
            if !r.rows.is_empty() {
                println!("{}", crate::gate::report::table(r));
            }
            println!();
        }
    }
}

fn print_json<T: Serialize>(v: &T) -> Result<()> {
    crate::printer::json(v)
}

fn short(id: &str) -> &str {
    crate::show::prefix(id, 12)
}

/// Runs the CLI; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // `--json` anywhere on the command line asks for a JSON error too.
            let as_json = std::env::args_os().any(|a| a == "--json");
            return crate::printer::usage(&e, as_json);
        }
    };
    match run(&cli) {
        Ok(code) => code,
        Err(e) => crate::printer::error(&e, cli.json),
    }
}

fn run(cli: &Cli) -> Result<i32> {
    let json = &cli.json;
    let project = Project::resolve(cli.project.as_deref(), cli.cache.as_deref())?;
    match &cli.cmd {
        Cmd::Vendor { src, refresh } => {
            let t = Instant::now();
            let store = project.store()?;
            let (_, base) = project.base(&store, src.source.as_deref(), *refresh)?;
            #[derive(Serialize)]
            struct Out<'a> {
                ok: bool,
                commit: &'a str,
                tree: &'a str,
                source: &'a str,
                files: usize,
                cached: bool,
                seconds: f64,
            }
            let out = Out {
                ok: true,
                commit: &project.manifest.upstream.commit,
                tree: &base.tree,
                source: &base.source,
                files: base.files,
                cached: base.cached,
                seconds: t.elapsed().as_secs_f64(),
            };
            if *json {
                print_json(&out)?;
            } else {
                println!(
                    "vendor: upstream {} tree {} ({} files) from {}{} in {:.2}s",
                    short(out.commit),
                    out.tree,
                    out.files,
                    out.source,
                    if out.cached { " (cached)" } else { "" },
                    out.seconds
                );
            }
            Ok(0)
        }
        Cmd::Apply {
            upto,
            workdir,
            dry_run,
            force,
            no_wait,
            src,
        } => {
            let t = Instant::now();
            let store = project.store()?;
            let (base, _) = project.base(&store, src.source.as_deref(), false)?;
            let series = project.series()?;
            let patches = series.upto(*upto)?;
            let trees = chain::apply::forward(&store.repo, base, patches)?;
            let target = trees.last().copied().unwrap_or(base);
            let dir = match workdir {
                Some(d) => crate::fsx::absolute(d)?,
                None => project.default_workdir(),
            };
            let report = workdir::sync(
                &store.repo,
                &workdir::SyncRequest {
                    dir: &dir,
                    target,
                    base,
                    patches: patches
                        .iter()
                        .zip(&trees)
                        .map(|(p, t)| workdir::StatePatch {
                            file: p.file_name.clone(),
                            sha256: p.sha256.clone(),
                            tree: t.to_string(),
                        })
                        .collect(),
                    dry_run: *dry_run,
                    force: *force,
                    wait: !*no_wait,
                },
            )?;
            if *json {
                print_json(&report)?;
            } else {
                let verb = if *dry_run { "would apply" } else { "applied" };
                let last = patches
                    .last()
                    .map(|p| p.file_name.as_str())
                    .unwrap_or("(base only)");
                if report.already {
                    println!(
                        "apply: {} already holds tree {} (up to {last}); 0 files touched",
                        report.workdir,
                        short(&report.tree)
                    );
                } else {
                    println!(
                        "apply: {verb} {} patch(es) up to {last} → tree {} in {}: {} written, {} removed, {} unchanged ({:.2}s)",
                        patches.len(),
                        short(&report.tree),
                        report.workdir,
                        report.written,
                        report.removed,
                        report.kept,
                        t.elapsed().as_secs_f64()
                    );
                }
            }
            Ok(0)
        }
        Cmd::Verify { src } => {
            let t = Instant::now();
            let store = project.store()?;
            let (base, b) = project.base(&store, src.source.as_deref(), false)?;
            let series = project.series()?;
            let report =
                chain::verify::run(&store.repo, base, &series.patches, &project.patches_dir)?;
            #[derive(Serialize)]
            struct Out<'a> {
                ok: bool,
                pin: &'a crate::manifest::Upstream,
                source: &'a str,
                #[serde(flatten)]
                report: &'a chain::verify::Report,
                seconds: f64,
            }
            let out = Out {
                ok: report.ok,
                pin: &project.manifest.upstream,
                source: &b.source,
                report: &report,
                seconds: t.elapsed().as_secs_f64(),
            };
            if *json {
                print_json(&out)?;
            } else {
                println!(
                    "pin     {} {} commit {} tree {}",
                    project.manifest.upstream.name,
                    project.manifest.upstream.release.as_deref().unwrap_or(""),
                    short(&project.manifest.upstream.commit),
                    report.base_tree
                );
                println!("source  {}", b.source);
                println!("chain   {} patch(es)", report.patches.len());
                for c in &report.checks {
                    let tag = match (&c.skipped, c.ok) {
                        (Some(_), _) => "skip",
                        (None, true) => "ok",
                        (None, false) => "FAIL",
                    };
                    println!("  {tag:<5} {}", c.name);
                    if let Some(why) = &c.skipped {
                        println!("        skipped: {why}");
                    }
                    for p in &c.problems {
                        for (i, line) in p.lines().enumerate() {
                            println!("        {}{line}", if i == 0 { "- " } else { "  " });
                        }
                    }
                }
                println!(
                    "verify: {} — final tree {} ({:.2}s)",
                    if report.ok { "ok" } else { "FAILED" },
                    report.final_tree.as_deref().unwrap_or("-"),
                    out.seconds
                );
            }
            if report.ok {
                Ok(0)
            } else {
                if !*json {
                    return Err(CheckFailed {
                        summary: "verify found problems (listed above)".into(),
                    }
                    .into());
                }
                Ok(1)
            }
        }
        Cmd::Edit { dir, force, src } => {
            let store = project.store()?;
            let (base, _) = project.base(&store, src.source.as_deref(), false)?;
            let series = project.series()?;
            let dir = match dir {
                Some(d) => crate::fsx::absolute(d)?,
                None => project.root.join("work").join("edit"),
            };
            let r = edit::edit(
                &store.repo,
                base,
                &project.manifest.upstream.commit,
                &series,
                &dir,
                *force,
            )?;
            if *json {
                print_json(&r)?;
            } else {
                println!(
                    "edit: {} patch(es) as commits on branch `{}` in {} (base commit {})\n  change them with git (commit --amend, rebase -i, new commits), then run `polykv-forge export`",
                    r.patches,
                    edit::BRANCH,
                    r.dir,
                    short(&r.base_commit)
                );
            }
            Ok(0)
        }
        Cmd::Export {
            from,
            pin,
            dry_run,
            src,
        } => {
            let store = project.store()?;
            let (base, new_manifest) = match pin {
                None => (project.base(&store, src.source.as_deref(), false)?.0, None),
                Some(pin) => {
                    let (m, text) = project.pin_manifest(pin)?;
                    let b = source::ensure_base(
                        &store,
                        &m,
                        &source::Request {
                            override_source: src.source.clone(),
                            refresh: false,
                        },
                    )?;
                    // Only [upstream] moves: the models and every other table stay.
                    let manifest_path = project.root.join(crate::manifest::FILE_NAME);
                    let text = crate::rebase::replace_upstream(
                        &crate::fsx::read_to_string(&manifest_path)?,
                        &text,
                    )?;
                    (git2::Oid::from_str(&b.tree)?, Some(text))
                }
            };
            let from = match from {
                Some(d) => crate::fsx::absolute(d)?,
                None => project.root.join("work").join("edit"),
            };
            let r = edit::export(
                &store.repo,
                base,
                &from,
                &project.patches_dir,
                *dry_run,
                new_manifest.as_deref(),
            )?;
            if *json {
                print_json(&r)?;
            } else {
                let verb = if *dry_run { "would write" } else { "wrote" };
                if r.written.is_empty() && r.removed.is_empty() {
                    println!(
                        "export: patches/ already matches the stack ({} patch file(s) unchanged)",
                        r.unchanged.len()
                    );
                } else {
                    println!(
                    "export: {verb} {} patch file(s), {} unchanged, {} removed, and patches.lock",
                    r.written.len(),
                    r.unchanged.len(),
                    r.removed.len()
                );
                    for w in &r.written {
                        println!("  write   {w}");
                    }
                    for w in &r.removed {
                        println!("  remove  {w}");
                    }
                }
            }
            Ok(0)
        }
        Cmd::Build {
            cpu: _,
            cuda,
            metal,
            targets,
            jobs,
            cuda_arch,
            dry_run,
            check,
            compile_check,
            objects,
            workdir,
        } => {
            let variant = if *cuda {
                crate::build::Variant::Cuda
            } else if *metal {
                crate::build::Variant::Metal
            } else {
                crate::build::Variant::Cpu
            };
            let dir = match workdir {
                Some(d) => crate::fsx::absolute(d)?,
                None => project.default_workdir(),
            };
            let applied = project.applied(&dir, false)?;
            let plan = crate::build::plan(
                &project.root,
                &applied,
                &crate::build::Request {
                    variant,
                    targets: targets.clone(),
                    jobs: *jobs,
                    cuda_arch: cuda_arch.clone(),
                    fa_quants: None,
                    cache_root: project.cache_root()?,
                },
            )?;
            if *dry_run {
                if *json {
                    print_json(&plan)?;
                } else {
                    println!("# variant {} — cache key {}", variant.name(), plan.key);
                    println!("# applied tree {}", plan.tree);
                    for c in &plan.compilers {
                        println!("# compiler: {c}");
                    }
                    if let Some(why) = &plan.blocked {
                        println!("# cannot run on this machine: {why}");
                    }
                    println!("{}", crate::build::show_command(&plan.configure));
                    println!("{}", crate::build::show_command(&plan.build));
                }
                return Ok(0);
            }
            if *check {
                let m = crate::build::check(&plan)?;
                if *json {
                    print_json(&m)?;
                } else {
                    println!(
                        "build --check: {} artifact(s) in {} match the manifest (key {}…, tree {})",
                        m.artifacts.len(),
                        plan.build_dir,
                        short(&m.key),
                        short(&m.tree)
                    );
                }
                return Ok(0);
            }
            if let Some(why) = &plan.blocked {
                anyhow::bail!(
                    "cannot build the {} variant on this machine: {why}\n  `polykv-forge build --{} --dry-run` prints the exact commands",
                    variant.name(),
                    variant.name()
                );
            }
            // The workdir must hold exactly the chain the plan was made for.
            project.applied(&dir, true)?;
            if *compile_check {
                let instances = crate::gen::cuda_instances(&project.patches_dir)?;
                let objs = crate::build::cuda_check_objects(
                    &project.series()?.patches,
                    &instances,
                    objects,
                )?;
                let out = crate::build::compile_check(&plan, &objs)?;
                if *json {
                    print_json(&out)?;
                } else {
                    println!(
                        "build: compile check of the {} variant: {} object(s), no warning, {:.0}s",
                        variant.name(),
                        out.objects.len(),
                        out.seconds
                    );
                    for o in &out.objects {
                        println!("  {o}");
                    }
                }
                return Ok(0);
            }
            let t = Instant::now();
            let out = crate::build::run(&plan)?;
            if *json {
                print_json(&out)?;
            } else if out.up_to_date {
                println!(
                    "build: {} is up to date (key {}…, {} artifact(s) intact) in {:.2}s",
                    plan.build_dir,
                    short(&plan.key),
                    out.manifest.artifacts.len(),
                    t.elapsed().as_secs_f64()
                );
            } else {
                println!(
                    "build: {} variant built in {:.0}s → {} ({} artifact(s), manifest {})",
                    variant.name(),
                    out.manifest.seconds,
                    plan.build_dir,
                    out.manifest.artifacts.len(),
                    crate::build::MANIFEST
                );
            }
            Ok(0)
        }
        Cmd::Gate { cmd } => {
            let gates = crate::gate::load_all(&project.root.join("gates"))?;
            match cmd {
                GateCmd::List {} => {
                    #[derive(Serialize)]
                    struct Row<'a> {
                        name: &'a str,
                        description: &'a str,
                        variant: &'a str,
                        models: &'a [String],
                        benchmark: bool,
                        manual: Option<&'a str>,
                    }
                    let rows: Vec<Row> = gates
                        .iter()
                        .map(|(_, g)| Row {
                            name: &g.name,
                            description: &g.description,
                            variant: g.variant.name(),
                            models: &g.models,
                            benchmark: g.benchmark,
                            manual: g.manual.as_deref(),
                        })
                        .collect();
                    if *json {
                        print_json(&rows)?;
                    } else {
                        for r in rows {
                            println!(
                                "{:<14} [{}{}{}] {}",
                                r.name,
                                r.variant,
                                if r.benchmark { ", benchmark" } else { "" },
                                if r.manual.is_some() { ", manual" } else { "" },
                                r.description
                            );
                        }
                    }
                    Ok(0)
                }
                GateCmd::Baseline { names } => {
                    let chain_tree = project.chain_tree()?;
                    let results = project.root.join("build").join("gates");
                    #[derive(Serialize)]
                    struct Committed {
                        gate: String,
                        file: String,
                        tree: String,
                        rows: usize,
                        figures: usize,
                        /// The stored result judged again against the committed floors.
                        status: crate::gate::report::Status,
                    }
                    let mut committed = Vec::new();
                    for name in names {
                        let (_, spec) = gates
                            .iter()
                            .find(|(_, g)| &g.name == name)
                            .with_context(|| format!("no gate named `{name}` in gates/"))?;
                        let r = crate::gate::report::load_latest(&results, name)?.with_context(
                            || format!("no result of gate {name}: run `polykv-forge gate run {name}` first"),
                        )?;
                        let (out, b) = crate::gate::baseline::commit(
                            &project.root.join("gates"),
                            &spec.baseline,
                            &r,
                            &chain_tree,
                        )?;
                        if !*json {
                            println!(
                                "gate baseline: {} row(s) of {name} ({} figure(s) held) from applied tree {} → {}",
                                b.rows.len(),
                                spec.baseline.len(),
                                short(&b.tree),
                                out.display()
                            );
                        }
                        // The stored result failed only where floors were missing or
                        // moved on purpose: judged again against the committed ones.
                        let r = project.rejudge(spec, r, &b)?;
                        if !*json {
                            println!(
                                "gate baseline: the stored result of {name}, judged against it: {}",
                                if r.status == crate::gate::report::Status::Passed {
                                    "passed"
                                } else {
                                    "failed"
                                }
                            );
                        }
                        committed.push(Committed {
                            gate: name.clone(),
                            file: out.display().to_string(),
                            tree: b.tree.clone(),
                            rows: b.rows.len(),
                            figures: spec.baseline.len(),
                            status: r.status,
                        });
                    }
                    if *json {
                        print_json(&committed)?;
                    }
                    Ok(0)
                }
                GateCmd::Report { allow_stale } => {
                    let dir = project.root.join("build").join("gates");
                    let mut results = Vec::new();
                    for (_, g) in &gates {
                        results.extend(crate::gate::report::load_latest(&dir, &g.name)?);
                    }
                    if results.is_empty() {
                        anyhow::bail!(
                            "no gate results in {}; run `polykv-forge gate run --all` first",
                            dir.display()
                        );
                    }
                    let chain_tree = project.chain_tree()?;
                    let stale = crate::gate::report::stale(&results, &chain_tree);
                    if !stale.is_empty() && !*allow_stale {
                        anyhow::bail!(CheckFailed {
                            summary: format!(
                                "gate report: {} result(s) were measured on another applied tree than the chain's {}: {}; run them again (`polykv-forge gate run NAME`), or pass --allow-stale to render them marked stale",
                                stale.len(),
                                short(&chain_tree),
                                stale
                                    .iter()
                                    .map(|r| format!(
                                        "{} (tree {})",
                                        r.gate,
                                        short(r.tree.as_deref().unwrap_or(""))
                                    ))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        });
                    }
                    if *json {
                        #[derive(Serialize)]
                        struct Out<'a> {
                            chain_tree: &'a str,
                            stale: Vec<&'a str>,
                            results: &'a [crate::gate::report::GateResult],
                        }
                        print_json(&Out {
                            chain_tree: &chain_tree,
                            stale: stale.iter().map(|r| r.gate.as_str()).collect(),
                            results: &results,
                        })?;
                    } else {
                        print!("{}", crate::gate::report::markdown(&results, &chain_tree));
                    }
                    Ok(0)
                }
                GateCmd::Run {
                    names,
                    all,
                    require_all,
                    workdir,
                } => {
                    if names.is_empty() && !*all {
                        anyhow::bail!(
                            "name the gates to run, or pass --all (see `polykv-forge gate list`)"
                        );
                    }
                    let chosen: Vec<&crate::gate::Spec> = if *all {
                        gates.iter().map(|(_, g)| g).collect()
                    } else {
                        names
                            .iter()
                            .map(|n| {
                                gates.iter().map(|(_, g)| g).find(|g| &g.name == n).with_context(|| {
                                    format!("no gate `{n}` in gates/ (see `polykv-forge gate list`)")
                                })
                            })
                            .collect::<Result<_>>()?
                    };
                    let dir = match workdir {
                        Some(d) => crate::fsx::absolute(d)?,
                        None => project.default_workdir(),
                    };
                    let mut results = Vec::new();
                    for spec in chosen {
                        if let (true, Some(why)) = (*all, &spec.manual) {
                            // Not a result: its last real run (if any) stays in build/gates/.
                            if !*json {
                                println!(
                                    "gate {}: not run by --all (manual: {why}); run it with `polykv-forge gate run {}`",
                                    spec.name, spec.name
                                );
                            }
                            continue;
                        }
                        // --all runs the CI set: a gate's manual rows only when it is named.
                        let spec = if *all {
                            spec.without_manual_rows()
                        } else {
                            spec.clone()
                        };
                        let r = project.run_gate(&spec, &dir)?;
                        if !*json {
                            print_gate(&r);
                        }
                        results.push(r);
                    }
                    use crate::gate::report::Status;
                    let failed = results
                        .iter()
                        .filter(|r| r.status == Status::Failed)
                        .count();
                    let skipped = results
                        .iter()
                        .filter(|r| r.status == Status::Skipped)
                        .count();
                    let passed = results.len() - failed - skipped;
                    if *json {
                        print_json(&results)?;
                    } else {
                        println!("gates: {passed} passed, {failed} failed, {skipped} skipped");
                    }
                    Ok(if failed > 0 || (*require_all && skipped > 0) {
                        1
                    } else {
                        0
                    })
                }
            }
        }
        Cmd::Gen {
            cmd: None,
            check,
            dir,
            src,
        } => {
            let outputs = crate::gen::outputs(&project.patches_dir)?;
            if *check {
                let store = project.store()?;
                let (base, _) = project.base(&store, src.source.as_deref(), false)?;
                let series = project.series()?;
                let report =
                    chain::verify::run(&store.repo, base, &series.patches, &project.patches_dir)?;
                let problems: Vec<String> = report
                    .checks
                    .iter()
                    .filter(|c| c.name == "apply" || c.name == "generated")
                    .flat_map(|c| {
                        c.problems.iter().cloned().chain(
                            c.skipped
                                .iter()
                                .map(|why| format!("generated files not checked: {why}")),
                        )
                    })
                    .collect();
                let ok = problems.is_empty();
                if *json {
                    #[derive(Serialize)]
                    struct Out<'a> {
                        ok: bool,
                        files: &'a [crate::gen::Output],
                        problems: &'a [String],
                    }
                    print_json(&Out {
                        ok,
                        files: &outputs,
                        problems: &problems,
                    })?;
                } else {
                    for p in &problems {
                        eprintln!("error: {p}");
                    }
                    println!(
                        "gen --check: {} — {} generated file(s) declared in patches/{}",
                        if ok { "ok" } else { "FAILED" },
                        outputs.len(),
                        crate::gen::DECL_FILE
                    );
                }
                if !ok {
                    return Err(CheckFailed {
                        summary: format!("gen --check: {} problem(s)", problems.len()),
                    }
                    .into());
                }
                return Ok(0);
            }
            let stack = match dir {
                Some(d) => crate::fsx::absolute(d)?,
                None => project.root.join("work").join("edit"),
            };
            let written = crate::gen::write(&stack, &outputs)?;
            if *json {
                print_json(&written)?;
            } else {
                for w in &written {
                    println!(
                        "  {} {} ({})",
                        if w.changed { "wrote    " } else { "unchanged" },
                        w.path,
                        w.generator
                    );
                }
                if written.iter().any(|w| w.changed) {
                    println!(
                        "gen: commit the changes in {} (in the patch that owns them), then run `polykv-forge export`",
                        stack.display()
                    );
                }
            }
            Ok(0)
        }
        Cmd::Gen { cmd: Some(cmd), .. } => match cmd {
            GenCmd::Codebooks {
                bits,
                dim,
                dist,
                c_header,
            } => {
                let bits = if bits.is_empty() {
                    vec![2, 3, 4]
                } else {
                    bits.clone()
                };
                let books: Vec<_> = bits
                    .iter()
                    .map(|b| crate::gen::codebook::generate(*b, *dim, *dist))
                    .collect::<Result<_>>()?;
                if *json {
                    print_json(&books)?;
                } else if *c_header {
                    print!("{}", crate::gen::codebook::c_header(&books));
                } else {
                    for b in &books {
                        let pos: Vec<String> = b.centroids[b.centroids.len() / 2..]
                            .iter()
                            .map(|c| format!("{c:.5}"))
                            .collect();
                        println!(
                            "{} bits, dim {}, {:?}: ±[{}]  MSE/coord (unit variance) {:.6}  ({} iterations)",
                            b.bits,
                            b.dim,
                            b.dist,
                            pos.join(", "),
                            b.mse_unit,
                            b.iterations
                        );
                    }
                }
                Ok(0)
            }
        },
        Cmd::Toolkit {
            cmd: ToolkitCmd::Cuda { refresh },
        } => {
            let store = project.store()?;
            let home = crate::toolkit::install_cuda(&store.root, *refresh)?;
            let version = std::fs::read_to_string(home.join(".complete")).unwrap_or_default();
            let version = version.lines().last().unwrap_or("").to_string();
            if *json {
                print_json(&serde_json::json!({
                    "cuda_home": home.display().to_string(),
                    "nvcc": home.join("bin/nvcc").display().to_string(),
                    "version": version,
                }))?;
            } else {
                println!("CUDA toolkit {version}");
                println!("  CUDA_HOME={}", home.display());
            }
            Ok(0)
        }
        Cmd::Model { cmd } => {
            let store = project.store()?;
            let models = &project.manifest.models;
            #[derive(Serialize)]
            struct Row {
                name: String,
                file: String,
                sha256: String,
                path: Option<String>,
            }
            let (names, json, fetch) = match cmd {
                ModelCmd::Fetch { names } => (names.clone(), *json, true),
                ModelCmd::List {} => (Vec::new(), *json, false),
            };
            let chosen: Vec<&crate::model::Model> = if names.is_empty() {
                models.iter().collect()
            } else {
                names
                    .iter()
                    .map(|n| crate::model::find(models, n))
                    .collect::<Result<_>>()?
            };
            let mut rows = Vec::new();
            for m in chosen {
                let path = if fetch {
                    Some(crate::model::fetch(&store, m)?)
                } else {
                    crate::model::cached(&store, m)
                };
                rows.push(Row {
                    name: m.name.clone(),
                    file: m.file.clone(),
                    sha256: m.sha256.clone(),
                    path: path.map(|p| p.display().to_string()),
                });
            }
            if json {
                print_json(&rows)?;
            } else {
                for r in &rows {
                    println!(
                        "{:<14} {}",
                        r.name,
                        r.path
                            .as_deref()
                            .unwrap_or("not fetched (polykv-forge model fetch)")
                    );
                }
            }
            Ok(0)
        }
        Cmd::Rebase {
            to,
            to_source,
            drop_upstreamed,
            write_conflicts,
            dry_run,
            src,
        } => {
            let store = project.store()?;
            let (old_base, _) = project.base(&store, src.source.as_deref(), false)?;
            let (new_m, pin_text) = project.pin_manifest(to)?;
            let nb = source::ensure_base(
                &store,
                &new_m,
                &source::Request {
                    override_source: to_source.clone(),
                    refresh: false,
                },
            )?;
            let new_base = git2::Oid::from_str(&nb.tree)?;
            let series = project.series()?;
            let (mut report, rebased) = crate::rebase::plan(
                &store.repo,
                old_base,
                new_base,
                &new_m.upstream.commit,
                &series.patches,
                *drop_upstreamed,
                &project.patches_dir,
            )?;
            if let Some(dir) = write_conflicts {
                let dir = crate::fsx::absolute(dir)?;
                let stack = Series {
                    dir: project.patches_dir.clone(),
                    patches: rebased
                        .iter()
                        .map(|n| chain::PatchFile::from_bytes(&n.file_name, n.bytes.clone()))
                        .collect::<Result<_>>()?,
                };
                edit::edit(
                    &store.repo,
                    new_base,
                    &new_m.upstream.commit,
                    &stack,
                    &dir,
                    false,
                )?;
                if !*json {
                    println!(
                        "rebase: the rebased stack is in {} (conflicts marked); resolve, `git commit --amend`, then\n  polykv-forge export --from {} --pin {}",
                        dir.display(),
                        dir.display(),
                        to.display()
                    );
                }
            }
            crate::failpoint::hit("rebase-before-write");
            if report.ok && !*dry_run {
                let lock = crate::chain::lock::Lock {
                    base: new_base.to_string(),
                    lines: rebased
                        .iter()
                        .map(|n| crate::chain::lock::LockLine {
                            file: n.file_name.clone(),
                            sha256: source::sha256_hex(&n.bytes),
                            tree: n.tree.to_string(),
                        })
                        .collect(),
                };
                let manifest_path = project.root.join(crate::manifest::FILE_NAME);
                let manifest_text = crate::rebase::replace_upstream(
                    &crate::fsx::read_to_string(&manifest_path)?,
                    &pin_text,
                )?;
                let files: Vec<(String, Vec<u8>)> = rebased
                    .iter()
                    .map(|n| (n.file_name.clone(), n.bytes.clone()))
                    .collect();
                edit::write_series(
                    &project.patches_dir,
                    &files,
                    &lock.render(),
                    Some(&manifest_text),
                )?;
                report.written = true;
            }
            if *json {
                print_json(&report)?;
            } else {
                print_rebase(&report);
            }
            Ok(if report.ok { 0 } else { 1 })
        }
        Cmd::Status { workdir } => {
            let store = project.store()?;
            let pin = project.manifest.tree_oid()?;
            let record = store.base_record(pin);
            let vendored = store.has_base(pin);
            let series = project.series()?;
            let rows = status::chain_rows(&series.patches)?;
            let dir = match workdir {
                Some(d) => crate::fsx::absolute(d)?,
                None => project.default_workdir(),
            };
            let wd = status::workdir_status(&dir, &series.patches)?;
            #[derive(Serialize)]
            struct Out<'a> {
                pin: &'a crate::manifest::Upstream,
                vendored: bool,
                source: Option<String>,
                chain: Vec<status::ChainRow>,
                workdir: status::WorkdirStatus,
            }
            let out = Out {
                pin: &project.manifest.upstream,
                vendored,
                source: record.map(|r| r.source),
                chain: rows,
                workdir: wd,
            };
            if *json {
                print_json(&out)?;
            } else {
                let u = &project.manifest.upstream;
                println!(
                    "pin      {} {} commit {} tree {}",
                    u.name,
                    u.release.as_deref().unwrap_or(""),
                    short(&u.commit),
                    u.tree
                );
                println!(
                    "source   {}",
                    match (&out.source, vendored) {
                        (Some(s), true) => s.clone(),
                        _ => "not vendored yet (run `polykv-forge vendor`)".into(),
                    }
                );
                println!("chain    {} patch(es)", out.chain.len());
                for r in &out.chain {
                    println!(
                        "  {}  {:<44} {:>3} file(s)  +{} -{}",
                        r.number, r.file, r.files, r.added, r.removed
                    );
                }
                let w = &out.workdir;
                let what = match w.state.as_str() {
                    "clean" | "drifted" => format!(
                        "{}, applied up to {}{}",
                        w.state,
                        w.applied_upto
                            .as_deref()
                            .filter(|s| !s.is_empty())
                            .unwrap_or("the base"),
                        if w.current {
                            ""
                        } else {
                            " (not the current chain: run apply)"
                        }
                    ),
                    s => s.to_string(),
                };
                println!("workdir  {} — {what}", w.path);
                for m in &w.modified {
                    println!("  modified  {m}");
                }
                for d in &w.deleted {
                    println!("  deleted   {d}");
                }
                if w.untracked > 0 {
                    println!("  {} untracked file(s) kept across applies", w.untracked);
                }
            }
            Ok(0)
        }
    }
}
