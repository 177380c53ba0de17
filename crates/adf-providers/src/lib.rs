//! `adf-providers`: model providers, the only way the runtime talks to a model vendor
//! (DESIGN.md invariant). It knows nothing of `.adf` files: callers hand it the agent config as
//! a `serde_json::Value` and any key they unsealed.
//!
//! - [`Provider`] is the one trait, streaming first: [`Provider::stream`] yields
//!   [`StreamEvent`]s (text and thinking deltas, complete tool calls, usage, stop reason);
//!   [`Provider::complete`] collects them into an [`AssistantMessage`]; [`ReplyBuilder`] is
//!   that fold, for callers that show the events as they arrive.
//! - [`HttpProvider`] implements it for the two wire formats: Anthropic Messages
//!   (`anthropic.rs`) and OpenAI Chat Completions (`openai.rs`, also used by OpenRouter and any
//!   OpenAI-compatible `baseUrl` such as Ollama, llama.cpp, LM Studio or vLLM).
//! - [`Resolver`] turns an agent config (`model.provider` against `config.providers`, runtime
//!   providers and the built-in ids) plus an API key into a ready [`ResolvedModel`].
//! - [`RetryPolicy`] is §5.20 `recovery`: transient errors (429, 5xx, timeouts, resets) retry
//!   with doubling, jittered backoff, never before `Retry-After`, within a total wait
//!   (`recovery.retry_budget_ms`); a local model server that refuses the connection gets one
//!   quick retry ([`ProviderError::Unreachable`] names its URL). Each retry is a
//!   `provider_error` warning and a [`RetryNotice`] for the observers ([`watch_retries`] for
//!   one request's). Auth and request errors never retry and say what to fix
//!   ([`ProviderError`]).
//! - Before each request the destination is checked against rule 2 of §5.6 (`control.rs`): a
//!   provider URL comes from the agent's config, and a runtime control API on this machine is
//!   never a model server.
//!
//! Retries happen before any event reaches the caller: [`Provider::stream`] retries until the
//! response starts; [`Provider::complete`] retries the whole exchange, since nothing was shown
//! yet. A stream that breaks after events were delivered ends with a transient error item, and
//! the executor decides whether to retry the turn.

mod anthropic;
mod control;
mod error;
mod http;
mod models;
mod openai;
mod resolve;
mod retry;
mod sse;
mod types;

use std::convert::Infallible;
use std::fmt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};

pub use anthropic::API_VERSION as ANTHROPIC_VERSION;
pub use error::{FailureKind, ProviderError};
pub use http::ApiKey;
pub use resolve::{ProviderConfig, ResolvedModel, Resolver};
pub use retry::{
    DEFAULT_RETRY_BUDGET, LOCAL_RETRY_DELAY, RetryNotice, RetryObserver, RetryPolicy,
    is_local_model_server, watch_retries,
};
pub use types::{
    AssistantMessage, ChatRequest, ContentBlock, InputAudio, MediaUrl, Message, ModelParams,
    Reasoning, Role, StopReason, StreamEvent, ToolCall, ToolResultContent, ToolSpec, Usage,
    WireCache,
};

/// A stream of response events; an `Err` item ends it.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, ProviderError>> + Send>>;

/// The four provider types of §5.16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Chat Completions at api.openai.com.
    OpenAi,
    /// Any server speaking Chat Completions at a `baseUrl`.
    OpenAiCompatible,
    /// OpenRouter (Chat Completions with its own reasoning options).
    OpenRouter,
}

impl ProviderKind {
    /// Parses a §5.16 `type`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "anthropic" => ProviderKind::Anthropic,
            "openai" => ProviderKind::OpenAi,
            "openai-compatible" => ProviderKind::OpenAiCompatible,
            "openrouter" => ProviderKind::OpenRouter,
            _ => return None,
        })
    }

    /// The §5.16 spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAi => "openai",
            ProviderKind::OpenAiCompatible => "openai-compatible",
            ProviderKind::OpenRouter => "openrouter",
        }
    }

    /// The environment variable holding this type's key, if it has one.
    pub fn env_var(self) -> Option<&'static str> {
        match self {
            ProviderKind::Anthropic => Some("ANTHROPIC_API_KEY"),
            ProviderKind::OpenAi => Some("OPENAI_API_KEY"),
            ProviderKind::OpenRouter => Some("OPENROUTER_API_KEY"),
            ProviderKind::OpenAiCompatible => None,
        }
    }

    /// The default API root (the `/v1` level), if the type has one.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderKind::Anthropic => Some("https://api.anthropic.com/v1"),
            ProviderKind::OpenAi => Some("https://api.openai.com/v1"),
            ProviderKind::OpenRouter => Some("https://openrouter.ai/api/v1"),
            ProviderKind::OpenAiCompatible => None,
        }
    }

    /// Whether requests fail without a key (local compatible servers usually need none).
    pub fn requires_key(self) -> bool {
        self != ProviderKind::OpenAiCompatible
    }
}

