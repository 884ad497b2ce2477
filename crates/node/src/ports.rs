//! Picking loopback ports for nodes started on addresses chosen beforehand (a cluster's
//! members must know each other's addresses before any of them listens): the demo's
//! nodes and the tests' clusters.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

/// Where the scan runs: below Linux's ephemeral range (32768 and up by default). A port
/// from that range, bound to find it free and released, can be taken by any outgoing
/// connection (nodes dial each other all the time) before the node meant to listen on
/// it starts; and two binds to port 0 in a row may hand out the same port.
const FIRST: u32 = 20_000;
const SPAN: u32 = 12_000;

/// A loopback TCP port free now, and not handed out before by this process. Each
/// process starts its scan at its own offset, so concurrent test processes rarely probe
/// the same ports; a port in use is skipped.
pub fn free_local_port() -> io::Result<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let offset = (std::process::id() % 600) * 20;
    for _ in 0..SPAN {
        let port = (FIRST + (offset + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::new(io::ErrorKind::AddrInUse, format!("no free port in {FIRST}..{}", FIRST + SPAN)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_below_the_ephemeral_range_and_free() {
        let ports: Vec<u16> = (0..50).map(|_| free_local_port().unwrap()).collect();
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len());
        assert!(ports.iter().all(|&p| (FIRST..FIRST + SPAN).contains(&u32::from(p))));
        for port in ports {
            drop(std::net::TcpListener::bind(("127.0.0.1", port)).expect("free when handed out"));
        }
    }
}
