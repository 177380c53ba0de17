//! A local Discord API server (HTTP API + Gateway WebSocket) for adapter tests, built from
//! Discord's developer documentation (<https://discord.com/developers/docs>).
//!
//! HTTP, under `/api/v10` ([`DiscordServer::api_root`]), every route but the interaction
//! callback requiring `Authorization: Bot <token>` (else `401 {"message": "401:
//! Unauthorized", "code": 0}`): `GET /gateway/bot` (the Gateway URL), `GET /users/@me`, `GET
//! /channels/{id}`, `GET /channels/{id}/messages?limit=`, `POST /channels/{id}/messages`
//! (recorded; answered with a message object; `404 Unknown Channel` for a channel the server
//! does not know, `400` for an empty or over-long content), `POST
//! /interactions/{id}/{token}/callback` (`204`). Attachments are served outside the API at
//! `/attachments/{id}/{filename}`, as the CDN serves them. Faults are scripted per route
//! ([`DiscordFault`]: 429 with `retry_after` in the body and headers, or in the headers only;
//! 401; any error).
//!
//! The Gateway (`/gateway`, JSON encoding): HELLO with the heartbeat interval, heartbeat ACKs,
//! IDENTIFY (a wrong token is closed with 4004) starting a session whose READY carries
//! `session_id` and `resume_gateway_url`, RESUME (replays every dispatch after the given
//! sequence, then RESUMED; an unknown or invalidated session gets INVALID_SESSION `false`).
//! Dispatches pushed by a test ([`DiscordServer::push_message`],
//! [`DiscordServer::push_interaction`]) join the session's log and reach the connected client;
//! pushed while no client is connected, they wait for a RESUME. Scripted Gateway behaviour:
//! unanswered heartbeats, a connection dropped instead of sending the next dispatch, RECONNECT
//! (op 7), INVALID_SESSION (op 9) and close codes.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};

/// The heartbeat interval HELLO announces unless a test sets another (Discord's is ~41 s).
const DEFAULT_HEARTBEAT_MS: u64 = 41_250;

/// The timestamp every pushed message carries.
const TIMESTAMP: &str = "2026-12-07T12:00:00.000000+00:00";

/// A one-shot fault the next request to a route meets.
#[derive(Debug, Clone, PartialEq)]
pub enum DiscordFault {
    /// `429` with `{message, retry_after, global}` in the body and `Retry-After` /
    /// `X-RateLimit-Reset-After` headers.
    RateLimited(f64),
    /// `429` with only the `Retry-After` header (whole seconds) and a body without
    /// `retry_after`.
    RateLimitedHeaderOnly(u64),
    /// `401 Unauthorized`.
    Unauthorized,
    /// Any error: status, JSON error code and message.
    Error(u16, u64, String),
}

/// A scripted Gateway event for the connected (or next) client.
#[derive(Debug, Clone, PartialEq)]
enum Control {
    Reconnect,
    InvalidSession(bool),
    Close(u16, String),
}

/// One HTTP request the server answered.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscordCall {
    /// `GET`, `POST`.
    pub method: String,
    /// The route name: `gateway_bot`, `users_me`, `get_channel`, `channel_messages`,
    /// `create_message`, `interaction_callback`, `attachment`.
    pub route: String,
    /// The path after `/api/v10` (or the attachment path).
    pub path: String,
    /// The JSON body (`null` when none).
    pub body: Value,
}

#[derive(Default)]
struct GatewaySession {
    id: String,
    events: Vec<Value>,
    invalid: bool,
}

#[derive(Default)]
struct State_ {
    next_id: u64,
    calls: Vec<DiscordCall>,
    faults: HashMap<String, VecDeque<DiscordFault>>,
    channels: HashMap<String, Value>,
    history: HashMap<String, Vec<Value>>,
    files: HashMap<String, Vec<u8>>,
    heartbeat_ms: u64,
    session: Option<GatewaySession>,
    sessions_started: u64,
    payloads: Vec<Value>,
    connections: u64,
    controls: VecDeque<Control>,
    unanswered_heartbeats: u32,
    drop_before_next_dispatch: bool,
}

