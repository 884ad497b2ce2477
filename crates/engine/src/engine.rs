//! The engine: state plus one command in, new state plus events out.
//!
//! [`Engine::apply`] is the only mutator. It checks the client's exactly-once record,
//! dispatches to a handler, and records the outcome. Every handler validates fully
//! before it changes anything, so a rejection leaves the state untouched. Order
//! handling and matching live in `order.rs` and `matching.rs`; snapshots, queries and
//! invariants in their own files.
//!
//! Bounds (all in [`EngineConfig`], validated by [`Engine::new`]): accounts, assets,
//! symbols, open orders per account, outcomes remembered per client, closed orders
//! remembered for status queries.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::account::Account;
use crate::book::{Book, FastBook};
use crate::command::{
    Command, CommandBody, FairnessSetting, OrderKind, OrderRequest, SymbolSpec, Tif, FAIRNESS_NS_MAX,
};
use crate::daytrading::DayTrading;
use crate::event::{Applied, CancelReason, Event, Outcome};
use crate::reject::Reject;
use crate::session::{Session, SessionCheck};
use crate::types::{AccountId, Amount, AssetId, ClientId, OrderId, Px, Qty, Side, SymbolId, Timestamp};

/// Named bounds of one engine. Part of the state: replicas must agree on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineConfig {
    pub accounts_max: u32,
    pub assets_max: u32,
    pub symbols_max: u32,
    pub orders_per_account_max: u32,
    pub outcomes_per_client_max: u32,
    pub orders_closed_max: u32,
    /// Clients (ids with a record of their commands, for exactly-once) remembered at
    /// most. A command of a new client past this is refused (`limit_reached`) and
    /// leaves no trace, until idle clients expire.
    pub clients_max: u32,
    /// A client none of whose commands applied for this long (in log time, seconds) is
    /// forgotten at the next sweep of the client records; sweeps run every eighth of
    /// this, so a record goes between 1× and 1.125× this after its last command. A
    /// forgotten client's next command is refused as a `sequence_gap` unless it is its
    /// first (seq 1): its retries must come well within this.
    pub client_expiry_secs: u32,
    /// The day-trading ledger's rules and bounds.
    pub day_trading: crate::daytrading::DtConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            accounts_max: 1 << 24,
            assets_max: 1 << 20,
            symbols_max: 1 << 20,
            orders_per_account_max: 100_000,
            outcomes_per_client_max: 128,
            orders_closed_max: 10_000,
            clients_max: 100_000,
            client_expiry_secs: 86_400,
            day_trading: crate::daytrading::DtConfig::default(),
        }
    }
}

/// Longest asset name.
pub const NAME_LEN_MAX: usize = 16;
/// Longest symbol name: room for `BASE/QUOTE` with both asset names at their longest.
pub const SYMBOL_NAME_LEN_MAX: usize = 2 * NAME_LEN_MAX + 1;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asset {
    pub name: String,
    pub decimals: u8,
    /// Deposited plus credited minus withdrawn; never above `i64::MAX`, which bounds
    /// every balance and so every fill's arithmetic.
    pub supply: Amount,
    /// Fees collected by the exchange in this asset.
    pub fees: Amount,
    /// Losses of margin accounts beyond their cash that the insurance account could not
    /// pay (see `margin.rs`); 0 for an asset no margin symbol settles in.
    pub bad_debt: Amount,
}

/// A stop order waiting for its trigger; its funds are already reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopOrder {
    pub id: OrderId,
    pub request: OrderRequest,
    pub ts: Timestamp,
}

/// Pending stops of one symbol, indexed for triggering.
#[derive(Clone, Debug, Default)]
pub struct Stops {
    pub by_id: BTreeMap<OrderId, StopOrder>,
    /// Buy stops trigger when the last price rises to their trigger.
    pub buys: BTreeSet<(Px, OrderId)>,
    /// Sell stops trigger when the last price falls to their trigger.
    pub sells: BTreeSet<(Px, OrderId)>,
}

