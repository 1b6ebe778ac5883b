//! The instance lint of the Metal check, on the preprocessed rewritten
//! sources (so `#if` branches are resolved and macros such as `FA_TYPES`
//! expanded): every kernel name the host asks for (`ci/metal/host-names.cpp`
//! runs the host's own name builders for every op its `supports_op`
//! accepts) exists exactly once across the libraries, and every instance
//! that pairs a block type with a reader reads whole blocks of that type.

use regex::Regex;
use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::rewrite::{HOST_NAME, KERNEL};

/// One named kernel of one library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub name: String,
    /// The library (translation unit) it is in.
    pub library: String,
    /// The template an instance instantiates (empty for a plain kernel).
    pub template: String,
    /// The template arguments of an instance (empty for a plain kernel).
    pub args: Vec<String>,
}

fn instance_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        // `TYPE FUNC<ARGS>;` or a full declaration `void FUNC<ARGS>(params);`
        Regex::new(r#"/\*polykv-host-name:"([^"]+)"\*/\s*[A-Za-z_][A-Za-z0-9_:]*\s+([A-Za-z_][A-Za-z0-9_:]*)\s*<([^;]*?)>\s*[;(]"#)
            .expect("a valid regex")
    })
}

fn plain_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| Regex::new(r#"/\*polykv-kernel:"([^"]+)"\*/"#).expect("a valid regex"))
}

