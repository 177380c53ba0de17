//! An agent that waits is not frozen (issue 29, findings 1 and 2): while its main loop waits —
//! for the owner's approval, for an `ask` answer, for a model that does not answer, for a
//! long network tool call — the agent's system timer keeps firing its lambda and its status,
//! config and logs are answered. Real daemon on 127.0.0.1, real files, the testkit's mock
//! model; a "hung" server is a mock held with `hold_until` until the test itself sends the
//! request that releases it. No sleeps for timing: every wait is for a condition, bounded.
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use adf_server::Agent;
use adf_testkit::{MockProvider, Turn, Wire};
use common::{Harness, agent_file, chat, model_config, wait_for};
use reqwest::Method;
use serde_json::{Value, json};

/// The system timer's lambda: it only has to run.
const TICK: &str = "export async function main(event) { return event.data.run_count; }";

/// Where the timer lambda lives in the agent.
const TICK_PATH: &str = "lib/tick.ts";

/// How many more timer lambda runs a waiting agent must complete while it waits.
const TICKS_WHILE_WAITING: usize = 5;

/// A daemon with an agent pointed at `mock` (with `config` on top) whose system timer runs
/// `lib/tick.ts` every 100 ms.
async fn ticking_agent(mock: &MockProvider, config: &[(&str, Value)]) -> (Harness, Arc<Agent>) {
    ticking_agent_with(mock, &[], config).await
}

/// [`ticking_agent`] with more source `files` in the agent.
pub(crate) async fn ticking_agent_with(
    mock: &MockProvider,
    files: &[(&str, &str)],
    config: &[(&str, Value)],
) -> (Harness, Arc<Agent>) {
    let h = Harness::start().await;
    let mut all = model_config(mock);
    all.push((
        "triggers.on_timer",
        json!({ "enabled": true, "targets": [{ "scope": "system" }] }),
    ));
    all.extend(config.iter().cloned());
    let mut sources = vec![(TICK_PATH, TICK)];
    sources.extend_from_slice(files);
    let path = agent_file(h.dir.path(), "ticker", &sources, &all);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let (status, body) = call(
        &h,
        Method::POST,
        &format!("/agents/{}/timers", agent.id),
        Some(
            json!({ "mode": "interval", "every_ms": 100, "scope": ["system"],
                     "lambda": "lib/tick.ts:main" }),
        ),
    )
    .await;
    assert!(status < 300, "{status} {body}");
    wait_for("the timer ticks", || async {
        completed_after(&h, &agent, 0, TICK_PATH) >= 1
    })
    .await;
    (h, agent)
}

/// `lambda.completed` events of the agent's system lambda in `path` after bus cursor `cursor`.
pub(crate) fn completed_after(h: &Harness, agent: &Agent, cursor: u64, path: &str) -> usize {
    h.server
        .daemon
        .events()
        .since(cursor)
        .iter()
        .filter(|f| {
            f.event.event_type == "lambda.completed"
                && f.event.agent_id.as_deref() == Some(agent.id.as_str())
                && f.event.payload["lambda_path"] == path
        })
        .count()
}

/// The bus's newest cursor.
pub(crate) fn newest_cursor(h: &Harness) -> u64 {
    h.server
        .daemon
        .events()
        .since(0)
        .last()
        .map_or(0, |f| f.cursor)
}

/// A request that must be answered within 10 s, or the test fails.
pub(crate) async fn call(
    h: &Harness,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    tokio::time::timeout(
        Duration::from_secs(10),
        h.client.raw(method, path, body.as_ref()),
    )
    .await
    .unwrap_or_else(|_| panic!("{path} did not answer while the agent waited"))
    .unwrap()
}

