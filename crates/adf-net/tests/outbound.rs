//! Outbound WebSockets without a daemon (§5.15): `ws_send` back-pressure against a slow
//! reader on 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt as _;
use serde_json::json;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;

use adf_net::outbound::{Outbound, OutboundSpec};
use adf_net::{AgentDirectory, ServedAgent};

/// One agent, no identity, no inbox: enough for connections with `auth: none`.
#[derive(Debug)]
struct OneAgent;

impl AgentDirectory for OneAgent {
    fn find(&self, _key: &str) -> Option<ServedAgent> {
        Some(agent())
    }
    fn lambda_ran(&self, _agent: &ServedAgent, _through: Option<adf_net::RowsThrough>) {}
}

fn agent() -> ServedAgent {
    ServedAgent {
        id: "agent-1".into(),
        path: PathBuf::from("unused.adf"),
    }
}

const FRAME: usize = 256 * 1024;
const MARK: usize = 64 * 1024;
const FRAMES: usize = 64;

#[tokio::test]
async fn srv_35_ws_send_waits_for_a_slow_reader_above_the_high_water_mark() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (start_reading, reading) = oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
        // The slow reader: nothing is read until the test says so.
        reading.await.unwrap();
        let mut got = Vec::new();
        while got.len() < FRAMES {
            match socket.next().await {
                Some(Ok(Message::Binary(bytes))) => {
                    assert_eq!(bytes.len(), FRAME);
                    got.push(bytes[0]);
                }
                Some(Ok(_)) => {}
                other => panic!("the stream ended early: {other:?}"),
            }
        }
        got
    });
    let outbound = Outbound::new(
        Arc::new(OneAgent),
        Arc::new(adf_egress::SystemLookup),
        Arc::default(),
    );
    let spec = OutboundSpec::from_entry(
        &json!({
            "url": format!("ws://{addr}/slow"),
            "auth": "none",
            "auto_reconnect": false,
            "high_water_mark_bytes": MARK,
        }),
        adf_egress::Policy::default(),
    )
    .unwrap();
    let id = outbound.connect(agent(), spec).await.unwrap();
    let mut buffered = outbound.buffered("agent-1", &id).unwrap();
    let (progress_tx, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let sender = {
        let outbound = Arc::clone(&outbound);
        let id = id.clone();
        let queue = outbound.buffered("agent-1", &id).unwrap();
        tokio::spawn(async move {
            for n in 0..FRAMES {
                let frame = Message::Binary(vec![n as u8; FRAME].into());
                outbound.send("agent-1", &id, frame).await.unwrap();
                // A send returns only once no more than the mark is unsent (the pump only
                // ever lowers the figure after that).
                let unsent = *queue.borrow();
                progress_tx.send((n, unsent)).unwrap();
            }
        })
    };
    // Until the sender has sent a few frames and is waiting with more than the mark queued,
    // nothing is read.
    let mut peak = 0;
    let mut sent = 0;
    loop {
        buffered.changed().await.unwrap();
        let now = *buffered.borrow_and_update();
        peak = peak.max(now);
        while let Ok((n, unsent)) = progress.try_recv() {
            assert!(
                unsent <= MARK,
                "send {n} returned with {unsent} bytes unsent"
            );
            sent = n + 1;
        }
        if now > MARK && sent >= 4 {
            break;
        }
    }
    assert!(
        !sender.is_finished(),
        "the sender finished while nothing was read"
    );
    start_reading.send(()).unwrap();
    let watch_peak = tokio::spawn(async move {
        let mut peak = peak;
        while buffered.changed().await.is_ok() {
            peak = peak.max(*buffered.borrow_and_update());
        }
        peak
    });
    sender.await.unwrap();
    while let Some((n, unsent)) = progress.recv().await {
        assert!(
            unsent <= MARK,
            "send {n} returned with {unsent} bytes unsent"
        );
        sent = n + 1;
    }
    assert_eq!(sent, FRAMES);
    let got = reader.await.unwrap();
    let expected: Vec<u8> = (0..FRAMES).map(|n| n as u8).collect();
    assert_eq!(got, expected, "every frame arrived once, in order");
    assert!(outbound.disconnect("agent-1", &id));
    let peak = watch_peak.await.unwrap();
    assert!(
        peak <= MARK + FRAME,
        "{peak} bytes were queued at once with a mark of {MARK}"
    );
}
