//! The WebSocket at `/v1/ws`: market data and the key's own order events.
//!
//! The client sends JSON requests ([`WsRequest`]): `subscribe` names channels (`l2`,
//! `trades`, `bbo`, `orders`) and symbols (names or ids; none means every symbol) and
//! replaces the previous subscription; `unsubscribe` ends it. Each subscribe opens a
//! fresh upstream market data stream, so it is also how a client that saw a gap
//! resynchronizes: the new stream starts with an `l2_snapshot` of each symbol.
//!
//! The server sends JSON messages ([`WsMessage`]), each with a field `seq`: 1, 2, 3, …
//! on this connection without gaps. L2 updates also carry `symbol_seq`, per symbol and
//! continuing from the snapshot's, so a client can check each book on its own. A client
//! that falls `ws_buffer` messages behind is disconnected (close code 1008) rather than
//! skipped silently; when the upstream stream breaks the server says so with an `error`
//! (`stream_reset`) and subscribes again, sending new snapshots.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bourse_engine::command::OrderRequest;
use bourse_protocol::proto;
use bourse_protocol::proto::market_data_update::Update;
use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use utoipa::ToSchema;

use crate::api::{side_from, Key};
use crate::error::ApiError;
use crate::model::{Accepted, Level, Side, Trade};
use crate::upstream::Session;
use crate::AppState;

/// A channel of the WebSocket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// `l2_snapshot` per symbol, then `l2_update`s.
    L2,
    Trades,
    Bbo,
    /// The key's own order events (orders placed through this server with this key).
    Orders,
}

/// What a client sends.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum WsRequest {
    /// Replaces the subscription.
    Subscribe {
        channels: Vec<Channel>,
        /// Names or ids; empty: every symbol.
        #[serde(default)]
        symbols: Vec<String>,
    },
    /// Ends the subscription.
    Unsubscribe,
}

/// One of the key's orders changed.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WsOrderEvent {
    /// Placed through this server and accepted (it may have traded already).
    Accepted { order: u64, account: u32, symbol: u32, side: Side, qty: i64, log_index: u64 },
    Fill {
        order: u64,
        account: u32,
        symbol: u32,
        side: Side,
        px: i64,
        qty: i64,
        fee: i64,
        maker: bool,
        counter_order: u64,
        log_index: u64,
        trade_seq: u32,
        ts: u64,
    },
    /// The order's open part left the book unfilled. `reason`: requested, unfilled,
    /// budget_exhausted, self_trade, reduced_to_zero, expired (a Day order still open
    /// when the trading day closed), or liquidation.
    Cancelled { order: u64, account: u32, symbol: u32, qty_cancelled: i64, reason: String, log_index: u64, ts: u64 },
}

/// What the server sends; every message also has `seq`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WsMessage {
    /// The subscription now in force (symbol ids).
    Subscribed {
        channels: Vec<Channel>,
        symbols: Vec<u32>,
    },
    /// A symbol's whole book: start over from it.
    L2Snapshot {
        symbol: u32,
        symbol_seq: u64,
        bids: Vec<Level>,
        asks: Vec<Level>,
        log_index: u64,
    },
    /// One level's new total quantity (0 removes it); `symbol_seq` is the previous + 1.
    L2Update {
        symbol: u32,
        symbol_seq: u64,
        side: Side,
        px: i64,
        qty: i64,
        log_index: u64,
    },
    Trade(Trade),
    Bbo {
        symbol: u32,
        bid_px: Option<i64>,
        bid_qty: i64,
        ask_px: Option<i64>,
        ask_qty: i64,
        log_index: u64,
        ts: u64,
    },
    Order(WsOrderEvent),
    /// The upstream stream is alive (about once a second when idle).
    Heartbeat {
        ts: u64,
    },
    Error {
        code: u32,
        name: String,
        message: String,
    },
}

/// `GET /v1/ws`: authenticates, then upgrades.
pub async fn upgrade(State(state): State<Arc<AppState>>, Key(key): Key, ws: WebSocketUpgrade) -> Response {
    match state.upstream.session(key.clone()).await {
        Ok(session) => ws.on_upgrade(move |socket| run(state, session, key, socket)),
        Err(error) => error.into_response(),
    }
}

