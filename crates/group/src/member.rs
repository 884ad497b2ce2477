//! One member of one group, as a process runs it ([`GroupMember::start`]): openraft
//! with the group's [`GroupMachine`] as its state machine, the group API
//! ([`crate::wire`]), the front that proposes while the member leads, and a puller per
//! other group that reads that group's outputs to this one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bourse_cluster::member::{Member, MemberConfig, MemberError};
use bourse_cluster::snapshot_store::SnapshotStore;
use bourse_cluster::state_machine::{Committed, Machine, MachineRequest, StateMachine};
use bourse_cluster::tls::MemberTls;
use bourse_cluster::{Batch, NodeId, Peer};
use bourse_engine::command::{Command, CommandBody};
use bourse_engine::{ClientId, SymbolId, Timestamp};
use bourse_pki::{Identity, ReloadableClientConfig, ReloadableServerConfig, Role, TlsFiles};
use bourse_shard::machine::{Entry, Output};
use bourse_shard::{route, GroupMachine, Route, ShardMap, CATALOG_GROUP};
use tokio::sync::{mpsc, oneshot, watch};

use crate::wire::{self, AccountState, Answer, Answered, Connection, OrderState, Query, Reply, Request, State};
use crate::Genesis;

/// How long a submitted command waits for its outcome before it is answered
/// [`Answer::Pending`] (the client sends it again).
const ANSWER_WAIT: Duration = Duration::from_secs(3);
/// How long a move may take before its request is answered that it was not seen done.
const MOVE_WAIT: Duration = Duration::from_secs(20);
/// How long a query's read index is tried again while no quorum confirms the leader.
const READ_RETRY: Duration = Duration::from_secs(5);
/// How often the front looks for something to propose.
const FRONT_EVERY: Duration = Duration::from_millis(1);
/// A tick while some merge waits on this group's watermark (or a move's handoff does:
/// [`GroupMachine::behind_a_cut`]), at most this often.
const TICK_EVERY: Duration = Duration::from_millis(2);
/// An ingest that has not applied within this long is proposed again (its entry may
/// have gone with a deposed leader).
const INGEST_AGAIN: Duration = Duration::from_millis(50);
const TRIM_EVERY: Duration = Duration::from_millis(50);
/// Outputs pulled per request at most.
const PULL_MAX: u32 = 512;
/// How long a member holds a pull that finds nothing new (a long poll).
const PULL_WAIT_MS: u32 = 100;

/// Everything a member needs.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    pub group: usize,
    pub id: NodeId,
    /// Holds `raft-log/` and `snapshots/`.
    pub dir: PathBuf,
    /// The group API (clients and other groups).
    pub listen: SocketAddr,
    /// The Raft transport.
    pub raft_listen: SocketAddr,
    /// Source address of this member's Raft connections (tests tell members apart by
    /// it at their fault proxies).
    pub bind_ip: Option<std::net::IpAddr>,
    /// This group's members (id, API and Raft addresses), bootstrapped by the first.
    pub members: Vec<(NodeId, Peer)>,
    /// Every group's members' API addresses, in group order (this group's included).
    pub directory: Vec<Vec<String>>,
    pub genesis: Genesis,
    /// The cluster's CA (`bourse pki`): this member's certificate is `node ID`'s, and
    /// both its ports are mutual TLS. `None`: plaintext, loopback only.
    pub pki: Option<PathBuf>,
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    pub snapshot_every_entries: u64,
}

impl GroupConfig {
    fn check(&self) -> Result<(), String> {
        let groups = self.genesis.groups as usize;
        if self.group >= groups {
            return Err(format!("--group {}: the genesis has {groups} groups (0 to {})", self.group, groups - 1));
        }
        if self.directory.len() != groups {
            return Err(format!("--directory names {} groups, the genesis {groups}", self.directory.len()));
        }
        if !self.members.iter().any(|(id, _)| *id == self.id) {
            return Err(format!("node {} is not among its group's members", self.id));
        }
        if self.pki.is_none() {
            for addr in [self.listen, self.raft_listen] {
                if !addr.ip().is_loopback() {
                    return Err(format!("{addr}: plaintext is for loopback only; give the cluster's --pki"));
                }
            }
        }
        Ok(())
    }
}

