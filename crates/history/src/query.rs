//! The queries the history answers, one SQL text each for both backends.
//!
//! - [`account_statement`]: an account's balance movements between two log times, with
//!   the balances before and after.
//! - [`order_history`]: an order as accepted, every state change, its executions.
//! - [`trades`]: the executions of a symbol between two times.
//! - [`order_query`]: what an exchange protocol's order query reports (the ECE-style
//!   `<query id>`: the open quantity, the cancelled part and its time, each executed
//!   part with price and time), for orders the engine no longer remembers.
//! - [`order_view`]: an order as the engine's own order query reports it, rebuilt from
//!   its rows (what the XML front end answers with, past the engine's memory).
//!
//! Times are log timestamps in nanoseconds since the Unix epoch, `from` inclusive and
//! `to` exclusive. Results are bounded by a `limit` the caller gives (at most
//! [`ROWS_MAX`]); `truncated` says when more rows matched.

use bourse_engine::command::{OrderKind, Tif};
use bourse_engine::{AccountId, Amount, Fill, OrderId, OrderRecord, OrderStatus, OrderView, Px, Qty, Side, SymbolId};
use serde::Serialize;

use crate::store::{Cell, Progress, Result, Store, StoreError, Value};

/// The most rows one query returns.
pub const ROWS_MAX: usize = 100_000;

/// A balance at a point in the statement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AssetBalance {
    pub asset: i64,
    pub available: i64,
    pub reserved: i64,
}

/// One balance movement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Movement {
    pub log_index: i64,
    pub pos: i64,
    pub ts: i64,
    pub asset: i64,
    pub delta_available: i64,
    pub delta_reserved: i64,
    pub available: i64,
    pub reserved: i64,
    /// `deposit`, `withdraw`, `credit`, or the order event it followed (`accepted`,
    /// `trade`, `cancelled`, `reduced`, `moved`, `triggered`, `refreshed`).
    pub cause: String,
    pub order_id: Option<i64>,
}

/// An account's statement between two times.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Statement {
    pub account: i64,
    pub from_ts: i64,
    pub to_ts: i64,
    /// Each asset's balance before `from_ts` (assets the account held by then).
    pub opening: Vec<AssetBalance>,
    pub movements: Vec<Movement>,
    /// Each asset's balance after the last movement listed.
    pub closing: Vec<AssetBalance>,
    /// More movements matched than were returned.
    pub truncated: bool,
}

/// An order as accepted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OrderEntry {
    pub order_id: i64,
    pub log_index: i64,
    pub ts: i64,
    pub account: i64,
    pub symbol: i64,
    pub side: String,
    pub kind: String,
    pub px: Option<i64>,
    pub trigger_px: Option<i64>,
    pub budget: Option<i64>,
    pub qty: i64,
    pub tif: String,
    pub post_only: bool,
    pub display_qty: Option<i64>,
    pub stp: String,
    pub client: i64,
    pub seq: i64,
}

/// One state change of an order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OrderChange {
    pub log_index: i64,
    pub pos: i64,
    pub ts: i64,
    /// `accepted`, `rested`, `triggered`, `refreshed`, `moved`, `reduced`, `fill`,
    /// `cancelled`, `done`. A `moved` change with a quantity is a move that rested at
    /// once at its new price, showing that quantity (no `rested` change follows it).
    pub event: String,
    pub px: Option<i64>,
    pub qty: Option<i64>,
    pub qty_remaining: Option<i64>,
    /// A cancel's reason, `maker`/`taker` for a fill, the final status for `done`.
    pub reason: Option<String>,
}

/// One trade, both legs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Execution {
    pub log_index: i64,
    pub pos: i64,
    pub ts: i64,
    pub symbol: i64,
    pub px: i64,
    pub qty: i64,
    pub taker_side: String,
    pub maker_order: i64,
    pub taker_order: i64,
    pub maker_account: i64,
    pub taker_account: i64,
    pub fee_maker: i64,
    pub fee_taker: i64,
    pub maker_done: bool,
}

/// An order's whole history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OrderHistory {
    pub order: OrderEntry,
    pub changes: Vec<OrderChange>,
    pub executions: Vec<Execution>,
}

/// A part of an order that was cancelled (by a cancel, a reduce or an unfilled
/// remainder) or executed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OrderPart {
    pub qty: i64,
    /// Executions only.
    pub px: Option<i64>,
    pub ts: i64,
}

/// The answer to an exchange protocol's order query.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OrderQuery {
    pub order: OrderEntry,
    /// Quantity still open (resting or waiting as a stop); 0 once done.
    pub qty_open: i64,
    pub cancelled: Vec<OrderPart>,
    pub executed: Vec<OrderPart>,
    /// `open`, `filled` or `cancelled`.
    pub status: String,
}

