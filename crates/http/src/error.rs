//! Typed error replies.
//!
//! Every error is a JSON [`ErrorBody`] with a stable code and name, and an HTTP status
//! chosen from the code: the engine's rejections keep their codes (below 1000), the
//! node's and gateway's refusals before the log keep theirs (1000 and up), and this
//! API's own errors (a body that does not parse, an unknown name, an upstream that
//! cannot be reached) are numbered from 2000. Nothing changed when an error is
//! returned, except for [`ApiError::Unavailable`] after a command was sent: then the
//! command may or may not have been applied (the order list tells).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bourse_engine::Reject;
use bourse_port::Refusal;

use crate::model::{ErrorBody, ErrorDetail};

/// This API's own codes.
pub mod code {
    pub const INVALID_BODY: u32 = 2000;
    pub const INVALID_PARAMETER: u32 = 2001;
    pub const NOT_FOUND: u32 = 2002;
    pub const UNAUTHENTICATED: u32 = 2003;
    pub const FORBIDDEN: u32 = 2004;
    pub const UPSTREAM_UNAVAILABLE: u32 = 2005;
    pub const UPSTREAM_ERROR: u32 = 2006;
    /// The key holds `connections_per_key_max` connections to this listener already;
    /// the connection is closed after this answer.
    pub const TOO_MANY_CONNECTIONS: u32 = 2007;
    /// A day-trading command the exchange logged as failed: 3000 + the spec's error
    /// number (3001 invalid arguments … 3016 dump failed).
    pub const DAY_TRADING: u32 = 3000;
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The engine refused the command; nothing changed.
    #[error("{0}")]
    Rejected(Reject),
    /// A node or gateway refused the command before the log (code ≥ 1000).
    #[error("{name}: {detail}")]
    Refused { code: u32, name: String, detail: String },
    /// The request itself is malformed.
    #[error("{message}")]
    Invalid { code: u32, name: &'static str, message: String },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    /// No upstream could be reached, or the session to it ended.
    #[error("{0}")]
    Unavailable(String),
    /// The upstream answered something unexpected.
    #[error("{0}")]
    Upstream(String),
    /// The request's key holds its most connections to this listener.
    #[error("{0}")]
    TooManyConnections(String),
    /// A day-trading command the exchange logged as failed; the message is the spec's
    /// errorMessage text.
    #[error("{}", .0.message())]
    DayTrading(bourse_engine::daytrading::DtError),
}

impl ApiError {
    pub fn invalid_body(message: impl Into<String>) -> Self {
        ApiError::Invalid { code: code::INVALID_BODY, name: "invalid_body", message: message.into() }
    }

    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        ApiError::Invalid { code: code::INVALID_PARAMETER, name: "invalid_parameter", message: message.into() }
    }

    fn parts(&self) -> (StatusCode, u32, String) {
        match self {
            ApiError::Rejected(reject) => (reject_status(*reject), u32::from(reject.code()), reject.name().to_owned()),
            ApiError::Refused { code, name, .. } => (refusal_status(*code), *code, name.clone()),
            ApiError::Invalid { code, name, .. } => (StatusCode::BAD_REQUEST, *code, (*name).to_owned()),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, code::NOT_FOUND, "not_found".into()),
            ApiError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, code::UNAUTHENTICATED, "unauthenticated".into()),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, code::FORBIDDEN, "forbidden".into()),
            ApiError::Unavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, code::UPSTREAM_UNAVAILABLE, "upstream_unavailable".into())
            }
            ApiError::Upstream(_) => (StatusCode::BAD_GATEWAY, code::UPSTREAM_ERROR, "upstream_error".into()),
            ApiError::TooManyConnections(_) => {
                (StatusCode::TOO_MANY_REQUESTS, code::TOO_MANY_CONNECTIONS, "too_many_connections".into())
            }
            ApiError::DayTrading(error) => (
                crate::daytrading::failed_status(*error),
                code::DAY_TRADING + u32::from(error.code()),
                error.message().replace(' ', "_"),
            ),
        }
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    /// The JSON body of this error.
    pub fn body(&self) -> ErrorBody {
        let (_, code, name) = self.parts();
        ErrorBody { error: ErrorDetail { code, name, message: self.to_string() } }
    }
}

/// Unknown things are 404, another account's order 403, every other rule 422.
fn reject_status(reject: Reject) -> StatusCode {
    match reject {
        Reject::AccountUnknown | Reject::AssetUnknown | Reject::SymbolUnknown | Reject::OrderUnknown => {
            StatusCode::NOT_FOUND
        }
        Reject::OrderNotOwned => StatusCode::FORBIDDEN,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

fn refusal_status(code: u32) -> StatusCode {
    match Refusal::from_code(code) {
        Some(Refusal::NotAuthorized) => StatusCode::FORBIDDEN,
        Some(refusal) if refusal.is_transient() => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::BAD_REQUEST,
    }
}

impl From<bourse_client::Error> for ApiError {
    fn from(error: bourse_client::Error) -> Self {
        use bourse_client::Error as E;
        match error {
            E::Refused { code, name, detail, .. } => ApiError::Refused { code, name, detail },
            E::NotFound(what) => ApiError::NotFound(what),
            E::Status { code, message } => match code {
                tonic::Code::Unauthenticated => ApiError::Unauthenticated(message),
                tonic::Code::PermissionDenied => ApiError::Forbidden(message),
                tonic::Code::InvalidArgument | tonic::Code::OutOfRange => ApiError::invalid_parameter(message),
                tonic::Code::NotFound => ApiError::NotFound(message),
                tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Cancelled
                | tonic::Code::Aborted
                | tonic::Code::ResourceExhausted => ApiError::Unavailable(message),
                other => ApiError::Upstream(format!("{other:?}: {message}")),
            },
            error @ (E::Unavailable { .. } | E::Closed) => ApiError::Unavailable(error.to_string()),
            other => ApiError::Upstream(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, _, _) = self.parts();
        (status, Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_rejections_keep_their_code_and_name() {
        let error = ApiError::Rejected(Reject::BalanceInsufficient);
        let (status, code, name) = error.parts();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(code, 13);
        assert_eq!(name, "balance_insufficient");
        assert_eq!(ApiError::Rejected(Reject::OrderUnknown).parts().0, StatusCode::NOT_FOUND);
    }

    #[test]
    fn gateway_refusals_map_to_their_http_status() {
        let refused = |code| ApiError::Refused { code, name: "x".into(), detail: String::new() }.parts().0;
        assert_eq!(refused(1004), StatusCode::FORBIDDEN);
        assert_eq!(refused(1005), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused(1001), StatusCode::BAD_REQUEST);
        let status = ApiError::from(bourse_client::Error::Status {
            code: tonic::Code::Unauthenticated,
            message: "unknown API key".into(),
        });
        assert_eq!(status.parts().0, StatusCode::UNAUTHORIZED);
        assert_eq!(status.body().error.message, "unknown API key");
    }
}
