//! `verify`: every proof the chain owes, run on the pristine base: strict
//! apply, lock, reverse, canonical re-export, ownership, markers — the
//! chain's own checks — and the checks other modules register (the
//! generated files against their generators, from `gen`), so the chain
//! imports nothing above it.

use anyhow::Result;
use git2::{Oid, Repository};
use serde::Serialize;
use std::path::Path;

use crate::chain::{apply, export, markers, ownership, series, PatchFile};

/// The checks verify runs, by a typed id (`gen --check` asks for its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckId {
    Apply,
    Lock,
    Reverse,
    Export,
    Ownership,
    Markers,
    Generated,
}

impl CheckId {
    pub fn name(self) -> &'static str {
        match self {
            CheckId::Apply => "apply",
            CheckId::Lock => "lock",
            CheckId::Reverse => "reverse",
            CheckId::Export => "export",
            CheckId::Ownership => "ownership",
            CheckId::Markers => "markers",
            CheckId::Generated => "generated",
        }
    }
}

/// What a registered check sees: the chain applied to the base.
pub struct VerifyCtx<'a> {
    pub repo: &'a Repository,
    pub base: Oid,
    pub patches: &'a [PatchFile],
    /// The tree after each patch (the chain applied).
    pub trees: &'a [Oid],
    /// `patches/`.
    pub dir: &'a Path,
    /// The project root (family files such as `kernels/*.toml` are
    /// relative to it; for a staged series it is not `dir`'s parent).
    pub root: &'a Path,
}

impl VerifyCtx<'_> {
    /// The tree the chain ends at.
    pub fn final_tree(&self) -> Oid {
        self.trees.last().copied().unwrap_or(self.base)
    }
}

/// A check another module registers with verify; it runs once the chain
/// applies (skipped otherwise) and returns its problems.
pub trait Registered {
    fn id(&self) -> CheckId;
    fn run(&self, ctx: &VerifyCtx) -> Result<Vec<String>>;
}

#[derive(Debug, Serialize)]
pub struct Check {
    /// Serialized as the check's name (`apply`, `lock`, ...).
    #[serde(rename = "name")]
    pub id: CheckId,
    pub ok: bool,
    /// Why the check did not run, when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    pub problems: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct PatchRow {
    pub file: String,
    pub sha256: String,
    pub tree: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct VerifyReport {
    pub ok: bool,
    pub base_tree: String,
    pub final_tree: Option<String>,
    pub patches: Vec<PatchRow>,
    pub checks: Vec<Check>,
}

impl Check {
    pub fn name(&self) -> &'static str {
        self.id.name()
    }
}

impl VerifyReport {
    /// The result of one check.
    pub fn get(&self, id: CheckId) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }
}

fn check(id: CheckId, problems: Vec<String>) -> Check {
    Check {
        id,
        ok: problems.is_empty(),
        skipped: None,
        problems,
    }
}

fn skipped(id: CheckId, why: &str) -> Check {
    Check {
        id,
        ok: false,
        skipped: Some(why.to_string()),
        problems: Vec::new(),
    }
}

