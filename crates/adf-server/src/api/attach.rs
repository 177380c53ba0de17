//! Attaching providers, MCP servers and channel adapters to an agent's config and detaching
//! them (with the credentials sealed for them): config edits made through the same owner path
//! as `PUT /config` (validation, `config.changed`, the live info refreshed; a changed
//! `adapters` restarts the agent's adapters). Also `adf adapters test`'s credential check.

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

/// The adapter type of a path or body, refused unless it is one this runtime knows.
fn adapter_kind(kind: &str) -> ApiResult<String> {
    if adf_adapters::KNOWN_ADAPTERS.contains(&kind) {
        Ok(kind.to_owned())
    } else {
        Err(ApiError::bad_request(format!(
            "'{kind}' is not a channel adapter type (one of {})",
            adf_adapters::KNOWN_ADAPTERS.join(", ")
        )))
    }
}

/// `POST /agents/{id}/runtime/adapters {adapterType, config}`: sets `adapters.<type>` to
/// `config` (the entry: `enabled`, `config`, `policy`, `limits`), checked as the adapter host
/// checks it. Credentials never go into the config: `PUT /adapters/credentials` seals them.
pub(super) async fn adapter_attach(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, Response> {
    let kind = text_field(&body, "adapterType")
        .ok_or_else(|| ApiError::bad_request("adapterType is required"))
        .and_then(adapter_kind)
        .map_err(IntoResponse::into_response)?;
    let Some(entry) = body.get("config").filter(|c| c.is_object()).cloned() else {
        return Err(ApiError::bad_request("config is required (an object)").into_response());
    };
    adf_adapters::AdapterSettings::parse(&kind, &entry)
        .map_err(|e| ApiError::bad_request(e.to_string()).into_response())?;
    let (agent_id, mut config) = config_of(&state, &id)
        .await
        .map_err(IntoResponse::into_response)?;
    let already = config.pointer(&format!("/adapters/{kind}")).is_some();
    if let Some(object) = config.as_object_mut() {
        let adapters = object.entry("adapters").or_insert_with(|| json!({}));
        if !adapters.is_object() {
            *adapters = json!({});
        }
        if let Some(adapters) = adapters.as_object_mut() {
            adapters.insert(kind.clone(), entry);
        }
    }
    replace(&state, &agent_id, config).await?;
    Ok(Json(json!({
        "agentId": agent_id,
        "adapterType": kind,
        "success": true,
        "updated": already,
    }))
    .into_response())
}

/// `DELETE /agents/{id}/adapters/{adapterType}`: removes `adapters.<type>` (the adapter stops)
/// and its `adapter:<type>:` credentials.
pub(super) async fn adapter_detach(
    State(state): State<AppState>,
    Path((id, kind)): Path<(String, String)>,
) -> Result<Response, Response> {
    let kind = adapter_kind(&kind).map_err(IntoResponse::into_response)?;
    let (agent_id, mut config) = config_of(&state, &id)
        .await
        .map_err(IntoResponse::into_response)?;
    let removed = config
        .get_mut("adapters")
        .and_then(Value::as_object_mut)
        .and_then(|adapters| adapters.remove(&kind))
        .is_some();
    if removed {
        replace(&state, &agent_id, config).await?;
    }
    let deleted = delete_prefix(&state, &agent_id, format!("adapter:{kind}:"))
        .await
        .map_err(IntoResponse::into_response)?;
    Ok(Json(json!({
        "agentId": agent_id,
        "adapterType": kind,
        "success": true,
        "removed": removed,
        "deletedCredentials": deleted,
    }))
    .into_response())
}

/// What kind of problem a failed credential check found, for clients that act on it.
fn problem(error: &adf_adapters::AdapterError) -> &'static str {
    use adf_adapters::AdapterError as E;
    match error {
        E::MissingCredential { .. } => "missing_credential",
        E::CredentialRefused { .. } => "credential_refused",
        E::Transport { .. } => "unreachable",
        E::Egress { .. } => "egress_refused",
        E::RateLimited { .. } => "rate_limited",
        E::Platform { .. } => "platform_error",
        E::Config { .. } | E::Invalid(_) => "config",
        E::NotSupported { .. } => "not_supported",
        // The sink and state directory, and whatever comes later: the runtime's own trouble.
        _ => "runtime",
    }
}

/// `POST /agents/{id}/adapters/{adapterType}/test`: checks the adapter's credential against
/// its platform without starting it (Telegram: `getMe`). `{ok: true, …the platform's answer}`,
/// or `{ok: false, problem, error}` with the error in words an owner can act on.
pub(super) async fn adapter_test(
    State(state): State<AppState>,
    Path((id, kind)): Path<(String, String)>,
) -> Result<Response, Response> {
    let kind = adapter_kind(&kind).map_err(IntoResponse::into_response)?;
    let agent = find(&state, &id).map_err(IntoResponse::into_response)?;
    let answer = match state.daemon.test_adapter(&agent, &kind).await {
        Ok(Value::Object(mut answer)) => {
            answer.insert("ok".into(), json!(true));
            answer.insert("adapter".into(), json!(kind));
            answer.insert("agentId".into(), json!(agent.id));
            Value::Object(answer)
        }
        Ok(other) => json!({ "ok": true, "adapter": kind, "agentId": agent.id, "result": other }),
        Err(error) => json!({
            "ok": false,
            "adapter": kind,
            "agentId": agent.id,
            "problem": problem(&error),
            "error": error.to_string(),
        }),
    };
    Ok(Json(answer).into_response())
}
