//! Connections between clients, gateways and nodes, as TCP carries a gRPC stream: each
//! direction delivers in the order sent, each message after its own delay but never
//! before the one ahead of it, and never twice. A message the fabric loses is sent
//! again, as TCP retransmits (20–200 ms later, holding up those behind it), except one
//! loss in ten, which resets the connection; a message to a peer that is down breaks
//! it. A broken connection ends both directions (the receiving side of a stream of
//! results hears why), and so does the death of either end's process
//! ([`World::break_connections`]). The services at either end are the real ones (a
//! node's sessions and gateway links, a gateway's sessions and feed); only the bytes in
//! between are simulated.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bourse_cluster::sim::Fate;
use rand::Rng;
use tokio::sync::{mpsc, Notify};
use tokio_stream::{Stream, StreamExt};

use crate::world::{lock, World};

/// One connection between two fabric ids (nodes are 1..=n, then gateways and clients).
pub struct Conn {
    /// The side that opened it and the side that took it.
    pub client: u64,
    pub server: u64,
    broken: AtomicBool,
    notify: Notify,
}

impl Conn {
    /// Breaks the connection: both directions stop delivering.
    pub fn break_off(&self) {
        if !self.broken.swap(true, Ordering::AcqRel) {
            self.notify.notify_waiters();
        }
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    async fn broken(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_broken() {
                return;
            }
            notified.await;
        }
    }
}

impl World {
    /// Opens a connection from `client` to `server`: none when the fabric does not get
    /// the first message through (the server is down or cut off, or it was lost).
    pub fn connect(self: &Arc<Self>, client: u64, server: u64) -> Option<Arc<Conn>> {
        let up = server > self.options.nodes || lock(&self.up).contains(&server);
        match self.fate_of(client, server, 64, up, true) {
            Fate::Delivered { .. } => {}
            Fate::Lost | Fate::Unreachable { .. } => return None,
        }
        let conn = Arc::new(Conn { client, server, broken: AtomicBool::new(false), notify: Notify::new() });
        let mut connections = lock(&self.connections);
        connections.retain(|conn| conn.upgrade().is_some_and(|conn| !conn.is_broken()));
        connections.push(Arc::downgrade(&conn));
        Some(conn)
    }

    /// The process at `endpoint` died: every connection it had breaks.
    pub fn break_connections(&self, endpoint: u64) {
        for conn in lock(&self.connections).iter().filter_map(std::sync::Weak::upgrade) {
            if conn.client == endpoint || conn.server == endpoint {
                conn.break_off();
            }
        }
    }
}

/// Which way a stream goes on its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// From the side that opened the connection.
    Up,
    Down,
}

/// What the receiving side of a stream of results hears when its connection breaks.
pub fn reset<T>() -> Option<Result<T, tonic::Status>> {
    Some(Err(tonic::Status::unavailable("the connection broke")))
}

/// A plain stream just ends when its connection breaks.
pub fn ends<T>() -> Option<T> {
    None
}

/// Carries `input` one way along `conn`; `deliver` sees (and may change) each item as
/// it arrives. The returned stream ends after the input ends and everything sent is
/// delivered, or when the connection breaks (then it yields `on_break`'s item first,
/// if any: [`reset`] for a stream of results, [`ends`] for a plain one); dropping it
/// breaks the connection from the receiving side.
pub fn carry<T, S>(
    world: &Arc<World>,
    conn: &Arc<Conn>,
    way: Way,
    input: S,
    size: fn(&T) -> usize,
    on_break: fn() -> Option<T>,
    deliver: impl FnMut(T) -> T + Send + 'static,
) -> impl Stream<Item = T> + Send + Unpin + 'static
where
    T: Send + 'static,
    S: Stream<Item = T> + Send + Unpin + 'static,
{
    let (from, to) = match way {
        Way::Up => (conn.client, conn.server),
        Way::Down => (conn.server, conn.client),
    };
    let queue: Arc<Mutex<VecDeque<(Duration, T)>>> = Arc::default();
    let (arrived, mut arrivals) = mpsc::unbounded_channel::<()>();
    let (out, output) = mpsc::unbounded_channel::<T>();
    // The sender's side: each item meets its fate as it is sent.
    {
        let (world, conn, queue) = (Arc::clone(world), Arc::clone(conn), Arc::clone(&queue));
        let mut input = input;
        tokio::spawn(async move {
            let mut last = Duration::ZERO;
            loop {
                let item = tokio::select! {
                    item = input.next() => item,
                    () = conn.broken() => return,
                };
                let Some(item) = item else { return };
                let up = to > world.options.nodes || lock(&world.up).contains(&to);
                let delay = match world.fate_of(from, to, size(&item), up, true) {
                    Fate::Delivered { delay, .. } => delay,
                    Fate::Lost if world.rng(|rng| rng.gen_range(0..10)) > 0 => {
                        world.count(|c| c.retransmitted += 1);
                        Duration::from_millis(world.rng(|rng| rng.gen_range(20..200)))
                    }
                    Fate::Lost | Fate::Unreachable { .. } => {
                        world.count(|c| c.resets += 1);
                        world.trace(&[12, from, to]);
                        conn.break_off();
                        return;
                    }
                };
                last = (world.elapsed() + delay).max(last);
                lock(&queue).push_back((last, item));
                if arrived.send(()).is_err() {
                    return;
                }
            }
        });
    }
    // The receiver's side: each item when it is due, in order.
    {
        let (world, conn) = (Arc::clone(world), Arc::clone(conn));
        let mut deliver = deliver;
        tokio::spawn(async move {
            loop {
                let got = tokio::select! {
                    got = arrivals.recv() => got,
                    () = conn.broken() => None,
                };
                if got.is_none() || conn.is_broken() {
                    break;
                }
                let Some((due, item)) = lock(&queue).pop_front() else { continue };
                tokio::select! {
                    () = tokio::time::sleep(due.saturating_sub(world.elapsed())) => {}
                    () = conn.broken() => break,
                }
                // Seen (and changed) only when it reaches someone: the receiver may have
                // gone, and then the connection is over.
                if out.is_closed() || out.send(deliver(item)).is_err() {
                    conn.break_off();
                    return;
                }
            }
            if conn.is_broken() {
                if let Some(item) = on_break() {
                    let _ = out.send(item);
                }
            }
        });
    }
    tokio_stream::wrappers::UnboundedReceiverStream::new(output)
}
