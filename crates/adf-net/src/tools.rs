//! The WebSocket tools (tools guide "WebSocket Tools"): `ws_connect`, `ws_send`,
//! `ws_disconnect`, `ws_connections`. Each is a deferred tool whose network part runs
//! detached (outside the store transaction), through [`Outbound`] (and, for inbound
//! connections, the host's [`Serving`]).
//!
//! An ad-hoc `ws_connect` (by `url`) with `persist` (the default) is saved to `ws_connections`
//! once it is open: one config write through the store's checked path
//! (`AdfFile::config_write_checked`, as the caller), on a guest connection, since the detached
//! part runs outside the store transaction.
//!
//! `ws_send` and `ws_disconnect` take the id of an inbound connection (a client of the
//! agent's `WS` route, the `connection_id` of its route lambda's events) as well as an
//! outbound one; `ws_connections` lists both.

use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use adf_runtime::tools::{Detached, DetachedOutcome, DetachedTool, ErrorCode, Tool, ToolError};

use crate::outbound::{Outbound, OutboundSpec};
use crate::{AgentDirectory, Serving};

/// Where the host keeps its [`Serving`] once it serves (for inbound connections).
pub type ServingCell = Arc<OnceLock<Arc<Serving>>>;

/// What every WebSocket tool works with.
#[derive(Clone)]
pub struct WsTools {
    outbound: Arc<Outbound>,
    directory: Arc<dyn AgentDirectory>,
    serving: ServingCell,
}

impl std::fmt::Debug for WsTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsTools").finish_non_exhaustive()
    }
}

impl WsTools {
    /// The four tools over `outbound`, finding agents in `directory`.
    pub fn tools(
        outbound: Arc<Outbound>,
        directory: Arc<dyn AgentDirectory>,
        serving: ServingCell,
    ) -> Vec<Arc<dyn Tool>> {
        let shared = WsTools {
            outbound,
            directory,
            serving,
        };
        vec![
            Arc::new(WsConnect(shared.clone())),
            Arc::new(WsSend(shared.clone())),
            Arc::new(WsDisconnect(shared.clone())),
            Arc::new(WsConnections(shared)),
        ]
    }
}

