//! The one egress policy of ADF: may this agent open a connection to this URL?
//!
//! Every outbound path of agent code asks [`Policy::admit`] before it connects — `sys_fetch`
//! and native `fetch` (for every redirect hop), `msg_send`'s HTTP delivery, and whatever
//! comes next (WebSockets, MCP over HTTP, skill catalogs, adapters). The crate also owns the
//! only HTTP client constructors ([`client`]; a test fails on a client or a TCP connect built
//! anywhere else), the pinned resolver ([`resolve`]) and rule 2's control-API registry
//! ([`control`]). It knows nothing of agent files: callers pass the agent's flags in.
//!
//! The rules, in order (spec §5.6), for every address the URL's host resolves to:
//! 1. link-local and cloud-metadata addresses (`169.254.0.0/16`, `fe80::/10`, AWS's
//!    `fd00:ec2::254`, Alibaba's `100.100.100.200`), also as IPv4-mapped/-compatible/NAT64
//!    IPv6, are refused whatever `security.allow_local_fetch` says;
//! 2. a runtime control API on this machine (this process's, or any daemon's of any runtime
//!    home and user, from the machine-wide record [`machine`]) is refused on every local spelling of its port — except the daemon's
//!    public mesh routes, exactly `POST /agents/{handle}/inbox`, `GET /agents/{handle}/card`
//!    and `GET /agents/{handle}/health`, which are how agents message each other;
//! 3. the agent's own served origin ([`Policy::served_origins`]) is allowed;
//! 4. `allow_local_fetch: true` allows everything else;
//! 5. otherwise loopback is allowed and private, CGNAT, unspecified, multicast, reserved and
//!    unique-local addresses are refused — except the exact mesh endpoint of a LAN peer the
//!    daemon discovered ([`lan`]), for the public mesh routes only.
//!
//! A name that resolves to several addresses is refused when any one of them is refused; the
//! admitted addresses are pinned, and an agent client connects to nothing else.
//!
//! With the `loopback-only` feature (test builds), an admitted destination off this machine's
//! loopback is still refused, with an error naming what would have been dialed: tests prove
//! "allowed" decisions without sending a packet anywhere. The one exception is a discovered
//! LAN peer's endpoint dialed from inside a network namespace of its own
//! ([`lan::in_separate_network_namespace`]): the LAN tests' two daemons run in namespaces the
//! test created, joined by one veth pair, so such a dial cannot leave them.

pub mod client;
pub mod control;
pub mod lan;
pub mod machine;
pub mod resolve;
pub mod rules;
pub mod socket;
pub mod tcp;

use std::net::{IpAddr, SocketAddr};

pub use client::{ClientOptions, agent_client, service_client};
pub use control::protect_control_api;
pub use reqwest::Url;
pub use resolve::{Lookup, Pins, SystemLookup};
pub use socket::{TlsTrust, connect_websocket, connect_websocket_trusting};
pub use tcp::connect_tcp;

use rules::{canonical, link_local_or_metadata, local_kind};

/// How an egress decision failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EgressErrorKind {
    /// The URL cannot be a destination (scheme, host, port).
    Invalid,
    /// The policy refused the destination.
    Refused,
    /// The host does not resolve, or a client could not be built.
    Failed,
    /// A test build would have dialed an address off this machine (feature `loopback-only`).
    OffMachineInTest,
}

/// A refused or failed egress decision. `subject` names the destination (`10.0.0.1`, or
/// `name (resolved to 10.0.0.1)`) when the policy refused one address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct EgressError {
    /// Whether the URL was invalid, the policy refused it, or the lookup failed.
    pub kind: EgressErrorKind,
    /// The refused destination, when the policy refused one address.
    pub subject: Option<String>,
    /// Why, in words for the caller.
    pub reason: String,
}

impl EgressError {
    /// An error of `kind` with no subject.
    pub fn new(kind: EgressErrorKind, reason: impl Into<String>) -> Self {
        EgressError {
            kind,
            subject: None,
            reason: reason.into(),
        }
    }

    fn describe(&self) -> String {
        match &self.subject {
            Some(subject) => format!("refused {subject}: {}", self.reason),
            None => self.reason.clone(),
        }
    }
}

