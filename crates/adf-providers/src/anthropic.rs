//! Anthropic Messages: request body and SSE parser.
//!
//! The request puts the system prompt at the top level as a text block marked
//! `cache_control: ephemeral` (the stable prompt is the cacheable prefix; cache reads and writes
//! come back in usage). With reasoning on it sends `thinking: {type: enabled, budget_tokens}` and
//! leaves out `temperature` and `top_p`, which the API refuses alongside thinking.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Map, Value, json};

use super::error::ProviderError;
use super::http::{SseParser, apply_extras, cut_short};
use super::types::{
    ChatRequest, ContentBlock, Role, StopReason, StreamEvent, ToolCall, ToolResultContent,
    ToolSpec, Usage,
};

/// The `anthropic-version` header value.
pub const API_VERSION: &str = "2023-06-01";

/// Thinking budget when reasoning is on but neither a budget nor an effort is given.
const DEFAULT_BUDGET: u64 = 4096;

fn budget_for(effort: Option<&str>) -> u64 {
    match effort {
        Some("minimal") => 1024,
        Some("low") => 2048,
        Some("medium") => 8192,
        Some("high") => 16_384,
        Some("xhigh") => 32_768,
        _ => DEFAULT_BUDGET,
    }
}

/// `data:image/png;base64,AAAA` → `(media_type, data)`.
fn parse_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media = meta.strip_suffix(";base64")?;
    Some((media, data))
}

fn image_block(url: &str) -> Value {
    match parse_data_url(url) {
        Some((media_type, data)) => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }),
        None => json!({"type": "image", "source": {"type": "url", "url": url}}),
    }
}

/// Maps one block; `None` drops it (empty text and unsigned thinking, which the API refuses).
fn block(b: &ContentBlock) -> Option<Value> {
    Some(match b {
        ContentBlock::Text { text } if text.is_empty() => return None,
        ContentBlock::Text { text } => json!({"type": "text", "text": text}),
        ContentBlock::ToolUse { id, name, input } => {
            let input = if input.is_object() {
                input.clone()
            } else {
                json!({})
            };
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            let content = match content {
                ToolResultContent::Text(t) => Value::String(t.clone()),
                ToolResultContent::Blocks(bs) => {
                    Value::Array(bs.iter().filter_map(block).collect())
                }
            };
            let mut v =
                json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": content});
            if *is_error {
                v["is_error"] = Value::Bool(true);
            }
            v
        }
        ContentBlock::Thinking {
            thinking,
            signature: Some(sig),
            ..
        } => json!({"type": "thinking", "thinking": thinking, "signature": sig}),
        ContentBlock::Thinking {
            signature: None, ..
        } => return None,
        ContentBlock::RedactedThinking { data } => {
            json!({"type": "redacted_thinking", "data": data})
        }
        ContentBlock::ImageUrl { image_url } => image_block(&image_url.url),
        ContentBlock::InputAudio { .. } => {
            json!({"type": "text", "text": "[audio omitted: this provider does not accept audio input]"})
        }
        ContentBlock::VideoUrl { .. } => {
            json!({"type": "text", "text": "[video omitted: this provider does not accept video input]"})
        }
    })
}

/// One tool as the format declares it.
pub(crate) fn tool_json(t: &ToolSpec) -> Value {
    json!({"name": t.name, "description": t.description, "input_schema": t.input_schema})
}

/// One message as the format sends it, or `None` when nothing of it can be sent.
pub(crate) fn message_json(m: &super::types::Message) -> Option<Value> {
    let content: Vec<Value> = m.content.iter().filter_map(block).collect();
    (!content.is_empty()).then(|| {
        json!({
            "role": match m.role { Role::User => "user", Role::Assistant => "assistant" },
            "content": content,
        })
    })
}

