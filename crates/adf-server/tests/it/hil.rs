//! The owner's side of daemon turns, end to end over HTTP on 127.0.0.1 with real agent files
//! and the testkit's OpenAI-compatible mock: a restricted call in a chat turn waits for
//! `POST /tasks/{id}/resolve` (approve, approve with `modified_args`, deny) while the agent
//! still answers other requests; `ask` waits for `POST /asks/{id}/respond`; `POST /abort`
//! ends a turn stuck on an approval or on a slow provider and the agent takes the next chat
//! without replaying the aborted one; `GET /loop` pages; `DELETE /chat` clears with an audit
//! snapshot; `loop_send` wakes are served in the daemon and autostart loops run at load; an
//! unanswered suspension turns the agent off; `POST /suspend/respond` resumes one.
use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use adf_server::Agent;
use adf_store::AdfFile;
use adf_testkit::{MockProvider, Turn, Wire};
use common::{Harness, agent_file, chat, has_text, loop_texts_in, model_config, wait_for};
use reqwest::Method;
use serde_json::{Value, json};

/// Creates an agent pointed at `mock`, with `config` set path by path.
fn new_agent(dir: &Path, mock: &MockProvider, name: &str, config: &[(&str, Value)]) -> PathBuf {
    let mut all = model_config(mock);
    all.extend(config.iter().cloned());
    agent_file(dir, name, &[], &all)
}

/// `GET path`, failing the test when the daemon does not answer within 10 s.
async fn get(h: &Harness, path: &str) -> Value {
    tokio::time::timeout(Duration::from_secs(10), h.client.get(path))
        .await
        .unwrap_or_else(|_| panic!("GET {path} did not answer"))
        .unwrap()
}

async fn post(h: &Harness, path: &str, body: Value) -> (u16, Value) {
    tokio::time::timeout(
        Duration::from_secs(10),
        h.client.raw(Method::POST, path, Some(&body)),
    )
    .await
    .unwrap_or_else(|_| panic!("POST {path} did not answer"))
    .unwrap()
}

/// A daemon whose agent `name` is in a turn that waits for the owner on a restricted
/// `sys_update_config` called with `args`; the model answers `reply` once the call is settled.
/// Returns the pending task too.
async fn awaiting_description_update(
    name: &str,
    args: Value,
    reply: &str,
) -> (MockProvider, Harness, Arc<Agent>, Value) {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call("sys_update_config", args),
        Turn::text(reply),
    ]);
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), &mock, name, &[]);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    chat(&h, &agent, "update your description").await;
    let task = pending_task(&h, &agent).await;
    (mock, h, agent, task)
}

