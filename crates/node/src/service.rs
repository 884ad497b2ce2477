//! The gRPC services: thin adapters between tonic and the core's request queue.
//!
//! They check shapes (a batch's size, one client id per stream), convert commands,
//! and wait on the bounded queue to the core, which is the node's backpressure: a
//! client sending faster than the core applies finds its stream read more slowly.
//! Nothing here decides anything about the market.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bourse_engine::command::CommandBody;
use bourse_engine::ClientId;
use bourse_protocol::convert::ConvertError;
use bourse_protocol::proto;
use bourse_protocol::proto::client_command::Body;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request as GrpcRequest, Response, Status, Streaming};

use crate::core::{Reply, Request};
use crate::fair::FairSequencer;
use crate::metrics::Metrics;
use crate::outbox::{Outbox, SessionHandle, Sessions};
use crate::query::{QueryAnswer, QueryReply, QueryRequest};
use crate::replica::Replication;

/// What every service needs: the way to the core, the sessions, the market feed.
#[derive(Clone)]
pub struct Shared {
    pub core: mpsc::Sender<Request>,
    pub sessions: Arc<Sessions>,
    pub market: broadcast::Sender<proto::MarketDataUpdate>,
    pub metrics: Arc<Metrics>,
    pub client_batch_commands_max: usize,
    pub session_outbox_max: usize,
    pub session_ids: Arc<AtomicU64>,
    /// Becomes true when the node shuts down: readers stop reading, quietly.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// The Raft member, when replicated.
    pub replication: Option<Arc<Replication>>,
    /// The client address this node advertises.
    pub advertise: String,
    /// Where gateway links hand their stamped batches.
    pub fair: FairSequencer,
    pub link_outbox_max: usize,
    /// Where `Log.Follow` reads the committed log (none for a simulated node).
    pub log: Option<crate::log::LogSource>,
    /// The engine's bounds, for log followers that start an engine of their own.
    pub engine: bourse_engine::EngineConfig,
    /// How far a gateway stamp may be from this node's clock (`link_stamp_bound_ms`).
    pub stamp_bound_ns: u64,
    /// Gateways that may relay administrative commands (`admin_gateways`).
    pub admin_gateways: Arc<[u32]>,
    /// Where the node reads the time (`NodeConfig::clock`).
    pub clock: bourse_fairness::Clock,
    /// What gateways' claims of clients are checked against (`client_keys`).
    pub client_keys: Arc<crate::auth::ClientKeys>,
}

impl Shared {
    pub(crate) async fn send(&self, request: Request) -> Result<(), Status> {
        self.metrics.queue_depth.0.fetch_add(1, Ordering::Relaxed);
        self.core.send(request).await.map_err(|_| {
            self.metrics.queue_depth.0.fetch_sub(1, Ordering::Relaxed);
            Status::unavailable("the node is shutting down")
        })
    }

    /// Commands go to the leader only (a single node always leads).
    pub(crate) fn require_leader(&self) -> Result<(), Status> {
        match &self.replication {
            Some(replication) => replication.require_leader(),
            None => Ok(()),
        }
    }

    async fn query(&self, query: QueryRequest, linearizable: bool) -> QueryAnswer {
        if let (true, Some(replication)) = (linearizable, &self.replication) {
            replication.require_leader()?;
            replication.member.linearizable_read().await.map_err(|error| match error {
                bourse_cluster::member::MemberError::NotLeader { leader } => {
                    crate::replica::not_leader(leader.as_ref().map(|(_, peer)| peer.api.as_str()))
                }
                other => Status::unavailable(format!("linearizable read failed: {other}")),
            })?;
        }
        let (reply, answer) = oneshot::channel();
        self.send(Request::Query { query, reply }).await?;
        answer.await.map_err(|_| Status::unavailable("the node stopped before answering"))?
    }
}

pub(crate) fn convert_command(command: &proto::ClientCommand) -> Result<CommandBody, ConvertError> {
    let body: &Body = command.body.as_ref().ok_or(ConvertError::FieldMissing { field: "ClientCommand.body" })?;
    CommandBody::try_from(body)
}

