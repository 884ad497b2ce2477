//! SQLite: two files (below), each in WAL mode (readers in other processes see the last committed batch
//! while the sink writes the next), `synchronous=NORMAL`: a commit appends the batch to
//! the WAL without waiting for the disk, which is synced at checkpoints. Every commit
//! is atomic and the file never corrupts; a crash of the process loses nothing
//! committed, and a power cut or OS crash may lose the last batches — and with them the
//! progress row that covered them, which is in the same transaction, so the sink
//! resumes before them and writes them again from the log. The history is derived
//! from the log, so losing its tail until the next start costs time, never rows.
//!
//! Checkpoints (copying the WAL's pages into the database file, and the fsyncs that
//! come with them) run on a thread of their own with its own connection, from the
//! first write on: left to the writer (SQLite's automatic checkpoint after 1,000 pages)
//! they stalled it for 50–250 ms every few batches on a busy disk, and the sink's lag
//! behind a loaded node was those stalls. A checkpoint in WAL mode does not block the
//! writer; the writer checkpoints by itself only past [`WAL_PAGES_BACKSTOP`].
//!
//! Two files, two writers. One connection writing one file is one core at most, and
//! the sink's writer was its bottleneck; so `balance_movements` is in a second file
//! ([`second_path`]: `history-balances.sqlite` beside `history.sqlite`), written by a
//! thread and a connection of its own in parallel with the first (every other table).
//! Each file has its own progress row (`history_progress`, `history_progress_parts`:
//! `schema::Part`), in the same transaction as its rows,
//! and every write takes the same path in both: lock, read the file's progress, write
//! only the rows above it, move it. The second file's transaction commits first (its
//! lock is taken first too, so two writers of one history cannot deadlock), with
//! `synchronous=FULL` (its WAL synced at each commit), and the first's commits after
//! it: so the second file's progress is never behind the first's, power cut or not.
//! The sink resumes after the first file's progress (where its snapshot is); the rows
//! of entries the second file has already are skipped by its own progress, as in any
//! write. A second file behind the first (lost, replaced) is refused by [`Sqlite`]'s
//! `saved`. Readers attach the second file to the first's connection, so queries name
//! tables as before; a reader may see the second file a transaction ahead of the
//! first (movements of entries whose orders are not there yet), never behind.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, ToSql, TransactionBehavior};

use super::{each_row, table_columns, Backend, Cell, Progress, Result, Saved, StoreError, Value};
use crate::rows::Rows;
use crate::schema::{
    create_statements_of, in_second, progress_upsert, Dialect, Part, PARTS_PROGRESS, SCHEMA_VERSION, TABLES,
};

/// Page size of a new file: 16 KiB pages keep the B-trees a level shallower and split
/// a quarter as often as 4 KiB ones; the sink writes about a fifth more rows per CPU
/// second with them (docs/BENCHMARKS.md).
const PAGE_BYTES: i64 = 16_384;

/// Page cache per connection, at most: a batch touches a leaf page per account and
/// asset and per live order, which overflows SQLite's 2 MiB default and makes it spill
/// and read pages back within the transaction.
const CACHE_KIB: i64 = 65_536;

/// Pages the WAL may hold before the writer checkpoints by itself: a backstop for a
/// checkpoint thread that falls behind (1 GiB of 16 KiB pages).
const WAL_PAGES_BACKSTOP: i64 = 65_536;

/// Rows one INSERT statement writes (`INSERT … VALUES (…), (…), …`); a table's last
/// rows of a batch, fewer than this, go through a one-row statement. Each statement run
/// costs a step, a reset and a cursor opened, closed and sent down from the B-tree's
/// root (one left on the last page inserts the next row at the end of a table there);
/// run per 64 rows rather than per row, the writer spends about a tenth less CPU per
/// row (docs/BENCHMARKS.md). 64 rows of the widest table are 1,152 parameters.
const ROWS_PER_INSERT: usize = 64;

/// How often the checkpoint thread checkpoints while the sink writes.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

/// The name the second file is attached under on the reading connection.
const SECOND_SCHEMA: &str = "second";

/// The second file of the history at `path`: `history.sqlite` → `history-balances.sqlite`.
pub fn second_path(path: &Path) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    match path.extension() {
        Some(extension) => path.with_file_name(format!("{stem}-balances.{}", extension.to_string_lossy())),
        None => path.with_file_name(format!("{stem}-balances")),
    }
}

