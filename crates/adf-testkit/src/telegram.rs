//! A local Telegram Bot API server, built from the public Bot API documentation
//! (<https://core.telegram.org/bots/api>): requests go to `/bot<token>/<method>` with
//! parameters in the query string or a JSON body, and every answer is
//! `{"ok": true, "result": …}` or `{"ok": false, "error_code": …, "description": …,
//! "parameters"?: {"retry_after": …}}`.
//!
//! Methods: `getMe`, `getUpdates` (long polling: `offset` confirms every update below it,
//! `timeout` seconds of waiting when nothing is pending, `limit`), `sendMessage` (records the
//! call and answers a `Message`), `answerCallbackQuery`, `getChat`, `getChatMemberCount` and
//! `getChatAdministrators` (chats learnt from pushed updates; the first sender seen in a group
//! is its creator, the bot an administrator), `getFile` and the file download
//! `/file/bot<token>/<file_path>` ([`TelegramServer::add_file`]). A test pushes updates ([`TelegramServer::push_message`],
//! [`TelegramServer::push_callback_query`]) and scripts one-shot faults per method
//! ([`TelegramFault`]: 429 with `retry_after`, 401, a connection dropped mid-answer, any other
//! error answer). A request with a token other than the server's is answered 401
//! `Unauthorized`, as the platform does.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

/// The longest `getUpdates` wait this server grants, whatever `timeout` asks (tests stay
/// bounded).
const MAX_POLL_WAIT: Duration = Duration::from_secs(5);

/// A one-shot fault the next call of a method meets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TelegramFault {
    /// `429 Too Many Requests` with `parameters.retry_after` seconds.
    RetryAfter(u64),
    /// `401 Unauthorized`, the answer to a token the platform refuses.
    Unauthorized,
    /// Headers and part of the body, then the connection is aborted (for `getUpdates`, after
    /// the long poll found updates: they stay pending, as on the platform).
    DropConnection,
    /// Any other error answer, e.g. `400` `Bad Request: chat not found` for a chat the bot
    /// cannot reach.
    Error {
        /// The HTTP status and `error_code`.
        code: u16,
        /// The `description`.
        description: String,
    },
}

/// One request the server answered (or dropped).
#[derive(Debug, Clone, PartialEq)]
pub struct TelegramCall {
    /// The Bot API method, e.g. `sendMessage`.
    pub method: String,
    /// The parameters, from the query string and the JSON body merged.
    pub params: Map<String, Value>,
}

#[derive(Default)]
struct State_ {
    pending: VecDeque<Value>,
    next_update_id: i64,
    next_message_id: i64,
    calls: Vec<TelegramCall>,
    faults: HashMap<String, VecDeque<TelegramFault>>,
    chats: HashMap<i64, Value>,
    /// The senders seen in each chat, in order: the first is a group's creator.
    senders: HashMap<i64, Vec<Value>>,
    files: HashMap<String, Vec<u8>>,
}

struct Inner {
    token: String,
    bot: Value,
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

/// A Telegram Bot API server on `127.0.0.1:0` for one bot.
#[derive(Debug)]
pub struct TelegramServer {
    inner: Arc<Inner>,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").finish_non_exhaustive()
    }
}

