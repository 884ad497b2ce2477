//! Every group as a log and the state machine it builds ([`GroupMachine`]), driven in
//! one thread from a seed, with the faults the log protocol must survive.
//!
//! Each group keeps its committed entries since its last snapshot. A step commits one
//! entry somewhere, picked at random: a run of a group's client input
//! ([`Entry::Clients`]), or a run of one group's outputs to another, read by the
//! consumer's leader from its cursor on ([`Entry::Ingest`]). With faults on, a step may
//! also:
//!
//! - **resend**: an ingest that starts up to four outputs before the consumer's cursor,
//!   as a new leader or a deposed one whose entry committed anyway would send;
//! - **leave a gap**: an ingest that starts past the cursor, which the machine must
//!   refuse whole;
//! - **crash** a group: its state is rebuilt from its snapshot and the log after it,
//!   and must be the state it had (books, balances, exactly-once records, cursors and
//!   the outputs it still keeps), so a restarted replica serves the same outputs;
//! - **snapshot** a group (its encoding must decode to the same state) and compact its
//!   log;
//! - **trim** a source's outputs up to a consumer's cursor ([`Entry::Trim`]);
//! - **overtake**: a client's command committed before the one its client numbered
//!   just ahead of it, which the group must refuse for the gap, and then again after
//!   it (in the same entry, so its stamp and the outcome one engine gives still hold);
//! - **repeat** a client's command already committed, as a retry through a new leader
//!   would: the group must do nothing, and answer with the outcome it gave (once that
//!   outcome is back from the symbol's group).
//!
//! A client's acknowledgement is taken when the entry that produces it is first
//! applied; a replay's are dropped (its client had them, or retries). The harness is
//! the clients' library too: it numbers each client's commands per group
//! ([`Sessions`]) and gives the acknowledgements back the client's own numbers.

use std::collections::VecDeque;

use bourse_engine::command::{Command, CommandBody};
use bourse_engine::{ClientId, EngineConfig, Outcome, Reject, SymbolId, Timestamp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::machine::{Entry, GroupMachine};
use crate::{route, Ack, Groups, Route, Sessions, Summary, Unsupported, CATALOG_GROUP};

/// What the faults did in a run, to show the run exercised them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub entries: u64,
    pub ingests: u64,
    /// Outputs sent again below a consumer's cursor (skipped at apply).
    pub resent: u64,
    /// Ingests refused for a gap.
    pub gaps: u64,
    /// Crashes: state rebuilt from a snapshot and the log, and found equal.
    pub crashes: u64,
    /// Entries replayed by those rebuilds.
    pub replayed: u64,
    pub snapshots: u64,
    /// Outputs dropped by trim entries.
    pub trimmed: u64,
    /// Client commands that overtook their client's previous one: refused for the gap.
    pub overtaken: u64,
    /// Client commands committed again: nothing done.
    pub repeated: u64,
    /// Books moved to another group.
    pub moved: u64,
}

#[derive(Clone, Debug)]
struct Node {
    machine: GroupMachine,
    /// The state before `log[0]`.
    snapshot: GroupMachine,
    log: Vec<Entry>,
}

#[derive(Clone, Debug)]
enum Input {
    Client(Command),
    Tick(Timestamp),
}

/// The partitioned exchange as replicated groups, in one thread (see the module's
/// docs).
#[derive(Clone, Debug)]
pub struct Replicated {
    map: crate::ShardMap,
    nodes: Vec<Node>,
    inputs: Vec<VecDeque<Input>>,
    /// Per group, the last client command committed (to repeat).
    last_command: Vec<Option<Command>>,
    acks: Vec<Ack>,
    sessions: Sessions,
    /// (client, the client's own number) → the number in its session with the group:
    /// a retry goes with the number its first send got.
    numbers: rustc_hash::FxHashMap<(ClientId, u64), u64>,
    /// (group, client, number in the client's session with the group) → the client's
    /// own number.
    numbered: rustc_hash::FxHashMap<(usize, ClientId, u64), u64>,
    rng: ChaCha8Rng,
    faults: bool,
    /// Check the conservation of every asset after every entry.
    checking: bool,
    /// Ticks as the members' fronts give them ([`Replicated::tick_as_members`]), not at
    /// every command's stamp in every group; and the latest stamp given.
    member_ticks: bool,
    latest: Timestamp,
    /// Ticks given with nothing else to commit since the last other progress.
    idle_ticks: u32,
    pub stats: Stats,
}

/// Idle ticks in a row at most ([`Replicated::tick_as_members`]): what watermarks
/// can free is free by then.
const IDLE_TICKS_MAX: u32 = 64;

impl Replicated {
    pub fn new(groups: u32, config: EngineConfig, seed: u64, faults: bool) -> Self {
        Replicated::with_map(crate::ShardMap::new(groups), config, seed, faults)
    }

