//! The day-trading ledger (`shared/specs/day-trading.md`): retail users with cash and
//! whole shares trading at quoted prices, settling inside this ledger (no exchange
//! orders), as part of the deterministic state machine.
//!
//! A log entry is a [`DtRequest`]: one of the sixteen commands with its arguments
//! verbatim (the engine, not a front end, checks them, so bad ones are logged exactly
//! as the spec says), or a poller's quote. Either may carry a quote the service fetched.
//! Applying it appends [`DtEvent`]s to the engine's event buffer: the audit records in
//! log order (spec 9.3), then the command's result. Time is the entry's log stamp in
//! milliseconds (`ts / 10^6`); the engine never reads a clock or a quote source.
//!
//! Outcomes. A day-trading *error* (`insufficient funds`, `no pending buy`, …) is an
//! ordinary outcome: it writes `userCommand` and `errorEvent` and may still release
//! expired holds, so it is `Outcome::Ok { id: error code }` (0 for success), not an
//! engine rejection. An engine rejection ([`Reject::DayTradingInvalid`],
//! [`Reject::LimitReached`]) is reserved for entries no front end of ours sends
//! (malformed quotes, too many or too long arguments) and for the user bound; it
//! changes nothing and writes nothing.
//!
//! Invariants ([`DayTrading::check_invariants`]): no negative figure; each user's
//! reserved cash equals the pending BUY's cost plus the buy triggers' reserves, and each
//! holding's reserved shares the pending SELL's plus the sell triggers'; a priced sell
//! trigger reserves ⌊amount / price⌋; cash in the ledger equals what `ADD` brought plus
//! what sales received minus what purchases spent, and shares held equal shares bought
//! minus sold, per symbol; the arming index lists exactly the armed triggers.
//!
//! Complexity: a command is O(log) in the user's symbols plus its records; a quote is
//! O(armed triggers on its symbol). Bounds: `users_max`; symbols are at most
//! 26³ + 26² + 26 by grammar, so per-user maps and the quote cache are bounded too; each
//! user's history keeps `summary_history` commands.

mod commands;
mod event;
mod grammar;
mod image;
mod invariants;
mod ledger;
mod request;
mod summary;
mod triggers;

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

pub use event::{Action, DtEvent, DtReturn, UserIdx};
pub use grammar::{
    amount_parse, cents_format, decimal_parse, filename_check, userid_valid, xml_text_valid, DtError, DtKind, Sym,
    FILENAME_LEN_MAX, USERID_LEN_MAX,
};
pub(crate) use image::DtImage;
pub use ledger::{BuyTrigger, CachedQuote, DtUser, Held, HistoryItem, Pending, SellTrigger};
pub use request::{
    AuditFields, DtCommand, DtQuote, DtRequest, QuoteSource, ARGS_MAX, ARG_LEN_MAX, CRYPTOKEY_LEN_MAX, QUOTE_PRICE_MAX,
};

use crate::event::Event;
use crate::reject::Reject;
use crate::types::{Side, Timestamp};

/// The ledger's rules and bounds (spec section 12); part of [`crate::EngineConfig`], so
/// every replica agrees on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DtConfig {
    /// Users at most; an `ADD` that would create one more is refused (`limit_reached`).
    pub users_max: u32,
    /// A cached quote that arrived at q serves a command stamped t iff t − q < this.
    pub quote_ttl_ms: u32,
    /// A pending order made at b may be committed or cancelled at t iff t − b < this.
    pub pending_ttl_ms: u32,
    /// Commands each user's history keeps for `DISPLAY_SUMMARY`.
    pub summary_history: u32,
}

impl Default for DtConfig {
    fn default() -> Self {
        DtConfig { users_max: 1 << 20, quote_ttl_ms: 60_000, pending_ttl_ms: 60_000, summary_history: 10 }
    }
}

/// The day-trading ledger.
#[derive(Clone, Debug)]
pub struct DayTrading {
    pub(crate) config: DtConfig,
    /// By [`UserIdx`], in creation order.
    pub(crate) users: Vec<DtUser>,
    /// Userid → index; derived, rebuilt on restore.
    pub(crate) user_index: FxHashMap<String, UserIdx>,
    pub(crate) quotes: BTreeMap<Sym, CachedQuote>,
    /// Armed triggers (amount and price set) per symbol in arming order:
    /// arm_seq → (user, side). Derived from the triggers, rebuilt on restore.
    pub(crate) armed: BTreeMap<Sym, BTreeMap<u64, (UserIdx, Side)>>,
    /// The last arming-order position given.
    pub(crate) arm_seq: u64,
    /// The highest transactionNum seen.
    pub(crate) txn_max: u64,
    /// Audit records written so far (the last record's sequence number).
    pub(crate) audit_seq: u64,
    /// Cash brought by `ADD`.
    pub(crate) cash_added: i128,
    /// Sales received minus purchases spent.
    pub(crate) cash_traded: i128,
    /// Shares bought minus sold, per symbol.
    pub(crate) shares_net: BTreeMap<Sym, i128>,
    /// Scratch: the armed triggers of the symbol being evaluated.
    pub(crate) scratch: Vec<(UserIdx, Side)>,
    /// Scratch: the sequence number of the current command's `userCommand` record.
    pub(crate) user_command_seq: u64,
    /// Scratch: the result of the command just applied, for its client's session.
    pub(crate) result_last: Option<HistoryItem>,
}

