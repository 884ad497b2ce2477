//! Positions: RequestForPositions (35=AN) to the gateway's `Query.GetAccountReport`
//! with the session's key, answered with one RequestForPositionsAck (35=AO) and then
//! one PositionReport (35=AP) per margin position of the account (open positions, and
//! flat ones that still carry realised P&L, as the report lists them).
//!
//! Mappings (FIX 4.4), and why:
//! - PosReqType (724) 0 (positions) is served. 1 (trades), 2 (exercises), 3
//!   (assignments) and values FIX 4.4 does not define are refused, each saying which.
//!   SubscriptionRequestType (263), when sent, must be 0 (snapshot): positions are not
//!   streamed, and a subscription is refused rather than answered once.
//! - Account (1) is the exchange account number, as in NewOrderSingle; the gateway
//!   checks the key may read it. AccountType (581), which the 4.4 dictionary requires
//!   but the exchange has one kind of, is 1 (customer side) when sent, and answers
//!   carry 1. Symbol (55), optional, restricts the report to that symbol.
//! - ClearingBusinessDate (715, YYYYMMDD) is echoed in every message; the report is of
//!   the positions as they stand when the request is read (linearizably), whatever the
//!   date: the exchange keeps no positions by date. TransactTime (60) is required and
//!   not echoed: neither AO nor AP has it in 4.4.
//! - Each AP: PosMaintRptID, PosReqID, PosReqType 0, TotalNumPosReports, PosReqResult
//!   0, ClearingBusinessDate, Account, AccountType 1, Symbol (the symbol's name, as
//!   NewOrderSingle names it) with ContractMultiplier (231), then
//!   - SettlPrice (730) the symbol's mark, SettlPriceType (731) 2 (theoretical): an
//!     intraday mark, not the close's final settlement price;
//!   - PriorSettlPrice (734) the price the position is carried at, cost / (size ×
//!     multiplier): its average open price, which each close of the trading day resets
//!     to that day's mark, so (SettlPrice − PriorSettlPrice) × size × multiplier is the
//!     unrealised P&L. A flat position carries nothing: its PriorSettlPrice is the mark;
//!   - NoPositions (702): one entry, PosType (703) FIN (end-of-day quantity: the
//!     position as it stands, which is what the close would settle), LongQty (704) the
//!     size when long, ShortQty (705) when short, the other 0;
//!   - NoPosAmt (753): PosAmtType (707) FMTM (final mark-to-market amount) with PosAmt
//!     (708) the unrealised P&L at the mark, and CASH (cash amount) with the realised
//!     P&L: 4.4 has no realised-P&L code, and CASH is the one for an amount already
//!     paid into (or out of) the account's cash, which realised P&L is;
//!   - Text: the initial and maintenance margin, the liquidation price and the open
//!     orders' quantities, which 4.4 has no fields for.
//!
//!   Prices and quantities are integers in engine units, amounts in minor units of the
//!   symbol's quote asset, as everywhere in this front end. A position of a symbol
//!   without a mark (none can hold one: a position comes from a trade) would carry no
//!   SettlPrice, SettlPriceType or PriorSettlPrice, and its Text would say so.
//! - Answers: AO with PosReqStatus (729) 0 (completed) and PosReqResult (728) 0 and
//!   TotalNumPosReports n before n APs; PosReqResult 2 (no positions found) with
//!   PosReqStatus 0 and no AP when there are none (in the account, in the symbol asked
//!   for, or the symbol is unknown). Refusals are AO with PosReqStatus 2 (rejected), a
//!   PosReqResult and Text, never a default: 1 (invalid or unsupported: PosReqID,
//!   PosReqType, ClearingBusinessDate or TransactTime missing, a value not served, an
//!   account that is not a number or does not exist), 3 (the key may not read the
//!   account), 99 (the exchange could not be asked). What FIX 4.4 itself cannot read is
//!   a session-level Reject (35=3), as for the other messages of this front end: no
//!   Account (an AO without one is invalid in 4.4, so none can be sent), a
//!   ClearingBusinessDate that is not a date.
//! - AO and AP are numbered and counted but not kept for resending: a ResendRequest
//!   gap-fills them as it does market data (a position report resent after a
//!   reconnection would be stale); a client asks again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bourse_engine::AccountId;
use bourse_protocol::proto;