fn int(v: &Value) -> i64 {
    v.int().unwrap_or(0)
}

fn opt(v: &Value) -> Option<i64> {
    v.int()
}

fn text(v: &Value) -> String {
    v.text().unwrap_or_default().to_string()
}

fn limit_of(limit: usize) -> i64 {
    limit.clamp(1, ROWS_MAX) as i64
}

/// Where the store stands.
pub fn progress(store: &mut Store) -> Result<Option<Progress>> {
    Ok(store.saved()?.map(|saved| saved.progress))
}

/// The assets an account's balance ever moved in, by seeks on `balance_movements`' key
/// (account, asset, …): one query per asset, not a scan of the account's movements.
fn account_assets(store: &mut Store, account: i64) -> Result<Vec<i64>> {
    let mut assets = Vec::new();
    let mut after = -1i64;
    loop {
        let next = store.query(
            "SELECT asset FROM balance_movements WHERE account = ? AND asset > ? ORDER BY asset LIMIT 1",
            &[Cell::Int(account), Cell::Int(after)],
        )?;
        let Some(asset) = next.first().and_then(|r| r[0].int()) else { return Ok(assets) };
        assets.push(asset);
        after = asset;
    }
}

fn movement(r: &[Value]) -> Movement {
    Movement {
        log_index: int(&r[0]),
        pos: int(&r[1]),
        ts: int(&r[2]),
        asset: int(&r[3]),
        delta_available: int(&r[4]),
        delta_reserved: int(&r[5]),
        available: int(&r[6]),
        reserved: int(&r[7]),
        cause: text(&r[8]),
        order_id: opt(&r[9]),
    }
}

/// An account's balance movements with `from_ts <= ts < to_ts`, at most `limit`.
///
/// `balance_movements` is stored by (account, asset, ts, log_index, pos), so each asset
/// is read as one range (its opening balance is one seek before it) and the assets'
/// movements are merged into log order here: the first `limit` of the merge are among
/// the first `limit` of each asset.
pub fn account_statement(store: &mut Store, account: i64, from_ts: i64, to_ts: i64, limit: usize) -> Result<Statement> {
    let limit = limit_of(limit);
    let mut opening = Vec::new();
    let mut movements = Vec::new();
    for asset in account_assets(store, account)? {
        let last = store.query(
            "SELECT available, reserved FROM balance_movements WHERE account = ? AND asset = ? AND ts < ? \
             ORDER BY ts DESC, log_index DESC, pos DESC LIMIT 1",
            &[Cell::Int(account), Cell::Int(asset), Cell::Int(from_ts)],
        )?;
        if let Some(row) = last.first() {
            opening.push(AssetBalance { asset, available: int(&row[0]), reserved: int(&row[1]) });
        }
        let rows = store.query(
            "SELECT log_index, pos, ts, asset, delta_available, delta_reserved, available, reserved, cause, order_id \
             FROM balance_movements WHERE account = ? AND asset = ? AND ts >= ? AND ts < ? \
             ORDER BY ts, log_index, pos LIMIT ?",
            &[Cell::Int(account), Cell::Int(asset), Cell::Int(from_ts), Cell::Int(to_ts), Cell::Int(limit + 1)],
        )?;
        movements.extend(rows.iter().map(|r| movement(r)));
    }
    movements.sort_unstable_by_key(|m| (m.log_index, m.pos));
    let truncated = movements.len() as i64 > limit;
    movements.truncate(limit as usize);
    let mut closing = opening.clone();
    for movement in &movements {
        let balance =
            AssetBalance { asset: movement.asset, available: movement.available, reserved: movement.reserved };
        match closing.iter_mut().find(|b| b.asset == movement.asset) {
            Some(slot) => *slot = balance,
            None => closing.push(balance),
        }
    }
    closing.sort_by_key(|b| b.asset);
    Ok(Statement { account, from_ts, to_ts, opening, movements, closing, truncated })
}

const ORDER_COLUMNS: &str = "order_id, log_index, ts, account, symbol, side, kind, px, trigger_px, budget, qty, tif, \
                             post_only, display_qty, stp, client, seq";

fn order_entry(r: &[Value]) -> OrderEntry {
    OrderEntry {
        order_id: int(&r[0]),
        log_index: int(&r[1]),
        ts: int(&r[2]),
        account: int(&r[3]),
        symbol: int(&r[4]),
        side: text(&r[5]),
        kind: text(&r[6]),
        px: opt(&r[7]),
        trigger_px: opt(&r[8]),
        budget: opt(&r[9]),
        qty: int(&r[10]),
        tif: text(&r[11]),
        post_only: int(&r[12]) != 0,
        display_qty: opt(&r[13]),
        stp: text(&r[14]),
        client: int(&r[15]),
        seq: int(&r[16]),
    }
}

