//! Instance families: which (K type, V type, head dim) combinations of a
//! templated kernel get compiled, declared once in a file of `kernels/`,
//! and the files each backend needs for them, written by `gen`.
//!
//! The model is backend-neutral (types by their ggml names, head dims,
//! backends by name); an emitter per backend turns it into files. CUDA's
//! flash-attention vec kernel gets, per (K, V) pair, one
//! `template-instances/fattn-vec-instance-K-V.cu` holding that family's head
//! dims, one X-macro list of every case (read by the extern declarations,
//! the dispatch and `supports_op`), and one CMake list of the instance files
//! (read by `ggml_cuda_fattn_vec_instances` in `ggml/cmake/common.cmake`).
//! A combination that is not declared has no kernel, and the backend refuses
//! it in `supports_op`.
//!
//! ```toml
//! schema = 1
//!
//! [[family]]
//! name = "turbo-turbo"
//! k = ["turbo2", "turbo3", "turbo4"]
//! v = ["turbo2", "turbo3", "turbo4"]
//! head_dims = [128, 256, 512]
//! backends = ["cuda"]
//! ```

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Types a family may name: ggml's name and its `GGML_TYPE_` constant, and
/// for the turbo types the rotation group (head dims must be multiples of
/// it; the 64-value variants exist only for heads 128 does not divide, as
/// `ggml_turbo_type_for_head` picks them).
const TYPES: &[(&str, &str, u32)] = &[
    ("f16", "GGML_TYPE_F16", 0),
    ("bf16", "GGML_TYPE_BF16", 0),
    ("q4_0", "GGML_TYPE_Q4_0", 0),
    ("q4_1", "GGML_TYPE_Q4_1", 0),
    ("q5_0", "GGML_TYPE_Q5_0", 0),
    ("q5_1", "GGML_TYPE_Q5_1", 0),
    ("q8_0", "GGML_TYPE_Q8_0", 0),
    ("turbo2", "GGML_TYPE_TURBO2", 128),
    ("turbo3", "GGML_TYPE_TURBO3", 128),
    ("turbo4", "GGML_TYPE_TURBO4", 128),
    ("turbo2_g64", "GGML_TYPE_TURBO2_G64", 64),
    ("turbo3_g64", "GGML_TYPE_TURBO3_G64", 64),
    ("turbo4_g64", "GGML_TYPE_TURBO4_G64", 64),
    ("tcq2", "GGML_TYPE_TCQ2", 128),
    ("tcq3", "GGML_TYPE_TCQ3", 128),
    ("tcq4", "GGML_TYPE_TCQ4", 128),
    ("tcq2_g64", "GGML_TYPE_TCQ2_G64", 64),
    ("tcq3_g64", "GGML_TYPE_TCQ3_G64", 64),
    ("tcq4_g64", "GGML_TYPE_TCQ4_G64", 64),
];

/// Upstream's own vec instances (`generate_cu_files.py`): a family must not
/// redeclare one of their files.
const UPSTREAM_VEC_TYPES: &[&str] = &["f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"];

/// Backends with an emitter.
pub const BACKENDS: &[&str] = &["cuda", "metal"];

/// The Metal vec kernel's head dims for the fork's pairs, with the values
/// per thread (`NE`) of upstream's baseline configuration at that head dim
/// (`ggml_metal_tuning::fa_vec_baseline_ne`): the host takes the baseline
/// for these pairs, so its kernel name carries no `_q*_ne*` suffix.
fn metal_vec_ne(d: u32) -> Option<u32> {
    match d {
        64 => Some(2),
        128 | 256 | 512 => Some(1),
        _ => None,
    }
}

/// How the Metal vec kernel reads a type: the block type in device memory,
/// the number of 4-value chunks per block and the chunk reader.
fn metal_reader(t: &str) -> Option<(String, u32, String)> {
    match t {
        "f16" => Some(("half4".into(), 1, "dequantize_f16_t4".into())),
        "q4_0" | "q4_1" | "q5_0" | "q5_1" | "q8_0" => {
            Some((format!("block_{t}"), 8, format!("dequantize_{t}_t4")))
        }
        _ => {
            let (_, g) = type_info(t)?;
            (g != 0).then(|| (format!("block_{t}"), g / 4, format!("dequantize_{t}_t4")))
        }
    }
}

