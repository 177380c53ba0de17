//! Mesh ingress: one inbound ALF message → checks → one `adf_inbox` row (§8.5, §11).
//!
//! Order of checks, each refusal with its HTTP status: `messaging.receive` (404, the agent is
//! not on the mesh) → visibility of the sender's origin (403) → size (413) → the message
//! signature (400 for a bad algorithm or DID, 403 when invalid or required and missing) → `to`
//! names this agent (403) → `allow_list` / `block_list` (403) → decryption (403 when it fails)
//! → the payload signature (403) → a duplicate ALF id is accepted again without a second row →
//! `security.middleware.inbox` (§12.3: the ALF message before storage; a `reject` is the
//! answer, a changed message is what is stored) → inline attachments written under
//! `imports/{sender}/` → the row and its `inbox_message` audit snapshot, in one transaction.
//! A refusal stores no message (the middleware's own log rows stay).
//!
//! Decisions where the sources leave room:
//! - Unsigned messages are refused when `security.require_signature` is true or
//!   `security.allow_unsigned` is false (MSG-10, MSG-11).
//! - The stored `meta` is the payload's `meta` without wire trust keys plus this runtime's
//!   stamps: `message_verified`, `payload_verified`, `payload_encrypted` (only when it
//!   decrypted) and `identity_verified` (false: HTTP carries no transport authentication).
//! - `sender_alias` equal to `owner`, `system` or `user` (case-insensitive) is dropped (MSG-17).
//! - `thread_id` missing on the wire becomes the message's own id (the ALF threading rule).

use adf_crypto::alf::{self, IngressPolicy, Receiver};
use adf_store::AdfFile;
use adf_store::messages::Mailbox;
use base64::Engine;
use serde::Serialize;
use serde_json::{Map, Value};

use super::{Origin, Tier};
use crate::identity::LocalKeys;

/// Sender aliases nobody may claim from the wire.
pub const RESERVED_ALIASES: [&str; 3] = ["owner", "system", "user"];

/// One inbound message and what its transport knows.
#[derive(Debug, Clone)]
pub struct Arrival<'a> {
    /// The raw body (JSON).
    pub wire: &'a [u8],
    /// Where the message came from, which the recipient's tier must admit.
    pub origin: Origin,
    /// `http` or `local`.
    pub transport: &'static str,
    /// The transport's bounce address, when it has one.
    pub return_path: Option<String>,
}

/// Why ingress refused a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{status}: {reason}")]
pub struct Refusal {
    /// The HTTP status a transport answers with.
    pub status: u16,
    /// Why the message was refused, for the sender to read.
    pub reason: String,
}

impl Refusal {
    fn new(status: u16, reason: impl Into<String>) -> Self {
        Refusal {
            status,
            reason: reason.into(),
        }
    }
}

impl From<adf_store::StoreError> for Refusal {
    fn from(error: adf_store::StoreError) -> Self {
        Refusal::new(500, error.to_string())
    }
}

/// A stored (or already stored) message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Accepted {
    /// The local inbox row id.
    pub inbox_id: String,
    /// The ALF id.
    pub message_id: String,
    /// True when the ALF id was already in the inbox and nothing new was stored.
    pub duplicate: bool,
    /// The inline attachments written to the agent's files, `(path, size)`: file changes the
    /// host reports as any other writer's (§7.1).
    pub imported: Vec<(String, i64)>,
}

fn bool_at(config: &Value, pointer: &str, default: bool) -> bool {
    config
        .pointer(pointer)
        .and_then(Value::as_bool)
        .unwrap_or(default)
}

