//! Vendor-neutral request, message, event and usage types.
//!
//! Content blocks use the `adf_loop.content_json` shape (§3.3 adf_loop, Anthropic-style
//! `{type: text|tool_use|tool_result|thinking|image_url|input_audio|video_url, …}`), so a
//! transcript row deserializes straight into [`Message`] and an assistant reply serializes
//! straight back into a row.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user side: owner text, trigger messages, tool results, context rows.
    User,
    /// The model.
    Assistant,
}

/// One conversation message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Author.
    pub role: Role,
    /// Ordered blocks; a bare string in JSON reads as one text block.
    #[serde(deserialize_with = "blocks_or_string")]
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message of one text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: vec![ContentBlock::text(text)],
        }
    }

    /// An assistant message of one text block.
    pub fn assistant_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::text(text)],
        }
    }
}

fn blocks_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ContentBlock>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Blocks(Vec<ContentBlock>),
    }
    Ok(match Either::deserialize(d)? {
        Either::Text(t) => vec![ContentBlock::text(t)],
        Either::Blocks(b) => b,
    })
}

/// `{url}` of an image or video block (a `data:` URL or an `http(s)` URL).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaUrl {
    /// The URL.
    pub url: String,
}

/// Inline audio.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputAudio {
    /// Base64 audio bytes.
    pub data: String,
    /// Container format, e.g. `wav` or `mp3`.
    pub format: String,
}

/// The content of a `tool_result`: plain text or nested blocks (text and images).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolResultContent {
    /// Plain text.
    Text(String),
    /// Nested blocks.
    Blocks(Vec<ContentBlock>),
}

impl Default for ToolResultContent {
    fn default() -> Self {
        ToolResultContent::Text(String::new())
    }
}

impl ToolResultContent {
    /// The text parts joined by newlines (media parts are left out).
    pub fn text(&self) -> String {
        match self {
            ToolResultContent::Text(t) => t.clone(),
            ToolResultContent::Blocks(b) => b
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// One content block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call by the model.
    ToolUse {
        /// Call id, echoed by the matching `tool_result`.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments.
        input: Value,
    },
    /// The result of a tool call.
    ToolResult {
        /// The `tool_use` id this answers.
        tool_use_id: String,
        /// Result content.
        #[serde(default)]
        content: ToolResultContent,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: bool,
    },
    /// Model reasoning.
    Thinking {
        /// Reasoning text.
        thinking: String,
        /// Anthropic's signature; required to send the block back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        /// OpenRouter's structured reasoning, passed back verbatim.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning_details: Option<Value>,
    },
    /// Anthropic's encrypted reasoning, passed back verbatim.
    RedactedThinking {
        /// Opaque data.
        data: String,
    },
    /// An image.
    ImageUrl {
        /// Where the image is.
        image_url: MediaUrl,
    },
    /// Audio.
    InputAudio {
        /// The audio.
        input_audio: InputAudio,
    },
    /// A video.
    VideoUrl {
        /// Where the video is.
        video_url: MediaUrl,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// A `tool_result` block with text content.
    pub fn tool_result(id: impl Into<String>, content: impl Into<String>, is_error: bool) -> Self {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: ToolResultContent::Text(content.into()),
            is_error,
        }
    }
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Value,
}

/// `model.reasoning` (§5.18).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reasoning {
    /// Whether reasoning is requested; absent counts as on when `effort` or `max_tokens` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `minimal|low|medium|high|xhigh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// Reasoning token budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Ask the provider not to return the reasoning text (OpenRouter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<bool>,
}

impl Reasoning {
    /// Whether reasoning is on: `enabled` when given, else whether an effort or budget is set.
    pub fn is_on(&self) -> bool {
        self.enabled
            .unwrap_or(self.effort.is_some() || self.max_tokens.is_some())
    }
}

/// The model parameters of §5.18 that shape a request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelParams {
    /// 0–2.
    pub temperature: Option<f64>,
    /// Maximum output tokens.
    pub max_tokens: Option<u64>,
    /// 0–1.
    pub top_p: Option<f64>,
    /// Reasoning settings, when present and on.
    pub reasoning: Option<Reasoning>,
    /// `{key, value}` extras, provider-level ones first; later keys win. A value that parses as
    /// JSON is sent as that JSON (`"0.5"` → `0.5`), otherwise as a string.
    pub params: Vec<(String, String)>,
    /// Provider-specific options merged into the request body last (objects merge deeply).
    pub provider_params: Map<String, Value>,
}

impl ModelParams {
    /// Reads the `model` object of an agent config, applying the §5.18 defaults (temperature
    /// 0.7, max_tokens 4096) and folding the deprecated `thinking_budget`.
    pub fn from_model_config(model: &Value) -> Self {
        let num = |k: &str| model.get(k).and_then(Value::as_f64);
        let reasoning = match model.get("reasoning") {
            Some(r) if r.is_object() => serde_json::from_value::<Reasoning>(r.clone()).ok(),
            _ => model
                .get("thinking_budget")
                .and_then(Value::as_u64)
                .filter(|b| *b > 0)
                .map(|b| Reasoning {
                    enabled: Some(true),
                    max_tokens: Some(b),
                    ..Reasoning::default()
                }),
        };
        let params = key_value_params(model);
        ModelParams {
            temperature: num("temperature").or(Some(0.7)),
            max_tokens: model
                .get("max_tokens")
                .and_then(Value::as_u64)
                .or(Some(4096)),
            top_p: num("top_p"),
            reasoning: reasoning.filter(Reasoning::is_on),
            params,
            provider_params: model
                .get("provider_params")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        }
    }
}

