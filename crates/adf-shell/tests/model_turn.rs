//! `adf_shell` on the model path: a scripted model (adf-testkit's mock provider over real
//! HTTP) greps, transforms with jq and writes a file in one call; protection holds inside its
//! pipeline; and the first request of a default agent shrinks when the shell absorbs the tools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use adf_providers::{ApiKey, Resolver};
use adf_runtime::executor::{Executor, RetryLog, Trigger, TurnHost};
use adf_runtime::tools::{ApprovalRequest, Approver, Decision, ToolError};
use adf_store::{AdfFile, ConfigAction};
use adf_testkit::{MockProvider, Turn, Wire};
use serde_json::{Value, json};

const KEY: &str = "sk-test-0123456789";

fn set(file: &mut AdfFile, path: &str, value: Value) {
    file.config_set_path(adf_store::Caller::Owner, path, ConfigAction::Set, value)
        .unwrap();
}

fn wire_up(file: &mut AdfFile, mock: &MockProvider) {
    set(
        file,
        "providers",
        json!([{"id": "mock", "type": "anthropic", "name": "Mock", "baseUrl": mock.base_url()}]),
    );
    set(file, "model.provider", json!("mock"));
    set(file, "model.model_id", json!("test-model"));
}

fn executor(file: &AdfFile) -> Executor {
    let retries = RetryLog::default();
    let resolved = Resolver::new()
        .with_env(|_| None)
        .with_retry_observer(retries.observer())
        .resolve(&file.config().unwrap(), Some(ApiKey::new(KEY)))
        .unwrap();
    Executor::from_resolved(resolved, retries).with_registry(Arc::new(common::registry()))
}

/// Denies every approval and counts the requests.
#[derive(Default)]
struct Owner {
    asked: std::sync::Mutex<Vec<String>>,
}

impl Approver for Owner {
    fn decide(&self, _: &mut AdfFile, request: &ApprovalRequest) -> Result<Decision, ToolError> {
        self.asked.lock().unwrap().push(request.tool.clone());
        Ok(Decision::Denied("not this file".into()))
    }
}

impl TurnHost for Owner {
    fn approver(&self) -> &dyn Approver {
        self
    }
    fn answer(&self, _: &str) -> Option<String> {
        None
    }
}

/// The runtime's estimate: one token per four characters of the request body.
fn tokens(body: &Value) -> usize {
    body.to_string().chars().count().div_ceil(4)
}

async fn first_request(shell: bool) -> (usize, Vec<String>) {
    let mock = MockProvider::start(Wire::Anthropic).await;
    mock.require_api_key(KEY);
    mock.push(Turn::text("ok"));
    let dir = tempfile::tempdir().unwrap();
    let mut file = AdfFile::create(
        dir.path().join("a.adf"),
        &adf_store::CreateOptions::default(),
    )
    .unwrap();
    wire_up(&mut file, &mock);
    if shell {
        set(&mut file, "tools.adf_shell.enabled", json!(true));
        set(&mut file, "tools.adf_shell.visible", json!(true));
    }
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    ex.run_turn(
        &mut file,
        &mut session,
        Trigger::Owner("hello".into()),
        &Owner::default(),
    )
    .await
    .unwrap();
    let body = mock.requests()[0].body.clone();
    let names = body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["name"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default();
    (tokens(&body), names)
}

#[tokio::test(flavor = "multi_thread")]
async fn tol_52_prm_35_shell_first_request_fits_a_4k_context() {
    let (before, tools_before) = first_request(false).await;
    let (after, tools_after) = first_request(true).await;
    eprintln!(
        "first request: {before} tokens without adf_shell ({} tools), {after} with ({} tools)",
        tools_before.len(),
        tools_after.len()
    );
    assert!(
        tools_after.contains(&"adf_shell".to_owned()),
        "{tools_after:?}"
    );
    assert!(
        !tools_after.contains(&"fs_write".to_owned()),
        "{tools_after:?}"
    );
    assert!(after < before, "{after} >= {before}");
    // A 4,096-token context keeps at least 1,000 tokens for the conversation.
    assert!(
        after <= 3_096,
        "the shell-enabled first request is {after} tokens"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_turn_greps_transforms_with_jq_and_writes_while_protection_holds() {
    let mock = MockProvider::start(Wire::Anthropic).await;
    mock.require_api_key(KEY);
    let dir = tempfile::tempdir().unwrap();
    let mut file = AdfFile::create(
        dir.path().join("a.adf"),
        &adf_store::CreateOptions::default(),
    )
    .unwrap();
    wire_up(&mut file, &mock);
    set(&mut file, "tools.adf_shell.enabled", json!(true));
    set(&mut file, "tools.adf_shell.visible", json!(true));
    common::put(
        &mut file,
        "orders.log",
        "ok 1 apple\nfail 2 pear\nok 3 fig\nfail 4 kiwi\n",
    );
    common::registry()
        .call(
            &mut file,
            &adf_runtime::tools::ToolCaller::Owner,
            "fs_write",
            json!({ "mode": "write", "path": "policy.md", "content": "fixed\n", "protection": "read_only" }),
            &adf_runtime::tools::approval::DenyAll,
        )
        .unwrap();
    let line = "grep ^fail orders.log | cut -d' ' -f2,3 | jq -R -s -c 'split(\"\\n\") | map(select(length > 0) | split(\" \") | {id: (.[0] | tonumber), item: .[1]})' > failed.json && cat failed.json";
    mock.push_all([
        Turn::tool_call("adf_shell", json!({ "command": line })),
        Turn::tool_call(
            "adf_shell",
            json!({ "command": "echo changed > policy.md; echo status $?" }),
        ),
        Turn::text("Done."),
    ]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let owner = Owner::default();
    ex.run_turn(
        &mut file,
        &mut session,
        Trigger::Owner("collect the failures".into()),
        &owner,
    )
    .await
    .unwrap();
    assert_eq!(
        common::text(&file, "failed.json").as_deref(),
        Some("[{\"id\":2,\"item\":\"pear\"},{\"id\":4,\"item\":\"kiwi\"}]\n")
    );
    assert_eq!(common::text(&file, "policy.md").as_deref(), Some("fixed\n"));
    assert_eq!(
        *owner.asked.lock().unwrap(),
        ["fs_write"],
        "the owner was asked about the read_only file"
    );
    // The model saw both results: the JSON, then the refusal's status.
    let requests = mock.requests();
    let second = requests[1].body.to_string();
    assert!(second.contains("pear"), "{second}");
    let third = requests[2].body.to_string();
    assert!(third.contains("status 1"), "{third}");
}
