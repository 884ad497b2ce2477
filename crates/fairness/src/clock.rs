//! Skewed clocks: a gateway's view of time when clocks are not perfectly synchronised.
//!
//! On one machine every component reads the same clock, so clock error has to be injected. A
//! [`SkewedClock`] maps true time `t` (ns since the Unix epoch, [`true_now_ns`]) to a gateway's
//! local time:
//!
//! ```text
//! local(t) = t + offset + drift × (t − last_sync(t)),   last_sync(t) = t − t mod sync_every
//! ```
//!
//! `drift` is in parts per million. Every `sync_every` ns of true time the clock is "synced":
//! the accumulated drift is re-zeroed (the offset stays, modelling the sync protocol's residual
//! error). Sync instants are multiples of `sync_every` since the epoch, the same for every clock,
//! so the mapping is a pure function of `t`.
//!
//! Invariants and caveats:
//! - `sync_every == 0` means "never synced" and disables drift (only the offset applies).
//! - Results saturate at 0 and `u64::MAX` (a negative offset near the epoch cannot go below 0).
//! - Within a sync interval the clock runs at rate `1 + drift × 10⁻⁶`, so it is monotone there;
//!   at a sync instant a clock with positive drift **steps back** by the accumulated drift
//!   (`drift × sync_every`). A gateway that needs strictly increasing stamps must clamp them
//!   (`stamp = max(stamp, previous + 1)`).

use std::time::{SystemTime, UNIX_EPOCH};

/// The true time: ns since the Unix epoch from the system clock (0 if the clock is before the
/// epoch, `u64::MAX` past the year 2554).
pub fn true_now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A clock that is off from true time by a fixed offset plus a drift re-zeroed at every sync.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SkewedClock {
    offset_ns: i64,
    drift_ppm: f64,
    sync_every_ns: u64,
}

impl SkewedClock {
    /// A clock `offset_ns` ahead of true time (behind if negative), drifting by `drift_ppm`
    /// between syncs every `sync_every_ns` (0: no drift). A non-finite drift counts as 0.
    pub fn new(offset_ns: i64, drift_ppm: f64, sync_every_ns: u64) -> Self {
        let drift_ppm = if drift_ppm.is_finite() { drift_ppm } else { 0.0 };
        Self { offset_ns, drift_ppm, sync_every_ns }
    }

    /// The clock that reads true time.
    pub fn exact() -> Self {
        Self::default()
    }

    /// The fixed offset, ns.
    pub fn offset_ns(&self) -> i64 {
        self.offset_ns
    }

    /// The drift between syncs, ppm.
    pub fn drift_ppm(&self) -> f64 {
        self.drift_ppm
    }

    /// The sync period, ns (0: never).
    pub fn sync_every_ns(&self) -> u64 {
        self.sync_every_ns
    }

    /// The last sync instant at or before true time `true_ns`.
    pub fn last_sync(&self, true_ns: u64) -> u64 {
        match self.sync_every_ns {
            0 => true_ns,
            every => true_ns - true_ns % every,
        }
    }

    /// The clock's error at true time `true_ns`: `local − true` in ns (before saturation).
    pub fn error_at(&self, true_ns: u64) -> i64 {
        let since_sync = (true_ns - self.last_sync(true_ns)) as f64;
        // |drift| ≤ 10⁶ ppm keeps this well inside i64 for any sync period below 292 years.
        let drift_ns = (since_sync * self.drift_ppm * 1e-6).round() as i64;
        self.offset_ns.saturating_add(drift_ns)
    }

    /// The local reading at true time `true_ns`.
    pub fn at(&self, true_ns: u64) -> u64 {
        saturate(i128::from(true_ns) + i128::from(self.error_at(true_ns)))
    }

    /// The local reading now.
    pub fn now_ns(&self) -> u64 {
        self.at(true_now_ns())
    }

    /// The true time at which this clock reads `local_ns` (the inverse of [`SkewedClock::at`]).
    ///
    /// Approximate: two fixed-point steps, which is exact to within a nanosecond of rounding
    /// inside a sync interval. Within `|drift| × sync_every` of a sync instant the clock steps,
    /// so a local reading can have two true times or none; the result is then near one of them.
    pub fn true_of(&self, local_ns: u64) -> u64 {
        let local = i128::from(local_ns);
        let mut t = saturate(local - i128::from(self.offset_ns));
        for _ in 0..2 {
            t = saturate(local - i128::from(self.error_at(t)));
        }
        t
    }
}

fn saturate(ns: i128) -> u64 {
    u64::try_from(ns.max(0)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn exact_clock_is_identity() {
        let c = SkewedClock::exact();
        assert_eq!(c.at(12_345), 12_345);
        assert_eq!(c.true_of(12_345), 12_345);
        assert_eq!(c.error_at(u64::MAX), 0);
    }

    #[test]
    fn offsets_either_way_and_saturation() {
        let ahead = SkewedClock::new(1_000, 0.0, SEC);
        let behind = SkewedClock::new(-1_000, 0.0, SEC);
        assert_eq!(ahead.at(5_000), 6_000);
        assert_eq!(behind.at(5_000), 4_000);
        assert_eq!(behind.at(500), 0, "saturates at the epoch");
        assert_eq!(ahead.at(u64::MAX - 10), u64::MAX);
        assert_eq!(behind.true_of(4_000), 5_000);
        assert_eq!(ahead.true_of(6_000), 5_000);
    }

    #[test]
    fn drift_accumulates_and_resets_at_each_sync() {
        // 10 ppm, synced every second: 10 µs of drift just before each sync, 0 right after it.
        let c = SkewedClock::new(0, 10.0, SEC);
        let base = 1_700_000_000 * SEC;
        assert_eq!(c.last_sync(base + SEC / 2), base);
        assert_eq!(c.error_at(base), 0);
        assert_eq!(c.error_at(base + SEC / 2), 5_000);
        assert_eq!(c.error_at(base + SEC - 1), 10_000);
        assert_eq!(c.error_at(base + SEC), 0);
        assert!(c.at(base + SEC) < c.at(base + SEC - 1), "steps back at the sync");
        let negative = SkewedClock::new(-200, -2.5, SEC);
        assert_eq!(negative.error_at(base + SEC / 2), -200 - 1_250);
    }

    #[test]
    fn no_sync_means_no_drift() {
        let c = SkewedClock::new(7, 100.0, 0);
        assert_eq!(c.at(10 * SEC), 10 * SEC + 7);
    }

    #[test]
    fn true_of_inverts_at_inside_sync_intervals() {
        let c = SkewedClock::new(-3_000_000, 50.0, 2 * SEC);
        let base = 1_700_000_000 * SEC;
        for k in 1..100 {
            let t = base + k * (SEC / 60);
            let back = c.true_of(c.at(t));
            assert!(back.abs_diff(t) <= 1, "t={t} back={back}");
        }
    }

    #[test]
    fn now_reads_the_system_clock_with_the_offset() {
        let c = SkewedClock::new(3_600 * SEC as i64, 0.0, 0);
        let before = true_now_ns();
        let local = c.now_ns();
        let after = true_now_ns();
        assert!(before > 1_600_000_000 * SEC, "the system clock is after 2020");
        assert!(local >= before + 3_600 * SEC && local <= after + 3_600 * SEC);
    }
}
