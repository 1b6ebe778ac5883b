//! `build`: configure and build the applied workdir with CMake + Ninja, one
//! build directory per variant, keyed by everything that determines the
//! artifacts, and stamped with a manifest of their hashes that `--check` and
//! every gate verify.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::error::CheckFailed;
use crate::fsx;

pub mod host;
pub mod ninja;
pub mod plan;

pub use host::Host;
use ninja::{last_error, ninja_argv, ninja_progress, ninja_targets, resolve_targets};

/// The plan for `req` on a machine with the facts `host` (a pure function).
pub use plan::plan;

pub const MANIFEST: &str = "forge-manifest.json";
/// Bumped when what a manifest records changes; older manifests are rebuilt.
pub const MANIFEST_FORMAT: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    Cpu,
    Cuda,
    Metal,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Cpu => "cpu",
            Variant::Cuda => "cuda",
            Variant::Metal => "metal",
        }
    }
}

/// The binaries the gates need.
pub const DEFAULT_TARGETS: &[&str] = &[
    "llama-server",
    "llama-cli",
    "llama-completion",
    "llama-perplexity",
    "llama-bench",
    "llama-batched-bench",
    "test-backend-ops",
    "test-quantize-fns",
    "test-polykv-kv-shift",
    "test-polykv-kv-mean",
    "test-polykv-k-stats",
    "test-polykv-kv-policy",
    "test-polykv-turbo",
    "test-polykv-turbo-cuda",
    "test-polykv-mtp",
    "test-polykv-roofline",
];

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Request {
    pub variant: Variant,
    pub targets: Vec<String>,
    pub jobs: Option<usize>,
    pub cuda_arch: Option<String>,
    pub fa_quants: Option<String>,
    /// The cache (`--cache`): where `toolkit cuda` installs the CUDA toolkit.
    pub cache_root: PathBuf,
}

/// Everything about the applied tree the build needs.
#[derive(Debug, Clone)]
pub struct AppliedTree {
    pub workdir: PathBuf,
    pub tree: String,
    pub patches: usize,
    pub release_number: Option<u32>,
    pub commit: String,
}

/// A resolved build: exact commands, key, directories.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub variant: Variant,
    pub source_dir: String,
    pub build_dir: String,
    pub configure: Vec<String>,
    pub build: Vec<String>,
    pub targets: Vec<String>,
    /// The targets are the default list (not named by the user): those the
    /// configured tree does not define are left out, not an error.
    pub default_targets: bool,
    pub key: String,
    pub tree: String,
    pub compilers: Vec<String>,
    /// Why this machine cannot run the plan (the plan is still printed with --dry-run).
    pub blocked: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Artifact {
    pub path: String,
    /// For a symlink (e.g. `libggml-cpu.so -> libggml-cpu.so.0`): its target.
    /// Size and sha256 are then those of the file it resolves to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    pub size: u64,
    pub sha256: String,
}

/// Whether a file name in bin/ is a shared library (`libx.so`, `libx.so.0.25.3`, `libx.dylib`).
fn is_library(name: &str) -> bool {
    name.ends_with(".dylib")
        || name.ends_with(".so")
        || name.split_once(".so.").is_some_and(|(_, v)| {
            v.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildManifest {
    #[serde(default)]
    pub format: u32,
    pub key: String,
    pub variant: Variant,
    pub tree: String,
    pub targets: Vec<String>,
    /// Default targets this configuration does not define (e.g. upstream's
    /// `test-quantize-fns` is not defined with `GGML_BACKEND_DL=ON`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undefined: Vec<String>,
    pub configure: Vec<String>,
    pub artifacts: Vec<Artifact>,
    pub seconds: f64,
}

pub fn sha256_file(path: &Path) -> Result<String> {
    crate::source::sha256_file(path)
}

/// The files a build produced for its targets: the binaries, and every
/// shared library in bin/ — versioned files and the symlinks to them alike.
fn collect_artifacts(build_dir: &Path, targets: &[String]) -> Result<Vec<Artifact>> {
    let bin = build_dir.join("bin");
    let mut out = Vec::new();
    let mut names: Vec<String> = targets.to_vec();
    if let Ok(rd) = std::fs::read_dir(&bin) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if is_library(&n) {
                names.push(n);
            }
        }
    }
    names.sort();
    names.dedup();
    for n in names {
        let p = bin.join(&n);
        if !p.exists() {
            if targets.contains(&n) {
                bail!("target {n} built, but {} is missing", p.display());
            }
            continue;
        }
        out.push(describe(&p, format!("bin/{n}"))?);
    }
    Ok(out)
}

/// Size and hash of what `p` resolves to, and its link target if it is a symlink.
fn describe(p: &Path, rel: String) -> Result<Artifact> {
    let link = match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => Some(
            std::fs::read_link(p)
                .with_context(|| format!("reading link {}", p.display()))?
                .display()
                .to_string(),
        ),
        _ => None,
    };
    let meta = std::fs::metadata(p).with_context(|| format!("reading {}", p.display()))?;
    Ok(Artifact {
        path: rel,
        link,
        size: meta.len(),
        sha256: sha256_file(p)?,
    })
}

