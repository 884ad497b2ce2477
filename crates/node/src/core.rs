//! The core thread: the one place commands are sequenced, logged and applied.
//!
//! Loop: take a batch of requests from the bounded queue (client command batches,
//! queries, shutdown); for each well-shaped command stamp the leader timestamp (never
//! earlier than the last one, across restarts), give it the next log index, apply it
//! to the engine, and turn its outcome and events into outputs (acks, fill and cancel
//! reports, market data, query answers); hand the batch's entries to the group commit
//! and park the outputs in [`crate::outbox::Pending`] until the group commit reports
//! their index durable. The engine thus runs ahead of the disk, but nothing it produced
//! leaves the node before the command behind it is on disk: a crash loses only
//! commands nobody was told about.
//!
//! Invariants: log indexes are consecutive and assigned only here (the group commit
//! numbers entries in queue order and this thread is its only producer); outputs are
//! released in index order; an I/O error in the journal stops the node (a node that
//! stops beats one whose state ran ahead of a log it can no longer write).

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};

use bourse_cluster::state_machine::{Committed, MachineRequest};
use bourse_cluster::Batch;
use bourse_engine::command::{Command, CommandBody};
use bourse_engine::daytrading::DtRequest;
use bourse_engine::{codec, AccountId, ClientId, Engine, Event, OrderId, OrderStatus, Side, SymbolId};
use bourse_journal::{GroupCommitHandle, Proposal};
use bourse_protocol::convert::{self, ConvertError, LogPosition};
use bourse_protocol::feed::FeedBuilder;
use bourse_protocol::proto;
use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, oneshot};

use crate::config::NodeConfig;
use crate::metrics::Metrics;
use crate::outbox::{Broadcasts, ClientItem, FeedItem, FeedStart, Output, Pending};
use crate::query::{answer, QueryAnswer, QueryRequest};

/// Where an ack goes.
pub enum Reply {
    /// To the client's order-entry session, if one is connected.
    Session,
    /// To a unary Admin.Submit caller.
    Unary(oneshot::Sender<proto::Ack>),
}

/// What the core is asked to do.
pub enum Request {
    /// One client batch: `(seq, command or why its shape is wrong)` in the client's order.
    Commands {
        client: ClientId,
        items: Vec<(u64, Result<CommandBody, ConvertError>)>,
        reply: Reply,
    },
    Query {
        query: QueryRequest,
        reply: oneshot::Sender<QueryAnswer>,
    },
    /// The client closed its side of a session: end it once the acks before are out.
    EndSession {
        client: ClientId,
        session: u64,
    },
    /// From the Raft state machine: apply committed entries, snapshot, install.
    Machine(MachineRequest),
    /// This node stopped leading, or Raft refused a proposal while leadership moved:
    /// unary waiters are let go (they hear UNAVAILABLE and retry where the leader is; a
    /// command of theirs that still commits is answered to the retry as a duplicate).
    Deposed,
    /// A gateway's feed starts: the books now, then every entry after.
    Feed {
        reply: oneshot::Sender<FeedStart>,
    },
    /// The last applied index and the state hash there.
    Status {
        reply: oneshot::Sender<(u64, [u8; 32])>,
    },
    /// Runs a function on the engine as applied so far, with the last applied index (a
    /// single node: not necessarily durable yet), in queue order: for a caller that must
    /// look at the state itself, as the simulator's checks do. Nothing outside the
    /// process can send it.
    Inspect(Inspection),
    /// Finish the current batch, then stop.
    Shutdown,
}

/// A function run on the engine and its last applied index ([`Request::Inspect`]).
pub type Inspection = Box<dyn FnOnce(&Engine, u64) + Send>;

/// How commands get their place in the log.
pub enum Sequencer {
    /// Single node: the core numbers, applies and logs each command itself; outputs wait
    /// for the journal's fdatasync.
    Journal(GroupCommitHandle),
    /// Replicated: the leader's core stamps commands and proposes them to Raft in
    /// batches; they are applied when the state machine hands them back committed, on
    /// every replica alike, and their outputs go out at once (committed = durable on a
    /// majority).
    Raft(Replica),
}

/// The core's side of Raft.
pub struct Replica {
    /// To the proposer task, which hands each batch to Raft in order. Unbounded so the
    /// core never blocks on Raft while Raft waits for the core to apply; what is queued
    /// is bounded by the clients' in-flight windows (each session is read only as fast
    /// as the core takes its batches).
    pub proposer: mpsc::UnboundedSender<Batch>,
    /// Whether this node leads now (kept by the leadership watcher).
    pub leader: Arc<AtomicBool>,
}

impl Request {
    /// Whether its sender counted it in `queue_depth` (the services' requests; not the
    /// state machine's, leadership's, shutdown's or an inspection).
    fn counted(&self) -> bool {
        !matches!(self, Request::Machine(_) | Request::Deposed | Request::Shutdown | Request::Inspect(_))
    }

