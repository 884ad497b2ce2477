//! The day-trading audit log: its rows (from the ledger's audit records) and its XML
//! document (spec `day-trading.md` 9.1), streamed from the store for `DUMPLOG`.
//!
//! A record's row takes what the event carries (users by ledger index, amounts, the
//! transactionNum) and what the command that caused it says (the arguments of a
//! `userCommand` or `errorEvent`, the quote of a `quoteServer`). Rendering reads the rows
//! in key order (= log order) and writes one element per line with 2-space indentation,
//! LF line ends, text escaped; the document validates against the project's copy of
//! `logfile.xsd` (`crates/daytrading/schema/logfile.xsd`).
//!
//! Streaming: rows go from the database cursor to the writer one at a time (SQLite
//! steps a statement; PostgreSQL reads a portal), so a dump of millions of records holds
//! one row in memory.

use std::io::Write;

use bourse_engine::command::{Command, CommandBody};
use bourse_engine::daytrading::{cents_format, DtError, DtEvent, DtKind, DtRequest};
use bourse_engine::Engine;

use crate::rows::{AuditEntryRow, AuditRow, RowKey};
use crate::store::{Cell, Store, StoreError, Value};

/// The `dt_audit` row of one audit record of `command`, numbered `audit_seq`.
pub fn audit_row(engine: &Engine, command: &Command, record: DtEvent, key: RowKey, audit_seq: u64) -> AuditRow {
    let request = match &command.body {
        CommandBody::DayTrading(request) => Some(request.as_ref()),
        _ => None,
    };
    let dt_command = match request {
        Some(DtRequest::Command(c)) => Some(c),
        _ => None,
    };
    let quote = match request {
        Some(DtRequest::Command(c)) => c.quote.as_ref(),
        Some(DtRequest::Quote(q)) => Some(q),
        None => None,
    };
    let ledger = engine.day_trading();
    let name = |user: u32| ledger.user(user).map(|u| u.name.clone());
    let mut row = AuditRow {
        key,
        audit_seq: audit_seq as i64,
        record: "",
        stamp: (command.ts / 1_000_000) as i64,
        transaction_num: 0,
        command: None,
        username: None,
        symbol: None,
        filename: None,
        funds: None,
        price: None,
        quote_server_time: None,
        cryptokey: None,
        action: None,
        error_message: None,
    };
    let command_fields = |row: &mut AuditRow| {
        if let Some(c) = dt_command {
            let fields = c.audit_fields();
            row.command = Some(c.kind.name());
            row.username = fields.username.map(str::to_owned);
            row.symbol = fields.symbol.map(|s| s.as_str().to_owned());
            row.filename = fields.filename.map(str::to_owned);
            row.funds = fields.funds;
        }
    };
    match record {
        DtEvent::UserCommand { txn } => {
            row.record = "userCommand";
            row.transaction_num = txn as i64;
            command_fields(&mut row);
        }
        DtEvent::ErrorEvent { txn, error } => {
            row.record = "errorEvent";
            row.transaction_num = txn as i64;
            command_fields(&mut row);
            row.error_message = Some(error.message());
        }
        DtEvent::QuoteServer { owner, txn } => {
            row.record = "quoteServer";
            row.transaction_num = txn as i64;
            if let Some(q) = quote {
                row.price = Some(q.price);
                row.symbol = Some(q.symbol.as_str().to_owned());
                row.username = Some(q.userid.clone());
                row.quote_server_time = Some(q.quote_server_time as i64);
                row.cryptokey = Some(q.cryptokey.clone());
            }
            if let Some(owner) = owner {
                row.username = name(owner);
            }
        }
        DtEvent::AccountTransaction { user, txn, action, funds } => {
            row.record = "accountTransaction";
            row.transaction_num = txn as i64;
            row.action = Some(action.name());
            row.username = name(user);
            row.funds = Some(funds);
        }
        DtEvent::SystemEvent { user, txn, command, symbol, funds } => {
            row.record = "systemEvent";
            row.transaction_num = txn as i64;
            row.command = Some(command.name());
            row.username = name(user);
            row.symbol = Some(symbol.as_str().to_owned());
            row.funds = Some(funds);
        }
        DtEvent::Done { .. } => unreachable!("a command's result is not an audit record"),
    }
    row
}

