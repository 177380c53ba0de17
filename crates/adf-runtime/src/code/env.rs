//! What a code run runs with and ends with — [`CodeEnv`], [`LambdaRef`], [`Authorization`],
//! [`RunOptions`], [`CodeProfile`], [`Injection`], [`CodeRun`], [`CallRecord`] — and the
//! helpers the runner and the entry points (mod.rs) share: the run's savepoint, the
//! `execute` / result log rows, timeouts and error mapping. Below runner.rs and methods.rs,
//! which import it; it imports neither.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use adf_providers::Resolver;
use adf_sandbox::{Entry, LogEntry, LogLevel, Sandbox, SandboxConfig, SandboxError};
use adf_store::{AdfFile, NewLog};
use serde::Serialize;
use serde_json::{Value, json};

use crate::identity::LocalKeys;
use crate::tools::{ErrorCode, ToolCaller, ToolError, ToolRegistry};

use super::waiting::FileQueue;

/// The default of `limits.execution_timeout_ms` (§5.7).
pub const DEFAULT_EXECUTION_TIMEOUT_MS: u64 = 60_000;
/// Deepest chain of nested `sys_lambda` calls (a backstop besides `CIRCULAR_CALL`).
pub const MAX_LAMBDA_DEPTH: usize = 16;

/// What an agent's code runs with: its sandbox (one QuickJS runtime; cheap to clone), the tool
/// registry, the model resolver for `model_invoke`, and this installation's keys for the
/// identity methods (opened lazily, only when code asks).
#[derive(Clone)]
pub struct CodeEnv {
    pub(super) sandbox: Sandbox,
    pub(super) registry: Arc<ToolRegistry>,
    pub(super) resolver: Resolver,
    pub(super) keys: Option<Arc<LocalKeys>>,
    pub(super) events: Option<Arc<dyn EventSink>>,
    /// Ends the lambda runs of this environment early (see [`Self::with_cancel`]).
    pub(super) cancel: Option<tokio::sync::watch::Receiver<bool>>,
    /// Whose queued jobs a run serves while it waits (see [`Self::serving`]).
    pub(super) queue: Option<FileQueue>,
}

/// Where `emit_event`'s `custom.*` events go (the daemon's umbilical bus). Called on the task
/// that holds the file, so an implementation must not wait for that file: it buffers (bounded)
/// and publishes after the run.
pub trait EventSink: Send + Sync {
    /// Offers one event emitted by the code at `source` (`path:function`); false when it was
    /// not accepted (the sink is full), which the code sees as `delivered: false`.
    fn emit(&self, source: &str, event_type: &str, payload: &Value) -> bool;
}

impl std::fmt::Debug for CodeEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeEnv")
            .field("sandbox", &self.sandbox)
            .field("keys", &self.keys.is_some())
            .field("events", &self.events.is_some())
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl CodeEnv {
    /// An environment over an existing sandbox; models resolve from the process environment.
    pub fn new(sandbox: Sandbox, registry: Arc<ToolRegistry>) -> Self {
        CodeEnv {
            sandbox,
            registry,
            resolver: Resolver::new(),
            keys: None,
            events: None,
            cancel: None,
            queue: None,
        }
    }

    /// Runs of this environment serve `queue`'s jobs with their file while they wait off it
    /// (waiting.rs): the agent's timers, triggers and reads go on meanwhile.
    pub fn serving(mut self, queue: FileQueue) -> Self {
        self.queue = Some(queue);
        self
    }

    pub(crate) fn file_queue(&self) -> Option<&FileQueue> {
        self.queue.as_ref()
    }

    /// Lambdas run in this environment end (the sandbox interrupts them) once `cancel`
    /// reads `true`: whoever waits for their result has gone (serving: the HTTP client).
    pub fn with_cancel(mut self, cancel: tokio::sync::watch::Receiver<bool>) -> Self {
        self.cancel = Some(cancel);
        self
    }

    pub(crate) fn cancel_signal(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.cancel.clone()
    }

    /// A new sandbox with the default limits and every built-in tool.
    pub async fn with_builtins() -> Result<Self, ToolError> {
        Self::with_registry(Arc::new(ToolRegistry::with_builtins())).await
    }

    /// A new sandbox with the default limits and the tools of `registry` (built-ins plus
    /// whatever sources the binary attached).
    pub async fn with_registry(registry: Arc<ToolRegistry>) -> Result<Self, ToolError> {
        let sandbox = Sandbox::new(SandboxConfig::default())
            .await
            .map_err(|e| ToolError::new(ErrorCode::InternalError, e.to_string()))?;
        Ok(Self::new(sandbox, registry))
    }

    /// Resolve `model_invoke` models with this resolver.
    pub fn with_resolver(mut self, resolver: Resolver) -> Self {
        self.resolver = resolver;
        self
    }

    /// The installation's keys, for `identity_status`, `get_identity`, `set_identity` and
    /// `attestation_issue` on sealed rows.
    pub fn with_keys(mut self, keys: Arc<LocalKeys>) -> Self {
        self.keys = Some(keys);
        self
    }

    /// Deliver `emit_event`'s events to `sink` (besides the log row).
    pub fn with_event_sink(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.events = Some(sink);
        self
    }

    pub(crate) fn event_sink(&self) -> Option<&dyn EventSink> {
        self.events.as_deref()
    }

    /// The JavaScript sandbox that runs agent code.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// The tools agent code may call through `adf.*`.
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }
}

