//! `msg_send`: compose → sign (→ encrypt) → store `pending` ([`prepare`], inside the tool
//! call's transaction), then [`deliver`] outside any lock.
//!
//! Decisions where the sources leave room:
//! - Addressing (tools guide): a DID recipient needs `address` (or is hosted here); a reply by
//!   `parent_id` takes recipient, address and thread from the inbox row; a bare handle is
//!   resolved only against this runtime's agents, visibility applied; `type:id` recipients
//!   (and replies to rows an adapter wrote) go to the sender's channel adapter where the
//!   runtime runs adapters ([`Mesh::hosts_adapters`]), copying the parent's `source_context`
//!   (MSG-43); elsewhere the call fails saying no adapter runs here.
//! - The wire `payload.parent_id` of a reply is the parent's ALF `message_id` (what the
//!   original sender knows it by), not our local row id.
//! - `content` is required; `payload` (the adf-object guide's name) is accepted as an alias
//!   (MSG-23). `intent` and `trace_id` are refused as unknown parameters (MSG-26).
//! - `respond_only` allows a reply to an existing inbox row. A turn that a message triggered
//!   is not yet told to the tool, so there too a `parent_id` is needed.
//! - No retry: a failed delivery stays `failed` (§11.2).

use std::path::PathBuf;
use std::time::Duration;

use adf_crypto::alf;
use adf_store::AdfFile;
use adf_store::messages::Mailbox;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{AdapterMessage, Delivery, LocalAgent, Mesh};
use crate::identity::LocalKeys;
use crate::tools::{ErrorCode, ToolError};

/// Length of an ALF message id (`\[C28\]` nanoid(20), ≥ 120 bits).
pub const MESSAGE_ID_LEN: usize = 20;
/// How long one HTTP delivery may take.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest content, in characters, a message may carry (the ALF size limit covers the rest).
pub const MAX_CONTENT_CHARS: usize = 1_000_000;

/// The content types `msg_send` checks before sending.
pub const FORM_CONTENT_TYPE: &str = "application/vnd.adf.form+json";

/// What the runtime supplies to a send.
#[derive(Debug, Clone, Copy, Default)]
pub struct SendContext<'a> {
    /// This runtime's hosted agents; `None` sends over HTTP only.
    pub mesh: Option<&'a dyn Mesh>,
    /// The installation's keys, to open the agent's signing key.
    pub keys: Option<&'a LocalKeys>,
}

/// A composed message whose `pending` outbox row is stored: everything [`deliver`] needs.
/// Serializable because it travels as the deferred call's arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    /// The `adf_outbox` row whose status the delivery updates.
    pub outbox_id: String,
    /// The ALF message id, the same in the sender's outbox and the recipient's inbox.
    pub message_id: String,
    /// Who the message is for, as the sender named it after resolution.
    pub recipient: String,
    /// How the message travels.
    pub route: Route,
    /// The wire message (signed, encrypted when the level asks for it).
    pub message: Value,
}

/// Which transport carries a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "via", rename_all = "snake_case")]
pub enum Route {
    /// An agent of this runtime.
    Local {
        /// The recipient's handle on this runtime.
        handle: String,
        /// The sending agent's `.adf` file, which decides the tier the recipient must admit.
        sender: PathBuf,
    },
    /// HTTP POST to an inbox URL.
    Http {
        /// The recipient's inbox URL.
        url: String,
    },
    /// The sending agent's channel adapter (`type:id` recipients).
    Adapter {
        /// `type:id`, e.g. `telegram:123`.
        recipient: String,
        /// The sending agent's `.adf` file, whose adapter delivers.
        sender: PathBuf,
        /// The `source_context` of the message this replies to (MSG-43).
        source_context: Option<Value>,
    },
}

impl Route {
    fn address(&self) -> String {
        match self {
            Route::Local { handle, .. } => format!("local:{handle}"),
            Route::Http { url } => url.clone(),
            Route::Adapter { recipient, .. } => recipient.clone(),
        }
    }
}

