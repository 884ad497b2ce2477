//! Gateway settings, each with its default and bound.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bourse_fairness::inject::{Profile, ProfileSpec};
use bourse_protocol::proto;
use tokio_stream::Stream;

/// Everything a gateway needs to start.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// This gateway's id: unique among the exchange's gateways (the sequencer's
    /// tie-break and watermark key).
    pub id: u32,
    /// The client-facing gRPC address.
    pub listen: SocketAddr,
    /// Prometheus `/metrics` address; none to serve no metrics.
    pub metrics_listen: Option<SocketAddr>,
    /// Client addresses of the cluster's nodes; the link goes to the leader (following
    /// the nodes' `bourse-leader` hints).
    pub cluster: Vec<String>,
    /// Nodes to read the order-level feed from, in order of preference (empty: the
    /// cluster's, last first, so a follower serves it when one is listed).
    pub feed: Vec<String>,
    /// d_h, in microseconds: market data caused at leader time t_m is released to this
    /// gateway's subscribers when the gateway clock reaches t_m + d_h.
    pub hold_us: u64,
    /// Run the release thread under `SCHED_FIFO` at this priority (1–99), so that it
    /// wakes at each release instant even while ordinary threads hold every CPU. Needs
    /// `CAP_SYS_NICE`; when refused the gateway warns and runs at ordinary priority.
    /// None: ordinary priority.
    pub release_priority: Option<u8>,
    /// Puts off each market data release by a pseudo-random 0 to this many µs, drawn
    /// from (`release_jitter_seed`, the entry's log index, the gateway id): a random
    /// speed bump (ParFX's, in miniature). Where gateways share CPUs, the order their
    /// release threads run in at one release instant is otherwise the same every time,
    /// and so is which gateway's traders react first; with the jitter it is drawn anew
    /// for every entry. Costs up to this much delivery spread. 0: none.
    pub release_jitter_us: u64,
    /// The seed of the release jitter (the same on every gateway of an exchange).
    pub release_jitter_seed: u64,
    /// How often an idle gateway tells the sequencer its clock (the watermark).
    pub heartbeat_us: u64,
    /// Commands per second a key may send on average, and in a burst, over all its
    /// sessions (a session of the gateway's own front ends has its own).
    pub rate_per_sec: u64,
    pub burst: u64,
    /// Commands of one session forwarded and not yet answered, at most.
    pub in_flight_max: usize,
    /// Commands one client batch may carry.
    pub batch_commands_max: usize,
    /// Market data releases buffered per subscriber before it is dropped as too slow.
    pub subscriber_buffer: usize,
    /// Order-entry sessions one key may hold open at once (the gateway's own front ends,
    /// which carry many users under their process keys, are not held to it).
    pub sessions_per_key_max: usize,
    /// Market data subscriptions one key may hold open at once, and all keys together.
    pub subscriptions_per_key_max: usize,
    pub subscriptions_max: usize,
    /// Injected delay and clock error (for measuring fairness on one machine).
    pub inject: Profile,
    /// Keep a record of every market data release (for `bourse bench fairness`).
    pub probe: bool,
    /// Accept sessions without a key (every session acts for every account). For tests
    /// and benchmarks on loopback only.
    pub open: bool,
    /// Nodes in this process (`bourse serve --gateway`'s one; every node of the
    /// deterministic simulator's cluster): the link to their addresses and the feed
    /// from them skip the network (other addresses, after a failover, are reached over
    /// gRPC as usual).
    pub local_nodes: Vec<LocalNode>,
    /// Where the gateway reads true time: the system clock, or the deterministic
    /// simulator's, under which its market data release runs as a task
    /// ([`bourse_fairness::Clock`]).
    pub clock: bourse_fairness::Clock,
    /// Mutual TLS to the nodes, with the certificate issued to `gateway ID` (nodes with
    /// the cluster's PKI take links, order entry, queries and the feed from it, and a
    /// link only under its certificate's id).
    pub tls: Option<bourse_client::ClientTls>,
    /// The certificate `Admin.Submit` is relayed under (an `operator` one): nodes take
    /// Admin calls from operators only, so a gateway relays its admin keys' commands
    /// only when an operator gave it one of theirs. Without it, such calls go with `tls`
    /// and the node refuses them (`PERMISSION_DENIED`).
    pub admin_tls: Option<bourse_client::ClientTls>,
    /// TLS on the client-facing gRPC port (`listen`), with this certificate; clients
    /// dial it trusting its CA (`ClientTls::trusting`). `None`: plaintext.
    pub edge_tls: Option<bourse_pki::EdgeTls>,
}

/// What a gateway sends up a link, handed over in process.
pub type LocalUp = Pin<Box<dyn Stream<Item = proto::GatewayUp> + Send>>;
/// A stream of a node's replies, as a gRPC stream or handed over in process.
pub type NodeStream<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send>>;
/// Opens a link to the node in this process (`GatewayLink.Link` without the network).
pub type LinkOpener = Arc<dyn Fn(LocalUp) -> Result<NodeStream<proto::GatewayDown>, tonic::Status> + Send + Sync>;
/// Opening the feed of a node in this process.
pub type FeedFuture = Pin<Box<dyn Future<Output = Result<NodeStream<proto::FeedMessage>, tonic::Status>> + Send>>;
/// Opens the feed of the node in this process (`GatewayLink.Feed` without the network).
pub type FeedOpener = Arc<dyn Fn() -> FeedFuture + Send + Sync>;

