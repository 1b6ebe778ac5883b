//! Bad input gets a clear error and leaves nothing written: shifted or
//! changed hunks, escaping paths, `.git`, binary and truncated patches,
//! hostile archives, a wrong sdist hash, a source that is not the pin.

use crate::harness::*;
use std::io::Write;
use std::path::Path;

/// Applies a first good patch so the workdir exists, then installs `bad` as
/// patch 0002 and checks that apply and verify refuse it with `needle` and
/// that neither the workdir nor patches/ changed.
fn refused(fx: &Fx, bad: &str, needle: &[&str]) {
    if !fx.workdir().exists() {
        fx.ok(&["apply"]);
    }
    fx.write_patch("0002-bad.patch", bad);
    let wd = fx.workdir_snapshot();
    let pt = fx.patches_snapshot();
    for args in [&["apply"][..], &["verify"][..], &["apply", "--dry-run"][..]] {
        let out = fx.fails(args, 1);
        for n in needle {
            assert!(out.contains(n), "{args:?}: `{n}` not in:\n{out}");
        }
    }
    assert_eq!(fx.workdir_snapshot(), wd, "the workdir changed");
    assert_eq!(fx.patches_snapshot(), pt, "patches/ changed");
    std::fs::remove_file(fx.patches().join("0002-bad.patch")).unwrap();
}

const GOOD: &str = "diff --git a/src/main.c b/src/main.c\n--- a/src/main.c\n+++ b/src/main.c\n@@ -9,3 +9,3 @@\n main line 9\n-main line 10\n+main line 10 changed // polykv: 0002\n main line 11\n";

#[test]
fn the_good_patch_applies_once_the_lock_vouches_for_it() {
    let fx = Fx::new();
    fx.commit_patch("First", |s| {
        let p = s.join("src/util.h");
        let t = std::fs::read_to_string(&p).unwrap();
        std::fs::write(
            p,
            t.replace("util line 3\n", "util line 3 // polykv: 0001\n"),
        )
        .unwrap();
    });
    fx.ok(&["apply"]);
    // A patch put in by hand is not in patches.lock: apply refuses it (as
    // verify does) and names the fix (#39 item 5).
    fx.write_patch("0002-good.patch", GOOD);
    for args in [&["apply"][..], &["apply", "--dry-run"][..]] {
        let out = fx.fails(args, 1);
        assert!(
            out.contains("0002-good.patch is missing from the lock")
                && out.contains("polykv-forge export"),
            "{args:?}: {out}"
        );
    }
    // A locked patch edited by hand: the same.
    fx.ok(&["edit", "--force"]);
    fx.ok(&["export"]);
    fx.ok(&["apply"]);
    let p = fx.patches().join("0002-good.patch");
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(
        &p,
        text.replace("main line 10 changed", "main line 10 changed again"),
    )
    .unwrap();
    let out = fx.fails(&["apply"], 1);
    assert!(out.contains("changed since the lock was written"), "{out}");
    // `--upto` checks the patches it applies, not the ones after.
    fx.ok(&["apply", "--upto", "0001"]);
    std::fs::write(&p, text).unwrap();
    fx.ok(&["apply"]);
    assert!(std::fs::read_to_string(fx.workdir().join("src/main.c"))
        .unwrap()
        .contains("main line 10 changed"));
}

#[test]
fn hunk_shifted_by_one_line() {
    let fx = Fx::new();
    let bad = GOOD.replace("@@ -9,3 +9,3 @@", "@@ -10,3 +10,3 @@");
    refused(
        &fx,
        &bad,
        &[
            "0002-bad.patch",
            "file: src/main.c",
            "hunk: @@ -10,3 +10,3 @@",
            "no fuzz, no offset",
        ],
    );
    let bad = GOOD.replace("@@ -9,3 +9,3 @@", "@@ -8,3 +8,3 @@");
    refused(&fx, &bad, &["hunk: @@ -8,3 +8,3 @@"]);
}

#[test]
fn hunk_with_changed_context() {
    let fx = Fx::new();
    let bad = GOOD.replace(" main line 11\n", " main line eleven\n");
    refused(&fx, &bad, &["file: src/main.c", "hunk: @@ -9,3 +9,3 @@"]);
}