    /// Groups placed by `map` (say, with a meta group: [`crate::ShardMap::with_meta_group`]).
    pub fn with_map(map: crate::ShardMap, config: EngineConfig, seed: u64, faults: bool) -> Self {
        let Groups { map, accounts, symbols } = Groups::with_map(map, config);
        let nodes = accounts
            .into_iter()
            .zip(symbols)
            .enumerate()
            .map(|(g, (account, symbol))| {
                let machine = GroupMachine::new(g, account, symbol, map.groups());
                Node { snapshot: machine.clone(), machine, log: Vec::new() }
            })
            .collect();
        Replicated {
            map,
            nodes,
            inputs: vec![VecDeque::new(); map.groups()],
            last_command: vec![None; map.groups()],
            acks: Vec::new(),
            sessions: Sessions::default(),
            numbers: Default::default(),
            numbered: Default::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            faults,
            checking: false,
            member_ticks: false,
            latest: 0,
            idle_ticks: 0,
            stats: Stats::default(),
        }
    }

    /// Ticks a group only as a member's front does: never at another group's command,
    /// and, once nothing else is left to commit, while [`GroupMachine::wants_tick`] says
    /// it must (at a stamp past every one given). By default every group ticks at every
    /// command's stamp, which keeps every watermark close to the newest stamp and so
    /// hides what an idle group holds back.
    pub fn tick_as_members(&mut self) {
        self.member_ticks = true;
    }

    /// Checks after every committed entry that every asset is conserved across the
    /// groups ([`Replicated::conservation`]), panicking where it is not.
    pub fn check_each_entry(&mut self) {
        self.checking = true;
    }

    /// Records every trade from now on (the differential tests).
    pub fn record_trades(&mut self) {
        for node in &mut self.nodes {
            node.machine.symbol.record_trades();
            node.snapshot.symbol.record_trades();
        }
    }

    /// Takes in a client's command. A catalog or account command goes, after
    /// everything before it has arrived everywhere, to the catalog's group
    /// ([`CATALOG_GROUP`]) under its client's session there, and its outcome is returned
    /// once every group has applied it (as a member answers it). A close of the day goes
    /// there with nothing drained first: it is a cut at its stamp in every symbol part's
    /// merge, whatever is in flight, and its outcome (the orders expired, summed over
    /// the groups) arrives among [`Replicated::take_acks`] once every group has
    /// reported, as does an order's or a transfer's, queued for its account's group.
    pub fn submit(&mut self, command: Command) -> Result<Option<Outcome>, Unsupported> {
        match route(&self.map, &command.body)? {
            Route::Config if matches!(command.body, CommandBody::CloseDay) => {
                // The catalog's group refuses a close while a book moves; the operator
                // sends it once the move is done.
                while self.nodes[CATALOG_GROUP].machine.moving().next().is_some() {
                    assert!(self.step(), "a move never ended");
                }
                self.queue(command, CATALOG_GROUP);
                Ok(None)
            }
            Route::Config => {
                self.drain();
                let (client, seq) = (command.client, command.seq);
                self.queue(command, CATALOG_GROUP);
                self.drain();
                let answered = self
                    .acks
                    .iter()
                    .position(|ack| (ack.client, ack.seq) == (client, seq) && !ack.repeat)
                    .expect("a catalog command is answered in the catalog's group");
                Ok(Some(self.acks.remove(answered).outcome))
            }
            Route::Account(group) => {
                self.queue(command, group);
                Ok(None)
            }
        }
    }

    /// Has the catalog's group take a move of `symbol`'s book to group `to` now, with
    /// nothing drained first or after: orders in flight on both sides of its cut (see
    /// "Moving a book" in [`crate::machine`]), the book on its way as the other
    /// entries commit. `Err` says why the catalog's group would not take it (a close
    /// of the day queued for it counts as on its way).
    pub fn move_symbol(&mut self, symbol: SymbolId, to: usize) -> Result<(), String> {
        let close_queued = self.inputs[CATALOG_GROUP]
            .iter()
            .any(|input| matches!(input, Input::Client(command) if command.body == CommandBody::CloseDay));
        if close_queued {
            return Err(crate::machine::CLOSE_UNDER_WAY.to_string());
        }
        if let Some(refused) = self.nodes[CATALOG_GROUP].machine.move_refused(symbol, to) {
            return Err(refused);
        }
        self.commit(CATALOG_GROUP, Entry::MoveSymbol { symbol, to }).expect("a move entry is never refused");
        self.stats.moved += 1;
        Ok(())
    }

