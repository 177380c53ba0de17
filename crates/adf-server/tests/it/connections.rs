//! The connection loop below the front door (issue 28 finding 6), over real TCP on
//! 127.0.0.1: a flood of connections that send half a request head is closed by the
//! header-read timeout while the daemon keeps answering, long-lived answers (an SSE stream, a
//! WebSocket) outlive that timeout, and over the connection cap a client gets a clear 503
//! until a slot frees. Timeouts are set to 1 s here; every wait is bounded.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use common::{Harness, fresh_dir};

const HEADER_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a closed connection may take to be noticed: a failure guard, not a timing
/// assumption.
const GUARD: Duration = Duration::from_secs(20);

/// How many times a flood is opened again when the machine was too slow to hold it at once.
const FLOOD_TRIES: usize = 10;

/// A connection that sent the start of a request head and nothing more.
async fn half_open(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let partial = format!("GET /agents HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ");
    stream.write_all(partial.as_bytes()).await.unwrap();
    stream
}

/// Whether the daemon closed `stream` (EOF or reset) within the guard.
async fn closed_by_daemon(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 256];
    match tokio::time::timeout(GUARD, stream.read(&mut buffer)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(_)) | Err(_) => false,
    }
}

/// `count` half-open connections that the daemon holds all at once (beside the one event
/// stream), and when they were opened. The state is transient: each is cut one header
/// timeout after it was accepted, so on a loaded machine the first may be cut before the last
/// is accepted; then the flood is opened again, as a slow client would (bounded tries).
async fn held_flood(h: &Harness, count: usize) -> (Instant, Vec<TcpStream>) {
    let addr = h.server.addr;
    for _ in 0..FLOOD_TRIES {
        let began = Instant::now();
        let flood = futures::future::join_all((0..count).map(|_| half_open(addr))).await;
        // One header timeout after the last open, every one of them has been cut: no later.
        let held = tokio::time::timeout(HEADER_TIMEOUT, async {
            while h.server.connections().open() <= count {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        if held.is_ok() {
            return (began, flood);
        }
        drop(flood);
        common::wait_for("the cut flood's slots are free", || async {
            h.server.connections().open() <= 2
        })
        .await;
    }
    panic!("{count} half-open connections were never held at once in {FLOOD_TRIES} tries");
}

/// One complete `GET path` on a fresh connection: status and body.
async fn get(addr: SocketAddr, path: &str, token: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(GUARD, stream.read_to_end(&mut raw))
        .await
        .expect("the daemon answered")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

async fn start(cap: usize, header_timeout: Duration) -> Harness {
    Harness::start_with(fresh_dir(), |front| {
        front.connections.header_read_timeout = header_timeout;
        front.connections.max_connections = Some(cap);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_header_flood_is_cut_by_the_header_timeout_while_the_daemon_answers() {
    const FLOOD: usize = 200;
    let h = start(FLOOD + 16, HEADER_TIMEOUT).await;
    let addr = h.server.addr;
    let mut events = Box::pin(h.client.events("/events").await.unwrap());
    let (began, mut flood) = held_flood(&h, FLOOD).await;
    // A normal request is answered while every half-open connection is still held.
    let (status, _, body) = get(addr, "/agents", &h.token).await;
    assert_eq!(status, 200, "{body}");
    for (i, stream) in flood.iter_mut().enumerate() {
        assert!(closed_by_daemon(stream).await, "connection {i} stayed open");
    }
    assert!(
        began.elapsed() >= HEADER_TIMEOUT,
        "closed by the header timeout, not sooner"
    );
    common::wait_for("the flood's slots are free", || async {
        h.server.connections().open() <= 2
    })
    .await;
    // The event stream opened before the flood outlived the header timeout: it still
    // delivers.
    let path = h.copy_fixture("minimal-headless.adf", "after-flood.adf");
    h.client
        .post("/agents/load", Some(&json!({ "filePath": path })))
        .await
        .unwrap();
    let loaded = tokio::time::timeout(GUARD, async {
        while let Some(Ok(data)) = events.next().await {
            let frame: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
            if frame["event"]["event_type"] == "agent.loaded" {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(loaded, Ok(true), "the SSE stream was cut");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_outlives_the_header_timeout() {
    let h = start(64, HEADER_TIMEOUT).await;
    let path = common::agent_file(
        h.dir.path(),
        "echo",
        &[(
            "lib/ws.ts",
            "export async function on(event) { return event.type === \"message\" ? event : null; }",
        )],
        &[
            ("handle", json!("echo")),
            (
                "serving.api",
                json!([{ "method": "WS", "path": "/live", "lambda": "lib/ws.ts:on" }]),
            ),
        ],
    );
    h.server.daemon.load(&path).await.unwrap();
    let url = format!("ws://{}/agents/echo/live", h.server.serve_addr);
    let (mut socket, _) = tokio::time::timeout(GUARD, tokio_tungstenite::connect_async(url))
        .await
        .expect("the upgrade answered")
        .unwrap();
    // Proof that the header timeout has passed since the upgrade: a connection opened after
    // it was cut by that timeout.
    let mut witness = half_open(h.server.addr).await;
    assert!(closed_by_daemon(&mut witness).await);
    socket
        .send(WsMessage::Text("still here".into()))
        .await
        .unwrap();
    let echoed = tokio::time::timeout(GUARD, async {
        while let Some(Ok(message)) = socket.next().await {
            if let WsMessage::Text(text) = message {
                return Some(text.to_string());
            }
        }
        None
    })
    .await
    .expect("the socket answered")
    .expect("the socket was closed");
    let echoed: Value = serde_json::from_str(&echoed).unwrap();
    assert_eq!(echoed["data"], "still here");
    // An upgraded socket still holds its slot.
    assert!(h.server.connections().open() >= 1);
    socket.close(None).await.unwrap();
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_connection_cap_a_client_gets_a_clear_503_until_a_slot_frees() {
    const CAP: usize = 4;
    // A header timeout far beyond the test, so only the cap decides.
    let h = start(CAP, Duration::from_secs(600)).await;
    let addr = h.server.addr;
    let mut held = Vec::new();
    for _ in 0..CAP {
        held.push(half_open(addr).await);
    }
    common::wait_for("the cap is reached", || async {
        h.server.connections().open() == CAP
    })
    .await;
    let (status, head, body) = get(addr, "/agents", &h.token).await;
    assert_eq!(status, 503, "{head}\n{body}");
    let declared: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap();
    assert_eq!(
        declared,
        body.len(),
        "a client reading Content-Length gets it all"
    );
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["code"], "TOO_MANY_CONNECTIONS", "{body}");
    assert!(answer["error"].is_string());
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    assert_eq!(
        h.server.connections().open(),
        CAP,
        "a refusal holds no slot"
    );
    drop(held.pop());
    common::wait_for("a slot is free", || async {
        h.server.connections().open() < CAP
    })
    .await;
    let (status, _, body) = get(addr, "/agents", &h.token).await;
    assert_eq!(status, 200, "{body}");
    drop(held);
    h.stop().await;
}
