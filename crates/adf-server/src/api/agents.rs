//! Agent lifecycle: list, get, status, load, start, stop/unload, display state; and the
//! executor operations: `POST /chat` starts an owner turn and `POST /trigger` dispatches an
//! event (both 202); chat history (`GET`/`DELETE /chat`), transcript pages (`GET /loop`),
//! `POST /abort`, asks and their answers, and suspend answers (the waits live in `hil.rs`).

use std::path::PathBuf;

use axum::Json;
use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use adf_runtime::triggers::{TriggerEvent, TriggerKind};
use adf_store::LoopRow;

use super::{AppState, JsonBody, find, text_field};
use crate::daemon::{Agent, DISPLAY_STATES, Daemon};
use crate::error::{ApiError, ApiResult, ServerError};

pub(super) async fn list(State(state): State<AppState>) -> Response {
    let agents: Vec<Value> = state.daemon.agents().iter().map(|a| a.summary()).collect();
    Json(agents).into_response()
}

async fn agent_ref(agent: &Agent) -> ApiResult<Value> {
    let config = agent.job(|file| file.config()).await?;
    Ok(json!({ "id": agent.id, "filePath": agent.file_path(), "config": config }))
}

pub(super) async fn get_ref(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    Ok(Json(agent_ref(&agent).await?).into_response())
}