pub fn load_manifest(build_dir: &Path) -> Result<Option<BuildManifest>> {
    let p = build_dir.join(MANIFEST);
    if !p.exists() {
        return Ok(None);
    }
    let bytes = fsx::read(&p)?;
    Ok(Some(
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", p.display()))?,
    ))
}

/// Verifies every artifact on disk against the manifest; returns the problems.
pub fn check_artifacts(build_dir: &Path, m: &BuildManifest) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    for a in &m.artifacts {
        let p = build_dir.join(&a.path);
        match describe(&p, a.path.clone()) {
            Err(_) => problems.push(format!("{}: missing", a.path)),
            Ok(now) if now.link != a.link => problems.push(format!(
                "{}: links to {} instead of {} — a stale or foreign library; rebuild with `polykv-forge build --{}`",
                a.path,
                now.link.as_deref().unwrap_or("nothing (a plain file)"),
                a.link.as_deref().unwrap_or("nothing (a plain file)"),
                m.variant.name()
            )),
            Ok(now) => {
                let sha = now.sha256;
                if now.size != a.size || sha != a.sha256 {
                    problems.push(format!(
                        "{}: sha256 {} differs from the manifest's {} — a stale or foreign binary; rebuild with `polykv-forge build --{}`",
                        a.path,
                        crate::show::prefix(&sha, 16),
                        crate::show::prefix(&a.sha256, 16),
                        m.variant.name()
                    ));
                }
            }
        }
    }
    Ok(problems)
}

/// `build --check` and gates: the manifest matches the current plan and the files on disk.
pub fn check(plan: &Plan) -> Result<BuildManifest> {
    let dir = Path::new(&plan.build_dir);
    let Some(m) = load_manifest(dir)? else {
        bail!(CheckFailed {
            summary: format!(
                "{}: no {MANIFEST}; run `polykv-forge build --{}` first",
                plan.build_dir,
                plan.variant.name()
            )
        });
    };
    let mut problems = check_artifacts(dir, &m)?;
    if m.format != MANIFEST_FORMAT {
        problems.insert(
            0,
            format!(
                "{MANIFEST} has format {} (this polykv-forge writes {MANIFEST_FORMAT}); run `polykv-forge build --{}`",
                m.format,
                plan.variant.name()
            ),
        );
    }
    if m.key != plan.key {
        problems.insert(
            0,
            format!(
                "built from tree {} with key {}…, but the current workdir/options give key {}…: the build is stale; run `polykv-forge build --{}`",
                m.tree,
                crate::show::prefix(&m.key, 12),
                crate::show::prefix(&plan.key, 12),
                plan.variant.name()
            ),
        );
    }
    if !problems.is_empty() {
        bail!(CheckFailed {
            summary: format!(
                "{} artifacts do not match {MANIFEST}:\n  {}",
                plan.build_dir,
                problems.join("\n  ")
            )
        });
    }
    Ok(m)
}

#[derive(Debug, Serialize)]
pub struct BuildOutcome {
    pub up_to_date: bool,
    pub manifest: BuildManifest,
    pub log: String,
}

