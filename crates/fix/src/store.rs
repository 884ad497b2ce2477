//! The durable state of one FIX session: sequence numbers and the sent messages.
//!
//! One append-only file per session (`DIR/<SenderCompID>-<TargetCompID>.fixlog`, the
//! CompIDs as the counterparty sends them; other bytes hex-escaped). Records are
//! `[len u32 LE][crc32c u32 LE][kind u8][payload]` and there are two kinds:
//! - `Sent { seq, message }`: every message this side sent, in seq order; the bytes for
//!   application messages that a ResendRequest replays, none for session messages and
//!   market data (gap-filled on resend);
//! - `Received { next }`: the next MsgSeqNum expected from the counterparty, written
//!   after each inbound message is processed.
//!
//! Durability: the session writes a message's record before the message is sent and
//! the connection's writer calls [`Store::sync`] (fdatasync) before it puts a batch of
//! messages on the socket, so a message the counterparty saw is on disk: after a crash
//! the next seq is never one already used, and every application message can be
//! resent. `Received` records reach the disk with the next sync; one lost in a crash
//! only makes the counterparty resend what was already processed, which the session
//! recognises (PossDupFlag with a known ClOrdID).
//!
//! Opening replays the file, drops a torn or corrupt tail (the recovery of a crash in
//! the middle of a write; also a record whose CRC checks but which this code cannot
//! have written, such as a `Sent` seq out of order) and continues after it. Whatever
//! the file holds, opening reads it once and keeps an index no larger than it (fuzzed:
//! `crates/fix/fuzz`, target `store`). A sequence reset (ResetSeqNumFlag)
//! starts a new, empty file by rename. Memory: an index entry per sent application
//! message; the file grows until the next reset (a known limit: no rolling store).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const KIND_SENT: u8 = 1;
const KIND_RECEIVED: u8 = 2;
const HEADER_LEN: usize = 8;
const RECORD_LEN_MAX: usize = 1 << 20;

/// The sequence numbers and sent messages of one session, on disk.
pub struct Store {
    path: PathBuf,
    file: Arc<File>,
    len: u64,
    next_sender: u64,
    next_target: u64,
    /// Sent application messages: (seq, offset of the bytes in the file, length).
    sent: Vec<(u64, u64, u32)>,
}