/// The egress policy of an agent config for WebSockets (§5.6, the same rules as fetch).
pub fn ws_policy(config: &Value) -> adf_egress::Policy {
    adf_egress::Policy {
        allow_local: config
            .pointer("/security/allow_local_fetch")
            .and_then(Value::as_bool)
            == Some(true),
        served_origins: Vec::new(),
        control_apis: adf_runtime::fetch::recorded_control_apis(None),
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

/// A detached tool's answer that needs no log row or delivery.
pub(crate) fn done(result: Result<Value, ToolError>) -> Detached {
    Box::pin(async move {
        DetachedOutcome {
            result,
            logs: Vec::new(),
            deliveries: Vec::new(),
        }
    })
}

/// The answer of a detached tool asked to run inside the store transaction.
pub(crate) fn not_in_transaction(name: &str) -> ToolError {
    ToolError::new(
        ErrorCode::InternalError,
        format!("{name} runs outside the store transaction (ToolRegistry::detach)"),
    )
}

/// The `run` and `execution` of a tool whose whole work is its
/// [`DetachedTool::detach`] future: the pipeline never runs it inside the store transaction.
macro_rules! runs_detached {
    () => {
        fn run(
            &self,
            _cx: &mut adf_runtime::tools::ToolContext<'_>,
            _args: serde_json::Value,
        ) -> Result<serde_json::Value, adf_runtime::tools::ToolError> {
            Err($crate::tools::not_in_transaction(self.name()))
        }

        fn execution(&self) -> adf_runtime::tools::Execution<'_> {
            adf_runtime::tools::Execution::Detached(self)
        }
    };
}
pub(crate) use runs_detached;

struct WsConnect(WsTools);

impl Tool for WsConnect {
    adf_runtime::declare_tool! {
        name: "ws_connect",
        description: "Open a WebSocket connection: by the id of a ws_connections entry, or ad hoc by url. Returns connection_id.",
        parameters: json!({
            "type": "object",
            "properties": {
                "id": { "type": "string" },
                "url": { "type": "string" },
                "did": { "type": "string" },
                "lambda": { "type": "string" },
                "persist": { "type": "boolean" },
                "auto_reconnect": { "type": "boolean" },
                "reconnect_delay_ms": { "type": "integer" },
                "keepalive_interval_ms": { "type": "integer" },
                "connect_timeout_ms": { "type": "integer" },
                "auth": { "type": "string", "enum": ["auto", "required", "none"] }
            }
        }),
    }
    runs_detached!();
}

impl DetachedTool for WsConnect {
    fn detach(
        &self,
        config: &Value,
        caller: &adf_runtime::tools::ToolCaller,
        args: Value,
    ) -> Option<Detached> {
        let tools = self.0.clone();
        let entry = match args.get("id").and_then(Value::as_str) {
            Some(id) => config
                .get("ws_connections")
                .and_then(Value::as_array)
                .and_then(|list| {
                    list.iter()
                        .find(|c| c.get("id").and_then(Value::as_str) == Some(id))
                })
                .cloned()
                .ok_or_else(|| ToolError::invalid(format!("no ws_connections entry '{id}'"))),
            None if args.get("url").is_some() => Ok(args.clone()),
            None => Err(ToolError::invalid("ws_connect needs an id or a url")),
        };
        let ad_hoc = args.get("id").is_none();
        let persist = args.get("persist").and_then(Value::as_bool) != Some(false);
        let agent = agent_id(config);
        let policy = ws_policy(config);
        let store_caller = caller.store_caller();
        // An ad-hoc connection to a url a config entry already names is that entry.
        let saved = args.get("url").and_then(Value::as_str).and_then(|url| {
            config
                .get("ws_connections")
                .and_then(Value::as_array)?
                .iter()
                .find(|c| c.get("url").and_then(Value::as_str) == Some(url))?
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        Some(Box::pin(async move {
            let result = async {
                let entry = entry?;
                let agent = agent?;
                let mut spec =
                    OutboundSpec::from_entry(&entry, policy).map_err(ToolError::invalid)?;
                let saving = ad_hoc && persist;
                if saving {
                    spec.config_id =
                        Some(saved.clone().unwrap_or_else(|| {
                            format!("ws-{}", adf_store::defaults::random_id(8))
                        }));
                }
                let served = tools.directory.find(&agent).ok_or_else(|| {
                    ToolError::new(ErrorCode::InternalError, "the agent is not loaded")
                })?;
                let config_id = spec.config_id.clone();
                let path = served.path.clone();
                let id = tools
                    .outbound
                    .connect(served, spec)
                    .await
                    .map_err(|why| ToolError::new(ErrorCode::InternalError, why))?;
                let mut answer = json!({ "connection_id": id });
                if let (true, Some(config_id)) = (saving, config_id) {
                    answer["id"] = json!(config_id);
                    if saved.is_some() {
                        answer["persisted"] = json!(true);
                    } else {
                        let saved_entry = persisted_entry(&entry, &config_id);
                        let written = tokio::task::spawn_blocking(move || {
                            save_connection(&path, store_caller, saved_entry)
                        })
                        .await
                        .unwrap_or_else(|e| Err(format!("the config write failed: {e}")));
                        match written {
                            Ok(()) => answer["persisted"] = json!(true),
                            Err(why) => {
                                answer["persisted"] = json!(false);
                                answer["error"] = json!(why);
                            }
                        }
                    }
                }
                Ok(answer)
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

/// The `ws_connections` fields (§5.15) an ad-hoc `ws_connect` saves, under `id`.
const SAVED_FIELDS: [&str; 10] = [
    "url",
    "did",
    "lambda",
    "auth",
    "auto_reconnect",
    "reconnect_delay_ms",
    "keepalive_interval_ms",
    "connect_timeout_ms",
    "high_water_mark_bytes",
    "enabled",
];

fn persisted_entry(args: &Value, id: &str) -> Value {
    let mut entry = serde_json::Map::new();
    entry.insert("id".into(), json!(id));
    entry.insert("enabled".into(), json!(true));
    for field in SAVED_FIELDS {
        if let Some(value) = args.get(field).filter(|v| !v.is_null()) {
            entry.insert(field.into(), value.clone());
        }
    }
    Value::Object(entry)
}

/// Appends `entry` to the agent's `ws_connections` in one checked config write as `caller`.
fn save_connection(
    path: &std::path::Path,
    caller: adf_store::Caller,
    entry: Value,
) -> Result<(), String> {
    let mut file =
        adf_store::AdfFile::open_guest(path).map_err(|e| format!("cannot open the agent: {e}"))?;
    let mut config = file
        .config()
        .map_err(|e| format!("cannot read the config: {e}"))?;
    let Some(object) = config.as_object_mut() else {
        return Err("the config is not an object".into());
    };
    let list = object
        .entry("ws_connections")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Some(list) = list.as_array_mut() else {
        return Err("ws_connections is not an array".into());
    };
    list.push(entry);
    file.config_write_checked(caller, config, None)
        .map_err(|e| format!("ws_connections was not saved: {e}"))
}

struct WsSend(WsTools);

impl Tool for WsSend {
    adf_runtime::declare_tool! {
        name: "ws_send",
        description: "Send one text (default) or binary frame over an open WebSocket connection (inbound or outbound).",
        parameters: json!({
            "type": "object",
            "properties": {
                "connection_id": { "type": "string" },
                "data": {},
                "binary": { "type": "boolean" }
            },
            "required": ["connection_id", "data"]
        }),
    }
    runs_detached!();
}

impl DetachedTool for WsSend {
    fn detach(
        &self,
        config: &Value,
        _caller: &adf_runtime::tools::ToolCaller,
        args: Value,
    ) -> Option<Detached> {
        let tools = self.0.clone();
        let agent = agent_id(config);
        let connection = args
            .get("connection_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let frame = frame_of(&args);
        Some(Box::pin(async move {
            let result = async {
                let agent = agent?;
                let frame = frame?;
                let bytes = match &frame {
                    Message::Text(text) => text.len(),
                    Message::Binary(bytes) => bytes.len(),
                    _ => 0,
                };
                match tools
                    .serving
                    .get()
                    .filter(|serving| serving.has_connection(&agent, &connection))
                {
                    Some(serving) => serving.send(&agent, &connection, frame).await,
                    None => tools.outbound.send(&agent, &connection, frame).await,
                }
                .map_err(ToolError::invalid)?;
                Ok(json!({ "sent": true, "bytes": bytes }))
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

/// Text by default; bytes from code (a `Uint8Array`) or base64 with `binary: true`.
fn frame_of(args: &Value) -> Result<Message, ToolError> {
    let data = args.get("data").unwrap_or(&Value::Null);
    if let Some(bytes) = adf_sandbox::value_bytes(data) {
        return Ok(Message::Binary(bytes.into()));
    }
    let binary = args.get("binary").and_then(Value::as_bool) == Some(true);
    match data {
        Value::String(text) if binary => base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map(|bytes| Message::Binary(bytes.into()))
            .map_err(|e| ToolError::invalid(format!("data is not base64: {e}"))),
        Value::String(text) => Ok(Message::Text(text.clone().into())),
        Value::Null => Err(ToolError::invalid("data is required")),
        other => Ok(Message::Text(other.to_string().into())),
    }
}

struct WsDisconnect(WsTools);

impl Tool for WsDisconnect {
    adf_runtime::declare_tool! {
        name: "ws_disconnect",
        description: "Close an open WebSocket connection by its connection_id or config id.",
        parameters: json!({
            "type": "object",
            "properties": {
                "connection_id": { "type": "string" },
                "id": { "type": "string" }
            }
        }),
    }
    runs_detached!();
}

impl DetachedTool for WsDisconnect {
    fn detach(
        &self,
        config: &Value,
        _caller: &adf_runtime::tools::ToolCaller,
        args: Value,
    ) -> Option<Detached> {
        let key = args
            .get("connection_id")
            .or_else(|| args.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let result = agent_id(config).and_then(|agent| {
            let key = key.ok_or_else(|| {
                ToolError::invalid("ws_disconnect needs a connection_id or an id")
            })?;
            let inbound = self
                .0
                .serving
                .get()
                .is_some_and(|serving| serving.disconnect(&agent, &key));
            if inbound || self.0.outbound.disconnect(&agent, &key) {
                Ok(json!({ "ok": true }))
            } else {
                Err(ToolError::invalid(format!("no open connection '{key}'")))
            }
        });
        Some(done(result))
    }
}

struct WsConnections(WsTools);

impl Tool for WsConnections {
    adf_runtime::declare_tool! {
        name: "ws_connections",
        description: "List open WebSocket connections (inbound and outbound), optionally by direction.",
        parameters: json!({
            "type": "object",
            "properties": { "direction": { "type": "string", "enum": ["inbound", "outbound"] } }
        }),
    }
    runs_detached!();
}

impl DetachedTool for WsConnections {
    fn detach(
        &self,
        config: &Value,
        _caller: &adf_runtime::tools::ToolCaller,
        args: Value,
    ) -> Option<Detached> {
        let direction = args
            .get("direction")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let result = agent_id(config).map(|agent| {
            let mut listed = Vec::new();
            if direction.as_deref() != Some("outbound")
                && let Some(serving) = self.0.serving.get()
            {
                for c in serving.connections(&agent) {
                    listed.push(json!({
                        "connection_id": c.id,
                        "direction": "inbound",
                        "remote_did": c.remote_did,
                        "connected_at": c.connected_at,
                    }));
                }
            }
            if direction.as_deref() != Some("inbound") {
                for c in self.0.outbound.list(&agent) {
                    listed.push(json!({
                        "connection_id": c.id,
                        "id": c.config_id,
                        "direction": "outbound",
                        "url": c.url,
                        "remote_did": c.remote_did,
                        "status": c.status,
                        "connected_at": c.connected_at,
                        "last_message_at": c.last_message_at,
                        "buffered_bytes": c.buffered_bytes,
                    }));
                }
            }
            json!({ "connections": listed })
        });
        Some(done(result))
    }
}
