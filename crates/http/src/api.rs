//! The REST routes, their handlers, and the OpenAPI document generated from them.
//!
//! Each handler authenticates (passes the caller's key upstream), checks the request's
//! shape, translates it into one gRPC call or one command, and translates the answer
//! back. A command is answered only once it is committed and applied; the reply names
//! the log entry. Commands that need an order's account and symbol (cancel, move,
//! reduce) read the order first, so a client needs only the order id.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use bourse_engine::command::{CommandBody, MarginSymbol, MatchPolicy, OrderKind, OrderRequest, Stp, SymbolSpec, Tif};
use bourse_engine::{AccountId, Amount, AssetId, OrderId, Px, Qty, SymbolId};
use bourse_protocol::convert::{self, ConvertError};
use bourse_protocol::proto;
use serde::de::DeserializeOwned;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::error::ApiError;
use crate::model::*;
use crate::upstream::Session;
use crate::AppState;

type Shared = Arc<AppState>;
type ApiResult<T> = Result<T, ApiError>;

/// Every route.
pub fn router(state: Shared) -> Router {
    let web_dir = state.config.web_dir.clone();
    let router = Router::new()
        .route("/openapi.json", get(openapi))
        .route("/health", get(health))
        .route("/v1/assets", get(list_assets).post(create_asset))
        .route("/v1/symbols", get(list_symbols).post(create_symbol))
        .route("/v1/accounts", post(create_account))
        .route("/v1/accounts/{account}/balances", get(get_balances))
        .route("/v1/accounts/{account}/report", get(crate::margin::account_report))
        .route("/v1/accounts/{account}/orders", get(account_orders))
        .route("/v1/accounts/{account}/deposits", post(deposit))
        .route("/v1/accounts/{account}/withdrawals", post(withdraw))
        .route("/v1/accounts/{account}/credits", post(credit))
        .route("/v1/orders", post(place_order))
        .route("/v1/orders/{order}", get(get_order).delete(cancel_order))
        .route("/v1/orders/{order}/fills", get(order_fills))
        .route("/v1/orders/{order}/move", post(move_order))
        .route("/v1/orders/{order}/reduce", post(reduce_order))
        .route("/v1/books/{symbol}", get(get_book))
        .route("/v1/trades/{symbol}", get(get_trades))
        .route("/v1/accounts/{account}/statement", get(crate::history::statement))
        .route("/v1/orders/{order}/history", get(crate::history::order_history))
        .route("/v1/orders/{order}/query", get(crate::history::order_query))
        .route("/v1/history/trades/{symbol}", get(crate::history::trades))
        .route("/v1/admin/clearing", get(crate::history::clearing))
        .route("/v1/admin/close-day", post(close_day))
        .route("/v1/admin/report", get(crate::margin::exchange_report))
        .route("/v1/admin/symbols/{symbol}/mark", post(crate::margin::set_mark))
        .route("/v1/daytrading/users/{userid}/add", post(crate::daytrading::add))
        .route("/v1/daytrading/users/{userid}/quote", post(crate::daytrading::quote))
        .route("/v1/daytrading/users/{userid}/buy", post(crate::daytrading::buy))
        .route("/v1/daytrading/users/{userid}/buy/commit", post(crate::daytrading::commit_buy))
        .route("/v1/daytrading/users/{userid}/buy/cancel", post(crate::daytrading::cancel_buy))
        .route("/v1/daytrading/users/{userid}/sell", post(crate::daytrading::sell))
        .route("/v1/daytrading/users/{userid}/sell/commit", post(crate::daytrading::commit_sell))
        .route("/v1/daytrading/users/{userid}/sell/cancel", post(crate::daytrading::cancel_sell))
        .route("/v1/daytrading/users/{userid}/buy-triggers/{symbol}/amount", put(crate::daytrading::set_buy_amount))
        .route("/v1/daytrading/users/{userid}/buy-triggers/{symbol}/price", put(crate::daytrading::set_buy_trigger))
        .route("/v1/daytrading/users/{userid}/buy-triggers/{symbol}", delete(crate::daytrading::cancel_set_buy))
        .route("/v1/daytrading/users/{userid}/sell-triggers/{symbol}/amount", put(crate::daytrading::set_sell_amount))
        .route("/v1/daytrading/users/{userid}/sell-triggers/{symbol}/price", put(crate::daytrading::set_sell_trigger))
        .route("/v1/daytrading/users/{userid}/sell-triggers/{symbol}", delete(crate::daytrading::cancel_set_sell))
        .route("/v1/daytrading/users/{userid}/summary", get(crate::daytrading::summary))
        .route("/v1/daytrading/users/{userid}/dumplog", get(crate::daytrading::user_dumplog))
        .route("/v1/daytrading/dumplog", post(crate::daytrading::dumplog))
        .route("/v1/ws", get(crate::ws::upgrade))
        .route("/v1/cluster", get(crate::control::cluster))
        .route("/v1/cluster/nodes/{id}/kill", post(crate::control::kill))
        .route("/v1/demo/stats", get(crate::control::stats))
        .route("/v1/demo/guest", get(crate::control::guest));
    let router = match web_dir {
        // The browser UI at `/`; unknown paths outside /v1 get the files' 404.
        Some(dir) => router.fallback_service(tower_http::services::ServeDir::new(dir)),
        None => router.fallback(not_found),
    };
    router.with_state(state)
}

