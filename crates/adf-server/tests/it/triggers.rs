//! Trigger dispatch in the daemon (spec §7.1–§7.5): events from owner writes, timer lambdas
//! and loading reach system-scope lambdas through filters and the self-trigger rules, and a
//! burst goes through a bounded queue that drops (and counts) instead of growing or blocking.
use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adf_runtime::triggers::{TriggerEvent, TriggerKind};
use adf_server::Agent;
use adf_server::dispatch::QUEUE_CAPACITY;
use adf_store::{AdfFile, Caller, ConfigAction};
use common::{Harness, agent_file, paths, wait_for};
use reqwest::Method;
use serde_json::{Value, json};

fn new_agent(dir: &Path, name: &str, files: &[(&str, &str)], triggers: Value) -> PathBuf {
    agent_file(dir, name, files, &[("triggers", triggers)])
}

/// A daemon and the agent file `new_agent(name, files, triggers)`, not loaded yet.
async fn unloaded_agent(name: &str, files: &[(&str, &str)], triggers: Value) -> (Harness, PathBuf) {
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), name, files, triggers);
    (h, path)
}

/// A daemon with one loaded agent whose file is `new_agent(name, files, triggers)`.
async fn loaded_agent(
    name: &str,
    files: &[(&str, &str)],
    triggers: Value,
) -> (Harness, PathBuf, Arc<Agent>) {
    let (h, path) = unloaded_agent(name, files, triggers).await;
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    (h, path, agent)
}

const REPORTER: &str = r#"
export async function main(event) {
  await adf.fs_write({ path: `reports/run-${event.data.run_count}.md`, content: 'report', mode: 'write' });
}
"#;

/// Reacts to any change under reports/ by writing seen/<name>, and also writes under
/// reports/ itself: its own writes must never reach it again (TRG-02).
const REACTOR: &str = r#"
export async function main(event) {
  const name = event.data.path.split('/').pop();
  await adf.fs_write({ path: `seen/${name}`, content: event.data.path, mode: 'write' });
  await adf.fs_write({ path: `reports/echo-${name}`, content: 'echo', mode: 'write' });
}
"#;

