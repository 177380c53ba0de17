//! One fetched mail → at most one [`InboundMessage`], after the policy.
//!
//! The row is `from` `email:<sender address>` (a reply to `from` reaches the sender),
//! `sender_alias` the sender's display name, `thread_id` `email:<root Message-ID>` (the first
//! of `References`, else `In-Reply-To`, else its own), `content` the first text part (an
//! HTML-only mail is converted to readable text), `source_context` what a threaded reply needs
//! (`message_id`, `references`, `subject`, `from`, `reply_to`, `to`, `cc`, plus the mailbox,
//! `uid` and `uid_validity` it came from) and `original_message` the raw headers with a
//! summary of the MIME parts. Email has no groups: every mail is a direct message to the
//! agent's address, so `policy.dm`/`allow_from` (addresses, compared without case) decide and
//! `policy.groups` does not apply. Mail the agent sent itself and automatic mail
//! (`Auto-Submitted`, bounces) is dropped so two agents cannot answer each other forever.

use mail_parser::{Address, HeaderValue, Message, MessageParser, MimeHeaders};
use serde_json::{Map, Value, json};

use super::KIND;
use crate::config::{AdapterSettings, Sender};
use crate::message::InboundMessage;

/// Headers kept in `original_message`, at most this many bytes of them.
const MAX_RAW_HEADER_BYTES: usize = 64 * 1024;

/// Where the mail came from in the mailbox.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MailboxPosition<'a> {
    pub(crate) mailbox: &'a str,
    pub(crate) uid: u32,
    pub(crate) uid_validity: u32,
    /// `RFC822.SIZE`: the whole mail's size.
    pub(crate) size: u64,
    /// Whether only the first part of the mail was fetched (it was too large).
    pub(crate) truncated: bool,
}

/// An attachment to store before the row is written.
#[derive(Debug)]
pub(crate) struct PendingFile {
    /// Its index in the row's `attachments`.
    pub(crate) index: usize,
    pub(crate) filename: String,
    pub(crate) content_type: Option<String>,
    pub(crate) bytes: Vec<u8>,
}

/// A form this adapter sent, found by the Message-ID a reply answers.
#[derive(Debug, Clone)]
pub(crate) struct SentForm {
    pub(crate) outbox_id: String,
    pub(crate) form: crate::forms::Form,
}

