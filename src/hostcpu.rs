//! Facts about the build machine's CPU that a native (`-march=native`) build
//! cannot get right by itself.
//!
//! AMX in virtual machines: under `GGML_NATIVE` ggml's CPU backend compiles
//! its AMX kernels whenever the CPU advertises AMX, and uses them for
//! quantized weights once the kernel grants the tile-data permission. On a
//! Firecracker VM whose CPUID advertises `amx_tile`, that permission is
//! granted and a small tile program runs, yet ggml's AMX matrix kernels die
//! with SIGILL on their first `tilezero` (seen on the development machines
//! of this project, 2026-12): every model with q4/q8 weights fails. A
//! native build in a VM that advertises AMX is therefore made without it;
//! `POLYKV_FORGE_AMX=on` keeps AMX (a VM known to run it).

/// The compiler flags that keep a native build off AMX, or `None`.
pub fn native_flags_without_vm_amx() -> Option<&'static str> {
    let keep = std::env::var("POLYKV_FORGE_AMX").is_ok_and(|v| v == "on");
    (!keep && vm_advertises_amx()).then_some("-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
}

/// Whether the CPU flags name both a hypervisor and AMX tiles.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn vm_advertises_amx() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|s| flags_say_vm_amx(&s))
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn vm_advertises_amx() -> bool {
    false
}

/// Over the first `flags` line of a `/proc/cpuinfo` text.
fn flags_say_vm_amx(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|l| {
            let has = |w: &str| l.split_whitespace().any(|x| x == w);
            has("hypervisor") && has("amx_tile")
        })
}

#[cfg(test)]
mod tests {
    use super::flags_say_vm_amx;

    #[test]
    fn vm_with_amx_is_recognised() {
        let vm = "processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8 hypervisor\n";
        let metal = "processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8\n";
        let old_vm = "processor\t: 0\nflags\t\t: fpu avx2 hypervisor\n";
        assert!(flags_say_vm_amx(vm));
        assert!(!flags_say_vm_amx(metal));
        assert!(!flags_say_vm_amx(old_vm));
        assert!(!flags_say_vm_amx(""));
    }
}
