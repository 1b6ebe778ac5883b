//! Baselines: figures of a passing run committed in `gates/baselines/<gate>.json`
//! (with the applied tree they were measured on), and the floors a gate's
//! `[baseline]` table derives from them: each held figure of each row must
//! stay within a stated margin of its baseline value. A held figure with no
//! baseline value fails the row, so a gate cannot lose its floors silently.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::report::{GateResult, Row, Status, ThresholdCheck};

/// Which way a figure gets worse.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
}

/// How one figure is held to its baseline: worse by at most `margin`
/// (relative to the baseline value) plus `slack` (absolute).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Hold {
    pub better: Better,
    pub margin: f64,
    #[serde(default)]
    pub slack: f64,
}

impl Hold {
    /// The bound a value must not cross, from the baseline value `b`.
    pub fn bound(&self, b: f64) -> f64 {
        match self.better {
            Better::Higher => b - b.abs() * self.margin - self.slack,
            Better::Lower => b + b.abs() * self.margin + self.slack,
        }
    }

    pub fn holds(&self, value: f64, b: f64) -> bool {
        match self.better {
            Better::Higher => value >= self.bound(b),
            Better::Lower => value <= self.bound(b),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BaselineRow {
    pub model: String,
    pub config: String,
    pub figures: BTreeMap<String, f64>,
    /// The applied tree this row was measured on, where it is not the file's:
    /// a row kept from an earlier baseline because the run that wrote this
    /// one did not have it (a manual row left out of `gate run --all`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<String>,
}

/// A committed baseline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Baseline {
    pub gate: String,
    /// The applied tree the figures were measured on.
    pub tree: String,
    pub variant: String,
    pub rows: Vec<BaselineRow>,
}

impl Baseline {
    pub fn value(&self, model: &str, config: &str, figure: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.model == model && r.config == config)
            .and_then(|r| r.figures.get(figure).copied())
    }
}

pub fn path(gates_dir: &Path, gate: &str) -> PathBuf {
    gates_dir.join("baselines").join(format!("{gate}.json"))
}

pub fn load(gates_dir: &Path, gate: &str) -> Result<Option<Baseline>> {
    let p = path(gates_dir, gate);
    match std::fs::read(&p) {
        Ok(bytes) => {
            let b: Baseline = serde_json::from_slice(&bytes)
                .with_context(|| format!("parsing {}", p.display()))?;
            if b.gate != gate {
                bail!("{}: a baseline of gate `{}`", p.display(), b.gate);
            }
            Ok(Some(b))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

/// The baseline a passing result gives: its held figures, row by row.
pub fn from_result(holds: &BTreeMap<String, Hold>, r: &GateResult) -> Result<Baseline> {
    if holds.is_empty() {
        bail!(
            "gate {} holds no figure to a baseline (no [baseline] table)",
            r.gate
        );
    }
    // A passing run, but for the baseline floors themselves (there are none
    // yet, or the new figures are being accepted on purpose).
    if r.status == Status::Skipped {
        bail!("gate {}'s latest result was skipped", r.gate);
    }
    for row in &r.rows {
        if let Some(e) = &row.error {
            bail!(
                "gate {}: row {}/{} failed: {e}",
                r.gate,
                row.model,
                row.config
            );
        }
        // (a row the gate only reports may fall short of its static thresholds)
        if let Some(c) = row
            .checks
            .iter()
            .find(|c| !c.ok && !c.op.contains("baseline") && !row.reported)
        {
            bail!(
                "gate {}: row {}/{} fails {} {} {}; a baseline comes from a run that passes its other checks",
                r.gate,
                row.model,
                row.config,
                c.figure,
                c.op,
                c.threshold
            );
        }
    }
    let tree = r
        .tree
        .clone()
        .with_context(|| format!("gate {}'s latest result names no applied tree", r.gate))?;
    let rows = r
        .rows
        .iter()
        .map(|row| BaselineRow {
            model: row.model.clone(),
            config: row.config.clone(),
            figures: row
                .figures
                .iter()
                .filter(|(k, _)| holds.contains_key(*k))
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            tree: None,
        })
        .collect();
    Ok(Baseline {
        gate: r.gate.clone(),
        tree,
        variant: r.variant.clone(),
        rows,
    })
}

/// Rows of `old` that `new` lacks and whose configuration the gate still has
/// (`configs`), appended to `new` with the tree they were measured on.
fn keep_missing_rows(new: &mut Baseline, old: &Baseline, configs: &[String]) {
    for row in &old.rows {
        let lacking = !new
            .rows
            .iter()
            .any(|r| r.model == row.model && r.config == row.config);
        if lacking && configs.contains(&row.config) {
            let mut kept = row.clone();
            kept.tree = Some(row.tree.clone().unwrap_or_else(|| old.tree.clone()));
            new.rows.push(kept);
        }
    }
}

/// Writes `gates/baselines/<gate>.json` from `r`, the gate's latest result,
/// which must have been measured on `chain_tree`; rows the result lacks of the
/// gate's `configs` are kept from the committed baseline, with their tree.
/// Returns the path and the baseline.
pub fn commit(
    gates_dir: &Path,
    holds: &BTreeMap<String, Hold>,
    r: &GateResult,
    configs: &[String],
    chain_tree: &str,
    dry_run: bool,
) -> Result<(PathBuf, Baseline)> {
    if r.tree.as_deref() != Some(chain_tree) {
        bail!(
            "gate {}'s latest result was measured on applied tree {}, not on the chain's {}; run it again first",
            r.gate,
            crate::show::prefix(r.tree.as_deref().unwrap_or("none"), 12),
            crate::show::prefix(chain_tree, 12)
        );
    }
    let mut b = from_result(holds, r)?;
    if let Some(old) = load(gates_dir, &r.gate)? {
        keep_missing_rows(&mut b, &old, configs);
    }
    let out = path(gates_dir, &r.gate);
    if !dry_run {
        let mut text = serde_json::to_string_pretty(&b)?;
        text.push('\n');
        crate::fsx::write_atomic(&out, text.as_bytes())?;
    }
    Ok((out, b))
}

/// The checks one row owes its baseline. Without a baseline value a held
/// figure fails (threshold NaN cannot be stored in JSON: 0, op says why).
pub fn checks(
    holds: &BTreeMap<String, Hold>,
    base: Option<&Baseline>,
    row: &Row,
) -> Vec<ThresholdCheck> {
    holds
        .iter()
        .map(|(fig, hold)| {
            let value = row.figures.get(fig).copied();
            let op = match hold.better {
                Better::Higher => "min",
                Better::Lower => "max",
            };
            match base.and_then(|b| b.value(&row.model, &row.config, fig)) {
                Some(b) => ThresholdCheck {
                    figure: fig.clone(),
                    op: format!("{op} (baseline {b})"),
                    threshold: hold.bound(b),
                    value,
                    ok: value.is_some_and(|v| hold.holds(v, b)),
                },
                None => ThresholdCheck {
                    figure: fig.clone(),
                    op: format!("{op} (no baseline value)"),
                    threshold: 0.0,
                    value,
                    ok: false,
                },
            }
        })
        .collect()
}

/// Lines for the report: where the floors come from.
pub fn note(holds: &BTreeMap<String, Hold>, base: Option<&Baseline>, gate: &str) -> Option<String> {
    if holds.is_empty() {
        return None;
    }
    let how: Vec<String> = holds
        .iter()
        .map(|(f, h)| {
            let dir = match h.better {
                Better::Higher => "at least",
                Better::Lower => "at most",
            };
            let slack = if h.slack != 0.0 {
                format!(" ± {}", h.slack)
            } else {
                String::new()
            };
            format!("{f} {dir} baseline ∓ {}%{slack}", h.margin * 100.0)
        })
        .collect();
    Some(match base {
        Some(b) => format!(
            "Baseline floors from `gates/baselines/{gate}.json` (measured on applied tree `{}`): {}.",
            b.tree,
            how.join(", ")
        ),
        None => format!(
            "No baseline committed (`gates/baselines/{gate}.json`): every held figure fails; {} — run the gate, then `polykv-forge gate baseline {gate}`.",
            how.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds() -> BTreeMap<String, Hold> {
        BTreeMap::from([
            (
                "top1".to_string(),
                Hold {
                    better: Better::Higher,
                    margin: 0.02,
                    slack: 0.5,
                },
            ),
            (
                "kld".to_string(),
                Hold {
                    better: Better::Lower,
                    margin: 0.1,
                    slack: 0.0,
                },
            ),
        ])
    }

    fn row(top1: f64, kld: f64) -> Row {
        Row {
            model: "m".into(),
            config: "c".into(),
            figures: BTreeMap::from([("top1".into(), top1), ("kld".into(), kld)]),
            ..Default::default()
        }
    }

    #[test]
    fn floors_follow_the_baseline_and_a_missing_one_fails() {
        let base = Baseline {
            gate: "g".into(),
            tree: "t".into(),
            variant: "cpu".into(),
            rows: vec![BaselineRow {
                model: "m".into(),
                config: "c".into(),
                figures: BTreeMap::from([("top1".into(), 90.0), ("kld".into(), 0.2)]),
                tree: None,
            }],
        };
        // top1 floor 90 - 1.8 - 0.5 = 87.7; kld ceiling 0.22
        let ok = checks(&holds(), Some(&base), &row(87.8, 0.219));
        assert!(ok.iter().all(|c| c.ok), "{ok:?}");
        let bad = checks(&holds(), Some(&base), &row(87.6, 0.221));
        assert!(bad.iter().all(|c| !c.ok), "{bad:?}");
        assert!((bad[1].threshold - 87.7).abs() < 1e-9);
        // no baseline at all, or none for this row: every held figure fails
        assert!(checks(&holds(), None, &row(99.0, 0.0))
            .iter()
            .all(|c| !c.ok));
        let mut other = row(99.0, 0.0);
        other.config = "d".into();
        assert!(checks(&holds(), Some(&base), &other).iter().all(|c| !c.ok));
    }

    /// A baseline written from a run without the manual rows keeps theirs from
    /// the committed one (with the tree they came from), and drops rows of
    /// configurations the gate no longer has.
    #[test]
    fn rows_a_run_lacks_are_kept_with_their_tree() {
        let row_of = |config: &str, kld: f64, tree: Option<&str>| BaselineRow {
            model: "m".into(),
            config: config.into(),
            figures: BTreeMap::from([("kld".into(), kld)]),
            tree: tree.map(Into::into),
        };
        let old = Baseline {
            gate: "g".into(),
            tree: "old".into(),
            variant: "cpu".into(),
            rows: vec![
                row_of("ci", 0.1, None),
                row_of("manual", 0.2, None),
                row_of("older", 0.3, Some("older-tree")),
                row_of("gone", 0.4, None),
            ],
        };
        let mut new = Baseline {
            tree: "new".into(),
            rows: vec![row_of("ci", 0.05, None)],
            ..old.clone()
        };
        let configs: Vec<String> = ["ci", "manual", "older"].map(String::from).into();
        keep_missing_rows(&mut new, &old, &configs);
        assert_eq!(
            new.rows,
            vec![
                row_of("ci", 0.05, None),
                row_of("manual", 0.2, Some("old")),
                row_of("older", 0.3, Some("older-tree")),
            ]
        );
    }
}