/// Tells the key's WebSocket subscribers that an order placed here was accepted.
pub fn publish_accepted(session: &Session, request: &OrderRequest, accepted: &Accepted) {
    session.publish(WsOrderEvent::Accepted {
        order: accepted.id,
        account: request.account.0,
        symbol: request.symbol.0,
        side: match request.side {
            bourse_engine::Side::Buy => Side::Buy,
            bourse_engine::Side::Sell => Side::Sell,
        },
        qty: request.qty.0,
        log_index: accepted.log_index,
    });
}

/// The sending half shared by a connection's tasks: a full buffer closes the connection.
#[derive(Clone)]
struct Outbox {
    sender: mpsc::Sender<WsMessage>,
    too_slow: Arc<Notify>,
}

impl Outbox {
    /// False once the connection is over or was closed for being slow.
    fn send(&self, message: WsMessage) -> bool {
        match self.sender.try_send(message) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.too_slow.notify_one();
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

/// How often an open WebSocket checks that its key is still the gateway's.
const KEY_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

async fn run(state: Arc<AppState>, session: Arc<Session>, key: Option<String>, socket: WebSocket) {
    let (mut sink, mut incoming) = socket.split();
    let (sender, mut outgoing) = mpsc::channel::<WsMessage>(state.config.ws_buffer);
    let outbox = Outbox { sender, too_slow: Arc::new(Notify::new()) };
    let too_slow = Arc::clone(&outbox.too_slow);
    let writer = tokio::spawn(async move {
        let mut seq = 0u64;
        while let Some(message) = outgoing.recv().await {
            seq += 1;
            if sink.send(Message::Text(text_frame(&message, seq).into())).await.is_err() {
                return sink;
            }
        }
        sink
    });
    let mut subscription = Subscription::default();
    let mut stop = state.shutdown.clone();
    let mut key_check = tokio::time::interval(KEY_CHECK_EVERY);
    let close = loop {
        tokio::select! {
            _ = key_check.tick() => if state.upstream.refused(key.as_deref()) {
                break Some((1008, "this API key was revoked"));
            },
            request = incoming.next() => match request {
                Some(Ok(Message::Text(text))) => subscription.handle(&state, &session, &outbox, &text).await,
                Some(Ok(Message::Binary(_))) => {
                    outbox.send(error_message(&ApiError::invalid_body("requests are JSON text messages")));
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break None,
            },
            () = too_slow.notified() => break Some((1008, "too slow: the send buffer is full; reconnect and subscribe")),
            () = stopping(&mut stop) => break Some((1001, "server shutting down")),
        }
    };
    subscription.end();
    drop(outbox);
    if let Ok(mut sink) = writer.await {
        if let Some((code, reason)) = close {
            let frame = CloseFrame { code, reason: reason.into() };
            let _ = sink.send(Message::Close(Some(frame))).await;
        }
    }
}

/// Resolves once the server is shutting down.
async fn stopping(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopping| *stopping).await;
}

/// The tasks feeding one connection.
#[derive(Default)]
struct Subscription {
    market: Option<JoinHandle<()>>,
    orders: Option<JoinHandle<()>>,
}

impl Subscription {
    async fn handle(&mut self, state: &AppState, session: &Arc<Session>, outbox: &Outbox, text: &str) {
        let request = match parse_request(text) {
            Ok(request) => request,
            Err(error) => {
                outbox.send(error_message(&error));
                return;
            }
        };
        self.end();
        let WsRequest::Subscribe { channels, symbols } = request else {
            outbox.send(WsMessage::Subscribed { channels: Vec::new(), symbols: Vec::new() });
            return;
        };
        let mut ids = Vec::with_capacity(symbols.len());
        for name in &symbols {
            match state.upstream.symbol(session, name).await {
                Ok(info) => ids.push(info.id),
                Err(error) => {
                    outbox.send(error_message(&error));
                    return;
                }
            }
        }
        outbox.send(WsMessage::Subscribed { channels: channels.clone(), symbols: ids.clone() });
        if channels.contains(&Channel::Orders) {
            self.orders = Some(tokio::spawn(forward_orders(session.subscribe_events(), outbox.clone())));
        }
        let upstream = upstream_channels(&channels);
        if !upstream.is_empty() {
            self.market = Some(tokio::spawn(forward_market(Arc::clone(session), ids, upstream, outbox.clone())));
        }
    }

    fn end(&mut self) {
        for task in [self.market.take(), self.orders.take()].into_iter().flatten() {
            task.abort();
        }
    }
}

/// A client's text message as a request; what does not parse is answered with this error.
pub(crate) fn parse_request(text: &str) -> Result<WsRequest, ApiError> {
    serde_json::from_str::<WsRequest>(text).map_err(|error| ApiError::invalid_body(format!("not a request: {error}")))
}

/// The upstream market data channels of a subscription (`orders` is this server's own).
pub(crate) fn upstream_channels(channels: &[Channel]) -> Vec<proto::Channel> {
    channels
        .iter()
        .filter_map(|channel| match channel {
            Channel::L2 => Some(proto::Channel::L2),
            Channel::Trades => Some(proto::Channel::Trades),
            Channel::Bbo => Some(proto::Channel::Bbo),
            Channel::Orders => None,
        })
        .collect()
}

/// The text of the `seq`-th message to a client: the message's JSON with `seq` added.
pub(crate) fn text_frame(message: &WsMessage, seq: u64) -> String {
    let mut value = serde_json::to_value(message).expect("messages serialize");
    value["seq"] = serde_json::Value::from(seq);
    value.to_string()
}

async fn forward_orders(mut events: tokio::sync::broadcast::Receiver<WsOrderEvent>, outbox: Outbox) {
    loop {
        match events.recv().await {
            Ok(event) => {
                if !outbox.send(WsMessage::Order(event)) {
                    return;
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                let message = format!("{missed} order events were missed: read the orders to catch up");
                if !outbox.send(WsMessage::Error { code: 2007, name: "events_missed".into(), message }) {
                    return;
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Follows the upstream market data stream, subscribing again when it breaks.
async fn forward_market(session: Arc<Session>, symbols: Vec<u32>, channels: Vec<proto::Channel>, outbox: Outbox) {
    let ids: Vec<bourse_engine::SymbolId> = symbols.iter().map(|&id| bourse_engine::SymbolId(id)).collect();
    loop {
        let subscribed = session.query().subscribe_channels(&ids, &channels).await;
        let reason = match subscribed {
            Ok(mut stream) => loop {
                match stream.next_update().await {
                    Ok(Some(update)) => match market_message(update) {
                        Ok(Some(message)) => {
                            if !outbox.send(message) {
                                return;
                            }
                        }
                        Ok(None) => {}
                        Err(error) => break error.to_string(),
                    },
                    Ok(None) => break "the upstream market data stream ended".to_owned(),
                    Err(error) => break error.to_string(),
                }
            },
            Err(error) => error.to_string(),
        };
        let message = format!("{reason}; subscribing again (new snapshots follow)");
        if !outbox.send(WsMessage::Error { code: 2008, name: "stream_reset".into(), message }) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An update as the WebSocket's; one this version cannot read is an error.
fn market_message(update: proto::MarketDataUpdate) -> Result<Option<WsMessage>, crate::error::ApiError> {
    let level = |l: &proto::Level| Level { px: l.px, qty: l.qty };
    let Some(inner) = update.update else { return Ok(None) };
    Ok(Some(match inner {
        Update::L2Snapshot(s) => WsMessage::L2Snapshot {
            symbol: s.symbol,
            symbol_seq: s.symbol_seq,
            bids: s.bids.iter().map(level).collect(),
            asks: s.asks.iter().map(level).collect(),
            log_index: s.log_index,
        },
        Update::L2Update(u) => WsMessage::L2Update {
            symbol: u.symbol,
            symbol_seq: u.symbol_seq,
            side: side_from(u.side, "L2Update.side")?,
            px: u.px,
            qty: u.qty,
            log_index: u.log_index,
        },
        Update::Trade(trade) => WsMessage::Trade(crate::market::trade_from(update.ts, &trade)?),
        Update::Bbo(b) => WsMessage::Bbo {
            symbol: b.symbol,
            bid_px: b.bid_px,
            bid_qty: b.bid_qty,
            ask_px: b.ask_px,
            ask_qty: b.ask_qty,
            log_index: b.log_index,
            ts: update.ts,
        },
        Update::Heartbeat(_) => WsMessage::Heartbeat { ts: update.ts },
        Update::Order(_) | Update::Stats(_) => return Ok(None),
    }))
}

pub(crate) fn error_message(error: &ApiError) -> WsMessage {
    let body = error.body().error;
    WsMessage::Error { code: body.code, name: body.name, message: body.message }
}