#[test]
fn paths_escaping_the_tree() {
    let fx = Fx::new();
    let add = |path: &str| {
        format!("diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n")
    };
    refused(&fx, &add("../escape.txt"), &["escapes the tree"]);
    refused(&fx, &add("src/../../escape.txt"), &["escapes the tree"]);
    let abs = "diff --git a//tmp/abs.txt b//tmp/abs.txt\nnew file mode 100644\n--- /dev/null\n+++ b//tmp/abs.txt\n@@ -0,0 +1 @@\n+x\n";
    refused(&fx, abs, &["0002-bad.patch"]);
    // `link` is a symlink to src/ in the upstream tree.
    let through = GOOD.replace("src/main.c", "link/main.c");
    refused(&fx, &through, &["through the symlink `link`"]);
    refused(&fx, &add(".git/hooks/post-checkout"), &["`.git`"]);
    refused(&fx, &add("sub/.git/config"), &["`.git`"]);
    assert!(!fx.root.join("work/escape.txt").exists());
    assert!(!fx.root.join("escape.txt").exists());
}

#[test]
fn binary_and_malformed_patches() {
    let fx = Fx::new();
    let binary = "diff --git a/data/blob.bin b/data/blob.bin\nindex 1111111..2222222 100644\nGIT binary patch\nliteral 5\nMcmZQzWMT#Y00ssC0RR91\n\n";
    refused(&fx, binary, &["binary file patch"]);
    let binary2 = "diff --git a/data/blob.bin b/data/blob.bin\nindex 1111111..2222222 100644\nBinary files a/data/blob.bin and b/data/blob.bin differ\n";
    refused(&fx, binary2, &["binary file patch"]);
    let truncated = GOOD.trim_end_matches(" main line 11\n");
    refused(
        &fx,
        truncated,
        &["0002-bad.patch", "malformed or truncated"],
    );
    let garbage = "diff --git a/src/main.c b/src/main.c\n--- a/src/main.c\n+++ b/src/main.c\n@@ -x,3 +9,3 @@\n main line 9\n";
    refused(&fx, garbage, &["malformed or truncated"]);
    // A corrupt hunk header is named by its line in the patch file (the
    // description's lines counted), not in the diff body (#39 item 8).
    let bad = format!(
        "Subject: a change\n\nTwo lines\nof description.\n\n{}",
        GOOD.replace("@@ -9,3 +9,3 @@", "@@ -9,3 +9,x @@")
    );
    let line = bad.lines().position(|l| l.starts_with("@@")).unwrap() + 1;
    refused(&fx, &bad, &[&format!("at line {line} of the patch file")]);
    // CRLF line endings are named as the cause.
    refused(&fx, &GOOD.replace('\n', "\r\n"), &["CRLF line endings"]);
    // A binary change made in the stack is refused by export, patches/ untouched.
    fx.ok(&["edit", "--force"]);
    std::fs::write(fx.stack().join("data/blob.bin"), b"\x00changed\x00").unwrap();
    fx.git(&fx.stack(), &["commit", "-q", "-am", "binary"]);
    let before = fx.patches_snapshot();
    let out = fx.fails(&["export"], 2);
    assert!(out.contains("data/blob.bin: binary change"), "{out}");
    assert_eq!(fx.patches_snapshot(), before);
}

#[test]
fn edit_force_keeps_the_old_stack_when_the_chain_does_not_apply() {
    let fx = Fx::new();
    fx.ok(&["edit"]);
    // Work in progress in the stack, not yet committed.
    std::fs::write(fx.stack().join("wip.txt"), "unsaved work\n").unwrap();
    // A context line upstream does not have: the chain no longer applies.
    let shifted = GOOD.replace(" main line 9\n", " main line 99\n");
    fx.write_patch("0002-bad.patch", &shifted);
    let out = fx.fails(&["edit", "--force"], 1);
    assert!(out.contains("0002-bad.patch"), "{out}");
    assert_eq!(
        std::fs::read_to_string(fx.stack().join("wip.txt")).unwrap(),
        "unsaved work\n",
        "a failed edit --force removed the stack"
    );
    std::fs::remove_file(fx.patches().join("0002-bad.patch")).unwrap();
    fx.ok(&["edit", "--force"]);
    assert!(
        !fx.stack().join("wip.txt").exists(),
        "--force replaces the stack"
    );
}

