//! The chain's Metal sources checked on any OS (`polykv-forge metal-check`),
//! since no Metal compiler can be installed where the project runs its CI:
//!
//! 1. **type-check**: every Metal library of the applied tree (upstream's and
//!    the fork's), rewritten ([`rewrite`]) and compiled by clang++ with
//!    `-fsyntax-only` against the model of `<metal_stdlib>` in
//!    `ci/metal/include`, C++14 rules for the kernel code; every template
//!    instance is instantiated;
//! 2. **host**: the Metal host sources the fork touches, syntax-checked, and
//!    the host's own kernel-name builders run for every op with a turbo
//!    operand (`ci/metal/host-names.cpp`, linked with ggml-base);
//! 3. **lint** ([`lint`]): every name the host asks for exists exactly once,
//!    and every instance reads whole blocks of its block type;
//! 4. **cpu run**: the turbo quantizer and readers of the Metal sources run on
//!    the CPU through the model against ggml-base's C reference
//!    (`ci/metal/turbo-exec.cpp`);
//! 5. with `planted`: one planted error of each kind, each of which the
//!    check it targets must catch.
//!
//! What this cannot see (address spaces, MSL-only limits, anything on a GPU)
//! is listed in docs/turbo-kv-metal.md.

pub mod lint;
pub mod rewrite;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::proc::Cmd;

/// Where the inputs are.
pub struct Setup {
    /// The applied tree.
    pub tree: PathBuf,
    /// `ci/metal` of the project (the model header, the two harnesses).
    pub model: PathBuf,
    /// The folder holding the CPU build's ggml-base library.
    pub ggml_base: PathBuf,
    /// A scratch folder the check owns (removed by its owner).
    pub scratch: PathBuf,
    pub jobs: usize,
}

/// The clang++ the checks run.
#[derive(Debug, Clone, Serialize)]
pub struct Compiler {
    pub path: String,
    pub version: String,
}

/// Names tried, first to last, after `$POLYKV_CLANGXX`.
const CLANG_NAMES: &[&str] = &[
    "clang++-19",
    "clang++-18",
    "clang++-17",
    "clang++-16",
    "clang++-15",
    "clang++",
];

const TIMEOUT: Duration = Duration::from_secs(600);

/// The first clang++ that has `_Float16` and `__bf16` on this target (MSL's
/// `half` and `bfloat`; clang 15 or newer on x86-64).
pub fn find_compiler(scratch: &Path) -> Result<Compiler> {
    let probe = scratch.join("probe.cpp");
    crate::fsx::write_atomic(&probe, b"_Float16 h = 1; __bf16 * b = nullptr;\n")?;
    let mut names: Vec<String> = Vec::new();
    if let Ok(p) = std::env::var("POLYKV_CLANGXX") {
        names.push(p);
    }
    names.extend(CLANG_NAMES.iter().map(|s| s.to_string()));
    for n in &names {
        let ok = Cmd::new(n)
            .args(["-x", "c++", "-std=c++14", "-fsyntax-only"])
            .arg(&probe)
            .timeout(Duration::from_secs(60))
            .probe()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            let v = Cmd::new(n).arg("--version").read()?;
            let version = String::from_utf8_lossy(&v.stdout)
                .lines()
                .next()
                .unwrap_or_default()
                .to_string();
            return Ok(Compiler {
                path: n.clone(),
                version,
            });
        }
    }
    bail!(
        "no clang++ with _Float16 and __bf16 on this target among {} (clang 15 or newer; on Debian: apt-get install clang-19, which ci/prereqs does; or set POLYKV_CLANGXX)",
        names.join(", ")
    )
}

fn metal_dir(tree: &Path) -> PathBuf {
    tree.join("ggml/src/ggml-metal")
}

/// The Metal libraries CMake builds (`METALLIB_KERNEL_SOURCES`), file names.
pub fn libraries(cmake: &str) -> Result<Vec<String>> {
    let start = cmake
        .find("set(METALLIB_KERNEL_SOURCES")
        .context("CMakeLists.txt of ggml-metal has no METALLIB_KERNEL_SOURCES")?;
    let body = &cmake[start..];
    let end = body
        .find(')')
        .context("METALLIB_KERNEL_SOURCES is not closed")?;
    let mut out = Vec::new();
    for line in body[..end].lines().skip(1) {
        let word = line.split('#').next().unwrap_or_default().trim();
        if let Some(name) = word.strip_prefix("kernels/") {
            out.push(name.to_string());
        }
    }
    if out.is_empty() {
        bail!("METALLIB_KERNEL_SOURCES lists no kernels/*.metal");
    }
    Ok(out)
}

