//! `adf-shell`: the `adf_shell` tool, a bash-like interpreter over the agent's own file.
//!
//! Principal types: [`ShellTool`] (the `adf_shell` [`Tool`], registered where a binary
//! assembles its runtime), [`Host`] (the narrow seam every command goes through: one tool call
//! at a time), [`Shell`] (the interpreter: variables, `$?`, budgets), [`Limits`] and
//! [`Outcome`]. As a tool, the line runs on a thread of its own whose host hands each call to
//! the hosted future holding the file: the pipeline call as the outer caller (access,
//! protection, approvals and audit hold inside a pipeline), and for a call the pipeline defers
//! (`curl` → `sys_fetch`, `node` → `sys_code`) the caller's
//! [`adf_runtime::tools::DeferredDriver`]. [`RegistryHost`] is the synchronous embedding over
//! [`ToolRegistry::call`] (synchronous tools only).
//!
//! The language is parsed in [`parse`]: pipes, `&&`, `||`, `;`, redirects, variables,
//! `$( … )`, quoting, heredocs, comments. Constructs it does not run (`&`, subshells, globs,
//! arithmetic, loops) are parse errors that say what to write instead. Nothing here touches
//! the host machine: files are the agent's `adf_files`, reached through `fs_*` tools.

mod commands;
mod exec;
mod jq_eval;
pub mod parse;
pub mod worker;

use std::collections::BTreeMap;
use std::sync::Arc;

use adf_runtime::tools::{
    Approver, CallOutcome, DeferredCall, ErrorCode, Execution, HostedContext, HostedFuture,
    HostedTool, Tool, ToolCaller, ToolContext, ToolError, ToolRegistry,
};
use adf_store::AdfFile;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

pub use exec::{Limits, Outcome, Shell};

/// The seam: how commands reach the agent. Every file, message, timer or config access is
/// one tool call through here.
pub trait Host {
    /// Calls a tool as the shell's caller; its result, or why it failed.
    fn call(&mut self, tool: &str, args: Value) -> Result<Value, ToolError>;

    /// The bytes of a file the caller has just read through `fs_read` (which decided access
    /// and shaped the text for the model); `None` when it does not exist.
    fn read_bytes(&mut self, path: &str) -> Result<Option<Vec<u8>>, ToolError>;

    /// Whether the call this line runs for was abandoned (the turn aborted, the caller gone):
    /// long work (`jq`, `sleep`) stops when it is.
    fn cancelled(&self) -> bool {
        false
    }
}

/// [`Host`] over the tool pipeline: each call is [`ToolRegistry::call`] for the same caller
/// with the same approver.
pub struct RegistryHost<'a> {
    file: &'a mut AdfFile,
    registry: &'a ToolRegistry,
    caller: &'a ToolCaller,
    approver: &'a dyn Approver,
}

impl std::fmt::Debug for RegistryHost<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryHost")
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

impl<'a> RegistryHost<'a> {
    /// A host calling `registry` on `file` as `caller`, asking `approver` for restricted calls.
    pub fn new(
        file: &'a mut AdfFile,
        registry: &'a ToolRegistry,
        caller: &'a ToolCaller,
        approver: &'a dyn Approver,
    ) -> Self {
        RegistryHost {
            file,
            registry,
            caller,
            approver,
        }
    }
}

impl Host for RegistryHost<'_> {
    fn call(&mut self, tool: &str, args: Value) -> Result<Value, ToolError> {
        match pipeline_call(
            self.registry,
            self.file,
            self.caller,
            self.approver,
            tool,
            args,
        )? {
            Ok(value) => Ok(value),
            Err(call) => {
                let error = ToolError::new(
                    ErrorCode::ToolError,
                    format!(
                        "{tool} runs outside the store; a RegistryHost carries out synchronous tools only (run the line through the adf_shell tool, whose host drives {tool})"
                    ),
                );
                // The pipeline approved the call; its task (if any) records that it did not run.
                let _ = self
                    .registry
                    .finish_deferred(self.file, &call, &Err(error.clone()));
                Err(error)
            }
        }
    }

    fn read_bytes(&mut self, path: &str) -> Result<Option<Vec<u8>>, ToolError> {
        Ok(self.file.file_read(path)?.map(|entry| entry.content))
    }
}

/// The tool's name.
pub const SHELL_TOOL: &str = "adf_shell";

