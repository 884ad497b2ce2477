//! The sink's own copy of the engine, and the mapping from its events to history rows.
//!
//! The sink does not receive events: it receives the committed log (encoded commands,
//! numbered) and applies it to an engine of its own. The engine is deterministic, so
//! the same log gives exactly the events every replica computed, with nothing computed
//! on a replica's core thread for the sink. What the recorder adds to the events is
//! context the events leave implicit: the change of each balance (the engine reports
//! after-values; the recorder remembers the previous ones), what caused it, the
//! order-entry details of an accepted order (client, seq, flags from the command), and
//! a `done` row when an order reaches its final state.
//!
//! Invariants: entries are applied in index order without gaps (a gap is an error, not
//! a skip); the rows of an entry depend only on the log, so they and their keys are the
//! same on every run.
//!
//! Day-trading audit records (`Event::DayTrading`) become rows of `dt_audit` (one arm in
//! `Recorder::record_event`; the row itself is built in `audit.rs`), numbered in the
//! ledger's audit sequence: the recorder learns the number of a command's first record
//! from the ledger after applying it.

use bourse_engine::codec;
use bourse_engine::command::{Command, CommandBody, MarkSource, MatchPolicy, OrderKind, OrderRequest, Stp, Tif};
use bourse_engine::{Engine, EngineConfig, Event, OrderId, OrderStatus, Outcome, Side, SymbolId};
use rustc_hash::FxHashMap;

use crate::rows::{
    AccountRow, AssetRow, BalanceRow, ExecutionRow, MarginEventRow, MarginRules, OrderEventRow, OrderRow, RowKey, Rows,
    SymbolRow, TradingDayRow,
};

/// One committed log entry: its index and its encoded commands in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub index: u64,
    pub commands: Vec<Vec<u8>>,
}

/// Why the recorder refused an entry.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("log gap: expected entry {expected}, got {got} (entries were lost or pruned before they were recorded)")]
    Gap { expected: u64, got: u64 },
    #[error("entry {index}: a command does not decode: {error}")]
    Decode { index: u64, error: codec::DecodeError },
    #[error("engine snapshot: {0}")]
    Snapshot(#[from] bourse_engine::SnapshotError),
}

