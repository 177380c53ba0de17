//! OpenAI Chat Completions: request body and SSE parser, shared by OpenAI itself, OpenRouter
//! and every OpenAI-compatible server (Ollama, llama.cpp, LM Studio, vLLM).
//!
//! The flavours differ only where the servers do: OpenAI takes `max_completion_tokens` and
//! `reasoning_effort` (and refuses sampling parameters on reasoning models, so those are left
//! out when reasoning is on); OpenRouter takes `max_tokens` and a unified
//! `reasoning: {effort | max_tokens, exclude}` object; compatible servers take `max_tokens` and
//! `reasoning_effort`. Reasoning text is read from `delta.reasoning_content` (vLLM, DeepSeek,
//! llama.cpp) or `delta.reasoning` (OpenRouter, Ollama).

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

use serde::Deserialize;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::error::ProviderError;
use super::http::{SseParser, apply_extras, cut_short};
use super::types::{
    ChatRequest, ContentBlock, Role, StopReason, StreamEvent, ToolCall, ToolResultContent,
    ToolSpec, Usage,
};

/// Which server family speaks the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    OpenAi,
    OpenRouter,
    Compatible,
}

fn media_part(b: &ContentBlock) -> Option<Value> {
    match b {
        ContentBlock::ImageUrl { image_url } => {
            Some(json!({"type": "image_url", "image_url": {"url": image_url.url}}))
        }
        ContentBlock::InputAudio { input_audio } => Some(json!({
            "type": "input_audio",
            "input_audio": {"data": input_audio.data, "format": input_audio.format},
        })),
        ContentBlock::VideoUrl { video_url } => {
            Some(json!({"type": "video_url", "video_url": {"url": video_url.url}}))
        }
        _ => None,
    }
}

/// Text-only content goes as a plain string, which every compatible server accepts; content
/// with media goes as an array of parts.
fn user_content(parts: Vec<Value>) -> Value {
    let all_text = parts
        .iter()
        .all(|p| p.get("type").and_then(Value::as_str) == Some("text"));
    if all_text {
        let texts: Vec<&str> = parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        Value::String(texts.join("\n\n"))
    } else {
        Value::Array(parts)
    }
}

pub(crate) fn push_messages(out: &mut Vec<Value>, m: &super::types::Message, flavor: Flavor) {
    match m.role {
        Role::User => {
            // Tool results become `tool` messages, which must directly follow the assistant
            // message that made the calls; the rest of the user turn follows them.
            let mut parts = Vec::new();
            let mut tool_media = Vec::new();
            for b in &m.content {
                match b {
                    ContentBlock::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } => {
                        let mut text = content.text();
                        if *is_error && !text.starts_with("Error") {
                            text = format!("Error: {text}");
                        }
                        out.push(
                            json!({"role": "tool", "tool_call_id": tool_use_id, "content": text}),
                        );
                        // The tool role takes text only; media a tool returned rides along in
                        // a user message right after the results.
                        if let ToolResultContent::Blocks(bs) = content {
                            tool_media.extend(bs.iter().filter_map(media_part));
                        }
                    }
                    ContentBlock::Text { text } if !text.is_empty() => {
                        parts.push(json!({"type": "text", "text": text}));
                    }
                    other => parts.extend(media_part(other)),
                }
            }
            if !tool_media.is_empty() {
                let mut media = vec![
                    json!({"type": "text", "text": "Media returned by the tool calls above:"}),
                ];
                media.extend(tool_media);
                out.push(json!({"role": "user", "content": media}));
            }
            if !parts.is_empty() {
                out.push(json!({"role": "user", "content": user_content(parts)}));
            }
        }
        Role::Assistant => {
            let mut text = String::new();
            let mut calls = Vec::new();
            let mut details: Vec<Value> = Vec::new();
            for b in &m.content {
                match b {
                    ContentBlock::Text { text: t } => text.push_str(t),
                    ContentBlock::ToolUse { id, name, input } => calls.push(json!({
                        "id": id,
                        "type": "function",
                        "function": {"name": name, "arguments": input.to_string()},
                    })),
                    ContentBlock::Thinking {
                        reasoning_details: Some(d),
                        ..
                    } if flavor == Flavor::OpenRouter => match d {
                        Value::Array(a) => details.extend(a.iter().cloned()),
                        other => details.push(other.clone()),
                    },
                    _ => {}
                }
            }
            if text.is_empty() && calls.is_empty() {
                return;
            }
            let mut msg = json!({
                "role": "assistant",
                "content": if text.is_empty() { Value::Null } else { Value::String(text) },
            });
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            }
            if !details.is_empty() {
                msg["reasoning_details"] = Value::Array(details);
            }
            out.push(msg);
        }
    }
}

