//! Agent lifecycle: list, get, status, load, start, stop/unload, display state; and the
//! the executor operations: `POST /chat` starts an owner turn and `POST /trigger` dispatches an
//! event (both 202); the others answer 501 after the reference's validation.

use std::path::PathBuf;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use adf_runtime::triggers::{TriggerEvent, TriggerKind};

use super::{AppState, body_json, find};
use crate::daemon::{Agent, DISPLAY_STATES, Daemon};
use crate::error::{ApiError, ApiResult, ServerError};

pub(super) async fn list(State(state): State<AppState>) -> Response {
    let agents: Vec<Value> = state.daemon.agents().iter().map(|a| a.summary()).collect();
    Json(agents).into_response()
}

async fn agent_ref(agent: &Agent) -> ApiResult<Value> {
    let config = agent.store().run(|file| file.config()).await?;
    Ok(json!({ "id": agent.id, "filePath": agent.file_path(), "config": config }))
}

pub(super) async fn get_ref(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    Ok(Json(agent_ref(&agent).await?).into_response())
}

/// `AgentStatus`. `runtimeState` is `idle`: a loaded agent here has no turn in flight, and
/// none can start until the executor is wired in (the reference reports its executor state).
pub(crate) async fn status_value(agent: &Agent) -> ApiResult<Value> {
    let loop_count: i64 = agent
        .store()
        .run(|file| {
            Ok(file
                .connection()
                .query_row("SELECT COUNT(*) FROM adf_loop", [], |row| row.get(0))?)
        })
        .await?;
    let mut status = agent.summary();
    if let Some(object) = status.as_object_mut() {
        object.insert("runtimeState".into(), json!("idle"));
        object.insert("targetState".into(), Value::Null);
        object.insert("loopCount".into(), json!(loop_count));
    }
    Ok(status)
}

pub(super) async fn status(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    Ok(Json(status_value(&agent).await?).into_response())
}

pub(super) async fn load(State(state): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let body = body_json(&body)?;
    let Some(path) = body
        .get("filePath")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
    else {
        return Err(ApiError::bad_request("filePath is required"));
    };
    let loaded = state.daemon.load(&PathBuf::from(path)).await?;
    Ok(Json(agent_ref(&loaded.agent).await?).into_response())
}

pub(super) async fn start(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let (agent, loaded) = match state.daemon.agent(&id) {
        Ok(agent) => (agent, false),
        Err(ServerError::UnknownAgent(_)) => {
            let loaded = state.daemon.restart_stopped(&id).await?;
            (loaded.agent, loaded.newly_loaded)
        }
        Err(other) => return Err(other.into()),
    };
    // `on_startup` fires when a file is newly loaded (Daemon::load), not on a start of an
    // already loaded agent; the field keeps the reference's shape.
    Ok(Json(json!({
        "success": true,
        "loaded": loaded,
        "startupTriggered": false,
        "agent": status_value(&agent).await?,
    }))
    .into_response())
}

pub(super) async fn stop(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = state.daemon.unload(&id).await?;
    Ok(Json(json!({ "agentId": agent.id, "success": true })).into_response())
}

pub(super) async fn set_state(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let body = body_json(&body)?;
    let Some(new_state) = body
        .get("state")
        .and_then(Value::as_str)
        .filter(|s| DISPLAY_STATES.contains(s))
    else {
        return Err(ApiError::bad_request(
            "state must be one of: active, idle, hibernate, suspended, off",
        ));
    };
    agent.update_info(|info| info.display_state = new_state.to_owned());
    emit_state(&state.daemon, &agent, new_state).await;
    Ok(Json(json!({ "agentId": agent.id, "success": true, "state": new_state })).into_response())
}

async fn emit_state(daemon: &Daemon, agent: &Agent, new_state: &str) {
    daemon
        .emit(
            agent,
            "agent.state.changed",
            "system:daemon",
            json!({ "filePath": agent.file_path(), "state": new_state }),
        )
        .await;
}

pub(super) async fn chat_read(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    find(&state, &id)?;
    Err(ApiError::executor_missing("chat history"))
}

pub(super) async fn chat_post(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let body = body_json(&body)?;
    let Some(text) = body
        .get("text")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    else {
        return Err(ApiError::bad_request("text is required"));
    };
    let loop_name = body
        .get("loop")
        .and_then(Value::as_str)
        .unwrap_or("main")
        .to_owned();
    state
        .daemon
        .start_chat(&agent, loop_name, text.to_owned())
        .await
        .map_err(|reason| {
            ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                format!("no model is reachable for this agent: {reason}"),
            )
        })?;
    Ok((
        axum::http::StatusCode::ACCEPTED,
        Json(json!({ "accepted": true, "turnId": turn_id("turn") })),
    )
        .into_response())
}

pub(super) async fn chat_delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    find(&state, &id)?;
    Err(ApiError::executor_missing("clearing chat"))
}

const TRIGGER_TYPES: [&str; 11] = [
    "inbox",
    "outbox",
    "file_change",
    "chat",
    "timer",
    "tool_call",
    "task_create",
    "task_complete",
    "log_entry",
    "startup",
    "llm_call",
];

pub(super) async fn trigger(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let body = body_json(&body)?;
    let event = body.get("event").unwrap_or(&body);
    let source = event
        .pointer("/data/message/source")
        .and_then(Value::as_str);
    if source == Some("user") {
        return Err(ApiError::bad_request(
            "event.data.message.source \"user\" is reserved for the owner and cannot be set over the API. Use \"api\" or \"mesh\".",
        ));
    }
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
    if !TRIGGER_TYPES.contains(&kind) {
        return Err(ApiError::bad_request(format!(
            "event.type must be one of: {}",
            TRIGGER_TYPES.join(", ")
        )));
    }
    // The reference's names without `on_`; `log_entry` is `on_logs`.
    let kind = match kind {
        "log_entry" => TriggerKind::OnLogs,
        other => TriggerKind::parse(&format!("on_{other}"))
            .ok_or_else(|| ApiError::bad_request(format!("unknown event type {other}")))?,
    };
    let data = event.get("data").cloned().unwrap_or_else(|| json!({}));
    let event = TriggerEvent::new(kind, adf_store::time::now_ms(), data);
    state.daemon.dispatch(&agent, event).await;
    Ok((
        axum::http::StatusCode::ACCEPTED,
        Json(json!({ "accepted": true, "turnId": turn_id("trigger") })),
    )
        .into_response())
}

pub(super) async fn abort(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    find(&state, &id)?;
    Err(ApiError::executor_missing("abort"))
}

pub(super) async fn asks(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    // Asks live in a running turn; with no executor none can be pending, so the empty list
    // is the true answer rather than a stand-in.
    let agent = find(&state, &id)?;
    Ok(Json(json!({ "agentId": agent.id, "asks": [] })).into_response())
}

pub(super) async fn ask_respond(
    State(state): State<AppState>,
    Path((id, _request)): Path<(String, String)>,
) -> ApiResult<Response> {
    find(&state, &id)?;
    Err(ApiError::executor_missing("answering asks"))
}

pub(super) async fn suspend_respond(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    find(&state, &id)?;
    Err(ApiError::executor_missing("suspend responses"))
}

/// A fresh id for an accepted turn or dispatch (`turn_…`, `trigger_…`).
fn turn_id(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let bytes: [u8; 12] = rand::random();
    let tail: String = bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect();
    format!("{prefix}_{tail}")
}