impl Stops {
    /// Files a stop under its trigger; false (and nothing filed) for a non-stop order.
    pub fn insert(&mut self, stop: StopOrder) -> bool {
        let Some(trigger) = stop.request.kind.trigger() else { return false };
        match stop.request.side {
            Side::Buy => self.buys.insert((trigger, stop.id)),
            Side::Sell => self.sells.insert((trigger, stop.id)),
        };
        self.by_id.insert(stop.id, stop);
        true
    }

    pub fn remove(&mut self, id: OrderId) -> Option<StopOrder> {
        let stop = self.by_id.remove(&id)?;
        let trigger = stop.request.kind.trigger().expect("only stop orders are filed");
        match stop.request.side {
            Side::Buy => self.buys.remove(&(trigger, id)),
            Side::Sell => self.sells.remove(&(trigger, id)),
        };
        Some(stop)
    }
}

#[derive(Clone, Debug)]
pub struct Symbol<B> {
    pub spec: SymbolSpec,
    pub book: B,
    /// The price of the latest trade, which stop orders watch.
    pub last_px: Option<Px>,
    pub stops: Stops,
    /// The margin rules and state of a margin symbol; `None` for a spot pair.
    pub margin: Option<Box<crate::margin::Margin>>,
}

/// Where an order is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OrderStatus {
    /// A stop waiting for its trigger.
    Pending,
    /// Resting in the book (possibly partly filled).
    Open,
    Filled,
    Cancelled,
    /// A Day order (or what was left of it) that the close of the trading day ended.
    Expired,
}

/// One fill of an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fill {
    pub px: Px,
    pub qty: Qty,
    /// The fee this order paid (negative: a rebate).
    pub fee: Amount,
    pub maker: bool,
    pub counter_order: OrderId,
    pub ts: Timestamp,
}

/// What the engine remembers of an order, for status queries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderRecord {
    pub id: OrderId,
    pub account: AccountId,
    pub symbol: SymbolId,
    pub side: Side,
    pub kind: OrderKind,
    pub tif: Tif,
    /// Quantity as placed.
    pub qty: Qty,
    pub qty_filled: Qty,
    /// Taken off by reduce commands.
    pub qty_reduced: Qty,
    pub status: OrderStatus,
    pub ts: Timestamp,
    pub fills: Vec<Fill>,
    /// The stamp of the command that filled or cancelled the order; 0 while it is open
    /// or pending.
    pub ts_closed: Timestamp,
}

/// The exchange state machine. `B` is the order book implementation.
#[derive(Clone, Debug)]
pub struct Engine<B: Book = FastBook> {
    pub(crate) config: EngineConfig,
    pub(crate) assets: Vec<Asset>,
    pub(crate) asset_names: FxHashMap<String, AssetId>,
    pub(crate) symbols: Vec<Symbol<B>>,
    pub(crate) symbol_names: FxHashMap<String, SymbolId>,
    pub(crate) accounts: Vec<Account>,
    /// External account id → account; derived from the accounts, rebuilt on restore.
    pub(crate) accounts_by_external: FxHashMap<u64, AccountId>,
    /// Client id → slot in `sessions`: one hash lookup per command.
    pub(crate) session_slots: FxHashMap<ClientId, u32>,
    pub(crate) sessions: Vec<(ClientId, Session)>,
    /// The log time at or after which the next command sweeps expired client records.
    pub(crate) sessions_sweep_at: Timestamp,
    /// Since this engine was built or restored (not state: metrics only): clients
    /// forgotten for being idle, and commands of new clients refused for `clients_max`.
    pub(crate) clients_expired: u64,
    pub(crate) clients_refused: u64,
    pub(crate) next_order_id: u64,
    /// The timestamp of the last command applied, so a new leader never stamps earlier.
    pub(crate) ts_last: Timestamp,
    /// Trading days closed ([`CommandBody::CloseDay`]); the day trading now is the next.
    pub(crate) days_closed: u64,
    /// Open and pending orders.
    pub(crate) orders: FxHashMap<OrderId, OrderRecord>,
    /// The most recently closed orders, in closing order; the oldest are forgotten
    /// past `orders_closed_max`. Not indexed: only status queries look here.
    pub(crate) orders_closed: VecDeque<OrderRecord>,
    /// Scratch buffer for pro-rata levels, kept to avoid allocating per match.
    pub(crate) scratch: Vec<crate::book::RestingOrder>,
    /// The day-trading ledger: its own users, cash and shares (no exchange accounts).
    pub(crate) day_trading: DayTrading,
    /// The fairness delays last set through the log; none until the first
    /// [`CommandBody::SetFairness`] (the gateways' and sequencer's own settings apply).
    pub(crate) fairness: Option<Fairness>,
    /// Margin symbols so far; while 0 the spot path skips every margin hook.
    pub(crate) margin_symbols: u32,
    /// `(settlement asset, insurance account)` of every margin symbol; derived.
    pub(crate) insurers: BTreeSet<(AssetId, AccountId)>,
    /// Accounts whose margin figures the current command changed, and margin symbols
    /// whose mark it moved: settled when the command ends (scratch, empty between commands).
    pub(crate) margin_dirty: Vec<(AccountId, AssetId)>,
    pub(crate) marks_moved: Vec<SymbolId>,
    /// [`Engine::margin_settle`]'s work lists, kept between commands so that settling
    /// allocates nothing once they have grown (scratch, empty between commands).
    pub(crate) margin_scratch: crate::margin::SettleScratch,
}

