//! Loading `patches/NNNN-name.patch` files: names, numbers, the description
//! header and the diff body.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// One patch file of the series.
#[derive(Debug, Clone)]
pub struct PatchFile {
    /// File name, e.g. `0001-build-info.patch`.
    pub file_name: String,
    /// The number, e.g. 1 for `0001-...`.
    pub number: u32,
    /// The whole file.
    pub bytes: Vec<u8>,
    /// sha256 of the whole file, hex.
    pub sha256: String,
    /// Everything before the first `diff --git` line (the description header).
    pub description: Vec<u8>,
    /// The diff body, from the first `diff --git` line to the end.
    pub diff: Vec<u8>,
    /// The diff parsed, on first use ([`PatchFile::parsed`]).
    parsed: std::sync::OnceLock<std::result::Result<super::parsed::ParsedPatch, String>>,
}

impl PatchFile {
    /// The number as written in file names and markers: `0001`.
    pub fn tag(&self) -> String {
        format!("{:04}", self.number)
    }

    /// The name without `.patch`: `0001-build-info`.
    pub fn stem(&self) -> &str {
        self.file_name
            .strip_suffix(".patch")
            .unwrap_or(&self.file_name)
    }

    pub fn from_bytes(file_name: &str, bytes: Vec<u8>) -> Result<PatchFile> {
        let number = parse_name(file_name)?;
        let split = find_diff_start(&bytes).with_context(|| {
            format!("{file_name}: no `diff --git` line; a patch must contain a git-style diff")
        })?;
        Ok(PatchFile {
            file_name: file_name.to_string(),
            number,
            sha256: crate::source::sha256_hex(&bytes),
            description: bytes[..split].to_vec(),
            diff: bytes[split..].to_vec(),
            bytes,
            parsed: std::sync::OnceLock::new(),
        })
    }

    /// The diff parsed (once; `file: why` when it does not parse).
    pub fn parsed(&self) -> Result<&super::parsed::ParsedPatch> {
        self.parsed
            .get_or_init(|| super::parsed::ParsedPatch::parse(&self.diff))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.file_name))
    }

    /// The description as text, trimmed (the commit message in `edit`).
    pub fn message(&self) -> String {
        String::from_utf8_lossy(&self.description)
            .trim()
            .to_string()
    }
}

/// The canonical bytes of a patch file: description, one blank line, diff.
pub fn compose(description: &str, diff: &[u8]) -> Vec<u8> {
    let d = description.trim();
    let mut out = Vec::with_capacity(d.len() + diff.len() + 2);
    if !d.is_empty() {
        out.extend_from_slice(d.as_bytes());
        out.extend_from_slice(b"\n\n");
    }
    out.extend_from_slice(diff);
    out
}

fn find_diff_start(bytes: &[u8]) -> Option<usize> {
    if bytes.starts_with(b"diff --git ") {
        return Some(0);
    }
    bytes
        .windows(12)
        .position(|w| w == b"\ndiff --git ")
        .map(|p| p + 1)
}

/// `NNNN-name.patch` → NNNN. Names are lowercase ASCII letters, digits, `-`, `_`, `.`.
pub fn parse_name(file_name: &str) -> Result<u32> {
    let stem = file_name
        .strip_suffix(".patch")
        .with_context(|| format!("{file_name}: a patch file name must end in .patch"))?;
    let (num, name) = stem.split_once('-').unwrap_or((stem, ""));
    if num.len() != 4 || !num.bytes().all(|b| b.is_ascii_digit()) {
        bail!("{file_name}: a patch file name must start with four digits and a dash, e.g. 0001-name.patch");
    }
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
    {
        bail!("{file_name}: the name after the number must be lowercase letters, digits, `-`, `_` or `.`");
    }
    let n: u32 = num.parse().context("parsing the patch number")?;
    if n == 0 {
        bail!("{file_name}: patch numbers start at 0001");
    }
    Ok(n)
}

/// A slug for a new patch's file name, from its subject line.
pub fn slugify(subject: &str) -> String {
    const MAX: usize = 40;
    let mut s = String::new();
    for c in subject.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') && !s.is_empty() {
            s.push('-');
        }
    }
    if s.len() > MAX {
        // Cut at a word boundary.
        let cut = s[..=MAX].rfind('-').filter(|&p| p > 0).unwrap_or(MAX);
        s.truncate(cut);
    }
    let s = s.trim_end_matches('-').to_string();
    if s.is_empty() {
        "patch".into()
    } else {
        s
    }
}

/// The ordered series in `patches/`.
#[derive(Debug, Clone)]
pub struct Series {
    pub dir: PathBuf,
    pub patches: Vec<PatchFile>,
}

impl Series {
    pub fn load(dir: &Path) -> Result<Series> {
        let mut patches = Vec::new();
        if dir.exists() {
            let rd =
                std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
            for e in rd {
                let e = e.with_context(|| format!("listing {}", dir.display()))?;
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.ends_with(".patch") {
                    continue;
                }
                let bytes = crate::fsx::read(&e.path())?;
                patches.push(
                    PatchFile::from_bytes(&name, bytes)
                        .with_context(|| format!("in {}", dir.display()))?,
                );
            }
        }
        patches.sort_by(|a, b| a.file_name.cmp(&b.file_name));
        for w in patches.windows(2) {
            if w[0].number == w[1].number {
                bail!(
                    "{} and {} share the number {}; every patch needs its own number",
                    w[0].file_name,
                    w[1].file_name,
                    w[0].tag()
                );
            }
        }
        Ok(Series {
            dir: dir.to_path_buf(),
            patches,
        })
    }

    /// The patches up to and including number `upto` (all when None).
    pub fn upto(&self, upto: Option<u32>) -> Result<&[PatchFile]> {
        match upto {
            None => Ok(&self.patches),
            Some(n) => {
                let idx = self
                    .patches
                    .iter()
                    .position(|p| p.number == n)
                    .with_context(|| {
                        format!("--upto {n:04}: no patch with that number in the series")
                    })?;
                Ok(&self.patches[..=idx])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(parse_name("0001-build-info.patch").unwrap(), 1);
        assert_eq!(parse_name("0042-turbo_types.v2.patch").unwrap(), 42);
        assert!(parse_name("1-x.patch").is_err());
        assert!(parse_name("0001.patch").is_err());
        assert!(parse_name("0001-Caps.patch").is_err());
        assert!(parse_name("0000-zero.patch").is_err());
        assert!(parse_name("0001-x.diff").is_err());
    }

    #[test]
    fn split_description() {
        let p = PatchFile::from_bytes(
            "0001-a.patch",
            b"Title\n\nBody\n\ndiff --git a/x b/x\n".to_vec(),
        )
        .unwrap();
        assert_eq!(p.message(), "Title\n\nBody");
        assert!(p.diff.starts_with(b"diff --git"));
        assert_eq!(compose(&p.message(), &p.diff), p.bytes);
        assert!(PatchFile::from_bytes("0001-a.patch", b"no diff here\n".to_vec()).is_err());
    }

    #[test]
    fn slugs() {
        assert_eq!(
            slugify("Add TurboQuant KV types (CPU)"),
            "add-turboquant-kv-types-cpu"
        );
        assert_eq!(slugify("!!!"), "patch");
        assert_eq!(
            slugify("Report the polykv patch chain in the build banner"),
            "report-the-polykv-patch-chain-in-the"
        );
    }
}
