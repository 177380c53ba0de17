//! [`Daemon`]: the public handle of the daemon, a thin composition of the `AgentRegistry`
//! (agents by id, handle and name, in load order; see `registry`) and the subsystems that
//! share its `Hub`: trigger dispatch, the turn host, timers, HIL, taps, review and the mesh.
//! Loading an agent is the registry's open, then each subsystem's start (timers re-armed,
//! `on_startup` dispatched, autostart loops kicked); unloading is the reverse.
//! It is also where the hub's calls upward land (`DaemonSubsystems`, the one implementation
//! of `hub::Subsystems`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::watch;

use adf_net::AgentDirectory;
use adf_net::streams::BindingEvents;
use adf_runtime::home::RuntimeHome;
use adf_runtime::tools::ToolRegistry;
use adf_runtime::triggers::{Target, TriggerEvent};
use adf_store::{AdfFile, StoreError};

use crate::budget::BodyBudget;
use crate::dispatch::Handled;
use crate::error::ServerError;
use crate::events::{Envelope, EventBus};
use crate::hub::{Hub, Subsystems};
use crate::mesh::DaemonMesh;
use crate::registry::{LoadFuture, close_quietly};
use crate::review::{AutostartReport, Review};

pub(crate) use crate::registry::info_from_config;
pub use crate::registry::{
    AGENT_IDLE_RELEASE, Agent, AgentInfo, DISPLAY_STATES, Loaded, SEQ_META_KEY,
};

/// The daemon. Cheap to clone; all clones share one set of agents.
#[derive(Debug, Clone)]
pub struct Daemon {
    hub: Arc<Hub>,
}

impl Daemon {
    /// A daemon with no agents, keeping its settings in `home`.
    pub fn new(home: RuntimeHome) -> Self {
        Self {
            hub: Hub::new(home, Arc::new(DaemonSubsystems)),
        }
    }

    /// The hosted agents as message recipients.
    pub fn mesh(&self) -> &DaemonMesh {
        self.hub.mesh()
    }

    /// Agent serving (`adf-net`): routes, public and shared files; `None` until the daemon
    /// serves HTTP.
    pub fn serving(&self) -> Option<Arc<adf_net::Serving>> {
        self.hub.serving().cloned()
    }

    /// Releases what the network holds for the agent `id` (STL-04: turning it `off`): its
    /// served routes' sandbox and cache, its inbound WebSockets (closed with 1001), its
    /// outbound ones and its stream bindings.
    pub fn release_network(&self, id: &str) {
        self.hub.release_network(id);
    }

    /// Stops and starts the agent's channel adapters again (after a change of its `adapters`
    /// config or of an `adapter:*` credential); an agent that is `off` stays stopped.
    pub async fn restart_adapters(&self, agent: &Arc<Agent>) {
        crate::adapters::restart(&self.hub, agent).await;
    }

    /// Checks the credential of the agent's `kind` adapter against its platform, without
    /// starting it (`adf adapters test`).
    pub async fn test_adapter(
        &self,
        agent: &Arc<Agent>,
        kind: &str,
    ) -> Result<serde_json::Value, adf_adapters::AdapterError> {
        crate::adapters::test_credential(&self.hub, agent, kind).await
    }

    /// The agent's umbilical replay log after `since`; `None` when `umbilical.log` is off.
    pub fn umbilical_events(
        &self,
        id: &str,
        since: u64,
        limit: usize,
    ) -> Option<Vec<serde_json::Value>> {
        self.hub.umbilical().events(id, since, limit)
    }

    /// After a config change at run time: declared `ws_connections` and `stream_bindings`
    /// follow the new config (removed or disabled ones close, new ones open, changed
    /// bindings reopen with their new declaration).
    pub async fn reconcile_network(&self, agent: &Arc<crate::registry::Agent>) {
        crate::network::reconcile_configured_connections(&self.hub, agent).await;
    }

    /// Applies a changed config's `umbilical.log` to the agent's replay log.
    pub fn configure_umbilical(&self, id: &str, config: &serde_json::Value) {
        self.hub.umbilical().configure(id, config);
    }

