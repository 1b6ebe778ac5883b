//! Code generation in Rust: Lloyd-Max codebooks and rotation tables for the
//! TurboQuant KV types (and backend instance families). Generated text says
//! so in its first line and is only ever changed through `polykv-forge gen`.
//!
//! Which files of the patched tree are generated, and by which generator, is
//! declared in `patches/generated.toml`:
//!
//! ```toml
//! [[file]]
//! path = "ggml/src/ggml-turbo-tables.h"
//! generator = "turbo-tables"
//! ```
//!
//! and which instance-family files of `kernels/` expand into files, for
//! which backend, and which patch carries them (see [`family`]):
//!
//! ```toml
//! [[families]]
//! path = "kernels/fattn-vec.toml"
//! backend = "cuda"
//! patch = "0008"
//! ```
//!
//! `gen` writes them into the edit stack; `gen --check` (and `verify`)
//! compare them with the final tree of the chain.

pub mod codebook;
pub mod family;
pub mod tables;

use anyhow::{bail, Context, Result};
use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The declaration file, in `patches/`.
pub const DECL_FILE: &str = "generated.toml";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Decl {
    #[serde(default)]
    file: Vec<DeclFile>,
    #[serde(default)]
    families: Vec<DeclFamilies>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeclFamilies {
    /// The family file, relative to the project root.
    path: String,
    backend: String,
    /// The number of the patch that carries the files (their marker).
    patch: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeclFile {
    path: String,
    generator: String,
}

/// One generated file and its expected content.
#[derive(Debug, Serialize)]
pub struct Output {
    pub path: String,
    pub generator: String,
    #[serde(skip)]
    pub content: Vec<u8>,
}

/// The generators by name.
pub const GENERATORS: &[&str] = &["turbo-tables", "turbo-tables-cuda", "turbo-tables-metal"];

fn run_generator(name: &str) -> Result<Vec<u8>> {
    match name {
        "turbo-tables" => Ok(tables::header()?.into_bytes()),
        "turbo-tables-cuda" => Ok(tables::cuda_header()?.into_bytes()),
        "turbo-tables-metal" => Ok(tables::metal_header()?.into_bytes()),
        other => bail!(
            "unknown generator `{other}` (known: {})",
            GENERATORS.join(", ")
        ),
    }
}

fn load_decl(patches_dir: &Path) -> Result<Option<Decl>> {
    let path = patches_dir.join(DECL_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    toml::from_str(&text)
        .map(Some)
        .with_context(|| format!("parsing {}", path.display()))
}

/// The project root of a `patches/` directory (family files are relative
/// to it).
fn root_of(patches_dir: &Path) -> &Path {
    patches_dir.parent().unwrap_or(Path::new("."))
}

/// The CUDA instance files the declared families generate (`all`) and the
/// ones of them a compile check builds (`compiled`: one per family, which
/// holds all of the family's head dims), paths in the tree.
#[derive(Debug, Default)]
pub struct CudaInstances {
    pub all: Vec<String>,
    pub compiled: Vec<String>,
}

pub fn cuda_instances(patches_dir: &Path) -> Result<CudaInstances> {
    let mut out = CudaInstances::default();
    for f in load_decl(patches_dir)?
        .map(|d| d.families)
        .unwrap_or_default()
    {
        if f.backend != "cuda" {
            continue;
        }
        let fam = family::Families::load(root_of(patches_dir), &f.path)?;
        for (k, v, _) in fam.pairs("cuda") {
            out.all.push(family::cuda_instance_path(&k, &v));
        }
        out.compiled.extend(family::cuda_representatives(&fam));
    }
    Ok(out)
}

/// Loads `patches/generated.toml` (absent: nothing is generated) and runs
/// every declared generator.
pub fn outputs(patches_dir: &Path) -> Result<Vec<Output>> {
    outputs_in(patches_dir, root_of(patches_dir))
}

/// [`outputs`] for a `patches/` staged away from its project: family files
/// are read relative to `root`.
pub fn outputs_in(patches_dir: &Path, root: &Path) -> Result<Vec<Output>> {
    let path = patches_dir.join(DECL_FILE);
    let Some(decl) = load_decl(patches_dir)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for f in decl.file {
        crate::paths::check_relative(f.path.as_bytes())
            .with_context(|| format!("{}: path `{}`", path.display(), f.path))?;
        if out.iter().any(|o: &Output| o.path == f.path) {
            bail!("{}: `{}` is declared twice", path.display(), f.path);
        }
        let content = run_generator(&f.generator)
            .with_context(|| format!("{}: generating `{}`", path.display(), f.path))?;
        out.push(Output {
            path: f.path,
            generator: f.generator,
            content,
        });
    }
    for f in decl.families {
        if !f.patch.bytes().all(|b| b.is_ascii_digit()) || f.patch.len() != 4 {
            bail!(
                "{}: families `{}`: patch must be a 4-digit number, got `{}`",
                path.display(),
                f.path,
                f.patch
            );
        }
        let fam = family::Families::load(root, &f.path)
            .with_context(|| format!("{}: families `{}`", path.display(), f.path))?;
        let emitted = match f.backend.as_str() {
            "cuda" => family::emit_cuda(&fam, &f.patch)?,
            "metal" => family::emit_metal(&fam, &f.patch)?,
            other => bail!(
                "{}: families `{}`: unknown backend `{other}` (known: {})",
                path.display(),
                f.path,
                family::BACKENDS.join(", ")
            ),
        };
        for e in emitted {
            if out.iter().any(|o: &Output| o.path == e.path) {
                bail!("{}: `{}` is generated twice", path.display(), e.path);
            }
            out.push(Output {
                path: e.path,
                generator: match e.family {
                    Some(name) => format!("fattn-vec {} ({name})", f.path),
                    None => format!("fattn-vec {}", f.path),
                },
                content: e.content.into_bytes(),
            });
        }
    }
    Ok(out)
}

/// Problems with the generated files in `tree` (the final tree of the chain).
/// The check `gen` registers with verify: the generated files in the
/// chain's final tree are byte-identical to what `gen` writes.
pub struct GeneratedCheck;

impl crate::chain::verify::Registered for GeneratedCheck {
    fn id(&self) -> crate::chain::verify::CheckId {
        crate::chain::verify::CheckId::Generated
    }

    fn run(&self, ctx: &crate::chain::verify::VerifyCtx) -> Result<Vec<String>> {
        check(ctx.repo, ctx.final_tree(), &outputs_in(ctx.dir, ctx.root)?)
    }
}

/// The checks `gen` registers with verify.
pub fn checks() -> Vec<&'static dyn crate::chain::verify::Registered> {
    vec![&GeneratedCheck]
}

pub fn check(repo: &Repository, tree: Oid, outputs: &[Output]) -> Result<Vec<String>> {
    let tree = repo.find_tree(tree)?;
    let mut problems = Vec::new();
    for o in outputs {
        match tree.get_path(Path::new(&o.path)) {
            Err(_) => problems.push(format!(
                "{}: declared as generated ({}) but missing from the patched tree; run `polykv-forge gen` in the edit stack and export",
                o.path, o.generator
            )),
            Ok(entry) => {
                let blob = repo.find_blob(entry.id())?;
                if blob.content() != o.content.as_slice() {
                    problems.push(format!(
                        "{}: differs from what generator `{}` produces; run `polykv-forge gen`, commit in the edit stack and export (never edit a generated file by hand)",
                        o.path, o.generator
                    ));
                }
            }
        }
    }
    problems.extend(leftover_instances(repo, &tree, outputs)?);
    Ok(problems)
}

/// Fork instance files in the tree that no family generates any more (a
/// pair removed from a family file leaves its file behind otherwise).
fn leftover_instances(
    repo: &Repository,
    tree: &git2::Tree,
    outputs: &[Output],
) -> Result<Vec<String>> {
    let dir = family::CUDA_INSTANCE_DIR;
    if !outputs.iter().any(|o| o.path.starts_with(dir)) {
        return Ok(Vec::new());
    }
    let Ok(entry) = tree.get_path(Path::new(dir)) else {
        return Ok(Vec::new());
    };
    let sub = repo.find_tree(entry.id())?;
    let mut out = Vec::new();
    for e in sub.iter() {
        let Some(name) = e.name() else { continue };
        let path = format!("{dir}/{name}");
        if family::is_fork_vec_instance(name) && !outputs.iter().any(|o| o.path == path) {
            out.push(format!(
                "{path}: a flash-attention instance no family declares; remove it in the edit stack (or declare its pair) and export"
            ));
        }
    }
    Ok(out)
}

/// What `write` did to one file.
#[derive(Debug, Serialize)]
pub struct Written {
    pub path: String,
    pub generator: String,
    pub changed: bool,
}

/// Writes every output into the edit stack's worktree (atomically per file).
/// Writes the generated files into the stack (with `dry_run`, only says
/// which would change).
pub fn write(stack: &Path, outputs: &[Output], dry_run: bool) -> Result<Vec<Written>> {
    if !stack.join(".git").exists() {
        bail!(
            "no edit stack at {}; run `polykv-forge edit` first (generated files travel in a patch)",
            stack.display()
        );
    }
    let mut done = Vec::new();
    for o in outputs {
        let dest: PathBuf = stack.join(&o.path);
        no_symlink_between(stack, &o.path)?;
        let changed = match std::fs::read(&dest) {
            Ok(old) => old != o.content,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(e).with_context(|| format!("reading {}", dest.display())),
        };
        if changed && !dry_run {
            if let Some(parent) = dest.parent() {
                crate::fsx::create_dir_all(parent)?;
            }
            crate::fsx::write_atomic(&dest, &o.content)?;
        }
        done.push(Written {
            path: o.path.clone(),
            generator: o.generator.clone(),
            changed,
        });
    }
    Ok(done)
}

/// Refuses a relative path that passes through a symlink of the stack (the
/// path itself was checked by `paths::check_relative` when it was loaded).
fn no_symlink_between(root: &Path, rel: &str) -> Result<()> {
    let mut at = root.to_path_buf();
    for part in Path::new(rel).components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => bail!(
                "{} is a symlink; refusing to write a generated file through it",
                at.display()
            ),
            _ => {}
        }
    }
    Ok(())
}