/// The rewritten kernels folder and the libraries to check.
pub struct Prepared {
    pub kernels: PathBuf,
    pub libraries: Vec<String>,
}

/// Writes the C++ text of the MSL source `from` to `to`.
fn rewrite_file(from: &Path, to: &Path) -> Result<()> {
    let text = crate::fsx::read_to_string(from)?;
    crate::fsx::write_atomic(to, rewrite::rewrite(&text).as_bytes())
}

/// Copies the applied tree's kernels (and ggml-metal-impl.h) rewritten into
/// `dest`.
pub fn prepare(tree: &Path, dest: &Path) -> Result<Prepared> {
    let metal = metal_dir(tree);
    let src = metal.join("kernels");
    if !src.is_dir() {
        bail!(
            "{} is missing: run `polykv-forge apply` first (the check reads the applied tree)",
            src.display()
        );
    }
    crate::fsx::create_dir_all(dest)?;
    for e in std::fs::read_dir(&src).with_context(|| format!("reading {}", src.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type()?.is_file() && rewrite::is_source(&name) {
            rewrite_file(&e.path(), &dest.join(&name))?;
        }
    }
    rewrite_file(
        &metal.join("ggml-metal-impl.h"),
        &dest.join("ggml-metal-impl.h"),
    )?;
    let cmake = crate::fsx::read_to_string(&metal.join("CMakeLists.txt"))?;
    Ok(Prepared {
        kernels: dest.to_path_buf(),
        libraries: libraries(&cmake)?,
    })
}

/// The flags of every kernel compile: C++14 for the kernel code, the model
/// force-included from a system folder (so only the kernels are held to the
/// warnings), attributes and pragmas of MSL ignored.
fn kernel_flags(s: &Setup, includes: &[PathBuf]) -> Vec<String> {
    let mut f: Vec<String> = vec![
        "-x".into(),
        "c++".into(),
        "-std=c++14".into(),
        "-isystem".into(),
        s.model.join("include").display().to_string(),
        "-include".into(),
        "metal_stdlib".into(),
    ];
    for i in includes {
        f.push("-I".into());
        f.push(i.display().to_string());
    }
    f.extend(
        [
            "-Werror=c++17-extensions",
            "-Wno-unknown-attributes",
            "-Wno-unknown-pragmas",
            "-Wno-duplicate-decl-specifier",
            "-ferror-limit=20",
        ]
        .map(String::from),
    );
    f
}

/// The include folders of a kernel compile: the rewritten kernels, ggml's
/// sources and headers.
fn kernel_includes(s: &Setup, kernels: &Path) -> Vec<PathBuf> {
    vec![
        kernels.to_path_buf(),
        s.tree.join("ggml/src"),
        s.tree.join("ggml/include"),
    ]
}

/// Runs `f` over `items` on `jobs` threads, results in order.
fn parallel<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Result<Vec<R>> {
    let jobs = jobs.max(1).min(items.len().max(1));
    let chunk = items.len().div_ceil(jobs).max(1);
    std::thread::scope(|sc| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| sc.spawn(|| part.iter().map(&f).collect::<Vec<R>>()))
            .collect();
        let mut out = Vec::with_capacity(items.len());
        for h in handles {
            match h.join() {
                Ok(part) => out.extend(part),
                Err(_) => bail!("a worker thread of the Metal check panicked"),
            }
        }
        Ok(out)
    })
}

/// The first lines of a compiler's errors.
fn first_errors(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("warning:"))
        .take(12)
        .collect();
    lines.join("\n")
}

/// One library's type-check.
#[derive(Debug, Serialize)]
pub struct LibraryResult {
    pub library: String,
    pub ok: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub errors: String,
}

