//! Precise waiting for sub-millisecond deadlines.
//!
//! Tokio's timer has 1 ms granularity, far coarser than the 10–400 µs delays and hold times
//! fairness works with. A dedicated thread can do much better with the OS timer:
//!
//! - [`sleep_until_ns`] sleeps to an absolute deadline on the true clock (ns since the Unix
//!   epoch, as [`crate::true_now_ns`]). On Linux it uses `clock_nanosleep(CLOCK_REALTIME,
//!   TIMER_ABSTIME)`, so there is no drift from converting to a relative duration and a wake-up
//!   after a signal resumes to the same deadline. Elsewhere it falls back to `std::thread::sleep`.
//! - Linux delays every timer wake-up of a thread by up to its *timer slack* (50 µs by default) to
//!   batch wake-ups. [`lower_timer_slack`], called once on a thread, sets the slack of that
//!   thread to 1 ns (`prctl(PR_SET_TIMERSLACK)`, through rustix's safe wrapper).
//! - Optionally, the last few µs before the deadline are spun ([`sleep_until_ns_with_spin`]); the
//!   default, [`SPIN_NS`], is no spin (its docs give the measurements). Nothing here busy-waits
//!   longer than the spin it is given.
//! - [`run_realtime`] puts the calling thread under `SCHED_FIFO`, so that a thread which must
//!   wake at an instant is not kept waiting behind ordinary threads that have time left in
//!   their slice. It needs `CAP_SYS_NICE` (or an `RLIMIT_RTPRIO`); callers fall back to ordinary
//!   priority when refused. Only for threads that sleep almost all the time: a real-time thread
//!   that spins holds its CPU against everything else (the kernel's real-time throttling leaves
//!   others 5 %).
//!
//! Never returns before the deadline (as read by [`crate::true_now_ns`]); it may return late by
//! the OS's wake-up latency, which on a loaded machine is unbounded.

use crate::clock::true_now_ns;

/// The default spin before a deadline, ns: none.
///
/// Measured on a shared 2-core VM (`examples/wake_error.rs`, 2,000 sleeps to deadlines 300 µs
/// ahead; wake-up error = woke − deadline):
///
/// | Mode | p50 | p99 |
/// |---|---|---|
/// | `std::thread::sleep`, default 50 µs slack | ≈ 58 µs | 105–560 µs |
/// | [`sleep_until_ns`], default slack | ≈ 59 µs | 120–470 µs |
/// | [`sleep_until_ns`], slack 1 ns | 7–13 µs | 60–85 µs |
/// | slack 1 ns + 10 µs spin | 0.1–6 µs | 55–90 µs |
///
/// Lowering the slack is the big win. A spin fixes the median but not the tail (scheduler
/// latency), and with four threads sharing each deadline on two cores it did not narrow their
/// spread (p50 ≈ 6–7 µs either way), while costing CPU at every wake-up. So the default is no
/// spin; [`sleep_until_ns_with_spin`] is there for a thread that owns a core.
pub const SPIN_NS: u64 = 0;

/// Lowers the calling thread's timer slack to 1 ns (Linux; elsewhere a no-op). Call once on each
/// thread that uses [`sleep_until_ns`] or timed waits that must be precise. Affects only the
/// calling thread (and threads it spawns afterwards).
pub fn lower_timer_slack() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1))?;
    }
    Ok(())
}

/// Runs the calling thread under `SCHED_FIFO` at `priority` (1–99). Errors when the priority is
/// out of range, the platform has no such policy, or the process may not (no `CAP_SYS_NICE`).
pub fn run_realtime(priority: u8) -> Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::{
            set_thread_priority_and_policy, thread_native_id, RealtimeThreadSchedulePolicy, ThreadPriority,
            ThreadPriorityValue, ThreadSchedulePolicy,
        };
        if priority == 0 {
            return Err("a real-time priority is 1 to 99".to_string());
        }
        let value = ThreadPriorityValue::try_from(priority).map_err(|e| e.to_string())?;
        set_thread_priority_and_policy(
            thread_native_id(),
            ThreadPriority::Crossplatform(value),
            ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo),
        )
        .map_err(|e| match e {
            thread_priority::Error::OS(code) => format!(
                "SCHED_FIFO at priority {priority} refused: {} (it needs CAP_SYS_NICE or an RLIMIT_RTPRIO)",
                std::io::Error::from_raw_os_error(code)
            ),
            other => format!("SCHED_FIFO at priority {priority} refused: {other:?}"),
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(format!("no SCHED_FIFO here (priority {priority})"))
    }
}