    fn commands_len(&self) -> usize {
        match self {
            Request::Commands { items, .. } => items.len(),
            _ => 1,
        }
    }
}

/// Counts of the current batch, added to the shared metrics once per batch.
#[derive(Default)]
struct Counts {
    applied: u64,
    rejected: u64,
    duplicate: u64,
    refused_shape: u64,
}

impl Counts {
    fn publish(&mut self, metrics: &Metrics) {
        use std::sync::atomic::Ordering::Relaxed;
        metrics.commands_applied.fetch_add(self.applied, Relaxed);
        metrics.commands_rejected.fetch_add(self.rejected, Relaxed);
        metrics.commands_duplicate.fetch_add(self.duplicate, Relaxed);
        metrics.commands_refused_shape.fetch_add(self.refused_shape, Relaxed);
        *self = Counts::default();
    }
}

/// Who placed an open order, for routing its fills and cancellation.
#[derive(Clone, Copy)]
struct Owner {
    client: ClientId,
    account: AccountId,
    symbol: SymbolId,
}

/// The best bid and offer last published for a symbol.
type Bbo = (Option<(i64, i64)>, Option<(i64, i64)>);

pub struct Core {
    engine: Engine,
    sequencer: Sequencer,
    /// Unary submitters waiting for their command to be applied (replicated mode).
    unary: FxHashMap<(ClientId, u64), oneshot::Sender<proto::Ack>>,
    /// Leader: when each batch still unapplied was proposed, oldest first (entries apply
    /// in proposal order while one node leads), for `commit_ns`.
    proposed_at: std::collections::VecDeque<Instant>,
    pending: Arc<Pending>,
    metrics: Arc<Metrics>,
    market: tokio::sync::broadcast::Sender<proto::MarketDataUpdate>,
    /// Whether anyone followed `market` when the current batch began: asked once per
    /// batch, since the broadcast channel answers under a mutex.
    market_followed: bool,
    feed: tokio::sync::broadcast::Sender<Arc<FeedItem>>,
    /// Publishes the order-level feed while someone follows it.
    feed_builder: Option<FeedBuilder>,
    /// The current entry's public events (scratch).
    feed_events: Vec<proto::OrderEvent>,
    /// The first of the entries since the last feed message that had no order events:
    /// they go out together with the next one (or at the end of the applied batch).
    feed_quiet_from: Option<u64>,
    /// Trades so far in the current log entry: (log_index, trade_seq) names a trade.
    entry_trades: u32,
    config: NodeConfig,
    /// The index the next logged command gets.
    next_index: u64,
    ts_last: u64,
    owners: FxHashMap<OrderId, Owner>,
    /// The best bid and offer last published per symbol.
    bbo_last: FxHashMap<SymbolId, Bbo>,
    /// Symbols whose book changed in this batch.
    bbo_dirty: Vec<SymbolId>,
    events: Vec<Event>,
    /// Orders that acted as the incoming side in the current command (scratch).
    takers: Vec<OrderId>,
    /// Orders of the current command that rest or wait for a trigger (scratch).
    live: Vec<OrderId>,
    counts: Counts,
    commands_since_snapshot: u64,
    snapshot_at: Instant,
    snapshot_writer: Option<std::thread::JoinHandle<()>>,
}

impl Core {
    pub fn new(
        engine: Engine,
        applied_index: u64,
        sequencer: Sequencer,
        pending: Arc<Pending>,
        metrics: Arc<Metrics>,
        broadcasts: Broadcasts,
        config: NodeConfig,
    ) -> Core {
        let Broadcasts { market, feed } = broadcasts;
        let ts_last = engine.ts_last();
        let owners = owners_of(&engine);
        metrics.applied_index.store(applied_index, std::sync::atomic::Ordering::Relaxed);
        metrics.applied_ts.store(ts_last, std::sync::atomic::Ordering::Relaxed);
        if let Some(setting) = engine.fairness() {
            metrics.fairness.store(setting, false);
        }
        Core {
            engine,
            sequencer,
            unary: FxHashMap::default(),
            proposed_at: std::collections::VecDeque::new(),
            pending,
            metrics,
            market,
            market_followed: false,
            feed,
            feed_builder: None,
            feed_events: Vec::new(),
            feed_quiet_from: None,
            entry_trades: 0,
            config,
            next_index: applied_index + 1,
            ts_last,
            owners,
            bbo_last: FxHashMap::default(),
            bbo_dirty: Vec::new(),
            events: Vec::new(),
            takers: Vec::new(),
            live: Vec::new(),
            counts: Counts::default(),
            commands_since_snapshot: 0,
            snapshot_at: Instant::now(),
            snapshot_writer: None,
        }
    }

