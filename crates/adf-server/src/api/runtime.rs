//! Runtime-level reads (`/runtime/*`, `/diagnostics`) and the per-agent runtime diagnostics
//! (`/agents/{id}/runtime`, `/triggers`, `/adapters`): what this daemon runs, read from the
//! settings file and the loaded agents. No read returns a provider key (`hasApiKey` instead).
//!
//! Channel adapters run per agent (`adapters`): their listings carry each adapter's live state.
//! ChatGPT/Grok subscription logins are a later capability: their listings say so
//! (`supported: false`) and their writes answer `NOT_SUPPORTED` (see `unsupported.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::agents::status_value;
use super::contents::Totals;
use super::{AppState, find};
use crate::daemon::Agent;
use crate::error::{ApiError, ApiResult};
use crate::settings::Settings;

pub(super) fn read_settings(state: &AppState) -> ApiResult<(Settings, Map<String, Value>)> {
    let settings = Settings::in_home(state.daemon.home());
    let values = settings
        .read()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((settings, values))
}

fn list<'a>(values: &'a Map<String, Value>, key: &str) -> &'a [Value] {
    values
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

fn has_key(entry: &Value) -> bool {
    text(entry, "apiKey").is_some_and(|k| !k.is_empty())
}

// ---------------------------------------------------------------------------------- settings

fn settings_summary(settings: &Settings, values: &Map<String, Value>) -> Value {
    let count = |key: &str| list(values, key).len();
    let prompt_set =
        |key: &str| text(&Value::Object(values.clone()), key).is_some_and(|p| !p.is_empty());
    let tool_prompts = values
        .get("toolPrompts")
        .and_then(Value::as_object)
        .map_or(0, Map::len);
    json!({
        "configured": settings.path().exists(),
        "filePath": settings.path().display().to_string(),
        "trackedDirectories": values.get("trackedDirectories").cloned().unwrap_or_else(|| json!([])),
        "maxDirectoryScanDepth": values.get("maxDirectoryScanDepth").cloned().unwrap_or_else(|| json!(crate::review::DEFAULT_MAX_DEPTH)),
        "autoCompactThreshold": values.get("autoCompactThreshold").cloned().unwrap_or(Value::Null),
        "promptOverrides": {
            "globalSystemPrompt": prompt_set("globalSystemPrompt"),
            "compactionPrompt": prompt_set("compactionPrompt"),
            "toolPrompts": tool_prompts,
        },
        "packageCounts": {
            "sandboxPackages": count("sandboxPackages"),
            "mcpServers": count("mcpServers"),
            "adapters": count("adapters"),
            "providers": count("providers"),
        },
    })
}

/// `GET /runtime/settings`: a summary of the settings file (no values of prompts or keys).
pub(super) async fn settings(State(state): State<AppState>) -> ApiResult<Response> {
    let (settings, values) = read_settings(&state)?;
    Ok(Json(settings_summary(&settings, &values)).into_response())
}

// ---------------------------------------------------------------------------------- providers

fn provider_view(entry: &Value) -> Value {
    json!({
        "id": text(entry, "id").unwrap_or_default(),
        "type": text(entry, "type").unwrap_or_default(),
        "name": text(entry, "name").or(text(entry, "id")).unwrap_or_default(),
        "baseUrl": text(entry, "baseUrl"),
        "defaultModel": text(entry, "defaultModel"),
        "requestDelayMs": entry.get("requestDelayMs").and_then(Value::as_u64).unwrap_or(0),
        "credentialStorage": "app",
        "hasApiKey": has_key(entry),
        "params": entry.get("params").cloned().unwrap_or_else(|| json!([])),
    })
}

async fn configs(agents: &[Arc<Agent>]) -> Vec<(Arc<Agent>, Value)> {
    let mut out = Vec::with_capacity(agents.len());
    for agent in agents {
        let config = agent.job(|file| file.config()).await.unwrap_or(Value::Null);
        out.push((Arc::clone(agent), config));
    }
    out
}