    /// The agent's open outbound WebSockets (`ws_connections`, `ws_connect`).
    pub fn outbound_connections(&self, agent_id: &str) -> Vec<adf_net::outbound::OutboundInfo> {
        self.hub.outbound().list(agent_id)
    }

    pub(crate) fn start_serving(&self, budget: crate::budget::BodyBudget) {
        self.hub.start_serving(budget);
    }

    pub(crate) fn mesh_arc(&self) -> Arc<DaemonMesh> {
        Arc::clone(self.hub.mesh())
    }

    /// The daemon-wide event bus that `GET /events` streams (agent state changes, loads,
    /// unloads, logs).
    pub fn events(&self) -> &EventBus {
        self.hub.events()
    }

    /// The ADF home the daemon keeps its settings, token and key material in.
    pub fn home(&self) -> &RuntimeHome {
        self.hub.home()
    }

    /// The MCP servers this daemon runs for its agents.
    pub(crate) fn mcp(&self) -> &adf_mcp::Supervisor {
        self.hub.mcp()
    }

    pub(crate) fn tools(&self) -> Arc<ToolRegistry> {
        self.hub.tools()
    }

    pub(crate) fn settings_lock(&self) -> &tokio::sync::Mutex<()> {
        self.hub.settings_lock()
    }

    /// Seconds since this daemon was created (monotonic clock, fractional).
    pub fn uptime_secs(&self) -> f64 {
        self.hub.uptime_secs()
    }

