//! PostgreSQL through the synchronous `postgres` client (it runs its own small runtime;
//! callers must not be on an async task: the sink's writer is a thread, the gateway's
//! queries go through `spawn_blocking`).
//!
//! A batch is one transaction with one `INSERT … SELECT * FROM unnest($1::bigint[],
//! $2::text[], …) ON CONFLICT DO NOTHING` per table: one round trip and one plan per
//! table whatever the number of rows, which is what makes the sink keep up.

use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls};

use super::{table_cells, table_columns, Backend, Cell, Progress, Result, Saved, StoreError, Value};
use crate::rows::Rows;
use crate::schema::{create_statements, Dialect, SCHEMA_VERSION};

pub struct Postgres {
    client: Client,
}

impl Postgres {
    pub fn open(url: &str) -> Result<Postgres> {
        let mut client = Client::connect(url, NoTls)?;
        for statement in create_statements(Dialect::Postgres) {
            client.batch_execute(&statement)?;
        }
        let mut postgres = Postgres { client };
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
        Cell::Null => Box::new(Option::<i64>::None),
    }
}

/// One column of a table's batch, as the array `unnest` takes.
enum Column<'a> {
    Int(Vec<Option<i64>>),
    Text(Vec<Option<&'a str>>),
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

    fn write(&mut self, rows: &Rows, progress: &Progress, snapshot: Option<(u64, &[u8])>) -> Result<()> {
        let mut transaction = self.client.transaction()?;
        for (table, count, cells) in table_cells(rows) {
            if count == 0 {
                continue;
            }
            let columns = table_columns(table);
            let mut arrays: Vec<Column<'_>> = columns
                .iter()
                .map(|(_, text)| {
                    if *text {
                        Column::Text(Vec::with_capacity(count))
                    } else {
                        Column::Int(Vec::with_capacity(count))
                    }
                })
                .collect();
            for row in cells.chunks_exact(columns.len()) {
                for (cell, array) in row.iter().zip(arrays.iter_mut()) {
                    match (array, *cell) {
                        (Column::Int(a), Cell::Int(v)) => a.push(Some(v)),
                        (Column::Int(a), Cell::Null) => a.push(None),
                        (Column::Text(a), Cell::Text(v)) => a.push(Some(v)),
                        (Column::Text(a), Cell::Null) => a.push(None),
                        _ => return Err(StoreError::Invalid(format!("{table}: a cell of the wrong type"))),
                    }
                }
            }
            let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
            let casts: Vec<String> = columns
                .iter()
                .enumerate()
                .map(|(i, (_, text))| format!("${}::{}[]", i + 1, if *text { "text" } else { "bigint" }))
                .collect();
            let sql = format!(
                "INSERT INTO {table} ({}) SELECT * FROM unnest({}) ON CONFLICT DO NOTHING",
                names.join(", "),
                casts.join(", ")
            );
            let statement = transaction.prepare_typed(
                &sql,
                &columns
                    .iter()
                    .map(|(_, text)| if *text { Type::TEXT_ARRAY } else { Type::INT8_ARRAY })
                    .collect::<Vec<_>>(),
            )?;
            let params: Vec<&(dyn ToSql + Sync)> = arrays
                .iter()
                .map(|array| match array {
                    Column::Int(a) => a as &(dyn ToSql + Sync),
                    Column::Text(a) => a as &(dyn ToSql + Sync),
                })
                .collect();
            transaction.execute(&statement, &params)?;
        }
        let (applied, ts, begins) =
            (progress.applied_index as i64, progress.applied_ts as i64, progress.begins_at as i64);
        match snapshot {
            Some((index, bytes)) => transaction.execute(
                "INSERT INTO history_progress (id, schema_version, applied_index, applied_ts, begins_at, snapshot_index, snapshot) \
                 VALUES (1, $1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO UPDATE SET applied_index = excluded.applied_index, \
                 applied_ts = excluded.applied_ts, begins_at = excluded.begins_at, \
                 snapshot_index = excluded.snapshot_index, snapshot = excluded.snapshot",
                &[&SCHEMA_VERSION, &applied, &ts, &begins, &(index as i64), &bytes],
            )?,
            None => transaction.execute(
                "INSERT INTO history_progress (id, schema_version, applied_index, applied_ts, begins_at) \
                 VALUES (1, $1, $2, $3, $4) ON CONFLICT (id) DO UPDATE SET applied_index = excluded.applied_index, \
                 applied_ts = excluded.applied_ts, begins_at = excluded.begins_at",
                &[&SCHEMA_VERSION, &applied, &ts, &begins],
            )?,
        };
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
                    ref other => return Err(StoreError::Invalid(format!("a query returned a column of type {other}"))),
                };
                values.push(value);
            }
            each(&values)?;
        }
        Ok(())
    }
}
