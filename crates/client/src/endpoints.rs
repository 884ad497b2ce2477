//! The node addresses a client may use, and failover between them.
//!
//! Endpoints are tried in turn, starting with the one that worked last; after a round in
//! which every one failed, the client pauses (exponential backoff from `backoff_min` to
//! `backoff_max`) and tries again, until `unavailable_max` has passed since the first
//! failure. An address without a scheme gets `http://`; with [`ClientOptions::tls`] the
//! connection is mutual TLS all the same (the connector's, not tonic's).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

use crate::error::{Error, Result};
use crate::options::ClientOptions;

/// Why one attempt on one endpoint failed.
pub(crate) enum AttemptError {
    /// The endpoint could not serve now (unreachable, restarting, timed out): try the next.
    Retry(String),
    /// The endpoint is not the leader and named the one that is: try that one next.
    Redirect { reason: String, leader: String },
    /// Trying elsewhere would not help; the caller hears this.
    Fatal(Error),
}

impl AttemptError {
    /// A failed call: transient statuses move on to the next endpoint, the rest are
    /// the caller's answer.
    pub(crate) fn from_status(status: tonic::Status) -> Self {
        use tonic::Code;
        if status.code() == Code::Unavailable {
            if let Some(leader) = status.metadata().get("bourse-leader").and_then(|v| v.to_str().ok()) {
                return AttemptError::Redirect { reason: status.message().to_string(), leader: leader.to_string() };
            }
        }
        match status.code() {
            Code::Unavailable
            | Code::Unknown
            | Code::Cancelled
            | Code::DeadlineExceeded
            | Code::Aborted
            | Code::Internal
            | Code::ResourceExhausted => AttemptError::Retry(format!("{:?}: {}", status.code(), status.message())),
            _ => AttemptError::Fatal(status.into()),
        }
    }
}

/// The addresses of the nodes, with a connection to the current one. A clone shares
/// the connection (an HTTP/2 channel carries many calls at once) and fails over on its
/// own.
#[derive(Clone)]
pub(crate) struct Endpoints {
    names: Vec<String>,
    endpoints: Vec<Endpoint>,
    current: usize,
    channel: Option<Channel>,
    options: ClientOptions,
}

impl Endpoints {
    pub(crate) fn new(names: Vec<String>, options: &ClientOptions) -> Result<Self> {
        options.validate()?;
        if names.is_empty() {
            return Err(Error::NoEndpoints);
        }
        let endpoints = names.iter().map(|name| endpoint(name, options)).collect::<Result<Vec<_>>>()?;
        Ok(Endpoints { names, endpoints, current: 0, channel: None, options: options.clone() })
    }

    pub(crate) fn options(&self) -> &ClientOptions {
        &self.options
    }

    /// The endpoint in use (or tried next).
    pub(crate) fn current_name(&self) -> &str {
        &self.names[self.current]
    }

    /// Runs `attempt` on a channel to each endpoint in turn until one succeeds, with
    /// backoff between rounds, for at most `unavailable_max`.
    pub(crate) async fn with_failover<T, F, Fut>(&mut self, mut attempt: F) -> Result<T>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<T, AttemptError>>,
    {
        let started = Instant::now();
        let mut backoff = self.options.backoff_min;
        let mut last = String::new();
        loop {
            for _ in 0..self.endpoints.len() {
                match self.attempt_current(&mut attempt).await {
                    Ok(value) => return Ok(value),
                    Err(AttemptError::Fatal(error)) => return Err(error),
                    Err(AttemptError::Retry(reason)) => {
                        tracing::debug!(endpoint = self.current_name(), %reason, "endpoint failed");
                        last = format!("{}: {reason}", self.current_name());
                        self.channel = None;
                        self.current = (self.current + 1) % self.endpoints.len();
                    }
                    Err(AttemptError::Redirect { reason, leader }) => {
                        tracing::debug!(endpoint = self.current_name(), %leader, "redirected to the leader");
                        last = format!("{}: {reason}", self.current_name());
                        self.channel = None;
                        let known = self.names.iter().position(|name| same_address(name, &leader));
                        self.current = known.unwrap_or((self.current + 1) % self.endpoints.len());
                    }
                }
            }
            let waited = started.elapsed();
            if waited >= self.options.unavailable_max {
                return Err(Error::Unavailable { waited, last });
            }
            tokio::time::sleep(backoff.min(self.options.unavailable_max - waited)).await;
            backoff = backoff_next(backoff, self.options.backoff_max);
        }
    }

