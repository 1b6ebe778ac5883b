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
    // The first run holds the lock for 5 s from the moment it says so; the second starts then.
    let mut first = fx.pause_at(&["apply"], "apply-holding-lock:5000");
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

/// #39 item 3: `--force` never replaces a directory the forge did not
/// write, nor one holding the project, nor `/` or a home; a refused
/// directory gets no lock file or staging sibling beside it.
#[test]
fn force_never_replaces_a_directory_the_forge_did_not_write() {
    let fx = Fx::new();
    let mine = fx.tmp.path().join("mine");
    std::fs::create_dir_all(mine.join("sub/deeper")).unwrap();
    std::fs::write(mine.join("notes.txt"), "mine\n").unwrap();
    std::fs::write(mine.join("sub/deeper/data.bin"), b"\x00\x01").unwrap();
    std::fs::create_dir_all(mine.join("checkout/.git")).unwrap();
    std::fs::write(mine.join("checkout/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let before = tree_snapshot(&mine);
    // Beside it: every path but the cache's (the cache is the tool's own).
    let beside = || -> Vec<String> {
        tree_snapshot(fx.tmp.path())
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| !p.starts_with("cache"))
            .collect()
    };
    fx.ok(&["vendor"]);
    let beside_before = beside();
    let wd = mine.to_str().unwrap();
    for args in [
        &["apply", "--force", "--workdir", wd][..],
        &["apply", "--force", "--dry-run", "--workdir", wd][..],
        &["apply", "--workdir", wd][..],
    ] {
        let out = fx.fails(args, 2);
        assert!(
            out.contains("was not written by polykv-forge") && out.contains("--force included"),
            "{args:?}: {out}"
        );
        assert!(!out.contains("pass --force"), "{args:?}: {out}");
    }
    assert_eq!(tree_snapshot(&mine), before, "a refused workdir changed");
    assert_eq!(beside(), beside_before, "something was written beside it");

    // The project, a directory holding it, the cache, the home and `/`:
    // refused before anything is read or written, --force or not.
    let home = fx.home.to_str().unwrap().to_string();
    let root = fx.root.to_str().unwrap().to_string();
    let above = fx.tmp.path().to_str().unwrap().to_string();
    let cache = fx.cache.to_str().unwrap().to_string();
    for (dir, needle) in [
        (root.as_str(), "is the project"),
        (above.as_str(), "holds the project"),
        (cache.as_str(), "is the cache"),
        (home.as_str(), "home directory"),
        ("/", "root"),
    ] {
        let out = fx.fails(&["apply", "--force", "--workdir", dir], 2);
        assert!(out.contains(needle), "{dir}: {out}");
        let out = fx.fails(&["edit", "--force", "--dir", dir], 2);
        assert!(out.contains(needle), "edit {dir}: {out}");
    }
    assert_eq!(tree_snapshot(&mine), before);

    // `edit --force` follows the same rule: only a stack it made.
    let out = fx.fails(&["edit", "--force", "--dir", wd], 2);
    assert!(out.contains("not a stack made by"), "{out}");
    assert_eq!(tree_snapshot(&mine), before);

    // An empty directory is fine to fill.
    let empty = fx.tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    fx.ok(&["apply", "--workdir", empty.to_str().unwrap()]);
    assert!(empty.join("src/main.c").exists());
}

/// #39 item 4: a hand-deleted file comes back with `--force` (it was
/// hard-linked from where it no longer is), and a failed run leaves no
/// staging tree.
#[test]
fn force_brings_back_a_hand_deleted_file() {
    let fx = Fx::new();
    fx.ok(&["apply"]);
    std::fs::remove_file(fx.workdir().join("src/util.h")).unwrap();
    let out = fx.fails(&["apply"], 2);
    assert!(out.contains("deleted:  src/util.h"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&fx.ok(&["apply", "--force", "--dry-run", "--json"])).unwrap();
    assert_eq!(v["written"], 1, "{v}");
    let v: serde_json::Value =
        serde_json::from_str(&fx.ok(&["apply", "--force", "--json"])).unwrap();
    assert_eq!(v["written"], 1, "{v}");
    assert_eq!(
        std::fs::read_to_string(fx.workdir().join("src/util.h")).unwrap(),
        numbered("util", 12)
    );
    let st: serde_json::Value = serde_json::from_str(&fx.ok(&["status", "--json"])).unwrap();
    assert_eq!(st["workdir"]["state"], "clean");
    let leftovers: Vec<_> = std::fs::read_dir(fx.root.join("work"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "llama.cpp")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Untracked content of a forge-made workdir survives an apply that
/// rewrites it: a `.git` directory (a maintainer's own repository), an
/// empty directory, a symlink; what `--force` discards is counted.
#[test]
fn untracked_content_of_the_workdir_survives_apply() {
    let fx = Fx::new();
    fx.ok(&["apply"]);
    let wd = fx.workdir();
    std::fs::create_dir_all(wd.join(".git/refs")).unwrap();
    std::fs::write(wd.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::create_dir_all(wd.join("build-empty")).unwrap();
    std::os::unix::fs::symlink("src/main.c", wd.join("my-link")).unwrap();
    std::fs::write(wd.join("src/mine.c"), "mine\n").unwrap();
    one_patch(&fx);
    let v: serde_json::Value = serde_json::from_str(&fx.ok(&["apply", "--json"])).unwrap();
    assert_eq!(v["written"], 1, "{v}");
    assert_eq!(v["discarded"], 0, "{v}");
    assert_eq!(
        std::fs::read_to_string(wd.join(".git/HEAD")).unwrap(),
        "ref: refs/heads/main\n"
    );
    assert!(wd.join(".git/refs").is_dir());
    assert!(wd.join("build-empty").is_dir());
    assert_eq!(
        std::fs::read_link(wd.join("my-link")).unwrap(),
        std::path::Path::new("src/main.c")
    );
    assert_eq!(
        std::fs::read_to_string(wd.join("src/mine.c")).unwrap(),
        "mine\n"
    );
    // A hand edit discarded by --force is counted, not silent.
    std::fs::write(wd.join("src/util.h"), "hand edit\n").unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&fx.ok(&["apply", "--force", "--json"])).unwrap();
    assert_eq!(v["discarded"], 1, "{v}");
}

/// #39 item 6: a dry run writes nothing, lock files included; a real run
/// keeps its lock in the cache, never beside the workdir.
#[test]
fn a_dry_run_writes_no_lock_file() {
    let fx = Fx::new();
    fx.ok(&["vendor"]);
    let outside = fx.tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let wd = outside.join("tree");
    fx.ok(&["apply", "--dry-run", "--workdir", wd.to_str().unwrap()]);
    assert!(
        tree_snapshot(&outside).is_empty(),
        "{:?}",
        tree_snapshot(&outside)
    );
    let project = tree_snapshot(&fx.root);
    fx.ok(&["apply", "--dry-run"]);
    assert_eq!(tree_snapshot(&fx.root), project);
    fx.ok(&["apply", "--workdir", wd.to_str().unwrap()]);
    let names: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["tree".to_string()]);
}
