//! Stream bindings (§5.23) and umbilical deltas (§5.24) in the daemon, on real sockets on
//! 127.0.0.1: a lambda binding two sockets through `stream_bind`, declared bindings
//! materialized at load and released by `off` (STL-04), and `turn.delta` events reaching an
//! umbilical endpoint when `umbilical.stream_deltas` is on.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use adf_testkit::sockets::{accept, listener, read_exactly, read_to_end};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use adf_server::Agent;
use adf_testkit::{MockProvider, Turn};
use common::{Harness, agent_file, chat, model_config, stored_config, wait_for};

/// Only a hung test waits this long; no assertion depends on it.
const SAFETY: Duration = Duration::from_secs(30);

fn tcp(port: u16) -> Value {
    json!({ "kind": "tcp", "host": "127.0.0.1", "port": port })
}

fn gates(ports: &[u16]) -> Value {
    let rules: Vec<Value> = ports
        .iter()
        .map(|p| json!({ "host": "127.0.0.1", "port": p }))
        .collect();
    json!({ "allow_tcp_bind": true, "tcp_allowlist": rules })
}

async fn load(h: &Harness, path: &std::path::Path) -> Arc<Agent> {
    h.server.daemon.load(path).await.unwrap().agent
}

async fn get_json(h: &Harness, path: &str) -> Value {
    let client = adf_egress::service_client(adf_egress::ClientOptions::default()).unwrap();
    let response = tokio::time::timeout(
        SAFETY,
        // Agent routes are served on the serving port (issue 28 finding 3).
        client.get(format!("{}{path}", h.server.serve_url())).send(),
    )
    .await
    .unwrap()
    .unwrap();
    response.json().await.unwrap()
}

const STREAM_ROUTES: &str = r#"
export async function bind(req) {
  try {
    const bound = await adf.stream_bind({
      a: { kind: "tcp", host: "127.0.0.1", port: Number(req.query.a) },
      b: { kind: "tcp", host: "127.0.0.1", port: Number(req.query.b) },
      bidirectional: true
    });
    return { status: 200, body: bound };
  } catch (e) {
    return { status: 200, body: { code: e.code, message: e.message } };
  }
}
export async function list(req) {
  return { status: 200, body: await adf.stream_bindings({}) };
}
export async function unbind(req) {
  return { status: 200, body: await adf.stream_unbind({ binding_id: req.query.id }) };
}
"#;

fn stream_tools() -> Vec<(&'static str, Value)> {
    vec![
        ("tools.stream_bind.enabled", json!(true)),
        ("tools.stream_unbind.enabled", json!(true)),
        ("tools.stream_bindings.enabled", json!(true)),
    ]
}

#[tokio::test]
async fn srv_39_srv_40_a_lambda_binds_two_local_sockets_through_the_stream_tools() {
    let h = Harness::start().await;
    let (left, left_port) = listener().await;
    let (right, right_port) = listener().await;
    let mut config = vec![
        ("handle", json!("pipes")),
        ("stream_bind", gates(&[left_port, right_port])),
        (
            "serving.api",
            json!([
                { "method": "GET", "path": "/bind", "lambda": "lib/streams.ts:bind" },
                { "method": "GET", "path": "/list", "lambda": "lib/streams.ts:list" },
                { "method": "GET", "path": "/unbind", "lambda": "lib/streams.ts:unbind" }
            ]),
        ),
    ];
    config.extend(stream_tools());
    let path = agent_file(
        h.dir.path(),
        "pipes",
        &[("lib/streams.ts", STREAM_ROUTES)],
        &config,
    );
    load(&h, &path).await;

    let refused = get_json(&h, &format!("/agents/pipes/bind?a={left_port}&b=1")).await;
    assert_eq!(refused["code"], "TOOL_ERROR", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("tcp_allowlist"),
        "{refused}"
    );

    let bound = get_json(
        &h,
        &format!("/agents/pipes/bind?a={left_port}&b={right_port}"),
    )
    .await;
    let id = bound["binding_id"]
        .as_str()
        .expect("a binding id")
        .to_owned();
    let mut a = accept(&left).await;
    let mut b = accept(&right).await;
    a.write_all(b"ping").await.unwrap();
    assert_eq!(read_exactly(&mut b, 4).await, b"ping");
    b.write_all(b"pong!").await.unwrap();
    assert_eq!(read_exactly(&mut a, 5).await, b"pong!");

    let listed = get_json(&h, "/agents/pipes/list").await;
    let entry = &listed["bindings"][0];
    assert_eq!(entry["binding_id"], id.as_str(), "{listed}");
    assert_eq!(entry["origin"], "imperative");
    assert_eq!(entry["a"], tcp(left_port));
    assert_eq!(entry["b"], tcp(right_port));

    let unbound = get_json(&h, &format!("/agents/pipes/unbind?id={id}")).await;
    assert_eq!(unbound, json!({ "ok": true }));
    assert!(read_to_end(&mut a).await.is_empty());
    assert!(read_to_end(&mut b).await.is_empty());
    let listed = get_json(&h, "/agents/pipes/list").await;
    assert_eq!(listed["bindings"], json!([]));
    h.stop().await;
}

