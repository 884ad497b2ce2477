//! Queries through a gateway: passed to the cluster (any member answers), for the
//! accounts the session's key owns. A query carrying `bourse-read: linearizable` is
//! passed on as one (the leader answers after a read-index round). Queries share one
//! connection to the cluster ([`QueryPool`]), so they do not wait for one another.

use std::sync::Arc;

use bourse_client::{ClientOptions, QueryClient, QueryPool};
use bourse_engine::{AccountId, OrderId, SymbolId};
use bourse_protocol::proto;
use tokio::sync::Mutex;
use tonic::{Request, Response, Status};

use crate::session::authenticate;
use crate::State;

pub(crate) struct QueryProxy {
    state: Arc<State>,
    /// The connection to the cluster, opened on first use.
    pool: QueryPool,
}

/// Whether a request asks for a linearizable read.
fn linearizable<T>(request: &Request<T>) -> bool {
    request.metadata().get("bourse-read").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"linearizable"))
}

impl QueryProxy {
    pub(crate) fn new(state: Arc<State>) -> Self {
        let cluster = state.config.cluster.clone();
        let options = ClientOptions { tls: state.config.tls.clone(), ..ClientOptions::default() };
        let pool = QueryPool::new(move || QueryClient::connect(cluster.clone(), options.clone()));
        QueryProxy { state, pool }
    }

    async fn call<T, F>(&self, linearizable: bool, f: F) -> Result<Response<T>, Status>
    where
        F: for<'a> FnOnce(
            &'a mut QueryClient,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = bourse_client::Result<T>> + Send + 'a>>,
    {
        let result = self.pool.call(linearizable, f).await;
        result.map(Response::new).map_err(to_status)
    }

    fn owns(&self, principal: &crate::Principal, account: u32) -> Result<(), Status> {
        if principal.may_query(account) {
            Ok(())
        } else {
            Err(Status::permission_denied(format!("this key does not own account {account}")))
        }
    }
}

fn to_status(error: bourse_client::Error) -> Status {
    match error {
        bourse_client::Error::Status { code, message } => Status::new(code, message),
        bourse_client::Error::NotFound(what) => Status::not_found(what),
        other => Status::unavailable(other.to_string()),
    }
}

#[tonic::async_trait]
impl proto::query_server::Query for QueryProxy {
    async fn get_order(
        &self,
        request: Request<proto::GetOrderRequest>,
    ) -> Result<Response<proto::GetOrderReply>, Status> {
        let principal = authenticate(&self.state, &request)?;
        let linearizable = linearizable(&request);
        let order = request.into_inner().order;
        let reply = self.call(linearizable, |c| Box::pin(c.order(OrderId(order)))).await?;
        if let Some(info) = &reply.get_ref().order {
            // Another key's order answers exactly as a missing one (the node's words):
            // a refusal would tell that it exists, and whose it is.
            if !principal.may_query(info.account) {
                return Err(Status::not_found(format!("order {order}")));
            }
        }
        Ok(reply)
    }

    async fn get_balances(
        &self,
        request: Request<proto::GetBalancesRequest>,
    ) -> Result<Response<proto::GetBalancesReply>, Status> {
        let principal = authenticate(&self.state, &request)?;
        let linearizable = linearizable(&request);
        let account = request.into_inner().account;
        self.owns(&principal, account)?;
        self.call(linearizable, |c| Box::pin(c.balances(AccountId(account)))).await
    }

    async fn get_open_orders(
        &self,
        request: Request<proto::GetOpenOrdersRequest>,
    ) -> Result<Response<proto::GetOpenOrdersReply>, Status> {
        let principal = authenticate(&self.state, &request)?;
        let linearizable = linearizable(&request);
        let account = request.into_inner().account;
        self.owns(&principal, account)?;
        self.call(linearizable, |c| Box::pin(c.open_orders(AccountId(account)))).await
    }

    async fn get_depth(
        &self,
        request: Request<proto::GetDepthRequest>,
    ) -> Result<Response<proto::GetDepthReply>, Status> {
        authenticate(&self.state, &request)?;
        let linearizable = linearizable(&request);
        let request = request.into_inner();
        self.call(linearizable, |c| Box::pin(c.depth(SymbolId(request.symbol), request.levels_max))).await
    }

    async fn get_symbols(
        &self,
        request: Request<proto::GetSymbolsRequest>,
    ) -> Result<Response<proto::GetSymbolsReply>, Status> {
        authenticate(&self.state, &request)?;
        self.call(linearizable(&request), |c| Box::pin(c.symbols())).await
    }

    async fn get_assets(
        &self,
        request: Request<proto::GetAssetsRequest>,
    ) -> Result<Response<proto::GetAssetsReply>, Status> {
        authenticate(&self.state, &request)?;
        self.call(linearizable(&request), |c| Box::pin(c.assets())).await
    }

