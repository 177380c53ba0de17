//! One tool and the registry that holds tools by name: [`Tool`] (name, JSON Schema, `run`,
//! and its [`Execution`] mode, with the mode traits [`DetachedTool`] and [`HostedTool`]),
//! [`ToolSource`] (tools an agent's config declares),
//! [`ToolContext`] / [`HostedContext`] (what a running tool may use) and [`ToolRegistry`] with
//! its lookups. `Tool` and `ToolRegistry` share this file because each names the other (a
//! running tool sees the registry that runs it); the call pipeline is `impl ToolRegistry` in
//! pipeline.rs and the built-in set is assembled in builtin/mod.rs, both above this file.

use std::collections::BTreeMap;
use std::sync::Arc;

use adf_store::AdfFile;
use serde_json::{Value, json};

use super::access::{self, ToolCaller};
use super::approval::Approver;
use super::error::ToolError;
use super::outcome::{DeferredCall, Detached, HostedFuture};

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

    /// Checks the arguments beyond their schema without writing anything, before the owner
    /// is asked to approve the call: a call that would be refused anyway is refused without
    /// an approval task, and the file stays byte-identical. Only reads; the default accepts.
    fn check(&self, cx: &ToolContext<'_>, args: &Value) -> Result<(), ToolError> {
        let _ = (cx, args);
        Ok(())
    }

    /// How a call is carried out once access and approval passed; the default,
    /// [`Execution::InTransaction`], is [`Tool::run`] inside the pipeline's transaction.
    fn execution(&self) -> Execution<'_> {
        Execution::InTransaction
    }

    /// Tools this one covers for the model: while it is advertised, they leave the model's
    /// tool list (they stay callable, and `config tools` still lists them).
    fn absorbs(&self) -> &'static [&'static str] {
        &[]
    }
}

/// How a tool's call is carried out ([`Tool::execution`]). Every mode goes through the same
/// pipeline first (declaration, validation, access, approvals); the modes differ in what
/// happens after. Every mode but the first hands the validated call back as
/// [`CallOutcome::Deferred`](super::CallOutcome::Deferred) for the pipeline's caller to carry
/// out.
pub enum Execution<'a> {
    /// [`Tool::run`] inside one store transaction: most tools.
    InTransaction,
    /// Network work outside any transaction (`sys_fetch`, `msg_send`, MCP and WebSocket
    /// tools): [`DetachedTool::prepare`] in the call's transaction, then the owned future of
    /// [`DetachedTool::detach`], which never touches the file.
    Detached(&'a dyn DetachedTool),
    /// A tool that calls other tools (`adf_shell`): [`HostedTool::run_hosted`], each inner
    /// call a pipeline call of its own.
    Hosted(&'a dyn HostedTool),
    /// Carried out by the code runner in the agent's sandbox (`sys_code`, `sys_lambda`).
    CodeRunner,
}

impl std::fmt::Debug for Execution<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Execution::InTransaction => "InTransaction",
            Execution::Detached(_) => "Detached",
            Execution::Hosted(_) => "Hosted",
            Execution::CodeRunner => "CodeRunner",
        })
    }
}

impl Execution<'_> {
    /// Whether the pipeline hands the call back to its caller rather than running it.
    pub fn is_deferred(&self) -> bool {
        !matches!(self, Execution::InTransaction)
    }
}

/// The detached part of an [`Execution::Detached`] tool.
pub trait DetachedTool: Send + Sync {
    /// The part of the call that needs the file before the detached part runs (`msg_send`
    /// composes, signs and stores its `pending` outbox row here). The pipeline runs it inside
    /// one transaction after access and approval; its value becomes the arguments
    /// [`DetachedTool::detach`] receives. The default passes the arguments through.
    fn prepare(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let _ = cx;
        Ok(args)
    }

    /// The part of the call that may wait for something other than the file (`sys_fetch`'s
    /// middleware chain, whose lambdas may await a server or a timer): run by the pipeline
    /// after access and approval with no transaction of its own, right before
    /// [`DetachedTool::prepare`], which receives its value. A serving holder's queued jobs may
    /// run while it waits (`code::FileQueue`), so it must not rely on a transaction. The
    /// default passes the arguments through.
    fn prepare_outside(
        &self,
        file: &mut AdfFile,
        caller: &ToolCaller,
        args: Value,
    ) -> Result<Value, ToolError> {
        let _ = (file, caller);
        Ok(args)
    }

    /// The network work: an owned future the caller awaits outside any store transaction.
    /// `caller` lets the tool shape its result for code (bytes as `Uint8Array`) or for the
    /// model (text only). `None` when the call cannot be carried out (the caller reports it).
    fn detach(&self, config: &Value, caller: &ToolCaller, args: Value) -> Option<Detached>;
}

/// The body of an [`Execution::Hosted`] tool.
pub trait HostedTool: Send + Sync {
    /// A future awaited outside any transaction with the registry, so each inner call is a
    /// whole pipeline call of its own for the same caller (access, approvals, audit, one
    /// transaction each); inner calls the pipeline defers (`sys_fetch`, `sys_code`) go to
    /// [`HostedContext::driver`].
    fn run_hosted<'a>(&'a self, cx: HostedContext<'a>, args: Value) -> HostedFuture<'a>;
}

/// What a [`HostedTool::run_hosted`] body may use: the file (no transaction open), the registry
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
    /// Carries out inner calls the pipeline returned as [`CallOutcome::Deferred`](super::CallOutcome::Deferred).
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

    /// Completes when other work of the agent waits for the file the hosted body holds (the
    /// daemon's queued store jobs) and the body has been waiting on its own for a while (a
    /// shell's `sleep`): the body then lends the file ([`DeferredDriver::serve_queued`])
    /// between two inner calls. Never completes by default.
    fn queued(&self) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(std::future::pending())
    }

    /// Carries out the work [`DeferredDriver::queued`] announced with `file`, on which no
    /// transaction is open (each of the body's inner calls is one transaction of its own).
    fn serve_queued(&mut self, file: &mut AdfFile) {
        let _ = file;
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
    /// Where agent code's npm packages come from (none: bare imports fail).
    packages: Option<Arc<dyn crate::code::PackageModules>>,
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
    /// Adds or replaces a tool.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_owned(), tool);
    }

    /// Adds a source asked for the names no registered tool has (in the order added).
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push(source);
    }

    /// Agent code resolves bare imports through `packages` (adf-packages' store): every
    /// runner of this registry's tools and code asks it.
    pub fn attach_packages(&mut self, packages: Arc<dyn crate::code::PackageModules>) {
        self.packages = Some(packages);
    }

    /// The attached package modules, if any.
    pub fn packages(&self) -> Option<&Arc<dyn crate::code::PackageModules>> {
        self.packages.as_ref()
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
}
