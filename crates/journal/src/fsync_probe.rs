//! What one durable write costs on the disk under a directory.
//!
//! [`measure_fdatasync_latency`] appends 4 KiB to a probe file and fdatasyncs it,
//! `samples` times, and reports exact percentiles of the fdatasync calls alone. The node
//! prints it at start, so that a commit latency can be read against what the disk
//! allows. The probe file is deleted afterwards, also on error.
//!
//! Complexity: `samples` writes and fdatasyncs; memory is one `u64` per sample.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::config::config_check_range;
use crate::error::{Error, Result};

/// Bytes written before each fdatasync: one page, a small group commit.
pub const FSYNC_PROBE_WRITE_BYTES: usize = 4096;
/// Largest `samples` accepted.
pub const FSYNC_PROBE_SAMPLES_MAX: usize = 100_000;

/// Latency of `write 4 KiB + fdatasync`, fdatasync timed alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsyncLatency {
    /// Measurements taken.
    pub samples: usize,
    /// Bytes written before each fdatasync.
    pub write_bytes: usize,
    /// Fastest.
    pub latency_ns_min: u64,
    /// Median.
    pub latency_ns_p50: u64,
    /// 99th percentile.
    pub latency_ns_p99: u64,
    /// Slowest.
    pub latency_ns_max: u64,
}

/// Deletes the probe file however the measurement ends.
struct ProbeFile {
    path: PathBuf,
}

impl Drop for ProbeFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Measures fdatasync latency on the disk holding `dir`; see the module header.
pub fn measure_fdatasync_latency(dir: &Path, samples: usize) -> Result<FsyncLatency> {
    config_check_range("samples", samples as u64, 1, FSYNC_PROBE_SAMPLES_MAX as u64)?;
    let probe = ProbeFile { path: dir.join(format!(".fsync-probe-{}.tmp", std::process::id())) };
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&probe.path)
        .map_err(|source| Error::io("create", &probe.path, source))?;
    let mut latencies_ns = Vec::with_capacity(samples);
    for _ in 0..samples {
        latencies_ns.push(measure_fdatasync_latency_once(&mut file, &probe.path)?);
    }
    latencies_ns.sort_unstable();
    let rank = |percent: usize| latencies_ns[(samples * percent).div_ceil(100).max(1) - 1];
    Ok(FsyncLatency {
        samples,
        write_bytes: FSYNC_PROBE_WRITE_BYTES,
        latency_ns_min: latencies_ns[0],
        latency_ns_p50: rank(50),
        latency_ns_p99: rank(99),
        latency_ns_max: latencies_ns[samples - 1],
    })
}

/// One append and one timed fdatasync.
fn measure_fdatasync_latency_once(file: &mut File, path: &Path) -> Result<u64> {
    let page = [0x5a_u8; FSYNC_PROBE_WRITE_BYTES];
    file.write_all(&page).map_err(|source| Error::io("write", path, source))?;
    let started = Instant::now();
    file.sync_data().map_err(|source| Error::io("fdatasync", path, source))?;
    Ok(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let latency = measure_fdatasync_latency(dir.path(), 3).unwrap();
        assert_eq!(latency.samples, 3);
        assert!(latency.latency_ns_min <= latency.latency_ns_p50);
        assert!(latency.latency_ns_p50 <= latency.latency_ns_p99);
        assert!(latency.latency_ns_p99 <= latency.latency_ns_max);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(matches!(measure_fdatasync_latency(dir.path(), 0), Err(Error::ConfigInvalid { .. })));
    }
}