/// The tools the shell covers for the model (tools guide "Shell Tool": they leave the model's
/// list while `adf_shell` is advertised, and stay callable).
pub const ABSORBED: &[&str] = &[
    "fs_read",
    "fs_write",
    "fs_list",
    "fs_delete",
    "db_query",
    "db_execute",
    "msg_send",
    "msg_read",
    "msg_list",
    "msg_update",
    "msg_delete",
    "agent_discover",
    "sys_get_meta",
    "sys_set_meta",
    "sys_delete_meta",
    "sys_set_state",
    "sys_set_timer",
    "sys_list_timers",
    "sys_delete_timer",
    "sys_get_config",
    "sys_fetch",
    "sys_code",
];

/// The `adf_shell` tool, an [`Execution::Hosted`] one: the pipeline decides access to
/// `adf_shell` itself, then [`HostedTool::run_hosted`] runs the line with every inner command a
/// pipeline call of its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShellTool;

/// The tool, ready for [`ToolRegistry::register`].
pub fn tool() -> Arc<dyn Tool> {
    Arc::new(ShellTool)
}

/// Runs `command` over `host` with default limits and no environment.
pub fn run_line(host: &mut dyn Host, command: &str) -> Outcome {
    Shell::new(host, BTreeMap::new(), Limits::default()).run(command)
}

impl Tool for ShellTool {
    adf_runtime::declare_tool! {
        name: SHELL_TOOL,
        description: "Run a bash-like command line over your files and tools: pipes, && || ;, > >> <, $VAR, $(cmd), quotes, heredocs. Commands: cat ls rm cp mv grep sed sort uniq wc cut tr head tail jq sqlite3 msg curl at crontab meta state config… (`help`, `CMD -h`). Returns {stdout, stderr, exit_code}.",
        parameters: json!({
            "type": "object",
            "properties": {
                "command": { "type": "string", "minLength": 1, "description": "The command line (or a multi-line script)." },
                "env": { "type": "object", "additionalProperties": { "type": "string" }, "description": "Variables to export, e.g. event context." }
            },
            "required": ["command"],
            "additionalProperties": false
        }),
    }

    fn run(&self, _: &mut ToolContext<'_>, _: Value) -> Result<Value, ToolError> {
        Err(ToolError::new(
            ErrorCode::InternalError,
            "adf_shell runs through its host (HostedTool::run_hosted), not inside a transaction",
        ))
    }

    fn absorbs(&self) -> &'static [&'static str] {
        ABSORBED
    }

    fn execution(&self) -> Execution<'_> {
        Execution::Hosted(self)
    }
}

impl HostedTool for ShellTool {
    fn run_hosted<'a>(&'a self, cx: HostedContext<'a>, args: Value) -> HostedFuture<'a> {
        Box::pin(run_threaded(cx, args))
    }
}

/// The limits for one line: the defaults, with the output cap following the config's
/// `limits.max_tool_result_tokens` (about four bytes a token) and the time budget following
/// `limits.execution_timeout_ms` when they are set.
fn limits_from(config: &Option<std::sync::Arc<Value>>) -> Limits {
    let mut limits = Limits::default();
    if let Some(ms) = config
        .as_ref()
        .and_then(|c| c.pointer("/limits/execution_timeout_ms"))
        .and_then(Value::as_u64)
        .filter(|ms| *ms > 0)
    {
        limits.time_budget = std::time::Duration::from_millis(ms);
    }
    if let Some(tokens) = config
        .as_ref()
        .and_then(|c| c.pointer("/limits/max_tool_result_tokens"))
        .and_then(Value::as_u64)
    {
        limits.max_output = usize::try_from(tokens.saturating_mul(4))
            .unwrap_or(usize::MAX)
            .max(1024);
    }
    limits
}

/// One request of the interpreter thread to the task that holds the file.
enum Request {
    /// A tool call through the pipeline.
    Call {
        tool: String,
        args: Value,
        reply: oneshot::Sender<Result<Value, ToolError>>,
    },
    /// The bytes of a file (after `fs_read` decided access).
    ReadBytes {
        path: String,
        reply: oneshot::Sender<Result<Option<Vec<u8>>, ToolError>>,
    },
}

/// The interpreter thread's [`Host`]: each call is a [`Request`] to the task that holds the
/// file, answered once that task has carried it out (awaiting `sys_fetch` or `sys_code` if
/// need be).
struct ChannelHost {
    requests: mpsc::UnboundedSender<Request>,
}

/// The error of a call whose answer never came: the tool call was abandoned.
fn abandoned() -> ToolError {
    ToolError::new(
        ErrorCode::ToolError,
        "the adf_shell call was abandoned before this command finished",
    )
}

