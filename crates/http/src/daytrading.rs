//! The day-trading routes (`/v1/daytrading/…`, shared/specs/day-trading.md): the sixteen
//! commands of the retail service for the web page and scripts.
//!
//! Each route is one call of the `DayTrading` service's `Execute` (`bourse gateway run
//! … --http ADDR --day-trading ADDR` starts both and tells this server where the
//! service is), with the caller's API key: the service decides who may act for whom
//! (an administrator's key for anyone; another key only as the user its key entry is
//! named after, `bourse gateway key-add --name USERID`; every caller on an `--open`
//! gateway). Arguments travel verbatim (amounts and prices as `d.dd` strings, symbols
//! as given): the exchange checks them and logs a bad one, so a refused command comes
//! back as an error carrying the spec's `errorMessage` text as `message`, its code
//! 3000 + the spec's error number and the text in snake_case as `name`. As the spec
//! asks of every response (section 2), an error body also names the `command` and,
//! when the exchange logged it, its `transactionNum` ([`DtErrorBody`]).
//!
//! Without a configured service every route answers 404 `not_found`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bourse_engine::daytrading::{cents_format, DtError, DtKind};
use bourse_protocol::proto;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, IntoResponses, ToSchema};

use crate::api::{Body, Key, Param, Params};
use crate::error::ApiError;
use crate::model::ErrorDetail;
use crate::AppState;

type Shared = Arc<AppState>;
type ApiResult<T> = Result<T, DtApiError>;

/// A client of the day-trading service, connecting on first use.
pub type DayTradingClient = proto::day_trading_client::DayTradingClient<tonic::transport::Channel>;

/// The client of the service at `address` (`host:port`).
pub fn client(address: &str) -> Result<DayTradingClient, String> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .map_err(|e| format!("day-trading service {address}: {e}"))?;
    Ok(proto::day_trading_client::DayTradingClient::new(endpoint.connect_lazy()).max_decoding_message_size(256 << 20))
}

/// The errors every day-trading route may answer.
#[derive(IntoResponses)]
#[allow(dead_code)] // documents the responses; the handlers answer with ApiError
pub enum DtErrors {
    /// Malformed request (invalid_body, invalid_parameter: also arguments the exchange refuses to log, such as
    /// ones longer than 512 bytes), or a command the exchange logged as failed for a bad argument: invalid
    /// arguments, invalid user, invalid symbol, invalid amount, invalid filename
    #[response(status = 400)]
    BadRequest(DtErrorBody),
    /// The API key is missing or unknown to the day-trading service
    #[response(status = 401)]
    Unauthenticated(DtErrorBody),
    /// The key may not act for this user (not_authorized): a user's key acts only as the user its key entry is
    /// named after
    #[response(status = 403)]
    Forbidden(DtErrorBody),
    /// unknown_user (no successful add yet), or this server has no day-trading service (not_found)
    #[response(status = 404)]
    NotFound(DtErrorBody),
    /// The exchange logged the command as failed (insufficient funds, insufficient shares, amount below price,
    /// no pending buy/sell, no buy/sell trigger, quote unavailable); nothing changed
    #[response(status = 422)]
    Failed(DtErrorBody),
    /// The service answered something unexpected, or its dump could not be written (dump failed)
    #[response(status = 502)]
    Upstream(DtErrorBody),
    /// The day-trading service or the exchange cannot be reached
    #[response(status = 503)]
    Unavailable(DtErrorBody),
}

/// A day-trading route's error: the API's error with, as spec section 2 asks of every
/// response, the command it answers and its number in the audit log.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DtErrorBody {
    /// The command's number in the audit log; null when the exchange did not log it
    /// (the key was refused, the service or the exchange could not be reached, or the
    /// exchange refused the arguments before the log).
    pub transaction_num: Option<u64>,
    /// ADD, QUOTE, BUY, COMMIT_BUY, …; absent only when the request could not be read
    /// (invalid_body, invalid_parameter before the route ran).
    pub command: Option<String>,
    pub error: ErrorDetail,
}