/// A lambda reference: `path:function`, the function defaulting to `main`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LambdaRef {
    /// The source file in the virtual filesystem, e.g. `lib/router.ts`.
    pub path: String,
    /// The exported function to call; `main` when the reference names none.
    pub function: String,
}

impl LambdaRef {
    /// Parses `lib/a.ts:run` or `lib/a.ts` (→ `main`); a leading `./` is dropped.
    pub fn parse(source: &str) -> Result<Self, ToolError> {
        let source = source.trim();
        match Entry::lambda(source) {
            Entry::Lambda { path, function } => {
                let path = path.trim_start_matches("./").to_owned();
                if path.is_empty() {
                    return Err(ToolError::invalid(
                        "a lambda source is 'path/file.ts:functionName'",
                    ));
                }
                Ok(LambdaRef { path, function })
            }
            Entry::Inline { .. } => Err(ToolError::invalid("not a lambda reference")),
        }
    }

    /// `path:function`.
    pub fn source(&self) -> String {
        format!("{}:{}", self.path, self.function)
    }
}

/// The authorization a lambda run asks for (§8.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authorization {
    /// The source file's `authorized` flag (triggers, timers, routes, middleware, the owner's
    /// `adf run`, an owner-approved model `sys_lambda`). Any unauthorized module loaded by the
    /// run demotes it.
    SourceFile,
    /// Unauthorized whatever the file says (a model's `sys_lambda` on an unauthorized file).
    Unauthorized,
}

/// Where `loop_inject` contexts go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InjectMode {
    /// Append each one to this loop's transcript at once: nothing is in flight (triggers,
    /// timers, the command line).
    Immediate {
        /// The loop whose transcript receives the contexts.
        loop_name: String,
    },
    /// Keep them in [`CodeRun::injections`] (keyed ones coalesced): the run is part of a model
    /// turn's tool batch, and the executor appends them after the batch's results with
    /// [`store_injections`], so a context never splits a `tool_use`/`tool_result` pair.
    Collect {
        /// The loop whose transcript receives the contexts after the batch.
        loop_name: String,
    },
}

/// Options of one top-level run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// Lambdas: reuse a warm context for the file (`warm: true` triggers, timers, routes).
    pub warm: bool,
    /// A time limit below `limits.execution_timeout_ms` (never above it).
    pub timeout: Option<Duration>,
    /// Where the run's `loop_inject` contexts go.
    pub inject: InjectMode,
    /// Which `code_execution` the code runs under.
    pub profile: CodeProfile,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            warm: false,
            timeout: None,
            inject: InjectMode::Immediate {
                loop_name: "main".into(),
            },
            profile: CodeProfile::Agent,
        }
    }
}

/// The `code_execution` a run's code gets (§6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CodeProfile {
    /// The agent's own `code_execution`: main's code, triggers, timers, the owner.
    #[default]
    Agent,
    /// Code an inner loop's model started: the agent's `code_execution` narrowed by the
    /// inner-loop profile ([`inner_loop_view`]).
    InnerLoop,
}

