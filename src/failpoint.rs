//! Test-only fault injection: `POLYKV_FORGE_FAILPOINT=name[:millis]` makes the
//! process pause at the named point (forever, or for `millis`), so tests can
//! kill it with SIGKILL or race a second process against it. Unset in normal
//! use; costs one environment lookup per point.

use std::time::Duration;

pub fn hit(name: &str) {
    let Ok(spec) = std::env::var("POLYKV_FORGE_FAILPOINT") else {
        return;
    };
    let (point, millis) = match spec.split_once(':') {
        Some((p, m)) => (p, m.parse::<u64>().ok()),
        None => (spec.as_str(), None),
    };
    if point != name {
        return;
    }
    eprintln!("failpoint {name}: pausing (pid {})", std::process::id());
    match millis {
        Some(ms) => std::thread::sleep(Duration::from_millis(ms)),
        None => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
    }
}