#[test]
fn a_patch_file_name_out_of_form_is_refused() {
    let fx = Fx::new();
    fx.write_patch("2-bad.patch", GOOD);
    let out = fx.fails(&["verify"], 2);
    assert!(out.contains("four digits"), "{out}");
}

// ---- sources ----

enum Kind<'a> {
    File(&'a [u8]),
    Symlink(&'a str),
    HardLink(&'a str),
}

/// A .tar.gz with raw entry names (the tar crate's safe setters refuse `..`).
fn tar_gz(path: &Path, entries: &[(&str, Kind)]) {
    let f = std::fs::File::create(path).unwrap();
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    for (name, kind) in entries {
        let mut h = tar::Header::new_gnu();
        let g = h.as_gnu_mut().unwrap();
        g.name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_mode(0o644);
        let data: &[u8] = match kind {
            Kind::File(d) => {
                h.set_entry_type(tar::EntryType::Regular);
                d
            }
            Kind::Symlink(t) | Kind::HardLink(t) => {
                h.set_entry_type(if matches!(kind, Kind::Symlink(_)) {
                    tar::EntryType::Symlink
                } else {
                    tar::EntryType::Link
                });
                let g = h.as_gnu_mut().unwrap();
                g.linkname[..t.len()].copy_from_slice(t.as_bytes());
                b""
            }
        };
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap().flush().unwrap();
}

fn sha256(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

#[test]
fn hostile_archives_are_refused_and_nothing_is_cached() {
    let fx = Fx::new();
    type Case<'a> = (&'a str, Vec<(&'a str, Kind<'a>)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "dotdot",
            vec![
                ("pkg/a.txt", Kind::File(b"a")),
                ("pkg/../../evil.txt", Kind::File(b"x")),
            ],
            "escapes the extraction directory",
        ),
        (
            "absolute",
            vec![("/tmp/evil.txt", Kind::File(b"x"))],
            "escapes the extraction directory",
        ),
        (
            "symlink",
            vec![
                ("pkg/a.txt", Kind::File(b"a")),
                ("pkg/link", Kind::Symlink("../../../etc/passwd")),
            ],
            "symlink pointing outside the tree",
        ),
        (
            "abs-symlink",
            vec![("pkg/link", Kind::Symlink("/etc/passwd"))],
            "symlink pointing outside the tree",
        ),
        (
            "hardlink",
            vec![
                ("pkg/a.txt", Kind::File(b"a")),
                ("pkg/h", Kind::HardLink("pkg/a.txt")),
            ],
            "hard links",
        ),
    ];
    for (name, entries, needle) in cases {
        let path = fx.tmp.path().join(format!("{name}.tar.gz"));
        tar_gz(&path, &entries);
        let out = fx.fails(&["vendor", "--source", path.to_str().unwrap()], 2);
        assert!(out.contains(needle), "{name}: {out}");
        assert!(!fx.tmp.path().join("evil.txt").exists());
    }
    let st: serde_json::Value = serde_json::from_str(&fx.ok(&["status", "--json"])).unwrap();
    assert_eq!(st["vendored"], false);
}

/// The upstream tree as an sdist: `pkg-1.0/vendor/llama.cpp/...`.
fn sdist_of(fx: &Fx, path: &Path) {
    let f = std::fs::File::create(path).unwrap();
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    b.follow_symlinks(false);
    b.append_dir_all("pkg-1.0/vendor/llama.cpp", &fx.upstream)
        .unwrap();
    let extra = b"# not part of the tree\n";
    let mut h = tar::Header::new_gnu();
    h.set_size(extra.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "pkg-1.0/setup.py", &extra[..])
        .unwrap();
    b.into_inner().unwrap().finish().unwrap().flush().unwrap();
}

/// A stand-in for `python3 -m pip download`: copies $FAKE_SDIST into `-d DIR`.
fn fake_python(fx: &Fx) -> std::path::PathBuf {
    let p = fx.tmp.path().join("fake-python");
    std::fs::write(
        &p,
        "#!/bin/sh\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -d ]; then shift; d=\"$1\"; fi; shift; done\ncp \"$FAKE_SDIST\" \"$d/pkg-1.0.tar.gz\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn pip_sdist_source_verifies_the_hash_then_the_tree() {
    let fx = Fx::new();
    let sdist = fx.tmp.path().join("pkg-1.0.tar.gz");
    sdist_of(&fx, &sdist);
    let python = fake_python(&fx);
    let good = sha256(&sdist);
    let src = |sha: &str| {
        format!("[[upstream.sources]]\nkind = \"pip-sdist\"\npackage = \"pkg\"\nversion = \"1.0\"\nsha256 = \"{sha}\"\nsubdir = \"vendor/llama.cpp\"\n")
    };
    let vendor = |fx: &Fx| {
        fx.cmd(&["vendor", "--json"])
            .env("POLYKV_FORGE_PYTHON", &python)
            .env("FAKE_SDIST", &sdist)
            .output()
            .unwrap()
    };
    // Wrong hash: refused, nothing cached.
    fx.write_manifest(&fx.tree.clone(), &src(&"0".repeat(64)));
    let o = vendor(&fx);
    // Under --json the error is a JSON document on stdout.
    let err: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err["ok"], false);
    assert_eq!(err["error"]["kind"], "environment");
    assert!(
        err["error"]
            .to_string()
            .contains(&format!("sha256 is {good}, expected {}", "0".repeat(64))),
        "{err}"
    );
    let st: serde_json::Value = serde_json::from_str(&fx.ok(&["status", "--json"])).unwrap();
    assert_eq!(st["vendored"], false);
    // Right hash: the tree under vendor/llama.cpp hashes to the pin.
    fx.write_manifest(&fx.tree.clone(), &src(&good));
    let o = vendor(&fx);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tree"], fx.tree.as_str());
    assert_eq!(v["source"], "pip-sdist pkg==1.0");
}

#[test]
fn a_bad_archive_download_is_not_kept_in_the_cache() {
    let fx = Fx::new();
    let sdist = fx.tmp.path().join("pkg-1.0.tar.gz");
    sdist_of(&fx, &sdist);
    let good = sha256(&sdist);
    let served = fx.tmp.path().join("served.tar.gz");
    std::fs::write(&served, b"not the release").unwrap();
    fx.write_manifest(
        &fx.tree.clone(),
        &format!(
            "[[upstream.sources]]\nkind = \"archive\"\nurl = \"file://{}\"\nsha256 = \"{good}\"\nsubdir = \"vendor/llama.cpp\"\n",
            served.display()
        ),
    );
    let out = fx.fails(&["vendor"], 2);
    assert!(out.contains("sha256 is") && out.contains(&good), "{out}");
    let left: Vec<_> = std::fs::read_dir(fx.cache.join("downloads"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "a bad download was kept: {left:?}");
    // The server serves the right file now: the next vendor fetches it again.
    std::fs::copy(&sdist, &served).unwrap();
    let v: serde_json::Value = serde_json::from_str(&fx.ok(&["vendor", "--json"])).unwrap();
    assert_eq!(v["tree"], fx.tree.as_str());
}

#[test]
fn a_source_whose_tree_differs_from_the_pin_is_refused() {
    let fx = Fx::new();
    std::fs::write(fx.upstream.join("src/util.h"), "tampered\n").unwrap();
    let out = fx.fails(&["vendor"], 2);
    assert!(
        out.contains("produced tree") && out.contains(&format!("but the pin is {}", fx.tree)),
        "{out}"
    );
    let st: serde_json::Value = serde_json::from_str(&fx.ok(&["status", "--json"])).unwrap();
    assert_eq!(st["vendored"], false);
    // A .git inside the source is never trusted or hashed.
    std::fs::write(fx.upstream.join("src/util.h"), numbered("util", 12)).unwrap();
    std::fs::create_dir_all(fx.upstream.join(".git")).unwrap();
    std::fs::write(fx.upstream.join(".git/HEAD"), "ref: refs/heads/lies\n").unwrap();
    fx.ok(&["vendor"]);
}

/// A reader that goes away (`polykv-forge status | head -1`) is not a crash:
/// the output is dropped, no panic, and the exit code is the command's own.
#[cfg(unix)]
#[test]
fn closed_stdout_is_not_a_panic() {
    let fx = Fx::new();
    // `true` exits at once without reading; the forge writes after it is gone
    let out = env_cmd("sh", &fx.home)
        .arg("-c")
        .arg("(sleep 0.5; \"$@\"; echo \"rc $?\" >&2) | true")
        .arg("sh")
        .arg(BIN)
        .arg("--project")
        .arg(&fx.root)
        .arg("--cache")
        .arg(&fx.cache)
        .arg("status")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("rc 0"), "{err}");
}
