//! One Telegram update → at most one [`InboundMessage`], after the policy.
//!
//! A `message` becomes a row `from` `telegram:<chat id>` (a reply to `from` reaches the same
//! conversation), `source_context` `{chat_id, message_id, message_thread_id?}`, the raw update
//! as `original_message` and, in groups, `meta.group` (§11.6: platform, chat id, title,
//! participants capped at [`MAX_GROUP_PARTICIPANTS`]; only the sender is known from one
//! update, so the scope is `message`). A `callback_query` on a form button becomes the answer
//! row, threaded by `parent_id` to the form's outbox row, with `form_id`, `question_id`,
//! `answer_id` and `answer_value` in `source_context` (MSG-46). Attachments within
//! `limits.max_attachment_size` are marked for download (the adapter stores them under
//! `imported/telegram/`); a larger one is recorded as skipped, with the reason.

use serde_json::{Map, Value, json};

use crate::config::{AdapterSettings, Sender};
use crate::message::InboundMessage;

/// §11.6's cap on `meta.group.participants`.
pub const MAX_GROUP_PARTICIPANTS: usize = 20;

/// The message fields that carry a file, with the name each is recorded under.
const ATTACHMENT_FIELDS: &[&str] = &[
    "document",
    "photo",
    "audio",
    "video",
    "voice",
    "video_note",
    "animation",
    "sticker",
];

/// The bot, as `getMe` described it.
#[derive(Debug, Clone)]
pub(crate) struct Bot {
    pub(crate) id: i64,
    pub(crate) username: String,
}

pub(crate) use crate::form_memory::FormButton;