/// The wire JSON of a message made of text blocks only (most of a conversation), written
/// without building the values [`push_messages`] builds: the same bytes as serializing them
/// (`None` for any other message). A user's non-empty texts are joined by a blank line, an
/// assistant's texts are concatenated, and a message with no text is left out.
pub(crate) fn text_message_json(
    m: &super::types::Message,
) -> Option<Result<String, serde_json::Error>> {
    let mut texts = Vec::with_capacity(m.content.len());
    for block in &m.content {
        match block {
            ContentBlock::Text { text } => texts.push(text.as_str()),
            _ => return None,
        }
    }
    let (role, text) = match m.role {
        Role::User => {
            texts.retain(|t| !t.is_empty());
            ("user", texts.join("\n\n"))
        }
        Role::Assistant => ("assistant", texts.concat()),
    };
    if text.is_empty() {
        return Some(Ok(String::new()));
    }
    Some(
        serde_json::to_string(&text)
            .map(|content| format!("{{\"role\":\"{role}\",\"content\":{content}}}")),
    )
}

/// One tool as the format declares it.
pub(crate) fn tool_json(t: &ToolSpec) -> Value {
    json!({"type": "function", "function": {
        "name": t.name, "description": t.description, "parameters": t.input_schema,
    }})
}

/// The JSON body of a streaming `POST {baseUrl}/chat/completions`. With `placeholders` the
/// `messages` and `tools` entries are `null` in their places, for the caller to fill with
/// the JSON it keeps ([`crate::http::messages_json`], [`crate::http::ToolsJson`]).
pub(crate) fn build_body(req: &ChatRequest, flavor: Flavor, placeholders: bool) -> Value {
    let p = &req.params;
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    if placeholders {
        body.insert("messages".into(), Value::Null);
    } else {
        let mut messages = Vec::new();
        if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
            messages.push(json!({"role": "system", "content": system}));
        }
        for m in &req.messages {
            push_messages(&mut messages, m, flavor);
        }
        body.insert("messages".into(), Value::Array(messages));
    }
    if !req.tools.is_empty() {
        let tools = if placeholders {
            Value::Null
        } else {
            Value::Array(req.tools.iter().map(tool_json).collect())
        };
        body.insert("tools".into(), tools);
    }
    let reasoning = p.reasoning.as_ref().filter(|r| r.is_on());
    if let Some(n) = p.max_tokens {
        let key = if flavor == Flavor::OpenAi {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body.insert(key.into(), json!(n));
    }
    if !(flavor == Flavor::OpenAi && reasoning.is_some()) {
        if let Some(t) = p.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(t) = p.top_p {
            body.insert("top_p".into(), json!(t));
        }
    }
    if let Some(r) = reasoning {
        match flavor {
            Flavor::OpenRouter => {
                // OpenRouter takes one of effort or max_tokens; an explicit budget wins.
                let mut o = Map::new();
                match (&r.max_tokens, &r.effort) {
                    (Some(n), _) => {
                        o.insert("max_tokens".into(), json!(n));
                    }
                    (None, Some(e)) => {
                        o.insert("effort".into(), json!(e));
                    }
                    (None, None) => {
                        o.insert("enabled".into(), json!(true));
                    }
                }
                if let Some(x) = r.exclude {
                    o.insert("exclude".into(), json!(x));
                }
                body.insert("reasoning".into(), Value::Object(o));
            }
            Flavor::OpenAi | Flavor::Compatible => {
                if let Some(e) = &r.effort {
                    body.insert("reasoning_effort".into(), json!(e));
                }
            }
        }
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    let mut body = Value::Object(body);
    apply_extras(&mut body, p);
    body
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    args: String,
    announced: bool,
}

/// Parses Chat Completions chunks.
pub(crate) struct Parser {
    provider: String,
    thinking: String,
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<Usage>,
    finish: Option<String>,
    done: bool,
}

impl Parser {
    pub(crate) fn new(provider: &str) -> Self {
        Parser {
            provider: provider.to_owned(),
            thinking: String::new(),
            calls: BTreeMap::new(),
            usage: None,
            finish: None,
            done: false,
        }
    }

    fn flush_thinking(&mut self, out: &mut VecDeque<StreamEvent>) {
        if !self.thinking.is_empty() {
            out.push_back(StreamEvent::Thinking {
                text: std::mem::take(&mut self.thinking),
                signature: None,
            });
        }
    }

    fn read_usage(u: &Value) -> Usage {
        // `Value::pointer` would allocate each segment to unescape it; these need none.
        let get = |path: &[&str]| {
            path.iter()
                .try_fold(u, |v, key| v.get(key))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        let prompt = get(&["prompt_tokens"]);
        let cached = get(&["prompt_tokens_details", "cached_tokens"]);
        Usage {
            input: prompt.saturating_sub(cached),
            output: get(&["completion_tokens"]),
            cache_read: cached,
            cache_write: 0,
            reasoning: get(&["completion_tokens_details", "reasoning_tokens"]),
        }
    }
}

/// A chunk in the shape servers send, read without building a tree: the fields are borrowed
/// from the data where they hold no escapes. A chunk this does not read (an `error` entry, a
/// field of an unexpected type, a repeated key) goes through the `Value` path of
/// [`Parser::feed`], which this mirrors field by field.
#[derive(serde::Deserialize)]
struct Chunk<'a> {
    /// Present at all (even `null`): the `Value` path reports it.
    #[serde(default, deserialize_with = "present")]
    error: bool,
    /// Anything but an object or `null` goes to the `Value` path, which ignores it.
    #[serde(default, borrow)]
    usage: Option<UsageChunk<'a>>,
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
}

/// `usage` read without building a map: each count kept as its JSON text, which counts only
/// when it is what `Value::as_u64` takes (a non-negative integer in range), as in
/// [`Parser::read_usage`].
#[derive(serde::Deserialize)]
struct UsageChunk<'a> {
    #[serde(default, borrow)]
    prompt_tokens: Option<&'a RawValue>,
    #[serde(default, borrow)]
    completion_tokens: Option<&'a RawValue>,
    #[serde(default, borrow)]
    prompt_tokens_details: Option<CachedDetails<'a>>,
    #[serde(default, borrow)]
    completion_tokens_details: Option<ReasoningDetails<'a>>,
}

