//! A real node, a gateway with keys, a history sink following the node into SQLite, and
//! the day-trading service in front of the gateway, on loopback; a gRPC client for the
//! `DayTrading` service and an xmllint check.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bourse_daytrading::quote::emulator::{EmulatorConfig, Latency};
use bourse_daytrading::{Auth, Clock, DayTradingServer, ServerConfig, ServiceConfig, SourceConfig};
use bourse_engine::daytrading::DtKind;
use bourse_gateway::keys::{entry_for, generate_key};
use bourse_gateway::{Gateway, GatewayConfig, KeyStore};
use bourse_node::{Node, NodeConfig, VirtualClock};
use bourse_protocol::proto;
use bourse_protocol::proto::day_trading_client::DayTradingClient;
use tonic::transport::Channel;

/// The virtual clock of golden runs: 2026-01-01T00:00:00Z, 10 ms per log entry.
pub const T0_MS: u64 = 1_767_225_600_000;
pub const STEP_MS: u64 = 10;

/// The user `Exchange::user_key` is named after.
pub const USER: &str = "oY01WVirLr";

pub struct Options {
    pub virtual_clock: bool,
    pub source: SourceConfig,
    pub trigger_poll_ms: u64,
    pub emulator_listen: bool,
    pub sessions: usize,
    /// The service opens its sessions on the gateway in process (as `bourse gateway
    /// run` wires it), not at its listen address.
    pub local: bool,
    /// The node's configuration file (TOML), if any: the node starts from it.
    pub node_toml: Option<&'static str>,
    pub refresh_margin_ms: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            virtual_clock: false,
            source: SourceConfig::Emulator(emulator(Latency::None)),
            trigger_poll_ms: 0,
            emulator_listen: false,
            sessions: 4,
            local: true,
            node_toml: None,
            refresh_margin_ms: ServiceConfig::new(Vec::new()).refresh_margin_ms,
        }
    }
}

/// The emulator's settings of the tests: seed 7, prices 1.00 to 500.00.
pub fn emulator(latency: Latency) -> EmulatorConfig {
    EmulatorConfig { seed: 7, price_min: 100, price_max: 50_000, latency }
}