/// [`convert_command`] for a caller that may or may not send administrative commands
/// (`auth::may_administer`): one it may not is refused before the log.
pub(crate) fn convert_command_as(
    command: &proto::ClientCommand,
    may_administer: bool,
) -> Result<CommandBody, ConvertError> {
    let body = convert_command(command)?;
    if !may_administer && crate::auth::is_administrative(&body) {
        return Err(ConvertError::NotAuthorized { field: "ClientCommand.body" });
    }
    Ok(body)
}

/// How long a session that stopped being read keeps draining its request stream.
pub(crate) const INBOUND_DRAIN_MAX: std::time::Duration = std::time::Duration::from_secs(5);

pub struct OrderEntryService(pub Shared);

pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl proto::order_entry_server::OrderEntry for OrderEntryService {
    type SessionStream = BoxStream<proto::ServerBatch>;

    async fn session(
        &self,
        request: GrpcRequest<Streaming<proto::ClientBatch>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let identity = crate::auth::identity_of(&request).cloned();
        self.open_session(request.into_inner(), identity).map(Response::new)
    }
}

impl OrderEntryService {
    /// A client's session: `inbound` is what it sends (a gRPC stream, or values handed
    /// over in process); the returned stream is what the node answers. `identity` is the
    /// caller's certificate's (none in process or without TLS).
    pub(crate) fn open_session<S>(
        &self,
        mut inbound: S,
        identity: Option<bourse_pki::Identity>,
    ) -> Result<BoxStream<proto::ServerBatch>, Status>
    where
        S: Stream<Item = Result<proto::ClientBatch, Status>> + Send + Unpin + 'static,
    {
        self.0.require_leader()?;
        let may_administer = crate::auth::may_administer(identity.as_ref(), &self.0.admin_gateways);
        let shared = self.0.clone();
        let (outbox, outgoing) = mpsc::channel(shared.session_outbox_max);
        let (kill, killed) = mpsc::channel(1);
        let stop_reading = Arc::new(tokio::sync::Notify::new());
        let session = shared.session_ids.fetch_add(1, Ordering::Relaxed);
        let handle = SessionHandle {
            session,
            outbox: Outbox::Session(outbox.clone()),
            kill: Outbox::Session(kill),
            stop_reading: Arc::clone(&stop_reading),
        };
        tokio::spawn(async move {
            shared.metrics.sessions_open.fetch_add(1, Ordering::Relaxed);
            let mut reader = SessionReader {
                shared: &shared,
                handle: Some(handle),
                client: None,
                session,
                identity,
                may_administer,
            };
            let end = tokio::select! {
                end = reader.read(&mut inbound) => end,
                _ = stop_reading.notified() => ReadEnd::Stopped,
                _ = wait_shutdown(shared.shutdown.clone()) => ReadEnd::Stopped,
            };
            match (end, reader.client) {
                // The client has nothing more to send: end the stream once the core has
                // released the acks of everything before (the request queue is FIFO).
                (ReadEnd::ClientClosed, Some(client)) => end_after_acks(&shared, client, session).await,
                (ReadEnd::Broken(status), client) => {
                    let _ = outbox.try_send(Err(status));
                    if let Some(client) = client {
                        shared.sessions.unregister(client, session);
                    }
                }
                _ => {}
            }
            drop(outbox);
            shared.metrics.sessions_open.fetch_sub(1, Ordering::Relaxed);
            // Dropping a request stream the client is still sending on resets the whole
            // HTTP/2 stream, replies included: the acks still buffered for this session
            // would be lost. Keep taking (and ignoring) what the client sends until it
            // closes its side, so the replies drain first; bounded, so a client that
            // never closes cannot hold the task.
            let _ = tokio::time::timeout(INBOUND_DRAIN_MAX, async { while let Some(Ok(_)) = inbound.next().await {} })
                .await;
        });
        let replies = ReceiverStream::new(outgoing).merge(ReceiverStream::new(killed));
        Ok(Box::pin(replies))
    }
}