#[tokio::test]
async fn srv_41_stl_04_declared_bindings_run_from_load_until_off() {
    let h = Harness::start().await;
    let (left, left_port) = listener().await;
    let (right, right_port) = listener().await;
    let path = agent_file(
        h.dir.path(),
        "declared",
        &[],
        &[
            ("handle", json!("declared")),
            ("stream_bind", gates(&[left_port, right_port])),
            (
                "stream_bindings",
                json!([{ "id": "pipe", "a": tcp(left_port), "b": tcp(right_port), "bidirectional": true }]),
            ),
        ],
    );
    let agent = load(&h, &path).await;
    let mut a = accept(&left).await;
    let mut b = accept(&right).await;
    a.write_all(b"declared").await.unwrap();
    assert_eq!(read_exactly(&mut b, 8).await, b"declared");

    wait_for("binding.materialized on the bus", || async {
        h.server.daemon.events().since(0).iter().any(|f| {
            f.event.event_type == "binding.materialized"
                && f.event.source == "system:stream_bind"
                && f.event.payload["binding_id"] == "pipe"
        })
    })
    .await;

    h.client
        .call(
            Method::POST,
            &format!("/agents/{}/state", agent.id),
            Some(&json!({ "state": "off" })),
        )
        .await
        .unwrap();
    assert!(read_to_end(&mut a).await.is_empty(), "off closed a");
    assert!(read_to_end(&mut b).await.is_empty(), "off closed b");
    wait_for("binding.terminated on the bus", || async {
        h.server.daemon.events().since(0).iter().any(|f| {
            f.event.event_type == "binding.terminated" && f.event.payload["reason"] == "released"
        })
    })
    .await;
    h.stop().await;
}

/// A plain WebSocket server on 127.0.0.1 that reports each connection it accepts and keeps
/// it open until the client leaves.
async fn counting_ws_server() -> (u16, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let (port, accepted, _closed) = watched_ws_server().await;
    (port, accepted)
}

/// [`counting_ws_server`] that also reports each connection's end (the client closed or
/// dropped it).
async fn watched_ws_server() -> (
    u16,
    tokio::sync::mpsc::UnboundedReceiver<()>,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    let (listener, port) = listener().await;
    let (seen, ended) = ws_server_on(listener);
    (port, seen, ended)
}

/// [`watched_ws_server`] on a listener the caller bound.
fn ws_server_on(
    listener: tokio::net::TcpListener,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<()>,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    use futures::StreamExt as _;
    let (accepted, seen) = tokio::sync::mpsc::unbounded_channel();
    let (closed, ended) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let accepted = accepted.clone();
            let closed = closed.clone();
            tokio::spawn(async move {
                if let Ok(mut socket) = tokio_tungstenite::accept_async(socket).await {
                    let _ = accepted.send(());
                    while let Some(Ok(_)) = socket.next().await {}
                    let _ = closed.send(());
                }
            });
        }
    });
    (seen, ended)
}

async fn next_signal(signals: &mut tokio::sync::mpsc::UnboundedReceiver<()>, what: &str) {
    tokio::time::timeout(SAFETY, signals.recv())
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .unwrap();
}

