//! PostgreSQL through the synchronous `postgres` client (it runs its own small runtime;
//! callers must not be on an async task: the sink's writer is a thread, the gateway's
//! queries go through `spawn_blocking`).
//!
//! A batch is four transactions on four connections, in parallel (see [`Postgres`]'s
//! `write`, `schema::Part`): each locks out other writers of its part and reads its
//! progress, then one `COPY table FROM STDIN (FORMAT binary)` per table of its part
//! with its rows of entries after it, then its progress row. COPY has no `ON
//! CONFLICT`, and needs none: no row at or below the progress read in the same
//! transaction is sent, and every row above it is new (rows are only ever written with
//! the progress that covers them). A duplicate key could only come from a bug, and
//! would fail the batch rather than write a row twice.
//!
//! Every connection, the first and the writers', is opened as the URL's TLS
//! parameters say (`pg_tls`: `sslmode=verify-full` with `sslrootcert`, or plaintext to
//! a loopback host only).

use postgres::types::{ToSql, Type};
use postgres::Client;

use std::io::Write;

use super::pg_tls::PgConnect;
use super::{each_row, table_columns, Backend, Cell, Progress, Result, Saved, StoreError, Value};
use crate::rows::{RowKey, Rows};
use crate::schema::{create_statements, progress_upsert, writers, Dialect, Part, SCHEMA_VERSION, TABLES};

pub struct Postgres {
    client: Client,
    /// How to open the writers' connections: the URL, parsed and checked once.
    connect: PgConnect,
    /// The connections of the writers of the parts after the first, opened by the first
    /// write (readers never open them).
    seconds: Vec<Client>,
    /// A write went through: the first part has a progress row (`store::write_in_parts`).
    first_written: bool,
}

/// The first key of the advisory locks a history's writers take, one per part (the
/// second key): ASCII "hist".
const LOCK_KEY: i32 = 0x6869_7374;

/// What starts a binary COPY stream: the signature, no flags, no header extension.
const COPY_HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// The COPY stream is handed to the connection in pieces of about this size, so the
/// server parses one while the next is encoded.
const COPY_CHUNK_BYTES: usize = 256 << 10;

