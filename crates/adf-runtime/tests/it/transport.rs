//! Which transport carries a `msg_send` (§12.2, MSG-28): same runtime, then an open WebSocket
//! to the recipient, then HTTP POST. A spy mesh stands in for the daemon (it records each
//! same-runtime delivery and each question about an open socket) and a recording inbox on
//! `127.0.0.1:0` counts the POSTs, so each step shows which transports it used and which it
//! left alone. The daemon's real sockets are in adf-server's serving tests. Also the §5.8
//! visibility matrix (MSG-31): which sender locations each tier admits.
use crate::common;

use std::path::Path;
use std::sync::{Arc, Mutex};

use adf_runtime::messaging::{Delivery, LocalAgent, Mesh, Tier};
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{CallOutcome, ToolRegistry};
use adf_store::AdfFile;
use adf_store::messages::{Mailbox, MessageFilter};
use common::{model, new_agent, owner_set};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The DID of the agent hosted by the spy's runtime (handle `local-peer`).
const LOCAL_DID: &str = "did:key:z6MkLocalPeer";
/// A remote agent this sender holds an open WebSocket to.
const SOCKET_DID: &str = "did:key:z6MkSocketPeer";
/// A remote agent reachable only over HTTP.
const HTTP_DID: &str = "did:key:z6MkHttpPeer";

/// A runtime hosting one agent (`local-peer`) whose sender holds open sockets to `LOCAL_DID`
/// and `SOCKET_DID`; every use of a transport is written to `used`.
#[derive(Debug, Default)]
struct SpyMesh {
    used: Mutex<Vec<String>>,
}

impl SpyMesh {
    fn used(&self) -> Vec<String> {
        self.used.lock().unwrap().clone()
    }

    fn note(&self, line: String) {
        self.used.lock().unwrap().push(line);
    }
}

impl Mesh for SpyMesh {
    fn reachable_agents(&self, _sender: &Path) -> Vec<LocalAgent> {
        Vec::new()
    }

    fn find(&self, recipient: &str, _address: Option<&str>) -> Option<LocalAgent> {
        (recipient == "local-peer" || recipient == LOCAL_DID).then(|| LocalAgent {
            handle: "local-peer".into(),
            did: Some(LOCAL_DID.into()),
            description: String::new(),
            path: "/agents/local-peer.adf".into(),
            tier: Tier::Localhost,
            inbox_url: "http://127.0.0.1:1/agents/local-peer/inbox".into(),
            card: json!({}),
        })
    }

    fn inbox_url(&self, _handle: &str) -> Option<String> {
        None
    }

    fn deliver(
        &self,
        target: &LocalAgent,
        _sender: &Path,
        _message: Value,
    ) -> BoxFuture<'static, Delivery> {
        self.note(format!("same_runtime {}", target.handle));
        Box::pin(async { Delivery::accepted(202) })
    }

    fn deliver_over_socket(
        &self,
        _sender_id: &str,
        recipient: &str,
        message: &Value,
    ) -> Option<BoxFuture<'static, Delivery>> {
        let open = recipient == SOCKET_DID || recipient == LOCAL_DID;
        self.note(format!(
            "socket? {recipient} {}",
            if open { "open" } else { "none" }
        ));
        if !open {
            return None;
        }
        assert_eq!(
            message["to"], recipient,
            "the socket carries the wire message"
        );
        Some(Box::pin(async { Delivery::accepted(202) }))
    }
}

/// An inbox on `127.0.0.1:0` that answers every request `202` and records its request line.
async fn recording_inbox() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://127.0.0.1:{}/agents/peer/inbox",
        listener.local_addr().unwrap().port()
    );
    let posts: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = posts.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Read the head and the whole body (Content-Length) before answering.
                loop {
                    let Ok(n) = socket.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + length {
                            seen.lock()
                                .unwrap()
                                .push(text.lines().next().unwrap_or_default().to_owned());
                            break;
                        }
                    }
                }
                let _ = socket
                    .write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
                    .await;
            });
        }
    });
    (url, posts)
}

/// `msg_send` as the model through the pipeline, delivered as the executor delivers it.
async fn send(registry: &ToolRegistry, file: &mut AdfFile, args: Value) -> Value {
    let caller = model();
    let CallOutcome::Deferred(call) = registry
        .call(file, &caller, "msg_send", args, &DenyAll)
        .unwrap()
    else {
        panic!("msg_send must be deferred")
    };
    registry.run_detached(file, &caller, &call).await.unwrap()
}

