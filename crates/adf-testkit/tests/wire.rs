//! The mock's non-streamed JSON bodies, raw SSE framing, auth checks and zero-latency mode,
//! checked with a plain HTTP client; and the Telegram Bot API server's offset and auth rules.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

use adf_testkit::{MockProvider, Turn};
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

async fn post(mock: &MockProvider, path: &str, body: Value) -> (u16, String) {
    let resp = client()
        .post(format!("http://{}{path}", mock.addr()))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

#[tokio::test]
async fn openai_json_reply_with_tool_call() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::text("hi").with_tool_call_id("call_9", "fs_read", json!({"path": "a"})));
    let (status, body) = post(
        &mock,
        "/v1/chat/completions",
        json!({"model": "gpt-x", "messages": []}),
    )
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["model"], json!("gpt-x"));
    assert_eq!(v["choices"][0]["message"]["content"], json!("hi"));
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"],
        json!([{"id": "call_9", "type": "function", "function": {"name": "fs_read", "arguments": "{\"path\":\"a\"}"}}])
    );
    assert_eq!(v["choices"][0]["finish_reason"], json!("tool_calls"));
    assert_eq!(v["usage"]["prompt_tokens"], json!(10));
}

#[tokio::test]
async fn anthropic_json_reply_and_header_checks() {
    let mock = MockProvider::anthropic().await;
    mock.push(Turn::thinking("hmm", "answer"));
    let (status, body) = post(&mock, "/v1/messages", json!({"model": "c", "messages": []})).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["content"][0]["type"], json!("thinking"));
    assert_eq!(v["content"][1], json!({"type": "text", "text": "answer"}));
    assert_eq!(v["stop_reason"], json!("end_turn"));

    // Without the headers the real API refuses; so does the mock, keeping the script intact.
    mock.push(Turn::text("kept"));
    let resp = client()
        .post(format!("{}/messages", mock.base_url()))
        .json(&json!({"model": "c", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(mock.remaining(), 1);
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test]
async fn sse_framing_and_done_marker() {
    let mock = MockProvider::openai().await;
    mock.push(Turn::text("abcdefghij").with_chunk_chars(4));
    let (_, body) = post(
        &mock,
        "/v1/chat/completions",
        json!({"model": "m", "stream": true, "stream_options": {"include_usage": true}}),
    )
    .await;
    let frames: Vec<&str> = body.split("\n\n").filter(|f| !f.is_empty()).collect();
    assert!(frames.iter().all(|f| f.starts_with("data: ")));
    assert_eq!(frames.last(), Some(&"data: [DONE]"));
    // role chunk, 3 content chunks, finish chunk, usage chunk, [DONE]
    assert_eq!(frames.len(), 7);
}

#[tokio::test]
async fn zero_latency_repeat_mode_serves_forever_without_bodies() {
    let mock = MockProvider::anthropic().await;
    mock.zero_latency(true).repeat(Turn::text("same"));
    for _ in 0..3 {
        let (status, body) =
            post(&mock, "/v1/messages", json!({"model": "m", "stream": true})).await;
        assert_eq!(status, 200);
        assert_eq!(
            body.matches("text_delta").count(),
            1,
            "one fragment in zero-latency mode"
        );
    }
    assert_eq!(mock.request_count(), 3);
    assert_eq!(mock.requests()[0].body, Value::Null);
}

#[tokio::test]
async fn zero_latency_mode_still_refuses_bodies_that_are_not_json_objects() {
    let mock = MockProvider::openai().await;
    mock.zero_latency(true).repeat(Turn::text("same"));
    for body in [json!(["gpt-x", true]), json!("text"), json!(null)] {
        let (status, text) = post(&mock, "/v1/chat/completions", body.clone()).await;
        assert_eq!(status, 400, "{body} must be refused, got {text}");
        assert!(text.contains("not a JSON object"), "{text}");
    }
}

#[tokio::test]
async fn zero_latency_mode_reads_model_and_stream_options_from_the_body() {
    let mock = MockProvider::openai().await;
    mock.zero_latency(true).repeat(Turn::text("same"));
    let tools: Vec<Value> = (0..40)
        .map(|i| json!({"type": "function", "function": {"name": format!("t{i}"), "parameters": {"type": "object"}}}))
        .collect();
    let (status, body) = post(
        &mock,
        "/v1/chat/completions",
        json!({"model": "gpt-z", "messages": [], "tools": tools, "stream": true,
               "stream_options": {"include_usage": true}}),
    )
    .await;
    assert_eq!(status, 200);
    let chunks: Vec<Value> = body
        .split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    assert!(
        chunks.iter().all(|c| c["model"] == json!("gpt-z")),
        "{body}"
    );
    assert!(
        chunks.iter().any(|c| c["usage"].is_object()),
        "include_usage asks for a usage chunk: {body}"
    );
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");

    let (status, body) = post(
        &mock,
        "/v1/chat/completions",
        json!({"model": "gpt-z", "messages": [], "stream": false}),
    )
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], json!("same"));
}