/// Runs the plan unless the manifest already matches it and the artifacts are intact.
pub fn run(plan: &Plan) -> Result<BuildOutcome> {
    let dir = PathBuf::from(&plan.build_dir);
    let log_path = dir.join("forge-build.log");
    if let Some(why) = &plan.blocked {
        bail!(
            "cannot build the {} variant on this machine: {why}\n  `polykv-forge build --{} --dry-run` prints the exact commands",
            plan.variant.name(),
            plan.variant.name()
        );
    }
    if let Some(m) = load_manifest(&dir)? {
        let has_targets = plan
            .targets
            .iter()
            .all(|t| m.targets.contains(t) || (plan.default_targets && m.undefined.contains(t)));
        if m.format == MANIFEST_FORMAT
            && m.key == plan.key
            && has_targets
            && check_artifacts(&dir, &m)?.is_empty()
        {
            return Ok(BuildOutcome {
                up_to_date: true,
                manifest: m,
                log: log_path.display().to_string(),
            });
        }
    }
    let t = std::time::Instant::now();
    fsx::create_dir_all(&dir)?;
    // The manifest goes first: a build that fails leaves no manifest claiming old artifacts.
    let previous = load_manifest(&dir).ok().flatten();
    let _ = std::fs::remove_file(dir.join(MANIFEST));
    let (mut log, base) = configure_logged(plan, &log_path)?;
    use std::io::Write;
    // The targets this configuration defines decide what is built: upstream
    // defines some only for some options.
    let defined = ninja_targets(&dir)?;
    let (wanted, undefined) = resolve_targets(plan, &defined)?;
    if !undefined.is_empty() {
        writeln!(
            log,
            "# not defined by this configuration, not built: {}",
            undefined.join(", ")
        )?;
    }
    let argv = ninja_argv(plan, &wanted);
    // ccache: paths under the project are hashed relative to it, so another
    // checkout of the same tree (CI's fresh clone) hits the same cache.
    writeln!(log, "$ {}", crate::proc::show(&argv))?;
    let pb = crate::progress::bar(0, &format!("building {}", plan.variant.name()));
    run_logged(&argv, base, &mut log, &log_path, "build", Some(&pb))?;
    pb.finish_and_clear();
    // Targets built earlier with the same key stay part of the manifest.
    let mut targets = wanted;
    if let Some(old) = previous.filter(|m| m.key == plan.key) {
        for t in old.targets {
            if !targets.contains(&t) {
                targets.push(t);
            }
        }
    }
    let artifacts = collect_artifacts(&dir, &targets)?;
    let m = BuildManifest {
        format: MANIFEST_FORMAT,
        key: plan.key.clone(),
        variant: plan.variant,
        tree: plan.tree.clone(),
        targets,
        undefined,
        configure: plan.configure.clone(),
        artifacts,
        seconds: t.elapsed().as_secs_f64(),
    };
    fsx::write_atomic(&dir.join(MANIFEST), &serde_json::to_vec_pretty(&m)?)?;
    Ok(BuildOutcome {
        up_to_date: false,
        manifest: m,
        log: log_path.display().to_string(),
    })
}

/// CUDA translation units that dispatch on tensor types: compiled by every
/// compile check, since the chain's new types reach them through `ggml.h`.
pub const CUDA_TYPE_UNITS: &[&str] = &[
    "ggml-cuda.cu",
    "set-rows.cu",
    "getrows.cu",
    "cpy.cu",
    "convert.cu",
    "fattn.cu",
];

/// The CUDA objects a compile check builds: the type-dispatching units, every
/// `.cu` file under `ggml/src/ggml-cuda/` that the chain's patches add or
/// modify except the generated instances not in `instances.compiled`, and
/// `extra` (paths relative to that folder), as Ninja targets.
pub fn cuda_check_objects(
    patches: &[crate::chain::series::PatchFile],
    instances: &crate::gen::CudaInstances,
    extra: &[String],
) -> Result<Vec<String>> {
    const DIR: &str = "ggml/src/ggml-cuda/";
    let mut units: Vec<String> = CUDA_TYPE_UNITS.iter().map(|u| u.to_string()).collect();
    for p in patches {
        for f in &p.parsed()?.files {
            let new = f.new_path.clone();
            if let Some(path) = new.as_deref() {
                if instances.all.iter().any(|i| i == path)
                    && !instances.compiled.iter().any(|i| i == path)
                {
                    continue;
                }
            }
            if let Some(rel) = new.as_deref().and_then(|n| n.strip_prefix(DIR)) {
                if rel.ends_with(".cu") && !units.iter().any(|u| u == rel) {
                    units.push(rel.to_string());
                }
            }
        }
    }
    for e in extra {
        crate::paths::check_relative(e.as_bytes())?;
        if !units.contains(e) {
            units.push(e.clone());
        }
    }
    Ok(units
        .into_iter()
        .map(|u| format!("{DIR}CMakeFiles/ggml-cuda.dir/{u}.o"))
        .collect())
}

