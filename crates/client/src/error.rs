//! The one error type of the client.
//!
//! Errors are values a caller can match on and clone (one failure of a session is handed
//! to every command that was waiting in it). An engine rejection is not an error: it is
//! an [`Outcome`](bourse_engine::Outcome) inside a [`Reply`](crate::Reply).

use std::time::Duration;

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// [`ClientOptions`](crate::ClientOptions) out of their bounds.
    #[error("invalid client options: {0}")]
    InvalidOptions(String),
    /// The endpoint list is empty.
    #[error("no endpoint given")]
    NoEndpoints,
    /// An endpoint is not a usable address.
    #[error("bad endpoint {endpoint:?}: {reason}")]
    BadEndpoint { endpoint: String, reason: String },
    /// No endpoint could be reached for `waited`; `last` is the last failure seen. The
    /// commands that were waiting may or may not have been applied.
    #[error("no node reachable for {waited:?}: {last}")]
    Unavailable { waited: Duration, last: String },
    /// The node refused the command before the log because its shape was wrong (code
    /// 1000 or more). Nothing was applied.
    #[error("seq {seq} refused before the log: {name} ({code}) {detail}")]
    Refused { seq: u64, code: u32, name: String, detail: String },
    /// The command was applied, but the node no longer remembers its outcome
    /// (`sequence_too_old`): the client kept a window larger than the node's.
    #[error("seq {seq} was applied but its outcome is no longer remembered")]
    OutcomeForgotten { seq: u64 },
    /// The node answered something this client cannot read or that contradicts what it
    /// said before.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The node does not know the order, account or symbol asked about.
    #[error("not found: {0}")]
    NotFound(String),
    /// A gRPC call failed with this status.
    #[error("gRPC status {code:?}: {message}")]
    Status { code: tonic::Code, message: String },
    /// The client was closed, or its session ended with an earlier error.
    #[error("the client is closed")]
    Closed,
}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        match status.code() {
            tonic::Code::NotFound => Error::NotFound(status.message().to_owned()),
            code => Error::Status { code, message: status.message().to_owned() },
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
