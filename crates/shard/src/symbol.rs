//! A symbol part: the books of the symbols its group owns, on an unchanged engine.
//!
//! The engine's accounts mirror every account of the exchange (all parts create every
//! account, so ids agree), and between commands a mirror holds exactly what its
//! orders in these books reserve. To apply a forwarded order the part moves the hold
//! it carries into the mirror ([`Engine::transfer_in`]), applies the order as an
//! ordinary command under the part's own client, and moves out whatever the command
//! left available in any mirror ([`Engine::transfer_out`]: a refused order's hold,
//! proceeds of fills, released holds, a market buy's unspent budget), sending each
//! amount back to its account's part as a credit. The transfers change the asset's
//! supply with the balance, so the engine's invariants (and the conservation of every
//! asset between transfers, balances and fees) hold in each part as in one engine.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bourse_engine::command::{Command, CommandBody, OrderKind, Tif};
use bourse_engine::{
    AccountId, Amount, AssetId, BookHandoff, ClientId, Engine, EngineConfig, Event, OrderId, Outcome, Px, Qty, Reject,
    Side, SymbolId, Timestamp,
};

use serde::{Deserialize, Serialize};

use crate::{order_parts, Ack, Forward, Moved, Settlement, ShardMap, Trade, CATALOG_GROUP};

/// The client a symbol part applies its engine's commands as.
const PART_CLIENT: ClientId = ClientId(u64::MAX - 1);
/// Group `g` numbers its orders from `g << ORDER_ID_BITS` on (a trillion ids a group).
pub const ORDER_ID_BITS: u32 = 40;

/// The merge of every account part's forwards into stamp order.
///
/// Each source sends its forwards in increasing stamp order and says how far it has
/// come (its watermark: nothing more at or below it will come). A forward is
/// released once every source's watermark has reached its stamp, in `(stamp,
/// source)` order, so the order released depends on the stamps alone, not on when the
/// messages arrived. A queue per source (already in stamp order) and a scan of their
/// heads: O(sources) a forward, and nothing allocated once the queues have grown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Merge {
    queues: Vec<VecDeque<Forward>>,
    watermarks: Vec<Timestamp>,
    waiting: usize,
}

impl Merge {
    pub fn new(sources: usize) -> Self {
        Merge { queues: vec![VecDeque::new(); sources], watermarks: vec![0; sources], waiting: 0 }
    }

    pub fn offer(&mut self, source: usize, forward: Forward) {
        assert!(
            self.queues[source].back().is_none_or(|last| last.stamp < forward.stamp),
            "source {source} sent stamp {} out of order",
            forward.stamp
        );
        self.advance(source, forward.stamp);
        self.queues[source].push_back(forward);
        self.waiting += 1;
    }

    pub fn advance(&mut self, source: usize, watermark: Timestamp) {
        let mark = &mut self.watermarks[source];
        *mark = (*mark).max(watermark);
    }

    /// How far every source has come: forwards stamped up to here are released.
    pub fn floor(&self) -> Timestamp {
        self.watermarks.iter().copied().min().unwrap_or(0)
    }

    /// The next forward released under `floor`, if any: the lowest stamp among the
    /// queues' heads, the lower source on a tie. It stays (and so does everything
    /// after it) while it needs more of the catalog than `catalog` (see
    /// [`Forward::catalog`]): the order released stays the stamps' alone.
    pub fn pop_ready(&mut self, floor: Timestamp, catalog: u64) -> Option<Forward> {
        self.pop_ready_upto(floor, catalog, None)
    }

    /// [`Merge::pop_ready`], and the next forward stays too while it is stamped past
    /// `cut`: the cut of a move whose book is on its way to this group (every order
    /// stamped past it waits for the book, which brings some of them with it).
    pub fn pop_ready_upto(&mut self, floor: Timestamp, catalog: u64, cut: Option<Timestamp>) -> Option<Forward> {
        let mut best: Option<(Timestamp, usize)> = None;
        for (source, queue) in self.queues.iter().enumerate() {
            if let Some(head) = queue.front() {
                if head.stamp <= floor && best.is_none_or(|(stamp, _)| head.stamp < stamp) {
                    best = Some((head.stamp, source));
                }
            }
        }
        let (_, source) = best?;
        let held = |head: &Forward| head.catalog > catalog || cut.is_some_and(|cut| head.stamp > cut);
        if self.queues[source].front().is_some_and(held) {
            return None;
        }
        self.waiting -= 1;
        self.queues[source].pop_front()
    }

