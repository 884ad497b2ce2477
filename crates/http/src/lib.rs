//! # bourse-http
//!
//! The REST + WebSocket API of Bourse: what web pages, scripts and bots use. It is a
//! front end only: every request is translated into the gateway's gRPC contract
//! (`proto/bourse/v1/exchange.proto`) and the answer translated back; no trading rule
//! lives here. Orders go through [`bourse_client::Client`] sessions (exactly-once,
//! resent after a reconnect, answered only once committed), so a request that got a
//! `201` names an order the exchange will never lose, and a dropped HTTP connection
//! loses nothing that was acknowledged.
//!
//! - Authentication: each request carries an API key (`Authorization: Bearer <key>` or
//!   `X-API-Key: <key>`; `?api_key=` on the WebSocket upgrade only, for browsers,
//!   which cannot set headers there; on any other route it is refused, 401). The key is passed upstream, so the gateway decides what it may do:
//!   the same accounts, limits and refusals as over gRPC. Without a key a request is
//!   sent as is, which an `--open` gateway accepts.
//! - One upstream order-entry session per key ([`upstream`]) on the front-end port
//!   (`bourse_port`), opened on first use and opened again after it ended; in the
//!   gateway's process it calls the gateway in process, without gRPC.
//! - Errors are typed JSON bodies carrying the engine's stable rejection code and name
//!   ([`error`]).
//! - `/openapi.json` is generated from the handlers' annotations ([`api`]).
//! - `/v1/ws`: market data (L2 snapshot then sequenced updates, trades, BBO) and the
//!   key's own order events ([`ws`]).
//!
//! Known limits: the order and fill events on the WebSocket are those of orders placed
//! through this server with the same key (the gateway sends a session the reports of
//! its own orders); recent trades are those this server has seen since it started.

pub mod api;
pub mod control;
pub mod daytrading;
pub mod error;
pub mod history;
pub mod market;
pub mod model;
pub mod upstream;
pub mod ws;

use std::net::SocketAddr;
use std::sync::Arc;

use bourse_client::ApiKey;
use tokio::sync::watch;

/// Settings of the HTTP front end.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where requests go: the gateway of this process (no network hop), or gRPC
    /// addresses of a gateway (or any node of a cluster, which then checks no keys).
    pub upstream: bourse_port::Upstream,
    /// The key this server uses for its own market data feed (recent trades); a key
    /// with no accounts suffices. None against an open gateway or a node.
    pub service_key: Option<ApiKey>,
    /// Recent trades kept per symbol for `GET /v1/trades/{symbol}`.
    pub trades_kept: usize,
    /// Messages buffered per WebSocket client before it is dropped as too slow.
    pub ws_buffer: usize,
    /// A directory of static files (the built browser UI, `web/dist`) served at `/`.
    pub web_dir: Option<std::path::PathBuf>,
    /// The history store the history routes read (a SQLite file or `postgres://…`).
    pub history: Option<String>,
    /// The day-trading service (`host:port` of its gRPC `DayTrading`) the
    /// `/v1/daytrading` routes call; without one they answer 404.
    pub day_trading: Option<String>,
    /// The listener's limits: connections at once (`connections_max`, 10,000) and the
    /// largest request body (`request_bytes_max`, 2 MiB). (Its timeouts are not applied
    /// yet: issue 25.)
    pub limits: bourse_port::ListenerLimits,
}

impl HttpConfig {
    /// A front end sending to the gRPC addresses `upstream`; set
    /// [`HttpConfig::upstream`] to a gateway of this process instead where there is one.
    pub fn new(listen: SocketAddr, upstream: Vec<String>) -> Self {
        HttpConfig {
            listen,
            upstream: bourse_port::Upstream::Remote(upstream),
            service_key: None,
            trades_kept: 1_000,
            ws_buffer: 4_096,
            web_dir: None,
            history: None,
            day_trading: None,
            limits: bourse_port::ListenerLimits { request_bytes_max: 2 << 20, ..bourse_port::ListenerLimits::DEFAULT },
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.upstream.is_empty() {
            return Err("the HTTP front end needs at least one upstream address".into());
        }
        if !(1..=1_000_000).contains(&self.trades_kept) {
            return Err(format!("trades_kept = {} is outside 1..=1000000", self.trades_kept));
        }
        if !(16..=1 << 20).contains(&self.ws_buffer) {
            return Err(format!("ws_buffer = {} is outside 16..=1048576", self.ws_buffer));
        }
        self.limits.validate()?;
        Ok(())
    }
}

/// What every handler shares.
pub struct AppState {
    pub config: HttpConfig,
    pub upstream: upstream::Upstreams,
    pub market: Arc<market::Market>,
    /// Cluster status and the demo's controls, when this server has them.
    pub control: Option<Arc<dyn control::Control>>,
    pub shutdown: watch::Receiver<bool>,
    /// The history store, when configured.
    pub history: Option<Arc<history::HistoryDb>>,
    /// The day-trading service, when configured.
    pub day_trading: Option<daytrading::DayTradingClient>,
}

/// The port's listener (connection limit) as axum's.
struct Limited(bourse_port::Listener);

impl axum::serve::Listener for Limited {
    type Io = bourse_port::Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let connection = self.0.accept().await;
        let peer = connection.peer;
        (connection, peer)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A running HTTP front end.
pub struct HttpServer {
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
}

impl HttpServer {
    /// Binds `config.listen` and serves. Must run inside a tokio runtime.
    pub async fn start(config: HttpConfig) -> Result<HttpServer, std::io::Error> {
        HttpServer::start_with(config, None).await
    }

    /// Serves with `control` answering `/v1/cluster` and the demo's routes.
    pub async fn start_with(
        config: HttpConfig,
        control: Option<Arc<dyn control::Control>>,
    ) -> Result<HttpServer, std::io::Error> {
        config.validate().map_err(std::io::Error::other)?;
        let history = match &config.history {
            Some(url) => Some(history::HistoryDb::open(url).await.map_err(std::io::Error::other)?),
            None => None,
        };
        let day_trading = match &config.day_trading {
            Some(address) => Some(daytrading::client(address).map_err(std::io::Error::other)?),
            None => None,
        };
        let (shutdown, shutdown_seen) = watch::channel(false);
        let market = market::Market::start(&config, shutdown_seen.clone());
        let state = Arc::new(AppState {
            upstream: upstream::Upstreams::new(config.upstream.clone()),
            market,
            control,
            shutdown: shutdown_seen.clone(),
            history,
            day_trading,
            config,
        });
        let limits = &state.config.limits;
        let listener = Limited(bourse_port::Listener::bind(state.config.listen, "http", limits)?);
        let addr = listener.0.local_addr()?;
        let app = api::router(Arc::clone(&state)).layer(axum::extract::DefaultBodyLimit::max(limits.request_bytes_max));
        let mut stop = shutdown_seen;
        let server = tokio::spawn(async move {
            let result = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|stopping| *stopping).await;
                })
                .await;
            if let Err(error) = result {
                tracing::error!(%error, "HTTP server stopped");
            }
        });
        tracing::info!(%addr, "HTTP API serving");
        Ok(HttpServer { addr, shutdown, server })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, ends WebSockets, and waits a little for requests in progress.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let mut server = self.server;
        if tokio::time::timeout(std::time::Duration::from_secs(3), &mut server).await.is_err() {
            server.abort();
        }
    }
}
