//! Inverting a git-style unified diff, so a patch can be proven by strictly
//! reverse-applying its own text (not a recomputed diff).

use anyhow::{bail, Context, Result};

fn lines(text: &[u8]) -> Vec<&[u8]> {
    text.split_inclusive(|&b| b == b'\n').collect()
}

fn swap_prefix(path: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    match path.strip_prefix(from) {
        Some(rest) => [to, rest].concat(),
        None => path.to_vec(),
    }
}

/// Splits `diff --git a/X b/Y` into (X, Y), with a/ and b/ kept off.
pub fn git_header_paths(rest: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    let rest = rest.strip_suffix(b"\n").unwrap_or(rest);
    // Same path on both sides is the common case; find the split that makes them equal.
    if let Some(r) = rest.strip_prefix(b"a/") {
        if r.len() > 3 {
            let n = (r.len() - 3) / 2;
            if r.len() == 2 * n + 3 && &r[n..n + 3] == b" b/" && r[..n] == r[n + 3..] {
                return Ok((r[..n].to_vec(), r[n + 3..].to_vec()));
            }
        }
        if let Some(pos) = r.windows(3).rposition(|w| w == b" b/") {
            return Ok((r[..pos].to_vec(), r[pos + 3..].to_vec()));
        }
    }
    bail!(
        "cannot read the paths of `diff --git {}`",
        String::from_utf8_lossy(rest)
    )
}

fn parse_count(tok: &[u8]) -> Result<(usize, usize)> {
    let s = std::str::from_utf8(tok).context("hunk header is not UTF-8")?;
    let (start, len) = match s.split_once(',') {
        Some((a, b)) => (a, b),
        None => (s, "1"),
    };
    Ok((
        start.parse().context("bad hunk start")?,
        len.parse().context("bad hunk length")?,
    ))
}

/// Returns the diff that undoes `diff`.
pub fn invert(diff: &[u8]) -> Result<Vec<u8>> {
    let ls = lines(diff);
    let mut out: Vec<u8> = Vec::with_capacity(diff.len());
    let mut i = 0;
    while i < ls.len() {
        let l = ls[i];
        if let Some(rest) = l.strip_prefix(b"diff --git ") {
            let (a, b) = git_header_paths(rest)?;
            out.extend_from_slice(b"diff --git a/");
            out.extend_from_slice(&b);
            out.extend_from_slice(b" b/");
            out.extend_from_slice(&a);
            out.push(b'\n');
            i += 1;
            // Extended header lines up to `---`, the next file, or a hunk.
            let start = i;
            while i < ls.len()
                && !ls[i].starts_with(b"--- ")
                && !ls[i].starts_with(b"diff --git ")
                && !ls[i].starts_with(b"@@ ")
            {
                i += 1;
            }
            out.extend(invert_extended(&ls[start..i])?);
            continue;
        }
        if l.starts_with(b"--- ") {
            let minus = l;
            let plus = *ls.get(i + 1).context("`---` line without `+++`")?;
            if !plus.starts_with(b"+++ ") {
                bail!("`---` line not followed by `+++`");
            }
            out.extend_from_slice(b"--- ");
            out.extend(swap_prefix(&plus[4..], b"b/", b"a/"));
            out.extend_from_slice(b"+++ ");
            out.extend(swap_prefix(&minus[4..], b"a/", b"b/"));
            i += 2;
            continue;
        }
        if l.starts_with(b"@@ -") {
            i = invert_hunk(&ls, i, &mut out)?;
            continue;
        }
        bail!(
            "unexpected line in diff: `{}`",
            String::from_utf8_lossy(l).trim_end()
        );
    }
    Ok(out)
}

