//! The operations that answered 501 before: removing the credentials envelope's password
//! slot, a provider's model list (fetched from the vendor, here the mock vendor on 127.0.0.1)
//! and token counting (the runtime's estimate, said to be one).
use crate::common;

use adf_testkit::{MockProvider, Wire};
use common::{Harness, agent_file, assert_status, provision_identity, status};
use reqwest::Method;
use serde_json::{Value, json};

/// The credentials envelope's slots, as stored (`crypto:envelope:credentials`).
async fn credential_slot_kinds(h: &Harness, id: &str) -> Vec<String> {
    let agent = h.server.daemon.agent(id).unwrap();
    agent
        .job(|file| {
            let rows = file.identity_rows()?;
            let row = rows
                .iter()
                .find(|r| r.purpose == "crypto:envelope:credentials")
                .unwrap();
            let descriptor: Value = serde_json::from_slice(&row.value).unwrap();
            Ok(descriptor["slots"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["type"].as_str().unwrap().to_owned())
                .collect())
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idn_15_delete_identity_password_removes_the_password_slot_and_keeps_the_key_slots() {
    let h = Harness::start().await;
    let path = agent_file(h.dir.path(), "pw", &[], &[]);
    provision_identity(&h, &path);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let base = format!("/agents/{}", agent.id);
    assert_status(
        &h,
        Method::PUT,
        &format!("{base}/identity/app:token"),
        Some(&json!({ "value": "kept-secret" })),
        200,
    )
    .await;

    // Nothing to remove yet: success, removed false, nothing written.
    let (code, body) = status(
        &h,
        Method::DELETE,
        &format!("{base}/identity/password"),
        None,
    )
    .await;
    assert_eq!(
        (code, body["removed"].clone()),
        (200, json!(false)),
        "{body}"
    );

    assert_status(
        &h,
        Method::PUT,
        &format!("{base}/identity/password"),
        Some(&json!({ "password": "share-pass" })),
        200,
    )
    .await;
    let kinds = credential_slot_kinds(&h, &agent.id).await;
    assert!(kinds.iter().any(|k| k == "password"), "{kinds:?}");

    let (code, body) = status(
        &h,
        Method::DELETE,
        &format!("{base}/identity/password"),
        None,
    )
    .await;
    assert_eq!(
        (code, body["success"].clone(), body["removed"].clone()),
        (200, json!(true), json!(true)),
        "{body}"
    );
    let status_now = h
        .client
        .get(&format!("{base}/identity/password"))
        .await
        .unwrap();
    assert_eq!(status_now["needsPassword"], json!(false), "{status_now}");
    let kinds = credential_slot_kinds(&h, &agent.id).await;
    assert!(
        !kinds.is_empty() && kinds.iter().all(|k| k != "password"),
        "{kinds:?}"
    );
    // The password no longer opens anything; the credential is still readable here.
    assert_status(
        &h,
        Method::POST,
        &format!("{base}/identity/password/unlock"),
        Some(&json!({ "password": "share-pass" })),
        400,
    )
    .await;
    let listed = h
        .client
        .get(&format!("{base}/identity"))
        .await
        .unwrap()
        .to_string();
    assert!(listed.contains("app:token"), "{listed}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_runtime_models_lists_the_vendors_models_with_the_runtime_key() {
    let openai = MockProvider::start(Wire::OpenAi).await;
    openai
        .serve_models(["gpt-mock-1", "gpt-mock-2"])
        .require_api_key("sk-openai-key");
    let anthropic = MockProvider::start(Wire::Anthropic).await;
    anthropic
        .serve_models(["claude-mock"])
        .require_api_key("sk-ant-key");
    let h = Harness::start().await;
    let providers = json!([
        { "id": "local", "type": "openai-compatible", "baseUrl": openai.base_url(), "apiKey": "sk-openai-key" },
        { "id": "ant", "type": "anthropic", "baseUrl": anthropic.base_url(), "apiKey": "sk-ant-key" },
        { "id": "badkey", "type": "openai-compatible", "baseUrl": openai.base_url(), "apiKey": "wrong" },
    ]);
    assert_status(
        &h,
        Method::PUT,
        "/settings/providers",
        Some(&json!({ "value": providers })),
        200,
    )
    .await;

    let listed = h
        .client
        .get("/runtime/models?provider=local")
        .await
        .unwrap();
    assert_eq!(
        listed,
        json!({ "provider": "local", "models": ["gpt-mock-1", "gpt-mock-2"] })
    );
    let request = openai.last_request().unwrap();
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("GET", "/v1/models")
    );
    assert_eq!(
        request.header("authorization"),
        Some("Bearer sk-openai-key")
    );

    let listed = h.client.get("/runtime/models?provider=ant").await.unwrap();
    assert_eq!(listed["models"], json!(["claude-mock"]), "{listed}");
    let request = anthropic.last_request().unwrap();
    assert_eq!(request.header("x-api-key"), Some("sk-ant-key"));
    assert!(request.header("anthropic-version").is_some());

    // The vendor's refusal is the answer's error, never the key.
    let refused = h
        .client
        .get("/runtime/models?provider=badkey")
        .await
        .unwrap();
    assert_eq!(refused["models"], json!([]));
    let error = refused["error"].as_str().unwrap();
    assert!(!error.is_empty() && !error.contains("wrong"), "{error}");
    let unknown = h
        .client
        .get("/runtime/models?provider=nowhere")
        .await
        .unwrap();
    assert!(
        unknown["error"].as_str().unwrap().contains("not found"),
        "{unknown}"
    );
    let (code, _) = status(&h, Method::GET, "/runtime/models", None).await;
    assert_eq!(code, 400);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_token_count_is_the_runtimes_estimate_and_says_so() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "counted",
        &[],
        &[
            ("model.provider", json!("anthropic")),
            ("model.model_id", json!("claude-x")),
        ],
    );
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    // 9 bytes → 3 tokens; "é" is 2 bytes → 1; "" → 0.
    let (code, one) = status(
        &h,
        Method::POST,
        "/runtime/token-count",
        Some(json!({ "text": "abcdefghi", "provider": "openai", "model": "gpt-x" })),
    )
    .await;
    assert_eq!(code, 200, "{one}");
    assert_eq!(
        (
            one["count"].clone(),
            one["provider"].clone(),
            one["model"].clone(),
            one["estimated"].clone()
        ),
        (json!(3), json!("openai"), json!("gpt-x"), json!(true))
    );
    assert!(one["method"].as_str().unwrap().contains("estimate"));
    let (code, batch) = status(
        &h,
        Method::POST,
        "/runtime/token-count/batch",
        Some(json!({ "texts": ["abcdefghi", "é", ""], "agentId": agent.id })),
    )
    .await;
    assert_eq!(code, 200, "{batch}");
    assert_eq!(batch["counts"], json!([3, 1, 0]));
    assert_eq!(
        (batch["provider"].clone(), batch["model"].clone()),
        (json!("anthropic"), json!("claude-x")),
        "the agent's model when the body names none"
    );
    for (path, body) in [
        ("/runtime/token-count", json!({})),
        ("/runtime/token-count/batch", json!({ "texts": ["a", 1] })),
    ] {
        let (code, answer) = status(&h, Method::POST, path, Some(body)).await;
        assert_eq!(code, 400, "{path}: {answer}");
    }
    h.stop().await;
}
