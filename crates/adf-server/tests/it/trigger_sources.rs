//! The trigger event sources of the daemon (spec §7.1), end to end over HTTP on 127.0.0.1 with
//! real agent files: a chat turn raises `on_chat`, `on_tool_call` (a denied restricted call
//! too), `on_task_create` and `on_llm_call`; lambdas' log rows raise `on_logs` (never back to
//! the lambda that wrote them); rows another process adds to the inbox and outbox raise
//! `on_inbox`/`on_outbox`, and an agent-scope inbox turn is skipped once a system lambda read
//! every message; system targets fire once per agent whatever its loops; a hibernating agent
//! gets its nudge turn; a timer fire that finds the agent's queue full is re-armed. Agent
//! turns run against the testkit's OpenAI-compatible mock.
use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adf_runtime::triggers::{TriggerEvent, TriggerKind};
use adf_server::Agent;
use adf_server::dispatch::QUEUE_CAPACITY;
use adf_testkit::{MockProvider, Turn, Wire};
use common::{
    Harness, agent_file, chat, drained, loop_texts, model_config, paths, put_file, set_state,
    wait_for,
};
use reqwest::Method;
use serde_json::{Value, json};

/// Each handler writes one file naming what it received, so the test reads back exactly which
/// events reached which handler.
const SEEN: &str = r#"
const tag = () => Math.floor(Math.random() * 1e12).toString(36);
export async function chat(event) {
  await adf.fs_write({ path: `seen/chat-${event.data.loop}.md`, content: event.data.text, mode: 'write' });
}
export async function tool(event) {
  await adf.fs_write({ path: `seen/tool-${event.data.tool}-${event.data.status}.md`, content: event.type, mode: 'write' });
}
export async function task(event) {
  await adf.fs_write({ path: `seen/task-${event.data.tool}-${event.data.status}.md`, content: event.data.task_id, mode: 'write' });
}
export async function llm(event) {
  await adf.fs_write({ path: `seen/llm-${event.data.source}-${event.data.provider}-${tag()}.md`, content: event.data.model, mode: 'write' });
}
export async function never(event) {
  await adf.fs_write({ path: `seen/never-${event.type}-${tag()}.md`, content: 'x', mode: 'write' });
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_17_trg_01_aud_17_a_chat_turn_raises_on_chat_on_tool_call_on_task_create_and_on_llm_call_through_their_filters()
 {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call(
            "fs_write",
            json!({ "path": "notes/a.md", "mode": "write", "content": "x" }),
        ),
        // sys_update_config is restricted: the turn waits for the owner, who denies it below.
        Turn::tool_call(
            "sys_update_config",
            json!({ "path": "description", "value": "changed" }),
        ),
        Turn::text("Done."),
    ]);
    let h = Harness::start().await;
    let mut config = model_config(&mock);
    config.push((
        "triggers",
        json!({
            "on_chat": { "enabled": true, "targets": [{ "scope": "system", "lambda": "lib/seen.ts:chat" }] },
            "on_tool_call": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/seen.ts:tool", "filter": { "tools": ["sys_update_*"] } }
            ] },
            "on_task_create": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/seen.ts:task", "filter": { "tools": ["sys_*"] } }
            ] },
            "on_llm_call": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/seen.ts:llm", "filter": { "source": ["turn"], "provider": ["mock"] } },
                { "scope": "system", "lambda": "lib/seen.ts:never", "filter": { "provider": ["another"] } }
            ] },
        }),
    ));
    let path = agent_file(h.dir.path(), "caller", &[("lib/seen.ts", SEEN)], &config);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    chat(&h, &agent, "tidy up").await;
    // The owner denies the restricted call the turn is waiting on (over HTTP: the waiting
    // turn holds the agent's worker).
    // The daemon publishes `hil.requested` once the task awaits the owner.
    let requested = |after: u64| {
        h.server
            .daemon
            .events()
            .since(after)
            .iter()
            .find(|f| f.event.event_type == "hil.requested")
            .and_then(|f| f.event.payload["task_id"].as_str().map(str::to_owned))
    };
    let mut published = h.server.daemon.events().watch();
    let announced = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            if let Some(id) = requested(0) {
                return id;
            }
            published.changed().await.unwrap();
        }
    })
    .await
    .expect("no pending approval");
    let pending = format!("/agents/{}/tasks?status=pending_approval", agent.id);
    let tasks = h.client.get(&pending).await.unwrap();
    let task_id = tasks["tasks"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(task_id, announced, "{tasks}");
    let (status, body) = h
        .client
        .raw(
            Method::POST,
            &format!("/agents/{}/tasks/{task_id}/resolve", agent.id),
            Some(&json!({ "action": "deny", "reason": "not now" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    // AUD-17: the task event carries the row as created (`pending_approval`): the turn's
    // rows are swept when it hands the file to other jobs during its wait, not at its end.
    let expected = [
        "seen/chat-main.md",
        "seen/task-sys_update_config-pending_approval.md",
        "seen/tool-sys_update_config-denied.md",
    ];
    wait_for("every handler ran", || async {
        let seen = paths(&agent, "seen/").await;
        expected.iter().all(|p| seen.iter().any(|s| s == p))
            && seen.iter().filter(|s| s.starts_with("seen/llm-")).count() == 3
    })
    .await;
    drained(&agent).await;
    let seen = paths(&agent, "seen/").await;
    // TRG-15: fs_write matched neither tools filter, the `another` provider filter nothing.
    let mut others: Vec<&String> = seen
        .iter()
        .filter(|s| !s.starts_with("seen/llm-turn-mock-"))
        .collect();
    others.sort();
    assert_eq!(others, expected.iter().collect::<Vec<_>>(), "{seen:?}");
    let chat = agent
        .store()
        .run(|file| file.file_read("seen/chat-main.md"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(chat.content, b"tidy up");
    assert_eq!(mock.request_count(), 3, "one model call per step, no more");
    h.stop().await;
}

/// Writes one row with `emit_event` when the agent starts.
const EMITTER: &str = r#"
export async function main(event) {
  await adf.emit_event({ type: 'custom.ping' });
}
"#;

/// Records each log row it receives and logs a row of its own each time: that row must never
/// come back to it (TRG-05), or it would feed itself forever.
const LOG_WATCHER: &str = r#"
export async function watch(event) {
  await adf.fs_write({ path: `seen/log-${event.data.log_id}-${event.data.event}.md`, content: event.data.origin, mode: 'write' });
  await adf.emit_event({ type: 'custom.echo' });
}
export async function warnings(event) {
  await adf.fs_write({ path: `seen/warn-${event.data.log_id}.md`, content: event.data.level, mode: 'write' });
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aud_24_trg_05_on_logs_filters_by_level_origin_and_event_and_never_returns_a_handlers_own_rows()
 {
    let (h, path) = with_triggers(
        "logger",
        &[("lib/emit.ts", EMITTER), ("lib/logs.ts", LOG_WATCHER)],
        json!({
            "on_startup": { "enabled": true, "targets": [{ "scope": "system", "lambda": "lib/emit.ts:main" }] },
            "on_logs": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/logs.ts:watch",
                  "filter": { "level": ["info"], "origin": ["emit_*"], "event": ["custom.*"] } },
                { "scope": "system", "lambda": "lib/logs.ts:warnings", "filter": { "level": ["warn"] } }
            ] },
        }),
    )
    .await;
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    wait_for("the startup row seen", || async {
        paths(&agent, "seen/log-").await.len() == 1
    })
    .await;
    drained(&agent).await;
    let seen = paths(&agent, "seen/").await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].ends_with("-custom.ping.md"), "{seen:?}");
    // The watcher did log its echo; it just never received it.
    let echoes = common::log_rows(&agent)
        .await
        .iter()
        .filter(|row| row.event.as_deref() == Some("custom.echo"))
        .count();
    assert_eq!(echoes, 1, "one echo, from the one event it received");
    h.stop().await;
}

/// Reads every mesh message as soon as it lands (TRG-36's "system lambda already handled it").
const INBOX: &str = r#"
export async function read(event) {
  await adf.msg_update({ message_ids: event.data.id, status: 'read' });
}
export async function vip(event) {
  await adf.fs_write({ path: `seen/vip-${event.data.id}.md`, content: event.data.from, mode: 'write' });
}
export async function outbox(event) {
  await adf.fs_write({ path: `seen/out-${event.data.id}.md`, content: event.data.to, mode: 'write' });
}
"#;

/// A daemon and a new agent file configured with just `triggers` (not loaded yet).
async fn with_triggers(name: &str, files: &[(&str, &str)], triggers: Value) -> (Harness, PathBuf) {
    let h = Harness::start().await;
    let path = agent_file(h.dir.path(), name, files, &[("triggers", triggers)]);
    (h, path)
}

/// A row of `table` as (column, value) cells.
type ExternalRow = (&'static str, Vec<(&'static str, Value)>);

/// Another process (a mesh server, `adf` in a shell) adds rows to the loaded agent's file,
/// each in its own transaction.
fn insert_external(path: &Path, rows: &[ExternalRow]) {
    let other = adf_store::test_support::OtherConnection::open(path).unwrap();
    for (table, cells) in rows {
        other.tables().insert_row(table, cells).unwrap();
    }
}

/// An inbox row another process wrote: a message from `from` through `source`.
fn inbox_row(n: u32, from: &str, content: &str, source: &str) -> ExternalRow {
    let cells = vec![
        ("id", json!(format!("in-{n}"))),
        ("message_id", json!(format!("alf-{n}"))),
        ("from", json!(from)),
        ("content", json!(content)),
        ("source", json!(source)),
        ("received_at", json!(n)),
    ];
    ("adf_inbox", cells)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_36_trg_14_on_inbox_and_on_outbox_from_new_rows_with_their_filters_and_no_turn_for_an_inbox_already_read()
 {
    let mock = MockProvider::start(Wire::OpenAi).await;
    let h = Harness::start().await;
    let mut config = model_config(&mock);
    config.push((
        "triggers",
        json!({
            "on_inbox": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/inbox.ts:read", "filter": { "source": "mesh" } },
                { "scope": "system", "lambda": "lib/inbox.ts:vip", "filter": { "sender": "did:key:zVip" } },
                { "scope": "agent" }
            ] },
            "on_outbox": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/inbox.ts:outbox", "filter": { "to": "did:key:zFar" } }
            ] },
        }),
    ));
    let path = agent_file(h.dir.path(), "mailbox", &[("lib/inbox.ts", INBOX)], &config);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;

    // A mesh message: the system lambda reads it before the agent target's turn would start,
    // so no turn runs (TRG-36).
    insert_external(
        &path,
        &[
            inbox_row(1, "did:key:zPeer", "secret body one", "mesh"),
            outbox_row_to("out-1", "alf-o1", "did:key:zNear"),
            outbox_row_to("out-2", "alf-o2", "did:key:zFar"),
        ],
    );
    // Any job of the agent notices them; the owner writing a file is one.
    put_file(&h, &agent, "docs/poke.md", "1").await;
    wait_for("the mesh message read", || async {
        agent
            .store()
            .run(|file| Ok(file.inbox_counts()?.unread))
            .await
            .unwrap()
            == 0
    })
    .await;
    drained(&agent).await;
    assert_eq!(mock.request_count(), 0, "no turn for an inbox already read");
    assert_eq!(
        paths(&agent, "seen/").await,
        vec!["seen/out-out-2.md"],
        "outbox filter `to`; vip filter `sender` rejected zPeer"
    );

    // A telegram message from the vip: the read lambda's `source` filter skips it, so it stays
    // unread and the agent target's turn runs with a summary, not the body (TRG-14).
    mock.push(Turn::text("Seen the inbox."));
    insert_external(
        &path,
        &[inbox_row(2, "did:key:zVip", "secret body two", "telegram")],
    );
    h.server.daemon.notice_new_rows(&agent).await;
    wait_for("the inbox turn", || async {
        loop_texts(&agent)
            .await
            .iter()
            .any(|t| t.contains("Seen the inbox."))
    })
    .await;
    drained(&agent).await;
    let texts = loop_texts(&agent).await;
    let trigger = texts
        .iter()
        .find(|t| t.contains("[Trigger: on_inbox]"))
        .expect("a trigger row");
    assert!(trigger.contains("did:key:zVip") && trigger.contains("msg_read"));
    assert!(!texts.iter().any(|t| t.contains("secret body")));
    assert_eq!(mock.request_count(), 1);
    assert_eq!(
        paths(&agent, "seen/").await,
        vec!["seen/out-out-2.md", "seen/vip-in-2.md"]
    );
    h.stop().await;
}