async fn set_state(h: &Harness, agent: &Agent, state: &str) {
    h.client
        .call(
            Method::POST,
            &format!("/agents/{}/state", agent.id),
            Some(&json!({ "state": state })),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn srv_41_stl_04_leaving_off_and_a_config_change_materialize_declared_network_again() {
    let h = Harness::start().await;
    let (left, left_port) = listener().await;
    let (right, right_port) = listener().await;
    let (third, third_port) = listener().await;
    let (ws_port, mut ws_accepted) = counting_ws_server().await;
    let path = agent_file(
        h.dir.path(),
        "comeback",
        &[],
        &[
            ("handle", json!("comeback")),
            ("stream_bind", gates(&[left_port, right_port, third_port])),
            (
                "stream_bindings",
                json!([{ "id": "pipe", "a": tcp(left_port), "b": tcp(right_port), "bidirectional": true }]),
            ),
            (
                "ws_connections",
                json!([{ "id": "peer", "url": format!("ws://127.0.0.1:{ws_port}/ws"), "auth": "none", "enabled": true }]),
            ),
        ],
    );
    let agent = load(&h, &path).await;
    let mut a = accept(&left).await;
    let mut b = accept(&right).await;
    tokio::time::timeout(SAFETY, ws_accepted.recv())
        .await
        .unwrap()
        .unwrap();

    set_state(&h, &agent, "off").await;
    assert!(read_to_end(&mut a).await.is_empty(), "off closed a");
    assert!(read_to_end(&mut b).await.is_empty(), "off closed b");
    assert!(h.server.daemon.outbound_connections(&agent.id).is_empty());

    set_state(&h, &agent, "active").await;
    let mut a = accept(&left).await;
    let mut b = accept(&right).await;
    a.write_all(b"again").await.unwrap();
    assert_eq!(read_exactly(&mut b, 5).await, b"again");
    tokio::time::timeout(SAFETY, ws_accepted.recv())
        .await
        .expect("the ws connection opened again")
        .unwrap();
    wait_for("the outbound connection listed", || async {
        h.server.daemon.outbound_connections(&agent.id).len() == 1
    })
    .await;

    // A config change at run time: the binding follows its new declaration.
    let mut config = stored_config(&h, &agent).await;
    config["stream_bindings"][0]["b"] = tcp(third_port);
    common::put_config(&h, &agent, &config).await;
    assert!(read_to_end(&mut b).await.is_empty(), "the old b closed");
    assert!(read_to_end(&mut a).await.is_empty(), "the old a closed");
    let mut a = accept(&left).await;
    let mut c = accept(&third).await;
    a.write_all(b"moved").await.unwrap();
    assert_eq!(read_exactly(&mut c, 5).await, b"moved");
    // The unchanged ws_connections entry kept its one connection.
    assert_eq!(h.server.daemon.outbound_connections(&agent.id).len(), 1);
    h.stop().await;
}

const WARM_ROUTE: &str = r#"
export async function counter(req) {
  globalThis.count = (globalThis.count || 0) + 1;
  return { status: 200, body: String(globalThis.count) };
}
"#;

/// Issue 15 (a): the model turning its own agent `off` (`sys_set_state`) releases what the
/// owner's `POST /state off` releases: the outbound WebSocket closes, the declared binding
/// ends and the warm route's sandbox is dropped, without any `POST /state` or config PUT.
#[tokio::test]
async fn stl_04_a_turn_that_turns_its_agent_off_releases_websockets_bindings_and_routes() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::tool_call("sys_set_state", json!({ "state": "off" })));
    let h = Harness::start().await;
    let (left, left_port) = listener().await;
    let (right, right_port) = listener().await;
    let (ws_port, mut ws_accepted, mut ws_closed) = watched_ws_server().await;
    let mut config = model_config(&mock);
    config.extend([
        ("handle", json!("selfoff")),
        ("stream_bind", gates(&[left_port, right_port])),
        (
            "stream_bindings",
            json!([{ "id": "pipe", "a": tcp(left_port), "b": tcp(right_port) }]),
        ),
        (
            "ws_connections",
            json!([{ "id": "peer", "url": format!("ws://127.0.0.1:{ws_port}/ws"), "auth": "none", "auto_reconnect": false }]),
        ),
        (
            "serving.api",
            json!([{ "method": "GET", "path": "/warm", "lambda": "lib/routes.ts:counter", "warm": true }]),
        ),
    ]);
    let path = agent_file(
        h.dir.path(),
        "selfoff",
        &[("lib/routes.ts", WARM_ROUTE)],
        &config,
    );
    let agent = load(&h, &path).await;
    let mut a = accept(&left).await;
    let mut b = accept(&right).await;
    next_signal(&mut ws_accepted, "the ws connection opened").await;
    assert_eq!(get_json(&h, "/agents/selfoff/warm").await, json!(1));
    let serving = h.server.daemon.serving().unwrap();
    assert_eq!(serving.holding(), vec![agent.id.clone()]);

    chat(&h, &agent, "stop now").await;
    next_signal(
        &mut ws_closed,
        "the turn's off closed the outbound WebSocket",
    )
    .await;
    assert!(read_to_end(&mut a).await.is_empty(), "off closed a");
    assert!(read_to_end(&mut b).await.is_empty(), "off closed b");
    // One release, in order: the routes went before the WebSocket whose close we saw.
    assert!(serving.holding().is_empty(), "the warm sandbox was dropped");
    assert!(h.server.daemon.outbound_connections(&agent.id).is_empty());
    assert_eq!(agent.info().display_state, "off");
    h.stop().await;
}

