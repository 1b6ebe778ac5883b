//! Wheels from the package index through the machine's own `pip download`
//! (`POLYKV_FORGE_PYTHON` names the interpreter; default `python3`).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Downloads the wheel of `spec` (`name==version`, no dependencies) into
/// `dir` and returns its path.
pub fn download_wheel(spec: &str, dir: &Path) -> Result<PathBuf> {
    let python = std::env::var("POLYKV_FORGE_PYTHON").unwrap_or_else(|_| "python3".into());
    crate::fsx::create_dir_all(dir)?;
    crate::proc::Cmd::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
        ])
        .arg(dir)
        .arg(spec)
        .read()
        .with_context(|| format!("`{python} -m pip download {spec}` failed"))?;
    std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .with_context(|| format!("`pip download {spec}` gave no wheel"))
}
