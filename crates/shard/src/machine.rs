//! A group as a replicated state machine: the state its log's entries build, and the
//! messages between groups carried as committed log entries (docs/ARCHITECTURE.md,
//! "Messages between groups are committed log entries").
//!
//! A group's state is a function of its own log alone:
//!
//! - [`Entry::Clients`]: client commands the group's sequencer committed, in stamp
//!   order. The account part applies them; a forward to the group's own symbol part
//!   goes straight into its merge, one to another group becomes an *output*.
//! - [`Entry::Ingest`]: a run of another group's outputs addressed to this one,
//!   numbered. Outputs are numbered per (source, destination) stream from 1, as the
//!   source's entries produce them, so every replica of the source numbers them alike
//!   and any of them can serve them. The consumer keeps, per source, the number of the
//!   last output it applied (its *cursor*): an ingest applies only what lies past the
//!   cursor (a new leader, or a deposed one whose entry committed anyway, may send
//!   again what was applied) and is refused whole if it would leave a gap. Exactly
//!   once, whatever the leaders on either side did.
//! - [`Entry::Trim`]: the source drops the outputs a consumer's cursor has passed
//!   (its leader read the cursor, as it reads any query). Retention is replicated
//!   state, so a snapshot keeps every output not yet consumed, and compacting the log
//!   behind it loses none.
//! - A catalog or account command sent to a running exchange goes to
//!   [`CATALOG_GROUP`] in an [`Entry::Clients`], under its client's session there.
//!   That group applies it and passes it on to every other group as an
//!   [`Output::Config`], which each applies where it stands in that stream: one order
//!   of catalog commands everywhere, so every group numbers assets, symbols and
//!   accounts alike. Every group counts the catalog commands it applied, and a forward
//!   carries its source's count ([`Forward::catalog`]): the symbol part holds it in its
//!   merge until it has applied as many, so an order never reaches a group that has
//!   not yet heard of its account or symbol.
//!
//! **The close of the day** is a cut across the groups at a stamp. The operator sends
//! it to [`CATALOG_GROUP`] like a catalog command; that group stamps it in its
//! [`Entry::Clients`] and sends it to every symbol part's merge, its own included, as a
//! forward (in its stream to each group, after every order it sent there before). Each
//! merge releases it in stamp order like any forward, once every source's watermark has
//! passed its stamp: after every order stamped before it and before every order stamped
//! after, whichever group those came from, which is where one engine fed the same
//! stamped input applies it. There the part expires its books' Day orders (the holds go
//! back to their accounts' parts) and reports how many to the catalog's group
//! ([`Settlement::Closed`]), which answers the operator with the sum once every group
//! has reported. The catalog's group refuses a close while a book moves
//! ([`Reject::BookMoving`]) and a move while a close is on its way, so no book is
//! between two groups when a merge takes the cut.
//!
//! **Moving a book.** [`Entry::MoveSymbol`] on [`CATALOG_GROUP`] moves a symbol's book to
//! another group, one book at a time; the catalog's group passes it on
//! ([`Output::Move`]) and every group counts it as a catalog command. The move is a cut
//! at the catalog's group's last stamp: the old group applies the book's orders stamped
//! at or below it, the new group those stamped past it, each in its merge's stamp
//! order, which is where one engine fed the same stamped input applies each. Where a
//! group's log applies the move, it routes the symbol's orders past the cut to the new
//! group (those at or below it still to the old one) and tells the old group
//! ([`Output::Passed`], after every order it sent there). A group that has not heard
//! yet sends the old group orders stamped past the cut too: the old group's merge
//! releases them in stamp order and keeps them aside ([`crate::Leaving::relay`]). Once
//! every group has passed the move, its merge has passed the cut and none of the
//! symbol's orders waits there, the old group hands the book over with those orders
//! ([`Output::Handoff`]: orders, stops, records, holds, as of the cut). The new group
//! holds every forward stamped past the cut until the book comes, puts the relayed
//! orders into its merge where their stamps fall, then tells the catalog's group
//! ([`Output::Arrived`]), which may move a book again. Each order of the symbol is
//! applied by exactly one of the two groups.
//!
//! Restoring a snapshot and replaying the log after it rebuilds the same state and the
//! same outputs (the outputs are state too), which the harness in
//! [`crate::Replicated`] checks at every crash it simulates.

