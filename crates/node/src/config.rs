//! Node configuration: flags override an optional TOML file, which overrides defaults.
//!
//! Every bound of the node is named here and checked by [`NodeConfig::validate`] before
//! anything starts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use bourse_engine::daytrading::DtConfig;
use bourse_engine::EngineConfig;
use serde::{Deserialize, Deserializer};

/// Everything a node needs to start.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// The data directory: journal segments and snapshots.
    pub data: PathBuf,
    /// gRPC address.
    pub listen: SocketAddr,
    /// Prometheus `/metrics` address; none to serve no metrics.
    pub metrics_listen: Option<SocketAddr>,
    /// Take a snapshot after this many commands since the last one…
    pub snapshot_every_commands: u64,
    /// …or after this many seconds, whichever comes first (0: never by time).
    pub snapshot_every_secs: u64,
    /// Commands the core takes from its queue into one batch.
    pub batch_commands_max: usize,
    /// Requests (client batches, queries) waiting for the core before senders wait.
    pub queue_requests_max: usize,
    /// Commands one client batch may carry.
    pub client_batch_commands_max: usize,
    /// Server batches queued for one session before it is dropped as too slow.
    pub session_outbox_max: usize,
    /// Market data updates buffered per subscriber before it is dropped as too slow.
    pub market_data_buffer_max: usize,
    /// Largest gRPC message accepted, in bytes.
    pub grpc_message_bytes_max: usize,
    /// Journal segment size, in bytes.
    pub segment_bytes_max: u64,
    /// d_s, the fair sequencing window for gateway batches, in microseconds: a batch
    /// waits until the leader's clock is this far past its gateway stamp (or every
    /// gateway's watermark has passed it). 0 sequences gateway batches as they arrive.
    pub sequencer_window_us: u64,
    /// Gateway batches the sequencer holds at most; beyond, the links wait.
    pub sequencer_capacity: usize,
    /// Replies queued for one gateway link before the link is dropped as too slow.
    pub link_outbox_max: usize,
    /// How far a gateway's stamp may be from this node's clock, in milliseconds. A
    /// stamp further ahead ends the link (`OUT_OF_RANGE`): the gateway's clock is wrong.
    /// A stamp further behind is moved up to the bound (`link_stamps_clamped_total`): a
    /// gateway that back-dates its batches gains this much at most, while commands
    /// resent with their first stamp after a failover still go through.
    pub link_stamp_bound_ms: u64,
    /// Gateways (by id) that may relay administrative commands (accounts, deposits,
    /// assets, symbols, the day's close, day-trading) in their sessions and links: those
    /// that host admin keys, a day-trading service or an XML front end. Any other
    /// gateway's are refused before the log (1004 `not_authorized`); operators' are
    /// always taken. Matters only with the PKI (without it callers have no identity).
    pub admin_gateways: Vec<u32>,
    /// The API key file the gateways read (`bourse gateway key-add`): a gateway's link
    /// may carry a client of a key only with the key to prove it, so no gateway can
    /// take over a session of a key it was never shown. Re-read on SIGHUP. Without it,
    /// gateways are trusted with their keys' clients. Matters only with the PKI.
    pub client_keys: Option<PathBuf>,
    /// The cluster's CA directory (`bourse pki init`): the gRPC port is mutual TLS with
    /// the certificate issued there to `node ID` (ID: `raft.id`, 1 for a single node),
    /// and every call is authorised by the caller's role (docs/SECURITY.md). For a
    /// member, `raft.pki` is the same setting (either may be given; they must agree).
    /// Without it the port is plaintext, which is refused unless it is a loopback one.
    pub pki: Option<PathBuf>,
    /// Replication: absent for a single node.
    pub raft: Option<RaftConfig>,
    /// Tests only: stamp the command at log index i with `T0 + i × STEP` (ms) instead of
    /// the wall clock, so runs of the same input stamp alike (day-trading golden runs).
    /// Single node only; stamps still never go backwards.
    pub virtual_clock: Option<VirtualClock>,
    /// Bounds and rules of the engine (part of the replicated state: every member of a
    /// cluster needs the same, and a snapshot keeps those it was taken with). Of these
    /// the file sets the day-trading ledger's, as a `[day_trading]` table
    /// ([`DayTradingToml`]); the others keep their defaults.
    #[serde(rename = "day_trading", deserialize_with = "engine_from_day_trading")]
    pub engine: EngineConfig,
    /// The `[clients]` table: how many client records (for exactly-once) the engine
    /// keeps and how long an idle one lasts. Part of the engine's settings
    /// ([`NodeConfig::engine_config`]), so the same caveat holds.
    pub clients: ClientsToml,
    /// The `[fairness]` table: whether the leader adapts the hold d_h and the window d_s
    /// to the delays it sees (through the log), and within what bounds.
    pub fairness: FairnessToml,
    /// Where the node reads the time (the leader's stamps, the sequencer's window, the
    /// gateways' stamp bound): the system clock, or the deterministic simulator's, under
    /// which the core and the sequencer run as tasks ([`bourse_fairness::Clock`]). Not
    /// in the file.
    #[serde(skip)]
    pub clock: bourse_fairness::Clock,
}

