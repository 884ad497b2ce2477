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
//! - Request bodies, WebSocket requests and query strings are fuzzed ([`fuzzing`],
//!   `crates/http/fuzz`).
//!
//! Known limits: the order and fill events on the WebSocket are those of orders placed
//! through this server with the same key (the gateway sends a session the reports of
//! its own orders); recent trades are those this server has seen since it started.

pub mod api;
pub mod control;
pub mod daytrading;
pub mod error;
pub mod fuzzing;
pub mod history;
pub mod margin;
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
    /// The listener's limits: connections at once (`connections_max`, 10,000), the time
    /// for each request's headers, counted from the end of the last answer on a
    /// keep-alive connection (`first_request_timeout`, 10 s), the most a connection may
    /// go without a byte either way, say while a body is awaited (`idle_timeout`, 300 s;
    /// a WebSocket's heartbeats keep it alive) and the largest request body
    /// (`request_bytes_max`, 2 MiB).
    pub limits: bourse_port::ListenerLimits,
    /// HTTPS and WSS with this certificate; `None`: plain HTTP (which the `bourse`
    /// commands allow on loopback only, unless told `--allow-plaintext`).
    pub tls: Option<bourse_port::EdgeTls>,
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
            tls: None,
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

/// Serves HTTP/1.1 connections from `listener` (its connection cap) until shutdown,
/// each held to `limits`: a request's headers must arrive within
/// `first_request_timeout` (so a client trickling them cannot hold a connection), and
/// a connection with no request for `idle_timeout` is closed. WebSocket upgrades are
/// served on the same connections. At shutdown, connections finish the request in
/// progress and close.
async fn serve(
    listener: bourse_port::Listener,
    app: axum::Router,
    limits: bourse_port::ListenerLimits,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let connection = tokio::select! {
            connection = listener.accept() => connection,
            _ = stop.wait_for(|stopping| *stopping) => return,
        };
        let app = app.clone();
        let limits = limits.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let keys = connection.keys();
            let Ok((stream, slot)) = connection.open().await else { return };
            // Counted against the first key a request on it presents.
            let hold: Arc<std::sync::OnceLock<bourse_port::KeyHold>> = Arc::default();
            let counted = Arc::clone(&keys);
            let body_max = limits.request_bytes_max;
            let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let mut app = app.clone();
                // Answered by the body limit (400, "length limit exceeded"); counted here.
                let declared = request.headers().get(axum::http::header::CONTENT_LENGTH);
                if declared.and_then(|v| v.to_str().ok()?.parse::<usize>().ok()).is_some_and(|n| n > body_max) {
                    counted.stats().oversize.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                // Only until the connection holds its key's place: later requests skip it.
                let presented =
                    if hold.get().is_none() { api::presented_key(request.headers(), request.uri()) } else { None };
                let refused = match presented.map(|key| counted.take(key)) {
                    Some(Ok(taken)) => {
                        let _ = hold.set(taken);
                        None
                    }
                    Some(Err(reason)) => Some(reason),
                    None => None,
                };
                async move {
                    if let Some(reason) = refused {
                        let mut response =
                            axum::response::IntoResponse::into_response(error::ApiError::TooManyConnections(reason));
                        response
                            .headers_mut()
                            .insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
                        return Ok(response);
                    }
                    // A Router is always ready: no poll_ready is needed before call.
                    tower::Service::call(&mut app, request).await
                }
            });
            let idle = IdleWatch::new(stream, slot, limits.idle_timeout);
            let watched = idle.clone_state();
            let served = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.first_request_timeout)
                .serve_connection(hyper_util::rt::TokioIo::new(idle), service)
                .with_upgrades();
            tokio::pin!(served);
            let stopping = async move {
                let _ = stop.wait_for(|stopping| *stopping).await;
            };
            let end = tokio::select! {
                end = served.as_mut() => end,
                () = stopping => {
                    served.as_mut().graceful_shutdown();
                    served.await
                }
                () = watched.expired() => {
                    keys.stats().idle_closed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Ok(())
                }
            };
            if let Err(error) = end {
                if error.is_timeout() {
                    // The next request's headers did not come within first_request_timeout.
                    keys.stats().deadlines.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                tracing::debug!(%error, "HTTP connection ended");
            }
        });
    }
}

