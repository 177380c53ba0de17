//! `adf tool`, `adf approve`, `adf deny`: running tools against a file from the command line
//! and resolving the approvals they wait for.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use adf_runtime::tools::approval::{
    ApproveAll, DenyAll, Resolution, WaitForResolution, resolve_task,
};
use adf_runtime::tools::{
    ApprovalRequest, Approver, CallOutcome, Decision, ErrorCode, ToolCaller, ToolError,
    ToolRegistry, render,
};
use adf_store::AdfFile;
use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

use crate::output::Output;

/// Who `adf tool --as` runs a call as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CallAs {
    /// The model in the main loop: restricted tools ask the owner first.
    Model,
    /// Unauthorized agent code.
    Code,
    /// Code from an authorized file.
    Authorized,
    /// The owner: no agent restrictions.
    Owner,
}

impl CallAs {
    fn caller(self) -> ToolCaller {
        match self {
            Self::Model => ToolCaller::Model {
                loop_name: "main".into(),
            },
            Self::Code => ToolCaller::Code {
                authorized: false,
                source: Some("cli".into()),
            },
            Self::Authorized => ToolCaller::Code {
                authorized: true,
                source: Some("cli".into()),
            },
            Self::Owner => ToolCaller::Owner,
        }
    }
}

/// How approvals requested during `adf tool` are answered.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ApprovalPolicy {
    /// Ask on the terminal when there is one; otherwise wait for `adf approve` / `adf deny`.
    Ask,
    ApproveAll,
    DenyAll,
}

/// Asks the owner on the terminal.
struct TerminalApprover;

impl Approver for TerminalApprover {
    fn decide(
        &self,
        _file: &mut AdfFile,
        request: &ApprovalRequest,
    ) -> Result<Decision, ToolError> {
        let why = request
            .args
            .get("_reason")
            .and_then(Value::as_str)
            .unwrap_or("(no reason given)");
        let kind = request
            .approval_meta
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("restricted");
        let mut stderr = std::io::stderr();
        let detail = match request
            .approval_meta
            .pointer("/protection/description")
            .and_then(Value::as_str)
        {
            Some(description) => format!(" ({description})"),
            None => String::new(),
        };
        let _ = writeln!(
            stderr,
            "Approval needed [{kind}]{detail}: {}({})",
            request.tool,
            args_without_reason(&request.args)
        );
        let _ = writeln!(stderr, "  reason: {why}");
        let _ = write!(stderr, "  approve? [y/N] ");
        let _ = stderr.flush();
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| ToolError::failed(format!("cannot read the answer: {e}")))?;
        if matches!(line.trim(), "y" | "Y" | "yes") {
            Ok(Decision::Approved)
        } else {
            Ok(Decision::Denied("denied on the terminal".into()))
        }
    }
}

/// Tells the user how to resolve the task from another shell, then waits for it.
struct WaitWithHint<'a> {
    file: &'a Path,
}

impl Approver for WaitWithHint<'_> {
    fn decide(&self, file: &mut AdfFile, request: &ApprovalRequest) -> Result<Decision, ToolError> {
        let shown = self.file.display();
        eprintln!(
            "waiting for approval of {} (task {}): run `adf approve '{shown}' {}` or `adf deny '{shown}' {}`",
            request.tool, request.task_id, request.task_id, request.task_id
        );
        WaitForResolution {
            poll: Duration::from_millis(100),
        }
        .decide(file, request)
    }
}

fn args_without_reason(args: &Value) -> String {
    let mut shown = args.clone();
    if let Some(object) = shown.as_object_mut() {
        object.remove("_reason");
    }
    shown.to_string()
}

/// The tools this binary runs: the built-ins plus the capability crates (`adf_shell`,
/// `compute_exec` and `fs_transfer` over the runtime home's workspaces, the npm package tools
/// and store, and the MCP tools the agent declares, whose servers start on first call).
pub(crate) fn registry() -> ToolRegistry {
    let mut registry = ToolRegistry::with_builtins();
    registry.register(adf_shell::tool());
    for tool in adf_compute::tools(adf_runtime::home::RuntimeHome::from_env().ok()) {
        registry.register(tool);
    }
    registry.add_source(std::sync::Arc::new(adf_mcp::McpSource::new(
        adf_mcp::Supervisor::default(),
        None,
    )));
    if let Ok(home) = adf_runtime::home::RuntimeHome::from_env() {
        adf_packages::attach(
            &mut registry,
            adf_packages::PackageStore::for_home(home.dir()),
        );
    }
    registry
}

