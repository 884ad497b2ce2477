//! What the tests of the groups as processes share (`groups_cli`, `groups_partition`):
//! the binary, and the leader of a group as `cluster status --data --json` reports it.
#![allow(dead_code)]

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
