//! Built-in tools: `msg_send` and `agent_discover` (tools guide "Messaging Tools"; the
//! pipeline lives in [`crate::messaging`]).
//!
//! `msg_send` is a deferred tool in two halves: [`DetachedTool::prepare`] composes, signs and stores
//! the `pending` outbox row inside the call's transaction, and [`DetachedTool::detach`] delivers
//! outside it; the caller records `delivered` or `failed` on the row from the outcome. Every
//! runtime has it (direct sends to a DID and inbox URL need no daemon); the daemon registers a
//! copy connected to its [`Mesh`] for same-runtime agents and bare handles.
//! `agent_discover` exists only with a mesh: elsewhere it answers `MESH_NOT_ENABLED`.
//! `chat_info` (MSG-48) asks the agent's running channel adapter through the mesh, outside any
//! transaction; a runtime without a mesh runs no adapters and answers `{supported: false}`.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt as _;
use serde_json::{Value, json};

use crate::home::RuntimeHome;
use crate::identity::LocalKeys;
use crate::messaging::send::{self, Prepared, SendContext};
use crate::messaging::{ChatInfoRequest, Delivery, Mesh, Origin};
use crate::tools::{
    DeliveryRecord, Detached, DetachedOutcome, DetachedTool, ErrorCode, Execution, LogRow, Tool,
    ToolCaller, ToolContext, ToolError,
};

/// The tools of this family every runtime has.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(MsgSend::default()),
        Arc::new(ChatInfo { mesh: None }),
    ]
}

/// The tools of this family connected to a runtime's mesh (the daemon's).
pub fn with_mesh(mesh: Arc<dyn Mesh>, home: Option<RuntimeHome>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(MsgSend {
            mesh: Some(Arc::clone(&mesh)),
            home: home.clone(),
        }),
        Arc::new(super::create_adf::CreateAdf::hosted(
            Arc::clone(&mesh),
            home.clone(),
        )),
        Arc::new(ChatInfo {
            mesh: Some(Arc::clone(&mesh)),
        }),
        Arc::new(AgentDiscover { mesh }),
    ]
}

/// The installation's keys, read without creating anything.
fn keys(home: Option<&RuntimeHome>) -> Option<LocalKeys> {
    let home = match home {
        Some(home) => home.clone(),
        None => RuntimeHome::from_env().ok()?,
    };
    LocalKeys::existing(&home).ok()
}

/// `msg_send`.
#[derive(Debug, Clone, Default)]
pub struct MsgSend {
    mesh: Option<Arc<dyn Mesh>>,
    /// Where the installation keys live; `None` reads `$ADF_HOME` at call time.
    home: Option<RuntimeHome>,
}

impl Tool for MsgSend {
    declare_tool! {
        name: "msg_send",
        description: "Send a message to another agent. Reply with parent_id (recipient, address and thread come from that inbox message); or give recipient as a local agent's handle; or give recipient as a DID plus address (its inbox URL from agent_discover). Returns delivered, or an error saying why it was not.",
        parameters: json!({
            "type": "object",
            "properties": {
                "recipient": { "type": "string", "description": "A DID (did:key:…) or the handle of an agent on this runtime." },
                "address": { "type": "string", "description": "The recipient's inbox URL (needed for a DID of another runtime)." },
                "content": { "type": "string", "description": "The message." },
                "payload": { "type": "string", "description": "Alias of content." },
                "content_type": { "type": "string", "description": "Media type of content. Default text/plain; application/vnd.adf.form+json for a form." },
                "subject": { "type": "string" },
                "thread_id": { "type": "string", "description": "Conversation thread; inherited from parent_id when omitted." },
                "parent_id": { "type": "string", "description": "The inbox message id you reply to." },
                "attachments": { "type": "array", "items": { "type": "string" }, "description": "Paths of your files to attach." },
                "meta": { "type": "object", "description": "Private metadata for the recipient (encrypted with the content at security level 2)." },
                "message_meta": { "type": "object", "description": "Cleartext routing metadata on the outer message." }
            }
        }),
    }

    fn run(&self, _cx: &mut ToolContext<'_>, _args: Value) -> Result<Value, ToolError> {
        Err(ToolError::new(
            ErrorCode::InternalError,
            "msg_send delivers outside the store transaction (ToolRegistry::detach)",
        ))
    }

    fn execution(&self) -> Execution<'_> {
        Execution::Detached(self)
    }
}

impl DetachedTool for MsgSend {
    fn prepare(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let keys = keys(self.home.as_ref());
        let prepared = send::prepare(
            cx.file,
            cx.config,
            &args,
            SendContext {
                mesh: self.mesh.as_deref(),
                keys: keys.as_ref(),
            },
        )?;
        serde_json::to_value(prepared)
            .map_err(|e| ToolError::new(ErrorCode::InternalError, e.to_string()))
    }

