//! Bitshift trellis codes (trellis-coded quantization in the style of QTIP,
//! arXiv 2406.11235) for the turbo TCQ tiers: the reference encoder, the
//! decoder and the trained lookup table the C header carries.
//!
//! A group of `n` values is coded with `k` bits each as one circular bit
//! stream of `n·k` bits (no start-up bits: the trellis is tail-biting).
//! Value `t`'s state is the `L`-bit window of the stream that ends with its
//! own `k` bits, read little-endian: `s_t = (stream >> (t·k + k − L)) & (2^L − 1)`
//! (positions modulo `n·k`), so the newest bits are the state's top `k` bits
//! and decoding is a load, a shift, a mask and a table lookup `lut[s_t]`.
//! Consecutive states overlap in `L − k` bits, which is the trellis:
//! `s_t = (s_{t−1} >> k) | (b_t << (L − k))`.
//!
//! Encoding is a Viterbi search for the stream minimising the squared error.
//! Tail-biting (the first states wrap around to the stream's last bits) is
//! handled the way QTIP does it: one unconstrained search over the group
//! rotated by half its length fixes the `L − k` bits where the stream wraps,
//! and a second search constrained to them gives the code.
//!
//! The table is trained deterministically: it starts from Gaussian
//! quantiles placed so that the `2^k` successors of every state fall in the
//! `2^k` equal-probability strata (a union of shifted scalar quantizers), then
//! alternates encoding seeded samples of the exact unit-sphere law (scaled to
//! unit variance) with setting each entry to the mean of the values coded by
//! it (a Lloyd step). Every number comes from `libm` and a splitmix64
//! sequence, so the table is the same on every platform.

use std::fmt;

/// A trellis shape the code does not support.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub bits: u32,
    pub state_bits: u32,
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a trellis with {} bits per value and {} state bits is not supported (1-4 bits, more state bits than value bits, at most 16)",
            self.bits, self.state_bits
        )
    }
}

impl std::error::Error for Unsupported {}

/// One trellis code: `bits` per value, `state_bits` of state, and the
/// `2^state_bits` reconstruction values (unit variance).
#[derive(Debug, Clone)]
pub struct Trellis {
    pub bits: u32,
    pub state_bits: u32,
    pub lut: Vec<f32>,
}

/// Training parameters (recorded in the header's comment).
#[derive(Debug, Clone, Copy)]
pub struct Training {
    pub seed: u64,
    pub vectors: usize,
    pub dim: usize,
    pub iterations: usize,
}

/// splitmix64: a fixed, documented sequence, so nothing depends on a
/// platform's RNG (also the turbo tables' sign sequence).
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in (0, 1): 53 random bits, never 0.
fn uniform(state: &mut u64) -> f64 {
    ((splitmix64(state) >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
}

/// Standard normal samples by Box-Muller, through `libm` (platform-independent).
fn gaussians(state: &mut u64, out: &mut [f64]) {
    let mut i = 0;
    while i < out.len() {
        let r = libm::sqrt(-2.0 * libm::log(uniform(state)));
        let a = 2.0 * std::f64::consts::PI * uniform(state);
        out[i] = r * libm::cos(a);
        if i + 1 < out.len() {
            out[i + 1] = r * libm::sin(a);
        }
        i += 2;
    }
}

/// Points of the exact unit-sphere law in `dim` dimensions scaled to norm
/// `sqrt(dim)` (unit variance per coordinate): what the quantizer sees
/// after the norm is divided out of a rotated group.
pub fn sphere_samples(seed: u64, vectors: usize, dim: usize) -> Vec<f32> {
    let mut s = seed;
    let mut g = vec![0.0f64; dim];
    let mut out = Vec::with_capacity(vectors * dim);
    for _ in 0..vectors {
        gaussians(&mut s, &mut g);
        let n = libm::sqrt(g.iter().map(|x| x * x).sum::<f64>());
        let scale = libm::sqrt(dim as f64) / n;
        out.extend(g.iter().map(|x| (x * scale) as f32));
    }
    out
}

/// Inverse of the standard normal CDF (Acklam's rational approximation,
/// refined by one Halley step through `libm::erfc`: |error| < 1e-14).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    let x = if p < 0.02425 {
        tail(libm::sqrt(-2.0 * libm::log(p)))
    } else if p > 1.0 - 0.02425 {
        -tail(libm::sqrt(-2.0 * libm::log(1.0 - p)))
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    };
    // One Halley step on Φ(x) − p.
    let e = 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2) - p;
    let u = e * libm::sqrt(2.0 * std::f64::consts::PI) * libm::exp(x * x / 2.0);
    x - u / (1.0 + x * u / 2.0)
}

