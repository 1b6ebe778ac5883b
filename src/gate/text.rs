//! The evaluation text: the pinned upstream's own `docs/**/*.md`,
//! concatenated in sorted path order, read from the verified base tree.

use anyhow::Result;
use git2::{Oid, Repository};
use std::path::{Path, PathBuf};

pub fn write_eval_text(repo: &Repository, base: Oid, dir: &Path) -> Result<PathBuf> {
    let path = dir.join(format!("eval-text-{}.txt", &base.to_string()[..12]));
    if path.is_file() {
        return Ok(path);
    }
    let mut text = Vec::new();
    for (p, e) in crate::tree::list(repo, base)? {
        if p.starts_with(b"docs/") && p.ends_with(b".md") {
            text.extend(crate::tree::blob(repo, e.oid)?);
            if text.last() != Some(&b'\n') {
                text.push(b'\n');
            }
        }
    }
    crate::fsx::write_atomic(&path, &text)?;
    Ok(path)
}
