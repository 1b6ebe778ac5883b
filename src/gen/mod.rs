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
//! `gen` writes them into the edit stack; `gen --check` (and `verify`)
//! compare them with the final tree of the chain.

pub mod codebook;
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
pub const GENERATORS: &[&str] = &["turbo-tables"];

fn run_generator(name: &str) -> Result<Vec<u8>> {
    match name {
        "turbo-tables" => Ok(tables::header()?.into_bytes()),
        other => bail!(
            "unknown generator `{other}` (known: {})",
            GENERATORS.join(", ")
        ),
    }
}

/// Loads `patches/generated.toml` (absent: nothing is generated) and runs
/// every declared generator.
pub fn outputs(patches_dir: &Path) -> Result<Vec<Output>> {
    let path = patches_dir.join(DECL_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let decl: Decl =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
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
    Ok(out)
}

/// Problems with the generated files in `tree` (the final tree of the chain).
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
    Ok(problems)
}

/// What `write` did to one file.
#[derive(Debug, Serialize)]
pub struct Written {
    pub path: String,
    pub generator: String,
    pub changed: bool,
}

/// Writes every output into the edit stack's worktree (atomically per file).
pub fn write(stack: &Path, outputs: &[Output]) -> Result<Vec<Written>> {
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
        if changed {
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
