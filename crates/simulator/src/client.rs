//! Simulated clients on the client library's own core: the in-flight [`Window`] of
//! `crates/client` (pure state, no I/O) numbers each client's commands, decides what to
//! send and resend, and reads every answer, exactly as `bourse_client::Client` does over
//! gRPC. The simulator supplies its I/O: an `OrderEntry.Session` stream, over a
//! simulated connection, to the real session service of its gateway or of the node it
//! believes leads; a new stream (everything unanswered sent again, from the oldest)
//! when the stream ends, when a node says to go elsewhere, or when no answer comes.
//! Each client trades in its own account, with a few commands in flight.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bourse_client::window::{AckEffect, Window};
use bourse_cluster::NodeId;
use bourse_engine::command::{CommandBody, OrderRequest, Tif};
use bourse_engine::event::Outcome;
use bourse_engine::{AccountId, Amount, AssetId, OrderId, Px, Qty, Side, SymbolId};
use bourse_gateway::Gateway;
use bourse_protocol::proto;
use prost::Message;
use rand::Rng;
use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt};

use crate::net::{carry, reset, Way};
use crate::world::{lock, World, CLIENT_BASE, GATEWAY_BASE};
use crate::Plant;

/// How long a client waits for an answer before it opens a new stream (elsewhere, when
/// it talks to the nodes).
const RESEND_AFTER: Duration = Duration::from_millis(300);

/// Commands a trading client keeps in flight.
const IN_FLIGHT: usize = 4;

/// What one client sent and what it was told.
#[derive(Debug, Default)]
pub struct ClientLog {
    /// Every command by number.
    pub sent: BTreeMap<u64, CommandBody>,
    /// Answers: number → outcome (`None`: answered without one).
    pub acked: BTreeMap<u64, Option<Outcome>>,
}

/// Where a client sends: straight to the nodes, or to its gateway.
#[derive(Clone)]
pub enum Via {
    Nodes,
    Gateway { number: u64, gateway: bourse_client::LocalGateway },
}

type Answers = Pin<Box<dyn Stream<Item = Result<proto::ServerBatch, tonic::Status>> + Send>>;

/// An open session stream.
struct Session {
    up: mpsc::UnboundedSender<Result<proto::ClientBatch, tonic::Status>>,
    answers: Answers,
}

pub struct Client {
    pub id: u64,
    /// The client id the exchange knows it by (its engine's session record).
    pub engine_id: u64,
    world: Arc<World>,
    via: Via,
    target: NodeId,
    session: Option<Session>,
    window: Window<u64>,
    /// When it last sent or heard an answer: no progress for [`RESEND_AFTER`] means
    /// the stream is dead, and everything unanswered goes on a new one.
    progress_at: Duration,
    /// Not before this does it open a stream again (after a refusal or a break).
    reopen_at: Duration,
    /// The window found the exchange contradicting itself: the session is over.
    failed: bool,
    pub log: ClientLog,
}

/// The market the clients trade in, made by the setup client.
#[derive(Clone, Copy, Debug)]
pub struct Market {
    pub cash: AssetId,
    pub shares: AssetId,
    pub symbol: SymbolId,
}

impl Client {
    pub fn new(id: u64, via: Via, world: &Arc<World>) -> Client {
        let target = world.rng(|rng| rng.gen_range(1..=world.options.nodes));
        let engine_id = match &via {
            Via::Nodes => id + 1,
            Via::Gateway { number, .. } => {
                let gateway = crate::gateway::gateway_id(*number);
                bourse_gateway::Principal::open().claim("", gateway, id + 1).client_id
            }
        };
        Client {
            id,
            engine_id,
            world: Arc::clone(world),
            via,
            target,
            session: None,
            window: Window::new(IN_FLIGHT),
            progress_at: Duration::ZERO,
            reopen_at: Duration::ZERO,
            failed: false,
            log: ClientLog::default(),
        }
    }

    fn fabric_id(&self) -> u64 {
        CLIENT_BASE + self.id
    }

    fn push(&mut self, body: CommandBody) -> u64 {
        let seq = self.window.push(&body, 0).unwrap_or_else(|_| unreachable!("pushed only when not full"));
        self.log.sent.insert(seq, body);
        seq
    }

