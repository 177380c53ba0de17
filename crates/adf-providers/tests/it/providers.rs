//! Providers over real HTTP against `adf-testkit` mock servers, in both wire formats: streaming
//! text, tool calls with split arguments, thinking, usage, retries, auth and request errors, and
//! exact request bodies.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use adf_providers::{
    ApiKey, ChatRequest, ContentBlock, Message, Provider, ProviderError, ReplyBuilder,
    ResolvedModel, Resolver, RetryNotice, Role, StopReason, StreamEvent, ToolCall,
    ToolResultContent, ToolSpec, Usage, collect,
};
use adf_testkit::{MockProvider, Turn, Usage as MockUsage, Wire};
use futures::StreamExt;
use serde_json::{Value, json};

const KEY: &str = "sk-test-key-0123456789";

/// An agent config naming a provider entry of `ty` at the mock, with fast retries.
fn config(mock: &MockProvider, ty: &str, model: Value) -> Value {
    let mut model = model;
    model["provider"] = json!("mock");
    json!({
        "model": model,
        "providers": [{"id": "mock", "type": ty, "name": "Mock", "baseUrl": mock.base_url()}],
        "recovery": {"auto_retry": true, "max_attempts": 3, "base_delay_ms": 1, "max_delay_ms": 5},
    })
}

fn resolver() -> Resolver {
    Resolver::new().with_env(|_| None)
}

fn resolve(mock: &MockProvider, ty: &str, model: Value) -> ResolvedModel {
    let r = resolver().resolve(&config(mock, ty, model), Some(ApiKey::new(KEY)));
    match r {
        Ok(r) => r,
        Err(e) => panic!("resolve: {e}"),
    }
}

fn fs_write_tool() -> ToolSpec {
    ToolSpec {
        name: "fs_write".into(),
        description: "Write a file".into(),
        input_schema: json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        }),
    }
}