struct Inner {
    token: String,
    bot: Value,
    addr: Mutex<Option<SocketAddr>>,
    state: Mutex<State_>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State_> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn base(&self) -> String {
        let addr = *self
            .addr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        addr.map(|a| a.to_string()).unwrap_or_default()
    }

    fn wake(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

/// A Discord API and Gateway server on `127.0.0.1:0` for one bot.
pub struct DiscordServer {
    inner: Arc<Inner>,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for DiscordServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for DiscordServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DiscordServer {
    /// Starts a server whose bot answers to `token` and is called `username`.
    pub async fn start(token: &str, username: &str) -> Self {
        let (changed, _) = tokio::sync::watch::channel(0);
        let inner = Arc::new(Inner {
            token: token.to_owned(),
            bot: json!({
                "id": "900000000000000001", "username": username, "discriminator": "0",
                "global_name": Value::Null, "avatar": Value::Null, "bot": true,
            }),
            addr: Mutex::new(None),
            state: Mutex::new(State_ {
                next_id: 1_200_000_000_000_000_000,
                heartbeat_ms: DEFAULT_HEARTBEAT_MS,
                ..State_::default()
            }),
            changed,
        });
        let app = Router::new()
            .route("/api/v10/gateway/bot", get(gateway_bot))
            .route("/api/v10/users/@me", get(users_me))
            .route("/api/v10/channels/{id}", get(get_channel))
            .route(
                "/api/v10/channels/{id}/messages",
                get(channel_messages).post(create_message),
            )
            .route(
                "/api/v10/interactions/{id}/{token}/callback",
                post(interaction_callback),
            )
            .route("/attachments/{id}/{name}", get(attachment))
            .route("/gateway", get(gateway))
            .with_state(inner.clone());
        #[allow(clippy::expect_used)]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("adf-testkit: bind 127.0.0.1:0");
        #[allow(clippy::expect_used)]
        let addr = listener.local_addr().expect("adf-testkit: local_addr");
        *inner
            .addr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(addr);
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("adf-testkit: discord server stopped: {e}");
            }
        });
        DiscordServer { inner, addr, task }
    }

    /// The API root to configure (`config.api_root`): `http://127.0.0.1:PORT/api/v10`.
    pub fn api_root(&self) -> String {
        format!("http://{}/api/v10", self.addr)
    }

    /// The Gateway URL `GET /gateway/bot` answers: `ws://127.0.0.1:PORT/gateway`.
    pub fn gateway_url(&self) -> String {
        format!("ws://{}/gateway", self.addr)
    }

    /// The bot's user object, as `GET /users/@me` answers it.
    pub fn bot(&self) -> Value {
        self.inner.bot.clone()
    }

    /// The bot's user id.
    pub fn bot_id(&self) -> String {
        self.inner.bot["id"].as_str().unwrap_or_default().to_owned()
    }

    fn next_id(&self) -> String {
        let mut state = self.inner.lock();
        state.next_id += 1;
        state.next_id.to_string()
    }

    /// A DM channel (type 1) with `recipient`, known to the server from now on.
    pub fn dm_channel(&self, id: &str, recipient: &Value) -> Value {
        self.add_channel(json!({ "id": id, "type": 1, "recipients": [recipient] }))
    }

    /// A guild text channel (type 0) named `name`, known to the server from now on.
    pub fn guild_channel(&self, id: &str, guild_id: &str, name: &str) -> Value {
        self.add_channel(json!({
            "id": id, "type": 0, "guild_id": guild_id, "name": name, "topic": Value::Null,
        }))
    }

    fn add_channel(&self, channel: Value) -> Value {
        let id = channel["id"].as_str().unwrap_or_default().to_owned();
        self.inner.lock().channels.insert(id, channel.clone());
        channel
    }

    /// A user object.
    pub fn user(id: &str, username: &str) -> Value {
        json!({ "id": id, "username": username, "discriminator": "0", "global_name": username })
    }

