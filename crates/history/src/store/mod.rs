//! The database behind the history: SQLite (a file, the default) or PostgreSQL, one
//! schema and one set of queries.
//!
//! A backend does three things: write a batch of rows together with the progress row
//! (and, now and then, the sink's engine snapshot) in one transaction; read the
//! progress back; run a query (`?` placeholders, integer and text columns). Everything
//! else — the rows, the SQL of the queries — is shared, so the two cannot drift.
//!
//! Writing: a batch is written by two writers in parallel, each in one transaction
//! over its part of the tables (`schema::SECOND_TABLES`: `balance_movements`; the
//! rest), with its own progress row. Each first takes its part's write lock and reads
//! its progress row, then writes only the rows of entries above it, then the progress.
//! So a batch written twice (a restarted sink, two sinks on one store) writes nothing
//! the second time, and the primary keys, which a row written twice would violate,
//! turn a bug into a failed batch rather than a duplicate. The second part locks and
//! commits first, so its progress is never behind the first's, which is where a sink
//! resumes (with the snapshot): what the second has already, it skips (unless the
//! first part is empty: then the second starts again with it: `SecondWriter`). SQLite keeps
//! the second part in a second file and inserts 64 rows per cached `INSERT OR FAIL …
//! VALUES (…), …` (WAL mode, `synchronous=NORMAL`, 16 KiB pages); PostgreSQL streams
//! each table's rows with `COPY … FROM STDIN (FORMAT binary)` over two connections.

mod postgres;
mod sqlite;

use crate::rows::{RowKey, Rows};
use crate::schema::{Dialect, TABLES};

/// A value in a query's parameters or results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
    Null,
}

impl Value {
    pub fn int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn text(&self) -> Option<&str> {
        match self {
            Value::Text(v) => Some(v),
            _ => None,
        }
    }
}

/// A borrowed cell of a row being written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell<'a> {
    Int(i64),
    Text(&'a str),
    Blob(&'a [u8]),
    Null,
}

/// What the sink has written: where it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The last log entry whose rows are written.
    pub applied_index: u64,
    /// The log timestamp of its last command.
    pub applied_ts: u64,
    /// The first entry whose rows are here (0 or 1: the whole log).
    pub begins_at: u64,
}

/// The progress row and the engine snapshot kept with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Saved {
    pub progress: Progress,
    /// (index, engine snapshot bytes), at or below `progress.applied_index`.
    pub snapshot: Option<(u64, Vec<u8>)>,
}

