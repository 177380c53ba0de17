//! The call pipeline itself, with probe tools registered next to the built-ins: the §8.7 access
//! matrix row by row for every caller, approvals, cross-cutting parameters, validation, and
//! "a failed call leaves the file unchanged".
use crate::common;

use std::cell::RefCell;
use std::sync::Arc;

use adf_runtime::tools::approval::{ApproveAll, DenyAll, Resolution, resolve_task};
use adf_runtime::tools::{
    ApprovalRequest, Approver, CallOutcome, Decision, ErrorCode, Tool, ToolCaller, ToolContext,
    ToolError, ToolRegistry,
};
use adf_store::{AdfFile, ConfigAction, FileProtection, FileWrite};
use serde_json::{Value, json};

/// Writes a meta key, so a call that ran is visible in the file.
struct Probe {
    name: &'static str,
}

impl Tool for Probe {
    fn name(&self) -> &'static str {
        self.name
    }
    fn description(&self) -> &'static str {
        "test probe"
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": { "value": { "type": "string" }, "fail": { "type": "boolean" }, "path": { "type": "string" } },
            "required": ["value"],
            "additionalProperties": false
        })
    }
    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let value = args["value"].as_str().unwrap_or_default();
        let caller = cx.store_caller();
        cx.file
            .meta_set(caller, &format!("ran_{}", self.name), value, None)?;
        if let Some(path) = args.get("path").and_then(Value::as_str) {
            cx.file
                .file_write(caller, path, value.as_bytes(), &FileWrite::default())?;
        }
        if args.get("fail").and_then(Value::as_bool) == Some(true) {
            return Err(ToolError::failed("asked to fail after writing"));
        }
        Ok(json!({ "ok": value, "full": cx.full }))
    }
}

/// The six rows of the §8.7 matrix, as (enabled, visible, restricted).
const ROWS: [(bool, bool, bool); 6] = [
    (false, false, false),
    (false, false, true),
    (true, false, false),
    (true, false, true),
    (true, true, false),
    (true, true, true),
];

fn probe_name(row: usize) -> &'static str {
    [
        "probe_0", "probe_1", "probe_2", "probe_3", "probe_4", "probe_5",
    ][row]
}

fn setup() -> (tempfile::TempDir, AdfFile, ToolRegistry) {
    let (dir, _path, mut file) = common::new_agent();
    let mut registry = ToolRegistry::with_builtins();
    for (row, (enabled, visible, restricted)) in ROWS.iter().enumerate() {
        registry.register(Arc::new(Probe {
            name: probe_name(row),
        }));
        let declaration = json!({ "name": probe_name(row), "enabled": enabled, "visible": visible, "restricted": restricted });
        file.config_set_path(
            adf_store::Caller::Owner,
            "tools",
            ConfigAction::Append,
            declaration,
        )
        .unwrap();
    }
    (dir, file, registry)
}

/// What happened to a call: ran, waited for approval then ran, or refused with a code.
#[derive(Debug, PartialEq)]
enum Seen {
    Free,
    Hil,
    Off(ErrorCode),
}

/// Records the approvals asked for and approves them.
#[derive(Default)]
struct Recorder {
    requests: RefCell<Vec<(ApprovalRequest, String)>>,
}

impl Approver for Recorder {
    fn decide(&self, file: &mut AdfFile, request: &ApprovalRequest) -> Result<Decision, ToolError> {
        let status = file
            .task(&request.task_id)?
            .map(|t| t.status)
            .unwrap_or_default();
        self.requests.borrow_mut().push((request.clone(), status));
        Ok(Decision::Approved)
    }
}

fn observe(file: &mut AdfFile, registry: &ToolRegistry, caller: &ToolCaller, row: usize) -> Seen {
    let recorder = Recorder::default();
    let before = common::digest(file);
    match registry.call(
        file,
        caller,
        probe_name(row),
        json!({ "value": "x", "_reason": "testing the matrix" }),
        &recorder,
    ) {
        Ok(CallOutcome::Done(_)) if recorder.requests.borrow().is_empty() => Seen::Free,
        Ok(CallOutcome::Done(_)) => Seen::Hil,
        Ok(other) => panic!("unexpected {other:?}"),
        Err(error) => {
            assert_eq!(
                common::digest(file),
                before,
                "a refused call leaves the file unchanged"
            );
            Seen::Off(error.code)
        }
    }
}