    /// Runs until a shutdown request or until every sender is gone, on a thread of its
    /// own.
    pub fn run(mut self, mut requests: mpsc::Receiver<Request>) {
        let mut batch: Vec<Request> = Vec::new();
        while let Some(first) = requests.blocking_recv() {
            if self.step(first, &mut requests, &mut batch) {
                break;
            }
        }
        self.stopped();
    }

    /// [`Core::run`] as a task of the current runtime (under a simulated clock, whose
    /// timer is the runtime's).
    pub async fn run_task(mut self, mut requests: mpsc::Receiver<Request>) {
        let mut batch: Vec<Request> = Vec::new();
        while let Some(first) = requests.recv().await {
            if self.step(first, &mut requests, &mut batch) {
                break;
            }
        }
        self.stopped();
    }

    /// Takes `first` and whatever else is queued, up to a batch, and processes them;
    /// true when a shutdown was requested.
    fn step(&mut self, first: Request, requests: &mut mpsc::Receiver<Request>, batch: &mut Vec<Request>) -> bool {
        let mut commands = first.commands_len();
        batch.push(first);
        while commands < self.config.batch_commands_max {
            let Ok(next) = requests.try_recv() else { break };
            commands += next.commands_len();
            batch.push(next);
        }
        let counted = batch.iter().filter(|request| request.counted()).count();
        self.metrics.queue_depth.0.fetch_sub(counted as i64, std::sync::atomic::Ordering::Relaxed);
        let stop = self.process(batch);
        if !stop {
            self.maybe_snapshot();
        }
        stop
    }

    fn stopped(&mut self) {
        if let Some(writer) = self.snapshot_writer.take() {
            let _ = writer.join();
        }
        let state_hash = bourse_engine::hex(&self.engine.state_hash());
        tracing::info!(index = self.next_index - 1, %state_hash, "core stopped");
    }

    /// Applies one batch; returns true when a shutdown was requested.
    fn process(&mut self, batch: &mut Vec<Request>) -> bool {
        self.market_followed = self.market.receiver_count() > 0;
        if self.feed_builder.is_some() && self.feed.receiver_count() == 0 {
            // Nobody follows the feed any more; the next follower starts from a new image.
            self.feed_builder = None;
        }
        if matches!(self.sequencer, Sequencer::Raft(_)) {
            return self.process_replicated(batch);
        }
        let commands: usize = batch.iter().map(Request::commands_len).sum();
        // An ack per command plus room for fills: sized once, not grown command by command.
        let mut outputs: Vec<Output> = Vec::with_capacity(commands * 2);
        let mut proposals: Vec<Proposal> = Vec::with_capacity(commands);
        let mut stop = false;
        for request in batch.drain(..) {
            match request {
                Request::Commands { client, items, reply } => {
                    self.process_commands(client, items, reply, &mut outputs, &mut proposals)
                }
                Request::Query { query, reply } => {
                    self.metrics.queries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let answer = answer(&self.engine, self.next_index - 1, query);
                    outputs.push(Output::Query { reply, answer });
                }
                Request::EndSession { client, session } => outputs.push(Output::EndSession { client, session }),
                Request::Feed { reply } => self.feed_start(reply, &mut outputs),
                Request::Status { reply } => {
                    let _ = reply.send((self.next_index - 1, self.engine.state_hash()));
                }
                Request::Inspect(inspect) => inspect(&self.engine, self.next_index - 1),
                Request::Machine(_) | Request::Deposed => {
                    unreachable!("a single node has no state machine")
                }
                Request::Shutdown => stop = true,
            }
        }
        self.publish_bbo(&mut outputs);
        self.flush_feed_quiet(&mut outputs);
        let last_index = self.next_index - 1;
        self.metrics.applied_ts.store(self.engine.ts_last(), std::sync::atomic::Ordering::Relaxed);
        self.metrics.applied_index.store(last_index, std::sync::atomic::Ordering::Relaxed);
        self.metrics.batches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.counts.publish(&self.metrics);
        self.publish_clients();
        self.metrics.batch_commands.lock().expect("metrics lock").record(proposals.len() as u64);
        // Park the outputs before submitting, so the durability report cannot overtake them.
        self.pending.push(last_index, outputs);
        // The last request taken may carry the batch past `batch_commands_max`; the
        // journal takes batches of at most that many, in order.
        let mut proposals = proposals.into_iter().peekable();
        while proposals.peek().is_some() {
            let chunk: Vec<Proposal> = proposals.by_ref().take(self.config.batch_commands_max).collect();
            let Sequencer::Journal(journal) = &self.sequencer else { unreachable!("single node") };
            match journal.submit(chunk) {
                Ok(_) => {}
                Err(bourse_journal::Error::WriterClosed) => {
                    // The node was dropped without `shutdown`: the drop closed the journal
                    // while the sequencer still held commands. Nothing here was durable
                    // or acknowledged, so stop quietly.
                    tracing::debug!("journal closed by the node's owner; the core stops");
                    return true;
                }
                Err(error) => {
                    // The journal can no longer make anything durable: stop the node.
                    tracing::error!(%error, "journal failed; stopping");
                    eprintln!("bourse node: journal failed ({error}); aborting");
                    std::process::abort();
                }
            }
        }
        stop
    }

