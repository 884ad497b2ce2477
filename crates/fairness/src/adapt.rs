//! An adaptive delay: the hold d_h or the sequencer window d_s, following the delays seen.
//!
//! [`Adaptive`] keeps the largest delay observed in each slice of a sliding horizon
//! (ten slices of a second by default) and aims at that maximum times a margin, within
//! `[min, max]`:
//!
//! - **Raise at once.** As soon as one observation times the margin exceeds the value in
//!   force, [`Adaptive::decide`] asks for the higher value (at least a quarter more): a
//!   delay spike raises the delay within one report of the first delayed delivery (plus
//!   the commit of the setting). Only what arrived before the raise can be late.
//! - **Lower slowly.** Only once the whole horizon's maximum calls for less than
//!   [`LOWER_BELOW_PERCENT`] of the value in force, and at most once per slice: a quiet
//!   host earns a shorter delay after a horizon of quiet, and one outlier keeps the delay
//!   up for a horizon.
//! - **Start cautious.** Until a value is in force the target is `max`.
//!
//! Pure: time is passed in. The value in force is the one the log set (the caller tells
//! it, [`Adaptive::in_force`]); `decide` only proposes, so every replica uses what the
//! log says whatever this controller wanted.

use std::collections::VecDeque;

/// A lowering is asked for only when the target is below this share of the value in
/// force: small wobbles change nothing.
pub const LOWER_BELOW_PERCENT: u64 = 80;

/// A raise is by at least this fraction (1/4) of the value in force.
pub const RAISE_AT_LEAST_DIVISOR: u64 = 4;

/// Bounds and pace of an adaptive delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveConfig {
    /// The least and the most the delay may be, ns.
    pub min_ns: u64,
    pub max_ns: u64,
    /// The target is the horizon's largest observed delay times this, in percent.
    pub margin_percent: u64,
    /// How far back observations count, ns.
    pub horizon_ns: u64,
    /// Slices of the horizon; a lowering waits at least one slice after any change.
    pub slices: u32,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig {
            min_ns: 500_000,
            max_ns: 100_000_000,
            margin_percent: 200,
            horizon_ns: 30_000_000_000,
            slices: 10,
        }
    }
}

impl AdaptiveConfig {
    /// Why these bounds cannot work, if they cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.min_ns > self.max_ns {
            return Err(format!("the minimum ({} ns) is above the maximum ({} ns)", self.min_ns, self.max_ns));
        }
        if self.margin_percent < 100 {
            return Err(format!("a margin of {}% is below 100%", self.margin_percent));
        }
        if self.slices == 0 || self.horizon_ns < u64::from(self.slices) {
            return Err("the horizon needs at least one slice of at least 1 ns".to_string());
        }
        Ok(())
    }

    fn slice_ns(&self) -> u64 {
        self.horizon_ns / u64::from(self.slices)
    }

    fn clamp(&self, value: u64) -> u64 {
        value.clamp(self.min_ns, self.max_ns)
    }

    /// The delay that covers `observed` with the margin, within the bounds.
    pub fn covering(&self, observed: u64) -> u64 {
        self.clamp((u128::from(observed) * u128::from(self.margin_percent) / 100).min(u128::from(u64::MAX)) as u64)
    }
}

/// One delay's controller.
#[derive(Clone, Debug)]
pub struct Adaptive {
    config: AdaptiveConfig,
    /// (slice number, largest delay seen in it), oldest first, within the horizon.
    slices: VecDeque<(u64, u64)>,
    /// The value the log holds now, and the slice in which it last changed.
    in_force: Option<u64>,
    changed_slice: u64,
}

impl Adaptive {
    pub fn new(config: AdaptiveConfig) -> Self {
        Adaptive { config, slices: VecDeque::new(), in_force: None, changed_slice: 0 }
    }

    pub fn config(&self) -> &AdaptiveConfig {
        &self.config
    }

    /// A delay seen at `now`.
    pub fn observe(&mut self, now: u64, delay_ns: u64) {
        let slice = now / self.config.slice_ns();
        match self.slices.back_mut() {
            Some((last, max)) if *last >= slice => *max = (*max).max(delay_ns),
            _ => self.slices.push_back((slice, delay_ns)),
        }
        self.forget_before(slice);
    }

    fn forget_before(&mut self, slice: u64) {
        let first = slice.saturating_sub(u64::from(self.config.slices) - 1);
        while self.slices.front().is_some_and(|(s, _)| *s < first) {
            self.slices.pop_front();
        }
    }

    /// The largest delay seen within the horizon before `now`.
    pub fn observed_max(&mut self, now: u64) -> Option<u64> {
        self.forget_before(now / self.config.slice_ns());
        self.slices.iter().map(|(_, max)| *max).max()
    }

    /// The value the log set, as applied; `now` dates the change.
    pub fn in_force(&mut self, now: u64, value: u64) {
        if self.in_force != Some(value) {
            self.in_force = Some(value);
            self.changed_slice = now / self.config.slice_ns();
        }
    }

    /// The value now in force, if the log set one.
    pub fn current(&self) -> Option<u64> {
        self.in_force
    }