impl DayTrading {
    pub fn new(config: DtConfig) -> DayTrading {
        DayTrading {
            config,
            users: Vec::new(),
            user_index: FxHashMap::default(),
            quotes: BTreeMap::new(),
            armed: BTreeMap::new(),
            arm_seq: 0,
            txn_max: 0,
            audit_seq: 0,
            cash_added: 0,
            cash_traded: 0,
            shares_net: BTreeMap::new(),
            scratch: Vec::new(),
            user_command_seq: 0,
            result_last: None,
        }
    }

    pub fn config(&self) -> &DtConfig {
        &self.config
    }

    /// Applies one day-trading entry stamped `ts` (ns).
    pub(crate) fn apply(&mut self, request: &DtRequest, ts: Timestamp, events: &mut Vec<Event>) -> Result<u64, Reject> {
        let now_ms = ts / 1_000_000;
        self.result_last = None;
        match request {
            DtRequest::Command(command) => self.apply_command(command, now_ms, events),
            DtRequest::Quote(quote) => self.apply_poller_quote(quote, now_ms, events),
        }
    }

    /// A user's command: `userCommand`, expiry releases, the quote if any, the
    /// command's checks and effects (or its `errorEvent`), then firings caused by the
    /// quote, then the result.
    fn apply_command(&mut self, command: &DtCommand, now_ms: u64, events: &mut Vec<Event>) -> Result<u64, Reject> {
        self.admit(command)?;
        let txn = match command.transaction_num {
            0 => self.txn_max + 1,
            n => n,
        };
        self.txn_max = self.txn_max.max(txn);
        self.record(events, DtEvent::UserCommand { txn });
        self.user_command_seq = self.audit_seq;
        let user = command.userid().and_then(|name| self.user_index.get(name).copied());
        if let Some(user) = user {
            self.release_expired(user, now_ms, txn, events);
        }
        if let Some(quote) = &command.quote {
            self.quote_arrive(quote, None, txn, now_ms, events);
        }
        let result = self.execute(command, user, txn, now_ms, events);
        let (error, ret) = match result {
            Ok(ret) => (None, ret),
            Err(error) => {
                self.record(events, DtEvent::ErrorEvent { txn, error });
                (Some(error), DtReturn::Nothing)
            }
        };
        let user_after = user.or_else(|| command.userid().and_then(|name| self.user_index.get(name).copied()));
        let item = HistoryItem { txn, stamp_ms: now_ms, kind: command.kind, error, ret };
        if let Some(user) = user_after {
            // One more than a summary shows: the summary's own command is kept too.
            let kept = self.config.summary_history as usize + 1;
            self.users[user as usize].history_push(item, kept);
        }
        self.result_last = Some(item);
        if let Some(quote) = &command.quote {
            self.fire_on_quote(quote.symbol, quote.price, events);
        }
        events.push(Event::DayTrading(DtEvent::Done { error, ret }));
        Ok(error.map_or(0, |e| u64::from(e.code())))
    }

    /// Refuses, before anything is written, what no front end sends (the shape limits,
    /// a malformed quote) and an `ADD` that would pass the user bound.
    fn admit(&self, command: &DtCommand) -> Result<(), Reject> {
        let shape_ok = command.args.len() <= ARGS_MAX
            && command.args.iter().all(|a| a.len() <= ARG_LEN_MAX)
            && command.caller.len() <= USERID_LEN_MAX
            && command.quote.as_ref().is_none_or(DtQuote::is_valid);
        if !shape_ok {
            return Err(Reject::DayTradingInvalid);
        }
        let creates = command.kind == DtKind::Add
            && command.args.len() == 2
            && userid_valid(&command.args[0])
            && amount_parse(&command.args[1]).is_some()
            && !self.user_index.contains_key(&command.args[0]);
        if creates && self.users.len() >= self.config.users_max as usize {
            return Err(Reject::LimitReached);
        }
        Ok(())
    }

