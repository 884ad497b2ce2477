//! Market data: MarketDataRequest (35=V) to the gateway's `MarketData.Subscribe`
//! stream with the session's key, answered with MarketDataSnapshotFullRefresh (35=W)
//! per symbol and then MarketDataIncrementalRefresh (35=X).
//!
//! - SubscriptionRequestType 0 (snapshot): one W per symbol from `MarketData.GetL2`.
//! - 1 (snapshot + updates): the gateway's L2 channel (a snapshot per symbol, then an
//!   update per changed level with the absolute quantity) and, when MDEntryType 2 is
//!   asked for, its trades channel. A level seen for the first time is MDUpdateAction
//!   0 (new), a known one 1 (change), a quantity of 0 is 2 (delete). Updates are
//!   released by the gateway's hold-and-release like every other subscriber's.
//! - 2 (unsubscribe) ends the subscription with that MDReqID.
//!
//! Market data messages are numbered and counted like any message but not kept for
//! resending: a ResendRequest gap-fills them (stale prices are worse than none), and a
//! client that reconnects subscribes again. Subscriptions end with their connection.
//! MarketDepth applies to snapshots; 0 is the full book. Problems with a request are
//! answered with MarketDataRequestReject (35=Y) and a reason.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use bourse_protocol::proto;

use crate::codec::{FieldError, Message};
use crate::session::{SessionCore, Upstream};
use crate::tags::{self, msg};

/// The market data subscriptions of one connection, by MDReqID.
pub(crate) struct Subscriptions {
    core: Arc<SessionCore>,
    upstream: Arc<Upstream>,
    running: HashMap<String, tokio::task::JoinHandle<()>>,
}

/// What a request asked for, checked.
struct Request {
    id: String,
    kind: u8,
    depth: u32,
    books: bool,
    trades: bool,
    symbols: Vec<proto::SymbolInfo>,
}

impl Subscriptions {
    pub fn new(core: Arc<SessionCore>, upstream: Arc<Upstream>) -> Subscriptions {
        Subscriptions { core, upstream, running: HashMap::new() }
    }

    pub fn stop_all(&mut self) {
        for (_, task) in self.running.drain() {
            task.abort();
        }
    }

    pub async fn on_request(&mut self, message: &Message) -> Result<(), FieldError> {
        self.running.retain(|_, task| !task.is_finished());
        let id = message.require(tags::MD_REQ_ID)?.to_owned();
        let kind = message.require(tags::SUBSCRIPTION_REQUEST_TYPE)?;
        if kind == "2" {
            if let Some(task) = self.running.remove(&id) {
                task.abort();
            }
            return Ok(());
        }
        let request = match self.check(message, &id, kind).await? {
            Ok(request) => request,
            Err((reason, text)) => {
                self.core.send(request_reject(&id, reason, &text));
                return Ok(());
            }
        };
        if request.kind == b'0' {
            let mut query = self.upstream.query.clone();
            for symbol in &request.symbols {
                match query.l2(bourse_engine::SymbolId(symbol.id), request.depth).await {
                    Ok(l2) => self.core.send(snapshot(&request.id, name(symbol), &l2, request.depth)),
                    Err(error) => self.core.send(request_reject(&request.id, '0', &format!("no book: {error}"))),
                }
            }
            return Ok(());
        }
        let mut channels = Vec::new();
        if request.books {
            channels.push(proto::Channel::L2);
        }
        if request.trades {
            channels.push(proto::Channel::Trades);
        }
        let ids: Vec<_> = request.symbols.iter().map(|s| bourse_engine::SymbolId(s.id)).collect();
        let stream = self.upstream.query.clone().subscribe_channels(&ids, &channels).await;
        let stream = match stream {
            Ok(stream) => stream,
            Err(error) => {
                self.core.send(request_reject(&request.id, '0', &format!("market data unavailable: {error}")));
                return Ok(());
            }
        };
        let task = tokio::spawn(follow(Arc::clone(&self.core), request, stream));
        if let Some(old) = self.running.insert(id, task) {
            old.abort();
        }
        Ok(())
    }

