//! The Studio's own routes (`/studio/api/…`), for what the reference API has no operation
//! for; the page itself is `adf-studio`'s, mounted at `/` in [`super::router`].
//!
//! - `GET /studio/api/fleet?offset&limit&q`: one page of the fleet with what a fleet row
//!   shows (state, model, last activity, pending approvals and asks, unread inbox), so the
//!   page asks once per page instead of once per agent and field. File-derived fields are
//!   read with a short deadline: an agent whose worker is busy in a turn is shown `busy`
//!   rather than holding the whole page.
//! - `POST /studio/api/agents {name, description?}`: creates a new agent file (as `adf new`
//!   does: default config, owner and runtime identity) in the first tracked directory, else
//!   `$ADF_HOME/agents`, and loads it.
//! - `GET /studio/api/agents/{id}/download`: a consistent copy of the agent's `.adf` file
//!   (SQLite's online backup, so a turn in flight never yields a torn file).
//! - `GET /studio/api/agents/{id}/live`: the agent's live feed ([`crate::live`]) as SSE.
//! - `POST /studio/api/agents/{id}/fork {name?}`: a new agent file beside the parent's with
//!   the parent's current state (`AdfFile::fork_to`: new id, name and handle, no identity),
//!   a fresh identity provisioned as `adf new` does, loaded; `201 {id, filePath, name,
//!   handle, did, parentId}`. Sealed credentials are not copied (they belong to the parent's
//!   identity): set them again on the fork.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use adf_runtime::identity::{self, LocalKeys};
use adf_store::views::LogFilter;
use adf_store::{AdfFile, CreateOptions, ForkOptions};

use super::{AppState, JsonBody, find, text_field};
use crate::daemon::Agent;
use crate::error::{ApiError, ApiResult};

/// Rows per fleet page unless `limit` says otherwise (at most [`MAX_PAGE`]).
pub(super) const DEFAULT_PAGE: usize = 50;
/// The largest fleet page.
pub(super) const MAX_PAGE: usize = 200;
/// How long a fleet row waits for its agent's worker before it is shown `busy`.
const ROW_DEADLINE: Duration = Duration::from_millis(250);

fn number(params: &HashMap<String, String>, key: &str, default: usize) -> ApiResult<usize> {
    match params.get(key).filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(text) => text
            .parse()
            .map_err(|_| ApiError::bad_request(format!("{key} must be a non-negative integer"))),
    }
}

pub(super) async fn fleet(
    State(state): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let offset = number(&params, "offset", 0)?;
    let limit = number(&params, "limit", DEFAULT_PAGE)?.clamp(1, MAX_PAGE);
    let query = params
        .get("q")
        .map(|q| q.trim().to_lowercase())
        .unwrap_or_default();
    let matching: Vec<_> = state
        .daemon
        .agents()
        .into_iter()
        .filter(|agent| query.is_empty() || matches(agent, &query))
        .collect();
    let total = matching.len();
    let page = matching.into_iter().skip(offset).take(limit);
    let rows =
        futures::future::join_all(page.map(|agent| async move { fleet_row(&agent).await })).await;
    Ok(
        Json(json!({ "total": total, "offset": offset, "limit": limit, "agents": rows }))
            .into_response(),
    )
}

fn matches(agent: &Agent, query: &str) -> bool {
    let info = agent.info();
    agent.id.to_lowercase().contains(query)
        || info.name.to_lowercase().contains(query)
        || info
            .handle
            .as_deref()
            .is_some_and(|h| h.to_lowercase().contains(query))
        || agent.file_path().to_lowercase().contains(query)
}

