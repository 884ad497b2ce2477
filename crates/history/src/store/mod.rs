//! The database behind the history: SQLite (a file, the default) or PostgreSQL, one
//! schema and one set of queries.
//!
//! A backend does three things: write a batch of rows together with the progress row
//! (and, now and then, the sink's engine snapshot) in one transaction; read the
//! progress back; run a query (`?` placeholders, integer and text columns). Everything
//! else — the rows, the SQL of the queries — is shared, so the two cannot drift.
//!
//! Writing: a batch is written by several writers in parallel (`schema::Part`: SQLite
//! two, a file each; PostgreSQL four connections), each in one transaction over its
//! part of the rows, with its own progress row. Each first takes its part's write lock
//! and reads its progress, then writes only its rows of entries above it, then the
//! progress. So a batch written twice (a restarted sink, two sinks on one store) writes
//! nothing the second time, and the primary keys, which a row written twice would
//! violate, turn a bug into a failed batch rather than a duplicate. The other parts
//! lock and commit before the first, so their progress is never behind the first's,
//! which is where a sink resumes (with the snapshot): what they have already, they skip
//! (unless the first part is empty: then they start again with it: `SecondWriter`).
//! SQLite keeps its second part in a second file and inserts 64 rows per cached
//! `INSERT OR FAIL … VALUES (…), …` (WAL mode, `synchronous=NORMAL`, 16 KiB pages);
//! PostgreSQL streams each table's rows with `COPY … FROM STDIN (FORMAT binary)`.

pub mod pg_tls;
mod postgres;
mod sqlite;

pub use sqlite::set_aside;

