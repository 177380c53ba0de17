//! Outbound WebSockets: the one place an agent's WebSocket connection is opened. The URL is
//! admitted by [`Policy::admit`] (§5.6, SRV-26) and the TCP connection goes to an admitted
//! address only, then the WebSocket handshake runs on it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::{EgressError, EgressErrorKind, Lookup, Pins, Policy, Url};

/// An open outbound WebSocket.
pub type WebSocket = tokio_tungstenite::WebSocketStream<TcpStream>;

/// Admits `url` (`ws://`) under `policy` and opens a WebSocket to the first admitted address
/// that answers within `timeout` (the TCP connect and the handshake together). `wss://` is
/// refused with a clear error: TLS for agent WebSockets is not supported yet.
pub async fn connect_websocket(
    policy: &Policy,
    url: &Url,
    lookup: &dyn Lookup,
    timeout: Duration,
) -> Result<(WebSocket, SocketAddr), EgressError> {
    match url.scheme() {
        "ws" => {}
        "wss" => {
            return Err(EgressError::new(
                EgressErrorKind::Invalid,
                "wss:// WebSocket connections are not supported yet (TLS); use ws://",
            ));
        }
        other => {
            return Err(EgressError::new(
                EgressErrorKind::Invalid,
                format!("a WebSocket URL is ws://, not '{other}:'"),
            ));
        }
    }
    let addrs = policy.admit("GET", url, lookup, &Pins::default()).await?;
    let attempt = async {
        let mut last = String::from("no address to connect to");
        for addr in &addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    return match tokio_tungstenite::client_async(url.as_str(), stream).await {
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
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(EgressError::new(
                EgressErrorKind::Failed,
                format!(
                    "the WebSocket connection did not open within {} ms",
                    timeout.as_millis()
                ),
            ))
        })
}
