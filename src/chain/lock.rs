//! `patches/patches.lock`: one line per patch — file name, sha256 of the
//! patch file, and the tree id after applying it — under the base tree id.

use anyhow::{bail, Context, Result};
use std::path::Path;

pub const FILE_NAME: &str = "patches.lock";

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LockLine {
    pub file: String,
    pub sha256: String,
    pub tree: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Lock {
    pub base: String,
    pub lines: Vec<LockLine>,
}

impl Lock {
    /// The lock of a series over `base`: each patch file's name, the sha256
    /// of its bytes, and the tree after it (empty when it did not apply).
    /// The one way a lock is made (export, rebase, and verify's expectation).
    pub fn of<'a>(
        base: git2::Oid,
        patches: impl IntoIterator<Item = (&'a str, &'a [u8], Option<git2::Oid>)>,
    ) -> Lock {
        Lock {
            base: base.to_string(),
            lines: patches
                .into_iter()
                .map(|(file, bytes, tree)| LockLine {
                    file: file.to_string(),
                    sha256: crate::source::sha256_hex(bytes),
                    tree: tree.map(|t| t.to_string()).unwrap_or_default(),
                })
                .collect(),
        }
    }

    pub fn render(&self) -> String {
        let mut s = String::from(
            "# polykv-forge patches.lock: written by `polykv-forge export`; checked by `verify`.\n",
        );
        s.push_str(&format!("base {}\n", self.base));
        for l in &self.lines {
            s.push_str(&format!("{} {} {}\n", l.file, l.sha256, l.tree));
        }
        s
    }

    pub fn parse(text: &str) -> Result<Lock> {
        let mut lock = Lock::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["base", tree] => lock.base = tree.to_string(),
                [file, sha, tree] => lock.lines.push(LockLine {
                    file: file.to_string(),
                    sha256: sha.to_string(),
                    tree: tree.to_string(),
                }),
                _ => bail!("line {}: expected `FILE SHA256 TREE`", n + 1),
            }
        }
        Ok(lock)
    }

    pub fn load(dir: &Path) -> Result<Option<Lock>> {
        let p = dir.join(FILE_NAME);
        if !p.exists() {
            return Ok(None);
        }
        let text = crate::fsx::read_to_string(&p)?;
        Ok(Some(
            Lock::parse(&text).with_context(|| format!("in {}", p.display()))?,
        ))
    }
}

/// What is wrong with the lock in `dir` (patches/) for `patches` applied
/// to `base` (`trees`: the tree after each, as far as they applied). With
/// `prefix`, `patches` are the first of the series (`apply --upto`) and the
/// lock may name more after them. Empty when the lock vouches for them.
pub fn problems(
    dir: &Path,
    base: git2::Oid,
    patches: &[crate::chain::series::PatchFile],
    trees: &[git2::Oid],
    prefix: bool,
) -> Vec<String> {
    match Lock::load(dir) {
        Err(e) => vec![format!("{e:#}")],
        Ok(None) => vec![format!(
            "patches/{FILE_NAME} is missing; run `polykv-forge export` (or `edit` then `export`) to write it"
        )],
        Ok(Some(lock)) => {
            let want = Lock::of(
                base,
                patches.iter().enumerate().map(|(k, p)| {
                    (p.file_name.as_str(), p.bytes.as_slice(), trees.get(k).copied())
                }),
            );
            compare(&lock, &want, prefix)
        }
    }
}

fn compare(have: &Lock, want: &Lock, prefix: bool) -> Vec<String> {
    let mut out = Vec::new();
    if have.base != want.base {
        out.push(format!(
            "patches.lock names base {}, but the pin is {}",
            have.base, want.base
        ));
    }
    let n = have.lines.len().max(want.lines.len());
    for i in 0..n {
        match (have.lines.get(i), want.lines.get(i)) {
            (Some(h), Some(w)) if h == w => {}
            (Some(h), Some(w)) if h.file != w.file => out.push(format!(
                "line {}: the lock names {}, the series has {}",
                i + 1,
                h.file,
                w.file
            )),
            (Some(h), Some(w)) => {
                if h.sha256 != w.sha256 {
                    out.push(format!(
                        "{}: the patch file changed since the lock was written (sha256 {} → {})",
                        w.file, h.sha256, w.sha256
                    ));
                }
                if h.tree != w.tree && !w.tree.is_empty() {
                    out.push(format!(
                        "{}: the tree after it is {}, the lock says {}",
                        w.file, w.tree, h.tree
                    ));
                }
            }
            (Some(_), None) if prefix => {}
            (Some(h), None) => out.push(format!(
                "the lock names {}, which is not in the series",
                h.file
            )),
            (None, Some(w)) => out.push(format!("{} is missing from the lock", w.file)),
            (None, None) => {}
        }
    }
    if !out.is_empty() {
        out.push("run `polykv-forge export` to rewrite the lock from a verified stack".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let l = Lock {
            base: "b2da53584951ec8aa40680229509a6646a637560".into(),
            lines: vec![LockLine {
                file: "0001-x.patch".into(),
                sha256: "ab".repeat(32),
                tree: "cd".repeat(20),
            }],
        };
        assert_eq!(Lock::parse(&l.render()).unwrap(), l);
        assert!(Lock::parse("0001-x.patch onlytwo\n").is_err());
    }
}