fn list_at(config: &Value, pointer: &str) -> Vec<String> {
    let items = config.pointer(pointer).and_then(Value::as_array);
    items
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// `messaging.allow_list` / `block_list`: with either set, the sender must name a DID that the
/// allow list holds, or the block list does not.
fn check_sender_lists(config: &Value, from: &str) -> Result<(), Refusal> {
    let allow = list_at(config, "/messaging/allow_list");
    let block = list_at(config, "/messaging/block_list");
    if (!allow.is_empty() || !block.is_empty()) && !from.starts_with("did:") {
        return Err(Refusal::new(
            403,
            "this agent keeps a sender list and the message names no sender DID",
        ));
    }
    if !allow.is_empty() {
        if !allow.iter().any(|a| a == from) {
            return Err(Refusal::new(
                403,
                "the sender is not on this agent's allow_list",
            ));
        }
    } else if block.iter().any(|b| b == from) {
        return Err(Refusal::new(403, "the sender is blocked by this agent"));
    }
    Ok(())
}

/// Runs the ingress pipeline for `file`'s agent and stores the message.
pub fn accept(
    file: &mut AdfFile,
    arrival: &Arrival<'_>,
    keys: Option<&LocalKeys>,
) -> Result<Accepted, Refusal> {
    let config = file.config_shared()?;
    if !bool_at(&config, "/messaging/receive", true) {
        return Err(Refusal::new(
            404,
            "this agent does not receive messages (messaging.receive is false)",
        ));
    }
    let tier = Tier::of(&config);
    if !tier.admits(&arrival.origin, file.path()) {
        return Err(Refusal::new(
            403,
            format!(
                "this agent's visibility is {}: it does not accept messages from this sender",
                tier.as_str()
            ),
        ));
    }
    if arrival.wire.len() > alf::MAX_MESSAGE_BYTES {
        return Err(Refusal::new(413, "message exceeds 25 MB"));
    }
    let message: Value = serde_json::from_slice(arrival.wire)
        .map_err(|e| Refusal::new(400, format!("message is not valid JSON: {e}")))?;
    let from = message
        .get("from")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();

    // Sender lists before any key is opened.
    check_sender_lists(&config, &from)?;

    let did = super::agent_did(file)?.unwrap_or_default();
    let handle = config
        .get("handle")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let encrypted = message
        .get("payload")
        .and_then(Value::as_object)
        .is_some_and(alf::is_encrypted_payload);
    let signing_key = if encrypted {
        Some(
            super::agent_key(file, keys)
                .map_err(|e| Refusal::new(500, format!("cannot open this agent's keys: {e}")))?,
        )
    } else {
        None
    };
    let aliases: Vec<&str> = [handle.as_str()]
        .into_iter()
        .filter(|h| !h.is_empty())
        .collect();
    let policy = IngressPolicy {
        require_signature: bool_at(&config, "/security/require_signature", false)
            || !bool_at(&config, "/security/allow_unsigned", true),
        require_payload_signature: bool_at(&config, "/security/require_payload_signature", false),
    };
    let receiver = Receiver {
        did: if did.is_empty() { &handle } else { &did },
        aliases: &aliases,
        signing_key: signing_key.as_ref(),
    };
    let verified = alf::ingress(message.clone(), &receiver, &policy).map_err(|e| match e {
        adf_crypto::Error::Alf { status, reason } => Refusal::new(status, reason),
        other => Refusal::new(400, other.to_string()),
    })?;

    let message_id = verified
        .message
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| Refusal::new(400, "message has no `id`"))?
        .to_owned();
    if let Some(existing) = file.inbox_id_by_message_id(&message_id)? {
        return Ok(Accepted {
            inbox_id: existing,
            message_id,
            duplicate: true,
            imported: Vec::new(),
        });
    }
    let verified = inbox_middleware(file, verified, arrival)?;
    // Attachments and the row land together or not at all.
    let (inbox_id, imported) = file.atomically(|file| {
        let row = project(file, &verified, arrival)?;
        let imported = imported_files(&row);
        let id = file
            .message_insert(Mailbox::Inbox, &row, Some((&message_id, &verified.message)))
            .map_err(Refusal::from)?;
        Ok::<_, Refusal>((id, imported))
    })?;
    Ok(Accepted {
        inbox_id,
        message_id,
        duplicate: false,
        imported,
    })
}

