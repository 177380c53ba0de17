//! An agent's contents through the owner's eyes: config, files, meta, timers, inbox, outbox,
//! tasks (with approve/deny through `resolve_task`), logs. Every write runs as
//! [`Caller::Owner`] in one job on the agent's store worker, so it is one transaction; file,
//! config and task writes run through `Daemon::run_observed`, so the task, log, inbox and
//! outbox rows they (or another process before them) added raise their triggers.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value, json};

use adf_runtime::schedule::Schedule;
use adf_runtime::tools::ErrorCode;
use adf_runtime::tools::access::ToolCaller;
use adf_runtime::tools::approval::{Resolution, resolve_task};
use adf_store::messages::{Mailbox, MessageFilter};
use adf_store::timers::NewTimer;
use adf_store::views::LogFilter;
use adf_store::{Caller, FileProtection, FileWrite, MetaProtection, StoreError, TaskRow, TimerRow};

use super::{AppState, JsonBody, find, success, text_field};
use crate::daemon::{Agent, info_from_config};
use crate::error::{ApiError, ApiResult};
use crate::hil::Verdict;

type Params = Query<HashMap<String, String>>;

// ---------------------------------------------------------------------------------- config

pub(super) async fn config_get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let config = agent.job(|file| file.config()).await?;
    Ok(Json(json!({ "agentId": agent.id, "config": config })).into_response())
}

/// Replaces the whole config as the owner: the store rejects only new schema violations and
/// changes of `id`/`adf_version`. Emits `config.changed` with the changed top-level key
/// names, never their values.
pub(super) async fn config_put(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(new_config): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let (before, after, handle_meta) = state
        .daemon
        .run_observed(&agent, move |file| {
            let before = file.config()?;
            file.config_replace(Caller::Owner, new_config)?;
            let handle = file.meta_get("adf_handle")?.map(|m| m.value);
            Ok((before, file.config()?, handle))
        })
        .await?;
    agent.triggers().invalidate();
    if after.get("state").and_then(Value::as_str) == Some("off") {
        state.daemon.release_network(&agent.id);
    } else {
        state.daemon.configure_umbilical(&agent.id, &after);
        let declared = ["ws_connections", "stream_bindings", "stream_bind"];
        if declared.iter().any(|key| before.get(key) != after.get(key)) {
            state.daemon.reconcile_network(&agent).await;
        }
        if before.get("adapters") != after.get("adapters") {
            state.daemon.restart_adapters(&agent).await;
        }
    }
    // A stored state of hibernate (or leaving it) moves the hibernate nudge's wake.
    state.daemon.rearm_timers(&agent).await;
    let fresh = info_from_config(&after, handle_meta);
    agent.update_info(|info| {
        // The display state is live and moves only through POST /state (as in the reference).
        info.name = fresh.name;
        info.handle = fresh.handle;
        info.autostart = fresh.autostart;
    });
    let changed: Vec<String> = changed_keys(&before, &after);
    let updated_at = after
        .pointer("/metadata/updated_at")
        .cloned()
        .unwrap_or(Value::Null);
    state
        .daemon
        .emit(
            &agent,
            "config.changed",
            "system:daemon",
            json!({ "updated_at": updated_at, "changed_keys": changed }),
        )
        .await;
    Ok(success(&agent))
}

