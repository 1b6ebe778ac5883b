//! Progress reporting: indicatif bars on a terminal, nothing otherwise.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

fn enabled() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("POLYKV_FORGE_NO_PROGRESS").is_none()
}

/// A bar counting `len` items (0 = unknown length: a spinner).
pub fn bar(len: u64, message: &str) -> ProgressBar {
    if !enabled() {
        return ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
    }
    let pb = if len == 0 {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::new(len)
    };
    let template = if len == 0 {
        "{spinner} {msg} {pos} [{elapsed}]"
    } else {
        "{msg} [{bar:30}] {pos}/{len} [{elapsed}]"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(message.to_string());
    pb
}

/// A byte-counting bar.
pub fn bytes(len: u64, message: &str) -> ProgressBar {
    let pb = bar(len, message);
    if enabled() {
        if let Ok(style) =
            ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} [{elapsed}]")
        {
            pb.set_style(style.progress_chars("=> "));
        }
    }
    pb
}

/// Prints a status line to stderr (always; it is not progress noise).
pub fn note(msg: &str) {
    eprintln!("{msg}");
}
