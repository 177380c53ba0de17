//! The WhatsApp adapter: the WhatsApp Business Cloud API (Meta's Graph API).
//!
//! Credentials (`adf_identity` only, §8.2): [`ACCESS_TOKEN_PURPOSE`] (a system user's access
//! token, sent as `Authorization: Bearer`), [`APP_SECRET_PURPOSE`] (the app secret that signs
//! every webhook POST: `X-Hub-Signature-256`, HMAC-SHA256 of the raw body) and
//! [`VERIFY_TOKEN_PURPOSE`] (the owner's own string Meta echoes when the webhook is
//! registered). Config (`adapters.whatsapp.config`): `phone_number_id` (required: the business
//! number's Graph id), `api_root` (default [`DEFAULT_API_ROOT`]), `api_version` (default
//! [`DEFAULT_API_VERSION`]).
//!
//! Receiving: the Cloud API pushes to a webhook, the daemon's public route
//! `/agents/{handle}/adapters/whatsapp/webhook`, which hands each request to
//! [`Adapter::webhook`] while the adapter runs. `GET` is Meta's verification: `hub.challenge`
//! is echoed only when `hub.mode` is `subscribe` and `hub.verify_token` is the stored one. A
//! `POST` is checked against the signature before anything else (a bad one is 401 and nothing
//! is stored); then every `messages[]` entry for this phone number becomes at most one inbox
//! row (`inbound.rs`, policy first), attachments fetched first (`GET /<media id>` for the URL,
//! then the URL with the token, within `limits.max_attachment_size`) and stored under
//! `imported/whatsapp/`. Meta re-sends a webhook it did not see answered 200, so a message id
//! already stored is skipped: the last [`MAX_SEEN_IDS`] ids are kept in
//! `<agent>.adf.adapters/whatsapp/seen.json` (and the sink refuses a second row for one id).
//! `statuses[]` (sent, delivered, read, failed) are not recorded: the outbox row says
//! `delivered` once the Cloud API accepted the message, and a later `failed` status is only
//! logged. `run` checks the token (`GET /<phone_number_id>`), reports running and waits for
//! the stop: there is nothing to poll.
//!
//! Sending: `POST /<phone_number_id>/messages` to the reply's `source_context.wa_id` (else the
//! recipient's number), quoting its `message_id` (`context.message_id`); texts over
//! [`MAX_MESSAGE_CHARS`] go as several messages. A form is one message per question: up to 3
//! choices as reply buttons, up to 10 as a list, more (or none) as a question in words that the
//! person answers by quoting it; button and list ids map (in `forms.json`) to the answer they
//! stand for.

mod graph;
mod inbound;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::config::AdapterSettings;
use crate::error::AdapterError;
use crate::form_memory::FormMemory;
use crate::forms::{FORM_CONTENT_TYPE, Form, FormQuestion};
use crate::message::{Delivered, OutboundMessage, parse_recipient};
use crate::platform::Building;
use crate::sink::{AdapterSink, Secret};
use crate::state_dir::StateDir;
use crate::webhook::{WebhookRequest, WebhookResponse};
use crate::{Adapter, BoxFuture, Session, Sleeper};

pub use graph::{MAX_RATE_LIMIT_ATTEMPTS, MAX_RETRY_AFTER, RATE_LIMIT_CODES};
use inbound::{Converted, FormAnswer};

/// The adapter type.
pub const KIND: &str = "whatsapp";

/// The Graph API access token.
pub const ACCESS_TOKEN_PURPOSE: &str = "adapter:whatsapp:WHATSAPP_ACCESS_TOKEN";

/// The app secret that signs webhook POSTs.
pub const APP_SECRET_PURPOSE: &str = "adapter:whatsapp:WHATSAPP_APP_SECRET";

/// The string Meta's webhook verification must echo.
pub const VERIFY_TOKEN_PURPOSE: &str = "adapter:whatsapp:WHATSAPP_VERIFY_TOKEN";

/// The public Graph API.
pub const DEFAULT_API_ROOT: &str = "https://graph.facebook.com";

