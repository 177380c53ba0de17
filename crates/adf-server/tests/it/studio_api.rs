//! The Studio's own routes over HTTP on 127.0.0.1: the fleet page (paging, filter, row
//! fields), creating an agent, downloading its file, and the live feed of a turn (streamed
//! text, tool calls and results) against the testkit's scripted model.
use crate::common;

use std::time::Duration;

use adf_store::AdfFile;
use adf_testkit::{MockProvider, Turn, Wire};
use common::{Harness, agent_file, chat, model_config};
use futures::StreamExt as _;
use reqwest::Method;
use serde_json::{Value, json};

async fn fleet(h: &Harness, query: &str) -> Value {
    h.client
        .get(&format!("/studio/api/fleet{query}"))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_fleet_pages_filters_and_fills_each_row() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    let h = Harness::start().await;
    let dir = h.dir.path();
    let mut with_model = model_config(&mock);
    with_model.push(("handle", json!("beta")));
    for (name, config) in [
        ("alpha", vec![("handle", json!("alpha"))]),
        ("beta", with_model),
        ("gamma", vec![("handle", json!("gamma"))]),
    ] {
        let path = agent_file(dir, name, &[], &config);
        h.server.daemon.load(&path).await.unwrap();
    }
    let first = fleet(&h, "?limit=2").await;
    assert_eq!(first["total"], 3);
    assert_eq!(first["offset"], 0);
    let handles: Vec<&str> = first["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["handle"].as_str().unwrap())
        .collect();
    assert_eq!(handles, ["alpha", "beta"], "load order");
    let second = fleet(&h, "?limit=2&offset=2").await;
    assert_eq!(second["agents"].as_array().unwrap().len(), 1);
    assert_eq!(second["agents"][0]["handle"], "gamma");

    let beta = fleet(&h, "?q=BET").await;
    assert_eq!(beta["total"], 1, "the filter ignores case");
    let row = &beta["agents"][0];
    assert_eq!(row["model"], "mock-model");
    assert_eq!(row["provider"], "mock");
    assert_eq!(row["state"], "active");
    assert_eq!(row["runtimeState"], "idle");
    assert_eq!(row["pendingApprovals"], 0);
    assert_eq!(row["pendingAsks"], 0);
    assert_eq!(row["unreadInbox"], 0);
    assert_eq!(row["busy"], false);

    crate::common::assert_status(&h, Method::GET, "/studio/api/fleet?limit=many", None, 400).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_create_makes_a_loaded_agent_with_an_identity_and_refuses_clashes() {
    let h = Harness::start().await;
    let (status, body) = h
        .client
        .raw(
            Method::POST,
            "/studio/api/agents",
            Some(&json!({ "name": "Fresh One", "description": "new" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 201, "{body}");
    let path = h.dir.path().join("home/agents/fresh-one.adf");
    assert_eq!(
        body["filePath"],
        path.canonicalize().unwrap().display().to_string()
    );
    let agent = h.server.daemon.agent(body["id"].as_str().unwrap()).unwrap();
    assert_eq!(agent.info().name, "Fresh One");
    let did = agent
        .job(|file| Ok(file.meta_get("adf_did")?.map(|m| m.value)))
        .await
        .unwrap();
    assert!(
        did.is_some_and(|d| d.starts_with("did:key:")),
        "provisioned"
    );

    let (status, again) = h
        .client
        .raw(
            Method::POST,
            "/studio/api/agents",
            Some(&json!({ "name": "fresh one" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 409, "{again}");
    for bad in [json!({}), json!({ "name": "" }), json!({ "name": "../.." })] {
        let (status, _) = h
            .client
            .raw(Method::POST, "/studio/api/agents", Some(&bad))
            .await
            .unwrap();
        assert_eq!(status, 400, "{bad}");
    }
    assert_eq!(h.server.daemon.agents().len(), 1);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_download_is_a_whole_copy_of_the_agent_file() {
    let h = Harness::start().await;
    let path = agent_file(h.dir.path(), "keeper", &[("notes/a.md", "kept")], &[]);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let http = adf_egress::service_client(adf_egress::ClientOptions::default()).unwrap();
    let response = http
        .get(format!(
            "{}/studio/api/agents/{}/download",
            h.server.url(),
            agent.id
        ))
        .bearer_auth(&h.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let disposition = response.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(disposition, "attachment; filename=\"keeper.adf\"");
    let bytes = response.bytes().await.unwrap();
    let copy = h.dir.path().join("copy.adf");
    std::fs::write(&copy, &bytes).unwrap();
    let file = AdfFile::inspect(&copy).unwrap();
    assert_eq!(file.config().unwrap()["id"], agent.id.as_str());
    let stored = file.file_read("notes/a.md").unwrap().unwrap();
    assert_eq!(stored.content, b"kept");
    drop(file);

    crate::common::assert_status(
        &h,
        Method::GET,
        "/studio/api/agents/nobody/download",
        None,
        404,
    )
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_live_feed_streams_a_turns_text_and_tool_calls() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    let reply = "Streaming, three characters at a time.";
    mock.push_all([
        Turn::tool_call("sys_get_meta", json!({ "key": "adf_name" })),
        Turn::text(reply).with_chunk_chars(3),
    ]);
    let h = Harness::start().await;
    let path = agent_file(h.dir.path(), "streamer", &[], &model_config(&mock));
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let frames = h
        .client
        .events(&format!("/studio/api/agents/{}/live", agent.id))
        .await
        .unwrap();
    chat(&h, &agent, "go").await;
    let mut frames = Box::pin(frames);
    let mut seen: Vec<Value> = Vec::new();
    let mut text = String::new();
    let collected = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(frame) = frames.next().await {
            let frame: Value = serde_json::from_str(&frame.unwrap()).unwrap();
            if frame["kind"] == "text" {
                text.push_str(frame["text"].as_str().unwrap());
            }
            let done = frame["kind"] == "state" && frame["state"] == "Idle" && !text.is_empty();
            seen.push(frame);
            if done {
                break;
            }
        }
    })
    .await;
    assert!(collected.is_ok(), "the turn's frames arrived: {seen:?}");
    assert_eq!(text, reply);
    let deltas = seen.iter().filter(|f| f["kind"] == "text").count();
    assert!(deltas > 1, "the reply came in pieces: {deltas}");
    assert!(seen.iter().all(|f| f["t"].is_i64() && f["loop"] == "main"));
    let call = seen.iter().find(|f| f["kind"] == "tool_call").unwrap();
    assert_eq!(call["name"], "sys_get_meta");
    assert_eq!(call["input"], json!({ "key": "adf_name" }));
    let result = seen.iter().find(|f| f["kind"] == "tool_result").unwrap();
    assert_eq!(result["id"], call["id"]);
    assert!(
        seen.iter()
            .any(|f| f["kind"] == "reply" && f["usage"].is_object())
    );

    let missing = h.client.events("/studio/api/agents/nobody/live").await;
    assert!(matches!(
        missing,
        Err(adf_server::client::ClientError::Http { status: 404, .. })
    ));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_fork_copies_the_agent_into_a_new_file_with_its_own_identity() {
    let h = Harness::start().await;
    let (status, made) = h
        .client
        .raw(
            Method::POST,
            "/studio/api/agents",
            Some(&json!({ "name": "Origin" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 201, "{made}");
    let parent = made["id"].as_str().unwrap().to_owned();
    let (status, _) = h
        .client
        .raw(
            Method::PUT,
            &format!("/agents/{parent}/files/content?path=notes/state.md"),
            Some(&json!({ "content": "mid-task" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    let (status, _) = h
        .client
        .raw(
            Method::PUT,
            &format!("/agents/{parent}/identity/mcp:probe:TOKEN"),
            Some(&json!({ "value": "parent-only" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);

    let (status, fork) = h
        .client
        .raw(
            Method::POST,
            &format!("/studio/api/agents/{parent}/fork"),
            Some(&json!({ "name": "Origin Copy" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 201, "{fork}");
    let id = fork["id"].as_str().unwrap();
    assert_ne!(id, parent);
    assert_eq!(fork["handle"], "origin-copy");
    assert_eq!(fork["parentId"], parent);
    assert!(
        fork["filePath"]
            .as_str()
            .unwrap()
            .ends_with("origin-copy.adf")
    );
    let file = h
        .client
        .get(&format!("/agents/{id}/files/content?path=notes/state.md"))
        .await
        .unwrap();
    assert_eq!(file["content"], "mid-task");
    let (parent_did, fork_did) = (
        crate::common::did_of(&h, &parent).await,
        crate::common::did_of(&h, id).await,
    );
    assert!(fork_did.starts_with("did:key:"), "{fork_did}");
    assert_ne!(parent_did, fork_did);
    assert_eq!(fork["did"], fork_did);
    let purposes = h
        .client
        .get(&format!("/agents/{id}/identities"))
        .await
        .unwrap();
    assert!(
        !purposes["identities"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["purpose"] == "mcp:probe:TOKEN"),
        "credentials stay with the parent"
    );

    // The same name again: refused, the existing copy untouched.
    let (status, again) = h
        .client
        .raw(
            Method::POST,
            &format!("/studio/api/agents/{parent}/fork"),
            Some(&json!({ "name": "origin copy" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 409, "{again}");
    assert_eq!(h.server.daemon.agents().len(), 2);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_provider_test_sends_one_tiny_request_and_reports_the_providers_error() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push(Turn::text("OK"));
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let h = Harness::start().await;
    let (status, _) = h
        .client
        .raw(
            Method::PUT,
            "/settings/providers",
            Some(&json!({ "value": [
                { "id": "loop-mock", "type": "openai-compatible", "baseUrl": mock.base_url(),
                  "defaultModel": "mock-model", "apiKey": "sk-test-hidden" },
                { "id": "loop-closed", "type": "openai-compatible",
                  "baseUrl": format!("http://127.0.0.1:{closed_port}/v1"), "defaultModel": "m" },
            ] })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);

    let (status, ok) = h
        .client
        .raw(Method::POST, "/runtime/providers/loop-mock/test", None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{ok}");
    assert_eq!(ok["ok"], true, "{ok}");
    assert_eq!(ok["reply"], "OK");
    assert_eq!(ok["model"], "mock-model");
    assert!(!ok.to_string().contains("sk-test-hidden"));
    let sent = mock.last_request().unwrap();
    let sent = serde_json::to_string(&sent.body).unwrap();
    assert!(sent.contains("mock-model") && sent.contains("OK"), "{sent}");
    assert_eq!(mock.requests().len(), 1, "one request, no retries");

    let (status, failed) = h
        .client
        .raw(Method::POST, "/runtime/providers/loop-closed/test", None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{failed}");
    assert_eq!(failed["ok"], false);
    assert!(
        failed["error"].as_str().unwrap().contains("loop-closed"),
        "{failed}"
    );

    let (status, missing) = h
        .client
        .raw(Method::POST, "/runtime/providers/nobody/test", None)
        .await
        .unwrap();
    assert_eq!(status, 404, "{missing}");
    h.stop().await;
}