/// An [`ApiError`] of a day-trading route, with the command it answers and, when the
/// exchange logged it, its transactionNum.
#[derive(Debug)]
pub struct DtApiError {
    pub error: ApiError,
    pub command: DtKind,
    pub transaction_num: Option<u64>,
}

impl DtApiError {
    fn new(command: DtKind, error: ApiError) -> Self {
        DtApiError { error, command, transaction_num: None }
    }

    /// The JSON body of this error.
    pub fn body(&self) -> DtErrorBody {
        DtErrorBody {
            transaction_num: self.transaction_num,
            command: Some(self.command.name().to_owned()),
            error: self.error.body().error,
        }
    }
}

impl IntoResponse for DtApiError {
    fn into_response(self) -> Response {
        let status = self.error.status();
        (status, Json(self.body())).into_response()
    }
}

/// `{amount}`: ADD, BUY/SELL (with a symbol), SET_*_AMOUNT.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct DtAmount {
    /// Dollars with at most 2 decimals, e.g. "150.00" (checked by the exchange: invalid amount).
    pub amount: String,
}

/// `{symbol}`: QUOTE.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct DtSymbol {
    /// 1 to 3 upper-case letters (checked by the exchange: invalid symbol).
    pub symbol: String,
}

/// `{symbol, amount}`: BUY and SELL.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct DtOrder {
    /// 1 to 3 upper-case letters.
    pub symbol: String,
    /// Dollars to spend (BUY) or to raise (SELL), at most 2 decimals; whole shares of
    /// ⌊amount / price⌋ are held.
    pub amount: String,
}

/// `{price}`: SET_BUY_TRIGGER and SET_SELL_TRIGGER.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct DtPrice {
    /// The trigger price in dollars, at most 2 decimals.
    pub price: String,
}

/// `{filename}`: the global DUMPLOG.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct DtFilename {
    /// The file written under the service's dump directory (a leading `./` is dropped; no other directory part).
    pub filename: String,
}

/// `?filename=` of a user's DUMPLOG.
#[derive(Clone, Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DtFilenameParam {
    /// The name the document is offered under (and logged with).
    pub filename: String,
}

/// A command the exchange applied and logged: what the spec's Returns column lists.
/// Money is a `d.dd` string, stamps are ms since the Unix epoch; fields a command does
/// not return are null.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DtResult {
    /// The command's number in the audit log.
    pub transaction_num: u64,
    /// ADD, QUOTE, BUY, COMMIT_BUY, …
    pub command: String,
    /// The log entry the command was applied in.
    pub log_index: u64,
    /// That entry's log stamp.
    pub stamp: u64,
    pub symbol: Option<String>,
    /// Per share.
    pub price: Option<String>,
    pub shares: Option<i64>,
    /// ADD: the cash available after; BUY: the cost held; SELL: the proceeds; a
    /// trigger's amount; a cancel: what it released.
    pub amount: Option<String>,
    /// BUY and SELL: the first stamp at which the pending order can no longer be
    /// committed (60 s after it was made).
    pub expires_at: Option<u64>,
    /// QUOTE: when the cached quote arrived (it serves 60 s from then), and the quote
    /// source's own time.
    pub quote_arrival: Option<u64>,
    pub quote_server_time: Option<u64>,
}

/// What the global DUMPLOG wrote.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DtDumpWritten {
    pub transaction_num: u64,
    /// The file written under the service's dump directory.
    pub filename: String,
    /// Audit records in it, and its size.
    pub records: u64,
    pub bytes: u64,
}

/// DISPLAY_SUMMARY (spec 8.1): a user's cash, holdings, pending orders, triggers and
/// recent commands. Lists are by symbol; expired pending orders never appear.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DtSummary {
    pub user: String,
    /// The DISPLAY_SUMMARY command's own number.
    pub transaction_num: u64,
    /// Its log stamp, ms.
    pub as_of: u64,
    pub cash: DtCash,
    /// Symbols with shares available or reserved.
    pub holdings: Vec<DtHolding>,
    pub pending_buy: Option<DtPendingBuy>,
    pub pending_sell: Option<DtPendingSell>,
    pub buy_triggers: Vec<DtBuyTrigger>,
    pub sell_triggers: Vec<DtSellTrigger>,
    pub history: DtHistory,
}

