//! `status`: the pin, which source served it, the chain, and the workdir.

use anyhow::Result;
use serde::Serialize;

use crate::chain::PatchFile;

#[derive(Debug, Serialize)]
pub struct ChainRow {
    pub number: String,
    pub file: String,
    pub files: usize,
    pub added: usize,
    pub removed: usize,
}

pub fn chain_rows(patches: &[PatchFile]) -> Result<Vec<ChainRow>> {
    let mut rows = Vec::new();
    for p in patches {
        let (files, added, removed) = p.parsed().map(|d| d.stats()).unwrap_or((0, 0, 0));
        rows.push(ChainRow {
            number: p.tag(),
            file: p.file_name.clone(),
            files,
            added,
            removed,
        });
    }
    Ok(rows)
}

/// The workdir's state in words: absent, foreign, clean at N, drifted.
#[derive(Debug, Serialize)]
pub struct WorkdirStatus {
    pub path: String,
    /// `absent`, `foreign` (not written by polykv-forge), `clean` or `drifted`.
    pub state: String,
    /// The last patch applied (empty = base only), when known.
    pub applied_upto: Option<String>,
    /// Whether the workdir holds the whole current chain.
    pub current: bool,
    pub modified: Vec<String>,
    pub deleted: Vec<String>,
    pub untracked: usize,
}

pub fn workdir_status(dir: &std::path::Path, patches: &[PatchFile]) -> Result<WorkdirStatus> {
    let ins = crate::workdir::inspect(dir)?;
    let mut st = WorkdirStatus {
        path: dir.display().to_string(),
        state: "absent".into(),
        applied_upto: None,
        current: false,
        modified: ins.modified.clone(),
        deleted: ins.deleted.clone(),
        untracked: ins.untracked.len(),
    };
    if !ins.exists {
        return Ok(st);
    }
    let Some(state) = &ins.state else {
        st.state = "foreign".into();
        return Ok(st);
    };
    st.state = if ins.drifted() { "drifted" } else { "clean" }.into();
    st.applied_upto = Some(
        state
            .patches
            .last()
            .map(|p| p.file.clone())
            .unwrap_or_default(),
    );
    st.current = state.patches.len() == patches.len()
        && state
            .patches
            .iter()
            .zip(patches)
            .all(|(a, b)| a.file == b.file_name && a.sha256 == b.sha256);
    Ok(st)
}