    fn detach(&self, config: &Value, _caller: &ToolCaller, args: Value) -> Option<Detached> {
        let mesh = self.mesh.clone();
        // The same §5.6 policy as sys_fetch (without fetch middleware, which is for fetches).
        let policy = adf_egress::Policy {
            allow_local: config
                .pointer("/security/allow_local_fetch")
                .and_then(Value::as_bool)
                == Some(true),
            served_origins: Vec::new(),
            control_apis: crate::fetch::recorded_control_apis(self.home.as_ref()),
        };
        let sender_id = config.get("id").and_then(Value::as_str).map(str::to_owned);
        Some(Box::pin(async move {
            let prepared: Prepared = match serde_json::from_value(args) {
                Ok(prepared) => prepared,
                Err(_) => {
                    return DetachedOutcome::from(Err(ToolError::new(
                        ErrorCode::InternalError,
                        "msg_send was not prepared before delivery",
                    )));
                }
            };
            // A panic while delivering is that delivery's failure: the outbox row still
            // reaches its final status and the caller's worker carries on.
            let delivery = AssertUnwindSafe(send::deliver(
                &prepared,
                mesh.as_deref(),
                &policy,
                sender_id.as_deref(),
            ))
            .catch_unwind()
            .await
            .unwrap_or_else(|payload| {
                Delivery::failed(
                    None,
                    format!(
                        "the delivery stopped on an internal error: {}",
                        adf_egress::panic_message(payload.as_ref())
                    ),
                )
            });
            let logs = match (&delivery.delivered, &delivery.error) {
                (false, Some(reason)) => vec![LogRow {
                    level: "warn",
                    origin: "mesh",
                    event: "delivery_failed",
                    target: Some(prepared.outbox_id.clone()),
                    message: reason.clone(),
                    data: Some(json!({
                        "message_id": prepared.message_id,
                        "recipient": prepared.recipient,
                        "status_code": delivery.status_code,
                    })),
                }],
                _ => Vec::new(),
            };
            DetachedOutcome {
                result: send::result(&prepared, &delivery),
                logs,
                deliveries: vec![DeliveryRecord {
                    outbox_id: prepared.outbox_id.clone(),
                    delivered: delivery.delivered,
                    status_code: delivery.status_code,
                }],
            }
        }))
    }
}

/// `agent_discover`.
#[derive(Debug, Clone)]
pub struct AgentDiscover {
    mesh: Arc<dyn Mesh>,
}

impl Tool for AgentDiscover {
    declare_tool! {
        name: "agent_discover",
        description: "List the agents you can message: their signed cards (handle, description, DID, endpoints, policies) with visibility, in_subdirectory and source. You only see agents you could also message.",
        parameters: json!({
            "type": "object",
            "properties": {
                "scope": { "type": "string", "enum": ["local", "all"], "description": "local (default): this runtime's agents. all: also the agents LAN peers announce (mDNS, when the daemon runs with --lan)." },
                "visibility": { "type": "array", "items": { "type": "string", "enum": ["directory", "localhost", "lan", "public", "off"] }, "description": "Only agents of these tiers." },
                "handle": { "type": "string", "description": "Case-insensitive substring of the handle." },
                "description": { "type": "string", "description": "Case-insensitive substring of the description." },
                "include_subdirectories": { "type": "boolean", "description": "Include agents in subdirectories of yours (default true)." }
            }
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let sender = cx.file.path().to_path_buf();
        let sender_dir = sender.parent().map(std::path::Path::to_path_buf);
        let lower = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_lowercase);
        let handle = lower("handle");
        let description = lower("description");
        let tiers: Option<Vec<String>> =
            args.get("visibility").and_then(Value::as_array).map(|t| {
                t.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            });
        let include_subdirectories = args
            .get("include_subdirectories")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let origin = Origin::SameRuntime {
            sender: sender.clone(),
        };
        let mut cards = Vec::new();
        for agent in self.mesh.reachable_agents(&sender) {
            if agent.path == sender || !agent.tier.admits(&origin, &agent.path) {
                continue;
            }
            if handle
                .as_ref()
                .is_some_and(|h| !agent.handle.to_lowercase().contains(h))
                || description
                    .as_ref()
                    .is_some_and(|d| !agent.description.to_lowercase().contains(d))
                || tiers
                    .as_ref()
                    .is_some_and(|t| !t.iter().any(|t| t == agent.tier.as_str()))
            {
                continue;
            }
            let agent_dir = agent.path.parent().map(std::path::Path::to_path_buf);
            let in_subdirectory = match (&sender_dir, &agent_dir) {
                (Some(mine), Some(theirs)) => theirs != mine && theirs.starts_with(mine),
                _ => false,
            };
            if in_subdirectory && !include_subdirectories {
                continue;
            }
            let mut card = agent.card.clone();
            if let Some(object) = card.as_object_mut() {
                object.insert("visibility".into(), agent.tier.as_str().into());
                object.insert("in_subdirectory".into(), in_subdirectory.into());
                object.insert("source".into(), "local-runtime".into());
            }
            cards.push(card);
        }
        if args.get("scope").and_then(Value::as_str) == Some("all") {
            // Each peer listed only what it lets a LAN requester see (its card route checked
            // our origin); the same filters apply.
            for card in self.mesh.lan_cards() {
                let text = |key: &str| {
                    card.get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_lowercase()
                };
                if handle.as_ref().is_some_and(|h| !text("handle").contains(h))
                    || description
                        .as_ref()
                        .is_some_and(|d| !text("description").contains(d))
                    || tiers
                        .as_ref()
                        .is_some_and(|t| !t.iter().any(|t| *t == text("visibility")))
                {
                    continue;
                }
                cards.push(card);
            }
        }
        Ok(Value::Array(cards))
    }
}

/// `chat_info`: a chat's metadata through the agent's running channel adapter.
#[derive(Debug, Clone)]
pub struct ChatInfo {
    mesh: Option<Arc<dyn Mesh>>,
}

/// The most participants `chat_info` returns, and its default (tools guide).
const CHAT_INFO_MAX_LIMIT: u64 = 100;
const CHAT_INFO_DEFAULT_LIMIT: u64 = 50;

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::InvalidInput, message)
}

