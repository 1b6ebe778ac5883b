//! The source rewriter of the Metal check: the four MSL forms that are not
//! C++ (docs/turbo-kv-metal.md) turned into C++ that clang++ reads through
//! the model of `<metal_stdlib>` in `ci/metal/include`, keeping every kernel
//! name visible to the lint as a comment (`clang++ -E -C` keeps comments and
//! drops what `#if` leaves out):
//!
//! - `template [[host_name("N")]] kernel …` → `template /*polykv-host-name:"N"*/ …`
//! - a non-template `kernel void N(` → `/*polykv-kernel:"N"*/ void N(`
//! - `[[threadgroup(0)]]` → nothing (it collides with the address-space macro)
//! - half literals `16.h`, `1.0h` → `((half) 16.)`, `((half) 1.0)`
//! - `constant T X [[function_constant(n)]];` → a value known only at run time

use regex::Regex;
use std::sync::OnceLock;

/// The marker of a named template instance in rewritten text.
pub const HOST_NAME: &str = "/*polykv-host-name:";
/// The marker of a non-template kernel in rewritten text.
pub const KERNEL: &str = "/*polykv-kernel:";

struct Rules {
    host_name: Regex,
    plain_kernel: Regex,
    threadgroup: Regex,
    half_literal: Regex,
    function_constant: Regex,
}

fn rules() -> &'static Rules {
    static R: OnceLock<Rules> = OnceLock::new();
    R.get_or_init(|| Rules {
        host_name: Regex::new(r#"template\s*\[\[\s*host_name\(\s*("[^"]*")\s*\)\s*\]\]\s*kernel\b"#)
            .expect("a valid regex"),
        plain_kernel: Regex::new(r"(?m)^([ \t]*)kernel\s+void\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(")
            .expect("a valid regex"),
        threadgroup: Regex::new(r"\[\[\s*threadgroup\(\s*\d+\s*\)\s*\]\]").expect("a valid regex"),
        half_literal: Regex::new(r"(\b\d+\.\d*|\B\.\d+|\b\d+)[hH]\b").expect("a valid regex"),
        function_constant: Regex::new(
            r"\bconstant\s+([A-Za-z_][A-Za-z0-9_]*)\s+([A-Za-z_][A-Za-z0-9_]*)\s*\[\[\s*function_constant\(([^\]]*)\)\s*\]\]\s*;",
        )
        .expect("a valid regex"),
    })
}

/// The C++ text of one MSL source.
pub fn rewrite(src: &str) -> String {
    let r = rules();
    let t = r
        .host_name
        .replace_all(src, "template /*polykv-host-name:$1*/");
    let t = mark_plain_kernels(&t, &r.plain_kernel);
    let t = r.threadgroup.replace_all(&t, "");
    let t = r.half_literal.replace_all(&t, "((half) $1)");
    r.function_constant
        .replace_all(
            &t,
            "static constant $1 $2 = polykv_function_constant<$1>($3);",
        )
        .into_owned()
}

/// Marks `kernel void N(` unless a template header ends right before it
/// (a template's kernels are named by their instances).
fn mark_plain_kernels(text: &str, re: &Regex) -> String {
    let mut out = String::with_capacity(text.len() + 256);
    let mut last = 0;
    for c in re.captures_iter(text) {
        let (Some(all), Some(indent), Some(name)) = (c.get(0), c.get(1), c.get(2)) else {
            continue;
        };
        out.push_str(&text[last..all.start()]);
        if after_template_header(&text[..all.start()]) {
            out.push_str(all.as_str());
        } else {
            out.push_str(&format!(
                "{}{KERNEL}\"{}\"*/ void {}(",
                indent.as_str(),
                name.as_str(),
                name.as_str()
            ));
        }
        last = all.end();
    }
    out.push_str(&text[last..]);
    out
}

/// Whether the code before a kernel ends with a template header (`>`, with
/// blank lines and line comments after it).
fn after_template_header(before: &str) -> bool {
    for line in before.lines().rev() {
        let code = line.split("//").next().unwrap_or_default().trim_end();
        if code.trim().is_empty() {
            continue;
        }
        return code.ends_with('>');
    }
    false
}

/// Whether a file of the kernels folder is source the rewriter reads.
pub fn is_source(name: &str) -> bool {
    name.ends_with(".metal") || name.ends_with(".h")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_the_four_forms() {
        let src = r#"constant bool FC_a [[function_constant(FC_X + 0)]];
template [[host_name("kernel_x_f32")]]   kernel x_t kernel_x<float>;
kernel void kernel_plain(
        threadgroup  half * shmem [[threadgroup(0)]],
        uint tid [[thread_position_in_grid]]) {
    half a = 16.h; half b = -8.h*d; half c = 1.5h; float f = 0x10; int h = 3; // 2h
}
template<typename T>
kernel void kernel_tmpl(device T * x) {}
template<
    short C = 4> // cache items

kernel void kernel_tmpl2(device T * x) {}
"#;
        let t = rewrite(src);
        assert!(t.contains("static constant bool FC_a = polykv_function_constant<bool>(FC_X + 0);"));
        assert!(t.contains(r#"template /*polykv-host-name:"kernel_x_f32"*/ x_t kernel_x<float>;"#));
        assert!(t.contains(r#"/*polykv-kernel:"kernel_plain"*/ void kernel_plain("#));
        assert!(t.contains("threadgroup  half * shmem ,"));
        assert!(t.contains("half a = ((half) 16.);"));
        assert!(t.contains("-((half) 8.)*d"));
        assert!(t.contains("half c = ((half) 1.5);"));
        assert!(t.contains("float f = 0x10; int h = 3; // ((half) 2)"));
        // a template's kernel is not marked: its instances name it
        assert!(t.contains("template<typename T>\nkernel void kernel_tmpl("));
        assert!(t.contains("// cache items\n\nkernel void kernel_tmpl2("));
    }
}