/// The arguments of one send, as the tool received them.
#[derive(Debug, Default)]
struct SendArgs {
    recipient: Option<String>,
    address: Option<String>,
    content: String,
    content_type: Option<String>,
    subject: Option<String>,
    thread_id: Option<String>,
    parent_id: Option<String>,
    attachments: Vec<String>,
    meta: Map<String, Value>,
    message_meta: Map<String, Value>,
    /// The parent's `source_context`, when the parent came through a channel adapter.
    source_context: Option<Value>,
}

fn text_arg(args: &Value, key: &str) -> Result<Option<String>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ToolError::invalid(format!("'{key}' must be a string"))),
    }
}

fn object_arg(args: &Value, key: &str) -> Result<Map<String, Value>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(ToolError::invalid(format!("'{key}' must be an object"))),
    }
}

impl SendArgs {
    fn parse(args: &Value) -> Result<Self, ToolError> {
        for refused in ["intent", "trace_id"] {
            if args.get(refused).is_some() {
                return Err(ToolError::invalid(format!(
                    "msg_send has no '{refused}' parameter; group a conversation with thread_id"
                )));
            }
        }
        let content = match (args.get("content"), args.get("payload")) {
            (Some(Value::String(s)), _) | (None, Some(Value::String(s))) => s.clone(),
            (Some(other), _) | (None, Some(other)) if !other.is_null() => other.to_string(),
            _ => {
                return Err(ToolError::invalid(
                    "msg_send needs 'content' (the message text)",
                ));
            }
        };
        if content.is_empty() {
            return Err(ToolError::invalid("'content' is empty"));
        }
        if content.chars().count() > MAX_CONTENT_CHARS {
            return Err(ToolError::invalid(format!(
                "'content' is longer than {MAX_CONTENT_CHARS} characters; attach a file instead"
            )));
        }
        let attachments = match args.get("attachments") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| ToolError::invalid("'attachments' is a list of file paths"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(ToolError::invalid("'attachments' is a list of file paths")),
        };
        Ok(SendArgs {
            recipient: text_arg(args, "recipient")?,
            address: text_arg(args, "address")?,
            content,
            content_type: text_arg(args, "content_type")?,
            subject: text_arg(args, "subject")?,
            thread_id: text_arg(args, "thread_id")?,
            parent_id: text_arg(args, "parent_id")?,
            attachments,
            meta: object_arg(args, "meta")?,
            message_meta: object_arg(args, "message_meta")?,
            source_context: None,
        })
    }
}

/// Checks content of the types the runtime understands (MSG-25).
fn check_content_type(content_type: &str, content: &str) -> Result<(), ToolError> {
    match content_type {
        FORM_CONTENT_TYPE => {
            let form: Value = serde_json::from_str(content)
                .map_err(|e| ToolError::invalid(format!("a form's content must be JSON: {e}")))?;
            let questions = form.get("questions").and_then(Value::as_array);
            if !form.is_object() || questions.is_none_or(|q| q.is_empty()) {
                return Err(ToolError::invalid(
                    "a form is a JSON object with a non-empty 'questions' array",
                ));
            }
            Ok(())
        }
        "application/json" => serde_json::from_str::<Value>(content)
            .map(|_| ())
            .map_err(|e| {
                ToolError::invalid(format!(
                    "content_type is application/json but the content is not JSON: {e}"
                ))
            }),
        alf::ENCRYPTED_CONTENT_TYPE => Err(ToolError::invalid(
            "application/x-adf-encrypted is set by the runtime at security level 2; send the plain content",
        )),
        other if other.trim().is_empty() || !other.contains('/') => Err(ToolError::invalid(
            format!("content_type '{other}' is not a media type (e.g. text/plain)"),
        )),
        _ => Ok(()),
    }
}