/// The record kinds, by their code in the encoding.
const KINDS: [&str; 5] = ["userCommand", "quoteServer", "accountTransaction", "systemEvent", "errorEvent"];

/// The `dt_audit` row of one log entry's audit records (`records` is not empty, in log
/// order, numbered consecutively).
///
/// Encoding, per record: the kind's code (a byte, its index in `KINDS`), two bytes of
/// flags (bits 0–9: which of the ten optional fields are present, in a record's value
/// order: command, username, stockSymbol, filename, funds, price, quoteServerTime,
/// cryptokey, action, errorMessage; bit
/// 10: the username is the row's `username`, so it is not repeated; bit 11: the stamp,
/// bit 12: the transactionNum, are the previous record's), the stamp and
/// transactionNum unless flagged (zigzag varints), then each present field in
/// that order: a command name, an action and an error text as a byte (its index
/// among the day-trading commands, `ACTIONS` and the day-trading errors; 255 and the
/// text for anything else), other text as a varint length and its UTF-8 bytes, numbers
/// as zigzag varints. One row per entry, and nothing repeated that the row or the
/// record before says already: the sink writes the fewest bytes it can.
pub fn audit_entry(records: &[AuditRow]) -> AuditEntryRow {
    let first = &records[0];
    let username = first.username.clone().filter(|u| records.iter().all(|r| r.username.as_ref() == Some(u)));
    let mut out = Vec::with_capacity(32 * records.len());
    let mut previous: Option<&AuditRow> = None;
    for r in records {
        let kind = KINDS.iter().position(|k| *k == r.record).unwrap_or(0);
        out.push(kind as u8);
        let present = [
            r.command.is_some(),
            r.username.is_some(),
            r.symbol.is_some(),
            r.filename.is_some(),
            r.funds.is_some(),
            r.price.is_some(),
            r.quote_server_time.is_some(),
            r.cryptokey.is_some(),
            r.action.is_some(),
            r.error_message.is_some(),
            username.is_some(),
            previous.is_some_and(|p| p.stamp == r.stamp),
            previous.is_some_and(|p| p.transaction_num == r.transaction_num),
        ];
        let flags = present.iter().enumerate().fold(0u16, |flags, (bit, on)| flags | (u16::from(*on) << bit));
        out.extend_from_slice(&flags.to_le_bytes());
        if flags & STAMP_AS_BEFORE == 0 {
            varint(&mut out, r.stamp);
        }
        if flags & TXN_AS_BEFORE == 0 {
            varint(&mut out, r.transaction_num);
        }
        if let Some(command) = r.command {
            code(&mut out, &COMMANDS, command);
        }
        if username.is_none() {
            if let Some(user) = &r.username {
                bytes(&mut out, user.as_bytes());
            }
        }
        for text in [r.symbol.as_deref(), r.filename.as_deref()].into_iter().flatten() {
            bytes(&mut out, text.as_bytes());
        }
        for number in [r.funds, r.price, r.quote_server_time].into_iter().flatten() {
            varint(&mut out, number);
        }
        if let Some(cryptokey) = &r.cryptokey {
            bytes(&mut out, cryptokey.as_bytes());
        }
        if let Some(action) = r.action {
            code(&mut out, &ACTIONS, action);
        }
        if let Some(error) = r.error_message {
            code(&mut out, &ERRORS, error);
        }
        previous = Some(r);
    }
    AuditEntryRow { key: first.key, audit_seq: first.audit_seq, username, records: out }
}

/// Flag bits of a record besides the fields' presence (see [`audit_entry`]).
const USERNAME_OF_ROW: u16 = 1 << 10;
const STAMP_AS_BEFORE: u16 = 1 << 11;
const TXN_AS_BEFORE: u16 = 1 << 12;

