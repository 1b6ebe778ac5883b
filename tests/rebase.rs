//! `rebase` on synthetic upstreams made from the fixture's tree: each
//! outcome, nothing written unless everything lands, interrupted rebases.

use crate::harness::*;
use std::path::Path;

/// Patch 0001 changes main.c line 20 (one hunk, lines 17-23 with context).
fn one_patch(fx: &Fx) {
    fx.commit_patch("Change main", |s| {
        let p = s.join("src/main.c");
        let t = std::fs::read_to_string(&p).unwrap();
        std::fs::write(
            p,
            t.replace("main line 20\n", "main line 20 patched // polykv: 0001\n"),
        )
        .unwrap();
    });
}

fn edit_main(dir: &Path, from: &str, to: &str) {
    let p = dir.join("src/main.c");
    let t = std::fs::read_to_string(&p).unwrap();
    assert!(t.contains(from));
    std::fs::write(p, t.replacen(from, to, 1)).unwrap();
}

fn rebase(fx: &Fx, pin: &Path, extra: &[&str], code: i32) -> serde_json::Value {
    let mut args = vec!["rebase", "--to", pin.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let o = fx.run(&args);
    assert_eq!(o.code, code, "{}", o.dump("rebase"));
    serde_json::from_str(&o.stdout).unwrap()
}

fn manifest(fx: &Fx) -> String {
    std::fs::read_to_string(fx.root.join("vendor-manifest.toml")).unwrap()
}

#[test]
fn upstream_edit_far_from_the_hunk_is_clean_and_everything_is_updated_together() {
    let fx = Fx::new();
    one_patch(&fx);
    let (pin, tree) = fx.new_upstream("far", |d| {
        edit_main(d, "main line 2\n", "main line 2 upstream\n")
    });
    let v = rebase(&fx, &pin, &["--dry-run"], 0);
    assert_eq!(v["patches"][0]["outcome"], "clean");
    assert_eq!(v["written"], false);
    assert!(manifest(&fx).contains(&fx.tree));
    let v = rebase(&fx, &pin, &[], 0);
    assert_eq!(v["written"], true);
    assert!(manifest(&fx).contains(&tree), "the pin moved");
    assert!(!manifest(&fx).contains(&fx.tree));
    let lock = std::fs::read_to_string(fx.patches().join("patches.lock")).unwrap();
    assert!(lock.contains(&format!("base {tree}")));
    let out = fx.ok(&["verify"]);
    assert!(out.contains("verify: ok"), "{out}");
}

#[test]
fn upstream_edit_next_to_the_hunk_merges_and_is_reported_as_drift() {
    let fx = Fx::new();
    one_patch(&fx);
    // Line 18 is inside the hunk's context: strict apply fails, the merge succeeds.
    let (pin, _) = fx.new_upstream("near", |d| {
        edit_main(d, "main line 18\n", "main line 18 upstream\n")
    });
    let v = rebase(&fx, &pin, &[], 0);
    let p = &v["patches"][0];
    assert_eq!(p["outcome"], "merged", "{v:#}");
    assert_eq!(p["files"][0]["result"], "merged");
    assert!(
        p["drift"][0].as_str().unwrap().contains(
            "upstream changed 1 line(s) within 3 lines of 1 of 0001's 1 hunk(s) in src/main.c"
        ),
        "{v:#}"
    );
    fx.ok(&["verify"]);
    fx.ok(&["apply"]);
    let main = std::fs::read_to_string(fx.workdir().join("src/main.c")).unwrap();
    assert!(main.contains("main line 18 upstream") && main.contains("main line 20 patched"));
}

#[test]
fn overlapping_edit_is_a_conflict_and_nothing_is_written() {
    let fx = Fx::new();
    one_patch(&fx);
    let before = (manifest(&fx), fx.patches_snapshot());
    let (pin, _) = fx.new_upstream("overlap", |d| {
        edit_main(d, "main line 20\n", "main line 20 changed upstream\n")
    });
    let v = rebase(&fx, &pin, &[], 1);
    let p = &v["patches"][0];
    assert_eq!(p["outcome"], "conflict");
    let c = &p["files"][0]["conflicts"][0];
    assert_eq!(c["upstream"], "main line 20 changed upstream");
    assert_eq!(c["patch"], "main line 20 patched // polykv: 0001");
    assert_eq!(v["written"], false);
    assert_eq!((manifest(&fx), fx.patches_snapshot()), before);

    // --write-conflicts: a stack with markers; export refuses them until resolved.
    let stack = fx.tmp.path().join("conflicts");
    // A dry run writes nothing, so it cannot also write the stack.
    let out = fx.fails(
        &[
            "rebase",
            "--to",
            pin.to_str().unwrap(),
            "--dry-run",
            "--write-conflicts",
            stack.to_str().unwrap(),
        ],
        2,
    );
    assert!(out.contains("--dry-run"), "{out}");
    assert!(
        !stack.exists(),
        "a refused dry run wrote {}",
        stack.display()
    );
    // The user's tables (models) must survive `export --pin` below.
    let mut m = manifest(&fx);
    m.push_str("\n# my models\n[[models]]\nname = \"mine\"\nfile = \"mine.gguf\"\nsha256 = \"00\"\nparts = []\n");
    std::fs::write(fx.root.join("vendor-manifest.toml"), &m).unwrap();
    let v = rebase(
        &fx,
        &pin,
        &["--write-conflicts", stack.to_str().unwrap()],
        1,
    );
    assert_eq!(v["written"], false);
    let main = std::fs::read_to_string(stack.join("src/main.c")).unwrap();
    assert!(
        main.contains("<<<<<<< upstream") && main.contains(">>>>>>> 0001-change-main.patch"),
        "{main}"
    );
    let out = fx.fails(
        &[
            "export",
            "--from",
            stack.to_str().unwrap(),
            "--pin",
            pin.to_str().unwrap(),
        ],
        2,
    );
    assert!(out.contains("conflict marker"), "{out}");
    let resolved = numbered("main", 40).replace(
        "main line 20\n",
        "main line 20 changed upstream, patched // polykv: 0001\n",
    );
    std::fs::write(stack.join("src/main.c"), resolved).unwrap();
    fx.git(&stack, &["commit", "-q", "-a", "--amend", "--no-edit"]);
    fx.ok(&[
        "export",
        "--from",
        stack.to_str().unwrap(),
        "--pin",
        pin.to_str().unwrap(),
    ]);
    let after = manifest(&fx);
    assert!(!after.contains(&fx.tree), "export --pin moved the pin");
    assert!(
        after.contains("# my models\n[[models]]\nname = \"mine\""),
        "export --pin kept the rest of the manifest:\n{after}"
    );
    fx.ok(&["verify"]);
}

#[test]
fn a_hunk_already_upstream_is_reported_and_dropped_on_request() {
    let fx = Fx::new();
    one_patch(&fx);
    let (pin, _) = fx.new_upstream("same", |d| {
        edit_main(
            d,
            "main line 20\n",
            "main line 20 patched // polykv: 0001\n",
        )
    });
    let before = fx.patches_snapshot();
    let v = rebase(&fx, &pin, &[], 1);
    assert_eq!(v["patches"][0]["outcome"], "already-upstream");
    assert_eq!(fx.patches_snapshot(), before);
    let v = rebase(&fx, &pin, &["--drop-upstreamed"], 0);
    assert_eq!(v["dropped"][0], "0001-change-main.patch");
    let names: Vec<String> = fx.patches_snapshot().into_iter().map(|p| p.0).collect();
    assert_eq!(names, vec!["patches.lock"]);
    fx.ok(&["verify"]);
}

#[test]
fn a_patched_file_deleted_upstream_is_a_conflict_naming_it() {
    let fx = Fx::new();
    one_patch(&fx);
    let (pin, _) = fx.new_upstream("deleted", |d| {
        std::fs::remove_file(d.join("src/main.c")).unwrap()
    });
    let v = rebase(&fx, &pin, &[], 1);
    let f = &v["patches"][0]["files"][0];
    assert_eq!(f["result"], "conflict");
    assert_eq!(
        f["detail"],
        "upstream deleted src/main.c, which the patch changes"
    );
}

#[test]
fn an_upstream_rename_is_followed_and_reported() {
    let fx = Fx::new();
    one_patch(&fx);
    let (pin, _) = fx.new_upstream("renamed", |d| {
        std::fs::rename(d.join("src/main.c"), d.join("src/entry.c")).unwrap();
    });
    let v = rebase(&fx, &pin, &[], 0);
    let p = &v["patches"][0];
    assert_eq!(p["outcome"], "merged", "{v:#}");
    assert_eq!(p["files"][0]["path"], "src/entry.c");
    assert_eq!(
        p["files"][0]["detail"],
        "followed upstream rename src/main.c → src/entry.c"
    );
    fx.ok(&["verify"]);
    let patch = std::fs::read_to_string(fx.patches().join("0001-change-main.patch")).unwrap();
    assert!(
        patch.contains("diff --git a/src/entry.c b/src/entry.c"),
        "{patch}"
    );
}

#[test]
fn an_interrupted_rebase_leaves_the_repository_as_before_or_rolls_forward() {
    let fx = Fx::new();
    one_patch(&fx);
    let (pin, tree) = fx.new_upstream("far", |d| {
        edit_main(d, "main line 2\n", "main line 2 upstream\n")
    });
    let before = (manifest(&fx), fx.patches_snapshot());
    let args = ["rebase", "--to", pin.to_str().unwrap()];
    for point in ["rebase-before-write", "series-before-swap"] {
        fx.kill_at(&args, point);
        assert_eq!((manifest(&fx), fx.patches_snapshot()), before, "{point}");
        fx.ok(&["verify"]);
    }
    // Killed between the two renames: read-only commands read the new pin
    // as written and change nothing; the next command that writes rolls it
    // forward.
    fx.kill_at(&args, "series-after-swap");
    let out = fx.run(&["verify"]);
    assert_eq!(out.code, 0, "{}", out.dump("verify with a pending write"));
    assert!(
        out.stderr.contains("interrupted series write"),
        "{}",
        out.stderr
    );
    assert!(!manifest(&fx).contains(&tree), "verify moved the manifest");
    let st: serde_json::Value = serde_json::from_str(&fx.ok(&["status", "--json"])).unwrap();
    assert_eq!(st["pin"]["tree"], tree.as_str());
    assert!(!manifest(&fx).contains(&tree), "status moved the manifest");
    fx.ok(&["apply", "--dry-run"]);
    assert!(
        !manifest(&fx).contains(&tree),
        "a dry run moved the manifest"
    );
    let out = fx.run(&["apply"]);
    assert_eq!(out.code, 0, "{}", out.dump("apply after the pending write"));
    assert!(
        out.stderr.contains("finished an interrupted series write"),
        "{}",
        out.stderr
    );
    assert!(manifest(&fx).contains(&tree));
}
