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
