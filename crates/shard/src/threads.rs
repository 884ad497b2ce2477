//! A group per thread: the in-process pipeline of `bourse bench engine --groups G`.
//!
//! Each group's thread owns its account part and its symbol part and reads one
//! channel: client batches from the driver, forwards from every account part (its own
//! are handed over in the thread), settlements from every symbol part. After each
//! round of messages it sends what it produced, one message per destination, and its
//! account part's watermark to every symbol part when it moved. The driver sends the
//! commands in batches (one per group, with the batch's last stamp as every group's
//! tick) and keeps a bounded number in flight; a command that names an order waits
//! until the command that placed it was acknowledged, as a client must.
//!
//! The groups' state at the end is a function of the commands alone when no decision
//! depends on proceeds still on their way back (the bench's market is funded so):
//! the bench checks it against one engine's.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread;
use std::time::{Duration, Instant};

use bourse_engine::command::Command;
use bourse_engine::{Outcome, Timestamp};

use crate::account::Step;
use crate::{Ack, Forward, Groups, Settlement};

/// A command's index in the stream, or none.
pub const NO_DEP: u32 = u32::MAX;

enum Message {
    Clients { commands: Vec<Command>, tick: Timestamp },
    Forwards { source: usize, forwards: Vec<Forward>, watermark: Timestamp },
    Settlements(Vec<Settlement>),
    Stop,
}

/// What a threaded run measured.
#[derive(Clone, Debug)]
pub struct Report {
    pub elapsed: Duration,
    /// Commands acknowledged, and how many of them were refused.
    pub acked: u64,
    pub refused: u64,
    /// CPU time of each group's thread, and of the driver.
    pub group_cpu: Vec<Duration>,
    pub driver_cpu: Duration,
    /// Messages between threads (driver's and groups').
    pub messages: u64,
}

/// The calling thread's CPU time so far (from `/proc/thread-self/schedstat`).
pub fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|stat| stat.split_whitespace().next()?.parse().ok())
        .map(Duration::from_nanos)
        .unwrap_or_default()
}

/// Runs `commands` (orders and transfers only, stamps increasing) through `groups`, a
/// thread per group. `deps[i]` is the index of the command whose acknowledgement
/// command `i` waits for, or [`NO_DEP`]. `batch` commands go out at a time, at most
/// `window` unacknowledged.
pub fn run(groups: Groups, commands: &[Command], deps: &[u32], batch: usize, window: usize) -> (Groups, Report) {
    assert_eq!(commands.len(), deps.len(), "a dependency per command");
    assert!(batch > 0 && window >= batch, "batch must be positive and fit the window");
    let n = groups.map.groups();
    let map = groups.map;
    let (senders, receivers): (Vec<Sender<Message>>, Vec<Receiver<Message>>) = (0..n).map(|_| channel()).unzip();
    let (ack_tx, ack_rx) = channel::<Vec<Ack>>();
    let Groups { accounts, symbols, .. } = groups;
    let started = Instant::now();
    let cpu_driver = thread_cpu();
    let mut handles = Vec::with_capacity(n);
    for (g, ((account, symbol), rx)) in accounts.into_iter().zip(symbols).zip(receivers).enumerate() {
        let peers = senders.clone();
        let acks = ack_tx.clone();
        let thread = thread::Builder::new().name(format!("group-{g}"));
        let handle = thread
            .spawn(move || {
                let cpu = thread_cpu();
                let mut worker = Worker::new(g, account, symbol, peers, acks);
                worker.serve(&rx);
                let cpu = thread_cpu().saturating_sub(cpu);
                (worker.account, worker.symbol, cpu, worker.messages)
            })
            .expect("spawn a group thread");
        handles.push(handle);
    }
    drop(ack_tx);

    // The driver.
    let mut acked = vec![false; commands.len()];
    let (mut sent, mut acked_n, mut refused, mut messages) = (0usize, 0u64, 0u64, 0u64);
    let index_of = |stamp: Timestamp| {
        commands.binary_search_by_key(&stamp, |command| command.ts).expect("an acknowledgement of a sent command")
    };
    let take = |acks: Vec<Ack>, acked: &mut Vec<bool>, acked_n: &mut u64, refused: &mut u64| {
        for ack in acks {
            acked[index_of(ack.stamp)] = true;
            *acked_n += 1;
            *refused += u64::from(matches!(ack.outcome, Outcome::Rejected(_)));
        }
    };
    let mut per_group: Vec<Vec<Command>> = vec![Vec::new(); n];
    while sent < commands.len() {
        // A batch ends before a command that names an order placed in it: that one
        // waits for the placement's acknowledgement.
        let mut end = (sent + batch).min(commands.len());
        if let Some(cut) = (sent + 1..end).find(|&i| deps[i] != NO_DEP && deps[i] as usize >= sent) {
            end = cut;
        }
        // Room in the window, and every order this batch names acknowledged.
        loop {
            let waiting = (sent as u64 - acked_n) as usize + (end - sent) > window
                || deps[sent..end].iter().any(|&dep| dep != NO_DEP && !acked[dep as usize]);
            if !waiting {
                break;
            }
            let acks = ack_rx.recv().expect("group threads run until stopped");
            take(acks, &mut acked, &mut acked_n, &mut refused);
        }
        for command in &commands[sent..end] {
            let group = match crate::route(&map, &command.body) {
                Ok(crate::Route::Account(group)) => group,
                other => panic!("the threaded run carries orders and transfers only, not {command:?}: {other:?}"),
            };
            per_group[group].push(command.clone());
        }
        let tick = commands[end - 1].ts;
        for (g, queue) in per_group.iter_mut().enumerate() {
            senders[g]
                .send(Message::Clients { commands: std::mem::take(queue), tick })
                .expect("group threads run until stopped");
            messages += 1;
        }
        sent = end;
        while let Ok(acks) = ack_rx.try_recv() {
            take(acks, &mut acked, &mut acked_n, &mut refused);
        }
    }
    while acked_n < commands.len() as u64 {
        let acks = ack_rx.recv().expect("group threads run until stopped");
        take(acks, &mut acked, &mut acked_n, &mut refused);
    }
    let elapsed = started.elapsed();
    let driver_cpu = thread_cpu().saturating_sub(cpu_driver);
    for sender in &senders {
        sender.send(Message::Stop).expect("group threads run until stopped");
    }
    let mut groups = Groups { map, accounts: Vec::with_capacity(n), symbols: Vec::with_capacity(n) };
    let mut group_cpu = Vec::with_capacity(n);
    for handle in handles {
        let (account, symbol, cpu, sent) = handle.join().expect("a group thread panicked");
        groups.accounts.push(account);
        groups.symbols.push(symbol);
        group_cpu.push(cpu);
        messages += sent;
    }
    let report = Report { elapsed, acked: acked_n, refused, group_cpu, driver_cpu, messages };
    (groups, report)
}

