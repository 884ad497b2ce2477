//! The fuzz entry point (`crates/http/fuzz`, `make fuzz`), also run over its corpus on
//! stable by `tests/fuzz_corpus.rs`: any bytes as the JSON body of every route that
//! takes one, as a WebSocket request and as a query string, read by the extractors the
//! routes use and then through the checks and conversions that turn them into a
//! command, a day-trading call or a subscription, without the network (names are
//! looked up in a catalog of a few assets and symbols instead of upstream). Never a
//! panic.
//!
//! Not covered here: the routes' path parameters and API key headers (axum's router
//! and `api::Key`), and everything after the conversion (the upstream call and the
//! translation of its answer); the HTTP and WebSocket tests run those against a
//! gateway.

use std::future::Future;
use std::task::{Context, Poll, Waker};

use axum::extract::{FromRequest, FromRequestParts};
use axum::http::{header, Method, Request, StatusCode};
use axum::response::IntoResponse;
use bourse_engine::command::CommandBody;
use bourse_engine::daytrading::{self as dt, DtKind};
use bourse_engine::{AccountId, Amount, AssetId, SymbolId};
use bourse_protocol::proto;
use serde::de::DeserializeOwned;

use crate::api::{self, Body, Params};
use crate::error::ApiError;
use crate::model::*;
use crate::ws::{self, WsMessage, WsRequest};

/// Runs `data` through every body, the WebSocket request and the query parameters;
/// panics on any broken rule. Returns how many of the body types `data` was read as.
pub fn request_body(data: &[u8]) -> usize {
    let catalog = catalog();
    let mut read_as = 0;
    if let Some(body) = read::<PlaceOrder>(data, &mut read_as) {
        match api::order_kind(&body) {
            Ok(kind) => match symbol(&catalog, &body.symbol) {
                Ok(symbol) => {
                    let request = api::order_request(&body, kind, symbol);
                    assert_eq!(
                        (request.account, request.symbol, request.qty.0),
                        (AccountId(body.account), symbol, body.qty)
                    );
                    wire(CommandBody::Place(request));
                }
                Err(error) => refused(error, StatusCode::NOT_FOUND),
            },
            Err(error) => refused(error, StatusCode::BAD_REQUEST),
        }
    }
    let read_order = order();
    if let Some(body) = read::<MoveOrder>(data, &mut read_as) {
        wire(api::move_command(&read_order, read_order.id, body));
    }
    if let Some(body) = read::<ReduceOrder>(data, &mut read_as) {
        wire(api::reduce_command(&read_order, read_order.id, body));
    }
    if let Some(body) = read::<BalanceChange>(data, &mut read_as) {
        match asset(&catalog, &body.asset) {
            Ok(asset) => {
                let (account, amount) = (AccountId(7), Amount(body.amount));
                wire(CommandBody::Deposit { account, asset, amount });
                wire(CommandBody::Withdraw { account, asset, amount });
                wire(CommandBody::Credit { account, asset, amount });
            }
            Err(error) => refused(error, StatusCode::NOT_FOUND),
        }
    }
    if let Some(body) = read::<CreateAsset>(data, &mut read_as) {
        match api::create_asset_command(body) {
            Ok(command) => wire(command),
            Err(error) => refused(error, StatusCode::BAD_REQUEST),
        }
    }
    if let Some(body) = read::<CreateSymbol>(data, &mut read_as) {
        match (asset(&catalog, &body.base), asset(&catalog, &body.quote)) {
            (Ok(base), Ok(quote)) => wire(api::symbol_command(body, base, quote)),
            (Err(error), _) | (_, Err(error)) => refused(error, StatusCode::NOT_FOUND),
        }
    }
    if let Some(body) = read::<SetMark>(data, &mut read_as) {
        wire(CommandBody::SetMark { symbol: SymbolId(1), px: bourse_engine::Px(body.px) });
    }
    day_trading(data, &mut read_as);
    if let Ok(text) = std::str::from_utf8(data) {
        web_socket(&catalog, text);
    }
    query(data);
    read_as
}