async fn fleet_row(agent: &Agent) -> Value {
    let info = agent.info();
    let mut row = json!({
        "id": agent.id,
        "name": info.name,
        "handle": info.handle,
        "filePath": agent.file_path(),
        "state": info.display_state,
        "runtimeState": agent.hil().runtime_state(),
        "pendingAsks": agent.hil().asks().len(),
        "busy": false,
    });
    let read = agent.job(|file| {
        let config = file.config()?;
        let approvals = file.tasks(Some("pending_approval"))?.len();
        let unread = file.inbox_counts()?.unread;
        let last_log = file
            .logs_recent(&LogFilter::default(), 1)?
            .first()
            .and_then(|row| row.created_at);
        let total = file.loop_row_count()?;
        let last_loop = if total > 0 {
            file.loop_page("main", 1, file.loop_row_count_in("main")?.saturating_sub(1))?
                .first()
                .map(|row| row.created_at)
        } else {
            None
        };
        Ok((config, approvals, unread, last_log.max(last_loop)))
    });
    match tokio::time::timeout(ROW_DEADLINE, read).await {
        Ok(Ok((config, approvals, unread, last))) => {
            row["model"] = config
                .pointer("/model/model_id")
                .cloned()
                .unwrap_or(Value::Null);
            row["provider"] = config
                .pointer("/model/provider")
                .cloned()
                .unwrap_or(Value::Null);
            row["pendingApprovals"] = json!(approvals);
            row["unreadInbox"] = json!(unread);
            row["lastActivity"] = json!(last);
        }
        Ok(Err(error)) => row["error"] = json!(error.to_string()),
        Err(_) => row["busy"] = json!(true),
    }
    row
}

/// A file name for an agent called `name`: letters, digits, `-` and `_`, at most 64.
fn file_stem(name: &str) -> Option<String> {
    let stem: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    let stem = stem.trim_matches('-').to_owned();
    (!stem.is_empty()).then_some(stem)
}

pub(super) async fn create(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let Some(name) = text_field(&body, "name").map(str::to_owned) else {
        return Err(ApiError::bad_request("name is required"));
    };
    let stem = file_stem(&name).ok_or_else(|| {
        ApiError::bad_request("name needs at least one letter or digit for the file name")
    })?;
    let description = text_field(&body, "description").map(str::to_owned);
    let home = state.daemon.home().clone();
    let dir = state
        .daemon
        .tracked_directories()
        .into_iter()
        .next()
        .unwrap_or_else(|| home.dir().join("agents"));
    let path: PathBuf = dir.join(format!("{stem}.adf"));
    let target = path.clone();
    // Key derivation and file creation block; keep them off the async workers.
    let owner_created = tokio::task::spawn_blocking(move || -> ApiResult<bool> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| ApiError::internal(format!("cannot create {}: {e}", dir.display())))?;
        if target.exists() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("{} already exists; choose another name", target.display()),
            ));
        }
        let (keys, created) = local_keys(&home)?;
        let mut file = AdfFile::create(
            &target,
            &CreateOptions {
                name: Some(name),
                description,
                handle: None,
                id: None,
            },
        )?;
        if let Err(error) = identity::provision_new(&mut file, &keys) {
            drop(file);
            let _ = std::fs::remove_file(&target);
            return Err(ApiError::internal(format!(
                "cannot provision the new agent's identity: {error}"
            )));
        }
        file.close()?;
        Ok(created)
    })
    .await
    .map_err(|e| ApiError::internal(format!("agent creation stopped: {e}")))??;
    let loaded = state.daemon.load(&path).await?;
    let agent = loaded.agent;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "id": agent.id,
            "filePath": agent.file_path(),
            "name": agent.info().name,
            "handle": agent.info().handle,
            "ownerCreated": owner_created,
        })),
    )
        .into_response())
}

/// The keys `adf new` provisions a file with: the owner (created on first use) and this
/// installation's runtime identity.
fn local_keys(home: &adf_runtime::home::RuntimeHome) -> ApiResult<(LocalKeys, bool)> {
    let (owner, created) = home
        .ensure_owner()
        .map_err(|e| ApiError::internal(format!("cannot set up the owner identity: {e}")))?;
    let runtime = home
        .runtime()
        .map_err(|e| ApiError::internal(format!("cannot read the runtime identity: {e}")))?;
    Ok((LocalKeys::new(Some(owner.identity), Some(runtime)), created))
}