/// `OrderEntry.Session` without the network, for a caller in this process (the
/// deterministic simulator's clients): the same reader, checks and replies as over
/// gRPC, with the messages handed over as values.
#[derive(Clone)]
pub struct LocalSessions(pub(crate) Shared);

impl LocalSessions {
    /// Opens a session that reads `up` (refused, with the leader's address, when this
    /// node does not lead).
    pub fn session<S>(&self, up: S) -> Result<BoxStream<proto::ServerBatch>, Status>
    where
        S: Stream<Item = proto::ClientBatch> + Send + Unpin + 'static,
    {
        OrderEntryService(self.0.clone()).open_session(up.map(Ok), None)
    }
}

/// Ends a session once the core has released the acks of everything queued before.
async fn end_after_acks(shared: &Shared, client: ClientId, session: u64) {
    if shared.send(Request::EndSession { client, session }).await.is_err() {
        shared.sessions.unregister(client, session);
    }
}

pub(crate) async fn wait_shutdown(mut shutdown: tokio::sync::watch::Receiver<bool>) {
    while !*shutdown.borrow() {
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

/// How reading a session's commands ended.
enum ReadEnd {
    /// The client closed its side of the stream.
    ClientClosed,
    /// The stream broke or the client broke a rule: end it with this status.
    Broken(Status),
    /// The node ended the session (dropped as slow, replaced, shutting down).
    Stopped,
}

/// Reads one session's batches and forwards them to the core.
struct SessionReader<'a> {
    shared: &'a Shared,
    /// Registered with the node at the first batch, when the client id is known.
    handle: Option<SessionHandle>,
    client: Option<ClientId>,
    session: u64,
    /// The caller's, from its certificate: its client id lives in its namespace.
    identity: Option<bourse_pki::Identity>,
    may_administer: bool,
}

impl SessionReader<'_> {
    /// Reads batches until the client closes the stream or breaks a rule.
    async fn read<S>(&mut self, inbound: &mut S) -> ReadEnd
    where
        S: Stream<Item = Result<proto::ClientBatch, Status>> + Unpin,
    {
        while let Some(batch) = inbound.next().await {
            let batch = match batch {
                Ok(batch) => batch,
                Err(status) => return ReadEnd::Broken(status),
            };
            if let Err(status) = self.check(&batch) {
                return ReadEnd::Broken(status);
            }
            if batch.commands.is_empty() {
                continue;
            }
            let client = self.client.expect("registered by check");
            let may_administer = self.may_administer;
            let items = batch.commands.iter().map(|c| (c.seq, convert_command_as(c, may_administer))).collect();
            if self.shared.send(Request::Commands { client, items, reply: Reply::Session }).await.is_err() {
                // The core has stopped: the node is shutting down and ends the stream.
                return ReadEnd::Stopped;
            }
        }
        ReadEnd::ClientClosed
    }

    /// One client id per stream (registered at the first batch) and bounded batches.
    fn check(&mut self, batch: &proto::ClientBatch) -> Result<(), Status> {
        if batch.client_id == 0 || batch.client_id == ClientId::SYSTEM.0 {
            return Err(Status::invalid_argument(format!("client_id {} is reserved", batch.client_id)));
        }
        let id = ClientId(crate::auth::client_in_namespace(self.identity.as_ref(), batch.client_id));
        match self.client {
            None => {
                let handle = self.handle.take().expect("registered once");
                debug_assert_eq!(handle.session, self.session);
                self.shared.sessions.register(id, handle);
                self.client = Some(id);
            }
            Some(first) if first != id => {
                return Err(Status::invalid_argument(format!("client_id changed to {} mid-stream", batch.client_id)));
            }
            Some(_) => {}
        }
        let max = self.shared.client_batch_commands_max;
        if batch.commands.len() > max {
            return Err(Status::invalid_argument(format!(
                "a batch of {} commands exceeds client_batch_commands_max {max}",
                batch.commands.len()
            )));
        }
        Ok(())
    }
}

pub struct AdminService(pub Shared);