/// Cash in dollars (`d.dd`).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct DtCash {
    /// Spendable.
    pub available: String,
    /// Held by a pending BUY and buy triggers.
    pub reserved: String,
}

/// Whole shares of one symbol.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct DtHolding {
    pub symbol: String,
    pub available: i64,
    /// Held by a pending SELL and sell triggers.
    pub reserved: i64,
}

/// A BUY waiting for COMMIT_BUY or CANCEL_BUY.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DtPendingBuy {
    pub symbol: String,
    /// The locked price per share.
    pub price: String,
    pub shares: i64,
    /// shares × price, held from cash.
    pub cost: String,
    /// The first stamp (ms) at which it can no longer be committed.
    pub expires_at: u64,
}

/// A SELL waiting for COMMIT_SELL or CANCEL_SELL.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DtPendingSell {
    pub symbol: String,
    pub price: String,
    pub shares: i64,
    /// shares × price, credited at COMMIT_SELL.
    pub proceeds: String,
    pub expires_at: u64,
}

/// A buy trigger: its amount is reserved; armed once it has a price.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DtBuyTrigger {
    pub symbol: String,
    pub amount: String,
    /// Buys when a quote is at or below it; null until SET_BUY_TRIGGER.
    pub trigger_price: Option<String>,
}

/// A sell trigger: ⌊amount / price⌋ shares are reserved once it has a price.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DtSellTrigger {
    pub symbol: String,
    pub amount: String,
    /// Sells when a quote is at or above it; null until SET_SELL_TRIGGER.
    pub trigger_price: Option<String>,
    pub reserved_shares: i64,
}

/// The user's commands before this one.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct DtHistory {
    /// Every command of the user so far.
    pub total: u64,
    /// The last few, newest first.
    pub recent: Vec<DtHistoryItem>,
}

/// One past command and how it ended.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DtHistoryItem {
    pub transaction_num: u64,
    pub stamp: u64,
    pub command: String,
    /// `ok`, or the errorMessage.
    pub outcome: String,
}

/// The day-trading service's client, or 404 when this server has none.
fn service(state: &AppState) -> Result<DayTradingClient, ApiError> {
    state.day_trading.clone().ok_or_else(|| {
        ApiError::NotFound(
            "day trading is not enabled on this server (bourse gateway run … --http ADDR --day-trading ADDR)".into(),
        )
    })
}

