//! Tests of the Raft log store: openraft's conformance suite, then what only a store on
//! disk must do: come back after a restart (entries, vote, purged and committed ids, after
//! truncations and purges, after a crash in the middle of a purge), cut a torn tail,
//! refuse corruption, acknowledge appends only once they are durable, in order, and keep
//! its memory bounded.
//!
//! Everything runs on tmpfs (`/dev/shm`) when there is one: these tests check logic, and
//! an fsync there is free.

use std::fs;
use std::io::{self, Cursor};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bourse_cluster::log_store::{Error, LogStore, LogStoreConfig};
use bourse_cluster::types::{
    Applied, Batch, Entry, EntryPayload, IoFlushed, LogId, LogState, Snapshot, SnapshotData, SnapshotMeta,
    StoredMembership, TypeConfig, Vote,
};
use bourse_journal::JournalConfig;
use futures_util::StreamExt;
use openraft::storage::{EntryResponder, RaftLogStorage, RaftSnapshotBuilder, RaftStateMachine};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::{OptionalSend, RaftLogReader, StorageError};
use tempfile::TempDir;

/// A scratch directory on tmpfs when there is one.
fn dir_fast() -> TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("create a temporary directory")
}

/// Tiny segments (a few entries each) and a tiny cache, so that purges delete files and
/// reads go to disk.
fn config_small() -> LogStoreConfig {
    LogStoreConfig {
        journal: JournalConfig { segment_bytes_max: 1024, ..LogStoreConfig::default().journal },
        cache_entries_max: 8,
        ..LogStoreConfig::default()
    }
}

fn log_id(term: u64, index: u64) -> LogId {
    openraft::testing::log_id::<TypeConfig>(term, 1, index)
}

/// A normal entry with a payload that varies with the index.
fn entry(term: u64, index: u64) -> Entry {
    let command = format!("command-{term}-{index}").into_bytes();
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(Batch::from_commands(vec![command; 3])) }
}

fn entries(term: u64, first: u64, last: u64) -> Vec<Entry> {
    (first..=last).map(|index| entry(term, index)).collect()
}

/// Appends and waits until openraft would be told the entries are durable.
async fn append(store: &mut LogStore, entries: Vec<Entry>) {
    let (sender, receiver) = TypeConfig::oneshot();
    store.append(entries, IoFlushed::signal(sender)).await.expect("append");
    receiver.await.expect("callback fired").expect("append durable");
}

async fn read_all(store: &mut LogStore) -> Vec<Entry> {
    store.get_log_reader().await.try_get_log_entries(..).await.expect("read")
}

fn segment_paths(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|item| item.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
        .collect();
    paths.sort();
    paths
}

/// The journal index in a segment's file name (Raft index + 1).
fn segment_first_index(path: &Path) -> u64 {
    path.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

/// Copies every file of `from` into a fresh directory: what a crash at this instant
/// would leave, as far as written data goes.
fn dir_copy(from: &Path) -> TempDir {
    let to = dir_fast();
    for item in fs::read_dir(from).unwrap() {
        let path = item.unwrap().path();
        fs::copy(&path, to.path().join(path.file_name().unwrap())).unwrap();
    }
    to
}

// ---------------------------------------------------------------------------------------
// openraft's conformance suite.

/// The least state machine the suite needs: last applied id, membership, last snapshot.
#[derive(Clone, Default)]
struct TestStateMachine {
    inner: Arc<Mutex<TestState>>,
}

#[derive(Default)]
struct TestState {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    snapshot: Option<(SnapshotMeta, Vec<u8>)>,
}

impl RaftSnapshotBuilder<TypeConfig> for TestStateMachine {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let mut state = self.inner.lock().unwrap();
        let meta = SnapshotMeta { last_log_id: state.last_applied, last_membership: state.membership.clone() };
        let bytes = format!("{:?}", state.last_applied).into_bytes();
        state.snapshot = Some((meta.clone(), bytes.clone()));
        Ok(Snapshot { meta, snapshot: Cursor::new(bytes) })
    }
}

