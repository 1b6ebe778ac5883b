//! The one parsed form of a patch's diff: its files (what each does to which
//! path) and their hunks with every line. Parsed once per patch file
//! ([`crate::chain::PatchFile::parsed`]) by libgit2, after the textual checks
//! of [`crate::chain::apply::parse`] (paths as written, no binary or copy
//! patches); markers, ownership, rebase, the CUDA compile check and `status`
//! read it instead of walking libgit2's deltas each on their own.
//! Application (`apply_to_tree`) still takes libgit2's own diff, and the
//! reverse proof and canonical export work on the patch's exact bytes.

use serde::Serialize;

/// What a file patch does to its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    Added,
    Deleted,
    Modified,
    Renamed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Context,
    Added,
    Removed,
}

#[derive(Debug, Clone)]
pub struct Line {
    pub origin: Origin,
    /// The line's text, its newline included when it has one.
    pub text: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct Hunk {
    /// The `@@ … @@` line, without its newline.
    pub header: String,
    pub old_start: u32,
    pub old_lines: u32,
    pub new_start: u32,
    pub new_lines: u32,
    pub lines: Vec<Line>,
}

impl Hunk {
    /// The lines the hunk adds.
    pub fn added(&self) -> impl Iterator<Item = &[u8]> {
        self.lines
            .iter()
            .filter(|l| l.origin == Origin::Added)
            .map(|l| l.text.as_slice())
    }

    /// Old-side line range, 1-based and inclusive (a pure insertion names the
    /// line it follows, at least line 1).
    pub fn old_range(&self) -> (u32, u32) {
        let start = self.old_start.max(1);
        (start, start + self.old_lines.max(1) - 1)
    }
}

#[derive(Debug, Clone)]
pub struct FilePatch {
    pub change: Change,
    /// The path before (none for a file the patch creates).
    pub old_path: Option<String>,
    /// The path after (none for a file the patch deletes).
    pub new_path: Option<String>,
    pub hunks: Vec<Hunk>,
}

impl FilePatch {
    /// The path the patch leaves (the old one for a deletion).
    pub fn path(&self) -> &str {
        self.new_path
            .as_deref()
            .or(self.old_path.as_deref())
            .unwrap_or_default()
    }

    pub fn added_lines(&self) -> usize {
        self.hunks.iter().map(|h| h.added().count()).sum()
    }

    pub fn removed_lines(&self) -> usize {
        self.hunks
            .iter()
            .flat_map(|h| &h.lines)
            .filter(|l| l.origin == Origin::Removed)
            .count()
    }
}

#[derive(Debug, Clone)]
pub struct ParsedPatch {
    pub files: Vec<FilePatch>,
}

impl ParsedPatch {
    /// Parses diff text (the textual checks of `apply::parse` first).
    pub fn parse(text: &[u8]) -> Result<ParsedPatch, String> {
        let diff = crate::chain::apply::parse(text)?;
        let fail = |e: git2::Error| format!("reading the parsed patch: {}", e.message());
        let mut files = Vec::new();
        for idx in 0..diff.deltas().len() {
            let Some(delta) = diff.get_delta(idx) else {
                continue;
            };
            let path = |f: git2::DiffFile| f.path().map(|p| p.to_string_lossy().into_owned());
            let change = match delta.status() {
                git2::Delta::Added => Change::Added,
                git2::Delta::Deleted => Change::Deleted,
                git2::Delta::Renamed => Change::Renamed,
                _ => Change::Modified,
            };
            let old_path = (change != Change::Added)
                .then(|| path(delta.old_file()))
                .flatten();
            let new_path = (change != Change::Deleted)
                .then(|| path(delta.new_file()))
                .flatten();
            let mut hunks = Vec::new();
            if let Some(patch) = git2::Patch::from_diff(&diff, idx).map_err(fail)? {
                for h in 0..patch.num_hunks() {
                    let (hunk, n) = patch.hunk(h).map_err(fail)?;
                    let mut lines = Vec::with_capacity(n);
                    for l in 0..n {
                        let line = patch.line_in_hunk(h, l).map_err(fail)?;
                        let origin = match line.origin() {
                            '+' => Origin::Added,
                            '-' => Origin::Removed,
                            ' ' => Origin::Context,
                            _ => continue, // "\ No newline at end of file" and the like
                        };
                        lines.push(Line {
                            origin,
                            text: line.content().to_vec(),
                        });
                    }
                    hunks.push(Hunk {
                        header: String::from_utf8_lossy(hunk.header())
                            .trim_end()
                            .to_string(),
                        old_start: hunk.old_start(),
                        old_lines: hunk.old_lines(),
                        new_start: hunk.new_start(),
                        new_lines: hunk.new_lines(),
                        lines,
                    });
                }
            }
            files.push(FilePatch {
                change,
                old_path,
                new_path,
                hunks,
            });
        }
        Ok(ParsedPatch { files })
    }

    /// Files changed, lines added, lines removed.
    pub fn stats(&self) -> (usize, usize, usize) {
        (
            self.files.len(),
            self.files.iter().map(FilePatch::added_lines).sum(),
            self.files.iter().map(FilePatch::removed_lines).sum(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIFF: &[u8] = b"diff --git a/f.c b/f.c\nindex 1111111..2222222 100644\n--- a/f.c\n+++ b/f.c\n@@ -1,3 +1,4 @@ fn\n a\n-b\n+B\n+C\n c\ndiff --git a/n.h b/n.h\nnew file mode 100644\nindex 0000000..3333333\n--- /dev/null\n+++ b/n.h\n@@ -0,0 +1 @@\n+// polykv: 0002\ndiff --git a/x b/y\nsimilarity index 90%\nrename from x\nrename to y\n";

    #[test]
    fn files_hunks_and_lines() {
        let p = ParsedPatch::parse(DIFF).unwrap();
        assert_eq!(p.files.len(), 3);
        let f = &p.files[0];
        assert_eq!((f.change, f.path()), (Change::Modified, "f.c"));
        assert_eq!(f.hunks.len(), 1);
        let h = &f.hunks[0];
        assert_eq!(h.header, "@@ -1,3 +1,4 @@ fn");
        assert_eq!(
            (h.old_start, h.old_lines, h.new_start, h.new_lines),
            (1, 3, 1, 4)
        );
        assert_eq!(h.old_range(), (1, 3));
        assert_eq!(h.added().collect::<Vec<_>>(), vec![&b"B\n"[..], b"C\n"]);
        let n = &p.files[1];
        assert_eq!(
            (n.change, n.old_path.as_deref(), n.path()),
            (Change::Added, None, "n.h")
        );
        assert_eq!(n.hunks[0].old_range(), (1, 1));
        let r = &p.files[2];
        assert_eq!(r.change, Change::Renamed);
        assert_eq!(
            (r.old_path.as_deref(), r.new_path.as_deref()),
            (Some("x"), Some("y"))
        );
        assert!(r.hunks.is_empty());
        assert_eq!(p.stats(), (3, 3, 1));
    }

    #[test]
    fn refuses_what_apply_refuses() {
        assert!(ParsedPatch::parse(b"diff --git a/../x b/../x\n").is_err());
        assert!(ParsedPatch::parse(b"not a diff\n").is_err());
    }
}
