//! Orders: FIX application messages to engine commands, and the gateway's answers,
//! fills and cancellations to ExecutionReports (35=8) and OrderCancelRejects (35=9).
//!
//! The state of each order (ClOrdID, quantities, average price) is derived from the
//! ExecutionReports this session sent: [`Orders::apply_report`] is the only thing that
//! changes it, both live and when [`Orders::rebuild`] replays the store after a
//! restart, so what the client was told and what the session remembers cannot differ.
//!
//! Commands go out with [`bourse_client::Permit::send`] under the session lock and
//! their answers come back on the client's one event stream, in order with the fills
//! and cancellations, so an order's New always precedes its fills. Mappings (see
//! `docs/ARCHITECTURE.md`, "FIX 4.4"):
//! - OrdType 2 limit, 1 market (a buy needs CashOrderQty (152): its budget; not in a
//!   margin symbol, whose orders hold margin and take none), 3 stop (a stop-market,
//!   CashOrderQty likewise), 4 stop-limit; TimeInForce 0 Day, 1 GTC, 3 IOC, 4 FOK;
//!   absent is Day, as FIX 4.4 defines it. Market and stop orders cannot rest, so for
//!   them absent and Day are IOC. A Day order expires when the operator closes the
//!   trading day (the engine's `CloseDay`): ExecType C, OrdStatus C (Expired), LeavesQty
//!   0. ExecInst 6 is post-only; MaxFloor (111) an iceberg's shown quantity. Prices and
//!   quantities are integers in engine units.
//! - A cancellation is ExecType 4 with the engine's reason in Text (`liquidation` when
//!   a margin account's orders are cancelled to liquidate it); a refusal is ExecType 8
//!   with the engine's reject in Text as `name (code)`: margin refusals
//!   (`margin_insufficient (42)`, `position_limit (43)`, `budget_not_for_margin (45)`)
//!   have no OrdRejReason of their own and carry 99.
//! - OrderCancelReplaceRequest: a new price alone moves the order (it loses time
//!   priority and may trade); a smaller OrderQty alone reduces it (it keeps priority);
//!   anything else is refused with OrderCancelReject and a reason.
//! - A NewOrderSingle whose ClOrdID this session already used is not placed again: it
//!   is answered with the order's status (ExecType I), so a client resending after a
//!   dropped connection never doubles an order.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use bourse_client::{Events, SessionEvent};
use bourse_engine::command::{CommandBody, OrderKind, OrderRequest, Stp, Tif};
use bourse_engine::{AccountId, Amount, OrderId, Outcome, Px, Qty, Reject, Side, SymbolId};
use bourse_protocol::proto;

use crate::codec::{FieldError, Message, RejectReason};
use crate::session::{SessionCore, Upstream};
use crate::store::Store;
use crate::tags::{self, msg};
use crate::time::{now_ns, utc_timestamp};

/// One order as this session's ExecutionReports described it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderState {
    pub id: u64,
    pub cl_ord_id: String,
    pub account: String,
    pub symbol: String,
    pub side: String,
    pub ord_type: String,
    pub px: Option<i64>,
    pub stop_px: Option<i64>,
    pub qty: i64,
    pub tif: Option<String>,
    pub cum_qty: i64,
    /// Σ px × qty of the fills.
    pub notional: i128,
    /// OrdStatus (39).
    pub status: String,
}

impl OrderState {
    /// Filled, canceled, rejected or expired.
    fn done(&self) -> bool {
        matches!(self.status.as_str(), "2" | "4" | "8" | "C")
    }

    fn leaves(&self) -> i64 {
        if self.done() {
            0
        } else {
            self.qty.saturating_sub(self.cum_qty).max(0)
        }
    }

    fn avg_px(&self) -> String {
        decimal_ratio(self.notional, self.cum_qty)
    }
}

/// A command sent and not yet answered.
#[derive(Debug)]
pub(crate) enum Pending {
    New(OrderState),
    Cancel { cl_ord_id: String, orig: String, order: u64 },
    Replace { cl_ord_id: String, orig: String, order: u64, qty: i64, px: Option<i64> },
}

/// The orders of one session.
#[derive(Default)]
pub struct Orders {
    by_id: HashMap<u64, OrderState>,
    by_cl: HashMap<String, u64>,
    /// ClOrdIDs of NewOrderSingles that were rejected, with the reject sent.
    rejected: HashMap<String, Message>,
    pending: HashMap<u64, Pending>,
    pending_cl: HashSet<String>,
    /// Cancel requests on their way: order → (ClOrdID, OrigClOrdID).
    cancels: HashMap<u64, (String, String)>,
    exec_ids: u64,
}

