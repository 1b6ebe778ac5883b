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
    Out::from(o)
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
    copy_project(&root, &copy);
    let before = snapshot_dir(&copy.join("patches"));
    let o = forge(&copy, &home, &["edit"]);
    assert_eq!(o.code, 0, "{}", o.dump("edit"));
    let o = forge(&copy, &home, &["export"]);
    assert_eq!(o.code, 0, "{}", o.dump("export"));
    assert_eq!(snapshot_dir(&copy.join("patches")), before);

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

/// A blob of a tree in the test cache, through plain git.
fn show(tree: &str, path: &str, home: &Path) -> Vec<u8> {
    let o = env_cmd("git", home)
        .arg("--git-dir")
        .arg(cache().join("objects-v1.git"))
        .args(["show", &format!("{tree}:{path}")])
        .output()
        .unwrap();
    assert!(o.status.success(), "git show {tree}:{path}");
    o.stdout
}

/// What `git merge-file` says of one file: the number of conflicts.
fn merge_file(base: &[u8], ours: &[u8], theirs: &[u8], dir: &Path) -> i32 {
    let (b, o, t) = (dir.join("base"), dir.join("ours"), dir.join("theirs"));
    std::fs::write(&b, base).unwrap();
    std::fs::write(&o, ours).unwrap();
    std::fs::write(&t, theirs).unwrap();
    let out = std::process::Command::new("git")
        .args(["merge-file", "-p"])
        .arg(&o)
        .arg(&b)
        .arg(&t)
        .output()
        .unwrap();
    out.status.code().unwrap()
}

/// Checks every merged or conflicted file of the first patch's report
/// against `git merge-file` on the same three versions.
fn assert_report_matches_merge_file(
    report: &serde_json::Value,
    old_base: &str,
    new_base: &str,
    after: &str,
    home: &Path,
    scratch: &Path,
) -> usize {
    let mut checked = 0;
    for f in report["patches"][0]["files"].as_array().unwrap() {
        let path = f["path"].as_str().unwrap();
        let result = f["result"].as_str().unwrap();
        if result != "merged" && result != "conflict" {
            continue;
        }
        let n = merge_file(
            &show(old_base, path, home),
            &show(new_base, path, home),
            &show(after, path, home),
            scratch,
        );
        if result == "conflict" {
            assert!(
                n > 0,
                "{path}: we report a conflict, git merge-file merged it"
            );
            assert_eq!(f["conflicts"].as_array().unwrap().len() as i32, n, "{path}");
        } else {
            assert_eq!(
                n, 0,
                "{path}: we merged it, git merge-file found {n} conflict(s)"
            );
        }
        checked += 1;
    }
    checked
}

/// Resolves conflict blocks by keeping upstream's side and adding the
/// patch's marker lines, rewritten to upstream's `stream` spelling.
fn resolve(text: &str) -> String {
    let mut out = String::new();
    let mut state = 0;
    for l in text.split_inclusive('\n') {
        if l.starts_with("<<<<<<<") {
            state = 1;
        } else if l.starts_with("=======") && state == 1 {
            state = 2;
        } else if l.starts_with(">>>>>>>") && state == 2 {
            state = 0;
        } else if state == 1 {
            out.push_str(l);
        } else if state == 2 {
            if l.contains("polykv: 0001") {
                let uses_stream = out.contains("FILE * stream");
                let line = if uses_stream {
                    l.to_string()
                } else {
                    l.replace("fprintf(stream,", "fprintf(stderr,")
                };
                out.push_str(&line);
            }
        } else {
            out.push_str(l);
        }
    }
    out
}

