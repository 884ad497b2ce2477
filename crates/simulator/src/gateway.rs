//! Simulated gateways: the real gateway ([`bourse_gateway::Gateway::start_in_process`]:
//! its sessions, stamps, pipe, link with its failover and resends, heartbeats, feed and
//! market data hold-and-release), on a clock of its own (skewed, drifting, and jumping
//! when the faults say so), reaching every node through the simulated network.

use std::sync::Arc;

use bourse_fairness::{Clock, TimeSource};
use bourse_gateway::{Gateway, GatewayConfig, KeyStore, LocalNode};
use bourse_protocol::proto;
use prost::Message;
use tokio_stream::StreamExt;

use crate::net::{carry, ends, reset, Way};
use crate::oracle::Arrival;
use crate::world::{lock, World, GATEWAY_BASE};
use crate::Plant;

/// How long after its log time every gateway releases an entry's market data (d_h).
pub const HOLD_US: u64 = 5_000;
/// How often an idle gateway sends its clock.
const HEARTBEAT_US: u64 = 5_000;
/// How far a gateway stamp may be behind a node's clock before the node moves it up
/// (the node's `link_stamp_bound_ms`, as configured).
const STAMP_BOUND_NS: u64 = 250_000_000;

/// A gateway's clock as true time: virtual time plus its offset and drift.
struct GatewayTime {
    world: Arc<World>,
    number: u64,
}

impl TimeSource for GatewayTime {
    fn now_ns(&self) -> u64 {
        self.world.gateway_now_ns(self.number)
    }
}

/// The gateway's id for the sequencer (ids start at 1).
pub fn gateway_id(number: u64) -> u32 {
    number as u32 + 1
}

/// Starts gateway `number` (without keys: every session acts for every account).
pub async fn start(number: u64, world: &Arc<World>) -> Result<Gateway, String> {
    let nodes: Vec<String> = (1..=world.options.nodes).map(|id| format!("node-{id}")).collect();
    let mut config = GatewayConfig::new(gateway_id(number), "127.0.0.1:0".parse().expect("an address"), nodes);
    config.open = true;
    config.hold_us = HOLD_US;
    config.heartbeat_us = HEARTBEAT_US;
    config.probe = true;
    config.subscriber_buffer = 1_024;
    config.clock = Clock::simulated(Arc::new(GatewayTime { world: Arc::clone(world), number }));
    config.local_nodes = (1..=world.options.nodes).map(|node| local_node(world, number, node)).collect();
    let keys = KeyStore::from_entries(Vec::new()).map_err(|e| e.to_string())?;
    Gateway::start_in_process(config, keys).await.map_err(|e| e.to_string())
}

/// How gateway `number` reaches node `node`: its link and its feed, each a connection
/// through the simulated network to the node's current process.
fn local_node(world: &Arc<World>, number: u64, node: u64) -> LocalNode {
    let from = GATEWAY_BASE + number;
    let link = {
        let world = Arc::clone(world);
        Arc::new(move |up: bourse_gateway::config::LocalUp| {
            let unreachable = || tonic::Status::unavailable(format!("node-{node} does not answer"));
            let process = lock(&world.processes).get(&node).cloned().ok_or_else(unreachable)?;
            let conn = world.connect(from, node).ok_or_else(unreachable)?;
            let arrivals = Arc::clone(&world);
            let record = move |up: proto::GatewayUp| {
                arrived(&arrivals, node, &up);
                up
            };
            let up = carry(&world, &conn, Way::Up, up, |m: &proto::GatewayUp| m.encoded_len(), ends, record);
            let planted = world.options.plant == Some(Plant::AckBeforeCommit);
            let (up, early) = if planted { answer_on_arrival(&world, up) } else { (Box::pin(up) as _, None) };
            let down = process.local_link().link(up)?;
            let down: bourse_gateway::config::NodeStream<proto::GatewayDown> = match early {
                Some(early) => Box::pin(down.merge(early)),
                None => down,
            };
            let down =
                carry(&world, &conn, Way::Down, down, |m| m.as_ref().map_or(0, |m| m.encoded_len()), reset, |m| m);
            Ok(Box::pin(down) as bourse_gateway::config::NodeStream<proto::GatewayDown>)
        }) as bourse_gateway::config::LinkOpener
    };
    let feed = {
        let world = Arc::clone(world);
        Arc::new(move || -> bourse_gateway::config::FeedFuture {
            let world = Arc::clone(&world);
            Box::pin(async move {
                let unreachable = || tonic::Status::unavailable(format!("node-{node} does not answer"));
                let process = lock(&world.processes).get(&node).cloned().ok_or_else(unreachable)?;
                let conn = world.connect(from, node).ok_or_else(unreachable)?;
                let feed = process.local_link().feed().await?;
                let times = Arc::clone(&world);
                let deliver = move |message: Result<proto::FeedMessage, tonic::Status>| released(&times, message);
                let size = |m: &Result<proto::FeedMessage, tonic::Status>| m.as_ref().map_or(0, |m| m.encoded_len());
                let feed = carry(&world, &conn, Way::Down, feed, size, reset, deliver);
                Ok(Box::pin(feed) as bourse_gateway::config::NodeStream<proto::FeedMessage>)
            })
        }) as bourse_gateway::config::FeedOpener
    };
    LocalNode { addr: format!("node-{node}"), link, feed }
}