impl Orders {
    /// The orders as the ExecutionReports in `store` left them.
    pub fn rebuild(store: &Store) -> std::io::Result<Orders> {
        let mut orders = Orders::default();
        for (_, bytes) in store.sent_between(1, u64::MAX)? {
            let (message, _) = Message::decode(&bytes);
            if message.msg_type() == msg::EXECUTION_REPORT {
                orders.apply_report(&message);
            }
        }
        Ok(orders)
    }

    /// The order with this ClOrdID (current or earlier).
    pub fn by_cl_ord_id(&self, cl_ord_id: &str) -> Option<&OrderState> {
        self.by_cl.get(cl_ord_id).and_then(|id| self.by_id.get(id))
    }

    /// Updates the state from an ExecutionReport this session sends or sent.
    pub fn apply_report(&mut self, report: &Message) {
        let text = |tag| report.get_str(tag).unwrap_or("").to_owned();
        let int = |tag| report.get_str(tag).and_then(parse_integer);
        let Some(id) = report.get_str(tags::ORDER_ID).and_then(|v| v.parse::<u64>().ok()) else {
            if report.get(tags::EXEC_TYPE) == Some(b"8") {
                self.rejected.insert(text(tags::CL_ORD_ID), report.clone());
            }
            return;
        };
        match report.get_str(tags::EXEC_TYPE).unwrap_or("") {
            "0" => {
                let order = OrderState {
                    id,
                    cl_ord_id: text(tags::CL_ORD_ID),
                    account: text(tags::ACCOUNT),
                    symbol: text(tags::SYMBOL),
                    side: text(tags::SIDE),
                    ord_type: text(tags::ORD_TYPE),
                    px: int(tags::PRICE),
                    stop_px: int(tags::STOP_PX),
                    qty: int(tags::ORDER_QTY).unwrap_or(0),
                    tif: report.get_str(tags::TIME_IN_FORCE).map(str::to_owned),
                    cum_qty: 0,
                    notional: 0,
                    status: text(tags::ORD_STATUS),
                };
                self.by_cl.insert(order.cl_ord_id.clone(), id);
                self.by_id.insert(id, order);
            }
            exec_type @ ("F" | "4" | "5" | "C") => {
                let Some(order) = self.by_id.get_mut(&id) else { return };
                if exec_type == "F" {
                    // Saturating: a report replayed from a damaged store may carry any numbers.
                    let (qty, px) = (int(tags::LAST_QTY).unwrap_or(0), int(tags::LAST_PX).unwrap_or(0));
                    order.cum_qty = order.cum_qty.saturating_add(qty);
                    order.notional = order.notional.saturating_add(i128::from(px) * i128::from(qty));
                }
                if exec_type == "5" {
                    order.qty = int(tags::ORDER_QTY).unwrap_or(order.qty);
                    order.px = int(tags::PRICE).or(order.px);
                }
                let cl = text(tags::CL_ORD_ID);
                if !cl.is_empty() && cl != order.cl_ord_id {
                    self.by_cl.insert(cl.clone(), id);
                    order.cl_ord_id = cl;
                }
                order.status = text(tags::ORD_STATUS);
            }
            _ => {}
        }
    }

    /// The reports that bring `info`'s order up to date: its fills beyond the reported
    /// quantity, and its cancellation or expiry.
    fn reconcile_one(&mut self, info: &proto::OrderInfo) -> Vec<Message> {
        let mut out = Vec::new();
        let Some(reported) = self.by_id.get(&info.id).map(|o| o.cum_qty) else { return out };
        let mut filled = 0;
        for fill in &info.fills {
            filled += fill.qty;
            if filled > reported {
                let report = proto::FillReport { order: info.id, px: fill.px, qty: fill.qty, ..Default::default() };
                self.on_fill(&report, &mut out);
            }
        }
        let open = self.by_id.get(&info.id).is_some_and(|o| !o.done());
        let reason = match proto::OrderStatus::try_from(info.status) {
            Ok(proto::OrderStatus::Cancelled) => Some(proto::CancelReason::Unspecified),
            Ok(proto::OrderStatus::Expired) => Some(proto::CancelReason::Expired),
            _ => None,
        };
        if let (true, Some(reason)) = (open, reason) {
            let report = proto::CancelReport {
                order: info.id,
                qty_cancelled: info.qty_cancelled,
                reason: reason as i32,
                ..Default::default()
            };
            self.on_cancel(&report, &mut out);
        }
        out
    }

    /// Remembers a command sent upstream as `seq` until its answer arrives.
    pub(crate) fn sent(&mut self, seq: u64, pending: Pending) {
        if let Pending::New(draft) = &pending {
            self.pending_cl.insert(draft.cl_ord_id.clone());
        }
        if let Pending::Cancel { cl_ord_id, orig, order } = &pending {
            self.cancels.insert(*order, (cl_ord_id.clone(), orig.clone()));
        }
        self.pending.insert(seq, pending);
    }

