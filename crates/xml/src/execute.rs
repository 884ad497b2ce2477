//! Executing a parsed request: each child becomes at most a few engine commands and
//! queries, in document order, and one result (spec sections 4, 5 and 9).
//!
//! Nothing here decides a trade or a balance: the engine reserves, matches at the
//! resting order's price, refunds price improvement and refuses what does not fit.
//! This module checks the protocol's own grammar, in the order section 9 gives
//! (missing attribute, invalid value in attribute order, account existence, then what
//! the engine says about funds or shares), converts values to engine units and back,
//! and words the engine's refusals in the protocol's terms.
//!
//! A child's commands are sent one at a time through one upstream session and each is
//! answered only once committed, so a later child sees the effects of earlier ones,
//! and every result the reply reports is durable.
//!
//! Texts beyond the spec's table, for conditions the protocol has no words for:
//! `Account suspended` (an operator suspended it), `Too many open orders` (the
//! engine's `orders_per_account_max`), `Too many accounts` (`accounts_max`),
//! `Service unavailable` (the cluster could not be reached: the command may or may not
//! have been applied), `Rejected: NAME` (any other engine refusal, by its stable name).

use bourse_engine::command::{CommandBody, OrderRequest, Tif};
use bourse_engine::{AccountId, Amount, OrderId, Outcome, Px, Qty, Reject, Side};
use bourse_protocol::proto;

use crate::exchange::{Exchange, SymbolIds, SymbolProblem, UpstreamError};
use crate::parse::{CreateChild, Request, SymbolChild, TxChild};
use crate::reply::{Item, OrderReport};
use crate::value::{self, Scales};

const SERVICE_UNAVAILABLE: &str = "Service unavailable";

/// Runs a request and returns its results, one per result-producing child.
pub async fn execute(exchange: &Exchange, request: Request) -> Vec<Item> {
    let session = exchange.session();
    let mut run = Run { exchange, session, items: Vec::new() };
    match request {
        Request::Create(children) => {
            for child in children {
                run.create_child(child).await;
            }
        }
        Request::Transactions { id, children } => {
            let acting = match value::account_id(&id) {
                Some(external_id) => match exchange.account(external_id).await {
                    Ok(found) => Acting::Account(found),
                    Err(_) => Acting::Unavailable,
                },
                None => Acting::Account(None),
            };
            for child in children {
                run.transaction_child(&acting, child).await;
            }
        }
    }
    run.items
}

/// The acting account of a `<transactions>`.
enum Acting {
    Account(Option<AccountId>),
    /// Its lookup failed upstream.
    Unavailable,
}

struct Run<'a> {
    exchange: &'a Exchange,
    session: usize,
    items: Vec<Item>,
}

