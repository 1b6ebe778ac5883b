//! `build` and `gate` on the synthetic upstream's tiny CMake project: the
//! manifest, the no-op rebuild, tampered and stale artifacts refused by
//! `build --check` and by `gate run`, skipped gates.

use crate::harness::*;

fn have(tool: &str) -> bool {
    std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

const GATE: &str = r#"
name = "answer"
description = "the synthetic tool prints the answer"
binaries = ["llama-completion"]
run = [["{bin:llama-completion}"]]

[[figures]]
name = "answer"
regex = 'answer=([0-9]+)'

[min]
answer = 42

[max]
answer = 42
"#;

/// The same figure held to a committed baseline instead of fixed thresholds.
const HELD: &str = r#"
name = "held"
description = "the answer may not grow past its baseline"
binaries = ["llama-completion"]
run = [["{bin:llama-completion}"]]

[[figures]]
name = "answer"
regex = 'answer=([0-9]+)'

[baseline]
answer = { better = "lower", margin = 0.0 }
"#;

const NEEDS_MODEL: &str = r#"
name = "needs-model"
description = "a gate whose model is not fetched"
models = ["absent"]
run = [["true"]]
"#;

#[test]
fn build_manifest_check_tamper_and_gates() {
    if !have("cmake") || !have("ninja") {
        // CI installs them (ci/prereqs): there a missing tool is a failure, not a skip.
        assert!(
            std::env::var_os("CI").is_none(),
            "cmake and ninja are needed under CI=true (ci/prereqs installs them)"
        );
        eprintln!("skipped: cmake and ninja are needed (ci/prereqs installs them)");
        return;
    }
    let fx = Fx::new();
    std::fs::create_dir_all(fx.root.join("gates")).unwrap();
    std::fs::write(fx.root.join("gates/answer.toml"), GATE).unwrap();
    std::fs::write(fx.root.join("gates/needs-model.toml"), NEEDS_MODEL).unwrap();
    std::fs::write(fx.root.join("gates/held.toml"), HELD).unwrap();
    let manifest = fx.root.join("vendor-manifest.toml");
    let mut m = std::fs::read_to_string(&manifest).unwrap();
    m.push_str(
        "\n[[models]]\nname = \"absent\"\nfile = \"absent.gguf\"\nsha256 = \"00\"\nparts = []\n",
    );
    std::fs::write(&manifest, m).unwrap();

    // Nothing built yet: the gate is skipped, and --require-all makes that a failure.
    let out = fx.fails(&["gate", "run", "answer"], 0);
    assert!(
        out.contains("skipped: the cpu variant is not built"),
        "{out}"
    );
    fx.fails(&["gate", "run", "answer", "--require-all"], 1);
    // The dry run says the same as a typed skip, and runs nothing.
    let v: serde_json::Value =
        serde_json::from_str(&fx.ok(&["gate", "run", "answer", "--dry-run", "--json"])).unwrap();
    assert_eq!(v[0]["plan"], "skip", "{v}");
    assert_eq!(v[0]["kind"], "not_built", "{v}");
    fx.fails(&["gate", "run", "answer", "--dry-run", "--require-all"], 1);

    // A build needs an applied workdir.
    let out = fx.fails(&["build", "--target", "llama-completion"], 2);
    assert!(out.contains("run `polykv-forge apply` first"), "{out}");
    fx.ok(&["apply"]);
    let v: serde_json::Value =
        serde_json::from_str(&fx.ok(&["build", "--target", "llama-completion", "--json"])).unwrap();
    assert_eq!(v["up_to_date"], false);
    let arts: Vec<String> = v["manifest"]["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["path"].as_str().unwrap().to_string())
        .collect();
    // The versioned library and both symlinks to it, as upstream lays them out.
    assert_eq!(
        arts,
        vec![
            "bin/libggml-cpu.so",
            "bin/libggml-cpu.so.0",
            "bin/libggml-cpu.so.0.1.0",
            "bin/llama-completion"
        ]
    );
    let v: serde_json::Value =
        serde_json::from_str(&fx.ok(&["build", "--target", "llama-completion", "--json"])).unwrap();
    assert_eq!(v["up_to_date"], true, "same key, artifacts intact: a no-op");
    fx.ok(&["build", "--check", "--target", "llama-completion"]);
    std::fs::remove_dir_all(fx.root.join("build/gates")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&fx.ok(&[
        "gate",
        "run",
        "answer",
        "needs-model",
        "--dry-run",
        "--json",
    ]))
    .unwrap();
    assert_eq!(v[0]["plan"], "run", "{v}");
    assert_eq!(v[0]["gate"], "answer", "{v}");
    assert!(
        v[0]["build_dir"].as_str().unwrap().ends_with("build/cpu"),
        "{v}"
    );
    assert_eq!(v[1]["kind"], "missing_model", "{v}");
    assert_eq!(v[1]["model"], "absent", "{v}");
    let out = fx.ok(&["gate", "run", "answer", "needs-model", "--dry-run"]);
    assert!(out.contains("gate answer: would run"), "{out}");
    assert!(
        out.contains("gate needs-model: would be skipped: model absent is not fetched"),
        "{out}"
    );
    assert!(
        !fx.root.join("build/gates").exists(),
        "a dry run writes nothing"
    );
    let out = fx.ok(&["gate", "run", "answer", "needs-model"]);
    assert!(out.contains("gate answer: passed"), "{out}");
    assert!(
        out.contains("skipped: model absent is not fetched"),
        "{out}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fx.root.join("build/gates/answer.json")).unwrap())
            .unwrap();
    assert_eq!(json["status"], "passed");
    assert_eq!(json["rows"][0]["figures"]["answer"], 42.0);

    // A held figure without a committed baseline fails; `gate baseline` commits one.
    let out = fx.fails(&["gate", "run", "held"], 1);
    assert!(out.contains("answer 42 > 0 (no baseline value)"), "{out}");
    let out = fx.ok(&["gate", "baseline", "held"]);
    assert!(out.contains("1 row(s) of held"), "{out}");
    // The stored result is judged again against the floors just committed.
    assert!(out.contains("judged against it: passed"), "{out}");
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fx.root.join("build/gates/held.json")).unwrap())
            .unwrap();
    assert_eq!(stored["status"], "passed");
    assert!(stored["notes"]
        .to_string()
        .contains("baseline committed from this run"));
    let b: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fx.root.join("gates/baselines/held.json")).unwrap())
            .unwrap();
    assert_eq!(b["rows"][0]["figures"]["answer"], 42.0);
    let out = fx.ok(&["gate", "run", "held"]);
    assert!(out.contains("gate held: passed"), "{out}");

    // One byte changed in libggml-cpu.so: refused by build --check and by gate run.
    let lib = fx.root.join("build/cpu/bin/libggml-cpu.so");
    let good = std::fs::read(&lib).unwrap();
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x01;
    std::fs::write(&lib, &bad).unwrap();
    let out = fx.fails(&["build", "--check"], 1);
    assert!(
        out.contains("bin/libggml-cpu.so: sha256") && out.contains("stale or foreign"),
        "{out}"
    );
    let out = fx.fails(&["gate", "run", "answer"], 1);
    assert!(
        out.contains("gate answer: FAILED") && out.contains("libggml-cpu.so"),
        "{out}"
    );
    std::fs::write(&lib, &good).unwrap();
    fx.ok(&["build", "--check"]);
    // A library swapped for a plain copy (the link replaced) is refused too.
    std::fs::remove_file(&lib).unwrap();
    std::fs::write(&lib, &good).unwrap();
    let out = fx.fails(&["build", "--check"], 1);
    assert!(
        out.contains("links to nothing (a plain file) instead of libggml-cpu.so.0"),
        "{out}"
    );
    std::fs::remove_file(&lib).unwrap();
    std::os::unix::fs::symlink("libggml-cpu.so.0", &lib).unwrap();
    fx.ok(&["build", "--check"]);
    // A hand-edited manifest with a short, non-ASCII key is a stale build, not a panic.
    let mpath = fx.root.join("build/cpu/forge-manifest.json");
    let mtext = std::fs::read_to_string(&mpath).unwrap();
    let mut mv: serde_json::Value = serde_json::from_str(&mtext).unwrap();
    mv["key"] = "é".into();
    std::fs::write(&mpath, serde_json::to_string(&mv).unwrap()).unwrap();
    let out = fx.fails(&["build", "--check"], 1);
    assert!(
        out.contains("with key é…") && out.contains("stale"),
        "{out}"
    );
    std::fs::write(&mpath, mtext).unwrap();
    fx.ok(&["build", "--check"]);

    // A new patch: the build no longer matches the chain.
    fx.commit_patch("Change the answer", |s| {
        std::fs::write(
            s.join("src/lib.c"),
            "int answer(void) { return 43; } // polykv: 0001\n",
        )
        .unwrap();
    });
    fx.ok(&["apply"]);
    let out = fx.fails(&["build", "--check"], 1);
    assert!(out.contains("the build is stale"), "{out}");
    fx.fails(&["gate", "run", "answer"], 1);
    fx.ok(&["build", "--target", "llama-completion"]);
    let out = fx.fails(&["gate", "run", "answer"], 1);
    assert!(out.contains("FAIL (answer 43 > 42)"), "{out}");
    // The baseline catches the regression, and the report lists it first.
    let out = fx.fails(&["gate", "run", "held"], 1);
    assert!(out.contains("FAIL (answer 43 > 42 (baseline 42))"), "{out}");
    let report = fx.ok(&["gate", "report"]);
    assert!(
        report.contains("**Regressions against the committed baselines** (1)")
            && report.contains("- held -/-: answer 43 > 42 (baseline 42)"),
        "{report}"
    );
    // A result of another applied tree is refused by the report, or marked stale.
    let r = fx.root.join("build/gates/answer.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&r).unwrap()).unwrap();
    v["tree"] = "0".repeat(40).into();
    std::fs::write(&r, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = fx.fails(&["gate", "report"], 1);
    assert!(out.contains("measured on another applied tree"), "{out}");
    let report = fx.ok(&["gate", "report", "--allow-stale"]);
    assert!(
        report.contains("stale: measured on applied tree `0000"),
        "{report}"
    );
}

#[test]
fn dry_runs_print_complete_commands_on_any_machine() {
    let fx = Fx::new();
    let out = fx.ok(&["build", "--cuda", "--dry-run", "--cuda-arch", "90"]);
    for want in [
        "cmake -S",
        "-DGGML_CUDA=ON",
        "-DGGML_BACKEND_DL=ON",
        "-DBUILD_SHARED_LIBS=ON",
        "-DCMAKE_CUDA_ARCHITECTURES=90",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "ninja -C",
        "cache key",
    ] {
        assert!(out.contains(want), "{want} missing in:\n{out}");
    }
    // The toolkit `toolkit cuda --cache X` installs is the one `build --cuda --cache X` uses.
    let home = fx.cache.join("toolkits/cuda-13.0");
    std::fs::create_dir_all(home.join("bin")).unwrap();
    std::fs::write(
        home.join("bin/nvcc"),
        "#!/bin/sh\necho 'Cuda compilation tools, release 13.0'\n",
    )
    .unwrap();
    std::fs::write(home.join(".complete"), "").unwrap();
    let o = Out::from(
        fx.cmd(&["build", "--cuda", "--dry-run", "--cuda-arch", "90"])
            .env("PATH", "/usr/bin:/bin")
            .env_remove("CUDA_HOME")
            .env_remove("CUDA_PATH")
            .output()
            .unwrap(),
    );
    assert_eq!(o.code, 0, "{}", o.dump("build --cuda --dry-run"));
    let nvcc = format!("-DCMAKE_CUDA_COMPILER={}", home.join("bin/nvcc").display());
    assert!(o.stdout.contains(&nvcc), "{nvcc} missing in:\n{}", o.stdout);
    let out = fx.ok(&["build", "--metal", "--dry-run"]);
    assert!(
        out.contains("-DGGML_METAL=ON") && out.contains("-DGGML_METAL_EMBED_LIBRARY=ON"),
        "{out}"
    );
    if !cfg!(target_os = "macos") {
        assert!(out.contains("only on macOS"), "{out}");
        let err = fx.fails(&["build", "--metal"], 2);
        assert!(
            err.contains("cannot build the metal variant on this machine"),
            "{err}"
        );
    }
}