/// A daemon that stopped earlier in this process gave its control port back to the kernel,
/// which hands it to the next listener asking for a free one: an agent's declared WebSocket
/// to that listener opens. The port used to stay refused as a control API for the life of
/// the process, so now and then (a few hundred daemons into a full run) a test's own server
/// drew such a port and its agent's connection was refused at load: the "declared
/// WebSocket never connects" flake of stl_04 and srv_35.
#[tokio::test]
async fn srv_22_stl_04_a_stopped_daemons_control_port_serves_the_next_listener_that_gets_it() {
    let earlier = Harness::start().await;
    let freed = earlier.server.addr;
    earlier.stop().await;
    // What the kernel does now and then, done on purpose: the next listener gets that port.
    let reused = tokio::net::TcpListener::bind(freed).await.unwrap();
    let (mut ws_accepted, _closed) = ws_server_on(reused);

    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "reuser",
        &[],
        &[
            ("handle", json!("reuser")),
            (
                "ws_connections",
                json!([{ "id": "peer", "url": format!("ws://{freed}/ws"), "auth": "none", "auto_reconnect": false }]),
            ),
        ],
    );
    let agent = load(&h, &path).await;
    next_signal(&mut ws_accepted, "the WebSocket to the reused port opened").await;
    assert_eq!(h.server.daemon.outbound_connections(&agent.id).len(), 1);
    // The daemon still running keeps its own port refused.
    let policy = adf_egress::Policy::default();
    assert!(policy.is_control_api(h.server.addr.ip(), h.server.addr.port()));
    assert!(!policy.is_control_api(freed.ip(), freed.port()));
    h.stop().await;
}

/// The same for a daemon never stopped: the test that started it ended (and its runtime with
/// it) while it still served. Its control port leaves rule 2 with the task that accepted on it.
#[test]
fn srv_22_a_daemon_whose_runtime_ended_without_a_shutdown_frees_its_control_port() {
    let (freed, still_refused) = std::thread::spawn(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let earlier = runtime.block_on(Harness::start());
        let addr = earlier.server.addr;
        let refused = adf_egress::Policy::default().is_control_api(addr.ip(), addr.port());
        drop(runtime);
        drop(earlier);
        (addr, refused)
    })
    .join()
    .unwrap();
    assert!(still_refused, "refused while it served");
    let _reused = std::net::TcpListener::bind(freed).unwrap();
    assert!(!adf_egress::Policy::default().is_control_api(freed.ip(), freed.port()));
}