/// Why a database operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("postgres: {0}")]
    Postgres(#[from] ::postgres::Error),
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// One database connection of either kind.
pub trait Backend: Send {
    fn dialect(&self) -> Dialect;
    /// The progress row, if any.
    fn saved(&mut self) -> Result<Option<Saved>>;
    /// Writes the rows of `parts` (consecutive runs of entries) and the progress (and the
    /// snapshot, when given) in one transaction.
    fn write(&mut self, parts: &[Rows], progress: &Progress, snapshot: Option<(u64, &[u8])>) -> Result<()>;
    /// Runs a query written with `?` placeholders; integer, text and null results.
    fn query(&mut self, sql: &str, params: &[Cell<'_>]) -> Result<Vec<Vec<Value>>>;
    /// Runs a query and hands each result row to `each` as it is read, without holding
    /// the result (an audit dump streams millions of rows); an error from `each` stops it.
    fn query_each(
        &mut self,
        sql: &str,
        params: &[Cell<'_>],
        each: &mut dyn FnMut(&[Value]) -> Result<()>,
    ) -> Result<()>;
}

/// A history database.
pub struct Store {
    backend: Box<dyn Backend>,
    url: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating the schema if needed) `postgres://…` / `postgresql://…`, or a
    /// SQLite file given as `sqlite:PATH` or a plain path.
    pub fn open(url: &str) -> Result<Store> {
        let backend: Box<dyn Backend> = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Box::new(postgres::Postgres::open(url)?)
        } else {
            let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url);
            if path.is_empty() {
                return Err(StoreError::Invalid("an empty SQLite path".into()));
            }
            Box::new(sqlite::Sqlite::open(std::path::Path::new(path))?)
        };
        Ok(Store { backend, url: redact(url) })
    }

    /// The URL opened, without a password.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn dialect(&self) -> Dialect {
        self.backend.dialect()
    }

    pub fn saved(&mut self) -> Result<Option<Saved>> {
        self.backend.saved()
    }

    pub fn write(&mut self, rows: &Rows, progress: &Progress, snapshot: Option<(u64, &[u8])>) -> Result<()> {
        self.backend.write(std::slice::from_ref(rows), progress, snapshot)
    }

    /// Writes consecutive runs of entries' rows in one transaction (as one `Rows`, without
    /// joining them first).
    pub fn write_parts(&mut self, parts: &[Rows], progress: &Progress, snapshot: Option<(u64, &[u8])>) -> Result<()> {
        self.backend.write(parts, progress, snapshot)
    }

    pub fn query(&mut self, sql: &str, params: &[Cell<'_>]) -> Result<Vec<Vec<Value>>> {
        self.backend.query(sql, params)
    }

    /// Streams a query's rows to `each` (see [`Backend::query_each`]).
    pub fn query_each(
        &mut self,
        sql: &str,
        params: &[Cell<'_>],
        each: &mut dyn FnMut(&[Value]) -> Result<()>,
    ) -> Result<()> {
        self.backend.query_each(sql, params, each)
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let Some((credentials, host)) = rest.split_once('@') else { return url.to_string() };
    match credentials.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// `rows` (in log order) ordered by `key`, ties in log order.
fn in_key_order<'a, T>(rows: impl Iterator<Item = &'a T>, key: impl Fn(&T) -> u64) -> Vec<&'a T> {
    let rows: Vec<&T> = rows.collect();
    let mut order: Vec<(u64, u32)> = rows.iter().map(|r| key(r)).zip(0u32..).collect();
    order.sort_unstable();
    order.into_iter().map(|(_, i)| rows[i as usize]).collect()
}

/// Hands each row of `table` in `parts` (consecutive runs of entries, in log order)
/// whose log index is above `after` to `row`: its key (`log_index, pos, ts`) and its
/// cells (the columns of `schema::TABLES` in order), what both backends write. One
/// row's cells at a time, on the stack; the writer hands the batches it joins into one
/// transaction as parts rather than copying them into one `Rows`.
///
/// The rows of `order_events` and `balance_movements` come in their primary key's
/// order (`schema::primary_key`), not in log order: one insert after another then goes
/// to the same or the next leaf of the B-tree, which is in the CPU's caches and where
/// the cursor already is, instead of a leaf anywhere (by order id, by account). That
/// took SQLite's B-tree descents from a sixth of the sink's CPU to almost nothing
/// (docs/BENCHMARKS.md). Rows come in log order, and log time never goes backwards, so ordering them by order id (by account and
/// asset), ties in log order, is their key's order; sorting positions (16 bytes each)
/// rather than the rows costs a few milliseconds per 100,000 rows.
pub(crate) fn each_row<'a>(
    parts: &'a [Rows],
    table: &str,
    after: i64,
    mut row: impl FnMut(&RowKey, &[Cell<'a>]) -> Result<()>,
) -> Result<()> {
    fn opt(v: Option<i64>) -> Cell<'static> {
        v.map_or(Cell::Null, Cell::Int)
    }
    fn flag(v: bool) -> Cell<'static> {
        Cell::Int(i64::from(v))
    }
    let new = |k: &RowKey| k.log_index > after;
    match table {
        "orders" => {
            for r in parts.iter().flat_map(|p| &p.orders).filter(|r| new(&r.key)) {
                row(
                    &r.key,
                    &[
                        Cell::Int(r.order_id),
                        Cell::Int(r.account),
                        Cell::Int(r.symbol),
                        Cell::Text(r.side),
                        Cell::Text(r.kind),
                        opt(r.px),
                        opt(r.trigger_px),
                        opt(r.budget),
                        Cell::Int(r.qty),
                        Cell::Text(r.tif),
                        flag(r.post_only),
                        opt(r.display_qty),
                        Cell::Text(r.stp),
                        Cell::Int(r.client),
                        Cell::Int(r.seq),
                    ],
                )?;
            }
        }
        "order_events" => {
            let new_rows = parts.iter().flat_map(|p| &p.order_events).filter(|r| new(&r.key));
            for r in in_key_order(new_rows, |r| r.order_id as u64) {
                row(
                    &r.key,
                    &[
                        Cell::Int(r.order_id),
                        Cell::Text(r.event),
                        opt(r.px),
                        opt(r.qty),
                        opt(r.qty_remaining),
                        r.reason.map_or(Cell::Null, Cell::Text),
                    ],
                )?;
            }
        }
        "executions" => {
            for r in parts.iter().flat_map(|p| &p.executions).filter(|r| new(&r.key)) {
                row(
                    &r.key,
                    &[
                        Cell::Int(r.symbol),
                        Cell::Int(r.px),
                        Cell::Int(r.qty),
                        Cell::Text(r.taker_side),
                        Cell::Int(r.maker_order),
                        Cell::Int(r.taker_order),
                        Cell::Int(r.maker_account),
                        Cell::Int(r.taker_account),
                        Cell::Int(r.fee_maker),
                        Cell::Int(r.fee_taker),
                        flag(r.maker_done),
                    ],
                )?;
            }
        }
        "balance_movements" => {
            // Accounts and assets are 32-bit ids (stored widened).
            let new_rows = parts.iter().flat_map(|p| &p.balances).filter(|r| new(&r.key));
            for r in in_key_order(new_rows, |r| ((r.account as u64) << 32) | (r.asset as u64 & 0xffff_ffff)) {
                row(
                    &r.key,
                    &[
                        Cell::Int(r.account),
                        Cell::Int(r.asset),
                        Cell::Int(r.delta_available),
                        Cell::Int(r.delta_reserved),
                        Cell::Int(r.available),
                        Cell::Int(r.reserved),
                        Cell::Text(r.cause),
                        opt(r.order_id),
                    ],
                )?;
            }
        }
        "account_events" => {
            for r in parts.iter().flat_map(|p| &p.accounts).filter(|r| new(&r.key)) {
                row(&r.key, &[Cell::Int(r.account), Cell::Text(r.event), opt(r.external_id)])?;
            }
        }
        "assets" => {
            for r in parts.iter().flat_map(|p| &p.assets).filter(|r| new(&r.key)) {
                row(&r.key, &[Cell::Int(r.asset), Cell::Text(&r.name), Cell::Int(r.decimals)])?;
            }
        }
        "symbols" => {
            for r in parts.iter().flat_map(|p| &p.symbols).filter(|r| new(&r.key)) {
                row(
                    &r.key,
                    &[
                        Cell::Int(r.symbol),
                        Cell::Text(&r.name),
                        Cell::Int(r.base),
                        Cell::Int(r.quote),
                        Cell::Int(r.tick),
                        Cell::Int(r.lot),
                        Cell::Int(r.px_min),
                        Cell::Int(r.px_max),
                        Cell::Int(r.fee_maker),
                        Cell::Int(r.fee_taker),
                        Cell::Text(r.policy),
                    ],
                )?;
            }
        }
        "dt_audit" => {
            for r in parts.iter().flat_map(|p| &p.audit).filter(|r| new(&r.key)) {
                row(
                    &r.key,
                    &[
                        Cell::Int(r.audit_seq),
                        r.username.as_deref().map_or(Cell::Null, Cell::Text),
                        Cell::Blob(&r.records),
                    ],
                )?;
            }
        }
        other => return Err(StoreError::Invalid(format!("no rows for table {other}"))),
    }
    Ok(())
}

/// The second writer's side of [`write_in_two`].
pub(crate) struct SecondWriter {
    locked: std::sync::mpsc::SyncSender<()>,
    first_empty: std::sync::mpsc::Receiver<bool>,
    /// This store's writers have moved the first part's progress before, and it never
    /// goes back to nothing: no need to ask.
    first_written: bool,
}

impl SecondWriter {
    /// Says that the second part's lock is held: the first writer may take its own.
    pub fn locked(&self) {
        let _ = self.locked.send(());
    }

    /// Whether the first part has no progress row, as the first writer read it under its
    /// lock (so no other writer is between its two commits). A second part with rows of
    /// its own beside an empty first is what a write that failed between the two
    /// commits of a new history leaves (a crash, say); the sink starts that history
    /// again, perhaps at another snapshot, and the second part must start again with it
    /// rather than keep rows that begin elsewhere.
    pub fn first_is_empty(&self) -> Result<bool> {
        if self.first_written {
            return Ok(false);
        }
        self.first_empty
            .recv()
            .map_err(|_| StoreError::Invalid("the first writer failed before its progress read".into()))
    }
}

/// Says (a warning in the log) that the second part starts again, and returns the
/// statements that empty it (its tables and its progress row), which the second writer
/// runs in its transaction when [`SecondWriter::first_is_empty`].
pub(crate) fn second_part_reset() -> String {
    tracing::warn!(
        "the history's second part has rows beside an empty first part (a write failed between their commits): \
         it starts again with the first"
    );
    let mut sql: String = crate::schema::SECOND_TABLES.iter().map(|table| format!("DELETE FROM {table}; ")).collect();
    sql.push_str(&format!("DELETE FROM {}", crate::schema::SECOND_PROGRESS));
    sql
}

/// The first writer's side of [`write_in_two`].
pub(crate) struct FirstWriter<'a> {
    first_empty: std::sync::mpsc::SyncSender<bool>,
    join_second: &'a mut dyn FnMut() -> Result<()>,
}

