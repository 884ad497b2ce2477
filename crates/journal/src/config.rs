//! The journal's bounds, validated once at open.
//!
//! Every size the journal reads into memory has a named bound here: a record's payload
//! (`payload_bytes_max`), a segment file (`segment_bytes_max`, read whole at recovery) and
//! a snapshot (`snapshot_bytes_max`). The `*_LIMIT` constants bound the bounds, so that a
//! configuration cannot ask the journal to allocate without limit.

use crate::error::{Error, Result};

/// Smallest `segment_bytes_max`: small segments are for tests of rolling.
pub const SEGMENT_BYTES_MIN: u64 = 1024;
/// Largest `segment_bytes_max`: recovery reads one segment into memory at a time.
pub const SEGMENT_BYTES_LIMIT: u64 = 1 << 30;
/// Largest `payload_bytes_max`.
pub const PAYLOAD_BYTES_LIMIT: u32 = 64 << 20;
/// Largest `snapshot_bytes_max`: a snapshot is read into memory whole.
pub const SNAPSHOT_BYTES_LIMIT: u64 = 16 << 30;
/// Largest snapshot index: far beyond any real log, low enough that `index + 1`
/// arithmetic can never overflow.
pub const INDEX_MAX: u64 = 1 << 62;
/// Snapshot files kept; older ones are deleted. The log reaches back to the oldest kept
/// snapshot, so that a corrupt newest snapshot can fall back to the one before it.
pub const SNAPSHOTS_KEPT: usize = 2;

/// Sizes that bound a journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalConfig {
    /// A segment rolls over to a new file when the next record would take it past this
    /// size. A segment always holds at least one record, so a segment with one record
    /// larger than this bound exceeds it.
    pub segment_bytes_max: u64,
    /// Largest payload of one record; larger appends are rejected with
    /// [`Error::PayloadTooLarge`].
    pub payload_bytes_max: u32,
    /// Largest snapshot.
    pub snapshot_bytes_max: u64,
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self { segment_bytes_max: 64 << 20, payload_bytes_max: 1 << 20, snapshot_bytes_max: 1 << 30 }
    }
}

impl JournalConfig {
    /// Checks every field against its bounds.
    pub fn validate(&self) -> Result<()> {
        config_check_range("segment_bytes_max", self.segment_bytes_max, SEGMENT_BYTES_MIN, SEGMENT_BYTES_LIMIT)?;
        config_check_range("payload_bytes_max", u64::from(self.payload_bytes_max), 1, u64::from(PAYLOAD_BYTES_LIMIT))?;
        config_check_range("snapshot_bytes_max", self.snapshot_bytes_max, 1, SNAPSHOT_BYTES_LIMIT)
    }
}

/// Rejects `value` outside `min..=max` with the field's name.
pub(crate) fn config_check_range(field: &'static str, value: u64, min: u64, max: u64) -> Result<()> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(Error::ConfigInvalid { field, reason: format!("{value} is outside {min}..={max}") })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        JournalConfig::default().validate().unwrap();
    }

    #[test]
    fn out_of_range_is_named() {
        let config = JournalConfig { segment_bytes_max: 10, ..JournalConfig::default() };
        match config.validate() {
            Err(Error::ConfigInvalid { field, .. }) => assert_eq!(field, "segment_bytes_max"),
            other => panic!("expected ConfigInvalid, got {other:?}"),
        }
        let config = JournalConfig { payload_bytes_max: 0, ..JournalConfig::default() };
        assert!(matches!(config.validate(), Err(Error::ConfigInvalid { field: "payload_bytes_max", .. })));
    }
}
