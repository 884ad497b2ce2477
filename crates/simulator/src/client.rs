//! Simulated clients: each numbers its commands 1, 2, 3, … and sends each until it is
//! answered — to the node it believes leads, elsewhere when told or when no answer
//! comes — as the client library does (`crates/client`). Each trades in its own account.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bourse_cluster::NodeId;
use bourse_engine::command::{CommandBody, OrderRequest, Tif};
use bourse_engine::event::Outcome;
use bourse_engine::{AccountId, Amount, AssetId, OrderId, Px, Qty, Side, SymbolId};
use rand::Rng;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::world::{lock, GatewayMsg, NodeMsg, ToClient, ToNode, World, CLIENT_BASE};

/// How long a client waits for an answer before it sends again elsewhere.
const RESEND_AFTER: Duration = Duration::from_millis(300);

/// What one client sent and what it was told.
#[derive(Debug, Default)]
pub struct ClientLog {
    /// Every command by number.
    pub sent: BTreeMap<u64, CommandBody>,
    /// Answers: number → outcome (`None`: acknowledged without one).
    pub acked: BTreeMap<u64, Option<Outcome>>,
    /// When its last command was answered.
    pub done_at: Option<Duration>,
    /// Numbers sent but never answered.
    pub pending: Option<u64>,
}

pub struct Client {
    pub id: u64,
    world: Arc<World>,
    inbox: mpsc::UnboundedReceiver<ToClient>,
    target: NodeId,
    /// The gateway it sends through (none: straight to the nodes).
    gateway: Option<u64>,
    next_seq: u64,
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
        Client { id, world: Arc::clone(world), inbox, target, gateway, next_seq: 1, log: ClientLog::default() }
    }

    /// Sends one command until it is answered; returns its outcome (`None` when the
    /// answer carried none).
    pub async fn call(&mut self, body: CommandBody) -> Option<Outcome> {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.log.sent.insert(seq, body.clone());
        self.log.pending = Some(seq);
        loop {
            let from = CLIENT_BASE + self.id;
            match self.gateway {
                Some(gateway) => {
                    let message = GatewayMsg::Command { client: self.id, seq, body: body.clone() };
                    self.world.to_gateway(from, gateway, message);
                }
                None => {
                    let message = ToNode { client: self.id, seq, body: body.clone(), stamp: None };
                    self.world.to_node(from, self.target, NodeMsg::Command(message));
                }
            }
            let deadline = Instant::now() + RESEND_AFTER;
            let answer = loop {
                match tokio::time::timeout_at(deadline, self.inbox.recv()).await {
                    Ok(Some(ToClient::Ack { seq: acked, outcome })) if acked == seq => break Some(Ok(outcome)),
                    Ok(Some(ToClient::Ack { .. })) => continue,
                    Ok(Some(ToClient::NotLeader { hint })) => break Some(Err(hint)),
                    Ok(None) | Err(_) => break None,
                }
            };
            match answer {
                Some(Ok(outcome)) => {
                    self.world.trace(&[40, self.id, seq, outcome_code(outcome)]);
                    self.world.count(|c| c.acks += 1);
                    self.log.acked.insert(seq, outcome);
                    self.log.pending = None;
                    self.log.done_at = Some(self.world.elapsed());
                    return outcome;
                }
                Some(Err(hint)) => {
                    self.target = match hint {
                        Some(leader) if leader != self.target => leader,
                        _ => self.other_node(),
                    };
                    // A node that knows no leader yet: wait a little before asking again.
                    tokio::time::sleep(Duration::from_millis(self.world.rng(|rng| rng.gen_range(5..40)))).await;
                }
                None => self.target = self.other_node(),
            }
            self.world.count(|c| c.resends += 1);
        }
    }

    fn other_node(&self) -> NodeId {
        let nodes = self.world.options.nodes;
        let step = self.world.rng(|rng| rng.gen_range(1..nodes.max(2)));
        (self.target - 1 + step) % nodes + 1
    }

    /// Trades until `until` (virtual time), then finishes its command in flight.
    pub async fn trade(&mut self, account: AccountId, market: Market, until: Duration) {
        let mut orders: Vec<OrderId> = Vec::new();
        while self.world.elapsed() < until {
            let roll = self.world.rng(|rng| rng.gen_range(0..100));
            let body = match roll {
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
                85..=94 => match orders.pop() {
                    Some(order) => CommandBody::Cancel { account, symbol: market.symbol, order },
                    None => continue,
                },
                _ => CommandBody::Withdraw {
                    account,
                    asset: market.cash,
                    amount: Amount(self.world.rng(|rng| rng.gen_range(100..5_000))),
                },
            };
            let placing = matches!(body, CommandBody::Place(_));
            if let Some(Outcome::Ok { id }) = self.call(body).await {
                if placing {
                    orders.push(OrderId(id));
                }
            }
            let think = self.world.rng(|rng| rng.gen_range(1..30));
            tokio::time::sleep(Duration::from_millis(think)).await;
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