/// The `[fairness]` table. With `adaptive` off (the default) the gateways' `hold_us` and
/// `sequencer_window_us` are fixed. With it on, the leader sets both through the log
/// ([`bourse_engine::command::CommandBody::SetFairness`]): the hold to cover the largest
/// feed delay the gateways reported over the last `horizon_secs`, the window to cover
/// the largest stamp-to-sequencer delay, each times `margin_percent` and within its
/// bounds; raised at the first report that calls for more, lowered once a horizon
/// calls for less (`bourse_fairness::adapt`). An admin's `SetFairness` pins the values
/// only while adaptation is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FairnessToml {
    pub adaptive: bool,
    pub hold_min_us: u64,
    pub hold_max_us: u64,
    pub window_min_us: u64,
    pub window_max_us: u64,
    pub margin_percent: u64,
    pub horizon_secs: u64,
}

impl Default for FairnessToml {
    fn default() -> Self {
        FairnessToml {
            adaptive: false,
            hold_min_us: 500,
            hold_max_us: 100_000,
            window_min_us: 100,
            window_max_us: 10_000,
            margin_percent: 200,
            horizon_secs: 30,
        }
    }
}

impl FairnessToml {
    /// The hold's and the window's controllers' settings, when adaptive.
    pub fn adaptive_configs(&self) -> Option<(bourse_fairness::AdaptiveConfig, bourse_fairness::AdaptiveConfig)> {
        if !self.adaptive {
            return None;
        }
        let of = |min_us: u64, max_us: u64| bourse_fairness::AdaptiveConfig {
            min_ns: min_us.saturating_mul(1_000),
            max_ns: max_us.saturating_mul(1_000),
            margin_percent: self.margin_percent,
            horizon_ns: self.horizon_secs.saturating_mul(1_000_000_000),
            slices: 10,
        };
        Some((of(self.hold_min_us, self.hold_max_us), of(self.window_min_us, self.window_max_us)))
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let limit = bourse_engine::command::FAIRNESS_NS_MAX / 1_000;
        for (field, value) in [
            ("hold_min_us", self.hold_min_us),
            ("hold_max_us", self.hold_max_us),
            ("window_min_us", self.window_min_us),
            ("window_max_us", self.window_max_us),
        ] {
            if value > limit {
                return Err(ConfigError(format!("[fairness] {field} = {value} is above {limit}")));
            }
        }
        if !(1..=3600).contains(&self.horizon_secs) {
            return Err(ConfigError(format!("[fairness] horizon_secs = {} is outside 1..=3600", self.horizon_secs)));
        }
        let (hold, window) = FairnessToml { adaptive: true, ..*self }.adaptive_configs().expect("adaptive");
        hold.validate().map_err(|e| ConfigError(format!("[fairness] hold: {e}")))?;
        window.validate().map_err(|e| ConfigError(format!("[fairness] window: {e}")))?;
        Ok(())
    }
}