/// `clang++ -fsyntax-only` of one file, reported under `label`.
fn syntax(c: &Compiler, flags: &[String], file: &Path, label: &str) -> LibraryResult {
    let out = Cmd::new(&c.path)
        .args(flags)
        .arg("-fsyntax-only")
        .arg(file)
        .timeout(TIMEOUT)
        .probe();
    match out {
        Ok(o) => LibraryResult {
            library: label.to_string(),
            ok: o.status.success(),
            errors: if o.status.success() {
                String::new()
            } else {
                first_errors(&o.stderr)
            },
        },
        Err(e) => LibraryResult {
            library: label.to_string(),
            ok: false,
            errors: e.to_string(),
        },
    }
}

pub fn typecheck(
    c: &Compiler,
    s: &Setup,
    p: &Prepared,
    libs: &[String],
) -> Result<Vec<LibraryResult>> {
    let flags = kernel_flags(s, &kernel_includes(s, &p.kernels));
    parallel(libs, s.jobs, |lib| {
        syntax(c, &flags, &p.kernels.join(lib), lib)
    })
}

/// The kernels of every library (preprocessed with comments kept), and the
/// count of markers the lint could not read.
pub fn kernels(
    c: &Compiler,
    s: &Setup,
    p: &Prepared,
    libs: &[String],
) -> Result<BTreeMap<String, (Vec<lint::Kernel>, usize)>> {
    let flags = kernel_flags(s, &kernel_includes(s, &p.kernels));
    let outs = parallel(libs, s.jobs, |lib| {
        Cmd::new(&c.path)
            .args(&flags)
            .args(["-E", "-C", "-P"])
            .arg(p.kernels.join(lib))
            .timeout(TIMEOUT)
            .read()
            .map(|o| (lib.clone(), String::from_utf8_lossy(&o.stdout).into_owned()))
    })?;
    let mut map = BTreeMap::new();
    for o in outs {
        let (lib, text) = o.context("preprocessing a Metal library for the lint")?;
        let found = lint::kernels(&lib, &text);
        map.insert(lib, found);
    }
    Ok(map)
}

/// The host side: syntax of the host sources the fork touches, and the names
/// the host asks for.
#[derive(Debug, Serialize)]
pub struct HostResult {
    pub syntax: Vec<LibraryResult>,
    pub accepted: usize,
    pub refused: usize,
    #[serde(skip)]
    pub requested: Vec<(String, String)>,
    #[serde(skip)]
    pub refused_ops: Vec<String>,
}

fn host_flags(s: &Setup) -> Vec<String> {
    let m = metal_dir(&s.tree);
    vec![
        "-std=c++17".into(),
        // upstream's host code relies on <memory> arriving through Apple's headers
        "-include".into(),
        "memory".into(),
        "-I".into(),
        m.display().to_string(),
        "-I".into(),
        s.tree.join("ggml/src").display().to_string(),
        "-I".into(),
        s.tree.join("ggml/include").display().to_string(),
    ]
}

/// Link flags: ggml-base of the CPU build (found at run time too), output `exe`.
fn link_ggml_base(s: &Setup, exe: &Path) -> Vec<String> {
    vec![
        format!("-L{}", s.ggml_base.display()),
        "-lggml-base".into(),
        format!("-Wl,-rpath,{}", s.ggml_base.display()),
        "-o".into(),
        exe.display().to_string(),
    ]
}

pub fn host(c: &Compiler, s: &Setup) -> Result<HostResult> {
    let m = metal_dir(&s.tree);
    let flags = host_flags(s);
    let files: Vec<String> = ["ggml-metal-ops.cpp", "ggml-metal.cpp"]
        .iter()
        .map(|f| f.to_string())
        .collect();
    let syntax = parallel(&files, s.jobs, |f| syntax(c, &flags, &m.join(f), f))?;
    let exe = s.scratch.join("host-names");
    Cmd::new(&c.path)
        .args(&flags)
        .arg("-O0")
        .arg(s.model.join("host-names.cpp"))
        .arg(m.join("ggml-metal-device.cpp"))
        .arg(m.join("ggml-metal-polykv.cpp"))
        .arg(m.join("ggml-metal-tuning.cpp"))
        .args(link_ggml_base(s, &exe))
        .timeout(TIMEOUT)
        .read()
        .context(
            "building the host-name driver (ci/metal/host-names.cpp) with the host's sources",
        )?;
    let out = Cmd::new(&exe)
        .timeout(TIMEOUT)
        .read()
        .context("running the host-name driver")?;
    let h = lint::parse_host_names(&String::from_utf8_lossy(&out.stdout));
    if h.accepted.is_empty() {
        bail!("the host-name driver reports no accepted op: it did not run the host's supports_op");
    }
    Ok(HostResult {
        syntax,
        accepted: h.accepted.len(),
        refused: h.refused.len(),
        requested: h.requested,
        refused_ops: h.refused,
    })
}

