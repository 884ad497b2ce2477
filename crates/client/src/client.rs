//! [`Client`]: one exactly-once order entry session over the `OrderEntry.Session` stream.
//!
//! Callers hand commands to the client ([`Client::submit`], [`Client::submit_batch`],
//! [`Client::send`], or [`Client::reserve`] then [`Permit::send`]); a driver task owns
//! the stream. Commands wait in the [`Window`] until their final answer, so:
//! - a caller waits for a permit while `inflight_max` commands are unanswered
//!   (backpressure, never an unbounded queue);
//! - when the stream breaks or fails, the driver connects again (the same endpoint
//!   first, then the others in turn, with backoff) and resends every unanswered command
//!   in seq order with its original seq, so each is applied exactly once; answers to
//!   resends are ordinary replies, `duplicate` set when the first send had been applied;
//! - when no endpoint can be reached for `unavailable_max`, every waiting command fails
//!   with [`Error::Unavailable`] and the client is closed for good (its seqs can no
//!   longer be trusted to be gapless: start a new client with a new id).
//!
//! Answers to `submit` go back to the caller; answers to `send` and the fills and
//! cancellations of this client's orders go to the event stream ([`Client::events`]),
//! in the order the node sent them (within one `ServerBatch`: answers, then fills, then
//! cancellations). Events that arrive before the stream is taken are dropped, so take it
//! before sending.
//!
//! One driver task per client; the window is under a mutex shared by the callers and the
//! driver, held for O(batch) work and never across an await.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bourse_engine::command::CommandBody;
use bourse_engine::ClientId;
use bourse_protocol::proto;
use bourse_protocol::proto::order_entry_client::OrderEntryClient;
use tokio::sync::{mpsc, oneshot, Notify, Semaphore, SemaphorePermit};
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::endpoints::{backoff_next, AttemptError, Endpoints};
use crate::error::{Error, Result};
use crate::local::{LocalGateway, MessageStream};
use crate::options::ClientOptions;
use crate::reply::Reply;
use crate::window::{AckEffect, Window};

/// Something the session tells the holder of the event stream.
///
/// Fills and cancellations are at most once: the node sends them to the client's
/// current stream and does not replay them after a reconnect, so a caller that must
/// know every fill reads the order (`Query.GetOrder`) after [`ClientStats::reconnects`]
/// moves.
#[derive(Clone, Debug, PartialEq)]
pub enum SessionEvent {
    /// The answer to a command sent with [`Client::send`] or [`Permit::send`].
    Reply(Reply),
    /// A command sent with `send` that will get no answer (refused before the log, or
    /// the session ended).
    Failed { seq: u64, error: Error },
    /// A trade of one of this client's orders.
    Fill(proto::FillReport),
    /// One of this client's orders, or what was left of it, was cancelled.
    Cancel(proto::CancelReport),
}

/// Counters of a client's session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Commands in the window now.
    pub inflight: usize,
    /// Streams opened after the first.
    pub reconnects: u64,
    /// Resend rounds (`sequence_gap`, refusals and reconnects).
    pub rewinds: u64,
}

/// Where a command's answer goes.
#[derive(Debug)]
enum ReplyTo {
    Caller(oneshot::Sender<Result<Reply>>),
    Events,
}

struct State {
    window: Window<ReplyTo>,
    /// Set when the session ended for good: why.
    ended: Option<Error>,
    /// Every handle is gone: stop once the window is empty.
    closing: bool,
    reconnects: u64,
}

struct Shared {
    client_id: ClientId,
    options: ClientOptions,
    state: Mutex<State>,
    /// Wakes the driver: commands were pushed, or the client is closing.
    wake: Notify,
    /// Wakes flushers: the window emptied or the session ended.
    idle: Notify,
    /// One permit per free window slot.
    permits: Semaphore,
    /// The events of one batch from the node travel together: one channel operation and
    /// one wake-up per batch, not per event.
    events: mpsc::Sender<Vec<SessionEvent>>,
    events_taken: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("client state lock poisoned by a panic")
    }
}

