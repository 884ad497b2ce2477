//! What a load run measured, and the HDR histogram it came from.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LatencyUs {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl LatencyUs {
    pub fn from_histogram(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return LatencyUs::default();
        }
        LatencyUs {
            p50: histogram.value_at_quantile(0.50),
            p99: histogram.value_at_quantile(0.99),
            p999: histogram.value_at_quantile(0.999),
            max: histogram.max(),
        }
    }
}

/// The result of a load run. As JSON (field order kept):
/// `{"acked":N,"seconds":S,"throughput":x,"latency_us":{"p50":..,"p99":..,"p999":..,"max":..},"errors":N,"rejected":N}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoadReport {
    /// Commands answered with an engine outcome (accepted or rejected).
    pub acked: u64,
    /// From the first send to the last answer (or the end of the drain).
    pub seconds: f64,
    /// `acked / seconds`.
    pub throughput: f64,
    /// From each command's intended send time (open loop) or its send (flat out) to its
    /// answer.
    pub latency_us: LatencyUs,
    /// Commands that got no outcome (refused before the log, session lost, unanswered at
    /// the end of the drain).
    pub errors: u64,
    /// Acked commands the engine rejected (part of `acked`): cancels and moves of orders
    /// that traded meanwhile, mostly.
    pub rejected: u64,
}

impl LoadReport {
    pub fn new(acked: u64, seconds: f64, histogram: &Histogram<u64>, errors: u64, rejected: u64) -> Self {
        let throughput = if seconds > 0.0 { acked as f64 / seconds } else { 0.0 };
        LoadReport { acked, seconds, throughput, latency_us: LatencyUs::from_histogram(histogram), errors, rejected }
    }

    /// The report as one JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report always serialises")
    }
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let latency = &self.latency_us;
        write!(
            f,
            "acked {} in {:.2} s: {:.0} commands/s; latency us p50 {} p99 {} p99.9 {} max {}; errors {}; rejected {}",
            self.acked,
            self.seconds,
            self.throughput,
            latency.p50,
            latency.p99,
            latency.p999,
            latency.max,
            self.errors,
            self.rejected
        )
    }
}

/// A histogram of microseconds from 1 µs to 100 s with 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid histogram bounds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_serialises_to_the_agreed_json_object() {
        let mut histogram = latency_histogram();
        for value in 1..=1_000 {
            histogram.record(value).expect("in range");
        }
        let report = LoadReport::new(2_000, 2.0, &histogram, 3, 7);
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).expect("json");
        assert_eq!(json["acked"], 2_000);
        assert_eq!(json["seconds"], 2.0);
        assert_eq!(json["throughput"], 1_000.0);
        assert_eq!(json["errors"], 3);
        assert_eq!(json["rejected"], 7);
        let latency = &json["latency_us"];
        assert_eq!((latency["p50"].as_u64(), latency["max"].as_u64()), (Some(500), Some(1_000)));
        assert_eq!((latency["p99"].as_u64(), latency["p999"].as_u64()), (Some(990), Some(999)));
        assert!(report.to_json().starts_with(r#"{"acked":2000,"seconds":2.0,"throughput":1000.0,"latency_us":{"#));
    }

    #[test]
    fn an_empty_run_reports_zeros() {
        let report = LoadReport::new(0, 0.0, &latency_histogram(), 0, 0);
        assert_eq!((report.throughput, report.latency_us), (0.0, LatencyUs::default()));
    }
}
