//! Market data on a gateway: the feed from a replica, held and released at once.
//!
//! A task reads the order-level feed (`GatewayLink.Feed`) from a node, preferring the
//! addresses configured first, and hands each message to the release thread with the
//! time it came. There, every entry waits in a [`HoldQueue`] until the gateway clock
//! reaches `t_R = t_m + d_h`; at that instant the thread applies it to the gateway's
//! [`MarketState`] and hands the updates it derives (order-level events, trades, L2,
//! BBO, statistics) to every subscriber in one broadcast. A subscriber that cannot keep
//! up is dropped with a reason; it never holds the others back, and the release thread
//! never waits on one. It wakes the waiting subscribers itself while they are few
//! ([`FAN_OUT_HERE_MAX`]); past that, a fan-out task on the runtime broadcasts, so ten
//! thousand subscribers cost the release thread one hand-off per entry.
//!
//! The injected engine→gateway delay is modelled, not played out by a delay line of its
//! own: a message that came at `r` is taken to arrive at `max(previous arrival,
//! r + sample)` (a FIFO link), is late if that is at or after its release time, and is
//! never released before it. A thread per injected link would wake at the very instants
//! the release threads must, on the same few CPUs, and be measured as unfairness.
//!
//! The release thread is a thread, not a task: tokio's timer ticks in milliseconds and
//! releases are judged in microseconds. It sleeps with a lowered timer slack, and wakes
//! only to release: at the next release instant, or when a message comes that is due
//! before it (an image; a late entry). Waking for every message, and again at its
//! modelled arrival, cost three wake-ups per entry per gateway, some of which landed on
//! other gateways' release instants and delayed them.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bourse_fairness::inject::DelayModel;
use bourse_fairness::{precise, HoldQueue};
use bourse_market::MarketState;
use bourse_protocol::proto;
use bourse_protocol::proto::gateway_link_client::GatewayLinkClient;
use bourse_protocol::proto::market_data_update::Update;
use rand::SeedableRng;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::config::{GatewayConfig, LocalNode};
use crate::metrics::Metrics;
use crate::probe::{Probe, Release};
use crate::{BoxStream, GatewayClock};

/// Subscribers a release thread wakes itself at most; past this many, the fan-out task
/// does. Waking a subscriber from the release thread is the quickest way to it (its
/// task goes straight to the runtime's queue; measured with `bourse bench fairness
/// --identical-traders 4`, the fan-out task's extra hop let more bargains go untaken),
/// but each wake costs the release thread, and ten thousand of them would delay the
/// next release: the fan-out task bounds that cost.
const FAN_OUT_HERE_MAX: usize = 64;

/// What subscribers receive: the updates of one released entry, or the news that the
/// gateway's market state started over (its feed restarted).
pub enum Released {
    Updates(Vec<proto::MarketDataUpdate>),
    Restarted,
}

/// One release as the subscribers get it: its number (counted under the state's lock,
/// so a subscriber whose starting image already holds it skips it) and what it is.
type Numbered = Arc<(u64, Released)>;

/// The gateway's market data: the state as released, and the subscribers' broadcast.
pub struct Market {
    state: Mutex<Option<MarketState>>,
    /// The number of the last release, changed only under `state`'s lock.
    released: std::sync::atomic::AtomicU64,
    /// To the fan-out task, which broadcasts to the subscribers (`updates`) when there
    /// are many, and how many releases it holds not yet broadcast.
    fanout: mpsc::UnboundedSender<Numbered>,
    fanout_queued: Arc<std::sync::atomic::AtomicU64>,
    updates: broadcast::Sender<Numbered>,
    ready: AtomicBool,
    metrics: Arc<Metrics>,
    /// The longest feed delay (stamp to arrival, gateway clock) since the link last
    /// reported it ([`Market::take_feed_delay`]).
    feed_delay_max: std::sync::atomic::AtomicU64,
}

