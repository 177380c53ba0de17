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
    let target = json!({ "scope": "system", "lambda": format!("{lambda}:main"), "filter": { "watch": "inbox/**" } });
    agent_with_inbox_target(mock, &[(lambda, source)], target, &[], name).await
}

/// A ticking agent with `files` and `config` whose on_file_change `target` runs when a file
/// lands in `inbox/`, and one such file (`inbox/<name>`) written; returns the bus cursor from
/// before the write.
async fn agent_with_inbox_target(
    mock: &MockProvider,
    files: &[(&str, &str)],
    target: Value,
    config: &[(&str, Value)],
    name: &str,
) -> (Harness, Arc<Agent>, u64) {
    let mut all = vec![(
        "triggers.on_file_change",
        json!({ "enabled": true, "targets": [target] }),
    )];
    all.extend(config.iter().cloned());
    let (h, agent) = ticking_agent_with(mock, files, &all).await;
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

/// A fetch middleware lambda that asks the agent's model before it lets a request through.
const ASKING_MIDDLEWARE: &str = "export async function main(input) { await adf.model_invoke({ prompt: 'may I fetch?' }); return {} }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_code_fetch_middleware_awaiting_a_hung_model_leaves_timers_and_reads_running() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    // The middleware's request and the test's releasing one, then the fetch it let through.
    mock.push_all([Turn::text("yes"), Turn::text("yes"), Turn::text("the page")]);
    mock.hold_until(2);
    let fetcher = format!(
        "export async function main(event) {{ const page = await adf.sys_fetch({{ url: '{}/page' }}); return page.status }}",
        mock.base_url()
    );
    let target = json!({ "scope": "system", "lambda": "lib/fetcher.ts:main", "filter": { "watch": "inbox/**" } });
    let (h, agent, cursor) = agent_with_inbox_target(
        &mock,
        &[
            ("lib/fetcher.ts", fetcher.as_str()),
            ("lib/mw.ts", ASKING_MIDDLEWARE),
        ],
        target,
        &[
            (
                "security.fetch_middleware",
                json!([{ "lambda": "lib/mw.ts:main" }]),
            ),
            ("security.require_middleware_authorization", json!(false)),
            ("security.allow_local_fetch", json!(true)),
        ],
        "go.md",
    )
    .await;
    tokio::time::timeout(Duration::from_secs(30), mock.requests_arrived(1))
        .await
        .expect("the middleware asks the model");
    stays_alive(&h, &agent, || async {
        mock.request_count() == 1 && completed_after(&h, &agent, cursor, "lib/fetcher.ts") == 0
    })
    .await;
    release(&mock).await;
    wait_for(
        "the fetch goes through once the middleware has its answer",
        || async { completed_after(&h, &agent, cursor, "lib/fetcher.ts") == 1 },
    )
    .await;
    // The request the chain let through reached the server after the middleware's.
    assert_eq!(mock.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_code_a_lambdas_shell_curl_to_a_slow_server_leaves_timers_and_reads_running() {
    let slow = held_page_server().await;
    let mock = MockProvider::start(Wire::OpenAi).await;
    let shell = format!(
        "export async function main(event) {{ return await adf.adf_shell({{ command: 'curl -s {}/page' }}) }}",
        slow.base_url()
    );
    let target = json!({ "scope": "system", "lambda": "lib/shell.ts:main", "filter": { "watch": "inbox/**" } });
    let (h, agent, cursor) = agent_with_inbox_target(
        &mock,
        &[("lib/shell.ts", shell.as_str())],
        target,
        &[
            ("security.allow_local_fetch", json!(true)),
            ("tools.adf_shell.enabled", json!(true)),
        ],
        "go.md",
    )
    .await;
    tokio::time::timeout(Duration::from_secs(30), slow.requests_arrived(1))
        .await
        .expect("the shell's curl reaches the slow server");
    stays_alive(&h, &agent, || async {
        slow.request_count() == 1 && completed_after(&h, &agent, cursor, "lib/shell.ts") == 0
    })
    .await;
    release(&slow).await;
    wait_for("the lambda returns once the page comes", || async {
        completed_after(&h, &agent, cursor, "lib/shell.ts") == 1
    })
    .await;
}

/// Whether the agent's log has a row of `event` (one request, answered within 10 s).
async fn logged(h: &Harness, agent: &Agent, event: &str) -> bool {
    let (_, body) = call(h, Method::GET, &format!("/agents/{}/logs", agent.id), None).await;
    body["logs"]
        .as_array()
        .is_some_and(|logs| logs.iter().any(|row| row["event"] == event))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_code_a_command_triggers_shell_sleep_leaves_timers_and_reads_running() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    // The line's first command marks that it runs; its sleep (the shell's longest) outlasts
    // the checks many times over.
    let target = json!({ "scope": "system", "command": "echo started > started.txt; sleep 10", "filter": { "watch": "inbox/**" } });
    let shell = [("tools.adf_shell.enabled", json!(true))];
    let (h, agent, _cursor) = agent_with_inbox_target(&mock, &[], target, &shell, "go.md").await;
    wait_for("the line starts", || async {
        let (status, _) = call(
            &h,
            Method::GET,
            &format!("/agents/{}/files/content?path=started.txt", agent.id),
            None,
        )
        .await;
        status == 200
    })
    .await;
    stays_alive(&h, &agent, || async {
        !logged(&h, &agent, "shell_completed").await
    })
    .await;
}

/// A system lambda that waits for the model, then writes a file of its own — named to sort
/// after `watched/`, so its `file.written` comes after any the run reported for that path.
const SLOW_WRITER: &str = "export async function main(event) { await adf.model_invoke({ prompt: 'take your time' }); await adf.fs_write({ path: 'zz/done.md', content: 'done', mode: 'write' }); return 'done' }";

/// A system lambda that only has to run.
const SEES: &str = "export async function main(event) { return event.data.path }";

/// `file.written` events of `path` after `cursor`, with their sources.
fn written_sources(h: &Harness, agent: &Agent, cursor: u64, path: &str) -> Vec<String> {
    h.server
        .daemon
        .events()
        .since(cursor)
        .iter()
        .filter(|f| {
            f.event.event_type == "file.written"
                && f.event.agent_id.as_deref() == Some(agent.id.as_str())
                && f.event.payload["path"] == path
        })
        .map(|f| f.event.source.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_code_a_write_served_while_a_system_lambda_waits_is_the_writers_not_the_lambdas() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([Turn::text("Finally."), Turn::text("Finally.")]);
    mock.hold_until(2);
    let slow = json!({ "scope": "system", "lambda": "lib/slow.ts:main", "filter": { "watch": "inbox/**" } });
    let (h, agent) = ticking_agent_with(
        &mock,
        &[("lib/slow.ts", SLOW_WRITER), ("lib/sees.ts", SEES)],
        &[(
            "triggers.on_file_change",
            json!({ "enabled": true, "targets": [
                slow,
                { "scope": "system", "lambda": "lib/sees.ts:main", "filter": { "watch": "watched/**" } }
            ] }),
        )],
    )
    .await;
    let put = |path: &'static str| {
        let h = &h;
        let id = agent.id.clone();
        async move {
            let (status, body) = call(
                h,
                Method::PUT,
                &format!(
                    "/agents/{id}/files/content?path={}",
                    path.replace('/', "%2F")
                ),
                Some(json!({ "content": path })),
            )
            .await;
            assert!(status < 300, "{status} {body}");
        }
    };
    put("inbox/go.md").await;
    tokio::time::timeout(Duration::from_secs(30), mock.requests_arrived(1))
        .await
        .expect("the lambda asks the model");
    let cursor = newest_cursor(&h);
    // The owner's write is a job the waiting lambda serves (the answer comes while it waits).
    put("watched/x.md").await;
    assert_eq!(
        completed_after(&h, &agent, cursor, "lib/slow.ts"),
        0,
        "the lambda still waits: the write was served during its run"
    );
    assert_eq!(mock.request_count(), 1);
    release(&mock).await;
    wait_for("the lambda ends and reports its own write", || async {
        !written_sources(&h, &agent, cursor, "zz/done.md").is_empty()
    })
    .await;
    assert_eq!(
        written_sources(&h, &agent, cursor, "zz/done.md"),
        ["lambda:lib/slow.ts:main"]
    );
    // The owner's write is reported once, as the owner's; the lambda did not count it.
    assert_eq!(
        written_sources(&h, &agent, cursor, "watched/x.md"),
        ["system:daemon"]
    );
    // Its on_file_change target ran (deliveries of the agent wait for the lambda's).
    wait_for(
        "the owner's write reaches its on_file_change target",
        || async { completed_after(&h, &agent, cursor, "lib/sees.ts") >= 1 },
    )
    .await;
}
