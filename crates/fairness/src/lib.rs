//! # bourse-fairness
//!
//! Fair sequencing and hold-and-release (see docs/ARCHITECTURE.md, "Fairness", and the
//! definitions in the fairness notes):
//!
//! - [`sequencer`]: the leader's resequencing buffer, ordering orders by their gateway timestamp
//!   (delay buffer and watermark merge), with [`Resequencer`].
//! - [`adapt`]: an adaptive hold or window following the observed delays ([`Adaptive`]).
//! - [`hold`]: the gateway's hold-and-release queue for market data, [`HoldQueue`].
//! - [`metrics`]: inbound unfairness (`iur_prev`, `iur_hwm`) and outbound unfairness and delivery
//!   spread ([`Unfairness`], [`Spread`]).
//! - [`clock`]: skewed gateway clocks ([`SkewedClock`]), the true clock ([`true_now_ns`]) and
//!   where a component reads it ([`Clock`]: the system's, or a simulator's [`TimeSource`]).
//! - [`inject`]: seeded per-gateway delay and clock-error profiles parsed from a spec string, and
//!   [`DelayLine`], a thread that applies a delay to a stream of items.
//! - [`precise`]: sub-millisecond sleeps ([`sleep_until_ns`], [`lower_timer_slack`]) and real-time
//!   priority ([`run_realtime`]).
//!
//! Times are `u64` nanoseconds since the Unix epoch throughout. The sequencer, hold queue and
//! metrics are pure (time is passed in); only `clock`, `inject` and `precise` touch the system.

/// Orders `$entry<T>` by its `key()` in reverse, so that std's max-heap `BinaryHeap` pops
/// the smallest key first (ties as the key breaks them). Equality is equality of keys.
macro_rules! smallest_key_first {
    ($entry:ident) => {
        impl<T> Ord for $entry<T> {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                other.key().cmp(&self.key())
            }
        }

        impl<T> PartialOrd for $entry<T> {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl<T> PartialEq for $entry<T> {
            fn eq(&self, other: &Self) -> bool {
                self.key() == other.key()
            }
        }

        impl<T> Eq for $entry<T> {}
    };
}

pub mod adapt;
pub mod clock;
pub mod hold;
pub mod inject;
pub mod metrics;
pub mod precise;
pub mod sequencer;

pub use adapt::{Adaptive, AdaptiveConfig};
pub use clock::{true_now_ns, Clock, SkewedClock, TimeSource};
pub use hold::{Due, HoldQueue};
pub use inject::{
    ClockModel, ClockPreset, ClockSpec, DelayLine, DelayModel, Jitter, Profile, ProfileSpec, SpecError, Spikes,
};
pub use metrics::{Delivery, Observation, Ratio, Spread, SpreadSummary, Unfairness};
pub use precise::{lower_timer_slack, run_realtime, sleep_until_ns};
pub use sequencer::{Full, Released, Resequencer, SequencerStats, Stamp};