fn http_url(address: &str) -> Result<String, ToolError> {
    let url = reqwest::Url::parse(address)
        .map_err(|e| ToolError::invalid(format!("address '{address}' is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ToolError::invalid(format!(
            "address '{address}' must be an http(s) inbox URL (e.g. http://127.0.0.1:7385/agents/monitor/inbox)"
        )));
    }
    Ok(url.to_string())
}

/// Composes the message, signs it at the agent's `security.level`, stores the `pending`
/// outbox row (and, with `messaging.inbox_mode`, the sender's own `read` inbox copy), and
/// returns what [`deliver`] needs. Runs inside the tool call's transaction: an error leaves
/// the file unchanged.
pub fn prepare(
    file: &mut AdfFile,
    config: &Value,
    args: &Value,
    cx: SendContext<'_>,
) -> Result<Prepared, ToolError> {
    let mut send = SendArgs::parse(args)?;
    let mode = sending_mode(config)?;
    let hosts_adapters = cx.mesh.is_some_and(Mesh::hosts_adapters);
    let parent_alf_id = adopt_parent(file, &mut send, mode, hosts_adapters)?;
    let recipient = send.recipient.clone().ok_or_else(|| {
        ToolError::invalid("msg_send needs 'recipient' (a DID or a local handle) or 'parent_id'")
    })?;
    let addressed = resolve_route(file, &send, &recipient, cx)?;
    let (mut draft, plain) = compose(file, config, &send, parent_alf_id, addressed, cx)?;

    // Outbox middleware sees the egress context before signing (§12.3); the stored rows
    // follow what it let through.
    let plain = outbox_middleware(file, plain, &draft.addressed.route, &draft.from)?;
    draft.follow_middleware(&plain)?;

    let wire = sign(file, config, cx, &draft.addressed.route, &plain)?;
    let outbox_id = store_rows(file, config, &draft, &plain, &wire)?;
    Ok(Prepared {
        outbox_id,
        message_id: draft.message_id,
        recipient,
        route: draft.addressed.route,
        message: wire,
    })
}

/// `messaging.mode`, refusing to send at all under `listen_only`.
fn sending_mode(config: &Value) -> Result<&str, ToolError> {
    let mode = config
        .pointer("/messaging/mode")
        .and_then(Value::as_str)
        .unwrap_or("proactive");
    if mode == "listen_only" {
        return Err(ToolError::new(
            ErrorCode::Disabled,
            "messaging mode is listen_only: this agent cannot send messages",
        ));
    }
    Ok(mode)
}

