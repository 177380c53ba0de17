//! Built-in tools: the local message tools (`msg_read`, `msg_list`, `msg_update`,
//! `msg_delete`; tools guide "Messaging Tools" and "Message Deletion Tools", missing-tables
//! §10.4). `msg_send` and `agent_discover` need the network and live elsewhere.
//!
//! Decisions where the sources leave room:
//! - `msg_update` takes `message_ids` (a string or an array) and accepts the adf-object guide's
//!   `ids` as an alias; statuses are `read`, `archived` and `delete`, and `delete` only removes
//!   rows already `archived` (Appendix C #3). The call is all-or-nothing: an unknown id, or a
//!   `delete` of a row that is not archived, fails the call and changes nothing, where the
//!   reference applied the valid part. A tool call is one transaction here.
//! - `msg_list` takes no parameters (Appendix C #17: tools guide over the adf-object guide).
//! - Deletes write no audit rows (tools guide "msg_delete", §13.3, MSG-39 / AUD-10), whether
//!   or not `audit.inbox` / `audit.outbox` is on: the snapshots taken at arrival and send are
//!   the archive.
//! - `msg_read` returns the rows as they were read (status `unread` when reading unread
//!   messages) and marks them `read` in the same transaction. JSON text columns
//!   (`attachments`, `meta`, `source_context`, `original_message`) are parsed when they hold
//!   JSON objects or arrays.

use std::sync::Arc;

use adf_store::messages::{Mailbox, MessageFilter};
use serde_json::{Map, Value, json};

use crate::tools::{ErrorCode, Tool, ToolContext, ToolError};

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(MsgRead),
        Arc::new(MsgList),
        Arc::new(MsgUpdate),
        Arc::new(MsgDelete),
    ]
}

const JSON_COLUMNS: [&str; 4] = ["attachments", "meta", "source_context", "original_message"];

/// A stored row as the tools return it.
fn message_view(mut row: Map<String, Value>, include_original: bool) -> Value {
    if !include_original {
        row.remove("original_message");
    }
    for column in JSON_COLUMNS {
        if let Some(Value::String(text)) = row.get(column)
            && let Ok(parsed @ (Value::Object(_) | Value::Array(_))) =
                serde_json::from_str::<Value>(text)
        {
            row.insert(column.to_owned(), parsed);
        }
    }
    Value::Object(row)
}

/// `msg_read`.
#[derive(Debug)]
struct MsgRead;

