//! The fuzzing harnesses, shared by the cargo-fuzz targets (`crates/fix/fuzz`,
//! nightly, `make fuzz`) and the corpus and property tests that run on stable in
//! `make test` (`tests/decoder.rs`, `tests/fuzz_corpus.rs`): [`decode_stream`] (target
//! `decode`), [`session`] (target `session`) and [`store_file`] (target `store`).

use crate::codec::{self, Message};

/// Feeds `data` to the framer and decoder as a connection's reader would (garbled
/// bytes skipped, every whole frame decoded) and checks that every message decoded
/// without a problem re-encodes to bytes that decode to the same message. Panics only
/// on a broken property; a panic anywhere else is a decoder bug.
pub fn decode_stream(data: &[u8]) -> usize {
    let mut buf = data;
    let mut messages = 0;
    while !buf.is_empty() {
        match codec::frame(buf) {
            Ok(Some(len)) => {
                let (message, error) = Message::decode(&buf[..len]);
                if error.is_none() {
                    round_trip(&message);
                }
                let _ = message.group(268, 269, &[270, 271, 279, 55]);
                let _ = message.get_u64(34);
                messages += 1;
                buf = &buf[len..];
            }
            Ok(None) => break,
            Err(_) => buf = &buf[codec::resync(buf)..],
        }
    }
    messages
}

/// `message` encoded and decoded again is `message`.
pub fn round_trip(message: &Message) {
    let bytes = message.encode();
    assert_eq!(codec::frame(&bytes), Ok(Some(bytes.len())), "an encoded message frames whole");
    let (again, error) = Message::decode(&bytes);
    assert_eq!(error, None, "an encoded message decodes cleanly");
    assert_eq!(&again, message, "decode(encode(m)) = m");
}

// ----------------------------------------------------------------------------------------
// The session layer and the order mapping (`session` target)
// ----------------------------------------------------------------------------------------

/// This side's CompID in [`session`]'s sessions.
const OUR_ID: &str = "BOURSE";

/// The session layer and the order and market data mappings on arbitrary bytes, with
/// an exchange simulated in memory instead of the network: `data` is a stream of
/// framed messages when it starts with `8=FIX.4.4␁`, else lines (LF-separated) of
/// message bodies (`35=…␁…␁`) framed here with their BodyLength and CheckSum, so that
/// mutated bodies reach the session. The first message goes through the Logon checks,
/// the others through the inbound sequence rules, and in-sequence NewOrderSingle,
/// OrderCancelRequest, OrderCancelReplaceRequest, MarketDataRequest and
/// RequestForPositions through the same functions the connection's reader calls before
/// any upstream call (a request for positions is answered with made-up positions); every command they
/// produce must survive the gRPC wire form, and every message this side would send must
/// re-encode to itself. Panics only on a broken property; a panic anywhere else is a
/// bug. Returns how many messages were processed.
pub fn session(data: &[u8]) -> usize {
    let mut model = SessionModel::new();
    let mut processed = 0;
    for (message, error) in messages(data) {
        processed += 1;
        if !model.on_message(&message, error) {
            break;
        }
    }
    processed
}

/// The messages of [`session`]'s input (see there), decoded.
fn messages(data: &[u8]) -> Vec<(Message, Option<crate::codec::FieldError>)> {
    let mut out = Vec::new();
    if data.starts_with(b"8=FIX.4.4\x01") {
        let mut buf = data;
        while !buf.is_empty() {
            match codec::frame(buf) {
                Ok(Some(len)) => {
                    out.push(Message::decode(&buf[..len]));
                    buf = &buf[len..];
                }
                Ok(None) => break,
                Err(_) => buf = &buf[codec::resync(buf)..],
            }
        }
        return out;
    }
    for body in data.split(|&b| b == b'\n').filter(|body| !body.is_empty()) {
        let mut framed =
            format!("8=FIX.4.4\x019={}\x01", body.len() + usize::from(body.last() != Some(&codec::SOH))).into_bytes();
        framed.extend_from_slice(body);
        if body.last() != Some(&codec::SOH) {
            framed.push(codec::SOH);
        }
        let sum = codec::checksum(&framed);
        framed.extend_from_slice(format!("10={sum:03}\x01").as_bytes());
        // A body too long for the framer is a garbled frame, skipped as the reader would.
        if let Ok(Some(len)) = codec::frame(&framed) {
            assert_eq!(len, framed.len(), "a frame built here is whole");
            out.push(Message::decode(&framed));
        }
    }
    out
}