/// A reply takes what it lacks from the message it answers (§11.3); returns the parent's ALF
/// id. Without a parent, `respond_only` refuses the send. A parent a channel adapter wrote
/// is answered through that adapter (when the runtime runs adapters), with its
/// `source_context` (MSG-43).
fn adopt_parent(
    file: &AdfFile,
    send: &mut SendArgs,
    mode: &str,
    hosts_adapters: bool,
) -> Result<Option<String>, ToolError> {
    let Some(parent_id) = send.parent_id.clone() else {
        if mode == "respond_only" {
            return Err(ToolError::new(
                ErrorCode::Disabled,
                "messaging mode is respond_only: reply to an inbox message with parent_id",
            ));
        }
        return Ok(None);
    };
    let parent = file.message(Mailbox::Inbox, &parent_id)?.ok_or_else(|| {
        ToolError::not_found(format!(
            "no inbox message with id '{parent_id}' to reply to (msg_read lists them)"
        ))
    })?;
    let column = |name: &str| {
        parent
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    if let Some(source) = column("source")
        && source != "mesh"
    {
        if !hosts_adapters {
            return Err(not_supported_adapter(&source));
        }
        send.source_context = match parent.get("source_context") {
            Some(Value::String(text)) => serde_json::from_str(text).ok(),
            Some(Value::Null) | None => None,
            Some(other) => Some(other.clone()),
        };
        if send.recipient.is_none() {
            send.recipient = column("from");
        }
        if send.thread_id.is_none() {
            send.thread_id = column("thread_id").or_else(|| Some(parent_id.clone()));
        }
        return Ok(column("message_id").or(Some(parent_id)));
    }
    if send.recipient.is_none() {
        send.recipient = column("from").or_else(|| column("sender_alias"));
    }
    if send.address.is_none() {
        send.address = column("reply_to").filter(|r| r.starts_with("http"));
    }
    if send.thread_id.is_none() {
        send.thread_id = column("thread_id").or_else(|| Some(parent_id.clone()));
    }
    Ok(column("message_id").or(Some(parent_id)))
}

/// Where a message goes and who it is addressed to on the wire.
struct Addressed {
    route: Route,
    to: String,
    recipient_alias: Option<String>,
}

/// Same runtime first (§12.2, visibility applied), then HTTP.
fn resolve_route(
    file: &AdfFile,
    send: &SendArgs,
    recipient: &str,
    cx: SendContext<'_>,
) -> Result<Addressed, ToolError> {
    let is_did = recipient.starts_with("did:");
    if !is_did && recipient.contains(':') && send.address.is_none() {
        let adapter = recipient.split(':').next().unwrap_or_default();
        if cx.mesh.is_some_and(Mesh::hosts_adapters) && !adapter.is_empty() {
            return Ok(Addressed {
                route: Route::Adapter {
                    recipient: recipient.to_owned(),
                    sender: file.path().to_path_buf(),
                    source_context: send.source_context.clone(),
                },
                to: recipient.to_owned(),
                recipient_alias: None,
            });
        }
        return Err(not_supported_adapter(adapter));
    }
    let local = cx
        .mesh
        .and_then(|mesh| mesh.find(recipient, send.address.as_deref()));
    let sender_path = file.path().to_path_buf();
    match (&local, &send.address) {
        (Some(target), _) => {
            let origin = super::Origin::SameRuntime {
                sender: sender_path.clone(),
            };
            if !target.tier.admits(&origin, &target.path) {
                return Err(ToolError::new(
                    ErrorCode::Denied,
                    format!(
                        "agent '{}' does not accept messages from you (its visibility is {})",
                        target.handle,
                        target.tier.as_str()
                    ),
                ));
            }
            Ok(Addressed {
                route: Route::Local {
                    handle: target.handle.clone(),
                    sender: sender_path,
                },
                to: target.did.clone().unwrap_or_else(|| target.handle.clone()),
                recipient_alias: Some(target.handle.clone()),
            })
        }
        (None, Some(address)) => Ok(Addressed {
            route: Route::Http {
                url: http_url(address)?,
            },
            to: recipient.to_owned(),
            recipient_alias: None,
        }),
        (None, None) if is_did => Err(ToolError::invalid(format!(
            "recipient {recipient} is not an agent of this runtime: give its inbox URL as 'address' (agent_discover lists endpoints)"
        ))),
        (None, None) => Err(ToolError::not_found(format!(
            "no local agent with handle '{recipient}'; for a remote agent give its DID as 'recipient' and its inbox URL as 'address'"
        ))),
    }
}

/// Everything the stored rows hold besides the wire form, as composed and then as the
/// outbox middleware left it.
struct Draft {
    message_id: String,
    from: String,
    addressed: Addressed,
    network: String,
    thread_id: String,
    parent_alf_id: Option<String>,
    subject: Option<String>,
    content: String,
    content_type: String,
    attachments: Vec<Value>,
    payload_meta: Map<String, Value>,
    sender_alias: String,
    owner: Option<String>,
    reply_url: Option<String>,
}

/// Builds the plaintext ALF message (envelope and payload) and the draft of its rows.
fn compose(
    file: &AdfFile,
    config: &Value,
    send: &SendArgs,
    parent_alf_id: Option<String>,
    addressed: Addressed,
    cx: SendContext<'_>,
) -> Result<(Draft, Value), ToolError> {
    let content_type = send
        .content_type
        .clone()
        .unwrap_or_else(|| "text/plain".to_owned());
    check_content_type(&content_type, &send.content)?;
    let attachments = inline_attachments(file, &send.attachments)?;

    let did = super::agent_did(file)?;
    let owner = file
        .meta_get(adf_crypto::rows::meta_keys::OWNER_DID)?
        .map(|e| e.value)
        .filter(|owner| !owner.is_empty());
    let handle = config
        .get("handle")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let name = config
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or(&handle)
        .to_owned();
    let from = did.clone().unwrap_or_else(|| handle.clone());
    let reply_url = cx.mesh.and_then(|m| m.inbox_url(&handle));
    let network = config
        .pointer("/messaging/network")
        .and_then(Value::as_str)
        .unwrap_or("devnet")
        .to_owned();
    let message_id = adf_store::defaults::random_id(MESSAGE_ID_LEN);
    let now = adf_store::time::now_iso();
    let thread_id = send.thread_id.clone().unwrap_or_else(|| message_id.clone());

    let mut message_meta = send.message_meta.clone();
    alf::strip_trust_keys(&mut message_meta);
    let mut envelope_meta = Map::new();
    if let Some(owner) = &owner {
        envelope_meta.insert("owner".into(), owner.clone().into());
    }
    if let Some(url) = &reply_url
        && let Some(base) = url.strip_suffix("/inbox")
    {
        envelope_meta.insert("card".into(), format!("{base}/card").into());
    }
    for (k, v) in message_meta {
        envelope_meta.entry(k).or_insert(v);
    }
    let mut payload_meta = send.meta.clone();
    alf::strip_trust_keys(&mut payload_meta);

    let mut payload = Map::new();
    payload.insert("meta".into(), Value::Object(payload_meta.clone()));
    payload.insert("sender_alias".into(), name.clone().into());
    if let Some(alias) = &addressed.recipient_alias {
        payload.insert("recipient_alias".into(), alias.clone().into());
    }
    payload.insert("thread_id".into(), thread_id.clone().into());
    payload.insert(
        "parent_id".into(),
        parent_alf_id.clone().map_or(Value::Null, Value::String),
    );
    if let Some(subject) = &send.subject {
        payload.insert("subject".into(), subject.clone().into());
    }
    payload.insert("content_type".into(), content_type.clone().into());
    payload.insert("content".into(), send.content.clone().into());
    if !attachments.is_empty() {
        payload.insert("attachments".into(), Value::Array(attachments.clone()));
    }
    payload.insert("sent_at".into(), now.clone().into());

    let plain = json!({
        "version": "1.0",
        "network": network,
        "id": message_id,
        "timestamp": now,
        "from": from,
        "to": addressed.to,
        "reply_to": reply_url.clone().unwrap_or_else(|| from.clone()),
        "meta": envelope_meta,
        "payload": payload,
    });
    let draft = Draft {
        message_id,
        from,
        addressed,
        network,
        thread_id,
        parent_alf_id,
        subject: send.subject.clone(),
        content: send.content.clone(),
        content_type,
        attachments,
        payload_meta,
        sender_alias: name,
        owner,
        reply_url,
    };
    Ok((draft, plain))
}

impl Draft {
    /// Takes the payload fields from the message the outbox middleware let through.
    fn follow_middleware(&mut self, plain: &Value) -> Result<(), ToolError> {
        let sent = plain.get("payload").cloned().unwrap_or(Value::Null);
        self.content = match sent.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(other) if !other.is_null() => other.to_string(),
            _ => String::new(),
        };
        self.subject = sent
            .get("subject")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(content_type) = sent.get("content_type").and_then(Value::as_str) {
            self.content_type = content_type.to_owned();
        }
        check_content_type(&self.content_type, &self.content)?;
        if let Some(thread_id) = sent.get("thread_id").and_then(Value::as_str) {
            self.thread_id = thread_id.to_owned();
        }
        self.payload_meta = sent
            .get("meta")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        self.attachments = sent
            .get("attachments")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        Ok(())
    }
}