/// Moves the files of the SQLite history at `path` (both files, each with its WAL and
/// shared-memory files) into a directory beside it, `NAME.schema-VERSION` (`.2`, `.3`,
/// … when taken), where a build of that schema version opens them as they were; returns
/// the directory. The second file goes first: one interrupted half-way leaves the
/// first in place, and the next call finishes the move into the same directory (a
/// second file left without its first would be removed as stale by [`Sqlite::open`]).
pub fn set_aside(path: &Path, version: i64) -> Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| StoreError::Invalid(format!("{}: not a file", path.display())))?;
    let io = |what: &Path, e: std::io::Error| StoreError::Invalid(format!("{}: {e}", what.display()));
    let mut directory = path.with_file_name(format!("{}.schema-{version}", name.to_string_lossy()));
    for n in 2.. {
        if !directory.join(name).exists() {
            break;
        }
        directory = path.with_file_name(format!("{}.schema-{version}.{n}", name.to_string_lossy()));
    }
    std::fs::create_dir_all(&directory).map_err(|e| io(&directory, e))?;
    for file in [second_path(path), path.to_path_buf()] {
        for suffix in ["", "-wal", "-shm"] {
            let from = PathBuf::from(format!("{}{suffix}", file.display()));
            if from.exists() {
                let to = directory.join(from.file_name().expect("a file name"));
                std::fs::rename(&from, &to).map_err(|e| io(&from, e))?;
            }
        }
    }
    Ok(directory)
}

pub struct Sqlite {
    /// Reads: the first file, the second attached (queries name tables unqualified).
    connection: Connection,
    path: PathBuf,
    second_path: PathBuf,
    /// Opened by the first write (readers never open them).
    writers: Option<Writers>,
}

/// The connections that write, one per file, with no file attached (`BEGIN IMMEDIATE`
/// would take the write lock of every attached file), and the checkpoint thread.
struct Writers {
    first: Connection,
    /// The second file's (one, as `store::write_in_parts` takes them).
    seconds: [Connection; 1],
    /// A write went through: the first part has a progress row (`store::write_in_parts`).
    first_written: bool,
    _checkpointer: Checkpointer,
}

impl Writers {
    fn open(first: &Path, second: &Path) -> Result<Writers> {
        let open = |path: &Path, synchronous: &str| -> Result<Connection> {
            let connection = Connection::open(path)?;
            connection.busy_timeout(Duration::from_secs(10))?;
            connection.pragma_update(None, "synchronous", synchronous)?;
            connection.pragma_update(None, "cache_size", -CACHE_KIB)?;
            connection.pragma_update(None, "wal_autocheckpoint", WAL_PAGES_BACKSTOP)?;
            connection.set_prepared_statement_cache_capacity(64);
            Ok(connection)
        };
        // The second file's commits reach the disk before the first's commit that
        // follows them: its progress is never behind the first's, power cut or not.
        Ok(Writers {
            first: open(first, "NORMAL")?,
            seconds: [open(second, "FULL")?],
            first_written: false,
            _checkpointer: Checkpointer::start(&[first, second])?,
        })
    }
}

/// A thread running `PRAGMA wal_checkpoint(PASSIVE)` on each file, on connections of its own.
struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    fn start(paths: &[&Path]) -> Result<Checkpointer> {
        let mut connections = Vec::new();
        for path in paths {
            let connection = Connection::open(path)?;
            connection.busy_timeout(Duration::from_secs(10))?;
            connections.push(connection);
        }
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("history-checkpoint".into())
            .spawn(move || {
                let (lock, wake) = &*stopping;
                let mut stopped = lock.lock().expect("checkpoint lock");
                while !*stopped {
                    stopped = wake.wait_timeout(stopped, CHECKPOINT_EVERY).expect("checkpoint lock").0;
                    if *stopped {
                        break;
                    }
                    drop(stopped);
                    // PASSIVE: copies what no reader still needs, waits for nobody.
                    for connection in &connections {
                        if let Err(error) = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                            tracing::debug!(%error, "history checkpoint");
                        }
                    }
                    stopped = lock.lock().expect("checkpoint lock");
                }
            })
            .map_err(|e| StoreError::Invalid(format!("checkpoint thread: {e}")))?;
        Ok(Checkpointer { stop, thread: Some(thread) })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let (lock, wake) = &*self.stop;
        *lock.lock().expect("checkpoint lock") = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl ToSql for Cell<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Cell::Int(v) => ToSqlOutput::Borrowed(ValueRef::Integer(v)),
            Cell::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Cell::Blob(v) => ToSqlOutput::Borrowed(ValueRef::Blob(v)),
            Cell::Null => ToSqlOutput::Borrowed(ValueRef::Null),
        })
    }
}

