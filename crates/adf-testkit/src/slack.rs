//! A local Slack API server (Socket Mode WebSocket + Web API) for adapter tests, built from
//! Slack's published documentation (<https://api.slack.com/web>,
//! <https://api.slack.com/apis/socket-mode>, <https://api.slack.com/reference/block-kit>).
//!
//! Web API: `/api/<method>` with the token as `Authorization: Bearer …` (or a `token`
//! argument), arguments from the query string, a JSON body or a form body; every answer is
//! `{"ok": true, …}` or `{"ok": false, "error": "<code>"}` (HTTP 200), a rate limit HTTP 429
//! with `Retry-After`. Methods: `auth.test` and `chat.postMessage` / `conversations.info` /
//! `conversations.members` / `users.info` (bot token), `apps.connections.open` (app token: a bot token is
//! `not_allowed_token_type`, an unknown one `invalid_auth`), answering a one-use `ws://` URL.
//! Files pushed with [`SlackServer::add_file`] are served at their `url_private` to the bot
//! token only.
//!
//! Socket Mode: a connection gets `hello`, then every envelope not yet acknowledged (an
//! envelope sent before and not acknowledged comes again with `retry_attempt` counted up, as
//! Slack redelivers); a text frame `{"envelope_id": …}` acknowledges one. A test pushes events
//! ([`SlackServer::push_message`], [`SlackServer::push_event`]) and presses form controls
//! ([`SlackServer::click`], [`SlackServer::select`]); it scripts one-shot Web API faults per
//! method ([`SlackFault`]) and socket faults ([`SocketFault`]: a `disconnect` request, or a
//! connection dropped right after an envelope went out).

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

/// The workspace every event comes from.
pub const TEAM_ID: &str = "T0ADFTEST";
/// The bot user (`<@U0ADFBOT>` mentions it).
pub const BOT_USER_ID: &str = "U0ADFBOT";
/// The bot id the bot's own posts carry.
pub const BOT_ID: &str = "B0ADFBOT";
/// The app.
pub const APP_ID: &str = "A0ADFAPP";

/// A one-shot fault the next call of a Web API method meets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlackFault {
    /// HTTP 429 with `Retry-After: <seconds>` and `{"ok": false, "error": "ratelimited"}`.
    RateLimited(u64),
    /// `{"ok": false, "error": "<code>"}`, e.g. `invalid_auth`, `channel_not_found`.
    Error(String),
}

/// A one-shot fault of the Socket Mode connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketFault {
    /// The connection sends `{"type": "disconnect", "reason": …}` and closes.
    Disconnect(String),
    /// The next envelope goes out and the connection is dropped at once, without a close
    /// frame and without reading its acknowledgement: it stays pending and is redelivered.
    DropAfterNextEnvelope,
}

/// One Web API request the server answered.
#[derive(Debug, Clone, PartialEq)]
pub struct SlackCall {
    /// The method, e.g. `chat.postMessage`.
    pub method: String,
    /// The arguments, from the query string and the body merged.
    pub params: Map<String, Value>,
    /// Which token came: `bot`, `app` or `unknown` (`none` without one).
    pub token: &'static str,
}

struct Envelope {
    id: String,
    kind: &'static str,
    payload: Value,
    sent: u32,
}

#[derive(Default)]
struct State_ {
    envelopes: VecDeque<Envelope>,
    acked: Vec<String>,
    next: u64,
    calls: Vec<SlackCall>,
    faults: HashMap<String, VecDeque<SlackFault>>,
    socket_faults: VecDeque<SocketFault>,
    tickets: HashSet<String>,
    connections: u32,
    channels: HashMap<String, Value>,
    members: HashMap<String, Vec<String>>,
    files: HashMap<String, Vec<u8>>,
    posted: Vec<Value>,
    socket_url: Option<String>,
    users: HashMap<String, Value>,
}

impl State_ {
    fn next(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn ts(&mut self) -> String {
        format!("1767225600.{:06}", self.next())
    }
}

struct Inner {
    bot_token: String,
    app_token: String,
    addr: SocketAddr,
    state: Mutex<State_>,
    arrived: Notify,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State_> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").finish_non_exhaustive()
    }
}