    /// Makes `bytes` downloadable and returns the attachment object a message carries,
    /// announcing `announced_size` bytes (a lie when it differs from the real length).
    pub fn attachment(&self, filename: &str, bytes: &[u8], announced_size: u64) -> Value {
        let id = self.next_id();
        self.inner.lock().files.insert(id.clone(), bytes.to_vec());
        json!({
            "id": id, "filename": filename, "size": announced_size,
            "content_type": "application/octet-stream",
            "url": format!("http://{}/attachments/{id}/{filename}", self.addr),
            "proxy_url": format!("http://{}/attachments/{id}/{filename}", self.addr),
        })
    }

    /// Sends a `MESSAGE_CREATE` from `author` in `channel` and returns the message id.
    /// `mentions` lists the known users the content names as `<@id>`, as Discord fills it.
    pub fn push_message(&self, channel: &Value, author: &Value, content: &str) -> String {
        self.push_message_with(channel, author, content, Map::new())
    }

    /// As [`DiscordServer::push_message`], with extra message fields (`attachments`,
    /// `message_reference`, `referenced_message`, `type`, `webhook_id`, …).
    pub fn push_message_with(
        &self,
        channel: &Value,
        author: &Value,
        content: &str,
        extra: Map<String, Value>,
    ) -> String {
        let id = self.next_id();
        let mut mentions = Vec::new();
        let bot_id = self.bot_id();
        if content.contains(&format!("<@{bot_id}>")) || content.contains(&format!("<@!{bot_id}>")) {
            mentions.push(self.inner.bot.clone());
        }
        let mut message = json!({
            "id": id, "channel_id": channel["id"], "author": author, "content": content,
            "timestamp": TIMESTAMP, "edited_timestamp": Value::Null, "tts": false,
            "mention_everyone": false, "mentions": mentions, "mention_roles": [],
            "attachments": [], "embeds": [], "pinned": false, "type": 0,
        });
        if let Some(object) = message.as_object_mut() {
            if let Some(guild) = channel.get("guild_id") {
                object.insert("guild_id".into(), guild.clone());
                object.insert("member".into(), json!({ "roles": [], "nick": Value::Null }));
            }
            object.extend(extra);
        }
        let channel_id = channel["id"].as_str().unwrap_or_default().to_owned();
        {
            let mut state = self.inner.lock();
            state
                .channels
                .entry(channel_id.clone())
                .or_insert_with(|| channel.clone());
            state
                .history
                .entry(channel_id)
                .or_default()
                .push(message.clone());
        }
        self.dispatch("MESSAGE_CREATE", message);
        id
    }

    /// Sends an `INTERACTION_CREATE`: `user` clicked a component of the bot's message
    /// `message_id` in `channel` — a button (`values` `None`) or a string select with `values`.
    /// Returns the interaction id.
    pub fn push_interaction(
        &self,
        channel: &Value,
        user: &Value,
        message_id: &str,
        custom_id: &str,
        values: Option<Vec<String>>,
    ) -> String {
        let id = self.next_id();
        let data = match values {
            Some(values) => {
                json!({ "custom_id": custom_id, "component_type": 3, "values": values })
            }
            None => json!({ "custom_id": custom_id, "component_type": 2 }),
        };
        let mut interaction = json!({
            "id": id, "application_id": self.bot_id(), "type": 3, "data": data,
            "channel_id": channel["id"], "token": format!("interaction-token-{id}"),
            "version": 1, "message": { "id": message_id, "channel_id": channel["id"] },
        });
        if let Some(object) = interaction.as_object_mut() {
            match channel.get("guild_id") {
                Some(guild) => {
                    object.insert("guild_id".into(), guild.clone());
                    object.insert("member".into(), json!({ "user": user, "roles": [] }));
                }
                None => {
                    object.insert("user".into(), user.clone());
                }
            }
        }
        self.dispatch("INTERACTION_CREATE", interaction);
        id
    }

