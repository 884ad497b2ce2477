//! Prints the fdatasync latency of the disk under a directory (4 KiB append, then a timed
//! fdatasync, N times): what one durable group commit costs at least.
//!
//! `cargo run --release -p bourse-journal --example fsync_latency -- [DIR] [SAMPLES]`
//! (defaults: the system temporary directory, 200 samples).

use std::path::PathBuf;
use std::process::ExitCode;

use bourse_journal::measure_fdatasync_latency;

/// Samples taken when none are given.
const SAMPLES_DEFAULT: usize = 200;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let dir = args.next().map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let samples = match args.next().map(|text| text.parse::<usize>()) {
        None => SAMPLES_DEFAULT,
        Some(Ok(samples)) => samples,
        Some(Err(error)) => {
            eprintln!("SAMPLES must be a count: {error}");
            return ExitCode::FAILURE;
        }
    };
    match measure_fdatasync_latency(&dir, samples) {
        Ok(latency) => {
            let micros = |ns: u64| ns as f64 / 1_000.0;
            println!(
                "fdatasync after a {} B append on {}: {} samples, min {:.0} us, p50 {:.0} us, p99 {:.0} us, max {:.0} us",
                latency.write_bytes,
                dir.display(),
                latency.samples,
                micros(latency.latency_ns_min),
                micros(latency.latency_ns_p50),
                micros(latency.latency_ns_p99),
                micros(latency.latency_ns_max),
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("fdatasync probe on {} failed: {error}", dir.display());
            ExitCode::FAILURE
        }
    }
}