    fn process_commands(
        &mut self,
        client: ClientId,
        items: Vec<(u64, Result<CommandBody, ConvertError>)>,
        mut reply: Reply,
        outputs: &mut Vec<Output>,
        proposals: &mut Vec<Proposal>,
    ) {
        let last = items.len().saturating_sub(1);
        let now = self.config.clock.now_ns();
        for (i, (seq, body)) in items.into_iter().enumerate() {
            let ack = match body {
                Err(error) => {
                    self.counts.refused_shape += 1;
                    convert::ack_refused(seq, &error)
                }
                Ok(body) => {
                    let ts = self.stamp(now);
                    self.process_command(Command { client, seq, ts, body }, outputs, proposals)
                }
            };
            match &mut reply {
                Reply::Session => outputs.push(Output::Client { client, item: ClientItem::Ack(ack) }),
                Reply::Unary(_) if i == last => {
                    let Reply::Unary(sender) = std::mem::replace(&mut reply, Reply::Session) else { unreachable!() };
                    outputs.push(Output::Unary { reply: sender, ack });
                }
                Reply::Unary(_) => {}
            }
        }
    }

    /// One batch in replicated mode: client commands are stamped and proposed (by the
    /// leader only), committed entries are applied, queries read the applied state.
    fn process_replicated(&mut self, batch: &mut Vec<Request>) -> bool {
        let mut outputs: Vec<Output> = Vec::new();
        let mut proposals: Vec<Batch> = Vec::new();
        let mut stop = false;
        for request in batch.drain(..) {
            match request {
                Request::Commands { client, items, reply } => {
                    self.propose_commands(client, items, reply, &mut outputs, &mut proposals)
                }
                Request::Machine(request) => {
                    // Outputs so far (refusals, query answers) go before what this applies.
                    self.pending.push(self.next_index - 1, std::mem::take(&mut outputs));
                    self.machine(request);
                }
                Request::Query { query, reply } => {
                    self.metrics.queries.fetch_add(1, Ordering::Relaxed);
                    let answer = answer(&self.engine, self.next_index - 1, query);
                    outputs.push(Output::Query { reply, answer });
                }
                Request::EndSession { client, session } => outputs.push(Output::EndSession { client, session }),
                Request::Feed { reply } => self.feed_start(reply, &mut outputs),
                Request::Status { reply } => {
                    let _ = reply.send((self.next_index - 1, self.engine.state_hash()));
                }
                Request::Inspect(inspect) => inspect(&self.engine, self.next_index - 1),
                Request::Deposed => {
                    self.unary.clear();
                    self.proposed_at.clear();
                }
                Request::Shutdown => stop = true,
            }
        }
        self.pending.push(self.next_index - 1, outputs);
        let Sequencer::Raft(replica) = &self.sequencer else { unreachable!("replicated") };
        let now = Instant::now();
        for batch in proposals {
            self.proposed_at.push_back(now);
            if replica.proposer.send(batch).is_err() {
                // The node is stopping; nothing proposed was acknowledged.
                break;
            }
        }
        stop
    }

    /// The leader's half of a client batch: stamp and encode each well-shaped command
    /// for the next proposal; refuse the badly shaped at once. A follower drops the
    /// batch: its sessions are being ended so their clients find the leader and resend.
    fn propose_commands(
        &mut self,
        client: ClientId,
        items: Vec<(u64, Result<CommandBody, ConvertError>)>,
        reply: Reply,
        outputs: &mut Vec<Output>,
        proposals: &mut Vec<Batch>,
    ) {
        let Sequencer::Raft(replica) = &self.sequencer else { unreachable!("replicated") };
        if !replica.leader.load(Ordering::Acquire) {
            return;
        }
        let last_seq = items.last().map(|(seq, _)| *seq);
        let now = self.config.clock.now_ns();
        for (seq, body) in items {
            match body {
                Err(error) => {
                    self.counts.refused_shape += 1;
                    let ack = convert::ack_refused(seq, &error);
                    if let Reply::Unary(sender) = reply {
                        // A unary submit carries one command: this is its answer.
                        outputs.push(Output::Unary { reply: sender, ack });
                        return;
                    }
                    outputs.push(Output::Client { client, item: ClientItem::Ack(ack) });
                }
                Ok(body) => {
                    let ts = self.stamp(now);
                    // Entries of at most `batch_commands_max` commands.
                    let room = proposals.last().is_some_and(|b| b.len() < self.config.batch_commands_max);
                    if !room {
                        proposals.push(Batch::with_capacity(64 * self.config.batch_commands_max.min(1024)));
                    }
                    let batch = proposals.last_mut().expect("one was just ensured");
                    batch.push_with(|buffer| codec::encode_into(&Command { client, seq, ts, body }, buffer));
                }
            }
        }
        if let (Reply::Unary(sender), Some(seq)) = (reply, last_seq) {
            self.unary.insert((client, seq), sender);
        }
    }

