//! Human in the loop: approval requests for restricted calls and protection overrides, and
//! how the owner or authorized code resolves tasks (`task_resolve`, missing-tables §13.4).

use std::time::Duration;

use adf_store::AdfFile;
use adf_store::tasks::NewTask;
use serde::Serialize;
use serde_json::Value;

pub use super::pipeline::resolve_task;
use super::{ToolCaller, ToolError};

/// An approval the owner is asked for; the task row holds the same facts.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalRequest {
    /// The `adf_tasks` row (status `pending_approval`) that records the request.
    pub task_id: String,
    /// The tool waiting to run.
    pub tool: String,
    /// The arguments, with the model's `_reason` when it gave one.
    pub args: Value,
    /// `{reason: "restricted" | "protection", protection?: {kind, target, level, description}}`.
    pub approval_meta: Value,
}

/// The owner's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The call may run.
    Approved,
    /// The call is refused, for this reason.
    Denied(String),
}

/// Something that obtains the owner's decision on a pending approval and blocks until it has
/// one: a terminal prompt, a UI, or a wait for another process to resolve the task.
pub trait Approver {
    /// The owner's decision on `request`; an error when the task cannot be read or vanished.
    fn decide(&self, file: &mut AdfFile, request: &ApprovalRequest) -> Result<Decision, ToolError>;
}

/// A wait for the owner (a decision, an `ask` answer) that needs neither the file nor a
/// thread of its own: the executor awaits it with a leased file given back to its worker
/// (`TurnHost::await_approval`, `TurnHost::ask`).
pub type OwnerWait<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Approves everything (`--approve-all`, scripted tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproveAll;

impl Approver for ApproveAll {
    fn decide(&self, _: &mut AdfFile, _: &ApprovalRequest) -> Result<Decision, ToolError> {
        Ok(Decision::Approved)
    }
}

/// Denies everything (`--deny-all`, and callers that cannot ask anyone).
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

impl Approver for DenyAll {
    fn decide(&self, _: &mut AdfFile, _: &ApprovalRequest) -> Result<Decision, ToolError> {
        Ok(Decision::Denied("no one is available to approve".into()))
    }
}

/// Waits for the task to be resolved by someone else (`adf approve` / `adf deny` from another
/// shell, the daemon API, authorized code), re-reading the task row between waits. SQLite in
/// WAL mode lets the other process write while this one reads.
#[derive(Debug, Clone, Copy)]
pub struct WaitForResolution {
    /// How long to wait between reads of the task row.
    pub poll: Duration,
}

impl Approver for WaitForResolution {
    fn decide(&self, file: &mut AdfFile, request: &ApprovalRequest) -> Result<Decision, ToolError> {
        loop {
            let task = file.task(&request.task_id)?.ok_or_else(|| {
                ToolError::not_found(format!("task {} disappeared", request.task_id))
            })?;
            match task.status.as_str() {
                "pending" | "pending_approval" => std::thread::sleep(self.poll),
                "running" | "completed" => return Ok(Decision::Approved),
                _ => {
                    return Ok(Decision::Denied(
                        task.error.unwrap_or_else(|| "Denied".into()),
                    ));
                }
            }
        }
    }
}

/// Creates the `pending_approval` task for a blocking call, asks `approver`, and leaves the
/// task `running` (approved) or `denied`. Returns the decision and the task id, so the caller
/// can record the call's outcome on the task. Code runners use it for a model's `sys_lambda`
/// on an authorized file; the pipeline does the same in two halves ([`open`], then
/// [`settle`] once its caller has the decision), so a turn can await the owner without the
/// file.
pub fn request(
    file: &mut AdfFile,
    approver: &dyn Approver,
    caller: &ToolCaller,
    tool: &str,
    args: &Value,
    approval_meta: &Value,
) -> Result<(Decision, String), ToolError> {
    let request = open(file, caller, tool, args, approval_meta)?;
    let decision = approver.decide(file, &request)?;
    settle(file, &request.task_id, &decision)?;
    Ok((decision, request.task_id))
}

/// Creates the `pending_approval` task that asks the owner about `tool` with `args`.
pub fn open(
    file: &mut AdfFile,
    caller: &ToolCaller,
    tool: &str,
    args: &Value,
    approval_meta: &Value,
) -> Result<ApprovalRequest, ToolError> {
    let config = file.config()?;
    let origin = format!(
        "hil:{}:{}",
        config
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        config.get("id").and_then(Value::as_str).unwrap_or_default()
    );
    let task_id = file.task_create(&NewTask {
        tool,
        args,
        status: "pending_approval",
        origin: Some(&origin),
        requires_authorization: true,
        executor_managed: true,
        approval_meta: Some(approval_meta),
        r#loop: caller.loop_name(),
    })?;
    Ok(ApprovalRequest {
        task_id,
        tool: tool.to_owned(),
        args: args.clone(),
        approval_meta: approval_meta.clone(),
    })
}

/// Records `decision` on the task of an approval: `running` (approved) or `denied` with the
/// reason, unless whoever decided already moved the row on (`task_resolve`, another process).
pub fn settle(file: &mut AdfFile, task_id: &str, decision: &Decision) -> Result<(), ToolError> {
    let current = file.task(task_id)?.map(|t| t.status).unwrap_or_default();
    if current == "pending_approval" || current == "pending" {
        match decision {
            Decision::Approved => file.task_update(task_id, "running", None, None)?,
            Decision::Denied(reason) => file.task_update(task_id, "denied", None, Some(reason))?,
        }
    }
    Ok(())
}

/// The arguments an approved task now holds when the approver changed them from `asked`
/// (the `modified_args` of an approval), without the model's `_reason`; `None` when they are
/// unchanged.
pub fn approved_args(
    file: &AdfFile,
    task_id: &str,
    asked: &Value,
) -> Result<Option<Value>, ToolError> {
    let Some(task) = file.task(task_id)? else {
        return Ok(None);
    };
    if task.args == *asked {
        return Ok(None);
    }
    let mut args = task.args;
    if let Some(object) = args.as_object_mut() {
        object.remove("_reason");
    }
    Ok(Some(args))
}

/// How a task is resolved (`task_resolve` actions).
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// Let the call run.
    Approve {
        /// Arguments that replace the requested ones, if the approver changed them.
        modified_args: Option<Value>,
    },
    /// Refuse the call.
    Deny {
        /// Why, for the caller to read.
        reason: Option<String>,
    },
    /// Send the task (back) to the owner: status `pending_approval`.
    Escalate,
}
