//! Day-trading entries and results on the wire (`DayTradingCommand`,
//! `DayTradingQuote`, `DayTradingResult`, `GetDayTradingArmedReply`) and their engine
//! counterparts (`bourse_engine::daytrading`).
//!
//! A result is built from the engine's output for the command at its log point: the
//! `userCommand` record's number and the `Done` event's values, plus, for
//! `DISPLAY_SUMMARY`, the summary read from the ledger right after the command was
//! applied (nothing else has been applied in between, so it is the state at that
//! point). A duplicate (a retry the engine recognised) is answered from the user's
//! recent history when the command is still in it, and otherwise with its outcome only.

use bourse_engine::daytrading::{DtCommand, DtError, DtEvent, DtKind, DtQuote, DtRequest, DtReturn, QuoteSource, Sym};
use bourse_engine::{ClientId, Engine, Event, Outcome};

use crate::convert::ConvertError;
use crate::proto;

/// The wire number of a command kind.
pub fn kind_wire(kind: DtKind) -> i32 {
    i32::from(kind.code())
}

/// The command kind of a wire number.
pub fn kind_from_wire(value: i32, field: &'static str) -> Result<DtKind, ConvertError> {
    if value == 0 {
        return Err(ConvertError::EnumUnspecified { field });
    }
    u8::try_from(value)
        .ok()
        .and_then(DtKind::from_code)
        .ok_or(ConvertError::EnumUnknown { field, value: i64::from(value) })
}

fn source_wire(source: QuoteSource) -> i32 {
    match source {
        QuoteSource::Market => proto::QuoteSource::Market as i32,
        QuoteSource::Emulator => proto::QuoteSource::Emulator as i32,
        QuoteSource::LegacyTcp => proto::QuoteSource::LegacyTcp as i32,
    }
}

fn source_from_wire(value: i32) -> Result<QuoteSource, ConvertError> {
    let field = "DayTradingQuote.source";
    match proto::QuoteSource::try_from(value) {
        Ok(proto::QuoteSource::Market) => Ok(QuoteSource::Market),
        Ok(proto::QuoteSource::Emulator) => Ok(QuoteSource::Emulator),
        Ok(proto::QuoteSource::LegacyTcp) => Ok(QuoteSource::LegacyTcp),
        Ok(proto::QuoteSource::Unspecified) => Err(ConvertError::EnumUnspecified { field }),
        Err(_) => Err(ConvertError::EnumUnknown { field, value: i64::from(value) }),
    }
}

impl From<&DtQuote> for proto::DayTradingQuote {
    fn from(quote: &DtQuote) -> Self {
        proto::DayTradingQuote {
            symbol: quote.symbol.as_str().to_owned(),
            price: quote.price,
            userid: quote.userid.clone(),
            quote_server_time: quote.quote_server_time,
            cryptokey: quote.cryptokey.clone(),
            source: source_wire(quote.source),
            transaction_num: quote.transaction_num,
        }
    }
}

impl TryFrom<&proto::DayTradingQuote> for DtQuote {
    type Error = ConvertError;

    /// The symbol must be 1 to 3 upper-case letters (the engine's symbol type holds no
    /// other); the rest the engine judges.
    fn try_from(quote: &proto::DayTradingQuote) -> Result<Self, ConvertError> {
        let symbol = Sym::parse(&quote.symbol).ok_or(ConvertError::ValueOutOfRange {
            field: "DayTradingQuote.symbol",
            value: quote.symbol.len() as u64,
        })?;
        Ok(DtQuote {
            symbol,
            price: quote.price,
            userid: quote.userid.clone(),
            quote_server_time: quote.quote_server_time,
            cryptokey: quote.cryptokey.clone(),
            source: source_from_wire(quote.source)?,
            transaction_num: quote.transaction_num,
        })
    }
}

impl From<&DtCommand> for proto::DayTradingCommand {
    fn from(command: &DtCommand) -> Self {
        proto::DayTradingCommand {
            command: kind_wire(command.kind),
            args: command.args.clone(),
            transaction_num: command.transaction_num,
            caller: command.caller.clone(),
            admin: command.admin,
            quote: command.quote.as_ref().map(Into::into),
        }
    }
}

impl TryFrom<&proto::DayTradingCommand> for DtCommand {
    type Error = ConvertError;

    fn try_from(command: &proto::DayTradingCommand) -> Result<Self, ConvertError> {
        Ok(DtCommand {
            kind: kind_from_wire(command.command, "DayTradingCommand.command")?,
            args: command.args.clone(),
            transaction_num: command.transaction_num,
            caller: command.caller.clone(),
            admin: command.admin,
            quote: command.quote.as_ref().map(DtQuote::try_from).transpose()?,
        })
    }
}

/// The oneof body of a day-trading entry.
pub fn body_wire(request: &DtRequest) -> proto::client_command::Body {
    match request {
        DtRequest::Command(command) => proto::client_command::Body::DayTrading(command.into()),
        DtRequest::Quote(quote) => proto::client_command::Body::DayTradingQuote(quote.into()),
    }
}

