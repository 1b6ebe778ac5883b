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

/// The interpreter of a virtual environment under `root` holding `packages`
/// (pinned `name==version` specs, installed with the machine's own pip from
/// its configured index), made once per set of specs. It is built in a
/// temporary folder and renamed into place, so an interrupted install leaves
/// nothing that looks ready.
pub fn venv(root: &Path, packages: &[String]) -> Result<PathBuf> {
    use sha2::Digest;
    let key = hex::encode(sha2::Sha256::digest(packages.join("\n").as_bytes()));
    let dir = root.join("venvs").join(&key[..16]);
    let python_in = |d: &Path| {
        if cfg!(windows) {
            d.join("Scripts").join("python.exe")
        } else {
            d.join("bin").join("python")
        }
    };
    if dir.join("polykv-ready").is_file() {
        return Ok(python_in(&dir));
    }
    let base = std::env::var("POLYKV_FORGE_PYTHON").unwrap_or_else(|_| "python3".into());
    let tmp = crate::fsx::sibling(&dir, &format!("tmp-{}", std::process::id()));
    crate::fsx::remove_dir_all_if_exists(&tmp)?;
    crate::fsx::create_dir_all(root.join("venvs").as_path())?;
    crate::proc::Cmd::new(&base)
        .args(["-m", "venv"])
        .arg(&tmp)
        .read()
        .with_context(|| format!("`{base} -m venv` failed (is the venv module installed?)"))?;
    crate::proc::Cmd::new(python_in(&tmp))
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
        ])
        .args(packages)
        .timeout(std::time::Duration::from_secs(900))
        .read()
        .with_context(|| format!("`pip install {}` failed", packages.join(" ")))?;
    crate::fsx::write_atomic(&tmp.join("polykv-ready"), packages.join("\n").as_bytes())?;
    if !dir.join("polykv-ready").is_file() {
        // a half-made one from an interrupted run
        crate::fsx::remove_dir_all_if_exists(&dir)?;
    }
    if let Err(e) = std::fs::rename(&tmp, &dir) {
        // another run made it meanwhile: use that one
        crate::fsx::remove_dir_all_if_exists(&tmp)?;
        if !dir.join("polykv-ready").is_file() {
            return Err(e).with_context(|| format!("moving the environment to {}", dir.display()));
        }
    }
    Ok(python_in(&dir))
}
