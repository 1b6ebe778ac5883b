//! Integration tests: the built binary against synthetic upstreams made here,
//! and against the real pinned upstream fetched through the pip-sdist source.

mod harness;

mod bad_input;
mod build;
mod chain;
mod real;
mod rebase;
mod workdir;