impl Drop for TelegramServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TelegramServer {
    /// Starts a server whose bot answers to `token` and is called `@<username>`.
    pub async fn start(token: &str, username: &str) -> Self {
        let bot_id: i64 = 7_000_000_001;
        let inner = Arc::new(Inner {
            token: token.to_owned(),
            bot: json!({
                "id": bot_id, "is_bot": true, "first_name": username,
                "username": username, "can_join_groups": true,
                "can_read_all_group_messages": false, "supports_inline_queries": false
            }),
            state: Mutex::new(State_ {
                next_update_id: 100,
                next_message_id: 1,
                ..State_::default()
            }),
            arrived: Notify::new(),
        });
        let app = Router::new()
            .route("/{bot}/{method}", any(handle))
            .route("/file/{bot}/{*path}", any(download))
            .with_state(inner.clone());
        #[allow(clippy::expect_used)]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("adf-testkit: bind 127.0.0.1:0");
        #[allow(clippy::expect_used)]
        let addr = listener.local_addr().expect("adf-testkit: local_addr");
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("adf-testkit: telegram server stopped: {e}");
            }
        });
        TelegramServer { inner, addr, task }
    }

    /// The API root to configure (`config.api_root`), e.g. `http://127.0.0.1:PORT`.
    pub fn api_root(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bot's `User` object, as `getMe` answers it.
    pub fn bot(&self) -> Value {
        self.inner.bot.clone()
    }

    /// Queues a text message in `chat` from user `from` (`{id, username?, first_name?}`) as a
    /// new update and returns its `update_id`. `chat` is a Telegram `Chat`
    /// (`{"id", "type": "private"|"group"|"supergroup", "title"?}`).
    pub fn push_message(&self, chat: Value, from: Value, text: &str) -> i64 {
        self.push_message_with(chat, from, text, Map::new())
    }

    /// As [`TelegramServer::push_message`], with extra `Message` fields (`entities`,
    /// `reply_to_message`, `document`, `message_thread_id`, …).
    pub fn push_message_with(
        &self,
        chat: Value,
        from: Value,
        text: &str,
        extra: Map<String, Value>,
    ) -> i64 {
        let mut state = self.inner.lock();
        let message_id = state.next_message_id;
        state.next_message_id += 1;
        if let Some(id) = chat.get("id").and_then(Value::as_i64) {
            state.chats.insert(id, chat.clone());
            let senders = state.senders.entry(id).or_default();
            if !senders.iter().any(|s| s.get("id") == from.get("id")) {
                senders.push(from.clone());
            }
        }
        let mut message = json!({
            "message_id": message_id, "from": from, "chat": chat,
            "date": 1_767_225_600, "text": text
        });
        if let Some(object) = message.as_object_mut() {
            object.extend(extra);
        }
        Self::queue(&mut state, "message", message, &self.inner.arrived)
    }

    /// Queues a `callback_query` update: user `from` pressed the inline button carrying
    /// `data` under the bot's message `message_id` in `chat`. Returns its `update_id`.
    pub fn push_callback_query(
        &self,
        chat: Value,
        from: Value,
        message_id: i64,
        data: &str,
    ) -> i64 {
        let mut state = self.inner.lock();
        let query = json!({
            "id": format!("cbq-{}", state.next_update_id),
            "from": from,
            "chat_instance": "1",
            "data": data,
            "message": {
                "message_id": message_id, "from": self.inner.bot, "chat": chat,
                "date": 1_767_225_600, "text": "…"
            }
        });
        Self::queue(&mut state, "callback_query", query, &self.inner.arrived)
    }

    fn queue(state: &mut State_, kind: &str, body: Value, arrived: &Notify) -> i64 {
        let update_id = state.next_update_id;
        state.next_update_id += 1;
        state
            .pending
            .push_back(json!({ "update_id": update_id, kind: body }));
        arrived.notify_waiters();
        update_id
    }

    /// Makes `bytes` downloadable as file `file_id` (`getFile`, then
    /// `/file/bot<token>/<file_path>`); returns the `file_path` `getFile` answers.
    pub fn add_file(&self, file_id: &str, bytes: &[u8]) -> String {
        self.inner
            .lock()
            .files
            .insert(file_id.to_owned(), bytes.to_vec());
        format!("documents/{file_id}")
    }

    /// The next call of `method` meets `fault` (faults of one method are met in order).
    pub fn fault(&self, method: &str, fault: TelegramFault) {
        self.inner
            .lock()
            .faults
            .entry(method.to_owned())
            .or_default()
            .push_back(fault);
    }

    /// Every call so far, in arrival order.
    pub fn calls(&self) -> Vec<TelegramCall> {
        self.inner.lock().calls.clone()
    }

    /// The calls of one method.
    pub fn calls_of(&self, method: &str) -> Vec<TelegramCall> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// Updates not yet confirmed by a `getUpdates` offset.
    pub fn pending_updates(&self) -> usize {
        self.inner.lock().pending.len()
    }
}

