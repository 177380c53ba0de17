//! Agents on the network (spec §12): HTTP serving of an agent's `serving.api` routes, its
//! `public/` files and its `shared` files under `/agents/{handle}/…`.
//!
//! Principal types: [`Serving`] (the per-daemon serving state: one slot per agent with its
//! sandbox, its in-flight bound and its response cache), [`AgentDirectory`] (what the host —
//! the daemon — tells serving about its agents), [`ServingLimits`] and [`BodyReader`] (how the
//! host reads an unauthenticated body under its global budget). [`router`] is the axum
//! `Router` of the seam; the daemon's front door calls [`Serving::handle`] directly for the
//! paths that are not its control API, so a control route can never be reached without the
//! token through this router.
//!
//! Resolution (§12.1): `serving.api` → `serving.public` → `serving.shared` → 404. The first
//! path segment `inbox`, `card` or `health` is reserved (the daemon serves them itself) and
//! never reaches a route or a file. WebSocket routes (`method: "WS"`) answer upgrades only
//! (see `ws`); a plain HTTP request never matches them.
//!
//! How a request runs. Nothing waits for the agent's store worker (a model turn can hold it
//! for minutes): the request's blocking part goes to the agent's request thread (`lane`: one
//! thread per busy agent, requests in arrival order, gone after the linger), which takes a
//! guest connection to the file (`AdfFile::open_guest`, as message ingress does), resolves
//! the path, runs the route's middleware chain (§12.3,
//! [`adf_runtime::middleware::run_route_chain`]) and its lambda through
//! [`adf_runtime::code::run_lambda_closing`] under the source file's authorization (the
//! request's rows in one write transaction; requests queued behind a busy lane share one),
//! then gives the connection back to the agent's slot. Log rows wait in memory while more
//! requests queue and the batch wrote nothing else (at most 10 ms or 300 rows: see
//! `resolve::HeldRows`), so a busy read-only route commits once per few hundred rows, not
//! once per batch. A static file waits behind a slow lambda of the same agent on that thread. The slot
//! keeps a few such connections while requests keep coming and closes them once the agent
//! has had none for [`ServingLimits::idle_file_linger`]: an idle agent therefore holds no
//! thread, no worker and no file, and a request to it opens the file again. The agent's
//! sandbox (one QuickJS runtime, kept so `warm: true` routes keep their context) and the
//! runtime that drives it live in the slot until the agent is released ([`Serving::release`]);
//! lambda runs of one agent take turns on them.
//!
//! Limits, each a JSON error `{error, code}` rather than a hang: the body size (413
//! `BODY_TOO_LARGE`), requests in flight per agent (503 `AGENT_BUSY` with `Retry-After`), the
//! lambda's time (`limits.execution_timeout_ms`, at most [`ServingLimits::lambda_timeout`]; 504
//! `LAMBDA_TIMEOUT`), and the whole request (504 `REQUEST_TIMEOUT`, for a request queued
//! behind slow lambdas). Responses of `GET` routes with `cache_ttl_ms` are cached per agent,
//! method, path and query for that long.
//!
//! Beside serving: [`outbound`] (the agent's outbound WebSockets), [`tools`] (the `ws_*`
//! tools), [`streams`] (stream bindings and the `stream_*` tools, §5.23) and [`umbilical`]
//! (the replay log, §5.24).

mod cache;
pub mod handshake;
mod kept;
mod lane;
pub mod outbound;
mod request;
mod resolve;
mod response;
pub mod streams;
pub mod tools;
pub mod umbilical;
mod ws;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::any;
use futures::future::BoxFuture;

use adf_runtime::code::Sandbox;
use adf_runtime::tools::ToolRegistry;

pub use request::WITHHELD_HEADERS;
pub use resolve::CSP_SANDBOX_KEY;
pub use response::{ErrorCode, error_response};
pub use ws::ConnectionInfo;

/// What builds the bytes an agent signs, given the agent's DID.
pub type SignedBytes = Box<dyn FnOnce(&str) -> Vec<u8> + Send>;