/// The bit-reversal of `v`'s low `n` bits: a fixed permutation that spreads
/// neighbouring predecessor classes across a stratum.
fn reverse_bits(v: u32, n: u32) -> u32 {
    if n == 0 {
        0
    } else {
        v.reverse_bits() >> (32 - n)
    }
}

impl Trellis {
    /// The untrained table: state `s = u | (b << (L − k))` takes the Gaussian
    /// quantile at probability `(b·2^(L−k) + rev(u) + ½) / 2^L`, so the `2^k`
    /// successors of each state cover the `2^k` equal-probability strata.
    pub fn initial(bits: u32, state_bits: u32) -> Result<Trellis, Unsupported> {
        if !(1..=4).contains(&bits) || state_bits <= bits || state_bits > 16 {
            return Err(Unsupported { bits, state_bits });
        }
        let low = state_bits - bits;
        let n = 1u32 << state_bits;
        let lut = (0..n)
            .map(|s| {
                let u = s & ((1 << low) - 1);
                let b = s >> low;
                let rank = (b << low) | reverse_bits(u, low);
                normal_quantile((rank as f64 + 0.5) / n as f64) as f32
            })
            .collect();
        Ok(Trellis {
            bits,
            state_bits,
            lut,
        })
    }

    fn low_bits(&self) -> u32 {
        self.state_bits - self.bits
    }

    /// Bytes of the stream of `n` values.
    pub fn stream_bytes(&self, n: usize) -> usize {
        n * self.bits as usize / 8
    }

    /// The state of value `t` in a stream of `n` values.
    pub fn state(&self, stream: &[u8], n: usize, t: usize) -> u32 {
        let total = (n * self.bits as usize) as i64;
        let end = ((t + 1) * self.bits as usize) as i64;
        let mut s = 0u32;
        for i in 0..self.state_bits as i64 {
            let pos = (end - self.state_bits as i64 + i).rem_euclid(total) as usize;
            let bit = (stream[pos / 8] >> (pos % 8)) & 1;
            s |= (bit as u32) << i;
        }
        s
    }

    /// Decodes `out.len()` values (unit variance) from `stream`.
    pub fn decode(&self, stream: &[u8], out: &mut [f32]) {
        let n = out.len();
        for (t, o) in out.iter_mut().enumerate() {
            *o = self.lut[self.state(stream, n, t) as usize];
        }
    }