/// The wire form: signed at `security.level` ≥ 1, encrypted where the level and the route
/// allow it.
fn sign(
    file: &mut AdfFile,
    config: &Value,
    cx: SendContext<'_>,
    route: &Route,
    plain: &Value,
) -> Result<Value, ToolError> {
    let level = super::security_level(config);
    let key = if level >= 1 {
        Some(super::agent_key(file, cx.keys).map_err(|why| {
            ToolError::failed(format!(
                "security.level {level} signs every message, but this agent's signing key cannot be opened: {why}"
            ))
        })?)
    } else {
        None
    };
    let encrypt_allowed = matches!(route, Route::Http { .. });
    alf::egress(
        plain.clone(),
        key.as_ref(),
        level,
        encrypt_allowed,
        &mut rand::rng(),
    )
    .map_err(|e| ToolError::failed(format!("cannot sign the message: {e}")))
}

/// Stores the `pending` outbox row and, with `messaging.inbox_mode`, the sender's own `read`
/// inbox copy; returns the outbox row id.
fn store_rows(
    file: &mut AdfFile,
    config: &Value,
    draft: &Draft,
    plain: &Value,
    wire: &Value,
) -> Result<String, ToolError> {
    let row = message_row(draft, plain, wire);
    let mut outbox = row.clone();
    outbox.insert("created_at".into(), adf_store::time::now_ms().into());
    outbox.insert("status".into(), "pending".into());
    let outbox_id =
        file.message_insert(Mailbox::Outbox, &outbox, Some((&draft.message_id, plain)))?;

    let inbox_mode = config
        .pointer("/messaging/inbox_mode")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    if inbox_mode {
        let mut copy = row;
        copy.remove("address");
        copy.insert("source".into(), "mesh".into());
        copy.insert("sent_at".into(), adf_store::time::now_ms().into());
        copy.insert("received_at".into(), adf_store::time::now_ms().into());
        copy.insert("status".into(), "read".into());
        file.message_insert(Mailbox::Inbox, &copy, None)?;
    }
    Ok(outbox_id)
}