/// Tells the driver to wind down when the last [`Client`] clone is dropped.
struct Handle {
    shared: Arc<Shared>,
    events: Mutex<Option<mpsc::Receiver<Vec<SessionEvent>>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
    }
}

/// An exactly-once order entry session with one node of a list. Cheap to clone; clones
/// share the session. Dropping the last clone lets the commands still in the window be
/// answered in the background, then ends the stream.
#[derive(Clone)]
pub struct Client {
    handle: Arc<Handle>,
}

/// A reserved window slot: sending through it never waits.
pub struct Permit<'a> {
    client: &'a Client,
    permit: SemaphorePermit<'a>,
}

impl Permit<'_> {
    /// Sends `body` without waiting for its answer, which arrives on the event stream as
    /// [`SessionEvent::Reply`] with the returned seq.
    pub fn send(self, body: &CommandBody) -> Result<u64> {
        self.client.enqueue(self.permit, body, ReplyTo::Events)
    }

    /// Sends `body`; the returned receiver gets its answer.
    pub fn submit(self, body: &CommandBody) -> Result<oneshot::Receiver<Result<Reply>>> {
        let (sender, receiver) = oneshot::channel();
        self.client.enqueue(self.permit, body, ReplyTo::Caller(sender))?;
        Ok(receiver)
    }
}

/// The event stream of a client: see [`SessionEvent`]. It ends when the session ends.
pub struct Events {
    receiver: mpsc::Receiver<Vec<SessionEvent>>,
    /// The rest of the batch last received, in order.
    batch: std::vec::IntoIter<SessionEvent>,
    /// The session ended: an empty batch, which only the end sends, came.
    ended: bool,
}

impl Events {
    fn new(receiver: mpsc::Receiver<Vec<SessionEvent>>) -> Events {
        Events { receiver, batch: Vec::new().into_iter(), ended: false }
    }

    /// The next event, or `None` once the session is over.
    pub async fn recv(&mut self) -> Option<SessionEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// The next event if one is ready.
    pub fn try_recv(&mut self) -> Option<SessionEvent> {
        loop {
            if let Some(event) = self.batch.next() {
                return Some(event);
            }
            if self.ended {
                return None;
            }
            let batch = self.receiver.try_recv().ok()?;
            self.ended = batch.is_empty();
            self.batch = batch.into_iter();
        }
    }

    fn poll_event(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<SessionEvent>> {
        loop {
            if let Some(event) = self.batch.next() {
                return std::task::Poll::Ready(Some(event));
            }
            if self.ended {
                return std::task::Poll::Ready(None);
            }
            match std::task::ready!(self.receiver.poll_recv(cx)) {
                Some(batch) => {
                    self.ended = batch.is_empty();
                    self.batch = batch.into_iter();
                }
                None => return std::task::Poll::Ready(None),
            }
        }
    }
}

impl tokio_stream::Stream for Events {
    type Item = SessionEvent;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<SessionEvent>> {
        self.poll_event(cx)
    }
}

impl Client {
    /// Opens a session as `client_id` with the first of `endpoints` that answers (tried
    /// in turn, with backoff, for at most `options.unavailable_max`). The id must be new
    /// (see [`crate::random_client_id`]): this client numbers its commands from 1.
    pub async fn connect(endpoints: Vec<String>, client_id: ClientId, options: ClientOptions) -> Result<Client> {
        let endpoints = Endpoints::new(endpoints, &options)?;
        Client::open(Source::Remote(endpoints), client_id, options).await
    }

    /// Opens a session as `client_id` on a gateway in this process (see
    /// [`crate::local`]): the same session, checks and exactly-once behaviour as over
    /// the network, without the network.
    pub async fn connect_local(gateway: LocalGateway, client_id: ClientId, options: ClientOptions) -> Result<Client> {
        options.validate()?;
        Client::open(Source::Local { gateway, options: options.clone() }, client_id, options).await
    }

