//! The workdir: only changed files rewritten, no-op applies, drift, locks,
//! and kill -9 in the middle of `apply`.

use crate::harness::*;
use std::time::Duration;

fn one_patch(fx: &Fx) {
    fx.commit_patch("First", |s| {
        let p = s.join("src/main.c");
        let t = std::fs::read_to_string(&p).unwrap();
        std::fs::write(
            p,
            t.replace("main line 10\n", "main line 10 // polykv: 0001\n"),
        )
        .unwrap();
    });
}

fn state_tree(fx: &Fx) -> String {
    let s = std::fs::read(fx.workdir().join(".polykv-forge-state.json")).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&s).unwrap();
    v["tree"].as_str().unwrap().to_string()
}

#[test]
fn reapply_touches_nothing_and_changes_rewrite_only_changed_files() {
    let fx = Fx::new();
    fx.ok(&["apply"]);
    let base_tree = state_tree(&fx);
    assert_eq!(base_tree, fx.tree);
    let before = fx.workdir_snapshot();
    std::thread::sleep(Duration::from_millis(20));
    let out = fx.ok(&["apply", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["already"], true);
    assert_eq!(
        fx.workdir_snapshot(),
        before,
        "a no-op apply touches no file"
    );

    one_patch(&fx);
    let v: serde_json::Value = serde_json::from_str(&fx.ok(&["apply", "--json"])).unwrap();
    assert_eq!(v["written"], 1);
    let after = fx.workdir_snapshot();
    for (a, b) in before.iter().zip(&after) {
        assert_eq!(a.0, b.0);
        if a.0 == "src/main.c" {
            assert_ne!(a.1, b.1);
        } else if a.0 != ".polykv-forge-state.json" {
            assert_eq!(a, b, "{} was rewritten", a.0);
        }
    }
    // Symlinks and executables come back as they were.
    assert!(fx
        .workdir()
        .join("link")
        .symlink_metadata()
        .unwrap()
        .file_type()
        .is_symlink());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(fx.workdir().join("scripts/run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111);
}

#[test]
fn hand_edits_are_drift_and_are_not_lost_silently() {
    let fx = Fx::new();
    fx.ok(&["apply"]);
    std::fs::write(fx.workdir().join("src/util.h"), "hand edit\n").unwrap();
    std::fs::write(fx.workdir().join("untracked.txt"), "mine\n").unwrap();
    let st: serde_json::Value = serde_json::from_str(&fx.ok(&["status", "--json"])).unwrap();
    assert_eq!(st["workdir"]["state"], "drifted");
    assert_eq!(st["workdir"]["modified"][0], "src/util.h");
    assert_eq!(st["workdir"]["untracked"], 1);
    one_patch(&fx);
    let out = fx.fails(&["apply"], 2);
    assert!(
        out.contains("hand edits") && out.contains("modified: src/util.h"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(fx.workdir().join("src/util.h")).unwrap(),
        "hand edit\n"
    );
    fx.ok(&["apply", "--force"]);
    assert_eq!(
        std::fs::read_to_string(fx.workdir().join("src/util.h")).unwrap(),
        numbered("util", 12)
    );
    assert_eq!(
        std::fs::read_to_string(fx.workdir().join("untracked.txt")).unwrap(),
        "mine\n"
    );
}

#[test]
fn a_directory_not_written_by_the_forge_is_not_replaced() {
    let fx = Fx::new();
    std::fs::create_dir_all(fx.workdir()).unwrap();
    std::fs::write(fx.workdir().join("precious"), "x").unwrap();
    let out = fx.fails(&["apply"], 2);
    assert!(out.contains("not written by polykv-forge"), "{out}");
    assert!(fx.workdir().join("precious").exists());
}

#[test]
fn two_applies_at_once_lock_the_workdir() {
    let fx = Fx::new();
    fx.ok(&["vendor"]);
    let mut first = fx
        .cmd(&["apply"])
        .env("POLYKV_FORGE_FAILPOINT", "apply-holding-lock:2500")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let out = fx.fails(&["apply", "--no-wait"], 2);
    assert!(
        out.contains("is locked by another polykv-forge run"),
        "{out}"
    );
    // Without --no-wait the second run waits for the first, then finds nothing to do.
    let waited = fx.run(&["apply", "--json"]);
    assert_eq!(waited.code, 0, "{}", waited.dump("waiting apply"));
    assert!(
        waited.stderr.contains("waiting for the lock"),
        "{}",
        waited.stderr
    );
    assert!(first.wait().unwrap().success());
    assert_eq!(state_tree(&fx), fx.tree);
}

#[test]
fn kill_9_during_apply_leaves_the_old_tree_or_the_new_one() {
    let fx = Fx::new();
    fx.ok(&["apply"]);
    let old = fx.workdir_snapshot();
    one_patch(&fx);

    fx.kill_at(&["apply"], "apply-before-swap");
    assert_eq!(
        fx.workdir_snapshot(),
        old,
        "killed before the swap: the old tree, untouched"
    );
    assert_eq!(state_tree(&fx), fx.tree);
    let st: serde_json::Value = serde_json::from_str(&fx.ok(&["status", "--json"])).unwrap();
    assert_eq!(st["workdir"]["state"], "clean");

    fx.kill_at(&["apply"], "apply-after-swap");
    assert_ne!(
        state_tree(&fx),
        fx.tree,
        "killed after the swap: the new tree"
    );
    let st: serde_json::Value = serde_json::from_str(&fx.ok(&["status", "--json"])).unwrap();
    assert_eq!(st["workdir"]["state"], "clean");
    assert_eq!(st["workdir"]["current"], true);
    // The next run cleans what the killed one left beside the workdir.
    fx.ok(&["apply"]);
    let leftovers: Vec<_> = std::fs::read_dir(fx.root.join("work"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("staging"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
