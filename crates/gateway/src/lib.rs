//! # bourse-gateway
//!
//! The tier between clients and the cluster (docs/ARCHITECTURE.md, "Gateways and
//! fairness"). A gateway:
//!
//! - holds client order-entry sessions: each authenticates with an API key
//!   ([`keys`]), may act only for its key's accounts, and is held to a rate and a
//!   number of unanswered commands;
//! - stamps every client batch with its arrival time on the gateway clock and sends
//!   it, in stamp order, on its one link to the leader ([`link`]), whose fair sequencer
//!   orders batches of every gateway by stamp; idle, it sends its clock (a watermark)
//!   so the sequencer need not wait out its window; when the leader changes it
//!   reconnects and resends what is unanswered (exactly-once makes that safe);
//! - reads the order-level feed from a replica and derives every market data channel
//!   from it ([`market`]), holding each update until `t_m + d_h` on its clock and then
//!   releasing it to all its subscribers together (hold-and-release).
//!
//! The gateway stores nothing: exactly-once lives in the engine, so a gateway can be
//! restarted, or a client can move to another gateway, without losing or doubling a
//! command.

pub mod config;
pub use bourse_keys as keys;
mod link;
pub mod market;
pub mod metrics;
pub mod probe;
mod proxy;
mod quota;
mod session;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bourse_fairness::inject::DelayLine;
use bourse_fairness::{Clock, SkewedClock};
use bourse_protocol::proto;
use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, watch};

pub use config::{GatewayConfig, LocalNode};
pub use keys::{KeyStore, Principal};
pub use probe::Probe;

/// The gateway's refusals (below the log, so they do not use up a seq) are
/// `not_authorized`, `rate_limited` and `in_flight_limit` of the one list of codes.
pub use bourse_protocol::refusal::Refusal;

/// A gRPC reply stream fed by a task.
type BoxStream<T> = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

/// What travels up the gateway's pipe to the link, in stamp order.
enum UpItem {
    Batch(proto::StampedBatch),
    /// The gateway clock: nothing stamped earlier follows.
    Watermark(u64),
}

/// The stamping point: taking a stamp and entering the pipe happen under one lock, so
/// stamps enter the pipe in order and a watermark never overtakes an earlier stamp.
struct Pipe {
    next_seq: u64,
    /// The last stamp given: stamps never go backwards, even when the (injected)
    /// clock steps back at a simulated sync.
    last_ts: u64,
    line: DelayLine<UpItem>,
}

impl Pipe {
    fn stamp(&mut self, clock: &GatewayClock) -> u64 {
        self.last_ts = clock.now_ns().max(self.last_ts);
        self.last_ts
    }
}

/// The gateway's clock: true time from where the gateway reads it
/// ([`GatewayConfig::clock`]: the system's, or the simulator's), with the injected error
/// of [`GatewayConfig::inject`] on top.
#[derive(Clone, Debug)]
struct GatewayClock {
    skew: SkewedClock,
    time: Clock,
}

impl GatewayClock {
    /// The gateway clock now.
    fn now_ns(&self) -> u64 {
        self.skew.now_on(&self.time)
    }

    /// True time now.
    fn true_now(&self) -> u64 {
        self.time.now_ns()
    }

    /// The gateway clock at true time `true_ns`.
    fn at(&self, true_ns: u64) -> u64 {
        self.skew.at(true_ns)
    }

    /// When (true time) the gateway clock reads `local_ns`.
    fn true_of(&self, local_ns: u64) -> u64 {
        self.skew.true_of(local_ns)
    }
}

/// One command forwarded and not yet answered: resent after a link reconnects.
struct InFlight {
    gateway_ts: u64,
    gateway_seq: u64,
    command: proto::ClientCommand,
}

/// A connected client session, by its exchange-wide client id.
struct SessionEntry {
    session: u64,
    /// The API key it presented ("" on an open gateway): a reload that drops the key
    /// ends the session, through `revoked`.
    key: String,
    revoked: tokio::sync::Notify,
    outbox: mpsc::Sender<Result<proto::ServerBatch, tonic::Status>>,
    in_flight: Mutex<BTreeMap<u64, InFlight>>,
    /// Which client it is, for the nodes: set at its first batch, sent up with it and on
    /// every new link.
    claim: std::sync::OnceLock<proto::SessionClaim>,
}