    async fn open(mut source: Source, client_id: ClientId, options: ClientOptions) -> Result<Client> {
        let stream = source.open().await?;
        tracing::info!(endpoint = %source.name(), client = client_id.0, "order entry session open");
        let (events, receiver) = mpsc::channel(options.events_capacity);
        let shared = Arc::new(Shared {
            client_id,
            state: Mutex::new(State {
                window: Window::new(options.inflight_max),
                ended: None,
                closing: false,
                reconnects: 0,
            }),
            wake: Notify::new(),
            idle: Notify::new(),
            permits: Semaphore::new(options.inflight_max),
            events,
            events_taken: AtomicBool::new(false),
            options,
        });
        tokio::spawn(drive(Arc::clone(&shared), source, stream));
        Ok(Client { handle: Arc::new(Handle { shared, events: Mutex::new(Some(receiver)) }) })
    }

    pub fn client_id(&self) -> ClientId {
        self.handle.shared.client_id
    }

    pub fn options(&self) -> &ClientOptions {
        &self.handle.shared.options
    }

    pub fn stats(&self) -> ClientStats {
        let state = self.handle.shared.lock();
        ClientStats { inflight: state.window.len(), reconnects: state.reconnects, rewinds: state.window.rewinds() }
    }

    /// The event stream; `Some` the first time only. Events before this call are dropped.
    pub fn events(&self) -> Option<Events> {
        let receiver = self.handle.events.lock().expect("events lock poisoned").take()?;
        self.handle.shared.events_taken.store(true, Ordering::Release);
        Some(Events::new(receiver))
    }

    /// Waits for a free window slot. Cancel-safe: dropping the future takes nothing.
    pub async fn reserve(&self) -> Result<Permit<'_>> {
        match self.handle.shared.permits.acquire().await {
            Ok(permit) => Ok(Permit { client: self, permit }),
            Err(_closed) => Err(self.ended_error()),
        }
    }

    /// A free window slot if there is one now; `None` when the window is full or the
    /// session is over.
    pub fn try_reserve(&self) -> Option<Permit<'_>> {
        self.handle.shared.permits.try_acquire().ok().map(|permit| Permit { client: self, permit })
    }

    /// Sends one command and waits for its answer.
    pub async fn submit(&self, body: CommandBody) -> Result<Reply> {
        let receiver = self.reserve().await?.submit(&body)?;
        receiver.await.unwrap_or_else(|_| Err(self.ended_error()))
    }

    /// Sends the commands in order, pipelined (waiting for window slots as needed), and
    /// returns their answers in the same order. The first failure is returned; the
    /// commands before and after it may have been applied.
    pub async fn submit_batch(&self, bodies: Vec<CommandBody>) -> Result<Vec<Reply>> {
        let mut receivers = Vec::with_capacity(bodies.len());
        for body in &bodies {
            receivers.push(self.reserve().await?.submit(body)?);
        }
        let mut replies = Vec::with_capacity(receivers.len());
        for receiver in receivers {
            replies.push(receiver.await.unwrap_or_else(|_| Err(self.ended_error()))?);
        }
        Ok(replies)
    }

    /// Sends one command without waiting for its answer (which goes to the event
    /// stream: take it with [`Client::events`] first, or the answer is dropped); waits
    /// only for a window slot. Returns the command's seq.
    pub async fn send(&self, body: &CommandBody) -> Result<u64> {
        self.reserve().await?.send(body)
    }

    /// Waits until every command sent so far is answered.
    pub async fn flush(&self) -> Result<()> {
        let shared = &self.handle.shared;
        loop {
            let idle = shared.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            {
                let state = shared.lock();
                if let Some(error) = &state.ended {
                    return Err(error.clone());
                }
                if state.window.is_empty() {
                    return Ok(());
                }
            }
            idle.await;
        }
    }

    /// Waits for every answer, then ends this handle (the session ends when no clone is
    /// left).
    pub async fn close(self) -> Result<()> {
        self.flush().await
    }

    fn ended_error(&self) -> Error {
        self.handle.shared.lock().ended.clone().unwrap_or(Error::Closed)
    }

    fn enqueue(&self, permit: SemaphorePermit<'_>, body: &CommandBody, reply_to: ReplyTo) -> Result<u64> {
        let shared = &self.handle.shared;
        let mut state = shared.lock();
        if let Some(error) = &state.ended {
            return Err(error.clone());
        }
        let seq = state.window.push(body, reply_to).unwrap_or_else(|_| panic!("a permit guarantees a window slot"));
        permit.forget();
        drop(state);
        shared.wake.notify_one();
        Ok(seq)
    }
}

