//! `bourse bench host`: how much of a CPU this machine actually gives a thread.
//!
//! One thread spins reading the monotonic clock and records every gap between two
//! consecutive reads longer than [`GAP_MIN_NS`]: time the CPU spent elsewhere (timer
//! and device interrupts, other threads, and on a VM the hypervisor's exits and steal).
//! Run it pinned (`taskset -c 1`) beside the engine benchmark to see what the host adds.
//!
//! From the gaps follows a floor under any latency measured on this CPU: work arriving
//! at a uniformly random instant that falls inside a gap of length g, at distance d
//! from its end, waits d before it can even start. So the share of time that lies more
//! than x before the end of a gap, `Σ max(0, g − x) / T`, is the probability that such
//! work waits longer than x. The floor of a percentile p is the x at which that share
//! is 1 − p: no program on this CPU can promise a lower latency at that percentile for
//! arrivals at random instants (queueing only adds to it).

use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use super::report::{progress, round3, Report};

/// Gaps shorter than this are the loop's own cost (a clock read takes tens of ns).
const GAP_MIN_NS: u64 = 1_000;

#[derive(Args, Debug)]
pub struct HostArgs {
    /// Seconds to spin.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Print one JSON object as the last line of stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &HostArgs) -> Result<(), String> {
    if !(args.seconds > 0.0 && args.seconds <= 3_600.0) {
        return Err("--seconds must be more than 0 and at most 3600".into());
    }
    progress(format!(
        "host: spinning one thread for {} s, recording gaps over {} µs",
        args.seconds,
        GAP_MIN_NS / 1_000
    ));
    let before = CpuTimes::read();
    let (gaps, spun) = spin(Duration::from_secs_f64(args.seconds));
    let steal = before.zip(CpuTimes::read()).and_then(|(before, after)| after.steal_since(&before));
    let gaps = Gaps::new(gaps, spun.as_nanos() as u64);

    let mut report = Report::new(args.json);
    report.set("workload", "host");
    report.set("seconds", round3(spun.as_secs_f64()));
    report.say(format!("spun {:.3} s on one thread", spun.as_secs_f64()));
    let mut counts = serde_json::Map::new();
    for threshold_us in [5u64, 20, 100, 1_000] {
        let (count, lost_ns) = gaps.longer_than(threshold_us * 1_000);
        report.say(format!(
            "  gaps over {threshold_us:>5} µs: {count:>7} ({:>8.1}/s), {:.3}% of the time",
            count as f64 / spun.as_secs_f64(),
            lost_ns as f64 * 100.0 / gaps.total_ns as f64
        ));
        counts.insert(format!("over_{threshold_us}us"), json!(count));
    }
    report.set("gaps", counts);
    report.set("gap_max_us", round3(gaps.max_ns() as f64 / 1_000.0));
    report.say(format!("  longest gap: {:.1} µs", gaps.max_ns() as f64 / 1_000.0));
    let mut floors = serde_json::Map::new();
    let mut line = String::from("latency floor for arrivals at random instants:");
    for (name, quantile) in [("p99", 0.99), ("p999", 0.999), ("p9999", 0.9999)] {
        let floor_ns = gaps.floor_ns(quantile);
        line.push_str(&format!(" {name} {:.1} µs", floor_ns as f64 / 1_000.0));
        floors.insert(name.to_string(), json!(round3(floor_ns as f64 / 1_000.0)));
    }
    report.say(line);
    report.set("latency_floor_us", floors);
    match steal {
        Some(steal) => {
            report.say(format!("hypervisor steal over the run: {:.2}% of all CPU time", steal * 100.0));
            report.set("host_steal", round3(steal));
        }
        None => report.set("host_steal", serde_json::Value::Null),
    }
    report.finish();
    Ok(())
}

/// Spins for `length`, returning every gap over [`GAP_MIN_NS`] and the time spun.
fn spin(length: Duration) -> (Vec<u64>, Duration) {
    let start = Instant::now();
    let mut gaps = Vec::new();
    let mut previous = start;
    loop {
        let now = Instant::now();
        let gap = now.duration_since(previous).as_nanos() as u64;
        if gap > GAP_MIN_NS {
            gaps.push(gap);
        }
        previous = now;
        if now.duration_since(start) >= length {
            return (gaps, now.duration_since(start));
        }
    }
}

