//! Running agent code against its file: `sys_code`, `sys_lambda`, and every lambda the
//! triggers, timers, routes and middleware will run (spec §8.6, §9, adf-object guide).
//!
//! Principal items: [`CodeEnv`] (the agent's sandbox, the tool registry, the model resolver and
//! the installation's keys), [`run_lambda`] (the one entry point for "run this lambda reference
//! with this input under this authorization"), [`run_inline`] (`sys_code`, `adf code`),
//! [`run_deferred`] (carries out a `sys_code`/`sys_lambda` call the tool pipeline returned as
//! `CallOutcome::Deferred`, including the owner approval a model's `sys_lambda` on an authorized
//! file needs) and [`CodeRun`] (value, console output, collected `loop_inject` contexts).
//!
//! How code reaches the file. The sandbox runs JavaScript on the tokio runtime and calls the
//! [`adf_sandbox::Host`] for every `adf.*` call and module load. Our host does nothing itself:
//! it sends the request over an unbounded channel to the runner (runner.rs), the loop that holds
//! the one `&mut AdfFile` and `select!`s between the executions in flight and that channel. So
//! every `adf.*` call is serviced on the task that owns the file — no mutex, no second
//! connection — and each call is its own transaction (the registry's `atomically`, or ours for
//! the code-only methods). Nested executions (`adf.sys_lambda`, `adf.sys_code`) and slow
//! calls (`model_invoke`) run as futures the same loop polls, so the outer execution's time
//! limit and timers keep running meanwhile.
//!
//! Authorization (§8.6). Every execution has a frame with its caller identity
//! (`ToolCaller::Code { authorized, source: "path:function" }`). A lambda starts authorized only
//! when its authorization allows it ([`Authorization::SourceFile`]: the source file's flag), and
//! **every module it loads must be authorized too**: loading an unauthorized file (the entry
//! or any import) demotes the execution before any JavaScript runs, so an authorized file cannot
//! be made to run agent-written code with its privileges by importing it. `sys_code` is always
//! unauthorized. Nested `sys_lambda`: unauthorized code calling an authorized file is refused
//! (`REQUIRES_AUTHORIZED_CALLER`), otherwise the target runs with its own file's flag; a
//! function already on the call stack is `CIRCULAR_CALL`.
//!
//! What code sees (adf-object guide). Results are JSON; failures throw with the
//! [`crate::tools::ErrorCode`] of the failure; `say`/`ask` are `EXCLUDED_TOOL`,
//! `loop_compact`/`loop_clear` are refused with the guide's explanation. `db_query` returns its
//! row objects (the guide's examples iterate the result: `for (const row of rows)`), not the
//! `{columns, rows, ...}` object the model reads. An `_async: true` call answers
//! `{task_id, status, tool}` at once and a `running` task then runs before the next call is
//! serviced. The code-only methods of the §9 table are in methods.rs.
//!
//! Tool results that are text are parsed when they are JSON (the guide's calling convention);
//! `model_invoke` replies and `get_identity` values are raw text and reach JavaScript as
//! strings whatever they look like (`adf_sandbox::raw_text`). `emit_event` records the event as
//! an `adf_logs` row (origin `emit_event`) and hands it to the environment's [`EventSink`] when
//! there is one (the daemon's umbilical bus); without a sink it is reported as not delivered.

mod methods;
mod runner;
mod waiting;

use std::sync::Arc;
use std::time::Duration;

use adf_providers::Resolver;
use adf_sandbox::{Entry, Request, SandboxError};
pub use adf_sandbox::{LogEntry, LogLevel, Sandbox, SandboxConfig};
use adf_store::{AdfFile, NewLog};
use serde::Serialize;
use serde_json::{Value, json};

use crate::identity::LocalKeys;
use crate::tools::approval::{self, Decision};
use crate::tools::{
    Approver, DeferredCall, DeferredDriver, ErrorCode, HostedFuture, ToolCaller, ToolError,
    ToolRegistry,
};

pub(crate) use runner::lambda_file;
use runner::{Frame, Runner};
pub use waiting::{FileQueue, LeaseHooks};

/// The default of `limits.execution_timeout_ms` (§5.7).
pub const DEFAULT_EXECUTION_TIMEOUT_MS: u64 = 60_000;
/// Deepest chain of nested `sys_lambda` calls (a backstop besides `CIRCULAR_CALL`).
pub const MAX_LAMBDA_DEPTH: usize = 16;

