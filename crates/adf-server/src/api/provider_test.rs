//! `POST /runtime/providers/{providerId}/test {model?}`: the Studio's "test this provider"
//! button. Not a reference operation (its daemon has none); this daemon's own, listed in
//! `/openapi.json`.
//!
//! One model request, resolved exactly as chat resolves a runtime provider
//! (`settings::runtime_resolver`: the settings entry, its `apiKey`), with a one-line prompt,
//! a 16-token budget and no retries, so the answer is the provider's own first word on the
//! matter. Unknown provider id: 404. Otherwise 200 `{providerId, model, ok: true, reply,
//! latencyMs}` or `{providerId, model, ok: false, error}` with the provider's message (a bad
//! key, an unknown model, an unreachable host). The key itself never appears in the answer.

use std::time::Instant;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use adf_providers::Message;
use adf_providers::Provider as _;

use super::runtime::read_settings;
use super::{AppState, JsonBody, text_field};
use crate::error::{ApiError, ApiResult};

/// What the test asks the model: short, so a paid provider spends almost nothing.
const PROMPT: &str = "Reply with the single word OK.";

pub(super) async fn test_provider(
    State(state): State<AppState>,
    Path(provider): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let (_, values) = read_settings(&state)?;
    let entry = values
        .get("providers")
        .and_then(Value::as_array)
        .and_then(|list| {
            list.iter()
                .find(|p| p.get("id").and_then(Value::as_str) == Some(provider.as_str()))
        })
        .cloned()
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "no runtime provider \"{provider}\": add it with PUT /settings/providers"
            ))
        })?;
    let model = text_field(&body, "model")
        .or_else(|| text_field(&entry, "defaultModel"))
        .unwrap_or_default()
        .to_owned();
    let config = json!({
        "model": { "provider": provider, "model_id": model, "max_tokens": 16 },
        "recovery": { "auto_retry": false, "max_attempts": 1 },
    });
    let answer = |result: Result<Value, String>, model: &str| {
        let mut out = json!({ "providerId": provider, "model": model });
        match result {
            Ok(extra) => {
                out["ok"] = json!(true);
                if let (Some(out), Some(extra)) = (out.as_object_mut(), extra.as_object()) {
                    out.extend(extra.clone());
                }
            }
            Err(error) => {
                out["ok"] = json!(false);
                out["error"] = json!(error);
            }
        }
        Json(out).into_response()
    };
    let resolver = crate::settings::runtime_resolver(state.daemon.home());
    let resolved = match resolver.resolve(&config, None) {
        Ok(resolved) => resolved,
        Err(error) => return Ok(answer(Err(error.to_string()), &model)),
    };
    let request = resolved.request(None, vec![Message::user_text(PROMPT)], Vec::new());
    let started = Instant::now();
    let result = resolved.provider.complete(&request).await;
    let latency = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(answer(
        result
            .map(|reply| json!({ "reply": reply.text(), "latencyMs": latency }))
            .map_err(|e| e.to_string()),
        &resolved.model_id,
    ))
}