/// The columns both stored copies share. They hold plaintext (§8.5); `original_message` is
/// the wire form with its content and attachments flattened, as the reference stores it.
fn message_row(draft: &Draft, plain: &Value, wire: &Value) -> Map<String, Value> {
    let text = |v: &Option<String>| v.clone().map_or(Value::Null, Value::String);
    let mut row = Map::new();
    row.insert("message_id".into(), draft.message_id.clone().into());
    row.insert("from".into(), draft.from.clone().into());
    row.insert("to".into(), draft.addressed.to.clone().into());
    row.insert("address".into(), draft.addressed.route.address().into());
    row.insert(
        "reply_to".into(),
        plain.get("reply_to").cloned().unwrap_or(Value::Null),
    );
    row.insert("network".into(), draft.network.clone().into());
    row.insert("thread_id".into(), draft.thread_id.clone().into());
    row.insert("parent_id".into(), text(&draft.parent_alf_id));
    row.insert("subject".into(), text(&draft.subject));
    row.insert("content".into(), draft.content.clone().into());
    row.insert("content_type".into(), draft.content_type.clone().into());
    row.insert(
        "attachments".into(),
        if draft.attachments.is_empty() {
            Value::Null
        } else {
            Value::String(Value::Array(flattened_attachments(&draft.attachments)).to_string())
        },
    );
    row.insert(
        "meta".into(),
        Value::String(Value::Object(draft.payload_meta.clone()).to_string()),
    );
    row.insert("sender_alias".into(), draft.sender_alias.clone().into());
    row.insert(
        "recipient_alias".into(),
        text(&draft.addressed.recipient_alias),
    );
    row.insert("owner".into(), text(&draft.owner));
    row.insert(
        "card".into(),
        plain.pointer("/meta/card").cloned().unwrap_or(Value::Null),
    );
    row.insert("return_path".into(), text(&draft.reply_url));
    row.insert(
        "original_message".into(),
        tombstoned(wire).to_string().into(),
    );
    row
}