impl Store {
    /// Opens (or creates) the store of the session `sender` → `target` in `dir`.
    pub fn open(dir: &Path, sender: &str, target: &str) -> std::io::Result<Store> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{}-{}.fixlog", escape(sender), escape(target)));
        let mut file = OpenOptions::new().read(true).append(true).create(true).open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let mut store = Store { path, file: Arc::new(file), len: 0, next_sender: 1, next_target: 1, sent: Vec::new() };
        let valid = store.replay(&bytes);
        if valid < bytes.len() {
            tracing::warn!(path = %store.path.display(), dropped = bytes.len() - valid, "FIX store: torn tail dropped");
            store.file.set_len(valid as u64)?;
            store.file.sync_data()?;
        }
        store.len = valid as u64;
        Ok(store)
    }

    /// Applies every whole record; returns the length of the valid prefix.
    fn replay(&mut self, bytes: &[u8]) -> usize {
        let mut at = 0;
        while let Some((kind, payload, next)) = read_record(bytes, at) {
            match kind {
                // Sent records are written in seq order from 1 ([`Store::record_sent`]): a
                // seq out of that order is damage, and the rest is dropped like a torn tail.
                KIND_SENT if payload.len() >= 8 && payload[..8] == self.next_sender.to_le_bytes() => {
                    let seq = self.next_sender;
                    if payload.len() > 8 {
                        self.sent.push((seq, (at + HEADER_LEN + 1 + 8) as u64, (payload.len() - 8) as u32));
                    }
                    self.next_sender = seq + 1;
                }
                KIND_RECEIVED if payload.len() == 8 => {
                    self.next_target = u64::from_le_bytes(payload.try_into().expect("8 bytes"));
                }
                _ => break,
            }
            at = next;
        }
        at
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The MsgSeqNum of the next message this side sends.
    pub fn next_sender(&self) -> u64 {
        self.next_sender
    }

    /// The MsgSeqNum expected next from the counterparty.
    pub fn next_target(&self) -> u64 {
        self.next_target
    }

    /// Records that message `seq` (the next one) is being sent; `message` holds the bytes
    /// of an application message to keep for resending.
    pub fn record_sent(&mut self, seq: u64, message: Option<&[u8]>) -> std::io::Result<()> {
        assert_eq!(seq, self.next_sender, "messages are recorded in seq order");
        let mut payload = seq.to_le_bytes().to_vec();
        if let Some(message) = message {
            payload.extend_from_slice(message);
        }
        let offset = self.append(KIND_SENT, &payload)?;
        if let Some(message) = message {
            self.sent.push((seq, offset + 8, message.len() as u32));
        }
        self.next_sender = seq + 1;
        Ok(())
    }

    /// Records the next MsgSeqNum expected from the counterparty.
    pub fn set_next_target(&mut self, next: u64) -> std::io::Result<()> {
        if next != self.next_target {
            self.append(KIND_RECEIVED, &next.to_le_bytes())?;
            self.next_target = next;
        }
        Ok(())
    }

    /// Both sequence numbers back to 1 and no sent messages: a new, empty file.
    pub fn reset(&mut self) -> std::io::Result<()> {
        let fresh = self.path.with_extension("fixlog.new");
        // Writes go at the cursor, which a new empty file has at its end, as append would.
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&fresh)?;
        file.sync_data()?;
        std::fs::rename(&fresh, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        *self = Store {
            path: self.path.clone(),
            file: Arc::new(file),
            len: 0,
            next_sender: 1,
            next_target: 1,
            sent: Vec::new(),
        };
        Ok(())
    }

    /// The application messages sent with seqs in `begin..=end`, in order.
    pub fn sent_between(&self, begin: u64, end: u64) -> std::io::Result<Vec<(u64, Vec<u8>)>> {
        let from = self.sent.partition_point(|&(seq, _, _)| seq < begin);
        let mut out = Vec::new();
        for &(seq, offset, len) in self.sent[from..].iter().take_while(|&&(seq, _, _)| seq <= end) {
            let mut bytes = vec![0; len as usize];
            self.file.read_exact_at(&mut bytes, offset)?;
            out.push((seq, bytes));
        }
        Ok(out)
    }

    /// A handle for [`Store::sync`] outside the session's lock.
    pub fn file(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }

    /// Makes every record written so far durable.
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    /// Appends one record; returns the offset of its payload.
    fn append(&mut self, kind: u8, payload: &[u8]) -> std::io::Result<u64> {
        let mut record = Vec::with_capacity(HEADER_LEN + 1 + payload.len());
        let mut crc = crc32c::crc32c(&[kind]);
        crc = crc32c::crc32c_append(crc, payload);
        record.extend_from_slice(&((payload.len() + 1) as u32).to_le_bytes());
        record.extend_from_slice(&crc.to_le_bytes());
        record.push(kind);
        record.extend_from_slice(payload);
        (&*self.file).write_all(&record)?;
        let offset = self.len + (HEADER_LEN + 1) as u64;
        self.len += record.len() as u64;
        Ok(offset)
    }
}

/// Binds the session `sender` → `target` in `dir` to one API key: the first key that
/// logs on is kept (as its BLAKE3 hash, in `<sender>-<target>.owner`), and later Logons
/// must bring the same key, so no other key holder can take over the session and read
/// its reports by ResendRequest. Returns whether `key` is the owner's (or now is).
pub fn bind_owner(dir: &Path, sender: &str, target: &str, key: &str) -> std::io::Result<bool> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{}-{}.owner", escape(sender), escape(target)));
    let hash = blake3::hash(key.as_bytes()).to_hex().to_string();
    match std::fs::read_to_string(&path) {
        Ok(owner) => Ok(owner.trim() == hash),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let fresh = path.with_extension("owner.new");
            std::fs::write(&fresh, format!("{hash}\n"))?;
            File::open(&fresh)?.sync_all()?;
            std::fs::rename(&fresh, &path)?;
            File::open(dir)?.sync_all()?;
            Ok(true)
        }
        Err(error) => Err(error),
    }
}

/// The record at `at`: its kind, payload and the offset after it; `None` when the rest
/// is not one whole, intact record.
fn read_record(bytes: &[u8], at: usize) -> Option<(u8, &[u8], usize)> {
    let header = bytes.get(at..at + HEADER_LEN)?;
    let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().ok()?);
    if len == 0 || len > RECORD_LEN_MAX {
        return None;
    }
    let body = bytes.get(at + HEADER_LEN..at + HEADER_LEN + len)?;
    if crc32c::crc32c(body) != crc {
        return None;
    }
    Some((body[0], &body[1..], at + HEADER_LEN + len))
}