/// Methods the inner-loop profile turns off whatever the agent allows (missing-tables §6.4):
/// an inner loop never reads or writes secrets, resolves tasks, handles attestations or
/// reaches the network natively.
pub const INNER_LOOP_DISABLED: [&str; 7] = [
    "get_identity",
    "set_identity",
    "task_resolve",
    "attestation_list",
    "attestation_add",
    "attestation_issue",
    "network",
];

/// The profile's own `restricted_methods`, joined with the agent's (the spec leaves the list
/// open; issuing attestations is the one trust act a loop could otherwise reach).
pub const INNER_LOOP_RESTRICTED: [&str; 1] = ["attestation_issue"];

/// `config` as an inner loop's code sees it: a method is on only when the profile and the
/// agent both allow it, `packages` is empty, and `restricted_methods` is the union of the
/// profile's and the agent's (absent: the agent's default, `attestation_issue`).
pub fn inner_loop_view(config: &Value) -> Value {
    let mut view = config.clone();
    let Some(root) = view.as_object_mut() else {
        return view;
    };
    let section = root.entry("code_execution").or_insert_with(|| json!({}));
    if !section.is_object() {
        *section = json!({});
    }
    if let Some(section) = section.as_object_mut() {
        for method in INNER_LOOP_DISABLED {
            section.insert(method.into(), Value::Bool(false));
        }
        section.insert("packages".into(), json!([]));
        let mut restricted: Vec<Value> = match section.get("restricted_methods") {
            Some(Value::Array(list)) => list.clone(),
            _ => vec![json!("attestation_issue")],
        };
        for method in INNER_LOOP_RESTRICTED {
            if !restricted.iter().any(|m| m == method) {
                restricted.push(json!(method));
            }
        }
        section.insert("restricted_methods".into(), Value::Array(restricted));
    }
    view
}

/// A `loop_inject` context (§9 code-only methods).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Injection {
    /// The loop whose transcript receives the context.
    pub loop_name: String,
    /// Lowercase provenance category (`loop_inject` by default).
    pub category: String,
    /// A pending context with the same key is replaced by this one (coalescing).
    pub key: Option<String>,
    /// The code that injected it (`lib/a.ts:main`, `sys_code`).
    pub origin: String,
    /// The context text the model reads after the `[Context: ...]` marker.
    pub content: String,
}

impl Injection {
    /// The `adf_loop` content of the row: one text block starting with the
    /// `[Context: <category>]` marker (§13.1), carrying `{v, category, origin, key}` beside
    /// the text so readers need not parse the marker.
    pub fn row_content(&self) -> Value {
        json!([{
            "type": "text",
            "text": format!("[Context: {}] {}", self.category, self.content),
            "context": { "v": 1, "category": self.category, "origin": self.origin, "key": self.key },
        }])
    }
}

/// Appends collected injections to their loops, in order, each its own transaction.
pub fn store_injections(file: &mut AdfFile, injections: &[Injection]) -> Result<(), ToolError> {
    for injection in injections {
        file.loop_append(&adf_store::NewLoopRow {
            r#loop: &injection.loop_name,
            role: "user",
            content: &injection.row_content(),
            model: None,
            tokens: None,
        })?;
    }
    Ok(())
}

/// The outcome of a top-level run, with its console output kept whatever the result.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeRun {
    /// The value the code returned, or the failure with its proxy code (`TIMEOUT`,
    /// `FN_ERROR`, a rethrown `adf.*` error's code, ...).
    pub result: Result<Value, ToolError>,
    /// Console output; nested lambdas' lines are prefixed with `[path:function]`.
    pub logs: Vec<LogEntry>,
    /// The sandbox's console cap was hit, so `logs` is missing later lines.
    pub logs_truncated: bool,
    /// `loop_inject` contexts kept for the executor ([`InjectMode::Collect`]).
    pub injections: Vec<Injection>,
    /// The tool and model calls the code made, in order, for the daemon's `on_tool_call` and
    /// `on_llm_call` sources.
    pub calls: Vec<CallRecord>,
}

/// One call agent code made through `adf.*`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CallRecord {
    /// A tool through the pipeline: `completed`, `failed` or `denied`.
    Tool {
        /// The tool's name.
        tool: String,
        /// `completed`, `failed` or `denied`.
        status: &'static str,
    },
    /// A `model_invoke` request that got an answer (or failed: `ok` false).
    Model {
        /// The provider id from `config.providers`.
        provider: String,
        /// The model the request named.
        model: String,
        /// Prompt tokens the provider reported (0 when it failed).
        input_tokens: u64,
        /// Completion tokens the provider reported (0 when it failed).
        output_tokens: u64,
        /// The request got an answer.
        ok: bool,
    },
}

