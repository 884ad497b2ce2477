//! The one schema of both backends.
//!
//! Every row table starts with the row key `(log_index, pos)` (see `rows.rs`) and the
//! log timestamp `ts` (nanoseconds). Its primary key is the path its queries read it by
//! ([`primary_key`]), ending in the row key: `orders` by order id, `order_events` by
//! order, `balance_movements` by account and asset, the rest in log order; the few
//! secondary indexes serve the other queries in `query.rs`. Each B-tree is pages the
//! sink writes in every batch, and they are most of its work, so none is kept that no
//! query reads. The only differences between the dialects are the blob type and
//! SQLite's `WITHOUT ROWID` (a table stored in its primary key's order; PostgreSQL
//! keeps the key in an index beside the table).
//!
//! `history_progress` has one row: the last log index applied, written in the same
//! transaction as the rows of the entries up to it, so a restart resumes exactly after
//! it; `begins_at` is the first index whose rows are here (0 or 1: the whole log);
//! `snapshot`/`snapshot_index` is the sink's engine at some index at or below the
//! progress, to restart without replaying the whole log.
//!
//! Day-trading audit records (`dt_audit`) are one row per command, keyed by its first
//! record, with that record's position in the ledger's audit sequence (`audit_seq`;
//! the others follow it, and `DUMPLOG` bounds its output by them), the user the records
//! name (null when several or none) and the records encoded (`audit::audit_entry`).
//! Rows of `dt_audit` in key order are the audit log in log order.

/// Which SQL dialect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// Version of this schema, kept in `history_progress`; a database of another version is
/// refused rather than misread.
/// Version 2: tables keyed by their access paths, `account_events.external_id`.
/// Version 3: `dt_audit`, the day-trading audit records.
/// Version 4: `dt_audit` has one row per log entry, its records encoded in `records`.
/// Version 5: a move that rests at once at its new price is one `order_events` row,
/// `moved` with the displayed quantity in `qty`, instead of `moved` and `rested`.
/// Version 6: `dt_audit.records` says the userid, stamp and transactionNum only where
/// the row or the record before does not, and command names, actions and errors as a
/// byte each (`audit::audit_entry`).
/// Version 7: `balance_movements` is written by a second writer with its own progress
/// row (`history_progress_balances`); SQLite keeps them in a second file.
pub const SCHEMA_VERSION: i64 = 7;

/// The row tables and their columns after the key, in insert order.
pub const TABLES: &[(&str, &str)] = &[
    (
        "orders",
        "order_id BIGINT NOT NULL, account BIGINT NOT NULL, symbol BIGINT NOT NULL, side TEXT NOT NULL, \
         kind TEXT NOT NULL, px BIGINT, trigger_px BIGINT, budget BIGINT, qty BIGINT NOT NULL, tif TEXT NOT NULL, \
         post_only BIGINT NOT NULL, display_qty BIGINT, stp TEXT NOT NULL, client BIGINT NOT NULL, seq BIGINT NOT NULL",
    ),
    (
        "order_events",
        "order_id BIGINT NOT NULL, event TEXT NOT NULL, px BIGINT, qty BIGINT, qty_remaining BIGINT, reason TEXT",
    ),
    (
        "executions",
        "symbol BIGINT NOT NULL, px BIGINT NOT NULL, qty BIGINT NOT NULL, taker_side TEXT NOT NULL, \
         maker_order BIGINT NOT NULL, taker_order BIGINT NOT NULL, maker_account BIGINT NOT NULL, \
         taker_account BIGINT NOT NULL, fee_maker BIGINT NOT NULL, fee_taker BIGINT NOT NULL, maker_done BIGINT NOT NULL",
    ),
    (
        "balance_movements",
        "account BIGINT NOT NULL, asset BIGINT NOT NULL, delta_available BIGINT NOT NULL, \
         delta_reserved BIGINT NOT NULL, available BIGINT NOT NULL, reserved BIGINT NOT NULL, cause TEXT NOT NULL, \
         order_id BIGINT",
    ),
    ("account_events", "account BIGINT NOT NULL, event TEXT NOT NULL, external_id BIGINT"),
    ("assets", "asset BIGINT NOT NULL, name TEXT NOT NULL, decimals BIGINT NOT NULL"),
    (
        "symbols",
        "symbol BIGINT NOT NULL, name TEXT NOT NULL, base BIGINT NOT NULL, quote BIGINT NOT NULL, tick BIGINT NOT NULL, \
         lot BIGINT NOT NULL, px_min BIGINT NOT NULL, px_max BIGINT NOT NULL, fee_maker BIGINT NOT NULL, \
         fee_taker BIGINT NOT NULL, policy TEXT NOT NULL",
    ),
    (
        "dt_audit",
        "audit_seq BIGINT NOT NULL, username TEXT, records BLOB NOT NULL",
    ),
];

