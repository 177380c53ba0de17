//! One Socket Mode payload → at most one [`InboundMessage`], after the policy.
//!
//! An Events API `message` (plain, `file_share` or `thread_broadcast`) or `app_mention`
//! becomes a row `from` `slack:<channel>`, `source_context` `{channel, ts, thread_ts?,
//! channel_type?}` (a reply goes into `thread_ts`: the message's thread in channels, and in a
//! DM only when the message was itself in a thread), the text unescaped (Slack writes `&`, `<`
//! and `>` as entities), the raw event callback as
//! `original_message` and, outside DMs, `meta.group` (§11.6; only the sender is known from one
//! event, so the scope is `message`). Its `message_id` is `slack:<channel>:<ts>`: the
//! `message` and the `app_mention` event of one message make one row. For `groups: mention`,
//! a reply in a thread the bot started counts as a mention. A `block_actions`
//! payload on a form control becomes the answer row, threaded by `parent_id` to the form's
//! outbox row, with `form_id`, `question_id`, `answer_id` and `answer_value` in
//! `source_context` (MSG-46); a thread reply under a question asked in words is that
//! question's answer. Files within `limits.max_attachment_size` are marked for download; a
//! larger one is recorded as skipped, with the reason.

use serde_json::{Map, Value, json};

use crate::config::{AdapterSettings, Sender};
use crate::message::InboundMessage;

/// §11.6's cap on `meta.group.participants`.
pub const MAX_GROUP_PARTICIPANTS: usize = 20;

/// The `transfer` of an attachment the adapter still has to download.
pub(crate) const PENDING_DOWNLOAD: &str = "pending";

/// Message subtypes that are someone writing to the conversation; every other subtype
/// (edits, deletions, joins, other bots' posts, …) is not a new message for the agent.
const HANDLED_SUBTYPES: &[&str] = &["file_share", "thread_broadcast"];

/// The bot, as `auth.test` described it.
#[derive(Debug, Clone)]
pub(crate) struct Bot {
    /// The bot user (`<@U…>` mentions name it).
    pub(crate) user_id: String,
    /// The bot id its own posts carry.
    pub(crate) bot_id: Option<String>,
    /// The bot user's name.
    pub(crate) name: Option<String>,
    /// The workspace.
    pub(crate) team_id: Option<String>,
}

pub(crate) use crate::form_memory::FormButton;

/// What one payload amounts to.
#[derive(Debug)]
pub(crate) enum Converted {
    /// A row to store.
    Message(Box<InboundMessage>),
    /// Nothing to store (kind not handled, the bot's own, or the policy said no: the reason).
    Dropped(&'static str),
}

fn text_of(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).map(str::to_owned)
}

/// `1767225600.000100` → ms since the epoch.
fn ts_ms(ts: &str) -> Option<i64> {
    let seconds: f64 = ts.parse().ok()?;
    // Whole milliseconds of a Slack timestamp fit an i64 for millions of years.
    #[allow(clippy::cast_possible_truncation)]
    Some((seconds * 1000.0) as i64)
}

fn group_meta(channel: &str, channel_type: Option<&str>, user: &str, alias: &str) -> Value {
    let participants: Vec<Value> = [json!({ "id": user, "name": alias })]
        .into_iter()
        .take(MAX_GROUP_PARTICIPANTS)
        .collect();
    json!({ "group": {
        "platform": "slack",
        "chat_id": channel,
        "channel_type": channel_type,
        "title": Value::Null,
        "participants": participants,
        "participant_count": participants.len(),
        "participants_truncated": false,
        "participants_scope": "message",
    }})
}

/// Slack channel ids start with `D` for a DM, `C` or `G` for channels and group DMs.
fn is_dm(channel: &str, channel_type: Option<&str>) -> bool {
    match channel_type {
        Some(kind) => kind == "im",
        None => channel.starts_with('D'),
    }
}

/// Message text as written: Slack escapes `&`, `<` and `>` in it (<https://api.slack.com/reference/surfaces/formatting#escaping>);
/// `<@U…>` mentions and `<url|label>` links stay as Slack writes them.
pub(crate) fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn mentions(text: &str, bot: &Bot) -> bool {
    text.contains(&format!("<@{}>", bot.user_id)) || text.contains(&format!("<@{}|", bot.user_id))
}

