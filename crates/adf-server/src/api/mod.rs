//! The HTTP API: the reference daemon's paths, bodies and status codes (see `openapi.rs` for
//! the list this daemon serves), built on axum.
//!
//! Handlers stay thin: find the agent, run one job on its store worker (one transaction per
//! write), shape the answer, emit the event. No agent logic lives here.

mod admin;
mod agents;
mod attach;
mod auth;
mod contents;
mod identity;
mod mcp;
mod mesh_routes;
mod models;
mod network;
mod provider_test;
mod resources;
mod review;
mod runtime;
mod settings;
mod sse;
mod state;
mod studio;
pub mod unsupported;
mod webhooks;

pub use state::AppState;
pub(crate) use state::{JsonBody, find, success, text_field};

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post, put};
use serde_json::json;

use crate::error::ApiError;

/// The router with every route behind the front door (`frontdoor::front_door`).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/login", get(crate::frontdoor::login))
        .route("/auth/login-codes", post(auth::login_code))
        .route("/auth/sessions", get(auth::list).delete(auth::revoke_all))
        .route("/auth/sessions/{id}", delete(auth::revoke))
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
            axum::routing::delete(resources::timer_delete).put(contents::timer_update),
        )
        .route(
            "/agents/{id}/inbox",
            get(resources::inbox)
                .post(network::inbox_post)
                .delete(contents::inbox_clear),
        )
        .route(
            "/agents/{id}/adapters/{adapter}/webhook",
            get(webhooks::webhook).post(webhooks::webhook),
        )
        .route("/agents/{id}/card", get(mesh_routes::card_get))
        .route("/agents/{id}/health", get(mesh_routes::health_get))
        .route("/agents/{id}/outbox", get(resources::outbox))
        .route("/agents/{id}/tasks", get(resources::tasks_list))
        .route("/agents/{id}/tasks/{task_id}", get(resources::task_get))
        .route(
            "/agents/{id}/tasks/{task_id}/resolve",
            post(resources::task_resolve),
        )
        .route(
            "/agents/{id}/logs",
            get(resources::logs).delete(contents::logs_clear),
        )
        .route("/agents/{id}/logs/after", get(resources::logs_after))
        .route(
            "/agents/{id}/umbilical/events",
            get(network::umbilical_events),
        )
        .merge(turn_and_studio_routes())
        .merge(more_routes())
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            crate::frontdoor::DoorState {
                gate: Arc::clone(&state.gate),
                mesh: state.daemon.mesh_arc(),
            },
            crate::frontdoor::front_door,
        ))
        .with_state(state)
}

/// Turns, their history and the owner's answers to them (hil.rs holds the waits); the Studio:
/// its page (adf-studio's embedded assets at `/`) and its own routes.
fn turn_and_studio_routes() -> Router<AppState> {
    Router::new()
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
        .merge(adf_studio::router())
        .route("/studio/api/fleet", get(studio::fleet))
        .route("/studio/api/agents", post(studio::create))
        .route("/studio/api/agents/{id}/download", get(studio::download))
        .route("/studio/api/agents/{id}/live", get(studio::live))
        .route("/studio/api/agents/{id}/fork", post(studio::fork))
        .route(
            "/runtime/providers/{providerId}/test",
            post(provider_test::test_provider),
        )
}

/// The agent's identity: DID, keys, password and the values kept per purpose.
fn identity_routes() -> Router<AppState> {
    Router::new()
        .route("/agents/{id}/identities", get(identity::identities))
        .route("/agents/{id}/identity", get(identity::purpose_names))
        .route("/agents/{id}/identity/entries", get(identity::identities))
        .route("/agents/{id}/identity/did", get(identity::did))
        .route(
            "/agents/{id}/identity/password",
            get(identity::password_status)
                .put(identity::password_set)
                .delete(identity::password_remove),
        )
        .route(
            "/agents/{id}/identity/password/unlock",
            post(identity::password_unlock),
        )
        .route(
            "/agents/{id}/identity/password/change",
            post(identity::password_change),
        )
        .route(
            "/agents/{id}/identity/generate-keys",
            post(identity::generate_keys),
        )
        .route("/agents/{id}/identity/wipe", post(identity::wipe))
        .route(
            "/agents/{id}/identity/{purpose}",
            get(identity::value_get)
                .put(identity::value_put)
                .delete(identity::value_delete),
        )
        .route(
            "/agents/{id}/identity/{purpose}/code-access",
            patch(identity::code_access),
        )
        .route(
            "/agents/{id}/identity-prefix",
            delete(identity::prefix_delete),
        )
}

