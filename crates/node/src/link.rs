//! The gateways' side of a node: one Link stream per gateway into the fair sequencer,
//! and the order-level Feed every member serves.
//!
//! A link carries many clients. Each client it claims is registered with the node's
//! sessions under the link, so acks, fills and cancels of that client go down the link
//! tagged with its id; a newer session of the same client (on another link, or direct)
//! takes over its reports. With the PKI a claim is checked first
//! ([`crate::auth::ClientKeys::check`]): a client of an API key needs the key, any
//! other is in the gateway's own namespace. A refused claim, or a batch of a client the
//! link never claimed, is dropped and the gateway told (`GatewayDown.refused`), which
//! ends that one session; the link and its other clients go on. A link is one stream: when it is too slow to take its
//! replies, or leadership moves, the whole link ends and the gateway reconnects and
//! resends what is unanswered (exactly-once makes the resends harmless). A link that
//! sends nothing for [`LINK_SILENT_MAX`] is ended, which takes its gateway out of the
//! sequencer's watermark.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bourse_engine::ClientId;
use bourse_fairness::Stamp;
use bourse_protocol::proto;
use rustc_hash::{FxHashMap, FxHashSet};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request as GrpcRequest, Response, Status, Streaming};

use crate::core::Request;
use crate::fair::Inbound;
use crate::outbox::{FeedItem, LinkSender, Outbox, SessionHandle};
use crate::service::{async_stream, convert_command_as, wait_shutdown, BoxStream, Shared, INBOUND_DRAIN_MAX};

/// A link silent this long is ended. A gateway sends its clock every heartbeat (1 ms by
/// default, at most 1 s by its configuration); a link that stops while connected would
/// otherwise hold every other gateway's batches for the sequencer's whole window.
pub const LINK_SILENT_MAX: std::time::Duration = std::time::Duration::from_secs(3);

pub struct GatewayLinkService(pub Shared);

#[tonic::async_trait]
impl proto::gateway_link_server::GatewayLink for GatewayLinkService {
    type LinkStream = BoxStream<proto::GatewayDown>;
    type FeedStream = BoxStream<proto::FeedMessage>;

    async fn link(
        &self,
        request: GrpcRequest<Streaming<proto::GatewayUp>>,
    ) -> Result<Response<Self::LinkStream>, Status> {
        let identity = crate::auth::identity_of(&request).cloned();
        self.open_link(request.into_inner(), identity).map(Response::new)
    }

    async fn feed(&self, _request: GrpcRequest<proto::FeedRequest>) -> Result<Response<Self::FeedStream>, Status> {
        self.open_feed().await.map(Response::new)
    }
}

