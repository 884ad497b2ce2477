//! An account part: balances and pre-trade holds of the accounts its group owns, and
//! the sessions (exactly-once records) of the clients that trade them.
//!
//! A balance here is what the account has *available*; what its orders reserve sits
//! in the symbol parts' mirrors of the account, so the account's whole balance is
//! this plus those. A place takes the order's hold (the engine's own
//! [`spot_hold`](bourse_engine::spot_hold), after the same shape checks) and forwards
//! it with the order. A move of a buy to a higher price needs more: the price
//! difference times the quantity left. Both come from the symbol part's reports
//! ([`Settlement::Buy`], sent for a buy when it is placed and whenever a command
//! touches it, before the command's outcome), and while moves are on their way the
//! price charged from is the lowest the order may have when the next one arrives
//! (its reported price or one of theirs, as each may apply or be refused). A stale
//! quantity is never smaller than the true one (quantities only shrink), so a move
//! takes at least what it needs; what it took beyond comes back as a credit.

use std::collections::{BTreeMap, VecDeque};

use bourse_engine::command::{CommandBody, SymbolSpec};
use bourse_engine::{
    spot_hold, AccountId, Amount, AssetId, ClientId, EngineConfig, OrderId, Outcome, Px, Qty, Reject, SymbolId,
};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::{Ack, Forward, Settlement, ShardMap, Unsupported};

/// A resting buy of one of this part's accounts, as last reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Buy {
    symbol: SymbolId,
    order: OrderId,
    /// The lowest price the order may have when the next move reaches its symbol's
    /// part: the reported one, or that of a move still on its way (which may or may
    /// not apply). A move up is charged from here, so it never takes too little.
    px: Px,
    remaining: Qty,
    /// Moves forwarded and not yet answered.
    moves: u32,
}

/// What an account part made of a client command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Answered here: refused by the account's checks, or a command that ends here.
    Done(Outcome),
    /// Passed on to the part of the symbol's group.
    Forward(usize, Forward),
    /// A retry of a command already applied whose outcome is still on its way from
    /// the symbol's group: nothing is done again, and the outcome answers it when it
    /// comes.
    Duplicate,
    /// A retry of a command already applied, answered with its outcome as first given
    /// (or `sequence_too_old` when it is older than the session remembers): nothing
    /// is done again.
    Repeat(Outcome),
    /// A number past the next in the client's session: refused with `sequence_gap`,
    /// nothing done or recorded.
    Gap,
}

/// Everything this part keeps of one account, in one place: a command touches one
/// record. The inline sizes fit an account that trades one symbol; more spill to the
/// heap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    /// Available amounts by asset.
    balances: SmallVec<[(AssetId, i64); 2]>,
    /// Its resting buys, as last reported.
    buys: SmallVec<[Buy; 1]>,
    /// Suspended (`SuspendAccount`): no new order, move or withdrawal until resumed,
    /// as in one engine. Only its account part knows: every command that suspension
    /// refuses is refused here, before anything is forwarded; cancels, reductions and
    /// the account's waiting stops go on as in one engine.
    suspended: bool,
}

impl Record {
    fn buy(&mut self, symbol: SymbolId, order: OrderId) -> Option<&mut Buy> {
        self.buys.iter_mut().find(|buy| (buy.symbol, buy.order) == (symbol, order))
    }

