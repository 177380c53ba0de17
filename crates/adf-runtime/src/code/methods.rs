//! The code-only methods of missing-tables §9 (adf-object guide "Special Methods"). The runner
//! has already applied `tools::access::method_access` (the `code_execution` flag and
//! `restricted_methods`; `authorize_file`, `set_meta_protection` and `set_file_protection` are
//! always authorized-code-only). Each method that writes does so in one transaction.
//!
//! Parameter choices the spec leaves open (Appendix B #4), documented here and in
//! ARCHITECTURE.md: `emit_event({type: "custom.<name>", payload?})`,
//! `authorize_file({path, authorized?: true})`.

use std::sync::Arc;

use adf_crypto::provision::{self, Deks, is_protected_purpose};
use adf_crypto::{Attestation, EnvelopeName, EnvelopeState};
use adf_providers::{ApiKey, ChatRequest, ContentBlock, Message, Resolver, Role};
use adf_store::{AdfFile, FileProtection, IdentityRow, MetaProtection, NewLog};
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::env::{CallRecord, CodeEnv, Frame, InjectMode, Injection, RunOptions};

use crate::identity::{self, OpenIdentity};
use crate::tools::approval::{self, Resolution};
use crate::tools::{ErrorCode, ToolError};

/// The code-only methods answered here (`sys_lambda` is the runner's own).
const CODE_METHODS: [&str; 13] = [
    "model_invoke",
    "task_resolve",
    "loop_inject",
    "identity_status",
    "get_identity",
    "set_identity",
    "emit_event",
    "attestation_list",
    "attestation_add",
    "attestation_issue",
    "authorize_file",
    "set_meta_protection",
    "set_file_protection",
];

/// Whether `name` is one of the code-only methods of the §9 table.
pub(super) fn is_code_method(name: &str) -> bool {
    CODE_METHODS.contains(&name)
}

/// What a code-only method may use of the run that services it: the runner lends these parts
/// of itself for one call (so this file builds on env.rs alone, not on the runner).
pub(super) struct MethodCx<'r> {
    /// The agent's file, held by the run.
    pub(super) file: &'r mut AdfFile,
    /// The run's environment (registry, resolver, keys, event sink).
    pub(super) env: &'r CodeEnv,
    /// The run's options (`loop_inject`'s mode).
    pub(super) options: &'r RunOptions,
    /// Contexts `loop_inject` collects for the caller.
    pub(super) injections: &'r mut Vec<Injection>,
    /// The file's identity, opened on the first identity method (`None` inside: could not).
    pub(super) identity: &'r mut Option<Option<OpenIdentity>>,
}

/// What a code-only method answers: a value now, or a model request (`model_invoke`) the run
/// awaits off the file.
pub(super) enum MethodReply {
    /// Now.
    Value(Value),
    /// When this model request resolves.
    Model(BoxFuture<'static, ModelAnswer>),
}

/// How a `model_invoke` request ended, with the retries it scheduled on the way.
pub(crate) struct ModelAnswer {
    pub(crate) result: Result<Value, ToolError>,
    pub(crate) record: CallRecord,
    /// Logged by the runner as `provider_error` rows, with the file it holds then.
    pub(crate) retries: Vec<adf_providers::RetryNotice>,
}

/// Longest `loop_inject` content, in characters (also bounded by the tool-result limit).
pub(crate) const MAX_INJECT_CHARS: usize = 48_000;

fn str_arg<'v>(args: &'v Value, name: &str) -> Result<&'v str, ToolError> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::invalid(format!("'{name}' is required and must be a string")))
}

fn opt_str<'v>(args: &'v Value, name: &str) -> Result<Option<&'v str>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ToolError::invalid(format!("'{name}' must be a string"))),
    }
}

