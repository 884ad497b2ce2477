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

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The true time: ns since the Unix epoch from the system clock (0 if the clock is before the
/// epoch, `u64::MAX` past the year 2554).
pub fn true_now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A source of wall-clock time, in ns since the Unix epoch, other than the system's: the
/// deterministic simulator's virtual clock (`crates/simulator`), one per simulated
/// process, so that each can be skewed or jump on its own.
pub trait TimeSource: Send + Sync + 'static {
    fn now_ns(&self) -> u64;
}

/// Where a component reads the time: the system clock ([`true_now_ns`]), unless a
/// simulator supplies its own [`TimeSource`].
///
/// A component on a virtual clock runs what would be a thread of its own (a node's core
/// and fair sequencer, a gateway's market data release) as a task on the current tokio
/// runtime instead, whose timer (paused, in the simulator) is that clock: a thread would
/// sleep in real time. In production nothing changes but one branch per reading.
#[derive(Clone, Default)]
pub struct Clock(Option<Arc<dyn TimeSource>>);

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock(None)
    }

    /// A simulated clock.
    pub fn simulated(source: Arc<dyn TimeSource>) -> Clock {
        Clock(Some(source))
    }

    /// Now, in ns since the Unix epoch.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match &self.0 {
            None => true_now_ns(),
            Some(source) => source.now_ns(),
        }
    }

    /// Whether this is a simulator's clock (loops run as tasks, not threads).
    pub fn is_simulated(&self) -> bool {
        self.0.is_some()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_simulated() { "Clock(simulated)" } else { "Clock(system)" })
    }
}

/// Clocks compare equal when both are the system clock or both are the same source.
impl PartialEq for Clock {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
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

    /// The local reading now, true time read from `clock`.
    pub fn now_on(&self, clock: &Clock) -> u64 {
        self.at(clock.now_ns())
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

    struct Fixed(u64);

    impl TimeSource for Fixed {
        fn now_ns(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn a_simulated_clock_reads_its_source() {
        let clock = Clock::simulated(Arc::new(Fixed(42 * SEC)));
        assert!(clock.is_simulated() && !Clock::system().is_simulated());
        assert_eq!(clock.now_ns(), 42 * SEC);
        assert_eq!(SkewedClock::new(1_000, 0.0, 0).now_on(&clock), 42 * SEC + 1_000);
        assert_eq!(clock, clock.clone());
        assert_ne!(clock, Clock::simulated(Arc::new(Fixed(42 * SEC))));
        assert_eq!(Clock::system(), Clock::default());
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