use std::collections::{BTreeSet, VecDeque};

use bourse_engine::command::{Command, CommandBody};
use bourse_engine::{Amount, AssetId, BookHandoff, Outcome, Reject, SymbolId, Timestamp};
use serde::{Deserialize, Serialize};

use crate::account::Step;
use crate::{order_parts, route, AccountPart, Ack, Forward, Route, Settlement, SymbolPart, CATALOG_GROUP};

/// How the catalog's group says it refuses a move because a close of the day is on its
/// way ([`GroupMachine::move_refused`]): the mover may send it again once that is done.
pub const CLOSE_UNDER_WAY: &str = "a close of the day is on its way";

/// What one group sends another, numbered in their stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Output {
    /// An order command for the destination's symbol part.
    Forward(Forward),
    /// The source will send no forward stamped at or below this.
    Watermark(Timestamp),
    /// What a symbol part sends back to an account part.
    Settlement(Settlement),
    /// A catalog or account command [`CATALOG_GROUP`] applied (and accepted), for the
    /// destination to apply in the order sent.
    Config { stamp: Timestamp, body: CommandBody },
    /// A move of `symbol`'s book to group `to` that [`CATALOG_GROUP`] applied, for the
    /// destination to apply in the order sent (it counts as a catalog command); `cut`:
    /// orders stamped past it are the new group's to apply, the others the old's.
    Move { symbol: SymbolId, to: usize, cut: Timestamp },
    /// To the group `symbol`'s book is leaving: the source has applied the move, and
    /// sent every order of it before this.
    Passed { symbol: SymbolId },
    /// The book itself, with what its orders hold, to the group it moves to, as it
    /// stands at the move's cut; with the orders of it stamped past the cut that came to
    /// the old group all the same ([`crate::Leaving::relay`]).
    Handoff { book: BookHandoff, relay: Vec<Forward> },
    /// To [`CATALOG_GROUP`]: `symbol`'s book has come to the source; it may move again.
    Arrived { symbol: SymbolId },
}

impl Output {
    /// The amounts it carries: a forward's hold, a credit, a handed-over book's holds.
    pub fn funds(&self) -> impl Iterator<Item = (AssetId, Amount)> + '_ {
        let (one, book) = match self {
            Output::Forward(forward) => (forward.fund, None),
            Output::Settlement(Settlement::Credit { asset, amount, .. }) => (Some((*asset, *amount)), None),
            Output::Handoff { book, relay } => (None, Some((book, relay))),
            _ => (None, None),
        };
        let book = book
            .into_iter()
            .flat_map(|(book, relay)| book.funds().chain(relay.iter().filter_map(|forward| forward.fund)));
        one.into_iter().chain(book)
    }
}

/// One entry of a group's log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Entry {
    /// Client commands routed to this group's accounts, in stamp order; no client
    /// command stamped at or below `tick` comes after them.
    Clients { commands: Vec<Command>, tick: Timestamp },
    /// `source`'s outputs to this group numbered `from`, `from + 1`, ….
    Ingest { source: usize, from: u64, outputs: Vec<Output> },
    /// Drop the outputs to `to` numbered up to `upto`: `to` has applied them.
    Trim { to: usize, upto: u64 },
    /// Move `symbol`'s book to group `to` (see "Moving a book" in the module's docs):
    /// applied by [`CATALOG_GROUP`] only, and only where [`GroupMachine::move_refused`]
    /// finds nothing against it (elsewhere, or refused, it does nothing).
    MoveSymbol { symbol: SymbolId, to: usize },
}

/// An ingest that would leave a gap in its source's stream: refused, nothing applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub source: usize,
    /// The next number the group can apply from `source`.
    pub expected: u64,
    pub from: u64,
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an ingest from group {} starts at output {}, past {}: a gap", self.source, self.from, self.expected)
    }
}

impl std::error::Error for Gap {}

/// The outputs to one destination still kept: numbers `trimmed + 1` on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Outbox {
    trimmed: u64,
    outputs: VecDeque<Output>,
}

