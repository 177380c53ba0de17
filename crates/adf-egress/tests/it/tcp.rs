//! Raw TCP for stream bindings through the policy: refusals are decided before any dial
//! (names resolve through a table), and an admitted loopback listener is reached.

use std::net::SocketAddr;
use std::time::Duration;

use crate::names::Table;
use adf_egress::tcp::admit_tcp;
use adf_egress::{EgressErrorKind, Policy, connect_tcp};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn names() -> Table {
    Table::of(&[
        ("db.internal.test", "10.0.0.5"),
        ("metadata.test", "169.254.169.254"),
        ("public.test", "93.184.216.34"),
    ])
}

async fn kind(policy: &Policy, host: &str, port: u16) -> EgressErrorKind {
    match admit_tcp(policy, host, port, &names()).await {
        Ok(addrs) => panic!("{host}:{port} was admitted as {addrs:?}"),
        Err(error) => error.kind,
    }
}

#[tokio::test]
async fn srv_37_tcp_bindings_follow_the_egress_rules() {
    let strict = Policy::default();
    assert_eq!(
        kind(&strict, "db.internal.test", 5432).await,
        EgressErrorKind::Refused
    );
    assert_eq!(
        kind(&strict, "10.1.2.3", 5432).await,
        EgressErrorKind::Refused
    );
    let local = Policy {
        allow_local: true,
        ..Policy::default()
    };
    // Metadata stays refused even with allow_local_fetch.
    assert_eq!(
        kind(&local, "metadata.test", 80).await,
        EgressErrorKind::Refused
    );
    assert_eq!(
        kind(&local, "169.254.169.254", 80).await,
        EgressErrorKind::Refused
    );
    // A public destination is allowed by the policy, and this test build refuses to dial it.
    assert_eq!(
        kind(&strict, "public.test", 443).await,
        EgressErrorKind::OffMachineInTest
    );
    assert_eq!(
        kind(&strict, "no.such.test", 1).await,
        EgressErrorKind::Failed
    );
}

#[tokio::test]
async fn srv_37_a_control_api_is_never_a_tcp_destination() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api: SocketAddr = listener.local_addr().unwrap();
    let policy = Policy {
        allow_local: true,
        control_apis: vec![api],
        ..Policy::default()
    };
    assert_eq!(
        kind(&policy, "127.0.0.1", api.port()).await,
        EgressErrorKind::Refused
    );
}

#[tokio::test]
async fn an_admitted_loopback_listener_is_reached() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut got = [0u8; 4];
        socket.read_exact(&mut got).await.unwrap();
        got
    });
    let (mut stream, addr) = connect_tcp(
        &Policy::default(),
        "127.0.0.1",
        port,
        &names(),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(addr.port(), port);
    stream.write_all(b"ping").await.unwrap();
    assert_eq!(&server.await.unwrap(), b"ping");
}