/// While the agent waits: its timer lambda completes `TICKS_WHILE_WAITING` more runs, and its
/// status, config and logs are answered (each within 10 s). `still_waiting` is checked after
/// all of it, so everything above happened before the wait was released.
pub(crate) async fn stays_alive<F, Fut>(h: &Harness, agent: &Agent, still_waiting: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let before = newest_cursor(h);
    wait_for("the timer keeps firing while the agent waits", || async {
        completed_after(h, agent, before, TICK_PATH) >= TICKS_WHILE_WAITING
    })
    .await;
    for path in ["status", "config", "logs"] {
        let (status, body) = call(
            h,
            Method::GET,
            &format!("/agents/{}/{path}", agent.id),
            None,
        )
        .await;
        assert_eq!(status, 200, "GET {path}: {body}");
    }
    assert!(
        still_waiting().await,
        "the wait ended before the checks: they prove nothing"
    );
}

async fn runtime_state(h: &Harness, agent: &Agent) -> Value {
    call(
        h,
        Method::GET,
        &format!("/agents/{}/status", agent.id),
        None,
    )
    .await
    .1["runtimeState"]
        .clone()
}

async fn turn_ended(h: &Harness, agent: &Agent) {
    wait_for("the turn ended", || async {
        runtime_state(h, agent).await == "idle"
    })
    .await;
}

/// Sends one request of its own to `mock`, which a `hold_until(2)` was waiting for: both are
/// A page server that answers nothing until [`release`]: its first request waits for a second.
pub(crate) async fn held_page_server() -> MockProvider {
    let slow = MockProvider::start(Wire::OpenAi).await;
    slow.push_all([Turn::text("slow page"), Turn::text("slow page")]);
    slow.hold_until(2);
    slow
}

/// answered from then on.
pub(crate) async fn release(mock: &MockProvider) {
    let client = reqwest::Client::new();
    let _answer = tokio::time::timeout(
        Duration::from_secs(10),
        client
            .post(format!("{}/chat/completions", mock.base_url()))
            .json(&json!({ "model": "mock-model", "messages": [] }))
            .send(),
    )
    .await
    .expect("the mock answers once released");
}

