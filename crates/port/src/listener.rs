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
//!
//! Once a connection names its key (a REST request's bearer key, a FIX Logon's
//! password), the front end takes a hold for it ([`Connection::keys`],
//! [`KeyConnections::take`]): one key holds `connections_per_key_max` connections at
//! once at most, so a key that opens connections without end is refused once it has
//! that many, and the others still find free slots.
//!
//! What each listener refused is counted ([`ListenerStats`], every listener of the
//! process in [`render_metrics`]): a full listener, a failed or late TLS handshake, a
//! first request past its deadline, a connection closed idle, a key over its share.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
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
    /// Connections one key holds at once (counted from the request, or Logon, that
    /// names it).
    pub connections_per_key_max: usize,
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
        connections_per_key_max: 100,
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
            ("connections_per_key_max", self.connections_per_key_max as u128, 1, 1_000_000),
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
    keys: Arc<KeyConnections>,
    stats: Arc<ListenerStats>,
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
        let stats = ListenerStats::register(name, tcp.local_addr()?, Arc::clone(&slots));
        let keys = Arc::new(KeyConnections {
            per_key_max: limits.connections_per_key_max,
            held: Mutex::default(),
            hasher: std::collections::hash_map::RandomState::new(),
            stats: Arc::clone(&stats),
        });
        Ok(Listener { tcp, slots, name, tls: None, handshake_timeout: limits.first_request_timeout, keys, stats })
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
        let slot = match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                self.stats.full.fetch_add(1, Relaxed);
                tracing::debug!(front_end = self.name, "every connection slot is taken: accepting waits");
                Arc::clone(&self.slots).acquire_owned().await.expect("the semaphore is never closed")
            }
        };
        loop {
            match self.tcp.accept().await {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    self.stats.accepted.fetch_add(1, Relaxed);
                    let tls = self.tls.as_ref().map(|(tls, alpn)| tls.config(*alpn));
                    return Connection {
                        stream,
                        peer,
                        slot,
                        tls,
                        handshake_timeout: self.handshake_timeout,
                        keys: Arc::clone(&self.keys),
                    };
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

    /// What this listener refused, so far.
    pub fn stats(&self) -> &Arc<ListenerStats> {
        &self.stats
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
    keys: Arc<KeyConnections>,
}

impl Connection {
    /// The listener's connections per key, for the hold this connection takes once it
    /// names its key; also where its deadlines are counted (`keys().stats()`).
    pub fn keys(&self) -> Arc<KeyConnections> {
        Arc::clone(&self.keys)
    }

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
                self.keys.stats.handshakes_failed.fetch_add(1, Relaxed);
                tracing::debug!(peer = %self.peer, %error, "TLS handshake failed");
                Err(error)
            }
            Err(_) => {
                self.keys.stats.deadlines.fetch_add(1, Relaxed);
                tracing::debug!(peer = %self.peer, "TLS handshake timed out");
                Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))
            }
        }
    }
}

/// How many connections each key holds at one listener.
pub struct KeyConnections {
    per_key_max: usize,
    /// By a keyed hash of the key as presented (whether or not it is valid: the front
    /// end checks it; a made-up key holds its connections like any other).
    held: Mutex<HashMap<u64, usize>>,
    hasher: std::collections::hash_map::RandomState,
    stats: Arc<ListenerStats>,
}

/// A connection's hold on its key's share; given back when dropped.
pub struct KeyHold {
    owner: Arc<KeyConnections>,
    key: u64,
}

impl KeyConnections {
    /// Takes one of `key`'s connections, or says that it holds its most already.
    pub fn take(self: &Arc<Self>, key: &str) -> Result<KeyHold, String> {
        let hash = self.hasher.hash_one(key);
        let mut held = self.held.lock().expect("key connections lock");
        let mine = held.entry(hash).or_default();
        if *mine >= self.per_key_max {
            self.stats.per_key_refused.fetch_add(1, Relaxed);
            return Err(format!(
                "this key holds {} connections to this listener already, its most: close one first",
                self.per_key_max
            ));
        }
        *mine += 1;
        Ok(KeyHold { owner: Arc::clone(self), key: hash })
    }

    /// The listener's counters: a front end adds the deadlines and idle closes it
    /// enforces itself.
    pub fn stats(&self) -> &ListenerStats {
        &self.stats
    }
}