/// HTTP status of a logged failure.
pub fn failed_status(error: DtError) -> axum::http::StatusCode {
    use axum::http::StatusCode;
    match error {
        DtError::InvalidArguments
        | DtError::InvalidUser
        | DtError::InvalidSymbol
        | DtError::InvalidAmount
        | DtError::InvalidFilename => StatusCode::BAD_REQUEST,
        DtError::UnknownUser => StatusCode::NOT_FOUND,
        DtError::NotAuthorized => StatusCode::FORBIDDEN,
        DtError::DumpFailed => StatusCode::BAD_GATEWAY,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

/// One command through `Execute` with the caller's key, acting as `user`: the
/// service's answer when the exchange logged the command as done; otherwise the error,
/// naming the command (and its transactionNum when it was logged).
async fn execute(
    state: &AppState,
    key: Option<String>,
    user: &str,
    kind: DtKind,
    args: Vec<String>,
) -> ApiResult<proto::DayTradingResponse> {
    let response = execute_call(state, key, user, kind, args).await.map_err(|e| DtApiError::new(kind, e))?;
    let result = response
        .result
        .as_ref()
        .ok_or_else(|| DtApiError::new(kind, ApiError::Upstream("the service sent no result".into())))?;
    if result.error_code != 0 {
        let error = DtError::from_code(u64::from(result.error_code))
            .map(ApiError::DayTrading)
            .unwrap_or_else(|| ApiError::Upstream(format!("unknown day-trading error {}", result.error_code)));
        return Err(DtApiError { error, command: kind, transaction_num: Some(result.transaction_num) });
    }
    Ok(response)
}

/// The call itself: the service's answer, logged or not, or why there is none.
async fn execute_call(
    state: &AppState,
    key: Option<String>,
    user: &str,
    kind: DtKind,
    args: Vec<String>,
) -> Result<proto::DayTradingResponse, ApiError> {
    let mut client = service(state)?;
    let mut request = tonic::Request::new(execute_request(user, kind, args));
    if let Some(key) = key {
        let value = format!("Bearer {key}")
            .parse()
            .map_err(|_| ApiError::Unauthenticated("the API key has characters a header cannot carry".into()))?;
        request.metadata_mut().insert("authorization", value);
    }
    let response = client.execute(request).await.map_err(status_error)?.into_inner();
    if !response.failure.is_empty() {
        let why = response.failure;
        return Err(if why.starts_with("not authorized") {
            ApiError::Forbidden(why)
        } else if why.starts_with("invalid request") || why.starts_with("rejected") {
            // The exchange refused it before the log: arguments past its bounds (e.g.
            // longer than 512 bytes) are `day_trading_invalid`.
            ApiError::invalid_parameter(why)
        } else if why.starts_with("unavailable") || why.contains("stopped") {
            ApiError::Unavailable(why)
        } else {
            ApiError::Upstream(why)
        });
    }
    Ok(response)
}

/// The `Execute` call of command `kind` with `args`, acting as `user`.
pub(crate) fn execute_request(user: &str, kind: DtKind, args: Vec<String>) -> proto::DayTradingRequest {
    proto::DayTradingRequest {
        id: 1,
        command: bourse_protocol::daytrading::kind_wire(kind),
        args,
        transaction_num: 0,
        caller: user.to_owned(),
    }
}

/// The arguments of a command for `user`: the user first, then the command's own.
pub(crate) fn command_args(user: &str, rest: Vec<String>) -> Vec<String> {
    let mut args = vec![user.to_owned()];
    args.extend(rest);
    args
}

fn status_error(status: tonic::Status) -> ApiError {
    let message = status.message().to_owned();
    match status.code() {
        tonic::Code::Unauthenticated => ApiError::Unauthenticated(message),
        tonic::Code::PermissionDenied => ApiError::Forbidden(message),
        tonic::Code::InvalidArgument => ApiError::invalid_parameter(message),
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            ApiError::Unavailable(format!("the day-trading service: {message}"))
        }
        other => ApiError::Upstream(format!("{other:?}: {message}")),
    }
}

fn result_of(response: &proto::DayTradingResponse, kind: DtKind) -> ApiResult<DtResult> {
    let result = response.result.clone().unwrap_or_default();
    let command = bourse_protocol::daytrading::kind_from_wire(result.command, "DayTradingResult.command")
        .map_err(|e| DtApiError::new(kind, crate::api::unreadable(e)))?
        .name();
    Ok(DtResult {
        transaction_num: result.transaction_num,
        command: command.to_owned(),
        log_index: response.log_index,
        stamp: result.stamp,
        symbol: (!result.symbol.is_empty()).then_some(result.symbol),
        price: result.price.map(cents_format),
        shares: result.shares,
        amount: result.amount.map(cents_format),
        expires_at: result.expires_at,
        quote_arrival: result.quote_arrival,
        quote_server_time: result.quote_server_time,
    })
}

/// Runs a command for `user` and answers its result.
async fn command(
    state: &AppState,
    key: Option<String>,
    user: String,
    kind: DtKind,
    rest: Vec<String>,
) -> ApiResult<Json<DtResult>> {
    let args = command_args(&user, rest);
    let response = execute(state, key, &user, kind, args).await?;
    Ok(Json(result_of(&response, kind)?))
}

/// ADD: creates the user on first use and adds cash; `amount` in the answer is the cash available after.
#[utoipa::path(post, path = "/v1/daytrading/users/{userid}/add", tag = "daytrading", request_body = DtAmount,
    params(("userid" = String, Path, description = "The user: 1 to 64 of A-Z a-z 0-9 _ -")),
    responses((status = 200, description = "Added: the cash available after", body = DtResult), DtErrors))]
