//! The HTTP server behind [`MockProvider`]: one axum app on `127.0.0.1:0` per mock.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::serve::{IncomingStream, Listener};
use futures::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::task::JoinHandle;

use crate::turn::{Outcome, Part, Turn};
use crate::wire::{self, ReplyCtx};

/// Which vendor format a [`MockProvider`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenAi,
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic,
}

impl Wire {
    fn path(self) -> &'static str {
        match self {
            Wire::OpenAi => "/v1/chat/completions",
            Wire::Anthropic => "/v1/messages",
        }
    }

    fn error_body(self, status: u16, message: &str) -> String {
        match self {
            Wire::OpenAi => wire::openai_error(status, message),
            Wire::Anthropic => wire::anthropic_error(status, message),
        }
        .to_string()
    }
}

/// A request the mock received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// Path without the query, e.g. `/v1/messages`.
    pub path: String,
    /// Headers with lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Value::Null` when empty or not JSON, or in zero-latency mode).
    pub body: Value,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug)]
struct Inner {
    wire: Wire,
    script: Mutex<VecDeque<Turn>>,
    repeat: Mutex<Repeat>,
    requests: Mutex<Vec<RecordedRequest>>,
    required_key: Mutex<Option<String>>,
    zero_latency: AtomicBool,
    /// See [`MockProvider::hold_until`].
    hold_until: Mutex<Option<u64>>,
    /// The number of requests received, for handlers waiting on `hold_until`.
    arrived: tokio::sync::watch::Sender<u64>,
    /// See [`MockProvider::serve_models`].
    models: Mutex<Option<Vec<String>>>,
    /// The top-level fields of the last request body that passed the zero-latency check,
    /// slices of that body (see [`crate::scan`]).
    seen: Mutex<Vec<(Bytes, Bytes)>>,
    /// TCP connections accepted so far (see [`MockProvider::connections_accepted`]).
    connections: AtomicU64,
    /// Requests whose client went away before their answer was ready.
    abandoned: tokio::sync::watch::Sender<u64>,
    /// See [`MockProvider::await_turns`].
    await_turns: Mutex<Option<Duration>>,
}