/// A Slack API server on `127.0.0.1:0` for one app in one workspace.
#[derive(Debug)]
pub struct SlackServer {
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SlackServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SlackServer {
    /// Starts a server whose app answers to `bot_token` (Web API) and `app_token` (Socket
    /// Mode).
    pub async fn start(bot_token: &str, app_token: &str) -> Self {
        #[allow(clippy::expect_used)]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("adf-testkit: bind 127.0.0.1:0");
        #[allow(clippy::expect_used)]
        let addr = listener.local_addr().expect("adf-testkit: local_addr");
        let inner = Arc::new(Inner {
            bot_token: bot_token.to_owned(),
            app_token: app_token.to_owned(),
            addr,
            state: Mutex::new(State_::default()),
            arrived: Notify::new(),
        });
        let app = Router::new()
            .route("/api/{method}", any(web_api))
            .route("/link/", get(socket_mode))
            .route("/files-pri/{id}/{name}", get(file))
            .with_state(inner.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("adf-testkit: slack server stopped: {e}");
            }
        });
        SlackServer { inner, task }
    }

    /// The Web API root to configure (`config.api_root`), `http://127.0.0.1:PORT/api`.
    pub fn api_root(&self) -> String {
        format!("http://{}/api", self.inner.addr)
    }

    /// Makes a conversation known (`conversations.info`, `chat.postMessage`): `channel_type`
    /// is `im`, `mpim`, `channel` or `group` (a private channel).
    pub fn add_channel(&self, id: &str, channel_type: &str, name: &str, members: &[&str]) {
        let mut state = self.inner.lock();
        state.channels.insert(
            id.to_owned(),
            json!({
                "id": id, "name": name, "created": 1_767_225_600,
                "is_channel": channel_type == "channel",
                "is_group": channel_type == "group",
                "is_im": channel_type == "im",
                "is_mpim": channel_type == "mpim",
                "is_private": channel_type != "channel",
                "is_member": true,
                "topic": { "value": format!("{name} topic") },
                "purpose": { "value": format!("{name} purpose") },
                "num_members": members.len(),
            }),
        );
        state.members.insert(
            id.to_owned(),
            members.iter().map(|m| (*m).to_owned()).collect(),
        );
    }

    /// Makes a user known to `users.info`: `name` is the handle, `display_name` what Slack
    /// shows.
    pub fn add_user(&self, id: &str, name: &str, display_name: &str) {
        self.inner.lock().users.insert(
            id.to_owned(),
            json!({
                "id": id, "team_id": TEAM_ID, "name": name, "real_name": display_name,
                "is_bot": false,
                "profile": { "display_name": display_name, "real_name": display_name },
            }),
        );
    }

    /// Queues an Events API callback carrying `event` and returns its `event_id`.
    pub fn push_event(&self, event: Value) -> String {
        let mut state = self.inner.lock();
        let n = state.next();
        let event_id = format!("Ev{n:08}");
        let payload = json!({
            "token": "verification-token",
            "team_id": TEAM_ID,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": 1_767_225_600,
            "authorizations": [{ "team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": true }],
        });
        Self::queue(&mut state, "events_api", payload, &self.inner.arrived);
        event_id
    }

    fn queue(state: &mut State_, kind: &'static str, payload: Value, arrived: &Notify) {
        let n = state.next();
        state.envelopes.push_back(Envelope {
            id: format!("env-{n:08}"),
            kind,
            payload,
            sent: 0,
        });
        arrived.notify_waiters();
    }

    /// A new message `ts`, for events built by hand.
    pub fn new_ts(&self) -> String {
        self.inner.lock().ts()
    }

    /// Queues a `message` event from `user` in `channel` (`channel_type` `im`, `channel`,
    /// `group` or `mpim`) and returns its `ts`.
    pub fn push_message(
        &self,
        channel: &str,
        channel_type: &str,
        user: &str,
        text: &str,
    ) -> String {
        self.push_message_with(channel, channel_type, user, text, Map::new())
    }

    /// As [`SlackServer::push_message`], with extra event fields (`thread_ts`, `subtype`,
    /// `files`, `bot_id`, …).
    pub fn push_message_with(
        &self,
        channel: &str,
        channel_type: &str,
        user: &str,
        text: &str,
        extra: Map<String, Value>,
    ) -> String {
        let ts = self.new_ts();
        let mut event = json!({
            "type": "message", "channel": channel, "user": user, "text": text,
            "ts": ts, "event_ts": ts, "channel_type": channel_type, "team": TEAM_ID,
        });
        if let Some(object) = event.as_object_mut() {
            object.extend(extra);
        }
        self.push_event(event);
        ts
    }

    /// Queues what Slack sends for a message in a channel that mentions the bot: the
    /// `message` event and the `app_mention` event of the same `ts`. Returns the `ts`.
    pub fn push_mention(&self, channel: &str, user: &str, text: &str) -> String {
        let ts = self.push_message(channel, "channel", user, text);
        self.push_event(json!({
            "type": "app_mention", "user": user, "text": text, "ts": ts,
            "channel": channel, "event_ts": ts, "team": TEAM_ID,
        }));
        ts
    }

    /// Makes `bytes` downloadable and returns the file object a `message` event's `files`
    /// carries (`size` as announced; pass a larger `announced_size` to play a platform that
    /// reports less than it sends).
    pub fn add_file(
        &self,
        name: &str,
        mimetype: &str,
        bytes: &[u8],
        announced_size: Option<u64>,
    ) -> Value {
        let mut state = self.inner.lock();
        let n = state.next();
        let id = format!("F{n:08}");
        state.files.insert(id.clone(), bytes.to_vec());
        let url = format!("http://{}/files-pri/{TEAM_ID}-{id}/{name}", self.inner.addr);
        json!({
            "id": id, "name": name, "title": name, "mimetype": mimetype,
            "filetype": name.rsplit('.').next().unwrap_or("binary"),
            "size": announced_size.unwrap_or(bytes.len() as u64),
            "mode": "hosted", "is_external": false,
            "url_private": url, "url_private_download": format!("{url}?download=1"),
        })
    }

    /// User `user` presses the button `action_id` of the bot's message `message_ts`: queues
    /// the `block_actions` payload Slack sends. `false` when no such button was posted.
    pub fn click(&self, user: &str, message_ts: &str, action_id: &str) -> bool {
        self.act(user, message_ts, |element, block_id| {
            (element.get("type").and_then(Value::as_str) == Some("button")
                && element.get("action_id").and_then(Value::as_str) == Some(action_id))
            .then(|| {
                json!({
                    "type": "button", "action_id": action_id, "block_id": block_id,
                    "text": element.get("text"), "value": element.get("value"),
                })
            })
        })
    }

    /// User `user` picks the option whose `value` is `value` in a static select of the bot's
    /// message `message_ts`. `false` when no such option was posted.
    pub fn select(&self, user: &str, message_ts: &str, value: &str) -> bool {
        self.act(user, message_ts, |element, block_id| {
            if element.get("type").and_then(Value::as_str) != Some("static_select") {
                return None;
            }
            let option = element
                .get("options")
                .and_then(Value::as_array)?
                .iter()
                .find(|o| o.get("value").and_then(Value::as_str) == Some(value))?;
            Some(json!({
                "type": "static_select", "action_id": element.get("action_id"),
                "block_id": block_id, "selected_option": option,
                "placeholder": element.get("placeholder"),
            }))
        })
    }

    fn act(
        &self,
        user: &str,
        message_ts: &str,
        find: impl Fn(&Value, &Value) -> Option<Value>,
    ) -> bool {
        let mut state = self.inner.lock();
        let Some(message) = state
            .posted
            .iter()
            .find(|m| m.get("ts").and_then(Value::as_str) == Some(message_ts))
            .cloned()
        else {
            return false;
        };
        let action = message
            .get("blocks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("actions"))
            .find_map(|block| {
                let block_id = block.get("block_id").cloned().unwrap_or(Value::Null);
                block
                    .get("elements")
                    .and_then(Value::as_array)?
                    .iter()
                    .find_map(|element| find(element, &block_id))
            });
        let Some(mut action) = action else {
            return false;
        };
        let action_ts = state.ts();
        if let Some(object) = action.as_object_mut() {
            object.insert("action_ts".into(), json!(action_ts));
        }
        let channel = message.get("channel").cloned().unwrap_or(Value::Null);
        let payload = json!({
            "type": "block_actions",
            "user": { "id": user, "username": user.to_lowercase(), "name": user.to_lowercase(), "team_id": TEAM_ID },
            "api_app_id": APP_ID,
            "token": "verification-token",
            "container": {
                "type": "message", "message_ts": message_ts, "channel_id": channel,
                "is_ephemeral": false, "thread_ts": message.get("thread_ts"),
            },
            "trigger_id": format!("{}.trigger", action_ts),
            "team": { "id": TEAM_ID, "domain": "adf-test" },
            "channel": { "id": channel, "name": "channel" },
            "message": message,
            "response_url": format!("http://{}/actions/response", self.inner.addr),
            "actions": [action],
        });
        Self::queue(&mut state, "interactive", payload, &self.inner.arrived);
        true
    }

    /// The next call of `method` meets `fault` (faults of one method are met in order).
    pub fn fault(&self, method: &str, fault: SlackFault) {
        self.inner
            .lock()
            .faults
            .entry(method.to_owned())
            .or_default()
            .push_back(fault);
    }

    /// The Socket Mode connection (the open one, else the next) meets `fault`.
    pub fn socket_fault(&self, fault: SocketFault) {
        self.inner.lock().socket_faults.push_back(fault);
        self.inner.arrived.notify_waiters();
    }

    /// `apps.connections.open` answers `url` from now on instead of this server's own
    /// WebSocket URL (to see what a client does with an address it must not reach).
    pub fn answer_socket_url(&self, url: &str) {
        self.inner.lock().socket_url = Some(url.to_owned());
    }

    /// Every Web API call so far, in arrival order.
    pub fn calls(&self) -> Vec<SlackCall> {
        self.inner.lock().calls.clone()
    }

    /// The calls of one method.
    pub fn calls_of(&self, method: &str) -> Vec<SlackCall> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// The messages `chat.postMessage` posted, as the server stored them (`channel`, `ts`,
    /// `text`, `thread_ts?`, `blocks?`).
    pub fn posted(&self) -> Vec<Value> {
        self.inner.lock().posted.clone()
    }

    /// Envelopes not acknowledged yet.
    pub fn pending_envelopes(&self) -> usize {
        self.inner.lock().envelopes.len()
    }

    /// Envelope ids acknowledged, in order (an id twice is a second acknowledgement).
    pub fn acknowledged(&self) -> Vec<String> {
        self.inner.lock().acked.clone()
    }

    /// Socket Mode connections opened so far.
    pub fn connections(&self) -> u32 {
        self.inner.lock().connections
    }
}