/// One row in COPY's binary format: the number of fields, then each as its length and
/// its bytes (-1 for NULL): `bigint` as 8 bytes big-endian, `text` as UTF-8.
fn copy_row(buffer: &mut Vec<u8>, key: &RowKey, cells: &[Cell<'_>]) {
    buffer.extend_from_slice(&((3 + cells.len()) as i16).to_be_bytes());
    for value in [key.log_index, key.pos, key.ts] {
        buffer.extend_from_slice(&8i32.to_be_bytes());
        buffer.extend_from_slice(&value.to_be_bytes());
    }
    for cell in cells {
        match *cell {
            Cell::Int(v) => {
                buffer.extend_from_slice(&8i32.to_be_bytes());
                buffer.extend_from_slice(&v.to_be_bytes());
            }
            Cell::Text(v) => {
                buffer.extend_from_slice(&(v.len() as i32).to_be_bytes());
                buffer.extend_from_slice(v.as_bytes());
            }
            Cell::Blob(v) => {
                buffer.extend_from_slice(&(v.len() as i32).to_be_bytes());
                buffer.extend_from_slice(v);
            }
            Cell::Null => buffer.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
}

impl Postgres {
    pub fn open(url: &str) -> Result<Postgres> {
        let connect = PgConnect::parse(url)?;
        let mut client = connect.connect()?;
        for statement in create_statements(Dialect::Postgres) {
            client.batch_execute(&statement)?;
        }
        let mut postgres = Postgres { client, connect, seconds: Vec::new(), first_written: false };
        let version = postgres.query("SELECT schema_version FROM history_progress WHERE id = 1", &[])?;
        if let Some(version) = version.first().and_then(|r| r[0].int()) {
            if version != SCHEMA_VERSION {
                return Err(StoreError::SchemaVersion { store: super::redact(url), found: version });
            }
        }
        Ok(postgres)
    }
}

/// Takes a part's lock (writers of one part take turns; an advisory lock of the
/// transaction, so readers are not blocked) and reads its applied index, the one this
/// transaction moves on (read after the lock: a statement of its own, which sees what
/// was committed before it).
fn lock_progress(transaction: &mut postgres::Transaction<'_>, part: Part) -> Result<Option<i64>> {
    let (table, id) = part.progress();
    let stored = transaction.simple_query(&format!(
        "SELECT pg_advisory_xact_lock({LOCK_KEY}, {}); SELECT applied_index FROM {table} WHERE id = {id}",
        part.index
    ))?;
    Ok(stored.iter().find_map(|message| match message {
        postgres::SimpleQueryMessage::Row(row) => row.get(0).and_then(|v| v.parse::<i64>().ok()),
        _ => None,
    }))
}

/// Unless `stored` is at or past `progress` already, streams `part`'s rows above it
/// with one `COPY` per table; false when there was nothing to write.
fn copy_rows(
    transaction: &mut postgres::Transaction<'_>,
    batches: &[Rows],
    progress: &Progress,
    stored: Option<i64>,
    part: Part,
) -> Result<bool> {
    if stored.is_some_and(|stored| stored >= progress.applied_index as i64) {
        return Ok(false); // written already
    }
    let after = stored.unwrap_or(-1);
    let mut buffer = Vec::with_capacity(COPY_CHUNK_BYTES + 4096);
    for (table, _) in TABLES {
        if !part.has(table) || batches.iter().all(|b| b.table_len(table) == 0) {
            continue;
        }
        let names: Vec<&str> = table_columns(table).iter().map(|(name, _)| *name).collect();
        let sql = format!("COPY {table} ({}) FROM STDIN (FORMAT binary)", names.join(", "));
        let mut writer = transaction.copy_in(&sql)?;
        buffer.clear();
        buffer.extend_from_slice(COPY_HEADER);
        each_row(batches, table, part, after, |key, cells| {
            copy_row(&mut buffer, key, cells);
            if buffer.len() >= COPY_CHUNK_BYTES {
                writer.write_all(&buffer).map_err(|e| StoreError::Invalid(format!("COPY {table}: {e}")))?;
                buffer.clear();
            }
            Ok(())
        })?;
        buffer.extend_from_slice(&(-1i16).to_be_bytes());
        writer.write_all(&buffer).map_err(|e| StoreError::Invalid(format!("COPY {table}: {e}")))?;
        writer.finish()?;
    }
    Ok(true)
}

/// Moves a part's progress row (with the snapshot, when given).
fn progress_write(
    transaction: &mut postgres::Transaction<'_>,
    part: Part,
    progress: &Progress,
    snapshot: Option<(u64, &[u8])>,
) -> Result<()> {
    let (applied, ts, begins) = (progress.applied_index as i64, progress.applied_ts as i64, progress.begins_at as i64);
    match snapshot {
        Some((index, bytes)) => transaction.execute(
            &numbered(&progress_upsert(part, true)),
            &[&SCHEMA_VERSION, &applied, &ts, &begins, &(index as i64), &bytes],
        )?,
        None => {
            transaction.execute(&numbered(&progress_upsert(part, false)), &[&SCHEMA_VERSION, &applied, &ts, &begins])?
        }
    };
    Ok(())
}

/// `?` placeholders become `$1, $2, …` (the shared queries have no `?` in literals).
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(c);
        }
    }
    out
}

fn param<'a>(cell: &Cell<'a>) -> Box<dyn ToSql + Sync + 'a> {
    match *cell {
        Cell::Int(v) => Box::new(v),
        Cell::Text(v) => Box::new(v),
        Cell::Blob(v) => Box::new(v),
        Cell::Null => Box::new(Option::<i64>::None),
    }
}

impl Backend for Postgres {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn saved(&mut self) -> Result<Option<Saved>> {
        let rows = self.client.query(
            "SELECT applied_index, applied_ts, begins_at, snapshot_index, snapshot FROM history_progress WHERE id = 1",
            &[],
        )?;
        let Some(row) = rows.first() else { return Ok(None) };
        let progress = Progress {
            applied_index: row.get::<_, i64>(0) as u64,
            applied_ts: row.get::<_, i64>(1) as u64,
            begins_at: row.get::<_, i64>(2) as u64,
        };
        let snapshot = match (row.get::<_, Option<i64>>(3), row.get::<_, Option<Vec<u8>>>(4)) {
            (Some(index), Some(bytes)) => Some((index as u64, bytes)),
            _ => None,
        };
        Ok(Some(Saved { progress, snapshot }))
    }

