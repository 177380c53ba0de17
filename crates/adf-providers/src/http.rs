//! HTTP plumbing shared by the wire formats: the client, API keys, status classification and
//! the SSE-to-event adapter.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use zeroize::Zeroizing;

use super::error::{FailureKind, ProviderError};
use super::types::{Message, StreamEvent, ToolSpec};
use super::{EventStream, ProviderKind};

/// An API key. Zeroized on drop; `Debug` never shows it; the only way out is
/// [`expose`](Self::expose), used to build the request header.
#[derive(Clone)]
pub struct ApiKey(Zeroizing<String>);

impl ApiKey {
    /// Wraps a key. Surrounding whitespace (a trailing newline from a file or stdin) is dropped.
    pub fn new(key: impl Into<String>) -> Self {
        let k: String = key.into();
        ApiKey(Zeroizing::new(k.trim().to_owned()))
    }

    /// The key itself.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// `Some(key)` unless empty.
pub(crate) fn non_empty(k: Option<ApiKey>) -> Option<ApiKey> {
    k.filter(|k| !k.is_empty())
}

/// Per-read timeout: long enough for a slow model's first token, short enough that a silent
/// connection is noticed (and retried as transient).
const READ_TIMEOUT: Duration = Duration::from_secs(300);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// The process-wide client, from the workspace's one constructor (which installs the rustls
/// provider first).
pub(crate) fn client(provider: &str) -> Result<reqwest::Client, ProviderError> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            adf_egress::service_client(adf_egress::ClientOptions {
                timeout: None,
                connect_timeout: Some(CONNECT_TIMEOUT),
                read_timeout: Some(READ_TIMEOUT),
            })
            .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|message| ProviderError::Config {
            provider: provider.to_owned(),
            message: format!("cannot build the HTTP client: {message}"),
        })
}

/// Removes the key from text that came back from the server (some vendors echo it).
pub(crate) fn scrub(text: &str, key: Option<&ApiKey>) -> String {
    match key {
        Some(k) if k.expose().len() >= 4 => text.replace(k.expose(), "[redacted]"),
        _ => text.to_owned(),
    }
}

/// The vendor's error message from a JSON error body (`{"error":{"message"}}` for OpenAI and
/// OpenRouter, `{"type":"error","error":{"message"}}` for Anthropic, `{"error":"…"}` for some
/// local servers), else the body itself, shortened.
pub(crate) fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let msg = parsed.as_ref().and_then(|v| {
        let e = v.get("error")?;
        e.get("message")
            .and_then(|m| m.as_str())
            .or_else(|| e.as_str())
            .map(str::to_owned)
    });
    let msg = msg.unwrap_or_else(|| body.trim().to_owned());
    if msg.is_empty() {
        return "no details in the response".into();
    }
    let mut out: String = msg.chars().take(500).collect();
    if out.len() < msg.len() {
        out.push('…');
    }
    out
}

fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    if let Ok(secs) = v.trim().parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = chrono::DateTime::parse_from_rfc2822(v.trim()).ok()?;
    (when.with_timezone(&chrono::Utc) - chrono::Utc::now())
        .to_std()
        .ok()
}

/// Names the key and where to put it, for error messages.
pub(crate) fn key_fix(provider: &str, kind: ProviderKind) -> String {
    let set = format!("`adf identity set FILE provider:{provider}:apiKey`");
    match kind.env_var() {
        Some(var) => format!("Set {var} or store the agent's key with {set}"),
        None => format!("Store the agent's key with {set} (or set it in the runtime settings)"),
    }
}

