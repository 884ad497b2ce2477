//! Simulated gateways: each stamps its clients' commands with its own clock (skewed,
//! drifting, and jumping when the faults say so), forwards them to the node it believes
//! leads, sends that node its watermark, passes answers back, and holds market data in
//! the real [`HoldQueue`] until the release time, by its own clock, as the gateway does
//! (`crates/gateway`).

use std::sync::Arc;
use std::time::Duration;

use bourse_cluster::NodeId;
use bourse_fairness::{HoldQueue, Stamp};
use rand::Rng;
use tokio::sync::mpsc;

use crate::world::{lock, GatewayMsg, NodeMsg, ToClient, ToNode, World, GATEWAY_BASE};
use crate::Plant;

/// The fair sequencer's window d_s.
pub const WINDOW_NS: u64 = 2_000_000;
/// How long after its log time every gateway releases an entry's market data (d_h).
pub const HOLD_NS: u64 = 5_000_000;
/// How often a gateway sends its watermark.
const HEARTBEAT: Duration = Duration::from_millis(5);

pub struct Gateway {
    number: u64,
    world: Arc<World>,
    inbox: mpsc::UnboundedReceiver<GatewayMsg>,
    target: NodeId,
    last_stamp: u64,
    seq: u64,
    hold: HoldQueue<u64>,
}

impl Gateway {
    pub fn new(number: u64, world: &Arc<World>) -> Gateway {
        let (tx, inbox) = mpsc::unbounded_channel();
        lock(&world.gateways).insert(number, tx);
        let target = world.rng(|rng| rng.gen_range(1..=world.options.nodes));
        Gateway { number, world: Arc::clone(world), inbox, target, last_stamp: 0, seq: 0, hold: HoldQueue::new() }
    }

    fn id(&self) -> u64 {
        GATEWAY_BASE + self.number
    }

    fn now(&self) -> u64 {
        self.world.gateway_now_ns(self.number)
    }

    /// The gateway's promise: nothing it stamps from now on is earlier than this.
    fn watermark(&self) -> u64 {
        self.now().max(self.last_stamp + 1)
    }

    pub async fn run(mut self) {
        let mut heartbeat_at = tokio::time::Instant::now();
        loop {
            let mut wake = heartbeat_at;
            if let Some(due) = self.hold.next_due() {
                let wait = Duration::from_nanos(due.saturating_sub(self.now()));
                wake = wake.min(tokio::time::Instant::now() + wait);
            }
            match tokio::time::timeout_at(wake, self.inbox.recv()).await {
                Ok(Some(message)) => self.handle(message),
                Ok(None) => return,
                Err(_) => {}
            }
            self.release_due();
            if tokio::time::Instant::now() >= heartbeat_at {
                let watermark = self.watermark();
                self.world.to_node(
                    self.id(),
                    self.target,
                    NodeMsg::Heartbeat { gateway: self.number as u32, watermark },
                );
                heartbeat_at = tokio::time::Instant::now() + HEARTBEAT;
            }
        }
    }

    fn handle(&mut self, message: GatewayMsg) {
        match message {
            GatewayMsg::Command { client, stream, command } => {
                let ts = self.watermark();
                self.last_stamp = ts;
                self.seq += 1;
                let stamp = Stamp { ts, gateway: self.number as u32, gateway_seq: self.seq };
                self.world.trace(&[80, self.number, client, command.seq, ts]);
                let command = ToNode { client, command, stream, stamp: Some(stamp) };
                self.world.to_node(self.id(), self.target, NodeMsg::Command(Box::new(command)));
            }
            GatewayMsg::Reply { client, message } => self.world.to_client(self.id(), client, message),
            GatewayMsg::Refused { hint, command } => {
                self.target = match hint {
                    Some(leader) if leader != self.target => leader,
                    _ => self.world.rng(|rng| rng.gen_range(1..=self.world.options.nodes)),
                };
                // The client sends it again (restamped) once told.
                self.world.to_client(
                    self.id(),
                    command.client,
                    ToClient::NotLeader { hint: None, stream: command.stream },
                );
            }
            GatewayMsg::Feed { index, release_ts } => {
                let now = self.now();
                if self.world.options.plant == Some(Plant::EarlyMarketData) {
                    // Planted: market data goes out as it arrives.
                    self.released(index, release_ts, now);
                } else {
                    self.hold.push(now, release_ts, index);
                }
            }
        }
    }

    fn release_due(&mut self) {
        let now = self.now();
        while let Some(due) = self.hold.pop_due(now) {
            self.released(due.item, due.release_ts, now);
        }
    }

    /// Market data of entry `index` leaves the gateway at `now` (its clock).
    fn released(&self, index: u64, release_ts: u64, now: u64) {
        self.world.trace(&[81, self.number, index]);
        self.world.count(|c| c.market_data += 1);
        if now < release_ts {
            self.world.violation(format!(
                "gateway {}: market data of entry {index} released at {now}, {} ns before its release time",
                self.number,
                release_ts - now
            ));
        }
    }
}
