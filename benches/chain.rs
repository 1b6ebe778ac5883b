//! Benchmark of the chain on the real pinned tree (warm cache): a generated
//! series of 10 patches touching ~100 files; `verify` and `apply` timed side
//! by side with `git apply` of the same patches in the same run.
//!
//! `cargo bench --bench chain` (prints a Markdown table; needs the pinned
//! upstream in the cache or reachable through its sources).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_polykv-forge");
const PATCHES: usize = 10;
const FILES_PER_PATCH: usize = 10;

fn run(cmd: &mut Command) -> String {
    let o = cmd.output().expect("spawn");
    assert!(
        o.status.success(),
        "{:?}: {}\n{}",
        cmd,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn forge(project: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--project")
        .arg(project)
        .args(args)
        .env("POLYKV_FORGE_NO_PROGRESS", "1");
    c
}

fn git(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
        .args(args);
    c
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn time(n: usize, mut f: impl FnMut()) -> f64 {
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let project = tmp.path().join("project");
    std::fs::create_dir_all(project.join("patches")).unwrap();
    std::fs::copy(
        root.join("vendor-manifest.toml"),
        project.join("vendor-manifest.toml"),
    )
    .unwrap();
    run(&mut forge(&project, &["vendor"]));

    // A stack of 10 commits, each inserting a marked line into 10 C/C++ files.
    run(&mut forge(&project, &["edit"]));
    let stack = project.join("work/edit");
    let listed = run(&mut git(
        &stack,
        &[
            "ls-files",
            "ggml/src/*.c",
            "ggml/src/*.cpp",
            "src/*.cpp",
            "common/*.cpp",
            "tools/*.cpp",
        ],
    ));
    let files: Vec<&str> = listed.lines().take(PATCHES * FILES_PER_PATCH).collect();
    assert_eq!(
        files.len(),
        PATCHES * FILES_PER_PATCH,
        "not enough files to patch"
    );
    for k in 0..PATCHES {
        for f in &files[k * FILES_PER_PATCH..(k + 1) * FILES_PER_PATCH] {
            let p = stack.join(f);
            let text = std::fs::read_to_string(&p).unwrap();
            let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
            let at = lines.len().min(20);
            let marker = format!("// polykv: {:04} bench hook\n", k + 1);
            lines.insert(at, &marker);
            std::fs::write(&p, lines.concat()).unwrap();
        }
        run(&mut git(
            &stack,
            &["commit", "-qam", &format!("Bench patch {}", k + 1)],
        ));
    }
    run(&mut forge(&project, &["export"]));
    let patches: Vec<PathBuf> = {
        let mut v: Vec<PathBuf> = std::fs::read_dir(project.join("patches"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "patch"))
            .collect();
        v.sort();
        v
    };
    let touched: usize = PATCHES * FILES_PER_PATCH;

    // polykv-forge verify (strict apply + lock + reverse + re-export + ownership + markers).
    let verify = time(5, || {
        run(&mut forge(&project, &["verify"]));
    });
    // apply into a fresh workdir, then a no-op re-apply.
    let mut n = 0;
    let apply_fresh = time(3, || {
        n += 1;
        let wd = tmp.path().join(format!("wd{n}"));
        run(&mut forge(
            &project,
            &["apply", "--workdir", wd.to_str().unwrap()],
        ));
    });
    let wd = tmp.path().join("wd1");
    let out = run(&mut forge(
        &project,
        &["apply", "--json", "--workdir", wd.to_str().unwrap()],
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["already"], true);
    let apply_noop = time(5, || {
        run(&mut forge(
            &project,
            &["apply", "--workdir", wd.to_str().unwrap()],
        ));
    });
    let written_noop = {
        let out = run(&mut forge(
            &project,
            &["apply", "--json", "--workdir", wd.to_str().unwrap()],
        ));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["written"].as_u64().unwrap_or(0)
    };

    // git apply of the same patches onto a pristine copy of the base, each run.
    // The pristine base: the stack's root commit, checked out.
    let pristine = tmp.path().join("pristine");
    run(Command::new("git")
        .args(["clone", "-q", "--no-checkout"])
        .arg(&stack)
        .arg(&pristine));
    run(&mut git(
        &pristine,
        &["checkout", "-q", "refs/remotes/origin/polykv~10"],
    ));
    // Copies are made before the clock starts; only the git apply calls are timed.
    let copies: Vec<PathBuf> = (0..3)
        .map(|i| {
            let dir = tmp.path().join(format!("g{i}"));
            run(Command::new("cp").arg("-a").arg(&pristine).arg(&dir));
            dir
        })
        .collect();
    let git_apply = median(
        copies
            .iter()
            .map(|dir| {
                let t = Instant::now();
                for p in &patches {
                    run(git(dir, &["apply", "--whitespace=nowarn"]).arg(p));
                }
                t.elapsed().as_secs_f64()
            })
            .collect(),
    );

    println!("| measure | seconds | vs `git apply` |");
    println!("|---|---|---|");
    println!("| `git apply` of the {PATCHES} patches ({touched} files), one call per patch | {git_apply:.3} | 1.00x |");
    println!("| `polykv-forge verify` (apply, lock, reverse, re-export, ownership, markers) | {verify:.3} | {:.2}x |", verify / git_apply);
    println!("| `polykv-forge apply` into a fresh workdir (3,665+ files written) | {apply_fresh:.3} | {:.2}x |", apply_fresh / git_apply);
    println!("| `polykv-forge apply` again (no-op; files written: {written_noop}) | {apply_noop:.3} | {:.2}x |", apply_noop / git_apply);
    assert_eq!(written_noop, 0);
}
