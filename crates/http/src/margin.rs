//! The margin routes: an account's report (balances, margin positions at their marks,
//! margin per settlement asset, open orders), the exchange's report (per-asset totals
//! with the conservation check, open interest per margin symbol) and the operator's
//! mark price. Margin symbols themselves are made by `POST /v1/symbols` with `margin`.
//!
//! The gateway decides who may ask: an account's report only for a key that owns the
//! account (403 otherwise), the exchange's report and the mark only for an
//! administrative key. Each report is read at one log index; names of assets and
//! symbols come from the catalog (asked upstream on a miss).

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use bourse_engine::command::CommandBody;
use bourse_engine::{AccountId, Px, SymbolId};
use bourse_protocol::proto;

use crate::api::{order_from, Body, Key, Param};
use crate::error::ApiError;
use crate::model::{
    Accepted, AccountReport, AssetTotals, Balance, ErrorBody, ExchangeReport, MarginSummary, OpenInterest, Position,
    SetMark,
};
use crate::upstream::Session;
use crate::AppState;

type Shared = Arc<AppState>;
type ApiResult<T> = Result<T, ApiError>;

/// An account's report (a key that owns the account): every balance, every margin
/// position valued at its symbol's mark (unrealised P&L, margins, liquidation price),
/// the margin figures per settlement asset, and the open orders.
#[utoipa::path(get, path = "/v1/accounts/{account}/report", tag = "accounts",
    params(("account" = u32, Path, description = "Account id")),
    responses((status = 200, body = AccountReport), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn account_report(
    State(state): State<Shared>,
    Key(key): Key,
    Param(account): Param<u32>,
) -> ApiResult<Json<AccountReport>> {
    let session = state.upstream.session(key).await?;
    let reply = session.query().account_report(AccountId(account)).await?;
    let mut balances = Vec::with_capacity(reply.balances.len());
    for b in &reply.balances {
        let asset_name = asset_name(&state, &session, b.asset).await?;
        balances.push(Balance { asset: b.asset, asset_name, available: b.available, reserved: b.reserved });
    }
    let mut positions = Vec::with_capacity(reply.positions.len());
    for p in &reply.positions {
        positions.push(position_from(p, symbol_name(&state, &session, p.symbol).await?));
    }
    let mut margin = Vec::with_capacity(reply.margin.len());
    for m in &reply.margin {
        margin.push(margin_from(m, asset_name(&state, &session, m.asset).await?));
    }
    let open_orders =
        reply.open_orders.iter().map(|info| order_from(info, reply.log_index)).collect::<ApiResult<_>>()?;
    Ok(Json(AccountReport { account, log_index: reply.log_index, balances, positions, margin, open_orders }))
}

/// The exchange's report (administrative key): per asset, the totals over every
/// account and whether they balance (available + reserved + fees − bad debt − open
/// cost = supply); per margin symbol, its mark and open interest.
#[utoipa::path(get, path = "/v1/admin/report", tag = "admin",
    responses((status = 200, body = ExchangeReport), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn exchange_report(State(state): State<Shared>, Key(key): Key) -> ApiResult<Json<ExchangeReport>> {
    let session = state.upstream.session(key).await?;
    let reply = session.query().exchange_report().await?;
    let mut assets = Vec::with_capacity(reply.assets.len());
    for a in &reply.assets {
        assets.push(AssetTotals {
            asset: a.asset,
            asset_name: asset_name(&state, &session, a.asset).await?,
            supply: a.supply,
            available: a.available,
            reserved: a.reserved,
            fees: a.fees,
            bad_debt: a.bad_debt,
            open_cost: a.open_cost,
            balanced: a.balanced,
        });
    }
    let mut symbols = Vec::with_capacity(reply.symbols.len());
    for s in &reply.symbols {
        symbols.push(OpenInterest {
            symbol: s.symbol,
            symbol_name: symbol_name(&state, &session, s.symbol).await?,
            mark: s.mark,
            open_interest: s.open_interest,
            longs: s.longs,
            shorts: s.shorts,
        });
    }
    Ok(Json(ExchangeReport { log_index: reply.log_index, days_closed: reply.days_closed, assets, symbols }))
}

/// Sets the mark price of a margin symbol whose mark is the operator's (administrative
/// key): positions are valued, and accounts liquidated, against it at once. A symbol
/// whose mark is the last trade refuses it (`mark_not_settable`).
#[utoipa::path(post, path = "/v1/admin/symbols/{symbol}/mark", tag = "admin", request_body = SetMark,
    params(("symbol" = String, Path, description = "Symbol name (URL-encoded, FUT%2FUSD) or id")),
    responses((status = 200, body = Accepted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn set_mark(
    State(state): State<Shared>,
    Key(key): Key,
    Param(symbol): Param<String>,
    Body(body): Body<SetMark>,
) -> ApiResult<Json<Accepted>> {
    let session = state.upstream.session(key).await?;
    let info = state.upstream.symbol(&session, &symbol).await?;
    Ok(Json(session.submit(CommandBody::SetMark { symbol: SymbolId(info.id), px: Px(body.px) }).await?))
}

fn position_from(p: &proto::PositionInfo, symbol_name: String) -> Position {
    Position {
        symbol: p.symbol,
        symbol_name,
        size: p.size,
        cost: p.cost,
        realized: p.realized,
        buying: p.buying,
        selling: p.selling,
        mark: p.mark,
        unrealized: p.unrealized,
        initial_margin: p.initial_margin,
        maintenance_margin: p.maintenance_margin,
        liquidation_px: p.liquidation_px,
    }
}

fn margin_from(m: &proto::MarginSummary, asset_name: String) -> MarginSummary {
    MarginSummary {
        asset: m.asset,
        asset_name,
        cash: m.cash,
        unrealized: m.unrealized,
        equity: m.equity,
        initial_margin: m.initial_margin,
        maintenance_margin: m.maintenance_margin,
        free_margin: m.free_margin,
    }
}

/// The name of asset `id` (the catalog's, asked upstream on a miss; "" for an asset
/// the exchange does not list, which a report never names).
async fn asset_name(state: &AppState, session: &Session, id: u32) -> ApiResult<String> {
    match state.upstream.asset(session, &id.to_string()).await {
        Ok(asset) => Ok(asset.name),
        Err(ApiError::Rejected(_)) => Ok(String::new()),
        Err(error) => Err(error),
    }
}

/// The name of symbol `id`, as [`asset_name`].
async fn symbol_name(state: &AppState, session: &Session, id: u32) -> ApiResult<String> {
    match state.upstream.symbol(session, &id.to_string()).await {
        Ok(symbol) => Ok(symbol.spec.map(|spec| spec.name).unwrap_or_default()),
        Err(ApiError::Rejected(_)) => Ok(String::new()),
        Err(error) => Err(error),
    }
}
