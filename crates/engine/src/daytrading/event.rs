//! What a day-trading entry did, as values: its audit records in log order (spec 9.3)
//! and, last, the command's result (spec 2, "Returns").
//!
//! They travel in the engine's ordinary event buffer as [`crate::Event::DayTrading`],
//! so they are small and `Copy`: a record names users by their ledger index and takes
//! whatever it shows of the command (username, symbol, funds, file name, the quote)
//! from the command itself, which every reader of the log has. Each record is one step
//! of the ledger's audit sequence ([`super::DayTrading::audit_records`]), which is
//! what `DUMPLOG` bounds its output by.

use serde::{Deserialize, Serialize};

use super::grammar::{DtError, DtKind, Sym};

/// A user of the ledger, by the order in which they were created.
pub type UserIdx = u32;

/// The `action` of an `accountTransaction` record (cash only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Action {
    /// Cash entered (`ADD`) or was received (`COMMIT_SELL`, a sell trigger firing).
    Add,
    /// Held cash was spent (`COMMIT_BUY`, a buy trigger firing).
    Remove,
    Reserve,
    Release,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Add => "add",
            Action::Remove => "remove",
            Action::Reserve => "reserve",
            Action::Release => "release",
        }
    }
}

/// One day-trading event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DtEvent {
    /// `userCommand`: its fields are the command's
    /// ([`super::DtCommand::audit_fields`]); `txn` is its transactionNum.
    UserCommand { txn: u64 },
    /// `quoteServer`: the entry's quote (price, symbol, quoteServerTime, cryptokey).
    /// `owner` is the user the record names when it is not the quote's own userid (a
    /// poller's quote takes the earliest-armed trigger's user); `txn` the number.
    QuoteServer { owner: Option<UserIdx>, txn: u64 },
    /// `accountTransaction`: a positive amount of cash.
    AccountTransaction { user: UserIdx, txn: u64, action: Action, funds: i64 },
    /// `systemEvent`: an expired pending `BUY`/`SELL` released (funds = its cost or
    /// proceeds), or a trigger firing (`SET_BUY_TRIGGER`/`SET_SELL_TRIGGER`, funds =
    /// shares × price).
    SystemEvent { user: UserIdx, txn: u64, command: DtKind, symbol: Sym, funds: i64 },
    /// `errorEvent`: the command's fields and the error's text.
    ErrorEvent { txn: u64, error: DtError },
    /// The command's result, after its records (not an audit record). A poller's quote
    /// entry has none.
    Done { error: Option<DtError>, ret: DtReturn },
}

impl DtEvent {
    /// Whether the event is an audit record (everything but `Done`).
    pub fn is_record(&self) -> bool {
        !matches!(self, DtEvent::Done { .. })
    }
}

/// The values a successful command returns (cents and whole shares; stamps in ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DtReturn {
    /// A failed command.
    Nothing,
    /// `ADD`: cash available after.
    Cash { available: i64 },
    /// `QUOTE`: the price, when it arrived in the cache, and the source's time.
    Quote { symbol: Sym, price: i64, arrival_ms: u64, quote_server_time: u64 },
    /// `BUY` (money = cost) and `SELL` (money = proceeds); `expires_ms` is the first
    /// stamp at which the order is no longer valid.
    Pending { symbol: Sym, price: i64, shares: i64, money: i64, expires_ms: u64 },
    /// `COMMIT_BUY` (money = cost) and `COMMIT_SELL` (money = proceeds).
    Settled { symbol: Sym, shares: i64, price: i64, money: i64 },
    /// `CANCEL_BUY` (the cost) and `CANCEL_SET_BUY` (the reserve) released.
    ReleasedCash { symbol: Sym, money: i64 },
    /// `CANCEL_SELL` and `CANCEL_SET_SELL`: shares released.
    ReleasedShares { symbol: Sym, shares: i64 },
    /// `SET_BUY_AMOUNT`, `SET_SELL_AMOUNT`.
    Amount { symbol: Sym, amount: i64 },
    /// `SET_BUY_TRIGGER`.
    BuyTrigger { symbol: Sym, amount: i64, price: i64 },
    /// `SET_SELL_TRIGGER`: `shares` now reserved.
    SellTrigger { symbol: Sym, amount: i64, price: i64, shares: i64 },
    /// `DISPLAY_SUMMARY`: the front end reads the summary at this log point
    /// ([`super::DayTrading::summary_json`]).
    Summary,
    /// `DUMPLOG`: the audit sequence number of its own `userCommand` record; the dump
    /// holds every record up to it (one user's only, in the user form).
    Dump { audit_seq: u64 },
}