/// The next scripted turn pushed within [`MockProvider::await_turns`]'s wait, if one is set.
async fn awaited_turn(inner: &Inner) -> Option<Turn> {
    let wait = (*lock(&inner.await_turns))?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if let Some(turn) = lock(&inner.script).pop_front() {
            return Some(turn);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The turn [`MockProvider::repeat`] set, how many times one was set (a rendering made from
/// an earlier one is not kept), and its streamed reply rendered once (zero-latency mode only).
#[derive(Debug, Default)]
struct Repeat {
    turn: Option<Turn>,
    set: u64,
    rendered: Option<Rendered>,
}

/// The SSE body of a streamed reply to the repeated turn for one `model` (and OpenAI's
/// `include_usage`), split where the request's sequence number goes (ids such as
/// `chatcmpl-mock-N`): a zero-latency mock answers from these bytes instead of building the
/// chunks as JSON values and serializing them for every request, which, like parsing the
/// request, is the vendor's work that a benchmark of the runtime should not be measuring.
/// The bytes are those the frames of [`wire`] give for the same request.
#[derive(Debug)]
struct Rendered {
    model: String,
    include_usage: bool,
    pieces: Vec<Vec<u8>>,
}

impl Rendered {
    /// The body for request number `n`.
    fn body(&self, n: u64) -> Bytes {
        let n = n.to_string();
        let len = self.pieces.iter().map(Vec::len).sum::<usize>()
            + n.len() * self.pieces.len().saturating_sub(1);
        let mut body = Vec::with_capacity(len);
        for (i, piece) in self.pieces.iter().enumerate() {
            if i > 0 {
                body.extend_from_slice(n.as_bytes());
            }
            body.extend_from_slice(piece);
        }
        Bytes::from(body)
    }
}

/// Locks a mutex, recovering the data if a panicking test thread poisoned it: the mock's state
/// is plain data that stays consistent, and a second panic here would hide the first.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The mock's listener: counts connections, turns Nagle off and hands each connection a
/// switch that resets it ([`Turn::reset`]).
struct ResettableListener {
    inner: tokio::net::TcpListener,
    counted: Arc<Inner>,
}

impl Listener for ResettableListener {
    type Io = ResettableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = Listener::accept(&mut self.inner).await;
        self.counted.connections.fetch_add(1, Ordering::SeqCst);
        // A vendor's server answers without Nagle's delay; without this a reply written in
        // more than one segment can wait for the client's ACK of the first.
        let _ = stream.set_nodelay(true);
        let stream = ResettableStream {
            stream,
            reset: Arc::new(AtomicBool::new(false)),
        };
        (stream, addr)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection whose switch, once set, makes every read and write fail; the server then
/// drops it, and with `SO_LINGER` 0 the close is a TCP reset, not an orderly FIN.
struct ResettableStream {
    stream: tokio::net::TcpStream,
    reset: Arc<AtomicBool>,
}

impl ResettableStream {
    fn check(&self) -> std::io::Result<()> {
        if !self.reset.load(Ordering::SeqCst) {
            return Ok(());
        }
        let _ = self.stream.set_zero_linger();
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "adf-testkit: scripted connection reset",
        ))
    }
}

impl AsyncRead for ResettableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResettableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// What a request's handler knows of its connection: the switch that resets it.
#[derive(Clone)]
struct Connection {
    reset: Arc<AtomicBool>,
}

impl axum::extract::connect_info::Connected<IncomingStream<'_, ResettableListener>> for Connection {
    fn connect_info(stream: IncomingStream<'_, ResettableListener>) -> Self {
        Connection {
            reset: stream.io().reset.clone(),
        }
    }
}

/// A base URL (`http://127.0.0.1:PORT/v1`) where nothing listens, so connecting is refused:
/// a port the system handed out and that was closed again. A "model server that is not
/// running" for tests of refused connections.
///
/// # Panics
/// When no loopback port can be bound.
pub fn refused_base_url() -> String {
    #[allow(clippy::expect_used)]
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").expect("adf-testkit: bind 127.0.0.1:0");
    #[allow(clippy::expect_used)]
    let addr = listener.local_addr().expect("adf-testkit: local_addr");
    drop(listener);
    format!("http://{addr}/v1")
}

/// A scripted model-provider server on `127.0.0.1` (see the crate docs). The server stops when
/// the value is dropped.
#[derive(Debug)]
pub struct MockProvider {
    inner: Arc<Inner>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for MockProvider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockProvider {
    /// Starts an OpenAI Chat Completions mock.
    pub async fn openai() -> Self {
        Self::start(Wire::OpenAi).await
    }

    /// Starts an Anthropic Messages mock.
    pub async fn anthropic() -> Self {
        Self::start(Wire::Anthropic).await
    }

    /// Starts a mock of the given format on a fresh loopback port.
    ///
    /// # Panics
    /// When no loopback port can be bound: a test helper cannot do anything useful then.
    pub async fn start(wire: Wire) -> Self {
        let inner = Arc::new(Inner {
            wire,
            script: Mutex::new(VecDeque::new()),
            repeat: Mutex::new(Repeat::default()),
            requests: Mutex::new(Vec::new()),
            required_key: Mutex::new(None),
            zero_latency: AtomicBool::new(false),
            hold_until: Mutex::new(None),
            arrived: tokio::sync::watch::Sender::new(0),
            models: Mutex::new(None),
            seen: Mutex::new(Vec::new()),
            connections: AtomicU64::new(0),
            abandoned: tokio::sync::watch::Sender::new(0),
            await_turns: Mutex::new(None),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(inner.clone())
            .into_make_service_with_connect_info::<Connection>();
        #[allow(clippy::expect_used)]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("adf-testkit: bind 127.0.0.1:0");
        #[allow(clippy::expect_used)]
        let addr = listener.local_addr().expect("adf-testkit: local_addr");
        let listener = ResettableListener {
            inner: listener,
            counted: inner.clone(),
        };
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("adf-testkit: mock server stopped: {e}");
            }
        });
        MockProvider { inner, addr, task }
    }

    /// The format this mock speaks.
    pub fn wire(&self) -> Wire {
        self.inner.wire
    }

    /// The API root to configure as a provider `baseUrl`: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The bound socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues one scripted response; each request consumes the oldest.
    pub fn push(&self, turn: Turn) -> &Self {
        lock(&self.inner.script).push_back(turn);
        self
    }

    /// Queues several responses in order.
    pub fn push_all(&self, turns: impl IntoIterator<Item = Turn>) -> &Self {
        lock(&self.inner.script).extend(turns);
        self
    }

    /// Answers with `turn` whenever the queue is empty (instead of the "script exhausted"
    /// error), for benchmarks and long runs.
    pub fn repeat(&self, turn: Turn) -> &Self {
        let mut repeat = lock(&self.inner.repeat);
        repeat.turn = Some(turn);
        repeat.set += 1;
        repeat.rendered = None;
        self
    }

    /// Requires this API key (`x-api-key` for Anthropic, `Authorization: Bearer` for OpenAI);
    /// any other key gets the vendor's 401 without consuming a scripted turn.
    pub fn require_api_key(&self, key: impl Into<String>) -> &Self {
        *lock(&self.inner.required_key) = Some(key.into());
        self
    }

    /// Also answers `GET /v1/models` with these model ids, in the vendor's list format (OpenAI
    /// `{object: "list", data: [{id, object: "model"}]}`, Anthropic `{data: [{id, type:
    /// "model", display_name}], has_more: false}`), behind the same key check as chat requests.
    pub fn serve_models(&self, ids: impl IntoIterator<Item = impl Into<String>>) -> &Self {
        *lock(&self.inner.models) = Some(ids.into_iter().map(Into::into).collect());
        self
    }

    /// Benchmark mode: ignores scripted delays, sends text and arguments in one fragment each,
    /// and records only the method, path and headers of requests (bodies become `Null`). The
    /// body's check is structural (see the `scan` module) and a streamed reply to the
    /// [`repeat`](Self::repeat)ed turn comes from bytes rendered once, the same bytes the
    /// scripted mode sends: the vendor's work is not what a benchmark of the runtime measures.
    pub fn zero_latency(&self, on: bool) -> &Self {
        self.inner.zero_latency.store(on, Ordering::Relaxed);
        self
    }

    /// Answers nothing until `count` requests have arrived in total (then everything waiting
    /// is answered, each with its own scripted turn). A test of concurrency: requests that are
    /// sent one after the other never reach the count, so the test fails instead of passing
    /// by luck; put a timeout around the code under test.
    pub fn hold_until(&self, count: u64) -> &Self {
        *lock(&self.inner.hold_until) = Some(count);
        self
    }

    /// A request that finds the script empty waits up to `wait` for a [`push`](Self::push)
    /// before the "script exhausted" error: for a test that scripts a turn from something
    /// only known once the request is on its way (an inbox row's id the model replies to).
    pub fn await_turns(&self, wait: Duration) -> &Self {
        *lock(&self.inner.await_turns) = Some(wait);
        self
    }

    /// Returns once `count` requests have arrived in total (at once when they already have): the
    /// event to wait on instead of polling [`request_count`](Self::request_count).
    pub async fn requests_arrived(&self, count: usize) {
        let count = u64::try_from(count).unwrap_or(u64::MAX);
        let mut arrived = self.inner.arrived.subscribe();
        // The sender lives in `inner`, which `self` keeps alive: the channel cannot close.
        let _ = arrived.wait_for(|n| *n >= count).await;
    }

    /// Stops the server and returns once its listener is closed, so a connection to
    /// [`addr`](Self::addr) is refused from then on (dropping the mock only asks it to stop).
    pub async fn shutdown(mut self) {
        self.task.abort();
        // The task ends (cancelled) only after its future, listener included, is dropped.
        let _ = (&mut self.task).await;
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.inner.requests).clone()
    }

    /// How many TCP connections the server accepted so far: a client that keeps its
    /// connections alive sends many requests over one.
    pub fn connections_accepted(&self) -> u64 {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// Returns once `count` requests were abandoned in total: their client closed the
    /// connection while the mock was still preparing the answer (held by
    /// [`hold_until`](Self::hold_until) or a turn's delay). The event that shows a cancelled
    /// request really went away rather than being left running.
    pub async fn requests_abandoned(&self, count: u64) {
        let mut abandoned = self.inner.abandoned.subscribe();
        // The sender lives in `inner`, which `self` keeps alive: the channel cannot close.
        let _ = abandoned.wait_for(|n| *n >= count).await;
    }

    /// How many requests were received.
    pub fn request_count(&self) -> usize {
        lock(&self.inner.requests).len()
    }

    /// The latest request, if any.
    pub fn last_request(&self) -> Option<RecordedRequest> {
        lock(&self.inner.requests).last().cloned()
    }

    /// Scripted turns not yet consumed.
    pub fn remaining(&self) -> usize {
        lock(&self.inner.script).len()
    }
}

/// What a reply depends on in a request body: whether it is a JSON object, its `model`,
/// `stream` and `stream_options.include_usage`.
#[derive(Debug, Default)]
struct Asked {
    object: bool,
    model: Option<String>,
    stream: bool,
    include_usage: bool,
}

impl Asked {
    fn of(body: &Value) -> Asked {
        Asked {
            object: body.is_object(),
            model: body.get("model").and_then(Value::as_str).map(str::to_owned),
            stream: body.get("stream").and_then(Value::as_bool) == Some(true),
            include_usage: Self::include_usage(body.get("stream_options")),
        }
    }

    // Keys read one by one: `Value::pointer` allocates each segment to unescape it.
    fn include_usage(options: Option<&Value>) -> bool {
        options
            .and_then(|options| options.get("include_usage"))
            .and_then(Value::as_bool)
            == Some(true)
    }
}

/// In zero-latency mode the body is only checked to be a JSON object (structurally: see
/// [`crate::scan`]) and read for the fields the reply depends on: building a tree of the whole
/// request (about 20 KB of tool schemas) and dropping it again was the larger part of the
/// mock's cost per request, which a benchmark of the runtime should not be measuring. What
/// comes back is what [`Asked::of`] reads from a parse of the whole body, or nothing asked
/// (not an object) when the body is not a JSON object or one of those fields is not JSON.
fn probe(body: &Bytes, seen: &Mutex<Vec<(Bytes, Bytes)>>) -> Asked {
    let mut seen = lock(seen);
    let Some(top) = crate::scan::top_level_fields(body, &seen) else {
        return Asked::default();
    };
    seen.clear();
    seen.extend(
        top.iter()
            .map(|(key, value)| (body.slice_ref(key), body.slice_ref(value))),
    );
    drop(seen);
    let mut asked = Asked {
        object: true,
        ..Asked::default()
    };
    // As in a parse of the whole object, a repeated key keeps its last value.
    for (key, raw) in top {
        let parsed = match (key, raw) {
            (b"stream", b"true") => Ok(Value::Bool(true)),
            (b"stream", b"false") => Ok(Value::Bool(false)),
            (b"model", [b'"', ..]) => serde_json::from_slice::<String>(raw).map(Value::String),
            (b"model" | b"stream" | b"stream_options", _) => serde_json::from_slice(raw),
            _ => continue,
        };
        let Ok(value) = parsed else {
            return Asked::default();
        };
        match key {
            b"model" => asked.model = value.as_str().map(str::to_owned),
            b"stream" => asked.stream = value.as_bool() == Some(true),
            _ => asked.include_usage = Asked::include_usage(Some(&value)),
        }
    }
    asked
}

fn json_response(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Counts a request as abandoned when dropped armed: the server drops a handler whose client
/// closed the connection before the answer was ready.
struct Abandoned(Option<Arc<Inner>>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        if let Some(inner) = self.0.take() {
            inner.abandoned.send_modify(|n| *n += 1);
        }
    }
}

async fn handle(
    State(inner): State<Arc<Inner>>,
    ConnectInfo(connection): ConnectInfo<Connection>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut pending = Abandoned(Some(inner.clone()));
    let response = answer(inner, &connection, method, uri, headers, body).await;
    pending.0 = None;
    response
}

async fn answer(
    inner: Arc<Inner>,
    connection: &Connection,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let zero = inner.zero_latency.load(Ordering::Relaxed);
    let (asked, n) = record(&inner, zero, &method, &uri, &headers, &body).await;
    let wire = inner.wire;

    let models = lock(&inner.models).clone();
    if let Some(models) = models.filter(|_| method == Method::GET && uri.path() == "/v1/models") {
        if let Some(resp) = check_auth(&inner, &headers) {
            return resp;
        }
        return model_list(wire, &models);
    }
    if method != Method::POST || uri.path() != wire.path() {
        let msg = format!(
            "adf-testkit: no route for {method} {} (this mock serves POST {})",
            uri.path(),
            wire.path()
        );
        return json_response(404, wire.error_body(404, &msg));
    }
    if let Some(resp) = check_auth(&inner, &headers) {
        return resp;
    }
    if body.is_empty() || !asked.object {
        return json_response(
            400,
            wire.error_body(400, "adf-testkit: request body is not a JSON object"),
        );
    }

    let request = Request {
        model: asked.model.as_deref().unwrap_or("mock-model"),
        n,
        zero,
        stream: asked.stream,
        include_usage: wire == Wire::OpenAi && asked.include_usage,
    };
    let next = lock(&inner.script).pop_front();
    let repeated = next.is_none();
    if zero && repeated && request.stream {
        let body = lock(&inner.repeat)
            .rendered
            .as_ref()
            .filter(|r| r.model == request.model && r.include_usage == request.include_usage)
            .map(|r| r.body(n));
        if let Some(body) = body {
            return sse_response(vec![body], false);
        }
    }
    let mut repeat_set = 0;
    let next = next.or_else(|| {
        let repeat = lock(&inner.repeat);
        repeat_set = repeat.set;
        repeat.turn.clone()
    });
    let next = match next {
        Some(turn) => Some(turn),
        None => awaited_turn(&inner).await,
    };
    let turn = match next {
        Some(t) => t,
        None => {
            // 418 is deliberately not a status a provider retries, so the test fails at once
            // with this text in the provider's error instead of backing off.
            let msg = format!(
                "adf-testkit: script exhausted: request #{n} ({} {}) has no scripted Turn; push() more turns",
                method,
                uri.path()
            );
            eprintln!("{msg}");
            return json_response(418, wire.error_body(418, &msg));
        }
    };

    if let Some(delay) = turn.delay.filter(|_| !zero) {
        tokio::time::sleep(delay).await;
    }

    let parts = match &turn.outcome {
        Outcome::Reset => {
            // The response is never written: writing it fails and the connection is reset.
            connection.reset.store(true, Ordering::SeqCst);
            return json_response(500, wire.error_body(500, "adf-testkit: reset"));
        }
        Outcome::Hang => return std::future::pending().await,
        Outcome::Error {
            status,
            message,
            raw_body,
        } => {
            let body = raw_body
                .clone()
                .unwrap_or_else(|| wire.error_body(*status, message));
            let mut resp = json_response(*status, body);
            if let Some(ra) = turn
                .retry_after
                .as_deref()
                .and_then(|v| HeaderValue::from_str(v).ok())
            {
                resp.headers_mut().insert(header::RETRY_AFTER, ra);
            }
            return resp;
        }
        Outcome::Reply(parts) => parts,
    };
    let repeat = (repeated && !turn.abort_mid_stream).then_some(repeat_set);
    reply(&inner, &request, &turn, parts, repeat)
}

/// Records a request (and releases the requests held until it arrived): what it asked for and
/// its number, from 1.
async fn record(
    inner: &Inner,
    zero: bool,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> (Asked, u64) {
    let (parsed, asked) = if zero {
        (Value::Null, probe(body, &inner.seen))
    } else {
        let parsed = serde_json::from_slice(body).unwrap_or(Value::Null);
        let asked = Asked::of(&parsed);
        (parsed, asked)
    };
    let record = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: parsed,
    };
    let n = {
        let mut reqs = lock(&inner.requests);
        reqs.push(record);
        reqs.len() as u64
    };
    inner.arrived.send_replace(n);
    let hold = *lock(&inner.hold_until);
    if let Some(count) = hold {
        let mut arrived = inner.arrived.subscribe();
        // The sender lives in `inner`, so the channel cannot close while this handler runs.
        let _ = arrived.wait_for(|n| *n >= count).await;
    }
    (asked, n)
}

/// The answer to `GET /v1/models` in the wire's shape.
fn model_list(wire: Wire, models: &[String]) -> Response {
    let body = match wire {
        Wire::OpenAi => serde_json::json!({
            "object": "list",
            "data": models.iter().map(|id| serde_json::json!({"id": id, "object": "model", "owned_by": "adf-testkit"})).collect::<Vec<_>>(),
        }),
        Wire::Anthropic => serde_json::json!({
            "data": models.iter().map(|id| serde_json::json!({"id": id, "type": "model", "display_name": id})).collect::<Vec<_>>(),
            "has_more": false,
        }),
    };
    json_response(200, body.to_string())
}

/// What a completion request asked for, as the reply needs it.
struct Request<'a> {
    model: &'a str,
    /// The request's number, from 1.
    n: u64,
    /// Zero-latency mode: no delays and whole-text chunks.
    zero: bool,
    stream: bool,
    include_usage: bool,
}

