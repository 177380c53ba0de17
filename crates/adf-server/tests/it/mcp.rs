//! MCP in the daemon: a server declared by an agent starts on the model's first call (not at
//! load), `GET /runtime/mcp` and `GET /agents/{id}/runtime/mcp` report it, and the agent going
//! `off` releases it (STL-04).

use crate::common;

use std::sync::Arc;

use adf_server::Agent;
use adf_testkit::{MockProvider, Turn, Wire};
use common::{Harness, agent_file, chat, has_text, model_config, repo_root, wait_for};
use reqwest::Method;
use serde_json::{Value, json};

async fn running(h: &Harness, agent: &Agent) -> Value {
    h.client
        .get(&format!("/agents/{}/runtime/mcp", agent.id))
        .await
        .unwrap()["servers"][0]["running"]
        .clone()
}

/// An agent config on `mock` with adf-mcp's misbehaving test server attached as `bad` and its
/// `mcp_bad_echo` declared.
fn misbehaving_config(mock: &MockProvider) -> Vec<(&'static str, Value)> {
    let script = repo_root().join("crates/adf-mcp/tests/it/servers/misbehaving.py");
    let mut config = model_config(mock);
    config.push((
        "mcp",
        json!({"servers": [{"name": "bad", "transport": "stdio", "command": "python3", "args": [script.display().to_string()], "source": "custom"}]}),
    ));
    config.push((
        "tools",
        json!([{"name": "mcp_bad_echo", "enabled": true, "visible": true, "restricted": false,
                "mcp_tool_definition": {"description": "Echoes text.", "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}}]),
    ));
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_04_mcp_server_starts_on_first_call_and_stops_when_the_agent_goes_off() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call("mcp_bad_echo", json!({"text": "from the daemon"})),
        Turn::text("echoed"),
    ]);
    let h = Harness::start().await;
    let config = misbehaving_config(&mock);
    let path = agent_file(h.dir.path(), "mcp-user", &[], &config);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    assert_eq!(
        running(&h, &agent).await,
        json!(false),
        "loading starts no server"
    );
    let all = h.client.get("/runtime/mcp").await.unwrap();
    assert_eq!(all["servers"], json!([]));

    chat(&h, &agent, "echo something").await;
    wait_for("the reply", || async {
        has_text(&agent, "main", "echoed").await
    })
    .await;
    assert!(
        has_text(&agent, "main", "echo: from the daemon").await,
        "the tool result is in the transcript"
    );
    assert_eq!(running(&h, &agent).await, json!(true));
    let all = h.client.get("/runtime/mcp").await.unwrap();
    assert_eq!(all["servers"][0]["agentId"], json!(agent.id));
    assert_eq!(all["servers"][0]["running"], json!(true));

    h.client
        .call(
            Method::POST,
            &format!("/agents/{}/state", agent.id),
            Some(&json!({"state": "off"})),
        )
        .await
        .unwrap();
    assert_eq!(
        running(&h, &agent).await,
        json!(false),
        "off releases the MCP server"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tol_11_review_lists_a_changed_mcp_tool_and_accepting_records_its_new_hash() {
    let h = Harness::start().await;
    let definition = json!({"description": "Echoes text.", "input_schema": {"type": "object", "properties": {"loud": {"type": "boolean"}}}});
    let path = agent_file(
        h.dir.path(),
        "reviewed",
        &[],
        &[
            (
                "mcp",
                json!({"servers": [{"name": "bad", "command": "python3"}]}),
            ),
            (
                "tools",
                json!([{"name": "mcp_bad_echo", "enabled": false, "visible": true, "restricted": true,
                        "mcp_tool_hash": "0000", "mcp_tool_status": "changed", "mcp_tool_definition": definition}]),
            ),
        ],
    );
    let query = format!(
        "/agents/review?filePath={}",
        adf_server::client::encode(&path.display().to_string())
    );
    let review = h.client.get(&query).await.unwrap();
    assert_eq!(
        review["summary"]["mcpToolsToReview"],
        json!([{"name": "mcp_bad_echo", "status": "changed"}])
    );
    let accepted = h
        .client
        .call(
            Method::POST,
            "/agents/review/accept",
            Some(&json!({"filePath": path})),
        )
        .await
        .unwrap();
    assert_eq!(accepted["reviewed"], json!(true), "{accepted}");
    assert_eq!(accepted["summary"]["mcpToolsToReview"], json!([]));
    let file = adf_store::AdfFile::open(&path).unwrap();
    let config = file.config().unwrap();
    let echo = config["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "mcp_bad_echo")
        .unwrap()
        .clone();
    assert_eq!(
        echo["mcp_tool_hash"],
        json!(adf_mcp::declare::definition_hash(&definition))
    );
    assert_eq!(echo["enabled"], json!(true));
    assert!(echo.get("mcp_tool_status").is_none());
    drop(file);
    h.stop().await;
}

/// Issue 13 (b): the model turning its agent `off` (`sys_set_state`) stops its MCP servers as
/// the owner's `off` does, and says so on the event stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_04_model_sys_set_state_off_stops_the_agents_mcp_servers() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call("mcp_bad_echo", json!({"text": "before off"})),
        Turn::tool_call("sys_set_state", json!({"state": "off"})),
    ]);
    let h = Harness::start().await;
    let config = misbehaving_config(&mock);
    let path = agent_file(h.dir.path(), "mcp-off", &[], &config);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;

    chat(&h, &agent, "echo, then stop").await;
    wait_for("agent.state.changed to off", || async {
        h.server.daemon.events().since(0).iter().any(|f| {
            f.event.event_type == "agent.state.changed" && f.event.payload["state"] == "off"
        })
    })
    .await;
    assert!(
        has_text(&agent, "main", "echo: before off").await,
        "the server ran before the agent went off"
    );
    // The hub releases the servers right after publishing the event.
    wait_for("the agent's server slots are gone", || async {
        h.client.get("/runtime/mcp").await.unwrap()["servers"] == json!([])
    })
    .await;
    assert_eq!(running(&h, &agent).await, json!(false));
    h.stop().await;
}

/// Issue 13 (a): `POST /abort` during an MCP call tells the server (`notifications/cancelled`
/// with the call's id); the server process outlives the aborted turn's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_of_a_turn_in_an_mcp_call_sends_notifications_cancelled_to_the_server() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([Turn::tool_call("mcp_bad_wait", json!({}))]);
    let h = Harness::start().await;
    let script = repo_root().join("crates/adf-mcp/tests/it/servers/misbehaving.py");
    let mut config = model_config(&mock);
    config.push((
        "mcp",
        json!({"servers": [{"name": "bad", "transport": "stdio", "command": "python3", "args": [script.display().to_string()], "source": "custom"}]}),
    ));
    config.push((
        "tools",
        json!([{"name": "mcp_bad_wait", "enabled": true, "visible": true, "restricted": false,
                "mcp_tool_definition": {"description": "Answers only when cancelled.", "input_schema": {"type": "object"}}}]),
    ));
    let path = agent_file(h.dir.path(), "mcp-abort", &[], &config);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    let scratch = adf_mcp::connect::scratch_dir(&path, "bad");
    let read_json = |name: &str| -> Option<Vec<Value>> {
        let text = std::fs::read_to_string(scratch.join(name)).ok()?;
        text.lines()
            .map(|line| serde_json::from_str(line).ok())
            .collect()
    };

    chat(&h, &agent, "wait for it").await;
    wait_for("the call reached the server", || async {
        read_json("waiting.json").is_some_and(|w| w.len() == 1)
    })
    .await;
    let call_id = read_json("waiting.json").unwrap()[0]["id"].clone();
    let (code, body) = h
        .client
        .raw(
            Method::POST,
            &format!("/agents/{}/abort", agent.id),
            Some(&json!({})),
        )
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    wait_for("the server was told of the cancellation", || async {
        read_json("cancelled.jsonl").is_some_and(|c| !c.is_empty())
    })
    .await;
    let cancelled = read_json("cancelled.jsonl").unwrap();
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
    assert_eq!(cancelled[0]["requestId"], call_id);
    assert_eq!(
        cancelled[0]["reason"],
        json!("request abandoned by the caller")
    );
    assert_eq!(
        running(&h, &agent).await,
        json!(true),
        "the server lives on"
    );
    h.stop().await;
}
