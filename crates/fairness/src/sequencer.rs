//! The resequencing buffer the leader runs before the log.
//!
//! Orders carry the timestamp their gateway stamped on them ([`Stamp::ts`]); the leader must
//! sequence them by that timestamp, not by when they reached it. [`Resequencer`] holds orders in
//! one priority queue keyed by [`Stamp`] — `(ts, gateway, gateway_seq)`, the last two being our
//! deterministic tie-break — and releases the smallest one once it is safe, by either rule:
//!
//! - **(a) delay buffer** (CloudEx): `now >= ts + window`. Anything stamped earlier that is still
//!   in flight is assumed lost to lateness; if it does arrive it is released late and counted.
//! - **(b) watermark merge** (Onyx, DBO): every *connected* gateway other than the item's own has a
//!   watermark `W_g > ts`. Links are FIFO and each gateway's stamps only increase, so once `g` has
//!   sent something stamped after `ts`, nothing stamped at or before `ts` can still come from `g`.
//!   Watermarks are raised by pushes and by [`Resequencer::heartbeat`]s; they never go down. Rule
//!   (b) needs at least one connected gateway: with none, only rule (a) applies, so a caller that
//!   never connects gets a pure delay buffer.
//!
//! With `window == 0` the buffer is off: items leave in arrival (push) order, immediately. (For
//! CloudEx's "d_s = 0", which still sorts whatever is queued together, use a window of 1 ns.)
//!
//! Pure: time is always passed in (ns since the Unix epoch); nothing reads a clock.
//!
//! Invariants:
//! - with `window > 0`, each release is the smallest stamp queued at that moment;
//! - nothing is lost or duplicated; `len() <= capacity` always;
//! - if every link delivers within `window` of the stamp (or watermarks are honest), releases are
//!   in stamp order, and [`SequencerStats`] counts the releases that are not.

use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::fmt;

use crate::metrics::{Ratio, Unfairness};

/// The ordering key of an order: its gateway timestamp, then gateway id, then the gateway's own
/// sequence number. The derived order is lexicographic in that field order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp {
    /// The gateway's timestamp, ns since the Unix epoch on the gateway's clock.
    pub ts: u64,
    /// The gateway that stamped it.
    pub gateway: u32,
    /// The gateway's per-order sequence number.
    pub gateway_seq: u64,
}

/// An item leaving the [`Resequencer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released<T> {
    /// The item's stamp.
    pub stamp: Stamp,
    /// The item.
    pub item: T,
    /// Queuing delay: the `now` of the release − the `now` of the push.
    pub held_ns: u64,
    /// Its `ts` is earlier than that of the item released just before it (CloudEx's IUR).
    pub out_of_order_prev: bool,
    /// Its `ts` is below the highest `ts` released before it (the stricter IUR).
    pub out_of_order_hwm: bool,
}

/// [`Resequencer::push`] refused an item because the buffer is at capacity; the caller gets the
/// item back and should apply backpressure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Full<T> {
    /// The refused item's stamp.
    pub stamp: Stamp,
    /// The refused item.
    pub item: T,
}

impl<T> fmt::Display for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "resequencer full: refused item stamped {} from gateway {} (seq {})",
            self.stamp.ts, self.stamp.gateway, self.stamp.gateway_seq
        )
    }
}

impl<T: fmt::Debug> std::error::Error for Full<T> {}

/// Counters over everything released so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SequencerStats {
    /// Items released.
    pub released: u64,
    /// Released items whose `ts` is earlier than the previous release's.
    pub out_of_order_prev: u64,
    /// Released items whose `ts` is below the highest `ts` released before them.
    pub out_of_order_hwm: u64,
}

impl SequencerStats {
    /// CloudEx's inbound unfairness ratio over the releases.
    pub fn iur_prev(&self) -> Ratio {
        Ratio { hits: self.out_of_order_prev, total: self.released }
    }

    /// The stricter inbound unfairness ratio over the releases.
    pub fn iur_hwm(&self) -> Ratio {
        Ratio { hits: self.out_of_order_hwm, total: self.released }
    }
}