pub(super) fn call(
    cx: &mut MethodCx<'_>,
    frame: &Arc<Frame>,
    method: &str,
    args: Value,
    config: &Value,
) -> Result<MethodReply, ToolError> {
    let value = match method {
        "model_invoke" => return model_invoke(cx, &args, config),
        "task_resolve" => task_resolve(cx, frame, &args)?,
        "loop_inject" => loop_inject(cx, frame, &args, config)?,
        "identity_status" => identity_status(cx)?,
        "get_identity" => get_identity(cx, &args)?,
        "set_identity" => set_identity(cx, &args)?,
        "emit_event" => emit_event(cx.file, cx.env.event_sink(), frame, &args)?,
        "attestation_list" => attestation_list(cx.file)?,
        "attestation_add" => attestation_add(cx.file, &args)?,
        "attestation_issue" => attestation_issue(cx, &args)?,
        "authorize_file" => {
            let path = str_arg(&args, "path")?;
            let authorized = match args.get("authorized") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(ToolError::invalid("'authorized' must be a boolean")),
            };
            let caller = frame.caller().store_caller();
            cx.file
                .atomically(|f| f.file_set_authorized(caller, path, authorized))
                .map_err(write_error)?;
            json!({ "path": path, "authorized": authorized })
        }
        "set_meta_protection" => {
            let key = str_arg(&args, "key")?;
            let protection = MetaProtection::parse(str_arg(&args, "protection")?)?;
            let caller = frame.caller().store_caller();
            cx.file
                .atomically(|f| f.meta_set_protection(caller, key, protection))
                .map_err(write_error)?;
            json!({ "key": key, "protection": protection.as_str() })
        }
        "set_file_protection" => {
            let path = str_arg(&args, "path")?;
            let protection = FileProtection::parse(str_arg(&args, "protection")?)?;
            let caller = frame.caller().store_caller();
            cx.file
                .atomically(|f| f.file_set_protection(caller, path, protection))
                .map_err(write_error)?;
            json!({ "path": path, "protection": protection.as_str() })
        }
        other => {
            return Err(ToolError::not_found(format!(
                "unknown code method '{other}'"
            )));
        }
    };
    Ok(MethodReply::Value(value))
}

/// Protection changes: a missing key/file stays NOT_FOUND, bad input INVALID_INPUT, anything
/// else the database refused is WRITE_ERROR (the guide's table).
fn write_error(error: adf_store::StoreError) -> ToolError {
    let error = ToolError::from(error);
    match error.code {
        ErrorCode::NotFound | ErrorCode::InvalidInput | ErrorCode::RequiresAuthorizedCode => error,
        _ => ToolError::new(ErrorCode::WriteError, error.message),
    }
}

// ---------- model_invoke ----------