    /// Puts back a forward `source` sent that another group's merge released past a
    /// move's cut (see [`Leaving::relay`]), where its stamp falls in the source's queue.
    pub fn insert(&mut self, source: usize, forward: Forward) {
        let queue = &mut self.queues[source];
        let at = queue.partition_point(|queued| queued.stamp < forward.stamp);
        assert!(
            queue.get(at).is_none_or(|queued| queued.stamp != forward.stamp),
            "source {source} sent stamp {} twice",
            forward.stamp
        );
        queue.insert(at, forward);
        self.waiting += 1;
    }

    /// Forwards waiting for a watermark.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Whether a forward for `symbol` waits here.
    pub fn holds(&self, symbol: SymbolId) -> bool {
        self.queues.iter().flatten().any(|forward| order_parts(&forward.body).is_some_and(|(_, s)| s == symbol))
    }

    /// The holds the waiting forwards carry.
    pub fn funds(&self) -> impl Iterator<Item = (AssetId, Amount)> + '_ {
        self.queues.iter().flatten().filter_map(|forward| forward.fund)
    }
}

/// A book about to leave this group's symbol part.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leaving {
    /// The group it goes to and the move's cut, once this group has applied the move.
    pub to: Option<(usize, Timestamp)>,
    /// The groups whose account parts have applied the move (each says so in its
    /// stream, after every order it sent here before).
    pub passed: BTreeSet<usize>,
    /// Orders of the book stamped past the cut that came here all the same (from a
    /// group that had not applied the move when it sent them), in stamp order as the
    /// merge released them: they go with the book, for the new group to apply in stamp
    /// order with the ones sent there.
    pub relay: Vec<Forward>,
}

impl Leaving {
    /// The holds the relayed orders carry.
    pub fn funds(&self) -> impl Iterator<Item = (AssetId, Amount)> + '_ {
        self.relay.iter().filter_map(|forward| forward.fund)
    }
}

#[derive(Clone, Debug)]
pub struct SymbolPart {
    group: usize,
    map: ShardMap,
    engine: Engine,
    seq: u64,
    pub merge: Merge,
    /// Books leaving this part (see [`Leaving`]).
    pub leaving: BTreeMap<SymbolId, Leaving>,
    /// Books on their way here, with their moves' cuts: every forward stamped past a
    /// cut waits in the merge until the book comes.
    pub arriving: BTreeMap<SymbolId, Timestamp>,
    events: Vec<Event>,
    credits: Vec<(AccountId, AssetId, i64)>,
    /// Orders the command touched, with their owner where the events name it.
    touched: Vec<(OrderId, Option<AccountId>)>,
    /// Every trade, when recording (the differential tests).
    trades: Option<Vec<(Timestamp, Trade)>>,
}

/// A symbol part as a snapshot holds it: the engine as its own snapshot's bytes (the
/// per-command scratch and recorded trades are not state).
#[derive(Serialize, Deserialize)]
struct SymbolImage {
    group: usize,
    map: ShardMap,
    seq: u64,
    merge: Merge,
    leaving: BTreeMap<SymbolId, Leaving>,
    arriving: BTreeMap<SymbolId, Timestamp>,
    #[serde(with = "serde_bytes")]
    engine: Vec<u8>,
}

