//! Group commit: one writer thread owns the journal; many producers share its fsyncs.
//!
//! Producers submit batches of [`Proposal`]s through a bounded queue
//! (`queue_batches_max`): a full queue blocks the producer, which is the backpressure.
//! The writer takes every request pending (up to `group_entries_max` entries), assigns
//! the next indexes in queue order, appends them in one write, makes them durable with
//! one `fdatasync`, and then acknowledges, in index order: first the `on_durable`
//! callback with the group's entries, then the published durable index (for
//! [`GroupCommitHandle::wait_durable`]), then each batch's [`Ticket`].
//!
//! Invariants: indexes are assigned only by the writer, so they are consecutive and in
//! queue order; nothing is acknowledged before the `fdatasync` that covers it returns;
//! each entry is acknowledged exactly once. Bad input (empty or oversized batch, oversized
//! payload) is rejected at submission, so the writer only ever fails on I/O. On an I/O
//! error the writer stops: queued and later submissions fail with
//! [`Error::WriterStopped`] and the error is returned by [`GroupCommit::shutdown`]. Once
//! the owner has stopped it (shutdown, or drop), submissions fail with
//! [`Error::WriterClosed`] instead, so a producer can tell a failed journal from a
//! closed one.
//!
//! Complexity: per group, one `write` and one `fdatasync` (plus one per segment roll);
//! per batch, one allocation for its ticket.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};

use crate::config::config_check_range;
use crate::error::{Error, Result};
use crate::journal::{Entry, Journal, SegmentRemover};
use crate::stats::GroupCommitStats;

/// Upper bound for every group-commit bound, to catch a unit mistake in configuration.
const GROUP_COMMIT_BOUND_LIMIT: u64 = 1 << 24;

/// Bounds of a [`GroupCommit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupCommitConfig {
    /// Requests (batches, snapshots) the queue holds before `submit` blocks.
    pub queue_batches_max: usize,
    /// Largest batch one `submit` takes.
    pub batch_entries_max: usize,
    /// Entries after which the writer stops draining and commits the group.
    pub group_entries_max: usize,
}

impl Default for GroupCommitConfig {
    fn default() -> Self {
        Self { queue_batches_max: 1024, batch_entries_max: 4096, group_entries_max: 65_536 }
    }
}

impl GroupCommitConfig {
    /// Checks every field against its bounds.
    pub fn validate(&self) -> Result<()> {
        config_check_range("queue_batches_max", self.queue_batches_max as u64, 1, GROUP_COMMIT_BOUND_LIMIT)?;
        config_check_range("batch_entries_max", self.batch_entries_max as u64, 1, GROUP_COMMIT_BOUND_LIMIT)?;
        config_check_range("group_entries_max", self.group_entries_max as u64, 1, GROUP_COMMIT_BOUND_LIMIT)
    }
}

/// A command to sequence: the writer gives it the next index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal {
    /// The leader's timestamp, in nanoseconds.
    pub timestamp_ns: u64,
    /// Opaque bytes, at most `payload_bytes_max`.
    pub payload: Vec<u8>,
}

/// The indexes `first ..= last` given to one batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexRange {
    /// Index of the batch's first entry.
    pub first: u64,
    /// Index of its last entry.
    pub last: u64,
}

/// The acknowledgement of one submitted batch.
#[derive(Debug)]
pub struct Ticket {
    receiver: Receiver<IndexRange>,
}

impl Ticket {
    /// Blocks until the batch is durable and returns its indexes, or fails if the writer
    /// stopped before that.
    pub fn wait(self) -> Result<IndexRange> {
        self.receiver.recv().map_err(|_| Error::WriterStopped)
    }
}

/// A request to the writer, in queue order.
enum Request {
    Batch { proposals: Vec<Proposal>, reply: SyncSender<IndexRange> },
    Snapshot { index: u64, bytes: Vec<u8>, reply: SyncSender<Result<()>> },
    Stop,
}

/// The durable index and whether the writer has stopped, published under one lock.
#[derive(Default)]
struct Durable {
    index: u64,
    stopped: bool,
    /// The writer stopped because its owner asked, not on an error.
    closed: bool,
}

/// State the writer publishes to every handle.
#[derive(Default)]
struct Shared {
    durable: Mutex<Durable>,
    durable_changed: Condvar,
    stats: Mutex<GroupCommitStats>,
}

/// Locks a mutex; a poisoned one means a thread panicked while holding it, a bug.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().expect("group-commit lock poisoned by a panic")
}

/// A cheap, cloneable way to submit to a [`GroupCommit`] from any thread.
#[derive(Clone)]
pub struct GroupCommitHandle {
    sender: SyncSender<Request>,
    shared: Arc<Shared>,
    config: GroupCommitConfig,
    payload_bytes_max: u32,
}

/// Called on the writer thread with each group's entries, in index order, once they are
/// durable.
pub type OnDurable = Box<dyn FnMut(Vec<Entry>) + Send>;