    /// Adds a dispatch to the session's log (sent to the connected client, or replayed on
    /// RESUME) and returns its sequence number; `None` when no session was ever identified.
    pub fn dispatch(&self, kind: &str, data: Value) -> Option<i64> {
        let seq = {
            let mut state = self.inner.lock();
            let session = state.session.as_mut()?;
            let seq = session.events.len() as i64 + 1;
            session
                .events
                .push(json!({ "op": 0, "t": kind, "s": seq, "d": data }));
            seq
        };
        self.inner.wake();
        Some(seq)
    }

    /// The next request of `route` meets `fault` (faults of one route are met in order).
    pub fn fault(&self, route: &str, fault: DiscordFault) {
        self.inner
            .lock()
            .faults
            .entry(route.to_owned())
            .or_default()
            .push_back(fault);
    }

    /// The heartbeat interval the next HELLO announces.
    pub fn set_heartbeat_interval_ms(&self, ms: u64) {
        self.inner.lock().heartbeat_ms = ms;
    }

    /// The next `n` heartbeats get no ACK (a zombie connection, from the client's side).
    pub fn leave_heartbeats_unanswered(&self, n: u32) {
        self.inner.lock().unanswered_heartbeats = n;
    }

    /// The connection is dropped (no close frame) instead of sending the next dispatch; the
    /// dispatch stays in the session's log for a RESUME.
    pub fn drop_before_next_dispatch(&self) {
        self.inner.lock().drop_before_next_dispatch = true;
    }

    /// Sends RECONNECT (op 7) to the connected client.
    pub fn request_reconnect(&self) {
        self.control(Control::Reconnect);
    }

    /// Sends INVALID_SESSION (op 9) with `resumable`; when not resumable the session is gone.
    pub fn invalidate_session(&self, resumable: bool) {
        self.control(Control::InvalidSession(resumable));
    }

    /// Closes the Gateway connection with `code` and `reason`.
    pub fn close_gateway(&self, code: u16, reason: &str) {
        self.control(Control::Close(code, reason.to_owned()));
    }

    fn control(&self, control: Control) {
        self.inner.lock().controls.push_back(control);
        self.inner.wake();
    }

    /// Every HTTP request so far, in arrival order.
    pub fn calls(&self) -> Vec<DiscordCall> {
        self.inner.lock().calls.clone()
    }

    /// The requests of one route.
    pub fn calls_to(&self, route: &str) -> Vec<DiscordCall> {
        self.calls()
            .into_iter()
            .filter(|c| c.route == route)
            .collect()
    }

    /// Every payload clients sent on the Gateway, in order.
    pub fn gateway_payloads(&self) -> Vec<Value> {
        self.inner.lock().payloads.clone()
    }

    /// The client payloads with opcode `op` (1 heartbeat, 2 identify, 6 resume).
    pub fn gateway_ops(&self, op: u64) -> Vec<Value> {
        self.gateway_payloads()
            .into_iter()
            .filter(|p| p["op"].as_u64() == Some(op))
            .collect()
    }