/// Runs `security.middleware.inbox` over the verified, decrypted message, with the runtime's
/// trust stamps and the transport as `meta` (read-only: the stored stamps stay the runtime's).
/// A `reject` answers its code when it is a 4xx/5xx status (403 otherwise) with its reason; a
/// failing chain answers 500 without its details, which are in the agent's log. The ALF `id`
/// must stay: it is what deduplicates deliveries.
fn inbox_middleware(
    file: &mut AdfFile,
    mut verified: alf::Verified,
    arrival: &Arrival<'_>,
) -> Result<alf::Verified, Refusal> {
    use crate::middleware::{self, Point};
    let config = file.config_shared()?;
    if !middleware::configured(&config, Point::Inbox) {
        return Ok(verified);
    }
    let mut meta = verified.stamps();
    meta.insert("transport".into(), arrival.transport.into());
    let outcome = middleware::run_chain(file, Point::Inbox, verified.message.clone(), meta)
        .map_err(|rejection| match rejection.code {
            _ if rejection.failed => Refusal::new(500, "this agent's inbox middleware failed"),
            code @ 400..=599 => Refusal::new(code, rejection.reason),
            _ => Refusal::new(403, rejection.reason),
        })?;
    if !outcome.data.is_object() {
        return Err(Refusal::new(
            500,
            "this agent's inbox middleware returned no message",
        ));
    }
    if outcome.data.get("id") != verified.message.get("id") {
        return Err(Refusal::new(
            500,
            "this agent's inbox middleware changed the message id",
        ));
    }
    verified.message = outcome.data;
    Ok(verified)
}

/// The inbox row of a verified message (missing-tables §11.1 "Flattening into rows").
fn project(
    file: &mut AdfFile,
    verified: &alf::Verified,
    arrival: &Arrival<'_>,
) -> Result<Map<String, Value>, Refusal> {
    let message = &verified.message;
    let empty = Map::new();
    let payload = verified.payload().unwrap_or(&empty);
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let top = |key: &str| text(message.get(key));
    let inner = |key: &str| text(payload.get(key));

    let from = top("from").unwrap_or_default();
    let message_id = top("id").unwrap_or_default();
    let mut meta = payload
        .get("meta")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    alf::strip_trust_keys(&mut meta);
    meta.extend(verified.stamps());
    meta.insert("identity_verified".into(), false.into());

    let sender_alias = inner("sender_alias").filter(|alias| {
        !RESERVED_ALIASES
            .iter()
            .any(|r| alias.trim().eq_ignore_ascii_case(r))
    });
    let content = match payload.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let owner = if verified.message_verified {
        text(message.pointer("/meta/owner"))
    } else {
        None
    };
    let sent_at = inner("sent_at")
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(&s).ok())
        .map(|t| t.timestamp_millis());
    let sender_dir = sender_alias
        .clone()
        .unwrap_or_else(|| from.rsplit(':').next().unwrap_or("unknown").to_owned());
    let attachments = match payload.get("attachments") {
        Some(Value::Array(items)) if !items.is_empty() => {
            Some(import_attachments(file, items, &sender_dir)?)
        }
        _ => None,
    };

    let mut row = Map::new();
    row.insert("message_id".into(), message_id.clone().into());
    row.insert("from".into(), from.into());
    row.insert("to".into(), top("to").map_or(Value::Null, Value::String));
    row.insert(
        "reply_to".into(),
        top("reply_to").map_or(Value::Null, Value::String),
    );
    row.insert(
        "network".into(),
        top("network").unwrap_or_else(|| "devnet".to_owned()).into(),
    );
    row.insert(
        "thread_id".into(),
        inner("thread_id").unwrap_or(message_id).into(),
    );
    row.insert(
        "parent_id".into(),
        inner("parent_id").map_or(Value::Null, Value::String),
    );
    row.insert(
        "subject".into(),
        inner("subject").map_or(Value::Null, Value::String),
    );
    row.insert("content".into(), content.into());
    row.insert(
        "content_type".into(),
        inner("content_type")
            .unwrap_or_else(|| "text/plain".to_owned())
            .into(),
    );
    row.insert(
        "attachments".into(),
        attachments.map_or(Value::Null, |a| Value::String(Value::Array(a).to_string())),
    );
    row.insert(
        "meta".into(),
        Value::String(Value::Object(meta).to_string()),
    );
    row.insert(
        "sender_alias".into(),
        sender_alias.map_or(Value::Null, Value::String),
    );
    row.insert(
        "recipient_alias".into(),
        inner("recipient_alias").map_or(Value::Null, Value::String),
    );
    row.insert("owner".into(), owner.map_or(Value::Null, Value::String));
    row.insert(
        "card".into(),
        text(message.pointer("/meta/card")).map_or(Value::Null, Value::String),
    );
    row.insert(
        "return_path".into(),
        arrival
            .return_path
            .clone()
            .map_or(Value::Null, Value::String),
    );
    row.insert("source".into(), "mesh".into());
    row.insert("sent_at".into(), sent_at.map_or(Value::Null, Value::from));
    row.insert("received_at".into(), adf_store::time::now_ms().into());
    row.insert("status".into(), "unread".into());
    row.insert(
        "original_message".into(),
        super::send::tombstoned(message).to_string().into(),
    );
    Ok(row)
}

