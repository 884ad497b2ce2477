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
//! it (`history_progress_parts` has the same of each part after the first: [`Part`]);
//! `begins_at` is the first index whose rows are here (0 or 1: the whole log);
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
/// Version 8: PostgreSQL's batches are written by four writers (`order_events` and
/// `balance_movements` shared out by order id and account: [`Part`]), the progress of
/// every part after the first a row of `history_progress_parts`.
/// Version 9: margin trading and clearing: `symbols` has a margin contract's rules,
/// `margin_events` the positions, marks, liquidations, transfers, settlements and
/// shortfalls, `trading_days` each close of the day.
pub const SCHEMA_VERSION: i64 = 9;

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
         fee_taker BIGINT NOT NULL, policy TEXT NOT NULL, multiplier BIGINT, initial_bp BIGINT, \
         maintenance_bp BIGINT, position_limit BIGINT, mark TEXT, insurance BIGINT",
    ),
    (
        "dt_audit",
        "audit_seq BIGINT NOT NULL, username TEXT, records BLOB NOT NULL",
    ),
    (
        "margin_events",
        "event TEXT NOT NULL, account BIGINT, symbol BIGINT, asset BIGINT, px BIGINT, qty BIGINT, cost BIGINT, \
         realized BIGINT, amount BIGINT, bad_debt BIGINT, counterparty BIGINT",
    ),
    ("trading_days", "day BIGINT NOT NULL, expired BIGINT NOT NULL"),
];

/// How many writers write a batch, in parallel, each its part of the rows in a
/// transaction of its own with its own progress row (`store::write_in_parts`). One
/// writer was the sink's bottleneck. SQLite: two, a file each (`balance_movements`
/// in the second, about half of the writing of the ec2020 mix). PostgreSQL: four
/// connections, whose server processes can run on four cores: the first writes the
/// small tables (`orders`, `executions` and the rest), the other three a share each of
/// the two big ones, `order_events` by order id and `balance_movements` by account.
/// With one connection per table the busiest server process needed 1.9 CPU seconds
/// per million entries of the ec2020 mix, a ceiling of ~540,000 entries a second
/// however many cores the server has (docs/BENCHMARKS.md). Which rows are whose is
/// part of a history's layout: changing it is a new [`SCHEMA_VERSION`].
pub fn writers(dialect: Dialect) -> usize {
    match dialect {
        Dialect::Sqlite => 2,
        Dialect::Postgres => 1 + POSTGRES_SHARES as usize,
    }
}

/// PostgreSQL's parts after the first, each a share of `order_events` and
/// `balance_movements`.
const POSTGRES_SHARES: i64 = 3;

/// Order ids share out to PostgreSQL's writers in runs of this many, so one writer's
/// rows of `order_events` are whole ranges of the key, not every other leaf's rows.
const ORDER_ID_RUN: i64 = 256;

/// The progress of the parts after the first: `history_progress`'s columns, a row per
/// part (its `id` the part's number, from 1), the snapshot columns unused. SQLite's
/// second file has this table with the one row of its part.
pub const PARTS_PROGRESS: &str = "history_progress_parts";

/// One writer's part of a batch: part 0, the first, writes with `history_progress`
/// (and the snapshot), and commits last; part k ≥ 1 with row k of
/// [`PARTS_PROGRESS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub dialect: Dialect,
    pub index: usize,
}

impl Part {
    /// The part a row of `table` is in, given its share key: the order id of an
    /// `order_events` row, the account of a `balance_movements` row (anything for the
    /// other tables).
    pub fn of(dialect: Dialect, table: &str, key: i64) -> usize {
        match (dialect, table) {
            (Dialect::Sqlite, "balance_movements") => 1,
            (Dialect::Postgres, "order_events") => {
                1 + ((key / ORDER_ID_RUN).unsigned_abs() % POSTGRES_SHARES as u64) as usize
            }
            (Dialect::Postgres, "balance_movements") => 1 + (key.unsigned_abs() % POSTGRES_SHARES as u64) as usize,
            _ => 0,
        }
    }

    /// Whether some rows of `table` may be this part's.
    pub fn has(self, table: &str) -> bool {
        match (self.dialect, table) {
            (Dialect::Postgres, "order_events" | "balance_movements") => self.index != 0,
            _ => Part::of(self.dialect, table, 0) == self.index,
        }
    }

