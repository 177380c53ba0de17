//! The two vendor wire formats: JSON bodies and SSE event sequences for a scripted reply.

use serde_json::{Value, json};

use crate::turn::{Part, Usage};

/// Splits `s` into pieces of at most `n` characters (on char boundaries).
pub(crate) fn chunks(s: &str, n: usize) -> Vec<String> {
    if s.is_empty() {
        return vec![String::new()];
    }
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

/// Everything the encoders need besides the parts.
pub(crate) struct ReplyCtx<'a> {
    pub model: &'a str,
    /// Sequence number of this request, for ids.
    pub n: u64,
    pub usage: Usage,
    pub stop_reason: Option<&'a str>,
    pub chunk_chars: usize,
}

fn tool_id(prefix: &str, ctx: &ReplyCtx<'_>, i: usize, id: &Option<String>) -> String {
    id.clone()
        .unwrap_or_else(|| format!("{prefix}_mock_{}_{}", ctx.n, i))
}

fn has_tool_call(parts: &[Part]) -> bool {
    parts.iter().any(|p| matches!(p, Part::ToolCall { .. }))
}

// ---------------------------------------------------------------------------------------------
// OpenAI Chat Completions
// ---------------------------------------------------------------------------------------------

fn openai_usage(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.input,
        "completion_tokens": u.output,
        "total_tokens": u.input + u.output,
        "prompt_tokens_details": {"cached_tokens": u.cache_read},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning},
    })
}

fn openai_finish(parts: &[Part], ctx: &ReplyCtx<'_>) -> String {
    ctx.stop_reason.map(str::to_owned).unwrap_or_else(|| {
        if has_tool_call(parts) {
            "tool_calls".into()
        } else {
            "stop".into()
        }
    })
}

/// A non-streamed `chat.completion` object.
pub(crate) fn openai_json(parts: &[Part], ctx: &ReplyCtx<'_>) -> Value {
    let text: String = parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let reasoning: String = parts
        .iter()
        .filter_map(|p| match p {
            Part::Thinking { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let calls: Vec<Value> = parts
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match p {
            Part::ToolCall { id, name, input } => Some(json!({
                "id": tool_id("call", ctx, i, id),
                "type": "function",
                "function": {"name": name, "arguments": input.to_string()},
            })),
            _ => None,
        })
        .collect();
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) },
    });
    if !reasoning.is_empty() {
        message["reasoning_content"] = Value::String(reasoning);
    }
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": format!("chatcmpl-mock-{}", ctx.n),
        "object": "chat.completion",
        "created": 0,
        "model": ctx.model,
        "choices": [{"index": 0, "message": message, "finish_reason": openai_finish(parts, ctx)}],
        "usage": openai_usage(&ctx.usage),
    })
}

/// The `data:` payloads of a streamed reply, `[DONE]` included.
pub(crate) fn openai_sse(parts: &[Part], ctx: &ReplyCtx<'_>, include_usage: bool) -> Vec<String> {
    let id = format!("chatcmpl-mock-{}", ctx.n);
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": ctx.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
        .to_string()
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let mut tool_index = 0usize;
    for (i, part) in parts.iter().enumerate() {
        match part {
            Part::Text(t) => {
                for piece in chunks(t, ctx.chunk_chars) {
                    out.push(chunk(json!({"content": piece}), Value::Null));
                }
            }
            Part::Thinking { text, .. } => {
                for piece in chunks(text, ctx.chunk_chars) {
                    out.push(chunk(json!({"reasoning_content": piece}), Value::Null));
                }
            }
            Part::ToolCall {
                id: call_id,
                name,
                input,
            } => {
                // As OpenAI does: the first fragment carries id and name with empty
                // arguments, the following ones only the index and argument text.
                out.push(chunk(
                    json!({"tool_calls": [{
                        "index": tool_index,
                        "id": tool_id("call", ctx, i, call_id),
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }]}),
                    Value::Null,
                ));
                for piece in chunks(&input.to_string(), ctx.chunk_chars) {
                    out.push(chunk(
                        json!({"tool_calls": [{"index": tool_index, "function": {"arguments": piece}}]}),
                        Value::Null,
                    ));
                }
                tool_index += 1;
            }
        }
    }
    out.push(chunk(json!({}), Value::String(openai_finish(parts, ctx))));
    if include_usage {
        out.push(
            json!({
                "id": id,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": ctx.model,
                "choices": [],
                "usage": openai_usage(&ctx.usage),
            })
            .to_string(),
        );
    }
    out.push("[DONE]".into());
    out
}

