//! The facts about this machine a build plan depends on, probed once
//! (compilers, nvcc and the architectures it knows, CMake, Ninja, ccache,
//! a VM that advertises AMX), so that `plan` is a pure function of them.

use std::path::{Path, PathBuf};

use super::Variant;

#[derive(Debug, Clone, Default)]
pub struct Host {
    /// First line of `cc --version` / `c++ --version`.
    pub cc: Option<String>,
    pub cxx: Option<String>,
    /// The CUDA compiler (probed for the CUDA variant only).
    pub nvcc: Option<PathBuf>,
    /// Last line of `nvcc --version`.
    pub nvcc_version: Option<String>,
    /// `nvcc --list-gpu-arch` (empty: unknown).
    pub nvcc_archs: String,
    /// First line of `cmake --version` / `ninja --version`.
    pub cmake: Option<String>,
    pub ninja: Option<String>,
    pub ccache: bool,
    /// Flags that keep a native build off AMX in a VM that advertises it.
    pub vm_amx_flags: Option<&'static str>,
    /// `std::env::consts::OS`.
    pub os: &'static str,
}

fn tool_version(program: &str, arg: &str) -> Option<String> {
    let out = crate::proc::Cmd::new(program).arg(arg).probe().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn first_line(s: String) -> String {
    s.lines().next().unwrap_or("").to_string()
}

pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

/// The CUDA toolkit: `CUDA_HOME`, else nvcc on PATH, else the one
/// `polykv-forge toolkit cuda` installed into the cache.
pub fn find_nvcc(cache_root: &Path) -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("CUDA_HOME").or_else(|| std::env::var_os("CUDA_PATH")) {
        let p = Path::new(&home).join("bin/nvcc");
        if p.is_file() {
            return Some(p);
        }
    }
    which("nvcc").or_else(|| {
        crate::toolkit::cached_cuda_home(cache_root)
            .map(|h| h.join("bin/nvcc"))
            .filter(|p| p.is_file())
    })
}

impl Host {
    /// Probes this machine for a build of `variant` (`cache_root`: where
    /// `toolkit cuda` installs nvcc).
    pub fn probe(variant: Variant, cache_root: &Path) -> Host {
        let nvcc = (variant == Variant::Cuda)
            .then(|| find_nvcc(cache_root))
            .flatten();
        let nvcc_str = nvcc.as_ref().map(|n| n.display().to_string());
        Host {
            cc: tool_version("cc", "--version").map(first_line),
            cxx: tool_version("c++", "--version").map(first_line),
            nvcc_version: nvcc_str
                .as_deref()
                .and_then(|n| tool_version(n, "--version"))
                .and_then(|v| v.lines().last().map(str::to_string)),
            nvcc_archs: nvcc_str
                .as_deref()
                .and_then(|n| tool_version(n, "--list-gpu-arch"))
                .unwrap_or_default(),
            nvcc,
            cmake: which("cmake")
                .and(tool_version("cmake", "--version"))
                .map(first_line),
            ninja: which("ninja")
                .and(tool_version("ninja", "--version"))
                .map(first_line),
            ccache: which("ccache").is_some(),
            vm_amx_flags: crate::hostcpu::native_flags_without_vm_amx(),
            os: std::env::consts::OS,
        }
    }
}
