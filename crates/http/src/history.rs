//! The history routes: an account's statement, an order's history and its protocol
//! query answer, a symbol's trades — read from the history store the gateway was given
//! (`bourse gateway run --http … --history URL`), for orders long gone from the
//! engine's memory.
//!
//! The store answers; the gateway still decides who may ask: a statement, or an
//! order's history, is read only after the gateway answered a balance query for the
//! account with the caller's key (so a key sees only its accounts, as everywhere else).
//! A symbol's trades are market data: any key the gateway accepts may read them. A
//! day's clearing report covers every account: read only after the gateway answered
//! the exchange's report (administrative keys) with the caller's key.
//!
//! Without a configured store the routes answer 404 `not_found`. Store calls block (the
//! PostgreSQL client is synchronous), so they run on tokio's blocking threads, one at a
//! time over one connection, which is reopened after an error.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::Json;
use bourse_engine::AccountId;
use bourse_history::clearing::{self, ClearingError, ClearingReport};
use bourse_history::query::{self, OrderHistory, OrderQuery, Statement};
use bourse_history::store::StoreError;
use bourse_history::Store;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::{Key, Param, Params};
use crate::error::ApiError;
use crate::model::ErrorBody;
use crate::AppState;

type Shared = Arc<AppState>;
type ApiResult<T> = Result<T, ApiError>;

/// The most rows one history request returns.
const LIMIT_MAX: u32 = 100_000;

/// A history store, opened on first use and again after an error.
pub struct HistoryDb {
    url: String,
    store: Mutex<Option<Store>>,
}

impl HistoryDb {
    /// Opens the store at `url` (a SQLite file or `postgres://…`).
    pub async fn open(url: &str) -> Result<Arc<HistoryDb>, String> {
        let owned = url.to_string();
        let store = tokio::task::spawn_blocking(move || Store::open(&owned))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("history store {url}: {e}"))?;
        Ok(Arc::new(HistoryDb { url: url.to_string(), store: Mutex::new(Some(store)) }))
    }

    async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        read: impl FnOnce(&mut Store) -> Result<T, StoreError> + Send + 'static,
    ) -> ApiResult<T> {
        let db = Arc::clone(self);
        let joined = tokio::task::spawn_blocking(move || {
            let mut slot = db.store.lock().expect("history store lock");
            if slot.is_none() {
                *slot = Some(Store::open(&db.url)?);
            }
            let result = read(slot.as_mut().expect("opened"));
            if result.is_err() {
                *slot = None;
            }
            result
        })
        .await;
        match joined {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(ApiError::Unavailable(format!("history store: {error}"))),
            Err(error) => Err(ApiError::Upstream(format!("history store task: {error}"))),
        }
    }
}

fn history(state: &Shared) -> ApiResult<&Arc<HistoryDb>> {
    state
        .history
        .as_ref()
        .ok_or_else(|| ApiError::NotFound("this server has no history store (gateway run --history URL)".into()))
}

/// `?from=&to=&limit=` on history reads: log times in ns since the Unix epoch.
#[derive(Clone, Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryParams {
    /// From this log time, inclusive (default: the beginning).
    pub from: Option<i64>,
    /// To this log time, exclusive (default: the end).
    pub to: Option<i64>,
    /// Rows at most (default 1000, at most 100000); `truncated` says when more matched.
    pub limit: Option<u32>,
}

impl HistoryParams {
    fn window(&self) -> ApiResult<(i64, i64, usize)> {
        let (from, to) = (self.from.unwrap_or(0), self.to.unwrap_or(i64::MAX));
        let limit = self.limit.unwrap_or(1_000);
        if !(1..=LIMIT_MAX).contains(&limit) {
            return Err(ApiError::invalid_parameter("limit must be 1 to 100000"));
        }
        if from > to {
            return Err(ApiError::invalid_parameter("from must not be after to"));
        }
        Ok((from, to, limit as usize))
    }
}

/// A symbol's executions from the history.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct HistoryTrades {
    pub symbol: u32,
    pub trades: Vec<HistoryTrade>,
    /// More trades matched than were returned.
    pub truncated: bool,
}

