//! Outbound WebSockets through the policy (SRV-26): refusals are decided before any dial
//! (names resolve through a table), and an admitted loopback server is reached.

use std::time::Duration;

use crate::names::Table;
use adf_egress::{EgressErrorKind, Policy, Url, connect_websocket};
use futures::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;

fn names() -> Table {
    Table::of(&[
        ("internal.test", "10.0.0.5"),
        ("metadata.test", "169.254.169.254"),
        ("cgnat.test", "100.64.0.1"),
    ])
}

async fn refusal(policy: &Policy, url: &str) -> EgressErrorKind {
    let url = Url::parse(url).unwrap();
    match connect_websocket(policy, &url, &names(), Duration::from_secs(5)).await {
        Ok(_) => panic!("{url} was admitted"),
        Err(error) => error.kind,
    }
}

#[tokio::test]
async fn srv_26_ws_connect_follows_the_same_rules_as_fetch() {
    let strict = Policy::default();
    assert_eq!(
        refusal(&strict, "ws://internal.test/ws").await,
        EgressErrorKind::Refused
    );
    assert_eq!(
        refusal(&strict, "ws://10.1.2.3:9000/ws").await,
        EgressErrorKind::Refused
    );
    assert_eq!(
        refusal(&strict, "ws://cgnat.test/ws").await,
        EgressErrorKind::Refused
    );
    // Metadata addresses stay refused even with allow_local_fetch.
    let local = Policy {
        allow_local: true,
        ..Policy::default()
    };
    assert_eq!(
        refusal(&local, "ws://metadata.test/").await,
        EgressErrorKind::Refused
    );
    // wss:// is admitted by the same rules before any TLS.
    assert_eq!(
        refusal(&strict, "wss://internal.test/").await,
        EgressErrorKind::Refused
    );
    assert_eq!(
        refusal(&strict, "http://internal.test/").await,
        EgressErrorKind::Invalid
    );
}

#[tokio::test]
async fn an_admitted_loopback_websocket_opens_and_carries_frames() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
        if let Some(Ok(Message::Text(text))) = socket.next().await {
            socket
                .send(Message::Text(format!("echo {text}").into()))
                .await
                .unwrap();
        }
    });
    let url = Url::parse(&format!("ws://{addr}/ws")).unwrap();
    let (mut socket, dialed) =
        connect_websocket(&Policy::default(), &url, &names(), Duration::from_secs(30))
            .await
            .unwrap();
    assert_eq!(dialed, addr);
    socket.send(Message::Text("hi".into())).await.unwrap();
    let answer = socket.next().await.unwrap().unwrap();
    assert_eq!(answer, Message::Text("echo hi".into()));
    server.await.unwrap();
}

#[tokio::test]
async fn srv_35_an_unresponsive_server_is_abandoned_at_the_connect_timeout() {
    // Accepts the TCP connection and never answers the WebSocket handshake.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        std::future::pending::<()>().await;
        drop(stream);
    });
    let url = Url::parse(&format!("ws://{addr}/ws")).unwrap();
    let error = match connect_websocket(
        &Policy::default(),
        &url,
        &names(),
        Duration::from_millis(200),
    )
    .await
    {
        Ok(_) => panic!("the handshake cannot have completed"),
        Err(error) => error,
    };
    assert_eq!(error.kind, EgressErrorKind::Failed);
    assert!(
        error.reason.contains("did not open within 200 ms"),
        "{}",
        error.reason
    );
    held.abort();
}

/// The test CA, and a certificate it signed for 127.0.0.1 and localhost (tests/fixtures,
/// made with openssl; valid for a century; no production code can read them).
const TEST_CA: &[u8] = include_bytes!("../fixtures/test-ca.pem");
const LOCALHOST_CERT: &[u8] = include_bytes!("../fixtures/localhost-cert.pem");
const LOCALHOST_KEY: &[u8] = include_bytes!("../fixtures/localhost-key.pem");

/// A `wss://` echo server on 127.0.0.1 presenting the localhost certificate; it serves one
/// connection and reports whether its TLS handshake completed.
async fn tls_echo_server() -> (
    std::net::SocketAddr,
    tokio::task::JoinHandle<Result<(), String>>,
) {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    adf_egress::client::ensure_crypto_provider();
    let certs = vec![CertificateDer::from_pem_slice(LOCALHOST_CERT).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(LOCALHOST_KEY).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let tls = acceptor.accept(stream).await.map_err(|e| e.to_string())?;
        let mut socket = tokio_tungstenite::accept_async(tls)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(Ok(Message::Text(text))) = socket.next().await {
            socket
                .send(Message::Text(format!("echo {text}").into()))
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    (addr, server)
}

fn test_ca_trust() -> adf_egress::TlsTrust {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(TEST_CA).unwrap())
        .unwrap();
    adf_egress::TlsTrust::Roots(std::sync::Arc::new(roots))
}

#[tokio::test]
async fn srv_35_a_wss_connection_verifies_the_server_and_carries_frames() {
    let (addr, server) = tls_echo_server().await;
    let url = Url::parse(&format!("wss://{addr}/ws")).unwrap();
    let (mut socket, dialed) = adf_egress::connect_websocket_trusting(
        &Policy::default(),
        &url,
        &names(),
        Duration::from_secs(30),
        &test_ca_trust(),
    )
    .await
    .unwrap();
    assert_eq!(dialed, addr);
    assert!(matches!(
        socket.get_ref(),
        tokio_tungstenite::MaybeTlsStream::Rustls(_)
    ));
    socket.send(Message::Text("over tls".into())).await.unwrap();
    let answer = socket.next().await.unwrap().unwrap();
    assert_eq!(answer, Message::Text("echo over tls".into()));
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn srv_35_a_wss_server_the_client_does_not_trust_is_refused() {
    // The system roots do not hold the test CA: verification fails, nothing is carried.
    let (addr, server) = tls_echo_server().await;
    let url = Url::parse(&format!("wss://{addr}/ws")).unwrap();
    let error = match connect_websocket(&Policy::default(), &url, &names(), Duration::from_secs(30))
        .await
    {
        Ok(_) => panic!("a certificate from an untrusted CA was accepted"),
        Err(error) => error,
    };
    assert_eq!(error.kind, EgressErrorKind::Failed);
    assert!(
        error.reason.to_ascii_lowercase().contains("certificate"),
        "{}",
        error.reason
    );
    assert!(
        server.await.unwrap().is_err(),
        "the server saw no finished TLS handshake"
    );
    // Trusting the CA is not enough for another name: the URL's host is what is verified.
    let (addr, server) = tls_echo_server().await;
    let other = Url::parse(&format!("wss://other.test:{}/ws", addr.port())).unwrap();
    let loopback_name = Table::of(&[("other.test", &addr.ip().to_string())]);
    let refused = match adf_egress::connect_websocket_trusting(
        &Policy::default(),
        &other,
        &loopback_name,
        Duration::from_secs(30),
        &test_ca_trust(),
    )
    .await
    {
        Ok(_) => panic!("a certificate for another name was accepted"),
        Err(error) => error,
    };
    assert!(
        refused.reason.to_ascii_lowercase().contains("certificate"),
        "{}",
        refused.reason
    );
    assert!(server.await.unwrap().is_err());
}