impl RaftStateMachine<TypeConfig> for TestStateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = TestStateMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let state = self.inner.lock().unwrap();
        Ok((state.last_applied, state.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: futures_util::Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            {
                let mut state = self.inner.lock().unwrap();
                state.last_applied = Some(entry.log_id);
                if let EntryPayload::Membership(membership) = &entry.payload {
                    state.membership = StoredMembership::new(Some(entry.log_id), membership.clone());
                }
            }
            if let Some(responder) = responder {
                responder.send(Applied { commands: 0 });
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: SnapshotData) -> Result<(), io::Error> {
        let mut state = self.inner.lock().unwrap();
        state.last_applied = meta.last_log_id;
        state.membership = meta.last_membership.clone();
        state.snapshot = Some((meta.clone(), snapshot.into_inner()));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let state = self.inner.lock().unwrap();
        Ok(state.snapshot.clone().map(|(meta, bytes)| Snapshot { meta, snapshot: Cursor::new(bytes) }))
    }
}

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, TestStateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, TestStateMachine), StorageError<TypeConfig>> {
        let dir = dir_fast();
        let store = LogStore::open_with(dir.path(), config_small()).expect("open log store");
        Ok((dir, store, TestStateMachine::default()))
    }
}

/// The suite sleeps a second after each purge ("may happen in the background"); paused
/// time skips those sleeps.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn openraft_conformance_suite() {
    Suite::test_all(Builder).await.expect("conformance suite");
}

// ---------------------------------------------------------------------------------------
// Restarts.

#[tokio::test]
async fn entries_vote_purged_and_committed_ids_survive_a_restart() {
    let dir = dir_fast();
    {
        let mut store = LogStore::open(dir.path()).unwrap();
        store.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        append(&mut store, entries(1, 0, 20)).await;
        store.save_committed(Some(log_id(1, 18))).await.unwrap();
        store.purge(log_id(1, 5)).await.unwrap();
        store.shutdown().unwrap();
    }
    let mut store = LogStore::open(dir.path()).unwrap();
    assert_eq!(store.recovery().tail_cut, None);
    assert_eq!(store.recovery().entries, 15);
    assert_eq!(store.get_log_reader().await.read_vote().await.unwrap(), Some(Vote::new_committed(2, 1)));
    assert_eq!(store.read_committed().await.unwrap(), Some(log_id(1, 18)));
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state, LogState { last_purged_log_id: Some(log_id(1, 5)), last_log_id: Some(log_id(1, 20)) });
    assert_eq!(read_all(&mut store).await, entries(1, 6, 20));
    // The log continues where it stopped.
    append(&mut store, entries(2, 21, 22)).await;
    assert_eq!(store.last_log_id(), Some(log_id(2, 22)));
}

#[tokio::test]
async fn truncation_survives_a_restart() {
    let dir = dir_fast();
    {
        let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
        append(&mut store, entries(1, 0, 30)).await;
        store.truncate_after(Some(log_id(1, 12))).await.unwrap();
        assert_eq!(store.last_log_id(), Some(log_id(1, 12)));
        append(&mut store, entries(2, 13, 15)).await;
    }
    {
        let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
        let mut expected = entries(1, 0, 12);
        expected.extend(entries(2, 13, 15));
        assert_eq!(read_all(&mut store).await, expected);
        assert_eq!(store.last_log_id(), Some(log_id(2, 15)));
        // Truncating everything leaves an empty log, which starts again at 0.
        store.truncate_after(None).await.unwrap();
        assert_eq!(store.get_log_state().await.unwrap(), LogState::default());
        assert!(read_all(&mut store).await.is_empty());
    }
    let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
    assert_eq!(store.get_log_state().await.unwrap(), LogState::default());
    append(&mut store, entries(3, 0, 2)).await;
    assert_eq!(read_all(&mut store).await, entries(3, 0, 2));
}

