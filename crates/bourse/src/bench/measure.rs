//! The timed loops: closed-loop throughput and open-loop latency.
//!
//! Both apply pre-generated commands to a fresh copy of the starting engine on this
//! thread, reusing one event buffer cleared per command. Throughput times the whole
//! loop. Latency gives command `i` the intended start `t0 + i / rate`, spins until
//! then, applies it, and records `now − intended` in an HDR histogram (ns): a command
//! delayed by the ones before it is charged for the wait, so there is no coordinated
//! omission. Clock reads cost some tens of nanoseconds and are included.

use std::hint::spin_loop;
use std::time::{Duration, Instant};

use bourse_engine::command::Command;
use bourse_engine::{Engine, Event, Outcome};
use hdrhistogram::Histogram;

/// Longest latency the histogram holds; longer ones are recorded as this.
const LATENCY_NS_MAX: u64 = 60_000_000_000;
const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;
/// Initial event buffer capacity; the sweep needs far more and grows it once.
const EVENTS_CAPACITY: usize = 4_096;

/// What a timed run observed besides its time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub commands: u64,
    pub rejected: u64,
}

/// Applies `commands` as fast as possible; returns the elapsed time and counts.
pub fn run_closed_loop(engine: &mut Engine, commands: &[Command]) -> (Duration, RunCounts) {
    let mut events: Vec<Event> = Vec::with_capacity(EVENTS_CAPACITY);
    let mut rejected = 0u64;
    let start = Instant::now();
    for command in commands {
        events.clear();
        let applied = engine.apply(command, &mut events);
        rejected += u64::from(matches!(applied.outcome, Outcome::Rejected(_)));
    }
    let elapsed = start.elapsed();
    (elapsed, RunCounts { commands: commands.len() as u64, rejected })
}

/// Latency percentiles of one open-loop run, in nanoseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Latency {
    pub rate_per_s: u64,
    pub commands: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub p9999_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    /// How long the run took; longer than `commands / rate` when the engine fell behind.
    pub elapsed: Duration,
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, LATENCY_SIGNIFICANT_DIGITS).expect("valid histogram bounds")
}

impl Latency {
    pub fn from_histogram(histogram: &Histogram<u64>, rate_per_s: u64, elapsed: Duration) -> Self {
        Latency {
            rate_per_s,
            commands: histogram.len(),
            p50_ns: histogram.value_at_quantile(0.50),
            p90_ns: histogram.value_at_quantile(0.90),
            p99_ns: histogram.value_at_quantile(0.99),
            p999_ns: histogram.value_at_quantile(0.999),
            p9999_ns: histogram.value_at_quantile(0.9999),
            max_ns: histogram.max(),
            mean_ns: histogram.mean(),
            elapsed,
        }
    }
}

/// Applies `commands` at `rate_per_s`, each from its intended send time.
pub fn run_open_loop(engine: &mut Engine, commands: &[Command], rate_per_s: u64) -> (Latency, RunCounts) {
    let mut histogram = new_histogram();
    let mut events: Vec<Event> = Vec::with_capacity(EVENTS_CAPACITY);
    let mut rejected = 0u64;
    let start = Instant::now();
    for (i, command) in commands.iter().enumerate() {
        // Exact in u64 for any run shorter than about 584 years of intended time.
        let intended_ns = i as u64 * 1_000_000_000 / rate_per_s;
        while (start.elapsed().as_nanos() as u64) < intended_ns {
            spin_loop();
        }
        events.clear();
        let applied = engine.apply(command, &mut events);
        let done_ns = start.elapsed().as_nanos() as u64;
        histogram.saturating_record(done_ns.saturating_sub(intended_ns).max(1));
        rejected += u64::from(matches!(applied.outcome, Outcome::Rejected(_)));
    }
    let elapsed = start.elapsed();
    let counts = RunCounts { commands: commands.len() as u64, rejected };
    (Latency::from_histogram(&histogram, rate_per_s, elapsed), counts)
}

/// The median of some durations (the mean of the middle two for an even count).
pub fn median(durations: &[Duration]) -> Duration {
    assert!(!durations.is_empty(), "median of nothing");
    let mut sorted = durations.to_vec();
    sorted.sort_unstable();
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2
    }
}

/// Million commands per second.
pub fn mops(commands: u64, elapsed: Duration) -> f64 {
    commands as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE) / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_middle() {
        let ms = Duration::from_millis;
        assert_eq!(median(&[ms(5), ms(1), ms(3)]), ms(3));
        assert_eq!(median(&[ms(4), ms(1), ms(2), ms(3)]), Duration::from_micros(2_500));
    }
}
