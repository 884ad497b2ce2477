//! Client options, each with a named bound and a default.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::window::INFLIGHT_MAX_LIMIT;

/// How a client talks to its nodes. `ClientOptions::default()` suits a trading program
/// on a local network; every field is checked by [`ClientOptions::validate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// Commands sent and not yet answered, at most (1 to 128, the engine's outcome
    /// window). A submit waits while the window is full: backpressure.
    pub inflight_max: usize,
    /// Commands per `ClientBatch` on the wire, at most.
    pub batch_len_max: usize,
    /// How long one attempt to reach one endpoint may take.
    pub connect_timeout: Duration,
    /// How long one unary call (Admin, Query) or the opening of a stream may take before
    /// the next endpoint is tried; also how long a stream may leave waiting commands
    /// without any answer before it is taken for broken (and everything resent).
    pub request_timeout: Duration,
    /// The first pause after every endpoint failed once; it doubles up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// How long the client keeps trying while no endpoint can be reached before it gives
    /// up: waiting commands then fail with [`Error::Unavailable`] and the client closes.
    pub unavailable_max: Duration,
    /// Batches of events (the fire-and-forget replies, fills and cancellations of one
    /// batch from the node) buffered for the event stream, at most; a full buffer stops
    /// the session from reading the node (backpressure).
    pub events_capacity: usize,
    /// HTTP/2 keep-alive ping interval; a ping unanswered for as long again breaks the
    /// connection, so a node that vanished without closing it is noticed.
    pub keepalive_interval: Duration,
    /// The API key sent with every call (as `authorization: Bearer <key>`): gateways
    /// require one; nodes ignore it.
    pub api_key: Option<ApiKey>,
    /// Mutual TLS to the nodes (a node with the cluster's PKI takes nothing else): the
    /// certificate this client presents, and the CA and CRL the node's is checked
    /// against. `None` dials plaintext (a gateway's client port, a loopback benchmark).
    pub tls: Option<ClientTls>,
}

/// A client's mutual TLS: a connector with the certificate `bourse pki` issued to it.
#[derive(Clone, Debug)]
pub struct ClientTls(pub bourse_pki::grpc::Connector);

impl ClientTls {
    /// With the certificate issued to `identity` in the CA directory `dir`
    /// (`DIR/issued/<role>-<id>.pem` and `.key`, `DIR/ca.pem`, `DIR/crl.pem`), dialing
    /// nodes (whose certificates must name the role `node`).
    pub fn issued(dir: &std::path::Path, identity: &bourse_pki::Identity) -> Result<ClientTls> {
        bourse_pki::grpc::Connector::issued(dir, identity, bourse_pki::Role::Node)
            .map(ClientTls)
            .map_err(|e| Error::InvalidOptions(format!("TLS as {identity} from {}: {e}", dir.display())))
    }

    /// Trusting the CA certificate(s) in the PEM file `ca`, with no certificate of its
    /// own: for a gateway's client port served over TLS (the API key says who calls).
    pub fn trusting(ca: &std::path::Path) -> Result<ClientTls> {
        bourse_pki::grpc::Connector::trusting(ca)
            .map(ClientTls)
            .map_err(|e| Error::InvalidOptions(format!("TLS trusting {}: {e}", ca.display())))
    }
}

/// Two are equal when they share one configuration.
impl PartialEq for ClientTls {
    fn eq(&self, other: &Self) -> bool {
        self.0.same(&other.0)
    }
}

impl Eq for ClientTls {}

/// A secret: shown as `ApiKey(..)` in debug output.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(pub String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

impl ClientOptions {
    /// `message` as a request carrying the API key, if any.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(key) = &self.api_key {
            if let Ok(value) = format!("Bearer {}", key.0).parse() {
                request.metadata_mut().insert("authorization", value);
            }
        }
        request
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            inflight_max: INFLIGHT_MAX_LIMIT,
            batch_len_max: 64,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(3),
            backoff_min: Duration::from_millis(20),
            backoff_max: Duration::from_secs(1),
            unavailable_max: Duration::from_secs(30),
            events_capacity: 1_024,
            keepalive_interval: Duration::from_secs(2),
            api_key: None,
            tls: None,
        }
    }
}

impl ClientOptions {
    /// Every field within its bounds.
    pub fn validate(&self) -> Result<()> {
        let fail = |reason: String| Err(Error::InvalidOptions(reason));
        if !(1..=INFLIGHT_MAX_LIMIT).contains(&self.inflight_max) {
            return fail(format!("inflight_max {} not in 1..={INFLIGHT_MAX_LIMIT}", self.inflight_max));
        }
        if self.batch_len_max == 0 {
            return fail("batch_len_max must be at least 1".into());
        }
        if self.events_capacity == 0 {
            return fail("events_capacity must be at least 1".into());
        }
        for (name, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
            ("backoff_min", self.backoff_min),
            ("keepalive_interval", self.keepalive_interval),
        ] {
            if value.is_zero() {
                return fail(format!("{name} must be positive"));
            }
        }
        if let Some(key) = &self.api_key {
            if key.0.parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>().is_err() {
                return fail("api_key must be printable ASCII".into());
            }
        }
        if self.backoff_max < self.backoff_min {
            return fail("backoff_max must be at least backoff_min".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bounds_are_checked() {
        assert_eq!(ClientOptions::default().validate(), Ok(()));
        let with = |change: fn(&mut ClientOptions)| {
            let mut options = ClientOptions::default();
            change(&mut options);
            options.validate()
        };
        assert!(with(|o| o.inflight_max = 0).is_err());
        assert!(with(|o| o.inflight_max = 129).is_err());
        assert!(with(|o| o.inflight_max = 1).is_ok());
        assert!(with(|o| o.batch_len_max = 0).is_err());
        assert!(with(|o| o.events_capacity = 0).is_err());
        assert!(with(|o| o.backoff_max = Duration::ZERO).is_err());
        assert!(with(|o| o.connect_timeout = Duration::ZERO).is_err());
    }
}
