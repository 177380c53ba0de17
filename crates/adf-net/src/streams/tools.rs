//! `stream_bind`, `stream_unbind`, `stream_bindings` (tools guide "Stream Binding Tools"):
//! deferred tools whose work runs detached, outside the store transaction, on [`Streams`].

use std::sync::Arc;

use serde_json::{Value, json};

use adf_runtime::tools::{
    Detached, DetachedOutcome, DetachedTool, ErrorCode, Tool, ToolCaller, ToolError,
};

use super::{BindRequest, StreamError, Streams};
use crate::tools::{done, runs_detached};

/// The three stream tools over one [`Streams`].
#[derive(Debug, Clone)]
pub struct StreamTools(Arc<Streams>);

impl StreamTools {
    /// `stream_bind`, `stream_unbind` and `stream_bindings`.
    pub fn tools(streams: Arc<Streams>) -> Vec<Arc<dyn Tool>> {
        let shared = StreamTools(streams);
        vec![
            Arc::new(StreamBind(shared.clone())),
            Arc::new(StreamUnbind(shared.clone())),
            Arc::new(StreamBindingsTool(shared)),
        ]
    }
}

fn agent_id(config: &Value) -> Result<String, ToolError> {
    config
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| ToolError::new(ErrorCode::InternalError, "the agent has no config id"))
}

fn tool_error(error: StreamError) -> ToolError {
    match error {
        StreamError::Invalid(why) => ToolError::invalid(why),
        StreamError::Refused(why) => ToolError::new(ErrorCode::ToolError, why),
        StreamError::NotSupported(why) => ToolError::new(ErrorCode::Disabled, why),
        StreamError::Failed(why) => ToolError::new(ErrorCode::ToolError, why),
    }
}

struct StreamBind(StreamTools);

impl Tool for StreamBind {
    adf_runtime::declare_tool! {
        name: "stream_bind",
        description: "Bind two byte endpoints (ws, tcp, process, umbilical) so the runtime pumps data between them outside the loop. Returns binding_id.",
        parameters: json!({
            "type": "object",
            "properties": {
                "a": { "type": "object", "description": "source endpoint: {kind: ws|tcp|process|umbilical, ...}" },
                "b": { "type": "object", "description": "sink endpoint: {kind: ws|tcp|process, ...}" },
                "bidirectional": { "type": "boolean" },
                "options": {
                    "type": "object",
                    "properties": {
                        "idle_timeout_ms": { "type": "integer" },
                        "max_duration_ms": { "type": "integer" },
                        "max_bytes": { "type": "integer" },
                        "flow_summary_interval_ms": { "type": "integer" },
                        "close_a_on_b_close": { "type": "boolean" },
                        "close_b_on_a_close": { "type": "boolean" }
                    }
                }
            },
            "required": ["a", "b"]
        }),
    }
    runs_detached!();
}

impl DetachedTool for StreamBind {
    fn detach(&self, config: &Value, _caller: &ToolCaller, args: Value) -> Option<Detached> {
        let streams = Arc::clone(&self.0.0);
        let agent = agent_id(config);
        // `reconnect` belongs to declarations; an imperative binding ends with its endpoint.
        let request = BindRequest::parse(&args).map(|mut request| {
            request.reconnect = false;
            request
        });
        let config = config.clone();
        Some(Box::pin(async move {
            let result = async {
                let agent = agent?;
                let request = request.map_err(tool_error)?;
                let id = streams
                    .bind(&agent, &config, request)
                    .await
                    .map_err(tool_error)?;
                Ok(json!({ "binding_id": id }))
            }
            .await;
            DetachedOutcome {
                result,
                logs: Vec::new(),
                deliveries: Vec::new(),
            }
        }))
    }
}

struct StreamUnbind(StreamTools);

impl Tool for StreamUnbind {
    adf_runtime::declare_tool! {
        name: "stream_unbind",
        description: "Terminate a stream binding by binding_id, closing both endpoints. Returns { ok: true }.",
        parameters: json!({
            "type": "object",
            "properties": { "binding_id": { "type": "string" } },
            "required": ["binding_id"]
        }),
    }
    runs_detached!();
}

impl DetachedTool for StreamUnbind {
    fn detach(&self, config: &Value, _caller: &ToolCaller, args: Value) -> Option<Detached> {
        let result = agent_id(config).and_then(|agent| {
            let id = args
                .get("binding_id")
                .and_then(Value::as_str)
                .ok_or_else(|| ToolError::invalid("binding_id is required"))?;
            if self.0.0.unbind(&agent, id) {
                Ok(json!({ "ok": true }))
            } else {
                Err(ToolError::invalid(format!("no stream binding '{id}'")))
            }
        });
        Some(done(result))
    }
}

struct StreamBindingsTool(StreamTools);

impl Tool for StreamBindingsTool {
    adf_runtime::declare_tool! {
        name: "stream_bindings",
        description: "List this agent's stream bindings with their endpoints, origin, status and byte counters.",
        parameters: json!({ "type": "object", "properties": {} }),
    }
    runs_detached!();
}

impl DetachedTool for StreamBindingsTool {
    fn detach(&self, config: &Value, _caller: &ToolCaller, _args: Value) -> Option<Detached> {
        let result = agent_id(config).map(|agent| json!({ "bindings": self.0.0.list(&agent) }));
        Some(done(result))
    }
}
