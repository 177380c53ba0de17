//! Name resolution under the policy: [`Lookup`] answers what a name resolves to (the system
//! resolver, or a table in tests), and [`Pins`] holds the addresses the policy checked, which
//! an agent client's resolver ([`PinnedResolver`]) answers with and nothing else — so reqwest
//! never resolves a name by itself and a rebinding name cannot swap in another address
//! between the check and the connect.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;

/// Looks host names up. The system resolver by default; tests inject a table so that a name
/// can "resolve" to a private or metadata address without real DNS.
pub trait Lookup: Send + Sync + 'static {
    /// Every address `host` resolves to.
    fn lookup(&self, host: &str, port: u16) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>>;
}

/// The operating system's resolver (`getaddrinfo` through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: &str, port: u16) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let host = host.to_owned();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), port)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// The names one request (or one client) may connect to, with their checked addresses.
#[derive(Debug, Clone, Default)]
pub struct Pins(Arc<Mutex<HashMap<String, Vec<SocketAddr>>>>);

impl Pins {
    /// Lets `name` (lower-cased) connect to `addrs`, replacing what it was pinned to before.
    pub fn pin(&self, name: &str, addrs: Vec<SocketAddr>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_ascii_lowercase(), addrs);
    }

    /// The addresses pinned for `name`, if any.
    pub fn get(&self, name: &str) -> Option<Vec<SocketAddr>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&name.to_ascii_lowercase())
            .cloned()
    }
}

/// reqwest's resolver for an agent client: answers only pinned names.
#[derive(Debug, Clone)]
pub struct PinnedResolver(pub Pins);

impl reqwest::dns::Resolve for PinnedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let pinned = self.0.get(name.as_str());
        let name = name.as_str().to_owned();
        Box::pin(async move {
            match pinned {
                Some(addrs) => Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs),
                None => Err(format!("{name} was not checked by the egress guard").into()),
            }
        })
    }
}
