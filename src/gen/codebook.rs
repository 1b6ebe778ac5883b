//! Lloyd-Max (MSE-optimal) scalar codebooks for the coordinates of a
//! randomly rotated vector: either Gaussian N(0, 1/d), the large-d limit,
//! or the exact marginal of a uniform point on the unit sphere S^(d-1),
//! whose density is proportional to (1 - x^2)^((d-3)/2).
//!
//! The iteration alternates the two optimality conditions (thresholds at
//! midpoints, centroids at conditional means) until the centroids move by
//! less than 1e-13; conditional means are exact for the Gaussian (through
//! erf) and use Gauss-Legendre masses with closed-form moments for the sphere
//! marginal.

use anyhow::{bail, Result};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Dist {
    /// N(0, 1/d): the large-d limit of a rotated unit vector's coordinate.
    Gaussian,
    /// The exact coordinate marginal of a uniform point on the unit sphere in d dimensions.
    Sphere,
}

/// A converged codebook for unit-norm vectors of dimension `dim`.
#[derive(Debug, Clone, Serialize)]
pub struct Codebook {
    pub bits: u32,
    pub dim: u32,
    pub dist: Dist,
    /// All 2^bits centroids, ascending (symmetric about 0).
    pub centroids: Vec<f64>,
    /// The 2^bits - 1 decision thresholds (midpoints), ascending.
    pub thresholds: Vec<f64>,
    /// Mean squared error per coordinate, scaled to unit variance (x d).
    pub mse_unit: f64,
    pub iterations: usize,
}

/// The two integrals the iteration needs over an interval: probability and
/// first moment.
trait Density {
    fn mass(&self, a: f64, b: f64) -> f64;
    fn moment(&self, a: f64, b: f64) -> f64;
    fn second_moment_total(&self) -> f64;
    fn support(&self) -> f64;
}

struct Gaussian {
    sigma: f64,
}

impl Density for Gaussian {
    fn mass(&self, a: f64, b: f64) -> f64 {
        let s = self.sigma * std::f64::consts::SQRT_2;
        0.5 * (libm::erf(b / s) - libm::erf(a / s))
    }
    fn moment(&self, a: f64, b: f64) -> f64 {
        // ∫ x φσ(x) dx = σ² (φσ(a) − φσ(b)).
        let pdf = |x: f64| {
            (-(x * x) / (2.0 * self.sigma * self.sigma)).exp()
                / (self.sigma * (2.0 * std::f64::consts::PI).sqrt())
        };
        self.sigma * self.sigma * (pdf(a) - pdf(b))
    }
    fn second_moment_total(&self) -> f64 {
        self.sigma * self.sigma
    }
    fn support(&self) -> f64 {
        40.0 * self.sigma
    }
}

/// The sphere marginal. Masses by composite Gauss-Legendre quadrature of
/// the (smooth) density over each interval; first moments in closed form.
struct Sphere {
    dim: f64,
    norm: f64,
}

/// 5-point Gauss-Legendre nodes and weights on [-1, 1].
const GL5: [(f64, f64); 5] = [
    (0.0, 0.568_888_888_888_888_9),
    (-0.538_469_310_105_683_1, 0.478_628_670_499_366_5),
    (0.538_469_310_105_683_1, 0.478_628_670_499_366_5),
    (-0.906_179_845_938_664, 0.236_926_885_056_189_1),
    (0.906_179_845_938_664, 0.236_926_885_056_189_1),
];

impl Sphere {
    fn new(dim: u32) -> Sphere {
        let mut s = Sphere {
            dim: dim as f64,
            norm: 1.0,
        };
        s.norm = s.integral(-1.0, 1.0);
        s
    }

    fn pdf(&self, x: f64) -> f64 {
        (1.0 - x * x).max(0.0).powf((self.dim - 3.0) / 2.0)
    }

