//! The tool registry and the one place tool calls are decided and run.
//!
//! Principal types: [`Tool`] (one tool: name, JSON Schema, `run`), [`ToolSource`] (tools that
//! come from elsewhere than the built-in list, per agent config), [`ToolRegistry`] (every tool
//! by name; [`ToolRegistry::call`] is the whole call pipeline), [`ToolCaller`] and the
//! access predicates in [`access`], [`ToolError`] with its stable [`ErrorCode`]s, and the
//! human-in-the-loop pieces in [`approval`].
//!
//! The pipeline of one call: look the tool up → read the effective declaration → strip the
//! cross-cutting parameters (`_reason`, `_async`, `_full`) → validate the arguments → decide
//! access (allowed / needs approval / refused) → for a call that needs approval, the tool's
//! read-only [`Tool::check`] and then the owner's decision → run inside one store transaction.
//! A model call refused by a protection the owner may lift becomes a one-time approval request.

pub mod access;
pub mod approval;
pub mod builtin;
mod error;
pub mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;

use adf_store::AdfFile;
use adf_store::tasks::NewTask;
use serde_json::{Map, Value, json};

pub use access::{Access, Declaration, ToolCaller};
pub use approval::{ApprovalRequest, Approver, Decision};
pub use error::{ErrorCode, ProtectionHit, ToolError};

/// One tool: built in, or provided by a [`ToolSource`].
pub trait Tool: Send + Sync + 'static {
    /// The name models and code call it by.
    fn name(&self) -> &str;
    /// One or two sentences for the model.
    fn description(&self) -> &str;
    /// The JSON Schema of the arguments (an object schema).
    fn parameters(&self) -> Value;
    /// Runs the call. The pipeline has validated `args` against [`Tool::parameters`] and
    /// opened a transaction: return an error and every write rolls back.
    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError>;

    /// Whether the call is carried out by the caller of the pipeline rather than by `run`:
    /// turn tools (`say`, `ask`) need the executor, code tools (`sys_code`, `sys_lambda`) need
    /// the async sandbox. The pipeline still decides access and approvals, then hands the
    /// validated call back as [`CallOutcome::Deferred`].
    fn deferred(&self) -> bool {
        false
    }

    /// The body of a [`Tool::deferred`] tool that needs neither the executor nor the code
    /// runner (network work such as `sys_fetch`): an owned future the caller awaits outside
    /// any store transaction. `None`, the default, for tools the executor or the code runner
    /// carry out themselves. `caller` lets the tool shape its result for code (bytes as
    /// `Uint8Array`) or for the model (text only).
    fn detach(&self, config: &Value, caller: &ToolCaller, args: Value) -> Option<Detached> {
        let _ = (config, caller, args);
        None
    }

    /// The part of a [`Tool::deferred`] call that needs the file before the detached part
    /// runs (`msg_send` composes, signs and stores its `pending` outbox row here). The
    /// pipeline runs it inside one transaction after access and approval; its value becomes
    /// the arguments [`Tool::detach`] receives. The default passes the arguments through.
    fn prepare(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let _ = cx;
        Ok(args)
    }

    /// Checks the arguments beyond their schema without writing anything, before the owner
    /// is asked to approve the call: a call that would be refused anyway is refused without
    /// an approval task, and the file stays byte-identical. Only reads; the default accepts.
    fn check(&self, cx: &ToolContext<'_>, args: &Value) -> Result<(), ToolError> {
        let _ = (cx, args);
        Ok(())
    }

    /// The body of a [`Tool::deferred`] tool that calls other tools (`adf_shell`): a future
    /// awaited outside any transaction with the registry, so each inner call is a whole
    /// pipeline call of its own for the same caller (access, approvals, audit, one transaction
    /// each); inner calls the pipeline defers (`sys_fetch`, `sys_code`) go to
    /// [`HostedContext::driver`]. `None`, the default, for tools that do not.
    fn run_hosted<'a>(&'a self, cx: HostedContext<'a>, args: Value) -> Option<HostedFuture<'a>> {
        let _ = (cx, args);
        None
    }

    /// Tools this one covers for the model: while it is advertised, they leave the model's
    /// tool list (they stay callable, and `config tools` still lists them).
    fn absorbs(&self) -> &'static [&'static str] {
        &[]
    }
}

/// The future of a [`Tool::run_hosted`] body, and of a [`DeferredDriver`] call.
pub type HostedFuture<'a> = futures::future::BoxFuture<'a, Result<Value, ToolError>>;