/// Commands that reached the leader and wait for its front, and the stamp clock.
#[derive(Default)]
struct Inbox {
    commands: Vec<Command>,
    /// Moves of books (on the catalog's group).
    moves: Vec<(SymbolId, usize)>,
    /// The last stamp given (a command or a tick): stamps never go back.
    stamped: Timestamp,
}

impl Inbox {
    fn stamp(&mut self) -> Timestamp {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        self.stamped = now.max(self.stamped + 1);
        self.stamped
    }
}

/// A submitted command waiting for its outcome on this process.
struct Waiter {
    answer: oneshot::Sender<Answer>,
    /// A catalog or account command (on the catalog's group): answered once every other
    /// group has applied it, so that its client's next command finds it everywhere.
    config: bool,
}

/// A catalog command's answer, held until every other group has consumed this group's
/// outputs up to `needs[g]` (the number of the last output to `g` when it applied).
struct Spreading {
    answer: Answer,
    sender: oneshot::Sender<Answer>,
    needs: Vec<u64>,
}

/// A replica's state, shared by the Raft state machine, the API and the front.
struct Replica {
    machine: GroupMachine,
    next_index: u64,
    waiters: HashMap<(ClientId, u64), Waiter>,
    spreading: Vec<Spreading>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The Raft-facing owner of the machine.
#[derive(Clone)]
struct Owner {
    replica: Arc<Mutex<Replica>>,
    /// Woken after every batch of entries applied (the long polls of other groups).
    applied: Arc<tokio::sync::Notify>,
}

impl Owner {
    fn apply(&self, entry: Committed) {
        let mut replica = lock(&self.replica);
        if entry.index < replica.next_index {
            return;
        }
        replica.next_index = entry.index + 1;
        let Some(batch) = entry.batch else { return };
        let mut acks = Vec::new();
        for bytes in batch.iter() {
            let decoded: Entry = match postcard::from_bytes(bytes) {
                Ok(decoded) => decoded,
                Err(error) => {
                    // Every replica skips the same bytes alike: the state stays one.
                    tracing::error!(index = entry.index, %error, "an entry does not decode; skipped");
                    continue;
                }
            };
            // A refused ingest (a gap) applies nothing; the front proposes again from
            // the cursor.
            if let Err(gap) = replica.machine.apply(&decoded, &mut acks) {
                tracing::debug!(%gap, "ingest refused");
            }
        }
        for ack in acks {
            if let Some(waiter) = replica.waiters.remove(&(ack.client, ack.seq)) {
                let answer =
                    Answer::Done { client: ack.client, seq: ack.seq, outcome: ack.outcome, repeat: ack.repeat };
                if waiter.config {
                    let groups = replica.machine.groups();
                    let needs = (0..groups).map(|g| replica.machine.produced(g)).collect();
                    replica.spreading.push(Spreading { answer, sender: waiter.answer, needs });
                } else {
                    let _ = waiter.answer.send(answer);
                }
            }
        }
    }
}

impl Machine for Owner {
    async fn submit(&self, request: MachineRequest) -> bool {
        match request {
            MachineRequest::Apply { entries, done } => {
                for entry in entries {
                    self.apply(entry);
                }
                self.applied.notify_waiters();
                let _ = done.send(());
            }
            MachineRequest::Snapshot { reply } => {
                let bytes = postcard::to_allocvec(&lock(&self.replica).machine).expect("a group machine encodes");
                let _ = reply.send(bytes);
            }
            MachineRequest::Install { index, bytes, reply } => match postcard::from_bytes::<GroupMachine>(&bytes) {
                Ok(machine) => {
                    let mut replica = lock(&self.replica);
                    replica.machine = machine;
                    replica.next_index = index + 1;
                    let _ = reply.send(Ok(()));
                }
                Err(error) => {
                    let _ = reply.send(Err(format!("snapshot at {index} does not decode: {error}")));
                }
            },
        }
        true
    }
}

/// What one puller last read of a source group.
#[derive(Clone, Debug, Default)]
struct Pulled {
    start: u64,
    outputs: Vec<Output>,
    /// How far the source has applied this group's outputs.
    consumed: u64,
    /// The source's merge waits for watermarks.
    waiting: bool,
}

/// What every task of a member shares.
struct Shared {
    group: usize,
    groups: usize,
    map: ShardMap,
    replica: Arc<Mutex<Replica>>,
    applied: Arc<tokio::sync::Notify>,
    inbox: Mutex<Inbox>,
    pulled: Vec<Mutex<Pulled>>,
    member: Member<Owner>,
    proposer: mpsc::UnboundedSender<Batch>,
    directory: Vec<Vec<String>>,
    client_tls: Option<Arc<ReloadableClientConfig>>,
}

impl Shared {
    fn leading(&self) -> bool {
        self.member.leadership().borrow().is_leader
    }
}

/// A running member.
pub struct GroupMember {
    shared: Arc<Shared>,
    pub api: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    tls: Option<MemberTls>,
}

impl GroupMember {
    /// Opens the member's log and snapshots (or starts its group from the genesis),
    /// starts Raft, the API listener, the front and the pullers.
    pub async fn start(config: GroupConfig) -> Result<GroupMember, String> {
        config.check()?;
        let built = config.genesis.build()?;
        let groups = config.genesis.groups as usize;
        let (tls, server_tls, client_tls) = match &config.pki {
            Some(pki) => {
                let identity = Identity::new(Role::Node, config.id.to_string()).map_err(|e| e.to_string())?;
                let files = TlsFiles::issued(pki, &identity);
                let member = MemberTls::load(&files).map_err(|e| format!("node {}'s certificate: {e}", config.id))?;
                let server = ReloadableServerConfig::server(files.clone()).map_err(|e| e.to_string())?;
                let client = ReloadableClientConfig::client(files).map_err(|e| e.to_string())?;
                (Some(member), Some(Arc::new(server)), Some(Arc::new(client)))
            }
            None => (None, None, None),
        };
        std::fs::create_dir_all(&config.dir).map_err(|e| format!("{}: {e}", config.dir.display()))?;
        let snapshots = SnapshotStore::open(config.dir.join("snapshots")).map_err(|e| e.to_string())?;
        let replica = Arc::new(Mutex::new(Replica {
            machine: built.machines[config.group].clone(),
            next_index: 1,
            waiters: HashMap::new(),
            spreading: Vec::new(),
        }));
        let applied = Arc::new(tokio::sync::Notify::new());
        let owner = Owner { replica: Arc::clone(&replica), applied: Arc::clone(&applied) };
        let (state_machine, restored) = StateMachine::open(snapshots, owner).map_err(|e| e.to_string())?;
        if let (Some(meta), Some(bytes)) = (restored.meta, restored.engine_bytes) {
            let machine: GroupMachine =
                postcard::from_bytes(&bytes).map_err(|e| format!("the newest snapshot does not decode: {e}"))?;
            let mut replica = lock(&replica);
            replica.machine = machine;
            replica.next_index = meta.last_log_id.map_or(1, |id| id.index + 1);
        }
        let advertise = config
            .members
            .iter()
            .find(|(id, _)| *id == config.id)
            .map(|(_, peer)| peer.clone())
            .expect("checked: a member of its group");
        let member_config = MemberConfig {
            id: config.id,
            dir: config.dir.clone(),
            listen: config.raft_listen,
            advertise,
            bind_ip: config.bind_ip,
            bootstrap: config.members.clone(),
            heartbeat_ms: config.heartbeat_ms,
            election_min_ms: config.election_min_ms,
            election_max_ms: config.election_max_ms,
            snapshot_every_entries: config.snapshot_every_entries,
            log_kept_after_snapshot: 1_000,
            tls: tls.clone(),
            snapshot_bytes_max: wire::FRAME_MAX,
        };
        let (proposer, proposals) = mpsc::unbounded_channel();
        let member = Member::start(member_config, state_machine, proposals, |commands| {
            tracing::info!(commands, "a proposal was refused (leadership moved); its clients send again")
        })
        .await
        .map_err(|e| e.to_string())?;
        let listener =
            tokio::net::TcpListener::bind(config.listen).await.map_err(|e| format!("{}: {e}", config.listen))?;
        let api = listener.local_addr().map_err(|e| e.to_string())?;
        let shared = Arc::new(Shared {
            group: config.group,
            groups,
            map: config.genesis.map(),
            replica,
            applied,
            inbox: Mutex::new(Inbox::default()),
            pulled: (0..groups).map(|_| Mutex::new(Pulled::default())).collect(),
            member,
            proposer,
            directory: config.directory.clone(),
            client_tls,
        });
        let (stop, stopping) = watch::channel(false);
        let mut tasks = vec![
            tokio::spawn(serve(listener, Arc::clone(&shared), server_tls, stopping.clone())),
            tokio::spawn(front(Arc::clone(&shared), stopping.clone())),
        ];
        for source in (0..groups).filter(|&g| g != config.group) {
            tasks.push(tokio::spawn(pull(Arc::clone(&shared), source, stopping.clone())));
        }
        Ok(GroupMember { shared, api, stop, tasks, tls })
    }