/// The CUDA vec kernel's head dims: multiples of 64 (two warps of values),
/// at most 512.
fn cuda_head_dim_ok(d: u32) -> bool {
    d.is_multiple_of(64) && (64..=512).contains(&d)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDecl {
    schema: u32,
    #[serde(default)]
    family: Vec<Family>,
}

/// One family: the cross product of `k` × `v` at every head dim.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Family {
    pub name: String,
    #[serde(default)]
    pub doc: String,
    pub k: Vec<String>,
    pub v: Vec<String>,
    pub head_dims: Vec<u32>,
    pub backends: Vec<String>,
}

/// One instance: a kernel for (head dim, K, V).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Case {
    pub d: u32,
    pub k: String,
    pub v: String,
}

fn type_info(name: &str) -> Option<(&'static str, u32)> {
    TYPES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, c, g)| (*c, *g))
}

/// A loaded, validated family file.
#[derive(Debug)]
pub struct Families {
    /// Path relative to the project root, for messages and headers.
    pub rel: String,
    pub families: Vec<Family>,
}

impl Families {
    /// Reads and validates `root/rel`.
    pub fn load(root: &Path, rel: &str) -> Result<Families> {
        crate::paths::check_relative(rel.as_bytes())?;
        let path = root.join(rel);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Self::parse(rel, &text).with_context(|| format!("in {}", path.display()))
    }

    pub fn parse(rel: &str, text: &str) -> Result<Families> {
        let decl: FileDecl = toml::from_str(text)?;
        if decl.schema != 1 {
            bail!(
                "schema {} is not supported (this forge reads schema 1)",
                decl.schema
            );
        }
        let mut seen_pairs: BTreeMap<(String, String), String> = BTreeMap::new();
        let mut names = Vec::new();
        for f in &decl.family {
            if f.name.is_empty()
                || !f
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
            {
                bail!("family name `{}`: use [a-z0-9_-]+", f.name);
            }
            if names.contains(&f.name) {
                bail!("family `{}` is declared twice", f.name);
            }
            names.push(f.name.clone());
            if f.k.is_empty() || f.v.is_empty() || f.head_dims.is_empty() {
                bail!("family `{}`: k, v and head_dims must not be empty", f.name);
            }
            for b in &f.backends {
                if !BACKENDS.contains(&b.as_str()) {
                    bail!(
                        "family `{}`: unknown backend `{b}` (known: {})",
                        f.name,
                        BACKENDS.join(", ")
                    );
                }
            }
            for t in f.k.iter().chain(&f.v) {
                let Some((_, group)) = type_info(t) else {
                    let known: Vec<&str> = TYPES.iter().map(|(n, _, _)| *n).collect();
                    bail!(
                        "family `{}`: unknown type `{t}` (known: {})",
                        f.name,
                        known.join(", ")
                    );
                };
                for &d in &f.head_dims {
                    if group != 0 && d % group != 0 {
                        bail!(
                            "family `{}`: head dim {d} is not a multiple of {t}'s {group}-value group",
                            f.name
                        );
                    }
                    if group == 64 && d % 128 == 0 {
                        bail!(
                            "family `{}`: {t} at head dim {d}: the 64-value groups are only used for heads 128 does not divide (use the 128-value type)",
                            f.name
                        );
                    }
                }
            }
            if f.backends.iter().any(|b| b == "cuda") {
                if let Some(d) = f.head_dims.iter().find(|d| !cuda_head_dim_ok(**d)) {
                    bail!(
                        "family `{}`: head dim {d} has no CUDA vec kernel (multiples of 64 up to 512)",
                        f.name
                    );
                }
            }
            if f.backends.iter().any(|b| b == "metal") {
                if let Some(d) = f.head_dims.iter().find(|d| metal_vec_ne(**d).is_none()) {
                    bail!(
                        "family `{}`: head dim {d} has no Metal vec instance here (64, 128, 256, 512)",
                        f.name
                    );
                }
                if let Some(t) = f.k.iter().chain(&f.v).find(|t| metal_reader(t).is_none()) {
                    bail!("family `{}`: {t} has no Metal vec reader", f.name);
                }
            }
            for k in &f.k {
                for v in &f.v {
                    if UPSTREAM_VEC_TYPES.contains(&k.as_str())
                        && UPSTREAM_VEC_TYPES.contains(&v.as_str())
                    {
                        bail!(
                            "family `{}`: {k}-{v} is upstream's own instance; families declare only pairs with a fork type",
                            f.name
                        );
                    }
                    if let Some(other) = seen_pairs.insert((k.clone(), v.clone()), f.name.clone()) {
                        bail!(
                            "pair {k}-{v} is in families `{other}` and `{}`; a pair belongs to one family",
                            f.name
                        );
                    }
                }
            }
        }
        Ok(Families {
            rel: rel.to_string(),
            families: decl.family,
        })
    }