    /// A command that could not be sent: answered at once, as a refusal.
    pub(crate) fn not_sent(&mut self, pending: Pending, error: bourse_client::Error) -> Vec<Message> {
        let fake_seq = u64::MAX;
        self.pending.insert(fake_seq, pending);
        self.on_event(SessionEvent::Failed { seq: fake_seq, error })
    }

    /// A NewOrderSingle whose ClOrdID is known is not placed again: `Some` with the
    /// answer to send (the order's status, or its reject again; none while the first is
    /// still on its way), `None` for a new ClOrdID.
    pub(crate) fn duplicate(&mut self, cl_ord_id: &str) -> Option<Option<Message>> {
        if self.pending_cl.contains(cl_ord_id) {
            return Some(None);
        }
        if let Some(order) = self.by_cl_ord_id(cl_ord_id).cloned() {
            return Some(Some(self.report(&order, "I", None, None, Some("duplicate ClOrdID: the order's status"))));
        }
        if let Some(rejected) = self.rejected.get(cl_ord_id).cloned() {
            let mut again = rejected;
            let exec_id = self.exec_id();
            again.set(tags::EXEC_ID, exec_id);
            return Some(Some(again));
        }
        None
    }

    /// The order a cancel or replace names: by OrigClOrdID, else by OrderID.
    pub(crate) fn target(&self, orig: &str, message: &Message) -> Option<OrderState> {
        let by_id = message.get_str(tags::ORDER_ID).and_then(|id| id.parse::<u64>().ok());
        self.by_cl_ord_id(orig).or_else(|| by_id.and_then(|id| self.by_id.get(&id))).cloned()
    }

    fn exec_id(&mut self) -> String {
        self.exec_ids += 1;
        format!("{:x}.{}", now_ns(), self.exec_ids)
    }

    /// An ExecutionReport of `order` (fields in the FIX 4.4 dictionary's order).
    fn report(
        &mut self,
        order: &OrderState,
        exec_type: &str,
        orig: Option<&str>,
        last: Option<(i64, i64)>,
        text: Option<&str>,
    ) -> Message {
        let mut report = Message::new(msg::EXECUTION_REPORT);
        report.push_display(tags::ORDER_ID, order.id).push(tags::CL_ORD_ID, &order.cl_ord_id);
        if let Some(orig) = orig {
            report.push(tags::ORIG_CL_ORD_ID, orig);
        }
        report
            .push(tags::EXEC_ID, self.exec_id())
            .push(tags::EXEC_TYPE, exec_type)
            .push(tags::ORD_STATUS, &order.status);
        order_fields(&mut report, order);
        if let Some((px, qty)) = last {
            report.push_display(tags::LAST_QTY, qty).push_display(tags::LAST_PX, px);
        }
        report
            .push_display(tags::LEAVES_QTY, order.leaves())
            .push_display(tags::CUM_QTY, order.cum_qty)
            .push(tags::AVG_PX, order.avg_px())
            .push(tags::TRANSACT_TIME, utc_timestamp(now_ns()));
        if let Some(text) = text {
            report.push(tags::TEXT, text);
        }
        report
    }

    /// A rejected NewOrderSingle's ExecutionReport.
    pub(crate) fn new_rejected(&mut self, draft: &OrderState, reason: u32, text: &str) -> Message {
        let mut report = Message::new(msg::EXECUTION_REPORT);
        report
            .push(tags::ORDER_ID, "NONE")
            .push(tags::CL_ORD_ID, &draft.cl_ord_id)
            .push(tags::EXEC_ID, self.exec_id())
            .push(tags::EXEC_TYPE, "8")
            .push(tags::ORD_STATUS, "8");
        order_fields(&mut report, draft);
        report
            .push(tags::LEAVES_QTY, "0")
            .push(tags::CUM_QTY, "0")
            .push(tags::AVG_PX, "0")
            .push_display(tags::ORD_REJ_REASON, reason)
            .push(tags::TRANSACT_TIME, utc_timestamp(now_ns()))
            .push(tags::TEXT, text);
        report
    }

    /// Builds, applies and returns the report (the only way state changes).
    fn emit(&mut self, out: &mut Vec<Message>, report: Message) {
        self.apply_report(&report);
        out.push(report);
    }

    /// The messages one upstream event produces.
    pub fn on_event(&mut self, event: SessionEvent) -> Vec<Message> {
        let mut out = Vec::new();
        match event {
            SessionEvent::Reply(reply) => match reply.outcome {
                Outcome::Ok { id } => self.on_accepted(reply.seq, id, &mut out),
                Outcome::Rejected(reject) => {
                    self.on_refused(reply.seq, ord_rej_reason(reject), &reject_text(reject), &mut out)
                }
            },
            SessionEvent::Failed { seq, error } => {
                self.on_refused(seq, 99, &format!("not forwarded: {error}"), &mut out)
            }
            SessionEvent::Fill(fill) => self.on_fill(&fill, &mut out),
            SessionEvent::Cancel(cancel) => self.on_cancel(&cancel, &mut out),
        }
        out
    }