/// A node in the gateway's own process (`bourse serve --gateway`), and how to reach
/// its `GatewayLink` service without a socket.
#[derive(Clone)]
pub struct LocalNode {
    /// The node's client address, as `cluster` and `feed` name it.
    pub addr: String,
    pub link: LinkOpener,
    pub feed: FeedOpener,
}

impl LocalNode {
    /// Whether `target` names this node.
    pub fn is_at(&self, target: &str) -> bool {
        bourse_client::same_address(&self.addr, target)
    }
}

impl std::fmt::Debug for LocalNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalNode").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl GatewayConfig {
    pub fn new(id: u32, listen: SocketAddr, cluster: Vec<String>) -> Self {
        GatewayConfig {
            id,
            listen,
            metrics_listen: None,
            cluster,
            feed: Vec::new(),
            hold_us: 3_000,
            release_priority: None,
            release_jitter_us: 0,
            release_jitter_seed: 0,
            heartbeat_us: 1_000,
            rate_per_sec: 100_000,
            burst: 10_000,
            in_flight_max: 1_024,
            batch_commands_max: 4_096,
            subscriber_buffer: 16_384,
            sessions_per_key_max: 256,
            subscriptions_per_key_max: 64,
            subscriptions_max: 10_000,
            inject: Profile::for_gateway(&"none".parse::<ProfileSpec>().expect("a preset"), id, 0),
            probe: false,
            open: false,
            local_nodes: Vec::new(),
            clock: bourse_fairness::Clock::system(),
            tls: None,
            admin_tls: None,
            edge_tls: None,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.cluster.is_empty() {
            return Err("a gateway needs at least one cluster address".into());
        }
        let checks: [(&str, u64, u64, u64); 10] = [
            ("release_jitter_us", self.release_jitter_us, 0, 10_000),
            ("sessions_per_key_max", self.sessions_per_key_max as u64, 1, 1 << 20),
            ("subscriptions_per_key_max", self.subscriptions_per_key_max as u64, 1, 1 << 20),
            ("subscriptions_max", self.subscriptions_max as u64, 1, 1 << 24),
            ("hold_us", self.hold_us, 0, 10_000_000),
            ("heartbeat_us", self.heartbeat_us, 100, 1_000_000),
            ("rate_per_sec", self.rate_per_sec, 1, u64::MAX),
            ("burst", self.burst, 1, u64::MAX),
            ("in_flight_max", self.in_flight_max as u64, 1, 1 << 20),
            ("subscriber_buffer", self.subscriber_buffer as u64, 16, 1 << 24),
        ];
        for (field, value, min, max) in checks {
            if !(min..=max).contains(&value) {
                return Err(format!("{field} = {value} is outside {min}..={max}"));
            }
        }
        if let Some(priority) = self.release_priority.filter(|p| !(1..=99).contains(p)) {
            return Err(format!("release_priority = {priority} is outside 1..=99"));
        }
        if self.open && !self.listen.ip().is_loopback() {
            return Err(format!(
                "an open gateway (every session acts for every account, no key) listens on loopback only, not {}",
                self.listen
            ));
        }
        Ok(())
    }

    /// The node in this process at `target`, if there is one.
    pub(crate) fn local_node_at(&self, target: &str) -> Option<&LocalNode> {
        self.local_nodes.iter().find(|node| node.is_at(target))
    }

    /// Where the feed is read from, in order of preference.
    pub fn feed_sources(&self) -> Vec<String> {
        if self.feed.is_empty() {
            self.cluster.iter().rev().cloned().collect()
        } else {
            self.feed.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_out_of_bounds_are_refused_by_name() {
        let base = GatewayConfig::new(1, "127.0.0.1:0".parse().unwrap(), vec!["127.0.0.1:1".into()]);
        assert!(base.validate().is_ok());
        let mut config = base.clone();
        config.cluster.clear();
        assert!(config.validate().unwrap_err().contains("cluster"));
        let mut config = base.clone();
        config.heartbeat_us = 10;
        assert!(config.validate().unwrap_err().contains("heartbeat_us = 10"));
        for priority in [0, 100] {
            let mut config = base.clone();
            config.release_priority = Some(priority);
            assert!(config.validate().unwrap_err().contains(&format!("release_priority = {priority}")));
        }
        let mut config = base.clone();
        config.release_priority = Some(99);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn an_open_gateway_listens_on_loopback_only() {
        let mut config = GatewayConfig::new(1, "127.0.0.1:0".parse().unwrap(), vec!["127.0.0.1:1".into()]);
        config.open = true;
        assert!(config.validate().is_ok());
        config.listen = "[::1]:7600".parse().unwrap();
        assert!(config.validate().is_ok());
        config.listen = "0.0.0.0:7600".parse().unwrap();
        assert!(config.validate().unwrap_err().contains("loopback only, not 0.0.0.0:7600"));
        config.open = false;
        assert!(config.validate().is_ok(), "with keys any address will do");
    }
}