/// Where an agent's provider comes from: its own file (`agent`), the runtime settings
/// (`app`), a built-in type (`builtin`) or nowhere (`missing`).
fn provider_source(config: &Value, runtime: &[Value], provider: &str) -> &'static str {
    let in_file = list_of(config, "providers")
        .iter()
        .any(|p| text(p, "id") == Some(provider));
    if in_file {
        "agent"
    } else if runtime.iter().any(|p| text(p, "id") == Some(provider)) {
        "app"
    } else if matches!(provider, "anthropic" | "openai" | "openrouter")
        || provider.starts_with("http://")
        || provider.starts_with("https://")
    {
        "builtin"
    } else {
        "missing"
    }
}

fn list_of<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

async fn providers_value(state: &AppState, values: &Map<String, Value>) -> Value {
    let runtime = list(values, "providers");
    let providers: Vec<Value> = runtime.iter().map(provider_view).collect();
    let mut usage = Vec::new();
    for (agent, config) in configs(&state.daemon.agents()).await {
        let info = agent.info();
        let provider = config
            .pointer("/model/provider")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        usage.push(json!({
            "agentId": agent.id,
            "handle": info.handle,
            "name": info.name,
            "providerId": provider,
            "modelId": config.pointer("/model/model_id").cloned().unwrap_or(Value::Null),
            "source": provider_source(&config, runtime, &provider),
            "credentialStorage": Value::Null,
        }));
    }
    json!({ "providers": providers, "agentUsage": usage })
}

/// `GET /runtime/providers`: the settings' providers (keys as `hasApiKey`) and which provider
/// each loaded agent uses.
pub(super) async fn providers(State(state): State<AppState>) -> ApiResult<Response> {
    let (_, values) = read_settings(&state)?;
    Ok(Json(providers_value(&state, &values).await).into_response())
}

fn auth_value(values: &Map<String, Value>) -> Value {
    let providers: Vec<Value> = list(values, "providers")
        .iter()
        .map(|p| {
            json!({
                "id": text(p, "id").unwrap_or_default(),
                "type": text(p, "type").unwrap_or_default(),
                "name": text(p, "name").or(text(p, "id")).unwrap_or_default(),
                "credentialStorage": "app",
                "hasApiKey": has_key(p),
            })
        })
        .collect();
    json!({
        "chatgpt": { "authenticated": false, "supported": false },
        "grok": { "authenticated": false, "flowPending": false, "supported": false },
        "providers": providers,
    })
}

/// `GET /runtime/auth`: provider keys present or not; the subscription logins are a later
/// capability (`supported: false`).
pub(super) async fn auth(State(state): State<AppState>) -> ApiResult<Response> {
    let (_, values) = read_settings(&state)?;
    Ok(Json(auth_value(&values)).into_response())
}

/// The reference CLI's order of the built-in adapters (`adf adapters`).
const BUILTIN_ORDER: [&str; 5] = ["telegram", "email", "discord", "slack", "whatsapp"];

