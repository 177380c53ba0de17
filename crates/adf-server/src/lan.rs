//! LAN discovery (`adf daemon --lan`, the tools guide's "LAN Discovery"): the daemon
//! announces its `lan` and `public` agents over mDNS as one `_adf-mesh._tcp` service and
//! browses for the same service of other daemons.
//!
//! What is announced (TXT record): `v=1`, `url=http://ip:port` (the mesh listener) and one
//! `a.<handle>=<tier> <did>` entry per announced agent. A `localhost`, `directory` or `off`
//! agent is never announced, and a LAN requester never gets its card (the card route checks
//! the requester's origin, `api/mesh_routes.rs`).
//!
//! What a peer is: a resolved service of another instance. Its endpoint (`ip:port`) is
//! admitted by the egress policy for the mesh routes only while it is known
//! (`adf_egress::lan`); the cards of its announced agents are fetched through that policy,
//! verified (signature, and the DID it announced) and kept in the mesh's
//! `lan_peers::LanPeers` for `agent_discover {scope: "all"}`. A peer whose service
//! goes away is forgotten, and its endpoint with it.
//!
//! mDNS is the daemon's own traffic (UDP 5353 multicast on the listener's interface), not an
//! agent connection: no agent code reaches it.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use mdns_sd::{IfKind, ServiceDaemon, ServiceEvent, ServiceInfo};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::error::ServerError;
use crate::lan_peers::{Announced, LanPeers, Peer};
use crate::mesh::DaemonMesh;

/// The mDNS service type every ADF daemon announces.
pub const SERVICE_TYPE: &str = "_adf-mesh._tcp.local.";

/// How often the announcer looks for a changed roster.
const ROSTER_CHECK: Duration = Duration::from_secs(2);
/// How often the announced agents are read again even when the roster did not change (a
/// visibility or handle changed in a config).
const RESCAN: Duration = Duration::from_secs(15);
/// How often peers' cards are fetched again.
const CARD_REFRESH: Duration = Duration::from_secs(10);
/// One card fetch's bound.
const CARD_TIMEOUT: Duration = Duration::from_secs(5);
/// The TXT record's budget: what fits in one mDNS packet with room for the other records.
/// Agents past it are not announced (a warning says so).
const TXT_BUDGET: usize = 1200;

/// A running announcement and browse; dropping it stops both and withdraws the service.
pub struct LanDiscovery {
    mdns: ServiceDaemon,
    fullname: String,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for LanDiscovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LanDiscovery")
            .field("fullname", &self.fullname)
            .finish_non_exhaustive()
    }
}

fn mdns_error(error: mdns_sd::Error) -> ServerError {
    ServerError::FrontDoor(format!("LAN discovery (mDNS): {error}"))
}

/// The addresses other machines reach this daemon by: the bound one, or every non-loopback
/// interface address when bound to the unspecified address.
fn lan_addresses(bound: IpAddr) -> Vec<IpAddr> {
    if !bound.is_unspecified() {
        return vec![bound];
    }
    if_addrs::get_if_addrs()
        .map(|interfaces| {
            interfaces
                .iter()
                .map(if_addrs::Interface::ip)
                .filter(|ip| !ip.is_loopback() && ip.is_ipv4() == bound.is_ipv4())
                .collect()
        })
        .unwrap_or_default()
}

impl LanDiscovery {
    /// Announces the mesh listening on `bound` and browses for peers, filling `mesh`'s LAN
    /// peers. Refused on a loopback address: nothing off this machine could reach it.
    pub(crate) fn start(mesh: Arc<DaemonMesh>, bound: SocketAddr) -> Result<Self, ServerError> {
        if bound.ip().is_loopback() {
            return Err(ServerError::FrontDoor(format!(
                "--lan announces agents to other machines, which cannot reach {bound}: listen on a LAN address (--host)"
            )));
        }
        let mdns = ServiceDaemon::new().map_err(mdns_error)?;
        if !bound.ip().is_unspecified() {
            // Only the listener's own interface: announcing on others would name an address
            // peers there cannot reach.
            mdns.disable_interface(IfKind::All).map_err(mdns_error)?;
            mdns.enable_interface(IfKind::Addr(bound.ip()))
                .map_err(mdns_error)?;
        }
        let instance = format!("adf-{}", adf_store::defaults::random_id(12));
        let fullname = format!("{instance}.{SERVICE_TYPE}");
        let addresses = lan_addresses(bound.ip());
        mesh.lan_peers()
            .set_addresses(addresses.iter().map(ToString::to_string).collect());
        let announcer = Announcer {
            mdns: mdns.clone(),
            mesh: Arc::clone(&mesh),
            instance,
            bound,
            addresses,
        };
        let browse = mdns.browse(SERVICE_TYPE).map_err(mdns_error)?;
        let peers = Arc::clone(mesh.lan_peers());
        let tasks = vec![
            tokio::spawn(announcer.run()),
            tokio::spawn(browse_peers(browse, fullname.clone(), Arc::clone(&peers))),
            tokio::spawn(refresh_cards(peers)),
        ];
        Ok(LanDiscovery {
            mdns,
            fullname,
            tasks,
        })
    }
}

