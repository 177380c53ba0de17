//! The daemon's mesh (§11, §12.1): the agents it hosts as message recipients. It implements
//! [`adf_runtime::messaging::Mesh`] for `msg_send` and `agent_discover`, and accepts what the
//! public mesh endpoints `POST /agents/{handle}/inbox`, `GET /agents/{handle}/card` and
//! `GET /agents/{handle}/health` receive (no bearer token: messages carry their own
//! signatures; their handlers are `api/mesh_routes.rs`).
//!
//! Principal type: [`DaemonMesh`].
//!
//! Why guest connections: an agent's store worker is held for the whole of a turn (model calls
//! included). A delivery that queued behind it would keep the sender waiting for minutes, and
//! two agents sending to each other mid-turn would wait on each other forever. Ingress and the
//! reads of discovery therefore open the recipient's file as a short-lived guest connection
//! (`AdfFile::open_guest`, SQLite's own locking orders it with the worker's short write
//! transactions), and the recipient's worker notices the new inbox row through the trigger
//! sweep (`watch::notice_new_rows`), which raises `on_inbox`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use serde_json::Value;

use adf_runtime::home::RuntimeHome;
use adf_runtime::identity::LocalKeys;
use adf_runtime::messaging::receive::{self, Arrival, Refusal};
use adf_runtime::messaging::{
    self, AdapterMessage, ChatInfoRequest, Delivery, LocalAgent, Mesh, Origin, Tier, card,
};
use adf_store::AdfFile;

use crate::error::ServerError;
use crate::registry::{Agent, AgentRegistry, LoadFuture};

/// Largest mesh request body: the ALF limit plus room for JSON framing.
pub const MAX_BODY_BYTES: usize = adf_crypto::alf::MAX_MESSAGE_BYTES + 64 * 1024;

/// What the mesh needs of the daemon that hosts it (the hub implements it; the mesh holds it
/// weakly, since the hub owns the mesh): its loaded agents, their outbound WebSockets, loading
/// an agent (a child `sys_create_adf` starts), and noticing the rows ingress wrote.
pub(crate) trait MeshHost: Send + Sync + std::fmt::Debug {
    /// The loaded agents (the roster version of `mesh_updates`).
    fn registry(&self) -> &AgentRegistry;
    /// Loaded agents in load order.
    fn agents(&self) -> Vec<Arc<Agent>>;
    /// The loaded agent whose id, handle or name is `key`.
    fn agent(&self, key: &str) -> Result<Arc<Agent>, ServerError>;
    /// Outbound WebSockets of every agent.
    fn outbound(&self) -> &Arc<adf_net::outbound::Outbound>;
    /// This mesh, for ingress from a task that outlives the call.
    fn mesh(&self) -> &Arc<DaemonMesh>;
    /// The daemon's load of the agent file at `path`, every subsystem started.
    fn load_agent(self: Arc<Self>, path: PathBuf) -> LoadFuture;
    /// Notices and dispatches what another connection wrote to `agent`'s file (one job).
    fn notice_new_rows(self: Arc<Self>, agent: Arc<Agent>) -> BoxFuture<'static, ()>;
}

/// The agents a daemon hosts, as the mesh sees them.
#[derive(Debug)]
pub struct DaemonMesh {
    hub: std::sync::Weak<dyn MeshHost>,
    home: RuntimeHome,
    /// `http://host:port` once the daemon serves HTTP.
    base_url: OnceLock<String>,
    /// The port agents' own content is served on (`crate::serving`, never the control port).
    serve_port: OnceLock<u16>,
    /// The daemon's runtime, for work that outlives the turn that caused it.
    runtime: Option<tokio::runtime::Handle>,
    /// What LAN discovery found (empty unless `adf daemon --lan`).
    lan: Arc<crate::lan_peers::LanPeers>,
}

impl DaemonMesh {
    pub(crate) fn new(hub: std::sync::Weak<dyn MeshHost>, home: RuntimeHome) -> Self {
        DaemonMesh {
            hub,
            home,
            base_url: OnceLock::new(),
            serve_port: OnceLock::new(),
            runtime: tokio::runtime::Handle::try_current().ok(),
            lan: Arc::default(),
        }
    }

