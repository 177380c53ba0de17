//! The one place tool calls are decided and run: [`ToolRegistry::call`] and the task and
//! deferred-call entry points, as `impl ToolRegistry` over the lookups of tool.rs.
//!
//! The pipeline of one call: look the tool up → read the effective declaration → strip the
//! cross-cutting parameters (`_reason`, `_async`, `_full`) → validate the arguments → decide
//! access (allowed / needs approval / refused) → for a call that needs approval, the tool's
//! read-only [`Tool::check`] and then the owner's decision → run inside one store transaction.
//! A model call refused by a protection the owner may lift becomes a one-time approval request.
//!
//! The owner's decision is taken outside the pipeline: [`ToolRegistry::call_step`] stops at
//! an approval with the task row created and no transaction open ([`CallStep::NeedsApproval`]),
//! and [`ToolRegistry::resume`] goes on with the decision. So a caller may await the owner
//! with the file given back to its worker (the executor); [`ToolRegistry::call`] asks a
//! synchronous [`Approver`] in between, holding the file (the CLI, code runs).

use std::sync::Arc;

use adf_store::AdfFile;
use adf_store::tasks::NewTask;
use serde_json::{Map, Value, json};

use super::access::{self, Access, ToolCaller};
use super::approval::{self, ApprovalRequest, Approver, Decision, Resolution};
use super::error::{ErrorCode, ToolError};
use super::outcome::{CallOutcome, DeferredCall, Detached, DetachedOutcome, TaskRun, render};
use super::tool::{DeferredDriver, Execution, HostedContext, Tool, ToolContext, ToolRegistry};
use super::validate;

/// Tools code may not call: the turn tools talk to the owner, and compaction rewrites the
/// transcript the model is reading (adf-object guide "Loop Management").
const EXCLUDED_FROM_CODE: [&str; 4] = ["say", "ask", "loop_compact", "loop_clear"];

/// Tools that need a runtime hosting agents (the daemon registers them with its mesh).
pub const MESH_TOOLS: [&str; 1] = ["agent_discover"];

/// The error for a call of a tool this registry does not hold. Mesh tools answer with the
/// guide's `MESH_NOT_ENABLED`, so code written for a runtime with the mesh fails the way the
/// guide documents rather than as an unknown name.
fn missing_tool(name: &str) -> ToolError {
    if MESH_TOOLS.contains(&name) {
        return ToolError::new(
            ErrorCode::MeshNotEnabled,
            format!(
                "{name} needs the mesh of a runtime that hosts agents: run the agent in `adf daemon` (msg_send with a DID and an inbox address works anywhere)"
            ),
        );
    }
    ToolError::not_found(format!("unknown tool '{name}'"))
}

/// Where a call stands after [`ToolRegistry::call_step`] or [`ToolRegistry::resume`].
#[derive(Debug)]
pub enum CallStep {
    /// The call is over: the same outcome [`ToolRegistry::call`] returns.
    Done(CallOutcome),
    /// The call waits for the owner's decision; its `pending_approval` task exists and no
    /// transaction is open. Hand the decision to [`ToolRegistry::resume`].
    NeedsApproval(Box<PendingCall>),
}

/// A call waiting for the owner: what to ask ([`PendingCall::request`]) and what to run once
/// the owner answered. It holds no borrow of the file, so its caller may give the file back
/// while the owner thinks and take it again to resume.
pub struct PendingCall {
    /// What the owner is asked; its task row records the same.
    pub request: ApprovalRequest,
    tool: Arc<dyn Tool>,
    caller: ToolCaller,
    name: String,
    config: Arc<Value>,
    args: Value,
    cross: CrossCutting,
    stage: Stage,
}

impl std::fmt::Debug for PendingCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingCall")
            .field("request", &self.request)
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}

/// Which approval a [`PendingCall`] waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// A restricted tool: the call has not run yet.
    Restricted,
    /// A protection blocked the call (its writes rolled back): the owner may lift it once.
    ProtectionOverride,
}