fn invert_extended(hdr: &[&[u8]]) -> Result<Vec<u8>> {
    let find = |p: &[u8]| hdr.iter().find_map(|l| l.strip_prefix(p));
    let mut out = Vec::new();
    for l in hdr {
        let swapped: Vec<u8> = if let Some(m) = l.strip_prefix(b"new file mode ") {
            [b"deleted file mode ".as_slice(), m].concat()
        } else if let Some(m) = l.strip_prefix(b"deleted file mode ") {
            [b"new file mode ".as_slice(), m].concat()
        } else if l.starts_with(b"old mode ") {
            let m = find(b"new mode ").context("`old mode` without `new mode`")?;
            [b"old mode ".as_slice(), m].concat()
        } else if l.starts_with(b"new mode ") {
            let m = find(b"old mode ").context("`new mode` without `old mode`")?;
            [b"new mode ".as_slice(), m].concat()
        } else if l.starts_with(b"rename from ") {
            let m = find(b"rename to ").context("`rename from` without `rename to`")?;
            [b"rename from ".as_slice(), m].concat()
        } else if l.starts_with(b"rename to ") {
            let m = find(b"rename from ").context("`rename to` without `rename from`")?;
            [b"rename to ".as_slice(), m].concat()
        } else if let Some(rest) = l.strip_prefix(b"index ") {
            let rest = rest.strip_suffix(b"\n").unwrap_or(rest);
            let (ids, mode) = match rest.iter().position(|&b| b == b' ') {
                Some(p) => (&rest[..p], &rest[p..]),
                None => (rest, &b""[..]),
            };
            let dots = ids
                .windows(2)
                .position(|w| w == b"..")
                .context("bad index line")?;
            [
                b"index ".as_slice(),
                &ids[dots + 2..],
                b"..",
                &ids[..dots],
                mode,
                b"\n",
            ]
            .concat()
        } else if l.starts_with(b"similarity index ") || l.starts_with(b"dissimilarity index ") {
            l.to_vec()
        } else {
            bail!(
                "unsupported extended header line `{}`",
                String::from_utf8_lossy(l).trim_end()
            );
        };
        out.extend(swapped);
    }
    Ok(out)
}