/// Opens (creating) one file of a history with the tables `tables` accepts.
fn open_file(path: &Path, tables: impl Fn(&str) -> bool) -> Result<Connection> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(Duration::from_secs(10))?;
    // Before the first table: a new file's page size (an existing file keeps its own).
    connection.pragma_update(None, "page_size", PAGE_BYTES)?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(None, "synchronous", "NORMAL")?;
    connection.pragma_update(None, "cache_size", -CACHE_KIB)?;
    connection.set_prepared_statement_cache_capacity(64);
    for statement in create_statements_of(Dialect::Sqlite, tables) {
        connection.execute(&statement, [])?;
    }
    Ok(connection)
}

/// The applied index and schema version of a progress row.
fn file_progress(connection: &Connection, table: &str) -> Result<Option<(i64, i64)>> {
    Ok(connection
        .prepare_cached(&format!("SELECT applied_index, schema_version FROM {table} WHERE id = 1"))?
        .query_row([], |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)))
        .optional()?)
}

impl Sqlite {
    pub fn open(path: &Path) -> Result<Sqlite> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| StoreError::Invalid(format!("{}: {e}", parent.display())))?;
        }
        let second_path = second_path(path);
        if !path.exists() {
            // A second file without its first (the first deleted to start over) belongs to
            // another history: a new history starts with a new second file.
            for suffix in ["", "-wal", "-shm"] {
                let stale = PathBuf::from(format!("{}{suffix}", second_path.display()));
                if stale.exists() {
                    tracing::warn!(file = %stale.display(), "removing a history file whose first file is gone");
                    std::fs::remove_file(&stale)
                        .map_err(|e| StoreError::Invalid(format!("{}: {e}", stale.display())))?;
                }
            }
        }
        let connection = open_file(path, |table| !in_second(table))?;
        let refused = |found: i64, file: &Path| StoreError::SchemaVersion { store: file.display().to_string(), found };
        if let Some((_, version)) = file_progress(&connection, "history_progress")? {
            if version != SCHEMA_VERSION {
                return Err(refused(version, path));
            }
        }
        drop(open_file(&second_path, in_second)?);
        let second =
            second_path.to_str().ok_or_else(|| StoreError::Invalid(format!("{}: not UTF-8", second_path.display())))?;
        connection.execute(&format!("ATTACH DATABASE ?1 AS {SECOND_SCHEMA}"), [second])?;
        if let Some((_, version)) = file_progress(&connection, PARTS_PROGRESS)? {
            if version != SCHEMA_VERSION {
                return Err(refused(version, &second_path));
            }
        }
        Ok(Sqlite { connection, path: path.to_path_buf(), second_path, writers: None })
    }
}

impl Backend for Sqlite {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn saved(&mut self) -> Result<Option<Saved>> {
        let mut statement = self.connection.prepare_cached(
            "SELECT applied_index, applied_ts, begins_at, snapshot_index, snapshot FROM history_progress WHERE id = 1",
        )?;
        let mut rows = statement.query([])?;
        let Some(row) = rows.next()? else { return Ok(None) };
        let progress = Progress {
            applied_index: row.get::<_, i64>(0)? as u64,
            applied_ts: row.get::<_, i64>(1)? as u64,
            begins_at: row.get::<_, i64>(2)? as u64,
        };
        let snapshot = match (row.get::<_, Option<i64>>(3)?, row.get::<_, Option<Vec<u8>>>(4)?) {
            (Some(index), Some(bytes)) => Some((index as u64, bytes)),
            _ => None,
        };
        drop(rows);
        drop(statement);
        // Read after the first's: the second file commits first, so it is never behind
        // (unless it was lost or replaced, and then its rows are missing: refuse).
        let second = file_progress(&self.connection, PARTS_PROGRESS)?.map(|(index, _)| index);
        if second.is_none_or(|second| second < progress.applied_index as i64) {
            return Err(StoreError::Invalid(format!(
                "{}: written through log index {}, but {} only through {} (the second file was lost or replaced; \
                 rebuild the history into a new file: bourse history rebuild)",
                self.path.display(),
                progress.applied_index,
                self.second_path.display(),
                second.map_or("none".to_string(), |s| s.to_string())
            )));
        }
        Ok(Some(Saved { progress, snapshot }))
    }

