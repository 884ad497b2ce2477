//! A gateway's counters and their Prometheus text form at `/metrics`.

use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use crate::probe::Probe;

/// Counters bumped by the gateway's tasks (relaxed atomics).
#[derive(Debug, Default)]
pub struct Metrics {
    pub sessions_open: AtomicI64,
    pub sessions_dropped_slow: AtomicU64,
    /// Sessions ended because the node refused their claim (a key the nodes do not know).
    pub sessions_refused_by_node: AtomicU64,
    /// Commands stamped and sent up.
    pub commands_forwarded: AtomicU64,
    pub refused_not_authorized: AtomicU64,
    pub refused_rate_limited: AtomicU64,
    pub refused_in_flight: AtomicU64,
    pub refused_shape: AtomicU64,
    /// 1 while the link to the leader is up.
    pub link_up: AtomicI64,
    pub link_connects: AtomicU64,
    /// Unanswered commands resent on reconnecting.
    pub link_resent: AtomicU64,
    pub subscribers_open: AtomicI64,
    pub subscribers_dropped_slow: AtomicU64,
    /// Subscriptions ended because a key reload dropped their key.
    pub subscribers_revoked: AtomicU64,
    /// Sessions refused because their key held its most.
    pub sessions_refused_per_key: AtomicU64,
    /// Subscriptions refused because their key, or the gateway, held its most.
    pub subscriptions_refused: AtomicU64,
    /// Sessions ended for sending fillers past their key's rate.
    pub filler_floods: AtomicU64,
    /// Times the feed (re)started from an image.
    pub feed_starts: AtomicU64,
    /// 1 when the release thread runs under `SCHED_FIFO`.
    pub release_realtime: AtomicI64,
    /// What the client port's accept loop refused (failed or late TLS handshakes).
    pub accept: std::sync::Arc<bourse_pki::grpc::AcceptStats>,
    /// More text for `/metrics`, rendered at each scrape: the front ends' listeners in
    /// this process (`bourse_port::render_metrics`).
    pub extra: std::sync::OnceLock<fn() -> String>,
}

fn line(out: &mut String, name: &str, help: &str, kind: &str, value: impl std::fmt::Display) {
    let _ = writeln!(
        out,
        "# HELP bourse_gateway_{name} {help}\n# TYPE bourse_gateway_{name} {kind}\nbourse_gateway_{name} {value}"
    );
}

impl Metrics {
    pub fn render(&self, probe: &Probe) -> String {
        let mut out = String::new();
        let u = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let i = |a: &AtomicI64| a.load(Ordering::Relaxed);
        line(&mut out, "sessions_open", "Client sessions connected.", "gauge", i(&self.sessions_open));
        line(
            &mut out,
            "sessions_dropped_slow_total",
            "Sessions dropped for not reading their acks.",
            "counter",
            u(&self.sessions_dropped_slow),
        );
        line(
            &mut out,
            "sessions_refused_by_node_total",
            "Sessions ended because the node refused their claim (a key the nodes' key file lacks).",
            "counter",
            u(&self.sessions_refused_by_node),
        );
        line(
            &mut out,
            "commands_forwarded_total",
            "Commands stamped and sent to the leader.",
            "counter",
            u(&self.commands_forwarded),
        );
        let _ = writeln!(
            out,
            "# HELP bourse_gateway_commands_refused_total Commands refused at the gateway, by reason.\n# TYPE bourse_gateway_commands_refused_total counter"
        );
        for (reason, value) in [
            ("not_authorized", &self.refused_not_authorized),
            ("rate_limited", &self.refused_rate_limited),
            ("in_flight_limit", &self.refused_in_flight),
            ("shape", &self.refused_shape),
        ] {
            let _ = writeln!(out, "bourse_gateway_commands_refused_total{{reason=\"{reason}\"}} {}", u(value));
        }
        line(&mut out, "link_up", "1 while the link to the leader is up.", "gauge", i(&self.link_up));
        line(&mut out, "link_connects_total", "Links opened to a leader.", "counter", u(&self.link_connects));
        line(
            &mut out,
            "link_resent_total",
            "Unanswered commands resent after a reconnect.",
            "counter",
            u(&self.link_resent),
        );
        line(&mut out, "subscribers_open", "Market data subscribers connected.", "gauge", i(&self.subscribers_open));
        line(
            &mut out,
            "subscribers_dropped_slow_total",
            "Subscribers dropped for falling behind.",
            "counter",
            u(&self.subscribers_dropped_slow),
        );
        line(
            &mut out,
            "subscribers_revoked_total",
            "Subscriptions ended because a key reload dropped their key.",
            "counter",
            u(&self.subscribers_revoked),
        );
        line(
            &mut out,
            "sessions_refused_per_key_total",
            "Order-entry sessions refused because their key held its most (sessions_per_key_max).",
            "counter",
            u(&self.sessions_refused_per_key),
        );
        line(
            &mut out,
            "subscriptions_refused_total",
            "Subscriptions refused because their key or the gateway held its most.",
            "counter",
            u(&self.subscriptions_refused),
        );
        line(
            &mut out,
            "filler_floods_total",
            "Sessions ended for sending fillers (cancels of order 0) past their key's command rate.",
            "counter",
            u(&self.filler_floods),
        );
        line(
            &mut out,
            "release_realtime",
            "1 when the market data release thread runs at real-time priority.",
            "gauge",
            i(&self.release_realtime),
        );
        line(
            &mut out,
            "tls_handshakes_failed_total",
            "Client connections dropped because their TLS handshake failed or took over 5 s.",
            "counter",
            u(&self.accept.handshakes_failed),
        );
        line(&mut out, "feed_starts_total", "Times the feed started from an image.", "counter", u(&self.feed_starts));
        let (released, late) = probe.counts();
        line(&mut out, "market_released_total", "Log entries with market data released.", "counter", released);
        line(
            &mut out,
            "market_late_total",
            "Of those, entries that arrived at or after their release time (outbound unfairness).",
            "counter",
            late,
        );
        if let Some(render) = self.extra.get() {
            out.push_str(&render());
        }
        out
    }
}

/// Serves `/metrics` on `addr` until the process ends.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>, probe: Arc<Probe>) -> std::io::Result<SocketAddr> {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let (metrics, probe) = (Arc::clone(&metrics), Arc::clone(&probe));
            async move { metrics.render(&probe) }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "gateway metrics server stopped");
        }
    });
    Ok(local)
}