/// Splits template arguments at top-level commas.
fn split_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for ch in s.chars() {
        match ch {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            out.push(cur.trim().to_string());
            cur.clear();
        } else {
            cur.push(ch);
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// The kernels of one preprocessed library. Marker comments that are not
/// followed by an instance (a rewritten line inside a comment, say) are
/// counted as unparsed so that a silent parse failure cannot hide a name.
pub fn kernels(library: &str, preprocessed: &str) -> (Vec<Kernel>, usize) {
    let mut out = Vec::new();
    for c in instance_re().captures_iter(preprocessed) {
        out.push(Kernel {
            name: c[1].to_string(),
            library: library.to_string(),
            template: c[2].to_string(),
            args: split_args(&c[3]),
        });
    }
    for c in plain_re().captures_iter(preprocessed) {
        out.push(Kernel {
            name: c[1].to_string(),
            library: library.to_string(),
            template: String::new(),
            args: Vec::new(),
        });
    }
    let markers = preprocessed.matches(HOST_NAME).count() + preprocessed.matches(KERNEL).count();
    let unparsed = markers.saturating_sub(out.len());
    (out, unparsed)
}

/// Values per block of the block types a reader may read (types not listed
/// are not checked; the count says how many).
fn block_values(block: &str) -> Option<u32> {
    let t = block.strip_prefix("block_")?;
    let v = match t {
        "q4_0" | "q4_1" | "q5_0" | "q5_1" | "q8_0" | "iq4_nl" | "mxfp4" => 32,
        "q1_0" => 128,
        "q2_0" => 64,
        "q2_K" | "q3_K" | "q4_K" | "q5_K" | "q6_K" | "iq2_xxs" | "iq2_xs" | "iq2_s" | "iq3_xxs"
        | "iq3_s" | "iq1_s" | "iq1_m" | "iq4_xs" | "tq1_0" | "tq2_0" => 256,
        _ if t.starts_with("turbo") || t.starts_with("tcq") => {
            if t.ends_with("_g64") {
                64
            } else {
                128
            }
        }
        _ => return None,
    };
    Some(v)
}

/// Values of a vector "block" (f16/f32/bf16 caches read as vectors).
fn vector_values(t: &str) -> Option<(&'static str, u32)> {
    match t {
        "half4" => Some(("f16", 4)),
        "half4x4" => Some(("f16", 16)),
        "float4" => Some(("f32", 4)),
        "float4x4" => Some(("f32", 16)),
        "bfloat4" => Some(("bf16", 4)),
        "bfloat4x4" => Some(("bf16", 16)),
        _ => None,
    }
}

/// The templates whose `(block type, n, reader)` arguments mean that n
/// calls of the reader cover one block (others use the number otherwise).
const READER_TEMPLATES: &[&str] = &[
    "kernel_flash_attn_ext",
    "kernel_flash_attn_ext_vec",
    "kernel_get_rows_q",
    "kernel_cpy_q_f32",
];

/// What the lint found.
#[derive(Debug, Default, serde::Serialize)]
pub struct Findings {
    pub kernels: usize,
    pub requested: usize,
    /// (block, reader) pairs checked, and those of block types it does not know.
    pub readers_checked: usize,
    pub readers_unknown: usize,
    pub problems: Vec<String>,
}

/// The lint over every library's kernels, the names the host asks for
/// (`(name, op)` pairs) and the ops it refuses (a view of a turbo tensor
/// must never be refused: the scheduler would move the cache off the GPU).
pub fn check(
    kernels: &[Kernel],
    unparsed: usize,
    requested: &[(String, String)],
    refused: &[String],
) -> Findings {
    let mut f = Findings {
        kernels: kernels.len(),
        ..Default::default()
    };
    if unparsed > 0 {
        f.problems.push(format!(
            "{unparsed} kernel marker(s) not followed by an instance the lint can read"
        ));
    }
    let mut by_name: BTreeMap<&str, Vec<&Kernel>> = BTreeMap::new();
    for k in kernels {
        by_name.entry(k.name.as_str()).or_default().push(k);
    }
    for (name, ks) in &by_name {
        if ks.len() > 1 {
            let libs: Vec<&str> = ks.iter().map(|k| k.library.as_str()).collect();
            f.problems.push(format!(
                "{name}: defined {} times ({}); the host's lookup by name would be ambiguous",
                ks.len(),
                libs.join(", ")
            ));
        }
    }
    for k in kernels {
        // templates whose (block type, n, reader) arguments mean: n calls of the reader read a block
        if !READER_TEMPLATES.contains(&k.template.as_str()) {
            continue;
        }
        for i in 0..k.args.len().saturating_sub(2) {
            let (block, nl, reader) = (&k.args[i], &k.args[i + 1], &k.args[i + 2]);
            let Some(deq) = reader.strip_prefix("dequantize_") else {
                continue;
            };
            let (deq, per_call) = match deq.strip_suffix("_t4") {
                Some(d) => (d, 4),
                None => (deq, 16),
            };
            let Ok(nl) = nl.parse::<u32>() else {
                continue;
            };
            let (ty, values) = if let Some((ty, v)) = vector_values(block) {
                (ty.to_string(), Some(v))
            } else if let Some(t) = block.strip_prefix("block_") {
                (t.to_string(), block_values(block))
            } else {
                continue;
            };
            if deq != ty {
                f.problems.push(format!(
                    "{}: {reader} reads {block}, a {ty} block, with the reader of {deq}",
                    k.name
                ));
            }
            match values {
                Some(v) => {
                    f.readers_checked += 1;
                    if nl * per_call != v {
                        f.problems.push(format!(
                            "{}: {block} holds {v} values but {nl} calls of {reader} read {}",
                            k.name,
                            nl * per_call
                        ));
                    }
                }
                None => f.readers_unknown += 1,
            }
        }
    }
    for op in refused.iter().filter(|op| op.starts_with("view:")) {
        f.problems.push(format!(
            "supports_op refuses {op}: a refused view of the cache moves the cache to another backend"
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (name, op) in requested {
        if !seen.insert(name.as_str()) {
            continue;
        }
        f.requested += 1;
        if !by_name.contains_key(name.as_str()) {
            f.problems.push(format!(
                "{name}: the host asks for it ({op}, which supports_op accepts) but no library defines it"
            ));
        }
    }
    f
}

/// The `name`/`accepted`/`refused` lines of `host-names`.
#[derive(Debug, Default)]
pub struct HostNames {
    pub requested: Vec<(String, String)>,
    pub accepted: Vec<String>,
    pub refused: Vec<String>,
}

pub fn parse_host_names(out: &str) -> HostNames {
    let mut h = HostNames::default();
    for line in out.lines() {
        let mut it = line.splitn(3, ' ');
        match (it.next(), it.next(), it.next()) {
            (Some("name"), Some(n), Some(op)) => h.requested.push((n.to_string(), op.to_string())),
            (Some("accepted"), Some(op), None) => h.accepted.push(op.to_string()),
            (Some("refused"), Some(op), None) => h.refused.push(op.to_string()),
            _ => {}
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRE: &str = r#"
template /*polykv-host-name:"kernel_fa_turbo3_dk128"*/ fa_t kernel_flash_attn_ext_vec<half4, float, block_q8_0, 8, dequantize_q8_0_t4, block_turbo3, 32, dequantize_turbo3_t4, 128, 128, 1>;
template /*polykv-host-name:"kernel_get_rows_q4_0"*/ get_rows_q_t kernel_get_rows_q<block_q4_0, 2, dequantize_q4_0>;
/*polykv-kernel:"kernel_reduce"*/ void kernel_reduce(int x) {}
template /*polykv-host-name:"kernel_conv_f32"*/
 void kernel_conv<float, vec<int, 2>>(
        const args & a, int tid);
template /*polykv-host-name:"kernel_mv_ext_q8_0"*/ mv_t kernel_mul_mv_ext_q4_f32_disp<4, block_q8_0, 32, dequantize_q8_0_t4>;
template /*polykv-host-name:"kernel_mv_id"*/ id_t kernel_mul_mv_id<mmv_fn<kernel_mul_mv_t_t_disp<float, float>>>;
"#;

    #[test]
    fn reads_instances_and_plain_kernels() {
        let (k, unparsed) = kernels("fa", PRE);
        assert_eq!(unparsed, 0);
        assert_eq!(k.len(), 6);
        assert_eq!(
            k[4].args,
            vec!["mmv_fn<kernel_mul_mv_t_t_disp<float, float>>"]
        );
        assert_eq!(k[0].args.len(), 11);
        assert_eq!(k[2].template, "kernel_conv");
        assert_eq!(k[2].args, vec!["float", "vec<int, 2>"]);
        let f = check(
            &k,
            0,
            &[("kernel_reduce".into(), "op".into())],
            &["cpy:f32:tcq3".into()],
        );
        assert!(f.problems.is_empty(), "{:?}", f.problems);
        // the mul_mv_ext instance's 32 is not a count of reader calls: not checked
        assert_eq!(f.readers_checked, 3);
        assert_eq!(f.requested, 1);
    }

    #[test]
    fn finds_each_kind_of_problem() {
        let bad = PRE
            .replace("block_turbo3, 32,", "block_turbo3, 16,")
            .replace("dequantize_q4_0>", "dequantize_q8_0>")
            + "template /*polykv-host-name:\"kernel_reduce\"*/ r_t kernel_r<1>;\n/*polykv-host-name:\"kernel_lost\"*/ nothing\n";
        let (k, unparsed) = kernels("x", &bad);
        let f = check(
            &k,
            unparsed,
            &[("kernel_missing".into(), "set_rows:f32:turbo3".into())],
            &["view:VIEW:turbo3".into()],
        );
        let all = f.problems.join("\n");
        assert!(
            all.contains(
                "block_turbo3 holds 128 values but 16 calls of dequantize_turbo3_t4 read 64"
            ),
            "{all}"
        );
        assert!(
            all.contains("dequantize_q8_0 reads block_q4_0, a q4_0 block"),
            "{all}"
        );
        assert!(all.contains("kernel_reduce: defined 2 times"), "{all}");
        assert!(
            all.contains("kernel_missing: the host asks for it"),
            "{all}"
        );
        assert!(all.contains("1 kernel marker(s) not followed"), "{all}");
        assert!(
            all.contains("supports_op refuses view:VIEW:turbo3"),
            "{all}"
        );
    }

    #[test]
    fn parses_host_names() {
        let h = parse_host_names("name kernel_a set_rows:turbo3:i64\naccepted set_rows:turbo3:i64\nrefused set_rows:tcq3:i64\n");
        assert_eq!(
            h.requested,
            vec![("kernel_a".to_string(), "set_rows:turbo3:i64".to_string())]
        );
        assert_eq!(h.accepted.len(), 1);
        assert_eq!(h.refused.len(), 1);
    }
}
