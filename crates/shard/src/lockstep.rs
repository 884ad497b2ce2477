//! Every group's parts in one thread, their messages delivered in an order drawn from
//! a seed: the harness of the differential tests, and the bench's untimed pass.
//!
//! Messages between parts wait in per-destination queues; each step delivers the
//! head of one queue, picked at random (or the first nonempty one, without a seed).
//! Whatever the interleaving, each symbol part's merge applies its forwards in stamp
//! order, so books, trades and fees come out the same; only when an account's
//! proceeds reach its part may differ.

use std::collections::{BTreeMap, VecDeque};

use bourse_engine::command::Command;
use bourse_engine::{
    AccountId, Amount, AssetId, Depth, Engine, EngineConfig, Event, Outcome, Px, Qty, Side, SymbolId, Timestamp,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::account::Step;
use crate::{route, Ack, Forward, Groups, Route, Settlement, Unsupported};

/// One trade, without order ids (a symbol part numbers its orders itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trade {
    pub symbol: SymbolId,
    pub px: Px,
    pub qty: Qty,
    pub taker_side: Side,
    pub maker_account: AccountId,
    pub taker_account: AccountId,
    pub fee_maker: Amount,
    pub fee_taker: Amount,
}

impl Trade {
    /// The trade an event reports, if it reports one.
    pub fn of(event: &Event) -> Option<Trade> {
        match *event {
            Event::Trade {
                symbol, px, qty, taker_side, maker_account, taker_account, fee_maker, fee_taker, ..
            } => Some(Trade { symbol, px, qty, taker_side, maker_account, taker_account, fee_maker, fee_taker }),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
enum Input {
    Client(Command),
    /// No command stamped at or below this will come.
    Tick(Timestamp),
}

#[derive(Clone, Debug)]
enum ToSymbol {
    Forward(Forward),
    Watermark(Timestamp),
}

#[derive(Clone, Debug)]
pub struct Lockstep {
    pub groups: Groups,
    inputs: Vec<VecDeque<Input>>,
    to_symbol: Vec<VecDeque<(usize, ToSymbol)>>,
    to_account: Vec<VecDeque<Settlement>>,
    acks: Vec<Ack>,
    rng: Option<ChaCha8Rng>,
}

impl Lockstep {
    /// `seed`: deliver in an order drawn from it; `None`: the first nonempty queue.
    pub fn new(groups: u32, config: EngineConfig, seed: Option<u64>) -> Self {
        let groups = Groups::new(groups, config);
        let n = groups.map.groups();
        Lockstep {
            groups,
            inputs: vec![VecDeque::new(); n],
            to_symbol: vec![VecDeque::new(); n],
            to_account: vec![VecDeque::new(); n],
            acks: Vec::new(),
            rng: seed.map(ChaCha8Rng::seed_from_u64),
        }
    }

    /// Records every trade from now on.
    pub fn record_trades(&mut self) {
        for part in &mut self.groups.symbols {
            part.record_trades();
        }
    }

    /// Takes in a client's command. A catalog or account command is applied at once in
    /// every part, after everything before it (the barrier a metadata group would
    /// give), and its outcome returned; an order or a transfer is queued for its
    /// account's group, and its outcome arrives among [`Lockstep::take_acks`].
    pub fn submit(&mut self, command: Command) -> Result<Option<Outcome>, Unsupported> {
        match route(&self.groups.map, &command.body)? {
            Route::Config => {
                self.drain();
                self.groups.configure(command.ts, &command.body).map(Some)
            }
            Route::Account(group) => {
                for (g, input) in self.inputs.iter_mut().enumerate() {
                    input.push_back(if g == group { Input::Client(command.clone()) } else { Input::Tick(command.ts) });
                }
                Ok(None)
            }
        }
    }

    /// Outcomes that arrived since the last call.
    pub fn take_acks(&mut self) -> Vec<Ack> {
        std::mem::take(&mut self.acks)
    }

    /// Delivers messages until none is left.
    pub fn drain(&mut self) {
        while self.step() {}
    }

    /// Delivers one message; false when there was none.
    pub fn step(&mut self) -> bool {
        let n = self.groups.map.groups();
        let nonempty = |i: usize| match i / n {
            0 => !self.to_account[i % n].is_empty(),
            1 => !self.to_symbol[i % n].is_empty(),
            _ => !self.inputs[i % n].is_empty(),
        };
        let candidates: Vec<usize> = (0..3 * n).filter(|&i| nonempty(i)).collect();
        let Some(&first) = candidates.first() else { return false };
        let pick = match &mut self.rng {
            Some(rng) => candidates[rng.gen_range(0..candidates.len())],
            None => first,
        };
        match pick / n {
            0 => self.step_account(pick % n),
            1 => self.step_symbol(pick % n),
            _ => self.step_input(pick % n),
        }
        true
    }

    fn step_input(&mut self, group: usize) {
        let stamp = match self.inputs[group].pop_front().expect("picked a nonempty queue") {
            Input::Tick(stamp) => stamp,
            Input::Client(command) => {
                let step = self.groups.accounts[group]
                    .client(command.client, command.seq, command.ts, &command.body)
                    .expect("routed commands are carried");
                match step {
                    Step::Done(outcome) => {
                        self.acks.push(Ack { client: command.client, seq: command.seq, stamp: command.ts, outcome })
                    }
                    Step::Forward(to, forward) => self.to_symbol[to].push_back((group, ToSymbol::Forward(forward))),
                    Step::Duplicate => {}
                }
                command.ts
            }
        };
        for queue in &mut self.to_symbol {
            queue.push_back((group, ToSymbol::Watermark(stamp)));
        }
    }

    fn step_symbol(&mut self, group: usize) {
        let (source, message) = self.to_symbol[group].pop_front().expect("picked a nonempty queue");
        let part = &mut self.groups.symbols[group];
        match message {
            ToSymbol::Forward(forward) => part.merge.offer(source, forward),
            ToSymbol::Watermark(stamp) => part.merge.advance(source, stamp),
        }
        let to_account = &mut self.to_account;
        part.release(&mut |to, settlement| to_account[to].push_back(settlement));
    }

    fn step_account(&mut self, group: usize) {
        let settlement = self.to_account[group].pop_front().expect("picked a nonempty queue");
        if let Some(ack) = self.groups.accounts[group].settle(settlement) {
            self.acks.push(ack);
        }
    }

    /// The exchange's state as one engine would show it. Call after [`Lockstep::drain`].
    pub fn summary(&self) -> Summary {
        Summary::of_groups(&self.groups)
    }
}

/// What the differential tests compare: every balance, fee, supply and book level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// `(account, asset)` → `(available, reserved)`, nonzero ones only.
    pub balances: BTreeMap<(AccountId, AssetId), (i64, i64)>,
    /// Per asset.
    pub fees: Vec<i64>,
    /// Per asset: deposited and credited less withdrawn.
    pub supply: Vec<i64>,
    /// Per symbol: bids and asks, best first.
    pub books: Vec<Depth>,
    pub orders_resting: usize,
}

impl Summary {
    pub fn of_engine(engine: &Engine) -> Summary {
        let mut balances = BTreeMap::new();
        for account in 0..engine.accounts_len() {
            let account = AccountId(account as u32);
            for &(asset, balance) in engine.balances(account).unwrap_or(&[]) {
                if balance.available.0 != 0 || balance.reserved.0 != 0 {
                    balances.insert((account, asset), (balance.available.0, balance.reserved.0));
                }
            }
        }
        let assets = (0..engine.assets_len()).map(|a| engine.asset_info(AssetId(a as u32)).expect("asset"));
        let (fees, supply) = assets.map(|asset| (asset.fees.0, asset.supply.0)).unzip();
        let books =
            (0..engine.symbols_len()).map(|s| engine.depth(SymbolId(s as u32), usize::MAX).expect("symbol")).collect();
        Summary { balances, fees, supply, books, orders_resting: engine.orders_resting() }
    }

    /// The partitioned exchange's state: available balances from the account parts,
    /// reservations, fees and books from the symbol parts. Panics if a mirror holds
    /// anything available (every command's leftovers go back to the account parts).
    pub fn of_groups(groups: &Groups) -> Summary {
        let mut balances: BTreeMap<(AccountId, AssetId), (i64, i64)> = BTreeMap::new();
        for part in &groups.accounts {
            for (key, available) in part.balances() {
                balances.entry(key).or_default().0 += available;
            }
        }
        let first = groups.symbols[0].engine();
        let mut fees = vec![0; first.assets_len()];
        let mut supply = vec![0; first.assets_len()];
        for (key, &(available, _)) in &balances {
            supply[key.1 .0 as usize] += available;
        }
        let mut books = vec![Depth { bids: Vec::new(), asks: Vec::new() }; first.symbols_len()];
        let mut orders_resting = 0;
        for (g, part) in groups.symbols.iter().enumerate() {
            let engine = part.engine();
            for account in 0..engine.accounts_len() {
                let account = AccountId(account as u32);
                for &(asset, balance) in engine.balances(account).unwrap_or(&[]) {
                    assert_eq!(balance.available.0, 0, "a mirror of {account} kept {} of {asset}", balance.available);
                    if balance.reserved.0 != 0 {
                        balances.entry((account, asset)).or_default().1 += balance.reserved.0;
                    }
                }
            }
            for (a, (fee, held)) in fees.iter_mut().zip(supply.iter_mut()).enumerate() {
                let asset = engine.asset_info(AssetId(a as u32)).expect("every part has every asset");
                *fee += asset.fees.0;
                *held += asset.supply.0;
            }
            for (s, book) in books.iter_mut().enumerate() {
                let symbol = SymbolId(s as u32);
                if groups.map.symbol_group(symbol) == g {
                    *book = engine.depth(symbol, usize::MAX).expect("every part has every symbol");
                }
            }
            orders_resting += engine.orders_resting();
        }
        Summary { balances, fees, supply, books, orders_resting }
    }
}

/// A stream written against one engine's order ids, as the groups must receive it.
#[derive(Clone, Debug, Default)]
pub struct Translated {
    /// The commands with every named order's id the groups' (an id no order had stays
    /// one no order has).
    pub commands: Vec<Command>,
    /// For each command, the index of the command that placed the order it names
    /// (its acknowledgement carries the id), or [`crate::threads::NO_DEP`].
    pub deps: Vec<u32>,
}

/// Applies streams to one engine and to a [`Lockstep`] side by side, each command
/// delivered to the end before the next (so every id is known when it is named), and
/// returns them as the groups must receive them; it remembers the ids from one stream
/// to the next. Panics where the two disagree on an outcome: the stream is then not
/// one the groups can replay.
#[derive(Clone, Debug, Default)]
pub struct Translator {
    /// The engine's order id → the groups' id, and the index in the current stream of
    /// the command that placed it ([`crate::threads::NO_DEP`] for earlier streams).
    ids: rustc_hash::FxHashMap<bourse_engine::OrderId, (bourse_engine::OrderId, u32)>,
}

impl Translator {
    pub fn translate(&mut self, engine: &mut Engine, lockstep: &mut Lockstep, commands: &[Command]) -> Translated {
        use bourse_engine::command::CommandBody;
        use bourse_engine::OrderId;

        for entry in self.ids.values_mut() {
            entry.1 = crate::threads::NO_DEP;
        }
        let ids = &mut self.ids;
        let mut out =
            Translated { commands: Vec::with_capacity(commands.len()), deps: Vec::with_capacity(commands.len()) };
        let mut events = Vec::new();
        for (i, command) in commands.iter().enumerate() {
            events.clear();
            let expected = engine.apply(command, &mut events).outcome;
            let mut dep = crate::threads::NO_DEP;
            let mut named = |order: &mut OrderId| match ids.get(order) {
                Some(&(id, placed)) => {
                    *order = id;
                    dep = placed;
                }
                None => *order = OrderId(order.0 | (1 << 62)),
            };
            let mut body = command.body.clone();
            match &mut body {
                CommandBody::Cancel { order, .. }
                | CommandBody::Reduce { order, .. }
                | CommandBody::Move { order, .. } => named(order),
                _ => {}
            }
            let sent = Command { body, ..command.clone() };
            let answered = lockstep.submit(sent.clone()).expect("a stream the groups carry");
            lockstep.drain();
            let acks = lockstep.take_acks();
            let got = match (answered, acks.as_slice()) {
                (Some(outcome), []) => outcome,
                (None, [ack]) => ack.outcome,
                other => panic!("command {i} ({command:?}) answered {other:?}"),
            };
            let translated_id = |outcome: Outcome| match outcome {
                Outcome::Ok { id } => Outcome::Ok { id: ids.get(&OrderId(id)).map_or(id, |&(id, _)| id.0) },
                other => other,
            };
            match (&command.body, expected, got) {
                (CommandBody::Place(_), Outcome::Ok { id }, Outcome::Ok { id: theirs }) => {
                    ids.insert(OrderId(id), (OrderId(theirs), i as u32));
                }
                (CommandBody::Cancel { .. } | CommandBody::Reduce { .. } | CommandBody::Move { .. }, _, _) => {
                    assert_eq!(got, translated_id(expected), "command {i} ({command:?})");
                }
                _ => assert_eq!(got, expected, "command {i} ({command:?})"),
            }
            out.commands.push(sent);
            out.deps.push(dep);
        }
        out
    }
}