/// A journal owned by a writer thread that commits in groups. See the module header.
pub struct GroupCommit {
    handle: GroupCommitHandle,
    writer: Option<JoinHandle<Result<Journal>>>,
}

impl GroupCommit {
    /// Starts the writer thread, which takes the journal over. `on_durable` receives
    /// every group's entries, in index order, after their `fdatasync`. It runs on the
    /// writer thread, so it must not wait on this group commit (submit to a full queue,
    /// wait for a ticket): that would deadlock.
    pub fn start(
        journal: Journal,
        config: GroupCommitConfig,
        on_durable: impl FnMut(Vec<Entry>) + Send + 'static,
    ) -> Result<GroupCommit> {
        config.validate()?;
        let (sender, receiver) = mpsc::sync_channel(config.queue_batches_max);
        let shared = Arc::new(Shared::default());
        lock(&shared.durable).index = journal.durable_index();
        lock(&shared.stats).durable_index = journal.durable_index();
        let payload_bytes_max = journal.config().payload_bytes_max;
        let writer_shared = Arc::clone(&shared);
        let on_durable: OnDurable = Box::new(on_durable);
        let writer = thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || writer_run(journal, receiver, writer_shared, config, on_durable))
            .map_err(|source| Error::io("spawn writer thread", "journal-writer", source))?;
        let handle = GroupCommitHandle { sender, shared, config, payload_bytes_max };
        Ok(GroupCommit { handle, writer: Some(writer) })
    }

    /// A handle for producers.
    pub fn handle(&self) -> GroupCommitHandle {
        self.handle.clone()
    }

    /// Commits everything queued before this call, stops the writer and returns the
    /// journal, or the I/O error that stopped the writer.
    pub fn shutdown(mut self) -> Result<Journal> {
        self.writer_stop()
    }

    fn writer_stop(&mut self) -> Result<Journal> {
        // A send error means the writer already stopped; join tells why.
        let _ = self.handle.sender.send(Request::Stop);
        let writer = self.writer.take().expect("writer joined once");
        match writer.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        if self.writer.is_some() {
            if let Err(error) = self.writer_stop() {
                tracing::warn!(%error, "journal writer stopped on an error");
            }
        }
    }
}

impl GroupCommitHandle {
    /// Queues a batch for the writer, blocking while the queue is full. Returns a
    /// ticket that resolves to the batch's indexes once they are durable.
    pub fn submit(&self, proposals: Vec<Proposal>) -> Result<Ticket> {
        self.batch_validate(&proposals)?;
        let (reply, receiver) = mpsc::sync_channel(1);
        self.sender.send(Request::Batch { proposals, reply }).map_err(|_| self.stopped_error())?;
        Ok(Ticket { receiver })
    }

    /// Writes a snapshot through the writer, after everything queued before it is
    /// durable; see [`Journal::write_snapshot`].
    pub fn write_snapshot(&self, index: u64, bytes: Vec<u8>) -> Result<()> {
        let (reply, receiver) = mpsc::sync_channel(1);
        self.sender.send(Request::Snapshot { index, bytes, reply }).map_err(|_| self.stopped_error())?;
        receiver.recv().map_err(|_| self.stopped_error())?
    }

    /// The highest durable index published so far.
    pub fn durable_index(&self) -> u64 {
        lock(&self.shared.durable).index
    }

    /// Blocks until the durable index reaches `index` and returns it, or fails if the
    /// writer stops first.
    pub fn wait_durable(&self, index: u64) -> Result<u64> {
        let mut durable = lock(&self.shared.durable);
        while durable.index < index && !durable.stopped {
            durable = self.shared.durable_changed.wait(durable).expect("group-commit lock poisoned by a panic");
        }
        if durable.index >= index {
            Ok(durable.index)
        } else if durable.closed {
            Err(Error::WriterClosed)
        } else {
            Err(Error::WriterStopped)
        }
    }

    /// Why a request found the writer gone: closed by its owner, or stopped on an error.
    fn stopped_error(&self) -> Error {
        if lock(&self.shared.durable).closed {
            Error::WriterClosed
        } else {
            Error::WriterStopped
        }
    }

    /// Counters as of the last group.
    pub fn stats(&self) -> GroupCommitStats {
        lock(&self.shared.stats).clone()
    }

    fn batch_validate(&self, proposals: &[Proposal]) -> Result<()> {
        if proposals.is_empty() {
            return Err(Error::BatchEmpty);
        }
        let entries_max = self.config.batch_entries_max;
        if proposals.len() > entries_max {
            return Err(Error::BatchTooLarge { entries: proposals.len(), entries_max });
        }
        let payload_bytes_max = self.payload_bytes_max;
        match proposals.iter().find(|proposal| proposal.payload.len() > payload_bytes_max as usize) {
            Some(proposal) => {
                Err(Error::PayloadTooLarge { index: 0, payload_bytes: proposal.payload.len(), payload_bytes_max })
            }
            None => Ok(()),
        }
    }
}

/// One group being assembled: its entries and, per batch, where to acknowledge.
#[derive(Default)]
struct Group {
    entries: Vec<Entry>,
    replies: Vec<(SyncSender<IndexRange>, IndexRange)>,
}