/// Appends that are still queued when a truncation arrives: readers must never see the
/// old entries again, even when the small cache sends them to disk.
#[tokio::test]
async fn truncation_behind_queued_appends_hides_the_old_entries() {
    let dir = dir_fast();
    {
        let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
        for index in 0..=50 {
            store.append(entries(1, index, index), IoFlushed::noop()).await.unwrap();
        }
        store.truncate_after(Some(log_id(1, 20))).await.unwrap();
        append(&mut store, entries(2, 21, 30)).await;
        let mut expected = entries(1, 0, 20);
        expected.extend(entries(2, 21, 30));
        assert_eq!(read_all(&mut store).await, expected);
        let reader_entries = store.get_log_reader().await.try_get_log_entries(15..25).await.unwrap();
        assert_eq!(reader_entries, expected[15..25].to_vec());
    }
    let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
    assert_eq!(store.last_log_id(), Some(log_id(2, 30)));
    assert_eq!(read_all(&mut store).await.len(), 31);
}

#[tokio::test]
async fn purge_deletes_only_whole_segments_and_survives_a_restart() {
    let dir = dir_fast();
    {
        let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
        append(&mut store, entries(1, 0, 99)).await;
        let segments_before = segment_paths(dir.path());
        assert!(segments_before.len() > 5, "{} segments", segments_before.len());
        store.purge(log_id(1, 49)).await.unwrap();
        assert_eq!(read_all(&mut store).await, entries(1, 50, 99));
        store.shutdown().unwrap();
        let segments_after = segment_paths(dir.path());
        assert!(segments_after.len() < segments_before.len());
        // The first segment kept still holds Raft index 50 (journal index 51); every
        // deleted one held only purged entries.
        let first_kept = segment_first_index(&segments_after[0]);
        assert!(first_kept <= 51, "first kept segment starts at journal index {first_kept}");
        let deleted: Vec<_> = segments_before.iter().filter(|path| !segments_after.contains(path)).collect();
        assert!(deleted.iter().all(|path| segment_first_index(path) < first_kept));
    }
    let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state, LogState { last_purged_log_id: Some(log_id(1, 49)), last_log_id: Some(log_id(1, 99)) });
    assert_eq!(read_all(&mut store).await, entries(1, 50, 99));
    assert!(store.get_log_reader().await.try_get_log_entries(40..52).await.unwrap().len() == 2);
}

#[tokio::test]
async fn purging_everything_survives_a_restart() {
    let dir = dir_fast();
    {
        let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
        append(&mut store, entries(1, 0, 9)).await;
        store.purge(log_id(1, 9)).await.unwrap();
        assert_eq!(store.get_log_state().await.unwrap().last_log_id, Some(log_id(1, 9)));
    }
    {
        let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state, LogState { last_purged_log_id: Some(log_id(1, 9)), last_log_id: Some(log_id(1, 9)) });
        assert!(read_all(&mut store).await.is_empty());
        // A purge beyond the last entry (a snapshot installed ahead of the log).
        store.purge(log_id(3, 40)).await.unwrap();
        append(&mut store, entries(3, 41, 41)).await;
    }
    let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state, LogState { last_purged_log_id: Some(log_id(3, 40)), last_log_id: Some(log_id(3, 41)) });
    assert_eq!(read_all(&mut store).await, entries(3, 41, 41));
}

/// openraft's suite appends to an empty log at any index: the log then starts there,
/// and still does after a restart.
#[tokio::test]
async fn an_empty_log_may_start_later_and_survives_a_restart() {
    let dir = dir_fast();
    {
        let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
        append(&mut store, entries(1, 5, 7)).await;
        assert_eq!(read_all(&mut store).await, entries(1, 5, 7));
    }
    let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state, LogState { last_purged_log_id: None, last_log_id: Some(log_id(1, 7)) });
    assert_eq!(read_all(&mut store).await, entries(1, 5, 7));
    append(&mut store, entries(1, 8, 8)).await;
    assert_eq!(read_all(&mut store).await, entries(1, 5, 8));
    drop(store);
    // A crash after the new start was recorded, before any entry there was durable.
    for path in segment_paths(dir.path()) {
        fs::remove_file(path).unwrap();
    }
    let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
    assert_eq!(store.get_log_state().await.unwrap(), LogState::default());
    assert!(read_all(&mut store).await.is_empty());
    let error = store.append(entries(1, 4, 4), IoFlushed::noop()).await.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    append(&mut store, entries(2, 5, 6)).await;
    assert_eq!(read_all(&mut store).await, entries(2, 5, 6));
}