/// One session as the connection's reader sees it, with the exchange simulated.
struct SessionModel {
    /// Their SenderCompID, once logged on.
    their_id: Option<String>,
    /// The MsgSeqNum expected next from them.
    expected: u64,
    /// The seq a ResendRequest we sent must reach.
    resend_until: Option<u64>,
    /// The last seq this side sent.
    last_sent: u64,
    orders: crate::orders::Orders,
    /// MarketDataRequest subscriptions by MDReqID.
    subscribed: std::collections::HashSet<String>,
    /// The symbols the exchange has.
    catalog: bourse_port::Catalog,
    /// The upstream session's next command seq and the exchange's next order id.
    command_seq: u64,
    order_ids: u64,
}

impl SessionModel {
    fn new() -> SessionModel {
        let catalog = bourse_port::Catalog::default();
        let symbol = |id: u32, name: &str| bourse_protocol::proto::SymbolInfo {
            id,
            spec: Some(bourse_protocol::proto::SymbolSpec { name: name.into(), ..Default::default() }),
        };
        let mut future = symbol(3, "FUT/USD");
        if let Some(spec) = future.spec.as_mut() {
            spec.margin = Some(bourse_protocol::proto::MarginSpec { multiplier: 10, ..Default::default() });
        }
        catalog.learn_symbols(vec![symbol(1, "ACME/USD"), symbol(2, "BETA/USD"), future]);
        SessionModel {
            their_id: None,
            expected: 1,
            resend_until: None,
            last_sent: 0,
            orders: crate::orders::Orders::default(),
            subscribed: std::collections::HashSet::new(),
            catalog,
            command_seq: 0,
            order_ids: 1_000,
        }
    }

    /// A message this side sends: it must be one a counterparty can read back.
    fn send(&mut self, message: Message) {
        round_trip(&message);
        self.last_sent += 1;
    }

    /// Handles one message; false when the connection would end.
    fn on_message(&mut self, message: &Message, error: Option<crate::codec::FieldError>) -> bool {
        use crate::session::{self, Inbound};
        use crate::tags::msg;
        let Some(their_id) = self.their_id.clone() else { return self.logon(message, error) };
        let msg_type = message.msg_type().to_owned();
        match session::inbound(message, error, &their_id, OUR_ID, self.expected) {
            Inbound::Close(_) => false,
            Inbound::WrongCompId { seq } => {
                let error = crate::codec::FieldError::new(
                    crate::codec::RejectReason::CompIdProblem,
                    Some(crate::tags::SENDER_COMP_ID),
                    "CompID problem",
                );
                self.send(session::reject_message(seq, &msg_type, &error));
                false
            }
            Inbound::Reset { seq } => {
                match session::reset_target(message, self.expected) {
                    Ok(new) => {
                        assert!(new >= self.expected, "a reset never moves the expected seq back");
                        self.expected = new;
                    }
                    Err(error) => self.send(session::reject_message(seq, msg::SEQUENCE_RESET, &error)),
                }
                true
            }
            Inbound::TooHigh { seq } => {
                assert!(seq > self.expected);
                if msg_type == msg::RESEND_REQUEST {
                    self.resend(message);
                }
                if msg_type == msg::LOGOUT {
                    return false;
                }
                if self.resend_until.is_none() {
                    self.resend_until = Some(seq);
                }
                true
            }
            Inbound::Duplicate => true,
            Inbound::Malformed { seq, error } => {
                assert_eq!(seq, self.expected);
                self.reached(seq);
                self.send(session::reject_message(seq, &msg_type, &error));
                self.expected = seq + 1;
                true
            }
            Inbound::InSequence { seq } => {
                assert_eq!(seq, self.expected);
                self.reached(seq);
                let (open, next) = self.dispatch(seq, &msg_type, message);
                assert!(next > seq, "the expected seq moves forward");
                self.expected = next;
                open
            }
        }
    }