/// Runs `security.middleware.outbox` over the egress context
/// `{message, transport: {address, method}, agent: {did}}` (missing-tables §12.3) and returns
/// the message to sign. A rejection fails the call (nothing is stored). The message's `id`,
/// `from` and `to` and the transport stay as they were: the outbox row and the route were
/// decided from them, and choosing another transport is not supported yet.
fn outbox_middleware(
    file: &mut AdfFile,
    plain: Value,
    route: &Route,
    from: &str,
) -> Result<Value, ToolError> {
    use crate::middleware::{self, Point};
    let config = file.config_shared()?;
    if !middleware::configured(&config, Point::Outbox) {
        return Ok(plain);
    }
    let method = match route {
        Route::Local { .. } => "local",
        Route::Http { .. } => "http",
        Route::Adapter { .. } => "adapter",
    };
    let transport = json!({ "address": route.address(), "method": method });
    let context =
        json!({ "message": plain.clone(), "transport": transport, "agent": { "did": from } });
    let outcome = middleware::run_chain(file, Point::Outbox, context, Map::new())
        .map_err(|rejection| ToolError::failed(rejection.to_string()))?;
    let refuse =
        |why: &str| ToolError::failed(format!("outbox middleware {why}; the message was not sent"));
    let changed = outcome.data;
    if changed.get("transport") != Some(&transport) {
        return Err(refuse(
            "changed the transport, and choosing another transport is not supported yet",
        ));
    }
    let Some(message) = changed.get("message").filter(|m| m.is_object()) else {
        return Err(refuse("returned data without a `message` object"));
    };
    for key in ["id", "from", "to"] {
        if message.get(key) != plain.get(key) {
            return Err(refuse(&format!("changed the message's `{key}`")));
        }
    }
    if !message.get("payload").is_some_and(Value::is_object) {
        return Err(refuse("returned a message without a `payload` object"));
    }
    Ok(message.clone())
}

fn not_supported_adapter(adapter: &str) -> ToolError {
    ToolError::new(
        ErrorCode::Disabled,
        format!(
            "'{adapter}' recipients go through a channel adapter, and this runtime runs none (the daemon runs an agent's adapters)"
        ),
    )
}

/// Reads each attachment path from the agent's files as an inline ALF attachment (§11.4).
fn inline_attachments(file: &AdfFile, paths: &[String]) -> Result<Vec<Value>, ToolError> {
    paths
        .iter()
        .map(|path| {
            let entry = file.file_read(path)?.ok_or_else(|| {
                ToolError::not_found(format!("cannot attach '{path}': no such file"))
            })?;
            let filename = path.rsplit('/').next().unwrap_or(path);
            Ok(json!({
                "filename": filename,
                "content_type": entry.info.mime_type,
                "transfer": "inline",
                "data": base64::engine::general_purpose::STANDARD.encode(&entry.content),
                "size_bytes": entry.content.len(),
            }))
        })
        .collect()
}

/// Attachments as stored on a row: without their data.
fn flattened_attachments(attachments: &[Value]) -> Vec<Value> {
    attachments
        .iter()
        .map(|a| {
            let mut a = a.clone();
            if let Some(object) = a.as_object_mut() {
                object.remove("data");
            }
            a
        })
        .collect()
}

/// The wire message with `payload.content` and `payload.attachments` replaced by
/// `"[flattened]"` (`\[C28\]` `original_message`).
pub fn tombstoned(message: &Value) -> Value {
    let mut copy = message.clone();
    if let Some(payload) = copy.get_mut("payload").and_then(Value::as_object_mut) {
        if payload.contains_key("content") {
            payload.insert("content".into(), "[flattened]".into());
        }
        if payload.contains_key("attachments") {
            payload.insert("attachments".into(), "[flattened]".into());
        }
    }
    copy
}