/// A CompID as a file name part: letters, digits, `.` and `_` as they are, the rest hex.
fn escape(comp_id: &str) -> String {
    let mut out = String::with_capacity(comp_id.len());
    for b in comp_id.bytes() {
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_and_messages_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), "CLIENT", "BOURSE").unwrap();
        assert_eq!((store.next_sender(), store.next_target()), (1, 1));
        store.record_sent(1, None).unwrap();
        store.record_sent(2, Some(b"second")).unwrap();
        store.set_next_target(2).unwrap();
        store.record_sent(3, Some(b"third")).unwrap();
        store.sync().unwrap();
        drop(store);
        let store = Store::open(dir.path(), "CLIENT", "BOURSE").unwrap();
        assert_eq!((store.next_sender(), store.next_target()), (4, 2));
        assert_eq!(store.sent_between(1, 10).unwrap(), vec![(2, b"second".to_vec()), (3, b"third".to_vec())]);
        assert_eq!(store.sent_between(3, 3).unwrap(), vec![(3, b"third".to_vec())]);
    }

    #[test]
    fn a_torn_tail_is_dropped_and_appends_continue() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), "C", "S").unwrap();
        store.record_sent(1, Some(b"one")).unwrap();
        store.record_sent(2, Some(b"two")).unwrap();
        let path = store.path().to_path_buf();
        drop(store);
        let full = std::fs::metadata(&path).unwrap().len();
        for cut in 1..20 {
            let copy = tempfile::tempdir().unwrap();
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(copy.path().join("C-S.fixlog"), &bytes[..(full - cut) as usize]).unwrap();
            let mut store = Store::open(copy.path(), "C", "S").unwrap();
            assert_eq!(store.next_sender(), 2, "cut {cut}");
            store.record_sent(2, Some(b"again")).unwrap();
            drop(store);
            let store = Store::open(copy.path(), "C", "S").unwrap();
            assert_eq!(store.sent_between(1, 9).unwrap(), vec![(1, b"one".to_vec()), (2, b"again".to_vec())]);
        }
    }

    #[test]
    fn a_record_out_of_seq_order_ends_the_replay_even_with_a_valid_crc() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), "C", "S").unwrap();
        store.record_sent(1, Some(b"one")).unwrap();
        // What record_sent(u64::MAX, …) would write, were it allowed to.
        store.append(KIND_SENT, &[&u64::MAX.to_le_bytes()[..], b"max"].concat()).unwrap();
        store.record_sent(2, Some(b"two")).unwrap();
        let path = store.path().to_path_buf();
        drop(store);
        let full = std::fs::metadata(&path).unwrap().len();
        let mut store = Store::open(dir.path(), "C", "S").unwrap();
        assert_eq!(store.next_sender(), 2, "the replay stopped at the seq out of order");
        assert!(std::fs::metadata(&path).unwrap().len() < full, "and the rest was dropped");
        store.record_sent(2, Some(b"again")).unwrap();
        assert_eq!(store.sent_between(1, u64::MAX).unwrap(), vec![(1, b"one".to_vec()), (2, b"again".to_vec())]);
    }

    #[test]
    fn a_session_belongs_to_its_first_key() {
        let dir = tempfile::tempdir().unwrap();
        assert!(bind_owner(dir.path(), "C", "S", "k1").unwrap());
        assert!(bind_owner(dir.path(), "C", "S", "k1").unwrap());
        assert!(!bind_owner(dir.path(), "C", "S", "k2").unwrap());
        assert!(bind_owner(dir.path(), "D", "S", "k2").unwrap());
    }

    #[test]
    fn reset_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), "A B", "S").unwrap();
        store.record_sent(1, Some(b"x")).unwrap();
        store.set_next_target(5).unwrap();
        store.reset().unwrap();
        assert_eq!((store.next_sender(), store.next_target()), (1, 1));
        store.record_sent(1, Some(b"y")).unwrap();
        drop(store);
        let store = Store::open(dir.path(), "A B", "S").unwrap();
        assert_eq!(store.sent_between(1, 1).unwrap(), vec![(1, b"y".to_vec())]);
        assert!(store.path().to_string_lossy().contains("A%20B-S"));
    }
}