    fn on_accepted(&mut self, seq: u64, id: u64, out: &mut Vec<Message>) {
        match self.pending.remove(&seq) {
            Some(Pending::New(mut draft)) => {
                self.pending_cl.remove(&draft.cl_ord_id);
                draft.id = id;
                draft.status = "0".into();
                let report = self.report(&draft, "0", None, None, None);
                self.emit(out, report);
            }
            Some(Pending::Replace { cl_ord_id, orig, order, qty, px }) => {
                let Some(mut state) = self.by_id.get(&order).cloned() else { return };
                state.cl_ord_id = cl_ord_id;
                state.qty = qty;
                state.px = px.or(state.px);
                let report = self.report(&state, "5", Some(&orig), None, None);
                self.emit(out, report);
            }
            // The cancellation itself arrives as a CancelReport.
            Some(Pending::Cancel { .. }) | None => {}
        }
    }

    fn on_refused(&mut self, seq: u64, reason: u32, text: &str, out: &mut Vec<Message>) {
        match self.pending.remove(&seq) {
            Some(Pending::New(draft)) => {
                self.pending_cl.remove(&draft.cl_ord_id);
                let report = self.new_rejected(&draft, reason, text);
                self.emit(out, report);
            }
            Some(Pending::Cancel { cl_ord_id, orig, order }) => {
                self.cancels.remove(&order);
                out.push(self.cancel_reject(Some(order), &cl_ord_id, &orig, "1", cxl_rej_reason(reason), text));
            }
            Some(Pending::Replace { cl_ord_id, orig, order, .. }) => {
                out.push(self.cancel_reject(Some(order), &cl_ord_id, &orig, "2", cxl_rej_reason(reason), text));
            }
            None => {}
        }
    }

    fn on_fill(&mut self, fill: &proto::FillReport, out: &mut Vec<Message>) {
        let Some(mut order) = self.by_id.get(&fill.order).cloned() else {
            tracing::debug!(order = fill.order, "FIX: a fill of an order this session does not know");
            return;
        };
        order.cum_qty = order.cum_qty.saturating_add(fill.qty);
        order.notional = order.notional.saturating_add(i128::from(fill.px) * i128::from(fill.qty));
        order.status = if order.cum_qty >= order.qty { "2" } else { "1" }.into();
        // `report` reads cum and status from the state passed; apply_report recomputes
        // them from LastQty/LastPx, so the live and rebuilt states agree.
        let report = self.report(&order, "F", None, Some((fill.px, fill.qty)), None);
        self.emit(out, report);
    }

    /// A cancellation is ExecType 4 (Canceled); the close of the trading day ending a
    /// Day order is ExecType C (Expired), whatever cancel request was on its way.
    fn on_cancel(&mut self, cancel: &proto::CancelReport, out: &mut Vec<Message>) {
        let Some(mut order) = self.by_id.get(&cancel.order).cloned() else { return };
        // A reason this version does not know still cancelled the order: the report says
        // so, and its Text says what could not be read.
        let reason = bourse_protocol::convert::cancel_reason_from_proto(cancel.reason, "CancelReport.reason");
        let requested = self.cancels.remove(&cancel.order);
        let expired = reason == Ok(bourse_engine::CancelReason::Expired);
        let orig = requested.as_ref().filter(|_| !expired).map(|(cl, orig)| {
            order.cl_ord_id = cl.clone();
            orig.clone()
        });
        let exec_type = if expired { "C" } else { "4" };
        order.status = exec_type.into();
        let text = match reason {
            Ok(reason) => reason.name().to_owned(),
            Err(error) => error.to_string(),
        };
        let report = self.report(&order, exec_type, orig.as_deref(), None, Some(&text));
        self.emit(out, report);
    }

    /// An OrderCancelReject (35=9); `response_to` is 1 for a cancel, 2 for a replace.
    pub(crate) fn cancel_reject(
        &mut self,
        order: Option<u64>,
        cl_ord_id: &str,
        orig: &str,
        response_to: &str,
        reason: u32,
        text: &str,
    ) -> Message {
        let state = order.and_then(|id| self.by_id.get(&id));
        let mut reject = Message::new(msg::ORDER_CANCEL_REJECT);
        match state {
            Some(state) => reject.push_display(tags::ORDER_ID, state.id),
            None => reject.push(tags::ORDER_ID, "NONE"),
        };
        let status = state.map(|s| s.status.clone()).unwrap_or_else(|| "8".into());
        reject
            .push(tags::CL_ORD_ID, cl_ord_id)
            .push(tags::ORIG_CL_ORD_ID, orig)
            .push(tags::ORD_STATUS, status)
            .push(tags::CXL_REJ_RESPONSE_TO, response_to)
            .push_display(tags::CXL_REJ_REASON, reason)
            .push(tags::TEXT, text);
        reject
    }
}

