//! An agent's identity and credentials over HTTP (§8): purposes and how they are stored, the
//! DID, the credentials envelope's password slot (status, unlock, set, change, remove), setting and
//! deleting credentials, and re-keying or resetting the identity. Everything runs through
//! `adf_runtime::identity` on the agent's store worker with this installation's keys.
//!
//! No answer carries a secret: `GET /identity/{purpose}` (the reference returns the decrypted
//! value there) answers 403 `SECRET_NOT_EXPORTED`, and credential listings show purposes only.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use adf_runtime::identity::{self, IdentityError, LocalKeys, PurposeInfo};
use adf_store::AdfFile;

use super::{AppState, JsonBody, find, success, text_field};
use crate::daemon::Agent;
use crate::error::{ApiError, ApiResult};

type Params = Query<HashMap<String, String>>;

fn coded(status: StatusCode, code: &str, message: String) -> ApiError {
    let mut error = ApiError::new(status, message);
    error.details = json!({ "code": code }).as_object().cloned();
    error
}

fn identity_error(error: IdentityError) -> ApiError {
    match error {
        IdentityError::Store(store) => store.into(),
        IdentityError::Invalid(_) | IdentityError::ReservedPurpose(_) => {
            ApiError::bad_request(error.to_string())
        }
        IdentityError::Crypto(adf_crypto::Error::WrongPassword) => {
            coded(StatusCode::BAD_REQUEST, "WRONG_PASSWORD", error.to_string())
        }
        // Keys or a password that do not open what the client named: its input, not ours.
        IdentityError::Crypto(_) => ApiError::bad_request(error.to_string()),
        IdentityError::Envelope { .. } => {
            coded(StatusCode::CONFLICT, "IDENTITY_LOCKED", error.to_string())
        }
        IdentityError::NoOwner | IdentityError::NoRuntime => {
            coded(StatusCode::CONFLICT, "NO_LOCAL_KEYS", error.to_string())
        }
        other => ApiError::internal(other.to_string()),
    }
}

/// Runs `work` on the agent's worker with the file's identity opened by this installation's
/// keys (the runtime's open cascade: it may add a runtime slot, as every open does).
async fn with_identity<R: Send + 'static>(
    state: &AppState,
    agent: &Agent,
    work: impl FnOnce(&mut AdfFile, &LocalKeys, &mut identity::OpenIdentity) -> Result<R, IdentityError>
    + Send
    + 'static,
) -> ApiResult<R> {
    let keys = LocalKeys::existing(state.daemon.home()).map_err(identity_error)?;
    let outcome = agent
        .job(move |file| {
            let result = identity::open_identity(file, &keys)
                .and_then(|mut open| work(file, &keys, &mut open));
            Ok(result)
        })
        .await?;
    outcome.map_err(identity_error)
}

async fn purposes(agent: &Agent) -> ApiResult<Vec<PurposeInfo>> {
    Ok(agent
        .job(|file| {
            identity::list_purposes(file).map_err(|e| match e {
                IdentityError::Store(store) => store,
                other => adf_store::StoreError::InvalidInput(other.to_string()),
            })
        })
        .await?)
}

fn entries(purposes: &[PurposeInfo]) -> Vec<Value> {
    purposes
        .iter()
        .map(|p| {
            json!({
                "purpose": p.purpose,
                "encrypted": p.encrypted,
                "code_access": p.code_access,
                "encryption_algo": p.encryption_algo,
                "runtime_key": p.runtime_key,
            })
        })
        .collect()
}

/// `GET /agents/{id}/identities` and `/identity/entries`: every purpose, never a value.
pub(super) async fn identities(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let list = purposes(&agent).await?;
    Ok(Json(json!({ "agentId": agent.id, "identities": entries(&list) })).into_response())
}

/// `GET /agents/{id}/identity?prefix=`: the purposes' names.
pub(super) async fn purpose_names(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Params,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let prefix = params.get("prefix").cloned().unwrap_or_default();
    let names: Vec<String> = purposes(&agent)
        .await?
        .into_iter()
        .map(|p| p.purpose)
        .filter(|p| p.starts_with(&prefix))
        .collect();
    Ok(Json(json!({ "agentId": agent.id, "purposes": names })).into_response())
}

/// `GET /agents/{id}/identity/did`.
pub(super) async fn did(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let did = agent
        .job(|file| Ok(file.meta_get("adf_did")?.map(|m| m.value)))
        .await?
        .filter(|d| !d.is_empty());
    Ok(Json(json!({ "agentId": agent.id, "did": did })).into_response())
}

