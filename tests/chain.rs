//! The chain on a synthetic upstream: vendor, edit/export round trips,
//! verify's checks (lock, markers, ownership), `--upto`.

use crate::harness::*;

fn main_change(stack: &std::path::Path, marker: &str) {
    let p = stack.join("src/main.c");
    let text = std::fs::read_to_string(&p).unwrap();
    let text = text.replace(
        "main line 10\n",
        &format!("main line 10 changed // {marker}\n"),
    );
    std::fs::write(p, text).unwrap();
}

#[test]
fn vendor_hashes_the_tree_and_caches_it() {
    let fx = Fx::new();
    // A dry run names the sources it would try and fetches nothing.
    let v: serde_json::Value =
        serde_json::from_str(&fx.ok(&["vendor", "--dry-run", "--json"])).unwrap();
    assert_eq!(v["cached"], false);
    assert!(
        v["source"].as_str().unwrap_or("").starts_with("would try "),
        "{v}"
    );
    let st: serde_json::Value = serde_json::from_str(&fx.ok(&["status", "--json"])).unwrap();
    assert_eq!(st["vendored"], false, "vendor --dry-run vendored");
    let out = fx.ok(&["vendor", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tree"], fx.tree.as_str());
    assert_eq!(v["cached"], false);
    assert_eq!(v["files"], 11);
    let out = fx.ok(&["vendor", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cached"], true);
    let v: serde_json::Value =
        serde_json::from_str(&fx.ok(&["vendor", "--dry-run", "--json"])).unwrap();
    assert_eq!(v["cached"], true);
    let st = fx.ok(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&st).unwrap();
    assert_eq!(v["vendored"], true);
    assert_eq!(v["workdir"]["state"], "absent");
}

#[test]
fn edit_export_round_trips_byte_identically_with_crlf_and_no_eol() {
    let fx = Fx::new();
    fx.commit_patch("Touch every kind of file\n\nBody text.", |s| {
        main_change(s, "polykv: 0001");
        std::fs::write(
            s.join("docs/crlf.txt"),
            "one\r\ntwo polykv: 0001\r\nthree\r\nfour\r\n",
        )
        .unwrap();
        std::fs::write(s.join("data/noeol.txt"), "alpha\nbeta polykv: 0001\ngamma").unwrap();
        std::fs::write(s.join("src/new.c"), "// polykv: 0001 new file\nint x;\n").unwrap();
    });
    let names: Vec<String> = fx.patches_snapshot().into_iter().map(|p| p.0).collect();
    assert_eq!(
        names,
        vec!["0001-touch-every-kind-of-file.patch", "patches.lock"]
    );
    let patch = std::fs::read(fx.patches().join("0001-touch-every-kind-of-file.patch")).unwrap();
    assert!(
        patch.windows(5).any(|w| w == b"two\r\n"),
        "CRLF kept in the patch"
    );
    let nl = b"\\ No newline at end of file\n";
    assert!(patch.windows(nl.len()).any(|w| w == nl));
    let v: serde_json::Value = serde_json::from_str(&fx.ok(&["verify", "--json"])).unwrap();
    assert_eq!(v["ok"], true, "{v:#}");
    assert_eq!(v["base_tree"], fx.tree.as_str());

    let before = fx.patches_snapshot();
    fx.ok(&["edit", "--force"]);
    fx.ok(&["export"]);
    assert_eq!(
        fx.patches_snapshot(),
        before,
        "edit + export must be byte-identical"
    );

    fx.ok(&["apply"]);
    assert_eq!(
        std::fs::read(fx.workdir().join("docs/crlf.txt")).unwrap(),
        b"one\r\ntwo polykv: 0001\r\nthree\r\nfour\r\n"
    );
    assert_eq!(
        std::fs::read(fx.workdir().join("data/noeol.txt")).unwrap(),
        b"alpha\nbeta polykv: 0001\ngamma"
    );
}

#[test]
fn a_second_commit_becomes_patch_0002_and_upto_stops_early() {
    let fx = Fx::new();
    fx.commit_patch("First", |s| main_change(s, "polykv: 0001"));
    fx.commit_patch("Second change", |s| {
        std::fs::write(
            s.join("src/util.h"),
            numbered("util", 12).replace("util line 3\n", "util line 3 // polykv: 0002\n"),
        )
        .unwrap();
    });
    let names: Vec<String> = fx.patches_snapshot().into_iter().map(|p| p.0).collect();
    assert_eq!(
        names,
        vec![
            "0001-first.patch",
            "0002-second-change.patch",
            "patches.lock"
        ]
    );
    fx.ok(&["verify"]);
    fx.ok(&["apply", "--upto", "0001"]);
    assert!(!std::fs::read_to_string(fx.workdir().join("src/util.h"))
        .unwrap()
        .contains("0002"));
    fx.ok(&["apply"]);
    assert!(std::fs::read_to_string(fx.workdir().join("src/util.h"))
        .unwrap()
        .contains("0002"));
    fx.fails(&["apply", "--upto", "0009"], 2);
    // Under the global --json the error is one JSON document on stdout.
    let o = fx.run(&["apply", "--upto", "0009", "--json"]);
    assert_eq!(o.code, 2, "{}", o.dump("apply --json"));
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["kind"], "environment");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("0009"),
        "{v}"
    );
    let o = fx.run(&["--json", "apply", "--no-such-flag"]);
    assert_eq!(o.code, 2, "{}", o.dump("usage --json"));
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "usage");
}

#[test]
fn export_refuses_a_stack_on_another_base_and_a_dirty_stack() {
    let fx = Fx::new();
    fx.ok(&["edit"]);
    let s = fx.stack();
    main_change(&s, "polykv: 0001");
    let out = fx.fails(&["export"], 2);
    assert!(out.contains("uncommitted changes"), "{out}");
    assert!(out.contains("modified: \"src/main.c\""), "{out}");
    // A new file not added to a commit is refused too, not silently dropped.
    fx.git(&s, &["checkout", "-q", "--", "src/main.c"]);
    std::fs::write(s.join("src/forgotten.c"), "// polykv: 0001\n").unwrap();
    let out = fx.fails(&["export"], 2);
    assert!(out.contains("untracked: \"src/forgotten.c\""), "{out}");
    std::fs::remove_file(s.join("src/forgotten.c")).unwrap();
    main_change(&s, "polykv: 0001");
    fx.git(&s, &["checkout", "-q", "--orphan", "other"]);
    fx.git(&s, &["add", "-A"]);
    fx.git(&s, &["commit", "-q", "-m", "not the pin"]);
    let before = fx.patches_snapshot();
    let out = fx.fails(&["export"], 2);
    assert!(out.contains("not the pinned tree"), "{out}");
    assert_eq!(fx.patches_snapshot(), before);
}

#[test]
fn edited_patch_or_stale_lock_is_caught() {
    let fx = Fx::new();
    fx.commit_patch("First", |s| main_change(s, "polykv: 0001"));
    let lock = fx.patches().join("patches.lock");
    let text = std::fs::read_to_string(&lock).unwrap();
    let tree = text
        .lines()
        .last()
        .unwrap()
        .split(' ')
        .nth(2)
        .unwrap()
        .to_string();
    std::fs::write(&lock, text.replace(&tree, &"a".repeat(40))).unwrap();
    let out = fx.fails(&["verify"], 1);
    assert!(
        out.contains("FAIL  lock") && out.contains("the lock says"),
        "{out}"
    );
    std::fs::write(&lock, &text).unwrap();
    // An edited description changes the sha256 but still applies.
    let p = fx.patches().join("0001-first.patch");
    let body = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, body.replacen("First", "First (edited)", 1)).unwrap();
    let out = fx.fails(&["verify", "--json"], 1);
    assert!(out.contains("changed since the lock was written"), "{out}");
}

