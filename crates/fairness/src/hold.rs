//! Hold-and-release: the queue a gateway keeps market data in until its release time.
//!
//! An item created at t_M gets a release time t_R = t_M + d_h. Each gateway pushes the items it
//! receives into a [`HoldQueue`] and forwards them once its (possibly skewed) clock passes t_R, so
//! every gateway delivers an item at the same instant. An item that reaches the gateway at or after
//! its t_R is *late*: it is due at once and counts toward the outbound unfairness ratio.
//!
//! Pure: time is passed in (ns on the gateway's clock), nothing reads a clock.
//!
//! Invariants: [`HoldQueue::pop_due`] returns items in order of release time, ties in insertion
//! order; it never returns an item before its release time; nothing is lost or duplicated.

use std::collections::BinaryHeap;

/// An item leaving the [`HoldQueue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due<T> {
    /// The item's release time t_R.
    pub release_ts: u64,
    /// The item arrived at or after its release time, so it could not be held.
    pub late: bool,
    /// Time spent in the queue: the `now` of [`HoldQueue::pop_due`] − the `now` of the push.
    pub held_ns: u64,
    /// The item.
    pub item: T,
}

#[derive(Debug)]
struct Entry<T> {
    release_ts: u64,
    seq: u64,
    pushed_at: u64,
    late: bool,
    item: T,
}

impl<T> Entry<T> {
    fn key(&self) -> (u64, u64) {
        (self.release_ts, self.seq)
    }
}

// `BinaryHeap` is a max-heap: the earliest key must come out first.
smallest_key_first!(Entry);

/// A min-heap of items keyed by release time (ties by insertion order).
#[derive(Debug)]
pub struct HoldQueue<T> {
    heap: BinaryHeap<Entry<T>>,
    next_seq: u64,
    late: u64,
}

impl<T> Default for HoldQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> HoldQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self { heap: BinaryHeap::new(), next_seq: 0, late: 0 }
    }

    /// Holds `item` until `release_ts`. Returns whether it is late (`now >= release_ts`); a late
    /// item is due immediately.
    pub fn push(&mut self, now: u64, release_ts: u64, item: T) -> bool {
        let late = now >= release_ts;
        self.late += u64::from(late);
        self.heap.push(Entry { release_ts, seq: self.next_seq, pushed_at: now, late, item });
        self.next_seq += 1;
        late
    }

    /// The item with the earliest release time, if that time is `<= now`.
    pub fn pop_due(&mut self, now: u64) -> Option<Due<T>> {
        if self.heap.peek()?.release_ts > now {
            return None;
        }
        let e = self.heap.pop()?;
        Some(Due { release_ts: e.release_ts, late: e.late, held_ns: now.saturating_sub(e.pushed_at), item: e.item })
    }

    /// The earliest release time held, for the caller's timed wait.
    pub fn next_due(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.release_ts)
    }

    /// Items held.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Items pushed so far that were late on arrival.
    pub fn late_count(&self) -> u64 {
        self.late
    }

    /// Items pushed so far.
    pub fn pushed_count(&self) -> u64 {
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_in_release_time_order_and_not_before() {
        let mut q = HoldQueue::new();
        assert!(!q.push(0, 300, "c"));
        assert!(!q.push(10, 100, "a"));
        assert!(!q.push(20, 200, "b"));
        assert_eq!(q.len(), 3);
        assert_eq!(q.next_due(), Some(100));
        assert_eq!(q.pop_due(99), None);
        let a = q.pop_due(100).unwrap();
        assert_eq!(a, Due { release_ts: 100, late: false, held_ns: 90, item: "a" });
        assert_eq!(q.pop_due(150), None);
        // Several due at once come out in release-time order.
        assert_eq!(q.pop_due(1000).unwrap().item, "b");
        assert_eq!(q.pop_due(1000).unwrap().item, "c");
        assert_eq!(q.pop_due(1000), None);
        assert!(q.is_empty());
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn ties_in_insertion_order() {
        let mut q = HoldQueue::new();
        for i in 0..10 {
            q.push(0, 50, i);
        }
        let out: Vec<_> = std::iter::from_fn(|| q.pop_due(50).map(|d| d.item)).collect();
        assert_eq!(out, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn late_items_are_due_at_once_and_flagged() {
        let mut q = HoldQueue::new();
        q.push(0, 500, "held");
        assert!(q.push(400, 400, "exactly on time counts as late"));
        assert!(q.push(400, 300, "late"));
        assert_eq!(q.late_count(), 2);
        assert_eq!(q.pushed_count(), 3);
        let first = q.pop_due(400).unwrap();
        assert_eq!((first.item, first.late, first.held_ns), ("late", true, 0));
        let second = q.pop_due(401).unwrap();
        assert_eq!((second.item, second.late, second.held_ns), ("exactly on time counts as late", true, 1));
        assert_eq!(q.pop_due(499), None);
        assert!(!q.pop_due(500).unwrap().late);
    }
}
