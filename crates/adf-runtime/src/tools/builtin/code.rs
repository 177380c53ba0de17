//! The code tools: `sys_code` (inline JavaScript/TypeScript in the agent's persistent context)
//! and `sys_lambda` (an exported function of an agent file), tools guide "sys_code",
//! "sys_lambda", missing-tables §9.
//!
//! Both are [`Execution::CodeRunner`] tools: the pipeline decides declaration, access and (for restricted
//! declarations) approval like for any tool, then hands the validated call back as
//! `CallOutcome::Deferred`, because running code needs the async sandbox and a loop that
//! services the code's own `adf.*` calls on the same file. The caller of the pipeline runs
//! them with [`crate::code::run_deferred`], which also applies the §8.6 rules (a model's
//! `sys_lambda` on an authorized file asks the owner first).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::tools::{ErrorCode, Execution, Tool, ToolContext, ToolError};

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(SysCode), Arc::new(SysLambda)]
}

fn not_here(name: &str) -> ToolError {
    ToolError::new(
        ErrorCode::InternalError,
        format!(
            "{name} runs in a code runner (adf_runtime::code::run_deferred), not inside the tool pipeline"
        ),
    )
}

struct SysCode;

impl Tool for SysCode {
    declare_tool! {
        name: "sys_code",
        description: "Run JavaScript or TypeScript in the agent's sandbox (globals persist between calls). The adf object calls tools (await adf.fs_read({path})); return a value and it is the result; console output is returned too.",
        parameters: json!({
            "type": "object",
            "properties": {
                "code": { "type": "string", "minLength": 1, "description": "The code: the body of an async function (top-level await and return work)." },
                "language": { "type": "string", "enum": ["javascript", "js", "typescript", "ts"], "description": "Language (default javascript)." },
                "timeout": { "type": "number", "minimum": 1, "description": "Time limit in ms; at most limits.execution_timeout_ms." }
            },
            "required": ["code"],
            "additionalProperties": false
        }),
    }

    fn run(&self, _cx: &mut ToolContext<'_>, _args: Value) -> Result<Value, ToolError> {
        Err(not_here("sys_code"))
    }

    fn execution(&self) -> Execution<'_> {
        Execution::CodeRunner
    }
}

struct SysLambda;

impl Tool for SysLambda {
    declare_tool! {
        name: "sys_lambda",
        description: "Call an exported function of an agent file: source 'path/file.ts:functionName' (function defaults to main), args passed as its single argument.",
        parameters: json!({
            "type": "object",
            "properties": {
                "source": { "type": "string", "minLength": 1, "description": "\"lib/file.ts:functionName\"; the function defaults to main." },
                "args": { "type": "object", "description": "The function's single argument." }
            },
            "required": ["source"],
            "additionalProperties": false
        }),
    }

    fn run(&self, _cx: &mut ToolContext<'_>, _args: Value) -> Result<Value, ToolError> {
        Err(not_here("sys_lambda"))
    }

    fn execution(&self) -> Execution<'_> {
        Execution::CodeRunner
    }
}
