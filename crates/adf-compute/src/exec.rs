//! `compute_exec {command, target?, timeout_ms?}` (tools guide "Compute Tools"): a detached
//! tool, so the program runs outside every store transaction and the file stays free while it
//! does. The target is decided in [`Tool::check`] (before an approval task is opened: a call
//! to an unavailable target is refused without asking the owner) and again when the call runs.
//! Restricted by default (§14.3), so the pipeline asks for approval and `on_task_create`
//! policies apply as for any restricted tool.

use std::path::Path;
use std::time::Duration;

use adf_runtime::home::RuntimeHome;
use adf_runtime::tools::{
    Detached, DetachedOutcome, DetachedTool, ErrorCode, Execution, Tool, ToolCaller, ToolContext,
    ToolError,
};
use serde_json::{Value, json};

use crate::error::ComputeError;
use crate::run::{self, Limits, MAX_TIMEOUT_MS, RunOutput, Sandbox};
use crate::target::{Target, Targets};

/// The `compute_exec` tool of a runtime home.
#[derive(Debug, Clone)]
pub struct ComputeExec {
    pub(crate) home: Option<RuntimeHome>,
}

pub(crate) fn home(home: &Option<RuntimeHome>) -> Result<&RuntimeHome, ComputeError> {
    home.as_ref().ok_or_else(|| {
        ComputeError::NotSupported(
            "compute needs a runtime home ($ADF_HOME) for its workspaces".into(),
        )
    })
}

fn limits(args: &Value) -> Result<Limits, ToolError> {
    let mut limits = Limits::default();
    if let Some(ms) = args.get("timeout_ms").and_then(Value::as_u64) {
        if ms == 0 || ms > MAX_TIMEOUT_MS {
            return Err(ToolError::invalid(format!(
                "timeout_ms must be between 1 and {MAX_TIMEOUT_MS}"
            )));
        }
        limits.timeout = Duration::from_millis(ms);
    }
    Ok(limits)
}

impl Tool for ComputeExec {
    adf_runtime::declare_tool! {
        name: "compute_exec",
        description: "Run a shell command (pipes, &&, redirection) in a compute environment: isolated (the agent's own sandbox, /workspace/{agentId}, no network), shared, a registered container, or host when enabled. Returns stdout, stderr and exit_code.",
        parameters: json!({
            "type": "object",
            "properties": {
                "command": { "type": "string", "description": "The shell command line." },
                "target": { "type": "string", "description": "isolated, shared, host or a registered container id; default compute.default_target." },
                "timeout_ms": { "type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS }
            },
            "required": ["command"]
        }),
    }

    fn run(&self, _cx: &mut ToolContext<'_>, _args: Value) -> Result<Value, ToolError> {
        Err(ToolError::new(
            ErrorCode::InternalError,
            "compute_exec runs outside the store transaction (ToolRegistry::detach)",
        ))
    }

    fn check(&self, cx: &ToolContext<'_>, args: &Value) -> Result<(), ToolError> {
        limits(args)?;
        let home = home(&self.home)?;
        let targets = Targets::new(cx.config, home);
        targets.agent_id()?;
        targets.resolve(args.get("target").and_then(Value::as_str))?;
        Ok(())
    }

    fn execution(&self) -> Execution<'_> {
        Execution::Detached(self)
    }
}

impl DetachedTool for ComputeExec {
    fn detach(&self, config: &Value, _caller: &ToolCaller, args: Value) -> Option<Detached> {
        let home = self.home.clone();
        let config = config.clone();
        Some(Box::pin(async move {
            let result = exec(home, &config, &args).await;
            DetachedOutcome {
                result,
                logs: Vec::new(),
                deliveries: Vec::new(),
            }
        }))
    }
}

async fn exec(home: Option<RuntimeHome>, config: &Value, args: &Value) -> Result<Value, ToolError> {
    let limits = limits(args)?;
    let command = args
        .get("command")
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::invalid("command is required"))?;
    let home = self::home(&home)?;
    let targets = Targets::new(config, home);
    let target = targets.resolve(args.get("target").and_then(Value::as_str))?;
    let output = run_in(&targets, &target, command, &limits).await?;
    Ok(output.to_value(target.name()))
}

/// Runs `command` in `target` for the agent of `targets`, installing its pip packages first
/// in a sandbox target.
pub async fn run_in(
    targets: &Targets<'_>,
    target: &Target,
    command: &str,
    limits: &Limits,
) -> Result<RunOutput, ComputeError> {
    match target {
        Target::Isolated | Target::Shared => {
            let sandbox = sandbox(targets, target)?;
            crate::pip::ensure(targets, &sandbox).await?;
            let line = sandbox.command_line(command, limits)?;
            run::run(&line, None, limits).await
        }
        Target::Host => {
            let dir = workspace_dir(targets, target)?;
            let line = run::host_command_line(command, limits)?;
            run::run(&line, Some(&dir), limits).await
        }
        Target::Container { container, .. } => {
            let line = run::podman_command_line(container, command)?;
            run::run(&line, None, limits).await
        }
    }
}

/// The sandbox layout of `isolated` (its own `/workspace/{agentId}`) or `shared` (one
/// `/workspace` for every agent that allows it).
pub(crate) fn sandbox(targets: &Targets<'_>, target: &Target) -> Result<Sandbox, ComputeError> {
    let id = targets.agent_id()?;
    let host_dir = workspace_dir(targets, target)?;
    let workdir = format!("/workspace/{id}");
    Ok(match target {
        Target::Shared => Sandbox {
            host_dir: targets.shared_root(),
            mount_at: "/workspace".into(),
            workdir,
            read_only: Vec::new(),
        },
        _ => Sandbox {
            host_dir,
            mount_at: workdir.clone(),
            workdir,
            read_only: Vec::new(),
        },
    })
}

/// The host directory of `target`'s workspace, created (and handed to the sandbox user) if
/// missing.
pub(crate) fn workspace_dir(
    targets: &Targets<'_>,
    target: &Target,
) -> Result<std::path::PathBuf, ComputeError> {
    let dir = targets.workspace(target)?.ok_or_else(|| {
        ComputeError::NotSupported(format!(
            "target '{}' has no workspace directory on this host",
            target.name()
        ))
    })?;
    if !dir.is_dir() {
        std::fs::create_dir_all(&dir)
            .map_err(|e| ComputeError::Io(format!("cannot create {}: {e}", dir.display())))?;
    }
    if matches!(target, Target::Isolated | Target::Shared) {
        hand_to_sandbox(&dir)?;
    }
    Ok(dir)
}

/// Makes `path` the sandbox user's when the runtime is root (the sandbox writes as that user).
pub(crate) fn hand_to_sandbox(path: &Path) -> Result<(), ComputeError> {
    if run::running_as_root() {
        std::os::unix::fs::lchown(path, Some(run::SANDBOX_UID), Some(run::SANDBOX_UID)).map_err(
            |e| {
                ComputeError::Io(format!(
                    "cannot hand {} to the sandbox: {e}",
                    path.display()
                ))
            },
        )?;
    }
    Ok(())
}