/// The egress policy of one agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// `security.allow_local_fetch`.
    pub allow_local: bool,
    /// Rule 3: URL prefixes (scheme, host, port and path) the agent itself serves.
    pub served_origins: Vec<String>,
    /// Rule 2 beyond this process's registry and the machine-wide record: control APIs
    /// recorded in the runtime home ([`control::read_record`]).
    pub control_apis: Vec<SocketAddr>,
}

impl Policy {
    /// Rule 3: whether `url` lies under one of the agent's served origins.
    pub fn serves(&self, url: &Url) -> bool {
        self.served_origins
            .iter()
            .filter_map(|o| Url::parse(o).ok())
            .any(|o| {
                o.scheme() == url.scheme()
                    && o.host_str() == url.host_str()
                    && o.port_or_known_default() == url.port_or_known_default()
                    && url.path().starts_with(o.path())
            })
    }

    /// Whether a connection to `ip:port` may reach a control API (rule 2).
    pub fn is_control_api(&self, ip: IpAddr, port: u16) -> bool {
        control::reaches(&control::known(&self.control_apis), ip, port)
    }

    /// The §5.6 rules, in order, for one resolved address of the request `method url`.
    /// `Err` carries the reason.
    pub fn check_address(
        &self,
        ip: IpAddr,
        port: u16,
        method: &str,
        url: &Url,
    ) -> Result<(), String> {
        let ip = canonical(ip);
        if let Some(what) = link_local_or_metadata(ip) {
            return Err(format!(
                "{ip} is a {what} address, never reachable (even with security.allow_local_fetch)"
            ));
        }
        if self.is_control_api(ip, port) && !is_public_mesh_route(method, url) {
            return Err(format!(
                "{ip}:{port} is a runtime control API on this machine, never reachable (only its public mesh routes are: POST /agents/{{handle}}/inbox, GET /agents/{{handle}}/card and /health, and WebSocket upgrades to /agents/{{handle}}/…)"
            ));
        }
        if self.allow_local || ip.is_loopback() || self.serves(url) {
            return Ok(());
        }
        // Rule 5's one exception: a discovered LAN peer's mesh endpoint, for the mesh routes
        // only (why exactly these: `lan.rs`).
        if is_lan_peer_route(method, url, ip, port) {
            return Ok(());
        }
        match local_kind(ip) {
            Some(what) => Err(format!(
                "{ip} is a {what} address; private and local destinations need security.allow_local_fetch: true (an owner-approved config change)"
            )),
            None => Ok(()),
        }
    }

    /// Decides one connection: the URL's scheme, host and port, every address the host
    /// resolves to (through `lookup`; IP literals as written), each checked by
    /// [`Policy::check_address`]. The admitted addresses are pinned in `pins` for a name and
    /// returned; connect to nothing else. Call it again for every redirect hop.
    pub async fn admit(
        &self,
        method: &str,
        url: &Url,
        lookup: &dyn Lookup,
        pins: &Pins,
    ) -> Result<Vec<SocketAddr>, EgressError> {
        if !matches!(url.scheme(), "http" | "https" | "ws" | "wss") {
            return Err(EgressError::new(
                EgressErrorKind::Invalid,
                format!(
                    "only http(s) and ws(s) destinations are reachable, not '{}:'",
                    url.scheme()
                ),
            ));
        }
        let Destination {
            host,
            port,
            literal,
            ips,
        } = destination(url, lookup).await?;
        let host = host.as_str();
        let subject = |ip: &IpAddr| match literal {
            Some(_) => format!("{ip}"),
            None => format!("{host} (resolved to {ip})"),
        };
        for ip in &ips {
            if let Err(reason) = self.check_address(*ip, port, method, url) {
                return Err(EgressError {
                    kind: EgressErrorKind::Refused,
                    subject: Some(subject(ip)),
                    reason,
                });
            }
        }
        if cfg!(feature = "loopback-only")
            && let Some(ip) = ips.iter().find(|ip| {
                !(canonical(**ip).is_loopback()
                    || canonical(**ip).is_unspecified()
                    || (is_lan_peer_route(method, url, **ip, port)
                        && lan::in_separate_network_namespace()))
            })
        {
            return Err(EgressError::new(
                EgressErrorKind::OffMachineInTest,
                format!(
                    "the policy allows {}, but this test build dials loopback only and would have dialed {ip}:{port}",
                    subject(ip)
                ),
            ));
        }
        let addrs: Vec<SocketAddr> = ips
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect();
        if literal.is_none() {
            pins.pin(host, addrs.clone());
        }
        Ok(addrs)
    }
}