/// The Graph API version used when `config.api_version` is absent.
pub const DEFAULT_API_VERSION: &str = "v23.0";

/// The Cloud API's limit on a text message's body.
pub const MAX_MESSAGE_CHARS: usize = 4096;

/// Message ids remembered against webhook re-sends.
pub const MAX_SEEN_IDS: usize = 5000;

/// Reply buttons of one interactive message (Cloud API limit).
pub const MAX_BUTTONS: usize = 3;

/// Rows of one interactive list (Cloud API limit).
pub const MAX_LIST_ROWS: usize = 10;

/// Form answers remembered; older ones are forgotten first.
const MAX_FORM_ANSWERS: usize = 2000;
const BUTTON_TITLE_CHARS: usize = 20;
const ROW_TITLE_CHARS: usize = 24;
const ROW_DESCRIPTION_CHARS: usize = 72;
const INTERACTIVE_BODY_CHARS: usize = 1024;

const SEEN_FILE: &str = "seen.json";
/// Where attachments land in the agent's files (§11.4 `imported/{source}/`).
const ATTACHMENT_DIR: &str = "imported/whatsapp";

/// The WhatsApp adapter of one agent.
pub struct WhatsAppAdapter {
    settings: AdapterSettings,
    graph: graph::GraphApi,
    sink: Arc<dyn AdapterSink>,
    state: StateDir,
    phone_number_id: String,
    app_secret: Secret,
    verify_token: Secret,
    // One webhook POST at a time: the seen-ids file is read, extended and written whole.
    inbound: tokio::sync::Mutex<()>,
    // Serializes writes of forms.json (deliveries may run side by side).
    forms: FormMemory,
}

impl std::fmt::Debug for WhatsAppAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppAdapter")
            .field("phone_number_id", &self.phone_number_id)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

fn truncated(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Compares every byte whatever the first difference, so timing does not reveal a prefix.
fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// A phone number as the Cloud API's `to` takes it: digits only (`+1 631-555` → `1631555`).
fn wa_number(text: &str) -> Option<String> {
    let digits: String = text
        .chars()
        .filter(|c| !matches!(c, '+' | ' ' | '-' | '(' | ')' | '.'))
        .collect();
    (!digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())).then_some(digits)
}

/// Builds the WhatsApp adapter for one agent: the three credentials are required.
pub(crate) async fn build(building: &Building<'_>) -> Result<Arc<dyn Adapter>, AdapterError> {
    let token = building.required_credential(ACCESS_TOKEN_PURPOSE).await?;
    let app_secret = building.required_credential(APP_SECRET_PURPOSE).await?;
    let verify_token = building.required_credential(VERIFY_TOKEN_PURPOSE).await?;
    let adapter = WhatsAppAdapter::new(
        building.settings,
        Credentials {
            token,
            app_secret,
            verify_token,
        },
        building.sink.clone(),
        building.sleeper.clone(),
    )?;
    Ok(Arc::new(adapter))
}

/// The adapter's three credentials.
#[derive(Debug)]
pub struct Credentials {
    /// [`ACCESS_TOKEN_PURPOSE`].
    pub token: Secret,
    /// [`APP_SECRET_PURPOSE`].
    pub app_secret: Secret,
    /// [`VERIFY_TOKEN_PURPOSE`].
    pub verify_token: Secret,
}