impl PendingCall {
    fn invocation(&self) -> Invocation<'_> {
        Invocation {
            tool: &self.tool,
            caller: &self.caller,
            name: &self.name,
            config: &self.config,
            args: &self.args,
            cross: &self.cross,
        }
    }
}

impl ToolRegistry {
    /// Calls `name` with `args` for `caller`: the whole pipeline (see the module docs).
    /// Approvals are asked of `approver` and waited for, holding the file.
    pub fn call(
        &self,
        file: &mut AdfFile,
        caller: &ToolCaller,
        name: &str,
        args: Value,
        approver: &dyn Approver,
    ) -> Result<CallOutcome, ToolError> {
        let mut step = self.call_step(file, caller, name, args)?;
        loop {
            match step {
                CallStep::Done(outcome) => return Ok(outcome),
                CallStep::NeedsApproval(pending) => {
                    let decision = approver.decide(file, &pending.request)?;
                    step = self.resume(file, *pending, decision)?;
                }
            }
        }
    }

    /// [`ToolRegistry::call`] up to the first approval it needs: the approval task is
    /// created and the call handed back ([`CallStep::NeedsApproval`]) before its
    /// transaction, so the caller can wait for the owner without holding the file (the
    /// executor does) and then [`ToolRegistry::resume`] it.
    pub fn call_step(
        &self,
        file: &mut AdfFile,
        caller: &ToolCaller,
        name: &str,
        args: Value,
    ) -> Result<CallStep, ToolError> {
        let config = file.config_shared()?;
        let tool = self
            .resolve(&config, name)
            .ok_or_else(|| missing_tool(name))?;
        if matches!(caller, ToolCaller::Code { .. }) && EXCLUDED_FROM_CODE.contains(&name) {
            return Err(ToolError::new(
                ErrorCode::ExcludedTool,
                format!("'{name}' is only for the model's own turns; code cannot call it"),
            ));
        }
        let (declarations, duplicates) = access::declarations(&config);
        if !duplicates.is_empty() {
            tracing::warn!(tools = ?duplicates, "duplicate_tool_declaration: the first declaration wins");
        }
        let declaration = declarations.iter().find(|d| d.name == name);

        let Value::Object(mut args) = args else {
            return Err(ToolError::invalid("tool arguments must be a JSON object"));
        };
        let cross = CrossCutting::strip(&mut args, caller);
        let args = Value::Object(args);
        validate::validate(&tool.parameters(), &args).map_err(ToolError::invalid)?;

        let decision = access::access(caller, name, declaration);
        if let Access::Refused(code, message) = decision {
            return Err(ToolError::new(code, message));
        }
        let needs_approval = decision == Access::NeedsApproval;
        if needs_approval {
            check_before_approval(self, file, &tool, caller, &config, &args, cross.full)?;
        }
        if cross.run_async {
            return queue_async(file, caller, name, &cross, &args, needs_approval)
                .map(CallStep::Done);
        }
        if needs_approval {
            let meta = json!({ "reason": "restricted" });
            let request = approval::open(file, caller, name, &cross.with_reason(&args), &meta)?;
            return Ok(CallStep::NeedsApproval(Box::new(PendingCall {
                request,
                tool,
                caller: caller.clone(),
                name: name.to_owned(),
                config,
                args,
                cross,
                stage: Stage::Restricted,
            })));
        }
        let call = Invocation {
            tool: &tool,
            caller,
            name,
            config: &config,
            args: &args,
            cross: &cross,
        };
        self.run_call(file, &call, None)
    }

