//! Fresh client ids.
//!
//! The exactly-once key is `(client id, seq)` and a [`Client`](crate::Client) numbers its
//! commands from 1, so a client id must never be reused by a process that does not know
//! how far the previous user got: every new process takes a new random id.

use bourse_engine::ClientId;
use rand::rngs::OsRng;
use rand::RngCore;

/// A client id drawn from the operating system's randomness, never 0. Two processes
/// collide with probability about n²/2⁶⁵ for n clients ever made.
pub fn random_client_id() -> ClientId {
    loop {
        let id = OsRng.next_u64();
        if id != 0 {
            return ClientId(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_differ() {
        let ids: std::collections::BTreeSet<u64> = (0..100).map(|_| random_client_id().0).collect();
        assert_eq!(ids.len(), 100);
        assert!(!ids.contains(&0));
    }
}