/// The JSON body of a streaming `POST /v1/messages`. With `placeholders` the `messages` and
/// `tools` entries are `null` in their places, for the caller to fill with the JSON it keeps
/// ([`crate::http::messages_json`], [`crate::http::ToolsJson`]).
pub(crate) fn build_body(req: &ChatRequest, prompt_cache: bool, placeholders: bool) -> Value {
    let p = &req.params;
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    let mut max_tokens = p.max_tokens.unwrap_or(4096);
    // The API's minimum budget is 1024.
    let thinking = p.reasoning.as_ref().filter(|r| r.is_on()).map(|r| {
        r.max_tokens
            .unwrap_or_else(|| budget_for(r.effort.as_deref()))
            .max(1024)
    });
    if let Some(budget) = thinking {
        // budget_tokens must be below max_tokens; keep the configured room for the answer.
        if max_tokens <= budget {
            max_tokens += budget;
        }
    }
    body.insert("max_tokens".into(), json!(max_tokens));
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        let mut block = json!({"type": "text", "text": system});
        if prompt_cache {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
        body.insert("system".into(), json!([block]));
    }
    let messages = if placeholders {
        Value::Null
    } else {
        Value::Array(req.messages.iter().filter_map(message_json).collect())
    };
    body.insert("messages".into(), messages);
    if !req.tools.is_empty() {
        let tools = if placeholders {
            Value::Null
        } else {
            Value::Array(req.tools.iter().map(tool_json).collect())
        };
        body.insert("tools".into(), tools);
    }
    match thinking {
        Some(budget) => {
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
        }
        None => {
            if let Some(t) = p.temperature {
                body.insert("temperature".into(), json!(t));
            }
            if let Some(t) = p.top_p {
                body.insert("top_p".into(), json!(t));
            }
        }
    }
    body.insert("stream".into(), json!(true));
    let mut body = Value::Object(body);
    apply_extras(&mut body, p);
    body
}

enum Block {
    Text,
    Thinking {
        text: String,
        signature: Option<String>,
    },
    Redacted(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
}

/// Parses Anthropic's SSE events.
pub(crate) struct Parser {
    provider: String,
    blocks: BTreeMap<u64, Block>,
    usage: Usage,
    stop: Option<StopReason>,
    done: bool,
}

impl Parser {
    pub(crate) fn new(provider: &str) -> Self {
        Parser {
            provider: provider.to_owned(),
            blocks: BTreeMap::new(),
            usage: Usage::default(),
            stop: None,
            done: false,
        }
    }

    fn protocol(&self, message: impl Into<String>) -> ProviderError {
        ProviderError::Protocol {
            provider: self.provider.clone(),
            message: message.into(),
        }
    }