/// The `[clients]` table: the engine's bound on client records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientsToml {
    /// Client ids remembered at most; a new client's command past it is refused
    /// (`limit_reached`) until idle ones expire.
    pub max: u32,
    /// A client with no command applied for this long (log time, seconds) is forgotten
    /// (within an eighth more).
    pub expiry_secs: u32,
}

impl Default for ClientsToml {
    fn default() -> Self {
        let EngineConfig { clients_max, client_expiry_secs, .. } = EngineConfig::default();
        ClientsToml { max: clients_max, expiry_secs: client_expiry_secs }
    }
}

/// The `[day_trading]` table (shared/specs/day-trading.md section 12): the ledger's
/// rules, which the day-trading service reads back from the engine
/// (`Query.GetDayTradingConfig`) so that the two agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DayTradingToml {
    /// A cached quote that arrived at q serves a command stamped t iff t − q < this (ms).
    pub quote_ttl_ms: u32,
    /// A pending BUY or SELL made at b may be committed or cancelled at t iff t − b <
    /// this (ms).
    pub pending_ttl_ms: u32,
    /// Commands each user's history keeps for `DISPLAY_SUMMARY`.
    pub summary_history: u32,
    /// Users at most.
    pub users_max: u32,
}

impl Default for DayTradingToml {
    fn default() -> Self {
        let DtConfig { users_max, quote_ttl_ms, pending_ttl_ms, summary_history } = DtConfig::default();
        DayTradingToml { quote_ttl_ms, pending_ttl_ms, summary_history, users_max }
    }
}

/// The engine's settings from a `[day_trading]` table: the ledger's from the table, the
/// rest the defaults.
fn engine_from_day_trading<'de, D: Deserializer<'de>>(deserializer: D) -> Result<EngineConfig, D::Error> {
    let DayTradingToml { quote_ttl_ms, pending_ttl_ms, summary_history, users_max } =
        DayTradingToml::deserialize(deserializer)?;
    let day_trading = DtConfig { users_max, quote_ttl_ms, pending_ttl_ms, summary_history };
    Ok(EngineConfig { day_trading, ..EngineConfig::default() })
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            data: PathBuf::from("bourse-data"),
            listen: "127.0.0.1:7400".parse().expect("valid address"),
            metrics_listen: None,
            snapshot_every_commands: 5_000_000,
            snapshot_every_secs: 300,
            batch_commands_max: 4096,
            queue_requests_max: 1024,
            client_batch_commands_max: 4096,
            session_outbox_max: 1024,
            market_data_buffer_max: 65_536,
            grpc_message_bytes_max: 4 << 20,
            segment_bytes_max: 64 << 20,
            sequencer_window_us: 1_000,
            sequencer_capacity: 65_536,
            link_outbox_max: 16_384,
            link_stamp_bound_ms: 250,
            admin_gateways: Vec::new(),
            client_keys: None,
            pki: None,
            raft: None,
            virtual_clock: None,
            engine: EngineConfig::default(),
            clients: ClientsToml::default(),
            fairness: FairnessToml::default(),
            clock: bourse_fairness::Clock::system(),
        }
    }
}

/// A deterministic clock for tests: log index i is stamped `t0_ms + i × step_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtualClock {
    pub t0_ms: u64,
    pub step_ms: u64,
}

impl std::str::FromStr for VirtualClock {
    type Err = String;

    /// `T0_MS,STEP_MS`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (t0, step) = text.split_once(',').ok_or("expected T0_MS,STEP_MS")?;
        let number = |s: &str| s.trim().parse::<u64>().map_err(|e| format!("{s:?}: {e}"));
        Ok(VirtualClock { t0_ms: number(t0)?, step_ms: number(step)? })
    }
}