use crate::codec::{FieldError, Message, RejectReason};
use crate::session::{SessionCore, Upstream};
use crate::tags::{self, msg};
use crate::time::now_ns;

/// PosReqResult (728) values.
pub(crate) const VALID: u32 = 0;
pub(crate) const INVALID: u32 = 1;
pub(crate) const NONE_FOUND: u32 = 2;
pub(crate) const NOT_AUTHORIZED: u32 = 3;
pub(crate) const OTHER: u32 = 99;

/// A RequestForPositions as read: what every answer to it echoes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    /// PosReqID (710); absent only in a refused request.
    pub id: Option<String>,
    /// Account (1) as sent.
    pub account: String,
    /// ClearingBusinessDate (715), YYYYMMDD; absent only in a refused request.
    pub date: Option<String>,
    /// Symbol (55): report this symbol only.
    pub symbol: Option<String>,
}

/// An answer that carries no position: PosReqResult and Text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Denial {
    pub result: u32,
    pub text: String,
}

impl Denial {
    fn new(result: u32, text: impl Into<String>) -> Denial {
        Denial { result, text: text.into() }
    }
}

/// Handles a RequestForPositions. An error is a session-level problem for a Reject
/// (35=3); everything else is answered with an AO (and the APs).
pub(crate) async fn on_request(core: &Arc<SessionCore>, message: &Message) -> Result<(), FieldError> {
    let (request, checked) = check_request(message)?;
    let found = match (checked, core.upstream()) {
        (Ok(account), Some(upstream)) => positions(&upstream, &request, account).await,
        (Ok(_), None) => Err(Denial::new(OTHER, "no upstream session")),
        (Err(denial), _) => Err(denial),
    };
    let messages = answer(&request, found);
    let mut state = core.lock();
    for message in messages {
        core.send_locked(&mut state, message);
    }
    Ok(())
}

/// The checks of a RequestForPositions that need no upstream. The outer error is a
/// session-level Reject; otherwise the request as its answers echo it, with the
/// account to read or the refusal.
pub(crate) fn check_request(message: &Message) -> Result<(Request, Result<AccountId, Denial>), FieldError> {
    let account = message.require(tags::ACCOUNT)?.to_owned();
    let date = optional_text(message, tags::CLEARING_BUSINESS_DATE)?;
    if date.as_deref().is_some_and(|date| !is_local_mkt_date(date)) {
        return Err(FieldError::new(
            RejectReason::IncorrectDataFormat,
            Some(tags::CLEARING_BUSINESS_DATE),
            "ClearingBusinessDate (715) must be a date, YYYYMMDD",
        ));
    }
    let request = Request {
        id: optional_text(message, tags::POS_REQ_ID)?,
        account,
        date,
        symbol: optional_text(message, tags::SYMBOL)?,
    };
    let checked = check_values(message, &request);
    Ok((request, checked))
}

/// `tag`'s value when present; not UTF-8 is a format error.
fn optional_text(message: &Message, tag: u32) -> Result<Option<String>, FieldError> {
    match message.get(tag) {
        None => Ok(None),
        Some(_) => message.require(tag).map(|value| Some(value.to_owned())),
    }
}

/// What a request asks for, checked: the account to read, or why it is refused
/// (PosReqResult 1, invalid or unsupported).
fn check_values(message: &Message, request: &Request) -> Result<AccountId, Denial> {
    let refuse = |text: String| Err(Denial::new(INVALID, text));
    let value = |tag| message.get(tag).map(|v| String::from_utf8_lossy(v).into_owned());
    if request.id.is_none() {
        return refuse("PosReqID (710) is required".into());
    }
    match value(tags::POS_REQ_TYPE) {
        None => return refuse("PosReqType (724) is required: 0 (positions)".into()),
        Some(kind) => {
            if let Some(text) = pos_req_type_refusal(&kind) {
                return refuse(text);
            }
        }
    }
    if let Some(kind) = value(tags::SUBSCRIPTION_REQUEST_TYPE).filter(|kind| kind != "0") {
        return refuse(format!("SubscriptionRequestType {kind} is not supported: 0 (snapshot) only"));
    }
    let Ok(account) = request.account.parse::<u32>() else {
        return refuse("Account (1) must be the exchange account number".into());
    };
    if let Some(kind) = value(tags::ACCOUNT_TYPE).filter(|kind| kind != "1") {
        return refuse(format!("AccountType {kind} is not supported: 1 (the exchange's accounts)"));
    }
    if request.date.is_none() {
        return refuse("ClearingBusinessDate (715) is required".into());
    }
    if message.get(tags::TRANSACT_TIME).is_none() {
        return refuse("TransactTime (60) is required".into());
    }
    Ok(AccountId(account))
}

