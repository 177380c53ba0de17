//! The Telegram adapter: the Bot API with long polling.
//!
//! Credential: `adf_identity` purpose [`CREDENTIAL_PURPOSE`] (the bot token; §5.13's example).
//! Config (`adapters.telegram.config`): `api_root` (default [`DEFAULT_API_ROOT`]; a self-hosted
//! Bot API server, or a test's), `poll_timeout` (seconds a `getUpdates` long poll waits,
//! default [`DEFAULT_POLL_TIMEOUT_SECS`]).
//!
//! Receiving: `getMe` (a refused token stops here with a clear error), then `getUpdates` with
//! the persisted offset in a loop. Each update is converted (`inbound.rs`, policy first),
//! written through the sink, and only then the offset past it is written to
//! `<agent>.adf.adapters/telegram/offset.json`: a restart or a dropped connection asks again
//! from the first update not stored, and the platform forgets updates below the offset, so
//! none is lost and none is stored twice (a crash between the row and the offset file is
//! caught by the row's `message_id`, which the sink keeps unique). Attachments within
//! `limits.max_attachment_size` are fetched (`getFile`, then the file URL, cut off past the
//! limit) and stored under `imported/telegram/` before the row is written.
//!
//! Sending: `sendMessage` to the chat of the reply's `source_context` (else the recipient's
//! id), replying to its `message_id`, in its topic; texts over [`MAX_MESSAGE_CHARS`] go as
//! several messages. A form is one message per question, choices as an inline keyboard whose
//! buttons' `callback_data` map (in `forms.json` in the state directory) to the answer they
//! stand for; questions without choices ask for a reply in words.

mod api;
mod inbound;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::config::AdapterSettings;
use crate::error::AdapterError;
use crate::form_memory::FormMemory;
use crate::forms::{FORM_CONTENT_TYPE, Form};
use crate::message::{Delivered, OutboundMessage, parse_recipient};
use crate::platform::Building;
use crate::sink::{AdapterSink, Secret};
use crate::state_dir::StateDir;
use crate::{Adapter, BoxFuture, Session, Sleeper};

pub use api::{MAX_RATE_LIMIT_ATTEMPTS, MAX_RETRY_AFTER};
pub use inbound::MAX_GROUP_PARTICIPANTS;
use inbound::{Bot, Converted, FormButton};

/// The adapter type.
pub const KIND: &str = "telegram";

/// Where the bot token is read from (§5.13: `adapter:<type>:<KEY>`).
pub const CREDENTIAL_PURPOSE: &str = "adapter:telegram:TELEGRAM_BOT_TOKEN";

/// The public Bot API.
pub const DEFAULT_API_ROOT: &str = "https://api.telegram.org";

/// A long poll's wait when `config.poll_timeout` is absent.
pub const DEFAULT_POLL_TIMEOUT_SECS: u64 = 30;

/// The Bot API's limit on one message's text (characters after entity parsing).
pub const MAX_MESSAGE_CHARS: usize = 4096;

/// Form buttons remembered for answers; older ones are forgotten first.
const MAX_FORM_BUTTONS: usize = 2000;

const OFFSET_FILE: &str = "offset.json";
/// Where attachments land in the agent's files (§11.4 `imported/{source}/`).
const ATTACHMENT_DIR: &str = "imported/telegram";

/// The Telegram adapter of one agent.
pub struct TelegramAdapter {
    settings: AdapterSettings,
    api: api::BotApi,
    sink: Arc<dyn AdapterSink>,
    state: StateDir,
    poll_timeout: u64,
    bot: Mutex<Option<Bot>>,
    // Serializes writes of forms.json (deliveries may run side by side).
    forms: FormMemory,
}

impl std::fmt::Debug for TelegramAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramAdapter")
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

