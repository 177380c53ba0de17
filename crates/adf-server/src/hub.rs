//! [`Hub`]: what the daemon's subsystems share, passed to them instead of the daemon — the
//! agent registry, the umbilical event bus (and [`Hub::emit`], which numbers an agent's
//! events and offers them to its taps), the tool registry, the timer scheduler's wake map,
//! the mesh, the runtime home and the shutdown signal.
//!
//! Subsystems (`dispatch`, `turns`, `scheduler`, `hil`, `taps`, `watch`, `network`, `serving`,
//! `review`) are functions that take an agent and a `&Arc<Hub>`; none names `Daemon`. Their
//! per-agent state lives in leaves the agent record embeds, and the hub imports none of them:
//! what the hub, or a subsystem below another, must call above itself goes through
//! [`Subsystems`], which the daemon implements. The mesh sits below the hub and reaches it
//! through `mesh::MeshHost`. `Daemon` (daemon.rs) is the public handle that owns the hub and
//! composes the subsystems into load, unload and shutdown.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Instant;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::watch;

use adf_net::AgentDirectory;
use adf_net::streams::BindingEvents;
use adf_runtime::home::RuntimeHome;
use adf_runtime::tools::ToolRegistry;
use adf_runtime::triggers::{Target, TriggerEvent};
use adf_store::{Caller, MetaProtection, StoreError};

use crate::budget::BodyBudget;
use crate::dispatch::Handled;
use crate::error::ServerError;
use crate::events::{Envelope, EventBus};
use crate::mesh::{DaemonMesh, MeshHost};
use crate::registry::{Agent, AgentRegistry, LoadFuture, SEQ_META_KEY};
use crate::scheduler::TimerWakes;

/// The calls the hub, or a subsystem below another, makes into the daemon's parts above it:
/// one narrow trait, implemented once by the daemon (daemon.rs) with each subsystem's own
/// function (named on each method), so no file imports a file above it (`cargo xtask
/// imports`). Its implementation holds no handle back to the hub (each call is handed one),
/// so the hub holding it is no reference cycle.
pub(crate) trait Subsystems: Send + Sync + std::fmt::Debug {
    /// `Daemon::load`: loads the agent file at `path` with every subsystem started, for the
    /// subsystems that start agents (the autostart scan, the mesh starting a child).
    fn load_agent(&self, hub: Arc<Hub>, path: PathBuf) -> LoadFuture;
    /// `taps::offer`: queues an agent event for its umbilical taps ([`Hub::emit`]); never
    /// waits.
    fn offer_to_taps(&self, hub: &Arc<Hub>, agent: &Agent, envelope: &Envelope);
    /// `network::open_configured_connections`: opens what the agent's config declares (an
    /// agent back from `off`).
    fn open_configured_connections<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        agent: &'a Arc<Agent>,
    ) -> BoxFuture<'a, ()>;
    /// `turns::run_trigger_turn`: an agent-scope trigger delivery as a turn job (`dispatch`).
    fn run_trigger_turn<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        agent: &'a Arc<Agent>,
        target: &'a Target,
        delivered: &'a [TriggerEvent],
    ) -> BoxFuture<'a, Result<Handled, StoreError>>;
    /// `watch::notice_new_rows`: dispatches what another connection wrote (the mesh's ingress).
    fn notice_new_rows<'a>(&'a self, hub: &'a Arc<Hub>, agent: &'a Arc<Agent>)
    -> BoxFuture<'a, ()>;
    /// `serving::directory`: the hub's agents as agent serving and the WebSocket tools see
    /// them (weakly: the hub owns serving).
    fn directory(&self, hub: Weak<Hub>) -> Arc<dyn AgentDirectory>;
    /// `serving::binding_events`: where stream bindings' `binding.*` events go.
    fn binding_events(&self, hub: Weak<Hub>) -> Arc<dyn BindingEvents>;
    /// `serving::serving_for`: agent serving, reading public bodies under `budget`.
    fn serving_for(&self, hub: &Arc<Hub>, budget: BodyBudget) -> Arc<adf_net::Serving>;
}