/// Issue 15 (b): an agent whose file says `state: off` opens nothing at load, and
/// `POST /state active` materializes its declared binding and `ws_connections` entry
/// (the live state decides; `POST /state` is not written to the file).
#[tokio::test]
async fn stl_04_srv_41_an_agent_stored_off_opens_its_declared_network_when_turned_on() {
    let h = Harness::start().await;
    let (left, left_port) = listener().await;
    let (right, right_port) = listener().await;
    let (ws_port, mut ws_accepted) = counting_ws_server().await;
    let path = agent_file(
        h.dir.path(),
        "storedoff",
        &[],
        &[
            ("handle", json!("storedoff")),
            ("state", json!("off")),
            ("stream_bind", gates(&[left_port, right_port])),
            (
                "stream_bindings",
                json!([{ "id": "pipe", "a": tcp(left_port), "b": tcp(right_port) }]),
            ),
            (
                "ws_connections",
                json!([{ "id": "peer", "url": format!("ws://127.0.0.1:{ws_port}/ws"), "auth": "none" }]),
            ),
        ],
    );
    let agent = load(&h, &path).await;
    assert_eq!(agent.info().display_state, "off");
    // The load awaits what it opens: an off agent has opened nothing by now.
    assert!(h.server.daemon.outbound_connections(&agent.id).is_empty());
    assert!(
        ws_accepted.is_empty(),
        "no WebSocket for an agent stored off"
    );

    set_state(&h, &agent, "active").await;
    let mut a = accept(&left).await;
    let mut b = accept(&right).await;
    a.write_all(b"awake").await.unwrap();
    assert_eq!(read_exactly(&mut b, 5).await, b"awake");
    next_signal(&mut ws_accepted, "the ws connection opened on active").await;
    wait_for("the outbound connection listed", || async {
        h.server.daemon.outbound_connections(&agent.id).len() == 1
    })
    .await;
    assert_eq!(
        stored_config(&h, &agent).await["state"],
        "off",
        "POST /state wrote nothing"
    );
    h.stop().await;
}

/// The agent's `turn.delta` events through an umbilical endpoint bound to a local socket.
#[tokio::test]
async fn umbilical_stream_deltas_reach_the_umbilical_as_turn_delta_events() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::text("streamed in pieces").with_chunk_chars(4));
    let h = Harness::start().await;
    let (sink, sink_port) = listener().await;
    let mut config = model_config(&mock);
    config.extend([
        ("handle", json!("talker")),
        ("umbilical", json!({ "stream_deltas": true, "log": { "enabled": true } })),
        ("stream_bind", gates(&[sink_port])),
        (
            "stream_bindings",
            json!([{ "id": "deltas", "a": { "kind": "umbilical", "filter": { "event_types": ["turn.delta"] } }, "b": tcp(sink_port) }]),
        ),
    ]);
    let path = agent_file(h.dir.path(), "talker", &[], &config);
    let agent = load(&h, &path).await;
    let mut socket = accept(&sink).await;
    chat(&h, &agent, "say something").await;

    let mut text = String::new();
    let mut pieces = 0;
    let mut pending = Vec::new();
    while text != "streamed in pieces" {
        assert!(text.len() < 18, "more text than the reply: {text}");
        let mut byte = [0u8; 1];
        tokio::time::timeout(SAFETY, socket.read_exact(&mut byte))
            .await
            .expect("a delta arrived")
            .unwrap();
        if byte[0] != b'\n' {
            pending.push(byte[0]);
            continue;
        }
        let event: Value = serde_json::from_slice(&std::mem::take(&mut pending)).unwrap();
        assert_eq!(event["event_type"], "turn.delta", "{event}");
        assert_eq!(event["agent_id"], agent.id.as_str());
        if event["payload"]["kind"] == "text" {
            text.push_str(event["payload"]["text"].as_str().unwrap());
            pieces += 1;
        }
    }
    assert!(pieces >= 2, "the reply arrived in {pieces} delta(s)");

    // The replay window never keeps deltas (they would flush it).
    let log = h
        .client
        .get(&format!("/agents/{}/umbilical/events", agent.id))
        .await
        .unwrap();
    let types: Vec<&str> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event_type"].as_str())
        .collect();
    assert!(types.contains(&"binding.materialized"), "{types:?}");
    assert!(!types.contains(&"turn.delta"), "{types:?}");
    h.stop().await;
}