/// OpenAI's error body.
pub(crate) fn openai_error(status: u16, message: &str) -> Value {
    let kind = match status {
        401 | 403 => "invalid_request_error",
        429 => "rate_limit_exceeded",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}

// ---------------------------------------------------------------------------------------------
// Anthropic Messages
// ---------------------------------------------------------------------------------------------

fn anthropic_stop(parts: &[Part], ctx: &ReplyCtx<'_>) -> String {
    ctx.stop_reason.map(str::to_owned).unwrap_or_else(|| {
        if has_tool_call(parts) {
            "tool_use".into()
        } else {
            "end_turn".into()
        }
    })
}

fn anthropic_usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input,
        "output_tokens": u.output,
        "cache_creation_input_tokens": u.cache_write,
        "cache_read_input_tokens": u.cache_read,
    })
}

/// A non-streamed `message` object.
pub(crate) fn anthropic_json(parts: &[Part], ctx: &ReplyCtx<'_>) -> Value {
    let content: Vec<Value> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| match p {
            Part::Text(t) => json!({"type": "text", "text": t}),
            Part::Thinking { text, signature } => {
                json!({"type": "thinking", "thinking": text, "signature": signature.clone().unwrap_or_default()})
            }
            Part::ToolCall { id, name, input } => json!({
                "type": "tool_use", "id": tool_id("toolu", ctx, i, id), "name": name, "input": input,
            }),
        })
        .collect();
    json!({
        "id": format!("msg_mock_{}", ctx.n),
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": content,
        "stop_reason": anthropic_stop(parts, ctx),
        "stop_sequence": null,
        "usage": anthropic_usage(&ctx.usage),
    })
}

/// `(event name, data)` pairs of a streamed reply.
pub(crate) fn anthropic_sse(parts: &[Part], ctx: &ReplyCtx<'_>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut push = |name: &str, data: Value| out.push((name.to_owned(), data.to_string()));
    let mut start_usage = anthropic_usage(&ctx.usage);
    // Anthropic reports a provisional output count at the start and the real one at the end.
    start_usage["output_tokens"] = json!(1);
    push(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_mock_{}", ctx.n), "type": "message", "role": "assistant",
            "model": ctx.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": start_usage,
        }}),
    );
    push("ping", json!({"type": "ping"}));
    for (index, part) in parts.iter().enumerate() {
        match part {
            Part::Text(t) => {
                push(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
                );
                for piece in chunks(t, ctx.chunk_chars) {
                    push(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}),
                    );
                }
            }
            Part::Thinking { text, signature } => {
                push(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": ""}}),
                );
                for piece in chunks(text, ctx.chunk_chars) {
                    push(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": piece}}),
                    );
                }
                if let Some(sig) = signature {
                    push(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": sig}}),
                    );
                }
            }
            Part::ToolCall { id, name, input } => {
                push(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": {
                        "type": "tool_use", "id": tool_id("toolu", ctx, index, id), "name": name, "input": {},
                    }}),
                );
                for piece in chunks(&input.to_string(), ctx.chunk_chars) {
                    push(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                    );
                }
            }
        }
        push(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
    }
    push(
        "message_delta",
        json!({"type": "message_delta",
            "delta": {"stop_reason": anthropic_stop(parts, ctx), "stop_sequence": null},
            "usage": {"output_tokens": ctx.usage.output}}),
    );
    push("message_stop", json!({"type": "message_stop"}));
    out
}

/// Anthropic's error body.
pub(crate) fn anthropic_error(status: u16, message: &str) -> Value {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}
