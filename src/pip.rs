//! The one pip runner: wheels and source distributions from the package
//! index through the machine's own `pip download`, and the gates' virtual
//! environments (`POLYKV_FORGE_PYTHON` names the interpreter; default
//! `python3`).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The interpreter pip runs under.
pub fn python() -> String {
    std::env::var("POLYKV_FORGE_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// What `download` fetches.
pub enum Dist<'a> {
    /// A wheel (binary distribution).
    Wheel,
    /// The source distribution of `package`.
    Sdist { package: &'a str },
}

/// `pip download --no-deps` of `spec` (`name==version`) into `dir` (created);
/// returns the one file it leaves there.
pub fn download(spec: &str, dist: Dist, dir: &Path) -> Result<PathBuf> {
    let python = python();
    crate::fsx::create_dir_all(dir)?;
    let mut cmd = crate::proc::Cmd::new(&python).args(["-m", "pip", "download", "--no-deps"]);
    cmd = match dist {
        Dist::Wheel => cmd.arg("--only-binary=:all:"),
        Dist::Sdist { package } => cmd.args(["--no-binary", package]),
    };
    cmd.arg("-d").arg(dir).arg(spec).read().with_context(|| {
        format!("`{python} -m pip download {spec}` failed (is Python with pip installed?)")
    })?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    if files.len() != 1 {
        bail!(
            "`pip download {spec}` left {} files, expected one",
            files.len()
        );
    }
    Ok(files.remove(0))
}

/// The interpreter of a virtual environment under `root` holding `packages`
/// (pinned `name==version` specs, installed with the machine's own pip from
/// its configured index), made once per set of specs through
/// `install::Install` (lock, temporary folder, marker, rename), so an
/// interrupted or failed install leaves nothing that looks ready.
/// The base interpreter is `python3`, or `$POLYKV_FORGE_PYTHON`.
pub fn venv(root: &Path, packages: &[String]) -> Result<PathBuf> {
    venv_from(&python(), root, packages)
}

/// The environment's folder: one per set of specs.
fn env_dir(root: &Path, packages: &[String]) -> PathBuf {
    use sha2::Digest;
    let key = hex::encode(sha2::Sha256::digest(packages.join("\n").as_bytes()));
    root.join("venvs").join(&key[..16])
}

fn python_in(d: &Path) -> PathBuf {
    if cfg!(windows) {
        d.join("Scripts").join("python.exe")
    } else {
        d.join("bin").join("python")
    }
}

fn venv_from(base: &str, root: &Path, packages: &[String]) -> Result<PathBuf> {
    let dir = env_dir(root, packages);
    let ready = |d: &Path| d.join("polykv-ready").is_file();
    let install = crate::install::Install {
        dest: &dir,
        lock: &root.join("venvs.lock"),
        ready: &ready,
        refresh: false,
    };
    install.run(|tmp, _| {
        make_in(base, tmp, &python_in(tmp), packages)?;
        crate::fsx::write_atomic(&tmp.join("polykv-ready"), packages.join("\n").as_bytes())
    })?;
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