#[tokio::test]
async fn without_stream_deltas_no_turn_delta_is_emitted() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::text("quiet reply").with_chunk_chars(2));
    let h = Harness::start().await;
    let mut config = model_config(&mock);
    config.push(("handle", json!("quiet")));
    let path = agent_file(h.dir.path(), "quiet", &[], &config);
    let agent = load(&h, &path).await;
    chat(&h, &agent, "say something").await;
    wait_for("turn.completed", || async {
        h.server
            .daemon
            .events()
            .since(0)
            .iter()
            .any(|f| f.event.event_type == "turn.completed")
    })
    .await;
    let deltas = h
        .server
        .daemon
        .events()
        .since(0)
        .iter()
        .filter(|f| f.event.event_type == "turn.delta")
        .count();
    assert_eq!(deltas, 0);
    h.stop().await;
}

const SELF_UNLOCK: &str = r#"
export async function unlock(req) {
  try {
    await adf.sys_update_config({ path: "stream_bind.allow_tcp_bind", value: true });
    return { status: 200, body: { changed: true } };
  } catch (e) {
    return { status: 200, body: { code: e.code, message: e.message } };
  }
}
"#;

#[tokio::test]
async fn srv_42_cfg_12_an_agent_cannot_open_its_own_stream_gates() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "gated",
        &[("lib/unlock.ts", SELF_UNLOCK)],
        &[
            ("handle", json!("gated")),
            ("tools.sys_update_config.enabled", json!(true)),
            // Unrestricted, so what refuses the write is the lock on `stream_bind` itself.
            ("tools.sys_update_config.restricted", json!(false)),
            (
                "serving.api",
                json!([{ "method": "GET", "path": "/unlock", "lambda": "lib/unlock.ts:unlock" }]),
            ),
        ],
    );
    let agent = load(&h, &path).await;
    let answer = get_json(&h, "/agents/gated/unlock").await;
    assert_ne!(answer["changed"], true, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("'stream_bind' is locked"),
        "{answer}"
    );
    let config = h
        .client
        .get(&format!("/agents/{}/config", agent.id))
        .await
        .unwrap()["config"]
        .clone();
    assert_ne!(config["stream_bind"]["allow_tcp_bind"], true, "{config}");
    h.stop().await;
}

/// Issue 29 (one file, two writers): another process changing the declared
/// `stream_bindings` of a file the daemon holds moves the binding to its new declaration, as
/// a config change through the API does, without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_41_a_binding_declared_by_another_writer_is_materialized_again() {
    let h = Harness::start().await;
    let (left, left_port) = listener().await;
    let (right, right_port) = listener().await;
    let (third, third_port) = listener().await;
    let path = agent_file(
        h.dir.path(),
        "rewired",
        &[],
        &[
            ("handle", json!("rewired")),
            ("stream_bind", gates(&[left_port, right_port, third_port])),
            (
                "stream_bindings",
                json!([{ "id": "pipe", "a": tcp(left_port), "b": tcp(right_port), "bidirectional": true }]),
            ),
        ],
    );
    let _agent = load(&h, &path).await;
    let mut a = accept(&left).await;
    let mut b = accept(&right).await;
    {
        // `adf config set` of another process: its own connection to the file.
        let mut file = adf_store::AdfFile::open(&path).unwrap();
        file.config_set_path(
            adf_store::Caller::Owner,
            "stream_bindings",
            adf_store::ConfigAction::Set,
            json!([{ "id": "pipe", "a": tcp(left_port), "b": tcp(third_port), "bidirectional": true }]),
        )
        .unwrap();
        file.close().unwrap();
    }
    assert!(read_to_end(&mut b).await.is_empty(), "the old b closed");
    assert!(read_to_end(&mut a).await.is_empty(), "the old a closed");
    let mut a = accept(&left).await;
    let mut c = accept(&third).await;
    a.write_all(b"moved").await.unwrap();
    assert_eq!(read_exactly(&mut c, 5).await, b"moved");
    h.stop().await;
}
