//! One Gateway dispatch → at most one [`InboundMessage`], after the policy.
//!
//! A `MESSAGE_CREATE` becomes a row `from` `discord:<channel id>` (a reply to `from` reaches
//! the same channel), `source_context` `{channel_id, message_id, guild_id?}`, the dispatch's
//! `d` as `original_message` and, in a guild channel, `meta.group` (§11.6; only the author is
//! known from one message, so the scope is `message`). A message in a guild channel is a group
//! message: `groups: mention` admits it when it mentions the bot (`mentions`, a `<@id>` in the
//! text, or a reply to one of the bot's messages). Messages of bots (the bot itself included)
//! and webhooks are never stored. An `INTERACTION_CREATE` of a message component (a form's
//! button or select menu) becomes the answer row, threaded by `parent_id` to the form's outbox
//! row, with `form_id`, `question_id`, `answer_id` and `answer_value` in `source_context`
//! (MSG-46). Attachments within `limits.max_attachment_size` are marked for download; a larger
//! one is recorded as skipped, with the reason.

use serde_json::{Map, Value, json};

use crate::config::{AdapterSettings, Sender};
use crate::message::InboundMessage;

/// The bot, as `GET /users/@me` described it.
#[derive(Debug, Clone)]
pub(crate) struct Bot {
    pub(crate) id: String,
    pub(crate) username: String,
}

pub(crate) use crate::form_memory::FormButton;

/// The `transfer` of an attachment the adapter still has to download.
pub(crate) const PENDING_DOWNLOAD: &str = "pending";

/// Message types that are conversation: `DEFAULT` (0) and `REPLY` (19).
const CONVERSATION_TYPES: &[u64] = &[0, 19];

/// Interaction type `MESSAGE_COMPONENT`.
const MESSAGE_COMPONENT: u64 = 3;

/// Component type `STRING_SELECT`.
const STRING_SELECT: u64 = 3;