    /// Goes on with a call the owner decided on: records `decision` on its task (unless
    /// the decider did), then a denial is the call's error (`DENIED`), an approval runs it
    /// (with the arguments the owner approved, checked like the model's). The run may need
    /// one more approval (a protection override), handed back like the first.
    pub fn resume(
        &self,
        file: &mut AdfFile,
        pending: PendingCall,
        decision: Decision,
    ) -> Result<CallStep, ToolError> {
        let task_id = pending.request.task_id.clone();
        approval::settle(file, &task_id, &decision)?;
        if let Decision::Denied(reason) = decision {
            return Err(denied(&pending.name, &reason));
        }
        if pending.stage == Stage::ProtectionOverride {
            let result = self.execute(file, &pending.invocation(), true);
            return record_on_task(file, Some(task_id), result);
        }
        // The owner may approve with modified arguments (`modified_args`, written on the
        // row): the call runs with those, checked like the model's.
        let Some(changed) = approval::approved_args(file, &task_id, &pending.request.args)? else {
            return self.run_call(file, &pending.invocation(), Some(task_id));
        };
        if let Err(message) = validate::validate(&pending.tool.parameters(), &changed) {
            let error =
                ToolError::invalid(format!("the approved arguments are invalid: {message}"));
            file.task_update(&task_id, "failed", None, Some(&error.to_string()))?;
            return Err(error);
        }
        let call = Invocation {
            args: &changed,
            ..pending.invocation()
        };
        self.run_call(file, &call, Some(task_id))
    }

    /// Runs a call that passed access and any approval: a deferred tool is prepared and
    /// handed back, any other runs in its transaction and its outcome goes on
    /// `approved_task`. When a protection blocks a model's call, the owner is asked to lift
    /// it once (any earlier approval task is failed, the new one replaces it): the call is
    /// handed back as [`CallStep::NeedsApproval`] and reruns with the override on resume.
    fn run_call(
        &self,
        file: &mut AdfFile,
        call: &Invocation<'_>,
        mut approved_task: Option<String>,
    ) -> Result<CallStep, ToolError> {
        if call.tool.execution().is_deferred() {
            return self.defer(file, call, approved_task).map(CallStep::Done);
        }
        let Invocation {
            tool,
            caller,
            name,
            config,
            args,
            cross,
        } = *call;
        let result = self.execute(file, call, false);
        let Err(ToolError {
            protection: Some(hit),
            ..
        }) = &result
        else {
            return record_on_task(file, approved_task, result);
        };
        if !caller.is_model() {
            return record_on_task(file, approved_task, result);
        }
        let meta = json!({
            "reason": "protection",
            "protection": {
                "kind": hit.kind,
                "target": hit.target,
                "level": hit.level,
                "description": format!("{name} is blocked because {} '{}' is {}", hit.kind, hit.target, hit.level),
            }
        });
        if let Some(task_id) = approved_task.take() {
            file.task_update(
                &task_id,
                "failed",
                None,
                Some(&format!("blocked by protection of {}", hit.target)),
            )?;
        }
        let request = approval::open(file, caller, name, &cross.with_reason(args), &meta)?;
        Ok(CallStep::NeedsApproval(Box::new(PendingCall {
            request,
            tool: Arc::clone(tool),
            caller: caller.clone(),
            name: name.to_owned(),
            config: Arc::clone(config),
            args: args.clone(),
            cross: cross.clone(),
            stage: Stage::ProtectionOverride,
        })))
    }

    /// A deferred tool's call: its `prepare` step runs now, inside the call's transaction,
    /// and the rest is the caller's to drive. A failed prepare fails the approval task.
    fn defer(
        &self,
        file: &mut AdfFile,
        call: &Invocation<'_>,
        approved_task: Option<String>,
    ) -> Result<CallOutcome, ToolError> {
        let Invocation {
            tool,
            caller,
            name,
            config,
            args,
            cross,
        } = *call;
        let args = match self.prepare(file, tool, caller, config, args.clone(), cross.full) {
            Ok(args) => args,
            Err(error) => {
                if let Some(task_id) = &approved_task {
                    file.task_update(task_id, "failed", None, Some(&error.to_string()))?;
                }
                return Err(error);
            }
        };
        Ok(CallOutcome::Deferred(DeferredCall {
            tool: name.to_owned(),
            args,
            full: cross.full,
            approval_task: approved_task,
        }))
    }