/// A crash after the purge record was durable but before the log restarted after it (all
/// old segments deleted, the new one not yet created): opening finishes the purge.
#[tokio::test]
async fn a_purge_interrupted_by_a_crash_is_finished_on_open() {
    let dir = dir_fast();
    {
        let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
        append(&mut store, entries(1, 0, 9)).await;
        store.purge(log_id(1, 20)).await.unwrap();
    }
    for path in segment_paths(dir.path()) {
        fs::remove_file(path).unwrap();
    }
    let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
    assert!(store.recovery().purge_finished);
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state, LogState { last_purged_log_id: Some(log_id(1, 20)), last_log_id: Some(log_id(1, 20)) });
    append(&mut store, entries(2, 21, 22)).await;
    assert_eq!(read_all(&mut store).await, entries(2, 21, 22));
}

#[tokio::test]
async fn a_segment_missing_after_the_purge_point_is_an_error() {
    let dir = dir_fast();
    {
        let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
        append(&mut store, entries(1, 0, 99)).await;
        store.purge(log_id(1, 30)).await.unwrap();
    }
    fs::remove_file(&segment_paths(dir.path())[0]).unwrap();
    match LogStore::open_with(dir.path(), config_small()) {
        Err(Error::LogStartMissing { purged_end: 31, .. }) => {}
        other => panic!("expected LogStartMissing, got {other:?}"),
    }
}

#[tokio::test]
async fn a_torn_tail_is_cut_on_open() {
    let dir = dir_fast();
    {
        let mut store = LogStore::open(dir.path()).unwrap();
        append(&mut store, entries(1, 0, 9)).await;
    }
    let segment = segment_paths(dir.path()).pop().unwrap();
    let length = fs::metadata(&segment).unwrap().len();
    fs::OpenOptions::new().write(true).open(&segment).unwrap().set_len(length - 3).unwrap();
    let mut store = LogStore::open(dir.path()).unwrap();
    assert!(store.recovery().tail_cut.is_some());
    assert_eq!(store.last_log_id(), Some(log_id(1, 8)));
    assert_eq!(read_all(&mut store).await, entries(1, 0, 8));
    append(&mut store, entries(2, 9, 9)).await;
    assert_eq!(store.last_log_id(), Some(log_id(2, 9)));
}

#[tokio::test]
async fn corruption_in_the_middle_of_the_log_is_an_error() {
    let dir = dir_fast();
    {
        let mut store = LogStore::open(dir.path()).unwrap();
        append(&mut store, entries(1, 0, 9)).await;
    }
    let segment = segment_paths(dir.path()).pop().unwrap();
    let mut bytes = fs::read(&segment).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    fs::write(&segment, bytes).unwrap();
    match LogStore::open(dir.path()) {
        Err(Error::Journal(bourse_journal::Error::RecordCorrupt { .. })) => {}
        other => panic!("expected RecordCorrupt, got {other:?}"),
    }
}

#[tokio::test]
async fn a_corrupt_metadata_file_is_an_error() {
    let dir = dir_fast();
    {
        let mut store = LogStore::open(dir.path()).unwrap();
        store.save_vote(&Vote::new(1, 1)).await.unwrap();
    }
    let path = dir.path().join("raft-meta");
    let mut bytes = fs::read(&path).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    fs::write(&path, bytes).unwrap();
    assert!(matches!(LogStore::open(dir.path()), Err(Error::MetaInvalid { .. })));
}

// ---------------------------------------------------------------------------------------
// Durability and ordering.