/// The log origin of serving rows (`api_response`).
pub const LOG_ORIGIN: &str = "serving";

/// Path segments served by the daemon itself directly under the handle (§12.1).
pub const RESERVED_SEGMENTS: [&str; 3] = ["inbox", "card", "health"];

/// The highest rowid of `adf_tasks`, `adf_logs`, `adf_inbox` and `adf_outbox`, in that
/// order (the tables whose new rows are trigger events, §7), read on a request's connection
/// after its rows committed.
pub type RowsThrough = [i64; 4];

/// One agent as serving needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedAgent {
    /// The agent's config id (the slot key).
    pub id: String,
    /// The canonical path of its `.adf` file.
    pub path: PathBuf,
}

/// What the host (the daemon) tells serving about its agents.
pub trait AgentDirectory: Send + Sync + std::fmt::Debug + 'static {
    /// The loaded agent `key` (its handle; the daemon also accepts its id or name) names.
    fn find(&self, key: &str) -> Option<ServedAgent>;

    /// Called after a route lambda ran for `agent`, so the host can notice rows the lambda
    /// wrote (the daemon's trigger sweep). `through`, when known, is where the observed
    /// tables ended once the run's rows committed ([`RowsThrough`]): a host with nothing
    /// that reacts to those rows can move its marks there instead of sweeping. Never waits
    /// for the agent's worker.
    fn lambda_ran(&self, agent: &ServedAgent, through: Option<RowsThrough>);

    /// Delivers one ALF message that arrived over a WebSocket from `peer`, exactly as the
    /// inbox route would (`{accepted, id, message_id, duplicate}`), or the refusal's status
    /// and reason. A host without a mesh inbox keeps the default: 501 for every message.
    fn deliver(
        &self,
        _agent: &ServedAgent,
        _wire: Vec<u8>,
        _peer: Option<IpAddr>,
    ) -> BoxFuture<'static, Result<serde_json::Value, (u16, String)>> {
        Box::pin(async {
            Err((
                501,
                "this host has no inbox for messages over WebSockets".to_owned(),
            ))
        })
    }

    /// Signs `bytes(agent DID)` with the agent's key: `(did, "ed25519:…")`, or `None` when
    /// the agent has no identity this installation can open.
    /// A host without agent identities keeps the default: `None`.
    fn sign_as_agent(
        &self,
        _agent: &ServedAgent,
        _bytes: SignedBytes,
    ) -> BoxFuture<'static, Option<(String, String)>> {
        Box::pin(async { None })
    }
}

/// A refused body, already shaped as the answer (413, 503, 408, 400).
pub type BodyRefused = Response;

/// What a body read under the host's budget holds until the request is done.
pub type BodyHold = Box<dyn Send + Sync>;

/// Reads an unauthenticated request body of at most `limit` bytes (the daemon counts it
/// against its global body budget until the returned hold is dropped).
pub trait BodyReader: Send + Sync + std::fmt::Debug + 'static {
    /// Reads `body`, checking a declared `Content-Length` first.
    fn read(
        &self,
        headers: &HeaderMap,
        body: Body,
        limit: usize,
    ) -> BoxFuture<'static, Result<(Vec<u8>, BodyHold), BodyRefused>>;
}

/// The limits of serving (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServingLimits {
    /// Largest request body a route receives. Default 10 MiB.
    pub max_body_bytes: usize,
    /// Requests of one agent in flight (queued or running) at once. Default 64.
    pub max_in_flight_per_agent: usize,
    /// Longest a route lambda may run (a shorter `limits.execution_timeout_ms` wins).
    /// Default 30 s.
    pub lambda_timeout: Duration,
    /// Longest a whole request may take, queueing included. Default 60 s.
    pub request_timeout: Duration,
    /// How long an agent's guest connections stay open after its last request (so a busy
    /// route reuses them and an idle agent holds no file). Default 10 s.
    pub idle_file_linger: Duration,
    /// How long the log rows of a busy agent's requests that wrote nothing else may wait in
    /// memory, to be committed together after their answers. Default 10 ms.
    pub held_logs_max_age: Duration,
    /// An agent whose request batches begin closer than this on average is busy. Default
    /// 1 ms (1,000 batches a second).
    pub busy_batch_gap: Duration,
}