/// The reply to a completion request: JSON, or an SSE stream. `repeat` is the repeated turn's
/// setting when this reply answers it and may be kept rendered for the next requests.
fn reply(
    inner: &Inner,
    request: &Request<'_>,
    turn: &Turn,
    parts: &[Part],
    repeat: Option<u64>,
) -> Response {
    let wire = inner.wire;
    let (model, n, zero, include_usage) = (
        request.model,
        request.n,
        request.zero,
        request.include_usage,
    );
    let ctx = |n| ReplyCtx {
        model,
        n,
        usage: turn.usage,
        stop_reason: turn.stop_reason.as_deref(),
        chunk_chars: if zero { usize::MAX } else { turn.chunk_chars },
    };
    if !request.stream {
        let body = match wire {
            Wire::OpenAi => wire::openai_json(parts, &ctx(n)),
            Wire::Anthropic => wire::anthropic_json(parts, &ctx(n)),
        };
        return json_response(200, body.to_string());
    }

    let frames = |n| -> Vec<String> {
        match wire {
            Wire::OpenAi => wire::openai_sse(parts, &ctx(n), include_usage)
                .into_iter()
                .map(|d| format!("data: {d}\n\n"))
                .collect(),
            Wire::Anthropic => wire::anthropic_sse(parts, &ctx(n))
                .into_iter()
                .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
                .collect(),
        }
    };
    if let Some(repeat_set) = repeat.filter(|_| zero) {
        // Rendered with a number no request reaches and split there; kept only when joining
        // the pieces with another number gives that request's bytes (the reply's own text
        // could hold the digits).
        const MARK: u64 = u64::MAX;
        let template = frames(MARK).concat();
        let pieces: Vec<&str> = template.split(MARK.to_string().as_str()).collect();
        if pieces.join(n.to_string().as_str()) == frames(n).concat() {
            let rendered = Rendered {
                model: model.to_owned(),
                include_usage,
                pieces: pieces.into_iter().map(|p| p.as_bytes().to_vec()).collect(),
            };
            let body = rendered.body(n);
            let mut repeat = lock(&inner.repeat);
            if repeat.set == repeat_set {
                repeat.rendered = Some(rendered);
            }
            return sse_response(vec![body], false);
        }
    }
    sse_response(
        frames(n).into_iter().map(Bytes::from).collect(),
        turn.abort_mid_stream,
    )
}

