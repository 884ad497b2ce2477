//! Measures how late precise sleeps wake up: `cargo run --release -p bourse-fairness --example wake_error`.
//!
//! Each mode runs on a fresh thread and sleeps 2,000 times to a deadline 300 µs ahead, recording
//! the wake-up error (woke − deadline). Modes: `std::thread::sleep` for the relative duration,
//! then [`sleep_until_ns`] with the default timer slack, with the slack lowered to 1 ns, and with
//! the slack lowered plus a short spin before the deadline.

use bourse_fairness::precise::{lower_timer_slack, sleep_until_ns_with_spin, timer_slack_ns};
use bourse_fairness::true_now_ns;

const SLEEPS: usize = 2_000;
const AHEAD_NS: u64 = 300_000;

fn measure(name: &str, lower_slack: bool, sleep: fn(u64)) {
    let name = name.to_owned();
    std::thread::spawn(move || {
        if lower_slack {
            lower_timer_slack().expect("prctl(PR_SET_TIMERSLACK)");
        }
        let slack = timer_slack_ns();
        let mut errors: Vec<u64> = (0..SLEEPS)
            .map(|_| {
                let deadline = true_now_ns() + AHEAD_NS;
                sleep(deadline);
                true_now_ns().saturating_sub(deadline)
            })
            .collect();
        errors.sort_unstable();
        let at = |q: f64| errors[((errors.len() - 1) as f64 * q) as usize] as f64 / 1e3;
        println!(
            "{name:<34} slack {:>8} ns  p50 {:>7.1} µs  p90 {:>7.1} µs  p99 {:>7.1} µs  max {:>8.1} µs",
            slack.map_or("?".into(), |s| s.to_string()),
            at(0.5),
            at(0.9),
            at(0.99),
            at(1.0)
        );
    })
    .join()
    .expect("measurement thread");
}

/// `threads` threads (slack lowered) sleep to the same 2,000 deadlines, 300 µs apart, like
/// gateways releasing the same item: reports the wake-up error and the spread (latest − earliest
/// wake-up) per deadline.
fn measure_together(threads: usize, spin_ns: u64) {
    let start = true_now_ns() + 5_000_000;
    let deadlines: Vec<u64> = (0..SLEEPS as u64).map(|i| start + i * AHEAD_NS).collect();
    let wakes: Vec<Vec<u64>> = (0..threads)
        .map(|_| {
            let deadlines = deadlines.clone();
            std::thread::spawn(move || {
                lower_timer_slack().expect("prctl(PR_SET_TIMERSLACK)");
                deadlines
                    .iter()
                    .map(|&d| {
                        sleep_until_ns_with_spin(d, spin_ns);
                        true_now_ns()
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("sleeper"))
        .collect();
    let mut errors: Vec<u64> = wakes.iter().flat_map(|w| w.iter().zip(&deadlines).map(|(w, d)| w - d)).collect();
    let mut spreads: Vec<u64> = (0..deadlines.len())
        .map(|i| {
            let (lo, hi) = wakes.iter().fold((u64::MAX, 0), |(lo, hi), w| (lo.min(w[i]), hi.max(w[i])));
            hi - lo
        })
        .collect();
    errors.sort_unstable();
    spreads.sort_unstable();
    let at = |v: &[u64], q: f64| v[((v.len() - 1) as f64 * q) as usize] as f64 / 1e3;
    println!(
        "{threads} threads, same deadlines, spin {:>2} µs:  error p50 {:>6.1} p99 {:>7.1} µs;  spread p50 {:>6.1} p99 {:>7.1} µs",
        spin_ns / 1_000,
        at(&errors, 0.5),
        at(&errors, 0.99),
        at(&spreads, 0.5),
        at(&spreads, 0.99)
    );
}

fn main() {
    for spin_ns in [0, 10_000, 0, 10_000] {
        measure_together(4, spin_ns);
    }
    for _ in 0..2 {
        measure("std::thread::sleep (relative)", false, |deadline| {
            std::thread::sleep(std::time::Duration::from_nanos(deadline.saturating_sub(true_now_ns())))
        });
        measure("sleep_until_ns, default slack", false, |d| sleep_until_ns_with_spin(d, 0));
        measure("sleep_until_ns, slack 1 ns", true, |d| sleep_until_ns_with_spin(d, 0));
        measure("sleep_until_ns, slack 1 ns, spin 10us", true, |d| sleep_until_ns_with_spin(d, 10_000));
        measure("sleep_until_ns, slack 1 ns, spin 20us", true, |d| sleep_until_ns_with_spin(d, 20_000));
    }
}