    fn forget(&mut self, symbol: SymbolId, order: OrderId) {
        if let Some(at) = self.buys.iter().position(|buy| (buy.symbol, buy.order) == (symbol, order)) {
            self.buys.swap_remove(at);
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountPart {
    group: usize,
    map: ShardMap,
    specs: Vec<SymbolSpec>,
    assets: u32,
    /// Per asset: deposited and credited less withdrawn through this part (the part of
    /// the asset's supply that entered here).
    issued: Vec<i128>,
    /// Per account id (dense, as the engine numbers them); empty for the accounts of
    /// other groups.
    records: Vec<Record>,
    /// Every client's session with this group: the number of its last command applied
    /// and the outcomes remembered for retries (see [`AccountPart::client`]). Encoded
    /// sorted by client, so every replica's snapshot of one state is the same bytes.
    #[serde(with = "sorted")]
    sessions: FxHashMap<ClientId, Session>,
    /// How many sessions are kept at most, and how long (log time, ns) an idle one is
    /// (the engine's `clients_max` and `client_expiry_secs`): see
    /// [`AccountPart::retry_or_gap`].
    clients_max: u32,
    client_expiry_ns: u64,
    /// The log time at or after which the next client command sweeps idle sessions.
    sweep_at: u64,
    /// Symbols moved away from the group the map gives them, to the group they live in
    /// now (as this group has applied the moves, [`crate::machine::Output::Move`]).
    placed: BTreeMap<SymbolId, usize>,
    /// The last move of each symbol moved: its cut (the catalog's group's stamp when it
    /// took the move) and the group the book left, where orders stamped at or below the
    /// cut still go (see "Moving a book" in [`crate::machine`]).
    cuts: BTreeMap<SymbolId, (u64, usize)>,
    /// On the catalog's group: the closes of the day on their way through the groups,
    /// by the operator's command, each waiting for every group's report.
    closing: BTreeMap<(ClientId, u64), Closing>,
}

/// A close of the day on its way (see [`AccountPart::closing`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Closing {
    stamp: u64,
    /// Groups that have reported, and the orders they expired in all.
    reported: usize,
    expired: u64,
}

/// The outcomes a session remembers for retries, as one engine does
/// ([`EngineConfig::outcomes_per_client_max`](bourse_engine::EngineConfig)'s default).
pub const OUTCOMES_REMEMBERED: usize = 128;

/// A client's session with a group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Session {
    /// The number of the last command applied.
    last: u64,
    /// Its stamp (log time).
    at: u64,
    /// The outcomes of the last commands applied, the back being `last`'s: `None` while
    /// a forwarded command's outcome is on its way back.
    outcomes: VecDeque<Option<Outcome>>,
}

impl Session {
    fn outcome_mut(&mut self, seq: u64) -> Option<&mut Option<Outcome>> {
        let back = usize::try_from(self.last.checked_sub(seq)?).ok()?;
        let at = self.outcomes.len().checked_sub(back + 1)?;
        self.outcomes.get_mut(at)
    }
}

/// A hash map encoded as its entries sorted by key.
mod sorted {
    use std::hash::Hash;

    use rustc_hash::FxHashMap;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<K: Serialize + Ord, V: Serialize, S: Serializer>(
        map: &FxHashMap<K, V>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut entries: Vec<(&K, &V)> = map.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries.serialize(serializer)
    }

    pub fn deserialize<'de, K, V, D>(deserializer: D) -> Result<FxHashMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Eq + Hash,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(deserializer)?.into_iter().collect())
    }
}

impl AccountPart {
    /// `config`: its `clients_max` and `client_expiry_secs` bound the sessions as they
    /// bound an engine's clients.
    pub fn new(group: usize, map: ShardMap, config: &EngineConfig) -> Self {
        assert!(config.clients_max > 0 && config.client_expiry_secs > 0, "sessions need room and time");
        AccountPart {
            group,
            map,
            specs: Vec::new(),
            assets: 0,
            issued: Vec::new(),
            records: Vec::new(),
            sessions: FxHashMap::default(),
            clients_max: config.clients_max,
            client_expiry_ns: u64::from(config.client_expiry_secs) * 1_000_000_000,
            sweep_at: 0,
            placed: BTreeMap::new(),
            cuts: BTreeMap::new(),
            closing: BTreeMap::new(),
        }
    }

    /// Takes in a catalog or account-creating command that every part applied, with the
    /// id its outcome gave. An account created with an external id and a deposit gets
    /// the deposit in its own group's part only (the symbol parts' mirrors created it
    /// empty).
    pub(crate) fn configure(&mut self, body: &CommandBody, id: u64) -> Result<(), Unsupported> {
        match body {
            CommandBody::CreateAsset { .. } => {
                self.assets += 1;
                self.issued.push(0);
            }
            CommandBody::CreateSymbol(spec) => self.specs.push((**spec).clone()),
            CommandBody::CreateAccount => self.records.push(Record::default()),
            CommandBody::CreateAccountWithId { asset, deposit, .. } => {
                let account = AccountId(id as u32);
                assert_eq!(account.0 as usize, self.records.len(), "every part numbers accounts alike");
                self.records.push(Record::default());
                if deposit.0 > 0 && self.map.account_group(account) == self.group {
                    *self.balance_mut(account, *asset) += deposit.0;
                    self.issued[asset.0 as usize] += i128::from(deposit.0);
                }
            }
            // The symbol parts' engines keep the setting; nothing here depends on it.
            CommandBody::SetFairness(_) => {}
            _ => return Err(Unsupported("this command as configuration")),
        }
        Ok(())
    }

