//! # bourse-xml
//!
//! The XML exchange protocol (`shared/specs/xml-exchange-protocol.md`): length-prefixed
//! XML requests over TCP (port 12345 by default), `<create>` for accounts and shares,
//! `<transactions>` for orders, queries and cancels, `<results>` in request order.
//!
//! It is a front end only, like `bourse-http`: it runs in the gateway's process and
//! translates every request into the gateway's gRPC contract (on the gateway's own
//! listen address, with a key made for the process, so keys, limits and fair stamping
//! apply) and the answers back. No trading rule lives here: reservations, matching at
//! the resting order's price, refunds of price improvement, conservation and every
//! refusal about money are the engine's.
//!
//! Mapping (defaults `quantity_scale` 4, `price_scale` 4, so cash has 8 decimals):
//!
//! | XML | engine |
//! |---|---|
//! | account id (`[0-9]{1,18}`, by value) | an account created with `CreateAccountWithId { external_id }` |
//! | `<account balance>` | its opening deposit of the quote asset (`USD`, 8 decimals), in the same command |
//! | symbol `SYM` | asset `SYM` (4 decimals) and pair `SYM/USD`, tick 1, lot 1, no fees |
//! | NUM, amount (shares) | × 10^4: base units |
//! | limit (dollars a share) | × 10^4: quote units (10^-8 $) per base unit (10^-4 share), so `px × qty` is the notional in 10^-8 $ |
//! | transaction id | the engine's order id |
//! | `time` | the command's log stamp (ns) / 10^9 |
//!
//! Modules: [`framing`] (length lines and bodies), [`parse`] (well-formed XML, DOCTYPE
//! refused, the request's shape), [`value`] (grammars, scaled integers, minimal
//! decimals), [`execute`] (children to commands and queries, refusals to texts),
//! [`exchange`] (upstream sessions, read-your-writes, remembered ids), [`reply`] (the
//! canonical reply bytes), and the listener.
//!
//! An order older than the engine's ring of closed orders (`orders_closed_max`) is
//! answered by the history store through [`exchange::OrderHistory`] (`bourse gateway
//! run --xml … --history URL`), exactly as the engine answered it; without one it reads
//! as unknown, and so does one the history sink has not written yet.
//!
//! Known limits: a request's children run one after another (the reply waits for each
//! command's commit in turn).

pub mod exchange;
pub mod execute;
pub mod framing;
pub mod fuzzing;
pub mod parse;
pub mod reply;
mod server;
pub mod value;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use exchange::{Exchange, ExchangeConfig, NoHistory, OrderHistory};
pub use value::Scales;

/// How replies are framed on a listener (spec section 2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// The reply document alone, then the connection closes: one request per connection.
    Bare,
    /// `M\n` then the document; the connection stays open for the next request.
    Prefixed,
}

/// One listener's settings (spec section 11), each with its default.
#[derive(Clone, Debug)]
pub struct XmlConfig {
    pub listen: SocketAddr,
    pub framing: Framing,
    /// The listener's limits, in the terms of the spec's settings:
    /// `request_bytes_max` is the largest accepted N (4 MiB); `io_timeout` the time to
    /// receive one whole request once its first byte arrived, and the most a reply may
    /// take to write (30 s, the spec's read timeout); `idle_timeout` closes a connection
    /// on which no request byte arrives for that long, before the first request too
    /// (300 s); `connections_max` are served at once (10,000), more wait in the accept
    /// backlog. (`first_request_timeout` bounds the TLS handshake only: the spec has no
    /// such setting.)
    pub limits: bourse_port::ListenerLimits,
    /// The protocol over TLS with this certificate; `None`: plain TCP.
    pub tls: Option<bourse_port::EdgeTls>,
    /// Most result-producing children in one request (10,000).
    pub max_children: usize,
}

impl XmlConfig {
    pub fn new(listen: SocketAddr, framing: Framing) -> Self {
        XmlConfig {
            listen,
            framing,
            limits: bourse_port::ListenerLimits {
                connections_max: 10_000,
                idle_timeout: Duration::from_millis(300_000),
                io_timeout: Duration::from_millis(30_000),
                request_bytes_max: 4 << 20,
                ..bourse_port::ListenerLimits::DEFAULT
            },
            tls: None,
            max_children: 10_000,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        self.limits.validate()?;
        if !(1..=10_000_000).contains(&self.max_children) {
            return Err(format!("max_children = {} is outside 1..=10000000", self.max_children));
        }
        Ok(())
    }
}

/// A running XML listener.
pub struct XmlServer {
    addr: SocketAddr,
    shutdown: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl XmlServer {
    /// Binds `config.listen` and serves requests through `exchange`. Must run inside a
    /// tokio runtime. Several listeners (say one bare, one length-prefixed) may share one
    /// exchange.
    pub async fn start(config: XmlConfig, exchange: Arc<Exchange>) -> Result<XmlServer, std::io::Error> {
        config.validate().map_err(std::io::Error::other)?;
        let listener = bourse_port::Listener::bind(config.listen, "xml", &config.limits)?
            .with_tls(config.tls.clone(), bourse_port::Alpn::None);
        let addr = listener.local_addr()?;
        let (shutdown, stop) = tokio::sync::watch::channel(false);
        let framing = config.framing;
        let shared = Arc::new(server::Shared { config, exchange });
        let task = tokio::spawn(server::accept_loop(listener, shared, stop));
        tracing::info!(%addr, ?framing, "XML exchange protocol serving");
        Ok(XmlServer { addr, shutdown, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting; connections being served finish their request.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
    }
}
