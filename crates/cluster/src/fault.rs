//! A TCP proxy that injects network faults, for tests and benchmarks.
//!
//! One proxy stands in front of each node's Raft listener, and the cluster membership
//! advertises the proxy's address, so every connection *to* that node passes through it.
//! Nodes bind their outgoing connections to distinct loopback addresses
//! ([`crate::network::NetworkConfig::bind_ip`]), so the proxy knows which node a
//! connection comes *from* by its source IP. Rules are therefore per (source,
//! destination) pair and directional: blocking A at B's proxy stops A→B requests (and
//! their replies, which share the connection), not B→A. Isolating node X takes blocking X
//! at every other proxy plus [`FaultProxy::block_all`] at X's own; a 2/3 split is the same
//! by groups.
//!
//! Blocking cuts the matching open connections at once (closed, as a crashed or
//! partitioned peer's would eventually be) and closes new ones right after accepting them,
//! so the sender sees a closed connection, never a hang. Delay holds each chunk of
//! source→destination bytes for the configured time without limiting throughput (bytes
//! keep flowing, each chunk is released at its arrival time plus the delay); replies are
//! not delayed.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

#[derive(Clone, Debug, Default)]
struct Rules {
    blocked: HashSet<IpAddr>,
    all: bool,
    delay: Duration,
}

impl Rules {
    fn blocks(&self, src: IpAddr) -> bool {
        self.all || self.blocked.contains(&src)
    }
}

/// A fault-injecting forwarder from a loopback address to one target; see the module
/// docs. Dropping it stops it and cuts every connection through it.
pub struct FaultProxy {
    addr: SocketAddr,
    rules: Arc<watch::Sender<Rules>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `listen` (port 0 picks one; see [`Self::addr`]) and forwards to `target`.
    pub async fn start(listen: SocketAddr, target: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let rules = Arc::new(watch::Sender::new(Rules::default()));
        let task = tokio::spawn(accept_loop(listener, target, rules.clone()));
        Ok(Self { addr, rules, task })
    }

    /// The address to advertise in place of the target's.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts connections from `src` and refuses new ones until [`Self::unblock`] or
    /// [`Self::heal`].
    pub fn block(&self, src: IpAddr) {
        self.rules.send_modify(|r| {
            r.blocked.insert(src);
        });
    }

    pub fn unblock(&self, src: IpAddr) {
        self.rules.send_modify(|r| {
            r.blocked.remove(&src);
        });
    }

    /// Blocks every source, including ones never seen.
    pub fn block_all(&self) {
        self.rules.send_modify(|r| r.all = true);
    }

    /// Lifts every block (not the delay).
    pub fn heal(&self) {
        self.rules.send_modify(|r| {
            r.all = false;
            r.blocked.clear();
        });
    }

    /// Holds source→target bytes for `delay` (zero turns it off). Applies to bytes read
    /// from now on, on open and new connections.
    pub fn set_delay(&self, delay: Duration) {
        self.rules.send_modify(|r| r.delay = delay);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection task.
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, rules: Arc<watch::Sender<Rules>>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((client, peer)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                if rules.borrow().blocks(peer.ip()) {
                    drop(client);
                    continue;
                }
                conns.spawn(proxy_conn(client, peer.ip(), target, rules.subscribe()));
            }
        }
    }
}

async fn proxy_conn(client: TcpStream, src: IpAddr, target: SocketAddr, mut rules: watch::Receiver<Rules>) {
    let delay = rules.clone();
    let cut = async {
        // Ends when `src` becomes blocked (or the proxy is dropped).
        let _ = rules.wait_for(|r| r.blocks(src)).await;
    };
    let forward = async {
        let upstream = TcpStream::connect(target).await?;
        let _ = upstream.set_nodelay(true);
        let _ = client.set_nodelay(true);
        let (cr, cw) = client.into_split();
        let (ur, uw) = upstream.into_split();
        tokio::try_join!(pump(cr, uw, Some(delay)), pump(ur, cw, None))?;
        Ok::<(), io::Error>(())
    };
    tokio::select! {
        _ = cut => {}
        _ = forward => {}
    }
}

/// Copies `from` to `to` until end of stream, then shuts `to` down. With `delay`, each
/// chunk is released at its arrival time plus the delay in force when it arrived; a
/// separate writer keeps reading from being paced by the delay.
async fn pump<R, W>(mut from: R, mut to: W, delay: Option<watch::Receiver<Rules>>) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = from.read(&mut buf).await?;
            if n == 0 {
                return Ok::<(), io::Error>(());
            }
            let hold = delay.as_ref().map_or(Duration::ZERO, |d| d.borrow().delay);
            let _ = tx.send((Instant::now() + hold, buf[..n].to_vec()));
        }
    };
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            to.write_all(&chunk).await?;
        }
        to.shutdown().await
    };
    tokio::try_join!(reader, writer)?;
    Ok(())
}