pub async fn add(
    State(state): State<Shared>,
    Key(key): Key,
    Param(user): Param<String>,
    Body(body): Body<DtAmount>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::Add, vec![body.amount]).await
}

/// QUOTE: the symbol's price (fetched when the cached one is about to expire).
#[utoipa::path(post, path = "/v1/daytrading/users/{userid}/quote", tag = "daytrading", request_body = DtSymbol,
    params(("userid" = String, Path, description = "The user")),
    responses((status = 200, description = "The price, its arrival and the source's time", body = DtResult), DtErrors))]
pub async fn quote(
    State(state): State<Shared>,
    Key(key): Key,
    Param(user): Param<String>,
    Body(body): Body<DtSymbol>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::Quote, vec![body.symbol]).await
}

/// BUY: holds ⌊amount / price⌋ shares × price of cash for 60 s, replacing a pending BUY.
#[utoipa::path(post, path = "/v1/daytrading/users/{userid}/buy", tag = "daytrading", request_body = DtOrder,
    params(("userid" = String, Path, description = "The user")),
    responses((status = 200, description = "Pending: commit or cancel before expiresAt", body = DtResult), DtErrors))]
pub async fn buy(
    State(state): State<Shared>,
    Key(key): Key,
    Param(user): Param<String>,
    Body(body): Body<DtOrder>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::Buy, vec![body.symbol, body.amount]).await
}

/// COMMIT_BUY: the pending BUY's shares are bought at its locked price.
#[utoipa::path(post, path = "/v1/daytrading/users/{userid}/buy/commit", tag = "daytrading",
    params(("userid" = String, Path, description = "The user")),
    responses((status = 200, description = "Bought", body = DtResult), DtErrors))]
pub async fn commit_buy(
    State(state): State<Shared>,
    Key(key): Key,
    Param(user): Param<String>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::CommitBuy, Vec::new()).await
}

/// CANCEL_BUY: the pending BUY's hold goes back to cash.
#[utoipa::path(post, path = "/v1/daytrading/users/{userid}/buy/cancel", tag = "daytrading",
    params(("userid" = String, Path, description = "The user")),
    responses((status = 200, description = "Cancelled: amount is what was released", body = DtResult), DtErrors))]
pub async fn cancel_buy(
    State(state): State<Shared>,
    Key(key): Key,
    Param(user): Param<String>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::CancelBuy, Vec::new()).await
}

/// SELL: reserves ⌊amount / price⌋ shares for 60 s, replacing a pending SELL.
#[utoipa::path(post, path = "/v1/daytrading/users/{userid}/sell", tag = "daytrading", request_body = DtOrder,
    params(("userid" = String, Path, description = "The user")),
    responses((status = 200, description = "Pending: commit or cancel before expiresAt", body = DtResult), DtErrors))]
pub async fn sell(
    State(state): State<Shared>,
    Key(key): Key,
    Param(user): Param<String>,
    Body(body): Body<DtOrder>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::Sell, vec![body.symbol, body.amount]).await
}

/// COMMIT_SELL: the pending SELL's shares are sold at its locked price.
#[utoipa::path(post, path = "/v1/daytrading/users/{userid}/sell/commit", tag = "daytrading",
    params(("userid" = String, Path, description = "The user")),
    responses((status = 200, description = "Sold", body = DtResult), DtErrors))]
pub async fn commit_sell(
    State(state): State<Shared>,
    Key(key): Key,
    Param(user): Param<String>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::CommitSell, Vec::new()).await
}