/// The day-trading bodies, as their routes turn them into `Execute` calls; the
/// arguments also go through the exchange's grammar, as the service will.
fn day_trading(data: &[u8], read_as: &mut usize) {
    let user = "fuzz_user";
    let mut calls = Vec::new();
    if let Some(body) = read::<crate::daytrading::DtAmount>(data, read_as) {
        let _ = dt::amount_parse(&body.amount);
        calls.push((DtKind::Add, vec![body.amount.clone()]));
        calls.push((DtKind::SetBuyAmount, vec!["ABC".into(), body.amount.clone()]));
        calls.push((DtKind::SetSellAmount, vec!["ABC".into(), body.amount]));
    }
    if let Some(body) = read::<crate::daytrading::DtSymbol>(data, read_as) {
        let _ = dt::Sym::parse(&body.symbol);
        calls.push((DtKind::Quote, vec![body.symbol]));
    }
    if let Some(body) = read::<crate::daytrading::DtOrder>(data, read_as) {
        let _ = (dt::Sym::parse(&body.symbol), dt::amount_parse(&body.amount));
        calls.push((DtKind::Buy, vec![body.symbol.clone(), body.amount.clone()]));
        calls.push((DtKind::Sell, vec![body.symbol, body.amount]));
    }
    if let Some(body) = read::<crate::daytrading::DtPrice>(data, read_as) {
        let _ = dt::decimal_parse(&body.price);
        calls.push((DtKind::SetBuyTrigger, vec!["ABC".into(), body.price.clone()]));
        calls.push((DtKind::SetSellTrigger, vec!["ABC".into(), body.price]));
    }
    if let Some(body) = read::<crate::daytrading::DtFilename>(data, read_as) {
        let _ = (dt::filename_check(&body.filename), dt::xml_text_valid(&body.filename));
        // The global DUMPLOG acts as no user and takes the name alone.
        let request = crate::daytrading::execute_request("", DtKind::DumpLog, vec![body.filename.clone()]);
        assert_eq!(request.args, [body.filename]);
    }
    for (kind, rest) in calls {
        let args = crate::daytrading::command_args(user, rest.clone());
        assert_eq!(args.len(), rest.len() + 1, "the user comes first");
        let request = crate::daytrading::execute_request(user, kind, args);
        let back = bourse_protocol::daytrading::kind_from_wire(request.command, "fuzz");
        assert_eq!(back.ok(), Some(kind), "the command survives the wire form");
        assert_eq!(request.args[1..], rest[..]);
    }
}

/// `text` as a WebSocket text message: the request parsed, its subscription resolved,
/// and the answer the client gets written as its connection's writer would.
fn web_socket(catalog: &bourse_port::Catalog, text: &str) {
    let answer = match ws::parse_request(text) {
        Ok(WsRequest::Subscribe { channels, symbols }) => {
            let upstream = ws::upstream_channels(&channels);
            assert!(upstream.len() <= channels.len());
            let ids: Result<Vec<u32>, ApiError> =
                symbols.iter().map(|name| symbol(catalog, name).map(|id| id.0)).collect();
            match ids {
                Ok(ids) => WsMessage::Subscribed { channels, symbols: ids },
                Err(error) => ws::error_message(&error),
            }
        }
        Ok(WsRequest::Unsubscribe) => WsMessage::Subscribed { channels: Vec::new(), symbols: Vec::new() },
        Err(error) => {
            assert_eq!(error.status(), StatusCode::BAD_REQUEST);
            ws::error_message(&error)
        }
    };
    let frame = ws::text_frame(&answer, 1);
    let value: serde_json::Value = serde_json::from_str(&frame).expect("a frame is JSON");
    assert_eq!(value["seq"], 1, "a frame carries its seq");
}

