//! Admin listings (`/admin/*/packages`): the packages the settings register for MCP servers,
//! channel adapters and the sandbox. This daemon installs none itself, so every install,
//! uninstall and check answers `NOT_SUPPORTED` (capability `package-install`, see
//! `unsupported.rs`); the listings say `installsSupported: false`.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::AppState;
use super::runtime::read_settings;
use super::unsupported::not_supported;
use crate::error::ApiResult;

async fn listing(state: AppState, key: &str) -> ApiResult<Response> {
    let (_, values) = read_settings(&state)?;
    let packages = values.get(key).cloned().unwrap_or_else(|| json!([]));
    let packages: Vec<Value> = packages
        .as_array()
        .into_iter()
        .flatten()
        .map(crate::settings::redact_entry)
        .collect();
    Ok(Json(json!({
        "packages": packages,
        "source": format!("settings.{key}"),
        "installsSupported": false,
    }))
    .into_response())
}

async fn mcp(State(state): State<AppState>) -> ApiResult<Response> {
    listing(state, "mcpServers").await
}

async fn adapters(State(state): State<AppState>) -> ApiResult<Response> {
    listing(state, "adapters").await
}

async fn sandbox(State(state): State<AppState>) -> ApiResult<Response> {
    listing(state, "sandboxPackages").await
}

/// The listing routes, with the installs that share their paths.
pub(super) fn routes() -> Router<AppState> {
    let install =
        |what: &'static str| move || async move { not_supported("package-install", what) };
    Router::new()
        .route("/admin/mcp/packages", get(mcp))
        .route(
            "/admin/adapters/packages",
            get(adapters)
                .post(install("installing adapter packages from the daemon"))
                .delete(install("installing adapter packages from the daemon")),
        )
        .route(
            "/admin/sandbox/packages",
            get(sandbox)
                .post(install("installing sandbox packages from the daemon"))
                .delete(install("installing sandbox packages from the daemon")),
        )
}