/// What a [`Tool::run_hosted`] body may use: the file (no transaction open), the registry
/// to call back into, who called, who approves restricted inner calls, and who carries out
/// the inner calls the pipeline defers.
pub struct HostedContext<'a> {
    /// The agent file.
    pub file: &'a mut AdfFile,
    /// The registry the call came through; inner calls go through [`ToolRegistry::call`].
    pub registry: &'a ToolRegistry,
    /// Who made the outer call; inner calls are made as this caller.
    pub caller: &'a ToolCaller,
    /// Asked for restricted inner calls (and protection overrides), and waited for.
    pub approver: &'a (dyn Approver + Sync),
    /// Carries out inner calls the pipeline returned as [`CallOutcome::Deferred`].
    pub driver: &'a mut dyn DeferredDriver,
}

impl std::fmt::Debug for HostedContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedContext")
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

/// Carries out a call the pipeline deferred, for a hosted body: the async caller of
/// [`ToolRegistry::run_hosted`] supplies it (`code::drive_deferred` runs code tools in the
/// agent's sandbox and network tools as their detached futures), so a hosted tool reaches
/// `sys_fetch` and `sys_code` without knowing how they run. It records the outcome on the
/// call's approval task.
pub trait DeferredDriver: Send {
    /// Carries out `call` for `caller` on `file`.
    fn drive<'a>(
        &'a mut self,
        file: &'a mut AdfFile,
        caller: &'a ToolCaller,
        call: &'a DeferredCall,
    ) -> HostedFuture<'a>;
}

/// How a `running` task is carried out (see [`ToolRegistry::start_task`]).
pub enum TaskRun {
    /// A synchronous tool ran; its outcome is recorded on the task.
    Done(Result<Value, ToolError>),
    /// A detached tool: await it, write its logs, then [`ToolRegistry::finish_task`].
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

/// The future of a detached deferred call (see [`Tool::detach`]).
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

/// What a running tool may see and use.
#[derive(Debug)]
pub struct ToolContext<'a> {
    /// The agent file the call reads and writes.
    pub file: &'a mut AdfFile,
    /// Who made the call: the model, a lambda (authorized or not), or the owner.
    pub caller: &'a ToolCaller,
    /// The config as it was when the call started.
    pub config: &'a Value,
    /// The owner approved lifting a protection for this one call.
    pub protection_override: bool,
    /// Code asked for results without output caps (`_full`; never honoured for the model).
    pub full: bool,
    /// The registry running this call (with its sources: a tool that lists tools, like
    /// `sys_get_config`, sees the MCP tools the binary attached).
    pub registry: &'a ToolRegistry,
}

impl ToolContext<'_> {
    /// The store-level caller whose protections apply to this call.
    pub fn store_caller(&self) -> adf_store::Caller {
        if self.protection_override && self.caller.store_caller() == adf_store::Caller::Agent {
            adf_store::Caller::OwnerApproved
        } else {
            self.caller.store_caller()
        }
    }

    /// A limit from `config.limits`, or `default` when absent or null.
    pub fn limit(&self, name: &str, default: u64) -> u64 {
        self.config
            .pointer(&format!("/limits/{name}"))
            .and_then(Value::as_u64)
            .unwrap_or(default)
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
    /// A [`Tool::deferred`] call that passed access and approval; the caller runs it and
    /// reports the outcome with [`ToolRegistry::finish_deferred`].
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

/// The description injected into every schema shown to the model (tools guide `_reason`).
const REASON_PARAMETER: &str = "Why you are calling this tool, in about ten words. Shown to the owner when approval is needed.";

/// Tools that do not come from the built-in list: their names and schemas depend on the
/// agent (its config declares them), so the registry asks a source for every name it does
/// not hold itself. A tool a source hands back goes through the same pipeline as a built-in
/// one (declaration, access, approvals, one transaction, detached network work). The binary
/// attaches sources where it assembles the runtime ([`ToolRegistry::add_source`]).
pub trait ToolSource: Send + Sync + 'static {
    /// The tool called `name` for the agent whose config is `config`, if this source
    /// provides it. Called on every lookup: keep it a cheap read of `config`.
    fn tool(&self, config: &Value, name: &str) -> Option<Arc<dyn Tool>>;
}

/// Every tool by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("sources", &self.sources.len())
            .finish()
    }
}

impl ToolRegistry {
    /// A registry holding every built-in tool this runtime implements.
    pub fn with_builtins() -> Self {
        let mut registry = Self::default();
        for tool in builtin::all() {
            registry.register(tool);
        }
        registry
    }

    /// Every built-in tool, with the messaging tools connected to `mesh` (the daemon's): bare
    /// handles, same-runtime delivery and `agent_discover`.
    pub fn with_builtins_and_mesh(
        mesh: Arc<dyn crate::messaging::Mesh>,
        home: Option<crate::home::RuntimeHome>,
    ) -> Self {
        let mut registry = Self::with_builtins();
        for tool in builtin::mesh::with_mesh(mesh, home) {
            registry.register(tool);
        }
        registry
    }

