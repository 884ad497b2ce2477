//! A node in miniature for the client's tests: the real engine behind the generated
//! `OrderEntry`, `Admin` and `Query` services, with faults on demand.
//!
//! - `break_every`: after applying that many commands, the node applies one more, then
//!   drops the answers of the whole batch and ends the stream with an error — the client
//!   sees a broken stream with commands applied whose answers it never got.
//! - `refuse_amount`: a `Withdraw` of exactly this amount is refused before the log as
//!   if its shape were wrong (code 1000); the client cannot build a wrong shape itself.
//! - `lose_every`: about every that many commands (n), one is lost on its way in (neither
//!   applied nor answered) while the stream goes on, as a command lost in a leader change
//!   would be; the commands behind it draw `sequence_gap`. The distance between losses
//!   is drawn from n - n/3 ..= n + n/3 (seeded): a fixed period could fall in step with a
//!   client that resends a window of a multiple of it and lose the same command for ever,
//!   which no real loss does.
//! - `paused`: batches wait unanswered while set.
//! - `down`: streams end and new ones are refused with `UNAVAILABLE`.
//!
//! The log index counts applied commands; fills and cancel reports go to the stream of
//! the client that placed the order, when it is the one being served.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bourse_engine::{AccountId, AssetId, ClientId, Engine, Event, SymbolId};
use bourse_protocol::convert::{self, ConvertError, LogPosition};
use bourse_protocol::proto;
use bourse_protocol::proto::admin_server::{Admin, AdminServer};
use bourse_protocol::proto::order_entry_server::{OrderEntry, OrderEntryServer};
use bourse_protocol::proto::query_server::{Query, QueryServer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

#[derive(Default)]
pub struct Faults {
    pub break_every: AtomicU64,
    pub lose_every: AtomicU64,
    pub lost: AtomicU64,
    pub refuse_amount: AtomicU64,
    pub down: AtomicBool,
    /// Commands applied since the last break.
    since_break: AtomicU64,
    pub breaks: AtomicU64,
}

pub struct State {
    pub engine: Engine,
    pub log_index: u64,
    /// Order id -> (owner client, account, symbol), for routing reports.
    owners: HashMap<u64, (u64, AccountId, SymbolId)>,
    /// Every (client, seq) the engine applied (not duplicates, not rejections of the
    /// session rules), in order.
    pub applied: Vec<(u64, u64)>,
    /// The most commands of one client seen in one batch.
    pub batch_len_seen_max: usize,
    /// Commands to receive until the next one lost (0: draw the distance).
    until_loss: u64,
    loss_rng: ChaCha8Rng,
}

impl State {
    /// Whether the command just received is the one to lose, losses about `every` apart.
    fn lose_now(&mut self, every: u64) -> bool {
        if self.until_loss == 0 {
            self.until_loss = self.loss_rng.gen_range(every - every / 3..=every + every / 3).max(1);
        }
        self.until_loss -= 1;
        self.until_loss == 0
    }
}

#[derive(Clone)]
pub struct MockNode {
    pub state: Arc<Mutex<State>>,
    pub faults: Arc<Faults>,
    paused: watch::Sender<bool>,
}

impl MockNode {
    pub fn new() -> Self {
        let state = State {
            engine: Engine::default(),
            log_index: 0,
            owners: HashMap::new(),
            applied: Vec::new(),
            batch_len_seen_max: 0,
            until_loss: 0,
            loss_rng: ChaCha8Rng::seed_from_u64(23),
        };
        MockNode { state: Arc::new(Mutex::new(state)), faults: Arc::default(), paused: watch::channel(false).0 }
    }

    pub fn pause(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    /// Serves on a new loopback port; returns the address.
    pub async fn serve(&self) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let address = listener.local_addr().expect("bound");
        let server = tonic::transport::Server::builder()
            .add_service(OrderEntryServer::new(self.clone()))
            .add_service(AdminServer::new(self.clone()))
            .add_service(QueryServer::new(self.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
        tokio::spawn(server);
        address
    }

    pub fn balance(&self, account: u32, asset: u32) -> i64 {
        let state = self.state.lock().unwrap();
        state.engine.balance(AccountId(account), AssetId(asset)).map_or(0, |balance| balance.available.0)
    }

    /// Applies one command: its answer and its reports go into `out`.
    fn apply(&self, state: &mut State, client: u64, command: &proto::ClientCommand, out: &mut proto::ServerBatch) {
        let refuse = self.faults.refuse_amount.load(Ordering::Relaxed);
        if let Some(proto::client_command::Body::Withdraw(change)) = &command.body {
            if refuse != 0 && change.amount as u64 == refuse {
                let error = ConvertError::FieldMissing { field: "Mock.refused" };
                out.acks.push(convert::ack_refused(command.seq, &error));
                return;
            }
        }
        let command_engine = match convert::command_from_proto(ClientId(client), 0, command) {
            Ok(command) => command,
            Err(error) => return out.acks.push(convert::ack_refused(command.seq, &error)),
        };
        state.log_index += 1;
        let mut events = Vec::new();
        let applied = state.engine.apply(&command_engine, &mut events);
        let session_reject = matches!(
            applied.outcome,
            bourse_engine::Outcome::Rejected(
                bourse_engine::Reject::SequenceGap | bourse_engine::Reject::SequenceTooOld
            )
        );
        if !applied.duplicate && !session_reject {
            state.applied.push((client, command.seq));
        }
        out.acks.push(convert::ack(command.seq, state.log_index, &applied));
        Self::reports(state, client, &events, out);
    }

    /// Fills and cancel reports of the orders `client` owns.
    fn reports(state: &mut State, client: u64, events: &[Event], out: &mut proto::ServerBatch) {
        let at = LogPosition { log_index: state.log_index, ts: 0 };
        let mut trade_seq = 0;
        for event in events {
            if let Event::Accepted { order, account, symbol, .. } = *event {
                state.owners.insert(order.0, (client, account, symbol));
            }
            let owner = |order: u64| state.owners.get(&order).copied();
            if let Some(reports) = convert::fill_reports(event, at, trade_seq) {
                trade_seq += 1;
                out.fills.extend(reports.into_iter().filter(|fill| owner(fill.order).map(|o| o.0) == Some(client)));
            }
            if let Event::Cancelled { order, .. } = *event {
                if let Some((owner_client, account, symbol)) = owner(order.0) {
                    if owner_client == client {
                        out.cancels.extend(convert::cancel_report(event, account, symbol, at));
                    }
                }
            }
        }
    }

    /// Applies a batch; `None` when the stream is to break now.
    fn on_batch(&self, batch: &proto::ClientBatch) -> Option<proto::ServerBatch> {
        let mut state = self.state.lock().unwrap();
        state.batch_len_seen_max = state.batch_len_seen_max.max(batch.commands.len());
        let mut out = proto::ServerBatch::default();
        let break_every = self.faults.break_every.load(Ordering::Relaxed);
        let lose_every = self.faults.lose_every.load(Ordering::Relaxed);
        for command in &batch.commands {
            if lose_every != 0 && state.lose_now(lose_every) {
                self.faults.lost.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.apply(&mut state, batch.client_id, command, &mut out);
            if break_every != 0 && self.faults.since_break.fetch_add(1, Ordering::Relaxed) + 1 >= break_every {
                self.faults.since_break.store(0, Ordering::Relaxed);
                self.faults.breaks.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        Some(out)
    }
}

#[tonic::async_trait]
impl OrderEntry for MockNode {
    type SessionStream = ReceiverStream<Result<proto::ServerBatch, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<proto::ClientBatch>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        if self.faults.down.load(Ordering::Relaxed) {
            return Err(Status::unavailable("mock node is down"));
        }
        let mut inbound = request.into_inner();
        let (sender, receiver) = mpsc::channel(1024);
        let node = self.clone();
        let mut paused = self.paused.subscribe();
        tokio::spawn(async move {
            while let Ok(Some(batch)) = inbound.message().await {
                while *paused.borrow_and_update() {
                    if paused.changed().await.is_err() {
                        return;
                    }
                }
                if node.faults.down.load(Ordering::Relaxed) {
                    let _ = sender.send(Err(Status::unavailable("mock node went down"))).await;
                    return;
                }
                match node.on_batch(&batch) {
                    Some(out) => {
                        if sender.send(Ok(out)).await.is_err() {
                            return;
                        }
                    }
                    None => {
                        let _ = sender.send(Err(Status::unavailable("injected break"))).await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(receiver)))
    }
}

#[tonic::async_trait]
impl Admin for MockNode {
    async fn submit(&self, request: Request<proto::SubmitRequest>) -> Result<Response<proto::Ack>, Status> {
        if self.faults.down.load(Ordering::Relaxed) {
            return Err(Status::unavailable("mock node is down"));
        }
        let request = request.into_inner();
        let command = request.command.ok_or_else(|| Status::invalid_argument("no command"))?;
        let mut state = self.state.lock().unwrap();
        let mut out = proto::ServerBatch::default();
        self.apply(&mut state, request.client_id, &command, &mut out);
        Ok(Response::new(out.acks.remove(0)))
    }
}

#[tonic::async_trait]
impl Query for MockNode {
    async fn get_order(&self, _: Request<proto::GetOrderRequest>) -> Result<Response<proto::GetOrderReply>, Status> {
        Err(Status::not_found("the mock keeps no order records"))
    }

    async fn get_balances(
        &self,
        request: Request<proto::GetBalancesRequest>,
    ) -> Result<Response<proto::GetBalancesReply>, Status> {
        let state = self.state.lock().unwrap();
        let balances = state
            .engine
            .balances(AccountId(request.into_inner().account))
            .ok_or_else(|| Status::not_found("account"))?;
        Ok(Response::new(convert::balances_reply(state.log_index, balances)))
    }

    async fn get_open_orders(
        &self,
        _: Request<proto::GetOpenOrdersRequest>,
    ) -> Result<Response<proto::GetOpenOrdersReply>, Status> {
        Err(Status::unimplemented("mock"))
    }

    async fn get_depth(&self, _: Request<proto::GetDepthRequest>) -> Result<Response<proto::GetDepthReply>, Status> {
        Err(Status::unimplemented("mock"))
    }

    async fn get_account_report(
        &self,
        _: Request<proto::GetAccountReportRequest>,
    ) -> Result<Response<proto::GetAccountReportReply>, Status> {
        Err(Status::unimplemented("mock"))
    }

    async fn get_exchange_report(
        &self,
        _: Request<proto::GetExchangeReportRequest>,
    ) -> Result<Response<proto::GetExchangeReportReply>, Status> {
        Err(Status::unimplemented("mock"))
    }

    async fn get_symbols(
        &self,
        _: Request<proto::GetSymbolsRequest>,
    ) -> Result<Response<proto::GetSymbolsReply>, Status> {
        let state = self.state.lock().unwrap();
        let engine = &state.engine;
        let symbols = (0..engine.symbols_len() as u32)
            .filter_map(|id| engine.symbol_spec(SymbolId(id)).map(|spec| (SymbolId(id), spec)));
        Ok(Response::new(convert::symbols_reply(state.log_index, symbols)))
    }

    async fn get_assets(&self, _: Request<proto::GetAssetsRequest>) -> Result<Response<proto::GetAssetsReply>, Status> {
        let state = self.state.lock().unwrap();
        let engine = &state.engine;
        let assets = (0..engine.assets_len() as u32)
            .filter_map(|id| engine.asset_info(AssetId(id)).map(|asset| (AssetId(id), asset)));
        Ok(Response::new(convert::assets_reply(state.log_index, assets)))
    }

    async fn get_account(
        &self,
        _: Request<proto::GetAccountRequest>,
    ) -> Result<Response<proto::GetAccountReply>, Status> {
        Err(Status::unimplemented("mock"))
    }

    async fn get_day_trading_armed(
        &self,
        _: Request<proto::GetDayTradingArmedRequest>,
    ) -> Result<Response<proto::GetDayTradingArmedReply>, Status> {
        Err(Status::unimplemented("mock"))
    }

    async fn get_day_trading_config(
        &self,
        _: Request<proto::GetDayTradingConfigRequest>,
    ) -> Result<Response<proto::GetDayTradingConfigReply>, Status> {
        Err(Status::unimplemented("mock"))
    }
}
