//! What the differential tests and the bench compare between one engine and the
//! groups ([`Summary`], [`Trade`]), and the rewriting of a stream's order ids for the
//! groups ([`Translator`]).

use std::collections::BTreeMap;

use crate::{Groups, Replicated};
use bourse_engine::command::{Command, FairnessSetting};
use bourse_engine::{AccountId, Amount, AssetId, Depth, Engine, Event, Outcome, Px, Qty, Side, SymbolId};

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
    /// The suspended accounts, in id order.
    pub suspended: Vec<AccountId>,
    /// The accounts created with an external id, and the id, in account order.
    pub external_ids: Vec<(AccountId, u64)>,
    /// The fairness delays set through the log.
    pub fairness: Option<FairnessSetting>,
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
        let suspended = (0..engine.accounts_len() as u32)
            .map(AccountId)
            .filter(|&account| engine.account_suspended(account) == Some(true))
            .collect();
        let external_ids = external_ids_of(engine);
        Summary {
            balances,
            fees,
            supply,
            books,
            orders_resting: engine.orders_resting(),
            suspended,
            external_ids,
            fairness: engine.fairness(),
        }
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
                // Where the book lives now (every account part knows the moves).
                if groups.accounts[0].symbol_group(symbol) == g {
                    *book = engine.depth(symbol, usize::MAX).expect("every part has every symbol");
                }
            }
            orders_resting += engine.orders_resting();
        }
        // Each account's part knows whether it is suspended; the mirrors never are.
        let suspended = (0..first.accounts_len() as u32)
            .map(AccountId)
            .filter(|&account| groups.accounts[groups.map.account_group(account)].suspended(account) == Some(true))
            .collect();
        // Every symbol part's engine created every account, with its external id.
        let external_ids = external_ids_of(first);
        assert!(groups.symbols.iter().all(|part| external_ids_of(part.engine()) == external_ids));
        let fairness = first.fairness();
        assert!(groups.symbols.iter().all(|part| part.engine().fairness() == fairness));
        Summary { balances, fees, supply, books, orders_resting, suspended, external_ids, fairness }
    }
}

/// The accounts of `engine` created with an external id, with it.
fn external_ids_of(engine: &Engine) -> Vec<(AccountId, u64)> {
    (0..engine.accounts_len() as u32)
        .map(AccountId)
        .filter_map(|account| Some((account, engine.account_external_id(account)?)))
        .collect()
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

/// Applies streams to one engine and to the groups ([`Replicated`]) side by side, each command
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
    pub fn translate(&mut self, engine: &mut Engine, groups: &mut Replicated, commands: &[Command]) -> Translated {
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
            let answered = groups.submit(sent.clone()).expect("a stream the groups carry");
            groups.drain();
            let acks = groups.take_acks();
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
