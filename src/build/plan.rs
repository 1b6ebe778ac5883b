//! The build plan: exact CMake and Ninja commands and the cache key for a
//! variant of the applied tree, a pure function of the request and the
//! host's facts (`Host`).

use anyhow::Result;
use sha2::{Digest, Sha256};
use std::path::Path;

use super::host::Host;
use super::{AppliedTree, Plan, Request, Variant, DEFAULT_TARGETS};

/// Architectures nvcc can build for, newest two of the common ones (e.g.
/// `80;90`), from `nvcc --list-gpu-arch` (empty: both).
fn default_cuda_arch(listed: &str) -> String {
    let mut archs: Vec<&str> = ["80", "90"]
        .into_iter()
        .filter(|a| listed.is_empty() || listed.contains(&format!("compute_{a}")))
        .collect();
    if archs.is_empty() {
        archs.push("90");
    }
    archs.join(";")
}

/// Resolves the request into exact commands and a cache key, from the
/// host's facts only (no probing here: unit-testable on any machine).
/// Long (about 165 lines) because it is one flat list of CMake options per
/// variant, read top to bottom as the configure line it produces.
pub fn plan(root: &Path, applied: &AppliedTree, req: &Request, host: &Host) -> Result<Plan> {
    let build_dir = crate::layout::Layout::new(root).build(req.variant.name());
    let mut opts: Vec<(String, String)> = vec![
        ("CMAKE_BUILD_TYPE".into(), "Release".into()),
        ("BUILD_SHARED_LIBS".into(), "ON".into()),
        // Offline-safe: nothing is downloaded at configure or build time.
        ("LLAMA_CURL".into(), "OFF".into()),
        ("LLAMA_USE_PREBUILT_UI".into(), "OFF".into()),
        ("LLAMA_BUILD_UI".into(), "OFF".into()),
        ("LLAMA_BUILD_TESTS".into(), "ON".into()),
        ("LLAMA_BUILD_TOOLS".into(), "ON".into()),
        ("LLAMA_BUILD_SERVER".into(), "ON".into()),
        ("LLAMA_BUILD_EXAMPLES".into(), "OFF".into()),
        (
            "LLAMA_BUILD_COMMIT".into(),
            applied.commit.chars().take(7).collect(),
        ),
        (
            "POLYKV_CHAIN_INFO".into(),
            format!("tree {}, {} patch(es)", applied.tree, applied.patches),
        ),
    ];
    if let Some(n) = applied.release_number {
        opts.push(("LLAMA_BUILD_NUMBER".into(), n.to_string()));
    }
    let mut blocked = None;
    let mut compilers = vec![
        host.cc.clone().unwrap_or_else(|| "cc: not found".into()),
        host.cxx.clone().unwrap_or_else(|| "c++: not found".into()),
    ];
    match req.variant {
        Variant::Cpu => {
            opts.push(("GGML_NATIVE".into(), "ON".into()));
            // AMX in a VM: ggml's AMX kernels died with SIGILL there (src/hostcpu.rs).
            if let Some(flags) = host.vm_amx_flags {
                opts.push(("CMAKE_C_FLAGS".into(), flags.into()));
                opts.push(("CMAKE_CXX_FLAGS".into(), flags.into()));
                compilers.push(format!(
                    "a VM advertising AMX: built without it ({flags}; POLYKV_FORGE_AMX=on keeps it)"
                ));
            }
        }
        Variant::Cuda => {
            let nvcc = &host.nvcc;
            let arch = req
                .cuda_arch
                .clone()
                .unwrap_or_else(|| default_cuda_arch(&host.nvcc_archs));
            opts.push(("GGML_CUDA".into(), "ON".into()));
            opts.push(("GGML_BACKEND_DL".into(), "ON".into()));
            // GGML_NATIVE is refused together with GGML_BACKEND_DL.
            opts.push(("GGML_NATIVE".into(), "OFF".into()));
            opts.push(("CMAKE_CUDA_ARCHITECTURES".into(), arch));
            opts.push((
                "GGML_CUDA_FA_QUANTS".into(),
                req.fa_quants
                    .clone()
                    .unwrap_or_else(|| "q4_0-q4_0;q8_0-q8_0;f16-f16;bf16-bf16".into()),
            ));
            match nvcc {
                Some(n) => {
                    opts.push(("CMAKE_CUDA_COMPILER".into(), n.display().to_string()));
                    if let Some(home) = n.parent().and_then(|b| b.parent()) {
                        opts.push(("CUDAToolkit_ROOT".into(), home.display().to_string()));
                    }
                    compilers.push(host.nvcc_version.clone().unwrap_or_default());
                }
                None => {
                    opts.push(("CMAKE_CUDA_COMPILER".into(), "$CUDA_HOME/bin/nvcc".into()));
                    opts.push(("CUDAToolkit_ROOT".into(), "$CUDA_HOME".into()));
                    blocked = Some(
                        "no CUDA toolkit: nvcc is neither in $CUDA_HOME/bin nor on PATH nor in the cache (`polykv-forge toolkit cuda` installs one from PyPI; or set CUDA_HOME)"
                            .into(),
                    );
                }
            }
        }
        Variant::Metal => {
            opts.push(("GGML_METAL".into(), "ON".into()));
            opts.push(("GGML_METAL_EMBED_LIBRARY".into(), "ON".into()));
            if host.os != "macos" {
                blocked = Some(format!(
                    "the Metal variant builds only on macOS (this machine runs {})",
                    host.os
                ));
            }
        }
    }
    if host.ccache {
        opts.push(("CMAKE_C_COMPILER_LAUNCHER".into(), "ccache".into()));
        opts.push(("CMAKE_CXX_COMPILER_LAUNCHER".into(), "ccache".into()));
        if req.variant == Variant::Cuda {
            opts.push(("CMAKE_CUDA_COMPILER_LAUNCHER".into(), "ccache".into()));
        }
    }
    if blocked.is_none() {
        for (tool, found) in [("cmake", &host.cmake), ("ninja", &host.ninja)] {
            if found.is_none() {
                blocked = Some(format!(
                    "`{tool}` is not installed (Debian: apt-get install {}; or run ci/prereqs)",
                    if tool == "ninja" { "ninja-build" } else { tool }
                ));
                break;
            }
        }
    }
    let mut configure = vec![
        "cmake".to_string(),
        "-S".into(),
        applied.workdir.display().to_string(),
        "-B".into(),
        build_dir.display().to_string(),
        "-G".into(),
        "Ninja".into(),
    ];
    configure.extend(opts.iter().map(|(k, v)| format!("-D{k}={v}")));
    let targets = if req.targets.is_empty() {
        DEFAULT_TARGETS.iter().map(|s| s.to_string()).collect()
    } else {
        req.targets.clone()
    };
    let mut build = vec![
        "ninja".to_string(),
        "-C".into(),
        build_dir.display().to_string(),
    ];
    if let Some(j) = req.jobs {
        build.push(format!("-j{j}"));
    }
    build.extend(targets.iter().cloned());

    // The key: applied tree, variant, options (the ccache launcher aside),
    // compilers, CMake and Ninja. Targets are recorded beside it: building
    // more targets does not make earlier artifacts stale.
    let mut h = Sha256::new();
    h.update(format!(
        "tree={}\nvariant={}\n",
        applied.tree,
        req.variant.name()
    ));
    for (k, v) in &opts {
        if !k.ends_with("_COMPILER_LAUNCHER") {
            h.update(format!("opt {k}={v}\n"));
        }
    }
    for c in &compilers {
        h.update(format!("compiler {c}\n"));
    }
    for (tool, v) in [("cmake", &host.cmake), ("ninja", &host.ninja)] {
        h.update(format!("tool {tool} {}\n", v.as_deref().unwrap_or("-")));
    }
    Ok(Plan {
        variant: req.variant,
        source_dir: applied.workdir.display().to_string(),
        build_dir: build_dir.display().to_string(),
        configure,
        build,
        targets,
        default_targets: req.targets.is_empty(),
        key: hex::encode(h.finalize()),
        tree: applied.tree.clone(),
        compilers,
        blocked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::ninja::{ninja_argv, parse_ninja_targets, resolve_targets};
    use std::path::PathBuf;

    /// A Linux machine with the usual tools.
    fn host() -> Host {
        Host {
            cc: Some("cc (Debian 12.2.0-14) 12.2.0".into()),
            cxx: Some("c++ (Debian 12.2.0-14) 12.2.0".into()),
            cmake: Some("cmake version 3.25.1".into()),
            ninja: Some("1.11.1".into()),
            os: "linux",
            ..Host::default()
        }
    }

    fn plan(root: &Path, applied: &AppliedTree, req: &Request) -> Result<Plan> {
        super::plan(root, applied, req, &host())
    }

    fn applied() -> AppliedTree {
        AppliedTree {
            workdir: PathBuf::from("/w/llama.cpp"),
            tree: "ab".repeat(20),
            patches: 1,
            release_number: Some(11312),
            commit: "0c1e57098bba43ac29e6e3b677cdceebdd22334f".into(),
        }
    }

    #[test]
    fn targets_follow_what_the_configuration_defines() {
        let text = "llama-server: phony\ntest-backend-ops: phony\nggml-cuda: phony\nbin/llama-server: CXX_EXECUTABLE_LINKER__llama-server_Release\nall: phony\n";
        let defined = parse_ninja_targets(text);
        assert!(defined.contains("ggml-cuda") && defined.contains("test-backend-ops"));
        assert!(!defined.iter().any(|t| t.contains('/')));
        let req = Request {
            variant: Variant::Cuda,
            jobs: Some(2),
            cuda_arch: Some("90".into()),
            ..cpu()
        };
        let p = plan(Path::new("/p"), &applied(), &req).unwrap();
        assert!(p.default_targets);
        let (ok, undefined) = resolve_targets(&p, &defined).unwrap();
        assert_eq!(ok, vec!["llama-server", "test-backend-ops"]);
        assert!(undefined.contains(&"test-quantize-fns".to_string()));
        let argv = ninja_argv(&p, &ok);
        assert_eq!(
            argv[argv.len() - 3..],
            ["-j2", "llama-server", "test-backend-ops"]
        );
        // A target the user names must exist.
        let named = plan(
            Path::new("/p"),
            &applied(),
            &Request {
                targets: vec!["test-quantize-fns".into()],
                ..req
            },
        )
        .unwrap();
        let e = resolve_targets(&named, &defined).unwrap_err().to_string();
        assert!(e.contains("defines no target `test-quantize-fns`"), "{e}");
    }

    #[test]
    fn key_depends_on_tree_and_variant() {
        let req = cpu();
        let a = plan(Path::new("/p"), &applied(), &req).unwrap();
        let mut other = applied();
        other.tree = "cd".repeat(20);
        let b = plan(Path::new("/p"), &other, &req).unwrap();
        assert_ne!(a.key, b.key);
        let c = plan(
            Path::new("/p"),
            &applied(),
            &Request {
                targets: vec!["llama-cli".into()],
                ..req.clone()
            },
        )
        .unwrap();
        assert_eq!(a.key, c.key, "targets are recorded beside the key");
        assert_eq!(c.build.last().map(String::as_str), Some("llama-cli"));
        assert!(a.configure.contains(&"-DLLAMA_CURL=OFF".to_string()));
        assert!(a
            .configure
            .contains(&"-DLLAMA_USE_PREBUILT_UI=OFF".to_string()));
        let cuda = plan(
            Path::new("/p"),
            &applied(),
            &Request {
                variant: Variant::Cuda,
                cuda_arch: Some("90".into()),
                ..req.clone()
            },
        )
        .unwrap();
        for want in [
            "-DGGML_CUDA=ON",
            "-DGGML_BACKEND_DL=ON",
            "-DBUILD_SHARED_LIBS=ON",
            "-DCMAKE_CUDA_ARCHITECTURES=90",
            "-DGGML_NATIVE=OFF",
        ] {
            assert!(cuda.configure.contains(&want.to_string()), "{want}");
        }
    }

    fn cpu() -> Request {
        Request {
            variant: Variant::Cpu,
            targets: vec![],
            jobs: None,
            cuda_arch: None,
            fa_quants: None,
            cache_root: PathBuf::from("/c"),
        }
    }

    #[test]
    fn the_key_follows_the_host_tools_and_a_missing_tool_blocks() {
        let a = plan(Path::new("/p"), &applied(), &cpu()).unwrap();
        assert!(a.blocked.is_none());
        let newer = Host {
            cmake: Some("cmake version 3.31.0".into()),
            ..host()
        };
        let b = super::plan(Path::new("/p"), &applied(), &cpu(), &newer).unwrap();
        assert_ne!(a.key, b.key, "another CMake is another build");
        let other_cc = Host {
            cc: Some("cc (Debian 14.2.0) 14.2.0".into()),
            ..host()
        };
        let c = super::plan(Path::new("/p"), &applied(), &cpu(), &other_cc).unwrap();
        assert_ne!(a.key, c.key);
        let no_ninja = Host {
            ninja: None,
            ..host()
        };
        let d = super::plan(Path::new("/p"), &applied(), &cpu(), &no_ninja).unwrap();
        assert!(
            d.blocked.as_deref().unwrap_or("").contains("ninja-build"),
            "{:?}",
            d.blocked
        );
    }

    #[test]
    fn host_facts_shape_the_commands() {
        let amx = Host {
            vm_amx_flags: Some("-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"),
            ccache: true,
            ..host()
        };
        let p = super::plan(Path::new("/p"), &applied(), &cpu(), &amx).unwrap();
        assert!(p
            .configure
            .contains(&"-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16".to_string()));
        assert!(p
            .configure
            .contains(&"-DCMAKE_C_COMPILER_LAUNCHER=ccache".to_string()));
        let q = plan(Path::new("/p"), &applied(), &cpu()).unwrap();
        let r = super::plan(
            Path::new("/p"),
            &applied(),
            &cpu(),
            &Host {
                ccache: true,
                ..host()
            },
        )
        .unwrap();
        assert_eq!(q.key, r.key, "the ccache launcher is not part of the key");
        // CUDA without nvcc: placeholders for the user's shell, and blocked.
        let cuda = Request {
            variant: Variant::Cuda,
            ..cpu()
        };
        let p = plan(Path::new("/p"), &applied(), &cuda).unwrap();
        assert!(p
            .blocked
            .as_deref()
            .unwrap_or("")
            .contains("no CUDA toolkit"));
        assert!(p
            .configure
            .contains(&"-DCMAKE_CUDA_COMPILER=$CUDA_HOME/bin/nvcc".to_string()));
        assert!(p
            .configure
            .contains(&"-DCMAKE_CUDA_ARCHITECTURES=80;90".to_string()));
        // With nvcc: its path, its version among the compilers, the newest
        // common architecture it lists.
        let with_nvcc = Host {
            nvcc: Some(PathBuf::from("/cuda/bin/nvcc")),
            nvcc_version: Some("Build cuda_13.0".into()),
            nvcc_archs: "compute_75\ncompute_90\n".into(),
            ..host()
        };
        let p = super::plan(Path::new("/p"), &applied(), &cuda, &with_nvcc).unwrap();
        assert!(p.blocked.is_none());
        assert!(p
            .configure
            .contains(&"-DCMAKE_CUDA_ARCHITECTURES=90".to_string()));
        assert!(p
            .configure
            .contains(&"-DCUDAToolkit_ROOT=/cuda".to_string()));
        assert!(p.compilers.contains(&"Build cuda_13.0".to_string()));
        // Metal only on macOS.
        let metal = Request {
            variant: Variant::Metal,
            ..cpu()
        };
        let p = plan(Path::new("/p"), &applied(), &metal).unwrap();
        assert!(p.blocked.as_deref().unwrap_or("").contains("only on macOS"));
        let mac = Host {
            os: "macos",
            ..host()
        };
        assert!(super::plan(Path::new("/p"), &applied(), &metal, &mac)
            .unwrap()
            .blocked
            .is_none());
    }
}
