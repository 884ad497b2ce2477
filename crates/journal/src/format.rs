//! The on-disk byte layout: segment header, record, snapshot header.
//!
//! All integers are little-endian. All checksums are CRC32C (Castagnoli), hardware
//! accelerated where the processor has it.
//!
//! ## Segment file `<first_index:020>.log`
//!
//! A segment header, then records back to back, nothing else.
//!
//! | bytes  | field          | meaning                                           |
//! |--------|----------------|---------------------------------------------------|
//! | 0..8   | magic          | `b"BRSJRNL\0"`                                    |
//! | 8..12  | version        | [`FORMAT_VERSION`] (1)                            |
//! | 12..20 | first_index    | index of the segment's first record (= file name) |
//! | 20..24 | header_crc32c  | CRC32C of bytes 0..20                             |
//!
//! ## Record
//!
//! | bytes    | field          | meaning                                          |
//! |----------|----------------|--------------------------------------------------|
//! | 0..4     | header_crc32c  | CRC32C of bytes 4..32                            |
//! | 4..8     | payload_bytes  | payload length, ≤ `PAYLOAD_BYTES_LIMIT` (64 MiB) |
//! | 8..16    | index          | consecutive from the segment's first_index       |
//! | 16..24   | timestamp_ns   | the leader's timestamp                           |
//! | 24..28   | payload_crc32c | CRC32C of the payload                            |
//! | 28..32   | reserved       | zero                                             |
//! | 32..32+n | payload        | opaque bytes                                     |
//!
//! Appends are bounded by the configured `payload_bytes_max` (default 1 MiB); readers
//! accept anything up to the format's limit, so that lowering the configuration never
//! turns records written under a higher one into a tail to cut.
//!
//! The header checksum covers the header and, through `payload_crc32c`, the payload. Two
//! checksums rather than one let recovery trust a length before it reads the payload:
//! a valid header whose payload runs past the end of the file is a torn write, while a
//! header that fails its checksum may hold any length at all. They also let recovery
//! search the bytes after a bad record for a later valid one, which is what tells a
//! corrupt tail (cut it) from corruption in the middle (stop).
//!
//! ## Snapshot file `snapshot-<index:020>.snap`
//!
//! | bytes    | field          | meaning                                            |
//! |----------|----------------|----------------------------------------------------|
//! | 0..8     | magic          | `b"BRSSNAP\0"`                                     |
//! | 8..12    | version        | [`FORMAT_VERSION`] (1)                             |
//! | 12..16   | crc32c         | CRC32C of bytes 0..12, then 16..32, then payload   |
//! | 16..24   | index          | last log index the snapshot's state includes       |
//! | 24..32   | payload_bytes  | snapshot length; the file is exactly 32 + this     |
//! | 32..     | payload        | opaque state bytes                                 |
//!
//! Complexity: encoding and decoding are linear in the payload (one CRC pass).

use crate::error::RecordFault;

/// Version written in every segment and snapshot header.
pub const FORMAT_VERSION: u32 = 1;
/// First bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"BRSJRNL\0";
/// First bytes of every snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"BRSSNAP\0";
/// Length of a segment header.
pub const SEGMENT_HEADER_BYTES: usize = 24;
/// Length of a record header; a record is this plus its payload.
pub const RECORD_HEADER_BYTES: usize = 32;
/// Length of a snapshot header.
pub const SNAPSHOT_HEADER_BYTES: usize = 32;

/// Reads a little-endian `u32` at `at`; the caller has checked the length.
fn le_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

/// Reads a little-endian `u64` at `at`; the caller has checked the length.
pub(crate) fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// The segment header for a segment starting at `first_index`.
pub(crate) fn segment_header_encode(first_index: u64) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut header = [0u8; SEGMENT_HEADER_BYTES];
    header[0..8].copy_from_slice(&SEGMENT_MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[12..20].copy_from_slice(&first_index.to_le_bytes());
    let crc = crc32c::crc32c(&header[0..20]);
    header[20..24].copy_from_slice(&crc.to_le_bytes());
    header
}