/// What the files hold the moment `save_vote` returns or an append's callback fires is
/// what a restart finds.
#[tokio::test]
async fn the_vote_and_acknowledged_entries_are_in_the_files_when_reported() {
    let dir = dir_fast();
    let mut store = LogStore::open(dir.path()).unwrap();
    store.save_vote(&Vote::new(4, 2)).await.unwrap();
    let image = dir_copy(dir.path());
    assert_eq!(LogStore::open(image.path()).unwrap().vote(), Some(Vote::new(4, 2)));

    append(&mut store, entries(4, 0, 4)).await;
    let image = dir_copy(dir.path());
    let mut reopened = LogStore::open(image.path()).unwrap();
    assert_eq!(read_all(&mut reopened).await, entries(4, 0, 4));
    assert_eq!(reopened.vote(), Some(Vote::new(4, 2)));
}

/// Entries are readable when `append` returns; callbacks fire only after the group that
/// holds them is durable, and in submission order.
#[tokio::test]
async fn callbacks_fire_in_order_after_the_entries_are_durable() {
    let dir = dir_fast();
    let mut store = LogStore::open(dir.path()).unwrap();
    let mut receivers = Vec::new();
    for index in 0..64 {
        let (sender, receiver) = TypeConfig::oneshot();
        store.append(entries(1, index, index), IoFlushed::signal(sender)).await.unwrap();
        // Readable at once, durable or not.
        assert_eq!(store.last_log_id(), Some(log_id(1, index)));
        let read = store.get_log_reader().await.try_get_log_entries(index..=index).await.unwrap();
        assert_eq!(read, entries(1, index, index));
        receivers.push(receiver);
    }
    // When the last callback has fired, every earlier one has too.
    let last = receivers.pop().unwrap();
    last.await.unwrap().unwrap();
    let stats = store.stats();
    assert_eq!(stats.entries_durable, 64);
    assert!(stats.groups <= 64 && stats.journal.syncs >= stats.groups);
    for receiver in receivers {
        let fired = tokio::time::timeout(std::time::Duration::ZERO, receiver).await;
        fired.expect("an earlier callback had fired").unwrap().unwrap();
    }
}

/// Every durable append's callback was preceded by the fdatasync that covers it: the
/// stats the writer publishes before firing callbacks say so.
#[tokio::test]
async fn each_callback_follows_its_fdatasync() {
    let dir = dir_fast();
    let mut store = LogStore::open(dir.path()).unwrap();
    for index in 0..16 {
        append(&mut store, entries(1, index, index)).await;
        let stats = store.stats();
        assert!(stats.entries_durable > index, "entry {index} acknowledged before it was durable");
        assert!(stats.journal.syncs >= stats.groups);
    }
}

#[tokio::test]
async fn an_append_that_does_not_continue_the_log_is_refused() {
    let dir = dir_fast();
    let mut store = LogStore::open(dir.path()).unwrap();
    append(&mut store, entries(1, 0, 3)).await;
    let error = store.append(entries(1, 5, 5), IoFlushed::noop()).await.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(store.last_log_id(), Some(log_id(1, 3)));
    let error = store.purge(log_id(1, 2)).await.and(store.truncate_after(Some(log_id(1, 1))).await).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
}

// ---------------------------------------------------------------------------------------
// Memory.

#[tokio::test]
async fn the_cache_is_bounded_and_older_entries_come_from_disk() {
    let dir = dir_fast();
    let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
    append(&mut store, entries(1, 0, 99)).await;
    let stats = store.stats();
    assert!(stats.cache_entries <= 8, "{} entries cached", stats.cache_entries);
    assert_eq!(read_all(&mut store).await, entries(1, 0, 99));
    assert_eq!(store.get_log_reader().await.try_get_log_entries(10..13).await.unwrap(), entries(1, 10, 12));
    assert!(store.stats().disk_reads >= 2);
    drop(store);
    // Reopening loads only the newest entries into the cache.
    let mut store = LogStore::open_with(dir.path(), config_small()).unwrap();
    assert!(store.stats().cache_entries <= 8);
    assert_eq!(read_all(&mut store).await, entries(1, 0, 99));
}
