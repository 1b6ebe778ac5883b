//! Running a gate: placeholders, commands with timeouts and logs, figures by
//! regex, derived ratios, thresholds.

use anyhow::{bail, Context, Result};
use regex::Regex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::report::{Row, ThresholdCheck};
use super::{Config, Spec};

/// What a gate run can refer to.
pub struct GateCtx {
    pub bin_dir: PathBuf,
    /// The applied tree the artifacts were built from.
    pub tree: String,
    /// Model name → path of the fetched file.
    pub models: BTreeMap<String, PathBuf>,
    pub text: PathBuf,
    /// `build/gates/<name>/`: logs and scratch files.
    pub scratch: PathBuf,
    /// The interpreter of the gate's `python_packages` environment, if it has one.
    pub python: Option<PathBuf>,
    /// `gates/`: the gate files and the client scripts they run.
    pub gates_dir: PathBuf,
}

/// Values for placeholders.
pub type Vars = BTreeMap<String, String>;

pub fn param_vars(spec: &Spec) -> Vars {
    spec.params
        .iter()
        .map(|(k, v)| {
            let s = match v {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), s)
        })
        .collect()
}

/// Expands `{name}` and `{bin:NAME}` in one argument.
pub fn expand(arg: &str, vars: &Vars, bin_dir: &Path) -> Result<String> {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find('}')
            .with_context(|| format!("unclosed `{{` in `{arg}`"))?
            + start;
        let key = &rest[start + 1..end];
        if let Some(bin) = key.strip_prefix("bin:") {
            out.push_str(&bin_dir.join(bin).display().to_string());
        } else {
            let v = vars
                .get(key)
                .with_context(|| format!("unknown placeholder `{{{key}}}` in `{arg}`"))?;
            out.push_str(v);
        }
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Runs one command, appending its stdout and stderr to `log`, within `timeout`.
pub fn run_command(
    argv: &[String],
    env: &BTreeMap<String, String>,
    log: &Path,
    timeout: Duration,
) -> Result<()> {
    crate::proc::Cmd::from_argv(argv)?
        .envs(env)
        .timeout(timeout)
        .run_logged(log)?;
    Ok(())
}

/// Expands `{name}` in a figure's regex with the value, regex-escaped.
fn expand_regex(re: &str, vars: &Vars) -> Result<String> {
    let escaped: Vars = vars
        .iter()
        .map(|(k, v)| (k.clone(), regex::escape(v)))
        .collect();
    // Regex repetitions like `{2}` or `{1,3}` are left alone.
    let mut out = String::new();
    let mut rest = re;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').map(|e| e + start);
        match end {
            Some(end) if escaped.contains_key(&rest[start + 1..end]) => {
                out.push_str(&escaped[&rest[start + 1..end]]);
                rest = &rest[end + 1..];
            }
            _ => {
                out.push('{');
                rest = &rest[start + 1..];
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Parses the figures from a command log.
pub fn parse_figures(spec: &Spec, text: &str, vars: &Vars) -> Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for f in &spec.figures {
        let re = Regex::new(&expand_regex(&f.regex, vars)?)?;
        let values: Vec<f64> = re
            .captures_iter(text)
            .filter_map(|c| c.get(1).and_then(|m| m.as_str().trim().parse::<f64>().ok()))
            .collect();
        let count = re.find_iter(text).count();
        let v = match f.agg {
            super::Agg::Count => Some(count as f64),
            super::Agg::Sum => (!values.is_empty()).then(|| values.iter().sum()),
            super::Agg::First => values.first().copied(),
            super::Agg::Last => values.last().copied(),
        };
        match v {
            Some(v) => {
                out.insert(f.name.clone(), v);
            }
            None if f.optional => {}
            None => bail!(
                "figure `{}` not found in the output (regex `{}`)",
                f.name,
                f.regex
            ),
        }
    }
    Ok(out)
}

fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Runs a `command` gate: setup per model, run per model × configuration.
pub fn run_commands(spec: &Spec, ctx: &GateCtx) -> Vec<Row> {
    let mut rows = Vec::new();
    let timeout = Duration::from_secs(spec.timeout_s);
    let configs: Vec<Config> = if spec.configs.is_empty() {
        vec![Config {
            name: "-".into(),
            ..Config::default()
        }]
    } else {
        spec.configs.clone()
    };
    let models: Vec<(String, Option<PathBuf>)> = if spec.models.is_empty() {
        vec![("-".into(), None)]
    } else {
        spec.models
            .iter()
            .map(|m| (m.clone(), ctx.models.get(m).cloned()))
            .collect()
    };
    for (model, path) in models {
        let mut vars = param_vars(spec);
        vars.insert("text".into(), ctx.text.display().to_string());
        vars.insert("scratch".into(), ctx.scratch.display().to_string());
        vars.insert("tree".into(), ctx.tree.clone());
        vars.insert("model_name".into(), model.clone());
        if let Some(p) = &path {
            vars.insert("model".into(), p.display().to_string());
        }
        let setup_log = ctx.scratch.join(format!("{}-setup.log", safe(&model)));
        let _ = std::fs::remove_file(&setup_log);
        let mut setup_err = None;
        for cmd in &spec.setup {
            let argv: Result<Vec<String>> =
                cmd.iter().map(|a| expand(a, &vars, &ctx.bin_dir)).collect();
            if let Err(e) = argv.and_then(|argv| {
                crate::progress::note(&format!("gate {}: {model}: setup", spec.name));
                run_command(&argv, &BTreeMap::new(), &setup_log, timeout)
            }) {
                setup_err = Some(format!("setup: {e:#}"));
                break;
            }
        }
        for c in configs.iter().filter(|c| c.runs_on(&model)) {
            let t = Instant::now();
            let mut row = Row {
                model: model.clone(),
                config: c.name.clone(),
                ..Default::default()
            };
            if let Some(e) = &setup_err {
                row.error = Some(e.clone());
                rows.push(row);
                continue;
            }
            let mut v = vars.clone();
            v.extend(c.vars.clone());
            v.insert("config".into(), c.name.clone());
            let log = ctx
                .scratch
                .join(format!("{}-{}.log", safe(&model), safe(&c.name)));
            let _ = std::fs::remove_file(&log);
            crate::progress::note(&format!("gate {}: {model} {}", spec.name, c.name));
            let mut err = None;
            for cmd in &spec.run {
                let argv: Result<Vec<String>> =
                    cmd.iter().map(|a| expand(a, &v, &ctx.bin_dir)).collect();
                if let Err(e) = argv.and_then(|argv| run_command(&argv, &c.env, &log, timeout)) {
                    err = Some(format!("{e:#}"));
                    break;
                }
            }
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            match parse_figures(spec, &text, &v) {
                Ok(f) => row.figures = f,
                Err(e) if err.is_none() => err = Some(format!("{e:#}; log: {}", log.display())),
                Err(_) => {}
            }
            row.error = err;
            row.seconds = t.elapsed().as_secs_f64();
            rows.push(row);
        }
    }
    rows
}

/// Adds derived figures and evaluates thresholds (the spec's, and the floors
/// its `[baseline]` table derives from `baseline`); returns whether all rows pass.
pub fn finish(spec: &Spec, rows: &mut [Row], baseline: Option<&super::baseline::Baseline>) -> bool {
    // Derived ratios against another configuration of the same model.
    let snapshot: Vec<(String, String, BTreeMap<String, f64>)> = rows
        .iter()
        .map(|r| (r.model.clone(), r.config.clone(), r.figures.clone()))
        .collect();
    for r in rows.iter_mut() {
        for d in &spec.derived {
            let reference = match (&d.over, &d.per) {
                (Some(over), _) => snapshot
                    .iter()
                    .find(|(m, c, _)| *m == r.model && c == over)
                    .and_then(|(_, _, f)| f.get(&d.figure).copied()),
                (None, Some(per)) => r.figures.get(per).copied(),
                (None, None) => None,
            };
            if let (Some(v), Some(base)) = (r.figures.get(&d.figure).copied(), reference) {
                if base != 0.0 {
                    r.figures.insert(d.name.clone(), d.scale * v / base);
                }
            }
        }
    }
    // The frontier limit, from the reference row of the same model (its
    // figures taken again: the bits may be a derived figure).
    let snapshot: Vec<(String, String, BTreeMap<String, f64>)> = rows
        .iter()
        .map(|r| (r.model.clone(), r.config.clone(), r.figures.clone()))
        .collect();
    let mut frontier_limit: Vec<Option<f64>> = vec![None; rows.len()];
    if let Some(f) = &spec.frontier {
        for (i, r) in rows.iter_mut().enumerate() {
            if !f.configs.contains(&r.config) {
                continue;
            }
            let reference = snapshot
                .iter()
                .find(|(m, c, _)| *m == r.model && *c == f.reference)
                .map(|(_, _, figs)| (figs.get(&f.figure).copied(), figs.get(&f.bits).copied()));
            if let (Some((Some(ref_value), Some(ref_bits))), Some(bits)) =
                (reference, r.figures.get(&f.bits).copied())
            {
                let limit = ref_value * f.slope.powf(ref_bits - bits);
                r.figures.insert(f.limit_name.clone(), limit);
                frontier_limit[i] = Some(limit);
            }
        }
    }
    let mut all_ok = true;
    for (i, r) in rows.iter_mut().enumerate() {
        let cfg = spec.configs.iter().find(|c| c.name == r.config);
        let mut checks = Vec::new();
        if let Some(f) = spec
            .frontier
            .as_ref()
            .filter(|f| f.configs.contains(&r.config))
        {
            let value = r.figures.get(&f.figure).copied();
            // No limit (the reference or the bits are missing) fails the check.
            let limit = frontier_limit[i];
            let on = matches!((value, limit), (Some(v), Some(l)) if v <= l);
            r.figures
                .insert("frontier_ok".into(), if on { 1.0 } else { 0.0 });
            let report_only = f.report_only.iter().any(|x| x.covers(&r.model, &r.config));
            checks.push(ThresholdCheck {
                figure: f.figure.clone(),
                op: format!(
                    "frontier({}){}",
                    f.reference,
                    if report_only { ", reported only" } else { "" }
                ),
                // JSON has no NaN: a missing limit shows as 0 and fails.
                threshold: limit.unwrap_or(0.0),
                value,
                ok: on || report_only,
            });
        }
        let mut add = |bounds: &BTreeMap<String, f64>, op: &str| {
            for (fig, th) in bounds {
                let value = r.figures.get(fig).copied();
                let ok = match (value, op) {
                    (Some(v), "min") => v >= *th,
                    (Some(v), _) => v <= *th,
                    (None, _) => false,
                };
                checks.push(ThresholdCheck {
                    figure: fig.clone(),
                    op: op.to_string(),
                    threshold: *th,
                    value,
                    ok,
                });
            }
        };
        add(&spec.min, "min");
        add(&spec.max, "max");
        if let Some(c) = cfg {
            add(&c.min, "min");
            add(&c.max, "max");
            for (fig, other) in &c.below {
                let value = r.figures.get(fig).copied();
                let reference = snapshot
                    .iter()
                    .find(|(m, name, _)| *m == r.model && name == other)
                    .and_then(|(_, _, f)| f.get(fig).copied());
                checks.push(ThresholdCheck {
                    figure: fig.clone(),
                    op: format!("below({other})"),
                    // JSON has no NaN: a missing reference shows as 0 and fails.
                    threshold: reference.unwrap_or(0.0),
                    value,
                    ok: matches!((value, reference), (Some(v), Some(b)) if v < b),
                });
            }
        }
        checks.extend(super::baseline::checks(&spec.baseline, baseline, r));
        r.checks = checks;
        let reported = spec
            .report_only
            .iter()
            .any(|x| x.covers(&r.model, &r.config));
        let short = r.checks.iter().any(|c| !c.ok);
        r.reported = reported && short && r.error.is_none();
        r.ok = r.error.is_none() && (!short || reported);
        all_ok &= r.ok;
    }
    all_ok
}

/// Judges a gate result's rows (`finish`) and sets what follows from the
/// verdict: its status, columns and notes.
pub fn judge(
    spec: &Spec,
    r: &mut super::report::GateResult,
    baseline: Option<&super::baseline::Baseline>,
) {
    use super::report::Status;
    let ok = finish(spec, &mut r.rows, baseline);
    r.status = if ok { Status::Passed } else { Status::Failed };
    r.columns = columns(spec, &r.rows);
    r.notes = notes(spec, baseline);
}

/// Lines the report prints under the table: the frontier rule and the rows
/// it only reports, with their reasons.
pub fn notes(spec: &Spec, baseline: Option<&super::baseline::Baseline>) -> Vec<String> {
    let mut out: Vec<String> = spec.report_only.iter().map(|x| x.note()).collect();
    out.extend(super::baseline::note(&spec.baseline, baseline, &spec.name));
    if !spec.omitted.is_empty() {
        out.push(format!(
            "Not run by `--all` (manual rows; `polykv-forge gate run {}` runs them): {}.",
            spec.name,
            spec.omitted
                .iter()
                .map(|(c, why)| format!("{c} ({why})"))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let Some(f) = &spec.frontier else {
        return out;
    };
    out.push(format!(
        "Frontier rule: {} ≤ {}({}) × {}^(bits({}) − bits) per model, same run; the limit is `{}`, `frontier_ok` 1 = on or below it. Enforced for: {}.",
        f.figure, f.figure, f.reference, f.slope, f.reference, f.limit_name,
        f.configs
            .iter()
            .filter(|c| !f.report_only.iter().any(|x| &x.config == *c && x.model.is_none()))
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out.extend(f.report_only.iter().map(|x| x.note()));
    out
}

/// Figure names in display order: parsed, then derived, then any others.
pub fn columns(spec: &Spec, rows: &[Row]) -> Vec<String> {
    let mut cols: Vec<String> = spec.figures.iter().map(|f| f.name.clone()).collect();
    cols.extend(spec.derived.iter().map(|d| d.name.clone()));
    for r in rows {
        for k in r.figures.keys() {
            if !cols.contains(k) {
                cols.push(k.clone());
            }
        }
    }
    cols
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regex_placeholders_are_escaped() {
        let mut v = Vars::new();
        v.insert("tree".into(), "a.b".into());
        assert_eq!(
            expand_regex("tree {tree}, x{2}", &v).unwrap(),
            "tree a\\.b, x{2}"
        );
    }

    #[test]
    fn placeholders() {
        let mut v = Vars::new();
        v.insert("k".into(), "q8_0".into());
        let bin = Path::new("/b/bin");
        assert_eq!(
            expand("{bin:llama-cli}", &v, bin).unwrap(),
            "/b/bin/llama-cli"
        );
        assert_eq!(expand("-ctk={k}", &v, bin).unwrap(), "-ctk=q8_0");
        assert!(expand("{nope}", &v, bin).is_err());
        assert!(expand("{k", &v, bin).is_err());
    }

    /// A row of `model` × `config` holding one figure.
    fn one_figure_row(model: &str, config: &str, figure: &str, value: f64) -> Row {
        Row {
            model: model.into(),
            config: config.into(),
            figures: [(figure.to_string(), value)].into(),
            ..Default::default()
        }
    }

    fn spec(toml_text: &str) -> Spec {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn unknown_agg_is_refused() {
        let text = "name = \"t\"\ndescription = \"d\"\nrun = [[\"true\"]]\n[[figures]]\nname = \"a\"\nregex = '(1)'\nagg = \"median\"\n";
        let e = toml::from_str::<Spec>(text).unwrap_err().to_string();
        assert!(e.contains("median") && e.contains("last"), "{e}");
    }

    #[test]
    fn optional_figures() {
        let s = spec(
            r#"
name = "t"
description = "d"
[[figures]]
name = "always"
regex = 'always ([0-9]+)'
[[figures]]
name = "sometimes"
regex = 'sometimes ([0-9]+)'
optional = true
[[configs]]
name = "plain"
[[configs]]
name = "needs_it"
min = { sometimes = 1 }
"#,
        );
        let v = Vars::new();
        // missing, an optional figure leaves the row without it; a required one is still an error
        let f = parse_figures(&s, "always 3\n", &v).unwrap();
        assert_eq!(f.get("sometimes"), None);
        assert!(parse_figures(&s, "sometimes 1\n", &v).is_err());
        // a threshold on a missing optional figure fails the row that sets it, not the other
        let mut rows: Vec<Row> = ["plain", "needs_it"]
            .iter()
            .map(|config| Row {
                model: "m".into(),
                config: config.to_string(),
                figures: f.clone(),
                ..Default::default()
            })
            .collect();
        assert!(!finish(&s, &mut rows, None));
        assert!(rows[0].ok);
        assert!(!rows[1].ok);
    }

    #[test]
    fn figures_derived_and_thresholds() {
        let s = spec(
            r#"
name = "t"
description = "d"
[[figures]]
name = "kld"
regex = 'Mean\s+KLD:\s+([0-9.]+)'
[[figures]]
name = "ok_lines"
regex = 'OK'
agg = "count"
[[derived]]
name = "ratio"
figure = "kld"
over = "base"
[[configs]]
name = "base"
[[configs]]
name = "q"
max = { kld = 0.05 }
"#,
        );
        let v = Vars::new();
        let f = parse_figures(&s, "x\nMean    KLD:   0.040000 ± 0.1\nOK OK\n", &v).unwrap();
        assert_eq!(f["kld"], 0.04);
        assert_eq!(f["ok_lines"], 2.0);
        assert!(parse_figures(&s, "nothing", &v).is_err());
        let mut rows = vec![
            Row {
                model: "m".into(),
                config: "base".into(),
                figures: [("kld".to_string(), 0.02)].into(),
                ..Default::default()
            },
            Row {
                model: "m".into(),
                config: "q".into(),
                figures: [("kld".to_string(), 0.06)].into(),
                ..Default::default()
            },
        ];
        assert!(!finish(&s, &mut rows, None));
        assert!(rows[0].ok);
        assert!(!rows[1].ok);
        assert_eq!(rows[1].figures["ratio"], 3.0);
    }

    /// The frontier limit comes from the reference row of the same run, with
    /// derived bits, and a configuration above it fails.
    #[test]
    fn frontier_rule() {
        let s = spec(
            r#"
name = "t"
description = "d"
[[figures]]
name = "kld"
regex = 'x'
[[figures]]
name = "mib"
regex = 'y'
[[derived]]
name = "bpv"
figure = "mib"
over = "f16"
scale = 16.0
[frontier]
figure = "kld"
bits = "bpv"
reference = "q4"
slope = 4.0
limit_name = "kld_limit"
configs = ["t3", "t2"]
[[configs]]
name = "f16"
[[configs]]
name = "q4"
[[configs]]
name = "t3"
[[configs]]
name = "t2"
"#,
        );
        let row = |config: &str, kld: f64, mib: f64| Row {
            model: "m".into(),
            config: config.into(),
            figures: [("kld".to_string(), kld), ("mib".to_string(), mib)].into(),
            ..Default::default()
        };
        // bits: f16 16, q4 4.5, t3 3.5, t2 2.5 → limits 0.1·4 = 0.4 and 0.1·16 = 1.6
        let mut rows = vec![
            row("f16", 0.0, 32.0),
            row("q4", 0.1, 9.0),
            row("t3", 0.39, 7.0),
            row("t2", 1.7, 5.0),
        ];
        assert!(!finish(&s, &mut rows, None));
        assert!((rows[2].figures["kld_limit"] - 0.4).abs() < 1e-12);
        assert!(rows[2].ok);
        assert!((rows[3].figures["kld_limit"] - 1.6).abs() < 1e-12);
        assert!(!rows[3].ok);
        assert!(rows[0].ok && rows[1].ok);
        assert!(!rows[0].figures.contains_key("kld_limit"));
        assert_eq!(rows[3].figures["frontier_ok"], 0.0);

        // A reported-only row shows the miss without failing the gate.
        let mut s = s;
        if let Some(f) = s.frontier.as_mut() {
            f.report_only.push(crate::gate::ReportOnly {
                config: "t2".into(),
                model: None,
                why: "w".into(),
            });
        }
        assert!(finish(&s, &mut rows, None));
        assert_eq!(rows[3].figures["frontier_ok"], 0.0);
        assert!(rows[3].ok);
    }

    /// `below`: a configuration's figure must be strictly under another
    /// configuration's, same model; a missing reference fails.
    #[test]
    fn below_another_configuration() {
        let s = spec(
            r#"
name = "t"
description = "d"
[[configs]]
name = "scalar"
[[configs]]
name = "trellis"
below = { kld = "scalar" }
[[figures]]
name = "kld"
regex = 'x'
"#,
        );
        let row = |model: &str, config: &str, kld: f64| one_figure_row(model, config, "kld", kld);
        let mut rows = vec![
            row("a", "scalar", 0.2),
            row("a", "trellis", 0.15),
            row("b", "scalar", 0.2),
            row("b", "trellis", 0.2),
            row("c", "trellis", 0.01),
        ];
        assert!(!finish(&s, &mut rows, None));
        assert!(rows[1].ok);
        assert!(!rows[3].ok, "equal is not below");
        assert!(!rows[4].ok, "no reference row for model c");
        let c = rows[1]
            .checks
            .iter()
            .find(|c| c.op == "below(scalar)")
            .unwrap();
        assert_eq!(c.threshold, 0.2);
    }

    /// Manual rows: `--all` leaves them out with the comparisons that name
    /// them, and says so; named, the gate runs and compares everything. A
    /// row every run needs (a ratio's denominator) cannot be manual.
    #[test]
    fn manual_rows() {
        let text = r#"
name = "t"
description = "d"
[[figures]]
name = "kld"
regex = 'x'
[frontier]
figure = "kld"
bits = "bpv"
reference = "ref"
slope = 4.0
limit_name = "lim"
configs = ["trellis", "ablation"]
[[configs]]
name = "ref"
[[configs]]
name = "ablation"
manual = "an ablation"
[[configs]]
name = "trellis"
below = { kld = "ablation" }
"#;
        let full = spec(text);
        assert!(full.omitted.is_empty());
        let ci = full.without_manual_rows();
        let names: Vec<&str> = ci.configs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["ref", "trellis"]);
        assert!(ci.configs[1].below.is_empty());
        assert_eq!(ci.frontier.as_ref().unwrap().configs, ["trellis"]);
        assert_eq!(
            ci.omitted,
            [("ablation".to_string(), "an ablation".to_string())]
        );
        assert!(notes(&ci, None)
            .iter()
            .any(|n| n.contains("ablation (an ablation)")));
        // Without the ablation row the comparison is not made (not failed) ...
        let row = |config: &str, kld: f64| one_figure_row("m", config, "kld", kld);
        let mut rows = vec![row("trellis", 0.3)];
        finish(&ci, &mut rows, None);
        assert!(!rows[0].checks.iter().any(|c| c.op.starts_with("below")));
        // ... and named, it is made and can fail.
        let mut rows = vec![row("ablation", 0.2), row("trellis", 0.3)];
        finish(&full, &mut rows, None);
        let below = rows[1]
            .checks
            .iter()
            .find(|c| c.op == "below(ablation)")
            .unwrap();
        assert!(!below.ok);

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(
            &p,
            "name = \"t\"\ndescription = \"d\"\nrun = [[\"x\"]]\n[[derived]]\nname = \"r\"\nfigure = \"kld\"\nover = \"q\"\n[[configs]]\nname = \"q\"\nmanual = \"m\"\n",
        )
        .unwrap();
        let e = crate::gate::Spec::load(&p).unwrap_err().to_string();
        assert!(e.contains("which is manual"), "{e}");
    }

    /// A configuration that names models runs for those only; a model it
    /// names must be one of the gate's.
    #[test]
    fn configurations_for_some_models() {
        let dir = tempfile::tempdir().unwrap();
        let gate = |body: &str| {
            let p = dir.path().join("t.toml");
            std::fs::write(
                &p,
                format!(
                    "name = \"t\"\ndescription = \"d\"\nmodels = [\"a\", \"b\"]\nrun = [[\"sh\", \"-c\", \"echo v 1\"]]\n[[figures]]\nname = \"v\"\nregex = 'v ([0-9]+)'\n{body}"
                ),
            )
            .unwrap();
            crate::gate::Spec::load(&p)
        };
        let s =
            gate("[[configs]]\nname = \"all\"\n[[configs]]\nname = \"only b\"\nmodels = [\"b\"]\n")
                .unwrap();
        let ctx = GateCtx {
            bin_dir: dir.path().into(),
            tree: "t".into(),
            models: BTreeMap::new(),
            text: dir.path().join("text"),
            scratch: dir.path().to_path_buf(),
            python: None,
            gates_dir: dir.path().into(),
        };
        let rows: Vec<(String, String)> = run_commands(&s, &ctx)
            .into_iter()
            .map(|r| (r.model, r.config))
            .collect();
        let pair = |m: &str, c: &str| (m.to_string(), c.to_string());
        assert_eq!(
            rows,
            [pair("a", "all"), pair("b", "all"), pair("b", "only b")]
        );
        assert_eq!(s.row_count(), rows.len());
        let e = gate("[[configs]]\nname = \"x\"\nmodels = [\"c\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("names model `c`"), "{e}");
    }

    #[test]
    fn below_must_name_another_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(
            &p,
            "name = \"t\"\ndescription = \"d\"\nrun = [[\"x\"]]\n[[configs]]\nname = \"a\"\nbelow = { kld = \"nope\" }\n",
        )
        .unwrap();
        let e = crate::gate::Spec::load(&p).unwrap_err().to_string();
        assert!(e.contains("must be below `nope`"), "{e}");
    }

    /// A reported-only row that misses a threshold passes the gate, marked;
    /// an error on such a row still fails it.
    #[test]
    fn report_only_rows() {
        let s = spec(
            r#"
name = "t"
description = "d"
[[figures]]
name = "recall"
regex = 'x'
[min]
recall = 0.5
[[report_only]]
config = "small"
model = "m"
why = "too coarse"
[[configs]]
name = "big"
[[configs]]
name = "small"
"#,
        );
        let row = |model: &str, config: &str, recall: f64| {
            one_figure_row(model, config, "recall", recall)
        };
        let mut rows = vec![row("m", "big", 1.0), row("m", "small", 0.0)];
        assert!(finish(&s, &mut rows, None));
        assert!(rows[1].ok && rows[1].reported);
        assert!(!rows[0].reported);
        assert!(notes(&s, None)[0].contains("small on m: too coarse"));
        // Another model is not covered.
        let mut rows = vec![row("n", "small", 0.0)];
        assert!(!finish(&s, &mut rows, None));
        // An error is never reported away.
        let mut rows = vec![row("m", "small", 0.0)];
        rows[0].error = Some("crashed".into());
        assert!(!finish(&s, &mut rows, None));
    }

    /// A configuration's `env` reaches its run commands (and is shown in the log).
    #[cfg(unix)]
    #[test]
    fn configuration_env_reaches_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("run.log");
        let argv: Vec<String> = ["sh", "-c", "echo value=$POLYKV_GATE_TEST"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut env = BTreeMap::new();
        env.insert("POLYKV_GATE_TEST".to_string(), "on".to_string());
        run_command(&argv, &env, &log, Duration::from_secs(30)).unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("value=on"), "{text}");
        assert!(text.contains("$ POLYKV_GATE_TEST=on sh"), "{text}");
        std::fs::remove_file(&log).unwrap();
        run_command(&argv, &BTreeMap::new(), &log, Duration::from_secs(30)).unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("value=\n"), "{text}");
    }
}