/// The conversation of the reference's `first_provider_request` (populated-runtime fixture).
fn golden_messages() -> Vec<Message> {
    let rows = json!([
        {"role": "user", "content": [{"type": "text", "text": "Please write a hello note."}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "I will write a note."},
            {"type": "tool_use", "id": "toolu_golden_1", "name": "fs_write",
             "input": {"mode": "write", "path": "notes/hello.md", "content": "# Hello\n"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_golden_1",
             "content": "Successfully wrote \"notes/hello.md\" (8 characters)", "is_error": false}
        ]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done: notes/hello.md written."}]},
        {"role": "user", "content": "Thanks. Anything else?"}
    ]);
    serde_json::from_value(rows).unwrap()
}

async fn events(p: &dyn Provider, req: &ChatRequest) -> Vec<StreamEvent> {
    let s = p.stream(req).await.unwrap();
    s.map(|e| e.unwrap()).collect().await
}

fn text_of(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

/// Token counts in the order input, output, cache read, cache write, reasoning.
fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64, reasoning: u64) -> Usage {
    Usage {
        input,
        output,
        cache_read,
        cache_write,
        reasoning,
    }
}

/// Streams the golden conversation from `mock`, which answers "Hello there, owner!" in several
/// deltas, reporting `expected` usage except for `sent_input` input tokens (OpenAI counts cached
/// tokens as input; the adapter takes them out): the text arrives whole and the stream ends with
/// `expected` usage and an end-of-turn stop.
async fn golden_hello(
    mock: &MockProvider,
    ty: &str,
    model: Value,
    sent_input: u64,
    expected: Usage,
) {
    let sent = MockUsage {
        input: sent_input,
        output: expected.output,
        cache_read: expected.cache_read,
        cache_write: expected.cache_write,
        reasoning: expected.reasoning,
    };
    mock.push(Turn::text("Hello there, owner!").with_usage(sent));
    let m = resolve(mock, ty, model);
    let req = m.request(
        Some("You are a test agent.".into()),
        golden_messages(),
        vec![fs_write_tool()],
    );
    let evs = events(m.provider.as_ref(), &req).await;
    let deltas = evs
        .iter()
        .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
        .count();
    assert!(deltas > 1, "text arrives in several deltas: {evs:?}");
    assert_eq!(text_of(&evs), "Hello there, owner!");
    assert_eq!(
        evs[evs.len() - 2..],
        [
            StreamEvent::Usage(expected),
            StreamEvent::Stop(StopReason::EndTurn)
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Anthropic
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn anthropic_streams_text_with_usage_and_sends_exact_body() {
    let mock = MockProvider::anthropic().await;
    golden_hello(
        &mock,
        "anthropic",
        json!({"model_id": "claude-test", "temperature": 0.3, "max_tokens": 1000, "top_p": 0.9}),
        120,
        usage(120, 9, 1000, 50, 0),
    )
    .await;

    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(r.header("x-api-key"), Some(KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("authorization"), None);
    assert_eq!(
        r.body,
        json!({
            "model": "claude-test",
            "max_tokens": 1000,
            "system": [{"type": "text", "text": "You are a test agent.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Please write a hello note."}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "I will write a note."},
                    {"type": "tool_use", "id": "toolu_golden_1", "name": "fs_write",
                     "input": {"mode": "write", "path": "notes/hello.md", "content": "# Hello\n"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_golden_1",
                     "content": "Successfully wrote \"notes/hello.md\" (8 characters)"}
                ]},
                {"role": "assistant", "content": [{"type": "text", "text": "Done: notes/hello.md written."}]},
                {"role": "user", "content": [{"type": "text", "text": "Thanks. Anything else?"}]}
            ],
            "tools": [{"name": "fs_write", "description": "Write a file", "input_schema": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            }}],
            "temperature": 0.3,
            "top_p": 0.9,
            "stream": true,
        })
    );
}

/// Runs the same tool-call script through `stream` and `complete` in one wire format.
async fn tool_calls_with_split_arguments(wire: Wire, ty: &str) {
    let mock = MockProvider::start(wire).await;
    let args = json!({"path": "notes/a.md", "content": "line one\nline \"two\" ✓"});
    let turn = Turn::reply()
        .with_text("Writing.")
        .with_tool_call_id("call_1", "fs_write", args.clone())
        .with_tool_call_id("call_2", "fs_list", json!({}))
        .with_chunk_chars(3);
    mock.push(turn.clone()).push(turn);
    let m = resolve(&mock, ty, json!({"model_id": "m1"}));
    let req = m.request(None, vec![Message::user_text("go")], vec![fs_write_tool()]);

    let evs = events(m.provider.as_ref(), &req).await;
    assert!(evs.contains(&StreamEvent::ToolCallStarted {
        id: "call_1".into(),
        name: "fs_write".into()
    }));
    assert_eq!(evs.last(), Some(&StreamEvent::Stop(StopReason::ToolUse)));

    let msg = m.provider.complete(&req).await.unwrap();
    assert_eq!(
        msg.content,
        vec![
            ContentBlock::text("Writing."),
            ContentBlock::ToolUse {
                id: "call_1".into(),
                name: "fs_write".into(),
                input: args
            },
            ContentBlock::ToolUse {
                id: "call_2".into(),
                name: "fs_list".into(),
                input: json!({})
            },
        ]
    );
    assert_eq!(msg.stop_reason, StopReason::ToolUse);
    assert_eq!(
        msg.usage,
        Usage {
            input: 10,
            output: 5,
            ..Usage::default()
        }
    );
    assert_eq!(mock.remaining(), 0);
}

#[tokio::test]
async fn anthropic_tool_calls_with_arguments_split_across_chunks() {
    tool_calls_with_split_arguments(Wire::Anthropic, "anthropic").await;
}

#[tokio::test]
async fn openai_tool_calls_with_arguments_split_across_chunks() {
    tool_calls_with_split_arguments(Wire::OpenAi, "openai").await;
}

#[tokio::test]
async fn anthropic_thinking_is_requested_and_streamed_with_signature() {
    let mock = MockProvider::anthropic().await;
    mock.push(
        Turn::reply()
            .with_signed_thinking("Let me think about notes.", "sig-abc")
            .with_text("Here is my answer."),
    );
    let m = resolve(
        &mock,
        "anthropic",
        json!({"model_id": "claude-test", "temperature": 0.7, "max_tokens": 2000,
               "reasoning": {"enabled": true, "max_tokens": 3000}}),
    );
    let req = m.request(
        Some("sys".into()),
        vec![Message::user_text("think")],
        vec![],
    );
    let evs = events(m.provider.as_ref(), &req).await;
    let thinking: String = evs
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ThinkingDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(thinking, "Let me think about notes.");
    assert!(evs.contains(&StreamEvent::Thinking {
        text: "Let me think about notes.".into(),
        signature: Some("sig-abc".into())
    }));
    assert_eq!(text_of(&evs), "Here is my answer.");

    let body = &mock.requests()[0].body;
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 3000})
    );
    // The budget must fit below max_tokens, so the answer room is added on top.
    assert_eq!(body["max_tokens"], json!(5000));
    assert!(
        body.get("temperature").is_none(),
        "Anthropic refuses temperature with thinking"
    );

    // The signed block goes back on the next request; an unsigned one is dropped.
    let mock2 = MockProvider::anthropic().await;
    mock2.push(Turn::text("ok"));
    let m2 = resolve(&mock2, "anthropic", json!({"model_id": "claude-test"}));
    let history = vec![
        Message::user_text("think"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "signed".into(),
                    signature: Some("s1".into()),
                    reasoning_details: None,
                },
                ContentBlock::Thinking {
                    thinking: "unsigned".into(),
                    signature: None,
                    reasoning_details: None,
                },
                ContentBlock::text("answer"),
            ],
        },
        Message::user_text("more"),
    ];
    m2.provider
        .complete(&m2.request(None, history, vec![]))
        .await
        .unwrap();
    assert_eq!(
        mock2.requests()[0].body["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "signed", "signature": "s1"},
            {"type": "text", "text": "answer"}
        ])
    );
}

// ---------------------------------------------------------------------------------------------
// OpenAI Chat Completions and compatible servers
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn openai_streams_text_with_usage_and_sends_exact_body() {
    let mock = MockProvider::openai().await;
    golden_hello(
        &mock,
        "openai",
        json!({"model_id": "gpt-test", "temperature": 0.3, "max_tokens": 1000,
               "params": [{"key": "frequency_penalty", "value": "0.5"}, {"key": "user", "value": "agent-1"}],
               "provider_params": {"metadata": {"run": "t1"}}}),
        1200,
        usage(200, 9, 1000, 0, 4),
    )
    .await;

    let r = &mock.requests()[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    // Sent in pieces over plain HTTP, yet framed by its declared length, not chunked.
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(
        r.header("content-length"),
        Some(
            serde_json::to_vec(&r.body)
                .unwrap()
                .len()
                .to_string()
                .as_str()
        )
    );
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        r.body,
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "You are a test agent."},
                {"role": "user", "content": "Please write a hello note."},
                {"role": "assistant", "content": "I will write a note.", "tool_calls": [{
                    "id": "toolu_golden_1", "type": "function",
                    "function": {"name": "fs_write",
                                 "arguments": "{\"mode\":\"write\",\"path\":\"notes/hello.md\",\"content\":\"# Hello\\n\"}"}
                }]},
                {"role": "tool", "tool_call_id": "toolu_golden_1",
                 "content": "Successfully wrote \"notes/hello.md\" (8 characters)"},
                {"role": "assistant", "content": "Done: notes/hello.md written."},
                {"role": "user", "content": "Thanks. Anything else?"}
            ],
            "tools": [{"type": "function", "function": {
                "name": "fs_write", "description": "Write a file", "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"],
                }}}],
            "max_completion_tokens": 1000,
            "temperature": 0.3,
            "stream": true,
            "stream_options": {"include_usage": true},
            "frequency_penalty": 0.5,
            "user": "agent-1",
            "metadata": {"run": "t1"},
        })
    );
}