    /// Flips to `true` when the daemon shuts down; long-lived responses (SSE) end then.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.hub.shutdown_signal()
    }

    /// Loaded agents in load order.
    pub fn agents(&self) -> Vec<Arc<Agent>> {
        self.hub.agents()
    }

    /// The agent whose id, handle or name is `key` (in that order of precedence, as in the
    /// reference: an id always wins over another agent's handle or name).
    pub fn agent(&self, key: &str) -> Result<Arc<Agent>, ServerError> {
        self.hub.agent(key)
    }

    /// Loads the agent at `path`, or returns the already loaded agent for that file.
    pub async fn load(&self, path: &Path) -> Result<Loaded, ServerError> {
        let canonical = crate::registry::canonical_file(path).await?;
        let registry = self.hub.registry();
        let _guard = registry.lock_loads().await;
        if let Some(agent) = registry.find_by_path(&canonical) {
            return Ok(Loaded {
                agent,
                newly_loaded: false,
            });
        }
        let opened = registry.open(canonical).await?;
        let agent = opened.agent;
        registry.insert(&agent);
        self.start_subsystems(&agent, opened.orphans).await;
        // Close the file once the jobs queued above are done (the next job reopens it) rather
        // than after the idle period: loading many agents then keeps about one connection open
        // at a time and the allocator reuses its memory, whereas memory freed after all of them
        // were open at once mostly stays with the process. Not waited for: a queued turn may
        // wait for its owner.
        if let Err(error) = agent.store().release_when_idle() {
            tracing::debug!(agent = %agent.id, %error, "release failed");
        }
        Ok(Loaded {
            agent,
            newly_loaded: true,
        })
    }

    /// What follows a load, in order: `agent.loaded`, the orphaned approvals' events, the
    /// timers re-armed (a timer missed while the file was not loaded is due now and fires
    /// once), `on_startup`, the autostart loops.
    async fn start_subsystems(&self, agent: &Arc<Agent>, orphans: Vec<(String, &'static str)>) {
        let info = agent.info();
        self.hub
            .emit(
                agent,
                "agent.loaded",
                "system:lifecycle",
                json!({
                    "filePath": agent.file_path(),
                    "name": info.name,
                    "handle": info.handle,
                    "autostart": info.autostart,
                }),
            )
            .await;
        crate::hil::report_orphaned_approvals(&self.hub, agent, orphans).await;
        crate::scheduler::ensure_started(&self.hub);
        crate::watch::ensure_started(&self.hub);
        self.hub.timer_wakes().rearm(agent).await;
        let startup = TriggerEvent::new(
            adf_runtime::triggers::TriggerKind::OnStartup,
            adf_store::time::now_ms(),
            json!({}),
        );
        crate::dispatch::dispatch(&self.hub, agent, startup).await;
        if agent.info().display_state == "off" {
            // Stored `off`: nothing opens now; `POST /state` back on opens what it declares.
            self.hub.mark_network_released(&agent.id);
        } else {
            crate::network::open_configured_connections(&self.hub, agent).await;
            crate::adapters::start(&self.hub, agent).await;
        }
        crate::turns::kick_autostart(&self.hub, agent).await;
    }

    /// Loads an agent stopped earlier in this process again (`POST /agents/{id}/start`).
    pub async fn restart_stopped(&self, key: &str) -> Result<Loaded, ServerError> {
        let path = self.hub.registry().stopped_path(key)?;
        self.load(&path).await
    }

    /// Unloads an agent: emits `agent.unloaded`, then closes the file cleanly after every job
    /// already queued on its worker.
    pub async fn unload(&self, key: &str) -> Result<Arc<Agent>, ServerError> {
        let agent = self.agent(key)?;
        self.hub.registry().remove(&agent);
        crate::scheduler::forget(&self.hub, &agent.id);
        self.release_network(&agent.id);
        // Before the close: a stopping adapter may still log its last state.
        crate::adapters::stop(&agent).await;
        // A turn waiting for the owner would hold the worker, and the close behind it, forever.
        agent.hil().abort_all();
        self.hub
            .emit(
                &agent,
                "agent.unloaded",
                "system:lifecycle",
                json!({ "filePath": agent.file_path() }),
            )
            .await;
        close_quietly(agent.store().clone()).await;
        Ok(agent)
    }

    /// Ends event streams (SSE responses finish), without closing any file yet.
    pub fn begin_shutdown(&self) {
        self.hub.begin_shutdown();
    }

    /// Closes every agent's WebSockets and file cleanly (no `-wal`/`-shm` left) and ends event
    /// streams.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        self.hub
            .mcp()
            .stop_idle(std::time::Instant::now(), std::time::Duration::ZERO)
            .await;
        let agents = self.hub.registry().take_all();
        for agent in &agents {
            // A WebSocket outlives the listener (it is its own task once upgraded): close
            // each agent's sockets with 1001 as a stopped process would, so peers reconnect.
            self.release_network(&agent.id);
            agent.hil().abort_all();
        }
        futures::future::join_all(agents.iter().map(|agent| crate::adapters::stop(agent))).await;
        // Busy agents' held route log rows are written by their request threads on release.
        if let Some(serving) = self.hub.serving() {
            serving
                .wait_released(std::time::Duration::from_secs(5))
                .await;
        }
        let closes = agents
            .iter()
            .map(|agent| close_quietly(agent.store().clone()));
        futures::future::join_all(closes).await;
    }

    /// Publishes a daemon-scope event (`agent_id: null`, `seq: 0`).
    pub fn emit_daemon(&self, event_type: &str, payload: Value) {
        self.hub.emit_daemon(event_type, payload);
    }

    /// Publishes an agent event with the agent's next `seq`, persisting a new block of numbers
    /// first when the current one is used up, and offers it to the agent's taps.
    pub async fn emit(&self, agent: &Agent, event_type: &str, source: &str, payload: Value) {
        self.hub.emit(agent, event_type, source, payload).await;
    }

    /// Dispatches `event` to `agent`'s trigger targets (see `dispatch`); never blocks on the
    /// handlers.
    pub async fn dispatch(&self, agent: &Arc<Agent>, event: TriggerEvent) {
        crate::dispatch::dispatch(&self.hub, agent, event).await;
    }

    /// Runs `work` as one owner job and dispatches the rows that appeared by then (see
    /// `dispatch::run_observed`).
    pub(crate) async fn run_observed<R: Send + 'static>(
        &self,
        agent: &Arc<Agent>,
        work: impl FnOnce(&mut AdfFile) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        crate::dispatch::run_observed(&self.hub, agent, work).await
    }

    /// Notices rows other writers added to the agent's tasks, logs, inbox and outbox and
    /// dispatches them: one short job.
    pub async fn notice_new_rows(&self, agent: &Arc<Agent>) {
        crate::watch::notice_new_rows(&self.hub, agent).await;
    }

    /// Re-reads `agent`'s timers and moves the scheduler's next wake-up.
    pub async fn rearm_timers(&self, agent: &Agent) {
        self.hub.timer_wakes().rearm(agent).await;
    }

    /// The next wake time the scheduler holds for an agent (`None`: no live timer).
    pub fn next_timer_wake(&self, agent_id: &str) -> Option<i64> {
        crate::scheduler::next_wake(&self.hub, agent_id)
    }

    /// The shared parts, for the API handlers that go straight to one subsystem (chat:
    /// `turns::start_chat`) instead of through a forwarding method here.
    pub(crate) fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// Moves a `suspended` agent to `active` or `off` as the owner (see `hil`).
    pub(crate) async fn answer_suspend(
        &self,
        agent: &Arc<Agent>,
        resume: bool,
        timed_out: bool,
    ) -> Result<bool, StoreError> {
        crate::hil::answer_suspend(&self.hub, agent, resume, timed_out).await
    }

    /// The review state of the agent file at `path` (read-only; see `review`).
    pub async fn review(&self, path: &Path) -> Result<Review, ServerError> {
        crate::review::review(&self.hub, path).await
    }

    /// Records that the owner accepted what the file at `path` can do now.
    pub async fn accept_review(&self, path: &Path) -> Result<Review, ServerError> {
        crate::review::accept_review(&self.hub, path).await
    }

    /// `Ok` when the owner accepted the file's current digest, else
    /// [`ServerError::ReviewRequired`] (403 `AGENT_REVIEW_REQUIRED`).
    pub async fn require_reviewed(&self, path: &Path) -> Result<Review, ServerError> {
        crate::review::require_reviewed(&self.hub, path).await
    }

    /// The tracked directories listed in the settings (`trackedDirectories`).
    pub fn tracked_directories(&self) -> Vec<PathBuf> {
        crate::review::tracked_directories(self.hub.home())
    }

    /// Loads the agent `key` from the first file in the settings' tracked directories that
    /// declares it (`POST /agents/{id}/start` of an agent neither loaded nor stopped).
    pub async fn start_from_tracked(&self, key: &str) -> Result<Loaded, ServerError> {
        match crate::review::find_in_tracked(self.hub.home(), key).await? {
            Some(path) => self.load(&path).await,
            None => Err(ServerError::UnknownAgent(key.to_owned())),
        }
    }

    /// Scans `dirs` and loads every reviewed `autostart: true` agent found there; emits
    /// `daemon.autostart.report{report}`.
    pub async fn autostart(&self, dirs: &[PathBuf], max_depth: usize) -> AutostartReport {
        crate::review::autostart(&self.hub, dirs, max_depth).await
    }
}

