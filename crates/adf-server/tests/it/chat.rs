//! Model turns through the daemon, against the testkit's OpenAI-compatible server: `POST /chat`
//! starts an owner turn (202) whose tool call lands in the file, and an agent-scope trigger
//! (`POST /trigger`, an `on_inbox` agent target) starts a turn with the formatted trigger
//! message (TRG-13).
use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adf_server::Agent;
use adf_testkit::{MockProvider, Turn, Wire};
use common::{Harness, agent_file, chat, loop_texts, model_config, wait_for};
use reqwest::Method;
use serde_json::{Value, json};

fn new_agent(dir: &Path, mock: &MockProvider) -> PathBuf {
    let mut config = model_config(mock);
    config.retain(|(key, _)| *key != "recovery");
    config.extend([
        (
            "recovery",
            json!({ "auto_retry": true, "max_attempts": 2, "base_delay_ms": 1, "max_delay_ms": 5 }),
        ),
        (
            "triggers.on_inbox",
            json!({ "enabled": true, "targets": [{ "scope": "agent" }] }),
        ),
    ]);
    agent_file(dir, "talker", &[], &config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_13_chat_starts_an_owner_turn_and_an_agent_scope_trigger_starts_a_turn_with_the_trigger_message()
 {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call(
            "fs_write",
            json!({ "path": "notes/hi.md", "mode": "write", "content": "hello" }),
        ),
        Turn::text("Wrote it."),
    ]);
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), &mock);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    let body = chat(&h, &agent, "write a note").await;
    assert!(body["turnId"].as_str().unwrap().starts_with("turn_"));
    wait_for("the reply", || async {
        loop_texts(&agent)
            .await
            .iter()
            .any(|t| t.contains("Wrote it."))
    })
    .await;
    let note = agent
        .store()
        .run(|file| file.file_read("notes/hi.md"))
        .await
        .unwrap()
        .expect("the model's fs_write landed");
    assert_eq!(note.content, b"hello");

    // TRG-13: an agent-scope on_inbox target gets a formatted trigger message as its turn.
    mock.push(Turn::text("Inbox seen."));
    let (status, _) = h
        .client
        .raw(
            Method::POST,
            &format!("/agents/{}/trigger", agent.id),
            Some(&json!({ "type": "inbox", "data": { "from": "did:key:zFriend", "source": "mesh" } })),
        )
        .await
        .unwrap();
    assert_eq!(status, 202);
    wait_for("the trigger turn", || async {
        loop_texts(&agent)
            .await
            .iter()
            .any(|t| t.contains("Inbox seen."))
    })
    .await;
    let texts = loop_texts(&agent).await;
    assert!(
        texts.iter().any(|t| t.contains("Trigger")),
        "a trigger row: {texts:?}"
    );
    h.stop().await;
}

/// Each turn runs on a runtime of its own, dropped after it; the model requests of all of them
/// go out on the daemon's runtime, so they share one kept-alive connection to the vendor
/// instead of a TCP (and, against a real vendor, TLS) handshake per turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_turns_of_an_agent_reuse_one_model_connection() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call(
            "fs_write",
            json!({ "path": "notes/a.md", "mode": "write", "content": "a" }),
        ),
        Turn::text("reply one"),
        Turn::text("reply two"),
        Turn::text("reply three"),
        Turn::text("reply four"),
    ]);
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), &mock);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    for (message, reply) in [
        ("first", "reply one"),
        ("second", "reply two"),
        ("third", "reply three"),
        ("fourth", "reply four"),
    ] {
        chat(&h, &agent, message).await;
        wait_for(reply, || async {
            loop_texts(&agent).await.iter().any(|t| t.contains(reply))
        })
        .await;
    }
    assert_eq!(mock.request_count(), 5, "four turns, one with a tool call");
    assert_eq!(
        mock.connections_accepted(),
        1,
        "every turn's model requests went over one kept-alive connection"
    );
    h.stop().await;
}

