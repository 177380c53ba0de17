//! Outbound WebSockets: the one place an agent's WebSocket connection is opened. The URL is
//! admitted by [`Policy::admit`] (§5.6, SRV-26) and the TCP connection goes to an admitted
//! address only, then (for `wss://`) TLS with rustls verifying the URL's host against the
//! system's roots, then the WebSocket handshake.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_tungstenite::{Connector, MaybeTlsStream};

use crate::{EgressError, EgressErrorKind, Lookup, Pins, Policy, Url};

/// An open outbound WebSocket (`ws://` plain, `wss://` over TLS).
pub type WebSocket = tokio_tungstenite::WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Which certificates a `wss://` connection trusts.
#[derive(Debug, Clone, Default)]
pub enum TlsTrust {
    /// The system's root certificates (what every agent connection uses).
    #[default]
    System,
    /// Exactly these roots: for a host that talks to a private CA it was given explicitly
    /// (and for tests against a local server with a test CA). Verification is never off.
    Roots(Arc<rustls::RootCertStore>),
}

impl TlsTrust {
    /// `None`: tokio-tungstenite's own rustls config over the system's roots.
    fn connector(&self) -> Option<Connector> {
        crate::client::ensure_crypto_provider();
        match self {
            TlsTrust::System => None,
            TlsTrust::Roots(roots) => {
                let config = rustls::ClientConfig::builder()
                    .with_root_certificates(Arc::clone(roots))
                    .with_no_client_auth();
                Some(Connector::Rustls(Arc::new(config)))
            }
        }
    }
}

/// Admits `url` (`ws://` or `wss://`) under `policy` and opens a WebSocket to the first
/// admitted address that answers within `timeout` (the TCP connect, TLS and the handshake
/// together). `wss://` trusts the system's roots.
pub async fn connect_websocket(
    policy: &Policy,
    url: &Url,
    lookup: &dyn Lookup,
    timeout: Duration,
) -> Result<(WebSocket, SocketAddr), EgressError> {
    connect_websocket_trusting(policy, url, lookup, timeout, &TlsTrust::System).await
}

/// [`connect_websocket`], trusting `trust` for `wss://`.
pub async fn connect_websocket_trusting(
    policy: &Policy,
    url: &Url,
    lookup: &dyn Lookup,
    timeout: Duration,
    trust: &TlsTrust,
) -> Result<(WebSocket, SocketAddr), EgressError> {
    let connector = match url.scheme() {
        "ws" => Some(Connector::Plain),
        "wss" => trust.connector(),
        other => {
            return Err(EgressError::new(
                EgressErrorKind::Invalid,
                format!("a WebSocket URL is ws:// or wss://, not '{other}:'"),
            ));
        }
    };
    let addrs = policy.admit("GET", url, lookup, &Pins::default()).await?;
    let attempt = async {
        let mut last = String::from("no address to connect to");
        for addr in &addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    // A 4 KiB read buffer instead of the default 128 KiB allocated up front:
                    // agents hold many mostly idle connections.
                    let config =
                        tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                            .read_buffer_size(4 * 1024);
                    let handshake = tokio_tungstenite::client_async_tls_with_config(
                        url.as_str(),
                        stream,
                        Some(config),
                        connector.clone(),
                    );
                    return match handshake.await {
                        Ok((socket, _response)) => Ok((socket, *addr)),
                        // Only the status of a refused upgrade is reported, never its body:
                        // rule 2 lets upgrades reach other daemons' agent paths
                        // (`is_public_mesh_route`) because nothing but an open socket comes
                        // back.
                        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                            Err(EgressError::new(
                                EgressErrorKind::Failed,
                                format!(
                                    "the WebSocket handshake with {addr} failed: the server answered HTTP {}",
                                    response.status()
                                ),
                            ))
                        }
                        Err(error) => Err(EgressError::new(
                            EgressErrorKind::Failed,
                            format!("the WebSocket handshake with {addr} failed: {error}"),
                        )),
                    };
                }
                Err(error) => last = format!("cannot connect to {addr}: {error}"),
            }
        }
        Err(EgressError::new(EgressErrorKind::Failed, last))
    };
    crate::tcp::opened_within(timeout, "the WebSocket connection", attempt).await
}