    /// The future that carries out a deferred call of a [`DetachedTool::detach`](super::DetachedTool::detach) tool, or `None` when
    /// the tool needs the executor or the code runner.
    pub fn detach(
        &self,
        call: &DeferredCall,
        config: &Value,
        caller: &ToolCaller,
    ) -> Option<Detached> {
        let tool = self.resolve(config, &call.tool)?;
        let Execution::Detached(detached) = tool.execution() else {
            return None;
        };
        detached
            .detach(config, caller, call.args.clone())
            .map(unwinding_to_error)
    }

    /// Carries out a deferred call of a [`DetachedTool::detach`](super::DetachedTool::detach) tool and records its outcome on the
    /// call's approval task. A tool that needs the executor or the code runner is an error.
    pub async fn run_detached(
        &self,
        file: &mut AdfFile,
        caller: &ToolCaller,
        call: &DeferredCall,
    ) -> Result<Value, ToolError> {
        let config = file.config_shared()?;
        let future = self.detach(call, &config, caller).ok_or_else(|| {
            ToolError::new(
                ErrorCode::InternalError,
                format!("'{}' cannot run in this context", call.tool),
            )
        })?;
        let outcome = future.await;
        outcome.record(file, caller.inner_loop());
        self.finish_deferred(file, call, &outcome.result)?;
        outcome.result
    }