    /// Whether the row of `table` with share key `key` is this part's.
    pub fn owns(self, table: &str, key: i64) -> bool {
        Part::of(self.dialect, table, key) == self.index
    }

    /// An SQL condition that holds for exactly this part's rows of a `table` it
    /// [`has`](Part::has) (the same arithmetic as [`Part::of`]: both dialects divide
    /// integers towards zero).
    pub fn condition(self, table: &str) -> String {
        match (self.dialect, table) {
            (Dialect::Postgres, "order_events") => {
                format!("abs(order_id / {ORDER_ID_RUN}) % {POSTGRES_SHARES} = {}", self.index as i64 - 1)
            }
            (Dialect::Postgres, "balance_movements") => {
                format!("abs(account) % {POSTGRES_SHARES} = {}", self.index as i64 - 1)
            }
            _ => "1 = 1".to_string(),
        }
    }

    /// The progress table of this part and its row's id.
    pub fn progress(self) -> (&'static str, i64) {
        match self.index {
            0 => ("history_progress", 1),
            k => (PARTS_PROGRESS, k as i64),
        }
    }
}

/// Whether a table (or a progress table) is in SQLite's second file.
pub fn in_second(table: &str) -> bool {
    table == PARTS_PROGRESS || Part { dialect: Dialect::Sqlite, index: 1 }.has(table)
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
    let mut statements: Vec<String> = ["history_progress", PARTS_PROGRESS]
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

/// The statement that moves a part's progress row (inserting it the first time): `?`
/// parameters schema version, applied index, applied ts, begins at, and with the
/// snapshot its index and bytes.
pub fn progress_upsert(part: Part, with_snapshot: bool) -> String {
    let (table, id) = part.progress();
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
         VALUES ({id}, ?, ?, ?, ?{snapshot_values}) ON CONFLICT (id) DO UPDATE SET applied_index = excluded.applied_index, \
         applied_ts = excluded.applied_ts, begins_at = excluded.begins_at{snapshot_set}"
    )
}

/// Column names of a table after the key (`log_index, pos, ts`).
pub fn column_names(columns: &str) -> Vec<&str> {
    columns.split(',').map(|c| c.split_whitespace().next().expect("a column has a name")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row is one part's, a part that has its table; and each part's SQL
    /// condition (which empties a part) picks exactly the rows [`Part::of`] gives it,
    /// evaluated by SQLite (PostgreSQL's integer division and remainder are the same,
    /// truncating towards zero; its own reset is exercised in `tests/sink.rs`).
    #[test]
    fn every_row_is_in_one_part_and_its_condition_says_which() {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        let keys = [-100_000, -257, -256, -1, 0, 1, 255, 256, 511, 512, 767, 768, 1_000_003, i64::MAX];
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let parts: Vec<Part> = (0..writers(dialect)).map(|index| Part { dialect, index }).collect();
            for (table, column) in [("order_events", "order_id"), ("balance_movements", "account"), ("orders", "")] {
                let mut used = vec![false; parts.len()];
                for key in keys {
                    let owners: Vec<&Part> = parts.iter().filter(|p| p.owns(table, key)).collect();
                    assert_eq!(owners.len(), 1, "{dialect:?} {table} {key}");
                    assert!(owners[0].has(table), "{dialect:?} {table} {key}");
                    used[owners[0].index] = true;
                    for part in parts.iter().filter(|p| p.has(table)) {
                        let condition = part.condition(table);
                        let sql = match column {
                            "" => format!("SELECT {condition}"),
                            column => format!("SELECT {}", condition.replace(column, &format!("({key})"))),
                        };
                        let holds: bool = db.query_row(&sql, [], |row| row.get(0)).unwrap();
                        assert_eq!(holds, part.owns(table, key), "{dialect:?} {table} {key} {condition}");
                    }
                }
                let expected = match (dialect, table) {
                    (Dialect::Postgres, "order_events" | "balance_movements") => vec![false, true, true, true],
                    (Dialect::Sqlite, "balance_movements") => vec![false, true],
                    (Dialect::Sqlite, _) => vec![true, false],
                    _ => vec![true, false, false, false],
                };
                assert_eq!(used, expected, "{dialect:?} {table}");
            }
        }
    }
}