/// A model provider. Object-safe so the executor can hold `Arc<dyn Provider>` and benchmarks
/// can substitute an in-process one.
pub trait Provider: Send + Sync + fmt::Debug {
    /// The provider id (`anthropic`, `custom:local`, …), used in errors and logs.
    fn id(&self) -> &str;

    /// Sends `req` and streams the response. Transient failures before the response starts
    /// are retried per the provider's [`RetryPolicy`].
    fn stream<'a>(
        &'a self,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, ProviderError>>;

    /// Sends `req` and collects the whole reply, retrying transient failures (including a
    /// stream cut short) per the provider's [`RetryPolicy`].
    fn complete<'a>(
        &'a self,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<AssistantMessage, ProviderError>>;
}

/// Folds a stream into the final assistant message. Text deltas are joined into text blocks;
/// thinking and tool calls come from their complete events, so blocks keep the order the model
/// produced them in.
pub async fn collect(mut stream: EventStream) -> Result<AssistantMessage, ProviderError> {
    let mut reply = ReplyBuilder::default();
    while let Some(event) = stream.next().await {
        reply.push(event?);
    }
    Ok(reply.finish())
}

/// Builds an [`AssistantMessage`] from [`StreamEvent`]s one at a time: the fold behind
/// [`collect`], for callers that also act on each event (showing deltas as they arrive).
#[derive(Debug, Default)]
pub struct ReplyBuilder {
    message: AssistantMessage,
    pending_text: String,
}

impl ReplyBuilder {
    /// Adds one event. Deltas of thinking and the start of a tool call carry nothing the final
    /// message keeps: their complete events follow.
    pub fn push(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::TextDelta(t) => self.pending_text.push_str(&t),
            StreamEvent::Thinking { text, signature } => {
                self.flush_text();
                self.message.content.push(ContentBlock::Thinking {
                    thinking: text,
                    signature,
                    reasoning_details: None,
                });
            }
            StreamEvent::RedactedThinking(data) => {
                self.flush_text();
                self.message
                    .content
                    .push(ContentBlock::RedactedThinking { data });
            }
            StreamEvent::ToolCall(c) => {
                self.flush_text();
                self.message.content.push(ContentBlock::ToolUse {
                    id: c.id,
                    name: c.name,
                    input: c.input,
                });
            }
            StreamEvent::Usage(u) => self.message.usage = u,
            StreamEvent::Stop(r) => self.message.stop_reason = r,
            StreamEvent::ThinkingDelta(_) | StreamEvent::ToolCallStarted { .. } => {}
        }
    }

    /// The message so far, with any trailing text as its last block.
    pub fn finish(mut self) -> AssistantMessage {
        self.flush_text();
        self.message
    }

    /// Closes the current run of text deltas into one text block, so a block that follows
    /// lands after it.
    fn flush_text(&mut self) {
        if !self.pending_text.is_empty() {
            self.message.content.push(ContentBlock::Text {
                text: std::mem::take(&mut self.pending_text),
            });
        }
    }
}

/// Header values sent with every request, made once rather than checked again each time.
const EVENT_STREAM: reqwest::header::HeaderValue =
    reqwest::header::HeaderValue::from_static("text/event-stream");
const APPLICATION_JSON: reqwest::header::HeaderValue =
    reqwest::header::HeaderValue::from_static("application/json");

/// What a request body's [`http::Frame`] depends on besides the provider's own settings.
struct FrameKey {
    model: String,
    /// Anthropic only (OpenAI formats send it among the messages).
    system: Option<String>,
    params: ModelParams,
    /// Whether the request offers tools (the body then has a `tools` slot).
    tools: bool,
}

