//! Command trigger targets and `.sh` timer lambdas: the line runs through the `adf_shell`
//! tool (registered by the hub), as the agent's unauthorized code, with the event as
//! variables. Its outcome is one `adf_logs` row (origin `shell`). The line runs on the store
//! worker through the runtime's one deferred-call driver (`code::drive_deferred`), so `curl`
//! and `node` inside it reach `sys_fetch` and the sandbox as they do in a model turn.

use std::sync::Arc;

use adf_runtime::code::{self, CodeEnv, RunOptions, Sandbox, SandboxConfig};
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{CallOutcome, ToolCaller, ToolError, ToolRegistry};
use adf_store::AdfFile;
use serde_json::{Value, json};

/// Most bytes of stdout / stderr kept in the log row.
const LOGGED_OUTPUT: usize = 2_000;

/// Runs `command` for `source` (`trigger:on_inbox`, `timer:3`) with `event` exported as
/// `EVENT` (JSON) and `EVENT_TYPE`; returns the `{stdout, stderr, exit_code}` value or
/// why the shell could not run (logged either way).
pub(crate) fn run(
    file: &mut AdfFile,
    registry: &Arc<ToolRegistry>,
    source: &str,
    command: &str,
    event: &Value,
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
                let env = async {
                    let sandbox = Sandbox::new(SandboxConfig::default()).await.map_err(|e| {
                        ToolError::new(adf_runtime::tools::ErrorCode::InternalError, e.to_string())
                    })?;
                    Ok(CodeEnv::new(sandbox, Arc::clone(registry)))
                };
                let options = RunOptions::default();
                runtime
                    .block_on(code::drive_deferred(
                        file, registry, &caller, &call, env, &DenyAll, &options,
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