/// A connection that notes when bytes last moved, so one idle for longer than its
/// limit can be closed; it holds the listener's slot while it lives.
struct IdleWatch {
    /// Taken only when the watch is dropped.
    stream: Option<bourse_port::EdgeStream>,
    _slot: tokio::sync::OwnedSemaphorePermit,
    state: Arc<IdleState>,
}

struct IdleState {
    /// When bytes last moved, in ms since `start`.
    last_ms: std::sync::atomic::AtomicU64,
    start: std::time::Instant,
    limit: std::time::Duration,
}

/// A TLS connection hyper drops without closing it (a header timeout, a request it
/// could not parse) is closed here with a close_notify, in a task of its own: a client
/// that reuses a kept-alive connection then reads a clean end, not a truncated one
/// ("EOF occurred in violation of protocol").
impl Drop for IdleWatch {
    fn drop(&mut self) {
        let Some(mut stream) = self.stream.take().filter(bourse_port::EdgeStream::is_tls) else { return };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                use tokio::io::AsyncWriteExt;
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), stream.shutdown()).await;
            });
        }
    }
}

impl IdleWatch {
    fn new(
        stream: bourse_port::EdgeStream,
        slot: tokio::sync::OwnedSemaphorePermit,
        limit: std::time::Duration,
    ) -> IdleWatch {
        let state = IdleState { last_ms: 0.into(), start: std::time::Instant::now(), limit };
        IdleWatch { stream: Some(stream), _slot: slot, state: Arc::new(state) }
    }

    fn clone_state(&self) -> Arc<IdleState> {
        Arc::clone(&self.state)
    }
}

impl IdleState {
    fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// Touches when a write moved bytes.
    fn touch_if_moved(&self, polled: &std::task::Poll<std::io::Result<usize>>) {
        if matches!(polled, std::task::Poll::Ready(Ok(n)) if *n > 0) {
            self.touch();
        }
    }

    /// Resolves once no byte has moved for the limit.
    async fn expired(&self) {
        loop {
            let last = std::time::Duration::from_millis(self.last_ms.load(std::sync::atomic::Ordering::Relaxed));
            let due = last + self.limit;
            let now = self.start.elapsed();
            if now >= due {
                return;
            }
            tokio::time::sleep(due - now).await;
        }
    }
}

impl tokio::io::AsyncRead for IdleWatch {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(self.stream.as_mut().expect("taken only on drop")).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.state.touch();
        }
        polled
    }
}

impl tokio::io::AsyncWrite for IdleWatch {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(self.stream.as_mut().expect("taken only on drop")).poll_write(cx, buf);
        self.state.touch_if_moved(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled =
            std::pin::Pin::new(self.stream.as_mut().expect("taken only on drop")).poll_write_vectored(cx, bufs);
        self.state.touch_if_moved(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(|stream| stream.is_write_vectored())
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(self.stream.as_mut().expect("taken only on drop")).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(self.stream.as_mut().expect("taken only on drop")).poll_shutdown(cx)
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
        let limits = state.config.limits.clone();
        let listener = bourse_port::Listener::bind(state.config.listen, "http", &limits)?
            .with_tls(state.config.tls.clone(), bourse_port::Alpn::Http1);
        let addr = listener.local_addr()?;
        let app = api::router(Arc::clone(&state)).layer(axum::extract::DefaultBodyLimit::max(limits.request_bytes_max));
        let server = tokio::spawn(serve(listener, app, limits, shutdown_seen));
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
