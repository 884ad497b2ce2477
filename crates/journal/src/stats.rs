//! Counters and histograms the node's `/metrics` reads: fdatasync latency per sync,
//! group sizes per group commit.
//!
//! [`Log2Histogram`] has one bucket per power of two, a fixed 65 counters: recording is
//! O(1) and allocation-free, a copy is cheap enough to publish after every group, and a
//! quantile is exact to within a factor of two, enough to see a disk's p50 from its p99.

/// Buckets of a [`Log2Histogram`]: 0, then one per bit length 1..=64.
pub const LOG2_HISTOGRAM_BUCKETS: usize = 65;

/// A histogram of `u64` values in power-of-two buckets, with exact count, sum and max.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log2Histogram {
    /// `counts[b]` holds values whose bit length is `b` (`counts[0]` holds zeros), that is
    /// values in `2^(b-1) ..= 2^b - 1`.
    pub counts: [u64; LOG2_HISTOGRAM_BUCKETS],
    /// Values recorded.
    pub count: u64,
    /// Sum of the values, saturating.
    pub sum: u64,
    /// Largest value.
    pub max: u64,
}

impl Default for Log2Histogram {
    fn default() -> Self {
        Self { counts: [0; LOG2_HISTOGRAM_BUCKETS], count: 0, sum: 0, max: 0 }
    }
}

impl Log2Histogram {
    /// Records one value.
    pub fn record(&mut self, value: u64) {
        let bucket = (u64::BITS - value.leading_zeros()) as usize;
        self.counts[bucket] += 1;
        self.count += 1;
        self.sum = self.sum.saturating_add(value);
        self.max = self.max.max(value);
    }

    /// An upper bound of the `per_mille`-th quantile (500: median, 990: p99): the top of
    /// the bucket holding it, capped by the maximum. Zero when empty.
    pub fn quantile_upper_bound(&self, per_mille: u32) -> u64 {
        assert!(per_mille <= 1000, "per_mille {per_mille} above 1000");
        let rank = (self.count * u64::from(per_mille)).div_ceil(1000).max(1);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let bucket_top = if bucket == 0 { 0 } else { u64::MAX >> (u64::BITS as usize - bucket) };
                return bucket_top.min(self.max);
            }
        }
        0
    }

    /// Mean value, rounded down; zero when empty.
    pub fn mean(&self) -> u64 {
        self.sum.checked_div(self.count).unwrap_or(0)
    }
}

/// What one [`Journal`](crate::Journal) has done since it was opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// `fdatasync` calls on segment data (one per [`Journal::sync`](crate::Journal::sync)
    /// with new data, plus one per segment roll).
    pub syncs: u64,
    /// Latency of each of those calls, in nanoseconds.
    pub sync_latency_ns: Log2Histogram,
    /// Latency of the most recent one, in nanoseconds.
    pub sync_latency_ns_last: u64,
    /// Records appended.
    pub records_appended: u64,
    /// Bytes written to segments, headers included.
    pub bytes_appended: u64,
    /// Segments created by rolling over.
    pub segments_rolled: u64,
    /// Snapshots written.
    pub snapshots_written: u64,
}

/// What a [`GroupCommit`](crate::GroupCommit) has done since it started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// The journal's own counters, as of the last group.
    pub journal: JournalStats,
    /// Groups made durable (one `fdatasync` each, plus one per segment roll).
    pub groups: u64,
    /// Of those, the groups a producer committed itself (one batch each; see
    /// [`GroupCommitConfig::inline_commit_max_us`](crate::GroupCommitConfig)).
    pub inline_groups: u64,
    /// Batches acknowledged.
    pub batches: u64,
    /// Entries per group.
    pub group_entries: Log2Histogram,
    /// Highest durable index.
    pub durable_index: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_bound_values() {
        let mut histogram = Log2Histogram::default();
        assert_eq!(histogram.quantile_upper_bound(500), 0);
        for value in 1..=100u64 {
            histogram.record(value);
        }
        assert_eq!((histogram.count, histogram.sum, histogram.max), (100, 5050, 100));
        // The median, 50, lies in bucket 32..=63.
        assert_eq!(histogram.quantile_upper_bound(500), 63);
        assert_eq!(histogram.quantile_upper_bound(990), 100);
        assert_eq!(histogram.quantile_upper_bound(0), 1);
        assert_eq!(histogram.mean(), 50);
        histogram.record(0);
        histogram.record(u64::MAX);
        assert_eq!(histogram.counts[0], 1);
        assert_eq!(histogram.counts[64], 1);
    }
}