/// The owner resolves the pending task `task_id` with `resolution`; the daemon answers 200.
async fn resolve(h: &Harness, agent: &Agent, task_id: &str, resolution: Value) -> Value {
    let (status, body) = post(
        h,
        &format!("/agents/{}/tasks/{task_id}/resolve", agent.id),
        resolution,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The first task waiting for approval, once there is one (read over HTTP while the turn
/// holds the agent's worker).
async fn pending_task(h: &Harness, agent: &Agent) -> Value {
    let path = format!("/agents/{}/tasks?status=pending_approval", agent.id);
    wait_for("a pending approval", || async {
        !get(h, &path).await["tasks"].as_array().unwrap().is_empty()
    })
    .await;
    get(h, &path).await["tasks"][0].clone()
}

async fn turn_ended(h: &Harness, agent: &Agent) {
    let path = format!("/agents/{}/status", agent.id);
    wait_for("the turn ended", || async {
        get(h, &path).await["runtimeState"] == "idle"
    })
    .await;
}

/// Waits until an event satisfying `matches` was published (events of a turn go out from
/// their own task, shortly after what the test observed in the file).
async fn wait_event(h: &Harness, what: &str, matches: impl Fn(&str, &Value) -> bool) {
    wait_for(what, || async {
        event_types(h).iter().any(|(t, p)| matches(t, p))
    })
    .await;
}

fn event_types(h: &Harness) -> Vec<(String, Value)> {
    h.server
        .daemon
        .events()
        .since(0)
        .iter()
        .map(|f| (f.event.event_type.clone(), f.event.payload.clone()))
        .collect()
}

/// The tool results the model was sent in its last request.
fn last_tool_results(mock: &MockProvider) -> Vec<String> {
    let request = mock.last_request().unwrap();
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect()
}

async fn description(h: &Harness, agent: &Agent) -> Value {
    get(h, &format!("/agents/{}/config", agent.id)).await["config"]["description"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tol_08_a_restricted_call_in_a_daemon_turn_waits_for_the_owner_and_continues_once_approved()
{
    let (_mock, h, agent, task) = awaiting_description_update(
        "approver",
        json!({ "path": "description", "value": "approved by the owner", "_reason": "tidy up" }),
        "Done.",
    )
    .await;

    // TOL-08: the row, read over HTTP while the turn holds the worker.
    assert_eq!(task["tool"], "sys_update_config");
    assert_eq!(task["executor_managed"], true);
    assert_eq!(task["requires_authorization"], true);
    let status = get(&h, &format!("/agents/{}/status", agent.id)).await;
    assert_eq!(status["runtimeState"], "awaiting_approval");
    assert_eq!(description(&h, &agent).await, "", "nothing ran yet");

    let task_id = task["id"].as_str().unwrap();
    let body = resolve(&h, &agent, task_id, json!({ "action": "approve" })).await;
    assert_eq!(body["resolution"]["status"], "approved");
    assert_eq!(body["task"]["status"], "running");
    assert_eq!(body["taskId"], task_id);

    wait_for("the turn continued", || has_text(&agent, "main", "Done.")).await;
    assert_eq!(description(&h, &agent).await, "approved by the owner");
    let row = get(&h, &format!("/agents/{}/tasks/{task_id}", agent.id)).await;
    assert_eq!(row["task"]["status"], "completed");

    // A second answer finds the task no longer pending.
    let (status, _) = post(
        &h,
        &format!("/agents/{}/tasks/{task_id}/resolve", agent.id),
        json!({ "action": "deny" }),
    )
    .await;
    assert_eq!(status, 409);

    // hil.requested then hil.resolved, with argument names only (no values, no _reason).
    wait_event(&h, "hil.resolved", |t, _| t == "hil.resolved").await;
    let events = event_types(&h);
    let requested = events
        .iter()
        .position(|(t, _)| t == "hil.requested")
        .unwrap();
    let resolved = events
        .iter()
        .position(|(t, _)| t == "hil.resolved")
        .unwrap();
    assert!(requested < resolved);
    let payload = &events[requested].1;
    assert_eq!(payload["task_id"], task_id);
    assert_eq!(payload["tool"], "sys_update_config");
    assert_eq!(payload["reason"], "restricted");
    assert_eq!(
        payload["input"],
        json!({ "path": "string", "value": "string" })
    );
    assert!(!payload.to_string().contains("approved by the owner"));
    assert_eq!(events[resolved].1["approved"], true);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tol_08_approve_with_modified_args_runs_the_owners_arguments() {
    let (_mock, h, agent, task) = awaiting_description_update(
        "modified",
        json!({ "path": "description", "value": "the model's text" }),
        "Done.",
    )
    .await;
    let task_id = task["id"].as_str().unwrap();
    resolve(&h, &agent, task_id, json!({ "action": "approve", "modified_args": { "path": "description", "value": "the owner's text" } })).await;
    wait_for("the turn continued", || has_text(&agent, "main", "Done.")).await;
    assert_eq!(description(&h, &agent).await, "the owner's text");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tol_08_a_denied_call_tells_the_model_why_and_changes_nothing() {
    let (mock, h, agent, task) = awaiting_description_update(
        "denier",
        json!({ "path": "description", "value": "never" }),
        "Understood.",
    )
    .await;
    let task_id = task["id"].as_str().unwrap();
    let body = resolve(
        &h,
        &agent,
        task_id,
        json!({ "action": "deny", "reason": "not today" }),
    )
    .await;
    assert_eq!(body["resolution"]["status"], "denied");
    assert_eq!(body["task"]["status"], "denied");
    wait_for("the model replied", || {
        has_text(&agent, "main", "Understood.")
    })
    .await;
    let results = last_tool_results(&mock);
    assert!(
        results
            .iter()
            .any(|r| r.contains("DENIED") && r.contains("not today")),
        "the model reads the denial: {results:?}"
    );
    assert_eq!(description(&h, &agent).await, "");
    let row = get(&h, &format!("/agents/{}/tasks/{task_id}", agent.id)).await;
    assert_eq!(row["task"]["status"], "denied");
    assert_eq!(row["task"]["error"], "not today");
    wait_event(&h, "hil.resolved", |t, _| t == "hil.resolved").await;
    let resolved = event_types(&h)
        .into_iter()
        .find(|(t, _)| t == "hil.resolved")
        .unwrap();
    assert_eq!(resolved.1["approved"], false);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_waits_for_the_owners_answer_which_the_model_reads() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call("ask", json!({ "question": "Which colour?" })),
        Turn::text("Teal it is."),
    ]);
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), &mock, "asker", &[]);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    let asks_path = format!("/agents/{}/asks", agent.id);
    assert_eq!(get(&h, &asks_path).await["asks"], json!([]));
    chat(&h, &agent, "pick a colour").await;
    wait_for("the ask", || async {
        !get(&h, &asks_path).await["asks"]
            .as_array()
            .unwrap()
            .is_empty()
    })
    .await;
    let asks = get(&h, &asks_path).await;
    assert_eq!(asks["agentId"], agent.id.as_str());
    assert_eq!(asks["asks"][0]["question"], "Which colour?");
    let request_id = asks["asks"][0]["requestId"].as_str().unwrap().to_owned();
    assert_eq!(agent.hil().runtime_state(), "awaiting_ask");
    // The owner can look at the agent while it waits: reads that need its file answer (the
    // waiting turn lends it), they do not queue behind the turn.
    let config = get(&h, &format!("/agents/{}/config", agent.id)).await;
    assert!(
        config.get("config").is_some() || config.get("name").is_some(),
        "{config}"
    );
    let status = get(&h, &format!("/agents/{}/status", agent.id)).await;
    assert_eq!(status["id"], agent.id.as_str(), "{status}");

    let respond = format!("/agents/{}/asks/{request_id}/respond", agent.id);
    let (status, _) = post(&h, &respond, json!({})).await;
    assert_eq!(status, 400, "an answer is required");
    let (status, _) = post(
        &h,
        &format!("/agents/{}/asks/nope/respond", agent.id),
        json!({ "answer": "x" }),
    )
    .await;
    assert_eq!(status, 404);
    let (status, body) = post(&h, &respond, json!({ "answer": "teal, please" })).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({ "agentId": agent.id, "requestId": request_id, "answered": true })
    );
    wait_for("the reply", || has_text(&agent, "main", "Teal it is.")).await;
    let results = last_tool_results(&mock);
    assert!(
        results.iter().any(|r| r.contains("teal, please")),
        "{results:?}"
    );
    assert_eq!(get(&h, &asks_path).await["asks"], json!([]));
    let (status, _) = post(&h, &respond, json!({ "answer": "again" })).await;
    assert_eq!(status, 404, "answered once");

    wait_event(&h, "ask.resolved", |t, _| t == "ask.resolved").await;
    let events = event_types(&h);
    let requested = events.iter().find(|(t, _)| t == "ask.requested").unwrap();
    assert_eq!(requested.1["request_id"], request_id.as_str());
    assert_eq!(requested.1["question"], "Which colour?");
    let resolved = events.iter().find(|(t, _)| t == "ask.resolved").unwrap();
    assert_eq!(resolved.1["has_response"], true);
    assert_eq!(resolved.1["response_length"], 12);
    h.stop().await;
}

async fn checkpoint_status(agent: &Agent) -> String {
    agent
        .job(|file| {
            let entry = file.meta_get("adf_runtime_turn_checkpoint")?.unwrap();
            let value: Value = serde_json::from_str(&entry.value).unwrap();
            Ok(value["status"].as_str().unwrap().to_owned())
        })
        .await
        .unwrap()
}

async fn log_events(agent: &Agent) -> Vec<String> {
    let rows = common::log_rows(agent).await.into_iter();
    rows.map(|row| row.event.unwrap_or_default()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_of_a_turn_waiting_for_approval_denies_it_and_the_next_chat_recovers_without_replay()
{
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push(Turn::tool_call(
        "sys_update_config",
        json!({ "path": "description", "value": "never" }),
    ));
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), &mock, "aborted", &[]);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    chat(&h, &agent, "first message").await;
    let task = pending_task(&h, &agent).await;
    let task_id = task["id"].as_str().unwrap();

    let (status, body) = post(&h, &format!("/agents/{}/abort", agent.id), json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["aborted"], true);
    turn_ended(&h, &agent).await;
    let row = get(&h, &format!("/agents/{}/tasks/{task_id}", agent.id)).await;
    assert_eq!(row["task"]["status"], "denied");
    assert_eq!(row["task"]["error"], adf_server::hil::ABORTED);
    assert_eq!(checkpoint_status(&agent).await, "in_progress");
    assert!(
        log_events(&agent)
            .await
            .contains(&"turn_aborted".to_owned())
    );

    // Unlike the reference, the agent takes the next chat.
    mock.push(Turn::text("Fresh start."));
    chat(&h, &agent, "second message").await;
    wait_for("the next turn", || has_text(&agent, "main", "Fresh start.")).await;
    let texts = loop_texts_in(&agent, "main").await;
    assert_eq!(
        texts.iter().filter(|t| t.contains("first message")).count(),
        1,
        "the aborted turn's message is not replayed: {texts:?}"
    );
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.contains(r#""type":"tool_use""#))
            .count(),
        1,
        "its call is not made again"
    );
    assert!(
        log_events(&agent)
            .await
            .contains(&"turn_checkpoint_recovered".to_owned())
    );
    assert_eq!(description(&h, &agent).await, "");
    h.stop().await;
}

/// The deterministic form of the race behind a flake of the test above: after the abort
/// ends the approval wait, the rest of the turn could run within the same poll of the turn
/// job, never giving its abort signal a chance (here a second call of the same reply, which
/// needs no await; in the flake, the next model request's error already relayed back). The
/// turn must stop at the aborted wait itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_during_an_approval_wait_ends_the_turn_there_without_running_the_rest_of_its_batch() {
    let (mock, h, agent) = chat_for_a_call_then_a_write(
        Turn::tool_call(
            "sys_update_config",
            json!({ "path": "description", "value": "never" }),
        ),
        "batch",
    )
    .await;
    let task = pending_task(&h, &agent).await;
    let task_id = task["id"].as_str().unwrap();

    abort_and_expect_the_turn_to_end_at_the_wait(&h, &agent, &mock).await;
    let row = get(&h, &format!("/agents/{}/tasks/{task_id}", agent.id)).await;
    assert_eq!(row["task"]["error"], adf_server::hil::ABORTED);
    h.stop().await;
}

/// A daemon with agent `name`, chatted with once; its model answers with `first` and, in the
/// same reply, a write of `after-abort.md` that must not run once an abort ends `first`'s wait.
async fn chat_for_a_call_then_a_write(
    first: Turn,
    name: &str,
) -> (MockProvider, Harness, Arc<Agent>) {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push(first.with_tool_call(
        "fs_write",
        json!({ "path": "after-abort.md", "mode": "write", "content": "too late" }),
    ));
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), &mock, name, &[]);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    chat(&h, &agent, "a call, then a write").await;
    (mock, h, agent)
}

