//! The rest of an agent's contents through the owner's eyes: the primary document and mind,
//! file and folder renames, `local_*` tables, token usage from the transcript, clearing the
//! inbox and the logs, rewriting a timer, and the trigger and runtime diagnostics. Every
//! write is one owner job (one transaction) through adf-store's typed methods.

use std::collections::{BTreeMap, HashMap};

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use adf_runtime::schedule::Schedule;
use adf_runtime::triggers::{TriggerEvent, TriggerKind};
use adf_store::messages::{Mailbox, MessageFilter};
use adf_store::timers::NewTimer;
use adf_store::{Caller, FileWrite, StoreError};

use super::resources::{parse_limit, schedule_input};
use super::{AppState, JsonBody, find, success, text_field};
use crate::daemon::Agent;
use crate::error::{ApiError, ApiResult};

type Params = Query<HashMap<String, String>>;

/// A text file with routes of its own (`GET`/`PUT /agents/{id}/document`, `/mind`).
pub(super) trait NamedText {
    const PATH: &'static str;
}

/// The primary document (§1).
pub(super) struct Document;

impl NamedText for Document {
    const PATH: &'static str = "README.md";
}

/// The working memory.
pub(super) struct Mind;

impl NamedText for Mind {
    const PATH: &'static str = "mind.md";
}

async fn read_text(state: &AppState, id: &str, path: &'static str) -> ApiResult<Response> {
    let agent = find(state, id)?;
    let entry = agent.job(move |file| file.file_read(path)).await?;
    let content = entry
        .map(|entry| String::from_utf8_lossy(&entry.content).into_owned())
        .unwrap_or_default();
    Ok(Json(json!({ "agentId": agent.id, "content": content })).into_response())
}

async fn write_text(
    state: &AppState,
    id: &str,
    path: &'static str,
    body: &Value,
) -> ApiResult<Response> {
    let agent = find(state, id)?;
    let Some(content) = body.get("content").and_then(Value::as_str) else {
        return Err(ApiError::bad_request("content is required (a string)"));
    };
    let bytes = content.len();
    let content = content.as_bytes().to_vec();
    state
        .daemon
        .run_observed(&agent, move |file| {
            file.file_write(Caller::Owner, path, &content, &FileWrite::default())
        })
        .await?;
    file_changed(state, &agent, path, "write", json!({ "bytes": bytes })).await;
    Ok(success(&agent))
}

/// `file.written`-style event plus `on_file_change`, as a write through `/files/content`.
async fn file_changed(
    state: &AppState,
    agent: &std::sync::Arc<Agent>,
    path: &str,
    operation: &str,
    extra: Value,
) {
    let mut payload = json!({ "path": path });
    if let (Some(object), Value::Object(more)) = (payload.as_object_mut(), extra) {
        object.extend(more);
    }
    let event_type = if operation == "write" {
        "file.written"
    } else {
        "file.renamed"
    };
    state
        .daemon
        .emit(agent, event_type, "system:daemon", payload)
        .await;
    let change = TriggerEvent::new(
        TriggerKind::OnFileChange,
        adf_store::time::now_ms(),
        json!({ "path": path, "operation": operation }),
    );
    state.daemon.dispatch(agent, change).await;
}

pub(super) async fn text_get<T: NamedText>(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    read_text(&state, &id, T::PATH).await
}

pub(super) async fn text_put<T: NamedText>(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    write_text(&state, &id, T::PATH, &body).await
}

// ---------------------------------------------------------------------------------- renames

/// `POST /files/rename {oldPath, newPath}`. A protected file keeps its name (403); a taken
/// new path is a 400.
pub(super) async fn file_rename(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let (Some(old), Some(new)) = (text_field(&body, "oldPath"), text_field(&body, "newPath"))
    else {
        return Err(ApiError::bad_request("oldPath and newPath are required"));
    };
    let (old, new) = (old.to_owned(), new.to_owned());
    let (from, to) = (old.clone(), new.clone());
    match state
        .daemon
        .run_observed(&agent, move |file| file.file_rename(&from, &to))
        .await
    {
        Ok(()) => {}
        Err(StoreError::NotFound { .. }) => {
            return Err(ApiError::not_found(format!("Unknown file \"{old}\"")));
        }
        Err(other) => return Err(other.into()),
    }
    file_changed(&state, &agent, &new, "rename", json!({ "from": old })).await;
    Ok(success(&agent))
}