/// The project that runs ggml-metal's CMake on any OS for its embedded
/// library alone: the Apple frameworks and the backend library stubbed, the
/// embedding's custom commands (concatenation and the `sed` inlining of the
/// headers, the fork's two passes included) attached to one target.
const EMBED_PROJECT: &str = r#"cmake_minimum_required(VERSION 3.14)
project(polykv_metal_embed C CXX)
set(GGML_METAL_EMBED_LIBRARY ON)
function(find_library var)
    set(${var} "${var}-stub" PARENT_SCOPE)
endfunction()
function(ggml_add_backend_library name)
    add_custom_target(${name})
endfunction()
function(target_link_libraries)
endfunction()
function(target_sources name vis)
    add_custom_target(${name}-embedded ALL DEPENDS ${ARGN})
endfunction()
add_subdirectory("@METAL@" metal)
"#;

/// The embedded library as CMake makes it: every library's embedded source
/// (the headers inlined, no local include left) type-checked as the runtime
/// compiles it (`GGML_METAL_EMBED_LIBRARY` defined).
pub fn embedded(
    c: &Compiler,
    s: &Setup,
    metal: &Path,
    libs: &[String],
    tag: &str,
) -> Result<Vec<LibraryResult>> {
    let dir = s.scratch.join(tag);
    crate::fsx::create_dir_all(&dir)?;
    let text = EMBED_PROJECT.replace("@METAL@", &metal.display().to_string().replace('\\', "/"));
    crate::fsx::write_atomic(&dir.join("CMakeLists.txt"), text.as_bytes())?;
    let build = dir.join("build");
    Cmd::new("cmake")
        .arg("-S")
        .arg(&dir)
        .arg("-B")
        .arg(&build)
        .args(["-G", "Ninja"])
        .timeout(TIMEOUT)
        .read()
        .context(
            "configuring ggml-metal's CMake for its embedded library (needs cmake and ninja)",
        )?;
    Cmd::new("ninja")
        .arg("-C")
        .arg(&build)
        .timeout(TIMEOUT)
        .read()
        .context("running the embedded library's custom commands")?;
    let generated = build.join("metal/autogenerated");
    let rewritten = dir.join("rewritten");
    crate::fsx::create_dir_all(&rewritten)?;
    for lib in libs {
        let stem = lib.trim_end_matches(".metal");
        let src = generated.join(format!("ggml-metal-embed-{stem}.metal"));
        rewrite_file(&src, &rewritten.join(lib))
            .with_context(|| format!("the embedded source of {lib}"))?;
    }
    // no include folder: an include the embedding left behind is an error
    let mut flags = kernel_flags(s, &[]);
    flags.push("-DGGML_METAL_EMBED_LIBRARY".into());
    parallel(libs, s.jobs, |lib| {
        syntax(c, &flags, &rewritten.join(lib), lib)
    })
}

/// The CPU run of the turbo functions against the C reference.
#[derive(Debug, Serialize)]
pub struct ExecResult {
    pub ok: bool,
    pub summary: String,
    pub lines: Vec<String>,
}

