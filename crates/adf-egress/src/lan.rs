//! The LAN peers this process's daemon discovered over mDNS: the exact `ip:port` of each
//! peer daemon's mesh listener. They are rule 5's one exception (see [`crate::Policy`]): a
//! private address is reachable without `security.allow_local_fetch` only when it is one of
//! these endpoints and the request is one of the public mesh routes (`POST …/inbox`,
//! `GET …/card`, `GET …/health`).
//!
//! Why exact endpoints and only mesh routes: an agent whose tier is `lan` must be able to
//! message (and read the card of) an agent on another machine of the LAN, but admitting the
//! whole private range would let every agent's `fetch` probe the owner's router, printer and
//! NAS. An announced endpoint is what its daemon publishes for exactly those routes; any
//! other path or port on the same host stays refused. Rules 1 and 2 still come first, so an
//! announcement naming a metadata address or a control API on this machine admits nothing.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, PoisonError};

use crate::rules::canonical;

/// Announced endpoints, each with the number of discoveries that hold it (several peers may
/// announce the same endpoint while one of them goes away).
static PEERS: Mutex<BTreeMap<SocketAddr, usize>> = Mutex::new(BTreeMap::new());

fn key(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(canonical(addr.ip()), addr.port())
}

/// Records `addr` as a discovered peer's mesh endpoint until the returned guard is dropped.
#[must_use = "the endpoint is forgotten when the guard is dropped"]
pub fn admit_peer(addr: SocketAddr) -> PeerEndpoint {
    let addr = key(addr);
    *PEERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(addr)
        .or_insert(0) += 1;
    PeerEndpoint { addr }
}

/// Whether `ip:port` is a discovered peer's mesh endpoint.
pub fn is_peer(ip: IpAddr, port: u16) -> bool {
    PEERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains_key(&key(SocketAddr::new(ip, port)))
}

/// A discovered endpoint held in the registry; dropping it forgets the endpoint (once no
/// other discovery holds it).
#[derive(Debug)]
pub struct PeerEndpoint {
    addr: SocketAddr,
}

impl PeerEndpoint {
    /// The endpoint held.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for PeerEndpoint {
    fn drop(&mut self) {
        let mut peers = PEERS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = peers.get_mut(&self.addr) {
            *count -= 1;
            if *count == 0 {
                peers.remove(&self.addr);
            }
        }
    }
}

/// Whether this process runs in a named network namespace, one `ip netns add` created (its
/// handle is under `/run/netns/`) and `ip netns exec` joined: the LAN tests run their daemons
/// in such namespaces, whose only interfaces are those the test gave them. The machine's own
/// namespace is not named there. `false` when it cannot be told (not Linux, unreadable).
#[cfg(unix)]
pub fn in_separate_network_namespace() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(own) = std::fs::metadata("/proc/self/ns/net") else {
        return false;
    };
    let Ok(named) = std::fs::read_dir("/run/netns") else {
        return false;
    };
    named.flatten().any(|entry| {
        std::fs::metadata(entry.path())
            .is_ok_and(|ns| ns.dev() == own.dev() && ns.ino() == own.ino())
    })
}

/// Elsewhere no process runs in a named network namespace.
#[cfg(not(unix))]
pub fn in_separate_network_namespace() -> bool {
    false
}