/// Why PosReqType `kind` is not served; `None` for 0 (positions).
fn pos_req_type_refusal(kind: &str) -> Option<String> {
    let name = match kind.parse::<u32>() {
        Ok(0) => return None,
        Ok(1) => "trades",
        Ok(2) => "exercises",
        Ok(3) => "assignments",
        _ => {
            return Some(format!(
                "PosReqType {kind} is not a FIX 4.4 value (0 positions, 1 trades, 2 exercises, 3 assignments): \
                 0 (positions) is supported"
            ))
        }
    };
    Some(format!("PosReqType {kind} ({name}) is not supported: 0 (positions) only"))
}

/// A LocalMktDate: YYYYMMDD with a month 01–12 and a day 01–31.
fn is_local_mkt_date(date: &str) -> bool {
    let bytes = date.as_bytes();
    if bytes.len() != 8 || !bytes.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let (month, day) = (&date[4..6], &date[6..8]);
    ("01"..="12").contains(&month) && ("01"..="31").contains(&day)
}

/// One position to report, with its symbol.
pub(crate) struct Found {
    pub symbol: proto::SymbolInfo,
    pub position: proto::PositionInfo,
}

/// The positions `request` asks for (at least one), or why there are none to report.
async fn positions(upstream: &Upstream, request: &Request, account: AccountId) -> Result<Vec<Found>, Denial> {
    // Linearizable: a report asked for after a fill's ExecutionReport shows that fill.
    let mut query = upstream.query.clone().linearizable(true);
    let reply = query.account_report(account).await.map_err(|error| upstream_denial(error, account))?;
    let only = match &request.symbol {
        Some(name) => match upstream.symbol(name).await {
            Some(symbol) => Some(symbol.id),
            None => return Err(Denial::new(NONE_FOUND, format!("unknown symbol {name}"))),
        },
        None => None,
    };
    let mut found = Vec::new();
    for position in reply.positions.into_iter().filter(|p| only.is_none_or(|id| p.symbol == id)) {
        let Some(symbol) = upstream.symbol_by_id(position.symbol).await else {
            return Err(Denial::new(OTHER, format!("symbol {} is not in the exchange's list", position.symbol)));
        };
        found.push(Found { symbol, position });
    }
    if found.is_empty() {
        let text = match &request.symbol {
            Some(name) => format!("account {} has no position in {name}", account.0),
            None => format!("account {} has no positions", account.0),
        };
        return Err(Denial::new(NONE_FOUND, text));
    }
    Ok(found)
}

/// The refusal of a failed account report.
fn upstream_denial(error: bourse_client::Error, account: AccountId) -> Denial {
    use bourse_client::Error;
    match error {
        Error::Status { code: tonic::Code::PermissionDenied | tonic::Code::Unauthenticated, message } => {
            Denial::new(NOT_AUTHORIZED, message)
        }
        Error::NotFound(_) => Denial::new(INVALID, format!("unknown account {}", account.0)),
        other => Denial::new(OTHER, format!("positions unavailable: {other}")),
    }
}

/// The messages answering `request`: the AO, then an AP per position.
pub(crate) fn answer(request: &Request, found: Result<Vec<Found>, Denial>) -> Vec<Message> {
    match found {
        Ok(found) => {
            let total = found.len();
            let mut out = vec![ack(request, total, VALID, None)];
            out.extend(found.iter().map(|f| position_report(request, total, &f.symbol, &f.position)));
            out
        }
        Err(denial) => vec![ack(request, 0, denial.result, Some(&denial.text))],
    }
}