    /// Which group owns what, before any move.
    pub fn map(&self) -> ShardMap {
        self.map
    }

    /// The group whose symbol part holds `symbol`'s book, as this group has applied the
    /// moves so far: where its orders go.
    pub fn symbol_group(&self, symbol: SymbolId) -> usize {
        self.placed.get(&symbol).copied().unwrap_or_else(|| self.map.symbol_group(symbol))
    }

    /// The group an order of `symbol` stamped `stamp` goes to: the book's group, or the
    /// group it left when the order is stamped at or below the last move's cut.
    pub fn order_group(&self, symbol: SymbolId, stamp: u64) -> usize {
        match self.cuts.get(&symbol) {
            Some(&(cut, from)) if stamp <= cut => from,
            _ => self.symbol_group(symbol),
        }
    }

    /// The latest cut of the moves this group applied.
    pub fn latest_cut(&self) -> Option<u64> {
        self.cuts.values().map(|&(cut, _)| cut).max()
    }

    /// The last move of `symbol`'s book this group applied: its cut and the group the
    /// book left.
    pub fn last_move(&self, symbol: SymbolId) -> Option<(u64, usize)> {
        self.cuts.get(&symbol).copied()
    }

    /// `symbol`'s book moves to group `to` at `cut`: orders of it stamped past the cut
    /// go there, the others (a group whose stamps lag the catalog's) still go where
    /// the book was. A later move replaces the cut: by the time a group applies it, it
    /// has stamped past the earlier one.
    pub(crate) fn place(&mut self, symbol: SymbolId, to: usize, cut: u64) {
        let from = self.symbol_group(symbol);
        self.cuts.insert(symbol, (cut, from));
        if to == self.map.symbol_group(symbol) {
            self.placed.remove(&symbol);
        } else {
            self.placed.insert(symbol, to);
        }
    }

    /// The accounts this part knows of (every part knows every account, and owns some).
    pub fn accounts_known(&self) -> usize {
        self.records.len()
    }

    /// An account's available balances by asset (none for an account of another group).
    pub fn balances_of(&self, account: AccountId) -> Vec<(AssetId, i64)> {
        self.records.get(account.0 as usize).map_or_else(Vec::new, |record| record.balances.to_vec())
    }

    /// An account's available balance here.
    pub fn available(&self, account: AccountId, asset: AssetId) -> i64 {
        let amounts = self.records.get(account.0 as usize).map_or(&[][..], |record| &record.balances[..]);
        amounts.iter().find(|(a, _)| *a == asset).map_or(0, |&(_, amount)| amount)
    }

