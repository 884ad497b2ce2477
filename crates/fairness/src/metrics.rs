//! Unfairness metrics (CloudEx's definitions, plus Onyx's delivery spread).
//!
//! Inbound, over items in the order they were *processed* (applied by the engine, log order):
//!
//! - `iur_prev` (CloudEx): share of items whose timestamp is earlier than the timestamp of the
//!   item processed **immediately before** them.
//! - `iur_hwm` (Onyx's stricter variant): share of items whose timestamp is below the **highest
//!   timestamp processed so far**.
//!
//! Worked example: timestamps processed as 10, 30, 20, 25. `iur_prev` flags only 20 (25 %);
//! `iur_hwm` flags 20 and 25 (50 %). Both are "strictly earlier": equal timestamps never count.
//! The first item never counts, so both ratios are 0 over zero or one item.
//!
//! [`Unfairness`] computes both as a stream; [`iur_prev`] and [`iur_hwm`] do the same over a
//! slice. Invariant: `below_prev <= below_hwm <= processed` (an item earlier than its predecessor
//! is also below the high-water mark, which is at least the predecessor).
//!
//! Outbound, per market-data item delivered by several receivers (gateways), [`Spread`] gives the
//! outbound unfairness ratio `our` (share of items that reached at least one receiver after their
//! release time) and the distribution of the delivery spread (Onyx's "delivery window size":
//! latest − earliest true delivery instant over the receivers).

use std::collections::HashMap;
use std::fmt;

use hdrhistogram::Histogram;

/// A count out of a total: `hits / total`, reported both as a ratio and as a count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ratio {
    /// Items that met the condition.
    pub hits: u64,
    /// Items considered.
    pub total: u64,
}

impl Ratio {
    /// The share in `[0, 1]`; 0 when `total` is 0.
    pub fn value(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.hits as f64 / self.total as f64
        }
    }

    /// The share in percent, `[0, 100]`.
    pub fn percent(&self) -> f64 {
        100.0 * self.value()
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3} % ({}/{})", self.percent(), self.hits, self.total)
    }
}

/// What [`Unfairness::observe`] found about one item.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Observation {
    /// The item's timestamp is earlier than that of the item processed just before it.
    pub below_prev: bool,
    /// The item's timestamp is below the highest timestamp processed before it.
    pub below_hwm: bool,
}

/// Streaming inbound unfairness: feed timestamps in processing order to [`Unfairness::observe`].
#[derive(Debug, Clone, Default)]
pub struct Unfairness {
    processed: u64,
    below_prev: u64,
    below_hwm: u64,
    prev: Option<u64>,
    hwm: Option<u64>,
}

impl Unfairness {
    /// An empty counter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the next processed item's timestamp and says whether it was out of order.
    pub fn observe(&mut self, ts: u64) -> Observation {
        let obs = Observation {
            below_prev: self.prev.is_some_and(|prev| ts < prev),
            below_hwm: self.hwm.is_some_and(|hwm| ts < hwm),
        };
        self.processed += 1;
        self.below_prev += u64::from(obs.below_prev);
        self.below_hwm += u64::from(obs.below_hwm);
        self.prev = Some(ts);
        self.hwm = Some(self.hwm.map_or(ts, |hwm| hwm.max(ts)));
        obs
    }

    /// Items observed so far.
    pub fn processed(&self) -> u64 {
        self.processed
    }

    /// CloudEx's inbound unfairness ratio: items earlier than their predecessor.
    pub fn iur_prev(&self) -> Ratio {
        Ratio { hits: self.below_prev, total: self.processed }
    }

    /// The stricter ratio: items below the highest timestamp processed before them.
    pub fn iur_hwm(&self) -> Ratio {
        Ratio { hits: self.below_hwm, total: self.processed }
    }

    /// The highest timestamp observed so far.
    pub fn high_water_mark(&self) -> Option<u64> {
        self.hwm
    }
}

/// [`Unfairness::iur_prev`] over timestamps given in processing order.
pub fn iur_prev(processed_ts: &[u64]) -> Ratio {
    unfairness_of(processed_ts).iur_prev()
}

/// [`Unfairness::iur_hwm`] over timestamps given in processing order.
pub fn iur_hwm(processed_ts: &[u64]) -> Ratio {
    unfairness_of(processed_ts).iur_hwm()
}

fn unfairness_of(processed_ts: &[u64]) -> Unfairness {
    let mut u = Unfairness::new();
    for &ts in processed_ts {
        u.observe(ts);
    }
    u
}

/// The largest spread recorded as itself; longer ones are recorded as this.
pub const SPREAD_MAX_NS: u64 = 3_600_000_000_000;