fn ok(result: Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "ok": true, "result": result }).to_string(),
    )
        .into_response()
}

fn error(code: u16, description: &str, parameters: Option<Value>) -> Response {
    let mut body = json!({ "ok": false, "error_code": code, "description": description });
    if let (Some(parameters), Some(object)) = (parameters, body.as_object_mut()) {
        object.insert("parameters".into(), parameters);
    }
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A 200 whose body starts and then fails: hyper aborts the connection mid-answer.
fn dropped() -> Response {
    let head = futures::stream::iter([Ok::<Bytes, std::io::Error>(Bytes::from_static(
        b"{\"ok\":true,\"result\":[",
    ))]);
    let tail = futures::stream::iter([Err(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "adf-testkit: scripted dropped connection",
    ))]);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(head.chain(tail)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn params_of(query: Option<String>, body: &Bytes) -> Map<String, Value> {
    let mut params = Map::new();
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        // Numbers and JSON objects arrive as text in a query string; keep what parses.
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
        params.insert(name.to_owned(), value);
    }
    if let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(body) {
        params.extend(object);
    }
    params
}

async fn handle(
    State(inner): State<Arc<Inner>>,
    Path((bot, method)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let params = params_of(query, &body);
    let fault = {
        let mut state = inner.lock();
        state.calls.push(TelegramCall {
            method: method.clone(),
            params: params.clone(),
        });
        state.faults.get_mut(&method).and_then(VecDeque::pop_front)
    };
    if bot.strip_prefix("bot") != Some(inner.token.as_str()) {
        return error(401, "Unauthorized", None);
    }
    match fault {
        Some(TelegramFault::RetryAfter(seconds)) => {
            return error(
                429,
                &format!("Too Many Requests: retry after {seconds}"),
                Some(json!({ "retry_after": seconds })),
            );
        }
        Some(TelegramFault::Unauthorized) => return error(401, "Unauthorized", None),
        Some(TelegramFault::DropConnection) if method != "getUpdates" => return dropped(),
        Some(TelegramFault::Error { code, description }) => {
            return error(code, &description, None);
        }
        _ => {}
    }
    let drop_after_poll = fault == Some(TelegramFault::DropConnection);
    match method.as_str() {
        "getMe" => ok(inner.bot.clone()),
        "getUpdates" => get_updates(&inner, &params, drop_after_poll).await,
        "sendMessage" => send_message(&inner, &params),
        "answerCallbackQuery" => ok(Value::Bool(true)),
        "getFile" => {
            let id = params
                .get("file_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match inner.lock().files.get(id) {
                Some(bytes) => ok(json!({
                    "file_id": id, "file_unique_id": id, "file_size": bytes.len(),
                    "file_path": format!("documents/{id}")
                })),
                None => error(400, "Bad Request: invalid file_id", None),
            }
        }
        "getChat" => match chat_of(&inner, &params) {
            Some(chat) => ok(chat),
            None => error(400, "Bad Request: chat not found", None),
        },
        "getChatAdministrators" => match chat_of(&inner, &params) {
            Some(chat) if chat.get("type").and_then(Value::as_str) == Some("private") => error(
                400,
                "Bad Request: there are no administrators in the private chat",
                None,
            ),
            Some(chat) => ok(administrators(&inner, &chat)),
            None => error(400, "Bad Request: chat not found", None),
        },
        "getChatMemberCount" => match chat_of(&inner, &params) {
            Some(chat) if chat.get("type").and_then(Value::as_str) == Some("private") => {
                ok(json!(2))
            }
            Some(_) => ok(json!(5)),
            None => error(400, "Bad Request: chat not found", None),
        },
        _ => error(404, "Not Found", None),
    }
}

async fn download(
    State(inner): State<Arc<Inner>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    inner.lock().calls.push(TelegramCall {
        method: "file".into(),
        params: Map::from_iter([("path".to_owned(), Value::String(path.clone()))]),
    });
    if bot.strip_prefix("bot") != Some(inner.token.as_str()) {
        return error(401, "Unauthorized", None);
    }
    let bytes = path
        .strip_prefix("documents/")
        .and_then(|id| inner.lock().files.get(id).cloned());
    match bytes {
        Some(bytes) => (StatusCode::OK, bytes).into_response(),
        None => error(404, "Not Found", None),
    }
}

/// A group's administrators as `ChatMember`s: the first sender seen in it is its creator,
/// the bot an administrator.
fn administrators(inner: &Inner, chat: &Value) -> Value {
    let id = chat.get("id").and_then(Value::as_i64).unwrap_or_default();
    let mut members: Vec<Value> = inner
        .lock()
        .senders
        .get(&id)
        .and_then(|senders| senders.first())
        .map(|creator| json!({ "status": "creator", "user": creator, "is_anonymous": false }))
        .into_iter()
        .collect();
    members.push(json!({ "status": "administrator", "user": inner.bot, "can_be_edited": false }));
    Value::Array(members)
}

fn chat_of(inner: &Inner, params: &Map<String, Value>) -> Option<Value> {
    let id = int_param(params, "chat_id")?;
    inner.lock().chats.get(&id).cloned()
}

fn int_param(params: &Map<String, Value>, name: &str) -> Option<i64> {
    match params.get(name)? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

async fn get_updates(
    inner: &Inner,
    params: &Map<String, Value>,
    drop_after_poll: bool,
) -> Response {
    let offset = int_param(params, "offset");
    let limit = int_param(params, "limit").unwrap_or(100).clamp(1, 100) as usize;
    let wait = Duration::from_secs(int_param(params, "timeout").unwrap_or(0).max(0) as u64)
        .min(MAX_POLL_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // Registered before the check, so a push between the check and the wait is not missed.
        let arrived = inner.arrived.notified();
        {
            let mut state = inner.lock();
            if let Some(offset) = offset {
                // An offset confirms every update below it: they are never sent again.
                state
                    .pending
                    .retain(|u| u.get("update_id").and_then(Value::as_i64).unwrap_or(0) >= offset);
            }
            if !state.pending.is_empty() || tokio::time::Instant::now() >= deadline {
                if drop_after_poll {
                    return dropped();
                }
                let batch: Vec<Value> = state.pending.iter().take(limit).cloned().collect();
                return ok(Value::Array(batch));
            }
        }
        if tokio::time::timeout_at(deadline, arrived).await.is_err() {
            continue;
        }
    }
}

fn send_message(inner: &Inner, params: &Map<String, Value>) -> Response {
    let Some(chat_id) = int_param(params, "chat_id") else {
        return error(400, "Bad Request: chat_id is empty", None);
    };
    let text = params
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if text.is_empty() {
        return error(400, "Bad Request: message text is empty", None);
    }
    let mut state = inner.lock();
    let message_id = state.next_message_id;
    state.next_message_id += 1;
    let chat = state
        .chats
        .get(&chat_id)
        .cloned()
        .unwrap_or_else(|| json!({ "id": chat_id, "type": "private" }));
    let mut message = json!({
        "message_id": message_id, "from": inner.bot, "chat": chat,
        "date": 1_767_225_600, "text": text
    });
    if let (Some(reply_to), Some(object)) = (
        int_param(params, "reply_to_message_id"),
        message.as_object_mut(),
    ) {
        object.insert("reply_to_message".into(), json!({ "message_id": reply_to }));
    }
    ok(message)
}