impl Drop for LanDiscovery {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        // Best effort: a goodbye packet lets peers forget this daemon at once instead of
        // when the record's TTL runs out.
        let _ = self.mdns.unregister(&self.fullname);
        let _ = self.mdns.shutdown();
    }
}

/// Keeps the service's TXT record equal to the agents other machines may see.
struct Announcer {
    mdns: ServiceDaemon,
    mesh: Arc<DaemonMesh>,
    instance: String,
    bound: SocketAddr,
    addresses: Vec<IpAddr>,
}

impl Announcer {
    async fn run(self) {
        let mut announced: Option<BTreeMap<String, String>> = None;
        let mut roster = None;
        let mut scanned = tokio::time::Instant::now();
        loop {
            let now_roster = self.mesh.roster();
            if announced.is_none() || now_roster != roster || scanned.elapsed() >= RESCAN {
                roster = now_roster;
                scanned = tokio::time::Instant::now();
                let mesh = Arc::clone(&self.mesh);
                let agents = tokio::task::spawn_blocking(move || mesh.announced_agents())
                    .await
                    .unwrap_or_default();
                let txt = self.txt(&agents);
                if announced.as_ref() != Some(&txt) {
                    match self.register(&txt) {
                        Ok(()) => announced = Some(txt),
                        Err(error) => tracing::warn!(%error, "cannot announce on the LAN"),
                    }
                }
            }
            tokio::time::sleep(ROSTER_CHECK).await;
        }
    }

    fn txt(&self, agents: &[adf_runtime::messaging::LocalAgent]) -> BTreeMap<String, String> {
        let mut txt = BTreeMap::new();
        txt.insert("v".to_owned(), "1".to_owned());
        txt.insert("url".to_owned(), format!("http://{}", self.endpoint()));
        let mut used: usize = txt.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        let mut left_out = 0;
        for agent in agents {
            let key = format!("a.{}", agent.handle);
            let value = format!(
                "{} {}",
                agent.tier.as_str(),
                agent.did.as_deref().unwrap_or_default()
            );
            let size = key.len() + value.len() + 2;
            if agent.handle.is_empty() || used + size > TXT_BUDGET {
                left_out += 1;
                continue;
            }
            used += size;
            txt.insert(key, value);
        }
        if left_out > 0 {
            tracing::warn!(
                left_out,
                "not announced on the LAN: more agents than one mDNS record holds (not supported yet)"
            );
        }
        txt
    }

    /// Where peers reach the mesh: the bound address, or the first LAN address when bound to
    /// the unspecified one.
    fn endpoint(&self) -> SocketAddr {
        let ip = self.addresses.first().copied().unwrap_or(self.bound.ip());
        SocketAddr::new(ip, self.bound.port())
    }

    fn register(&self, txt: &BTreeMap<String, String>) -> Result<(), mdns_sd::Error> {
        let properties: std::collections::HashMap<String, String> =
            txt.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let host = format!("{}.local.", self.instance);
        let info = ServiceInfo::new(
            SERVICE_TYPE,
            &self.instance,
            &host,
            self.addresses.as_slice(),
            self.bound.port(),
            properties,
        )?;
        self.mdns.register(info)
    }
}

/// The handles (with tier and DID) a resolved peer announced.
fn announced_handles(service: &mdns_sd::ResolvedService) -> Vec<Announced> {
    service
        .get_properties()
        .iter()
        .filter_map(|property| {
            let handle = property.key().strip_prefix("a.")?;
            let (tier, did) = property.val_str().split_once(' ')?;
            Some((handle.to_owned(), tier.to_owned(), did.to_owned()))
        })
        .collect()
}