    /// One Viterbi search over `y` taken in the order `order`, with the
    /// first state's low `L − k` bits (and the last state's top ones, which
    /// wrap onto them) fixed to `wrap` if given. Returns the states along
    /// the best path, in the order searched.
    fn viterbi(&self, y: &[f32], order: &[usize], wrap: Option<u32>) -> Vec<u32> {
        let low = self.low_bits();
        let ns = 1usize << self.state_bits;
        let nu = 1usize << low;
        let fan = 1usize << self.bits;
        let n = order.len();
        let mut cost = vec![0.0f32; ns];
        let mut best = vec![0.0f32; nu];
        // back[t][u]: the winning predecessor's low k bits for class u at step t
        let mut back = vec![0u8; n * nu];
        let d = |s: usize, v: f32| {
            let e = v - self.lut[s];
            e * e
        };
        let v0 = y[order[0]];
        for (s, c) in cost.iter_mut().enumerate() {
            let ok = wrap.is_none_or(|w| (s & (nu - 1)) as u32 == w);
            *c = if ok { d(s, v0) } else { f32::INFINITY };
        }
        for step in 1..n {
            for (u, bu) in best.iter_mut().enumerate() {
                let base = (u << self.bits) & (ns - 1);
                let mut m = cost[base];
                let mut arg = 0u8;
                for j in 1..fan {
                    let c = cost[base | j];
                    if c < m {
                        m = c;
                        arg = j as u8;
                    }
                }
                *bu = m;
                back[step * nu + u] = arg;
            }
            let v = y[order[step]];
            for (s, c) in cost.iter_mut().enumerate() {
                *c = best[s & (nu - 1)] + d(s, v);
            }
        }
        // the last state: its top L − k bits must equal the first state's low bits
        let mut last = 0usize;
        let mut m = f32::INFINITY;
        for (s, &c) in cost.iter().enumerate() {
            let ok = wrap.is_none_or(|w| (s >> self.bits) as u32 == w);
            if ok && c < m {
                m = c;
                last = s;
            }
        }
        let mut states = vec![0u32; n];
        let mut s = last;
        for step in (0..n).rev() {
            states[step] = s as u32;
            if step > 0 {
                let u = s & (nu - 1);
                s = ((u << self.bits) & (ns - 1)) | back[step * nu + u] as usize;
            }
        }
        states
    }

    /// Encodes `y` (unit variance) into a tail-biting stream; returns it with
    /// the states of the code.
    pub fn encode(&self, y: &[f32]) -> (Vec<u8>, Vec<u32>) {
        let n = y.len();
        let low = self.low_bits();
        let half = n / 2;
        // Search 1: rotated by half, unconstrained; the state at original
        // position n − 1 carries the bits the stream wraps with.
        let rotated: Vec<usize> = (0..n).map(|i| (i + half) % n).collect();
        let path = self.viterbi(y, &rotated, None);
        let wrap = path[n - 1 - half] >> self.bits;
        let order: Vec<usize> = (0..n).collect();
        let states = self.viterbi(y, &order, Some(wrap & ((1 << low) - 1)));
        // The stream: value t's k bits are the top k bits of its state.
        let mut stream = vec![0u8; self.stream_bytes(n)];
        for (t, &s) in states.iter().enumerate() {
            let b = s >> low;
            for i in 0..self.bits as usize {
                let pos = t * self.bits as usize + i;
                stream[pos / 8] |= (((b >> i) & 1) as u8) << (pos % 8);
            }
        }
        (stream, states)
    }

    /// Trains the table on seeded unit-sphere samples (Lloyd steps over the
    /// Viterbi assignment).
    pub fn train(bits: u32, state_bits: u32, t: Training) -> Result<Trellis, Unsupported> {
        let mut tr = Trellis::initial(bits, state_bits)?;
        let data = sphere_samples(t.seed, t.vectors, t.dim);
        let ns = tr.lut.len();
        for _ in 0..t.iterations {
            let mut sum = vec![0.0f64; ns];
            let mut cnt = vec![0u64; ns];
            for v in data.chunks(t.dim) {
                let (_, states) = tr.encode(v);
                for (x, s) in v.iter().zip(states) {
                    sum[s as usize] += *x as f64;
                    cnt[s as usize] += 1;
                }
            }
            for s in 0..ns {
                if cnt[s] > 0 {
                    tr.lut[s] = (sum[s] / cnt[s] as f64) as f32;
                }
            }
        }
        Ok(tr)
    }

    /// The table rounded to the nearest multiples of `2^-shift` (ties away
    /// from zero), clamped to ±127 of them: every value is then
    /// `i8 · 2^-shift` exactly, to the bit (see [`Trellis::lut_i8`]).
    pub fn on_grid(mut self, shift: u32) -> Trellis {
        let q = (1u64 << shift) as f32;
        for x in self.lut.iter_mut() {
            // + 0.0: a small negative value rounds to -0.0, which no byte is
            *x = (*x * q).round().clamp(-127.0, 127.0) / q + 0.0;
        }
        self
    }

