//! Client order-entry sessions on a gateway: authenticate, check, limit, stamp, forward.
//!
//! The wire contract is the node's `OrderEntry.Session`; a client library written for a
//! node works unchanged against a gateway once it sends an API key. The client id a
//! client chooses is mapped to an exchange-wide one per key ([`Principal::claim`]), so
//! two keys' clients never share an exactly-once record; the session's first batch
//! carries that claim to the node, which checks it (`bourse_keys::KeyStore::check_claim`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::time::Instant;

use bourse_engine::command::CommandBody;
use bourse_protocol::convert::{self, ConvertError};
use bourse_protocol::proto;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::keys::Principal;
use crate::{BoxStream, Refusal, SessionEntry, State};

pub(crate) struct OrderEntryService(pub Arc<State>);

/// The key holder of a request, from `authorization: Bearer <key>`.
pub(crate) fn authenticate<T>(state: &State, request: &Request<T>) -> Result<Arc<Principal>, Status> {
    authenticate_with_key(state, request).map(|(principal, _)| principal)
}

/// The key holder of a request and the key it presented (empty on an open gateway).
pub(crate) fn authenticate_with_key<T>(
    state: &State,
    request: &Request<T>,
) -> Result<(Arc<Principal>, String), Status> {
    if state.config.open {
        return Ok((Arc::new(Principal::open()), String::new()));
    }
    let header = request
        .metadata()
        .get("authorization")
        .ok_or_else(|| Status::unauthenticated("an API key is required: authorization: Bearer <key>"))?;
    let key = header
        .to_str()
        .ok()
        .and_then(|value| value.strip_prefix("Bearer "))
        .ok_or_else(|| Status::unauthenticated("authorization must be: Bearer <key>"))?
        .trim();
    let principal =
        state.keys.read().expect("keys lock").verify(key).ok_or_else(|| Status::unauthenticated("unknown API key"))?;
    Ok((principal, key.to_owned()))
}

#[tonic::async_trait]
impl proto::order_entry_server::OrderEntry for OrderEntryService {
    type SessionStream = BoxStream<proto::ServerBatch>;

    async fn session(
        &self,
        request: Request<Streaming<proto::ClientBatch>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let (principal, key) = authenticate_with_key(&self.0, &request)?;
        let hold = self.0.session_quota.take(&principal)?;
        Ok(Response::new(open(Arc::clone(&self.0), principal, key, hold, request.into_inner())))
    }
}

/// The services offered to front ends in the gateway's process: the same sessions,
/// queries and market data as over gRPC, passed as values (`bourse_client::local`).
pub(crate) struct LocalEntry {
    pub(crate) state: Arc<State>,
    pub(crate) query: Arc<crate::proxy::QueryProxy>,
    pub(crate) market_data: Arc<crate::market::MarketDataService>,
}

impl bourse_client::LocalOrderEntry for LocalEntry {
    fn name(&self) -> String {
        self.state.config.listen.to_string()
    }

    fn query(&self) -> Arc<dyn proto::query_server::Query> {
        Arc::clone(&self.query) as Arc<dyn proto::query_server::Query>
    }

    fn market_data(&self) -> Arc<bourse_client::LocalMarketData> {
        Arc::clone(&self.market_data) as Arc<bourse_client::LocalMarketData>
    }

    fn rights(&self, key: Option<&str>) -> Option<bourse_client::KeyRights> {
        let principal = if self.state.config.open {
            Arc::new(Principal::open())
        } else {
            self.state.keys.read().expect("keys lock").verify(key?)?
        };
        let accounts = principal.accounts().to_vec();
        Some(bourse_client::KeyRights { name: principal.name.clone(), admin: principal.admin, accounts })
    }

    fn session(
        &self,
        request: Request<bourse_client::local::MessageStream<proto::ClientBatch>>,
    ) -> Result<bourse_client::local::MessageStream<proto::ServerBatch>, Status> {
        if *self.state.shutdown.borrow() {
            return Err(Status::unavailable("the gateway is shutting down"));
        }
        let (principal, key) = authenticate_with_key(&self.state, &request)?;
        let hold = self.state.session_quota.take(&principal)?;
        Ok(open(Arc::clone(&self.state), principal, key, hold, request.into_inner()))
    }
}