/// The zero-latency mode answers the repeated turn from bytes rendered once; every request
/// must still get the bytes the scripted mode sends for it (its own sequence number in the
/// ids, its model, usage only when asked), on both wires, including a reply whose text holds
/// the digits the rendering splits at.
#[tokio::test]
async fn zero_latency_repeat_replies_are_the_scripted_bytes_for_each_request() {
    let turns = || {
        [
            Turn::text("ok").with_chunk_chars(1000),
            Turn::text("18446744073709551615 and 1").with_chunk_chars(1000),
            Turn::text("t")
                .with_tool_call("fs_read", json!({"path": "a"}))
                .with_chunk_chars(1000),
        ]
    };
    for (zero_mock, scripted) in [
        (MockProvider::openai().await, MockProvider::openai().await),
        (
            MockProvider::anthropic().await,
            MockProvider::anthropic().await,
        ),
    ] {
        let path = match zero_mock.wire() {
            adf_testkit::Wire::OpenAi => "/v1/chat/completions",
            adf_testkit::Wire::Anthropic => "/v1/messages",
        };
        zero_mock.zero_latency(true);
        for (turn, expected_turn) in turns().into_iter().zip(turns()) {
            zero_mock.repeat(turn);
            scripted.repeat(expected_turn);
            for (model, usage) in [("m1", true), ("m1", true), ("m2", false), ("m1", true)] {
                let body = json!({"model": model, "messages": [], "stream": true,
                                  "stream_options": {"include_usage": usage}});
                let (status, got) = post(&zero_mock, path, body.clone()).await;
                let (_, expected) = post(&scripted, path, body).await;
                assert_eq!(status, 200);
                assert_eq!(got, expected, "{path} {model} {usage}");
            }
        }
    }
}

#[tokio::test]
async fn connections_are_counted_per_tcp_connection_not_per_request() {
    let mock = MockProvider::openai().await;
    mock.repeat(Turn::text("hi"));
    assert_eq!(mock.connections_accepted(), 0);
    let send = |client: &reqwest::Client| {
        client
            .post(format!("http://{}/v1/chat/completions", mock.addr()))
            .json(&json!({"model": "m", "messages": []}))
            .send()
    };
    let kept = client();
    for _ in 0..3 {
        let resp = send(&kept).await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        resp.text().await.unwrap();
    }
    assert_eq!(mock.connections_accepted(), 1, "one kept-alive connection");
    let fresh = client();
    send(&fresh).await.unwrap().text().await.unwrap();
    assert_eq!(
        mock.connections_accepted(),
        2,
        "a second client connects anew"
    );
    assert_eq!(mock.request_count(), 4);
}

/// The zero-latency mode reads `model`, `stream` and `stream_options` without parsing the
/// body; escaped, mistyped and repeated fields must still give the scripted mode's reply.
#[tokio::test]
async fn zero_latency_mode_reads_odd_fields_as_the_scripted_mode_does() {
    let (zero_mock, scripted) = (MockProvider::openai().await, MockProvider::openai().await);
    zero_mock.zero_latency(true).repeat(Turn::text("ok"));
    scripted.repeat(Turn::text("ok"));
    let bodies = [
        r#"{"model":"m\u0031","stream":true,"stream_options":{"include_usage":true}}"#,
        r#"{"model":5,"stream":true}"#,
        r#"{"model":"a","stream":true,"model":"b","stream_options":{"include_usage":false}}"#,
        r#"{"model":"a","stream":false,"stream":true,"stream_options":{"include_usage":1}}"#,
        r#"{"model":"a","stream":true,"stream":"yes"}"#,
        r#"{"model":"a","stream":tru}"#,
        r#"{"model":"a\ud800","stream":true}"#,
    ];
    for body in bodies {
        let mut replies = Vec::new();
        for mock in [&zero_mock, &scripted] {
            let resp = client()
                .post(format!("{}/chat/completions", mock.base_url()))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            replies.push((resp.status().as_u16(), resp.text().await.unwrap()));
        }
        assert_eq!(replies[0], replies[1], "{body}");
    }
}

/// The Telegram server keeps the Bot API's rules: `{ok, result}` answers, 401 for another
/// token, an offset confirms (and forgets) every update below it, a long poll with nothing
/// pending answers an empty list when its timeout ends, a query string works like a JSON body.
#[tokio::test]
async fn telegram_server_follows_the_bot_api_offset_and_auth_rules() {
    use adf_testkit::telegram::TelegramServer;
    let server = TelegramServer::start("1:abc", "bot").await;
    let call = |token: &str, method: &str, body: Value| {
        let url = format!("{}/bot{token}/{method}", server.api_root());
        async move {
            let resp = client().post(url).json(&body).send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap())
        }
    };
    let (status, me) = call("1:abc", "getMe", json!({})).await;
    assert_eq!(
        (status, me["ok"].clone(), me["result"]["is_bot"].clone()),
        (200, json!(true), json!(true))
    );
    let (status, refused) = call("1:wrong", "getMe", json!({})).await;
    assert_eq!((status, refused["error_code"].clone()), (401, json!(401)));

    let chat = json!({ "id": 5, "type": "private" });
    let first = server.push_message(chat.clone(), json!({ "id": 5 }), "a");
    let second = server.push_message(chat, json!({ "id": 5 }), "b");
    let (_, both) = call("1:abc", "getUpdates", json!({})).await;
    assert_eq!(both["result"].as_array().unwrap().len(), 2);
    let (_, rest) = call("1:abc", "getUpdates", json!({ "offset": first + 1 })).await;
    assert_eq!(rest["result"][0]["update_id"], json!(second));
    assert_eq!(server.pending_updates(), 1, "the offset forgot the first");
    let (_, none) = call(
        "1:abc",
        "getUpdates",
        json!({ "offset": second + 1, "timeout": 1 }),
    )
    .await;
    assert_eq!(none["result"], json!([]));
    let resp = client()
        .get(format!(
            "{}/bot1:abc/getUpdates?offset={}",
            server.api_root(),
            second + 1
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.json::<Value>().await.unwrap()["result"], json!([]));
}