const EXECUTION_COLUMNS: &str = "log_index, pos, ts, symbol, px, qty, taker_side, maker_order, taker_order, \
                                 maker_account, taker_account, fee_maker, fee_taker, maker_done";

fn execution(r: &[Value]) -> Execution {
    Execution {
        log_index: int(&r[0]),
        pos: int(&r[1]),
        ts: int(&r[2]),
        symbol: int(&r[3]),
        px: int(&r[4]),
        qty: int(&r[5]),
        taker_side: text(&r[6]),
        maker_order: int(&r[7]),
        taker_order: int(&r[8]),
        maker_account: int(&r[9]),
        taker_account: int(&r[10]),
        fee_maker: int(&r[11]),
        fee_taker: int(&r[12]),
        maker_done: int(&r[13]) != 0,
    }
}

/// An order as accepted, if the history has it.
pub fn order(store: &mut Store, order_id: i64) -> Result<Option<OrderEntry>> {
    let rows =
        store.query(&format!("SELECT {ORDER_COLUMNS} FROM orders WHERE order_id = ?"), &[Cell::Int(order_id)])?;
    Ok(rows.first().map(|r| order_entry(r)))
}

/// An order with every state change and its executions; `None` if unknown.
pub fn order_history(store: &mut Store, order_id: i64) -> Result<Option<OrderHistory>> {
    let Some(order) = order(store, order_id)? else { return Ok(None) };
    let changes = store
        .query(
            "SELECT log_index, pos, ts, event, px, qty, qty_remaining, reason FROM order_events \
             WHERE order_id = ? ORDER BY log_index, pos",
            &[Cell::Int(order_id)],
        )?
        .iter()
        .map(|r| OrderChange {
            log_index: int(&r[0]),
            pos: int(&r[1]),
            ts: int(&r[2]),
            event: text(&r[3]),
            px: opt(&r[4]),
            qty: opt(&r[5]),
            qty_remaining: opt(&r[6]),
            reason: r[7].text().map(str::to_string),
        })
        .collect();
    let executions = store
        .query(
            &format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions WHERE maker_order = ? \
                 UNION SELECT {EXECUTION_COLUMNS} FROM executions WHERE taker_order = ? ORDER BY log_index, pos"
            ),
            &[Cell::Int(order_id), Cell::Int(order_id)],
        )?
        .iter()
        .map(|r| execution(r))
        .collect();
    Ok(Some(OrderHistory { order, changes, executions }))
}

/// The executions of a symbol with `from_ts <= ts < to_ts`, oldest first, at most `limit`.
pub fn trades(
    store: &mut Store,
    symbol: i64,
    from_ts: i64,
    to_ts: i64,
    limit: usize,
) -> Result<(Vec<Execution>, bool)> {
    let limit = limit_of(limit);
    let rows = store.query(
        &format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions WHERE symbol = ? AND ts >= ? AND ts < ? \
             ORDER BY ts, log_index, pos LIMIT ?"
        ),
        &[Cell::Int(symbol), Cell::Int(from_ts), Cell::Int(to_ts), Cell::Int(limit + 1)],
    )?;
    let truncated = rows.len() as i64 > limit;
    Ok((rows.iter().take(limit as usize).map(|r| execution(r)).collect(), truncated))
}

/// A symbol's id by name.
pub fn symbol_id(store: &mut Store, name: &str) -> Result<Option<i64>> {
    let rows = store.query("SELECT symbol FROM symbols WHERE name = ?", &[Cell::Text(name)])?;
    Ok(rows.first().and_then(|r| r[0].int()))
}

/// What an order query reports for `order_id`; `None` if unknown.
pub fn order_query(store: &mut Store, order_id: i64) -> Result<Option<OrderQuery>> {
    let Some(history) = order_history(store, order_id)? else { return Ok(None) };
    let mut cancelled = Vec::new();
    let mut executed = Vec::new();
    let mut qty_open = history.order.qty;
    let mut status = "open";
    for change in &history.changes {
        match change.event.as_str() {
            "fill" => {
                let qty = change.qty.unwrap_or(0);
                qty_open -= qty;
                executed.push(OrderPart { qty, px: change.px, ts: change.ts });
            }
            "cancelled" | "reduced" => {
                let qty = change.qty.unwrap_or(0);
                qty_open -= qty;
                cancelled.push(OrderPart { qty, px: None, ts: change.ts });
            }
            "done" => status = if change.reason.as_deref() == Some("filled") { "filled" } else { "cancelled" },
            _ => {}
        }
    }
    if status != "open" {
        qty_open = 0;
    }
    Ok(Some(OrderQuery { order: history.order, qty_open: qty_open.max(0), cancelled, executed, status: status.into() }))
}