#[derive(Debug)]
struct Entry<T> {
    stamp: Stamp,
    arrival: u64,
    pushed_at: u64,
    item: T,
}

impl<T> Entry<T> {
    fn key(&self) -> (Stamp, u64) {
        (self.stamp, self.arrival)
    }
}

// `BinaryHeap` is a max-heap: the smallest stamp must come out first. Equal stamps (which
// a correct gateway never produces) fall back to arrival order.
smallest_key_first!(Entry);

/// Queued items: in arrival order when the window is 0, otherwise by stamp.
#[derive(Debug)]
enum Queue<T> {
    Arrival(VecDeque<Entry<T>>),
    Stamp(BinaryHeap<Entry<T>>),
}

impl<T> Queue<T> {
    fn for_window(window_ns: u64) -> Self {
        if window_ns == 0 {
            Queue::Arrival(VecDeque::new())
        } else {
            Queue::Stamp(BinaryHeap::new())
        }
    }

    fn len(&self) -> usize {
        match self {
            Queue::Arrival(q) => q.len(),
            Queue::Stamp(q) => q.len(),
        }
    }

    fn push(&mut self, e: Entry<T>) {
        match self {
            Queue::Arrival(q) => q.push_back(e),
            Queue::Stamp(q) => q.push(e),
        }
    }

    fn peek(&self) -> Option<&Entry<T>> {
        match self {
            Queue::Arrival(q) => q.front(),
            Queue::Stamp(q) => q.peek(),
        }
    }

    fn pop(&mut self) -> Option<Entry<T>> {
        match self {
            Queue::Arrival(q) => q.pop_front(),
            Queue::Stamp(q) => q.pop(),
        }
    }

