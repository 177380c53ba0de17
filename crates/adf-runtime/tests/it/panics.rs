//! A panicking tool or detached call is that call's error: its writes roll back, and the file
//! (and whoever holds it — the daemon's store worker, `adf tool`) carries on with the next call.

use std::sync::Arc;

use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{
    CallOutcome, Detached, DetachedTool, ErrorCode, Execution, Tool, ToolCaller, ToolContext,
    ToolError, ToolRegistry,
};
use serde_json::{Value, json};

use crate::common;

/// Writes a meta key, then panics, inside the call's transaction.
struct PanicsMidWrite;

impl Tool for PanicsMidWrite {
    fn name(&self) -> &'static str {
        "panics_mid_write"
    }
    fn description(&self) -> &'static str {
        "test tool"
    }
    fn parameters(&self) -> Value {
        json!({ "type": "object", "properties": {} })
    }
    fn run(&self, cx: &mut ToolContext<'_>, _args: Value) -> Result<Value, ToolError> {
        cx.file
            .meta_set(adf_store::Caller::Owner, "half_written", "yes", None)?;
        panic!("the tool broke half way");
    }
}

/// A deferred tool whose detached half panics.
struct PanicsDetached;

impl Tool for PanicsDetached {
    fn name(&self) -> &'static str {
        "panics_detached"
    }
    fn description(&self) -> &'static str {
        "test tool"
    }
    fn parameters(&self) -> Value {
        json!({ "type": "object", "properties": {} })
    }
    fn run(&self, _cx: &mut ToolContext<'_>, _args: Value) -> Result<Value, ToolError> {
        Err(ToolError::failed("runs detached only"))
    }

    fn execution(&self) -> Execution<'_> {
        Execution::Detached(self)
    }
}

impl DetachedTool for PanicsDetached {
    fn detach(&self, _config: &Value, _caller: &ToolCaller, _args: Value) -> Option<Detached> {
        Some(Box::pin(async { panic!("the delivery broke") }))
    }
}

fn registry() -> ToolRegistry {
    let mut registry = ToolRegistry::with_builtins();
    registry.register(Arc::new(PanicsMidWrite));
    registry.register(Arc::new(PanicsDetached));
    registry
}

/// Calls `tool` with no arguments as the owner, every approval denied.
fn call_as_owner(
    registry: &ToolRegistry,
    file: &mut adf_store::AdfFile,
    tool: &str,
) -> Result<CallOutcome, adf_runtime::tools::ToolError> {
    registry.call(file, &ToolCaller::Owner, tool, json!({}), &DenyAll)
}

#[test]
fn a_panicking_tool_is_the_calls_error_and_its_writes_roll_back() {
    let (_dir, _path, mut file) = common::new_agent();
    let registry = registry();
    let error = call_as_owner(&registry, &mut file, "panics_mid_write").unwrap_err();
    assert_eq!(error.code, ErrorCode::InternalError, "{error}");
    assert!(error.message.contains("the tool broke half way"), "{error}");
    assert!(file.meta_get("half_written").unwrap().is_none());
    // The file is out of the transaction and takes the next call.
    file.meta_set(adf_store::Caller::Owner, "after", "ok", None)
        .unwrap();
    assert_eq!(file.meta_get("after").unwrap().unwrap().value, "ok");
}

#[tokio::test]
async fn a_panicking_detached_call_is_the_calls_error() {
    let (_dir, _path, mut file) = common::new_agent();
    let registry = registry();
    let outcome = call_as_owner(&registry, &mut file, "panics_detached").unwrap();
    let CallOutcome::Deferred(call) = outcome else {
        panic!("a deferred tool must defer, got {outcome:?}");
    };
    let error = registry
        .run_detached(&mut file, &ToolCaller::Owner, &call)
        .await
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::InternalError, "{error}");
    assert!(error.message.contains("the delivery broke"), "{error}");
}