pub fn exec(c: &Compiler, s: &Setup, kernels: &Path, exe_name: &str) -> Result<ExecResult> {
    let exe = s.scratch.join(exe_name);
    let built = Cmd::new(&c.path)
        .args([
            "-std=c++14",
            "-O1",
            "-ffp-contract=off",
            "-Wno-unknown-pragmas",
            "-Wno-unknown-attributes",
        ])
        .arg("-isystem")
        .arg(s.model.join("include"))
        .arg("-I")
        .arg(kernels)
        .arg("-I")
        .arg(s.tree.join("ggml/src"))
        .arg("-I")
        .arg(s.tree.join("ggml/include"))
        .arg(s.model.join("turbo-exec.cpp"))
        .args(link_ggml_base(s, &exe))
        .timeout(TIMEOUT)
        .probe()?;
    if !built.status.success() {
        return Ok(ExecResult {
            ok: false,
            summary: "the CPU harness did not compile".into(),
            lines: first_errors(&built.stderr)
                .lines()
                .map(str::to_string)
                .collect(),
        });
    }
    let out = Cmd::new(&exe).timeout(TIMEOUT).probe()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let summary = lines.last().cloned().unwrap_or_default();
    Ok(ExecResult {
        ok: out.status.success() && summary.ends_with(", 0 failed"),
        summary,
        lines,
    })
}

/// One planted error and whether its check caught it.
#[derive(Debug, Serialize)]
pub struct Plant {
    pub name: String,
    pub check: &'static str,
    pub caught: bool,
    pub detail: String,
}

struct PlantSpec {
    name: &'static str,
    check: &'static str,
    file: &'static str,
    from: &'static str,
    to: &'static str,
}

/// One planted error per kind of check; each edit must apply exactly once.
const PLANTS: &[PlantSpec] = &[
    PlantSpec {
        name: "implicit float4 -> half4 in the rotated reader",
        check: "type-check",
        file: "polykv-turbo.h",
        from: "    reg = (type4) v;\n",
        to: "    reg = v;\n",
    },
    PlantSpec {
        name: "q8_0 K read with a turbo reader",
        check: "type-check",
        file: "polykv_fa_vec.metal",
        from: "block_q8_0, 8, dequantize_q8_0_t4, block_turbo3, 32, dequantize_turbo3_t4, 128, 128, 1>;",
        to: "block_q8_0, 8, dequantize_turbo3_t4, block_turbo3, 32, dequantize_turbo3_t4, 128, 128, 1>;",
    },
    PlantSpec {
        name: "encoder: threshold compared with >=",
        check: "cpu run",
        file: "polykv-turbo.h",
        from: "u > polykv_turbo_cb<BITS, G>::t(idx)",
        to: "u >= polykv_turbo_cb<BITS, G>::t(idx)",
    },
    PlantSpec {
        name: "tcq reader: window one value early",
        check: "cpu run",
        file: "polykv-turbo.h",
        from: "const int  p = 8 + (t + 1)*BITS - 8;",
        to: "const int  p = 8 + t*BITS - 8;",
    },
    PlantSpec {
        name: "a flash-attention instance reads half a turbo3 block",
        check: "lint",
        file: "polykv_fa_vec.metal",
        from: "block_turbo2, 32, dequantize_turbo2_t4, block_turbo3, 32, dequantize_turbo3_t4, 128, 128, 1>;",
        to: "block_turbo2, 32, dequantize_turbo2_t4, block_turbo3, 16, dequantize_turbo3_t4, 128, 128, 1>;",
    },
    PlantSpec {
        name: "a kernel name defined twice",
        check: "lint",
        file: "polykv_turbo.metal",
        from: "kernel_polykv_turbo_rotate_t kernel_polykv_turbo_rotate<64,  false>;\n",
        to: "kernel_polykv_turbo_rotate_t kernel_polykv_turbo_rotate<64,  false>;\ntemplate [[host_name(\"kernel_polykv_turbo_rotate_g64\")]] kernel kernel_polykv_turbo_rotate_t kernel_polykv_turbo_rotate<64,  true>;\n",
    },
    PlantSpec {
        name: "an accepted pair without its instance",
        check: "lint",
        file: "polykv_fa_vec.metal",
        from: "template [[host_name(\"kernel_flash_attn_ext_vec_q8_0_turbo3_dk128_dv128\")]] kernel",
        to: "template [[host_name(\"kernel_flash_attn_ext_vec_q8_0_turbo3_dk128_dv128_gone\")]] kernel",
    },
    PlantSpec {
        name: "an accepted get_rows without its kernel",
        check: "lint",
        file: "polykv-turbo-copies.metal",
        from: "template [[host_name(\"kernel_get_rows_tcq3\")]] kernel",
        to: "template [[host_name(\"kernel_get_rows_tcq3_gone\")]] kernel",
    },
];

