//! `toolkit cuda`: CUDA's compiler and headers from the package index, for
//! compile checks on machines without a GPU.

use anyhow::Result;
use serde::Serialize;

use super::Report;
use crate::project::Project;

#[derive(Serialize)]
pub struct Cuda {
    pub cuda_home: String,
    pub nvcc: String,
    pub version: String,
    /// With `--dry-run` and no toolkit in the cache: the wheels it would download.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub would_download: Vec<String>,
}

pub fn cuda(project: &Project, refresh: bool, dry_run: bool) -> Result<Cuda> {
    let store = project.store()?;
    let cached = crate::toolkit::cached_cuda_home(&store.root).filter(|_| !refresh);
    if dry_run && cached.is_none() {
        let home = crate::toolkit::cuda_home_in(&store.root);
        return Ok(Cuda {
            cuda_home: home.display().to_string(),
            nvcc: home.join("bin/nvcc").display().to_string(),
            version: String::new(),
            would_download: crate::toolkit::cuda_wheels(),
        });
    }
    let home = match cached {
        Some(h) => h,
        None => crate::toolkit::install_cuda(&store.root, refresh)?,
    };
    let version = std::fs::read_to_string(home.join(".complete")).unwrap_or_default();
    Ok(Cuda {
        cuda_home: home.display().to_string(),
        nvcc: home.join("bin/nvcc").display().to_string(),
        version: version.lines().last().unwrap_or("").to_string(),
        would_download: Vec::new(),
    })
}

impl Report for Cuda {
    fn human(&self) -> String {
        if !self.would_download.is_empty() {
            return format!(
                "toolkit cuda: would download {} wheel(s) with pip into {}: {}",
                self.would_download.len(),
                self.cuda_home,
                self.would_download.join(", ")
            );
        }
        format!(
            "CUDA toolkit {}\n  CUDA_HOME={}",
            self.version, self.cuda_home
        )
    }
}