/// PosMaintRptIDs: unique in this process (a timestamp and a counter, like ExecIDs).
fn report_id() -> String {
    static REPORTS: AtomicU64 = AtomicU64::new(0);
    format!("{:x}.{}", now_ns(), REPORTS.fetch_add(1, Ordering::Relaxed) + 1)
}

/// A RequestForPositionsAck (fields in the FIX 4.4 dictionary's order).
pub(crate) fn ack(request: &Request, total: usize, result: u32, text: Option<&str>) -> Message {
    // A request that was answered, with or without positions, is completed.
    let status = if matches!(result, VALID | NONE_FOUND) { "0" } else { "2" };
    let mut ack = Message::new(msg::REQUEST_FOR_POSITIONS_ACK);
    ack.push(tags::POS_MAINT_RPT_ID, report_id());
    if let Some(id) = &request.id {
        ack.push(tags::POS_REQ_ID, id);
    }
    ack.push_display(tags::TOTAL_NUM_POS_REPORTS, total)
        .push_display(tags::POS_REQ_RESULT, result)
        .push(tags::POS_REQ_STATUS, status)
        .push(tags::ACCOUNT, &request.account)
        .push(tags::ACCOUNT_TYPE, "1");
    if let Some(symbol) = &request.symbol {
        ack.push(tags::SYMBOL, symbol);
    }
    if let Some(text) = text {
        ack.push(tags::TEXT, text);
    }
    ack
}

/// A PositionReport of one position (fields in the FIX 4.4 dictionary's order).
pub(crate) fn position_report(
    request: &Request,
    total: usize,
    symbol: &proto::SymbolInfo,
    position: &proto::PositionInfo,
) -> Message {
    let spec = symbol.spec.as_ref();
    let multiplier = spec.and_then(|spec| spec.margin.as_ref()).map(|margin| margin.multiplier);
    let mut report = Message::new(msg::POSITION_REPORT);
    report.push(tags::POS_MAINT_RPT_ID, report_id());
    if let Some(id) = &request.id {
        report.push(tags::POS_REQ_ID, id);
    }
    report
        .push(tags::POS_REQ_TYPE, "0")
        .push_display(tags::TOTAL_NUM_POS_REPORTS, total)
        .push_display(tags::POS_REQ_RESULT, VALID)
        .push(tags::CLEARING_BUSINESS_DATE, request.date.as_deref().unwrap_or(""))
        .push(tags::ACCOUNT, &request.account)
        .push(tags::ACCOUNT_TYPE, "1")
        .push(tags::SYMBOL, symbol_name(symbol));
    if let Some(multiplier) = multiplier {
        report.push_display(tags::CONTRACT_MULTIPLIER, multiplier);
    }
    if let Some(mark) = position.mark {
        let carried = carried_px(position, multiplier).unwrap_or_else(|| mark.to_string());
        report
            .push_display(tags::SETTL_PRICE, mark)
            .push(tags::SETTL_PRICE_TYPE, "2")
            .push(tags::PRIOR_SETTL_PRICE, carried);
    }
    report
        .push(tags::NO_POSITIONS, "1")
        .push(tags::POS_TYPE, "FIN")
        .push_display(tags::LONG_QTY, position.size.max(0))
        .push_display(tags::SHORT_QTY, position.size.min(0).unsigned_abs())
        .push(tags::NO_POS_AMT, "2")
        .push(tags::POS_AMT_TYPE, "FMTM")
        .push_display(tags::POS_AMT, position.unrealized)
        .push(tags::POS_AMT_TYPE, "CASH")
        .push_display(tags::POS_AMT, position.realized)
        .push(tags::TEXT, margin_text(position));
    report
}

/// The symbol's name (its id if it had none, which the exchange does not allow).
fn symbol_name(symbol: &proto::SymbolInfo) -> String {
    match symbol.spec.as_ref().map(|spec| spec.name.as_str()) {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => symbol.id.to_string(),
    }
}

/// The price an open position is carried at, cost / (size × multiplier); `None` when
/// flat (or the multiplier is unknown).
fn carried_px(position: &proto::PositionInfo, multiplier: Option<i64>) -> Option<String> {
    let contracts = position.size.checked_mul(multiplier?).filter(|&n| n != 0)?;
    Some(crate::orders::decimal_ratio(i128::from(position.cost), contracts))
}

