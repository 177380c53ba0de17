//! The operations added for the Studio (`api::contents`, `runtime`, `network`, `identity`,
//! `attach`, `admin`, `unsupported`), each exercised against the daemon on 127.0.0.1, and the
//! coverage of the reference daemon's operations computed from both OpenAPI documents.
use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;

use adf_server::Agent;
use adf_testkit::{MockProvider, Turn, Wire};
use common::{Harness, agent_file, assert_status, provision_identity, status, wait_for};
use reqwest::Method;
use serde_json::{Value, json};

/// Reference operations another part of the daemon serves (MCP, WebSockets, the umbilical);
/// they are outside this module's list and may still answer 404 on this branch.
const OWNED_ELSEWHERE: &[&str] = &[
    "GET /runtime/mcp",
    "GET /agents/{}/runtime/mcp",
    "GET /agents/{}/mcp",
    "GET /agents/{}/runtime/ws",
    "GET /agents/{}/ws",
    "GET /agents/{}/umbilical/events",
];

/// `METHOD /path` with every `{param}` written `{}`, so both documents' names compare.
fn operations(doc: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (path, methods) in doc["paths"].as_object().unwrap() {
        let normal: String = path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "{}" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        for method in methods.as_object().unwrap().keys() {
            if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                out.insert(format!("{} {normal}", method.to_uppercase()));
            }
        }
    }
    out
}

