//! The `DayTrading` gRPC service: `Session` (a stream of batched requests, responses as
//! they commit, for the workload driver) and `Execute` (one request, for the REST
//! routes and tools).
//!
//! Callers authenticate with the gateway's API keys (`authorization: Bearer <key>`):
//! an administrator's key acts as an administrator (the workload driver, or an operator
//! acting for any user), any other key as the user its key entry is named after
//! (`bourse gateway key-add --name USERID`): `caller` must be empty or that name, and
//! the key may then send only that user's commands. A refusal here is a response with
//! `failure` set: the command never reached the log.

use std::sync::Arc;

use bourse_engine::daytrading::{userid_valid, DtKind};
use bourse_protocol::proto;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::service::{failure, Call, Replier, Service, CALLS_IN_FLIGHT_MAX};

/// Who may call: every caller an administrator (a gateway run `--open`), or keys
/// checked by `verify`.
#[derive(Clone)]
pub enum Auth {
    Open,
    Keys(KeyCheck),
}

/// The holder of a known key: its key entry's name and whether it is an administrator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyHolder {
    pub name: String,
    pub admin: bool,
}

impl KeyHolder {
    /// Every caller of an `--open` service.
    pub fn open() -> KeyHolder {
        KeyHolder { name: String::new(), admin: true }
    }
}

/// A key → its holder, `None` for an unknown key.
pub type KeyCheck = Arc<dyn Fn(&str) -> Option<KeyHolder> + Send + Sync>;

impl Auth {
    /// Who holds the request's key; unknown keys are refused.
    fn holder<T>(&self, request: &Request<T>) -> Result<KeyHolder, Status> {
        let verify = match self {
            Auth::Open => return Ok(KeyHolder::open()),
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

/// The call a request makes, or why the caller may not make it. A key that is not an
/// administrator's acts as the user named like its key entry, and only as that user.
fn call_of(request: proto::DayTradingRequest, holder: &KeyHolder) -> Result<Call, Box<proto::DayTradingResponse>> {
    let id = request.id;
    let admin = holder.admin;
    let kind = bourse_protocol::daytrading::kind_from_wire(request.command, "DayTradingRequest.command")
        .map_err(|e| Box::new(failure(id, format!("invalid request: {}", e.field()))))?;
    let mut caller = request.caller;
    if !admin {
        if caller.is_empty() {
            caller.clone_from(&holder.name);
        } else if caller != holder.name {
            let why = format!("not authorized: the key of {:?} may act only as {:?}", holder.name, holder.name);
            return Err(Box::new(failure(id, why)));
        }
    }
    let call = Call { id, kind, args: request.args, transaction_num: request.transaction_num, caller, admin };
    if !admin {
        if !userid_valid(&call.caller) {
            let why = format!("not authorized: the key's name {:?} is not a userid", holder.name);
            return Err(Box::new(failure(id, why)));
        }
        let own = call.kind == DtKind::DumpLog && call.args.len() == 1 || call.args.first() == Some(&call.caller);
        if !own {
            let why = format!("not authorized: {} may send only its own commands", call.caller);
            return Err(Box::new(failure(id, why)));
        }
    }
    Ok(call)
}

/// Responses per `DayTradingResponses` message, at most.
const RESPONSES_PER_MESSAGE: usize = 4_096;

type ResponseStream =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<proto::DayTradingResponses, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl proto::day_trading_server::DayTrading for DayTradingGrpc {
    type SessionStream = ResponseStream;

    async fn session(
        &self,
        request: Request<Streaming<proto::DayTradingRequests>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let holder = self.auth.holder(&request)?;
        let mut inbound = request.into_inner();
        let (responses, answered) = mpsc::unbounded_channel::<proto::DayTradingResponse>();
        let (batches, outgoing) = mpsc::channel::<Result<proto::DayTradingResponses, Status>>(64);
        let limit = Arc::new(Semaphore::new(CALLS_IN_FLIGHT_MAX));
        // Writer: whatever answers are there go out as one message.
        let writer_limit = Arc::clone(&limit);
        tokio::spawn(async move {
            let mut answered = answered;
            while let Some(first) = answered.recv().await {
                // Sized once for what is waiting (no regrowing while it fills).
                let mut batch = Vec::with_capacity(1 + answered.len().min(RESPONSES_PER_MESSAGE - 1));
                batch.push(first);
                while batch.len() < RESPONSES_PER_MESSAGE {
                    match answered.try_recv() {
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
                // The whole batch's permits at once when they are free (one semaphore
                // operation), else one by one as answers free them.
                let one_by_one = match u32::try_from(batch.requests.len()).map(|n| limit.try_acquire_many(n)) {
                    Ok(Ok(permits)) => {
                        permits.forget();
                        false
                    }
                    _ => true,
                };
                for request in batch.requests {
                    if one_by_one {
                        let Ok(permit) = limit.acquire().await else { return };
                        permit.forget();
                    }
                    match call_of(request, &holder) {
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
        let holder = self.auth.holder(&request)?;
        let call = match call_of(request.into_inner(), &holder) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(caller: &str, kind: DtKind, args: &[&str]) -> proto::DayTradingRequest {
        proto::DayTradingRequest {
            id: 1,
            command: bourse_protocol::daytrading::kind_wire(kind),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            transaction_num: 0,
            caller: caller.to_owned(),
        }
    }

    fn holder(name: &str, admin: bool) -> KeyHolder {
        KeyHolder { name: name.to_owned(), admin }
    }

    #[test]
    fn a_users_key_acts_only_as_the_user_it_is_named_after() {
        let alice = holder("alice", false);
        // Named or implied, alice acts for alice.
        let call = call_of(request("alice", DtKind::Add, &["alice", "1.00"]), &alice).unwrap();
        assert_eq!((call.caller.as_str(), call.admin), ("alice", false));
        let call = call_of(request("", DtKind::DisplaySummary, &["alice"]), &alice).unwrap();
        assert_eq!(call.caller, "alice");
        // Not for bob: neither by naming bob as the caller nor by sending bob's command.
        let refused = call_of(request("bob", DtKind::Add, &["bob", "1.00"]), &alice).unwrap_err();
        assert!(refused.failure.starts_with("not authorized"), "{}", refused.failure);
        let refused = call_of(request("alice", DtKind::Buy, &["bob", "ABC", "1.00"]), &alice).unwrap_err();
        assert!(refused.failure.starts_with("not authorized"), "{}", refused.failure);
        let refused = call_of(request("", DtKind::CommitBuy, &["bob"]), &alice).unwrap_err();
        assert!(refused.failure.starts_with("not authorized"), "{}", refused.failure);
        // A key whose name is no userid acts as nobody.
        let refused = call_of(request("", DtKind::DisplaySummary, &["x"]), &holder("web front", false)).unwrap_err();
        assert!(refused.failure.starts_with("not authorized"), "{}", refused.failure);
        // The global DUMPLOG goes to the engine, which logs its refusal.
        let call = call_of(request("", DtKind::DumpLog, &["all.xml"]), &alice).unwrap();
        assert!(!call.admin);
        // An administrator acts for anyone, with or without a caller.
        let ops = holder("ops", true);
        let call = call_of(request("bob", DtKind::Add, &["bob", "1.00"]), &ops).unwrap();
        assert_eq!((call.caller.as_str(), call.admin), ("bob", true));
        assert!(call_of(request("", DtKind::Add, &["carol", "1.00"]), &ops).unwrap().admin);
    }
}