/// A path segment safe for the flat file namespace.
fn safe_segment(raw: &str) -> String {
    let cleaned: String = raw
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let trimmed = cleaned.trim_matches('.');
    if trimmed.is_empty() {
        "attachment".to_owned()
    } else {
        trimmed.chars().take(120).collect()
    }
}

/// `(path, size)` of the attachments a projected row imported into the agent's files.
fn imported_files(row: &Map<String, Value>) -> Vec<(String, i64)> {
    let Some(records) = row
        .get("attachments")
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str::<Vec<Value>>(text).ok())
    else {
        return Vec::new();
    };
    records
        .iter()
        .filter(|r| r.get("transfer").and_then(Value::as_str) == Some("imported"))
        .filter_map(|r| {
            let path = r.get("path")?.as_str()?.to_owned();
            Some((
                path,
                r.get("size_bytes").and_then(Value::as_i64).unwrap_or(0),
            ))
        })
        .collect()
}

/// Writes inline attachments to `imports/{sender}/` and returns the stored records (§11.4):
/// `imported` with the `path`; reference attachments are kept as they came.
fn import_attachments(
    file: &mut AdfFile,
    items: &[Value],
    sender: &str,
) -> Result<Vec<Value>, Refusal> {
    let dir = format!("imports/{}", safe_segment(sender));
    let mut stored = Vec::new();
    for item in items {
        let Some(object) = item.as_object() else {
            return Err(Refusal::new(400, "an attachment is not an object"));
        };
        let transfer = object
            .get("transfer")
            .and_then(Value::as_str)
            .unwrap_or("inline");
        let filename = safe_segment(
            object
                .get("filename")
                .and_then(Value::as_str)
                .unwrap_or("attachment"),
        );
        let content_type = object.get("content_type").cloned().unwrap_or(Value::Null);
        if transfer != "inline" {
            let mut kept = object.clone();
            kept.remove("data");
            stored.push(Value::Object(kept));
            continue;
        }
        let data = object.get("data").and_then(Value::as_str).ok_or_else(|| {
            Refusal::new(400, format!("inline attachment '{filename}' has no data"))
        })?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|_| Refusal::new(400, format!("attachment '{filename}' is not base64")))?;
        let mut path = format!("{dir}/{filename}");
        let mut n = 1;
        while file.file_read(&path)?.is_some() {
            path = format!("{dir}/{n}-{filename}");
            n += 1;
        }
        file.file_write(
            adf_store::Caller::Owner,
            &path,
            &bytes,
            &adf_store::FileWrite {
                mime_type: content_type.as_str().map(str::to_owned),
                protection_if_new: None,
            },
        )?;
        stored.push(serde_json::json!({
            "filename": filename,
            "content_type": content_type,
            "transfer": "imported",
            "path": path,
            "size_bytes": bytes.len(),
        }));
    }
    Ok(stored)
}