/// The calling thread's timer slack in ns (Linux only; `None` elsewhere or on error).
pub fn timer_slack_ns() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        rustix::thread::current_timer_slack().ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Sleeps until the true clock reads at least `deadline_true_ns`, spinning the last
/// [`SPIN_NS`]. Returns at once if the deadline has passed.
pub fn sleep_until_ns(deadline_true_ns: u64) {
    sleep_until_ns_with_spin(deadline_true_ns, SPIN_NS);
}

/// [`sleep_until_ns`] with an explicit spin: sleeps to `deadline_true_ns − spin_ns`, then spins
/// (yielding the core's pipeline, not the thread) until the deadline. Keep `spin_ns` short (under
/// 20 µs): a spinning thread holds a core.
pub fn sleep_until_ns_with_spin(deadline_true_ns: u64, spin_ns: u64) {
    let wake = deadline_true_ns.saturating_sub(spin_ns);
    loop {
        let now = true_now_ns();
        if now >= wake {
            break;
        }
        os_sleep_until(now, wake);
    }
    while true_now_ns() < deadline_true_ns {
        std::hint::spin_loop();
    }
}

#[cfg(target_os = "linux")]
fn os_sleep_until(_now: u64, deadline: u64) {
    use rustix::thread::{clock_nanosleep_absolute, ClockId, Timespec};
    let at = Timespec { tv_sec: (deadline / 1_000_000_000) as _, tv_nsec: (deadline % 1_000_000_000) as _ };
    // EINTR (a signal) just returns early; the caller's loop sleeps again. Any other error
    // (none is expected for a valid absolute time) falls back to a relative sleep.
    if let Err(e) = clock_nanosleep_absolute(ClockId::Realtime, &at) {
        if e != rustix::io::Errno::INTR {
            std::thread::sleep(std::time::Duration::from_nanos(deadline.saturating_sub(true_now_ns())));
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn os_sleep_until(now: u64, deadline: u64) {
    std::thread::sleep(std::time::Duration::from_nanos(deadline - now));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_after_and_near_a_300us_deadline() {
        // Run on a fresh thread: the slack change must not leak into the test harness's threads.
        std::thread::spawn(|| {
            lower_timer_slack().unwrap();
            #[cfg(target_os = "linux")]
            assert_eq!(timer_slack_ns(), Some(1));
            let mut errors: Vec<u64> = (0..20)
                .map(|_| {
                    let deadline = true_now_ns() + 300_000;
                    sleep_until_ns(deadline);
                    let woke = true_now_ns();
                    assert!(woke >= deadline, "woke {} ns early", deadline - woke);
                    woke - deadline
                })
                .collect();
            errors.sort_unstable();
            // Loose: the median wake-up must be within 5 ms even on a loaded machine.
            assert!(errors[errors.len() / 2] < 5_000_000, "{errors:?}");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn realtime_priority_is_checked_and_then_granted_or_refused_with_a_reason() {
        std::thread::spawn(|| {
            assert!(run_realtime(0).is_err());
            assert!(run_realtime(100).is_err());
            // Granted with CAP_SYS_NICE, refused without: either way, no panic, and a
            // refusal says why.
            if let Err(reason) = run_realtime(1) {
                assert!(reason.contains("refused") || reason.contains("no SCHED_FIFO"), "{reason}");
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn past_deadline_returns_at_once() {
        let start = true_now_ns();
        sleep_until_ns(0);
        sleep_until_ns_with_spin(start, 15_000);
        assert!(true_now_ns() - start < 1_000_000_000);
    }
}