impl FirstWriter<'_> {
    /// Hands the second writer what the first read under its lock: whether its part has
    /// no progress row.
    pub fn read(&self, stored: Option<i64>) {
        let _ = self.first_empty.send(stored.is_none());
    }

    /// Waits for the second writer, which commits first.
    pub fn join_second(&mut self) -> Result<()> {
        (self.join_second)()
    }
}

/// The two writers of one batch (schema 7): `second` runs on a thread of its own and
/// says when it holds its lock; `first` then takes its own, hands over what it read,
/// and waits for the second writer (which commits first) before it commits. Both
/// backends keep this order, so two writers of one history take their locks in turn and
/// the second part is never behind the first. `first_written` is the store's record
/// that a write of its went through (and so the first part has a progress row); it is
/// set when this one does.
pub(crate) fn write_in_two<S, F>(first_written: &mut bool, second: S, first: F) -> Result<()>
where
    S: FnOnce(SecondWriter) -> Result<()> + Send,
    F: FnOnce(FirstWriter<'_>) -> Result<()>,
{
    let written = *first_written;
    std::thread::scope(|scope| {
        let (locked, is_locked) = std::sync::mpsc::sync_channel::<()>(1);
        let (first_empty, first_empty_read) = std::sync::mpsc::sync_channel::<bool>(1);
        let handle = std::thread::Builder::new()
            .name("history-writer2".into())
            .spawn_scoped(scope, move || {
                second(SecondWriter { locked, first_empty: first_empty_read, first_written: written })
            })
            .map_err(|e| StoreError::Invalid(format!("second writer thread: {e}")))?;
        let mut handle = Some(handle);
        let mut join_second = || match handle.take() {
            Some(handle) => {
                handle.join().unwrap_or_else(|_| Err(StoreError::Invalid("the second writer panicked".into())))
            }
            None => Ok(()),
        };
        if is_locked.recv().is_err() {
            return join_second(); // it failed before it had the lock
        }
        // On an error the sender drops, and a second writer waiting on it gives up.
        first(FirstWriter { first_empty, join_second: &mut join_second })?;
        join_second()
    })?;
    *first_written = true;
    Ok(())
}

/// The columns of a table (key first) and whether each is text.
pub(crate) fn table_columns(table: &str) -> Vec<(&'static str, bool)> {
    let (_, columns) = TABLES.iter().find(|(name, _)| *name == table).expect("a known table");
    let mut out = vec![("log_index", false), ("pos", false), ("ts", false)];
    for column in columns.split(',') {
        let mut words = column.split_whitespace();
        let name = words.next().expect("a column name");
        let text = words.next() == Some("TEXT");
        out.push((name, text));
    }
    out
}
