//! Umbilical taps (§5.24) and `emit_event`'s `custom.*` events, end to end over HTTP on
//! 127.0.0.1 with real agent files: a tap's lambda receives the envelopes its filter selects
//! (exact types, `prefix.*` with `allow_wildcard`), a wildcard without `allow_wildcard` never
//! runs, `exclude_own_origin` keeps a tap from its own run's events (and `false` lets them
//! through), `max_rate_per_sec` drops a burst's excess with one `warn` row, and
//! `adf.emit_event` publishes a real `custom.*` event that reaches a tap and `/events`.
//! Each tap lambda records what it received as a row of a `local_seen` table.
use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use adf_server::Agent;
use adf_store::test_support::tables;
use adf_store::{AdfFile, Caller, ConfigAction, CreateOptions, FileWrite};
use common::{Harness, chat, wait_for};
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};

/// Every tap function records `(tap, event_type, path, source, lambda)`; `main` of emit.ts
/// emits the custom events and writes down what `emit_event` answered.
const TAP: &str = r#"
async function record(tap, event) {
  await adf.db_execute({
    sql: 'INSERT INTO local_seen (tap, event_type, path, source, lambda, envelope) VALUES (?, ?, ?, ?, ?, ?)',
    params: [tap, event.event_type, event.payload.path ?? null, event.source,
             event.payload.function_name ?? null, JSON.stringify(event)],
  });
}
export async function hello(event) { await record('hello', event); }
export async function wild(event) { await record('wild', event); }
export async function bad(event) { await record('bad', event); }
export async function burst(event) { await record('burst', event); }
export async function polite(event) {
  await record('polite', event);
  if (event.payload.path.startsWith('docs/')) {
    await adf.fs_write({ path: 'out/polite.md', content: 'seen', mode: 'write' });
  }
}
export async function echo(event) {
  await record('echo', event);
  if (event.payload.path.startsWith('docs/')) {
    await adf.fs_write({ path: 'out/echo.md', content: 'seen', mode: 'write' });
  }
}
"#;

const EMIT: &str = r#"
export async function main(event) {
  const answer = await adf.emit_event({ type: 'custom.hello', payload: { n: 1, note: 'hi' } });
  await adf.fs_write({ path: 'emit-answer.json', content: JSON.stringify(answer), mode: 'write' });
}
export async function burst(event) {
  for (let i = 0; i < 20; i++) await adf.emit_event({ type: 'custom.burst', payload: { i } });
}
"#;

/// An agent with id `id`, the tap and emitter lambdas, `local_seen`, `db_execute` enabled,
/// `umbilical_taps` as given and an `on_startup` lambda when `startup` is set.
fn new_agent(dir: &Path, id: &str, taps: Value, startup: Option<&str>) -> PathBuf {
    let path = dir.join("agents").join(format!("{id}.adf"));
    let mut file = AdfFile::create(
        &path,
        &CreateOptions {
            name: Some(id.to_owned()),
            id: Some(id.to_owned()),
            ..CreateOptions::default()
        },
    )
    .unwrap();
    for (source, text) in [("lib/tap.ts", TAP), ("lib/emit.ts", EMIT)] {
        file.file_write(
            Caller::Owner,
            source,
            text.as_bytes(),
            &FileWrite::default(),
        )
        .unwrap();
    }
    let seen = ["tap", "event_type", "path", "source", "lambda", "envelope"];
    tables(&file).create_table("local_seen", &seen).unwrap();
    let mut config = vec![
        ("tools.db_execute.enabled", json!(true)),
        ("umbilical_taps", taps),
    ];
    if let Some(lambda) = startup {
        config.push((
            "triggers",
            json!({ "on_startup": { "enabled": true, "targets": [{ "scope": "system", "lambda": lambda }] } }),
        ));
    }
    for (key, value) in config {
        file.config_set_path(Caller::Owner, key, ConfigAction::Set, value)
            .unwrap();
    }
    file.close().unwrap();
    path
}

type Seen = Vec<(String, String, Option<String>, String, Option<String>)>;

async fn seen(agent: &Agent) -> Seen {
    let rows = agent
        .store()
        .run(|file| tables(file).rows("local_seen"))
        .await;
    let text = |cell: &Value| cell.as_str().map(str::to_owned);
    rows.unwrap()
        .iter()
        .map(|r| {
            let tap = text(&r["tap"]).unwrap();
            let event_type = text(&r["event_type"]).unwrap();
            let source = text(&r["source"]).unwrap();
            (
                tap,
                event_type,
                text(&r["path"]),
                source,
                text(&r["lambda"]),
            )
        })
        .collect()
}

async fn seen_by(agent: &Agent, tap: &str) -> Seen {
    seen(agent)
        .await
        .into_iter()
        .filter(|row| row.0 == tap)
        .collect()
}

