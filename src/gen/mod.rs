//! Code generation in Rust: Lloyd-Max codebooks for the TurboQuant KV types
//! (and, later, backend instance families). Generated text says so in its
//! first line and is only ever changed through `polykv-forge gen`.

pub mod codebook;
