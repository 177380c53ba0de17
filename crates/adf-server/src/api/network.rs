//! The mesh as the owner manages it (`/network/*`): its status, the `meshEnabled` switch,
//! the tools the hosted agents called lately, and the LAN peers discovered over mDNS
//! (`adf daemon --lan`, `crate::lan`; no tailnet discovery).
//!
//! `meshEnabled: false` closes the mesh's inbound door: `POST /agents/{handle}/inbox` from
//! other runtimes answers 503 `MESH_DISABLED` until it is enabled again. Agents on this daemon
//! still message each other (that path never leaves the process).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::AppState;
use super::runtime::{mesh_enabled, mesh_value, read_settings};
use crate::error::{ApiError, ApiResult};
use crate::settings::Settings;

type Params = Query<HashMap<String, String>>;

/// `GET /network/mesh`.
pub(super) async fn mesh(State(state): State<AppState>) -> ApiResult<Response> {
    let (_, values) = read_settings(&state)?;
    Ok(Json(mesh_value(&state, &values).await).into_response())
}

async fn set_enabled(state: &AppState, enabled: bool) -> ApiResult<Response> {
    let settings = Settings::in_home(state.daemon.home());
    let _guard = state.daemon.settings_lock().lock().await;
    let values = settings
        .update(|values| {
            values.insert("meshEnabled".into(), Value::Bool(enabled));
        })
        .map_err(|e| ApiError::internal(e.to_string()))?;
    state.daemon.emit_daemon(
        "mesh.changed",
        json!({ "meshEnabled": mesh_enabled(&values) }),
    );
    Ok(Json(json!({ "success": true, "meshEnabled": mesh_enabled(&values) })).into_response())
}

/// `POST /network/mesh/enable`.
pub(super) async fn enable(State(state): State<AppState>) -> ApiResult<Response> {
    set_enabled(&state, true).await
}

/// `POST /network/mesh/disable`.
pub(super) async fn disable(State(state): State<AppState>) -> ApiResult<Response> {
    set_enabled(&state, false).await
}

/// The mesh's inbound door: refused while `meshEnabled` is false, else the mesh ingress.
pub(super) async fn inbox_post(
    State(state): State<AppState>,
    path: Path<String>,
    request: Request,
) -> Response {
    let enabled = Settings::in_home(state.daemon.home())
        .read()
        .map(|values| mesh_enabled(&values))
        .unwrap_or(true);
    if !enabled {
        let mut refusal = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the mesh is disabled on this runtime (the owner can enable it: POST /network/mesh/enable)",
        );
        refusal.details = json!({ "code": "MESH_DISABLED" }).as_object().cloned();
        return refusal.into_response();
    }
    super::mesh_routes::inbox_post(State(state), path, request).await
}

/// Text of a tool call's input, cut to `max` characters with `...` as the reference lists it.
fn short_args(input: &Value, max: usize) -> String {
    let text = input.to_string();
    if text.chars().count() <= max {
        return text;
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}...")
}