impl Drop for KeyHold {
    fn drop(&mut self) {
        let mut held = self.owner.held.lock().expect("key connections lock");
        if let Some(mine) = held.get_mut(&self.key) {
            *mine -= 1;
            if *mine == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// What one listener accepted and refused (relaxed counters, since it was bound).
pub struct ListenerStats {
    name: &'static str,
    addr: SocketAddr,
    slots: Arc<Semaphore>,
    connections_max: usize,
    pub accepted: AtomicU64,
    /// Accepts that found every slot taken (and waited for one).
    pub full: AtomicU64,
    pub handshakes_failed: AtomicU64,
    /// Connections closed for a deadline: the TLS handshake, or the first request
    /// (FIX: its Logon), not done in time.
    pub deadlines: AtomicU64,
    /// Connections closed for staying silent past `idle_timeout` (FIX: a TestRequest
    /// left unanswered).
    pub idle_closed: AtomicU64,
    /// Requests refused for their size (over `request_bytes_max`).
    pub oversize: AtomicU64,
    /// Connections refused because their key held `connections_per_key_max`.
    pub per_key_refused: AtomicU64,
}

/// Every listener of the process, for [`render_metrics`].
static LISTENERS: Mutex<Vec<Weak<ListenerStats>>> = Mutex::new(Vec::new());

impl ListenerStats {
    fn register(name: &'static str, addr: SocketAddr, slots: Arc<Semaphore>) -> Arc<ListenerStats> {
        let stats = Arc::new(ListenerStats {
            name,
            addr,
            connections_max: slots.available_permits(),
            slots,
            accepted: AtomicU64::new(0),
            full: AtomicU64::new(0),
            handshakes_failed: AtomicU64::new(0),
            deadlines: AtomicU64::new(0),
            idle_closed: AtomicU64::new(0),
            oversize: AtomicU64::new(0),
            per_key_refused: AtomicU64::new(0),
        });
        let mut listeners = LISTENERS.lock().expect("listeners lock");
        listeners.retain(|listener| listener.strong_count() > 0);
        listeners.push(Arc::downgrade(&stats));
        stats
    }
}

/// The Prometheus text of every listener of this process that is still bound:
/// `bourse_listener_*{front_end, addr}` (appended to a node's or gateway's `/metrics`).
pub fn render_metrics() -> String {
    use std::fmt::Write;
    let listeners: Vec<Arc<ListenerStats>> =
        LISTENERS.lock().expect("listeners lock").iter().filter_map(Weak::upgrade).collect();
    let mut out = String::new();
    if listeners.is_empty() {
        return out;
    }
    type Value = fn(&ListenerStats) -> u64;
    let series: [(&str, &str, &str, Value); 8] = [
        ("connections", "gauge", "Connections served now.", |s| {
            (s.connections_max - s.slots.available_permits()) as u64
        }),
        ("accepted_total", "counter", "Connections accepted.", |s| s.accepted.load(Relaxed)),
        ("full_total", "counter", "Accepts that found every slot taken (connections_max) and waited.", |s| {
            s.full.load(Relaxed)
        }),
        ("handshakes_failed_total", "counter", "TLS handshakes that failed.", |s| s.handshakes_failed.load(Relaxed)),
        (
            "deadlines_total",
            "counter",
            "Connections closed for a TLS handshake or first request not done within first_request_timeout.",
            |s| s.deadlines.load(Relaxed),
        ),
        ("idle_closed_total", "counter", "Connections closed silent past idle_timeout.", |s| {
            s.idle_closed.load(Relaxed)
        }),
        ("oversize_total", "counter", "Requests refused for being over request_bytes_max.", |s| {
            s.oversize.load(Relaxed)
        }),
        ("key_refused_total", "counter", "Connections refused because their key held connections_per_key_max.", |s| {
            s.per_key_refused.load(Relaxed)
        }),
    ];
    for (name, kind, help, value) in series {
        let _ = writeln!(out, "# HELP bourse_listener_{name} {help}\n# TYPE bourse_listener_{name} {kind}");
        for s in &listeners {
            let _ =
                writeln!(out, "bourse_listener_{name}{{front_end=\"{}\",addr=\"{}\"}} {}", s.name, s.addr, value(s));
        }
    }
    out
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
    async fn a_key_holds_its_share_of_connections_and_refusals_are_counted() {
        let limits = ListenerLimits { connections_per_key_max: 2, ..ListenerLimits::DEFAULT };
        let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), "keys-test", &limits).unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let connection = listener.accept().await;
        let keys = connection.keys();
        let first = keys.take("k1").unwrap();
        let _second = keys.take("k1").unwrap();
        let refused = keys.take("k1").err().expect("a third is refused");
        assert!(refused.contains("holds 2 connections"), "{refused}");
        let _other = keys.take("k2").expect("another key has its own share");
        drop(first);
        let _again = keys.take("k1").expect("a connection closed gives its place back");
        assert_eq!(listener.stats().per_key_refused.load(Relaxed), 1);
        let text = render_metrics();
        let line = format!("bourse_listener_key_refused_total{{front_end=\"keys-test\",addr=\"{addr}\"}} 1");
        assert!(text.contains(&line), "{text}");
        assert!(text.contains(&format!("bourse_listener_connections{{front_end=\"keys-test\",addr=\"{addr}\"}} 1")));
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
        assert_eq!(listener.stats().full.load(Relaxed), 1, "the wait is counted");
    }
}