fn answer(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

fn ok(mut body: Value) -> Response {
    if let Some(object) = body.as_object_mut() {
        object.insert("ok".into(), json!(true));
    }
    answer(StatusCode::OK, body)
}

fn error(code: &str) -> Response {
    answer(StatusCode::OK, json!({ "ok": false, "error": code }))
}

/// `application/x-www-form-urlencoded` decoding of one component.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn form_pairs(text: &str, into: &mut Map<String, Value>) {
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        into.insert(decode(name), Value::String(decode(value)));
    }
}

fn params_of(query: Option<String>, headers: &HeaderMap, body: &Bytes) -> Map<String, Value> {
    let mut params = Map::new();
    form_pairs(&query.unwrap_or_default(), &mut params);
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if content_type.starts_with("application/json") {
        if let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(body) {
            params.extend(object);
        }
    } else if let Ok(text) = std::str::from_utf8(body) {
        form_pairs(text, &mut params);
    }
    params
}

fn token_kind(inner: &Inner, headers: &HeaderMap, params: &Map<String, Value>) -> &'static str {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
        .or_else(|| {
            params
                .get("token")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
    match bearer {
        None => "none",
        Some(t) if t == inner.bot_token => "bot",
        Some(t) if t == inner.app_token => "app",
        Some(_) => "unknown",
    }
}

fn text_param<'a>(params: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    params
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

async fn web_api(
    State(inner): State<Arc<Inner>>,
    Path(method): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params = params_of(query, &headers, &body);
    let token = token_kind(&inner, &headers, &params);
    let fault = {
        let mut state = inner.lock();
        state.calls.push(SlackCall {
            method: method.clone(),
            params: params.clone(),
            token,
        });
        state.faults.get_mut(&method).and_then(VecDeque::pop_front)
    };
    match fault {
        Some(SlackFault::RateLimited(seconds)) => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [
                    (
                        header::CONTENT_TYPE,
                        "application/json; charset=utf-8".to_owned(),
                    ),
                    (header::RETRY_AFTER, seconds.to_string()),
                ],
                json!({ "ok": false, "error": "ratelimited" }).to_string(),
            )
                .into_response();
        }
        Some(SlackFault::Error(code)) => return error(&code),
        None => {}
    }
    match token {
        "none" => return error("not_authed"),
        "unknown" => return error("invalid_auth"),
        _ => {}
    }
    if method == "apps.connections.open" {
        if token != "app" {
            return error("not_allowed_token_type");
        }
        let url = {
            let mut state = inner.lock();
            let ticket = format!("ticket-{}", state.next());
            state.tickets.insert(ticket.clone());
            state.socket_url.clone().unwrap_or_else(|| {
                format!("ws://{}/link/?ticket={ticket}&app_id={APP_ID}", inner.addr)
            })
        };
        return ok(json!({ "url": url }));
    }
    if token != "bot" {
        return error("not_allowed_token_type");
    }
    match method.as_str() {
        "auth.test" => ok(json!({
            "url": "https://adf-test.slack.com/", "team": "ADF Test", "user": "adf_bot",
            "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID,
            "is_enterprise_install": false,
        })),
        "chat.postMessage" => post_message(&inner, &params),
        "conversations.info" => {
            let state = inner.lock();
            match text_param(&params, "channel").and_then(|c| state.channels.get(c)) {
                Some(channel) => ok(json!({ "channel": channel })),
                None => error("channel_not_found"),
            }
        }
        "users.info" => {
            let state = inner.lock();
            match text_param(&params, "user").and_then(|u| state.users.get(u)) {
                Some(user) => ok(json!({ "user": user })),
                None => error("user_not_found"),
            }
        }
        "conversations.members" => {
            let state = inner.lock();
            let Some(members) = text_param(&params, "channel").and_then(|c| state.members.get(c))
            else {
                return error("channel_not_found");
            };
            let limit = text_param(&params, "limit")
                .and_then(|l| l.parse::<usize>().ok())
                .unwrap_or(100)
                .clamp(1, 1000);
            let page: Vec<&String> = members.iter().take(limit).collect();
            let cursor = if members.len() > limit {
                format!("dXNlcjo{limit}")
            } else {
                String::new()
            };
            ok(json!({ "members": page, "response_metadata": { "next_cursor": cursor } }))
        }
        _ => error("unknown_method"),
    }
}

