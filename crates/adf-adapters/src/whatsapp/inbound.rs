//! The webhook's inbound side: the signature check, and one Cloud API message → at most one
//! [`InboundMessage`], after the policy.
//!
//! A message becomes a row `from` `whatsapp:<wa_id>` (the sender's WhatsApp id, their phone
//! number in digits), `source_context` `{wa_id, message_id, phone_number_id}` (a reply quotes
//! the message), the raw message as `original_message`, the contact's profile name as
//! `sender_alias`. The Cloud API has no group conversations: every message is a direct one,
//! so `policy.dm` and `allow_from` decide and `policy.groups` has nothing to apply to.
//! A button or list reply to a form question (its id is in `forms.json`) is the answer row,
//! threaded by `parent_id` to the form's outbox row with `form_id`, `question_id`,
//! `answer_id` and `answer_value` in `source_context` (MSG-46); so is a text that quotes a
//! question asked in words. Media (image, document, audio, video, sticker) are marked for
//! download; the adapter fetches them within `limits.max_attachment_size`.

use hmac::{Hmac, KeyInit as _, Mac as _};
use serde_json::{Map, Value, json};
use sha2::Sha256;

use crate::config::{AdapterSettings, Sender};
use crate::message::InboundMessage;

/// The message types that carry a media object.
const MEDIA_TYPES: &[&str] = &["image", "document", "audio", "video", "sticker"];

/// The `transfer` of an attachment the adapter still has to download.
pub(crate) const PENDING_DOWNLOAD: &str = "pending";

/// Whether `header` (`X-Hub-Signature-256: sha256=<hex>`) is the HMAC-SHA256 of `body` under
/// the app secret; compared in constant time.
pub(crate) fn signature_valid(app_secret: &str, body: &[u8], header: Option<&str>) -> bool {
    let Some(hex) = header.and_then(|h| h.trim().strip_prefix("sha256=")) else {
        return false;
    };
    let Some(expected) = decode_hex(hex) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(app_secret.as_bytes()) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |b: u8| char::from(b).to_digit(16);
    text.as_bytes()
        .chunks_exact(2)
        .map(|pair| match pair {
            [high, low] => u8::try_from(digit(*high)? * 16 + digit(*low)?).ok(),
            _ => None,
        })
        .collect()
}

/// A form answer a button, a list row or a quoted question stands for (kept in the state
/// directory, keyed by the button's id or `reply:<question's message id>`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FormAnswer {
    pub(crate) outbox_id: String,
    pub(crate) form_id: String,
    pub(crate) question_id: String,
    /// `None` for a question answered in words.
    pub(crate) answer_id: Option<String>,
    pub(crate) answer_value: Value,
    pub(crate) label: String,
    /// A question asked in words with lettered choices: `(id, label, value)` of each, so a
    /// reply `b` or `Vegetables` is that choice.
    pub(crate) choices: Vec<(String, String, Value)>,
}

impl FormAnswer {
    /// The choice a worded reply names (its letter or its label), if any.
    fn choice_named(&self, reply: &str) -> Option<&(String, String, Value)> {
        let reply = reply.trim().trim_end_matches(')').trim();
        self.choices.iter().enumerate().find_map(|(i, choice)| {
            let letter = u8::try_from(i)
                .ok()
                .filter(|i| *i < 26)
                .map(|i| char::from(b'a' + i).to_string());
            (letter.is_some_and(|l| reply.eq_ignore_ascii_case(&l))
                || reply.eq_ignore_ascii_case(&choice.1))
            .then_some(choice)
        })
    }
}

