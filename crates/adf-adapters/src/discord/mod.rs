//! The Discord adapter: the Gateway in, the HTTP API out.
//!
//! Credential: `adf_identity` purpose [`CREDENTIAL_PURPOSE`] (the bot token). Config
//! (`adapters.discord.config`): `api_root` (default [`DEFAULT_API_ROOT`]; a test's server) and
//! `gateway_url` (a `ws(s)://` Gateway to connect to instead of the one `GET /gateway/bot`
//! names).
//!
//! Receiving (`gateway.rs`): `GET /users/@me` (a refused token stops here with a clear error),
//! then the Gateway with the session kept in `<agent>.adf.adapters/discord/session.json`, so
//! drops and restarts resume and the Gateway replays what was missed. Each `MESSAGE_CREATE`
//! and form `INTERACTION_CREATE` is converted (`inbound.rs`, policy first) and written through
//! the sink; message ids already stored are remembered in `seen.json` and skipped.
//! Attachments within `limits.max_attachment_size` are fetched from their CDN URL (cut off past
//! the limit) and stored under `imported/discord/` before the row is written.
//!
//! Sending: `POST /channels/{id}/messages` to the channel of the reply's `source_context`
//! (else the recipient's id), with a `message_reference` to its `message_id`; texts over
//! [`MAX_MESSAGE_CHARS`] go as several messages. A form is one message per question: up to
//! [`MAX_BUTTONS`] choices as buttons, more (up to [`MAX_SELECT_OPTIONS`]) as a string select,
//! still more listed in the text and answered in words;
//! the components' `custom_id`s (and select values) map, in `forms.json`, to the answer they
//! stand for; a click is acknowledged with a deferred update on the interaction callback.
//! Questions without choices ask for a reply in words.

mod gateway;
mod inbound;
mod rest;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::config::AdapterSettings;
use crate::error::AdapterError;
use crate::form_memory::FormMemory;
use crate::forms::{FORM_CONTENT_TYPE, Form};
use crate::message::{Delivered, OutboundMessage, parse_recipient};
use crate::platform::Building;
use crate::sink::{AdapterSink, Secret};
use crate::state_dir::StateDir;
use crate::{Adapter, BoxFuture, InboundMessage, Session, Sleeper};

pub use gateway::INTENTS;
use inbound::{Bot, Converted, FormButton};
pub use rest::{MAX_RATE_LIMIT_ATTEMPTS, MAX_RETRY_AFTER};

/// The adapter type.
pub const KIND: &str = "discord";

/// Where the bot token is read from (§5.13: `adapter:<type>:<KEY>`).
pub const CREDENTIAL_PURPOSE: &str = "adapter:discord:DISCORD_BOT_TOKEN";

/// Discord's HTTP API, version 10.
pub const DEFAULT_API_ROOT: &str = "https://discord.com/api/v10";

/// Discord's limit on one message's `content`.
pub const MAX_MESSAGE_CHARS: usize = 2000;

/// Choices shown as buttons (one action row holds five).
pub const MAX_BUTTONS: usize = 5;

/// Choices a string select holds.
pub const MAX_SELECT_OPTIONS: usize = 25;

/// Discord's limit on a button label or select option label.
const MAX_LABEL_CHARS: usize = 80;

/// Form answers remembered; older ones are forgotten first.
const MAX_FORM_ANSWERS: usize = 2000;

/// Message ids remembered as stored.
const MAX_SEEN: usize = 1000;

/// Where attachments land in the agent's files (§11.4 `imported/{source}/`).
const ATTACHMENT_DIR: &str = "imported/discord";
const SEEN_FILE: &str = "seen.json";

/// Interaction callback type `DEFERRED_UPDATE_MESSAGE`: acknowledged, message unchanged.
const DEFERRED_UPDATE_MESSAGE: u64 = 6;