/// `POST /files/rename-folder {oldPrefix, newPrefix}`: `{agentId, success, count}`.
pub(super) async fn folder_rename(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let (Some(old), Some(new)) = (
        text_field(&body, "oldPrefix"),
        text_field(&body, "newPrefix"),
    ) else {
        return Err(ApiError::bad_request(
            "oldPrefix and newPrefix are required",
        ));
    };
    let (old, new) = (old.to_owned(), new.to_owned());
    let (from, to) = (old.clone(), new.clone());
    let count = match state
        .daemon
        .run_observed(&agent, move |file| file.file_rename_folder(&from, &to))
        .await
    {
        Ok(count) => count,
        Err(StoreError::NotFound { .. }) => {
            return Err(ApiError::not_found(format!("Unknown folder \"{old}\"")));
        }
        Err(other) => return Err(other.into()),
    };
    file_changed(
        &state,
        &agent,
        &new,
        "rename",
        json!({ "from": old, "count": count }),
    )
    .await;
    Ok(Json(json!({ "agentId": agent.id, "success": true, "count": count })).into_response())
}

// ---------------------------------------------------------------------------------- tables

pub(super) async fn tables_list(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let tables = agent.job(|file| file.local_tables()).await?;
    Ok(Json(json!({ "agentId": agent.id, "tables": tables })).into_response())
}

fn offset_param(params: &HashMap<String, String>) -> ApiResult<i64> {
    match params.get("offset").filter(|o| !o.is_empty()) {
        None => Ok(0),
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| ApiError::bad_request("offset must be a non-negative integer")),
    }
}

/// A page of a `local_*` table: `{agentId, columns, rows}`; another table is a 400.
pub(super) async fn table_query(
    State(state): State<AppState>,
    Path((id, table)): Path<(String, String)>,
    Query(params): Params,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let limit = parse_limit(&params, 100)? as i64;
    let offset = offset_param(&params)?;
    let name = table.clone();
    let page = match agent
        .job(move |file| file.local_table_page(&name, limit, offset))
        .await
    {
        Ok(page) => page,
        Err(StoreError::NotFound { .. }) => {
            return Err(ApiError::not_found(format!("Unknown table \"{table}\"")));
        }
        Err(other) => return Err(other.into()),
    };
    Ok(
        Json(json!({ "agentId": agent.id, "columns": page.columns, "rows": page.rows }))
            .into_response(),
    )
}

pub(super) async fn table_drop(
    State(state): State<AppState>,
    Path((id, table)): Path<(String, String)>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let name = table.clone();
    match agent.job(move |file| file.local_table_drop(&name)).await {
        Ok(()) => Ok(success(&agent)),
        Err(StoreError::NotFound { .. }) => {
            Err(ApiError::not_found(format!("Unknown table \"{table}\"")))
        }
        Err(other) => Err(other.into()),
    }
}

// ---------------------------------------------------------------------------------- usage

/// Token counts of one bucket, in the reference's names.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Totals {
    pub(super) input: i64,
    pub(super) output: i64,
    pub(super) cache_read: i64,
    pub(super) cache_write: i64,
}

impl Totals {
    /// Adds a loop row's `tokens` (`input`, `output`, `cache_read`, `cache_write`; camelCase
    /// spellings too, as older files have them).
    pub(super) fn add(&mut self, tokens: &Value) {
        let get = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| tokens.get(*n).and_then(Value::as_i64))
                .unwrap_or(0)
        };
        self.input += get(&["input", "input_tokens"]);
        self.output += get(&["output", "output_tokens"]);
        self.cache_read += get(&["cache_read", "cacheRead"]);
        self.cache_write += get(&["cache_write", "cacheWrite"]);
    }

    pub(super) fn total(&self) -> i64 {
        self.input + self.output + self.cache_read + self.cache_write
    }

    pub(super) fn json(&self) -> Map<String, Value> {
        let value = json!({
            "input": self.input,
            "output": self.output,
            "cacheRead": self.cache_read,
            "cacheWrite": self.cache_write,
            "total": self.total(),
        });
        value.as_object().cloned().unwrap_or_default()
    }
}

/// One agent's usage by model over every loop's rows: (loop rows, rows with usage, totals,
/// per model (rows, totals)).
pub(super) type AgentUsage = (i64, i64, Totals, BTreeMap<String, (i64, Totals)>);