/// A feed message on its way to the release thread.
struct Inbound {
    message: proto::FeedMessage,
    /// When it reaches the gateway over the (injected) link, true clock.
    arrival: u64,
    /// The earliest instant it can go out, true clock: its arrival, and for an entry
    /// also its release time.
    due: u64,
}

impl Market {
    /// Starts the feed task and the release thread.
    pub(crate) fn start(
        config: &GatewayConfig,
        clock: GatewayClock,
        probe: Arc<Probe>,
        metrics: Arc<Metrics>,
        shutdown: watch::Receiver<bool>,
    ) -> std::io::Result<Arc<Market>> {
        let (updates, _) = broadcast::channel(config.subscriber_buffer);
        let (fanout, mut to_fan_out) = mpsc::unbounded_channel::<Numbered>();
        let fanout_queued = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let market = Arc::new(Market {
            state: Mutex::new(None),
            released: std::sync::atomic::AtomicU64::new(0),
            fanout,
            fanout_queued: Arc::clone(&fanout_queued),
            updates: updates.clone(),
            ready: AtomicBool::new(false),
            metrics,
            feed_delay_max: std::sync::atomic::AtomicU64::new(0),
        });
        // The fan-out task: ends when the market (the only sender) is dropped.
        tokio::spawn(async move {
            while let Some(released) = to_fan_out.recv().await {
                // No subscriber is no error.
                let _ = updates.send(released);
                // After the send: a release thread that reads 0 comes after every one.
                fanout_queued.fetch_sub(1, Ordering::Release);
            }
        });
        let handoff = Arc::new(Mutex::new(Handoff { queue: VecDeque::new(), asleep_until: 0, closed: false }));
        let link = Link {
            model: config.inject.outbound.clone(),
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(config.inject.outbound_seed),
            last_arrival: 0,
        };
        let hold_ns = config.hold_us * 1_000;
        let wake = {
            let market = Arc::clone(&market);
            let shutdown = shutdown.clone();
            let handoff = Arc::clone(&handoff);
            let (id, priority) = (config.id, config.release_priority);
            let jitter = Jitter {
                max_ns: config.release_jitter_us * 1_000,
                seed: config.release_jitter_seed ^ u64::from(config.id).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            };
            let releaser = Releaser::new(market, clock.clone(), hold_ns, jitter, probe);
            if clock.time.is_simulated() {
                // Under a simulated clock a thread would sleep in real time: a task.
                let wake = Arc::new(tokio::sync::Notify::new());
                tokio::spawn(release_task(releaser, handoff, shutdown, Arc::clone(&wake)));
                Wake::Task(wake)
            } else {
                let thread = std::thread::Builder::new().name(format!("gw{}-release", config.id)).spawn(move || {
                    if let Some(priority) = priority {
                        match precise::run_realtime(priority) {
                            Ok(()) => releaser.market.metrics.release_realtime.store(1, Ordering::Relaxed),
                            Err(reason) => {
                                tracing::warn!(gateway = id, %reason, "the release thread runs at ordinary priority")
                            }
                        }
                    }
                    release_loop(releaser, &handoff, shutdown)
                })?;
                Wake::Thread(thread.thread().clone())
            }
        };
        let sink = Sink { handoff, wake, link, clock, hold_ns };
        tokio::spawn(read_feed(
            config.feed_sources(),
            config.local_nodes.clone(),
            config.tls.clone(),
            sink,
            shutdown,
            config.id,
        ));
        Ok(market)
    }

    /// The longest feed delay seen since the last call, ns (0: none), for the leader's
    /// adaptive hold.
    pub fn take_feed_delay(&self) -> u64 {
        self.feed_delay_max.swap(0, Ordering::Relaxed)
    }

