//! The demo's figures, one point a second, with the measures `bourse bench fairness`
//! uses (`bourse_fairness::Unfairness` and `Spread`):
//!
//! - inbound unfairness: the orders the traders had accepted in the interval, in the
//!   order the engine processed them (order ids grow in log order), each with the stamp
//!   its gateway gave it; CloudEx's ratio counts those stamped earlier than the one
//!   before, the strict one those below the highest stamp before. Orders are ordered
//!   within an interval only (an order answered after the interval closed counts in the
//!   next);
//! - outbound unfairness and delivery spread: every gateway records each market data
//!   release (its probe); an item released by every gateway counts as late if it reached
//!   any of them after its release time, and its spread is the latest minus the earliest
//!   release on the machine's true clock. Items some gateway never released (its feed
//!   restarted) are dropped after five seconds;
//! - the sequencer: the leader's `bourse_sequencer_held` gauge when sampled, and its
//!   time-average over the interval from `bourse_sequencer_hold_seconds_sum` (Little's
//!   law: total hold time divided by the interval);
//! - ack latency percentiles of the traders' commands; trades counted on gateway 1's
//!   feed; each trader's portfolio value at the last trade prices.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bourse_fairness::{Delivery, Spread, Unfairness};
use bourse_gateway::probe::{Probe, Release};
use bourse_http::control::{DemoStats, GatewayView, StatsPoint, StatsTotals, TraderView};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::nodes::Nodes;
use super::traders::{latency_histogram, MarketView, Shared};

/// Points kept (an hour at one a second).
const POINTS_KEPT: usize = 3_600;

/// The figures the HTTP server hands out.
pub struct Stats {
    pub scenario: String,
    pub started_ms: u64,
    pub traders: Vec<TraderView>,
    pub gateways: Vec<GatewayView>,
    points: Mutex<VecDeque<StatsPoint>>,
    totals: Mutex<StatsTotals>,
}

impl Stats {
    pub fn new(scenario: String, traders: Vec<TraderView>, gateways: Vec<GatewayView>) -> Self {
        let started_ms = (bourse_fairness::true_now_ns() / 1_000_000) as u64;
        Stats { scenario, started_ms, traders, gateways, points: Mutex::new(VecDeque::new()), totals: Mutex::default() }
    }

    /// Everything, with the points after `since`.
    pub fn snapshot(&self, since: u64) -> DemoStats {
        let points = self.points.lock().expect("points lock").iter().filter(|p| p.seq > since).cloned().collect();
        DemoStats {
            scenario: self.scenario.clone(),
            started_ms: self.started_ms,
            traders: self.traders.clone(),
            gateways: self.gateways.clone(),
            points,
            totals: self.totals.lock().expect("totals lock").clone(),
        }
    }

    pub fn totals(&self) -> StatsTotals {
        self.totals.lock().expect("totals lock").clone()
    }

    /// The latest point, if any.
    pub fn last(&self) -> Option<StatsPoint> {
        self.points.lock().expect("points lock").back().cloned()
    }
}

/// Turns what the traders, gateways and nodes report into a point every second.
pub struct Collector {
    pub stats: Arc<Stats>,
    pub shared: Arc<Shared>,
    pub probes: Vec<Arc<Probe>>,
    pub view: Arc<MarketView>,
    pub nodes: Arc<Nodes>,
    /// The mark of each symbol before its first trade.
    pub px_open: Vec<i64>,
    /// Every trader's starting holdings.
    pub start: bourse_sim::agents::Portfolio,
}

/// Releases waiting for the other gateways, by log index.
struct Outbound {
    pending: HashMap<u64, (Instant, Vec<Release>)>,
    gateways: usize,
}

/// The leader's sequencer figures at one instant.
struct SequencerSample {
    leader: u64,
    at: Instant,
    hold_seconds_sum: f64,
}