/// Every reference operation is served (or owned by another subsystem), every documented
/// 501 answers NOT_SUPPORTED with its capability, and no listed operation falls through to the
/// router's 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_reference_operations_are_all_served_or_documented_not_supported() {
    let h = Harness::start().await;
    let path = agent_file(h.dir.path(), "cover", &[], &[]);
    let id = h.server.daemon.load(&path).await.unwrap().agent.id.clone();
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo_root().join("testdata/daemon-openapi.json")).unwrap(),
    )
    .unwrap();
    let ours_doc = h.client.get("/openapi.json").await.unwrap();
    let ours = operations(&ours_doc);
    let missing: Vec<String> = operations(&reference)
        .into_iter()
        .filter(|op| !ours.contains(op) && !OWNED_ELSEWHERE.contains(&op.as_str()))
        .collect::<Vec<_>>();
    assert!(
        missing.is_empty(),
        "reference operations not served: {missing:?}"
    );

    let mut not_supported = 0;
    for (template, methods) in ours_doc["paths"].as_object().unwrap() {
        let url = template
            .split('/')
            .map(|seg| match seg {
                "{id}" => id.clone(),
                s if s.starts_with('{') => "x".to_owned(),
                s => s.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("/");
        for (method, op) in methods.as_object().unwrap() {
            // The event stream never ends (its own tests read it); stopping would unload the
            // agent the other operations use.
            if matches!(
                template.as_str(),
                "/events" | "/agents/{id}/unload" | "/agents/{id}/stop"
            ) {
                continue;
            }
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let body = (method != Method::GET).then(|| json!({}));
            let documented_501 =
                op["responses"].get("501").is_some() && op["responses"].get("200").is_none();
            let (code, answer) = status(&h, method.clone(), &url, body).await;
            if documented_501 {
                not_supported += 1;
                assert_eq!(code, 501, "{method} {url}: {answer}");
                assert_eq!(answer["code"], "NOT_SUPPORTED", "{method} {url}");
                assert!(answer["capability"].is_string(), "{method} {url}");
            } else {
                let fell_through = code == 404
                    && answer["error"]
                        .as_str()
                        .is_some_and(|e| e.starts_with("Route "));
                assert!(!fell_through, "{method} {url} is not routed: {answer}");
            }
        }
    }
    // Each operation the table documents as not supported answers 501 (a documented path may
    // stand for several of the reference's operations).
    assert!(
        not_supported >= adf_server::openapi::UNSUPPORTED_OPERATIONS.len(),
        "only {not_supported} 501 answers for the documented not-supported operations"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_document_and_mind_round_trip_through_readme_and_mind_md() {
    let h = Harness::start().await;
    let path = agent_file(h.dir.path(), "docs", &[], &[]);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let base = format!("/agents/{}", agent.id);
    let put = h
        .client
        .call(
            Method::PUT,
            &format!("{base}/document"),
            Some(&json!({ "content": "# Doc\nbody\n" })),
        )
        .await
        .unwrap();
    assert_eq!(put["success"], true);
    let doc = h.client.get(&format!("{base}/document")).await.unwrap();
    assert_eq!(doc["content"], "# Doc\nbody\n");
    let readme = h
        .client
        .get(&format!("{base}/files/content?path=README.md"))
        .await
        .unwrap();
    assert_eq!(
        readme["content"], "# Doc\nbody\n",
        "the document is README.md"
    );

    h.client
        .call(
            Method::PUT,
            &format!("{base}/mind"),
            Some(&json!({ "content": "remember" })),
        )
        .await
        .unwrap();
    let mind = h.client.get(&format!("{base}/mind")).await.unwrap();
    assert_eq!(mind["content"], "remember");

    assert_status(
        &h,
        Method::PUT,
        &format!("{base}/mind"),
        Some(&json!({ "text": 1 })),
        400,
    )
    .await;
    let (code, _) = status(&h, Method::GET, "/agents/nope/document", None).await;
    assert_eq!(code, 404);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_files_rename_and_rename_folder_move_rows_and_refuse_protected_or_taken_names() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "mover",
        &[("notes/a.md", "A"), ("notes/b.md", "B"), ("keep.md", "K")],
        &[],
    );
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let base = format!("/agents/{}", agent.id);
    let rename = |old: &str, new: &str| json!({ "oldPath": old, "newPath": new });

    let (code, body) = status(
        &h,
        Method::POST,
        &format!("{base}/files/rename"),
        Some(rename("keep.md", "kept.md")),
    )
    .await;
    assert_eq!(
        (code, body["success"].clone()),
        (200, json!(true)),
        "{body}"
    );
    let (code, _) = status(
        &h,
        Method::POST,
        &format!("{base}/files/rename"),
        Some(rename("kept.md", "notes/a.md")),
    )
    .await;
    assert_eq!(code, 400, "a taken name");
    let (code, _) = status(
        &h,
        Method::POST,
        &format!("{base}/files/rename"),
        Some(rename("README.md", "X.md")),
    )
    .await;
    assert_eq!(code, 403, "README.md is no_delete");
    assert_status(
        &h,
        Method::POST,
        &format!("{base}/files/rename"),
        Some(&rename("gone.md", "y.md")),
        404,
    )
    .await;
    assert_status(
        &h,
        Method::POST,
        &format!("{base}/files/rename"),
        Some(&json!({ "oldPath": "kept.md" })),
        400,
    )
    .await;

    let (code, body) = status(
        &h,
        Method::POST,
        &format!("{base}/files/rename-folder"),
        Some(json!({ "oldPrefix": "notes", "newPrefix": "archive/notes" })),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["count"], 2);
    let paths = common::paths(&agent, "").await;
    assert!(paths.contains(&"kept.md".to_owned()), "{paths:?}");
    assert!(
        paths.contains(&"archive/notes/a.md".to_owned()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"archive/notes/b.md".to_owned()),
        "{paths:?}"
    );
    assert!(!paths.iter().any(|p| p.starts_with("notes/")), "{paths:?}");
    assert_status(
        &h,
        Method::POST,
        &format!("{base}/files/rename-folder"),
        Some(&json!({ "oldPrefix": "nothing-here", "newPrefix": "x" })),
        404,
    )
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_local_tables_list_page_and_drop_only_local_tables() {
    let h = Harness::start().await;
    let path = h.copy_fixture("populated-runtime.adf", "tables.adf");
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let base = format!("/agents/{}", agent.id);
    let list = h.client.get(&format!("{base}/tables")).await.unwrap();
    let orders = list["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "local_orders")
        .cloned()
        .expect("local_orders listed");
    assert_eq!(orders["row_count"], 2);
    assert!(
        list["tables"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["name"].as_str().unwrap().starts_with("local_"))
    );

    let page = h
        .client
        .get(&format!("{base}/tables/local_orders?limit=1&offset=1"))
        .await
        .unwrap();
    assert_eq!(page["columns"], json!(["id", "item", "amount"]));
    assert_eq!(page["rows"].as_array().unwrap().len(), 1);
    assert_eq!(page["rows"][0]["item"], "gadget");

    let (code, _) = status(&h, Method::GET, &format!("{base}/tables/adf_inbox"), None).await;
    assert_eq!(code, 400, "system tables are not listed here");
    let (code, _) = status(&h, Method::DELETE, &format!("{base}/tables/adf_logs"), None).await;
    assert_eq!(code, 400);
    assert_status(
        &h,
        Method::DELETE,
        &format!("{base}/tables/local_orders"),
        None,
        200,
    )
    .await;
    assert_status(
        &h,
        Method::GET,
        &format!("{base}/tables/local_orders"),
        None,
        404,
    )
    .await;
    assert_status(
        &h,
        Method::DELETE,
        &format!("{base}/tables/local_orders"),
        None,
        404,
    )
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_usage_sums_the_tokens_of_every_loop_row() {
    let h = Harness::start().await;
    let path = h.copy_fixture("populated-runtime.adf", "usage.adf");
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    // The expected sums, computed here from the stored JSON of every row.
    let (mut rows, mut input, mut output) = (0, 0, 0);
    for row in common::table_rows(&agent, "adf_loop").await {
        let Some(text) = row["tokens"].as_str() else {
            continue;
        };
        let Ok(Value::Object(tokens)) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        rows += 1;
        input += tokens.get("input").and_then(Value::as_i64).unwrap_or(0);
        output += tokens.get("output").and_then(Value::as_i64).unwrap_or(0);
    }
    let expected = vec![format!("{rows} {input} {output}")];
    let usage = h
        .client
        .get(&format!("/agents/{}/usage", agent.id))
        .await
        .unwrap();
    let ours = format!(
        "{} {} {}",
        usage["usageRows"], usage["totals"]["input"], usage["totals"]["output"]
    );
    assert_eq!(vec![ours], expected);
    assert!(
        usage["usageRows"].as_i64().unwrap() > 0,
        "the fixture has usage: {usage}"
    );
    let by_model: i64 = usage["byModel"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["rows"].as_i64().unwrap())
        .sum();
    assert_eq!(by_model, usage["usageRows"].as_i64().unwrap());

    let runtime = h.client.get("/runtime/usage").await.unwrap();
    assert_eq!(runtime["totals"]["input"], usage["totals"]["input"]);
    assert_eq!(runtime["totals"]["output"], usage["totals"]["output"]);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_inbox_and_logs_clear_delete_every_row() {
    let h = Harness::start().await;
    let path = h.copy_fixture("populated-runtime.adf", "clear.adf");
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let base = format!("/agents/{}", agent.id);
    let before = h.client.get(&format!("{base}/inbox")).await.unwrap()["messages"]
        .as_array()
        .unwrap()
        .len();
    assert!(before > 0);
    let cleared = h.client.delete(&format!("{base}/inbox")).await.unwrap();
    assert_eq!(cleared["deleted"], before);
    let after = h.client.get(&format!("{base}/inbox")).await.unwrap();
    assert_eq!(after["messages"], json!([]));

    // The fixture's overdue system timer fires a lambda that may log after the clear: every
    // row that existed before the clear must be gone, newer ones may exist (ids only grow).
    let newest_before = common::log_rows(&agent)
        .await
        .iter()
        .map(|row| row.id)
        .max()
        .unwrap_or(0);
    let cleared = h.client.delete(&format!("{base}/logs")).await.unwrap();
    assert!(cleared["deleted"].as_u64().unwrap() > 0, "{cleared}");
    let remaining = common::log_rows(&agent)
        .await
        .into_iter()
        .filter(|row| row.id <= newest_before)
        .count();
    assert_eq!(remaining, 0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_timer_update_rewrites_schedule_and_keeps_the_id() {
    let h = Harness::start().await;
    let path = agent_file(h.dir.path(), "timed", &[], &[]);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let base = format!("/agents/{}", agent.id);
    let added = h
        .client
        .post(
            &format!("{base}/timers"),
            Some(&json!({ "mode": "once_delay", "delay_ms": 600000, "payload": "first" })),
        )
        .await
        .unwrap();
    let timer = added["id"].as_i64().unwrap();
    assert_status(
        &h,
        Method::PUT,
        &format!("{base}/timers/{timer}"),
        Some(&json!({ "mode": "interval", "every_ms": 120000, "payload": "second" })),
        200,
    )
    .await;
    let timers = h.client.get(&format!("{base}/timers")).await.unwrap();
    let row = timers["timers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == timer)
        .cloned()
        .unwrap();
    assert_eq!(row["payload"], "second");
    assert_eq!(row["schedule"]["mode"], "interval");
    assert_eq!(row["schedule"]["every_ms"], 120000);
    assert_status(
        &h,
        Method::PUT,
        &format!("{base}/timers/{timer}"),
        Some(&json!({ "mode": "bogus" })),
        400,
    )
    .await;
    assert_status(
        &h,
        Method::PUT,
        &format!("{base}/timers/999"),
        Some(&json!({ "mode": "interval", "every_ms": 60000 })),
        404,
    )
    .await;
    h.stop().await;
}

/// `PUT /settings/providers` is what chat uses: an agent naming a runtime provider reaches it
/// with the runtime's key; before the provider exists, chat is refused (503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_runtime_providers_from_settings_are_used_by_chat() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push(Turn::text("from the runtime provider"));
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "runtime-provider",
        &[],
        &[
            ("model.provider", json!("shared-mock")),
            ("model.model_id", json!("mock-model")),
        ],
    );
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    let chat = format!("/agents/{}/chat", agent.id);
    let (code, body) = status(&h, Method::POST, &chat, Some(json!({ "text": "hi" }))).await;
    assert_eq!(code, 503, "no provider yet: {body}");
    assert!(
        body["error"].as_str().unwrap().contains("runtime settings"),
        "{body}"
    );

    let providers = json!([{ "id": "shared-mock", "type": "openai-compatible", "name": "Shared", "baseUrl": mock.base_url(), "apiKey": "runtime-secret-key" }]);
    h.client
        .call(
            Method::PUT,
            "/settings/providers",
            Some(&json!({ "value": providers })),
        )
        .await
        .unwrap();
    let (code, body) = status(&h, Method::POST, &chat, Some(json!({ "text": "hi" }))).await;
    assert_eq!(code, 202, "{body}");
    wait_for("the reply", || async {
        common::loop_texts(&agent)
            .await
            .iter()
            .any(|t| t.contains("from the runtime provider"))
    })
    .await;
    let request = mock.last_request().unwrap();
    assert_eq!(
        request.header("authorization"),
        Some("Bearer runtime-secret-key")
    );

    let listed = h.client.get("/runtime/providers").await.unwrap();
    assert_eq!(listed["providers"][0]["hasApiKey"], true);
    assert_eq!(listed["agentUsage"][0]["source"], "app");
    h.stop().await;
}

/// No settings read returns a provider key; writing back what was read keeps the stored key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_settings_reads_never_return_provider_keys_and_round_trips_keep_them() {
    let h = Harness::start().await;
    let providers = json!([{ "id": "p1", "type": "openai", "apiKey": "sk-do-not-show" }]);
    h.client
        .call(
            Method::PUT,
            "/settings/providers",
            Some(&json!({ "value": providers })),
        )
        .await
        .unwrap();
    for read in [
        "/settings",
        "/settings/providers",
        "/runtime/providers",
        "/runtime/auth",
        "/runtime",
    ] {
        let body = h.client.get(read).await.unwrap();
        assert!(
            !body.to_string().contains("sk-do-not-show"),
            "{read} leaks: {body}"
        );
    }
    let read = h.client.get("/settings/providers").await.unwrap();
    assert_eq!(read["value"][0]["hasApiKey"], true);
    h.client
        .call(
            Method::PUT,
            "/settings/providers",
            Some(&json!({ "value": read["value"] })),
        )
        .await
        .unwrap();
    let stored = std::fs::read_to_string(h.dir.path().join("home/settings.json")).unwrap();
    assert!(
        stored.contains("sk-do-not-show"),
        "the key survives a round trip"
    );
    assert!(!stored.contains("hasApiKey"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_runtime_reads_describe_settings_agents_and_triggers() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "diag",
        &[],
        &[(
            "triggers.on_inbox",
            json!({ "enabled": true, "targets": [{ "scope": "agent" }] }),
        )],
    );
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    h.client
        .call(
            Method::PUT,
            "/settings/trackedDirectories",
            Some(&json!({ "value": ["/tmp/x"] })),
        )
        .await
        .unwrap();
    let settings = h.client.get("/runtime/settings").await.unwrap();
    assert_eq!(settings["configured"], true);
    assert_eq!(settings["trackedDirectories"], json!(["/tmp/x"]));

    let triggers = h
        .client
        .get(&format!("/agents/{}/triggers", agent.id))
        .await
        .unwrap();
    let inbox = triggers["configured"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "on_inbox")
        .cloned()
        .unwrap();
    assert_eq!(
        (inbox["enabled"].clone(), inbox["targetCount"].clone()),
        (json!(true), json!(1))
    );
    let runtime = h
        .client
        .get(&format!("/agents/{}/runtime", agent.id))
        .await
        .unwrap();
    assert_eq!(runtime["status"]["id"], agent.id.as_str());
    assert_eq!(runtime["triggers"], triggers);

    let whole = h.client.get("/runtime").await.unwrap();
    assert_eq!(whole["agents"][0]["id"], agent.id.as_str());
    assert_eq!(whole["daemon"]["pid"], std::process::id());
    // Compute: the isolation tool scripts/setup.d installs, and the same answer on its own route.
    assert_eq!(
        whole["compute"]["isolation"], "bubblewrap",
        "{}",
        whole["compute"]
    );
    let compute = h.client.get("/compute/status").await.unwrap();
    assert_eq!(compute, whole["compute"]);
    let diagnostics = h.client.get("/diagnostics").await.unwrap();
    assert_eq!(diagnostics["agents"][0]["id"], agent.id.as_str());
    let adapters = h.client.get("/runtime/adapters").await.unwrap();
    assert_eq!(adapters["supported"], true);
    assert_eq!(
        adapters["agents"],
        json!([]),
        "no agent configures an adapter"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_network_mesh_disable_closes_the_inbound_door_and_enable_reopens_it() {
    let h = Harness::start().await;
    let path = agent_file(h.dir.path(), "meshy", &[], &[("handle", json!("meshy"))]);
    h.server.daemon.load(&path).await.unwrap();
    let mesh = h.client.get("/network/mesh").await.unwrap();
    assert_eq!(mesh["meshEnabled"], true);
    assert_eq!(mesh["agents"][0]["handle"], "meshy");

    h.client.post("/network/mesh/disable", None).await.unwrap();
    assert_eq!(
        h.client.get("/network/mesh").await.unwrap()["meshEnabled"],
        false
    );
    let (code, body) = status(&h, Method::POST, "/agents/meshy/inbox", Some(json!({}))).await;
    assert_eq!(
        (code, body["code"].clone()),
        (503, json!("MESH_DISABLED")),
        "{body}"
    );

    h.client.post("/network/mesh/enable", None).await.unwrap();
    let (code, body) = status(&h, Method::POST, "/agents/meshy/inbox", Some(json!({}))).await;
    assert_ne!(code, 503, "the door is open again: {body}");

    for path in ["/runtime/network", "/network"] {
        let network = h.client.get(path).await.unwrap();
        assert_eq!(
            network["mesh"]["status"]["agents"][0]["handle"], "meshy",
            "{path}"
        );
        assert_eq!(network["agents"][0]["handle"], "meshy", "{path}");
    }
    let server = h.client.get("/network/server").await.unwrap();
    assert_eq!(
        server["url"].as_str(),
        h.server.daemon.mesh().base_url(),
        "{server}"
    );
    assert_eq!(
        server["running"],
        h.server.daemon.mesh().base_url().is_some()
    );
    let adapters = h.client.get("/agents/meshy/adapters").await.unwrap();
    assert_eq!(
        (
            adapters["configured"].clone(),
            adapters["supported"].clone()
        ),
        (json!([]), json!(true))
    );

    let runtimes = h
        .client
        .get("/network/mesh/discovered-runtimes")
        .await
        .unwrap();
    assert_eq!(runtimes["runtimes"], json!([]));
    let tools = h
        .client
        .get("/network/mesh/recent-tools?limit=5")
        .await
        .unwrap();
    assert!(tools["tools"].is_object());
    let (code, _) = status(&h, Method::GET, "/network/mesh/recent-tools?limit=0", None).await;
    assert_eq!(code, 400);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_recent_tools_lists_the_tool_calls_of_the_transcript() {
    let h = Harness::start().await;
    let path = h.copy_fixture("populated-runtime.adf", "tools.adf");
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let mut names = Vec::new();
    for text in common::loop_texts_in(&agent, "main").await {
        let content: Value = serde_json::from_str(&text).unwrap();
        let blocks: Vec<&Value> = match &content {
            Value::Array(blocks) => blocks.iter().collect(),
            Value::Object(members) => members.values().collect(),
            other => vec![other],
        };
        for block in blocks {
            if block["type"] == "tool_use" {
                names.push(block["name"].as_str().unwrap().to_owned());
            }
        }
    }
    let tools = h
        .client
        .get("/network/mesh/recent-tools?limit=50")
        .await
        .unwrap();
    let listed: Vec<String> = tools["tools"][agent.file_path()]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(listed, names);
    h.stop().await;
}

/// IDN-28 over HTTP: credentials are sealed, listed by purpose and never returned; the password
/// slot can be set and used to unlock; re-keying moves the DID; a reset empties it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idn_28_identity_and_credentials_over_http_never_return_a_value() {
    let h = Harness::start().await;
    let path = agent_file(h.dir.path(), "ident", &[], &[]);
    provision_identity(&h, &path);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let base = format!("/agents/{}", agent.id);
    let secret = "very-secret-value-123";

    assert_status(
        &h,
        Method::PUT,
        &format!("{base}/identity/app:token"),
        Some(&json!({ "value": secret })),
        200,
    )
    .await;
    assert_status(
        &h,
        Method::PUT,
        &format!("{base}/providers/openai/credential"),
        Some(&json!({ "value": secret })),
        200,
    )
    .await;
    let (code, body) = status(
        &h,
        Method::PUT,
        &format!("{base}/identity/crypto:mine"),
        Some(json!({ "value": "x" })),
    )
    .await;
    assert_eq!(code, 400, "crypto:* is the runtime's: {body}");

    let purposes = h.client.get(&format!("{base}/identity")).await.unwrap();
    let names: Vec<&str> = purposes["purposes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"app:token") && names.contains(&"provider:openai:apiKey"),
        "{names:?}"
    );
    for read in [
        format!("{base}/identities"),
        format!("{base}/identity/entries"),
        format!("{base}/providers/openai/credentials"),
        format!("{base}/identity/password"),
    ] {
        let body = h.client.get(&read).await.unwrap();
        assert!(!body.to_string().contains(secret), "{read} leaks: {body}");
    }
    let credentials = h
        .client
        .get(&format!("{base}/providers/openai/credentials"))
        .await
        .unwrap();
    assert_eq!(credentials["credentials"]["apiKey"]["set"], true);
    let (code, body) = status(&h, Method::GET, &format!("{base}/identity/app:token"), None).await;
    assert_eq!(
        (code, body["code"].clone()),
        (403, json!("SECRET_NOT_EXPORTED"))
    );

    assert_status(
        &h,
        Method::PATCH,
        &format!("{base}/identity/app:token/code-access"),
        Some(&json!({ "code_access": true })),
        200,
    )
    .await;
    let entries = h.client.get(&format!("{base}/identities")).await.unwrap();
    let token = entries["identities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["purpose"] == "app:token")
        .cloned()
        .unwrap();
    assert_eq!(token["code_access"], true);

    let before = h
        .client
        .get(&format!("{base}/identity/password"))
        .await
        .unwrap();
    assert_eq!(
        (before["needsPassword"].clone(), before["unlocked"].clone()),
        (json!(false), json!(true))
    );
    assert_status(
        &h,
        Method::PUT,
        &format!("{base}/identity/password"),
        Some(&json!({ "password": "share-pass" })),
        200,
    )
    .await;
    assert_eq!(
        h.client
            .get(&format!("{base}/identity/password"))
            .await
            .unwrap()["needsPassword"],
        true
    );
    let (code, body) = status(
        &h,
        Method::POST,
        &format!("{base}/identity/password/unlock"),
        Some(json!({ "password": "wrong" })),
    )
    .await;
    assert_eq!(
        (code, body["code"].clone()),
        (400, json!("WRONG_PASSWORD")),
        "{body}"
    );
    assert_status(
        &h,
        Method::POST,
        &format!("{base}/identity/password/unlock"),
        Some(&json!({ "password": "share-pass" })),
        200,
    )
    .await;

    assert_status(
        &h,
        Method::POST,
        &format!("{base}/identity/password/change"),
        Some(&json!({ "newPassword": "second-pass" })),
        200,
    )
    .await;
    let (code, _) = status(
        &h,
        Method::POST,
        &format!("{base}/identity/password/unlock"),
        Some(json!({ "password": "share-pass" })),
    )
    .await;
    assert_eq!(code, 400, "the old password no longer opens it");
    assert_status(
        &h,
        Method::POST,
        &format!("{base}/identity/password/unlock"),
        Some(&json!({ "password": "second-pass" })),
        200,
    )
    .await;

    for (path, name_key, name) in [
        ("mcp/credentials", "npmPackage", "@x/files"),
        ("adapters/credentials", "adapterType", "telegram"),
    ] {
        let put = json!({ name_key: name, "envKey": "TOKEN", "value": secret });
        let (code, body) = status(&h, Method::PUT, &format!("{base}/{path}"), Some(put)).await;
        assert_eq!(code, 200, "{path}: {body}");
        let listed = h
            .client
            .get(&format!(
                "{base}/{path}?{name_key}={}",
                adf_server::client::encode(name)
            ))
            .await
            .unwrap();
        assert_eq!(
            listed["credentials"]["TOKEN"]["set"], true,
            "{path}: {listed}"
        );
        assert!(!listed.to_string().contains(secret), "{path} leaks");
        let (code, _) = status(&h, Method::GET, &format!("{base}/{path}"), None).await;
        assert_eq!(code, 400, "{path} needs {name_key}");
    }

    let did = h.client.get(&format!("{base}/identity/did")).await.unwrap()["did"].clone();
    assert!(did.as_str().unwrap().starts_with("did:key:"));
    let rotated = h
        .client
        .post(&format!("{base}/identity/generate-keys"), None)
        .await
        .unwrap();
    assert_ne!(rotated["did"], did);
    assert_eq!(
        h.client.get(&format!("{base}/identity/did")).await.unwrap()["did"],
        rotated["did"]
    );

    let deleted = h
        .client
        .delete(&format!("{base}/identity-prefix?prefix=provider:openai:"))
        .await
        .unwrap();
    assert_eq!(deleted["deleted"], 1);
    assert_status(
        &h,
        Method::DELETE,
        &format!("{base}/identity/app:token"),
        None,
        200,
    )
    .await;
    assert_status(
        &h,
        Method::DELETE,
        &format!("{base}/identity/app:token"),
        None,
        404,
    )
    .await;

    h.client
        .post(&format!("{base}/identity/wipe"), None)
        .await
        .unwrap();
    assert_eq!(
        h.client.get(&format!("{base}/identity/did")).await.unwrap()["did"],
        Value::Null
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_providers_and_mcp_servers_attach_and_detach_through_the_config() {
    let h = Harness::start().await;
    let path = agent_file(h.dir.path(), "attach", &[], &[]);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let base = format!("/agents/{}", agent.id);
    let provider =
        json!({ "id": "local", "type": "openai-compatible", "baseUrl": "http://127.0.0.1:9/v1" });
    let first = h
        .client
        .post(&format!("{base}/providers"), Some(&provider))
        .await
        .unwrap();
    assert_eq!(first["alreadyAttached"], false);
    let again = h
        .client
        .post(
            &format!("{base}/providers"),
            Some(&json!({ "id": "local", "type": "openai-compatible", "defaultModel": "m" })),
        )
        .await
        .unwrap();
    assert_eq!(again["alreadyAttached"], true);
    let config = h.client.get(&format!("{base}/config")).await.unwrap()["config"].clone();
    let entries = config["providers"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["defaultModel"], "m");
    assert_eq!(entries[0]["baseUrl"], "http://127.0.0.1:9/v1");
    let (code, _) = status(
        &h,
        Method::POST,
        &format!("{base}/providers"),
        Some(json!({ "id": "k", "type": "openai", "apiKey": "x" })),
    )
    .await;
    assert_eq!(code, 400, "keys never go into the config");
    assert_status(
        &h,
        Method::POST,
        &format!("{base}/providers"),
        Some(&json!({ "id": "bad", "type": "carrier-pigeon" })),
        400,
    )
    .await;
    h.client
        .delete(&format!("{base}/providers/local"))
        .await
        .unwrap();
    let config = h.client.get(&format!("{base}/config")).await.unwrap()["config"].clone();
    assert_eq!(config["providers"], json!([]));

    let server = json!({ "name": "files", "transport": "stdio", "command": "npx", "args": ["x"] });
    let attached = h
        .client
        .post(&format!("{base}/mcp/servers"), Some(&server))
        .await
        .unwrap();
    assert_eq!(attached["alreadyAttached"], false);
    let config = h.client.get(&format!("{base}/config")).await.unwrap()["config"].clone();
    assert_eq!(config["mcp"]["servers"][0]["name"], "files");
    h.client
        .delete(&format!("{base}/mcp/servers/files"))
        .await
        .unwrap();
    let config = h.client.get(&format!("{base}/config")).await.unwrap()["config"].clone();
    assert_eq!(config["mcp"]["servers"], json!([]));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_admin_listings_show_registered_packages_without_secrets() {
    let h = Harness::start().await;
    h.client
        .call(
            Method::PUT,
            "/settings/mcpServers",
            Some(&json!({ "value": [{ "name": "files", "npmPackage": "@x/files", "env": { "TOKEN": "hidden-token" } }] })),
        )
        .await
        .unwrap();
    let listed = h.client.get("/admin/mcp/packages").await.unwrap();
    assert_eq!(listed["packages"][0]["name"], "files");
    assert_eq!(listed["packages"][0]["envKeys"], json!(["TOKEN"]));
    assert!(!listed.to_string().contains("hidden-token"));
    assert_eq!(listed["installsSupported"], false);
    let settings = h.client.get("/settings/mcpServers").await.unwrap();
    assert!(!settings.to_string().contains("hidden-token"), "{settings}");
    // Written back as read, the stored env survives.
    h.client
        .call(
            Method::PUT,
            "/settings/mcpServers",
            Some(&json!({ "value": settings["value"] })),
        )
        .await
        .unwrap();
    let stored = std::fs::read_to_string(h.dir.path().join("home/settings.json")).unwrap();
    assert!(
        stored.contains("hidden-token") && !stored.contains("envKeys"),
        "{stored}"
    );
    for path in ["/admin/adapters/packages", "/admin/sandbox/packages"] {
        let body = h.client.get(path).await.unwrap();
        assert_eq!(body["packages"], json!([]), "{path}");
        let (code, body) = status(&h, Method::POST, path, Some(json!({ "package": "x" }))).await;
        assert_eq!(
            (code, body["code"].clone()),
            (501, json!("NOT_SUPPORTED")),
            "{path}"
        );
    }
    h.stop().await;
}