async fn browse_peers(events: mdns_sd::Receiver<ServiceEvent>, own: String, peers: Arc<LanPeers>) {
    while let Ok(event) = events.recv_async().await {
        match event {
            ServiceEvent::ServiceResolved(service) if service.get_fullname() != own => {
                // The URL the peer announced names the address it listens on; it must be one
                // of the addresses the service resolved to, so an announcement cannot point
                // the policy's exception at a third host.
                let resolved: Vec<IpAddr> = service
                    .get_addresses()
                    .iter()
                    .map(mdns_sd::ScopedIp::to_ip_addr)
                    .collect();
                let endpoint = service
                    .get_property_val_str("url")
                    .and_then(|url| url.strip_prefix("http://"))
                    .and_then(|authority| authority.parse::<SocketAddr>().ok())
                    .filter(|addr| resolved.contains(&addr.ip()));
                let Some(endpoint) = endpoint else {
                    tracing::debug!(
                        peer = service.get_fullname(),
                        "a LAN peer without a usable url"
                    );
                    continue;
                };
                let fullname = service.get_fullname().to_owned();
                let announced = announced_handles(&service);
                let base_url = format!("http://{endpoint}");
                let name = fullname
                    .strip_suffix(&format!(".{SERVICE_TYPE}"))
                    .unwrap_or(&fullname)
                    .to_owned();
                peers.upsert(
                    fullname.clone(),
                    Peer {
                        name,
                        base_url: base_url.clone(),
                        handles: announced.iter().map(|(h, _, _)| h.clone()).collect(),
                        announced: announced.clone(),
                        cards: Vec::new(),
                        _admitted: adf_egress::lan::admit_peer(endpoint),
                    },
                );
                let cards = fetch_cards(&base_url, &announced).await;
                peers.set_cards(&fullname, cards);
            }
            ServiceEvent::ServiceRemoved(_, fullname) => peers.remove(&fullname),
            _ => {}
        }
    }
}

async fn refresh_cards(peers: Arc<LanPeers>) {
    loop {
        tokio::time::sleep(CARD_REFRESH).await;
        for (fullname, base_url, announced) in peers.known() {
            let cards = fetch_cards(&base_url, &announced).await;
            peers.set_cards(&fullname, cards);
        }
    }
}

/// The verified cards of `announced` agents at `base_url`, each set up as `agent_discover`
/// lists it. A card that does not come, does not verify or names another DID than the one
/// announced is left out.
async fn fetch_cards(base_url: &str, announced: &[Announced]) -> Vec<Value> {
    let mut cards = Vec::new();
    for (handle, tier, did) in announced {
        match fetch_card(base_url, handle).await {
            Ok(mut card) => {
                if !did.is_empty() && card.get("did").and_then(Value::as_str) != Some(did) {
                    tracing::warn!(%base_url, %handle, "a LAN peer's card names another DID than it announced");
                    continue;
                }
                if let Some(object) = card.as_object_mut() {
                    object.insert("visibility".into(), tier.as_str().into());
                    object.insert("in_subdirectory".into(), false.into());
                    object.insert("source".into(), "lan".into());
                    object.insert("runtime".into(), base_url.into());
                }
                cards.push(card);
            }
            Err(why) => tracing::debug!(%base_url, %handle, %why, "LAN peer card not fetched"),
        }
    }
    cards
}

/// One card, through the egress policy (the peer's endpoint is admitted for the mesh routes
/// only, `adf_egress::lan`).
async fn fetch_card(base_url: &str, handle: &str) -> Result<Value, String> {
    let url = adf_egress::Url::parse(&format!("{base_url}/agents/{handle}/card"))
        .map_err(|e| e.to_string())?;
    let pins = adf_egress::Pins::default();
    adf_egress::Policy::default()
        .admit("GET", &url, &adf_egress::SystemLookup, &pins)
        .await
        .map_err(|e| e.to_string())?;
    let client = adf_egress::agent_client(
        &pins,
        adf_egress::ClientOptions {
            timeout: Some(CARD_TIMEOUT),
            ..adf_egress::ClientOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let response = client.get(url).send().await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()));
    }
    let card: Value = response.json().await.map_err(|e| e.to_string())?;
    adf_crypto::verify_card(&card).map_err(|e| e.to_string())?;
    Ok(card)
}