    fn read_usage(&mut self, u: &Value) {
        let get = |k: &str| u.get(k).and_then(Value::as_u64);
        let read = get("cache_read_input_tokens");
        let write = get("cache_creation_input_tokens");
        if let Some(input) = get("input_tokens") {
            // Already the uncached part, which is what `Usage::input` means.
            self.usage.input = input;
        }
        if let Some(r) = read {
            self.usage.cache_read = r;
        }
        if let Some(w) = write {
            self.usage.cache_write = w;
        }
        if let Some(o) = get("output_tokens") {
            self.usage.output = o;
        }
    }
}

fn stop_reason(s: &str) -> StopReason {
    match s {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
}

impl Parser {
    /// `content_block_start`: opens the block at `index`; a tool call and any opening text
    /// are announced at once.
    fn block_start(&mut self, v: &Value, index: u64, out: &mut VecDeque<StreamEvent>) {
        let cb = v.get("content_block").cloned().unwrap_or(Value::Null);
        let s = |k: &str| cb.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let block = match cb.get("type").and_then(Value::as_str) {
            Some("thinking") => Block::Thinking {
                text: s("thinking"),
                signature: None,
            },
            Some("redacted_thinking") => Block::Redacted(s("data")),
            Some("tool_use") | Some("server_tool_use") => {
                out.push_back(StreamEvent::ToolCallStarted {
                    id: s("id"),
                    name: s("name"),
                });
                Block::ToolUse {
                    id: s("id"),
                    name: s("name"),
                    json: String::new(),
                }
            }
            _ => {
                let text = s("text");
                if !text.is_empty() {
                    out.push_back(StreamEvent::TextDelta(text));
                }
                Block::Text
            }
        };
        self.blocks.insert(index, block);
    }

    /// `content_block_delta`: text and thinking stream out; signatures and tool arguments
    /// accumulate on their block.
    fn block_delta(&mut self, v: &Value, index: u64, out: &mut VecDeque<StreamEvent>) {
        let d = v.get("delta").cloned().unwrap_or(Value::Null);
        let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        match (
            d.get("type").and_then(Value::as_str),
            self.blocks.get_mut(&index),
        ) {
            (Some("text_delta"), _) => out.push_back(StreamEvent::TextDelta(s("text"))),
            (Some("thinking_delta"), Some(Block::Thinking { text, .. })) => {
                let piece = s("thinking");
                text.push_str(&piece);
                out.push_back(StreamEvent::ThinkingDelta(piece));
            }
            (Some("signature_delta"), Some(Block::Thinking { signature, .. })) => {
                signature
                    .get_or_insert_with(String::new)
                    .push_str(&s("signature"));
            }
            (Some("input_json_delta"), Some(Block::ToolUse { json, .. })) => {
                json.push_str(&s("partial_json"));
            }
            // Citations and future delta types carry nothing we store.
            _ => {}
        }
    }

    /// `content_block_stop`: a finished thinking block or tool call becomes its event.
    fn block_stop(
        &mut self,
        index: u64,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ProviderError> {
        match self.blocks.remove(&index) {
            Some(Block::Thinking { text, signature }) => {
                out.push_back(StreamEvent::Thinking { text, signature })
            }
            Some(Block::Redacted(data)) => out.push_back(StreamEvent::RedactedThinking(data)),
            Some(Block::ToolUse { id, name, json }) => {
                let input = if json.trim().is_empty() {
                    json!({})
                } else {
                    serde_json::from_str(&json).map_err(|e| {
                        self.protocol(format!(
                            "tool call {name:?} has arguments that are not JSON: {e}"
                        ))
                    })?
                };
                out.push_back(StreamEvent::ToolCall(ToolCall { id, name, input }));
            }
            Some(Block::Text) | None => {}
        }
        Ok(())
    }

    /// An `error` event: overload, API and rate-limit errors are transient.
    fn stream_error(&self, v: &Value) -> ProviderError {
        let kind = v
            .pointer("/error/type")
            .and_then(Value::as_str)
            .unwrap_or("");
        let message = v
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("error event in the stream")
            .to_owned();
        let failure = match kind {
            "rate_limit_error" => crate::FailureKind::RateLimited,
            _ => crate::FailureKind::ServerError,
        };
        match kind {
            "overloaded_error" | "api_error" | "rate_limit_error" => ProviderError::Transient {
                provider: self.provider.clone(),
                status: None,
                message,
                retry_after: None,
                attempts: 1,
                kind: failure,
            },
            _ => self.protocol(format!("{kind}: {message}")),
        }
    }
}

impl SseParser for Parser {
    fn feed(
        &mut self,
        event: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<bool, ProviderError> {
        let v: Value = serde_json::from_str(data)
            .map_err(|e| self.protocol(format!("bad JSON in {event:?} event: {e}")))?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or(event);
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(u) = v.pointer("/message/usage") {
                    self.read_usage(&u.clone());
                }
            }
            "content_block_start" => self.block_start(&v, index, out),
            "content_block_delta" => self.block_delta(&v, index, out),
            "content_block_stop" => self.block_stop(index, out)?,
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(stop_reason(r));
                }
                if let Some(u) = v.get("usage") {
                    self.read_usage(&u.clone());
                }
            }
            "message_stop" => {
                self.done = true;
                return Ok(true);
            }
            "error" => return Err(self.stream_error(&v)),
            // ping and future event types.
            _ => {}
        }
        Ok(false)
    }

    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError> {
        if !self.done {
            return Err(cut_short(&self.provider, "message_stop"));
        }
        out.push_back(StreamEvent::Usage(self.usage));
        out.push_back(StreamEvent::Stop(self.stop.clone().unwrap_or_default()));
        Ok(())
    }
}