fn model_invoke(
    cx: &mut MethodCx<'_>,
    args: &Value,
    config: &Value,
) -> Result<MethodReply, ToolError> {
    let (system, messages) = invoke_messages(args)?;
    let num = |k: &str| -> Result<Option<f64>, ToolError> {
        match args.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| ToolError::invalid(format!("'{k}' must be a number"))),
        }
    };
    let (max_tokens, temperature, top_p) = (num("max_tokens")?, num("temperature")?, num("top_p")?);
    let model_override = opt_str(args, "model")?.map(str::to_owned);

    let provider_id = Resolver::provider_id(config);
    let agent_key = agent_api_key(cx, &provider_id);
    let resolved = cx
        .env
        .resolver
        .resolve(config, agent_key)
        .map_err(|e| ToolError::new(ErrorCode::ModelError, e.to_string()))?;
    let mut params = resolved.params.clone();
    if let Some(m) = max_tokens {
        params.max_tokens = Some(m.max(1.0) as u64);
    }
    if temperature.is_some() {
        params.temperature = temperature;
    }
    if top_p.is_some() {
        params.top_p = top_p;
    }
    let request = ChatRequest {
        model: model_override.unwrap_or_else(|| resolved.model_id.clone()),
        system,
        messages,
        tools: std::sync::Arc::default(),
        params,
        wire: adf_providers::WireCache::default(),
    };
    let provider = resolved.provider.clone();
    Ok(MethodReply::Model(Box::pin(async move {
        use adf_providers::Provider as _;
        let mut record = CallRecord::Model {
            provider: provider_id,
            model: request.model.clone(),
            input_tokens: 0,
            output_tokens: 0,
            ok: false,
        };
        // This request's retries, for the runner's `provider_error` rows: the provider is
        // shared, the observer is this request's alone.
        let retried = Arc::new(std::sync::Mutex::new(Vec::new()));
        let observer: adf_providers::RetryObserver = {
            let retried = Arc::clone(&retried);
            Arc::new(move |notice: &adf_providers::RetryNotice| {
                retried
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(notice.clone());
            })
        };
        let answer = adf_providers::watch_retries(observer, provider.complete(&request)).await;
        let retries = std::mem::take(
            &mut *retried
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let reply = match answer {
            Ok(reply) => reply,
            Err(e) => {
                return ModelAnswer {
                    result: Err(ToolError::new(ErrorCode::ModelError, e.to_string())),
                    record,
                    retries,
                };
            }
        };
        if let CallRecord::Model {
            input_tokens,
            output_tokens,
            ok,
            ..
        } = &mut record
        {
            *input_tokens = reply.usage.prompt_tokens();
            *output_tokens = reply.usage.output;
            *ok = true;
        }
        let text = reply.text();
        let result = if text.trim().is_empty() {
            Err(ToolError::new(
                ErrorCode::ModelRefused,
                "the model returned no text",
            ))
        } else {
            // Raw text (guide): a reply of `42` or `{"a":1}` stays a string in JavaScript.
            Ok(adf_sandbox::raw_text(text))
        };
        ModelAnswer {
            result,
            record,
            retries,
        }
    })))
}

/// The agent's own key for the provider, when its identity holds one (`provider:<id>:apiKey`).
fn agent_api_key(cx: &mut MethodCx<'_>, provider_id: &str) -> Option<ApiKey> {
    let purpose = format!("provider:{provider_id}:apiKey");
    let row = cx
        .file
        .identity_rows()
        .ok()?
        .into_iter()
        .find(|r| r.purpose == purpose)?;
    let text = if row.encryption_algo == "plain" {
        String::from_utf8(row.value).ok()?
    } else {
        ensure_identity(cx);
        let open = cx.identity.as_ref()?.as_ref()?;
        let bytes = identity::read_credential(cx.file, open, &purpose).ok()??;
        String::from_utf8(bytes.to_vec()).ok()?
    };
    Some(ApiKey::new(text))
}

/// `messages` or `prompt` (+ `system`) → the request's system text and messages. System
/// messages only at the start (COD-23); content is text or text/image_url blocks.
fn invoke_messages(args: &Value) -> Result<(Option<String>, Vec<Message>), ToolError> {
    let mut system: Vec<String> = Vec::new();
    if let Some(s) = opt_str(args, "system")? {
        system.push(s.to_owned());
    }
    let mut messages = Vec::new();
    match (args.get("messages"), opt_str(args, "prompt")?) {
        (Some(Value::Array(list)), _) => {
            let mut seen_other = false;
            for (i, m) in list.iter().enumerate() {
                let role = m
                    .get("role")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ToolError::invalid(format!("messages[{i}].role is required")))?;
                let blocks = content_blocks(m.get("content"), i)?;
                match role {
                    "system" if seen_other => {
                        return Err(ToolError::invalid(
                            "system messages must come before any user or assistant message",
                        ));
                    }
                    "system" => system.push(
                        blocks
                            .iter()
                            .filter_map(|b| match b {
                                ContentBlock::Text { text } => Some(text.as_str()),
                                _ => None,
                            })
                            .collect::<Vec<_>>()
                            .join("\n"),
                    ),
                    "user" | "assistant" => {
                        seen_other = true;
                        messages.push(Message {
                            role: if role == "user" {
                                Role::User
                            } else {
                                Role::Assistant
                            },
                            content: blocks,
                        });
                    }
                    other => {
                        return Err(ToolError::invalid(format!(
                            "messages[{i}].role must be system, user or assistant, not '{other}'"
                        )));
                    }
                }
            }
        }
        (Some(Value::Null) | None, Some(prompt)) => messages.push(Message::user_text(prompt)),
        (Some(_), _) => return Err(ToolError::invalid("'messages' must be an array")),
        (None, None) => {
            return Err(ToolError::invalid(
                "model_invoke needs 'messages' (an array) or 'prompt' (a string)",
            ));
        }
    }
    if messages.is_empty() {
        return Err(ToolError::invalid(
            "model_invoke needs at least one user message",
        ));
    }
    let system = (!system.is_empty()).then(|| system.join("\n\n"));
    Ok((system, messages))
}

