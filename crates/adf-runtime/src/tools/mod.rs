//! The tool registry and the one place tool calls are decided and run.
//!
//! Principal types: [`Tool`] (one tool: name, JSON Schema, `run`, and how a call is carried
//! out: [`Execution`] in a transaction, detached ([`DetachedTool`]), hosted ([`HostedTool`]) or
//! by the code runner), [`ToolSource`] (tools that come from elsewhere than the built-in list,
//! per agent config), [`ToolRegistry`] (every tool by name; [`ToolRegistry::call`] is the
//! whole call pipeline), [`ToolCaller`] and the access predicates in [`access`], [`ToolError`]
//! with its stable [`ErrorCode`]s, and the human-in-the-loop pieces in [`approval`].
//!
//! The files are layered so no two import each other: error.rs, access.rs, validate.rs and
//! outcome.rs (what a call ends with) are leaves; approval.rs asks the owner; tool.rs holds
//! [`Tool`], its contexts and the registry's lookups; pipeline.rs is the call pipeline
//! (`impl ToolRegistry`); the built-ins import only those, and builtin/mod.rs assembles them
//! ([`ToolRegistry::with_builtins`]). This file only re-exports.

pub mod access;
pub mod approval;
pub mod builtin;
mod error;
mod outcome;
mod pipeline;
mod tool;
pub mod validate;

pub use access::{Access, Declaration, ToolCaller};
pub use approval::{ApprovalRequest, Approver, Decision, OwnerWait};
pub use error::{ErrorCode, ProtectionHit, ToolError};
pub use outcome::{
    CallOutcome, DeferredCall, DeliveryRecord, Detached, DetachedOutcome, HostedFuture, LogRow,
    TaskRun, render, write_logs,
};
pub use pipeline::{CallStep, MESH_TOOLS, PendingCall};
pub use tool::{
    DeferredDriver, DetachedTool, Execution, HostedContext, HostedTool, Tool, ToolContext,
    ToolRegistry, ToolSource,
};
