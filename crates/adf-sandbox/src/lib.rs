//! JavaScript and TypeScript execution for ADF agents.
//!
//! One [`Sandbox`] per agent owns one QuickJS runtime (rquickjs, feature `parallel`, so the
//! sandbox and its futures are `Send`): its own heap with a memory limit, a stack limit and an
//! interrupt handler that enforces per-execution deadlines. Every code context of the runtime
//! (inline `sys_code`, `sys_lambda`, triggers, timers, routes, middleware) goes through one
//! call, [`Sandbox::run`] (or [`Sandbox::execute`], which also keeps the console output of a
//! failed run), with a [`Request`] naming an [`Entry`] and a per-execution [`Host`].
//!
//! The sandbox does not know which tools exist. It installs a global `adf` proxy whose every
//! property is an async function taking one object; a call becomes [`Host::call`] with the
//! method name and the JSON arguments, and a [`HostError`] becomes a thrown `Error` whose
//! `code` is the host's code. Module sources come from [`Host::load_module`] (the runtime reads
//! them from `adf_files`; the sandbox never touches the host filesystem), and `fetch` exists
//! only when the request enables the network, calling [`Host::fetch`].
//!
//! Contexts:
//! - **cold** (default): a fresh context per execution (~0.1 ms), so `globalThis` tampering or
//!   prototype pollution never reaches the next execution;
//! - **warm** ([`Request::warm`], lambdas): a context kept per lambda file (and network flag),
//!   at most [`SandboxConfig::warm_capacity`], least recently used evicted first, dropped
//!   after [`SandboxConfig::warm_idle_ttl`] unused, after any failed execution, and when one of
//!   its modules changed;
//! - **persistent inline** ([`Entry::Inline`]): one context for the agent's inline code, whose
//!   `globalThis` survives between calls. It is recreated after a memory-limit failure, when
//!   the network flag changes, when a module it imported changed, or on [`Sandbox::reset`]. A
//!   nested inline execution (inline code calling `adf.sys_code`) runs in a fresh context.
//!
//! TypeScript is stripped with oxc (enums lowered); imports are found by parsing, resolved
//! relative to the importer (`./util.ts`, `../shared/x.js`, extension probing `./util` →
//! `util.ts`), loaded and transpiled before any JavaScript runs, and declared into the context.
//! Line numbers in errors refer to the stripped JavaScript, which keeps the TypeScript lines
//! for most code but not all (oxc regenerates the text).
//!
//! Limits: [`SandboxError::Timeout`] from the interrupt handler (JavaScript running) or the
//! outer tokio timeout (JavaScript waiting on a host call); [`SandboxError::MemoryLimit`]
//! when the runtime heap reaches [`SandboxConfig::memory_limit`]; deep recursion is a thrown
//! `RangeError`. There are no `require`, `process`, `Deno`, `std`/`os` modules, no host
//! filesystem, environment or network; `eval` stays (it grants nothing the code lacks).
//! Timers (`setTimeout`, `setInterval`) live within one execution.
//!
//! Binary data crosses the bridge as `{"__bytes_base64": "<base64>"}` (see [`bytes_value`]).
//!
//! Known limits of the engine, documented rather than hidden:
//! - QuickJS polls the interrupt handler every ~10,000 bytecode operations and native
//!   builtins are not interruptible, so a loop whose every iteration spends long inside one
//!   builtin (`JSON.stringify` of a large structure) overshoots its deadline by up to 10,000
//!   such calls; the memory limit bounds the size of each. A blocked execution occupies its
//!   tokio worker thread meanwhile: run agents' sandboxes where that is acceptable.
//! - QuickJS reports allocation failure as a bare `null` exception, and the unwound frames have
//!   freed the heap by the time the sandbox sees it, so an uncaught `throw null` (or a promise
//!   rejected with `null`) is reported as [`SandboxError::MemoryLimit`].
//! - Standard-library npm packages (COD-44: xlsx, pdf-lib, ...) are not available; only the
//!   agent's own files can be imported. `Buffer` does not exist: bytes are `Uint8Array`.
//! - An execution ends when its entry promise settles; timers still pending are cancelled.

mod error;
mod host;
mod modules;
mod packages;
mod sandbox;
mod transpile;

pub use error::{HostError, SandboxError};
pub use host::Host;
pub use sandbox::{Entry, Execution, LogEntry, LogLevel, Outcome, Request, Sandbox, SandboxConfig};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

/// The key that marks bytes in JSON crossing the bridge.
pub const BYTES_KEY: &str = "__bytes_base64";

/// Bytes as the bridge represents them: `{"__bytes_base64": "<base64>"}` (a `Uint8Array` in
/// JavaScript).
pub fn bytes_value(bytes: &[u8]) -> Value {
    let mut map = serde_json::Map::new();
    map.insert(BYTES_KEY.to_string(), Value::String(STANDARD.encode(bytes)));
    Value::Object(map)
}

/// The key that marks host text handed to JavaScript as a string, never JSON-parsed.
pub const RAW_TEXT_KEY: &str = "__raw_text";

/// Text that reaches JavaScript as this exact string: a host answer of this shape is not
/// parsed even when it looks like JSON (`model_invoke` returns raw model text, so a reply of
/// `42` must stay the string `"42"`; adf-object guide "model_invoke").
pub fn raw_text(text: String) -> Value {
    let mut map = serde_json::Map::new();
    map.insert(RAW_TEXT_KEY.to_string(), Value::String(text));
    Value::Object(map)
}

/// The bytes of a `{"__bytes_base64": …}` value, or `None` for anything else.
pub fn value_bytes(value: &Value) -> Option<Vec<u8>> {
    let map = value.as_object()?;
    if map.len() != 1 {
        return None;
    }
    STANDARD.decode(map.get(BYTES_KEY)?.as_str()?).ok()
}