impl Default for ServingLimits {
    fn default() -> Self {
        ServingLimits {
            max_body_bytes: 10 * 1024 * 1024,
            max_in_flight_per_agent: 64,
            lambda_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            idle_file_linger: Duration::from_secs(10),
            held_logs_max_age: Duration::from_millis(10),
            busy_batch_gap: Duration::from_millis(1),
        }
    }
}

/// Per-agent serving state: created at the agent's first request, dropped on release.
#[derive(Debug)]
struct Slot {
    in_flight: Arc<tokio::sync::Semaphore>,
    /// The agent's sandbox, created by the first lambda run; its warm pool is what `warm`
    /// routes reuse.
    sandbox: Mutex<Option<Sandbox>>,
    /// Lambda runs of one agent take turns on its sandbox and on the runtime that drives it
    /// (a std mutex: it is held on the blocking thread that runs the lambda, never across an
    /// `.await`). The runtime is built by the first run.
    runs: Mutex<Option<kept::LambdaRuntime>>,
    /// Guest connections kept between requests (see `kept`).
    files: kept::KeptFiles,
    /// The thread that runs the agent's HTTP requests while it is busy (see `lane`).
    lane: lane::Lane,
    /// Requests waiting for the lane, taken a batch at a time (see `resolve::enqueue`).
    queue: Mutex<resolve::RequestQueue>,
    /// Signalled when a request joins the queue, or the slot is released, while the drain
    /// waits to write held log rows.
    arrived: std::sync::Condvar,
    /// Log rows of requests that wrote nothing else, not yet written (see
    /// `resolve::resolve_batch`).
    held_logs: Mutex<resolve::HeldRows>,
    cache: cache::ResponseCache,
    /// Open inbound WebSockets by connection id.
    connections: Mutex<HashMap<String, ConnectionInfo>>,
    /// How `ws_send`/`ws_disconnect` reach an open inbound connection's task, by its id.
    outlets: Mutex<HashMap<String, tokio::sync::mpsc::Sender<ws::Outgoing>>>,
    /// Flipped when the slot is released: every open connection closes (1001).
    closers: tokio::sync::watch::Sender<bool>,
}

