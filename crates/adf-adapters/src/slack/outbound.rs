//! Sending: `chat.postMessage` texts (escaped as Slack's formatting rules ask) and forms as
//! Block Kit, one message per question, whose controls' `value`s map to answers in
//! `forms.json` in the state directory.

use serde_json::{Map, Value, json};

use super::api::Args;
use super::{
    KIND, MAX_BUTTONS, MAX_LABEL_CHARS, MAX_MESSAGE_CHARS, MAX_SELECT_OPTIONS, SlackAdapter,
};
use crate::error::AdapterError;
use crate::forms::Form;
use crate::message::{Delivered, OutboundMessage, parse_recipient};

/// Text for a message's `text` or a mrkdwn field: `&`, `<` and `>` escaped as Slack asks
/// (<https://api.slack.com/reference/surfaces/formatting#escaping>), except Slack's own
/// control sequences an agent may write on purpose (`<@U…>`, `<#C…>`, `<!here>`,
/// `<https://…|label>`, `<mailto:…>`).
fn escape(text: &str) -> String {
    const CONTROLS: &[&str] = &["@", "#", "!", "http://", "https://", "mailto:"];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '<'
            && let Some(end) = rest.find('>')
        {
            let inside = &rest[1..end];
            let target = inside.split('|').next().unwrap_or_default();
            if CONTROLS.iter().any(|p| target.starts_with(p))
                && !inside.contains('<')
                && !target.contains(char::is_whitespace)
            {
                out.push_str(&rest[..=end]);
                rest = &rest[end + 1..];
                continue;
            }
        }
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            other => out.push(other),
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

impl SlackAdapter {
    /// The channel and the thread a message goes to.
    fn target(&self, message: &OutboundMessage) -> Result<(String, Option<String>), AdapterError> {
        let (kind, id) = parse_recipient(&message.recipient).ok_or_else(|| {
            AdapterError::Invalid(format!(
                "'{}' is not a slack:<channel id> recipient",
                message.recipient
            ))
        })?;
        if kind != KIND {
            return Err(AdapterError::Invalid(format!(
                "the slack adapter cannot deliver to '{}'",
                message.recipient
            )));
        }
        let context = message.source_context.as_ref();
        let field = |name: &str| {
            context
                .and_then(|c| c.get(name))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let channel = field("channel").unwrap_or_else(|| id.to_owned());
        Ok((channel, field("thread_ts")))
    }

    /// `chat.postMessage`; returns the new message's `ts`.
    async fn post(
        &self,
        channel: &str,
        thread_ts: Option<&str>,
        text: &str,
        blocks: Option<Value>,
    ) -> Result<String, AdapterError> {
        let mut body = Map::new();
        body.insert("channel".into(), json!(channel));
        body.insert("text".into(), json!(text));
        if let Some(thread) = thread_ts {
            body.insert("thread_ts".into(), json!(thread));
        }
        if let Some(blocks) = blocks {
            body.insert("blocks".into(), blocks);
        }
        let body = Value::Object(body);
        let sent = self
            .api
            .call("chat.postMessage", &self.bot_token, Args::Json(Some(&body)))
            .await?;
        Ok(sent
            .get("ts")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned())
    }

    pub(super) async fn deliver_text(
        &self,
        message: &OutboundMessage,
    ) -> Result<Delivered, AdapterError> {
        let (channel, thread) = self.target(message)?;
        let chars: Vec<char> = message.content.chars().collect();
        if chars.is_empty() {
            return Err(AdapterError::Invalid(
                "Slack does not send an empty message".into(),
            ));
        }
        let mut ids = Vec::new();
        for chunk in chars.chunks(MAX_MESSAGE_CHARS) {
            let text: String = chunk.iter().collect();
            ids.push(
                self.post(&channel, thread.as_deref(), &escape(&text), None)
                    .await?,
            );
        }
        Ok(Delivered {
            platform_message_ids: ids,
            status_code: 200,
        })
    }

    pub(super) async fn deliver_form(
        &self,
        message: &OutboundMessage,
    ) -> Result<Delivered, AdapterError> {
        let form = Form::parse(&message.content, &message.outbox_id)?;
        let (channel, thread) = self.target(message)?;
        let mut ids = Vec::new();
        let heading: Vec<&str> = [form.title.as_deref(), form.description.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        if !heading.is_empty() {
            let text = escape(&heading.join("\n"));
            let blocks = json!([{ "type": "section", "text": { "type": "mrkdwn", "text": text } }]);
            ids.push(
                self.post(&channel, thread.as_deref(), &text, Some(blocks))
                    .await?,
            );
        }
        for (q, question) in form.questions.iter().enumerate() {
            let text = escape(&format!("{}. {}", q + 1, question.text));
            let mut blocks = vec![json!({
                "type": "section",
                "block_id": format!("adf_q{}", q + 1),
                "text": { "type": "mrkdwn", "text": text },
            })];
            if question.options.is_empty() {
                blocks.push(json!({
                    "type": "context",
                    "elements": [{ "type": "mrkdwn", "text": "Reply in this message's thread with your answer." }],
                }));
            } else {
                blocks.push(self.remember_controls(message, &form, q).await?);
            }
            let sent = self
                .post(
                    &channel,
                    thread.as_deref(),
                    &text,
                    Some(Value::Array(blocks)),
                )
                .await?;
            if question.options.is_empty() {
                // A reply in this message's thread is the answer to this question.
                let key = format!("reply:{channel}:{sent}");
                self.forms
                    .remember(|_| {
                        vec![(
                            key,
                            json!({
                                "outbox_id": message.outbox_id,
                                "form_id": form.form_id,
                                "question_id": question.id,
                            }),
                        )]
                    })
                    .await?;
            }
            ids.push(sent);
        }
        Ok(Delivered {
            platform_message_ids: ids,
            status_code: 200,
        })
    }

    /// Records question `q`'s choices and returns its `actions` block: buttons, or a static
    /// select past [`MAX_BUTTONS`] choices.
    async fn remember_controls(
        &self,
        message: &OutboundMessage,
        form: &Form,
        q: usize,
    ) -> Result<Value, AdapterError> {
        let Some(question) = form.questions.get(q) else {
            return Ok(Value::Null);
        };
        if question.options.len() > MAX_SELECT_OPTIONS {
            return Err(AdapterError::Invalid(format!(
                "form question {} has {} choices; Slack shows at most {MAX_SELECT_OPTIONS}",
                q + 1,
                question.options.len()
            )));
        }
        let as_select = question.options.len() > MAX_BUTTONS;
        let mut elements = Vec::new();
        self.forms
            .remember(|next| {
                let mut entries = Vec::new();
                for option in &question.options {
                    let key = format!("adf:{next}");
                    *next += 1;
                    let label: String = option.label.chars().take(MAX_LABEL_CHARS).collect();
                    let shown = json!({ "type": "plain_text", "text": label });
                    elements.push(if as_select {
                        json!({ "text": shown, "value": key })
                    } else {
                        json!({ "type": "button", "action_id": key, "text": shown, "value": key })
                    });
                    entries.push((
                        key,
                        json!({
                            "outbox_id": message.outbox_id,
                            "form_id": form.form_id,
                            "question_id": question.id,
                            "answer_id": option.id,
                            "answer_value": option.value,
                            "label": option.label,
                        }),
                    ));
                }
                entries
            })
            .await?;
        let block_id = format!("adf_a{}", q + 1);
        Ok(if as_select {
            json!({
                "type": "actions",
                "block_id": block_id,
                "elements": [{
                    "type": "static_select",
                    "action_id": "form_select",
                    "placeholder": { "type": "plain_text", "text": "Choose" },
                    "options": elements,
                }],
            })
        } else {
            json!({ "type": "actions", "block_id": block_id, "elements": elements })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outbound_text_escapes_what_slack_would_read_as_markup_but_keeps_mentions_and_links() {
        assert_eq!(
            escape("if a < b && c > d"),
            "if a &lt; b &amp;&amp; c &gt; d"
        );
        assert_eq!(
            escape("hi <@U0ANN>, see <https://example.org/x|the doc> or <!here>"),
            "hi <@U0ANN>, see <https://example.org/x|the doc> or <!here>"
        );
        assert_eq!(escape("<not a link> é"), "&lt;not a link&gt; é");
        assert_eq!(escape("<https://a b>"), "&lt;https://a b&gt;");
    }
}
