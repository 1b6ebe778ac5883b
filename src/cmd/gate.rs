//! `gate list | run | baseline | report`: the gates in gates/*.toml, their
//! runs, committed baselines and the Markdown report.

use anyhow::{Context, Result};
use serde::Serialize;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use super::{short, Report};
use crate::error::CheckFailed;
use crate::gate::report::{GateResult, Status};
use crate::gate::Spec;
use crate::project::Project;

fn load(project: &Project) -> Result<Vec<Spec>> {
    Ok(crate::gate::load_all(&project.layout().gates())?
        .into_iter()
        .map(|(_, g)| g)
        .collect())
}

fn find<'a>(gates: &'a [Spec], name: &str) -> Result<&'a Spec> {
    gates
        .iter()
        .find(|g| g.name == name)
        .with_context(|| format!("no gate `{name}` in gates/ (see `polykv-forge gate list`)"))
}

fn results_dir(project: &Project) -> PathBuf {
    project.layout().gate_results()
}

#[derive(Serialize)]
pub struct ListRow {
    pub name: String,
    pub description: String,
    pub variant: &'static str,
    pub models: Vec<String>,
    pub benchmark: bool,
    pub manual: Option<String>,
}

#[derive(Serialize)]
#[serde(transparent)]
pub struct List(pub Vec<ListRow>);

pub fn list(project: &Project) -> Result<List> {
    Ok(List(
        load(project)?
            .into_iter()
            .map(|g| ListRow {
                variant: g.variant.name(),
                name: g.name,
                description: g.description,
                models: g.models,
                benchmark: g.benchmark,
                manual: g.manual,
            })
            .collect(),
    ))
}

