//! Counters of a running node and their Prometheus text form at `/metrics`.
//!
//! The core thread and the gRPC tasks bump relaxed atomics; the journal's own counters
//! (fdatasync latency, group sizes) are read from the group commit when scraped.

use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use bourse_journal::{GroupCommitHandle, Log2Histogram};

/// A value on cache lines of its own, so threads updating it do not slow down
/// threads updating its neighbours.
#[derive(Default, Debug)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

/// Counters shared by the node's threads. The core thread adds its counts once per
/// batch; the counter every gRPC task touches (`queue_depth`) sits on its own lines.
#[derive(Default, Debug)]
pub struct Metrics {
    pub commands_applied: AtomicU64,
    pub commands_rejected: AtomicU64,
    pub commands_duplicate: AtomicU64,
    pub commands_refused_shape: AtomicU64,
    pub batches: AtomicU64,
    pub queries: AtomicU64,
    /// Requests waiting in the core's queue.
    pub queue_depth: Padded<AtomicI64>,
    pub sessions_open: AtomicI64,
    pub sessions_dropped_slow: AtomicU64,
    pub subscribers_open: AtomicI64,
    pub subscribers_dropped_slow: AtomicU64,
    /// The engine's client records now, those forgotten for being idle and the new
    /// clients' commands refused at `clients.max`, since the engine was loaded.
    pub clients: AtomicU64,
    pub clients_expired: AtomicU64,
    pub clients_refused: AtomicU64,
    pub applied_index: AtomicU64,
    /// The log time of the last command applied (stored with `applied_index`).
    pub applied_ts: AtomicU64,
    pub snapshots: AtomicU64,
    /// Commands per core batch, as a log2 histogram.
    pub batch_commands: std::sync::Mutex<Log2Histogram>,
    pub links_open: AtomicI64,
    /// Gateway links ended for sending nothing for `link::LINK_SILENT_MAX`.
    pub links_silent: AtomicU64,
    /// Gateway batches whose stamp was older than the bound (`link_stamp_bound_ms`) and
    /// was moved up to it, and links ended for a stamp ahead of the node's clock by more.
    pub stamps_clamped: AtomicU64,
    pub stamps_ahead: AtomicU64,
    /// Client claims on gateway links refused (`auth::ClientKeys::check`), and batches
    /// of clients not claimed on their link.
    pub claims_refused: AtomicU64,
    /// Calls refused by the role check (`auth.rs`), and TLS handshakes that failed.
    pub calls_refused: std::sync::Arc<AtomicU64>,
    pub handshakes_failed: std::sync::Arc<bourse_pki::grpc::AcceptStats>,
    pub feeds_open: AtomicI64,
    /// Open `Log.Follow` streams (history sinks).
    pub logs_open: AtomicI64,
    /// Gateway batches the fair sequencer released, and how many of them came out
    /// behind a later stamp: the one released just before (CloudEx's ratio) or the
    /// highest released so far (the stricter one).
    pub fair_released: AtomicU64,
    pub fair_out_of_order_prev: AtomicU64,
    pub fair_out_of_order_hwm: AtomicU64,
    /// Gateway batches held by the sequencer now.
    pub fair_held: AtomicI64,
    /// How long each batch was held, in nanoseconds.
    pub fair_held_ns: std::sync::Mutex<Log2Histogram>,
    /// The fairness delays the log set, as this node applied them.
    pub fairness: crate::fair::InForce,
    /// Leader: from proposing a batch to applying it, in nanoseconds (Raft's append,
    /// replication, both fdatasyncs and the commit; not the client's hops).
    pub commit_ns: std::sync::Mutex<Log2Histogram>,
    /// Replicated: the Raft log, whose fdatasync latency is rendered with the rest.
    pub raft_log: std::sync::OnceLock<bourse_cluster::log_store::LogReader>,
    /// Replicated: the Raft transport's replication timings.
    pub raft_transport: std::sync::OnceLock<std::sync::Arc<bourse_cluster::transport::TransportStats>>,
    /// Text other parts of the process append at each scrape (an in-process history sink).
    pub extra: Extra,
}

/// Renderers of extra metrics text, called at each scrape.
#[derive(Default)]
pub struct Extra(std::sync::Mutex<Vec<Box<dyn Fn() -> String + Send + Sync>>>);

impl std::fmt::Debug for Extra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Extra")
    }
}

impl Extra {
    /// Adds a renderer whose text is appended to `/metrics`.
    pub fn add(&self, render: impl Fn() -> String + Send + Sync + 'static) {
        self.0.lock().expect("metrics lock").push(Box::new(render));
    }
}