/// The display name an event carries for its sender, if any.
fn sender_names(event: &Value) -> (Option<String>, Option<String>) {
    let profile = event.get("user_profile");
    let username = text_of(profile.and_then(|p| p.get("name")));
    let display = ["display_name", "real_name"]
        .iter()
        .find_map(|field| text_of(profile.and_then(|p| p.get(*field))).filter(|s| !s.is_empty()));
    (username, display)
}

fn attachments(event: &Value, limit: u64) -> Vec<Value> {
    let mut out = Vec::new();
    for file in event
        .get("files")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let size = file.get("size").and_then(Value::as_u64);
        let url = file
            .get("url_private_download")
            .or_else(|| file.get("url_private"))
            .cloned()
            .unwrap_or(Value::Null);
        let mut record = Map::new();
        record.insert("kind".into(), json!("file"));
        record.insert(
            "filename".into(),
            json!(safe_filename(
                file.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("attachment")
            )),
        );
        record.insert(
            "content_type".into(),
            file.get("mimetype").cloned().unwrap_or(Value::Null),
        );
        record.insert("size_bytes".into(), json!(size));
        record.insert("platform_file_id".into(), json!(file.get("id")));
        record.insert("platform_url".into(), url.clone());
        if size.is_some_and(|s| s > limit) {
            record.insert("transfer".into(), json!("skipped"));
            record.insert(
                "reason".into(),
                json!(format!(
                    "larger than limits.max_attachment_size ({limit} bytes)"
                )),
            );
        } else if url.is_null() {
            record.insert("transfer".into(), json!("skipped"));
            record.insert("reason".into(), json!("Slack gave no download URL"));
        } else {
            record.insert("transfer".into(), json!(PENDING_DOWNLOAD));
        }
        out.push(Value::Object(record));
    }
    out
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

/// Converts one Events API callback (`payload` of an `events_api` envelope). `button` finds a
/// form answer by its key.
pub(crate) fn convert_event(
    payload: &Value,
    bot: &Bot,
    settings: &AdapterSettings,
    received_at: i64,
    button: &dyn Fn(&str) -> Option<FormButton>,
) -> Converted {
    let Some(event) = payload.get("event") else {
        return Converted::Dropped("event callback without an event");
    };
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind != "message" && kind != "app_mention" {
        return Converted::Dropped("event type not handled");
    }
    if let Some(subtype) = event.get("subtype").and_then(Value::as_str)
        && !HANDLED_SUBTYPES.contains(&subtype)
    {
        return Converted::Dropped("message subtype not handled");
    }
    if event.get("hidden").and_then(Value::as_bool) == Some(true) {
        return Converted::Dropped("hidden message");
    }
    let user = event
        .get("user")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let own_bot = event.get("bot_id").and_then(Value::as_str).is_some()
        && event.get("bot_id").and_then(Value::as_str) == bot.bot_id.as_deref();
    if user == bot.user_id || own_bot {
        return Converted::Dropped("the bot's own message");
    }
    if user.is_empty() {
        return Converted::Dropped("message without a user");
    }
    let (Some(channel), Some(ts)) = (
        event.get("channel").and_then(Value::as_str),
        event.get("ts").and_then(Value::as_str),
    ) else {
        return Converted::Dropped("message without a channel or ts");
    };
    let channel_type = event.get("channel_type").and_then(Value::as_str);
    let in_group = !is_dm(channel, channel_type);
    let raw_text = event
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let text = unescape(raw_text);
    let in_thread = event
        .get("thread_ts")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    // A thread reply under a form question asked in words is that question's answer (MSG-46).
    let answered = in_thread
        .filter(|thread| *thread != ts)
        .and_then(|thread| button(&format!("reply:{channel}:{thread}")));
    // Answering in a thread the bot started addresses the bot, as a mention does.
    let in_bot_thread = answered.is_some()
        || event.get("parent_user_id").and_then(Value::as_str) == Some(bot.user_id.as_str());
    let (username, display) = sender_names(event);
    let sender = Sender {
        id: user.to_owned(),
        username,
        in_group,
        mentions_bot: in_group
            && (kind == "app_mention" || mentions(raw_text, bot) || in_bot_thread),
    };
    if let Err(reason) = settings.policy.admits(&sender) {
        return Converted::Dropped(reason);
    }
    let mut context = Map::new();
    context.insert("channel".into(), json!(channel));
    context.insert("ts".into(), json!(ts));
    // Replies in channels go into the message's thread; in a DM only into a thread it is in.
    let reply_thread = in_thread.or(in_group.then_some(ts));
    if let Some(thread) = reply_thread {
        context.insert("thread_ts".into(), json!(thread));
    }
    if let Some(kind) = channel_type {
        context.insert("channel_type".into(), json!(kind));
    }
    if let Some(team) = payload.get("team_id").filter(|t| t.is_string()) {
        context.insert("team".into(), team.clone());
    }
    let parent_id = answered.map(|question| {
        context.insert("form_id".into(), json!(question.form_id));
        context.insert("question_id".into(), json!(question.question_id));
        context.insert("answer_id".into(), Value::Null);
        context.insert("answer_value".into(), json!(text));
        question.outbox_id
    });
    let alias = display.unwrap_or_else(|| user.to_owned());
    Converted::Message(Box::new(InboundMessage {
        message_id: format!("slack:{channel}:{ts}"),
        source: super::KIND.into(),
        from: format!("slack:{channel}"),
        sender_alias: Some(alias.clone()),
        thread_id: Some(match in_thread {
            Some(thread) => format!("slack:{channel}:{thread}"),
            None => format!("slack:{channel}"),
        }),
        parent_id,
        content: text,
        content_type: None,
        attachments: attachments(event, settings.max_attachment_size),
        meta: in_group.then(|| group_meta(channel, channel_type, user, &alias)),
        source_context: Value::Object(context),
        original_message: payload.clone(),
        sent_at: ts_ms(ts),
        received_at,
    }))
}