    /// Unnormalised ∫_a^b f over 256 panels of 5-point Gauss-Legendre.
    fn integral(&self, a: f64, b: f64) -> f64 {
        let (a, b) = (a.clamp(-1.0, 1.0), b.clamp(-1.0, 1.0));
        if b <= a {
            return 0.0;
        }
        let panels = 256;
        let h = (b - a) / panels as f64;
        let mut acc = 0.0;
        for p in 0..panels {
            let mid = a + (p as f64 + 0.5) * h;
            for (x, w) in GL5 {
                acc += w * self.pdf(mid + 0.5 * h * x);
            }
        }
        acc * 0.5 * h
    }
}

impl Density for Sphere {
    fn mass(&self, a: f64, b: f64) -> f64 {
        self.integral(a, b) / self.norm
    }
    fn moment(&self, a: f64, b: f64) -> f64 {
        // ∫ x (1-x²)^p dx = -(1-x²)^(p+1) / (2(p+1)), p = (d-3)/2.
        let p1 = (self.dim - 1.0) / 2.0;
        let g = |x: f64| -(1.0 - x * x).max(0.0).powf(p1) / (2.0 * p1);
        (g(b.clamp(-1.0, 1.0)) - g(a.clamp(-1.0, 1.0))) / self.norm
    }
    fn second_moment_total(&self) -> f64 {
        1.0 / self.dim
    }
    fn support(&self) -> f64 {
        1.0
    }
}

/// Generates a converged codebook.
pub fn generate(bits: u32, dim: u32, dist: Dist) -> Result<Codebook> {
    if !(1..=8).contains(&bits) {
        bail!("bits must be 1..=8, got {bits}");
    }
    if dim < 4 {
        bail!("dim must be at least 4, got {dim}");
    }
    let density: Box<dyn Density> = match dist {
        Dist::Gaussian => Box::new(Gaussian {
            sigma: 1.0 / (dim as f64).sqrt(),
        }),
        Dist::Sphere => Box::new(Sphere::new(dim)),
    };
    let n = 1usize << bits;
    let sigma = 1.0 / (dim as f64).sqrt();
    // Start from evenly spaced points over ±3σ.
    let mut c: Vec<f64> = (0..n)
        .map(|i| sigma * 3.0 * ((i as f64 + 0.5) / n as f64 * 2.0 - 1.0))
        .collect();
    let lim = density.support();
    let tol = 1e-13 * sigma;
    let mut iterations = 0;
    loop {
        iterations += 1;
        let t: Vec<f64> = c.windows(2).map(|w| 0.5 * (w[0] + w[1])).collect();
        let mut moved: f64 = 0.0;
        let mut next = Vec::with_capacity(n);
        for i in 0..n {
            let a = if i == 0 { -lim } else { t[i - 1] };
            let b = if i == n - 1 { lim } else { t[i] };
            let m = density.mass(a, b);
            let v = if m > 0.0 {
                density.moment(a, b) / m
            } else {
                c[i]
            };
            moved = moved.max((v - c[i]).abs());
            next.push(v);
        }
        // Enforce exact symmetry (the density is even).
        for i in 0..n / 2 {
            let s = 0.5 * (next[n - 1 - i] - next[i]);
            next[i] = -s;
            next[n - 1 - i] = s;
        }
        c = next;
        if moved < tol {
            break;
        }
        if iterations >= 100_000 {
            bail!("the Lloyd-Max iteration did not converge ({bits} bits, dim {dim}, {dist:?})");
        }
    }
    let thresholds: Vec<f64> = c.windows(2).map(|w| 0.5 * (w[0] + w[1])).collect();
    // Optimal quantizer: D = E[X²] − Σ p_i c_i².
    let mut d = density.second_moment_total();
    for i in 0..n {
        let a = if i == 0 { -lim } else { thresholds[i - 1] };
        let b = if i == n - 1 { lim } else { thresholds[i] };
        d -= density.mass(a, b) * c[i] * c[i];
    }
    Ok(Codebook {
        bits,
        dim,
        dist,
        centroids: c,
        thresholds,
        mse_unit: d * dim as f64,
        iterations,
    })
}