/// A provider reached over HTTP in one of the two wire formats.
pub struct HttpProvider {
    id: String,
    kind: ProviderKind,
    /// The API root, e.g. `https://api.anthropic.com/v1` or `http://127.0.0.1:11434/v1`.
    base_url: String,
    key: Option<ApiKey>,
    retry: RetryPolicy,
    request_delay: Duration,
    prompt_cache: bool,
    /// The daemon record consulted before each request (rule 2 of §5.6).
    daemon_record: Option<PathBuf>,
    /// The tool list serialized for the last request.
    tools_json: http::ToolsJson,
    /// The request URL (`{base_url}/messages` or `/chat/completions`), and its parsed form
    /// when it parses: parsing it for every request cost about 2% of a turn against a local
    /// server. One that does not parse is handed to reqwest as text, to report as before.
    endpoint: (String, Option<reqwest::Url>),
    /// The body around the messages and tools of the last request, and what it was built
    /// from.
    frame: std::sync::Mutex<Option<(FrameKey, Arc<http::Frame>)>>,
    /// The endpoint is `http://` (HTTP/1.1; HTTP/2 is only negotiated over TLS here).
    plain_http: bool,
    /// The server is on this machine or its private network ([`is_local_model_server`]).
    local: bool,
    /// The long-lived runtime model requests are sent and read on (see
    /// [`with_io_runtime`](Self::with_io_runtime)); none: the caller's.
    io: Option<tokio::runtime::Handle>,
}

impl fmt::Debug for HttpProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProvider")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("key", &self.key.as_ref().map(|_| "***"))
            .field("retry", &self.retry)
            .field("request_delay", &self.request_delay)
            .finish()
    }
}

impl HttpProvider {
    /// A provider of `kind` at `base_url` (the `/v1` level; a bare host gets `/v1` added).
    pub fn new(
        id: impl Into<String>,
        kind: ProviderKind,
        base_url: &str,
        key: Option<ApiKey>,
    ) -> Self {
        let base_url = normalize_base_url(base_url);
        let endpoint = match kind {
            ProviderKind::Anthropic => format!("{base_url}/messages"),
            _ => format!("{base_url}/chat/completions"),
        };
        let parsed = reqwest::Url::parse(&endpoint).ok();
        let plain_http = parsed.as_ref().is_some_and(|url| url.scheme() == "http");
        let local = is_local_model_server(&base_url);
        HttpProvider {
            id: id.into(),
            kind,
            base_url,
            endpoint: (endpoint, parsed),
            plain_http,
            local,
            frame: std::sync::Mutex::new(None),
            key: http::non_empty(key),
            retry: RetryPolicy::default(),
            request_delay: Duration::ZERO,
            prompt_cache: true,
            daemon_record: control::daemon_record_path(&|name| std::env::var(name).ok()),
            tools_json: http::ToolsJson::default(),
            io: None,
        }
    }

    /// Sends each request and reads its reply on `io` (a runtime with I/O and time enabled
    /// that outlives the callers), handing the bytes back through a channel. Connections are
    /// tied to the runtime that opened them, so a caller that runs each turn on a fresh runtime
    /// (the daemon) keeps them alive across turns only this way. Dropping the caller's future
    /// still cancels the request.
    pub fn with_io_runtime(mut self, io: Option<tokio::runtime::Handle>) -> Self {
        self.io = io;
        self
    }

    /// Reads the daemon record at `path` (none: only this process's control APIs) before each
    /// request, instead of the one in the process environment's runtime home.
    pub fn with_daemon_record(mut self, path: Option<PathBuf>) -> Self {
        self.daemon_record = path;
        self
    }

    /// Sets the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Waits this long before every request (§5.16 `requestDelayMs`, for rate-limited servers).
    pub fn with_request_delay(mut self, delay: Duration) -> Self {
        self.request_delay = delay;
        self
    }

    /// Anthropic only: whether to mark the system prompt `cache_control: ephemeral` (default on).
    pub fn with_prompt_cache(mut self, on: bool) -> Self {
        self.prompt_cache = on;
        self
    }

    /// The provider type.
    pub fn kind(&self) -> ProviderKind {
        self.kind
    }

    /// The normalized API root.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The retry policy in force.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// The JSON body this provider sends for `req` (exposed for tests and `--dry-run` views).
    pub fn request_body(&self, req: &ChatRequest) -> serde_json::Value {
        self.build_body(req, false)
    }