/// The daemon's shared parts (see the module docs).
#[derive(Debug)]
pub(crate) struct Hub {
    agents: AgentRegistry,
    events: EventBus,
    home: RuntimeHome,
    tools: Arc<ToolRegistry>,
    mcp: adf_mcp::Supervisor,
    mesh: Arc<DaemonMesh>,
    settings_lock: tokio::sync::Mutex<()>,
    started: Instant,
    shutdown: watch::Sender<bool>,
    timer_wakes: TimerWakes,
    /// The task noticing other writers of loaded files (`watch`).
    watcher: crate::watch::Watcher,
    /// Agent serving (`adf-net`), set when the daemon starts serving HTTP.
    serving: adf_net::tools::ServingCell,
    /// Outbound WebSockets of every agent (`ws_connections`, `ws_connect`).
    outbound: Arc<adf_net::outbound::Outbound>,
    /// Per-agent umbilical replay logs (`umbilical.log`).
    umbilical: adf_net::umbilical::UmbilicalLogs,
    /// Stream bindings of every agent (`stream_bindings`, `stream_bind`).
    streams: Arc<adf_net::streams::Streams>,
    /// Agents whose network was released (`off`, unload): leaving `off` opens their
    /// declared `ws_connections` and `stream_bindings` again.
    network_released: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The runtime the hub was made on (the daemon's), which outlives every turn: model
    /// requests are sent on it so their connections stay alive across turns, each of which
    /// runs on a runtime of its own. `None` when the hub was made outside a runtime.
    io: Option<tokio::runtime::Handle>,
    /// The calls into the parts above the hub (see [`Subsystems`]).
    subsystems: Arc<dyn Subsystems>,
}

impl Hub {
    /// A hub with no agents, keeping its settings in `home`.
    pub(crate) fn new(home: RuntimeHome, subsystems: Arc<dyn Subsystems>) -> Arc<Self> {
        let (shutdown, _) = watch::channel(false);
        // The mesh reaches back to the hub's agents, weakly, so the hub can drop.
        Arc::new_cyclic(|weak: &Weak<Hub>| {
            let mesh = Arc::new(DaemonMesh::new(weak.clone(), home.clone()));
            let mut tools = ToolRegistry::with_builtins_and_mesh(
                Arc::clone(&mesh) as Arc<dyn adf_runtime::messaging::Mesh>,
                Some(home.clone()),
            );
            tools.register(adf_shell::tool());
            for tool in adf_compute::tools(Some(home.clone())) {
                tools.register(tool);
            }
            adf_packages::attach(&mut tools, adf_packages::PackageStore::for_home(home.dir()));
            let directory = subsystems.directory(weak.clone());
            let serving = adf_net::tools::ServingCell::default();
            let outbound = adf_net::outbound::Outbound::new(
                Arc::clone(&directory),
                Arc::new(adf_egress::SystemLookup),
                Arc::clone(&serving),
            );
            let streams = adf_net::streams::Streams::new(
                Arc::clone(&outbound),
                Arc::new(adf_egress::SystemLookup),
                subsystems.binding_events(weak.clone()),
            );
            for tool in adf_net::tools::WsTools::tools(
                Arc::clone(&outbound),
                directory,
                Arc::clone(&serving),
            ) {
                tools.register(tool);
            }
            for tool in adf_net::streams::StreamTools::tools(Arc::clone(&streams)) {
                tools.register(tool);
            }
            let mcp = adf_mcp::Supervisor::default();
            tools.add_source(Arc::new(adf_mcp::McpSource::new(
                mcp.clone(),
                Some(home.clone()),
            )));
            Hub {
                agents: AgentRegistry::default(),
                events: EventBus::new(),
                home,
                tools: Arc::new(tools),
                mcp,
                mesh,
                settings_lock: tokio::sync::Mutex::new(()),
                started: Instant::now(),
                shutdown,
                timer_wakes: TimerWakes::default(),
                watcher: crate::watch::Watcher::default(),
                serving,
                outbound,
                umbilical: adf_net::umbilical::UmbilicalLogs::default(),
                streams,
                network_released: std::sync::Mutex::default(),
                io: tokio::runtime::Handle::try_current().ok(),
                subsystems,
            }
        })
    }

    /// Loads the agent file at `path` with every subsystem started (the daemon's load): for
    /// the subsystems that start agents, which never name `Daemon`.
    pub(crate) fn load_agent(self: &Arc<Self>, path: std::path::PathBuf) -> LoadFuture {
        self.subsystems.load_agent(Arc::clone(self), path)
    }