const COUNTER: &str = r#"
export async function main(event) {
  const tag = Math.floor(Math.random() * 1e12).toString(36);
  await adf.fs_write({ path: `seen/${tag}.md`, content: event.data.path, mode: 'write' });
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_10_a_system_target_fires_once_per_event_for_an_agent_with_inner_loops() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "looped",
        &[("lib/count.ts", COUNTER)],
        &[
            (
                "loops",
                json!([
                    { "name": "triage", "goal": "Sort work.", "enabled": true, "tools": [] },
                    { "name": "writer", "goal": "Write.", "enabled": true, "tools": [] },
                    { "name": "review", "goal": "Review.", "enabled": true, "tools": [] }
                ]),
            ),
            (
                "triggers",
                json!({
                    "on_file_change": { "enabled": true, "targets": [
                        { "scope": "system", "lambda": "lib/count.ts:main", "filter": { "watch": "docs/**" } }
                    ] },
                }),
            ),
        ],
    );
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    put_file(&h, &agent, "docs/one.md", "1").await;
    wait_for("the fire", || async {
        !paths(&agent, "seen/").await.is_empty()
    })
    .await;
    drained(&agent).await;
    assert_eq!(paths(&agent, "seen/").await.len(), 1, "once, not per loop");
    assert_eq!(agent.triggers().stats().delivered, 1);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_35_a_hibernating_agent_with_on_timer_gets_a_nudge_turn_and_one_without_gets_no_wake() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.repeat(Turn::text("Still nothing to do."));
    let h = Harness::start().await;
    let mut config = model_config(&mock);
    config.push(("state", json!("hibernate")));
    // The scheduler's clock is the wall clock; the interval is what is shortened.
    config.push(("limits.hibernate_nudge", json!({ "interval_ms": 300 })));
    let mut sleepy = config.clone();
    config.push((
        "triggers.on_timer",
        json!({ "enabled": true, "targets": [{ "scope": "agent" }] }),
    ));
    sleepy.push((
        "triggers.on_timer",
        json!({ "enabled": false, "targets": [{ "scope": "agent" }] }),
    ));
    let nudged = agent_file(h.dir.path(), "nudged", &[], &config);
    let unnudged = agent_file(h.dir.path(), "unnudged", &[], &sleepy);
    let before = adf_store::time::now_ms();
    let agent: Arc<Agent> = h.server.daemon.load(&nudged).await.unwrap().agent;
    let other: Arc<Agent> = h.server.daemon.load(&unnudged).await.unwrap().agent;
    // Without on_timer there is nothing to wake for; with it the nudge is the agent's wake
    // (unless it is already firing: two loads can outlast the 300 ms interval under load,
    // and the scheduler holds no wake for an agent while its fire runs).
    assert_eq!(h.server.daemon.next_timer_wake(&other.id), None);
    if let Some(wake) = h.server.daemon.next_timer_wake(&agent.id) {
        assert!(wake >= before + 300, "one interval after the count starts");
    }
    wait_for("the nudge turn", || async {
        loop_texts(&agent)
            .await
            .iter()
            .any(|t| t.contains("Still nothing to do."))
    })
    .await;
    let texts = loop_texts(&agent).await;
    assert!(
        texts
            .iter()
            .any(|t| t.contains("[System] You have been hibernating")),
        "{texts:?}"
    );
    let loop_rows = common::table_rows(&agent, "adf_loop").await;
    let created = loop_rows
        .iter()
        .map(|row| row["created_at"].as_i64().unwrap());
    let first_turn: i64 = created.min().unwrap();
    assert!(
        first_turn >= before + 300,
        "the first nudge comes one interval after the count starts"
    );
    assert!(loop_texts(&other).await.is_empty());
    h.stop().await;
}

