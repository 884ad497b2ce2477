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
//! A small batch submitted while nothing is queued, to a journal whose last groups were
//! durable within `inline_commit_max_us` each, is committed by the submitting thread
//! itself, under the same lock the writer commits under: the same append, `fdatasync`
//! and acknowledgements, without two hand-offs between threads (the writer's wake-up
//! and the producer's). On a RAM disk or a drive with power-loss protection that is most
//! of a lone command's wait; on a slow disk every batch goes through the writer, which
//! never holds a producer for an `fdatasync`.
//!
//! Invariants: indexes are assigned only under the journal's lock, by the writer or an
//! inline commit that finds nothing queued, so they are consecutive and in queue order;
//! nothing is acknowledged before the `fdatasync` that covers it returns;
//! each entry is acknowledged exactly once. Bad input (empty or oversized batch, oversized
//! payload) is rejected at submission, so the writer only ever fails on I/O. On an I/O
//! error the writer stops: queued and later submissions fail with
//! [`Error::WriterStopped`] and the error is returned by [`GroupCommit::shutdown`] (an
//! inline commit's error is returned by its `submit` first, and stops the journal the
//! same way). Once
//! the owner has stopped it (shutdown, or drop), submissions fail with
//! [`Error::WriterClosed`] instead, so a producer can tell a failed journal from a
//! closed one.
//!
//! Complexity: per group, one `write` and one `fdatasync` (plus one per segment roll);
//! per batch, one allocation for its ticket.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::config::config_check_range;
use crate::error::{Error, Result};
use crate::journal::{Entry, Journal, SegmentRemover};
use crate::stats::GroupCommitStats;

/// Upper bound for every group-commit bound, to catch a unit mistake in configuration.
const GROUP_COMMIT_BOUND_LIMIT: u64 = 1 << 24;
/// Quick groups in a row after which a producer may commit inline.
const QUICK_GROUPS_INLINE: u32 = 8;
/// Largest batch committed inline. A large batch goes to the writer even when it is
/// idle, so that its producer goes on (applying the next batch, in a node) while the
/// writer appends: inline, the two would take turns on one thread (batched throughput
/// fell 7–9% on /dev/shm when every batch could go inline).
const INLINE_ENTRIES_MAX: usize = 16;

/// Bounds of a [`GroupCommit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupCommitConfig {
    /// Requests (batches, snapshots) the queue holds before `submit` blocks.
    pub queue_batches_max: usize,
    /// Largest batch one `submit` takes.
    pub batch_entries_max: usize,
    /// Entries after which the writer stops draining and commits the group.
    pub group_entries_max: usize,
    /// A group durable within this many microseconds is quick; after eight quick ones in
    /// a row, a batch of at most 16 entries submitted while nothing is queued is
    /// committed by its producer (see the module header), until a group takes longer.
    /// 0: never.
    pub inline_commit_max_us: u64,
}

impl Default for GroupCommitConfig {
    fn default() -> Self {
        Self { queue_batches_max: 1024, batch_entries_max: 4096, group_entries_max: 65_536, inline_commit_max_us: 50 }
    }
}

impl GroupCommitConfig {
    /// Checks every field against its bounds.
    pub fn validate(&self) -> Result<()> {
        config_check_range("queue_batches_max", self.queue_batches_max as u64, 1, GROUP_COMMIT_BOUND_LIMIT)?;
        config_check_range("batch_entries_max", self.batch_entries_max as u64, 1, GROUP_COMMIT_BOUND_LIMIT)?;
        config_check_range("group_entries_max", self.group_entries_max as u64, 1, GROUP_COMMIT_BOUND_LIMIT)?;
        config_check_range("inline_commit_max_us", self.inline_commit_max_us, 0, GROUP_COMMIT_BOUND_LIMIT)
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

/// The journal and the callback, committed under one lock by the writer and by inline
/// commits. `None` once the writer has returned the journal.
struct Owned {
    journal: Journal,
    on_durable: OnDurable,
}

/// State the writer publishes to every handle.
struct Shared {
    durable: Mutex<Durable>,
    durable_changed: Condvar,
    stats: Mutex<GroupCommitStats>,
    owned: Mutex<Option<Owned>>,
    /// Requests sent to the writer and not yet taken by a turn of its loop. A turn
    /// uncounts what it took under `owned`'s lock, which it holds until they are
    /// committed: under that lock, 0 means nothing sent is left uncommitted.
    queued: AtomicUsize,
    /// Groups in a row durable within `inline_commit_max_us`, up to [`QUICK_GROUPS_INLINE`].
    quick: AtomicU32,
}

impl Shared {
    /// Counts a group's time from append to acknowledgement.
    fn pace_record(&self, took: Duration, config: &GroupCommitConfig) {
        if took <= Duration::from_micros(config.inline_commit_max_us) {
            let _ = self
                .quick
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < QUICK_GROUPS_INLINE).then_some(n + 1));
        } else {
            self.quick.store(0, Ordering::Relaxed);
        }
    }

