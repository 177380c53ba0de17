//! `sys_get_config` and `sys_update_config`: every rule of missing-tables §5.17 refused for the
//! agent (hard error, or a one-time owner request) and allowed for the owner, with the file
//! unchanged after every refusal; sections and secret redaction.
use crate::common;

use std::cell::RefCell;

use adf_runtime::tools::approval::{ApproveAll, DenyAll};
use adf_runtime::tools::{ApprovalRequest, Approver, Decision, ErrorCode, ToolCaller, ToolError};
use adf_store::{AdfFile, ConfigAction};
use common::{
    authorized, call, call_approved, call_with, code, digest, model, new_agent, owner_set,
};
use serde_json::{Value, json};

const UPDATE: &str = "sys_update_config";
const GET: &str = "sys_get_config";

/// An agent whose owner lifted the default `restricted` flag of `sys_update_config`, so model
/// and unauthorized-code calls reach the tool without a restricted-call approval (and leave no
/// task row behind): what remains is exactly what §5.17 decides.
fn free_agent() -> (tempfile::TempDir, AdfFile) {
    let (dir, _, mut file) = new_agent();
    owner_set(
        &mut file,
        "tools.sys_update_config.restricted",
        json!(false),
    );
    (dir, file)
}

fn agent() -> (tempfile::TempDir, AdfFile) {
    let (dir, _, file) = new_agent();
    (dir, file)
}

fn owner_append(file: &mut AdfFile, path: &str, value: Value) {
    file.config_set_path(adf_store::Caller::Owner, path, ConfigAction::Append, value)
        .unwrap();
}

/// The stored config exactly as its bytes sit in the row.
fn config_text(file: &AdfFile) -> String {
    let rows = adf_store::test_support::tables(file)
        .rows("adf_config")
        .unwrap();
    let row = rows.iter().find(|row| row["id"] == 1).unwrap();
    format!("{}|{}", row["config_json"], row["updated_at"])
}

fn tasks(file: &AdfFile) -> Vec<adf_store::TaskRow> {
    file.tasks(None).unwrap()
}