/// The first index a segment header declares, or why it is not a segment header.
pub(crate) fn segment_header_decode(bytes: &[u8]) -> Result<u64, &'static str> {
    if bytes.len() < SEGMENT_HEADER_BYTES {
        return Err("file shorter than a segment header");
    }
    if bytes[0..8] != SEGMENT_MAGIC {
        return Err("magic mismatch");
    }
    if crc32c::crc32c(&bytes[0..20]) != le_u32(bytes, 20) {
        return Err("header checksum mismatch");
    }
    if le_u32(bytes, 8) != FORMAT_VERSION {
        return Err("unsupported format version");
    }
    Ok(le_u64(bytes, 12))
}

/// A record read back from bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordView<'a> {
    pub index: u64,
    pub timestamp_ns: u64,
    pub payload: &'a [u8],
}

impl RecordView<'_> {
    /// Bytes the record takes on disk.
    pub fn record_bytes(&self) -> usize {
        RECORD_HEADER_BYTES + self.payload.len()
    }
}

/// Appends one encoded record to `buffer`. The caller has bounded the payload.
pub(crate) fn record_encode(buffer: &mut Vec<u8>, index: u64, timestamp_ns: u64, payload: &[u8]) {
    let payload_bytes = u32::try_from(payload.len()).expect("payload bounded by payload_bytes_max");
    let mut header = [0u8; RECORD_HEADER_BYTES];
    header[4..8].copy_from_slice(&payload_bytes.to_le_bytes());
    header[8..16].copy_from_slice(&index.to_le_bytes());
    header[16..24].copy_from_slice(&timestamp_ns.to_le_bytes());
    header[24..28].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let header_crc = crc32c::crc32c(&header[4..RECORD_HEADER_BYTES]);
    header[0..4].copy_from_slice(&header_crc.to_le_bytes());
    buffer.extend_from_slice(&header);
    buffer.extend_from_slice(payload);
}

/// Decodes the record at the start of `bytes`, checking both checksums.
pub(crate) fn record_decode(bytes: &[u8], payload_bytes_max: u32) -> Result<RecordView<'_>, RecordFault> {
    if bytes.len() < RECORD_HEADER_BYTES {
        return Err(RecordFault::HeaderIncomplete { bytes_available: bytes.len() });
    }
    if crc32c::crc32c(&bytes[4..RECORD_HEADER_BYTES]) != le_u32(bytes, 0) {
        return Err(RecordFault::HeaderChecksum);
    }
    if le_u32(bytes, 28) != 0 {
        return Err(RecordFault::ReservedNonZero);
    }
    let payload_bytes = le_u32(bytes, 4);
    if payload_bytes > payload_bytes_max {
        return Err(RecordFault::PayloadTooLarge { payload_bytes });
    }
    let payload_end = RECORD_HEADER_BYTES + payload_bytes as usize;
    if bytes.len() < payload_end {
        let bytes_available = bytes.len() - RECORD_HEADER_BYTES;
        return Err(RecordFault::PayloadIncomplete { payload_bytes, bytes_available });
    }
    let payload = &bytes[RECORD_HEADER_BYTES..payload_end];
    if crc32c::crc32c(payload) != le_u32(bytes, 24) {
        return Err(RecordFault::PayloadChecksum);
    }
    Ok(RecordView { index: le_u64(bytes, 8), timestamp_ns: le_u64(bytes, 16), payload })
}

/// The header of a snapshot of `payload` at `index`.
pub(crate) fn snapshot_header_encode(index: u64, payload: &[u8]) -> [u8; SNAPSHOT_HEADER_BYTES] {
    let mut header = [0u8; SNAPSHOT_HEADER_BYTES];
    header[0..8].copy_from_slice(&SNAPSHOT_MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&index.to_le_bytes());
    header[24..32].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    let crc = snapshot_crc(&header, payload);
    header[12..16].copy_from_slice(&crc.to_le_bytes());
    header
}