    /// The calls into the parts above the hub.
    pub(crate) fn subsystems(&self) -> &dyn Subsystems {
        self.subsystems.as_ref()
    }

    /// The daemon's long-lived runtime, for model requests (see the field).
    pub(crate) fn io_runtime(&self) -> Option<tokio::runtime::Handle> {
        self.io.clone()
    }

    pub(crate) fn registry(&self) -> &AgentRegistry {
        &self.agents
    }

    /// Loaded agents in load order.
    pub(crate) fn agents(&self) -> Vec<Arc<Agent>> {
        self.agents.all()
    }

    /// The loaded agent whose id, handle or name is `key`.
    pub(crate) fn agent(&self, key: &str) -> Result<Arc<Agent>, ServerError> {
        self.agents.find(key)
    }

    pub(crate) fn events(&self) -> &EventBus {
        &self.events
    }

    pub(crate) fn home(&self) -> &RuntimeHome {
        &self.home
    }

    pub(crate) fn tools(&self) -> Arc<ToolRegistry> {
        Arc::clone(&self.tools)
    }

    /// The MCP servers this daemon runs for its agents.
    pub(crate) fn mcp(&self) -> &adf_mcp::Supervisor {
        &self.mcp
    }

    pub(crate) fn mesh(&self) -> &Arc<DaemonMesh> {
        &self.mesh
    }

    pub(crate) fn settings_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.settings_lock
    }

    pub(crate) fn watcher(&self) -> &crate::watch::Watcher {
        &self.watcher
    }

    pub(crate) fn timer_wakes(&self) -> &TimerWakes {
        &self.timer_wakes
    }

    /// Agent serving, once the daemon listens (see [`Self::start_serving`]).
    pub(crate) fn serving(&self) -> Option<&Arc<adf_net::Serving>> {
        self.serving.get()
    }

    /// Per-agent umbilical replay logs.
    pub(crate) fn umbilical(&self) -> &adf_net::umbilical::UmbilicalLogs {
        &self.umbilical
    }

    /// Stream bindings of every agent.
    /// Releases what the network holds for the agent `id` (STL-04, whoever turned it `off`):
    /// its served routes' sandbox and cache, its inbound WebSockets (closed with 1001), its
    /// outbound ones, its stream bindings, its umbilical replay log and its channel adapters.
    /// Idempotent.
    pub(crate) fn release_network(&self, id: &str) {
        if let Some(serving) = self.serving() {
            serving.release(id);
        }
        self.outbound.release(id);
        self.streams.release(id);
        self.umbilical.release(id);
        self.mark_network_released(id);
        if let (Ok(agent), Ok(runtime)) = (self.agent(id), tokio::runtime::Handle::try_current()) {
            // Its channel adapters stop too; not waited for (the caller may be a request
            // handler or a state change's event), they end once told.
            runtime.spawn(async move { agent.adapters().stop().await });
        }
    }