    /// Carries out a deferred call of a [`HostedTool::run_hosted`](super::HostedTool::run_hosted) tool and records its outcome on
    /// the call's approval task; `None` when the tool is not a hosted one. `driver` carries
    /// out the inner calls the pipeline defers.
    pub async fn run_hosted(
        &self,
        file: &mut AdfFile,
        caller: &ToolCaller,
        call: &DeferredCall,
        approver: &(dyn Approver + Sync),
        driver: &mut dyn DeferredDriver,
    ) -> Option<Result<Value, ToolError>> {
        use futures::FutureExt as _;
        let tool = self.get(&call.tool)?.clone();
        let cx = HostedContext {
            file: &mut *file,
            registry: self,
            caller,
            approver,
            driver,
        };
        let future =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match tool.execution() {
                Execution::Hosted(hosted) => Some(hosted.run_hosted(cx, call.args.clone())),
                _ => None,
            }))
            .unwrap_or_else(|payload| {
                let error = panicked(payload.as_ref());
                Some(Box::pin(async move { Err(error) }))
            })?;
        let result = std::panic::AssertUnwindSafe(future)
            .catch_unwind()
            .await
            .unwrap_or_else(|payload| Err(panicked(payload.as_ref())));
        if let Err(error) = self.finish_deferred(file, call, &result) {
            return Some(Err(error));
        }
        Some(result)
    }

    /// Records the outcome of a deferred call on its approval task, if it had one.
    pub fn finish_deferred(
        &self,
        file: &mut AdfFile,
        call: &DeferredCall,
        result: &Result<Value, ToolError>,
    ) -> Result<(), ToolError> {
        if let Some(task_id) = &call.approval_task {
            match result {
                Ok(value) => file.task_update(task_id, "completed", Some(&render(value)), None)?,
                Err(error) => {
                    file.task_update(task_id, "failed", None, Some(&error.to_string()))?
                }
            }
        }
        Ok(())
    }

    /// Runs an approved or queued task whose status is `running`, and records its outcome.
    /// A tool that runs outside the store transaction (detached or code tools) cannot run
    /// here: the task fails saying so; async callers use [`ToolRegistry::start_task`].
    pub fn run_task(
        &self,
        file: &mut AdfFile,
        task_id: &str,
        caller: &ToolCaller,
    ) -> Result<Value, ToolError> {
        match self.start_task(file, task_id, caller)? {
            TaskRun::Done(result) => result,
            TaskRun::Detached(_) | TaskRun::Code(_) => {
                let result = Err(ToolError::new(
                    ErrorCode::ToolError,
                    "this tool cannot run as a background task here; call it without _async",
                ));
                self.finish_task(file, task_id, &result)?;
                result
            }
        }
    }

    /// Starts a task whose status is `running`: a synchronous tool runs now and its outcome
    /// is recorded; a detached tool's future and a code tool's call are handed back, and the
    /// caller records their outcome with [`ToolRegistry::finish_task`].
    pub fn start_task(
        &self,
        file: &mut AdfFile,
        task_id: &str,
        caller: &ToolCaller,
    ) -> Result<TaskRun, ToolError> {
        let task = file
            .task(task_id)?
            .ok_or_else(|| ToolError::not_found(format!("no task {task_id}")))?;
        let config = file.config_shared()?;
        let tool = self
            .resolve(&config, &task.tool)
            .ok_or_else(|| ToolError::not_found(format!("unknown tool '{}'", task.tool)))?;
        let mut args = task.args.as_object().cloned().unwrap_or_default();
        let cross = CrossCutting::strip(&mut args, caller);
        if tool.execution().is_deferred() {
            let args = match self.prepare(
                file,
                &tool,
                caller,
                &config,
                Value::Object(args),
                cross.full,
            ) {
                Ok(args) => args,
                Err(error) => {
                    let result = Err(error);
                    self.finish_task(file, task_id, &result)?;
                    return Ok(TaskRun::Done(result));
                }
            };
            let call = DeferredCall {
                tool: task.tool.clone(),
                args,
                full: cross.full,
                approval_task: Some(task_id.to_owned()),
            };
            let future = match tool.execution() {
                Execution::Detached(detached) => {
                    detached.detach(&config, caller, call.args.clone())
                }
                _ => None,
            };
            return Ok(match future {
                Some(future) => TaskRun::Detached(unwinding_to_error(future)),
                None => TaskRun::Code(call),
            });
        }
        let override_protection = task
            .approval_meta
            .as_ref()
            .and_then(|m| m.get("reason"))
            .and_then(Value::as_str)
            == Some("protection");
        let args = Value::Object(args);
        let call = Invocation {
            tool: &tool,
            caller,
            name: &task.tool,
            config: &config,
            args: &args,
            cross: &cross,
        };
        let result = self.execute(file, &call, override_protection);
        self.finish_task(file, task_id, &result)?;
        Ok(TaskRun::Done(result))
    }

    /// Records a task's outcome: `completed` with the rendered result, or `failed`.
    pub fn finish_task(
        &self,
        file: &mut AdfFile,
        task_id: &str,
        result: &Result<Value, ToolError>,
    ) -> Result<(), ToolError> {
        match result {
            Ok(value) => file.task_update(task_id, "completed", Some(&render(value)), None)?,
            Err(error) => file.task_update(task_id, "failed", None, Some(&error.to_string()))?,
        }
        Ok(())
    }

    /// Runs [`DetachedTool::prepare_outside`](super::DetachedTool::prepare_outside), then
    /// [`DetachedTool::prepare`](super::DetachedTool::prepare) in one transaction.
    fn prepare(
        &self,
        file: &mut AdfFile,
        tool: &Arc<dyn Tool>,
        caller: &ToolCaller,
        config: &Value,
        args: Value,
        full: bool,
    ) -> Result<Value, ToolError> {
        let args = match tool.execution() {
            Execution::Detached(detached) => detached.prepare_outside(file, caller, args)?,
            _ => args,
        };
        in_transaction(self, file, caller, config, false, full, |cx| {
            match tool.execution() {
                Execution::Detached(detached) => detached.prepare(cx, args),
                _ => Ok(args),
            }
        })
    }

    /// Runs `call` with [`Tool::run`] in one transaction; `protection_override`: the owner
    /// lifted a protection for this one call.
    fn execute(
        &self,
        file: &mut AdfFile,
        call: &Invocation<'_>,
        protection_override: bool,
    ) -> Result<Value, ToolError> {
        let Invocation {
            tool,
            caller,
            config,
            args,
            cross,
            ..
        } = *call;
        in_transaction(
            self,
            file,
            caller,
            config,
            protection_override,
            cross.full,
            |cx| tool.run(cx, args.clone()),
        )
    }
}