/// The OpenAPI 3 document of this API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Bourse REST API",
        description = "Order entry, queries and market data of a Bourse exchange. Every number is an \
            integer in the units of the gRPC contract: prices in quote minor units per base unit, \
            quantities in base units, amounts in minor units, times in ns since the Unix epoch. \
            WebSocket market data and order events are at /v1/ws (see the Ws* schemas).",
        version = "1"
    ),
    paths(
        health, list_assets, create_asset, list_symbols, create_symbol, create_account, get_balances,
        account_orders, deposit, withdraw, credit, place_order, get_order, cancel_order, order_fills,
        move_order, reduce_order, get_book, get_trades, crate::control::cluster, crate::control::kill,
        crate::control::stats, crate::control::guest, close_day, crate::margin::account_report,
        crate::margin::exchange_report, crate::margin::set_mark, crate::history::statement, crate::history::order_history,
        crate::history::order_query, crate::history::trades, crate::history::clearing,
        crate::daytrading::add, crate::daytrading::quote, crate::daytrading::buy, crate::daytrading::commit_buy,
        crate::daytrading::cancel_buy, crate::daytrading::sell, crate::daytrading::commit_sell,
        crate::daytrading::cancel_sell, crate::daytrading::set_buy_amount, crate::daytrading::set_buy_trigger,
        crate::daytrading::cancel_set_buy, crate::daytrading::set_sell_amount, crate::daytrading::set_sell_trigger,
        crate::daytrading::cancel_set_sell, crate::daytrading::summary, crate::daytrading::user_dumplog,
        crate::daytrading::dumplog
    ),
    components(schemas(
        crate::ws::WsRequest, crate::ws::WsMessage, crate::ws::Channel, crate::ws::WsOrderEvent,
        crate::daytrading::DtErrorBody
    )),
    modifiers(&Security, &Described),
    security(("bearer" = []), ("api_key" = [])),
    tags(
        (name = "orders", description = "Place, cancel, move and reduce orders; read them"),
        (name = "accounts", description = "Accounts, balances, deposits, withdrawals, credits"),
        (name = "market", description = "Symbols, assets, books and trades"),
        (name = "cluster", description = "Cluster status and the demo's controls (demo servers only)"),
        (name = "history", description = "Statements, order histories and trades from the history store \
            (servers started with --history only)"),
        (name = "admin", description = "Operator commands and reports: the close of the trading day, margin \
            symbols' marks, the exchange's totals, a day's clearing report (from the history store)"),
        (name = "daytrading", description = "The day-trading service's sixteen commands (servers started with \
            --day-trading only): a user's key acts as the user it is named after, an administrator's for anyone"),
    )
)]
pub struct ApiDoc;

struct Security;

/// Gives every response that its handler left undescribed the meaning its status has
/// everywhere in this API, so the document says when each code comes back.
struct Described;

impl Described {
    fn text(status: &str) -> &'static str {
        match status {
            "200" => "Done; the body is the answer",
            "201" => "Created: committed in the log",
            "400" => "Malformed request: invalid_body or invalid_parameter",
            "401" => "No API key, or one the gateway does not know",
            "403" => "The key may not act for this account, or needs admin rights",
            "404" => "No such asset, symbol, account or order (or route)",
            "422" => "The exchange rejected the command (the engine's code and name); nothing changed",
            "429" => "The key's rate or in-flight limit was reached; try again",
            "503" => "The exchange cannot be reached",
            _ => "See the error body",
        }
    }
}

impl Modify for Described {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            let operations = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
            for operation in operations.into_iter().flatten() {
                for (status, response) in operation.responses.responses.iter_mut() {
                    if let utoipa::openapi::RefOr::T(response) = response {
                        if response.description.is_empty() {
                            response.description = Described::text(status).to_string();
                        }
                    }
                }
            }
        }
    }
}

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components
            .add_security_scheme("api_key", SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-API-Key"))));
    }
}

async fn openapi() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}

// ----------------------------------------------------------------------------------------
// Extractors whose failures are typed errors
// ----------------------------------------------------------------------------------------

/// The WebSocket's path (as routed in [`router`]): the one route that takes its key in
/// the URL.
pub const WS_PATH: &str = "/v1/ws";