/// Account, Symbol, Side, OrderQty, OrdType, Price, StopPx, TimeInForce of `order`.
fn order_fields(report: &mut Message, order: &OrderState) {
    if !order.account.is_empty() {
        report.push(tags::ACCOUNT, &order.account);
    }
    report.push(tags::SYMBOL, &order.symbol).push(tags::SIDE, &order.side).push_display(tags::ORDER_QTY, order.qty);
    if !order.ord_type.is_empty() {
        report.push(tags::ORD_TYPE, &order.ord_type);
    }
    if let Some(px) = order.px {
        report.push_display(tags::PRICE, px);
    }
    if let Some(stop) = order.stop_px {
        report.push_display(tags::STOP_PX, stop);
    }
    if let Some(tif) = &order.tif {
        report.push(tags::TIME_IN_FORCE, tif);
    }
}

/// Reports what happened to this session's open orders while no upstream session of
/// it was there to hear it (its orders' fills and cancellations go to the upstream
/// session that placed them, which a restart ends): each open order is read from the
/// exchange, and fills beyond the reported quantity, and a cancellation, are reported.
pub(crate) async fn reconcile(core: &Arc<SessionCore>, upstream: &Upstream) {
    let open: Vec<u64> = core.lock().orders.by_id.values().filter(|o| !o.done()).map(|o| o.id).collect();
    for id in open {
        let info = match upstream.query.clone().order(OrderId(id)).await {
            Ok(reply) => reply.order,
            Err(error) => {
                tracing::warn!(session = %core.their_id, order = id, %error, "FIX: an open order could not be read");
                continue;
            }
        };
        let Some(info) = info else { continue };
        let mut state = core.lock();
        let messages = state.orders.reconcile_one(&info);
        for message in messages {
            core.send_locked(&mut state, message);
        }
    }
}

/// Reads the upstream session's events and turns them into messages, in order.
pub(crate) async fn pump_events(core: Weak<SessionCore>, upstream: Arc<Upstream>, mut events: Events) {
    while let Some(event) = events.recv().await {
        let Some(core) = core.upgrade() else { break };
        let mut state = core.lock();
        let messages = state.orders.on_event(event);
        for message in messages {
            core.send_locked(&mut state, message);
        }
    }
    upstream.ended.store(true, std::sync::atomic::Ordering::Release);
    // Why it ended: a key the gateway no longer knows (revoked, renamed away) ends the
    // FIX session at once, saying so, and the next Logon with it is refused. Any other
    // end (the gateway going away) leaves the session to the next command or Logon.
    let revoked = matches!(
        upstream.query.clone().symbols().await,
        Err(bourse_client::Error::Status { code: tonic::Code::Unauthenticated, .. })
    );
    if let (true, Some(core)) = (revoked, core.upgrade()) {
        core.log_out("this API key was revoked");
    }
}

/// Handles an application message of the orders family. An error is a session-level
/// problem (a required tag missing, a value FIX does not define) for a Reject (35=3).
pub(crate) async fn on_message(core: &Arc<SessionCore>, msg_type: &str, message: &Message) -> Result<(), FieldError> {
    match msg_type {
        msg::NEW_ORDER_SINGLE => new_order(core, message).await,
        msg::ORDER_CANCEL_REQUEST => cancel_or_replace(core, message, false).await,
        _ => cancel_or_replace(core, message, true).await,
    }
}

/// A refusal with its OrdRejReason (103) and text.
#[derive(Debug)]
pub(crate) struct Refusal(pub u32, pub String);

fn refuse<T>(reason: u32, text: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(reason, text.into()))
}

/// OrdRejReason 11: unsupported order characteristic.
const UNSUPPORTED: u32 = 11;

async fn new_order(core: &Arc<SessionCore>, message: &Message) -> Result<(), FieldError> {
    let draft = new_order_draft(message)?;
    let cl_ord_id = draft.cl_ord_id.clone();
    if duplicate(core, &cl_ord_id) {
        return Ok(());
    }
    let body = match core.upstream() {
        Some(upstream) => place(&upstream, message).await.map(|body| (upstream, body)),
        None => refuse(99, "no upstream session"),
    };
    match body {
        Ok((upstream, body)) => send_command(core, &upstream, &body, Pending::New(draft)).await,
        Err(Refusal(reason, text)) => {
            let mut state = core.lock();
            let report = state.orders.new_rejected(&draft, reason, &text);
            state.orders.apply_report(&report);
            core.send_locked(&mut state, report);
        }
    }
    Ok(())
}

