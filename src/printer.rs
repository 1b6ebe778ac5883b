//! The one printer: a command's report as one JSON document on stdout
//! (`--json`) or as text, and an error (as text on stderr, or as a JSON
//! document on stdout under `--json`) with its exit code: 0 ok, 1 a check
//! failed, 2 usage or environment error.

use serde::Serialize;

use crate::error::{ApplyError, CheckFailed};
use crate::proc::ProcError;

/// Writes `text` and a newline to stdout. A reader that went away (`| head`)
/// is not an error: the rest is dropped, as ripgrep does, instead of a panic.
pub fn line(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Prints `v` as pretty JSON on stdout.
pub fn json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    line(&serde_json::to_string_pretty(v)?)?;
    Ok(())
}

/// What a command hands back to be printed.
pub trait Report: Serialize {
    /// The text a person reads (printed on stdout without `--json`).
    fn human(&self) -> String;

    /// 0, or 1 when the command's check failed (its report still printed).
    fn exit_code(&self) -> i32 {
        0
    }
}

/// Prints a command's report (JSON or its text) and returns its exit code.
pub fn report<R: Report>(r: &R, as_json: bool) -> anyhow::Result<i32> {
    if as_json {
        json(r)?;
    } else {
        let text = r.human();
        if !text.is_empty() {
            line(&text)?;
        }
    }
    Ok(r.exit_code())
}

/// What kind of failure an error is; callers of `--json` branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A check ran and did not hold (exit 1).
    CheckFailed,
    /// A patch did not apply strictly (exit 1).
    Apply,
    /// A program the forge ran went past its timeout (exit 2).
    Timeout,
    /// The command line was not understood (exit 2).
    Usage,
    /// Anything else: missing files or programs, bad input, I/O (exit 2).
    Environment,
}

impl Kind {
    pub fn of(e: &anyhow::Error) -> Kind {
        for c in e.chain() {
            if c.is::<CheckFailed>() {
                return Kind::CheckFailed;
            }
            if c.is::<ApplyError>() {
                return Kind::Apply;
            }
            if let Some(ProcError::Timeout { .. }) = c.downcast_ref::<ProcError>() {
                return Kind::Timeout;
            }
        }
        Kind::Environment
    }

    pub fn exit_code(self) -> i32 {
        match self {
            Kind::CheckFailed | Kind::Apply => 1,
            Kind::Timeout | Kind::Usage | Kind::Environment => 2,
        }
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    kind: Kind,
    message: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    causes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    apply: Option<&'a ApplyError>,
}

#[derive(Serialize)]
struct ErrorDoc<'a> {
    ok: bool,
    error: ErrorBody<'a>,
}

fn error_doc(
    kind: Kind,
    message: String,
    causes: Vec<String>,
    apply: Option<&ApplyError>,
) -> String {
    let doc = ErrorDoc {
        ok: false,
        error: ErrorBody {
            kind,
            message,
            causes,
            apply,
        },
    };
    serde_json::to_string_pretty(&doc).unwrap_or_else(|_| {
        // Serializing strings and plain enums cannot fail; keep a document anyway.
        r#"{"ok": false, "error": {"kind": "environment", "message": "unprintable error"}}"#.into()
    })
}

/// Prints an error and returns its exit code.
pub fn error(e: &anyhow::Error, as_json: bool) -> i32 {
    let kind = Kind::of(e);
    if as_json {
        let apply = e.chain().find_map(|c| c.downcast_ref::<ApplyError>());
        let causes = e.chain().skip(1).map(|c| c.to_string()).collect();
        let _ = line(&error_doc(kind, e.to_string(), causes, apply).to_string());
    } else {
        eprintln!("error: {e}");
        for cause in e.chain().skip(1) {
            eprintln!("  caused by: {cause}");
        }
    }
    kind.exit_code()
}

/// Prints a command-line error (clap's) and returns its exit code: help and
/// version requests are not errors.
pub fn usage(e: &clap::Error, as_json: bool) -> i32 {
    if !e.use_stderr() {
        let _ = e.print();
        return 0;
    }
    if as_json {
        let message = e.kind().to_string();
        let detail = e.to_string();
        let doc = error_doc(
            Kind::Usage,
            message,
            vec![detail.trim_end().to_string()],
            None,
        );
        let _ = line(&doc.to_string());
    } else {
        let _ = e.print();
    }
    Kind::Usage.exit_code()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_exit_codes() {
        let check: anyhow::Error = CheckFailed {
            summary: "verify found problems".into(),
        }
        .into();
        assert_eq!(Kind::of(&check), Kind::CheckFailed);
        assert_eq!(Kind::of(&check).exit_code(), 1);
        let wrapped = anyhow::Error::from(ApplyError {
            patch: "0002-x.patch".into(),
            path: "a.c".into(),
            hunk: "@@ -1 +1 @@".into(),
            reason: "context".into(),
            reverse: false,
        })
        .context("applying the series");
        assert_eq!(Kind::of(&wrapped), Kind::Apply);
        let other = anyhow::anyhow!("no vendor-manifest.toml");
        assert_eq!(Kind::of(&other), Kind::Environment);
        assert_eq!(Kind::of(&other).exit_code(), 2);
    }

    #[test]
    fn an_error_document_carries_kind_message_causes_and_the_apply_error() {
        let a = ApplyError {
            patch: "0002-x.patch".into(),
            path: "a.c".into(),
            hunk: "@@ -1 +1 @@".into(),
            reason: "context".into(),
            reverse: true,
        };
        let text = error_doc(Kind::Apply, "top".into(), vec!["inner".into()], Some(&a));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["kind"], "apply");
        assert_eq!(v["error"]["message"], "top");
        assert_eq!(v["error"]["causes"][0], "inner");
        assert_eq!(v["error"]["apply"]["patch"], "0002-x.patch");
        assert_eq!(v["error"]["apply"]["reverse"], true);
        let plain: serde_json::Value =
            serde_json::from_str(&error_doc(Kind::Environment, "m".into(), vec![], None)).unwrap();
        assert!(plain["error"].get("causes").is_none() && plain["error"].get("apply").is_none());
    }
}