    /// Re-reads the Raft transport's certificates and CRL (SIGHUP).
    pub fn reload_tls(&self) -> Result<(), String> {
        match &self.tls {
            Some(tls) => tls.reload().map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for task in &self.tasks {
            task.abort();
        }
        self.shared.member.shutdown().await;
    }
}

fn state(shared: &Shared, with_machine: bool) -> State {
    let leadership = shared.member.leadership().borrow().clone();
    let (applied, committed) = shared.member.progress();
    let machine = with_machine.then(|| postcard::to_allocvec(&lock(&shared.replica).machine).expect("encodes"));
    State {
        group: shared.group,
        node: shared.member.id(),
        leading: leadership.is_leader,
        term: leadership.term,
        leader: leadership.leader.map(|(_, peer)| peer.api),
        applied,
        committed,
        machine,
    }
}

/// The API listener: a task per connection, requests one at a time.
async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    tls: Option<Arc<ReloadableServerConfig>>,
    mut stopping: watch::Receiver<bool>,
) {
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = stopping.changed() => return,
        };
        let shared = Arc::clone(&shared);
        let tls = tls.clone();
        tokio::spawn(async move {
            let (mut io, peer) = match wire::accept(stream, tls.as_deref()).await {
                Ok(accepted) => accepted,
                Err(error) => return tracing::info!(%error, "group API connection refused"),
            };
            loop {
                let request: Request = match wire::read_frame(&mut io).await {
                    Ok(Some(request)) => request,
                    Ok(None) => return,
                    Err(error) => return tracing::debug!(%error, "group API connection"),
                };
                let reply = match wire::allowed(peer.as_ref(), &request) {
                    Err(error) => Reply::Error(error),
                    Ok(()) => answer(&shared, request).await,
                };
                if wire::write_frame(&mut io, &reply).await.is_err() {
                    return;
                }
            }
        });
    }
}

