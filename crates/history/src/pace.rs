//! Yielding to trading: a sink that records a busy exchange takes a bounded share of
//! the time.
//!
//! `SCHED_IDLE` ([`crate::SinkConfig::background`]) keeps the sink off a core that
//! trading wants, but not out of its way: on a 2-core machine the sink running beside
//! the node still costs it a fifth of its throughput and doubles its ack p99 (cache and
//! memory traffic, a sibling hyperthread, and the history's writes queued on the disk
//! ahead of the journal's `fdatasync`; docs/BENCHMARKS.md). So while the exchange is
//! busy — its log growing faster than `busy_entries_per_sec` — each sink thread, after
//! a piece of work that took `w`, rests `w × (1 − duty) / duty`: together they take at
//! most `duty` of a core each, and the history falls behind. When the log slows below
//! the threshold (checked every [`SAMPLE`], also while resting), the sink works flat
//! out again (at idle priority) and catches up.
//!
//! The pacer reads the log's head through a probe (the node's applied index, for a
//! sink in the node's process): what it is told about the head by its source would stop
//! coming while it rests.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the head's rate is measured.
pub const SAMPLE: Duration = Duration::from_millis(100);

/// The log's head index, read cheaply and often.
pub type HeadProbe = Arc<dyn Fn() -> u64 + Send + Sync>;

/// When and how much a sink yields (part of [`crate::SinkConfig`]).
#[derive(Clone)]
pub struct Yield {
    pub head: HeadProbe,
    /// The log growing faster than this (entries per second) counts as busy.
    pub busy_entries_per_sec: u64,
    /// While busy, each sink thread works at most this share of the time (percent).
    pub duty_percent: u32,
}

impl std::fmt::Debug for Yield {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Yield")
            .field("busy_entries_per_sec", &self.busy_entries_per_sec)
            .field("duty_percent", &self.duty_percent)
            .finish_non_exhaustive()
    }
}

impl Yield {
    /// Defaults for a sink in a trading node's process: busy above 20,000 entries a
    /// second (a demo's market is far below; a benchmark's flat-out load far above),
    /// and 2 % of a core per thread while busy.
    pub fn to(head: HeadProbe) -> Yield {
        Yield { head, busy_entries_per_sec: 20_000, duty_percent: 2 }
    }
}

/// Shared by the sink's recorder and writer.
pub(crate) struct Pacer {
    config: Yield,
    sample: Mutex<Sample>,
}

struct Sample {
    at: Instant,
    head: u64,
    busy: bool,
}

impl Pacer {
    pub(crate) fn new(config: Yield) -> Pacer {
        assert!((1..=100).contains(&config.duty_percent), "duty_percent is 1 to 100");
        let head = (config.head)();
        Pacer { config, sample: Mutex::new(Sample { at: Instant::now(), head, busy: false }) }
    }

    /// Whether the log grew faster than the threshold over the last sample.
    pub(crate) fn busy(&self) -> bool {
        let mut sample = self.sample.lock().expect("pacer lock");
        let elapsed = sample.at.elapsed();
        if elapsed >= SAMPLE {
            let head = (self.config.head)();
            let grown = head.saturating_sub(sample.head) as f64;
            sample.busy = grown / elapsed.as_secs_f64() > self.config.busy_entries_per_sec as f64;
            sample.at = Instant::now();
            sample.head = head;
        }
        sample.busy
    }

    /// After a piece of work that took `worked`: rests its share while the log is busy,
    /// and stops resting as soon as it is not. Returns how long it rested.
    pub(crate) fn after(&self, worked: Duration) -> Duration {
        let duty = f64::from(self.config.duty_percent) / 100.0;
        let mut owed = worked.mul_f64((1.0 - duty) / duty);
        let mut rested = Duration::ZERO;
        while !owed.is_zero() && self.busy() {
            let step = owed.min(SAMPLE);
            std::thread::sleep(step);
            rested += step;
            owed -= step;
        }
        rested
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    fn pacer(head: Arc<AtomicU64>) -> Pacer {
        let probe: HeadProbe = Arc::new(move || head.load(Ordering::Relaxed));
        Pacer::new(Yield { head: probe, busy_entries_per_sec: 1_000, duty_percent: 10 })
    }

    #[test]
    fn a_quiet_log_costs_no_rest() {
        let head = Arc::new(AtomicU64::new(5));
        let pacer = pacer(Arc::clone(&head));
        std::thread::sleep(SAMPLE);
        let started = Instant::now();
        assert_eq!(pacer.after(Duration::from_millis(50)), Duration::ZERO);
        assert!(started.elapsed() < Duration::from_millis(40), "rested {:?}", started.elapsed());
    }

    #[test]
    fn a_busy_log_makes_the_sink_rest_its_share_and_stop_resting_when_it_quiets() {
        let head = Arc::new(AtomicU64::new(0));
        let pacer = pacer(Arc::clone(&head));
        // 10,000 entries in ~100 ms: far above 1,000 a second.
        std::thread::sleep(SAMPLE);
        head.store(10_000, Ordering::Relaxed);
        assert!(pacer.busy());
        // The log keeps growing while the sink rests: 10 ms of work owes 90 ms.
        let grower = {
            let head = Arc::clone(&head);
            std::thread::spawn(move || {
                for _ in 0..30 {
                    head.fetch_add(1_000, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        let started = Instant::now();
        pacer.after(Duration::from_millis(10));
        let rested = started.elapsed();
        assert!(rested >= Duration::from_millis(85), "rested only {rested:?}");
        grower.join().unwrap();
        // The log stops: a long rest owed is cut short at the next sample.
        std::thread::sleep(SAMPLE);
        let started = Instant::now();
        pacer.after(Duration::from_secs(10));
        assert!(started.elapsed() < 3 * SAMPLE, "kept resting {:?} on a quiet log", started.elapsed());
    }
}
