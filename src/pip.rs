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
/// The base interpreter is `python3`, or `$POLYKV_FORGE_PYTHON`.
pub fn venv(root: &Path, packages: &[String]) -> Result<PathBuf> {
    let base = std::env::var("POLYKV_FORGE_PYTHON").unwrap_or_else(|_| "python3".into());
    venv_from(&base, root, packages)
}

/// The environment's folder: one per set of specs.
fn env_dir(root: &Path, packages: &[String]) -> PathBuf {
    use sha2::Digest;
    let key = hex::encode(sha2::Sha256::digest(packages.join("\n").as_bytes()));
    root.join("venvs").join(&key[..16])
}

fn venv_from(base: &str, root: &Path, packages: &[String]) -> Result<PathBuf> {
    let dir = env_dir(root, packages);
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
    let tmp = crate::fsx::sibling(&dir, &format!("tmp-{}", std::process::id()));
    crate::fsx::remove_dir_all_if_exists(&tmp)?;
    crate::fsx::create_dir_all(root.join("venvs").as_path())?;
    let made = make_in(base, &tmp, &python_in(&tmp), packages);
    if made.is_err() {
        // a failed install leaves no half-made environment in the cache
        crate::fsx::remove_dir_all_if_exists(&tmp)?;
    }
    made?;
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

/// `base -m venv tmp`, then `pip install` of the packages into it.
fn make_in(base: &str, tmp: &Path, python: &Path, packages: &[String]) -> Result<()> {
    crate::proc::Cmd::new(base)
        .args(["-m", "venv"])
        .arg(tmp)
        .read()
        .with_context(|| format!("`{base} -m venv` failed (is the venv module installed?)"))?;
    crate::proc::Cmd::new(python)
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_nothing_left(root: &Path) {
        let left: Vec<_> = std::fs::read_dir(root.join("venvs"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    /// Nothing half-made is left behind: neither the environment nor its
    /// temporary folder when the interpreter cannot make it.
    #[test]
    fn a_failed_environment_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        let packages = vec!["openai==3.51.0".to_string()];
        let err = venv_from("/nonexistent/python3", root.path(), &packages).unwrap_err();
        assert!(format!("{err:#}").contains("-m venv` failed"), "{err:#}");
        assert_nothing_left(root.path());
    }

    /// An environment made whose pip install fails is removed, not left
    /// half-made in the cache (a fake interpreter: its `-m venv` makes the
    /// folder, the environment's python fails).
    #[cfg(unix)]
    #[test]
    fn a_failed_install_leaves_nothing() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let base = root.path().join("fake-python3");
        std::fs::write(
            &base,
            "#!/bin/sh\nmkdir -p \"$3/bin\"\nprintf '#!/bin/sh\\necho no index >&2\\nexit 1\\n' > \"$3/bin/python\"\nchmod +x \"$3/bin/python\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let packages = vec!["openai==3.51.0".to_string()];
        let err = venv_from(base.to_str().unwrap(), root.path(), &packages).unwrap_err();
        assert!(
            format!("{err:#}").contains("pip install openai==3.51.0` failed"),
            "{err:#}"
        );
        assert_nothing_left(root.path());
    }

    /// A ready environment is used as it is, without running anything.
    #[test]
    fn a_ready_environment_is_reused() {
        let root = tempfile::tempdir().unwrap();
        let packages = vec!["openai==3.51.0".to_string()];
        // made once by hand: the marker is what says it is complete
        let dir = env_dir(root.path(), &packages);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("polykv-ready"), "openai==3.51.0").unwrap();
        let python = venv_from("/nonexistent/python3", root.path(), &packages).unwrap();
        assert!(python.starts_with(&dir), "{}", python.display());
    }
}