    /// The first message: the Logon checks, then `attach`'s sequence rules.
    fn logon(&mut self, message: &Message, error: Option<crate::codec::FieldError>) -> bool {
        use crate::session::{check_logon, logout_unknown, LogonRefusal};
        match check_logon(message, error.as_ref(), OUR_ID) {
            Ok(fields) => {
                assert!(!fields.their_id.is_empty() && fields.our_id == OUR_ID);
                assert!((1..=3_600).contains(&fields.heartbeat.as_secs()));
                if (fields.reset && fields.seq != 1) || fields.seq < self.expected {
                    return false;
                }
                if fields.seq == self.expected {
                    self.expected = fields.seq + 1;
                } else {
                    self.resend_until = Some(fields.seq);
                }
                self.their_id = Some(fields.their_id.to_owned());
                true
            }
            Err(LogonRefusal::Close) => false,
            Err(LogonRefusal::Logout { their_id, our_id, text }) => {
                let bytes = logout_unknown(their_id, our_id, text);
                assert_eq!(codec::frame(&bytes), Ok(Some(bytes.len())), "a refusal frames whole");
                assert_eq!(Message::decode(&bytes).1, None, "a refusal decodes cleanly");
                false
            }
        }
    }

    fn reached(&mut self, seq: u64) {
        if self.resend_until.is_some_and(|until| seq >= until) {
            self.resend_until = None;
        }
    }

    fn resend(&mut self, message: &Message) {
        let (begin, end) = crate::session::resend_range(message);
        if let Some((begin, end)) = crate::session::resend_bounds(begin, end, self.last_sent) {
            assert!(1 <= begin && begin <= end && end <= self.last_sent, "a resend replays only what was sent");
        }
    }

    /// An in-sequence message: whether the connection stays open, and the next seq.
    fn dispatch(&mut self, seq: u64, msg_type: &str, message: &Message) -> (bool, u64) {
        use crate::session;
        use crate::tags::{self, msg};
        let next = seq + 1;
        match msg_type {
            msg::HEARTBEAT | msg::REJECT => {}
            msg::TEST_REQUEST => {
                let mut heartbeat = Message::new(msg::HEARTBEAT);
                if let Some(id) = message.get(tags::TEST_REQ_ID) {
                    heartbeat.push(tags::TEST_REQ_ID, id);
                }
                self.send(heartbeat);
            }
            msg::RESEND_REQUEST => self.resend(message),
            msg::SEQUENCE_RESET => match session::gap_fill_target(message, seq) {
                Ok(new) => return (true, new),
                Err(error) => self.send(session::reject_message(seq, msg_type, &error)),
            },
            msg::LOGOUT | msg::LOGON => return (false, next),
            msg::NEW_ORDER_SINGLE => {
                if let Err(error) = self.new_order(message) {
                    self.send(session::reject_message(seq, msg_type, &error));
                }
            }
            msg::ORDER_CANCEL_REQUEST | msg::ORDER_CANCEL_REPLACE_REQUEST => {
                if let Err(error) = self.cancel_or_replace(message, msg_type == msg::ORDER_CANCEL_REPLACE_REQUEST) {
                    self.send(session::reject_message(seq, msg_type, &error));
                }
            }
            msg::MARKET_DATA_REQUEST => {
                if let Err(error) = self.market_data(message) {
                    self.send(session::reject_message(seq, msg_type, &error));
                }
            }
            msg::REQUEST_FOR_POSITIONS => {
                if let Err(error) = self.positions(message) {
                    self.send(session::reject_message(seq, msg_type, &error));
                }
            }
            _ => self.send(session::unsupported(seq, msg_type)),
        }
        (true, next)
    }

    /// The symbol called `name`, as `Upstream::symbol` finds it (a number is no name).
    fn symbol(&self, name: &str) -> Option<bourse_engine::SymbolId> {
        if name.parse::<u32>().is_ok() {
            return None;
        }
        self.catalog.find_symbol(name).map(|symbol| bourse_engine::SymbolId(symbol.id))
    }

    /// Whether `symbol` is a margin symbol.
    fn margin(&self, symbol: bourse_engine::SymbolId) -> bool {
        let found = self.catalog.find_symbol(&symbol.0.to_string()).filter(|s| s.id == symbol.0);
        found.and_then(|s| s.spec).is_some_and(|spec| spec.margin.is_some())
    }

