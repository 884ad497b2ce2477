//! PostgreSQL through the synchronous `postgres` client (it runs its own small runtime;
//! callers must not be on an async task: the sink's writer is a thread, the gateway's
//! queries go through `spawn_blocking`).
//!
//! A batch is two transactions on two connections, in parallel (see [`Postgres`]'s
//! `write`): each locks out other writers of its part and reads its progress, then one
//! `COPY table FROM STDIN (FORMAT binary)` per table of its part with the rows of
//! entries after it, then its progress row. COPY has no `ON CONFLICT`, and needs none:
//! no row at or below the progress read in the same transaction is sent, and every row
//! above it is new (rows are only ever written with the progress that covers them). A
//! duplicate key could only come from a bug, and would fail the batch rather than write
//! a row twice.

use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls};

use std::io::Write;

use super::{each_row, table_columns, Backend, Cell, Progress, Result, Saved, StoreError, Value};
use crate::rows::{RowKey, Rows};
use crate::schema::{create_statements, in_second, progress_upsert, Dialect, SCHEMA_VERSION, SECOND_PROGRESS, TABLES};

pub struct Postgres {
    client: Client,
    url: String,
    /// The second writer's connection, opened by the first write (readers never open it).
    second: Option<Client>,
    /// A write went through: the first part has a progress row (`store::write_in_two`).
    first_written: bool,
}

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
        let mut client = Client::connect(url, NoTls)?;
        for statement in create_statements(Dialect::Postgres) {
            client.batch_execute(&statement)?;
        }
        let mut postgres = Postgres { client, url: url.to_string(), second: None, first_written: false };
        let version = postgres.query("SELECT schema_version FROM history_progress WHERE id = 1", &[])?;
        if let Some(version) = version.first().and_then(|r| r[0].int()) {
            if version != SCHEMA_VERSION {
                return Err(StoreError::Invalid(format!(
                    "history schema version {version}, this build reads {SCHEMA_VERSION}"
                )));
            }
        }
        Ok(postgres)
    }
}

/// Takes a progress table's lock (writers of one part take turns; readers are not
/// blocked) and reads its applied index, the one this transaction moves on.
fn lock_progress(transaction: &mut postgres::Transaction<'_>, table: &str) -> Result<Option<i64>> {
    let stored = transaction.simple_query(&format!(
        "LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE; SELECT applied_index FROM {table} WHERE id = 1"
    ))?;
    Ok(stored.iter().find_map(|message| match message {
        postgres::SimpleQueryMessage::Row(row) => row.get(0).and_then(|v| v.parse::<i64>().ok()),
        _ => None,
    }))
}

/// Unless `stored` is at or past `progress` already, streams the rows of the `tables`
/// above it with one `COPY` each; false when there was nothing to write.
fn copy_rows(
    transaction: &mut postgres::Transaction<'_>,
    parts: &[Rows],
    progress: &Progress,
    stored: Option<i64>,
    tables: impl Fn(&str) -> bool,
) -> Result<bool> {
    if stored.is_some_and(|stored| stored >= progress.applied_index as i64) {
        return Ok(false); // written already
    }
    let after = stored.unwrap_or(-1);
    let mut buffer = Vec::with_capacity(COPY_CHUNK_BYTES + 4096);
    for (table, _) in TABLES {
        if !tables(table) || parts.iter().all(|p| p.table_len(table) == 0) {
            continue;
        }
        let names: Vec<&str> = table_columns(table).iter().map(|(name, _)| *name).collect();
        let sql = format!("COPY {table} ({}) FROM STDIN (FORMAT binary)", names.join(", "));
        let mut writer = transaction.copy_in(&sql)?;
        buffer.clear();
        buffer.extend_from_slice(COPY_HEADER);
        each_row(parts, table, after, |key, cells| {
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

/// Moves a progress table's row (with the snapshot, when given).
fn progress_write(
    transaction: &mut postgres::Transaction<'_>,
    table: &str,
    progress: &Progress,
    snapshot: Option<(u64, &[u8])>,
) -> Result<()> {
    let (applied, ts, begins) = (progress.applied_index as i64, progress.applied_ts as i64, progress.begins_at as i64);
    match snapshot {
        Some((index, bytes)) => transaction.execute(
            &numbered(&progress_upsert(table, true)),
            &[&SCHEMA_VERSION, &applied, &ts, &begins, &(index as i64), &bytes],
        )?,
        None => transaction
            .execute(&numbered(&progress_upsert(table, false)), &[&SCHEMA_VERSION, &applied, &ts, &begins])?,
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

    /// Two transactions on two connections in parallel (the server runs a process per
    /// connection): `balance_movements` with `history_progress_balances` on the second
    /// (`schema::SECOND_TABLES`), every other table with `history_progress` and the
    /// snapshot on the first. The second locks and commits first, so its progress is
    /// never behind the first's (its commit precedes the first's in the server's WAL,
    /// which a crash loses only from some point on); a restart resumes after the
    /// first's and the second skips what it has. Two writers take the locks in the same
    /// order, so they take turns without deadlock.
    fn write(&mut self, parts: &[Rows], progress: &Progress, snapshot: Option<(u64, &[u8])>) -> Result<()> {
        if self.second.is_none() {
            // Commits of these sessions return before their WAL is flushed: a server crash
            // may lose the last ones (never part of one), and with them their progress
            // row, so the sink writes those entries again from the log.
            self.client.batch_execute("SET synchronous_commit = off")?;
            let mut second = Client::connect(&self.url, NoTls)?;
            second.batch_execute("SET synchronous_commit = off")?;
            self.second = Some(second);
        }
        let (first, second) = (&mut self.client, self.second.as_mut().expect("connected above"));
        super::write_in_two(
            &mut self.first_written,
            move |side| {
                let mut transaction = second.transaction()?;
                let mut stored = lock_progress(&mut transaction, SECOND_PROGRESS)?;
                side.locked();
                if stored.is_some() && side.first_is_empty()? {
                    transaction.batch_execute(&super::second_part_reset())?;
                    stored = None;
                }
                if copy_rows(&mut transaction, parts, progress, stored, in_second)? {
                    progress_write(&mut transaction, SECOND_PROGRESS, progress, None)?;
                    transaction.commit()?;
                }
                Ok(())
            },
            |mut side| {
                let mut transaction = first.transaction()?;
                let stored = lock_progress(&mut transaction, "history_progress")?;
                side.read(stored);
                let write = copy_rows(&mut transaction, parts, progress, stored, |table| !in_second(table))?;
                side.join_second()?;
                if write {
                    progress_write(&mut transaction, "history_progress", progress, snapshot)?;
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