#[test]
fn tol_04_tol_05_tol_06_tol_07_access_matrix_row_by_row() {
    use ErrorCode::{Disabled, RequiresAuthorizedCode};
    // Expected per row: (advertised, model, authorized code, unauthorized code); model calls of
    // invisible tools follow the tools guide (Appendix C item 1).
    let expected = [
        (
            false,
            Seen::Off(Disabled),
            Seen::Off(Disabled),
            Seen::Off(Disabled),
        ),
        (false, Seen::Off(Disabled), Seen::Free, Seen::Off(Disabled)),
        (false, Seen::Free, Seen::Free, Seen::Free),
        (
            false,
            Seen::Hil,
            Seen::Free,
            Seen::Off(RequiresAuthorizedCode),
        ),
        (true, Seen::Free, Seen::Free, Seen::Free),
        (
            true,
            Seen::Hil,
            Seen::Free,
            Seen::Off(RequiresAuthorizedCode),
        ),
    ];
    let (_dir, mut file, registry) = setup();
    let config = file.config().unwrap();
    let advertised: Vec<String> = registry
        .model_definitions(&config)
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_owned())
        .collect();
    for (row, (shown, model, trusted, untrusted)) in expected.into_iter().enumerate() {
        assert_eq!(
            advertised.contains(&probe_name(row).to_owned()),
            shown,
            "row {row} advertised"
        );
        assert_eq!(
            observe(&mut file, &registry, &common::model(), row),
            model,
            "row {row} model"
        );
        assert_eq!(
            observe(&mut file, &registry, &common::authorized(), row),
            trusted,
            "row {row} authorized code"
        );
        assert_eq!(
            observe(&mut file, &registry, &common::code(), row),
            untrusted,
            "row {row} unauthorized code"
        );
    }
}

#[test]
fn tol_08_tol_09_hil_task_records_the_request_and_the_outcome() {
    let (_dir, mut file, registry) = setup();
    let recorder = Recorder::default();
    let result = registry
        .call(
            &mut file,
            &common::model(),
            "probe_5",
            json!({ "value": "v", "_reason": "because" }),
            &recorder,
        )
        .unwrap();
    assert_eq!(
        result,
        CallOutcome::Done(json!({ "ok": "v", "full": false }))
    );
    let requests = recorder.requests.borrow();
    let (request, status_while_waiting) = &requests[0];
    assert_eq!(
        status_while_waiting, "pending_approval",
        "the task exists before the owner is asked"
    );
    assert_eq!(request.approval_meta, json!({ "reason": "restricted" }));
    assert_eq!(
        request.args["_reason"], "because",
        "the model's reason rides along"
    );
    let task = file.task(&request.task_id).unwrap().unwrap();
    assert_eq!(task.status, "completed");
    assert!(task.requires_authorization && task.executor_managed);
    assert!(task.origin.unwrap().starts_with("hil:"));
    assert!(task.completed_at.is_some());
    assert_eq!(file.meta_get("ran_probe_5").unwrap().unwrap().value, "v");
}

#[test]
fn denied_call_does_not_run_and_records_the_denial() {
    let (_dir, mut file, registry) = setup();
    let error = registry
        .call(
            &mut file,
            &common::model(),
            "probe_5",
            json!({ "value": "v" }),
            &DenyAll,
        )
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::Denied);
    assert!(file.meta_get("ran_probe_5").unwrap().is_none());
    let tasks = file.tasks(Some("denied")).unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        tasks[0].error.as_deref(),
        Some("no one is available to approve")
    );
}

#[test]
fn fil_12_protection_refusal_is_a_one_time_owner_request() {
    let (_dir, mut file, registry) = setup();
    file.file_write(
        adf_store::Caller::Owner,
        "locked.md",
        b"v0",
        &FileWrite {
            protection_if_new: Some(FileProtection::ReadOnly),
            ..FileWrite::default()
        },
    )
    .unwrap();
    let args = json!({ "value": "v1", "path": "locked.md" });
    let recorder = Recorder::default();
    registry
        .call(
            &mut file,
            &common::model(),
            "probe_4",
            args.clone(),
            &recorder,
        )
        .unwrap();
    assert_eq!(file.file_read("locked.md").unwrap().unwrap().content, b"v1");
    {
        let requests = recorder.requests.borrow();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].0.approval_meta["reason"], "protection");
        assert_eq!(
            requests[0].0.approval_meta["protection"]["target"],
            "locked.md"
        );
        assert_eq!(
            requests[0].0.approval_meta["protection"]["level"],
            "read_only"
        );
    }
    assert_eq!(
        file.file_read("locked.md")
            .unwrap()
            .unwrap()
            .info
            .protection,
        "read_only",
        "protection kept"
    );
    // The override was for that call only: the next identical call asks again.
    registry
        .call(
            &mut file,
            &common::model(),
            "probe_4",
            args.clone(),
            &recorder,
        )
        .unwrap();
    assert_eq!(recorder.requests.borrow().len(), 2);
    // Unauthorized code gets a hard error and no request.
    let error = registry
        .call(&mut file, &common::code(), "probe_4", args, &recorder)
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::WriteError);
    assert_eq!(recorder.requests.borrow().len(), 2);
}