/// A member of a replicated cluster.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RaftConfig {
    /// This node's id: unique in the cluster, never reused after a removal.
    pub id: u64,
    /// Where the Raft transport listens.
    pub listen: SocketAddr,
    /// The Raft address other members use to reach this node (defaults to `listen`; a
    /// fault proxy in front of the node is advertised here).
    pub advertise: Option<String>,
    /// The client API address other members tell clients to use for this node
    /// (defaults to the node's gRPC `listen`).
    pub advertise_api: Option<String>,
    /// Source address for connections to other members (lets a fault proxy tell
    /// members apart on one machine).
    pub bind_ip: Option<std::net::IpAddr>,
    /// Members to initialize a new cluster with, as `id=api_addr/raft_addr`; only used
    /// when this node's log is empty, and only the first member initializes.
    pub bootstrap: Vec<String>,
    /// Leader heartbeat interval.
    pub heartbeat_ms: u64,
    /// Election timeout range: a follower that hears no leader for the leader's lease
    /// (`election_max_ms`) plus a random time in this range campaigns.
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// Take a state machine snapshot after this many log entries (each a batch).
    pub snapshot_every_entries: u64,
    /// Log entries kept behind a snapshot, so a briefly lagging follower catches up
    /// from the log rather than by snapshot.
    pub log_kept_after_snapshot: u64,
    /// The largest state machine snapshot this member installs from a leader, in bytes
    /// (at most 4 GiB − 1, the transport's length field): a longer one is refused from
    /// its length, before any of it is read. Every member must allow the snapshots its
    /// cluster makes (the size of the files in `DATA/raft/snapshots`). Default 1 GiB.
    pub snapshot_bytes_max: u64,
    /// The cluster's CA directory (`bourse pki init`): the Raft transport is mutual TLS
    /// with the certificate issued there to `node ID` (`DIR/issued/node-ID.pem`, `.key`),
    /// and takes only node certificates of that CA. Without it the transport is
    /// plaintext, which is refused unless every Raft address is a loopback one.
    pub pki: Option<std::path::PathBuf>,
}

impl Default for RaftConfig {
    fn default() -> Self {
        RaftConfig {
            id: 1,
            listen: "127.0.0.1:7500".parse().expect("valid address"),
            advertise: None,
            advertise_api: None,
            bind_ip: None,
            bootstrap: Vec::new(),
            heartbeat_ms: 20,
            election_min_ms: 40,
            election_max_ms: 100,
            snapshot_every_entries: 20_000,
            log_kept_after_snapshot: 2_000,
            snapshot_bytes_max: 1 << 30,
            pki: None,
        }
    }
}

impl RaftConfig {
    /// The low-latency timing profile: heartbeats every 5 ms, election timeout 10–35 ms.
    /// openraft makes a follower wait out the leader's lease (`election_max_ms`) before its
    /// own election timeout, so a dead leader is replaced after 45–70 ms (default
    /// profile, 20 ms and 40–100 ms: 140–200 ms); a follower that misses heartbeats for
    /// that long (a stall of the process or the network) also starts an election. The
    /// timeout's range is kept wide: two followers whose timeouts expire within a few
    /// milliseconds of each other split the vote and need another round.
    pub fn low_latency(mut self) -> Self {
        self.heartbeat_ms = 5;
        self.election_min_ms = 10;
        self.election_max_ms = 35;
        self
    }

    /// Parses `id=api/raft` members.
    pub fn members(&self) -> Result<Vec<(u64, String, String)>, ConfigError> {
        self.bootstrap.iter().map(|m| parse_member(m)).collect()
    }
}

