//! The demo's cluster: `bourse node` processes on loopback, their status, and the kill
//! button's SIGKILL followed by a restart on the node's own data.
//!
//! Nodes are started as `bourse cluster up` starts them ([`crate::cluster::spawn_node`]:
//! own process group, log in the data directory), on free ports picked at start, each
//! with a `/metrics` address so the demo can read the leader's sequencer figures. Unlike
//! `cluster up`'s they are tethered: each reads a pipe from the demo on stdin and stops
//! when it closes, so no node outlives the demo, however the demo ends; with the data in
//! a temporary directory they hold it too (`--temporary-dir`, [`crate::scratch`]), and
//! the last of the demo and its nodes to end removes it.
//! At most one node is down at a time: a kill while another node is down is refused,
//! so a majority of three always remains and the market keeps trading.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bourse_http::control::{ClusterView, NodeView};
use bourse_protocol::proto;

use crate::cluster::{spawn_tethered_node, LocalNode};

/// One node process.
struct Member {
    node: LocalNode,
    metrics: String,
    child: Option<Child>,
    /// Killed, waiting to be started again.
    down: bool,
}

/// The cluster the demo runs.
pub struct Nodes {
    exe: PathBuf,
    bootstrap: String,
    /// Flags for every node, `--temporary-dir` among them when the data is temporary.
    extra: Vec<String>,
    members: Mutex<Vec<Member>>,
    restart_after: Duration,
    /// The cluster's CA directory, with every certificate the demo uses.
    pki: PathBuf,
}

/// A free TCP port on loopback (bound then released; the node binds it a moment later),
/// below the ephemeral range and not handed out before (`bourse_node::ports`).
pub fn free_port() -> Result<u16, String> {
    bourse_node::ports::free_local_port().map_err(|e| format!("no free port: {e}"))
}

