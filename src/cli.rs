//! Command-line interface: clap parsing, resolution into settings, dispatch,
//! human or JSON output, and exit codes (0 ok, 1 a check failed, 2 usage or
//! environment error).

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

use crate::cmd;
use crate::printer::report as emit;
use crate::project::Project;

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
        /// Say whether the cache holds the tree and which sources would be tried; fetch nothing.
        #[arg(long)]
        dry_run: bool,
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
        /// Check that the chain applies and say what would be created; write nothing.
        #[arg(long)]
        dry_run: bool,
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
        /// Say which generated files would change; write nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        src: SourceArgs,
    },
    /// Test models: fetch them (pinned by sha256) or list them.
    Model {
        #[command(subcommand)]
        cmd: ModelCmd,
    },
    /// Check the applied tree's Metal sources on any OS: type-check against a model of MSL,
    /// lint the host's kernel names against the instances, run the turbo functions on the CPU
    /// against the C reference (needs clang++ 15+ and `build --cpu`).
    MetalCheck {
        /// Also plant one error per check and require each to be caught.
        #[arg(long)]
        planted: bool,
        #[arg(long)]
        workdir: Option<PathBuf>,
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
        /// Run the named gates as `--all` runs them: without their manual rows
        /// (the rows CI runs; a maintainer's quick re-check of one gate).
        #[arg(long, conflicts_with = "all")]
        ci_rows: bool,
        #[arg(long)]
        workdir: Option<PathBuf>,
        /// Say what would run (the build, binaries and models each gate uses) or
        /// why it would be skipped; run nothing, write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Commit the latest passing results of gates as their baselines
    /// (gates/baselines/NAME.json): the floors of their `[baseline]` figures.
    Baseline {
        #[arg(required = true)]
        names: Vec<String>,
        /// Say what would be committed; write nothing.
        #[arg(long)]
        dry_run: bool,
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
        /// Say whether the cache has it and which wheels would be downloaded; download nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand, Debug)]
enum ModelCmd {
    /// Fetch models into the cache (all when none is named).
    Fetch {
        names: Vec<String>,
        /// Say which models would be fetched; fetch nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// List the pinned models and whether they are cached.
    List {},
}

fn parse_number(s: &str) -> std::result::Result<u32, String> {
    let digits = s.split('-').next().unwrap_or(s);
    digits
        .parse::<u32>()
        .map_err(|_| format!("`{s}` is not a patch number (e.g. 0003)"))
}

impl Cmd {
    /// Whether the command writes the project (patches/, the manifest, the
    /// workdir or a stack); read-only commands never touch it.
    fn writes_project(&self) -> bool {
        match self {
            Cmd::Apply { dry_run, .. }
            | Cmd::Export { dry_run, .. }
            | Cmd::Rebase { dry_run, .. } => !dry_run,
            Cmd::Edit { dry_run, .. } => !dry_run,
            Cmd::Gen {
                cmd: None,
                check,
                dry_run,
                ..
            } => !check && !dry_run,
            _ => false,
        }
    }
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

/// Dispatch: one arm per command, each turning parsed flags into a
/// command module's arguments (long only because there are many commands).
fn run(cli: &Cli) -> Result<i32> {
    let json = &cli.json;
    let project = Project::resolve(cli.project.as_deref(), cli.cache.as_deref())?;
    if cli.cmd.writes_project() {
        project.finish_pending()?;
    }
    match &cli.cmd {
        Cmd::Vendor {
            src,
            refresh,
            dry_run,
        } => emit(
            &cmd::vendor::run(&project, src.source.as_deref(), *refresh, *dry_run)?,
            *json,
        ),
        Cmd::Apply {
            upto,
            workdir,
            dry_run,
            force,
            no_wait,
            src,
        } => emit(
            &cmd::apply::run(
                &project,
                &cmd::apply::Args {
                    upto: *upto,
                    workdir: workdir.as_deref(),
                    dry_run: *dry_run,
                    force: *force,
                    wait: !*no_wait,
                    source: src.source.as_deref(),
                },
            )?,
            *json,
        ),
        Cmd::Verify { src } => emit(&cmd::verify::run(&project, src.source.as_deref())?, *json),
        Cmd::Edit {
            dir,
            force,
            dry_run,
            src,
        } => emit(
            &cmd::edit::run(
                &project,
                dir.as_deref(),
                *force,
                *dry_run,
                src.source.as_deref(),
            )?,
            *json,
        ),
        Cmd::Export {
            from,
            pin,
            dry_run,
            src,
        } => emit(
            &cmd::export::run(
                &project,
                &cmd::export::Args {
                    from: from.as_deref(),
                    pin: pin.as_deref(),
                    dry_run: *dry_run,
                    source: src.source.as_deref(),
                },
            )?,
            *json,
        ),
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
            let args = cmd::build::Args {
                variant,
                targets: targets.clone(),
                jobs: *jobs,
                cuda_arch: cuda_arch.clone(),
                dry_run: *dry_run,
                check: *check,
                compile_check: *compile_check,
                objects,
                workdir: workdir.as_deref(),
            };
            emit(&cmd::build::run(&project, &args)?, *json)
        }
        Cmd::Gate { cmd } => match cmd {
            GateCmd::List {} => emit(&cmd::gate::list(&project)?, *json),
            GateCmd::Baseline { names, dry_run } => {
                emit(&cmd::gate::baseline(&project, names, *dry_run)?, *json)
            }
            GateCmd::Report { allow_stale } => {
                emit(&cmd::gate::report(&project, *allow_stale)?, *json)
            }
            GateCmd::Run {
                names,
                all,
                require_all,
                ci_rows,
                workdir,
                dry_run,
            } => {
                let args = cmd::gate::RunArgs {
                    names,
                    all: *all,
                    require_all: *require_all,
                    ci_rows: *ci_rows,
                    workdir: workdir.as_deref(),
                    dry_run: *dry_run,
                };
                if *dry_run {
                    return emit(&cmd::gate::plan(&project, &args)?, *json);
                }
                // A person sees each gate as it finishes; JSON comes at the end.
                let ran = cmd::gate::run(&project, &args, |e| {
                    if !*json {
                        match e {
                            cmd::gate::Event::Left { gate, why } => {
                                // progress: a closed stdout must not stop the run
                                let _ = crate::printer::line(&cmd::gate::human_left(gate, why));
                            }
                            cmd::gate::Event::Done(r) => {
                                let _ = crate::printer::line(&cmd::gate::human_result(r));
                            }
                        }
                    }
                })?;
                emit(&ran, *json)
            }
        },
        Cmd::Gen {
            cmd: None,
            check,
            dir,
            dry_run,
            src,
        } => {
            if *check {
                return emit(&cmd::gen::check(&project, src.source.as_deref())?, *json);
            }
            emit(&cmd::gen::write(&project, dir.as_deref(), *dry_run)?, *json)
        }
        Cmd::Gen { cmd: Some(cmd), .. } => match cmd {
            GenCmd::Codebooks {
                bits,
                dim,
                dist,
                c_header,
            } => emit(&cmd::gen::codebooks(bits, *dim, *dist, *c_header)?, *json),
        },
        Cmd::MetalCheck { planted, workdir } => emit(
            &cmd::metal_check::run(&project, workdir.as_deref(), *planted)?,
            *json,
        ),
        Cmd::Toolkit {
            cmd: ToolkitCmd::Cuda { refresh, dry_run },
        } => emit(&cmd::toolkit::cuda(&project, *refresh, *dry_run)?, *json),
        Cmd::Model { cmd } => {
            let (names, fetch, dry_run) = match cmd {
                ModelCmd::Fetch { names, dry_run } => (names.as_slice(), true, *dry_run),
                ModelCmd::List {} => (&[][..], false, false),
            };
            emit(&cmd::model::run(&project, names, fetch, dry_run)?, *json)
        }
        Cmd::Rebase {
            to,
            to_source,
            drop_upstreamed,
            write_conflicts,
            dry_run,
            src,
        } => emit(
            &cmd::rebase::run(
                &project,
                &cmd::rebase::Args {
                    to,
                    to_source: to_source.as_deref(),
                    drop_upstreamed: *drop_upstreamed,
                    write_conflicts: write_conflicts.as_deref(),
                    dry_run: *dry_run,
                    source: src.source.as_deref(),
                },
            )?,
            *json,
        ),
        Cmd::Status { workdir } => emit(&cmd::status::run(&project, workdir.as_deref())?, *json),
    }
}
