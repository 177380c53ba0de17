//! `GET`/`POST /agents/{handle}/adapters/{type}/webhook`: a platform's push to an agent's
//! channel adapter, public (no token: the adapter checks the platform's signature or verify
//! token before anything is stored). The handler reads the body within the daemon-wide budget
//! for unauthenticated bodies and hands the request, as it came, to the running adapter.

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use adf_adapters::WebhookRequest;

use super::AppState;
use crate::adapters::webhook::MAX_WEBHOOK_BYTES;

/// The webhook of adapter `kind` of the agent `key`.
pub(crate) async fn webhook(
    State(state): State<AppState>,
    Path((key, kind)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
    request: Request,
) -> Response {
    let Ok(agent) = state.daemon.agent(&key) else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({ "error": format!("Unknown agent \"{key}\"") })),
        )
            .into_response();
    };
    let method = request.method().as_str().to_owned();
    let (parts, body) = request.into_parts();
    // Unauthenticated bytes count against the daemon-wide budget until the adapter is done.
    let (body, held) = match state
        .gate
        .budget()
        .read(&parts.headers, body, MAX_WEBHOOK_BYTES)
        .await
    {
        Ok(read) => read,
        Err(refusal) => return refusal.response("a webhook body exceeds 4 MB"),
    };
    let headers = parts
        .headers
        .iter()
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect();
    let request = WebhookRequest {
        method,
        query,
        headers,
        body,
    };
    let answer = agent.adapters().webhook(&kind, &request).await;
    drop(held);
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, answer.body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(answer.content_type),
    );
    response
}