/// Runs the chain's checks and the `registered` ones. `dir` is `patches/`
/// (for the lock and the policy files). Long (about 155 lines) because the
/// proofs share the trees of one forward application; each numbered step
/// is short.
pub fn run(
    repo: &Repository,
    base: Oid,
    patches: &[PatchFile],
    dir: &Path,
    root: &Path,
    registered: &[&dyn Registered],
) -> Result<VerifyReport> {
    let mut checks = Vec::new();
    // 1. Strict forward apply.
    let mut trees: Vec<Oid> = Vec::new();
    let mut apply_problems = Vec::new();
    let mut t = base;
    for p in patches {
        match apply::apply(repo, t, p, false) {
            Ok(n) => {
                trees.push(n);
                t = n;
            }
            Err(e) => {
                apply_problems.push(format!("{e:#}"));
                break;
            }
        }
    }
    let applied = apply_problems.is_empty();
    checks.push(check(CheckId::Apply, apply_problems));
    let before = |k: usize| if k == 0 { base } else { trees[k - 1] };

    // 2. Lock.
    let lock_problems = crate::chain::lock::problems(dir, base, patches, &trees, false);
    checks.push(check(CheckId::Lock, lock_problems));

    if !applied {
        let ids = [
            CheckId::Reverse,
            CheckId::Export,
            CheckId::Ownership,
            CheckId::Markers,
        ];
        for id in ids.into_iter().chain(registered.iter().map(|r| r.id())) {
            checks.push(skipped(id, "the chain does not apply"));
        }
    } else {
        // 3. Reverse: peel from the top, each strictly reverse-applied.
        let mut rev = Vec::new();
        let mut t = trees.last().copied().unwrap_or(base);
        for k in (0..patches.len()).rev() {
            match apply::apply(repo, t, &patches[k], true) {
                Ok(n) if n == before(k) => t = n,
                Ok(n) => {
                    rev.push(format!(
                        "{}: reverse-applying gives tree {n}, not the tree before it ({})",
                        patches[k].file_name,
                        before(k)
                    ));
                    break;
                }
                Err(e) => {
                    rev.push(format!("{e:#}"));
                    break;
                }
            }
        }
        if rev.is_empty() && t != base {
            rev.push(format!("peeling every patch gave {t}, not the base {base}"));
        }
        checks.push(check(CheckId::Reverse, rev));

        // 4. Re-export: byte-identical canonical text.
        let mut exp = Vec::new();
        for (k, p) in patches.iter().enumerate() {
            match export::render(repo, before(k), trees[k]) {
                Ok(diff) => {
                    let canonical = series::compose(&p.message(), &diff);
                    if canonical != p.bytes {
                        exp.push(format!(
                            "{}: not in canonical form; run `polykv-forge edit` then `export` to rewrite it; {}",
                            p.file_name,
                            first_difference(&p.bytes, &canonical)
                        ));
                    }
                }
                Err(e) => exp.push(format!("{}: {e:#}", p.file_name)),
            }
        }
        checks.push(check(CheckId::Export, exp));

        // 5. Ownership.
        let base_tree = repo.find_tree(base)?;
        let base_has = |p: &str| base_tree.get_path(Path::new(p)).is_ok();
        let own = ownership::Ownership::load(dir)
            .and_then(|rules| ownership::check(patches, &base_has, &rules));
        checks.push(check(
            CheckId::Ownership,
            own.unwrap_or_else(|e| vec![format!("{e:#}")]),
        ));

        // 6. Markers.
        let mk = markers::Markers::load(dir)
            .and_then(|rules| markers::check(repo, base, patches, &trees, &rules));
        checks.push(check(
            CheckId::Markers,
            mk.unwrap_or_else(|e| vec![format!("{e:#}")]),
        ));

        // 7. The registered checks (the generated files, from `gen`).
        let ctx = VerifyCtx {
            repo,
            base,
            patches,
            trees: &trees,
            dir,
            root,
        };
        for r in registered {
            let problems = r.run(&ctx).unwrap_or_else(|e| vec![format!("{e:#}")]);
            checks.push(check(r.id(), problems));
        }
    }

    let ok = checks.iter().all(|c| c.ok);
    Ok(VerifyReport {
        ok,
        base_tree: base.to_string(),
        final_tree: if applied {
            Some(trees.last().copied().unwrap_or(base).to_string())
        } else {
            None
        },
        patches: patches
            .iter()
            .enumerate()
            .map(|(k, p)| PatchRow {
                file: p.file_name.clone(),
                sha256: p.sha256.clone(),
                tree: trees.get(k).map(|t| t.to_string()),
            })
            .collect(),
        checks,
    })
}

/// Lines of the file-vs-canonical diff shown when a patch is not canonical.
const DIFF_LINES: usize = 40;

/// How a patch file differs from its canonical text: a unified diff (file
/// → canonical), cut after `DIFF_LINES` lines.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    let diff = similar::TextDiff::from_lines(a.as_ref(), b.as_ref())
        .unified_diff()
        .context_radius(2)
        .header("file", "canonical")
        .to_string();
    if diff.is_empty() {
        return "they differ in bytes that are not UTF-8".into();
    }
    let lines: Vec<&str> = diff.lines().collect();
    let mut shown = lines[..lines.len().min(DIFF_LINES)].join("\n");
    if lines.len() > DIFF_LINES {
        shown.push_str(&format!("\n... {} more lines", lines.len() - DIFF_LINES));
    }
    format!("file → canonical:\n{shown}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_canonical_patch_shows_a_unified_diff() {
        let file = b"subject\n\ndiff --git a/x b/x\n-a\n+b \n";
        let canonical = b"subject\n\ndiff --git a/x b/x\n-a\n+b\n";
        let shown = first_difference(file, canonical);
        assert!(shown.contains("--- file\n+++ canonical\n"), "{shown}");
        assert!(shown.contains("\n-+b \n++b"), "{shown}");
        let long_a: String = (0..100).map(|i| format!("{i}\n")).collect();
        let long_b: String = (0..100).map(|i| format!("{}\n", i + 1000)).collect();
        let shown = first_difference(long_a.as_bytes(), long_b.as_bytes());
        assert!(shown.ends_with("more lines"), "{shown}");
        assert_eq!(
            first_difference(b"a\xff\n", b"a\xfe\n"),
            "they differ in bytes that are not UTF-8"
        );
    }
}
