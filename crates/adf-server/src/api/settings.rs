//! Daemon settings: one JSON object in `$ADF_HOME/settings.json` (mode 0600, written through
//! a temporary file and a rename so a crash never leaves half a file). Writes accept the
//! known keys only (`settings::KNOWN_KEYS`), with the shapes the daemon reads. Reads never
//! return a provider's `apiKey` (`hasApiKey` instead); a write that omits it keeps the stored
//! one, so a value read and written back loses no key.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{AppState, JsonBody};
use crate::error::{ApiError, ApiResult};
use crate::settings::Settings;

fn store(state: &AppState) -> Settings {
    Settings::in_home(state.daemon.home())
}

fn answer(settings: &Settings, values: Map<String, Value>) -> Response {
    Json(json!({
        "filePath": settings.path().display().to_string(),
        "settings": crate::settings::redact_all(&values),
    }))
    .into_response()
}

pub(super) async fn get_all(State(state): State<AppState>) -> ApiResult<Response> {
    let settings = store(&state);
    let values = settings
        .read()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(answer(&settings, values))
}

pub(super) async fn patch(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let Value::Object(changes) = body else {
        return Err(ApiError::bad_request("body must be a JSON object"));
    };
    let refused: Vec<String> = changes
        .iter()
        .filter_map(|(key, value)| crate::settings::check_value(key, value))
        .collect();
    if !refused.is_empty() {
        return Err(ApiError::bad_request(refused.join("; ")));
    }
    let settings = store(&state);
    let _guard = state.daemon.settings_lock().lock().await;
    let values = settings
        .update(|values| {
            for (key, value) in changes {
                let kept = crate::settings::keep_stored_keys(&key, value, values.get(&key));
                values.insert(key, kept);
            }
        })
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(answer(&settings, values))
}

pub(super) async fn get_one(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> ApiResult<Response> {
    let values = store(&state)
        .read()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let value = values
        .get(&key)
        .map(|value| crate::settings::redact(&key, value))
        .or_else(|| crate::settings::default_value(&key))
        .unwrap_or(Value::Null);
    Ok(Json(json!({ "key": key, "value": value })).into_response())
}

pub(super) async fn put_one(
    State(state): State<AppState>,
    Path(key): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let Some(value) = body.get("value").cloned() else {
        return Err(ApiError::bad_request("value is required"));
    };
    if let Some(refused) = crate::settings::check_value(&key, &value) {
        return Err(ApiError::bad_request(refused));
    }
    let settings = store(&state);
    let _guard = state.daemon.settings_lock().lock().await;
    let name = key.clone();
    let values = settings
        .update(move |values| {
            let kept = crate::settings::keep_stored_keys(&name, value, values.get(&name));
            values.insert(name, kept);
        })
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let value = values
        .get(&key)
        .map(|value| crate::settings::redact(&key, value))
        .or_else(|| crate::settings::default_value(&key))
        .unwrap_or(Value::Null);
    Ok(Json(json!({ "key": key, "value": value })).into_response())
}