/// The result of the day-trading command just applied: `events` are the command's
/// events, `ts` its log stamp (ns). `None` for a poller's quote (it has no result) or a
/// rejected entry.
pub fn result(engine: &Engine, command: &DtCommand, events: &[Event], ts: u64) -> Option<proto::DayTradingResult> {
    let mut txn = None;
    let mut done = None;
    for event in events {
        match event {
            Event::DayTrading(DtEvent::UserCommand { txn: n }) => txn = Some(*n),
            Event::DayTrading(DtEvent::Done { error, ret }) => done = Some((*error, *ret)),
            _ => {}
        }
    }
    let (error, ret) = done?;
    Some(build(engine, command, txn?, ts / 1_000_000, error, ret))
}

/// The answer to a retried day-trading command: the result its first send got, which
/// the client's session keeps as long as it keeps the outcome (so for every retry the
/// engine answers as a duplicate). A log applied by an older build has no such record:
/// then the user's recent history, then the outcome alone. A command the engine
/// refused had no result the first time and has none now.
pub fn duplicate(
    engine: &Engine,
    client: ClientId,
    seq: u64,
    command: &DtCommand,
    outcome: Outcome,
    ts: u64,
) -> Option<proto::DayTradingResult> {
    let Outcome::Ok { id } = outcome else { return None };
    let item = engine.day_trading_result(client, seq).or_else(|| match (command.userid(), command.transaction_num) {
        (Some(user), txn) if txn > 0 => engine.day_trading().recent_result(user, txn),
        _ => None,
    });
    Some(match item {
        Some(item) => build(engine, command, item.txn, item.stamp_ms, item.error, item.ret),
        None => {
            let error = DtError::from_code(id);
            build(engine, command, command.transaction_num, ts / 1_000_000, error, DtReturn::Nothing)
        }
    })
}

fn build(
    engine: &Engine,
    command: &DtCommand,
    txn: u64,
    stamp: u64,
    error: Option<DtError>,
    ret: DtReturn,
) -> proto::DayTradingResult {
    let mut result = proto::DayTradingResult {
        transaction_num: txn,
        command: kind_wire(command.kind),
        error: error.map(|e| e.message().to_owned()).unwrap_or_default(),
        error_code: error.map_or(0, |e| u32::from(e.code())),
        stamp,
        ..proto::DayTradingResult::default()
    };
    let symbol = |s: Sym| s.as_str().to_owned();
    match ret {
        DtReturn::Nothing => {}
        DtReturn::Cash { available } => result.amount = Some(available),
        DtReturn::Quote { symbol: s, price, arrival_ms, quote_server_time } => {
            result.symbol = symbol(s);
            result.price = Some(price);
            result.quote_arrival = Some(arrival_ms);
            result.quote_server_time = Some(quote_server_time);
        }
        DtReturn::Pending { symbol: s, price, shares, money, expires_ms } => {
            result.symbol = symbol(s);
            result.price = Some(price);
            result.shares = Some(shares);
            result.amount = Some(money);
            result.expires_at = Some(expires_ms);
        }
        DtReturn::Settled { symbol: s, shares, price, money } => {
            result.symbol = symbol(s);
            result.shares = Some(shares);
            result.price = Some(price);
            result.amount = Some(money);
        }
        DtReturn::ReleasedCash { symbol: s, money } => {
            result.symbol = symbol(s);
            result.amount = Some(money);
        }
        DtReturn::ReleasedShares { symbol: s, shares } => {
            result.symbol = symbol(s);
            result.shares = Some(shares);
        }
        DtReturn::Amount { symbol: s, amount } => {
            result.symbol = symbol(s);
            result.amount = Some(amount);
        }
        DtReturn::BuyTrigger { symbol: s, amount, price } => {
            result.symbol = symbol(s);
            result.amount = Some(amount);
            result.price = Some(price);
        }
        DtReturn::SellTrigger { symbol: s, amount, price, shares } => {
            result.symbol = symbol(s);
            result.amount = Some(amount);
            result.price = Some(price);
            result.shares = Some(shares);
        }
        DtReturn::Summary => {
            let user = command.args.first().map(String::as_str).unwrap_or_default();
            result.summary_json = engine.day_trading().summary_json(user, txn, stamp).unwrap_or_default();
        }
        DtReturn::Dump { audit_seq } => result.audit_seq = audit_seq,
    }
    result
}

/// The symbols with armed triggers, for `Query.GetDayTradingArmed`.
pub fn armed_reply(engine: &Engine, log_index: u64) -> proto::GetDayTradingArmedReply {
    let ledger = engine.day_trading();
    let symbols = ledger
        .armed_symbols()
        .into_iter()
        .map(|(symbol, triggers, user, txn)| {
            let cached = ledger.quote_cached(symbol);
            proto::ArmedSymbol {
                symbol: symbol.as_str().to_owned(),
                triggers: triggers as u32,
                userid: ledger.user(user).map(|u| u.name.clone()).unwrap_or_default(),
                transaction_num: txn,
                quote_price: cached.map(|q| q.price),
                quote_arrival: cached.map_or(0, |q| q.arrival_ms),
            }
        })
        .collect();
    proto::GetDayTradingArmedReply { log_index, stamp: engine.ts_last() / 1_000_000, symbols }
}