/// The serving state of one daemon (see the module docs).
#[derive(Debug)]
pub struct Serving {
    directory: Arc<dyn AgentDirectory>,
    bodies: Arc<dyn BodyReader>,
    tools: Arc<ToolRegistry>,
    limits: ServingLimits,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    /// Request threads of released agents that may still be finishing their last jobs
    /// (writing held log rows); see [`Serving::wait_released`].
    released_lanes: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Serving {
    /// Serving for the agents of `directory`, whose lambdas call `tools`, reading bodies
    /// through `bodies`.
    pub fn new(
        directory: Arc<dyn AgentDirectory>,
        bodies: Arc<dyn BodyReader>,
        tools: Arc<ToolRegistry>,
        limits: ServingLimits,
    ) -> Arc<Self> {
        Arc::new(Serving {
            directory,
            bodies,
            tools,
            limits,
            slots: Mutex::new(HashMap::new()),
            released_lanes: Mutex::new(Vec::new()),
        })
    }

    /// The limits this serving applies.
    pub fn limits(&self) -> &ServingLimits {
        &self.limits
    }

    /// Drops what serving holds for the agent `id` (its sandbox, warm contexts and cached
    /// responses): the agent was unloaded or turned `off`.
    /// Open WebSockets close with 1001.
    pub fn release(&self, id: &str) {
        let removed = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        if let Some(slot) = removed {
            slot.closers.send_replace(true);
            resolve::wake_drain(&slot);
            slot.lane.close();
            if let Some(thread) = slot.lane.take_thread() {
                let mut lanes = self
                    .released_lanes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                lanes.retain(|lane| !lane.is_finished());
                lanes.push(thread);
            }
            kept::close_later(slot.files.take_all());
        }
    }

    /// Waits, at most `limit`, until the request threads of released agents have ended: their
    /// last jobs include writing the log rows a busy agent held. A daemon calls it at shutdown,
    /// after releasing every agent and before closing their files.
    pub async fn wait_released(&self, limit: Duration) {
        let lanes = std::mem::take(
            &mut *self
                .released_lanes
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if lanes.is_empty() {
            return;
        }
        let joined = tokio::task::spawn_blocking(move || {
            for lane in lanes {
                let _panicked = lane.join();
            }
        });
        if tokio::time::timeout(limit, joined).await.is_err() {
            tracing::warn!(
                "agents' request threads did not end within {} ms of shutdown",
                limit.as_millis()
            );
        }
    }

    /// Guest connections serving keeps open for the agent `id` now (none once it has been
    /// idle for [`ServingLimits::idle_file_linger`]).
    pub fn kept_files(&self, id: &str) -> usize {
        self.existing_slot(id).map_or(0, |slot| slot.files.len())
    }

    /// Whether a request thread of the agent `id` runs now (none once the agent has been
    /// idle for [`ServingLimits::idle_file_linger`]), and how many it started so far.
    pub fn request_thread(&self, id: &str) -> (bool, u64) {
        self.existing_slot(id).map_or((false, 0), |slot| {
            (slot.lane.is_running(), slot.lane.started())
        })
    }

    /// Requests of the agent `id` admitted and not yet answered: queued, in a batch, or
    /// running (at most `max_in_flight_per_agent`; past it, 503 `AGENT_BUSY`).
    pub fn requests_in_flight(&self, id: &str) -> usize {
        self.existing_slot(id).map_or(0, |slot| {
            self.limits
                .max_in_flight_per_agent
                .saturating_sub(slot.in_flight.available_permits())
        })
    }

    /// Requests of agent `id` queued for its lane and not yet taken into a batch (a batch
    /// takes every request waiting when it starts, so some of the in-flight ones may wait
    /// inside the running batch instead).
    pub fn waiting_requests(&self, id: &str) -> usize {
        let slot = self.existing_slot(id);
        slot.map_or(0, |slot| resolve::waiting(&slot))
    }

    /// Makes sure a task closes `slot`'s kept connections once the agent is idle for the
    /// linger. Called after every request that may have kept one.
    fn watch_idle_files(&self, slot: &Arc<Slot>) {
        if !slot.files.claim_watch() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            slot.files.end_watch();
            return;
        };
        let linger = self.limits.idle_file_linger;
        let watched = Arc::downgrade(slot);
        handle.spawn(async move {
            loop {
                tokio::time::sleep(linger).await;
                let Some(slot) = watched.upgrade() else {
                    return;
                };
                // Ending the watch before taking the files: a request that checks a file in
                // after the take sees no watcher and starts one.
                slot.files.end_watch();
                match slot.files.take_idle(std::time::Instant::now(), linger) {
                    Some(files) => {
                        kept::close_later(files);
                        return;
                    }
                    None if slot.files.claim_watch() => {}
                    None => return,
                }
            }
        });
    }

    /// The open inbound WebSockets of the agent `id`, oldest first.
    pub fn connections(&self, id: &str) -> Vec<ConnectionInfo> {
        let slot = self.existing_slot(id);
        let mut open: Vec<ConnectionInfo> = slot
            .map(|slot| {
                slot.connections
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .values()
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        open.sort_by_key(|c| c.connected_at);
        open
    }

    /// The outlet of the agent's open inbound connection `connection_id`, if any.
    fn outlet(
        &self,
        agent_id: &str,
        connection_id: &str,
    ) -> Option<tokio::sync::mpsc::Sender<ws::Outgoing>> {
        let slot = self.existing_slot(agent_id)?;
        slot.outlets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(connection_id)
            .cloned()
    }

    /// Whether the agent has the open inbound connection `connection_id`.
    pub fn has_connection(&self, agent_id: &str, connection_id: &str) -> bool {
        self.outlet(agent_id, connection_id).is_some()
    }

    /// `ws_send` on an inbound connection: sends one text or binary frame and returns once
    /// it is written to the socket (or why it could not be).
    pub async fn send(
        &self,
        agent_id: &str,
        connection_id: &str,
        frame: tokio_tungstenite::tungstenite::Message,
    ) -> Result<(), String> {
        use tokio_tungstenite::tungstenite::Message as Frame;
        let frame = match frame {
            Frame::Text(text) => axum::extract::ws::Message::Text(text.as_str().into()),
            Frame::Binary(bytes) => axum::extract::ws::Message::Binary(bytes.to_vec().into()),
            _ => return Err("only text and binary frames can be sent".into()),
        };
        let outlet = self
            .outlet(agent_id, connection_id)
            .ok_or_else(|| format!("no open inbound connection '{connection_id}'"))?;
        let (written, outcome) = tokio::sync::oneshot::channel();
        outlet
            .send(ws::Outgoing::Frame(frame, written))
            .await
            .map_err(|_| format!("the connection '{connection_id}' closed"))?;
        outcome
            .await
            .unwrap_or_else(|_| Err(format!("the connection '{connection_id}' closed")))
    }

    /// `ws_disconnect` on an inbound connection: closes it with 1000; false when the agent
    /// has no open inbound connection by that id.
    pub fn disconnect(&self, agent_id: &str, connection_id: &str) -> bool {
        self.outlet(agent_id, connection_id)
            .is_some_and(|outlet| outlet.try_send(ws::Outgoing::Close).is_ok())
    }

    /// Agents that hold serving state now (a sandbox or cached responses).
    pub fn holding(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        ids.sort();
        ids
    }

    /// The agent's serving state if it has any (it has served or holds a connection).
    fn existing_slot(&self, id: &str) -> Option<Arc<Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    fn slot(&self, id: &str) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(slots.entry(id.to_owned()).or_insert_with(|| {
            Arc::new(Slot {
                in_flight: Arc::new(tokio::sync::Semaphore::new(
                    self.limits.max_in_flight_per_agent,
                )),
                sandbox: Mutex::new(None),
                runs: Mutex::new(None),
                files: kept::KeptFiles::default(),
                lane: lane::Lane::default(),
                queue: Mutex::default(),
                arrived: std::sync::Condvar::new(),
                held_logs: Mutex::new(resolve::HeldRows::new(&self.limits)),
                cache: cache::ResponseCache::default(),
                connections: Mutex::new(HashMap::new()),
                outlets: Mutex::new(HashMap::new()),
                closers: tokio::sync::watch::channel(false).0,
            })
        }))
    }

    /// Whether `path` is one serving answers: `/agents/{key}/…` with something after the
    /// key. The daemon asks this only for paths that are not its control API.
    pub fn is_served_path(path: &str) -> bool {
        request::split_agent_path(path).is_some()
    }

    /// Serves one request to `/agents/{key}/…` (see the module docs).
    pub async fn handle(self: Arc<Self>, request: Request) -> Response {
        let timeout = self.limits.request_timeout;
        match tokio::time::timeout(timeout, resolve::serve(self, request)).await {
            Ok(response) => response,
            Err(_) => error_response(
                ErrorCode::RequestTimeout,
                "the request did not complete in time",
            ),
        }
    }
}

/// The seam's router: every method on `/agents/{key}/…` goes to [`Serving::handle`]. The
/// daemon does not mount it below its control routes (see the module docs); it is what a
/// host without a control API under `/agents` serves.
pub fn router(serving: Arc<Serving>) -> Router {
    async fn serve(State(serving): State<Arc<Serving>>, request: Request) -> Response {
        serving.handle(request).await
    }
    Router::new()
        .route("/agents/{key}/", any(serve))
        .route("/agents/{key}/{*rest}", any(serve))
        .with_state(serving)
}