fn changed_keys(before: &Value, after: &Value) -> Vec<String> {
    let empty = Map::new();
    let before = before.as_object().unwrap_or(&empty);
    let after = after.as_object().unwrap_or(&empty);
    let mut keys: Vec<String> = after
        .iter()
        .filter(|(k, v)| *k != "metadata" && before.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .chain(before.keys().filter(|k| !after.contains_key(*k)).cloned())
        .collect();
    keys.sort();
    keys
}

// ---------------------------------------------------------------------------------- files

pub(super) async fn files_list(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let files = agent.job(|file| file.file_list("")).await?;
    Ok(Json(json!({ "agentId": agent.id, "files": files })).into_response())
}

pub(super) fn required_path(params: &HashMap<String, String>) -> ApiResult<String> {
    params
        .get("path")
        .filter(|p| !p.is_empty())
        .cloned()
        .ok_or_else(|| ApiError::bad_request("path is required"))
}

/// Whether content of this MIME type is shown as text when it is valid UTF-8.
fn is_textual(mime: &str) -> bool {
    mime.starts_with("text/")
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || matches!(
            mime,
            "application/json"
                | "application/javascript"
                | "application/typescript"
                | "application/xml"
                | "application/yaml"
                | "application/x-yaml"
                | "image/svg+xml"
        )
}

pub(super) async fn file_get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Params,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let path = required_path(&params)?;
    let lookup = path.clone();
    let entry = agent
        .job(move |file| file.file_read(&lookup))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("Unknown file \"{path}\"")))?;
    let mut body = Map::new();
    body.insert("agentId".into(), json!(agent.id));
    if let Value::Object(info) = serde_json::to_value(&entry.info)
        .map_err(|e| ApiError::internal(format!("cannot encode file info: {e}")))?
    {
        body.extend(info);
    }
    let mime = entry.info.mime_type.as_deref().unwrap_or("");
    match std::str::from_utf8(&entry.content) {
        Ok(text) if is_textual(mime) => {
            body.insert("encoding".into(), json!("utf-8"));
            body.insert("content".into(), json!(text));
        }
        _ => {
            body.insert("encoding".into(), json!("base64"));
            body.insert(
                "content_base64".into(),
                json!(BASE64.encode(&entry.content)),
            );
        }
    }
    Ok(Json(Value::Object(body)).into_response())
}

/// Writes a file as the owner. `protection` applies to a new file and, because the owner may
/// change protections, to an existing one too.
pub(super) async fn file_put(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Params,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let path = required_path(&params)?;
    let text = |key: &str| body.get(key).and_then(Value::as_str);
    let content: Vec<u8> = if let Some(encoded) = text("content_base64").or(text("contentBase64")) {
        BASE64
            .decode(encoded.trim())
            .map_err(|e| ApiError::bad_request(format!("content_base64 is not base64: {e}")))?
    } else if let Some(content) = text("content") {
        content.as_bytes().to_vec()
    } else {
        return Err(ApiError::bad_request(
            "content or content_base64 is required",
        ));
    };
    let protection = match text("protection") {
        Some(level) => Some(FileProtection::parse(level).map_err(|_| {
            ApiError::bad_request("protection must be one of: none, read_only, no_delete")
        })?),
        None => None,
    };
    let options = FileWrite {
        mime_type: text("mime_type").or(text("mimeType")).map(str::to_owned),
        protection_if_new: protection,
    };
    let bytes = content.len();
    let write_path = path.clone();
    // Observed: rows other writers added since the agent's last job become events here too.
    state
        .daemon
        .run_observed(&agent, move |file| {
            let outcome = file.file_write(Caller::Owner, &write_path, &content, &options)?;
            if let (Some(level), false) = (protection, outcome.created) {
                file.file_set_protection(Caller::Owner, &write_path, level)?;
            }
            Ok(())
        })
        .await?;
    state
        .daemon
        .emit(
            &agent,
            "file.written",
            "system:daemon",
            json!({ "path": path.clone(), "bytes": bytes }),
        )
        .await;
    let change = adf_runtime::triggers::TriggerEvent::new(
        adf_runtime::triggers::TriggerKind::OnFileChange,
        adf_store::time::now_ms(),
        json!({ "path": path, "operation": "write", "size": bytes }),
    );
    state.daemon.dispatch(&agent, change).await;
    Ok(success(&agent))
}

/// Whether a query flag is on (`force=true`, `force=1`, or a bare `force`).
pub(super) fn flag(params: &HashMap<String, String>, name: &str) -> ApiResult<bool> {
    match params.get(name).map(|v| v.to_ascii_lowercase()) {
        None => Ok(false),
        Some(v) if matches!(v.as_str(), "" | "true" | "1" | "yes") => Ok(true),
        Some(v) if matches!(v.as_str(), "false" | "0" | "no") => Ok(false),
        Some(_) => Err(ApiError::bad_request(format!(
            "{name} must be true or false"
        ))),
    }
}

