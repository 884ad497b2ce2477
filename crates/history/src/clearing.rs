//! The clearing report of a trading day, from the history store alone.
//!
//! A trading day is the stretch of the log closed by a `CloseDay` command: day `n` runs
//! from just after the `(n−1)`-th close (or the log's start) through the `n`-th, whose
//! settlement it includes; the day after the last close is open (reported so far). The
//! boundaries are `trading_days` rows, keyed after every row of the closing command.
//!
//! The report has four parts, each computed from rows of different tables, so the
//! checks at the end compare independent sources:
//!
//! - per account and symbol ([`PositionLine`]): the day's trades netted (`executions`),
//!   the cash they moved and the fees paid; for a margin contract the liquidation
//!   transfers, the P&L the day realised and the variation margin its close settled,
//!   and the position at the opening and the end, which the trades and transfers must
//!   take from one to the other (`margin_events`);
//! - per account and asset ([`CashLine`]): the balance at the day's opening and close
//!   (`balance_movements`), and between them deposits, withdrawals, trades, fees, P&L
//!   and shortfalls, which must add up to the change;
//! - per symbol ([`SymbolLine`]): trades, volume, VWAP; for a margin contract the open
//!   interest at the end (the last position of every account) and the settle price
//!   (the close's `settlement` row, whose open interest must agree);
//! - per asset ([`AssetLine`]), the conservation line at the day's end: every
//!   account's cash plus the fees collected, less bad debt and the cost of open
//!   positions (0 after a settlement), equals deposits minus withdrawals.
//!
//! [`ClearingReport::imbalances`] lists every check that fails; a caller that prints
//! the report fails loudly on any (`bourse clearing report` exits non-zero).
//!
//! The cumulative lines need the log from its start: a history that begins at a
//! snapshot (`begins_at` above 1) is refused.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::store::{Cell, Store, StoreError, Value};

/// Why no report could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClearingError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the history store is empty (no log entry recorded yet)")]
    Empty,
    #[error(
        "the history begins at log index {0} (a snapshot): a clearing report needs the log from its start; \
         rebuild the history from a complete journal (`bourse history rebuild`)"
    )]
    Partial(u64),
    #[error("day {day} is not in the history: {closed} trading days closed, so the days are 1 to {}", closed + 1)]
    NoSuchDay { day: u64, closed: u64 },
    #[error("a total of {0} does not fit in 64 bits")]
    Overflow(&'static str),
}

pub type Result<T> = std::result::Result<T, ClearingError>;

/// A point of the log: a row key `(log_index, pos)` and its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Point {
    pub log_index: i64,
    pub pos: i64,
    pub ts: i64,
}

/// One account's day in one symbol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct PositionLine {
    pub account: i64,
    pub symbol: i64,
    pub symbol_name: String,
    pub margin: bool,
    pub trades: i64,
    pub bought: i64,
    pub sold: i64,
    /// `bought − sold`.
    pub net_qty: i64,
    /// Margin: the quantity received by liquidation transfers (negative: given to the
    /// insurance account); 0 for a spot pair.
    pub transferred: i64,
    /// Margin: the position (signed size) at the day's opening and end, which must be
    /// `opening_position + net_qty + transferred`; 0 for a spot pair.
    pub opening_position: i64,
    pub position: i64,
    /// What the trades paid into the account's quote cash, fees apart: for a spot pair
    /// the sales' value less the purchases'; for a margin contract its P&L (the only
    /// cash a future moves).
    pub cash: i64,
    /// Fees paid (negative: rebates received).
    pub fees: i64,
    /// Margin: P&L realised by the day's reducing trades and transfers.
    pub realized: i64,
    /// Margin: variation margin settled at the day's close.
    pub variation: i64,
    /// Margin: `realized + variation`.
    pub pnl: i64,
}

/// One account's cash in one asset over the day: `opening + deposits − withdrawals +
/// trades − fees + pnl + shortfall = closing`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct CashLine {
    pub account: i64,
    pub asset: i64,
    pub asset_name: String,
    /// Available plus reserved at the day's opening.
    pub opening: i64,
    /// Deposits and credits.
    pub deposits: i64,
    pub withdrawals: i64,
    /// Spot trades: the quote paid and received, the base bought and sold (fees apart).
    pub trades: i64,
    pub fees: i64,
    /// Margin contracts settled in this asset: realised P&L and variation margin.
    pub pnl: i64,
    /// Losses forgiven to this account beyond its cash, less what it paid as an
    /// insurance account.
    pub shortfall: i64,
    /// Available plus reserved at the day's end.
    pub closing: i64,
    pub balanced: bool,
}

