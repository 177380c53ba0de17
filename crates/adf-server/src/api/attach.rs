//! Attaching providers and MCP servers to an agent's config and detaching them (with the
//! credentials sealed for them): config edits made through the same owner path as `PUT
//! /config` (validation, `config.changed`, the live info refreshed). Channel adapters are a
//! later capability (`unsupported.rs`).

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::resources::config_put;
use super::{AppState, JsonBody, find, text_field};
use crate::error::{ApiError, ApiResult};

async fn config_of(state: &AppState, id: &str) -> ApiResult<(String, Value)> {
    let agent = find(state, id)?;
    let config = agent.job(|file| file.config()).await?;
    Ok((agent.id.clone(), config))
}

/// Replaces the config through `PUT /config`'s handler; its error answer is returned as is.
async fn replace(state: &AppState, id: &str, config: Value) -> Result<(), Response> {
    let answer = config_put(State(state.clone()), Path(id.to_owned()), JsonBody(config))
        .await
        .map_err(IntoResponse::into_response)?;
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(answer)
    }
}

async fn delete_prefix(state: &AppState, id: &str, prefix: String) -> ApiResult<usize> {
    let agent = find(state, id)?;
    Ok(agent
        .job(move |file| {
            let names: Vec<String> = file
                .identity_rows()?
                .into_iter()
                .map(|r| r.purpose)
                .filter(|p| p.starts_with(&prefix))
                .collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            file.identity_delete(&refs)
        })
        .await?)
}

/// `POST /agents/{id}/providers {id, type, ...}`: adds the provider entry to the agent's
/// `providers`, or merges it into the entry of the same id. A key in the body (`apiKey`) is
/// refused: keys are sealed with `PUT /providers/{providerId}/credential`.
pub(super) async fn provider_attach(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, Response> {
    let provider_id = text_field(&body, "id")
        .map(str::to_owned)
        .ok_or_else(|| ApiError::bad_request("id is required").into_response())?;
    if body.get("apiKey").is_some() {
        return Err(ApiError::bad_request(
            "apiKey does not go into the config: PUT /agents/{id}/providers/{providerId}/credential seals it",
        )
        .into_response());
    }
    adf_providers::ProviderConfig::from_json(&body)
        .map_err(|e| ApiError::bad_request(e.to_string()).into_response())?;
    let (agent_id, mut config) = config_of(&state, &id)
        .await
        .map_err(IntoResponse::into_response)?;
    let mut providers = config
        .get("providers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let existing = providers
        .iter_mut()
        .find(|p| p.get("id").and_then(Value::as_str) == Some(provider_id.as_str()));
    let already = existing.is_some();
    match (existing, &body) {
        (Some(Value::Object(old)), Value::Object(new)) => {
            old.extend(new.clone());
        }
        _ => providers.push(body.clone()),
    }
    if let Some(object) = config.as_object_mut() {
        object.insert("providers".into(), Value::Array(providers));
    }
    replace(&state, &agent_id, config.clone()).await?;
    Ok(Json(json!({
        "agentId": agent_id,
        "providerId": provider_id,
        "success": true,
        "alreadyAttached": already,
    }))
    .into_response())
}

/// `DELETE /agents/{id}/providers/{providerId}`: removes the entry and its sealed credentials.
pub(super) async fn provider_detach(
    State(state): State<AppState>,
    Path((id, provider_id)): Path<(String, String)>,
) -> Result<Response, Response> {
    let (agent_id, mut config) = config_of(&state, &id)
        .await
        .map_err(IntoResponse::into_response)?;
    if let Some(providers) = config.get_mut("providers").and_then(Value::as_array_mut) {
        providers.retain(|p| p.get("id").and_then(Value::as_str) != Some(provider_id.as_str()));
    }
    replace(&state, &agent_id, config).await?;
    let deleted = delete_prefix(&state, &agent_id, format!("provider:{provider_id}:"))
        .await
        .map_err(IntoResponse::into_response)?;
    Ok(Json(json!({
        "agentId": agent_id,
        "providerId": provider_id,
        "success": true,
        "deletedCredentials": deleted,
    }))
    .into_response())
}

/// `POST /agents/{id}/mcp/servers {name, ...}`: adds the server to `mcp.servers` unless one
/// of that name is there.
pub(super) async fn mcp_attach(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, Response> {
    let name = text_field(&body, "name")
        .map(str::to_owned)
        .ok_or_else(|| ApiError::bad_request("name is required").into_response())?;
    let (agent_id, mut config) = config_of(&state, &id)
        .await
        .map_err(IntoResponse::into_response)?;
    let mut servers = config
        .pointer("/mcp/servers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let already = servers
        .iter()
        .any(|s| s.get("name").and_then(Value::as_str) == Some(name.as_str()));
    if !already {
        servers.push(body.clone());
    }
    set_servers(&mut config, servers);
    replace(&state, &agent_id, config).await?;
    Ok(Json(json!({
        "agentId": agent_id,
        "serverName": name,
        "success": true,
        "alreadyAttached": already,
    }))
    .into_response())
}

fn set_servers(config: &mut Value, servers: Vec<Value>) {
    if let Some(object) = config.as_object_mut() {
        let mcp = object.entry("mcp").or_insert_with(|| json!({}));
        if let Some(mcp) = mcp.as_object_mut() {
            mcp.insert("servers".into(), Value::Array(servers));
        }
    }
}

/// `DELETE /agents/{id}/mcp/servers/{serverName}`: removes it and its `mcp:<name>:` credentials.
pub(super) async fn mcp_detach(
    State(state): State<AppState>,
    Path((id, name)): Path<(String, String)>,
) -> Result<Response, Response> {
    let (agent_id, mut config) = config_of(&state, &id)
        .await
        .map_err(IntoResponse::into_response)?;
    let servers: Vec<Value> = config
        .pointer("/mcp/servers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|s| s.get("name").and_then(Value::as_str) != Some(name.as_str()))
        .cloned()
        .collect();
    set_servers(&mut config, servers);
    replace(&state, &agent_id, config).await?;
    let deleted = delete_prefix(&state, &agent_id, format!("mcp:{name}:"))
        .await
        .map_err(IntoResponse::into_response)?;
    Ok(Json(json!({
        "agentId": agent_id,
        "serverName": name,
        "success": true,
        "deletedCredentials": deleted,
    }))
    .into_response())
}