/// `adf tool FILE NAME [--args JSON] [--as ...]`.
pub(crate) fn tool(
    path: &Path,
    name: &str,
    args: Option<&str>,
    call_as: CallAs,
    policy: ApprovalPolicy,
    out: Output,
) -> Result<ExitCode> {
    let args: Value = match args {
        Some(text) => serde_json::from_str(text)
            .with_context(|| format!("--args is not valid JSON: {text}"))?,
        None => json!({}),
    };
    let mut file = crate::session::open(path)?;
    let registry = registry();
    let caller = call_as.caller();
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let waiter = WaitWithHint { file: path };
    let approver: &(dyn Approver + Sync) = match policy {
        ApprovalPolicy::ApproveAll => &ApproveAll,
        ApprovalPolicy::DenyAll => &DenyAll,
        ApprovalPolicy::Ask if interactive => &TerminalApprover,
        ApprovalPolicy::Ask => &waiter,
    };
    let outcome = registry.call(&mut file, &caller, name, args, approver);
    let outcome = match outcome {
        // An `_async` call runs right away here: the command line has no background to defer to.
        Ok(CallOutcome::Queued { task_id, status }) if status == "running" => {
            crate::code_cmds::run_queued(&mut file, &registry, &caller, &task_id, approver).map(
                |result| json!({ "task_id": task_id, "status": "completed", "result": result }),
            )
        }
        // Code tools run here, through the runtime's code runner (§8.6 approvals included);
        // network tools (`sys_fetch`) on a runtime made for this one call.
        Ok(CallOutcome::Deferred(call)) => {
            crate::code_cmds::drive_deferred(&mut file, &registry, &caller, &call, approver)
        }
        Ok(other) => Ok(other.into_value()),
        Err(error) => Err(error),
    };
    file.close()?;
    match outcome {
        Ok(value) => {
            out.emit(&json!({ "ok": true, "result": value }), || {
                println!("{}", render(&value))
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            if out.json {
                println!(
                    "{}",
                    json!({ "ok": false, "error": { "code": error.code, "message": error.message } })
                );
            }
            eprintln!("error: {} ({})", error.message, error.code);
            // The message is the one the model sees; the owner at the terminal can act on it.
            if error.code == ErrorCode::Disabled
                && error.message.ends_with("is disabled")
                && !matches!(call_as, CallAs::Owner)
            {
                eprintln!(
                    "hint: the owner enables it with `adf config set '{}' tools.{name}.enabled true`, or calls it with `--as owner`",
                    path.display()
                );
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `adf approve FILE TASK` and `adf deny FILE TASK [REASON]`, as the owner.
pub(crate) fn resolve(
    path: &Path,
    task_id: &str,
    approve: bool,
    reason: Option<String>,
    out: Output,
) -> Result<ExitCode> {
    let mut file = crate::session::open(path)?;
    if file.task(task_id)?.is_none() {
        bail!(
            "no task {task_id} in {}; list them with `adf tasks '{}'`",
            path.display(),
            path.display()
        );
    }
    let registry = registry();
    let resolution = if approve {
        Resolution::Approve {
            modified_args: None,
        }
    } else {
        Resolution::Deny { reason }
    };
    let result = resolve_task(
        &registry,
        &mut file,
        task_id,
        resolution,
        &ToolCaller::Owner,
        false,
    );
    file.close()?;
    match result {
        Ok(value) => {
            out.emit(&value, || {
                let status = value["status"].as_str().unwrap_or_default();
                println!("task {task_id}: {status}");
                if let Some(error) = value.get("error").and_then(Value::as_str) {
                    println!("  {error}");
                }
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => bail!("{} ({})", error.message, error.code),
    }
}