fn counter(out: &mut String, name: &str, help: &str, kind: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP bourse_{name} {help}\n# TYPE bourse_{name} {kind}\nbourse_{name} {value}");
}

fn histogram(out: &mut String, name: &str, help: &str, histogram: &Log2Histogram, scale: f64) {
    let _ = writeln!(out, "# HELP bourse_{name} {help}\n# TYPE bourse_{name} summary");
    for (quantile, per_mille) in [("0.5", 500), ("0.99", 990), ("0.999", 999)] {
        let value = histogram.quantile_upper_bound(per_mille) as f64 * scale;
        let _ = writeln!(out, "bourse_{name}{{quantile=\"{quantile}\"}} {value}");
    }
    let _ = writeln!(out, "bourse_{name}_sum {}", histogram.sum as f64 * scale);
    let _ = writeln!(out, "bourse_{name}_count {}", histogram.count);
}

impl Metrics {
    /// The Prometheus text exposition of every counter.
    pub fn render(&self, journal: Option<&GroupCommitHandle>) -> String {
        let mut out = String::new();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let load_i = |a: &AtomicI64| a.load(Ordering::Relaxed);
        counter(
            &mut out,
            "commands_applied_total",
            "Commands applied by the engine.",
            "counter",
            load(&self.commands_applied),
        );
        counter(
            &mut out,
            "commands_rejected_total",
            "Applied commands the engine rejected.",
            "counter",
            load(&self.commands_rejected),
        );
        counter(
            &mut out,
            "commands_duplicate_total",
            "Resent commands answered from the exactly-once record.",
            "counter",
            load(&self.commands_duplicate),
        );
        counter(
            &mut out,
            "commands_refused_shape_total",
            "Commands refused before the log for a malformed shape.",
            "counter",
            load(&self.commands_refused_shape),
        );
        counter(&mut out, "batches_total", "Core batches.", "counter", load(&self.batches));
        counter(&mut out, "queries_total", "Queries answered.", "counter", load(&self.queries));
        counter(&mut out, "queue_depth", "Requests waiting for the core.", "gauge", load_i(&self.queue_depth.0));
        counter(&mut out, "sessions_open", "Order-entry sessions connected.", "gauge", load_i(&self.sessions_open));
        counter(
            &mut out,
            "sessions_dropped_slow_total",
            "Sessions dropped for not reading their acks.",
            "counter",
            load(&self.sessions_dropped_slow),
        );
        counter(
            &mut out,
            "subscribers_open",
            "Market data subscribers connected.",
            "gauge",
            load_i(&self.subscribers_open),
        );
        counter(
            &mut out,
            "subscribers_dropped_slow_total",
            "Subscribers dropped for falling behind.",
            "counter",
            load(&self.subscribers_dropped_slow),
        );
        counter(
            &mut out,
            "clients",
            "Client records the engine keeps (clients.max at most).",
            "gauge",
            load(&self.clients),
        );
        counter(
            &mut out,
            "clients_expired_total",
            "Client records forgotten after clients.expiry_secs idle (since the engine was loaded).",
            "counter",
            load(&self.clients_expired),
        );
        counter(
            &mut out,
            "clients_refused_total",
            "Commands of new clients refused at clients.max (since the engine was loaded).",
            "counter",
            load(&self.clients_refused),
        );
        counter(&mut out, "applied_index", "Highest log index applied.", "gauge", load(&self.applied_index));
        counter(&mut out, "snapshots_total", "Snapshots taken.", "counter", load(&self.snapshots));
        counter(&mut out, "links_open", "Gateway links connected.", "gauge", load_i(&self.links_open));
        let silent = load(&self.links_silent);
        counter(&mut out, "links_silent_total", "Gateway links ended for sending nothing.", "counter", silent);
        let clamped = load(&self.stamps_clamped);
        counter(
            &mut out,
            "link_stamps_clamped_total",
            "Gateway stamps older than the bound, moved up to it.",
            "counter",
            clamped,
        );
        let ahead = load(&self.stamps_ahead);
        counter(
            &mut out,
            "link_stamps_ahead_total",
            "Gateway links ended for a stamp ahead of the bound.",
            "counter",
            ahead,
        );
        let claims = load(&self.claims_refused);
        counter(
            &mut out,
            "link_claims_refused_total",
            "Gateway link sessions refused: a client claimed without its key, or outside the gateway's namespace.",
            "counter",
            claims,
        );
        let refused = load(&self.calls_refused);
        counter(
            &mut out,
            "calls_refused_total",
            "gRPC calls refused: the caller's role may not make them.",
            "counter",
            refused,
        );
        let failed = load(&self.handshakes_failed.handshakes_failed);
        counter(
            &mut out,
            "tls_handshakes_failed_total",
            "gRPC connections refused at the TLS handshake.",
            "counter",
            failed,
        );
        counter(&mut out, "feeds_open", "Order-level feeds served.", "gauge", load_i(&self.feeds_open));
        counter(
            &mut out,
            "log_followers",
            "Log.Follow streams served (history sinks).",
            "gauge",
            load_i(&self.logs_open),
        );
        counter(
            &mut out,
            "sequencer_released_total",
            "Gateway batches released by the fair sequencer.",
            "counter",
            load(&self.fair_released),
        );
        counter(
            &mut out,
            "sequencer_out_of_order_prev_total",
            "Released batches stamped earlier than the batch released just before them.",
            "counter",
            load(&self.fair_out_of_order_prev),
        );
        counter(
            &mut out,
            "sequencer_out_of_order_hwm_total",
            "Released batches stamped earlier than the latest stamp released before them.",
            "counter",
            load(&self.fair_out_of_order_hwm),
        );
        counter(&mut out, "sequencer_held", "Gateway batches held now.", "gauge", load_i(&self.fair_held));
        let held = self.fair_held_ns.lock().expect("metrics lock").clone();
        histogram(&mut out, "sequencer_hold_seconds", "Time a gateway batch waited.", &held, 1e-9);
        if let Some(setting) = self.fairness.get() {
            counter(
                &mut out,
                "fairness_hold_seconds",
                "d_h set through the log: gateways release market data this long after its stamp.",
                "gauge",
                setting.hold_ns as f64 * 1e-9,
            );
            counter(
                &mut out,
                "fairness_window_seconds",
                "d_s set through the log: the leader's sequencer window.",
                "gauge",
                setting.window_ns as f64 * 1e-9,
            );
        }
        counter(
            &mut out,
            "fairness_settings_total",
            "SetFairness commands this node applied (the adaptive hold's changes).",
            "counter",
            self.fairness.changes(),
        );
        let batch = self.batch_commands.lock().expect("metrics lock").clone();
        histogram(&mut out, "batch_commands", "Commands per core batch.", &batch, 1.0);
        let commit = self.commit_ns.lock().expect("metrics lock").clone();
        histogram(
            &mut out,
            "commit_seconds",
            "Leader: from proposing a batch to applying it (append, replication, fdatasyncs, commit).",
            &commit,
            1e-9,
        );
        if let Some(log) = self.raft_log.get() {
            let stats = log.stats();
            counter(&mut out, "fsyncs_total", "fdatasync calls on the Raft log.", "counter", stats.journal.syncs);
            histogram(&mut out, "fsync_seconds", "Raft log fdatasync latency.", &stats.journal.sync_latency_ns, 1e-9);
        }
        if let Some(transport) = self.raft_transport.get() {
            let lock = |h: &std::sync::Mutex<Log2Histogram>| h.lock().expect("metrics lock").clone();
            histogram(
                &mut out,
                "raft_append_served_seconds",
                "Follower: from reading an AppendEntries request to writing its reply.",
                &lock(&transport.append_served_ns),
                1e-9,
            );
            histogram(
                &mut out,
                "raft_append_round_trip_seconds",
                "Leader: from writing an AppendEntries request to reading its reply.",
                &lock(&transport.append_round_trip_ns),
                1e-9,
            );
        }
        if let Some(journal) = journal {
            let stats = journal.stats();
            counter(&mut out, "durable_index", "Highest log index made durable.", "gauge", stats.durable_index);
            counter(&mut out, "fsyncs_total", "fdatasync calls on the journal.", "counter", stats.journal.syncs);
            counter(
                &mut out,
                "group_commits_inline_total",
                "Journal groups the core thread committed itself (a small batch, nothing queued, a quick disk).",
                "counter",
                stats.inline_groups,
            );
            histogram(&mut out, "fsync_seconds", "Journal fdatasync latency.", &stats.journal.sync_latency_ns, 1e-9);
            histogram(&mut out, "group_commit_entries", "Entries per group commit.", &stats.group_entries, 1.0);
        }
        for render in self.extra.0.lock().expect("metrics lock").iter() {
            out.push_str(&render());
        }
        out
    }
}

/// Serves `/metrics` on `addr` until the process ends.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    journal: Option<GroupCommitHandle>,
) -> std::io::Result<SocketAddr> {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let (metrics, journal) = (Arc::clone(&metrics), journal.clone());
            async move { metrics.render(journal.as_ref()) }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "metrics server stopped");
        }
    });
    Ok(local)
}