/// The owner approves the agent's one pending approval; the turn that waited for it ends.
async fn approve_pending_and_end_turn(h: &Harness, agent: &Agent) {
    let (_, tasks) = call(
        h,
        Method::GET,
        &format!("/agents/{}/tasks?status=pending_approval", agent.id),
        None,
    )
    .await;
    let task_id = tasks["tasks"][0]["id"].as_str().unwrap().to_owned();
    let (status, body) = call(
        h,
        Method::POST,
        &format!("/agents/{}/tasks/{task_id}/resolve", agent.id),
        Some(json!({ "action": "approve" })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    turn_ended(h, agent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_a_turn_waiting_for_approval_leaves_timers_and_reads_running() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call(
            "sys_update_config",
            json!({ "path": "description", "value": "approved" }),
        ),
        Turn::text("Done."),
    ]);
    let (h, agent) = ticking_agent(&mock, &[]).await;
    chat(&h, &agent, "update your description").await;
    wait_for("the approval wait", || async {
        runtime_state(&h, &agent).await == "awaiting_approval"
    })
    .await;
    stays_alive(&h, &agent, || async {
        runtime_state(&h, &agent).await == "awaiting_approval"
    })
    .await;
    approve_pending_and_end_turn(&h, &agent).await;
    let (_, config) = call(
        &h,
        Method::GET,
        &format!("/agents/{}/config", agent.id),
        None,
    )
    .await;
    assert_eq!(config["config"]["description"], "approved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_a_turn_waiting_for_an_ask_answer_leaves_timers_and_reads_running() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call("ask", json!({ "question": "Which colour?" })),
        Turn::text("Teal it is."),
    ]);
    let (h, agent) = ticking_agent(&mock, &[]).await;
    chat(&h, &agent, "pick a colour with me").await;
    wait_for("the ask", || async { !agent.hil().asks().is_empty() }).await;
    stays_alive(&h, &agent, || async { !agent.hil().asks().is_empty() }).await;
    let (request_id, _) = agent.hil().asks().remove(0);
    let (status, body) = call(
        &h,
        Method::POST,
        &format!("/agents/{}/asks/{request_id}/respond", agent.id),
        Some(json!({ "answer": "teal" })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    turn_ended(&h, &agent).await;
    assert_eq!(mock.request_count(), 2, "the turn went on after the answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_a_hung_model_leaves_timers_and_reads_running() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    // The turn's request and the test's releasing one each get an answer.
    mock.push_all([Turn::text("Finally."), Turn::text("Finally.")]);
    mock.hold_until(2);
    let (h, agent) = ticking_agent(&mock, &[]).await;
    chat(&h, &agent, "hello?").await;
    tokio::time::timeout(Duration::from_secs(30), mock.requests_arrived(1))
        .await
        .expect("the turn asks the model");
    stays_alive(&h, &agent, || async {
        mock.request_count() == 1 && runtime_state(&h, &agent).await == "thinking"
    })
    .await;
    release(&mock).await;
    turn_ended(&h, &agent).await;
    assert!(common::has_text(&agent, "main", "Finally.").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_a_long_network_tool_call_leaves_timers_and_reads_running() {
    let slow = held_page_server().await;
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call(
            "sys_fetch",
            json!({ "url": format!("{}/page", slow.base_url()) }),
        ),
        Turn::text("Fetched."),
    ]);
    let (h, agent) = ticking_agent(&mock, &[("security.allow_local_fetch", json!(true))]).await;
    chat(&h, &agent, "fetch the page").await;
    tokio::time::timeout(Duration::from_secs(30), slow.requests_arrived(1))
        .await
        .expect("the tool call reaches the slow server");
    stays_alive(&h, &agent, || async {
        slow.request_count() == 1 && mock.request_count() == 1
    })
    .await;
    release(&slow).await;
    turn_ended(&h, &agent).await;
    assert_eq!(mock.request_count(), 2, "the turn went on after the fetch");
}

/// `POST /chat` on `loop_name`.
async fn chat_on(h: &Harness, agent: &Agent, loop_name: &str, text: &str) {
    let (status, body) = call(
        h,
        Method::POST,
        &format!("/agents/{}/chat", agent.id),
        Some(json!({ "text": text, "loop": loop_name })),
    )
    .await;
    assert_eq!(status, 202, "{body}");
}

/// §6.4: each loop is its own conversation with its own executor state, so a turn of one loop
/// runs while a turn of another loop of the same agent waits (here for a long network tool
/// call); only two turns of one loop take turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_stl_a_turn_on_another_loop_completes_while_main_waits() {
    let slow = held_page_server().await;
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call(
            "sys_fetch",
            json!({ "url": format!("{}/page", slow.base_url()) }),
        ),
        Turn::text("Side loop done."),
        Turn::text("Fetched."),
    ]);
    let h = Harness::start().await;
    let mut config = model_config(&mock);
    config.push(("security.allow_local_fetch", json!(true)));
    config.push((
        "loops",
        json!([{ "name": "side", "goal": "Answer on the side.", "enabled": true, "autostart": false, "tools": [] }]),
    ));
    let path = agent_file(h.dir.path(), "twoloops", &[], &config);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    chat(&h, &agent, "fetch the page").await;
    tokio::time::timeout(Duration::from_secs(30), slow.requests_arrived(1))
        .await
        .expect("main's tool call reaches the slow server");
    chat_on(&h, &agent, "side", "anything new?").await;
    wait_for("the side loop's turn while main waits", || async {
        common::has_text(&agent, "side", "Side loop done.").await
    })
    .await;
    assert_eq!(slow.request_count(), 1, "main still waits for its fetch");
    assert!(!common::has_text(&agent, "main", "Fetched.").await);
    release(&slow).await;
    wait_for("main's turn ends after the fetch", || async {
        common::has_text(&agent, "main", "Fetched.").await
    })
    .await;
    turn_ended(&h, &agent).await;
}

