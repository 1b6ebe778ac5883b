//! The layering of docs/architecture.md, enforced: every module's `crate::`
//! paths (tests aside) name only modules of its own layer or the layers below,
//! and every module of the crate has a layer in the table, so that the table
//! cannot drift from the code.

use regex::Regex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// module → layer, read off the table's rows `| N name | `a`, `b`, ... |`.
fn layers() -> BTreeMap<String, u32> {
    let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/architecture.md"))
        .expect("docs/architecture.md is readable");
    let row = Regex::new(r"(?m)^\| (\d) [^|]*\| (.*) \|$").expect("a valid regex");
    let module = Regex::new(r"`([a-z_]+)(?:::\*)?`").expect("a valid regex");
    let mut out = BTreeMap::new();
    for r in row.captures_iter(&doc) {
        let layer: u32 = r[1].parse().expect("one digit");
        for m in module.captures_iter(&r[2]) {
            out.insert(m[1].to_string(), layer);
        }
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src/ is readable") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a source file belongs to (`src/gate/engine.rs` → `gate`).
fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("below src/");
    let first = rel.components().next().expect("a component");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_string()
}

/// The modules a file names through `crate::`, test code left out.
fn uses(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let single = Regex::new(r"crate::([a-z_]+)\b").expect("a valid regex");
    let grouped = Regex::new(r"crate::\{([^}]*)\}").expect("a valid regex");
    let mut out: Vec<String> = single
        .captures_iter(code)
        .map(|c| c[1].to_string())
        .collect();
    for g in grouped.captures_iter(code) {
        out.extend(
            g[1].split(',')
                .filter_map(|s| s.trim().split("::").next())
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        );
    }
    out
}

#[test]
fn modules_import_only_downward() {
    let layers = layers();
    assert!(
        layers.len() > 20,
        "the layer table was not found: {layers:?}"
    );
    let src = Path::new(ROOT).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut problems = Vec::new();
    for f in &files {
        let top = top_module(&src, f);
        if ["lib", "main", "layering"].contains(&top.as_str()) {
            continue;
        }
        let Some(&own) = layers.get(&top) else {
            problems.push(format!(
                "module `{top}` has no layer in docs/architecture.md"
            ));
            continue;
        };
        let text = std::fs::read_to_string(f).expect("a readable source file");
        for used in uses(&text) {
            match layers.get(&used) {
                _ if used == top => {}
                None => problems.push(format!(
                    "{}: `crate::{used}` is in no layer of docs/architecture.md",
                    f.display()
                )),
                Some(&l) if l > own => problems.push(format!(
                    "{}: `{top}` (layer {own}) uses `crate::{used}` (layer {l})",
                    f.display()
                )),
                Some(_) => {}
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_scan_sees_grouped_and_test_only_paths_right() {
    let text = "use crate::{fsx, gate::engine};\nfn f() { crate::proc::run(); }\n#[cfg(test)]\nmod tests { use crate::cli; }\n";
    let mut u = uses(text);
    u.sort();
    assert_eq!(u, ["fsx", "gate", "proc"]);
}