    /// Whether LAN discovery runs (`adf daemon --lan`).
    pub(crate) fn lan_enabled(&self) -> bool {
        self.lan.enabled()
    }

    /// What LAN discovery found.
    pub(crate) fn lan_peers(&self) -> &Arc<crate::lan_peers::LanPeers> {
        &self.lan
    }

    /// The hosted agents other machines may see (§5.8: tiers `lan` and `public`), each read
    /// on a guest connection; a `localhost` or narrower agent is never among them.
    pub(crate) fn announced_agents(&self) -> Vec<LocalAgent> {
        let Some(hub) = self.hub.upgrade() else {
            return Vec::new();
        };
        hub.agents()
            .iter()
            .filter_map(|agent| self.describe(agent, false))
            .filter(|agent| agent.tier.admits(&Origin::Lan, &agent.path))
            .collect()
    }

    /// The roster version of the hosting daemon (`None` once it is gone).
    pub(crate) fn roster(&self) -> Option<u64> {
        Some(self.hub.upgrade()?.registry().roster_version())
    }

    /// Records where the daemon serves the mesh (first call wins).
    pub fn set_base_url(&self, url: String) {
        let _ = self.base_url.set(url);
    }

    /// The URL set by [`Self::set_base_url`]; `None` until the daemon listens.
    pub fn base_url(&self) -> Option<&str> {
        self.base_url.get().map(String::as_str)
    }

    /// Records the port of the agent-content listener (first call wins).
    pub fn set_serve_port(&self, port: u16) {
        let _ = self.serve_port.set(port);
    }

    /// The port set by [`Self::set_serve_port`]; `None` until the daemon listens.
    pub fn serve_port(&self) -> Option<u16> {
        self.serve_port.get().copied()
    }

    fn keys(&self) -> Option<LocalKeys> {
        LocalKeys::existing(&self.home).ok()
    }

    /// What a sender needs to know of a hosted agent, read on a guest connection; the card
    /// only when asked (it opens the agent's key).
    fn describe(&self, agent: &Agent, with_card: bool) -> Option<LocalAgent> {
        self.describe_at(agent, with_card, None)
    }

    /// [`Self::describe`] with endpoint URLs under `base` (the requester's view of this
    /// daemon, §11.5: endpoints are outside the signature) instead of the bound address.
    pub(crate) fn describe_at(
        &self,
        agent: &Agent,
        with_card: bool,
        base: Option<&str>,
    ) -> Option<LocalAgent> {
        let mut file = AdfFile::open_guest(&agent.path).ok()?;
        let config = file.config_shared().ok()?;
        let text = |key: &str| {
            config
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let handle = text("handle");
        let did = messaging::agent_did(&file).ok().flatten();
        let base = base.or(self.base_url()).unwrap_or("http://127.0.0.1");
        let card = if with_card {
            let mut card =
                card::build(&mut file, self.keys().as_ref(), base).unwrap_or(Value::Null);
            // WS routes are agent content: served on the serving port, not this one.
            if config.pointer("/card/endpoints/ws").is_none()
                && let Some(port) = self.serve_port()
                && let Some(ws) = card.pointer_mut("/endpoints/ws")
                && let Some(moved) = ws.as_str().and_then(|url| on_port(url, port))
            {
                *ws = Value::String(moved);
            }
            card
        } else {
            Value::Null
        };
        Some(LocalAgent {
            inbox_url: format!("{base}/agents/{handle}/inbox"),
            handle,
            did,
            description: text("description"),
            path: agent.path.clone(),
            tier: Tier::of(&config),
            card,
        })
    }

    /// The handle named by an inbox URL of this daemon.
    fn handle_of_url<'a>(&self, address: &'a str) -> Option<&'a str> {
        let base = self.base_url()?;
        address
            .strip_prefix(base)?
            .strip_prefix("/agents/")?
            .strip_suffix("/inbox")
            .filter(|h| !h.contains('/'))
    }

    /// Runs ingress for `agent` on a guest connection, then lets its worker notice the row.
    pub(crate) async fn accept(
        &self,
        agent: &Arc<Agent>,
        wire: Vec<u8>,
        origin: Origin,
        transport: &'static str,
    ) -> Result<receive::Accepted, Refusal> {
        let path = agent.path.clone();
        let keys = self.keys();
        let outcome = tokio::task::spawn_blocking(move || {
            let mut file = AdfFile::open_guest(&path)?;
            receive::accept(
                &mut file,
                &Arrival {
                    wire: &wire,
                    origin,
                    transport,
                    return_path: None,
                },
                keys.as_ref(),
            )
        })
        .await
        .map_err(|e| Refusal {
            status: 500,
            reason: e.to_string(),
        })??;
        if !outcome.duplicate
            && let (Some(daemon), Some(runtime)) = (self.hub.upgrade(), &self.runtime)
        {
            let agent = Arc::clone(agent);
            // The imports were written on a guest connection, which no job's file diff saw:
            // they are file changes of an outside writer like an owner's write (FIL-20), named
            // by the worker's check of other writers (also what the watcher would find, so
            // they are dispatched once, by whichever takes them first).
            runtime.spawn(async move {
                daemon.notice_new_rows(agent).await;
            });
        }
        Ok(outcome)
    }
}