/// One symbol's day.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SymbolLine {
    pub symbol: i64,
    pub name: String,
    pub margin: bool,
    pub trades: i64,
    pub volume: i64,
    /// `Σ px × qty`.
    pub notional: i64,
    /// `notional / volume`; `None` without trades.
    pub vwap: Option<f64>,
    /// Margin: the sum of the long positions at the day's end.
    pub open_interest: Option<i64>,
    /// Margin: the price the day's close settled at (`None` for an open day, or when
    /// no position was open).
    pub settle_px: Option<i64>,
}

/// One asset's conservation line at the day's end: `cash + fees − bad_debt −
/// open_cost = supply`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AssetLine {
    pub asset: i64,
    pub name: String,
    /// Deposited and credited, less withdrawn, since the log began.
    pub supply: i64,
    /// Every account's available plus reserved.
    pub cash: i64,
    /// Collected by the exchange since the log began.
    pub fees: i64,
    pub bad_debt: i64,
    /// The cost of the open margin positions settled in this asset.
    pub open_cost: i64,
    pub balanced: bool,
}

/// The clearing report of one trading day.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ClearingReport {
    pub day: u64,
    /// False for the day trading now: the report covers it so far.
    pub closed: bool,
    /// Just before the day's first row (`None`: the log's start).
    pub from: Option<Point>,
    /// The day's close (`None` for the open day: everything recorded so far).
    pub to: Option<Point>,
    pub positions: Vec<PositionLine>,
    pub cash: Vec<CashLine>,
    pub symbols: Vec<SymbolLine>,
    pub assets: Vec<AssetLine>,
    /// Checks that failed (empty when the report balances).
    pub imbalances: Vec<String>,
}

impl ClearingReport {
    /// Every failed check, one line each; empty when the report balances.
    pub fn imbalances(&self) -> &[String] {
        &self.imbalances
    }

    /// The report as CSV: four tables (positions, cash, symbols, assets), each a header
    /// row whose first field names it, then its rows, tables separated by an empty line.
    pub fn csv(&self) -> String {
        let mut out = String::new();
        let mut table = |header: &str, rows: Vec<Vec<String>>| {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(header);
            out.push('\n');
            for row in rows {
                out.push_str(&row.iter().map(|f| csv_field(f)).collect::<Vec<_>>().join(","));
                out.push('\n');
            }
        };
        let day = self.day.to_string();
        let o = |v: Option<i64>| v.map_or(String::new(), |v| v.to_string());
        table(
            "positions,day,account,symbol,margin,trades,bought,sold,net_qty,transferred,opening_position,position,cash,fees,\
             realized,variation,pnl",
            self.positions
                .iter()
                .map(|l| {
                    vec![
                        "position".into(),
                        day.clone(),
                        l.account.to_string(),
                        l.symbol_name.clone(),
                        l.margin.to_string(),
                        l.trades.to_string(),
                        l.bought.to_string(),
                        l.sold.to_string(),
                        l.net_qty.to_string(),
                        l.transferred.to_string(),
                        l.opening_position.to_string(),
                        l.position.to_string(),
                        l.cash.to_string(),
                        l.fees.to_string(),
                        l.realized.to_string(),
                        l.variation.to_string(),
                        l.pnl.to_string(),
                    ]
                })
                .collect(),
        );
        table(
            "cash,day,account,asset,opening,deposits,withdrawals,trades,fees,pnl,shortfall,closing,balanced",
            self.cash
                .iter()
                .map(|l| {
                    vec![
                        "cash".into(),
                        day.clone(),
                        l.account.to_string(),
                        l.asset_name.clone(),
                        l.opening.to_string(),
                        l.deposits.to_string(),
                        l.withdrawals.to_string(),
                        l.trades.to_string(),
                        l.fees.to_string(),
                        l.pnl.to_string(),
                        l.shortfall.to_string(),
                        l.closing.to_string(),
                        l.balanced.to_string(),
                    ]
                })
                .collect(),
        );
        table(
            "symbols,day,symbol,margin,trades,volume,notional,vwap,open_interest,settle_px",
            self.symbols
                .iter()
                .map(|l| {
                    vec![
                        "symbol".into(),
                        day.clone(),
                        l.name.clone(),
                        l.margin.to_string(),
                        l.trades.to_string(),
                        l.volume.to_string(),
                        l.notional.to_string(),
                        l.vwap.map_or(String::new(), |v| format!("{v:.4}")),
                        o(l.open_interest),
                        o(l.settle_px),
                    ]
                })
                .collect(),
        );
        table(
            "assets,day,asset,supply,cash,fees,bad_debt,open_cost,balanced",
            self.assets
                .iter()
                .map(|l| {
                    vec![
                        "asset".into(),
                        day.clone(),
                        l.name.clone(),
                        l.supply.to_string(),
                        l.cash.to_string(),
                        l.fees.to_string(),
                        l.bad_debt.to_string(),
                        l.open_cost.to_string(),
                        l.balanced.to_string(),
                    ]
                })
                .collect(),
        );
        out
    }
}