    /// Gateway connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.inner.lock().connections
    }

    /// Sessions started by IDENTIFY so far.
    pub fn sessions_started(&self) -> u64 {
        self.inner.lock().sessions_started
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn error(status: u16, code: u64, message: &str) -> Response {
    json_response(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        &json!({ "message": message, "code": code }),
    )
}

fn fault_response(fault: DiscordFault) -> Response {
    match fault {
        DiscordFault::RateLimited(seconds) => (
            StatusCode::TOO_MANY_REQUESTS,
            [
                (header::CONTENT_TYPE, "application/json".to_owned()),
                (header::RETRY_AFTER, format!("{}", seconds.ceil() as u64)),
                (
                    header::HeaderName::from_static("x-ratelimit-reset-after"),
                    format!("{seconds:.3}"),
                ),
            ],
            json!({ "message": "You are being rate limited.", "retry_after": seconds, "global": false })
                .to_string(),
        )
            .into_response(),
        DiscordFault::RateLimitedHeaderOnly(seconds) => (
            StatusCode::TOO_MANY_REQUESTS,
            [
                (header::CONTENT_TYPE, "application/json".to_owned()),
                (header::RETRY_AFTER, seconds.to_string()),
            ],
            json!({ "message": "You are being rate limited.", "global": false }).to_string(),
        )
            .into_response(),
        DiscordFault::Unauthorized => error(401, 0, "401: Unauthorized"),
        DiscordFault::Error(status, code, message) => error(status, code, &message),
    }
}

/// Records the call and answers its fault or a refused token; `None`: go on.
fn admit(
    inner: &Inner,
    method: &str,
    route: &str,
    path: String,
    headers: Option<&HeaderMap>,
    body: &Bytes,
) -> Option<Response> {
    let fault = {
        let mut state = inner.lock();
        state.calls.push(DiscordCall {
            method: method.to_owned(),
            route: route.to_owned(),
            path,
            body: serde_json::from_slice(body).unwrap_or(Value::Null),
        });
        state.faults.get_mut(route).and_then(VecDeque::pop_front)
    };
    if let Some(headers) = headers {
        let expected = format!("Bot {}", inner.token);
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if given != Some(expected.as_str()) {
            return Some(error(401, 0, "401: Unauthorized"));
        }
    }
    fault.map(fault_response)
}

async fn gateway_bot(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    let path = "/gateway/bot".to_owned();
    if let Some(r) = admit(
        &inner,
        "GET",
        "gateway_bot",
        path,
        Some(&headers),
        &Bytes::new(),
    ) {
        return r;
    }
    json_response(
        StatusCode::OK,
        &json!({
            "url": format!("ws://{}/gateway", inner.base()),
            "shards": 1,
            "session_start_limit": { "total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1 },
        }),
    )
}

async fn users_me(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    let path = "/users/@me".to_owned();
    if let Some(r) = admit(
        &inner,
        "GET",
        "users_me",
        path,
        Some(&headers),
        &Bytes::new(),
    ) {
        return r;
    }
    json_response(StatusCode::OK, &inner.bot)
}

async fn get_channel(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/channels/{id}");
    if let Some(r) = admit(
        &inner,
        "GET",
        "get_channel",
        path,
        Some(&headers),
        &Bytes::new(),
    ) {
        return r;
    }
    match inner.lock().channels.get(&id) {
        Some(channel) => json_response(StatusCode::OK, channel),
        None => error(404, 10003, "Unknown Channel"),
    }
}

async fn channel_messages(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let path = format!("/channels/{id}/messages");
    if let Some(r) = admit(
        &inner,
        "GET",
        "channel_messages",
        path,
        Some(&headers),
        &Bytes::new(),
    ) {
        return r;
    }
    let limit = query
        .unwrap_or_default()
        .split('&')
        .find_map(|p| p.strip_prefix("limit="))
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(50);
    if !(1..=100).contains(&limit) {
        return error(400, 50035, "Invalid Form Body: limit must be 1 to 100");
    }
    let state = inner.lock();
    if !state.channels.contains_key(&id) {
        return error(404, 10003, "Unknown Channel");
    }
    // Newest first, as the API answers.
    let messages: Vec<Value> = state
        .history
        .get(&id)
        .map(|h| h.iter().rev().take(limit).cloned().collect())
        .unwrap_or_default();
    json_response(StatusCode::OK, &Value::Array(messages))
}

async fn create_message(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = format!("/channels/{id}/messages");
    if let Some(r) = admit(
        &inner,
        "POST",
        "create_message",
        path,
        Some(&headers),
        &body,
    ) {
        return r;
    }
    let Ok(Value::Object(params)) = serde_json::from_slice::<Value>(&body) else {
        return error(400, 50109, "The request body contains invalid JSON.");
    };
    let content = params
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let components = params
        .get("components")
        .and_then(Value::as_array)
        .map(Vec::len)
        .unwrap_or(0);
    if content.chars().count() > 2000 {
        return error(
            400,
            50035,
            "Invalid Form Body: content must be 2000 or fewer in length.",
        );
    }
    if content.is_empty() && components == 0 {
        return error(400, 50006, "Cannot send an empty message");
    }
    let mut state = inner.lock();
    if !state.channels.contains_key(&id) {
        return error(404, 10003, "Unknown Channel");
    }
    state.next_id += 1;
    let message_id = state.next_id.to_string();
    let reference = params.get("message_reference").cloned();
    let mut message = json!({
        "id": message_id, "channel_id": id, "author": inner.bot, "content": content,
        "timestamp": TIMESTAMP, "tts": false, "mentions": [], "attachments": [],
        "components": params.get("components").cloned().unwrap_or(json!([])),
        "type": if reference.is_some() { 19 } else { 0 },
    });
    if let (Some(reference), Some(object)) = (reference, message.as_object_mut()) {
        object.insert("message_reference".into(), reference);
    }
    state.history.entry(id).or_default().push(message.clone());
    json_response(StatusCode::OK, &message)
}

async fn interaction_callback(
    State(inner): State<Arc<Inner>>,
    Path((id, token)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let path = format!("/interactions/{id}/{token}/callback");
    if let Some(r) = admit(&inner, "POST", "interaction_callback", path, None, &body) {
        return r;
    }
    if token != format!("interaction-token-{id}") {
        return error(401, 50027, "Invalid Webhook Token");
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn attachment(
    State(inner): State<Arc<Inner>>,
    Path((id, name)): Path<(String, String)>,
) -> Response {
    let path = format!("/attachments/{id}/{name}");
    if let Some(r) = admit(&inner, "GET", "attachment", path, None, &Bytes::new()) {
        return r;
    }
    match inner.lock().files.get(&id).cloned() {
        Some(bytes) => (StatusCode::OK, bytes).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn gateway(State(inner): State<Arc<Inner>>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(move |socket| async move { serve_gateway(inner, socket).await })
}

async fn send(socket: &mut WebSocket, payload: &Value) -> bool {
    socket
        .send(Message::Text(payload.to_string().into()))
        .await
        .is_ok()
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let frame = CloseFrame {
        code,
        reason: reason.to_owned().into(),
    };
    let _gone_anyway = socket.send(Message::Close(Some(frame))).await;
}

/// What one connection does next after the pending work is looked at.
enum Next {
    Send(Value),
    Drop,
    Close(u16, String),
    Wait,
}

/// The connection's view of the session: which one it serves and the last sequence it sent.
#[derive(Default)]
struct Serving {
    session: Option<(String, i64)>,
    resumed_pending: bool,
}

impl Serving {
    /// The next thing to send: a scripted control, the next dispatch, RESUMED after a replay.
    fn next(&mut self, inner: &Inner) -> Next {
        let mut state = inner.lock();
        let Some((id, sent)) = &self.session else {
            return Next::Wait;
        };
        match state.controls.pop_front() {
            Some(Control::Reconnect) => return Next::Send(json!({ "op": 7, "d": Value::Null })),
            Some(Control::InvalidSession(resumable)) => {
                if !resumable && let Some(session) = state.session.as_mut() {
                    session.invalid = true;
                }
                return Next::Send(json!({ "op": 9, "d": resumable }));
            }
            Some(Control::Close(code, reason)) => return Next::Close(code, reason),
            None => {}
        }
        let event = state
            .session
            .as_ref()
            .filter(|s| &s.id == id)
            .and_then(|s| s.events.get(usize::try_from(*sent).unwrap_or(usize::MAX)))
            .cloned();
        match event {
            Some(_) if state.drop_before_next_dispatch => {
                state.drop_before_next_dispatch = false;
                Next::Drop
            }
            Some(event) => Next::Send(event),
            None if self.resumed_pending => {
                self.resumed_pending = false;
                Next::Send(json!({ "op": 0, "t": "RESUMED", "s": Value::Null, "d": {} }))
            }
            None => Next::Wait,
        }
    }

    fn sent(&mut self, payload: &Value) {
        if let (Some((_, sent)), Some(s)) = (self.session.as_mut(), payload["s"].as_i64()) {
            *sent = s;
        }
    }
}

/// What the server answers a client payload with.
enum Answer {
    Send(Value),
    Close(u16, &'static str),
    Nothing,
}

/// Handles one client payload: heartbeat, IDENTIFY, RESUME.
fn on_payload(inner: &Inner, payload: &Value, serving: &mut Serving) -> Answer {
    inner.lock().payloads.push(payload.clone());
    let authenticated = payload["d"]["token"].as_str() == Some(inner.token.as_str());
    match payload["op"].as_u64() {
        Some(1) => {
            let mut state = inner.lock();
            if state.unanswered_heartbeats > 0 {
                state.unanswered_heartbeats -= 1;
                Answer::Nothing
            } else {
                Answer::Send(json!({ "op": 11 }))
            }
        }
        Some(2 | 6) if !authenticated => Answer::Close(4004, "Authentication failed."),
        Some(2) => {
            let mut state = inner.lock();
            state.sessions_started += 1;
            let id = format!("session-{}", state.sessions_started);
            let ready = json!({ "op": 0, "t": "READY", "s": 1, "d": {
                "v": 10, "user": inner.bot, "guilds": [], "session_id": id,
                "resume_gateway_url": format!("ws://{}/gateway", inner.base()),
                "application": { "id": inner.bot["id"], "flags": 0 },
            }});
            state.session = Some(GatewaySession {
                id: id.clone(),
                events: vec![ready],
                invalid: false,
            });
            serving.session = Some((id, 0));
            Answer::Nothing
        }
        Some(6) => {
            let wanted = payload["d"]["session_id"].as_str().unwrap_or_default();
            let seq = payload["d"]["seq"].as_i64().unwrap_or(0);
            let resumable = inner
                .lock()
                .session
                .as_ref()
                .is_some_and(|s| s.id == wanted && !s.invalid);
            if resumable {
                serving.session = Some((wanted.to_owned(), seq));
                serving.resumed_pending = true;
                Answer::Nothing
            } else {
                Answer::Send(json!({ "op": 9, "d": false }))
            }
        }
        _ => Answer::Nothing,
    }
}

/// One client connection: HELLO, then the client's payloads and the session's dispatches.
async fn serve_gateway(inner: Arc<Inner>, mut socket: WebSocket) {
    let heartbeat_ms = {
        let mut state = inner.lock();
        state.connections += 1;
        state.heartbeat_ms
    };
    let mut changed = inner.changed.subscribe();
    let hello = json!({ "op": 10, "d": { "heartbeat_interval": heartbeat_ms }, "s": Value::Null, "t": Value::Null });
    if !send(&mut socket, &hello).await {
        return;
    }
    let mut serving = Serving::default();
    loop {
        match serving.next(&inner) {
            Next::Send(payload) => {
                serving.sent(&payload);
                if !send(&mut socket, &payload).await {
                    return;
                }
                continue;
            }
            // Dropping the socket ends the TCP connection without a close frame.
            Next::Drop => return,
            Next::Close(code, reason) => {
                close(&mut socket, code, &reason).await;
                return;
            }
            Next::Wait => {}
        }
        tokio::select! {
            frame = socket.recv() => {
                let text = match frame {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                    Some(Ok(_)) => continue,
                };
                let Ok(payload) = serde_json::from_str::<Value>(text.as_str()) else {
                    close(&mut socket, 4002, "Decode error").await;
                    return;
                };
                match on_payload(&inner, &payload, &mut serving) {
                    Answer::Send(answer) => {
                        if !send(&mut socket, &answer).await {
                            return;
                        }
                    }
                    Answer::Close(code, reason) => {
                        close(&mut socket, code, reason).await;
                        return;
                    }
                    Answer::Nothing => {}
                }
            }
            _ = changed.changed() => {}
        }
    }
}