/// A daemon with an agent pointed at `mock` that has an inner loop `side` (no tools), and
/// the agent's file.
async fn two_loop_agent(mock: &MockProvider) -> (Harness, Arc<Agent>, std::path::PathBuf) {
    let h = Harness::start().await;
    let mut config = model_config(mock);
    config.push((
        "loops",
        json!([{ "name": "side", "goal": "Answer on the side.", "enabled": true, "autostart": false, "tools": [] }]),
    ));
    let path = agent_file(h.dir.path(), "twoloops", &[], &config);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    (h, agent, path)
}

/// While main waits for the owner (`still_waiting` holds before and after), a chat on
/// `side` runs a whole turn: the owner's wait holds neither the file nor main's loop.
async fn side_turn_completes_while_main_waits<F, Fut>(h: &Harness, agent: &Agent, still_waiting: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    chat_on(h, agent, "side", "anything new?").await;
    wait_for(
        "the side loop's turn while main waits for the owner",
        || async { common::has_text(agent, "side", "Side loop done.").await },
    )
    .await;
    assert!(
        still_waiting().await,
        "main's wait ended before the side turn: it proves nothing"
    );
}

/// §6.4 with the owner's approval: main's turn waits for the owner to approve a restricted
/// call; meanwhile a turn on another loop of the same agent runs to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_stl_a_turn_on_another_loop_completes_while_main_waits_for_approval() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call(
            "sys_update_config",
            json!({ "path": "description", "value": "approved" }),
        ),
        Turn::text("Side loop done."),
        Turn::text("Done."),
    ]);
    let (h, agent, _) = two_loop_agent(&mock).await;
    chat(&h, &agent, "update your description").await;
    wait_for("main's approval wait", || async {
        runtime_state(&h, &agent).await == "awaiting_approval"
    })
    .await;
    side_turn_completes_while_main_waits(&h, &agent, || async {
        runtime_state(&h, &agent).await == "awaiting_approval"
            && !common::has_text(&agent, "main", "Done.").await
    })
    .await;
    approve_pending_and_end_turn(&h, &agent).await;
    assert!(common::has_text(&agent, "main", "Done.").await);
    let (_, config) = call(
        &h,
        Method::GET,
        &format!("/agents/{}/config", agent.id),
        None,
    )
    .await;
    assert_eq!(config["config"]["description"], "approved");
}

