//! What LAN discovery (`crate::lan`) found: the peer daemons announcing themselves over mDNS
//! and the signed cards of their `lan`/`public` agents, fetched from each peer. A leaf: the
//! mesh reads it for `agent_discover {scope: "all"}` and the API for `GET
//! /network/mesh/lan-addresses` and `/network/mesh/discovered-runtimes`.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use serde_json::{Value, json};

/// One agent a peer announced: (handle, tier, DID).
pub(crate) type Announced = (String, String, String);

/// One discovered peer daemon.
#[derive(Debug)]
pub(crate) struct Peer {
    /// Its mDNS instance name.
    pub(crate) name: String,
    /// Its mesh base URL (`http://ip:port`).
    pub(crate) base_url: String,
    /// The handles it announced.
    pub(crate) handles: Vec<String>,
    /// Each announced agent as (handle, tier, DID).
    pub(crate) announced: Vec<Announced>,
    /// The verified cards fetched from it, each with `visibility`, `in_subdirectory` and
    /// `source` set as `agent_discover` lists them.
    pub(crate) cards: Vec<Value>,
    /// Keeps the peer's endpoint admitted by the egress policy while it is known.
    pub(crate) _admitted: adf_egress::lan::PeerEndpoint,
}

/// The peers of one daemon, by mDNS full name.
#[derive(Debug, Default)]
pub(crate) struct LanPeers {
    peers: Mutex<BTreeMap<String, Peer>>,
    /// This daemon's own LAN addresses (what it announces); `None` while discovery is off.
    addresses: Mutex<Option<Vec<String>>>,
}

impl LanPeers {
    fn peers(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Peer>> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Turns discovery on, announcing `addresses`.
    pub(crate) fn set_addresses(&self, addresses: Vec<String>) {
        *self
            .addresses
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(addresses);
    }

    /// Whether discovery is on.
    pub(crate) fn enabled(&self) -> bool {
        self.addresses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// The addresses announced (none while discovery is off).
    pub(crate) fn addresses(&self) -> Vec<String> {
        self.addresses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_default()
    }

    pub(crate) fn upsert(&self, fullname: String, peer: Peer) {
        self.peers().insert(fullname, peer);
    }

    pub(crate) fn remove(&self, fullname: &str) {
        self.peers().remove(fullname);
    }

    /// The full names, base URLs and announced agents of the peers known now (for a refresh
    /// of their cards).
    pub(crate) fn known(&self) -> Vec<(String, String, Vec<Announced>)> {
        self.peers()
            .iter()
            .map(|(fullname, p)| (fullname.clone(), p.base_url.clone(), p.announced.clone()))
            .collect()
    }

    /// Replaces the cards of a known peer (a peer gone meanwhile stays gone).
    pub(crate) fn set_cards(&self, fullname: &str, cards: Vec<Value>) {
        if let Some(peer) = self.peers().get_mut(fullname) {
            peer.cards = cards;
        }
    }

    /// Every LAN peer's cards.
    pub(crate) fn cards(&self) -> Vec<Value> {
        self.peers()
            .values()
            .flat_map(|p| p.cards.iter().cloned())
            .collect()
    }

    /// The peers as the API lists them.
    pub(crate) fn describe(&self) -> Vec<Value> {
        self.peers()
            .values()
            .map(|p| {
                json!({
                    "name": p.name,
                    "url": p.base_url,
                    "agents": p.handles,
                    "cards": p.cards.len(),
                })
            })
            .collect()
    }
}