/// The texts written as a byte: the day-trading command names, the account actions
/// and the day-trading error texts. A text not in its table is written as 255 and the
/// text.
const COMMANDS: [&str; 16] = {
    let mut names = [""; 16];
    let mut i = 0;
    while i < 16 {
        names[i] = DtKind::ALL[i].name();
        i += 1;
    }
    names
};
const ACTIONS: [&str; 4] = ["add", "remove", "reserve", "release"];
const ERRORS: [&str; 16] = {
    let mut texts = [""; 16];
    let mut i = 0;
    while i < 16 {
        texts[i] = DtError::ALL[i].message();
        i += 1;
    }
    texts
};
const CODE_TEXT: u8 = 255;

fn varint(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn bytes(out: &mut Vec<u8>, value: &[u8]) {
    varint(out, value.len() as i64);
    out.extend_from_slice(value);
}

fn code(out: &mut Vec<u8>, table: &[&str], text: &str) {
    match table.iter().position(|t| *t == text) {
        Some(i) => out.push(i as u8),
        None => {
            out.push(CODE_TEXT);
            bytes(out, text.as_bytes());
        }
    }
}

/// Reads an entry's records back, each as its values (kind, stamp, transactionNum, then
/// the ten optional fields: what [`write_row`] takes).
struct Decoder<'a> {
    input: &'a [u8],
    /// The row's `username`, for records flagged [`USERNAME_OF_ROW`].
    username: Option<&'a str>,
    /// The previous record's stamp and transactionNum.
    stamp: i64,
    transaction_num: i64,
}

impl<'a> Decoder<'a> {
    fn new(input: &'a [u8], username: Option<&'a str>) -> Self {
        Decoder { input, username, stamp: 0, transaction_num: 0 }
    }

    fn fail() -> StoreError {
        StoreError::Invalid("a dt_audit row's records are malformed".into())
    }

    fn byte(&mut self) -> Result<u8, StoreError> {
        let (&b, rest) = self.input.split_first().ok_or_else(Self::fail)?;
        self.input = rest;
        Ok(b)
    }

    fn varint(&mut self) -> Result<i64, StoreError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok((v >> 1) as i64 ^ -((v & 1) as i64));
            }
        }
        Err(Self::fail())
    }

    fn text(&mut self) -> Result<String, StoreError> {
        let len = usize::try_from(self.varint()?).map_err(|_| Self::fail())?;
        if len > self.input.len() {
            return Err(Self::fail());
        }
        let (text, rest) = self.input.split_at(len);
        self.input = rest;
        String::from_utf8(text.to_vec()).map_err(|_| Self::fail())
    }

    /// A text written by [`code`].
    fn coded(&mut self, table: &[&str]) -> Result<String, StoreError> {
        match self.byte()? {
            CODE_TEXT => self.text(),
            i => table.get(usize::from(i)).map(|t| (*t).to_owned()).ok_or_else(Self::fail),
        }
    }

    /// The next record's values in [`write_row`]'s order, or `None` at the end.
    fn record(&mut self) -> Result<Option<Vec<Value>>, StoreError> {
        if self.input.is_empty() {
            return Ok(None);
        }
        let kind = KINDS.get(usize::from(self.byte()?)).ok_or_else(Self::fail)?;
        let flags = u16::from_le_bytes([self.byte()?, self.byte()?]);
        let on = |bit: u16| flags & (1 << bit) != 0;
        if flags & STAMP_AS_BEFORE == 0 {
            self.stamp = self.varint()?;
        }
        if flags & TXN_AS_BEFORE == 0 {
            self.transaction_num = self.varint()?;
        }
        let mut values = Vec::with_capacity(13);
        values.push(Value::Text((*kind).to_owned()));
        values.push(Value::Int(self.stamp));
        values.push(Value::Int(self.transaction_num));
        let text = |decoder: &mut Self, bit: u16| -> Result<Value, StoreError> {
            Ok(if on(bit) { Value::Text(decoder.text()?) } else { Value::Null })
        };
        values.push(if on(0) { Value::Text(self.coded(&COMMANDS)?) } else { Value::Null });
        values.push(match (on(1), flags & USERNAME_OF_ROW != 0) {
            (false, _) => Value::Null,
            (true, true) => Value::Text(self.username.ok_or_else(Self::fail)?.to_owned()),
            (true, false) => Value::Text(self.text()?),
        });
        values.push(text(self, 2)?);
        values.push(text(self, 3)?);
        for bit in 4..7 {
            values.push(if on(bit) { Value::Int(self.varint()?) } else { Value::Null });
        }
        values.push(text(self, 7)?);
        values.push(if on(8) { Value::Text(self.coded(&ACTIONS)?) } else { Value::Null });
        values.push(if on(9) { Value::Text(self.coded(&ERRORS)?) } else { Value::Null });
        Ok(Some(values))
    }
}