/// One trade. Who traded is shown side by side to whom it concerns: an admin key sees
/// both sides; another key sees the account, order and fee of its own side only (the
/// other side's are null), as the live trade feed shows no account at all.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct HistoryTrade {
    pub log_index: i64,
    pub pos: i64,
    pub ts: i64,
    pub symbol: i64,
    pub px: i64,
    pub qty: i64,
    pub taker_side: String,
    pub maker_order: Option<i64>,
    pub taker_order: Option<i64>,
    pub maker_account: Option<i64>,
    pub taker_account: Option<i64>,
    pub fee_maker: Option<i64>,
    pub fee_taker: Option<i64>,
    /// Whether the trade filled the maker order (null with the maker side).
    pub maker_done: Option<bool>,
}

impl HistoryTrade {
    /// `execution` as `rights` may see it (none: only what anyone may see).
    pub fn shown(execution: query::Execution, rights: Option<&bourse_port::KeyRights>) -> HistoryTrade {
        let sees = |account: i64| rights.is_some_and(|r| u32::try_from(account).is_ok_and(|account| r.sees(account)));
        let (maker, taker) = (sees(execution.maker_account), sees(execution.taker_account));
        HistoryTrade {
            log_index: execution.log_index,
            pos: execution.pos,
            ts: execution.ts,
            symbol: execution.symbol,
            px: execution.px,
            qty: execution.qty,
            taker_side: execution.taker_side,
            maker_order: maker.then_some(execution.maker_order),
            taker_order: taker.then_some(execution.taker_order),
            maker_account: maker.then_some(execution.maker_account),
            taker_account: taker.then_some(execution.taker_account),
            fee_maker: maker.then_some(execution.fee_maker),
            fee_taker: taker.then_some(execution.fee_taker),
            maker_done: maker.then_some(execution.maker_done),
        }
    }
}

/// Asks the gateway about `account` with the caller's key: refused unless the key
/// acts for it.
async fn authorize_account(state: &Shared, key: Option<String>, account: u32) -> ApiResult<()> {
    let session = state.upstream.session(key).await?;
    session.query().balances(AccountId(account)).await?;
    Ok(())
}

/// An account's balance movements between two log times, with the balances before and
/// after: every deposit, withdrawal, reservation, release, trade and fee.
#[utoipa::path(get, path = "/v1/accounts/{account}/statement", tag = "history",
    params(("account" = u32, Path, description = "Account id"), HistoryParams),
    responses((status = 200, body = Statement), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 502, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn statement(
    State(state): State<Shared>,
    Key(key): Key,
    Param(account): Param<u32>,
    Params(params): Params<HistoryParams>,
) -> ApiResult<Json<Statement>> {
    let db = Arc::clone(history(&state)?);
    let (from, to, limit) = params.window()?;
    authorize_account(&state, key, account).await?;
    let statement = db.run(move |store| query::account_statement(store, i64::from(account), from, to, limit)).await?;
    Ok(Json(statement))
}

/// Reads an order's history and checks the caller may see its account.
async fn order_read<T: Send + 'static>(
    state: &Shared,
    key: Option<String>,
    order: u64,
    read: impl FnOnce(&mut Store, i64) -> Result<Option<T>, StoreError> + Send + 'static,
    account_of: impl Fn(&T) -> i64,
) -> ApiResult<T> {
    let db = Arc::clone(history(state)?);
    let id = i64::try_from(order).map_err(|_| ApiError::invalid_parameter("order id out of range"))?;
    let found = db.run(move |store| read(store, id)).await?;
    let missing = || ApiError::NotFound(format!("order {order} is not in the history"));
    let found = found.ok_or_else(missing)?;
    let account = u32::try_from(account_of(&found)).map_err(|_| ApiError::Upstream("an order of no account".into()))?;
    // Another key's order answers exactly as a missing one: a refusal would say that it
    // exists, and whose it is.
    match authorize_account(state, key, account).await {
        Err(ApiError::Forbidden(_)) => Err(missing()),
        other => other.map(|()| found),
    }
}