/// `data` as a query string (bytes other than letters, digits, `=` and `&`
/// percent-encoded), read as each route's query parameters.
fn query(data: &[u8]) {
    let mut uri = String::from("/v1/x?");
    for &b in data.iter().take(2_000) {
        if b.is_ascii_alphanumeric() || b == b'=' || b == b'&' || b == b'_' {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    let request = Request::builder().uri(uri).body(()).expect("a percent-encoded URI is valid");
    let (mut parts, ()) = request.into_parts();
    if let Ok(Params(params)) = now(Params::<BookParams>::from_request_parts(&mut parts, &())) {
        let _ = params.levels;
    }
    if let Ok(Params(params)) = now(Params::<TradesParams>::from_request_parts(&mut parts, &())) {
        let _ = params.limit;
    }
    match now(Params::<crate::daytrading::DtFilenameParam>::from_request_parts(&mut parts, &())) {
        Ok(Params(params)) => {
            let _ = dt::filename_check(&params.filename);
        }
        Err(error) => refused(error, StatusCode::BAD_REQUEST),
    }
}

/// `data` as a JSON body of type `T`, read by the routes' extractor: the value (counted
/// in `read_as`), or `None` after checking that the refusal is a well-formed 400.
fn read<T: DeserializeOwned>(data: &[u8], read_as: &mut usize) -> Option<T> {
    let request = Request::builder()
        .method(Method::POST)
        .uri("/v1/x")
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(data.to_vec()))
        .expect("a request");
    match now(Body::<T>::from_request(request, &())) {
        Ok(Body(value)) => {
            *read_as += 1;
            Some(value)
        }
        Err(error) => {
            refused(error, StatusCode::BAD_REQUEST);
            None
        }
    }
}

/// A refusal has `status` and renders as an error body.
fn refused(error: ApiError, status: StatusCode) {
    assert_eq!(error.status(), status, "{error}");
    let body = serde_json::to_vec(&error.body()).expect("an error body serializes");
    let back: ErrorBody = serde_json::from_slice(&body).expect("an error body reads back");
    assert_eq!(back.error.message, error.to_string());
    assert_eq!(error.into_response().status(), status);
}

/// `command` survives the gRPC wire form unchanged.
fn wire(command: CommandBody) {
    let body = proto::client_command::Body::from(&command);
    assert_eq!(CommandBody::try_from(&body).as_ref(), Ok(&command), "a command survives the wire form");
}

/// The names this fuzzing knows instead of the exchange.
fn catalog() -> bourse_port::Catalog {
    let catalog = bourse_port::Catalog::default();
    let asset = |id: u32, name: &str| proto::AssetInfo { id, name: name.into(), ..Default::default() };
    catalog.learn_assets(vec![asset(1, "USD"), asset(2, "ACME")]);
    let spec = proto::SymbolSpec { name: "ACME/USD".into(), base: 2, quote: 1, ..Default::default() };
    catalog.learn_symbols(vec![proto::SymbolInfo { id: 1, spec: Some(spec) }]);
    catalog
}

/// The symbol `name` names (or is the id of), as `Upstreams::symbol` answers.
fn symbol(catalog: &bourse_port::Catalog, name: &str) -> Result<SymbolId, ApiError> {
    let found = catalog.find_symbol(name).ok_or(ApiError::Rejected(bourse_engine::Reject::SymbolUnknown))?;
    Ok(SymbolId(found.id))
}

/// The asset `name` names (or is the id of), as `Upstreams::asset` answers.
fn asset(catalog: &bourse_port::Catalog, name: &str) -> Result<AssetId, ApiError> {
    let found = catalog.find_asset(name).ok_or(ApiError::Rejected(bourse_engine::Reject::AssetUnknown))?;
    Ok(AssetId(found.id))
}

/// An order as `read_order` would have read it.
fn order() -> Order {
    Order {
        id: 42,
        account: 7,
        symbol: 1,
        side: Side::Buy,
        order_type: OrderType::Limit,
        px: Some(100),
        trigger: None,
        budget: None,
        tif: TimeInForce::Gtc,
        qty: 10,
        qty_filled: 0,
        qty_reduced: 0,
        qty_open: 10,
        qty_visible: 10,
        px_resting: Some(100),
        status: OrderStatus::Open,
        ts: 0,
        fills: Vec::new(),
        log_index: 1,
    }
}

/// The output of a future that cannot wait: an extractor over a request whose body is
/// all there.
fn now<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("an extractor waited on a request that is all there"),
    }
}