async fn answer(shared: &Shared, request: Request) -> Reply {
    match request {
        Request::State { machine } => Reply::State(state(shared, machine)),
        Request::Outputs { to, from, max, wait_ms, consumed } => {
            if to >= shared.groups || to == shared.group {
                return Reply::Error(format!("no outputs to group {to}"));
            }
            let until = tokio::time::Instant::now() + Duration::from_millis(u64::from(wait_ms.min(1_000)));
            loop {
                // Registered before looking, so an apply between the look and the wait
                // is not missed.
                let applied = shared.applied.notified();
                {
                    let replica = lock(&shared.replica);
                    let (start, outputs) = replica.machine.outputs(to, from, max.min(PULL_MAX) as usize);
                    let waiting = replica.machine.symbol.merge.waiting() > 0;
                    let cursor = replica.machine.cursor(to);
                    if !outputs.is_empty() || waiting || cursor != consumed || tokio::time::Instant::now() >= until {
                        return Reply::Outputs { start, outputs, consumed: cursor, waiting };
                    }
                }
                let _ = tokio::time::timeout_at(until, applied).await;
            }
        }
        Request::Submit { commands } => Reply::Submitted(submit(shared, commands).await),
        Request::Query(query) => read(shared, query).await,
        Request::Move { symbol, to, again } => move_book(shared, symbol, to, again).await,
    }
}