/// The daemon's subsystems as the hub, and a subsystem below another, call them
/// ([`Subsystems`]): each method is the subsystem's own function.
#[derive(Debug)]
struct DaemonSubsystems;

impl Subsystems for DaemonSubsystems {
    fn load_agent(&self, hub: Arc<Hub>, path: PathBuf) -> LoadFuture {
        Box::pin(async move { Daemon { hub }.load(&path).await })
    }

    fn offer_to_taps(&self, hub: &Arc<Hub>, agent: &Agent, envelope: &Envelope) {
        crate::taps::offer(hub, agent, envelope);
    }

    fn open_configured_connections<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        agent: &'a Arc<Agent>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            crate::network::open_configured_connections(hub, agent).await;
            crate::adapters::start(hub, agent).await;
        })
    }

    fn run_trigger_turn<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        agent: &'a Arc<Agent>,
        target: &'a Target,
        delivered: &'a [TriggerEvent],
    ) -> BoxFuture<'a, Result<Handled, StoreError>> {
        Box::pin(crate::turns::run_trigger_turn(
            hub, agent, target, delivered,
        ))
    }

    fn notice_new_rows<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        agent: &'a Arc<Agent>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(crate::watch::notice_new_rows(hub, agent))
    }

    fn directory(&self, hub: Weak<Hub>) -> Arc<dyn AgentDirectory> {
        crate::serving::directory(hub)
    }

    fn binding_events(&self, hub: Weak<Hub>) -> Arc<dyn BindingEvents> {
        crate::serving::binding_events(hub)
    }

    fn serving_for(&self, hub: &Arc<Hub>, budget: BodyBudget) -> Arc<adf_net::Serving> {
        crate::serving::serving_for(hub, budget)
    }
}
