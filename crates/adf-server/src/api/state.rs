//! What every handler shares, below the router: [`AppState`], the agent lookup, the JSON body
//! extractor and the common answers. The handler modules and the front door import these
//! from here, never the router (`api/mod.rs`), so the router points down at its handlers and
//! nothing points back up.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::daemon::{Agent, Daemon};
use crate::error::{ApiError, ApiResult};
use crate::frontdoor::Gate;

/// Shared state of every handler.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The daemon every handler reads and drives (a cheap clone sharing its agents).
    pub daemon: Daemon,
    /// The front door's rules: Host, origin, token, content type, public body budget.
    pub gate: Arc<Gate>,
}

impl axum::extract::FromRef<AppState> for Arc<Gate> {
    /// The front door's rules, for the routes the front door answers itself (`/login`).
    fn from_ref(state: &AppState) -> Self {
        Arc::clone(&state.gate)
    }
}

/// Looks up `{id}` (config id, handle or name).
pub(crate) fn find(state: &AppState, key: &str) -> ApiResult<Arc<Agent>> {
    Ok(state.daemon.agent(key)?)
}

/// A non-empty string field of a JSON body (absent, empty or not a string: `None`).
pub(crate) fn text_field<'a>(body: &'a Value, key: &str) -> Option<&'a str> {
    body.get(key)
        .and_then(Value::as_str)
        .filter(|text| !text.is_empty())
}

/// A request body parsed as a JSON object (see [`body_json`]): the one way handlers take a
/// body. Whether the content type is JSON is the front door's decision (its 415), made
/// before any handler runs; a body over axum's limit keeps axum's own rejection.
#[derive(Debug)]
pub(crate) struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        body_json(&bytes)
            .map(Self)
            .map_err(IntoResponse::into_response)
    }
}

/// Parses a JSON body; an empty body is `{}`. Bad JSON is a 400 in the reference's shape
/// rather than axum's plain-text rejection.
fn body_json(bytes: &Bytes) -> ApiResult<Value> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request("body must be a JSON object"));
    }
    Ok(value)
}

/// `{agentId, success: true}`, the reference's answer to a write.
pub(crate) fn success(agent: &Agent) -> Response {
    axum::Json(json!({ "agentId": agent.id, "success": true })).into_response()
}