impl Group {
    /// Gives the proposals the next indexes after `last_index` and everything already
    /// in the group.
    fn batch_add(&mut self, last_index: u64, proposals: Vec<Proposal>, reply: SyncSender<IndexRange>) {
        let first = last_index + 1 + self.entries.len() as u64;
        let last = first + proposals.len() as u64 - 1;
        for (position, proposal) in proposals.into_iter().enumerate() {
            let (timestamp_ns, payload) = (proposal.timestamp_ns, proposal.payload);
            self.entries.push(Entry { index: first + position as u64, timestamp_ns, payload });
        }
        self.replies.push((reply, IndexRange { first, last }));
    }
}

/// The writer thread: runs the loop, then tells every waiter it has stopped.
fn writer_run(
    mut journal: Journal,
    receiver: Receiver<Request>,
    shared: Arc<Shared>,
    config: GroupCommitConfig,
    mut on_durable: OnDurable,
) -> Result<Journal> {
    let _stopped = StoppedOnDrop { shared: Arc::clone(&shared) };
    let result = writer_loop(&mut journal, &receiver, &shared, config, &mut on_durable);
    if result.is_ok() {
        // Published before the receiver drops, so a producer whose send fails sees it.
        lock(&shared.durable).closed = true;
    }
    result.map(|()| journal)
}

/// Tells every waiter that the writer has stopped, however it stops: returning, failing,
/// or unwinding from a panic in `on_durable` (the panic itself reaches the owner at join).
struct StoppedOnDrop {
    shared: Arc<Shared>,
}

impl Drop for StoppedOnDrop {
    fn drop(&mut self) {
        let mut durable = self.shared.durable.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        durable.stopped = true;
        drop(durable);
        self.shared.durable_changed.notify_all();
    }
}

/// Drains pending requests into groups and commits each; returns on `Stop` or when every
/// sender is gone.
fn writer_loop(
    journal: &mut Journal,
    receiver: &Receiver<Request>,
    shared: &Shared,
    config: GroupCommitConfig,
    on_durable: &mut OnDurable,
) -> Result<()> {
    // Segments a snapshot prunes are deleted by a thread of their own: deleting hundreds
    // of megabytes held every acknowledgement for about 0.17 s.
    journal.defer_segment_removal();
    let mut remover = SegmentRemover::default();
    while let Ok(first) = receiver.recv() {
        let mut group = Group::default();
        let mut request = Some(first);
        while let Some(next) = request.take() {
            match next {
                Request::Batch { proposals, reply } => group.batch_add(journal.last_index(), proposals, reply),
                Request::Snapshot { index, bytes, reply } => {
                    group_commit(journal, std::mem::take(&mut group), shared, on_durable)?;
                    // The caller may be gone; the snapshot stands either way.
                    let _ = reply.send(journal.write_snapshot(index, &bytes));
                    if journal.is_poisoned() {
                        return Err(Error::Poisoned);
                    }
                    durable_publish(shared, journal.durable_index());
                    let pruned = journal.take_segments_to_remove();
                    remover.remove(journal.dir(), pruned);
                }
                Request::Stop => {
                    let result = group_commit(journal, group, shared, on_durable);
                    remover.finish();
                    return result;
                }
            }
            if group.entries.len() < config.group_entries_max {
                request = receiver.try_recv().ok();
            }
        }
        group_commit(journal, group, shared, on_durable)?;
    }
    remover.finish();
    Ok(())
}

/// Appends a group, makes it durable with one `fdatasync`, then acknowledges it in index
/// order: callback, durable index, tickets.
fn group_commit(journal: &mut Journal, group: Group, shared: &Shared, on_durable: &mut OnDurable) -> Result<()> {
    if group.entries.is_empty() {
        return Ok(());
    }
    journal.append(&group.entries)?;
    let durable_index = journal.sync()?;
    assert_eq!(durable_index, group.entries.last().expect("non-empty group").index, "group not durable");
    let (entries_count, batches_count) = (group.entries.len() as u64, group.replies.len() as u64);
    on_durable(group.entries);
    group_stats_publish(journal, shared, entries_count, batches_count);
    durable_publish(shared, durable_index);
    for (reply, range) in group.replies {
        // A producer that dropped its ticket no longer wants the answer.
        let _ = reply.send(range);
    }
    Ok(())
}

/// Publishes a durable index to waiters (a snapshot ahead of the log moves it forward).
fn durable_publish(shared: &Shared, durable_index: u64) {
    let mut durable = lock(&shared.durable);
    if durable_index > durable.index {
        durable.index = durable_index;
        drop(durable);
        shared.durable_changed.notify_all();
    }
}

fn group_stats_publish(journal: &Journal, shared: &Shared, entries_count: u64, batches_count: u64) {
    let mut stats = lock(&shared.stats);
    stats.journal = journal.stats().clone();
    stats.groups += 1;
    stats.batches += batches_count;
    stats.group_entries.record(entries_count);
    stats.durable_index = journal.durable_index();
}