/// The identifying attributes an error echoes: those the request carried, in order.
fn echo(attrs: &[(&'static str, &Option<String>)]) -> Vec<(&'static str, String)> {
    attrs.iter().filter_map(|(name, value)| value.as_ref().map(|v| (*name, v.clone()))).collect()
}

fn error(attrs: Vec<(&'static str, String)>, text: impl Into<String>) -> Item {
    Item::Error { attrs, text: text.into() }
}

/// The first missing attribute, in order.
fn missing(attrs: &[(&'static str, &Option<String>)]) -> Option<String> {
    attrs.iter().find(|(_, value)| value.is_none()).map(|(name, _)| format!("Missing attribute: {name}"))
}

impl Run<'_> {
    async fn submit(&self, body: CommandBody) -> Result<(Outcome, u64), UpstreamError> {
        self.exchange.submit(self.session, body).await
    }

    // --------------------------------------------------------------------------------
    // <create>
    // --------------------------------------------------------------------------------

    async fn create_child(&mut self, child: CreateChild) {
        match child {
            CreateChild::Account { id, balance } => {
                let item = self.create_account(&id, &balance).await;
                self.items.push(item);
            }
            CreateChild::Symbol { sym, accounts } => self.create_symbol(sym, accounts).await,
            CreateChild::Unknown(name) => self.items.push(error(Vec::new(), format!("Unknown element: {name}"))),
        }
    }

    async fn create_account(&self, id: &Option<String>, balance: &Option<String>) -> Item {
        let attrs = echo(&[("id", id)]);
        let (external_id, deposit) = match account_values(id, balance, &self.exchange.scales()) {
            Ok(values) => values,
            Err(text) => return error(attrs, text),
        };
        let id = id.as_deref().unwrap_or("");
        let body =
            CommandBody::CreateAccountWithId { external_id, asset: self.exchange.quote(), deposit: Amount(deposit) };
        match self.submit(body).await {
            Ok((Outcome::Ok { id: account }, _)) => {
                self.exchange.remember_account(external_id, AccountId(account as u32));
                Item::Created { id: id.to_owned() }
            }
            Ok((Outcome::Rejected(reject), _)) => error(
                attrs,
                match reject {
                    Reject::AccountIdTaken => "Account already exists".to_owned(),
                    Reject::AmountOverflow | Reject::AmountMustBePositive => "Invalid balance".to_owned(),
                    Reject::LimitReached => "Too many accounts".to_owned(),
                    other => format!("Rejected: {}", other.name()),
                },
            ),
            Err(_) => error(attrs, SERVICE_UNAVAILABLE),
        }
    }

    async fn create_symbol(&mut self, sym: Option<String>, accounts: Vec<SymbolChild>) {
        // The symbol is registered when its name is valid, whatever its accounts.
        let symbol = match sym.as_deref().and_then(value::symbol) {
            Some(name) => Some(self.exchange.symbol(name, true).await),
            None => None,
        };
        for child in accounts {
            let item = match child {
                SymbolChild::Unknown(name) => error(Vec::new(), format!("Unknown element: {name}")),
                SymbolChild::Account { id, shares } => self.credit(&sym, &symbol, &id, &shares).await,
            };
            self.items.push(item);
        }
    }

    async fn credit(
        &self,
        sym: &Option<String>,
        symbol: &Option<Result<Option<crate::exchange::SymbolIds>, SymbolProblem>>,
        id: &Option<String>,
        shares: &str,
    ) -> Item {
        let attrs = echo(&[("sym", sym), ("id", id)]);
        let (ids, external_id, amount) = match credit_values(sym, symbol, id, shares, &self.exchange.scales()) {
            Ok(values) => values,
            Err(text) => return error(attrs, text),
        };
        let Some(ids) = ids else { return error(attrs, SERVICE_UNAVAILABLE) };
        let account = match self.exchange.account(external_id).await {
            Ok(Some(account)) => account,
            Ok(None) => return error(attrs, "Account does not exist"),
            Err(_) => return error(attrs, SERVICE_UNAVAILABLE),
        };
        let body = CommandBody::Credit { account, asset: ids.base, amount: Amount(amount) };
        match self.submit(body).await {
            Ok((Outcome::Ok { .. }, _)) => {
                Item::Credited { sym: sym.clone().unwrap_or_default(), id: id.clone().unwrap_or_default() }
            }
            Ok((Outcome::Rejected(reject), _)) => error(
                attrs,
                match reject {
                    Reject::AccountUnknown => "Account does not exist".to_owned(),
                    Reject::AmountOverflow | Reject::AmountMustBePositive => "Invalid share amount".to_owned(),
                    other => format!("Rejected: {}", other.name()),
                },
            ),
            Err(_) => error(attrs, SERVICE_UNAVAILABLE),
        }
    }

    // --------------------------------------------------------------------------------
    // <transactions>
    // --------------------------------------------------------------------------------

    async fn transaction_child(&mut self, acting: &Acting, child: TxChild) {
        let item = match child {
            TxChild::Order { sym, amount, limit } => self.order(acting, &sym, &amount, &limit).await,
            TxChild::Query { id } => self.lookup(acting, &id, false).await,
            TxChild::Cancel { id } => self.lookup(acting, &id, true).await,
            TxChild::Unknown(name) => error(Vec::new(), format!("Unknown element: {name}")),
        };
        self.items.push(item);
    }

    async fn order(
        &self,
        acting: &Acting,
        sym: &Option<String>,
        amount: &Option<String>,
        limit: &Option<String>,
    ) -> Item {
        let attrs = echo(&[("sym", sym), ("amount", amount), ("limit", limit)]);
        let (name, qty, px) = match order_values(sym, amount, limit, &self.exchange.scales()) {
            Ok(values) => values,
            Err(text) => return error(attrs, text),
        };
        let account = match acting {
            Acting::Account(Some(account)) => *account,
            Acting::Account(None) => return error(attrs, "Account does not exist"),
            Acting::Unavailable => return error(attrs, SERVICE_UNAVAILABLE),
        };
        let side = if qty > 0 { Side::Buy } else { Side::Sell };
        // A buy of a symbol never created makes it (and rests); a sell of one cannot
        // have shares to sell.
        let ids = match self.exchange.symbol(name, side == Side::Buy).await {
            Ok(Some(ids)) => ids,
            Ok(None) => return error(attrs, "Insufficient shares"),
            Err(SymbolProblem::Incompatible) => return error(attrs, "Invalid symbol"),
            Err(SymbolProblem::Upstream(_)) => return error(attrs, SERVICE_UNAVAILABLE),
        };
        let mut request = OrderRequest::limit(account, ids.symbol, side, Px(px), Qty(qty.abs()), Tif::Gtc);
        request.stp = self.exchange.config().self_trade;
        match self.submit(CommandBody::Place(request)).await {
            Ok((Outcome::Ok { id }, _)) => Item::Opened {
                sym: sym.clone().unwrap_or_default(),
                amount: amount.clone().unwrap_or_default(),
                limit: limit.clone().unwrap_or_default(),
                id,
            },
            Ok((Outcome::Rejected(reject), _)) => error(attrs, place_refusal(reject, side)),
            Err(_) => error(attrs, SERVICE_UNAVAILABLE),
        }
    }

    /// `<query>` and `<cancel>`: the order must be the acting account's; another
    /// account's order reads exactly like an unknown one.
    async fn lookup(&self, acting: &Acting, id: &Option<String>, cancel: bool) -> Item {
        let attrs = echo(&[("id", id)]);
        let Some(text) = id else { return error(attrs, "Missing attribute: id") };
        let account = match acting {
            Acting::Account(Some(account)) => *account,
            Acting::Account(None) => return error(attrs, "Account does not exist"),
            Acting::Unavailable => return error(attrs, SERVICE_UNAVAILABLE),
        };
        let Some(order) = value::transaction_id(text) else { return error(attrs, "Unknown transaction") };
        let info = match self.exchange.order(order).await {
            Ok(Some(info)) if info.account == account.0 => info,
            Ok(_) => return error(attrs, "Unknown transaction"),
            Err(_) => return error(attrs, SERVICE_UNAVAILABLE),
        };
        if !cancel {
            return Item::Status { id: text.clone(), report: self.report(&info, true) };
        }
        if !is_open(&info) {
            return error(attrs, "Nothing to cancel");
        }
        let body = CommandBody::Cancel { account, symbol: bourse_engine::SymbolId(info.symbol), order: OrderId(order) };
        match self.submit(body).await {
            Ok((Outcome::Ok { .. }, _)) => {}
            // It filled (or was cancelled) between the read and the cancel.
            Ok((Outcome::Rejected(Reject::OrderUnknown), _)) => return error(attrs, "Nothing to cancel"),
            Ok((Outcome::Rejected(reject), _)) => return error(attrs, format!("Rejected: {}", reject.name())),
            Err(_) => return error(attrs, SERVICE_UNAVAILABLE),
        }
        match self.exchange.order(order).await {
            Ok(Some(info)) => Item::Canceled { id: text.clone(), report: self.report(&info, false) },
            _ => error(attrs, SERVICE_UNAVAILABLE),
        }
    }

    /// What `<status>` (with `open`) or `<canceled>` holds for an order.
    fn report(&self, info: &proto::OrderInfo, with_open: bool) -> OrderReport {
        report(&self.exchange.scales(), info, with_open)
    }
}

/// `<account id balance>` checked before anything is sent (missing attribute, then
/// each value's grammar): the external id and the opening deposit in cash units, or
/// the error's text.
pub(crate) fn account_values(
    id: &Option<String>,
    balance: &Option<String>,
    scales: &Scales,
) -> Result<(u64, i64), String> {
    if let Some(text) = missing(&[("id", id), ("balance", balance)]) {
        return Err(text);
    }
    let (id, balance) = (id.as_deref().unwrap_or(""), balance.as_deref().unwrap_or(""));
    let Some(external_id) = value::account_id(id) else { return Err("Invalid account id".into()) };
    match value::decimal(balance, scales.cash(), false) {
        Some(deposit) if deposit >= 0 => Ok((external_id, deposit)),
        _ => Err("Invalid balance".into()),
    }
}

/// A `<symbol sym>`'s `<account id>NUM</account>` checked before anything is sent,
/// given what looking the symbol up found (`None`: its name is invalid): the symbol's
/// ids (`None` when the lookup failed upstream), the external account id and the shares
/// in quantity units, or the error's text.
pub(crate) fn credit_values(
    sym: &Option<String>,
    symbol: &Option<Result<Option<SymbolIds>, SymbolProblem>>,
    id: &Option<String>,
    shares: &str,
    scales: &Scales,
) -> Result<(Option<SymbolIds>, u64, i64), String> {
    if let Some(text) = missing(&[("sym", sym), ("id", id)]) {
        return Err(text);
    }
    let ids = match symbol {
        None | Some(Err(SymbolProblem::Incompatible)) => return Err("Invalid symbol".into()),
        Some(Err(SymbolProblem::Upstream(_))) => None,
        Some(Ok(ids)) => *ids,
    };
    let Some(external_id) = id.as_deref().and_then(value::account_id) else {
        return Err("Invalid account id".into());
    };
    match value::decimal(shares, scales.quantity, false) {
        Some(amount) if amount > 0 => Ok((ids, external_id, amount)),
        _ => Err("Invalid share amount".into()),
    }
}

/// An `<order sym amount limit>` checked before anything is sent (missing attribute,
/// then each value's grammar in attribute order): the symbol's name, the signed
/// quantity (positive buys) in quantity units and the limit in price units, or the
/// error's text.
pub(crate) fn order_values<'a>(
    sym: &'a Option<String>,
    amount: &Option<String>,
    limit: &Option<String>,
    scales: &Scales,
) -> Result<(&'a str, i64, i64), String> {
    if let Some(text) = missing(&[("sym", sym), ("amount", amount), ("limit", limit)]) {
        return Err(text);
    }
    let Some(name) = sym.as_deref().and_then(value::symbol) else { return Err("Invalid symbol".into()) };
    let qty = match amount.as_deref().and_then(|a| value::decimal(a, scales.quantity, true)) {
        Some(qty) if qty != 0 && qty != i64::MIN => qty,
        _ => return Err("Invalid amount".into()),
    };
    match limit.as_deref().and_then(|l| value::decimal(l, scales.price, false)) {
        Some(px) if px > 0 => Ok((name, qty, px)),
        _ => Err("Invalid limit".into()),
    }
}

/// What `<status>` (with `open`) or `<canceled>` holds for an order.
pub(crate) fn report(scales: &Scales, info: &proto::OrderInfo, with_open: bool) -> OrderReport {
    // An expired Day order (placed over another protocol) reads as cancelled here:
    // the XML protocol has no word for an expiry.
    let cancelled =
        [proto::OrderStatus::Cancelled, proto::OrderStatus::Expired].map(|s| s as i32).contains(&info.status);
    let open =
        (with_open && is_open(info) && info.qty_open > 0).then(|| value::format_scaled(info.qty_open, scales.quantity));
    // Everything that did not execute: what the cancel took and, for an order an
    // operator reduced over gRPC, what the reduces took.
    let canceled = cancelled.then(|| {
        let shares = info.qty.saturating_sub(info.qty_filled);
        (value::format_scaled(shares, scales.quantity), value::seconds(info.ts_closed))
    });
    let executed = info
        .fills
        .iter()
        .map(|fill| {
            (
                value::format_scaled(fill.qty, scales.quantity),
                value::format_scaled(fill.px, scales.price),
                value::seconds(fill.ts),
            )
        })
        .collect();
    OrderReport { open, canceled, executed }
}

fn is_open(info: &proto::OrderInfo) -> bool {
    info.status == proto::OrderStatus::Open as i32 || info.status == proto::OrderStatus::Pending as i32
}

/// An engine refusal of an order, in the protocol's words.
fn place_refusal(reject: Reject, side: Side) -> String {
    let text = match (reject, side) {
        (Reject::BalanceInsufficient, Side::Buy) => "Insufficient funds",
        (Reject::BalanceInsufficient, Side::Sell) => "Insufficient shares",
        // amount × limit beyond any balance the exchange can hold: it cannot be paid.
        (Reject::AmountOverflow, Side::Buy) => "Insufficient funds",
        (Reject::AmountOverflow, Side::Sell) => "Invalid amount",
        (Reject::AccountUnknown, _) => "Account does not exist",
        (Reject::SymbolUnknown, _) => "Invalid symbol",
        (Reject::PxMustBeMultipleOfTick | Reject::PxOutOfBounds, _) => "Invalid limit",
        (Reject::QtyMustBePositive | Reject::QtyMustBeMultipleOfLot, _) => "Invalid amount",
        (Reject::AccountSuspended, _) => "Account suspended",
        (Reject::OpenOrdersLimit, _) => "Too many open orders",
        (other, _) => return format!("Rejected: {}", other.name()),
    };
    text.to_owned()
}