/// Where a URL leads: its host and port and every address the host resolves to.
#[derive(Debug)]
pub struct Destination {
    /// The host as written in the URL (an IP literal keeps its brackets).
    pub host: String,
    /// The port, explicit or the scheme's default.
    pub port: u16,
    /// The address when the host is an IP literal (no lookup was made).
    pub literal: Option<IpAddr>,
    /// Every address the host resolves to; never empty.
    pub ips: Vec<IpAddr>,
}

/// Resolves `url`'s host through `lookup` (an IP literal as written): the one resolution every
/// egress decision starts from.
pub async fn destination(url: &Url, lookup: &dyn Lookup) -> Result<Destination, EgressError> {
    let host = url
        .host_str()
        .ok_or_else(|| EgressError::new(EgressErrorKind::Invalid, "the URL has no host"))?;
    let port = url
        .port_or_known_default()
        .ok_or_else(|| EgressError::new(EgressErrorKind::Invalid, "the URL has no port"))?;
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok();
    let ips = match literal {
        Some(ip) => vec![ip],
        None => lookup.lookup(host, port).await.map_err(|e| {
            EgressError::new(
                EgressErrorKind::Failed,
                format!("cannot resolve {host}: {e}"),
            )
        })?,
    };
    if ips.is_empty() {
        return Err(EgressError::new(
            EgressErrorKind::Failed,
            format!("{host} resolves to no address"),
        ));
    }
    Ok(Destination {
        host: host.to_owned(),
        port,
        literal,
        ips,
    })
}

/// Whether `method url` is one of a daemon's public mesh routes, exactly as reqwest will send
/// it: `POST /agents/{handle}/inbox`, `GET /agents/{handle}/card`, `GET /agents/{handle}/health`,
/// with no query, no extra segment and no encoded or dot segment in the handle — or, for a
/// `ws://`/`wss://` URL (a WebSocket upgrade), any plain path under `/agents/{handle}/`.
pub fn is_public_mesh_route(method: &str, url: &Url) -> bool {
    if url.query().is_some() || url.fragment().is_some() {
        return false;
    }
    let Some(segments) = url.path_segments() else {
        return false;
    };
    let segments: Vec<&str> = segments.collect();
    let plain = |segment: &&str| {
        !segment.is_empty() && *segment != "." && *segment != ".." && !segment.contains(['%', '\\'])
    };
    if matches!(url.scheme(), "ws" | "wss") {
        // An agent's WebSocket route (§12.2) lives anywhere under its handle. Only
        // `connect_websocket` dials ws:// (the HTTP clients refuse the scheme); the upgrade
        // opens only where the daemon serves a WS route, and for anything else it reports
        // the status, never the body, so a control route reached this way yields no data.
        return segments.len() >= 3 && segments[0] == "agents" && segments[1..].iter().all(plain);
    }
    let [agents, handle, tail] = segments.as_slice() else {
        return false;
    };
    *agents == "agents"
        && plain(handle)
        && matches!(
            (method.to_ascii_uppercase().as_str(), *tail),
            ("POST", "inbox") | ("GET", "card") | ("GET", "health")
        )
}

/// Whether `method url` at `ip:port` is a mesh route (HTTP only: no WebSocket upgrade) of a
/// discovered LAN peer's endpoint ([`lan`]).
fn is_lan_peer_route(method: &str, url: &Url, ip: IpAddr, port: u16) -> bool {
    matches!(url.scheme(), "http" | "https")
        && is_public_mesh_route(method, url)
        && lan::is_peer(ip, port)
}

/// The message of a caught panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}