/// A NewOrderSingle's required fields checked (an error is a session-level Reject), and
/// the order as its reports will describe it.
pub(crate) fn new_order_draft(message: &Message) -> Result<OrderState, FieldError> {
    let cl_ord_id = message.require(tags::CL_ORD_ID)?.to_owned();
    let side = message.require(tags::SIDE)?;
    if !matches!(side, "1" | "2") {
        return Err(FieldError::new(
            RejectReason::ValueIncorrect,
            Some(tags::SIDE),
            "Side must be 1 (buy) or 2 (sell)",
        ));
    }
    message.require(tags::ORDER_QTY)?;
    let ord_type = message.require(tags::ORD_TYPE)?;
    let symbol = message.require(tags::SYMBOL)?;
    Ok(OrderState {
        id: 0,
        cl_ord_id,
        account: message.get_str(tags::ACCOUNT).unwrap_or("").to_owned(),
        symbol: symbol.to_owned(),
        side: side.to_owned(),
        ord_type: ord_type.to_owned(),
        px: message.get_str(tags::PRICE).and_then(parse_integer),
        stop_px: message.get_str(tags::STOP_PX).and_then(parse_integer),
        qty: message.get_str(tags::ORDER_QTY).and_then(parse_integer).unwrap_or(0),
        tif: message.get_str(tags::TIME_IN_FORCE).map(str::to_owned),
        cum_qty: 0,
        notional: 0,
        status: "A".into(),
    })
}

/// A NewOrderSingle whose ClOrdID is known: answered with the order's status (or its
/// reject again), never placed twice. True when it was such a duplicate.
fn duplicate(core: &SessionCore, cl_ord_id: &str) -> bool {
    let mut state = core.lock();
    match state.orders.duplicate(cl_ord_id) {
        Some(answer) => {
            if let Some(answer) = answer {
                core.send_locked(&mut state, answer);
            }
            true
        }
        None => false,
    }
}

/// Sends `body` upstream and remembers what it was for; a session that cannot take
/// it answers at once.
async fn send_command(core: &Arc<SessionCore>, upstream: &Upstream, body: &CommandBody, pending: Pending) {
    let permit = upstream.client.reserve().await;
    let mut state = core.lock();
    let sent = permit.and_then(|permit| permit.send(body));
    match sent {
        Ok(seq) => state.orders.sent(seq, pending),
        Err(error) => {
            let messages = state.orders.not_sent(pending, error);
            for message in messages {
                core.send_locked(&mut state, message);
            }
        }
    }
}

/// The Place command a NewOrderSingle asks for, or why it cannot be expressed.
async fn place(upstream: &Upstream, message: &Message) -> Result<CommandBody, Refusal> {
    let mut request = order_request(message)?;
    let name = message.get_str(tags::SYMBOL).unwrap_or("");
    let Some(symbol) = upstream.symbol(name).await else {
        return refuse(1, format!("unknown symbol {name}"));
    };
    request.symbol = SymbolId(symbol.id);
    check_budget(&request, symbol.spec.as_ref().is_some_and(|spec| spec.margin.is_some()))?;
    Ok(CommandBody::Place(request))
}

/// The order a NewOrderSingle asks for, or why it cannot be expressed, but for its
/// symbol: `symbol` is 0 here, and the caller resolves Symbol (55) last (a name the
/// exchange does not know is refused after every other check), then checks the budget
/// ([`check_budget`]), which depends on the symbol.
pub(crate) fn order_request(message: &Message) -> Result<OrderRequest, Refusal> {
    let account = match message.get_str(tags::ACCOUNT).map(|a| a.parse::<u32>()) {
        Some(Ok(account)) => AccountId(account),
        Some(Err(_)) => return refuse(UNSUPPORTED, "Account (1) must be the exchange account number"),
        None => return refuse(UNSUPPORTED, "Account (1) is required: the exchange account number"),
    };
    let side = if message.get(tags::SIDE) == Some(b"1") { Side::Buy } else { Side::Sell };
    let qty = Qty(units(message, tags::ORDER_QTY)?.unwrap_or(0));
    let ord_type = message.get_str(tags::ORD_TYPE).unwrap_or("");
    let px = units(message, tags::PRICE)?;
    let stop = units(message, tags::STOP_PX)?;
    let budget = units(message, tags::CASH_ORDER_QTY)?.map(Amount);
    let need = |value: Option<i64>, what: &str| {
        value.ok_or_else(|| Refusal(UNSUPPORTED, format!("{what} is required for OrdType {ord_type}")))
    };
    let kind = match ord_type {
        "1" => OrderKind::Market { budget },
        "2" => OrderKind::Limit { px: Px(need(px, "Price (44)")?) },
        "3" => OrderKind::StopMarket { trigger: Px(need(stop, "StopPx (99)")?), budget },
        "4" => OrderKind::StopLimit { trigger: Px(need(stop, "StopPx (99)")?), px: Px(need(px, "Price (44)")?) },
        other => {
            return refuse(
                UNSUPPORTED,
                format!("OrdType {other} is not supported: 1 market, 2 limit, 3 stop, 4 stop-limit"),
            )
        }
    };
    // FIX 4.4: an absent TimeInForce means Day. A market or stop order cannot rest, so
    // its Day ends with its arrival: IOC.
    let market = matches!(ord_type, "1" | "3");
    let tif = match message.get_str(tags::TIME_IN_FORCE) {
        None | Some("0") if market => Tif::Ioc,
        None | Some("0") => Tif::Day,
        Some("1") => Tif::Gtc,
        Some("3") => Tif::Ioc,
        Some("4") => Tif::Fok,
        Some(other) => {
            return refuse(UNSUPPORTED, format!("TimeInForce {other} is not supported: 0 Day, 1 GTC, 3 IOC, 4 FOK"))
        }
    };
    let mut post_only = false;
    for inst in message.get_str(tags::EXEC_INST).unwrap_or("").split_whitespace() {
        match inst {
            "6" => post_only = true,
            other => return refuse(UNSUPPORTED, format!("ExecInst {other} is not supported: 6 (post-only) only")),
        }
    }
    let display_qty = units(message, tags::MAX_FLOOR)?.map(Qty);
    Ok(OrderRequest { account, symbol: SymbolId(0), side, kind, qty, tif, post_only, display_qty, stp: Stp::default() })
}