/// RFC 4180: a field with a comma, a quote or a line break is quoted, quotes doubled.
fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

fn int(v: &Value) -> i64 {
    v.int().unwrap_or(0)
}

fn fit(v: i128, what: &'static str) -> Result<i64> {
    i64::try_from(v).map_err(|_| ClearingError::Overflow(what))
}

/// The rows strictly after `from` and at or before `to`, as SQL and its parameters.
struct Range {
    from: (i64, i64),
    to: (i64, i64),
}

impl Range {
    const SQL: &'static str = "(log_index, pos) > (?, ?) AND (log_index, pos) <= (?, ?)";
    /// Rows up to the end only.
    const UNTIL: &'static str = "(log_index, pos) <= (?, ?)";

    fn params(&self) -> [Cell<'static>; 4] {
        [Cell::Int(self.from.0), Cell::Int(self.from.1), Cell::Int(self.to.0), Cell::Int(self.to.1)]
    }

    fn until(&self) -> [Cell<'static>; 2] {
        [Cell::Int(self.to.0), Cell::Int(self.to.1)]
    }

    fn until_start(&self) -> [Cell<'static>; 2] {
        [Cell::Int(self.from.0), Cell::Int(self.from.1)]
    }
}

struct SymbolInfo {
    name: String,
    base: i64,
    quote: i64,
    margin: bool,
}

/// How many trading days the history has closed.
pub fn days_closed(store: &mut Store) -> Result<u64> {
    let rows = store.query("SELECT COUNT(*) FROM trading_days", &[])?;
    Ok(rows.first().map_or(0, |r| int(&r[0])) as u64)
}

/// The day a report is of when none is named: the last day closed, or day 1 (open)
/// before the first close.
pub fn last_day(store: &mut Store) -> Result<u64> {
    Ok(days_closed(store)?.max(1))
}

