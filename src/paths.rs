//! Validation of tree-relative paths coming from patches and archives: no
//! absolute paths, no `..`, no `.git` component, no empty or `.` components.

use anyhow::{bail, Result};

/// Checks a `/`-separated path relative to a tree root. Returns the reason it
/// is unsafe as an error.
pub fn check_relative(path: &[u8]) -> Result<()> {
    let shown = String::from_utf8_lossy(path);
    if path.is_empty() {
        bail!("empty path");
    }
    if path[0] == b'/' {
        bail!("absolute path `{shown}` escapes the tree");
    }
    if path.contains(&0) || path.contains(&b'\\') {
        bail!("path `{shown}` contains a NUL byte or a backslash");
    }
    for comp in path.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => bail!("path `{shown}` has an empty or `.` component"),
            b".." => bail!("path `{shown}` escapes the tree through `..`"),
            c if c.eq_ignore_ascii_case(b".git") => {
                bail!("path `{shown}` touches a `.git` entry, which no patch or source may write")
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether a symlink stored at `link_path` with target `target` stays inside
/// the tree when resolved lexically.
pub fn symlink_stays_inside(link_path: &[u8], target: &[u8]) -> bool {
    if target.first() == Some(&b'/') || target.is_empty() {
        return false;
    }
    // Depth of the directory holding the link.
    let mut depth: i64 = link_path.split(|&b| b == b'/').count() as i64 - 1;
    for comp in target.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            c if c.eq_ignore_ascii_case(b".git") => return false,
            _ => depth += 1,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        assert!(check_relative(b"ggml/src/ggml.c").is_ok());
        assert!(check_relative(b".github/workflows/x.yml").is_ok());
        assert!(check_relative(b"../etc/passwd").is_err());
        assert!(check_relative(b"a/../../b").is_err());
        assert!(check_relative(b"/etc/passwd").is_err());
        assert!(check_relative(b".git/config").is_err());
        assert!(check_relative(b"sub/.GIT/hooks/pre-commit").is_err());
        assert!(check_relative(b"a//b").is_err());
        assert!(check_relative(b"").is_err());
    }

    #[test]
    fn symlink_targets() {
        assert!(symlink_stays_inside(b"a/b/link", b"../c"));
        assert!(symlink_stays_inside(b"a/link", b"target"));
        assert!(!symlink_stays_inside(b"a/link", b"../../x"));
        assert!(!symlink_stays_inside(b"link", b"/etc/passwd"));
        assert!(!symlink_stays_inside(b"link", b".git/config"));
    }
}