/// Runs a session of `principal` (which presented `key`, and holds `hold` of its
/// sessions) reading `inbound` until it ends; what it answers is the returned stream.
fn open<S>(
    state: Arc<State>,
    principal: Arc<Principal>,
    key: String,
    hold: crate::quota::Hold,
    mut inbound: S,
) -> BoxStream<proto::ServerBatch>
where
    S: tokio_stream::Stream<Item = Result<proto::ClientBatch, Status>> + Send + Unpin + 'static,
{
    let capacity = state.config.in_flight_max.max(64);
    let (outbox, outgoing) = mpsc::channel(capacity);
    let session = state.session_ids.fetch_add(1, Ordering::Relaxed);
    let entry = Arc::new(SessionEntry {
        session,
        key: key.clone(),
        revoked: tokio::sync::Notify::new(),
        outbox: outbox.clone(),
        in_flight: Default::default(),
        claim: Default::default(),
    });
    tokio::spawn(async move {
        let _hold = hold;
        let watched = Arc::clone(&entry);
        let principal_for_bucket = Arc::clone(&principal);
        state.metrics.sessions_open.fetch_add(1, Ordering::Relaxed);
        let mut reader = Reader {
            state: &state,
            principal,
            key,
            entry,
            client: None,
            claim_unsent: None,
            bucket: rate_bucket(&state, &principal_for_bucket),
            owed: Default::default(),
        };
        let mut stop = state.shutdown.clone();
        let end = tokio::select! {
            end = reader.read(&mut inbound) => end,
            () = watched.revoked.notified() => Err(Status::permission_denied("this API key was revoked")),
            _ = outbox.closed() => Ok(()),
            _ = stop.wait_for(|stopping| *stopping) => Ok(()),
        };
        if let Err(status) = end {
            let _ = outbox.try_send(Err(status));
        } else {
            // The client closed its side: its stream ends once what it sent is answered.
            let deadline = Instant::now() + std::time::Duration::from_secs(5);
            while !reader.entry.in_flight.lock().expect("in-flight lock").is_empty() && Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
        if let Some(client) = reader.client {
            let mut sessions = state.sessions.lock().expect("sessions lock");
            if sessions.get(&client).is_some_and(|e| e.session == session) {
                sessions.remove(&client);
            }
        }
        state.metrics.sessions_open.fetch_sub(1, Ordering::Relaxed);
    });
    Box::pin(ReceiverStream::new(outgoing))
}

/// Reads one session's batches.
struct Reader<'a> {
    state: &'a State,
    principal: Arc<Principal>,
    /// The API key the session presented: a claim for a key of the file carries it.
    key: String,
    entry: Arc<SessionEntry>,
    /// The exchange-wide client id, set at the first batch.
    client: Option<u64>,
    /// The session's claim until its first forwarded batch carries it up.
    claim_unsent: Option<proto::SessionClaim>,
    /// The key's rate (shared by every session of the key), or the session's own for
    /// the gateway's front ends.
    bucket: Arc<std::sync::Mutex<Bucket>>,
    /// Seqs this session refused before the log: the library fills each with a filler
    /// (a cancel of order 0), which then passes free. Any other filler is charged to the
    /// key's rate like a command, and one past it ends the session: fillers are written
    /// to the log, so they must not be a way around the rate.
    owed: std::collections::BTreeSet<u64>,
}

/// Refusals remembered for their fillers, at most (the oldest are forgotten first; a
/// filler then costs a token, as after a reconnect).
const OWED_FILLERS_MAX: usize = 65_536;