impl Collector {
    /// Adds a point every second until `stop`.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut outbound = Outbound { pending: HashMap::new(), gateways: self.probes.len() };
        let mut sequencer: Option<SequencerSample> = None;
        let mut trades_seen = self.view.trades();
        let mut seq = 0;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|stopping| *stopping) => return,
            }
            seq += 1;
            let mut point =
                StatsPoint { seq, ts_ms: (bourse_fairness::true_now_ns() / 1_000_000) as u64, ..StatsPoint::default() };
            self.traders_part(&mut point);
            self.outbound_part(&mut outbound, &mut point);
            let (held, sample) = self.sequencer_part().await;
            point.sequencer_held = held;
            if let (Some(before), Some(now)) = (&sequencer, &sample) {
                let seconds = now.at.duration_since(before.at).as_secs_f64();
                if before.leader == now.leader && seconds > 0.0 {
                    point.sequencer_held_mean = ((now.hold_seconds_sum - before.hold_seconds_sum) / seconds).max(0.0);
                }
            }
            sequencer = sample;
            let trades = self.view.trades();
            point.trades = trades - trades_seen;
            trades_seen = trades;
            {
                let mut totals = self.stats.totals.lock().expect("totals lock");
                totals.trades += point.trades;
            }
            let mut points = self.stats.points.lock().expect("points lock");
            if points.len() == POINTS_KEPT {
                points.pop_front();
            }
            points.push_back(point);
        }
    }

    /// Orders, inbound unfairness, latency and portfolio values.
    fn traders_part(&self, point: &mut StatsPoint) {
        let (mut accepted, latency, rejected, failed, portfolios) = {
            let mut recorder = self.shared.recorder.lock().expect("recorder lock");
            let latency = std::mem::replace(&mut recorder.latency, latency_histogram());
            let counts = (std::mem::take(&mut recorder.rejected), std::mem::take(&mut recorder.failed));
            (std::mem::take(&mut recorder.accepted), latency, counts.0, counts.1, recorder.portfolios.clone())
        };
        accepted.sort_by_key(|a| a.order);
        let mut unfairness = Unfairness::new();
        for order in &accepted {
            unfairness.observe(order.gateway_ts);
        }
        point.orders = accepted.len() as u64;
        point.inbound_unfairness_pct = unfairness.iur_prev().percent();
        point.inbound_unfairness_strict_pct = unfairness.iur_hwm().percent();
        if !latency.is_empty() {
            let us = |ns: u64| ns as f64 / 1_000.0;
            point.latency_us_p50 = us(latency.value_at_quantile(0.5));
            point.latency_us_p90 = us(latency.value_at_quantile(0.9));
            point.latency_us_p99 = us(latency.value_at_quantile(0.99));
            point.latency_us_max = us(latency.max());
        }
        let quotes = self.view.quotes();
        let marks: Vec<Option<i64>> = quotes
            .iter()
            .zip(&self.px_open)
            .map(|(quote, &open)| Some(quote.last.or(quote.mid().map(|m| m as i64)).unwrap_or(open)))
            .collect();
        point.value_hold = self.start.value(&marks);
        point.values = portfolios
            .iter()
            .zip(&self.stats.traders)
            .map(|(portfolio, trader)| portfolio.as_ref().map_or(trader.value_start, |p| p.value(&marks)))
            .collect();
        let mut totals = self.stats.totals.lock().expect("totals lock");
        totals.orders += point.orders;
        totals.rejected += rejected;
        totals.failed += failed;
    }

    /// Outbound unfairness, delivery spread and market data delay.
    fn outbound_part(&self, outbound: &mut Outbound, point: &mut StatsPoint) {
        let now = Instant::now();
        for probe in &self.probes {
            for release in probe.take() {
                outbound.pending.entry(release.log_index).or_insert_with(|| (now, Vec::new())).1.push(release);
            }
        }
        let mut spread = Spread::new(outbound.gateways as u32);
        let mut delays = Vec::new();
        let mut holds = (0u128, 0u64);
        let complete: Vec<u64> =
            outbound.pending.iter().filter(|(_, (_, r))| r.len() >= outbound.gateways).map(|(&i, _)| i).collect();
        for index in complete {
            let (_, releases) = outbound.pending.remove(&index).expect("a pending item");
            for release in releases {
                delays.push(release.released_true.saturating_sub(release.ts));
                holds = (holds.0 + u128::from(release.release_ts.saturating_sub(release.ts)), holds.1 + 1);
                let delivery = Delivery {
                    release_ts: release.release_ts,
                    late: release.arrived_late,
                    delivered_true_ns: release.released_true,
                };
                spread.observe(index, delivery);
            }
        }
        outbound.pending.retain(|_, (first, _)| now.duration_since(*first) < Duration::from_secs(5));
        let summary = spread.summary();
        point.outbound_unfairness_pct = summary.late.percent();
        point.market_data_items = summary.late.total;
        point.delivery_spread_us_p50 = summary.p50_ns as f64 / 1_000.0;
        point.delivery_spread_us_p99 = summary.p99_ns as f64 / 1_000.0;
        if holds.1 > 0 {
            point.market_data_hold_us_mean = holds.0 as f64 / holds.1 as f64 / 1_000.0;
        }
        if !delays.is_empty() {
            delays.sort_unstable();
            point.market_data_delay_us_p50 = delays[delays.len() / 2] as f64 / 1_000.0;
        }
    }

    /// The leader's sequencer gauge and hold-time sum, read from its `/metrics`.
    async fn sequencer_part(&self) -> (f64, Option<SequencerSample>) {
        let view = self.nodes.status().await;
        let Some(leader) = view.nodes.iter().find(|n| n.up && n.role == "leader").map(|n| n.id) else {
            return (0.0, None);
        };
        let Some(address) = self.nodes.metrics_of(leader) else { return (0.0, None) };
        let Some(text) = scrape(&address).await else { return (0.0, None) };
        let held = metric(&text, "bourse_sequencer_held").unwrap_or(0.0);
        let sum = metric(&text, "bourse_sequencer_hold_seconds_sum");
        (held, sum.map(|hold_seconds_sum| SequencerSample { leader, at: Instant::now(), hold_seconds_sum }))
    }
}

/// `GET /metrics` over plain HTTP/1.0, within a second.
async fn scrape(address: &str) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(1), async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: demo\r\n\r\n").await.ok()?;
        let mut body = Vec::new();
        stream.read_to_end(&mut body).await.ok()?;
        String::from_utf8(body).ok()
    })
    .await
    .ok()
    .flatten()
}

/// The value of the unlabelled sample `name` in a Prometheus text exposition.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_unlabelled_samples_only() {
        let text = "# HELP bourse_sequencer_held x\nbourse_sequencer_held 3\nbourse_sequencer_held_x 9\n\
                    bourse_sequencer_hold_seconds{quantile=\"0.5\"} 0.001\nbourse_sequencer_hold_seconds_sum 0.25\n";
        assert_eq!(metric(text, "bourse_sequencer_held"), Some(3.0));
        assert_eq!(metric(text, "bourse_sequencer_hold_seconds_sum"), Some(0.25));
        assert_eq!(metric(text, "bourse_sequencer_hold_seconds"), None);
    }
}
