//! The gateway's one link to the leader.
//!
//! Up: stamped batches and watermarks from the pipe, coalesced into `GatewayUp`
//! messages in pipe order. Down: every attached client's acks, fills and cancels.
//!
//! Failover: when the link breaks or the node says it is not the leader, the gateway
//! connects to the leader it was told of (or the next address), claims every session
//! it holds (`GatewayUp.claims`), and resends every unanswered command that an earlier link carried, with
//! its original stamp and gateway_seq; what the pipe still holds follows as usual.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bourse_client::same_address;
use bourse_protocol::proto;
use bourse_protocol::proto::gateway_link_client::GatewayLinkClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::transport::Endpoint;

use crate::config::NodeStream;
use crate::{State, UpItem};

/// Pause after a failed attempt, doubling up to `BACKOFF_MAX`: short, because an
/// election takes a few hundred milliseconds and every one of them counts.
const BACKOFF_MIN: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_millis(50);
/// How long a node may take to accept the Link stream (a stopped process still accepts
/// TCP connections).
const OPEN_TIMEOUT: Duration = Duration::from_millis(500);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A link with commands unanswered and nothing heard for this long is taken for broken
/// (a stopped or partitioned leader that still holds the connection open).
const SILENT_MAX: Duration = Duration::from_secs(1);