#[test]
fn failed_call_leaves_the_file_unchanged() {
    let (_dir, mut file, registry) = setup();
    let before = common::digest(&file);
    let error = registry
        .call(
            &mut file,
            &common::model(),
            "probe_4",
            json!({ "value": "w", "path": "new.md", "fail": true }),
            &DenyAll,
        )
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::ToolError);
    assert_eq!(
        common::digest(&file),
        before,
        "the meta write and the file write both rolled back"
    );
}

#[test]
fn tol_09_reserved_parameters_stripped_and_arguments_validated() {
    let (_dir, mut file, registry) = setup();
    let before = common::digest(&file);
    for bad in [
        json!({}),
        json!({ "value": 3 }),
        json!({ "value": "x", "extra": 1 }),
        json!("not an object"),
    ] {
        let error = registry
            .call(
                &mut file,
                &common::model(),
                "probe_4",
                bad.clone(),
                &DenyAll,
            )
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidInput, "{bad}");
    }
    assert_eq!(common::digest(&file), before);
    // `_reason` never reaches the tool (its schema forbids unknown keys), `_full` only from code.
    let model = registry.call(
        &mut file,
        &common::model(),
        "probe_4",
        json!({ "value": "a", "_reason": "r", "_full": true }),
        &DenyAll,
    );
    assert_eq!(
        model.unwrap(),
        CallOutcome::Done(json!({ "ok": "a", "full": false }))
    );
    let code = registry.call(
        &mut file,
        &common::code(),
        "probe_4",
        json!({ "value": "a", "_full": true }),
        &DenyAll,
    );
    assert_eq!(
        code.unwrap(),
        CallOutcome::Done(json!({ "ok": "a", "full": true }))
    );
    let unknown = registry
        .call(
            &mut file,
            &common::model(),
            "no_such_tool",
            json!({}),
            &DenyAll,
        )
        .unwrap_err();
    assert_eq!(unknown.code, ErrorCode::NotFound);
}

/// The model calls `tool` with `_async: true`; the call must be queued. Its task id and status.
fn queue(registry: &ToolRegistry, file: &mut AdfFile, tool: &str, value: &str) -> (String, String) {
    let queued = registry
        .call(
            file,
            &common::model(),
            tool,
            json!({ "value": value, "_async": true }),
            &DenyAll,
        )
        .unwrap();
    let CallOutcome::Queued { task_id, status } = queued else {
        panic!("not queued")
    };
    (task_id, status)
}

#[test]
fn async_calls_become_tasks_and_resolve_by_the_rules() {
    let (_dir, mut file, registry) = setup();
    let (task_id, status) = queue(&registry, &mut file, "probe_4", "bg");
    assert_eq!(status, "running");
    assert!(
        file.meta_get("ran_probe_4").unwrap().is_none(),
        "nothing ran yet"
    );
    let result = registry
        .run_task(&mut file, &task_id, &common::model())
        .unwrap();
    assert_eq!(result["ok"], "bg");
    assert_eq!(file.task(&task_id).unwrap().unwrap().status, "completed");

    // A restricted `_async` call waits for approval without blocking the caller.
    let (task_id, status) = queue(&registry, &mut file, "probe_5", "later");
    assert_eq!(status, "pending_approval");
    // Unauthorized code may only escalate it; the owner approves, which runs it.
    let refused = resolve_task(
        &registry,
        &mut file,
        &task_id,
        Resolution::Approve {
            modified_args: None,
        },
        &common::code(),
        false,
    );
    assert_eq!(refused.unwrap_err().code, ErrorCode::RequiresAuthorizedCode);
    let outcome = resolve_task(
        &registry,
        &mut file,
        &task_id,
        Resolution::Approve {
            modified_args: None,
        },
        &ToolCaller::Owner,
        false,
    )
    .unwrap();
    assert_eq!(outcome["status"], "completed");
    assert_eq!(
        file.meta_get("ran_probe_5").unwrap().unwrap().value,
        "later"
    );
    let again = resolve_task(
        &registry,
        &mut file,
        &task_id,
        Resolution::Deny { reason: None },
        &ToolCaller::Owner,
        false,
    );
    assert_eq!(again.unwrap_err().code, ErrorCode::InvalidState);
}

