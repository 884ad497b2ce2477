//! Outputs held until durable, and the sessions they go to.
//!
//! The core parks each batch's outputs under the batch's last log index
//! ([`Pending::push`]); the journal's writer thread calls [`Pending::release_through`]
//! after each fdatasync, which sends every parked batch at or below the durable index,
//! in order. A batch with nothing to log (queries, refused shapes) waits behind the
//! batches before it, so replies never overtake the commands before them.
//!
//! Sending never blocks the writer: a session whose outbox is full is dropped (its
//! stream ends; the client reconnects and resends, and exactly-once answers the resends
//! from the engine's record), and a lagging market data subscriber is cut off by the
//! broadcast channel.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use bourse_engine::ClientId;
use bourse_protocol::proto;
use rustc_hash::FxHashMap;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::metrics::Metrics;
use crate::query::QueryAnswer;

/// Something for one client's session.
pub enum ClientItem {
    Ack(proto::Ack),
    Fill(proto::FillReport),
    Cancel(proto::CancelReport),
}

/// One output of the core, released once durable.
pub enum Output {
    Client {
        client: ClientId,
        item: ClientItem,
    },
    Unary {
        reply: oneshot::Sender<proto::Ack>,
        ack: proto::Ack,
    },
    Query {
        reply: oneshot::Sender<QueryAnswer>,
        answer: QueryAnswer,
    },
    Market(proto::MarketDataUpdate),
    /// One log entry's public order-level events, for the gateways' feeds.
    Feed(Arc<FeedItem>),
    /// A feed subscriber's starting image, released once its index is durable.
    FeedImage {
        reply: oneshot::Sender<FeedStart>,
        start: FeedStart,
    },
    /// The client closed its side of the session: end the stream after the acks before.
    EndSession {
        client: ClientId,
        session: u64,
    },
}

/// The node's public broadcasts: market data as nodes publish it, and the order-level
/// feed gateways derive theirs from.
#[derive(Clone)]
pub struct Broadcasts {
    pub market: broadcast::Sender<proto::MarketDataUpdate>,
    pub feed: broadcast::Sender<Arc<FeedItem>>,
}

/// What the feed broadcast carries.
pub enum FeedItem {
    Entry(proto::FeedEntry),
    /// The state was replaced (a snapshot was installed): every feed must start over
    /// from a new image.
    Reset,
}

/// Where a feed subscriber starts: the books at one index, then the entries after it.
pub type FeedStart = (proto::BookImage, broadcast::Receiver<Arc<FeedItem>>);

/// The sending side of a gateway link.
pub type LinkSender = mpsc::Sender<Result<proto::GatewayDown, tonic::Status>>;

/// How the node reaches a client: its own order-entry stream, or the link of the
/// gateway it is connected through.
#[derive(Clone)]
pub enum Outbox {
    Session(mpsc::Sender<Result<proto::ServerBatch, tonic::Status>>),
    Link { client: ClientId, sender: LinkSender },
}

impl Outbox {
    fn try_send(&self, batch: proto::ServerBatch) -> Result<(), mpsc::error::TrySendError<()>> {
        match self {
            Outbox::Session(sender) => sender.try_send(Ok(batch)).map_err(|e| e.map_value()),
            Outbox::Link { client, sender } => {
                let reply = proto::ClientReply { client_id: client.0, batch: Some(batch) };
                sender
                    .try_send(Ok(proto::GatewayDown { replies: vec![reply], refused: Vec::new() }))
                    .map_err(|e| e.map_value())
            }
        }
    }

    /// Ends the stream with `status` (for a link: the whole link).
    fn try_fail(&self, status: tonic::Status) {
        let _ = match self {
            Outbox::Session(sender) => sender.try_send(Err(status)).map_err(|e| e.map_value()),
            Outbox::Link { sender, .. } => sender.try_send(Err(status)).map_err(|e| e.map_value()),
        };
    }
}

trait MapValue {
    fn map_value(self) -> mpsc::error::TrySendError<()>;
}

impl<T> MapValue for mpsc::error::TrySendError<T> {
    fn map_value(self) -> mpsc::error::TrySendError<()> {
        match self {
            mpsc::error::TrySendError::Full(_) => mpsc::error::TrySendError::Full(()),
            mpsc::error::TrySendError::Closed(_) => mpsc::error::TrySendError::Closed(()),
        }
    }
}

/// How the node reaches one connected session. The session's reply stream ends once
/// every `Outbox` and `kill` sender is gone (after delivering what is buffered), or at
/// once with an error when `kill` is used.
pub struct SessionHandle {
    pub session: u64,
    pub outbox: Outbox,
    /// Ends the reply stream with an error status, ahead of anything buffered.
    pub kill: Outbox,
    /// Tells the session's reader to stop reading commands.
    pub stop_reading: Arc<tokio::sync::Notify>,
}

/// Connected sessions by client id. A newer connection of the same client replaces
/// (and ends) the older one; `session` tells them apart when the older one closes.
#[derive(Default)]
pub struct Sessions {
    by_client: Mutex<FxHashMap<ClientId, SessionHandle>>,
}

