//! Outbound WebSockets through the policy (SRV-26): refusals are decided before any dial
//! (names resolve through a table), and an admitted loopback server is reached.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use adf_egress::{EgressErrorKind, Lookup, Policy, Url, connect_websocket};
use futures::future::BoxFuture;
use futures::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;

struct Table(HashMap<&'static str, IpAddr>);

impl Lookup for Table {
    fn lookup(&self, host: &str, _port: u16) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let found = self.0.get(host).copied();
        Box::pin(async move {
            found
                .map(|ip| vec![ip])
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such name"))
        })
    }
}

fn names() -> Table {
    Table(HashMap::from([
        ("internal.test", "10.0.0.5".parse().unwrap()),
        ("metadata.test", "169.254.169.254".parse().unwrap()),
        ("cgnat.test", "100.64.0.1".parse().unwrap()),
    ]))
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
    assert_eq!(
        refusal(&strict, "wss://internal.test/").await,
        EgressErrorKind::Invalid
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