/// The part of the history a second writer writes, in parallel with the first (every
/// other table), in its own transaction with its own progress row ([`SECOND_PROGRESS`]):
/// one writer was the sink's bottleneck, and `balance_movements` is about half of the
/// writing of the ec2020 mix. SQLite keeps this part in a second file; PostgreSQL in the
/// same database, written over a second connection. The second writer locks and
/// commits first, so its progress is never behind the first's (`store/mod.rs`).
pub const SECOND_TABLES: &[&str] = &["balance_movements"];

/// The progress of the second part: `history_progress`'s columns, one row, the
/// snapshot columns unused.
pub const SECOND_PROGRESS: &str = "history_progress_balances";

/// Whether a table (or a progress table) is the second part's.
pub fn in_second(table: &str) -> bool {
    table == SECOND_PROGRESS || SECOND_TABLES.contains(&table)
}

/// Each table's primary key: the path its queries read it by, ending in the row key
/// `(log_index, pos)` (or, for `orders`, the order id, unique per row by itself). The
/// table is stored in this order (SQLite `WITHOUT ROWID`; PostgreSQL's key index), so a
/// table read by account or by order needs no second B-tree to keep up: every B-tree
/// is a page written per batch, and those are what the sink spends its time on.
pub fn primary_key(table: &str) -> &'static str {
    match table {
        "orders" => "order_id",
        "order_events" => "order_id, log_index, pos",
        "balance_movements" => "account, asset, ts, log_index, pos",
        "account_events" => "account, log_index, pos",
        _ => "log_index, pos",
    }
}

/// Secondary indexes: only those a query in `query.rs` reads (table, statement).
const INDEXES: &[(&str, &str)] = &[
    ("executions", "CREATE INDEX IF NOT EXISTS executions_by_symbol ON executions (symbol, ts)"),
    ("executions", "CREATE INDEX IF NOT EXISTS executions_by_maker ON executions (maker_order)"),
    ("executions", "CREATE INDEX IF NOT EXISTS executions_by_taker ON executions (taker_order)"),
    ("symbols", "CREATE UNIQUE INDEX IF NOT EXISTS symbols_by_name ON symbols (name)"),
    // One user's DUMPLOG: their records in log order.
    ("dt_audit", "CREATE INDEX IF NOT EXISTS dt_audit_by_user ON dt_audit (username, log_index, pos)"),
];

/// The statements that create the schema (each idempotent).
pub fn create_statements(dialect: Dialect) -> Vec<String> {
    create_statements_of(dialect, |_| true)
}

/// The statements that create the tables `keep` accepts (progress tables included),
/// with their indexes (a SQLite history is two files, one per part: `store/sqlite.rs`).
pub fn create_statements_of(dialect: Dialect, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let (blob, suffix) = match dialect {
        Dialect::Sqlite => ("BLOB", " WITHOUT ROWID"),
        Dialect::Postgres => ("BYTEA", ""),
    };
    let mut statements: Vec<String> = ["history_progress", SECOND_PROGRESS]
        .into_iter()
        .filter(|table| keep(table))
        .map(|table| {
            format!(
                "CREATE TABLE IF NOT EXISTS {table} (id BIGINT PRIMARY KEY, schema_version BIGINT NOT NULL, \
                 applied_index BIGINT NOT NULL, applied_ts BIGINT NOT NULL, begins_at BIGINT NOT NULL, \
                 snapshot_index BIGINT, snapshot {blob})"
            )
        })
        .collect();
    for (table, columns) in TABLES.iter().filter(|(table, _)| keep(table)) {
        let key = primary_key(table);
        statements.push(format!(
            "CREATE TABLE IF NOT EXISTS {table} (log_index BIGINT NOT NULL, pos BIGINT NOT NULL, ts BIGINT NOT NULL, \
             {}, PRIMARY KEY ({key})){suffix}",
            columns.replace(" BLOB", &format!(" {blob}"))
        ));
    }
    statements.extend(INDEXES.iter().filter(|(table, _)| keep(table)).map(|(_, s)| s.to_string()));
    statements
}

/// The statement that moves a progress table's one row (inserting it the first time):
/// `?` parameters schema version, applied index, applied ts, begins at, and with the
/// snapshot its index and bytes.
pub fn progress_upsert(table: &str, with_snapshot: bool) -> String {
    let (snapshot_columns, snapshot_values, snapshot_set) = if with_snapshot {
        (
            ", snapshot_index, snapshot",
            ", ?, ?",
            ", snapshot_index = excluded.snapshot_index, snapshot = excluded.snapshot",
        )
    } else {
        ("", "", "")
    };
    format!(
        "INSERT INTO {table} (id, schema_version, applied_index, applied_ts, begins_at{snapshot_columns}) \
         VALUES (1, ?, ?, ?, ?{snapshot_values}) ON CONFLICT (id) DO UPDATE SET applied_index = excluded.applied_index, \
         applied_ts = excluded.applied_ts, begins_at = excluded.begins_at{snapshot_set}"
    )
}

/// Column names of a table after the key (`log_index, pos, ts`).
pub fn column_names(columns: &str) -> Vec<&str> {
    columns.split(',').map(|c| c.split_whitespace().next().expect("a column has a name")).collect()
}