    fn build_body(&self, req: &ChatRequest, placeholders: bool) -> serde_json::Value {
        match self.kind {
            ProviderKind::Anthropic => anthropic::build_body(req, self.prompt_cache, placeholders),
            ProviderKind::OpenAi => openai::build_body(req, openai::Flavor::OpenAi, placeholders),
            ProviderKind::OpenRouter => {
                openai::build_body(req, openai::Flavor::OpenRouter, placeholders)
            }
            ProviderKind::OpenAiCompatible => {
                openai::build_body(req, openai::Flavor::Compatible, placeholders)
            }
        }
    }

    /// The bytes of [`request_body`](Self::request_body), with the tool list serialized once
    /// per list rather than once per request and each message once per conversation (the
    /// request's [`WireCache`]). A `params`/`provider_params` entry named `tools` or
    /// `messages` replaces that entry, as it does in `request_body`, so such a body is
    /// encoded whole.
    fn encode_body(&self, req: &ChatRequest) -> Result<http::EncodedBody, ProviderError> {
        let config_error = |e: serde_json::Error| ProviderError::Config {
            provider: self.id.clone(),
            message: format!("cannot encode the request body: {e}"),
        };
        let extras_name = |key: &str| {
            req.params.params.iter().any(|(k, _)| k == key)
                || req.params.provider_params.contains_key(key)
        };
        if extras_name("tools") || extras_name("messages") {
            return serde_json::to_vec(&self.request_body(req))
                .map(http::EncodedBody::from)
                .map_err(config_error);
        }
        let tools = if req.tools.is_empty() {
            None
        } else {
            let declare = match self.kind {
                ProviderKind::Anthropic => anthropic::tool_json,
                _ => openai::tool_json,
            };
            Some(
                self.tools_json
                    .get(&req.tools, declare)
                    .map_err(config_error)?,
            )
        };
        let messages = match self.kind {
            ProviderKind::Anthropic => {
                http::messages_json(&req.wire, self.kind, None, &req.messages, |m| {
                    http::values_json(&Vec::from_iter(anthropic::message_json(m)))
                })
            }
            kind => {
                let flavor = match kind {
                    ProviderKind::OpenAi => openai::Flavor::OpenAi,
                    ProviderKind::OpenRouter => openai::Flavor::OpenRouter,
                    _ => openai::Flavor::Compatible,
                };
                let system = req.system.as_deref().filter(|s| !s.is_empty());
                http::messages_json(&req.wire, kind, system, &req.messages, |m| {
                    if let Some(json) = openai::text_message_json(m) {
                        return json;
                    }
                    let mut values = Vec::new();
                    openai::push_messages(&mut values, m, flavor);
                    http::values_json(&values)
                })
            }
        }
        .map_err(config_error)?;
        let mut fill = vec![("messages", bytes::Bytes::from(messages))];
        if let Some(tools) = tools {
            fill.push(("tools", tools));
        }
        Ok(self.frame(req).map_err(config_error)?.fill(&fill))
    }

    /// The body around its messages and tools for `req`, from the last request's when
    /// everything else that shapes it is the same (a session's requests differ only in
    /// their messages, and in the tools when the declarations change).
    fn frame(&self, req: &ChatRequest) -> Result<Arc<http::Frame>, serde_json::Error> {
        // OpenAI formats send the system prompt among the messages, Anthropic's in the frame.
        let system = match self.kind {
            ProviderKind::Anthropic => req.system.as_deref(),
            _ => None,
        };
        let tools = !req.tools.is_empty();
        let mut last = self
            .frame
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((key, frame)) = last.as_ref()
            && key.tools == tools
            && key.model == req.model
            && key.system.as_deref() == system
            && key.params == req.params
        {
            return Ok(frame.clone());
        }
        let slots: &[&'static str] = if tools {
            &["messages", "tools"]
        } else {
            &["messages"]
        };
        let frame = Arc::new(http::Frame::new(&self.build_body(req, true), slots)?);
        let key = FrameKey {
            model: req.model.clone(),
            system: system.map(str::to_owned),
            params: req.params.clone(),
            tools,
        };
        *last = Some((key, frame.clone()));
        Ok(frame)
    }