    fn into_entries(self) -> Vec<Entry<T>> {
        match self {
            Queue::Arrival(q) => q.into(),
            Queue::Stamp(q) => q.into_vec(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Gateway {
    connected: bool,
    watermark: u64,
}

/// The resequencing buffer; see the module docs for the release rules.
#[derive(Debug)]
pub struct Resequencer<T> {
    window_ns: u64,
    capacity: usize,
    queue: Queue<T>,
    next_arrival: u64,
    gateways: BTreeMap<u32, Gateway>,
    unfairness: Unfairness,
}

impl<T> Resequencer<T> {
    /// A buffer that holds each item up to `window_ns` past its stamp (0 = off: arrival order)
    /// and at most `capacity` items.
    pub fn new(window_ns: u64, capacity: usize) -> Self {
        Self {
            window_ns,
            capacity,
            queue: Queue::for_window(window_ns),
            next_arrival: 0,
            gateways: BTreeMap::new(),
            unfairness: Unfairness::new(),
        }
    }

    /// The current window, ns.
    pub fn window_ns(&self) -> u64 {
        self.window_ns
    }

    /// Changes the window (for a dynamic-delay controller). Queued items stay queued; switching
    /// to or from 0 re-sorts them (by arrival for 0, by stamp otherwise).
    pub fn set_window_ns(&mut self, window_ns: u64) {
        let reorder = (self.window_ns == 0) != (window_ns == 0);
        self.window_ns = window_ns;
        if reorder {
            let old = std::mem::replace(&mut self.queue, Queue::for_window(window_ns));
            let mut entries = old.into_entries();
            entries.sort_by_key(|e| e.arrival);
            for e in entries {
                self.queue.push(e);
            }
        }
    }

    /// The most items the buffer holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Items queued.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `gateway` to the set whose watermarks gate rule (b). Its watermark starts at 0 (or
    /// where it was, if seen before), so it holds releases until it pushes or heartbeats.
    pub fn connect(&mut self, gateway: u32) {
        self.gateways.entry(gateway).or_default().connected = true;
    }

    /// Removes `gateway` from the set whose watermarks gate rule (b); it no longer holds
    /// releases. Its items still queued stay queued, and later pushes from it are still accepted.
    pub fn disconnect(&mut self, gateway: u32) {
        if let Some(g) = self.gateways.get_mut(&gateway) {
            g.connected = false;
        }
    }

    /// Whether `gateway` is connected.
    pub fn is_connected(&self, gateway: u32) -> bool {
        self.gateways.get(&gateway).is_some_and(|g| g.connected)
    }

    /// Raises `gateway`'s watermark to `watermark_ts` (never lowers it): the gateway promises
    /// that everything it stamps from now on is stamped at or after `watermark_ts`. Does not
    /// connect the gateway.
    pub fn heartbeat(&mut self, gateway: u32, watermark_ts: u64) {
        let g = self.gateways.entry(gateway).or_default();
        g.watermark = g.watermark.max(watermark_ts);
    }

    /// `gateway`'s watermark, if it has pushed, heartbeated or connected.
    pub fn watermark(&self, gateway: u32) -> Option<u64> {
        self.gateways.get(&gateway).map(|g| g.watermark)
    }

    /// Queues `item`, received at `now`. Also raises its gateway's watermark to `stamp.ts`.
    /// Refuses it (handing it back) when `len() == capacity`.
    pub fn push(&mut self, now: u64, stamp: Stamp, item: T) -> Result<(), Full<T>> {
        if self.len() >= self.capacity {
            return Err(Full { stamp, item });
        }
        self.heartbeat(stamp.gateway, stamp.ts);
        self.queue.push(Entry { stamp, arrival: self.next_arrival, pushed_at: now, item });
        self.next_arrival += 1;
        Ok(())
    }

    /// Releases the next item if it is ready at `now` (see the module docs); call repeatedly
    /// until `None`.
    pub fn pop_ready(&mut self, now: u64) -> Option<Released<T>> {
        let head = self.queue.peek()?;
        let ready = self.window_ns == 0
            || now >= head.stamp.ts.saturating_add(self.window_ns)
            || self.watermarks_passed(head.stamp);
        if !ready {
            return None;
        }
        let e = self.queue.pop()?;
        let obs = self.unfairness.observe(e.stamp.ts);
        Some(Released {
            stamp: e.stamp,
            item: e.item,
            held_ns: now.saturating_sub(e.pushed_at),
            out_of_order_prev: obs.below_prev,
            out_of_order_hwm: obs.below_hwm,
        })
    }

    /// When the head becomes releasable by rule (a): `ts + window`. With window 0 it is due at
    /// once and this is the time it was pushed. `None` when empty. Rule (b) may release it
    /// sooner, but only after a push or heartbeat, so the caller re-checks then anyway.
    pub fn next_deadline(&self) -> Option<u64> {
        let head = self.queue.peek()?;
        Some(if self.window_ns == 0 { head.pushed_at } else { head.stamp.ts.saturating_add(self.window_ns) })
    }

    /// Counters over all releases so far.
    pub fn stats(&self) -> SequencerStats {
        SequencerStats {
            released: self.unfairness.processed(),
            out_of_order_prev: self.unfairness.iur_prev().hits,
            out_of_order_hwm: self.unfairness.iur_hwm().hits,
        }
    }

    /// Rule (b): at least one gateway is connected, and every connected gateway other than the
    /// stamp's own has a watermark past `stamp.ts`.
    fn watermarks_passed(&self, stamp: Stamp) -> bool {
        let mut any_connected = false;
        for (&id, g) in &self.gateways {
            if !g.connected {
                continue;
            }
            any_connected = true;
            if id != stamp.gateway && g.watermark <= stamp.ts {
                return false;
            }
        }
        any_connected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(ts: u64, gateway: u32, gateway_seq: u64) -> Stamp {
        Stamp { ts, gateway, gateway_seq }
    }

    /// Pops everything ready at `now`.
    fn drain<T>(r: &mut Resequencer<T>, now: u64) -> Vec<Released<T>> {
        std::iter::from_fn(|| r.pop_ready(now)).collect()
    }

    fn stamps<T>(released: &[Released<T>]) -> Vec<u64> {
        released.iter().map(|r| r.stamp.ts).collect()
    }

    /// Gateway 1 is slow: its orders stamped 100 and 200 arrive after gateway 0's 150 and 250.
    fn push_skewed(r: &mut Resequencer<&'static str>) {
        r.push(260, stamp(150, 0, 0), "g0-150").unwrap();
        r.push(270, stamp(250, 0, 1), "g0-250").unwrap();
        r.push(300, stamp(100, 1, 0), "g1-100").unwrap();
        r.push(310, stamp(200, 1, 1), "g1-200").unwrap();
    }

    #[test]
    fn window_covering_skew_restores_stamp_order() {
        let mut r = Resequencer::new(300, 16);
        push_skewed(&mut r);
        assert!(drain(&mut r, 310).is_empty(), "nothing is older than the window yet");
        assert_eq!(r.next_deadline(), Some(400));
        assert_eq!(drain(&mut r, 399).len(), 0);
        let out = drain(&mut r, 10_000);
        assert_eq!(stamps(&out), [100, 150, 200, 250]);
        assert!(out.iter().all(|o| !o.out_of_order_prev && !o.out_of_order_hwm));
        assert_eq!(out[0].held_ns, 10_000 - 300);
        assert_eq!(r.stats(), SequencerStats { released: 4, out_of_order_prev: 0, out_of_order_hwm: 0 });
        assert!(r.is_empty());
        assert_eq!(r.next_deadline(), None);
    }

    #[test]
    fn window_zero_releases_in_arrival_order() {
        let mut r = Resequencer::new(0, 16);
        push_skewed(&mut r);
        assert_eq!(r.next_deadline(), Some(260), "due at once");
        let out = drain(&mut r, 310);
        assert_eq!(stamps(&out), [150, 250, 100, 200]);
        assert_eq!(out[0].held_ns, 50);
        // 100 trails 250 (both rules); 200 trails the high-water mark 250 but not its predecessor.
        assert_eq!(r.stats(), SequencerStats { released: 4, out_of_order_prev: 1, out_of_order_hwm: 2 });
        assert!(out[2].out_of_order_prev && out[2].out_of_order_hwm);
        assert!(!out[3].out_of_order_prev && out[3].out_of_order_hwm);
    }

    #[test]
    fn ties_are_deterministic() {
        let items = [stamp(100, 2, 0), stamp(100, 0, 5), stamp(100, 1, 0), stamp(100, 0, 4), stamp(99, 3, 0)];
        let mut outputs = Vec::new();
        for rotation in 0..items.len() {
            let mut r = Resequencer::new(50, 16);
            let mut order = items.to_vec();
            order.rotate_left(rotation);
            if rotation % 2 == 1 {
                order.reverse();
            }
            for (i, s) in order.iter().enumerate() {
                r.push(100 + i as u64, *s, *s).unwrap();
            }
            outputs.push(drain(&mut r, 1_000).into_iter().map(|o| o.item).collect::<Vec<_>>());
        }
        let expected = vec![stamp(99, 3, 0), stamp(100, 0, 4), stamp(100, 0, 5), stamp(100, 1, 0), stamp(100, 2, 0)];
        assert!(outputs.iter().all(|o| *o == expected), "{outputs:?}");
    }

    #[test]
    fn capacity_is_enforced() {
        let mut r = Resequencer::new(100, 2);
        r.push(0, stamp(1, 0, 0), 'a').unwrap();
        r.push(0, stamp(2, 0, 1), 'b').unwrap();
        let err = r.push(0, stamp(3, 0, 2), 'c').unwrap_err();
        assert_eq!(err, Full { stamp: stamp(3, 0, 2), item: 'c' });
        assert!(err.to_string().contains("full"));
        assert_eq!(r.len(), 2);
        assert_eq!(r.capacity(), 2);
        assert_eq!(r.pop_ready(101).unwrap().item, 'a');
        r.push(101, stamp(3, 0, 2), 'c').unwrap();
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn watermarks_release_before_the_window() {
        let mut r = Resequencer::new(1_000, 16);
        r.connect(0);
        r.connect(1);
        r.push(100, stamp(100, 0, 0), "a").unwrap();
        assert!(r.pop_ready(120).is_none(), "gateway 1 may still send something stamped <= 100");
        r.heartbeat(1, 100);
        assert!(r.pop_ready(120).is_none(), "the watermark must pass ts, not reach it");
        r.heartbeat(1, 101);
        let out = r.pop_ready(130).expect("both gateways are past 100");
        assert_eq!((out.item, out.held_ns), ("a", 30));
        // A push raises its gateway's watermark too, and heartbeats never lower one.
        r.push(140, stamp(140, 1, 0), "b").unwrap();
        r.heartbeat(1, 50);
        assert_eq!(r.watermark(1), Some(140));
        assert!(r.pop_ready(150).is_none(), "gateway 0 is at 100");
        r.push(150, stamp(145, 0, 1), "c").unwrap();
        assert_eq!(r.pop_ready(150).unwrap().item, "b", "gateway 0 has moved past 140");
        assert!(r.pop_ready(150).is_none(), "gateway 1 is at 140, below c's 145");
        r.heartbeat(1, 146);
        assert_eq!(r.pop_ready(150).unwrap().item, "c");
        assert_eq!(r.stats().out_of_order_prev, 0);
    }

    #[test]
    fn own_gateway_does_not_block_itself() {
        let mut r = Resequencer::new(1_000, 16);
        r.connect(7);
        r.push(10, stamp(10, 7, 0), ()).unwrap();
        assert!(r.pop_ready(10).is_some(), "the only connected gateway is the item's own");
    }

    #[test]
    fn without_connected_gateways_only_the_window_releases() {
        let mut r = Resequencer::new(1_000, 16);
        r.heartbeat(1, 5_000);
        r.push(10, stamp(10, 0, 0), ()).unwrap();
        assert!(r.pop_ready(500).is_none());
        assert!(r.pop_ready(1_010).is_some());
    }

    #[test]
    fn disconnected_gateway_no_longer_holds_releases() {
        let mut r = Resequencer::new(1_000, 16);
        for g in 0..3 {
            r.connect(g);
        }
        r.push(100, stamp(100, 0, 0), "a").unwrap();
        r.heartbeat(1, 200);
        assert!(r.pop_ready(110).is_none(), "gateway 2 is silent");
        r.disconnect(2);
        assert!(!r.is_connected(2));
        assert_eq!(r.pop_ready(110).unwrap().item, "a");
        // Reconnecting makes it count again.
        r.connect(2);
        r.push(150, stamp(150, 1, 0), "b").unwrap();
        assert!(r.pop_ready(160).is_none());
        r.heartbeat(2, 151);
        r.heartbeat(0, 151);
        assert_eq!(r.pop_ready(160).unwrap().item, "b");
    }

    #[test]
    fn late_item_is_released_and_counted() {
        let mut r = Resequencer::new(100, 16);
        r.push(50, stamp(50, 0, 0), "a").unwrap();
        r.push(60, stamp(60, 0, 1), "b").unwrap();
        assert_eq!(stamps(&drain(&mut r, 200)), [50, 60]);
        // Gateway 1's order stamped 40 arrives 200 ns late.
        r.push(240, stamp(40, 1, 0), "late").unwrap();
        let out = r.pop_ready(240).expect("already past its window");
        assert_eq!(out.item, "late");
        assert!(out.out_of_order_prev && out.out_of_order_hwm);
        r.push(245, stamp(45, 1, 1), "later").unwrap();
        let out = r.pop_ready(245).unwrap();
        assert!(!out.out_of_order_prev && out.out_of_order_hwm);
        let stats = r.stats();
        assert_eq!(stats, SequencerStats { released: 4, out_of_order_prev: 1, out_of_order_hwm: 2 });
        assert_eq!(stats.iur_hwm().value(), 0.5);
    }

    #[test]
    fn changing_the_window_keeps_items() {
        let mut r = Resequencer::new(0, 16);
        push_skewed(&mut r);
        r.set_window_ns(500);
        assert_eq!(r.window_ns(), 500);
        assert!(r.pop_ready(310).is_none());
        r.set_window_ns(0);
        assert_eq!(stamps(&drain(&mut r, 310)), [150, 250, 100, 200], "arrival order again");
        push_skewed(&mut r);
        r.set_window_ns(1);
        assert_eq!(stamps(&drain(&mut r, 310)), [100, 150, 200, 250]);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        const MAX_DELAY: u64 = 500;

        /// One gateway's traffic: (gap since its previous message, heartbeat?, link delay). Gaps are
        /// coarse so that stamps often tie across gateways, and may be 0: a gateway's stamps never
        /// decrease but can repeat (two orders, or a heartbeat and an order, in the same nanosecond).
        fn gateway_traffic() -> impl Strategy<Value = Vec<(u64, bool, u64)>> {
            let gap = (0..4u64).prop_map(|g| g * 50);
            prop::collection::vec((gap, prop::bool::weighted(0.3), 0..=MAX_DELAY), 0..40)
        }

        #[derive(Debug, Clone, Copy)]
        enum Event {
            Order(Stamp),
            Heartbeat { gateway: u32, watermark: u64 },
            Probe,
        }

        proptest! {
            #[test]
            fn window_covering_delay_releases_in_stamp_order(
                traffic in prop::collection::vec(gateway_traffic(), 1..5),
                probes in prop::collection::vec(0..10_000u64, 0..20),
                extra_window in 0..100u64,
                use_watermarks in any::<bool>(),
            ) {
                // Build the arrival schedule: each gateway stamps with non-decreasing times, and its
                // link is FIFO, so a message arrives at max(previous arrival, stamp + delay).
                let mut events: Vec<(u64, u32, usize, Event)> = Vec::new();
                let mut orders = Vec::new();
                for (g, msgs) in traffic.iter().enumerate() {
                    let g = g as u32;
                    let (mut t, mut last_arrival, mut seq) = (1_000u64, 0u64, 0u64);
                    for (i, &(gap, heartbeat, delay)) in msgs.iter().enumerate() {
                        t += gap;
                        last_arrival = last_arrival.max(t + delay);
                        let ev = if heartbeat {
                            Event::Heartbeat { gateway: g, watermark: t }
                        } else {
                            let s = Stamp { ts: t, gateway: g, gateway_seq: seq };
                            seq += 1;
                            orders.push(s);
                            Event::Order(s)
                        };
                        events.push((last_arrival, g, i, ev));
                    }
                }
                for p in probes {
                    events.push((p, u32::MAX, 0, Event::Probe));
                }
                events.sort_by_key(|&(at, g, i, _)| (at, g, i));

                let mut r = Resequencer::new(MAX_DELAY + extra_window, 1 << 16);
                if use_watermarks {
                    for g in 0..traffic.len() as u32 {
                        r.connect(g);
                    }
                }
                let mut released = Vec::new();
                let mut i = 0;
                while i < events.len() {
                    let now = events[i].0;
                    // Time advances to `now`: first release what fell due on the way.
                    while let Some(d) = r.next_deadline().filter(|&d| d < now) {
                        released.extend(std::iter::from_fn(|| r.pop_ready(d)));
                    }
                    while i < events.len() && events[i].0 == now {
                        match events[i].3 {
                            Event::Order(s) => r.push(now, s, s).unwrap(),
                            Event::Heartbeat { gateway, watermark } => r.heartbeat(gateway, watermark),
                            Event::Probe => {}
                        }
                        i += 1;
                    }
                    released.extend(std::iter::from_fn(|| r.pop_ready(now)));
                }
                released.extend(std::iter::from_fn(|| r.pop_ready(u64::MAX)));

                prop_assert!(r.is_empty());
                let out: Vec<Stamp> = released.iter().map(|o| o.stamp).collect();
                prop_assert!(out.windows(2).all(|w| w[0] < w[1]), "not in stamp order: {:?}", out);
                prop_assert!(released.iter().all(|o| o.item == o.stamp));
                orders.sort();
                prop_assert_eq!(&out, &orders, "lost or duplicated");
                let stats = r.stats();
                prop_assert_eq!(stats.released, orders.len() as u64);
                prop_assert_eq!((stats.out_of_order_prev, stats.out_of_order_hwm), (0, 0));
            }
        }
    }
}