/// What the gateway's tasks share.
struct State {
    config: GatewayConfig,
    /// Re-read on [`Gateway::reload_keys`]: a key added works at once, a removed one
    /// ends its sessions.
    keys: std::sync::RwLock<KeyStore>,
    clock: GatewayClock,
    sessions: Mutex<FxHashMap<u64, Arc<SessionEntry>>>,
    pipe: Mutex<Pipe>,
    market: Arc<market::Market>,
    metrics: Arc<metrics::Metrics>,
    shutdown: watch::Receiver<bool>,
    session_ids: std::sync::atomic::AtomicU64,
    /// The highest gateway_seq handed to a link: after a reconnect, unanswered
    /// commands up to it are resent; later ones are still in the pipe.
    sent_through: std::sync::atomic::AtomicU64,
    /// Order-entry sessions per key.
    session_quota: Arc<quota::Quota>,
    /// Each key's command rate, shared by its sessions (`session::rate_bucket`).
    buckets: Mutex<FxHashMap<String, Arc<Mutex<session::Bucket>>>>,
    /// Market data subscriptions per key and in all.
    subscription_quota: Arc<quota::Quota>,
    /// Bumped by every key reload: subscriptions watch it and end if their key went.
    keys_epoch: watch::Sender<u64>,
}

impl State {
    /// Whether `key` (as a caller presented it) is no longer in the key file. The
    /// empty key, an open gateway's, is never revoked.
    fn key_revoked(&self, key: &str) -> bool {
        !key.is_empty() && self.keys.read().expect("keys lock").verify(key).is_none()
    }