#[derive(serde::Deserialize)]
struct CachedDetails<'a> {
    #[serde(default, borrow)]
    cached_tokens: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct ReasoningDetails<'a> {
    #[serde(default, borrow)]
    reasoning_tokens: Option<&'a RawValue>,
}

impl UsageChunk<'_> {
    fn usage(&self) -> Usage {
        // serde_json reads a non-negative integer that fits as `u64`, any other number as
        // `i64` or `f64`, which `as_u64` refuses: exactly the texts `u64` parses.
        let count = |raw: Option<&RawValue>| raw.and_then(|r| r.get().parse::<u64>().ok());
        let prompt = count(self.prompt_tokens).unwrap_or(0);
        let cached = count(
            self.prompt_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens),
        )
        .unwrap_or(0);
        Usage {
            input: prompt.saturating_sub(cached),
            output: count(self.completion_tokens).unwrap_or(0),
            cache_read: cached,
            cache_write: 0,
            reasoning: count(
                self.completion_tokens_details
                    .as_ref()
                    .and_then(|d| d.reasoning_tokens),
            )
            .unwrap_or(0),
        }
    }
}

#[derive(serde::Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct Delta<'a> {
    /// `Some(None)` for an explicit `null`, which hides `reasoning` as in the `Value` path.
    #[serde(default, borrow, deserialize_with = "nullable")]
    reasoning_content: Option<Option<Cow<'a, str>>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<CallDelta<'a>>>,
}

