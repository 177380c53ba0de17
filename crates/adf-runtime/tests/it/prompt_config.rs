//! Prompt and config requirements through the runtime: `loop_inject` rows (§13.1), the
//! session's prompt snapshot and its reset (§5.1), the deprecated `thinking_budget` (§5.18),
//! `restricted_methods` replacing its default (§5.9) and locked triggers (§5.5, §5.17).
use crate::common;

use std::sync::Arc;

use adf_providers::{ApiKey, Resolver};
use adf_runtime::code::{self, Authorization, CodeEnv, CodeRun, LambdaRef, RunOptions};
use adf_runtime::executor::{Executor, RetryLog, Trigger, TurnEvent, TurnHost};
use adf_runtime::home::RuntimeHome;
use adf_runtime::identity::{self, LocalKeys};
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{Approver, ToolCaller};
use adf_store::{AdfFile, ConfigAction, FileWrite};
use adf_testkit::{MockProvider, Turn, Wire};
use common::{authorized, call, code, model, new_agent, owner_set};
use serde_json::{Value, json};

const KEY: &str = "sk-test-0123456789";

// ---------- helpers ----------

fn owner_write(file: &mut AdfFile, path: &str, text: &str, authorized: bool) {
    file.file_write(
        adf_store::Caller::Owner,
        path,
        text.as_bytes(),
        &FileWrite::default(),
    )
    .unwrap();
    file.file_set_authorized(adf_store::Caller::Owner, path, authorized)
        .unwrap();
}

async fn lambda(file: &mut AdfFile, env: &CodeEnv, source: &str) -> CodeRun {
    code::run_lambda(
        file,
        env,
        &LambdaRef::parse(source).unwrap(),
        json!({}),
        Authorization::SourceFile,
        &DenyAll,
        &RunOptions::default(),
    )
    .await
}

fn ok(run: CodeRun) -> Value {
    match run.result {
        Ok(v) => v,
        Err(e) => panic!("code failed: {e}; console: {:?}", run.logs),
    }
}

/// Points the agent at the mock provider.
async fn mocked_agent(wire: Wire) -> (tempfile::TempDir, AdfFile, MockProvider) {
    let mock = MockProvider::start(wire).await;
    mock.require_api_key(KEY);
    let (dir, _path, mut file) = new_agent();
    let ty = match wire {
        Wire::OpenAi => "openai-compatible",
        Wire::Anthropic => "anthropic",
    };
    owner_set(
        &mut file,
        "providers",
        json!([{"id": "mock", "type": ty, "name": "Mock", "baseUrl": mock.base_url()}]),
    );
    owner_set(&mut file, "model.provider", json!("mock"));
    owner_set(&mut file, "model.model_id", json!("test-model"));
    (dir, file, mock)
}

fn executor(file: &AdfFile) -> Executor {
    let retries = RetryLog::default();
    let resolved = Resolver::new()
        .with_env(|_| None)
        .resolve(&file.config().unwrap(), Some(ApiKey::new(KEY)))
        .unwrap();
    Executor::from_resolved(resolved, retries)
}

/// The owner at the terminal: refuses every approval, answers nothing.
struct Owner;

