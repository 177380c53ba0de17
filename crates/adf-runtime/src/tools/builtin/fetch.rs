//! `sys_fetch`: an HTTP request under the agent's egress policy (tools guide "HTTP Fetch
//! Tool", adf-object guide "sys_fetch", spec §5.6, missing-tables §10.5).
//!
//! An [`Execution::Detached`] tool: the pipeline decides declaration, access
//! and approval, then the caller awaits the request outside any store transaction (a slow
//! server never holds the file's write lock) and writes the failure's `adf_logs` row once it
//! holds the file again. The engine, the §5.6 address rules and the body/timeout limits are in
//! [`crate::fetch`]; this module maps arguments in and shapes the result: a binary body is
//! bytes for code (a `Uint8Array` that `fs_write` stores as binary) and base64 with
//! `_body_encoding: "base64"` for the model.
//!
//! `security.fetch_middleware` (§12.3, SRV-30) runs in [`DetachedTool::prepare_outside`], before
//! the engine and outside the call's transaction (its lambdas may wait while the agent's other
//! work goes on): its `data` is the call's parameters, a rejection is the call's error, and
//! what the chain lets through (checked against the schema again) is the request; a changed
//! URL still meets the address rules in the engine. `prepare_outside` hands the request on as
//! `{"request": params, "middleware_applied": true}`, and only such arguments make `detach`
//! send while fetch middleware is configured; any other path to the engine still refuses.

use std::sync::Arc;

use adf_store::AdfFile;
use serde_json::{Map, Value, json};

use crate::fetch::{self, FetchSettings, Policy};
use crate::middleware::{self, Point};
use crate::tools::{
    Detached, DetachedOutcome, DetachedTool, ErrorCode, Execution, Tool, ToolCaller, ToolContext,
    ToolError,
};

/// The marker `prepare_outside` sets on the arguments it hands to `detach`.
const MIDDLEWARE_APPLIED: &str = "middleware_applied";

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(SysFetch::default())]
}

/// The `sys_fetch` tool. [`SysFetch::with_settings`] lowers the body cap or injects a resolver
/// (tests register it in place of the built-in).
#[derive(Debug, Clone, Default)]
pub struct SysFetch {
    settings: FetchSettings,
}

impl SysFetch {
    /// A `sys_fetch` with these settings instead of the defaults.
    pub fn with_settings(settings: FetchSettings) -> Self {
        SysFetch { settings }
    }
}

impl Tool for SysFetch {
    declare_tool! {
        name: "sys_fetch",
        description: "Make an HTTP request (http/https only). Returns {status, status_text, ok, headers, body, url}; text bodies are strings, binary bodies base64 with _body_encoding: \"base64\". Private and link-local addresses are refused; bodies are capped at 25 MB.",
        parameters: json!({
            "type": "object",
            "properties": {
                "url": { "type": "string", "minLength": 1, "description": "The http or https URL." },
                "method": { "type": "string", "description": "HTTP method (default GET)." },
                "headers": { "type": "object", "description": "Request headers, name: value." },
                "body": { "type": "string", "description": "Request body." },
                "timeout_ms": {
                    "type": "number",
                    "minimum": 1,
                    "maximum": fetch::MAX_TIMEOUT_MS,
                    "description": "Time limit for the whole request in ms (default 30000, at most 60000)."
                }
            },
            "required": ["url"],
            "additionalProperties": false
        }),
    }

    /// Never reached: the pipeline hands deferred tools back (`CallOutcome::Deferred`) and
    /// queued tasks start through `ToolRegistry::start_task`, which detaches them. A network
    /// call must not run inside the store transaction `run` is given.
    fn run(&self, _cx: &mut ToolContext<'_>, _args: Value) -> Result<Value, ToolError> {
        Err(ToolError::new(
            ErrorCode::InternalError,
            "sys_fetch runs outside the store transaction (ToolRegistry::detach)",
        ))
    }

    fn execution(&self) -> Execution<'_> {
        Execution::Detached(self)
    }
}

impl DetachedTool for SysFetch {
    /// The fetch middleware chain, outside the call's transaction: its lambdas may wait (for a
    /// server, a model, a timer), and a waiting holder of the file lends it to the agent's
    /// queued jobs meanwhile, which a transaction would forbid. Its log rows stay when it
    /// refuses, as the inbox chain's do.
    fn prepare_outside(
        &self,
        file: &mut AdfFile,
        _caller: &ToolCaller,
        args: Value,
    ) -> Result<Value, ToolError> {
        let request = middleware::run_chain(file, Point::Fetch, args, Map::new())
            .map_err(|rejection| ToolError::new(ErrorCode::ToolError, rejection.to_string()))?
            .data;
        crate::tools::validate::validate(&self.parameters(), &request).map_err(|why| {
            ToolError::invalid(format!(
                "fetch middleware returned parameters sys_fetch does not take: {why}"
            ))
        })?;
        Ok(json!({ "request": request, MIDDLEWARE_APPLIED: true }))
    }

    fn detach(&self, config: &Value, caller: &ToolCaller, args: Value) -> Option<Detached> {
        let (args, config) = match args {
            Value::Object(mut prepared)
                if prepared.get(MIDDLEWARE_APPLIED) == Some(&json!(true)) =>
            {
                let request = prepared.remove("request").unwrap_or(Value::Null);
                let mut config = config.clone();
                if let Some(security) = config.get_mut("security").and_then(Value::as_object_mut) {
                    // The chain ran in `prepare`; the engine's own refusal is for fetches
                    // that did not pass it.
                    security.remove("fetch_middleware");
                }
                (request, std::borrow::Cow::Owned(config))
            }
            unprepared => (unprepared, std::borrow::Cow::Borrowed(config)),
        };
        let config = config.as_ref();
        let for_code = matches!(caller, ToolCaller::Code { .. });
        let method = args
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("GET")
            .to_owned();
        let prepared = Policy::from_config(config).and_then(|policy| {
            fetch::request_from_tool_args(&args).map(|request| (request, policy))
        });
        let settings = self.settings.clone();
        Some(Box::pin(async move {
            let result = match prepared {
                Ok((request, policy)) => fetch::fetch(request, policy, settings).await,
                Err(error) => Err(error),
            };
            match result {
                Ok(response) => DetachedOutcome::from(Ok(response.tool_value(for_code))),
                Err(error) => error.outcome("sys_fetch", &method),
            }
        }))
    }
}