/// Everything the command runs, in one report.
#[derive(Debug, Serialize)]
pub struct Checked {
    pub compiler: Compiler,
    pub libraries: Vec<LibraryResult>,
    /// The embedded library's sources, as CMake's embedding writes them.
    pub embedded: Vec<LibraryResult>,
    pub host: HostResult,
    pub lint: lint::Findings,
    pub exec: ExecResult,
    pub planted: Vec<Plant>,
}

impl Checked {
    pub fn ok(&self) -> bool {
        self.libraries.iter().all(|l| l.ok)
            && self.embedded.iter().all(|l| l.ok)
            && self.host.syntax.iter().all(|l| l.ok)
            && self.lint.problems.is_empty()
            && self.exec.ok
            && self.planted.iter().all(|p| p.caught)
    }
}

fn lint_all(
    map: &BTreeMap<String, (Vec<lint::Kernel>, usize)>,
    host: &HostResult,
) -> lint::Findings {
    let mut all = Vec::new();
    let mut unparsed = 0;
    for (k, u) in map.values() {
        all.extend(k.iter().cloned());
        unparsed += u;
    }
    lint::check(&all, unparsed, &host.requested, &host.refused_ops)
}

/// Runs every check; with `planted`, the planted errors too.
pub fn run(s: &Setup, planted: bool) -> Result<Checked> {
    crate::fsx::create_dir_all(&s.scratch)?;
    let compiler = find_compiler(&s.scratch)?;
    let p = prepare(&s.tree, &s.scratch.join("kernels"))?;
    let libraries = typecheck(&compiler, s, &p, &p.libraries)?;
    let embedded = embedded(&compiler, s, &metal_dir(&s.tree), &p.libraries, "embed")?;
    let host = host(&compiler, s)?;
    let map = kernels(&compiler, s, &p, &p.libraries)?;
    let lint = lint_all(&map, &host);
    let exec = exec(&compiler, s, &p.kernels, "turbo-exec")?;
    let mut plants = Vec::new();
    if planted {
        for (i, spec) in PLANTS.iter().enumerate() {
            plants.push(plant(&compiler, s, &p, &map, &host, i, spec)?);
        }
        plants.push(plant_embedding(&compiler, s, &p.libraries)?);
    }
    Ok(Checked {
        compiler,
        libraries,
        embedded,
        host,
        lint,
        exec,
        planted: plants,
    })
}

/// The embedding's planted error: CMake's first inlining pass loses
/// polykv-turbo.h (its include line is still deleted), on a copy of
/// ggml-metal; the embedded libraries that read the turbo types must fail.
fn plant_embedding(c: &Compiler, s: &Setup, libs: &[String]) -> Result<Plant> {
    let name = "the embedding drops polykv-turbo.h";
    let root = s.scratch.join("plant-embed");
    let copy = root.join("ggml-metal");
    crate::fsx::copy_dir(&metal_dir(&s.tree), &copy)?;
    std::fs::copy(
        s.tree.join("ggml/src/ggml-common.h"),
        root.join("ggml-common.h"),
    )?;
    let cmake = copy.join("CMakeLists.txt");
    let text = crate::fsx::read_to_string(&cmake)?;
    let from = r#"-e "/\#include \"polykv-turbo.h\"/r ${CMAKE_CURRENT_SOURCE_DIR}/kernels/polykv-turbo.h" "#;
    if text.matches(from).count() != 1 {
        bail!("the planted error \"{name}\" no longer applies: ggml-metal's CMakeLists.txt has no such inlining step (update plant_embedding in src/metal/mod.rs)");
    }
    crate::fsx::write_atomic(&cmake, text.replacen(from, "", 1).as_bytes())?;
    let r = embedded(c, s, &copy, libs, "plant-embed-build")?;
    let failed: Vec<&LibraryResult> = r.iter().filter(|l| !l.ok).collect();
    let detail = failed
        .first()
        .map(|l| {
            let e = l
                .errors
                .lines()
                .find(|x| x.contains("error:"))
                .unwrap_or_default();
            format!(
                "{} of {} embedded libraries fail: {e}",
                failed.len(),
                r.len()
            )
        })
        .unwrap_or_default();
    crate::fsx::remove_dir_all_if_exists(&root)?;
    Ok(Plant {
        name: name.to_string(),
        check: "embedding",
        caught: !failed.is_empty(),
        detail,
    })
}