pub(super) async fn agent_usage(agent: &Agent) -> ApiResult<AgentUsage> {
    Ok(agent
        .job(|file| {
            let mut loop_rows = 0;
            let mut usage_rows = 0;
            let mut totals = Totals::default();
            let mut by_model: BTreeMap<String, (i64, Totals)> = BTreeMap::new();
            for name in file.loop_names()? {
                for row in file.loop_rows(&name)? {
                    loop_rows += 1;
                    let Some(tokens) = row.tokens.as_ref().filter(|t| t.is_object()) else {
                        continue;
                    };
                    usage_rows += 1;
                    totals.add(tokens);
                    let model = row.model.clone().unwrap_or_else(|| "unknown".into());
                    let bucket = by_model.entry(model).or_default();
                    bucket.0 += 1;
                    bucket.1.add(tokens);
                }
            }
            Ok((loop_rows, usage_rows, totals, by_model))
        })
        .await?)
}

/// `GET /agents/{id}/usage`: token usage persisted on the agent's loop rows, by model
/// (largest total first).
pub(super) async fn usage(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let (loop_rows, usage_rows, totals, by_model) = agent_usage(&agent).await?;
    let mut models: Vec<(String, (i64, Totals))> = by_model.into_iter().collect();
    models.sort_by_key(|(_, (_, t))| std::cmp::Reverse(t.total()));
    let by_model: Vec<Value> = models
        .into_iter()
        .map(|(model, (rows, t))| {
            let mut entry = Map::new();
            entry.insert("model".into(), json!(model));
            entry.insert("rows".into(), json!(rows));
            entry.extend(t.json());
            Value::Object(entry)
        })
        .collect();
    Ok(Json(json!({
        "agentId": agent.id,
        "source": "adf_loop",
        "note": "Includes token usage persisted on loop rows (every loop). It does not include provider calls that did not create loop rows.",
        "loopRows": loop_rows,
        "usageRows": usage_rows,
        "totals": totals.json(),
        "byModel": by_model,
    }))
    .into_response())
}

// ---------------------------------------------------------------------------------- clears

/// `DELETE /agents/{id}/inbox`: every inbox message; `{agentId, success, deleted}`.
pub(super) async fn inbox_clear(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let deleted = agent
        .job(|file| {
            let ids: Vec<String> = file
                .messages(Mailbox::Inbox, &MessageFilter::default(), None)?
                .into_iter()
                .filter_map(|row| row.get("id").and_then(Value::as_str).map(str::to_owned))
                .collect();
            file.messages_delete_ids(Mailbox::Inbox, &ids)
        })
        .await?;
    Ok(Json(json!({ "agentId": agent.id, "success": true, "deleted": deleted })).into_response())
}

/// `DELETE /agents/{id}/logs`: every persisted log row; `{agentId, success, deleted}`.
pub(super) async fn logs_clear(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let deleted = agent.job(|file| file.logs_clear()).await?;
    Ok(Json(json!({ "agentId": agent.id, "success": true, "deleted": deleted })).into_response())
}

// ---------------------------------------------------------------------------------- timers

/// `PUT /agents/{id}/timers/{timerId}`: the same body as `POST /timers`; the timer keeps its
/// id and run count and is re-armed.
pub(super) async fn timer_update(
    State(state): State<AppState>,
    Path((id, timer_id)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let timer_id: i64 = timer_id
        .parse()
        .map_err(|_| ApiError::bad_request("timerId must be an integer"))?;
    let input = schedule_input(&body)?;
    let (schedule, next_wake_at) = Schedule::resolve(&input, adf_store::time::now_ms())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let scope = match body.get("scope") {
        None | Some(Value::Null) => json!(["agent"]),
        Some(scope) => scope.clone(),
    };
    let text = |key: &str| body.get(key).and_then(Value::as_str).map(str::to_owned);
    let (payload, lambda) = (text("payload"), text("lambda"));
    let flag = |key: &str| body.get(key).and_then(Value::as_bool).unwrap_or(false);
    let (warm, locked) = (flag("warm"), flag("locked"));
    let stored = schedule.to_stored();
    let updated = agent
        .job(move |file| {
            file.timer_update(
                timer_id,
                &NewTimer {
                    schedule: &stored,
                    next_wake_at,
                    payload: payload.as_deref(),
                    scope: &scope,
                    lambda: lambda.as_deref(),
                    warm,
                    locked,
                    r#loop: None,
                },
            )
        })
        .await;
    match updated {
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
