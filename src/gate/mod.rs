//! Gates: files in `gates/` (TOML) that say what they need (variant,
//! binaries, models), the commands they run, how figures are parsed from the
//! output, and the thresholds. The runner checks prerequisites, runs, prints a
//! table and writes `build/gates/<name>.json`. A gate that cannot run is
//! "skipped: why", never "passed".

pub mod baseline;
pub mod decode;
pub mod engine;
pub mod needle;
pub mod plan;
pub mod report;
pub mod server;
pub mod shared_pool;
pub mod text;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::build::Variant;

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Commands per model (setup) and per model × configuration (run), figures by regex.
    #[default]
    Command,
    /// Passcode retrieval through llama-server's completion endpoint.
    Needle,
    /// Teacher-forced single-token decode against the reference configuration's greedy tokens.
    Decode,
    /// SharedKVPool in llama-server: correctness, memory, robustness, validation (patch 0007).
    SharedPool,
    /// Automatic cross-slot prefix sharing in llama-server (patch 0007, `--kv-share-prefix auto`).
    AutoShare,
    /// MTP speculative decoding in llama-server over the polykv caches (patch 0009).
    MtpServer,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub kind: Kind,
    #[serde(default = "default_variant")]
    pub variant: Variant,
    #[serde(default)]
    pub binaries: Vec<String>,
    /// Python packages (pinned `name==version`) its parts run with, installed
    /// once into a virtual environment in the cache; `{python}` names its
    /// interpreter.
    #[serde(default)]
    pub python_packages: Vec<String>,
    #[serde(default)]
    pub models: Vec<String>,
    /// Values for `{name}` placeholders.
    #[serde(default)]
    pub params: BTreeMap<String, toml::Value>,
    /// Commands run once per model before its configurations.
    #[serde(default)]
    pub setup: Vec<Vec<String>>,
    /// Commands run per model × configuration; their output is parsed.
    #[serde(default)]
    pub run: Vec<Vec<String>>,
    #[serde(default)]
    pub figures: Vec<Figure>,
    #[serde(default)]
    pub derived: Vec<Derived>,
    #[serde(default)]
    pub configs: Vec<Config>,
    /// Thresholds applied to every row.
    #[serde(default)]
    pub min: BTreeMap<String, f64>,
    #[serde(default)]
    pub max: BTreeMap<String, f64>,
    /// Seconds one command may run.
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
    /// A benchmark: figures are recorded, thresholds are loose.
    #[serde(default)]
    pub benchmark: bool,
    /// A rate-distortion frontier that configurations must sit on or below.
    #[serde(default)]
    pub frontier: Option<Frontier>,
    /// Run only when named (`gate run NAME`), never by `--all`; the text says
    /// why (e.g. it takes too long for a 2-core CI machine).
    #[serde(default)]
    pub manual: Option<String>,
    /// Rows whose thresholds are evaluated and shown but do not fail the gate
    /// (a known shortfall, said plainly); a row that errors still fails.
    #[serde(default)]
    pub report_only: Vec<ReportOnly>,
    /// Figures held to the committed baseline (`gates/baselines/<name>.json`)
    /// within a margin, in every row.
    #[serde(default)]
    pub baseline: BTreeMap<String, baseline::Hold>,
    /// Configurations left out of this run as manual (`--all`), with why:
    /// set by [`Spec::without_manual_rows`], never read from a file.
    #[serde(skip)]
    pub omitted: Vec<(String, String)>,
}

/// The frontier rule: for each configuration in `configs`, `figure` must be
/// at most `figure(reference) × slope^(bits(reference) − bits(row))`, the
/// reference measured for the same model in the same run. With `slope` 4
/// (the 6 dB-per-bit rate-distortion slope) a configuration one bit smaller
/// than the reference may have 4x its error.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Frontier {
    pub figure: String,
    pub bits: String,
    pub reference: String,
    pub slope: f64,
    /// The limit is stored in each row as this figure.
    pub limit_name: String,
    pub configs: Vec<String>,
    /// Rows whose frontier check is computed and shown but does not fail the
    /// gate, each with the reason (a tier that falls short, said plainly).
    #[serde(default)]
    pub report_only: Vec<ReportOnly>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReportOnly {
    pub config: String,
    /// Every model when absent.
    #[serde(default)]
    pub model: Option<String>,
    pub why: String,
}

