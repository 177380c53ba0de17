//! Command trigger targets and `.sh` timer lambdas: the line runs through the `adf_shell`
//! tool (registered by the hub), as the agent's unauthorized code, with the event as
//! variables. Its outcome is one `adf_logs` row (origin `shell`). The line runs on the store
//! worker through the runtime's one deferred-call driver (`code::drive_deferred_serving`), so
//! `curl` and `node` inside it reach `sys_fetch` and the sandbox as they do in a model turn,
//! and while the line waits (a `sleep`, a `curl` in flight) the worker's queued jobs run with
//! the file between two of its commands (the caller's `FileQueue`).

use std::sync::Arc;

use adf_runtime::code::{self, CodeEnv, FileQueue, RunOptions, Sandbox, SandboxConfig};
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{CallOutcome, ToolCaller, ToolError, ToolRegistry};
use adf_store::AdfFile;
use serde_json::{Value, json};

/// Most bytes of stdout / stderr kept in the log row.
const LOGGED_OUTPUT: usize = 2_000;

/// Runs `command` for `source` (`trigger:on_inbox`, `timer:3`) with `event` exported as
/// `EVENT` (JSON) and `EVENT_TYPE`; returns the `{stdout, stderr, exit_code}` value or
/// why the shell could not run (logged either way). `queue`: the worker's jobs the line
/// serves while it waits.
pub(crate) fn run(
    file: &mut AdfFile,
    registry: &Arc<ToolRegistry>,
    source: &str,
    command: &str,
    event: &Value,
    queue: Option<FileQueue>,
) -> Result<Value, ToolError> {
    let caller = ToolCaller::Code {
        authorized: false,
        source: Some(source.to_owned()),
    };
    let env = json!({
        "EVENT": event.to_string(),
        "EVENT_TYPE": event.get("type").and_then(Value::as_str).unwrap_or(""),
    });
    let args = json!({ "command": command, "env": env });
    // No one is at hand to approve: restricted commands inside the line are refused.
    let result = match registry.call(file, &caller, "adf_shell", args, &DenyAll) {
        Ok(CallOutcome::Deferred(call)) => match crate::support::current_thread() {
            None => Err(ToolError::new(
                adf_runtime::tools::ErrorCode::InternalError,
                "cannot start a runtime for the shell",
            )),
            Some(runtime) => {
                // The sandbox opens only if the line runs code (`node`, `./x.ts`).
                let code_queue = queue.clone();
                let env = async {
                    let sandbox = Sandbox::new(SandboxConfig::default()).await.map_err(|e| {
                        ToolError::new(adf_runtime::tools::ErrorCode::InternalError, e.to_string())
                    })?;
                    let env = CodeEnv::new(sandbox, Arc::clone(registry));
                    Ok(match code_queue {
                        Some(queue) => env.serving(queue),
                        None => env,
                    })
                };
                let options = RunOptions::default();
                runtime
                    .block_on(code::drive_deferred_serving(
                        file,
                        registry,
                        &caller,
                        &call,
                        env,
                        &DenyAll,
                        &options,
                        queue.as_ref(),
                    ))
                    .value
            }
        },
        Ok(other) => Ok(other.into_value()),
        Err(error) => Err(error),
    };
    let cut = |v: &Value, key: &str| -> String {
        let text = v.get(key).and_then(Value::as_str).unwrap_or("");
        let mut end = text.len().min(LOGGED_OUTPUT);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text[..end].to_owned()
    };
    let (level, event_name, message, data) = match &result {
        Ok(value) => {
            let exit = value.get("exit_code").and_then(Value::as_i64).unwrap_or(-1);
            (
                if exit == 0 { "info" } else { "warn" },
                "shell_completed",
                format!("{source}: `{command}` exited {exit}"),
                json!({ "command": command, "exit_code": exit, "stdout": cut(value, "stdout"), "stderr": cut(value, "stderr") }),
            )
        }
        Err(error) => (
            "error",
            "shell_failed",
            format!("{source}: `{command}` did not run: {}", error.message),
            json!({ "command": command, "code": error.code }),
        ),
    };
    crate::support::log_from(file, "shell", level, event_name, &message, Some(&data));
    result
}
