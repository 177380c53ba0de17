//! Scripted turns: what the mock answers to one request.

use std::time::Duration;

use serde_json::Value;

/// Token usage a scripted reply reports. Defaults are small fixed numbers so tests can assert
/// on them exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens (Anthropic `input_tokens`, OpenAI `prompt_tokens`).
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
    /// Prompt tokens served from the cache (Anthropic `cache_read_input_tokens`, OpenAI
    /// `prompt_tokens_details.cached_tokens`).
    pub cache_read: u64,
    /// Prompt tokens written to the cache (Anthropic `cache_creation_input_tokens`).
    pub cache_write: u64,
    /// Reasoning tokens (OpenAI `completion_tokens_details.reasoning_tokens`).
    pub reasoning: u64,
}

impl Default for Usage {
    fn default() -> Self {
        Usage {
            input: 10,
            output: 5,
            cache_read: 0,
            cache_write: 0,
            reasoning: 0,
        }
    }
}

/// One piece of a scripted assistant reply, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Visible text.
    Text(String),
    /// Reasoning text; `signature` is sent as an Anthropic `signature_delta`.
    Thinking {
        /// The reasoning text.
        text: String,
        /// Anthropic's opaque signature for the block.
        signature: Option<String>,
    },
    /// A tool call. `id` is generated (`toolu_mock_N` / `call_mock_N`) when `None`.
    ToolCall {
        /// Tool-call id, or `None` for a generated one.
        id: Option<String>,
        /// Tool name.
        name: String,
        /// Arguments; streamed as JSON text split into fragments.
        input: Value,
    },
}

#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    Reply(Vec<Part>),
    Error {
        status: u16,
        message: String,
        raw_body: Option<String>,
    },
    Reset,
    Hang,
}

/// One scripted response: a reply (text, thinking, tool calls) or an HTTP error, optionally
/// delayed. Build with the constructors and chain the `with_*` methods.
#[derive(Debug, Clone)]
pub struct Turn {
    pub(crate) outcome: Outcome,
    pub(crate) delay: Option<Duration>,
    pub(crate) usage: Usage,
    pub(crate) stop_reason: Option<String>,
    pub(crate) chunk_chars: usize,
    pub(crate) retry_after: Option<String>,
    pub(crate) abort_mid_stream: bool,
}

impl Turn {
    fn from_outcome(outcome: Outcome) -> Self {
        Turn {
            outcome,
            delay: None,
            usage: Usage::default(),
            stop_reason: None,
            chunk_chars: 8,
            retry_after: None,
            abort_mid_stream: false,
        }
    }

    /// An empty reply to build on with the `with_*` methods.
    pub fn reply() -> Self {
        Self::from_outcome(Outcome::Reply(Vec::new()))
    }

    /// A text-only reply (stop reason `end_turn` / `stop`).
    pub fn text(text: impl Into<String>) -> Self {
        Self::reply().with_text(text)
    }

    /// A reply that is one tool call (stop reason `tool_use` / `tool_calls`).
    pub fn tool_call(name: impl Into<String>, input: Value) -> Self {
        Self::reply().with_tool_call(name, input)
    }

    /// A reply that thinks, then answers with text.
    pub fn thinking(thought: impl Into<String>, text: impl Into<String>) -> Self {
        Self::reply().with_thinking(thought).with_text(text)
    }

    /// An HTTP error with the vendor's error body around `message` (OpenAI
    /// `{"error":{"message",…}}`, Anthropic `{"type":"error","error":{"type","message"}}`).
    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Self::from_outcome(Outcome::Error {
            status,
            message: message.into(),
            raw_body: None,
        })
    }

    /// An HTTP error whose body is sent verbatim.
    pub fn error_raw(status: u16, body: impl Into<String>) -> Self {
        Self::from_outcome(Outcome::Error {
            status,
            message: String::new(),
            raw_body: Some(body.into()),
        })
    }

    /// `429 Too Many Requests` with `Retry-After: <seconds>`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self::error(429, "rate limited").with_retry_after(retry_after_secs.to_string())
    }

    /// `503 Service Unavailable` (an overloaded or starting server).
    pub fn unavailable() -> Self {
        Self::error(503, "service unavailable")
    }

    /// Reads the request, then resets the connection (TCP RST) without a response: the
    /// client sees "connection reset".
    pub fn reset() -> Self {
        Self::from_outcome(Outcome::Reset)
    }

    /// Reads the request and never answers: a hung model. The request stays open until the
    /// client gives up (counted by [`crate::MockProvider::requests_abandoned`]) or the mock is
    /// dropped; bound the code under test with a timeout or an abort.
    pub fn hang() -> Self {
        Self::from_outcome(Outcome::Hang)
    }

    /// Appends visible text.
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.push_part(Part::Text(text.into()));
        self
    }

    /// Appends a reasoning block without a signature.
    pub fn with_thinking(mut self, text: impl Into<String>) -> Self {
        self.push_part(Part::Thinking {
            text: text.into(),
            signature: None,
        });
        self
    }

    /// Appends a reasoning block with an Anthropic signature.
    pub fn with_signed_thinking(
        mut self,
        text: impl Into<String>,
        signature: impl Into<String>,
    ) -> Self {
        self.push_part(Part::Thinking {
            text: text.into(),
            signature: Some(signature.into()),
        });
        self
    }

    /// Appends a tool call with a generated id.
    pub fn with_tool_call(mut self, name: impl Into<String>, input: Value) -> Self {
        self.push_part(Part::ToolCall {
            id: None,
            name: name.into(),
            input,
        });
        self
    }

    /// Appends a tool call with a fixed id.
    pub fn with_tool_call_id(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        input: Value,
    ) -> Self {
        self.push_part(Part::ToolCall {
            id: Some(id.into()),
            name: name.into(),
            input,
        });
        self
    }

    /// Waits this long before answering (ignored in zero-latency mode).
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Reports this usage instead of the default.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// Overrides the stop reason (vendor spelling, e.g. `max_tokens` or `length`).
    pub fn with_stop_reason(mut self, reason: impl Into<String>) -> Self {
        self.stop_reason = Some(reason.into());
        self
    }

    /// Splits streamed text and tool arguments into fragments of at most `chars` characters
    /// (default 8, so any non-trivial argument object arrives in several pieces).
    pub fn with_chunk_chars(mut self, chars: usize) -> Self {
        self.chunk_chars = chars.max(1);
        self
    }

    /// Adds a `Retry-After` header to an error turn.
    pub fn with_retry_after(mut self, value: impl Into<String>) -> Self {
        self.retry_after = Some(value.into());
        self
    }

    /// For streamed replies: sends the first half of the events and then drops the connection,
    /// as a reset mid-stream would.
    pub fn with_abort_mid_stream(mut self) -> Self {
        self.abort_mid_stream = true;
        self
    }

    fn push_part(&mut self, part: Part) {
        match &mut self.outcome {
            Outcome::Reply(parts) => parts.push(part),
            // An error turn has no body parts; turning it into a reply is the clearer reading.
            Outcome::Error { .. } | Outcome::Reset | Outcome::Hang => {
                self.outcome = Outcome::Reply(vec![part]);
            }
        }
    }
}