#[tokio::test]
async fn openai_reasoning_effort_and_reasoning_content() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::thinking("Step 1, step 2.", "Answer."));
    let m = resolve(
        &mock,
        "openai",
        json!({"model_id": "o-test", "temperature": 0.7, "reasoning": {"effort": "high"}}),
    );
    let msg = m
        .provider
        .complete(&m.request(None, vec![Message::user_text("q")], vec![]))
        .await
        .unwrap();
    assert_eq!(
        msg.content,
        vec![
            ContentBlock::Thinking {
                thinking: "Step 1, step 2.".into(),
                signature: None,
                reasoning_details: None
            },
            ContentBlock::text("Answer."),
        ]
    );
    let body = &mock.requests()[0].body;
    assert_eq!(body["reasoning_effort"], json!("high"));
    assert_eq!(body["max_completion_tokens"], json!(4096), "§5.18 default");
    assert!(
        body.get("temperature").is_none(),
        "reasoning models refuse sampling params"
    );
}

#[tokio::test]
async fn openai_compatible_server_without_key_uses_max_tokens() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::text("local reply"));
    // A local server needs no key; the provider sends none.
    let cfg = json!({
        "model": {"provider": "custom:local", "model_id": ""},
        "providers": [{"id": "custom:local", "type": "openai-compatible", "name": "Local",
                       "baseUrl": mock.base_url(), "defaultModel": "llama-test",
                       "params": [{"key": "num_ctx", "value": "8192"}]}],
    });
    let m = resolver().resolve(&cfg, None).unwrap();
    assert_eq!(m.model_id, "llama-test");
    let msg = m
        .provider
        .complete(&m.request(None, vec![Message::user_text("hi")], vec![]))
        .await
        .unwrap();
    assert_eq!(msg.text(), "local reply");
    let r = &mock.requests()[0];
    assert_eq!(r.header("authorization"), None);
    assert_eq!(r.body["model"], json!("llama-test"));
    assert_eq!(r.body["max_tokens"], json!(4096));
    assert_eq!(r.body["temperature"], json!(0.7));
    assert_eq!(r.body["num_ctx"], json!(8192));
    assert!(
        r.body.get("tools").is_none(),
        "no tools key when none are offered"
    );
}

#[tokio::test]
async fn openrouter_reasoning_object_and_title_header() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::text("routed"));
    let m = resolve(
        &mock,
        "openrouter",
        json!({"model_id": "anthropic/claude-test", "reasoning": {"enabled": true, "max_tokens": 2048, "exclude": true}}),
    );
    m.provider
        .complete(&m.request(None, vec![Message::user_text("hi")], vec![]))
        .await
        .unwrap();
    let r = &mock.requests()[0];
    assert_eq!(
        r.body["reasoning"],
        json!({"max_tokens": 2048, "exclude": true})
    );
    assert_eq!(r.body["max_tokens"], json!(4096));
    assert_eq!(r.header("x-title"), Some("adf"));
}

#[tokio::test]
async fn openai_tool_results_with_errors_and_images() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::text("ok"));
    let m = resolve(&mock, "openai-compatible", json!({"model_id": "m"}));
    let history = vec![
        Message::user_text("look"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "fs_read".into(),
                    input: json!({"path": "a.png"}),
                },
                ContentBlock::ToolUse {
                    id: "c2".into(),
                    name: "fs_read".into(),
                    input: json!({"path": "nope"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::ToolResult {
                    tool_use_id: "c1".into(),
                    content: ToolResultContent::Blocks(serde_json::from_value(json!([
                        {"type": "text", "text": "image a.png"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
                    ])).unwrap()),
                    is_error: false,
                },
                ContentBlock::tool_result("c2", "not found", true),
            ],
        },
    ];
    m.provider
        .complete(&m.request(None, history, vec![]))
        .await
        .unwrap();
    assert_eq!(
        mock.requests()[0].body["messages"],
        json!([
            {"role": "user", "content": "look"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "fs_read", "arguments": "{\"path\":\"a.png\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "fs_read", "arguments": "{\"path\":\"nope\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "image a.png"},
            {"role": "tool", "tool_call_id": "c2", "content": "Error: not found"},
            {"role": "user", "content": [
                {"type": "text", "text": "Media returned by the tool calls above:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
            ]}
        ])
    );
}

#[tokio::test]
async fn anthropic_tool_result_error_and_image_shapes() {
    let mock = MockProvider::anthropic().await;
    mock.push(Turn::text("ok"));
    let m = resolve(&mock, "anthropic", json!({"model_id": "m"}));
    let history = vec![Message {
        role: Role::User,
        content: vec![
            ContentBlock::tool_result("c2", "not found", true),
            serde_json::from_value(
                json!({"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,BBBB"}}),
            )
            .unwrap(),
        ],
    }];
    m.provider
        .complete(&m.request(None, history, vec![]))
        .await
        .unwrap();
    assert_eq!(
        mock.requests()[0].body["messages"],
        json!([{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c2", "content": "not found", "is_error": true},
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "BBBB"}}
        ]}])
    );
}

// ---------------------------------------------------------------------------------------------
// Retries and errors (§5.20, §6.2)
// ---------------------------------------------------------------------------------------------

fn observed(m: &MockProvider, ty: &str) -> (ResolvedModel, Arc<Mutex<Vec<RetryNotice>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let r = resolver()
        .with_retry_observer(Arc::new(move |n: &RetryNotice| {
            sink.lock().unwrap().push(n.clone())
        }))
        .resolve(
            &config(m, ty, json!({"model_id": "m"})),
            Some(ApiKey::new(KEY)),
        )
        .unwrap();
    (r, seen)
}