impl TurnHost for Owner {
    fn approver(&self) -> &dyn Approver {
        &DenyAll
    }
    fn answer(&self, _: &str) -> Option<String> {
        None
    }
    fn event(&self, _: &TurnEvent<'_>) {}
}

/// The system prompt text of a recorded Anthropic request.
fn system_of(body: &Value) -> String {
    body["system"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["text"].as_str().unwrap())
        .collect()
}

// ---------- PRM-04 ----------

#[tokio::test]
async fn prm_04_loop_inject_rows_are_context_tagged_and_persisted_at_once() {
    let (_d, _p, mut file) = new_agent();
    let env = CodeEnv::with_builtins().await.unwrap();
    owner_write(
        &mut file,
        "lib/inject.ts",
        "export async function main() {
           await adf.loop_inject({ content: 'plain note' })
           await adf.loop_inject({ content: 'hot news', category: 'news' })
           return 'done'
         }",
        false,
    );
    let before = file.loop_rows("main").unwrap().len();
    assert_eq!(ok(lambda(&mut file, &env, "lib/inject.ts").await), "done");
    // Outside a turn nothing else would write them later: they are rows already.
    let rows = file.loop_rows("main").unwrap();
    assert_eq!(rows.len(), before + 2);
    let texts: Vec<&str> = rows[before..]
        .iter()
        .map(|r| {
            assert_eq!(r.role, "user");
            r.content[0]["text"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        texts,
        vec![
            "[Context: loop_inject] plain note",
            "[Context: news] hot news"
        ]
    );
}

// ---------- PRM-28 ----------

#[tokio::test]
async fn prm_28_prompt_snapshot_covers_injected_files_and_refreshes_only_on_reset() {
    let (_d, mut file, mock) = mocked_agent(Wire::Anthropic).await;
    common::enable(&mut file, "loop_clear");
    owner_write(&mut file, "soul.md", "SOUL-ONE", false);
    owner_set(&mut file, "instructions", json!("Soul: {{soul.md}}"));
    mock.push_all([
        Turn::text("r1"),
        Turn::text("r2"),
        Turn::tool_call("loop_clear", json!({})),
        Turn::text("cleared"),
    ]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    ex.run_turn(
        &mut file,
        &mut session,
        Trigger::Owner("one".into()),
        &Owner,
    )
    .await
    .unwrap();

    // Change a file the instructions inject and one only the skills section injects.
    owner_write(&mut file, "soul.md", "SOUL-TWO", false);
    file.file_write(
        adf_store::Caller::Agent,
        "skills/zebra-notes/SKILL.md",
        b"---\nname: zebra-notes\ndescription: Keep zebra notes\n---\n",
        &FileWrite::default(),
    )
    .unwrap();
    ex.run_turn(
        &mut file,
        &mut session,
        Trigger::Owner("two".into()),
        &Owner,
    )
    .await
    .unwrap();
    ex.run_turn(
        &mut file,
        &mut session,
        Trigger::Owner("three".into()),
        &Owner,
    )
    .await
    .unwrap();

    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    let systems: Vec<String> = requests.iter().map(|r| system_of(&r.body)).collect();
    assert!(systems[0].contains("SOUL-ONE") && !systems[0].contains("zebra-notes"));
    // Without a reset the session keeps its snapshot, byte for byte.
    assert_eq!(systems[1], systems[0]);
    assert_eq!(systems[2], systems[0]);
    // loop_clear resets the session: the next request is built from the files as they are
    // now, the instructions' file and the conditional skills section's file alike.
    assert!(systems[3].contains("SOUL-TWO"), "{}", systems[3]);
    assert!(systems[3].contains("zebra-notes"), "{}", systems[3]);
    assert!(!systems[3].contains("SOUL-ONE"));
}

// ---------- CFG-33 ----------

#[tokio::test]
async fn cfg_33_thinking_budget_is_folded_into_reasoning() {
    let (_d, mut file, mock) = mocked_agent(Wire::Anthropic).await;
    // A config written by an older runtime: the deprecated field, no `reasoning`.
    common::tamper_config(&file, |config| {
        let model = config["model"].as_object_mut().unwrap();
        model.shift_remove("reasoning");
        model.insert("thinking_budget".into(), json!(2048));
    });
    let params = adf_providers::ModelParams::from_model_config(&file.config().unwrap()["model"]);
    let reasoning = params.reasoning.expect("reasoning is on");
    assert_eq!(reasoning.enabled, Some(true));
    assert_eq!(reasoning.max_tokens, Some(2048));

    // And the request carries it.
    mock.push(Turn::text("hi"));
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    ex.run_turn(
        &mut file,
        &mut session,
        Trigger::Owner("hello".into()),
        &Owner,
    )
    .await
    .unwrap();
    let body = &mock.requests()[0].body;
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
}

// ---------- CFG-44 ----------

#[tokio::test]
async fn cfg_44_an_explicit_restricted_methods_list_replaces_the_default() {
    let (dir, _p, mut file) = new_agent();
    let home = RuntimeHome::at(dir.path().join("home"));
    home.init_owner(false).unwrap();
    let keys = LocalKeys::from_home(&home).unwrap();
    identity::provision_new(&mut file, &keys).unwrap();
    let env = CodeEnv::with_builtins()
        .await
        .unwrap()
        .with_keys(Arc::new(keys));
    owner_write(
        &mut file,
        "lib/issue.ts",
        "export async function main() {
           const out = {}
           try { out.issued = (await adf.attestation_issue({ subject: 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK', role: 'member' })).issuer } catch (e) { out.issued = e.code }
           try { await adf.loop_inject({ content: 'x' }); out.inject = 'ok' } catch (e) { out.inject = e.code }
           return out
         }",
        false,
    );
    let did = file.meta_get("adf_did").unwrap().unwrap().value;

    // The default keeps attestation_issue to authorized code.
    let v = ok(lambda(&mut file, &env, "lib/issue.ts").await);
    assert_eq!(
        v,
        json!({ "issued": "REQUIRES_AUTHORIZED_CODE", "inject": "ok" })
    );

    // `[]` restricts nothing: unauthorized code may issue.
    owner_set(&mut file, "code_execution.restricted_methods", json!([]));
    let v = ok(lambda(&mut file, &env, "lib/issue.ts").await);
    assert_eq!(v, json!({ "issued": did, "inject": "ok" }));

    // A list naming another method replaces the default rather than adding to it.
    owner_set(
        &mut file,
        "code_execution.restricted_methods",
        json!(["loop_inject"]),
    );
    let v = ok(lambda(&mut file, &env, "lib/issue.ts").await);
    assert_eq!(
        v,
        json!({ "issued": did, "inject": "REQUIRES_AUTHORIZED_CODE" })
    );
}

// ---------- TRG-19 ----------

fn config_text(file: &AdfFile) -> String {
    file.config_text().unwrap()
}

#[test]
fn trg_19_a_locked_trigger_and_a_locked_target_cannot_be_changed_by_the_agent() {
    let (_d, _p, mut file) = new_agent();
    // Only §5.17 decides: the tool's own restricted flag is lifted.
    owner_set(
        &mut file,
        "tools.sys_update_config.restricted",
        json!(false),
    );
    owner_set(
        &mut file,
        "triggers.on_inbox",
        json!({ "enabled": true, "locked": true, "targets": [{ "scope": "agent" }] }),
    );
    // A locked target inside an unlocked trigger (after the default's unlocked one).
    file.config_set_path(
        adf_store::Caller::Owner,
        "triggers.on_chat.targets",
        ConfigAction::Append,
        json!({ "scope": "agent", "locked": true, "debounce_ms": 100 }),
    )
    .unwrap();
    let config = config_text(&file);
    for args in [
        json!({ "path": "triggers.on_inbox.enabled", "value": false }),
        json!({ "path": "triggers.on_inbox.targets", "value": [] }),
        json!({ "path": "triggers.on_inbox.targets.0.scope", "value": "system" }),
        json!({ "path": "triggers.on_inbox.locked", "value": false }),
        json!({ "path": "triggers.on_inbox", "value": { "enabled": false, "targets": [] } }),
        json!({ "path": "triggers.on_chat.targets", "action": "remove", "index": 1 }),
        json!({ "path": "triggers.on_chat.targets.1.debounce_ms", "value": 5 }),
        json!({ "path": "triggers.on_chat.targets.1.locked", "value": false }),
    ] {
        for caller in [model(), code()] {
            let refused = call(&mut file, &caller, "sys_update_config", args.clone());
            assert!(refused.is_err(), "{args} was accepted for {caller:?}");
            assert_eq!(config_text(&file), config, "{args} changed the config");
        }
    }
    // Authorized code cannot remove a locked entry either.
    for args in [
        json!({ "path": "triggers.on_inbox", "value": { "enabled": false, "targets": [] } }),
        json!({ "path": "triggers.on_chat.targets", "action": "remove", "index": 1 }),
    ] {
        assert!(call(&mut file, &authorized(), "sys_update_config", args.clone()).is_err());
        assert_eq!(config_text(&file), config, "{args} changed the config");
    }
    // An unlocked trigger, and the unlocked sibling of a locked target, stay the agent's.
    call(
        &mut file,
        &model(),
        "sys_update_config",
        json!({ "path": "triggers.on_chat.targets.0.debounce_ms", "value": 50 }),
    )
    .unwrap();
    call(
        &mut file,
        &model(),
        "sys_update_config",
        json!({ "path": "triggers.on_file_change.enabled", "value": false }),
    )
    .unwrap();
    // The owner may change the locked ones.
    call(
        &mut file,
        &ToolCaller::Owner,
        "sys_update_config",
        json!({ "path": "triggers.on_inbox.enabled", "value": false }),
    )
    .unwrap();
    assert_eq!(
        file.config().unwrap()["triggers"]["on_inbox"]["enabled"],
        json!(false)
    );
}

// ---------- PRM-27 ----------

fn install_skill(file: &mut AdfFile, name: &str) {
    file.file_write(
        adf_store::Caller::Agent,
        &format!("skills/{name}/SKILL.md"),
        format!("---\nname: {name}\ndescription: The {name} skill\n---\n").as_bytes(),
        &FileWrite::default(),
    )
    .unwrap();
}

/// Every text block of a recorded Anthropic request's messages.
fn message_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|b| b["text"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn prm_27_a_catalog_change_mid_session_is_a_keyed_injection_not_a_new_snapshot() {
    let (_d, mut file, mock) = mocked_agent(Wire::Anthropic).await;
    mock.push_all([Turn::text("r1"), Turn::text("r2"), Turn::text("r3")]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    ex.run_turn(
        &mut file,
        &mut session,
        Trigger::Owner("one".into()),
        &Owner,
    )
    .await
    .unwrap();
    let catalog_rows = |file: &AdfFile| -> Vec<String> {
        file.loop_rows("main")
            .unwrap()
            .iter()
            .filter_map(|r| r.content[0]["text"].as_str().map(str::to_owned))
            .filter(|t| t.starts_with("[Context: skills_registry]"))
            .collect()
    };
    assert!(catalog_rows(&file).is_empty(), "no change, no injection");

    install_skill(&mut file, "alpha-notes");
    ex.run_turn(
        &mut file,
        &mut session,
        Trigger::Owner("two".into()),
        &Owner,
    )
    .await
    .unwrap();
    let rows = catalog_rows(&file);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].contains("alpha-notes"));
    let requests = mock.requests();
    assert_eq!(
        system_of(&requests[1].body),
        system_of(&requests[0].body),
        "the injected snapshot is not rewritten"
    );
    assert!(!system_of(&requests[1].body).contains("alpha-notes"));
    assert!(
        message_texts(&requests[1].body)
            .iter()
            .any(|t| t.starts_with("[Context: skills_registry]") && t.contains("alpha-notes"))
    );

    // A catalog injection still pending (here the guide's own keyed example, from code) is
    // replaced by the runtime's newer one: the model is sent only the latest catalog.
    let env = CodeEnv::with_builtins().await.unwrap();
    ok(code::run_inline(
        &mut file,
        &env,
        "await adf.loop_inject({ content: 'STALE-CATALOG', category: 'skills_registry', key: 'skills_registry' })",
        false,
        &DenyAll,
        &RunOptions::default(),
    )
    .await);
    install_skill(&mut file, "beta-notes");
    ex.run_turn(
        &mut file,
        &mut session,
        Trigger::Owner("three".into()),
        &Owner,
    )
    .await
    .unwrap();
    let sent = message_texts(&mock.requests()[2].body);
    assert!(
        !sent.iter().any(|t| t.contains("STALE-CATALOG")),
        "{sent:?}"
    );
    let latest: Vec<&String> = sent.iter().filter(|t| t.contains("beta-notes")).collect();
    assert_eq!(latest.len(), 1, "{sent:?}");
    assert!(latest[0].starts_with("[Context: skills_registry]"));
    assert_eq!(
        system_of(&mock.requests()[2].body),
        system_of(&mock.requests()[0].body)
    );
    // The transcript keeps every version for audit.
    assert_eq!(catalog_rows(&file).len(), 3);
}

// ---------- PRM-36, CFG-34 ----------

/// Binary bytes (not UTF-8) stored as a PNG; returns their base64.
fn put_image(file: &mut AdfFile) -> String {
    let bytes: Vec<u8> = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a]
        .into_iter()
        .chain((0u8..48).map(|i| i.wrapping_mul(37) | 0x80))
        .collect();
    file.file_write(
        adf_store::Caller::Owner,
        "pics/dot.png",
        &bytes,
        &FileWrite {
            mime_type: Some("image/png".into()),
            ..FileWrite::default()
        },
    )
    .unwrap();
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(&bytes)
}

/// Whether any stored transcript row holds `needle`.
fn transcript_contains(file: &AdfFile, needle: &str) -> bool {
    let rows = adf_store::test_support::tables(file)
        .rows("adf_loop")
        .unwrap();
    rows.iter()
        .any(|row| row["content_json"].as_str().unwrap().contains(needle))
}

/// One turn where the model reads the image, then a second turn; returns the three request
/// bodies as text.
async fn read_image_turns(file: &mut AdfFile, mock: &MockProvider) -> Vec<String> {
    mock.push_all([
        Turn::tool_call("fs_read", json!({ "path": "pics/dot.png" })),
        Turn::text("a dot"),
        Turn::text("still here"),
    ]);
    let ex = executor(file);
    let mut session = ex.open_session(file, "main").unwrap();
    for text in ["look", "again"] {
        ex.run_turn(file, &mut session, Trigger::Owner(text.into()), &Owner)
            .await
            .unwrap();
    }
    mock.requests()
        .iter()
        .map(|r| serde_json::to_string(&r.body).unwrap())
        .collect()
}

#[tokio::test]
async fn prm_36_media_blocks_are_sent_but_never_persisted() {
    let (_d, mut file, mock) = mocked_agent(Wire::Anthropic).await;
    let data = put_image(&mut file);
    owner_set(&mut file, "model.multimodal", json!({ "image": true }));
    let bodies = read_image_turns(&mut file, &mock).await;
    assert_eq!(bodies.len(), 3);
    // The request right after the call carries the image inside its tool result.
    let body: Value = serde_json::from_str(&bodies[1]).unwrap();
    let result = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result")
        .unwrap();
    let blocks = result["content"].as_array().expect("text and image blocks");
    assert_eq!(blocks[0]["type"], "text", "fs_read's metadata row first");
    assert_eq!(
        blocks[1],
        json!({ "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": data } })
    );
    // Ephemeral: not in adf_loop, and not sent again.
    assert!(!transcript_contains(&file, &data));
    assert!(!bodies[2].contains(&data), "sent with one request only");
    let rows = file.loop_rows("main").unwrap();
    let stored = rows
        .iter()
        .find(|r| r.content[0]["type"] == "tool_result")
        .unwrap();
    assert!(
        stored.content[0]["content"]
            .as_str()
            .unwrap()
            .contains("\"content\":null"),
        "{}",
        stored.content
    );
}

#[tokio::test]
async fn prm_36_without_the_modality_the_model_gets_metadata_only() {
    let (_d, mut file, mock) = mocked_agent(Wire::Anthropic).await;
    let data = put_image(&mut file);
    let bodies = read_image_turns(&mut file, &mock).await;
    assert!(bodies.iter().all(|b| !b.contains(&data)));
}

#[tokio::test]
async fn cfg_34_model_vision_is_honoured_as_multimodal_image() {
    let (_d, mut file, mock) = mocked_agent(Wire::OpenAi).await;
    let data = put_image(&mut file);
    // A config from before `multimodal`: only the deprecated flag.
    common::tamper_config(&file, |config| {
        let model = config["model"].as_object_mut().unwrap();
        model.shift_remove("multimodal");
        model.insert("vision".into(), json!(true));
    });
    let bodies = read_image_turns(&mut file, &mock).await;
    assert!(
        bodies[1].contains(&format!("data:image/png;base64,{data}")),
        "{}",
        bodies[1]
    );
    assert!(!transcript_contains(&file, &data));
    // The prompt's media block says so too.
    let body: Value = serde_json::from_str(&bodies[0]).unwrap();
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("## Media") && system.contains("image"),
        "{system}"
    );
}