#[test]
fn task_resolve_deny_and_escalate() {
    let (_dir, mut file, registry) = setup();
    let (task_id, _) = queue(&registry, &mut file, "probe_4", "v");
    // `running` tasks are not resolvable.
    let error = resolve_task(
        &registry,
        &mut file,
        &task_id,
        Resolution::Escalate,
        &common::code(),
        false,
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidState);

    let (task_id, _) = queue(&registry, &mut file, "probe_5", "v");
    let escalated = resolve_task(
        &registry,
        &mut file,
        &task_id,
        Resolution::Escalate,
        &common::code(),
        true,
    )
    .unwrap();
    assert_eq!(escalated["status"], "pending_approval");
    assert!(file.task(&task_id).unwrap().unwrap().requires_authorization);
    let denied = resolve_task(
        &registry,
        &mut file,
        &task_id,
        Resolution::Deny {
            reason: Some("no".into()),
        },
        &common::authorized(),
        false,
    )
    .unwrap();
    assert_eq!(denied["status"], "denied");
    let task = file.task(&task_id).unwrap().unwrap();
    assert_eq!(
        (task.status.as_str(), task.error.as_deref()),
        ("denied", Some("no"))
    );
}

#[test]
fn excluded_tools_are_refused_for_code() {
    let (_dir, mut file, registry) = setup();
    for name in ["say", "ask", "loop_compact", "loop_clear"] {
        match registry.call(&mut file, &common::code(), name, json!({}), &ApproveAll) {
            Err(error) => assert_eq!(error.code, ErrorCode::ExcludedTool, "{name}: {error}"),
            Ok(outcome) => panic!("{name} ran from code: {outcome:?}"),
        }
    }
}

#[test]
fn tol_duplicate_declarations_keep_restricted_sticky() {
    let (_dir, mut file, registry) = setup();
    // A later duplicate cannot un-restrict probe_5.
    file.config_set_path(
        adf_store::Caller::Owner,
        "tools",
        ConfigAction::Append,
        json!({ "name": "probe_5", "enabled": true, "visible": true, "restricted": false }),
    )
    .unwrap();
    let error = registry
        .call(
            &mut file,
            &common::code(),
            "probe_5",
            json!({ "value": "x" }),
            &DenyAll,
        )
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::RequiresAuthorizedCode);
}

#[test]
fn tol_01_tol_03_undeclared_and_flagless_tools_are_not_callable() {
    let (_dir, mut file, mut registry) = setup();
    registry.register(Arc::new(Probe { name: "probe_bare" }));
    registry.register(Arc::new(Probe {
        name: "probe_undeclared",
    }));
    file.config_set_path(
        adf_store::Caller::Owner,
        "tools",
        ConfigAction::Append,
        json!({ "name": "probe_bare" }),
    )
    .unwrap();
    for caller in [common::model(), common::code(), common::authorized()] {
        for name in ["probe_bare", "probe_undeclared"] {
            let error = registry
                .call(
                    &mut file,
                    &caller,
                    name,
                    json!({ "value": "x" }),
                    &ApproveAll,
                )
                .unwrap_err();
            assert_eq!(error.code, ErrorCode::Disabled, "{name} by {caller:?}");
        }
    }
    let config = file.config().unwrap();
    assert!(
        registry
            .model_definitions(&config)
            .iter()
            .all(|d| d["name"] != "probe_bare")
    );
    let described = registry.describe(&config);
    let bare = described
        .iter()
        .find(|d| d["name"] == "probe_bare")
        .unwrap();
    assert_eq!(
        (bare["enabled"].as_bool(), bare["visible"].as_bool()),
        (Some(false), Some(false))
    );
}

#[test]
fn tol_09_model_schemas_carry_reason() {
    let (_dir, file, registry) = setup();
    let definitions = registry.model_definitions(&file.config().unwrap());
    assert!(!definitions.is_empty());
    for definition in definitions {
        assert_eq!(
            definition["parameters"]["properties"]["_reason"]["type"], "string",
            "{}",
            definition["name"]
        );
    }
}
