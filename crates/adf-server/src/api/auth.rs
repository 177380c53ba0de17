//! Browser logins (`sessions.rs`): `POST /auth/login-codes` mints a one-time login link (bearer
//! token only), `GET /auth/sessions` lists the live sessions, `DELETE /auth/sessions/{id}`
//! ends one and `DELETE /auth/sessions` ends them all. None of these exists in the reference
//! daemon, which logs browsers in with the token itself.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use crate::error::{ApiError, ApiResult};
use crate::sessions::{LOGIN_CODE_TTL, SessionInfo};

fn iso(ms: i64) -> Value {
    chrono::DateTime::from_timestamp_millis(ms).map_or(Value::Null, |t| {
        json!(t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
    })
}

fn session_json(session: &SessionInfo, current: Option<&str>) -> Value {
    json!({
        "id": session.id,
        "createdAt": iso(session.created_at_ms),
        "expiresAt": iso(session.expires_at_ms),
        "lastSeenAt": iso(session.last_seen_ms),
        "current": current == Some(session.id.as_str()),
    })
}

/// `POST /auth/login-codes`: a one-time login code for `GET /login?code=` (what `adf studio`
/// opens). Only the bearer token may ask: a session could otherwise renew itself forever.
pub(crate) async fn login_code(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !state.gate.token_holder(&headers) {
        let mut refused = ApiError::new(
            StatusCode::FORBIDDEN,
            "login codes are issued to the daemon token's holder only (Authorization: Bearer <token>), not to a browser session",
        );
        refused.details = json!({ "code": "TOKEN_REQUIRED" }).as_object().cloned();
        return refused.into_response();
    }
    let code = state.gate.sessions().issue_code();
    let body = json!({
        "code": code.code,
        "loginPath": format!("/login?code={}", code.code),
        "expiresAt": iso(code.expires_at_ms),
        "expiresInSeconds": LOGIN_CODE_TTL.as_secs(),
    });
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    response.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    response
}

/// `GET /auth/sessions`: the live browser sessions, oldest first; `current` marks the one
/// this request came with.
pub(crate) async fn list(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let current = state.gate.session_of(&headers);
    let sessions: Vec<Value> = state
        .gate
        .sessions()
        .list()
        .iter()
        .map(|s| session_json(s, current.as_deref()))
        .collect();
    Json(json!({ "sessions": sessions })).into_response()
}

/// `DELETE /auth/sessions/{id}`: ends one session (its cookie stops working at once).
pub(crate) async fn revoke(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    if !state.gate.sessions().revoke(&id) {
        let mut missing = ApiError::not_found(format!("no live session \"{id}\""));
        missing.details = json!({ "code": "SESSION_NOT_FOUND" }).as_object().cloned();
        return Err(missing);
    }
    Ok(Json(json!({ "success": true, "id": id })).into_response())
}

/// `DELETE /auth/sessions`: ends every session and spends every unused login code.
pub(crate) async fn revoke_all(State(state): State<AppState>) -> Response {
    let revoked = state.gate.sessions().revoke_all();
    Json(json!({ "success": true, "revoked": revoked })).into_response()
}
