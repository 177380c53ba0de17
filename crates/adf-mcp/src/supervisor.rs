//! Process supervision: one slot per (agent file, server). A server starts on the first call
//! (never at load), is shared by nothing across agents, stops after an idle period or when its
//! agent stops, and a server that crashed or hung is restarted by the next call.
//!
//! Sessions live on the supervisor's own runtime (one background thread, `Background`), not
//! on the runtime of the call that started them: the daemon runs each turn on a short-lived
//! current-thread runtime, and a session whose tasks lived there would die with the turn (its
//! child killed, the next turn starting it again), and a call the turn's abort dropped could
//! not tell the server: rmcp queues `notifications/cancelled` when a call's future is dropped,
//! and only a runtime that keeps running writes it out.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use serde_json::Value;

use crate::McpError;
use crate::connect::{self, Launch, Session, StderrTail};
use crate::declare::DiscoveredTool;
use crate::spec::ServerSpec;

/// How long a server may sit unused before it is stopped, unless configured otherwise.
pub const DEFAULT_IDLE_STOP: Duration = Duration::from_secs(300);

type Key = (PathBuf, String);

#[derive(Default)]
struct Slot {
    session: tokio::sync::Mutex<Option<Live>>,
    stderr: StderrTail,
    last_used: Mutex<Option<Instant>>,
    /// A task is waiting to stop the server once it has been idle long enough.
    reaper_armed: std::sync::atomic::AtomicBool,
}

struct Live {
    session: Session,
    spec: ServerSpec,
}

/// The runtime the sessions, their stderr readers and the idle reapers run on: a
/// current-thread runtime driven by one thread until the last clone of the supervisor is
/// dropped (then its tasks end, and with them the child processes).
struct Background {
    handle: tokio::runtime::Handle,
    /// Dropping it ends the thread's `block_on`.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Background {
    fn start() -> Result<Background, McpError> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (handle_sender, handle_receiver) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("adf-mcp".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _gone = handle_sender.send(Err(error.to_string()));
                        return;
                    }
                };
                let _gone = handle_sender.send(Ok(runtime.handle().clone()));
                let _stopped = runtime.block_on(stopped);
            })
            .map_err(|e| McpError::Start(format!("cannot start the MCP session thread: {e}")))?;
        let handle = handle_receiver
            .recv()
            .map_err(|_| McpError::Start("the MCP session thread ended at start".into()))?
            .map_err(|e| McpError::Start(format!("cannot start the MCP session runtime: {e}")))?;
        Ok(Background {
            handle,
            _stop: stop,
        })
    }
}

/// Every MCP server this process runs for its agents.
#[derive(Clone)]
pub struct Supervisor {
    slots: Arc<Mutex<HashMap<Key, Arc<Slot>>>>,
    idle_stop: Duration,
    starts: Arc<AtomicU64>,
    background: Arc<std::sync::OnceLock<Background>>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("idle_stop", &self.idle_stop)
            .field("starts", &self.starts())
            .finish_non_exhaustive()
    }
}

impl Default for Supervisor {
    fn default() -> Self {
        Self::new(DEFAULT_IDLE_STOP)
    }
}

/// The status of one server slot, as `GET /runtime/mcp` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    /// The agent file.
    pub file: PathBuf,
    /// The server name.
    pub server: String,
    /// Whether a session is open now.
    pub running: bool,
}

impl Supervisor {
    /// A supervisor stopping servers idle for `idle_stop`.
    pub fn new(idle_stop: Duration) -> Self {
        Supervisor {
            slots: Arc::default(),
            idle_stop,
            starts: Arc::default(),
            background: Arc::default(),
        }
    }

    /// The handle of the sessions' runtime, started on first use.
    fn background(&self) -> Result<tokio::runtime::Handle, McpError> {
        if let Some(background) = self.background.get() {
            return Ok(background.handle.clone());
        }
        let started = Background::start()?;
        // Two first calls may race: the loser's thread ends as its `Background` drops.
        Ok(self.background.get_or_init(|| started).handle.clone())
    }