/// `AgentStatus`. `runtimeState` is the executor state as far as the daemon sees it:
/// `awaiting_approval`, `awaiting_ask`, `thinking` while a turn runs, else `idle`.
pub(crate) async fn status_value(agent: &Agent) -> ApiResult<Value> {
    let loop_count: i64 = agent.job(|file| file.loop_row_count()).await?;
    let mut status = agent.summary();
    if let Some(object) = status.as_object_mut() {
        object.insert("runtimeState".into(), json!(agent.hil().runtime_state()));
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

pub(super) async fn load(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let Some(path) = text_field(&body, "filePath") else {
        return Err(ApiError::bad_request("filePath is required"));
    };
    // The review gate applies to loads only when asked (as in the reference) and to autostart.
    if body.get("requireReview").and_then(Value::as_bool) == Some(true) {
        state.daemon.require_reviewed(&PathBuf::from(path)).await?;
    }
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
            // Stopped in this process, else declared by a file in a tracked directory.
            let loaded = match state.daemon.restart_stopped(&id).await {
                Err(ServerError::UnknownAgent(_)) => state.daemon.start_from_tracked(&id).await?,
                other => other?,
            };
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
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
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
    if new_state == "off" {
        state.daemon.release_network(&agent.id);
    }
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

/// `GET /chat?limit&loop`: the display chat history of a loop (default `main`), the
/// reference's `{agentId, chatHistory: {version, uiLog, llmMessages, total, earlierCount}}`
/// built from the newest `limit` transcript rows (default 50, 1–500). `llmMessages` is always
/// empty: the model's view is the transcript itself (`GET /loop`).
pub(super) async fn chat_read(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let limit = page_limit(&params)?;
    let loop_name = loop_param(&params);
    let (total, rows) = agent
        .job(move |file| {
            let total = file.loop_row_count_in(&loop_name)?;
            let offset = total.saturating_sub(limit);
            Ok((total, file.loop_page(&loop_name, limit, offset)?))
        })
        .await?;
    let ui_log: Vec<Value> = rows.iter().flat_map(ui_entries).collect();
    Ok(Json(json!({
        "agentId": agent.id,
        "chatHistory": {
            "version": 1,
            "uiLog": ui_log,
            "llmMessages": [],
            "total": total,
            "earlierCount": total - rows.len() as i64,
        },
    }))
    .into_response())
}

/// `GET /loop?limit&offset&loop`: a page of a loop's transcript (default `main`), in
/// transcript order. `limit` defaults to 50 (clamped to 1–500), `offset` to the last page (as
/// in the reference); `content_json` is parsed, `model` and `tokens` appear when set.
pub(super) async fn loop_read(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let limit = page_limit(&params)?;
    let offset = match params.get("offset").filter(|o| !o.is_empty()) {
        None => None,
        Some(text) => Some(
            text.parse::<i64>()
                .ok()
                .filter(|o| *o >= 0)
                .ok_or_else(|| ApiError::bad_request("offset must be a non-negative integer"))?,
        ),
    };
    let loop_name = loop_param(&params);
    let (total, offset, rows) = agent
        .job(move |file| {
            let total = file.loop_row_count_in(&loop_name)?;
            let offset = offset.unwrap_or_else(|| total.saturating_sub(limit).max(0));
            Ok((total, offset, file.loop_page(&loop_name, limit, offset)?))
        })
        .await?;
    let entries: Vec<Value> = rows
        .iter()
        .map(|row| {
            let mut entry = json!({
                "seq": row.seq,
                "role": row.role,
                "content_json": row.content,
            });
            if let Some(model) = &row.model {
                entry["model"] = json!(model);
            }
            if let Some(tokens) = &row.tokens {
                entry["tokens"] = loop_tokens(tokens);
            }
            entry["created_at"] = json!(row.created_at);
            entry
        })
        .collect();
    Ok(Json(json!({
        "agentId": agent.id,
        "total": total,
        "limit": limit,
        "offset": offset,
        "entries": entries,
    }))
    .into_response())
}

/// `limit` of a transcript page: 50 when absent, clamped to 1–500; not a number is a 400.
/// A loop row's `tokens` as the reference answers them: `cache_read` and `reasoning` always
/// present (0 when the row does not record them), so rows written before this runtime stored
/// them (and the reference's own older files) read the same as new ones.
fn loop_tokens(stored: &Value) -> Value {
    let mut tokens = stored.clone();
    if let Value::Object(fields) = &mut tokens {
        for key in ["cache_read", "reasoning"] {
            fields.entry(key).or_insert_with(|| json!(0));
        }
    }
    tokens
}

fn page_limit(params: &HashMap<String, String>) -> ApiResult<i64> {
    match params.get("limit").filter(|l| !l.is_empty()) {
        None => Ok(50),
        Some(text) => text
            .parse::<i64>()
            .map(|n| n.clamp(1, 500))
            .map_err(|_| ApiError::bad_request("limit must be an integer")),
    }
}

fn loop_param(params: &HashMap<String, String>) -> String {
    params
        .get("loop")
        .filter(|l| !l.is_empty())
        .cloned()
        .unwrap_or_else(|| "main".to_owned())
}

/// The display entries of one transcript row, one per content block: `user` (owner text),
/// `context` (`[Context: <category>] …` rows, the prefix moved to `metadata.category`),
/// `text` and `thinking` (the model's), `tool_call` and `tool_result`.
fn ui_entries(row: &LoopRow) -> Vec<Value> {
    let blocks = match &row.content {
        Value::Array(blocks) => blocks.clone(),
        other => vec![json!({ "type": "text", "text": other })],
    };
    blocks
        .iter()
        .enumerate()
        .map(|(index, block)| {
            let mut metadata = json!({ "seq": row.seq });
            let text = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or_default();
            let (kind, content) = match (row.role.as_str(), text("type")) {
                ("assistant", "thinking") => ("thinking", json!(text("thinking"))),
                ("assistant", "tool_use") => {
                    metadata["tool_use_id"] = json!(text("id"));
                    metadata["input"] = block.get("input").cloned().unwrap_or(Value::Null);
                    ("tool_call", json!(text("name")))
                }
                ("assistant", _) => ("text", json!(text("text"))),
                (_, "tool_result") => {
                    metadata["tool_use_id"] = json!(text("tool_use_id"));
                    metadata["is_error"] = block.get("is_error").cloned().unwrap_or(json!(false));
                    let content = block.get("content").cloned().unwrap_or(Value::Null);
                    ("tool_result", content)
                }
                _ => {
                    let body = text("text");
                    match context_category(body) {
                        Some((category, rest)) => {
                            metadata["category"] = json!(category);
                            ("context", json!(rest))
                        }
                        None => ("user", json!(body)),
                    }
                }
            };
            if let Some(model) = &row.model {
                metadata["model"] = json!(model);
            }
            if let Some(tokens) = &row.tokens {
                metadata["tokens"] = loop_tokens(tokens);
            }
            json!({
                "id": format!("loop-{}-{index}", row.seq),
                "type": kind,
                "content": content,
                "timestamp": row.created_at,
                "metadata": metadata,
            })
        })
        .collect()
}

/// `[Context: <category>] <rest>` → `(category, rest)`.
fn context_category(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("[Context: ")?;
    let (category, body) = rest.split_once(']')?;
    Some((category, body.strip_prefix(' ').unwrap_or(body)))
}

pub(super) async fn chat_post(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let Some(text) = text_field(&body, "text") else {
        return Err(ApiError::bad_request("text is required"));
    };
    let loop_name = body
        .get("loop")
        .and_then(Value::as_str)
        .unwrap_or("main")
        .to_owned();
    // Taken before the turn starts: `GET /events?since=<cursor>` follows it from its first
    // event (`adf chat AGENT` prints its retries and waits for its end that way).
    let cursor = *state.daemon.events().watch().borrow();
    crate::turns::start_chat(state.daemon.hub(), &agent, loop_name, text.to_owned())
        .await
        .map_err(|reason| {
            ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                format!("no model is reachable for this agent: {reason}"),
            )
        })?;
    Ok((
        axum::http::StatusCode::ACCEPTED,
        Json(json!({ "accepted": true, "turnId": turn_id("turn"), "agentId": agent.id, "cursor": cursor })),
    )
        .into_response())
}

/// `DELETE /chat?loop`: clears a loop's persisted transcript (default `main`) as the owner,
/// the way `loop_clear` does: an `adf_audit` snapshot `loop:<name>` first when
/// `context.audit.loop` is on, then the rows, in one transaction (AUD-18). Refused with 409
/// while a turn runs (abort it first): a turn's session must not lose its rows underneath it.
pub(super) async fn chat_delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    if agent.hil().turn_in_flight() {
        return Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "a turn is running; abort it first (POST /agents/{id}/abort)",
        ));
    }
    let loop_name = loop_param(&params);
    let target = loop_name.clone();
    let (removed, audit_id) = state
        .daemon
        .run_observed(&agent, move |file| {
            let audit = file.audit_enabled("loop")?;
            let outcome = file.loop_clear(&target, audit)?;
            Ok((outcome.removed, outcome.audit_id))
        })
        .await?;
    state
        .daemon
        .emit(
            &agent,
            "loop.cleared",
            "system:daemon",
            json!({ "method": "clear", "loop": loop_name }),
        )
        .await;
    Ok(Json(json!({
        "agentId": agent.id,
        "success": true,
        "removed": removed,
        "audited": audit_id.is_some(),
    }))
    .into_response())
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
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
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

