//! [`Daemon`]: the set of loaded agents, each an actor owned by its [`StoreHandle`].
//!
//! Loading canonicalizes the path first, so one file is never loaded twice (two paths to the
//! same file, a symlink, `./a.adf` and `/abs/a.adf`, all resolve to one agent), and a path
//! that does not exist is refused before anything touches the disk: unlike the reference,
//! which creates a 0-byte file there and answers 500, nothing is created.
//!
//! Per-agent cost: the store worker thread with its SQLite connection while the agent is busy;
//! after [`AGENT_IDLE_RELEASE`] without a job the worker closes the file cleanly and exits (the
//! next job reopens it), so an idle agent owns no thread and no connection, only a small
//! [`Agent`] record — no task, timer or channel per agent while it is idle (the one scheduler
//! task holds a single wake time for each agent with live timers). `BENCHMARKS.md` has the
//! measured figures.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::watch;

use adf_runtime::home::RuntimeHome;
use adf_runtime::tools::ToolRegistry;
use adf_store::{Caller, IdleRelease, MetaProtection, StoreError, StoreHandle};

use crate::dispatch::TriggerQueue;
use crate::error::ServerError;
use crate::events::{Envelope, EventBus, SeqAllocator};
use crate::hil::Hil;
use crate::mesh::DaemonMesh;
use crate::scheduler::TimerWakes;

/// The meta key holding the end of the agent's reserved `seq` block.
pub const SEQ_META_KEY: &str = "runtime_umbilical_next_seq";

/// How long a loaded agent's file stays open without a job before its worker closes it (and
/// exits); the next job reopens it. An open costs a few milliseconds, an open idle agent
/// ~200 KiB of resident memory.
pub const AGENT_IDLE_RELEASE: Duration = Duration::from_secs(30);

/// Display states `POST /agents/{id}/state` accepts (the config's `state` values).
pub const DISPLAY_STATES: [&str; 5] = ["active", "idle", "hibernate", "suspended", "off"];

/// What a loaded agent shows in lists, refreshed when its config changes.
#[derive(Debug, Clone)]
pub struct AgentInfo {
    pub name: String,
    pub handle: Option<String>,
    pub autostart: bool,
    /// The live display state: starts at `config.state`, moved by `POST /state`, kept in
    /// memory only (as in the reference).
    pub display_state: String,
    /// The DID read at load, so the mesh finds a recipient by DID without opening every file
    /// (an identity rotated later by another process is seen at the next load).
    pub did: Option<String>,
}

/// One loaded agent.
#[derive(Debug)]
pub struct Agent {
    /// The config id, the primary key of `{id}` path segments.
    pub id: String,
    /// The canonical path.
    pub path: PathBuf,
    store: StoreHandle,
    info: Mutex<AgentInfo>,
    seq: tokio::sync::Mutex<SeqAllocator>,
    triggers: TriggerQueue,
    /// Turns in flight and the owner decisions they wait for (empty while idle).
    hil: Hil,
    /// The umbilical taps' queue, buckets and counters (see `taps`).
    taps: crate::taps::Taps,
}

impl Agent {
    /// The agent's trigger queue (bounded; see `dispatch`).
    pub fn triggers(&self) -> &TriggerQueue {
        &self.triggers
    }

    /// The store worker that owns the file.
    pub fn store(&self) -> &StoreHandle {
        &self.store
    }

    /// The agent's turns in flight and the approvals and asks they wait for.
    pub fn hil(&self) -> &Hil {
        &self.hil
    }

    /// The agent's umbilical taps (bounded queue and counters).
    pub fn taps(&self) -> &crate::taps::Taps {
        &self.taps
    }

