//! Errors that callers branch on. Everything else travels as `anyhow::Error`
//! with context added at the edges.

use std::fmt;

/// A check failed: the tool worked, the thing it checked did not hold.
/// Maps to exit code 1; every other error maps to exit code 2.
#[derive(Debug)]
pub struct CheckFailed {
    pub summary: String,
}

impl fmt::Display for CheckFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary)
    }
}

impl std::error::Error for CheckFailed {}

/// A patch that did not apply strictly, with everything needed to find it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ApplyError {
    /// Patch file name, e.g. `0003-turbo-types.patch`.
    pub patch: String,
    /// Path inside the tree the failing hunk targets (empty when unknown).
    pub path: String,
    /// The failing hunk's header line (empty when the failure is not hunk-level).
    pub hunk: String,
    /// What went wrong, in words.
    pub reason: String,
    /// Whether the patch was being reverse-applied.
    pub reverse: bool,
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = if self.reverse {
            "reverse-apply"
        } else {
            "apply"
        };
        write!(f, "{}: does not {dir} strictly", self.patch)?;
        if !self.path.is_empty() {
            write!(f, "\n  file: {}", self.path)?;
        }
        if !self.hunk.is_empty() {
            write!(f, "\n  hunk: {}", self.hunk.trim_end())?;
        }
        write!(f, "\n  why:  {}", self.reason)
    }
}

impl std::error::Error for ApplyError {}