impl Outbox {
    /// The number the next output will get.
    fn next(&self) -> u64 {
        self.trimmed + self.outputs.len() as u64 + 1
    }
}

/// A group's replicated state: its account part and symbol part, its cursor into every
/// other group's stream, and its outputs not yet trimmed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GroupMachine {
    group: usize,
    pub account: AccountPart,
    pub symbol: SymbolPart,
    cursors: Vec<u64>,
    outboxes: Vec<Outbox>,
    /// The last stamp given to a client command, or the last tick if later: after each
    /// client entry, the watermark every symbol part has from this group.
    stamped: Timestamp,
    /// Entries applied (refused ingests included): the log index reached.
    applied: u64,
    /// Catalog and account commands applied and accepted, by whichever way they came.
    catalog: u64,
    /// On [`CATALOG_GROUP`]: symbols whose books are moving (until they have arrived).
    moving: BTreeSet<SymbolId>,
    /// Books handed to this group by another so far.
    received: u64,
    /// Orders of moved books the old group relayed here with them (stamped past a cut
    /// but sent there), and orders this group sent a book's old group after it applied
    /// the move (stamped at or below the cut): the two sides of a move's cut.
    relayed: u64,
    behind_cut: u64,
}

impl GroupMachine {
    pub fn new(group: usize, account: AccountPart, symbol: SymbolPart, groups: usize) -> Self {
        GroupMachine {
            group,
            account,
            symbol,
            cursors: vec![0; groups],
            outboxes: vec![Outbox::default(); groups],
            stamped: 0,
            applied: 0,
            relayed: 0,
            behind_cut: 0,
            catalog: 0,
            moving: BTreeSet::new(),
            received: 0,
        }
    }

    /// Books handed to this group by another so far.
    pub fn books_received(&self) -> u64 {
        self.received
    }

    /// Orders that crossed a move's cut the slow way: `(relayed here with a book, sent
    /// from here to a book's old group after this group applied the move)`.
    pub fn cut_crossings(&self) -> (u64, u64) {
        (self.relayed, self.behind_cut)
    }

    /// Why a move of `symbol`'s book to group `to` would not be taken (asked of the
    /// catalog's group, as it stands), or `None`.
    pub fn move_refused(&self, symbol: SymbolId, to: usize) -> Option<String> {
        if self.group != CATALOG_GROUP {
            return Some(format!("moves go to group {CATALOG_GROUP}, which orders them for every group"));
        }
        let engine = self.symbol.engine();
        if engine.symbol_spec(symbol).is_none() {
            return Some(format!("no symbol {symbol}"));
        }
        if engine.symbol_margin(symbol).is_some() {
            return Some(format!("symbol {symbol} is a margin symbol"));
        }
        if to >= self.groups() {
            return Some(format!("no group {to} (the exchange has {})", self.groups()));
        }
        if !self.account.map().holds_data(to) {
            return Some(format!("group {to} is the meta group: it holds no book"));
        }
        if self.moving.contains(&symbol) {
            return Some(format!("symbol {symbol}'s book is moving already"));
        }
        if let Some(other) = self.moving.iter().next() {
            // Two at once could wait on each other: each new group holds everything
            // stamped past its cut, orders the other old group must still relay.
            return Some(format!("symbol {other}'s book is moving; move {symbol}'s once it has come"));
        }
        if self.account.closes_pending() > 0 {
            return Some(format!("{CLOSE_UNDER_WAY} through the groups; move the book once it is done"));
        }
        let at = self.account.symbol_group(symbol);
        (at == to).then(|| format!("symbol {symbol} lives in group {to} already"))
    }

    /// Whether this group's watermark is below the cut of a move it applied. The book's
    /// old group hands it over only once every group's watermark has passed the cut (no
    /// order stamped at or below it can come any more), so a group behind it must tick
    /// past it whether or not commands come: an idle one would hold the book back for
    /// good.
    pub fn behind_a_cut(&self) -> bool {
        self.account.latest_cut().is_some_and(|cut| cut > self.stamped)
    }