/// An open `Session` stream.
struct Stream {
    outbound: mpsc::UnboundedSender<proto::ClientBatch>,
    inbound: MessageStream<proto::ServerBatch>,
}

/// Where sessions are opened: nodes or gateways over the network, or a gateway in
/// this process.
enum Source {
    Remote(Endpoints),
    Local { gateway: LocalGateway, options: ClientOptions },
}

impl Source {
    async fn open(&mut self) -> Result<Stream> {
        match self {
            Source::Remote(endpoints) => open_stream(endpoints).await,
            Source::Local { gateway, options } => open_local(gateway, options).await,
        }
    }

    fn name(&self) -> String {
        match self {
            Source::Remote(endpoints) => endpoints.current_name().to_owned(),
            Source::Local { gateway, .. } => format!("{} (in process)", gateway.0.name()),
        }
    }

    /// The stream broke: connect again, to the same endpoint first.
    fn reset(&mut self) {
        if let Source::Remote(endpoints) = self {
            endpoints.reset();
        }
    }

    /// The endpoint took commands and went silent: try the next one first.
    fn advance(&mut self) {
        if let Source::Remote(endpoints) = self {
            endpoints.advance();
        }
    }
}

/// Opens a session on a gateway in this process; a refusal the network would retry
/// (the gateway shutting down, say) is retried with the same backoff and bound.
async fn open_local(gateway: &LocalGateway, options: &ClientOptions) -> Result<Stream> {
    let started = Instant::now();
    let mut backoff = options.backoff_min;
    loop {
        let (outbound, receiver) = mpsc::unbounded_channel();
        let requests: MessageStream<proto::ClientBatch> = Box::pin(UnboundedReceiverStream::new(receiver).map(Ok));
        let status = match gateway.0.session(options.request(requests)) {
            Ok(inbound) => return Ok(Stream { outbound, inbound }),
            Err(status) => status,
        };
        let reason = match AttemptError::from_status(status) {
            AttemptError::Fatal(error) => return Err(error),
            AttemptError::Retry(reason) | AttemptError::Redirect { reason, .. } => reason,
        };
        let waited = started.elapsed();
        if waited >= options.unavailable_max {
            return Err(Error::Unavailable { waited, last: format!("{} (in process): {reason}", gateway.0.name()) });
        }
        tokio::time::sleep(backoff.min(options.unavailable_max - waited)).await;
        backoff = backoff_next(backoff, options.backoff_max);
    }
}

/// How one stream ended.
enum StreamEnd {
    /// Closing and nothing left to answer.
    Done,
    /// Broken: connect again and resend.
    Broken(String),
    /// The node took commands but answered nothing for `request_timeout`: it may be
    /// cut off from the rest of its cluster, so resend elsewhere first.
    Silent(String),
    /// The session cannot go on.
    Fatal(Error),
}

