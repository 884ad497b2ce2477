//! What every front end's listener needs, in one place: how many connections it
//! serves at once, how long a connection may take and stay silent, how large a request
//! may be ([`ListenerLimits`]), and the accept loop that holds to them ([`Listener`]).
//!
//! A connection holds its slot for as long as it lives ([`Connection`]); when every
//! slot is taken the listener stops accepting, so further clients wait in the kernel's
//! backlog rather than take memory here. Accept failures (out of descriptors, say)
//! pause the loop briefly instead of spinning.
//!
//! A listener given an [`EdgeTls`] speaks TLS: each connection's handshake runs in the
//! task that serves it ([`Connection::open`]), never in the accept loop, and must end
//! within `first_request_timeout`, so a client that connects and stalls holds a slot
//! for that long at most.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bourse_pki::{Alpn, EdgeTls};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::stream::EdgeStream;

/// A listener's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Connections served at once.
    pub connections_max: usize,
    /// How long a new connection may take to send its first request (FIX: its Logon),
    /// however it trickles in.
    pub first_request_timeout: Duration,
    /// How long a connection may stay silent between requests.
    pub idle_timeout: Duration,
    /// How long one request, once begun, may take to arrive, and one reply to be written.
    pub io_timeout: Duration,
    /// The largest request, in bytes.
    pub request_bytes_max: usize,
}

impl ListenerLimits {
    /// Defaults for a front end facing the network.
    pub const DEFAULT: ListenerLimits = ListenerLimits {
        connections_max: 10_000,
        first_request_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(300),
        io_timeout: Duration::from_secs(30),
        request_bytes_max: 4 << 20,
    };

    /// Bounds every front end holds its settings to.
    pub fn validate(&self) -> Result<(), String> {
        let ms = |d: Duration| d.as_millis();
        let checks = [
            ("connections_max", self.connections_max as u128, 1, 1_000_000),
            ("first_request_timeout_ms", ms(self.first_request_timeout), 1, 3_600_000),
            ("idle_timeout_ms", ms(self.idle_timeout), 1, 86_400_000),
            ("io_timeout_ms", ms(self.io_timeout), 1, 3_600_000),
            ("request_bytes_max", self.request_bytes_max as u128, 1, 1 << 30),
        ];
        for (name, value, low, high) in checks {
            if !(low..=high).contains(&value) {
                return Err(format!("{name} = {value} is outside {low}..={high}"));
            }
        }
        Ok(())
    }
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits::DEFAULT
    }
}

/// Connections the kernel queues while every slot is taken.
const ACCEPT_BACKLOG: u32 = 4096;

/// A TCP listener that serves at most `connections_max` connections at once.
pub struct Listener {
    tcp: TcpListener,
    slots: Arc<Semaphore>,
    /// The front end's name in logs.
    name: &'static str,
    /// TLS, and the protocol announced in its handshake; `None`: plain TCP.
    tls: Option<(EdgeTls, Alpn)>,
    handshake_timeout: Duration,
}

impl Listener {
    /// Binds `addr` for the front end `name` (address reuse on, so a restarted front
    /// end gets its port back at once; a deep backlog, for bursts of connections that
    /// wait for a slot).
    pub fn bind(addr: SocketAddr, name: &'static str, limits: &ListenerLimits) -> io::Result<Listener> {
        limits.validate().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        let tcp = socket.listen(ACCEPT_BACKLOG)?;
        let slots = Arc::new(Semaphore::new(limits.connections_max));
        Ok(Listener { tcp, slots, name, tls: None, handshake_timeout: limits.first_request_timeout })
    }

    /// Serves TLS with `tls` (`None`: plain TCP), announcing `alpn` in the handshake.
    pub fn with_tls(mut self, tls: Option<EdgeTls>, alpn: Alpn) -> Listener {
        self.tls = tls.map(|tls| (tls, alpn));
        self
    }

    /// Whether the listener speaks TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// The next connection, once a slot is free. Never fails: an accept error is
    /// logged and the loop pauses before trying again.
    pub async fn accept(&self) -> Connection {
        let slot = Arc::clone(&self.slots).acquire_owned().await.expect("the semaphore is never closed");
        loop {
            match self.tcp.accept().await {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let tls = self.tls.as_ref().map(|(tls, alpn)| tls.config(*alpn));
                    return Connection { stream, peer, slot, tls, handshake_timeout: self.handshake_timeout };
                }
                Err(error) => {
                    tracing::warn!(front_end = self.name, %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Connections being served now.
    pub fn connections(&self, limits: &ListenerLimits) -> usize {
        limits.connections_max - self.slots.available_permits()
    }
}

/// An accepted connection, before its TLS handshake; its slot is free again when it
/// (or the slot [`Connection::open`] gives) is dropped.
pub struct Connection {
    stream: TcpStream,
    pub peer: SocketAddr,
    slot: OwnedSemaphorePermit,
    tls: Option<Arc<rustls::ServerConfig>>,
    handshake_timeout: Duration,
}

impl Connection {
    /// The stream, after the TLS handshake on a TLS listener, and the slot: keep it as
    /// long as the connection is served. A handshake that fails or does not end within
    /// `first_request_timeout` is an error (logged at debug: scanners and clients
    /// without the CA are routine), and the connection is dropped.
    pub async fn open(self) -> io::Result<(EdgeStream, OwnedSemaphorePermit)> {
        let Some(config) = self.tls else {
            return Ok((EdgeStream::Plain(self.stream), self.slot));
        };
        let handshake = tokio_rustls::TlsAcceptor::from(config).accept(self.stream);
        match tokio::time::timeout(self.handshake_timeout, handshake).await {
            Ok(Ok(stream)) => Ok((EdgeStream::Tls(Box::new(stream)), self.slot)),
            Ok(Err(error)) => {
                tracing::debug!(peer = %self.peer, %error, "TLS handshake failed");
                Err(error)
            }
            Err(_) => {
                tracing::debug!(peer = %self.peer, "TLS handshake timed out");
                Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_out_of_bounds_are_refused_by_name() {
        assert_eq!(ListenerLimits::DEFAULT.validate(), Ok(()));
        let none = ListenerLimits { connections_max: 0, ..ListenerLimits::DEFAULT };
        assert!(none.validate().unwrap_err().contains("connections_max"));
        let tiny = ListenerLimits { request_bytes_max: 0, ..ListenerLimits::DEFAULT };
        assert!(tiny.validate().unwrap_err().contains("request_bytes_max"));
    }

    #[tokio::test]
    async fn a_full_listener_accepts_again_only_when_a_connection_ends() {
        let limits = ListenerLimits { connections_max: 1, ..ListenerLimits::DEFAULT };
        let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), "test", &limits).unwrap();
        let addr = listener.local_addr().unwrap();
        let _a = TcpStream::connect(addr).await.unwrap();
        let _b = TcpStream::connect(addr).await.unwrap();
        let first = listener.accept().await;
        assert_eq!(listener.connections(&limits), 1);
        let second = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(second.is_err(), "the second waits while the first is served");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(2), listener.accept()).await;
        assert!(second.is_ok(), "and is accepted once the first ends");
    }
}
