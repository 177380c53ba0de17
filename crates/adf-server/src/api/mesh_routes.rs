//! The public mesh endpoints (§12.1): `POST /agents/{handle}/inbox`, `GET
//! /agents/{handle}/card` and `GET /agents/{handle}/health`, served without the bearer token
//! (messages carry their own signatures). Handlers only: what a delivery does is the mesh's
//! (`crate::mesh::DaemonMesh::accept`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use adf_runtime::messaging::receive::Refusal;
use adf_runtime::messaging::{LocalAgent, Origin};

use super::AppState;
use crate::mesh::MAX_BODY_BYTES;
use crate::registry::Agent;

fn refusal_response(refusal: &Refusal) -> Response {
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, axum::Json(json!({ "error": refusal.reason }))).into_response()
}

fn origin_of(request: &Request) -> Origin {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(Origin::Loopback, |info| Origin::of_peer(info.0.ip()))
}

/// The 404 the reference gives for an unknown recipient; hidden agents get it too.
fn unknown(key: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({ "error": format!("Unknown agent \"{key}\"") })),
    )
        .into_response()
}

/// The mesh agent a path names.
fn recipient(state: &AppState, key: &str) -> Option<Arc<Agent>> {
    state.daemon.agent(key).ok()
}

/// `POST /agents/{handle}/inbox`: ALF delivery; 202 `{accepted, id, message_id}` when stored.
pub(crate) async fn inbox_post(
    State(state): State<AppState>,
    axum::extract::Path(key): axum::extract::Path<String>,
    request: Request,
) -> Response {
    let Some(agent) = recipient(&state, &key) else {
        return unknown(&key);
    };
    let origin = origin_of(&request);
    let (parts, body) = request.into_parts();
    // Unauthenticated bytes count against the daemon-wide budget until ingress is done.
    let (wire, held) = match state
        .gate
        .budget()
        .read(&parts.headers, body, MAX_BODY_BYTES)
        .await
    {
        Ok(read) => read,
        Err(refusal) => return refusal.response("message exceeds 25 MB"),
    };
    let answer = match state
        .daemon
        .mesh()
        .accept(&agent, wire, origin, "http")
        .await
    {
        Ok(accepted) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({
                "accepted": true,
                "id": accepted.inbox_id,
                "message_id": accepted.message_id,
                "duplicate": accepted.duplicate,
            })),
        )
            .into_response(),
        Err(refusal) => refusal_response(&refusal),
    };
    drop(held);
    answer
}

/// Whether a requester at `origin` may see `agent` (visibility applies to listing too).
async fn visible(
    state: &AppState,
    agent: &Arc<Agent>,
    origin: Origin,
    with_card: bool,
    base: Option<String>,
) -> Option<LocalAgent> {
    let mesh = state.daemon.mesh_arc();
    let agent = Arc::clone(agent);
    let described =
        tokio::task::spawn_blocking(move || mesh.describe_at(&agent, with_card, base.as_deref()))
            .await
            .ok()
            .flatten()?;
    described
        .tier
        .admits(&origin, &described.path)
        .then_some(described)
}

/// `GET /agents/{handle}/card`: the signed agent card, for requesters the agent admits.
pub(crate) async fn card_get(
    State(state): State<AppState>,
    axum::extract::Path(key): axum::extract::Path<String>,
    request: Request,
) -> Response {
    let Some(agent) = recipient(&state, &key) else {
        return unknown(&key);
    };
    // The front door checked that the Host names this daemon: the card's endpoints use the
    // address the requester reached it by (a LAN peer gets LAN URLs, a local one loopback).
    let base = request
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(|host| format!("http://{host}"));
    match visible(&state, &agent, origin_of(&request), true, base).await {
        Some(described) => axum::Json(described.card).into_response(),
        None => unknown(&key),
    }
}

/// `GET /agents/{handle}/health`: `{ok, handle, did}` for requesters the agent admits.
pub(crate) async fn health_get(
    State(state): State<AppState>,
    axum::extract::Path(key): axum::extract::Path<String>,
    request: Request,
) -> Response {
    let Some(agent) = recipient(&state, &key) else {
        return unknown(&key);
    };
    match visible(&state, &agent, origin_of(&request), false, None).await {
        Some(described) => axum::Json(json!({
            "ok": true,
            "handle": described.handle,
            "did": described.did,
        }))
        .into_response(),
        None => unknown(&key),
    }
}