/// Parses one `id=api_addr/raft_addr` member.
pub fn parse_member(text: &str) -> Result<(u64, String, String), ConfigError> {
    let bad = || ConfigError(format!("member `{text}`: expected id=api_addr/raft_addr"));
    let (id, addrs) = text.split_once('=').ok_or_else(bad)?;
    let (api, raft) = addrs.split_once('/').ok_or_else(bad)?;
    let id: u64 = id.trim().parse().map_err(|_| bad())?;
    if id == 0 || api.is_empty() || raft.is_empty() {
        return Err(bad());
    }
    Ok((id, api.to_string(), raft.to_string()))
}

/// Why a configuration could not be used.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl NodeConfig {
    /// The CA directory, from `pki` or `raft.pki`.
    pub fn pki_dir(&self) -> Option<&Path> {
        self.pki.as_deref().or(self.raft.as_ref().and_then(|r| r.pki.as_deref()))
    }

    /// The id in this node's certificate: `raft.id`, or 1 for a single node.
    pub fn node_id(&self) -> u64 {
        self.raft.as_ref().map_or(1, |r| r.id)
    }

    /// The engine's settings: the `[day_trading]` table's and the `[clients]` table's.
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig { clients_max: self.clients.max, client_expiry_secs: self.clients.expiry_secs, ..self.engine }
    }

    /// Sets the engine's settings (those a snapshot was taken with).
    pub fn set_engine_config(&mut self, engine: EngineConfig) {
        self.engine = engine;
        self.clients = ClientsToml { max: engine.clients_max, expiry_secs: engine.client_expiry_secs };
    }

    /// Reads a TOML file; fields it leaves out keep their defaults.
    pub fn from_toml_file(path: &Path) -> Result<NodeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| ConfigError(format!("{}: {e}", path.display())))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let checks: [(&str, u64, u64, u64); 10] = [
            ("sequencer_window_us", self.sequencer_window_us, 0, 10_000_000),
            ("sequencer_capacity", self.sequencer_capacity as u64, 1, 1 << 24),
            ("link_outbox_max", self.link_outbox_max as u64, 1, 1 << 24),
            ("batch_commands_max", self.batch_commands_max as u64, 1, 65_536),
            ("queue_requests_max", self.queue_requests_max as u64, 1, 1 << 20),
            ("client_batch_commands_max", self.client_batch_commands_max as u64, 1, 65_536),
            ("session_outbox_max", self.session_outbox_max as u64, 1, 1 << 20),
            ("market_data_buffer_max", self.market_data_buffer_max as u64, 16, 1 << 24),
            ("grpc_message_bytes_max", self.grpc_message_bytes_max as u64, 4096, 1 << 30),
            ("snapshot_every_commands", self.snapshot_every_commands, 1, u64::MAX),
        ];
        for (field, value, min, max) in checks {
            if !(min..=max).contains(&value) {
                return Err(ConfigError(format!("{field} = {value} is outside {min}..={max}")));
            }
        }
        self.fairness.validate()?;
        let day_trading = &self.engine.day_trading;
        let rules: [(&str, u32, u32, u32); 6] = [
            ("day_trading.quote_ttl_ms", day_trading.quote_ttl_ms, 1, u32::MAX),
            ("day_trading.pending_ttl_ms", day_trading.pending_ttl_ms, 1, u32::MAX),
            ("day_trading.summary_history", day_trading.summary_history, 0, 1_000),
            ("day_trading.users_max", day_trading.users_max, 1, 1 << 24),
            ("clients.max", self.clients.max, 1, 1 << 24),
            // Up to ten years.
            ("clients.expiry_secs", self.clients.expiry_secs, 1, 315_360_000),
        ];
        for (field, value, min, max) in rules {
            if !(min..=max).contains(&value) {
                return Err(ConfigError(format!("{field} = {value} is outside {min}..={max}")));
            }
        }
        if self.virtual_clock.is_some() && self.raft.is_some() {
            return Err(ConfigError("virtual_clock is for a single node only".into()));
        }
        if let (Some(a), Some(b)) = (&self.pki, self.raft.as_ref().and_then(|r| r.pki.as_ref())) {
            if a != b {
                return Err(ConfigError(format!(
                    "pki {} and raft.pki {} differ: a node has one CA directory",
                    a.display(),
                    b.display()
                )));
            }
        }
        if self.pki_dir().is_none() && !self.listen.ip().is_loopback() {
            return Err(ConfigError(format!(
                "listen: {} is not a loopback address, and without pki (--pki DIR) the gRPC port would be \
                 plaintext: give the cluster's CA (bourse pki init)",
                self.listen
            )));
        }
        if self.link_stamp_bound_ms == 0 {
            return Err(ConfigError("link_stamp_bound_ms must be at least 1".into()));
        }
        if let Some(raft) = &self.raft {
            if raft.id == 0 {
                return Err(ConfigError("raft.id must be at least 1".into()));
            }
            if raft.heartbeat_ms == 0 || raft.election_min_ms <= raft.heartbeat_ms {
                return Err(ConfigError("raft: heartbeat_ms must be above 0 and below election_min_ms".into()));
            }
            if raft.election_max_ms <= raft.election_min_ms {
                return Err(ConfigError("raft: election_max_ms must be above election_min_ms".into()));
            }
            if raft.snapshot_every_entries == 0 {
                return Err(ConfigError("raft.snapshot_every_entries must be at least 1".into()));
            }
            if !(1 << 20..=u64::from(u32::MAX)).contains(&raft.snapshot_bytes_max) {
                return Err(ConfigError("raft.snapshot_bytes_max must be between 1 MiB and 4 GiB - 1".into()));
            }
            let members = raft.members()?;
            if self.pki_dir().is_none() {
                let mut addresses = vec![raft.listen.to_string()];
                addresses.extend(raft.advertise.clone());
                addresses.extend(members.into_iter().map(|(_, _, address)| address));
                if let Some(address) = addresses.iter().find(|a| !is_loopback(a)) {
                    return Err(ConfigError(format!(
                        "raft: {address} is not a loopback address, and without raft.pki (--pki DIR) the \
                         Raft transport would be plaintext: give the cluster's CA (bourse pki init)"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Whether `address` (`host:port`) names this machine's loopback interface: a
/// loopback IP, or `localhost`.
fn is_loopback(address: &str) -> bool {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_raft_only_on_loopback() {
        let mut config = NodeConfig::default();
        let mut raft =
            RaftConfig { bootstrap: vec!["1=127.0.0.1:7401/127.0.0.1:7501".into()], ..RaftConfig::default() };
        config.raft = Some(raft.clone());
        assert!(config.validate().is_ok());
        raft.bootstrap.push("2=10.0.0.2:7401/10.0.0.2:7501".into());
        config.raft = Some(raft.clone());
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("10.0.0.2:7501") && error.contains("--pki"), "{error}");
        raft.pki = Some("/etc/bourse/pki".into());
        config.raft = Some(raft.clone());
        assert!(config.validate().is_ok());
        raft.pki = None;
        raft.bootstrap.pop();
        raft.advertise = Some("[::1]:7501".into());
        config.raft = Some(raft);
        assert!(config.validate().is_ok(), "an IPv6 loopback");
        assert!(is_loopback("localhost:1") && !is_loopback("example.com:1") && !is_loopback("0.0.0.0:1"));
    }

    #[test]
    fn toml_overrides_defaults_and_rejects_unknown_fields() {
        let config: NodeConfig = toml::from_str("listen = \"127.0.0.1:9000\"\nbatch_commands_max = 64\n").unwrap();
        assert_eq!(config.listen.port(), 9000);
        assert_eq!(config.batch_commands_max, 64);
        assert_eq!(config.snapshot_every_commands, NodeConfig::default().snapshot_every_commands);
        assert!(toml::from_str::<NodeConfig>("listne = \"x\"").is_err());
        let bad = NodeConfig { batch_commands_max: 0, ..NodeConfig::default() };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn the_day_trading_table_sets_the_engines_ledger_rules() {
        let config: NodeConfig = toml::from_str("[day_trading]\nquote_ttl_ms = 3000\npending_ttl_ms = 5000\n").unwrap();
        let expected = DtConfig { quote_ttl_ms: 3_000, pending_ttl_ms: 5_000, ..DtConfig::default() };
        assert_eq!(config.engine, EngineConfig { day_trading: expected, ..EngineConfig::default() });
        assert!(config.validate().is_ok());
        // Without the table, the defaults (60 s each).
        let config: NodeConfig = toml::from_str("").unwrap();
        assert_eq!(config.engine, EngineConfig::default());
        assert_eq!(config.engine.day_trading.quote_ttl_ms, 60_000);
        assert!(toml::from_str::<NodeConfig>("[day_trading]\nquote_ttl = 5\n").is_err(), "unknown field");
        assert!(toml::from_str::<NodeConfig>("[engine]\nquote_ttl_ms = 5\n").is_err(), "only the ledger's");
        let zero: NodeConfig = toml::from_str("[day_trading]\nquote_ttl_ms = 0\n").unwrap();
        assert!(zero.validate().unwrap_err().to_string().contains("day_trading.quote_ttl_ms"));
    }

    #[test]
    fn the_clients_table_bounds_the_engines_client_records() {
        let config: NodeConfig = toml::from_str(
            "[clients]
max = 500
expiry_secs = 3600
",
        )
        .unwrap();
        assert!(config.validate().is_ok());
        let engine = config.engine_config();
        assert_eq!((engine.clients_max, engine.client_expiry_secs), (500, 3600));
        assert_eq!(engine.day_trading, DtConfig::default());
        let config: NodeConfig = toml::from_str("").unwrap();
        assert_eq!(config.engine_config(), EngineConfig::default());
        assert!(
            toml::from_str::<NodeConfig>(
                "[clients]
maximum = 5
"
            )
            .is_err(),
            "unknown field"
        );
        let zero: NodeConfig = toml::from_str(
            "[clients]
max = 0
",
        )
        .unwrap();
        assert!(zero.validate().unwrap_err().to_string().contains("clients.max"));
        // A snapshot's settings replace the file's, both tables.
        let mut config: NodeConfig = toml::from_str(
            "[clients]
max = 7
",
        )
        .unwrap();
        config.set_engine_config(EngineConfig::default());
        assert_eq!(config.engine_config(), EngineConfig::default());
    }

    #[test]
    fn raft_settings_are_checked_and_members_parsed() {
        let config: NodeConfig = toml::from_str(
            "[raft]\nid = 2\nlisten = \"127.0.0.1:7502\"\nbootstrap = [\"1=127.0.0.1:7401/127.0.0.1:7501\"]\n",
        )
        .unwrap();
        let raft = config.raft.clone().unwrap();
        assert_eq!(raft.id, 2);
        assert_eq!(raft.members().unwrap(), [(1, "127.0.0.1:7401".to_string(), "127.0.0.1:7501".to_string())]);
        assert!(config.validate().is_ok());
        for bad in ["1=a", "x=a/b", "0=a/b", "1=/b", "1=a/"] {
            assert!(parse_member(bad).is_err(), "{bad}");
        }
        let invalid = |raft: RaftConfig| NodeConfig { raft: Some(raft), ..NodeConfig::default() }.validate().is_err();
        assert!(invalid(RaftConfig { id: 0, ..RaftConfig::default() }));
        assert!(invalid(RaftConfig { heartbeat_ms: 60, ..RaftConfig::default() }));
        assert!(invalid(RaftConfig { election_min_ms: 100, election_max_ms: 100, ..RaftConfig::default() }));
        assert!(invalid(RaftConfig { bootstrap: vec!["nonsense".into()], ..RaftConfig::default() }));
        assert!(!invalid(RaftConfig::default().low_latency()));
    }
}