fn post_message(inner: &Inner, params: &Map<String, Value>) -> Response {
    let Some(channel) = text_param(params, "channel").map(str::to_owned) else {
        return error("channel_not_found");
    };
    let text = text_param(params, "text").map(str::to_owned);
    // A form body carries `blocks` as JSON text.
    let blocks = match params.get("blocks") {
        Some(Value::String(s)) => serde_json::from_str(s).ok(),
        Some(other) => Some(other.clone()),
        None => None,
    };
    if text.is_none() && blocks.is_none() {
        return error("no_text");
    }
    if blocks.as_ref().is_some_and(|b| !b.is_array()) {
        return error("invalid_blocks");
    }
    let mut state = inner.lock();
    if !state.channels.contains_key(&channel) {
        return error("channel_not_found");
    }
    let ts = state.ts();
    let mut message = json!({
        "type": "message", "channel": channel, "text": text, "user": BOT_USER_ID,
        "bot_id": BOT_ID, "ts": ts, "team": TEAM_ID,
    });
    if let Some(object) = message.as_object_mut() {
        if let Some(thread) = text_param(params, "thread_ts") {
            object.insert("thread_ts".into(), json!(thread));
        }
        if let Some(blocks) = blocks {
            object.insert("blocks".into(), blocks);
        }
    }
    state.posted.push(message.clone());
    ok(json!({ "channel": channel, "ts": ts, "message": message }))
}