/// Inverts the hunk starting at `ls[i]`; returns the index after it.
fn invert_hunk(ls: &[&[u8]], mut i: usize, out: &mut Vec<u8>) -> Result<usize> {
    let h = ls[i];
    let inner = h.strip_prefix(b"@@ -").context("bad hunk header")?;
    let end = inner
        .windows(3)
        .position(|w| w == b" @@")
        .context("bad hunk header")?;
    let ranges = &inner[..end];
    let tail = &inner[end..]; // " @@ section\n"
    let sp = ranges
        .iter()
        .position(|&b| b == b' ')
        .context("bad hunk header")?;
    let old_tok = &ranges[..sp];
    let new_tok = ranges[sp + 1..]
        .strip_prefix(b"+")
        .context("bad hunk header")?;
    let (_, mut old_left) = parse_count(old_tok)?;
    let (_, mut new_left) = parse_count(new_tok)?;
    out.extend_from_slice(b"@@ -");
    out.extend_from_slice(new_tok);
    out.extend_from_slice(b" +");
    out.extend_from_slice(old_tok);
    out.extend_from_slice(tail);
    i += 1;

    // Items: a body line with its optional "\ No newline" marker.
    let mut removed: Vec<Vec<u8>> = Vec::new(); // become additions
    let mut added: Vec<Vec<u8>> = Vec::new(); // become removals
    let flush = |out: &mut Vec<u8>, removed: &mut Vec<Vec<u8>>, added: &mut Vec<Vec<u8>>| {
        for a in added.drain(..) {
            out.extend(a);
        }
        for r in removed.drain(..) {
            out.extend(r);
        }
    };
    while old_left > 0 || new_left > 0 {
        let l = *ls.get(i).context("hunk is truncated")?;
        i += 1;
        let mut item = l.to_vec();
        if ls.get(i).is_some_and(|n| n.starts_with(b"\\")) {
            item.extend_from_slice(ls[i]);
            i += 1;
        }
        match l.first() {
            Some(b' ') | Some(b'\n') => {
                if old_left == 0 || new_left == 0 {
                    bail!("hunk has more lines than its header says");
                }
                old_left -= 1;
                new_left -= 1;
                flush(out, &mut removed, &mut added);
                out.extend(item);
            }
            Some(b'-') => {
                old_left = old_left
                    .checked_sub(1)
                    .context("hunk has more removed lines than its header says")?;
                item[0] = b'+';
                removed.push(item);
            }
            Some(b'+') => {
                new_left = new_left
                    .checked_sub(1)
                    .context("hunk has more added lines than its header says")?;
                item[0] = b'-';
                added.push(item);
            }
            _ => bail!(
                "unexpected line in hunk: `{}`",
                String::from_utf8_lossy(l).trim_end()
            ),
        }
    }
    flush(out, &mut removed, &mut added);
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverts_modify_add_delete() {
        let d = b"diff --git a/f.c b/f.c\nindex 1111111..2222222 100644\n--- a/f.c\n+++ b/f.c\n@@ -1,3 +1,3 @@ fn\n a\n-b\n+B\n c\ndiff --git a/n.h b/n.h\nnew file mode 100644\nindex 0000000..3333333\n--- /dev/null\n+++ b/n.h\n@@ -0,0 +1 @@\n+x\n\\ No newline at end of file\n";
        let inv = invert(d).unwrap();
        let expect = b"diff --git a/f.c b/f.c\nindex 2222222..1111111 100644\n--- a/f.c\n+++ b/f.c\n@@ -1,3 +1,3 @@ fn\n a\n-B\n+b\n c\ndiff --git a/n.h b/n.h\ndeleted file mode 100644\nindex 3333333..0000000\n--- a/n.h\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n\\ No newline at end of file\n";
        assert_eq!(
            String::from_utf8_lossy(&inv),
            String::from_utf8_lossy(expect)
        );
        assert_eq!(invert(&inv).unwrap(), d.to_vec());
    }

    #[test]
    fn inverts_rename_and_mode() {
        let d = b"diff --git a/x b/y\nold mode 100644\nnew mode 100755\nsimilarity index 90%\nrename from x\nrename to y\n";
        let inv = invert(d).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&inv),
            "diff --git a/y b/x\nold mode 100755\nnew mode 100644\nsimilarity index 90%\nrename from y\nrename to x\n"
        );
    }

    #[test]
    fn truncated_hunk_is_an_error() {
        let d = b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n";
        assert!(invert(d).is_err());
    }

    /// Property tests on generated trees: the diff between two random trees
    /// (edits, additions, deletions, renames, mode changes, CRLF, files
    /// without a final newline) as `export` renders it.
    mod generated {
        use crate::chain::reverse::invert;
        use crate::chain::{apply, export, series, PatchFile};
        use git2::{Oid, Repository};
        use proptest::prelude::*;

        const WORDS: [&str; 6] = ["alpha", "beta", "gamma", "{", "}", ""];
        const PATHS: [&str; 4] = ["a.c", "d/b.h", "d/e/c.txt", "z.md"];

        /// One file's content and mode.
        #[derive(Debug, Clone)]
        struct File {
            lines: Vec<u8>,
            crlf: bool,
            final_newline: bool,
            exec: bool,
        }

        impl File {
            fn bytes(&self) -> Vec<u8> {
                let eol = if self.crlf { "\r\n" } else { "\n" };
                let mut out = String::new();
                for (k, w) in self.lines.iter().enumerate() {
                    out.push_str(WORDS[*w as usize % WORDS.len()]);
                    out.push_str(&format!(" {}", w / 6));
                    if k + 1 < self.lines.len() || self.final_newline {
                        out.push_str(eol);
                    }
                }
                out.into_bytes()
            }

            /// Applies an edit script: per op, keep, drop, replace or insert.
            fn edited(&self, ops: &[(u8, u8)], flags: (bool, bool, bool)) -> File {
                let mut lines = Vec::new();
                let mut src = self.lines.iter();
                for &(op, val) in ops {
                    match op % 6 {
                        0..=2 => lines.extend(src.next()),
                        3 => {
                            src.next();
                        }
                        4 => {
                            src.next();
                            lines.push(val);
                        }
                        _ => lines.push(val),
                    }
                }
                lines.extend(src);
                File {
                    lines,
                    crlf: self.crlf ^ flags.0,
                    final_newline: self.final_newline ^ flags.1,
                    exec: self.exec ^ flags.2,
                }
            }
        }

        fn file() -> impl Strategy<Value = File> {
            (
                prop::collection::vec(0u8..24, 0..30),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
            )
                .prop_map(|(lines, crlf, final_newline, exec)| File {
                    lines,
                    crlf,
                    final_newline,
                    exec,
                })
        }

        /// Per path: absent before, absent after, or edited.
        #[derive(Debug, Clone)]
        enum Change {
            Added(File),
            Deleted(File),
            Edited(File, Vec<(u8, u8)>, (bool, bool, bool)),
        }

        fn change() -> impl Strategy<Value = Option<Change>> {
            let edits = prop::collection::vec((any::<u8>(), 0u8..24), 0..40);
            let flags = (
                prop::bool::weighted(0.15),
                prop::bool::weighted(0.15),
                prop::bool::weighted(0.15),
            );
            prop_oneof![
                1 => Just(None),
                1 => file().prop_map(|f| Some(Change::Added(f))),
                1 => file().prop_map(|f| Some(Change::Deleted(f))),
                4 => (file(), edits, flags).prop_map(|(f, e, g)| Some(Change::Edited(f, e, g))),
            ]
        }

        fn tree(repo: &Repository, files: &[(&str, &File)]) -> Oid {
            let empty = repo.treebuilder(None).unwrap().write().unwrap();
            let empty = repo.find_tree(empty).unwrap();
            let mut b = git2::build::TreeUpdateBuilder::new();
            for (path, f) in files {
                let blob = repo.blob(&f.bytes()).unwrap();
                let mode = if f.exec {
                    git2::FileMode::BlobExecutable
                } else {
                    git2::FileMode::Blob
                };
                b.upsert(*path, blob, mode);
            }
            b.create_updated(repo, &empty).unwrap()
        }

        fn patch(diff: &[u8]) -> PatchFile {
            let bytes = series::compose("generated\n", diff);
            PatchFile::from_bytes("0001-generated.patch", bytes).unwrap()
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

            #[test]
            fn inverting_twice_is_the_identity_and_reverse_apply_returns_the_base(
                changes in prop::collection::vec(change(), PATHS.len())
            ) {
                let tmp = tempfile::tempdir().unwrap();
                let repo = Repository::init_bare(tmp.path()).unwrap();
                let mut old = Vec::new();
                let mut new = Vec::new();
                let edited: Vec<Option<File>> = changes
                    .iter()
                    .map(|c| match c {
                        Some(Change::Edited(f, e, g)) => Some(f.edited(e, *g)),
                        _ => None,
                    })
                    .collect();
                for (k, c) in changes.iter().enumerate() {
                    match c {
                        None => {}
                        Some(Change::Added(f)) => new.push((PATHS[k], f)),
                        Some(Change::Deleted(f)) => old.push((PATHS[k], f)),
                        Some(Change::Edited(f, ..)) => {
                            old.push((PATHS[k], f));
                            new.push((PATHS[k], edited[k].as_ref().unwrap()));
                        }
                    }
                }
                let (a, b) = (tree(&repo, &old), tree(&repo, &new));
                let diff = export::render(&repo, a, b).unwrap();
                prop_assume!(!diff.is_empty());
                let inverse = invert(&diff).unwrap();
                let twice = invert(&inverse).unwrap();
                prop_assert_eq!(String::from_utf8_lossy(&twice), String::from_utf8_lossy(&diff));
                let p = patch(&diff);
                prop_assert_eq!(apply::apply(&repo, a, &p, false).unwrap(), b);
                prop_assert_eq!(apply::apply(&repo, b, &p, true).unwrap(), a);
                // The inverse is itself a patch that applies forward to the result.
                prop_assert_eq!(apply::apply(&repo, b, &patch(&inverse), false).unwrap(), a);
            }
        }
    }
}