/// A market (or stop-market) buy of a spot symbol needs CashOrderQty: the engine holds
/// that budget. An order of a margin symbol (`margin`) holds initial margin at its worst
/// price instead and takes no budget (the engine refuses one: budget_not_for_margin).
pub(crate) fn check_budget(request: &OrderRequest, margin: bool) -> Result<(), Refusal> {
    let no_budget =
        matches!(request.kind, OrderKind::Market { budget: None } | OrderKind::StopMarket { budget: None, .. });
    if request.side == Side::Buy && no_budget && !margin {
        return refuse(
            UNSUPPORTED,
            "a market buy needs CashOrderQty (152): the most it may spend, fees included, in quote minor units",
        );
    }
    Ok(())
}

/// OrderCancelRequest (`replace` false) and OrderCancelReplaceRequest.
async fn cancel_or_replace(core: &Arc<SessionCore>, message: &Message, replace: bool) -> Result<(), FieldError> {
    let (cl_ord_id, orig) = cancel_ids(message, replace)?;
    let response_to = if replace { "2" } else { "1" };
    let order = core.lock().orders.target(&orig, message);
    let refuse_now = |reason: u32, text: &str, order: Option<u64>| {
        let mut state = core.lock();
        let reject = state.orders.cancel_reject(order, &cl_ord_id, &orig, response_to, reason, text);
        core.send_locked(&mut state, reject);
        Ok(())
    };
    let Some(order) = order else {
        return refuse_now(1, "unknown order", None);
    };
    let Some(upstream) = core.upstream() else {
        return refuse_now(99, "no upstream session", Some(order.id));
    };
    let Some(symbol) = upstream.symbol(&order.symbol).await else {
        return refuse_now(99, "the order's symbol is no longer known", Some(order.id));
    };
    let (account, symbol, id) = (order_account(&order), SymbolId(symbol.id), OrderId(order.id));
    if !replace {
        let body = CommandBody::Cancel { account, symbol, order: id };
        send_command(core, &upstream, &body, Pending::Cancel { cl_ord_id, orig, order: order.id }).await;
        return Ok(());
    }
    let (body, qty, px) = match replacement(message, &order, account, symbol, id) {
        Ok(found) => found,
        Err(Refusal(_, text)) => return refuse_now(99, &text, Some(order.id)),
    };
    send_command(core, &upstream, &body, Pending::Replace { cl_ord_id, orig, order: order.id, qty, px }).await;
    Ok(())
}

/// The required fields of an OrderCancelRequest (`replace` false) or
/// OrderCancelReplaceRequest checked (an error is a session-level Reject): its ClOrdID
/// and OrigClOrdID.
pub(crate) fn cancel_ids(message: &Message, replace: bool) -> Result<(String, String), FieldError> {
    let cl_ord_id = message.require(tags::CL_ORD_ID)?.to_owned();
    let orig = message.require(tags::ORIG_CL_ORD_ID)?.to_owned();
    message.require(tags::SIDE)?;
    message.require(tags::SYMBOL)?;
    if replace {
        message.require(tags::ORD_TYPE)?;
    }
    Ok((cl_ord_id, orig))
}

/// The account of an order this session placed (`u32::MAX`, which no account has, if
/// its reports named none).
pub(crate) fn order_account(order: &OrderState) -> AccountId {
    AccountId(order.account.parse().unwrap_or(u32::MAX))
}

