//! Simulated clients on the client library's own core: the in-flight [`Window`] of
//! `crates/client` (pure state, no I/O) numbers each client's commands, decides what to
//! send and resend, and reads every answer, exactly as `bourse_client::Client` does over
//! gRPC. The simulator supplies its I/O: commands go to the node it believes leads (or
//! to its gateway), a new stream (everything unanswered sent again, from the oldest) when
//! told to go elsewhere or when no answer comes. Each client trades in its own account,
//! with a few commands in flight.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bourse_client::window::{AckEffect, Window};
use bourse_cluster::NodeId;
use bourse_engine::command::{CommandBody, OrderRequest, Tif};
use bourse_engine::event::Outcome;
use bourse_engine::{AccountId, Amount, AssetId, OrderId, Px, Qty, Side, SymbolId};
use rand::Rng;
use tokio::sync::mpsc;

use crate::world::{lock, GatewayMsg, NodeMsg, ToClient, ToNode, World, CLIENT_BASE};

/// How long a client waits for an answer before it sends again elsewhere.
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

pub struct Client {
    pub id: u64,
    world: Arc<World>,
    inbox: mpsc::UnboundedReceiver<ToClient>,
    target: NodeId,
    /// The gateway it sends through (none: straight to the nodes).
    gateway: Option<u64>,
    window: Window<u64>,
    /// When it last sent or heard an answer: no progress for [`RESEND_AFTER`] means
    /// the node is gone, and everything unanswered goes elsewhere.
    progress_at: Duration,
    /// The window found the exchange contradicting itself: the session is over.
    failed: bool,
    /// The current stream (connection): a new one after every [`Window::new_stream`].
    stream: u64,
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
    pub fn new(id: u64, gateway: Option<u64>, world: &Arc<World>) -> Client {
        let (tx, inbox) = mpsc::unbounded_channel();
        lock(&world.clients).insert(id, tx);
        let target = world.rng(|rng| rng.gen_range(1..=world.options.nodes));
        let window = Window::new(IN_FLIGHT);
        Client {
            id,
            world: Arc::clone(world),
            inbox,
            target,
            gateway,
            window,
            progress_at: Duration::ZERO,
            failed: false,
            stream: 0,
            log: ClientLog::default(),
        }
    }

    fn push(&mut self, body: CommandBody) -> u64 {
        let seq = self.window.push(&body, 0).unwrap_or_else(|_| unreachable!("pushed only when not full"));
        self.log.sent.insert(seq, body);
        seq
    }

    /// Sends what the window says is due.
    fn flush(&mut self) {
        let from = CLIENT_BASE + self.id;
        let commands = self.window.take_sendable(64);
        if !commands.is_empty() {
            self.progress_at = self.world.elapsed();
        }
        for command in commands {
            match self.gateway {
                Some(gateway) => {
                    let message = GatewayMsg::Command { client: self.id, stream: self.stream, command };
                    self.world.to_gateway(from, gateway, message);
                }
                None => {
                    let message = ToNode { client: self.id, command, stream: self.stream, stamp: None };
                    self.world.to_node(from, self.target, NodeMsg::Command(Box::new(message)));
                }
            }
        }
    }

    /// Waits up to `wait` for one answer, lets the window read it, goes elsewhere when
    /// nothing came for [`RESEND_AFTER`], and sends what is due; returns the command it
    /// completed, if any.
    async fn step(&mut self, wait: Duration) -> Option<(u64, Option<Outcome>)> {
        let mut completed = None;
        match tokio::time::timeout(wait, self.inbox.recv()).await {
            Ok(Some(ToClient::Ack(_, stream) | ToClient::NotLeader { stream, .. })) if stream != self.stream => {
                // On a stream this client has closed: it never arrives.
            }
            Ok(Some(ToClient::Ack(ack, _))) => {
                self.progress_at = self.world.elapsed();
                let seq = ack.seq;
                match self.window.on_ack(ack).0 {
                    AckEffect::Completed { result, .. } => {
                        let outcome = result.ok().map(|reply| reply.outcome);
                        self.world.trace(&[40, self.id, seq, outcome_code(outcome)]);
                        self.world.count(|c| c.acks += 1);
                        self.log.acked.insert(seq, outcome);
                        completed = Some((seq, outcome));
                    }
                    AckEffect::Rewound => self.world.count(|c| c.resends += 1),
                    AckEffect::Fatal(error) => {
                        // The session ends, as the client library ends it.
                        self.world.violation(format!("client {}: {error}", self.id));
                        self.window.drain_tokens();
                        self.failed = true;
                        return None;
                    }
                    AckEffect::Stale | AckEffect::FillerDone => {}
                }
            }
            Ok(Some(ToClient::NotLeader { hint, .. })) => {
                self.target = match hint {
                    Some(leader) if leader != self.target => leader,
                    _ => self.other_node(),
                };
                self.new_stream();
                self.world.count(|c| c.resends += 1);
                // A node that knows no leader yet: wait a little before asking again.
                tokio::time::sleep(Duration::from_millis(self.world.rng(|rng| rng.gen_range(5..40)))).await;
            }
            Ok(None) => {}
            Err(_) => {
                let silent = self.world.elapsed().saturating_sub(self.progress_at) >= RESEND_AFTER;
                if silent && !self.window.is_empty() {
                    self.target = self.other_node();
                    self.new_stream();
                    self.world.count(|c| c.resends += 1);
                }
            }
        }
        self.flush();
        completed
    }

    fn new_stream(&mut self) {
        self.window.new_stream();
        self.stream += 1;
    }

    /// Sends one command and waits for its answer (the window holds nothing else).
    pub async fn call(&mut self, body: CommandBody) -> Option<Outcome> {
        let seq = self.push(body);
        self.flush();
        while !self.failed {
            if let Some((done, outcome)) = self.step(RESEND_AFTER).await {
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
            let completed = self.step(wait.max(Duration::from_micros(1))).await;
            if let Some((seq, Some(Outcome::Ok { id }))) = completed {
                if matches!(self.log.sent.get(&seq), Some(CommandBody::Place(_))) {
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