    /// A connection refused or a name that did not resolve, as the error that names this
    /// provider's URL and says what to do; any other error as it is.
    fn unreachable(&self, error: ProviderError) -> ProviderError {
        let refused = match error.failure_kind() {
            Some(FailureKind::Refused) => true,
            Some(FailureKind::NameNotResolved) => false,
            _ => return error,
        };
        let fix = if refused {
            "Start the model server, or point the provider's baseUrl at one that runs (`adf config get FILE providers`, `adf config set FILE ...`)"
        } else {
            "Check the host name in the provider's baseUrl (`adf config get FILE providers`) and this machine's network"
        };
        ProviderError::Unreachable {
            provider: self.id.clone(),
            url: self.base_url.clone(),
            refused,
            local: self.local,
            attempts: 1,
            fix: fix.to_owned(),
        }
    }

    /// One attempt: send, check the status, hand back the event stream.
    async fn open(&self, req: &ChatRequest) -> Result<EventStream, ProviderError> {
        if self.kind.requires_key() && self.key.is_none() {
            return Err(ProviderError::MissingKey {
                provider: self.id.clone(),
                fix: http::key_fix(&self.id, self.kind),
            });
        }
        if !self.request_delay.is_zero() {
            tokio::time::sleep(self.request_delay).await;
        }
        let client = http::client(&self.id)?;
        let body = self.encode_body(req)?;
        let (url, parsed) = &self.endpoint;
        let rb = match parsed {
            Some(parsed) => client.post(parsed.clone()),
            None => client.post(url),
        };
        let rb = match self.kind {
            ProviderKind::Anthropic => {
                let mut rb = rb
                    .header("anthropic-version", ANTHROPIC_VERSION)
                    .header(reqwest::header::ACCEPT, EVENT_STREAM);
                if let Some(k) = &self.key {
                    rb = rb.header("x-api-key", k.expose());
                }
                rb
            }
            _ => {
                let mut rb = rb.header(reqwest::header::ACCEPT, EVENT_STREAM);
                if let Some(k) = &self.key {
                    rb = rb.bearer_auth(k.expose());
                }
                if self.kind == ProviderKind::OpenRouter {
                    rb = rb.header("X-Title", "adf");
                }
                rb
            }
        };
        control::refuse_control_api(&self.id, url, self.daemon_record.as_deref()).await?;
        tracing::debug!(target: "adf::provider", provider = %self.id, %url, model = %req.model, "model request");
        let rb = rb.header(reqwest::header::CONTENT_TYPE, APPLICATION_JSON);
        // Over plain HTTP/1.1 the body goes out in its pieces, so the kept tool list is not
        // copied into a buffer of its own for every request (hyper writes the pieces with
        // one `writev`; the length is declared, so the framing is the same). Over TLS the
        // body stays one reusable buffer: reqwest resends only such a body when an HTTP/2
        // server refuses the stream or goes away before reading it.
        let rb = if self.plain_http {
            let length = body.len();
            let pieces = body.into_pieces().into_iter().map(Ok::<_, Infallible>);
            rb.header(reqwest::header::CONTENT_LENGTH, length)
                .body(reqwest::Body::wrap_stream(futures::stream::iter(pieces)))
        } else {
            rb.body(body.into_bytes())
        };
        let resp = http::exchange(&self.id, rb, self.io.as_ref())
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = resp.status();
        if !status.is_success() {
            let headers = resp.headers().clone();
            let text = resp.text().await;
            return Err(http::status_error(
                &self.id,
                self.kind,
                &req.model,
                status.as_u16(),
                &headers,
                &text,
                self.key.as_ref(),
            ));
        }
        Ok(match self.kind {
            ProviderKind::Anthropic => {
                http::sse_events(self.id.clone(), resp, anthropic::Parser::new(&self.id))
            }
            _ => http::sse_events(self.id.clone(), resp, openai::Parser::new(&self.id)),
        })
    }
}

impl Provider for HttpProvider {
    fn id(&self) -> &str {
        &self.id
    }

    fn stream<'a>(
        &'a self,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, ProviderError>> {
        Box::pin(self.retry.run(&self.id, || self.open(req)))
    }

    fn complete<'a>(
        &'a self,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<AssistantMessage, ProviderError>> {
        Box::pin(self.retry.run(&self.id, || async {
            let s = self.open(req).await?;
            collect(s).await
        }))
    }
}