    /// Every nonzero available balance of this part's accounts.
    pub fn balances(&self) -> impl Iterator<Item = ((AccountId, AssetId), i64)> + '_ {
        self.records.iter().enumerate().flat_map(|(account, record)| {
            record
                .balances
                .iter()
                .filter(|(_, amount)| *amount != 0)
                .map(move |&(asset, amount)| ((AccountId(account as u32), asset), amount))
        })
    }

    /// `account`'s available amount of `asset`, to change (the account exists).
    fn balance_mut(&mut self, account: AccountId, asset: AssetId) -> &mut i64 {
        let amounts = &mut self.records[account.0 as usize].balances;
        let slot = match amounts.iter().position(|(a, _)| *a == asset) {
            Some(slot) => slot,
            None => {
                amounts.push((asset, 0));
                amounts.len() - 1
            }
        };
        &mut amounts[slot].1
    }

    /// Resting buys this part knows of.
    pub fn buys_known(&self) -> usize {
        self.records.iter().map(|record| record.buys.len()).sum()
    }

    fn owned(&self, account: AccountId) -> Result<(), Reject> {
        if account.0 as usize >= self.records.len() {
            return Err(Reject::AccountUnknown);
        }
        assert_eq!(self.map.account_group(account), self.group, "account {account} routed to the wrong group");
        Ok(())
    }

    /// An account of this part that is not suspended: the engine's first check of a
    /// place, a move and a withdrawal.
    fn active(&self, account: AccountId) -> Result<(), Reject> {
        self.owned(account)?;
        if self.records[account.0 as usize].suspended {
            return Err(Reject::AccountSuspended);
        }
        Ok(())
    }

    /// Whether `account` is suspended (`None`: not an account of this part's numbering).
    pub fn suspended(&self, account: AccountId) -> Option<bool> {
        self.records.get(account.0 as usize).map(|record| record.suspended)
    }

    fn asset(&self, asset: AssetId) -> Result<(), Reject> {
        if asset.0 >= self.assets {
            return Err(Reject::AssetUnknown);
        }
        Ok(())
    }

    /// Applies a client's command: its exactly-once check, then the account's part of
    /// the command. A client has a session with each group it sends commands to, and
    /// numbers its commands to a group 1, 2, 3, … on their own ([`crate::Sessions`]
    /// does it for a client library): the next number applies; a number already
    /// applied is a retry, nothing is done again, and it is answered with the outcome
    /// the command got (once that is back, for a forwarded one); a number past the next is
    /// refused with `sequence_gap` and not recorded (a later command overtook an
    /// earlier one on the way), so the client sends the missing ones first. A client
    /// may keep many commands in flight, and none is taken for a retry of another.
    pub fn client(&mut self, client: ClientId, seq: u64, stamp: u64, body: &CommandBody) -> Result<Step, Unsupported> {
        command_account(body).ok_or(Unsupported("this command from a client"))?;
        if let Some(step) = self.retry_or_gap(client, seq, stamp) {
            return Ok(step);
        }
        let step = match self.command(client, seq, stamp, body)? {
            Ok(step) => step,
            Err(reject) => Step::Done(Outcome::Rejected(reject)),
        };
        self.record(
            client,
            seq,
            stamp,
            match &step {
                Step::Done(outcome) => Some(*outcome),
                _ => None,
            },
        );
        Ok(step)
    }

    /// The exactly-once check of `client`'s command numbered `seq`, stamped `stamp`:
    /// `None` when it is the next of its session (to be applied, then
    /// [`AccountPart::record`]ed), or what it is instead (a retry, answered from the
    /// session's memory; a gap; a new client's command refused, `limit_reached`,
    /// while `clients_max` sessions are kept, leaving no trace).
    ///
    /// As an engine forgets its clients, a session none of whose commands applied for
    /// `client_expiry_secs` of log time is forgotten at the next sweep (every eighth
    /// of that, at the first command stamped past it: the same command on every
    /// replica), unless an outcome of it is still on its way back from another group.
    /// A forgotten client's next command is refused as a `sequence_gap` unless it is
    /// its first (numbered 1): its retries must come well within the expiry.
    pub(crate) fn retry_or_gap(&mut self, client: ClientId, seq: u64, stamp: u64) -> Option<Step> {
        if stamp >= self.sweep_at {
            let expiry = self.client_expiry_ns;
            self.sessions.retain(|_, session| {
                stamp.saturating_sub(session.at) < expiry || session.outcomes.iter().any(Option::is_none)
            });
            self.sweep_at = stamp.saturating_add((expiry / 8).max(1));
        }
        let last = self.session(client);
        if last == 0 && seq == 1 && self.sessions.len() >= self.clients_max as usize {
            return Some(Step::Done(Outcome::Rejected(Reject::LimitReached)));
        }
        if seq <= last {
            let session = self.sessions.get_mut(&client).expect("a session past 0");
            return Some(match session.outcome_mut(seq) {
                Some(Some(outcome)) => Step::Repeat(*outcome),
                Some(None) => Step::Duplicate,
                None => Step::Repeat(Outcome::Rejected(Reject::SequenceTooOld)),
            });
        }
        (seq > last + 1).then_some(Step::Gap)
    }

    /// Records the next command of `client`'s session as applied at `stamp`, with its
    /// outcome (`None` while it is on its way back from another group).
    pub(crate) fn record(&mut self, client: ClientId, seq: u64, stamp: u64, outcome: Option<Outcome>) {
        let session = self.sessions.entry(client).or_default();
        debug_assert_eq!(seq, session.last + 1, "only the next command of a session is recorded");
        session.last = seq;
        session.at = stamp;
        if session.outcomes.len() == OUTCOMES_REMEMBERED {
            session.outcomes.pop_front();
        }
        session.outcomes.push_back(outcome);
    }

    /// The operator's close of the day `(client, seq)`, stamped `stamp`, is on its way
    /// to every symbol part: answered once each has reported ([`Settlement::Closed`]).
    pub(crate) fn closing(&mut self, client: ClientId, seq: u64, stamp: u64) {
        self.closing.insert((client, seq), Closing { stamp, reported: 0, expired: 0 });
    }

    /// Closes of the day not yet reported by every group.
    pub fn closes_pending(&self) -> usize {
        self.closing.len()
    }

    /// Every client's session with this group: `(client, number of its last command
    /// applied)`.
    pub fn sessions(&self) -> impl Iterator<Item = (ClientId, u64)> + '_ {
        self.sessions.iter().map(|(&client, session)| (client, session.last))
    }

    /// The number of the last command of `client`'s session with this group that
    /// applied, or 0.
    pub fn session(&self, client: ClientId) -> u64 {
        self.sessions.get(&client).map_or(0, |session| session.last)
    }

    fn command(
        &mut self,
        client: ClientId,
        seq: u64,
        stamp: u64,
        body: &CommandBody,
    ) -> Result<Result<Step, Reject>, Unsupported> {
        let forward = |fund, counted| Forward { stamp, client, seq, body: body.clone(), fund, counted, catalog: 0 };
        Ok(match body {
            CommandBody::Deposit { account, asset, amount } | CommandBody::Credit { account, asset, amount } => {
                self.deposit(*account, *asset, *amount).map(|()| Step::Done(Outcome::Ok { id: 0 }))
            }
            CommandBody::Withdraw { account, asset, amount } => {
                self.withdraw(*account, *asset, *amount).map(|()| Step::Done(Outcome::Ok { id: 0 }))
            }
            CommandBody::SuspendAccount { account } => {
                self.set_suspended(*account, true).map(|()| Step::Done(Outcome::Ok { id: 0 }))
            }
            CommandBody::ResumeAccount { account } => {
                self.set_suspended(*account, false).map(|()| Step::Done(Outcome::Ok { id: 0 }))
            }
            CommandBody::Place(request) => self
                .place_hold(request)
                .map(|hold| Step::Forward(self.order_group(request.symbol, stamp), forward(Some(hold), false))),
            CommandBody::Cancel { account, symbol, .. } | CommandBody::Reduce { account, symbol, .. } => {
                self.owned(*account).map(|()| Step::Forward(self.order_group(*symbol, stamp), forward(None, false)))
            }
            CommandBody::Move { account, symbol, order, px } => self
                .move_hold(*account, *symbol, *order, *px)
                .map(|(fund, counted)| Step::Forward(self.order_group(*symbol, stamp), forward(fund, counted))),
            _ => return Err(Unsupported("this command from a client")),
        })
    }

    fn deposit(&mut self, account: AccountId, asset: AssetId, amount: Amount) -> Result<(), Reject> {
        self.owned(account)?;
        self.asset(asset)?;
        if amount.0 <= 0 {
            return Err(Reject::AmountMustBePositive);
        }
        let balance = self.balance_mut(account, asset);
        *balance = balance.checked_add(amount.0).ok_or(Reject::AmountOverflow)?;
        self.issued[asset.0 as usize] += i128::from(amount.0);
        Ok(())
    }

    /// Per asset: what entered through this part (deposits and credits) less what left
    /// (withdrawals).
    pub fn issued(&self) -> &[i128] {
        &self.issued
    }

    fn set_suspended(&mut self, account: AccountId, suspended: bool) -> Result<(), Reject> {
        self.owned(account)?;
        let record = &mut self.records[account.0 as usize];
        if record.suspended == suspended {
            return Err(Reject::AccountAlreadyInState);
        }
        record.suspended = suspended;
        Ok(())
    }

    fn withdraw(&mut self, account: AccountId, asset: AssetId, amount: Amount) -> Result<(), Reject> {
        self.active(account)?;
        self.asset(asset)?;
        if amount.0 <= 0 {
            return Err(Reject::AmountMustBePositive);
        }
        self.take(account, asset, amount.0)?;
        self.issued[asset.0 as usize] -= i128::from(amount.0);
        Ok(())
    }

    fn take(&mut self, account: AccountId, asset: AssetId, amount: i64) -> Result<(), Reject> {
        let balance = self.balance_mut(account, asset);
        if *balance < amount {
            return Err(Reject::BalanceInsufficient);
        }
        *balance -= amount;
        Ok(())
    }

    fn place_hold(&mut self, request: &bourse_engine::command::OrderRequest) -> Result<(AssetId, Amount), Reject> {
        self.active(request.account)?;
        let spec = self.specs.get(request.symbol.0 as usize).ok_or(Reject::SymbolUnknown)?;
        let (asset, amount) = spot_hold(spec, request)?;
        self.take(request.account, asset, amount.0)?;
        Ok((asset, amount))
    }

    /// What a move takes: for a buy of this account this part knows to rest, the
    /// price difference times the quantity left when the price goes up; and whether
    /// the move is counted as on its way.
    fn move_hold(
        &mut self,
        account: AccountId,
        symbol: SymbolId,
        order: OrderId,
        px: Px,
    ) -> Result<(Option<(AssetId, Amount)>, bool), Reject> {
        self.active(account)?;
        let quote = self.specs.get(symbol.0 as usize).ok_or(Reject::SymbolUnknown)?.quote;
        let record = &mut self.records[account.0 as usize];
        let Some(buy) = record.buy(symbol, order).copied() else {
            // A sell, an order of another account, a stop, or no order: the move needs
            // nothing more here, and the symbol part answers it.
            return Ok((None, false));
        };
        let more = i128::from(px.0 - buy.px.0) * i128::from(buy.remaining.0);
        let more = i64::try_from(more).map_err(|_| Reject::AmountOverflow)?;
        if more > 0 {
            self.take(account, quote, more)?;
        }
        let entry = self.records[account.0 as usize].buy(symbol, order).expect("found above");
        entry.px = entry.px.min(px);
        entry.moves += 1;
        Ok(((more > 0).then_some((quote, Amount(more))), true))
    }

    /// Takes in what a symbol part sent back; returns the acknowledgement for the
    /// client when it is one.
    pub fn settle(&mut self, settlement: Settlement) -> Option<Ack> {
        match settlement {
            Settlement::Closed { client, seq, expired } => {
                let closing = self.closing.get_mut(&(client, seq)).expect("a close reported is on its way");
                closing.reported += 1;
                closing.expired += expired;
                if closing.reported < self.map.groups() {
                    return None;
                }
                let Closing { stamp, expired, .. } =
                    self.closing.remove(&(client, seq)).expect("the close just counted");
                let outcome = Outcome::Ok { id: expired };
                if let Some(slot) = self.sessions.get_mut(&client).and_then(|session| session.outcome_mut(seq)) {
                    *slot = Some(outcome);
                }
                Some(Ack { client, seq, stamp, outcome, repeat: false })
            }
            Settlement::Credit { account, asset, amount } => {
                *self.balance_mut(account, asset) += amount.0;
                None
            }
            Settlement::Done { account, ack, moved } => {
                // The session remembers it for retries.
                if let Some(slot) = self.sessions.get_mut(&ack.client).and_then(|session| session.outcome_mut(ack.seq))
                {
                    *slot = Some(ack.outcome);
                }
                if let Some(moved) = moved {
                    let record = &mut self.records[account.0 as usize];
                    if let Some(buy) = record.buy(moved.symbol, moved.order) {
                        buy.moves = buy.moves.saturating_sub(1);
                        match moved.open {
                            // The last move on its way answered: the symbol part's price
                            // is the order's (whether the moves applied or were refused).
                            Some((px, remaining)) => {
                                buy.remaining = remaining;
                                if buy.moves == 0 {
                                    buy.px = px;
                                }
                            }
                            None => record.forget(moved.symbol, moved.order),
                        }
                    }
                }
                Some(ack)
            }
            Settlement::Buy { account, symbol, order, open } => {
                let record = &mut self.records[account.0 as usize];
                match open {
                    Some((px, remaining)) => match record.buy(symbol, order) {
                        Some(buy) => {
                            buy.remaining = remaining;
                            if buy.moves == 0 {
                                buy.px = px;
                            }
                        }
                        None => record.buys.push(Buy { symbol, order, px, remaining, moves: 0 }),
                    },
                    None => record.forget(symbol, order),
                }
                None
            }
        }
    }
}

/// The account a client command acts for, or none for a command clients do not send
/// to an account part.
fn command_account(body: &CommandBody) -> Option<AccountId> {
    match body {
        CommandBody::Deposit { account, .. }
        | CommandBody::Credit { account, .. }
        | CommandBody::Withdraw { account, .. }
        | CommandBody::SuspendAccount { account }
        | CommandBody::ResumeAccount { account } => Some(*account),
        _ => crate::order_parts(body).map(|(account, _)| account),
    }
}
