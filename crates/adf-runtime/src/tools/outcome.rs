//! What a tool call ends with, and the owned records a call hands back to whoever holds the
//! file afterwards: [`CallOutcome`] and [`DeferredCall`] (the pipeline's answer), [`TaskRun`]
//! (how a queued task is carried out), [`Detached`] / [`DetachedOutcome`] (network work run
//! outside any transaction) with its [`LogRow`]s and [`DeliveryRecord`]s. A leaf: it names
//! no tool and no registry, so every layer above may use it.

use adf_store::AdfFile;
use serde_json::{Value, json};

use super::error::ToolError;

/// The future of a [`HostedTool::run_hosted`](super::HostedTool::run_hosted) body, and of a [`DeferredDriver`](super::DeferredDriver) call.
pub type HostedFuture<'a> = futures::future::BoxFuture<'a, Result<Value, ToolError>>;

/// How a `running` task is carried out (see [`ToolRegistry::start_task`](super::ToolRegistry::start_task)).
pub enum TaskRun {
    /// A synchronous tool ran; its outcome is recorded on the task.
    Done(Result<Value, ToolError>),
    /// A detached tool: await it, write its logs, then [`ToolRegistry::finish_task`](super::ToolRegistry::finish_task).
    Detached(Detached),
    /// A code tool (`sys_code`, `sys_lambda`): the caller's code runner carries it out; the
    /// call names the task as its `approval_task`, where `finish_deferred` records the outcome.
    Code(DeferredCall),
}

impl std::fmt::Debug for TaskRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskRun::Done(result) => f.debug_tuple("Done").field(result).finish(),
            TaskRun::Detached(_) => f.write_str("Detached(..)"),
            TaskRun::Code(call) => f.debug_tuple("Code").field(call).finish(),
        }
    }
}

/// The future of a detached deferred call (see [`DetachedTool::detach`](super::DetachedTool::detach)).
pub type Detached = futures::future::BoxFuture<'static, DetachedOutcome>;

/// What a detached call ends with: its result, and the `adf_logs` rows its caller writes once
/// it holds the file again (the future runs outside any transaction and never touches the
/// file; `sys_fetch` records its refusals, errors and timeouts this way).
#[derive(Debug, Clone, PartialEq)]
pub struct DetachedOutcome {
    /// What the call returns to its caller.
    pub result: Result<Value, ToolError>,
    /// Log rows to append once the file is held again.
    pub logs: Vec<LogRow>,
    /// How the deliveries of `msg_send` ended, for their outbox rows.
    pub deliveries: Vec<DeliveryRecord>,
}

impl From<Result<Value, ToolError>> for DetachedOutcome {
    fn from(result: Result<Value, ToolError>) -> Self {
        DetachedOutcome {
            result,
            logs: Vec::new(),
            deliveries: Vec::new(),
        }
    }
}

impl DetachedOutcome {
    /// Writes what the detached part reports (log rows, delivery statuses) once the caller
    /// holds the file again. `in_loop` is the inner loop that made the call (`None` for main,
    /// the owner and code outside a loop): its log rows carry that name (§6.4). Each is a
    /// record, not the outcome: a failure to write one is reported in the process log and the
    /// rest carry on.
    pub fn record(&self, file: &mut AdfFile, in_loop: Option<&str>) {
        write_logs(file, &self.logs, in_loop);
        for delivery in &self.deliveries {
            if let Err(error) = delivery.write(file) {
                tracing::warn!(outbox = %delivery.outbox_id, %error, "cannot record a delivery");
            }
        }
    }
}

/// How one outbox row's delivery ended (§11.2): written by whoever holds the file afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// The `adf_outbox` row the delivery was for.
    pub outbox_id: String,
    /// The recipient accepted the message; otherwise the row is marked `failed`.
    pub delivered: bool,
    /// The HTTP status the recipient answered with, if it answered.
    pub status_code: Option<u16>,
}

impl DeliveryRecord {
    /// Sets the outbox row's status (`delivered` with a timestamp, or `failed`) and status code.
    pub fn write(&self, file: &mut AdfFile) -> Result<(), adf_store::StoreError> {
        let (status, delivered_at) = if self.delivered {
            ("delivered", Some(adf_store::time::now_ms()))
        } else {
            ("failed", None)
        };
        file.outbox_set_delivery(
            &self.outbox_id,
            status,
            self.status_code.map(i64::from),
            delivered_at,
        )
    }
}

/// An owned `adf_logs` row (§3.3), written later by whoever holds the file.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRow {
    /// `debug`, `info`, `warn` or `error`.
    pub level: &'static str,
    /// The subsystem that logged, e.g. `sys_fetch`.
    pub origin: &'static str,
    /// A short machine-readable event name.
    pub event: &'static str,
    /// What the event concerns, e.g. a URL or tool name.
    pub target: Option<String>,
    /// The human-readable log line.
    pub message: String,
    /// Structured detail, stored as JSON text.
    pub data: Option<Value>,
}

impl LogRow {
    /// Appends the row (its own transaction), stamped with the inner loop that made the call
    /// (`None` for main: NULL reads as main, §6.4). A log row is a record, never the outcome:
    /// a caller reports a failure to write it and carries on.
    pub fn write(
        &self,
        file: &mut AdfFile,
        in_loop: Option<&str>,
    ) -> Result<(), adf_store::StoreError> {
        file.log(&adf_store::NewLog {
            level: self.level,
            origin: Some(self.origin),
            event: Some(self.event),
            target: self.target.as_deref(),
            message: &self.message,
            data: self.data.as_ref(),
            r#loop: in_loop,
        })
        .map(|_| ())
    }
}

/// Writes the log rows of a detached call made in `in_loop` (see [`LogRow::write`]),
/// reporting (not failing on) a row it cannot write.
pub fn write_logs(file: &mut AdfFile, logs: &[LogRow], in_loop: Option<&str>) {
    for row in logs {
        if let Err(error) = row.write(file, in_loop) {
            tracing::warn!(origin = row.origin, event = row.event, %error, "cannot write a log row");
        }
    }
}

/// The result of a call that did not fail.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// The tool ran; its result.
    Done(Value),
    /// `_async`: the call became a task that runs in the background (status `running`) or
    /// waits for approval (`pending_approval`).
    Queued {
        /// The `adf_tasks` id the caller polls or waits on.
        task_id: String,
        /// The task's status when it was created.
        status: String,
    },
    /// A deferred call ([`Execution::is_deferred`](super::Execution::is_deferred)) that passed access and approval; the caller runs it and
    /// reports the outcome with [`ToolRegistry::finish_deferred`](super::ToolRegistry::finish_deferred).
    Deferred(DeferredCall),
}

/// A validated call the pipeline's caller must carry out itself.
#[derive(Debug, Clone, PartialEq)]
pub struct DeferredCall {
    /// The tool to run.
    pub tool: String,
    /// The arguments without the cross-cutting parameters.
    pub args: Value,
    /// `_full` as the pipeline honoured it.
    pub full: bool,
    /// The approval task of a restricted call, completed by `finish_deferred`.
    pub approval_task: Option<String>,
}

impl CallOutcome {
    /// The value a caller sees: the result, or the task reference of a queued call.
    pub fn into_value(self) -> Value {
        match self {
            Self::Done(value) => value,
            Self::Queued { task_id, status } => json!({ "task_id": task_id, "status": status }),
            Self::Deferred(call) => json!({ "deferred": call.tool, "args": call.args }),
        }
    }
}

/// A result as text: strings as they are, anything else as JSON.
pub fn render(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}
