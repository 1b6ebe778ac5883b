//! Sources that can produce the pinned upstream tree: git, pip-sdist, archive
//! and directory. Whatever the source, the tree id is computed here from the
//! materialized files and must equal the pin; a verified tree is cached.

use anyhow::{anyhow, bail, Context, Result};
use git2::Oid;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::manifest::{Manifest, Source};
use crate::store::{SourceRecord, Store};
use crate::tree::{self, TreeWriter, MODE_LINK};

/// The verified base tree and where it came from.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Base {
    pub tree: String,
    pub source: String,
    pub files: usize,
    pub cached: bool,
}

/// Settings for resolving the base.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `--source PATH[#subdir]` or `POLYKV_FORGE_SOURCE`: a directory or archive.
    pub override_source: Option<String>,
    /// Import again even when the cache holds the tree.
    pub refresh: bool,
}

/// Returns the verified base tree, importing it from the first source that
/// produces it when the cache does not hold it yet.
pub fn ensure_base(store: &Store, manifest: &Manifest, req: &Request) -> Result<Base> {
    let pin = manifest.tree_oid()?;
    if !req.refresh && store.has_base(pin) {
        return Ok(cached(store, pin));
    }
    let _lock = store.lock()?;
    if !req.refresh && store.has_base(pin) {
        return Ok(cached(store, pin));
    }
    let candidates: Vec<Source> = match &req.override_source {
        Some(spec) => vec![override_to_source(spec, manifest)?],
        None => manifest.upstream.sources.clone(),
    };
    if candidates.is_empty() {
        bail!("vendor-manifest.toml lists no sources and no --source was given");
    }
    let mut failures = Vec::new();
    for src in &candidates {
        crate::progress::note(&format!("vendor: trying {}", src.describe()));
        match import(store, manifest, src) {
            Ok((tree, files)) if tree == pin => {
                let record = SourceRecord {
                    tree: tree.to_string(),
                    source: src.describe(),
                    files,
                    imported_at_unix: std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs())
                        .unwrap_or(0),
                };
                store.add_base(tree, &record)?;
                return Ok(Base {
                    tree: tree.to_string(),
                    source: record.source,
                    files,
                    cached: false,
                });
            }
            Ok((tree, files)) => failures.push(format!(
                "{}: produced tree {tree} ({files} files), but the pin is {pin}; refusing it",
                src.describe()
            )),
            Err(e) => failures.push(format!("{}: {e:#}", src.describe())),
        }
    }
    Err(anyhow!(
        "no source produced the pinned tree {pin}:\n  - {}",
        failures.join("\n  - ")
    ))
}

fn cached(store: &Store, pin: Oid) -> Base {
    let rec = store.base_record(pin);
    Base {
        tree: pin.to_string(),
        source: rec
            .as_ref()
            .map(|r| r.source.clone())
            .unwrap_or_else(|| "unknown".into()),
        files: rec.map(|r| r.files).unwrap_or(0),
        cached: true,
    }
}

