//! [`AdminSession`]: one command at a time through `Admin.Submit`, exactly once, for
//! command-line and administration tools.
//!
//! The session numbers its commands itself and resends the same seq (to the next
//! endpoint if need be) until the node answers it. A command whose call was abandoned
//! (the caller dropped the future, or no node could be reached) is finished first by the
//! next `submit`, so seqs stay gapless; its answer is then lost to the caller, which is
//! why such a command must be one the caller can reason about without its answer (it is
//! applied at most once either way). A refusal before the log is filled with the same
//! filler as on the stream ([`crate::window::filler_body`]).

use bourse_engine::command::CommandBody;
use bourse_engine::{ClientId, Reject};
use bourse_protocol::proto;
use bourse_protocol::proto::admin_client::AdminClient;
use bourse_protocol::refusal::Refusal;

use crate::endpoints::{AttemptError, Endpoints};
use crate::error::{Error, Result};
use crate::options::ClientOptions;
use crate::reply::Reply;
use crate::window::{filler_body, reply_from_ack};

/// Exactly-once unary submissions as one client id.
pub struct AdminSession {
    endpoints: Endpoints,
    client_id: ClientId,
    seq_next: u64,
    /// A command sent and not yet answered (its call was abandoned).
    pending: Option<proto::ClientCommand>,
}

impl AdminSession {
    /// A session as `client_id` (which must be new: seqs start at 1), connected to the
    /// first of `endpoints` that answers.
    pub async fn connect(endpoints: Vec<String>, client_id: ClientId, options: ClientOptions) -> Result<Self> {
        let mut endpoints = Endpoints::new(endpoints, &options)?;
        endpoints.with_failover(|_channel| async { Ok(()) }).await?;
        Ok(AdminSession { endpoints, client_id, seq_next: 1, pending: None })
    }

    pub fn client_id(&self) -> ClientId {
        self.client_id
    }

    /// Submits one command and returns the node's answer once it is committed and
    /// applied. An engine rejection is an `Ok` reply; [`Error::Refused`] means the node
    /// refused the shape and nothing was applied.
    pub async fn submit(&mut self, body: CommandBody) -> Result<Reply> {
        if let Some(abandoned) = self.pending.clone() {
            match self.finish(abandoned).await {
                Ok(_) | Err(Error::Refused { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        let command = proto::ClientCommand { seq: self.seq_next, body: Some((&body).into()) };
        self.seq_next += 1;
        self.finish(command).await
    }

    /// Closes the trading day: every open Day order expires. The reply's id is how many
    /// did. An operator's scheduler (cron, a systemd timer) calls this at the session's
    /// close; the exchange itself reads no clock to decide when a day ends.
    pub async fn close_day(&mut self) -> Result<Reply> {
        self.submit(CommandBody::CloseDay).await
    }

    /// Drives one command to its final answer.
    async fn finish(&mut self, command: proto::ClientCommand) -> Result<Reply> {
        self.pending = Some(command.clone());
        let ack = self.call(&command).await?;
        let code = match &ack.outcome {
            Some(proto::ack::Outcome::Rejected(info)) => Some(info),
            _ => None,
        };
        match code {
            Some(info) if info.code >= Refusal::FieldMissing.code() => {
                let refused = Error::Refused {
                    seq: ack.seq,
                    code: info.code,
                    name: info.name.clone(),
                    detail: info.detail.clone(),
                };
                let filler = proto::ClientCommand { seq: command.seq, body: Some(filler_body()) };
                self.pending = Some(filler.clone());
                let filled = self.call(&filler).await?;
                self.pending = None;
                match reply_from_ack(filled.clone()) {
                    Ok(reply) if reply.outcome != bourse_engine::Outcome::Rejected(Reject::SequenceGap) => Err(refused),
                    _ => {
                        Err(Error::Protocol(format!("the filler for seq {} was not recorded: {filled:?}", filler.seq)))
                    }
                }
            }
            Some(info) if info.code == u32::from(Reject::SequenceGap.code()) => Err(Error::Protocol(format!(
                "sequence_gap for seq {} although every earlier seq was answered",
                command.seq
            ))),
            Some(info) if info.code == u32::from(Reject::SequenceTooOld.code()) => {
                self.pending = None;
                Err(Error::OutcomeForgotten { seq: command.seq })
            }
            _ => {
                self.pending = None;
                reply_from_ack(ack)
            }
        }
    }

    /// One `Submit`, resent to the endpoints in turn until one answers.
    async fn call(&mut self, command: &proto::ClientCommand) -> Result<proto::Ack> {
        let request = proto::SubmitRequest { client_id: self.client_id.0, command: Some(command.clone()) };
        let options = self.endpoints.options().clone();
        self.endpoints
            .with_failover(|channel| {
                let request = options.request(request.clone());
                async move {
                    let response = AdminClient::new(channel).submit(request).await;
                    response.map(tonic::Response::into_inner).map_err(AttemptError::from_status)
                }
            })
            .await
    }
}