    /// Whether the gateway has a market state (its feed delivered an image).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

/// What the feed task hands the release thread, under one lock.
///
/// A mutex, not a channel: the release thread may run under `SCHED_FIFO`, and std's
/// channel makes a receiver spin (yielding) while a sender is half-way through a send.
/// A real-time receiver spinning on the CPU where that sender was preempted keeps it
/// from finishing: a livelock that lasted tens of milliseconds, until the kernel moved
/// the sender to the other CPU. A contended mutex puts the waiter to sleep instead.
struct Handoff {
    queue: VecDeque<Inbound>,
    /// Until when (true clock) the release thread sleeps, set as it goes to sleep; once
    /// it is awake this is past, and a message due after it wakes no one.
    asleep_until: u64,
    /// The feed task is gone.
    closed: bool,
}

/// How the feed task wakes the release thread (or task).
enum Wake {
    Thread(std::thread::Thread),
    Task(Arc<tokio::sync::Notify>),
}

impl Wake {
    fn wake(&self) {
        match self {
            Wake::Thread(thread) => thread.unpark(),
            // A permit is kept if the task is not waiting yet: no wake is lost.
            Wake::Task(notify) => notify.notify_one(),
        }
    }
}

/// The feed task's way to the release thread.
struct Sink {
    handoff: Arc<Mutex<Handoff>>,
    wake: Wake,
    link: Link,
    clock: GatewayClock,
    hold_ns: u64,
}

impl Sink {
    fn send(&mut self, message: proto::FeedMessage) {
        let arrival = self.link.arrival(self.clock.true_now());
        let due = match &message.body {
            Some(proto::feed_message::Body::Entry(entry)) => {
                arrival.max(self.clock.true_of(release_time(entry, self.hold_ns)))
            }
            _ => arrival,
        };
        let wake = {
            let mut handoff = self.handoff.lock().expect("handoff lock");
            handoff.queue.push_back(Inbound { message, arrival, due });
            due < handoff.asleep_until
        };
        if wake {
            self.wake.wake();
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Ok(mut handoff) = self.handoff.lock() {
            handoff.closed = true;
        }
        self.wake.wake();
    }
}

/// The injected engine→gateway link: a FIFO delay.
struct Link {
    model: DelayModel,
    rng: rand_chacha::ChaCha8Rng,
    last_arrival: u64,
}

impl Link {
    /// When a message the feed task got at `received` reaches the gateway.
    fn arrival(&mut self, received: u64) -> u64 {
        if self.model.is_zero() {
            return received;
        }
        let delay = self.model.sample(received, &mut self.rng);
        self.last_arrival = self.last_arrival.max(received.saturating_add(delay));
        self.last_arrival
    }
}

/// Reads the feed from the sources in turn, forever: a broken feed is reopened (the
/// new image restarts the market state). A source that says it leads is passed over
/// while another is left to try, so market data does not load the leader.
async fn read_feed(
    sources: Vec<String>,
    local: Vec<LocalNode>,
    tls: Option<bourse_client::ClientTls>,
    mut line: Sink,
    mut stop: watch::Receiver<bool>,
    id: u32,
) {
    let mut current = 0usize;
    let mut passed_over = 0usize;
    let mut backoff = Duration::from_millis(10);
    loop {
        let source = &sources[current % sources.len()];
        let avoid_leader = passed_over + 1 < sources.len();
        let local = local.iter().find(|node| node.is_at(source));
        let attempt = async {
            if let Some(node) = local {
                // The node in this process: no socket to spare it, so no leader check.
                let mut stream = (node.feed)().await.map_err(|s| s.message().to_string())?;
                tracing::info!(gateway = id, %source, "feed open (in process)");
                return forward(&mut stream, &mut line).await;
            }
            let channel = crate::link::channel(source, tls.as_ref()).await?;
            if avoid_leader {
                let status = proto::cluster_client::ClusterClient::new(channel.clone())
                    .status(proto::ClusterStatusRequest {})
                    .await
                    .map_err(|s| s.message().to_string())?;
                if status.get_ref().role == "leader" {
                    return Err(LEADER.to_string());
                }
            }
            let mut stream = GatewayLinkClient::new(channel)
                .max_decoding_message_size(64 << 20)
                .feed(proto::FeedRequest {})
                .await
                .map_err(|s| s.message().to_string())?
                .into_inner();
            tracing::info!(gateway = id, %source, "feed open");
            forward(&mut stream, &mut line).await
        };
        let reason: Result<(), String> = tokio::select! {
            result = attempt => result,
            _ = stop.wait_for(|stopping| *stopping) => return,
        };
        match reason {
            Err(reason) if reason == LEADER => {
                passed_over += 1;
                current += 1;
                continue;
            }
            Err(reason) => tracing::warn!(gateway = id, %source, %reason, "feed lost; reopening"),
            Ok(()) => {}
        }
        passed_over = 0;
        current += 1;
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.wait_for(|stopping| *stopping) => return,
        }
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}

/// Hands every feed message to the release thread until the stream ends or breaks.
async fn forward<S>(stream: &mut S, line: &mut Sink) -> Result<(), String>
where
    S: Stream<Item = Result<proto::FeedMessage, Status>> + Unpin,
{
    loop {
        match stream.next().await {
            Some(Ok(message)) => line.send(message),
            None => return Err("the node ended the feed".to_string()),
            Some(Err(status)) => return Err(format!("{:?}: {}", status.code(), status.message())),
        }
    }
}

/// Why a source was passed over.
const LEADER: &str = "the leader: another member serves the feed";

/// An entry waiting in the hold queue: the queue's time is when it goes out (its
/// release time plus the jitter); `release_ts` is t_R itself, and `late` whether it
/// arrived at or after t_R.
struct Held {
    entry: proto::FeedEntry,
    release_ts: u64,
    late: bool,
}

/// The release jitter of one gateway ([`GatewayConfig::release_jitter_us`]).
#[derive(Clone, Copy)]
struct Jitter {
    max_ns: u64,
    /// The exchange's seed mixed with the gateway id.
    seed: u64,
}

impl Jitter {
    /// The delay of the entry at `log_index`: 0 to `max_ns`, uniform, the same each time
    /// it is asked (SplitMix64's finaliser over the seed and the index).
    fn of(&self, log_index: u64) -> u64 {
        if self.max_ns == 0 {
            return 0;
        }
        let mut z = self.seed.wrapping_add(log_index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        z % (self.max_ns + 1)
    }
}

/// An entry's release time t_R: the log's (the hold set through it), else its stamp
/// plus the gateway's own hold.
fn release_time(entry: &proto::FeedEntry, hold_ns: u64) -> u64 {
    if entry.release_ts > 0 {
        entry.release_ts
    } else {
        entry.ts.saturating_add(hold_ns)
    }
}

/// The release thread: holds entries until their release time on the gateway clock,
/// then applies and broadcasts them.
fn release_loop(mut releaser: Releaser, handoff: &Mutex<Handoff>, shutdown: watch::Receiver<bool>) {
    let _ = precise::lower_timer_slack();
    loop {
        if *shutdown.borrow() {
            return;
        }
        match releaser.turn(handoff) {
            Next::Stop => return,
            Next::Again => {}
            Next::Sleep(Some(deadline)) => {
                let wait = deadline.saturating_sub(releaser.clock.true_now());
                if wait > 0 {
                    std::thread::park_timeout(Duration::from_nanos(wait));
                }
            }
            Next::Sleep(None) => std::thread::park_timeout(Duration::from_millis(100)),
        }
    }
}

/// The release thread as a task (under a simulated clock): the same turns, sleeping on
/// the runtime's timer until the next release or a wake from the feed task.
async fn release_task(
    mut releaser: Releaser,
    handoff: Arc<Mutex<Handoff>>,
    mut shutdown: watch::Receiver<bool>,
    wake: Arc<tokio::sync::Notify>,
) {
    loop {
        if *shutdown.borrow() {
            return;
        }
        let wait = match releaser.turn(&handoff) {
            Next::Stop => return,
            Next::Again => continue,
            Next::Sleep(Some(deadline)) => Duration::from_nanos(deadline.saturating_sub(releaser.clock.true_now())),
            Next::Sleep(None) => Duration::from_secs(3600),
        };
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// What the release thread does after a turn.
enum Next {
    /// The feed task is gone and everything is out.
    Stop,
    /// Messages came meanwhile: another turn at once.
    Again,
    /// Sleep until this instant (true clock), or until woken.
    Sleep(Option<u64>),
}

/// The release thread's state.
struct Releaser {
    market: Arc<Market>,
    clock: GatewayClock,
    hold_ns: u64,
    jitter: Jitter,
    held: HoldQueue<Held>,
    /// The release time of the last entry taken in, and when it goes out (the two
    /// differ by the release jitter; gateway clock).
    release_last: u64,
    release_at_last: u64,
    /// Messages on the (injected) link, in order, not yet arrived or not yet looked at.
    in_transit: VecDeque<Inbound>,
    probe: Arc<Probe>,
    out: Vec<proto::MarketDataUpdate>,
}

impl Releaser {
    fn new(market: Arc<Market>, clock: GatewayClock, hold_ns: u64, jitter: Jitter, probe: Arc<Probe>) -> Releaser {
        Releaser {
            market,
            clock,
            hold_ns,
            jitter,
            held: HoldQueue::new(),
            release_last: 0,
            release_at_last: 0,
            in_transit: VecDeque::new(),
            probe,
            out: Vec::new(),
        }
    }

    /// One turn: what is due goes out, what the feed task handed over is taken in (and
    /// what of it is due goes out too), and the instant of the next release is noted
    /// where the feed task sees it.
    fn turn(&mut self, handoff: &Mutex<Handoff>) -> Next {
        // What is due among what was taken in goes first: the lock can wait.
        self.release_due();
        {
            let mut handoff = handoff.lock().expect("handoff lock");
            if handoff.closed && handoff.queue.is_empty() {
                return Next::Stop;
            }
            self.in_transit.append(&mut handoff.queue);
        }
        self.release_due();
        let deadline = self.next_deadline();
        // Under the lock: a message handed over after this sees when the thread sleeps
        // until, and one handed over before it is taken in first. (Once awake the thread
        // leaves the old value: it is past, so it wakes no one, and the queue is read
        // again before the next sleep.)
        let mut handoff = handoff.lock().expect("handoff lock");
        if !handoff.queue.is_empty() || handoff.closed {
            return Next::Again;
        }
        handoff.asleep_until = deadline.unwrap_or(u64::MAX);
        Next::Sleep(deadline)
    }

    /// Takes in what has arrived, then releases every entry whose time has come.
    fn release_due(&mut self) {
        let now_true = self.clock.true_now();
        while self.in_transit.front().is_some_and(|message| message.arrival <= now_true) {
            let Inbound { message, arrival, .. } = self.in_transit.pop_front().expect("checked");
            match message.body {
                Some(proto::feed_message::Body::Image(image)) => {
                    // A new image: what is held belongs to the old feed.
                    while self.held.pop_due(u64::MAX).is_some() {}
                    self.release_last = 0;
                    self.release_at_last = 0;
                    self.market.restart(image);
                }
                Some(proto::feed_message::Body::Entry(entry)) => {
                    // Never before the entry before it (the hold queue releases by
                    // time): only a change from the gateway's own hold to the log's
                    // could otherwise reorder, as the log keeps its own in order.
                    let release_ts = release_time(&entry, self.hold_ns).max(self.release_last);
                    self.release_last = release_ts;
                    let arrived = self.clock.at(arrival);
                    // What the leader's adaptive hold must cover, reported up the link.
                    self.market.feed_delay_max.fetch_max(arrived.saturating_sub(entry.ts), Ordering::Relaxed);
                    // Late when it arrived (on the gateway clock) at or after t_R.
                    let late = arrived >= release_ts;
                    // Out at t_R plus this gateway's jitter for it, in log order still.
                    let at = release_ts.saturating_add(self.jitter.of(entry.log_index)).max(self.release_at_last);
                    self.release_at_last = at;
                    self.held.push(arrived, at, Held { entry, release_ts, late });
                }
                None => {}
            }
        }
        let now = self.clock.now_ns();
        while let Some(due) = self.held.pop_due(now) {
            // Recorded before it is handed out, so whoever receives it finds the record.
            // An entry without market data (a deposit, say) releases nothing.
            let Held { entry, release_ts, late } = due.item;
            if !entry.events.is_empty() {
                self.probe.record(Release {
                    log_index: entry.log_index,
                    ts: entry.ts,
                    release_ts,
                    arrived_late: late,
                    released_local: self.clock.now_ns(),
                    released_true: self.clock.true_now(),
                });
            }
            self.market.release(&entry, release_ts, &mut self.out);
        }
    }

    /// The next instant (true clock) something can be released; what is still in
    /// transit is taken in then.
    fn next_deadline(&self) -> Option<u64> {
        let next_release = self.held.next_due().map(|due| self.clock.true_of(due));
        let next_in_transit = self.in_transit.iter().map(|message| message.due).min();
        next_release.into_iter().chain(next_in_transit).min()
    }
}

impl Market {
    fn restart(&self, image: proto::BookImage) {
        let mut state = self.state.lock().expect("market lock");
        let had = state.is_some();
        match MarketState::from_image(&image) {
            Ok(market) => {
                *state = Some(market);
                self.ready.store(true, Ordering::Release);
                self.metrics.feed_starts.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                tracing::error!(%error, index = image.log_index, "the feed's image is not a book; waiting for another");
                *state = None;
                self.ready.store(false, Ordering::Release);
            }
        }
        if had {
            self.hand_out(Released::Restarted);
        }
    }

    /// Applies one entry and hands its updates to every subscriber, stamped with their
    /// release time.
    fn release(&self, entry: &proto::FeedEntry, release_ts: u64, out: &mut Vec<proto::MarketDataUpdate>) {
        let mut state = self.state.lock().expect("market lock");
        let Some(market) = state.as_mut() else { return };
        out.clear();
        if let Err(error) = market.apply_entry(entry, out) {
            tracing::error!(%error, index = entry.log_index, "the feed does not fit the book; waiting for a new image");
            *state = None;
            self.ready.store(false, Ordering::Release);
            self.hand_out(Released::Restarted);
            return;
        }
        if out.is_empty() {
            return;
        }
        for update in out.iter_mut() {
            update.release_ts = release_ts;
        }
        self.hand_out(Released::Updates(std::mem::take(out)));
    }

    /// Numbers a release and broadcasts it: here, when there are at most
    /// [`FAN_OUT_HERE_MAX`] subscribers and the fan-out task holds nothing (so nothing
    /// handed to it earlier is overtaken); otherwise through the fan-out task. Called
    /// with `state`'s lock held, so the number and the state it leaves agree for a new
    /// subscriber, and one release at a time.
    fn hand_out(&self, released: Released) {
        let number = self.released.fetch_add(1, Ordering::Relaxed) + 1;
        let released = Arc::new((number, released));
        if self.updates.receiver_count() <= FAN_OUT_HERE_MAX && self.fanout_queued.load(Ordering::Acquire) == 0 {
            let _ = self.updates.send(released);
            return;
        }
        self.fanout_queued.fetch_add(1, Ordering::AcqRel);
        // The task ends only with the market.
        let _ = self.fanout.send(released);
    }
}

/// The MarketData service of a gateway.
pub(crate) struct MarketDataService(pub Arc<Market>, pub Arc<crate::State>);

/// How long an idle subscription waits before a heartbeat.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

#[tonic::async_trait]
impl proto::market_data_server::MarketData for MarketDataService {
    type SubscribeStream = BoxStream<proto::MarketDataUpdate>;

    async fn subscribe(
        &self,
        request: Request<proto::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        // Market data is for key holders: a subscriber costs the gateway a buffer and
        // the fan-out's work, so an anonymous one could take both.
        let (principal, key) = crate::session::authenticate_with_key(&self.1, &request)?;
        let request = request.into_inner();
        let symbols: HashSet<u32> = request.symbols.iter().copied().collect();
        let mut channels: HashSet<proto::Channel> = HashSet::new();
        for &channel in &request.channels {
            match proto::Channel::try_from(channel) {
                Ok(proto::Channel::Unspecified) | Err(_) => {
                    return Err(Status::invalid_argument(format!(
                        "SubscribeRequest.channels: unknown channel {channel}"
                    )))
                }
                Ok(channel) => {
                    channels.insert(channel);
                }
            }
        }
        if channels.is_empty() {
            channels.extend([proto::Channel::Trades, proto::Channel::Bbo]);
        }
        // Held while the subscription lives: a key's subscriptions, and all of them, are capped.
        let hold = self.1.subscription_quota.take(&principal)?;
        // Watched from here on: a reload that drops the key ends the subscription.
        let mut keys_reloaded = self.1.keys_epoch.subscribe();
        // The starting images, the number of the last release they hold and the
        // broadcast are taken under one lock: releases up to that number are in the
        // images (and skipped if the fan-out still brings them), later ones all come.
        let (first, imaged, mut updates) = {
            let state = self.0.state.lock().expect("market lock");
            let Some(market) = state.as_ref() else {
                return Err(Status::unavailable("the gateway has no market data yet; try again"));
            };
            let mut first = Vec::new();
            let wanted: Vec<u32> =
                market.symbols().map(|s| s.id).filter(|s| symbols.is_empty() || symbols.contains(s)).collect();
            for &symbol in &wanted {
                if channels.contains(&proto::Channel::L2) {
                    if let Some(snapshot) = market.l2_snapshot(symbol, usize::MAX) {
                        first.push(update(market.ts(), Update::L2Snapshot(snapshot)));
                    }
                }
                if channels.contains(&proto::Channel::Orders) {
                    for event in market.l3_image(symbol) {
                        first.push(update(market.ts(), Update::Order(event)));
                    }
                }
            }
            (first, self.0.released.load(Ordering::Relaxed), self.0.updates.subscribe())
        };
        let (out, receiver) = mpsc::channel(256);
        let metrics = Arc::clone(&self.0.metrics);
        let state = Arc::clone(&self.1);
        tokio::spawn(async move {
            let _hold = hold;
            metrics.subscribers_open.fetch_add(1, Ordering::Relaxed);
            let _open = Gauge(&metrics.subscribers_open);
            let mut seq = 0u64;
            for mut message in first {
                seq += 1;
                message.seq = seq;
                if out.send(Ok(message)).await.is_err() {
                    return;
                }
            }
            loop {
                let received = tokio::select! {
                    received = updates.recv() => received,
                    () = tokio::time::sleep(HEARTBEAT_EVERY) => {
                        seq += 1;
                        let beat = proto::MarketDataUpdate {
                            seq,
                            update: Some(Update::Heartbeat(proto::Heartbeat {})),
                            ..Default::default()
                        };
                        if out.send(Ok(beat)).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    changed = keys_reloaded.changed() => {
                        if changed.is_err() {
                            // The gateway is going away: its server ends the stream.
                            return;
                        }
                        if state.key_revoked(&key) {
                            metrics.subscribers_revoked.fetch_add(1, Ordering::Relaxed);
                            let _ = out.send(Err(Status::permission_denied("this API key was revoked"))).await;
                            return;
                        }
                        continue;
                    }
                };
                let released = match received {
                    Ok(released) => released,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        metrics.subscribers_dropped_slow.fetch_add(1, Ordering::Relaxed);
                        let status = Status::resource_exhausted(format!(
                            "subscriber dropped: it fell {missed} releases behind; subscribe again"
                        ));
                        let _ = out.send(Err(status)).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let (number, released) = &*released;
                if *number <= imaged {
                    continue;
                }
                match released {
                    Released::Restarted => {
                        let status = Status::unavailable("the gateway's market data restarted; subscribe again");
                        let _ = out.send(Err(status)).await;
                        return;
                    }
                    Released::Updates(list) => {
                        for message in list {
                            let symbol = bourse_market::symbol(message);
                            if !symbols.is_empty() && !symbol.is_some_and(|s| symbols.contains(&s)) {
                                continue;
                            }
                            if !channels.contains(&bourse_market::channel(message)) {
                                continue;
                            }
                            seq += 1;
                            if out.send(Ok(proto::MarketDataUpdate { seq, ..message.clone() })).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    async fn get_l2(&self, request: Request<proto::GetDepthRequest>) -> Result<Response<proto::L2Snapshot>, Status> {
        crate::session::authenticate(&self.1, &request)?;
        let request = request.into_inner();
        let state = self.0.state.lock().expect("market lock");
        let market = state.as_ref().ok_or_else(|| Status::unavailable("the gateway has no market data yet"))?;
        let levels = if request.levels_max == 0 { usize::MAX } else { request.levels_max as usize };
        market
            .l2_snapshot(request.symbol, levels)
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("no symbol {}", request.symbol)))
    }
}

/// Takes one off a gauge when dropped (whichever way a subscription task ends).
struct Gauge<'a>(&'a std::sync::atomic::AtomicI64);

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn update(ts: u64, update: Update) -> proto::MarketDataUpdate {
    proto::MarketDataUpdate { seq: 0, ts, update: Some(update), release_ts: 0 }
}

#[cfg(test)]
mod tests {
    use super::Jitter;

    fn jitter(gateway: u32, max_us: u64) -> Jitter {
        Jitter { max_ns: max_us * 1_000, seed: 7 ^ u64::from(gateway).wrapping_mul(0x9e37_79b9_7f4a_7c15) }
    }

    #[test]
    fn no_jitter_is_zero() {
        assert!((0..1_000).all(|i| jitter(1, 0).of(i) == 0));
    }

    #[test]
    fn the_jitter_is_bounded_repeatable_and_each_gateway_goes_first_as_often() {
        let gateways: Vec<Jitter> = (1..=4).map(|g| jitter(g, 50)).collect();
        let mut first = [0u32; 4];
        let mut sum = 0u128;
        let entries = 40_000u64;
        for index in 0..entries {
            let delays: Vec<u64> = gateways.iter().map(|j| j.of(index)).collect();
            assert!(delays.iter().all(|&d| d <= 50_000));
            assert_eq!(gateways[2].of(index), delays[2], "the same entry, the same delay");
            sum += u128::from(delays[0]);
            let winner = (0..4).min_by_key(|&g| delays[g]).expect("four gateways");
            first[winner] += 1;
        }
        let mean = sum as f64 / entries as f64;
        assert!((23_000.0..27_000.0).contains(&mean), "mean jitter {mean} ns, not about half of 50 µs");
        // Each of four goes first a quarter of the time (±1.5 pp: about 7 σ at 40,000).
        for (g, count) in first.iter().enumerate() {
            let share = f64::from(*count) / entries as f64;
            assert!((0.235..0.265).contains(&share), "gateway {} first {share:.3} of the time", g + 1);
        }
    }
}