/// CANCEL_SELL: the pending SELL's shares go back to the holding.
#[utoipa::path(post, path = "/v1/daytrading/users/{userid}/sell/cancel", tag = "daytrading",
    params(("userid" = String, Path, description = "The user")),
    responses((status = 200, description = "Cancelled: shares is what was released", body = DtResult), DtErrors))]
pub async fn cancel_sell(
    State(state): State<Shared>,
    Key(key): Key,
    Param(user): Param<String>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::CancelSell, Vec::new()).await
}

/// SET_BUY_AMOUNT: creates the symbol's buy trigger (or replaces its amount), reserving the amount.
#[utoipa::path(put, path = "/v1/daytrading/users/{userid}/buy-triggers/{symbol}/amount", tag = "daytrading",
    request_body = DtAmount,
    params(("userid" = String, Path, description = "The user"), ("symbol" = String, Path, description = "The symbol")),
    responses((status = 200, description = "The trigger's amount is reserved", body = DtResult), DtErrors))]
pub async fn set_buy_amount(
    State(state): State<Shared>,
    Key(key): Key,
    Param((user, symbol)): Param<(String, String)>,
    Body(body): Body<DtAmount>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::SetBuyAmount, vec![symbol, body.amount]).await
}

/// SET_BUY_TRIGGER: arms the symbol's buy trigger: it buys when a quote is at or below the price.
#[utoipa::path(put, path = "/v1/daytrading/users/{userid}/buy-triggers/{symbol}/price", tag = "daytrading",
    request_body = DtPrice,
    params(("userid" = String, Path, description = "The user"), ("symbol" = String, Path, description = "The symbol")),
    responses((status = 200, description = "Armed", body = DtResult), DtErrors))]
pub async fn set_buy_trigger(
    State(state): State<Shared>,
    Key(key): Key,
    Param((user, symbol)): Param<(String, String)>,
    Body(body): Body<DtPrice>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::SetBuyTrigger, vec![symbol, body.price]).await
}

/// CANCEL_SET_BUY: removes the symbol's buy trigger; its reserve goes back to cash.
#[utoipa::path(delete, path = "/v1/daytrading/users/{userid}/buy-triggers/{symbol}", tag = "daytrading",
    params(("userid" = String, Path, description = "The user"), ("symbol" = String, Path, description = "The symbol")),
    responses((status = 200, description = "Removed: amount is what was released", body = DtResult), DtErrors))]
pub async fn cancel_set_buy(
    State(state): State<Shared>,
    Key(key): Key,
    Param((user, symbol)): Param<(String, String)>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::CancelSetBuy, vec![symbol]).await
}

/// SET_SELL_AMOUNT: creates the symbol's sell trigger (or replaces its amount).
#[utoipa::path(put, path = "/v1/daytrading/users/{userid}/sell-triggers/{symbol}/amount", tag = "daytrading",
    request_body = DtAmount,
    params(("userid" = String, Path, description = "The user"), ("symbol" = String, Path, description = "The symbol")),
    responses((status = 200, description = "The trigger's amount is set", body = DtResult), DtErrors))]
pub async fn set_sell_amount(
    State(state): State<Shared>,
    Key(key): Key,
    Param((user, symbol)): Param<(String, String)>,
    Body(body): Body<DtAmount>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::SetSellAmount, vec![symbol, body.amount]).await
}

/// SET_SELL_TRIGGER: arms the symbol's sell trigger, reserving ⌊amount / price⌋ shares: it sells when a quote is
/// at or above the price.
#[utoipa::path(put, path = "/v1/daytrading/users/{userid}/sell-triggers/{symbol}/price", tag = "daytrading",
    request_body = DtPrice,
    params(("userid" = String, Path, description = "The user"), ("symbol" = String, Path, description = "The symbol")),
    responses((status = 200, description = "Armed: shares is what it reserves", body = DtResult), DtErrors))]
pub async fn set_sell_trigger(
    State(state): State<Shared>,
    Key(key): Key,
    Param((user, symbol)): Param<(String, String)>,
    Body(body): Body<DtPrice>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::SetSellTrigger, vec![symbol, body.price]).await
}