    /// A transaction per part (`schema::Part`) on a connection of its own, in parallel
    /// (the server runs a process per connection): the small tables with
    /// `history_progress` and the snapshot on the first, a share of `order_events` and
    /// `balance_movements` with its row of `history_progress_parts` on each of the
    /// other three. The others lock in turn and commit before the first, so their
    /// progress is never behind the first's (their commits precede the first's in the
    /// server's WAL, which a crash loses only from some point on); a restart resumes
    /// after the first's and each other part skips what it has
    /// (`store::write_in_parts`).
    fn write(&mut self, batches: &[Rows], progress: &Progress, snapshot: Option<(u64, &[u8])>) -> Result<()> {
        if self.seconds.is_empty() {
            // Commits of these sessions return before their WAL is flushed: a server crash
            // may lose the last ones (never part of one), and with them their progress
            // row, so the sink writes those entries again from the log.
            self.client.batch_execute("SET synchronous_commit = off")?;
            let mut seconds = Vec::new();
            for _ in 1..writers(Dialect::Postgres) {
                let mut second = self.connect.connect()?;
                second.batch_execute("SET synchronous_commit = off")?;
                seconds.push(second);
            }
            self.seconds = seconds;
        }
        let first = &mut self.client;
        super::write_in_parts(
            &mut self.first_written,
            &mut self.seconds,
            |connection, side| {
                let part = side.part(Dialect::Postgres);
                let mut transaction = connection.transaction()?;
                let mut stored = lock_progress(&mut transaction, part)?;
                side.locked();
                if stored.is_some() && side.first_is_empty()? {
                    transaction.batch_execute(&super::part_reset(part))?;
                    stored = None;
                }
                if copy_rows(&mut transaction, batches, progress, stored, part)? {
                    progress_write(&mut transaction, part, progress, None)?;
                    transaction.commit()?;
                }
                Ok(())
            },
            |mut side| {
                let part = Part { dialect: Dialect::Postgres, index: 0 };
                let mut transaction = first.transaction()?;
                let stored = lock_progress(&mut transaction, part)?;
                side.read(stored);
                let write = copy_rows(&mut transaction, batches, progress, stored, part)?;
                side.join_seconds()?;
                if write {
                    progress_write(&mut transaction, part, progress, snapshot)?;
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

    /// Reads the rows through a portal as they arrive (`query_raw`), not all at once.
    fn query_each(
        &mut self,
        sql: &str,
        params: &[Cell<'_>],
        each: &mut dyn FnMut(&[Value]) -> Result<()>,
    ) -> Result<()> {
        use ::postgres::fallible_iterator::FallibleIterator;
        let boxed: Vec<Box<dyn ToSql + Sync + '_>> = params.iter().map(param).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| b.as_ref()).collect();
        let statement = self.client.prepare(&numbered(sql))?;
        let mut rows = self.client.query_raw(&statement, refs)?;
        let mut values = Vec::new();
        while let Some(row) = rows.next()? {
            values.clear();
            for (i, column) in row.columns().iter().enumerate() {
                let value = match *column.type_() {
                    Type::INT8 => row.get::<_, Option<i64>>(i).map_or(Value::Null, Value::Int),
                    Type::INT4 => row.get::<_, Option<i32>>(i).map_or(Value::Null, |v| Value::Int(i64::from(v))),
                    Type::TEXT | Type::VARCHAR => row.get::<_, Option<String>>(i).map_or(Value::Null, Value::Text),
                    Type::BYTEA => row.get::<_, Option<Vec<u8>>>(i).map_or(Value::Null, Value::Blob),
                    ref other => return Err(StoreError::Invalid(format!("a query returned a column of type {other}"))),
                };
                values.push(value);
            }
            each(&values)?;
        }
        Ok(())
    }
}