/// The channel adapters in the reference's registration shape (`{id, type, package, storage,
/// env}`): the built-in ones (each with whether this runtime runs it), then any registration
/// of the settings' `adapters` list that is not one of them.
fn adapters_value(values: &Map<String, Value>) -> Value {
    let runs = |kind: &str| adf_store::unsupported::RUN_ADAPTERS.contains(&kind);
    let mut builtin: Vec<&str> = BUILTIN_ORDER.to_vec();
    // A type added to the crate before this order knows it is still listed.
    builtin.extend(
        adf_adapters::KNOWN_ADAPTERS
            .iter()
            .filter(|k| !BUILTIN_ORDER.contains(k)),
    );
    let mut adapters: Vec<Value> = builtin
        .iter()
        .map(|kind| {
            json!({
                "id": kind,
                "type": kind,
                "package": null,
                "storage": "app",
                "credentialStorage": "app",
                "env": 0,
                "builtin": true,
                "managed": false,
                "supported": runs(kind),
            })
        })
        .collect();
    for a in list(values, "adapters") {
        let id = text(a, "id").or(text(a, "type")).unwrap_or_default();
        if builtin.contains(&id) {
            continue;
        }
        adapters.push(json!({
            "id": id,
            "type": text(a, "type").unwrap_or(id),
            "package": text(a, "package"),
            "storage": "app",
            "credentialStorage": "app",
            "env": a.get("env").and_then(Value::as_array).map_or(0, Vec::len),
            "builtin": false,
            "managed": a.get("managed").and_then(Value::as_bool).unwrap_or(false),
            "supported": false,
        }));
    }
    let (running, not_yet): (Vec<&str>, Vec<&str>) =
        adf_adapters::KNOWN_ADAPTERS.iter().partition(|k| runs(k));
    let note = if not_yet.is_empty() {
        "each agent runs the adapters its config enables".to_owned()
    } else {
        format!(
            "each agent runs the adapters its config enables ({}; {} not supported yet)",
            running.join(", "),
            not_yet.join(", ")
        )
    };
    json!({
        "adapters": adapters,
        "supported": true,
        "builtin": adf_adapters::KNOWN_ADAPTERS,
        "note": note,
    })
}

/// `GET /runtime/adapters`: the adapter registrations of the settings, and the live state of
/// every loaded agent's adapters.
pub(super) async fn adapters(State(state): State<AppState>) -> ApiResult<Response> {
    let (_, values) = read_settings(&state)?;
    Ok(Json(adapters_with_states(&state, &values).await).into_response())
}

/// [`adapters_value`] with `agents`: each loaded agent that configures adapters, with their
/// live states.
async fn adapters_with_states(state: &AppState, values: &Map<String, Value>) -> Value {
    let mut value = adapters_value(values);
    let mut agents = Vec::new();
    for (agent, config) in configs(&state.daemon.agents()).await {
        if configured_adapters(&config).is_empty() {
            continue;
        }
        agents.push(agent_adapters_value(&agent, &config).await);
    }
    value["agents"] = Value::Array(agents);
    value
}

// ---------------------------------------------------------------------------------- usage

/// `GET /runtime/usage`: token usage on the loop rows of the loaded agents, by provider, by
/// model and by day.
pub(super) async fn usage(State(state): State<AppState>) -> ApiResult<Response> {
    let mut totals = Totals::default();
    let mut by_provider: BTreeMap<String, Totals> = BTreeMap::new();
    let mut by_model: BTreeMap<(String, String), Totals> = BTreeMap::new();
    let mut days: BTreeMap<String, BTreeMap<String, BTreeMap<String, Totals>>> = BTreeMap::new();
    for (agent, config) in configs(&state.daemon.agents()).await {
        let provider = config
            .pointer("/model/provider")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned();
        let rows = agent
            .job(|file| {
                let mut rows = Vec::new();
                for name in file.loop_names()? {
                    for row in file.loop_rows(&name)? {
                        if let Some(tokens) = row.tokens.filter(Value::is_object) {
                            rows.push((row.model, tokens, row.created_at));
                        }
                    }
                }
                Ok(rows)
            })
            .await?;
        for (model, tokens, created_at) in rows {
            let model = model.unwrap_or_else(|| "unknown".into());
            let day = chrono::DateTime::from_timestamp_millis(created_at)
                .map(|t| t.format("%Y-%m-%d").to_string())
                .unwrap_or_else(|| "unknown".into());
            totals.add(&tokens);
            by_provider
                .entry(provider.clone())
                .or_default()
                .add(&tokens);
            by_model
                .entry((provider.clone(), model.clone()))
                .or_default()
                .add(&tokens);
            days.entry(day)
                .or_default()
                .entry(provider.clone())
                .or_default()
                .entry(model)
                .or_default()
                .add(&tokens);
        }
    }
    let with = |mut head: Map<String, Value>, t: &Totals| {
        head.extend(t.json());
        Value::Object(head)
    };
    let providers: Vec<Value> = by_provider
        .iter()
        .map(|(p, t)| with(map(json!({ "provider": p })), t))
        .collect();
    let models: Vec<Value> = by_model
        .iter()
        .map(|((p, m), t)| {
            let day_count = days
                .values()
                .filter(|d| d.get(p).is_some_and(|models| models.contains_key(m)))
                .count();
            with(
                map(json!({ "provider": p, "model": m, "days": day_count })),
                t,
            )
        })
        .collect();
    let usage: Map<String, Value> = days
        .into_iter()
        .map(|(day, providers)| {
            let providers: Map<String, Value> = providers
                .into_iter()
                .map(|(p, models)| {
                    let models: Map<String, Value> = models
                        .into_iter()
                        .map(|(m, t)| (m, json!({ "input": t.input, "output": t.output })))
                        .collect();
                    (p, Value::Object(models))
                })
                .collect();
            (day, Value::Object(providers))
        })
        .collect();
    Ok(Json(json!({
        "source": "adf_loop",
        "note": "Token usage persisted on the loop rows of the agents loaded now, attributed to each agent's configured provider. Agents unloaded earlier are not counted.",
        "totals": totals.json(),
        "byProvider": providers,
        "byModel": models,
        "usage": usage,
    }))
    .into_response())
}

