//! The fair sequencer: gateway-stamped batches wait here, on the leader, before the log.
//!
//! Every gateway link hands its stamped batches, heartbeats and (dis)connections to one
//! thread, which keeps them in a [`Resequencer`] and feeds the core's request queue in
//! stamp order: a batch leaves once `now - gateway_ts >= d_s`, or sooner once every
//! connected gateway's watermark has passed its stamp. With `d_s = 0` batches leave in
//! arrival order at once. The core proposes requests in queue order, so the order this
//! thread releases in is the log order of these commands.
//!
//! A thread rather than a task: tokio's timer ticks in milliseconds and the window is
//! typically a few hundred microseconds. The thread sleeps with `park_timeout` (timer
//! slack lowered) and senders unpark it after each message.
//!
//! Bounded: the thread takes messages off the channel only while the buffer holds
//! fewer than its capacity, so a full buffer fills the channel and then slows the
//! links' readers (backpressure reaches the gateways), and what is held always becomes
//! due within the window.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bourse_engine::command::{CommandBody, FairnessSetting};
use bourse_engine::ClientId;
use bourse_fairness::{precise, Adaptive, AdaptiveConfig, Clock, Resequencer, Stamp};
use bourse_protocol::convert::ConvertError;
use rustc_hash::FxHashMap;
use tokio::sync::mpsc;

use crate::core::{Reply, Request};
use crate::metrics::Metrics;

/// The fairness delays the log set, as the core applied them: the sequencer follows
/// the window, `/metrics` shows both, the adaptive controller starts from them.
#[derive(Debug, Default)]
pub struct InForce {
    set: AtomicBool,
    hold_ns: AtomicU64,
    window_ns: AtomicU64,
    changes: AtomicU64,
}

