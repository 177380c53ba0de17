//! `GET /runtime/models?provider&agentId` (a provider's model list, fetched from the vendor)
//! and `POST /runtime/token-count` / `/runtime/token-count/batch` (token estimates).
//!
//! The model list is the vendor's own (`GET {baseUrl}/models` through `adf-providers`, so
//! through `adf-egress`'s client and the control-API rule), for a provider resolved as chat
//! resolves it: the agent's `providers[]` when `agentId` names one, then the runtime settings,
//! then the built-in ids. A vendor error is the reference's 200 `{provider, models: [], error}`.
//!
//! Token counts are estimates, not a vendor tokenizer: the runtime's own context-budget
//! estimate (`adf_runtime::executor::request::estimate_tokens`, UTF-8 bytes / 4 rounded up),
//! so a count here matches what the executor budgets with. Each answer says so
//! (`estimated: true`, `method`).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::runtime::read_settings;
use super::{AppState, JsonBody, find, text_field};
use crate::error::{ApiError, ApiResult};

/// How a token count was made, in every answer.
const TOKEN_METHOD: &str = "estimate: UTF-8 bytes / 4, rounded up (the runtime's context-budget estimate), not the vendor's tokenizer";

/// The agent config named by `agentId`, if any (404 for an unknown agent).
async fn agent_config(state: &AppState, agent_id: Option<&str>) -> ApiResult<Option<Value>> {
    let Some(id) = agent_id.filter(|id| !id.is_empty()) else {
        return Ok(None);
    };
    let agent = find(state, id)?;
    Ok(Some(agent.job(|file| file.config()).await?))
}

pub(super) async fn list(
    State(state): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let provider = params
        .get("provider")
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| ApiError::bad_request("provider is required (a provider id)"))?
        .to_owned();
    let mut config = agent_config(&state, params.get("agentId").map(String::as_str))
        .await?
        .unwrap_or_else(|| json!({}));
    // Only the provider matters for a listing; a model id keeps the resolver from asking for one.
    config["model"] = json!({ "provider": provider, "model_id": "-" });
    let resolver = crate::settings::runtime_resolver(state.daemon.home());
    let listed = match resolver.resolve(&config, None) {
        Ok(resolved) => resolved.provider.list_models().await,
        Err(error) => Err(error),
    };
    Ok(match listed {
        Ok(models) => Json(json!({ "provider": provider, "models": models })),
        Err(error) => {
            Json(json!({ "provider": provider, "models": [], "error": error.to_string() }))
        }
    }
    .into_response())
}

/// The provider and model a count is reported for: the body's, else the agent's config, else
/// the runtime's default provider.
async fn counted_for(state: &AppState, body: &Value) -> ApiResult<(String, String)> {
    let config = agent_config(state, text_field(body, "agentId")).await?;
    let from_config = |pointer: &str| {
        config
            .as_ref()
            .and_then(|c| c.pointer(pointer))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let provider = match text_field(body, "provider")
        .map(str::to_owned)
        .or_else(|| from_config("/model/provider"))
    {
        Some(provider) => provider,
        None => read_settings(state)?
            .1
            .get("defaultProviderId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    };
    let model = text_field(body, "model")
        .map(str::to_owned)
        .or_else(|| from_config("/model/model_id"))
        .unwrap_or_default();
    Ok((provider, model))
}

fn estimate(text: &str) -> u64 {
    adf_runtime::executor::request::estimate_tokens(text.len())
}

pub(super) async fn count(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let text = body
        .get("text")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("text is required (a string)"))?;
    let count = estimate(text);
    let (provider, model) = counted_for(&state, &body).await?;
    Ok(Json(json!({
        "count": count,
        "provider": provider,
        "model": model,
        "estimated": true,
        "method": TOKEN_METHOD,
    }))
    .into_response())
}

pub(super) async fn count_batch(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let texts = body
        .get("texts")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("texts is required (an array of strings)"))?;
    let counts = texts
        .iter()
        .map(|t| {
            t.as_str()
                .map(estimate)
                .ok_or_else(|| ApiError::bad_request("every entry of texts must be a string"))
        })
        .collect::<ApiResult<Vec<u64>>>()?;
    let (provider, model) = counted_for(&state, &body).await?;
    Ok(Json(json!({
        "counts": counts,
        "provider": provider,
        "model": model,
        "estimated": true,
        "method": TOKEN_METHOD,
    }))
    .into_response())
}
