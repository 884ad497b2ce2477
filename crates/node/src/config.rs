//! Node configuration: flags override an optional TOML file, which overrides defaults.
//!
//! Every bound of the node is named here and checked by [`NodeConfig::validate`] before
//! anything starts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use bourse_engine::EngineConfig;
use serde::Deserialize;

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
    /// Bounds of the engine (part of the replicated state).
    #[serde(skip)]
    pub engine: EngineConfig,
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
            engine: EngineConfig::default(),
        }
    }
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
    /// Reads a TOML file; fields it leaves out keep their defaults.
    pub fn from_toml_file(path: &Path) -> Result<NodeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| ConfigError(format!("{}: {e}", path.display())))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let checks: [(&str, u64, u64, u64); 7] = [
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
