//! Operations of the reference daemon that belong to capabilities this runtime does not have
//! yet: compute environments, channel adapters, ChatGPT/Grok subscription logins, installing
//! packages from the daemon and a separate mesh server. Each answers one documented error rather than a 404 or a pretend success:
//!
//! `501 {"error": "<what> is not supported by this runtime yet", "code": "NOT_SUPPORTED",
//! "capability": "<name>"}`
//!
//! The capability names are stable (`compute`, `adapters`, `subscription-auth`,
//! `package-install`, `mesh-server`); `/openapi.json`
//! lists these operations with their 501 (see `openapi.rs`).

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use serde_json::json;

use super::AppState;
use crate::error::ApiError;

/// The stable error code of every answer of this module.
pub const NOT_SUPPORTED: &str = "NOT_SUPPORTED";

/// The 501 for `capability` (`what`: the operation in words).
pub fn not_supported(capability: &'static str, what: &str) -> ApiError {
    let mut error = ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        format!("{what} is not supported by this runtime yet"),
    );
    error.details = json!({ "code": NOT_SUPPORTED, "capability": capability })
        .as_object()
        .cloned();
    error
}

/// (method, path, capability, what): every operation answered here; the table is the
/// OpenAPI document's (`crate::openapi`), which lists them without reaching into the API.
pub use crate::openapi::UNSUPPORTED_OPERATIONS as OPERATIONS;

/// The routes of [`OPERATIONS`].
pub(super) fn routes() -> Router<AppState> {
    let mut router = Router::new();
    // Several methods can share a path: group them so each path is routed once.
    let mut paths: Vec<&str> = OPERATIONS.iter().map(|op| op.1).collect();
    paths.dedup();
    for path in paths {
        let mut method_router = axum::routing::MethodRouter::new();
        for &(method, op_path, capability, what) in OPERATIONS {
            if op_path != path {
                continue;
            }
            let answer = move || async move { not_supported(capability, what) };
            method_router = match method {
                "get" => method_router.merge(get(answer)),
                "post" => method_router.merge(post(answer)),
                _ => method_router.merge(delete(answer)),
            };
        }
        router = router.route(path, method_router);
    }
    router
}
