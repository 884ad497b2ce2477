//! What a day-trading log entry carries: a user's command with its arguments verbatim,
//! or a poller's quote; either may carry a quote the service fetched (spec 7.1).

use serde::{Deserialize, Serialize};

use super::grammar::{decimal_parse, xml_text_valid, DtKind, Sym, USERID_LEN_MAX};

/// Arguments a command may carry, at most (more is refused before any record: a front
/// end never sends that many; `invalid arguments` covers one too many or too few).
pub const ARGS_MAX: usize = 8;
/// Longest argument, in bytes (a file name may be 255; longer ones are logged as bad).
pub const ARG_LEN_MAX: usize = 512;
/// Longest cryptokey a quote may carry.
pub const CRYPTOKEY_LEN_MAX: usize = 256;
/// Highest quote price, in cents ($10 billion a share): bounds every product of a price
/// and a share count the ledger computes from a quote.
pub const QUOTE_PRICE_MAX: i64 = 1_000_000_000_000;

/// A day-trading log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DtRequest {
    /// One of the sixteen commands.
    Command(DtCommand),
    /// A quote the trigger poller fetched for a symbol with armed triggers (spec 5).
    Quote(DtQuote),
}

/// One day-trading command as the user sent it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DtCommand {
    pub kind: DtKind,
    /// The arguments verbatim, userid first (the global `DUMPLOG` has only the file name).
    pub args: Vec<String>,
    /// The command's `transactionNum`; 0 when it came without one (the engine gives it
    /// one more than the highest seen).
    pub transaction_num: u64,
    /// Who sent it, as the front end authenticated them (a userid), or empty.
    pub caller: String,
    /// The sender is an administrator (may dump every user's log).
    pub admin: bool,
    /// A quote the service fetched for this command (a real hit), logged and cached
    /// whatever the command's outcome.
    pub quote: Option<DtQuote>,
}

/// Where a quote came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QuoteSource {
    /// The exchange's own market.
    Market,
    /// The emulation of the legacy quote server.
    Emulator,
    /// A server speaking the legacy wire format.
    LegacyTcp,
}

/// One quote as the source answered it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DtQuote {
    pub symbol: Sym,
    /// Cents, 1 to [`QUOTE_PRICE_MAX`].
    pub price: i64,
    /// The user the quote was asked for.
    pub userid: String,
    /// The source's clock when it answered (ms since the Unix epoch), kept verbatim.
    pub quote_server_time: u64,
    pub cryptokey: String,
    pub source: QuoteSource,
    /// A poller's quote: the transactionNum it was asked with (its record takes the
    /// earliest-armed trigger's instead, when the symbol still has one). Unused on a
    /// command's quote, whose record carries the command's number.
    pub transaction_num: u64,
}

impl DtQuote {
    /// Whether the quote can be applied and logged: a symbol, a price in range, and
    /// strings that fit an audit record.
    pub fn is_valid(&self) -> bool {
        self.symbol.is_valid()
            && (1..=QUOTE_PRICE_MAX).contains(&self.price)
            && self.userid.len() <= USERID_LEN_MAX
            && xml_text_valid(&self.userid)
            && self.cryptokey.len() <= CRYPTOKEY_LEN_MAX
            && xml_text_valid(&self.cryptokey)
    }
}

/// What a `userCommand` (or `errorEvent`) record shows of a command, from its
/// arguments: the username, a valid symbol, the file name, and the amount or price as
/// `funds` (when it parses as a decimal of at most two places; a negative one keeps its
/// sign). Strings that cannot be written as XML are left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuditFields<'a> {
    pub username: Option<&'a str>,
    pub symbol: Option<Sym>,
    pub filename: Option<&'a str>,
    pub funds: Option<i64>,
}

impl DtCommand {
    /// Whether this is `DUMPLOG` in its global form (one argument: the file name).
    pub fn is_global_dump(&self) -> bool {
        self.kind == DtKind::DumpLog && self.args.len() == 1
    }

    /// The userid argument of a user-form command (the first), if present.
    pub fn userid(&self) -> Option<&str> {
        if self.is_global_dump() {
            return None;
        }
        self.args.first().map(String::as_str)
    }

    /// The fields of the command's `userCommand` record, by argument position.
    pub fn audit_fields(&self) -> AuditFields<'_> {
        let arg = |i: usize| self.args.get(i).map(String::as_str).filter(|s| xml_text_valid(s));
        if self.is_global_dump() {
            return AuditFields { filename: arg(0), ..AuditFields::default() };
        }
        let username = arg(0);
        let (symbol, funds, filename) = match self.kind {
            DtKind::Add => (None, arg(1), None),
            DtKind::Quote | DtKind::CancelSetBuy | DtKind::CancelSetSell => (arg(1), None, None),
            DtKind::Buy
            | DtKind::Sell
            | DtKind::SetBuyAmount
            | DtKind::SetBuyTrigger
            | DtKind::SetSellAmount
            | DtKind::SetSellTrigger => (arg(1), arg(2), None),
            DtKind::DumpLog => (None, None, arg(1)),
            DtKind::CommitBuy
            | DtKind::CancelBuy
            | DtKind::CommitSell
            | DtKind::CancelSell
            | DtKind::DisplaySummary => (None, None, None),
        };
        AuditFields { username, symbol: symbol.and_then(Sym::parse), filename, funds: funds.and_then(decimal_parse) }
    }
}