impl Serialize for SymbolPart {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let image = SymbolImage {
            group: self.group,
            map: self.map,
            seq: self.seq,
            merge: self.merge.clone(),
            leaving: self.leaving.clone(),
            arriving: self.arriving.clone(),
            engine: self.engine.snapshot(),
        };
        image.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SymbolPart {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let image = SymbolImage::deserialize(deserializer)?;
        let engine = Engine::restore(&image.engine).map_err(serde::de::Error::custom)?;
        Ok(SymbolPart {
            group: image.group,
            map: image.map,
            engine,
            seq: image.seq,
            merge: image.merge,
            leaving: image.leaving,
            arriving: image.arriving,
            events: Vec::new(),
            credits: Vec::new(),
            touched: Vec::new(),
            trades: None,
        })
    }
}

impl SymbolPart {
    pub fn new(group: usize, map: ShardMap, config: EngineConfig) -> Self {
        let mut engine = Engine::new(config);
        // Each group numbers its orders in a space of its own, so a book handed to
        // another group brings ids no order there has.
        engine.number_orders_from(1 + ((group as u64) << ORDER_ID_BITS));
        SymbolPart {
            group,
            map,
            engine,
            seq: 0,
            merge: Merge::new(map.groups()),
            leaving: BTreeMap::new(),
            arriving: BTreeMap::new(),
            events: Vec::new(),
            credits: Vec::new(),
            touched: Vec::new(),
            trades: None,
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether the books, mirrors, merge and numbering are `other`'s (the engine's
    /// state hash, the merge's queues and watermarks): what a replay must rebuild.
    pub fn same_state(&self, other: &SymbolPart) -> bool {
        self.group == other.group
            && self.seq == other.seq
            && self.merge == other.merge
            && self.leaving == other.leaving
            && self.arriving == other.arriving
            && self.engine.state_hash() == other.engine.state_hash()
    }

    /// Records every trade from now on.
    pub fn record_trades(&mut self) {
        self.trades.get_or_insert_with(Vec::new);
    }

    /// Every trade since [`SymbolPart::record_trades`], with the stamp of the command
    /// that made it.
    pub fn trades(&self) -> &[(Timestamp, Trade)] {
        self.trades.as_deref().unwrap_or(&[])
    }

    fn apply(&mut self, ts: Timestamp, body: CommandBody) -> Outcome {
        self.seq += 1;
        let before = self.events.len();
        let command = Command { client: PART_CLIENT, seq: self.seq, ts, body };
        let outcome = self.engine.apply(&command, &mut self.events).outcome;
        if outcome != Outcome::Rejected(Reject::SequenceGap) {
            return outcome;
        }
        // The engine forgets a client none of whose commands applied for a day of log
        // time (`client_expiry_secs`), this part's own included when its books were
        // idle that long, and then takes only a first command (seq 1). A refusal leaves
        // nothing behind, so the command goes again as the part's first: at the same
        // point of the log on every replica and replay.
        self.events.truncate(before);
        self.seq = 1;
        self.engine.apply(&Command { seq: 1, ..command }, &mut self.events).outcome
    }

    pub(crate) fn configure(&mut self, stamp: Timestamp, body: &CommandBody) -> Outcome {
        self.events.clear();
        // A catalog command reaches this part when its group ingests it, not where its
        // stamp falls among the orders the merge releases: applied at its own stamp it
        // would move the engine's log time ahead of the orders still to come, and the
        // records they close would read that later time. Past the genesis it applies at
        // the part's own time (nothing it does depends on the time).
        let stamp = match self.engine.ts_last() {
            0 => stamp,
            now => stamp.min(now),
        };
        let body = match *body {
            // A mirror holds no deposit: the account's own part takes it. (A negative one
            // goes as it is, to be refused after the same checks as in one engine.)
            CommandBody::CreateAccountWithId { external_id, asset, deposit } if deposit.0 > 0 => {
                CommandBody::CreateAccountWithId { external_id, asset, deposit: Amount(0) }
            }
            ref other => other.clone(),
        };
        self.apply(stamp, body)
    }

    /// Applies every forward the merge has released, sending what comes back to each
    /// account's group through `out`; `catalog`: the catalog and account commands this
    /// group has applied.
    pub fn release(&mut self, catalog: u64, out: &mut impl FnMut(usize, Settlement)) {
        let floor = self.merge.floor();
        let cut = self.arriving.values().copied().min();
        while let Some(forward) = self.merge.pop_ready_upto(floor, catalog, cut) {
            if let Some(leaving) = self.relayed(&forward) {
                leaving.relay.push(forward);
                continue;
            }
            if forward.body == CommandBody::CloseDay {
                let Outcome::Ok { id: expired } = self.close_day(forward.stamp, out) else {
                    unreachable!("the engine closes a day whenever asked")
                };
                out(CATALOG_GROUP, Settlement::Closed { client: forward.client, seq: forward.seq, expired });
                continue;
            }
            self.process(forward, out);
        }
    }

    /// The leaving book a released forward goes with: an order of it stamped past its
    /// move's cut. (This group has the move before its merge releases anything stamped
    /// past the cut: the catalog's group sends the move before any watermark past it.)
    fn relayed(&mut self, forward: &Forward) -> Option<&mut Leaving> {
        if self.leaving.is_empty() {
            return None;
        }
        let (_, symbol) = order_parts(&forward.body)?;
        self.leaving.get_mut(&symbol).filter(|leaving| leaving.to.is_some_and(|(_, cut)| forward.stamp > cut))
    }

    fn process(&mut self, forward: Forward, out: &mut impl FnMut(usize, Settlement)) {
        let Forward { stamp, client, seq, body, fund, counted, .. } = forward;
        let (account, symbol) = order_parts(&body).expect("only order commands are forwarded");
        assert!(!self.arriving.contains_key(&symbol), "an order of {symbol} applied before its book came");
        let (moved, named) = match body {
            CommandBody::Move { order, .. } => (Some(order), Some(order)),
            CommandBody::Cancel { order, .. } | CommandBody::Reduce { order, .. } => (None, Some(order)),
            _ => (None, None),
        };
        self.events.clear();
        if let Some((asset, amount)) = fund {
            let funded = self.engine.transfer_in(account, asset, amount, &mut self.events);
            assert!(funded.is_ok(), "funding {account} with {amount} of {asset}: {funded:?}");
        }
        let outcome = self.apply(stamp, body);
        self.collect(stamp, account, moved);
        self.sweep(out);
        // The buy orders the command touched, before its outcome: a client that learns
        // an order's id from the outcome finds the order known to its account's part.
        let mut moved_state = None;
        for &(order, known) in &self.touched {
            let open = self.open_buy(symbol, order);
            if moved == Some(order) {
                moved_state = Some(open.map(|(px, qty, _)| (px, qty)));
                continue;
            }
            let state = match open {
                Some((px, qty, holder)) => Settlement::Buy { account: holder, symbol, order, open: Some((px, qty)) },
                None => {
                    // Gone. Its owner is named by the events that traded or placed it,
                    // or it is the command's own (a cancel, a reduce, a self-trade
                    // prevention); or it was another account's stop that this command
                    // triggered and that ended unfilled, whose owner its closed record
                    // keeps (the most recent closed: found at once).
                    let holder = known
                        .or_else(|| {
                            (named != Some(order))
                                .then(|| self.engine.order(order))
                                .flatten()
                                .map(|view| view.record.account)
                        })
                        .unwrap_or(account);
                    Settlement::Buy { account: holder, symbol, order, open: None }
                }
            };
            out(self.map.account_group(state.account().expect("a buy's state names its holder")), state);
        }
        let ack = Ack { client, seq, stamp, outcome, repeat: false };
        let moved = match (moved, counted) {
            (Some(order), true) => Some(Moved { symbol, order, open: moved_state.expect("a move touches its order") }),
            _ => None,
        };
        out(self.map.account_group(account), Settlement::Done { account, ack, moved });
    }

    /// Whatever the command left available in the mirrors goes back to each account's
    /// part as a credit (`credits`, from [`SymbolPart::collect`]).
    fn sweep(&mut self, out: &mut impl FnMut(usize, Settlement)) {
        for i in 0..self.credits.len() {
            let (holder, asset, amount) = self.credits[i];
            let swept = self.engine.transfer_out(holder, asset, Amount(amount), &mut self.events);
            assert!(swept.is_ok(), "sweeping {amount} of {asset} from {holder}: {swept:?}");
            out(self.map.account_group(holder), Settlement::Credit { account: holder, asset, amount: Amount(amount) });
        }
    }

    /// Takes `symbol`'s book out of this part's engine, to hand it to another group.
    pub(crate) fn detach(&mut self, symbol: SymbolId) -> BookHandoff {
        self.engine.detach_book(symbol).expect("only spot books are moved")
    }

    /// Puts a book another group handed over into this part's engine, and the orders of
    /// it that group relayed (stamped past the cut) into the merge among those sent
    /// here: everything that waited past the cut goes on, in stamp order.
    pub(crate) fn attach(&mut self, handoff: BookHandoff, relay: &[Forward]) {
        let symbol = handoff.symbol;
        self.engine.attach_book(handoff).expect("a book moves only to a group whose book of it is empty");
        for forward in relay {
            let (account, _) = order_parts(&forward.body).expect("only orders are relayed");
            self.merge.insert(self.map.account_group(account), forward.clone());
        }
        self.arriving.remove(&symbol);
    }

    /// The close of the day in this part's books, where its merge releases the cut:
    /// every Day order of its symbols expires, as in one engine. The holds released go
    /// back to their accounts' parts, which forget the expired buys. The outcome counts
    /// the orders expired here; the exchange's count is the sum over the groups.
    fn close_day(&mut self, stamp: Timestamp, out: &mut impl FnMut(usize, Settlement)) -> Outcome {
        // The Day buys about to expire, as their accounts' parts know them.
        let expiring: Vec<_> = self
            .engine
            .open_order_records()
            .into_iter()
            .filter(|record| record.tif == Tif::Day && record.side == Side::Buy)
            .map(|record| (record.account, record.symbol, record.id))
            .collect();
        self.events.clear();
        let outcome = self.apply(stamp, CommandBody::CloseDay);
        self.collect_credits();
        self.sweep(out);
        for (account, symbol, order) in expiring {
            out(self.map.account_group(account), Settlement::Buy { account, symbol, order, open: None });
        }
        outcome
    }

    /// A buy order's `(price, quantity left, owner)` while it rests, or while it waits
    /// as a stop-limit (at its limit: once triggered it may rest there); `None` for a
    /// sell or an order that is gone.
    fn open_buy(&self, symbol: bourse_engine::SymbolId, order: OrderId) -> Option<(Px, Qty, AccountId)> {
        if let Some(resting) = self.engine.resting(symbol, order) {
            return (resting.side == Side::Buy).then(|| (resting.px, resting.qty_remaining(), resting.account));
        }
        let request = self.engine.stop_waiting(symbol, order)?;
        match (request.side, request.kind) {
            (Side::Buy, OrderKind::StopLimit { px, .. }) => Some((px, request.qty, request.account)),
            _ => None,
        }
    }

    /// From the command's events: the balances left available in mirrors, and the
    /// orders whose state an account part may need.
    fn collect(&mut self, stamp: Timestamp, account: AccountId, moved: Option<OrderId>) {
        self.collect_credits();
        self.touched.clear();
        let touch =
            |touched: &mut Vec<(OrderId, Option<AccountId>)>, order: OrderId, holder: Option<AccountId>| match touched
                .iter_mut()
                .find(|(id, _)| *id == order)
            {
                Some(entry) => entry.1 = entry.1.or(holder),
                None => touched.push((order, holder)),
            };
        if let Some(order) = moved {
            touch(&mut self.touched, order, Some(account));
        }
        for event in &self.events {
            match *event {
                Event::Accepted { order, account, side: Side::Buy, .. } => {
                    touch(&mut self.touched, order, Some(account))
                }
                Event::Trade { taker_side, maker_order, taker_order, maker_account, taker_account, .. } => {
                    let (buy, buyer) = match taker_side {
                        Side::Buy => (taker_order, taker_account),
                        Side::Sell => (maker_order, maker_account),
                    };
                    touch(&mut self.touched, buy, Some(buyer));
                    if let Some(trades) = &mut self.trades {
                        trades.extend(Trade::of(event).map(|trade| (stamp, trade)));
                    }
                }
                Event::Rested { order, side: Side::Buy, .. }
                | Event::Triggered { order, .. }
                | Event::Refreshed { order, .. }
                | Event::Reduced { order, .. }
                | Event::Cancelled { order, .. } => touch(&mut self.touched, order, None),
                _ => {}
            }
        }
    }

    /// From the command's events: the balances left available in mirrors (the last
    /// balance event of each account and asset), to go back to the account parts.
    fn collect_credits(&mut self) {
        self.credits.clear();
        for event in &self.events {
            if let Event::Balance { account, asset, available, .. } = *event {
                match self.credits.iter_mut().find(|(a, s, _)| (*a, *s) == (account, asset)) {
                    Some(entry) => entry.2 = available.0,
                    None => self.credits.push((account, asset, available.0)),
                }
            }
        }
        self.credits.retain(|&(_, _, available)| available > 0);
    }
}

#[cfg(test)]
mod tests {
    use bourse_engine::command::CommandBody;
    use bourse_engine::{AccountId, ClientId, OrderId, SymbolId};

    use super::Merge;
    use crate::Forward;

    fn forward(stamp: u64) -> Forward {
        let body = CommandBody::Cancel { account: AccountId(0), symbol: SymbolId(0), order: OrderId(stamp) };
        Forward { stamp, client: ClientId(1), seq: stamp, body, fund: None, counted: false, catalog: 0 }
    }

    fn released(merge: &mut Merge) -> Vec<u64> {
        let floor = merge.floor();
        std::iter::from_fn(|| merge.pop_ready(floor, 0)).map(|f| f.stamp).collect()
    }

    #[test]
    fn the_merge_releases_by_stamp_once_every_source_has_passed_it() {
        let mut merge = Merge::new(3);
        merge.offer(1, forward(20));
        merge.offer(0, forward(30));
        merge.offer(1, forward(40));
        // Source 2 has said nothing: nothing may go yet.
        assert_eq!(released(&mut merge), Vec::<u64>::new());
        merge.advance(2, 35);
        assert_eq!(released(&mut merge), [20, 30]);
        assert_eq!(merge.waiting(), 1);
        merge.offer(2, forward(38));
        merge.advance(0, 50);
        // 38 arrived after 40 but goes first; 40 waits until source 2 has passed it.
        assert_eq!(released(&mut merge), [38]);
        merge.advance(2, 45);
        assert_eq!(released(&mut merge), [40]);
        assert_eq!(merge.waiting(), 0);
    }

    #[test]
    fn equal_stamps_go_lower_source_first_whatever_the_arrival() {
        let mut merge = Merge::new(2);
        merge.offer(1, forward(10));
        merge.offer(0, forward(10));
        let floor = merge.floor();
        let first = merge.pop_ready(floor, 0).expect("released");
        assert_eq!(first.stamp, 10);
        assert_eq!(merge.queues[1].len(), 1, "source 0 went first");
    }

    #[test]
    fn a_forward_that_needs_more_of_the_catalog_holds_the_merge_until_it_has_come() {
        let mut merge = Merge::new(2);
        merge.offer(0, Forward { catalog: 3, ..forward(10) });
        merge.offer(1, forward(20));
        merge.advance(0, 30);
        merge.advance(1, 30);
        let floor = merge.floor();
        // The head (stamp 10) names a catalog of 3 commands; this group has applied 2:
        // nothing goes, not even the later forward of the other source.
        assert!(merge.pop_ready(floor, 2).is_none());
        assert_eq!(merge.waiting(), 2);
        assert_eq!(merge.pop_ready(floor, 3).map(|f| f.stamp), Some(10));
        assert_eq!(merge.pop_ready(floor, 3).map(|f| f.stamp), Some(20));
    }

    #[test]
    #[should_panic(expected = "out of order")]
    fn a_source_going_back_in_stamps_is_a_bug_caught() {
        let mut merge = Merge::new(1);
        merge.offer(0, forward(10));
        merge.offer(0, forward(9));
    }
}