/// Has the front propose a move of `symbol`'s book to group `to` (on the catalog's
/// group's leader), and answers once the book has come there. A resend (`again`) of a
/// move this group has taken already only waits for it.
async fn move_book(shared: &Shared, symbol: SymbolId, to: usize, again: bool) -> Reply {
    let asked = Instant::now();
    if !shared.leading() {
        return Reply::NotLeader {
            leader: shared.member.leadership().borrow().leader.clone().map(|(_, peer)| peer.api),
        };
    }
    let (from, propose) = {
        let replica = lock(&shared.replica);
        let machine = &replica.machine;
        if again && machine.account.symbol_group(symbol) == to {
            // Taken already (the first answer was lost): the group it left is the last
            // move's.
            (machine.account.last_move(symbol).map(|(_, from)| from), false)
        } else if let Some(refused) = machine.move_refused(symbol, to) {
            return Reply::Error(refused);
        } else {
            (Some(machine.account.symbol_group(symbol)), true)
        }
    };
    if propose {
        lock(&shared.inbox).moves.push((symbol, to));
    }
    let until = asked + MOVE_WAIT;
    loop {
        tokio::time::sleep(Duration::from_millis(2)).await;
        {
            let replica = lock(&shared.replica);
            let machine = &replica.machine;
            if machine.account.symbol_group(symbol) == to && !machine.moving().any(|s| s == symbol) {
                return Reply::Moved { from, millis: asked.elapsed().as_millis() as u64 };
            }
        }
        if Instant::now() > until {
            return Reply::Error(format!("the move of symbol {symbol} {} within {MOVE_WAIT:?}", wire::MOVE_NOT_SEEN));
        }
    }
}