/// An order as the engine's own order query reports it (`Engine::order`), rebuilt from
/// its rows; `None` if unknown. For an order the engine no longer remembers (closed,
/// then pushed out of its ring of `orders_closed_max` closed orders) this is what the
/// engine answered while it still did, field for field: kind and time in force as
/// placed, filled, reduced and cancelled quantities, status, every fill with its fee,
/// side of the book, counter order and time, and the time it closed. For an open order
/// it adds the resting price and the open and visible quantities after its last event.
pub fn order_view(store: &mut Store, order_id: i64) -> Result<Option<OrderView>> {
    let Some(history) = order_history(store, order_id)? else { return Ok(None) };
    let order = &history.order;
    let invalid = |what: &str| StoreError::Invalid(format!("order {order_id}: {what}"));
    let px = |v: Option<i64>| v.map(Px).ok_or_else(|| invalid("a price is missing"));
    let kind = match order.kind.as_str() {
        "limit" => OrderKind::Limit { px: px(order.px)? },
        "market" => OrderKind::Market { budget: order.budget.map(Amount) },
        "stop_limit" => OrderKind::StopLimit { trigger: px(order.trigger_px)?, px: px(order.px)? },
        "stop_market" => OrderKind::StopMarket { trigger: px(order.trigger_px)?, budget: order.budget.map(Amount) },
        other => return Err(invalid(&format!("unknown kind {other:?}"))),
    };
    let tif = match order.tif.as_str() {
        "gtc" => Tif::Gtc,
        "ioc" => Tif::Ioc,
        "fok" => Tif::Fok,
        "day" => Tif::Day,
        other => return Err(invalid(&format!("unknown time in force {other:?}"))),
    };
    let side = match order.side.as_str() {
        "buy" => Side::Buy,
        "sell" => Side::Sell,
        other => return Err(invalid(&format!("unknown side {other:?}"))),
    };
    let mut status = if kind.trigger().is_some() { OrderStatus::Pending } else { OrderStatus::Open };
    let (mut qty_filled, mut qty_reduced, mut ts_closed) = (0i64, 0i64, 0u64);
    let (mut px_resting, mut qty_visible) = (None, 0i64);
    for change in &history.changes {
        let qty = change.qty.unwrap_or(0);
        match change.event.as_str() {
            "triggered" => status = OrderStatus::Open,
            "rested" => (px_resting, qty_visible) = (change.px, qty),
            // A move that rested at once carries the quantity it shows.
            "moved" => {
                px_resting = change.px;
                if let Some(shown) = change.qty {
                    qty_visible = shown;
                }
            }
            "refreshed" => qty_visible = qty,
            "fill" => {
                qty_filled += qty;
                if change.reason.as_deref() == Some("maker") {
                    qty_visible -= qty;
                }
            }
            "reduced" => {
                qty_reduced += qty;
                qty_visible = qty_visible.min(change.qty_remaining.unwrap_or(0));
            }
            "done" => {
                ts_closed = change.ts as u64;
                status = match change.reason.as_deref() {
                    Some("filled") => OrderStatus::Filled,
                    Some("cancelled") => OrderStatus::Cancelled,
                    Some("expired") => OrderStatus::Expired,
                    other => return Err(invalid(&format!("unknown final status {other:?}"))),
                };
            }
            _ => {}
        }
    }
    let fills = history
        .executions
        .iter()
        .map(|e| {
            let maker = e.maker_order == order_id;
            Fill {
                px: Px(e.px),
                qty: Qty(e.qty),
                fee: Amount(if maker { e.fee_maker } else { e.fee_taker }),
                maker,
                counter_order: OrderId(if maker { e.taker_order } else { e.maker_order } as u64),
                ts: e.ts as u64,
            }
        })
        .collect();
    let record = OrderRecord {
        id: OrderId(order.order_id as u64),
        account: AccountId(order.account as u32),
        symbol: SymbolId(order.symbol as u32),
        side,
        kind,
        tif,
        qty: Qty(order.qty),
        qty_filled: Qty(qty_filled),
        qty_reduced: Qty(qty_reduced),
        status,
        ts: order.ts as u64,
        fills,
        ts_closed,
    };
    let (px_resting, qty_open, qty_visible, qty_cancelled) = match status {
        OrderStatus::Open => (px_resting.map(Px), Qty(order.qty - qty_filled - qty_reduced), Qty(qty_visible), Qty(0)),
        OrderStatus::Pending => (None, Qty(order.qty), Qty(0), Qty(0)),
        OrderStatus::Filled => (None, Qty(0), Qty(0), Qty(0)),
        OrderStatus::Cancelled | OrderStatus::Expired => {
            (None, Qty(0), Qty(0), Qty(order.qty - qty_filled - qty_reduced))
        }
    };
    Ok(Some(OrderView { record, px_resting, qty_open, qty_visible, qty_cancelled }))
}