/// The last thing that happened to orders in the current command: what a following
/// balance movement is attributed to.
#[derive(Clone, Copy)]
enum Cause {
    Command(&'static str),
    Order(&'static str, OrderId),
    Trade { maker_account: u32, maker_order: OrderId, taker_order: OrderId },
}

/// An engine fed with the committed log, producing history rows.
pub struct Recorder {
    engine: Engine,
    /// The last entry applied (`None`: nothing yet, the log starts at 0 or 1).
    last: Option<u64>,
    /// Balances as last reported, for the deltas.
    balances: FxHashMap<(u32, u32), (i64, i64)>,
    /// Margin positions as last reported, `(account, symbol) → (size, cost,
    /// realised)`: for the P&L each change realises and the cost a settlement leaves.
    positions: FxHashMap<(u32, u32), (i64, i64, i64)>,
    /// The margin symbol of the last position change or settlement in the command: a
    /// shortfall that follows is paid by its insurance account.
    margin_symbol: Option<SymbolId>,
    events: Vec<Event>,
    touched: Vec<OrderId>,
    cancelled: Vec<OrderId>,
    /// The audit sequence number the next day-trading record of the command gets.
    audit_next: u64,
    /// The audit records of the command being recorded.
    audit_records: Vec<crate::rows::AuditRow>,
}

impl Recorder {
    /// A recorder at the start of the log.
    pub fn new(config: EngineConfig) -> Self {
        Self::from_engine(Engine::new(config), None)
    }

    /// A recorder that continues after entry `index` from an engine snapshot taken there.
    pub fn restore(index: u64, snapshot: &[u8]) -> Result<Self, RecordError> {
        Ok(Self::from_engine(Engine::restore(snapshot)?, Some(index)))
    }

    fn from_engine(engine: Engine, last: Option<u64>) -> Self {
        let mut balances = FxHashMap::default();
        let mut positions = FxHashMap::default();
        for account in 0..engine.accounts_len() as u32 {
            let id = bourse_engine::AccountId(account);
            for (asset, balance) in engine.balances(id).unwrap_or_default() {
                balances.insert((account, asset.0), (balance.available.0, balance.reserved.0));
            }
            for p in engine.position_reports(id).unwrap_or_default() {
                positions.insert((account, p.symbol.0), (p.size, p.cost, p.realized));
            }
        }
        Recorder {
            engine,
            last,
            balances,
            positions,
            margin_symbol: None,
            events: Vec::new(),
            touched: Vec::new(),
            cancelled: Vec::new(),
            audit_next: 0,
            audit_records: Vec::new(),
        }
    }

    /// The last entry applied.
    pub fn last_index(&self) -> Option<u64> {
        self.last
    }

    /// The index the next entry must have.
    pub fn next_index(&self) -> u64 {
        self.last.map_or(0, |i| i + 1)
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine's snapshot after the last entry applied.
    pub fn snapshot(&self) -> Vec<u8> {
        self.engine.snapshot()
    }

    /// Applies one entry; appends its rows to `rows` when given (a restart replays the
    /// entries between its snapshot and its progress without writing them again).
    pub fn apply(&mut self, entry: &LogEntry, mut rows: Option<&mut Rows>) -> Result<(), RecordError> {
        let expected = self.next_index();
        let first_ok = self.last.is_none() && entry.index <= 1;
        if entry.index != expected && !first_ok {
            return Err(RecordError::Gap { expected, got: entry.index });
        }
        let mut pos = 0i64;
        for bytes in &entry.commands {
            let mut command =
                codec::decode(bytes).map_err(|error| RecordError::Decode { index: entry.index, error })?;
            // As every replica applies it (bourse-node's committed_command): engine time
            // never goes backwards.
            command.ts = command.ts.max(self.engine.ts_last());
            self.events.clear();
            let days = self.engine.days_closed();
            let applied = self.engine.apply(&command, &mut self.events);
            if let Some(rows) = rows.as_deref_mut() {
                self.record_command(entry.index, &mut pos, &command, rows);
                if self.engine.days_closed() > days {
                    let expired = match applied.outcome {
                        Outcome::Ok { id } => id as i64,
                        Outcome::Rejected(_) => 0,
                    };
                    let key = RowKey { log_index: entry.index as i64, pos, ts: command.ts as i64 };
                    pos += 1;
                    rows.days.push(TradingDayRow { key, day: self.engine.days_closed() as i64, expired });
                }
            } else {
                self.track_balances();
            }
        }
        self.last = Some(entry.index);
        Ok(())
    }

    /// Keeps the balance and position memory current without producing rows.
    fn track_balances(&mut self) {
        for event in &self.events {
            match *event {
                Event::Balance { account, asset, available, reserved } => {
                    self.balances.insert((account.0, asset.0), (available.0, reserved.0));
                }
                Event::Position { .. } | Event::Settled { .. } => {
                    Self::track_position(&mut self.positions, event);
                }
                _ => {}
            }
        }
    }

    /// Remembers the position a `Position` or `Settled` event leaves (a settlement
    /// moves the cost by its variation); returns `(size, cost, realised)` before and
    /// after (zeros before a position's first event).
    fn track_position(positions: &mut FxHashMap<(u32, u32), (i64, i64, i64)>, event: &Event) -> [(i64, i64, i64); 2] {
        let (Event::Position { account, symbol, .. } | Event::Settled { account, symbol, .. }) = *event else {
            unreachable!("only position events")
        };
        let position = positions.entry((account.0, symbol.0)).or_default();
        let before = *position;
        *position = match *event {
            Event::Settled { variation, .. } => (before.0, before.1 + variation.0, before.2),
            Event::Position { size, cost, realized, .. } => (size.0, cost.0, realized.0),
            _ => unreachable!("only position events"),
        };
        [before, *position]
    }

    fn record_command(&mut self, index: u64, pos: &mut i64, command: &Command, rows: &mut Rows) {
        let mut cause = Cause::Command(command_cause(&command.body));
        self.margin_symbol = None;
        self.touched.clear();
        self.cancelled.clear();
        let mut keys = Keys { log_index: index as i64, pos: *pos, ts: command.ts as i64, command_pos: *pos };
        let events = std::mem::take(&mut self.events);
        let records = events.iter().filter(|e| matches!(e, Event::DayTrading(d) if d.is_record())).count() as u64;
        self.audit_next = self.engine.day_trading().audit_records() - records + 1;
        for event in &events {
            self.record_event(&mut keys, event, command, &mut cause, rows);
        }
        self.events = events;
        if !self.audit_records.is_empty() {
            // One `dt_audit` row per entry, its records encoded together.
            rows.audit.push(crate::audit::audit_entry(&self.audit_records));
            self.audit_records.clear();
        }
        self.record_done(&mut keys, rows);
        *pos = keys.pos;
    }

    /// One event's rows (none for a rejection).
    fn record_event(&mut self, keys: &mut Keys, event: &Event, command: &Command, cause: &mut Cause, rows: &mut Rows) {
        if let Event::Rejected { .. } = event {
            // A rejected command changes nothing; its outcome is the client's answer.
            return;
        }
        if let Event::DayTrading(record) = *event {
            // An audit record is a row of `dt_audit`; a command's result is not.
            if record.is_record() {
                let key = keys.next();
                self.audit_records.push(crate::audit::audit_row(&self.engine, command, record, key, self.audit_next));
                self.audit_next += 1;
            }
            return;
        }
        if let Event::Rested { order, px, qty_visible, .. } = *event {
            // A move that rests at once at its new price (nothing traded, no other row of
            // the order in between, the same command) is one `moved` row carrying the
            // quantity it shows, not a `moved` and a `rested` row: a third of all order
            // events.
            if let Some(moved) = rows.order_events.last_mut().filter(|last| {
                (last.key.log_index, last.key.pos) >= (keys.log_index, keys.command_pos)
                    && last.order_id == order.0 as i64
                    && last.event == "moved"
                    && last.px == Some(px.0)
                    && last.qty.is_none()
            }) {
                moved.qty = Some(qty_visible.0);
                // What any later balance row of this command names, as before.
                *cause = Cause::Order("rested", order);
                return;
            }
        }
        let key = keys.next();
        let order_event = |order: OrderId, event: &'static str| OrderEventRow {
            key,
            order_id: order.0 as i64,
            event,
            px: None,
            qty: None,
            qty_remaining: None,
            reason: None,
        };
        match *event {
            Event::AssetCreated { asset } => {
                let info = self.engine.asset_info(asset).expect("a created asset exists");
                let (name, decimals) = (info.name.clone(), i64::from(info.decimals));
                rows.assets.push(AssetRow { key, asset: i64::from(asset.0), name, decimals });
            }
            Event::SymbolCreated { symbol } => {
                let spec = self.engine.symbol_spec(symbol).expect("a created symbol exists");
                rows.symbols.push(SymbolRow {
                    key,
                    symbol: i64::from(symbol.0),
                    name: spec.name.clone(),
                    base: i64::from(spec.base.0),
                    quote: i64::from(spec.quote.0),
                    tick: spec.tick.0,
                    lot: spec.lot.0,
                    px_min: spec.px_min.0,
                    px_max: spec.px_max.0,
                    fee_maker: spec.fee_maker.0,
                    fee_taker: spec.fee_taker.0,
                    policy: match spec.policy {
                        MatchPolicy::Fifo => "fifo",
                        MatchPolicy::ProRata => "pro_rata",
                    },
                    margin: self.engine.symbol_margin(symbol).map(|m| MarginRules {
                        multiplier: m.multiplier,
                        initial_bp: i64::from(m.initial_bp),
                        maintenance_bp: i64::from(m.maintenance_bp),
                        position_limit: m.position_limit.0,
                        mark: match m.mark {
                            MarkSource::Operator => "operator",
                            MarkSource::LastTrade => "last_trade",
                        },
                        insurance: i64::from(m.insurance.0),
                    }),
                });
            }
            Event::AccountCreated { account } => {
                let external_id = match command.body {
                    CommandBody::CreateAccountWithId { external_id, .. } => Some(external_id as i64),
                    _ => None,
                };
                rows.accounts.push(AccountRow { key, account: i64::from(account.0), event: "created", external_id })
            }
            Event::AccountSuspended { account } => rows.accounts.push(AccountRow {
                key,
                account: i64::from(account.0),
                event: "suspended",
                external_id: None,
            }),
            Event::AccountResumed { account } => rows.accounts.push(AccountRow {
                key,
                account: i64::from(account.0),
                event: "resumed",
                external_id: None,
            }),
            Event::Balance { account, asset, available, reserved } => {
                let before = self.balances.insert((account.0, asset.0), (available.0, reserved.0)).unwrap_or((0, 0));
                let (cause, order_id) = match *cause {
                    Cause::Command(name) => (name, None),
                    Cause::Order(name, order) => (name, Some(order.0 as i64)),
                    // The account's own leg (a self-trade's movements are the maker's).
                    Cause::Trade { maker_account, maker_order, taker_order } => {
                        let order = if account.0 == maker_account { maker_order } else { taker_order };
                        ("trade", Some(order.0 as i64))
                    }
                };
                rows.balances.push(BalanceRow {
                    key,
                    account: i64::from(account.0),
                    asset: i64::from(asset.0),
                    delta_available: available.0.wrapping_sub(before.0),
                    delta_reserved: reserved.0.wrapping_sub(before.1),
                    available: available.0,
                    reserved: reserved.0,
                    cause,
                    order_id,
                });
            }
            Event::Rejected { .. } => unreachable!("handled above"),
            Event::Position { account, symbol, size, cost, realized } => {
                let [(size_before, _, realized_before), _] = Self::track_position(&mut self.positions, event);
                // A change from flat realises nothing; and a flat position with no
                // orders is forgotten by the engine, its realised P&L with it, so the
                // next one starts again from 0.
                let change = if size_before == 0 { 0 } else { realized.0 - realized_before };
                self.margin_symbol = Some(symbol);
                rows.margin.push(MarginEventRow {
                    key,
                    event: "position",
                    account: Some(i64::from(account.0)),
                    symbol: Some(i64::from(symbol.0)),
                    qty: Some(size.0),
                    cost: Some(cost.0),
                    realized: Some(realized.0),
                    amount: Some(change),
                    ..MarginEventRow::default()
                });
            }
            Event::Mark { symbol, px } => rows.margin.push(MarginEventRow {
                key,
                event: "mark",
                symbol: Some(i64::from(symbol.0)),
                px: Some(px.0),
                ..MarginEventRow::default()
            }),
            Event::Liquidated { account, asset } => rows.margin.push(MarginEventRow {
                key,
                event: "liquidated",
                account: Some(i64::from(account.0)),
                asset: Some(i64::from(asset.0)),
                ..MarginEventRow::default()
            }),
            Event::PositionTransferred { symbol, from, to, qty, px } => rows.margin.push(MarginEventRow {
                key,
                event: "transferred",
                account: Some(i64::from(from.0)),
                symbol: Some(i64::from(symbol.0)),
                px: Some(px.0),
                qty: Some(qty.0),
                counterparty: Some(i64::from(to.0)),
                ..MarginEventRow::default()
            }),
            Event::Settled { account, symbol, px, variation } => {
                let [_, (size, cost, _)] = Self::track_position(&mut self.positions, event);
                self.margin_symbol = Some(symbol);
                rows.margin.push(MarginEventRow {
                    key,
                    event: "settled",
                    account: Some(i64::from(account.0)),
                    symbol: Some(i64::from(symbol.0)),
                    px: Some(px.0),
                    qty: Some(size),
                    cost: Some(cost),
                    amount: Some(variation.0),
                    ..MarginEventRow::default()
                });
            }
            Event::Settlement { symbol, px, open_interest } => rows.margin.push(MarginEventRow {
                key,
                event: "settlement",
                symbol: Some(i64::from(symbol.0)),
                px: Some(px.0),
                qty: Some(open_interest.0),
                ..MarginEventRow::default()
            }),
            Event::Shortfall { account, asset, covered, bad_debt } => {
                let insurance = self
                    .margin_symbol
                    .and_then(|symbol| self.engine.symbol_margin(symbol))
                    .map(|m| i64::from(m.insurance.0));
                rows.margin.push(MarginEventRow {
                    key,
                    event: "shortfall",
                    account: Some(i64::from(account.0)),
                    asset: Some(i64::from(asset.0)),
                    amount: Some(covered.0),
                    bad_debt: Some(bad_debt.0),
                    counterparty: insurance,
                    ..MarginEventRow::default()
                })
            }
            Event::Accepted { order, account, symbol, side, kind, qty, ts: _ } => {
                *cause = Cause::Order("accepted", order);
                self.touched.push(order);
                rows.orders.push(order_row(key, order, account.0, symbol.0, side, kind, qty.0, command));
                let (px, _) = kind.limit_and_budget();
                rows.order_events.push(OrderEventRow {
                    key: keys.next(),
                    px: px.map(|p| p.0),
                    qty: Some(qty.0),
                    ..order_event(order, "accepted")
                });
            }
            Event::Rested { order, px, qty_visible, .. } => {
                *cause = Cause::Order("rested", order);
                rows.order_events.push(OrderEventRow {
                    px: Some(px.0),
                    qty: Some(qty_visible.0),
                    ..order_event(order, "rested")
                });
            }
            Event::Trade {
                symbol,
                px,
                qty,
                taker_side,
                maker_order,
                taker_order,
                maker_account,
                taker_account,
                fee_maker,
                fee_taker,
                maker_done,
            } => {
                *cause = Cause::Trade { maker_account: maker_account.0, maker_order, taker_order };
                self.touched.push(maker_order);
                self.touched.push(taker_order);
                rows.executions.push(ExecutionRow {
                    key,
                    symbol: i64::from(symbol.0),
                    px: px.0,
                    qty: qty.0,
                    taker_side: side_name(taker_side),
                    maker_order: maker_order.0 as i64,
                    taker_order: taker_order.0 as i64,
                    maker_account: i64::from(maker_account.0),
                    taker_account: i64::from(taker_account.0),
                    fee_maker: fee_maker.0,
                    fee_taker: fee_taker.0,
                    maker_done,
                });
                // A fill row for each leg, each with a position of its own.
                rows.order_events.push(OrderEventRow {
                    key: keys.next(),
                    px: Some(px.0),
                    qty: Some(qty.0),
                    reason: Some("maker"),
                    ..order_event(maker_order, "fill")
                });
                rows.order_events.push(OrderEventRow {
                    key: keys.next(),
                    px: Some(px.0),
                    qty: Some(qty.0),
                    reason: Some("taker"),
                    ..order_event(taker_order, "fill")
                });
            }
            Event::Refreshed { order, qty_visible } => {
                *cause = Cause::Order("refreshed", order);
                rows.order_events.push(OrderEventRow { qty: Some(qty_visible.0), ..order_event(order, "refreshed") });
            }
            Event::Reduced { order, qty_by, qty_remaining } => {
                *cause = Cause::Order("reduced", order);
                self.touched.push(order);
                rows.order_events.push(OrderEventRow {
                    qty: Some(qty_by.0),
                    qty_remaining: Some(qty_remaining.0),
                    ..order_event(order, "reduced")
                });
            }
            Event::Moved { order, px } => {
                *cause = Cause::Order("moved", order);
                rows.order_events.push(OrderEventRow { px: Some(px.0), ..order_event(order, "moved") });
            }
            Event::Cancelled { order, qty_cancelled, reason } => {
                *cause = Cause::Order("cancelled", order);
                self.touched.push(order);
                self.cancelled.push(order);
                rows.order_events.push(OrderEventRow {
                    qty: Some(qty_cancelled.0),
                    reason: Some(reason.name()),
                    ..order_event(order, "cancelled")
                });
            }
            Event::Triggered { order, last_px } => {
                *cause = Cause::Order("triggered", order);
                rows.order_events.push(OrderEventRow { px: Some(last_px.0), ..order_event(order, "triggered") });
            }
            Event::DayTrading(_) => unreachable!("handled above"),
        }
    }

    /// A `done` row for each order this command closed.
    fn record_done(&mut self, keys: &mut Keys, rows: &mut Rows) {
        self.touched.sort_unstable();
        self.touched.dedup();
        for &order in &self.touched {
            let status = match self.engine.order_status(order) {
                Some(OrderStatus::Filled) => "filled",
                Some(OrderStatus::Cancelled) => "cancelled",
                Some(OrderStatus::Expired) => "expired",
                Some(OrderStatus::Open | OrderStatus::Pending) => continue,
                // Closed and already out of the engine's ring of recent orders.
                None if self.cancelled.contains(&order) => "cancelled",
                None => "filled",
            };
            rows.order_events.push(OrderEventRow {
                key: keys.next(),
                order_id: order.0 as i64,
                event: "done",
                px: None,
                qty: None,
                qty_remaining: None,
                reason: Some(status),
            });
        }
    }
}

/// Hands out the keys of one entry's rows: one position per row, across tables.
struct Keys {
    log_index: i64,
    pos: i64,
    ts: i64,
    /// The first position of the command's rows.
    command_pos: i64,
}

impl Keys {
    fn next(&mut self) -> RowKey {
        let key = RowKey { log_index: self.log_index, pos: self.pos, ts: self.ts };
        self.pos += 1;
        key
    }
}

#[allow(clippy::too_many_arguments)]
fn order_row(
    key: RowKey,
    order: OrderId,
    account: u32,
    symbol: u32,
    side: Side,
    kind: OrderKind,
    qty: i64,
    command: &Command,
) -> OrderRow {
    let request: Option<&OrderRequest> = match &command.body {
        CommandBody::Place(request) => Some(request),
        _ => None,
    };
    let (px, budget) = kind.limit_and_budget();
    let (kind_name, trigger) = match kind {
        OrderKind::Limit { .. } => ("limit", None),
        OrderKind::Market { .. } => ("market", None),
        OrderKind::StopLimit { trigger, .. } => ("stop_limit", Some(trigger.0)),
        OrderKind::StopMarket { trigger, .. } => ("stop_market", Some(trigger.0)),
    };
    OrderRow {
        key,
        order_id: order.0 as i64,
        account: i64::from(account),
        symbol: i64::from(symbol),
        side: side_name(side),
        kind: kind_name,
        px: px.map(|p| p.0),
        trigger_px: trigger,
        budget: budget.map(|b| b.0),
        qty,
        tif: request.map_or("gtc", |r| match r.tif {
            Tif::Gtc => "gtc",
            Tif::Ioc => "ioc",
            Tif::Fok => "fok",
            Tif::Day => "day",
        }),
        post_only: request.is_some_and(|r| r.post_only),
        display_qty: request.and_then(|r| r.display_qty).map(|q| q.0),
        stp: request.map_or("cancel_resting", |r| match r.stp {
            Stp::CancelResting => "cancel_resting",
            Stp::CancelIncoming => "cancel_incoming",
            Stp::Allow => "allow",
        }),
        client: command.client.0 as i64,
        seq: command.seq as i64,
    }
}

/// The cause of balance movements before any order event of the command.
fn command_cause(body: &CommandBody) -> &'static str {
    match body {
        // An account opened with an external id gets its opening balance as a deposit.
        CommandBody::Deposit { .. } | CommandBody::CreateAccountWithId { .. } => "deposit",
        CommandBody::Withdraw { .. } => "withdraw",
        CommandBody::Credit { .. } => "credit",
        CommandBody::CreateAsset { .. }
        | CommandBody::CreateSymbol(_)
        | CommandBody::CreateAccount
        | CommandBody::SuspendAccount { .. }
        | CommandBody::ResumeAccount { .. }
        | CommandBody::CloseDay
        | CommandBody::SetFairness(_)
        | CommandBody::CreateMarginSymbol(_)
        | CommandBody::SetMark { .. } => "admin",
        CommandBody::Place(_) => "place",
        CommandBody::Cancel { .. } => "cancel",
        CommandBody::Reduce { .. } => "reduce",
        CommandBody::Move { .. } => "move",
        CommandBody::DayTrading(_) => "day_trading",
    }
}

pub(crate) fn side_name(side: Side) -> &'static str {
    match side {
        Side::Buy => "buy",
        Side::Sell => "sell",
    }
}