/// What 4.4 has no field for: margins, the liquidation price, open orders.
fn margin_text(position: &proto::PositionInfo) -> String {
    let liquidation = match position.liquidation_px {
        Some(px) => format!("liquidation price {px}"),
        None => "no liquidation price".to_owned(),
    };
    let mark = if position.mark.is_some() { "" } else { "no mark yet; " };
    format!(
        "{mark}initial margin {}, maintenance margin {}, {liquidation}, open buy {}, open sell {}",
        position.initial_margin, position.maintenance_margin, position.buying, position.selling
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(fields: &[(u32, &str)]) -> Message {
        let mut message = Message::new(msg::REQUEST_FOR_POSITIONS);
        for (tag, value) in fields {
            message.push(*tag, value);
        }
        message
    }

    const GOOD: &[(u32, &str)] = &[(710, "p1"), (724, "0"), (1, "1"), (581, "1"), (715, "20260102"), (60, "x")];

    fn with(tag: u32, value: Option<&str>) -> Message {
        let mut fields: Vec<(u32, &str)> = GOOD.iter().copied().filter(|(t, _)| *t != tag).collect();
        if let Some(value) = value {
            fields.push((tag, value));
        }
        request(&fields)
    }

    fn denial(message: &Message) -> Denial {
        check_request(message).expect("no Reject").1.expect_err("refused")
    }

    #[test]
    fn a_good_request_names_its_account() {
        let (request, checked) = check_request(&request(GOOD)).unwrap();
        assert_eq!(checked, Ok(AccountId(1)));
        assert_eq!(request.id.as_deref(), Some("p1"));
        assert_eq!(request.date.as_deref(), Some("20260102"));
        assert_eq!(request.symbol, None);
        // AccountType and SubscriptionRequestType may be left out.
        let (_, checked) = check_request(&with(581, None)).unwrap();
        assert_eq!(checked, Ok(AccountId(1)));
        let (_, checked) = check_request(&with(263, Some("0"))).unwrap();
        assert_eq!(checked, Ok(AccountId(1)));
    }

    #[test]
    fn what_is_not_served_is_refused_with_a_reason() {
        let cases = [
            (with(710, None), "PosReqID (710) is required"),
            (with(724, None), "PosReqType (724) is required"),
            (with(724, Some("1")), "PosReqType 1 (trades) is not supported"),
            (with(724, Some("3")), "PosReqType 3 (assignments) is not supported"),
            (with(724, Some("99")), "PosReqType 99 is not a FIX 4.4 value"),
            (with(724, Some("x")), "PosReqType x is not a FIX 4.4 value"),
            (with(263, Some("1")), "SubscriptionRequestType 1 is not supported"),
            (with(1, Some("alice")), "Account (1) must be the exchange account number"),
            (with(1, Some("4294967296")), "Account (1) must be the exchange account number"),
            (with(581, Some("3")), "AccountType 3 is not supported"),
            (with(715, None), "ClearingBusinessDate (715) is required"),
            (with(60, None), "TransactTime (60) is required"),
        ];
        for (message, text) in cases {
            let denial = denial(&message);
            assert_eq!(denial.result, INVALID, "{message:?}");
            assert!(denial.text.starts_with(text), "{:?} does not start with {text:?}", denial.text);
        }
    }

    #[test]
    fn what_fix_cannot_read_is_a_reject() {
        let error = check_request(&with(1, None)).unwrap_err();
        assert_eq!((error.reason, error.tag), (RejectReason::RequiredTagMissing, Some(1)));
        for date in ["2026010", "2026-01-02", "20261302", "20260100", "20260132", "abcdefgh"] {
            let error = check_request(&with(715, Some(date))).unwrap_err();
            assert_eq!((error.reason, error.tag), (RejectReason::IncorrectDataFormat, Some(715)), "{date}");
        }
        let mut bad = with(710, None);
        bad.fields.push((710, vec![0xff]));
        assert_eq!(check_request(&bad).unwrap_err().reason, RejectReason::IncorrectDataFormat);
    }

    fn position(size: i64, cost: i64, mark: Option<i64>) -> proto::PositionInfo {
        proto::PositionInfo {
            symbol: 1,
            size,
            cost,
            realized: 800,
            buying: 2,
            selling: 0,
            mark,
            unrealized: 600,
            initial_margin: 660,
            maintenance_margin: 330,
            liquidation_px: None,
        }
    }

    fn symbol() -> proto::SymbolInfo {
        proto::SymbolInfo {
            id: 1,
            spec: Some(proto::SymbolSpec {
                name: "FUT/USD".into(),
                margin: Some(proto::MarginSpec { multiplier: 10, ..Default::default() }),
                ..Default::default()
            }),
        }
    }

    fn fields(message: &Message) -> Vec<(u32, String)> {
        message
            .fields
            .iter()
            .filter(|(tag, _)| *tag != tags::POS_MAINT_RPT_ID)
            .map(|(tag, value)| (*tag, String::from_utf8_lossy(value).into_owned()))
            .collect()
    }

    #[test]
    fn reports_carry_the_position_in_dictionary_order() {
        let (request, _) = check_request(&request(GOOD)).unwrap();
        let report = position_report(&request, 2, &symbol(), &position(-6, -6_300, Some(110)));
        let expected: Vec<(u32, String)> = [
            (35, "AP"),
            (710, "p1"),
            (724, "0"),
            (727, "2"),
            (728, "0"),
            (715, "20260102"),
            (1, "1"),
            (581, "1"),
            (55, "FUT/USD"),
            (231, "10"),
            (730, "110"),
            (731, "2"),
            (734, "105"),
            (702, "1"),
            (703, "FIN"),
            (704, "0"),
            (705, "6"),
            (753, "2"),
            (707, "FMTM"),
            (708, "600"),
            (707, "CASH"),
            (708, "800"),
            (58, "initial margin 660, maintenance margin 330, no liquidation price, open buy 2, open sell 0"),
        ]
        .iter()
        .map(|(t, v)| (*t, (*v).to_owned()))
        .collect();
        assert_eq!(fields(&report), expected);
        assert!(!report.get_str(tags::POS_MAINT_RPT_ID).unwrap_or("").is_empty());
        // A carried price with a fraction; a flat position is carried at the mark; no mark, no prices.
        let report = position_report(&request, 1, &symbol(), &position(3, 3_155, Some(110)));
        assert_eq!(report.get_str(tags::PRIOR_SETTL_PRICE), Some("105.16666666"));
        let report = position_report(&request, 1, &symbol(), &position(0, 0, Some(110)));
        assert_eq!(report.get_str(tags::PRIOR_SETTL_PRICE), Some("110"));
        let report = position_report(&request, 1, &symbol(), &position(0, 0, None));
        assert_eq!((report.get(730), report.get(731), report.get(734)), (None, None, None));
        assert!(report.get_str(tags::TEXT).unwrap_or("").starts_with("no mark yet"));
    }

    #[test]
    fn acks_say_completed_or_rejected() {
        let (request, _) = check_request(&with(55, Some("FUT/USD"))).unwrap();
        let ok = answer(&request, Ok(vec![Found { symbol: symbol(), position: position(1, 10, Some(1)) }]));
        assert_eq!(ok.len(), 2);
        let expected: Vec<(u32, String)> =
            [(35, "AO"), (710, "p1"), (727, "1"), (728, "0"), (729, "0"), (1, "1"), (581, "1"), (55, "FUT/USD")]
                .iter()
                .map(|(t, v)| (*t, (*v).to_owned()))
                .collect();
        assert_eq!(fields(&ok[0]), expected);
        assert_ne!(ok[0].get(tags::POS_MAINT_RPT_ID), ok[1].get(tags::POS_MAINT_RPT_ID));
        let none = answer(&request, Err(Denial::new(NONE_FOUND, "none")));
        assert_eq!((none.len(), none[0].get_str(729), none[0].get_str(727)), (1, Some("0"), Some("0")));
        let refused = answer(&request, Err(Denial::new(NOT_AUTHORIZED, "not yours")));
        assert_eq!((refused[0].get_str(728), refused[0].get_str(729)), (Some("3"), Some("2")));
        assert_eq!(refused[0].get_str(58), Some("not yours"));
    }
}