impl CodeRun {
    /// Console lines as text (`warn: ...` for levels other than log/info).
    pub fn log_lines(&self) -> Vec<String> {
        log_lines(&self.logs)
    }

    /// What a tool call (`sys_code`, `sys_lambda` from the model) returns:
    /// `{result, logs}`, or the failure with the console output appended to its message.
    pub fn tool_value(&self) -> Result<Value, ToolError> {
        match &self.result {
            Ok(value) => Ok(json!({ "result": value, "logs": self.log_lines() })),
            Err(error) => {
                let mut error = error.clone();
                if !self.logs.is_empty() {
                    error.message = format!(
                        "{}\nconsole output:\n{}",
                        error.message,
                        self.log_lines().join("\n")
                    );
                }
                Err(error)
            }
        }
    }
}

pub(crate) fn log_lines(logs: &[LogEntry]) -> Vec<String> {
    logs.iter()
        .map(|l| match l.level {
            LogLevel::Log | LogLevel::Info => l.message.clone(),
            other => format!("{}: {}", other.as_str(), l.message),
        })
        .collect()
}

/// Opens the lambda's savepoint (see [`adf_store::RunSavepoint`]); `None` when it cannot be
/// opened (the run then commits as it goes).
pub(super) fn open_run_savepoint(file: &AdfFile) -> Option<adf_store::RunSavepoint> {
    file.open_run_savepoint().ok()
}

/// Ends the lambda's savepoint: kept when it returned; when it threw, its writes are rolled
/// back and its log rows written again after the rollback, in order.
pub(super) fn close_run_savepoint(file: &AdfFile, savepoint: adf_store::RunSavepoint, threw: bool) {
    let outcome = if threw {
        savepoint.roll_back_keeping_logs(file)
    } else {
        savepoint.release(file)
    };
    if let Err(error) = outcome {
        tracing::warn!(%error, "cannot close a lambda run's savepoint");
    }
}

/// Commits a run's transaction (see [`run_lambda_closing`]); a failed commit rolls back.
pub(crate) fn commit_run_transaction(file: &AdfFile) {
    // A savepoint still open (the run waited off the file) is part of what commits.
    if let Err(error) = file.commit_open_transaction() {
        tracing::warn!(%error, "cannot commit a lambda run (rolled back)");
    }
}

/// The `execute` row of a lambda run. A log row the logging config drops, or one that cannot
/// be written, never stops the run.
pub(crate) fn log_execute(file: &mut AdfFile, origin: &str, source: &str, authorized: bool) {
    let data = json!({ "authorized": authorized });
    let _ = file.log(&NewLog {
        level: "info",
        origin: Some(origin),
        event: Some("execute"),
        target: Some(source),
        message: &format!("running {source}"),
        data: Some(&data),
        r#loop: None,
    });
}

/// The `result` row of a lambda run: `info` when it returned, `error` with the code when not.
pub(crate) fn log_result(
    file: &mut AdfFile,
    origin: &str,
    source: &str,
    result: &Result<Value, ToolError>,
    elapsed: Duration,
) {
    let duration_ms = elapsed.as_secs_f64() * 1000.0;
    let (level, message, data) = match result {
        Ok(_) => (
            "info",
            format!("{source} returned"),
            json!({ "ok": true, "duration_ms": duration_ms }),
        ),
        Err(error) => (
            "error",
            format!("{source} failed: {}", error.message),
            json!({ "ok": false, "code": error.code.as_str(), "duration_ms": duration_ms }),
        ),
    };
    let _ = file.log(&NewLog {
        level,
        origin: Some(origin),
        event: Some("result"),
        target: Some(source),
        message: &message,
        data: Some(&data),
        r#loop: None,
    });
}

pub(crate) fn requires_authorized_caller(path: &str) -> ToolError {
    ToolError::new(
        ErrorCode::RequiresAuthorizedCaller,
        format!("{path} is an authorized file: only authorized code may call it"),
    )
}