/// Carries a prepared message to its recipient: the hosted agent, else a WebSocket the
/// sender (`sender_id`, its config id) holds open to the recipient's DID, else an HTTP POST
/// whose 2xx answer (202 per ALF) means accepted. Never retries. The POST goes only where the
/// sending agent's egress `policy` admits it (§5.6, as for `sys_fetch`), and follows no
/// redirect.
pub async fn deliver(
    prepared: &Prepared,
    mesh: Option<&dyn Mesh>,
    policy: &adf_egress::Policy,
    sender_id: Option<&str>,
) -> Delivery {
    if let (Route::Http { .. }, Some(mesh), Some(sender_id)) = (&prepared.route, mesh, sender_id)
        && prepared.recipient.starts_with("did:")
        && let Some(over_socket) =
            mesh.deliver_over_socket(sender_id, &prepared.recipient, &prepared.message)
    {
        return over_socket.await;
    }
    match &prepared.route {
        Route::Local { handle, sender } => {
            let target: Option<LocalAgent> = mesh.and_then(|m| m.find(handle, None));
            match (mesh, target) {
                (Some(mesh), Some(target)) => {
                    mesh.deliver(&target, sender, prepared.message.clone())
                        .await
                }
                _ => Delivery::failed(
                    Some(404),
                    format!("agent '{handle}' is no longer hosted by this runtime"),
                ),
            }
        }
        Route::Http { url } => post(url, &prepared.message, policy).await,
        Route::Adapter {
            recipient,
            sender,
            source_context,
        } => {
            let Some(mesh) = mesh else {
                return Delivery::failed(None, "this runtime runs no channel adapters");
            };
            let payload = prepared.message.get("payload");
            let content = match payload.and_then(|p| p.get("content")) {
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            let content_type = payload
                .and_then(|p| p.get("content_type"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            mesh.deliver_to_adapter(
                sender,
                AdapterMessage {
                    outbox_id: prepared.outbox_id.clone(),
                    recipient: recipient.clone(),
                    content,
                    content_type,
                    source_context: source_context.clone(),
                },
            )
            .await
        }
    }
}

/// The HTTP half of [`deliver`]: admitted by the policy, then one POST with no redirect.
async fn post(url: &str, message: &Value, policy: &adf_egress::Policy) -> Delivery {
    let parsed = match reqwest::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(error) => return Delivery::failed(None, format!("'{url}' is not a URL: {error}")),
    };
    let pins = adf_egress::Pins::default();
    if let Err(error) = policy
        .admit("POST", &parsed, &adf_egress::SystemLookup, &pins)
        .await
    {
        return Delivery::failed(None, format!("msg_send to {url}: {error}"));
    }
    let options = adf_egress::ClientOptions {
        timeout: Some(DELIVERY_TIMEOUT),
        ..adf_egress::ClientOptions::default()
    };
    let client = match adf_egress::agent_client(&pins, options) {
        Ok(client) => client,
        Err(error) => return Delivery::failed(None, error.to_string()),
    };
    match client.post(parsed).json(message).send().await {
        Ok(response) if response.status().is_success() => {
            Delivery::accepted(response.status().as_u16())
        }
        Ok(response) => {
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            let reason = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| body.chars().take(200).collect());
            Delivery::failed(
                Some(status.as_u16()),
                format!("{url} refused the message ({status}): {reason}"),
            )
        }
        Err(error) => Delivery::failed(None, format!("cannot reach {url}: {error}")),
    }
}

/// The tool result of a finished delivery.
pub fn result(prepared: &Prepared, delivery: &Delivery) -> Result<Value, ToolError> {
    if delivery.delivered {
        Ok(json!({
            "status": "delivered",
            "message_id": prepared.message_id,
            "outbox_id": prepared.outbox_id,
            "recipient": prepared.recipient,
            "status_code": delivery.status_code,
        }))
    } else {
        Err(ToolError::failed(format!(
            "the message to {} was not delivered: {} (outbox row {} is failed; messages are not retried)",
            prepared.recipient,
            delivery.error.as_deref().unwrap_or("unknown error"),
            prepared.outbox_id
        )))
    }
}