impl GatewayLinkService {
    /// A gateway's link: `inbound` is what it sends (a gRPC stream, or values handed
    /// over in process); the returned stream is what the node sends back. `identity` is
    /// the caller's certificate's (none in process or without TLS): the link must claim
    /// the gateway id it names.
    pub(crate) fn open_link<S>(
        &self,
        mut inbound: S,
        identity: Option<bourse_pki::Identity>,
    ) -> Result<BoxStream<proto::GatewayDown>, Status>
    where
        S: Stream<Item = Result<proto::GatewayUp, Status>> + Send + Unpin + 'static,
    {
        self.0.require_leader()?;
        let shared = self.0.clone();
        let (down, outgoing) = mpsc::channel(shared.link_outbox_max);
        let (kill, killed) = mpsc::channel(1);
        let session = shared.session_ids.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            shared.metrics.links_open.fetch_add(1, Ordering::Relaxed);
            let may_administer = crate::auth::may_administer(identity.as_ref(), &shared.admin_gateways);
            let mut reader = LinkReader {
                shared: &shared,
                down,
                kill,
                session,
                gateway: None,
                attached: Default::default(),
                refused: Default::default(),
                identity,
                may_administer,
            };
            let closed = reader.down.clone();
            let end = tokio::select! {
                end = reader.read(&mut inbound) => end,
                _ = closed.closed() => Ok(()),
                _ = wait_shutdown(shared.shutdown.clone()) => Ok(()),
            };
            reader.close(end).await;
            shared.metrics.links_open.fetch_sub(1, Ordering::Relaxed);
            // As for sessions: keep taking what the gateway sends until it closes, so the
            // replies already queued are not reset with the stream.
            let _ = tokio::time::timeout(INBOUND_DRAIN_MAX, async { while let Some(Ok(_)) = inbound.next().await {} })
                .await;
        });
        let replies = ReceiverStream::new(outgoing).merge(ReceiverStream::new(killed));
        Ok(Box::pin(replies))
    }

    /// The order-level feed: the current image, then every entry after it.
    pub(crate) async fn open_feed(&self) -> Result<BoxStream<proto::FeedMessage>, Status> {
        let (reply, start) = oneshot::channel();
        self.0.send(Request::Feed { reply }).await?;
        let (image, mut entries) = start.await.map_err(|_| Status::unavailable("the node stopped"))?;
        let metrics = Arc::clone(&self.0.metrics);
        let stream = async_stream(move |out| async move {
            metrics.feeds_open.fetch_add(1, Ordering::Relaxed);
            let from = image.log_index;
            let message = proto::FeedMessage { body: Some(proto::feed_message::Body::Image(image)) };
            if out.send(Ok(message)).await.is_ok() {
                loop {
                    let item = match entries.recv().await {
                        Ok(item) => item,
                        Err(broadcast::error::RecvError::Closed) => break,
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            metrics.subscribers_dropped_slow.fetch_add(1, Ordering::Relaxed);
                            let status = Status::resource_exhausted(format!(
                                "feed dropped: it fell {missed} entries behind; reconnect for a new image"
                            ));
                            let _ = out.send(Err(status)).await;
                            break;
                        }
                    };
                    let entry = match &*item {
                        FeedItem::Entry(entry) if entry.log_index <= from => continue,
                        FeedItem::Entry(entry) => entry.clone(),
                        FeedItem::Reset => {
                            let status = Status::unavailable("the state was replaced by a snapshot; reconnect");
                            let _ = out.send(Err(status)).await;
                            break;
                        }
                    };
                    let message = proto::FeedMessage { body: Some(proto::feed_message::Body::Entry(entry)) };
                    if out.send(Ok(message)).await.is_err() {
                        break;
                    }
                }
            }
            metrics.feeds_open.fetch_sub(1, Ordering::Relaxed);
        });
        Ok(stream)
    }
}

/// Reads one gateway's messages into the sequencer.
struct LinkReader<'a> {
    shared: &'a Shared,
    down: LinkSender,
    kill: LinkSender,
    session: u64,
    gateway: Option<u32>,
    attached: FxHashSet<u64>,
    /// Clients whose claim was refused (or that sent before claiming), with why; the
    /// gateway is told once.
    refused: FxHashMap<u64, String>,
    identity: Option<bourse_pki::Identity>,
    /// Whether its administrative commands are taken (`auth::may_administer`).
    may_administer: bool,
}