/// Classifies a non-success response.
pub(crate) fn status_error(
    provider: &str,
    kind: ProviderKind,
    model: &str,
    status: u16,
    headers: &reqwest::header::HeaderMap,
    body: &str,
    key: Option<&ApiKey>,
) -> ProviderError {
    let message = scrub(&error_message(body), key);
    let provider_s = provider.to_owned();
    match status {
        401 | 403 => ProviderError::Auth {
            provider: provider_s,
            status,
            message,
            fix: key_fix(provider, kind),
        },
        408 | 409 | 425 | 429 | 500..=599 => ProviderError::Transient {
            provider: provider_s,
            status: Some(status),
            message,
            retry_after: retry_after(headers),
            attempts: 1,
            kind: status_kind(Some(status)),
        },
        404 => ProviderError::Request {
            provider: provider_s,
            status,
            message,
            fix: format!(
                "Check model.model_id ({model:?}) and the provider's baseUrl"
            ),
        },
        413 => ProviderError::Request {
            provider: provider_s,
            status,
            message,
            fix: "The request is too large: compact the loop or send smaller attachments".into(),
        },
        _ => ProviderError::Request {
            provider: provider_s,
            status,
            message,
            fix: "Check the model settings (model.model_id, max_tokens, temperature, top_p, reasoning, params, provider_params)".into(),
        },
    }
}

/// The failure kind of a transient status (`None`: an error inside a 200 stream).
pub(crate) fn status_kind(status: Option<u16>) -> FailureKind {
    match status {
        Some(408 | 409 | 425 | 429) => FailureKind::RateLimited,
        _ => FailureKind::ServerError,
    }
}

/// Classifies a transport error (connect, timeout, reset) — always transient, except for a
/// request reqwest could not even build. A refused connection or a name that did not
/// resolve is [`FailureKind::Refused`] / [`FailureKind::NameNotResolved`]; the provider turns
/// those into [`ProviderError::Unreachable`], naming its URL.
pub(crate) fn transport_error(provider: &str, e: &reqwest::Error) -> ProviderError {
    // reqwest's Display omits the cause ("error sending request"); the chain says why.
    let mut message = e.to_string();
    let mut io_kind = None;
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        message.push_str(": ");
        message.push_str(&s.to_string());
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            io_kind.get_or_insert(io.kind());
        }
        src = s.source();
    }
    if e.is_builder() {
        return ProviderError::Config {
            provider: provider.to_owned(),
            message,
        };
    }
    let kind = failure_kind(io_kind, e.is_timeout(), &message);
    ProviderError::Transient {
        provider: provider.to_owned(),
        status: None,
        message,
        retry_after: None,
        attempts: 1,
        kind,
    }
}

/// A network failure's kind, from the first I/O error in its chain, reqwest's timeout flag
/// and, for what carries neither (hyper's "dns error", its "connection closed before message
/// completed"), the chain's text.
pub(crate) fn failure_kind(
    io: Option<std::io::ErrorKind>,
    timed_out: bool,
    message: &str,
) -> FailureKind {
    use std::io::ErrorKind;
    let text = message.to_ascii_lowercase();
    match io {
        Some(ErrorKind::ConnectionRefused) => return FailureKind::Refused,
        Some(ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe) => {
            return FailureKind::Reset;
        }
        Some(ErrorKind::TimedOut) => return FailureKind::Timeout,
        _ => {}
    }
    if timed_out {
        FailureKind::Timeout
    } else if text.contains("dns error")
        || text.contains("failed to lookup address")
        || text.contains("name or service not known")
        || text.contains("no address associated")
    {
        FailureKind::NameNotResolved
    } else if text.contains("connection refused") {
        FailureKind::Refused
    } else if text.contains("reset") || text.contains("connection closed before") {
        FailureKind::Reset
    } else {
        FailureKind::Network
    }
}

/// A wire-format parser: turns SSE events into [`StreamEvent`]s.
pub(crate) trait SseParser: Send + 'static {
    /// Handles one SSE event; pushes zero or more events; returns `true` when the response is
    /// complete (no further events are expected).
    fn feed(
        &mut self,
        event: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<bool, ProviderError>;

    /// The byte stream ended. Pushes the final events, or fails when the response was cut short.
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError>;
}

/// How many body chunks a relayed response buffers ahead of the turn reading them.
const RELAY_CHUNKS: usize = 16;

/// How long a relay keeps reading the rest of a reply the turn already finished (the end of
/// the chunked body after the format's end marker), so the connection goes back to the pool;
/// past this a server still talking loses the connection.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// A response's status line, headers and body, read either where the request was sent
/// (`Direct`) or on the long-lived runtime that sent it, chunk by chunk (`Relayed`).
pub(crate) enum Reply {
    /// Sent on the caller's runtime.
    Direct(reqwest::Response),
    /// Sent on the I/O runtime; the body arrives through [`Relay`].
    Relayed {
        status: reqwest::StatusCode,
        headers: reqwest::header::HeaderMap,
        body: Relay,
    },
}

