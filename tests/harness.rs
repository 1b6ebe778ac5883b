//! A project in a temporary directory with a synthetic upstream, a private
//! cache, and helpers that run the built binary and print everything on failure.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_polykv-forge");

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn from(o: Output) -> Out {
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
    pub fn dump(&self, what: &str) -> String {
        format!(
            "{what}: exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Deterministic environment for git and the tool.
pub fn env_cmd(program: &str, home: &Path) -> Command {
    let mut c = Command::new(program);
    c.env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .env("GIT_AUTHOR_DATE", "2000-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2000-01-01T00:00:00Z")
        .env("TZ", "UTC")
        .env("LC_ALL", "C")
        .env("POLYKV_FORGE_NO_PROGRESS", "1")
        .env_remove("POLYKV_FORGE_SOURCE")
        .env_remove("POLYKV_FORGE_FAILPOINT")
        .env_remove("POLYKV_FORGE_PROJECT")
        .env_remove("POLYKV_FORGE_CACHE");
    c
}

pub struct Fx {
    pub tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub cache: PathBuf,
    pub upstream: PathBuf,
    pub home: PathBuf,
    pub tree: String,
}

/// (name, bytes) of every file directly in `dir`, sorted.
pub fn snapshot_dir(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
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
}

/// (path, bytes) of everything below `dir`, directories (`<dir>`) and
/// `.git` included, links not followed (`<link>`), sorted.
pub fn tree_snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    walkdir::WalkDir::new(dir)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .map(|e| {
            let e = e.unwrap();
            let ft = e.file_type();
            let data = if ft.is_file() {
                std::fs::read(e.path()).unwrap()
            } else if ft.is_dir() {
                b"<dir>".to_vec()
            } else {
                b"<link>".to_vec()
            };
            (
                e.path().strip_prefix(dir).unwrap().display().to_string(),
                data,
            )
        })
        .collect()
}

/// A copy of a project's manifest and patches/ in `dest`.
pub fn copy_project(root: &Path, dest: &Path) {
    std::fs::create_dir_all(dest.join("patches")).unwrap();
    std::fs::copy(
        root.join("vendor-manifest.toml"),
        dest.join("vendor-manifest.toml"),
    )
    .unwrap();
    for e in std::fs::read_dir(root.join("patches")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dest.join("patches").join(e.file_name())).unwrap();
    }
}

/// 40 distinct lines, so hunks have unambiguous context.
pub fn numbered(prefix: &str, n: usize) -> String {
    (1..=n).map(|i| format!("{prefix} line {i}\n")).collect()
}

/// Runs git in `dir` with the deterministic environment; asserts success.
pub fn git(home: &Path, dir: &Path, args: &[&str]) -> String {
    let o = env_cmd("git", home)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The git tree id of a directory, by git itself (an independent check).
pub fn git_tree_id(dir: &Path, home: &Path) -> String {
    let scratch = tempfile::tempdir().unwrap();
    let gd = scratch.path().to_str().unwrap();
    git(home, dir, &["init", "-q", "--bare", gd]);
    let with = |args: &[&str]| {
        let mut a = vec!["--git-dir", gd, "--work-tree", "."];
        a.extend_from_slice(args);
        git(home, dir, &a)
    };
    with(&["-c", "core.autocrlf=false", "add", "-A", "-f", "."]);
    with(&["write-tree"]).trim().to_string()
}

impl Fx {
    pub fn new() -> Fx {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("project");
        let cache = tmp.path().join("cache");
        let upstream = tmp.path().join("upstream");
        let home = tmp.path().join("home");
        std::fs::create_dir_all(root.join("patches")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(upstream.join("src")).unwrap();
        std::fs::create_dir_all(upstream.join("docs")).unwrap();
        std::fs::create_dir_all(upstream.join("data")).unwrap();
        std::fs::create_dir_all(upstream.join("scripts")).unwrap();
        std::fs::write(upstream.join("src/main.c"), numbered("main", 40)).unwrap();
        std::fs::write(upstream.join("src/util.h"), numbered("util", 12)).unwrap();
        std::fs::write(upstream.join("src/old.c"), numbered("old", 10)).unwrap();
        std::fs::write(
            upstream.join("docs/crlf.txt"),
            "one\r\ntwo\r\nthree\r\nfour\r\n",
        )
        .unwrap();
        std::fs::write(upstream.join("data/noeol.txt"), "alpha\nbeta\ngamma").unwrap();
        std::fs::write(upstream.join("data/blob.bin"), b"\x00\x01\x02binary\x00").unwrap();
        std::fs::write(upstream.join("scripts/run.sh"), "#!/bin/sh\necho hi\n").unwrap();
        std::fs::set_permissions(
            upstream.join("scripts/run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("src", upstream.join("link")).unwrap();
        // A tiny CMake project, so `build` can run for real in tests.
        std::fs::write(upstream.join("CMakeLists.txt"), CMAKE).unwrap();
        std::fs::write(
            upstream.join("src/lib.c"),
            "int answer(void) { return 42; }\n",
        )
        .unwrap();
        std::fs::write(
            upstream.join("src/tool.c"),
            "#include <stdio.h>\nint answer(void);\nint main(void) { printf(\"answer=%d\\n\", answer()); return 0; }\n",
        )
        .unwrap();
        let tree = git_tree_id(&upstream, &home);
        let fx = Fx {
            tmp,
            root,
            cache,
            upstream,
            home,
            tree,
        };
        fx.write_manifest(
            &fx.tree.clone(),
            "[[upstream.sources]]\nkind = \"dir\"\npath = \"../upstream\"\n",
        );
        fx
    }

    pub fn write_manifest(&self, tree: &str, sources: &str) {
        let text = format!(
            "[upstream]\nname = \"synthetic\"\ncommit = \"{}\"\ntree = \"{tree}\"\n\n{sources}",
            "0".repeat(40)
        );
        std::fs::write(self.root.join("vendor-manifest.toml"), text).unwrap();
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = env_cmd(BIN, &self.home);
        c.arg("--project")
            .arg(&self.root)
            .arg("--cache")
            .arg(&self.cache)
            .args(args)
            .current_dir(&self.root);
        c
    }

    pub fn run(&self, args: &[&str]) -> Out {
        Out::from(self.cmd(args).output().unwrap())
    }

    /// Runs and asserts exit 0; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert_eq!(o.code, 0, "{}", o.dump(&format!("{args:?}")));
        o.stdout
    }

    /// Runs and asserts the exit code; returns stdout + stderr.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        let o = self.run(args);
        assert_eq!(o.code, code, "{}", o.dump(&format!("{args:?}")));
        format!("{}{}", o.stdout, o.stderr)
    }

    pub fn patches(&self) -> PathBuf {
        self.root.join("patches")
    }

    pub fn workdir(&self) -> PathBuf {
        self.root.join("work/llama.cpp")
    }

    pub fn stack(&self) -> PathBuf {
        self.root.join("work/edit")
    }

    pub fn git(&self, dir: &Path, args: &[&str]) -> String {
        git(&self.home, dir, args)
    }

    /// `edit --force`, change the stack with `f`, commit with `msg`, `export`.
    pub fn commit_patch(&self, msg: &str, f: impl FnOnce(&Path)) {
        self.ok(&["edit", "--force"]);
        let stack = self.stack();
        f(&stack);
        self.git(&stack, &["add", "-A"]);
        self.git(&stack, &["commit", "-q", "-m", msg]);
        self.ok(&["export"]);
    }

    /// A new upstream: a copy of the current one changed by `f`, with a pin
    /// file (dir source) for `rebase --to`. Returns (pin file, tree id).
    pub fn new_upstream(&self, name: &str, f: impl FnOnce(&Path)) -> (PathBuf, String) {
        let dir = self.tmp.path().join(name);
        let o = std::process::Command::new("cp")
            .arg("-a")
            .arg(&self.upstream)
            .arg(&dir)
            .output()
            .unwrap();
        assert!(o.status.success());
        f(&dir);
        let tree = git_tree_id(&dir, &self.home);
        let pin = self.tmp.path().join(format!("{name}.toml"));
        std::fs::write(
            &pin,
            format!(
                "[upstream]\nname = \"synthetic\"\ncommit = \"{}\"\ntree = \"{tree}\"\n\n[[upstream.sources]]\nkind = \"dir\"\npath = \"{name}\"\n",
                "1".repeat(40)
            ),
        )
        .unwrap();
        (pin, tree)
    }

    /// Starts the forge with `POLYKV_FORGE_FAILPOINT=spec` (`name[:millis]`) and returns once it
    /// has reached the point (it prints a line there): no sleep that a loaded machine outruns.
    /// The rest of its stderr is drained in the background.
    pub fn pause_at(&self, args: &[&str], spec: &str) -> std::process::Child {
        use std::io::BufRead;
        let mut child = self
            .cmd(args)
            .env("POLYKV_FORGE_FAILPOINT", spec)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                err.read_line(&mut line).unwrap() > 0,
                "{args:?} ended before the failpoint {spec}"
            );
            if line.contains("failpoint") {
                break;
            }
        }
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        child
    }

    /// Runs the tool with `args` until it reaches failpoint `point`, then
    /// kills it with SIGKILL.
    pub fn kill_at(&self, args: &[&str], point: &str) {
        let mut child = self.pause_at(args, point);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }

    pub fn write_patch(&self, name: &str, text: &str) {
        std::fs::write(self.patches().join(name), text).unwrap();
    }

    /// Snapshot of every patches/ file, to prove nothing was written.
    pub fn patches_snapshot(&self) -> Vec<(String, Vec<u8>)> {
        snapshot_dir(&self.patches())
    }

    /// Snapshot of the workdir (path, bytes, mtime), to prove nothing changed.
    pub fn workdir_snapshot(&self) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
        let mut v = Vec::new();
        let root = self.workdir();
        if !root.exists() {
            return v;
        }
        for e in walkdir::WalkDir::new(&root).sort_by_file_name() {
            let e = e.unwrap();
            if e.file_type().is_file() {
                let m = e.metadata().unwrap();
                v.push((
                    e.path().strip_prefix(&root).unwrap().display().to_string(),
                    std::fs::read(e.path()).unwrap(),
                    m.modified().unwrap(),
                ));
            }
        }
        v
    }
}

pub const CMAKE: &str = "cmake_minimum_required(VERSION 3.14)
project(synthetic C)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_library(ggml-cpu SHARED src/lib.c)
set_target_properties(ggml-cpu PROPERTIES VERSION 0.1.0 SOVERSION 0)
add_executable(llama-completion src/tool.c)
target_link_libraries(llama-completion ggml-cpu)
";

/// A patch that changes main.c line 10 (marker included).
pub const MAIN_PATCH: &str = "Change main\n\ndiff --git a/src/main.c b/src/main.c\n--- a/src/main.c\n+++ b/src/main.c\n@@ -9,3 +9,3 @@\n main line 9\n-main line 10\n+main line 10 changed // polykv: 0001\n main line 11\n";
