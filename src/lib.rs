//! polykv-forge: pin upstream llama.cpp by content, carry an ordered series of
//! numbered patches on top of it, and prove the chain strictly.
//!
//! Data flows one way: manifest → base tree (source, store) → chain (apply,
//! verify, export) → applied workdir → build → gates.

pub mod build;
pub mod chain;
pub mod cli;
pub mod cmd;
pub mod edit;
pub mod error;
pub mod failpoint;
pub mod fsx;
pub mod gate;
pub mod gen;
pub mod hostcpu;
pub mod http;
pub mod install;
pub mod layout;
pub mod manifest;
pub mod metal;
pub mod model;
pub mod paths;
pub mod pip;
pub mod printer;
pub mod proc;
pub mod progress;
pub mod project;
pub mod rebase;
pub mod show;
pub mod source;
pub mod status;
pub mod store;
pub mod toolkit;
pub mod tree;
pub mod workdir;

#[cfg(test)]
mod layering;