    /// Adds or replaces a tool.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_owned(), tool);
    }

    /// Adds a source asked for the names no registered tool has (in the order added).
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push(source);
    }

    /// The registered tool with this name (built in or registered; not a source's).
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The tool `name` for the agent whose config is `config`: a registered tool, else the
    /// first source that provides it.
    pub fn resolve(&self, config: &Value, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(tool) = self.tools.get(name) {
            return Some(tool.clone());
        }
        self.sources
            .iter()
            .find_map(|source| source.tool(config, name))
    }

    /// The names of every registered tool.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.tools.keys().map(String::as_str)
    }

    /// Every declared tool with its effective flags and schema, as `sys_get_config
    /// {section: "tools"}` reports them. Tools this runtime does not implement yet are listed
    /// with `implemented: false`.
    pub fn describe(&self, config: &Value) -> Vec<Value> {
        let (declarations, _) = access::declarations(config);
        declarations
            .iter()
            .map(|d| {
                let tool = self.resolve(config, &d.name);
                let tool = tool.as_ref();
                json!({
                    "name": d.name,
                    "enabled": d.enabled,
                    "visible": d.visible,
                    "restricted": d.restricted,
                    "locked": d.locked,
                    "implemented": tool.is_some(),
                    "description": tool.map(|t| t.description()),
                    "parameters": tool.map(|t| t.parameters()),
                })
            })
            .collect()
    }

    /// The tool definitions advertised to the model: enabled and visible declarations of
    /// implemented tools that no advertised tool absorbs ([`Tool::absorbs`]), each schema
    /// extended with the `_reason` parameter.
    pub fn model_definitions(&self, config: &Value) -> Vec<Value> {
        let (declarations, _) = access::declarations(config);
        let absorbed: Vec<&str> = declarations
            .iter()
            .filter(|d| access::advertised(d))
            .filter_map(|d| self.get(&d.name))
            .flat_map(|tool| tool.absorbs().iter().copied())
            .collect();
        declarations
            .iter()
            .filter(|d| access::advertised(d))
            .filter(|d| !absorbed.contains(&d.name.as_str()))
            .filter_map(|d| self.resolve(config, &d.name))
            .map(|tool| {
                let mut parameters = tool.parameters();
                if let Some(properties) = parameters.get_mut("properties").and_then(Value::as_object_mut) {
                    properties.insert("_reason".into(), json!({ "type": "string", "description": REASON_PARAMETER }));
                }
                json!({ "name": tool.name(), "description": tool.description(), "parameters": parameters })
            })
            .collect()
    }

    /// Calls `name` with `args` for `caller`: the whole pipeline (see the module docs).
    /// Approvals are asked of `approver` and waited for.
    pub fn call(
        &self,
        file: &mut AdfFile,
        caller: &ToolCaller,
        name: &str,
        args: Value,
        approver: &dyn Approver,
    ) -> Result<CallOutcome, ToolError> {
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
        let mut args = Value::Object(args);
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
            return queue_async(file, caller, name, &cross, &args, needs_approval);
        }

        let mut approved_task = None;
        if needs_approval {
            let (approved_args, task_id) =
                approve_restricted(file, approver, caller, &tool, name, &cross, args)?;
            args = approved_args;
            approved_task = Some(task_id);
        }
        if tool.deferred() {
            return self.defer(
                file,
                &tool,
                caller,
                name,
                &config,
                args,
                &cross,
                approved_task,
            );
        }
        let call = Invocation {
            tool: &tool,
            caller,
            name,
            config: &config,
            args: &args,
            cross: &cross,
        };
        let result = self.execute_or_ask_override(file, &call, approver, &mut approved_task)?;
        if let Some(task_id) = approved_task {
            match &result {
                Ok(value) => file.task_update(&task_id, "completed", Some(&render(value)), None)?,
                Err(error) => {
                    file.task_update(&task_id, "failed", None, Some(&error.to_string()))?
                }
            }
        }
        result.map(CallOutcome::Done)
    }

    /// A deferred tool's call: its `prepare` step runs now, inside the call's transaction,
    /// and the rest is the caller's to drive. A failed prepare fails the approval task.
    #[allow(clippy::too_many_arguments)]
    fn defer(
        &self,
        file: &mut AdfFile,
        tool: &Arc<dyn Tool>,
        caller: &ToolCaller,
        name: &str,
        config: &Value,
        args: Value,
        cross: &CrossCutting,
        approved_task: Option<String>,
    ) -> Result<CallOutcome, ToolError> {
        let args = match self.prepare(file, tool, caller, config, args, cross.full) {
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

    /// Runs the call. When a protection blocks a model's call, the owner is asked once to
    /// override it (any earlier approval task is failed, the new one replaces it) and the
    /// call reruns with the override. The outer error ends the pipeline (a store error, a
    /// denial); the inner result is the tool's.
    fn execute_or_ask_override(
        &self,
        file: &mut AdfFile,
        call: &Invocation<'_>,
        approver: &dyn Approver,
        approved_task: &mut Option<String>,
    ) -> Result<Result<Value, ToolError>, ToolError> {
        let Invocation {
            tool,
            caller,
            name,
            config,
            args,
            cross,
        } = *call;
        let result = self.execute(file, tool, caller, config, args, false, cross.full);
        let Err(ToolError {
            protection: Some(hit),
            ..
        }) = &result
        else {
            return Ok(result);
        };
        if !caller.is_model() {
            return Ok(result);
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
        let (decision, task_id) = approval::request(
            file,
            approver,
            caller,
            name,
            &cross.with_reason(args),
            &meta,
        )?;
        if let Decision::Denied(reason) = decision {
            return Err(denied(name, &reason));
        }
        *approved_task = Some(task_id);
        Ok(self.execute(file, tool, caller, config, args, true, cross.full))
    }

    /// The future that carries out a deferred call of a [`Tool::detach`] tool, or `None` when
    /// the tool needs the executor or the code runner.
    pub fn detach(
        &self,
        call: &DeferredCall,
        config: &Value,
        caller: &ToolCaller,
    ) -> Option<Detached> {
        self.resolve(config, &call.tool)?
            .detach(config, caller, call.args.clone())
            .map(unwinding_to_error)
    }

    /// Carries out a deferred call of a [`Tool::detach`] tool and records its outcome on the
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

    /// Carries out a deferred call of a [`Tool::run_hosted`] tool and records its outcome on
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
        let future = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tool.run_hosted(cx, call.args.clone())
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
        if tool.deferred() {
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
            return Ok(match tool.detach(&config, caller, call.args.clone()) {
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
        let result = self.execute(
            file,
            &tool,
            caller,
            &config,
            &Value::Object(args),
            override_protection,
            cross.full,
        );
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

    /// Runs [`Tool::prepare`] in one transaction.
    fn prepare(
        &self,
        file: &mut AdfFile,
        tool: &Arc<dyn Tool>,
        caller: &ToolCaller,
        config: &Value,
        args: Value,
        full: bool,
    ) -> Result<Value, ToolError> {
        in_transaction(self, file, caller, config, false, full, |cx| {
            tool.prepare(cx, args)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn execute(
        &self,
        file: &mut AdfFile,
        tool: &Arc<dyn Tool>,
        caller: &ToolCaller,
        config: &Value,
        args: &Value,
        protection_override: bool,
        full: bool,
    ) -> Result<Value, ToolError> {
        in_transaction(
            self,
            file,
            caller,
            config,
            protection_override,
            full,
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
    config: &'a Value,
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

/// Asks the owner to approve a restricted call and waits; returns the arguments to run with
/// (the owner may approve modified ones, checked like the model's) and the approval task.
fn approve_restricted(
    file: &mut AdfFile,
    approver: &dyn Approver,
    caller: &ToolCaller,
    tool: &Arc<dyn Tool>,
    name: &str,
    cross: &CrossCutting,
    args: Value,
) -> Result<(Value, String), ToolError> {
    let meta = json!({ "reason": "restricted" });
    let (decision, task_id) = approval::request(
        file,
        approver,
        caller,
        name,
        &cross.with_reason(&args),
        &meta,
    )?;
    if let Decision::Denied(reason) = decision {
        return Err(denied(name, &reason));
    }
    // The owner may approve with modified arguments (`modified_args`, written on the
    // row): the call runs with those, checked like the model's.
    let Some(changed) = approval::approved_args(file, &task_id, &cross.with_reason(&args))? else {
        return Ok((args, task_id));
    };
    if let Err(message) = validate::validate(&tool.parameters(), &changed) {
        let error = ToolError::invalid(format!("the approved arguments are invalid: {message}"));
        file.task_update(&task_id, "failed", None, Some(&error.to_string()))?;
        return Err(error);
    }
    Ok((changed, task_id))
}

fn denied(name: &str, reason: &str) -> ToolError {
    ToolError::new(
        ErrorCode::Denied,
        format!("the owner denied the call to {name}: {reason}"),
    )
}

/// A result as text: strings as they are, anything else as JSON.
pub fn render(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The cross-cutting parameters of the tools guide, taken off the arguments before the tool
/// sees them.
#[derive(Debug, Default)]
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