/// What a compile check did.
#[derive(Debug, Serialize)]
pub struct CompileCheck {
    pub objects: Vec<String>,
    pub warnings: Vec<String>,
    pub seconds: f64,
    pub log: String,
}

/// Configures the variant exactly as `run` would and compiles only `objects`
/// (no link, no manifest): a compiler error, or any warning, fails it.
pub fn compile_check(plan: &Plan, objects: &[String]) -> Result<CompileCheck> {
    let dir = PathBuf::from(&plan.build_dir);
    if let Some(why) = &plan.blocked {
        bail!(
            "cannot compile the {} variant on this machine: {why}",
            plan.variant.name()
        );
    }
    let t = std::time::Instant::now();
    fsx::create_dir_all(&dir)?;
    let log_path = dir.join("forge-compile-check.log");
    let (mut log, base) = configure_logged(plan, &log_path)?;
    use std::io::Write;
    // Ninja from the plan, its targets replaced by the objects.
    let argv = ninja_argv(plan, objects);
    writeln!(log, "$ {}", crate::proc::show(&argv))?;
    // Only the compiler's output counts for warnings (not CMake's).
    let compile_from = log.metadata().map(|m| m.len() as usize).unwrap_or(0);
    let pb = crate::progress::bar(0, &format!("compiling {} objects", objects.len()));
    run_logged(&argv, base, &mut log, &log_path, "compile", Some(&pb))?;
    pb.finish_and_clear();
    drop(log);
    let text = std::fs::read(&log_path).unwrap_or_default();
    let text = String::from_utf8_lossy(text.get(compile_from..).unwrap_or_default());
    let warnings: Vec<String> = text
        .lines()
        .filter(|l| l.contains("warning"))
        .map(str::to_string)
        .collect();
    let out = CompileCheck {
        objects: objects.to_vec(),
        warnings,
        seconds: t.elapsed().as_secs_f64(),
        log: log_path.display().to_string(),
    };
    if !out.warnings.is_empty() {
        bail!(CheckFailed {
            summary: format!(
                "{} warning line(s) compiling the {} objects; first: {}; full log: {}",
                out.warnings.len(),
                plan.variant.name(),
                out.warnings[0],
                out.log
            ),
        });
    }
    Ok(out)
}

