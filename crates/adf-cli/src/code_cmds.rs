//! `adf run FILE LAMBDA` and `adf code FILE 'js'`: agent code from the command line, through
//! the same runner the runtime uses (`adf_runtime::code`), plus the deferred `sys_code` /
//! `sys_lambda` calls of `adf tool`.
//!
//! `adf run` runs a lambda the way a trigger does: authorized exactly when its file (and every
//! module it imports) is authorized. `adf code` is inline code: always unauthorized. The return
//! value goes to stdout (JSON), console output to stderr; `--json` prints one document
//! `{ok, result | error, logs}`.

use std::io::Read as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use adf_runtime::code::{self, Authorization, CodeEnv, CodeRun, LambdaRef, RunOptions};
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{Approver, DeferredCall, TaskRun, ToolCaller, ToolError, ToolRegistry};
use adf_store::AdfFile;
use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use crate::output::Output;

/// What `adf run` / `adf code` execute.
#[derive(Debug)]
pub(crate) enum Job {
    Lambda {
        source: String,
        args: Option<String>,
    },
    Inline {
        code: String,
        typescript: bool,
    },
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The environment of a command-line run: a fresh sandbox, the built-in tools, models from the
/// environment, and this installation's keys when it has any (never created here).
async fn env() -> Result<CodeEnv, ToolError> {
    let env = CodeEnv::with_registry(Arc::new(crate::tool_cmds::registry())).await?;
    let keys = adf_runtime::home::RuntimeHome::from_env()
        .ok()
        .and_then(|home| adf_runtime::identity::LocalKeys::existing(&home).ok())
        .filter(|keys| keys.runtime().is_some() || keys.owner().is_some());
    Ok(match keys {
        Some(keys) => env.with_keys(Arc::new(keys)),
        None => env,
    })
}

/// `adf run` and `adf code`.
pub(crate) fn run(path: &Path, job: Job, timeout_ms: Option<u64>, out: Output) -> Result<ExitCode> {
    let mut file = crate::session::open(path)?;
    crate::session::warn_not_run(&file);
    let options = RunOptions {
        timeout: timeout_ms.map(Duration::from_millis),
        ..RunOptions::default()
    };
    let run = match job {
        Job::Lambda { source, args } => {
            let input: Value = match args {
                Some(text) => serde_json::from_str(&text)
                    .with_context(|| format!("--args is not valid JSON: {text}"))?,
                None => json!({}),
            };
            let lambda = LambdaRef::parse(&source).map_err(|e| anyhow::anyhow!("{}", e.message))?;
            runtime()?.block_on(async {
                match env().await {
                    Ok(env) => {
                        code::run_lambda(
                            &mut file,
                            &env,
                            &lambda,
                            input,
                            Authorization::SourceFile,
                            &DenyAll,
                            &options,
                        )
                        .await
                    }
                    Err(e) => CodeRun::failed(e),
                }
            })
        }
        Job::Inline { code, typescript } => {
            let code = if code == "-" {
                let mut text = String::new();
                std::io::stdin()
                    .read_to_string(&mut text)
                    .context("cannot read the code from stdin")?;
                text
            } else {
                code
            };
            runtime()?.block_on(async {
                match env().await {
                    Ok(env) => {
                        code::run_inline(&mut file, &env, &code, typescript, &DenyAll, &options)
                            .await
                    }
                    Err(e) => CodeRun::failed(e),
                }
            })
        }
    };
    file.close()?;
    report(&run, out)
}

fn report(run: &CodeRun, out: Output) -> Result<ExitCode> {
    let logs: Vec<Value> = run
        .logs
        .iter()
        .map(|l| json!({ "level": l.level.as_str(), "message": l.message }))
        .collect();
    if out.json {
        let body = match &run.result {
            Ok(value) => json!({ "ok": true, "result": value, "logs": logs }),
            Err(error) => json!({
                "ok": false,
                "error": { "code": error.code, "message": error.message },
                "logs": logs,
            }),
        };
        println!("{}", serde_json::to_string_pretty(&body)?);
    } else {
        for line in run.log_lines() {
            eprintln!("{line}");
        }
        if run.logs_truncated {
            eprintln!("(console output truncated)");
        }
        match &run.result {
            Ok(Value::Null) => {}
            Ok(Value::String(text)) => println!("{text}"),
            Ok(value) => println!("{}", serde_json::to_string_pretty(value)?),
            Err(error) => eprintln!("error: {} ({})", error.message, error.code),
        }
    }
    Ok(if run.result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The runtime a tool call from the command line runs on, its failure as a tool error.
fn tool_runtime() -> Result<tokio::runtime::Runtime, ToolError> {
    runtime().map_err(|e| {
        ToolError::new(
            adf_runtime::tools::ErrorCode::InternalError,
            format!("{e:#}"),
        )
    })
}

/// Runs a queued (`_async`) task to its end: the command line has no background to leave it
/// to. Detached tools run on a runtime made for the call, code tools through the code runner.
pub(crate) fn run_queued(
    file: &mut AdfFile,
    registry: &ToolRegistry,
    caller: &ToolCaller,
    task_id: &str,
    approver: &(dyn Approver + Sync),
) -> Result<Value, ToolError> {
    match registry.start_task(file, task_id, caller)? {
        TaskRun::Done(result) => result,
        TaskRun::Detached(future) => {
            let runtime = tool_runtime()?;
            let outcome = runtime.block_on(future);
            outcome.record(file, caller.inner_loop());
            registry.finish_task(file, task_id, &outcome.result)?;
            outcome.result
        }
        TaskRun::Code(call) => drive_deferred(file, registry, caller, &call, approver),
    }
}

/// Carries out a call the pipeline deferred, blocking, through the runtime's one driver
/// (`code::drive_deferred`): code tools in the sandbox (the result is `{result, logs}`),
/// network tools (`sys_fetch`) on a runtime made for this one call.
pub(crate) fn drive_deferred(
    file: &mut AdfFile,
    registry: &ToolRegistry,
    caller: &ToolCaller,
    call: &DeferredCall,
    approver: &(dyn Approver + Sync),
) -> Result<Value, ToolError> {
    let runtime = tool_runtime()?;
    let options = RunOptions::default();
    let run = code::drive_deferred(file, registry, caller, call, env(), approver, &options);
    runtime.block_on(run).value
}