    /// The table as the integers `v · 2^shift`, or `None` if a value is not
    /// such an integer within ±127 (a table not made by [`Trellis::on_grid`]).
    pub fn lut_i8(&self, shift: u32) -> Option<Vec<i8>> {
        let q = (1u64 << shift) as f32;
        self.lut
            .iter()
            .map(|&x| {
                let v = x * q;
                let b = v as i8;
                // to the bit: -0.0 is not 0 · 2^-shift
                ((b as f32 / q).to_bits() == x.to_bits()).then_some(b)
            })
            .collect()
    }

    /// Mean squared error per coordinate over `data` (rows of `dim`), with
    /// the code's own values (scale 1).
    pub fn mse(&self, data: &[f32], dim: usize) -> f64 {
        let mut err = 0.0f64;
        let mut out = vec![0.0f32; dim];
        for v in data.chunks(dim) {
            let (stream, _) = self.encode(v);
            self.decode(&stream, &mut out);
            err += v
                .iter()
                .zip(&out)
                .map(|(x, c)| (*x as f64 - *c as f64).powi(2))
                .sum::<f64>();
        }
        err / data.len() as f64
    }
}

/// State bits of the TCQ tiers: 256 states, a 1 KiB table per tier. Measured
/// against 9 and 10 state bits in docs/turbo-kv.md: 10 bits gains 2-4% MSE
/// at four times the encode cost.
pub const STATE_BITS: u32 = 8;

/// The tiers' tables are rounded to multiples of `2^-LUT_SHIFT` after
/// training, so that a CPU reader can hold a table as 256 bytes (a quarter
/// of its f32 values' registers; each value `i8 · 2^-5`, exact in f32).
/// Measured on the held-out samples (group 128, MSE per coordinate, unit
/// variance): 2 bits 0.086193 → 0.086212, 3 bits 0.023941 → 0.023961,
/// 4 bits 0.006844 → 0.006862 (+0.02 / +0.08 / +0.25 %); further Lloyd
/// steps on the grid gain nothing at 3 and 4 bits. A step of `2^-6` does not
/// reach the tables' extremes (about ±3.3) within ±127 steps: clamped, 4 bits
/// loses 132 %.
pub const LUT_SHIFT: u32 = 5;

/// Bits per value of the TCQ tiers.
pub const TIER_BITS: [u32; 3] = [2, 3, 4];

/// How the tiers' tables are trained (fixed: the header must not change
/// unless these do).
pub const TRAINING: Training = Training {
    seed: 0x1319_8A2E_0370_7344,
    vectors: 1000,
    dim: 128,
    iterations: 40,
};

/// Held-out samples the header's MSE figures are measured on.
pub const EVAL: Training = Training {
    seed: 0xA409_3822_299F_31D0,
    vectors: 1000,
    dim: 128,
    iterations: 0,
};