pub(super) async fn fork(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let parent = find(&state, &id)?;
    let name = text_field(&body, "name")
        .map(|n| n.trim().to_owned())
        .unwrap_or_else(|| format!("{} fork", parent.info().name));
    let stem = file_stem(&name).ok_or_else(|| {
        ApiError::bad_request("name needs at least one letter or digit for the file name")
    })?;
    let dir = parent
        .path
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let target = dir.join(format!("{stem}.adf"));
    if target.exists() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("{} already exists; choose another name", target.display()),
        ));
    }
    let home = state.daemon.home().clone();
    let keys = tokio::task::spawn_blocking(move || local_keys(&home))
        .await
        .map_err(|e| ApiError::internal(format!("fork stopped: {e}")))??
        .0;
    let options = ForkOptions {
        name,
        handle: None,
        id: None,
    };
    let copy_at = target.clone();
    let copy = parent
        .job(move |file| file.fork_to(&copy_at, &options))
        .await?;
    let cleanup = target.clone();
    let did = tokio::task::spawn_blocking(move || -> ApiResult<Option<String>> {
        let mut copy = copy;
        if let Err(error) = identity::provision_new(&mut copy, &keys) {
            drop(copy);
            let _ = std::fs::remove_file(&cleanup);
            return Err(ApiError::internal(format!(
                "cannot provision the fork's identity: {error}"
            )));
        }
        let did = copy.meta_get("adf_did")?.map(|m| m.value);
        copy.close()?;
        Ok(did)
    })
    .await
    .map_err(|e| ApiError::internal(format!("fork stopped: {e}")))??;
    let agent = state.daemon.load(&target).await?.agent;
    let info = agent.info();
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "id": agent.id,
            "filePath": agent.file_path(),
            "name": info.name,
            "handle": info.handle,
            "did": did,
            "parentId": parent.id,
        })),
    )
        .into_response())
}

pub(super) async fn download(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let copy = tempfile_path(&agent);
    let target = copy.clone();
    let bytes = agent
        .job(move |file| file.copy_to(&target))
        .await
        .map_err(ApiError::from)
        .and_then(|()| {
            std::fs::read(&copy)
                .map_err(|e| ApiError::internal(format!("cannot read the copy: {e}")))
        });
    let _ = std::fs::remove_file(&copy);
    let bytes = bytes?;
    let name = agent
        .path
        .file_name()
        .map(|n| n.to_string_lossy().replace(['"', '\\', '\r', '\n'], "_"))
        .unwrap_or_else(|| "agent.adf".to_owned());
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.sqlite3"),
    );
    if let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// A fresh path beside the system's temporary files for one download's copy.
fn tempfile_path(agent: &Agent) -> PathBuf {
    let nonce: u64 = rand::random();
    std::env::temp_dir().join(format!("adf-download-{}-{nonce:016x}.adf", agent.id))
}

pub(super) async fn live(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let receiver = agent.live().subscribe();
    let shutdown = state.daemon.shutdown_signal();
    let frames = futures::stream::unfold(
        (receiver, shutdown),
        |(mut receiver, mut shutdown)| async move {
            loop {
                if *shutdown.borrow() {
                    return None;
                }
                tokio::select! {
                    frame = receiver.recv() => match frame {
                        Ok(frame) => {
                            let data = serde_json::to_string(&frame.0).unwrap_or_default();
                            let event = Event::default().event("live").data(data);
                            return Some((Ok::<_, Infallible>(event), (receiver, shutdown)));
                        }
                        // A slow viewer skips what it missed; the transcript has it.
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => return None,
                    },
                    _ = shutdown.changed() => return None,
                }
            }
        },
    )
    .boxed();
    let mut response = Sse::new(frames)
        .keep_alive(KeepAlive::new().interval(super::sse::HEARTBEAT))
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::file_stem;

    #[test]
    fn file_stems_are_plain_and_bounded() {
        assert_eq!(file_stem("My Agent").as_deref(), Some("my-agent"));
        assert_eq!(file_stem("../../etc/passwd").as_deref(), Some("etc-passwd"));
        assert_eq!(file_stem("  ..  "), None);
        assert_eq!(file_stem(&"x".repeat(100)).unwrap().len(), 64);
    }
}