/// What an agent's code runs with: its sandbox (one QuickJS runtime; cheap to clone), the tool
/// registry, the model resolver for `model_invoke`, and this installation's keys for the
/// identity methods (opened lazily, only when code asks).
#[derive(Clone)]
pub struct CodeEnv {
    sandbox: Sandbox,
    registry: Arc<ToolRegistry>,
    resolver: Resolver,
    keys: Option<Arc<LocalKeys>>,
    events: Option<Arc<dyn EventSink>>,
    /// Ends the lambda runs of this environment early (see [`Self::with_cancel`]).
    cancel: Option<tokio::sync::watch::Receiver<bool>>,
    /// Whose queued jobs a run serves while it waits (see [`Self::serving`]).
    queue: Option<FileQueue>,
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

/// Runs a lambda (`path:function`) with `input` as its single argument: the entry point of
/// triggers, timers, API routes, middleware and `adf run`. Runs `authorized` only under
/// [`Authorization::SourceFile`] and when the file and every module it imports are authorized.
pub async fn run_lambda(
    file: &mut AdfFile,
    env: &CodeEnv,
    lambda: &LambdaRef,
    input: Value,
    authorization: Authorization,
    approver: &(dyn Approver + Sync),
    options: &RunOptions,
) -> CodeRun {
    run_logged_lambda(
        file,
        env,
        "lambda",
        lambda,
        input,
        authorization,
        approver,
        options,
    )
    .await
}

/// [`run_lambda`] as one write transaction with the rows `closing` writes (an API route's
/// `api_response`): the `execute` row, the lambda's own writes, its `result` row and the
/// closing rows commit once, in that order. A lambda that throws (or times out) has its own
/// writes rolled back; the log rows it wrote (what it did, why it failed) stay, in their
/// order, between `execute` and `result`.
///
/// No write lock is held across a wait off the file: before the run awaits a detached tool
/// (`sys_fetch`, `ws_connect`, which may write through a connection of its own), a model
/// request, native `fetch` or a hosted shell command, what it wrote so far commits, and its
/// later writes commit one call at a time as in [`run_lambda`] (and are kept if it throws).
///
/// Inside a transaction the caller opened (a batch of route requests committed together) the
/// run treats that transaction as its own, savepoint and commit-before-a-wait included, but
/// leaves the final commit to the caller.
#[allow(clippy::too_many_arguments)]
pub async fn run_lambda_closing(
    file: &mut AdfFile,
    env: &CodeEnv,
    lambda: &LambdaRef,
    input: Value,
    authorization: Authorization,
    approver: &(dyn Approver + Sync),
    options: &RunOptions,
    closing: impl FnOnce(&mut AdfFile, &CodeRun),
) -> CodeRun {
    let source = lambda.source();
    let enclosing = file.in_transaction();
    let own = !enclosing && file.begin_held_transaction().is_ok();
    log_execute(
        file,
        "lambda",
        &source,
        authorization == Authorization::SourceFile,
    );
    let savepoint = if own || enclosing {
        open_run_savepoint(file)
    } else {
        None
    };
    let started = std::time::Instant::now();
    let run = run_lambda_unlogged(
        file,
        env,
        lambda,
        input,
        authorization,
        approver,
        options,
        savepoint.is_some(),
    )
    .await;
    let elapsed = started.elapsed();
    // Still inside the run's transaction: no wait committed it.
    if let Some(savepoint) = savepoint
        && file.in_transaction()
    {
        close_run_savepoint(file, savepoint, run.result.is_err());
    }
    let committed = file.atomically(|file| {
        log_result(file, "lambda", &source, &run.result, elapsed);
        closing(file, &run);
        Ok::<_, adf_store::StoreError>(())
    });
    if let Err(error) = committed {
        // Like a log row that cannot be written, this never changes the run's outcome.
        tracing::warn!(%error, "cannot commit a lambda's closing rows");
    }
    if own && file.in_transaction() {
        commit_run_transaction(file);
    }
    run
}

/// Opens the lambda's savepoint (see [`adf_store::RunSavepoint`]); `None` when it cannot be
/// opened (the run then commits as it goes).
fn open_run_savepoint(file: &AdfFile) -> Option<adf_store::RunSavepoint> {
    file.open_run_savepoint().ok()
}

/// Ends the lambda's savepoint: kept when it returned; when it threw, its writes are rolled
/// back and its log rows written again after the rollback, in order.
fn close_run_savepoint(file: &AdfFile, savepoint: adf_store::RunSavepoint, threw: bool) {
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

/// [`run_lambda`] between an `execute` and a `result` log row of `origin` (§13.5: `lambda`
/// for triggers, timers and routes, `sys_lambda` for the tool).
#[allow(clippy::too_many_arguments)]
async fn run_logged_lambda(
    file: &mut AdfFile,
    env: &CodeEnv,
    origin: &str,
    lambda: &LambdaRef,
    input: Value,
    authorization: Authorization,
    approver: &(dyn Approver + Sync),
    options: &RunOptions,
) -> CodeRun {
    let source = lambda.source();
    let authorized = authorization == Authorization::SourceFile;
    log_execute(file, origin, &source, authorized);
    let started = std::time::Instant::now();
    let run = run_lambda_unlogged(
        file,
        env,
        lambda,
        input,
        authorization,
        approver,
        options,
        false,
    )
    .await;
    log_result(file, origin, &source, &run.result, started.elapsed());
    run
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

/// `holding`: the run is inside [`run_lambda_closing`]'s transaction, which the runner
/// commits before any wait off the file.
#[allow(clippy::too_many_arguments)]
async fn run_lambda_unlogged(
    file: &mut AdfFile,
    env: &CodeEnv,
    lambda: &LambdaRef,
    input: Value,
    authorization: Authorization,
    approver: &(dyn Approver + Sync),
    options: &RunOptions,
    holding: bool,
) -> CodeRun {
    let config = match profiled_config(file, options) {
        Ok(config) => config,
        Err(e) => return CodeRun::failed(e),
    };
    if !input.is_object() && !input.is_null() {
        return CodeRun::failed(ToolError::invalid("lambda input must be a JSON object"));
    }
    let input = if input.is_null() { json!({}) } else { input };
    let frame = Frame::new(
        authorization == Authorization::SourceFile,
        lambda.source(),
        vec![lambda.source()],
    );
    let request = Request::new(Entry::Lambda {
        path: lambda.path.clone(),
        function: lambda.function.clone(),
    })
    .args(input)
    .timeout(options_timeout(&config, options.timeout))
    .network(network(&config))
    .warm(options.warm)
    .cancel(env.cancel_signal());
    let mut runner = Runner::new(file, env, approver, options);
    runner.holding_transaction = holding;
    runner.run(request, frame).await
}

/// Runs inline code (`sys_code`, `adf code`) in the agent's persistent context, unauthorized.
pub async fn run_inline(
    file: &mut AdfFile,
    env: &CodeEnv,
    code: &str,
    typescript: bool,
    approver: &(dyn Approver + Sync),
    options: &RunOptions,
) -> CodeRun {
    let config = match profiled_config(file, options) {
        Ok(config) => config,
        Err(e) => return CodeRun::failed(e),
    };
    let frame = Frame::new(false, "sys_code".into(), Vec::new());
    let request = Request::new(Entry::Inline {
        code: code.to_owned(),
        typescript,
    })
    .timeout(options_timeout(&config, options.timeout))
    .network(network(&config));
    Runner::new(file, env, approver, options)
        .run(request, frame)
        .await
}

/// What carrying out a deferred call gave: the tool result its caller reports, and the
/// `loop_inject` contexts code collected ([`InjectMode::Collect`]).
#[derive(Debug)]
pub struct DeferredRun {
    /// The tool result the caller reports: the call's value, or why it failed (the sandbox
    /// could not open, the code threw, the owner denied it).
    pub value: Result<Value, ToolError>,
    /// Contexts the code queued with `loop_inject`, for the caller to append after the
    /// batch; always empty for non-code tools.
    pub injections: Vec<Injection>,
}

/// The one driver of a call the pipeline returned as `CallOutcome::Deferred`: code tools
/// (`sys_code`, `sys_lambda`) run in the sandbox `code_env` opens (awaited only for them; its
/// failure is the call's error), hosted tools (`adf_shell`) as their
/// [`crate::tools::Tool::run_hosted`] body with this same driver for their inner deferred
/// calls, every other deferred tool as its detached future
/// ([`ToolRegistry::run_detached`]). Either way the outcome is recorded on the call's approval
/// task. The executor, the command line's `adf tool` and the daemon's shell runs call this.
pub async fn drive_deferred<E, F>(
    file: &mut AdfFile,
    registry: &ToolRegistry,
    caller: &ToolCaller,
    call: &DeferredCall,
    code_env: F,
    approver: &(dyn Approver + Sync),
    options: &RunOptions,
) -> DeferredRun
where
    E: std::borrow::Borrow<CodeEnv> + Send,
    F: Future<Output = Result<E, ToolError>> + Send,
{
    let mut driver = Driver {
        registry,
        approver,
        options,
        env: EnvSlot::Opening(Box::pin(code_env)),
        injections: Vec::new(),
    };
    let value = match registry
        .run_hosted(file, caller, call, approver, &mut driver)
        .await
    {
        Some(value) => value,
        None => driver.run(file, caller, call).await,
    };
    DeferredRun {
        value,
        injections: driver.injections,
    }
}

/// The code environment of a [`Driver`]: not opened yet, opened, or failed to open.
enum EnvSlot<E, F> {
    Opening(std::pin::Pin<Box<F>>),
    Open(E),
    Failed(ToolError),
}

/// [`drive_deferred`]'s [`DeferredDriver`]: opens the code environment on the first code
/// call and collects the `loop_inject` contexts of every code run it carries out.
struct Driver<'a, E, F> {
    registry: &'a ToolRegistry,
    approver: &'a (dyn Approver + Sync),
    options: &'a RunOptions,
    env: EnvSlot<E, F>,
    injections: Vec<Injection>,
}

impl<E, F> Driver<'_, E, F>
where
    E: std::borrow::Borrow<CodeEnv> + Send,
    F: Future<Output = Result<E, ToolError>> + Send,
{
    async fn run(
        &mut self,
        file: &mut AdfFile,
        caller: &ToolCaller,
        call: &DeferredCall,
    ) -> Result<Value, ToolError> {
        if !matches!(call.tool.as_str(), "sys_code" | "sys_lambda") {
            return self.registry.run_detached(file, caller, call).await;
        }
        if let EnvSlot::Opening(future) = &mut self.env {
            self.env = match future.await {
                Ok(env) => EnvSlot::Open(env),
                Err(error) => EnvSlot::Failed(error),
            };
        }
        let env = match &self.env {
            EnvSlot::Open(env) => env,
            EnvSlot::Failed(error) => {
                let error = error.clone();
                // The pipeline approved the call; its task records that it did not run.
                let _ = self
                    .registry
                    .finish_deferred(file, call, &Err(error.clone()));
                return Err(error);
            }
            EnvSlot::Opening(..) => {
                return Err(ToolError::new(
                    ErrorCode::InternalError,
                    "the code environment did not open",
                ));
            }
        };
        let mut run = run_deferred(
            file,
            env.borrow(),
            caller,
            call,
            self.approver,
            self.options,
        )
        .await;
        self.injections.append(&mut run.injections);
        run.tool_value()
    }
}

impl<E, F> DeferredDriver for Driver<'_, E, F>
where
    E: std::borrow::Borrow<CodeEnv> + Send,
    F: Future<Output = Result<E, ToolError>> + Send,
{
    fn drive<'b>(
        &'b mut self,
        file: &'b mut AdfFile,
        caller: &'b ToolCaller,
        call: &'b DeferredCall,
    ) -> HostedFuture<'b> {
        Box::pin(self.run(file, caller, call))
    }
}