    /// The request checked; the inner error is a MarketDataRequestReject (reason, text).
    async fn check(
        &self,
        message: &Message,
        id: &str,
        kind: &str,
    ) -> Result<Result<Request, (char, String)>, FieldError> {
        let wanted = match check_fields(message, id, kind, self.running.contains_key(id))? {
            Ok(wanted) => wanted,
            Err(reject) => return Ok(Err(reject)),
        };
        let mut symbols = Vec::new();
        for name in &wanted.names {
            match self.upstream.symbol(name).await {
                Some(symbol) => symbols.push(symbol),
                None => return Ok(Err(('0', format!("unknown symbol {name}")))),
            }
        }
        let Wanted { depth, books, trades, .. } = wanted;
        Ok(Ok(Request { id: id.to_owned(), kind: kind.as_bytes()[0], depth, books, trades, symbols }))
    }
}

/// What a MarketDataRequest asks for, checked but for its symbols, which are names.
#[derive(Debug)]
pub(crate) struct Wanted {
    pub depth: u32,
    pub books: bool,
    pub trades: bool,
    /// The symbols' names, in the request's order.
    pub names: Vec<String>,
}

/// The checks of a MarketDataRequest (MDReqID `id`, SubscriptionRequestType `kind`, not
/// 2) that need no upstream; `subscribed`: `id` is already subscribed. The outer error
/// is a session-level Reject, the inner one a MarketDataRequestReject (reason, text).
pub(crate) fn check_fields(
    message: &Message,
    id: &str,
    kind: &str,
    subscribed: bool,
) -> Result<Result<Wanted, (char, String)>, FieldError> {
    let depth = message.require_u64(tags::MARKET_DEPTH)?;
    let entry_types = message.group(tags::NO_MD_ENTRY_TYPES, tags::MD_ENTRY_TYPE, &[])?;
    let related = message.group(tags::NO_RELATED_SYM, tags::SYMBOL, &[])?;
    if !matches!(kind, "0" | "1") {
        return Ok(Err(('4', format!("SubscriptionRequestType {kind} is not supported: 0, 1 or 2"))));
    }
    if kind == "1" && subscribed {
        return Ok(Err(('1', format!("MDReqID {id} is already subscribed"))));
    }
    if let Some(update_type) = message.get_str(tags::MD_UPDATE_TYPE) {
        if update_type != "1" {
            return Ok(Err(('5', "MDUpdateType must be 1 (incremental refresh)".into())));
        }
    }
    let (mut books, mut trades) = (false, false);
    for entry in &entry_types {
        match entry[0].1 {
            b"0" | b"1" => books = true,
            b"2" if kind == "1" => trades = true,
            other => {
                let other = String::from_utf8_lossy(other);
                return Ok(Err((
                    '8',
                    format!("MDEntryType {other} is not supported: 0 bid, 1 offer, 2 trade (with updates)"),
                )));
            }
        }
    }
    if entry_types.is_empty() || related.is_empty() {
        return Ok(Err(('0', "name at least one MDEntryType and one symbol".into())));
    }
    let names = related.iter().map(|entry| String::from_utf8_lossy(entry[0].1).into_owned()).collect();
    let depth = u32::try_from(depth).unwrap_or(u32::MAX);
    Ok(Ok(Wanted { depth, books, trades, names }))
}

fn name(symbol: &proto::SymbolInfo) -> &str {
    symbol.spec.as_ref().map(|spec| spec.name.as_str()).unwrap_or("")
}

