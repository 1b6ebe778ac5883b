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
}

pub fn cuda(project: &Project, refresh: bool) -> Result<Cuda> {
    let store = project.store()?;
    let home = crate::toolkit::install_cuda(&store.root, refresh)?;
    let version = std::fs::read_to_string(home.join(".complete")).unwrap_or_default();
    Ok(Cuda {
        cuda_home: home.display().to_string(),
        nvcc: home.join("bin/nvcc").display().to_string(),
        version: version.lines().last().unwrap_or("").to_string(),
    })
}

impl Report for Cuda {
    fn human(&self) -> String {
        format!(
            "CUDA toolkit {}\n  CUDA_HOME={}",
            self.version, self.cuda_home
        )
    }
}
