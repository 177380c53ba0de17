//! The messages that cross the seam: an [`InboundMessage`] becomes one `adf_inbox` row (§11.6),
//! an [`OutboundMessage`] is one `adf_outbox` row on its way to a platform.

use serde_json::{Map, Value, json};

/// A platform message admitted by the policy, in the shape of an `adf_inbox` row.
#[derive(Debug, Clone, PartialEq)]
pub struct InboundMessage {
    /// A stable platform id (e.g. `telegram:update:123`), so a host may refuse a second row for
    /// the same platform message (the adapter's persisted offset is the first guard).
    pub message_id: String,
    /// `source`: the adapter type.
    pub source: String,
    /// `from`: the address a reply goes to (`telegram:<chat id>`).
    pub from: String,
    /// `sender_alias`: the sender's platform name, for display.
    pub sender_alias: Option<String>,
    /// `thread_id`: the conversation.
    pub thread_id: Option<String>,
    /// `parent_id`: the message this answers (form answers: the form's outbox row).
    pub parent_id: Option<String>,
    /// `content`: the text.
    pub content: String,
    /// `content_type`, when not plain text.
    pub content_type: Option<String>,
    /// `attachments`: what came with the message (references and skipped ones).
    pub attachments: Vec<Value>,
    /// `meta`: `{group: …}` for group conversations (never copied to replies).
    pub meta: Option<Value>,
    /// `source_context`: what a reply needs; the runtime copies it to replies.
    pub source_context: Value,
    /// `original_message`: the raw platform message.
    pub original_message: Value,
    /// `sent_at`, ms since the epoch, when the platform says.
    pub sent_at: Option<i64>,
    /// `received_at`, ms since the epoch.
    pub received_at: i64,
}

impl InboundMessage {
    /// The `adf_inbox` columns of this message (status `unread`), for
    /// `AdfFile::message_insert(Mailbox::Inbox, …)`.
    pub fn to_inbox_row(&self) -> Map<String, Value> {
        let mut row = Map::new();
        let mut put = |name: &str, value: Value| {
            if !value.is_null() {
                row.insert(name.to_owned(), value);
            }
        };
        put("message_id", json!(self.message_id));
        put("from", json!(self.from));
        put("sender_alias", json!(self.sender_alias));
        put("thread_id", json!(self.thread_id));
        put("parent_id", json!(self.parent_id));
        put("content", json!(self.content));
        put("content_type", json!(self.content_type));
        if !self.attachments.is_empty() {
            put("attachments", Value::Array(self.attachments.clone()));
        }
        put("meta", self.meta.clone().unwrap_or(Value::Null));
        put("source", json!(self.source));
        put("source_context", self.source_context.clone());
        put("original_message", self.original_message.clone());
        put("sent_at", json!(self.sent_at));
        put("received_at", json!(self.received_at));
        put("status", json!("unread"));
        row
    }
}

/// One outbox row to deliver through an adapter.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboundMessage {
    /// The `adf_outbox` row id (form answers thread back to it).
    pub outbox_id: String,
    /// `type:id`, e.g. `telegram:123` (MSG-22: no address).
    pub recipient: String,
    /// The text, or the form JSON for a form.
    pub content: String,
    /// `content_type`; `application/vnd.adf.form+json` is a form.
    pub content_type: Option<String>,
    /// The `source_context` copied from the inbox row this replies to (MSG-43).
    pub source_context: Option<Value>,
}

/// What a delivery produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The platform's ids of the messages sent (a long text or a form may be several).
    pub platform_message_ids: Vec<String>,
    /// The HTTP status of the last platform answer (the outbox row's `status_code`).
    pub status_code: u16,
}

/// Splits `type:id` into the adapter type and the platform id; `None` when either is empty.
pub fn parse_recipient(recipient: &str) -> Option<(&str, &str)> {
    let (kind, id) = recipient.split_once(':')?;
    (!kind.is_empty() && !id.is_empty()).then_some((kind, id))
}