/// Aborts the agent's turn over HTTP and checks it ended at the wait the abort cut short:
/// the call after it in the same reply (`after-abort.md`) never ran, no model request
/// followed, the checkpoint stays `in_progress` and the abort (not an error) is logged.
async fn abort_and_expect_the_turn_to_end_at_the_wait(
    h: &Harness,
    agent: &Arc<Agent>,
    mock: &MockProvider,
) {
    let (status, body) = post(h, &format!("/agents/{}/abort", agent.id), json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["aborted"], true);
    turn_ended(h, agent).await;
    let written = agent
        .job(|file| file.file_read("after-abort.md"))
        .await
        .unwrap();
    assert!(written.is_none(), "the call after the aborted wait ran");
    assert_eq!(mock.request_count(), 1, "no model request after the abort");
    assert_eq!(checkpoint_status(agent).await, "in_progress");
    let logged = log_events(agent).await;
    assert!(logged.contains(&"turn_aborted".to_owned()), "{logged:?}");
    assert!(!logged.contains(&"turn_error".to_owned()), "{logged:?}");
}

/// The same for an `ask` the abort leaves unanswered: the turn ends at the ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_during_an_ask_ends_the_turn_there_without_running_the_rest_of_its_batch() {
    let (mock, h, agent) = chat_for_a_call_then_a_write(
        Turn::tool_call("ask", json!({ "question": "Which colour?" })),
        "askbatch",
    )
    .await;
    wait_for("the ask", || async {
        agent.hil().runtime_state() == "awaiting_ask"
    })
    .await;

    abort_and_expect_the_turn_to_end_at_the_wait(&h, &agent, &mock).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_of_a_turn_waiting_for_a_slow_provider_frees_the_agent() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push(Turn::text("too late").with_delay(Duration::from_secs(60)));
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), &mock, "slow", &[]);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    chat(&h, &agent, "take your time").await;
    wait_for("the provider was asked", || async {
        mock.request_count() == 1
    })
    .await;
    let (status, body) = post(&h, &format!("/agents/{}/abort", agent.id), json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["aborted"], true);
    turn_ended(&h, &agent).await;
    assert_eq!(checkpoint_status(&agent).await, "in_progress");
    // The model request (sent on the daemon's runtime, not the turn's) went with the turn:
    // the mock saw its client leave before the delayed answer.
    tokio::time::timeout(Duration::from_secs(30), mock.requests_abandoned(1))
        .await
        .expect("the aborted turn's model request was cancelled");

    mock.push(Turn::text("Here now."));
    chat(&h, &agent, "hello again").await;
    wait_for("the next turn", || has_text(&agent, "main", "Here now.")).await;
    assert!(!has_text(&agent, "main", "too late").await);
    assert_eq!(
        loop_texts_in(&agent, "main")
            .await
            .iter()
            .filter(|t| t.contains("take your time"))
            .count(),
        1
    );
    // Nothing in flight once the turn ended (its reply is in the transcript a few steps
    // before its job ends): abort answers 200 with nothing aborted.
    turn_ended(&h, &agent).await;
    let (status, body) = post(&h, &format!("/agents/{}/abort", agent.id), json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(body["aborted"], false);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_pages_default_to_the_last_page_and_chat_history_has_the_reference_shape() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([Turn::text("one"), Turn::text("two")]);
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), &mock, "pager", &[]);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    chat(&h, &agent, "first").await;
    wait_for("one", || has_text(&agent, "main", "one")).await;
    chat(&h, &agent, "second").await;
    wait_for("two", || has_text(&agent, "main", "two")).await;
    turn_ended(&h, &agent).await;
    let total = loop_texts_in(&agent, "main").await.len() as i64;

    let page = get(&h, &format!("/agents/{}/loop?limit=2", agent.id)).await;
    assert_eq!(page["total"], total);
    assert_eq!(page["limit"], 2);
    assert_eq!(page["offset"], total - 2);
    let entries = page["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    let last = &entries[1];
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content_json"][0]["text"], "two");
    assert_eq!(last["model"], "mock-model");
    assert!(last["created_at"].is_number());
    assert!(entries[0].get("model").is_none(), "model only when set");

    let first = get(&h, &format!("/agents/{}/loop?limit=1&offset=0", agent.id)).await;
    assert_eq!(first["offset"], 0);
    assert_eq!(first["entries"].as_array().unwrap().len(), 1);
    let all = get(
        &h,
        &format!("/agents/{}/loop?limit=9999&offset=0", agent.id),
    )
    .await;
    assert_eq!(all["limit"], 500, "clamped");
    assert_eq!(all["entries"].as_array().unwrap().len() as i64, total);
    let (status, _) = h
        .client
        .raw(
            Method::GET,
            &format!("/agents/{}/loop?offset=-1", agent.id),
            None,
        )
        .await
        .unwrap();
    assert_eq!(status, 400);

    let chat_page = get(&h, &format!("/agents/{}/chat?limit=3", agent.id)).await;
    let history = &chat_page["chatHistory"];
    assert_eq!(history["version"], 1);
    assert_eq!(history["total"], total);
    assert_eq!(history["earlierCount"], total - 3);
    let ui = history["uiLog"].as_array().unwrap();
    assert_eq!(ui.last().unwrap()["type"], "text");
    assert_eq!(ui.last().unwrap()["content"], "two");
    assert!(
        ui.iter()
            .any(|e| e["type"] == "user" && e["content"] == "second")
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aud_18_delete_chat_clears_the_transcript_with_an_audit_snapshot() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push(Turn::text("remember me"));
    let h = Harness::start().await;
    let path = new_agent(
        h.dir.path(),
        &mock,
        "clearer",
        &[("context.audit.loop", json!(true))],
    );
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    chat(&h, &agent, "hello").await;
    wait_for("the reply", || has_text(&agent, "main", "remember me")).await;
    turn_ended(&h, &agent).await;
    let rows = loop_texts_in(&agent, "main").await.len() as i64;
    assert!(rows >= 2);

    let (status, body) = h
        .client
        .raw(Method::DELETE, &format!("/agents/{}/chat", agent.id), None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["removed"], rows);
    assert_eq!(body["audited"], true);
    assert!(loop_texts_in(&agent, "main").await.is_empty());
    let audits = common::table_rows(&agent, "adf_audit").await;
    let newest = audits.iter().max_by_key(|row| row["id"].as_i64()).unwrap();
    let source = newest["source"].as_str().unwrap();
    let count = newest["entry_count"].as_i64().unwrap();
    assert_eq!(source, "loop:main");
    assert_eq!(count, rows);
    assert!(event_types(&h).iter().any(|(t, _)| t == "loop.cleared"));
    h.stop().await;
}

fn worker_loop(autostart: bool) -> Value {
    json!([{
        "name": "worker",
        "goal": "Do the work main sends you.",
        "enabled": true,
        "autostart": autostart,
        "tools": ["loop_send", "loop_list", "sys_set_state"],
    }])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_44_loop_send_wake_is_served_after_the_waking_turn_in_the_daemon() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call(
            "loop_send",
            json!({ "to_loop": "worker", "content": "count the files", "wake": true }),
        ),
        Turn::text("Sent."),
        Turn::text("Worker done."),
    ]);
    let h = Harness::start().await;
    let path = new_agent(
        h.dir.path(),
        &mock,
        "sender",
        &[("loops", worker_loop(false))],
    );
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    chat(&h, &agent, "delegate").await;
    wait_for("the worker's turn", || {
        has_text(&agent, "worker", "Worker done.")
    })
    .await;
    assert!(has_text(&agent, "main", "Sent.").await);
    assert!(has_text(&agent, "worker", "count the files").await);
    assert_eq!(mock.request_count(), 3);
    wait_event(&h, "the worker's turn.completed", |t, p| {
        t == "turn.completed" && p["loop"] == "worker"
    })
    .await;
    let completed: Vec<Value> = event_types(&h)
        .into_iter()
        .filter(|(t, _)| t == "turn.completed")
        .map(|(_, p)| p)
        .collect();
    assert!(
        completed.iter().any(|p| p["loop"] == "worker"),
        "{completed:?}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_44_an_autostart_loop_is_kicked_when_the_agent_loads_active() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push(Turn::text("Started on my goal."));
    let h = Harness::start().await;
    let path = new_agent(
        h.dir.path(),
        &mock,
        "starter",
        &[("loops", worker_loop(true))],
    );
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    wait_for("the autostart turn", || {
        has_text(&agent, "worker", "Started on my goal.")
    })
    .await;
    assert_eq!(mock.request_count(), 1);
    // The kick is a wake: no trigger row, the loop reads its goal.
    let request = mock.last_request().unwrap();
    assert!(
        request
            .body
            .to_string()
            .contains("Do the work main sends you.")
    );
    h.stop().await;

    // Not when the agent starts anything but active.
    let mock = MockProvider::start(Wire::OpenAi).await;
    let h = Harness::start().await;
    let path = new_agent(
        h.dir.path(),
        &mock,
        "sleeper",
        &[("loops", worker_loop(true)), ("state", json!("idle"))],
    );
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    turn_ended(&h, &agent).await;
    assert!(loop_texts_in(&agent, "worker").await.is_empty());
    assert_eq!(mock.request_count(), 0);
    h.stop().await;
}