#[tonic::async_trait]
impl proto::admin_server::Admin for AdminService {
    async fn submit(&self, request: GrpcRequest<proto::SubmitRequest>) -> Result<Response<proto::Ack>, Status> {
        self.0.require_leader()?;
        let identity = crate::auth::identity_of(&request).cloned();
        let mut request = request.into_inner();
        if request.client_id == 0 || request.client_id == ClientId::SYSTEM.0 {
            return Err(Status::invalid_argument(format!("client_id {} is reserved", request.client_id)));
        }
        request.client_id = crate::auth::client_in_namespace(identity.as_ref(), request.client_id);
        let command = request.command.ok_or_else(|| Status::invalid_argument("SubmitRequest.command is missing"))?;
        let (reply, ack) = oneshot::channel();
        let items = vec![(command.seq, convert_command(&command))];
        self.0
            .send(Request::Commands { client: ClientId(request.client_id), items, reply: Reply::Unary(reply) })
            .await?;
        let ack = ack.await.map_err(|_| {
            Status::unavailable(
                "no answer: the node stopped or stopped leading before the command was committed; resend it",
            )
        })?;
        Ok(Response::new(ack))
    }
}

pub struct QueryService(pub Shared);

/// Sends a query to the core and unpacks the reply of the expected kind.
async fn query_as<T, R>(
    shared: &Shared,
    request: GrpcRequest<R>,
    query: fn(R) -> QueryRequest,
    unpack: fn(QueryReply) -> Option<T>,
) -> Result<Response<T>, Status> {
    let linearizable =
        request.metadata().get("bourse-read").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"linearizable"));
    let reply = shared.query(query(request.into_inner()), linearizable).await?;
    unpack(reply).map(Response::new).ok_or_else(|| Status::internal("the core answered a different query"))
}

#[tonic::async_trait]
impl proto::query_server::Query for QueryService {
    async fn get_order(
        &self,
        request: GrpcRequest<proto::GetOrderRequest>,
    ) -> Result<Response<proto::GetOrderReply>, Status> {
        query_as(&self.0, request, QueryRequest::Order, |r| match r {
            QueryReply::Order(reply) => Some(reply),
            _ => None,
        })
        .await
    }

    async fn get_balances(
        &self,
        request: GrpcRequest<proto::GetBalancesRequest>,
    ) -> Result<Response<proto::GetBalancesReply>, Status> {
        query_as(&self.0, request, QueryRequest::Balances, |r| match r {
            QueryReply::Balances(reply) => Some(reply),
            _ => None,
        })
        .await
    }

    async fn get_open_orders(
        &self,
        request: GrpcRequest<proto::GetOpenOrdersRequest>,
    ) -> Result<Response<proto::GetOpenOrdersReply>, Status> {
        query_as(&self.0, request, QueryRequest::OpenOrders, |r| match r {
            QueryReply::OpenOrders(reply) => Some(reply),
            _ => None,
        })
        .await
    }

    async fn get_depth(
        &self,
        request: GrpcRequest<proto::GetDepthRequest>,
    ) -> Result<Response<proto::GetDepthReply>, Status> {
        query_as(&self.0, request, QueryRequest::Depth, |r| match r {
            QueryReply::Depth(reply) => Some(reply),
            _ => None,
        })
        .await
    }

    async fn get_symbols(
        &self,
        request: GrpcRequest<proto::GetSymbolsRequest>,
    ) -> Result<Response<proto::GetSymbolsReply>, Status> {
        query_as(
            &self.0,
            request,
            |_| QueryRequest::Symbols,
            |r| match r {
                QueryReply::Symbols(reply) => Some(reply),
                _ => None,
            },
        )
        .await
    }

    async fn get_assets(
        &self,
        request: GrpcRequest<proto::GetAssetsRequest>,
    ) -> Result<Response<proto::GetAssetsReply>, Status> {
        query_as(
            &self.0,
            request,
            |_| QueryRequest::Assets,
            |r| match r {
                QueryReply::Assets(reply) => Some(reply),
                _ => None,
            },
        )
        .await
    }