async fn open_stream(endpoints: &mut Endpoints) -> Result<Stream> {
    let options = endpoints.options().clone();
    endpoints
        .with_failover(|channel| {
            let options = options.clone();
            async move {
                // The outbound queue is unbounded, but what goes in is bounded: each window
                // entry at most once per resend round.
                let (outbound, receiver) = mpsc::unbounded_channel();
                let response = OrderEntryClient::new(channel)
                    .session(options.request(UnboundedReceiverStream::new(receiver)))
                    .await
                    .map_err(AttemptError::from_status)?;
                Ok(Stream { outbound, inbound: Box::pin(response.into_inner()) })
            }
        })
        .await
}

/// The driver: runs streams one after another until the client is closed and answered,
/// or no endpoint can be reached.
async fn drive(shared: Arc<Shared>, mut source: Source, first: Stream) {
    let mut next = Some(first);
    loop {
        let mut stream = match next.take() {
            Some(stream) => stream,
            None => {
                if closing_and_idle(&shared) {
                    return;
                }
                match source.open().await {
                    Ok(stream) => {
                        let mut state = shared.lock();
                        state.reconnects += 1;
                        tracing::info!(
                            endpoint = %source.name(),
                            client = shared.client_id.0,
                            resending = state.window.len(),
                            "order entry session open again"
                        );
                        stream
                    }
                    Err(error) => return end_session(&shared, error).await,
                }
            }
        };
        shared.lock().window.new_stream();
        match run_stream(&shared, &mut stream).await {
            StreamEnd::Done => return,
            StreamEnd::Fatal(error) => return end_session(&shared, error).await,
            StreamEnd::Broken(reason) => {
                tracing::warn!(endpoint = %source.name(), client = shared.client_id.0, %reason, "stream broken");
                source.reset();
            }
            StreamEnd::Silent(reason) => {
                tracing::warn!(endpoint = %source.name(), client = shared.client_id.0, %reason, "node silent; trying the next");
                source.advance();
            }
        }
    }
}

fn closing_and_idle(shared: &Shared) -> bool {
    let state = shared.lock();
    state.closing && state.window.is_empty()
}

/// Runs one stream until it breaks or the client is closed and answered. A stream on
/// which commands wait and no answer arrives for `request_timeout` counts as broken: a
/// command lost on the way (say in a leader change) would otherwise wait for ever when
/// nothing behind it draws a `sequence_gap`.
async fn run_stream(shared: &Shared, stream: &mut Stream) -> StreamEnd {
    let answer_timeout = shared.options.request_timeout;
    let mut waiting_since: Option<Instant> = None;
    loop {
        if !send_unsent(shared, &stream.outbound) {
            return StreamEnd::Broken("the outbound stream closed".into());
        }
        let (empty, closing) = {
            let state = shared.lock();
            (state.window.is_empty(), state.closing)
        };
        if empty && closing {
            return StreamEnd::Done;
        }
        waiting_since = if empty { None } else { Some(waiting_since.unwrap_or_else(Instant::now)) };
        let give_up_at = waiting_since.map(|since| since + answer_timeout);
        tokio::select! {
            biased;
            message = stream.inbound.next() => match message.transpose() {
                Ok(Some(batch)) => {
                    if !batch.acks.is_empty() {
                        waiting_since = None;
                    }
                    if let Err(error) = on_batch(shared, batch).await {
                        return StreamEnd::Fatal(error);
                    }
                }
                Ok(None) => return StreamEnd::Broken("the node ended the stream".into()),
                // Refused, not broken: the same session would be refused again (a key the
                // nodes do not know, a caller whose role may not do this).
                Err(status) if matches!(status.code(), tonic::Code::PermissionDenied | tonic::Code::Unauthenticated) => {
                    return StreamEnd::Fatal(status.into())
                }
                Err(status) => return StreamEnd::Broken(format!("{:?}: {}", status.code(), status.message())),
            },
            () = shared.wake.notified() => {}
            () = sleep_until_some(give_up_at) => {
                return StreamEnd::Silent(format!("no answer within {answer_timeout:?}"));
            }
        }
    }
}

