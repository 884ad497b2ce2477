//! How a benchmark reports: human lines on stdout, or one JSON object as the last line
//! of stdout with `--json`; progress always on stderr.
//!
//! The JSON object always has `workload`, `seed`, `commands`, `seconds`, `mops` and
//! `latency_ns` (`p50`, `p90`, `p99`, `p999`, `p9999`, `max`, `mean` at the first rate);
//! each workload adds its own fields.

use bourse_sim::workload::generator::Profile;
use bourse_sim::workload::stats::{BookStats, Kind, MixStats};
use serde_json::{json, Map, Value};

use super::measure::Latency;

pub struct Report {
    json: bool,
    object: Map<String, Value>,
}

impl Report {
    pub fn new(json: bool) -> Self {
        Report { json, object: Map::new() }
    }

    /// A line of the human report (nothing in JSON mode).
    pub fn say(&self, line: impl AsRef<str>) {
        if !self.json {
            println!("{}", line.as_ref());
        }
    }

    pub fn set(&mut self, key: &str, value: impl Into<Value>) {
        self.object.insert(key.to_owned(), value.into());
    }

    /// Prints the JSON object in JSON mode.
    pub fn finish(self) {
        if self.json {
            println!("{}", Value::Object(self.object));
        }
    }
}

/// A progress line on stderr.
pub fn progress(line: impl AsRef<str>) {
    eprintln!("{}", line.as_ref());
}

/// Rounds for display in JSON: three decimals are plenty for percentages and rates.
pub fn round3(value: f64) -> f64 {
    (value * 1_000.0).round() / 1_000.0
}

/// True when an open-loop run took clearly longer than its schedule: the engine could
/// not keep up with the rate and the figures measure a growing queue.
pub fn saturated(latency: &Latency) -> bool {
    if latency.rate_per_s == 0 {
        return false;
    }
    let scheduled_s = latency.commands as f64 / latency.rate_per_s as f64;
    latency.elapsed.as_secs_f64() > scheduled_s * 1.05 + 0.001
}

pub fn latency_json(latency: &Latency) -> Value {
    json!({
        "saturated": saturated(latency),
        "rate": latency.rate_per_s,
        "commands": latency.commands,
        "p50": latency.p50_ns,
        "p90": latency.p90_ns,
        "p99": latency.p99_ns,
        "p999": latency.p999_ns,
        "p9999": latency.p9999_ns,
        "max": latency.max_ns,
        "mean": round3(latency.mean_ns),
        "seconds": round3(latency.elapsed.as_secs_f64()),
    })
}

pub fn latency_line(latency: &Latency) -> String {
    format!(
        "  {:>9} cmd/s: p50 {} p90 {} p99 {} p99.9 {} p99.99 {} max {} ns (mean {:.0} ns; {} commands in {:.2} s)",
        latency.rate_per_s,
        latency.p50_ns,
        latency.p90_ns,
        latency.p99_ns,
        latency.p999_ns,
        latency.p9999_ns,
        latency.max_ns,
        latency.mean_ns,
        latency.commands,
        latency.elapsed.as_secs_f64()
    ) + if saturated(latency) { " SATURATED: the engine fell behind this rate" } else { "" }
}

/// The generated mix, with the profile's targets when there is one.
pub fn mix_json(mix: &MixStats, profile: &Profile) -> Value {
    let mut object = Map::new();
    for kind in Kind::ALL {
        object.insert(format!("{}_pct", kind.name()), round3(mix.share_pct(kind)).into());
    }
    object.insert("traded_pct".into(), round3(mix.traded_pct()).into());
    object.insert("rejected_pct".into(), round3(mix.rejected_pct()).into());
    object.insert("rejected".into(), mix.rejected.into());
    object.insert("rejects".into(), json!(mix.rejects));
    object.insert("trades".into(), mix.trades.into());
    let mut target = Map::new();
    for kind in Kind::ALL {
        target.insert(format!("{}_pct", kind.name()), round3(profile.share_pct(kind)).into());
    }
    target.insert("traded_pct".into(), round3(profile.traded_pct()).into());
    object.insert("target".into(), Value::Object(target));
    Value::Object(object)
}

pub fn mix_lines(mix: &MixStats, profile: &Profile) -> Vec<String> {
    let mut kinds = String::new();
    for kind in Kind::ALL {
        kinds += &format!(" {} {:.2}% ({:.2})", kind.name(), mix.share_pct(kind), profile.share_pct(kind));
    }
    let rejects: Vec<String> = mix.rejects.iter().map(|(name, count)| format!("{name} {count}")).collect();
    vec![
        format!("  mix generated (target):{kinds}"),
        format!(
            "  traded {:.2}% of commands ({:.2}), {} fills; rejected {:.3}%{}",
            mix.traded_pct(),
            profile.traded_pct(),
            mix.trades,
            mix.rejected_pct(),
            if rejects.is_empty() { String::new() } else { format!(" ({})", rejects.join(", ")) }
        ),
    ]
}

pub fn book_json(book: &BookStats, sample_every: u64) -> Value {
    json!({
        "books": book.books,
        "orders_avg": round3(book.orders_avg()),
        "levels_avg": round3(book.levels_avg()),
        "orders_total_min": book.orders_min,
        "orders_total_max": book.orders_max,
        "levels_total_min": book.levels_min,
        "levels_total_max": book.levels_max,
        "samples": book.samples,
        "sample_every": sample_every,
    })
}

pub fn book_line(book: &BookStats, sample_every: u64) -> String {
    let per_book = if book.books > 1 { format!(" per book over {} books", book.books) } else { String::new() };
    format!(
        "  book during the run{per_book}: {:.1} orders, {:.1} levels on average \
         (all books: orders {}..{}, levels {}..{}; {} samples, every {} commands)",
        book.orders_avg(),
        book.levels_avg(),
        book.orders_min,
        book.orders_max,
        book.levels_min,
        book.levels_max,
        book.samples,
        sample_every
    )
}
