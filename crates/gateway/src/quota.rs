//! What each key may hold open at once on a gateway (order-entry sessions, market data
//! subscriptions), and for subscriptions how many in all: a key that opens without end
//! is refused with `RESOURCE_EXHAUSTED` and the limit it hit, not served until memory
//! runs out. The gateway's own front ends (their process keys, which carry many users,
//! and an open gateway's sessions) are not counted per key.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

use crate::keys::Principal;
use crate::metrics::Metrics;

/// Holdings per key against `per_key_max`, and in all against `total_max`.
pub(crate) struct Quota {
    what: &'static str,
    per_key_max: usize,
    total_max: usize,
    held: Mutex<Held>,
    /// Counts the refusals (a counter of the gateway's metrics).
    metrics: Arc<Metrics>,
    refused: fn(&Metrics) -> &AtomicU64,
}

#[derive(Default)]
struct Held {
    by_key: FxHashMap<String, usize>,
    total: usize,
}

/// One holding; given back when dropped.
pub(crate) struct Hold {
    quota: Arc<Quota>,
    key: Option<String>,
}

impl Quota {
    pub(crate) fn new(
        what: &'static str,
        per_key_max: usize,
        total_max: usize,
        metrics: Arc<Metrics>,
        refused: fn(&Metrics) -> &AtomicU64,
    ) -> Arc<Quota> {
        Arc::new(Quota { what, per_key_max, total_max, held: Mutex::default(), metrics, refused })
    }

    /// Takes one for `principal`, or says which limit is reached.
    pub(crate) fn take(self: &Arc<Self>, principal: &Principal) -> Result<Hold, tonic::Status> {
        let mut held = self.held.lock().expect("quota lock");
        if held.total >= self.total_max {
            (self.refused)(&self.metrics).fetch_add(1, Ordering::Relaxed);
            return Err(tonic::Status::resource_exhausted(format!(
                "the gateway serves {} {} at most: try again later",
                self.total_max, self.what
            )));
        }
        let key = (!principal.is_own()).then(|| principal.name.clone());
        if let Some(key) = &key {
            let mine = held.by_key.entry(key.clone()).or_default();
            if *mine >= self.per_key_max {
                (self.refused)(&self.metrics).fetch_add(1, Ordering::Relaxed);
                return Err(tonic::Status::resource_exhausted(format!(
                    "this key holds {} {} already, its most: close one first",
                    self.per_key_max, self.what
                )));
            }
            *mine += 1;
        }
        held.total += 1;
        Ok(Hold { quota: Arc::clone(self), key })
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut held = self.quota.held.lock().expect("quota lock");
        held.total -= 1;
        if let Some(key) = &self.key {
            if let Some(mine) = held.by_key.get_mut(key) {
                *mine -= 1;
                if *mine == 0 {
                    held.by_key.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{entry_for, KeyStore};

    #[test]
    fn a_key_holds_its_most_and_the_gateway_its_total() {
        let store = KeyStore::from_entries(vec![
            entry_for("k1", "alice", vec![], false),
            entry_for("k2", "bob", vec![], false),
        ])
        .unwrap();
        let (alice, bob) = (store.verify("k1").unwrap(), store.verify("k2").unwrap());
        let metrics = Arc::new(Metrics::default());
        let quota = Quota::new("subscriptions", 2, 3, Arc::clone(&metrics), |m| &m.subscriptions_refused);
        let first = quota.take(&alice).unwrap();
        let _second = quota.take(&alice).unwrap();
        let refused = quota.take(&alice).err().unwrap();
        assert!(refused.message().contains("this key holds 2 subscriptions"), "{refused:?}");
        let _bob = quota.take(&bob).unwrap();
        let full = quota.take(&bob).err().unwrap();
        assert!(full.message().contains("serves 3 subscriptions at most"), "{full:?}");
        drop(first);
        assert!(quota.take(&alice).is_ok(), "a slot given back is free again");
        assert_eq!(metrics.subscriptions_refused.load(Ordering::Relaxed), 2);
        // The gateway's own front ends carry many users: not held to one key's most.
        let open = Principal::open();
        let quota = Quota::new("sessions", 1, 10, metrics, |m| &m.sessions_refused_per_key);
        let _a = quota.take(&open).unwrap();
        assert!(quota.take(&open).is_ok());
    }
}
