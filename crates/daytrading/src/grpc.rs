//! The `DayTrading` gRPC service: `Session` (a stream of batched requests, responses as
//! they commit, for the workload driver) and `Execute` (one request, for the REST
//! routes and tools).
//!
//! Callers authenticate with the gateway's API keys (`authorization: Bearer <key>`):
//! an administrator's key acts as an administrator (the workload driver), any other
//! key as the userid it names in `caller`, which may then send only that user's
//! commands (the web page logs in by userid). A refusal here is a response with
//! `failure` set: the command never reached the log.

use std::sync::Arc;

use bourse_engine::daytrading::{userid_valid, DtKind};
use bourse_protocol::proto;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::service::{failure, Call, Replier, Service, CALLS_IN_FLIGHT_MAX};

/// Who may call: every caller an administrator (a gateway run `--open`), or keys
/// checked by `verify` (`Some(admin)` for a known key).
#[derive(Clone)]
pub enum Auth {
    Open,
    Keys(KeyCheck),
}

/// A key → `Some(admin)` for a known key, `None` for an unknown one.
pub type KeyCheck = Arc<dyn Fn(&str) -> Option<bool> + Send + Sync>;

impl Auth {
    /// Whether the request's key is an administrator's; unknown keys are refused.
    fn admin<T>(&self, request: &Request<T>) -> Result<bool, Status> {
        let verify = match self {
            Auth::Open => return Ok(true),
            Auth::Keys(verify) => verify,
        };
        let key = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| Status::unauthenticated("an API key is required: authorization: Bearer <key>"))?;
        verify(key.trim()).ok_or_else(|| Status::unauthenticated("unknown API key"))
    }
}

pub struct DayTradingGrpc {
    pub service: Arc<Service>,
    pub auth: Auth,
}

/// The call a request makes, or why the caller may not make it.
fn call_of(request: proto::DayTradingRequest, admin: bool) -> Result<Call, Box<proto::DayTradingResponse>> {
    let id = request.id;
    let kind = bourse_protocol::daytrading::kind_from_wire(request.command, "DayTradingRequest.command")
        .map_err(|e| Box::new(failure(id, format!("invalid request: {}", e.field()))))?;
    let call =
        Call { id, kind, args: request.args, transaction_num: request.transaction_num, caller: request.caller, admin };
    if !admin {
        if !userid_valid(&call.caller) {
            return Err(Box::new(failure(id, "a key that is not an administrator's must name its user in caller")));
        }
        let own = call.kind == DtKind::DumpLog && call.args.len() == 1 || call.args.first() == Some(&call.caller);
        if !own {
            let why = format!("not authorized: {} may send only its own commands", call.caller);
            return Err(Box::new(failure(id, why)));
        }
    }
    Ok(call)
}

type ResponseStream =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<proto::DayTradingResponses, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl proto::day_trading_server::DayTrading for DayTradingGrpc {
    type SessionStream = ResponseStream;

    async fn session(
        &self,
        request: Request<Streaming<proto::DayTradingRequests>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let admin = self.auth.admin(&request)?;
        let mut inbound = request.into_inner();
        let (responses, answered) = mpsc::unbounded_channel::<proto::DayTradingResponse>();
        let (batches, outgoing) = mpsc::channel::<Result<proto::DayTradingResponses, Status>>(64);
        let limit = Arc::new(Semaphore::new(CALLS_IN_FLIGHT_MAX));
        // Writer: whatever answers are there go out as one message.
        let writer_limit = Arc::clone(&limit);
        tokio::spawn(async move {
            let mut answered = UnboundedReceiverStream::new(answered);
            while let Some(first) = answered.next().await {
                let mut batch = vec![first];
                while batch.len() < 4_096 {
                    match answered.as_mut().try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                writer_limit.add_permits(batch.len());
                if batches.send(Ok(proto::DayTradingResponses { responses: batch })).await.is_err() {
                    return;
                }
            }
        });
        let service = Arc::clone(&self.service);
        tokio::spawn(async move {
            while let Some(Ok(batch)) = inbound.next().await {
                for request in batch.requests {
                    let Ok(permit) = limit.acquire().await else { return };
                    permit.forget();
                    match call_of(request, admin) {
                        Ok(call) => service.dispatch(call, Replier::Stream(responses.clone())).await,
                        Err(refused) => {
                            let _ = responses.send(*refused);
                        }
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(outgoing))))
    }

    async fn execute(
        &self,
        request: Request<proto::DayTradingRequest>,
    ) -> Result<Response<proto::DayTradingResponse>, Status> {
        let admin = self.auth.admin(&request)?;
        let call = match call_of(request.into_inner(), admin) {
            Ok(call) => call,
            Err(refused) => return Ok(Response::new(*refused)),
        };
        let id = call.id;
        let (reply, answer) = oneshot::channel();
        self.service.dispatch(call, Replier::Once(reply)).await;
        let response = answer.await.unwrap_or_else(|_| failure(id, "the service stopped"));
        Ok(Response::new(response))
    }
}