/// The trained table of each tier (2, 3, 4 bits), computed once per process.
pub fn tiers() -> &'static [Trellis] {
    static TIERS: std::sync::OnceLock<Vec<Trellis>> = std::sync::OnceLock::new();
    TIERS.get_or_init(|| {
        TIER_BITS
            .iter()
            // 2-4 bits with 8 state bits is a supported shape (checked by initial's bounds).
            .map(|&b| {
                Trellis::train(b, STATE_BITS, TRAINING)
                    .unwrap_or_else(|e| panic!("{e}"))
                    .on_grid(LUT_SHIFT)
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deliberately naive encoder: the full predecessor scan for every
    /// state, its own bit packing, and every wrap value tried (exact
    /// tail-biting optimum). Returns the squared error of its best code.
    fn naive_best_error(tr: &Trellis, y: &[f32], wrap: Option<u32>) -> f64 {
        let k = tr.bits;
        let l = tr.state_bits;
        let ns = 1usize << l;
        let n = y.len();
        let low = l - k;
        let wraps: Vec<u32> = match wrap {
            Some(w) => vec![w],
            None => (0..1u32 << low).collect(),
        };
        let mut best = f64::INFINITY;
        for w in wraps {
            let mut cost = vec![f64::INFINITY; ns];
            for (s, c) in cost.iter_mut().enumerate() {
                if (s as u32) & ((1 << low) - 1) == w {
                    *c = (y[0] as f64 - tr.lut[s] as f64).powi(2);
                }
            }
            for &v in &y[1..n] {
                let mut next = vec![f64::INFINITY; ns];
                for (prev, &pc) in cost.iter().enumerate() {
                    if !pc.is_finite() {
                        continue;
                    }
                    for b in 0..1usize << k {
                        let s = (prev >> k) | (b << low);
                        let c = pc + (v as f64 - tr.lut[s] as f64).powi(2);
                        if c < next[s] {
                            next[s] = c;
                        }
                    }
                }
                cost = next;
            }
            for (s, &c) in cost.iter().enumerate() {
                if (s >> k) as u32 == w && c < best {
                    best = c;
                }
            }
        }
        best
    }

    fn error_of(tr: &Trellis, y: &[f32], stream: &[u8]) -> f64 {
        let mut out = vec![0.0f32; y.len()];
        tr.decode(stream, &mut out);
        y.iter()
            .zip(&out)
            .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
            .sum()
    }

    #[test]
    fn the_stream_decodes_to_the_states_the_encoder_chose() {
        for (k, l) in [(2, 8), (3, 8), (4, 8), (3, 5), (2, 7)] {
            let tr = Trellis::initial(k, l).unwrap();
            for dim in [64usize, 128] {
                let data = sphere_samples(42 + k as u64, 5, dim);
                for y in data.chunks(dim) {
                    let (stream, states) = tr.encode(y);
                    assert_eq!(stream.len(), dim * k as usize / 8);
                    for (t, &s) in states.iter().enumerate() {
                        assert_eq!(tr.state(&stream, dim, t), s, "k={k} L={l} t={t}");
                    }
                    // consecutive states overlap in L - k bits, tail-biting included
                    for t in 0..dim {
                        let prev = states[(t + dim - 1) % dim];
                        assert_eq!(states[t] & ((1 << (l - k)) - 1), prev >> k);
                    }
                }
            }
        }
    }

    #[test]
    fn the_constrained_search_is_the_exact_optimum() {
        // small shapes, where the exhaustive search is cheap
        for (k, l) in [(2, 5), (3, 6), (1, 4)] {
            let tr = Trellis::train(
                k,
                l,
                Training {
                    seed: 9,
                    vectors: 50,
                    dim: 16,
                    iterations: 3,
                },
            )
            .unwrap();
            let data = sphere_samples(77, 20, 16);
            let order: Vec<usize> = (0..16).collect();
            for y in data.chunks(16) {
                for w in [0u32, (1 << (l - k)) - 1, 1] {
                    let states = tr.viterbi(y, &order, Some(w));
                    let got: f64 = states
                        .iter()
                        .zip(y)
                        .map(|(&s, &v)| (v as f64 - tr.lut[s as usize] as f64).powi(2))
                        .sum();
                    let want = naive_best_error(&tr, y, Some(w));
                    assert!(
                        (got - want).abs() < 1e-4 * (1.0 + want),
                        "k={k} L={l} w={w}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_two_pass_tail_biting_search_is_near_the_exact_optimum() {
        let tr = &tiers()[1];
        let data = sphere_samples(5, 12, 64);
        let (mut got, mut want) = (0.0, 0.0);
        for y in data.chunks(64) {
            let (stream, _) = tr.encode(y);
            got += error_of(tr, y, &stream);
            want += naive_best_error(tr, y, None);
        }
        assert!(got >= want - 1e-6, "the heuristic cannot beat the optimum");
        assert!(got <= want * 1.01, "two-pass {got} vs exact {want}");
    }

    #[test]
    fn the_trained_tiers_beat_the_scalar_code_and_respect_the_bound() {
        // Independently measured: the naive exact encoder's error on held-out
        // samples, per coordinate. Lloyd-Max scalar MSE at 2/3/4 bits for a
        // unit Gaussian: 0.1175 / 0.03454 / 0.009497; the rate-distortion
        // bound 2^-2R: 0.0625 / 0.015625 / 0.00390625.
        let scalar = [0.1175, 0.03454, 0.009497];
        let data = sphere_samples(EVAL.seed, 24, 128);
        for (i, tr) in tiers().iter().enumerate() {
            let bound = 0.25f64.powi(tr.bits as i32);
            let exact: f64 = data
                .chunks(128)
                .map(|y| naive_best_error(tr, y, None))
                .sum::<f64>()
                / data.len() as f64;
            let fast = tr.mse(&data, 128);
            assert!(
                fast >= exact - 1e-9 && fast <= exact * 1.01,
                "{fast} vs {exact}"
            );
            assert!(
                exact > bound,
                "{} bits: {exact} below the bound {bound}",
                tr.bits
            );
            assert!(
                exact < 0.8 * scalar[i],
                "{} bits: {exact} vs scalar {}",
                tr.bits,
                scalar[i]
            );
        }
    }

    #[test]
    fn the_tiers_tables_are_bytes_at_a_tiny_cost() {
        let data = sphere_samples(EVAL.seed, 24, 128);
        for tr in tiers() {
            let bytes = tr.lut_i8(LUT_SHIFT).expect("on the grid");
            for (b, x) in bytes.iter().zip(&tr.lut) {
                assert_eq!((*b as f32 / 32.0).to_bits(), x.to_bits());
            }
            // the float table it was rounded from: the rounding costs under 1 %
            let float = Trellis::train(tr.bits, STATE_BITS, TRAINING).unwrap();
            assert_ne!(float.lut, tr.lut, "the training gives off-grid values");
            assert!(float.lut_i8(LUT_SHIFT).is_none());
            let (a, b) = (float.mse(&data, 128), tr.mse(&data, 128));
            assert!(b < a * 1.01, "{} bits: {a} -> {b}", tr.bits);
        }
        // a value beyond ±127 steps is clamped, and then no longer what it was
        let t = Trellis {
            bits: 2,
            state_bits: 3,
            lut: vec![4.5, -4.5, 0.015625, 0.046875, 1.0, -1.0, -0.01, 3.96875],
        };
        assert!(t.lut_i8(5).is_none());
        let g = t.on_grid(5);
        assert_eq!(g.lut_i8(5).unwrap(), vec![127, -127, 1, 2, 32, -32, 0, 127]);
        assert_eq!(g.lut[6].to_bits(), 0, "+0.0, not -0.0");
        let negative_zero = Trellis {
            bits: 1,
            state_bits: 2,
            lut: vec![-0.0, 0.0, 1.0, -1.0],
        };
        assert!(negative_zero.lut_i8(5).is_none());
    }

    #[test]
    fn training_is_deterministic_and_lowers_the_error() {
        let t = Training {
            seed: 3,
            vectors: 60,
            dim: 64,
            iterations: 4,
        };
        let a = Trellis::train(3, 6, t).unwrap();
        let b = Trellis::train(3, 6, t).unwrap();
        assert_eq!(a.lut, b.lut);
        let init = Trellis::initial(3, 6).unwrap();
        let data = sphere_samples(11, 40, 64);
        assert!(a.mse(&data, 64) < init.mse(&data, 64));
    }

    #[test]
    fn quantiles_are_accurate() {
        for (p, x) in [
            (0.5, 0.0),
            (0.975, 1.959_963_984_540_054),
            (0.001, -3.090_232_306_167_813_5),
        ] {
            assert!((normal_quantile(p) - x).abs() < 1e-12, "{p}");
        }
    }

    #[test]
    fn unsupported_shapes_are_errors() {
        assert!(Trellis::initial(3, 3).is_err());
        assert!(Trellis::initial(5, 8).is_err());
        assert!(Trellis::initial(2, 17).is_err());
    }
}
