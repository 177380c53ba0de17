//! [`AgentRegistry`]: the loaded agents by id, handle and name, in load order, each an actor
//! owned by its [`StoreHandle`], and the steps of loading and unloading one.
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
use std::time::Duration;

use serde_json::{Value, json};

use adf_store::{IdleRelease, StoreError, StoreHandle};

use crate::dispatch::TriggerQueue;
use crate::error::ServerError;
use crate::events::SeqAllocator;
use crate::hil::Hil;

/// The outcome of loading an agent file (`Daemon::load`, `Hub::load_agent`).
#[derive(Debug)]
pub struct Loaded {
    /// The agent hosting the file, new or already loaded.
    pub agent: Arc<Agent>,
    /// False when the file was already loaded (loading is idempotent).
    pub newly_loaded: bool,
}

/// What a load of an agent file awaits (`Hub::load_agent`).
pub(crate) type LoadFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Loaded, ServerError>> + Send>>;

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
    /// The config's `name`; empty when the config has none.
    pub name: String,
    /// The config's `handle`, else the one stored in meta; `None` when neither is set.
    pub handle: Option<String>,
    /// The config's `autostart`: the daemon loads the file at start and kicks its loop.
    pub autostart: bool,
    /// The live display state: starts at `config.state`, moved by `POST /state`, kept in
    /// memory only (as in the reference).
    pub display_state: String,
    /// The DID read at load, so the mesh finds a recipient by DID without opening every file
    /// (an identity another process rotates later is read again when the daemon notices that
    /// write, `watch`).
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
    pub(crate) seq: tokio::sync::Mutex<SeqAllocator>,
    triggers: TriggerQueue,
    /// Turns in flight and the owner decisions they wait for (empty while idle).
    hil: Hil,
    /// The umbilical taps' queue, buckets and counters (see `taps`).
    taps: crate::taps::Taps,
    /// Streaming text and tool progress of its turns, for the Studio (see `live`).
    live: crate::live::LiveFeed,
    /// The reachable agents main was last told of (`mesh_updates`, §5.19), kept across the
    /// executor each turn makes; set on the first turn.
    mesh_updates: std::sync::OnceLock<adf_runtime::executor::MeshUpdates>,
    /// One gate per loop, held by the turn job that runs the loop: a loop never runs two turns
    /// at once, while turn jobs of different loops (and the agent's other jobs) run side by
    /// side (§6.4: each loop is its own conversation with its own executor state).
    loop_gates: LoopGates,
    /// What the daemon last re-read of other writers' changes (see `watch`).
    watch: crate::watch::AgentWatch,
    /// The number of the latest read of its timers the scheduler took (see
    /// `scheduler::WakeRead`).
    wake_read: std::sync::atomic::AtomicU64,
    /// Its running channel adapters (see `adapters`).
    adapters: crate::adapters::AgentAdapters,
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

    pub(crate) fn watch(&self) -> &crate::watch::AgentWatch {
        &self.watch
    }

    pub(crate) fn wake_read(&self) -> &std::sync::atomic::AtomicU64 {
        &self.wake_read
    }

    /// Its `mesh_updates` state over `mesh` (made on first use).
    pub(crate) fn mesh_updates(
        &self,
        mesh: impl FnOnce() -> Arc<dyn adf_runtime::messaging::Mesh>,
    ) -> adf_runtime::executor::MeshUpdates {
        self.mesh_updates
            .get_or_init(|| adf_runtime::executor::MeshUpdates::new(mesh()))
            .clone()
    }

    /// The gates of its loops (see `turns`).
    pub(crate) fn loop_gates(&self) -> &LoopGates {
        &self.loop_gates
    }

    /// Its channel adapters (see `adapters`): their statuses, and where a `type:id`
    /// recipient is delivered.
    pub(crate) fn adapters(&self) -> &crate::adapters::AgentAdapters {
        &self.adapters
    }

    /// The agent's turns in flight and the approvals and asks they wait for.
    pub fn hil(&self) -> &Hil {
        &self.hil
    }

    /// The live feed of its turns (streaming text, tool calls), for the Studio.
    pub fn live(&self) -> &crate::live::LiveFeed {
        &self.live
    }

    /// The agent's umbilical taps (bounded queue and counters).
    pub fn taps(&self) -> &crate::taps::Taps {
        &self.taps
    }

    /// A copy of the agent's list fields as they stand now.
    pub fn info(&self) -> AgentInfo {
        self.info
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn update_info(&self, change: impl FnOnce(&mut AgentInfo)) {
        change(&mut self.info.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// The canonical path as text (lossy for non-UTF-8 paths), as API answers show it.
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

/// The gates of one agent's loops, made on a loop's first turn (an agent has at most 17
/// loops, so they are kept).
#[derive(Debug, Default)]
pub(crate) struct LoopGates {
    gates: Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A loop's gate, held until dropped.
pub(crate) type LoopPass = tokio::sync::OwnedMutexGuard<()>;

impl LoopGates {
    fn gate(&self, loop_name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(gates.entry(loop_name.to_owned()).or_default())
    }

    /// Waits until no other turn job runs `loop_name`, then holds it.
    pub(crate) async fn enter(&self, loop_name: &str) -> LoopPass {
        self.gate(loop_name).lock_owned().await
    }

    /// Holds `loop_name` if no other turn job runs it now.
    pub(crate) fn try_enter(&self, loop_name: &str) -> Option<LoopPass> {
        self.gate(loop_name).try_lock_owned().ok()
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
struct Lists {
    /// Loaded agents in load order (the `/agents` order).
    loaded: Vec<Arc<Agent>>,
    /// Agents stopped in this process, by id, so `start` can load them again.
    stopped: Vec<(String, PathBuf)>,
    /// Moves with every load and unload, so a turn sees whether the roster changed without
    /// opening every file (`mesh_updates`).
    version: u64,
}

/// A newly opened agent, not yet visible in the registry.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) agent: Arc<Agent>,
    /// Approvals an earlier process left behind, settled before the agent is visible.
    pub(crate) orphans: Vec<(String, &'static str)>,
}

/// The loaded agents (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct AgentRegistry {
    lists: RwLock<Lists>,
    /// Serializes loads, so two concurrent loads of one path cannot both open it.
    load_lock: tokio::sync::Mutex<()>,
}

/// What the load's first job reads from the file.
struct LoadFacts {
    config: Value,
    handle_meta: Option<String>,
    did: Option<String>,
    persisted_seq: Option<u64>,
}

impl AgentRegistry {
    fn lists(&self) -> std::sync::RwLockReadGuard<'_, Lists> {
        self.lists.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn lists_mut(&self) -> std::sync::RwLockWriteGuard<'_, Lists> {
        self.lists.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Held for a whole load, so two concurrent loads of one path cannot both open it.
    pub(crate) async fn lock_loads(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.load_lock.lock().await
    }

    /// Loaded agents in load order.
    pub(crate) fn all(&self) -> Vec<Arc<Agent>> {
        self.lists().loaded.clone()
    }

    /// The agent whose id, handle or name is `key` (in that order of precedence, as in the
    /// reference: an id always wins over another agent's handle or name).
    pub(crate) fn find(&self, key: &str) -> Result<Arc<Agent>, ServerError> {
        self.lists()
            .loaded
            .iter()
            .map(|a| (a.matches(key), a))
            .filter(|(m, _)| *m != Matched::No)
            .min_by_key(|(m, _)| *m)
            .map(|(_, a)| Arc::clone(a))
            .ok_or_else(|| ServerError::UnknownAgent(key.to_owned()))
    }

    /// The agent loaded from the canonical path `canonical`, if any.
    pub(crate) fn find_by_path(&self, canonical: &Path) -> Option<Arc<Agent>> {
        self.lists()
            .loaded
            .iter()
            .find(|a| a.path == canonical)
            .cloned()
    }

    /// The path of the agent `key` stopped earlier in this process.
    pub(crate) fn stopped_path(&self, key: &str) -> Result<PathBuf, ServerError> {
        self.lists()
            .stopped
            .iter()
            .find(|(id, _)| id == key)
            .map(|(_, p)| p.clone())
            .ok_or_else(|| ServerError::UnknownAgent(key.to_owned()))
    }

    /// Makes `agent` visible (last in load order).
    pub(crate) fn insert(&self, agent: &Arc<Agent>) {
        let mut lists = self.lists_mut();
        lists.stopped.retain(|(id, _)| *id != agent.id);
        lists.loaded.push(Arc::clone(agent));
        lists.version += 1;
    }

    /// Removes `agent`, remembering its path so `start` can load it again.
    pub(crate) fn remove(&self, agent: &Arc<Agent>) {
        let mut lists = self.lists_mut();
        lists.loaded.retain(|a| !Arc::ptr_eq(a, agent));
        lists.stopped.push((agent.id.clone(), agent.path.clone()));
        lists.version += 1;
    }

    /// Removes and returns every loaded agent (shutdown).
    pub(crate) fn take_all(&self) -> Vec<Arc<Agent>> {
        let mut lists = self.lists_mut();
        lists.version += 1;
        std::mem::take(&mut lists.loaded)
    }

    /// Changes whenever an agent is loaded or unloaded.
    pub(crate) fn roster_version(&self) -> u64 {
        self.lists().version
    }

    /// Opens the file at `canonical` on its own worker and builds its agent: the start state
    /// entered, the config id checked against the loaded agents (409 on a clash), orphaned
    /// approvals settled. The file is closed again on any refusal.
    pub(crate) async fn open(&self, canonical: PathBuf) -> Result<Opened, ServerError> {
        let store = open_store(canonical.clone()).await?;
        let facts = match store.run(read_load_facts).await {
            Ok(facts) => facts,
            Err(error) => {
                close_quietly(store).await;
                return Err(error.into());
            }
        };
        let id = match self.unique_id(&facts.config) {
            Ok(id) => id,
            Err(error) => {
                close_quietly(store).await;
                return Err(error);
            }
        };
        // Before the agent is visible, so no turn of this process can be waiting yet.
        let orphans = match store.run(crate::hil::settle_orphaned_approvals).await {
            Ok(orphans) => orphans,
            Err(error) => {
                tracing::warn!(path = %canonical.display(), %error, "cannot settle orphaned approvals");
                Vec::new()
            }
        };
        let agent = build_agent(id, canonical, store, facts);
        Ok(Opened { agent, orphans })
    }

    /// The config's id, refused when missing or when another loaded agent has it.
    fn unique_id(&self, config: &Value) -> Result<String, ServerError> {
        let Some(id) = config.get("id").and_then(Value::as_str).map(str::to_owned) else {
            return Err(ServerError::Store(StoreError::Malformed(
                "config has no string id".into(),
            )));
        };
        let clash = self
            .lists()
            .loaded
            .iter()
            .find(|a| a.id == id)
            .map(|other| other.file_path());
        match clash {
            Some(other) => Err(ServerError::Conflict(format!(
                "an agent with id \"{id}\" is already loaded from {other}; ids must be unique in one daemon"
            ))),
            None => Ok(id),
        }
    }
}

/// The canonical path of `path`, which must be a regular file (404 otherwise; nothing is
/// created).
pub(crate) async fn canonical_file(path: &Path) -> Result<PathBuf, ServerError> {
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
    Ok(canonical)
}

async fn open_store(canonical: PathBuf) -> Result<StoreHandle, ServerError> {
    tokio::task::spawn_blocking(move || {
        // Watched: the daemon notices other processes writing the file (see `watch`).
        StoreHandle::open_watched(canonical, IdleRelease::After(AGENT_IDLE_RELEASE))
    })
    .await
    .map_err(|e| ServerError::Io(std::io::Error::other(e)))?
    .map_err(ServerError::from)
}

/// The load's first job: enters the start state, names the sections not run, and reads what
/// the agent record needs.
fn read_load_facts(file: &mut adf_store::AdfFile) -> Result<LoadFacts, StoreError> {
    enter_start_state(file)?;
    let config = file.config()?;
    log_sections_not_run(file, &config);
    let handle_meta = file.meta_get("adf_handle")?.map(|m| m.value);
    let did = adf_runtime::messaging::agent_did(file)?;
    let persisted_seq = file
        .meta_get(SEQ_META_KEY)?
        .and_then(|m| m.value.trim().parse::<u64>().ok());
    Ok(LoadFacts {
        config,
        handle_meta,
        did,
        persisted_seq,
    })
}

fn build_agent(id: String, canonical: PathBuf, store: StoreHandle, facts: LoadFacts) -> Arc<Agent> {
    let info = AgentInfo {
        did: facts.did,
        ..info_from_config(&facts.config, facts.handle_meta)
    };
    let agent = Arc::new(Agent {
        id,
        path: canonical,
        store,
        info: Mutex::new(info),
        seq: tokio::sync::Mutex::new(SeqAllocator::starting_at(
            facts.persisted_seq,
            adf_store::time::now_ms(),
        )),
        triggers: TriggerQueue::default(),
        hil: Hil::default(),
        taps: crate::taps::Taps::default(),
        live: crate::live::LiveFeed::default(),
        mesh_updates: std::sync::OnceLock::new(),
        loop_gates: LoopGates::default(),
        watch: crate::watch::AgentWatch::seeded(&facts.config),
        wake_read: std::sync::atomic::AtomicU64::new(0),
        adapters: crate::adapters::AgentAdapters::default(),
    });
    // The config is at hand: an agent without taps costs its events no config read.
    agent
        .taps()
        .prime(&agent.id, &facts.config, agent.triggers().generation());
    agent
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

/// Closes the file cleanly after every job already queued on its worker.
pub(crate) async fn close_quietly(store: StoreHandle) {
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