    /// Whether this group's front must tick, commands or none (the members' fronts and
    /// [`crate::Replicated::tick_as_members`] ask): forwards wait in its own merge or in
    /// another group's (`groups`, every group's machine, this one's included) for
    /// watermarks, or a move's handoff waits for this group's
    /// ([`GroupMachine::behind_a_cut`]).
    pub fn wants_tick(&self, groups: &[&GroupMachine]) -> bool {
        self.symbol.merge.waiting() > 0
            || self.behind_a_cut()
            || groups.iter().any(|other| other.group != self.group && other.symbol.merge.waiting() > 0)
    }

    /// Symbols whose books are moving (as the catalog's group knows them).
    pub fn moving(&self) -> impl Iterator<Item = SymbolId> + '_ {
        self.moving.iter().copied()
    }

    /// The groups of the exchange.
    pub fn groups(&self) -> usize {
        self.cursors.len()
    }

    /// The catalog and account commands this group has applied.
    pub fn catalog(&self) -> u64 {
        self.catalog
    }

    pub fn group(&self) -> usize {
        self.group
    }

    /// Entries applied so far.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// The number of the last output of `source` this group applied.
    pub fn cursor(&self, source: usize) -> u64 {
        self.cursors[source]
    }

    /// The number of the last output produced for `to` (0 before the first).
    pub fn produced(&self, to: usize) -> u64 {
        self.outboxes[to].next() - 1
    }

    /// The number of the first output to `to` still kept.
    pub fn kept_from(&self, to: usize) -> u64 {
        self.outboxes[to].trimmed + 1
    }

    /// Up to `max` outputs to `to` numbered from `from` (raised to the first kept), and
    /// the number of the first one returned.
    pub fn outputs(&self, to: usize, from: u64, max: usize) -> (u64, Vec<Output>) {
        let outbox = &self.outboxes[to];
        let from = from.max(outbox.trimmed + 1);
        let skip = (from - outbox.trimmed - 1) as usize;
        (from, outbox.outputs.iter().skip(skip).take(max).cloned().collect())
    }

    /// The outputs to `to` numbered past `after` (its cursor), still kept.
    pub fn outputs_past(&self, to: usize, after: u64) -> impl Iterator<Item = &Output> + '_ {
        let outbox = &self.outboxes[to];
        outbox.outputs.iter().skip(after.saturating_sub(outbox.trimmed) as usize)
    }

    /// The amounts on their way to `to` in outputs numbered past `after` (its cursor):
    /// holds that forwards carry, and credits.
    pub fn in_flight(&self, to: usize, after: u64) -> impl Iterator<Item = (AssetId, Amount)> + '_ {
        let outbox = &self.outboxes[to];
        assert!(after >= outbox.trimmed, "outputs to group {to} trimmed past its cursor");
        outbox.outputs.iter().skip((after - outbox.trimmed) as usize).flat_map(Output::funds)
    }

    /// Every output to `to` not yet taken, and the number of the first: what a consumer
    /// that never needs a resend (a thread of the in-process pipeline) ingests. They are
    /// trimmed at once.
    pub fn take_outputs(&mut self, to: usize) -> (u64, Vec<Output>) {
        let outbox = &mut self.outboxes[to];
        let from = outbox.trimmed + 1;
        outbox.trimmed += outbox.outputs.len() as u64;
        (from, outbox.outputs.drain(..).collect())
    }

    /// Whether the state (parts, cursors, outputs kept) is the same as `other`'s: what
    /// a replay must rebuild.
    pub fn same_state(&self, other: &GroupMachine) -> bool {
        self.group == other.group
            && self.account == other.account
            && self.symbol.same_state(&other.symbol)
            && self.cursors == other.cursors
            && self.outboxes == other.outboxes
            && self.stamped == other.stamped
            && self.applied == other.applied
            && self.catalog == other.catalog
            && self.moving == other.moving
            && self.received == other.received
            && self.relayed == other.relayed
            && self.behind_cut == other.behind_cut
    }

    /// Applies one committed entry, appending the client acknowledgements it produces to
    /// `acks`. A refused ingest changes nothing but the count of entries applied.
    pub fn apply(&mut self, entry: &Entry, acks: &mut Vec<Ack>) -> Result<(), Gap> {
        self.applied += 1;
        match entry {
            Entry::Clients { commands, tick } => {
                let before = self.stamped;
                for command in commands {
                    self.client(command, acks);
                }
                // The group's watermark: every symbol part hears when it moves.
                self.stamped = self.stamped.max(*tick);
                if self.stamped > before {
                    for (to, outbox) in self.outboxes.iter_mut().enumerate() {
                        if to != self.group {
                            outbox.outputs.push_back(Output::Watermark(self.stamped));
                        }
                    }
                }
                self.symbol.merge.advance(self.group, self.stamped);
            }
            Entry::Ingest { source, from, outputs } => {
                let expected = self.cursors[*source] + 1;
                if *from > expected {
                    return Err(Gap { source: *source, expected, from: *from });
                }
                let skip = (expected - from) as usize;
                for output in outputs.iter().skip(skip) {
                    match output {
                        Output::Forward(forward) => self.symbol.merge.offer(*source, forward.clone()),
                        Output::Watermark(stamp) => self.symbol.merge.advance(*source, *stamp),
                        Output::Settlement(settlement) => {
                            if let Some(ack) = self.account.settle(*settlement) {
                                acks.push(ack);
                            }
                        }
                        Output::Config { stamp, body } => {
                            self.configure(*stamp, body);
                        }
                        Output::Move { symbol, to, cut } => self.apply_move(*symbol, *to, *cut),
                        Output::Passed { symbol } => {
                            self.symbol.leaving.entry(*symbol).or_default().passed.insert(*source);
                        }
                        Output::Handoff { book, relay } => {
                            let symbol = book.symbol;
                            self.symbol.attach(book.clone(), relay);
                            self.received += 1;
                            self.relayed += relay.len() as u64;
                            self.arrived(symbol);
                        }
                        Output::Arrived { symbol } => {
                            self.moving.remove(symbol);
                        }
                    }
                }
                if outputs.len() > skip {
                    self.cursors[*source] = from + outputs.len() as u64 - 1;
                }
            }
            Entry::Trim { to, upto } => {
                let outbox = &mut self.outboxes[*to];
                while outbox.trimmed < *upto && outbox.outputs.pop_front().is_some() {
                    outbox.trimmed += 1;
                }
            }
            Entry::MoveSymbol { symbol, to } => {
                if self.move_refused(*symbol, *to).is_none() {
                    // The cut: the last stamp this group gave. Every group hears of the
                    // move before this group's next watermark, which passes it.
                    let cut = self.stamped;
                    self.moving.insert(*symbol);
                    self.apply_move(*symbol, *to, cut);
                    for (g, outbox) in self.outboxes.iter_mut().enumerate() {
                        if g != self.group {
                            outbox.outputs.push_back(Output::Move { symbol: *symbol, to: *to, cut });
                        }
                    }
                }
            }
        }
        self.release(acks);
        Ok(())
    }

    /// A move of `symbol`'s book to group `to`, where this group's log has it: orders of
    /// it go to `to` from here on. The group the book leaves hears that this one has
    /// passed the move (after every order this group sent it before); the group it
    /// goes to holds its orders until the book comes.
    fn apply_move(&mut self, symbol: SymbolId, to: usize, cut: Timestamp) {
        let from = self.account.symbol_group(symbol);
        self.catalog += 1;
        if from == to {
            return;
        }
        self.account.place(symbol, to, cut);
        if from == self.group {
            let leaving = self.symbol.leaving.entry(symbol).or_default();
            leaving.to = Some((to, cut));
            leaving.passed.insert(self.group);
        } else {
            self.outboxes[from].outputs.push_back(Output::Passed { symbol });
        }
        if to == self.group {
            self.symbol.arriving.insert(symbol, cut);
        }
    }

    /// `symbol`'s book came here: the catalog's group hears it.
    fn arrived(&mut self, symbol: SymbolId) {
        if self.group == CATALOG_GROUP {
            self.moving.remove(&symbol);
        } else {
            self.outboxes[CATALOG_GROUP].outputs.push_back(Output::Arrived { symbol });
        }
    }

    /// Hands over every leaving book that stands at its move's cut and gets no more
    /// orders: every source has passed the move (no order of it comes here unless
    /// stamped at or below the cut), the merge has passed the cut (no such order comes
    /// any more), and none of its orders still waits in the merge (each was applied, or
    /// is relayed).
    fn hand_off(&mut self) {
        let groups = self.groups();
        let floor = self.symbol.merge.floor();
        let ready: Vec<(SymbolId, usize)> = self
            .symbol
            .leaving
            .iter()
            .filter_map(|(&symbol, leaving)| {
                let (to, cut) = leaving.to?;
                (leaving.passed.len() == groups && floor >= cut && !self.symbol.merge.holds(symbol))
                    .then_some((symbol, to))
            })
            .collect();
        for (symbol, to) in ready {
            let relay = self.symbol.leaving.remove(&symbol).map(|leaving| leaving.relay).unwrap_or_default();
            let book = self.symbol.detach(symbol);
            self.outboxes[to].outputs.push_back(Output::Handoff { book, relay });
        }
    }

    /// Applies a catalog or account command in both parts, and counts it when accepted.
    fn configure(&mut self, stamp: Timestamp, body: &CommandBody) -> Outcome {
        let outcome = self.symbol.configure(stamp, body);
        if let Outcome::Ok { id } = outcome {
            self.account.configure(body, id).expect("config entries carry catalog and account commands");
            self.catalog += 1;
        }
        outcome
    }

    /// A client command, stamped with its gateway stamp, or just past the last stamp
    /// this group gave when it comes later (a retry through a new leader after a later
    /// tick): the group's stream of stamps never goes back, which the merges downstream
    /// rely on. A retry of an applied command (answered with its outcome when the
    /// session has it) and one refused for a gap in its client's numbers take no stamp:
    /// they do nothing.
    fn client(&mut self, command: &Command, acks: &mut Vec<Ack>) {
        let stamp = command.ts.max(self.stamped + 1);
        let step = if let Ok(Route::Config) = route(&self.account.map(), &command.body) {
            if self.group != CATALOG_GROUP {
                // Refused before the log (members send these to the catalog's group); one
                // that reaches this log anyway does nothing here.
                return;
            }
            match self.account.retry_or_gap(command.client, command.seq, stamp) {
                Some(step) => step,
                None if command.body == CommandBody::CloseDay => match self.close_day(command, stamp) {
                    Some(refused) => refused,
                    None => {
                        self.stamped = stamp;
                        return;
                    }
                },
                None => {
                    let outcome = self.configure(stamp, &command.body);
                    if matches!(outcome, Outcome::Ok { .. }) {
                        for (to, outbox) in self.outboxes.iter_mut().enumerate() {
                            if to != self.group {
                                outbox.outputs.push_back(Output::Config { stamp, body: command.body.clone() });
                            }
                        }
                    }
                    self.account.record(command.client, command.seq, stamp, Some(outcome));
                    Step::Done(outcome)
                }
            }
        } else {
            self.account.client(command.client, command.seq, stamp, &command.body).expect("routed commands are carried")
        };
        let ack = |outcome| Ack { client: command.client, seq: command.seq, stamp, outcome, repeat: false };
        match step {
            Step::Duplicate => return,
            Step::Repeat(outcome) => {
                acks.push(Ack { repeat: true, ..ack(outcome) });
                return;
            }
            Step::Gap => {
                acks.push(ack(Outcome::Rejected(Reject::SequenceGap)));
                return;
            }
            Step::Done(outcome) => acks.push(ack(outcome)),
            Step::Forward(to, mut forward) => {
                forward.catalog = self.catalog;
                if let Some((_, symbol)) = order_parts(&forward.body) {
                    self.behind_cut += u64::from(to != self.account.symbol_group(symbol));
                }
                if to == self.group {
                    self.symbol.merge.offer(self.group, forward);
                } else {
                    self.outboxes[to].outputs.push_back(Output::Forward(forward));
                }
            }
        }
        self.stamped = stamp;
    }

    /// The operator's close of the day, at `stamp`, on the catalog's group: refused
    /// while a book moves; else the cut goes to every symbol part's merge as a forward,
    /// and the command waits for every group's report ([`Settlement::Closed`]); `None`
    /// then, the refusal's step otherwise.
    fn close_day(&mut self, command: &Command, stamp: Timestamp) -> Option<Step> {
        if !self.moving.is_empty() {
            let outcome = Outcome::Rejected(Reject::BookMoving);
            self.account.record(command.client, command.seq, stamp, Some(outcome));
            return Some(Step::Done(outcome));
        }
        self.account.record(command.client, command.seq, stamp, None);
        self.account.closing(command.client, command.seq, stamp);
        let cut = Forward {
            stamp,
            client: command.client,
            seq: command.seq,
            body: CommandBody::CloseDay,
            fund: None,
            counted: false,
            catalog: self.catalog,
        };
        for (to, outbox) in self.outboxes.iter_mut().enumerate() {
            if to != self.group {
                outbox.outputs.push_back(Output::Forward(cut.clone()));
            }
        }
        self.symbol.merge.offer(self.group, cut);
        None
    }

    /// Applies what the merge releases; settlements for this group's accounts apply at
    /// once, the others become outputs.
    fn release(&mut self, acks: &mut Vec<Ack>) {
        let GroupMachine { group, account, symbol, outboxes, catalog, .. } = self;
        symbol.release(*catalog, &mut |to, settlement: Settlement| {
            acks.extend(settle_or_send(*group, account, outboxes, to, settlement));
        });
        if !self.symbol.leaving.is_empty() {
            self.hand_off();
        }
    }
}

