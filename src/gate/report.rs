//! Gate results: rows of figures with their threshold checks, the JSON
//! written to `build/gates/<name>.json`, and the table printed for people.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Passed,
    Failed,
    Skipped,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ThresholdCheck {
    pub figure: String,
    pub op: String,
    pub threshold: f64,
    pub value: Option<f64>,
    pub ok: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Row {
    pub model: String,
    pub config: String,
    pub figures: BTreeMap<String, f64>,
    pub checks: Vec<ThresholdCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub seconds: f64,
    pub ok: bool,
    /// A threshold missed on a row the gate only reports (see the notes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reported: bool,
    /// Rows of one group share a table (the parts of a gate measure different things).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateResult {
    pub gate: String,
    pub description: String,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub benchmark: bool,
    pub variant: String,
    pub seconds: f64,
    pub artifact_key: Option<String>,
    pub tree: Option<String>,
    /// Figure names in display order.
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
    /// What a reader must know beside the table (e.g. rows reported only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl GateResult {
    pub fn skipped(spec: &super::Spec, why: String) -> GateResult {
        GateResult {
            gate: spec.name.clone(),
            description: spec.description.clone(),
            status: Status::Skipped,
            reason: Some(why),
            benchmark: spec.benchmark,
            variant: spec.variant.name().to_string(),
            seconds: 0.0,
            artifact_key: None,
            tree: None,
            columns: Vec::new(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }
}

pub fn fmt_num(v: f64) -> String {
    let v = if v == 0.0 { 0.0 } else { v }; // no "-0"
    if v.fract() == 0.0 && v.abs() < 1e9 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.3}")
    } else if v.abs() >= 1e-3 {
        format!("{v:.4}")
    } else {
        // a tolerance like 1e-5 or an exactness figure: four decimals would print 0
        format!("{v:.2e}")
    }
}

/// Markdown tables of a gate's rows (also readable in a terminal): one per
/// group of rows, each with the columns its rows have.
pub fn table(r: &GateResult) -> String {
    let mut groups: Vec<(Option<&String>, Vec<&Row>)> = Vec::new();
    for row in &r.rows {
        match groups.iter_mut().find(|(g, _)| *g == row.group.as_ref()) {
            Some((_, rows)) => rows.push(row),
            None => groups.push((row.group.as_ref(), vec![row])),
        }
    }
    groups
        .iter()
        .map(|(_, rows)| {
            let columns: Vec<String> = r
                .columns
                .iter()
                .filter(|c| {
                    groups.len() == 1 || rows.iter().any(|row| row.figures.contains_key(*c))
                })
                .cloned()
                .collect();
            table_of(&columns, rows)
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn table_of(columns: &[String], rows: &[&Row]) -> String {
    let mut head = vec!["model".to_string(), "config".to_string()];
    head.extend(columns.iter().cloned());
    head.push("result".into());
    let mut lines = vec![
        format!("| {} |", head.join(" | ")),
        format!(
            "|{}|",
            head.iter().map(|_| "---").collect::<Vec<_>>().join("|")
        ),
    ];
    for row in rows {
        let mut cells = vec![row.model.clone(), row.config.clone()];
        for c in columns {
            let v = row
                .figures
                .get(c)
                .map(|v| fmt_num(*v))
                .unwrap_or_else(|| "-".into());
            let failed = row.checks.iter().any(|k| &k.figure == c && !k.ok);
            cells.push(if failed { format!("**{v}** ✗") } else { v });
        }
        let result = match (&row.error, row.ok && !row.reported) {
            (Some(e), _) => format!("error: {}", e.lines().next().unwrap_or("")),
            (None, true) => "pass".into(),
            (None, false) => {
                let bad: Vec<String> = row
                    .checks
                    .iter()
                    .filter(|k| !k.ok)
                    .map(describe_failed)
                    .collect();
                format!(
                    "{} ({})",
                    if row.reported {
                        "short, reported"
                    } else {
                        "FAIL"
                    },
                    bad.join("; ")
                )
            }
        };
        cells.push(result);
        lines.push(format!("| {} |", cells.join(" | ")));
    }
    lines.join("\n")
}

/// The latest result of `gate` in `dir` (`build/gates/<gate>.json`), if it ran.
pub fn load_latest(dir: &std::path::Path, gate: &str) -> anyhow::Result<Option<GateResult>> {
    use anyhow::Context;
    let p = dir.join(format!("{gate}.json"));
    match std::fs::read(&p) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", p.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

/// A failed check in words: `top1 40 < 59.250 (baseline 62.5)`.
fn describe_failed(k: &ThresholdCheck) -> String {
    // "min (baseline 90)": the floor comes from the committed baseline
    let why =
        k.op.split_once(' ')
            .filter(|(op, _)| *op == "min" || *op == "max")
            .map(|(_, e)| format!(" {e}"))
            .unwrap_or_default();
    format!(
        "{} {} {} {}{why}",
        k.figure,
        k.value.map(fmt_num).unwrap_or_else(|| "missing".into()),
        if k.op.starts_with("min") { "<" } else { ">" },
        fmt_num(k.threshold)
    )
}

/// The results measured on another applied tree than `chain_tree` (the tree
/// the chain in patches/ ends at): their figures say nothing of this chain.
pub fn stale<'a>(results: &'a [GateResult], chain_tree: &str) -> Vec<&'a GateResult> {
    results
        .iter()
        .filter(|r| r.tree.as_deref().is_some_and(|t| t != chain_tree))
        .collect()
}

/// The artifact keys the chain tree's results were measured with: one key,
/// or each key with its gates (the same tree built twice, e.g. by two
/// versions of the forge whose cache keys differ).
fn artifact_keys(results: &[GateResult], chain_tree: &str) -> String {
    let mut keys: Vec<(&str, Vec<&str>)> = Vec::new();
    for r in results
        .iter()
        .filter(|r| r.tree.as_deref() == Some(chain_tree))
    {
        let Some(k) = r.artifact_key.as_deref() else {
            continue;
        };
        match keys.iter_mut().find(|(key, _)| *key == k) {
            Some((_, gates)) => gates.push(&r.gate),
            None => keys.push((k, vec![&r.gate])),
        }
    }
    match keys.as_slice() {
        [] => String::new(),
        [(k, _)] => format!(", artifact key `{k}`"),
        many => format!(
            ", artifact keys {}",
            many.iter()
                .map(|(k, g)| format!("`{k}` ({})", g.join(", ")))
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    }
}

/// Markdown for a set of gate results (`polykv-forge gate report`): it names
/// the applied tree the chain ends at, and marks results from another tree stale.
pub fn markdown(results: &[GateResult], chain_tree: &str) -> String {
    let mut out = String::from(
        "<!-- Generated by `polykv-forge gate report` from build/gates/*.json; do not edit by hand. -->\n# Gate results\n\n",
    );
    out.push_str(&format!(
        "Figures of applied tree `{chain_tree}` (the tree the chain in `patches/` ends at){}.\n\n",
        artifact_keys(results, chain_tree)
    ));
    // a figure worse than its baseline value (one with no baseline value is not a regression:
    // its row fails, and the gate's note says the baseline is missing)
    let regressions: Vec<String> = results
        .iter()
        .flat_map(|r| {
            r.rows.iter().flat_map(move |row| {
                row.checks
                    .iter()
                    .filter(|c| !c.ok && c.op.contains("(baseline "))
                    .map(move |c| {
                        format!(
                            "{} {}/{}: {}",
                            r.gate,
                            row.model,
                            row.config,
                            describe_failed(c)
                        )
                    })
            })
        })
        .collect();
    if !regressions.is_empty() {
        out.push_str(&format!(
            "**Regressions against the committed baselines** ({}):\n\n",
            regressions.len()
        ));
        for l in &regressions {
            out.push_str(&format!("- {l}\n"));
        }
        out.push('\n');
    }
    for r in results {
        let mut status = match r.status {
            Status::Passed => "passed".to_string(),
            Status::Failed => "FAILED".to_string(),
            Status::Skipped => format!("skipped: {}", r.reason.as_deref().unwrap_or("")),
        };
        if let Some(t) = r.tree.as_deref().filter(|t| *t != chain_tree) {
            status.push_str(&format!(
                "** — **stale: measured on applied tree `{t}`, not on this chain's"
            ));
        }
        out.push_str(&format!(
            "## {}{}\n\n{}\n\nStatus: **{status}**, {:.0} s on the {} variant.\n\n",
            r.gate,
            if r.benchmark { " (benchmark)" } else { "" },
            r.description,
            r.seconds,
            r.variant
        ));
        if !r.rows.is_empty() {
            out.push_str(&table(r));
            out.push_str("\n\n");
        }
        for n in &r.notes {
            out.push_str(&format!("- {n}\n"));
        }
        if !r.notes.is_empty() {
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_their_digits() {
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(-0.0), "0");
        assert_eq!(fmt_num(255.0), "255");
        assert_eq!(fmt_num(97.6562), "97.656");
        assert_eq!(fmt_num(0.0481), "0.0481");
        assert_eq!(fmt_num(1.929e-7), "1.93e-7");
        assert_eq!(fmt_num(1e-5), "1.00e-5");
    }

    fn row(config: &str, group: Option<&str>, figs: &[(&str, f64)]) -> Row {
        Row {
            model: "m".into(),
            config: config.into(),
            figures: figs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            ok: true,
            group: group.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn groups_get_tables_of_their_own_columns() {
        let mut r = GateResult::skipped(
            &toml::from_str::<super::super::Spec>(
                "name = \"g\"\ndescription = \"d\"\nrun = [[\"x\"]]\n",
            )
            .unwrap(),
            String::new(),
        );
        r.columns = vec!["a".into(), "b".into()];
        r.rows = vec![
            row("one", Some("p"), &[("a", 1.0)]),
            row("two", Some("q"), &[("b", 2.0)]),
        ];
        let t = table(&r);
        assert_eq!(t.matches("| model | config |").count(), 2, "{t}");
        assert!(t.contains("| model | config | a | result |"), "{t}");
        assert!(t.contains("| model | config | b | result |"), "{t}");
        // without groups: one table, every column, "-" where a row has none
        for row in &mut r.rows {
            row.group = None;
        }
        let t = table(&r);
        assert_eq!(t.matches("| model | config |").count(), 1, "{t}");
        assert!(t.contains("| m | one | 1 | - | pass |"), "{t}");
    }
}

#[cfg(test)]
mod stale_tests {
    use super::*;

    fn result(gate: &str, tree: Option<&str>) -> GateResult {
        GateResult {
            gate: gate.into(),
            description: "d".into(),
            status: Status::Passed,
            reason: None,
            benchmark: false,
            variant: "cpu".into(),
            seconds: 1.0,
            artifact_key: Some("k".into()),
            tree: tree.map(str::to_string),
            columns: Vec::new(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn results_of_another_tree_are_stale_and_marked() {
        let results = vec![
            result("fresh", Some("aaaa")),
            result("old", Some("bbbb")),
            result("skipped", None),
        ];
        let stale = stale(&results, "aaaa");
        assert_eq!(stale.len(), 1);
        assert_eq!(stale[0].gate, "old");
        let md = markdown(&results, "aaaa");
        assert!(md.contains("Figures of applied tree `aaaa`"), "{md}");
        assert!(!md.contains("Regressions"), "{md}");
        assert!(
            md.contains("stale: measured on applied tree `bbbb`"),
            "{md}"
        );
        assert_eq!(md.matches("stale:").count(), 1, "{md}");
        assert!(md.contains(", artifact key `k`."), "{md}");
        // The same tree built twice (another key): each key names its gates.
        let mut rebuilt = result("smoke", Some("aaaa"));
        rebuilt.artifact_key = Some("k2".into());
        let md = markdown(&[result("fresh", Some("aaaa")), rebuilt], "aaaa");
        assert!(
            md.contains(", artifact keys `k` (fresh) and `k2` (smoke)."),
            "{md}"
        );
    }

    #[test]
    fn regressions_against_a_baseline_are_listed_first() {
        let mut r = result("decode", Some("aaaa"));
        r.status = Status::Failed;
        r.rows.push(Row {
            model: "m".into(),
            config: "turbo2".into(),
            figures: BTreeMap::from([("top1".into(), 40.0)]),
            checks: vec![ThresholdCheck {
                figure: "top1".into(),
                op: "min (baseline 62.5)".into(),
                threshold: 59.25,
                value: Some(40.0),
                ok: false,
            }],
            ..Default::default()
        });
        r.columns = vec!["top1".into()];
        let md = markdown(&[r], "aaaa");
        assert!(
            md.contains("**Regressions against the committed baselines** (1)"),
            "{md}"
        );
        assert!(
            md.contains("- decode m/turbo2: top1 40 < 59.250 (baseline 62.5)"),
            "{md}"
        );
        assert!(
            md.contains("FAIL (top1 40 < 59.250 (baseline 62.5))"),
            "{md}"
        );
    }
}
