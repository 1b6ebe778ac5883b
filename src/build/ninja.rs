//! Ninja: the plan's command for chosen targets, the targets a configured
//! build defines, its `[n/m]` progress lines, and the excerpt of a failed
//! build's log worth showing.

use anyhow::{bail, Result};
use std::path::Path;

use super::Plan;

/// The plan's Ninja command with `targets` in place of the plan's.
pub fn ninja_argv(plan: &Plan, targets: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = plan.build[..plan.build.len() - plan.targets.len()].to_vec();
    argv.extend(targets.iter().cloned());
    argv
}

/// The targets a configured build directory defines (`ninja -t targets all`).
pub fn ninja_targets(build_dir: &Path) -> Result<std::collections::BTreeSet<String>> {
    let out = crate::proc::Cmd::new("ninja")
        .arg("-C")
        .arg(build_dir)
        .args(["-t", "targets", "all"])
        .read()?;
    Ok(parse_ninja_targets(&String::from_utf8_lossy(&out.stdout)))
}

/// `name: rule` lines; paths (with a `/`) are files, not target names.
pub fn parse_ninja_targets(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.rsplit_once(": ").map(|(name, _)| name.trim()))
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .map(str::to_string)
        .collect()
}

/// Splits the plan's targets into those to build and default ones the
/// configuration does not define. A target the user named that is not
/// defined is an error naming it.
pub fn resolve_targets(
    plan: &Plan,
    defined: &std::collections::BTreeSet<String>,
) -> Result<(Vec<String>, Vec<String>)> {
    let (ok, missing): (Vec<String>, Vec<String>) = plan
        .targets
        .iter()
        .cloned()
        .partition(|t| defined.contains(t));
    if !missing.is_empty() && !plan.default_targets {
        bail!(
            "the configured {} build defines no target {} (see `ninja -C {} -t targets all`)",
            plan.variant.name(),
            missing
                .iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(", "),
            plan.build_dir
        );
    }
    if ok.is_empty() {
        bail!(
            "the configured {} build defines none of the targets {}",
            plan.variant.name(),
            plan.targets.join(", ")
        );
    }
    Ok((ok, missing))
}

pub fn ninja_progress(line: &str) -> Option<(u64, u64)> {
    let inner = line.strip_prefix('[')?.split(']').next()?;
    let (n, m) = inner.split_once('/')?;
    Some((n.trim().parse().ok()?, m.trim().parse().ok()?))
}

/// The first compiler error and its surroundings, or the log's last lines.
pub fn last_error(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    if let Some(i) = lines
        .iter()
        .position(|l| l.contains("error:") || l.contains("Error") || l.starts_with("FAILED:"))
    {
        let end = (i + 15).min(lines.len());
        return lines[i.saturating_sub(2)..end].join("\n");
    }
    lines[lines.len().saturating_sub(20)..].join("\n")
}