    /// The value to set now, if the one in force should change (see the module's rules).
    pub fn decide(&mut self, now: u64) -> Option<u64> {
        let Some(current) = self.in_force else { return Some(self.config.max_ns) };
        let target = match self.observed_max(now) {
            Some(observed) => self.config.covering(observed),
            None => self.config.min_ns,
        };
        if target > current {
            // At least a quarter up: a delay creeping upwards costs a few settings, not
            // one per report.
            return Some(self.config.clamp(target.max(current.saturating_add(current / RAISE_AT_LEAST_DIVISOR))));
        }
        // A value below the minimum (an operator's, or older bounds) is raised to it.
        if current < self.config.min_ns {
            return Some(self.config.min_ns);
        }
        let slice = now / self.config.slice_ns();
        let full_horizon = slice >= self.changed_slice + u64::from(self.config.slices);
        let much_lower = u128::from(target) * 100 < u128::from(current) * u128::from(LOWER_BELOW_PERCENT);
        if (full_horizon && much_lower) || current > self.config.max_ns {
            return Some(target);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn config() -> AdaptiveConfig {
        AdaptiveConfig { min_ns: MS / 2, max_ns: 50 * MS, margin_percent: 150, horizon_ns: 10 * S, slices: 10 }
    }

    #[test]
    fn starts_at_the_maximum_and_then_follows_the_log() {
        let mut adaptive = Adaptive::new(config());
        assert_eq!(adaptive.decide(0), Some(50 * MS));
        adaptive.in_force(0, 50 * MS);
        adaptive.observe(1, 2 * MS);
        // Not lowered before a whole horizon since the change.
        for t in (0..10 * S).step_by((S / 10) as usize) {
            adaptive.observe(t, 2 * MS);
            assert_eq!(adaptive.decide(t), None, "lowered at {t}");
        }
        assert_eq!(adaptive.decide(10 * S), Some(3 * MS));
    }

    #[test]
    fn a_spike_raises_the_value_at_the_first_observation() {
        let mut adaptive = Adaptive::new(config());
        adaptive.in_force(0, 3 * MS);
        adaptive.observe(5 * S, 2 * MS);
        assert_eq!(adaptive.decide(5 * S), None);
        adaptive.observe(5 * S + 1, 8 * MS);
        assert_eq!(adaptive.decide(5 * S + 1), Some(12 * MS));
        // Beyond the maximum: the maximum.
        adaptive.observe(5 * S + 2, 80 * MS);
        assert_eq!(adaptive.decide(5 * S + 2), Some(50 * MS));
    }

    #[test]
    fn a_creeping_delay_raises_by_a_quarter_at_least() {
        let mut adaptive = Adaptive::new(config());
        adaptive.in_force(0, 8 * MS);
        adaptive.observe(1, 8 * MS * 2 / 3 + 1_000);
        assert_eq!(adaptive.decide(2), Some(10 * MS));
        adaptive.in_force(3, 10 * MS);
        adaptive.observe(4, 8 * MS * 2 / 3 + 2_000);
        assert_eq!(adaptive.decide(5), None, "covered by the last raise");
        // Near the maximum: the maximum, not beyond.
        adaptive.in_force(6, 45 * MS);
        adaptive.observe(7, 31 * MS);
        assert_eq!(adaptive.decide(8), Some(50 * MS));
    }

    #[test]
    fn bounds_hold_whatever_is_observed() {
        let mut adaptive = Adaptive::new(config());
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut t = 0;
        for _ in 0..100_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            t += rng % (S / 20);
            adaptive.observe(t, (rng % (200 * MS)) >> (rng % 20));
            if let Some(value) = adaptive.decide(t) {
                assert!((MS / 2..=50 * MS).contains(&value), "{value} out of bounds");
                adaptive.in_force(t, value);
            }
        }
        // Quiet: down to the minimum after a horizon.
        let mut t2 = t;
        while t2 < t + 25 * S {
            t2 += S / 10;
            adaptive.observe(t2, 1_000);
            if let Some(value) = adaptive.decide(t2) {
                adaptive.in_force(t2, value);
            }
        }
        assert_eq!(adaptive.current(), Some(MS / 2));
    }

    #[test]
    fn an_outlier_keeps_the_value_up_for_a_horizon() {
        let mut adaptive = Adaptive::new(config());
        adaptive.in_force(0, 30 * MS);
        adaptive.observe(S, 20 * MS);
        let mut t = S;
        let mut lowered_at = None;
        while t < 30 * S {
            t += S / 10;
            adaptive.observe(t, MS);
            if let Some(value) = adaptive.decide(t) {
                adaptive.in_force(t, value);
                if value < 30 * MS && lowered_at.is_none() {
                    lowered_at = Some(t);
                }
            }
        }
        let lowered_at = lowered_at.expect("lowered once quiet");
        assert!(lowered_at >= 10 * S, "lowered at {lowered_at} while the outlier was within the horizon");
        assert_eq!(adaptive.current(), Some(3 * MS / 2));
    }

    #[test]
    fn bad_bounds_are_refused() {
        assert!(AdaptiveConfig { min_ns: 2, max_ns: 1, ..config() }.validate().is_err());
        assert!(AdaptiveConfig { margin_percent: 90, ..config() }.validate().is_err());
        assert!(AdaptiveConfig { slices: 0, ..config() }.validate().is_err());
        assert!(config().validate().is_ok());
    }
}