/// Converts one `block_actions` payload (of an `interactive` envelope): the first action on
/// a control of a form this adapter sent is the answer.
pub(crate) fn convert_action(
    payload: &Value,
    settings: &AdapterSettings,
    received_at: i64,
    button: &dyn Fn(&str) -> Option<FormButton>,
) -> Converted {
    if payload.get("type").and_then(Value::as_str) != Some("block_actions") {
        return Converted::Dropped("interactive payload type not handled");
    }
    let found = payload
        .get("actions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|action| {
            let key = action
                .get("value")
                .or_else(|| action.pointer("/selected_option/value"))
                .and_then(Value::as_str)?;
            Some((action, button(key)?))
        });
    let Some((action, answer)) = found else {
        return Converted::Dropped("an action on no form this adapter sent");
    };
    let channel = payload
        .pointer("/channel/id")
        .or_else(|| payload.pointer("/container/channel_id"))
        .and_then(Value::as_str);
    let Some(channel) = channel else {
        return Converted::Dropped("an action outside a conversation");
    };
    let user = payload
        .pointer("/user/id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let username = text_of(payload.pointer("/user/username"));
    let in_group = !is_dm(channel, None);
    let sender = Sender {
        id: user.to_owned(),
        username: username.clone(),
        in_group,
        // Pressing the bot's own control is addressing the bot.
        mentions_bot: true,
    };
    if let Err(reason) = settings.policy.admits(&sender) {
        return Converted::Dropped(reason);
    }
    let message_ts = payload
        .pointer("/container/message_ts")
        .or_else(|| payload.pointer("/message/ts"))
        .and_then(Value::as_str);
    let thread = payload
        .pointer("/message/thread_ts")
        .or_else(|| payload.pointer("/container/thread_ts"))
        .and_then(Value::as_str);
    let action_ts = action
        .get("action_ts")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let alias = username.unwrap_or_else(|| user.to_owned());
    let context = json!({
        "channel": channel,
        "ts": message_ts,
        "thread_ts": thread.or(message_ts),
        "form_id": answer.form_id,
        "question_id": answer.question_id,
        "answer_id": answer.answer_id,
        "answer_value": answer.answer_value,
    });
    Converted::Message(Box::new(InboundMessage {
        message_id: format!("slack:action:{channel}:{action_ts}:{user}"),
        source: super::KIND.into(),
        from: format!("slack:{channel}"),
        sender_alias: Some(alias.clone()),
        thread_id: Some(match thread {
            Some(thread) => format!("slack:{channel}:{thread}"),
            None => format!("slack:{channel}"),
        }),
        parent_id: Some(answer.outbox_id),
        content: answer.label,
        content_type: None,
        attachments: Vec::new(),
        meta: in_group.then(|| group_meta(channel, None, user, &alias)),
        source_context: context,
        original_message: payload.clone(),
        sent_at: ts_ms(action_ts),
        received_at,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn slack_text_is_unescaped_once() {
        assert_eq!(
            unescape("a &lt; b &amp;&amp; c &gt; d, &amp;lt; stays, <@U1>"),
            "a < b && c > d, &lt; stays, <@U1>"
        );
    }
}
