//! # bourse-daytrading
//!
//! The day-trading service of `shared/specs/day-trading.md`: the retail front end that
//! runs in the gateway's process (`bourse gateway run … --day-trading ADDR`), and the
//! workload driver (`bourse workload`).
//!
//! The ledger itself — users, cash, shares, pending orders, triggers, the 60-second
//! rules, the audit records — is part of the exchange's deterministic state machine
//! (`bourse_engine::daytrading`), replicated and journaled like every other command.
//! This crate holds no rule of it. It:
//!
//! - takes the sixteen commands over gRPC ([`grpc`]: a batched stream for programs,
//!   single calls for the REST routes of `bourse-http`), authenticated with the
//!   gateway's API keys;
//! - attaches a quote when a command needs one and the cached quote it knows of is
//!   about to expire ([`service`], spec 7.1), from one of the sources of [`quote`];
//! - submits through the gateway's own order-entry sessions (`bourse_client::Client`:
//!   batched, exactly once) and answers when the command is committed;
//! - polls quotes for symbols with armed triggers ([`poller`], spec 5);
//! - writes `DUMPLOG` from the history store ([`dump`]);
//! - replays workload files ([`workload`]).
//!
//! The project's copy of the audit log schema (spec 9.4) is `schema/logfile.xsd`.

pub mod dump;
pub mod fuzzing;
pub mod grpc;
pub mod poller;
pub mod quote;
pub mod service;
pub mod workload;

use std::net::SocketAddr;
use std::sync::Arc;

use bourse_protocol::proto;
use tokio::sync::watch;

pub use grpc::{Auth, KeyHolder};
pub use quote::{Clock, SourceConfig};
pub use service::{Service, ServiceConfig};

/// The project's widened copy of `logfile.xsd` (only the timestamp bounds differ).
pub const SCHEMA_XSD: &str = include_str!("../schema/logfile.xsd");

/// Largest gRPC message, either way: a user's `DUMPLOG` document travels in one.
pub const MESSAGE_BYTES_MAX: usize = 256 << 20;
/// The largest HTTP/2 frame the service and the workload driver accept from each other.
pub const FRAME_BYTES_MAX: u32 = 1 << 20;
/// HTTP/2 flow-control window of one stream between the service and the driver.
pub const WINDOW_BYTES: u32 = 4 << 20;

/// Everything a running service needs.
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub service: ServiceConfig,
    pub source: SourceConfig,
    /// The emulator's TCP endpoint in the legacy wire format, if wanted.
    pub emulator_listen: Option<SocketAddr>,
    pub auth: Auth,
}

/// A running day-trading service.
pub struct DayTradingServer {
    addr: SocketAddr,
    emulator_addr: Option<SocketAddr>,
    service: Arc<Service>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    poller: tokio::task::JoinHandle<()>,
    _legacy: Option<quote::legacy::LegacyServer>,
}

impl DayTradingServer {
    pub async fn start(config: ServerConfig) -> Result<DayTradingServer, String> {
        let ServerConfig { listen, service: service_config, source, emulator_listen, auth } = config;
        let clock = service_config.clock.clone();
        let (quoter, legacy) = match source {
            SourceConfig::Emulator(emulator) => {
                let emulator = Arc::new(quote::emulator::Emulator::new(emulator)?);
                let legacy = match emulator_listen {
                    Some(at) => Some(
                        quote::legacy::LegacyServer::start(at, Arc::clone(&emulator), clock)
                            .await
                            .map_err(|e| format!("emulator endpoint {at}: {e}"))?,
                    ),
                    None => None,
                };
                (quote::Quoter::Emulator(emulator), legacy)
            }
            SourceConfig::Market(mode) => {
                let market = quote::market::MarketQuotes::start(
                    service_config.port_upstream(),
                    service_config.client_options(),
                    mode,
                )
                .await?;
                (quote::Quoter::Market(Box::new(market)), None)
            }
            SourceConfig::LegacyTcp { address, timeout, attempts } => {
                (quote::Quoter::LegacyTcp { address, timeout, attempts }, None)
            }
        };
        let service = Service::start(service_config, quoter).await?;
        let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("{listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let grpc = grpc::DayTradingGrpc { service: Arc::clone(&service), auth };
        let server = proto::day_trading_server::DayTradingServer::new(grpc)
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX);
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            // No Nagle: small response batches must not wait for the peer's delayed ack.
            let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            // Large frames and flow-control windows: a driver's batch of thousands of
            // requests (a few hundred KB) crosses as a few DATA frames, without waiting
            // for WINDOW_UPDATEs of HTTP/2's default 64 KiB window on the way.
            let result = tonic::transport::Server::builder()
                .max_frame_size(FRAME_BYTES_MAX)
                .initial_stream_window_size(WINDOW_BYTES)
                .initial_connection_window_size(4 * WINDOW_BYTES)
                .add_service(server)
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await;
            if let Err(error) = result {
                tracing::error!(%error, "day-trading service stopped");
            }
        });
        let poller = tokio::spawn(poller::run(Arc::clone(&service)));
        let emulator_addr = legacy.as_ref().map(quote::legacy::LegacyServer::addr);
        Ok(DayTradingServer { addr, emulator_addr, service, stop, task, poller, _legacy: legacy })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the emulator's legacy wire endpoint listens, if it does.
    pub fn emulator_addr(&self) -> Option<SocketAddr> {
        self.emulator_addr
    }

    pub fn service(&self) -> &Arc<Service> {
        &self.service
    }

    pub async fn shutdown(self) {
        self.poller.abort();
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