/// Keeps the link up until the gateway stops.
pub(crate) async fn run(state: Arc<State>, mut pipe: mpsc::UnboundedReceiver<UpItem>) {
    let mut stop = state.shutdown.clone();
    let mut targets: Vec<String> = state.config.cluster.clone();
    let mut current = 0usize;
    let mut backoff = BACKOFF_MIN;
    loop {
        if *stop.borrow() {
            return;
        }
        let target = targets[current % targets.len()].clone();
        match connect(&state, &target).await {
            Ok((up, inbound)) => {
                tracing::info!(gateway = state.config.id, leader = %target, "link up");
                state.metrics.link_up.store(1, Ordering::Relaxed);
                state.metrics.link_connects.fetch_add(1, Ordering::Relaxed);
                backoff = BACKOFF_MIN;
                let end = tokio::select! {
                    end = pump(&state, &mut pipe, up, inbound) => end,
                    _ = stop.wait_for(|stopping| *stopping) => return,
                };
                state.metrics.link_up.store(0, Ordering::Relaxed);
                tracing::warn!(gateway = state.config.id, leader = %target, reason = %end, "link down; reconnecting");
            }
            Err(Failure::Redirect(leader)) => {
                tracing::debug!(gateway = state.config.id, %leader, "redirected to the leader");
                current = match targets.iter().position(|t| same_address(t, &leader)) {
                    Some(i) => i,
                    None => {
                        targets.push(leader);
                        targets.len() - 1
                    }
                };
                continue;
            }
            Err(Failure::Retry(reason)) => {
                tracing::debug!(gateway = state.config.id, %target, %reason, "link attempt failed");
                current += 1;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.wait_for(|stopping| *stopping) => return,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

enum Failure {
    Redirect(String),
    Retry(String),
}

type Up = mpsc::UnboundedSender<proto::GatewayUp>;

/// A connection to a node: no Nagle, keep-alive pings so a vanished node is noticed.
pub(crate) async fn channel(
    target: &str,
    tls: Option<&bourse_client::ClientTls>,
) -> Result<tonic::transport::Channel, String> {
    let uri = if target.contains("://") { target.to_owned() } else { format!("http://{target}") };
    let endpoint = Endpoint::from_shared(uri)
        .map_err(|e| e.to_string())?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_millis(500))
        .keep_alive_timeout(Duration::from_secs(1));
    let connecting = bourse_pki::grpc::connect(endpoint, tls.map(|tls| &tls.0));
    tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())
}

/// Opens a Link stream and sends the first message: every session claimed and every
/// unanswered command resent. The node in this process, when `target` is its address,
/// is reached without a socket.
async fn connect(state: &State, target: &str) -> Result<(Up, NodeStream<proto::GatewayDown>), Failure> {
    let (up, receiver) = mpsc::unbounded_channel();
    up.send(first_message(state)).map_err(|_| Failure::Retry("closed".into()))?;
    if let Some(node) = state.config.local_node_at(target) {
        let inbound = (node.link)(Box::pin(UnboundedReceiverStream::new(receiver))).map_err(refused)?;
        return Ok((up, inbound));
    }
    let channel = channel(target, state.config.tls.as_ref()).await.map_err(Failure::Retry)?;
    let up_stream = UnboundedReceiverStream::new(receiver);
    let response = tokio::time::timeout(OPEN_TIMEOUT, GatewayLinkClient::new(channel).link(up_stream))
        .await
        .map_err(|_| Failure::Retry("no answer".into()))?;
    match response {
        Ok(response) => Ok((up, Box::pin(response.into_inner()))),
        Err(status) => Err(refused(status)),
    }
}

/// A node's refusal of a link: a redirect when it names the leader.
fn refused(status: tonic::Status) -> Failure {
    let hint = status.metadata().get("bourse-leader").and_then(|v| v.to_str().ok()).map(str::to_owned);
    match hint {
        Some(leader) if status.code() == tonic::Code::Unavailable => Failure::Redirect(leader),
        _ => Failure::Retry(format!("{:?}: {}", status.code(), status.message())),
    }
}

/// Every session claimed, and every unanswered command resent with its stamp.
fn first_message(state: &State) -> proto::GatewayUp {
    let sessions: Vec<(u64, Arc<crate::SessionEntry>)> =
        state.sessions.lock().expect("sessions lock").iter().map(|(id, e)| (*id, Arc::clone(e))).collect();
    let mut message = proto::GatewayUp { gateway: state.config.id, ..Default::default() };
    let sent_through = state.sent_through.load(Ordering::Acquire);
    for (client, entry) in sessions {
        message.claims.extend(entry.claim.get().cloned());
        let in_flight = entry.in_flight.lock().expect("in-flight lock");
        for flight in in_flight.values().filter(|f| f.gateway_seq <= sent_through) {
            match message.batches.last_mut() {
                Some(batch) if batch.client_id == client && batch.gateway_seq == flight.gateway_seq => {
                    batch.commands.push(flight.command.clone())
                }
                _ => message.batches.push(proto::StampedBatch {
                    client_id: client,
                    gateway_ts: flight.gateway_ts,
                    gateway_seq: flight.gateway_seq,
                    commands: vec![flight.command.clone()],
                    claim: None,
                }),
            }
        }
    }
    let resent: usize = message.batches.iter().map(|b| b.commands.len()).sum();
    state.metrics.link_resent.fetch_add(resent as u64, Ordering::Relaxed);
    message
}

/// Moves the pipe up and the replies down until the link breaks.
async fn pump(
    state: &State,
    pipe: &mut mpsc::UnboundedReceiver<UpItem>,
    up: Up,
    mut inbound: NodeStream<proto::GatewayDown>,
) -> String {
    let mut liveness = Liveness::new(tokio::time::Instant::now());
    let mut check = tokio::time::interval(SILENT_MAX / 4);
    loop {
        tokio::select! {
            _ = check.tick() => {
                if liveness.silent(tokio::time::Instant::now(), || state.any_in_flight()) {
                    return format!("no answer for {SILENT_MAX:?} with commands in flight");
                }
            }
            item = pipe.recv() => {
                let Some(item) = item else { return "the gateway is stopping".into() };
                let mut message = proto::GatewayUp { gateway: state.config.id, ..Default::default() };
                add(&mut message, item);
                while let Ok(item) = pipe.try_recv() {
                    add(&mut message, item);
                }
                message.feed_delay_ns = state.market.take_feed_delay();
                if let Some(last) = message.batches.last() {
                    state.sent_through.store(last.gateway_seq, Ordering::Release);
                }
                let commands = !message.batches.is_empty();
                if up.send(message).is_err() {
                    return "the link's stream closed".into();
                }
                if commands {
                    liveness.sent(tokio::time::Instant::now());
                }
            }
            down = inbound.next() => match down {
                Some(Ok(down)) => {
                    liveness.heard(tokio::time::Instant::now());
                    for reply in down.replies {
                        state.deliver(reply);
                    }
                    for refused in down.refused {
                        state.refuse_session(refused);
                    }
                }
                None => return "the leader ended the link".into(),
                Some(Err(status)) => return format!("{:?}: {}", status.code(), status.message()),
            },
        }
    }
}

/// When a link counts as silent: commands are unanswered and nothing has come down for
/// `SILENT_MAX`, counted from the first command sent after the last reply (or from that
/// reply, when nothing was sent since). Counting from the last reply alone would take an
/// idle link for a dead one as soon as it carried a command again.
#[derive(Debug)]
struct Liveness {
    /// When the node last sent something down.
    heard: tokio::time::Instant,
    /// When the first command after `heard` went up.
    sent_since_heard: Option<tokio::time::Instant>,
}

impl Liveness {
    fn new(now: tokio::time::Instant) -> Liveness {
        Liveness { heard: now, sent_since_heard: None }
    }

    /// Commands went up at `now`.
    fn sent(&mut self, now: tokio::time::Instant) {
        self.sent_since_heard.get_or_insert(now);
    }

    /// Something came down at `now`: the node is alive.
    fn heard(&mut self, now: tokio::time::Instant) {
        self.heard = now;
        self.sent_since_heard = None;
    }

    /// The periodic check: whether the link is silent with commands in flight.
    fn silent(&self, now: tokio::time::Instant, in_flight: impl FnOnce() -> bool) -> bool {
        let since = self.sent_since_heard.unwrap_or(self.heard);
        now.saturating_duration_since(since) > SILENT_MAX && in_flight()
    }
}

fn add(message: &mut proto::GatewayUp, item: UpItem) {
    match item {
        UpItem::Batch(batch) => {
            message.watermark = message.watermark.max(batch.gateway_ts);
            message.batches.push(batch);
        }
        UpItem::Watermark(ts) => message.watermark = message.watermark.max(ts),
    }
}

/// Sends the gateway clock up every `heartbeat_us`, so the sequencer can release other
/// gateways' batches without waiting out its window for this one.
pub(crate) async fn heartbeats(state: Arc<State>) {
    let mut stop = state.shutdown.clone();
    let mut tick = tokio::time::interval(Duration::from_micros(state.config.heartbeat_us));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => state.heartbeat(),
            _ = stop.wait_for(|stopping| *stopping) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_command_sent_after_an_idle_spell_is_given_its_full_time() {
        let start = Instant::now();
        let mut liveness = Liveness::new(start);
        liveness.sent(start);
        liveness.heard(start + 3 * MS);
        // Idle, nothing in flight: never silent.
        assert!(!liveness.silent(start + 1_500 * MS, || false));
        // A command two seconds after the last reply: the check 10 ms later is not two
        // seconds of silence, nor is one just under SILENT_MAX after the send.
        liveness.sent(start + 2_000 * MS);
        assert!(!liveness.silent(start + 2_010 * MS, || true));
        assert!(!liveness.silent(start + 3_000 * MS, || true));
        // Unanswered for longer than SILENT_MAX: silent.
        assert!(liveness.silent(start + 3_001 * MS, || true));
    }

    #[test]
    fn later_sends_do_not_postpone_the_verdict_on_a_dead_node() {
        let start = Instant::now();
        let mut liveness = Liveness::new(start);
        liveness.heard(start);
        for k in 1..=20u32 {
            liveness.sent(start + k * 100 * MS);
        }
        // The first unanswered send was at 100 ms.
        assert!(!liveness.silent(start + 1_100 * MS, || true));
        assert!(liveness.silent(start + 1_101 * MS, || true));
    }

    #[test]
    fn commands_left_in_flight_by_the_last_reply_count_from_that_reply() {
        let start = Instant::now();
        let mut liveness = Liveness::new(start);
        liveness.sent(start);
        liveness.heard(start + 5 * MS);
        assert!(!liveness.silent(start + 1_005 * MS, || true));
        assert!(liveness.silent(start + 1_006 * MS, || true));
    }

    #[test]
    fn replies_keep_a_busy_link_alive() {
        let start = Instant::now();
        let mut liveness = Liveness::new(start);
        for k in 0..100u32 {
            let t = start + k * 100 * MS;
            liveness.sent(t);
            liveness.heard(t + 2 * MS);
            assert!(!liveness.silent(t + 50 * MS, || true));
        }
    }
}