/// The gaps of one run, longest first.
struct Gaps {
    sorted: Vec<u64>,
    total_ns: u64,
}

impl Gaps {
    fn new(mut gaps: Vec<u64>, total_ns: u64) -> Self {
        gaps.sort_unstable_by(|a, b| b.cmp(a));
        Gaps { sorted: gaps, total_ns: total_ns.max(1) }
    }

    fn max_ns(&self) -> u64 {
        self.sorted.first().copied().unwrap_or(0)
    }

    /// How many gaps are longer than `ns`, and their total length.
    fn longer_than(&self, ns: u64) -> (usize, u64) {
        let over: Vec<u64> = self.sorted.iter().copied().take_while(|&g| g > ns).collect();
        (over.len(), over.iter().sum())
    }

    /// The share of time more than `x` ns before the end of a gap: the probability that
    /// work arriving at a random instant cannot start for longer than `x`.
    fn share_waiting_over(&self, x: u64) -> f64 {
        let waiting: u64 = self.sorted.iter().take_while(|&&g| g > x).map(|&g| g - x).sum();
        waiting as f64 / self.total_ns as f64
    }

    /// The smallest x whose share of waiting over x is at most `1 − quantile`.
    fn floor_ns(&self, quantile: f64) -> u64 {
        let allowed = 1.0 - quantile;
        let (mut low, mut high) = (0u64, self.max_ns());
        while low < high {
            let mid = low + (high - low) / 2;
            if self.share_waiting_over(mid) <= allowed {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        low
    }
}

/// The machine's CPU time so far, in ticks: all of it, and what the hypervisor stole.
pub(super) struct CpuTimes {
    total: u64,
    steal: u64,
}

impl CpuTimes {
    /// Reads the first line of /proc/stat (`cpu user nice system idle iowait irq
    /// softirq steal …`); `None` where there is none.
    pub(super) fn read() -> Option<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let fields: Vec<u64> =
            stat.lines().next()?.split_whitespace().skip(1).take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
        (fields.len() == 8).then(|| CpuTimes { total: fields.iter().sum(), steal: fields[7] })
    }

    /// The share of all CPU time since `before` that the hypervisor took.
    pub(super) fn steal_since(&self, before: &CpuTimes) -> Option<f64> {
        let total = self.total.checked_sub(before.total).filter(|&t| t > 0)?;
        Some(self.steal.saturating_sub(before.steal) as f64 / total as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_where_the_waiting_share_meets_the_quantile() {
        // One second with ten gaps of 100 µs: 0.1% of the time is inside a gap.
        let gaps = Gaps::new(vec![100_000; 10], 1_000_000_000);
        assert_eq!(gaps.longer_than(50_000), (10, 1_000_000));
        assert_eq!(gaps.longer_than(100_000), (0, 0));
        // p99: 1% may wait; only 0.1% is in a gap at all, so nothing need wait.
        assert_eq!(gaps.floor_ns(0.99), 0);
        // p99.99: 0.01% may wait longer than x; 10 × (100 µs − x) / 1 s = 1e-4 at x = 90 µs.
        let floor = gaps.floor_ns(0.9999);
        assert!((89_990..=90_010).contains(&floor), "{floor}");
        // p99.9: exactly the gap share, so x = 0 already meets it.
        assert_eq!(gaps.floor_ns(0.999), 0);
    }

    #[test]
    fn no_gaps_no_floor() {
        let gaps = Gaps::new(Vec::new(), 1_000_000_000);
        assert_eq!((gaps.max_ns(), gaps.floor_ns(0.9999)), (0, 0));
    }

    #[test]
    fn a_short_spin_runs_for_its_length() {
        let (_, spun) = spin(Duration::from_millis(20));
        assert!(spun >= Duration::from_millis(20));
    }
}