/// Collects formatted `tracing` output for one test (the current thread's default subscriber).
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn transient_503_then_success(wire: Wire, ty: &str) {
    let logs = LogBuf::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    // #[tokio::test] runs on this thread, so a thread default sees every event of the test.
    let _guard = tracing::subscriber::set_default(subscriber);
    let mock = MockProvider::start(wire).await;
    mock.push(Turn::error(503, "overloaded"))
        .push(Turn::text("recovered"));
    let (m, seen) = observed(&mock, ty);
    let msg = m
        .provider
        .complete(&m.request(None, vec![Message::user_text("hi")], vec![]))
        .await
        .unwrap();
    assert_eq!(msg.text(), "recovered");
    assert_eq!(mock.request_count(), 2);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "one retry scheduled");
    assert_eq!((seen[0].attempt, seen[0].max_attempts), (1, 3));
    assert_eq!(seen[0].error.status(), Some(503));
    assert!(seen[0].error.to_string().contains("overloaded"));
    assert!(
        seen[0].delay <= Duration::from_millis(5),
        "max_delay_ms caps the backoff"
    );
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let line = logs
        .lines()
        .find(|l| l.contains("event=\"provider_error\""))
        .unwrap_or_else(|| panic!("no provider_error log in {logs:?}"));
    assert!(
        line.contains("WARN") && line.contains("provider=\"mock\""),
        "{line}"
    );
    assert!(
        line.contains("attempt=1") && line.contains("status=503"),
        "{line}"
    );
    assert!(!logs.contains(KEY), "keys never reach logs");
}

#[tokio::test]
async fn stl_11_anthropic_transient_503_retries_and_completes() {
    transient_503_then_success(Wire::Anthropic, "anthropic").await;
}

#[tokio::test]
async fn stl_11_openai_transient_503_retries_and_completes() {
    transient_503_then_success(Wire::OpenAi, "openai").await;
}

#[tokio::test]
async fn stream_retries_until_the_response_starts() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::error(500, "boom"))
        .push(Turn::text("streamed"));
    let (m, _) = observed(&mock, "openai");
    let req = m.request(None, vec![Message::user_text("hi")], vec![]);
    let msg = collect(m.provider.stream(&req).await.unwrap())
        .await
        .unwrap();
    assert_eq!(msg.text(), "streamed");
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test]
async fn stl_12_retry_after_is_honoured_and_attempts_are_bounded() {
    let mock = MockProvider::anthropic().await;
    mock.push(Turn::error(429, "slow down").with_retry_after("0"))
        .push(Turn::error(529, "overloaded"))
        .push(Turn::error(502, "bad gateway"))
        .push(Turn::text("never reached"));
    let (m, seen) = observed(&mock, "anthropic");
    let err = m
        .provider
        .complete(&m.request(None, vec![Message::user_text("hi")], vec![]))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert_eq!(err.status(), Some(502));
    assert!(err.to_string().contains("after 3 attempts"), "{err}");
    assert_eq!(mock.request_count(), 3, "max_attempts 3 counts the first");
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert_eq!(mock.remaining(), 1);

    // Retry-After above the backoff wins (within max_delay_ms).
    let mock = MockProvider::openai().await;
    mock.push(Turn::error(429, "rate limited").with_retry_after("1"))
        .push(Turn::text("ok"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let mut cfg = config(&mock, "openai", json!({"model_id": "m"}));
    cfg["recovery"]["max_delay_ms"] = json!(2000);
    let m = resolver()
        .with_retry_observer(Arc::new(move |n: &RetryNotice| {
            sink.lock().unwrap().push(n.clone())
        }))
        .resolve(&cfg, Some(ApiKey::new(KEY)))
        .unwrap();
    m.provider
        .complete(&m.request(None, vec![Message::user_text("hi")], vec![]))
        .await
        .unwrap();
    assert_eq!(seen.lock().unwrap()[0].delay, Duration::from_secs(1));
}

#[tokio::test]
async fn auto_retry_false_fails_at_once() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::error(503, "overloaded"))
        .push(Turn::text("unused"));
    let mut cfg = config(&mock, "openai", json!({"model_id": "m"}));
    cfg["recovery"]["auto_retry"] = json!(false);
    let m = resolver().resolve(&cfg, Some(ApiKey::new(KEY))).unwrap();
    let err = m
        .provider
        .complete(&m.request(None, vec![Message::user_text("hi")], vec![]))
        .await
        .unwrap_err();
    assert!(err.is_transient());
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn a_stream_cut_mid_way_is_transient_and_complete_retries_it() {
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        let mock = MockProvider::start(wire).await;
        let ty = if wire == Wire::Anthropic {
            "anthropic"
        } else {
            "openai"
        };
        mock.push(Turn::text("a long partial answer that breaks").with_abort_mid_stream())
            .push(Turn::text("whole answer"));
        let (m, seen) = observed(&mock, ty);
        let msg = m
            .provider
            .complete(&m.request(None, vec![Message::user_text("hi")], vec![]))
            .await
            .unwrap();
        assert_eq!(msg.text(), "whole answer", "{wire:?}");
        assert_eq!(mock.request_count(), 2);
        let seen = seen.lock().unwrap();
        assert!(
            seen[0].error.is_transient() && seen[0].error.status().is_none(),
            "{:?}",
            seen[0].error
        );
    }
}

async fn auth_401_fails_at_once(wire: Wire, ty: &str, env_var: &str) {
    let mock = MockProvider::start(wire).await;
    mock.require_api_key("the-right-key-000");
    mock.push(Turn::text("unused"));
    let (m, seen) = observed(&mock, ty);
    let err = m
        .provider
        .complete(&m.request(None, vec![Message::user_text("hi")], vec![]))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ProviderError::Auth { status: 401, .. }),
        "{err:?}"
    );
    assert!(err.is_auth() && !err.is_transient());
    assert!(msg.starts_with("mock rejected the API key (401)"), "{msg}");
    assert!(msg.contains(env_var), "{msg}");
    assert!(
        msg.contains("adf identity set FILE provider:mock:apiKey"),
        "{msg}"
    );
    assert!(!msg.contains(KEY), "the key never appears in errors");
    assert!(!format!("{err:?}").contains(KEY));
    assert_eq!(mock.request_count(), 1, "no retry");
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(mock.remaining(), 1);
}