impl Sessions {
    pub fn register(&self, client: ClientId, handle: SessionHandle) {
        let replaced = self.by_client.lock().expect("sessions lock").insert(client, handle);
        if let Some(old) = replaced {
            old.stop_reading.notify_one();
        }
    }

    /// Forgets the client's session if it is still this one; its stream then ends
    /// after what is buffered.
    pub fn unregister(&self, client: ClientId, session: u64) {
        let mut sessions = self.by_client.lock().expect("sessions lock");
        if sessions.get(&client).is_some_and(|h| h.session == session) {
            sessions.remove(&client);
        }
    }

    /// Ends every session at once with an error status (leadership moved).
    pub fn kill_all(&self, status: impl Fn() -> tonic::Status) {
        for (_, handle) in self.by_client.lock().expect("sessions lock").drain() {
            handle.kill.try_fail(status());
            handle.stop_reading.notify_one();
        }
    }

    /// Ends every session after what is buffered (node shutdown).
    pub fn end_all(&self) {
        for (_, handle) in self.by_client.lock().expect("sessions lock").drain() {
            handle.stop_reading.notify_one();
        }
    }
}

#[derive(Default)]
struct Parked {
    durable: u64,
    batches: VecDeque<(u64, Vec<Output>)>,
}

/// Outputs waiting for their log index to become durable.
pub struct Pending {
    parked: Mutex<Parked>,
    sessions: Arc<Sessions>,
    market: broadcast::Sender<proto::MarketDataUpdate>,
    feed: broadcast::Sender<Arc<FeedItem>>,
    metrics: Arc<Metrics>,
}

impl Pending {
    pub fn new(
        durable: u64,
        sessions: Arc<Sessions>,
        market: broadcast::Sender<proto::MarketDataUpdate>,
        feed: broadcast::Sender<Arc<FeedItem>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Pending { parked: Mutex::new(Parked { durable, batches: VecDeque::new() }), sessions, market, feed, metrics }
    }

    /// Parks a batch's outputs under `index`, or sends them at once if that index is
    /// durable and nothing is parked before them.
    pub fn push(&self, index: u64, outputs: Vec<Output>) {
        if outputs.is_empty() {
            return;
        }
        let mut parked = self.parked.lock().expect("pending lock");
        if index <= parked.durable && parked.batches.is_empty() {
            self.send(outputs);
        } else {
            parked.batches.push_back((index, outputs));
        }
    }

    /// Called after `index` became durable: sends everything parked at or below it.
    pub fn release_through(&self, index: u64) {
        let mut parked = self.parked.lock().expect("pending lock");
        parked.durable = parked.durable.max(index);
        while parked.batches.front().is_some_and(|(i, _)| *i <= parked.durable) {
            let (_, outputs) = parked.batches.pop_front().expect("front exists");
            self.send(outputs);
        }
    }

    /// Sends one batch's outputs: one server batch per client.
    fn send(&self, outputs: Vec<Output>) {
        let mut per_client: FxHashMap<ClientId, proto::ServerBatch> = FxHashMap::default();
        let mut order: Vec<ClientId> = Vec::new();
        for output in outputs {
            match output {
                Output::Client { client, item } => {
                    let batch = per_client.entry(client).or_insert_with(|| {
                        order.push(client);
                        proto::ServerBatch::default()
                    });
                    match item {
                        ClientItem::Ack(ack) => batch.acks.push(ack),
                        ClientItem::Fill(fill) => batch.fills.push(fill),
                        ClientItem::Cancel(cancel) => batch.cancels.push(cancel),
                    }
                }
                Output::Unary { reply, ack } => {
                    let _ = reply.send(ack);
                }
                Output::Query { reply, answer } => {
                    let _ = reply.send(answer);
                }
                Output::Market(update) => {
                    let _ = self.market.send(update);
                }
                Output::Feed(item) => {
                    let _ = self.feed.send(item);
                }
                Output::FeedImage { reply, start } => {
                    let _ = reply.send(start);
                }
                Output::EndSession { client, session } => {
                    // Everything before it was collected above; send it first.
                    self.send_to_sessions(&mut per_client, &mut order);
                    self.sessions.unregister(client, session);
                }
            }
        }
        self.send_to_sessions(&mut per_client, &mut order);
    }

    fn send_to_sessions(&self, per_client: &mut FxHashMap<ClientId, proto::ServerBatch>, order: &mut Vec<ClientId>) {
        if order.is_empty() {
            return;
        }
        let mut sessions = self.sessions.by_client.lock().expect("sessions lock");
        for client in order.drain(..) {
            let batch = per_client.remove(&client).expect("collected above");
            let Some(handle) = sessions.get(&client) else { continue };
            match handle.outbox.try_send(batch) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // Never block the writer: end the session with an error, so the
                    // client reconnects and resends (exactly-once answers the resends).
                    let handle = sessions.remove(&client).expect("found above");
                    let status = tonic::Status::resource_exhausted(
                        "session dropped: it does not read its acks; reconnect and resend",
                    );
                    handle.kill.try_fail(status);
                    handle.stop_reading.notify_one();
                    self.metrics.sessions_dropped_slow.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(client = client.0, "session dropped: it does not read its acks");
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    sessions.remove(&client);
                }
            }
        }
    }
}