    /// Opens a session stream where the client sends; none for now when it cannot.
    fn open(&mut self) -> Option<Session> {
        let world = Arc::clone(&self.world);
        let server = match &self.via {
            Via::Nodes => self.target,
            Via::Gateway { number, .. } => GATEWAY_BASE + number,
        };
        let Some(conn) = world.connect(self.fabric_id(), server) else {
            self.elsewhere(None);
            return None;
        };
        let (up, outgoing) = mpsc::unbounded_channel();
        let outgoing = tokio_stream::wrappers::UnboundedReceiverStream::new(outgoing);
        let size = |m: &Result<proto::ClientBatch, tonic::Status>| m.as_ref().map_or(0, |m| m.encoded_len());
        let opened = match &self.via {
            Via::Nodes => {
                let Some(process) = lock(&world.processes).get(&self.target).cloned() else {
                    self.elsewhere(None);
                    return None;
                };
                let planted = world.options.plant == Some(Plant::AckBeforeCommit);
                let (early, answers) = mpsc::unbounded_channel::<Result<proto::ServerBatch, tonic::Status>>();
                let trading = Arc::clone(&world);
                let inbound = carry(&world, &conn, Way::Up, outgoing, size, reset, move |batch| {
                    // Planted: the node answers each command as it arrives.
                    if let (true, Ok(batch)) =
                        (planted && trading.trading.load(std::sync::atomic::Ordering::Relaxed), &batch)
                    {
                        let acks = batch.commands.iter().map(|c| proto::Ack { seq: c.seq, ..proto::Ack::default() });
                        let _ = early.send(Ok(proto::ServerBatch { acks: acks.collect(), ..Default::default() }));
                    }
                    batch
                });
                let inbound = inbound.map_while(Result::ok);
                process.local_sessions().session(inbound).map(|node_answers| {
                    if planted {
                        let early = tokio_stream::wrappers::UnboundedReceiverStream::new(answers);
                        Box::pin(node_answers.merge(early)) as Answers
                    } else {
                        node_answers
                    }
                })
            }
            Via::Gateway { gateway, .. } => {
                let inbound = carry(&world, &conn, Way::Up, outgoing, size, reset, |m| m);
                gateway.0.session(tonic::Request::new(Box::pin(inbound))).map(|answers| Box::pin(answers) as Answers)
            }
        };
        match opened {
            Ok(answers) => {
                let size = |m: &Result<proto::ServerBatch, tonic::Status>| m.as_ref().map_or(0, |m| m.encoded_len());
                let answers = carry(&world, &conn, Way::Down, answers, size, reset, |m| m);
                Some(Session { up, answers: Box::pin(answers) })
            }
            Err(status) => {
                conn.break_off();
                self.elsewhere(Some(&status));
                None
            }
        }
    }

    /// The stream is over (or never opened): the next one goes to the leader the node
    /// named, or to another node, after a little while.
    fn elsewhere(&mut self, status: Option<&tonic::Status>) {
        self.session = None;
        self.window.new_stream();
        self.world.count(|c| c.resends += 1);
        if let Via::Nodes = self.via {
            let hint = status
                .and_then(|s| s.metadata().get("bourse-leader"))
                .and_then(|v| v.to_str().ok())
                .and_then(|api| api.strip_prefix("node-"))
                .and_then(|id| id.parse::<NodeId>().ok());
            self.target = match hint {
                Some(leader) if leader != self.target => leader,
                _ => self.other_node(),
            };
        }
        // A node that knows no leader yet, or a broken connection: wait a little.
        let pause = Duration::from_millis(self.world.rng(|rng| rng.gen_range(5..40)));
        self.reopen_at = self.world.elapsed() + pause;
    }

    /// Sends what the window says is due, on the open stream (opening one when it may).
    fn flush(&mut self) {
        if self.session.is_none() {
            if self.window.is_empty() || self.world.elapsed() < self.reopen_at {
                return;
            }
            self.session = self.open();
            if self.session.is_none() {
                return;
            }
        }
        let commands = self.window.take_sendable(64);
        if commands.is_empty() {
            return;
        }
        self.progress_at = self.world.elapsed();
        let batch = proto::ClientBatch { client_id: self.id + 1, commands };
        let session = self.session.as_ref().expect("opened above");
        if session.up.send(Ok(batch)).is_err() {
            self.elsewhere(None);
        }
    }