    /// Two transactions in parallel, one per file, each with its rows and its own
    /// progress row: the second file's on a thread of its own, committed first, then
    /// the first's (with the snapshot). The locks are taken in that order too, so two
    /// writers of one history take turns without deadlock. The second file's progress
    /// is therefore never behind the first's: a restart resumes after the first's, the
    /// recorder derives the rows again from there, and the second file skips those
    /// at or below its own progress, as every write does.
    fn write(&mut self, batches: &[Rows], progress: &Progress, snapshot: Option<(u64, &[u8])>) -> Result<()> {
        if self.writers.is_none() {
            self.writers = Some(Writers::open(&self.path, &self.second_path)?);
        }
        let Writers { first, seconds, first_written, .. } = self.writers.as_mut().expect("opened above");
        super::write_in_parts(
            first_written,
            seconds,
            |second, side| {
                let part = side.part(Dialect::Sqlite);
                let transaction = second.transaction_with_behavior(TransactionBehavior::Immediate)?;
                side.locked();
                let mut stored = stored_progress(&transaction, part)?;
                if stored.is_some() && side.first_is_empty()? {
                    transaction.execute_batch(&super::part_reset(part))?;
                    stored = None;
                }
                if insert_rows(&transaction, batches, progress, stored, part)? {
                    progress_write(&transaction, part, progress, None)?;
                    transaction.commit()?;
                }
                Ok(())
            },
            |mut side| {
                let part = Part { dialect: Dialect::Sqlite, index: 0 };
                let transaction = first.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let stored = stored_progress(&transaction, part)?;
                side.read(stored);
                let write = insert_rows(&transaction, batches, progress, stored, part)?;
                side.join_seconds()?;
                if write {
                    progress_write(&transaction, part, progress, snapshot)?;
                    transaction.commit()?;
                }
                Ok(())
            },
        )
    }