    async fn get_account(
        &self,
        request: GrpcRequest<proto::GetAccountRequest>,
    ) -> Result<Response<proto::GetAccountReply>, Status> {
        query_as(&self.0, request, QueryRequest::Account, |r| match r {
            QueryReply::Account(reply) => Some(reply),
            _ => None,
        })
        .await
    }

    async fn get_day_trading_armed(
        &self,
        request: GrpcRequest<proto::GetDayTradingArmedRequest>,
    ) -> Result<Response<proto::GetDayTradingArmedReply>, Status> {
        query_as(
            &self.0,
            request,
            |_| QueryRequest::DayTradingArmed,
            |r| match r {
                QueryReply::DayTradingArmed(reply) => Some(reply),
                _ => None,
            },
        )
        .await
    }

    async fn get_account_report(
        &self,
        request: GrpcRequest<proto::GetAccountReportRequest>,
    ) -> Result<Response<proto::GetAccountReportReply>, Status> {
        query_as(&self.0, request, QueryRequest::AccountReport, |r| match r {
            QueryReply::AccountReport(reply) => Some(reply),
            _ => None,
        })
        .await
    }

    async fn get_exchange_report(
        &self,
        request: GrpcRequest<proto::GetExchangeReportRequest>,
    ) -> Result<Response<proto::GetExchangeReportReply>, Status> {
        query_as(
            &self.0,
            request,
            |_| QueryRequest::ExchangeReport,
            |r| match r {
                QueryReply::ExchangeReport(reply) => Some(reply),
                _ => None,
            },
        )
        .await
    }

    async fn get_day_trading_config(
        &self,
        request: GrpcRequest<proto::GetDayTradingConfigRequest>,
    ) -> Result<Response<proto::GetDayTradingConfigReply>, Status> {
        query_as(
            &self.0,
            request,
            |_| QueryRequest::DayTradingConfig,
            |r| match r {
                QueryReply::DayTradingConfig(reply) => Some(reply),
                _ => None,
            },
        )
        .await
    }
}

pub struct MarketDataService(pub Shared);

#[tonic::async_trait]
impl proto::market_data_server::MarketData for MarketDataService {
    type SubscribeStream = BoxStream<proto::MarketDataUpdate>;

    async fn subscribe(
        &self,
        request: GrpcRequest<proto::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let symbols = request.into_inner().symbols;
        let mut updates = self.0.market.subscribe();
        let metrics = Arc::clone(&self.0.metrics);
        let stream = async_stream(move |yield_tx| async move {
            metrics.subscribers_open.fetch_add(1, Ordering::Relaxed);
            let mut seq = 0u64;
            loop {
                let update = match updates.recv().await {
                    Ok(update) => update,
                    Err(broadcast::error::RecvError::Closed) => break,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        metrics.subscribers_dropped_slow.fetch_add(1, Ordering::Relaxed);
                        let status = Status::resource_exhausted(format!(
                            "subscriber dropped: it fell {missed} updates behind; subscribe again and resync from a snapshot query"
                        ));
                        let _ = yield_tx.send(Err(status)).await;
                        break;
                    }
                };
                if !symbols.is_empty() && !symbols.contains(&update_symbol(&update)) {
                    continue;
                }
                seq += 1;
                if yield_tx.send(Ok(proto::MarketDataUpdate { seq, ..update })).await.is_err() {
                    break;
                }
            }
            metrics.subscribers_open.fetch_sub(1, Ordering::Relaxed);
        });
        Ok(Response::new(stream))
    }

    async fn get_l2(
        &self,
        _request: GrpcRequest<proto::GetDepthRequest>,
    ) -> Result<Response<proto::L2Snapshot>, Status> {
        Err(Status::failed_precondition(
            "L2 sequence numbers are kept by gateways: ask a gateway, or Query.GetDepth on a node",
        ))
    }
}

/// The symbol of the updates a node publishes (trades and BBO).
fn update_symbol(update: &proto::MarketDataUpdate) -> u32 {
    match &update.update {
        Some(proto::market_data_update::Update::Trade(trade)) => trade.symbol,
        Some(proto::market_data_update::Update::Bbo(bbo)) => bbo.symbol,
        _ => u32::MAX,
    }
}