/// One group's thread.
struct Worker {
    group: usize,
    account: crate::AccountPart,
    symbol: crate::SymbolPart,
    peers: Vec<Sender<Message>>,
    acks: Sender<Vec<Ack>>,
    forwards: Vec<Vec<Forward>>,
    settlements: Vec<Vec<Settlement>>,
    acked: Vec<Ack>,
    watermark: Timestamp,
    watermark_sent: Timestamp,
    messages: u64,
}

impl Worker {
    fn new(
        group: usize,
        account: crate::AccountPart,
        symbol: crate::SymbolPart,
        peers: Vec<Sender<Message>>,
        acks: Sender<Vec<Ack>>,
    ) -> Self {
        let n = peers.len();
        Worker {
            group,
            account,
            symbol,
            peers,
            acks,
            forwards: vec![Vec::new(); n],
            settlements: vec![Vec::new(); n],
            acked: Vec::new(),
            watermark: 0,
            watermark_sent: 0,
            messages: 0,
        }
    }

    fn serve(&mut self, rx: &Receiver<Message>) {
        while let Ok(message) = rx.recv() {
            if !self.handle(message) {
                return;
            }
            // Take what else is waiting before sending: fewer, fuller messages.
            for _ in 0..64 {
                match rx.try_recv() {
                    Ok(message) => {
                        if !self.handle(message) {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            self.flush();
        }
    }

    /// False on `Stop`.
    fn handle(&mut self, message: Message) -> bool {
        match message {
            Message::Clients { commands, tick } => {
                for command in commands {
                    let step = self
                        .account
                        .client(command.client, command.seq, command.ts, &command.body)
                        .expect("routed commands are carried");
                    match step {
                        Step::Done(outcome) => self.acked.push(Ack {
                            client: command.client,
                            seq: command.seq,
                            stamp: command.ts,
                            outcome,
                        }),
                        Step::Forward(to, forward) if to == self.group => self.symbol.merge.offer(self.group, forward),
                        Step::Forward(to, forward) => self.forwards[to].push(forward),
                        Step::Duplicate => {}
                    }
                }
                self.watermark = self.watermark.max(tick);
                self.symbol.merge.advance(self.group, tick);
                self.release();
            }
            Message::Forwards { source, forwards, watermark } => {
                for forward in forwards {
                    self.symbol.merge.offer(source, forward);
                }
                self.symbol.merge.advance(source, watermark);
                self.release();
            }
            Message::Settlements(settlements) => {
                for settlement in settlements {
                    if let Some(ack) = self.account.settle(settlement) {
                        self.acked.push(ack);
                    }
                }
            }
            Message::Stop => return false,
        }
        true
    }

    fn release(&mut self) {
        let Worker { group, account, symbol, settlements, acked, .. } = self;
        symbol.release(&mut |to, settlement| {
            if to == *group {
                if let Some(ack) = account.settle(settlement) {
                    acked.push(ack);
                }
            } else {
                settlements[to].push(settlement);
            }
        });
    }

    fn flush(&mut self) {
        let advanced = self.watermark > self.watermark_sent;
        for to in 0..self.peers.len() {
            if to == self.group {
                continue;
            }
            if advanced || !self.forwards[to].is_empty() {
                let forwards = std::mem::take(&mut self.forwards[to]);
                let message = Message::Forwards { source: self.group, forwards, watermark: self.watermark };
                // A peer that stopped has nothing left to take.
                let _ = self.peers[to].send(message);
                self.messages += 1;
            }
            if !self.settlements[to].is_empty() {
                let _ = self.peers[to].send(Message::Settlements(std::mem::take(&mut self.settlements[to])));
                self.messages += 1;
            }
        }
        self.watermark_sent = self.watermark;
        if !self.acked.is_empty() {
            let _ = self.acks.send(std::mem::take(&mut self.acked));
            self.messages += 1;
        }
    }
}