impl LinkReader<'_> {
    async fn read<S>(&mut self, inbound: &mut S) -> Result<(), Status>
    where
        S: Stream<Item = Result<proto::GatewayUp, Status>> + Unpin,
    {
        loop {
            let up = match tokio::time::timeout(LINK_SILENT_MAX, inbound.next()).await {
                Ok(Some(up)) => up?,
                Ok(None) => return Ok(()),
                Err(_) => {
                    self.shared.metrics.links_silent.fetch_add(1, Ordering::Relaxed);
                    return Err(Status::deadline_exceeded(format!(
                        "the link sent nothing for {LINK_SILENT_MAX:?} (a gateway sends its clock every \
                         heartbeat): it is ended, and its gateway no longer holds the sequencer"
                    )));
                }
            };
            match self.gateway {
                None => {
                    crate::auth::check_gateway_id(self.identity.as_ref(), up.gateway)?;
                    self.gateway = Some(up.gateway);
                    self.send(Inbound::Connect { gateway: up.gateway }).await?;
                }
                Some(gateway) if gateway != up.gateway => {
                    return Err(Status::invalid_argument(format!(
                        "gateway id {gateway} changed to {} mid-stream",
                        up.gateway
                    )));
                }
                Some(_) => {}
            }
            let mut refusals = Vec::new();
            for claim in up.claims {
                self.claim(claim, &mut refusals)?;
            }
            // One read of the clock for the whole message, not one per batch.
            let now = self.shared.clock.now_ns();
            for mut batch in up.batches {
                let max = self.shared.client_batch_commands_max;
                if batch.commands.len() > max {
                    return Err(Status::invalid_argument(format!(
                        "a batch of {} commands exceeds client_batch_commands_max {max}",
                        batch.commands.len()
                    )));
                }
                if batch.client_id == ClientId::SYSTEM.0 {
                    return Err(Status::invalid_argument(format!(
                        "client {} is the exchange's own; no gateway relays it",
                        batch.client_id
                    )));
                }
                if let Some(claim) = batch.claim.take() {
                    if claim.client_id != batch.client_id {
                        return Err(Status::invalid_argument(format!(
                            "a batch of client {} carries a claim of client {}",
                            batch.client_id, claim.client_id
                        )));
                    }
                    self.claim(claim, &mut refusals)?;
                }
                if !self.attached.contains(&batch.client_id) {
                    if self.identity.is_some() {
                        let why = format!("client {} was not claimed on this link", batch.client_id);
                        self.refuse(batch.client_id, why, &mut refusals);
                        continue;
                    }
                    // No identity (in process, or plaintext on loopback): the gateway's word.
                    self.attach(batch.client_id)?;
                }
                let ts = self.bounded(batch.gateway_ts, now)?;
                let stamp = Stamp { ts, gateway: up.gateway, gateway_seq: batch.gateway_seq };
                let may_administer = self.may_administer;
                let items = batch.commands.iter().map(|c| (c.seq, convert_command_as(c, may_administer))).collect();
                self.send(Inbound::Batch { stamp, client: ClientId(batch.client_id), items }).await?;
            }
            if !refusals.is_empty() {
                let down = proto::GatewayDown { replies: Vec::new(), refused: refusals };
                self.down.send(Ok(down)).await.map_err(|_| Status::cancelled("the link closed"))?;
            }
            if up.watermark > 0 {
                let ts = self.bounded(up.watermark, now)?;
                let feed_delay_ns = up.feed_delay_ns.min(bourse_engine::command::FAIRNESS_NS_MAX);
                self.send(Inbound::Watermark { gateway: up.gateway, ts, feed_delay_ns }).await?;
            }
            self.shared.fair.wake();
        }
    }

    /// A gateway stamp (or watermark) checked against this node's clock (`now`): one ahead by
    /// more than the bound ends the link; one behind by more is moved up to the bound,
    /// so back-dating gains a gateway at most the bound over the others.
    fn bounded(&self, ts: u64, now: u64) -> Result<u64, Status> {
        let bound = self.shared.stamp_bound_ns;
        if ts > now.saturating_add(bound) {
            self.shared.metrics.stamps_ahead.fetch_add(1, Ordering::Relaxed);
            return Err(Status::out_of_range(format!(
                "a stamp {} ms ahead of this node's clock, beyond the bound of {} ms \
                 (link_stamp_bound_ms): the gateway's clock is wrong",
                (ts - now) / 1_000_000,
                bound / 1_000_000
            )));
        }
        let floor = now.saturating_sub(bound);
        if ts < floor {
            self.shared.metrics.stamps_clamped.fetch_add(1, Ordering::Relaxed);
            return Ok(floor);
        }
        Ok(ts)
    }

    /// Hands one message to the sequencer; the reader wakes it once per `GatewayUp`.
    async fn send(&self, message: Inbound) -> Result<(), Status> {
        self.shared.fair.send_unwoken(message).await.map_err(|()| Status::unavailable("the node is shutting down"))
    }

    /// Takes a claim of a client: checked against the key file with the PKI (a refused
    /// one is added to `refusals`), then the client is attached.
    fn claim(&mut self, claim: proto::SessionClaim, refusals: &mut Vec<proto::ClaimRefused>) -> Result<(), Status> {
        if claim.client_id == 0 {
            return Err(Status::invalid_argument("client_id 0 is reserved"));
        }
        if self.identity.is_some() && !self.attached.contains(&claim.client_id) {
            let gateway = self.gateway.expect("the gateway id is read before any claim");
            let client = claim.client_id;
            let claim = bourse_keys::Claim { client_id: client, key: claim.key, local_id: claim.local_id };
            if let Err(why) = self.shared.client_keys.check(gateway, &claim) {
                tracing::warn!(gateway, client, %why, "a gateway's claim of a client refused");
                self.refuse(client, why, refusals);
                return Ok(());
            }
            self.refused.remove(&client);
        }
        self.attach(claim.client_id)
    }

    /// Drops a client's batches on this link; the gateway hears why once.
    fn refuse(&mut self, client: u64, why: String, refusals: &mut Vec<proto::ClaimRefused>) {
        if let std::collections::hash_map::Entry::Vacant(entry) = self.refused.entry(client) {
            self.shared.metrics.claims_refused.fetch_add(1, Ordering::Relaxed);
            entry.insert(why.clone());
            refusals.push(proto::ClaimRefused { client_id: client, reason: why });
        }
    }

    /// Routes the client's reports to this link from now on.
    fn attach(&mut self, client: u64) -> Result<(), Status> {
        if client == 0 {
            return Err(Status::invalid_argument("client_id 0 is reserved"));
        }
        if self.attached.insert(client) {
            let id = ClientId(client);
            let handle = SessionHandle {
                session: self.session,
                outbox: Outbox::Link { client: id, sender: self.down.clone() },
                kill: Outbox::Link { client: id, sender: self.kill.clone() },
                // A client moving to another link must not stop this one's reader.
                stop_reading: Arc::new(tokio::sync::Notify::new()),
            };
            self.shared.sessions.register(id, handle);
        }
        Ok(())
    }

    /// Detaches every client of the link and takes its gateway out of the sequencer's
    /// watermark; a broken link ends with its status.
    async fn close(self, end: Result<(), Status>) {
        if let Err(status) = end {
            let _ = self.kill.try_send(Err(status));
        }
        for &client in &self.attached {
            self.shared.sessions.unregister(ClientId(client), self.session);
        }
        if let Some(gateway) = self.gateway {
            let _ = self.shared.fair.send(Inbound::Disconnect { gateway }).await;
        }
    }
}

/// The gateway side of this node for a gateway in its own process (`bourse serve
/// --gateway`): `GatewayLink.Link` and `GatewayLink.Feed` with the messages handed over
/// as values instead of encoded onto a socket. Everything else is as over gRPC: the
/// same reader, sequencer, checks and replies.
#[derive(Clone)]
pub struct LocalLink(pub(crate) Shared);

impl LocalLink {
    /// Opens a link that reads `up` (refused, with the leader's address, when this node
    /// does not lead).
    pub fn link<S>(&self, up: S) -> Result<BoxStream<proto::GatewayDown>, Status>
    where
        S: Stream<Item = proto::GatewayUp> + Send + Unpin + 'static,
    {
        GatewayLinkService(self.0.clone()).open_link(up.map(Ok), None)
    }

    /// The order-level feed: the current image, then every entry after it.
    pub async fn feed(&self) -> Result<BoxStream<proto::FeedMessage>, Status> {
        GatewayLinkService(self.0.clone()).open_feed().await
    }
}
