//! The partitioned exchange as processes under partitions (issue 28): two groups of
//! three `bourse group` processes, each member's Raft port behind a fault proxy in this
//! test (members dial from their own loopback address, so a proxy knows who calls), and
//! `group-load` trading while the leader of each group in turn is cut off from its
//! group for two seconds and then healed, and a book moving from group 0 to group 1
//! during the first cut. The load's checks must hold: every group's members in one
//! state, every group placing every book alike with no move half done, every asset
//! conserved across the groups, every acknowledged command in its session's record on
//! every member, every command answered.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use bourse_cluster::fault::FaultProxy;
#[path = "support/groups.rs"]
mod support;

use serde_json::{json, Value};
use support::{bourse, free_port, leader_of_or};

struct Members(Vec<Child>);

impl Drop for Members {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

struct Planned {
    group: usize,
    id: u64,
    ip: IpAddr,
    api: String,
    raft: SocketAddr,
}

#[test]
fn groups_trade_through_their_leaders_cut_off_and_healed() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path();
    let data_text = data.to_str().expect("utf-8").to_string();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let genesis = data.join("genesis.json");
    bourse_group::Genesis::market(2, 4, 16).write(&genesis).expect("the genesis");

    let planned: Vec<Planned> = (0..2)
        .flat_map(|group| {
            (1..=3u64).map(move |index| Planned {
                group,
                id: group as u64 * 10 + index,
                ip: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + (group as u8) * 3 + index as u8)),
                api: format!("127.0.0.1:{}", free_port()),
                raft: SocketAddr::from(([127, 0, 0, 1], free_port())),
            })
        })
        .collect();
    // One proxy in front of every member's Raft port; the members advertise the proxy.
    let proxies: Vec<FaultProxy> = planned
        .iter()
        .map(|p| runtime.block_on(FaultProxy::start("127.0.0.1:0".parse().expect("addr"), p.raft)).expect("a proxy"))
        .collect();
    let members_of = |g: usize| {
        planned
            .iter()
            .zip(&proxies)
            .filter(|(p, _)| p.group == g)
            .map(|(p, proxy)| format!("{}={}/{}", p.id, p.api, proxy.addr()))
            .collect::<Vec<_>>()
            .join(",")
    };
    let directory: Vec<Vec<String>> =
        (0..2).map(|g| planned.iter().filter(|p| p.group == g).map(|p| p.api.clone()).collect()).collect();
    let directory_text = directory.iter().map(|g| g.join(",")).collect::<Vec<_>>().join(";");
    let mut children = Members(Vec::new());
    let mut nodes = Vec::new();
    for p in &planned {
        let member_dir = data.join(format!("node{}", p.id));
        std::fs::create_dir_all(&member_dir).expect("a member's directory");
        let log = std::fs::File::create(member_dir.join("node.log")).expect("a log");
        let child = bourse()
            .args(["group", "--group", &p.group.to_string(), "--id", &p.id.to_string(), "--data"])
            .arg(&member_dir)
            .args(["--listen", &p.api, "--raft-listen", &p.raft.to_string(), "--bind-ip", &p.ip.to_string()])
            .args(["--members", &members_of(p.group), "--directory", &directory_text, "--genesis"])
            .arg(&genesis)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a log"))
            .stderr(log)
            .spawn()
            .expect("bourse group");
        nodes.push(json!({ "group": p.group, "id": p.id, "pid": child.id(), "api": p.api }));
        children.0.push(child);
    }
    // The record `cluster status` and `group-load` read (plaintext: no DATA/pki).
    let record = json!({ "groups": 2, "genesis": genesis, "directory": directory, "nodes": nodes });
    std::fs::write(data.join("cluster.json"), record.to_string()).expect("the record");
    let logs = || {
        planned
            .iter()
            .map(|p| format!("node {}:\n{}", p.id, tail(&data.join(format!("node{}/node.log", p.id)))))
            .collect::<Vec<_>>()
            .join("\n")
    };
    leader_of_or(&data_text, 0, logs);
    leader_of_or(&data_text, 1, logs);

    let load = bourse()
        // Symbol 0's book moves from group 0 to group 1 three seconds in, while group 0's
        // leader is cut off (the move's request may reach the deposed one, and go again).
        .args(["--json", "group-load", "--data", &data_text, "--seconds", "12", "--move", "0:1", "--move-after", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("group-load");
    for group in 0..2 {
        std::thread::sleep(Duration::from_millis(2_000));
        let leader = leader_of_or(&data_text, group as u64, logs);
        let cut = planned.iter().position(|p| p.id == leader).expect("a member");
        // Cut off: the others' proxies refuse it, its own refuses everyone.
        for (at, p) in planned.iter().enumerate() {
            if p.group == group && at != cut {
                proxies[at].block(planned[cut].ip);
            }
        }
        proxies[cut].block_all();
        std::thread::sleep(Duration::from_millis(2_000));
        let after = leader_of_or(&data_text, group as u64, logs);
        assert_ne!(after, leader, "group {group}: a new leader while {leader} is cut off");
        for (at, p) in planned.iter().enumerate() {
            if p.group == group {
                proxies[at].heal();
            }
        }
    }
    let output = load.wait_with_output().expect("group-load ends");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    assert!(output.status.success(), "group-load:\n{}\n{}\n{}", text(&output.stdout), text(&output.stderr), logs());
    let report: Value = serde_json::from_str(text(&output.stdout).trim()).expect("group-load --json");
    assert_eq!(report["violations"].as_array().map(Vec::len), Some(0), "{report}");
    assert!(report["commands"].as_u64().unwrap_or(0) > 50, "{report}");
    assert!(report["resends"].as_u64().unwrap_or(0) > 0, "the cuts sent clients elsewhere: {report}");
    // From group 0, whether the answer that came was the first send's or a resend's.
    let moved = (report["moved"]["from"].as_u64(), report["moved"]["to"].as_u64());
    assert_eq!(moved, (Some(0), Some(1)), "the book moved: {report}");
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