/// Trims trailing slashes and adds `/v1` to a bare origin (`http://localhost:11434` →
/// `http://localhost:11434/v1`), so both spellings users paste work; a URL with a path is
/// taken as the API root as given (`https://openrouter.ai/api/v1`).
fn normalize_base_url(url: &str) -> String {
    let trimmed = url.trim().trim_end_matches('/');
    let after_scheme = trimmed.split_once("://").map(|(_, r)| r).unwrap_or(trimmed);
    if after_scheme.contains('/') {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool_use(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "fs_read".into(),
            input: json!({"path": "a.md"}),
        }
    }

    /// Requests of one growing conversation sharing a cache: a step, the next step, a changed
    /// message in the middle, a new system prompt, no tools, and an extra named `messages`.
    fn conversation(wire: &WireCache) -> Vec<ChatRequest> {
        let tools: std::sync::Arc<[ToolSpec]> = vec![ToolSpec {
            name: "fs_read".into(),
            description: "Reads \"a file\"".into(),
            input_schema: json!({"type": "object"}),
        }]
        .into();
        let first = vec![
            Message::user_text("hi \u{e9}\n"),
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::text("calling"), tool_use("a")],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::tool_result("a", "body", true)],
            },
        ];
        let mut second = first.clone();
        second.push(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::text("done")],
        });
        second.push(Message::user_text("next"));
        // Text-only shapes written without building values: empty texts, several blocks.
        for (role, texts) in [
            (Role::User, &["a", "", "b \"q\"\u{1}"][..]),
            (Role::Assistant, &[""][..]),
            (Role::Assistant, &["x", "", "y"][..]),
            (Role::User, &[][..]),
            (Role::User, &[""][..]),
        ] {
            second.push(Message {
                role,
                content: texts.iter().map(|t| ContentBlock::text(*t)).collect(),
            });
        }
        let mut changed = second.clone();
        changed[0] = Message::user_text("edited");
        let request = |system: &str, messages: Vec<Message>, tools: &std::sync::Arc<[ToolSpec]>| {
            ChatRequest {
                model: "m".into(),
                system: Some(system.to_owned()),
                messages,
                tools: tools.clone(),
                params: ModelParams::default(),
                wire: wire.clone(),
            }
        };
        let mut extras = request("prompt", second.clone(), &tools);
        extras.params.params.push(("messages".into(), "[]".into()));
        // What the body around the messages depends on changes from one request to the next.
        let mut warmer = request("prompt", second.clone(), &tools);
        warmer.params.temperature = Some(0.2);
        let mut other_model = warmer.clone();
        other_model.model = "n".into();
        let mut extra_param = other_model.clone();
        extra_param.params.params.push(("seed".into(), "7".into()));
        vec![
            request("prompt", first, &tools),
            request("prompt", second.clone(), &tools),
            request("prompt", changed.clone(), &tools),
            request("other prompt", changed, &tools),
            request("", second.clone(), &std::sync::Arc::from(Vec::new())),
            extras,
            warmer,
            other_model,
            extra_param,
            request("prompt", second.clone(), &tools),
            request("", second, &tools),
        ]
    }

    #[test]
    fn encoded_bodies_reusing_the_wire_cache_are_the_request_body_bytes() {
        for kind in [
            ProviderKind::Anthropic,
            ProviderKind::OpenAi,
            ProviderKind::OpenAiCompatible,
            ProviderKind::OpenRouter,
        ] {
            let provider = HttpProvider::new("test", kind, "http://127.0.0.1:9/v1", None);
            let wire = WireCache::default();
            for (step, req) in conversation(&wire).iter().enumerate() {
                let encoded = provider.encode_body(req).unwrap().into_bytes();
                let whole = serde_json::to_vec(&provider.request_body(req)).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&encoded),
                    String::from_utf8_lossy(&whole),
                    "{kind:?}, request {step}"
                );
            }
        }
    }

    #[test]
    fn base_urls_normalize() {
        assert_eq!(
            normalize_base_url("http://localhost:11434"),
            "http://localhost:11434/v1"
        );
        assert_eq!(
            normalize_base_url("http://localhost:11434/v1/"),
            "http://localhost:11434/v1"
        );
        assert_eq!(
            normalize_base_url("https://openrouter.ai/api/v1"),
            "https://openrouter.ai/api/v1"
        );
    }
}