    /// `orders::new_order` without the network.
    fn new_order(&mut self, message: &Message) -> Result<(), crate::codec::FieldError> {
        use crate::orders::{check_budget, new_order_draft, order_request, Pending, Refusal};
        let draft = new_order_draft(message)?;
        if let Some(answer) = self.orders.duplicate(&draft.cl_ord_id) {
            if let Some(answer) = answer {
                self.send(answer);
            }
            return Ok(());
        }
        let request = order_request(message).and_then(|mut request| {
            let name = message.get_str(crate::tags::SYMBOL).unwrap_or("");
            request.symbol = self.symbol(name).ok_or_else(|| Refusal(1, format!("unknown symbol {name}")))?;
            check_budget(&request, self.margin(request.symbol))?;
            Ok(request)
        });
        match request {
            Ok(request) => {
                let body = bourse_engine::command::CommandBody::Place(request);
                self.submit(body, Pending::New(draft));
            }
            Err(Refusal(reason, text)) => {
                let report = self.orders.new_rejected(&draft, reason, &text);
                self.orders.apply_report(&report);
                self.send(report);
            }
        }
        Ok(())
    }

    /// `orders::cancel_or_replace` without the network.
    fn cancel_or_replace(&mut self, message: &Message, replace: bool) -> Result<(), crate::codec::FieldError> {
        use crate::orders::{cancel_ids, order_account, replacement, Pending, Refusal};
        use bourse_engine::command::CommandBody;
        let (cl_ord_id, orig) = cancel_ids(message, replace)?;
        let response_to = if replace { "2" } else { "1" };
        let Some(order) = self.orders.target(&orig, message) else {
            let reject = self.orders.cancel_reject(None, &cl_ord_id, &orig, response_to, 1, "unknown order");
            self.send(reject);
            return Ok(());
        };
        let Some(symbol) = self.symbol(&order.symbol) else {
            let text = "the order's symbol is no longer known";
            let reject = self.orders.cancel_reject(Some(order.id), &cl_ord_id, &orig, response_to, 99, text);
            self.send(reject);
            return Ok(());
        };
        let (account, id) = (order_account(&order), bourse_engine::OrderId(order.id));
        if !replace {
            let body = CommandBody::Cancel { account, symbol, order: id };
            self.submit(body, Pending::Cancel { cl_ord_id, orig, order: order.id });
            return Ok(());
        }
        match replacement(message, &order, account, symbol, id) {
            Ok((body, qty, px)) => {
                match &body {
                    CommandBody::Move { px: new, .. } => assert_eq!(Some(new.0), px, "a move carries the new price"),
                    CommandBody::Reduce { qty_by, .. } => {
                        assert!(qty_by.0 > 0 && qty < order.qty, "a reduce takes something off");
                        assert!(qty > order.cum_qty, "a reduce leaves more than was filled");
                    }
                    other => panic!("a replace became {other:?}"),
                }
                self.submit(body, Pending::Replace { cl_ord_id, orig, order: order.id, qty, px });
            }
            Err(Refusal(_, text)) => {
                let reject = self.orders.cancel_reject(Some(order.id), &cl_ord_id, &orig, response_to, 99, &text);
                self.send(reject);
            }
        }
        Ok(())
    }