/// Cuts the copied series down to its first patch (the chain banner), whose
/// conflicts `resolve` knows how to settle: the test is about the rebase
/// machinery on the real trees, not about the payload patches.
fn keep_first_patch(project: &Path) {
    let dir = project.join("patches");
    let lock = std::fs::read_to_string(dir.join("patches.lock")).unwrap();
    let mut kept = Vec::new();
    for l in lock.lines() {
        let is_patch_line = l.split(' ').next().is_some_and(|f| f.ends_with(".patch"));
        if is_patch_line && !l.starts_with("0001-") {
            continue;
        }
        kept.push(l);
    }
    std::fs::write(dir.join("patches.lock"), kept.join("\n") + "\n").unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if (name.ends_with(".patch") && !name.starts_with("0001-")) || name == "generated.toml" {
            std::fs::remove_file(&p).unwrap();
        }
    }
}

/// The project's chain: its tree after each patch, in order (patches.lock).
fn chain_trees(project: &Path) -> Vec<String> {
    std::fs::read_to_string(project.join("patches/patches.lock"))
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').next().is_some_and(|f| f.ends_with(".patch")))
        .map(|l| l.split(' ').nth(2).unwrap().to_string())
        .collect()
}

/// `rebase --to PIN --json --write-conflicts STACK` (a conflict is exit 1, not a failure); its report.
fn rebase_with_conflicts(
    project: &Path,
    home: &Path,
    pin: &Path,
    stack: &Path,
) -> serde_json::Value {
    let o = forge(
        project,
        home,
        &[
            "rebase",
            "--to",
            pin.to_str().unwrap(),
            "--json",
            "--write-conflicts",
            stack.to_str().unwrap(),
        ],
    );
    assert!(o.code == 0 || o.code == 1, "{}", o.dump("rebase"));
    serde_json::from_str(&o.stdout).unwrap()
}

/// b11312 (llama-cpp-python 0.3.36) → b10454 (0.3.35) and back, through the
/// pip-sdist sources; each report checked against `git merge-file`.
#[test]
fn real_rebase_between_pins_and_back() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let root = project_root();
    let copy = tmp.path().join("project");
    copy_project(&root, &copy);
    keep_first_patch(&copy);
    let old_pin = pinned_tree();
    let pin35 = root.join("tests/fixtures/pin-llama-cpp-python-0.3.35.toml");
    let tree35 = {
        let v: toml::Value = toml::from_str(&std::fs::read_to_string(&pin35).unwrap()).unwrap();
        v["upstream"]["tree"].as_str().unwrap().to_string()
    };
    let lock_after = |dir: &Path| chain_trees(dir).pop().unwrap();

    // Down: b11312 → b10454.
    let after = lock_after(&copy);
    let stack = tmp.path().join("stack");
    let down = rebase_with_conflicts(&copy, &home, &pin35, &stack);
    let checked =
        assert_report_matches_merge_file(&down, &old_pin, &tree35, &after, &home, tmp.path());
    assert!(
        checked > 0 || down["patches"][0]["outcome"] == "clean",
        "{down:#}"
    );
    if down["ok"] == false {
        // Resolve the stack's conflicts and export against the old pin.
        for f in down["patches"][0]["files"].as_array().unwrap() {
            if f["result"] == "conflict" {
                let p = stack.join(f["path"].as_str().unwrap());
                let t = std::fs::read_to_string(&p).unwrap();
                std::fs::write(&p, resolve(&t)).unwrap();
            }
        }
        git(
            &home,
            &stack,
            &["commit", "-q", "-a", "--amend", "--no-edit"],
        );
        let o = forge(
            &copy,
            &home,
            &[
                "export",
                "--from",
                stack.to_str().unwrap(),
                "--pin",
                pin35.to_str().unwrap(),
            ],
        );
        assert_eq!(o.code, 0, "{}", o.dump("export --pin"));
    }
    let o = forge(&copy, &home, &["verify", "--json"]);
    assert_eq!(o.code, 0, "{}", o.dump("verify on b10454"));
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["base_tree"], tree35.as_str());

    // Back up: b10454 → b11312, with the project's own manifest as the pin.
    let after = lock_after(&copy);
    let o = forge(
        &copy,
        &home,
        &[
            "rebase",
            "--to",
            root.join("vendor-manifest.toml").to_str().unwrap(),
            "--json",
        ],
    );
    assert!(o.code == 0 || o.code == 1, "{}", o.dump("rebase up"));
    let up: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_report_matches_merge_file(&up, &tree35, &old_pin, &after, &home, tmp.path());
}

