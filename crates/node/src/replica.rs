//! The node's side of replication: the engine's core as the Raft state machine's
//! [`Machine`], and what the services need to know about leadership.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bourse_cluster::member::{Leadership, Membership};
use bourse_cluster::state_machine::{Machine, MachineRequest};
use bourse_cluster::Peer;
use tokio::sync::{mpsc, watch};
use tonic::Status;

use crate::core::Request;
use crate::outbox::Sessions;

/// The core thread, reached through its request queue.
#[derive(Clone)]
pub struct CoreMachine(pub mpsc::Sender<Request>);

impl Machine for CoreMachine {
    async fn submit(&self, request: MachineRequest) -> bool {
        self.0.send(Request::Machine(request)).await.is_ok()
    }
}

/// A replicated node's handle on its cluster membership.
pub struct Replication {
    pub member: Arc<dyn Membership>,
    pub leadership: watch::Receiver<Leadership>,
    pub advertise: Peer,
}

impl Replication {
    /// Ok on the leader; otherwise UNAVAILABLE naming the leader's client address in
    /// the `bourse-leader` metadata when it is known, so clients go there directly.
    pub fn require_leader(&self) -> Result<(), Status> {
        let now = self.leadership.borrow();
        if now.is_leader {
            return Ok(());
        }
        Err(not_leader(now.leader.as_ref().map(|(_, peer)| peer.api.as_str())))
    }
}

/// UNAVAILABLE "not the leader", with the leader's address as metadata when known.
pub fn not_leader(leader_api: Option<&str>) -> Status {
    let mut status = Status::unavailable(match leader_api {
        Some(api) => format!("not the leader; the leader is at {api}"),
        None => "not the leader; no leader is known yet".to_string(),
    });
    if let Some(value) = leader_api.and_then(|api| api.parse().ok()) {
        status.metadata_mut().insert("bourse-leader", value);
    }
    status
}

/// Keeps the core's leader flag current and ends every order-entry session when this
/// node stops leading, so their clients find the new leader and resend what is
/// unanswered (exactly-once makes the resends safe).
pub async fn watch_leadership(
    mut leadership: watch::Receiver<Leadership>,
    leader: Arc<AtomicBool>,
    sessions: Arc<Sessions>,
    core: mpsc::Sender<Request>,
) {
    loop {
        let (is_leader, term) = {
            let now = leadership.borrow_and_update();
            (now.is_leader, now.term)
        };
        let was = leader.swap(is_leader, Ordering::AcqRel);
        if was != is_leader {
            tracing::info!(term, is_leader, "leadership changed");
            if was {
                sessions.kill_all(|| not_leader(None));
                let _ = core.send(Request::Deposed).await;
            }
        }
        if leadership.changed().await.is_err() {
            return;
        }
    }
}
