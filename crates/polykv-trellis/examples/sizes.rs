//! The trellis-size measurement behind `STATE_BITS` (docs/turbo-kv.md): for
//! each tier and 6-10 state bits, the MSE per coordinate of a table trained
//! as the tiers' are, on held-out unit-sphere samples, and the encoder's work
//! (the Viterbi search visits every state twice per value in each of its two
//! passes, so its cost is proportional to the state count; shown relative to
//! 8 state bits, independent of the machine). Prints a Markdown table:
//! `cargo run --release -p polykv-trellis --example sizes`.

use polykv_trellis::{sphere_samples, Trellis, EVAL, TIER_BITS, TRAINING};

fn main() {
    // Lloyd-Max scalar MSE for a unit Gaussian at 2, 3, 4 bits.
    let scalar = [0.1175, 0.03454, 0.009497];
    let data = sphere_samples(EVAL.seed, 300, 128);
    println!("| bits | state bits | table bytes | MSE | vs Lloyd-Max scalar | above the bound 2^-2R | encode work |");
    println!("|---|---|---|---|---|---|---|");
    for (i, &k) in TIER_BITS.iter().enumerate() {
        for l in [6u32, 8, 9, 10] {
            if l <= k {
                continue;
            }
            let tr = match Trellis::train(k, l, TRAINING) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("{e}");
                    continue;
                }
            };
            let mse = tr.mse(&data, 128);
            let work = (1u64 << l) as f64 / 256.0;
            let bound = 0.25f64.powi(k as i32);
            println!(
                "| {k} | {l} | {} | {mse:.5} | {:.3} | {:.2} dB | {work}x |",
                4usize << l,
                mse / scalar[i],
                10.0 * (mse / bound).log10()
            );
        }
    }
}