impl WhatsAppAdapter {
    /// The adapter for `settings` with its credentials.
    pub fn new(
        settings: &AdapterSettings,
        credentials: Credentials,
        sink: Arc<dyn AdapterSink>,
        sleeper: Arc<dyn Sleeper>,
    ) -> Result<Self, AdapterError> {
        let bad = |message: String| AdapterError::Config {
            adapter: KIND.into(),
            message,
        };
        let root = match settings.config.get("api_root") {
            None | Some(Value::Null) => DEFAULT_API_ROOT.to_owned(),
            Some(Value::String(root))
                if root.starts_with("http://") || root.starts_with("https://") =>
            {
                root.clone()
            }
            Some(other) => {
                return Err(bad(format!(
                    "config.api_root is an http(s) URL, not {other}"
                )));
            }
        };
        let version = match settings.config.get("api_version") {
            None | Some(Value::Null) => DEFAULT_API_VERSION.to_owned(),
            Some(Value::String(v))
                if v.strip_prefix('v').is_some_and(|rest| {
                    !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit() || c == '.')
                }) =>
            {
                v.clone()
            }
            Some(other) => {
                return Err(bad(format!(
                    "config.api_version is a Graph API version such as \"{DEFAULT_API_VERSION}\", not {other}"
                )));
            }
        };
        let phone_number_id = match settings.config.get("phone_number_id") {
            Some(Value::String(id)) if !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()) => {
                id.clone()
            }
            Some(Value::Number(n)) if n.is_u64() => n.to_string(),
            None | Some(Value::Null) => {
                return Err(bad(
                    "config.phone_number_id is required: the Phone number ID Meta shows under WhatsApp > API Setup (not the phone number itself)".into(),
                ));
            }
            Some(other) => {
                return Err(bad(format!(
                    "config.phone_number_id is the numeric Phone number ID, not {other}"
                )));
            }
        };
        let file = sink.agent_file();
        let graph = graph::GraphApi::new(
            &root,
            &version,
            credentials.token,
            sink.egress_policy(),
            sleeper,
            file.display().to_string(),
        )?;
        Ok(WhatsAppAdapter {
            settings: settings.clone(),
            graph,
            state: StateDir::new(&file, KIND),
            sink,
            phone_number_id,
            app_secret: credentials.app_secret,
            verify_token: credentials.verify_token,
            inbound: tokio::sync::Mutex::new(()),
            forms: FormMemory::new(StateDir::new(&file, KIND), "answers", MAX_FORM_ANSWERS),
        })
    }

    fn sink_error(e: &impl std::fmt::Display) -> AdapterError {
        AdapterError::Sink {
            adapter: KIND.into(),
            reason: e.to_string(),
        }
    }

    /// `GET /<phone_number_id>`: the business number, or the refused token.
    async fn phone_number(&self) -> Result<Value, AdapterError> {
        self.graph
            .get(&format!(
                "{}?fields=id,display_phone_number,verified_name",
                self.phone_number_id
            ))
            .await
    }

    async fn receive(&self, session: &Session) -> Result<(), AdapterError> {
        self.phone_number().await?;
        session.running();
        // Messages arrive through `webhook`; nothing to poll.
        session.stop().stopped().await;
        Ok(())
    }

    // ----- inbound -----

    fn verify(&self, request: &WebhookRequest) -> WebhookResponse {
        let mode = request.query_value("hub.mode");
        let token = request.query_value("hub.verify_token").unwrap_or_default();
        let challenge = request.query_value("hub.challenge");
        match (mode, challenge) {
            (Some("subscribe"), Some(challenge))
                if constant_time_eq(token.as_bytes(), self.verify_token.expose().as_bytes()) =>
            {
                WebhookResponse::text(200, challenge)
            }
            _ => WebhookResponse::error(403, "webhook verification failed"),
        }
    }

    async fn receive_post(&self, request: &WebhookRequest) -> WebhookResponse {
        // The signature first: nothing of an unsigned body is read, let alone stored.
        if !inbound::signature_valid(
            self.app_secret.expose(),
            &request.body,
            request.header("x-hub-signature-256"),
        ) {
            return WebhookResponse::error(401, "the X-Hub-Signature-256 signature is not valid");
        }
        let Ok(payload) = serde_json::from_slice::<Value>(&request.body) else {
            return WebhookResponse::error(400, "the body is not JSON");
        };
        match self.handle_payload(&payload).await {
            Ok(()) => WebhookResponse::json(200, &json!({ "ok": true })),
            Err(e) => {
                tracing::warn!(adapter = KIND, error = %e, "webhook not stored; the platform will re-send it");
                // Meta re-sends what is not answered 200; the detail stays in the log.
                WebhookResponse::error(500, "the message could not be stored")
            }
        }
    }

    fn seen_ids(&self) -> Result<Vec<String>, AdapterError> {
        Ok(self
            .state
            .read_json(SEEN_FILE)?
            .and_then(|v| v.get("ids").cloned())
            .and_then(|ids| serde_json::from_value(ids).ok())
            .unwrap_or_default())
    }

    async fn handle_payload(&self, payload: &Value) -> Result<(), AdapterError> {
        if payload.get("object").and_then(Value::as_str) != Some("whatsapp_business_account") {
            tracing::debug!(adapter = KIND, "webhook of another object ignored");
            return Ok(());
        }
        let _one_at_a_time = self.inbound.lock().await;
        let mut seen = self.seen_ids()?;
        // Collected: an iterator with closures cannot be held across the awaits below.
        let changes: Vec<&Value> = payload
            .get("entry")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|entry| entry.get("changes").and_then(Value::as_array))
            .flatten()
            .collect();
        for change in changes {
            if change.get("field").and_then(Value::as_str) != Some("messages") {
                continue;
            }
            let value = change.get("value").cloned().unwrap_or(Value::Null);
            let number = value
                .pointer("/metadata/phone_number_id")
                .and_then(Value::as_str);
            if number != Some(self.phone_number_id.as_str()) {
                tracing::debug!(
                    adapter = KIND,
                    ?number,
                    "webhook for another phone number ignored"
                );
                continue;
            }
            for message in value
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(id) = message.get("id").and_then(Value::as_str) else {
                    continue;
                };
                if seen.iter().any(|s| s == id) {
                    continue;
                }
                self.handle_message(message, &value).await?;
                seen.push(id.to_owned());
                if seen.len() > MAX_SEEN_IDS {
                    let excess = seen.len() - MAX_SEEN_IDS;
                    seen.drain(..excess);
                }
                self.state.write_json(SEEN_FILE, &json!({ "ids": seen }))?;
            }
            for status in value
                .get("statuses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                // Not recorded (see the module docs): the outbox row was `delivered` when the
                // Cloud API accepted the message.
                let state = status.get("status").and_then(Value::as_str);
                if state == Some("failed") {
                    tracing::warn!(adapter = KIND, status = %status, "WhatsApp reports a message failed after it was accepted");
                } else {
                    tracing::debug!(adapter = KIND, ?state, "delivery status not recorded");
                }
            }
        }
        Ok(())
    }

    async fn handle_message(&self, message: &Value, value: &Value) -> Result<(), AdapterError> {
        let converted = {
            let answer = |key: &str| self.form_answer(key);
            inbound::convert(message, value, &self.settings, now_ms(), &answer)
        };
        match converted {
            Converted::Dropped(reason) => {
                tracing::debug!(adapter = KIND, reason, "message not stored");
                Ok(())
            }
            Converted::Message(mut message) => {
                self.download_attachments(&mut message.attachments).await;
                self.sink
                    .write_inbound(*message)
                    .await
                    .map(|_| ())
                    .map_err(|e| Self::sink_error(&e))
            }
        }
    }

    /// Downloads every attachment marked for it into `imported/whatsapp/`; one that cannot be
    /// fetched, or is larger than the limit, is recorded with the reason (the message is kept).
    async fn download_attachments(&self, attachments: &mut [Value]) {
        for record in attachments.iter_mut() {
            let Some(object) = record.as_object_mut() else {
                continue;
            };
            if object.get("transfer").and_then(Value::as_str) != Some(inbound::PENDING_DOWNLOAD) {
                continue;
            }
            match self.fetch(object).await {
                Ok(Fetched::Stored(path)) => {
                    object.insert("transfer".into(), json!("imported"));
                    object.insert("path".into(), json!(path));
                }
                Ok(Fetched::TooLarge) => {
                    object.insert("transfer".into(), json!("skipped"));
                    object.insert(
                        "reason".into(),
                        json!(format!(
                            "larger than limits.max_attachment_size ({} bytes)",
                            self.settings.max_attachment_size
                        )),
                    );
                }
                Err(e) => {
                    object.insert("transfer".into(), json!("failed"));
                    object.insert("reason".into(), json!(e.to_string()));
                }
            }
        }
    }

    async fn fetch(&self, attachment: &mut Map<String, Value>) -> Result<Fetched, AdapterError> {
        let media_id = attachment
            .get("platform_file_id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric()))
            .ok_or_else(|| AdapterError::Invalid("a media message without a media id".into()))?
            .to_owned();
        let media = self.graph.get(&media_id).await?;
        let size = media.get("file_size").and_then(|s| {
            s.as_u64()
                .or_else(|| s.as_str().and_then(|t| t.parse::<u64>().ok()))
        });
        attachment.insert("size_bytes".into(), json!(size));
        let limit = self.settings.max_attachment_size;
        if size.is_some_and(|s| s > limit) {
            return Ok(Fetched::TooLarge);
        }
        let url = media
            .get("url")
            .and_then(Value::as_str)
            .ok_or_else(|| AdapterError::Invalid("the media answer has no url".into()))?;
        let Some(bytes) = self.graph.download(url, limit).await? else {
            return Ok(Fetched::TooLarge);
        };
        attachment.insert("size_bytes".into(), json!(bytes.len()));
        let filename = attachment
            .get("filename")
            .and_then(Value::as_str)
            .unwrap_or("attachment")
            .to_owned();
        let content_type = attachment
            .get("content_type")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.sink
            .write_file(ATTACHMENT_DIR, &filename, bytes, content_type)
            .await
            .map(Fetched::Stored)
            .map_err(|e| Self::sink_error(&e))
    }

    // ----- outbound -----

    fn target(&self, message: &OutboundMessage) -> Result<(String, Option<Value>), AdapterError> {
        let (kind, id) = parse_recipient(&message.recipient).ok_or_else(|| {
            AdapterError::Invalid(format!(
                "'{}' is not a whatsapp:<phone number> recipient",
                message.recipient
            ))
        })?;
        if kind != KIND {
            return Err(AdapterError::Invalid(format!(
                "the whatsapp adapter cannot deliver to '{}'",
                message.recipient
            )));
        }
        let context = message.source_context.as_ref();
        let to = context
            .and_then(|c| c.get("wa_id"))
            .and_then(Value::as_str)
            .map_or(id, |wa_id| wa_id);
        let to = wa_number(to).ok_or_else(|| {
            AdapterError::Invalid(format!(
                "'{}' is not a phone number in international format (digits, an optional +)",
                message.recipient
            ))
        })?;
        let quoted = context
            .and_then(|c| c.get("message_id"))
            .filter(|v| v.is_string())
            .cloned();
        Ok((to, quoted))
    }

    /// Sends one message of `kind` (`text`, `interactive`) with its `object`; returns the
    /// platform's message id.
    async fn send(
        &self,
        to: &str,
        quoted: Option<&Value>,
        kind: &str,
        object: Value,
    ) -> Result<String, AdapterError> {
        let mut body = json!({
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": to,
            "type": kind,
        });
        if let Some(map) = body.as_object_mut() {
            map.insert(kind.to_owned(), object);
            if let Some(quoted) = quoted {
                map.insert("context".into(), json!({ "message_id": quoted }));
            }
        }
        let sent = self
            .graph
            .post(&format!("{}/messages", self.phone_number_id), &body)
            .await?;
        Ok(sent
            .pointer("/messages/0/id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned())
    }

    async fn send_text(
        &self,
        to: &str,
        quoted: Option<&Value>,
        text: &str,
    ) -> Result<String, AdapterError> {
        self.send(
            to,
            quoted,
            "text",
            json!({ "body": text, "preview_url": false }),
        )
        .await
    }

    async fn deliver_text(&self, message: &OutboundMessage) -> Result<Delivered, AdapterError> {
        let (to, mut quoted) = self.target(message)?;
        let chars: Vec<char> = message.content.chars().collect();
        if chars.iter().all(|c| c.is_whitespace()) {
            return Err(AdapterError::Invalid(
                "WhatsApp does not send an empty message".into(),
            ));
        }
        let mut ids = Vec::new();
        for chunk in chars.chunks(MAX_MESSAGE_CHARS) {
            let text: String = chunk.iter().collect();
            ids.push(self.send_text(&to, quoted.as_ref(), &text).await?);
            // Only the first part quotes the message replied to.
            quoted = None;
        }
        Ok(Delivered {
            platform_message_ids: ids,
            status_code: 200,
        })
    }

    async fn deliver_form(&self, message: &OutboundMessage) -> Result<Delivered, AdapterError> {
        let form = Form::parse(&message.content, &message.outbox_id)?;
        let (to, mut quoted) = self.target(message)?;
        let mut ids = Vec::new();
        let heading: Vec<&str> = [form.title.as_deref(), form.description.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        if !heading.is_empty() {
            ids.push(
                self.send_text(&to, quoted.as_ref(), &heading.join("\n"))
                    .await?,
            );
            quoted = None;
        }
        for (q, question) in form.questions.iter().enumerate() {
            let asked = format!("{}. {}", q + 1, question.text);
            let count = question.options.len();
            let sent = if (1..=MAX_LIST_ROWS).contains(&count) {
                let keys = self.remember_choices(message, &form, question).await?;
                let body = json!({ "text": truncated(&asked, INTERACTIVE_BODY_CHARS) });
                let interactive = if count <= MAX_BUTTONS {
                    let buttons: Vec<Value> = question
                        .options
                        .iter()
                        .zip(&keys)
                        .map(|(option, key)| {
                            json!({ "type": "reply", "reply": {
                                "id": key,
                                "title": truncated(&option.label, BUTTON_TITLE_CHARS),
                            }})
                        })
                        .collect();
                    json!({ "type": "button", "body": body, "action": { "buttons": buttons } })
                } else {
                    let rows: Vec<Value> = question
                        .options
                        .iter()
                        .zip(&keys)
                        .map(|(option, key)| {
                            let mut row = json!({
                                "id": key,
                                "title": truncated(&option.label, ROW_TITLE_CHARS),
                            });
                            if option.label.chars().count() > ROW_TITLE_CHARS
                                && let Some(row) = row.as_object_mut()
                            {
                                row.insert(
                                    "description".into(),
                                    json!(truncated(&option.label, ROW_DESCRIPTION_CHARS)),
                                );
                            }
                            row
                        })
                        .collect();
                    json!({ "type": "list", "body": body, "action": {
                        "button": "Choose",
                        "sections": [{ "title": truncated(&question.text, ROW_TITLE_CHARS), "rows": rows }],
                    }})
                };
                self.send(&to, quoted.as_ref(), "interactive", interactive)
                    .await?
            } else {
                let mut text = asked;
                if count == 0 {
                    text.push_str("\n(Reply to this message with your answer.)");
                } else {
                    for (a, option) in question.options.iter().enumerate() {
                        text.push_str(&format!("\n   {}) {}", letter(a), option.label));
                    }
                    text.push_str("\n(Reply to this message with the letter of your answer.)");
                }
                let sent = self.send_text(&to, quoted.as_ref(), &text).await?;
                self.remember_question(message, &form, question, &sent)
                    .await?;
                sent
            };
            ids.push(sent);
            quoted = None;
        }
        Ok(Delivered {
            platform_message_ids: ids,
            status_code: 200,
        })
    }

    fn form_answer(&self, key: &str) -> Option<FormAnswer> {
        let a = self.forms.recall(key)?;
        let text = |name: &str| a.get(name).and_then(Value::as_str).map(str::to_owned);
        let choices = a
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| {
                Some((
                    c.get("id")?.as_str()?.to_owned(),
                    c.get("label")?.as_str()?.to_owned(),
                    c.get("value").cloned().unwrap_or(Value::Null),
                ))
            })
            .collect();
        Some(FormAnswer {
            outbox_id: text("outbox_id")?,
            form_id: text("form_id")?,
            question_id: text("question_id")?,
            answer_id: text("answer_id"),
            answer_value: a.get("answer_value").cloned().unwrap_or(Value::Null),
            label: text("label").unwrap_or_default(),
            choices,
        })
    }

    /// Records a question's choices (buttons or list rows) and returns their ids, in order.
    async fn remember_choices(
        &self,
        message: &OutboundMessage,
        form: &Form,
        question: &FormQuestion,
    ) -> Result<Vec<String>, AdapterError> {
        let mut keys = Vec::new();
        self.forms
            .remember(|next| {
                let mut entries = Vec::new();
                for option in &question.options {
                    let key = format!("adf:{next}");
                    *next += 1;
                    keys.push(key.clone());
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
        Ok(keys)
    }

    /// Records a question asked in words: a reply quoting message `sent` answers it.
    async fn remember_question(
        &self,
        message: &OutboundMessage,
        form: &Form,
        question: &FormQuestion,
        sent: &str,
    ) -> Result<(), AdapterError> {
        let choices: Vec<Value> = question
            .options
            .iter()
            .map(|o| json!({ "id": o.id, "label": o.label, "value": o.value }))
            .collect();
        let key = format!("reply:{sent}");
        self.forms
            .remember(|_| {
                vec![(
                    key,
                    json!({
                        "outbox_id": message.outbox_id,
                        "form_id": form.form_id,
                        "question_id": question.id,
                        "choices": choices,
                    }),
                )]
            })
            .await
    }
}

/// What fetching one attachment came to.
enum Fetched {
    /// Stored at this path of the agent's files.
    Stored(String),
    /// Larger than `limits.max_attachment_size`: not downloaded (or cut off).
    TooLarge,
}

fn letter(index: usize) -> String {
    match u8::try_from(index).ok().filter(|i| *i < 26) {
        Some(i) => char::from(b'a' + i).to_string(),
        None => (index + 1).to_string(),
    }
}

impl Adapter for WhatsAppAdapter {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn run<'a>(&'a self, session: &'a Session) -> BoxFuture<'a, Result<(), AdapterError>> {
        Box::pin(self.receive(session))
    }

    fn deliver<'a>(
        &'a self,
        message: &'a OutboundMessage,
    ) -> BoxFuture<'a, Result<Delivered, AdapterError>> {
        Box::pin(async move {
            if message.content_type.as_deref() == Some(FORM_CONTENT_TYPE) {
                self.deliver_form(message).await
            } else {
                self.deliver_text(message).await
            }
        })
    }

    fn chat_info<'a>(
        &'a self,
        chat_id: &'a str,
        _limit: u32,
    ) -> BoxFuture<'a, Result<Value, AdapterError>> {
        Box::pin(async move {
            let number = wa_number(chat_id).ok_or_else(|| {
                AdapterError::Invalid(format!(
                    "'{chat_id}' is not a WhatsApp number (digits in international format)"
                ))
            })?;
            // The Cloud API looks nothing up about a person: what is known is the number.
            Ok(json!({
                "supported": true,
                "adapter": KIND,
                "chat": {
                    "id": number,
                    "type": "private",
                    "phone_number_id": self.phone_number_id,
                },
                "member_count": 2,
                "messages": { "supported": false, "reason": "the WhatsApp Cloud API offers no chat history" },
                "profile": { "supported": false, "reason": "the Cloud API gives a person's profile name only with their messages (the inbox rows' sender_alias)" },
                "groups": { "supported": false, "reason": "the WhatsApp Cloud API has no group chats" },
            }))
        })
    }

    fn test_credential(&self) -> BoxFuture<'_, Result<Value, AdapterError>> {
        Box::pin(async move {
            let number = self.phone_number().await?;
            Ok(json!({
                "ok": true,
                "adapter": KIND,
                "phone_number": {
                    "id": number.get("id"),
                    "display_phone_number": number.get("display_phone_number"),
                    "verified_name": number.get("verified_name"),
                },
            }))
        })
    }

    fn webhook<'a>(&'a self, request: &'a WebhookRequest) -> BoxFuture<'a, WebhookResponse> {
        Box::pin(async move {
            match request.method.as_str() {
                "GET" => self.verify(request),
                "POST" => self.receive_post(request).await,
                _ => WebhookResponse::error(405, "the webhook takes GET and POST"),
            }
        })
    }
}