/// Carries out a `sys_code` or `sys_lambda` call the pipeline returned as
/// `CallOutcome::Deferred` for `caller`, then records its outcome on the call's approval task.
/// A model's `sys_lambda` on an authorized file asks `approver` first (§8.6) and the approved
/// run is authorized; on an unauthorized file it runs unauthorized without asking.
/// [`CodeRun::tool_value`] is what the caller reports as the tool result.
///
/// The executor calls this for deferred code tools of a model turn with
/// [`InjectMode::Collect`] and appends [`CodeRun::injections`] after the batch.
pub async fn run_deferred(
    file: &mut AdfFile,
    env: &CodeEnv,
    caller: &ToolCaller,
    call: &DeferredCall,
    approver: &(dyn Approver + Sync),
    options: &RunOptions,
) -> CodeRun {
    let run = match call.tool.as_str() {
        "sys_code" => {
            let code = call.args.get("code").and_then(Value::as_str).unwrap_or("");
            let typescript = matches!(
                call.args.get("language").and_then(Value::as_str),
                Some("ts" | "typescript")
            );
            // Appendix C #16: min(timeout, limits.execution_timeout_ms).
            let timeout = call
                .args
                .get("timeout")
                .and_then(Value::as_f64)
                .filter(|t| *t >= 1.0)
                .map(|t| Duration::from_millis(t as u64));
            let options = RunOptions {
                timeout: min_timeout(timeout, options.timeout),
                ..options.clone()
            };
            run_inline(file, env, code, typescript, approver, &options).await
        }
        "sys_lambda" => deferred_lambda(file, env, caller, call, approver, options).await,
        other => CodeRun::failed(ToolError::new(
            ErrorCode::InternalError,
            format!("'{other}' is not a code tool"),
        )),
    };
    let recorded = env.registry.finish_deferred(
        file,
        call,
        &run.result.clone().map(|v| json!({ "result": v })),
    );
    match recorded {
        Ok(()) => run,
        Err(e) => CodeRun {
            result: Err(e),
            ..run
        },
    }
}