/// One model request, vendor-neutral.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    /// Model id at the provider.
    pub model: String,
    /// System prompt (Anthropic: top-level `system`; OpenAI: a leading `system` message).
    pub system: Option<String>,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tools on offer.
    /// Shared, not cloned per request: a turn sends the same definitions at every step.
    pub tools: std::sync::Arc<[ToolSpec]>,
    /// Sampling and reasoning parameters.
    pub params: ModelParams,
    /// Where an HTTP provider keeps the bytes of the messages it sent, so the next request of
    /// the same conversation serializes only what is new (see [`WireCache`]).
    pub wire: WireCache,
}

/// The messages of a conversation as an HTTP provider last serialized them, held by whoever
/// keeps the conversation (an executor session, a daemon's agent) and handed to every request
/// of it in [`ChatRequest::wire`]. A request repeats the history it extends, so each message
/// is encoded once instead of once per request; a message that differs from the one at its
/// position is encoded again. It never changes what is sent: a body built with it has the
/// bytes of one built without. Clones share the cache; two requests compare equal whatever
/// their caches hold.
#[derive(Clone, Default)]
pub struct WireCache(
    pub(crate) std::sync::Arc<std::sync::Mutex<Option<crate::http::WireMessages>>>,
);

impl PartialEq for WireCache {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for WireCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireCache").finish_non_exhaustive()
    }
}

/// Token usage of one response, stored on assistant rows as
/// `{input, output, cache_read, cache_write?, reasoning}` (§3.3 adf_loop `tokens`): `cache_read` and
/// `reasoning` are always written (0 when the vendor reports none), as the reference writes them;
/// rows without them still read (0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens not served from or written to the cache (Anthropic `input_tokens`; OpenAI
    /// `prompt_tokens − cached_tokens`), so `input + cache_read + cache_write` is the prompt size.
    pub input: u64,
    /// Output tokens, reasoning included.
    pub output: u64,
    /// Prompt tokens read from the provider's cache.
    #[serde(default)]
    pub cache_read: u64,
    /// Prompt tokens written to the provider's cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write: u64,
    /// Reasoning tokens (0 when not reported).
    #[serde(default)]
    pub reasoning: u64,
}

impl Usage {
    /// The whole prompt: uncached input plus cache reads and writes.
    pub fn prompt_tokens(&self) -> u64 {
        self.input + self.cache_read + self.cache_write
    }
}

/// A config object's `params` list, `[{key, value}]`, as `(key, value)` pairs in order: a
/// string value as it is, any other JSON as its text; items without a key are skipped.
pub(crate) fn key_value_params(owner: &Value) -> Vec<(String, String)> {
    owner
        .get("params")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| {
                    let key = p.get("key")?.as_str()?.to_owned();
                    let value = match p.get("value")? {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (!key.is_empty()).then_some((key, value))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StopReason {
    /// Finished its reply (Anthropic `end_turn`, OpenAI `stop`).
    #[default]
    EndTurn,
    /// Wants tool results (`tool_use`, `tool_calls`).
    ToolUse,
    /// Hit `max_tokens` (`max_tokens`, `length`).
    MaxTokens,
    /// Hit a stop sequence.
    StopSequence,
    /// Refused or filtered (`refusal`, `content_filter`).
    Refusal,
    /// Anything else, verbatim.
    Other(String),
}

impl StopReason {
    /// The spelling stored and reported (`end_turn`, `tool_use`, `max_tokens`, …).
    pub fn as_str(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolUse => "tool_use",
            StopReason::MaxTokens => "max_tokens",
            StopReason::StopSequence => "stop_sequence",
            StopReason::Refusal => "refusal",
            StopReason::Other(s) => s,
        }
    }
}

/// A complete tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Parsed arguments (`{}` when the model sent none).
    pub input: Value,
}

/// What a streaming response yields, in order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// Visible text as it arrives.
    TextDelta(String),
    /// Reasoning text as it arrives.
    ThinkingDelta(String),
    /// A reasoning block is complete (its text is the concatenation of the deltas).
    Thinking {
        /// The full reasoning text.
        text: String,
        /// Anthropic signature, needed to send the block back.
        signature: Option<String>,
    },
    /// Anthropic redacted reasoning block, to be sent back verbatim.
    RedactedThinking(String),
    /// The model started a tool call (for progress display).
    ToolCallStarted {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// A tool call with its complete, parsed arguments.
    ToolCall(ToolCall),
    /// Final token usage (sent once, before [`StreamEvent::Stop`]).
    Usage(Usage),
    /// The response is complete.
    Stop(StopReason),
}

/// A complete assistant reply: what [`collect`](super::collect) builds from a stream.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssistantMessage {
    /// Blocks in the order the model produced them (thinking, text, tool_use).
    pub content: Vec<ContentBlock>,
    /// Token usage.
    pub usage: Usage,
    /// Why the model stopped.
    pub stop_reason: StopReason,
}

impl AssistantMessage {
    /// All text blocks joined.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The tool calls, in order.
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, name, input } => Some(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    /// As a transcript message.
    pub fn into_message(self) -> Message {
        Message {
            role: Role::Assistant,
            content: self.content,
        }
    }
}