fn content_blocks(content: Option<&Value>, i: usize) -> Result<Vec<ContentBlock>, ToolError> {
    match content {
        Some(Value::String(text)) => Ok(vec![ContentBlock::text(text.clone())]),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text" | "image_url") => serde_json::from_value::<ContentBlock>(b.clone())
                    .map_err(|e| ToolError::invalid(format!("messages[{i}].content: {e}"))),
                _ => Err(ToolError::invalid(format!(
                    "messages[{i}].content blocks are {{type: \"text\"}} or {{type: \"image_url\"}}"
                ))),
            })
            .collect(),
        _ => Err(ToolError::invalid(format!(
            "messages[{i}].content must be a string or an array of blocks"
        ))),
    }
}

// ---------- task_resolve ----------

fn task_resolve(cx: &mut MethodCx<'_>, frame: &Frame, args: &Value) -> Result<Value, ToolError> {
    let task_id = str_arg(args, "task_id")?;
    let requires_authorization = match args.get("requires_authorization") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ToolError::invalid(
                "'requires_authorization' must be a boolean",
            ));
        }
    };
    let resolution = match str_arg(args, "action")? {
        "approve" => Resolution::Approve {
            modified_args: match args.get("modified_args") {
                None | Some(Value::Null) => None,
                Some(v @ Value::Object(_)) => Some(v.clone()),
                Some(_) => return Err(ToolError::invalid("'modified_args' must be an object")),
            },
        },
        "deny" => Resolution::Deny {
            reason: opt_str(args, "reason")?.map(str::to_owned),
        },
        "pending_approval" => Resolution::Escalate,
        other => {
            return Err(ToolError::invalid(format!(
                "action must be approve, deny or pending_approval, not '{other}'"
            )));
        }
    };
    let caller = frame.caller();
    let registry = cx.env.registry.clone();
    cx.file.atomically(|f| {
        approval::resolve_task(
            &registry,
            f,
            task_id,
            resolution,
            &caller,
            requires_authorization,
        )
    })
}

// ---------- loop_inject ----------