/// `PATH[#subdir]`: a directory, or an archive whose subdir defaults to the
/// manifest's pip-sdist subdir when the archive holds it.
fn override_to_source(spec: &str, manifest: &Manifest) -> Result<Source> {
    let (path, subdir) = match spec.split_once('#') {
        Some((p, s)) => (p, Some(s.to_string())),
        None => (spec, None),
    };
    let path = crate::fsx::absolute(Path::new(path))?;
    let meta = std::fs::metadata(&path).with_context(|| format!("--source {}", path.display()))?;
    if meta.is_dir() {
        if subdir.is_some() {
            bail!("--source: `#subdir` is only for archives; name the directory itself");
        }
        return Ok(Source::Dir { path });
    }
    let bytes = crate::fsx::read(&path)?;
    let subdir = subdir.unwrap_or_else(|| {
        manifest
            .upstream
            .sources
            .iter()
            .find_map(|s| match s {
                Source::PipSdist { subdir, .. } => Some(subdir.clone()),
                _ => None,
            })
            .unwrap_or_default()
    });
    Ok(Source::Archive {
        url: None,
        path: Some(path),
        sha256: sha256_hex(&bytes),
        subdir,
    })
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

fn import(store: &Store, manifest: &Manifest, src: &Source) -> Result<(Oid, usize)> {
    match src {
        Source::Dir { path } => tree::import_dir(&store.repo, path, &|_| false),
        Source::Archive {
            url,
            path,
            sha256,
            subdir,
        } => {
            let file = match (url, path) {
                (_, Some(p)) => p.clone(),
                (Some(u), None) => fetch_url(store, u, sha256)?,
                (None, None) => bail!("archive source without url or path"),
            };
            verify_sha256(&file, sha256)?;
            import_archive(store, &file, subdir)
        }
        Source::PipSdist {
            package,
            version,
            sha256,
            subdir,
        } => {
            let file = pip_download_sdist(store, package, version, sha256)?;
            import_archive(store, &file, subdir)
        }
        Source::Git { url } => import_git(store, url, &manifest.upstream.commit),
    }
}

fn verify_sha256(file: &Path, expected: &str) -> Result<()> {
    let got = sha256_file(file)?;
    if !got.eq_ignore_ascii_case(expected) {
        bail!(
            "{}: sha256 is {got}, expected {expected}; the download is corrupt or not the pinned release",
            file.display()
        );
    }
    Ok(())
}

/// Downloads a source distribution with the machine's own pip, verifies its
/// hash, and keeps it content-addressed under the cache's downloads/
/// (`install::Install`: a kept file whose hash is wrong is downloaded again).
pub fn pip_download_sdist(
    store: &Store,
    package: &str,
    version: &str,
    sha256: &str,
) -> Result<PathBuf> {
    let dl = store.downloads_dir();
    let kept = dl.join(format!("{sha256}.sdist"));
    let ready = |p: &Path| p.is_file() && sha256_file(p).is_ok_and(|h| h == sha256);
    let install = crate::install::Install {
        dest: &kept,
        lock: &dl.join("sdists.lock"),
        ready: &ready,
        refresh: false,
    };
    install.run(|tmp, scratch| {
        let spec = format!("{package}=={version}");
        crate::progress::note(&format!(
            "vendor: pip download {spec} (source distribution)"
        ));
        let file = crate::pip::download(&spec, crate::pip::Dist::Sdist { package }, scratch)?;
        verify_sha256(&file, sha256)?;
        std::fs::rename(&file, tmp).with_context(|| format!("keeping {}", kept.display()))
    })
}

fn fetch_url(store: &Store, url: &str, sha256: &str) -> Result<PathBuf> {
    let dl = store.downloads_dir();
    crate::fsx::create_dir_all(&dl)?;
    let kept = dl.join(format!("{sha256}.archive"));
    if kept.exists() {
        if sha256_file(&kept)?.eq_ignore_ascii_case(sha256) {
            return Ok(kept);
        }
        // Left by an older version that kept downloads before checking them.
        std::fs::remove_file(&kept)
            .with_context(|| format!("removing the corrupt {}", kept.display()))?;
    }
    // A temporary file in the downloads folder: checked before it is kept,
    // removed whatever happens otherwise.
    let part = tempfile::Builder::new()
        .prefix(&format!("{sha256}."))
        .suffix(".part")
        .tempfile_in(&dl)
        .context("creating a download file")?;
    crate::progress::note(&format!("vendor: downloading {url}"));
    crate::http::download(url, part.path())?;
    verify_sha256(part.path(), sha256).with_context(|| format!("downloaded from {url}"))?;
    part.persist(&kept)
        .map_err(|e| e.error)
        .with_context(|| format!("keeping {}", kept.display()))?;
    Ok(kept)
}

enum ArchiveKind {
    TarGz,
    Zip,
}

fn sniff(path: &Path) -> Result<ArchiveKind> {
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    f.read_exact(&mut magic)
        .with_context(|| format!("{}: too short to be an archive", path.display()))?;
    match magic {
        [0x1f, 0x8b, ..] => Ok(ArchiveKind::TarGz),
        [b'P', b'K', 3, 4] => Ok(ArchiveKind::Zip),
        _ => bail!("{}: neither a .tar.gz nor a .zip archive", path.display()),
    }
}

/// One file taken from an archive, already stored as a blob.
struct Taken {
    path: Vec<u8>,
    mode: u32,
    oid: Oid,
}

/// Imports `subdir` of an archive. The subdir is looked up both at the
/// archive's root and below its single top-level directory (as in sdists).
pub fn import_archive(store: &Store, file: &Path, subdir: &str) -> Result<(Oid, usize)> {
    let subdir = subdir.trim_matches('/');
    let mut entries: Vec<Taken> = Vec::new();
    let mut add = |path: Vec<u8>, mode: u32, data: &[u8]| -> Result<()> {
        let oid = store
            .repo
            .blob(data)
            .context("writing a blob to the cache")?;
        entries.push(Taken { path, mode, oid });
        Ok(())
    };
    let size = std::fs::metadata(file)
        .with_context(|| format!("reading {}", file.display()))?
        .len();
    let pb = crate::progress::bytes(size, "extracting");
    match sniff(file)? {
        ArchiveKind::TarGz => {
            let f =
                std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
            let gz = flate2::read::GzDecoder::new(pb.wrap_read(f));
            let mut ar = tar::Archive::new(gz);
            for e in ar
                .entries()
                .with_context(|| format!("reading {}", file.display()))?
            {
                let mut e = e.with_context(|| format!("reading an entry of {}", file.display()))?;
                let path = e.path_bytes().trim_ascii_end().to_vec();
                let path = strip_dot_slash(&path);
                check_archive_path(&path)?;
                let kind = e.header().entry_type();
                match kind {
                    tar::EntryType::Directory => {}
                    tar::EntryType::Regular | tar::EntryType::Continuous => {
                        let mode = tree::mode_for_permissions(e.header().mode().unwrap_or(0o644));
                        let mut data = Vec::with_capacity(e.size() as usize);
                        e.read_to_end(&mut data)
                            .with_context(|| format!("reading {} from the archive", show(&path)))?;
                        add(path, mode, &data)?;
                    }
                    tar::EntryType::Symlink => {
                        let target = e
                            .link_name_bytes()
                            .map(|c| c.to_vec())
                            .unwrap_or_default();
                        if !crate::paths::symlink_stays_inside(&path, &target) {
                            bail!(
                                "archive entry {} is a symlink pointing outside the tree ({})",
                                show(&path),
                                show(&target)
                            );
                        }
                        add(path, MODE_LINK, &target)?;
                    }
                    tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => {}
                    other => bail!(
                        "archive entry {} has an unsupported type ({other:?}); hard links and devices are refused",
                        show(&path)
                    ),
                }
            }
        }
        ArchiveKind::Zip => {
            let f =
                std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
            let mut zip = zip::ZipArchive::new(f)
                .with_context(|| format!("reading zip {}", file.display()))?;
            for i in 0..zip.len() {
                let mut z = zip.by_index(i).context("reading a zip entry")?;
                let path = strip_dot_slash(z.name_raw());
                check_archive_path(&path)?;
                if z.is_dir() {
                    continue;
                }
                let unix = z.unix_mode().unwrap_or(0o100644);
                let mut data = Vec::with_capacity(z.size() as usize);
                z.read_to_end(&mut data)
                    .with_context(|| format!("reading {} from the zip", show(&path)))?;
                if unix & 0o170000 == 0o120000 {
                    if !crate::paths::symlink_stays_inside(&path, &data) {
                        bail!(
                            "archive entry {} is a symlink pointing outside the tree ({})",
                            show(&path),
                            show(&data)
                        );
                    }
                    add(path, MODE_LINK, &data)?;
                } else {
                    add(path, tree::mode_for_permissions(unix), &data)?;
                }
                pb.set_position(i as u64);
            }
        }
    }
    pb.finish_and_clear();
    select_subdir(store, entries, subdir)
}

fn strip_dot_slash(p: &[u8]) -> Vec<u8> {
    let mut p = p;
    while let Some(rest) = p.strip_prefix(b"./") {
        p = rest;
    }
    p.strip_suffix(b"/").unwrap_or(p).to_vec()
}

fn check_archive_path(path: &[u8]) -> Result<()> {
    if path.is_empty() || path == b"." {
        return Ok(());
    }
    if path.starts_with(b"/") || path.split(|&b| b == b'/').any(|c| c == b"..") {
        bail!(
            "archive entry {} escapes the extraction directory; refusing the archive",
            show(path)
        );
    }
    Ok(())
}

fn show(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

fn select_subdir(store: &Store, entries: Vec<Taken>, subdir: &str) -> Result<(Oid, usize)> {
    // A single top-level directory (as in sdists and GitHub archives) is stripped.
    let first_comp = |p: &[u8]| p.split(|&b| b == b'/').next().map(|c| c.to_vec());
    let top = entries.first().and_then(|e| first_comp(&e.path));
    let single_top = top.as_ref().is_some_and(|t| {
        entries
            .iter()
            .all(|e| e.path.len() > t.len() && e.path.starts_with(t) && e.path[t.len()] == b'/')
    });
    let mut prefixes: Vec<Vec<u8>> = Vec::new();
    if let (true, Some(t)) = (single_top, &top) {
        let mut p = t.clone();
        p.push(b'/');
        if !subdir.is_empty() {
            p.extend_from_slice(subdir.as_bytes());
            p.push(b'/');
        }
        prefixes.push(p);
    }
    if !subdir.is_empty() {
        prefixes.push(format!("{subdir}/").into_bytes());
    }
    for prefix in prefixes {
        let mut w = TreeWriter::new(&store.repo)?;
        for e in &entries {
            if let Some(rel) = e.path.strip_prefix(prefix.as_slice()) {
                if rel.split(|&b| b == b'/').any(|c| c == b".git") {
                    continue;
                }
                w.add_oid(rel, e.mode, e.oid)?;
            }
        }
        if !w.is_empty() {
            let n = w.len();
            return Ok((w.write()?, n));
        }
    }
    bail!("the archive holds no files under `{subdir}`")
}

fn import_git(store: &Store, url: &str, commit: &str) -> Result<(Oid, usize)> {
    let oid = Oid::from_str(commit).context("parsing upstream.commit")?;
    if store.repo.find_commit(oid).is_err() {
        let mut remote = store
            .repo
            .remote_anonymous(url)
            .with_context(|| format!("creating a remote for {url}"))?;
        let mut fo = git2::FetchOptions::new();
        fo.depth(1);
        let pb = crate::progress::bar(0, "fetching objects");
        let pb2 = pb.clone();
        let mut cb = git2::RemoteCallbacks::new();
        cb.transfer_progress(move |p| {
            let pb = &pb2;
            pb.set_length(p.total_objects() as u64);
            pb.set_position(p.received_objects() as u64);
            true
        });
        fo.remote_callbacks(cb);
        remote
            .fetch(&[commit], Some(&mut fo), None)
            .with_context(|| format!("fetching commit {commit} from {url}"))?;
        pb.finish_and_clear();
    }
    let c = store
        .repo
        .find_commit(oid)
        .with_context(|| format!("commit {commit} is not in what {url} sent"))?;
    // Objects were hash-checked by the pack indexer; count the files by listing.
    let tree = c.tree_id();
    let n = tree::list(&store.repo, tree)?.len();
    Ok((tree, n))
}
