//! A group per thread: the in-process pipeline of `bourse bench engine --groups G`.
//!
//! Each group's thread owns its [`GroupMachine`] and reads one channel: runs of client
//! commands from the driver, and runs of every other group's numbered outputs (forwards,
//! watermarks, settlements). Each message is applied as the log entry it would be
//! ([`Entry::Clients`], [`Entry::Ingest`]), so the threads run the replicated groups'
//! state machine, only without the log. After each round of messages a thread sends
//! each peer the outputs produced for it, in one message. The driver sends the commands
//! in batches (one per group, with the batch's last stamp as every group's tick) and
//! keeps a bounded number in flight; a command that names an order waits until the
//! command that placed it was acknowledged, as a client must.
//!
//! The groups' state at the end is a function of the commands alone when no decision
//! depends on proceeds still on their way back (the bench's market is funded so):
//! the bench checks it against one engine's.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread;
use std::time::{Duration, Instant};

use bourse_engine::command::Command;
use bourse_engine::{Outcome, Timestamp};

use crate::machine::{Entry, GroupMachine, Output};
use crate::{Ack, Groups, Sessions};

/// A command's index in the stream, or none.
pub const NO_DEP: u32 = u32::MAX;

enum Message {
    /// A run of client commands for the group's log.
    Clients {
        commands: Vec<Command>,
        tick: Timestamp,
    },
    /// Outputs of `source`, numbered from `from`, for an ingest entry.
    Ingest {
        source: usize,
        from: u64,
        outputs: Vec<Output>,
    },
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
    // The driver is its clients' library: it numbers their commands per group.
    let mut sessions = Sessions::resume(&groups);
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
                let machine = GroupMachine::new(g, account, symbol, n);
                let mut worker = Worker { machine, peers, acks, acked: Vec::new(), messages: 0 };
                worker.serve(&rx);
                let cpu = thread_cpu().saturating_sub(cpu);
                (worker.machine.account, worker.machine.symbol, cpu, worker.messages)
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
            let seq = sessions.number(command.client, group);
            per_group[group].push(Command { seq, ..command.clone() });
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

/// One group's thread: its state machine, fed the entries its log would hold.
struct Worker {
    machine: GroupMachine,
    peers: Vec<Sender<Message>>,
    acks: Sender<Vec<Ack>>,
    acked: Vec<Ack>,
    messages: u64,
}

impl Worker {
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
        let entry = match message {
            Message::Clients { commands, tick } => Entry::Clients { commands, tick },
            Message::Ingest { source, from, outputs } => Entry::Ingest { source, from, outputs },
            Message::Stop => return false,
        };
        self.machine.apply(&entry, &mut self.acked).expect("a thread's outputs arrive in order, whole");
        true
    }

    /// Sends every peer the outputs produced for it since the last flush (nothing is
    /// kept for a resend: threads do not crash), and the acknowledgements.
    fn flush(&mut self) {
        let me = self.machine.group();
        for to in (0..self.peers.len()).filter(|&to| to != me) {
            let (from, outputs) = self.machine.take_outputs(to);
            if !outputs.is_empty() {
                // A peer that stopped has nothing left to take.
                let _ = self.peers[to].send(Message::Ingest { source: me, from, outputs });
                self.messages += 1;
            }
        }
        if !self.acked.is_empty() {
            let _ = self.acks.send(std::mem::take(&mut self.acked));
            self.messages += 1;
        }
    }
}