/// CANCEL_SET_SELL: removes the symbol's sell trigger; its shares go back to the holding.
#[utoipa::path(delete, path = "/v1/daytrading/users/{userid}/sell-triggers/{symbol}", tag = "daytrading",
    params(("userid" = String, Path, description = "The user"), ("symbol" = String, Path, description = "The symbol")),
    responses((status = 200, description = "Removed: shares is what was released", body = DtResult), DtErrors))]
pub async fn cancel_set_sell(
    State(state): State<Shared>,
    Key(key): Key,
    Param((user, symbol)): Param<(String, String)>,
) -> ApiResult<Json<DtResult>> {
    command(&state, key, user, DtKind::CancelSetSell, vec![symbol]).await
}

/// DISPLAY_SUMMARY: the user's cash, holdings, pending orders, triggers and recent
/// commands (itself a logged command). A page polls it to see triggers fire.
#[utoipa::path(get, path = "/v1/daytrading/users/{userid}/summary", tag = "daytrading",
    params(("userid" = String, Path, description = "The user")),
    responses((status = 200, description = "The summary (spec 8.1)", body = DtSummary), DtErrors))]
pub async fn summary(
    State(state): State<Shared>,
    Key(key): Key,
    Param(user): Param<String>,
) -> ApiResult<Json<DtSummary>> {
    let response = execute(&state, key, &user, DtKind::DisplaySummary, vec![user.clone()]).await?;
    let result = response.result.unwrap_or_default();
    serde_json::from_str(&result.summary_json).map(Json).map_err(|e| DtApiError {
        error: ApiError::Upstream(format!("the summary: {e}")),
        command: DtKind::DisplaySummary,
        transaction_num: Some(result.transaction_num),
    })
}

/// DUMPLOG for one user: the audit log's records of this user as an XML document
/// (logfile.xsd), offered for download as `filename`.
#[utoipa::path(get, path = "/v1/daytrading/users/{userid}/dumplog", tag = "daytrading",
    params(("userid" = String, Path, description = "The user"), DtFilenameParam),
    responses((status = 200, description = "The user's audit log", body = String, content_type = "application/xml"),
        DtErrors))]
pub async fn user_dumplog(
    State(state): State<Shared>,
    Key(key): Key,
    Param(user): Param<String>,
    Params(params): Params<DtFilenameParam>,
) -> ApiResult<Response> {
    let args = vec![user.clone(), params.filename.clone()];
    let response = execute(&state, key, &user, DtKind::DumpLog, args).await?;
    let document = response.dump.map(|d| d.document).unwrap_or_default();
    // The name is one the exchange accepted (no `/`, no control character); quotes are dropped.
    let name: String = params.filename.trim_start_matches("./").chars().filter(|c| *c != '"' && *c != '\\').collect();
    let disposition = format!("attachment; filename=\"{name}\"");
    let mut answer = ([(header::CONTENT_TYPE, "application/xml".to_owned())], document).into_response();
    if let Ok(value) = disposition.parse() {
        answer.headers_mut().insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(answer)
}

/// The global DUMPLOG (administrators): the whole audit log written to a file under
/// the service's dump directory.
#[utoipa::path(post, path = "/v1/daytrading/dumplog", tag = "daytrading", request_body = DtFilename,
    responses((status = 200, description = "Written", body = DtDumpWritten), DtErrors))]
pub async fn dumplog(
    State(state): State<Shared>,
    Key(key): Key,
    Body(body): Body<DtFilename>,
) -> ApiResult<Json<DtDumpWritten>> {
    let response = execute(&state, key, "", DtKind::DumpLog, vec![body.filename]).await?;
    let transaction_num = response.result.as_ref().map_or(0, |r| r.transaction_num);
    let dump = response.dump.unwrap_or_default();
    Ok(Json(DtDumpWritten { transaction_num, filename: dump.filename, records: dump.records, bytes: dump.bytes }))
}
