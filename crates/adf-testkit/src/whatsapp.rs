//! A local WhatsApp Business Cloud API (Graph API) server, built from Meta's published Cloud
//! API documentation (<https://developers.facebook.com/docs/whatsapp/cloud-api>), and the
//! helpers that build and sign webhook payloads as Meta sends them.
//!
//! Endpoints (every one needs `Authorization: Bearer <token>`; another token is answered 401
//! with Graph error code 190, as the platform does):
//! - `GET /<version>/<phone_number_id>`: the business number (`id`, `display_phone_number`,
//!   `verified_name`, `quality_rating`);
//! - `POST /<version>/<phone_number_id>/messages`: records the body and answers
//!   `{messaging_product, contacts: [{input, wa_id}], messages: [{id}]}`;
//! - `GET /<version>/<media id>`: `{messaging_product, url, mime_type, sha256, file_size, id}`
//!   of media added with [`GraphServer::add_media`]; the `url` is this server's
//!   `/media-download/<media id>`, which answers the bytes (with the token).
//!
//! One-shot faults per operation ([`GraphOp`], [`GraphFault`]): a rate limit (HTTP 429 with a
//! Graph error code such as 130429 or 131056), or any other Graph error.
//!
//! Webhooks: [`webhook_payload`] wraps messages and statuses as a `whatsapp_business_account`
//! notification; [`text_message`], [`button_reply`], [`list_reply`], [`media_message`] and
//! [`status_update`] build their entries; [`sign`] computes the `X-Hub-Signature-256` value.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use hmac::{Hmac, KeyInit as _, Mac as _};
use serde_json::{Value, json};
use sha2::Sha256;

/// The `X-Hub-Signature-256` value of `body` under `app_secret`: `sha256=<hex HMAC-SHA256>`.
pub fn sign(app_secret: &str, body: &[u8]) -> String {
    // HMAC takes a key of any length: this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(app_secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

/// A webhook notification for `phone_number_id`: one change of field `messages` whose value
/// carries `contacts` (`[(wa_id, profile name)]`), `messages` and `statuses`.
pub fn webhook_payload(
    phone_number_id: &str,
    contacts: &[(&str, &str)],
    messages: Vec<Value>,
    statuses: Vec<Value>,
) -> Value {
    let contacts: Vec<Value> = contacts
        .iter()
        .map(|(wa_id, name)| json!({ "profile": { "name": name }, "wa_id": wa_id }))
        .collect();
    let mut value = json!({
        "messaging_product": "whatsapp",
        "metadata": { "display_phone_number": "15550001111", "phone_number_id": phone_number_id },
    });
    if let Some(object) = value.as_object_mut() {
        if !contacts.is_empty() {
            object.insert("contacts".into(), Value::Array(contacts));
        }
        if !messages.is_empty() {
            object.insert("messages".into(), Value::Array(messages));
        }
        if !statuses.is_empty() {
            object.insert("statuses".into(), Value::Array(statuses));
        }
    }
    json!({
        "object": "whatsapp_business_account",
        "entry": [{ "id": "102290129340398", "changes": [{ "value": value, "field": "messages" }] }],
    })
}

/// A text message from `from` with id `wamid`.
pub fn text_message(from: &str, wamid: &str, body: &str) -> Value {
    json!({ "from": from, "id": wamid, "timestamp": "1767225600", "type": "text", "text": { "body": body } })
}

/// A text message quoting the business's message `quoted` (a reply to it).
pub fn text_reply(from: &str, wamid: &str, quoted: &str, body: &str) -> Value {
    let mut message = text_message(from, wamid, body);
    if let Some(object) = message.as_object_mut() {
        object.insert(
            "context".into(),
            json!({ "from": "15550001111", "id": quoted }),
        );
    }
    message
}

/// A reply button pressed under the business's interactive message `quoted`.
pub fn button_reply(from: &str, wamid: &str, quoted: &str, id: &str, title: &str) -> Value {
    json!({
        "context": { "from": "15550001111", "id": quoted },
        "from": from, "id": wamid, "timestamp": "1767225600", "type": "interactive",
        "interactive": { "type": "button_reply", "button_reply": { "id": id, "title": title } },
    })
}

/// A list row chosen under the business's interactive list `quoted`.
pub fn list_reply(from: &str, wamid: &str, quoted: &str, id: &str, title: &str) -> Value {
    json!({
        "context": { "from": "15550001111", "id": quoted },
        "from": from, "id": wamid, "timestamp": "1767225600", "type": "interactive",
        "interactive": { "type": "list_reply", "list_reply": { "id": id, "title": title, "description": "" } },
    })
}

/// A media message (`kind`: image, document, audio, video, sticker) of media `media_id`.
pub fn media_message(
    from: &str,
    wamid: &str,
    kind: &str,
    media_id: &str,
    mime_type: &str,
    caption: Option<&str>,
) -> Value {
    let mut media = json!({ "id": media_id, "mime_type": mime_type, "sha256": "unchecked" });
    if let (Some(caption), Some(object)) = (caption, media.as_object_mut()) {
        object.insert("caption".into(), json!(caption));
    }
    json!({ "from": from, "id": wamid, "timestamp": "1767225600", "type": kind, kind: media })
}

/// A delivery status (`sent`, `delivered`, `read`, `failed`) of the business's message `wamid`.
pub fn status_update(wamid: &str, recipient: &str, status: &str) -> Value {
    json!({ "id": wamid, "status": status, "timestamp": "1767225601", "recipient_id": recipient })
}

/// The operations faults can be scripted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GraphOp {
    /// `POST /<phone_number_id>/messages`.
    Messages,
    /// `GET /<phone_number_id>`.
    PhoneNumber,
    /// `GET /<media id>`.
    Media,
}