fn map(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

// ---------------------------------------------------------------------------------- network

/// One hosted agent as the mesh lists it.
async fn mesh_agent(state: &AppState, agent: &Arc<Agent>, config: &Value) -> Value {
    let info = agent.info();
    let wake = state.daemon.next_timer_wake(&agent.id);
    let created = config
        .pointer("/metadata/created_at")
        .cloned()
        .unwrap_or(Value::Null);
    let messaging = config.get("messaging").cloned().unwrap_or(Value::Null);
    json!({
        "filePath": agent.file_path(),
        "handle": info.handle,
        "did": info.did,
        "agentId": agent.id,
        "icon": config.get("icon").cloned().unwrap_or(Value::Null),
        "state": info.display_state,
        "status": config.get("status").cloned().unwrap_or(Value::Null),
        "model": config.pointer("/model/model_id").cloned().unwrap_or(Value::Null),
        "createdAt": created,
        "nextWakeAt": wake,
        "participating": messaging.get("receive").and_then(Value::as_bool).unwrap_or(false),
        "canReceive": messaging.get("receive").and_then(Value::as_bool).unwrap_or(false),
        "sendMode": messaging.get("mode").cloned().unwrap_or(Value::Null),
        "visibility": messaging.get("visibility").cloned().unwrap_or(Value::Null),
        "apiRouteCount": config.pointer("/serving/api").and_then(Value::as_array).map_or(0, Vec::len),
        "publicEnabled": config.pointer("/serving/public/enabled").and_then(Value::as_bool).unwrap_or(false),
    })
}

pub(super) async fn mesh_value(state: &AppState, values: &Map<String, Value>) -> Value {
    let mut agents = Vec::new();
    for (agent, config) in configs(&state.daemon.agents()).await {
        agents.push(mesh_agent(state, &agent, &config).await);
    }
    let base = state.daemon.mesh().base_url().map(str::to_owned);
    json!({
        "meshEnabled": mesh_enabled(values),
        "meshServerRunning": base.is_some(),
        "meshServer": {
            "running": base.is_some(),
            "url": base,
            "sharedWithApi": true,
        },
        "agents": agents,
    })
}

/// The `meshEnabled` setting (on unless set to false).
pub(super) fn mesh_enabled(values: &Map<String, Value>) -> bool {
    values
        .get("meshEnabled")
        .and_then(Value::as_bool)
        .unwrap_or(true)
}

async fn network_value(state: &AppState, values: &Map<String, Value>) -> Value {
    let mut agents = Vec::new();
    for (agent, config) in configs(&state.daemon.agents()).await {
        let info = agent.info();
        agents.push(json!({
            "agentId": agent.id,
            "handle": info.handle,
            "name": info.name,
            "filePath": agent.file_path(),
            "receive": config.pointer("/messaging/receive").and_then(Value::as_bool).unwrap_or(false),
            "sendMode": config.pointer("/messaging/mode").cloned().unwrap_or(Value::Null),
            "network": config.pointer("/messaging/network").cloned().unwrap_or(Value::Null),
            "wsConnectionsConfigured": list_of(&config, "ws_connections").len(),
            "servingRoutes": config.pointer("/serving/api").and_then(Value::as_array).map_or(0, Vec::len),
            "publicServingEnabled": config.pointer("/serving/public/enabled").and_then(Value::as_bool).unwrap_or(false),
        }));
    }
    let hostname = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    json!({
        "host": {
            "hostname": hostname,
            "listen": state.daemon.mesh().base_url(),
            // Agents' routes, files and WebSocket routes: their own origin (serving.rs).
            "serve": serve_url(state),
        },
        "mesh": {
            "enabledSetting": mesh_enabled(values),
            "lan": values.get("meshLan").and_then(Value::as_bool).unwrap_or(false),
            "port": values
                .get("meshPort")
                .cloned()
                .or_else(|| crate::settings::default_value("meshPort"))
                .unwrap_or(Value::Null),
            "status": mesh_value(state, values).await,
        },
        "agents": agents,
    })
}

/// `http://<host>:<serving port>` under the control API's host, once the daemon listens.
fn serve_url(state: &AppState) -> Option<String> {
    let base = state.daemon.mesh().base_url()?;
    let port = state.daemon.mesh().serve_port()?;
    crate::mesh::on_port(base, port).map(|url| url.trim_end_matches('/').to_owned())
}

/// `GET /runtime/network` (and `GET /network`): host, mesh status and each agent's
/// messaging and serving configuration.
pub(super) async fn network(State(state): State<AppState>) -> ApiResult<Response> {
    let (_, values) = read_settings(&state)?;
    Ok(Json(network_value(&state, &values).await).into_response())
}

// ---------------------------------------------------------------------------------- whole

/// `GET /runtime`: everything above in one answer, plus the daemon and its agents.
pub(super) async fn runtime(State(state): State<AppState>) -> ApiResult<Response> {
    let (settings, values) = read_settings(&state)?;
    let mut agents = Vec::new();
    for agent in state.daemon.agents() {
        let info = agent.info();
        agents.push(json!({
            "id": agent.id,
            "handle": info.handle,
            "name": info.name,
            "filePath": agent.file_path(),
            "status": status_value(&agent).await?,
        }));
    }
    let mcp: Vec<Value> = list(&values, "mcpServers")
        .iter()
        .map(|s| json!({ "name": text(s, "name").or(text(s, "id")), "package": text(s, "npmPackage").or(text(s, "package")) }))
        .collect();
    Ok(Json(json!({
        "daemon": { "uptime": state.daemon.uptime_secs(), "pid": std::process::id() },
        "settings": settings_summary(&settings, &values),
        "providers": providers_value(&state, &values).await,
        "auth": auth_value(&values),
        "mcp": { "servers": mcp },
        "adapters": adapters_with_states(&state, &values).await,
        "network": network_value(&state, &values).await,
        "compute": adf_compute::status(),
        "agents": agents,
    }))
    .into_response())
}

/// `GET /compute/status`: what `compute_exec` can run in on this machine (adf-compute).
pub(super) async fn compute_status() -> Response {
    Json(adf_compute::status()).into_response()
}

/// `GET /diagnostics`: the daemon and, per agent, its status and configured adapters and MCP
/// servers.
pub(super) async fn diagnostics(State(state): State<AppState>) -> ApiResult<Response> {
    let mut agents = Vec::new();
    for (agent, config) in configs(&state.daemon.agents()).await {
        let mut entry = map(agent.summary());
        entry.insert("status".into(), status_value(&agent).await?);
        entry.insert("adapters".into(), json!(configured_adapters(&config)));
        entry.insert("mcp".into(), json!(configured_mcp(&config)));
        entry.insert(
            "ws".into(),
            json!({ "configured": list_of(&config, "ws_connections").len() }),
        );
        agents.push(Value::Object(entry));
    }
    Ok(Json(json!({
        "daemon": { "uptime": state.daemon.uptime_secs(), "pid": std::process::id() },
        "agents": agents,
    }))
    .into_response())
}

// ---------------------------------------------------------------------------------- per agent

fn configured_adapters(config: &Value) -> Vec<Value> {
    config
        .get("adapters")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(kind, adapter)| {
            json!({
                "type": kind,
                "enabled": adapter.get("enabled").and_then(Value::as_bool).unwrap_or(false),
                "config": adapter,
            })
        })
        .collect()
}