/// The operations added with the Studio issue: the agent's other contents, runtime and
/// network reads, identity and credentials, admin listings, and the documented 501s of later
/// capabilities (`unsupported`).
fn more_routes() -> Router<AppState> {
    Router::new()
        .route(
            "/agents/{id}/document",
            get(contents::text_get::<contents::Document>)
                .put(contents::text_put::<contents::Document>),
        )
        .route(
            "/agents/{id}/mind",
            get(contents::text_get::<contents::Mind>).put(contents::text_put::<contents::Mind>),
        )
        .route("/agents/{id}/files/rename", post(contents::file_rename))
        .route(
            "/agents/{id}/files/rename-folder",
            post(contents::folder_rename),
        )
        .route("/agents/{id}/tables", get(contents::tables_list))
        .route(
            "/agents/{id}/tables/{table}",
            get(contents::table_query).delete(contents::table_drop),
        )
        .route("/agents/{id}/usage", get(contents::usage))
        .route("/agents/{id}/runtime", get(runtime::agent_runtime))
        .route("/agents/{id}/triggers", get(runtime::agent_triggers))
        .route(
            "/agents/{id}/runtime/triggers",
            get(runtime::agent_triggers),
        )
        .route("/agents/{id}/adapters", get(runtime::agent_adapters))
        .route(
            "/agents/{id}/runtime/adapters",
            get(runtime::agent_adapters).post(attach::adapter_attach),
        )
        .route(
            "/agents/{id}/adapters/{adapter_type}",
            delete(attach::adapter_detach),
        )
        .route(
            "/agents/{id}/adapters/{adapter_type}/test",
            post(attach::adapter_test),
        )
        .merge(identity_routes())
        .route("/agents/{id}/providers", post(attach::provider_attach))
        .route(
            "/agents/{id}/providers/{provider_id}",
            delete(attach::provider_detach),
        )
        .route(
            "/agents/{id}/providers/{provider_id}/credential",
            put(identity::provider_credential_put),
        )
        .route(
            "/agents/{id}/providers/{provider_id}/credentials",
            get(identity::provider_credentials),
        )
        .route(
            "/agents/{id}/mcp/credentials",
            get(identity::namespaced_credentials::<identity::McpCredentials>)
                .put(identity::namespaced_put::<identity::McpCredentials>),
        )
        .route("/agents/{id}/mcp/servers", post(attach::mcp_attach))
        .route(
            "/agents/{id}/mcp/servers/{server_name}",
            delete(attach::mcp_detach),
        )
        .route(
            "/agents/{id}/adapters/credentials",
            get(identity::namespaced_credentials::<identity::AdapterCredentials>)
                .put(identity::namespaced_put::<identity::AdapterCredentials>),
        )
        .route("/runtime", get(runtime::runtime))
        .route("/compute/status", get(runtime::compute_status))
        .route("/runtime/settings", get(runtime::settings))
        .route("/runtime/providers", get(runtime::providers))
        .route("/runtime/auth", get(runtime::auth))
        .route("/runtime/adapters", get(runtime::adapters))
        .route("/runtime/usage", get(runtime::usage))
        .route("/runtime/network", get(runtime::network))
        .route("/runtime/models", get(models::list))
        .route("/runtime/token-count", post(models::count))
        .route("/runtime/token-count/batch", post(models::count_batch))
        .route("/diagnostics", get(runtime::diagnostics))
        .route("/network", get(runtime::network))
        .route("/network/mesh", get(network::mesh))
        .route("/network/mesh/enable", post(network::enable))
        .route("/network/mesh/disable", post(network::disable))
        .route("/network/mesh/recent-tools", get(network::recent_tools))
        .route(
            "/network/mesh/discovered-runtimes",
            get(network::discovered_runtimes),
        )
        .route("/network/mesh/lan-addresses", get(network::lan_addresses))
        .route("/network/server", get(network::server))
        .merge(admin::routes())
        .merge(unsupported::routes())
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