/// A one-shot fault the next call of an operation meets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphFault {
    /// HTTP 429 with Graph error `code` (130429 throughput, 131056 pair rate limit, …).
    RateLimit {
        /// The Graph error code.
        code: u64,
    },
    /// Any other Graph error: HTTP `status`, error `code` and `message`.
    Error {
        /// The HTTP status.
        status: u16,
        /// The Graph error code.
        code: u64,
        /// The error message.
        message: String,
    },
}

/// One request the server answered.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphCall {
    /// `GET` or `POST`.
    pub method: String,
    /// The path, e.g. `/v23.0/123/messages`.
    pub path: String,
    /// The JSON body (`null` without one).
    pub body: Value,
}

#[derive(Default)]
struct Book {
    calls: Vec<GraphCall>,
    sends: Vec<Value>,
    next_message: u64,
    faults: HashMap<GraphOp, VecDeque<GraphFault>>,
    media: HashMap<String, (Vec<u8>, String)>,
}

struct Inner {
    token: String,
    phone_number_id: String,
    addr: SocketAddr,
    book: Mutex<Book>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Book> {
        self.book
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A Graph API server on `127.0.0.1:0` for one business phone number.
pub struct GraphServer {
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for GraphServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphServer")
            .field("addr", &self.inner.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for GraphServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn graph_error(status: u16, code: u64, message: &str) -> Response {
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "error": {
            "message": message, "type": "OAuthException", "code": code,
            "fbtrace_id": "AbCdEfGhIjK",
        }})
        .to_string(),
    )
        .into_response()
}

fn answer(value: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

impl GraphServer {
    /// Starts a server for the business number `phone_number_id`, accepting `token`.
    pub async fn start(token: &str, phone_number_id: &str) -> Self {
        #[allow(clippy::expect_used)]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("adf-testkit: bind 127.0.0.1:0");
        #[allow(clippy::expect_used)]
        let addr = listener.local_addr().expect("adf-testkit: local_addr");
        let inner = Arc::new(Inner {
            token: token.to_owned(),
            phone_number_id: phone_number_id.to_owned(),
            addr,
            book: Mutex::new(Book {
                next_message: 1,
                ..Book::default()
            }),
        });
        let app = Router::new()
            .route("/media-download/{id}", get(download))
            .route("/{version}/{id}", any(node))
            .route("/{version}/{id}/messages", any(messages))
            .with_state(inner.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("adf-testkit: graph server stopped: {e}");
            }
        });
        GraphServer { inner, task }
    }