/// Values as a C `float` initializer list (full precision).
pub fn c_floats(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.9e}f"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The codebooks as a C header, for the patch that carries the turbo types.
pub fn c_header(books: &[Codebook]) -> String {
    let mut s = String::from(
        "// Generated by `polykv-forge gen codebooks`; do not edit (change the generator instead).\n",
    );
    s.push_str("// Lloyd-Max centroids and thresholds for unit-norm groups after a randomized WHT.\n#pragma once\n\n");
    for b in books {
        let name = format!("turbo_{:?}_d{}_b{}", b.dist, b.dim, b.bits).to_lowercase();
        s.push_str(&format!(
            "// {} bits, dim {}, {:?}: MSE per coordinate {:.6} (unit variance)\n",
            b.bits, b.dim, b.dist, b.mse_unit
        ));
        s.push_str(&format!(
            "static const float {name}_centroids[{}] = {{ {} }};\n",
            b.centroids.len(),
            c_floats(&b.centroids)
        ));
        s.push_str(&format!(
            "static const float {name}_thresholds[{}] = {{ {} }};\n\n",
            b.thresholds.len(),
            c_floats(&b.thresholds)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positive(b: &Codebook) -> Vec<f64> {
        b.centroids[b.centroids.len() / 2..].to_vec()
    }

    fn close(got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= tol, "got {got:?}, want {want:?}");
        }
    }

    /// The published Lloyd-Max values for N(0, 1/128) (positive half).
    #[test]
    fn gaussian_d128_matches_the_literature() {
        let b2 = generate(2, 128, Dist::Gaussian).unwrap();
        close(&positive(&b2), &[0.04002, 0.13350], 6e-6);
        let b3 = generate(3, 128, Dist::Gaussian).unwrap();
        close(&positive(&b3), &[0.02166, 0.06682, 0.11879, 0.19021], 6e-6);
        let b4 = generate(4, 128, Dist::Gaussian).unwrap();
        close(
            &positive(&b4),
            &[
                0.01135, 0.03430, 0.05805, 0.08329, 0.11104, 0.14302, 0.18288, 0.24153,
            ],
            6e-6,
        );
        // The 4-bit table's outer centroid is 0.2415, not the 0.1739 of a known bad table.
        assert!(positive(&b4)[7] > 0.24);
    }

    /// Theoretical distortion of the optimal quantizer for N(0, 1).
    #[test]
    fn gaussian_distortion() {
        for (bits, want) in [(2, 0.1175), (3, 0.03454), (4, 0.009497)] {
            let b = generate(bits, 128, Dist::Gaussian).unwrap();
            assert!(
                (b.mse_unit - want).abs() / want < 2e-3,
                "{bits}: {}",
                b.mse_unit
            );
        }
    }

    /// The exact sphere marginal at d=128 is slightly narrower than the Gaussian.
    #[test]
    fn sphere_d128_marginal() {
        let b3 = generate(3, 128, Dist::Sphere).unwrap();
        close(&positive(&b3), &[0.0216, 0.0666, 0.1181, 0.1884], 1e-4);
        let g3 = generate(3, 128, Dist::Gaussian).unwrap();
        assert!(positive(&b3)[3] < positive(&g3)[3]);
    }

    /// An independent check: Monte Carlo samples of N(0,1) quantized with the
    /// codebook give the distortion the generator claims.
    #[test]
    fn monte_carlo_agrees() {
        let b = generate(3, 128, Dist::Gaussian).unwrap();
        let scale = (b.dim as f64).sqrt();
        let mut state: u64 = 0x243F_6A88_85A3_08D3;
        let mut uniform = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let n = 400_000;
        let mut err = 0.0;
        for _ in 0..n / 2 {
            // Box-Muller: two N(0,1) samples.
            let (u1, u2) = (uniform().max(1e-300), uniform());
            let r = (-2.0 * u1.ln()).sqrt();
            for x in [
                r * (2.0 * std::f64::consts::PI * u2).cos(),
                r * (2.0 * std::f64::consts::PI * u2).sin(),
            ] {
                let q = b
                    .centroids
                    .iter()
                    .map(|c| c * scale)
                    .min_by(|a, c| (a - x).abs().total_cmp(&(c - x).abs()))
                    .unwrap();
                err += (x - q) * (x - q);
            }
        }
        let mc = err / n as f64;
        assert!(
            (mc - b.mse_unit).abs() / b.mse_unit < 0.02,
            "mc {mc} vs {}",
            b.mse_unit
        );
    }

    /// An independent Lloyd-Max: the density sampled on a uniform grid,
    /// cumulative sums by the trapezoid rule, plain iteration. No erf, no
    /// closed-form moments, none of the generator's code.
    fn lloyd_by_quadrature(bits: u32, dim: u32, sphere: bool, iters: usize) -> Vec<f64> {
        let d = dim as f64;
        let (lo, hi) = if sphere {
            (-1.0, 1.0)
        } else {
            (-12.0 / d.sqrt(), 12.0 / d.sqrt())
        };
        let n = 2_000_000usize;
        let h = (hi - lo) / n as f64;
        let pdf = |x: f64| {
            if sphere {
                (1.0 - x * x).max(0.0).powf((d - 3.0) / 2.0)
            } else {
                (-x * x * d / 2.0).exp()
            }
        };
        let xs: Vec<f64> = (0..=n).map(|i| lo + i as f64 * h).collect();
        let mut m0 = vec![0.0; n + 1];
        let mut m1 = vec![0.0; n + 1];
        for i in 1..=n {
            let (a, b) = (xs[i - 1], xs[i]);
            m0[i] = m0[i - 1] + 0.5 * h * (pdf(a) + pdf(b));
            m1[i] = m1[i - 1] + 0.5 * h * (a * pdf(a) + b * pdf(b));
        }
        // Cumulative integrals at any x, linear between grid points (rounding
        // to the grid would freeze the slow 4-bit iteration short of its
        // fixed point).
        let cum = |m: &[f64], x: f64| {
            let u = ((x - lo) / h).clamp(0.0, n as f64);
            let i = (u.floor() as usize).min(n - 1);
            m[i] + (u - i as f64) * (m[i + 1] - m[i])
        };
        let k = 1usize << bits;
        let sd = 1.0 / d.sqrt();
        let mut c: Vec<f64> = (0..k)
            .map(|i| sd * 3.0 * ((i as f64 + 0.5) / k as f64 * 2.0 - 1.0))
            .collect();
        for _ in 0..iters {
            let t: Vec<f64> = c.windows(2).map(|w| 0.5 * (w[0] + w[1])).collect();
            for i in 0..k {
                let a = if i == 0 { lo } else { t[i - 1] };
                let b = if i == k - 1 { hi } else { t[i] };
                c[i] = (cum(&m1, b) - cum(&m1, a)) / (cum(&m0, b) - cum(&m0, a));
            }
        }
        c
    }

    /// The generated tables against the independent computation, to 1e-4 in
    /// units of the coordinate's standard deviation.
    #[test]
    fn independent_quadrature_agrees() {
        for (dim, dist) in [
            (128, Dist::Sphere),
            (64, Dist::Sphere),
            (128, Dist::Gaussian),
        ] {
            for bits in [2, 3, 4] {
                let b = generate(bits, dim, dist).unwrap();
                let want = lloyd_by_quadrature(bits, dim, dist == Dist::Sphere, 20000);
                let scale = (dim as f64).sqrt();
                for (g, w) in b.centroids.iter().zip(&want) {
                    assert!(
                        ((g - w) * scale).abs() < 1e-4,
                        "{bits} bits, dim {dim}, {dist:?}: {:?} vs {want:?}",
                        b.centroids
                    );
                }
            }
        }
    }

    #[test]
    fn header_says_it_is_generated() {
        let h = c_header(&[generate(2, 128, Dist::Gaussian).unwrap()]);
        assert!(h.starts_with("// Generated by `polykv-forge gen codebooks`"));
        assert!(h.contains("turbo_gaussian_d128_b2_centroids[4]"));
    }
}