/// A chat id as text, the same whether it came as a number or a string.
fn chat_key(chat_id: &Value) -> String {
    match chat_id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Builds the Telegram adapter for one agent: the bot token is required.
pub(crate) async fn build(building: &Building<'_>) -> Result<Arc<dyn Adapter>, AdapterError> {
    let token = building.required_credential(CREDENTIAL_PURPOSE).await?;
    let adapter = TelegramAdapter::new(
        building.settings,
        token,
        building.sink.clone(),
        building.sleeper.clone(),
    )?;
    Ok(Arc::new(adapter))
}

impl TelegramAdapter {
    /// The adapter for `settings`, sending with `token`.
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
        let poll_timeout = match settings.config.get("poll_timeout") {
            None | Some(Value::Null) => DEFAULT_POLL_TIMEOUT_SECS,
            Some(v) => v
                .as_u64()
                .filter(|s| *s <= 600)
                .ok_or_else(|| bad("config.poll_timeout is 0 to 600 seconds".into()))?,
        };
        let file = sink.agent_file();
        let api = api::BotApi::new(
            &root,
            token,
            sink.egress_policy(),
            sleeper,
            file.display().to_string(),
        )?;
        Ok(TelegramAdapter {
            settings: settings.clone(),
            api,
            state: StateDir::new(&file, KIND),
            poll_timeout,
            sink,
            bot: Mutex::new(None),
            forms: FormMemory::new(StateDir::new(&file, KIND), "buttons", MAX_FORM_BUTTONS),
        })
    }

    async fn bot(&self) -> Result<Bot, AdapterError> {
        if let Some(bot) = lock(&self.bot).clone() {
            return Ok(bot);
        }
        let me = self.api.call("getMe", &json!({}), Duration::ZERO).await?;
        let bot = Bot {
            id: me.get("id").and_then(Value::as_i64).unwrap_or_default(),
            username: me
                .get("username")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        };
        *lock(&self.bot) = Some(bot.clone());
        Ok(bot)
    }

    fn stored_offset(&self) -> Result<Option<i64>, AdapterError> {
        Ok(self
            .state
            .read_json(OFFSET_FILE)?
            .and_then(|v| v.get("offset").and_then(Value::as_i64)))
    }

    fn form_button(&self, data: &str) -> Option<FormButton> {
        self.forms.button(data)
    }

    async fn handle_update(&self, update: &Value, bot: &Bot) -> Result<(), AdapterError> {
        let button = |data: &str| self.form_button(data);
        match inbound::convert(update, bot, &self.settings, now_ms(), &button) {
            Converted::Dropped(reason) => {
                tracing::debug!(adapter = KIND, reason, "update not stored");
            }
            Converted::Message(mut message) => {
                self.download_attachments(&mut message.attachments).await;
                self.write(*message).await?;
            }
            Converted::FormAnswer(message, query_id) => {
                self.write(*message).await?;
                // The button stops spinning; a failure here loses nothing stored.
                if let Err(e) = self
                    .api
                    .call(
                        "answerCallbackQuery",
                        &json!({ "callback_query_id": query_id }),
                        Duration::ZERO,
                    )
                    .await
                {
                    tracing::warn!(adapter = KIND, error = %e, "answerCallbackQuery failed");
                }
            }
        }
        Ok(())
    }

    /// Downloads every attachment marked for it into `imported/telegram/` through the sink;
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
        let file_id = attachment
            .get("platform_file_id")
            .and_then(Value::as_str)
            .ok_or_else(|| AdapterError::Invalid("an attachment without a file_id".into()))?;
        let file = self
            .api
            .call("getFile", &json!({ "file_id": file_id }), Duration::ZERO)
            .await?;
        let file_path = file
            .get("file_path")
            .and_then(Value::as_str)
            .ok_or_else(|| AdapterError::Invalid("getFile answered no file_path".into()))?;
        let bytes = self
            .api
            .download(file_path, self.settings.max_attachment_size)
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

    async fn write(&self, message: crate::InboundMessage) -> Result<(), AdapterError> {
        self.sink
            .write_inbound(message)
            .await
            .map(|_| ())
            .map_err(|e| AdapterError::Sink {
                adapter: KIND.into(),
                reason: e.to_string(),
            })
    }

    async fn receive(&self, session: &Session) -> Result<(), AdapterError> {
        let bot = self.bot().await?;
        session.running();
        let mut offset = self.stored_offset()?;
        loop {
            let mut params = json!({
                "timeout": self.poll_timeout,
                "allowed_updates": ["message", "callback_query"],
            });
            if let (Some(offset), Some(object)) = (offset, params.as_object_mut()) {
                object.insert("offset".into(), json!(offset));
            }
            let wait = Duration::from_secs(self.poll_timeout);
            let updates = tokio::select! {
                () = session.stop().stopped() => return Ok(()),
                updates = self.api.call("getUpdates", &params, wait) => updates?,
            };
            for update in updates.as_array().into_iter().flatten() {
                let Some(update_id) = update.get("update_id").and_then(Value::as_i64) else {
                    continue;
                };
                if offset.is_some_and(|o| update_id < o) {
                    continue;
                }
                self.handle_update(update, &bot).await?;
                offset = Some(update_id + 1);
                self.state
                    .write_json(OFFSET_FILE, &json!({ "offset": update_id + 1 }))?;
            }
        }
    }

    fn target(
        &self,
        message: &OutboundMessage,
    ) -> Result<(Value, Map<String, Value>), AdapterError> {
        let (kind, id) = parse_recipient(&message.recipient).ok_or_else(|| {
            AdapterError::Invalid(format!(
                "'{}' is not a telegram:<chat id> recipient",
                message.recipient
            ))
        })?;
        if kind != KIND {
            return Err(AdapterError::Invalid(format!(
                "the telegram adapter cannot deliver to '{}'",
                message.recipient
            )));
        }
        let context = message.source_context.as_ref();
        let chat_id = context
            .and_then(|c| c.get("chat_id"))
            .filter(|v| !v.is_null())
            .cloned()
            .unwrap_or_else(|| match id.parse::<i64>() {
                Ok(n) => json!(n),
                // `@channelusername` is a valid chat_id too.
                Err(_) => json!(id),
            });
        let mut extra = Map::new();
        if let Some(reply_to) = context
            .and_then(|c| c.get("message_id"))
            .filter(|v| !v.is_null())
        {
            extra.insert("reply_to_message_id".into(), reply_to.clone());
            extra.insert("allow_sending_without_reply".into(), json!(true));
        }
        if let Some(topic) = context
            .and_then(|c| c.get("message_thread_id"))
            .filter(|v| !v.is_null())
        {
            extra.insert("message_thread_id".into(), topic.clone());
        }
        Ok((chat_id, extra))
    }

    async fn send(
        &self,
        chat_id: &Value,
        text: &str,
        extra: &Map<String, Value>,
    ) -> Result<String, AdapterError> {
        let mut params = Map::new();
        params.insert("chat_id".into(), chat_id.clone());
        params.insert("text".into(), json!(text));
        params.extend(extra.clone());
        let sent = self
            .api
            .call("sendMessage", &Value::Object(params), Duration::ZERO)
            .await?;
        Ok(sent
            .get("message_id")
            .map(Value::to_string)
            .unwrap_or_default())
    }

    async fn deliver_text(&self, message: &OutboundMessage) -> Result<Delivered, AdapterError> {
        let (chat_id, mut extra) = self.target(message)?;
        let chars: Vec<char> = message.content.chars().collect();
        if chars.is_empty() {
            return Err(AdapterError::Invalid(
                "Telegram does not send an empty message".into(),
            ));
        }
        let mut ids = Vec::new();
        for chunk in chars.chunks(MAX_MESSAGE_CHARS) {
            let text: String = chunk.iter().collect();
            ids.push(self.send(&chat_id, &text, &extra).await?);
            // Only the first part answers the message replied to.
            extra.remove("reply_to_message_id");
        }
        Ok(Delivered {
            platform_message_ids: ids,
            status_code: 200,
        })
    }

    async fn deliver_form(&self, message: &OutboundMessage) -> Result<Delivered, AdapterError> {
        let form = Form::parse(&message.content, &message.outbox_id)?;
        let (chat_id, mut extra) = self.target(message)?;
        let mut ids = Vec::new();
        let heading: Vec<&str> = [form.title.as_deref(), form.description.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        if !heading.is_empty() {
            ids.push(self.send(&chat_id, &heading.join("\n"), &extra).await?);
            extra.remove("reply_to_message_id");
        }
        for (q, question) in form.questions.iter().enumerate() {
            let mut params = extra.clone();
            let text = if question.options.is_empty() {
                format!(
                    "{}. {}\n(Reply to this message with your answer.)",
                    q + 1,
                    question.text
                )
            } else {
                let rows = self.remember_buttons(message, &form, q).await?;
                params.insert("reply_markup".into(), json!({ "inline_keyboard": rows }));
                format!("{}. {}", q + 1, question.text)
            };
            let sent = self.send(&chat_id, &text, &params).await?;
            if question.options.is_empty() {
                // A reply to this message is the answer to this question.
                let key = format!("reply:{}:{sent}", chat_key(&chat_id));
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
            extra.remove("reply_to_message_id");
        }
        Ok(Delivered {
            platform_message_ids: ids,
            status_code: 200,
        })
    }

    /// Records question `q`'s buttons and returns the keyboard rows.
    async fn remember_buttons(
        &self,
        message: &OutboundMessage,
        form: &Form,
        q: usize,
    ) -> Result<Vec<Value>, AdapterError> {
        let Some(question) = form.questions.get(q) else {
            return Ok(Vec::new());
        };
        let mut rows = Vec::new();
        self.forms
            .remember(|next| {
                let mut entries = Vec::new();
                for option in &question.options {
                    let data = format!("adf:{next}");
                    *next += 1;
                    rows.push(json!([{ "text": option.label, "callback_data": data }]));
                    entries.push((
                        data,
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
        Ok(rows)
    }
}

impl Adapter for TelegramAdapter {
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
            let id = match chat_id.parse::<i64>() {
                Ok(n) => json!(n),
                Err(_) => json!(chat_id),
            };
            let chat = self
                .api
                .call("getChat", &json!({ "chat_id": id }), Duration::ZERO)
                .await?;
            let count = self
                .api
                .call(
                    "getChatMemberCount",
                    &json!({ "chat_id": id }),
                    Duration::ZERO,
                )
                .await?;
            let chat_type = chat.get("type").and_then(Value::as_str).unwrap_or_default();
            // The Bot API lists a group's administrators only, never its whole roster; a
            // private chat's one participant is the chat itself.
            let (members, scope) = if chat_type == "private" {
                (vec![json!({ "status": "member", "user": chat })], "chat")
            } else {
                let admins = self
                    .api
                    .call(
                        "getChatAdministrators",
                        &json!({ "chat_id": id }),
                        Duration::ZERO,
                    )
                    .await?;
                (admins.as_array().cloned().unwrap_or_default(), "admins")
            };
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            let participants: Vec<Value> = members
                .iter()
                .take(limit)
                .map(|member| {
                    let user = member.get("user").unwrap_or(&Value::Null);
                    let name = user
                        .get("username")
                        .or(user.get("first_name"))
                        .or(user.get("title"))
                        .cloned();
                    json!({ "id": user.get("id"), "name": name, "role": member.get("status") })
                })
                .collect();
            Ok(json!({
                "supported": true,
                "adapter": KIND,
                // The tools guide's fields (`chat_info`).
                "platform": KIND,
                "chat_id": chat_id,
                "chat_type": chat_type,
                "title": chat.get("title").or(chat.get("first_name")),
                "description": chat.get("description"),
                "participant_count": count,
                "participants_truncated": members.len() > participants.len(),
                "participants": participants,
                "participants_scope": scope,
                "fetched_at": now_ms(),
                "chat": {
                    "id": chat.get("id"),
                    "type": chat.get("type"),
                    "title": chat.get("title"),
                    "username": chat.get("username"),
                },
                "member_count": count,
                // The Bot API has no message history: `limit` has nothing to bound.
                "messages": { "supported": false, "reason": "the Telegram Bot API offers no chat history to bots" },
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