/// Waits until neither the trigger queue nor the tap queue has work.
async fn settled(agent: &Agent) {
    wait_for("the trigger and tap queues drained", || async {
        !agent.triggers().stats().draining && !agent.taps().stats().draining
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_43_cod_46_cfg_41_taps_receive_what_their_filters_select_and_emit_event_reaches_a_tap_and_the_event_stream()
 {
    let h = Harness::start().await;
    let taps = json!([
        { "name": "hello", "lambda": "lib/tap.ts:hello", "filter": { "event_types": ["custom.hello"] } },
        { "name": "wild", "lambda": "lib/tap.ts:wild", "filter": { "event_types": ["lambda.*"], "allow_wildcard": true } },
        // CFG-41: a wildcard without allow_wildcard is never run.
        { "name": "bad", "lambda": "lib/tap.ts:bad", "filter": { "event_types": ["custom.*"] } },
    ]);
    let path = new_agent(h.dir.path(), "tapped01", taps, Some("lib/emit.ts:main"));
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;

    wait_for("the hello tap ran", || async {
        !seen_by(&agent, "hello").await.is_empty()
    })
    .await;
    // wild sees the startup lambda's start and end, and the hello tap's.
    wait_for("the wild tap saw both lambdas", || async {
        seen_by(&agent, "wild").await.len() >= 4
    })
    .await;
    settled(&agent).await;

    let hello = seen_by(&agent, "hello").await;
    assert_eq!(hello.len(), 1, "{hello:?}");
    assert_eq!(hello[0].1, "custom.hello");
    assert_eq!(hello[0].3, "lambda:lib/emit.ts:main");
    // The tap's input is the whole envelope.
    let rows = agent
        .store()
        .run(|file| tables(file).rows("local_seen"))
        .await;
    let rows = rows.unwrap();
    let hello = rows.iter().find(|row| row["tap"] == "hello").unwrap();
    let envelope: Value = serde_json::from_str(hello["envelope"].as_str().unwrap()).unwrap();
    assert_eq!(envelope["agent_id"], "tapped01");
    assert_eq!(envelope["payload"], json!({ "n": 1, "note": "hi" }));
    assert!(envelope["seq"].as_u64().unwrap() > 0);

    let answer = agent
        .store()
        .run(|file| file.file_read("emit-answer.json"))
        .await
        .unwrap()
        .unwrap();
    let answer: Value = serde_json::from_slice(&answer.content).unwrap();
    assert_eq!(answer["delivered"], true, "{answer}");

    let wild = seen_by(&agent, "wild").await;
    let mut wild_seen: Vec<(String, String)> = wild
        .iter()
        .map(|row| (row.1.clone(), row.4.clone().unwrap_or_default()))
        .collect();
    wild_seen.sort();
    // Never its own run's events (exclude_own_origin defaults to true).
    assert_eq!(
        wild_seen,
        [
            ("lambda.completed".to_owned(), "hello".to_owned()),
            ("lambda.completed".to_owned(), "main".to_owned()),
            ("lambda.started".to_owned(), "hello".to_owned()),
            ("lambda.started".to_owned(), "main".to_owned()),
        ],
        "{wild:?}"
    );
    assert!(seen_by(&agent, "bad").await.is_empty());

    // The custom event is on the bus: replayed by `/events` between the lambda's start and end.
    let mut stream = Box::pin(
        h.client
            .events(&format!("/events?since=0&agentId={}", agent.id))
            .await
            .unwrap(),
    );
    let mut types = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(Ok(data)) = stream.next().await {
            let frame: Value = serde_json::from_str(&data).unwrap();
            let event = &frame["event"];
            types.push(event["event_type"].as_str().unwrap_or_default().to_owned());
            if event["event_type"] == "custom.hello" {
                return Some(event.clone());
            }
        }
        None
    })
    .await
    .expect("custom.hello reached the stream")
    .expect("the stream ended");
    assert_eq!(found["source"], "lambda:lib/emit.ts:main");
    assert_eq!(found["payload"]["note"], "hi");
    assert_eq!(types.last().map(String::as_str), Some("custom.hello"));
    assert!(types.contains(&"lambda.started".to_owned()), "{types:?}");
    drop(stream);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_43_exclude_own_origin_keeps_a_tap_from_its_own_writes_unless_it_is_false() {
    let h = Harness::start().await;
    let taps = json!([
        { "name": "polite", "lambda": "lib/tap.ts:polite", "filter": { "event_types": ["file.written"] } },
        { "name": "echo", "lambda": "lib/tap.ts:echo", "filter": { "event_types": ["file.written"] }, "exclude_own_origin": false },
    ]);
    let path = new_agent(h.dir.path(), "origin01", taps, None);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    let (status, body) = h
        .client
        .raw(
            Method::PUT,
            "/agents/origin01/files/content?path=docs%2Fa.md",
            Some(&json!({ "content": "hello" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    wait_for("both taps saw every write they may see", || async {
        seen_by(&agent, "echo").await.len() >= 3 && seen_by(&agent, "polite").await.len() >= 2
    })
    .await;
    settled(&agent).await;
    let paths = |rows: Seen| {
        let mut paths: Vec<String> = rows.into_iter().filter_map(|r| r.2).collect();
        paths.sort();
        paths
    };
    // polite never receives out/polite.md, the write of its own run.
    assert_eq!(
        paths(seen_by(&agent, "polite").await),
        ["docs/a.md", "out/echo.md"]
    );
    // echo (exclude_own_origin false) receives its own write too.
    assert_eq!(
        paths(seen_by(&agent, "echo").await),
        ["docs/a.md", "out/echo.md", "out/polite.md"]
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_43_max_rate_per_sec_drops_a_bursts_excess_and_logs_it_once() {
    let h = Harness::start().await;
    let taps = json!([
        // One event per 1000 s: the bucket holds one (never less than one), and no refill
        // can come while the burst is handled, however slow the machine. The refill itself is
        // driven by a controlled clock in the bucket's unit tests (src/taps.rs).
        { "name": "burst", "lambda": "lib/tap.ts:burst", "filter": { "event_types": ["custom.burst"] }, "max_rate_per_sec": 0.001 },
    ]);
    let path = new_agent(h.dir.path(), "burst01", taps, Some("lib/emit.ts:burst"));
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    wait_for("all 20 custom events met the tap", || async {
        let stats = agent.taps().stats();
        stats.delivered + stats.rate_dropped == 20
    })
    .await;
    settled(&agent).await;
    let stats = agent.taps().stats();
    assert_eq!(stats.delivered, 1, "{stats:?}");
    assert_eq!(stats.rate_dropped, 19, "{stats:?}");
    assert_eq!(stats.queue_dropped, 0);
    wait_for("the tap runs recorded", || async {
        seen_by(&agent, "burst").await.len() as u64 == stats.delivered
    })
    .await;
    let rows: Vec<(String, String)> = common::logs_of(&agent, "umbilical_tap")
        .await
        .into_iter()
        .filter(|row| row.event.as_deref() == Some("tap_rate_limited"))
        .map(|row| (row.level, row.data.unwrap()))
        .collect();
    // One row per burst (a burst ends when the tap queue drains), not one per drop.
    assert!(
        !rows.is_empty() && (rows.len() as u64) < stats.rate_dropped,
        "{rows:?}"
    );
    let mut logged = 0;
    for (level, data) in &rows {
        assert_eq!(level, "warn");
        let data: Value = serde_json::from_str(data).unwrap();
        assert_eq!(data["tap"], "burst");
        logged += data["dropped"].as_u64().unwrap();
    }
    assert_eq!(logged, stats.rate_dropped);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cod_46_emit_event_from_a_model_turns_code_reaches_the_bus() {
    let mock = adf_testkit::MockProvider::openai().await;
    mock.push_all([
        adf_testkit::Turn::tool_call(
            "sys_code",
            json!({ "code": "return await adf.emit_event({ type: 'custom.hello', payload: { from: 'turn' } })" }),
        ),
        adf_testkit::Turn::text("Announced."),
    ]);
    let h = Harness::start().await;
    let path = new_agent(
        h.dir.path(),
        "announcer",
        json!([
            { "name": "hello", "lambda": "lib/tap.ts:hello", "filter": { "event_types": ["custom.hello"] } }
        ]),
        None,
    );
    {
        let mut file = AdfFile::open(&path).unwrap();
        for (key, value) in [
            (
                "providers",
                json!([{ "id": "mock", "type": "openai-compatible", "name": "Mock", "baseUrl": mock.base_url() }]),
            ),
            ("model.provider", json!("mock")),
            ("model.model_id", json!("mock-model")),
        ] {
            file.config_set_path(Caller::Owner, key, ConfigAction::Set, value)
                .unwrap();
        }
        file.close().unwrap();
    }
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    chat(&h, &agent, "announce it").await;
    wait_for("the tap saw the turn's custom event", || async {
        !seen_by(&agent, "hello").await.is_empty()
    })
    .await;
    let hello = seen_by(&agent, "hello").await;
    assert_eq!(hello[0].1, "custom.hello");
    // The model read that the event was delivered.
    wait_for("the turn's second request", || async {
        mock.request_count() >= 2
    })
    .await;
    let second = serde_json::to_string(&mock.requests()[1].body).unwrap();
    assert!(second.contains(r#"\"delivered\":true"#), "{second}");
    h.stop().await;
}