async fn deferred_lambda(
    file: &mut AdfFile,
    env: &CodeEnv,
    caller: &ToolCaller,
    call: &DeferredCall,
    approver: &(dyn Approver + Sync),
    options: &RunOptions,
) -> CodeRun {
    let source = call
        .args
        .get("source")
        .and_then(Value::as_str)
        .unwrap_or("");
    let lambda = match LambdaRef::parse(source) {
        Ok(l) => l,
        Err(e) => return CodeRun::failed(e),
    };
    let input = call.args.get("args").cloned().unwrap_or_else(|| json!({}));
    let target_authorized = match runner::lambda_file(file, &lambda.path) {
        Ok(Some(info)) => info.authorized,
        Ok(None) => {
            return CodeRun::failed(ToolError::not_found(format!(
                "no file {} in this agent",
                lambda.path
            )));
        }
        Err(e) => return CodeRun::failed(e),
    };
    let mut approval_task = None;
    let authorization = match caller {
        ToolCaller::Model { .. } if target_authorized => {
            let meta = json!({
                "reason": "authorized_code",
                "description": format!("sys_lambda would run {} with the authorization of {}", lambda.source(), lambda.path),
            });
            match approval::request(file, approver, caller, "sys_lambda", &call.args, &meta) {
                Ok((Decision::Approved, task)) => {
                    approval_task = Some(task);
                    Authorization::SourceFile
                }
                Ok((Decision::Denied(reason), _)) => {
                    return CodeRun::failed(ToolError::new(
                        ErrorCode::Denied,
                        format!("the owner denied running {}: {reason}", lambda.source()),
                    ));
                }
                Err(e) => return CodeRun::failed(e),
            }
        }
        ToolCaller::Model { .. } => Authorization::Unauthorized,
        ToolCaller::Code {
            authorized: false, ..
        } if target_authorized => {
            return CodeRun::failed(requires_authorized_caller(&lambda.path));
        }
        ToolCaller::Code {
            authorized: false, ..
        } => Authorization::Unauthorized,
        ToolCaller::Code {
            authorized: true, ..
        }
        | ToolCaller::Owner => Authorization::SourceFile,
    };
    let run = run_logged_lambda(
        file,
        env,
        "sys_lambda",
        &lambda,
        input,
        authorization,
        approver,
        options,
    )
    .await;
    if let Some(task) = approval_task {
        let outcome = match &run.result {
            Ok(value) => {
                file.task_update(&task, "completed", Some(&crate::tools::render(value)), None)
            }
            Err(error) => file.task_update(&task, "failed", None, Some(&error.to_string())),
        };
        if let Err(e) = outcome {
            return CodeRun {
                result: Err(e.into()),
                ..run
            };
        }
    }
    run
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
fn options_timeout(config: &Value, requested: Option<Duration>) -> Duration {
    let limit = Duration::from_millis(
        config
            .pointer("/limits/execution_timeout_ms")
            .and_then(Value::as_u64)
            .filter(|ms| *ms > 0)
            .unwrap_or(DEFAULT_EXECUTION_TIMEOUT_MS),
    );
    requested.map_or(limit, |r| r.min(limit))
}

fn min_timeout(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The config under `options.profile` (see [`CodeProfile`]).
fn profiled_config(file: &AdfFile, options: &RunOptions) -> Result<Arc<Value>, ToolError> {
    let config = file.config_shared()?;
    Ok(match options.profile {
        CodeProfile::Agent => config,
        CodeProfile::InnerLoop => Arc::new(inner_loop_view(&config)),
    })
}

fn network(config: &Value) -> bool {
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