    /// Waits up to `wait` for answers, lets the window read them, opens a new stream
    /// when this one ended or nothing came for [`RESEND_AFTER`], and sends what is due;
    /// returns the commands it completed.
    async fn step(&mut self, wait: Duration) -> Vec<(u64, Option<Outcome>)> {
        let mut completed = Vec::new();
        let wait = match self.session {
            None => wait.min(self.reopen_at.saturating_sub(self.world.elapsed()).max(Duration::from_micros(1))),
            Some(_) => wait,
        };
        let next = match &mut self.session {
            Some(session) => tokio::time::timeout(wait, session.answers.next()).await.ok(),
            None => {
                tokio::time::sleep(wait).await;
                None
            }
        };
        match next {
            Some(Some(Ok(batch))) => {
                self.progress_at = self.world.elapsed();
                for ack in batch.acks {
                    let seq = ack.seq;
                    match self.window.on_ack(ack).0 {
                        AckEffect::Completed { result, .. } => {
                            let outcome = result.ok().map(|reply| reply.outcome);
                            self.world.trace(&[40, self.id, seq, outcome_code(outcome)]);
                            self.world.count(|c| c.acks += 1);
                            self.log.acked.insert(seq, outcome);
                            completed.push((seq, outcome));
                        }
                        AckEffect::Rewound => self.world.count(|c| c.resends += 1),
                        AckEffect::Fatal(error) => {
                            // The session ends, as the client library ends it.
                            self.world.violation(format!("client {}: {error}", self.id));
                            self.window.drain_tokens();
                            self.failed = true;
                            return completed;
                        }
                        AckEffect::Stale | AckEffect::FillerDone => {}
                    }
                }
            }
            Some(Some(Err(status))) => self.elsewhere(Some(&status)),
            Some(None) => self.elsewhere(None),
            None => {
                let silent = self.world.elapsed().saturating_sub(self.progress_at) >= RESEND_AFTER;
                if silent && self.session.is_some() && !self.window.is_empty() {
                    if let Via::Nodes = self.via {
                        self.target = self.other_node();
                    }
                    self.session = None;
                    self.window.new_stream();
                    self.world.count(|c| c.resends += 1);
                }
            }
        }
        self.flush();
        completed
    }

    /// Sends one command and waits for its answer (the window holds nothing else).
    pub async fn call(&mut self, body: CommandBody) -> Option<Outcome> {
        let seq = self.push(body);
        self.flush();
        while !self.failed {
            for (done, outcome) in self.step(RESEND_AFTER).await {
                if done == seq {
                    return outcome;
                }
            }
        }
        None
    }

    fn other_node(&self) -> NodeId {
        let nodes = self.world.options.nodes;
        let step = self.world.rng(|rng| rng.gen_range(1..nodes.max(2)));
        (self.target - 1 + step) % nodes + 1
    }

    /// The next command of a trader in `account`, or `None` when it has nothing to cancel.
    fn next_command(&self, account: AccountId, market: Market, orders: &mut Vec<OrderId>) -> Option<CommandBody> {
        let roll = self.world.rng(|rng| rng.gen_range(0..100));
        Some(match roll {
            0..=19 => CommandBody::Deposit {
                account,
                asset: market.cash,
                amount: Amount(self.world.rng(|rng| rng.gen_range(1_000..20_000))),
            },
            20..=29 => CommandBody::Credit {
                account,
                asset: market.shares,
                amount: Amount(self.world.rng(|rng| rng.gen_range(1..50))),
            },
            30..=84 => {
                let (side, px, qty) = self.world.rng(|rng| {
                    let side = if rng.gen_bool(0.5) { Side::Buy } else { Side::Sell };
                    (side, rng.gen_range(95..=105), rng.gen_range(1..=10))
                });
                CommandBody::Place(OrderRequest::limit(account, market.symbol, side, Px(px), Qty(qty), Tif::Gtc))
            }
            85..=94 => CommandBody::Cancel { account, symbol: market.symbol, order: orders.pop()? },
            _ => CommandBody::Withdraw {
                account,
                asset: market.cash,
                amount: Amount(self.world.rng(|rng| rng.gen_range(100..5_000))),
            },
        })
    }

    /// Trades until `until` (virtual time), keeping a few commands in flight, then
    /// waits for every answer.
    pub async fn trade(&mut self, account: AccountId, market: Market, until: Duration) {
        let mut orders: Vec<OrderId> = Vec::new();
        let mut next_at = Duration::ZERO;
        loop {
            let now = self.world.elapsed();
            let trading = now < until;
            if self.failed || (!trading && self.window.is_empty()) {
                return;
            }
            if trading && now >= next_at && !self.window.is_full() {
                if let Some(body) = self.next_command(account, market, &mut orders) {
                    self.push(body);
                    self.flush();
                }
                next_at = now + Duration::from_millis(self.world.rng(|rng| rng.gen_range(1..30)));
                continue;
            }
            let wait = if trading && !self.window.is_full() { next_at.saturating_sub(now) } else { RESEND_AFTER };
            for (seq, outcome) in self.step(wait.max(Duration::from_micros(1))).await {
                if let (Some(Outcome::Ok { id }), Some(CommandBody::Place(_))) = (outcome, self.log.sent.get(&seq)) {
                    orders.push(OrderId(id));
                }
            }
        }
    }
}

pub fn outcome_code(outcome: Option<Outcome>) -> u64 {
    match outcome {
        None => u64::MAX,
        Some(Outcome::Ok { id }) => id,
        Some(Outcome::Rejected(reject)) => (1 << 63) | reject as u64,
    }
}

/// The gateway of a client, as `Via` holds it.
pub fn via_gateway(number: u64, gateway: &Gateway) -> Via {
    Via::Gateway { number, gateway: gateway.local() }
}
