//! The HTTP API: the reference daemon's paths, bodies and status codes (see `openapi.rs` for
//! the list this daemon serves), built on axum.
//!
//! Handlers stay thin: find the agent, run one job on its store worker (one transaction per
//! write), shape the answer, emit the event. No agent logic lives here.

mod agents;
mod mcp;
mod resources;
mod review;
mod settings;
mod sse;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
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

/// The router with every route behind the front door (`frontdoor::front_door`).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/login", get(crate::frontdoor::login))
        .route("/openapi.json", get(openapi))
        .route("/events", get(sse::events))
        .route("/settings", get(settings::get_all).patch(settings::patch))
        .route(
            "/settings/{key}",
            get(settings::get_one).put(settings::put_one),
        )
        .route("/agents", get(agents::list))
        .route("/agents/load", post(agents::load))
        .route("/agents/autostart", post(review::autostart))
        .route("/agents/review", get(review::get))
        .route("/agents/review/accept", post(review::accept))
        .route("/agents/{id}", get(agents::get_ref))
        .route("/runtime/mcp", get(mcp::runtime))
        .route("/agents/{id}/runtime/mcp", get(mcp::agent))
        .route("/agents/{id}/mcp", get(mcp::agent))
        .route("/agents/{id}/status", get(agents::status))
        .route("/agents/{id}/start", post(agents::start))
        .route("/agents/{id}/stop", post(agents::stop))
        .route("/agents/{id}/unload", post(agents::stop))
        .route("/agents/{id}/state", post(agents::set_state))
        .route(
            "/agents/{id}/config",
            get(resources::config_get).put(resources::config_put),
        )
        .route("/agents/{id}/files", get(resources::files_list))
        .route(
            "/agents/{id}/files/content",
            get(resources::file_get)
                .put(resources::file_put)
                .delete(resources::file_delete),
        )
        .route(
            "/agents/{id}/files/protection",
            axum::routing::patch(resources::file_protection),
        )
        .route(
            "/agents/{id}/files/authorized",
            axum::routing::patch(resources::file_authorized),
        )
        .route("/agents/{id}/meta", get(resources::meta_list))
        .route(
            "/agents/{id}/meta/{key}",
            axum::routing::put(resources::meta_put).delete(resources::meta_delete),
        )
        .route(
            "/agents/{id}/meta/{key}/protection",
            axum::routing::patch(resources::meta_protection),
        )
        .route(
            "/agents/{id}/timers",
            get(resources::timers_list).post(resources::timer_add),
        )
        .route(
            "/agents/{id}/timers/{timer_id}",
            axum::routing::delete(resources::timer_delete),
        )
        .route(
            "/agents/{id}/inbox",
            get(resources::inbox).post(crate::mesh::inbox_post),
        )
        .route("/agents/{id}/card", get(crate::mesh::card_get))
        .route("/agents/{id}/health", get(crate::mesh::health_get))
        .route("/agents/{id}/outbox", get(resources::outbox))
        .route("/agents/{id}/tasks", get(resources::tasks_list))
        .route("/agents/{id}/tasks/{task_id}", get(resources::task_get))
        .route(
            "/agents/{id}/tasks/{task_id}/resolve",
            post(resources::task_resolve),
        )
        .route("/agents/{id}/logs", get(resources::logs))
        .route("/agents/{id}/logs/after", get(resources::logs_after))
        // Turns, their history and the owner's answers to them (hil.rs holds the waits).
        .route(
            "/agents/{id}/chat",
            get(agents::chat_read)
                .post(agents::chat_post)
                .delete(agents::chat_delete),
        )
        .route("/agents/{id}/loop", get(agents::loop_read))
        .route("/agents/{id}/trigger", post(agents::trigger))
        .route("/agents/{id}/abort", post(agents::abort))
        .route("/agents/{id}/asks", get(agents::asks))
        .route(
            "/agents/{id}/asks/{request_id}/respond",
            post(agents::ask_respond),
        )
        .route(
            "/agents/{id}/suspend/respond",
            post(agents::suspend_respond),
        )
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::frontdoor::front_door,
        ))
        .with_state(state)
}

async fn health() -> Response {
    axum::Json(json!({ "ok": true })).into_response()
}

async fn openapi() -> Response {
    axum::Json(crate::openapi::document()).into_response()
}

async fn not_found(request: Request) -> ApiError {
    ApiError::not_found(format!(
        "Route {} {} not found",
        request.method(),
        request.uri().path()
    ))
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