impl Host for ChannelHost {
    fn call(&mut self, tool: &str, args: Value) -> Result<Value, ToolError> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Request::Call {
                tool: tool.to_owned(),
                args,
                reply,
            })
            .map_err(|_| abandoned())?;
        answer.blocking_recv().map_err(|_| abandoned())?
    }

    fn read_bytes(&mut self, path: &str) -> Result<Option<Vec<u8>>, ToolError> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Request::ReadBytes {
                path: path.to_owned(),
                reply,
            })
            .map_err(|_| abandoned())?;
        answer.blocking_recv().map_err(|_| abandoned())?
    }

    fn cancelled(&self) -> bool {
        // The hosted future dropped its receiver: the call was abandoned.
        self.requests.is_closed()
    }
}

/// The interpreter thread's stack: generous beside what it needs (its recursion is bounded by
/// `parse::MAX_NESTING` and the script depth; jq runs in a process of its own).
pub const SHELL_STACK_BYTES: usize = 16 * 1024 * 1024;

/// Runs one `adf_shell` call. The interpreter is synchronous and may sleep, so it runs on a
/// thread of its own; this future holds the file and carries out its requests one at a time,
/// so a deferred command (`curl` over `sys_fetch`, `node` over `sys_code`) is awaited here
/// through the caller's driver while the interpreter waits, and no executor thread blocks.
/// While it waits, the driver may serve the agent's queued jobs with the file
/// ([`adf_runtime::tools::DeferredDriver::queued`]).
async fn run_threaded(mut cx: HostedContext<'_>, args: Value) -> Result<Value, ToolError> {
    let command = args
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let env: BTreeMap<String, String> = args
        .get("env")
        .and_then(Value::as_object)
        .map(|vars| {
            vars.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let limits = limits_from(&cx.file.config_shared().ok());
    let (requests, mut incoming) = mpsc::unbounded_channel();
    let (done, outcome) = oneshot::channel();
    std::thread::Builder::new()
        .name("adf-shell".into())
        .stack_size(SHELL_STACK_BYTES)
        .spawn(move || {
            let mut host = ChannelHost { requests };
            let outcome = Shell::new(&mut host, env, limits).run(&command);
            let _ = done.send(outcome);
        })
        .map_err(|e| {
            ToolError::new(
                ErrorCode::InternalError,
                format!("cannot start the shell: {e}"),
            )
        })?;
    // The thread drops its sender when the line ends (or the interpreter stops). While the
    // interpreter works on its own (a `sleep`, a long `jq`), the file is lent to the agent's
    // other work the caller's driver announces (the daemon's queued jobs): between two inner
    // calls, each one transaction, so no command sees half of another's writes.
    loop {
        let queued = cx.driver.queued();
        let request = tokio::select! {
            biased;
            request = incoming.recv() => request,
            () = queued => {
                cx.driver.serve_queued(cx.file);
                continue;
            }
        };
        let Some(request) = request else {
            break;
        };
        match request {
            Request::Call { tool, args, reply } => {
                let result = hosted_call(&mut cx, &tool, args).await;
                let _ = reply.send(result);
            }
            Request::ReadBytes { path, reply } => {
                let bytes = cx
                    .file
                    .file_read(&path)
                    .map(|entry| entry.map(|e| e.content))
                    .map_err(ToolError::from);
                let _ = reply.send(bytes);
            }
        }
    }
    outcome.await.map(|o| o.to_json()).map_err(|_| {
        ToolError::new(
            ErrorCode::InternalError,
            "the shell stopped on an internal error",
        )
    })
}

/// One inner call: the pipeline as the outer caller, then the caller's driver for a call the
/// pipeline defers.
async fn hosted_call(
    cx: &mut HostedContext<'_>,
    tool: &str,
    args: Value,
) -> Result<Value, ToolError> {
    match pipeline_call(cx.registry, cx.file, cx.caller, cx.approver, tool, args)? {
        Ok(value) => Ok(value),
        Err(call) => cx.driver.drive(cx.file, cx.caller, &call).await,
    }
}

/// An inner call through the tool pipeline as the outer caller: its answer (a queued call's
/// task), or the call the pipeline defers for the host to carry out. The shell never calls
/// itself.
fn pipeline_call(
    registry: &ToolRegistry,
    file: &mut AdfFile,
    caller: &ToolCaller,
    approver: &dyn Approver,
    tool: &str,
    args: Value,
) -> Result<Result<Value, DeferredCall>, ToolError> {
    if tool == SHELL_TOOL {
        return Err(ToolError::new(
            ErrorCode::ToolError,
            "adf_shell cannot call itself; run the commands directly",
        ));
    }
    Ok(match registry.call(file, caller, tool, args, approver)? {
        CallOutcome::Done(value) => Ok(value),
        CallOutcome::Queued { task_id, status } => {
            Ok(json!({ "task_id": task_id, "status": status }))
        }
        CallOutcome::Deferred(call) => Err(call),
    })
}
