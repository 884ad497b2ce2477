//! What a gateway records of its market data releases, for metrics and for
//! `bourse bench fairness`, which measures outbound fairness from these records.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One released log entry.
#[derive(Clone, Copy, Debug)]
pub struct Release {
    pub log_index: u64,
    /// t_m: the leader's timestamp of the entry.
    pub ts: u64,
    /// t_R = t_m + d_h, on the gateway clock.
    pub release_ts: u64,
    /// The entry reached the gateway at or after its release time, so it went out late.
    pub arrived_late: bool,
    /// When it went out, on the gateway clock and on the machine's true clock.
    pub released_local: u64,
    pub released_true: u64,
}

/// Release counters, and every release when recording is on.
#[derive(Debug, Default)]
pub struct Probe {
    recording: bool,
    released: AtomicU64,
    late: AtomicU64,
    records: Mutex<Vec<Release>>,
}

impl Probe {
    pub fn new(recording: bool) -> Self {
        Probe { recording, ..Probe::default() }
    }

    pub(crate) fn record(&self, release: Release) {
        self.released.fetch_add(1, Ordering::Relaxed);
        if release.arrived_late {
            self.late.fetch_add(1, Ordering::Relaxed);
        }
        if self.recording {
            self.records.lock().expect("probe lock").push(release);
        }
    }

    /// Entries released, and how many of them went out late.
    pub fn counts(&self) -> (u64, u64) {
        (self.released.load(Ordering::Relaxed), self.late.load(Ordering::Relaxed))
    }

    /// Takes the records so far.
    pub fn take(&self) -> Vec<Release> {
        std::mem::take(&mut *self.records.lock().expect("probe lock"))
    }
}