impl Report for List {
    fn human(&self) -> String {
        self.0
            .iter()
            .map(|r| {
                format!(
                    "{:<14} [{}{}{}] {}",
                    r.name,
                    r.variant,
                    if r.benchmark { ", benchmark" } else { "" },
                    if r.manual.is_some() { ", manual" } else { "" },
                    r.description
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// One gate's baseline, committed from its latest result.
#[derive(Serialize)]
pub struct Committed {
    pub gate: String,
    pub file: String,
    pub tree: String,
    pub rows: usize,
    pub figures: usize,
    /// The stored result judged again against the committed floors.
    pub status: Status,
}

#[derive(Serialize)]
pub struct Baselines {
    pub committed: Vec<Committed>,
    pub dry_run: bool,
}

pub fn baseline(project: &Project, names: &[String], dry_run: bool) -> Result<Baselines> {
    let gates = load(project)?;
    let chain_tree = project.chain_tree()?;
    let results = results_dir(project);
    let mut committed = Vec::new();
    for name in names {
        let spec = find(&gates, name)?;
        let mut r = crate::gate::report::load_latest(&results, name)?.with_context(|| {
            format!("no result of gate {name}: run `polykv-forge gate run {name}` first")
        })?;
        // The gate's file may have changed since the run (a row made report-only,
        // a threshold added): its rows are judged by the file as it is now, the
        // baseline floors aside, before their figures become floors.
        crate::gate::engine::judge(&spec.as_run(&r), &mut r, None);
        let configs: Vec<String> = spec.configs.iter().map(|c| c.name.clone()).collect();
        let (out, b) = crate::gate::baseline::commit(
            &project.layout().gates(),
            &spec.baseline,
            &r,
            &configs,
            &chain_tree,
            dry_run,
        )?;
        // The stored result failed only where floors were missing or moved
        // on purpose: judged again against the committed ones.
        let r = crate::gate::plan::rejudge(spec, r, &b, &results)?;
        committed.push(Committed {
            gate: name.clone(),
            file: out.display().to_string(),
            tree: b.tree.clone(),
            rows: b.rows.len(),
            figures: spec.baseline.len(),
            status: r.status,
        });
    }
    Ok(Baselines { committed, dry_run })
}

impl Report for Baselines {
    fn human(&self) -> String {
        let verb = if self.dry_run {
            "would commit"
        } else {
            "committed"
        };
        self.committed
            .iter()
            .map(|c| {
                format!(
                    "gate baseline: {verb} {} row(s) of {} ({} figure(s) held) from applied tree {} → {}\ngate baseline: the stored result of {}, judged against it: {}",
                    c.rows,
                    c.gate,
                    c.figures,
                    short(&c.tree),
                    c.file,
                    c.gate,
                    if c.status == Status::Passed { "passed" } else { "failed" }
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[derive(Serialize)]
pub struct Rendered {
    pub chain_tree: String,
    pub stale: Vec<String>,
    pub results: Vec<GateResult>,
}

pub fn report(project: &Project, allow_stale: bool) -> Result<Rendered> {
    let dir = results_dir(project);
    let mut results = Vec::new();
    for g in load(project)? {
        results.extend(crate::gate::report::load_latest(&dir, &g.name)?);
    }
    if results.is_empty() {
        anyhow::bail!(
            "no gate results in {}; run `polykv-forge gate run --all` first",
            dir.display()
        );
    }
    let chain_tree = project.chain_tree()?;
    let stale = crate::gate::report::stale(&results, &chain_tree);
    if !stale.is_empty() && !allow_stale {
        anyhow::bail!(CheckFailed {
            summary: format!(
                "gate report: {} result(s) were measured on another applied tree than the chain's {}: {}; run them again (`polykv-forge gate run NAME`), or pass --allow-stale to render them marked stale",
                stale.len(),
                short(&chain_tree),
                stale
                    .iter()
                    .map(|r| format!("{} (tree {})", r.gate, short(r.tree.as_deref().unwrap_or(""))))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    let stale = stale.iter().map(|r| r.gate.clone()).collect();
    Ok(Rendered {
        chain_tree,
        stale,
        results,
    })
}

impl Report for Rendered {
    fn human(&self) -> String {
        crate::gate::report::markdown(&self.results, &self.chain_tree)
            .trim_end()
            .to_string()
    }
}

pub struct RunArgs<'a> {
    pub names: &'a [String],
    pub all: bool,
    pub require_all: bool,
    /// Named gates without their manual rows, as `--all` runs them.
    pub ci_rows: bool,
    pub workdir: Option<&'a Path>,
    /// Plan only: say what would run (binaries, models) or why not.
    pub dry_run: bool,
}

/// What a run tells as it goes (a person sees each gate as it finishes).
pub enum Event<'a> {
    /// A manual gate `--all` leaves out, and why.
    Left {
        gate: &'a str,
        why: &'a str,
    },
    Done(&'a GateResult),
}

#[derive(Serialize)]
#[serde(transparent)]
pub struct Ran {
    pub results: Vec<GateResult>,
    #[serde(skip)]
    require_all: bool,
}

impl Ran {
    fn count(&self, s: Status) -> usize {
        self.results.iter().filter(|r| r.status == s).count()
    }
}

/// A gate `a` chose: to run (as `--all` runs it: without its manual rows),
/// or a manual gate `--all` leaves out, with why.
enum Chosen<'g> {
    Run(Box<Spec>),
    Left(&'g Spec, &'g str),
}

/// The gates `a` names (or all of them).
fn chosen<'g>(gates: &'g [Spec], a: &RunArgs) -> Result<Vec<Chosen<'g>>> {
    if a.names.is_empty() && !a.all {
        anyhow::bail!("name the gates to run, or pass --all (see `polykv-forge gate list`)");
    }
    if !a.all {
        return a
            .names
            .iter()
            .map(|n| {
                let g = find(gates, n)?;
                let spec = if a.ci_rows {
                    g.without_manual_rows()
                } else {
                    g.clone()
                };
                Ok(Chosen::Run(Box::new(spec)))
            })
            .collect();
    }
    Ok(gates
        .iter()
        .map(|g| match &g.manual {
            Some(why) => Chosen::Left(g, why),
            // --all runs the CI set: a gate's manual rows only when it is named.
            None => Chosen::Run(Box::new(g.without_manual_rows())),
        })
        .collect())
}

pub fn run(project: &Project, a: &RunArgs, mut on: impl FnMut(Event)) -> Result<Ran> {
    let gates = load(project)?;
    let dir = super::dir_or(a.workdir, project.default_workdir())?;
    let ws = project.gate_workspace(&dir);
    let mut results = Vec::new();
    for c in chosen(&gates, a)? {
        match c {
            // Not a result: its last real run (if any) stays in build/gates/.
            Chosen::Left(g, why) => on(Event::Left { gate: &g.name, why }),
            Chosen::Run(spec) => {
                let r = crate::gate::plan::run(&spec, &ws)?;
                on(Event::Done(&r));
                results.push(r);
            }
        }
    }
    Ok(Ran {
        results,
        require_all: a.require_all,
    })
}

/// `gate run --dry-run`: each chosen gate's plan, nothing run or written.
#[derive(Serialize)]
#[serde(transparent)]
pub struct Planned {
    pub plans: Vec<PlannedGate>,
    #[serde(skip)]
    require_all: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
pub enum PlannedGate {
    Plan(crate::gate::plan::Plan),
    /// A manual gate `--all` leaves out.
    Left {
        gate: String,
        manual: String,
    },
}

pub fn plan(project: &Project, a: &RunArgs) -> Result<Planned> {
    let gates = load(project)?;
    let dir = super::dir_or(a.workdir, project.default_workdir())?;
    let ws = project.gate_workspace(&dir);
    let plans = chosen(&gates, a)?
        .into_iter()
        .map(|c| match c {
            Chosen::Left(g, why) => Ok(PlannedGate::Left {
                gate: g.name.clone(),
                manual: why.to_string(),
            }),
            Chosen::Run(spec) => Ok(PlannedGate::Plan(crate::gate::plan::plan(&spec, &ws)?)),
        })
        .collect::<Result<_>>()?;
    Ok(Planned {
        plans,
        require_all: a.require_all,
    })
}

impl Report for Planned {
    fn human(&self) -> String {
        use crate::gate::plan::Plan;
        let mut out = String::new();
        for p in &self.plans {
            // Writing into a String cannot fail.
            match p {
                PlannedGate::Left { gate, manual } => {
                    let _ = writeln!(out, "{}", human_left(gate, manual));
                }
                PlannedGate::Plan(Plan::Skip { gate, reason, .. }) => {
                    let _ = writeln!(out, "gate {gate}: would be skipped: {reason}");
                }
                PlannedGate::Plan(Plan::Run(r)) => {
                    let _ = writeln!(
                        out,
                        "gate {}: would run {} row(s) on the {} build in {} (tree {})",
                        r.gate,
                        r.rows,
                        r.variant,
                        r.build_dir.display(),
                        short(&r.tree)
                    );
                    for b in &r.binaries {
                        let _ = writeln!(out, "  binary  {}", b.display());
                    }
                    for (name, m) in &r.models {
                        let _ = writeln!(out, "  model   {name}: {}", m.display());
                    }
                    if !r.python_packages.is_empty() {
                        let _ = writeln!(out, "  python  {}", r.python_packages.join(" "));
                    }
                }
            }
        }
        out.trim_end().to_string()
    }

    /// As the run would: 1 where a gate would fail (stale artifacts) or,
    /// with --require-all, be skipped.
    fn exit_code(&self) -> i32 {
        use crate::gate::plan::Plan;
        let bad = self.plans.iter().any(|p| match p {
            PlannedGate::Plan(Plan::Skip { skip, .. }) => skip.is_failure() || self.require_all,
            _ => false,
        });
        i32::from(bad)
    }
}

/// A gate's result as a person reads it: status line and table.
pub fn human_result(r: &GateResult) -> String {
    match r.status {
        Status::Skipped => format!(
            "gate {}: skipped: {}\n",
            r.gate,
            r.reason.as_deref().unwrap_or("")
        ),
        s => {
            let mut out = format!(
                "gate {}: {} ({:.0}s){}",
                r.gate,
                if s == Status::Passed {
                    "passed"
                } else {
                    "FAILED"
                },
                r.seconds,
                r.reason
                    .as_deref()
                    .map(|x| format!(" — {x}"))
                    .unwrap_or_default()
            );
            if !r.rows.is_empty() {
                // Writing into a String cannot fail.
                let _ = write!(out, "\n{}", crate::gate::report::table(r));
            }
            out.push('\n');
            out
        }
    }
}

/// The line a person reads for a manual gate `--all` left out.
pub fn human_left(gate: &str, why: &str) -> String {
    format!(
        "gate {gate}: not run by --all (manual: {why}); run it with `polykv-forge gate run {gate}`"
    )
}

impl Report for Ran {
    /// The summary line (each gate was shown as it finished).
    fn human(&self) -> String {
        let failed = self.count(Status::Failed);
        let skipped = self.count(Status::Skipped);
        let passed = self.results.len() - failed - skipped;
        format!("gates: {passed} passed, {failed} failed, {skipped} skipped")
    }

    fn exit_code(&self) -> i32 {
        let failed = self.count(Status::Failed);
        let skipped = self.count(Status::Skipped);
        if failed > 0 || (self.require_all && skipped > 0) {
            1
        } else {
            0
        }
    }
}