/// A blob of a revision in a git repository (the rebased stack).
fn show_in(repo: &Path, rev: &str, path: &str, home: &Path) -> Vec<u8> {
    let o = env_cmd("git", home)
        .arg("-C")
        .arg(repo)
        .args(["show", &format!("{rev}:{path}")])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git show {rev}:{path} in {}",
        repo.display()
    );
    o.stdout
}

/// The whole chain (every patch in patches/, not only 0001) rebased from
/// b11312 onto b10454: each patch's merged and conflicted files are checked
/// against `git merge-file` on the same three versions — the patch's old
/// before and after trees, and the rebased stack's tree before it (which
/// holds the conflict markers of earlier patches, as the replay does).
#[test]
fn real_rebase_of_the_whole_chain_matches_git_merge_file() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let root = project_root();
    let copy = tmp.path().join("project");
    copy_project(&root, &copy);
    let old_pin = pinned_tree();
    let pin35 = root.join("tests/fixtures/pin-llama-cpp-python-0.3.35.toml");
    let after = chain_trees(&copy);
    assert!(after.len() >= 4, "the chain has {} patches", after.len());
    let stack = tmp.path().join("stack");
    let report = rebase_with_conflicts(&copy, &home, &pin35, &stack);
    let patches = report["patches"].as_array().unwrap();
    assert_eq!(patches.len(), after.len(), "{report:#}");
    // base, then one commit per rebased patch
    let revs: Vec<String> = git(&home, &stack, &["rev-list", "--reverse", "HEAD"])
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(revs.len(), after.len() + 1);
    let mut checked = 0;
    let mut conflicts = 0;
    let mut deleted = 0;
    for (i, p) in patches.iter().enumerate() {
        let before_old = if i == 0 { &old_pin } else { &after[i - 1] };
        for f in p["files"].as_array().unwrap() {
            let path = f["path"].as_str().unwrap();
            let result = f["result"].as_str().unwrap();
            if result != "merged" && result != "conflict" {
                continue;
            }
            // a file the patch changes that the older upstream does not have (b10454 has no
            // ggml-metal/kernels/quantize.metal, which 0010 changes): a conflict with nothing
            // to merge; the claim checked is that the rebased stack lacks it
            if f["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("upstream deleted"))
            {
                assert_eq!(result, "conflict", "{path}");
                let o = env_cmd("git", &home)
                    .arg("-C")
                    .arg(&stack)
                    .args(["cat-file", "-e", &format!("{}:{path}", revs[i])])
                    .output()
                    .unwrap();
                assert!(!o.status.success(), "{path} is in the rebased stack");
                deleted += 1;
                continue;
            }
            let n = merge_file(
                &show(before_old, path, &home),
                &show_in(&stack, &revs[i], path, &home),
                &show(&after[i], path, &home),
                tmp.path(),
            );
            let name = p["patch"].as_str().unwrap();
            if result == "conflict" {
                assert!(
                    n > 0,
                    "{name} {path}: we report a conflict, git merge-file merged it"
                );
                assert_eq!(
                    f["conflicts"].as_array().unwrap().len() as i32,
                    n,
                    "{name} {path}"
                );
                conflicts += 1;
            } else {
                assert_eq!(
                    n, 0,
                    "{name} {path}: we merged it, git merge-file found {n} conflict(s)"
                );
            }
            checked += 1;
        }
    }
    eprintln!(
        "whole-chain rebase b11312 -> b10454: {} patches, {checked} merged or conflicted files checked against git merge-file ({conflicts} conflicted), {deleted} changed file(s) absent upstream",
        patches.len()
    );
    assert!(checked > 0, "{report:#}");
}