/// Deletes a file as the owner. A `read_only` or `no_delete` file is kept unless the request
/// says `force=true` (409 otherwise, with `success: false` as the reference answers); the
/// store makes that decision (`file_delete_as_owner`), in the delete's own transaction. A
/// delete is a file change like a write: `file.deleted` and `on_file_change` with operation
/// `delete` (FIL-20).
pub(super) async fn file_delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Params,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let path = required_path(&params)?;
    let force = flag(&params, "force")?;
    let target = path.clone();
    // Observed, as a put: rows other writers added since the agent's last job become events.
    let deleted = state
        .daemon
        .run_observed(&agent, move |file| {
            file.file_delete_as_owner(&target, force)
        })
        .await;
    match deleted {
        Ok(_) => {}
        Err(StoreError::Protected { level, .. }) => {
            let mut refusal = ApiError::new(
                StatusCode::CONFLICT,
                format!("file \"{path}\" is {level}; delete it with force=true if you mean to"),
            );
            refusal.details = json!({
                "code": "FILE_PROTECTED",
                "protection": level,
                "agentId": agent.id,
                "success": false,
            })
            .as_object()
            .cloned();
            return Err(refusal);
        }
        Err(StoreError::NotFound { .. }) => {
            return Err(ApiError::not_found(format!("Unknown file \"{path}\"")));
        }
        Err(other) => return Err(other.into()),
    }
    state
        .daemon
        .emit(
            &agent,
            "file.deleted",
            "system:daemon",
            json!({ "path": path.clone() }),
        )
        .await;
    let change = adf_runtime::triggers::TriggerEvent::new(
        adf_runtime::triggers::TriggerKind::OnFileChange,
        adf_store::time::now_ms(),
        json!({ "path": path, "operation": "delete" }),
    );
    state.daemon.dispatch(&agent, change).await;
    Ok(success(&agent))
}

/// `PATCH /files/protection {path, protection}`: the owner changes a file's protection.
pub(super) async fn file_protection(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let path = text_field(&body, "path");
    let level = body
        .get("protection")
        .and_then(Value::as_str)
        .and_then(|l| FileProtection::parse(l).ok());
    let (Some(path), Some(level)) = (path, level) else {
        return Err(ApiError::bad_request(
            "path and valid protection are required",
        ));
    };
    let path = path.to_owned();
    agent
        .job(move |file| file.file_set_protection(Caller::Owner, &path, level))
        .await?;
    Ok(success(&agent))
}

/// `PATCH /files/authorized {path, authorized}`: the owner trusts (or stops trusting) a file
/// as code (§4.3).
pub(super) async fn file_authorized(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let path = text_field(&body, "path");
    let authorized = body.get("authorized").and_then(Value::as_bool);
    let (Some(path), Some(authorized)) = (path, authorized) else {
        return Err(ApiError::bad_request(
            "path and authorized (boolean) are required",
        ));
    };
    let path = path.to_owned();
    agent
        .job(move |file| file.file_set_authorized(Caller::Owner, &path, authorized))
        .await?;
    Ok(success(&agent))
}

// ---------------------------------------------------------------------------------- meta

pub(super) async fn meta_list(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let entries = agent.job(|file| file.meta_list()).await?;
    Ok(Json(json!({ "agentId": agent.id, "entries": entries })).into_response())
}

fn parse_meta_protection(value: Option<&Value>) -> ApiResult<Option<MetaProtection>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(level)) => MetaProtection::parse(level).map(Some).map_err(|_| {
            ApiError::bad_request("protection must be one of: none, readonly, increment")
        }),
        Some(_) => Err(ApiError::bad_request(
            "protection must be one of: none, readonly, increment",
        )),
    }
}