#[test]
fn markers_are_required_and_must_name_chain_patches() {
    let fx = Fx::new();
    fx.commit_patch("No marker", |s| main_change(s, "no marker here"));
    // export verifies the series it writes: the missing marker is reported
    // (the series is written anyway, to be fixed), in text and in JSON.
    let out = fx.ok(&["export"]);
    assert!(
        out.contains("verify will fail until these are fixed"),
        "{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&fx.ok(&["export", "--dry-run", "--json"])).unwrap();
    assert!(
        v["problems"][0]
            .as_str()
            .unwrap_or("")
            .contains("without a `polykv: 0001` marker"),
        "{v}"
    );
    let out = fx.fails(&["verify"], 1);
    assert!(
        out.contains("src/main.c: hunk `@@ -7,7 +7,7 @@ main line 6` adds lines to an upstream file without a `polykv: 0001` marker"),
        "{out}"
    );
    // An exemption with a reason makes it pass.
    std::fs::write(
        fx.patches().join("markers.toml"),
        "[[exempt]]\npatch = \"0001\"\npath = \"src/main.c\"\nreason = \"test\"\n",
    )
    .unwrap();
    fx.ok(&["verify"]);

    let fx = Fx::new();
    fx.commit_patch("Wrong number", |s| main_change(s, "polykv: 0007"));
    let out = fx.fails(&["verify"], 1);
    assert!(
        out.contains("marker `polykv: 0007` names no patch of the chain"),
        "{out}"
    );

    let fx = Fx::new();
    fx.commit_patch("New file without header", |s| {
        std::fs::write(s.join("src/added.c"), "int y;\n").unwrap();
    });
    let out = fx.fails(&["verify"], 1);
    assert!(out.contains("new file src/added.c lacks a header"), "{out}");
}

#[test]
fn ownership_rules() {
    let fx = Fx::new();
    fx.commit_patch("Drop old", |s| {
        std::fs::remove_file(s.join("src/old.c")).unwrap()
    });
    let out = fx.fails(&["verify"], 1);
    assert!(out.contains("deletes the upstream file src/old.c"), "{out}");
    std::fs::write(
        fx.patches().join("ownership.toml"),
        "[[allow]]\npatch = \"0001\"\npath = \"src/old.c\"\naction = \"delete\"\nreason = \"replaced\"\n",
    )
    .unwrap();
    fx.ok(&["verify"]);

    let fx = Fx::new();
    fx.commit_patch("Create", |s| {
        std::fs::write(s.join("src/n.c"), "// polykv: 0001\n").unwrap()
    });
    fx.commit_patch("Remove", |s| {
        std::fs::remove_file(s.join("src/n.c")).unwrap()
    });
    fx.commit_patch("Create again", |s| {
        std::fs::write(s.join("src/n.c"), "// polykv: 0003\n").unwrap()
    });
    let out = fx.fails(&["verify"], 1);
    assert!(
        out.contains("src/n.c: created by 0001-create.patch and again by 0003-create-again.patch"),
        "{out}"
    );
}

/// A generated file travels in a patch: `gen` writes it into the stack,
/// `verify` and `gen --check` pass only while the chain carries exactly what
/// the generator writes, and a hand edit is caught.
#[test]
fn generated_files_are_checked_against_their_generator() {
    let fx = Fx::new();
    fx.commit_patch("First", |s| main_change(s, "polykv: 0001"));
    std::fs::write(
        fx.patches().join("generated.toml"),
        "[[file]]\npath = \"src/turbo-tables.h\"\ngenerator = \"turbo-tables\"\n",
    )
    .unwrap();
    let out = fx.fails(&["gen", "--check"], 1);
    assert!(out.contains("missing from the patched tree"), "{out}");
    fx.fails(&["verify"], 1);

    // A dry run of edit checks the chain and writes no stack; gen's writes nothing.
    std::fs::remove_dir_all(fx.stack()).ok();
    let out = fx.ok(&["edit", "--dry-run"]);
    assert!(out.contains("would create"), "{out}");
    assert!(!fx.stack().exists(), "edit --dry-run wrote a stack");
    // gen writes into the stack; committed as patch 0002 it verifies.
    fx.ok(&["edit", "--force"]);
    let out = fx.ok(&["gen", "--dry-run"]);
    assert!(out.contains("would write"), "{out}");
    assert!(
        !fx.stack().join("src/turbo-tables.h").exists(),
        "gen --dry-run wrote"
    );
    let out = fx.ok(&["gen"]);
    assert!(out.contains("wrote"), "{out}");
    let stack = fx.stack();
    let text = std::fs::read_to_string(stack.join("src/turbo-tables.h")).unwrap();
    assert!(text.starts_with("// Generated by `polykv-forge gen`"));
    fx.git(&stack, &["add", "-A"]);
    fx.git(&stack, &["commit", "-q", "-m", "Turbo tables"]);
    fx.ok(&["export"]);
    fx.ok(&["verify"]);
    fx.ok(&["gen", "--check"]);
    // Running gen again changes nothing.
    assert!(fx.ok(&["gen"]).contains("unchanged"));

    // A hand edit of the generated file is caught by both.
    fx.commit_patch("Hand edit", |s| {
        let p = s.join("src/turbo-tables.h");
        let t = std::fs::read_to_string(&p)
            .unwrap()
            .replacen("1.", "2.", 1)
            .replace("// polykv: 0002", "// polykv: 0002 polykv: 0003");
        std::fs::write(p, t).unwrap();
    });
    let out = fx.fails(&["gen", "--check"], 1);
    assert!(
        out.contains("differs from what generator `turbo-tables` produces"),
        "{out}"
    );
    let out = fx.fails(&["verify"], 1);
    assert!(out.contains("generated"), "{out}");
}

/// Instance families: `gen` expands a family file of `kernels/` into one
/// instance file per pair plus the case and CMake lists; `gen --check`
/// catches a missing file, a stale list and an instance no family declares
/// any more, and a bad family file is refused with its reason.
#[test]
fn instance_families_are_generated_and_checked() {
    let fx = Fx::new();
    fx.commit_patch("First", |s| main_change(s, "polykv: 0001"));
    let family = |k: &str| {
        format!(
            "schema = 1\n[[family]]\nname = \"t\"\nk = [\"{k}\"]\nv = [\"turbo3\"]\nhead_dims = [128, 512]\nbackends = [\"cuda\"]\n"
        )
    };
    std::fs::create_dir_all(fx.root.join("kernels")).unwrap();
    std::fs::write(fx.root.join("kernels/fattn-vec.toml"), family("turbo3")).unwrap();
    std::fs::write(
        fx.patches().join("generated.toml"),
        "[[families]]\npath = \"kernels/fattn-vec.toml\"\nbackend = \"cuda\"\npatch = \"0002\"\n",
    )
    .unwrap();
    let out = fx.fails(&["gen", "--check"], 1);
    assert!(
        out.contains("fattn-vec-instance-turbo3-turbo3.cu: declared as generated"),
        "{out}"
    );

    fx.ok(&["edit", "--force"]);
    fx.ok(&["gen"]);
    let stack = fx.stack();
    let inst = "ggml/src/ggml-cuda/template-instances/fattn-vec-instance-turbo3-turbo3.cu";
    let text = std::fs::read_to_string(stack.join(inst)).unwrap();
    assert!(
        text.contains("DECL_FATTN_VEC_CASE(512, GGML_TYPE_TURBO3, GGML_TYPE_TURBO3);"),
        "{text}"
    );
    fx.git(&stack, &["add", "-A"]);
    fx.git(&stack, &["commit", "-q", "-m", "Instances"]);
    fx.ok(&["export"]);
    fx.ok(&["verify"]);
    fx.ok(&["gen", "--check"]);
    // A dry export of an unchanged fresh stack finds what verify finds:
    // nothing (it staged outside the project and lost kernels/, #39 item 7).
    fx.ok(&["edit", "--force"]);
    let o = fx.run(&["export", "--dry-run"]);
    assert_eq!(o.code, 0, "{}", o.dump("export --dry-run"));
    let all = format!("{}{}", o.stdout, o.stderr);
    assert!(
        !all.contains("verify will fail") && !all.contains("No such file"),
        "{all}"
    );

    // The family changes: the new pair is missing, the lists differ, the old
    // instance is left over.
    std::fs::write(fx.root.join("kernels/fattn-vec.toml"), family("turbo4")).unwrap();
    let out = fx.fails(&["gen", "--check"], 1);
    assert!(
        out.contains("fattn-vec-instance-turbo4-turbo3.cu: declared as generated"),
        "{out}"
    );
    assert!(out.contains("fattn-vec-polykv.h: differs"), "{out}");
    assert!(
        out.contains(&format!(
            "{inst}: a flash-attention instance no family declares"
        )),
        "{out}"
    );

    // A family file the generator cannot honour is refused, naming why.
    std::fs::write(fx.root.join("kernels/fattn-vec.toml"), family("turbo3_g64")).unwrap();
    let out = fx.fails(&["gen", "--check"], 2);
    assert!(
        out.contains("only used for heads 128 does not divide"),
        "{out}"
    );
}
