//! Loopback ports for the processes the harness starts.
//!
//! A port chosen by binding `:0` comes from the kernel's ephemeral range, the same range every
//! outgoing connection's local port comes from. Between choosing a port and the started
//! process binding it (seconds, for a Go manager), one of the many client connections the
//! tests open can take it, and the process exits with "address already in use". Ports are
//! therefore chosen below the ephemeral range, where no outgoing connection is ever given a
//! port, from a start that differs per process and call so that concurrent tests rarely probe
//! the same ones. What remains (another test choosing the same port in the same window) is
//! rare, and the callers retry on it. Within one process a port is handed out once only: two
//! calls a moment apart (a webhook port, then a metrics port) could otherwise draw starts that
//! land on the same free port, and the second server would find it taken by the first.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// Every port this process has handed out: never handed out again.
static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// Lowest port handed out: above the well-known and most registered service ports.
const LOWEST: u16 = 10_000;
/// CAPD's in-memory backend: its debug port, then its workload clusters' API servers from
/// 20000 (`DefaultDebugPort`, `DefaultMinPort` of `test/infrastructure/inmemory/pkg/server`).
/// CAPD's in-memory backend's debug port: fixed upstream, so one CAPD per machine.
pub const CAPD_DEBUG_PORT: u16 = 19000;

const CAPD_FIRST: u16 = CAPD_DEBUG_PORT;

/// Where the ephemeral range starts (Linux's default when `/proc` does not say).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A start offset that differs between processes and between calls in one process.
fn seed() -> u32 {
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(nanos)
        .wrapping_add(call.wrapping_mul(40_503))
}

/// The first port not handed out: the ephemeral range or CAPD's ports, whichever is lower.
fn top() -> u16 {
    ephemeral_start().clamp(LOWEST + 1024, CAPD_FIRST)
}

/// `n` distinct ports that are free on every interface now and lie below the ephemeral
/// range and CAPD's. Each is held until all are chosen.
pub fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let top = top();
    let span = u32::from(top - LOWEST);
    let start = seed() % span;
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    let mut held = Vec::with_capacity(n);
    for step in 0..span {
        if held.len() == n {
            break;
        }
        let port = LOWEST + ((start + step) % span) as u16;
        if given.contains(&port) {
            continue;
        }
        // The whole-host address: a manager's webhook server listens on every interface.
        if let Ok(l) = TcpListener::bind(("0.0.0.0", port)) {
            held.push(l);
        }
    }
    if held.len() < n {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("fewer than {n} free ports between {LOWEST} and {top}"),
        ));
    }
    let ports = held
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<std::io::Result<Vec<u16>>>()?;
    given.extend(&ports);
    Ok(ports)
}

/// A port that was free a moment ago, outside the range client connections take theirs from.
pub fn free_port() -> u16 {
    free_ports(1).expect("a free port")[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_outside_the_ephemeral_range_and_capds() {
        let ports = free_ports(16).unwrap();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), 16, "{ports:?}");
        let top = ephemeral_start().min(CAPD_FIRST);
        for p in &ports {
            assert!((LOWEST..top).contains(p), "{p} outside {LOWEST}..{top}");
            TcpListener::bind(("127.0.0.1", *p)).expect("a chosen port is free again");
        }
    }

    #[test]
    fn a_port_is_handed_out_once_per_process() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let p = free_port();
            assert!(seen.insert(p), "{p} handed out twice");
        }
    }

    #[test]
    fn a_taken_port_is_skipped() {
        // Taken by someone else: bound here directly, never handed out by this module.
        let taken = (LOWEST..top())
            .rev()
            .find_map(|p| TcpListener::bind(("0.0.0.0", p)).ok())
            .unwrap();
        let port = taken.local_addr().unwrap().port();
        // Whatever start the next call draws, it never hands out the taken port.
        for _ in 0..50 {
            assert!(!free_ports(8).unwrap().contains(&port));
        }
    }
}