/// What one dispatch amounts to.
#[derive(Debug)]
pub(crate) enum Converted {
    /// A row to store.
    Message(Box<InboundMessage>),
    /// A row to store, and the interaction (`id`, `token`) to acknowledge.
    FormAnswer(Box<InboundMessage>, String, String),
    /// Nothing to store (kind not handled, or the policy said no: the reason).
    Dropped(&'static str),
}

fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The name shown for a user: `global_name`, else `username`.
fn alias_of(user: &Value) -> Option<String> {
    user.get("global_name")
        .and_then(Value::as_str)
        .or_else(|| user.get("username").and_then(Value::as_str))
        .map(str::to_owned)
}

fn mentions(message: &Value, bot: &Bot) -> bool {
    let listed = message
        .get("mentions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|user| text(user.get("id")).as_deref() == Some(bot.id.as_str()));
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let in_text =
        content.contains(&format!("<@{}>", bot.id)) || content.contains(&format!("<@!{}>", bot.id));
    let replies_to_bot =
        text(message.pointer("/referenced_message/author/id")).as_deref() == Some(bot.id.as_str());
    listed || in_text || replies_to_bot
}

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

fn attachments(message: &Value, limit: u64) -> Vec<Value> {
    let mut out = Vec::new();
    for item in message
        .get("attachments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let size = item.get("size").and_then(Value::as_u64);
        let mut record = Map::new();
        record.insert(
            "filename".into(),
            json!(safe_filename(
                item.get("filename")
                    .and_then(Value::as_str)
                    .unwrap_or("attachment")
            )),
        );
        record.insert(
            "content_type".into(),
            item.get("content_type").cloned().unwrap_or(Value::Null),
        );
        record.insert("size_bytes".into(), json!(size));
        record.insert("platform_file_id".into(), json!(text(item.get("id"))));
        record.insert(
            "url".into(),
            item.get("url").cloned().unwrap_or(Value::Null),
        );
        if size.is_some_and(|s| s > limit) {
            record.insert("transfer".into(), json!("skipped"));
            record.insert(
                "reason".into(),
                json!(format!(
                    "larger than limits.max_attachment_size ({limit} bytes)"
                )),
            );
        } else {
            record.insert("transfer".into(), json!(PENDING_DOWNLOAD));
        }
        out.push(Value::Object(record));
    }
    out
}

fn group_meta(channel_id: &str, guild_id: &str, alias: Option<&str>, sender_id: &str) -> Value {
    json!({ "group": {
        "platform": "discord",
        "chat_id": channel_id,
        "guild_id": guild_id,
        "title": Value::Null,
        "participants": [{ "id": sender_id, "name": alias }],
        "participant_count": 1,
        "participants_truncated": false,
        "participants_scope": "message",
    }})
}

/// An ISO 8601 timestamp (`2026-12-07T23:40:00.123000+00:00`) as ms since the epoch.
fn timestamp_ms(value: Option<&Value>) -> Option<i64> {
    let parsed = chrono::DateTime::parse_from_rfc3339(value?.as_str()?).ok()?;
    Some(parsed.timestamp_millis())
}

/// Converts a `MESSAGE_CREATE` payload. `button` finds a form answer by its key
/// (`reply:<channel id>:<message id>` for a question asked in words).
pub(crate) fn convert_message(
    message: &Value,
    bot: &Bot,
    settings: &AdapterSettings,
    received_at: i64,
    button: &dyn Fn(&str) -> Option<FormButton>,
) -> Converted {
    let Some(id) = text(message.get("id")) else {
        return Converted::Dropped("message without an id");
    };
    let Some(channel_id) = text(message.get("channel_id")) else {
        return Converted::Dropped("message without a channel");
    };
    let author = message.get("author").cloned().unwrap_or(Value::Null);
    let sender_id = text(author.get("id")).unwrap_or_default();
    if sender_id == bot.id
        || author.get("bot").and_then(Value::as_bool) == Some(true)
        || message.get("webhook_id").is_some_and(|w| !w.is_null())
    {
        return Converted::Dropped("a bot's or webhook's own message");
    }
    let kind = message.get("type").and_then(Value::as_u64).unwrap_or(0);
    if !CONVERSATION_TYPES.contains(&kind) {
        return Converted::Dropped("a system message, not conversation");
    }
    let guild_id = text(message.get("guild_id"));
    let in_group = guild_id.is_some();
    let sender = Sender {
        id: sender_id.clone(),
        username: author
            .get("username")
            .and_then(Value::as_str)
            .map(str::to_owned),
        in_group,
        mentions_bot: in_group && mentions(message, bot),
    };
    if let Err(reason) = settings.policy.admits(&sender) {
        return Converted::Dropped(reason);
    }
    let alias = alias_of(&author);
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut context = Map::new();
    context.insert("channel_id".into(), json!(channel_id));
    context.insert("message_id".into(), json!(id));
    if let Some(guild) = &guild_id {
        context.insert("guild_id".into(), json!(guild));
    }
    // A reply to a form question asked in words is that question's answer (MSG-46).
    let answered = text(message.pointer("/message_reference/message_id"))
        .and_then(|replied| button(&format!("reply:{channel_id}:{replied}")));
    let parent_id = answered.map(|question| {
        context.insert("form_id".into(), json!(question.form_id));
        context.insert("question_id".into(), json!(question.question_id));
        context.insert("answer_id".into(), Value::Null);
        context.insert("answer_value".into(), json!(content));
        question.outbox_id
    });
    Converted::Message(Box::new(InboundMessage {
        message_id: format!("discord:message:{id}"),
        source: super::KIND.into(),
        from: format!("discord:{channel_id}"),
        sender_alias: alias.clone(),
        thread_id: Some(format!("discord:{channel_id}")),
        parent_id,
        content,
        content_type: None,
        attachments: attachments(message, settings.max_attachment_size),
        meta: guild_id
            .as_deref()
            .map(|guild| group_meta(&channel_id, guild, alias.as_deref(), &sender_id)),
        source_context: Value::Object(context),
        original_message: message.clone(),
        sent_at: timestamp_ms(message.get("timestamp")),
        received_at,
    }))
}

/// Converts an `INTERACTION_CREATE` payload: a click on one of the bot's form components.
pub(crate) fn convert_interaction(
    interaction: &Value,
    settings: &AdapterSettings,
    received_at: i64,
    button: &dyn Fn(&str) -> Option<FormButton>,
) -> Converted {
    if interaction.get("type").and_then(Value::as_u64) != Some(MESSAGE_COMPONENT) {
        return Converted::Dropped("an interaction that is not a component click");
    }
    let (Some(id), Some(token)) = (text(interaction.get("id")), text(interaction.get("token")))
    else {
        return Converted::Dropped("an interaction without id or token");
    };
    let data = interaction.get("data").cloned().unwrap_or(Value::Null);
    let key = if data.get("component_type").and_then(Value::as_u64) == Some(STRING_SELECT) {
        text(data.pointer("/values/0"))
    } else {
        text(data.get("custom_id"))
    };
    let Some(button) = key.as_deref().and_then(button) else {
        return Converted::Dropped("a component of no form this adapter sent");
    };
    let Some(channel_id) = text(interaction.get("channel_id")) else {
        return Converted::Dropped("an interaction without a channel");
    };
    // In a guild the clicking user is `member.user`; in a DM it is `user`.
    let user = interaction
        .pointer("/member/user")
        .or_else(|| interaction.get("user"))
        .cloned()
        .unwrap_or(Value::Null);
    let sender_id = text(user.get("id")).unwrap_or_default();
    let guild_id = text(interaction.get("guild_id"));
    let sender = Sender {
        id: sender_id.clone(),
        username: user
            .get("username")
            .and_then(Value::as_str)
            .map(str::to_owned),
        in_group: guild_id.is_some(),
        // Clicking the bot's own component is addressing the bot.
        mentions_bot: true,
    };
    if let Err(reason) = settings.policy.admits(&sender) {
        return Converted::Dropped(reason);
    }
    let alias = alias_of(&user);
    let mut context = json!({
        "channel_id": channel_id,
        "message_id": text(interaction.pointer("/message/id")),
        "form_id": button.form_id,
        "question_id": button.question_id,
        "answer_id": button.answer_id,
        "answer_value": button.answer_value,
    });
    if let (Some(guild), Some(object)) = (&guild_id, context.as_object_mut()) {
        object.insert("guild_id".into(), json!(guild));
    }
    Converted::FormAnswer(
        Box::new(InboundMessage {
            message_id: format!("discord:interaction:{id}"),
            source: super::KIND.into(),
            from: format!("discord:{channel_id}"),
            sender_alias: alias.clone(),
            thread_id: Some(format!("discord:{channel_id}")),
            parent_id: Some(button.outbox_id),
            content: button.label,
            content_type: None,
            attachments: Vec::new(),
            meta: guild_id
                .as_deref()
                .map(|guild| group_meta(&channel_id, guild, alias.as_deref(), &sender_id)),
            source_context: context,
            original_message: interaction.clone(),
            sent_at: None,
            received_at,
        }),
        id,
        token,
    )
}