/// The command a replace asks for: Move for a new price, Reduce for a smaller quantity.
pub(crate) fn replacement(
    message: &Message,
    order: &OrderState,
    account: AccountId,
    symbol: SymbolId,
    id: OrderId,
) -> Result<(CommandBody, i64, Option<i64>), Refusal> {
    if message.get_str(tags::SIDE) != Some(order.side.as_str())
        || message.get_str(tags::SYMBOL) != Some(order.symbol.as_str())
    {
        return refuse(99, "a replace cannot change Side or Symbol");
    }
    if message.get_str(tags::ORD_TYPE) != Some(order.ord_type.as_str()) || order.ord_type != "2" {
        return refuse(99, "only limit orders can be replaced, and they stay limit orders");
    }
    let qty = units(message, tags::ORDER_QTY)?.unwrap_or(order.qty);
    let px = units(message, tags::PRICE)?;
    let px_changes = px.is_some_and(|px| Some(px) != order.px);
    match (qty != order.qty, px_changes) {
        (true, true) => refuse(99, "change the price or the quantity in one replace, not both"),
        (false, false) => refuse(99, "the replace changes neither price nor quantity"),
        (false, true) => Ok((CommandBody::Move { account, symbol, order: id, px: Px(px.unwrap_or(0)) }, qty, px)),
        (true, false) if qty > order.qty => {
            refuse(99, "OrderQty can only be reduced; cancel and place a new order to add")
        }
        (true, false) if qty <= order.cum_qty => {
            refuse(99, "the new OrderQty must be above the quantity already filled")
        }
        (true, false) => {
            Ok((CommandBody::Reduce { account, symbol, order: id, qty_by: Qty(order.qty - qty) }, qty, None))
        }
    }
}

/// An integer field in engine units (a FIX decimal with no fractional part).
fn units(message: &Message, tag: u32) -> Result<Option<i64>, Refusal> {
    match message.get_str(tag) {
        None => Ok(None),
        Some(value) => parse_integer(value).map(Some).ok_or_else(|| {
            Refusal(
                UNSUPPORTED,
                format!("tag {tag} must be a whole number of engine units (minor units, lots), not {value:?}"),
            )
        }),
    }
}

/// `"150"`, `"150.0"` or `"150.00"` as 150; anything with a fraction is not an integer.
fn parse_integer(value: &str) -> Option<i64> {
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    if !fraction.bytes().all(|b| b == b'0') || whole.is_empty() {
        return None;
    }
    whole.parse().ok()
}

/// `numerator / denominator` as a decimal with up to 8 places, trailing zeros trimmed.
pub(crate) fn decimal_ratio(numerator: i128, denominator: i64) -> String {
    if denominator == 0 {
        return "0".into();
    }
    let denominator = i128::from(denominator);
    // The remainder, not the numerator, is scaled: |remainder| < |denominator| < 2^63,
    // so nothing overflows whatever the notional (what a damaged store replays included).
    let (Some(whole), Some(remainder)) = (numerator.checked_div(denominator), numerator.checked_rem(denominator))
    else {
        return "0".into();
    };
    let fraction = (remainder.abs() * 100_000_000 / denominator.abs()) as u64;
    if fraction == 0 {
        return whole.to_string();
    }
    let digits = format!("{fraction:08}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// OrdRejReason (103) for an engine rejection.
fn ord_rej_reason(reject: Reject) -> u32 {
    match reject {
        Reject::SymbolUnknown => 1,
        Reject::OrderUnknown => 5,
        Reject::AccountUnknown => 15,
        Reject::QtyMustBePositive | Reject::QtyMustBeMultipleOfLot | Reject::DisplayQtyInvalid => 13,
        Reject::BalanceInsufficient | Reject::OpenOrdersLimit | Reject::LimitReached => 3,
        _ => 99,
    }
}

/// CxlRejReason (102) from the OrdRejReason-like code: unknown order → 1, else other.
fn cxl_rej_reason(reason: u32) -> u32 {
    if reason == 5 {
        1
    } else {
        99
    }
}

fn reject_text(reject: Reject) -> String {
    format!("{} ({})", reject.name(), reject.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_ratios() {
        assert_eq!(parse_integer("150"), Some(150));
        assert_eq!(parse_integer("150.00"), Some(150));
        assert_eq!(parse_integer("150.5"), None);
        assert_eq!(parse_integer("-3"), Some(-3));
        assert_eq!(parse_integer(".0"), None);
        assert_eq!(decimal_ratio(300, 2), "150");
        assert_eq!(decimal_ratio(301, 2), "150.5");
        assert_eq!(decimal_ratio(1, 3), "0.33333333");
        assert_eq!(decimal_ratio(5, 0), "0");
        assert_eq!(decimal_ratio(-301, 2), "-150.5");
        assert_eq!(decimal_ratio(i128::MAX, 1), i128::MAX.to_string());
        assert_eq!(decimal_ratio(i128::MIN, -1), "0", "i128::MIN / -1 overflows: no average");
    }
}
