//! `GET /runtime/mcp` (every MCP server this daemon runs) and `GET /agents/{id}/runtime/mcp`
//! (one agent's declared servers and tools, each with whether its process runs now). Server
//! `env` and `headers` values are never part of an answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{AppState, find};
use crate::error::ApiResult;

pub(super) async fn runtime(State(state): State<AppState>) -> ApiResult<Response> {
    let agents = state.daemon.agents();
    let servers: Vec<Value> = state
        .daemon
        .mcp()
        .status()
        .await
        .into_iter()
        .map(|slot| {
            let agent = agents.iter().find(|a| a.path == slot.file);
            json!({
                "agentId": agent.map(|a| a.id.clone()),
                "filePath": slot.file.display().to_string(),
                "server": slot.server,
                "running": slot.running,
            })
        })
        .collect();
    Ok(Json(json!({ "servers": servers })).into_response())
}

pub(super) async fn agent(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let config = agent.job(|file| file.config()).await?;
    let running: Vec<String> = state
        .daemon
        .mcp()
        .status()
        .await
        .into_iter()
        .filter(|slot| slot.file == agent.path && slot.running)
        .map(|slot| slot.server)
        .collect();
    let servers: Vec<Value> = adf_mcp::manage::list(&config)
        .into_iter()
        .map(|mut server| {
            let name = server["name"].as_str().unwrap_or_default().to_owned();
            server["running"] = Value::Bool(running.contains(&name));
            server
        })
        .collect();
    Ok(Json(json!({ "agentId": agent.id, "servers": servers })).into_response())
}