    /// Marks the journal stopped on an error (or a panic) of an inline commit, and wakes
    /// every waiter.
    fn stop_failed(&self) {
        let mut durable = self.durable.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        durable.stopped = true;
        drop(durable);
        self.durable_changed.notify_all();
    }
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
        let durable = Durable { index: journal.durable_index(), ..Durable::default() };
        let stats = GroupCommitStats { durable_index: journal.durable_index(), ..GroupCommitStats::default() };
        let payload_bytes_max = journal.config().payload_bytes_max;
        let on_durable: OnDurable = Box::new(on_durable);
        let shared = Arc::new(Shared {
            durable: Mutex::new(durable),
            durable_changed: Condvar::new(),
            stats: Mutex::new(stats),
            owned: Mutex::new(Some(Owned { journal, on_durable })),
            queued: AtomicUsize::new(0),
            quick: AtomicU32::new(0),
        });
        let writer_shared = Arc::clone(&shared);
        let writer = thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || writer_run(receiver, writer_shared, config))
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
        let _ = self.handle.send(Request::Stop);
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
    ///
    /// While groups are quick and nothing is queued, the batch is committed on this
    /// thread before `submit` returns (see the module header): `on_durable` then runs
    /// here, and an I/O error is returned here and stops the journal as the writer's
    /// would.
    pub fn submit(&self, proposals: Vec<Proposal>) -> Result<Ticket> {
        self.batch_validate(&proposals)?;
        let (reply, receiver) = mpsc::sync_channel(1);
        let (proposals, reply) = match self.commit_inline(proposals, reply)? {
            None => return Ok(Ticket { receiver }),
            Some(back) => back,
        };
        self.send(Request::Batch { proposals, reply })?;
        Ok(Ticket { receiver })
    }

    /// Commits the batch on this thread when the last groups were quick and nothing is
    /// queued for the writer; gives it back otherwise.
    #[allow(clippy::type_complexity)] // the batch and its reply, handed back unused
    fn commit_inline(
        &self,
        proposals: Vec<Proposal>,
        reply: SyncSender<IndexRange>,
    ) -> Result<Option<(Vec<Proposal>, SyncSender<IndexRange>)>> {
        let shared = &self.shared;
        if self.config.inline_commit_max_us == 0
            || proposals.len() > INLINE_ENTRIES_MAX
            || shared.quick.load(Ordering::Relaxed) < QUICK_GROUPS_INLINE
            || shared.queued.load(Ordering::Acquire) != 0
        {
            return Ok(Some((proposals, reply)));
        }
        if lock(&shared.durable).stopped {
            return Err(self.stopped_error());
        }
        let mut owned = lock(&shared.owned);
        // Under the lock the writer commits under: nothing it took is left uncommitted.
        let Some(owned) = owned.as_mut().filter(|_| shared.queued.load(Ordering::Acquire) == 0) else {
            return Ok(Some((proposals, reply)));
        };
        let mut group = Group::default();
        group.batch_add(owned.journal.last_index(), proposals, reply);
        let started = Instant::now();
        // A panicking callback stops the journal here as it would on the writer.
        let unwinding = StopOnUnwind(shared);
        let result = group_commit(&mut owned.journal, group, shared, &mut owned.on_durable);
        std::mem::forget(unwinding);
        match result {
            Ok(()) => {
                shared.pace_record(started.elapsed(), &self.config);
                lock(&shared.stats).inline_groups += 1;
                Ok(None)
            }
            Err(error) => {
                shared.stop_failed();
                Err(error)
            }
        }
    }

    /// Sends a request to the writer, counted as queued until a turn of its loop takes it.
    fn send(&self, request: Request) -> Result<()> {
        self.shared.queued.fetch_add(1, Ordering::AcqRel);
        self.sender.send(request).map_err(|_| {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            self.stopped_error()
        })
    }

    /// Writes a snapshot through the writer, after everything queued before it is
    /// durable; see [`Journal::write_snapshot`].
    pub fn write_snapshot(&self, index: u64, bytes: Vec<u8>) -> Result<()> {
        let (reply, receiver) = mpsc::sync_channel(1);
        self.send(Request::Snapshot { index, bytes, reply })?;
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
fn writer_run(receiver: Receiver<Request>, shared: Arc<Shared>, config: GroupCommitConfig) -> Result<Journal> {
    let _stopped = StoppedOnDrop { shared: Arc::clone(&shared) };
    let result = writer_loop(&receiver, &shared, config);
    // The journal leaves the shared lock: inline commits find it gone.
    let owned = shared.owned.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
    let journal = owned.expect("the journal is taken once, by the writer").journal;
    if result.is_ok() {
        // Published before the receiver drops, so a producer whose send fails sees it.
        lock(&shared.durable).closed = true;
    }
    result.map(|()| journal)
}

/// Marks the journal stopped if an inline commit unwinds (a panicking callback);
/// forgotten when the commit returns.
struct StopOnUnwind<'a>(&'a Shared);