fn sender_of(user: Option<&Value>) -> (String, Option<String>, Option<String>) {
    let id = user
        .and_then(|u| u.get("id"))
        .map(|id| match id {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default();
    let username = user
        .and_then(|u| u.get("username"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let alias = username.as_ref().map(|u| format!("@{u}")).or_else(|| {
        user.and_then(|u| u.get("first_name"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    (id, username, alias)
}

fn is_group(chat: &Value) -> bool {
    matches!(
        chat.get("type").and_then(Value::as_str),
        Some("group" | "supergroup")
    )
}

fn mentions(message: &Value, bot: &Bot) -> bool {
    let replies_to_bot = message
        .pointer("/reply_to_message/from/id")
        .and_then(Value::as_i64)
        == Some(bot.id);
    let handle = format!("@{}", bot.username).to_lowercase();
    let text = message
        .get("text")
        .or_else(|| message.get("caption"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let by_entity = ["entities", "caption_entities"].iter().any(|field| {
        message
            .get(*field)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|entity| {
                entity.pointer("/user/id").and_then(Value::as_i64) == Some(bot.id)
                    || (entity.get("type").and_then(Value::as_str) == Some("mention")
                        && entity_text(text, entity).is_some_and(|t| t.to_lowercase() == handle))
            })
    });
    // Without entities (some clients, forwarded text), a plain `@name` still counts.
    replies_to_bot || by_entity || text.to_lowercase().contains(&handle)
}

/// The text an entity covers; offsets are UTF-16 code units (Bot API `MessageEntity`).
fn entity_text(text: &str, entity: &Value) -> Option<String> {
    let offset = usize::try_from(entity.get("offset")?.as_u64()?).ok()?;
    let length = usize::try_from(entity.get("length")?.as_u64()?).ok()?;
    let units: Vec<u16> = text.encode_utf16().collect();
    let slice = units.get(offset..offset.checked_add(length)?)?;
    String::from_utf16(slice).ok()
}

fn attachments(message: &Value, limit: u64) -> Vec<Value> {
    let mut out = Vec::new();
    for field in ATTACHMENT_FIELDS {
        let Some(item) = message.get(*field) else {
            continue;
        };
        // A photo is an array of sizes; the largest is the last.
        let item = match item {
            Value::Array(sizes) => match sizes.last() {
                Some(largest) => largest,
                None => continue,
            },
            other => other,
        };
        let size = item.get("file_size").and_then(Value::as_u64);
        let mut record = Map::new();
        record.insert("kind".into(), json!(field));
        record.insert(
            "filename".into(),
            json!(safe_filename(
                item.get("file_name")
                    .and_then(Value::as_str)
                    .unwrap_or(field)
            )),
        );
        record.insert(
            "content_type".into(),
            item.get("mime_type").cloned().unwrap_or(Value::Null),
        );
        record.insert("size_bytes".into(), json!(size));
        record.insert("platform_file_id".into(), json!(item.get("file_id")));
        if size.is_some_and(|s| s > limit) {
            record.insert("transfer".into(), json!("skipped"));
            record.insert(
                "reason".into(),
                json!(format!(
                    "larger than limits.max_attachment_size ({limit} bytes)"
                )),
            );
        } else {
            // The adapter downloads it into the agent's files before the row is written.
            record.insert("transfer".into(), json!(PENDING_DOWNLOAD));
        }
        out.push(Value::Object(record));
    }
    out
}

/// The `transfer` of an attachment the adapter still has to download.
pub(crate) const PENDING_DOWNLOAD: &str = "pending";

/// A file name safe as one path segment: letters, digits, `.`, `-` and `_`, no leading dot.
fn safe_filename(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    if cleaned.is_empty() {
        "attachment".to_owned()
    } else {
        cleaned.to_owned()
    }
}

fn chat_thread(chat_id: &str, message: &Value) -> String {
    match message.get("message_thread_id").and_then(Value::as_i64) {
        Some(topic) => format!("telegram:{chat_id}:{topic}"),
        None => format!("telegram:{chat_id}"),
    }
}

fn group_meta(chat: &Value, chat_id: &str, alias: Option<&str>, sender_id: &str) -> Value {
    let participants: Vec<Value> = [json!({ "id": sender_id, "name": alias })]
        .into_iter()
        .take(MAX_GROUP_PARTICIPANTS)
        .collect();
    json!({ "group": {
        "platform": "telegram",
        "chat_id": chat_id,
        "title": chat.get("title"),
        "participants": participants,
        "participant_count": participants.len(),
        "participants_truncated": false,
        "participants_scope": "message",
    }})
}

fn id_text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// What one update amounts to.
#[derive(Debug)]
pub(crate) enum Converted {
    /// A row to store.
    Message(Box<InboundMessage>),
    /// A row to store, and the callback query to answer.
    FormAnswer(Box<InboundMessage>, String),
    /// Nothing to store (kind not handled, or the policy said no: the reason).
    Dropped(&'static str),
}

/// Converts one update. `button` finds a form answer by its key: a button's `callback_data`,
/// or `reply:<chat id>:<message id>` for a question asked in words.
pub(crate) fn convert(
    update: &Value,
    bot: &Bot,
    settings: &AdapterSettings,
    received_at: i64,
    button: &dyn Fn(&str) -> Option<FormButton>,
) -> Converted {
    let update_id = update.get("update_id").and_then(Value::as_i64).unwrap_or(0);
    let message_id = format!("telegram:update:{update_id}");
    if let Some(message) = update.get("message") {
        return convert_message(
            update,
            message,
            message_id,
            bot,
            settings,
            received_at,
            button,
        );
    }
    if let Some(query) = update.get("callback_query") {
        return convert_answer(update, query, message_id, settings, received_at, button);
    }
    Converted::Dropped("update kind not handled")
}

fn convert_message(
    update: &Value,
    message: &Value,
    message_id: String,
    bot: &Bot,
    settings: &AdapterSettings,
    received_at: i64,
    button: &dyn Fn(&str) -> Option<FormButton>,
) -> Converted {
    let chat = message.get("chat").cloned().unwrap_or(Value::Null);
    let Some(chat_id) = id_text(chat.get("id")) else {
        return Converted::Dropped("message without a chat");
    };
    let (sender_id, username, alias) = sender_of(message.get("from"));
    let in_group = is_group(&chat);
    if !in_group && chat.get("type").and_then(Value::as_str) != Some("private") {
        return Converted::Dropped("channel posts are not conversations");
    }
    let sender = Sender {
        id: sender_id.clone(),
        username,
        in_group,
        mentions_bot: in_group && mentions(message, bot),
    };
    if let Err(reason) = settings.policy.admits(&sender) {
        return Converted::Dropped(reason);
    }
    let mut context = Map::new();
    context.insert(
        "chat_id".into(),
        chat.get("id").cloned().unwrap_or(Value::Null),
    );
    context.insert(
        "message_id".into(),
        message.get("message_id").cloned().unwrap_or(Value::Null),
    );
    if let Some(topic) = message.get("message_thread_id") {
        context.insert("message_thread_id".into(), topic.clone());
    }
    let content = message
        .get("text")
        .or_else(|| message.get("caption"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    // A reply to a form question asked in words is that question's answer (MSG-46).
    let answered = message
        .pointer("/reply_to_message/message_id")
        .and_then(Value::as_i64)
        .and_then(|replied| button(&format!("reply:{chat_id}:{replied}")));
    let parent_id = answered.map(|question| {
        context.insert("form_id".into(), json!(question.form_id));
        context.insert("question_id".into(), json!(question.question_id));
        context.insert("answer_id".into(), Value::Null);
        context.insert("answer_value".into(), json!(content));
        question.outbox_id
    });
    Converted::Message(Box::new(InboundMessage {
        message_id,
        source: super::KIND.into(),
        from: format!("telegram:{chat_id}"),
        sender_alias: alias.clone(),
        thread_id: Some(chat_thread(&chat_id, message)),
        parent_id,
        content,
        content_type: None,
        attachments: attachments(message, settings.max_attachment_size),
        meta: in_group.then(|| group_meta(&chat, &chat_id, alias.as_deref(), &sender_id)),
        source_context: Value::Object(context),
        original_message: update.clone(),
        sent_at: message
            .get("date")
            .and_then(Value::as_i64)
            .map(|s| s * 1000),
        received_at,
    }))
}

fn convert_answer(
    update: &Value,
    query: &Value,
    message_id: String,
    settings: &AdapterSettings,
    received_at: i64,
    button: &dyn Fn(&str) -> Option<FormButton>,
) -> Converted {
    let Some(data) = query.get("data").and_then(Value::as_str) else {
        return Converted::Dropped("callback query without data");
    };
    let Some(button) = button(data) else {
        return Converted::Dropped("callback data of no form this adapter sent");
    };
    let message = query.get("message").cloned().unwrap_or(Value::Null);
    let chat = message.get("chat").cloned().unwrap_or(Value::Null);
    let Some(chat_id) = id_text(chat.get("id")) else {
        return Converted::Dropped("callback query without a chat");
    };
    let (sender_id, username, alias) = sender_of(query.get("from"));
    let in_group = is_group(&chat);
    let sender = Sender {
        id: sender_id.clone(),
        username,
        in_group,
        // Pressing the bot's own button is addressing the bot.
        mentions_bot: true,
    };
    if let Err(reason) = settings.policy.admits(&sender) {
        return Converted::Dropped(reason);
    }
    let query_id = query
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let context = json!({
        "chat_id": chat.get("id"),
        "message_id": message.get("message_id"),
        "form_id": button.form_id,
        "question_id": button.question_id,
        "answer_id": button.answer_id,
        "answer_value": button.answer_value,
    });
    Converted::FormAnswer(
        Box::new(InboundMessage {
            message_id,
            source: super::KIND.into(),
            from: format!("telegram:{chat_id}"),
            sender_alias: alias.clone(),
            thread_id: Some(chat_thread(&chat_id, &message)),
            parent_id: Some(button.outbox_id),
            content: button.label,
            content_type: None,
            attachments: Vec::new(),
            meta: in_group.then(|| group_meta(&chat, &chat_id, alias.as_deref(), &sender_id)),
            source_context: context,
            original_message: update.clone(),
            sent_at: None,
            received_at,
        }),
        query_id,
    )
}