fn reason(task: &adf_store::TaskRow) -> &str {
    task.approval_meta
        .as_ref()
        .and_then(|m| m.get("reason"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn update(file: &mut AdfFile, caller: &ToolCaller, args: Value) -> Result<Value, ToolError> {
    call(file, caller, UPDATE, args)
}

/// Calls and expects a refusal that leaves every row of the file as it was.
fn refused_unchanged(file: &mut AdfFile, caller: &ToolCaller, args: Value) -> ToolError {
    let (before, text) = (digest(file), config_text(file));
    let config = file.config().unwrap();
    let error = update(file, caller, args.clone())
        .expect_err(&format!("{args} should be refused for {caller:?}"));
    assert_eq!(config_text(file), text, "config bytes changed by {args}");
    assert_eq!(file.config().unwrap(), config);
    assert!(digest(file) == before, "file changed by refused {args}");
    error
}

fn assert_hard(error: &ToolError, args: &Value) {
    assert_eq!(error.code, ErrorCode::WriteError, "{args}: {error}");
    assert!(
        error.protection.is_none(),
        "{args} must be a hard error, not an approvable protection: {error}"
    );
}

/// A model's write to a locked path becomes one protection request; denied, nothing changes
/// but the recorded request.
fn assert_model_asks_owner(file: &mut AdfFile, args: Value) {
    let text = config_text(file);
    let requests = tasks(file).len();
    let owner = Owner::approving_protection(false);
    let error = call_with(file, &model(), UPDATE, args.clone(), &owner).unwrap_err();
    assert_eq!(error.code, ErrorCode::Denied, "{args}: {error}");
    assert_eq!(owner.seen.borrow().len(), 1, "{args}");
    assert_eq!(owner.seen.borrow()[0]["protection"]["target"], args["path"]);
    assert_eq!(config_text(file), text, "{args} was applied");
    let all = tasks(file);
    assert_eq!(
        all.iter().filter(|t| reason(t) == "protection").count(),
        1 + requests.saturating_sub(requests),
        "{args}"
    );
}

fn bypass_logs(file: &AdfFile) -> Vec<(String, String, String, String)> {
    let logs = adf_store::test_support::tables(file).logs().unwrap();
    logs.into_iter()
        .filter(|l| l.origin.as_deref() == Some("protection"))
        .filter(|l| l.event.as_deref() == Some("bypass"))
        .map(|l| (l.level, l.target.unwrap(), l.message, l.data.unwrap()))
        .collect()
}

/// Approves restricted-tool requests and decides protection requests as told, recording the
/// protection requests it saw.
struct Owner {
    approve_protection: bool,
    seen: RefCell<Vec<Value>>,
}

impl Owner {
    fn approving_protection(approve: bool) -> Self {
        Self {
            approve_protection: approve,
            seen: RefCell::new(Vec::new()),
        }
    }
}

impl Approver for Owner {
    fn decide(&self, _: &mut AdfFile, request: &ApprovalRequest) -> Result<Decision, ToolError> {
        if request.approval_meta["reason"] == "protection" {
            self.seen.borrow_mut().push(request.approval_meta.clone());
            if !self.approve_protection {
                return Ok(Decision::Denied("not this time".into()));
            }
        }
        Ok(Decision::Approved)
    }
}

// ---------------------------------------------------------------------------------------------
// Steps 3-5: hard denials.
// ---------------------------------------------------------------------------------------------

/// (path, value, action) the agent may never write and the owner may.
fn hard_denied_cases() -> Vec<Value> {
    vec![
        json!({ "path": "tools.fs_read.restricted", "value": false }),
        json!({ "path": "tools.sys_update_config.restricted", "value": false }),
        json!({ "path": "tools.fs_read.locked", "value": false }),
        json!({ "path": "tools.fs_read.locked", "value": true }),
        json!({ "path": "code_execution.restricted_methods", "value": [] }),
        json!({ "path": "code_execution.restricted_methods", "action": "append", "value": "model_invoke" }),
        json!({ "path": "locked_fields", "action": "append", "value": "limits" }),
        json!({ "path": "metadata.author", "value": "me" }),
        json!({ "path": "providers", "action": "append", "value": { "id": "p1", "type": "openai" } }),
        json!({ "path": "security", "value": { "allow_unsigned": true, "level": 1 } }),
        json!({ "path": "security.allow_unsigned", "value": false }),
        json!({ "path": "security.require_middleware_authorization", "value": false }),
        json!({ "path": "security.middleware.inbox", "action": "append", "value": "lib/mw.ts:check" }),
        json!({ "path": "security.middleware", "value": { "inbox": [] } }),
        json!({ "path": "security.fetch_middleware", "value": ["lib/mw.ts:fetch"] }),
    ]
}

#[test]
fn cfg_05_cfg_06_cfg_07_cfg_08_cfg_24_hard_denials_refuse_every_agent_caller_and_allow_the_owner() {
    for args in hard_denied_cases() {
        let (_dir, mut file) = free_agent();
        for caller in [model(), code(), authorized()] {
            let error = refused_unchanged(&mut file, &caller, args.clone());
            assert_hard(&error, &args);
            assert!(tasks(&file).is_empty(), "{args}: no approval request");
        }
        let done = update(&mut file, &ToolCaller::Owner, args.clone())
            .unwrap_or_else(|e| panic!("owner {args}: {e}"));
        assert!(
            done.as_str()
                .unwrap()
                .ends_with(&format!("{}.", args["path"].as_str().unwrap()))
        );
    }
}

#[test]
fn cfg_06_id_and_adf_version_never_change_for_anyone() {
    let (_dir, mut file) = free_agent();
    for args in [
        json!({ "path": "id", "value": "other-id-123" }),
        json!({ "path": "adf_version", "value": "9.9" }),
    ] {
        for caller in [model(), authorized()] {
            assert_hard(&refused_unchanged(&mut file, &caller, args.clone()), &args);
        }
        let error = refused_unchanged(&mut file, &ToolCaller::Owner, args.clone());
        assert!(error.message.contains("never changes"), "{error}");
    }
}

#[test]
fn cfg_05_cfg_26_hard_denial_of_restricted_tool_creates_no_protection_request() {
    let (_dir, mut file) = agent();
    let text = config_text(&file);
    let error = call_approved(
        &mut file,
        &model(),
        UPDATE,
        json!({ "path": "tools.fs_read.restricted", "value": false }),
    )
    .unwrap_err();
    assert_hard(&error, &json!("tools.fs_read.restricted"));
    assert_eq!(config_text(&file), text);
    // The tool's check refuses it before the restricted call is put to the owner: no task
    // asks to approve the call, and none asks to lift a lock.
    let tasks = tasks(&file);
    assert!(tasks.is_empty(), "{tasks:?}");
}

/// Counts the approvals it is asked for, and approves them.
#[derive(Default)]
struct CountingOwner {
    asked: std::cell::Cell<usize>,
}

impl Approver for CountingOwner {
    fn decide(&self, _: &mut AdfFile, _: &ApprovalRequest) -> Result<Decision, ToolError> {
        self.asked.set(self.asked.get() + 1);
        Ok(Decision::Approved)
    }
}

/// The file's bytes, with its WAL sidecar's when there is one.
fn file_bytes(path: &std::path::Path) -> Vec<u8> {
    let mut bytes = std::fs::read(path).unwrap();
    let wal = adf_store::sidecar(path, "-wal");
    if wal.exists() {
        bytes.extend(std::fs::read(wal).unwrap());
    }
    bytes
}

#[test]
fn cfg_26_a_restricted_call_that_would_be_refused_is_refused_before_the_owner_is_asked() {
    for args in [
        // A schema violation (step 12), as a blocking call and as an `_async` task.
        json!({ "path": "model.temperature", "value": 5 }),
        json!({ "path": "model.temperature", "value": 5, "_async": true }),
        // The typo guard (step 7) and a hard denial (step 3).
        json!({ "path": "modle", "value": { "temperature": 1 } }),
        json!({ "path": "tools.fs_read.restricted", "value": false }),
    ] {
        for owner_approves in [true, false] {
            let (_dir, path, mut file) = new_agent();
            let (before, bytes) = (digest(&file), file_bytes(&path));
            let owner = CountingOwner::default();
            let result = if owner_approves {
                call_with(&mut file, &model(), UPDATE, args.clone(), &owner)
            } else {
                call_with(&mut file, &model(), UPDATE, args.clone(), &DenyAll)
            };
            let error = result.expect_err(&format!("{args} should be refused"));
            assert_ne!(error.code, ErrorCode::Denied, "{args}: {error}");
            assert_eq!(owner.asked.get(), 0, "{args}: the owner was asked");
            assert!(tasks(&file).is_empty(), "{args}: a task was recorded");
            assert!(digest(&file) == before, "{args}: a row changed");
            assert!(
                file_bytes(&path) == bytes,
                "{args}: the file's bytes changed"
            );
        }
    }
    // A change that passes the rules is still put to the owner, once.
    let (_dir, _, mut file) = new_agent();
    let owner = CountingOwner::default();
    call_with(
        &mut file,
        &model(),
        UPDATE,
        json!({ "path": "model.temperature", "value": 1.5 }),
        &owner,
    )
    .unwrap();
    assert_eq!(owner.asked.get(), 1);
    assert_eq!(file.config().unwrap()["model"]["temperature"], json!(1.5));
}

#[test]
fn cfg_05_value_side_guards_cannot_drop_restrictions_by_replacing_a_parent() {
    let (_dir, mut file) = free_agent();
    let mut tools = file.config().unwrap()["tools"].clone();
    for tool in tools.as_array_mut().unwrap() {
        tool.as_object_mut().unwrap().remove("restricted");
    }
    for args in [
        json!({ "path": "code_execution", "value": { "network": false } }),
        json!({ "path": "code_execution", "value": { "network": false, "restricted_methods": [] } }),
        json!({ "path": "tools", "value": tools }),
    ] {
        for caller in [model(), authorized()] {
            assert_hard(&refused_unchanged(&mut file, &caller, args.clone()), &args);
        }
    }
    // Keeping the protected fields as they are is an ordinary write.
    let mut code_execution = file.config().unwrap()["code_execution"].clone();
    code_execution["network"] = json!(true);
    update(
        &mut file,
        &model(),
        json!({ "path": "code_execution", "value": code_execution }),
    )
    .unwrap();
    assert_eq!(
        file.config().unwrap()["code_execution"]["network"],
        json!(true)
    );
}

// ---------------------------------------------------------------------------------------------
// Step 6, 8 and the actions.
// ---------------------------------------------------------------------------------------------

#[test]
fn cfg_22_set_append_remove_and_remove_needs_index() {
    let (_dir, mut file) = free_agent();
    let path = "triggers.on_outbox.targets";
    assert_eq!(
        update(
            &mut file,
            &model(),
            json!({ "path": path, "action": "append", "value": { "scope": "agent" } })
        )
        .unwrap(),
        json!(format!("Appended to {path}."))
    );
    assert_eq!(
        update(&mut file, &model(), json!({ "path": path, "action": "append", "value": { "scope": "system", "lambda": "lib/a.ts:on" } })).unwrap(),
        json!(format!("Appended to {path}."))
    );
    let error = refused_unchanged(
        &mut file,
        &model(),
        json!({ "path": path, "action": "remove" }),
    );
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert!(error.message.contains("requires index"), "{error}");
    let error = refused_unchanged(
        &mut file,
        &model(),
        json!({ "path": path, "action": "remove", "index": 5 }),
    );
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert_eq!(
        update(
            &mut file,
            &model(),
            json!({ "path": path, "action": "remove", "index": "0" })
        )
        .unwrap(),
        json!(format!("Removed index 0 from {path}."))
    );
    assert_eq!(
        file.config().unwrap()["triggers"]["on_outbox"]["targets"],
        json!([{ "scope": "system", "lambda": "lib/a.ts:on" }])
    );
    assert_eq!(
        update(&mut file, &model(), json!({ "path": path, "value": [] })).unwrap(),
        json!(format!("Updated {path}."))
    );
    assert_eq!(
        file.config().unwrap()["triggers"]["on_outbox"]["targets"],
        json!([])
    );
    // A set without a value is not a set to null.
    let error = refused_unchanged(&mut file, &model(), json!({ "path": "description" }));
    assert_eq!(error.code, ErrorCode::InvalidInput);
    // Append creates a missing array.
    update(
        &mut file,
        &model(),
        json!({ "path": "serving.shared.patterns", "action": "append", "value": "public/*" }),
    )
    .unwrap();
    assert_eq!(
        file.config().unwrap()["serving"]["shared"]["patterns"],
        json!(["public/*"])
    );
}

#[test]
fn cfg_19_cfg_20_cfg_21_name_and_numeric_segments() {
    let (_dir, mut file) = free_agent();
    let index = file.config().unwrap()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .position(|t| t["name"] == "fs_delete")
        .unwrap();
    assert_eq!(
        update(
            &mut file,
            &model(),
            json!({ "path": "tools.fs_delete.enabled", "value": true })
        )
        .unwrap(),
        json!("Updated tools.fs_delete.enabled.")
    );
    assert_eq!(
        file.config().unwrap()["tools"][index],
        json!({ "name": "fs_delete", "enabled": true, "visible": false })
    );

    let error = refused_unchanged(
        &mut file,
        &model(),
        json!({ "path": "tools.nope.enabled", "value": true }),
    );
    assert_eq!(error.code, ErrorCode::NotFound);
    assert!(
        error.message.contains("no element named 'nope' in 'tools'"),
        "{error}"
    );

    owner_append(
        &mut file,
        "serving.api",
        json!({ "method": "GET", "path": "/status", "lambda": "lib/api.ts:status" }),
    );
    let error = refused_unchanged(
        &mut file,
        &model(),
        json!({ "path": "serving.api.9.warm", "value": true }),
    );
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert!(error.message.contains("out of range"), "{error}");
    update(
        &mut file,
        &model(),
        json!({ "path": "serving.api.0.warm", "value": true }),
    )
    .unwrap();
    assert_eq!(
        file.config().unwrap()["serving"]["api"][0]["warm"],
        json!(true)
    );
}

// ---------------------------------------------------------------------------------------------
// Step 1: coercion.
// ---------------------------------------------------------------------------------------------

#[test]
fn cfg_coercion_of_string_booleans_and_numeric_leaves() {
    let (_dir, mut file) = free_agent();
    for (path, sent, stored) in [
        ("tools.fs_delete.enabled", json!("true"), json!(true)),
        ("model.temperature", json!("0.5"), json!(0.5)),
        ("limits.max_active_turns", json!("12"), json!(12)),
        ("recovery.base_delay_ms", json!("2000"), json!(2000)),
        ("security.level", json!("2"), json!(2)),
        // Not a numeric leaf: stays text.
        ("description", json!("42"), json!("42")),
        ("instructions", json!("false"), json!(false)),
    ] {
        if path == "instructions" {
            // `false` is not a string: the coerced value is a schema violation, so refused.
            let error =
                refused_unchanged(&mut file, &model(), json!({ "path": path, "value": sent }));
            assert_eq!(error.code, ErrorCode::InvalidInput, "{error}");
            continue;
        }
        update(&mut file, &model(), json!({ "path": path, "value": sent })).unwrap();
        assert_eq!(
            adf_store::config::get_path(&file.config().unwrap(), path).unwrap(),
            Some(&stored),
            "{path}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Step 7: typo guard.
// ---------------------------------------------------------------------------------------------

#[test]
fn cfg_27_typo_guard_refuses_unknown_top_level_sections() {
    let (_dir, mut file) = free_agent();
    for args in [
        json!({ "path": "limtis.max_active_turns", "value": 3 }),
        json!({ "path": "limtis", "value": {} }),
        json!({ "path": "toolz", "action": "append", "value": {} }),
    ] {
        for caller in [model(), authorized(), ToolCaller::Owner] {
            let error = refused_unchanged(&mut file, &caller, args.clone());
            assert_eq!(error.code, ErrorCode::InvalidInput);
            assert!(error.message.contains("is not a config section"), "{error}");
        }
    }
    // The owner's own controls may add a field the schema does not know.
    owner_set(&mut file, "limtis.max_active_turns", json!(3));
    // ... and once present, it is a known key for the agent too.
    update(
        &mut file,
        &model(),
        json!({ "path": "limtis.max_active_turns", "value": 4 }),
    )
    .unwrap();
    assert_eq!(
        file.config().unwrap()["limtis"]["max_active_turns"],
        json!(4)
    );
}

// ---------------------------------------------------------------------------------------------
// Step 9: locks.
// ---------------------------------------------------------------------------------------------

#[test]
fn cfg_12_always_locked_paths_become_protection_requests_for_the_model() {
    for (path, value) in [
        ("security.allow_local_fetch", json!(true)),
        ("stream_bind.allow_tcp_bind", json!(true)),
        ("stream_bind", json!({ "host_process_bind": true })),
        ("serving.csp_sandbox", json!(false)),
    ] {
        let (_dir, mut file) = agent();
        assert!(
            file.config().unwrap()["locked_fields"]
                .as_array()
                .unwrap()
                .is_empty()
        );
        let text = config_text(&file);
        let owner = Owner::approving_protection(false);
        let error = call_with(
            &mut file,
            &model(),
            UPDATE,
            json!({ "path": path, "value": value }),
            &owner,
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::Denied, "{path}: {error}");
        assert_eq!(config_text(&file), text, "{path} was applied");
        let seen = owner.seen.borrow();
        assert_eq!(seen.len(), 1, "{path}");
        assert_eq!(seen[0]["protection"]["kind"], "config path");
        assert_eq!(seen[0]["protection"]["target"], path);
        assert_eq!(seen[0]["protection"]["level"], "locked");
        let protection_tasks: Vec<_> = tasks(&file)
            .into_iter()
            .filter(|t| reason(t) == "protection")
            .collect();
        assert_eq!(protection_tasks.len(), 1);
        assert_eq!(protection_tasks[0].status, "denied");

        // Unauthorized code gets the same refusal as a hard error: nobody to ask.
        let (_dir2, mut free) = free_agent();
        let error = refused_unchanged(&mut free, &code(), json!({ "path": path, "value": value }));
        assert_eq!(error.code, ErrorCode::WriteError);
        assert_eq!(error.protection.as_ref().unwrap().target, path);
        assert!(tasks(&free).is_empty());

        // The owner changes it directly, with no marker.
        assert_eq!(
            update(
                &mut file,
                &ToolCaller::Owner,
                json!({ "path": path, "value": value })
            )
            .unwrap(),
            json!(format!("Updated {path}."))
        );
    }
}

#[test]
fn cfg_13_cfg_18_cfg_28_approval_lifts_a_lock_once_and_is_audited() {
    let (_dir, mut file) = agent();
    let path = "security.allow_local_fetch";
    let approve = Owner::approving_protection(true);
    let result = call_with(
        &mut file,
        &model(),
        UPDATE,
        json!({ "path": path, "value": true }),
        &approve,
    )
    .unwrap();
    assert_eq!(
        result,
        json!(format!("Updated {path}. ⚠ protection override"))
    );
    assert_eq!(
        file.config().unwrap()["security"]["allow_local_fetch"],
        json!(true)
    );
    let logs = bypass_logs(&file);
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].0, "warn");
    assert_eq!(logs[0].1, path);
    assert!(logs[0].3.contains("owner_approved"), "{logs:?}");

    // The approval was for that call only: the next attempt asks again.
    let text = config_text(&file);
    let deny = Owner::approving_protection(false);
    let error = call_with(
        &mut file,
        &model(),
        UPDATE,
        json!({ "path": path, "value": false }),
        &deny,
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::Denied);
    assert_eq!(deny.seen.borrow().len(), 1);
    assert_eq!(config_text(&file), text);
    assert_eq!(
        tasks(&file)
            .iter()
            .filter(|t| reason(t) == "protection")
            .count(),
        2
    );
}

#[test]
fn cfg_14_cfg_15_a_lock_covers_descendants_and_refuses_parent_writes() {
    let (_dir, mut file) = free_agent();
    owner_append(&mut file, "locked_fields", json!("limits"));
    let error = refused_unchanged(
        &mut file,
        &code(),
        json!({ "path": "limits.max_active_turns", "value": 5 }),
    );
    assert_eq!(error.protection.as_ref().unwrap().level, "locked");
    assert!(error.message.contains("'limits' is locked."), "{error}");
    assert_model_asks_owner(
        &mut file,
        json!({ "path": "limits.max_active_turns", "value": 5 }),
    );
    update(
        &mut file,
        &ToolCaller::Owner,
        json!({ "path": "limits.max_active_turns", "value": 5 }),
    )
    .unwrap();

    let (_dir, mut file) = free_agent();
    owner_append(&mut file, "locked_fields", json!("limits.max_active_turns"));
    let limits = file.config().unwrap()["limits"].clone();
    let error = refused_unchanged(
        &mut file,
        &code(),
        json!({ "path": "limits", "value": limits }),
    );
    assert!(error.protection.is_some());
    assert!(
        error
            .message
            .contains("contains the locked field 'limits.max_active_turns'"),
        "{error}"
    );
    refused_unchanged(
        &mut file,
        &code(),
        json!({ "path": "limits.max_active_turns", "value": 9 }),
    );
    // A sibling of the locked field is free.
    update(
        &mut file,
        &code(),
        json!({ "path": "limits.execution_timeout_ms", "value": 1000 }),
    )
    .unwrap();
    update(
        &mut file,
        &ToolCaller::Owner,
        json!({ "path": "limits", "value": limits }),
    )
    .unwrap();
}

#[test]
fn cfg_14_locked_tool_declaration_locks_its_fields() {
    let (_dir, mut file) = free_agent();
    owner_set(&mut file, "tools.sys_code.locked", json!(true));
    assert_model_asks_owner(
        &mut file,
        json!({ "path": "tools.sys_code.enabled", "value": false }),
    );
    let error = refused_unchanged(
        &mut file,
        &code(),
        json!({ "path": "tools.sys_code.enabled", "value": false }),
    );
    assert_eq!(
        error.protection.as_ref().unwrap().target,
        "tools.sys_code.enabled"
    );
    assert!(
        error.message.contains("'tools.sys_code' is locked."),
        "{error}"
    );
    update(
        &mut file,
        &ToolCaller::Owner,
        json!({ "path": "tools.sys_code.enabled", "value": false }),
    )
    .unwrap();
}

#[test]
fn cfg_16_authorized_code_changes_a_locked_path_and_the_bypass_is_logged() {
    let (_dir, mut file) = agent();
    owner_append(&mut file, "locked_fields", json!("limits"));
    let result = update(
        &mut file,
        &authorized(),
        json!({ "path": "limits.max_active_turns", "value": 10 }),
    )
    .unwrap();
    assert_eq!(
        result,
        json!("Updated limits.max_active_turns. ⚠ protection override")
    );
    assert_eq!(
        file.config().unwrap()["limits"]["max_active_turns"],
        json!(10)
    );
    let logs = bypass_logs(&file);
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].0, "warn");
    assert_eq!(logs[0].1, "limits.max_active_turns");
    assert!(logs[0].3.contains("authorized_code"), "{logs:?}");
    // An unlocked path carries no marker and no log.
    let result = update(
        &mut file,
        &authorized(),
        json!({ "path": "description", "value": "x" }),
    )
    .unwrap();
    assert_eq!(result, json!("Updated description."));
    assert_eq!(bypass_logs(&file).len(), 1);
}

#[test]
fn cfg_09_cfg_23_locked_elements_cannot_be_replaced_or_removed_and_edits_below_need_approval() {
    let (_dir, mut file) = free_agent();
    owner_append(
        &mut file,
        "triggers.on_inbox.targets",
        json!({ "scope": "agent", "locked": true, "debounce_ms": 500 }),
    );
    owner_append(
        &mut file,
        "serving.api",
        json!({ "method": "GET", "path": "/x", "lambda": "lib/api.ts:x", "locked": true }),
    );

    // Replacing or removing the locked element: hard, even for authorized code.
    for args in [
        json!({ "path": "triggers.on_inbox.targets", "action": "remove", "index": 1 }),
        json!({ "path": "triggers.on_inbox.targets.1", "value": { "scope": "agent" } }),
        json!({ "path": "triggers.on_inbox.targets", "value": [] }),
        json!({ "path": "serving.api", "action": "remove", "index": 0 }),
        json!({ "path": "serving.api", "value": [] }),
    ] {
        for caller in [model(), authorized()] {
            assert_hard(&refused_unchanged(&mut file, &caller, args.clone()), &args);
        }
    }
    // Editing below a locked item: the owner may approve it once.
    for args in [
        json!({ "path": "triggers.on_inbox.targets.1.debounce_ms", "value": 100 }),
        json!({ "path": "serving.api.0.warm", "value": true }),
    ] {
        let error = refused_unchanged(&mut file, &code(), args.clone());
        assert!(error.protection.is_some(), "{args}: {error}");
        let owner = Owner::approving_protection(false);
        let text = config_text(&file);
        call_with(&mut file, &model(), UPDATE, args.clone(), &owner).unwrap_err();
        assert_eq!(owner.seen.borrow().len(), 1, "{args}");
        assert_eq!(config_text(&file), text);
    }
    // An unlocked sibling is free.
    update(
        &mut file,
        &model(),
        json!({ "path": "triggers.on_inbox.targets", "action": "remove", "index": 0 }),
    )
    .unwrap();
    // The owner does all of it.
    for args in [
        json!({ "path": "serving.api.0.warm", "value": true }),
        json!({ "path": "triggers.on_inbox.targets", "action": "remove", "index": 0 }),
        json!({ "path": "serving.api", "action": "remove", "index": 0 }),
    ] {
        update(&mut file, &ToolCaller::Owner, args).unwrap();
    }
    assert_eq!(file.config().unwrap()["serving"]["api"], json!([]));
    assert_eq!(
        file.config().unwrap()["triggers"]["on_inbox"]["targets"],
        json!([])
    );
}

// ---------------------------------------------------------------------------------------------
// Step 10: field validation.
// ---------------------------------------------------------------------------------------------

#[test]
fn cfg_17_state_accepts_only_active_idle_hibernate_off() {
    let (_dir, mut file) = free_agent();
    for bad in [
        json!("suspended"),
        json!("error"),
        json!("asleep"),
        json!(1),
    ] {
        for caller in [model(), authorized(), ToolCaller::Owner] {
            let error =
                refused_unchanged(&mut file, &caller, json!({ "path": "state", "value": bad }));
            assert_eq!(error.code, ErrorCode::InvalidInput);
            assert!(
                error
                    .message
                    .contains("state must be one of: active, idle, hibernate, off"),
                "{error}"
            );
        }
    }
    for good in ["idle", "hibernate", "off", "active"] {
        update(
            &mut file,
            &model(),
            json!({ "path": "state", "value": good }),
        )
        .unwrap();
        assert_eq!(file.config().unwrap()["state"], json!(good));
    }
    // `suspended` is the runtime's own state: the owner's controls may write it.
    owner_set(&mut file, "state", json!("suspended"));
}

/// (rule, refused args, accepted args) for the field rules of step 10.
fn field_rule_cases() -> Vec<(&'static str, Value, Value)> {
    let route = |path: &str| json!({ "method": "GET", "path": path, "lambda": "lib/api.ts:get" });
    vec![
        (
            "temperature",
            json!({ "path": "model.temperature", "value": 2.5 }),
            json!({ "path": "model.temperature", "value": 2 }),
        ),
        (
            "temperature type",
            json!({ "path": "model", "value": { "provider": "", "model_id": "", "temperature": "hot" } }),
            json!({ "path": "model.temperature", "value": 0 }),
        ),
        (
            "log level",
            json!({ "path": "logging.default_level", "value": "verbose" }),
            json!({ "path": "logging.default_level", "value": "warn" }),
        ),
        (
            "log rows",
            json!({ "path": "logging.max_rows", "value": 0 }),
            json!({ "path": "logging.max_rows", "value": null }),
        ),
        (
            "name slash",
            json!({ "path": "name", "value": "a/b" }),
            json!({ "path": "name", "value": "Research Agent" }),
        ),
        (
            "name trailing dot",
            json!({ "path": "name", "value": "agent." }),
            json!({ "path": "name", "value": "agent.v2" }),
        ),
        (
            "name control",
            json!({ "path": "name", "value": "a\u{7}b" }),
            json!({ "path": "name", "value": "ab" }),
        ),
        (
            "name empty",
            json!({ "path": "name", "value": "  " }),
            json!({ "path": "name", "value": "x" }),
        ),
        (
            "name colon",
            json!({ "path": "name", "value": "a:b" }),
            json!({ "path": "name", "value": "a-b" }),
        ),
        (
            "cfg_45 route /card",
            json!({ "path": "serving.api", "action": "append", "value": route("/card") }),
            json!({ "path": "serving.api", "action": "append", "value": route("/cards") }),
        ),
        (
            "cfg_45 route /inbox/x",
            json!({ "path": "serving.api", "action": "append", "value": route("/inbox/x") }),
            json!({ "path": "serving.api", "action": "append", "value": route("/x/inbox") }),
        ),
        (
            "cfg_45 shared pattern",
            json!({ "path": "serving.shared.patterns", "action": "append", "value": "health/*" }),
            json!({ "path": "serving.shared.patterns", "action": "append", "value": "docs/*" }),
        ),
        (
            "cfg_46 route lambda",
            json!({ "path": "serving.api", "action": "append", "value": { "method": "WS", "path": "/ws" } }),
            json!({ "path": "serving.api", "action": "append", "value": { "method": "WS", "path": "/ws", "lambda": "lib/ws.ts:on" } }),
        ),
        (
            "cfg_47 agent lambda",
            json!({ "path": "triggers.on_chat.targets", "action": "append", "value": { "scope": "agent", "lambda": "lib/a.ts:f" } }),
            json!({ "path": "triggers.on_chat.targets", "action": "append", "value": { "scope": "system", "lambda": "lib/a.ts:f" } }),
        ),
        (
            "cfg_47 lambda and command",
            json!({ "path": "triggers.on_chat.targets", "action": "append", "value": { "scope": "system", "lambda": "lib/a.ts:f", "command": "ls" } }),
            json!({ "path": "triggers.on_chat.targets", "action": "append", "value": { "scope": "system", "command": "ls" } }),
        ),
        (
            "cfg_47 batch_count",
            json!({ "path": "triggers.on_chat.targets", "action": "append", "value": { "scope": "agent", "batch_count": 5 } }),
            json!({ "path": "triggers.on_chat.targets", "action": "append", "value": { "scope": "agent", "batch_count": 5, "batch_ms": 1000 } }),
        ),
        (
            "cfg_48 two timings",
            json!({ "path": "triggers.on_chat.targets.0", "value": { "scope": "agent", "debounce_ms": 10, "interval_ms": 10 } }),
            json!({ "path": "triggers.on_chat.targets.0", "value": { "scope": "agent", "interval_ms": 10 } }),
        ),
        (
            "cfg_35 loop main",
            json!({ "path": "loops", "action": "append", "value": { "name": "main", "goal": "g", "enabled": true } }),
            json!({ "path": "loops", "action": "append", "value": { "name": "researcher", "goal": "g", "enabled": true } }),
        ),
        (
            "cfg_39 loop name",
            json!({ "path": "loops", "action": "append", "value": { "name": "Bad Name", "goal": "g", "enabled": true } }),
            json!({ "path": "loops", "action": "append", "value": { "name": "bad-name", "goal": "g", "enabled": true } }),
        ),
        (
            "cfg_39 loop goal",
            json!({ "path": "loops", "action": "append", "value": { "name": "long", "goal": "x".repeat(4001), "enabled": true } }),
            json!({ "path": "loops", "action": "append", "value": { "name": "long", "goal": "x".repeat(4000), "enabled": true } }),
        ),
        (
            "cfg_39 loop tools",
            json!({ "path": "loops", "action": "append", "value": { "name": "t", "goal": "g", "enabled": true, "tools": ["sys_update_config"] } }),
            json!({ "path": "loops", "action": "append", "value": { "name": "t", "goal": "g", "enabled": true, "tools": ["fs_read"] } }),
        ),
        (
            "cfg_40 hook main",
            json!({ "path": "pre_llm_hook", "value": { "source": "lib/h.ts:h", "scope": "loops", "loops": ["main"] } }),
            json!({ "path": "pre_llm_hook", "value": { "source": "lib/h.ts:h", "scope": "loops", "loops": ["a"], "include_main": true } }),
        ),
        (
            "cfg_40 hook loops required",
            json!({ "path": "pre_llm_hook", "value": { "source": "lib/h.ts:h", "scope": "loops" } }),
            json!({ "path": "pre_llm_hook", "value": { "source": "lib/h.ts:h", "scope": "main" } }),
        ),
        (
            "cfg_40 hook timeout",
            json!({ "path": "pre_llm_hook", "value": { "source": "lib/h.ts:h", "timeout_ms": 999 } }),
            json!({ "path": "pre_llm_hook", "value": { "source": "lib/h.ts:h", "timeout_ms": 1000 } }),
        ),
        (
            "cfg_41 tap wildcard",
            json!({ "path": "umbilical_taps", "action": "append", "value": { "name": "t", "lambda": "lib/t.ts:t", "filter": { "event_types": ["tool.*"] } } }),
            json!({ "path": "umbilical_taps", "action": "append", "value": { "name": "t", "lambda": "lib/t.ts:t", "filter": { "event_types": ["tool.*"], "allow_wildcard": true } } }),
        ),
        (
            "cfg_43 packages",
            json!({ "path": "code_execution.packages", "value": (0..51).map(|i| json!({ "name": format!("p{i}"), "version": "1" })).collect::<Vec<_>>() }),
            json!({ "path": "code_execution.packages", "value": (0..50).map(|i| json!({ "name": format!("p{i}"), "version": "1" })).collect::<Vec<_>>() }),
        ),
        (
            "cfg_36 default target",
            json!({ "path": "compute", "value": { "enabled": true, "allowed_targets": ["isolated"], "default_target": "host" } }),
            json!({ "path": "compute", "value": { "enabled": true, "allowed_targets": ["isolated"], "default_target": "isolated" } }),
        ),
        (
            "cfg_38 negative limit",
            json!({ "path": "limits.execution_timeout_ms", "value": -1 }),
            json!({ "path": "limits.execution_timeout_ms", "value": 1 }),
        ),
        (
            "cfg_38 zero limit",
            json!({ "path": "limits.max_file_write_bytes", "value": 0 }),
            json!({ "path": "limits.max_active_turns", "value": null }),
        ),
        (
            "cfg_49 adapter policy",
            json!({ "path": "adapters.telegram", "value": { "enabled": true, "policy": { "dm": "everyone" } } }),
            json!({ "path": "adapters.telegram", "value": { "enabled": true, "policy": { "dm": "allowlist", "groups": "mention" } } }),
        ),
        (
            "cfg_01 max_tokens",
            json!({ "path": "model.max_tokens", "value": 0 }),
            json!({ "path": "model.max_tokens", "value": 1 }),
        ),
    ]
}

#[test]
fn cfg_17_cfg_35_cfg_36_cfg_38_cfg_39_cfg_40_cfg_41_cfg_43_cfg_45_cfg_46_cfg_47_cfg_48_cfg_49_field_rules()
 {
    for (rule, refused, accepted) in field_rule_cases() {
        let (_dir, mut file) = free_agent();
        for caller in [model(), authorized()] {
            let error = refused_unchanged(&mut file, &caller, refused.clone());
            assert_eq!(error.code, ErrorCode::InvalidInput, "{rule}: {error}");
        }
        update(&mut file, &model(), accepted.clone())
            .unwrap_or_else(|e| panic!("{rule}: {accepted} should be accepted: {e}"));
    }
}

#[test]
fn cfg_01_cfg_03_a_new_schema_violation_is_refused_and_rolled_back() {
    let (_dir, mut file) = free_agent();
    for caller in [model(), authorized(), ToolCaller::Owner] {
        let error = refused_unchanged(
            &mut file,
            &caller,
            json!({ "path": "model.temperature", "value": 5 }),
        );
        assert_eq!(error.code, ErrorCode::InvalidInput);
    }
    let error = refused_unchanged(
        &mut file,
        &model(),
        json!({ "path": "handle", "value": "Not A Handle" }),
    );
    assert!(error.message.contains("config rejected: handle"), "{error}");
    assert!(
        file.config_set_path(
            adf_store::Caller::Owner,
            "model.temperature",
            ConfigAction::Set,
            json!(5)
        )
        .is_err()
    );
    update(
        &mut file,
        &ToolCaller::Owner,
        json!({ "path": "model.temperature", "value": 1.5 }),
    )
    .unwrap();
}

#[test]
fn cfg_02_an_already_invalid_config_stays_editable() {
    let (_dir, mut file) = free_agent();
    common::tamper_config(&file, |config| config["handle"] = json!("Bad Handle!"));
    update(
        &mut file,
        &model(),
        json!({ "path": "description", "value": "still editable" }),
    )
    .unwrap();
    let config = file.config().unwrap();
    assert_eq!(config["description"], json!("still editable"));
    assert_eq!(config["handle"], json!("Bad Handle!"));
    // A new, different violation is still refused.
    refused_unchanged(
        &mut file,
        &model(),
        json!({ "path": "autonomous", "value": "yes" }),
    );
}

// ---------------------------------------------------------------------------------------------
// Step 11: declaration integrity.
// ---------------------------------------------------------------------------------------------

#[test]
fn cfg_10_cfg_11_declarations_cannot_be_duplicated_or_de_restricted() {
    // CFG-10 as the checklist writes it: re-declaring sys_update_config without its restriction.
    let (_dir, mut file) = agent();
    let args = json!({ "path": "tools", "action": "append", "value": { "name": "sys_update_config", "enabled": true, "restricted": false } });
    let error = refused_unchanged(&mut file, &authorized(), args.clone());
    assert_hard(&error, &args);
    let text = config_text(&file);
    assert_hard(
        &call_approved(&mut file, &model(), UPDATE, args.clone()).unwrap_err(),
        &args,
    );
    assert_eq!(config_text(&file), text);

    // CFG-11: a second fs_read declaration would shadow the first.
    let args = json!({ "path": "tools", "action": "append", "value": { "name": "fs_read", "enabled": true } });
    let error = refused_unchanged(&mut file, &authorized(), args.clone());
    assert!(
        error
            .message
            .contains("already has an element with name 'fs_read'"),
        "{error}"
    );
    let args = json!({ "path": "tools.fs_write", "value": { "name": "fs_read", "enabled": true, "visible": true } });
    refused_unchanged(&mut file, &authorized(), args);

    // The restriction comes from the built-in default when the tool is not declared.
    let (_dir, mut file) = free_agent();
    let index = file.config().unwrap()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .position(|t| t["name"] == "compute_exec")
        .unwrap();
    file.config_set_path(
        adf_store::Caller::Owner,
        "tools",
        ConfigAction::Remove { index },
        Value::Null,
    )
    .unwrap();
    for value in [
        json!({ "name": "compute_exec", "enabled": true, "restricted": false }),
        json!({ "name": "compute_exec", "enabled": true }),
    ] {
        let args = json!({ "path": "tools", "action": "append", "value": value });
        let error = refused_unchanged(&mut file, &model(), args.clone());
        assert_hard(&error, &args);
        assert!(
            error
                .message
                .contains("'compute_exec' in tools is restricted"),
            "{error}"
        );
    }
    update(&mut file, &model(), json!({ "path": "tools", "action": "append", "value": { "name": "compute_exec", "enabled": true, "restricted": true } })).unwrap();

    // The owner declares what it likes.
    let (_dir, mut file) = agent();
    update(&mut file, &ToolCaller::Owner, json!({ "path": "tools", "action": "append", "value": { "name": "fs_read", "enabled": false } })).unwrap();
}

#[test]
fn cfg_11_integrity_covers_every_declaration_array() {
    let (_dir, mut file) = free_agent();
    owner_append(
        &mut file,
        "mcp.servers",
        json!({ "name": "gh", "transport": "stdio", "command": "gh-mcp", "restricted": true }),
    );
    owner_append(
        &mut file,
        "ws_connections",
        json!({ "id": "feed", "url": "wss://example.test/ws", "enabled": false }),
    );
    owner_append(
        &mut file,
        "stream_bindings",
        json!({ "id": "b1", "a": { "kind": "ws", "connection_id": "feed" }, "b": { "kind": "tcp", "host": "127.0.0.1", "port": 9000 } }),
    );
    owner_set(
        &mut file,
        "umbilical_taps",
        json!([{ "name": "tap", "lambda": "lib/t.ts:t", "filter": { "event_types": ["tool.call"] } }]),
    );
    owner_append(
        &mut file,
        "serving.api",
        json!({ "name": "status", "method": "GET", "path": "/status", "lambda": "lib/api.ts:s" }),
    );
    for args in [
        json!({ "path": "mcp.servers", "action": "append", "value": { "name": "gh", "transport": "http", "url": "https://x.test", "restricted": true } }),
        json!({ "path": "mcp.servers.gh", "value": { "name": "gh", "transport": "stdio", "command": "gh-mcp" } }),
        json!({ "path": "ws_connections", "action": "append", "value": { "id": "feed", "url": "wss://other.test", "enabled": true } }),
        json!({ "path": "stream_bindings", "action": "append", "value": { "id": "b1", "a": { "kind": "ws", "connection_id": "feed" }, "b": { "kind": "tcp", "host": "127.0.0.1", "port": 9001 } } }),
        json!({ "path": "umbilical_taps", "action": "append", "value": { "name": "tap", "lambda": "lib/t.ts:u", "filter": { "event_types": ["tool.call"] } } }),
        json!({ "path": "serving.api", "action": "append", "value": { "name": "status", "method": "GET", "path": "/status2", "lambda": "lib/api.ts:s" } }),
    ] {
        assert_hard(&refused_unchanged(&mut file, &model(), args.clone()), &args);
    }
    // Editing the existing entry in place is fine, and keeps its restriction.
    update(
        &mut file,
        &model(),
        json!({ "path": "mcp.servers.gh.command", "value": "gh-mcp2" }),
    )
    .unwrap();
    update(
        &mut file,
        &model(),
        json!({ "path": "ws_connections.feed.enabled", "value": true }),
    )
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// HIL for the restricted tool, and the agent's ordinary freedoms.
// ---------------------------------------------------------------------------------------------

#[test]
fn cfg_25_cfg_26_model_calls_need_approval_and_may_toggle_unlocked_tools() {
    let (_dir, mut file) = agent();
    let args = json!({ "path": "tools.db_execute.enabled", "value": true, "_reason": "need to write tables" });
    let text = config_text(&file);
    let error = call_with(&mut file, &model(), UPDATE, args.clone(), &DenyAll).unwrap_err();
    assert_eq!(error.code, ErrorCode::Denied);
    assert_eq!(config_text(&file), text);
    let all = tasks(&file);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].status, "denied");
    assert_eq!(reason(&all[0]), "restricted");
    assert_eq!(all[0].args["_reason"], "need to write tables");

    let result = call_with(&mut file, &model(), UPDATE, args, &ApproveAll).unwrap();
    assert_eq!(result, json!("Updated tools.db_execute.enabled."));
    let config = file.config().unwrap();
    let declaration = config["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "db_execute")
        .unwrap();
    assert_eq!(declaration["enabled"], json!(true));
    assert!(tasks(&file).iter().any(|t| t.status == "completed"));

    // Unauthorized code may not call the restricted tool at all; authorized code may.
    let error = refused_unchanged(
        &mut file,
        &code(),
        json!({ "path": "tools.db_execute.visible", "value": true }),
    );
    assert_eq!(error.code, ErrorCode::RequiresAuthorizedCode);
    update(
        &mut file,
        &authorized(),
        json!({ "path": "tools.db_execute.visible", "value": true }),
    )
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Persistence.
// ---------------------------------------------------------------------------------------------

#[test]
fn sto_12_unknown_fields_survive_an_update_in_place() {
    let (_dir, mut file) = free_agent();
    common::tamper_config(&file, |config| {
        config["future_field"] = json!({ "a": 1, "b": [true] });
        config["model"]["future_knob"] = json!(7);
    });
    let before = file.config().unwrap();
    let keys_before: Vec<String> = before.as_object().unwrap().keys().cloned().collect();
    update(
        &mut file,
        &model(),
        json!({ "path": "description", "value": "changed" }),
    )
    .unwrap();
    let after = file.config().unwrap();
    assert_eq!(after["future_field"], json!({ "a": 1, "b": [true] }));
    assert_eq!(after["model"]["future_knob"], json!(7));
    let keys_after: Vec<String> = after.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys_after, keys_before, "field order is kept");
}

#[test]
fn met_06_config_writes_keep_registry_keys_in_step() {
    let (_dir, mut file) = agent();
    let updated_before = file.meta_get("adf_updated_at").unwrap().map(|m| m.value);
    assert_eq!(
        update(
            &mut file,
            &ToolCaller::Owner,
            json!({ "path": "name", "value": "Renamed Agent" })
        )
        .unwrap(),
        json!("Updated name.")
    );
    assert_eq!(
        file.meta_get("adf_name").unwrap().unwrap().value,
        "Renamed Agent"
    );
    update(
        &mut file,
        &authorized(),
        json!({ "path": "handle", "value": "renamed-agent" }),
    )
    .unwrap();
    assert_eq!(
        file.meta_get("adf_handle").unwrap().unwrap().value,
        "renamed-agent"
    );
    let config = file.config().unwrap();
    let updated = file.meta_get("adf_updated_at").unwrap().unwrap().value;
    assert_ne!(Some(updated.clone()), updated_before);
    assert_eq!(config["metadata"]["updated_at"], json!(updated));
}

// ---------------------------------------------------------------------------------------------
// sys_get_config.
// ---------------------------------------------------------------------------------------------

#[test]
fn cfg_29_secrets_are_redacted_and_keys_kept() {
    let (_dir, mut file) = agent();
    owner_append(
        &mut file,
        "mcp.servers",
        json!({
            "name": "gh", "transport": "http", "url": "https://mcp.test",
            "env": { "GITHUB_TOKEN": "ghp_SECRET1", "LOG_LEVEL": "debug-SECRET2" },
            "headers": { "X-Api-Key": "SECRET3" },
            "bearer_token_env_var": "GITHUB_TOKEN",
            "env_schema": [{ "key": "GITHUB_TOKEN", "scope": "agent" }]
        }),
    );
    common::tamper_config(&file, |config| {
        config["providers"] = json!([{ "id": "p1", "type": "openai", "name": "P", "baseUrl": "https://api.test", "apiKey": "sk-SECRET4",
            "params": [{ "key": "api_key", "value": "SECRET5" }, { "key": "seed", "value": "7" }] }]);
    });
    owner_set(
        &mut file,
        "model.params",
        json!([{ "key": "x-auth-token", "value": "SECRET6" }]),
    );
    owner_set(
        &mut file,
        "adapters.telegram",
        json!({ "enabled": true, "config": { "bot_token": "SECRET7", "chat": "c1" } }),
    );

    for caller in [model(), authorized(), ToolCaller::Owner] {
        let config = call(&mut file, &caller, GET, json!({})).unwrap();
        assert!(!config.to_string().contains("SECRET"), "{config}");
        let server = &config["mcp"]["servers"][0];
        assert_eq!(
            server["env"],
            json!({ "GITHUB_TOKEN": "__redacted__", "LOG_LEVEL": "__redacted__" })
        );
        assert_eq!(server["headers"], json!({ "X-Api-Key": "__redacted__" }));
        assert_eq!(server["bearer_token_env_var"], json!("GITHUB_TOKEN"));
        assert_eq!(
            server["env_schema"],
            json!([{ "key": "GITHUB_TOKEN", "scope": "agent" }])
        );
        let provider = &config["providers"][0];
        assert_eq!(provider["apiKey"], json!("__redacted__"));
        assert_eq!(provider["baseUrl"], json!("https://api.test"));
        assert_eq!(
            provider["params"],
            json!([{ "key": "api_key", "value": "__redacted__" }, { "key": "seed", "value": "7" }])
        );
        assert_eq!(
            config["model"]["params"],
            json!([{ "key": "x-auth-token", "value": "__redacted__" }])
        );
        assert_eq!(
            config["adapters"]["telegram"]["config"],
            json!({ "bot_token": "__redacted__", "chat": "c1" })
        );
        assert_eq!(config["model"]["max_tokens"], json!(4096));
    }
    // Reading changed nothing.
    assert!(file.config().unwrap().to_string().contains("ghp_SECRET1"));
}

#[test]
fn cfg_30_cfg_31_tol_51_sections_and_the_tools_section() {
    let (_dir, mut file) = agent();
    let before = digest(&file);
    let config = file.config().unwrap();
    assert_eq!(call(&mut file, &model(), GET, json!({})).unwrap(), config);
    assert_eq!(
        call(&mut file, &model(), GET, json!({ "section": "config" })).unwrap(),
        config
    );
    assert_eq!(
        call(&mut file, &code(), GET, json!({ "section": "limits" })).unwrap(),
        config["limits"]
    );

    let tools = call(&mut file, &model(), GET, json!({ "section": "tools" })).unwrap();
    let tools = tools.as_array().unwrap();
    assert_eq!(tools.len(), config["tools"].as_array().unwrap().len());
    let find = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap().clone();
    let fs_delete = find("fs_delete");
    assert_eq!(
        (fs_delete["enabled"].clone(), fs_delete["visible"].clone()),
        (json!(false), json!(false))
    );
    assert_eq!(find("chat_info")["visible"], json!(false));
    let update_tool = find("sys_update_config");
    assert_eq!(update_tool["restricted"], json!(true));
    assert_eq!(update_tool["source"], json!("builtin"));
    assert_eq!(update_tool["implemented"], json!(true));
    // TOL-51: a disabled, hidden tool is listed with its description and schema too.
    assert!(
        fs_delete["description"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "{fs_delete}"
    );
    assert_eq!(fs_delete["parameters"]["type"], json!("object"));
    assert_eq!(update_tool["parameters"]["required"], json!(["path"]));
    assert_eq!(
        find("sys_get_config")["parameters"]["properties"]["section"]["enum"][3],
        json!("tools")
    );

    let status = call(
        &mut file,
        &model(),
        GET,
        json!({ "section": "provider_status" }),
    )
    .unwrap();
    assert_eq!(status["provider"], json!(""));
    assert_eq!(status["status"], Value::Null);
    let error = call(&mut file, &model(), GET, json!({ "section": "card" })).unwrap_err();
    assert_eq!(error.code, ErrorCode::MeshNotEnabled);
    let error = call(&mut file, &model(), GET, json!({ "section": "secrets" })).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert_eq!(digest(&file), before, "reading changes nothing");

    // CFG-31: duplicates collapse, first wins, restricted/locked stick.
    owner_append(
        &mut file,
        "tools",
        json!({ "name": "fs_read", "enabled": false, "restricted": true, "locked": true }),
    );
    let tools = call(&mut file, &model(), GET, json!({ "section": "tools" })).unwrap();
    let fs_read: Vec<&Value> = tools
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "fs_read")
        .collect();
    assert_eq!(fs_read.len(), 1);
    assert_eq!(
        (
            fs_read[0]["enabled"].clone(),
            fs_read[0]["restricted"].clone(),
            fs_read[0]["locked"].clone()
        ),
        (json!(true), json!(true), json!(true))
    );
}

#[test]
fn cfg_50_provider_type_is_checked_on_the_owner_path() {
    let (_dir, mut file) = agent();
    let bad = json!({ "path": "providers", "action": "append", "value": { "id": "p1", "type": "bogus" } });
    let error = refused_unchanged(&mut file, &ToolCaller::Owner, bad);
    assert!(error.message.contains("providers[].type"), "{error}");
    assert!(
        file.config_set_path(
            adf_store::Caller::Owner,
            "providers",
            ConfigAction::Append,
            json!({ "id": "p1", "type": "bogus" })
        )
        .is_err()
    );
    let good = json!({ "path": "providers", "action": "append", "value": { "id": "p1", "type": "openai-compatible", "baseUrl": "http://127.0.0.1:9" } });
    assert_eq!(
        update(&mut file, &ToolCaller::Owner, good).unwrap(),
        json!("Appended to providers.")
    );
    // An agent never edits providers at all.
    let args = json!({ "path": "providers.p1.baseUrl", "value": "http://evil.test" });
    assert_hard(
        &refused_unchanged(&mut file, &authorized(), args.clone()),
        &args,
    );
}

#[test]
fn tol_60_an_unlocked_disable_is_a_suggestion_the_agent_can_undo_and_a_lock_makes_it_stick() {
    let enabled = |file: &AdfFile| {
        file.config().unwrap()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "fs_delete")
            .map(|t| t["enabled"].clone())
    };
    let (_dir, mut file) = free_agent();
    owner_set(&mut file, "tools.fs_delete.enabled", json!(false));
    let enable = json!({ "path": "tools.fs_delete.enabled", "value": true });
    update(&mut file, &model(), enable.clone()).unwrap();
    assert_eq!(enabled(&file), Some(json!(true)));

    owner_set(&mut file, "tools.fs_delete.enabled", json!(false));
    owner_set(&mut file, "tools.fs_delete.locked", json!(true));
    assert_model_asks_owner(&mut file, enable);
    assert_eq!(enabled(&file), Some(json!(false)));
}