async fn file(
    State(inner): State<Arc<Inner>>,
    Path((id, _name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if token_kind(&inner, &headers, &Map::new()) != "bot" {
        return (StatusCode::FORBIDDEN, "files need the bot token").into_response();
    }
    let bytes = id
        .strip_prefix(&format!("{TEAM_ID}-"))
        .and_then(|id| inner.lock().files.get(id).cloned());
    match bytes {
        Some(bytes) => (StatusCode::OK, bytes).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn socket_mode(
    State(inner): State<Arc<Inner>>,
    RawQuery(query): RawQuery,
    upgrade: WebSocketUpgrade,
) -> Response {
    let mut params = Map::new();
    form_pairs(&query.unwrap_or_default(), &mut params);
    let ticket = text_param(&params, "ticket").unwrap_or_default().to_owned();
    // A ticket opens one connection.
    if !inner.lock().tickets.remove(&ticket) {
        return (StatusCode::UNAUTHORIZED, "invalid ticket").into_response();
    }
    upgrade.on_upgrade(move |socket| serve_socket(inner, socket))
}

async fn serve_socket(inner: Arc<Inner>, mut socket: WebSocket) {
    inner.lock().connections += 1;
    let hello = json!({
        "type": "hello", "num_connections": 1,
        "debug_info": { "host": "adf-testkit", "approximate_connection_time": 18060 },
        "connection_info": { "app_id": APP_ID },
    });
    if socket
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    let mut sent_here: HashSet<String> = HashSet::new();
    loop {
        // Registered before the checks, so a push between a check and the wait is not missed.
        let arrived = inner.arrived.notified();
        let (frames, drop_after, disconnect) = {
            let mut state = inner.lock();
            let disconnect = match state.socket_faults.front() {
                Some(SocketFault::Disconnect(reason)) => {
                    let reason = reason.clone();
                    state.socket_faults.pop_front();
                    Some(reason)
                }
                _ => None,
            };
            let drop_after = disconnect.is_none()
                && state.socket_faults.front() == Some(&SocketFault::DropAfterNextEnvelope);
            let mut frames = Vec::new();
            if disconnect.is_none() {
                for envelope in state.envelopes.iter_mut() {
                    if sent_here.contains(&envelope.id) {
                        continue;
                    }
                    sent_here.insert(envelope.id.clone());
                    envelope.sent += 1;
                    frames.push(json!({
                        "envelope_id": envelope.id,
                        "payload": envelope.payload,
                        "type": envelope.kind,
                        "accepts_response_payload": false,
                        "retry_attempt": envelope.sent - 1,
                        "retry_reason": if envelope.sent > 1 { "timeout" } else { "" },
                    }));
                    if drop_after {
                        break;
                    }
                }
            }
            let dropping = drop_after && !frames.is_empty();
            if dropping {
                state.socket_faults.pop_front();
            }
            (frames, dropping, disconnect)
        };
        if let Some(reason) = disconnect {
            let frame = json!({
                "type": "disconnect", "reason": reason,
                "debug_info": { "host": "adf-testkit" },
            });
            let _sent = socket.send(Message::Text(frame.to_string().into())).await;
            let _closed = socket.send(Message::Close(None)).await;
            return;
        }
        for frame in frames {
            if socket
                .send(Message::Text(frame.to_string().into()))
                .await
                .is_err()
            {
                return;
            }
        }
        if drop_after {
            // Dropped without a close frame: the client sees the connection end.
            return;
        }
        tokio::select! {
            () = arrived => {}
            frame = socket.recv() => match frame {
                Some(Ok(Message::Text(text))) => {
                    let id = serde_json::from_str::<Value>(text.as_str())
                        .ok()
                        .and_then(|v| v.get("envelope_id").and_then(Value::as_str).map(str::to_owned));
                    if let Some(id) = id {
                        let mut state = inner.lock();
                        state.envelopes.retain(|e| e.id != id);
                        state.acked.push(id);
                    }
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                Some(Ok(_)) => {}
            },
        }
    }
}
