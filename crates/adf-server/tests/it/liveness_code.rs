//! An agent whose code waits is not frozen (issue 29): while a model turn's `sys_code` awaits
//! a slow server, or a system lambda awaits a model that does not answer, the agent's system
//! timer keeps firing its lambda and its status, config and logs are answered — the waiting
//! code holds the agent's file only while it services an `adf.*` call. Real daemon on
//! 127.0.0.1, real files, the testkit's mock servers held with `hold_until` until the test
//! itself sends the request that releases them. No sleeps for timing: every wait is for a
//! condition, bounded.
use crate::common;
use crate::liveness::{
    call, completed_after, held_page_server, newest_cursor, release, stays_alive,
    ticking_agent_with,
};

use std::sync::Arc;
use std::time::Duration;

use adf_server::Agent;
use adf_testkit::{MockProvider, Turn, Wire};
use common::{Harness, chat, wait_for};
use reqwest::Method;
use serde_json::{Value, json};

/// A system lambda that waits for the agent's model.
const SLOW: &str = "export async function main(event) { return await adf.model_invoke({ prompt: 'take your time' }) }";

/// A ticking agent whose system lambda `source` (at `lambda`) runs when a file lands in
/// `inbox/`, and one such file (`inbox/<name>`) written; returns the bus cursor from before the
/// write.
async fn agent_with_inbox_lambda(
    mock: &MockProvider,
    lambda: &str,
    source: &str,
    name: &str,
) -> (Harness, Arc<Agent>, u64) {
    let (h, agent) = ticking_agent_with(
        mock,
        &[(lambda, source)],
        &[(
            "triggers.on_file_change",
            json!({ "enabled": true, "targets": [
                { "scope": "system", "lambda": format!("{lambda}:main"), "filter": { "watch": "inbox/**" } }
            ] }),
        )],
    )
    .await;
    let cursor = newest_cursor(&h);
    let (status, body) = call(
        &h,
        Method::PUT,
        &format!("/agents/{}/files/content?path=inbox%2F{name}", agent.id),
        Some(json!({ "content": name })),
    )
    .await;
    assert!(status < 300, "{status} {body}");
    (h, agent, cursor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_code_a_turns_sys_code_awaiting_a_slow_server_leaves_timers_and_reads_running() {
    let slow = held_page_server().await;
    let mock = MockProvider::start(Wire::OpenAi).await;
    let code = format!(
        "const page = await adf.sys_fetch({{ url: '{}/page' }}); return page.status",
        slow.base_url()
    );
    mock.push_all([
        Turn::tool_call("sys_code", json!({ "code": code })),
        Turn::text("Fetched."),
    ]);
    let (h, agent) =
        ticking_agent_with(&mock, &[], &[("security.allow_local_fetch", json!(true))]).await;
    chat(&h, &agent, "fetch the page with code").await;
    tokio::time::timeout(Duration::from_secs(30), slow.requests_arrived(1))
        .await
        .expect("the code reaches the slow server");
    stays_alive(&h, &agent, || async {
        slow.request_count() == 1 && mock.request_count() == 1
    })
    .await;
    release(&slow).await;
    wait_for("the turn goes on after the code", || async {
        mock.request_count() == 2
    })
    .await;
    // The code's result is the slow server's answer (its status), not a timeout or an error.
    let body = mock.requests()[1].body.clone();
    let messages = body["messages"].as_array().unwrap();
    let tool = messages.iter().rfind(|m| m["role"] == "tool").unwrap();
    let value: Value = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
    assert!(value["result"].is_u64(), "{value}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_code_a_system_lambda_awaiting_a_hung_model_leaves_timers_and_reads_running() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    // The lambda's request and the test's releasing one each get an answer.
    mock.push_all([Turn::text("Finally."), Turn::text("Finally.")]);
    mock.hold_until(2);
    let (h, agent, cursor) = agent_with_inbox_lambda(&mock, "lib/slow.ts", SLOW, "go.md").await;
    tokio::time::timeout(Duration::from_secs(30), mock.requests_arrived(1))
        .await
        .expect("the lambda asks the model");
    stays_alive(&h, &agent, || async {
        mock.request_count() == 1 && completed_after(&h, &agent, cursor, "lib/slow.ts") == 0
    })
    .await;
    release(&mock).await;
    wait_for("the lambda returns once the model answers", || async {
        completed_after(&h, &agent, cursor, "lib/slow.ts") == 1
    })
    .await;
}

/// A system lambda that sleeps (an await of its own, no call in flight): bounded by its
/// sleep, which outlasts the test's checks many times over.
const SLEEPY: &str = "export async function main(event) { await new Promise((r) => setTimeout(r, 20000)); return 'rested' }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_code_a_system_lambda_that_sleeps_leaves_timers_and_reads_running() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    let (h, agent, cursor) =
        agent_with_inbox_lambda(&mock, "lib/sleepy.ts", SLEEPY, "nap.md").await;
    // Its `execute` row is written as it starts (`lambda.started` is published after a run).
    wait_for("the sleepy lambda starts", || async {
        let (_, body) = call(&h, Method::GET, &format!("/agents/{}/logs", agent.id), None).await;
        body["logs"].as_array().is_some_and(|logs| {
            logs.iter()
                .any(|row| row["event"] == "execute" && row["target"] == "lib/sleepy.ts:main")
        })
    })
    .await;
    stays_alive(&h, &agent, || async {
        completed_after(&h, &agent, cursor, "lib/sleepy.ts") == 0
    })
    .await;
}