fn loop_inject(
    cx: &mut MethodCx<'_>,
    frame: &Frame,
    args: &Value,
    config: &Value,
) -> Result<Value, ToolError> {
    let content = str_arg(args, "content")?;
    match opt_str(args, "role")? {
        None | Some("user") => {}
        Some(other) => {
            return Err(ToolError::invalid(format!(
                "loop_inject only adds user context; role '{other}' could forge model history"
            )));
        }
    }
    for forbidden in ["tool_calls", "tool_use", "tool_result", "messages"] {
        if args.get(forbidden).is_some() {
            return Err(ToolError::invalid(format!(
                "loop_inject takes text content only, not '{forbidden}'"
            )));
        }
    }
    let limit = config
        .pointer("/limits/max_tool_result_tokens")
        .and_then(Value::as_u64)
        .map_or(MAX_INJECT_CHARS, |t| {
            MAX_INJECT_CHARS.min(usize::try_from(t.saturating_mul(4)).unwrap_or(usize::MAX))
        });
    let chars = content.chars().count();
    if chars > limit {
        return Err(ToolError::invalid(format!(
            "loop_inject content is {chars} characters; the limit is {limit}"
        )));
    }
    let category = opt_str(args, "category")?.unwrap_or("loop_inject");
    let valid = !category.is_empty()
        && category.len() <= 64
        && category.starts_with(|c: char| c.is_ascii_lowercase())
        && category
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.:".contains(c));
    if !valid {
        return Err(ToolError::invalid(format!(
            "category must be lowercase ([a-z][a-z0-9_.:-]*, at most 64 characters), not '{category}'"
        )));
    }
    let key = opt_str(args, "key")?.map(str::to_owned);
    let (loop_name, collect) = match &cx.options.inject {
        InjectMode::Immediate { loop_name } => (loop_name.clone(), false),
        InjectMode::Collect { loop_name } => (loop_name.clone(), true),
    };
    let injection = Injection {
        loop_name,
        category: category.to_owned(),
        key: key.clone(),
        origin: frame.source.clone(),
        content: content.to_owned(),
    };
    if collect {
        // A key replaces the earlier pending value; the replaced version is kept in the logs.
        if let Some(k) = &key
            && let Some(i) = cx
                .injections
                .iter()
                .position(|p| p.key.as_deref() == Some(k))
        {
            let old = cx.injections.remove(i);
            cx.file.log(&NewLog {
                level: "debug",
                origin: Some("loop_inject"),
                event: Some("superseded"),
                target: Some(k),
                message: "a pending keyed injection was replaced before delivery",
                data: Some(&json!({ "category": old.category, "origin": old.origin, "content": old.content })),
                r#loop: Some(&old.loop_name),
            })?;
        }
        cx.injections.push(injection);
        Ok(json!({ "queued": true, "category": category, "key": key }))
    } else {
        super::env::store_injections(cx.file, std::slice::from_ref(&injection))?;
        Ok(json!({ "queued": true, "stored": true, "category": category, "key": key }))
    }
}

// ---------- identity ----------

/// Opens the file's identity once per run with the installation's keys; afterwards
/// `cx.identity` is `Some(None)` without keys or when it cannot be opened (the methods
/// then see the envelopes as stored, without unlocking).
fn ensure_identity(cx: &mut MethodCx<'_>) {
    if cx.identity.is_none() {
        let opened = match cx.env.keys.clone() {
            Some(keys) => identity::open_identity(cx.file, &keys).ok(),
            None => None,
        };
        *cx.identity = Some(opened);
    }
}

fn crypto_rows(file: &AdfFile) -> Result<Vec<adf_crypto::IdentityRow>, ToolError> {
    Ok(file
        .identity_rows()?
        .into_iter()
        .map(|r| adf_crypto::IdentityRow {
            purpose: r.purpose,
            value: r.value,
            encryption_algo: r.encryption_algo,
            salt: r.salt,
            kdf_params: r.kdf_params,
            code_access: r.code_access,
        })
        .collect())
}

fn envelope_status(cx: &mut MethodCx<'_>) -> Result<provision::IdentityStatus, ToolError> {
    ensure_identity(cx);
    if let Some(Some(open)) = &cx.identity {
        return Ok(open.status);
    }
    let rows = crypto_rows(cx.file)?;
    provision::identity_status(&rows, &Deks::default())
        .map_err(|e| ToolError::new(ErrorCode::InternalError, e.to_string()))
}

fn identity_status(cx: &mut MethodCx<'_>) -> Result<Value, ToolError> {
    let status = envelope_status(cx)?;
    Ok(json!({
        "envelopes": {
            "identity": status.identity.as_str(),
            "credentials": status.credentials.as_str(),
        },
        "password_protected": status.password_protected,
    }))
}