    /// Queues `command` for `group`, numbered in its client's session there (a retry
    /// with the number its first send got), and a tick at its stamp for every other.
    fn queue(&mut self, command: Command, group: usize) {
        let sessions = &mut self.sessions;
        let number = *self
            .numbers
            .entry((command.client, command.seq))
            .or_insert_with(|| sessions.number(command.client, group));
        self.numbered.insert((group, command.client, number), command.seq);
        let command = Command { seq: number, ..command };
        self.latest = self.latest.max(command.ts);
        for (g, input) in self.inputs.iter_mut().enumerate() {
            if g == group {
                input.push_back(Input::Client(command.clone()));
            } else if !self.member_ticks {
                input.push_back(Input::Tick(command.ts));
            }
        }
    }

    /// Outcomes that arrived since the last call.
    pub fn take_acks(&mut self) -> Vec<Ack> {
        std::mem::take(&mut self.acks)
    }

    /// Commits entries until no group has input or outputs left to ingest.
    pub fn drain(&mut self) {
        while self.step() {}
    }

    /// Commits one entry that makes progress (after a fault, when faults are on); false
    /// when there was none to commit.
    pub fn step(&mut self) -> bool {
        if self.faults {
            self.fault();
        }
        let n = self.nodes.len();
        let mut candidates = Vec::new();
        for g in 0..n {
            if !self.inputs[g].is_empty() {
                candidates.push((g, None));
            }
            for source in (0..n).filter(|&s| s != g) {
                if self.nodes[source].machine.produced(g) > self.nodes[g].machine.cursor(source) {
                    candidates.push((g, Some(source)));
                }
            }
        }
        if candidates.is_empty() && self.member_ticks && self.idle_ticks < IDLE_TICKS_MAX {
            self.idle_ticks += 1;
            let machines: Vec<&GroupMachine> = self.nodes.iter().map(|node| &node.machine).collect();
            if let Some(g) = (0..n).find(|&g| machines[g].wants_tick(&machines)) {
                self.latest += 1;
                self.inputs[g].push_back(Input::Tick(self.latest));
                candidates.push((g, None));
            }
        }
        if candidates.is_empty() {
            return false;
        }
        if candidates
            .iter()
            .any(|&(g, source)| source.is_some() || self.inputs[g].iter().any(|i| matches!(i, Input::Client(_))))
        {
            self.idle_ticks = 0;
        }
        let (group, source) = candidates[self.rng.gen_range(0..candidates.len())];
        match source {
            None => self.input(group),
            Some(source) => self.ingest(group, source),
        }
        true
    }

    /// Commits a run of `group`'s client input (with faults on, overtaken or repeated).
    fn input(&mut self, group: usize) {
        let take = self.rng.gen_range(1..=4).min(self.inputs[group].len());
        let mut commands = Vec::new();
        let mut tick = 0;
        for input in self.inputs[group].drain(..take) {
            match input {
                Input::Client(command) => {
                    tick = tick.max(command.ts);
                    commands.push(command);
                }
                Input::Tick(stamp) => tick = tick.max(stamp),
            }
        }
        let mut expect_gap = None;
        if self.faults && self.rng.gen_range(0..4) == 0 {
            // `b` is the next of `a`'s client, and `a` the next the group expects of it
            // (not a retry of one applied).
            let account = &self.nodes[group].machine.account;
            let next = |a: &Command, b: &Command| {
                a.client == b.client && a.seq + 1 == b.seq && account.session(a.client) + 1 == a.seq
            };
            if let Some(i) = (1..commands.len()).find(|&i| next(&commands[i - 1], &commands[i])) {
                let later = commands[i].clone();
                expect_gap = Some((later.client, later.seq));
                commands.insert(i - 1, later);
                self.stats.overtaken += 1;
            }
        }
        if self.faults && self.rng.gen_range(0..8) == 0 {
            if let Some(repeat) = self.last_command[group].clone() {
                let at = self.rng.gen_range(0..=commands.len());
                commands.insert(at, repeat);
                self.stats.repeated += 1;
            }
        }
        if let Some(last) = commands.last() {
            self.last_command[group] = Some(last.clone());
        }
        let mut gap = None;
        let entry = Entry::Clients { commands, tick };
        self.commit_answering(group, entry, &mut gap).expect("client entries are never refused");
        assert_eq!(gap, expect_gap, "group {group}: the commands refused for a gap");
    }

