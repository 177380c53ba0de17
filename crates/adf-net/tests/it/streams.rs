//! Stream bindings (§5.23) on real sockets on 127.0.0.1: bytes and counters, gates, limits,
//! a process endpoint, the umbilical endpoint, a WebSocket endpoint, declarations and release.
//! Every wait is for an event (a read, a `binding.*` event) under a generous safety timeout.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use adf_testkit::sockets::{accept, listener, read_exactly, read_to_end};
use futures::future::BoxFuture;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use adf_egress::Lookup;
use adf_net::outbound::{Outbound, OutboundSpec};
use adf_net::streams::{BindRequest, BindingEvents, StreamError, Streams};
use adf_net::{AgentDirectory, ServedAgent};

const AGENT: &str = "agent-1";
/// Only a hung test waits this long; no assertion depends on it.
const SAFETY: Duration = Duration::from_secs(20);

#[derive(Debug)]
pub(crate) struct NoAgents;

impl AgentDirectory for NoAgents {
    fn find(&self, _key: &str) -> Option<ServedAgent> {
        None
    }
    fn lambda_ran(&self, _agent: &ServedAgent, _through: Option<adf_net::RowsThrough>) {}
}

/// Names resolve through a table (so a private address is "reached" without DNS).
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

struct Recorded(mpsc::UnboundedSender<(String, String, Value)>);

impl BindingEvents for Recorded {
    fn emit(&self, agent_id: &str, event_type: &str, payload: Value) {
        let _ = self
            .0
            .send((agent_id.to_owned(), event_type.to_owned(), payload));
    }
}

struct Rig {
    streams: Arc<Streams>,
    outbound: Arc<Outbound>,
    events: mpsc::UnboundedReceiver<(String, String, Value)>,
}

impl Rig {
    fn new() -> Self {
        let lookup: Arc<dyn Lookup> = Arc::new(Table(HashMap::from([(
            "db.internal.test",
            "10.0.0.5".parse().unwrap(),
        )])));
        let outbound = Outbound::new(
            Arc::new(NoAgents),
            Arc::clone(&lookup),
            adf_net::tools::ServingCell::default(),
        );
        let (sender, events) = mpsc::unbounded_channel();
        let streams = Streams::new(Arc::clone(&outbound), lookup, Arc::new(Recorded(sender)));
        Rig {
            streams,
            outbound,
            events,
        }
    }