/// The clearing report of day `day` (from 1; the day after the last close is the open
/// day, reported so far).
pub fn report(store: &mut Store, day: u64) -> Result<ClearingReport> {
    let progress = store.saved()?.map(|saved| saved.progress).ok_or(ClearingError::Empty)?;
    if progress.begins_at > 1 {
        return Err(ClearingError::Partial(progress.begins_at));
    }
    let closes: Vec<Point> = store
        .query("SELECT log_index, pos, ts FROM trading_days ORDER BY log_index, pos", &[])?
        .iter()
        .map(|r| Point { log_index: int(&r[0]), pos: int(&r[1]), ts: int(&r[2]) })
        .collect();
    let closed_days = closes.len() as u64;
    if day == 0 || day > closed_days + 1 {
        return Err(ClearingError::NoSuchDay { day, closed: closed_days });
    }
    let from = (day >= 2).then(|| closes[day as usize - 2]);
    let to = (day <= closed_days).then(|| closes[day as usize - 1]);
    let range = Range {
        from: from.map_or((-1, -1), |p| (p.log_index, p.pos)),
        to: to.map_or((i64::MAX, i64::MAX), |p| (p.log_index, p.pos)),
    };

    let mut symbols: BTreeMap<i64, SymbolInfo> = BTreeMap::new();
    // The assets and symbols that exist at the day's end.
    let sql = format!("SELECT symbol, name, base, quote, multiplier FROM symbols WHERE {}", Range::UNTIL);
    for r in store.query(&sql, &range.until())? {
        symbols.insert(
            int(&r[0]),
            SymbolInfo {
                name: r[1].text().unwrap_or_default().to_string(),
                base: int(&r[2]),
                quote: int(&r[3]),
                margin: r[4].int().is_some(),
            },
        );
    }
    let mut asset_names: BTreeMap<i64, String> = BTreeMap::new();
    let sql = format!("SELECT asset, name FROM assets WHERE {}", Range::UNTIL);
    for r in store.query(&sql, &range.until())? {
        asset_names.insert(int(&r[0]), r[1].text().unwrap_or_default().to_string());
    }
    let symbol_name = |s: i64| symbols.get(&s).map_or_else(|| format!("#{s}"), |i| i.name.clone());
    let asset_name = |a: i64| asset_names.get(&a).cloned().unwrap_or_else(|| format!("#{a}"));

    // The day's trades, each leg: (account, symbol) → (trades, bought, sold, bought value, sold value, fees).
    #[derive(Default)]
    struct Leg {
        trades: i128,
        bought: i128,
        sold: i128,
        bought_value: i128,
        sold_value: i128,
        fees: i128,
    }
    let mut legs: BTreeMap<(i64, i64), Leg> = BTreeMap::new();
    for (account, fee, maker) in [("maker_account", "fee_maker", true), ("taker_account", "fee_taker", false)] {
        let sql = format!(
            "SELECT {account}, symbol, taker_side, COUNT(*), CAST(SUM(qty) AS BIGINT), CAST(SUM(px * qty) AS BIGINT), \
             CAST(SUM({fee}) AS BIGINT) FROM executions WHERE {} GROUP BY {account}, symbol, taker_side",
            Range::SQL
        );
        for r in store.query(&sql, &range.params())? {
            let leg = legs.entry((int(&r[0]), int(&r[1]))).or_default();
            let buys = (r[2].text() == Some("buy")) != maker;
            let (n, qty, value, fees) = (int(&r[3]), int(&r[4]), int(&r[5]), int(&r[6]));
            leg.trades += i128::from(n);
            leg.fees += i128::from(fees);
            if buys {
                leg.bought += i128::from(qty);
                leg.bought_value += i128::from(value);
            } else {
                leg.sold += i128::from(qty);
                leg.sold_value += i128::from(value);
            }
        }
    }
    // Margin P&L of the day: realised by position changes, settled as variation.
    let mut realized: BTreeMap<(i64, i64), i128> = BTreeMap::new();
    let mut variation: BTreeMap<(i64, i64), i128> = BTreeMap::new();
    let sql = format!(
        "SELECT event, account, symbol, CAST(SUM(amount) AS BIGINT) FROM margin_events \
         WHERE event IN ('position', 'settled') AND {} GROUP BY event, account, symbol",
        Range::SQL
    );
    for r in store.query(&sql, &range.params())? {
        let target = if r[0].text() == Some("position") { &mut realized } else { &mut variation };
        *target.entry((int(&r[1]), int(&r[2]))).or_default() += i128::from(int(&r[3]));
    }

    // Liquidation transfers: (account, symbol) → quantity received.
    let mut transferred: BTreeMap<(i64, i64), i128> = BTreeMap::new();
    let sql = format!(
        "SELECT account, counterparty, symbol, qty FROM margin_events WHERE event = 'transferred' AND {}",
        Range::SQL
    );
    for r in store.query(&sql, &range.params())? {
        let (from_account, to_account, symbol, qty) = (int(&r[0]), int(&r[1]), int(&r[2]), i128::from(int(&r[3])));
        *transferred.entry((from_account, symbol)).or_default() -= qty;
        *transferred.entry((to_account, symbol)).or_default() += qty;
    }
    // Every position's size and cost at the opening and at the end: its last row (a
    // change or a settlement).
    let last_positions = |store: &mut Store, until: &[Cell<'_>]| -> Result<BTreeMap<(i64, i64), (i64, i64)>> {
        let sql = format!(
            "SELECT account, symbol, qty, cost FROM (SELECT account, symbol, qty, cost, ROW_NUMBER() OVER \
             (PARTITION BY account, symbol ORDER BY log_index DESC, pos DESC) AS newest FROM margin_events \
             WHERE event IN ('position', 'settled') AND {}) AS last WHERE newest = 1",
            Range::UNTIL
        );
        Ok(store.query(&sql, until)?.iter().map(|r| ((int(&r[0]), int(&r[1])), (int(&r[2]), int(&r[3])))).collect())
    };
    let positions_opening = if from.is_some() { last_positions(store, &range.until_start())? } else { BTreeMap::new() };
    let positions_end = last_positions(store, &range.until())?;
    let held = |p: &BTreeMap<(i64, i64), (i64, i64)>| -> Vec<(i64, i64)> {
        p.iter().filter(|(_, (size, _))| *size != 0).map(|(k, _)| *k).collect()
    };
    let mut imbalances = Vec::new();
    let mut keys: Vec<(i64, i64)> = legs
        .keys()
        .chain(realized.keys())
        .chain(variation.keys())
        .chain(transferred.keys())
        .copied()
        .chain(held(&positions_opening))
        .chain(held(&positions_end))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    // (account, asset) → trades, fees, pnl of the day.
    let mut flows: BTreeMap<(i64, i64), [i128; 3]> = BTreeMap::new();
    let mut positions = Vec::new();
    for (account, symbol) in keys {
        let leg = legs.remove(&(account, symbol)).unwrap_or_default();
        let info = symbols.get(&symbol);
        let margin = info.is_some_and(|i| i.margin);
        let r = realized.get(&(account, symbol)).copied().unwrap_or(0);
        let v = variation.get(&(account, symbol)).copied().unwrap_or(0);
        let cash = if margin { r + v } else { leg.sold_value - leg.bought_value };
        if let Some(info) = info {
            let quote = flows.entry((account, info.quote)).or_default();
            quote[1] += leg.fees;
            if margin {
                quote[2] += r + v;
            } else {
                quote[0] += leg.sold_value - leg.bought_value;
                flows.entry((account, info.base)).or_default()[0] += leg.bought - leg.sold;
            }
        }
        let moved = transferred.get(&(account, symbol)).copied().unwrap_or(0);
        let size = |p: &BTreeMap<(i64, i64), (i64, i64)>| p.get(&(account, symbol)).map_or(0, |s| i128::from(s.0));
        let (opening_position, position) = (size(&positions_opening), size(&positions_end));
        if margin && opening_position + leg.bought - leg.sold + moved != position {
            imbalances.push(format!(
                "account {account} {}: position {opening_position} + bought {} - sold {} + transferred {moved} is not \
                 its position at the end, {position}",
                symbol_name(symbol),
                leg.bought,
                leg.sold
            ));
        }
        positions.push(PositionLine {
            account,
            symbol,
            symbol_name: symbol_name(symbol),
            margin,
            trades: fit(leg.trades, "trades")?,
            bought: fit(leg.bought, "quantity bought")?,
            sold: fit(leg.sold, "quantity sold")?,
            net_qty: fit(leg.bought - leg.sold, "net quantity")?,
            transferred: fit(moved, "quantity transferred")?,
            opening_position: fit(opening_position, "position")?,
            position: fit(position, "position")?,
            cash: fit(cash, "cash")?,
            fees: fit(leg.fees, "fees")?,
            realized: fit(r, "realised P&L")?,
            variation: fit(v, "variation margin")?,
            pnl: fit(r + v, "P&L")?,
        });
    }

    // Balances at the opening and the close, and the day's deposits and withdrawals.
    let balances = |store: &mut Store, until: &[Cell<'_>]| -> Result<BTreeMap<(i64, i64), i128>> {
        let sql = format!(
            "SELECT account, asset, CAST(SUM(delta_available + delta_reserved) AS BIGINT) FROM balance_movements \
             WHERE {} GROUP BY account, asset",
            Range::UNTIL
        );
        Ok(store.query(&sql, until)?.iter().map(|r| ((int(&r[0]), int(&r[1])), i128::from(int(&r[2])))).collect())
    };
    let opening = if from.is_some() { balances(store, &range.until_start())? } else { BTreeMap::new() };
    let closing = balances(store, &range.until())?;
    let mut deposits: BTreeMap<(i64, i64), (i128, i128)> = BTreeMap::new();
    let sql = format!(
        "SELECT account, asset, cause, CAST(SUM(delta_available + delta_reserved) AS BIGINT) FROM balance_movements \
         WHERE cause IN ('deposit', 'credit', 'withdraw') AND {} GROUP BY account, asset, cause",
        Range::SQL
    );
    for r in store.query(&sql, &range.params())? {
        let entry = deposits.entry((int(&r[0]), int(&r[1]))).or_default();
        match r[2].text() {
            Some("withdraw") => entry.1 -= i128::from(int(&r[3])),
            _ => entry.0 += i128::from(int(&r[3])),
        }
    }
    // Shortfalls: (account, asset) → forgiven less paid as insurer; and bad debt per asset.
    let mut shortfalls: BTreeMap<(i64, i64), i128> = BTreeMap::new();
    let sql = format!(
        "SELECT account, asset, counterparty, amount, bad_debt FROM margin_events WHERE event = 'shortfall' AND {}",
        Range::SQL
    );
    for r in store.query(&sql, &range.params())? {
        let (account, asset, covered, bad_debt) = (int(&r[0]), int(&r[1]), int(&r[3]), int(&r[4]));
        *shortfalls.entry((account, asset)).or_default() += i128::from(covered) + i128::from(bad_debt);
        if let Some(insurance) = r[2].int() {
            *shortfalls.entry((insurance, asset)).or_default() -= i128::from(covered);
        }
    }

    let mut cash_keys: Vec<(i64, i64)> = opening
        .keys()
        .chain(closing.keys())
        .chain(deposits.keys())
        .chain(flows.keys())
        .chain(shortfalls.keys())
        .copied()
        .collect();
    cash_keys.sort_unstable();
    cash_keys.dedup();
    let mut cash = Vec::new();
    for (account, asset) in cash_keys {
        let open = opening.get(&(account, asset)).copied().unwrap_or(0);
        let close = closing.get(&(account, asset)).copied().unwrap_or(0);
        let (deposited, withdrawn) = deposits.get(&(account, asset)).copied().unwrap_or((0, 0));
        let [trades, fees, pnl] = flows.get(&(account, asset)).copied().unwrap_or([0; 3]);
        let shortfall = shortfalls.get(&(account, asset)).copied().unwrap_or(0);
        let expected = open + deposited - withdrawn + trades - fees + pnl + shortfall;
        let balanced = expected == close;
        if !balanced {
            imbalances.push(format!(
                "account {account} {}: opening {open} + deposits {deposited} - withdrawals {withdrawn} + trades {trades} \
                 - fees {fees} + pnl {pnl} + shortfall {shortfall} = {expected}, but its balance closed at {close}",
                asset_name(asset)
            ));
        }
        cash.push(CashLine {
            account,
            asset,
            asset_name: asset_name(asset),
            opening: fit(open, "opening balance")?,
            deposits: fit(deposited, "deposits")?,
            withdrawals: fit(withdrawn, "withdrawals")?,
            trades: fit(trades, "trade cash")?,
            fees: fit(fees, "fees")?,
            pnl: fit(pnl, "P&L")?,
            shortfall: fit(shortfall, "shortfall")?,
            closing: fit(close, "closing balance")?,
            balanced,
        });
    }

    // Per symbol: the day's trades; open interest from the last position of every
    // account at the end; the settlement of the close.
    let mut symbol_lines: BTreeMap<i64, SymbolLine> = BTreeMap::new();
    let sql = format!(
        "SELECT symbol, COUNT(*), CAST(SUM(qty) AS BIGINT), CAST(SUM(px * qty) AS BIGINT) FROM executions \
         WHERE {} GROUP BY symbol",
        Range::SQL
    );
    let traded: BTreeMap<i64, (i64, i64, i64)> = store
        .query(&sql, &range.params())?
        .iter()
        .map(|r| (int(&r[0]), (int(&r[1]), int(&r[2]), int(&r[3]))))
        .collect();
    // symbol → open interest and open cost at the end.
    let mut open: BTreeMap<i64, (i128, i128)> = BTreeMap::new();
    for (&(_, symbol), &(size, cost)) in &positions_end {
        let entry = open.entry(symbol).or_default();
        entry.0 += i128::from(size.max(0));
        entry.1 += i128::from(cost);
    }
    let sql = format!("SELECT symbol, px, qty FROM margin_events WHERE event = 'settlement' AND {}", Range::SQL);
    let settlements: BTreeMap<i64, (i64, i64)> = if to.is_some() {
        store.query(&sql, &range.params())?.iter().map(|r| (int(&r[0]), (int(&r[1]), int(&r[2])))).collect()
    } else {
        BTreeMap::new()
    };
    for (&symbol, info) in &symbols {
        let (trades, volume, notional) = traded.get(&symbol).copied().unwrap_or((0, 0, 0));
        let open_interest = match info.margin {
            true => Some(fit(open.get(&symbol).map_or(0, |o| o.0), "open interest")?),
            false => None,
        };
        let settlement = settlements.get(&symbol).copied();
        if let (Some(oi), Some((px, settled_oi))) = (open_interest, settlement) {
            if oi != settled_oi {
                imbalances.push(format!(
                    "symbol {}: the close settled at {px} an open interest of {settled_oi}, but the positions at the end \
                     add up to {oi}",
                    info.name
                ));
            }
        }
        symbol_lines.insert(
            symbol,
            SymbolLine {
                symbol,
                name: info.name.clone(),
                margin: info.margin,
                trades,
                volume,
                notional,
                vwap: (volume > 0).then(|| notional as f64 / volume as f64),
                open_interest,
                settle_px: settlement.map(|s| s.0),
            },
        );
    }

    // The conservation line per asset, at the end.
    let mut assets: BTreeMap<i64, [i128; 5]> = asset_names.keys().map(|&a| (a, [0; 5])).collect();
    let sql = format!(
        "SELECT asset, CAST(SUM(delta_available + delta_reserved) AS BIGINT) FROM balance_movements \
         WHERE cause IN ('deposit', 'credit', 'withdraw') AND {} GROUP BY asset",
        Range::UNTIL
    );
    for r in store.query(&sql, &range.until())? {
        assets.entry(int(&r[0])).or_default()[0] += i128::from(int(&r[1]));
    }
    for (&(_, asset), &balance) in &closing {
        assets.entry(asset).or_default()[1] += balance;
    }
    let sql = format!(
        "SELECT symbol, CAST(SUM(fee_maker + fee_taker) AS BIGINT) FROM executions WHERE {} GROUP BY symbol",
        Range::UNTIL
    );
    for r in store.query(&sql, &range.until())? {
        if let Some(info) = symbols.get(&int(&r[0])) {
            assets.entry(info.quote).or_default()[2] += i128::from(int(&r[1]));
        }
    }
    let sql = format!(
        "SELECT asset, CAST(SUM(bad_debt) AS BIGINT) FROM margin_events WHERE event = 'shortfall' AND {} GROUP BY asset",
        Range::UNTIL
    );
    for r in store.query(&sql, &range.until())? {
        assets.entry(int(&r[0])).or_default()[3] += i128::from(int(&r[1]));
    }
    for (symbol, (_, cost)) in &open {
        if let Some(info) = symbols.get(symbol) {
            assets.entry(info.quote).or_default()[4] += *cost;
        }
    }
    let mut asset_lines = Vec::new();
    for (asset, [supply, held, fees, bad_debt, open_cost]) in assets {
        let balanced = held + fees - bad_debt - open_cost == supply;
        if !balanced {
            imbalances.push(format!(
                "asset {}: cash {held} + fees {fees} - bad debt {bad_debt} - open cost {open_cost} = {}, but deposits \
                 less withdrawals are {supply}",
                asset_name(asset),
                held + fees - bad_debt - open_cost
            ));
        }
        asset_lines.push(AssetLine {
            asset,
            name: asset_name(asset),
            supply: fit(supply, "supply")?,
            cash: fit(held, "cash")?,
            fees: fit(fees, "fees")?,
            bad_debt: fit(bad_debt, "bad debt")?,
            open_cost: fit(open_cost, "open cost")?,
            balanced,
        });
    }

    Ok(ClearingReport {
        day,
        closed: to.is_some(),
        from,
        to,
        positions,
        cash,
        symbols: symbol_lines.into_values().collect(),
        assets: asset_lines,
        imbalances,
    })
}