    async fn attempt_current<T, F, Fut>(&mut self, attempt: &mut F) -> Result<T, AttemptError>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<T, AttemptError>>,
    {
        let channel = match &self.channel {
            Some(channel) => channel.clone(),
            None => {
                let endpoint = self.endpoints[self.current].clone();
                let connecting = bourse_pki::grpc::connect(endpoint, self.options.tls.as_ref().map(|tls| &tls.0));
                let channel = tokio::time::timeout(self.options.connect_timeout, connecting)
                    .await
                    .map_err(|_| AttemptError::Retry("connect timed out".into()))?
                    .map_err(|error| AttemptError::Retry(format!("connect: {error}")))?;
                self.channel = Some(channel.clone());
                channel
            }
        };
        match tokio::time::timeout(self.options.request_timeout, attempt(channel)).await {
            Ok(result) => result,
            Err(_) => Err(AttemptError::Retry(format!("no answer within {:?}", self.options.request_timeout))),
        }
    }

    /// Forgets the connection to the current endpoint and makes the next endpoint the
    /// first to try (this one took requests and went silent).
    pub(crate) fn advance(&mut self) {
        self.channel = None;
        self.current = (self.current + 1) % self.endpoints.len();
    }

    /// Forgets the connection to the current endpoint (it broke), so the next attempt
    /// connects again, to the same endpoint first.
    pub(crate) fn reset(&mut self) {
        self.channel = None;
    }
}

/// Whether two addresses name the same endpoint, with or without a scheme.
pub fn same_address(a: &str, b: &str) -> bool {
    let strip = |s: &str| s.split_once("://").map_or(s, |(_, rest)| rest).trim_end_matches('/').to_string();
    strip(a) == strip(b)
}

/// One address as a tonic endpoint with the client's timeouts and keep-alive.
fn endpoint(name: &str, options: &ClientOptions) -> Result<Endpoint> {
    let uri = if name.contains("://") { name.to_owned() } else { format!("http://{name}") };
    let bad = |reason: String| Error::BadEndpoint { endpoint: name.to_owned(), reason };
    let endpoint = Endpoint::from_shared(uri).map_err(|error| bad(error.to_string()))?;
    Ok(endpoint
        .connect_timeout(options.connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(options.keepalive_interval)
        .keep_alive_timeout(options.keepalive_interval)
        .keep_alive_while_idle(true))
}

/// How long to wait before the next round, from the current pause.
pub(crate) fn backoff_next(backoff: Duration, max: Duration) -> Duration {
    (backoff * 2).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_get_a_scheme_and_bad_ones_are_refused() {
        let options = ClientOptions::default();
        assert_eq!(endpoint("127.0.0.1:7000", &options).expect("ok").uri().to_string(), "http://127.0.0.1:7000/");
        assert_eq!(endpoint("http://node:1", &options).expect("ok").uri().to_string(), "http://node:1/");
        assert!(matches!(endpoint("not a uri", &options), Err(Error::BadEndpoint { .. })));
        assert!(matches!(Endpoints::new(vec![], &options), Err(Error::NoEndpoints)));
    }

    #[test]
    fn backoff_doubles_up_to_its_bound() {
        let max = Duration::from_millis(100);
        let mut backoff = Duration::from_millis(20);
        let mut seen = vec![];
        for _ in 0..4 {
            backoff = backoff_next(backoff, max);
            seen.push(backoff.as_millis());
        }
        assert_eq!(seen, [40, 80, 100, 100]);
    }

    #[tokio::test]
    async fn every_endpoint_is_tried_in_turn_until_unavailable_max() {
        let options = ClientOptions {
            unavailable_max: Duration::from_millis(300),
            connect_timeout: Duration::from_millis(50),
            ..ClientOptions::default()
        };
        // Port 1 on loopback refuses at once.
        let mut endpoints = Endpoints::new(vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()], &options).expect("ok");
        let result: Result<()> = endpoints.with_failover(|_| async { Ok(()) }).await;
        assert!(matches!(result, Err(Error::Unavailable { .. })), "{result:?}");
    }
}