/// The caller's API key: `Authorization: Bearer`, `X-API-Key`, or `?api_key=` on the
/// WebSocket upgrade only.
pub struct Key(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for Key {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let header = |name: &str| parts.headers.get(name).and_then(|value| value.to_str().ok());
        if let Some(value) = header("authorization") {
            let key = value
                .strip_prefix("Bearer ")
                .ok_or_else(|| ApiError::Unauthenticated("authorization must be: Bearer <key>".into()))?;
            return Ok(Key(Some(key.trim().to_owned())));
        }
        if let Some(value) = header("x-api-key") {
            return Ok(Key(Some(value.trim().to_owned())));
        }
        let from_query = parts.uri.query().and_then(|query| {
            query.split('&').find_map(|pair| pair.strip_prefix("api_key=").map(|key| key.to_owned()))
        });
        // A key in a URL ends up in logs and histories: only the WebSocket upgrade,
        // which browsers cannot give a header, may carry one.
        if from_query.is_some() && parts.uri.path() != WS_PATH {
            return Err(ApiError::Unauthenticated(format!(
                "?api_key= is accepted only on {WS_PATH}: send Authorization: Bearer <key> or X-API-Key"
            )));
        }
        Ok(Key(from_query))
    }
}

/// The key a request presents, as [`Key`] reads it but unchecked (a malformed
/// header or a key in the wrong URL is [`Key`]'s to refuse): what a connection is
/// counted against (`connections_per_key_max`).
pub fn presented_key<'a>(headers: &'a axum::http::HeaderMap, uri: &'a axum::http::Uri) -> Option<&'a str> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    if let Some(value) = header("authorization") {
        return value.strip_prefix("Bearer ").map(str::trim);
    }
    if let Some(value) = header("x-api-key") {
        return Some(value.trim());
    }
    uri.query().and_then(|query| query.split('&').find_map(|pair| pair.strip_prefix("api_key=")))
}

/// A JSON body; a malformed one is a typed 400.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(Body(value)),
            Err(rejection) => Err(body_error(rejection)),
        }
    }
}

fn body_error(rejection: JsonRejection) -> ApiError {
    ApiError::invalid_body(rejection.body_text())
}

/// A path parameter; a malformed one is a typed 400.
pub struct Param<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Param<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Param(value)),
            Err(rejection) => Err(path_error(rejection)),
        }
    }
}

fn path_error(rejection: PathRejection) -> ApiError {
    ApiError::invalid_parameter(rejection.body_text())
}

/// Query parameters; malformed ones are a typed 400.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(Params(value)),
            Err(rejection) => Err(query_error(rejection)),
        }
    }
}

fn query_error(rejection: QueryRejection) -> ApiError {
    ApiError::invalid_parameter(rejection.body_text())
}

// ----------------------------------------------------------------------------------------
// Handlers
// ----------------------------------------------------------------------------------------

/// Liveness of this server (it does not call upstream).
#[utoipa::path(get, path = "/health", tag = "market", security(()),
    responses((status = 200, description = "Serving", body = Health)))]
async fn health(State(state): State<Shared>) -> Json<Health> {
    Json(Health { status: "ok".into(), upstream: state.upstream.endpoints() })
}