/// Creates the log and runs the plan's configure step into it; returns the
/// log and the ccache base (the project root above `build/<variant>`).
fn configure_logged<'a>(
    plan: &'a Plan,
    log_path: &Path,
) -> Result<(std::fs::File, Option<&'a Path>)> {
    use std::io::Write;
    let mut log = std::fs::File::create(log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    writeln!(log, "$ {}", crate::proc::show(&plan.configure))?;
    let base = Path::new(&plan.build_dir).parent().and_then(Path::parent);
    run_logged(&plan.configure, base, &mut log, log_path, "configure", None)?;
    Ok((log, base))
}

/// Runs a command with its output going to the log; Ninja's `[n/m]` lines feed the bar.
fn run_logged(
    argv: &[String],
    ccache_base: Option<&Path>,
    log: &mut std::fs::File,
    log_path: &Path,
    what: &str,
    pb: Option<&indicatif::ProgressBar>,
) -> Result<()> {
    let mut cmd = crate::proc::Cmd::from_argv(argv)?;
    if let Some(root) = ccache_base {
        if std::env::var_os("CCACHE_BASEDIR").is_none() {
            cmd = cmd.env("CCACHE_BASEDIR", root);
        }
        cmd = cmd.env("CCACHE_NOHASHDIR", "true");
    }
    let started = std::time::Instant::now();
    let mut last_note = std::time::Instant::now();
    let on_line = |line: &str| {
        let Some((n, m)) = ninja_progress(line) else {
            return;
        };
        if let Some(pb) = pb {
            pb.set_length(m);
            pb.set_position(n);
            pb.set_message(
                line.split("] ")
                    .nth(1)
                    .unwrap_or("")
                    .chars()
                    .take(60)
                    .collect::<String>(),
            );
        }
        // Without a terminal, a plain line every 30 s says the build is alive.
        if pb.is_some_and(|p| p.is_hidden()) && last_note.elapsed().as_secs() >= 30 {
            eprintln!("build: [{n}/{m}] {:.0}s", started.elapsed().as_secs_f64());
            last_note = std::time::Instant::now();
        }
    };
    cmd.run_lines(log, log_path, on_line, last_error)
        .with_context(|| format!("{what} failed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_check_objects_cover_the_chain() {
        let diff = "diff --git a/ggml/src/ggml-cuda/turbo.cu b/ggml/src/ggml-cuda/turbo.cu\nnew file mode 100644\n--- /dev/null\n+++ b/ggml/src/ggml-cuda/turbo.cu\n@@ -0,0 +1 @@\n+x\n\
diff --git a/ggml/src/ggml-cuda/fattn.cu b/ggml/src/ggml-cuda/fattn.cu\n--- a/ggml/src/ggml-cuda/fattn.cu\n+++ b/ggml/src/ggml-cuda/fattn.cu\n@@ -1 +1 @@\n-a\n+b\n\
diff --git a/ggml/src/ggml-cuda/gone.cu b/ggml/src/ggml-cuda/gone.cu\ndeleted file mode 100644\n--- a/ggml/src/ggml-cuda/gone.cu\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n\
diff --git a/src/llama.cpp b/src/llama.cpp\n--- a/src/llama.cpp\n+++ b/src/llama.cpp\n@@ -1 +1 @@\n-a\n+b\n";
        let patch =
            crate::chain::series::PatchFile::from_bytes("0004-x.patch", diff.as_bytes().to_vec())
                .unwrap();
        let objs = cuda_check_objects(
            std::slice::from_ref(&patch),
            &crate::gen::CudaInstances::default(),
            &["template-instances/x.cu".to_string()],
        )
        .unwrap();
        let dir = "ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/";
        assert_eq!(objs.len(), CUDA_TYPE_UNITS.len() + 2, "{objs:?}");
        assert!(objs.contains(&format!("{dir}turbo.cu.o")));
        assert!(objs.contains(&format!("{dir}template-instances/x.cu.o")));
        assert_eq!(
            objs.iter().filter(|o| o.ends_with("/fattn.cu.o")).count(),
            1
        );
        assert!(!objs.iter().any(|o| o.contains("gone.cu")), "{objs:?}");
        assert!(cuda_check_objects(
            &[],
            &crate::gen::CudaInstances::default(),
            &["../escape.cu".to_string()]
        )
        .is_err());
        // a generated instance is compiled only when it represents its family
        let inst = crate::gen::CudaInstances {
            all: vec!["ggml/src/ggml-cuda/turbo.cu".to_string()],
            compiled: vec![],
        };
        let objs = cuda_check_objects(std::slice::from_ref(&patch), &inst, &[]).unwrap();
        assert!(!objs.contains(&format!("{dir}turbo.cu.o")), "{objs:?}");
        let inst = crate::gen::CudaInstances {
            compiled: inst.all.clone(),
            ..inst
        };
        let objs = cuda_check_objects(&[patch], &inst, &[]).unwrap();
        assert!(objs.contains(&format!("{dir}turbo.cu.o")), "{objs:?}");
    }

    #[test]
    fn library_names() {
        for yes in [
            "libggml-cpu.so",
            "libggml-cpu.so.0",
            "libggml-cpu.so.0.25.3",
            "libx.dylib",
        ] {
            assert!(is_library(yes), "{yes}");
        }
        for no in ["llama-cli", "libx.so.orig", "libx.so.", "notes.txt"] {
            assert!(!is_library(no), "{no}");
        }
    }

    #[test]
    fn ninja_lines() {
        assert_eq!(
            ninja_progress("[12/234] Building C object x.o"),
            Some((12, 234))
        );
        assert_eq!(ninja_progress("ninja: no work to do."), None);
    }
}