/// Answers a query on the leader, after a read index: what it reads was applied at an
/// index no older than the query. A book on its way here is waited for (up to
/// [`MOVE_WAIT`]): read before it comes, it would be empty at an index past orders
/// acknowledged in it.
async fn read(shared: &Shared, query: Query) -> Reply {
    // Where the book lives now, as this member has applied the moves (a follower or a
    // deposed leader may be behind: the client asks again where it is sent).
    if let Read::Elsewhere(group) = decide(shared, &lock(&shared.replica).machine, &query) {
        return Reply::Elsewhere { group };
    }
    if !shared.leading() {
        return Reply::NotLeader {
            leader: shared.member.leadership().borrow().leader.clone().map(|(_, peer)| peer.api),
        };
    }
    let asked = Instant::now();
    let until = asked + MOVE_WAIT;
    loop {
        let index = match shared.member.linearizable_read().await {
            Ok(index) => index,
            Err(MemberError::NotLeader { leader }) => {
                return Reply::NotLeader { leader: leader.map(|(_, peer)| peer.api) };
            }
            // No quorum acknowledged this leader within its lease (its followers busy,
            // or cut off): asked again, until it is deposed or the read gives up.
            Err(error) if asked.elapsed() < READ_RETRY => {
                tracing::debug!(%error, "read index, again");
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            Err(error) => return Reply::Error(format!("read index: {error}")),
        };
        let arriving = match decide(shared, &lock(&shared.replica).machine, &query) {
            Read::Answer(answer) => return Reply::Queried { index, answer },
            Read::Elsewhere(group) => return Reply::Elsewhere { group },
            Read::Refused(error) => return Reply::Error(error),
            Read::Arriving(symbol) => symbol,
        };
        // Wait on this replica for the book, then read again at a fresh index.
        loop {
            if Instant::now() > until {
                return Reply::Error(format!("symbol {arriving}'s book has not come within {MOVE_WAIT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            if !lock(&shared.replica).machine.symbol.arriving.contains_key(&arriving) {
                break;
            }
        }
    }
}

/// What a query reads of a group's machine.
enum Read {
    Answer(Answered),
    /// The book lives in that group now.
    Elsewhere(usize),
    /// The book lives here but has not come yet.
    Arriving(SymbolId),
    Refused(String),
}

/// Reads `query` of `machine`, this member's group's state.
fn decide(shared: &Shared, machine: &GroupMachine, query: &Query) -> Read {
    let engine = machine.symbol.engine();
    let order_state = |view: bourse_engine::OrderView| OrderState {
        record: view.record,
        px_resting: view.px_resting,
        qty_open: view.qty_open,
    };
    // The book's group, when it is not this one or the book is on its way here.
    let away = |symbol: SymbolId| match machine.account.symbol_group(symbol) {
        g if g != shared.group => Some(Read::Elsewhere(g)),
        _ if machine.symbol.arriving.contains_key(&symbol) => Some(Read::Arriving(symbol)),
        _ => None,
    };
    let answer = match *query {
        Query::Book { symbol, levels } => {
            if let Some(away) = away(symbol) {
                return away;
            }
            match engine.depth(symbol, levels.min(1_000) as usize) {
                Some(depth) => Answered::Book { bids: depth.bids, asks: depth.asks, last_px: engine.last_px(symbol) },
                None => return Read::Refused(format!("no symbol {symbol}")),
            }
        }
        Query::Order { symbol, order } => {
            // A record this group holds is the order's (each is in one group: an open
            // order's with its book, a closed one's where it closed), whichever group
            // its book lives in now.
            match engine.order(order).filter(|view| view.record.symbol == symbol) {
                Some(view) => Answered::Order(Some(order_state(view))),
                None => match away(symbol) {
                    Some(away) => return away,
                    None => Answered::Order(None),
                },
            }
        }
        Query::Record { order } => Answered::Order(engine.order(order).map(order_state)),
        Query::Account { account } => {
            let Some(suspended) = machine.account.suspended(account) else {
                return Read::Refused(format!("no account {account}"));
            };
            let owned = shared.map.account_group(account) == shared.group;
            let reserved = engine
                .balances(account)
                .into_iter()
                .flatten()
                .filter(|(_, balance)| balance.reserved.0 != 0)
                .map(|(asset, balance)| (*asset, balance.reserved.0))
                .collect();
            Answered::Account(AccountState {
                owned,
                available: if owned { machine.account.balances_of(account) } else { Vec::new() },
                suspended: owned && suspended,
                reserved,
                orders: engine.open_orders(account).into_iter().map(order_state).collect(),
            })
        }
    };
    Read::Answer(answer)
}

/// Takes client commands in for the front (while this member leads) and waits for
/// their outcomes.
async fn submit(shared: &Shared, commands: Vec<Command>) -> Vec<Answer> {
    if !shared.leading() {
        let leader = shared.member.leadership().borrow().leader.clone().map(|(_, peer)| peer.api);
        return commands.iter().map(|_| Answer::NotLeader { leader: leader.clone() }).collect();
    }
    let mut answers: Vec<Result<oneshot::Receiver<Answer>, Answer>> = Vec::with_capacity(commands.len());
    {
        let mut inbox = lock(&shared.inbox);
        let mut replica = lock(&shared.replica);
        for mut command in commands {
            let routed = route(&shared.map, &command.body);
            let refused = match &routed {
                Err(unsupported) => Some(unsupported.to_string()),
                Ok(Route::Config) if shared.group != CATALOG_GROUP => Some(format!(
                    "catalog and account commands go to group {CATALOG_GROUP}, which orders them for every group"
                )),
                Ok(Route::Config) => None,
                Ok(Route::Account(g)) if *g != shared.group => {
                    Some(format!("the command's account lives in group {g}, not {}", shared.group))
                }
                Ok(Route::Account(_)) => None,
            };
            if let Some(refused) = refused {
                answers.push(Err(Answer::Refused(refused)));
                continue;
            }
            let (tx, rx) = oneshot::channel();
            // A close of the day is answered once every group has reported it: it has
            // reached them all by then.
            let config = matches!(routed, Ok(Route::Config)) && command.body != CommandBody::CloseDay;
            replica.waiters.insert((command.client, command.seq), Waiter { answer: tx, config });
            command.ts = inbox.stamp();
            inbox.commands.push(command);
            answers.push(Ok(rx));
        }
    }
    let deadline = tokio::time::Instant::now() + ANSWER_WAIT;
    let mut out = Vec::with_capacity(answers.len());
    for answer in answers {
        out.push(match answer {
            Err(refused) => refused,
            Ok(rx) => match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(answer)) => answer,
                _ => Answer::Pending,
            },
        });
    }
    out
}

/// The front: while this member leads, proposes what reached it (see the crate's docs).
async fn front(shared: Arc<Shared>, mut stopping: watch::Receiver<bool>) {
    let groups = shared.groups;
    // Per source: the last output of the ingest in flight, and when it was proposed.
    let mut proposed: Vec<Option<(u64, Instant)>> = vec![None; groups];
    let mut term = 0;
    let mut last_tick = Instant::now();
    let mut last_trim = Instant::now();
    let mut every = tokio::time::interval(FRONT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stopping.changed() => return,
        }
        let leadership = shared.member.leadership().borrow().clone();
        if !leadership.is_leader {
            // Commands taken in while leading, not yet proposed: their waiters are
            // dropped, so their clients hear `Pending` and send them to the leader.
            let dropped: Vec<Command> = {
                let mut inbox = lock(&shared.inbox);
                // Moves not proposed: their requests time out, and the operator asks
                // the leader.
                inbox.moves.clear();
                std::mem::take(&mut inbox.commands)
            };
            {
                let mut replica = lock(&shared.replica);
                for command in dropped {
                    replica.waiters.remove(&(command.client, command.seq));
                }
                // Catalog answers waiting to spread: their clients send again, to the
                // leader.
                replica.spreading.clear();
            }
            // A follower looks again within 10 ms (it takes no commands meanwhile: the
            // API asks for leadership itself).
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(9)) => {}
                _ = stopping.changed() => return,
            }
            continue;
        }
        if leadership.term != term {
            term = leadership.term;
            proposed.fill(None);
        }
        let now = Instant::now();
        let mut batch = Batch::default();
        let mut push = |entry: &Entry| batch.push(&postcard::to_allocvec(entry).expect("entries encode"));
        let (cursors, own_waiting, kept): (Vec<u64>, bool, Vec<u64>) = {
            let replica = lock(&shared.replica);
            (
                (0..groups).map(|g| replica.machine.cursor(g)).collect(),
                // Forwards wait for this group's watermark, or a move's handoff does (the
                // other groups' merges: their pulls' replies, below).
                replica.machine.wants_tick(&[]),
                (0..groups).map(|g| replica.machine.kept_from(g)).collect(),
            )
        };
        let others_waiting = (0..groups).filter(|&g| g != shared.group).any(|g| lock(&shared.pulled[g]).waiting);
        let trimming = now >= last_trim + TRIM_EVERY;
        if trimming {
            last_trim = now;
            // Waiters whose request gave up (answered `Pending`) and whose command never
            // applied here: its client sent it again, elsewhere or later.
            let mut replica = lock(&shared.replica);
            replica.waiters.retain(|_, waiter| !waiter.answer.is_closed());
            replica.spreading.retain(|spreading| !spreading.sender.is_closed());
        }
        answer_spread(&shared);
        let mut ingests = Vec::new();
        let mut trims = Vec::new();
        for source in (0..groups).filter(|&g| g != shared.group) {
            let mut pulled = lock(&shared.pulled[source]);
            let waiting =
                proposed[source].is_some_and(|(upto, since)| cursors[source] < upto && now < since + INGEST_AGAIN);
            let reaches_past = pulled.start + pulled.outputs.len() as u64 > cursors[source] + 1;
            // Outputs taken into an ingest leave the slot empty: it reaches past the
            // cursor again only with the next pull.
            if !waiting && pulled.start <= cursors[source] + 1 && reaches_past {
                let outputs = std::mem::take(&mut pulled.outputs);
                proposed[source] = Some((pulled.start + outputs.len() as u64 - 1, now));
                ingests.push(Entry::Ingest { source, from: pulled.start, outputs });
            }
            if trimming {
                // A little behind the consumer's cursor is kept too, for resends.
                let upto = pulled.consumed.saturating_sub(32);
                if upto >= kept[source] {
                    trims.push(Entry::Trim { to: source, upto });
                }
            }
        }
        // Forwards ingested here wait in the merge for this group's own watermark too:
        // a tick ahead of them in the same batch (stamped now, past theirs) lets them
        // through as they apply, instead of one more round of the log.
        let forwards_in = ingests.iter().any(|entry| {
            matches!(entry, Entry::Ingest { outputs, .. } if outputs.iter().any(|o| matches!(o, Output::Forward(_))))
        });
        {
            let mut inbox = lock(&shared.inbox);
            let ticking = forwards_in || ((own_waiting || others_waiting) && now >= last_tick + TICK_EVERY);
            if !inbox.commands.is_empty() || ticking {
                let mut commands = std::mem::take(&mut inbox.commands);
                commands.sort_by_key(|command| command.ts);
                let tick = inbox.stamp();
                push(&Entry::Clients { commands, tick });
                last_tick = now;
            }
            for (symbol, to) in std::mem::take(&mut inbox.moves) {
                push(&Entry::MoveSymbol { symbol, to });
            }
        }
        for entry in ingests.iter().chain(&trims) {
            push(entry);
        }
        if !batch.is_empty() {
            let _ = shared.proposer.send(batch);
        }
    }
}