fn check_purpose(purpose: &str) -> Result<(), ToolError> {
    if purpose.is_empty() || purpose.trim() != purpose {
        return Err(ToolError::invalid(
            "a purpose is a non-empty name without surrounding spaces",
        ));
    }
    if purpose.starts_with("crypto:") || is_protected_purpose(purpose) {
        return Err(ToolError::new(
            ErrorCode::RequiresAuthorizedCode,
            format!(
                "'{purpose}' is one of the runtime's own keys; agent code never reads or writes crypto:* rows"
            ),
        ));
    }
    Ok(())
}

fn get_identity(cx: &mut MethodCx<'_>, args: &Value) -> Result<Value, ToolError> {
    let purpose = str_arg(args, "purpose")?;
    check_purpose(purpose)?;
    let row = cx
        .file
        .identity_rows()?
        .into_iter()
        .find(|r| r.purpose == purpose)
        .ok_or_else(|| ToolError::not_found(format!("no identity value '{purpose}'")))?;
    if !row.code_access {
        return Err(ToolError::failed(format!(
            "'{purpose}' is not readable by code (code_access is off)"
        )));
    }
    let bytes = if row.encryption_algo == "plain" {
        row.value
    } else {
        ensure_identity(cx);
        let open = cx
            .identity
            .as_ref()
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                ToolError::failed(format!(
                    "'{purpose}' is sealed and this file's credentials are not unlocked here"
                ))
            })?;
        identity::read_credential(cx.file, open, purpose)
            .map_err(|e| ToolError::failed(e.to_string()))?
            .map(|v| v.to_vec())
            .unwrap_or_default()
    };
    // A stored value is text, never JSON to parse: a PIN of `0042` stays "0042".
    String::from_utf8(bytes)
        .map(adf_sandbox::raw_text)
        .map_err(|_| ToolError::failed(format!("'{purpose}' is not text")))
}

fn set_identity(cx: &mut MethodCx<'_>, args: &Value) -> Result<Value, ToolError> {
    let purpose = str_arg(args, "purpose")?;
    let value = str_arg(args, "value")?;
    check_purpose(purpose)?;
    // A new row is readable by code; an existing row keeps the flag its owner chose.
    let code_access = cx
        .file
        .identity_rows()?
        .into_iter()
        .find(|r| r.purpose == purpose)
        .is_none_or(|r| r.code_access);
    let status = envelope_status(cx)?;
    match status.credentials {
        EnvelopeState::Unlocked => {
            let Some(Some(open)) = &cx.identity else {
                return Err(ToolError::new(
                    ErrorCode::InternalError,
                    "credentials reported unlocked without an open identity",
                ));
            };
            identity::set_credential(cx.file, open, purpose, value.as_bytes(), code_access)
                .map_err(|e| ToolError::new(ErrorCode::WriteError, e.to_string()))?;
            Ok(json!({ "purpose": purpose, "sealed": true }))
        }
        // No envelope to seal into (a file without an identity): stored as the reference does.
        EnvelopeState::Absent => {
            cx.file.identity_put(&[IdentityRow {
                purpose: purpose.to_owned(),
                value: value.as_bytes().to_vec(),
                encryption_algo: "plain".into(),
                salt: None,
                kdf_params: None,
                code_access,
            }])?;
            Ok(json!({ "purpose": purpose, "sealed": false }))
        }
        // Fail closed: never write a plain secret beside an envelope we cannot open.
        other => Err(ToolError::new(
            ErrorCode::WriteError,
            format!(
                "the credentials envelope is {} here; a secret cannot be sealed into it",
                other.as_str()
            ),
        )),
    }
}

// ---------- events ----------