    /// The next event of `event_type` (earlier ones of other types are skipped).
    async fn until(&mut self, event_type: &str) -> Value {
        tokio::time::timeout(SAFETY, async {
            loop {
                let (agent, kind, payload) = self.events.recv().await.unwrap();
                assert_eq!(agent, AGENT);
                if kind == event_type {
                    return payload;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {event_type} event"))
    }

    async fn bind(&self, config: &Value, request: Value) -> Result<String, StreamError> {
        let request = BindRequest::parse(&request)?;
        self.streams.bind(AGENT, config, request).await
    }
}

fn tcp_config(ports: &[u16]) -> Value {
    let rules: Vec<Value> = ports
        .iter()
        .map(|p| json!({ "host": "127.0.0.1", "port": p }))
        .collect();
    json!({ "id": AGENT, "stream_bind": { "allow_tcp_bind": true, "tcp_allowlist": rules } })
}

fn tcp(port: u16) -> Value {
    json!({ "kind": "tcp", "host": "127.0.0.1", "port": port })
}

/// A binding between two fresh sockets on 127.0.0.1, both ends accepted.
struct TcpPair {
    id: String,
    a: TcpStream,
    b: TcpStream,
    a_port: u16,
    b_port: u16,
}

type Peer = tokio_tungstenite::WebSocketStream<TcpStream>;

impl Rig {
    /// Binds a → b between two fresh listeners, with `extra` request fields
    /// (`bidirectional`, `options`), and accepts both ends.
    async fn tcp_pair(&self, extra: Value) -> TcpPair {
        let (left, a_port) = listener().await;
        let (right, b_port) = listener().await;
        let mut request = json!({ "a": tcp(a_port), "b": tcp(b_port) });
        if let (Some(fields), Value::Object(more)) = (request.as_object_mut(), extra) {
            fields.extend(more);
        }
        let id = self
            .bind(&tcp_config(&[a_port, b_port]), request)
            .await
            .unwrap();
        let a = accept(&left).await;
        let b = accept(&right).await;
        TcpPair {
            id,
            a,
            b,
            a_port,
            b_port,
        }
    }

    /// Opens the outbound connection `relay` to a fresh WebSocket server on 127.0.0.1 and
    /// returns the server's side of it.
    async fn ws_relay(&self) -> Peer {
        let (ws_listener, ws_port) = listener().await;
        let server = tokio::spawn(async move {
            let stream = accept(&ws_listener).await;
            tokio_tungstenite::accept_async(stream).await.unwrap()
        });
        let spec = OutboundSpec::from_entry(
            &json!({ "id": "relay", "url": format!("ws://127.0.0.1:{ws_port}/ws"), "auth": "none", "auto_reconnect": false }),
            adf_egress::Policy::default(),
        )
        .unwrap();
        let agent = ServedAgent {
            id: AGENT.to_owned(),
            path: std::env::temp_dir().join("unused.adf"),
        };
        self.outbound.connect(agent, spec).await.unwrap();
        server.await.unwrap()
    }
}

/// The next binary frame the peer receives (pings and pongs skipped).
async fn next_binary(peer: &mut Peer) -> Vec<u8> {
    tokio::time::timeout(SAFETY, async {
        loop {
            match peer.next().await.unwrap().unwrap() {
                Message::Binary(bytes) => return bytes.to_vec(),
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("unexpected frame {other:?}"),
            }
        }
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn srv_39_srv_40_a_tcp_binding_pipes_bytes_both_ways_and_counts_them() {
    let mut rig = Rig::new();
    let TcpPair {
        id,
        mut a,
        mut b,
        a_port: left_port,
        b_port: right_port,
    } = rig.tcp_pair(json!({ "bidirectional": true })).await;
    assert!(id.starts_with("sb_"), "{id}");
    let created = rig.until("binding.created").await;
    assert_eq!(created["binding_id"], id.as_str());

    a.write_all(b"hello").await.unwrap();
    assert_eq!(read_exactly(&mut b, 5).await, b"hello");
    b.write_all(b"world!").await.unwrap();
    assert_eq!(read_exactly(&mut a, 6).await, b"world!");

    let listed = rig.streams.list(AGENT);
    assert_eq!(listed.len(), 1, "{listed:?}");
    let entry = &listed[0];
    assert_eq!(entry["binding_id"], id.as_str());
    assert_eq!(entry["a"], tcp(left_port));
    assert_eq!(entry["b"], tcp(right_port));
    assert_eq!(entry["bidirectional"], true);
    assert_eq!(entry["origin"], "imperative");
    assert_eq!(entry["status"], "active");
    assert!(entry["created_at"].as_i64().unwrap() > 0);
    assert!(rig.streams.list("another-agent").is_empty());

    // a hangs up: with the default close policy the binding ends and b is closed.
    drop(a);
    assert!(read_to_end(&mut b).await.is_empty());
    let ended = rig.until("binding.terminated").await;
    assert_eq!(ended["reason"], "endpoint_closed");
    assert_eq!(ended["bytes_a_to_b"], 5);
    assert_eq!(ended["bytes_b_to_a"], 6);
    assert!(rig.streams.list(AGENT).is_empty());
}

#[tokio::test]
async fn srv_40_stream_unbind_closes_both_endpoints() {
    let mut rig = Rig::new();
    let TcpPair {
        id, mut a, mut b, ..
    } = rig.tcp_pair(json!({})).await;
    a.write_all(b"x").await.unwrap();
    assert_eq!(read_exactly(&mut b, 1).await, b"x");
    assert!(rig.streams.unbind(AGENT, &id));
    assert!(!rig.streams.unbind(AGENT, &id), "already gone");
    assert!(read_to_end(&mut b).await.is_empty());
    let ended = rig.until("binding.terminated").await;
    assert_eq!(ended["reason"], "unbound");
    assert_eq!(ended["bytes_a_to_b"], 1);
}

#[tokio::test]
async fn srv_37_srv_38_bindings_are_refused_by_their_gates() {
    let rig = Rig::new();
    let (_open, port) = listener().await;
    let closed = json!({ "id": AGENT });
    let refused = rig
        .bind(&closed, json!({ "a": tcp(port), "b": tcp(port) }))
        .await
        .unwrap_err();
    assert!(matches!(refused, StreamError::Refused(_)), "{refused}");
    assert!(refused.to_string().contains("allow_tcp_bind"), "{refused}");

    let other_port = tcp_config(&[port.wrapping_add(1).max(1)]);
    let refused = rig
        .bind(&other_port, json!({ "a": tcp(port), "b": tcp(port) }))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("tcp_allowlist"), "{refused}");

    // Allowlisted by the gates, refused by the egress policy: a private address needs
    // security.allow_local_fetch (the name resolves through the test's table).
    let private = json!({ "id": AGENT, "stream_bind": { "allow_tcp_bind": true, "tcp_allowlist": [{ "host": "*" }] } });
    let refused = rig
        .bind(
            &private,
            json!({ "a": { "kind": "tcp", "host": "db.internal.test", "port": 5432 }, "b": tcp(port) }),
        )
        .await
        .unwrap_err();
    assert!(matches!(refused, StreamError::Refused(_)), "{refused}");
    assert!(refused.to_string().contains("10.0.0.5"), "{refused}");

    let process = json!({ "kind": "process", "command": ["cat"] });
    let refused = rig
        .bind(
            &tcp_config(&[port]),
            json!({ "a": tcp(port), "b": process }),
        )
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("host_process_bind"),
        "{refused}"
    );

    let isolated =
        json!({ "kind": "process", "isolation": "container_isolated", "command": ["cat"] });
    let refused = rig
        .bind(
            &tcp_config(&[port]),
            json!({ "a": tcp(port), "b": isolated }),
        )
        .await
        .unwrap_err();
    assert!(matches!(refused, StreamError::Invalid(_)), "{refused}");
    assert!(refused.to_string().contains("image"), "{refused}");

    let refused = rig
        .bind(
            &tcp_config(&[port]),
            json!({ "a": tcp(port), "b": { "kind": "umbilical" } }),
        )
        .await
        .unwrap_err();
    assert!(matches!(refused, StreamError::Invalid(_)), "{refused}");
    assert!(rig.streams.list(AGENT).is_empty(), "nothing was bound");
}

#[tokio::test]
async fn srv_39_max_bytes_closes_the_binding_after_exactly_that_many_bytes() {
    let mut rig = Rig::new();
    let TcpPair { mut a, mut b, .. } = rig.tcp_pair(json!({ "options": { "max_bytes": 4 } })).await;
    a.write_all(b"abcdefgh").await.unwrap();
    assert_eq!(read_to_end(&mut b).await, b"abcd");
    let exceeded = rig.until("binding.threshold_exceeded").await;
    assert_eq!(exceeded["limit"], "max_bytes");
    let ended = rig.until("binding.terminated").await;
    assert_eq!(ended["reason"], "max_bytes");
    assert_eq!(ended["bytes_a_to_b"], 4);
}

#[tokio::test]
async fn srv_39_idle_timeout_closes_a_quiet_binding() {
    let mut rig = Rig::new();
    let TcpPair { a: _a, mut b, .. } = rig
        .tcp_pair(
            json!({ "options": { "idle_timeout_ms": 100, "flow_summary_interval_ms": 10000 } }),
        )
        .await;
    // Nobody writes: the binding closes b by itself (no max_duration, no max_bytes).
    assert!(read_to_end(&mut b).await.is_empty());
    let ended = rig.until("binding.terminated").await;
    assert_eq!(ended["reason"], "idle_timeout");
    assert_eq!(ended["bytes_a_to_b"], 0);
}

#[tokio::test]
async fn srv_39_max_duration_ends_a_busy_binding() {
    let mut rig = Rig::new();
    let TcpPair { a: _a, mut b, .. } = rig
        .tcp_pair(json!({ "options": { "max_duration_ms": 100 } }))
        .await;
    assert!(read_to_end(&mut b).await.is_empty());
    let ended = rig.until("binding.terminated").await;
    assert_eq!(ended["reason"], "max_duration");
}

#[tokio::test]
async fn srv_39_flow_summaries_report_the_counters() {
    let mut rig = Rig::new();
    let TcpPair {
        id, mut a, mut b, ..
    } = rig
        .tcp_pair(json!({ "options": { "flow_summary_interval_ms": 20 } }))
        .await;
    a.write_all(b"12345").await.unwrap();
    assert_eq!(read_exactly(&mut b, 5).await, b"12345");
    let summary = loop {
        let summary = rig.until("binding.flow_summary").await;
        if summary["bytes_a_to_b"] == 5 {
            break summary;
        }
    };
    assert_eq!(summary["binding_id"], id.as_str());
    assert_eq!(summary["bytes_b_to_a"], 0);
}

#[tokio::test]
async fn srv_38_a_host_process_binding_pipes_through_the_child() {
    let mut rig = Rig::new();
    let (left, left_port) = listener().await;
    let mut config = tcp_config(&[left_port]);
    config["stream_bind"]["host_process_bind"] = json!(true);
    rig.bind(
        &config,
        json!({ "a": tcp(left_port), "b": { "kind": "process", "command": ["cat"] }, "bidirectional": true }),
    )
    .await
    .unwrap();
    let mut a = accept(&left).await;
    a.write_all(b"through cat\n").await.unwrap();
    assert_eq!(read_exactly(&mut a, 12).await, b"through cat\n");
    // Closing a closes cat's stdin; cat exits and the binding ends.
    a.shutdown().await.unwrap();
    let ended = rig.until("binding.terminated").await;
    assert_eq!(ended["bytes_a_to_b"], 12);
    assert_eq!(ended["bytes_b_to_a"], 12);
}

#[tokio::test]
async fn srv_38_a_process_endpoint_gets_a_cleared_environment() {
    let mut rig = Rig::new();
    let (right, right_port) = listener().await;
    let mut config = tcp_config(&[right_port]);
    config["stream_bind"]["host_process_bind"] = json!(true);
    // The test process has many variables (cargo sets CARGO_*); none reach the child.
    assert!(std::env::vars().count() > 2);
    rig.bind(
        &config,
        json!({ "a": { "kind": "process", "command": ["env"], "env": { "GIVEN": "yes" } }, "b": tcp(right_port) }),
    )
    .await
    .unwrap();
    let mut b = accept(&right).await;
    let printed = String::from_utf8(read_to_end(&mut b).await).unwrap();
    let mut names: Vec<&str> = printed
        .lines()
        .filter_map(|line| line.split('=').next())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["GIVEN", "PATH"], "{printed}");
    rig.until("binding.terminated").await;
}

#[tokio::test]
async fn srv_36_the_umbilical_endpoint_streams_the_agents_events_as_ndjson() {
    let mut rig = Rig::new();
    let (right, right_port) = listener().await;
    let config = tcp_config(&[right_port]);
    rig.bind(
        &config,
        json!({ "a": { "kind": "umbilical", "filter": { "event_types": ["custom.*"] } }, "b": tcp(right_port) }),
    )
    .await
    .unwrap();
    let mut b = accept(&right).await;
    rig.streams.offer_event(
        "another-agent",
        "custom.other",
        || json!({ "event_type": "custom.other" }),
    );
    rig.streams.offer_event(AGENT, "turn.completed", || {
        panic!("an unwanted event is never built")
    });
    rig.streams.offer_event(
        AGENT,
        "custom.ping",
        || json!({ "event_type": "custom.ping", "payload": { "n": 1 } }),
    );
    let expected = format!(
        "{}\n",
        json!({ "event_type": "custom.ping", "payload": { "n": 1 } })
    );
    // The first line to arrive is the wanted event.
    let mut line = Vec::new();
    while line.last() != Some(&b'\n') {
        line.extend(read_exactly(&mut b, 1).await);
    }
    assert_eq!(String::from_utf8(line).unwrap(), expected);
    rig.streams.release(AGENT);
    assert!(read_to_end(&mut b).await.is_empty());
    let ended = rig.until("binding.terminated").await;
    assert_eq!(ended["reason"], "released");
}

#[tokio::test]
async fn stl_04_release_ends_every_binding_of_the_agent() {
    let mut rig = Rig::new();
    let TcpPair { mut a, mut b, .. } = rig.tcp_pair(json!({ "bidirectional": true })).await;
    assert_eq!(rig.streams.list(AGENT).len(), 1);
    rig.streams.release(AGENT);
    assert!(rig.streams.list(AGENT).is_empty());
    assert!(read_to_end(&mut a).await.is_empty());
    assert!(read_to_end(&mut b).await.is_empty());
    let ended = rig.until("binding.terminated").await;
    assert_eq!(ended["reason"], "released");
}

#[tokio::test]
async fn srv_41_declared_bindings_are_materialized_and_refusals_listed() {
    let mut rig = Rig::new();
    let (left, left_port) = listener().await;
    let (right, right_port) = listener().await;
    let mut config = tcp_config(&[left_port, right_port]);
    config["stream_bindings"] = json!([
        { "id": "pipe", "a": tcp(left_port), "b": tcp(right_port) },
        { "id": "shell", "a": tcp(left_port), "b": { "kind": "process", "command": ["sh"] } },
        { "id": "off", "enabled": false, "a": tcp(left_port), "b": tcp(right_port) }
    ]);
    let refused = rig.streams.materialize(AGENT, &config);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0, "shell");
    let materialized = rig.until("binding.materialized").await;
    assert_eq!(materialized["binding_id"], "pipe");
    let mut a = accept(&left).await;
    let mut b = accept(&right).await;
    a.write_all(b"declared").await.unwrap();
    assert_eq!(read_exactly(&mut b, 8).await, b"declared");
    let listed = rig.streams.list(AGENT);
    let by_id: HashMap<&str, &Value> = listed
        .iter()
        .map(|e| (e["binding_id"].as_str().unwrap(), e))
        .collect();
    assert_eq!(by_id.len(), 2, "{listed:?}");
    assert_eq!(by_id["pipe"]["origin"], "declarative");
    assert_eq!(by_id["pipe"]["status"], "active");
    assert_eq!(by_id["shell"]["status"], "error");
    assert!(
        by_id["shell"]["error"]
            .as_str()
            .unwrap()
            .contains("host_process_bind")
    );
    // Materializing again (a reload without release) does not double a running binding.
    let again = rig.streams.materialize(AGENT, &config);
    assert!(again.iter().any(|(id, _)| id == "pipe"), "{again:?}");
    rig.streams.release(AGENT);

    // An agent stored `off` materializes nothing.
    config["state"] = json!("off");
    assert!(rig.streams.materialize(AGENT, &config).is_empty());
    assert!(rig.streams.list(AGENT).is_empty());
}

#[tokio::test]
async fn srv_41_a_declared_binding_with_reconnect_opens_again() {
    let mut rig = Rig::new();
    let (left, left_port) = listener().await;
    let (right, right_port) = listener().await;
    let mut config = tcp_config(&[left_port, right_port]);
    config["stream_bindings"] = json!([
        { "id": "relay", "a": tcp(left_port), "b": tcp(right_port), "reconnect": true }
    ]);
    assert!(rig.streams.materialize(AGENT, &config).is_empty());
    let a = accept(&left).await;
    let mut b = accept(&right).await;
    drop(a);
    assert!(read_to_end(&mut b).await.is_empty());
    let reconnecting = rig.until("binding.reconnecting").await;
    assert_eq!(reconnecting["binding_id"], "relay");
    let mut a = accept(&left).await;
    let mut b = accept(&right).await;
    a.write_all(b"again").await.unwrap();
    assert_eq!(read_exactly(&mut b, 5).await, b"again");
    rig.streams.release(AGENT);
    let ended = rig.until("binding.terminated").await;
    assert_eq!(ended["reason"], "released");
    assert_eq!(ended["bytes_a_to_b"], 5);
}

#[tokio::test]
async fn srv_36_a_ws_endpoint_carries_binary_frames_of_an_outbound_connection() {
    let rig = Rig::new();
    let mut peer = rig.ws_relay().await;
    let (right, right_port) = listener().await;
    let config = tcp_config(&[right_port]);
    rig.bind(
        &config,
        json!({ "a": { "kind": "ws", "connection_id": "relay" }, "b": tcp(right_port), "bidirectional": true }),
    )
    .await
    .unwrap();
    let mut b = accept(&right).await;
    peer.send(Message::Binary(b"from peer".to_vec().into()))
        .await
        .unwrap();
    assert_eq!(read_exactly(&mut b, 9).await, b"from peer");
    b.write_all(b"to peer").await.unwrap();
    assert_eq!(next_binary(&mut peer).await, b"to peer");

    let second = rig
        .bind(
            &config,
            json!({ "a": { "kind": "ws", "connection_id": "relay" }, "b": tcp(right_port) }),
        )
        .await
        .unwrap_err();
    assert!(second.to_string().contains("already feeds"), "{second}");
    let missing = rig
        .bind(
            &config,
            json!({ "a": { "kind": "ws", "connection_id": "nope" }, "b": tcp(right_port) }),
        )
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("no open outbound WebSocket"),
        "{missing}"
    );
    rig.streams.release(AGENT);
    rig.outbound.release(AGENT);
}

#[tokio::test]
async fn srv_39_queue_high_water_bytes_bounds_what_a_direction_holds() {
    let rig = Rig::new();
    let mut peer = rig.ws_relay().await;
    let (right, right_port) = listener().await;
    rig.bind(
        &tcp_config(&[right_port]),
        json!({
            "a": { "kind": "ws", "connection_id": "relay" }, "b": tcp(right_port),
            "bidirectional": true, "options": { "queue_high_water_bytes": 3 }
        }),
    )
    .await
    .unwrap();
    let mut b = accept(&right).await;
    b.write_all(b"to the peer").await.unwrap();
    // Each chunk read from b becomes one frame: none may exceed the high-water mark.
    let mut got = Vec::new();
    while got.len() < 11 {
        let chunk = next_binary(&mut peer).await;
        assert!(chunk.len() <= 3, "a {}-byte chunk", chunk.len());
        got.extend_from_slice(&chunk);
    }
    assert_eq!(got, b"to the peer");
    rig.streams.release(AGENT);
    rig.outbound.release(AGENT);
}