async fn stored_state(h: &Harness, agent: &Agent) -> Value {
    get(h, &format!("/agents/{}/config", agent.id)).await["config"]["state"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_21_an_unanswered_suspension_turns_the_agent_off_and_an_answer_resumes_it() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([Turn::text("thinking aloud"), Turn::text("again")]);
    let h = Harness::start().await;
    let config = [
        ("autonomous", json!(true)),
        ("limits.max_active_turns", json!(1)),
        ("limits.suspend_timeout_ms", json!(300)),
    ];
    let path = new_agent(h.dir.path(), &mock, "suspender", &config);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;

    // Not suspended: nothing to resolve.
    let respond = format!("/agents/{}/suspend/respond", agent.id);
    let (status, _) = post(&h, &respond, json!({})).await;
    assert_eq!(status, 400, "resume is required");
    let (status, body) = post(&h, &respond, json!({ "resume": true })).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({ "agentId": agent.id, "resume": true, "resolved": false })
    );

    chat(&h, &agent, "go").await;
    wait_for("suspended", || async {
        stored_state(&h, &agent).await == "suspended"
    })
    .await;
    wait_for("off after the timeout", || async {
        stored_state(&h, &agent).await == "off"
    })
    .await;
    wait_event(&h, "suspend.resolved", |t, _| t == "suspend.resolved").await;
    let events = event_types(&h);
    assert!(events.iter().any(|(t, _)| t == "suspend.requested"));
    let resolved = events
        .iter()
        .find(|(t, _)| t == "suspend.resolved")
        .unwrap();
    assert_eq!(resolved.1, json!({ "resumed": false, "timed_out": true }));

    // A suspension the owner answers in time goes back to active.
    h.client
        .call(
            Method::PUT,
            &format!("/agents/{}/config", agent.id),
            Some(&{
                let mut config =
                    get(&h, &format!("/agents/{}/config", agent.id)).await["config"].clone();
                config["state"] = json!("suspended");
                config["limits"]["suspend_timeout_ms"] = json!(600_000);
                config
            }),
        )
        .await
        .unwrap();
    let (status, body) = post(&h, &respond, json!({ "resume": true })).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["resolved"], true);
    assert_eq!(stored_state(&h, &agent).await, "active");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_left_by_an_earlier_process_are_settled_on_load() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), &mock, "orphans", &[]);
    let (waiting, approved, queued) = {
        let mut file = AdfFile::open(&path).unwrap();
        let mut task = |status: &str, executor_managed: bool| {
            file.task_create(&adf_store::tasks::NewTask {
                tool: "sys_update_config",
                args: &json!({ "path": "description", "value": "x" }),
                status,
                origin: Some("hil:orphans:x"),
                requires_authorization: true,
                executor_managed,
                approval_meta: Some(&json!({ "reason": "restricted" })),
                r#loop: Some("main"),
            })
            .unwrap()
        };
        let ids = (
            task("pending_approval", true),
            task("running", true),
            task("pending_approval", false),
        );
        file.close().unwrap();
        ids
    };
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    let status = |id: String| {
        let h = &h;
        let agent = &agent;
        async move { get(h, &format!("/agents/{}/tasks/{id}", agent.id)).await["task"].clone() }
    };
    let settled = status(waiting.clone()).await;
    assert_eq!(settled["status"], "cancelled");
    assert_eq!(settled["error"], adf_server::hil::ORPHANED);
    assert_eq!(status(approved).await["status"], "failed");
    // An `_async` approval (not executor-managed) is still the owner's to decide.
    assert_eq!(status(queued).await["status"], "pending_approval");
    let events = event_types(&h);
    let resolved = events
        .iter()
        .find(|(t, p)| t == "hil.resolved" && p["task_id"] == waiting.as_str())
        .unwrap();
    assert_eq!(resolved.1["orphaned"], true);
    let recovered = events.iter().find(|(t, _)| t == "loop.recovered").unwrap();
    assert_eq!(
        recovered.1,
        json!({ "reason": "orphaned_tasks", "running": 1, "awaiting_approval": 1 })
    );
    h.stop().await;
}