/// What one message amounts to.
#[derive(Debug)]
pub(crate) enum Converted {
    /// A row to store.
    Message(Box<InboundMessage>),
    /// Nothing to store (type not handled, or the policy said no: the reason).
    Dropped(&'static str),
}

fn text_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

/// A file name safe as one path segment: letters, digits, `.`, `-` and `_`, no leading dot.
pub(crate) fn safe_filename(name: &str) -> String {
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

fn extension_of(mime: &str) -> &'static str {
    match mime.split(';').next().unwrap_or_default().trim() {
        "image/jpeg" => ".jpg",
        "image/png" => ".png",
        "image/webp" => ".webp",
        "audio/ogg" => ".ogg",
        "audio/mpeg" => ".mp3",
        "audio/mp4" => ".m4a",
        "video/mp4" => ".mp4",
        "video/3gpp" => ".3gp",
        "application/pdf" => ".pdf",
        "text/plain" => ".txt",
        _ => "",
    }
}

fn attachment(kind: &str, media: &Value) -> Value {
    let mime = media.get("mime_type").and_then(Value::as_str);
    let media_id = media.get("id").and_then(Value::as_str).unwrap_or_default();
    let filename = match media.get("filename").and_then(Value::as_str) {
        Some(name) => safe_filename(name),
        None => safe_filename(&format!(
            "{kind}-{media_id}{}",
            extension_of(mime.unwrap_or_default())
        )),
    };
    json!({
        "kind": kind,
        "filename": filename,
        "content_type": mime,
        "platform_file_id": media_id,
        "transfer": PENDING_DOWNLOAD,
    })
}

/// Converts one entry of a webhook's `messages[]`. `value` is the change it came in (for the
/// sender's contact and the business number); `answer` finds a form answer by its key.
pub(crate) fn convert(
    message: &Value,
    value: &Value,
    settings: &AdapterSettings,
    received_at: i64,
    answer: &dyn Fn(&str) -> Option<FormAnswer>,
) -> Converted {
    let Some(wa_id) = message.get("from").and_then(Value::as_str) else {
        return Converted::Dropped("message without a sender");
    };
    let Some(wamid) = message.get("id").and_then(Value::as_str) else {
        return Converted::Dropped("message without an id");
    };
    let sender = Sender {
        id: wa_id.to_owned(),
        // So `allow_from` may list the number as `+<digits>` as well as bare digits.
        username: Some(format!("+{wa_id}")),
        in_group: false,
        mentions_bot: false,
    };
    if let Err(reason) = settings.policy.admits(&sender) {
        return Converted::Dropped(reason);
    }
    let alias = value
        .get("contacts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("wa_id").and_then(Value::as_str) == Some(wa_id))
        .and_then(|c| text_at(c, "/profile/name"))
        .map(str::to_owned);
    let kind = message
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut context = Map::new();
    context.insert("wa_id".into(), json!(wa_id));
    context.insert("message_id".into(), json!(wamid));
    if let Some(number) = text_at(value, "/metadata/phone_number_id") {
        context.insert("phone_number_id".into(), json!(number));
    }
    let (content, attachments, mut form_answer) = match content_of(message, kind, answer) {
        Ok(parts) => parts,
        Err(reason) => return Converted::Dropped(reason),
    };
    // A quote of a question asked in words answers it (MSG-46).
    if form_answer.is_none()
        && let Some(quoted) = text_at(message, "/context/id")
        && let Some(question) = answer(&format!("reply:{quoted}"))
    {
        let mut found = question.clone();
        if let Some((id, label, value)) = question.choice_named(&content) {
            found.answer_id = Some(id.clone());
            found.answer_value = value.clone();
            found.label = label.clone();
        } else {
            found.answer_value = json!(content);
        }
        form_answer = Some(found);
    }
    let parent_id = form_answer.map(|found| {
        context.insert("form_id".into(), json!(found.form_id));
        context.insert("question_id".into(), json!(found.question_id));
        context.insert("answer_id".into(), json!(found.answer_id));
        context.insert("answer_value".into(), found.answer_value);
        found.outbox_id
    });
    Converted::Message(Box::new(InboundMessage {
        message_id: format!("whatsapp:{wamid}"),
        source: super::KIND.into(),
        from: format!("whatsapp:{wa_id}"),
        sender_alias: alias,
        thread_id: Some(format!("whatsapp:{wa_id}")),
        parent_id,
        content,
        content_type: None,
        attachments,
        meta: None,
        source_context: Value::Object(context),
        original_message: message.clone(),
        sent_at: message
            .get("timestamp")
            .and_then(|t| {
                t.as_str()
                    .and_then(|s| s.parse::<i64>().ok())
                    .or(t.as_i64())
            })
            .map(|s| s * 1000),
        received_at,
    }))
}

/// The text of a message of type `kind`, its attachments (marked for download) and, for a
/// button or list reply to a form, the answer it stands for; `Err` names why it is not stored.
fn content_of(
    message: &Value,
    kind: &str,
    answer: &dyn Fn(&str) -> Option<FormAnswer>,
) -> Result<(String, Vec<Value>, Option<FormAnswer>), &'static str> {
    let mut attachments = Vec::new();
    let mut form_answer = None;
    let content = match kind {
        "text" => text_at(message, "/text/body")
            .unwrap_or_default()
            .to_owned(),
        "interactive" => {
            let reply = message
                .pointer("/interactive/button_reply")
                .or_else(|| message.pointer("/interactive/list_reply"));
            let Some(reply) = reply else {
                return Err("interactive message of a kind not handled");
            };
            let id = reply.get("id").and_then(Value::as_str).unwrap_or_default();
            let title = text_at(reply, "/title").unwrap_or_default().to_owned();
            if let Some(found) = answer(id) {
                let label = found.label.clone();
                form_answer = Some(found);
                label
            } else {
                title
            }
        }
        // A template's quick-reply button.
        "button" => text_at(message, "/button/text")
            .unwrap_or_default()
            .to_owned(),
        "location" => {
            let place = |name: &str| message.pointer(&format!("/location/{name}")).cloned();
            let mut text = format!(
                "Location: {}, {}",
                place("latitude").unwrap_or(Value::Null),
                place("longitude").unwrap_or(Value::Null)
            );
            for name in ["name", "address"] {
                if let Some(part) = text_at(message, &format!("/location/{name}")) {
                    text.push_str(&format!(" — {part}"));
                }
            }
            text
        }
        media if MEDIA_TYPES.contains(&media) => {
            let object = message.get(media).cloned().unwrap_or(Value::Null);
            attachments.push(attachment(media, &object));
            text_at(&object, "/caption").unwrap_or_default().to_owned()
        }
        _ => return Err("message type not handled"),
    };
    Ok((content, attachments, form_answer))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_hmac_of_the_exact_body() {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"app-secret").unwrap();
        mac.update(b"{\"a\":1}");
        let hex: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let header = format!("sha256={hex}");
        assert!(signature_valid("app-secret", b"{\"a\":1}", Some(&header)));
        assert!(!signature_valid("app-secret", b"{\"a\":2}", Some(&header)));
        assert!(!signature_valid("other", b"{\"a\":1}", Some(&header)));
        assert!(!signature_valid("app-secret", b"{\"a\":1}", None));
        assert!(!signature_valid("app-secret", b"{\"a\":1}", Some(&hex)));
        assert!(!signature_valid(
            "app-secret",
            b"{\"a\":1}",
            Some("sha256=zz")
        ));
    }
}