impl Reader<'_> {
    async fn read<S>(&mut self, inbound: &mut S) -> Result<(), Status>
    where
        S: tokio_stream::Stream<Item = Result<proto::ClientBatch, Status>> + Unpin,
    {
        let mut chosen = None;
        while let Some(batch) = inbound.next().await {
            let batch = batch?;
            match chosen {
                None => {
                    if batch.client_id == 0 {
                        return Err(Status::invalid_argument("client_id 0 is reserved"));
                    }
                    // A key revoked since the session opened (before it was registered,
                    // so the reload could not end it) goes no further.
                    if !self.key.is_empty() && self.state.keys.read().expect("keys lock").verify(&self.key).is_none() {
                        return Err(Status::permission_denied("this API key was revoked"));
                    }
                    chosen = Some(batch.client_id);
                    let claim = self.principal.claim(&self.key, self.state.config.id, batch.client_id);
                    let client = claim.client_id;
                    let claim = proto::SessionClaim { client_id: client, key: claim.key, local_id: claim.local_id };
                    let _ = self.entry.claim.set(claim.clone());
                    self.claim_unsent = Some(claim);
                    self.client = Some(client);
                    let old =
                        self.state.sessions.lock().expect("sessions lock").insert(client, Arc::clone(&self.entry));
                    if let Some(old) = old {
                        let _ = old.outbox.try_send(Err(Status::aborted("replaced by a newer session of this client")));
                    }
                }
                Some(first) if first != batch.client_id => {
                    return Err(Status::invalid_argument(format!(
                        "client_id {first} changed to {} mid-stream",
                        batch.client_id
                    )));
                }
                Some(_) => {}
            }
            let max = self.state.config.batch_commands_max;
            if batch.commands.len() > max {
                return Err(Status::invalid_argument(format!(
                    "a batch of {} commands exceeds the gateway's {max}",
                    batch.commands.len()
                )));
            }
            self.take(batch.commands).await?;
        }
        Ok(())
    }

    /// Refuses what this session may not send now and forwards the rest in one stamp.
    async fn take(&mut self, commands: Vec<proto::ClientCommand>) -> Result<(), Status> {
        let client = self.client.expect("set at the first batch");
        let mut refused = Vec::new();
        let mut forward = Vec::with_capacity(commands.len());
        let in_flight = self.entry.in_flight.lock().expect("in-flight lock").len();
        // One lock of the key's bucket for the whole batch, released before any await.
        {
            let mut bucket = self.bucket.lock().expect("bucket lock");
            for command in commands {
                let refusal = match self.check(&command) {
                    Check::Refused(ack) => Some(ack),
                    Check::Filler if self.owed.remove(&command.seq) => None,
                    // A filler nothing here refused (after a reconnect, or from a client
                    // that floods the log with them): a token, or the end of the session
                    // (refusing a filler would leave an honest client's seq unfilled),
                    // as a refusal the client does not retry by reconnecting.
                    Check::Filler if bucket.take() => None,
                    Check::Filler => {
                        self.state.metrics.filler_floods.fetch_add(1, Ordering::Relaxed);
                        return Err(Status::permission_denied(
                            "fillers (cancels of order 0) beyond the key's command rate: only a seq refused \
                             before the log is filled free",
                        ));
                    }
                    Check::Allowed if in_flight + forward.len() >= self.state.config.in_flight_max => Some(refuse(
                        command.seq,
                        Refusal::InFlightLimit,
                        "too many commands unanswered: wait for acks and resend",
                    )),
                    Check::Allowed if !bucket.take() => Some(refuse(
                        command.seq,
                        Refusal::RateLimited,
                        "the key's command rate is spent: wait and resend",
                    )),
                    Check::Allowed => None,
                };
                match refusal {
                    Some(ack) => {
                        self.count_refusal(&ack);
                        if self.owed.len() >= OWED_FILLERS_MAX {
                            self.owed.pop_first();
                        }
                        self.owed.insert(ack.seq);
                        refused.push(ack);
                    }
                    None => forward.push(command),
                }
            }
        }
        if !forward.is_empty() {
            self.state.forward(client, &self.entry, forward, self.claim_unsent.take());
        }
        if !refused.is_empty() {
            let batch = proto::ServerBatch { acks: refused, ..Default::default() };
            self.entry.outbox.send(Ok(batch)).await.map_err(|_| Status::cancelled("session closed"))?;
        }
        Ok(())
    }
}