impl InForce {
    /// Called by the core as it applies a setting (or restores a state that has one).
    pub fn store(&self, setting: FairnessSetting, counted: bool) {
        self.hold_ns.store(setting.hold_ns, Ordering::Relaxed);
        self.window_ns.store(setting.window_ns, Ordering::Relaxed);
        self.set.store(true, Ordering::Release);
        if counted {
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The setting in force, if the log made one. (The two values are stored apart:
    /// a reader racing a change may see one old and one new, for one loop.)
    pub fn get(&self) -> Option<FairnessSetting> {
        self.set.load(Ordering::Acquire).then(|| FairnessSetting {
            hold_ns: self.hold_ns.load(Ordering::Relaxed),
            window_ns: self.window_ns.load(Ordering::Relaxed),
        })
    }

    /// Settings applied since the node started.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }
}

/// A gateway batch's commands, converted.
pub type Items = Vec<(u64, Result<CommandBody, ConvertError>)>;

/// What links tell the sequencer.
pub enum Inbound {
    Connect {
        gateway: u32,
    },
    Disconnect {
        gateway: u32,
    },
    /// Nothing later from this gateway carries an earlier stamp; and the longest feed
    /// delay it saw since its last report (0: no report).
    Watermark {
        gateway: u32,
        ts: u64,
        feed_delay_ns: u64,
    },
    Batch {
        stamp: Stamp,
        client: ClientId,
        items: Items,
    },
}

/// The links' handle on the sequencer thread.
#[derive(Clone)]
pub struct FairSequencer {
    sender: mpsc::Sender<Inbound>,
    /// The thread to unpark; none for the task, which waits on the channel itself.
    thread: Option<std::thread::Thread>,
}

/// Settings of the sequencer.
#[derive(Clone, Debug)]
pub struct FairConfig {
    /// d_s in nanoseconds; 0 releases in arrival order.
    pub window_ns: u64,
    /// Batches held at most.
    pub capacity: usize,
    /// The controllers of the hold and the window, when they adapt (`[fairness]`).
    pub adaptive: Option<(AdaptiveConfig, AdaptiveConfig)>,
    /// Where it reads the time; a simulated clock runs it as a task.
    pub clock: Clock,
}

impl FairSequencer {
    /// Starts the thread (a task, under a simulated clock); it stops when every handle
    /// is dropped (after releasing what it holds) or when the core's queue closes.
    pub fn start(config: FairConfig, core: mpsc::Sender<Request>, metrics: Arc<Metrics>) -> std::io::Result<Self> {
        let (sender, receiver) = mpsc::channel(config.capacity.max(1));
        if config.clock.is_simulated() {
            tokio::spawn(run_task(Fair::new(config, metrics), receiver, core));
            return Ok(FairSequencer { sender, thread: None });
        }
        let fair = Fair::new(config, metrics);
        let handle =
            std::thread::Builder::new().name("sequencer".into()).spawn(move || run_thread(fair, receiver, core))?;
        Ok(FairSequencer { sender, thread: Some(handle.thread().clone()) })
    }

    /// Hands `message` to the thread, waiting while its buffer is full. Fails when the
    /// node is stopping.
    pub async fn send(&self, message: Inbound) -> Result<(), ()> {
        self.send_unwoken(message).await?;
        self.wake();
        Ok(())
    }

    /// Like [`FairSequencer::send`], without waking the thread when the message fits:
    /// a link hands over every batch of one message this way and then wakes it once
    /// ([`FairSequencer::wake`]), a wake-up (a futex call when it sleeps) per message
    /// instead of per batch. When the buffer is full the thread is woken to empty it.
    pub async fn send_unwoken(&self, message: Inbound) -> Result<(), ()> {
        match self.sender.try_send(message) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(message)) => {
                self.wake();
                self.sender.send(message).await.map_err(|_| ())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
        }
    }

    /// Wakes the thread to take what was handed to it.
    pub fn wake(&self) {
        if let Some(thread) = &self.thread {
            thread.unpark();
        }
    }
}

/// The sequencer itself, whichever way it runs: what the links sent, held in a
/// [`Resequencer`] until due, and the adaptive controller.
struct Fair {
    buffer: Resequencer<(ClientId, Items)>,
    /// Links per gateway id: a gateway that reconnects before its old link is noticed
    /// dead has two for a while, and stays connected until the last one closes.
    links: FxHashMap<u32, usize>,
    /// False once every link's handle is gone: what is held is released at once.
    open: bool,
    control: Option<Control>,
    capacity: usize,
    clock: Clock,
    metrics: Arc<Metrics>,
}

impl Fair {
    fn new(config: FairConfig, metrics: Arc<Metrics>) -> Fair {
        let capacity = config.capacity.max(1);
        Fair {
            buffer: Resequencer::new(config.window_ns, capacity),
            links: FxHashMap::default(),
            open: true,
            control: config.adaptive.map(|(hold, window)| Control::new(hold, window)),
            capacity,
            clock: config.clock,
            metrics,
        }
    }

    /// Takes what the links sent, while it has room.
    fn take_waiting(&mut self, receiver: &mut mpsc::Receiver<Inbound>) {
        while self.has_room() {
            match receiver.try_recv() {
                Ok(message) => self.take(message),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => self.open = false,
            }
        }
    }

    /// Whether it takes another message now (it holds fewer than its capacity).
    fn has_room(&self) -> bool {
        self.open && self.buffer.len() < self.capacity
    }

    /// Follows the window in force: the log's, once it set one.
    fn follow_the_log(&mut self) {
        if let Some(setting) = self.metrics.fairness.get() {
            if setting.window_ns != self.buffer.window_ns() {
                self.buffer.set_window_ns(setting.window_ns);
            }
        }
    }

    /// What the core is to get now, in order: the adaptive controller's new delays (a
    /// report that calls for more is acted on at once), then every batch that is due.
    fn due(&mut self) -> Vec<Request> {
        let mut out = Vec::new();
        if let Some(control) = &mut self.control {
            if let Some(setting) = control.decide(self.clock.now_ns(), self.metrics.fairness.get()) {
                tracing::info!(
                    hold_us = setting.hold_ns / 1_000,
                    window_us = setting.window_ns / 1_000,
                    "adaptive fairness: proposing new delays"
                );
                let items = vec![(0, Ok(CommandBody::SetFairness(setting)))];
                out.push(Request::Commands { client: ClientId::SYSTEM, items, reply: Reply::Session });
            }
        }
        let now = self.clock.now_ns();
        let mut released = 0u64;
        while let Some(ready) = self.buffer.pop_ready(if self.open { now } else { u64::MAX }) {
            released += 1;
            self.metrics.fair_held_ns.lock().expect("metrics lock").record(ready.held_ns);
            if ready.out_of_order_prev {
                self.metrics.fair_out_of_order_prev.fetch_add(1, Ordering::Relaxed);
            }
            if ready.out_of_order_hwm {
                self.metrics.fair_out_of_order_hwm.fetch_add(1, Ordering::Relaxed);
            }
            let (client, items) = ready.item;
            out.push(Request::Commands { client, items, reply: Reply::Session });
        }
        self.metrics.fair_released.fetch_add(released, Ordering::Relaxed);
        self.metrics.fair_held.store(self.buffer.len() as i64, Ordering::Relaxed);
        self.metrics.queue_depth.0.fetch_add(out.len() as i64, Ordering::Relaxed);
        out
    }

    /// Whether it is done: no link left and nothing held.
    fn finished(&self) -> bool {
        !self.open && self.buffer.is_empty()
    }

    /// How long until the next batch is due (none: nothing is held).
    fn wait(&self) -> Option<Duration> {
        let deadline = self.buffer.next_deadline()?;
        Some(Duration::from_nanos(deadline.saturating_sub(self.clock.now_ns())))
    }

    fn take(&mut self, message: Inbound) {
        let control = self.control.as_mut();
        match message {
            Inbound::Connect { gateway } => {
                *self.links.entry(gateway).or_default() += 1;
                self.buffer.connect(gateway);
            }
            Inbound::Disconnect { gateway } => {
                let count = self.links.entry(gateway).or_default();
                *count = count.saturating_sub(1);
                if *count == 0 {
                    self.links.remove(&gateway);
                    self.buffer.disconnect(gateway);
                }
            }
            Inbound::Watermark { gateway, ts, feed_delay_ns } => {
                self.buffer.heartbeat(gateway, ts);
                if let Some(control) = control {
                    let now = self.clock.now_ns();
                    control.observed = true;
                    control.window.observe(now, now.saturating_sub(ts));
                    if feed_delay_ns > 0 {
                        control.hold.observe(now, feed_delay_ns);
                    }
                }
            }
            Inbound::Batch { stamp, client, items } => {
                let now = self.clock.now_ns();
                if let Some(control) = control {
                    control.observed = true;
                    control.window.observe(now, now.saturating_sub(stamp.ts));
                }
                if self.buffer.push(now, stamp, (client, items)).is_err() {
                    // Taken only while below capacity, so a push cannot be refused.
                    unreachable!("the sequencer took a batch beyond its capacity");
                }
            }
        }
    }
}

/// The sequencer on its own thread: it sleeps with `park_timeout` (timer slack lowered),
/// and the links unpark it after each message.
fn run_thread(mut fair: Fair, mut receiver: mpsc::Receiver<Inbound>, core: mpsc::Sender<Request>) {
    let _ = precise::lower_timer_slack();
    loop {
        fair.follow_the_log();
        fair.take_waiting(&mut receiver);
        for request in fair.due() {
            if core.blocking_send(request).is_err() {
                return;
            }
        }
        if fair.finished() {
            return;
        }
        match fair.wait() {
            Some(wait) if wait > Duration::ZERO => std::thread::park_timeout(wait),
            Some(_) => {}
            // Nothing held: sleep until a link sends (its send unparks this thread).
            None if fair.open => std::thread::park_timeout(Duration::from_millis(100)),
            None => {}
        }
    }
}

/// The sequencer as a task: the same steps, waiting on the channel and the runtime's
/// timer.
async fn run_task(mut fair: Fair, mut receiver: mpsc::Receiver<Inbound>, core: mpsc::Sender<Request>) {
    loop {
        fair.follow_the_log();
        fair.take_waiting(&mut receiver);
        for request in fair.due() {
            if core.send(request).await.is_err() {
                return;
            }
        }
        if fair.finished() {
            return;
        }
        let wait = fair.wait();
        if wait == Some(Duration::ZERO) {
            continue;
        }
        let sleep = tokio::time::sleep(wait.unwrap_or(Duration::from_secs(3600)));
        if !fair.has_room() {
            sleep.await;
            continue;
        }
        tokio::select! {
            message = receiver.recv() => match message {
                Some(message) => fair.take(message),
                None => fair.open = false,
            },
            () = sleep => {}
        }
    }
}

/// The adaptive hold and window on the leader: what the gateways report and what the
/// sequencer sees go in, `SetFairness` commands come out (through the log, so every
/// replica and gateway uses what the log says).
struct Control {
    hold: Adaptive,
    window: Adaptive,
    /// What was last proposed and when: not again until the log shows it, or a second
    /// passed (a proposal lost in a change of leader).
    proposed: Option<(FairnessSetting, u64)>,
    /// Whether anything was observed: a node without links (a follower) proposes nothing.
    observed: bool,
}

/// How long a proposal that the log does not show is waited for before proposing again.
const PROPOSAL_RETRY_NS: u64 = 1_000_000_000;

impl Control {
    fn new(hold: AdaptiveConfig, window: AdaptiveConfig) -> Self {
        Control { hold: Adaptive::new(hold), window: Adaptive::new(window), proposed: None, observed: false }
    }

    fn decide(&mut self, now: u64, in_force: Option<FairnessSetting>) -> Option<FairnessSetting> {
        if !self.observed {
            return None;
        }
        if let Some(setting) = in_force {
            self.hold.in_force(now, setting.hold_ns);
            self.window.in_force(now, setting.window_ns);
        }
        if let Some((proposed, at)) = self.proposed {
            if in_force != Some(proposed) && now < at.saturating_add(PROPOSAL_RETRY_NS) {
                return None;
            }
        }
        let hold = self.hold.decide(now);
        let window = self.window.decide(now);
        if hold.is_none() && window.is_none() {
            return None;
        }
        let setting = FairnessSetting {
            hold_ns: hold.or(self.hold.current()).unwrap_or(self.hold.config().max_ns),
            window_ns: window.or(self.window.current()).unwrap_or(self.window.config().max_ns),
        };
        if in_force == Some(setting) {
            return None;
        }
        self.proposed = Some((setting, now));
        Some(setting)
    }
}
