//! Where things live in a project, named once: every path the commands use
//! below the project root comes from here, never from a string literal at
//! the place of use.

use std::path::{Path, PathBuf};

/// A project's folders and files, from its root.
#[derive(Debug, Clone)]
pub struct Layout {
    pub root: PathBuf,
}

impl Layout {
    pub fn new(root: &Path) -> Layout {
        Layout {
            root: root.to_path_buf(),
        }
    }

    /// The patch series (`patches/`).
    pub fn patches(&self) -> PathBuf {
        self.root.join("patches")
    }

    /// The gate files (`gates/`).
    pub fn gates(&self) -> PathBuf {
        self.root.join("gates")
    }

    /// The build of one variant (`build/<variant>/`).
    pub fn build(&self, variant: &str) -> PathBuf {
        self.root.join("build").join(variant)
    }

    /// The gates' results and scratch folders (`build/gates/`).
    pub fn gate_results(&self) -> PathBuf {
        self.build("gates")
    }

    /// The applied tree `apply` writes by default (`work/llama.cpp/`).
    pub fn workdir(&self) -> PathBuf {
        self.root.join("work").join("llama.cpp")
    }

    /// The model of `<metal_stdlib>` and the Metal check's harnesses (`ci/metal/`).
    pub fn metal_model(&self) -> PathBuf {
        self.root.join("ci").join("metal")
    }

    /// The git stack `edit` makes by default (`work/edit/`).
    pub fn edit_stack(&self) -> PathBuf {
        self.root.join("work").join("edit")
    }
}