/// The first line of every audit document, and the root element's.
const HEADER: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<log>\n";
const FOOTER: &str = "</log>\n";

/// The values of a record, in [`write_row`]'s order (an entry's records decode to these):
/// record, stamp, transaction_num, command, username, symbol, filename, funds, price,
/// quote_server_time, cryptokey, action, error_message.
const USERNAME: usize = 4;

/// Which records a dump holds: all of them, or one user's, up to an audit sequence
/// number (a `DUMPLOG` command's own `userCommand`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DumpScope<'a> {
    pub user: Option<&'a str>,
    pub through_seq: u64,
}

/// What a dump wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpStats {
    pub records: u64,
    pub bytes: u64,
}

/// Counts the bytes that pass.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Why a dump failed.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("writing the dump: {0}")]
    Io(#[from] std::io::Error),
}

/// Streams the audit document of `scope` from `store` into `out`, with `server` as every
/// record's `server`.
pub fn dump(store: &mut Store, scope: DumpScope<'_>, server: &str, out: impl Write) -> Result<DumpStats, DumpError> {
    let mut out = Counting { inner: std::io::BufWriter::with_capacity(1 << 16, out), bytes: 0 };
    out.write_all(HEADER.as_bytes())?;
    // Every number above i64::MAX means "everything" (the column is a BIGINT).
    let through = i64::try_from(scope.through_seq).unwrap_or(i64::MAX);
    let mut records = 0u64;
    let mut io_error = None;
    let mut each = |row: &[Value]| -> Result<(), StoreError> {
        let first = row.first().and_then(Value::int).ok_or_else(Decoder::fail)?;
        let Some(Value::Blob(encoded)) = row.get(1) else { return Err(Decoder::fail()) };
        let mut decoder = Decoder::new(encoded, row.get(2).and_then(Value::text));
        let mut seq = first;
        while let Some(values) = decoder.record()? {
            if seq > through {
                break;
            }
            seq += 1;
            if scope.user.is_some() && values[USERNAME].text() != scope.user {
                continue;
            }
            if let Err(error) = write_row(&mut out, server, &values) {
                io_error = Some(error);
                return Err(StoreError::Invalid("write failed".into()));
            }
            records += 1;
        }
        Ok(())
    };
    // An entry whose records name several users (or none) has no username: a user's
    // dump reads those too and keeps the records that name the user.
    let result = match scope.user {
        None => store.query_each(
            "SELECT audit_seq, records, username FROM dt_audit WHERE audit_seq <= ? ORDER BY log_index, pos",
            &[Cell::Int(through)],
            &mut each,
        ),
        Some(user) => store.query_each(
            "SELECT audit_seq, records, username FROM dt_audit WHERE (username = ? OR username IS NULL) AND audit_seq <= ? \
             ORDER BY log_index, pos",
            &[Cell::Text(user), Cell::Int(through)],
            &mut each,
        ),
    };
    if let Some(error) = io_error {
        return Err(DumpError::Io(error));
    }
    result?;
    out.write_all(FOOTER.as_bytes())?;
    out.flush()?;
    Ok(DumpStats { records, bytes: out.bytes })
}