fn sse_response(frames: Vec<Bytes>, abort_mid_stream: bool) -> Response {
    let keep = if abort_mid_stream {
        frames.len() / 2
    } else {
        frames.len()
    };
    let head = futures::stream::iter(
        frames
            .into_iter()
            .take(keep)
            .map(Ok::<Bytes, std::io::Error>),
    );
    let body = if abort_mid_stream {
        // An error item makes hyper abort the connection mid-body, as a reset would.
        let tail = futures::stream::iter([Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "adf-testkit: scripted mid-stream abort",
        ))]);
        Body::from_stream(head.chain(tail))
    } else {
        Body::from_stream(head)
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// Rejects a request the real vendor would reject for missing or wrong credentials.
fn check_auth(inner: &Inner, headers: &HeaderMap) -> Option<Response> {
    let wire = inner.wire;
    let required = lock(&inner.required_key).clone();
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    match wire {
        Wire::Anthropic => {
            let Some(key) = get("x-api-key") else {
                return Some(json_response(
                    401,
                    wire.error_body(401, "x-api-key header is required"),
                ));
            };
            if required.as_deref().is_some_and(|r| r != key) {
                return Some(json_response(
                    401,
                    wire.error_body(401, "invalid x-api-key"),
                ));
            }
            if get("anthropic-version").is_none() {
                return Some(json_response(
                    400,
                    wire.error_body(400, "anthropic-version: header is required"),
                ));
            }
        }
        Wire::OpenAi => {
            if let Some(r) = required {
                let ok = get("authorization")
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .is_some_and(|k| k == r);
                if !ok {
                    return Some(json_response(
                        401,
                        wire.error_body(401, "Incorrect API key provided"),
                    ));
                }
            }
        }
    }
    None
}
