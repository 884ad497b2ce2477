//! Queries, answered by the core between commands and released, like acks, only once
//! the state they read is durable: a reply never shows an order a crash could still
//! take back.

use bourse_engine::{AccountId, AssetId, Engine, OrderId, SymbolId};
use bourse_protocol::convert;
use bourse_protocol::proto;

/// Depth levels a side when the request says 0, and the most a reply carries.
pub const DEPTH_LEVELS_DEFAULT: usize = 20;
pub const DEPTH_LEVELS_MAX: usize = 1000;
/// Most open orders one reply lists.
pub const OPEN_ORDERS_REPLY_MAX: usize = 10_000;

pub enum QueryRequest {
    Order(proto::GetOrderRequest),
    Balances(proto::GetBalancesRequest),
    OpenOrders(proto::GetOpenOrdersRequest),
    Depth(proto::GetDepthRequest),
    Symbols,
    Assets,
    Account(proto::GetAccountRequest),
    DayTradingArmed,
    DayTradingConfig,
    AccountReport(proto::GetAccountReportRequest),
    ExchangeReport,
}

pub enum QueryReply {
    Order(proto::GetOrderReply),
    Balances(proto::GetBalancesReply),
    OpenOrders(proto::GetOpenOrdersReply),
    Depth(proto::GetDepthReply),
    Symbols(proto::GetSymbolsReply),
    Assets(proto::GetAssetsReply),
    Account(proto::GetAccountReply),
    DayTradingArmed(proto::GetDayTradingArmedReply),
    DayTradingConfig(proto::GetDayTradingConfigReply),
    AccountReport(proto::GetAccountReportReply),
    ExchangeReport(proto::GetExchangeReportReply),
}

pub type QueryAnswer = Result<QueryReply, tonic::Status>;

/// Answers `query` from `engine`, whose last applied log index is `index`.
pub fn answer(engine: &Engine, index: u64, query: QueryRequest) -> QueryAnswer {
    let not_found = |what: String| tonic::Status::not_found(what);
    Ok(match query {
        QueryRequest::Order(request) => {
            let view =
                engine.order(OrderId(request.order)).ok_or_else(|| not_found(format!("order {}", request.order)))?;
            QueryReply::Order(convert::order_reply(index, &view))
        }
        QueryRequest::Balances(request) => {
            let balances = engine
                .balances(AccountId(request.account))
                .ok_or_else(|| not_found(format!("account {}", request.account)))?;
            QueryReply::Balances(convert::balances_reply(index, balances))
        }
        QueryRequest::OpenOrders(request) => {
            let account = AccountId(request.account);
            if engine.balances(account).is_none() {
                return Err(not_found(format!("account {}", request.account)));
            }
            let mut views = engine.open_orders(account);
            views.truncate(OPEN_ORDERS_REPLY_MAX);
            QueryReply::OpenOrders(convert::open_orders_reply(index, &views))
        }
        QueryRequest::Depth(request) => {
            let symbol = SymbolId(request.symbol);
            let levels = match request.levels_max as usize {
                0 => DEPTH_LEVELS_DEFAULT,
                n => n.min(DEPTH_LEVELS_MAX),
            };
            let depth = engine.depth(symbol, levels).ok_or_else(|| not_found(format!("symbol {}", request.symbol)))?;
            QueryReply::Depth(convert::depth_reply(index, symbol, &depth, engine.last_px(symbol)))
        }
        QueryRequest::Symbols => {
            // Margin symbols with their margin rules.
            let symbols = (0..engine.symbols_len() as u32)
                .filter_map(|id| {
                    let spec = convert::symbol_spec_wire(engine, SymbolId(id))?;
                    Some(proto::SymbolInfo { id, spec: Some(spec) })
                })
                .collect();
            QueryReply::Symbols(proto::GetSymbolsReply { log_index: index, symbols })
        }
        QueryRequest::Assets => {
            let assets = (0..engine.assets_len() as u32)
                .filter_map(|id| engine.asset_info(AssetId(id)).map(|asset| (AssetId(id), asset)));
            QueryReply::Assets(convert::assets_reply(index, assets))
        }
        QueryRequest::Account(request) => {
            let account = engine
                .account_by_external_id(request.external_id)
                .ok_or_else(|| not_found(format!("account with external id {}", request.external_id)))?;
            QueryReply::Account(convert::account_reply(index, account, request.external_id))
        }
        QueryRequest::AccountReport(request) => {
            let reply = convert::account_report_reply(engine, index, AccountId(request.account), OPEN_ORDERS_REPLY_MAX)
                .ok_or_else(|| not_found(format!("account {}", request.account)))?;
            QueryReply::AccountReport(reply)
        }
        QueryRequest::ExchangeReport => {
            QueryReply::ExchangeReport(convert::exchange_report_reply(index, &engine.exchange_report()))
        }
        QueryRequest::DayTradingArmed => {
            QueryReply::DayTradingArmed(bourse_protocol::daytrading::armed_reply(engine, index))
        }
        QueryRequest::DayTradingConfig => {
            // The engine's own: a snapshot's values where it was restored from one.
            let config = engine.day_trading().config();
            QueryReply::DayTradingConfig(proto::GetDayTradingConfigReply {
                log_index: index,
                quote_ttl_ms: u64::from(config.quote_ttl_ms),
                pending_ttl_ms: u64::from(config.pending_ttl_ms),
                summary_history: config.summary_history,
                users_max: config.users_max,
            })
        }
    })
}