fn configured_mcp(config: &Value) -> Vec<Value> {
    config
        .pointer("/mcp/servers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|server| {
            json!({
                "name": server.get("name"),
                "transport": server.get("transport"),
                "command": server.get("command"),
                "args": server.get("args"),
                "toolCount": server.get("available_tools").and_then(Value::as_array).map_or(0, Vec::len),
            })
        })
        .collect()
}

fn triggers_value(agent: &Agent, config: &Value) -> Value {
    let configured: Vec<Value> = config
        .get("triggers")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(kind, trigger)| {
            let targets = trigger.get("targets").cloned().unwrap_or_else(|| json!([]));
            json!({
                "type": kind,
                "enabled": trigger.get("enabled").and_then(Value::as_bool).unwrap_or(false),
                "targetCount": targets.as_array().map_or(0, Vec::len),
                "targets": targets,
            })
        })
        .collect();
    json!({
        "agentId": agent.id,
        "displayState": agent.info().display_state,
        "configured": configured,
    })
}

/// The agent's configured adapters and their states: the running host's, else (the agent is
/// `off` or none started) `disabled` or `stopped` from the config.
async fn agent_adapters_value(agent: &Agent, config: &Value) -> Value {
    let configured = configured_adapters(config);
    let running = agent.adapters().statuses().await;
    let states: Vec<Value> = match &running {
        Some(statuses) => statuses
            .iter()
            .map(adf_adapters::AdapterStatus::to_json)
            .collect(),
        None => configured
            .iter()
            .map(|c| {
                let state = if c["enabled"] == true {
                    "stopped"
                } else {
                    "disabled"
                };
                json!({ "type": c["type"], "state": state, "error": null, "restarts": 0 })
            })
            .collect(),
    };
    json!({
        "agentId": agent.id,
        "handle": agent.info().handle,
        "configured": configured,
        "states": states,
        "running": running.is_some(),
        "supported": true,
    })
}