/// A response body read on another runtime: its chunks in order, and the reading task,
/// aborted when this is dropped before the reply was complete (a cancelled or aborted turn
/// cancels the request it was waiting for).
pub(crate) struct Relay {
    chunks: tokio::sync::mpsc::Receiver<reqwest::Result<bytes::Bytes>>,
    task: AbortOnDrop,
}

/// Aborts the relay task on drop unless the reply was marked complete.
struct AbortOnDrop {
    task: tokio::task::AbortHandle,
    complete: Arc<AtomicBool>,
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if !self.complete.load(Ordering::Acquire) {
            self.task.abort();
        }
    }
}

/// A body being read: a direct response's byte stream or a relay.
pub(crate) enum Body {
    Direct(futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>),
    Relayed(Relay),
}

impl Body {
    async fn next(&mut self) -> Option<reqwest::Result<bytes::Bytes>> {
        match self {
            Body::Direct(stream) => stream.next().await,
            Body::Relayed(relay) => relay.chunks.recv().await,
        }
    }

    /// The parser saw the reply's end: a relay reads what is left of the body (instead of
    /// being aborted when the turn drops it), so its connection is kept alive for the next.
    fn complete(&self) {
        if let Body::Relayed(relay) = self {
            relay.task.complete.store(true, Ordering::Release);
        }
    }
}

impl Reply {
    pub(crate) fn status(&self) -> reqwest::StatusCode {
        match self {
            Reply::Direct(resp) => resp.status(),
            Reply::Relayed { status, .. } => *status,
        }
    }

    pub(crate) fn headers(&self) -> &reqwest::header::HeaderMap {
        match self {
            Reply::Direct(resp) => resp.headers(),
            Reply::Relayed { headers, .. } => headers,
        }
    }

    /// The whole body as text (an error reply's); empty when it cannot be read.
    pub(crate) async fn text(self) -> String {
        match self {
            Reply::Direct(resp) => resp.text().await.unwrap_or_default(),
            Reply::Relayed { mut body, .. } => {
                let mut bytes = Vec::new();
                while let Some(chunk) = body.chunks.recv().await {
                    match chunk {
                        Ok(chunk) => bytes.extend_from_slice(&chunk),
                        Err(_) => return String::new(),
                    }
                }
                String::from_utf8_lossy(&bytes).into_owned()
            }
        }
    }

    fn into_body(self) -> Body {
        match self {
            Reply::Direct(resp) => Body::Direct(Box::pin(resp.bytes_stream())),
            Reply::Relayed { body, .. } => Body::Relayed(body),
        }
    }
}