/// The same with an `ask`: main waits for the owner's answer while a turn on another loop
/// runs to its end; the answer then reaches main's model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_stl_a_turn_on_another_loop_completes_while_main_waits_for_an_ask_answer() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call("ask", json!({ "question": "Which colour?" })),
        Turn::text("Side loop done."),
        Turn::text("Teal it is."),
    ]);
    let (h, agent, _) = two_loop_agent(&mock).await;
    chat(&h, &agent, "pick a colour with me").await;
    wait_for("main's ask", || async { !agent.hil().asks().is_empty() }).await;
    side_turn_completes_while_main_waits(&h, &agent, || async { !agent.hil().asks().is_empty() })
        .await;
    let (request_id, _) = agent.hil().asks().remove(0);
    let (status, body) = call(
        &h,
        Method::POST,
        &format!("/agents/{}/asks/{request_id}/respond", agent.id),
        Some(json!({ "answer": "teal" })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    wait_for("main's turn goes on with the answer", || async {
        common::has_text(&agent, "main", "Teal it is.").await
    })
    .await;
    turn_ended(&h, &agent).await;
    let last = mock.requests().last().cloned().unwrap().body.to_string();
    assert!(
        last.contains("teal"),
        "main's model reads the answer: {last}"
    );
}

/// An approval a daemon turn waits for, resolved by another process (`adf approve FILE …`
/// writes the row through its own connection): the waiting turn notices, runs the call and
/// goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_an_approval_resolved_by_another_process_lets_the_waiting_turn_go_on() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call(
            "sys_update_config",
            json!({ "path": "description", "value": "approved elsewhere" }),
        ),
        Turn::text("Done."),
    ]);
    let (h, agent, path) = two_loop_agent(&mock).await;
    chat(&h, &agent, "update your description").await;
    wait_for("main's approval wait", || async {
        runtime_state(&h, &agent).await == "awaiting_approval"
    })
    .await;
    let (_, tasks) = call(
        &h,
        Method::GET,
        &format!("/agents/{}/tasks?status=pending_approval", agent.id),
        None,
    )
    .await;
    let task_id = tasks["tasks"][0]["id"].as_str().unwrap().to_owned();
    tokio::task::spawn_blocking(move || {
        let mut file = adf_store::AdfFile::open(&path).unwrap();
        let registry = adf_runtime::tools::ToolRegistry::with_builtins();
        adf_runtime::tools::approval::resolve_task(
            &registry,
            &mut file,
            &task_id,
            adf_runtime::tools::approval::Resolution::Approve {
                modified_args: None,
            },
            &adf_runtime::tools::ToolCaller::Owner,
            false,
        )
        .unwrap();
        file.close().unwrap();
    })
    .await
    .unwrap();
    wait_for("the waiting turn goes on", || async {
        common::has_text(&agent, "main", "Done.").await
    })
    .await;
    turn_ended(&h, &agent).await;
    let (_, config) = call(
        &h,
        Method::GET,
        &format!("/agents/{}/config", agent.id),
        None,
    )
    .await;
    assert_eq!(config["config"]["description"], "approved elsewhere");
}

/// A system lambda that records which file change it was handed.
const MARK: &str = r#"
export async function main(event) {
  const name = event.data.path.replace(/\//g, '_');
  await adf.fs_write({ path: `seen/${name}`, content: 'x', mode: 'write' });
}
"#;

async fn owner_put(h: &Harness, agent: &Agent, path: &str) {
    let (status, body) = call(
        h,
        Method::PUT,
        &format!(
            "/agents/{}/files/content?path={}",
            agent.id,
            path.replace('/', "%2F")
        ),
        Some(json!({ "content": "o" })),
    )
    .await;
    assert!(status < 300, "{status} {body}");
}

/// A system-scope trigger delivery queued behind an agent-scope one whose turn waits for the
/// owner's approval runs without waiting for that answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_trg_a_system_delivery_runs_while_an_agent_trigger_turn_waits_for_approval() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call(
            "sys_update_config",
            json!({ "path": "description", "value": "approved" }),
        ),
        Turn::text("Done."),
    ]);
    let h = Harness::start().await;
    let mut config = model_config(&mock);
    config.push((
        "triggers.on_file_change",
        json!({ "enabled": true, "targets": [
            { "scope": "agent", "filter": { "watch": "ask/**" } },
            { "scope": "system", "lambda": "lib/mark.ts:main", "filter": { "watch": "sys/**" } }
        ] }),
    ));
    let path = agent_file(h.dir.path(), "queued", &[("lib/mark.ts", MARK)], &config);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    owner_put(&h, &agent, "ask/go.md").await;
    wait_for("the trigger turn's approval wait", || async {
        runtime_state(&h, &agent).await == "awaiting_approval"
    })
    .await;
    owner_put(&h, &agent, "sys/one.md").await;
    wait_for("the system lambda ran while the turn waits", || async {
        common::paths(&agent, "seen/").await == ["seen/sys_one.md"]
    })
    .await;
    assert_eq!(runtime_state(&h, &agent).await, "awaiting_approval");
    approve_pending_and_end_turn(&h, &agent).await;
    common::drained(&agent).await;
    assert_eq!(agent.triggers().stats().delivered, 2);
}
