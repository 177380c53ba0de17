//! The Slack adapter: Socket Mode in, the Web API out.
//!
//! Credentials: `adf_identity` purposes [`BOT_TOKEN_PURPOSE`] (the `xoxb-` bot token, for the
//! Web API) and [`APP_TOKEN_PURPOSE`] (the `xapp-` app-level token with
//! `connections:write`, for Socket Mode); both are required. Config
//! (`adapters.slack.config`): `api_root` (default [`DEFAULT_API_ROOT`]; a test's local server).
//!
//! Receiving: `auth.test` names the bot user (a refused token stops here with a clear error),
//! then `apps.connections.open` gives a WebSocket URL, opened through adf-egress. Every
//! envelope is acknowledged with its `envelope_id` once what it carries is stored (Slack
//! sends an envelope not acknowledged again, on this or the next connection): `hello` marks
//! the adapter running, `disconnect` reconnects at once (`link_disabled`: Socket Mode is off,
//! a permanent failure; `too_many_websockets`: after the host's backoff), `events_api` `message`/`app_mention` and `interactive`
//! `block_actions` are converted (`inbound.rs`, policy first) and written through the sink. A
//! dropped socket (or one that answers nothing, not even a ping, for twice
//! `QUIET_BEFORE_PING`) ends the run and the host restarts it with backoff. Event ids and message
//! keys (`slack:<channel>:<ts>`) stored or dropped are kept in
//! `<agent>.adf.adapters/slack/seen.json` (the newest [`MAX_SEEN`]), so a redelivery, the
//! second event of one message and a restart store nothing twice. The sender's display name
//! (`users.info`) and a channel's name (`conversations.info`, `meta.group.title`) are looked
//! up once and cached; without the scope they stay ids. Files within
//! `limits.max_attachment_size` are fetched from `url_private` with the bot token and stored
//! under `imported/slack/` before the row is written.
//!
//! Sending (`outbound.rs`): `chat.postMessage` to the channel of the reply's `source_context` (else the
//! recipient's id), in its `thread_ts`; texts over [`MAX_MESSAGE_CHARS`] go as several
//! messages. A form is one message per question in Block Kit: up to [`MAX_BUTTONS`] choices as
//! buttons, more as a static select, whose `value`s map (in `forms.json` in the state
//! directory) to the answer they stand for; a question without choices asks for a reply in
//! the message's thread. A 429 waits its `Retry-After`; `ok: false` fails the delivery with
//! Slack's `error` code.