/// A gateway's message reached node `node`'s link reader: each command it carries is
/// recorded where and when it arrived, with the stamp the sequencer takes (the oracle
/// holds the log to it).
fn arrived(world: &World, node: u64, up: &proto::GatewayUp) {
    if up.batches.is_empty() {
        return;
    }
    // The link moves a stamp too far behind the node's clock up to the bound.
    let floor = world.node_now_ns(node).saturating_sub(STAMP_BOUND_NS);
    let at = world.elapsed();
    let mut oracle = lock(&world.oracle);
    for batch in &up.batches {
        let stamp = bourse_fairness::Stamp {
            ts: batch.gateway_ts.max(floor),
            gateway: up.gateway,
            gateway_seq: batch.gateway_seq,
        };
        for command in &batch.commands {
            oracle.arrived(batch.client_id, command.seq, Arrival { node, stamp, at });
        }
    }
}

/// A feed message reaching a gateway: each entry's release time is noted for the check,
/// and with the planted bug, changed so that the entry goes out at its log time.
fn released(
    world: &World,
    mut message: Result<proto::FeedMessage, tonic::Status>,
) -> Result<proto::FeedMessage, tonic::Status> {
    if let Ok(proto::FeedMessage { body: Some(proto::feed_message::Body::Entry(entry)) }) = &mut message {
        let release_ts = if entry.release_ts > 0 { entry.release_ts } else { entry.ts + HOLD_US * 1_000 };
        lock(&world.release_times).insert(entry.log_index, release_ts);
        if world.options.plant == Some(Plant::EarlyMarketData) {
            // Planted: the entry's market data is released at its log time.
            entry.release_ts = entry.ts;
        }
    }
    message
}

/// Planted: the node answers every command of a gateway's message as it arrives, before
/// it is even proposed. Returns the link's inbound and the early answers.
fn answer_on_arrival(
    world: &Arc<World>,
    up: impl tokio_stream::Stream<Item = proto::GatewayUp> + Send + Unpin + 'static,
) -> (bourse_gateway::config::LocalUp, Option<bourse_gateway::config::NodeStream<proto::GatewayDown>>) {
    let (early, answers) = tokio::sync::mpsc::unbounded_channel();
    let trading = Arc::clone(world);
    let up = up.map(move |message: proto::GatewayUp| {
        if trading.trading.load(std::sync::atomic::Ordering::Relaxed) {
            let replies = message
                .batches
                .iter()
                .map(|batch| proto::ClientReply {
                    client_id: batch.client_id,
                    batch: Some(proto::ServerBatch {
                        acks: batch
                            .commands
                            .iter()
                            .map(|c| proto::Ack { seq: c.seq, ..proto::Ack::default() })
                            .collect(),
                        ..proto::ServerBatch::default()
                    }),
                })
                .collect();
            let _ = early.send(Ok(proto::GatewayDown { replies, refused: Vec::new() }));
        }
        message
    });
    (Box::pin(up), Some(Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(answers))))
}

/// Every market data release of `gateway` so far is checked against the entry's
/// release time: never before it, by the gateway's clock.
pub fn check_releases(world: &World, number: u64, gateway: &Gateway) {
    let times = lock(&world.release_times);
    for release in gateway.probe().take() {
        world.count(|c| c.market_data += 1);
        world.trace(&[81, number, release.log_index]);
        let Some(&release_ts) = times.get(&release.log_index) else { continue };
        if release.released_local < release_ts {
            world.violation(format!(
                "gateway {number}: market data of entry {} released at {}, {} ns before its release time (the \
                 gateway took it for {}, log time {})",
                release.log_index,
                release.released_local,
                release_ts - release.released_local,
                release.release_ts,
                release.ts
            ));
        }
    }
}