const TIMER_LAMBDA: &str = r#"
export async function main(event) {
  await adf.fs_write({ path: `fired/run-${event.data.run_count}.md`, content: 'x', mode: 'write' });
}
"#;

const IDLE: &str = "export async function main(event) { return 1; }\n";

async fn timer_row(agent: &Agent, id: i64) -> adf_store::TimerRow {
    agent
        .store()
        .run(move |file| Ok(file.timers()?.into_iter().find(|t| t.id == id)))
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_29_a_once_timer_fire_that_finds_the_queue_full_is_rearmed_and_fires_later() {
    let (h, path) = with_triggers(
        "saturated",
        &[("lib/timer.ts", TIMER_LAMBDA), ("lib/idle.ts", IDLE)],
        json!({
            "on_timer": { "enabled": true, "targets": [{ "scope": "system" }] },
            "on_file_change": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/idle.ts:main", "filter": { "watch": "docs/**" } }
            ] },
        }),
    )
    .await;
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    let created = h
        .client
        .post(
            &format!("/agents/{}/timers", agent.id),
            Some(&json!({ "mode": "once_delay", "delay_ms": 2000, "scope": ["system"], "lambda": "lib/timer.ts:main" })),
        )
        .await
        .unwrap();
    let timer_id = created["id"].as_i64().unwrap();
    // Hold the agent's worker so nothing drains, then fill its queue.
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let blocker = {
        let agent = Arc::clone(&agent);
        tokio::spawn(async move {
            agent
                .store()
                .run(move |_| {
                    let _ = started_tx.send(());
                    let _ = release_rx.recv();
                    Ok(())
                })
                .await
                .unwrap();
        })
    };
    started_rx.await.unwrap();
    let change = |n: usize| {
        TriggerEvent::new(
            TriggerKind::OnFileChange,
            adf_store::time::now_ms(),
            json!({ "path": format!("docs/{n}.md"), "operation": "write", "size": 1 }),
        )
    };
    // The first delivery is taken by the drain task, which then waits for the held worker;
    // from then on nothing leaves the queue, so it fills to exactly its capacity.
    h.server.daemon.dispatch(&agent, change(0)).await;
    wait_for("the drain holds the first delivery", || async {
        let stats = agent.triggers().stats();
        stats.draining && stats.len == 0
    })
    .await;
    for n in 1..=(QUEUE_CAPACITY + 8) {
        h.server.daemon.dispatch(&agent, change(n)).await;
    }
    let full = agent.triggers().stats();
    assert_eq!(
        full.len, QUEUE_CAPACITY,
        "the queue is full while the worker is held"
    );
    assert!(
        h.server.daemon.next_timer_wake(&agent.id).is_some(),
        "precondition: the timer comes due only after the queue is full"
    );
    // The scheduler takes the due timer and finds the queue full.
    wait_for("the scheduler took the timer", || async {
        h.server.daemon.next_timer_wake(&agent.id).is_none()
    })
    .await;
    release_tx.send(()).unwrap();
    blocker.await.unwrap();

    wait_for("the dropped fire counted", || async {
        agent.triggers().stats().dropped > full.dropped
    })
    .await;
    let row = timer_row(&agent, timer_id).await;
    if row.run_count == 1 {
        // Re-armed: not expired, due again shortly (it may already have fired again).
        assert!(!row.expired, "TRG-29: expired cleared for the retry");
    }
    // It fires later, once the queue has room: the lambda runs and the timer then expires.
    wait_for("the re-armed fire delivered", || async {
        !paths(&agent, "fired/").await.is_empty()
    })
    .await;
    let row = timer_row(&agent, timer_id).await;
    assert!(row.run_count >= 2, "the dropped fire and the delivered one");
    assert!(row.expired, "expired once delivered");
    assert_eq!(
        paths(&agent, "fired/").await,
        vec![format!("fired/run-{}.md", row.run_count)]
    );
    drained(&agent).await;
    h.stop().await;
}

const OUTBOX: &str = r#"
export async function main(event) {
  await adf.fs_write({ path: `seen/${event.data.id}.md`, content: event.data.to, mode: 'write' });
}
"#;

fn outbox_row(id: &str) -> [ExternalRow; 1] {
    [outbox_row_to(id, &format!("alf-{id}"), "did:key:zFar")]
}

/// An outbox row another process wrote: a message from the agent to `to`.
fn outbox_row_to(id: &str, message_id: &str, to: &str) -> ExternalRow {
    let cells = vec![
        ("id", json!(id)),
        ("message_id", json!(message_id)),
        ("from", json!("did:key:zMe")),
        ("to", json!(to)),
        ("content", json!("hi")),
        ("created_at", json!(1)),
    ];
    ("adf_outbox", cells)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_11_trg_12_row_events_reach_agent_targets_only_while_active_and_system_targets_until_off()
 {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push(Turn::text("Noted the sent message."));
    let h = Harness::start().await;
    let mut config = model_config(&mock);
    config.push((
        "triggers",
        json!({
            "on_outbox": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/outbox.ts:main" },
                { "scope": "agent" }
            ] },
        }),
    ));
    let path = agent_file(h.dir.path(), "gated", &[("lib/outbox.ts", OUTBOX)], &config);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;

    // Active: both scopes; the agent's turn gets the formatted outbox line.
    insert_external(&path, &outbox_row("out-active"));
    h.server.daemon.notice_new_rows(&agent).await;
    wait_for("the outbox turn", || async {
        loop_texts(&agent)
            .await
            .iter()
            .any(|t| t.contains("Noted the sent message."))
    })
    .await;
    drained(&agent).await;
    let texts = loop_texts(&agent).await;
    assert!(
        texts
            .iter()
            .any(|t| t.contains("[Trigger: on_outbox] A message to did:key:zFar")),
        "{texts:?}"
    );

    // Suspended: the system lambda still runs, no turn starts (§7.5).
    set_state(&h, &agent, "suspended").await;
    insert_external(&path, &outbox_row("out-suspended"));
    h.server.daemon.notice_new_rows(&agent).await;
    wait_for("the suspended system delivery", || async {
        paths(&agent, "seen/out-suspended").await.len() == 1
    })
    .await;
    drained(&agent).await;

    // Off: nothing runs.
    set_state(&h, &agent, "off").await;
    insert_external(&path, &outbox_row("out-off"));
    h.server.daemon.notice_new_rows(&agent).await;
    drained(&agent).await;
    // A later event that does get through proves the off-state event was not merely slow:
    // deliveries run in dispatch order.
    set_state(&h, &agent, "suspended").await;
    insert_external(&path, &outbox_row("out-after"));
    h.server.daemon.notice_new_rows(&agent).await;
    wait_for("the delivery after off", || async {
        paths(&agent, "seen/out-after").await.len() == 1
    })
    .await;
    drained(&agent).await;
    assert_eq!(
        paths(&agent, "seen/").await,
        vec![
            "seen/out-active.md",
            "seen/out-after.md",
            "seen/out-suspended.md"
        ]
    );
    assert_eq!(mock.request_count(), 1, "one turn, while active");
    h.stop().await;
}

/// Calls tools when a watched file changes: one that works, one refused to unauthorized code.
const WORKER: &str = r#"
export async function main(event) {
  await adf.fs_write({ path: 'out/report.md', content: 'done', mode: 'write' });
  try { await adf.sys_update_config({ path: 'description', value: 'x' }) } catch (e) {}
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_17_trg_02_a_system_lambdas_tool_calls_raise_on_tool_call_but_never_for_their_own_handler()
 {
    let (h, path) = with_triggers(
        "worker",
        &[("lib/work.ts", WORKER), ("lib/seen.ts", SEEN)],
        json!({
            "on_file_change": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/work.ts:main", "filter": { "watch": "docs/**" } }
            ] },
            // Watches every tool, its own fs_write included: that one must never come back.
            "on_tool_call": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/seen.ts:tool", "filter": { "tools": ["*"] } }
            ] },
        }),
    )
    .await;
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    put_file(&h, &agent, "docs/brief.md", "go").await;
    let expected = [
        "seen/tool-fs_write-completed.md",
        "seen/tool-sys_update_config-failed.md",
    ];
    wait_for("the worker's calls reached the tool watcher", || async {
        let seen = paths(&agent, "seen/").await;
        expected.iter().all(|p| seen.iter().any(|s| s == p))
    })
    .await;
    drained(&agent).await;
    // The watcher's own fs_write calls raised events it never received (it would loop).
    assert_eq!(
        paths(&agent, "seen/").await,
        expected.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    );
    assert_eq!(
        paths(&agent, "out/").await,
        vec!["out/report.md".to_owned()]
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_37_command_targets_run_through_adf_shell_with_the_event() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "commander",
        &[("lib/seen.ts", SEEN)],
        &[
            ("tools.adf_shell.enabled", json!(true)),
            (
                "triggers",
                json!({
                    "on_file_change": { "enabled": true, "targets": [
                        { "scope": "system", "command": "echo \"$EVENT_TYPE $(echo \"$EVENT\" | jq -r .data.path)\" >> commands.log", "filter": { "watch": "docs/**" } },
                        { "scope": "system", "lambda": "lib/seen.ts:never", "filter": { "watch": "docs/**" } }
                    ] },
                }),
            ),
        ],
    );
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    put_file(&h, &agent, "docs/one.md", "1").await;
    put_file(&h, &agent, "docs/two.md", "2").await;
    // The lambda target beside it still runs for both writes.
    wait_for("the lambda target ran twice", || async {
        paths(&agent, "seen/").await.len() == 2
    })
    .await;
    drained(&agent).await;
    let (log, completed) = agent
        .store()
        .run(|file| {
            let log = file
                .file_read("commands.log")?
                .map(|e| String::from_utf8_lossy(&e.content).into_owned());
            let rows = file.table_rows("adf_logs", 1000)?;
            let completed = rows
                .into_iter()
                .filter(|r| r.get("event").and_then(Value::as_str) == Some("shell_completed"))
                .count();
            Ok((log, completed))
        })
        .await
        .unwrap();
    assert_eq!(
        log.as_deref(),
        Some("on_file_change docs/one.md\non_file_change docs/two.md\n")
    );
    assert_eq!(completed, 2, "one log row per command run");
    h.stop().await;
}