/// The libraries that read `file` (itself, or an includer of it).
fn readers_of(p: &Prepared, file: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for lib in &p.libraries {
        if lib == file {
            out.push(lib.clone());
            continue;
        }
        let text = crate::fsx::read_to_string(&p.kernels.join(lib))?;
        let includes = |f: &str| text.contains(&format!("#include \"{f}\""));
        if includes(file) || (file.starts_with("polykv-turbo") && includes("polykv-turbo.h")) {
            out.push(lib.clone());
        }
    }
    Ok(out)
}

fn plant(
    c: &Compiler,
    s: &Setup,
    p: &Prepared,
    base: &BTreeMap<String, (Vec<lint::Kernel>, usize)>,
    host: &HostResult,
    i: usize,
    spec: &PlantSpec,
) -> Result<Plant> {
    let dir = s.scratch.join(format!("plant-{i}"));
    crate::fsx::copy_dir(&p.kernels, &dir)?;
    let target = dir.join(spec.file);
    let text = crate::fsx::read_to_string(&target)?;
    let from = rewrite::rewrite(spec.from);
    let to = rewrite::rewrite(spec.to);
    if text.matches(&from).count() != 1 {
        bail!(
            "the planted error \"{}\" no longer applies: its text is not in {} exactly once (update PLANTS in src/metal/mod.rs)",
            spec.name,
            spec.file
        );
    }
    crate::fsx::write_atomic(&target, text.replacen(&from, &to, 1).as_bytes())?;
    let planted = Prepared {
        kernels: dir.clone(),
        libraries: p.libraries.clone(),
    };
    let (caught, detail) = match spec.check {
        "type-check" => {
            let libs = readers_of(&planted, spec.file)?;
            let r = typecheck(c, s, &planted, &libs)?;
            let failed: Vec<&LibraryResult> = r.iter().filter(|l| !l.ok).collect();
            let detail = failed
                .first()
                .and_then(|l| l.errors.lines().find(|x| x.contains("error:")))
                .unwrap_or_default()
                .to_string();
            (!failed.is_empty(), detail)
        }
        "cpu run" => {
            let r = exec(c, s, &dir, &format!("turbo-exec-plant-{i}"))?;
            (!r.ok, r.summary)
        }
        _ => {
            let libs = readers_of(&planted, spec.file)?;
            let mut map = base.clone();
            for (lib, found) in kernels(c, s, &planted, &libs)? {
                map.insert(lib, found);
            }
            let f = lint_all(&map, host);
            (
                !f.problems.is_empty(),
                f.problems.first().cloned().unwrap_or_default(),
            )
        }
    };
    crate::fsx::remove_dir_all_if_exists(&dir)?;
    Ok(Plant {
        name: spec.name.to_string(),
        check: spec.check,
        caught,
        detail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_library_list() {
        let cmake = "set(X a)\nset(METALLIB_KERNEL_SOURCES\n    kernels/fa_aux.metal\n    kernels/misc.metal\n    kernels/polykv_turbo.metal  # polykv: 0010\n)\nforeach(src kernels/other.metal)\n";
        assert_eq!(
            libraries(cmake).unwrap(),
            vec!["fa_aux.metal", "misc.metal", "polykv_turbo.metal"]
        );
        assert!(libraries("set(METALLIB_KERNEL_SOURCES\n)\n").is_err());
        assert!(libraries("nothing").is_err());
    }

    #[test]
    fn every_plant_is_rewritten_to_something_else() {
        for p in PLANTS {
            assert_ne!(
                rewrite::rewrite(p.from),
                rewrite::rewrite(p.to),
                "{}",
                p.name
            );
        }
        let checks: std::collections::BTreeSet<&str> = PLANTS.iter().map(|p| p.check).collect();
        assert_eq!(
            checks.len(),
            3,
            "one plant at least per check (the embedding's is its own)"
        );
    }
}