    /// Sends `body` upstream as `send_command` does and lets the simulated exchange
    /// answer: orders of symbol 2 cannot be sent (the session ended); a Place with a
    /// positive quantity and price (if it has one) is accepted and half of it fills at
    /// its price; cancels, moves and reduces are accepted.
    fn submit(&mut self, body: bourse_engine::command::CommandBody, pending: crate::orders::Pending) {
        use bourse_client::SessionEvent;
        use bourse_engine::command::{CommandBody, OrderKind};
        use bourse_engine::{Outcome, Reject};
        use bourse_protocol::proto;
        let wire = proto::client_command::Body::from(&body);
        assert_eq!(CommandBody::try_from(&wire).as_ref(), Ok(&body), "a command survives the wire form");
        let symbol = match &body {
            CommandBody::Place(request) => request.symbol,
            CommandBody::Cancel { symbol, .. }
            | CommandBody::Move { symbol, .. }
            | CommandBody::Reduce { symbol, .. } => *symbol,
            other => panic!("the FIX front end sent {other:?}"),
        };
        if symbol.0 == 2 {
            for message in self.orders.not_sent(pending, bourse_client::Error::Closed) {
                self.send(message);
            }
            return;
        }
        self.command_seq += 1;
        let seq = self.command_seq;
        self.orders.sent(seq, pending);
        let (outcome, fill, cancel) = match &body {
            CommandBody::Place(request) => {
                let px = match request.kind {
                    OrderKind::Limit { px } | OrderKind::StopLimit { px, .. } => Some(px.0),
                    OrderKind::Market { .. } | OrderKind::StopMarket { .. } => None,
                };
                if request.qty.0 <= 0 {
                    (Outcome::Rejected(Reject::QtyMustBePositive), None, None)
                } else if px.is_some_and(|px| px <= 0) {
                    (Outcome::Rejected(Reject::PxOutOfBounds), None, None)
                } else {
                    self.order_ids += 1;
                    let fill = (request.qty.0 >= 2).then(|| proto::FillReport {
                        order: self.order_ids,
                        px: px.unwrap_or(1),
                        qty: request.qty.0 / 2,
                        ..Default::default()
                    });
                    (Outcome::Ok { id: self.order_ids }, fill, None)
                }
            }
            CommandBody::Cancel { order, .. } => {
                let cancel = proto::CancelReport {
                    order: order.0,
                    qty_cancelled: 1,
                    reason: proto::CancelReason::Requested as i32,
                    ..Default::default()
                };
                (Outcome::Ok { id: 0 }, None, Some(cancel))
            }
            _ => (Outcome::Ok { id: 0 }, None, None),
        };
        let reply =
            bourse_client::Reply { seq, outcome, log_index: seq, duplicate: false, gateway_ts: 0, day_trading: None };
        let mut events = vec![SessionEvent::Reply(reply)];
        events.extend(fill.map(SessionEvent::Fill));
        events.extend(cancel.map(SessionEvent::Cancel));
        for event in events {
            for message in self.orders.on_event(event) {
                self.send(message);
            }
        }
    }

    /// `market::Subscriptions::on_request` without the network: the request's checks,
    /// its symbols found, the reject it gets.
    fn market_data(&mut self, message: &Message) -> Result<(), crate::codec::FieldError> {
        use crate::market::{check_fields, request_reject};
        use crate::tags;
        let id = message.require(tags::MD_REQ_ID)?.to_owned();
        let kind = message.require(tags::SUBSCRIPTION_REQUEST_TYPE)?;
        if kind == "2" {
            self.subscribed.remove(&id);
            return Ok(());
        }
        let reject = match check_fields(message, &id, kind, self.subscribed.contains(&id))? {
            Ok(wanted) => {
                assert!(!wanted.names.is_empty() && (wanted.books || wanted.trades));
                match wanted.names.iter().find(|name| self.symbol(name).is_none()) {
                    Some(name) => Some(('0', format!("unknown symbol {name}"))),
                    None => {
                        if kind == "1" {
                            self.subscribed.insert(id.clone());
                        }
                        None
                    }
                }
            }
            Err(reject) => Some(reject),
        };
        if let Some((reason, text)) = reject {
            self.send(request_reject(&id, reason, &text));
        }
        Ok(())
    }

    /// `positions::on_request` without the network: the request's checks, its symbol
    /// found, and the answer with a position in every margin symbol the filter lets
    /// through, as the exchange could report them (extreme figures included).
    fn positions(&mut self, message: &Message) -> Result<(), crate::codec::FieldError> {
        use crate::positions::{answer, check_request, Denial, Found, NONE_FOUND};
        use bourse_protocol::proto;
        let (request, checked) = check_request(message)?;
        let found = checked.and_then(|account| {
            assert!(request.id.is_some() && request.date.is_some(), "a request served names its id and date");
            let only = match &request.symbol {
                Some(name) => {
                    let symbol = self.symbol(name).ok_or_else(|| Denial { result: NONE_FOUND, text: name.clone() })?;
                    Some(symbol.0)
                }
                None => None,
            };
            let futures = [(3, 7, 1_260, Some(110)), (3, i64::MIN, i64::MIN, None), (3, 0, 0, Some(i64::MAX))];
            let found: Vec<Found> = futures
                .iter()
                .filter(|(id, ..)| only.is_none_or(|only| only == *id))
                .map(|&(id, size, cost, mark)| Found {
                    symbol: self.catalog.find_symbol("FUT/USD").expect("the future"),
                    position: proto::PositionInfo {
                        symbol: id,
                        size,
                        cost,
                        realized: i64::from(account.0),
                        mark,
                        unrealized: i64::MIN,
                        liquidation_px: mark,
                        ..Default::default()
                    },
                })
                .collect();
            if found.is_empty() {
                return Err(Denial { result: NONE_FOUND, text: "none".into() });
            }
            Ok(found)
        });
        let messages = answer(&request, found);
        let result = messages[0].get_str(crate::tags::POS_REQ_RESULT);
        assert!(matches!(result, Some("0" | "1" | "2")), "{result:?}");
        assert_eq!(result == Some("0"), messages.len() > 1, "positions follow a valid AO only");
        for message in messages {
            self.send(message);
        }
        Ok(())
    }
}