/// Sends `rb`. With no `io` runtime, here, as any request. With one, the exchange (sending,
/// then reading the body) runs there and the bytes come back through a channel: the shared
/// client's connections then live on that runtime, so a caller whose runtime is dropped
/// after each turn (the daemon's turns) still finds them kept alive for its next request.
pub(crate) async fn exchange(
    provider: &str,
    rb: reqwest::RequestBuilder,
    io: Option<&tokio::runtime::Handle>,
) -> Result<Reply, ProviderError> {
    let Some(io) = io else {
        return rb
            .send()
            .await
            .map(Reply::Direct)
            .map_err(|e| transport_error(provider, &e));
    };
    let (head_tx, head_rx) = tokio::sync::oneshot::channel();
    let (chunk_tx, chunks) = tokio::sync::mpsc::channel(RELAY_CHUNKS);
    let complete = Arc::new(AtomicBool::new(false));
    let finished = Arc::clone(&complete);
    let task = io.spawn(async move {
        let mut resp = match rb.send().await {
            Ok(resp) => resp,
            Err(e) => {
                let _ = head_tx.send(Err(e));
                return;
            }
        };
        let head = (resp.status(), std::mem::take(resp.headers_mut()));
        if head_tx.send(Ok(head)).is_err() {
            return;
        }
        let mut body = resp.bytes_stream();
        while let Some(chunk) = body.next().await {
            let failed = chunk.is_err();
            if chunk_tx.send(chunk).await.is_err() {
                if finished.load(Ordering::Acquire) {
                    let rest = async { while let Some(Ok(_)) = body.next().await {} };
                    let _ = tokio::time::timeout(DRAIN_LIMIT, rest).await;
                }
                return;
            }
            if failed {
                return;
            }
        }
    });
    // Made before the first await: a turn cancelled while waiting for the head aborts the
    // request too.
    let task = AbortOnDrop {
        task: task.abort_handle(),
        complete,
    };
    match head_rx.await {
        Ok(Ok((status, headers))) => Ok(Reply::Relayed {
            status,
            headers,
            body: Relay { chunks, task },
        }),
        Ok(Err(e)) => Err(transport_error(provider, &e)),
        Err(_) => Err(ProviderError::Transient {
            provider: provider.to_owned(),
            status: None,
            message: "the daemon's HTTP runtime stopped before the response arrived".into(),
            retry_after: None,
            attempts: 1,
            kind: FailureKind::Network,
        }),
    }
}

/// Adapts a streaming HTTP response into an [`EventStream`].
pub(crate) fn sse_events<P: SseParser>(provider: String, resp: Reply, parser: P) -> EventStream {
    struct St<P> {
        body: Body,
        sse: super::sse::SseDecoder,
        parser: P,
        pending: VecDeque<StreamEvent>,
        done: bool,
        provider: String,
    }
    let st = St {
        body: resp.into_body(),
        sse: super::sse::SseDecoder::default(),
        parser,
        pending: VecDeque::new(),
        done: false,
        provider,
    };
    Box::pin(futures::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.pending.pop_front() {
                return Some((Ok(ev), st));
            }
            if st.done {
                return None;
            }
            let event = match st.sse.next_event() {
                Ok(Some(event)) => Some(Ok(event)),
                Ok(None) => match st.body.next().await {
                    Some(Ok(bytes)) => {
                        st.sse.push(&bytes);
                        continue;
                    }
                    Some(Err(e)) => Some(Err(transport_error(&st.provider, &e))),
                    None => None,
                },
                Err(e) => Some(Err(ProviderError::Protocol {
                    provider: st.provider.clone(),
                    message: e.to_string(),
                })),
            };
            match event {
                Some(Ok(ev)) => match st.parser.feed(&ev.event, &ev.data, &mut st.pending) {
                    Ok(true) => {
                        st.body.complete();
                        if let Err(e) = st.parser.finish(&mut st.pending) {
                            st.done = true;
                            return Some((Err(e), st));
                        }
                        st.done = true;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        st.done = true;
                        return Some((Err(e), st));
                    }
                },
                Some(Err(err)) => {
                    st.done = true;
                    return Some((Err(err), st));
                }
                None => {
                    st.done = true;
                    if let Err(e) = st.parser.finish(&mut st.pending) {
                        return Some((Err(e), st));
                    }
                }
            }
        }
    }))
}

/// The error for a stream that ended before the format's end marker: a cut connection.
pub(crate) fn cut_short(provider: &str, what: &str) -> ProviderError {
    ProviderError::Transient {
        provider: provider.to_owned(),
        status: None,
        message: format!("the response stream ended before {what} (connection closed early)"),
        retry_after: None,
        attempts: 1,
        kind: FailureKind::CutShort,
    }
}

