//! A CUDA toolkit from PyPI wheels, for compiling the CUDA variant on a
//! machine without a GPU (and without a system CUDA): nvcc, nvvm, the runtime
//! headers, crt, cccl, and the headers plus `libcublas.so.13` of cuBLAS,
//! fetched with the machine's own `pip download`, unpacked into one CUDA home
//! in the cache (`toolkits/cuda-<version>`), with the links and the empty
//! driver stub CMake's FindCUDAToolkit wants. The versions match the lent GPU
//! machine's nvcc (13.0), so what compiles here compiles there.

use anyhow::{bail, Context, Result};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The CUDA release this toolkit provides.
pub const CUDA_VERSION: &str = "13.0";

/// (package, exact version, members kept: `None` = all under `nvidia/cu13/`).
const WHEELS: &[(&str, &str, Option<&[&str]>)] = &[
    ("nvidia-cuda-nvcc", "13.0.88", None),
    ("nvidia-cuda-crt", "13.0.88", None),
    ("nvidia-nvvm", "13.0.88", None),
    ("nvidia-cuda-runtime", "13.0.96", None),
    ("nvidia-cuda-cccl", "13.0.85", None),
    // Compiling needs only cuBLAS's headers and the library to link against
    // (libcublasLt alone is 550 MB and is needed only to run).
    (
        "nvidia-cublas",
        "13.0.2.14",
        Some(&["include/", "lib/libcublas.so.13"]),
    ),
];

const PREFIX: &str = "nvidia/cu13/";

/// `<cache>/toolkits/cuda-13.0`.
pub fn cuda_home_in(cache_root: &Path) -> PathBuf {
    cache_root
        .join("toolkits")
        .join(format!("cuda-{CUDA_VERSION}"))
}

/// The cached toolkit's home, when one is installed and complete.
pub fn cached_cuda_home(cache_root: &Path) -> Option<PathBuf> {
    let home = cuda_home_in(cache_root);
    home.join(".complete").is_file().then_some(home)
}

/// The wheels `install_cuda` downloads, as `package==version`.
pub fn cuda_wheels() -> Vec<String> {
    WHEELS
        .iter()
        .map(|(package, version, _)| format!("{package}=={version}"))
        .collect()
}

/// Whether a wheel member (path below `nvidia/cu13/`) is kept.
fn keep(rel: &str, only: Option<&[&str]>) -> bool {
    !rel.is_empty()
        && !rel.starts_with(".metadata/")
        && only.is_none_or(|o| {
            o.iter()
                .any(|k| rel == *k || (k.ends_with('/') && rel.starts_with(k)))
        })
}

/// Installs the toolkit into the cache (nothing to do when it is there and
/// `refresh` is false); returns its home. Made beside it and moved into
/// place (`install::Install`): never half a toolkit.
pub fn install_cuda(cache_root: &Path, refresh: bool) -> Result<PathBuf> {
    let home = cuda_home_in(cache_root);
    let parent = home.parent().context("toolkit path has no parent")?;
    let install = crate::install::Install {
        dest: &home,
        lock: &parent.join("toolkits.lock"),
        ready: &|h: &Path| h.join(".complete").is_file(),
        refresh,
    };
    install.run(make_cuda_home)
}

/// The wheels (downloaded into `dl`) unpacked into `root`, the links and
/// stub added, nvcc run once.
fn make_cuda_home(root: &Path, dl: &Path) -> Result<()> {
    for (i, (package, version, only)) in WHEELS.iter().enumerate() {
        let spec = format!("{package}=={version}");
        crate::progress::note(&format!(
            "toolkit cuda {CUDA_VERSION}: pip download {spec} ({}/{})",
            i + 1,
            WHEELS.len()
        ));
        let wheel = crate::pip::download(&spec, crate::pip::Dist::Wheel, &dl.join(package))?;
        unpack(&wheel, root, *only)?;
        std::fs::remove_file(&wheel).ok();
    }
    finish(root)?;
    let nvcc = root.join("bin/nvcc");
    let v = crate::proc::Cmd::new(&nvcc)
        .arg("--version")
        .read()
        .context("the unpacked nvcc does not run")?;
    std::fs::write(root.join(".complete"), &v.stdout)?;
    Ok(())
}

/// Unpacks the kept members of one wheel below `root`, with their modes.
fn unpack(wheel: &Path, root: &Path, only: Option<&[&str]>) -> Result<()> {
    let f = std::fs::File::open(wheel).with_context(|| format!("opening {}", wheel.display()))?;
    let mut zip =
        zip::ZipArchive::new(f).with_context(|| format!("reading {}", wheel.display()))?;
    for i in 0..zip.len() {
        let mut m = zip.by_index(i)?;
        let name = m.name().to_string();
        let Some(rel) = name.strip_prefix(PREFIX) else {
            continue;
        };
        if m.is_dir() || !keep(rel, only) {
            continue;
        }
        // enclosed_name refuses absolute paths and `..`
        let safe = m
            .enclosed_name()
            .with_context(|| format!("{}: unsafe member {name}", wheel.display()))?;
        let rel_safe = safe.strip_prefix(PREFIX).unwrap_or(&safe).to_path_buf();
        let dest = root.join(rel_safe);
        if let Some(d) = dest.parent() {
            crate::fsx::create_dir_all(d)?;
        }
        let mut out =
            std::fs::File::create(&dest).with_context(|| format!("creating {}", dest.display()))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = m.read(&mut buf).context("reading a wheel member")?;
            if n == 0 {
                break;
            }
            std::io::Write::write_all(&mut out, &buf[..n])?;
        }
        if let Some(mode) = m.unix_mode() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode & 0o777))?;
        }
    }
    Ok(())
}

/// The links and the driver stub a CUDA home needs beyond the wheels.
fn finish(root: &Path) -> Result<()> {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let lib = root.join("lib");
    for (link, target) in [
        ("libcudart.so", "libcudart.so.13"),
        ("libcublas.so", "libcublas.so.13"),
    ] {
        if !lib.join(target).is_file() {
            bail!("the wheels gave no lib/{target}");
        }
        symlink(target, lib.join(link))?;
    }
    symlink("lib", root.join("lib64"))?;
    // Executables: the wheels' modes are not always kept.
    for dir in ["bin", "nvvm/bin"] {
        for e in std::fs::read_dir(root.join(dir))? {
            let p = e?.path();
            if p.is_file() && p.extension().is_none() {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
            }
        }
    }
    // CMake's CUDA::cuda_driver wants a libcuda.so to link against; no wheel
    // ships the driver, so an empty one stands in (compile checks only: what
    // runs on a GPU is built there, with its own toolkit).
    let stubs = lib.join("stubs");
    crate::fsx::create_dir_all(&stubs)?;
    crate::proc::Cmd::new("cc")
        .args(["-shared", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(stubs.join("libcuda.so"))
        .args(["-x", "c", "/dev/null"])
        .read()
        .context("building the libcuda.so stub failed")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_kept() {
        assert!(keep("bin/nvcc", None));
        assert!(!keep(".metadata/provenance.txt", None));
        let cublas: &[&str] = &["include/", "lib/libcublas.so.13"];
        assert!(keep("include/cublas_v2.h", Some(cublas)));
        assert!(keep("lib/libcublas.so.13", Some(cublas)));
        assert!(!keep("lib/libcublasLt.so.13", Some(cublas)));
        assert!(!keep("lib/libnvblas.so.13", Some(cublas)));
    }
}