    /// How many sessions this supervisor has opened since it was made (every start and
    /// restart counts).
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::SeqCst)
    }

    fn slot(&self, file: &Path, server: &str) -> Arc<Slot> {
        let key = (file.to_path_buf(), server.to_owned());
        match self.slots.lock() {
            Ok(mut slots) => slots.entry(key).or_default().clone(),
            Err(poisoned) => poisoned.into_inner().entry(key).or_default().clone(),
        }
    }

    fn existing_slots(&self) -> Vec<(Key, Arc<Slot>)> {
        let slots = match self.slots.lock() {
            Ok(slots) => slots,
            Err(poisoned) => poisoned.into_inner(),
        };
        slots.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// A session for `spec` of the agent `launch.file`: the open one, or a new one when
    /// none is open, the open one ended (a crash) or its declaration changed.
    async fn peer(
        &self,
        slot: &Slot,
        spec: &ServerSpec,
        launch: &Launch,
    ) -> Result<rmcp::Peer<rmcp::RoleClient>, McpError> {
        let mut guard = slot.session.lock().await;
        let stale = guard.as_ref().is_some_and(|live| {
            live.session.is_closed() || live.session.is_transport_closed() || &live.spec != spec
        });
        if stale && let Some(live) = guard.take() {
            stop(live).await;
        }
        if let Some(live) = guard.as_ref() {
            return Ok(live.session.peer().clone());
        }
        let background = self.background()?;
        let (owned_spec, owned_launch, stderr) =
            (spec.clone(), launch.clone(), slot.stderr.clone());
        let session = background
            .spawn(async move { connect::open(&owned_spec, &owned_launch, &stderr).await })
            .await
            .map_err(|e| {
                McpError::Start(format!("MCP server '{}' did not start: {e}", spec.name))
            })??;
        self.starts.fetch_add(1, Ordering::SeqCst);
        let peer = session.peer().clone();
        *guard = Some(Live {
            session,
            spec: spec.clone(),
        });
        Ok(peer)
    }

    /// Lists the server's tools (starting it if needed): discovery.
    pub async fn discover(
        &self,
        spec: &ServerSpec,
        launch: &Launch,
    ) -> Result<Vec<DiscoveredTool>, McpError> {
        let slot = self.slot(&launch.file, &spec.name);
        let peer = self.peer(&slot, spec, launch).await?;
        let listed = tokio::time::timeout(spec.timeout, peer.list_all_tools()).await;
        let tools = match listed {
            Ok(Ok(tools)) => tools,
            Ok(Err(error)) => {
                self.stop_slot(&slot).await;
                return Err(McpError::Call(format!(
                    "MCP server '{}' could not list its tools: {error}",
                    spec.name
                )));
            }
            Err(_) => {
                self.stop_slot(&slot).await;
                return Err(McpError::Timeout(format!(
                    "MCP server '{}' did not list its tools within {} ms; it was stopped",
                    spec.name,
                    spec.timeout.as_millis()
                )));
            }
        };
        self.touch(&slot);
        Ok(tools
            .into_iter()
            .map(|tool| DiscoveredTool {
                name: tool.name.to_string(),
                description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                input_schema: Value::Object((*tool.input_schema).clone()),
            })
            .collect())
    }

    /// Calls `tool` with `arguments` within the server's `tool_call_timeout_ms`. A server that
    /// hangs past it or whose session breaks is stopped, so the next call starts it afresh.
    pub async fn call(
        &self,
        spec: &ServerSpec,
        launch: &Launch,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
    ) -> Result<rmcp::model::CallToolResult, McpError> {
        let slot = self.slot(&launch.file, &spec.name);
        let peer = self.peer(&slot, spec, launch).await?;
        let request = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let outcome = tokio::time::timeout(spec.timeout, peer.call_tool(request)).await;
        match outcome {
            Ok(Ok(result)) => {
                self.touch(&slot);
                Ok(result)
            }
            Ok(Err(rmcp::ServiceError::McpError(error))) => {
                self.touch(&slot);
                Err(McpError::Call(format!(
                    "MCP server '{}' refused the call to '{tool}': {}",
                    spec.name, error.message
                )))
            }
            Ok(Err(error)) => {
                self.stop_slot(&slot).await;
                Err(McpError::Call(format!(
                    "MCP server '{}' failed during the call to '{tool}' ({error}); it will be restarted on the next call",
                    spec.name
                )))
            }
            Err(_) => {
                self.stop_slot(&slot).await;
                Err(McpError::Timeout(format!(
                    "MCP server '{}' did not answer '{tool}' within {} ms (tool_call_timeout_ms); it was stopped and starts again on the next call",
                    spec.name,
                    spec.timeout.as_millis()
                )))
            }
        }
    }

    /// The stderr lines server `server` of `file` wrote since the last drain.
    pub fn drain_stderr(&self, file: &Path, server: &str) -> Vec<String> {
        self.slot(file, server).stderr.drain()
    }

    /// Records a use and, unless one waits already, arms the task that stops the server once
    /// it has been idle for `idle_stop` (on the sessions' runtime, so it outlives the caller's).
    fn touch(&self, slot: &Arc<Slot>) {
        if let Ok(mut last) = slot.last_used.lock() {
            *last = Some(Instant::now());
        }
        if slot.reaper_armed.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(handle) = self.background() else {
            slot.reaper_armed.store(false, Ordering::SeqCst);
            return;
        };
        let this = self.clone();
        let slot = Arc::clone(slot);
        handle.spawn(async move {
            loop {
                let last = slot.last_used.lock().ok().and_then(|last| *last);
                let Some(last) = last else { break };
                let deadline = last + this.idle_stop;
                if Instant::now() >= deadline {
                    this.stop_slot(&slot).await;
                    break;
                }
                tokio::time::sleep_until(deadline.into()).await;
            }
            slot.reaper_armed.store(false, Ordering::SeqCst);
        });
    }

    /// Stops every server unused for at least `idle` (measured from `now`). Returns how many
    /// stopped.
    pub async fn stop_idle(&self, now: Instant, idle: Duration) -> usize {
        let mut stopped = 0;
        for (_, slot) in self.existing_slots() {
            let idle_enough = slot
                .last_used
                .lock()
                .map(|last| last.is_none_or(|l| now.saturating_duration_since(l) >= idle))
                .unwrap_or(true);
            if idle_enough && self.stop_slot(&slot).await {
                stopped += 1;
            }
        }
        stopped
    }

    async fn stop_slot(&self, slot: &Slot) -> bool {
        let live = slot.session.lock().await.take();
        match live {
            Some(live) => {
                stop(live).await;
                true
            }
            None => false,
        }
    }

    /// Stops server `server` of the agent at `file` (`mcp_restart`, `adf mcp restart`).
    pub async fn stop_server(&self, file: &Path, server: &str) -> bool {
        let slot = self.slot(file, server);
        self.stop_slot(&slot).await
    }

    /// Drops the open session of server `server` of `file` without waiting for it to end
    /// (callable from synchronous code: the session's own runtime ends the process); the
    /// next call starts the server afresh.
    pub fn forget_server(&self, file: &Path, server: &str) {
        let slot = self.slot(file, server);
        if let Ok(mut session) = slot.session.try_lock() {
            session.take();
        }
    }

    /// Stops every server of the agent at `file` (the agent went `off` or unloaded, STL-04).
    pub async fn stop_agent(&self, file: &Path) -> usize {
        let mut stopped = 0;
        for ((slot_file, _), slot) in self.existing_slots() {
            if slot_file == file && self.stop_slot(&slot).await {
                stopped += 1;
            }
        }
        if let Ok(mut slots) = self.slots.lock() {
            slots.retain(|(slot_file, _), _| slot_file != file);
        }
        stopped
    }

    /// Every slot this supervisor knows, running or not.
    pub async fn status(&self) -> Vec<ServerStatus> {
        let mut out = Vec::new();
        for ((file, server), slot) in self.existing_slots() {
            let running = slot.session.lock().await.as_ref().is_some_and(|live| {
                !live.session.is_closed() && !live.session.is_transport_closed()
            });
            out.push(ServerStatus {
                file,
                server,
                running,
            });
        }
        out.sort_by(|a, b| (&a.file, &a.server).cmp(&(&b.file, &b.server)));
        out
    }

    /// How many sessions are open now.
    pub async fn running(&self) -> usize {
        self.status().await.iter().filter(|s| s.running).count()
    }
}

async fn stop(live: Live) {
    // Cancelling closes the transport: the child's stdin ends and, when it lingers, the
    // transport's drop kills it.
    let _ignored = live.session.cancel().await;
}

/// Credentials by variable name (values zeroized on drop).
pub type Credentials = BTreeMap<String, zeroize::Zeroizing<String>>;