const STARTER: &str = r#"
export async function main(event) {
  await adf.fs_write({ path: 'started.md', content: event.type, mode: 'write' });
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_02_trg_03_trg_13_file_changes_from_the_owner_and_from_a_timer_lambda_reach_an_on_file_change_lambda_but_not_its_own_writes()
 {
    let (h, _, agent) = loaded_agent(
        "watcher",
        &[
            ("lib/report.ts", REPORTER),
            ("lib/react.ts", REACTOR),
            ("lib/start.ts", STARTER),
        ],
        json!({
            "on_startup": { "enabled": true, "targets": [{ "scope": "system", "lambda": "lib/start.ts:main" }] },
            "on_timer": { "enabled": true, "targets": [{ "scope": "system" }] },
            "on_file_change": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/react.ts:main", "filter": { "watch": "reports/**", "include_self": true } }
            ] },
        }),
    )
    .await;
    // on_startup ran its lambda.
    wait_for("startup", || async {
        paths(&agent, "started.md").await.len() == 1
    })
    .await;

    // The owner writes a report: the reactor sees it.
    h.client
        .call(
            Method::PUT,
            &format!(
                "/agents/{}/files/content?path=reports%2Fmanual.md",
                agent.id
            ),
            Some(&json!({ "content": "by hand" })),
        )
        .await
        .unwrap();
    wait_for("owner write seen", || async {
        paths(&agent, "seen/manual.md").await.len() == 1
    })
    .await;

    // A timer lambda writes a report (Producer::Lambda of another lambda): seen too.
    h.client
        .post(
            &format!("/agents/{}/timers", agent.id),
            Some(&json!({ "mode": "once_delay", "delay_ms": 10, "scope": ["system"], "lambda": "lib/report.ts:main" })),
        )
        .await
        .unwrap();
    wait_for("timer write seen", || async {
        paths(&agent, "seen/run-1.md").await.len() == 1
    })
    .await;
    // The reactor's own echo writes under reports/ never re-triggered it, include_self or
    // not: exactly one echo per outside write, and no echo of an echo.
    wait_for("queue drained", || async {
        !agent.triggers().stats().draining
    })
    .await;
    assert_eq!(
        paths(&agent, "reports/echo-").await,
        vec!["reports/echo-manual.md", "reports/echo-run-1.md"]
    );
    assert_eq!(
        paths(&agent, "seen/").await,
        vec!["seen/manual.md", "seen/run-1.md"]
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_10000_inbox_events_is_bounded_by_the_queue_and_never_blocks_a_concurrent_request()
 {
    let (h, _, agent) = loaded_agent(
        "busy",
        &[(
            "lib/inbox.ts",
            "export async function main(event) { return 1; }\n",
        )],
        json!({
            "on_inbox": { "enabled": true, "targets": [{ "scope": "system", "lambda": "lib/inbox.ts:main" }] },
        }),
    )
    .await;
    const BURST: u64 = 10_000;
    for n in 0..BURST {
        let event = TriggerEvent::new(
            TriggerKind::OnInbox,
            adf_store::time::now_ms(),
            json!({ "from": "did:key:zSender", "source": "mesh", "message_id": n }),
        );
        h.server.daemon.dispatch(&agent, event).await;
    }
    let stats = agent.triggers().stats();
    assert!(stats.len <= QUEUE_CAPACITY);
    assert!(stats.high_water <= QUEUE_CAPACITY);
    assert!(stats.dropped >= BURST - QUEUE_CAPACITY as u64 - stats.delivered - 1);
    // A concurrent request to the same agent is answered while the burst drains.
    let files = h
        .client
        .get(&format!("/agents/{}/files", agent.id))
        .await
        .unwrap();
    assert!(files.is_object());
    wait_for("drained", || async { !agent.triggers().stats().draining }).await;
    let stats = agent.triggers().stats();
    assert_eq!(stats.len, 0);
    assert_eq!(
        stats.dropped + stats.delivered,
        BURST,
        "every event accounted for"
    );
    assert!(stats.dropped > 0 && stats.high_water <= QUEUE_CAPACITY);
    let logged = common::log_rows(&agent)
        .await
        .iter()
        .filter(|row| row.event.as_deref() == Some("trigger_dispatch_dropped"))
        .count();
    assert!(logged >= 1, "drops are logged");
    h.stop().await;
}

const BATCHER: &str = r#"
export async function main(event) {
  const n = event.events ? event.events.length : 1;
  await adf.fs_write({ path: `seen/batch-${n}.md`, content: String(n), mode: 'write' });
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_07_a_debounced_target_fires_once_with_the_quiet_periods_events() {
    let (h, _, agent) = loaded_agent(
        "debounced",
        &[("lib/batch.ts", BATCHER)],
        json!({
            "on_file_change": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/batch.ts:main", "debounce_ms": 500, "filter": { "watch": "docs/**" } }
            ] },
        }),
    )
    .await;
    for n in 0..5 {
        let event = TriggerEvent::new(
            TriggerKind::OnFileChange,
            adf_store::time::now_ms(),
            json!({ "path": format!("docs/{n}.md"), "operation": "write", "size": 1 }),
        );
        h.server.daemon.dispatch(&agent, event).await;
    }
    wait_for("the debounced fire", || async {
        !paths(&agent, "seen/").await.is_empty()
    })
    .await;
    wait_for("drained", || async { !agent.triggers().stats().draining }).await;
    assert_eq!(paths(&agent, "seen/").await, vec!["seen/batch-5.md"]);
    assert_eq!(agent.triggers().stats().delivered, 1);
    h.stop().await;
}

const TASK_WATCHER: &str = r#"
export async function main(event) {
  await adf.fs_write({ path: `seen/${event.data.task_id}-${event.data.status}.md`, content: event.data.tool, mode: 'write' });
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_18_a_denied_async_task_fires_on_task_complete_with_its_tool_and_status() {
    let (h, path) = unloaded_agent(
        "tasks",
        &[("lib/task.ts", TASK_WATCHER)],
        json!({
            "on_task_complete": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/task.ts:main", "filter": { "tools": ["fs_*"], "status": ["denied"] } }
            ] },
        }),
    )
    .await;
    let task_id = {
        let mut file = AdfFile::open(&path).unwrap();
        let id = file
            .task_create(&adf_store::tasks::NewTask {
                tool: "fs_delete",
                args: &json!({ "path": "notes.md" }),
                status: "pending_approval",
                origin: Some("agent"),
                requires_authorization: false,
                executor_managed: false,
                approval_meta: None,
                r#loop: None,
            })
            .unwrap();
        file.close().unwrap();
        id
    };
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    h.client
        .post(
            &format!("/agents/{}/tasks/{task_id}/resolve", agent.id),
            Some(&json!({ "action": "deny", "reason": "not now" })),
        )
        .await
        .unwrap();
    let expected = format!("seen/{task_id}-denied.md");
    wait_for("on_task_complete", || async {
        paths(&agent, "seen/").await == vec![expected.clone()]
    })
    .await;
    h.stop().await;
}

const SEER: &str = r#"
export async function main(event) {
  const name = event.data.path.split('/').pop();
  await adf.fs_write({ path: `seen/${name}`, content: 'seen', mode: 'write' });
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_11_system_targets_run_when_suspended_and_never_when_off() {
    let (h, path) = unloaded_agent(
        "gated",
        &[("lib/seer.ts", SEER)],
        json!({
            "on_file_change": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/seer.ts:main", "filter": { "watch": "docs/**" } }
            ] },
        }),
    )
    .await;
    {
        let mut file = AdfFile::open(&path).unwrap();
        file.config_set_path(Caller::Owner, "state", ConfigAction::Set, json!("off"))
            .unwrap();
        file.close().unwrap();
    }
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    let put = |name: &'static str| {
        let client = &h.client;
        let id = agent.id.clone();
        async move {
            client
                .call(
                    Method::PUT,
                    &format!("/agents/{id}/files/content?path=docs%2F{name}"),
                    Some(&json!({ "content": name })),
                )
                .await
                .unwrap();
        }
    };
    put("while-off.md").await;
    // The owner moves the stored state to suspended (a config write re-reads the targets).
    let mut config = common::stored_config(&h, &agent).await;
    config["state"] = json!("suspended");
    common::put_config(&h, &agent, &config).await;
    put("while-suspended.md").await;
    wait_for("the suspended delivery", || async {
        !paths(&agent, "seen/").await.is_empty()
    })
    .await;
    wait_for("drained", || async { !agent.triggers().stats().draining }).await;
    // Deliveries run in dispatch order, so the event refused while off would have run first.
    assert_eq!(
        paths(&agent, "seen/").await,
        vec!["seen/while-suspended.md"]
    );
    h.stop().await;
}

/// Counts every change it is told of: one `x` appended to `seen/<path with _ for />` each.
const COUNTER: &str = r#"
export async function main(event) {
  if (!/^(docs|imports)\//.test(event.data.path)) return;
  const name = event.data.path.split('/').join('_');
  await adf.fs_write({ path: `seen/${name}`, content: 'x', mode: 'append' });
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fil_20_owner_model_and_import_writes_each_fire_on_file_change_once() {
    use adf_testkit::{MockProvider, Turn, Wire};
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call(
            "fs_write",
            json!({ "path": "docs/by-model.md", "mode": "write", "content": "m" }),
        ),
        Turn::text("written"),
    ]);
    let h = Harness::start().await;
    let mut config = common::model_config(&mock);
    // include_self: the model's own fs_write is a write by its agent (§7.3).
    config.extend([
        ("handle", json!("counter")),
        (
            "triggers",
            json!({ "on_file_change": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/count.ts:main", "filter": { "watch": "**", "include_self": true } }
            ] } }),
        ),
    ]);
    let path = agent_file(
        h.dir.path(),
        "counter",
        &[("lib/count.ts", COUNTER)],
        &config,
    );
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;

    // The owner, through the files API.
    h.client
        .call(
            Method::PUT,
            &format!("/agents/{}/files/content?path=docs%2Fby-owner.md", agent.id),
            Some(&json!({ "content": "o" })),
        )
        .await
        .unwrap();
    // The model, through fs_write in a chat turn.
    common::chat(&h, &agent, "write it").await;
    wait_for("the turn", || async {
        common::has_text(&agent, "main", "written").await
    })
    .await;
    common::drained(&agent).await;
    // An inbound message whose inline attachment is imported (on a guest connection, outside
    // any job of the agent).
    let message = json!({
        "version": "1.0", "network": "devnet",
        "id": "msg-fil20-0001",
        "timestamp": adf_store::time::now_iso(),
        "from": "did:key:z6MkSender", "to": "counter",
        "payload": { "meta": {}, "content_type": "text/plain", "content": "see attached",
                     "sent_at": adf_store::time::now_iso(),
                     "attachments": [{ "filename": "a.txt", "content_type": "text/plain",
                                       "transfer": "inline", "data": "aW1wb3J0ZWQ=" }] }
    });
    let (status, body) =
        common::status(&h, Method::POST, "/agents/counter/inbox", Some(message)).await;
    assert!((200..300).contains(&status), "{status} {body}");

    let expected = [
        "seen/docs_by-model.md",
        "seen/docs_by-owner.md",
        "seen/imports_z6MkSender_a.txt",
    ];
    wait_for("every write seen", || async {
        paths(&agent, "seen/").await.len() == expected.len()
    })
    .await;
    common::drained(&agent).await;
    assert_eq!(paths(&agent, "seen/").await, expected);
    for seen in expected {
        let count = agent
            .store()
            .run(move |file| file.file_read(seen))
            .await
            .unwrap()
            .unwrap()
            .content;
        assert_eq!(count, b"x", "{seen}: one event per write");
    }
    h.stop().await;
}

const MAKER: &str = r#"
export async function main(event) {
  const made = await adf.sys_create_adf({ name: 'child', handle: 'child', autostart: true });
  await adf.fs_write({ path: 'out/made.json', content: JSON.stringify(made), mode: 'write' });
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tol_49_an_autostart_child_made_by_sys_create_adf_is_loaded_at_once() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "maker",
        &[("lib/make.ts", MAKER)],
        &[
            ("tools.sys_create_adf.enabled", json!(true)),
            (
                "triggers",
                json!({ "on_file_change": { "enabled": true, "targets": [
                    { "scope": "system", "lambda": "lib/make.ts:main", "filter": { "watch": "make/**" } }
                ] } }),
            ),
        ],
    );
    // sys_create_adf is restricted: only authorized code calls it without the owner.
    let mut file = AdfFile::open(&path).unwrap();
    file.file_set_authorized(Caller::Owner, "lib/make.ts", true)
        .unwrap();
    file.close().unwrap();
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    h.client
        .call(
            Method::PUT,
            &format!("/agents/{}/files/content?path=make%2Fgo", agent.id),
            Some(&json!({ "content": "go" })),
        )
        .await
        .unwrap();
    wait_for("the child made", || async {
        paths(&agent, "out/made.json").await.len() == 1
    })
    .await;
    let made: Value = serde_json::from_slice(
        &agent
            .store()
            .run(|file| file.file_read("out/made.json"))
            .await
            .unwrap()
            .unwrap()
            .content,
    )
    .unwrap();
    assert_eq!(made["autostarted"], true, "{made}");
    wait_for("the child loaded", || async {
        h.server
            .daemon
            .agents()
            .iter()
            .any(|a| a.info().handle.as_deref() == Some("child"))
    })
    .await;
    let child = h.server.daemon.agent("child").unwrap();
    assert_eq!(
        child.path,
        std::fs::canonicalize(made["path"].as_str().unwrap()).unwrap()
    );
    h.stop().await;
}