impl Tool for ChatInfo {
    declare_tool! {
        name: "chat_info",
        description: "Read-only metadata of a chat through a running channel adapter: title, description, participants (truncated), counts. Answers {supported: false, reason} when no adapter of that type runs for you.",
        parameters: json!({
            "type": "object",
            "properties": {
                "adapter": { "type": "string", "description": "Adapter type: telegram, email, slack, discord, whatsapp." },
                "chat_id": { "type": "string", "description": "The platform chat id (source_context.chat_id or channel_id of an inbox message)." },
                "limit": { "type": "integer", "minimum": 1, "maximum": 100, "description": "Max participants to return (default 50)." }
            },
            "required": ["adapter", "chat_id"]
        }),
    }

    fn run(&self, _cx: &mut ToolContext<'_>, _args: Value) -> Result<Value, ToolError> {
        Err(ToolError::new(
            ErrorCode::InternalError,
            "chat_info asks its adapter outside the store transaction (ToolRegistry::detach)",
        ))
    }

    fn execution(&self) -> Execution<'_> {
        Execution::Detached(self)
    }
}

impl DetachedTool for ChatInfo {
    /// Checks the arguments and adds the sender's file, by which the mesh finds its adapters.
    fn prepare(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let text = |key: &str| {
            args.get(key)
                .and_then(|v| match v {
                    Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
                    // Platform chat ids are often numbers (Telegram): take them as written.
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                })
                .ok_or_else(|| invalid(format!("{key} is required (a string)")))
        };
        let adapter = text("adapter")?;
        let chat_id = text("chat_id")?;
        let limit = match args.get("limit") {
            None | Some(Value::Null) => CHAT_INFO_DEFAULT_LIMIT,
            Some(value) => value
                .as_u64()
                .filter(|n| (1..=CHAT_INFO_MAX_LIMIT).contains(n))
                .ok_or_else(|| invalid(format!("limit is 1 to 100, not {value}")))?,
        };
        Ok(json!({
            "sender": cx.file.path(),
            "adapter": adapter,
            "chat_id": chat_id,
            "limit": limit,
        }))
    }

    fn detach(&self, _config: &Value, _caller: &ToolCaller, args: Value) -> Option<Detached> {
        let mesh = self.mesh.clone();
        Some(Box::pin(async move {
            let field = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_owned);
            let (Some(sender), Some(adapter), Some(chat_id)) =
                (field("sender"), field("adapter"), field("chat_id"))
            else {
                return DetachedOutcome::from(Err(ToolError::new(
                    ErrorCode::InternalError,
                    "chat_info was not prepared before it ran",
                )));
            };
            let limit = args
                .get("limit")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(50);
            let Some(mesh) = mesh else {
                return DetachedOutcome::from(Ok(json!({
                    "supported": false,
                    "reason": format!("no {adapter} adapter runs here: channel adapters run only in the daemon (adf daemon)"),
                })));
            };
            let request = ChatInfoRequest {
                adapter,
                chat_id,
                limit,
            };
            let answer = mesh
                .chat_info(std::path::Path::new(&sender), request)
                .await
                .map_err(|why| ToolError::new(ErrorCode::ToolError, why));
            DetachedOutcome::from(answer)
        }))
    }
}