/// The Discord adapter of one agent.
pub struct DiscordAdapter {
    settings: AdapterSettings,
    rest: rest::RestApi,
    sink: Arc<dyn AdapterSink>,
    sleeper: Arc<dyn Sleeper>,
    state: StateDir,
    file: String,
    gateway_override: Option<String>,
    bot: Mutex<Option<Bot>>,
    session: Mutex<Option<gateway::Resumable>>,
    seen: Mutex<Option<VecDeque<String>>>,
    // Serializes writes of forms.json (deliveries may run side by side).
    forms: FormMemory,
}

impl std::fmt::Debug for DiscordAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordAdapter")
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

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn id_of(value: &Value) -> String {
    match value.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn label(text: &str) -> String {
    text.chars().take(MAX_LABEL_CHARS).collect()
}

/// Builds the Discord adapter for one agent: the bot token is required.
pub(crate) async fn build(building: &Building<'_>) -> Result<Arc<dyn Adapter>, AdapterError> {
    let token = building.required_credential(CREDENTIAL_PURPOSE).await?;
    let adapter = DiscordAdapter::new(
        building.settings,
        token,
        building.sink.clone(),
        building.sleeper.clone(),
    )?;
    Ok(Arc::new(adapter))
}

impl DiscordAdapter {
    /// The adapter for `settings`, authenticating with `token`.
    pub fn new(
        settings: &AdapterSettings,
        token: Secret,
        sink: Arc<dyn AdapterSink>,
        sleeper: Arc<dyn Sleeper>,
    ) -> Result<Self, AdapterError> {
        let bad = |message: String| AdapterError::Config {
            adapter: KIND.into(),
            message,
        };
        let url_option = |name: &str, schemes: &[&str]| match settings.config.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(url))
                if schemes.iter().any(|s| url.starts_with(&format!("{s}://"))) =>
            {
                Ok(Some(url.clone()))
            }
            Some(other) => Err(bad(format!(
                "config.{name} is a {} URL, not {other}",
                schemes.join("/")
            ))),
        };
        let root = url_option("api_root", &["http", "https"])?
            .unwrap_or_else(|| DEFAULT_API_ROOT.to_owned());
        let gateway_override = url_option("gateway_url", &["ws", "wss"])?;
        let file = sink.agent_file().display().to_string();
        let rest = rest::RestApi::new(
            &root,
            token,
            sink.egress_policy(),
            sleeper.clone(),
            file.clone(),
        )?;
        let state = StateDir::new(&sink.agent_file(), KIND);
        Ok(DiscordAdapter {
            settings: settings.clone(),
            rest,
            forms: FormMemory::new(state.clone(), "answers", MAX_FORM_ANSWERS),
            state,
            sink,
            sleeper,
            file,
            gateway_override,
            bot: Mutex::new(None),
            session: Mutex::new(None),
            seen: Mutex::new(None),
        })
    }

    async fn bot(&self) -> Result<Bot, AdapterError> {
        if let Some(bot) = lock(&self.bot).clone() {
            return Ok(bot);
        }
        let me = self.rest.get("/users/@me").await?;
        let bot = Bot {
            id: id_of(&me),
            username: me
                .get("username")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        };
        *lock(&self.bot) = Some(bot.clone());
        Ok(bot)
    }

    /// Whether the platform message `id` was stored already (loading `seen.json` once).
    fn seen(&self, id: &str) -> Result<bool, AdapterError> {
        let mut seen = lock(&self.seen);
        if seen.is_none() {
            let stored = self.state.read_json(SEEN_FILE)?;
            let ids = stored
                .as_ref()
                .and_then(|s| s.get("ids"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            *seen = Some(ids);
        }
        Ok(seen.as_ref().is_some_and(|ids| ids.iter().any(|s| s == id)))
    }

    fn remember_seen(&self, id: &str) -> Result<(), AdapterError> {
        let document = {
            let mut seen = lock(&self.seen);
            let ids = seen.get_or_insert_with(VecDeque::new);
            ids.push_back(id.to_owned());
            while ids.len() > MAX_SEEN {
                ids.pop_front();
            }
            json!({ "ids": ids })
        };
        self.state.write_json(SEEN_FILE, &document)
    }

    fn form_button(&self, key: &str) -> Option<FormButton> {
        self.forms.button(key)
    }

    async fn handle_message(&self, message: &Value, bot: &Bot) -> Result<(), AdapterError> {
        let key = format!("message:{}", id_of(message));
        if self.seen(&key)? {
            tracing::debug!(adapter = KIND, key, "message stored already");
            return Ok(());
        }
        let button = |key: &str| self.form_button(key);
        match inbound::convert_message(message, bot, &self.settings, now_ms(), &button) {
            Converted::Dropped(reason) => {
                tracing::debug!(adapter = KIND, reason, "message not stored");
            }
            Converted::Message(mut message) => {
                self.download_attachments(&mut message.attachments).await;
                self.write(*message).await?;
                self.remember_seen(&key)?;
            }
            Converted::FormAnswer(..) => {}
        }
        Ok(())
    }

    async fn handle_interaction(&self, interaction: &Value) -> Result<(), AdapterError> {
        let key = format!("interaction:{}", id_of(interaction));
        if self.seen(&key)? {
            return Ok(());
        }
        let button = |key: &str| self.form_button(key);
        match inbound::convert_interaction(interaction, &self.settings, now_ms(), &button) {
            Converted::Dropped(reason) => {
                tracing::debug!(adapter = KIND, reason, "interaction not stored");
            }
            Converted::Message(message) => self.write(*message).await?,
            Converted::FormAnswer(message, id, token) => {
                self.write(*message).await?;
                self.remember_seen(&key)?;
                // The click stops spinning; a failure here loses nothing stored.
                let route = format!("/interactions/{id}/{token}/callback");
                if let Err(e) = self
                    .rest
                    .post(&route, &json!({ "type": DEFERRED_UPDATE_MESSAGE }))
                    .await
                {
                    tracing::warn!(adapter = KIND, error = %e, "interaction callback failed");
                }
            }
        }
        Ok(())
    }

    /// Downloads every attachment marked for it into `imported/discord/` through the sink;
    /// one that cannot be fetched is recorded `failed` with the reason (the message is kept).
    async fn download_attachments(&self, attachments: &mut [Value]) {
        for record in attachments.iter_mut() {
            let Some(object) = record.as_object_mut() else {
                continue;
            };
            if object.get("transfer").and_then(Value::as_str) != Some(inbound::PENDING_DOWNLOAD) {
                continue;
            }
            let (transfer, detail) = match self.fetch(object).await {
                Ok(path) => ("imported", ("path", json!(path))),
                Err(e) => ("failed", ("reason", json!(e.to_string()))),
            };
            object.insert("transfer".into(), json!(transfer));
            object.insert(detail.0.into(), detail.1);
        }
    }

    async fn fetch(&self, attachment: &Map<String, Value>) -> Result<String, AdapterError> {
        let url = attachment
            .get("url")
            .and_then(Value::as_str)
            .ok_or_else(|| AdapterError::Invalid("an attachment without a url".into()))?;
        let bytes = self
            .rest
            .download(url, self.settings.max_attachment_size)
            .await?;
        let filename = attachment
            .get("filename")
            .and_then(Value::as_str)
            .unwrap_or("attachment");
        let content_type = attachment
            .get("content_type")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.sink
            .write_file(ATTACHMENT_DIR, filename, bytes, content_type)
            .await
            .map_err(|e| AdapterError::Sink {
                adapter: KIND.into(),
                reason: e.to_string(),
            })
    }

    async fn write(&self, message: InboundMessage) -> Result<(), AdapterError> {
        self.sink
            .write_inbound(message)
            .await
            .map(|_| ())
            .map_err(|e| AdapterError::Sink {
                adapter: KIND.into(),
                reason: e.to_string(),
            })
    }

    /// The channel to post to and the message to reference (the first part of a reply).
    fn target(&self, message: &OutboundMessage) -> Result<(String, Option<String>), AdapterError> {
        let (kind, id) = parse_recipient(&message.recipient).ok_or_else(|| {
            AdapterError::Invalid(format!(
                "'{}' is not a discord:<channel id> recipient",
                message.recipient
            ))
        })?;
        if kind != KIND {
            return Err(AdapterError::Invalid(format!(
                "the discord adapter cannot deliver to '{}'",
                message.recipient
            )));
        }
        let context = message.source_context.as_ref();
        let field = |name: &str| {
            context.and_then(|c| c.get(name)).and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
        };
        let channel = field("channel_id").unwrap_or_else(|| id.to_owned());
        if !channel.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AdapterError::Invalid(format!(
                "a Discord channel id is a number (a snowflake), not '{channel}'"
            )));
        }
        Ok((channel, field("message_id")))
    }

    async fn send(
        &self,
        channel: &str,
        body: Map<String, Value>,
        reply_to: &mut Option<String>,
    ) -> Result<String, AdapterError> {
        let mut body = body;
        if let Some(message_id) = reply_to.take() {
            // Only the first part answers the message replied to; one deleted since is no
            // reason to fail the reply.
            body.insert(
                "message_reference".into(),
                json!({ "message_id": message_id, "fail_if_not_exists": false }),
            );
        }
        let sent = self
            .rest
            .post(
                &format!("/channels/{channel}/messages"),
                &Value::Object(body),
            )
            .await?;
        Ok(id_of(&sent))
    }

    async fn deliver_text(&self, message: &OutboundMessage) -> Result<Delivered, AdapterError> {
        let (channel, mut reply_to) = self.target(message)?;
        let chars: Vec<char> = message.content.chars().collect();
        if chars.iter().all(|c| c.is_whitespace()) {
            return Err(AdapterError::Invalid(
                "Discord does not send an empty message".into(),
            ));
        }
        let mut ids = Vec::new();
        for chunk in chars.chunks(MAX_MESSAGE_CHARS) {
            let mut body = Map::new();
            body.insert("content".into(), json!(chunk.iter().collect::<String>()));
            ids.push(self.send(&channel, body, &mut reply_to).await?);
        }
        Ok(Delivered {
            platform_message_ids: ids,
            status_code: 200,
        })
    }

    async fn deliver_form(&self, message: &OutboundMessage) -> Result<Delivered, AdapterError> {
        let form = Form::parse(&message.content, &message.outbox_id)?;
        let (channel, mut reply_to) = self.target(message)?;
        let mut ids = Vec::new();
        let heading: Vec<&str> = [form.title.as_deref(), form.description.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        if !heading.is_empty() {
            let mut body = Map::new();
            body.insert(
                "content".into(),
                json!(
                    heading
                        .join("\n")
                        .chars()
                        .take(MAX_MESSAGE_CHARS)
                        .collect::<String>()
                ),
            );
            ids.push(self.send(&channel, body, &mut reply_to).await?);
        }
        for (q, question) in form.questions.iter().enumerate() {
            let mut body = Map::new();
            // More choices than a select menu holds are listed and answered in words (MSG-45).
            let in_words =
                question.options.is_empty() || question.options.len() > MAX_SELECT_OPTIONS;
            let content = if in_words {
                let mut content = format!(
                    "{}. {}\n(Reply to this message with your answer.)",
                    q + 1,
                    question.text
                );
                for option in &question.options {
                    content.push_str("\n- ");
                    content.push_str(&option.label);
                }
                content
            } else {
                body.insert(
                    "components".into(),
                    json!([self.remember_components(message, &form, q).await?]),
                );
                format!("{}. {}", q + 1, question.text)
            };
            body.insert(
                "content".into(),
                json!(content.chars().take(MAX_MESSAGE_CHARS).collect::<String>()),
            );
            let sent = self.send(&channel, body, &mut reply_to).await?;
            if in_words {
                // A reply to this message is the answer to this question.
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

    /// Records question `q`'s choices and returns its action row: buttons for a few choices, a
    /// string select for more.
    async fn remember_components(
        &self,
        message: &OutboundMessage,
        form: &Form,
        q: usize,
    ) -> Result<Value, AdapterError> {
        let Some(question) = form.questions.get(q) else {
            return Ok(json!({ "type": 1, "components": [] }));
        };
        let as_buttons = question.options.len() <= MAX_BUTTONS;
        let mut components = Vec::new();
        let mut select_options = Vec::new();
        let mut select_id = String::new();
        self.forms
            .remember(|next| {
                let mut entries = Vec::new();
                if !as_buttons {
                    select_id = format!("adf:{next}");
                    *next += 1;
                }
                for option in &question.options {
                    let key = format!("adf:{next}");
                    *next += 1;
                    if as_buttons {
                        // Style 1: primary.
                        components.push(json!({
                            "type": 2, "style": 1, "label": label(&option.label), "custom_id": key,
                        }));
                    } else {
                        select_options.push(json!({ "label": label(&option.label), "value": key }));
                    }
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
        if !as_buttons {
            // Type 3: string select, one choice.
            components.push(json!({
                "type": 3, "custom_id": select_id, "options": select_options,
                "min_values": 1, "max_values": 1, "placeholder": "Choose an answer",
            }));
        }
        // Type 1: action row.
        Ok(json!({ "type": 1, "components": components }))
    }
}

impl Adapter for DiscordAdapter {
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
        limit: u32,
    ) -> BoxFuture<'a, Result<Value, AdapterError>> {
        Box::pin(async move {
            if chat_id.is_empty() || !chat_id.bytes().all(|b| b.is_ascii_digit()) {
                return Err(AdapterError::Invalid(format!(
                    "a Discord channel id is a number (a snowflake), not '{chat_id}'"
                )));
            }
            let channel = self.rest.get(&format!("/channels/{chat_id}")).await?;
            let history = self
                .rest
                .get(&format!("/channels/{chat_id}/messages?limit={limit}"))
                .await;
            let messages = match history {
                Ok(history) => Value::Array(
                    history
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|m| {
                            json!({
                                "id": m.get("id"),
                                "author": m.pointer("/author/username"),
                                "author_id": m.pointer("/author/id"),
                                "content": m.get("content"),
                                "timestamp": m.get("timestamp"),
                            })
                        })
                        .collect(),
                ),
                // Reading history needs the Read Message History permission; the channel's
                // metadata is still an answer without it.
                Err(e @ AdapterError::Platform { .. }) => {
                    json!({ "supported": false, "reason": e.to_string() })
                }
                Err(e) => return Err(e),
            };
            // A DM's members are its recipients and the bot.
            let member_count = channel
                .get("member_count")
                .and_then(Value::as_u64)
                .or_else(|| {
                    channel
                        .get("recipients")
                        .and_then(Value::as_array)
                        .map(|r| r.len() as u64 + 1)
                });
            Ok(json!({
                "supported": true,
                "adapter": KIND,
                "chat": {
                    "id": channel.get("id"),
                    "type": channel.get("type"),
                    "name": channel.get("name"),
                    "guild_id": channel.get("guild_id"),
                    "topic": channel.get("topic"),
                },
                "member_count": member_count,
                "messages": messages,
            }))
        })
    }

    fn test_credential(&self) -> BoxFuture<'_, Result<Value, AdapterError>> {
        Box::pin(async move {
            let bot = self.bot().await?;
            Ok(
                json!({ "ok": true, "adapter": KIND, "bot": { "id": bot.id, "username": bot.username } }),
            )
        })
    }
}