/// Sleeps until `at`, or for ever when there is no `at`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Sends what the window has not sent on this stream; false when the stream is gone.
fn send_unsent(shared: &Shared, outbound: &mpsc::UnboundedSender<proto::ClientBatch>) -> bool {
    let mut state = shared.lock();
    loop {
        let commands = state.window.take_sendable(shared.options.batch_len_max);
        if commands.is_empty() {
            return true;
        }
        if outbound.send(proto::ClientBatch { client_id: shared.client_id.0, commands }).is_err() {
            return false;
        }
    }
}

/// Applies one batch from the node: answers to the window (freeing slots), then hands
/// out replies, fills and cancellations.
async fn on_batch(shared: &Shared, batch: proto::ServerBatch) -> Result<()> {
    let mut completions = Vec::with_capacity(batch.acks.len());
    let mut freed = 0;
    let mut fatal = None;
    let idle = {
        let mut state = shared.lock();
        for ack in batch.acks {
            let seq = ack.seq;
            let (effect, count) = state.window.on_ack(ack);
            freed += count;
            match effect {
                AckEffect::Completed { token, result } => completions.push((seq, token, result)),
                AckEffect::Rewound => tracing::debug!(seq, "sequence_gap: resending from the oldest"),
                AckEffect::Stale | AckEffect::FillerDone => {}
                AckEffect::Fatal(error) => {
                    fatal = Some(error);
                    break;
                }
            }
        }
        state.window.is_empty()
    };
    shared.permits.add_permits(freed);
    if idle {
        shared.idle.notify_waiters();
    }
    let taken = shared.events_taken.load(Ordering::Acquire);
    let mut events = Vec::new();
    if taken {
        events.reserve(completions.len() + batch.fills.len() + batch.cancels.len());
    }
    for (seq, token, result) in completions {
        deliver(&mut events, taken, seq, token, result);
    }
    if let Some(error) = fatal {
        send_events(shared, events).await;
        return Err(error);
    }
    if taken {
        events.extend(batch.fills.into_iter().map(SessionEvent::Fill));
        events.extend(batch.cancels.into_iter().map(SessionEvent::Cancel));
    }
    send_events(shared, events).await;
    Ok(())
}

/// Answers a caller at once; an answer for the event stream joins `events` (dropped
/// when the stream was never taken).
fn deliver(events: &mut Vec<SessionEvent>, taken: bool, seq: u64, to: ReplyTo, result: Result<Reply>) {
    match to {
        ReplyTo::Caller(sender) => {
            let _caller_gone = sender.send(result);
        }
        ReplyTo::Events if taken => events.push(match result {
            Ok(reply) => SessionEvent::Reply(reply),
            Err(error) => SessionEvent::Failed { seq, error },
        }),
        ReplyTo::Events => {}
    }
}

/// Hands a batch of events to the event stream, waiting only when its buffer is full.
async fn send_events(shared: &Shared, events: Vec<SessionEvent>) {
    if events.is_empty() {
        return;
    }
    match shared.events.try_send(events) {
        Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
        Err(mpsc::error::TrySendError::Full(events)) => {
            let _receiver_gone = shared.events.send(events).await;
        }
    }
}

/// The session is over: every waiting command fails with `error`, callers waiting for a
/// slot are turned away, flushers are woken.
async fn end_session(shared: &Shared, error: Error) {
    tracing::error!(client = shared.client_id.0, %error, "order entry session ended");
    let tokens = {
        let mut state = shared.lock();
        state.ended = Some(error.clone());
        state.window.drain_tokens()
    };
    shared.permits.close();
    shared.idle.notify_waiters();
    let taken = shared.events_taken.load(Ordering::Acquire);
    let mut events = Vec::new();
    for (seq, token) in tokens {
        deliver(&mut events, taken, seq, token, Err(error.clone()));
    }
    send_events(shared, events).await;
    if taken {
        // The end of the event stream: an empty batch, which nothing else sends.
        let _receiver_gone = shared.events.send(Vec::new()).await;
    }
}
