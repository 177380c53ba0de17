//! The system-scope lambda host: [`run_system_lambda`] runs one lambda on the agent's store
//! worker (`code::run_lambda` with `Authorization::SourceFile`: the lambda file's `authorized`
//! flag decides; while it waits off the file it serves the worker's queued jobs,
//! `code::FileQueue`) for every caller — trigger deliveries (`dispatch`), timer fires
//! (`scheduler`) and umbilical taps (`taps`) — and reports what it did ([`LambdaReport`]):
//! timing, error, files written, `custom.*` events, and its `adf.*` calls as `on_tool_call` /
//! `on_llm_call` events.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use adf_runtime::code::{
    self, Authorization, CodeEnv, FileQueue, LambdaRef, RunOptions, Sandbox, SandboxConfig,
};
use adf_runtime::tools::ToolRegistry;
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::triggers::{Producer, TriggerEvent, TriggerKind};
use adf_store::AdfFile;

use crate::support::{TURN_EVENT_LIMIT, current_thread, log_from};

#[derive(Debug, Clone)]
pub(crate) struct LambdaReport {
    pub(crate) lambda: LambdaRef,
    pub(crate) started_at: i64,
    pub(crate) duration_ms: f64,
    pub(crate) error: Option<String>,
    /// Files the run created, changed or deleted, for `on_file_change`.
    pub(crate) written: crate::support::FileChanges,
    /// The run's `adf.emit_event` events, published with `lambda.started`/`completed`.
    pub(crate) custom: Vec<crate::custom_events::CustomEvent>,
    /// `on_tool_call` / `on_llm_call` events of the run's `adf.*` calls, produced by the
    /// lambda (so it never receives its own); the caller dispatches them with the run's other
    /// new-row events.
    pub(crate) call_events: Vec<TriggerEvent>,
}

/// Runs a system-scope lambda with `input` on the worker thread; the authorization is the
/// lambda file's `authorized` flag. A failure is a `warn` log row, never a crash.
pub(crate) fn run_system_lambda(
    file: &mut AdfFile,
    registry: Arc<ToolRegistry>,
    lambda: LambdaRef,
    input: Value,
    warm: bool,
) -> LambdaReport {
    let started_at = adf_store::time::now_ms();
    let clock = Instant::now();
    let custom = Arc::new(crate::custom_events::CustomEvents::default());
    let sink: Arc<dyn adf_runtime::code::EventSink> = custom.clone();
    let mut calls = Vec::new();
    let (error, written) =
        crate::support::with_written_files(file, |file| match current_thread() {
            None => Some("cannot start a runtime for agent code".to_owned()),
            Some(runtime) => runtime.block_on(async {
                let sandbox = match Sandbox::new(SandboxConfig::default()).await {
                    Ok(sandbox) => sandbox,
                    Err(error) => return Some(error.to_string()),
                };
                let mut env = CodeEnv::new(sandbox, registry).with_event_sink(sink);
                // A job of the agent's worker: while the lambda waits off the file (a slow
                // fetch, a hung model), it runs the agent's jobs queued behind it.
                if let Some(queue) = FileQueue::of_this_worker() {
                    env = env.serving(queue);
                }
                // The defaults: no shorter time limit, `loop_inject` straight into main.
                let options = RunOptions {
                    warm,
                    ..RunOptions::default()
                };
                let run = code::run_lambda(
                    file,
                    &env,
                    &lambda,
                    input,
                    Authorization::SourceFile,
                    &DenyAll,
                    &options,
                )
                .await;
                calls = run.calls;
                run.result
                    .err()
                    .map(|e| format!("{}: {}", e.code, e.message))
            }),
        });
    if let Some(message) = &error {
        let data = json!({ "lambda": lambda.source() });
        // Origin `timer`, whatever ran it: the row predates the other lambda hosts.
        log_from(file, "timer", "warn", "lambda_error", message, Some(&data));
    }
    let call_events = call_events(&lambda.source(), calls);
    LambdaReport {
        lambda,
        started_at,
        duration_ms: clock.elapsed().as_secs_f64() * 1000.0,
        error,
        written,
        custom: custom.take(),
        call_events,
    }
}

/// The lambda's `adf.*` calls as `on_tool_call` (TRG-17) and `on_llm_call` (TRG-01, source
/// `model_invoke`) events, at most [`TURN_EVENT_LIMIT`].
fn call_events(source: &str, calls: Vec<adf_runtime::code::CallRecord>) -> Vec<TriggerEvent> {
    use adf_runtime::code::CallRecord;
    let producer = Producer::Lambda {
        source: source.to_owned(),
    };
    let now = adf_store::time::now_ms();
    calls
        .into_iter()
        .take(TURN_EVENT_LIMIT)
        .map(|call| {
            let (kind, data) = match call {
                CallRecord::Tool { tool, status } => (
                    TriggerKind::OnToolCall,
                    json!({ "tool": tool, "status": status, "lambda": source }),
                ),
                CallRecord::Model {
                    provider,
                    model,
                    input_tokens,
                    output_tokens,
                    ok,
                } => (
                    TriggerKind::OnLlmCall,
                    json!({
                        "source": "model_invoke",
                        "provider": provider,
                        "model": model,
                        "input_tokens": input_tokens,
                        "output_tokens": output_tokens,
                        "ok": ok,
                        "lambda": source,
                    }),
                ),
            };
            TriggerEvent::new(kind, now, data).produced_by(producer.clone())
        })
        .collect()
}