/// Runs `work` with a [`ToolContext`] inside one transaction: an error rolls every write back.
/// A panicking tool is that call's error (its writes rolled back), never the end of the
/// thread that holds the agent's file.
fn in_transaction<T>(
    registry: &ToolRegistry,
    file: &mut AdfFile,
    caller: &ToolCaller,
    config: &Value,
    protection_override: bool,
    full: bool,
    work: impl FnOnce(&mut ToolContext<'_>) -> Result<T, ToolError>,
) -> Result<T, ToolError> {
    file.atomically(|file| {
        let mut cx = ToolContext {
            file,
            caller,
            config,
            protection_override,
            full,
            registry,
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&mut cx)))
            .unwrap_or_else(|payload| Err(panicked(payload.as_ref())))
    })
}

/// The error of a tool call that panicked.
fn panicked(payload: &(dyn std::any::Any + Send)) -> ToolError {
    ToolError::new(
        ErrorCode::InternalError,
        format!(
            "the tool stopped on an internal error ({}); its writes were rolled back",
            adf_egress::panic_message(payload)
        ),
    )
}

/// A detached call's future whose panic becomes its error result.
fn unwinding_to_error(future: Detached) -> Detached {
    use futures::FutureExt as _;
    Box::pin(
        std::panic::AssertUnwindSafe(future)
            .catch_unwind()
            .map(|outcome| {
                outcome.unwrap_or_else(|payload| {
                    DetachedOutcome::from(Err(panicked(payload.as_ref())))
                })
            }),
    )
}

/// Runs [`Tool::check`] outside any transaction: it only reads, and a transaction would
/// consume the clean-close marker and so change the file.
fn check_before_approval(
    registry: &ToolRegistry,
    file: &mut AdfFile,
    tool: &Arc<dyn Tool>,
    caller: &ToolCaller,
    config: &Value,
    args: &Value,
    full: bool,
) -> Result<(), ToolError> {
    let cx = ToolContext {
        file,
        caller,
        config,
        protection_override: false,
        full,
        registry,
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tool.check(&cx, args)))
        .unwrap_or_else(|payload| Err(panicked(payload.as_ref())))
}

/// One call as the pipeline carries it to the tool.
#[derive(Clone, Copy)]
struct Invocation<'a> {
    tool: &'a Arc<dyn Tool>,
    caller: &'a ToolCaller,
    name: &'a str,
    config: &'a Arc<Value>,
    args: &'a Value,
    cross: &'a CrossCutting,
}

/// `_async`: the call becomes a task (`pending_approval` when restricted, else `running`)
/// that the caller carries out after the turn.
fn queue_async(
    file: &mut AdfFile,
    caller: &ToolCaller,
    name: &str,
    cross: &CrossCutting,
    args: &Value,
    needs_approval: bool,
) -> Result<CallOutcome, ToolError> {
    let status = if needs_approval {
        "pending_approval"
    } else {
        "running"
    };
    let stored = cross.with_reason(args);
    let origin = format!("agent:{}", caller.label());
    let task_id = file.task_create(&NewTask {
        tool: name,
        args: &stored,
        status,
        origin: Some(&origin),
        requires_authorization: needs_approval,
        executor_managed: false,
        approval_meta: needs_approval
            .then(|| json!({ "reason": "restricted" }))
            .as_ref(),
        r#loop: caller.loop_name(),
    })?;
    Ok(CallOutcome::Queued {
        task_id,
        status: status.to_owned(),
    })
}

/// Records a call's outcome on its approval task, if it has one, and ends the call.
fn record_on_task(
    file: &mut AdfFile,
    approved_task: Option<String>,
    result: Result<Value, ToolError>,
) -> Result<CallStep, ToolError> {
    if let Some(task_id) = approved_task {
        match &result {
            Ok(value) => file.task_update(&task_id, "completed", Some(&render(value)), None)?,
            Err(error) => file.task_update(&task_id, "failed", None, Some(&error.to_string()))?,
        }
    }
    result.map(|value| CallStep::Done(CallOutcome::Done(value)))
}

fn denied(name: &str, reason: &str) -> ToolError {
    ToolError::new(
        ErrorCode::Denied,
        format!("the owner denied the call to {name}: {reason}"),
    )
}