    /// The API root to configure (`config.api_root`), e.g. `http://127.0.0.1:PORT`.
    pub fn api_root(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// Makes `bytes` (of `mime_type`) media `media_id`.
    pub fn add_media(&self, media_id: &str, bytes: &[u8], mime_type: &str) {
        self.inner
            .lock()
            .media
            .insert(media_id.to_owned(), (bytes.to_vec(), mime_type.to_owned()));
    }

    /// The next call of `op` meets `fault` (faults of one operation are met in order).
    pub fn fault(&self, op: GraphOp, fault: GraphFault) {
        self.inner
            .lock()
            .faults
            .entry(op)
            .or_default()
            .push_back(fault);
    }

    /// Every call so far, in arrival order (refused ones included).
    pub fn calls(&self) -> Vec<GraphCall> {
        self.inner.lock().calls.clone()
    }

    /// The bodies of the messages accepted so far, in order.
    pub fn sends(&self) -> Vec<Value> {
        self.inner.lock().sends.clone()
    }
}

fn authorized(inner: &Inner, headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        == Some(inner.token.as_str())
}

fn refused() -> Response {
    graph_error(
        401,
        190,
        "Invalid OAuth access token - Cannot parse access token",
    )
}

/// Records the call and returns the fault scripted for `op`, if any, as its answer.
fn begin(
    inner: &Inner,
    op: Option<GraphOp>,
    method: &Method,
    path: String,
    body: &[u8],
) -> Option<Response> {
    let mut book = inner.lock();
    book.calls.push(GraphCall {
        method: method.to_string(),
        path,
        body: serde_json::from_slice(body).unwrap_or(Value::Null),
    });
    let fault = op.and_then(|op| book.faults.get_mut(&op).and_then(VecDeque::pop_front))?;
    Some(match fault {
        GraphFault::RateLimit { code } => {
            graph_error(429, code, &format!("(#{code}) Rate limit hit"))
        }
        GraphFault::Error {
            status,
            code,
            message,
        } => graph_error(status, code, &message),
    })
}

async fn node(
    State(inner): State<Arc<Inner>>,
    Path((version, id)): Path<(String, String)>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = format!("/{version}/{id}");
    let op = if id == inner.phone_number_id {
        GraphOp::PhoneNumber
    } else {
        GraphOp::Media
    };
    if let Some(fault) = begin(&inner, Some(op), &method, path, &body) {
        return fault;
    }
    if !authorized(&inner, &headers) {
        return refused();
    }
    if method != Method::GET {
        return graph_error(400, 100, "Unsupported request - method type: post");
    }
    if op == GraphOp::PhoneNumber {
        return answer(&json!({
            "verified_name": "ADF Test Business",
            "display_phone_number": "+1 555-000-1111",
            "id": inner.phone_number_id,
            "quality_rating": "GREEN",
        }));
    }
    let media = inner.lock().media.get(&id).cloned();
    match media {
        Some((bytes, mime)) => answer(&json!({
            "messaging_product": "whatsapp",
            "url": format!("http://{}/media-download/{id}", inner.addr),
            "mime_type": mime,
            "sha256": "unchecked",
            // The Cloud API documents the size as a string.
            "file_size": bytes.len().to_string(),
            "id": id,
        })),
        None => graph_error(
            400,
            100,
            &format!("Unsupported get request. Object with ID '{id}' does not exist"),
        ),
    }
}

async fn messages(
    State(inner): State<Arc<Inner>>,
    Path((version, id)): Path<(String, String)>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = format!("/{version}/{id}/messages");
    if let Some(fault) = begin(&inner, Some(GraphOp::Messages), &method, path, &body) {
        return fault;
    }
    if !authorized(&inner, &headers) {
        return refused();
    }
    if method != Method::POST || id != inner.phone_number_id {
        return graph_error(400, 100, "Unsupported request");
    }
    let Ok(sent) = serde_json::from_slice::<Value>(&body) else {
        return graph_error(400, 100, "The parameter messaging_product is required.");
    };
    if sent.get("messaging_product").and_then(Value::as_str) != Some("whatsapp") {
        return graph_error(400, 100, "The parameter messaging_product is required.");
    }
    let Some(to) = sent.get("to").and_then(Value::as_str).map(str::to_owned) else {
        return graph_error(400, 100, "The parameter to is required.");
    };
    let mut book = inner.lock();
    let wamid = format!("wamid.OUT{}", book.next_message);
    book.next_message += 1;
    book.sends.push(sent);
    answer(&json!({
        "messaging_product": "whatsapp",
        "contacts": [{ "input": to, "wa_id": to }],
        "messages": [{ "id": wamid }],
    }))
}

async fn download(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    inner.lock().calls.push(GraphCall {
        method: "GET".into(),
        path: format!("/media-download/{id}"),
        body: Value::Null,
    });
    if !authorized(&inner, &headers) {
        return refused();
    }
    let media = inner.lock().media.get(&id).cloned();
    match media {
        Some((bytes, mime)) => {
            (StatusCode::OK, [(header::CONTENT_TYPE, mime)], bytes).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