impl ReportOnly {
    /// Whether this entry covers the row (model, config).
    pub fn covers(&self, model: &str, config: &str) -> bool {
        self.config == config && self.model.as_deref().is_none_or(|m| m == model)
    }

    /// The line the report prints for it.
    pub fn note(&self) -> String {
        let on = self
            .model
            .as_ref()
            .map(|m| format!(" on {m}"))
            .unwrap_or_default();
        format!("Reported, not enforced: {}{on}: {}", self.config, self.why)
    }
}

fn default_variant() -> Variant {
    Variant::Cpu
}

fn default_timeout() -> u64 {
    900
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    pub name: String,
    /// A regex with one capture group holding the number.
    pub regex: String,
    /// Which match counts: `last` (default), `first`, `sum` or `count`.
    #[serde(default)]
    pub agg: Agg,
    /// Printed by some configurations only: where it is missing the row
    /// goes without it instead of failing (a threshold on it still fails
    /// such a row).
    #[serde(default)]
    pub optional: bool,
}

/// How a figure is read off its regex's matches.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Agg {
    /// The last match's number.
    #[default]
    Last,
    /// The first match's number.
    First,
    /// The sum of all matches' numbers.
    Sum,
    /// How many times the regex matches.
    Count,
}

/// `figure` of a row divided by the same figure in the row of configuration
/// `over` (same model), or by figure `per` of the same row; times `scale`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Derived {
    pub name: String,
    pub figure: String,
    #[serde(default)]
    pub over: Option<String>,
    #[serde(default)]
    pub per: Option<String>,
    #[serde(default = "one")]
    pub scale: f64,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub name: String,
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    #[serde(default)]
    pub min: BTreeMap<String, f64>,
    #[serde(default)]
    pub max: BTreeMap<String, f64>,
    /// Figures that must be strictly below the same figure of another
    /// configuration, same model, same run (figure → configuration): a new
    /// tier must beat the one it replaces.
    #[serde(default)]
    pub below: BTreeMap<String, String>,
    /// Environment variables set for this configuration's `run` commands
    /// (e.g. a diagnostic switch that turns a transform off).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Run only when the gate is named (`gate run NAME`), not by `--all`;
    /// the text says why (an ablation or a comparison CI's time cannot hold).
    #[serde(default)]
    pub manual: Option<String>,
    /// Run for these of the gate's models only (empty: every model): a row
    /// whose absolute thresholds hold for some models and not others (stock
    /// q4_0 K collapses on keys with outlier channels).
    #[serde(default)]
    pub models: Vec<String>,
}

impl Config {
    /// Whether this configuration runs for `model`.
    pub fn runs_on(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }
}

impl Spec {
    /// The rows a run makes: each model (or one unnamed) × the configurations
    /// that run for it (or one unnamed row where the gate lists none), as
    /// [`engine::run_commands`] makes them.
    pub fn row_count(&self) -> usize {
        if self.configs.is_empty() {
            return self.models.len().max(1);
        }
        if self.models.is_empty() {
            return self.configs.len();
        }
        self.models
            .iter()
            .map(|m| self.configs.iter().filter(|c| c.runs_on(m)).count())
            .sum()
    }