    /// A poller's quote: `quoteServer` (in the name of the earliest-armed trigger on the
    /// symbol, if any), the cache, then any firings.
    fn apply_poller_quote(&mut self, quote: &DtQuote, now_ms: u64, events: &mut Vec<Event>) -> Result<u64, Reject> {
        if !quote.is_valid() {
            return Err(Reject::DayTradingInvalid);
        }
        let first = self.armed_first(quote.symbol);
        let txn = match (first, quote.transaction_num) {
            (Some((_, txn)), _) => txn,
            (None, 0) => self.txn_max + 1,
            (None, n) => n,
        };
        self.txn_max = self.txn_max.max(txn);
        self.quote_arrive(quote, first.map(|(user, _)| user), txn, now_ms, events);
        self.fire_on_quote(quote.symbol, quote.price, events);
        Ok(0)
    }

    /// A real hit: its `quoteServer` record, and the cache entry it replaces.
    fn quote_arrive(
        &mut self,
        quote: &DtQuote,
        owner: Option<UserIdx>,
        txn: u64,
        now_ms: u64,
        events: &mut Vec<Event>,
    ) {
        self.record(events, DtEvent::QuoteServer { owner, txn });
        let cached = CachedQuote { price: quote.price, arrival_ms: now_ms, quote_server_time: quote.quote_server_time };
        self.quotes.insert(quote.symbol, cached);
    }

    /// The cached quote of `symbol` if it is still valid at `now_ms`.
    pub fn quote_valid(&self, symbol: Sym, now_ms: u64) -> Option<CachedQuote> {
        let cached = self.quotes.get(&symbol)?;
        (now_ms.saturating_sub(cached.arrival_ms) < u64::from(self.config.quote_ttl_ms)).then_some(*cached)
    }

    /// Appends an audit record and counts it.
    pub(crate) fn record(&mut self, events: &mut Vec<Event>, event: DtEvent) {
        debug_assert!(event.is_record());
        self.audit_seq += 1;
        events.push(Event::DayTrading(event));
    }

    /// Releases the user's expired pending orders (BUY first), with their records.
    fn release_expired(&mut self, user: UserIdx, now_ms: u64, txn: u64, events: &mut Vec<Event>) {
        let ttl = u64::from(self.config.pending_ttl_ms);
        let expired = |p: &Option<Pending>| p.is_some_and(|p| now_ms.saturating_sub(p.stamp_ms) >= ttl);
        let holder = &self.users[user as usize];
        let (buy_expired, sell_expired) = (expired(&holder.pending_buy), expired(&holder.pending_sell));
        if buy_expired {
            let pending = self.users[user as usize].pending_buy.take().expect("checked");
            self.users[user as usize].cash.release(pending.money);
            let (symbol, funds) = (pending.symbol, pending.money);
            self.record(events, DtEvent::SystemEvent { user, txn, command: DtKind::Buy, symbol, funds });
            self.record(events, DtEvent::AccountTransaction { user, txn, action: Action::Release, funds });
        }
        if sell_expired {
            let pending = self.users[user as usize].pending_sell.take().expect("checked");
            self.users[user as usize].holding_update(pending.symbol, |h| h.release(pending.shares));
            let (symbol, funds) = (pending.symbol, pending.money);
            self.record(events, DtEvent::SystemEvent { user, txn, command: DtKind::Sell, symbol, funds });
        }
    }

    // --- Reads for front ends, the history store and tests. ---

    /// The user with this userid.
    pub fn user_by_name(&self, name: &str) -> Option<(UserIdx, &DtUser)> {
        let index = *self.user_index.get(name)?;
        Some((index, &self.users[index as usize]))
    }

    pub fn user(&self, index: UserIdx) -> Option<&DtUser> {
        self.users.get(index as usize)
    }

    pub fn users_len(&self) -> usize {
        self.users.len()
    }

    /// The last audit record's sequence number (records are numbered from 1).
    pub fn audit_records(&self) -> u64 {
        self.audit_seq
    }

    /// The highest transactionNum seen.
    pub fn transaction_num_max(&self) -> u64 {
        self.txn_max
    }

    /// The cache entry of `symbol`, valid or not.
    pub fn quote_cached(&self, symbol: Sym) -> Option<CachedQuote> {
        self.quotes.get(&symbol).copied()
    }

    /// Symbols with armed triggers: each with how many, and the user and transactionNum
    /// of the earliest-armed one (what a poller's quote is asked and logged for).
    pub fn armed_symbols(&self) -> Vec<(Sym, usize, UserIdx, u64)> {
        self.armed
            .iter()
            .filter_map(|(&symbol, triggers)| {
                let (user, txn) = self.armed_first(symbol)?;
                Some((symbol, triggers.len(), user, txn))
            })
            .collect()
    }

    /// The result of the user's command numbered `txn`, if it is still in the user's
    /// history (what a retried command is answered with).
    pub fn recent_result(&self, name: &str, txn: u64) -> Option<HistoryItem> {
        let (_, user) = self.user_by_name(name)?;
        user.history.iter().rev().find(|item| item.txn == txn).copied()
    }
}