/// What one mail amounts to.
#[derive(Debug)]
pub(crate) enum Converted {
    /// A row to store once its files are stored.
    Message(Box<InboundMessage>, Vec<PendingFile>),
    /// Nothing to store: the reason.
    Dropped(&'static str),
}

/// `<id>` as written in headers.
pub(crate) fn bracketed(id: &str) -> String {
    let id = id.trim().trim_start_matches('<').trim_end_matches('>');
    format!("<{id}>")
}

fn text_list(value: &HeaderValue<'_>) -> Vec<String> {
    match value {
        HeaderValue::Text(text) => vec![bracketed(text)],
        HeaderValue::TextList(list) => list.iter().map(|t| bracketed(t)).collect(),
        _ => Vec::new(),
    }
}

fn addresses(address: Option<&Address<'_>>) -> Vec<Value> {
    address
        .into_iter()
        .flat_map(|a| a.iter())
        .filter_map(|addr| {
            Some(json!({
                "address": addr.address()?.to_lowercase(),
                "name": addr.name(),
            }))
        })
        .collect()
}

fn first_address(address: Option<&Address<'_>>) -> Option<(String, Option<String>)> {
    let first = address?.first()?;
    Some((
        first.address()?.trim().to_lowercase(),
        first.name().map(str::to_owned),
    ))
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

fn content_type_of<'x>(part: &impl MimeHeaders<'x>) -> Option<String> {
    part.content_type().map(|ct| match ct.subtype() {
        Some(sub) => format!("{}/{}", ct.ctype(), sub),
        None => ct.ctype().to_owned(),
    })
}

/// The raw header block (up to the first empty line), capped.
fn raw_headers(raw: &[u8]) -> String {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .or_else(|| raw.windows(2).position(|w| w == b"\n\n"))
        .unwrap_or(raw.len());
    let head = raw.get(..end.min(MAX_RAW_HEADER_BYTES)).unwrap_or_default();
    String::from_utf8_lossy(head).into_owned()
}

fn is_automatic(message: &Message<'_>, from: &str) -> bool {
    let auto_submitted = message
        .header_raw("Auto-Submitted")
        .is_some_and(|v| !v.trim().eq_ignore_ascii_case("no"));
    let bounce = from.starts_with("mailer-daemon@") || from.starts_with("postmaster@");
    auto_submitted || bounce
}

/// Converts one fetched mail. `own_address` is the agent's; `sent_form` finds a form this
/// adapter sent by its Message-ID.
pub(crate) fn convert(
    raw: &[u8],
    position: MailboxPosition<'_>,
    settings: &AdapterSettings,
    own_address: &str,
    received_at: i64,
    sent_form: &dyn Fn(&str) -> Option<SentForm>,
) -> Converted {
    let Some(message) = MessageParser::default().parse(raw) else {
        return Converted::Dropped("not a parseable mail");
    };
    let Some((from, from_name)) =
        first_address(message.reply_to()).or_else(|| first_address(message.from()))
    else {
        return Converted::Dropped("mail without a sender address");
    };
    let (author, _) = first_address(message.from()).unwrap_or_else(|| (from.clone(), None));
    if author.eq_ignore_ascii_case(own_address) {
        return Converted::Dropped("mail the agent sent itself");
    }
    if is_automatic(&message, &author) {
        return Converted::Dropped("automatic mail (Auto-Submitted or a bounce)");
    }
    let sender = Sender {
        id: author.clone(),
        username: Some(author.clone()),
        in_group: false,
        mentions_bot: false,
    };
    if let Err(reason) = settings.policy.admits(&sender) {
        return Converted::Dropped(reason);
    }
    let own_id = message.message_id().map(bracketed);
    let in_reply_to = text_list(message.in_reply_to());
    let references = text_list(message.references());
    let subject = message.subject().unwrap_or_default().to_owned();
    let root = references
        .first()
        .or_else(|| in_reply_to.first())
        .cloned()
        .or_else(|| own_id.clone());
    let content = message
        .body_text(0)
        .map(|text| text.trim_end().to_owned())
        .unwrap_or_default();

    let (attachments, files) = attachments(&message, settings.max_attachment_size, position);

    let mut context = Map::new();
    context.insert("message_id".into(), json!(own_id));
    // A reply's References: this mail's own, then this mail (RFC 5322 §3.6.4).
    let mut thread_refs = if references.is_empty() {
        in_reply_to.clone()
    } else {
        references.clone()
    };
    if let Some(id) = &own_id {
        thread_refs.push(id.clone());
    }
    context.insert("references".into(), json!(thread_refs));
    context.insert("subject".into(), json!(subject));
    context.insert("from".into(), json!(author));
    context.insert("reply_to".into(), json!(from));
    context.insert("to".into(), Value::Array(addresses(message.to())));
    context.insert("cc".into(), Value::Array(addresses(message.cc())));
    context.insert("mailbox".into(), json!(position.mailbox));
    context.insert("uid".into(), json!(position.uid));
    context.insert("uid_validity".into(), json!(position.uid_validity));

    // A reply to a questionnaire this adapter sent carries its answers (MSG-46).
    let form = in_reply_to
        .iter()
        .chain(references.iter().rev())
        .find_map(|id| sent_form(id));
    let parent_id = form.map(|sent| answer_context(&mut context, sent, &content));
    let original = original_message(raw, &message, position);
    let message_id = match &own_id {
        Some(id) => format!("email:{id}"),
        None => format!(
            "email:{}:{}:{}",
            position.mailbox, position.uid_validity, position.uid
        ),
    };
    Converted::Message(
        Box::new(InboundMessage {
            message_id,
            source: KIND.into(),
            from: format!("email:{from}"),
            sender_alias: from_name.or(Some(author)),
            thread_id: root.map(|id| format!("email:{id}")),
            parent_id,
            content,
            content_type: None,
            attachments,
            meta: None,
            source_context: Value::Object(context),
            original_message: original,
            sent_at: message.date().map(|d| d.to_timestamp() * 1000),
            received_at,
        }),
        files,
    )
}

/// Adds a questionnaire reply's answers to `context` (MSG-46) and returns the form's outbox
/// row id, the answer row's parent.
fn answer_context(context: &mut Map<String, Value>, sent: SentForm, content: &str) -> String {
    let answers = super::forms::parse_answers(&sent.form, content);
    context.insert("form_id".into(), json!(sent.form.form_id));
    if let Some(first) = answers.first() {
        context.insert("question_id".into(), json!(first.question_id));
        context.insert("answer_id".into(), json!(first.answer_id));
        context.insert("answer_value".into(), first.answer_value.clone());
    }
    let all: Vec<Value> = answers
        .iter()
        .map(|a| {
            json!({
                "question_id": a.question_id,
                "answer_id": a.answer_id,
                "answer_value": a.answer_value,
            })
        })
        .collect();
    context.insert("answers".into(), Value::Array(all));
    sent.outbox_id
}

/// `original_message`: the raw headers and a summary of the MIME parts.
fn original_message(raw: &[u8], message: &Message<'_>, position: MailboxPosition<'_>) -> Value {
    let parts: Vec<Value> = message
        .parts
        .iter()
        .map(|part| {
            json!({
                "content_type": content_type_of(part),
                "filename": part.attachment_name(),
                "size_bytes": part.contents().len(),
            })
        })
        .collect();
    json!({
        "headers": raw_headers(raw),
        "parts": parts,
        "size_bytes": position.size,
        "truncated": position.truncated,
        "mailbox": position.mailbox,
        "uid": position.uid,
        "uid_validity": position.uid_validity,
    })
}

fn attachments(
    message: &Message<'_>,
    limit: u64,
    position: MailboxPosition<'_>,
) -> (Vec<Value>, Vec<PendingFile>) {
    let mut records = Vec::new();
    let mut files = Vec::new();
    for (n, part) in message.attachments().enumerate() {
        let filename = safe_filename(
            &part
                .attachment_name()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("attachment-{}", n + 1)),
        );
        let content_type = content_type_of(part);
        let bytes = part.contents();
        let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        let mut record = Map::new();
        record.insert("kind".into(), json!("attachment"));
        record.insert("filename".into(), json!(filename));
        record.insert("content_type".into(), json!(content_type));
        if position.truncated {
            record.insert("transfer".into(), json!("skipped"));
            record.insert(
                "reason".into(),
                json!(format!(
                    "the mail ({} bytes) is larger than limits.max_attachment_size ({limit} bytes) allows to fetch",
                    position.size
                )),
            );
        } else if size > limit {
            record.insert("size_bytes".into(), json!(size));
            record.insert("transfer".into(), json!("skipped"));
            record.insert(
                "reason".into(),
                json!(format!(
                    "larger than limits.max_attachment_size ({limit} bytes)"
                )),
            );
        } else {
            record.insert("size_bytes".into(), json!(size));
            files.push(PendingFile {
                index: records.len(),
                filename,
                content_type,
                bytes: bytes.to_vec(),
            });
        }
        records.push(Value::Object(record));
    }
    (records, files)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn settings(entry: Value) -> AdapterSettings {
        AdapterSettings::parse(KIND, &entry).unwrap()
    }