    fn query(&mut self, sql: &str, params: &[Cell<'_>]) -> Result<Vec<Vec<Value>>> {
        let mut out = Vec::new();
        self.query_each(sql, params, &mut |row| {
            out.push(row.to_vec());
            Ok(())
        })?;
        Ok(out)
    }

    fn query_each(
        &mut self,
        sql: &str,
        params: &[Cell<'_>],
        each: &mut dyn FnMut(&[Value]) -> Result<()>,
    ) -> Result<()> {
        let mut statement = self.connection.prepare_cached(sql)?;
        let width = statement.column_count();
        let mut rows = statement.query(rusqlite::params_from_iter(params.iter()))?;
        let mut values = Vec::with_capacity(width);
        while let Some(row) = rows.next()? {
            values.clear();
            for i in 0..width {
                values.push(match row.get_ref(i)? {
                    ValueRef::Integer(v) => Value::Int(v),
                    ValueRef::Text(v) => Value::Text(String::from_utf8_lossy(v).into_owned()),
                    ValueRef::Null => Value::Null,
                    ValueRef::Real(v) => Value::Int(v as i64),
                    ValueRef::Blob(v) => Value::Blob(v.to_vec()),
                });
            }
            each(&values)?;
        }
        Ok(())
    }
}

/// The applied index of a part's progress row, read in the writer's transaction (begun
/// `IMMEDIATE`, so the progress read is the one it moves on).
fn stored_progress(transaction: &rusqlite::Transaction<'_>, part: Part) -> Result<Option<i64>> {
    let (table, id) = part.progress();
    Ok(transaction
        .prepare_cached(&format!("SELECT applied_index FROM {table} WHERE id = {id}"))?
        .query_row([], |row| row.get::<_, i64>(0))
        .optional()?)
}

/// Unless `stored` is at or past `progress` already, inserts `part`'s rows above it;
/// false when there was nothing to write.
fn insert_rows(
    transaction: &rusqlite::Transaction<'_>,
    batches: &[Rows],
    progress: &Progress,
    stored: Option<i64>,
    part: Part,
) -> Result<bool> {
    if stored.is_some_and(|stored| stored >= progress.applied_index as i64) {
        return Ok(false); // written already
    }
    let after = stored.unwrap_or(-1);
    for (table, _) in TABLES {
        if !part.has(table) || batches.iter().all(|b| b.table_len(table) == 0) {
            continue;
        }
        let columns = table_columns(table);
        let width = columns.len();
        // Cells of the rows not inserted yet (up to one statement's worth), in order.
        let mut pending: Vec<Cell<'_>> = Vec::with_capacity(width * ROWS_PER_INSERT);
        let mut chunk = None;
        each_row(batches, table, part, after, |key, cells| {
            pending.extend_from_slice(&[Cell::Int(key.log_index), Cell::Int(key.pos), Cell::Int(key.ts)]);
            pending.extend_from_slice(cells);
            if pending.len() == width * ROWS_PER_INSERT {
                let statement = match &mut chunk {
                    Some(statement) => statement,
                    None => chunk.insert(transaction.prepare_cached(&insert_sql(table, &columns, ROWS_PER_INSERT))?),
                };
                insert(statement, &pending)?;
                pending.clear();
            }
            Ok(())
        })?;
        if !pending.is_empty() {
            let mut statement = transaction.prepare_cached(&insert_sql(table, &columns, 1))?;
            for row in pending.chunks(width) {
                insert(&mut statement, row)?;
            }
        }
    }
    Ok(true)
}

/// `INSERT OR FAIL INTO table (columns) VALUES (?, …), …` with `rows` rows of
/// placeholders.
///
/// `OR FAIL` rather than the default `OR ABORT`: a statement that inserts several rows
/// and may abort half-way must be undoable on its own, so SQLite keeps a statement
/// journal for it, a copy of every page the statement touches (that doubled the CPU a
/// row costs). `FAIL` stops at the offending row without undoing the statement, which
/// is all the sink needs: an error drops the whole transaction, progress row included.
fn insert_sql(table: &str, columns: &[(&str, bool)], rows: usize) -> String {
    let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
    let marks = format!("({})", vec!["?"; names.len()].join(", "));
    format!("INSERT OR FAIL INTO {table} ({}) VALUES {}", names.join(", "), vec![marks; rows].join(", "))
}

/// Binds `cells` (whole rows, key first) to a statement's parameters in order and runs it.
fn insert(statement: &mut rusqlite::CachedStatement<'_>, cells: &[Cell<'_>]) -> Result<()> {
    for (i, cell) in cells.iter().enumerate() {
        statement.raw_bind_parameter(i + 1, cell)?;
    }
    statement.raw_execute()?;
    Ok(())
}

fn progress_write(
    transaction: &rusqlite::Transaction<'_>,
    part: Part,
    progress: &Progress,
    snapshot: Option<(u64, &[u8])>,
) -> Result<()> {
    let (applied, ts, begins) = (progress.applied_index as i64, progress.applied_ts as i64, progress.begins_at as i64);
    match snapshot {
        Some((index, bytes)) => transaction
            .prepare_cached(&progress_upsert(part, true))?
            .execute(rusqlite::params![SCHEMA_VERSION, applied, ts, begins, index as i64, bytes])?,
        None => transaction.prepare_cached(&progress_upsert(part, false))?.execute(rusqlite::params![
            SCHEMA_VERSION,
            applied,
            ts,
            begins
        ])?,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::entry_rows as rows;

    fn progress(applied_index: u64) -> Progress {
        Progress { applied_index, applied_ts: applied_index * 1_000, begins_at: 0 }
    }

    fn count(sqlite: &mut Sqlite, table: &str) -> i64 {
        sqlite.query(&format!("SELECT count(*) FROM {table}"), &[]).unwrap()[0][0].int().unwrap()
    }

    #[test]
    fn the_second_file_sits_beside_the_first() {
        assert_eq!(second_path(Path::new("d/history.sqlite")), Path::new("d/history-balances.sqlite"));
        assert_eq!(second_path(Path::new("d/h")), Path::new("d/h-balances"));
    }

    /// A crash between the second file's commit and the first's: the second is a batch
    /// ahead. The sink resumes after the first's progress and writes the batch again;
    /// the second file skips it, the first writes it, nothing is duplicated or lost.
    #[test]
    fn a_second_file_ahead_skips_what_it_has() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.sqlite");
        let mut sqlite = Sqlite::open(&path).unwrap();
        sqlite.write(&[rows(1, 10)], &progress(10), None).unwrap();
        // The second file's half of the next write, alone (the first never commits).
        let mut second = Connection::open(second_path(&path)).unwrap();
        let transaction = second.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        let part = Part { dialect: Dialect::Sqlite, index: 1 };
        let stored = stored_progress(&transaction, part).unwrap();
        assert!(insert_rows(&transaction, &[rows(11, 20)], &progress(20), stored, part).unwrap());
        progress_write(&transaction, part, &progress(20), None).unwrap();
        transaction.commit().unwrap();
        drop(sqlite);

        let mut sqlite = Sqlite::open(&path).unwrap();
        assert_eq!(sqlite.saved().unwrap().unwrap().progress, progress(10));
        assert_eq!((count(&mut sqlite, "order_events"), count(&mut sqlite, "balance_movements")), (10, 20));
        // Resumed after 10, from two batches: both files end at 25, each row once.
        sqlite.write(&[rows(11, 15), rows(16, 25)], &progress(25), None).unwrap();
        assert_eq!(sqlite.saved().unwrap().unwrap().progress, progress(25));
        assert_eq!((count(&mut sqlite, "order_events"), count(&mut sqlite, "balance_movements")), (25, 25));
        let movements = sqlite.query("SELECT log_index FROM balance_movements ORDER BY log_index", &[]).unwrap();
        assert_eq!(movements.iter().map(|r| r[0].int().unwrap()).collect::<Vec<_>>(), (1..=25).collect::<Vec<_>>());
        // Written again: nothing changes.
        sqlite.write(&[rows(20, 25)], &progress(25), None).unwrap();
        assert_eq!((count(&mut sqlite, "order_events"), count(&mut sqlite, "balance_movements")), (25, 25));
    }

    /// Set aside: both files into `NAME.schema-V/`, then `.2` when that is taken; a move
    /// interrupted after the second file is finished into the same directory.
    #[test]
    fn set_aside_moves_both_files_and_finishes_an_interrupted_move() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.sqlite");
        let names = ["history.sqlite", "history-balances.sqlite"];
        let write = || Sqlite::open(&path).unwrap().write(&[rows(1, 5)], &progress(5), None).unwrap();
        write();
        let first = set_aside(&path, 7).unwrap();
        assert_eq!(first, dir.path().join("history.sqlite.schema-7"));
        assert!(names.iter().all(|name| first.join(name).exists()));
        assert!(!path.exists() && !second_path(&path).exists());
        assert_eq!(count(&mut Sqlite::open(&first.join("history.sqlite")).unwrap(), "balance_movements"), 5);
        write();
        assert_eq!(set_aside(&path, 7).unwrap(), dir.path().join("history.sqlite.schema-7.2"));
        // Interrupted after the second file: the next move puts the first beside it.
        write();
        let third = dir.path().join("history.sqlite.schema-7.3");
        std::fs::create_dir(&third).unwrap();
        std::fs::rename(second_path(&path), third.join(names[1])).unwrap();
        assert_eq!(set_aside(&path, 7).unwrap(), third);
        assert!(names.iter().all(|name| third.join(name).exists()));
        let mut kept = Sqlite::open(&third.join("history.sqlite")).unwrap();
        assert_eq!(kept.saved().unwrap().unwrap().progress, progress(5));
    }

    /// A second file behind the first (lost or replaced) would leave a hole: refused.
    #[test]
    fn a_lost_second_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.sqlite");
        let mut sqlite = Sqlite::open(&path).unwrap();
        sqlite.write(&[rows(1, 10)], &progress(10), None).unwrap();
        drop(sqlite);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", second_path(&path).display()));
        }
        let error = Sqlite::open(&path).unwrap().saved().unwrap_err().to_string();
        assert!(error.contains("only through none"), "{error}");
    }

    /// The first file deleted to start over: the second, left behind, goes with it.
    #[test]
    fn a_new_history_drops_a_stale_second_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.sqlite");
        Sqlite::open(&path).unwrap().write(&[rows(1, 10)], &progress(10), None).unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        let mut sqlite = Sqlite::open(&path).unwrap();
        assert_eq!(sqlite.saved().unwrap(), None);
        assert_eq!(count(&mut sqlite, "balance_movements"), 0);
        sqlite.write(&[rows(1, 5)], &progress(5), None).unwrap();
        assert_eq!((count(&mut sqlite, "order_events"), count(&mut sqlite, "balance_movements")), (5, 5));
    }
}