    /// Notes that the agent `id` holds no network resources now (see `network_released`).
    pub(crate) fn mark_network_released(&self, id: &str) {
        self.network_released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id.to_owned());
    }

    /// Whether the agent `id` was released, forgetting it (it is about to reopen).
    fn take_network_released(&self, id: &str) -> bool {
        self.network_released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id)
    }

    pub(crate) fn streams(&self) -> &Arc<adf_net::streams::Streams> {
        &self.streams
    }

    /// Outbound WebSockets of every agent.
    pub(crate) fn outbound(&self) -> &Arc<adf_net::outbound::Outbound> {
        &self.outbound
    }

    /// Starts agent serving with the front door's body budget (the first call wins).
    pub(crate) fn start_serving(self: &Arc<Self>, budget: crate::budget::BodyBudget) {
        let _ = self
            .serving
            .get_or_init(|| self.subsystems.serving_for(self, budget));
    }

    pub(crate) fn uptime_secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Flips to `true` when the daemon shuts down; long-lived work (SSE, timers) ends then.
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    pub(crate) fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Publishes a daemon-scope event (`agent_id: null`, `seq: 0`).
    pub(crate) fn emit_daemon(&self, event_type: &str, payload: Value) {
        self.events.publish(Envelope {
            event_type: event_type.to_owned(),
            timestamp: adf_store::time::now_ms(),
            source: "system:daemon".to_owned(),
            agent_id: None,
            payload,
            seq: 0,
        });
    }

    /// Publishes an agent event with the agent's next `seq`, persisting a new block of
    /// numbers first when the current one is used up.
    pub(crate) async fn emit(
        self: &Arc<Self>,
        agent: &Agent,
        event_type: &str,
        source: &str,
        payload: Value,
    ) {
        let mut seq = agent.seq.lock().await;
        let (number, persist) = seq.allocate();
        if let Some(end) = persist {
            // One job: a turn waiting for the owner runs it while it waits (`hil`).
            let written = agent
                .job(move |file| {
                    file.meta_set(
                        Caller::Owner,
                        SEQ_META_KEY,
                        &end.to_string(),
                        Some(MetaProtection::None),
                    )
                })
                .await;
            if let Err(error) = written {
                // The event still goes out: a read-only or closing file must not silence
                // the stream. Numbers stay monotonic in this process; only their
                // durability across a restart is lost, which the warning says.
                tracing::warn!(agent = %agent.id, %error, "cannot persist {SEQ_META_KEY}");
            }
        }
        let envelope = Envelope {
            event_type: event_type.to_owned(),
            timestamp: adf_store::time::now_ms(),
            source: source.to_owned(),
            agent_id: Some(agent.id.clone()),
            payload,
            seq: number,
        };
        // Never waits: the agent's umbilical taps get it through their bounded queue.
        self.subsystems.offer_to_taps(self, agent, &envelope);
        self.umbilical.record(&agent.id, event_type, number, || {
            serde_json::to_value(&envelope).unwrap_or(Value::Null)
        });
        self.streams.offer_event(&agent.id, event_type, || {
            serde_json::to_value(&envelope).unwrap_or(Value::Null)
        });
        let new_state = (envelope.event_type == "agent.state.changed")
            .then(|| envelope.payload.get("state").and_then(Value::as_str))
            .flatten()
            .map(str::to_owned);
        let releases =
            envelope.event_type == "agent.unloaded" || new_state.as_deref() == Some("off");
        if envelope.event_type == "agent.loaded" {
            // A load opens what the config declares itself.
            self.take_network_released(&agent.id);
        }
        // Publishing while holding the allocator keeps seq order equal to cursor order.
        self.events.publish(envelope);
        drop(seq);
        if releases {
            // STL-04: an agent that goes off or unloads (by the owner, or by its own turn's
            // `sys_set_state`) releases its network resources and its MCP server processes.
            self.release_network(&agent.id);
            self.mcp.stop_agent(&agent.path).await;
        } else if new_state.is_some() && self.take_network_released(&agent.id) {
            // Back from `off`: what load materialized opens again (in the background, as at
            // load, so the state change never waits for a connect).
            if let Ok(agent) = self.agent(&agent.id) {
                let hub = Arc::clone(self);
                tokio::spawn(async move {
                    hub.subsystems
                        .open_configured_connections(&hub, &agent)
                        .await;
                });
            }
        }
    }
}

/// The mesh's view of the hub (see [`MeshHost`]): the hub's own parts, and the calls above it
/// through [`Subsystems`].
impl MeshHost for Hub {
    fn registry(&self) -> &AgentRegistry {
        &self.agents
    }

    fn agents(&self) -> Vec<Arc<Agent>> {
        self.agents.all()
    }

    fn agent(&self, key: &str) -> Result<Arc<Agent>, ServerError> {
        self.agents.find(key)
    }

    fn outbound(&self) -> &Arc<adf_net::outbound::Outbound> {
        &self.outbound
    }

    fn mesh(&self) -> &Arc<DaemonMesh> {
        &self.mesh
    }

    fn load_agent(self: Arc<Self>, path: PathBuf) -> LoadFuture {
        self.subsystems.load_agent(Arc::clone(&self), path)
    }

    fn notice_new_rows(self: Arc<Self>, agent: Arc<Agent>) -> BoxFuture<'static, ()> {
        Box::pin(async move { self.subsystems.notice_new_rows(&self, &agent).await })
    }
}