pub struct Exchange {
    pub node: Node,
    pub gateway: Gateway,
    pub history: bourse_history::Following,
    pub history_url: String,
    pub service: DayTradingServer,
    /// An administrator's key (the workload driver's).
    pub admin: String,
    /// A key that is not an administrator's, named after the user `USER` it acts as.
    pub user_key: String,
    pub dump_dir: PathBuf,
    pub data: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Exchange {
    pub async fn start(options: Options) -> Exchange {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("node");
        let from_file = match options.node_toml {
            Some(text) => {
                let file = dir.path().join("node.toml");
                std::fs::write(&file, text).unwrap();
                NodeConfig::from_toml_file(&file).unwrap()
            }
            None => NodeConfig::default(),
        };
        let config = NodeConfig {
            data: data.clone(),
            listen: "127.0.0.1:0".parse().unwrap(),
            sequencer_window_us: 0,
            virtual_clock: options.virtual_clock.then_some(VirtualClock { t0_ms: T0_MS, step_ms: STEP_MS }),
            ..from_file
        };
        let node = Node::start(config).await.unwrap();
        let (admin, user_key) = (generate_key(), generate_key());
        let entries =
            || vec![entry_for(&admin, "ops", Vec::new(), true), entry_for(&user_key, USER, Vec::new(), false)];
        let mut keys = KeyStore::from_entries(entries()).unwrap();
        let service_key = keys.add_process_key("day-trading", true);
        let mut gateway_config = GatewayConfig::new(1, "127.0.0.1:0".parse().unwrap(), vec![node.addr.to_string()]);
        gateway_config.hold_us = 0;
        let gateway = Gateway::start(gateway_config, keys).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !gateway.market_ready() {
            assert!(Instant::now() < deadline, "the gateway's feed never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let history_url = format!("sqlite:{}", dir.path().join("history.sqlite").display());
        let history = bourse_history::Following::start(
            vec![node.addr.to_string()],
            &history_url,
            bourse_history::SinkConfig::default(),
        )
        .await
        .unwrap();
        let dump_dir = dir.path().join("dumps");
        let mut service = ServiceConfig::new(vec![gateway.addr().to_string()]);
        service.key = Some(bourse_client::ApiKey(service_key));
        service.local = options.local.then(|| gateway.local());
        if options.virtual_clock {
            service.clock = Clock::Virtual { t0_ms: T0_MS, step_ms: STEP_MS };
        }
        service.trigger_poll_ms = options.trigger_poll_ms;
        service.refresh_margin_ms = options.refresh_margin_ms;
        service.dump_dir = dump_dir.clone();
        service.history = Some(history_url.clone());
        service.dump_wait = Duration::from_secs(60);
        service.sessions = options.sessions;
        let verify = KeyStore::from_entries(entries()).unwrap();
        let auth = Auth::Keys(Arc::new(move |key: &str| {
            verify.verify(key).map(|p| bourse_daytrading::KeyHolder { name: p.name.clone(), admin: p.admin })
        }));
        let server = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            service,
            source: options.source,
            emulator_listen: options.emulator_listen.then(|| "127.0.0.1:0".parse().unwrap()),
            auth,
        };
        let service = DayTradingServer::start(server).await.unwrap();
        Exchange { node, gateway, history, history_url, service, admin, user_key, dump_dir, data, dir }
    }

    /// A client of the `DayTrading` service with `key`.
    pub async fn client(&self, key: &str) -> Dt {
        let channel = Channel::from_shared(format!("http://{}", self.service.addr())).unwrap().connect().await.unwrap();
        let client = DayTradingClient::new(channel).max_decoding_message_size(bourse_daytrading::MESSAGE_BYTES_MAX);
        Dt { client, key: key.to_owned(), next_id: 0 }
    }

    /// Waits until the history holds every entry the node has applied.
    pub async fn history_caught_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let target = self.node.metrics.applied_index.load(Ordering::Acquire);
        while self.history.status.written_index.load(Ordering::Acquire) < target {
            assert!(Instant::now() < deadline, "the history did not catch up");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The node's applied index and state hash (Cluster.Status).
    pub async fn state(&self) -> (u64, String) {
        let mut cluster =
            proto::cluster_client::ClusterClient::connect(format!("http://{}", self.node.addr)).await.unwrap();
        let status = cluster.status(proto::ClusterStatusRequest::default()).await.unwrap().into_inner();
        (status.applied_index, status.state_hash)
    }

    /// Stops everything; the temporary directory (journal, history, dumps) stays until
    /// the returned guard is dropped.
    pub async fn stop(self) -> (tempfile::TempDir, PathBuf) {
        self.service.shutdown().await;
        self.history.stop().await.unwrap();
        self.gateway.shutdown().await;
        self.node.shutdown().await.unwrap();
        (self.dir, self.data)
    }
}

pub struct Dt {
    pub client: DayTradingClient<Channel>,
    pub key: String,
    next_id: u64,
}

impl Dt {
    /// One command through `Execute`, as an administrator (or as `caller`).
    pub async fn call_as(&mut self, caller: &str, kind: DtKind, args: &[&str], n: u64) -> proto::DayTradingResponse {
        self.next_id += 1;
        let message = proto::DayTradingRequest {
            id: self.next_id,
            command: bourse_protocol::daytrading::kind_wire(kind),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            transaction_num: n,
            caller: caller.to_owned(),
        };
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert("authorization", format!("Bearer {}", self.key).parse().unwrap());
        let response = self.client.execute(request).await.unwrap().into_inner();
        assert_eq!(response.id, self.next_id);
        response
    }

    pub async fn call(&mut self, kind: DtKind, args: &[&str], n: u64) -> proto::DayTradingResponse {
        self.call_as("", kind, args, n).await
    }

    /// A command that must be logged and succeed: its result.
    pub async fn ok(&mut self, kind: DtKind, args: &[&str], n: u64) -> proto::DayTradingResult {
        let response = self.call(kind, args, n).await;
        assert!(response.failure.is_empty(), "{kind:?} {args:?}: {}", response.failure);
        let result = response.result.expect("a result");
        assert!(result.error.is_empty(), "{kind:?} {args:?}: {}", result.error);
        result
    }

    /// A command that must be logged and fail with `error`.
    pub async fn err(&mut self, kind: DtKind, args: &[&str], n: u64, error: &str) {
        let response = self.call(kind, args, n).await;
        assert!(response.failure.is_empty(), "{kind:?} {args:?}: {}", response.failure);
        assert_eq!(response.result.expect("a result").error, error, "{kind:?} {args:?}");
    }
}

/// The project's schema copy.
pub fn schema() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/logfile.xsd")
}

/// Validates `file` against the project's schema copy with xmllint
/// (scripts/deps/xmllint.sh installs it).
pub fn xmllint(file: &Path) {
    let output = std::process::Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(schema())
        .arg(file)
        .output()
        .expect("xmllint runs (scripts/deps/xmllint.sh installs libxml2-utils)");
    assert!(
        output.status.success(),
        "{} is not valid against logfile.xsd: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr).chars().take(4_000).collect::<String>()
    );
}

/// Validates a document held in memory.
pub fn xmllint_bytes(document: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("doc.xml");
    std::fs::write(&file, document).unwrap();
    xmllint(&file);
}

/// A course workload file kept in the crate.
pub fn workload_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads").join(name)
}
