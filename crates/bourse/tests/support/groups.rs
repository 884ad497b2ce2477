//! What the tests of the groups as processes share (`groups_cli`, `groups_partition`,
//! `groups_meta`): the binary, ports below the ephemeral range, the leader of a group
//! as `cluster status --data --json` reports it, and killing a member.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

/// The binary, with none of the environment's credentials.
pub fn bourse() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bourse"));
    command.env_remove("BOURSE_PKI").env_remove("BOURSE_AS").env_remove("BOURSE_API_KEY");
    command
}

/// Runs bourse with `args`: stdout, or a panic with both streams.
pub fn ok(args: &[&str]) -> String {
    let output = bourse().args(args).output().expect("run bourse");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    assert!(output.status.success(), "bourse {}:\n{}\n{}", args.join(" "), text(&output.stdout), text(&output.stderr));
    text(&output.stdout)
}

/// A loopback port free now, below the kernel's ephemeral range: the members dial each
/// other and the fault proxies dial the members, and any of those outgoing connections
/// can take a port bound to port 0 and released before its member listens on it.
pub fn free_port() -> u16 {
    bourse_node::ports::free_local_port().expect("a free loopback port")
}

/// The leader of `group` in the groups recorded in `data`, waiting up to 20 s for one.
pub fn leader_of(data: &str, group: u64) -> u64 {
    leader_of_or(data, group, String::new)
}

/// [`leader_of`], with `why` (say, the members' logs) in the panic when none leads.
pub fn leader_of_or(data: &str, group: u64, why: impl Fn() -> String) -> u64 {
    for _ in 0..200 {
        let output = bourse().args(["--json", "cluster", "status", "--data", data]).output().expect("status");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let leader = text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|s| s["group"].as_u64() == Some(group) && s["leading"].as_bool() == Some(true));
        if let Some(leader) = leader {
            return leader["id"].as_u64().expect("an id");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("group {group} has no leader\n{}", why());
}

/// A base port for `cluster up --groups` of three members each whose member ports
/// (+10g+1..3 for each of `groups` groups, and those +1000) are free now, all below the
/// kernel's ephemeral range (32768 on), which outgoing connections draw from.
pub fn free_base(groups: u16) -> u16 {
    let seed = std::process::id() as u16;
    for attempt in 0..200u16 {
        let base = 20_000 + (seed.wrapping_mul(13).wrapping_add(attempt * 311)) % 11_000;
        let free = (0..groups)
            .flat_map(|g| (1..=3).map(move |i| 10 * g + i))
            .flat_map(|o| [o, o + 1_000])
            .all(|o| TcpListener::bind(("127.0.0.1", base + o)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no free base port");
}

/// `cluster down` on drop.
pub struct Cleanup(pub PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = bourse().args(["cluster", "down", "--data"]).arg(&self.0).output();
    }
}

/// The groups' record, `DATA/cluster.json`.
pub fn record(data: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(data.join("cluster.json")).expect("cluster.json")).expect("json")
}

/// Member `id`'s process id, as the record has it.
pub fn pid_of(data: &Path, id: u64) -> u64 {
    let record = record(data);
    let nodes = record["nodes"].as_array().expect("nodes");
    nodes.iter().find(|n| n["id"].as_u64() == Some(id)).and_then(|n| n["pid"].as_u64()).expect("a pid")
}

/// SIGKILL, waiting until the process is gone.
pub fn kill(pid: u64) {
    let status = Command::new("kill").args(["-KILL", &pid.to_string()]).status().expect("kill");
    assert!(status.success(), "kill -KILL {pid}");
    // Reaped by its parent (`cluster up` is gone: init reaps it); wait until it is gone.
    for _ in 0..100 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("process {pid} outlived SIGKILL by 2 s");
}