/// `GET /network/mesh/recent-tools?limit=`: the latest tool calls of each hosted agent's main
/// loop (newest last), keyed by file path.
pub(super) async fn recent_tools(
    State(state): State<AppState>,
    Query(params): Params,
) -> ApiResult<Response> {
    let limit = match params.get("limit") {
        None => 20,
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 1)
            .map(|n| n.min(200))
            .ok_or_else(|| ApiError::bad_request("limit must be a positive integer"))?,
    };
    let mut tools = Map::new();
    for agent in state.daemon.agents() {
        let rows = agent
            .job(move |file| {
                let total = file.loop_row_count_in("main")?;
                // Each call spans a tool_use row and a tool_result row, and text rows sit
                // between them: read a window a few times the calls wanted.
                let window = limit * 4;
                file.loop_page("main", window, (total - window).max(0))
            })
            .await?;
        let mut calls: Vec<(String, Value)> = Vec::new();
        let mut errors: HashMap<String, bool> = HashMap::new();
        for row in &rows {
            for block in row.content.as_array().into_iter().flatten() {
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        let id = block.get("id").and_then(Value::as_str).unwrap_or_default();
                        calls.push((
                            id.to_owned(),
                            json!({
                                "name": block.get("name").cloned().unwrap_or(Value::Null),
                                "args": short_args(block.get("input").unwrap_or(&Value::Null), 40),
                                "timestamp": row.created_at,
                            }),
                        ));
                    }
                    Some("tool_result") => {
                        let id = block.get("tool_use_id").and_then(Value::as_str);
                        let failed = block.get("is_error").and_then(Value::as_bool);
                        if let (Some(id), Some(failed)) = (id, failed) {
                            errors.insert(id.to_owned(), failed);
                        }
                    }
                    _ => {}
                }
            }
        }
        let skip = calls.len().saturating_sub(limit as usize);
        let list: Vec<Value> = calls
            .into_iter()
            .skip(skip)
            .map(|(id, mut call)| {
                if let Some(object) = call.as_object_mut() {
                    object.insert(
                        "isError".into(),
                        json!(errors.get(&id).copied().unwrap_or(false)),
                    );
                }
                call
            })
            .collect();
        if !list.is_empty() {
            tools.insert(agent.file_path(), Value::Array(list));
        }
    }
    Ok(Json(json!({ "tools": tools })).into_response())
}

/// `GET /network/mesh/discovered-runtimes`: the LAN peers discovered over mDNS (none unless
/// the daemon runs with `--lan`), and the owner's manual peers.
pub(super) async fn discovered_runtimes(State(state): State<AppState>) -> ApiResult<Response> {
    let (_, values) = read_settings(&state)?;
    let manual = values
        .get("meshManualPeers")
        .cloned()
        .unwrap_or_else(|| json!([]));
    let lan = state.daemon.mesh().lan_peers();
    Ok(Json(json!({
        "runtimes": lan.describe(),
        "discovery": state.daemon.mesh().lan_enabled(),
        "manualPeers": manual,
    }))
    .into_response())
}

/// `GET /network/mesh/lan-addresses` (`adf network lan`): the addresses this daemon announces
/// on the LAN and the peers it discovered; both empty unless it runs with `--lan`.
pub(super) async fn lan_addresses(State(state): State<AppState>) -> Response {
    let mesh = state.daemon.mesh();
    let lan = mesh.lan_peers();
    Json(json!({
        "addresses": lan.addresses(),
        "discovery": mesh.lan_enabled(),
        "peers": lan.describe(),
    }))
    .into_response()
}

/// `GET /network/server`: the mesh is served by the daemon's own listener.
pub(super) async fn server(State(state): State<AppState>) -> Response {
    let base = state.daemon.mesh().base_url().map(str::to_owned);
    Json(json!({
        "running": base.is_some(),
        "url": base,
        "sharedWithApi": true,
    }))
    .into_response()
}

/// `GET /agents/{id}/umbilical/events?since=<seq>&limit=<n>`: the agent's replay log
/// (§5.24), `enabled: false` and no events when `umbilical.log` is off.
pub(crate) async fn umbilical_events(
    axum::extract::State(state): axum::extract::State<AppState>,
    axum::extract::Path(key): axum::extract::Path<String>,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Result<axum::response::Response, crate::error::ApiError> {
    use axum::response::IntoResponse as _;
    let agent = state.daemon.agent(&key)?;
    let number = |name: &str, default: u64| -> Result<u64, crate::error::ApiError> {
        query.get(name).map_or(Ok(default), |v| {
            v.parse().map_err(|_| {
                crate::error::ApiError::bad_request(format!("{name} must be a number"))
            })
        })
    };
    let since = number("since", 0)?;
    let limit = usize::try_from(number("limit", 500)?.min(10_000)).unwrap_or(500);
    let events = state.daemon.umbilical_events(&agent.id, since, limit);
    Ok(axum::Json(json!({
        "agentId": agent.id,
        "enabled": events.is_some(),
        "events": events.unwrap_or_default(),
    }))
    .into_response())
}