#[tokio::test]
async fn msg_28_same_runtime_first_then_an_open_websocket_then_http_post() {
    let (_d, _p, mut file) = new_agent();
    // No identity in this file: level 0 sends unsigned (signing is the daemon tests' part).
    owner_set(&mut file, "security.level", json!(0));
    owner_set(&mut file, "messaging.inbox_mode", json!(false));
    let mesh = Arc::new(SpyMesh::default());
    let registry = ToolRegistry::with_builtins_and_mesh(mesh.clone(), None);
    let (inbox, posts) = recording_inbox().await;

    // 1. A hosted recipient goes through the runtime, even with a socket open to its DID and
    //    an inbox URL given.
    let sent = send(
        &registry,
        &mut file,
        json!({ "recipient": LOCAL_DID, "address": inbox, "content": "one" }),
    )
    .await;
    assert_eq!(sent["status"], "delivered", "{sent}");
    assert_eq!(mesh.used(), ["same_runtime local-peer"]);
    assert!(posts.lock().unwrap().is_empty());

    // 2. A remote recipient with an open socket: the socket, not the inbox URL.
    send(
        &registry,
        &mut file,
        json!({ "recipient": SOCKET_DID, "address": inbox, "content": "two" }),
    )
    .await;
    assert_eq!(
        mesh.used()[1..],
        [format!("socket? {SOCKET_DID} open")],
        "{:?}",
        mesh.used()
    );
    assert!(
        posts.lock().unwrap().is_empty(),
        "an HTTP POST beside the socket"
    );

    // 3. No socket to the recipient: HTTP POST to its inbox.
    let sent = send(
        &registry,
        &mut file,
        json!({ "recipient": HTTP_DID, "address": inbox, "content": "three" }),
    )
    .await;
    assert_eq!(sent["status_code"], 202, "{sent}");
    assert_eq!(mesh.used()[2..], [format!("socket? {HTTP_DID} none")]);
    assert_eq!(*posts.lock().unwrap(), ["POST /agents/peer/inbox HTTP/1.1"]);

    // Every outbox row is delivered, and records the route it took.
    let rows = file
        .messages(Mailbox::Outbox, &MessageFilter::default(), None)
        .unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r["status"] == "delivered"), "{rows:?}");
}

#[test]
fn msg_31_visibility_tiers_nest_public_lan_localhost_directory() {
    use adf_runtime::messaging::Origin;
    let target = Path::new("/agents/team/worker.adf");
    let same_runtime = |sender: &str| Origin::SameRuntime {
        sender: sender.into(),
    };
    // Sender locations, nearest first, and the tiers (off, directory, localhost, lan, public)
    // that admit each: every tier admits what the tier below it admits, and one more ring.
    let matrix: [(&str, Origin, [bool; 5]); 7] = [
        (
            "same directory",
            same_runtime("/agents/team/lead.adf"),
            [false, true, true, true, true],
        ),
        (
            "ancestor directory",
            same_runtime("/agents/boss.adf"),
            [false, true, true, true, true],
        ),
        (
            "root ancestor",
            same_runtime("/root.adf"),
            [false, true, true, true, true],
        ),
        (
            "sibling directory",
            same_runtime("/agents/other/x.adf"),
            [false, false, true, true, true],
        ),
        (
            "child directory",
            same_runtime("/agents/team/sub/y.adf"),
            [false, false, true, true, true],
        ),
        (
            "this machine",
            Origin::Loopback,
            [false, false, true, true, true],
        ),
        (
            "the local network",
            Origin::Lan,
            [false, false, false, true, true],
        ),
    ];
    let tiers = [
        Tier::Off,
        Tier::Directory,
        Tier::Localhost,
        Tier::Lan,
        Tier::Public,
    ];
    for (place, origin, admitted) in &matrix {
        for (tier, expected) in tiers.iter().zip(admitted) {
            assert_eq!(
                tier.admits(origin, target),
                *expected,
                "a sender in {place} reaching a {} agent",
                tier.as_str()
            );
        }
    }
    for (tier, expected) in tiers.iter().zip([false, false, false, false, true]) {
        assert_eq!(
            tier.admits(&Origin::Public, target),
            expected,
            "the internet, {tier:?}"
        );
    }
    // The config spells the tiers; anything else is localhost.
    for (visibility, tier) in [
        ("off", Tier::Off),
        ("directory", Tier::Directory),
        ("localhost", Tier::Localhost),
        ("lan", Tier::Lan),
        ("public", Tier::Public),
        ("everyone", Tier::Localhost),
    ] {
        assert_eq!(
            Tier::of(&json!({ "messaging": { "visibility": visibility } })),
            tier
        );
    }
}