pub(super) async fn meta_put(
    State(state): State<AppState>,
    Path((id, key)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let value = match body.get("value") {
        Some(Value::String(s)) => s.clone(),
        // Counters and flags arrive as numbers or booleans from some clients; meta stores text.
        Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
        _ => return Err(ApiError::bad_request("value is required (a string)")),
    };
    let protection = parse_meta_protection(body.get("protection"))?;
    agent
        .job(move |file| file.meta_set(Caller::Owner, &key, &value, protection))
        .await?;
    Ok(success(&agent))
}

pub(super) async fn meta_delete(
    State(state): State<AppState>,
    Path((id, key)): Path<(String, String)>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    agent
        .job(move |file| file.meta_delete(Caller::Owner, &key))
        .await?;
    Ok(success(&agent))
}

pub(super) async fn meta_protection(
    State(state): State<AppState>,
    Path((id, key)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let protection = parse_meta_protection(body.get("protection"))?
        .ok_or_else(|| ApiError::bad_request("protection is required"))?;
    agent
        .job(move |file| file.meta_set_protection(Caller::Owner, &key, protection))
        .await?;
    Ok(success(&agent))
}

// ---------------------------------------------------------------------------------- timers

/// A timer as the reference lists it: optional columns appear only when set.
fn timer_view(timer: &TimerRow) -> Value {
    let mut view = Map::new();
    view.insert("id".into(), json!(timer.id));
    view.insert("schedule".into(), timer.schedule.clone());
    view.insert("next_wake_at".into(), json!(timer.next_wake_at));
    view.insert("payload".into(), json!(timer.payload));
    view.insert("scope".into(), timer.scope.clone());
    if let Some(lambda) = &timer.lambda {
        view.insert("lambda".into(), json!(lambda));
        view.insert("warm".into(), json!(timer.warm));
    }
    view.insert("run_count".into(), json!(timer.run_count));
    view.insert("created_at".into(), json!(timer.created_at));
    if let Some(last) = timer.last_fired_at {
        view.insert("last_fired_at".into(), json!(last));
    }
    if timer.locked {
        view.insert("locked".into(), json!(true));
    }
    if timer.expired {
        view.insert("expired".into(), json!(true));
    }
    if let Some(loop_name) = &timer.r#loop {
        view.insert("loop".into(), json!(loop_name));
    }
    Value::Object(view)
}

pub(super) async fn timers_list(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let timers = agent.job(|file| file.timers()).await?;
    let timers: Vec<Value> = timers.iter().map(timer_view).collect();
    Ok(Json(json!({ "agentId": agent.id, "timers": timers })).into_response())
}

/// The reference's flat timer body (`mode: once_at|once_delay|interval|cron`) as the schedule
/// object `Schedule::resolve` reads.
pub(super) fn schedule_input(body: &Value) -> ApiResult<Value> {
    let mode = body.get("mode").and_then(Value::as_str).unwrap_or("");
    let kind = match mode {
        "once_at" => "once",
        "once_delay" => "delay",
        "interval" => "interval",
        "cron" => "cron",
        _ => {
            return Err(ApiError::bad_request(
                "mode must be one of: once_at, once_delay, interval, cron",
            ));
        }
    };
    let mut schedule = Map::new();
    schedule.insert("type".into(), json!(kind));
    for key in [
        "at", "delay_ms", "every_ms", "start_at", "end_at", "max_runs", "cron",
    ] {
        if let Some(value) = body.get(key).filter(|v| !v.is_null()) {
            schedule.insert(key.into(), value.clone());
        }
    }
    Ok(Value::Object(schedule))
}

pub(super) async fn timer_add(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let input = schedule_input(&body)?;
    let (schedule, next_wake_at) = Schedule::resolve(&input, adf_store::time::now_ms())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let scope = match body.get("scope") {
        None | Some(Value::Null) => json!(["agent"]),
        Some(scope) => scope.clone(),
    };
    let text = |key: &str| body.get(key).and_then(Value::as_str).map(str::to_owned);
    let payload = text("payload");
    let lambda = text("lambda");
    let flag = |key: &str| body.get(key).and_then(Value::as_bool).unwrap_or(false);
    let (warm, locked) = (flag("warm"), flag("locked"));
    let stored = schedule.to_stored();
    let timer_id = agent
        .job(move |file| {
            file.timer_insert(&NewTimer {
                schedule: &stored,
                next_wake_at,
                payload: payload.as_deref(),
                scope: &scope,
                lambda: lambda.as_deref(),
                warm,
                locked,
                r#loop: None,
            })
        })
        .await?;
    state.daemon.rearm_timers(&agent).await;
    Ok(Json(json!({ "agentId": agent.id, "success": true, "id": timer_id })).into_response())
}

pub(super) async fn timer_delete(
    State(state): State<AppState>,
    Path((id, timer_id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let timer_id: i64 = timer_id
        .parse()
        .map_err(|_| ApiError::bad_request("timerId must be an integer"))?;
    match agent
        .job(move |file| file.timer_delete(Caller::Owner, timer_id))
        .await
    {
        Ok(()) => {
            state.daemon.rearm_timers(&agent).await;
            Ok(success(&agent))
        }
        Err(StoreError::NotFound { .. }) => {
            Err(ApiError::not_found(format!("Unknown timer \"{timer_id}\"")))
        }
        Err(other) => Err(other.into()),
    }
}

// ---------------------------------------------------------------------------------- messages

/// Columns holding JSON text: parsed, and left out when empty (as the reference lists them).
const JSON_COLUMNS: [&str; 3] = ["attachments", "meta", "source_context"];

fn message_view(mut row: Map<String, Value>) -> Value {
    for column in JSON_COLUMNS {
        match row.get(column) {
            Some(Value::Null) => {
                row.remove(column);
            }
            Some(Value::String(text)) => {
                if let Ok(parsed) = serde_json::from_str::<Value>(text) {
                    row.insert(column.into(), parsed);
                }
            }
            _ => {}
        }
    }
    Value::Object(row)
}

async fn mailbox(
    state: AppState,
    id: String,
    params: HashMap<String, String>,
    mailbox: Mailbox,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let status = params.get("status").filter(|s| !s.is_empty()).cloned();
    if let Some(status) = &status
        && !mailbox.statuses().contains(&status.as_str())
    {
        return Err(ApiError::bad_request(format!(
            "status must be one of: {}",
            mailbox.statuses().join(", ")
        )));
    }
    let filter = MessageFilter {
        status,
        ..MessageFilter::default()
    };
    let rows = agent
        .job(move |file| file.messages(mailbox, &filter, None))
        .await?;
    let messages: Vec<Value> = rows.into_iter().map(message_view).collect();
    Ok(Json(json!({ "agentId": agent.id, "messages": messages })).into_response())
}

pub(super) async fn inbox(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Params,
) -> ApiResult<Response> {
    mailbox(state, id, params, Mailbox::Inbox).await
}

pub(super) async fn outbox(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Params,
) -> ApiResult<Response> {
    mailbox(state, id, params, Mailbox::Outbox).await
}

// ---------------------------------------------------------------------------------- tasks

const TASK_STATUSES: [&str; 7] = [
    "pending",
    "pending_approval",
    "running",
    "completed",
    "failed",
    "denied",
    "cancelled",
];

/// A task as the reference shows it: `args` as the JSON text stored in the row.
fn task_view(task: &TaskRow) -> Value {
    let args = match &task.args {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    json!({
        "id": task.id,
        "tool": task.tool,
        "args": args,
        "status": task.status,
        "result": task.result,
        "error": task.error,
        "created_at": task.created_at,
        "completed_at": task.completed_at,
        "origin": task.origin,
        "requires_authorization": task.requires_authorization,
        "executor_managed": task.executor_managed,
    })
}

pub(super) fn parse_limit(params: &HashMap<String, String>, default: usize) -> ApiResult<usize> {
    match params.get("limit") {
        None => Ok(default),
        Some(text) => match text.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n.min(1000)),
            _ => Err(ApiError::bad_request("limit must be a positive integer")),
        },
    }
}

pub(super) async fn tasks_list(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Params,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let status = params.get("status").filter(|s| !s.is_empty()).cloned();
    if let Some(status) = &status
        && !TASK_STATUSES.contains(&status.as_str())
    {
        return Err(ApiError::bad_request(format!(
            "status must be one of: {}",
            TASK_STATUSES.join(", ")
        )));
    }
    let limit = parse_limit(&params, 100)?;
    let tasks = agent.job(move |file| file.tasks(status.as_deref())).await?;
    let tasks: Vec<Value> = tasks.iter().take(limit).map(task_view).collect();
    Ok(Json(json!({ "agentId": agent.id, "tasks": tasks })).into_response())
}

pub(super) async fn task_get(
    State(state): State<AppState>,
    Path((id, task_id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let lookup = task_id.clone();
    let task = agent
        .job(move |file| file.task(&lookup))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("Unknown task \"{task_id}\"")))?;
    Ok(Json(json!({ "agentId": agent.id, "task": task_view(&task) })).into_response())
}

/// Approves or denies a task as the owner through `resolve_task` (§13.4), the one function
/// that moves a task out of `pending`; emits `hil.resolved`.
pub(super) async fn task_resolve(
    State(state): State<AppState>,
    Path((id, task_id)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let action = body.get("action").and_then(Value::as_str).unwrap_or("");
    let reason = text_field(&body, "reason").map(str::to_owned);
    let modified_args = body
        .get("modifiedArgs")
        .or(body.get("modified_args"))
        .filter(|v| !v.is_null())
        .cloned();
    let resolution = match action {
        "approve" => Resolution::Approve { modified_args },
        "deny" => Resolution::Deny { reason },
        "pending_approval" => Resolution::Escalate,
        _ => {
            return Err(ApiError::bad_request(
                "action must be one of: approve, deny, pending_approval",
            ));
        }
    };
    let approved = action == "approve";
    if let Some(answer) = resolve_live(&agent, &task_id, &resolution) {
        return Ok(answer);
    }
    let tools = state.daemon.tools();
    let target = task_id.clone();
    // Observed: an approved call may create tasks and log rows (on_task_create, on_logs).
    let outcome = state
        .daemon
        .run_observed(&agent, move |file| {
            let Some(task) = file.task(&target)? else {
                return Ok(Err(ApiError::not_found(format!(
                    "Unknown task \"{target}\""
                ))));
            };
            let result = resolve_task(
                &tools,
                file,
                &target,
                resolution,
                &ToolCaller::Owner,
                false,
            );
            let after = file.task(&target)?;
            Ok(match result {
                Ok(value) => Ok((value, after)),
                Err(error) if error.code == ErrorCode::InvalidState => Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!(
                        "Task \"{target}\" is in status \"{}\" - can only resolve pending or pending_approval tasks",
                        task.status
                    ),
                )),
                Err(error) if error.code == ErrorCode::NotFound => {
                    Err(ApiError::not_found(error.message))
                }
                Err(error) => Err(ApiError::internal(error.to_string())),
            })
        })
        .await??;
    let (resolution, task) = outcome;
    if action != "pending_approval" {
        state
            .daemon
            .emit(
                &agent,
                "hil.resolved",
                "system:daemon",
                json!({ "request_id": task_id, "task_id": task_id, "approved": approved }),
            )
            .await;
    }
    // on_task_complete (TRG-18): a resolution that ends the task. A denied task the executor
    // manages (a blocking approval inside a turn) is the turn's business, not an event.
    if let Some(task) = task.as_ref().filter(|t| {
        matches!(
            t.status.as_str(),
            "completed" | "failed" | "denied" | "cancelled"
        ) && !(t.status == "denied" && t.executor_managed)
    }) {
        let event = adf_runtime::triggers::TriggerEvent::new(
            adf_runtime::triggers::TriggerKind::OnTaskComplete,
            adf_store::time::now_ms(),
            json!({ "task_id": task.id, "tool": task.tool, "status": task.status }),
        );
        state.daemon.dispatch(&agent, event).await;
    }
    Ok(Json(json!({
        "agentId": agent.id,
        "taskId": task_id,
        "resolution": resolution,
        "task": task.as_ref().map(task_view),
    }))
    .into_response())
}

/// Resolves an approval a running turn waits on without the store worker, which that turn
/// holds: the decision goes to the turn through the agent's registry, and the turn records it
/// on the row (`running` or `denied`) and emits `hil.resolved`. The answer's `task` is the row
/// as it stands once the turn records the decision. `None`: no live turn waits on this task.
fn resolve_live(agent: &Agent, task_id: &str, resolution: &Resolution) -> Option<Response> {
    let (resolution, task) = match resolution {
        Resolution::Escalate => {
            // Already waiting for the owner: nothing changes.
            let task = agent.hil().pending_task(task_id)?;
            (
                json!({ "task_id": task_id, "status": "pending_approval" }),
                task,
            )
        }
        Resolution::Approve { modified_args } => {
            let verdict = Verdict::Approve {
                modified_args: modified_args.clone(),
            };
            let resolved = agent.hil().resolve(task_id, verdict)?;
            (resolved.resolution, resolved.task)
        }
        Resolution::Deny { reason } => {
            let verdict = Verdict::Deny {
                reason: reason.clone(),
            };
            let resolved = agent.hil().resolve(task_id, verdict)?;
            (resolved.resolution, resolved.task)
        }
    };
    Some(
        Json(json!({
            "agentId": agent.id,
            "taskId": task_id,
            "resolution": resolution,
            "task": task_view(&task),
        }))
        .into_response(),
    )
}

// ---------------------------------------------------------------------------------- logs

/// Recent log rows, newest first; reads go through the store's read-only connection.
pub(super) async fn logs(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Params,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let limit = parse_limit(&params, 100)? as i64;
    let filter = LogFilter {
        origin: params.get("origin").cloned(),
        event: params.get("event").cloned(),
    };
    let logs = agent
        .job(move |file| file.logs_recent(&filter, limit))
        .await?;
    Ok(Json(json!({ "agentId": agent.id, "logs": logs })).into_response())
}

pub(super) async fn logs_after(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Params,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let after: i64 = params
        .get("afterId")
        .ok_or_else(|| ApiError::bad_request("afterId is required"))?
        .parse()
        .map_err(|_| ApiError::bad_request("afterId must be an integer"))?;
    let logs = agent.job(move |file| file.logs_after(after, 1000)).await?;
    Ok(Json(json!({ "agentId": agent.id, "logs": logs })).into_response())
}
