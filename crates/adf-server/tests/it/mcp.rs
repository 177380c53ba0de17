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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_04_mcp_server_starts_on_first_call_and_stops_when_the_agent_goes_off() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call("mcp_bad_echo", json!({"text": "from the daemon"})),
        Turn::text("echoed"),
    ]);
    let h = Harness::start().await;
    let script = repo_root().join("crates/adf-mcp/tests/it/servers/misbehaving.py");
    let mut config = model_config(&mock);
    config.push((
        "mcp",
        json!({"servers": [{"name": "bad", "transport": "stdio", "command": "python3", "args": [script.display().to_string()], "source": "custom"}]}),
    ));
    config.push((
        "tools",
        json!([{"name": "mcp_bad_echo", "enabled": true, "visible": true, "restricted": false,
                "mcp_tool_definition": {"description": "Echoes text.", "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}}]),
    ));
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