/// One receiver's delivery of one item, for [`Spread::observe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// The item's release time t_R (the receiver holds the item until its clock passes it).
    pub release_ts: u64,
    /// The item reached this receiver only at or after `release_ts` on the receiver's clock, so it
    /// could not be held (this is what [`crate::HoldQueue`] reports as `late`).
    pub late: bool,
    /// When the receiver delivered the item, on the true clock (ns since the Unix epoch).
    pub delivered_true_ns: u64,
}

impl Delivery {
    /// A delivery of an item that reached the receiver at `arrived_local_ns` on the receiver's own
    /// clock; it is late when `arrived_local_ns >= release_ts` (as in [`crate::HoldQueue::push`]).
    pub fn from_arrival(release_ts: u64, arrived_local_ns: u64, delivered_true_ns: u64) -> Self {
        Self { release_ts, late: arrived_local_ns >= release_ts, delivered_true_ns }
    }
}

/// Deliveries of one item seen so far.
#[derive(Debug, Clone, Copy)]
struct Pending {
    first_ns: u64,
    last_ns: u64,
    count: u32,
    late: bool,
}

/// Outbound fairness over items delivered by a fixed number of receivers.
///
/// Each receiver reports each item once ([`Spread::observe`]). Once an item has been reported by
/// all `receivers`, its spread (latest − earliest true delivery instant) goes into a histogram and
/// the item is forgotten, so memory stays bounded by the items in flight. An item reported again
/// after that starts afresh (and would count twice): report each (receiver, item) pair once.
#[derive(Debug, Clone)]
pub struct Spread {
    receivers: u32,
    pending: HashMap<u128, Pending>,
    spreads: Histogram<u64>,
    complete: u64,
    complete_late: u64,
    complete_zero: u64,
}

/// A snapshot of [`Spread`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpreadSummary {
    /// Items reported by every receiver.
    pub complete: u64,
    /// Items reported by some but not yet all receivers (not in the spread figures).
    pub pending: u64,
    /// Outbound unfairness `our`: items (complete or pending) that reached at least one receiver
    /// late.
    pub late: Ratio,
    /// Complete items whose spread is exactly 0 (Onyx's P(F) is this share as a percentile).
    pub zero_spread: Ratio,
    /// Median spread of complete items, ns (0 when there are none).
    pub p50_ns: u64,
    /// 99th-percentile spread, ns.
    pub p99_ns: u64,
    /// Largest spread, ns.
    pub max_ns: u64,
}

impl Spread {
    /// A collector for items delivered by `receivers` receivers (at least 1).
    pub fn new(receivers: u32) -> Self {
        Self {
            receivers: receivers.max(1),
            pending: HashMap::new(),
            // Three significant figures up to an hour: spreads are recorded to within 0.1 %.
            // (Fixed bounds: an auto-resizing histogram does not grow on saturating_record.)
            spreads: Histogram::new_with_bounds(1, SPREAD_MAX_NS, 3).expect("valid bounds and precision"),
            complete: 0,
            complete_late: 0,
            complete_zero: 0,
        }
    }

    /// Records one receiver's delivery of `item`.
    pub fn observe(&mut self, item: impl Into<u128>, delivery: Delivery) {
        let item = item.into();
        let t = delivery.delivered_true_ns;
        let entry = self.pending.entry(item).or_insert(Pending { first_ns: t, last_ns: t, count: 0, late: false });
        entry.first_ns = entry.first_ns.min(t);
        entry.last_ns = entry.last_ns.max(t);
        entry.count += 1;
        entry.late |= delivery.late;
        if entry.count >= self.receivers {
            let done = *entry;
            self.pending.remove(&item);
            let spread = done.last_ns - done.first_ns;
            self.spreads.saturating_record(spread);
            self.complete += 1;
            self.complete_late += u64::from(done.late);
            self.complete_zero += u64::from(spread == 0);
        }
    }

    /// Records a delivery given as the release time, the arrival instant on the receiver's clock
    /// and the true delivery instant; see [`Delivery::from_arrival`].
    pub fn observe_delivery(
        &mut self,
        item: impl Into<u128>,
        release_ts: u64,
        arrived_local_ns: u64,
        delivered_true_ns: u64,
    ) {
        self.observe(item, Delivery::from_arrival(release_ts, arrived_local_ns, delivered_true_ns));
    }

    /// The receivers every item is expected from.
    pub fn receivers(&self) -> u32 {
        self.receivers
    }