/// An order as accepted, every state change (accepted, rested, triggered, refreshed,
/// moved, reduced, fill, cancelled, done) and its executions, from the history: also
/// for orders the engine no longer remembers.
#[utoipa::path(get, path = "/v1/orders/{order}/history", tag = "history",
    params(("order" = u64, Path, description = "Order id")),
    responses((status = 200, body = OrderHistory), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 502, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn order_history(
    State(state): State<Shared>,
    Key(key): Key,
    Param(order): Param<u64>,
) -> ApiResult<Json<OrderHistory>> {
    let found = order_read(&state, key, order, query::order_history, |h: &OrderHistory| h.order.account).await?;
    Ok(Json(found))
}

/// An exchange protocol's order query: the open quantity, each cancelled part and each
/// executed part with price and time.
#[utoipa::path(get, path = "/v1/orders/{order}/query", tag = "history",
    params(("order" = u64, Path, description = "Order id")),
    responses((status = 200, body = OrderQuery), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 502, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn order_query(
    State(state): State<Shared>,
    Key(key): Key,
    Param(order): Param<u64>,
) -> ApiResult<Json<OrderQuery>> {
    let found = order_read(&state, key, order, query::order_query, |q: &OrderQuery| q.order.account).await?;
    Ok(Json(found))
}

/// The executions of a symbol between two log times, oldest first, from the history.
#[utoipa::path(get, path = "/v1/history/trades/{symbol}", tag = "history",
    params(("symbol" = String, Path, description = "Symbol name (URL-encoded, ACME%2FUSD) or id"), HistoryParams),
    responses((status = 200, body = HistoryTrades), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 502, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn trades(
    State(state): State<Shared>,
    Key(key): Key,
    Param(symbol): Param<String>,
    Params(params): Params<HistoryParams>,
) -> ApiResult<Json<HistoryTrades>> {
    let db = Arc::clone(history(&state)?);
    let (from, to, limit) = params.window()?;
    let rights = state.upstream.rights(key.as_deref());
    let session = state.upstream.session(key).await?;
    let info = state.upstream.symbol(&session, &symbol).await?;
    let id = info.id;
    let (trades, truncated) = db.run(move |store| query::trades(store, i64::from(id), from, to, limit)).await?;
    let trades = trades.into_iter().map(|trade| HistoryTrade::shown(trade, rights.as_ref())).collect();
    Ok(Json(HistoryTrades { symbol: id, trades, truncated }))
}

/// `?day=` of the clearing report.
#[derive(Clone, Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ClearingParams {
    /// The trading day: the N-th close of the day closes day N; the day after the last
    /// close is reported so far (default: the last day closed, or the open day if none).
    pub day: Option<u64>,
}

/// A trading day's clearing report from the history (administrative key): per account
/// and symbol the day's trades netted, liquidation transfers, positions, cash, fees and
/// P&L; per account and asset the opening balance, the day's flows and the closing
/// balance; per symbol volume, VWAP, open interest and the settle price; per asset the
/// conservation line. `imbalances` lists every check that fails (empty when it balances).
#[utoipa::path(get, path = "/v1/admin/clearing", tag = "admin",
    params(ClearingParams),
    responses((status = 200, body = ClearingReport), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 502, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn clearing(
    State(state): State<Shared>,
    Key(key): Key,
    Params(params): Params<ClearingParams>,
) -> ApiResult<Json<ClearingReport>> {
    let db = Arc::clone(history(&state)?);
    let session = state.upstream.session(key).await?;
    session.query().exchange_report().await?;
    let report = db
        .run(move |store| {
            let report = match params.day {
                Some(day) => clearing::report(store, day),
                None => clearing::last_day(store).and_then(|day| clearing::report(store, day)),
            };
            match report {
                Err(ClearingError::Store(error)) => Err(error),
                other => Ok(other),
            }
        })
        .await?;
    match report {
        Ok(report) => Ok(Json(report)),
        Err(error @ (ClearingError::NoSuchDay { .. } | ClearingError::Empty)) => {
            Err(ApiError::NotFound(error.to_string()))
        }
        // A history that begins at a snapshot, or a total past 64 bits: this store
        // cannot give the report.
        Err(error) => Err(ApiError::Unavailable(error.to_string())),
    }
}