    /// Commits an ingest of `source`'s outputs into `group`, from its cursor on (or
    /// before it: a resend).
    fn ingest(&mut self, group: usize, source: usize) {
        let cursor = self.nodes[group].machine.cursor(source);
        let mut start = cursor + 1;
        if self.faults && self.rng.gen_range(0..8) == 0 {
            start = start.saturating_sub(self.rng.gen_range(1..=4)).max(1);
        }
        if self.faults && self.rng.gen_range(0..30) == 0 {
            // An ingest past the cursor: refused whole.
            let (from, outputs) = self.nodes[source].machine.outputs(group, cursor + 2, 4);
            if from == cursor + 2 {
                let refused = self.commit(group, Entry::Ingest { source, from, outputs });
                assert!(refused.is_err(), "group {group} applied an ingest that leaves a gap");
                self.stats.gaps += 1;
            }
        }
        let max = self.rng.gen_range(1..=6);
        let (from, outputs) = self.nodes[source].machine.outputs(group, start, max);
        assert!(from <= cursor + 1, "group {source} trimmed outputs group {group} has not applied");
        self.stats.resent += (cursor + 1 - from).min(outputs.len() as u64);
        self.stats.ingests += 1;
        self.commit(group, Entry::Ingest { source, from, outputs }).expect("an ingest from the cursor applies");
    }

    fn commit(&mut self, group: usize, entry: Entry) -> Result<(), crate::machine::Gap> {
        self.commit_answering(group, entry, &mut None)
    }

    /// Commits `entry` to `group`'s log. A client command refused for a gap in its
    /// client's numbers is left out of the answers and put in `gap`.
    fn commit_answering(
        &mut self,
        group: usize,
        entry: Entry,
        gap: &mut Option<(ClientId, u64)>,
    ) -> Result<(), crate::machine::Gap> {
        let node = &mut self.nodes[group];
        let mut acks = Vec::new();
        let applied = node.machine.apply(&entry, &mut acks);
        node.log.push(entry);
        for mut ack in acks {
            if ack.outcome == Outcome::Rejected(Reject::SequenceGap) {
                assert!(gap.replace((ack.client, ack.seq)).is_none(), "group {group}: two commands refused for gaps");
                continue;
            }
            ack.seq = self.numbered[&(group, ack.client, ack.seq)];
            self.acks.push(ack);
        }
        self.stats.entries += 1;
        if self.checking {
            if let Err(broken) = self.conservation() {
                panic!("after entry {} of group {group}: {broken}", self.nodes[group].machine.applied());
            }
        }
        applied
    }

    /// Whether every asset is conserved across the groups at this instant
    /// ([`crate::machine::conservation`]).
    pub fn conservation(&self) -> Result<(), String> {
        let machines: Vec<&GroupMachine> = self.machines().collect();
        crate::machine::conservation(&machines)
    }

    fn fault(&mut self) {
        let n = self.nodes.len();
        let group = self.rng.gen_range(0..n);
        match self.rng.gen_range(0..100) {
            0..=1 => {
                // A crash: the state is lost, and rebuilt from the snapshot and the log.
                let node = &mut self.nodes[group];
                let mut rebuilt = node.snapshot.clone();
                let mut dropped = Vec::new();
                for entry in &node.log {
                    // A refused ingest is refused again.
                    let _ = rebuilt.apply(entry, &mut dropped);
                }
                assert!(
                    rebuilt.same_state(&node.machine),
                    "group {group}: the replay of {} entries after its snapshot rebuilt another state",
                    node.log.len()
                );
                node.machine = rebuilt;
                self.stats.crashes += 1;
                self.stats.replayed += node.log.len() as u64;
            }
            2..=3 => {
                // A snapshot, through its encoding (what a follower would install).
                let node = &mut self.nodes[group];
                let bytes = postcard::to_allocvec(&node.machine).expect("a group machine encodes");
                let decoded: GroupMachine = postcard::from_bytes(&bytes).expect("a group machine decodes");
                assert!(decoded.same_state(&node.machine), "group {group}: its snapshot decodes to another state");
                node.snapshot = node.machine.clone();
                node.log.clear();
                self.stats.snapshots += 1;
            }
            4..=8 if n > 1 => {
                // The source's leader read a consumer's cursor: outputs behind it go.
                let to = (group + self.rng.gen_range(1..n)) % n;
                let upto = self.nodes[to].machine.cursor(group);
                let kept = self.nodes[group].machine.kept_from(to);
                if upto >= kept {
                    self.commit(group, Entry::Trim { to, upto }).expect("a trim entry is never refused");
                    self.stats.trimmed += upto + 1 - kept;
                }
            }
            _ => {}
        }
    }

    /// The groups' parts, as a [`Groups`] (a copy).
    pub fn groups(&self) -> Groups {
        Groups {
            map: self.map,
            accounts: self.nodes.iter().map(|node| node.machine.account.clone()).collect(),
            symbols: self.nodes.iter().map(|node| node.machine.symbol.clone()).collect(),
        }
    }

    /// The exchange's state as one engine would show it. Call after
    /// [`Replicated::drain`].
    pub fn summary(&self) -> Summary {
        Summary::of_groups(&self.groups())
    }

    /// Every group's state machine.
    pub fn machines(&self) -> impl Iterator<Item = &GroupMachine> {
        self.nodes.iter().map(|node| &node.machine)
    }
}
