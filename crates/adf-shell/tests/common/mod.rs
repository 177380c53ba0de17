//! Helpers shared by the shell's tests: a fresh agent file, files written through the tool
//! pipeline as the owner, and one command line run as the model through `adf_shell`.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use adf_runtime::code::{CodeEnv, RunOptions, Sandbox, SandboxConfig};
use adf_runtime::tools::approval::{ApproveAll, DenyAll};
use adf_runtime::tools::{Approver, CallOutcome, ErrorCode, ToolCaller, ToolError, ToolRegistry};
use adf_store::{AdfFile, CreateOptions};
use serde_json::{Value, json};

/// What a line printed and left behind.
#[derive(Debug)]
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
}

/// The registry a binary assembles: the built-ins plus `adf_shell`.
pub fn registry() -> ToolRegistry {
    let mut registry = ToolRegistry::with_builtins();
    registry.register(adf_shell::tool());
    registry
}

pub fn model() -> ToolCaller {
    ToolCaller::Model {
        loop_name: "main".into(),
    }
}

/// A fresh agent with `adf_shell` (and `fs_delete`, `db_execute`) enabled (kept alive by the guard).
pub fn agent() -> (tempfile::TempDir, AdfFile) {
    let dir = tempfile::tempdir().unwrap();
    let file = AdfFile::create(dir.path().join("agent.adf"), &CreateOptions::default()).unwrap();
    let mut file = file;
    for (tool, flag) in [
        ("adf_shell", "enabled"),
        ("adf_shell", "visible"),
        ("fs_delete", "enabled"),
        ("db_execute", "enabled"),
    ] {
        file.config_set_path(
            adf_store::Caller::Owner,
            &format!("tools.{tool}.{flag}"),
            adf_store::ConfigAction::Set,
            Value::Bool(true),
        )
        .unwrap();
    }
    (dir, file)
}

/// Writes a file as the owner.
pub fn put(file: &mut AdfFile, path: &str, content: &str) {
    registry()
        .call(
            file,
            &ToolCaller::Owner,
            "fs_write",
            json!({ "mode": "write", "path": path, "content": content }),
            &DenyAll,
        )
        .unwrap();
}

/// A file's text, or `None`.
pub fn text(file: &AdfFile, path: &str) -> Option<String> {
    file.file_read(path)
        .unwrap()
        .map(|e| String::from_utf8_lossy(&e.content).into_owned())
}

/// Calls `adf_shell` the way the executor does: the pipeline, then the runtime's driver.
pub fn shell_call(
    file: &mut AdfFile,
    caller: &ToolCaller,
    command: &str,
    approver: &(dyn Approver + Sync),
) -> Result<Value, ToolError> {
    shell_call_with(
        &Arc::new(registry()),
        file,
        caller,
        json!({ "command": command }),
        approver,
    )
}

/// [`shell_call`] with this registry and these `adf_shell` arguments, on a runtime of its own
/// (the sandbox opens only when the line runs code).
pub fn shell_call_with(
    registry: &Arc<ToolRegistry>,
    file: &mut AdfFile,
    caller: &ToolCaller,
    args: Value,
    approver: &(dyn Approver + Sync),
) -> Result<Value, ToolError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(shell_call_async(registry, file, caller, args, approver))
}

/// [`shell_call_with`] inside a runtime the test already runs.
pub async fn shell_call_async(
    registry: &Arc<ToolRegistry>,
    file: &mut AdfFile,
    caller: &ToolCaller,
    args: Value,
    approver: &(dyn Approver + Sync),
) -> Result<Value, ToolError> {
    match registry.call(file, caller, "adf_shell", args, approver)? {
        CallOutcome::Deferred(call) => {
            let env = {
                let registry = Arc::clone(registry);
                async move {
                    let sandbox = Sandbox::new(SandboxConfig::default())
                        .await
                        .map_err(|e| ToolError::new(ErrorCode::InternalError, e.to_string()))?;
                    Ok::<_, ToolError>(CodeEnv::new(sandbox, registry))
                }
            };
            adf_runtime::code::drive_deferred(
                file,
                registry,
                caller,
                &call,
                env,
                approver,
                &RunOptions::default(),
            )
            .await
            .value
        }
        other => Ok(other.into_value()),
    }
}

pub fn to_run(value: &Value) -> Run {
    Run {
        stdout: value["stdout"].as_str().unwrap().to_owned(),
        stderr: value["stderr"].as_str().unwrap().to_owned(),
        exit_code: i32::try_from(value["exit_code"].as_i64().unwrap()).unwrap(),
    }
}

/// Runs one line as the model on a fresh agent holding `files`.
pub fn run_line(files: &[(&str, &str)], line: &str) -> Run {
    run_line_with(files, line).0
}

/// Like [`run_line`], also returning the agent's files afterwards (path → text).
pub fn run_line_with(files: &[(&str, &str)], line: &str) -> (Run, BTreeMap<String, String>) {
    let (_dir, mut file) = agent();
    for (path, content) in files {
        put(&mut file, path, content);
    }
    let value = shell_call(&mut file, &model(), line, &ApproveAll).unwrap();
    let after = file
        .file_list("")
        .unwrap()
        .into_iter()
        .filter_map(|info| text(&file, &info.path).map(|t| (info.path, t)))
        .collect();
    (to_run(&value), after)
}
