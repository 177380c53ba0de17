//! Raw TCP for stream bindings (§5.23 `tcp` endpoints): the one place such a connection is
//! opened. Every address the host resolves to passes [`Policy::check_address`] (link-local
//! and metadata never, a control API never, private only with `allow_local_fetch`), and the
//! connection goes to an admitted address only. The caller applies its own allowlist first.
//! [`connect_service_tcp`] is the owner's tools' one exception (`adf bench http`), outside
//! agent egress.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::rules::canonical;
use crate::{EgressError, EgressErrorKind, Lookup, Policy, Url, destination};

/// The addresses `host:port` may be reached at under `policy`, resolved through `lookup`.
/// Refused when any one address is.
pub async fn admit_tcp(
    policy: &Policy,
    host: &str,
    port: u16,
    lookup: &dyn Lookup,
) -> Result<Vec<SocketAddr>, EgressError> {
    // A pseudo-URL lets the one resolution and rule path serve raw TCP too; its `tcp` scheme
    // never matches a public mesh route, so a control API stays refused on every port.
    let url = pseudo_url(host, port)?;
    let found = destination(&url, lookup).await?;
    let subject = |ip: &std::net::IpAddr| match found.literal {
        Some(_) => format!("{ip}"),
        None => format!("{host} (resolved to {ip})"),
    };
    for ip in &found.ips {
        if let Err(reason) = policy.check_address(*ip, port, "TCP", &url) {
            return Err(EgressError {
                kind: EgressErrorKind::Refused,
                subject: Some(subject(ip)),
                reason,
            });
        }
    }
    if let Some(ip) = off_machine_in_test(&found.ips) {
        return Err(EgressError::new(
            EgressErrorKind::OffMachineInTest,
            format!(
                "the policy allows {}, but this test build dials loopback only and would have dialed {ip}:{port}",
                subject(ip)
            ),
        ));
    }
    Ok(found
        .ips
        .into_iter()
        .map(|ip| SocketAddr::new(ip, port))
        .collect())
}

fn pseudo_url(host: &str, port: u16) -> Result<Url, EgressError> {
    let bracketed = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    Url::parse(&format!("tcp://{bracketed}:{port}")).map_err(|e| {
        EgressError::new(
            EgressErrorKind::Invalid,
            format!("'{host}:{port}' is not a TCP destination: {e}"),
        )
    })
}

/// Admits `host:port` ([`admit_tcp`]) and connects to the first admitted address that
/// answers within `timeout`.
pub async fn connect_tcp(
    policy: &Policy,
    host: &str,
    port: u16,
    lookup: &dyn Lookup,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), EgressError> {
    let addrs = admit_tcp(policy, host, port, lookup).await?;
    dial(&addrs, host, port, timeout).await
}

/// A TCP connection for the owner's own tools to a destination the owner named (`adf bench
/// http` against the daemon), like [`crate::service_client`] and never for agent egress: no
/// §5.6 rule applies (a daemon's control API is what such a tool aims at). Test builds
/// (`loopback-only`) still dial loopback only.
pub async fn connect_service_tcp(
    host: &str,
    port: u16,
    lookup: &dyn Lookup,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), EgressError> {
    let found = destination(&pseudo_url(host, port)?, lookup).await?;
    if let Some(ip) = off_machine_in_test(&found.ips) {
        return Err(EgressError::new(
            EgressErrorKind::OffMachineInTest,
            format!("this test build dials loopback only and would have dialed {ip}:{port}"),
        ));
    }
    let addrs: Vec<SocketAddr> = found
        .ips
        .into_iter()
        .map(|ip| SocketAddr::new(ip, port))
        .collect();
    dial(&addrs, host, port, timeout).await
}

/// In a test build (`loopback-only`), the first address that is not on this machine.
fn off_machine_in_test(ips: &[std::net::IpAddr]) -> Option<&std::net::IpAddr> {
    if !cfg!(feature = "loopback-only") {
        return None;
    }
    ips.iter()
        .find(|ip| !(canonical(**ip).is_loopback() || canonical(**ip).is_unspecified()))
}

async fn dial(
    addrs: &[SocketAddr],
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), EgressError> {
    let attempt = async {
        let mut last = String::from("no address to connect to");
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => return Ok((stream, *addr)),
                Err(error) => last = format!("cannot connect to {addr}: {error}"),
            }
        }
        Err(EgressError::new(EgressErrorKind::Failed, last))
    };
    opened_within(
        timeout,
        &format!("the TCP connection to {host}:{port}"),
        attempt,
    )
    .await
}

/// `attempt`'s outcome, or a failure naming `what` when it takes longer than `timeout`.
pub(crate) async fn opened_within<T>(
    timeout: Duration,
    what: &str,
    attempt: impl std::future::Future<Output = Result<T, EgressError>>,
) -> Result<T, EgressError> {
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(EgressError::new(
                EgressErrorKind::Failed,
                format!("{what} did not open within {} ms", timeout.as_millis()),
            ))
        })
}