impl Nodes {
    /// Starts `count` nodes with data under `data`; `temporary`: `data` is a shared
    /// temporary directory the demo holds ([`crate::scratch::Holder::create`]).
    pub fn start(
        data: &Path,
        temporary: bool,
        count: u64,
        mut extra: Vec<String>,
        restart_after: Duration,
    ) -> Result<Arc<Nodes>, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        if temporary {
            let dir = data.to_str().ok_or_else(|| format!("{}: not UTF-8", data.display()))?;
            extra.extend(["--temporary-dir".to_string(), dir.to_string()]);
        }
        // Mutual TLS between the members, from a CA in the demo's data directory.
        let pki = crate::cluster::member_certificates(&data.join("pki"), 1..=count, &["127.0.0.1".to_string()])?;
        // The demo's own calls (status, the kill button's checks) as an operator; the
        // history sink as an observer; the gateways in this process each as itself.
        let mut identities = vec!["operator:admin".to_string(), "observer:history".to_string()];
        identities.extend((1..=16).map(|g| format!("gateway:{g}")));
        let identities: Vec<&str> = identities.iter().map(String::as_str).collect();
        crate::cluster::client_certificates(&pki, &identities)?;
        extra.extend(["--pki".to_string(), pki.display().to_string()]);
        // The demo's gateways host its admin key, day trading and the REST admin calls.
        let gateways: Vec<String> = (1..=16).map(|g| g.to_string()).collect();
        extra.push(format!("--admin-gateways={}", gateways.join(",")));
        let mut members = Vec::new();
        for id in 1..=count {
            let api = format!("127.0.0.1:{}", free_port()?);
            let raft = format!("127.0.0.1:{}", free_port()?);
            let metrics = format!("127.0.0.1:{}", free_port()?);
            let node = LocalNode { id, api, raft, dir: data.join(format!("node{id}")) };
            members.push(Member { node, metrics, child: None, down: false });
        }
        let bootstrap: Vec<String> =
            members.iter().map(|m| format!("{}={}/{}", m.node.id, m.node.api, m.node.raft)).collect();
        let nodes =
            Nodes { exe, bootstrap: bootstrap.join(","), extra, members: Mutex::new(Vec::new()), restart_after, pki };
        for member in &mut members {
            member.child = Some(nodes.spawn(member)?);
        }
        *nodes.members.lock().expect("members lock") = members;
        Ok(Arc::new(nodes))
    }

    fn spawn(&self, member: &Member) -> Result<Child, String> {
        let mut extra = vec!["--metrics-listen".to_string(), member.metrics.clone()];
        extra.extend(self.extra.iter().cloned());
        spawn_tethered_node(&self.exe, &member.node, &self.bootstrap, &extra)
    }

    /// The cluster's CA directory (`issued/` holds the demo's certificates).
    pub fn pki(&self) -> PathBuf {
        self.pki.clone()
    }

    /// Every node's client address.
    pub fn addresses(&self) -> Vec<String> {
        self.members.lock().expect("members lock").iter().map(|m| m.node.api.clone()).collect()
    }

    /// Every node's data directory.
    pub fn dirs(&self) -> Vec<(u64, PathBuf)> {
        self.members.lock().expect("members lock").iter().map(|m| (m.node.id, m.node.dir.clone())).collect()
    }

    /// The metrics address of node `id`.
    pub fn metrics_of(&self, id: u64) -> Option<String> {
        self.members.lock().expect("members lock").iter().find(|m| m.node.id == id).map(|m| m.metrics.clone())
    }

    /// Each member as its Status call answers (down members: `up: false`).
    pub async fn status(&self) -> ClusterView {
        let members: Vec<(u64, String, u32)> = self
            .members
            .lock()
            .expect("members lock")
            .iter()
            .map(|m| (m.node.id, m.node.api.clone(), m.child.as_ref().map_or(0, Child::id)))
            .collect();
        let calls = members.into_iter().map(|(id, api, pid)| async move {
            let answer = tokio::time::timeout(Duration::from_millis(800), async {
                let mut client = crate::cluster::connect(&api).await.ok()?;
                client.status(proto::ClusterStatusRequest {}).await.ok().map(tonic::Response::into_inner)
            })
            .await
            .ok()
            .flatten();
            node_view(id, api, pid, answer)
        });
        ClusterView { nodes: futures_util::future::join_all(calls).await }
    }

    /// The leader's id once one is known and answering, waiting up to `timeout`.
    pub async fn wait_leader(&self, timeout: Duration) -> Result<u64, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let view = self.status().await;
            if let Some(leader) = view.nodes.iter().find(|n| n.up && n.role == "leader") {
                return Ok(leader.id);
            }
            if Instant::now() > deadline {
                return Err(format!("no leader after {} s (see the node.log files)", timeout.as_secs()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILLs node `id` and starts it again on its data `restart_after` later.
    pub fn kill(self: &Arc<Self>, id: u64) -> Result<(), String> {
        {
            let mut members = self.members.lock().expect("members lock");
            if members.iter().any(|m| m.down) {
                return Err("a node is already down: wait until it is back (a majority must stay up)".into());
            }
            let member = members.iter_mut().find(|m| m.node.id == id).ok_or_else(|| format!("no node {id}"))?;
            let child = member.child.as_mut().ok_or_else(|| format!("node {id} is not running"))?;
            child.kill().map_err(|e| format!("SIGKILL to node {id}: {e}"))?;
            let _ = child.wait();
            member.down = true;
        }
        let nodes = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(nodes.restart_after).await;
            if let Err(error) = nodes.restart(id) {
                say_error!("demo: node {id} could not be started again: {error}");
            }
        });
        Ok(())
    }

    fn restart(&self, id: u64) -> Result<(), String> {
        let mut members = self.members.lock().expect("members lock");
        let member = members.iter_mut().find(|m| m.node.id == id).ok_or_else(|| format!("no node {id}"))?;
        if !member.down {
            return Ok(());
        }
        let child = self.spawn(member)?;
        member.child = Some(child);
        member.down = false;
        Ok(())
    }

    /// Whether a killed node waits to be started again.
    pub fn any_down(&self) -> bool {
        self.members.lock().expect("members lock").iter().any(|m| m.down)
    }

    /// Starts again, now, any node that waits for its restart.
    pub fn restart_now(&self) {
        let ids: Vec<u64> =
            self.members.lock().expect("members lock").iter().filter(|m| m.down).map(|m| m.node.id).collect();
        for id in ids {
            if let Err(error) = self.restart(id) {
                say_error!("demo: node {id} could not be started again: {error}");
            }
        }
    }

    /// SIGTERM to every node (each finishes its batch and exits), then waits up to 15 s,
    /// then SIGKILL.
    pub fn stop(&self) {
        let mut members = self.members.lock().expect("members lock");
        for member in members.iter() {
            if let Some(child) = &member.child {
                let _ = std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        for member in members.iter_mut() {
            let Some(child) = member.child.as_mut() else { continue };
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
            member.child = None;
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        // Never leave node processes behind, whatever ended the demo.
        if let Ok(mut members) = self.members.lock() {
            for member in members.iter_mut() {
                if let Some(child) = member.child.as_mut() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }
}

fn node_view(id: u64, api: String, pid: u32, answer: Option<proto::ClusterStatus>) -> NodeView {
    match answer {
        Some(status) => NodeView {
            id,
            api,
            up: true,
            role: status.role,
            term: status.term,
            leader_id: status.leader_id,
            applied_index: status.applied_index,
            committed_index: status.committed_index,
            state_hash: status.state_hash,
            pid: status.pid,
        },
        None => NodeView { id, api, up: false, role: "down".into(), pid, ..NodeView::default() },
    }
}