/// `GET /agents/{id}/identity/{purpose}`: refused, values never leave the daemon.
pub(super) async fn value_get(
    State(state): State<AppState>,
    Path((id, purpose)): Path<(String, String)>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    Err(coded(
        StatusCode::FORBIDDEN,
        "SECRET_NOT_EXPORTED",
        format!(
            "identity values are never returned by this daemon (agent {}, purpose \"{purpose}\"): list purposes with GET /agents/{{id}}/identities",
            agent.id
        ),
    ))
}

/// `PUT /agents/{id}/identity/{purpose} {value, code_access?}`: seals the value into the
/// credentials envelope.
pub(super) async fn value_put(
    State(state): State<AppState>,
    Path((id, purpose)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let Some(value) = body.get("value").and_then(Value::as_str) else {
        return Err(ApiError::bad_request("value is required (a string)"));
    };
    let value = zeroize::Zeroizing::new(value.as_bytes().to_vec());
    let code_access = body
        .get("code_access")
        .or(body.get("codeAccess"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let name = purpose.clone();
    with_identity(&state, &agent, move |file, _, open| {
        identity::set_credential(file, open, &name, &value, code_access)
    })
    .await?;
    restart_adapters_for(&state, &agent, &purpose).await;
    Ok(Json(json!({ "agentId": agent.id, "purpose": purpose, "success": true })).into_response())
}

/// A changed `adapter:*` credential restarts the agent's adapters, so they read it again.
async fn restart_adapters_for(state: &AppState, agent: &Arc<Agent>, purpose: &str) {
    if purpose.starts_with("adapter:") {
        state.daemon.restart_adapters(agent).await;
    }
}

fn deletable(purpose: &str) -> ApiResult<()> {
    if purpose.starts_with("crypto:") {
        return Err(ApiError::bad_request(format!(
            "purpose `{purpose}` is one of the runtime's own keys: reset the identity instead (POST /identity/wipe)"
        )));
    }
    Ok(())
}

/// `DELETE /agents/{id}/identity/{purpose}`.
pub(super) async fn value_delete(
    State(state): State<AppState>,
    Path((id, purpose)): Path<(String, String)>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    deletable(&purpose)?;
    let name = purpose.clone();
    let deleted = agent
        .job(move |file| file.identity_delete(&[name.as_str()]))
        .await?;
    if deleted == 0 {
        return Err(ApiError::not_found(format!(
            "Unknown identity purpose \"{purpose}\""
        )));
    }
    restart_adapters_for(&state, &agent, &purpose).await;
    Ok(Json(json!({ "agentId": agent.id, "purpose": purpose, "success": true })).into_response())
}

/// `PATCH /agents/{id}/identity/{purpose}/code-access {code_access}`.
pub(super) async fn code_access(
    State(state): State<AppState>,
    Path((id, purpose)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let Some(allowed) = body
        .get("code_access")
        .or(body.get("codeAccess"))
        .and_then(Value::as_bool)
    else {
        return Err(ApiError::bad_request("code_access (boolean) is required"));
    };
    let name = purpose.clone();
    agent
        .job(move |file| file.identity_set_code_access(&name, allowed))
        .await?;
    Ok(Json(json!({ "agentId": agent.id, "purpose": purpose, "success": true })).into_response())
}

/// `DELETE /agents/{id}/identity-prefix?prefix=`: every non-runtime purpose under the prefix.
pub(super) async fn prefix_delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Params,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let Some(prefix) = params.get("prefix").filter(|p| !p.is_empty()).cloned() else {
        return Err(ApiError::bad_request("prefix is required"));
    };
    deletable(&prefix)?;
    let under = prefix.clone();
    let deleted = agent
        .job(move |file| {
            let names: Vec<String> = file
                .identity_rows()?
                .into_iter()
                .map(|r| r.purpose)
                .filter(|p| p.starts_with(&under) && !p.starts_with("crypto:"))
                .collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            file.identity_delete(&refs)
        })
        .await?;
    Ok(Json(json!({ "agentId": agent.id, "prefix": prefix, "deleted": deleted })).into_response())
}

/// `GET /agents/{id}/identity/password`: whether the credentials envelope has a password slot
/// and whether this installation holds its key.
pub(super) async fn password_status(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    // A file without identity rows has no envelope yet: opening it would provision one, and a
    // read must not write.
    let provisioned = agent
        .job(|file| Ok(!file.identity_rows()?.is_empty()))
        .await?;
    if !provisioned {
        return Ok(Json(json!({
            "agentId": agent.id,
            "needsPassword": false,
            "unlocked": false,
            "unlockedVia": Value::Null,
        }))
        .into_response());
    }
    let report = with_identity(&state, &agent, |file, keys, open| {
        identity::status(file, keys, open)
    })
    .await;
    let (needs, unlocked, via) = match report {
        Ok(report) => (
            report
                .credentials
                .slots
                .iter()
                .any(|s| s.kind == "password"),
            report.credentials.state == "unlocked",
            report.credentials.unlocked_via,
        ),
        // No local keys: nothing on this installation can hold the key.
        Err(error) if error.status == StatusCode::CONFLICT => (false, false, None),
        Err(other) => return Err(other),
    };
    Ok(Json(json!({
        "agentId": agent.id,
        "needsPassword": needs,
        "unlocked": unlocked,
        "unlockedVia": via,
    }))
    .into_response())
}

fn password(body: &Value, key: &str) -> ApiResult<String> {
    text_field(body, key)
        .map(str::to_owned)
        .ok_or_else(|| ApiError::bad_request(format!("{key} is required")))
}

/// `POST /agents/{id}/identity/password/unlock {password}`: opens the credentials envelope
/// with its password and adds a slot for this installation, so it stays unlocked here.
pub(super) async fn password_unlock(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let secret = zeroize::Zeroizing::new(password(&body, "password")?);
    with_identity(&state, &agent, move |file, keys, open| {
        identity::adopt_shared_credentials(file, keys, open, &secret)
    })
    .await?;
    Ok(success(&agent))
}

/// `PUT /agents/{id}/identity/password {password}` and `POST /password/change {newPassword}`:
/// adds or replaces the credentials envelope's password slot (the identity envelope never
/// gets one, §8).
pub(super) async fn password_set(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    share_with_password(&state, &id, &body, "password").await
}

pub(super) async fn password_change(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    share_with_password(&state, &id, &body, "newPassword").await
}

/// `DELETE /agents/{id}/identity/password`: removes the credentials envelope's password slot
/// (`{agentId, success, removed}`; `removed: false` when there was none, nothing written). A
/// slot that is the only way to open the credentials is refused (400).
pub(super) async fn password_remove(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    // Without identity rows there is no envelope, and opening would provision one.
    let provisioned = agent
        .job(|file| Ok(!file.identity_rows()?.is_empty()))
        .await?;
    let removed = provisioned
        && with_identity(&state, &agent, |file, _, open| {
            identity::remove_password_slot(file, open)
        })
        .await?;
    Ok(Json(json!({ "agentId": agent.id, "success": true, "removed": removed })).into_response())
}

/// Both password routes: the same slot write, the password read from `field`.
async fn share_with_password(
    state: &AppState,
    id: &str,
    body: &Value,
    field: &str,
) -> ApiResult<Response> {
    let agent = find(state, id)?;
    let secret = zeroize::Zeroizing::new(password(body, field)?);
    with_identity(state, &agent, move |file, _, open| {
        identity::share_credentials(file, open, &secret)
    })
    .await?;
    Ok(success(&agent))
}

/// `POST /agents/{id}/identity/generate-keys`: re-keys the agent (§8: the old DID goes to
/// history, owner and runtime attestations are re-issued); `{agentId, success, did}`.
pub(super) async fn generate_keys(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let did = with_identity(&state, &agent, |file, keys, open| {
        identity::rotate(file, keys, open)
    })
    .await?;
    agent.update_info(|info| info.did = Some(did.clone()));
    Ok(Json(json!({ "agentId": agent.id, "success": true, "did": did })).into_response())
}

/// `POST /agents/{id}/identity/wipe`: the identity reset of §8 (DID to history, key rows and
/// identity envelope removed, `adf_did` empty). Sealed credentials stay: they are under their
/// own envelope.
pub(super) async fn wipe(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let outcome = agent.job(|file| Ok(identity::reset(file))).await?;
    outcome.map_err(identity_error)?;
    agent.update_info(|info| info.did = None);
    Ok(success(&agent))
}

// ---------------------------------------------------------------------------------- credentials

/// `PUT /agents/{id}/providers/{providerId}/credential {value}`: the agent's own key for a
/// provider, sealed as `provider:<id>:apiKey`.
pub(super) async fn provider_credential_put(
    State(state): State<AppState>,
    Path((id, provider)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let Some(value) = body
        .get("value")
        .or(body.get("apiKey"))
        .and_then(Value::as_str)
    else {
        return Err(ApiError::bad_request("value is required (a string)"));
    };
    let value = zeroize::Zeroizing::new(value.as_bytes().to_vec());
    let purpose = format!("provider:{provider}:apiKey");
    with_identity(&state, &agent, move |file, _, open| {
        identity::set_credential(file, open, &purpose, &value, false)
    })
    .await?;
    Ok(
        Json(json!({ "agentId": agent.id, "providerId": provider, "success": true }))
            .into_response(),
    )
}

/// Credential purposes under `prefix`, as `{name: {set: true, ...}}` without values.
async fn credential_names(
    agent: &Agent,
    prefix: String,
) -> ApiResult<serde_json::Map<String, Value>> {
    Ok(purposes(agent)
        .await?
        .into_iter()
        .filter_map(|p| {
            let name = p.purpose.strip_prefix(&prefix)?.to_owned();
            Some((
                name,
                json!({ "set": true, "encrypted": p.encrypted, "code_access": p.code_access }),
            ))
        })
        .collect())
}

/// `GET /agents/{id}/providers/{providerId}/credentials`: which credentials are set.
pub(super) async fn provider_credentials(
    State(state): State<AppState>,
    Path((id, provider)): Path<(String, String)>,
) -> ApiResult<Response> {
    let agent = find(&state, &id)?;
    let credentials = credential_names(&agent, format!("provider:{provider}:")).await?;
    Ok(Json(json!({
        "agentId": agent.id,
        "providerId": provider,
        "credentials": credentials,
    }))
    .into_response())
}

/// The credentials of one kind of attachment: `{namespace}:{name}:{envKey}` purposes, the
/// name given as the `key` field (`mcp`: `npmPackage`, `adapter`: `adapterType`).
pub(super) trait CredentialNamespace {
    const NAMESPACE: &'static str;
    const KEY: &'static str;
}

/// MCP servers' credentials, by npm package.
pub(super) struct McpCredentials;

impl CredentialNamespace for McpCredentials {
    const NAMESPACE: &'static str = "mcp";
    const KEY: &'static str = "npmPackage";
}

/// Channel adapters' credentials, by adapter type.
pub(super) struct AdapterCredentials;

impl CredentialNamespace for AdapterCredentials {
    const NAMESPACE: &'static str = "adapter";
    const KEY: &'static str = "adapterType";
}

/// `GET /agents/{id}/mcp/credentials?npmPackage=` and `/adapters/credentials?adapterType=`.
pub(super) async fn namespaced_credentials<N: CredentialNamespace>(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Params,
) -> ApiResult<Response> {
    let (namespace, key) = (N::NAMESPACE, N::KEY);
    let agent = find(&state, &id)?;
    let Some(name) = params.get(key).filter(|n| !n.is_empty()).cloned() else {
        return Err(ApiError::bad_request(format!("{key} is required")));
    };
    let credentials = credential_names(&agent, format!("{namespace}:{name}:")).await?;
    let mut body = serde_json::Map::new();
    body.insert("agentId".into(), json!(agent.id));
    body.insert(key.into(), json!(name));
    body.insert("credentials".into(), Value::Object(credentials));
    Ok(Json(Value::Object(body)).into_response())
}

/// `PUT /agents/{id}/mcp/credentials {npmPackage, envKey, value}` and the adapters' twin
/// `{adapterType, envKey, value}`.
pub(super) async fn namespaced_put<N: CredentialNamespace>(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    let (namespace, key) = (N::NAMESPACE, N::KEY);
    let agent = find(&state, &id)?;
    let (Some(name), Some(env_key), Some(value)) = (
        text_field(&body, key),
        text_field(&body, "envKey"),
        body.get("value").and_then(Value::as_str),
    ) else {
        return Err(ApiError::bad_request(format!(
            "{key}, envKey and value are required"
        )));
    };
    let purpose = format!("{namespace}:{name}:{env_key}");
    let value = zeroize::Zeroizing::new(value.as_bytes().to_vec());
    let mut answer = serde_json::Map::new();
    answer.insert("agentId".into(), json!(agent.id));
    answer.insert(key.into(), json!(name));
    answer.insert("envKey".into(), json!(env_key));
    answer.insert("success".into(), json!(true));
    let name = purpose.clone();
    with_identity(&state, &agent, move |file, _, open| {
        identity::set_credential(file, open, &name, &value, false)
    })
    .await?;
    restart_adapters_for(&state, &agent, &purpose).await;
    Ok(Json(Value::Object(answer)).into_response())
}