    /// Answered only for a key that owns the account: another key learns nothing, not
    /// even that the external id is taken.
    async fn get_account(
        &self,
        request: Request<proto::GetAccountRequest>,
    ) -> Result<Response<proto::GetAccountReply>, Status> {
        let principal = authenticate(&self.state, &request)?;
        let linearizable = linearizable(&request);
        let external_id = request.into_inner().external_id;
        let reply = self.call(linearizable, |c| Box::pin(c.account_by_external_id(external_id))).await?;
        if !principal.may_query(reply.get_ref().account) {
            return Err(Status::not_found(format!("account with external id {external_id}")));
        }
        Ok(reply)
    }

    /// The day-trading ledger's armed symbols name its users: administrative keys only
    /// (the day-trading front end's).
    async fn get_day_trading_armed(
        &self,
        request: Request<proto::GetDayTradingArmedRequest>,
    ) -> Result<Response<proto::GetDayTradingArmedReply>, Status> {
        let principal = authenticate(&self.state, &request)?;
        if !principal.admin {
            return Err(Status::permission_denied("the day-trading ledger's triggers need an administrative key"));
        }
        self.call(linearizable(&request), |c| Box::pin(c.day_trading_armed())).await
    }

    /// An account's report: for a key that owns the account.
    async fn get_account_report(
        &self,
        request: Request<proto::GetAccountReportRequest>,
    ) -> Result<Response<proto::GetAccountReportReply>, Status> {
        let principal = authenticate(&self.state, &request)?;
        let linearizable = linearizable(&request);
        let account = request.into_inner().account;
        self.owns(&principal, account)?;
        self.call(linearizable, |c| Box::pin(c.account_report(AccountId(account)))).await
    }

    /// The exchange's totals cover every account: administrative keys only.
    async fn get_exchange_report(
        &self,
        request: Request<proto::GetExchangeReportRequest>,
    ) -> Result<Response<proto::GetExchangeReportReply>, Status> {
        let principal = authenticate(&self.state, &request)?;
        if !principal.admin {
            return Err(Status::permission_denied("the exchange's totals need an administrative key"));
        }
        self.call(linearizable(&request), |c| Box::pin(c.exchange_report())).await
    }

    /// The ledger's settings name no one: any key.
    async fn get_day_trading_config(
        &self,
        request: Request<proto::GetDayTradingConfigRequest>,
    ) -> Result<Response<proto::GetDayTradingConfigReply>, Status> {
        authenticate(&self.state, &request)?;
        self.call(linearizable(&request), |c| Box::pin(c.day_trading_config())).await
    }
}

/// Admin.Submit through a gateway: the key must be allowed the command; the call goes
/// to the leader (following the nodes' hints), under the key's own client id space.
pub(crate) struct AdminProxy {
    state: Arc<State>,
    leader: Mutex<Option<(String, tonic::transport::Channel)>>,
}

impl AdminProxy {
    pub(crate) fn new(state: Arc<State>) -> Self {
        AdminProxy { state, leader: Mutex::new(None) }
    }
}

#[tonic::async_trait]
impl proto::admin_server::Admin for AdminProxy {
    async fn submit(&self, request: Request<proto::SubmitRequest>) -> Result<Response<proto::Ack>, Status> {
        use bourse_engine::command::CommandBody;
        let principal = authenticate(&self.state, &request)?;
        let mut request = request.into_inner();
        let command =
            request.command.as_ref().ok_or_else(|| Status::invalid_argument("SubmitRequest.command is required"))?;
        if let Some(Ok(body)) = command.body.as_ref().map(CommandBody::try_from) {
            if let Some(why) = principal.refusal(&body) {
                return Err(Status::permission_denied(format!("not_authorized: {why}")));
            }
        }
        if request.client_id == 0 {
            return Err(Status::invalid_argument("client_id 0 is reserved"));
        }
        request.client_id = principal.client_id(request.client_id);
        let mut targets = self.state.config.cluster.clone();
        let mut last = String::new();
        for _ in 0..(2 * targets.len() + 2) {
            let (target, channel) = {
                let mut leader = self.leader.lock().await;
                match leader.as_ref() {
                    Some(found) => found.clone(),
                    None => {
                        let target = targets[0].clone();
                        let tls = self.state.config.admin_tls.as_ref().or(self.state.config.tls.as_ref());
                        let channel = match crate::link::channel(&target, tls).await {
                            Ok(channel) => channel,
                            Err(reason) => {
                                last = reason;
                                targets.rotate_left(1);
                                continue;
                            }
                        };
                        *leader = Some((target.clone(), channel.clone()));
                        (target, channel)
                    }
                }
            };
            match proto::admin_client::AdminClient::new(channel).submit(request.clone()).await {
                Ok(ack) => return Ok(ack),
                Err(status) if status.code() == tonic::Code::Unavailable => {
                    *self.leader.lock().await = None;
                    last = format!("{target}: {}", status.message());
                    match status.metadata().get("bourse-leader").and_then(|v| v.to_str().ok()) {
                        Some(hint) => targets.insert(0, hint.to_owned()),
                        None => targets.rotate_left(1),
                    }
                }
                Err(status) => return Err(status),
            }
        }
        Err(Status::unavailable(format!("no leader reachable: {last}")))
    }
}