/// The fairness delays in force, and the earliest release time of what comes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Fairness {
    pub(crate) setting: FairnessSetting,
    pub(crate) release_floor: Timestamp,
}

impl<B: Book> Default for Engine<B> {
    fn default() -> Self {
        Engine::new(EngineConfig::default())
    }
}

impl<B: Book> Engine<B> {
    pub fn new(config: EngineConfig) -> Self {
        assert!(config.outcomes_per_client_max > 0, "outcomes_per_client_max must be positive");
        assert!(config.orders_per_account_max > 0, "orders_per_account_max must be positive");
        assert!(config.clients_max > 0, "clients_max must be positive");
        assert!(config.client_expiry_secs > 0, "client_expiry_secs must be positive");
        Engine {
            config,
            assets: Vec::new(),
            asset_names: FxHashMap::default(),
            symbols: Vec::new(),
            symbol_names: FxHashMap::default(),
            accounts: Vec::new(),
            accounts_by_external: FxHashMap::default(),
            session_slots: FxHashMap::default(),
            sessions: Vec::new(),
            sessions_sweep_at: 0,
            clients_expired: 0,
            clients_refused: 0,
            next_order_id: 1,
            ts_last: 0,
            days_closed: 0,
            orders: FxHashMap::default(),
            // Sized up front: growing a ring of records copies it, a latency spike.
            orders_closed: VecDeque::with_capacity(config.orders_closed_max as usize),
            scratch: Vec::new(),
            day_trading: DayTrading::new(config.day_trading),
            fairness: None,
            margin_symbols: 0,
            insurers: BTreeSet::new(),
            margin_dirty: Vec::new(),
            marks_moved: Vec::new(),
            margin_scratch: crate::margin::SettleScratch::default(),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The day-trading ledger, to read.
    pub fn day_trading(&self) -> &DayTrading {
        &self.day_trading
    }

    /// The whole result of `client`'s day-trading command `seq`, while its outcome is
    /// remembered (what a retry of it is answered with).
    pub fn day_trading_result(&self, client: ClientId, seq: u64) -> Option<crate::daytrading::HistoryItem> {
        let slot = *self.session_slots.get(&client)?;
        self.sessions[slot as usize].1.day_trading_result(seq)
    }

    /// The fairness delays set through the log, if any was.
    pub fn fairness(&self) -> Option<FairnessSetting> {
        self.fairness.map(|fairness| fairness.setting)
    }

    /// When the gateways release market data stamped `ts` (by the log's hold), if a
    /// hold was set through the log: `ts + hold`, but never before an earlier entry's
    /// release (a lowered hold waits out the old one), so releases keep log order.
    pub fn release_ts(&self, ts: Timestamp) -> Option<Timestamp> {
        self.fairness.map(|fairness| ts.saturating_add(fairness.setting.hold_ns).max(fairness.release_floor))
    }

    /// Clients remembered now.
    pub fn clients(&self) -> usize {
        self.sessions.len()
    }

    /// Clients forgotten for being idle, and commands of new clients refused because
    /// `clients_max` were remembered, since this engine was built or restored.
    pub fn clients_expired_refused(&self) -> (u64, u64) {
        (self.clients_expired, self.clients_refused)
    }

    /// Forgets the clients idle for `client_expiry_secs` at log time `now`, and sets
    /// the next sweep an eighth of that later. O(clients), at most once per eighth.
    fn sweep_clients(&mut self, now: Timestamp) {
        let expiry = u64::from(self.config.client_expiry_secs) * 1_000_000_000;
        let before = self.sessions.len();
        self.sessions.retain(|(_, session)| now.saturating_sub(session.ts_last) < expiry);
        if self.sessions.len() != before {
            self.clients_expired += (before - self.sessions.len()) as u64;
            self.session_slots.clear();
            for (slot, (client, _)) in self.sessions.iter().enumerate() {
                self.session_slots.insert(*client, slot as u32);
            }
        }
        self.sessions_sweep_at = now.saturating_add((expiry / 8).max(1));
    }

    /// Applies one command, appending what happened to `events`.
    pub fn apply(&mut self, command: &Command, events: &mut Vec<Event>) -> Applied {
        // Log time, as every replica sees it: the sweep runs at the same command on all.
        let now = self.ts_last.max(command.ts);
        if now >= self.sessions_sweep_at {
            self.sweep_clients(now);
        }
        if command.client == ClientId::SYSTEM {
            return self.apply_system(command, events);
        }
        // A client is remembered only once one of its commands applies, so refused
        // strangers leave no trace in the state.
        let slot = self.session_slots.get(&command.client).copied();
        let check = match slot {
            Some(slot) => self.sessions[slot as usize].1.check(command.seq),
            None if self.sessions.len() >= self.config.clients_max as usize => {
                self.clients_refused += 1;
                SessionCheck::Refuse(Reject::LimitReached)
            }
            None => Session::default().check(command.seq),
        };
        match check {
            SessionCheck::Apply => {}
            SessionCheck::Duplicate(outcome) => return Applied { outcome, duplicate: true },
            SessionCheck::Refuse(reject) => {
                events.push(Event::Rejected { reject });
                return Applied { outcome: Outcome::Rejected(reject), duplicate: false };
            }
        }
        self.ts_last = self.ts_last.max(command.ts);
        let mark = events.len();
        let outcome = match self.execute(command, events) {
            Ok(id) => {
                if !self.margin_dirty.is_empty() || !self.marks_moved.is_empty() {
                    self.margin_settle(now, events);
                }
                Outcome::Ok { id }
            }
            Err(reject) => {
                debug_assert_eq!(events.len(), mark, "a rejected command emitted events");
                events.push(Event::Rejected { reject });
                Outcome::Rejected(reject)
            }
        };
        let outcomes_max = self.config.outcomes_per_client_max as usize;
        let slot = slot.unwrap_or_else(|| {
            self.sessions.push((command.client, Session::default()));
            let slot = (self.sessions.len() - 1) as u32;
            self.session_slots.insert(command.client, slot);
            slot
        });
        let session = &mut self.sessions[slot as usize].1;
        session.record(command.seq, outcome, outcomes_max, now);
        if let (CommandBody::DayTrading(_), Outcome::Ok { .. }) = (&command.body, outcome) {
            if let Some(item) = self.day_trading.result_last.take() {
                session.record_day_trading(command.seq, item);
            }
        }
        Applied { outcome, duplicate: false }
    }

    /// A command of the exchange itself: only settings, applied without a session
    /// record (no seq, no remembered outcome).
    fn apply_system(&mut self, command: &Command, events: &mut Vec<Event>) -> Applied {
        let result = match &command.body {
            CommandBody::SetFairness(setting) => self.set_fairness(*setting, command.ts),
            _ => Err(Reject::SystemCommandInvalid),
        };
        match result {
            Ok(id) => {
                self.ts_last = self.ts_last.max(command.ts);
                Applied { outcome: Outcome::Ok { id }, duplicate: false }
            }
            Err(reject) => {
                events.push(Event::Rejected { reject });
                Applied { outcome: Outcome::Rejected(reject), duplicate: false }
            }
        }
    }

    fn set_fairness(&mut self, setting: FairnessSetting, ts: Timestamp) -> Result<u64, Reject> {
        if setting.hold_ns > FAIRNESS_NS_MAX || setting.window_ns > FAIRNESS_NS_MAX {
            return Err(Reject::FairnessInvalid);
        }
        // Every entry before this one was stamped at or before `now` and is released by
        // `now + hold` (the old hold) at the latest: later ones wait for that.
        let now = self.ts_last.max(ts);
        let release_floor = self.release_ts(now).unwrap_or(0);
        self.fairness = Some(Fairness { setting, release_floor });
        Ok(0)
    }

    fn execute(&mut self, command: &Command, events: &mut Vec<Event>) -> Result<u64, Reject> {
        let ts = command.ts;
        match &command.body {
            CommandBody::CreateAsset { name, decimals } => self.create_asset(name, *decimals, events),
            CommandBody::CreateSymbol(spec) => self.create_symbol(spec, events),
            CommandBody::CreateAccount => self.create_account(events),
            CommandBody::Deposit { account, asset, amount } | CommandBody::Credit { account, asset, amount } => {
                self.deposit(*account, *asset, *amount, events)
            }
            CommandBody::Withdraw { account, asset, amount } => self.withdraw(*account, *asset, *amount, events),
            CommandBody::SuspendAccount { account } => self.set_suspended(*account, true, events),
            CommandBody::ResumeAccount { account } => self.set_suspended(*account, false, events),
            CommandBody::Place(request) => self.place(request, ts, events),
            CommandBody::Cancel { account, symbol, order } => self.cancel(*account, *symbol, *order, events),
            CommandBody::Reduce { account, symbol, order, qty_by } => {
                self.reduce(*account, *symbol, *order, *qty_by, events)
            }
            CommandBody::Move { account, symbol, order, px } => {
                self.move_order(*account, *symbol, *order, *px, ts, events)
            }
            CommandBody::CreateAccountWithId { external_id, asset, deposit } => {
                self.create_account_with_id(*external_id, *asset, *deposit, events)
            }
            CommandBody::CloseDay => Ok(self.close_day(events)),
            CommandBody::DayTrading(request) => self.day_trading.apply(request, ts, events),
            CommandBody::SetFairness(setting) => self.set_fairness(*setting, ts),
            CommandBody::CreateMarginSymbol(symbol) => self.create_margin_symbol(symbol, events),
            CommandBody::SetMark { symbol, px } => self.set_mark(*symbol, *px, events),
        }
    }

    fn check_name(&self, name: &str, len_max: usize) -> Result<(), Reject> {
        let valid = !name.is_empty()
            && name.len() <= len_max
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
        if valid {
            Ok(())
        } else {
            Err(Reject::NameInvalid)
        }
    }

    fn create_asset(&mut self, name: &str, decimals: u8, events: &mut Vec<Event>) -> Result<u64, Reject> {
        self.check_name(name, NAME_LEN_MAX)?;
        if self.asset_names.contains_key(name) {
            return Err(Reject::NameTaken);
        }
        if self.assets.len() >= self.config.assets_max as usize || decimals > 18 {
            return Err(if decimals > 18 { Reject::SymbolSpecInvalid } else { Reject::LimitReached });
        }
        let id = AssetId(self.assets.len() as u32);
        self.assets.push(Asset {
            name: name.to_owned(),
            decimals,
            supply: Amount::ZERO,
            fees: Amount::ZERO,
            bad_debt: Amount::ZERO,
        });
        self.asset_names.insert(name.to_owned(), id);
        events.push(Event::AssetCreated { asset: id });
        Ok(u64::from(id.0))
    }

    fn create_symbol(&mut self, spec: &SymbolSpec, events: &mut Vec<Event>) -> Result<u64, Reject> {
        self.check_new_symbol(spec)?;
        Ok(self.push_symbol(spec, None, events))
    }

    /// Everything a new symbol's pair rules must pass.
    pub(crate) fn check_new_symbol(&self, spec: &SymbolSpec) -> Result<(), Reject> {
        self.check_name(&spec.name, SYMBOL_NAME_LEN_MAX)?;
        if self.symbol_names.contains_key(&spec.name) {
            return Err(Reject::NameTaken);
        }
        if self.symbols.len() >= self.config.symbols_max as usize {
            return Err(Reject::LimitReached);
        }
        self.asset(spec.base)?;
        self.asset(spec.quote)?;
        if spec.base == spec.quote {
            return Err(Reject::SymbolAssetsMustDiffer);
        }
        validate_spec(spec)
    }

    /// Adds a checked symbol; returns its id.
    pub(crate) fn push_symbol(
        &mut self,
        spec: &SymbolSpec,
        margin: Option<Box<crate::margin::Margin>>,
        events: &mut Vec<Event>,
    ) -> u64 {
        let id = SymbolId(self.symbols.len() as u32);
        if margin.is_some() {
            self.margin_symbols += 1;
        }
        self.symbols.push(Symbol {
            spec: spec.clone(),
            book: B::new(spec.tick),
            last_px: None,
            stops: Stops::default(),
            margin,
        });
        self.symbol_names.insert(spec.name.clone(), id);
        events.push(Event::SymbolCreated { symbol: id });
        u64::from(id.0)
    }

    fn create_account(&mut self, events: &mut Vec<Event>) -> Result<u64, Reject> {
        if self.accounts.len() >= self.config.accounts_max as usize {
            return Err(Reject::LimitReached);
        }
        let id = AccountId(self.accounts.len() as u32);
        self.accounts.push(Account::default());
        events.push(Event::AccountCreated { account: id });
        Ok(u64::from(id.0))
    }

    /// Validates everything before it changes anything: the id is free, the account
    /// bound leaves room, the asset exists, the deposit is not negative and fits the
    /// asset's supply.
    fn create_account_with_id(
        &mut self,
        external_id: u64,
        asset: AssetId,
        deposit: Amount,
        events: &mut Vec<Event>,
    ) -> Result<u64, Reject> {
        if self.accounts_by_external.contains_key(&external_id) {
            return Err(Reject::AccountIdTaken);
        }
        if self.accounts.len() >= self.config.accounts_max as usize {
            return Err(Reject::LimitReached);
        }
        let supply = self.asset(asset)?.supply;
        if deposit.0 < 0 {
            return Err(Reject::AmountMustBePositive);
        }
        let supply = supply.0.checked_add(deposit.0).ok_or(Reject::AmountOverflow)?;
        let id = AccountId(self.accounts.len() as u32);
        self.accounts.push(Account { external_id: Some(external_id), ..Account::default() });
        self.accounts_by_external.insert(external_id, id);
        events.push(Event::AccountCreated { account: id });
        if deposit.0 > 0 {
            self.assets[asset.0 as usize].supply = Amount(supply);
            self.accounts[id.0 as usize].balance_mut(asset).available.0 += deposit.0;
            self.emit_balance(id, asset, events);
        }
        Ok(u64::from(id.0))
    }

    fn deposit(
        &mut self,
        account: AccountId,
        asset: AssetId,
        amount: Amount,
        events: &mut Vec<Event>,
    ) -> Result<u64, Reject> {
        self.account(account)?;
        let supply = self.asset(asset)?.supply;
        if amount.0 <= 0 {
            return Err(Reject::AmountMustBePositive);
        }
        let supply = supply.0.checked_add(amount.0).ok_or(Reject::AmountOverflow)?;
        self.assets[asset.0 as usize].supply = Amount(supply);
        let holder = &mut self.accounts[account.0 as usize];
        holder.balance_mut(asset).available.0 += amount.0;
        if !holder.positions.is_empty() {
            self.margin_dirty.push((account, asset));
        }
        self.emit_balance(account, asset, events);
        Ok(0)
    }

    fn withdraw(
        &mut self,
        account: AccountId,
        asset: AssetId,
        amount: Amount,
        events: &mut Vec<Event>,
    ) -> Result<u64, Reject> {
        let holder = self.active_account(account)?;
        self.asset(asset)?;
        if amount.0 <= 0 {
            return Err(Reject::AmountMustBePositive);
        }
        if holder.balance(asset).available < amount {
            return Err(Reject::BalanceInsufficient);
        }
        let margined = !holder.positions.is_empty();
        if margined {
            self.margin_check_cash(account, asset, amount.0)?;
            self.margin_dirty.push((account, asset));
        }
        self.assets[asset.0 as usize].supply.0 -= amount.0;
        self.accounts[account.0 as usize].balance_mut(asset).available.0 -= amount.0;
        self.emit_balance(account, asset, events);
        Ok(0)
    }

    /// Moves `amount` of `asset` into `account`'s available balance from outside this
    /// engine, without a client's record: how a symbol part of the partitioned
    /// exchange (`bourse-shard`) funds an order with the hold its account part took.
    /// The asset's supply grows with it, so every invariant holds. Spot accounts only
    /// (a margin account's cash is watched by its positions).
    pub fn transfer_in(
        &mut self,
        account: AccountId,
        asset: AssetId,
        amount: Amount,
        events: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        debug_assert!(self.account(account).is_ok_and(|holder| holder.positions.is_empty()), "a margin account");
        self.deposit(account, asset, amount, events).map(drop)
    }

    /// The way back: takes `amount` of `asset` out of `account`'s available balance
    /// (and the asset's supply), without a client's record.
    pub fn transfer_out(
        &mut self,
        account: AccountId,
        asset: AssetId,
        amount: Amount,
        events: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        debug_assert!(self.account(account).is_ok_and(|holder| holder.positions.is_empty()), "a margin account");
        self.withdraw(account, asset, amount, events).map(drop)
    }

    fn set_suspended(&mut self, account: AccountId, suspended: bool, events: &mut Vec<Event>) -> Result<u64, Reject> {
        if self.account(account)?.suspended == suspended {
            return Err(Reject::AccountAlreadyInState);
        }
        self.accounts[account.0 as usize].suspended = suspended;
        events.push(if suspended { Event::AccountSuspended { account } } else { Event::AccountResumed { account } });
        Ok(0)
    }

    pub(crate) fn account(&self, account: AccountId) -> Result<&Account, Reject> {
        self.accounts.get(account.0 as usize).ok_or(Reject::AccountUnknown)
    }

    /// An account that exists and is not suspended.
    pub(crate) fn active_account(&self, account: AccountId) -> Result<&Account, Reject> {
        let holder = self.account(account)?;
        if holder.suspended {
            return Err(Reject::AccountSuspended);
        }
        Ok(holder)
    }

    pub(crate) fn asset(&self, asset: AssetId) -> Result<&Asset, Reject> {
        self.assets.get(asset.0 as usize).ok_or(Reject::AssetUnknown)
    }

    pub(crate) fn symbol(&self, symbol: SymbolId) -> Result<&Symbol<B>, Reject> {
        self.symbols.get(symbol.0 as usize).ok_or(Reject::SymbolUnknown)
    }

    /// Reserves `delta` of `asset` (releases, when negative) and reports the balance:
    /// [`Account::shift`] and [`Engine::emit_balance`] with one search of the balances.
    #[inline(always)]
    pub(crate) fn shift_hold(&mut self, account: AccountId, asset: AssetId, delta: i64, events: &mut Vec<Event>) {
        let balance = self.accounts[account.0 as usize].shift(asset, delta);
        events.push(Event::Balance { account, asset, available: balance.available, reserved: balance.reserved });
    }

    /// [`Engine::shift_hold`] of the balance at `slot` ([`Account::shift_at`]), for a
    /// change that may be zero, which changes nothing and reports nothing. No branch on
    /// whether it is: the event is written and then dropped again.
    #[inline(always)]
    pub(crate) fn shift_hold_at(
        &mut self,
        account: AccountId,
        asset: AssetId,
        slot: usize,
        delta: i64,
        events: &mut Vec<Event>,
    ) {
        let balance = self.accounts[account.0 as usize].shift_at(slot, delta);
        events.push(Event::Balance { account, asset, available: balance.available, reserved: balance.reserved });
        events.truncate(events.len() - usize::from(delta == 0));
    }

    #[inline]
    pub(crate) fn emit_balance(&self, account: AccountId, asset: AssetId, events: &mut Vec<Event>) {
        let balance = self.accounts[account.0 as usize].balance(asset);
        events.push(Event::Balance { account, asset, available: balance.available, reserved: balance.reserved });
    }

    /// Marks an order closed at the stamp of the command being applied (`ts_last`, set
    /// before the command runs) and forgets the oldest closed one past the bound.
    pub(crate) fn close_record(&mut self, id: OrderId, status: OrderStatus) {
        let mut record = self.orders.remove(&id).expect("closed order has a record");
        record.status = status;
        record.ts_closed = self.ts_last;
        if self.config.orders_closed_max == 0 {
            return;
        }
        if self.orders_closed.len() == self.config.orders_closed_max as usize {
            self.orders_closed.pop_front();
        }
        self.orders_closed.push_back(record);
    }

    /// Cancels the part of an order (of `symbol` and `side`) that is no longer live:
    /// releases `hold` and records the cancellation (as an expiry when that is the
    /// reason).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn cancel_remainder(
        &mut self,
        id: OrderId,
        account: AccountId,
        (symbol, side): (SymbolId, Side),
        hold: (AssetId, Amount),
        qty: Qty,
        reason: CancelReason,
        events: &mut Vec<Event>,
    ) {
        events.push(Event::Cancelled { order: id, qty_cancelled: qty, reason });
        if self.margin_symbols > 0 && self.symbols[symbol.0 as usize].margin.is_some() {
            self.position_orders(account, symbol, side, -qty.0);
        }
        if hold.1 .0 > 0 {
            self.shift_hold(account, hold.0, -hold.1 .0, events);
        }
        let status = if reason == CancelReason::Expired { OrderStatus::Expired } else { OrderStatus::Cancelled };
        self.close_record(id, status);
    }
}

/// Tick, lot, bounds and fees must make every order's arithmetic well defined and
/// keep the fee account from going negative:
/// - the taker fee is not negative and not below the maker fee;
/// - a maker rebate never exceeds the taker fee it is paid from;
/// - one lot at the lowest price pays for either fee, so a sale never owes more fee
///   than it earns.
fn validate_spec(spec: &SymbolSpec) -> Result<(), Reject> {
    let shape_ok = spec.tick.0 > 0
        && spec.lot.0 > 0
        && spec.px_min.0 > 0
        && spec.px_min <= spec.px_max
        && spec.px_min.0 % spec.tick.0 == 0
        && spec.px_max.0 % spec.tick.0 == 0
        && crate::types::amount_from_i128(crate::types::notional(spec.px_max, spec.lot)).is_some();
    if !shape_ok {
        return Err(Reject::SymbolSpecInvalid);
    }
    let lot_value_min = crate::types::notional(spec.px_min, spec.lot);
    let fees_ok = spec.fee_taker.0 >= 0
        && spec.fee_maker <= spec.fee_taker
        && spec.fee_maker.0.checked_add(spec.fee_taker.0).is_some_and(|sum| sum >= 0)
        && i128::from(spec.fee_taker.0) <= lot_value_min;
    if !fees_ok {
        return Err(Reject::FeesInvalid);
    }
    Ok(())
}