    fn machine(&mut self, request: MachineRequest) {
        match request {
            MachineRequest::Apply { entries, done } => {
                let mut outputs = Vec::new();
                for entry in entries {
                    self.apply_entry(entry, &mut outputs);
                }
                self.publish_bbo(&mut outputs);
                self.flush_feed_quiet(&mut outputs);
                let applied = self.next_index - 1;
                self.metrics.applied_ts.store(self.engine.ts_last(), Ordering::Relaxed);
                self.metrics.applied_index.store(applied, Ordering::Relaxed);
                self.metrics.batches.fetch_add(1, Ordering::Relaxed);
                self.counts.publish(&self.metrics);
                self.publish_clients();
                self.pending.push(applied, outputs);
                let _ = done.send(());
            }
            MachineRequest::Snapshot { reply } => {
                let started = Instant::now();
                let bytes = self.engine.snapshot();
                self.metrics.snapshots.fetch_add(1, Ordering::Relaxed);
                tracing::info!(index = self.next_index - 1, ms = started.elapsed().as_millis() as u64, "engine copied");
                let _ = reply.send(bytes);
            }
            MachineRequest::Install { index, bytes, reply } => match Engine::restore(&bytes) {
                Ok(engine) => {
                    self.engine = engine;
                    if let Some(setting) = self.engine.fairness() {
                        self.metrics.fairness.store(setting, false);
                    }
                    self.owners = owners_of(&self.engine);
                    self.feed_quiet_from = None;
                    if self.feed_builder.take().is_some() {
                        self.pending.push(self.next_index - 1, vec![Output::Feed(Arc::new(FeedItem::Reset))]);
                    }
                    self.bbo_last.clear();
                    self.next_index = index + 1;
                    self.ts_last = self.ts_last.max(self.engine.ts_last());
                    self.metrics.applied_index.store(index, Ordering::Relaxed);
                    let _ = reply.send(Ok(()));
                }
                Err(error) => {
                    let _ = reply.send(Err(format!("snapshot at {index} does not restore: {error}")));
                }
            },
        }
    }

