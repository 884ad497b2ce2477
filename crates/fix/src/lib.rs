//! # bourse-fix
//!
//! FIX 4.4 order entry and market data for Bourse: a front end in the gateway's
//! process, like `bourse-http`. It holds no trading rule: each FIX message becomes a
//! gRPC call on the gateway's own listen address with the API key given at Logon, so
//! the gateway's key checks, limits and fair stamping apply, and each answer, fill and
//! cancellation the gateway reports becomes an ExecutionReport.
//!
//! - [`codec`]: tag=value framing, BodyLength and CheckSum, fields, encoding (fuzzed).
//! - [`store`]: per session, sequence numbers and sent messages on disk, fsynced before
//!   a message is put on the wire (its reader fuzzed).
//! - [`session`]: the session layer (Logon, Heartbeat, TestRequest, ResendRequest,
//!   SequenceReset, Reject, Logout) and the connection's reader and writer (the Logon
//!   checks and sequence rules fuzzed with the order and market data mappings:
//!   [`fuzzing::session`]).
//! - [`orders`]: NewOrderSingle, OrderCancelRequest, OrderCancelReplaceRequest to engine
//!   commands; acks, fills and cancellations to ExecutionReports and
//!   OrderCancelRejects.
//! - [`market`]: MarketDataRequest to the gateway's L2 and trade streams; snapshot (W)
//!   then incremental refresh (X).
//! - [`positions`]: RequestForPositions (AN) to the gateway's account report;
//!   RequestForPositionsAck (AO), then a PositionReport (AP) per margin position.
//!
//! The mappings and their reasons are in `docs/ARCHITECTURE.md` ("FIX 4.4").

pub mod codec;
pub mod fuzzing;
pub mod market;
pub mod orders;
pub mod positions;
pub mod session;
pub mod store;
pub mod tags;
pub mod time;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// Settings of the FIX front end.
#[derive(Clone, Debug)]
pub struct FixConfig {
    /// Where to accept FIX connections.
    pub listen: SocketAddr,
    /// Where messages go: the gateway of this process (no network hop), or the gRPC
    /// address of a gateway.
    pub upstream: bourse_port::Upstream,
    /// Where the session stores (sequence numbers, sent messages) live.
    pub data: PathBuf,
    /// This side's CompID: what clients put in TargetCompID (56).
    pub comp_id: String,
    /// Messages queued for one connection's socket, at most; a client that reads so
    /// slowly that more wait is disconnected (what was queued stays in the store, to be
    /// resent after it logs on again).
    pub outbox_max: usize,
    /// The listener's limits: `connections_max` connections at once, logged on or not
    /// (10,000); `first_request_timeout` for the whole Logon to arrive (10 s), however
    /// it trickles in. (Idle sessions are the heartbeat's business; FIX frames are
    /// capped by the codec.)
    pub limits: bourse_port::ListenerLimits,
    /// FIX over TLS with this certificate (the handshake within `first_request_timeout`
    /// too); `None`: plain TCP.
    pub tls: Option<bourse_port::EdgeTls>,
    /// Whether the store is fsynced before messages go out (always, outside benchmarks
    /// that measure what fsync costs).
    pub fsync: bool,
}

impl FixConfig {
    /// An acceptor sending to the gRPC addresses `upstream`; set [`FixConfig::upstream`]
    /// to a gateway of this process instead where there is one.
    pub fn new(listen: SocketAddr, upstream: Vec<String>, data: PathBuf) -> Self {
        FixConfig {
            listen,
            upstream: bourse_port::Upstream::Remote(upstream),
            data,
            comp_id: "BOURSE".into(),
            outbox_max: 65_536,
            limits: bourse_port::ListenerLimits {
                connections_max: 10_000,
                first_request_timeout: Duration::from_secs(10),
                ..bourse_port::ListenerLimits::DEFAULT
            },
            tls: None,
            fsync: true,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.upstream.is_empty() {
            return Err("the FIX front end needs an upstream address".into());
        }
        if self.comp_id.is_empty() || self.comp_id.bytes().any(|b| b <= b' ' || b == b'=' || b > b'~') {
            return Err(format!("comp_id {:?} must be printable ASCII without spaces or '='", self.comp_id));
        }
        if !(16..=1 << 22).contains(&self.outbox_max) {
            return Err(format!("outbox_max = {} is outside 16..=4194304", self.outbox_max));
        }
        Ok(())
    }
}

/// What every connection shares.
pub(crate) struct Shared {
    pub config: FixConfig,
    /// Sessions by (their SenderCompID, our CompID), created at the first Logon and
    /// kept while the process runs, so fills that arrive while a client is away are
    /// numbered, stored and resent when it returns.
    pub sessions: Mutex<HashMap<String, Arc<session::SessionCore>>>,
    /// Symbol names, learned from the exchange.
    pub catalog: Arc<bourse_port::Catalog>,
    pub shutdown: watch::Receiver<bool>,
}

/// A running FIX front end.
pub struct FixServer {
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
    shared: Arc<Shared>,
}

impl FixServer {
    /// Binds `config.listen` and serves. Must run inside a multi-threaded tokio runtime.
    pub async fn start(config: FixConfig) -> std::io::Result<FixServer> {
        config.validate().map_err(std::io::Error::other)?;
        std::fs::create_dir_all(&config.data)?;
        let listener = bourse_port::Listener::bind(config.listen, "fix", &config.limits)?
            .with_tls(config.tls.clone(), bourse_port::Alpn::None);
        let addr = listener.local_addr()?;
        let (shutdown, shutdown_seen) = watch::channel(false);
        let shared = Arc::new(Shared {
            config,
            sessions: Mutex::new(HashMap::new()),
            catalog: Arc::default(),
            shutdown: shutdown_seen,
        });
        let accept = tokio::spawn(session::accept_loop(Arc::clone(&shared), listener));
        tracing::info!(%addr, "FIX 4.4 acceptor listening");
        Ok(FixServer { addr, shutdown, accept, shared })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends Logout on every connection, stops accepting, and waits a little for the
    /// connections to close.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        self.accept.abort();
        // The listener closes when the aborted task is dropped: wait for that, so the
        // address can be bound again at once.
        let _ = self.accept.await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            let connected = {
                let sessions = self.shared.sessions.lock().expect("sessions lock");
                sessions.values().any(|s| s.connected())
            };
            if !connected || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