/// Answers the catalog commands every other group has consumed (as this group's pulls
/// from them last said).
fn answer_spread(shared: &Shared) {
    let mut replica = lock(&shared.replica);
    if replica.spreading.is_empty() {
        return;
    }
    let consumed: Vec<u64> = (0..shared.groups)
        .map(|g| if g == shared.group { u64::MAX } else { lock(&shared.pulled[g]).consumed })
        .collect();
    let (spread, waiting): (Vec<Spreading>, Vec<Spreading>) = std::mem::take(&mut replica.spreading)
        .into_iter()
        .partition(|spreading| spreading.needs.iter().zip(&consumed).all(|(needs, consumed)| consumed >= needs));
    replica.spreading = waiting;
    for spreading in spread {
        let _ = spreading.sender.send(spreading.answer);
    }
}

/// Reads `source`'s outputs to this group, from this group's cursor on, from any
/// member of `source` (the next one after a failure), while this member leads.
async fn pull(shared: Arc<Shared>, source: usize, mut stopping: watch::Receiver<bool>) {
    let addresses = shared.directory[source].clone();
    let mut at = shared.group % addresses.len().max(1);
    let mut connection: Option<Connection> = None;
    loop {
        let pause = if !shared.leading() {
            connection = None;
            Duration::from_millis(10)
        } else {
            let cursor = lock(&shared.replica).machine.cursor(source);
            let consumed = lock(&shared.pulled[source]).consumed;
            if connection.is_none() {
                match Connection::open(&addresses[at], shared.client_tls.as_ref()).await {
                    Ok(opened) => connection = Some(opened),
                    Err(error) => {
                        tracing::debug!(%error, source, "pull: connect");
                        at = (at + 1) % addresses.len();
                    }
                }
            }
            match &mut connection {
                None => Duration::from_millis(20),
                Some(open) => {
                    let request = Request::Outputs {
                        to: shared.group,
                        from: cursor + 1,
                        max: PULL_MAX,
                        wait_ms: PULL_WAIT_MS,
                        consumed,
                    };
                    match open.call(&request, Duration::from_secs(2)).await {
                        Ok(Reply::Outputs { start, outputs, consumed, waiting }) => {
                            let more = !outputs.is_empty();
                            *lock(&shared.pulled[source]) = Pulled { start, outputs, consumed, waiting };
                            if more {
                                // Until the ingest applies (or is given up on).
                                let until = Instant::now() + INGEST_AGAIN;
                                while lock(&shared.replica).machine.cursor(source) == cursor && Instant::now() < until {
                                    tokio::time::sleep(FRONT_EVERY).await;
                                }
                                Duration::ZERO
                            } else {
                                Duration::from_millis(2)
                            }
                        }
                        Ok(other) => {
                            tracing::warn!(?other, source, "pull: an unexpected reply");
                            connection = None;
                            at = (at + 1) % addresses.len();
                            Duration::from_millis(20)
                        }
                        Err(error) => {
                            tracing::debug!(%error, source, "pull");
                            connection = None;
                            at = (at + 1) % addresses.len();
                            Duration::from_millis(20)
                        }
                    }
                }
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stopping.changed() => return,
        }
    }
}