/// What the key check says of one command.
enum Check {
    /// Refused before the log, with this ack.
    Refused(proto::Ack),
    /// The library's seq filler: free when it fills a seq this session refused,
    /// charged to the key's rate otherwise.
    Filler,
    /// Within the key's rights; the session's limits decide.
    Allowed,
}

impl Reader<'_> {
    /// The key's verdict on `command`. An administrative key may send anything, so its
    /// commands are not converted here just to be looked at: one that does not convert
    /// is refused by the node with the same ack (`convert::ack_refused`), also before
    /// the log.
    fn check(&self, command: &proto::ClientCommand) -> Check {
        let Some(body) = command.body.as_ref() else {
            return Check::Refused(convert::ack_refused(
                command.seq,
                &ConvertError::FieldMissing { field: "ClientCommand.body" },
            ));
        };
        if self.principal.admin {
            let filler = matches!(body, proto::client_command::Body::Cancel(cancel) if cancel.order == 0);
            return if filler { Check::Filler } else { Check::Allowed };
        }
        match CommandBody::try_from(body) {
            Err(error) => Check::Refused(convert::ack_refused(command.seq, &error)),
            Ok(body) if crate::keys::is_filler(&body) => Check::Filler,
            Ok(body) => match self.principal.refusal(&body) {
                Some(why) => Check::Refused(refuse(command.seq, Refusal::NotAuthorized, why)),
                None => Check::Allowed,
            },
        }
    }

    fn count_refusal(&self, ack: &proto::Ack) {
        let metrics = &self.state.metrics;
        let counter = match &ack.outcome {
            Some(proto::ack::Outcome::Rejected(info)) => match Refusal::from_code(info.code) {
                Some(Refusal::NotAuthorized) => &metrics.refused_not_authorized,
                Some(Refusal::RateLimited) => &metrics.refused_rate_limited,
                Some(Refusal::InFlightLimit) => &metrics.refused_in_flight,
                _ => &metrics.refused_shape,
            },
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

fn refuse(seq: u64, refusal: Refusal, detail: impl Into<String>) -> proto::Ack {
    let info = refusal.info(detail);
    proto::Ack {
        day_trading: None,
        seq,
        log_index: 0,
        duplicate: false,
        outcome: Some(proto::ack::Outcome::Rejected(info)),
        gateway_ts: 0,
    }
}

/// The rate bucket a session of `principal` draws from: its key's, shared by all the
/// key's sessions (a key cannot multiply its rate by opening sessions), or a bucket of
/// its own for the gateway's front ends, whose process keys carry many users.
fn rate_bucket(state: &State, principal: &Principal) -> Arc<std::sync::Mutex<Bucket>> {
    let fresh = || Arc::new(std::sync::Mutex::new(Bucket::new(state.config.rate_per_sec, state.config.burst)));
    if principal.is_own() {
        return fresh();
    }
    let mut buckets = state.buckets.lock().expect("buckets lock");
    Arc::clone(buckets.entry(principal.name.clone()).or_insert_with(fresh))
}

/// A token bucket: `rate` tokens a second, at most `burst` saved.
pub(crate) struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(rate: u64, burst: u64) -> Self {
        Bucket { rate: rate as f64, burst: burst as f64, tokens: burst as f64, last: Instant::now() }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * self.rate).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Bucket;

    #[test]
    fn the_bucket_allows_its_burst_then_its_rate() {
        let mut bucket = Bucket::new(1_000, 10);
        let taken = (0..20).filter(|_| bucket.take()).count();
        assert!((10..=11).contains(&taken), "the burst, give or take the time the loop took: {taken}");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let more = (0..20).filter(|_| bucket.take()).count();
        assert!((4..=10).contains(&more), "about 5 refilled in 5 ms at 1,000/s: {more}");
    }
}
