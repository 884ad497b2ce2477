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
    Client { client: ClientId, item: ClientItem },
    Unary { reply: oneshot::Sender<proto::Ack>, ack: proto::Ack },
    Query { reply: oneshot::Sender<QueryAnswer>, answer: QueryAnswer },
    Market(proto::MarketDataUpdate),
}

/// The sending side of one order-entry session.
pub type Outbox = mpsc::Sender<Result<proto::ServerBatch, tonic::Status>>;

/// Connected sessions by client id. A newer connection of the same client replaces
/// the older one; `session` tells them apart when the older one closes.
#[derive(Default)]
pub struct Sessions {
    by_client: Mutex<FxHashMap<ClientId, (u64, Outbox)>>,
}

impl Sessions {
    pub fn register(&self, client: ClientId, session: u64, outbox: Outbox) {
        self.by_client.lock().expect("sessions lock").insert(client, (session, outbox));
    }

    /// Forgets the client's outbox if it is still this session's.
    pub fn unregister(&self, client: ClientId, session: u64) {
        let mut sessions = self.by_client.lock().expect("sessions lock");
        if sessions.get(&client).is_some_and(|(s, _)| *s == session) {
            sessions.remove(&client);
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
    metrics: Arc<Metrics>,
}

impl Pending {
    pub fn new(
        durable: u64,
        sessions: Arc<Sessions>,
        market: broadcast::Sender<proto::MarketDataUpdate>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Pending { parked: Mutex::new(Parked { durable, batches: VecDeque::new() }), sessions, market, metrics }
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
            }
        }
        if order.is_empty() {
            return;
        }
        let mut sessions = self.sessions.by_client.lock().expect("sessions lock");
        for client in order {
            let batch = per_client.remove(&client).expect("collected above");
            let Some((_, outbox)) = sessions.get(&client) else { continue };
            match outbox.try_send(Ok(batch)) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // The client must reconnect and resend; never block the writer here.
                    sessions.remove(&client);
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