async fn config_of(agent: &Agent) -> ApiResult<Value> {
    Ok(agent.job(|file| file.config()).await?)
}

/// `GET /agents/{id}/triggers` and `/runtime/triggers`: the configured triggers and the
/// display state that gates them.
pub(super) async fn agent_triggers(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let config = config_of(&agent).await?;
    Ok(Json(triggers_value(&agent, &config)).into_response())
}

/// `GET /agents/{id}/adapters` and `/runtime/adapters`: adapters configured in the file and
/// their live states.
pub(super) async fn agent_adapters(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let config = config_of(&agent).await?;
    Ok(Json(agent_adapters_value(&agent, &config).await).into_response())
}

/// `GET /agents/{id}/runtime`: status, adapters, MCP servers (as configured), triggers, WebSocket
/// connections (as configured).
pub(super) async fn agent_runtime(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let config = config_of(&agent).await?;
    Ok(Json(json!({
        "agentId": agent.id,
        "status": status_value(&agent).await?,
        "adapters": agent_adapters_value(&agent, &config).await,
        "mcp": { "agentId": agent.id, "configured": configured_mcp(&config) },
        "triggers": triggers_value(&agent, &config),
        "ws": { "configured": list_of(&config, "ws_connections") },
    }))
    .into_response())
}