/// Every asset.
#[utoipa::path(get, path = "/v1/assets", tag = "market",
    responses((status = 200, body = [Asset]), (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn list_assets(State(state): State<Shared>, Key(key): Key) -> ApiResult<Json<Vec<Asset>>> {
    let session = state.upstream.session(key).await?;
    let assets = session.query().assets().await?.assets;
    state.upstream.learn(Some(assets.clone()), None);
    Ok(Json(assets.into_iter().map(asset_from).collect()))
}

/// Creates an asset (administrative key).
#[utoipa::path(post, path = "/v1/assets", tag = "market", request_body = CreateAsset,
    responses((status = 201, body = Accepted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
async fn create_asset(
    State(state): State<Shared>,
    Key(key): Key,
    Body(body): Body<CreateAsset>,
) -> ApiResult<(StatusCode, Json<Accepted>)> {
    let command = create_asset_command(body)?;
    let session = state.upstream.session(key).await?;
    let accepted = session.submit(command).await?;
    Ok((StatusCode::CREATED, Json(accepted)))
}

/// The command a `POST /v1/assets` body asks for, its decimals checked.
pub(crate) fn create_asset_command(body: CreateAsset) -> ApiResult<CommandBody> {
    let decimals = u8::try_from(body.decimals)
        .ok()
        .filter(|&d| d <= 18)
        .ok_or_else(|| ApiError::invalid_parameter("decimals must be 0 to 18"))?;
    Ok(CommandBody::CreateAsset { name: body.name, decimals })
}

/// Every symbol with its rules.
#[utoipa::path(get, path = "/v1/symbols", tag = "market",
    responses((status = 200, body = [Symbol]), (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn list_symbols(State(state): State<Shared>, Key(key): Key) -> ApiResult<Json<Vec<Symbol>>> {
    let session = state.upstream.session(key).await?;
    let (symbols, assets) = {
        let mut query = session.query();
        (query.symbols().await?.symbols, query.assets().await?.assets)
    };
    state.upstream.learn(Some(assets), Some(symbols.clone()));
    let symbols = symbols.iter().map(|info| symbol_from(&state, info)).collect::<ApiResult<_>>()?;
    Ok(Json(symbols))
}

/// Creates a symbol (administrative key): a spot pair, or with `margin` a margin
/// contract (a future) settled in its quote asset.
#[utoipa::path(post, path = "/v1/symbols", tag = "market", request_body = CreateSymbol,
    responses((status = 201, body = Accepted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn create_symbol(
    State(state): State<Shared>,
    Key(key): Key,
    Body(body): Body<CreateSymbol>,
) -> ApiResult<(StatusCode, Json<Accepted>)> {
    let session = state.upstream.session(key).await?;
    let base = state.upstream.asset(&session, &body.base).await?;
    let quote = state.upstream.asset(&session, &body.quote).await?;
    let accepted = session.submit(symbol_command(body, AssetId(base.id), AssetId(quote.id))).await?;
    Ok((StatusCode::CREATED, Json(accepted)))
}

/// The command a `POST /v1/symbols` body asks for, its assets found: a spot pair, or a
/// margin symbol when the body has `margin` (its rules are the engine's to check:
/// `margin_spec_invalid`).
pub(crate) fn symbol_command(body: CreateSymbol, base: AssetId, quote: AssetId) -> CommandBody {
    let margin = body.margin;
    let spec = symbol_spec(body, base, quote);
    match margin {
        None => CommandBody::CreateSymbol(Box::new(spec)),
        Some(margin) => CommandBody::CreateMarginSymbol(Box::new(MarginSymbol { spec, margin: margin_spec(margin) })),
    }
}

/// The engine's margin rules from the JSON's.
fn margin_spec(margin: crate::model::MarginSpec) -> bourse_engine::command::MarginSpec {
    bourse_engine::command::MarginSpec {
        initial_bp: margin.initial_bp,
        maintenance_bp: margin.maintenance_bp,
        multiplier: margin.multiplier,
        position_limit: Qty(margin.position_limit),
        mark: match margin.mark {
            crate::model::MarkSource::Operator => bourse_engine::command::MarkSource::Operator,
            crate::model::MarkSource::LastTrade => bourse_engine::command::MarkSource::LastTrade,
        },
        insurance: AccountId(margin.insurance),
    }
}

/// The symbol a `POST /v1/symbols` body describes, its assets found (its margin rules
/// aside).
fn symbol_spec(body: CreateSymbol, base: AssetId, quote: AssetId) -> SymbolSpec {
    SymbolSpec {
        name: body.name,
        base,
        quote,
        tick: Px(body.tick),
        lot: Qty(body.lot),
        px_min: Px(body.px_min),
        px_max: Px(body.px_max),
        fee_maker: Amount(body.fee_maker),
        fee_taker: Amount(body.fee_taker),
        policy: match body.policy {
            crate::model::MatchPolicy::Fifo => MatchPolicy::Fifo,
            crate::model::MatchPolicy::ProRata => MatchPolicy::ProRata,
        },
    }
}

/// Creates an account with no balances (administrative key); `id` is the account.
#[utoipa::path(post, path = "/v1/accounts", tag = "accounts",
    responses((status = 201, body = Accepted), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn create_account(State(state): State<Shared>, Key(key): Key) -> ApiResult<(StatusCode, Json<Accepted>)> {
    let session = state.upstream.session(key).await?;
    let accepted = session.submit(CommandBody::CreateAccount).await?;
    Ok((StatusCode::CREATED, Json(accepted)))
}

/// Every balance of an account the key owns.
#[utoipa::path(get, path = "/v1/accounts/{account}/balances", tag = "accounts",
    params(("account" = u32, Path, description = "Account id")),
    responses((status = 200, body = Balances), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn get_balances(
    State(state): State<Shared>,
    Key(key): Key,
    Param(account): Param<u32>,
) -> ApiResult<Json<Balances>> {
    let session = state.upstream.session(key).await?;
    let reply = session.query().balances(AccountId(account)).await?;
    let balances = reply
        .balances
        .into_iter()
        .map(|b| Balance {
            asset: b.asset,
            asset_name: state.upstream.asset_name(b.asset),
            available: b.available,
            reserved: b.reserved,
        })
        .collect();
    Ok(Json(Balances { account, log_index: reply.log_index, balances }))
}

/// The resting orders and pending stops of an account the key owns.
#[utoipa::path(get, path = "/v1/accounts/{account}/orders", tag = "orders",
    params(("account" = u32, Path, description = "Account id")),
    responses((status = 200, body = Orders), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn account_orders(
    State(state): State<Shared>,
    Key(key): Key,
    Param(account): Param<u32>,
) -> ApiResult<Json<Orders>> {
    let session = state.upstream.session(key).await?;
    let reply = session.query().open_orders(AccountId(account)).await?;
    let orders = reply.orders.iter().map(|info| order_from(info, reply.log_index)).collect::<ApiResult<_>>()?;
    Ok(Json(Orders { log_index: reply.log_index, orders }))
}

/// Money enters an account from outside (administrative key).
#[utoipa::path(post, path = "/v1/accounts/{account}/deposits", tag = "accounts", request_body = BalanceChange,
    params(("account" = u32, Path, description = "Account id")),
    responses((status = 200, body = Accepted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn deposit(
    State(state): State<Shared>,
    Key(key): Key,
    Param(account): Param<u32>,
    Body(body): Body<BalanceChange>,
) -> ApiResult<Json<Accepted>> {
    balance_change(&state, key, account, body, |account, asset, amount| CommandBody::Deposit { account, asset, amount })
        .await
}

/// Money leaves an account; only the available balance (administrative key).
#[utoipa::path(post, path = "/v1/accounts/{account}/withdrawals", tag = "accounts", request_body = BalanceChange,
    params(("account" = u32, Path, description = "Account id")),
    responses((status = 200, body = Accepted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn withdraw(
    State(state): State<Shared>,
    Key(key): Key,
    Param(account): Param<u32>,
    Body(body): Body<BalanceChange>,
) -> ApiResult<Json<Accepted>> {
    balance_change(&state, key, account, body, |account, asset, amount| CommandBody::Withdraw {
        account,
        asset,
        amount,
    })
    .await
}

/// Units of an asset (shares) are issued to an account (administrative key).
#[utoipa::path(post, path = "/v1/accounts/{account}/credits", tag = "accounts", request_body = BalanceChange,
    params(("account" = u32, Path, description = "Account id")),
    responses((status = 200, body = Accepted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn credit(
    State(state): State<Shared>,
    Key(key): Key,
    Param(account): Param<u32>,
    Body(body): Body<BalanceChange>,
) -> ApiResult<Json<Accepted>> {
    balance_change(&state, key, account, body, |account, asset, amount| CommandBody::Credit { account, asset, amount })
        .await
}

async fn balance_change(
    state: &AppState,
    key: Option<String>,
    account: u32,
    body: BalanceChange,
    command: impl FnOnce(AccountId, AssetId, Amount) -> CommandBody,
) -> ApiResult<Json<Accepted>> {
    let session = state.upstream.session(key).await?;
    let asset = state.upstream.asset(&session, &body.asset).await?;
    let accepted = session.submit(command(AccountId(account), AssetId(asset.id), Amount(body.amount))).await?;
    Ok(Json(accepted))
}

/// Places an order; answered once it is committed and applied (it may already have
/// traded). `id` is the new order's id.
#[utoipa::path(post, path = "/v1/orders", tag = "orders", request_body = PlaceOrder,
    responses((status = 201, body = Accepted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn place_order(
    State(state): State<Shared>,
    Key(key): Key,
    Body(body): Body<PlaceOrder>,
) -> ApiResult<(StatusCode, Json<Accepted>)> {
    let kind = order_kind(&body)?;
    let session = state.upstream.session(key).await?;
    let symbol = state.upstream.symbol(&session, &body.symbol).await?;
    let request = order_request(&body, kind, SymbolId(symbol.id));
    let accepted = session.submit(CommandBody::Place(request)).await?;
    crate::ws::publish_accepted(&session, &request, &accepted);
    Ok((StatusCode::CREATED, Json(accepted)))
}

/// The order a `POST /v1/orders` body asks for, its kind checked ([`order_kind`]) and
/// its symbol found.
pub(crate) fn order_request(body: &PlaceOrder, kind: OrderKind, symbol: SymbolId) -> OrderRequest {
    let market_like = matches!(kind, OrderKind::Market { .. } | OrderKind::StopMarket { .. });
    let tif = match body.tif {
        Some(TimeInForce::Gtc) => Tif::Gtc,
        Some(TimeInForce::Ioc) => Tif::Ioc,
        Some(TimeInForce::Fok) => Tif::Fok,
        Some(TimeInForce::Day) => Tif::Day,
        None if market_like => Tif::Ioc,
        None => Tif::Gtc,
    };
    OrderRequest {
        account: AccountId(body.account),
        symbol,
        side: match body.side {
            Side::Buy => bourse_engine::Side::Buy,
            Side::Sell => bourse_engine::Side::Sell,
        },
        kind,
        qty: Qty(body.qty),
        tif,
        post_only: body.post_only,
        display_qty: body.display_qty.map(Qty),
        stp: match body.stp {
            None | Some(SelfTrade::CancelResting) => Stp::CancelResting,
            Some(SelfTrade::CancelIncoming) => Stp::CancelIncoming,
            Some(SelfTrade::Allow) => Stp::Allow,
        },
    }
}

/// The engine's order kind from the JSON fields, refusing fields the type does not take.
pub(crate) fn order_kind(body: &PlaceOrder) -> ApiResult<OrderKind> {
    let need = |value: Option<i64>, field: &str| {
        value.ok_or_else(|| {
            ApiError::invalid_parameter(format!("{field} is required for a {:?} order", body.order_type))
        })
    };
    let refuse = |present: bool, field: &str| {
        if present {
            Err(ApiError::invalid_parameter(format!("{field} is not taken by a {:?} order", body.order_type)))
        } else {
            Ok(())
        }
    };
    Ok(match body.order_type {
        OrderType::Limit => {
            refuse(body.trigger.is_some(), "trigger")?;
            refuse(body.budget.is_some(), "budget")?;
            OrderKind::Limit { px: Px(need(body.px, "px")?) }
        }
        OrderType::Market => {
            refuse(body.px.is_some(), "px")?;
            refuse(body.trigger.is_some(), "trigger")?;
            OrderKind::Market { budget: body.budget.map(Amount) }
        }
        OrderType::StopLimit => {
            refuse(body.budget.is_some(), "budget")?;
            OrderKind::StopLimit { trigger: Px(need(body.trigger, "trigger")?), px: Px(need(body.px, "px")?) }
        }
        OrderType::StopMarket => {
            refuse(body.px.is_some(), "px")?;
            OrderKind::StopMarket { trigger: Px(need(body.trigger, "trigger")?), budget: body.budget.map(Amount) }
        }
    })
}

/// An order of an account the key owns: open, pending, or recently closed.
#[utoipa::path(get, path = "/v1/orders/{order}", tag = "orders",
    params(("order" = u64, Path, description = "Order id")),
    responses((status = 200, body = Order), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn get_order(State(state): State<Shared>, Key(key): Key, Param(order): Param<u64>) -> ApiResult<Json<Order>> {
    let session = state.upstream.session(key).await?;
    Ok(Json(read_order(&session, order).await?))
}

/// The fills of one order, oldest first.
#[utoipa::path(get, path = "/v1/orders/{order}/fills", tag = "orders",
    params(("order" = u64, Path, description = "Order id")),
    responses((status = 200, body = Fills), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn order_fills(State(state): State<Shared>, Key(key): Key, Param(order): Param<u64>) -> ApiResult<Json<Fills>> {
    let session = state.upstream.session(key).await?;
    let read = read_order(&session, order).await?;
    Ok(Json(Fills { order, log_index: read.log_index, fills: read.fills }))
}

/// Cancels an order's open part.
#[utoipa::path(delete, path = "/v1/orders/{order}", tag = "orders",
    params(("order" = u64, Path, description = "Order id")),
    responses((status = 200, body = Accepted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn cancel_order(
    State(state): State<Shared>,
    Key(key): Key,
    Param(order): Param<u64>,
) -> ApiResult<Json<Accepted>> {
    let session = state.upstream.session(key).await?;
    let read = read_order(&session, order).await?;
    let body =
        CommandBody::Cancel { account: AccountId(read.account), symbol: SymbolId(read.symbol), order: OrderId(order) };
    Ok(Json(session.submit(body).await?))
}

/// Gives a resting order a new price (it loses time priority and may trade).
#[utoipa::path(post, path = "/v1/orders/{order}/move", tag = "orders", request_body = MoveOrder,
    params(("order" = u64, Path, description = "Order id")),
    responses((status = 200, body = Accepted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn move_order(
    State(state): State<Shared>,
    Key(key): Key,
    Param(order): Param<u64>,
    Body(body): Body<MoveOrder>,
) -> ApiResult<Json<Accepted>> {
    let session = state.upstream.session(key).await?;
    let read = read_order(&session, order).await?;
    Ok(Json(session.submit(move_command(&read, order, body)).await?))
}

/// The Move a `POST /v1/orders/{order}/move` body asks for, the order read.
pub(crate) fn move_command(read: &Order, order: u64, body: MoveOrder) -> CommandBody {
    CommandBody::Move {
        account: AccountId(read.account),
        symbol: SymbolId(read.symbol),
        order: OrderId(order),
        px: Px(body.px),
    }
}

/// Takes quantity off a resting order, keeping its time priority (the whole remainder
/// or more cancels it).
#[utoipa::path(post, path = "/v1/orders/{order}/reduce", tag = "orders", request_body = ReduceOrder,
    params(("order" = u64, Path, description = "Order id")),
    responses((status = 200, body = Accepted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn reduce_order(
    State(state): State<Shared>,
    Key(key): Key,
    Param(order): Param<u64>,
    Body(body): Body<ReduceOrder>,
) -> ApiResult<Json<Accepted>> {
    let session = state.upstream.session(key).await?;
    let read = read_order(&session, order).await?;
    Ok(Json(session.submit(reduce_command(&read, order, body)).await?))
}

/// The Reduce a `POST /v1/orders/{order}/reduce` body asks for, the order read.
pub(crate) fn reduce_command(read: &Order, order: u64, body: ReduceOrder) -> CommandBody {
    CommandBody::Reduce {
        account: AccountId(read.account),
        symbol: SymbolId(read.symbol),
        order: OrderId(order),
        qty_by: Qty(body.qty_by),
    }
}

/// The aggregated book of a symbol, best levels first.
#[utoipa::path(get, path = "/v1/books/{symbol}", tag = "market",
    params(("symbol" = String, Path, description = "Symbol name (URL-encoded, ACME%2FUSD) or id"), BookParams),
    responses((status = 200, body = Book), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn get_book(
    State(state): State<Shared>,
    Key(key): Key,
    Param(symbol): Param<String>,
    Params(params): Params<BookParams>,
) -> ApiResult<Json<Book>> {
    let levels = params.levels.unwrap_or(20);
    if !(1..=1_000).contains(&levels) {
        return Err(ApiError::invalid_parameter("levels must be 1 to 1000"));
    }
    let session = state.upstream.session(key).await?;
    let info = state.upstream.symbol(&session, &symbol).await?;
    let depth = session.query().depth(SymbolId(info.id), levels).await?;
    let level = |l: &proto::Level| Level { px: l.px, qty: l.qty };
    Ok(Json(Book {
        symbol: info.id,
        log_index: depth.log_index,
        bids: depth.bids.iter().map(level).collect(),
        asks: depth.asks.iter().map(level).collect(),
        last_px: depth.last_px,
    }))
}

/// The newest trades of a symbol that this server has seen, oldest first.
#[utoipa::path(get, path = "/v1/trades/{symbol}", tag = "market",
    params(("symbol" = String, Path, description = "Symbol name (URL-encoded, ACME%2FUSD) or id"), TradesParams),
    responses((status = 200, body = Trades), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn get_trades(
    State(state): State<Shared>,
    Key(key): Key,
    Param(symbol): Param<String>,
    Params(params): Params<TradesParams>,
) -> ApiResult<Json<Trades>> {
    let limit = params.limit.unwrap_or(100);
    if !(1..=1_000_000).contains(&limit) {
        return Err(ApiError::invalid_parameter("limit must be 1 to 1000000"));
    }
    let session = state.upstream.session(key).await?;
    let info = state.upstream.symbol(&session, &symbol).await?;
    Ok(Json(Trades { symbol: info.id, trades: state.market.recent(info.id, limit as usize) }))
}

/// Closes the trading day (administrative key): every open Day order, resting or a
/// pending stop, expires and its hold is released; GTC orders stay. Their owners' order
/// events say `cancelled` with reason `expired`, and the orders read back as `expired`.
/// The exchange keeps no clock of its own: a deployment calls this at its session's
/// close (cron, a systemd timer, or `bourse close-day`).
#[utoipa::path(post, path = "/v1/admin/close-day", tag = "admin",
    responses((status = 200, body = DayClosed), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn close_day(State(state): State<Shared>, Key(key): Key) -> ApiResult<Json<DayClosed>> {
    let session = state.upstream.session(key).await?;
    let accepted = session.submit(CommandBody::CloseDay).await?;
    Ok(Json(DayClosed { expired: accepted.id, log_index: accepted.log_index, duplicate: accepted.duplicate }))
}

// ----------------------------------------------------------------------------------------
// Translations
// ----------------------------------------------------------------------------------------

/// Reads an order (the gateway refuses another key's order).
async fn read_order(session: &Session, order: u64) -> ApiResult<Order> {
    let reply = session.query().order(OrderId(order)).await?;
    let info = reply.order.ok_or_else(|| ApiError::Upstream("an order reply without its order".into()))?;
    order_from(&info, reply.log_index)
}

/// An answer of the exchange that this version cannot read (an enum value it does not
/// know, say): the request fails with 502 naming the field, never with a guess.
pub fn unreadable(error: ConvertError) -> ApiError {
    ApiError::Upstream(format!("the exchange answered what this server cannot read: {error}"))
}

/// A side as the exchange sent it (`field` names it in the error).
pub fn side_from(value: i32, field: &'static str) -> Result<Side, ApiError> {
    match convert::side_from_proto(value, field).map_err(unreadable)? {
        bourse_engine::Side::Buy => Ok(Side::Buy),
        bourse_engine::Side::Sell => Ok(Side::Sell),
    }
}

pub(crate) fn order_from(info: &proto::OrderInfo, log_index: u64) -> ApiResult<Order> {
    use proto::order_kind::Kind;
    let (order_type, px, trigger, budget) = match info.kind.as_ref().and_then(|k| k.kind.as_ref()) {
        Some(Kind::Limit(limit)) => (OrderType::Limit, Some(limit.px), None, None),
        Some(Kind::Market(market)) => (OrderType::Market, None, None, market.budget),
        Some(Kind::StopLimit(stop)) => (OrderType::StopLimit, Some(stop.px), Some(stop.trigger), None),
        Some(Kind::StopMarket(stop)) => (OrderType::StopMarket, None, Some(stop.trigger), stop.budget),
        None => return Err(unreadable(ConvertError::FieldMissing { field: "OrderInfo.kind" })),
    };
    let tif = match convert::tif_from_proto(info.tif, "OrderInfo.tif").map_err(unreadable)? {
        bourse_engine::command::Tif::Gtc => TimeInForce::Gtc,
        bourse_engine::command::Tif::Ioc => TimeInForce::Ioc,
        bourse_engine::command::Tif::Fok => TimeInForce::Fok,
        bourse_engine::command::Tif::Day => TimeInForce::Day,
    };
    let status = match convert::order_status_from_proto(info.status, "OrderInfo.status").map_err(unreadable)? {
        bourse_engine::OrderStatus::Pending => OrderStatus::Pending,
        bourse_engine::OrderStatus::Open => OrderStatus::Open,
        bourse_engine::OrderStatus::Filled => OrderStatus::Filled,
        bourse_engine::OrderStatus::Cancelled => OrderStatus::Cancelled,
        bourse_engine::OrderStatus::Expired => OrderStatus::Expired,
    };
    Ok(Order {
        id: info.id,
        account: info.account,
        symbol: info.symbol,
        side: side_from(info.side, "OrderInfo.side")?,
        order_type,
        px,
        trigger,
        budget,
        tif,
        qty: info.qty,
        qty_filled: info.qty_filled,
        qty_reduced: info.qty_reduced,
        qty_open: info.qty_open,
        qty_visible: info.qty_visible,
        px_resting: info.px_resting,
        status,
        ts: info.ts,
        fills: info
            .fills
            .iter()
            .map(|f| Fill {
                px: f.px,
                qty: f.qty,
                fee: f.fee,
                maker: f.maker,
                counter_order: f.counter_order,
                ts: f.ts,
            })
            .collect(),
        log_index,
    })
}

fn asset_from(info: proto::AssetInfo) -> Asset {
    Asset {
        id: info.id,
        name: info.name,
        decimals: info.decimals,
        supply: info.supply,
        fees_collected: info.fees_collected,
    }
}

fn symbol_from(state: &AppState, info: &proto::SymbolInfo) -> ApiResult<Symbol> {
    let spec = info.spec.as_ref().ok_or(unreadable(ConvertError::FieldMissing { field: "SymbolInfo.spec" }))?;
    let policy = match convert::match_policy_from_proto(spec.policy, "SymbolSpec.policy").map_err(unreadable)? {
        bourse_engine::command::MatchPolicy::Fifo => crate::model::MatchPolicy::Fifo,
        bourse_engine::command::MatchPolicy::ProRata => crate::model::MatchPolicy::ProRata,
    };
    Ok(Symbol {
        id: info.id,
        name: spec.name.clone(),
        base: spec.base,
        base_name: state.upstream.asset_name(spec.base),
        quote: spec.quote,
        quote_name: state.upstream.asset_name(spec.quote),
        tick: spec.tick,
        lot: spec.lot,
        px_min: spec.px_min,
        px_max: spec.px_max,
        fee_maker: spec.fee_maker,
        fee_taker: spec.fee_taker,
        policy,
        margin: spec.margin.as_ref().map(margin_from).transpose()?,
    })
}

/// A margin symbol's rules as the exchange sent them.
fn margin_from(wire: &proto::MarginSpec) -> ApiResult<crate::model::MarginSpec> {
    let margin = bourse_engine::command::MarginSpec::try_from(wire).map_err(unreadable)?;
    Ok(crate::model::MarginSpec {
        initial_bp: margin.initial_bp,
        maintenance_bp: margin.maintenance_bp,
        multiplier: margin.multiplier,
        position_limit: margin.position_limit.0,
        mark: match margin.mark {
            bourse_engine::command::MarkSource::Operator => crate::model::MarkSource::Operator,
            bourse_engine::command::MarkSource::LastTrade => crate::model::MarkSource::LastTrade,
        },
        insurance: margin.insurance.0,
    })
}

#[cfg(test)]
mod tests {
    use utoipa::OpenApi;

    #[test]
    fn every_response_in_the_document_says_what_it_means() {
        let document = serde_json::to_value(super::ApiDoc::openapi()).expect("the document serializes");
        let mut responses = 0;
        for (path, item) in document["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("a path item") {
                for (status, response) in operation["responses"].as_object().expect("responses") {
                    let description = response["description"].as_str().unwrap_or_default();
                    assert!(!description.is_empty(), "{method} {path} {status} has no description");
                    responses += 1;
                }
            }
        }
        assert!(responses > 50, "only {responses} responses documented");
    }
}
