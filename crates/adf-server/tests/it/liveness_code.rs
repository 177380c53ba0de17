//! An agent whose code waits is not frozen (issue 29): while a model turn's `sys_code` awaits
//! a slow server, or a system lambda awaits a model that does not answer, the agent's system
//! timer keeps firing its lambda and its status, config and logs are answered — the waiting
//! code holds the agent's file only while it services an `adf.*` call. Real daemon on
//! 127.0.0.1, real files, the testkit's mock servers held with `hold_until` until the test
//! itself sends the request that releases them. No sleeps for timing: every wait is for a
//! condition, bounded.
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

/// A system lambda that waits for the agent's model.
const SLOW: &str = "export async function main(event) { return await adf.model_invoke({ prompt: 'take your time' }) }";

/// How many more timer lambda runs the agent must complete while its code waits.
const TICKS_WHILE_WAITING: usize = 5;

/// A daemon with an agent pointed at `mock` (with `files` and `config` on top) whose system
/// timer runs `lib/tick.ts` every 100 ms.
async fn ticking_agent(
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
    let mut sources = vec![("lib/tick.ts", TICK)];
    sources.extend_from_slice(files);
    let path = agent_file(h.dir.path(), "waiter", &sources, &all);
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
        completed_after(&h, &agent, 0, "lib/tick.ts") >= 1
    })
    .await;
    (h, agent)
}

/// `lambda.completed` events of the agent's system lambda in `path` after bus cursor `cursor`.
fn completed_after(h: &Harness, agent: &Agent, cursor: u64, path: &str) -> usize {
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

fn newest_cursor(h: &Harness) -> u64 {
    h.server
        .daemon
        .events()
        .since(0)
        .last()
        .map_or(0, |f| f.cursor)
}

/// A request that must be answered within 10 s, or the test fails.
async fn call(h: &Harness, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    tokio::time::timeout(
        Duration::from_secs(10),
        h.client.raw(method, path, body.as_ref()),
    )
    .await
    .unwrap_or_else(|_| panic!("{path} did not answer while the agent's code waited"))
    .unwrap()
}

/// While the code waits: the timer lambda completes `TICKS_WHILE_WAITING` more runs, and the
/// agent's status, config and logs are answered (each within 10 s). `still_waiting` is checked
/// after all of it, so everything above happened before the wait was released.
async fn stays_alive<F, Fut>(h: &Harness, agent: &Agent, still_waiting: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let before = newest_cursor(h);
    wait_for("the timer keeps firing while the code waits", || async {
        completed_after(h, agent, before, "lib/tick.ts") >= TICKS_WHILE_WAITING
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

/// Sends one request of its own to `mock`, which a `hold_until(2)` was waiting for: both are
/// answered from then on.
async fn release(mock: &MockProvider) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_code_a_turns_sys_code_awaiting_a_slow_server_leaves_timers_and_reads_running() {
    let slow = MockProvider::start(Wire::OpenAi).await;
    slow.push_all([Turn::text("slow page"), Turn::text("slow page")]);
    slow.hold_until(2);
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
        ticking_agent(&mock, &[], &[("security.allow_local_fetch", json!(true))]).await;
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
    let (h, agent) = ticking_agent(
        &mock,
        &[("lib/slow.ts", SLOW)],
        &[(
            "triggers.on_file_change",
            json!({ "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/slow.ts:main", "filter": { "watch": "inbox/**" } }
            ] }),
        )],
    )
    .await;
    let cursor = newest_cursor(&h);
    let (status, body) = call(
        &h,
        Method::PUT,
        &format!("/agents/{}/files/content?path=inbox%2Fgo.md", agent.id),
        Some(json!({ "content": "go" })),
    )
    .await;
    assert!(status < 300, "{status} {body}");
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
    let (h, agent) = ticking_agent(
        &mock,
        &[("lib/sleepy.ts", SLEEPY)],
        &[(
            "triggers.on_file_change",
            json!({ "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/sleepy.ts:main", "filter": { "watch": "inbox/**" } }
            ] }),
        )],
    )
    .await;
    let cursor = newest_cursor(&h);
    let (status, body) = call(
        &h,
        Method::PUT,
        &format!("/agents/{}/files/content?path=inbox%2Fnap.md", agent.id),
        Some(json!({ "content": "nap" })),
    )
    .await;
    assert!(status < 300, "{status} {body}");
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
