//! `adf-testkit`: test helpers for ADF. Never shipped in the `adf` binary.
//!
//! The centrepiece is [`MockProvider`]: a real HTTP server on `127.0.0.1:0` that speaks one
//! model vendor's wire format, so provider code is exercised over real sockets, real JSON and
//! real Server-Sent Events rather than through an in-process fake:
//!
//! - [`MockProvider::openai`]: OpenAI Chat Completions, `POST /v1/chat/completions`, JSON or
//!   `stream: true` SSE (`data: {chunk}` … `data: [DONE]`), `delta.content`,
//!   `delta.reasoning_content`, `delta.tool_calls[]` fragments, `finish_reason`, and the usage
//!   chunk when `stream_options.include_usage` is set.
//! - [`MockProvider::anthropic`]: Anthropic Messages, `POST /v1/messages`, JSON or SSE
//!   (`message_start`, `content_block_start/delta/stop` with `text_delta`, `thinking_delta`,
//!   `signature_delta` and `input_json_delta`, `message_delta`, `message_stop`); it requires the
//!   `x-api-key` and `anthropic-version` headers as the real API does.
//!
//! Failures are scripted the same way: [`Turn::error`] (any status, with
//! [`Turn::with_retry_after`]; [`Turn::rate_limited`] and [`Turn::unavailable`] for 429 and
//! 503), [`Turn::reset`] (a TCP reset instead of a response), [`Turn::hang`] (no answer ever)
//! and [`Turn::with_abort_mid_stream`]; [`refused_base_url`] is a URL where connecting is
//! refused.
//!
//! A test scripts the replies as a queue of [`Turn`]s, one consumed per request, and afterwards
//! asserts on [`MockProvider::requests`], the recorded method, path, headers and parsed JSON body.
//! When the queue runs dry the server answers `418` with a message that says so (and prints it to
//! stderr), so a test that made one request too many fails with an obvious cause rather than
//! hanging or retrying. For benchmarks, [`MockProvider::zero_latency`] ignores delays, sends each
//! reply in as few chunks as the format allows, stops recording bodies, checks them only for
//! their structure and answers a repeated turn from bytes rendered once.
//!
//! ```no_run
//! # async fn demo() {
//! use adf_testkit::{MockProvider, Turn};
//! let mock = MockProvider::anthropic().await;
//! mock.push(Turn::text("hi"));
//! mock.push(Turn::tool_call("fs_write", serde_json::json!({"path": "a.md", "content": "x"})));
//! mock.push(Turn::error(503, "overloaded"));
//! let base = mock.base_url(); // "http://127.0.0.1:PORT/v1"
//! # let _ = base;
//! assert_eq!(mock.requests().len(), 0);
//! # }
//! ```
//!
//! [`snapshot::assert_json_snapshot`] compares a JSON value with a fixture file taken earlier
//! (tool declarations before and after a refactor); [`sockets`] holds bounded TCP helpers on
//! 127.0.0.1 and [`processes`] the child-process helpers several crates' tests share.
//! [`telegram::TelegramServer`] is a local Telegram Bot API server (long polling, scripted 429,
//! 401 and dropped connections) for the channel adapters' tests; [`discord::DiscordServer`] a
//! local Discord HTTP API and Gateway WebSocket server (RESUME replay, scripted drops, missed
//! heartbeat ACKs, 429s).

pub mod discord;
pub mod fixtures;
pub mod mail;
pub mod processes;
mod scan;
mod server;
pub mod slack;
pub mod snapshot;
pub mod sockets;
pub mod telegram;
mod turn;
pub mod whatsapp;
mod wire;

pub use server::{MockProvider, RecordedRequest, Wire, refused_base_url};
pub use turn::{Part, Turn, Usage};