/// Forwards one subscription's stream until it ends or the task is aborted.
async fn follow(core: Arc<SessionCore>, request: Request, mut stream: bourse_client::MarketDataStream) {
    let names: HashMap<u32, String> = request.symbols.iter().map(|s| (s.id, name(s).to_owned())).collect();
    let mut levels: HashMap<u32, BTreeSet<(i32, i64)>> = HashMap::new();
    loop {
        let update = match stream.next_update().await {
            Ok(Some(update)) => update,
            Ok(None) => break,
            Err(error) => {
                tracing::warn!(session = %core.their_id, %error, "FIX market data stream ended");
                break;
            }
        };
        let message = match update.update {
            Some(proto::market_data_update::Update::L2Snapshot(l2)) => {
                let known = levels.entry(l2.symbol).or_default();
                known.clear();
                known.extend(l2.bids.iter().map(|l| (1, l.px)).chain(l2.asks.iter().map(|l| (2, l.px))));
                let Some(symbol) = names.get(&l2.symbol) else { continue };
                snapshot(&request.id, symbol, &l2, request.depth)
            }
            Some(proto::market_data_update::Update::L2Update(level)) => {
                let Some(symbol) = names.get(&level.symbol) else { continue };
                let entry_type = match bourse_protocol::convert::side_from_proto(level.side, "L2Update.side") {
                    Ok(bourse_engine::Side::Buy) => "0",
                    Ok(bourse_engine::Side::Sell) => "1",
                    Err(error) => {
                        tracing::error!(%error, "a book update this version cannot read: not sent");
                        continue;
                    }
                };
                let known = levels.entry(level.symbol).or_default();
                let key = (level.side, level.px);
                let action = if level.qty == 0 {
                    known.remove(&key);
                    "2"
                } else if known.insert(key) {
                    "0"
                } else {
                    "1"
                };
                incremental(&request.id, action, entry_type, symbol, level.px, level.qty)
            }
            Some(proto::market_data_update::Update::Trade(trade)) => {
                let Some(symbol) = names.get(&trade.symbol) else { continue };
                incremental(&request.id, "0", "2", symbol, trade.px, trade.qty)
            }
            _ => continue,
        };
        core.send(message);
    }
}

/// A MarketDataSnapshotFullRefresh of one symbol: bids best first, then offers.
fn snapshot(id: &str, symbol: &str, l2: &proto::L2Snapshot, depth: u32) -> Message {
    let depth = if depth == 0 { usize::MAX } else { depth as usize };
    let bids = l2.bids.iter().take(depth).map(|l| ("0", l));
    let asks = l2.asks.iter().take(depth).map(|l| ("1", l));
    let entries: Vec<_> = bids.chain(asks).collect();
    let mut message = Message::new(msg::MARKET_DATA_SNAPSHOT);
    message.push(tags::MD_REQ_ID, id).push(tags::SYMBOL, symbol).push_display(tags::NO_MD_ENTRIES, entries.len());
    for (entry_type, level) in entries {
        message
            .push(tags::MD_ENTRY_TYPE, entry_type)
            .push_display(tags::MD_ENTRY_PX, level.px)
            .push_display(tags::MD_ENTRY_SIZE, level.qty);
    }
    message
}

/// A MarketDataIncrementalRefresh with one entry.
fn incremental(id: &str, action: &str, entry_type: &str, symbol: &str, px: i64, qty: i64) -> Message {
    let mut message = Message::new(msg::MARKET_DATA_INCREMENTAL);
    message
        .push(tags::MD_REQ_ID, id)
        .push(tags::NO_MD_ENTRIES, "1")
        .push(tags::MD_UPDATE_ACTION, action)
        .push(tags::MD_ENTRY_TYPE, entry_type)
        .push(tags::SYMBOL, symbol)
        .push_display(tags::MD_ENTRY_PX, px);
    if action != "2" {
        message.push_display(tags::MD_ENTRY_SIZE, qty);
    }
    message
}

pub(crate) fn request_reject(id: &str, reason: char, text: &str) -> Message {
    let mut message = Message::new(msg::MARKET_DATA_REQUEST_REJECT);
    message.push(tags::MD_REQ_ID, id).push(tags::MD_REQ_REJ_REASON, reason.to_string()).push(tags::TEXT, text);
    message
}