/// The cross-cutting parameters of the tools guide, taken off the arguments before the tool
/// sees them.
#[derive(Debug, Default, Clone)]
struct CrossCutting {
    reason: Option<String>,
    run_async: bool,
    full: bool,
}

impl CrossCutting {
    fn strip(args: &mut Map<String, Value>, caller: &ToolCaller) -> Self {
        let reason = args
            .remove("_reason")
            .and_then(|v| v.as_str().map(str::to_owned));
        let run_async = args
            .remove("_async")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        // `_full` is for code only: model results stay capped to protect the context window.
        let full = args
            .remove("_full")
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
            && !caller.is_model();
        Self {
            reason,
            run_async,
            full,
        }
    }

    /// The arguments as stored on a task: the model's `_reason` rides along for the approver.
    fn with_reason(&self, args: &Value) -> Value {
        let mut stored = args.clone();
        if let (Some(reason), Some(object)) = (&self.reason, stored.as_object_mut()) {
            object.insert("_reason".into(), Value::String(reason.clone()));
        }
        stored
    }
}

/// Resolves a task as `resolver` exactly as missing-tables §13.4 describes: only pending tasks
/// (`INVALID_STATE` otherwise); `requires_authorization` is set first when asked; a task that
/// requires authorization can only be escalated by unauthorized code; approving an
/// executor-managed task only signals the waiting executor (status `running`), approving a
/// deferred task runs the tool now.
pub fn resolve_task(
    registry: &ToolRegistry,
    file: &mut AdfFile,
    task_id: &str,
    resolution: Resolution,
    resolver: &ToolCaller,
    requires_authorization: bool,
) -> Result<Value, ToolError> {
    let task = file
        .task(task_id)?
        .ok_or_else(|| ToolError::not_found(format!("no task {task_id}")))?;
    if !matches!(task.status.as_str(), "pending" | "pending_approval") {
        return Err(ToolError::new(
            ErrorCode::InvalidState,
            format!(
                "task {task_id} is {}, only pending tasks can be resolved",
                task.status
            ),
        ));
    }
    if requires_authorization && !task.requires_authorization {
        file.task_require_authorization(task_id)?;
    }
    let needs_trust = task.requires_authorization || requires_authorization;
    let trusted = matches!(
        resolver,
        ToolCaller::Owner
            | ToolCaller::Code {
                authorized: true,
                ..
            }
    );
    if needs_trust && !trusted && resolution != Resolution::Escalate {
        return Err(ToolError::new(
            ErrorCode::RequiresAuthorizedCode,
            format!(
                "task {task_id} requires authorization: only the owner or authorized code may resolve it"
            ),
        ));
    }
    match resolution {
        Resolution::Escalate => {
            if task.status != "pending_approval" {
                file.task_update(task_id, "pending_approval", None, None)?;
            }
            Ok(json!({ "task_id": task_id, "status": "pending_approval" }))
        }
        Resolution::Deny { reason } => {
            let reason = reason.unwrap_or_else(|| "Denied".into());
            file.task_update(task_id, "denied", None, Some(&reason))?;
            Ok(json!({ "task_id": task_id, "status": "denied", "reason": reason }))
        }
        Resolution::Approve { modified_args } => {
            if let Some(args) = &modified_args {
                file.task_set_args(task_id, args)?;
            }
            file.task_update(task_id, "running", None, None)?;
            if task.executor_managed {
                return Ok(json!({ "task_id": task_id, "status": "approved" }));
            }
            // A deferred (`_async`) call: the approval is the go-ahead to run it as the agent
            // that asked for it.
            let agent = ToolCaller::Model {
                loop_name: task.r#loop.clone().unwrap_or_else(|| "main".into()),
            };
            let result = registry.run_task(file, task_id, &agent);
            let status = if result.is_ok() {
                "completed"
            } else {
                "failed"
            };
            Ok(json!({
                "task_id": task_id,
                "status": status,
                "result": result.as_ref().ok(),
                "error": result.as_ref().err().map(ToString::to_string),
            }))
        }
    }
}
