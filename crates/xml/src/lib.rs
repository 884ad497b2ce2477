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
    /// Largest accepted N (4 MiB).
    pub max_request_bytes: usize,
    /// Most result-producing children in one request (10,000).
    pub max_children: usize,
    /// Time to receive one whole request once its first byte arrived (30 s); also the
    /// most a reply may take to write.
    pub read_timeout: Duration,
    /// A connection on which no request byte arrives for this long is closed (300 s).
    pub idle_timeout: Duration,
    /// Connections served at once (10,000); more wait in the accept backlog.
    pub max_connections: usize,
}

impl XmlConfig {
    pub fn new(listen: SocketAddr, framing: Framing) -> Self {
        XmlConfig {
            listen,
            framing,
            max_request_bytes: 4 << 20,
            max_children: 10_000,
            read_timeout: Duration::from_millis(30_000),
            idle_timeout: Duration::from_millis(300_000),
            max_connections: 10_000,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let checks: [(&str, u64, u64, u64); 5] = [
            ("max_request_bytes", self.max_request_bytes as u64, 1, 1 << 30),
            ("max_children", self.max_children as u64, 1, 10_000_000),
            ("read_timeout_ms", self.read_timeout.as_millis() as u64, 1, 3_600_000),
            ("idle_timeout_ms", self.idle_timeout.as_millis() as u64, 1, 86_400_000),
            ("max_connections", self.max_connections as u64, 1, 1_000_000),
        ];
        for (field, value, min, max) in checks {
            if !(min..=max).contains(&value) {
                return Err(format!("{field} = {value} is outside {min}..={max}"));
            }
        }
        Ok(())
    }
}

/// Connections the kernel queues for `accept` (capped by `net.core.somaxconn`). The
/// standard 128 overflowed when 256 clients connected at once: a dropped SYN costs the
/// client a 1 s retransmission.
const ACCEPT_BACKLOG: u32 = 4096;

fn listen(addr: SocketAddr) -> Result<tokio::net::TcpListener, std::io::Error> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_BACKLOG)
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
        let listener = listen(config.listen)?;
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