use crate::rows::{RowKey, Rows};
use crate::schema::{Dialect, Part, PARTS_PROGRESS, TABLES};

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
    /// A store written by a build of another schema version: refused rather than
    /// misread (`store` names the file or the database).
    #[error(
        "{store}: history schema version {found}, this build reads {} \
         (rebuild it into a new file or database: bourse history rebuild)",
        crate::schema::SCHEMA_VERSION
    )]
    SchemaVersion { store: String, found: i64 },
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// One database connection of either kind.
pub trait Backend: Send {
    fn dialect(&self) -> Dialect;
    /// The progress row, if any.
    fn saved(&mut self) -> Result<Option<Saved>>;
    /// Writes the rows of `batches` (consecutive runs of entries) and the progress (and the
    /// snapshot, when given) in one transaction.
    fn write(&mut self, batches: &[Rows], progress: &Progress, snapshot: Option<(u64, &[u8])>) -> Result<()>;
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
    /// SQLite file given as `sqlite:PATH` or a plain path. A PostgreSQL URL on another
    /// machine needs TLS with the server's certificate verified:
    /// `?sslmode=verify-full&sslrootcert=CA.pem` (optionally `&sslcert=…&sslkey=…`);
    /// plaintext only to a loopback host or a Unix socket (see [`pg_tls`]).
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
    pub fn write_batches(
        &mut self,
        batches: &[Rows],
        progress: &Progress,
        snapshot: Option<(u64, &[u8])>,
    ) -> Result<()> {
        self.backend.write(batches, progress, snapshot)
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

/// Hands each row of `table` in `batches` (consecutive runs of entries, in log order)
/// that is `part`'s and whose log index is above `after` to `row`: its key
/// (`log_index, pos, ts`) and its cells (the columns of `schema::TABLES` in order),
/// what both backends write. One row's cells at a time, on the stack; the writer hands
/// the batches it joins into one transaction as they are rather than copying them into
/// one `Rows`.
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
    batches: &'a [Rows],
    table: &str,
    part: Part,
    after: i64,
    mut row: impl FnMut(&RowKey, &[Cell<'a>]) -> Result<()>,
) -> Result<()> {
    fn opt(v: Option<i64>) -> Cell<'static> {
        v.map_or(Cell::Null, Cell::Int)
    }
    fn flag(v: bool) -> Cell<'static> {
        Cell::Int(i64::from(v))
    }
    if !part.has(table) {
        return Ok(());
    }
    let new = |k: &RowKey| k.log_index > after;
    match table {
        "orders" => {
            for r in batches.iter().flat_map(|p| &p.orders).filter(|r| new(&r.key)) {
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
            let new_rows =
                batches.iter().flat_map(|p| &p.order_events).filter(|r| new(&r.key) && part.owns(table, r.order_id));
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
            for r in batches.iter().flat_map(|p| &p.executions).filter(|r| new(&r.key)) {
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
            let new_rows =
                batches.iter().flat_map(|p| &p.balances).filter(|r| new(&r.key) && part.owns(table, r.account));
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
            for r in batches.iter().flat_map(|p| &p.accounts).filter(|r| new(&r.key)) {
                row(&r.key, &[Cell::Int(r.account), Cell::Text(r.event), opt(r.external_id)])?;
            }
        }
        "assets" => {
            for r in batches.iter().flat_map(|p| &p.assets).filter(|r| new(&r.key)) {
                row(&r.key, &[Cell::Int(r.asset), Cell::Text(&r.name), Cell::Int(r.decimals)])?;
            }
        }
        "symbols" => {
            for r in batches.iter().flat_map(|p| &p.symbols).filter(|r| new(&r.key)) {
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
                        opt(r.margin.as_ref().map(|m| m.multiplier)),
                        opt(r.margin.as_ref().map(|m| m.initial_bp)),
                        opt(r.margin.as_ref().map(|m| m.maintenance_bp)),
                        opt(r.margin.as_ref().map(|m| m.position_limit)),
                        r.margin.as_ref().map_or(Cell::Null, |m| Cell::Text(m.mark)),
                        opt(r.margin.as_ref().map(|m| m.insurance)),
                    ],
                )?;
            }
        }
        "dt_audit" => {
            for r in batches.iter().flat_map(|p| &p.audit).filter(|r| new(&r.key)) {
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
        "margin_events" => {
            for r in batches.iter().flat_map(|p| &p.margin).filter(|r| new(&r.key)) {
                row(
                    &r.key,
                    &[
                        Cell::Text(r.event),
                        opt(r.account),
                        opt(r.symbol),
                        opt(r.asset),
                        opt(r.px),
                        opt(r.qty),
                        opt(r.cost),
                        opt(r.realized),
                        opt(r.amount),
                        opt(r.bad_debt),
                        opt(r.counterparty),
                    ],
                )?;
            }
        }
        "trading_days" => {
            for r in batches.iter().flat_map(|p| &p.days).filter(|r| new(&r.key)) {
                row(&r.key, &[Cell::Int(r.day), Cell::Int(r.expired)])?;
            }
        }
        other => return Err(StoreError::Invalid(format!("no rows for table {other}"))),
    }
    Ok(())
}

/// The side of [`write_in_parts`] of a writer of a part after the first.
pub(crate) struct SecondWriter {
    part: usize,
    locked: std::sync::mpsc::SyncSender<()>,
    first_empty: std::sync::mpsc::Receiver<bool>,
    /// This store's writers have moved the first part's progress before, and it never
    /// goes back to nothing: no need to ask.
    first_written: bool,
}

impl SecondWriter {
    /// This writer's part (1 for the first after the first part).
    pub fn part(&self, dialect: Dialect) -> Part {
        Part { dialect, index: self.part }
    }

    /// Says that this part's lock is held: the next part's writer may take its own.
    pub fn locked(&self) {
        let _ = self.locked.send(());
    }

    /// Whether the first part has no progress row, as the first writer read it under its
    /// lock (so no other writer is between its commits). A part with rows of its own
    /// beside an empty first is what a write that failed between the commits of a new
    /// history leaves (a crash, say); the sink starts that history again, perhaps at
    /// another snapshot, and the part must start again with it rather than keep rows
    /// that begin elsewhere.
    pub fn first_is_empty(&self) -> Result<bool> {
        if self.first_written {
            return Ok(false);
        }
        self.first_empty.recv().map_err(|_| StoreError::Invalid(FIRST_GONE.into()))
    }
}

/// A writer's error when the first writer stopped before its read: the error that
/// stopped it is the batch's.
const FIRST_GONE: &str = "the first writer stopped before its progress read";

/// Says (a warning in the log) that `part` starts again, and returns the statements
/// that empty it (its rows and its progress row), which its writer runs in its
/// transaction when [`SecondWriter::first_is_empty`].
pub(crate) fn part_reset(part: Part) -> String {
    tracing::warn!(
        part = part.index,
        "a part of the history has rows beside an empty first part (a write failed between their commits): \
         it starts again with the first"
    );
    let mut sql: String = TABLES
        .iter()
        .filter(|(table, _)| part.has(table))
        .map(|(table, _)| format!("DELETE FROM {table} WHERE {}; ", part.condition(table)))
        .collect();
    sql.push_str(&format!("DELETE FROM {PARTS_PROGRESS} WHERE id = {}", part.index));
    sql
}

/// The first writer's side of [`write_in_parts`].
pub(crate) struct FirstWriter<'a> {
    first_empty: Vec<std::sync::mpsc::SyncSender<bool>>,
    join_seconds: &'a mut dyn FnMut() -> Result<()>,
}

impl FirstWriter<'_> {
    /// Hands the other writers what the first read under its lock: whether its part has
    /// no progress row.
    pub fn read(&self, stored: Option<i64>) {
        for sender in &self.first_empty {
            let _ = sender.send(stored.is_none());
        }
    }

    /// Waits for the other writers, which commit first.
    pub fn join_seconds(&mut self) -> Result<()> {
        (self.join_seconds)()
    }
}

/// The writers of one batch (`schema::writers`): the parts after the first each on a
/// thread of its own with a connection of `seconds`, running `second`; then `first`
/// on this thread. The locks are taken in turn, part 1, 2, … and the first's last:
/// each writer says when it holds its own, and only then does the next take its own.
/// The first hands over what it read and waits for all the others, which commit
/// first, before it commits. Both backends keep this order, so two writers of one
/// history take their locks in the same order without deadlock, and no part is ever
/// behind the first. `first_written` is the store's record that a write of its went
/// through (and so the first part has a progress row); it is set when this one does.
pub(crate) fn write_in_parts<C, S, F>(first_written: &mut bool, seconds: &mut [C], second: S, first: F) -> Result<()>
where
    C: Send,
    S: Fn(&mut C, SecondWriter) -> Result<()> + Sync,
    F: FnOnce(FirstWriter<'_>) -> Result<()>,
{
    use std::sync::mpsc::{sync_channel, Receiver};
    let written = *first_written;
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(seconds.len());
        let mut first_empty = Vec::with_capacity(seconds.len());
        let mut turn: Option<Receiver<()>> = None;
        let second = &second;
        for (i, connection) in seconds.iter_mut().enumerate() {
            let (locked, next_turn) = sync_channel::<()>(1);
            let (empty, empty_read) = sync_channel::<bool>(1);
            first_empty.push(empty);
            let previous = turn.replace(next_turn);
            let handle = std::thread::Builder::new()
                .name(format!("history-writer{}", i + 2))
                .spawn_scoped(scope, move || {
                    // An earlier part failed before its lock: its error is the batch's.
                    if previous.is_some_and(|previous| previous.recv().is_err()) {
                        return Ok(());
                    }
                    let side = SecondWriter { part: i + 1, locked, first_empty: empty_read, first_written: written };
                    second(connection, side)
                })
                .map_err(|e| StoreError::Invalid(format!("writer thread: {e}")))?;
            handles.push(Some(handle));
        }
        // The first error in part order, but one that only says the first writer
        // stopped when there is no other.
        let mut join_seconds = || {
            let mut result = Ok(());
            for handle in handles.iter_mut().filter_map(Option::take) {
                let joined = handle.join().unwrap_or_else(|_| Err(StoreError::Invalid("a writer panicked".into())));
                let gone = |r: &Result<()>| matches!(r, Err(StoreError::Invalid(e)) if e == FIRST_GONE);
                if result.is_ok() || (gone(&result) && joined.is_err()) {
                    result = joined;
                }
            }
            result
        };
        if turn.is_some_and(|last| last.recv().is_err()) {
            // One failed before it had its lock (and so did those after it); those
            // before it may be waiting for the first's read, which will not come.
            drop(first_empty);
            join_seconds()?;
            return Err(StoreError::Invalid("a writer stopped before taking its lock".into()));
        }
        // On an error the senders drop, and a writer waiting on them gives up.
        first(FirstWriter { first_empty, join_seconds: &mut join_seconds })?;
        join_seconds()
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

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::mpsc;
    use std::sync::Mutex;
    use std::time::Duration;

    /// Runs `write_in_parts` with three other parts (their "connections" are their
    /// numbers) on a thread, so a hang fails the test instead of stalling it.
    fn run(
        second: impl Fn(&mut usize, SecondWriter) -> Result<()> + Send + Sync + 'static,
        first: impl FnOnce(FirstWriter<'_>) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        let (done, result) = mpsc::channel();
        std::thread::spawn(move || {
            let mut written = false;
            let _ = done.send(write_in_parts(&mut written, &mut [1, 2, 3], second, first));
        });
        result.recv_timeout(Duration::from_secs(20)).expect("write_in_parts returns")
    }

    #[test]
    fn the_parts_lock_in_turn_and_commit_before_the_first() {
        let events = std::sync::Arc::new(Mutex::new(Vec::new()));
        let (in_second, in_first) = (events.clone(), events.clone());
        run(
            move |part, side| {
                in_second.lock().unwrap().push(format!("lock {part}"));
                side.locked();
                assert!(!side.first_is_empty()?, "the first part has a progress row");
                std::thread::sleep(Duration::from_millis(10 * (4 - *part as u64)));
                in_second.lock().unwrap().push(format!("commit {part}"));
                Ok(())
            },
            move |mut side| {
                in_first.lock().unwrap().push("lock 0".to_string());
                side.read(Some(7));
                side.join_seconds()?;
                in_first.lock().unwrap().push("commit 0".to_string());
                Ok(())
            },
        )
        .unwrap();
        let events = events.lock().unwrap().clone();
        let position = |event: &str| events.iter().position(|e| e == event).unwrap();
        assert!(position("lock 1") < position("lock 2") && position("lock 2") < position("lock 3"), "{events:?}");
        assert!(position("lock 3") < position("lock 0"), "{events:?}");
        assert_eq!(events.last().map(String::as_str), Some("commit 0"), "{events:?}");
    }

    /// Part 2 fails before it takes its lock, while part 1, which holds its own, waits
    /// for the first's read (a new history's first write): the write fails with part 2's
    /// error, the first never runs, and nobody waits for ever.
    #[test]
    fn a_part_failing_before_its_lock_fails_the_write_without_a_hang() {
        let error = run(
            |part, side| {
                if *part == 2 {
                    return Err(StoreError::Invalid("part 2 cannot connect".into()));
                }
                side.locked();
                side.first_is_empty()?;
                Ok(())
            },
            |_| panic!("the first part runs after every other holds its lock"),
        )
        .unwrap_err();
        assert_eq!(error.to_string(), "part 2 cannot connect");
    }
}
