//! SQLite: one file, WAL mode (readers in other processes see the last committed batch
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

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, ToSql, TransactionBehavior};

use super::{each_row, table_columns, Backend, Cell, Progress, Result, Saved, StoreError, Value};
use crate::rows::Rows;
use crate::schema::{create_statements, Dialect, SCHEMA_VERSION};

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

pub struct Sqlite {
    connection: Connection,
    path: PathBuf,
    /// Started by the first write (readers never start one).
    checkpointer: Option<Checkpointer>,
}

/// A thread running `PRAGMA wal_checkpoint(PASSIVE)` on its own connection.
struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    fn start(path: &Path) -> Result<Checkpointer> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(Duration::from_secs(10))?;
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
                    if let Err(error) = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                        tracing::debug!(%error, "history checkpoint");
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

impl Sqlite {
    pub fn open(path: &Path) -> Result<Sqlite> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| StoreError::Invalid(format!("{}: {e}", parent.display())))?;
        }
        let connection = Connection::open(path)?;
        connection.busy_timeout(std::time::Duration::from_secs(10))?;
        // Before the first table: a new file's page size (an existing file keeps its own).
        connection.pragma_update(None, "page_size", PAGE_BYTES)?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "NORMAL")?;
        connection.pragma_update(None, "cache_size", -CACHE_KIB)?;
        connection.set_prepared_statement_cache_capacity(64);
        for statement in create_statements(Dialect::Sqlite) {
            connection.execute(&statement, [])?;
        }
        let mut sqlite = Sqlite { connection, path: path.to_path_buf(), checkpointer: None };
        if let Some(version) = sqlite.schema_version()? {
            if version != SCHEMA_VERSION {
                return Err(StoreError::Invalid(format!(
                    "{}: history schema version {version}, this build reads {SCHEMA_VERSION} \
                     (rebuild it into a new file: bourse history rebuild)",
                    path.display()
                )));
            }
        }
        Ok(sqlite)
    }

    fn schema_version(&mut self) -> Result<Option<i64>> {
        let rows = self.query("SELECT schema_version FROM history_progress WHERE id = 1", &[])?;
        Ok(rows.first().and_then(|r| r[0].int()))
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
        Ok(Some(Saved { progress, snapshot }))
    }

    fn write(&mut self, rows: &Rows, progress: &Progress, snapshot: Option<(u64, &[u8])>) -> Result<()> {
        if self.checkpointer.is_none() {
            self.connection.pragma_update(None, "wal_autocheckpoint", WAL_PAGES_BACKSTOP)?;
            self.checkpointer = Some(Checkpointer::start(&self.path)?);
        }
        // IMMEDIATE: the write lock from the start, so the progress read here is the one
        // this transaction moves on (a second writer waits, then skips what this wrote).
        let transaction = self.connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let stored = transaction
            .prepare_cached("SELECT applied_index FROM history_progress WHERE id = 1")?
            .query_row([], |row| row.get::<_, i64>(0))
            .optional()?;
        if stored.is_some_and(|stored| stored >= progress.applied_index as i64) {
            return Ok(()); // written already (dropping the transaction rolls it back)
        }
        let after = stored.unwrap_or(-1);
        for (table, count) in rows.table_lens() {
            if count == 0 {
                continue;
            }
            let columns = table_columns(table);
            let width = columns.len();
            // Cells of the rows not inserted yet (up to one statement's worth), in order.
            let mut pending: Vec<Cell<'_>> = Vec::with_capacity(width * ROWS_PER_INSERT);
            let mut chunk = None;
            each_row(rows, table, after, |key, cells| {
                pending.extend_from_slice(&[Cell::Int(key.log_index), Cell::Int(key.pos), Cell::Int(key.ts)]);
                pending.extend_from_slice(cells);
                if pending.len() == width * ROWS_PER_INSERT {
                    let statement = match &mut chunk {
                        Some(statement) => statement,
                        None => {
                            chunk.insert(transaction.prepare_cached(&insert_sql(table, &columns, ROWS_PER_INSERT))?)
                        }
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
        progress_write(&transaction, progress, snapshot)?;
        transaction.commit()?;
        Ok(())
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
    progress: &Progress,
    snapshot: Option<(u64, &[u8])>,
) -> Result<()> {
    let (applied, ts, begins) = (progress.applied_index as i64, progress.applied_ts as i64, progress.begins_at as i64);
    match snapshot {
        Some((index, bytes)) => transaction.prepare_cached(
            "INSERT INTO history_progress (id, schema_version, applied_index, applied_ts, begins_at, snapshot_index, snapshot) \
             VALUES (1, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET applied_index = excluded.applied_index, \
             applied_ts = excluded.applied_ts, begins_at = excluded.begins_at, \
             snapshot_index = excluded.snapshot_index, snapshot = excluded.snapshot",
        )?
        .execute(rusqlite::params![SCHEMA_VERSION, applied, ts, begins, index as i64, bytes])?,
        None => transaction.prepare_cached(
            "INSERT INTO history_progress (id, schema_version, applied_index, applied_ts, begins_at) \
             VALUES (1, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET applied_index = excluded.applied_index, \
             applied_ts = excluded.applied_ts, begins_at = excluded.begins_at",
        )?
        .execute(rusqlite::params![SCHEMA_VERSION, applied, ts, begins])?,
    };
    Ok(())
}