// ----------------------------------------------------------------------------------------
// The session store (`store` target)
// ----------------------------------------------------------------------------------------

/// The session store reader on arbitrary file bytes, in `dir` (a scratch directory):
/// `data` as a session's store file, and again with every record's CRC made to match
/// (so that damage a checksum would not catch reaches the replay), is opened, read and
/// replayed into the session's orders, then appended to and opened again. Opening never
/// fails or panics on what the file holds; it keeps a prefix of the file, reads back no
/// more bytes than the file has, and appends continue after what it kept. `data` as the
/// session's owner file is read too. Panics only on a broken property.
pub fn store_file(dir: &std::path::Path, data: &[u8]) {
    use crate::store::{bind_owner, Store};
    std::fs::create_dir_all(dir).expect("the scratch directory");
    let path = dir.join("C-S.fixlog");
    for bytes in [data.to_vec(), resealed(data)] {
        std::fs::write(&path, &bytes).expect("the store file is written");
        let mut store = Store::open(dir, "C", "S").expect("a store opens whatever its file holds");
        let kept = std::fs::read(&path).expect("the store file is read");
        assert!(bytes.starts_with(&kept), "opening keeps a prefix of the file");
        let (next_sender, next_target) = (store.next_sender(), store.next_target());
        assert!(next_sender >= 1, "seqs start at 1");
        let sent = store.sent_between(1, u64::MAX).expect("what the index holds is in the file");
        let total: usize = sent.iter().map(|(_, bytes)| bytes.len()).sum();
        assert!(total <= kept.len(), "no more is read back than the file has");
        assert!(sent.windows(2).all(|pair| pair[0].0 < pair[1].0), "sent messages are in seq order");
        assert!(sent.iter().all(|(seq, _)| *seq < next_sender), "sent messages are below the next seq");
        // What `SessionCore::open` does next, and the status a duplicate ClOrdID would get.
        let mut orders = crate::orders::Orders::rebuild(&store).expect("the orders are rebuilt");
        for (_, bytes) in &sent {
            let (message, _) = Message::decode(bytes);
            if let Some(cl_ord_id) = message.get_str(crate::tags::CL_ORD_ID) {
                let _ = orders.duplicate(cl_ord_id);
            }
        }
        // Appends continue after what was kept, and read back.
        store.record_sent(next_sender, Some(b"8=FIX.4.4\x01appended")).expect("an append");
        store.set_next_target(next_target.wrapping_add(1)).expect("an append");
        drop(store);
        let store = Store::open(dir, "C", "S").expect("the store opens again");
        assert_eq!(store.next_sender(), next_sender + 1, "the append was kept");
        assert_eq!(store.next_target(), next_target.wrapping_add(1), "the append was kept");
        let last = store.sent_between(next_sender, next_sender).expect("the append reads back");
        assert_eq!(last, vec![(next_sender, b"8=FIX.4.4\x01appended".to_vec())]);
    }
    std::fs::write(dir.join("C-S.owner"), data).expect("the owner file is written");
    let _ = bind_owner(dir, "C", "S", "key");
}

/// `data` with the CRC of each whole record made to match its bytes, up to the first
/// bytes that are not a whole record.
pub fn resealed(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut at = 0;
    while let Some(header) = out.get(at..at + 8) {
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let Some(body) = out.get(at + 8..at + 8 + len).filter(|body| !body.is_empty()) else { break };
        let crc = crc32c::crc32c(body);
        out[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        at += 8 + len;
    }
    out
}