    pub fn info(&self) -> AgentInfo {
        self.info
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn update_info(&self, change: impl FnOnce(&mut AgentInfo)) {
        change(&mut self.info.lock().unwrap_or_else(PoisonError::into_inner));
    }

    pub fn file_path(&self) -> String {
        self.path.display().to_string()
    }

    /// The `/agents` list entry (`AgentSummary`).
    pub fn summary(&self) -> Value {
        let info = self.info();
        json!({
            "id": self.id,
            "filePath": self.file_path(),
            "name": info.name,
            "handle": info.handle,
            "autostart": info.autostart,
        })
    }

    fn matches(&self, key: &str) -> Matched {
        if self.id == key {
            return Matched::Id;
        }
        let info = self.info();
        if info.handle.as_deref() == Some(key) {
            Matched::Handle
        } else if info.name == key {
            Matched::Name
        } else {
            Matched::No
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Matched {
    Id,
    Handle,
    Name,
    No,
}

#[derive(Debug, Default)]
struct Registry {
    /// Loaded agents in load order (the `/agents` order).
    loaded: Vec<Arc<Agent>>,
    /// Agents stopped in this process, by id, so `start` can load them again.
    stopped: Vec<(String, PathBuf)>,
}

#[derive(Debug)]
struct Inner {
    registry: RwLock<Registry>,
    /// Serializes loads, so two concurrent loads of one path cannot both open it.
    load_lock: tokio::sync::Mutex<()>,
    events: EventBus,
    home: RuntimeHome,
    tools: Arc<ToolRegistry>,
    mesh: Arc<DaemonMesh>,
    settings_lock: tokio::sync::Mutex<()>,
    started: Instant,
    shutdown: watch::Sender<bool>,
    timer_wakes: TimerWakes,
}

/// A daemon reference that does not keep it alive (held by its own mesh).
#[derive(Debug, Clone)]
pub(crate) struct WeakDaemon(std::sync::Weak<Inner>);

impl WeakDaemon {
    pub(crate) fn upgrade(&self) -> Option<Daemon> {
        self.0.upgrade().map(|inner| Daemon { inner })
    }
}

/// The daemon. Cheap to clone; all clones share one set of agents.
#[derive(Debug, Clone)]
pub struct Daemon {
    inner: Arc<Inner>,
}

/// The outcome of [`Daemon::load`].
#[derive(Debug)]
pub struct Loaded {
    pub agent: Arc<Agent>,
    /// False when the file was already loaded (loading is idempotent).
    pub newly_loaded: bool,
}

impl Daemon {
    /// A daemon with no agents, keeping its settings in `home`.
    pub fn new(home: RuntimeHome) -> Self {
        let (shutdown, _) = watch::channel(false);
        Self {
            // The mesh reaches back to the daemon's agents, weakly, so the daemon can drop.
            inner: Arc::new_cyclic(|weak| {
                let mesh = Arc::new(DaemonMesh::new(WeakDaemon(weak.clone()), home.clone()));
                let tools = ToolRegistry::with_builtins_and_mesh(
                    Arc::clone(&mesh) as Arc<dyn adf_runtime::messaging::Mesh>,
                    Some(home.clone()),
                );
                Inner {
                    registry: RwLock::new(Registry::default()),
                    load_lock: tokio::sync::Mutex::new(()),
                    events: EventBus::new(),
                    home,
                    tools: Arc::new(tools),
                    mesh,
                    settings_lock: tokio::sync::Mutex::new(()),
                    started: Instant::now(),
                    shutdown,
                    timer_wakes: TimerWakes::default(),
                }
            }),
        }
    }

    /// The hosted agents as message recipients.
    pub fn mesh(&self) -> &DaemonMesh {
        &self.inner.mesh
    }

    pub(crate) fn mesh_arc(&self) -> Arc<DaemonMesh> {
        Arc::clone(&self.inner.mesh)
    }

    pub fn events(&self) -> &EventBus {
        &self.inner.events
    }

    pub fn home(&self) -> &RuntimeHome {
        &self.inner.home
    }

    pub(crate) fn tools(&self) -> Arc<ToolRegistry> {
        Arc::clone(&self.inner.tools)
    }

    pub(crate) fn timer_wakes(&self) -> &TimerWakes {
        &self.inner.timer_wakes
    }

    pub(crate) fn settings_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.inner.settings_lock
    }

    pub fn uptime_secs(&self) -> f64 {
        self.inner.started.elapsed().as_secs_f64()
    }

    /// Flips to `true` when the daemon shuts down; long-lived responses (SSE) end then.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.inner.shutdown.subscribe()
    }

    fn registry(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.inner
            .registry
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn registry_mut(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.inner
            .registry
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Loaded agents in load order.
    pub fn agents(&self) -> Vec<Arc<Agent>> {
        self.registry().loaded.clone()
    }

    /// The agent whose id, handle or name is `key` (in that order of precedence, as in the
    /// reference: an id always wins over another agent's handle or name).
    pub fn agent(&self, key: &str) -> Result<Arc<Agent>, ServerError> {
        self.registry()
            .loaded
            .iter()
            .map(|a| (a.matches(key), a))
            .filter(|(m, _)| *m != Matched::No)
            .min_by_key(|(m, _)| *m)
            .map(|(_, a)| Arc::clone(a))
            .ok_or_else(|| ServerError::UnknownAgent(key.to_owned()))
    }

    /// Loads the agent at `path`, or returns the already loaded agent for that file.
    pub async fn load(&self, path: &Path) -> Result<Loaded, ServerError> {
        let canonical = match tokio::fs::canonicalize(path).await {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ServerError::NoSuchFile(path.display().to_string()));
            }
            Err(e) => return Err(e.into()),
        };
        if !tokio::fs::metadata(&canonical).await?.is_file() {
            return Err(ServerError::NoSuchFile(format!(
                "{} (not a regular file)",
                path.display()
            )));
        }
        let _guard = self.inner.load_lock.lock().await;
        let existing = self
            .registry()
            .loaded
            .iter()
            .find(|a| a.path == canonical)
            .cloned();
        if let Some(agent) = existing {
            return Ok(Loaded {
                agent,
                newly_loaded: false,
            });
        }
        let opener = canonical.clone();
        let store = tokio::task::spawn_blocking(move || {
            StoreHandle::open_with(opener, IdleRelease::After(AGENT_IDLE_RELEASE))
        })
        .await
        .map_err(|e| ServerError::Io(std::io::Error::other(e)))??;
        let facts = store
            .run(|file| {
                enter_start_state(file)?;
                let config = file.config()?;
                log_sections_not_run(file, &config);
                let handle_meta = file.meta_get("adf_handle")?.map(|m| m.value);
                let did = adf_runtime::messaging::agent_did(file)?;
                let seq = file
                    .meta_get(SEQ_META_KEY)?
                    .and_then(|m| m.value.trim().parse::<u64>().ok());
                Ok((config, handle_meta, did, seq))
            })
            .await;
        let (config, handle_meta, did, persisted_seq) = match facts {
            Ok(facts) => facts,
            Err(error) => {
                close_quietly(store).await;
                return Err(error.into());
            }
        };
        let Some(id) = config.get("id").and_then(Value::as_str).map(str::to_owned) else {
            close_quietly(store).await;
            return Err(ServerError::Store(StoreError::Malformed(
                "config has no string id".into(),
            )));
        };
        // The guard is dropped before the await below (it must not be held across one).
        let clash = self
            .registry()
            .loaded
            .iter()
            .find(|a| a.id == id)
            .map(|other| other.file_path());
        if let Some(other) = clash {
            let message = format!(
                "an agent with id \"{id}\" is already loaded from {other}; ids must be unique in one daemon"
            );
            close_quietly(store).await;
            return Err(ServerError::Conflict(message));
        }
        // Before the agent is visible, so no turn of this process can be waiting yet.
        let orphans = match store.run(crate::hil::settle_orphaned_approvals).await {
            Ok(orphans) => orphans,
            Err(error) => {
                tracing::warn!(path = %canonical.display(), %error, "cannot settle orphaned approvals");
                Vec::new()
            }
        };
        let info = AgentInfo {
            did,
            ..info_from_config(&config, handle_meta)
        };
        let agent = Arc::new(Agent {
            id,
            path: canonical,
            store,
            info: Mutex::new(info.clone()),
            seq: tokio::sync::Mutex::new(SeqAllocator::starting_at(
                persisted_seq,
                adf_store::time::now_ms(),
            )),
            triggers: TriggerQueue::default(),
            hil: Hil::default(),
            taps: crate::taps::Taps::default(),
        });
        // The config is at hand: an agent without taps costs its events no config read.
        agent
            .taps()
            .prime(&agent.id, &config, agent.triggers().generation());
        {
            let mut registry = self.registry_mut();
            registry.stopped.retain(|(id, _)| *id != agent.id);
            registry.loaded.push(Arc::clone(&agent));
        }
        self.emit(
            &agent,
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
        self.report_orphaned_approvals(&agent, orphans).await;
        // Timers: a timer missed while the file was not loaded is due now and fires once.
        self.ensure_scheduler();
        self.rearm_timers(&agent).await;
        let startup = adf_runtime::triggers::TriggerEvent::new(
            adf_runtime::triggers::TriggerKind::OnStartup,
            adf_store::time::now_ms(),
            json!({}),
        );
        self.dispatch(&agent, startup).await;
        self.kick_autostart(&agent).await;
        // Close the file once the jobs queued above are done (the next job reopens it) rather
        // than after the idle period: loading many agents then keeps about one connection open
        // at a time and the allocator reuses its memory, whereas memory freed after all of them
        // were open at once mostly stays with the process. Not waited for: a queued turn may
        // wait for its owner.
        if let Err(error) = agent.store.release_when_idle() {
            tracing::debug!(agent = %agent.id, %error, "release failed");
        }
        Ok(Loaded {
            agent,
            newly_loaded: true,
        })
    }

    /// Loads an agent stopped earlier in this process again (`POST /agents/{id}/start`).
    pub async fn restart_stopped(&self, key: &str) -> Result<Loaded, ServerError> {
        let path = self
            .registry()
            .stopped
            .iter()
            .find(|(id, _)| id == key)
            .map(|(_, p)| p.clone())
            .ok_or_else(|| ServerError::UnknownAgent(key.to_owned()))?;
        self.load(&path).await
    }

    /// Unloads an agent: emits `agent.unloaded`, then closes the file cleanly after every job
    /// already queued on its worker.
    pub async fn unload(&self, key: &str) -> Result<Arc<Agent>, ServerError> {
        let agent = self.agent(key)?;
        {
            let mut registry = self.registry_mut();
            registry.loaded.retain(|a| !Arc::ptr_eq(a, &agent));
            registry
                .stopped
                .push((agent.id.clone(), agent.path.clone()));
        }
        self.forget_timers(&agent.id);
        // A turn waiting for the owner would hold the worker, and the close behind it, forever.
        agent.hil.abort_all();
        self.emit(
            &agent,
            "agent.unloaded",
            "system:lifecycle",
            json!({ "filePath": agent.file_path() }),
        )
        .await;
        close_quietly(agent.store.clone()).await;
        Ok(agent)
    }

    /// Ends event streams (SSE responses finish), without closing any file yet.
    pub fn begin_shutdown(&self) {
        self.inner.shutdown.send_replace(true);
    }

    /// Closes every agent's file cleanly (no `-wal`/`-shm` left) and ends event streams.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        let agents = std::mem::take(&mut self.registry_mut().loaded);
        for agent in &agents {
            agent.hil.abort_all();
        }
        let closes = agents
            .iter()
            .map(|agent| close_quietly(agent.store.clone()));
        futures::future::join_all(closes).await;
    }

    /// Publishes a daemon-scope event (`agent_id: null`, `seq: 0`).
    pub fn emit_daemon(&self, event_type: &str, payload: Value) {
        self.inner.events.publish(Envelope {
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
    pub async fn emit(&self, agent: &Agent, event_type: &str, source: &str, payload: Value) {
        let mut seq = agent.seq.lock().await;
        let (number, persist) = seq.allocate();
        if let Some(end) = persist {
            // Through `job`: a turn waiting for the owner holds the worker.
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
        self.offer_to_taps(agent, &envelope);
        // Publishing while holding the allocator keeps seq order equal to cursor order.
        self.inner.events.publish(envelope);
    }
}

/// Name, handle, autostart and display state from a config (handle falls back to meta).
pub(crate) fn info_from_config(config: &Value, handle_meta: Option<String>) -> AgentInfo {
    let text = |key: &str| {
        config
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    AgentInfo {
        name: text("name").unwrap_or_default(),
        handle: text("handle").or(handle_meta.filter(|h| !h.is_empty())),
        autostart: config
            .get("autostart")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        display_state: text("state").unwrap_or_else(|| "active".to_owned()),
        did: None,
    }
}

async fn close_quietly(store: StoreHandle) {
    let path = store.path().to_path_buf();
    match tokio::task::spawn_blocking(move || store.close()).await {
        Ok(Ok(())) => {}
        // A worker that is already gone closed (or dropped) its file before.
        Ok(Err(StoreError::WorkerGone)) => {}
        Ok(Err(error)) => tracing::warn!(path = %path.display(), %error, "closing failed"),
        Err(error) => tracing::warn!(path = %path.display(), %error, "closing panicked"),
    }
}

/// `start_in_state` (§5.3): the state an agent enters when the daemon loads it (`active`,
/// `idle` or `hibernate`; absent: it keeps its stored state). An agent the owner turned `off`
/// or that was `suspended` for safety stays so: loading never overrides the owner's stop.
fn enter_start_state(file: &mut adf_store::AdfFile) -> Result<(), adf_store::StoreError> {
    let config = file.config_shared()?;
    let Some(start) = config
        .get("start_in_state")
        .and_then(Value::as_str)
        .filter(|s| matches!(*s, "active" | "idle" | "hibernate"))
    else {
        return Ok(());
    };
    let stored = config
        .get("state")
        .and_then(Value::as_str)
        .unwrap_or("active");
    if stored == start || matches!(stored, "off" | "suspended") {
        return Ok(());
    }
    file.config_set_path(
        adf_store::Caller::Owner,
        "state",
        adf_store::ConfigAction::Set,
        serde_json::json!(start),
    )
}

/// Names, at load, the configured sections this daemon stores but does not run (a `tracing`
/// warning and a `warn` row, origin `runtime`, event `config_not_run`), so none is accepted
/// silently. A row that cannot be written leaves the warning.
fn log_sections_not_run(file: &mut adf_store::AdfFile, config: &Value) {
    let sections = adf_store::unsupported::unsupported_sections(config);
    let Some(line) = adf_store::unsupported::warning_line(config) else {
        return;
    };
    tracing::warn!(path = %file.path().display(), "{line}");
    let paths: Vec<&str> = sections.iter().map(|s| s.path.as_str()).collect();
    let data = json!({ "sections": paths });
    if let Err(error) = file.log(&adf_store::NewLog {
        level: "warn",
        origin: Some("runtime"),
        event: Some("config_not_run"),
        target: None,
        message: &line,
        data: Some(&data),
        r#loop: None,
    }) {
        tracing::warn!(%error, "cannot log the sections not run");
    }
}