fn emit_event(
    file: &mut AdfFile,
    sink: Option<&dyn super::env::EventSink>,
    frame: &Frame,
    args: &Value,
) -> Result<Value, ToolError> {
    let kind = str_arg(args, "type")?;
    let name = kind.strip_prefix("custom.").unwrap_or("");
    if name.is_empty() || kind.len() > 128 || kind.chars().any(char::is_control) {
        return Err(ToolError::invalid(format!(
            "emit_event type must be 'custom.<name>', not '{kind}'"
        )));
    }
    let payload = args.get("payload").cloned().unwrap_or(Value::Null);
    // Recorded either way; only a sink (the daemon's bus) makes it an umbilical event.
    let delivered = sink.is_some_and(|sink| sink.emit(&frame.source, kind, &payload));
    file.log(&NewLog {
        level: "info",
        origin: Some("emit_event"),
        event: Some(kind),
        target: Some(&frame.source),
        message: if delivered {
            "custom event emitted"
        } else {
            "custom event emitted (no event bus reached: recorded only)"
        },
        data: Some(&payload),
        r#loop: None,
    })?;
    Ok(json!({ "type": kind, "delivered": delivered, "recorded": true }))
}

// ---------- attestations ----------

fn attestation_list(file: &AdfFile) -> Result<Value, ToolError> {
    let list: Vec<Value> = file
        .attestations()?
        .iter()
        .map(|row| {
            serde_json::to_value(identity::from_store_attestation(row)).unwrap_or(Value::Null)
        })
        .collect();
    Ok(Value::Array(list))
}

fn own_did(file: &AdfFile) -> Result<String, ToolError> {
    file.meta_get("adf_did")?
        .map(|e| e.value)
        .filter(|d| !d.is_empty())
        .ok_or_else(|| ToolError::failed("this agent has no identity (adf_did) yet"))
}

fn attestation_add(file: &mut AdfFile, args: &Value) -> Result<Value, ToolError> {
    let raw = args
        .get("attestation")
        .filter(|v| v.is_object())
        .ok_or_else(|| ToolError::invalid("'attestation' (the signed object) is required"))?;
    let attestation = Attestation::from_json_value(raw)
        .map_err(|e| ToolError::invalid(format!("not an attestation: {e}")))?;
    let did = own_did(file)?;
    attestation
        .check_addable(&did, chrono::Utc::now())
        .map_err(|e| ToolError::invalid(e.to_string()))?;
    let row = identity::to_store_attestation(&attestation);
    let added = file.atomically(|f| f.attestation_insert(&row))?;
    Ok(json!({ "added": added, "role": attestation.role, "issuer": attestation.issuer }))
}

fn attestation_issue(cx: &mut MethodCx<'_>, args: &Value) -> Result<Value, ToolError> {
    let subject = str_arg(args, "subject")?;
    let role = str_arg(args, "role")?;
    let scope = opt_str(args, "scope")?;
    let expires_at = opt_str(args, "expires_at")?;
    let did = own_did(cx.file)?;
    Attestation::check_issuable(&did, subject, role, expires_at)
        .map_err(|e| ToolError::invalid(e.to_string()))?;
    ensure_identity(cx);
    let open = cx
        .identity
        .as_ref()
        .and_then(Option::as_ref)
        .ok_or_else(|| {
            ToolError::failed("this agent's identity cannot be opened here, so it cannot sign")
        })?;
    if !open.is_unlocked(EnvelopeName::Identity) {
        return Err(ToolError::failed(format!(
            "the identity envelope is {}; it must be unlocked to sign",
            open.status.identity.as_str()
        )));
    }
    let key =
        identity::agent_signing_key(cx.file, open).map_err(|e| ToolError::failed(e.to_string()))?;
    let issued_at = adf_crypto::attestation::to_iso8601(chrono::Utc::now());
    let attestation = Attestation::issue(&key, subject, role, &issued_at, expires_at, scope);
    serde_json::to_value(&attestation)
        .map_err(|e| ToolError::new(ErrorCode::InternalError, e.to_string()))
}
