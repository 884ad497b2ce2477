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

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bourse_engine::command::CommandBody;
use bourse_engine::ClientId;
use bourse_fairness::{precise, Resequencer, Stamp};
use bourse_protocol::convert::ConvertError;
use rustc_hash::FxHashMap;
use tokio::sync::mpsc;

use crate::core::{Reply, Request};
use crate::metrics::Metrics;

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
    /// Nothing later from this gateway carries an earlier stamp.
    Watermark {
        gateway: u32,
        ts: u64,
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
    thread: std::thread::Thread,
}

/// Settings of the sequencer.
#[derive(Clone, Copy, Debug)]
pub struct FairConfig {
    /// d_s in nanoseconds; 0 releases in arrival order.
    pub window_ns: u64,
    /// Batches held at most.
    pub capacity: usize,
}

impl FairSequencer {
    /// Starts the thread; it stops when every handle is dropped (after releasing what
    /// it holds) or when the core's queue closes.
    pub fn start(config: FairConfig, core: mpsc::Sender<Request>, metrics: Arc<Metrics>) -> std::io::Result<Self> {
        let (sender, receiver) = mpsc::channel(config.capacity.max(1));
        let handle =
            std::thread::Builder::new().name("sequencer".into()).spawn(move || run(config, receiver, core, metrics))?;
        Ok(FairSequencer { sender, thread: handle.thread().clone() })
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
        self.thread.unpark();
    }
}

fn run(config: FairConfig, mut receiver: mpsc::Receiver<Inbound>, core: mpsc::Sender<Request>, metrics: Arc<Metrics>) {
    let _ = precise::lower_timer_slack();
    let mut buffer: Resequencer<(ClientId, Items)> = Resequencer::new(config.window_ns, config.capacity.max(1));
    // Links per gateway id: a gateway that reconnects before its old link is noticed
    // dead has two for a while, and stays connected until the last one closes.
    let mut links: FxHashMap<u32, usize> = FxHashMap::default();
    let mut open = true;
    loop {
        while open && buffer.len() < config.capacity.max(1) {
            match receiver.try_recv() {
                Ok(message) => take(&mut buffer, &mut links, message),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        let now = bourse_fairness::true_now_ns();
        let mut released = 0u64;
        while let Some(out) = buffer.pop_ready(if open { now } else { u64::MAX }) {
            released += 1;
            metrics.fair_held_ns.lock().expect("metrics lock").record(out.held_ns);
            if out.out_of_order_prev {
                metrics.fair_out_of_order_prev.fetch_add(1, Ordering::Relaxed);
            }
            if out.out_of_order_hwm {
                metrics.fair_out_of_order_hwm.fetch_add(1, Ordering::Relaxed);
            }
            let (client, items) = out.item;
            metrics.queue_depth.0.fetch_add(1, Ordering::Relaxed);
            if core.blocking_send(Request::Commands { client, items, reply: Reply::Session }).is_err() {
                return;
            }
        }
        metrics.fair_released.fetch_add(released, Ordering::Relaxed);
        metrics.fair_held.store(buffer.len() as i64, Ordering::Relaxed);
        if !open && buffer.is_empty() {
            return;
        }
        match buffer.next_deadline() {
            Some(deadline) => {
                let wait = deadline.saturating_sub(bourse_fairness::true_now_ns());
                if wait > 0 {
                    std::thread::park_timeout(Duration::from_nanos(wait));
                }
            }
            // Nothing held: sleep until a link sends (its send unparks this thread).
            None if open => std::thread::park_timeout(Duration::from_millis(100)),
            None => {}
        }
    }
}

fn take(buffer: &mut Resequencer<(ClientId, Items)>, links: &mut FxHashMap<u32, usize>, message: Inbound) {
    match message {
        Inbound::Connect { gateway } => {
            *links.entry(gateway).or_default() += 1;
            buffer.connect(gateway);
        }
        Inbound::Disconnect { gateway } => {
            let count = links.entry(gateway).or_default();
            *count = count.saturating_sub(1);
            if *count == 0 {
                links.remove(&gateway);
                buffer.disconnect(gateway);
            }
        }
        Inbound::Watermark { gateway, ts } => buffer.heartbeat(gateway, ts),
        Inbound::Batch { stamp, client, items } => {
            let now = bourse_fairness::true_now_ns();
            if buffer.push(now, stamp, (client, items)).is_err() {
                // Taken only while below capacity, so a push cannot be refused.
                unreachable!("the sequencer took a batch beyond its capacity");
            }
        }
    }
}