    const POSITION: MailboxPosition<'static> = MailboxPosition {
        mailbox: "INBOX",
        uid: 7,
        uid_validity: 42,
        size: 100,
        truncated: false,
    };

    #[test]
    fn an_html_only_mail_becomes_readable_text_and_a_reply_context() {
        let raw = b"From: Alice <Alice@Example.test>\r\nTo: agent@example.test\r\nSubject: Hello\r\nMessage-ID: <m1@example.test>\r\nReferences: <r0@example.test>\r\nIn-Reply-To: <r0@example.test>\r\nContent-Type: text/html\r\n\r\n<html><body><p>Hi <b>there</b></p><script>x()</script></body></html>\r\n";
        let Converted::Message(row, files) = convert(
            raw,
            POSITION,
            &settings(json!({})),
            "agent@example.test",
            1,
            &|_| None,
        ) else {
            panic!("dropped")
        };
        assert!(files.is_empty());
        assert!(row.content.contains("Hi") && row.content.contains("there"));
        assert!(!row.content.contains('<'), "{}", row.content);
        assert_eq!(row.from, "email:alice@example.test");
        assert_eq!(row.thread_id.as_deref(), Some("email:<r0@example.test>"));
        assert_eq!(row.source_context["message_id"], "<m1@example.test>");
        assert_eq!(
            row.source_context["references"],
            json!(["<r0@example.test>", "<m1@example.test>"])
        );
    }

    #[test]
    fn own_and_automatic_mail_is_dropped_and_the_allowlist_compares_addresses_without_case() {
        let mail = |from: &str, extra: &str| {
            format!("From: {from}\r\nTo: agent@example.test\r\nSubject: s\r\n{extra}\r\nbody\r\n")
        };
        let open = settings(json!({}));
        let listed =
            settings(json!({"policy": {"dm": "allowlist", "allow_from": ["Alice@example.test"]}}));
        let run = |raw: String, s: &AdapterSettings| {
            convert(
                raw.as_bytes(),
                POSITION,
                s,
                "agent@example.test",
                1,
                &|_| None,
            )
        };
        assert!(matches!(
            run(mail("agent@example.test", ""), &open),
            Converted::Dropped(_)
        ));
        assert!(matches!(
            run(
                mail("bob@example.test", "Auto-Submitted: auto-replied\r\n"),
                &open
            ),
            Converted::Dropped(_)
        ));
        assert!(matches!(
            run(mail("alice@EXAMPLE.test", ""), &listed),
            Converted::Message(..)
        ));
        assert!(matches!(
            run(mail("mallory@example.test", ""), &listed),
            Converted::Dropped(_)
        ));
    }
}