    /// Every (K, V) pair of `backend`, with its family and head dims, sorted.
    pub fn pairs(&self, backend: &str) -> Vec<(String, String, &Family)> {
        let mut out = Vec::new();
        for f in self
            .families
            .iter()
            .filter(|f| f.backends.iter().any(|b| b == backend))
        {
            for k in &f.k {
                for v in &f.v {
                    out.push((k.clone(), v.clone(), f));
                }
            }
        }
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// Every case of `backend`, sorted by head dim, then K, then V.
    pub fn cases(&self, backend: &str) -> Vec<Case> {
        let mut out: Vec<Case> = self
            .pairs(backend)
            .into_iter()
            .flat_map(|(k, v, f)| {
                f.head_dims.iter().map(move |&d| Case {
                    d,
                    k: k.clone(),
                    v: v.clone(),
                })
            })
            .collect();
        out.sort();
        out
    }
}

/// Where the CUDA emitter writes.
pub const CUDA_INSTANCE_DIR: &str = "ggml/src/ggml-cuda/template-instances";
pub const CUDA_CASES: &str = "ggml/src/ggml-cuda/fattn-vec-polykv.h";
pub const CUDA_CMAKE: &str = "ggml/src/ggml-cuda/template-instances/fattn-vec-polykv.cmake";

/// The instance file of a (K, V) pair.
pub fn cuda_instance_path(k: &str, v: &str) -> String {
    format!("{CUDA_INSTANCE_DIR}/fattn-vec-instance-{k}-{v}.cu")
}

/// Whether `name` is a vec instance file of a pair with a fork type (not
/// one of upstream's own).
pub fn is_fork_vec_instance(name: &str) -> bool {
    let Some(pair) = name
        .strip_prefix("fattn-vec-instance-")
        .and_then(|n| n.strip_suffix(".cu"))
    else {
        return false;
    };
    match pair.split_once('-') {
        Some((k, v)) => !(UPSTREAM_VEC_TYPES.contains(&k) && UPSTREAM_VEC_TYPES.contains(&v)),
        None => false,
    }
}

fn banner(comment: &str, rel: &str, marker: &str) -> String {
    format!(
        "{comment} Generated by `polykv-forge gen` (generator fattn-vec from {rel}); do not edit: change {rel} and run `polykv-forge gen`.\n{comment} polykv: {marker}\n"
    )
}

/// One emitted file: path, the family it belongs to (None for the lists)
/// and content.
#[derive(Debug)]
pub struct Emitted {
    pub path: String,
    pub family: Option<String>,
    pub content: String,
}

/// The CUDA files of `fam`: one instance file per pair, the case list and
/// the CMake list. `marker` is the patch number the files belong to.
pub fn emit_cuda(fam: &Families, marker: &str) -> Result<Vec<Emitted>> {
    let mut out = Vec::new();
    let mut cmake_list = Vec::new();
    for (k, v, f) in fam.pairs("cuda") {
        let (kc, _) = type_info(&k).context("validated type")?;
        let (vc, _) = type_info(&v).context("validated type")?;
        let mut s = banner("//", &fam.rel, marker);
        s.push_str(&format!(
            "// family {}: {}\n\n#include \"../fattn-vec.cuh\"\n\n",
            f.name,
            if f.doc.is_empty() { "-" } else { &f.doc }
        ));
        let mut dims = f.head_dims.clone();
        dims.sort_unstable();
        for d in dims {
            s.push_str(&format!("DECL_FATTN_VEC_CASE({d:3}, {kc}, {vc});\n"));
        }
        let path = cuda_instance_path(&k, &v);
        cmake_list.push(path.trim_start_matches("ggml/src/ggml-cuda/").to_string());
        out.push(Emitted {
            path,
            family: Some(f.name.clone()),
            content: s,
        });
    }

    let mut s = banner("//", &fam.rel, marker);
    s.push_str(
        "// Every generated flash-attention vec instance as GGML_POLYKV_FATTN_VEC_CASE(D, type_K, type_V);\n\
         // the includer defines the macro (extern declarations, dispatch, supports_op).\n",
    );
    for c in fam.cases("cuda") {
        let (kc, _) = type_info(&c.k).context("validated type")?;
        let (vc, _) = type_info(&c.v).context("validated type")?;
        s.push_str(&format!(
            "GGML_POLYKV_FATTN_VEC_CASE({:3}, {kc}, {vc})\n",
            c.d
        ));
    }
    out.push(Emitted {
        path: CUDA_CASES.to_string(),
        family: None,
        content: s,
    });

    let mut s = banner("#", &fam.rel, marker);
    s.push_str("# The generated flash-attention vec instance files, relative to ggml/src/ggml-cuda.\nset(GGML_POLYKV_FATTN_VEC_INSTANCES\n");
    for p in &cmake_list {
        s.push_str(&format!("    {p}\n"));
    }
    s.push_str(")\n");
    out.push(Emitted {
        path: CUDA_CMAKE.to_string(),
        family: None,
        content: s,
    });
    Ok(out)
}

/// Where the Metal emitter writes: one library of instances (a new entry of
/// ggml-metal-device.m's library list) and the case list the host reads.
pub const METAL_INSTANCES: &str = "ggml/src/ggml-metal/kernels/polykv_fa_vec.metal";
pub const METAL_CASES: &str = "ggml/src/ggml-metal/ggml-metal-polykv-fa.h";

/// The Metal host name of a case (ggml-metal-polykv.cpp builds the same).
pub fn metal_kernel_name(c: &Case) -> String {
    format!(
        "kernel_flash_attn_ext_vec_{}_{}_dk{}_dv{}",
        c.k, c.v, c.d, c.d
    )
}

/// The Metal files of `fam`: the instance library and the case list.
pub fn emit_metal(fam: &Families, marker: &str) -> Result<Vec<Emitted>> {
    let cases = fam.cases("metal");
    let mut s = banner("//", &fam.rel, marker);
    s.push_str(
        "// The fork's flash-attention vec (decode) instances: turbo and trellis-coded K/V read in the\n\
         // rotated domain (polykv-turbo.h), Q rotated before and the output rotated back after the\n\
         // kernel by the host (ggml-metal-polykv.cpp). Names: kernel_flash_attn_ext_vec_K_V_dkD_dvD.\n\
         #include \"common.h\"\n\
         #include \"dequantize.h\"\n\
         #include \"polykv-turbo.h\"\n\
         #include \"fa_vec_common.metal\"\n\n\
         #define FA_TYPES \\\n           half4,  \\\n           half4,  \\\n           half4,  \\\n    float,         \\\n    float, float4, \\\n           float4\n\n\
         typedef decltype(kernel_flash_attn_ext_vec<FA_TYPES, half4, 1, dequantize_f16_t4, half4, 1, dequantize_f16_t4, 128, 128, 1>) flash_attn_ext_vec_t;\n",
    );
    let mut family = "";
    for c in &cases {
        let (kb, knl, kdeq) = metal_reader(&c.k).context("validated type")?;
        let (vb, vnl, vdeq) = metal_reader(&c.v).context("validated type")?;
        let ne = metal_vec_ne(c.d).context("validated head dim")?;
        let f = fam
            .families
            .iter()
            .find(|f| f.k.contains(&c.k) && f.v.contains(&c.v))
            .map(|f| f.name.as_str())
            .unwrap_or_default();
        if f != family {
            s.push_str(&format!("\n// family {f}\n"));
            family = f;
        }
        s.push_str(&format!(
            "template [[host_name(\"{}\")]] kernel flash_attn_ext_vec_t kernel_flash_attn_ext_vec<FA_TYPES, {kb}, {knl}, {kdeq}, {vb}, {vnl}, {vdeq}, {d}, {d}, {ne}>;\n",
            metal_kernel_name(c),
            d = c.d
        ));
    }
    let mut h = banner("//", &fam.rel, marker);
    h.push_str(
        "// Every generated Metal flash-attention vec instance as GGML_POLYKV_METAL_FA_VEC_CASE(D, type_K, type_V);\n\
         // the includer defines the macro (ggml-metal-polykv.cpp: supports_op and the kernel's name).\n",
    );
    for c in &cases {
        let (kc, _) = type_info(&c.k).context("validated type")?;
        let (vc, _) = type_info(&c.v).context("validated type")?;
        h.push_str(&format!(
            "GGML_POLYKV_METAL_FA_VEC_CASE({:3}, {kc}, {vc})\n",
            c.d
        ));
    }
    Ok(vec![
        Emitted {
            path: METAL_INSTANCES.to_string(),
            family: None,
            content: s,
        },
        Emitted {
            path: METAL_CASES.to_string(),
            family: None,
            content: h,
        },
    ])
}

/// For each family, the instance file to compile in a compile check (it
/// holds all the family's head dims): its first asymmetric pair (K type !=
/// V type) in sorted order, else its first pair.
pub fn cuda_representatives(fam: &Families) -> Vec<String> {
    let pairs = fam.pairs("cuda");
    let mut out = Vec::new();
    for f in &fam.families {
        let mine: Vec<_> = pairs.iter().filter(|(_, _, g)| g.name == f.name).collect();
        let pick = mine.iter().find(|(k, v, _)| k != v).or(mine.first());
        if let Some((k, v, _)) = pick {
            out.push(cuda_instance_path(k, v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"
schema = 1
[[family]]
name = "turbo-turbo"
k = ["turbo3", "turbo4"]
v = ["turbo3"]
head_dims = [512, 128]
backends = ["cuda"]
[[family]]
name = "q8-turbo-g64"
k = ["q8_0"]
v = ["turbo3_g64"]
head_dims = [64]
backends = ["cuda"]
"#;

    #[test]
    fn emits_instances_cases_and_cmake() {
        let f = Families::parse("kernels/x.toml", OK).unwrap();
        let e = emit_cuda(&f, "0004").unwrap();
        assert_eq!(e.len(), 3 + 2);
        let t = e
            .iter()
            .find(|x| x.path.ends_with("fattn-vec-instance-turbo4-turbo3.cu"))
            .unwrap();
        assert!(t.content.starts_with("// Generated by `polykv-forge gen`"));
        assert!(t.content.contains("DECL_FATTN_VEC_CASE(128, GGML_TYPE_TURBO4, GGML_TYPE_TURBO3);\nDECL_FATTN_VEC_CASE(512,"));
        let cases = e.iter().find(|x| x.path == CUDA_CASES).unwrap();
        assert_eq!(
            cases.content.matches("GGML_POLYKV_FATTN_VEC_CASE(").count(),
            1 + 5
        );
        assert!(cases
            .content
            .contains("GGML_POLYKV_FATTN_VEC_CASE( 64, GGML_TYPE_Q8_0, GGML_TYPE_TURBO3_G64)"));
        let cmake = e.iter().find(|x| x.path == CUDA_CMAKE).unwrap();
        assert!(cmake.content.starts_with("# Generated by"));
        assert!(cmake
            .content
            .contains("    template-instances/fattn-vec-instance-q8_0-turbo3_g64.cu\n"));
        assert_eq!(
            cuda_representatives(&f),
            vec![
                cuda_instance_path("turbo4", "turbo3"),
                cuda_instance_path("q8_0", "turbo3_g64"),
            ]
        );
    }

    #[test]
    fn emits_metal_instances_and_cases() {
        let f = Families::parse(
            "kernels/x.toml",
            &OK.replace("[\"cuda\"]", "[\"cuda\", \"metal\"]"),
        )
        .unwrap();
        let e = emit_metal(&f, "0010").unwrap();
        assert_eq!(e.len(), 2);
        let inst = &e[0].content;
        assert!(inst.starts_with("// Generated by `polykv-forge gen`"));
        assert!(inst.contains("// polykv: 0010\n"));
        assert_eq!(inst.matches("template [[host_name(").count(), 4 + 1);
        assert!(inst.contains("template [[host_name(\"kernel_flash_attn_ext_vec_turbo4_turbo3_dk512_dv512\")]] kernel flash_attn_ext_vec_t kernel_flash_attn_ext_vec<FA_TYPES, block_turbo4, 32, dequantize_turbo4_t4, block_turbo3, 32, dequantize_turbo3_t4, 512, 512, 1>;"));
        assert!(inst.contains("block_q8_0, 8, dequantize_q8_0_t4, block_turbo3_g64, 16, dequantize_turbo3_g64_t4, 64, 64, 2>;"));
        let cases = &e[1].content;
        assert!(cases.contains(
            "GGML_POLYKV_METAL_FA_VEC_CASE( 64, GGML_TYPE_Q8_0, GGML_TYPE_TURBO3_G64)\n"
        ));
        assert_eq!(
            cases.matches("GGML_POLYKV_METAL_FA_VEC_CASE(").count(),
            5 + 1
        );
        // a family for CUDA alone emits nothing for Metal
        assert!(
            !emit_metal(&Families::parse("k.toml", OK).unwrap(), "0010").unwrap()[0]
                .content
                .contains("host_name")
        );
    }

    #[test]
    fn fork_instances_are_told_from_upstream() {
        assert!(is_fork_vec_instance("fattn-vec-instance-turbo3-turbo3.cu"));
        assert!(is_fork_vec_instance(
            "fattn-vec-instance-q8_0-turbo3_g64.cu"
        ));
        assert!(!is_fork_vec_instance("fattn-vec-instance-q8_0-q4_0.cu"));
        assert!(!is_fork_vec_instance("fattn-vec-polykv.cmake"));
        assert!(!is_fork_vec_instance("fattn-tile-instance-dkq64-dv64.cu"));
    }

    #[test]
    fn refuses_bad_families() {
        let family = |name: &str, k: &str, v: &str, dims: &str, backend: &str| {
            format!(
                "[[family]]\nname=\"{name}\"\nk=[\"{k}\"]\nv=[\"{v}\"]\nhead_dims=[{dims}]\nbackends=[\"{backend}\"]\n"
            )
        };
        let cases = [
            (
                family("a", "turbo9", "turbo3", "128", "cuda"),
                "unknown type `turbo9`",
            ),
            (
                family("a", "turbo3", "turbo3", "64", "cuda"),
                "not a multiple of turbo3's 128-value group",
            ),
            (
                family("a", "turbo3_g64", "turbo3_g64", "128", "cuda"),
                "only used for heads 128 does not divide",
            ),
            (
                family("a", "turbo3", "turbo3", "1024", "cuda"),
                "no CUDA vec kernel",
            ),
            (
                family("a", "q8_0", "f16", "128", "cuda"),
                "upstream's own instance",
            ),
            (
                family("a", "turbo3_g64", "turbo3_g64", "192", "metal"),
                "no Metal vec instance",
            ),
            (
                family("a", "turbo3", "turbo3", "128", "vulkan"),
                "unknown backend",
            ),
            (
                family("a", "turbo3", "turbo3", "128", "cuda")
                    + &family("b", "turbo3", "turbo3", "256", "cuda"),
                "a pair belongs to one family",
            ),
        ];
        for (body, want) in cases {
            let e = Families::parse("k.toml", &format!("schema = 1\n{body}")).unwrap_err();
            let msg = format!("{e:#}");
            assert!(msg.contains(want), "{msg}");
        }
        assert!(Families::parse("k.toml", "schema = 2\n").is_err());
        assert!(Families::parse("k.toml", "schema = 1\nfoo = 1\n").is_err());
    }
}