impl Mesh for DaemonMesh {
    fn start_agent(&self, path: &Path) -> Result<(), String> {
        let (Some(hub), Some(runtime)) = (self.hub.upgrade(), &self.runtime) else {
            return Err("the daemon is shutting down".to_owned());
        };
        let path = path.to_path_buf();
        // Loading waits on the child's store worker and the registry's load lock, which a
        // tool call on the parent's worker must not hold up: the load runs on its own.
        runtime.spawn(async move {
            if let Err(error) = hub.load_agent(path.clone()).await {
                tracing::warn!(path = %path.display(), %error, "cannot start a new autostart agent");
            }
        });
        Ok(())
    }

    fn lan_cards(&self) -> Vec<Value> {
        self.lan.cards()
    }

    fn roster_version(&self) -> Option<u64> {
        Some(self.hub.upgrade()?.registry().roster_version())
    }

    fn hosts_adapters(&self) -> bool {
        true
    }

    fn deliver_to_adapter(
        &self,
        sender: &Path,
        message: AdapterMessage,
    ) -> BoxFuture<'static, Delivery> {
        let hub = self.hub.upgrade();
        let sender = sender.to_path_buf();
        Box::pin(async move {
            let Some(hub) = hub else {
                return Delivery::failed(Some(503), "the daemon is shutting down");
            };
            let Some(agent) = hub.agents().into_iter().find(|a| a.path == sender) else {
                return Delivery::failed(None, "the sending agent is no longer loaded");
            };
            let outbound = adf_adapters::OutboundMessage {
                outbox_id: message.outbox_id,
                recipient: message.recipient,
                content: message.content,
                content_type: message.content_type,
                source_context: message.source_context,
            };
            match agent.adapters().deliver(&outbound).await {
                Ok(delivered) => Delivery::accepted(delivered.status_code),
                Err(error) => Delivery::failed(error.status_code(), error.to_string()),
            }
        })
    }

    fn chat_info(
        &self,
        sender: &Path,
        request: ChatInfoRequest,
    ) -> BoxFuture<'static, Result<Value, String>> {
        let hub = self.hub.upgrade();
        let sender = sender.to_path_buf();
        Box::pin(async move {
            let Some(hub) = hub else {
                return Err("the daemon is shutting down".to_owned());
            };
            let Some(agent) = hub.agents().into_iter().find(|a| a.path == sender) else {
                return Err("the calling agent is no longer loaded".to_owned());
            };
            agent
                .adapters()
                .chat_info(&request.adapter, &request.chat_id, request.limit)
                .await
                .map_err(|error| error.to_string())
        })
    }

    fn deliver_over_socket(
        &self,
        sender_id: &str,
        recipient: &str,
        message: &Value,
    ) -> Option<BoxFuture<'static, Delivery>> {
        let hub = self.hub.upgrade()?;
        let open = hub
            .outbound()
            .list(sender_id)
            .into_iter()
            .any(|c| c.status == "open" && c.remote_did.as_deref() == Some(recipient));
        if !open {
            return None;
        }
        let (sender_id, recipient, message) =
            (sender_id.to_owned(), recipient.to_owned(), message.clone());
        Some(Box::pin(async move {
            match hub
                .outbound()
                .deliver_message(&sender_id, &recipient, &message)
                .await
            {
                Some(Ok(_ack)) => Delivery::accepted(202),
                Some(Err((status, why))) => Delivery::failed(status, why),
                None => Delivery::failed(None, "the WebSocket to the recipient closed"),
            }
        }))
    }

    fn reachable_agents(&self, sender: &Path) -> Vec<LocalAgent> {
        let Some(daemon) = self.hub.upgrade() else {
            return Vec::new();
        };
        let origin = Origin::SameRuntime {
            sender: sender.to_path_buf(),
        };
        daemon
            .agents()
            .iter()
            .filter(|agent| agent.path != sender)
            .filter_map(|agent| self.describe(agent, true))
            .filter(|agent| agent.tier.admits(&origin, &agent.path))
            .collect()
    }

    fn find(&self, recipient: &str, address: Option<&str>) -> Option<LocalAgent> {
        let daemon = self.hub.upgrade()?;
        let handle = match address {
            Some(address) => Some(self.handle_of_url(address)?),
            None if !recipient.starts_with("did:") => Some(recipient),
            None => None,
        };
        let agents = daemon.agents();
        match handle {
            Some(handle) => agents
                .iter()
                .find(|a| a.info().handle.as_deref() == Some(handle))
                .and_then(|a| self.describe(a, false)),
            None => agents
                .iter()
                .find(|a| a.info().did.as_deref() == Some(recipient))
                .and_then(|a| self.describe(a, false))
                .filter(|a| a.did.as_deref() == Some(recipient)),
        }
    }

    fn inbox_url(&self, handle: &str) -> Option<String> {
        Some(format!("{}/agents/{handle}/inbox", self.base_url()?))
    }

    fn deliver(
        &self,
        target: &LocalAgent,
        sender: &Path,
        message: Value,
    ) -> BoxFuture<'static, Delivery> {
        let daemon = self.hub.upgrade();
        let handle = target.handle.clone();
        let sender: PathBuf = sender.to_path_buf();
        Box::pin(async move {
            let Some(daemon) = daemon else {
                return Delivery::failed(Some(503), "the daemon is shutting down");
            };
            let Ok(agent) = daemon.agent(&handle) else {
                return Delivery::failed(Some(404), format!("agent '{handle}' is not loaded"));
            };
            let wire = match serde_json::to_vec(&message) {
                Ok(wire) => wire,
                Err(e) => return Delivery::failed(Some(400), e.to_string()),
            };
            match daemon
                .mesh()
                .accept(&agent, wire, Origin::SameRuntime { sender }, "local")
                .await
            {
                Ok(_) => Delivery::accepted(202),
                Err(refusal) => Delivery::failed(Some(refusal.status), refusal.reason),
            }
        })
    }
}

/// `url` (`scheme://host[:port]/path?query`) with its port set to `port`.
pub(crate) fn on_port(url: &str, port: u16) -> Option<String> {
    let uri: axum::http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?;
    let host = uri.authority()?.host();
    let rest = uri
        .path_and_query()
        .map_or("", axum::http::uri::PathAndQuery::as_str);
    Some(format!("{scheme}://{host}:{port}{rest}"))
}

/// Whether `method path` is a public mesh endpoint (served without the bearer token).
pub(crate) fn is_mesh_route(method: &axum::http::Method, path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/agents/") else {
        return false;
    };
    let mut parts = rest.splitn(2, '/');
    let (Some(handle), Some(tail)) = (parts.next(), parts.next()) else {
        return false;
    };
    !handle.is_empty()
        && matches!(
            (method.as_str(), tail),
            ("POST", "inbox") | ("GET", "card") | ("GET", "health")
        )
}