impl Drop for StopOnUnwind<'_> {
    fn drop(&mut self) {
        self.0.stop_failed();
    }
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
fn writer_loop(receiver: &Receiver<Request>, shared: &Shared, config: GroupCommitConfig) -> Result<()> {
    // Segments a snapshot prunes are deleted by a thread of their own: deleting hundreds
    // of megabytes held every acknowledgement for about 0.17 s.
    lock(&shared.owned).as_mut().expect("the writer's journal").journal.defer_segment_removal();
    let mut remover = SegmentRemover::default();
    while let Ok(first) = receiver.recv() {
        let mut owned = lock(&shared.owned);
        let Owned { journal, on_durable } = owned.as_mut().expect("the journal is the writer's until it returns");
        let mut group = Group::default();
        let mut request = Some(first);
        // Requests taken, uncounted from `queued` under the lock.
        let mut taken = 0;
        while let Some(next) = request.take() {
            taken += 1;
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
                    // An inline commit that failed poisoned the journal and reported its
                    // error to its producer; the owner hears of it here.
                    return result.and_then(|()| if journal.is_poisoned() { Err(Error::Poisoned) } else { Ok(()) });
                }
            }
            if group.entries.len() < config.group_entries_max {
                request = receiver.try_recv().ok();
            }
        }
        // Uncounted before the commit, while the lock is held: a producer that now finds
        // nothing queued waits for the lock, so for this group to be committed, and its
        // next batch (sent as soon as its ticket resolves) may then go inline.
        shared.queued.fetch_sub(taken, Ordering::AcqRel);
        let started = Instant::now();
        let committed = !group.entries.is_empty();
        group_commit(journal, group, shared, on_durable)?;
        if committed {
            shared.pace_record(started.elapsed(), &config);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JournalConfig;

    fn proposal(n: u64) -> Vec<Proposal> {
        vec![Proposal { timestamp_ns: n, payload: n.to_le_bytes().to_vec() }]
    }

    /// The rule that keeps inline commits in queue order: none while a request is
    /// queued for the writer (sent, not yet taken), however quick the groups.
    #[test]
    fn nothing_is_committed_inline_while_a_request_is_queued() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, _) = Journal::open(dir.path(), JournalConfig::default()).unwrap();
        let config = GroupCommitConfig { inline_commit_max_us: 10_000_000, ..GroupCommitConfig::default() };
        let group = GroupCommit::start(journal, config, |_| {}).unwrap();
        let handle = group.handle();
        // Quick groups until one is committed inline (the first eight are the writer's).
        let mut n = 0;
        while handle.stats().inline_groups == 0 {
            handle.submit(proposal(n)).unwrap().wait().unwrap();
            n += 1;
            assert!(n < 100, "never inline");
        }
        assert!(n > QUICK_GROUPS_INLINE as u64, "inline after {n} groups");
        // As if another producer's batch were in the channel.
        handle.shared.queued.fetch_add(1, Ordering::AcqRel);
        let (reply, _receiver) = mpsc::sync_channel(1);
        let back = handle.commit_inline(proposal(n), reply).unwrap();
        assert!(back.is_some(), "committed inline ahead of a queued request");
        handle.shared.queued.fetch_sub(1, Ordering::AcqRel);
        let (reply, receiver) = mpsc::sync_channel(1);
        assert!(handle.commit_inline(proposal(n), reply).unwrap().is_none(), "not inline with nothing queued");
        assert_eq!(receiver.try_recv().unwrap(), IndexRange { first: n + 1, last: n + 1 });
        assert_eq!(handle.stats().inline_groups, 2);
        let journal = group.shutdown().unwrap();
        assert_eq!(journal.durable_index(), n + 1);
    }
}