mod api;
mod inbound;
mod outbound;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::{SinkExt, StreamExt};
use serde_json::{Map, Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::config::AdapterSettings;
use crate::error::AdapterError;
use crate::form_memory::FormMemory;
use crate::forms::FORM_CONTENT_TYPE;
use crate::message::{Delivered, InboundMessage, OutboundMessage};
use crate::platform::Building;
use crate::sink::{AdapterSink, Secret};
use crate::state_dir::StateDir;
use crate::{Adapter, BoxFuture, Session, Sleeper};

use api::{Args, Token, WebApi};
pub use api::{MAX_RATE_LIMIT_ATTEMPTS, MAX_RETRY_AFTER};
pub use inbound::MAX_GROUP_PARTICIPANTS;
use inbound::{Bot, Converted, FormButton};

/// The adapter type.
pub const KIND: &str = "slack";

/// Where the bot token (`xoxb-…`, Web API) is read from.
pub const BOT_TOKEN_PURPOSE: &str = "adapter:slack:SLACK_BOT_TOKEN";

/// Where the app-level token (`xapp-…`, Socket Mode) is read from.
pub const APP_TOKEN_PURPOSE: &str = "adapter:slack:SLACK_APP_TOKEN";

/// The public Web API.
pub const DEFAULT_API_ROOT: &str = "https://slack.com/api";

/// Slack truncates a message's `text` past 40,000 characters; longer texts are split.
pub const MAX_MESSAGE_CHARS: usize = 40_000;

/// Choices shown as buttons; a question with more gets a static select.
pub const MAX_BUTTONS: usize = 5;

/// A static select holds at most 100 options (Block Kit).
const MAX_SELECT_OPTIONS: usize = 100;

/// Event ids and message keys remembered for dedup; older ones are forgotten first.
pub const MAX_SEEN: usize = 5000;

/// User and channel names cached; the cache starts over when full.
const MAX_NAMES: usize = 1000;

/// Form answers remembered; older ones are forgotten first.
const MAX_FORM_BUTTONS: usize = 2000;

/// Block Kit's limit on a button's or option's text.
const MAX_LABEL_CHARS: usize = 75;

/// A Socket Mode connection quiet this long is pinged; quiet twice as long, it is given up.
const QUIET_BEFORE_PING: Duration = Duration::from_secs(60);

/// How long closing a Socket Mode connection may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

const SEEN_FILE: &str = "seen.json";
/// Where attachments land in the agent's files (§11.4 `imported/{source}/`).
const ATTACHMENT_DIR: &str = "imported/slack";

/// The Slack adapter of one agent.
pub struct SlackAdapter {
    settings: AdapterSettings,
    api: WebApi,
    bot_token: Token,
    app_token: Token,
    sink: Arc<dyn AdapterSink>,
    state: StateDir,
    bot: Mutex<Option<Bot>>,
    /// Names learnt from `users.info` and `conversations.info`, by id (`None`: asked, no
    /// answer — a missing scope is not asked again and again).
    names: Mutex<HashMap<String, Option<String>>>,
    // Serializes writes of forms.json (deliveries may run side by side).
    forms: FormMemory,
}

impl std::fmt::Debug for SlackAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackAdapter")
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

fn transport(reason: impl Into<String>) -> AdapterError {
    AdapterError::Transport {
        adapter: KIND.into(),
        reason: reason.into(),
    }
}

fn sink_error(e: impl std::fmt::Display) -> AdapterError {
    AdapterError::Sink {
        adapter: KIND.into(),
        reason: e.to_string(),
    }
}

/// Builds the Slack adapter for one agent: both tokens are required.
pub(crate) async fn build(building: &Building<'_>) -> Result<Arc<dyn Adapter>, AdapterError> {
    let bot_token = building.required_credential(BOT_TOKEN_PURPOSE).await?;
    let app_token = building.required_credential(APP_TOKEN_PURPOSE).await?;
    let adapter = SlackAdapter::new(
        building.settings,
        bot_token,
        app_token,
        building.sink.clone(),
        building.sleeper.clone(),
    )?;
    Ok(Arc::new(adapter))
}

/// What ended one Socket Mode connection without an error.
enum Ended {
    /// The host asked to stop.
    Stopped,
    /// Slack asked for a new connection (`disconnect`).
    Reconnect,
}

/// Event ids and message keys already handled, oldest first.
struct Seen {
    order: VecDeque<String>,
    keys: HashSet<String>,
}

impl Seen {
    fn load(state: &StateDir) -> Result<Self, AdapterError> {
        let mut seen = Seen {
            order: VecDeque::new(),
            keys: HashSet::new(),
        };
        let stored = state.read_json(SEEN_FILE)?;
        for key in stored
            .as_ref()
            .and_then(|s| s.get("keys"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            seen.insert(key);
        }
        Ok(seen)
    }

    fn contains(&self, key: &str) -> bool {
        self.keys.contains(key)
    }

    fn insert(&mut self, key: &str) {
        if self.keys.insert(key.to_owned()) {
            self.order.push_back(key.to_owned());
        }
        while self.order.len() > MAX_SEEN {
            if let Some(oldest) = self.order.pop_front() {
                self.keys.remove(&oldest);
            }
        }
    }

    fn save(&self, state: &StateDir) -> Result<(), AdapterError> {
        state.write_json(SEEN_FILE, &json!({ "keys": self.order }))
    }
}

impl SlackAdapter {
    /// The adapter for `settings`, calling the Web API with `bot_token` and opening Socket
    /// Mode with `app_token`.
    pub fn new(
        settings: &AdapterSettings,
        bot_token: Secret,
        app_token: Secret,
        sink: Arc<dyn AdapterSink>,
        sleeper: Arc<dyn Sleeper>,
    ) -> Result<Self, AdapterError> {
        let root = match settings.config.get("api_root") {
            None | Some(Value::Null) => DEFAULT_API_ROOT.to_owned(),
            Some(Value::String(root))
                if root.starts_with("http://") || root.starts_with("https://") =>
            {
                root.clone()
            }
            Some(other) => {
                return Err(AdapterError::Config {
                    adapter: KIND.into(),
                    message: format!("config.api_root is an http(s) URL, not {other}"),
                });
            }
        };
        let bot_token = Token {
            secret: bot_token,
            purpose: BOT_TOKEN_PURPOSE,
        };
        let app_token = Token {
            secret: app_token,
            purpose: APP_TOKEN_PURPOSE,
        };
        let file = sink.agent_file();
        let api = WebApi::new(
            &root,
            sink.egress_policy(),
            sleeper,
            file.display().to_string(),
            &[&bot_token, &app_token],
        )?;
        Ok(SlackAdapter {
            settings: settings.clone(),
            api,
            bot_token,
            app_token,
            state: StateDir::new(&file, KIND),
            sink,
            bot: Mutex::new(None),
            names: Mutex::new(HashMap::new()),
            forms: FormMemory::new(StateDir::new(&file, KIND), "buttons", MAX_FORM_BUTTONS),
        })
    }

    async fn bot(&self) -> Result<Bot, AdapterError> {
        if let Some(bot) = lock(&self.bot).clone() {
            return Ok(bot);
        }
        let me = self
            .api
            .call("auth.test", &self.bot_token, Args::Json(None))
            .await?;
        let text = |name: &str| me.get(name).and_then(Value::as_str).map(str::to_owned);
        let Some(user_id) = text("user_id") else {
            return Err(AdapterError::Platform {
                adapter: KIND.into(),
                status: 200,
                reason: "auth.test answered no user_id".into(),
            });
        };
        let bot = Bot {
            user_id,
            bot_id: text("bot_id"),
            name: text("user"),
            team_id: text("team_id"),
        };
        *lock(&self.bot) = Some(bot.clone());
        Ok(bot)
    }

    fn form_button(&self, key: &str) -> Option<FormButton> {
        self.forms.button(key)
    }

    async fn receive(&self, session: &Session) -> Result<(), AdapterError> {
        let bot = self.bot().await?;
        let mut seen = Seen::load(&self.state)?;
        loop {
            let open = self
                .api
                .call("apps.connections.open", &self.app_token, Args::Json(None));
            let opened = tokio::select! {
                () = session.stop().stopped() => return Ok(()),
                opened = open => opened?,
            };
            let url = opened
                .get("url")
                .and_then(Value::as_str)
                .ok_or_else(|| transport("apps.connections.open answered no url"))?;
            let mut socket = tokio::select! {
                () = session.stop().stopped() => return Ok(()),
                socket = self.api.connect_socket(url) => socket?,
            };
            let ended = self.pump(&mut socket, session, &bot, &mut seen).await;
            // Closing is a courtesy to the server (bounded: the peer may be gone); the socket
            // is dropped either way.
            let _closed = tokio::time::timeout(CLOSE_TIMEOUT, socket.close(None)).await;
            match ended? {
                Ended::Stopped => return Ok(()),
                Ended::Reconnect => tracing::debug!(adapter = KIND, "slack asked to reconnect"),
            }
        }
    }

    /// Reads one connection's envelopes until stop, `disconnect` or a drop.
    async fn pump(
        &self,
        socket: &mut adf_egress::socket::WebSocket,
        session: &Session,
        bot: &Bot,
        seen: &mut Seen,
    ) -> Result<Ended, AdapterError> {
        // A connection that died without a FIN shows nothing: after a quiet spell a ping must
        // get an answer (any frame) within another one, else the run ends and restarts.
        let mut pinged = false;
        loop {
            let frame = tokio::select! {
                () = session.stop().stopped() => return Ok(Ended::Stopped),
                frame = tokio::time::timeout(QUIET_BEFORE_PING, socket.next()) => frame,
            };
            let frame = match frame {
                Err(_quiet) if pinged => {
                    return Err(transport(format!(
                        "Slack sent nothing for {} s and did not answer a ping",
                        2 * QUIET_BEFORE_PING.as_secs()
                    )));
                }
                Err(_quiet) => {
                    pinged = true;
                    socket
                        .send(Message::Ping(Default::default()))
                        .await
                        .map_err(|e| transport(format!("cannot ping Slack: {e}")))?;
                    continue;
                }
                Ok(frame) => {
                    pinged = false;
                    frame
                }
            };
            let text = match frame {
                None => return Err(transport("the Socket Mode connection closed")),
                Some(Err(e)) => {
                    return Err(transport(format!(
                        "the Socket Mode connection failed: {}",
                        self.api.scrub(&e.to_string())
                    )));
                }
                Some(Ok(Message::Close(_))) => {
                    return Err(transport("Slack closed the Socket Mode connection"));
                }
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(_)) => continue,
            };
            let Ok(envelope) = serde_json::from_str::<Value>(text.as_str()) else {
                tracing::warn!(adapter = KIND, "a Socket Mode frame that is not JSON");
                continue;
            };
            match envelope.get("type").and_then(Value::as_str) {
                Some("hello") => session.running(),
                Some("disconnect") => {
                    return match envelope.get("reason").and_then(Value::as_str) {
                        Some("link_disabled") => Err(AdapterError::Config {
                            adapter: KIND.into(),
                            message: "Socket Mode is turned off for this Slack app (disconnect: link_disabled); turn it on in the app's settings".into(),
                        }),
                        // The connection's time is up: a new one, at once.
                        Some("warning" | "refresh_requested") | None => Ok(Ended::Reconnect),
                        // `too_many_websockets` and anything new: reconnecting at once could
                        // stampede, so the host's backoff paces it.
                        Some(other) => Err(transport(format!(
                            "Slack closed the Socket Mode connection ({other})"
                        ))),
                    };
                }
                kind => {
                    let payload = envelope.get("payload").unwrap_or(&Value::Null);
                    match kind {
                        Some("events_api") => self.handle_event(payload, bot, seen).await?,
                        Some("interactive") => self.handle_action(payload, seen).await?,
                        _ => tracing::debug!(adapter = KIND, ?kind, "envelope not handled"),
                    }
                    if let Some(id) = envelope.get("envelope_id").and_then(Value::as_str) {
                        let ack = json!({ "envelope_id": id }).to_string();
                        socket.send(Message::Text(ack.into())).await.map_err(|e| {
                            transport(format!("cannot acknowledge an envelope: {e}"))
                        })?;
                    }
                }
            }
        }
    }

    async fn handle_event(
        &self,
        payload: &Value,
        bot: &Bot,
        seen: &mut Seen,
    ) -> Result<(), AdapterError> {
        let event_key = payload
            .get("event_id")
            .and_then(Value::as_str)
            .map(|id| format!("event:{id}"));
        if event_key.as_deref().is_some_and(|key| seen.contains(key)) {
            return Ok(());
        }
        let button = |key: &str| self.form_button(key);
        let converted = inbound::convert_event(payload, bot, &self.settings, now_ms(), &button);
        self.store(converted, event_key, seen).await
    }

    async fn handle_action(&self, payload: &Value, seen: &mut Seen) -> Result<(), AdapterError> {
        let button = |key: &str| self.form_button(key);
        let converted = inbound::convert_action(payload, &self.settings, now_ms(), &button);
        self.store(converted, None, seen).await
    }

    /// Writes a converted message once (by its `message_id`), then remembers what was seen.
    async fn store(
        &self,
        converted: Converted,
        event_key: Option<String>,
        seen: &mut Seen,
    ) -> Result<(), AdapterError> {
        match converted {
            Converted::Dropped(reason) => {
                tracing::debug!(adapter = KIND, reason, "event not stored");
            }
            Converted::Message(message) if seen.contains(&message.message_id) => {
                tracing::debug!(adapter = KIND, id = %message.message_id, "already stored");
            }
            Converted::Message(mut message) => {
                self.add_names(&mut message).await;
                self.download_attachments(&mut message.attachments).await;
                let key = message.message_id.clone();
                self.write(*message).await?;
                seen.insert(&key);
            }
        }
        if let Some(key) = event_key {
            seen.insert(&key);
        }
        seen.save(&self.state)
    }

    /// The name of user or channel `id` (`users.info` / `conversations.info`, cached), or
    /// `None` when Slack does not say (a missing scope, an unknown id): names are a courtesy
    /// and never stop a message.
    async fn name_of(&self, id: &str, of_user: bool) -> Option<String> {
        if let Some(known) = lock(&self.names).get(id) {
            return known.clone();
        }
        let (method, argument) = if of_user {
            ("users.info", "user")
        } else {
            ("conversations.info", "channel")
        };
        let name = match self
            .api
            .call(
                method,
                &self.bot_token,
                Args::Query(&[(argument, id.to_owned())]),
            )
            .await
        {
            Ok(answer) => {
                let candidates: &[&str] = if of_user {
                    &[
                        "/user/profile/display_name",
                        "/user/profile/real_name",
                        "/user/real_name",
                        "/user/name",
                    ]
                } else {
                    &["/channel/name"]
                };
                candidates
                    .iter()
                    .filter_map(|pointer| answer.pointer(pointer).and_then(Value::as_str))
                    .find(|name| !name.is_empty())
                    .map(str::to_owned)
            }
            Err(e) => {
                tracing::debug!(adapter = KIND, method, error = %e, "no name");
                None
            }
        };
        let mut names = lock(&self.names);
        if names.len() >= MAX_NAMES {
            names.clear();
        }
        names.insert(id.to_owned(), name.clone());
        name
    }

    /// Puts the sender's display name (when the event carried only the id) and the channel's
    /// name (`meta.group.title`) on a message.
    async fn add_names(&self, message: &mut InboundMessage) {
        let user = message
            .original_message
            .pointer("/event/user")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(user) = user
            && message.sender_alias.as_deref() == Some(user.as_str())
            && let Some(name) = self.name_of(&user, true).await
        {
            if let Some(participant) = message
                .meta
                .as_mut()
                .and_then(|m| m.pointer_mut("/group/participants/0/name"))
            {
                *participant = json!(name);
            }
            message.sender_alias = Some(name);
        }
        let Some(group) = message.meta.as_mut().and_then(|m| m.get_mut("group")) else {
            return;
        };
        let chat = group
            .get("chat_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let (Some(chat), Some(group)) = (chat, group.as_object_mut()) {
            let title = self.name_of(&chat, false).await;
            group.insert("title".into(), json!(title));
        }
    }

    /// Downloads every attachment marked for it into `imported/slack/` through the sink; one
    /// that cannot be fetched is recorded `failed` with the reason (the message is kept).
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
            .get("platform_url")
            .and_then(Value::as_str)
            .ok_or_else(|| AdapterError::Invalid("an attachment without a URL".into()))?;
        let bytes = self
            .api
            .download(url, &self.bot_token, self.settings.max_attachment_size)
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
            .map_err(sink_error)
    }

    async fn write(&self, message: InboundMessage) -> Result<(), AdapterError> {
        self.sink
            .write_inbound(message)
            .await
            .map(|_| ())
            .map_err(sink_error)
    }

    async fn chat_info_of(&self, chat_id: &str, limit: u32) -> Result<Value, AdapterError> {
        let info = self
            .api
            .call(
                "conversations.info",
                &self.bot_token,
                Args::Query(&[
                    ("channel", chat_id.to_owned()),
                    ("include_num_members", "true".to_owned()),
                ]),
            )
            .await?;
        let channel = info.get("channel").cloned().unwrap_or(Value::Null);
        let members = self
            .api
            .call(
                "conversations.members",
                &self.bot_token,
                Args::Query(&[
                    ("channel", chat_id.to_owned()),
                    ("limit", limit.to_string()),
                ]),
            )
            .await?;
        let mut ids: Vec<Value> = members
            .get("members")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let more = members
            .pointer("/response_metadata/next_cursor")
            .and_then(Value::as_str)
            .is_some_and(|c| !c.is_empty());
        let truncated = more || ids.len() > limit as usize;
        ids.truncate(limit as usize);
        let flag = |name: &str| channel.get(name).and_then(Value::as_bool) == Some(true);
        let kind = if flag("is_im") {
            "im"
        } else if flag("is_mpim") {
            "mpim"
        } else if flag("is_private") || flag("is_group") {
            "private_channel"
        } else {
            "channel"
        };
        Ok(json!({
            "supported": true,
            "adapter": KIND,
            "chat": {
                "id": channel.get("id"),
                "type": kind,
                "name": channel.get("name"),
                "topic": channel.pointer("/topic/value"),
                "purpose": channel.pointer("/purpose/value"),
            },
            "member_count": channel.get("num_members"),
            "members": ids,
            "members_truncated": truncated,
        }))
    }
}

impl Adapter for SlackAdapter {
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
        Box::pin(self.chat_info_of(chat_id, limit))
    }

    fn test_credential(&self) -> BoxFuture<'_, Result<Value, AdapterError>> {
        Box::pin(async move {
            let bot = self.bot().await?;
            // The app token opens Socket Mode; asking for a connection URL proves it (the URL
            // is left unused and expires).
            self.api
                .call("apps.connections.open", &self.app_token, Args::Json(None))
                .await?;
            Ok(json!({
                "ok": true,
                "adapter": KIND,
                "bot": { "user_id": bot.user_id, "bot_id": bot.bot_id, "name": bot.name, "team_id": bot.team_id },
                "socket_mode": "ok",
            }))
        })
    }
}