/// One record: `  <kind>`, its children at 4 spaces in the schema table's order, `  </kind>`.
fn write_row(out: &mut impl Write, server: &str, row: &[Value]) -> std::io::Result<()> {
    let text = |i: usize| row.get(i).and_then(Value::text);
    let int = |i: usize| row.get(i).and_then(Value::int);
    let record = text(0).unwrap_or("debugEvent");
    writeln!(out, "  <{record}>")?;
    writeln!(out, "    <timestamp>{}</timestamp>", int(1).unwrap_or(0))?;
    element(out, "server", Some(server))?;
    writeln!(out, "    <transactionNum>{}</transactionNum>", int(2).unwrap_or(0))?;
    let money = |v: Option<i64>| v.map(cents_format);
    match record {
        "quoteServer" => {
            element(out, "price", money(int(8)).as_deref())?;
            element(out, "stockSymbol", text(5))?;
            element(out, "username", text(4))?;
            if let Some(time) = int(9) {
                writeln!(out, "    <quoteServerTime>{time}</quoteServerTime>")?;
            }
            element(out, "cryptokey", text(10))?;
        }
        "accountTransaction" => {
            element(out, "action", text(11))?;
            element(out, "username", text(4))?;
            element(out, "funds", money(int(7)).as_deref())?;
        }
        _ => {
            element(out, "command", text(3))?;
            element(out, "username", text(4))?;
            element(out, "stockSymbol", text(5))?;
            element(out, "filename", text(6))?;
            element(out, "funds", money(int(7)).as_deref())?;
            element(out, "errorMessage", text(12))?;
        }
    }
    writeln!(out, "  </{record}>")
}

/// `    <name>escaped</name>`, or nothing for an absent value.
fn element(out: &mut impl Write, name: &str, value: Option<&str>) -> std::io::Result<()> {
    let Some(value) = value else { return Ok(()) };
    write!(out, "    <{name}>")?;
    escape(out, value)?;
    writeln!(out, "</{name}>")
}