/// Issue 29.3/29.4 through the daemon: each retry of a chat turn is a `turn.retry` event with
/// its reason, attempt, maximum and wait; the failed turn is a row of the loop view and of
/// the chat view, where the Studio reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_chat_turn_publishes_its_retries_and_leaves_a_failed_row_in_the_loop_view() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([Turn::reset(), Turn::unavailable()]);
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), &mock);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    chat(&h, &agent, "are you there?").await;
    let events = || {
        h.server
            .daemon
            .events()
            .since(0)
            .iter()
            .map(|f| (f.event.event_type.clone(), f.event.payload.clone()))
            .collect::<Vec<_>>()
    };
    wait_for("the failed turn", || async {
        events()
            .iter()
            .any(|(t, p)| t == "turn.completed" && p["status"] == "failed")
    })
    .await;
    let retries: Vec<serde_json::Value> = events()
        .into_iter()
        .filter(|(t, _)| t == "turn.retry")
        .map(|(_, p)| p)
        .collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
    let retry = &retries[0];
    assert_eq!(retry["reason"], "connection reset", "{retry}");
    assert_eq!(
        (retry["attempt"].as_u64(), retry["max_attempts"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(retry["loop"], "main");
    let wait = retry["wait_ms"].as_u64().unwrap();
    assert!(wait <= 5, "max_delay_ms caps the wait: {retry}");
    assert!(
        retry["message"]
            .as_str()
            .unwrap()
            .ends_with("(2/2): connection reset"),
        "{retry}"
    );

    let (status, view) = h
        .client
        .raw(Method::GET, &format!("/agents/{}/loop", agent.id), None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    let last = view["entries"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "user");
    let text = last["content_json"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("[Context: turn_failed] turn failed: mock failed transiently (503)"),
        "{text}"
    );
    let (_, chat_view) = h
        .client
        .raw(Method::GET, &format!("/agents/{}/chat", agent.id), None)
        .await
        .unwrap();
    let shown = chat_view["chatHistory"]["uiLog"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(shown["type"], "context");
    assert_eq!(shown["metadata"]["category"], "turn_failed");
    assert!(
        shown["content"]
            .as_str()
            .unwrap()
            .starts_with("turn failed: "),
        "{shown}"
    );
}

/// Finding 6 of issue 30: one decision of the model per chat turn. A chat queued behind the
/// agent's running turn is answered 202 on the model its config names then; the owner changes
/// the config's model before that turn runs, and the turn still asks the model the answer
/// decided (the request names `decided-model`, not `changed-model`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_turn_asks_the_model_its_answer_decided_even_when_the_config_changes_before_it_runs() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    // The first turn's request waits for another agent's, so the queued chat is still waiting
    // for the agent's first turn when the config changes.
    mock.hold_until(2);
    mock.push_all([
        Turn::text("first reply"),
        Turn::text("other agent's reply"),
        Turn::text("queued reply"),
    ]);
    let h = Harness::start().await;
    let mut config = model_config(&mock);
    config.retain(|(key, _)| *key != "model.model_id");
    config.push(("model.model_id", json!("decided-model")));
    let path = agent_file(h.dir.path(), "decider", &[], &config);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    let other_path = agent_file(h.dir.path(), "releaser", &[], &model_config(&mock));
    let other: Arc<Agent> = h.server.daemon.load(&other_path).await.unwrap().agent;

    chat(&h, &agent, "first question").await;
    tokio::time::timeout(std::time::Duration::from_secs(20), mock.requests_arrived(1))
        .await
        .expect("the first request did not arrive in time");
    chat(&h, &agent, "queued question").await;
    let mut changed = common::stored_config(&h, &agent).await;
    changed["model"]["model_id"] = json!("changed-model");
    common::put_config(&h, &agent, &changed).await;
    chat(&h, &other, "release").await;

    tokio::time::timeout(std::time::Duration::from_secs(20), mock.requests_arrived(3))
        .await
        .expect("the queued turn's request did not arrive in time");
    let requests = mock.requests();
    let queued: Vec<&Value> = requests
        .iter()
        .map(|request| &request.body)
        .filter(|body| body.to_string().contains("queued question"))
        .collect();
    assert_eq!(
        queued.len(),
        1,
        "one request for the queued chat: {requests:?}"
    );
    assert_eq!(
        queued[0]["model"],
        json!("decided-model"),
        "{:?}",
        queued[0]
    );
    h.stop().await;
}
