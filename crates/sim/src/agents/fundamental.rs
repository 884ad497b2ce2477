//! The fundamental value of a symbol: a mean-reverting random process with rare large
//! jumps, the shape of ABIDES's "sparse mean-reverting oracle".
//!
//! Between two instants `dt` seconds apart the value follows an Ornstein–Uhlenbeck step
//! toward the long-run mean `r̄` (exact discretization):
//! `r ← r̄ + (r − r̄)·e^{−κ·dt} + σ·√((1 − e^{−2κ·dt}) / 2κ)·N(0,1)`,
//! and with probability `λ·dt` a megashock adds `±(m + s·N(0,1))` (sign at random). ABIDES's
//! RMSC03 sets `r̄` = 100,000 cents, κ = 1.67e-16 per ns and megashocks about once per
//! 10^17 ns: a whole trading day of drift. The demo runs for minutes, so
//! [`FundamentalParams::demo`] keeps the shape and scales time: a half-life of about two
//! minutes, a per-second σ of 0.05 % of `r̄` (0.5 % stationary), and a megashock of about 1 % every two
//! minutes on average.
//!
//! Deterministic given its seed and the instants it is advanced to.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::standard_normal;

/// The process's settings (prices in engine units, time in seconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FundamentalParams {
    /// Long-run mean r̄.
    pub mean: f64,
    /// Mean reversion κ, per second.
    pub kappa: f64,
    /// σ: the standard deviation the value gains per √second (before reversion).
    pub sigma: f64,
    /// Megashocks per second.
    pub megashock_rate: f64,
    pub megashock_mean: f64,
    pub megashock_sd: f64,
}

impl FundamentalParams {
    /// ABIDES's shape at the demo's time scale, around `mean`.
    pub fn demo(mean: i64) -> Self {
        let mean = mean as f64;
        FundamentalParams {
            mean,
            kappa: 0.005,
            sigma: mean * 0.0005,
            megashock_rate: 1.0 / 120.0,
            megashock_mean: mean * 0.01,
            megashock_sd: mean * 0.005,
        }
    }
}

/// One symbol's fundamental value over time.
#[derive(Clone, Debug)]
pub struct Fundamental {
    params: FundamentalParams,
    value: f64,
    t_ns: u64,
    rng: ChaCha8Rng,
}

impl Fundamental {
    /// Starts at the mean at time 0.
    pub fn new(params: FundamentalParams, seed: u64) -> Self {
        Fundamental { value: params.mean, params, t_ns: 0, rng: ChaCha8Rng::seed_from_u64(seed) }
    }

    pub fn params(&self) -> &FundamentalParams {
        &self.params
    }

    /// The value at `t_ns` (an earlier instant than the last gives the last value),
    /// rounded to an integer price and never below 1.
    pub fn advance_to(&mut self, t_ns: u64) -> i64 {
        if t_ns > self.t_ns {
            let dt = (t_ns - self.t_ns) as f64 / 1e9;
            self.t_ns = t_ns;
            let p = self.params;
            let decay = (-p.kappa * dt).exp();
            let sd = if p.kappa > 0.0 {
                p.sigma * ((1.0 - decay * decay) / (2.0 * p.kappa)).sqrt()
            } else {
                p.sigma * dt.sqrt()
            };
            self.value = p.mean + (self.value - p.mean) * decay + sd * standard_normal(&mut self.rng);
            if self.rng.gen::<f64>() < (p.megashock_rate * dt).min(1.0) {
                let size = p.megashock_mean + p.megashock_sd * standard_normal(&mut self.rng);
                self.value += if self.rng.gen_bool(0.5) { size } else { -size };
            }
            self.value = self.value.max(1.0);
        }
        self.value.round() as i64
    }

    /// The value now, without advancing.
    pub fn value(&self) -> i64 {
        self.value.round() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverts_to_its_mean_and_moves_about_as_much_as_sigma_says() {
        let params = FundamentalParams { megashock_rate: 0.0, ..FundamentalParams::demo(10_000) };
        let mut fundamental = Fundamental::new(params, 11);
        let mut sum = 0.0;
        let mut sum_sq = 0.0;
        let samples = 20_000u64;
        for k in 1..=samples {
            let v = fundamental.advance_to(k * 1_000_000_000) as f64;
            sum += v;
            sum_sq += v * v;
        }
        let mean = sum / samples as f64;
        let sd = (sum_sq / samples as f64 - mean * mean).sqrt();
        // Stationary sd of OU: σ / √(2κ) = 5 / 0.1 = 50.
        assert!((mean - 10_000.0).abs() < 15.0, "mean {mean}");
        assert!((35.0..65.0).contains(&sd), "sd {sd}");
    }

    #[test]
    fn same_seed_same_path() {
        let path = |seed| {
            let mut f = Fundamental::new(FundamentalParams::demo(5_000), seed);
            (1..100u64).map(|k| f.advance_to(k * 500_000_000)).collect::<Vec<_>>()
        };
        assert_eq!(path(1), path(1));
        assert_ne!(path(1), path(2));
    }
}