impl Tool for MsgRead {
    declare_tool! {
        name: "msg_read",
        description: "Read messages from your inbox, newest first, with sender, content, source and metadata. Reading unread messages (the default) marks them read. The raw platform payload (original_message) is left out unless include_original is true.",
        parameters: json!({
            "type": "object",
            "properties": {
                "status": { "type": "string", "enum": ["unread", "read", "archived"], "description": "Which messages. Default unread." },
                "limit": { "type": "integer", "minimum": 1, "description": "At most this many messages. Default all." },
                "include_original": { "type": "boolean", "description": "Include the raw platform message (original_message). Large. Default false." }
            }
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let status = args
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("unread")
            .to_owned();
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        let include_original = args
            .get("include_original")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let filter = MessageFilter {
            status: Some(status.clone()),
            ..MessageFilter::default()
        };
        let rows = cx.file.messages(Mailbox::Inbox, &filter, limit)?;
        if status == "unread" && !rows.is_empty() {
            let ids: Vec<String> = rows
                .iter()
                .filter_map(|row| row.get("id").and_then(Value::as_str).map(str::to_owned))
                .collect();
            cx.file.messages_set_status(Mailbox::Inbox, &ids, "read")?;
        }
        Ok(Value::Array(
            rows.into_iter()
                .map(|row| message_view(row, include_original))
                .collect(),
        ))
    }
}

/// `msg_list`.
#[derive(Debug)]
struct MsgList;

impl Tool for MsgList {
    declare_tool! {
        name: "msg_list",
        description: "Check your inbox without reading it: counts of unread, read and archived messages, and the total.",
        parameters: {
            json!({ "type": "object", "properties": {} })
        },
    }

    fn run(&self, cx: &mut ToolContext<'_>, _args: Value) -> Result<Value, ToolError> {
        let counts = cx.file.inbox_counts()?;
        Ok(json!(counts))
    }
}

/// `message_ids` (or its alias `ids`) as a deduplicated list.
fn message_ids(args: &Value) -> Result<Vec<String>, ToolError> {
    let value = match (args.get("message_ids"), args.get("ids")) {
        (Some(_), Some(_)) => {
            return Err(ToolError::invalid(
                "give message_ids or its alias ids, not both",
            ));
        }
        (Some(value), None) | (None, Some(value)) => value,
        (None, None) => {
            return Err(ToolError::invalid(
                "message_ids is required: a message id or an array of them",
            ));
        }
    };
    let items: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        single => vec![single],
    };
    let mut ids: Vec<String> = Vec::new();
    for item in items {
        match item.as_str().map(str::trim) {
            Some(id) if !id.is_empty() => {
                if !ids.iter().any(|known| known == id) {
                    ids.push(id.to_owned());
                }
            }
            _ => {
                return Err(ToolError::invalid(format!(
                    "message ids must be non-empty strings, not {item}"
                )));
            }
        }
    }
    if ids.is_empty() {
        return Err(ToolError::invalid(
            "message_ids must name at least one message",
        ));
    }
    Ok(ids)
}

fn plural(count: usize, word: &str) -> String {
    if count == 1 {
        format!("1 {word}")
    } else {
        format!("{count} {word}s")
    }
}

/// `msg_update`.
#[derive(Debug)]
struct MsgUpdate;

impl Tool for MsgUpdate {
    declare_tool! {
        name: "msg_update",
        description: "Update the status of one or more inbox messages: \"read\", \"archived\", or \"delete\" (only for messages already archived). message_ids is one id or an array. All ids must exist, or nothing changes.",
        parameters: json!({
            "type": "object",
            "properties": {
                "message_ids": {
                    "type": ["string", "array"],
                    "items": { "type": "string" },
                    "description": "A message id or an array of message ids (the inbox row id)."
                },
                "ids": {
                    "type": ["string", "array"],
                    "items": { "type": "string" },
                    "description": "Alias of message_ids."
                },
                "status": { "type": "string", "enum": ["read", "archived", "delete"], "description": "New status; delete removes messages that are already archived." }
            },
            "required": ["status"]
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let ids = message_ids(&args)?;
        let status = args
            .get("status")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::invalid("status is required: read, archived or delete"))?;
        let mut missing = Vec::new();
        let mut not_archived = Vec::new();
        for id in &ids {
            match cx.file.message(Mailbox::Inbox, id)? {
                None => missing.push(format!("\"{id}\"")),
                Some(row) if status == "delete" => {
                    let current = row.get("status").and_then(Value::as_str).unwrap_or("");
                    if current != "archived" {
                        not_archived.push(format!("\"{id}\" (status {current})"));
                    }
                }
                Some(_) => {}
            }
        }
        if !missing.is_empty() {
            return Err(ToolError::new(
                ErrorCode::NotFound,
                format!(
                    "no inbox message {}; nothing was changed",
                    missing.join(", ")
                ),
            ));
        }
        if !not_archived.is_empty() {
            return Err(ToolError::invalid(format!(
                "only archived messages can be deleted; archive these first: {}; nothing was changed",
                not_archived.join(", ")
            )));
        }
        if status == "delete" {
            let deleted = cx.file.messages_delete_ids(Mailbox::Inbox, &ids)?;
            Ok(Value::String(format!(
                "Deleted {}.",
                plural(deleted, "archived message")
            )))
        } else {
            let updated = cx.file.messages_set_status(Mailbox::Inbox, &ids, status)?;
            Ok(Value::String(format!(
                "Marked {} as {status}.",
                plural(updated, "message")
            )))
        }
    }
}

/// `msg_delete`.
#[derive(Debug)]
struct MsgDelete;

impl Tool for MsgDelete {
    declare_tool! {
        name: "msg_delete",
        description: "Delete inbox or outbox messages matching a filter. At least one filter field is required: inbox supports status, from, source, before (epoch ms), thread_id; outbox supports status, before, thread_id. Deletion is permanent.",
        parameters: json!({
            "type": "object",
            "properties": {
                "source": { "type": "string", "enum": ["inbox", "outbox"], "description": "Which message table." },
                "filter": {
                    "type": "object",
                    "description": "Conditions, all of which must hold.",
                    "properties": {
                        "status": { "type": "string", "description": "unread/read/archived (inbox); pending/sent/delivered/failed (outbox)." },
                        "from": { "type": "string", "description": "Sender id (inbox only)." },
                        "source": { "type": "string", "description": "Source transport such as mesh or telegram (inbox only)." },
                        "before": { "type": "integer", "description": "Messages received (inbox) or created (outbox) before this epoch ms." },
                        "thread_id": { "type": "string", "description": "Thread id." }
                    }
                }
            },
            "required": ["source", "filter"]
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let mailbox = args
            .get("source")
            .and_then(Value::as_str)
            .and_then(Mailbox::parse)
            .ok_or_else(|| ToolError::invalid("source must be \"inbox\" or \"outbox\""))?;
        let filter_object = args
            .get("filter")
            .and_then(Value::as_object)
            .ok_or_else(|| ToolError::invalid("filter must be an object"))?;
        // Absent, null and empty-string fields do not constrain; every other field must be one
        // the table supports, since ignoring it would widen the delete.
        let supplied: Vec<(&String, &Value)> = filter_object
            .iter()
            .filter(|(_, v)| !v.is_null() && v.as_str() != Some(""))
            .collect();
        if supplied.is_empty() {
            return Err(ToolError::invalid(format!(
                "at least one filter field is required so a delete cannot empty the {}; supported: {}",
                mailbox.as_str(),
                mailbox.filter_fields().join(", ")
            )));
        }
        let unsupported: Vec<&str> = supplied
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !mailbox.filter_fields().contains(k))
            .collect();
        if !unsupported.is_empty() {
            return Err(ToolError::invalid(format!(
                "filter field(s) not supported for {}: {}; supported {} filters: {}",
                mailbox.as_str(),
                unsupported.join(", "),
                mailbox.as_str(),
                mailbox.filter_fields().join(", ")
            )));
        }
        let text = |key: &str| -> Result<Option<String>, ToolError> {
            match filter_object.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.is_empty() => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(ToolError::invalid(format!(
                    "filter.{key} must be a string, not {other}"
                ))),
            }
        };
        let before = match filter_object.get("before") {
            None | Some(Value::Null) => None,
            Some(value) => Some(value.as_i64().ok_or_else(|| {
                ToolError::invalid(format!(
                    "filter.before must be epoch milliseconds, not {value}"
                ))
            })?),
        };
        let filter = MessageFilter {
            status: text("status")?,
            from: text("from")?,
            source: text("source")?,
            before,
            thread_id: text("thread_id")?,
        };
        let deleted = cx.file.messages_delete(mailbox, &filter)?;
        Ok(Value::String(if deleted == 0 {
            format!("No {} messages matched the filter.", mailbox.as_str())
        } else {
            format!(
                "Deleted {} from the {}.",
                plural(deleted, "message"),
                mailbox.as_str()
            )
        }))
    }
}