/// Merges `extra` into `base`: objects merge key by key, anything else replaces.
pub(crate) fn deep_merge(base: &mut serde_json::Value, extra: &serde_json::Value) {
    match (base, extra) {
        (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
            for (k, v) in e {
                match b.get_mut(k) {
                    Some(slot) if slot.is_object() && v.is_object() => deep_merge(slot, v),
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, e) => *b = e.clone(),
    }
}

/// Applies `params` (`{key,value}` strings; JSON-looking values become JSON) and then
/// `provider_params` to a request body.
pub(crate) fn apply_extras(body: &mut serde_json::Value, params: &super::types::ModelParams) {
    if let serde_json::Value::Object(map) = body {
        for (k, v) in &params.params {
            let value =
                serde_json::from_str(v).unwrap_or_else(|_| serde_json::Value::String(v.clone()));
            map.insert(k.clone(), value);
        }
    }
    if !params.provider_params.is_empty() {
        deep_merge(
            body,
            &serde_json::Value::Object(params.provider_params.clone()),
        );
    }
}

/// The serialized tool list of the last request, reused while the caller passes the same
/// list: a session advertises one `Arc<[ToolSpec]>` until its tool declarations change, and
/// the schemas (about 20 KB for the default tools) would otherwise be deep-cloned into the
/// body and serialized again on every request. Kept as `Bytes` so a body sent in pieces
/// ([`EncodedBody`]) shares them instead of copying them.
#[derive(Default)]
pub(crate) struct ToolsJson {
    last: std::sync::Mutex<Option<SerializedTools>>,
}

/// A tool list and its JSON array.
type SerializedTools = (Arc<[ToolSpec]>, bytes::Bytes);

impl ToolsJson {
    /// The JSON array of `tools`, each declared by `declare`, from the cache when `tools` is
    /// the list it was built from.
    pub(crate) fn get(
        &self,
        tools: &Arc<[ToolSpec]>,
        declare: fn(&ToolSpec) -> serde_json::Value,
    ) -> Result<bytes::Bytes, serde_json::Error> {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Holding the list keeps its allocation alive, so the pointer cannot be reused by
        // another list while the entry exists.
        if let Some((list, json)) = last.as_ref()
            && Arc::ptr_eq(list, tools)
        {
            return Ok(json.clone());
        }
        let array: Vec<serde_json::Value> = tools.iter().map(declare).collect();
        let json = bytes::Bytes::from(serde_json::to_vec(&array)?);
        *last = Some((tools.clone(), json.clone()));
        Ok(json)
    }
}

/// What a [`crate::WireCache`] holds: the format, the system message (OpenAI formats send
/// it as the first message) and each message with the JSON it became, fragments joined by
/// commas (a message may become none, one or several wire messages).
pub(crate) struct WireMessages {
    format: crate::ProviderKind,
    system: Option<(String, String)>,
    entries: Vec<(Message, String)>,
}

/// The JSON array of a request's `messages`: `system` (when the format sends it as a message)
/// then each message as `encode` writes it (its wire messages' JSON joined by commas, none
/// for a message the format leaves out), reusing the fragments `cache` holds for messages
/// equal to the ones at their positions last time.
pub(crate) fn messages_json(
    cache: &crate::WireCache,
    format: crate::ProviderKind,
    system: Option<&str>,
    messages: &[Message],
    encode: impl Fn(&Message) -> Result<String, serde_json::Error>,
) -> Result<String, serde_json::Error> {
    fn push(out: &mut String, fragment: &str) {
        if fragment.is_empty() {
            return;
        }
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(fragment);
    }
    let mut slot = cache
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (old_system, old_entries) = match slot.take() {
        Some(prior) if prior.format == format => (prior.system, prior.entries),
        _ => (None, Vec::new()),
    };
    let system = match (system, old_system) {
        (None, _) => None,
        (Some(text), Some((old, json))) if old == text => Some((old, json)),
        (Some(text), _) => Some((
            text.to_owned(),
            serde_json::to_string(&serde_json::json!({"role": "system", "content": text}))?,
        )),
    };
    let mut out = String::with_capacity(
        2 + system.as_ref().map_or(0, |(_, json)| json.len())
            + old_entries
                .iter()
                .map(|(_, json)| json.len() + 1)
                .sum::<usize>(),
    );
    out.push('[');
    if let Some((_, json)) = &system {
        push(&mut out, json);
    }
    let mut old = old_entries.into_iter();
    let mut entries = Vec::with_capacity(messages.len());
    for message in messages {
        let entry = match old.next() {
            Some((sent, json)) if sent == *message => (sent, json),
            _ => (message.clone(), encode(message)?),
        };
        push(&mut out, &entry.1);
        entries.push(entry);
    }
    out.push(']');
    *slot = Some(WireMessages {
        format,
        system,
        entries,
    });
    Ok(out)
}

/// A request body as the pieces it was written in: the kept JSON (the tool list, the
/// messages) is shared rather than copied into one buffer.
#[derive(Debug, Default)]
pub(crate) struct EncodedBody {
    pieces: Vec<bytes::Bytes>,
    len: usize,
}

impl From<Vec<u8>> for EncodedBody {
    fn from(whole: Vec<u8>) -> Self {
        let mut body = EncodedBody::default();
        body.push(whole.into());
        body
    }
}

impl EncodedBody {
    fn push(&mut self, piece: bytes::Bytes) {
        if !piece.is_empty() {
            self.len += piece.len();
            self.pieces.push(piece);
        }
    }

    /// The body's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The body in one buffer.
    pub(crate) fn into_bytes(mut self) -> bytes::Bytes {
        if self.pieces.len() == 1 {
            return self.pieces.pop().unwrap_or_default();
        }
        let mut out = Vec::with_capacity(self.len);
        for piece in &self.pieces {
            out.extend_from_slice(piece);
        }
        bytes::Bytes::from(out)
    }

    /// The pieces in order, to send as they are.
    pub(crate) fn into_pieces(self) -> Vec<bytes::Bytes> {
        self.pieces
    }
}

/// The wire messages `values` joined by commas: one message's fragment for
/// [`messages_json`].
pub(crate) fn values_json(values: &[serde_json::Value]) -> Result<String, serde_json::Error> {
    let mut json = String::new();
    for value in values {
        if !json.is_empty() {
            json.push(',');
        }
        json.push_str(&serde_json::to_string(value)?);
    }
    Ok(json)
}

/// A request body's bytes around the JSON kept elsewhere: `pieces[0]`, the JSON of
/// `slots[0]`, `pieces[1]`, … and the last piece. Built once from a body with `null`
/// placeholders and reused while what shaped it (model, parameters, …) stays the same.
#[derive(Debug)]
pub(crate) struct Frame {
    pieces: Vec<bytes::Bytes>,
    slots: Vec<&'static str>,
}

impl Frame {
    /// Serializes `body`, leaving a slot where each key named in `slots` is: the bytes
    /// serde_json writes for the whole body (compact, keys in order) once the slots are
    /// filled with the JSON of their values.
    pub(crate) fn new(
        body: &serde_json::Value,
        slots: &[&'static str],
    ) -> Result<Frame, serde_json::Error> {
        let serde_json::Value::Object(map) = body else {
            return Ok(Frame {
                pieces: vec![serde_json::to_vec(body)?.into()],
                slots: Vec::new(),
            });
        };
        let mut frame = Frame {
            pieces: Vec::with_capacity(slots.len() + 1),
            slots: Vec::with_capacity(slots.len()),
        };
        let mut out = Vec::with_capacity(256);
        out.push(b'{');
        for (i, (key, value)) in map.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut out, key)?;
            out.push(b':');
            match slots.iter().find(|slot| *slot == key) {
                Some(slot) => {
                    frame.pieces.push(std::mem::take(&mut out).into());
                    frame.slots.push(slot);
                }
                None => serde_json::to_writer(&mut out, value)?,
            }
        }
        out.push(b'}');
        frame.pieces.push(out.into());
        Ok(frame)
    }

    /// The body with each slot filled by its `(name, json)` entry of `fill` (`null` for a
    /// slot `fill` does not name), the kept JSON shared rather than copied.
    pub(crate) fn fill(&self, fill: &[(&str, bytes::Bytes)]) -> EncodedBody {
        let mut body = EncodedBody::default();
        for (i, piece) in self.pieces.iter().enumerate() {
            if i > 0 {
                let json = self
                    .slots
                    .get(i - 1)
                    .and_then(|slot| fill.iter().find(|(name, _)| name == slot))
                    .map_or_else(
                        || bytes::Bytes::from_static(b"null"),
                        |(_, json)| json.clone(),
                    );
                body.push(json);
            }
            body.push(piece.clone());
        }
        body
    }
}