    /// Applies one committed entry on this replica. Every replica applies the same
    /// commands with the same effective timestamps: a command stamped earlier than the
    /// state's last timestamp (a new leader whose clock is behind) is applied at that
    /// last timestamp, so engine time never goes backwards, and identically everywhere.
    fn apply_entry(&mut self, entry: Committed, outputs: &mut Vec<Output>) {
        if entry.index == 0 {
            // Raft's first entry, the initial membership: no commands, and index 0 is
            // where "nothing applied yet" already stands.
            debug_assert!(entry.batch.is_none());
            return;
        }
        debug_assert_eq!(entry.index, self.next_index, "entries are applied in log order");
        self.next_index = entry.index + 1;
        self.entry_trades = 0;
        let Some(batch) = entry.batch else {
            self.flush_feed(entry.index, self.engine.ts_last(), outputs);
            return;
        };
        if let Some(proposed) = self.proposed_at.pop_front() {
            let ns = u64::try_from(proposed.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.metrics.commit_ns.lock().expect("metrics lock").record(ns);
        }
        for bytes in batch.iter() {
            let command = match committed_command(&self.engine, bytes) {
                Ok(command) => command,
                Err(error) => {
                    // Only a leader of this code writes entries, so this is a corrupt or
                    // foreign log: applying around it would fork the replicas.
                    tracing::error!(index = entry.index, %error, "a committed command does not decode; stopping");
                    eprintln!("bourse node: committed entry {} does not decode ({error}); aborting", entry.index);
                    std::process::abort();
                }
            };
            // Stamps of a leader to come never go below one in the log.
            self.ts_last = self.ts_last.max(command.ts);
            let ack = self.apply_command(&command, entry.index, outputs);
            match self.unary.remove(&(command.client, command.seq)) {
                Some(reply) => outputs.push(Output::Unary { reply, ack }),
                None => outputs.push(Output::Client { client: command.client, item: ClientItem::Ack(ack) }),
            }
        }
        // The entry's log time is the engine's, as every replica has it: not this core's
        // `ts_last`, which on a leader also covers the stamps it proposed and has not
        // applied yet (every gateway must release an entry at the same instant, from
        // whichever replica it reads the feed).
        self.flush_feed(entry.index, self.engine.ts_last(), outputs);
    }

    /// A feed follower's start: an image of every book after the last applied entry,
    /// and the broadcast it reads the following entries from (entries at or below the
    /// image's index that are still on their way are skipped by the reader). Released
    /// with the outputs, so a follower never sees state that is not yet durable.
    fn feed_start(&mut self, reply: oneshot::Sender<FeedStart>, outputs: &mut Vec<Output>) {
        // (Batches end flushed; should one not, its quiet entries precede the image.)
        self.flush_feed_quiet(outputs);
        let builder = self.feed_builder.get_or_insert_with(|| FeedBuilder::from_engine(&self.engine));
        let image = builder.image(&self.engine, self.next_index - 1, self.engine.ts_last());
        outputs.push(Output::FeedImage { reply, start: (image, self.feed.subscribe()) });
    }

    /// Publishes the public events of the entry at `index`, while the feed is followed.
    /// An entry without any waits to go out with the next message (its `from_index`),
    /// so a run of day-trading commands or deposits costs the feed one message per
    /// applied batch, not one per entry.
    fn flush_feed(&mut self, index: u64, ts: u64, outputs: &mut Vec<Output>) {
        if self.feed_builder.is_none() {
            return;
        }
        if self.feed_events.is_empty() {
            self.feed_quiet_from.get_or_insert(index);
            return;
        }
        let events = std::mem::take(&mut self.feed_events);
        let from_index = self.feed_quiet_from.take().unwrap_or(0);
        let release_ts = self.engine.release_ts(ts).unwrap_or(0);
        let entry = proto::FeedEntry { log_index: index, ts, events, from_index, release_ts };
        outputs.push(Output::Feed(Arc::new(FeedItem::Entry(entry))));
    }

    /// Sends the entries without order events that wait, up to the last applied: a
    /// follower's view of the log never lags behind the applied batch.
    fn flush_feed_quiet(&mut self, outputs: &mut Vec<Output>) {
        if let Some(from_index) = self.feed_quiet_from.take() {
            let ts = self.engine.ts_last();
            let release_ts = self.engine.release_ts(ts).unwrap_or(0);
            let entry =
                proto::FeedEntry { log_index: self.next_index - 1, ts, events: Vec::new(), from_index, release_ts };
            outputs.push(Output::Feed(Arc::new(FeedItem::Entry(entry))));
        }
    }

    /// The leader timestamp of a command taken in at wall-clock time `now` (read once
    /// per client batch: the commands of a batch arrive together): `now`, but never at
    /// or before the last one.
    fn stamp(&mut self, now: u64) -> u64 {
        let now = match self.config.virtual_clock {
            // The command about to be stamped gets log index `next_index` (single node).
            Some(clock) => {
                clock.t0_ms.saturating_add(self.next_index.saturating_mul(clock.step_ms)).saturating_mul(1_000_000)
            }
            None => now,
        };
        self.ts_last = now.max(self.ts_last + 1);
        self.ts_last
    }

    fn process_command(
        &mut self,
        command: Command,
        outputs: &mut Vec<Output>,
        proposals: &mut Vec<Proposal>,
    ) -> proto::Ack {
        let index = self.next_index;
        self.next_index += 1;
        proposals.push(Proposal { timestamp_ns: command.ts, payload: codec::encode(&command) });
        // A single node logs every command as an entry of its own.
        self.entry_trades = 0;
        let ack = self.apply_command(&command, index, outputs);
        self.flush_feed(index, command.ts, outputs);
        ack
    }

    /// Applies one sequenced command at log `index` and routes what it caused.
    fn apply_command(&mut self, command: &Command, index: u64, outputs: &mut Vec<Output>) -> proto::Ack {
        self.events.clear();
        let applied = self.engine.apply(command, &mut self.events);
        let counter = match (applied.duplicate, applied.outcome) {
            (true, _) => &mut self.counts.duplicate,
            (false, bourse_engine::Outcome::Rejected(_)) => &mut self.counts.rejected,
            (false, _) => &mut self.counts.applied,
        };
        *counter += 1;
        self.commands_since_snapshot += 1;
        let first_trade = self.entry_trades;
        self.route_events(command.client, LogPosition { log_index: index, ts: command.ts }, outputs);
        if let Some(builder) = &mut self.feed_builder {
            let mut trade_seq = first_trade;
            builder.command(&self.engine, &self.events, &mut trade_seq, &mut self.feed_events);
        }
        let mut ack = convert::ack(command.seq, index, &applied);
        if let (CommandBody::SetFairness(_), bourse_engine::Outcome::Ok { .. }) = (&command.body, applied.outcome) {
            if let Some(setting) = self.engine.fairness() {
                self.metrics.fairness.store(setting, true);
            }
        }
        if let CommandBody::DayTrading(request) = &command.body {
            ack.day_trading = self.day_trading_result(command, request, &applied).map(Box::new);
        }
        ack
    }

    /// A day-trading command's result, read at its log point (right after it applied).
    fn day_trading_result(
        &self,
        command: &Command,
        request: &DtRequest,
        applied: &bourse_engine::Applied,
    ) -> Option<proto::DayTradingResult> {
        let DtRequest::Command(dt) = request else { return None };
        if applied.duplicate {
            let (client, seq) = (command.client, command.seq);
            return bourse_protocol::daytrading::duplicate(&self.engine, client, seq, dt, applied.outcome, command.ts);
        }
        bourse_protocol::daytrading::result(&self.engine, dt, &self.events, command.ts)
    }

    /// Fill and cancel reports to the orders' owners, trades to market data, and the
    /// bookkeeping of who owns which open order.
    fn route_events(&mut self, client: ClientId, at: LogPosition, outputs: &mut Vec<Output>) {
        let market = self.market_followed;
        let mut trade_seq = self.entry_trades;
        let mut takers = std::mem::take(&mut self.takers);
        let mut live = std::mem::take(&mut self.live);
        let events = std::mem::take(&mut self.events);
        for event in &events {
            match *event {
                Event::Accepted { order, account, symbol, kind, .. } => {
                    self.owners.insert(order, Owner { client, account, symbol });
                    takers.push(order);
                    if kind.trigger().is_some() {
                        live.push(order);
                    }
                }
                Event::Triggered { order, .. } => live.retain(|&o| o != order),
                Event::Moved { order, .. } => {
                    if let Some(owner) = self.owners.get_mut(&order) {
                        owner.client = client;
                    }
                    takers.push(order);
                }
                Event::Trade { maker_order, taker_order, maker_done, symbol, .. } => {
                    let [maker, taker] = convert::fill_reports(event, at, trade_seq).expect("a trade has reports");
                    for (order, report) in [(maker_order, maker), (taker_order, taker)] {
                        if let Some(owner) = self.owners.get(&order) {
                            outputs.push(Output::Client { client: owner.client, item: ClientItem::Fill(report) });
                        }
                    }
                    if maker_done {
                        self.owners.remove(&maker_order);
                        // It may have rested earlier in this command (a stop that
                        // triggered, traded and rested, then was filled by a later stop).
                        live.retain(|&o| o != maker_order);
                    }
                    takers.push(taker_order);
                    if market {
                        let trade = convert::trade_update(event, at.log_index, trade_seq).expect("a trade");
                        outputs.push(Output::Market(market_update(
                            at.ts,
                            proto::market_data_update::Update::Trade(trade),
                        )));
                    }
                    self.mark_bbo_dirty(symbol, market);
                    trade_seq += 1;
                }
                Event::Cancelled { order, .. } => {
                    live.retain(|&o| o != order);
                    if let Some(owner) = self.owners.remove(&order) {
                        let report = convert::cancel_report(event, owner.account, owner.symbol, at).expect("a cancel");
                        outputs.push(Output::Client { client: owner.client, item: ClientItem::Cancel(report) });
                        self.mark_bbo_dirty(owner.symbol, market);
                    }
                }
                Event::Rested { order, symbol, .. } => {
                    live.push(order);
                    self.mark_bbo_dirty(symbol, market);
                }
                Event::Reduced { order, .. } | Event::Refreshed { order, .. } => {
                    if let Some(owner) = self.owners.get(&order) {
                        let symbol = owner.symbol;
                        self.mark_bbo_dirty(symbol, market);
                    }
                }
                _ => {}
            }
        }
        self.events = events;
        self.entry_trades = trade_seq;
        // An order that filled completely as the incoming side leaves no event saying so:
        // it is every incoming order that neither rested nor waits for its trigger.
        takers.dedup();
        for &order in &takers {
            if !live.contains(&order) {
                self.owners.remove(&order);
            }
        }
        debug_assert!(takers.iter().all(|&o| live.contains(&o)
            == matches!(self.engine.order_status(o), Some(OrderStatus::Open | OrderStatus::Pending))));
        takers.clear();
        live.clear();
        self.takers = takers;
        self.live = live;
    }

    fn mark_bbo_dirty(&mut self, symbol: SymbolId, market: bool) {
        if market {
            self.bbo_dirty.push(symbol);
        }
    }

    /// Publishes the best bid and offer of every symbol touched in this batch whose top
    /// of book differs from what was last published.
    /// The engine's client records, for `/metrics`.
    fn publish_clients(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let (expired, refused) = self.engine.clients_expired_refused();
        self.metrics.clients.store(self.engine.clients() as u64, Relaxed);
        self.metrics.clients_expired.store(expired, Relaxed);
        self.metrics.clients_refused.store(refused, Relaxed);
    }

    fn publish_bbo(&mut self, outputs: &mut Vec<Output>) {
        let mut dirty = std::mem::take(&mut self.bbo_dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for &symbol in &dirty {
            let Some(depth) = self.engine.depth(symbol, 1) else { continue };
            let now: Bbo = (depth.bids.first().map(|l| (l.0 .0, l.1 .0)), depth.asks.first().map(|l| (l.0 .0, l.1 .0)));
            if self.bbo_last.get(&symbol) != Some(&now) {
                self.bbo_last.insert(symbol, now);
                let update = convert::bbo_update(symbol, &depth, self.next_index - 1);
                outputs.push(Output::Market(market_update(
                    self.engine.ts_last(),
                    proto::market_data_update::Update::Bbo(update),
                )));
            }
        }
        dirty.clear();
        self.bbo_dirty = dirty;
    }

    /// Takes a snapshot when enough commands or time have passed, writing it on a
    /// helper thread so the core keeps going (the group commit orders it after every
    /// entry it covers).
    fn maybe_snapshot(&mut self) {
        let by_count = self.commands_since_snapshot >= self.config.snapshot_every_commands;
        let by_time = self.config.snapshot_every_secs > 0
            && self.commands_since_snapshot > 0
            && self.snapshot_at.elapsed() >= Duration::from_secs(self.config.snapshot_every_secs);
        if !(by_count || by_time) || self.snapshot_writer.as_ref().is_some_and(|w| !w.is_finished()) {
            return;
        }
        let Sequencer::Journal(journal) = &self.sequencer else { return };
        let journal = journal.clone();
        let index = self.next_index - 1;
        let encoding = Instant::now();
        let bytes = self.engine.snapshot();
        // The core waits this long: no command is applied while the state is encoded.
        let encode_ms = encoding.elapsed().as_millis() as u64;
        let metrics = Arc::clone(&self.metrics);
        self.commands_since_snapshot = 0;
        self.snapshot_at = Instant::now();
        let bytes_len = bytes.len();
        self.snapshot_writer = Some(std::thread::spawn(move || {
            let started = Instant::now();
            match journal.write_snapshot(index, bytes) {
                Ok(()) => {
                    metrics.snapshots.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let write_ms = started.elapsed().as_millis() as u64;
                    let size = bytes_len;
                    tracing::info!(index, encode_ms, write_ms, bytes = size, "snapshot written");
                }
                Err(error) => tracing::error!(%error, index, "snapshot failed"),
            }
        }));
    }
}

/// A command of a committed entry as every replica applies it: decoded, and stamped no
/// earlier than the state's last timestamp (a new leader whose clock is behind the old
/// one's stamps its first commands earlier; they are applied at the last time instead,
/// the same way on every replica and in every replay).
pub fn committed_command(engine: &Engine, bytes: &[u8]) -> Result<Command, codec::DecodeError> {
    let mut command = codec::decode(bytes)?;
    command.ts = command.ts.max(engine.ts_last());
    Ok(command)
}

/// Owners of the open orders of `engine`. Orders resting since before a restart have
/// no session to report to until their owner connects again; their account and symbol
/// still route cancels.
fn owners_of(engine: &Engine) -> FxHashMap<OrderId, Owner> {
    let mut owners = FxHashMap::default();
    for symbol in 0..engine.symbols_len() as u32 {
        for side in [Side::Buy, Side::Sell] {
            for order in engine.book_orders(SymbolId(symbol), side, usize::MAX) {
                owners
                    .insert(order.id, Owner { client: ClientId(0), account: order.account, symbol: SymbolId(symbol) });
            }
        }
    }
    owners
}

fn market_update(ts: u64, update: proto::market_data_update::Update) -> proto::MarketDataUpdate {
    proto::MarketDataUpdate { seq: 0, ts, update: Some(update), release_ts: 0 }
}

#[cfg(test)]
mod tests {
    use bourse_engine::command::{Command, CommandBody};
    use bourse_engine::{codec, ClientId, Engine, EngineConfig};

    use super::committed_command;

    fn command(seq: u64, ts: u64) -> Command {
        Command {
            client: ClientId(9),
            seq,
            ts,
            body: CommandBody::CreateAsset { name: format!("A{seq}"), decimals: 2 },
        }
    }

    #[test]
    fn a_command_stamped_before_the_last_time_is_applied_at_the_last_time() {
        let mut engine = Engine::new(EngineConfig::default());
        let mut events = Vec::new();
        engine.apply(&committed_command(&engine, &codec::encode(&command(1, 1_000))).unwrap(), &mut events);
        assert_eq!(engine.ts_last(), 1_000);
        // A new leader whose clock is behind stamps 400: applied at 1,000, on every replica.
        let late = committed_command(&engine, &codec::encode(&command(2, 400))).unwrap();
        assert_eq!(late.ts, 1_000);
        engine.apply(&late, &mut events);
        assert_eq!(engine.ts_last(), 1_000);
        // A later stamp is kept as it is.
        assert_eq!(committed_command(&engine, &codec::encode(&command(3, 2_000))).unwrap().ts, 2_000);
        assert!(committed_command(&engine, &[0xff, 0xff, 0xff]).is_err());
    }
}
