//! The review gate and tracked directories over HTTP: `GET /agents/review?filePath=`,
//! `POST /agents/review/accept {filePath}` and `POST /agents/autostart {trackedDirs,
//! maxDepth}` (see `crate::review` for what is reviewed and where it is kept).

use std::collections::HashMap;
use std::path::PathBuf;

use axum::Json;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{AppState, JsonBody};
use crate::error::{ApiError, ApiResult};
use crate::review::DEFAULT_MAX_DEPTH;

fn file_path(value: Option<&Value>) -> ApiResult<PathBuf> {
    value
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| ApiError::bad_request("filePath is required"))
}

pub(super) async fn get(
    State(state): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let path = file_path(
        params
            .get("filePath")
            .map(|p| Value::from(p.as_str()))
            .as_ref(),
    )?;
    let review = state.daemon.review(&path).await?;
    Ok(Json(review.to_json()).into_response())
}

pub(super) async fn accept(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let path = file_path(body.get("filePath"))?;
    let review = state.daemon.accept_review(&path).await?;
    Ok(Json(review.to_json()).into_response())
}

pub(super) async fn autostart(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let dirs: Vec<PathBuf> = match body.get("trackedDirs") {
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .map(PathBuf::from)
            .collect(),
        _ => {
            return Err(ApiError::bad_request(
                "trackedDirs is required (an array of directory paths)",
            ));
        }
    };
    let max_depth = match body.get("maxDepth") {
        None | Some(Value::Null) => DEFAULT_MAX_DEPTH,
        Some(value) => value
            .as_f64()
            .filter(|d| d.is_finite() && *d >= 0.0)
            // Saturating: a depth beyond the limit is the limit.
            .map(|d| d.min(f64::from(u16::MAX)) as usize)
            .ok_or_else(|| ApiError::bad_request("maxDepth must be a non-negative number"))?,
    };
    let report = state.daemon.autostart(&dirs, max_depth).await;
    Ok(Json(report).into_response())
}