impl CodeRun {
    /// A run that failed before any code ran.
    pub fn failed(error: ToolError) -> Self {
        CodeRun {
            result: Err(error),
            logs: Vec::new(),
            logs_truncated: false,
            injections: Vec::new(),
            calls: Vec::new(),
        }
    }
}

/// `limits.execution_timeout_ms` (default 60 s), lowered by `requested` when smaller.
pub(super) fn options_timeout(config: &Value, requested: Option<Duration>) -> Duration {
    let limit = Duration::from_millis(
        config
            .pointer("/limits/execution_timeout_ms")
            .and_then(Value::as_u64)
            .filter(|ms| *ms > 0)
            .unwrap_or(DEFAULT_EXECUTION_TIMEOUT_MS),
    );
    requested.map_or(limit, |r| r.min(limit))
}

pub(super) fn min_timeout(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The config under `options.profile` (see [`CodeProfile`]).
pub(super) fn profiled_config(
    file: &AdfFile,
    options: &RunOptions,
) -> Result<Arc<Value>, ToolError> {
    let config = file.config_shared()?;
    Ok(match options.profile {
        CodeProfile::Agent => config,
        CodeProfile::InnerLoop => Arc::new(inner_loop_view(&config)),
    })
}

pub(super) fn network(config: &Value) -> bool {
    config
        .pointer("/code_execution/network")
        .and_then(Value::as_bool)
        == Some(true)
}

/// The proxy code of a failed execution as a [`ToolError`].
pub(crate) fn sandbox_error(error: &SandboxError) -> ToolError {
    let code = code_from_str(error.proxy_code());
    let message = match error {
        SandboxError::Thrown {
            message,
            code: Some(_),
            ..
        } => message.clone(),
        other => other.to_string(),
    };
    ToolError::new(code, message)
}

/// The [`ErrorCode`] named by a proxy code string; unknown codes become `FN_ERROR` (a lambda
/// threw an error with a code of its own).
pub(crate) fn code_from_str(code: &str) -> ErrorCode {
    match code {
        "NOT_FOUND" => ErrorCode::NotFound,
        "DISABLED" => ErrorCode::Disabled,
        "REQUIRES_AUTHORIZED_CODE" => ErrorCode::RequiresAuthorizedCode,
        "REQUIRES_AUTHORIZED_CALLER" => ErrorCode::RequiresAuthorizedCaller,
        "TOOL_ERROR" => ErrorCode::ToolError,
        "CIRCULAR_CALL" => ErrorCode::CircularCall,
        "EXCLUDED_TOOL" => ErrorCode::ExcludedTool,
        "INVALID_INPUT" => ErrorCode::InvalidInput,
        "INVALID_STATE" => ErrorCode::InvalidState,
        "MODEL_ERROR" => ErrorCode::ModelError,
        "MODEL_REFUSED" => ErrorCode::ModelRefused,
        "INTERNAL_ERROR" => ErrorCode::InternalError,
        "WRITE_ERROR" => ErrorCode::WriteError,
        "MESH_NOT_ENABLED" | "MESH_TOOL_UNAVAILABLE" => ErrorCode::MeshNotEnabled,
        "TIMEOUT" => ErrorCode::Timeout,
        "DENIED" => ErrorCode::Denied,
        _ => ErrorCode::FnError,
    }
}

/// One execution's identity: who its `adf.*` calls are made as.
#[derive(Debug)]
pub(crate) struct Frame {
    /// Cleared when the execution loads an unauthorized module (see the module docs of
    /// `code`); never set again.
    pub(super) authorized: AtomicBool,
    /// `path:function`, or `sys_code`.
    pub(crate) source: String,
    /// Lambda sources from the top-level run to this execution, for `CIRCULAR_CALL`.
    pub(super) stack: Vec<String>,
}

impl Frame {
    pub(crate) fn new(authorized: bool, source: String, stack: Vec<String>) -> Arc<Frame> {
        Arc::new(Frame {
            authorized: AtomicBool::new(authorized),
            source,
            stack,
        })
    }

    pub(crate) fn authorized(&self) -> bool {
        self.authorized.load(Ordering::SeqCst)
    }

    pub(crate) fn caller(&self) -> ToolCaller {
        ToolCaller::Code {
            authorized: self.authorized(),
            source: Some(self.source.clone()),
        }
    }
}