    /// The spread histogram of complete items (ns), for other quantiles.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.spreads
    }

    /// The current figures.
    pub fn summary(&self) -> SpreadSummary {
        let pending_late = self.pending.values().filter(|p| p.late).count() as u64;
        let (p50_ns, p99_ns, max_ns) = if self.complete == 0 {
            (0, 0, 0)
        } else {
            (self.spreads.value_at_quantile(0.5), self.spreads.value_at_quantile(0.99), self.spreads.max())
        };
        SpreadSummary {
            complete: self.complete,
            pending: self.pending.len() as u64,
            late: Ratio { hits: self.complete_late + pending_late, total: self.complete + self.pending.len() as u64 },
            zero_spread: Ratio { hits: self.complete_zero, total: self.complete },
            p50_ns,
            p99_ns,
            max_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn spreads_are_reported_in_nanoseconds_as_measured() {
        let mut spread = Spread::new(2);
        for item in 0..100u64 {
            let base = 1_000_000_000 + item * 10_000;
            spread.observe(item, Delivery { release_ts: base, late: false, delivered_true_ns: base });
            spread.observe(item, Delivery { release_ts: base, late: false, delivered_true_ns: base + 150_000 });
        }
        let summary = spread.summary();
        assert_eq!(summary.complete, 100);
        for ns in [summary.p50_ns, summary.p99_ns, summary.max_ns] {
            assert!((149_000..=151_000).contains(&ns), "150 µs within 0.1 %: {ns}");
        }
    }

    use super::*;

    #[test]
    fn worked_example() {
        let ts = [10, 30, 20, 25];
        assert_eq!(iur_prev(&ts), Ratio { hits: 1, total: 4 });
        assert_eq!(iur_hwm(&ts), Ratio { hits: 2, total: 4 });
        assert_eq!(iur_prev(&ts).value(), 0.25);
        assert_eq!(iur_hwm(&ts).value(), 0.5);
    }

    #[test]
    fn streaming_flags_each_item() {
        let mut u = Unfairness::new();
        assert_eq!(u.observe(10), Observation { below_prev: false, below_hwm: false });
        assert_eq!(u.observe(30), Observation { below_prev: false, below_hwm: false });
        assert_eq!(u.observe(20), Observation { below_prev: true, below_hwm: true });
        assert_eq!(u.observe(25), Observation { below_prev: false, below_hwm: true });
        assert_eq!(u.processed(), 4);
        assert_eq!(u.high_water_mark(), Some(30));
        assert_eq!(u.iur_prev().percent(), 25.0);
    }

    #[test]
    fn equal_and_empty_are_fair() {
        assert_eq!(iur_prev(&[]).value(), 0.0);
        assert_eq!(iur_hwm(&[5]).value(), 0.0);
        assert_eq!(iur_hwm(&[5, 5, 5]), Ratio { hits: 0, total: 3 });
        assert_eq!(iur_prev(&[1, 2, 3]).hits, 0);
        // Fully reversed: every item after the first is out of order by both definitions.
        assert_eq!(iur_prev(&[4, 3, 2, 1]), Ratio { hits: 3, total: 4 });
        assert_eq!(iur_hwm(&[4, 3, 2, 1]), Ratio { hits: 3, total: 4 });
    }

    #[test]
    fn spread_quantiles_and_late_share() {
        let mut s = Spread::new(2);
        // Item i delivered at 1000 and 1000 + i (spread i ns) for i in 0..100.
        for i in 0..100u64 {
            s.observe(i, Delivery { release_ts: 1000, late: false, delivered_true_ns: 1000 });
            s.observe(i, Delivery { release_ts: 1000, late: i % 10 == 0, delivered_true_ns: 1000 + i });
        }
        let sum = s.summary();
        assert_eq!(sum.complete, 100);
        assert_eq!(sum.pending, 0);
        assert_eq!(sum.late, Ratio { hits: 10, total: 100 });
        assert_eq!(sum.zero_spread, Ratio { hits: 1, total: 100 });
        assert_eq!(sum.p50_ns, 49);
        assert_eq!(sum.p99_ns, 98);
        assert_eq!(sum.max_ns, 99);
    }

    #[test]
    fn spread_keeps_incomplete_items_pending() {
        let mut s = Spread::new(3);
        // Order of reports does not matter: min and max are kept.
        s.observe(7u64, Delivery { release_ts: 50, late: false, delivered_true_ns: 300 });
        s.observe(7u64, Delivery { release_ts: 50, late: false, delivered_true_ns: 100 });
        let sum = s.summary();
        assert_eq!((sum.complete, sum.pending), (0, 1));
        assert_eq!((sum.p50_ns, sum.max_ns), (0, 0));
        // Late because it arrived at the receiver (local clock 60) after its release time 50.
        s.observe_delivery(7u64, 50, 60, 200);
        let sum = s.summary();
        assert_eq!((sum.complete, sum.pending), (1, 0));
        assert_eq!(sum.max_ns, 200);
        assert_eq!(sum.late, Ratio { hits: 1, total: 1 });
    }

    #[test]
    fn delivery_lateness_from_arrival() {
        assert!(!Delivery::from_arrival(100, 99, 0).late);
        assert!(Delivery::from_arrival(100, 100, 0).late);
        assert!(Delivery::from_arrival(100, 150, 0).late);
    }
}