#[tokio::test]
async fn anthropic_401_fails_at_once_naming_provider_and_fix() {
    auth_401_fails_at_once(Wire::Anthropic, "anthropic", "ANTHROPIC_API_KEY").await;
}

#[tokio::test]
async fn openai_401_fails_at_once_naming_provider_and_fix() {
    auth_401_fails_at_once(Wire::OpenAi, "openai", "OPENAI_API_KEY").await;
}

#[tokio::test]
async fn request_errors_do_not_retry_and_say_what_to_check() {
    for (status, needle) in [
        (400, "max_tokens, temperature"),
        (404, "model.model_id (\"m\")"),
        (422, "params"),
    ] {
        let mock = MockProvider::openai().await;
        mock.push(Turn::error(status, "bad thing"))
            .push(Turn::text("unused"));
        let (m, _) = observed(&mock, "openai");
        let err = m
            .provider
            .complete(&m.request(None, vec![Message::user_text("hi")], vec![]))
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, ProviderError::Request { .. }), "{err:?}");
        assert!(
            msg.starts_with(&format!("mock rejected the request ({status}): bad thing")),
            "{msg}"
        );
        assert!(msg.contains(needle), "{msg}");
        assert_eq!(mock.request_count(), 1);
    }
}

#[tokio::test]
async fn an_exhausted_script_fails_obviously() {
    let mock = MockProvider::anthropic().await;
    let m = resolve(&mock, "anthropic", json!({"model_id": "m"}));
    let err = m
        .provider
        .complete(&m.request(None, vec![Message::user_text("hi")], vec![]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("script exhausted"), "{err}");
    assert_eq!(mock.request_count(), 1, "not retried");
}

#[tokio::test]
async fn connection_refused_is_transient_and_a_local_server_gets_one_retry() {
    let mock = MockProvider::openai().await;
    let cfg = config(&mock, "openai", json!({"model_id": "m"}));
    mock.shutdown().await;
    let m = resolver().resolve(&cfg, Some(ApiKey::new(KEY))).unwrap();
    let err = m
        .provider
        .complete(&m.request(None, vec![Message::user_text("hi")], vec![]))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(
        err.to_string()
            .contains("refused the connection (mock, 2 attempts)"),
        "max_attempts 3, but a local server that refuses gets one retry: {err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Resolution
// ---------------------------------------------------------------------------------------------

#[test]
fn builtin_ids_take_keys_from_env_and_agent_key_wins() {
    let env = |k: &str| (k == "ANTHROPIC_API_KEY").then(|| "env-key".to_owned());
    let cfg = json!({"model": {"provider": "anthropic", "model_id": "claude-x"}});
    let r = Resolver::new().with_env(env);
    let m = r.resolve(&cfg, None).unwrap();
    assert_eq!(m.provider.base_url(), "https://api.anthropic.com/v1");
    assert_eq!(m.provider.id(), "anthropic");
    assert!(
        !format!("{:?}", m.provider).contains("env-key"),
        "Debug hides the key"
    );
    assert!(r.resolve(&cfg, Some(ApiKey::new("agent-key"))).is_ok());

    let missing = Resolver::new()
        .with_env(|_| None)
        .resolve(
            &json!({"model": {"provider": "openrouter", "model_id": "x"}}),
            None,
        )
        .unwrap_err();
    assert!(matches!(missing, ProviderError::MissingKey { .. }));
    let msg = missing.to_string();
    assert!(
        msg.contains("openrouter") && msg.contains("OPENROUTER_API_KEY"),
        "{msg}"
    );
}

#[test]
fn unknown_or_empty_providers_are_config_errors() {
    let r = Resolver::new().with_env(|_| None);
    let e = r
        .resolve(&json!({"model": {"provider": ""}}), None)
        .unwrap_err();
    assert!(e.to_string().contains("model.provider is empty"), "{e}");
    let e = r
        .resolve(
            &json!({"model": {"provider": "ghost", "model_id": "m"}}),
            None,
        )
        .unwrap_err();
    assert!(e.to_string().contains("\"ghost\" not found"), "{e}");
    let e = r
        .resolve(
            &json!({"model": {"provider": "p", "model_id": "m"},
                    "providers": [{"id": "p", "type": "openai-compatible"}]}),
            None,
        )
        .unwrap_err();
    assert!(e.to_string().contains("needs a baseUrl"), "{e}");
    let e = r
        .resolve(&json!({"model": {"provider": "p"}, "providers": [{"id": "p", "type": "openai", "baseUrl": "http://x/v1"}]}), Some(ApiKey::new("k")))
        .unwrap_err();
    assert!(e.to_string().contains("model.model_id is empty"), "{e}");
}

#[test]
fn runtime_providers_and_url_ids_resolve() {
    let r = Resolver::new().with_env(|_| None).with_runtime_provider(
        adf_providers::ProviderConfig::from_json(&json!({
            "id": "mock-local", "type": "openai-compatible",
            "baseUrl": "http://127.0.0.1:9999/v1", "defaultModel": "mock-model"
        }))
        .unwrap(),
    );
    let m = r
        .resolve(&json!({"model": {"provider": "mock-local"}}), None)
        .unwrap();
    assert_eq!(
        (m.provider.base_url(), m.model_id.as_str()),
        ("http://127.0.0.1:9999/v1", "mock-model")
    );
    let m = r
        .resolve(
            &json!({"model": {"provider": "http://localhost:11434", "model_id": "llama3"}}),
            None,
        )
        .unwrap();
    assert_eq!(m.provider.base_url(), "http://localhost:11434/v1");
}

#[test]
fn model_params_fold_thinking_budget_and_defaults() {
    use adf_providers::ModelParams;
    let p = ModelParams::from_model_config(&json!({"thinking_budget": 8000}));
    assert_eq!(p.temperature, Some(0.7));
    assert_eq!(p.max_tokens, Some(4096));
    let r = p.reasoning.unwrap();
    assert_eq!((r.enabled, r.max_tokens), (Some(true), Some(8000)));
    let p =
        ModelParams::from_model_config(&json!({"reasoning": {"enabled": false, "effort": "high"}}));
    assert!(p.reasoning.is_none(), "enabled:false turns reasoning off");
}

#[test]
fn cfg_33_an_explicit_reasoning_wins_over_thinking_budget() {
    let params = adf_providers::ModelParams::from_model_config(&json!({
        "thinking_budget": 2048,
        "reasoning": { "enabled": false }
    }));
    assert!(params.reasoning.is_none());
}

#[test]
fn reply_builder_keeps_block_order_and_joins_text_deltas() {
    let mut reply = ReplyBuilder::default();
    for event in [
        StreamEvent::ThinkingDelta("hm".into()),
        StreamEvent::Thinking {
            text: "plan".into(),
            signature: Some("sig".into()),
        },
        StreamEvent::TextDelta("Wri".into()),
        StreamEvent::TextDelta("ting.".into()),
        StreamEvent::ToolCallStarted {
            id: "c1".into(),
            name: "fs_write".into(),
        },
        StreamEvent::ToolCall(ToolCall {
            id: "c1".into(),
            name: "fs_write".into(),
            input: json!({"path": "a.md"}),
        }),
        StreamEvent::TextDelta("Done".into()),
        StreamEvent::Usage(Usage {
            input: 7,
            output: 3,
            ..Usage::default()
        }),
        StreamEvent::Stop(StopReason::ToolUse),
    ] {
        reply.push(event);
    }
    let message = reply.finish();
    assert_eq!(
        message.content,
        vec![
            ContentBlock::Thinking {
                thinking: "plan".into(),
                signature: Some("sig".into()),
                reasoning_details: None,
            },
            ContentBlock::Text {
                text: "Writing.".into()
            },
            ContentBlock::ToolUse {
                id: "c1".into(),
                name: "fs_write".into(),
                input: json!({"path": "a.md"}),
            },
            ContentBlock::Text {
                text: "Done".into()
            },
        ]
    );
    assert_eq!((message.usage.input, message.usage.output), (7, 3));
    assert_eq!(message.stop_reason, StopReason::ToolUse);
}

#[test]
fn usage_serializes_in_the_adf_loop_tokens_shape() {
    let u = Usage {
        input: 10,
        output: 5,
        cache_read: 3,
        cache_write: 0,
        reasoning: 0,
    };
    // The reference always writes cache_read and reasoning (0 when none); cache_write only
    // when there was any.
    assert_eq!(
        serde_json::to_value(u).unwrap(),
        json!({"input": 10, "output": 5, "cache_read": 3, "reasoning": 0})
    );
    assert_eq!(u.prompt_tokens(), 13);
}

/// A config whose `model.provider` is the URL of a server on this machine.
fn url_provider_config(url: &str) -> Value {
    json!({
        "model": {"provider": url, "model_id": "llama-test"},
        "recovery": {"auto_retry": true, "max_attempts": 3, "base_delay_ms": 1, "max_delay_ms": 5},
    })
}

/// A resolver whose runtime home (`ADF_HOME`, read through its environment) is `home`.
fn resolver_with_home(home: &std::path::Path) -> Resolver {
    let home = home.to_string_lossy().into_owned();
    Resolver::new().with_env(move |name| (name == "ADF_HOME").then(|| home.clone()))
}

#[tokio::test]
async fn srv_22_a_provider_url_that_is_a_recorded_daemon_control_api_is_refused_before_any_request()
{
    // The mock stands where a daemon's control API listens; the daemon record in the runtime
    // home names its address, as a daemon writes it at bind.
    let daemon = MockProvider::openai().await;
    daemon.push(Turn::text("must not be reached"));
    let home = tempfile::tempdir().unwrap();
    adf_egress::control::write_record(
        &home.path().join(adf_egress::control::RECORD_FILE),
        &[daemon.addr()],
    )
    .unwrap();
    let req_for = |m: &ResolvedModel| m.request(None, vec![Message::user_text("hi")], vec![]);

    for url in [
        daemon.base_url(),
        format!("http://localhost:{}/v1", daemon.addr().port()),
    ] {
        let model = resolver_with_home(home.path())
            .resolve(&url_provider_config(&url), None)
            .unwrap();
        let error = model.provider.complete(&req_for(&model)).await.unwrap_err();
        assert!(
            matches!(&error, ProviderError::Config { message, .. } if message.contains("control API")),
            "{url}: {error}"
        );
        assert!(!error.is_transient(), "a refusal is not retried");
    }
    assert!(
        daemon.requests().is_empty(),
        "no request reached the control API"
    );

    // The same loopback server, not recorded as a control API, is an ordinary local model.
    let other_home = tempfile::tempdir().unwrap();
    let model = resolver_with_home(other_home.path())
        .resolve(&url_provider_config(&daemon.base_url()), None)
        .unwrap();
    let reply = model.provider.complete(&req_for(&model)).await.unwrap();
    assert_eq!(reply.text(), "must not be reached");
    assert_eq!(daemon.requests().len(), 1);
}

/// The names of the tools a recorded request offered, in either format.
fn offered_tools(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| {
                    t.pointer("/function/name")
                        .or_else(|| t.get("name"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The tool list is serialized once per list a provider is handed: a request with the same
/// list sends the same tools, a new list is sent as it is, and a `provider_params.tools`
/// still replaces the list.
async fn tool_list_follows_the_request(wire: Wire, ty: &str) {
    let mock = MockProvider::start(wire).await;
    mock.repeat(Turn::text("ok"));
    let m = resolve(&mock, ty, json!({"model_id": "m"}));
    let ask = |tools: Vec<ToolSpec>| m.request(None, vec![Message::user_text("hi")], tools);
    let first = ask(vec![fs_write_tool()]);
    let read = ToolSpec {
        name: "fs_read".into(),
        description: "Read a file".into(),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    };
    let second = ask(vec![read, fs_write_tool()]);
    for req in [&first, &first, &second, &first] {
        events(m.provider.as_ref(), req).await;
    }
    let sent: Vec<Vec<String>> = mock
        .requests()
        .iter()
        .map(|r| offered_tools(&r.body))
        .collect();
    assert_eq!(
        sent,
        [
            vec!["fs_write"],
            vec!["fs_write"],
            vec!["fs_read", "fs_write"],
            vec!["fs_write"]
        ]
    );
    let schema_key = if wire == Wire::Anthropic {
        "/tools/0/input_schema"
    } else {
        "/tools/0/function/parameters"
    };
    assert_eq!(
        mock.requests()[1].body.pointer(schema_key),
        Some(&fs_write_tool().input_schema)
    );

    let overridden = resolve(
        &mock,
        ty,
        json!({"model_id": "m", "provider_params": {"tools": [{"name": "replaced"}]}}),
    );
    let req = overridden.request(None, vec![Message::user_text("hi")], vec![fs_write_tool()]);
    events(overridden.provider.as_ref(), &req).await;
    let last = mock.last_request().map(|r| r.body).unwrap_or_default();
    assert_eq!(last["tools"], json!([{"name": "replaced"}]));
}

#[tokio::test]
async fn anthropic_tool_list_follows_the_request() {
    tool_list_follows_the_request(Wire::Anthropic, "anthropic").await;
}

#[tokio::test]
async fn openai_tool_list_follows_the_request() {
    tool_list_follows_the_request(Wire::OpenAi, "openai").await;
}

// ---------------------------------------------------------------------------------------------
// Connections across the daemon's per-turn runtimes
// ---------------------------------------------------------------------------------------------

/// Sends one request per prompt, each on a fresh current-thread runtime dropped right after
/// it, as the daemon runs each turn; the text of each reply, or its error.
fn turns_on_fresh_runtimes(m: &ResolvedModel, prompts: &[&str]) -> Vec<Result<String, String>> {
    prompts
        .iter()
        .map(|prompt| {
            let turn = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let req = m.request(None, vec![Message::user_text(*prompt)], vec![]);
            turn.block_on(m.provider.complete(&req))
                .map(|reply| {
                    reply
                        .content
                        .iter()
                        .filter_map(|block| match block {
                            ContentBlock::Text { text } => Some(text.clone()),
                            _ => None,
                        })
                        .collect()
                })
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// A runtime that outlives the turns, serving `mock` and the resolved model.
fn io_runtime_with_mock() -> (tokio::runtime::Runtime, MockProvider) {
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mock = io.block_on(MockProvider::openai());
    (io, mock)
}

#[test]
fn requests_sent_on_an_io_runtime_reuse_one_connection_across_turn_runtimes() {
    let (io, mock) = io_runtime_with_mock();
    mock.push_all([
        Turn::text("one"),
        Turn::error(400, "bad thing"),
        Turn::text("three"),
        Turn::text("four"),
    ]);
    let m = resolver()
        .with_io_runtime(Some(io.handle().clone()))
        .resolve(
            &config(&mock, "openai", json!({"model_id": "m"})),
            Some(ApiKey::new(KEY)),
        )
        .unwrap();
    let replies = turns_on_fresh_runtimes(&m, &["a", "b", "c", "d"]);
    assert_eq!(replies[0], Ok("one".to_owned()));
    let error = replies[1].as_ref().unwrap_err();
    assert!(
        error.starts_with("mock rejected the request (400): bad thing"),
        "an error body read through the relay: {error}"
    );
    assert_eq!(
        replies[2..],
        [Ok("three".to_owned()), Ok("four".to_owned())]
    );
    assert_eq!(mock.request_count(), 4);
    assert_eq!(
        mock.connections_accepted(),
        1,
        "every turn's request went over the one kept-alive connection"
    );
}

#[test]
fn without_an_io_runtime_each_turn_runtime_connects_anew() {
    let (_io, mock) = io_runtime_with_mock();
    mock.repeat(Turn::text("same"));
    let m = resolve(&mock, "openai", json!({"model_id": "m"}));
    let replies = turns_on_fresh_runtimes(&m, &["a", "b", "c"]);
    assert!(
        replies.iter().all(|r| r.as_deref() == Ok("same")),
        "{replies:?}"
    );
    assert_eq!(
        mock.connections_accepted(),
        3,
        "a connection dies with the runtime that opened it"
    );
}

#[test]
fn dropping_the_turn_cancels_its_request_on_the_io_runtime() {
    let (io, mock) = io_runtime_with_mock();
    mock.hold_until(u64::MAX).push(Turn::text("never sent"));
    let m = resolver()
        .with_io_runtime(Some(io.handle().clone()))
        .resolve(
            &config(&mock, "openai", json!({"model_id": "m"})),
            Some(ApiKey::new(KEY)),
        )
        .unwrap();
    let turn = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let req = m.request(None, vec![Message::user_text("hi")], vec![]);
    turn.block_on(async {
        tokio::select! {
            reply = m.provider.complete(&req) => panic!("the held request was answered: {reply:?}"),
            () = mock.requests_arrived(1) => {}
        }
    });
    // The turn's future is gone; its request, sent on the I/O runtime, must go with it: the
    // mock sees the connection close while it holds the answer. The timeout only turns a
    // failure into a panic instead of a hang.
    let cancelled = io.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), mock.requests_abandoned(1)).await
    });
    assert!(
        cancelled.is_ok(),
        "the request outlived the turn that sent it"
    );
}

// ---------------------------------------------------------------------------------------------
// Retries that fit the failure (issue 29.3)
// ---------------------------------------------------------------------------------------------

/// A model at `base_url` (OpenAI-compatible, no key), retrying per `recovery`, with every
/// retry of its requests collected through `watch_retries`.
fn at_url(base_url: &str, recovery: Value) -> ResolvedModel {
    let cfg = json!({
        "model": {"provider": "local", "model_id": "m"},
        "providers": [{"id": "local", "type": "openai-compatible", "baseUrl": base_url}],
        "recovery": recovery,
    });
    resolver().resolve(&cfg, None).unwrap()
}

async fn complete_watched(
    m: &ResolvedModel,
) -> (
    Result<adf_providers::AssistantMessage, ProviderError>,
    Vec<RetryNotice>,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let req = m.request(None, vec![Message::user_text("hi")], vec![]);
    let result = adf_providers::watch_retries(
        Arc::new(move |n: &RetryNotice| sink.lock().unwrap().push(n.clone())),
        tokio::time::timeout(Duration::from_secs(30), m.provider.complete(&req)),
    )
    .await
    .expect("the request is bounded");
    let seen = seen.lock().unwrap().clone();
    (result, seen)
}

#[tokio::test]
async fn a_refused_local_model_server_fails_after_one_quick_retry_naming_its_url() {
    let url = adf_testkit::refused_base_url();
    // The §5.20 defaults: 5 attempts from 15 s.
    let m = at_url(&url, json!({}));
    let started = std::time::Instant::now();
    let (result, seen) = complete_watched(&m).await;
    let err = result.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        matches!(
            err,
            ProviderError::Unreachable {
                refused: true,
                local: true,
                attempts: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_transient(), "the loop goes back to idle (§6.2)");
    let text = err.to_string();
    assert!(
        text.contains(&format!("model server {url} refused the connection")),
        "{text}"
    );
    assert!(text.contains("Start the model server"), "{text}");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!((seen[0].attempt, seen[0].max_attempts), (1, 2));
    assert_eq!(seen[0].delay, adf_providers::LOCAL_RETRY_DELAY);
    assert_eq!(seen[0].reason, "connection refused");
}

#[tokio::test]
async fn a_reset_connection_is_retried_with_its_reason() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::reset()).push(Turn::text("after the reset"));
    let m = at_url(
        &mock.base_url(),
        json!({"max_attempts": 4, "base_delay_ms": 1, "max_delay_ms": 5}),
    );
    let (result, seen) = complete_watched(&m).await;
    assert_eq!(result.unwrap().text(), "after the reset");
    assert_eq!(mock.request_count(), 2);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!((seen[0].attempt, seen[0].max_attempts), (1, 4));
    assert_eq!(seen[0].reason, "connection reset", "{:?}", seen[0].error);
}

#[tokio::test]
async fn stl_12_a_429_waits_its_retry_after_and_503s_are_counted_exactly() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::rate_limited(1))
        .push(Turn::unavailable())
        .push(Turn::text("finally"));
    let m = at_url(
        &mock.base_url(),
        json!({"max_attempts": 5, "base_delay_ms": 1, "max_delay_ms": 3000}),
    );
    let started = std::time::Instant::now();
    let (result, seen) = complete_watched(&m).await;
    assert_eq!(result.unwrap().text(), "finally");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "the second attempt came before Retry-After: {:?}",
        started.elapsed()
    );
    assert_eq!(mock.request_count(), 3);
    let summary: Vec<(u32, u32, String)> = seen
        .iter()
        .map(|n| (n.attempt, n.max_attempts, n.reason.clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, 5, "rate limited (429)".to_owned()),
            (2, 5, "server error (503)".to_owned())
        ]
    );
    assert_eq!(seen[0].delay, Duration::from_secs(1), "Retry-After wins");
}

#[tokio::test]
async fn a_retry_after_beyond_max_delay_ends_the_retries() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::rate_limited(120))
        .push(Turn::text("unused"));
    let m = at_url(
        &mock.base_url(),
        json!({"max_attempts": 5, "base_delay_ms": 1, "max_delay_ms": 1000}),
    );
    let (result, seen) = complete_watched(&m).await;
    let err = result.unwrap_err();
    assert_eq!(err.status(), Some(429), "{err}");
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn the_retry_budget_bounds_the_total_wait() {
    let mock = MockProvider::anthropic().await;
    for _ in 0..5 {
        mock.push(Turn::unavailable());
    }
    // Waits of 40, 80 and 160 ms (no jitter above 20 %): a 150 ms budget allows the first two.
    let mut cfg = config(&mock, "anthropic", json!({"model_id": "m"}));
    cfg["recovery"] = json!({"max_attempts": 5, "base_delay_ms": 40, "max_delay_ms": 1000, "retry_budget_ms": 150});
    let m = resolver().resolve(&cfg, Some(ApiKey::new(KEY))).unwrap();
    let (result, seen) = complete_watched(&m).await;
    assert!(result.unwrap_err().is_transient());
    assert_eq!(mock.request_count(), 3, "{seen:?}");
    assert_eq!(seen.len(), 2);
}

#[tokio::test]
async fn a_hung_model_holds_the_request_until_the_client_gives_up() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::hang());
    let m = at_url(&mock.base_url(), json!({"max_attempts": 1}));
    let req = m.request(None, vec![Message::user_text("hi")], vec![]);
    let gave_up = tokio::time::timeout(Duration::from_millis(300), m.provider.complete(&req)).await;
    assert!(gave_up.is_err(), "a hung model never answers");
    tokio::time::timeout(Duration::from_secs(10), mock.requests_abandoned(1))
        .await
        .expect("the dropped request closed its connection");
}