/// A settlement for group `to`: applied at once when that is this group (`group`), or
/// an output to it. Returns the acknowledgement it completes, if any.
fn settle_or_send(
    group: usize,
    account: &mut AccountPart,
    outboxes: &mut [Outbox],
    to: usize,
    settlement: Settlement,
) -> Option<Ack> {
    if to == group {
        account.settle(settlement)
    } else {
        outboxes[to].outputs.push_back(Output::Settlement(settlement));
        None
    }
}

/// Whether every asset is conserved across the groups (`machines[g]` is group `g`'s):
/// what entered through the account parts (deposits and credits less withdrawals)
/// equals what the account parts hold available, plus what the symbol parts' engines
/// hold (their supply: what orders reserve in the mirrors, and fees), plus what is on
/// its way (holds in forwards and credits in outputs past their consumer's cursor,
/// holds in forwards waiting in a merge).
pub fn conservation(machines: &[&GroupMachine]) -> Result<(), String> {
    let assets = machines.first().map_or(0, |machine| machine.account.issued().len());
    let mut entered = vec![0i128; assets];
    let mut held = vec![0i128; assets];
    for (g, machine) in machines.iter().enumerate() {
        for (asset, issued) in machine.account.issued().iter().enumerate() {
            entered[asset] += issued;
        }
        for ((_, asset), available) in machine.account.balances() {
            held[asset.0 as usize] += i128::from(available);
        }
        let engine = machine.symbol.engine();
        for (asset, held) in held.iter_mut().enumerate() {
            *held += i128::from(engine.asset_info(AssetId(asset as u32)).map_or(0, |info| info.supply.0));
        }
        let mut on_the_way = |(asset, amount): (AssetId, Amount)| held[asset.0 as usize] += i128::from(amount.0);
        machine.symbol.merge.funds().for_each(&mut on_the_way);
        machine.symbol.leaving.values().flat_map(|leaving| leaving.funds()).for_each(&mut on_the_way);
        for (to, consumer) in machines.iter().enumerate().filter(|&(to, _)| to != g) {
            let cursor = consumer.cursor(g);
            if cursor + 1 < machine.kept_from(to) {
                // These states are not of one instant (a replica behind the others).
                return Err(format!("group {g} trimmed its outputs to group {to} past that group's cursor ({cursor})"));
            }
            machine.in_flight(to, cursor).for_each(&mut on_the_way);
        }
    }
    match (0..assets).find(|&asset| entered[asset] != held[asset]) {
        None => Ok(()),
        Some(asset) => Err(format!(
            "asset {asset}: {} entered, {} held across the groups and on the way",
            entered[asset], held[asset]
        )),
    }
}