/// `POST /abort`: aborts the agent's turn in flight. Its pending approval is denied and its
/// ask goes unanswered; the turn stops at its next await, its checkpoint stays `in_progress`,
/// and the loop's next session recovers it without replay. Unlike the reference (which leaves
/// its executor `stopped`, so later chats are accepted and never run), the agent stays usable.
pub(super) async fn abort(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let aborted = agent.hil().abort_all();
    Ok(
        Json(json!({ "agentId": agent.id, "success": true, "aborted": aborted > 0 }))
            .into_response(),
    )
}

pub(super) async fn asks(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let asks: Vec<Value> = agent
        .hil()
        .asks()
        .into_iter()
        .map(|(request_id, question)| json!({ "requestId": request_id, "question": question }))
        .collect();
    Ok(Json(json!({ "agentId": agent.id, "asks": asks })).into_response())
}

/// `POST /asks/{requestId}/respond {answer}`: the answer becomes the `ask` call's result.
pub(super) async fn ask_respond(
    State(state): State<AppState>,
    Path((id, request_id)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let Some(answer) = body.get("answer").and_then(Value::as_str) else {
        return Err(ApiError::bad_request("answer is required (a string)"));
    };
    if !agent.hil().answer(&request_id, answer.to_owned()) {
        return Err(ApiError::not_found(format!(
            "Unknown ask request \"{request_id}\""
        )));
    }
    Ok(
        Json(json!({ "agentId": agent.id, "requestId": request_id, "answered": true }))
            .into_response(),
    )
}

/// `POST /suspend/respond {resume}`: a `suspended` agent (max_active_turns) goes back to
/// `active` (`resume: true`) or to `off` (false); `resolved` is false when the agent was not
/// suspended (nothing changes).
pub(super) async fn suspend_respond(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let Some(resume) = body.get("resume").and_then(Value::as_bool) else {
        return Err(ApiError::bad_request("resume is required (a boolean)"));
    };
    let resolved = state.daemon.answer_suspend(&agent, resume, false).await?;
    Ok(
        Json(json!({ "agentId": agent.id, "resume": resume, "resolved": resolved }))
            .into_response(),
    )
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