#[derive(serde::Deserialize)]
struct CallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(serde::Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

impl Parser {
    /// What [`SseParser::feed`] does with a parsed chunk.
    fn feed_value(
        &mut self,
        v: &Value,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<bool, ProviderError> {
        if let Some(err) = v.get("error") {
            // OpenRouter reports upstream failures inside a 200 stream.
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("error chunk in the stream")
                .to_owned();
            let code = err.get("code").and_then(Value::as_u64);
            let status = code.and_then(|c| u16::try_from(c).ok());
            return Err(ProviderError::Transient {
                provider: self.provider.clone(),
                status,
                message,
                retry_after: None,
                attempts: 1,
                kind: crate::http::status_kind(status),
            });
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(Self::read_usage(u));
        }
        let Some(choice) = v.pointer("/choices/0") else {
            return Ok(false);
        };
        if let Some(delta) = choice.get("delta") {
            let reasoning = delta
                .get("reasoning_content")
                .or_else(|| delta.get("reasoning"))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            if let Some(r) = reasoning {
                self.thinking.push_str(r);
                out.push_back(StreamEvent::ThinkingDelta(r.to_owned()));
            }
            if let Some(c) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                self.flush_thinking(out);
                out.push_back(StreamEvent::TextDelta(c.to_owned()));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                self.flush_thinking(out);
                for (pos, c) in calls.iter().enumerate() {
                    let idx = c.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
                    let entry = self.calls.entry(idx).or_default();
                    if let Some(id) = c
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                    {
                        entry.id = id.to_owned();
                    }
                    if let Some(f) = c.get("function") {
                        if let Some(n) = f.get("name").and_then(Value::as_str) {
                            entry.name.push_str(n);
                        }
                        if let Some(a) = f.get("arguments").and_then(Value::as_str) {
                            entry.args.push_str(a);
                        }
                    }
                    if !entry.announced && !entry.name.is_empty() {
                        entry.announced = true;
                        out.push_back(StreamEvent::ToolCallStarted {
                            id: entry.id.clone(),
                            name: entry.name.clone(),
                        });
                    }
                }
            }
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(f.to_owned());
        }
        Ok(false)
    }

    /// What [`SseParser::feed`] does with a chunk without `error`, from its typed form.
    fn apply(&mut self, chunk: Chunk<'_>, out: &mut VecDeque<StreamEvent>) {
        if let Some(u) = &chunk.usage {
            self.usage = Some(u.usage());
        }
        let Some(choice) = chunk.choices.and_then(|c| c.into_iter().next()) else {
            return;
        };
        if let Some(delta) = choice.delta {
            let reasoning = match delta.reasoning_content {
                Some(explicit) => explicit,
                None => delta.reasoning,
            }
            .filter(|s| !s.is_empty());
            if let Some(r) = reasoning {
                self.thinking.push_str(&r);
                out.push_back(StreamEvent::ThinkingDelta(r.into_owned()));
            }
            if let Some(c) = delta.content.filter(|s| !s.is_empty()) {
                self.flush_thinking(out);
                out.push_back(StreamEvent::TextDelta(c.into_owned()));
            }
            if let Some(calls) = delta.tool_calls {
                self.flush_thinking(out);
                for (pos, c) in calls.into_iter().enumerate() {
                    let idx = c.index.unwrap_or(pos as u64);
                    let entry = self.calls.entry(idx).or_default();
                    if let Some(id) = c.id.filter(|s| !s.is_empty()) {
                        entry.id = id.into_owned();
                    }
                    if let Some(f) = c.function {
                        if let Some(n) = f.name {
                            entry.name.push_str(&n);
                        }
                        if let Some(a) = f.arguments {
                            entry.args.push_str(&a);
                        }
                    }
                    if !entry.announced && !entry.name.is_empty() {
                        entry.announced = true;
                        out.push_back(StreamEvent::ToolCallStarted {
                            id: entry.id.clone(),
                            name: entry.name.clone(),
                        });
                    }
                }
            }
        }
        if let Some(f) = choice.finish_reason {
            self.finish = Some(f.into_owned());
        }
    }
}

impl SseParser for Parser {
    fn feed(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<bool, ProviderError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        if let Ok(chunk) = serde_json::from_str::<Chunk<'_>>(data)
            && !chunk.error
        {
            self.apply(chunk, out);
            return Ok(false);
        }
        let v: Value = serde_json::from_str(data).map_err(|e| ProviderError::Protocol {
            provider: self.provider.clone(),
            message: format!("bad JSON in a stream chunk: {e}"),
        })?;
        self.feed_value(&v, out)
    }

    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError> {
        // Some servers close without `[DONE]`; a finish_reason already says the reply is whole.
        if !self.done && self.finish.is_none() {
            return Err(cut_short(&self.provider, "a finish_reason or [DONE]"));
        }
        self.flush_thinking(out);
        let has_calls = !self.calls.is_empty();
        for (i, call) in std::mem::take(&mut self.calls) {
            let input = if call.args.trim().is_empty() {
                json!({})
            } else {
                serde_json::from_str(&call.args).map_err(|e| ProviderError::Protocol {
                    provider: self.provider.clone(),
                    message: format!(
                        "tool call {:?} has arguments that are not JSON: {e}",
                        call.name
                    ),
                })?
            };
            let id = if call.id.is_empty() {
                // Some local servers omit ids; the transcript needs one to pair results.
                format!("call_{i}")
            } else {
                call.id
            };
            out.push_back(StreamEvent::ToolCall(ToolCall {
                id,
                name: call.name,
                input,
            }));
        }
        if let Some(u) = self.usage {
            out.push_back(StreamEvent::Usage(u));
        }
        let stop = match self.finish.as_deref() {
            // Local servers often say "stop" even when they called tools.
            _ if has_calls => StopReason::ToolUse,
            Some("stop") | None => StopReason::EndTurn,
            Some("length") => StopReason::MaxTokens,
            Some("content_filter") => StopReason::Refusal,
            Some("tool_calls") | Some("function_call") => StopReason::ToolUse,
            Some(other) => StopReason::Other(other.to_owned()),
        };
        out.push_back(StreamEvent::Stop(stop));
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Feeds `chunks` through `feed` (the typed reading first) and through the `Value` reading
    /// alone, and returns what each side gave, step by step and at the end.
    fn both_ways(chunks: &[&str]) -> (Vec<String>, Vec<String>) {
        let mut typed = Parser::new("p");
        let mut by_value = Parser::new("p");
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for data in chunks {
            let mut out = VecDeque::new();
            let result = typed.feed("", data, &mut out);
            a.push(format!("{result:?} {out:?}"));
            let mut out = VecDeque::new();
            let result = match serde_json::from_str::<Value>(data) {
                Ok(v) => by_value.feed_value(&v, &mut out),
                Err(e) => Err(ProviderError::Protocol {
                    provider: "p".into(),
                    message: format!("bad JSON in a stream chunk: {e}"),
                }),
            };
            b.push(format!("{result:?} {out:?}"));
        }
        let mut out = VecDeque::new();
        a.push(format!("{:?} {out:?}", typed.finish(&mut out)));
        let mut out = VecDeque::new();
        b.push(format!("{:?} {out:?}", by_value.finish(&mut out)));
        (a, b)
    }

    #[test]
    fn typed_chunks_read_as_the_value_path_reads_them() {
        let streams: &[&[&str]] = &[
            &[
                r#"{"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
                r#"{"id":"c","choices":[{"index":0,"delta":{"content":"h\u00e9 \"q\"\n"},"finish_reason":null}]}"#,
                r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                r#"{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":1}}}"#,
            ],
            &[
                r#"{"choices":[{"delta":{"reasoning_content":"think"}}],"usage":null}"#,
                r#"{"choices":[{"delta":{"reasoning":"r","reasoning_content":null,"content":"x"}}]}"#,
                r#"{"choices":[{"delta":{"reasoning":"r2"}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_1","type":"function","function":{"name":"fs_","arguments":""}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"name":"read","arguments":"{\"path\":"}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"a\"}"}},{"index":null,"id":"","function":null}]}}]}"#,
                r#"{"choices":[{"delta":null,"finish_reason":"tool_calls"},{"delta":{"content":"second"}}]}"#,
            ],
            // Shapes the typed reading leaves to the `Value` path.
            &[
                r#"{"choices":[{"delta":{"content":5,"reasoning_content":"kept?"}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":-1,"function":{"name":"n"}}]}}]}"#,
                r#"{"choices":{"0":{"delta":{"content":"object choices"}}}}"#,
                r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
                r#"{"choices":[null,{"delta":{"content":"c"}}],"usage":7}"#,
                r#"[]"#,
                r#"[{"choices":[]}]"#,
                r#""text""#,
                r#"{"choices":[{"finish_reason":"length"}]}"#,
            ],
            // Usage counts the typed reading must take as the `Value` path does, or leave to it.
            &[
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":-1,"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":2.0}}}"#,
            ],
            &[
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":18446744073709551616,"completion_tokens":"3","extra":{"x":1}}}"#,
            ],
            &[
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1e2,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":9}}}"#,
            ],
            &[
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"prompt_tokens_details":3,"completion_tokens_details":[]}}"#,
            ],
            &[
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"prompt_tokens":6,"completion_tokens":0}}"#,
            ],
            &[
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":null,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":null}}}"#,
            ],
            &[
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{ "prompt_tokens" : 12 , "prompt_tokens_details" : { "cached_tokens" : 2 } }}"#,
            ],
            &[
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":30,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":40},"completion_tokens_details":{"reasoning_tokens":1}}}"#,
            ],
            &[r#"{"error":null}"#],
            &[r#"{"error":{"message":"upstream","code":502}}"#],
            &[r#"{"choices":[{"delta":{"content":"x"}}]} trailing"#],
        ];
        for chunks in streams {
            let (typed, by_value) = both_ways(chunks);
            assert_eq!(typed, by_value, "{chunks:?}");
        }
        // The corpus reaches what it is meant to: text, reasoning, calls, usage, an error.
        let (typed, _) = both_ways(streams[1]);
        let all = typed.join("\n");
        for seen in [
            "ThinkingDelta(\"think\")",
            "Thinking {",
            "ToolCall(ToolCall { id: \"call_1\", name: \"fs_read\"",
            "TextDelta(\"x\")",
        ] {
            assert!(all.contains(seen), "{seen} in {all}");
        }
        let (typed, _) = both_ways(streams[0]);
        assert!(typed.join("\n").contains("cache_read: 2"), "{typed:?}");
        let (typed, _) = both_ways(streams[streams.len() - 2]);
        assert!(typed[0].contains("upstream"), "{typed:?}");
        let (typed, _) = both_ways(streams[3]);
        assert!(
            typed.join("\n").contains("input: 5, output: 0"),
            "{typed:?}"
        );
    }
}
