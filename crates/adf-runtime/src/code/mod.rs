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
//!
//! Files, each importing only those below it: env.rs (what a run runs with and ends with, an
//! execution's `Frame`, the shared log and timeout helpers) and waiting.rs (the queued jobs a
//! waiting run serves) are leaves; methods.rs implements the code-only methods on the parts of
//! the run the runner lends them (`MethodCx`); runner.rs is the loop that owns the file and
//! dispatches to them; this file holds the entry points and re-exports the rest.

mod env;
mod methods;
mod packages;
mod runner;
mod waiting;

use std::time::Duration;

use adf_sandbox::{Entry, Request};
pub use adf_sandbox::{LogEntry, LogLevel, Sandbox, SandboxConfig};
use adf_store::AdfFile;
use serde_json::{Value, json};

use crate::tools::approval::{self, Decision};
use crate::tools::{
    Approver, DeferredCall, DeferredDriver, ErrorCode, HostedFuture, ToolCaller, ToolError,
    ToolRegistry,
};

use env::Frame;
pub use packages::PackageModules;
use runner::Runner;
pub(crate) use runner::lambda_file;
pub(crate) use waiting::current_queue as serving_queue;
pub use waiting::{FileQueue, LeaseHooks};

pub use env::{
    Authorization, CallRecord, CodeEnv, CodeProfile, CodeRun, DEFAULT_EXECUTION_TIMEOUT_MS,
    EventSink, INNER_LOOP_DISABLED, INNER_LOOP_RESTRICTED, InjectMode, Injection, LambdaRef,
    MAX_LAMBDA_DEPTH, RunOptions, inner_loop_view, store_injections,
};
use env::{
    close_run_savepoint, min_timeout, network, open_run_savepoint, options_timeout, profiled_config,
};
pub(crate) use env::{commit_run_transaction, log_execute, log_result, requires_authorized_caller};

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
    let job = LambdaJob {
        env,
        lambda,
        input,
        authorization,
        approver,
        options,
    };
    run_logged_lambda(file, "lambda", job).await
}

/// One lambda run as the entry points hand it down: what runs (the lambda and its input),
/// under which authorization, in which environment, and who approves its restricted calls.
struct LambdaJob<'a> {
    env: &'a CodeEnv,
    lambda: &'a LambdaRef,
    input: Value,
    authorization: Authorization,
    approver: &'a (dyn Approver + Sync),
    options: &'a RunOptions,
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
// The signature mirrors `run_lambda`'s (plus `closing`) and is adf-net's entry point: it stays
// flat rather than making callers build a parameter struct for one call.
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
    let job = LambdaJob {
        env,
        lambda,
        input,
        authorization,
        approver,
        options,
    };
    let run = run_lambda_unlogged(file, job, savepoint.is_some()).await;
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

/// [`run_lambda`] between an `execute` and a `result` log row of `origin` (§13.5: `lambda`
/// for triggers, timers and routes, `sys_lambda` for the tool).
async fn run_logged_lambda(file: &mut AdfFile, origin: &str, job: LambdaJob<'_>) -> CodeRun {
    let source = job.lambda.source();
    let authorized = job.authorization == Authorization::SourceFile;
    log_execute(file, origin, &source, authorized);
    let started = std::time::Instant::now();
    let run = run_lambda_unlogged(file, job, false).await;
    log_result(file, origin, &source, &run.result, started.elapsed());
    run
}

/// `holding`: the run is inside [`run_lambda_closing`]'s transaction, which the runner
/// commits before any wait off the file.
async fn run_lambda_unlogged(file: &mut AdfFile, job: LambdaJob<'_>, holding: bool) -> CodeRun {
    let LambdaJob {
        env,
        lambda,
        input,
        authorization,
        approver,
        options,
    } = job;
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
/// [`crate::tools::HostedTool::run_hosted`] body with this same driver for their inner deferred
/// calls, every other deferred tool as its detached future
/// ([`ToolRegistry::run_detached`]). Either way the outcome is recorded on the call's approval
/// task. The executor and the command line's `adf tool` call this.
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
    drive_deferred_serving(
        file, registry, caller, call, code_env, approver, options, None,
    )
    .await
}

/// [`drive_deferred`] for a holder of the file whose agent has other work queued on it (the
/// daemon's shell runs, a job of the agent's store worker): while the call waits — a shell
/// line's `sleep`, its `curl` in flight — the jobs queued on `queue` run with the file
/// between two of its inner calls (waiting.rs), so the agent's timers, triggers and reads
/// go on. Code the line runs serves through its own environment
/// ([`CodeEnv::serving`]).
#[allow(clippy::too_many_arguments)]
pub async fn drive_deferred_serving<E, F>(
    file: &mut AdfFile,
    registry: &ToolRegistry,
    caller: &ToolCaller,
    call: &DeferredCall,
    code_env: F,
    approver: &(dyn Approver + Sync),
    options: &RunOptions,
    queue: Option<&FileQueue>,
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
        waiting: queue.map(FileQueue::listen),
    };
    // A middleware chain an inner call runs (`curl` → `sys_fetch`) serves the same queue.
    let _serving = queue.map(|queue| waiting::ServingScope::enter(Some(queue)));
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
    /// Rung when the agent's jobs wait for the file (see [`drive_deferred_serving`]).
    waiting: Option<waiting::Listening>,
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
            return waiting::run_detached_serving(
                self.registry,
                file,
                caller,
                call,
                self.waiting.as_ref(),
            )
            .await;
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

    fn queued(&self) -> futures::future::BoxFuture<'static, ()> {
        match &self.waiting {
            Some(waiting) => Box::pin(waiting.queued(false)),
            None => Box::pin(std::future::pending()),
        }
    }

    fn serve_queued(&mut self, file: &mut AdfFile) {
        if let Some(waiting) = &self.waiting {
            waiting.serve(file);
        }
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
    let job = LambdaJob {
        env,
        lambda: &lambda,
        input,
        authorization,
        approver,
        options,
    };
    let run = run_logged_lambda(file, "sys_lambda", job).await;
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