fn escape(out: &mut impl Write, text: &str) -> std::io::Result<()> {
    let mut start = 0;
    for (i, b) in text.bytes().enumerate() {
        let entity = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            b'\'' => "&apos;",
            _ => continue,
        };
        out.write_all(&text.as_bytes()[start..i])?;
        out.write_all(entity.as_bytes())?;
        start = i + 1;
    }
    out.write_all(&text.as_bytes()[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: &'static str, stamp: i64, txn: i64, username: Option<&str>) -> AuditRow {
        AuditRow {
            key: RowKey { log_index: 9, pos: 0, ts: stamp * 1_000_000 },
            audit_seq: 1,
            record: kind,
            stamp,
            transaction_num: txn,
            command: None,
            username: username.map(str::to_owned),
            symbol: None,
            filename: None,
            funds: None,
            price: None,
            quote_server_time: None,
            cryptokey: None,
            action: None,
            error_message: None,
        }
    }

    /// A record's values as [`write_row`] takes them, straight from the record.
    fn values(r: &AuditRow) -> Vec<Value> {
        let text = |t: Option<&str>| t.map_or(Value::Null, |t| Value::Text(t.to_owned()));
        let int = |n: Option<i64>| n.map_or(Value::Null, Value::Int);
        vec![
            Value::Text(r.record.to_owned()),
            Value::Int(r.stamp),
            Value::Int(r.transaction_num),
            text(r.command),
            text(r.username.as_deref()),
            text(r.symbol.as_deref()),
            text(r.filename.as_deref()),
            int(r.funds),
            int(r.price),
            int(r.quote_server_time),
            text(r.cryptokey.as_deref()),
            text(r.action),
            text(r.error_message),
        ]
    }

    fn decoded(entry: &AuditEntryRow) -> Vec<Vec<Value>> {
        let mut decoder = Decoder::new(&entry.records, entry.username.as_deref());
        let mut out = Vec::new();
        while let Some(values) = decoder.record().unwrap() {
            out.push(values);
        }
        out
    }

    #[test]
    fn an_entrys_records_decode_to_what_was_encoded() {
        let mut command = record("userCommand", 1_732_270_000_123, 41, Some("oY01WVirLr"));
        command.command = Some("COMMIT_BUY");
        let mut quote = record("quoteServer", 1_732_270_000_123, 41, Some("oY01WVirLr"));
        (quote.symbol, quote.price, quote.quote_server_time) =
            (Some("ABC".into()), Some(9_211), Some(1_732_269_999_000));
        quote.cryptokey = Some("Zr4M7/KAEQ3lXnNy+vMr6aR+d8dYuIZ7UFlDC6r7m9U=".into());
        let mut spent = record("accountTransaction", 1_732_270_000_123, 41, Some("oY01WVirLr"));
        (spent.action, spent.funds) = (Some("remove"), Some(-27_633));
        let mut fired = record("systemEvent", 1_732_270_000_124, 42, Some("oY01WVirLr"));
        (fired.command, fired.symbol, fired.funds) = (Some("SET_BUY_TRIGGER"), Some("ABC".into()), Some(50_000));
        let mut error = record("errorEvent", 1_732_270_000_124, 42, Some("oY01WVirLr"));
        (error.command, error.error_message) = (Some("CANCEL_SELL"), Some("no pending sell"));
        let records = [command, quote, spent, fired, error];
        let entry = audit_entry(&records);
        assert_eq!(entry.username.as_deref(), Some("oY01WVirLr"));
        assert_eq!(decoded(&entry), records.iter().map(values).collect::<Vec<_>>());
        // The userid is the row's, the stamp and transactionNum said once per change,
        // the names a byte each: 15 bytes of kinds and flags, 2 stamps and 2 numbers,
        // 3 codes, the quote's 44-byte cryptokey, symbols and numbers.
        assert_eq!(entry.records.windows(10).filter(|w| w == b"oY01WVirLr").count(), 0);
        assert!(entry.records.len() <= 105, "{} bytes", entry.records.len());
    }

    #[test]
    fn records_of_several_users_and_unknown_texts_keep_their_own_bytes() {
        let mut first = record("userCommand", 5, 1, Some("alice"));
        first.command = Some("NOT_A_COMMAND");
        let mut second = record("accountTransaction", 6, 2, Some("bob"));
        (second.action, second.funds) = (Some("refund"), Some(1));
        let mut third = record("errorEvent", 6, 2, None);
        third.error_message = Some("an error no table knows");
        let records = [first, second, third];
        let entry = audit_entry(&records);
        assert_eq!(entry.username, None, "the records name several users");
        assert_eq!(decoded(&entry), records.iter().map(values).collect::<Vec<_>>());
        let mut truncated = entry.clone();
        truncated.records.pop();
        let mut decoder = Decoder::new(&truncated.records, None);
        let result = std::iter::from_fn(|| decoder.record().transpose()).collect::<Result<Vec<_>, _>>();
        assert!(result.is_err(), "a cut encoding is an error, not a short record");
    }

    #[test]
    fn records_render_one_element_per_line_escaped() {
        let row = vec![
            Value::Text("errorEvent".into()),
            Value::Int(1_732_270_000_000),
            Value::Int(7),
            Value::Text("ADD".into()),
            Value::Text("a<b&c".into()),
            Value::Null,
            Value::Null,
            Value::Int(-500),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Text("invalid amount".into()),
        ];
        let mut out = Vec::new();
        write_row(&mut out, "bourse-dt", &row).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "  <errorEvent>\n    <timestamp>1732270000000</timestamp>\n    <server>bourse-dt</server>\n    \
             <transactionNum>7</transactionNum>\n    <command>ADD</command>\n    <username>a&lt;b&amp;c</username>\n    \
             <funds>-5.00</funds>\n    <errorMessage>invalid amount</errorMessage>\n  </errorEvent>\n"
        );
    }
}
