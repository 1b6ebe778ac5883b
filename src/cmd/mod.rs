//! Commands as modules: each takes resolved settings and returns a typed
//! report that the printer shows as text or as JSON. `cli` only parses,
//! resolves the project once, dispatches and prints. (Moved so far: the
//! chain's commands; build, gate, gen, model, rebase and toolkit still run
//! inside `cli`, #17.)

pub mod apply;
pub mod build;
pub mod edit;
pub mod export;
pub mod gate;
pub mod gen;
pub mod metal_check;
pub mod model;
pub mod rebase;
pub mod status;
pub mod toolkit;
pub mod vendor;
pub mod verify;

pub use crate::printer::Report;

/// Where a user-given directory resolves to, else the default.
pub fn dir_or(
    given: Option<&std::path::Path>,
    default: std::path::PathBuf,
) -> anyhow::Result<std::path::PathBuf> {
    match given {
        Some(d) => crate::fsx::absolute(d),
        None => Ok(default),
    }
}

/// The first 12 characters of an id.
pub fn short(id: &str) -> &str {
    crate::show::prefix(id, 12)
}

/// `NAME RELEASE commit SHORT tree TREE`, the pin as status and verify show it.
pub fn pin_line(u: &crate::manifest::Upstream, tree: &str) -> String {
    format!(
        "{} {} commit {} tree {tree}",
        u.name,
        u.release.as_deref().unwrap_or(""),
        short(&u.commit)
    )
}
