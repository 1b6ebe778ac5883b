//! `gen`: write the generated files into an edit stack, `gen --check` them
//! against the chain, `gen codebooks` print the Lloyd-Max codebooks.

use anyhow::Result;
use serde::Serialize;
use std::fmt::Write;
use std::path::Path;

use super::Report;
use crate::chain::verify::CheckId;
use crate::project::Project;

#[derive(Serialize)]
pub struct Checked {
    pub ok: bool,
    pub files: Vec<crate::gen::Output>,
    pub problems: Vec<String>,
}

/// `gen --check`: the chain applies and its generated files are
/// byte-identical to what `gen` writes (verify's `apply` and `generated` checks).
pub fn check(project: &Project, source: Option<&str>) -> Result<Checked> {
    let files = crate::gen::outputs(&project.patches_dir)?;
    let (report, _) = super::verify::check_chain(project, source)?;
    let problems: Vec<String> = [CheckId::Apply, CheckId::Generated]
        .into_iter()
        .filter_map(|id| report.get(id))
        .flat_map(|c| {
            c.problems.iter().cloned().chain(
                c.skipped
                    .iter()
                    .map(|why| format!("generated files not checked: {why}")),
            )
        })
        .collect();
    Ok(Checked {
        ok: problems.is_empty(),
        files,
        problems,
    })
}

impl Report for Checked {
    fn human(&self) -> String {
        let mut s = String::new();
        // Writing into a String cannot fail.
        for p in &self.problems {
            let _ = writeln!(s, "error: {p}");
        }
        let _ = write!(
            s,
            "gen --check: {} — {} generated file(s) declared in patches/{}",
            if self.ok { "ok" } else { "FAILED" },
            self.files.len(),
            crate::gen::DECL_FILE
        );
        s
    }

    fn exit_code(&self) -> i32 {
        if self.ok {
            0
        } else {
            1
        }
    }
}

#[derive(Serialize)]
#[serde(transparent)]
pub struct Wrote {
    pub written: Vec<crate::gen::Written>,
    #[serde(skip)]
    stack: String,
    #[serde(skip)]
    dry_run: bool,
}

/// `gen`: writes the generated files into the stack in `dir` (default work/edit).
pub fn write(project: &Project, dir: Option<&Path>, dry_run: bool) -> Result<Wrote> {
    let outputs = crate::gen::outputs(&project.patches_dir)?;
    let stack = super::dir_or(dir, project.layout().edit_stack())?;
    Ok(Wrote {
        written: crate::gen::write(&stack, &outputs, dry_run)?,
        stack: stack.display().to_string(),
        dry_run,
    })
}

impl Report for Wrote {
    fn human(&self) -> String {
        let mut lines: Vec<String> = self
            .written
            .iter()
            .map(|w| {
                format!(
                    "  {} {} ({})",
                    match (w.changed, self.dry_run) {
                        (true, false) => "wrote    ",
                        (true, true) => "would write",
                        (false, _) => "unchanged",
                    },
                    w.path,
                    w.generator
                )
            })
            .collect();
        if self.written.iter().any(|w| w.changed) && !self.dry_run {
            lines.push(format!(
                "gen: commit the changes in {} (in the patch that owns them), then run `polykv-forge export`",
                self.stack
            ));
        }
        lines.join("\n")
    }
}

#[derive(Serialize)]
#[serde(transparent)]
pub struct Codebooks {
    pub books: Vec<crate::gen::codebook::Codebook>,
    #[serde(skip)]
    c_header: bool,
}

/// `gen codebooks`: Lloyd-Max codebooks for `bits` (default 2, 3, 4).
pub fn codebooks(
    bits: &[u32],
    dim: u32,
    dist: crate::gen::codebook::Dist,
    c_header: bool,
) -> Result<Codebooks> {
    let bits = if bits.is_empty() {
        vec![2, 3, 4]
    } else {
        bits.to_vec()
    };
    Ok(Codebooks {
        books: bits
            .iter()
            .map(|b| crate::gen::codebook::generate(*b, dim, dist))
            .collect::<Result<_>>()?,
        c_header,
    })
}

impl Report for Codebooks {
    fn human(&self) -> String {
        if self.c_header {
            return crate::gen::codebook::c_header(&self.books)
                .trim_end()
                .to_string();
        }
        self.books
            .iter()
            .map(|b| {
                let pos: Vec<String> = b.centroids[b.centroids.len() / 2..]
                    .iter()
                    .map(|c| format!("{c:.5}"))
                    .collect();
                format!(
                    "{} bits, dim {}, {:?}: ±[{}]  MSE/coord (unit variance) {:.6}  ({} iterations)",
                    b.bits,
                    b.dim,
                    b.dist,
                    pos.join(", "),
                    b.mse_unit,
                    b.iterations
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}