    /// Stamps `commands` of `client` and sends them up (with the session's `claim` on
    /// its first batch); they wait as in flight.
    fn forward(
        &self,
        client: u64,
        entry: &SessionEntry,
        commands: Vec<proto::ClientCommand>,
        claim: Option<proto::SessionClaim>,
    ) {
        let mut pipe = self.pipe.lock().expect("pipe lock");
        let gateway_ts = pipe.stamp(&self.clock);
        pipe.next_seq += 1;
        let gateway_seq = pipe.next_seq;
        {
            let mut in_flight = entry.in_flight.lock().expect("in-flight lock");
            for command in &commands {
                in_flight.insert(command.seq, InFlight { gateway_ts, gateway_seq, command: command.clone() });
            }
        }
        self.metrics.commands_forwarded.fetch_add(commands.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let batch = proto::StampedBatch { client_id: client, gateway_ts, gateway_seq, commands, claim };
        // Fails only if the line's thread died; the commands stay in flight and are
        // resent when the link next reconnects.
        let _ = pipe.line.send(UpItem::Batch(batch));
    }

    /// Sends the gateway clock up as a watermark.
    fn heartbeat(&self) {
        let mut pipe = self.pipe.lock().expect("pipe lock");
        let now = pipe.stamp(&self.clock);
        let _ = pipe.line.send(UpItem::Watermark(now));
    }

    /// Hands a client's acks, fills and cancels to its session; acks end the commands'
    /// flight and get the stamp the gateway gave them.
    fn deliver(&self, reply: proto::ClientReply) {
        let Some(mut batch) = reply.batch else { return };
        let entry = self.sessions.lock().expect("sessions lock").get(&reply.client_id).cloned();
        let Some(entry) = entry else { return };
        {
            let mut in_flight = entry.in_flight.lock().expect("in-flight lock");
            for ack in &mut batch.acks {
                if let Some(flight) = in_flight.remove(&ack.seq) {
                    ack.gateway_ts = flight.gateway_ts;
                }
            }
        }
        if let Err(mpsc::error::TrySendError::Full(_)) = entry.outbox.try_send(Ok(batch)) {
            // Never block the link for one slow client: drop its session; it reconnects
            // and resends, and exactly-once answers the resends.
            self.drop_session(reply.client_id, entry.session, "session dropped: it does not read its acks");
        }
    }

    /// Whether any session has a command unanswered.
    fn any_in_flight(&self) -> bool {
        let sessions = self.sessions.lock().expect("sessions lock");
        sessions.values().any(|entry| !entry.in_flight.lock().expect("in-flight lock").is_empty())
    }

    /// The node refused a session's claim (its key is not in the nodes' key file, or
    /// the id is not this gateway's to claim): the session ends with the node's reason.
    fn refuse_session(&self, refused: proto::ClaimRefused) {
        let entry = self.sessions.lock().expect("sessions lock").remove(&refused.client_id);
        if let Some(entry) = entry {
            tracing::warn!(gateway = self.config.id, client = refused.client_id, reason = %refused.reason,
                "the node refused a session");
            let status =
                tonic::Status::permission_denied(format!("the exchange refused this session: {}", refused.reason));
            let _ = entry.outbox.try_send(Err(status));
            self.metrics.sessions_refused_by_node.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn drop_session(&self, client: u64, session: u64, reason: &str) {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        if let Some(entry) = sessions.get(&client).filter(|e| e.session == session) {
            let _ = entry.outbox.try_send(Err(tonic::Status::resource_exhausted(reason.to_owned())));
            sessions.remove(&client);
            self.metrics.sessions_dropped_slow.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// A running gateway.
pub struct Gateway {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    probe: Arc<Probe>,
    market: Arc<market::Market>,
    metrics: Arc<metrics::Metrics>,
    shutdown: watch::Sender<bool>,
    /// The listener's server (none in process only).
    server: Option<tokio::task::JoinHandle<()>>,
    state: Arc<State>,
    /// The Query and MarketData services, shared by the listener and in-process callers.
    query: Arc<proxy::QueryProxy>,
    market_data: Arc<market::MarketDataService>,
}

/// Re-reads a gateway's keys (cheap to clone).
#[derive(Clone)]
pub struct KeyReloader(Arc<State>);

impl KeyReloader {
    /// Takes a re-read key file (the front ends' process keys stay): keys added work
    /// at once; sessions of keys no longer in it end with PERMISSION_DENIED. Returns how
    /// many sessions ended.
    pub fn reload(&self, file: KeyStore) -> usize {
        let state = &self.0;
        {
            let mut keys = state.keys.write().expect("keys lock");
            let merged = file.with_process_keys_of(&keys);
            *keys = merged;
        }
        let keys = state.keys.read().expect("keys lock");
        let mut sessions = state.sessions.lock().expect("sessions lock");
        let revoked: Vec<u64> = sessions
            .iter()
            .filter(|(_, entry)| !entry.key.is_empty() && keys.verify(&entry.key).is_none())
            .map(|(&client, _)| client)
            .collect();
        for client in &revoked {
            if let Some(entry) = sessions.remove(client) {
                // Its reader stops taking commands and ends the stream with the reason.
                entry.revoked.notify_one();
            }
        }
        drop(sessions);
        drop(keys);
        state.keys_epoch.send_modify(|epoch| *epoch += 1);
        tracing::info!(gateway = state.config.id, ended = revoked.len(), "key file reloaded");
        revoked.len()
    }
}

/// Why a gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Gateway {
    /// Starts serving on `config.listen`. Must run inside a tokio runtime.
    pub async fn start(config: GatewayConfig, keys: KeyStore) -> Result<Gateway, GatewayError> {
        let mut gateway = Gateway::start_in_process(config, keys).await?;
        let listener = tokio::net::TcpListener::bind(gateway.state.config.listen).await?;
        gateway.addr = listener.local_addr()?;
        let state = Arc::clone(&gateway.state);
        let (query, market_data) = (Arc::clone(&gateway.query), Arc::clone(&gateway.market_data));
        gateway.server = Some(tokio::spawn(serve(listener, state, query, market_data)));
        tracing::info!(addr = %gateway.addr, "gateway serving");
        Ok(gateway)
    }

    /// Starts a gateway that serves only callers in its process ([`Gateway::local`]):
    /// everything [`Gateway::start`] runs but the listener on `config.listen` — the
    /// deterministic simulator's gateways (`crates/simulator`).
    pub async fn start_in_process(config: GatewayConfig, keys: KeyStore) -> Result<Gateway, GatewayError> {
        config.validate().map_err(GatewayError::Config)?;
        let (shutdown, shutdown_seen) = watch::channel(false);
        let clock = GatewayClock { skew: config.inject.clock.skewed(), time: config.clock.clone() };
        let probe = Arc::new(Probe::new(config.probe));
        let metrics = Arc::new(metrics::Metrics::default());
        let market = market::Market::start(
            &config,
            clock.clone(),
            Arc::clone(&probe),
            Arc::clone(&metrics),
            shutdown_seen.clone(),
        )?;
        let metrics_addr = match config.metrics_listen {
            Some(addr) => Some(metrics::serve(addr, Arc::clone(&metrics), Arc::clone(&probe)).await?),
            None => None,
        };
        let (up_sender, up_receiver) = mpsc::unbounded_channel();
        let line = DelayLine::spawn(
            &format!("gw{}-up", config.id),
            config.inject.inbound.clone(),
            config.inject.inbound_seed,
            move |item| {
                let _ = up_sender.send(item);
            },
        )?;
        let state = Arc::new(State {
            keys: std::sync::RwLock::new(keys),
            clock,
            sessions: Mutex::new(FxHashMap::default()),
            pipe: Mutex::new(Pipe { next_seq: 0, last_ts: 0, line }),
            market,
            buckets: Mutex::new(FxHashMap::default()),
            session_quota: quota::Quota::new(
                "sessions",
                config.sessions_per_key_max,
                usize::MAX,
                Arc::clone(&metrics),
                |m| &m.sessions_refused_per_key,
            ),
            subscription_quota: quota::Quota::new(
                "subscriptions",
                config.subscriptions_per_key_max,
                config.subscriptions_max,
                Arc::clone(&metrics),
                |m| &m.subscriptions_refused,
            ),
            keys_epoch: watch::channel(0).0,
            metrics,
            shutdown: shutdown_seen,
            session_ids: std::sync::atomic::AtomicU64::new(1),
            sent_through: std::sync::atomic::AtomicU64::new(0),
            config,
        });
        tokio::spawn(link::run(Arc::clone(&state), up_receiver));
        tokio::spawn(link::heartbeats(Arc::clone(&state)));
        let addr = state.config.listen;
        let market = Arc::clone(&state.market);
        let metrics = Arc::clone(&state.metrics);
        let query = Arc::new(proxy::QueryProxy::new(Arc::clone(&state)));
        let market_data = Arc::new(market::MarketDataService(Arc::clone(&state.market), Arc::clone(&state)));
        Ok(Gateway { addr, metrics_addr, probe, market, metrics, shutdown, server: None, state, query, market_data })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where `/metrics` is served, if it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Appends `render`'s text to every `/metrics` scrape (the front ends' listeners);
    /// the first one set stays.
    pub fn also_render(&self, render: fn() -> String) {
        let _ = self.metrics.extra.set(render);
    }

    /// Order entry, queries and market data for front ends in this process: sessions
    /// like those of the listen address (keys, checks, limits, stamps), without the
    /// network in between.
    pub fn local(&self) -> bourse_client::LocalGateway {
        bourse_client::LocalGateway(Arc::new(session::LocalEntry {
            state: Arc::clone(&self.state),
            query: Arc::clone(&self.query),
            market_data: Arc::clone(&self.market_data),
        }))
    }

    /// Takes a re-read key file ([`KeyReloader::reload`]).
    pub fn reload_keys(&self, file: KeyStore) -> usize {
        self.key_reloader().reload(file)
    }

    /// A handle that re-reads keys into this gateway (for a signal handler).
    pub fn key_reloader(&self) -> KeyReloader {
        KeyReloader(Arc::clone(&self.state))
    }

    /// Whether the gateway has its market state (its feed delivered an image).
    pub fn market_ready(&self) -> bool {
        self.market.is_ready()
    }

    /// Whether the market data release thread runs at real-time priority (configured
    /// with `release_priority`, and granted).
    pub fn release_realtime(&self) -> bool {
        self.metrics.release_realtime.load(std::sync::atomic::Ordering::Relaxed) == 1
    }

    /// What this gateway recorded of its market data releases.
    pub fn probe(&self) -> &Arc<Probe> {
        &self.probe
    }

    /// Stops serving: sessions and subscriptions end, the link closes.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let Some(mut server) = self.server else { return };
        if tokio::time::timeout(std::time::Duration::from_secs(3), &mut server).await.is_err() {
            server.abort();
        }
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<State>,
    query: Arc<proxy::QueryProxy>,
    market_data: Arc<market::MarketDataService>,
) {
    use bourse_protocol::proto::{market_data_server, order_entry_server, query_server};
    let mut stop = state.shutdown.clone();
    let order_entry = order_entry_server::OrderEntryServer::new(session::OrderEntryService(Arc::clone(&state)));
    let market = market_data_server::MarketDataServer::from_arc(market_data);
    let query = query_server::QueryServer::from_arc(query);
    let admin = bourse_protocol::proto::admin_server::AdminServer::new(proxy::AdminProxy::new(Arc::clone(&state)));
    let result = tonic::transport::Server::builder()
        .add_service(order_entry)
        .add_service(market)
        .add_service(query)
        .add_service(admin)
        .serve_with_incoming_shutdown(
            bourse_pki::grpc::incoming_edge(listener, state.config.edge_tls.clone(), Arc::clone(&state.metrics.accept)),
            async move {
                while !*stop.borrow() {
                    if stop.changed().await.is_err() {
                        break;
                    }
                }
            },
        )
        .await;
    if let Err(error) = result {
        tracing::error!(%error, "gateway server stopped");
    }
}

/// Runs a gateway until SIGINT or SIGTERM.
pub async fn run_until_signal(config: GatewayConfig, keys: KeyStore) -> Result<(), GatewayError> {
    let gateway = Gateway::start(config, keys).await?;
    println!("bourse gateway listening on {}", gateway.addr());
    if let Some(metrics) = gateway.metrics_addr() {
        println!("metrics on http://{metrics}/metrics");
    }
    wait_for_signal().await?;
    gateway.shutdown().await;
    Ok(())
}

/// Waits for SIGINT or SIGTERM.
pub async fn wait_for_signal() -> Result<(), std::io::Error> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
    }
    Ok(())
}
