//! A bounded window of observations with its mean and standard deviation: the moving
//! averages of the mean-reversion, momentum and pairs traders.
//!
//! O(1) per observation (running sums over a ring of `len_max` values); the sums are
//! recomputed from the ring every `len_max` pushes so rounding error cannot build up.

use std::collections::VecDeque;

/// The last `len_max` values pushed.
#[derive(Clone, Debug)]
pub struct Window {
    values: VecDeque<f64>,
    len_max: usize,
    sum: f64,
    sum_sq: f64,
    pushes: usize,
}

impl Window {
    /// A window of `len_max` values (at least 1).
    pub fn new(len_max: usize) -> Self {
        let len_max = len_max.max(1);
        Window { values: VecDeque::with_capacity(len_max), len_max, sum: 0.0, sum_sq: 0.0, pushes: 0 }
    }

    pub fn push(&mut self, value: f64) {
        if self.values.len() == self.len_max {
            let old = self.values.pop_front().expect("a full window");
            self.sum -= old;
            self.sum_sq -= old * old;
        }
        self.values.push_back(value);
        self.sum += value;
        self.sum_sq += value * value;
        self.pushes += 1;
        if self.pushes.is_multiple_of(self.len_max) {
            self.sum = self.values.iter().sum();
            self.sum_sq = self.values.iter().map(|v| v * v).sum();
        }
    }

    /// Whether it holds `len_max` values.
    pub fn is_full(&self) -> bool {
        self.values.len() == self.len_max
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The mean of the values held, None when empty.
    pub fn mean(&self) -> Option<f64> {
        (!self.values.is_empty()).then(|| self.sum / self.values.len() as f64)
    }

    /// The population standard deviation, None with fewer than two values.
    pub fn std_dev(&self) -> Option<f64> {
        if self.values.len() < 2 {
            return None;
        }
        let n = self.values.len() as f64;
        let mean = self.sum / n;
        Some((self.sum_sq / n - mean * mean).max(0.0).sqrt())
    }

    /// The newest value.
    pub fn last(&self) -> Option<f64> {
        self.values.back().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_deviation_cover_the_last_values_only() {
        let mut window = Window::new(3);
        assert_eq!(window.mean(), None);
        window.push(1.0);
        assert_eq!(window.std_dev(), None);
        for v in [2.0, 3.0, 4.0] {
            window.push(v);
        }
        assert!(window.is_full());
        assert_eq!(window.mean(), Some(3.0));
        let sd = window.std_dev().unwrap();
        assert!((sd - (2.0f64 / 3.0).sqrt()).abs() < 1e-12, "{sd}");
        for v in 0..10_000 {
            window.push(1e6 + f64::from(v % 3));
        }
        assert!((window.mean().unwrap() - (1e6 + 1.0)).abs() < 1e-6);
    }
}
