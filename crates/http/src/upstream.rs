//! The way to the exchange: one [`Session`] per API key on the front-end port
//! (`bourse_port`), and the port's catalog of names.
//!
//! A [`Session`] holds, for one key, the port's order-entry [`KeySession`] (opened on the
//! first command, and opened anew with a new client id when the old one ended) and a
//! query client. When the server runs in the gateway's process (`bourse gateway run
//! --http`), both call the gateway's services in process; otherwise they use gRPC. The
//! fills and cancellations of the key's orders, and the acceptances this server saw,
//! are handed to the key's WebSocket subscribers through a broadcast channel.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bourse_client::{ApiKey, QueryClient};
use bourse_engine::command::CommandBody;
use bourse_engine::{Outcome, Reject};
use bourse_port::{KeySession, OrderEvent, Port, Upstream};
use bourse_protocol::proto;
use tokio::sync::{broadcast, Mutex};

use crate::error::ApiError;
use crate::model::Accepted;
use crate::ws::WsOrderEvent;

/// Events of a key's orders buffered for its WebSocket subscribers.
const EVENTS_BUFFER: usize = 4_096;

/// The sessions of every key seen, and the port.
pub struct Upstreams {
    port: Port,
    /// Read on every request: a plain lock, held for a lookup only.
    sessions: RwLock<HashMap<Option<String>, Arc<Session>>>,
    /// One key's first request at a time opens its session (it proves the key upstream).
    opening: Mutex<()>,
}

/// One key's way upstream.
pub struct Session {
    orders: KeySession,
    query: QueryClient,
    events: broadcast::Sender<WsOrderEvent>,
}

impl Upstreams {
    pub fn new(upstream: Upstream) -> Self {
        Upstreams { port: Port::new(upstream), sessions: RwLock::new(HashMap::new()), opening: Mutex::new(()) }
    }

    /// What `key` may see (in the gateway's process; `None` over gRPC or for an unknown key).
    pub fn rights(&self, key: Option<&str>) -> Option<bourse_port::KeyRights> {
        self.port.upstream().rights(key)
    }

    /// Whether the gateway of this process does not know `key` (never known, or
    /// removed from its key file); over gRPC this cannot be told without a call, and
    /// the answer is false.
    pub fn refused(&self, key: Option<&str>) -> bool {
        matches!(self.port.upstream(), Upstream::InProcess(_)) && self.rights(key).is_none()
    }

    /// Where requests go, for the health page.
    pub fn endpoints(&self) -> Vec<String> {
        self.port.upstream().describe()
    }

    /// The session of `key`, opening its query client on first use. A key the
    /// gateway does not know is refused here (401), and not remembered. In the
    /// gateway's process the key is checked again on every request (a lookup in the
    /// gateway's key store), so a key removed from its file is refused at once, also
    /// by routes this server answers from its own memory (trades, history), and its
    /// session is forgotten.
    pub async fn session(&self, key: Option<String>) -> Result<Arc<Session>, ApiError> {
        if self.refused(key.as_deref()) {
            self.sessions.write().expect("sessions lock").remove(&key);
            return Err(ApiError::Unauthenticated("unknown or revoked API key".into()));
        }
        if let Some(session) = self.sessions.read().expect("sessions lock").get(&key) {
            return Ok(Arc::clone(session));
        }
        let _one_at_a_time = self.opening.lock().await;
        if let Some(session) = self.sessions.read().expect("sessions lock").get(&key) {
            return Ok(Arc::clone(session));
        }
        let api_key = key.clone().map(ApiKey);
        let mut query = self.port.query(api_key.clone()).await?;
        // Proves the key: the gateway answers UNAUTHENTICATED for one it does not know.
        let assets = query.assets().await?;
        self.port.catalog().learn_assets(assets.assets);
        let orders = KeySession::new(self.port.upstream().clone(), api_key);
        let (events, _) = broadcast::channel(EVENTS_BUFFER);
        let mut order_events = orders.subscribe();
        let sender = events.clone();
        tokio::spawn(async move {
            loop {
                match order_events.recv().await {
                    Ok(event) => {
                        let _ = sender.send(order_event_from(event));
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        });
        let session = Arc::new(Session { orders, query, events });
        self.sessions.write().expect("sessions lock").insert(key, Arc::clone(&session));
        Ok(session)
    }

    /// The symbol named `name` (or given as an id).
    pub async fn symbol(&self, session: &Session, name: &str) -> Result<proto::SymbolInfo, ApiError> {
        let found = self.port.catalog().symbol(&session.query, name).await?;
        found.ok_or(ApiError::Rejected(Reject::SymbolUnknown))
    }

    /// The asset named `name` (or given as an id).
    pub async fn asset(&self, session: &Session, name: &str) -> Result<proto::AssetInfo, ApiError> {
        let found = self.port.catalog().asset(&session.query, name).await?;
        found.ok_or(ApiError::Rejected(Reject::AssetUnknown))
    }

    /// The name of asset `id`, as far as the catalog knows ("" when it does not).
    pub fn asset_name(&self, id: u32) -> String {
        self.port.catalog().asset_name(id)
    }

    /// Remembers the newest lists read upstream.
    pub fn learn(&self, assets: Option<Vec<proto::AssetInfo>>, symbols: Option<Vec<proto::SymbolInfo>>) {
        if let Some(assets) = assets {
            self.port.catalog().learn_assets(assets);
        }
        if let Some(symbols) = symbols {
            self.port.catalog().learn_symbols(symbols);
        }
    }
}

impl Session {
    /// A query client of this key (clones share one connection, so queries of one key
    /// do not wait for one another).
    pub fn query(&self) -> QueryClient {
        self.query.clone()
    }

    /// The events of this key's orders (accepted here, filled, cancelled), from now on.
    pub fn subscribe_events(&self) -> broadcast::Receiver<WsOrderEvent> {
        self.events.subscribe()
    }

    /// Tells this key's WebSocket subscribers about one of its orders.
    pub fn publish(&self, event: WsOrderEvent) {
        // No subscriber is not an error: the events are simply not wanted now.
        let _ = self.events.send(event);
    }

    /// Sends one command and waits until it is committed and applied. An engine
    /// rejection is an error that changed nothing.
    pub async fn submit(&self, body: CommandBody) -> Result<Accepted, ApiError> {
        let reply = self.orders.submit(body).await?;
        match reply.outcome {
            Outcome::Ok { id } => Ok(Accepted { id, log_index: reply.log_index, duplicate: reply.duplicate }),
            Outcome::Rejected(reject) => Err(ApiError::Rejected(reject)),
        }
    }
}

/// A port order event as the WebSocket's.
fn order_event_from(event: OrderEvent) -> WsOrderEvent {
    match event {
        OrderEvent::Fill {
            order,
            account,
            symbol,
            side,
            px,
            qty,
            fee,
            maker,
            counter_order,
            log_index,
            trade_seq,
            ts,
        } => WsOrderEvent::Fill {
            order,
            account,
            symbol,
            side: match side {
                bourse_engine::Side::Buy => crate::model::Side::Buy,
                bourse_engine::Side::Sell => crate::model::Side::Sell,
            },
            px,
            qty,
            fee,
            maker,
            counter_order,
            log_index,
            trade_seq,
            ts,
        },
        OrderEvent::Cancelled { order, account, symbol, qty_cancelled, reason, log_index, ts } => {
            WsOrderEvent::Cancelled {
                order,
                account,
                symbol,
                qty_cancelled,
                reason: reason.name().to_owned(),
                log_index,
                ts,
            }
        }
    }
}