    pub fn load(path: &Path) -> Result<Spec> {
        let text = crate::fsx::read_to_string(path)?;
        let spec: Spec =
            toml::from_str(&text).with_context(|| format!("parsing gate {}", path.display()))?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if spec.name != stem {
            bail!(
                "{}: the gate's name `{}` must match its file name",
                path.display(),
                spec.name
            );
        }
        // the mtp-server kind builds its servers' command lines itself (two models, with and without a draft)
        if spec.run.is_empty() && spec.kind != Kind::MtpServer {
            bail!(
                "{}: the gate has no `run` commands (in TOML, `run = [...]` must come before the first [table])",
                path.display()
            );
        }
        let placeholder = regex::Regex::new(r"\{[A-Za-z_][A-Za-z0-9_:]*\}")?;
        for f in &spec.figures {
            regex::Regex::new(&placeholder.replace_all(&f.regex, "x"))
                .with_context(|| format!("{}: figure {}: bad regex", path.display(), f.name))?;
        }
        for d in &spec.derived {
            match (&d.over, &d.per) {
                (Some(over), None) => {
                    if !spec.configs.iter().any(|c| &c.name == over) {
                        bail!(
                            "{}: derived {} divides by configuration `{over}`, which the gate does not list",
                            path.display(),
                            d.name
                        );
                    }
                }
                (None, Some(_)) => {}
                _ => bail!(
                    "{}: derived {} needs exactly one of `over` (a configuration) or `per` (a figure)",
                    path.display(),
                    d.name
                ),
            }
        }
        for (fig, h) in &spec.baseline {
            if !(h.margin >= 0.0 && h.slack >= 0.0) {
                bail!(
                    "{}: baseline {fig}: margin and slack must be >= 0",
                    path.display()
                );
            }
        }
        for c in &spec.configs {
            if let Some(m) = c.models.iter().find(|m| !spec.models.contains(m)) {
                bail!(
                    "{}: configuration `{}` names model `{m}`, which is not one of the gate's models",
                    path.display(),
                    c.name
                );
            }
            if !c.models.is_empty()
                && matches!(
                    spec.kind,
                    Kind::SharedPool | Kind::AutoShare | Kind::MtpServer
                )
            {
                bail!(
                    "{}: configuration `{}`: a {:?} gate runs every configuration for every model (no `models` per configuration)",
                    path.display(),
                    c.name,
                    spec.kind
                );
            }
            for other in c.below.values() {
                if other == &c.name || !spec.configs.iter().any(|x| &x.name == other) {
                    bail!(
                        "{}: configuration `{}` must be below `{other}`, which is not another configuration of the gate",
                        path.display(),
                        c.name
                    );
                }
            }
        }
        // A manual row may be left out, so nothing every run needs may depend on it.
        let manual = |name: &str| {
            spec.configs
                .iter()
                .any(|c| c.name == name && c.manual.is_some())
        };
        for d in &spec.derived {
            if let Some(over) = d.over.as_deref().filter(|o| manual(o)) {
                bail!(
                    "{}: derived {} divides by configuration `{over}`, which is manual (left out by --all)",
                    path.display(),
                    d.name
                );
            }
        }
        if let Some(r) = spec
            .frontier
            .as_ref()
            .map(|f| &f.reference)
            .filter(|r| manual(r))
        {
            bail!(
                "{}: the frontier's reference `{r}` is manual (left out by --all)",
                path.display()
            );
        }
        if let Some(f) = &spec.frontier {
            for name in std::iter::once(&f.reference).chain(&f.configs) {
                if !spec.configs.iter().any(|c| &c.name == name) {
                    bail!(
                        "{}: the frontier names configuration `{name}`, which the gate does not list",
                        path.display()
                    );
                }
            }
        }
        Ok(spec)
    }

    /// The gate as `--all` runs it: manual configurations left out (and
    /// listed in `omitted`), with the `below` comparisons and frontier
    /// entries that name them (a comparison with a row not run is not made).
    pub fn without_manual_rows(&self) -> Spec {
        let mut s = self.clone();
        let manual: Vec<(String, String)> = s
            .configs
            .iter()
            .filter_map(|c| c.manual.as_ref().map(|why| (c.name.clone(), why.clone())))
            .collect();
        if manual.is_empty() {
            return s;
        }
        let is_manual = |name: &str| manual.iter().any(|(m, _)| m == name);
        s.configs.retain(|c| c.manual.is_none());
        for c in &mut s.configs {
            c.below.retain(|_, other| !is_manual(other));
        }
        if let Some(f) = &mut s.frontier {
            f.configs.retain(|c| !is_manual(c));
        }
        s.omitted = manual;
        s
    }

    /// The gate as its stored run `r` was judged: without its manual rows
    /// when the run did not have them (`gate run --all`).
    pub fn as_run(&self, r: &report::GateResult) -> Spec {
        let full = self
            .configs
            .iter()
            .filter(|c| c.manual.is_some())
            .all(|c| r.rows.iter().any(|row| row.config == c.name));
        if full {
            self.clone()
        } else {
            self.without_manual_rows()
        }
    }
}

/// Every gate in `dir`, sorted by name.
pub fn load_all(dir: &Path) -> Result<Vec<(PathBuf, Spec)>> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for e in rd {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "toml") {
            out.push((p.clone(), Spec::load(&p)?));
        }
    }
    out.sort_by(|a, b| a.1.name.cmp(&b.1.name));
    Ok(out)
}