/// A stream fed by a task: the task gets a sender and the caller the receiving stream.
pub(crate) fn async_stream<T, F, Fut>(task: F) -> BoxStream<T>
where
    T: Send + 'static,
    F: FnOnce(mpsc::Sender<Result<T, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (sender, receiver) = mpsc::channel(64);
    tokio::spawn(task(sender));
    Box::pin(ReceiverStream::new(receiver))
}

pub struct ClusterService(pub Shared);

impl ClusterService {
    async fn status(&self) -> Result<proto::ClusterStatus, Status> {
        let (reply, answer) = oneshot::channel();
        self.0.send(Request::Status { reply }).await?;
        let (applied, hash) = answer.await.map_err(|_| Status::unavailable("the node stopped before answering"))?;
        let mut status = proto::ClusterStatus {
            pid: std::process::id(),
            api: self.0.advertise.clone(),
            role: "standalone".into(),
            applied_index: applied,
            state_hash: bourse_engine::hex(&hash),
            ..Default::default()
        };
        if let Some(replication) = &self.0.replication {
            let member = replication.member.status();
            status.id = member.id;
            status.api = replication.advertise.api.clone();
            status.raft = replication.advertise.raft.clone();
            status.role = member.role.into();
            status.term = member.term;
            if let Some((id, peer)) = &member.leader {
                status.leader_id = *id;
                status.leader_api = peer.api.clone();
            }
            status.last_log_index = member.last_log_index;
            status.committed_index = member.committed;
            status.snapshot_index = member.snapshot;
            status.members = member
                .members
                .into_iter()
                .map(|(id, peer, voter)| proto::ClusterMember { id, api: peer.api, raft: peer.raft, voter })
                .collect();
        }
        Ok(status)
    }

    fn replication(&self) -> Result<&Replication, Status> {
        self.0.replication.as_deref().ok_or_else(|| Status::failed_precondition("this node is not replicated"))
    }

    async fn membership_reply(
        &self,
        result: Result<(), bourse_cluster::member::MemberError>,
    ) -> Result<Response<proto::MembershipReply>, Status> {
        result.map_err(|error| match error {
            bourse_cluster::member::MemberError::NotLeader { leader } => {
                crate::replica::not_leader(leader.as_ref().map(|(_, peer)| peer.api.as_str()))
            }
            other => Status::aborted(other.to_string()),
        })?;
        Ok(Response::new(proto::MembershipReply { status: Some(self.status().await?) }))
    }
}

#[tonic::async_trait]
impl proto::cluster_server::Cluster for ClusterService {
    async fn status(
        &self,
        _request: GrpcRequest<proto::ClusterStatusRequest>,
    ) -> Result<Response<proto::ClusterStatus>, Status> {
        Ok(Response::new(ClusterService::status(self).await?))
    }

    async fn add_node(
        &self,
        request: GrpcRequest<proto::AddNodeRequest>,
    ) -> Result<Response<proto::MembershipReply>, Status> {
        let request = request.into_inner();
        if request.id == 0 || request.api.is_empty() || request.raft.is_empty() {
            return Err(Status::invalid_argument("AddNodeRequest needs an id above 0, an api and a raft address"));
        }
        let replication = self.replication()?;
        replication.require_leader()?;
        let peer = bourse_cluster::Peer { api: request.api, raft: request.raft };
        let result = replication.member.add_node(request.id, peer).await;
        self.membership_reply(result).await
    }

    async fn remove_node(
        &self,
        request: GrpcRequest<proto::RemoveNodeRequest>,
    ) -> Result<Response<proto::MembershipReply>, Status> {
        let replication = self.replication()?;
        replication.require_leader()?;
        let result = replication.member.remove_node(request.into_inner().id).await;
        self.membership_reply(result).await
    }

    async fn transfer_leader(
        &self,
        request: GrpcRequest<proto::TransferLeaderRequest>,
    ) -> Result<Response<proto::MembershipReply>, Status> {
        let replication = self.replication()?;
        let result = replication.member.transfer_leader(request.into_inner().to).await;
        self.membership_reply(result).await
    }
}