/// The snapshot checksum: header without its checksum field, then the payload.
fn snapshot_crc(header: &[u8], payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&header[0..12]);
    let crc = crc32c::crc32c_append(crc, &header[16..SNAPSHOT_HEADER_BYTES]);
    crc32c::crc32c_append(crc, payload)
}

/// The index and payload of a whole snapshot file, or why it is invalid.
pub(crate) fn snapshot_decode(bytes: &[u8]) -> Result<(u64, &[u8]), &'static str> {
    if bytes.len() < SNAPSHOT_HEADER_BYTES {
        return Err("file shorter than a snapshot header");
    }
    if bytes[0..8] != SNAPSHOT_MAGIC {
        return Err("magic mismatch");
    }
    if le_u32(bytes, 8) != FORMAT_VERSION {
        return Err("unsupported format version");
    }
    let payload_bytes = le_u64(bytes, 24);
    if (bytes.len() - SNAPSHOT_HEADER_BYTES) as u64 != payload_bytes {
        return Err("file length does not match the declared length");
    }
    let payload = &bytes[SNAPSHOT_HEADER_BYTES..];
    if snapshot_crc(bytes, payload) != le_u32(bytes, 12) {
        return Err("checksum mismatch");
    }
    Ok((le_u64(bytes, 16), payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip() {
        let mut buffer = Vec::new();
        record_encode(&mut buffer, 42, 1_700_000_000_000_000_000, b"payload");
        assert_eq!(buffer.len(), RECORD_HEADER_BYTES + 7);
        let record = record_decode(&buffer, 1024).unwrap();
        assert_eq!(
            (record.index, record.timestamp_ns, record.payload),
            (42, 1_700_000_000_000_000_000, &b"payload"[..])
        );
        assert_eq!(record.record_bytes(), buffer.len());
    }

    #[test]
    fn record_faults() {
        let mut buffer = Vec::new();
        record_encode(&mut buffer, 1, 2, b"abc");
        assert_eq!(record_decode(&buffer[..10], 1024), Err(RecordFault::HeaderIncomplete { bytes_available: 10 }));
        assert_eq!(
            record_decode(&buffer[..33], 1024),
            Err(RecordFault::PayloadIncomplete { payload_bytes: 3, bytes_available: 1 })
        );
        assert_eq!(record_decode(&buffer, 2), Err(RecordFault::PayloadTooLarge { payload_bytes: 3 }));
        let mut flipped = buffer.clone();
        flipped[9] ^= 1;
        assert_eq!(record_decode(&flipped, 1024), Err(RecordFault::HeaderChecksum));
        let mut flipped = buffer.clone();
        flipped[RECORD_HEADER_BYTES] ^= 1;
        assert_eq!(record_decode(&flipped, 1024), Err(RecordFault::PayloadChecksum));
    }

    #[test]
    fn segment_header_round_trip() {
        let header = segment_header_encode(77);
        assert_eq!(segment_header_decode(&header), Ok(77));
        let mut flipped = header;
        flipped[13] ^= 0x80;
        assert_eq!(segment_header_decode(&flipped), Err("header checksum mismatch"));
    }

    #[test]
    fn snapshot_round_trip() {
        let mut file = snapshot_header_encode(9, b"state").to_vec();
        file.extend_from_slice(b"state");
        assert_eq!(snapshot_decode(&file), Ok((9, &b"state"[..])));
        file[SNAPSHOT_HEADER_BYTES] ^= 1;
        assert_eq!(snapshot_decode(&file), Err("checksum mismatch"));
        assert!(snapshot_decode(&file[..SNAPSHOT_HEADER_BYTES + 2]).is_err());
    }
}
