//! The sandbox proper: one QuickJS runtime per agent, contexts per execution, limits.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rquickjs::context::EvalOptions;
use rquickjs::function::Async;
use rquickjs::{
    AsyncContext, AsyncRuntime, CatchResultExt, CaughtError, Ctx, Function, Module, Object,
    Promise, TypedArray, Value,
};
use serde_json::Value as Json;
use tokio::sync::watch;

use crate::host::Host;
use crate::modules::{self, AgentResolver, PreparedLoader, ResolutionMap};
use crate::packages;
use crate::transpile::{self, Kind, Prepared};
use crate::{HostError, SandboxError};

const PRELUDE: &str = include_str!("prelude.js");
/// The web/Node globals packages expect (`URL`, `Buffer`, `crypto`, ...), after the prelude.
const GLOBALS: &str = include_str!("globals.js");
/// Script name of inline code: its imports resolve against the agent's root.
const INLINE_NAME: &str = "<sys_code>";
/// Inline snippets kept transpiled (keyed by exact text); cleared wholesale when full.
const INLINE_CACHE_CAP: usize = 64;

/// Limits and pool sizes of one [`Sandbox`] (one agent).
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Heap limit of the agent's runtime in bytes (all its contexts together). Default 64 MiB.
    pub memory_limit: usize,
    /// JavaScript stack limit in bytes. Default 512 KiB; the executing thread needs more
    /// than this (tokio's default worker stack is 2 MiB).
    pub max_stack_size: usize,
    /// Total bytes of console output kept per execution. Default 64 KiB.
    pub max_log_bytes: usize,
    /// Warm contexts kept (least recently used evicted first). Default 8.
    pub warm_capacity: usize,
    /// A warm context unused this long is dropped. Default 5 minutes (the reference's TTL).
    pub warm_idle_ttl: Duration,
    /// Largest module or inline source accepted, in bytes. Default 4 MiB.
    pub max_source_bytes: usize,
    /// Most modules one execution may load. Default 256.
    pub max_modules: usize,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            memory_limit: 64 << 20,
            max_stack_size: 512 << 10,
            max_log_bytes: 64 << 10,
            warm_capacity: 8,
            warm_idle_ttl: Duration::from_secs(300),
            max_source_bytes: 4 << 20,
            max_modules: 256,
        }
    }
}

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Inline code (`sys_code`, `adf code`): the body of an async function, so top-level
    /// `await` and `return value` work; `args` is in scope. Runs in the agent's persistent
    /// inline context: `globalThis` properties (and implicit globals, the code is sloppy
    /// mode) survive between calls, `let`/`const` do not.
    Inline {
        /// JavaScript or TypeScript source.
        code: String,
        /// Strip TypeScript first.
        typescript: bool,
    },
    /// An exported function of an agent file (`sys_lambda`, triggers, timers, routes,
    /// middleware): called with `args` as its single argument; its (awaited) return value is
    /// the result. TypeScript is detected from the extension.
    Lambda {
        /// The file (`lib/report.ts`).
        path: String,
        /// The export (`main` by default).
        function: String,
    },
}

impl Entry {
    /// Parse a lambda reference `path:function` (`lib/a.ts:run`); the function defaults to
    /// `main` (`lib/a.ts`).
    pub fn lambda(source: &str) -> Entry {
        let (path, function) = match source.rsplit_once(':') {
            Some((p, f)) if !f.is_empty() && !f.contains('/') && !f.contains('.') => (p, f),
            _ => (source, "main"),
        };
        Entry::Lambda {
            path: path.to_string(),
            function: function.to_string(),
        }
    }

    /// Inline JavaScript.
    pub fn inline(code: impl Into<String>) -> Entry {
        Entry::Inline {
            code: code.into(),
            typescript: false,
        }
    }
}

/// One execution request; every context the runtime has (sys_code, sys_lambda, triggers,
/// timers, routes, middleware) goes through this.
#[derive(Debug, Clone)]
pub struct Request {
    /// What to run.
    pub entry: Entry,
    /// The single argument (`args` for inline code). Bytes as `{"__bytes_base64": …}`.
    pub args: Json,
    /// Wall-clock limit for the whole execution (module loading, JavaScript, awaits).
    pub timeout: Duration,
    /// Install native `fetch` (calling [`Host::fetch`]); absent otherwise.
    pub network: bool,
    /// Lambdas only: reuse a context kept alive for this file (`warm: true` in the trigger,
    /// timer or route). Ignored for inline code, which always uses the persistent context.
    pub warm: bool,
    /// Ends the execution early once it reads `true` ([`SandboxError::Cancelled`]): the
    /// interrupt handler stops running JavaScript, and an await in progress is dropped. Whoever
    /// asked for the result has gone (an HTTP client that disconnected).
    pub cancel: Option<watch::Receiver<bool>>,
}

impl Request {
    /// A request with `args` `{}`, a 10 s timeout (the reference default), no network, cold.
    pub fn new(entry: Entry) -> Request {
        Request {
            entry,
            args: Json::Object(Default::default()),
            timeout: Duration::from_secs(10),
            network: false,
            warm: false,
            cancel: None,
        }
    }

    /// End the execution early once `cancel` reads `true`.
    pub fn cancel(mut self, cancel: Option<watch::Receiver<bool>>) -> Request {
        self.cancel = cancel;
        self
    }

    /// Set the argument.
    pub fn args(mut self, args: Json) -> Request {
        self.args = args;
        self
    }

    /// Set the time limit.
    pub fn timeout(mut self, timeout: Duration) -> Request {
        self.timeout = timeout;
        self
    }

    /// Enable native `fetch`.
    pub fn network(mut self, on: bool) -> Request {
        self.network = on;
        self
    }

    /// Use the warm pool (lambdas).
    pub fn warm(mut self, on: bool) -> Request {
        self.warm = on;
        self
    }
}

/// Console level of a captured line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// `console.debug`, `console.trace`.
    Debug,
    /// `console.log`.
    Log,
    /// `console.info`.
    Info,
    /// `console.warn`, and unhandled promise rejections.
    Warn,
    /// `console.error`.
    Error,
}

impl LogLevel {
    /// The `adf_logs` level name (`debug`, `info`, `warn`, `error`; `log` maps to `info`).
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Log | LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// One captured console line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Level.
    pub level: LogLevel,
    /// The arguments formatted and joined by spaces.
    pub message: String,
}

/// A successful execution.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The return value as JSON (`undefined` → `null`; bytes as `{"__bytes_base64": …}`).
    pub value: Json,
    /// Console output, capped at [`SandboxConfig::max_log_bytes`].
    pub logs: Vec<LogEntry>,
    /// Output was dropped because of the cap.
    pub logs_truncated: bool,
}

/// Any execution, successful or not, with the console output it produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    /// The value or the failure.
    pub result: Result<Json, SandboxError>,
    /// Console output (also kept when the code failed).
    pub logs: Vec<LogEntry>,
    /// Output was dropped because of the cap.
    pub logs_truncated: bool,
}

/// The JavaScript sandbox of one agent: one QuickJS runtime (own heap, memory limit and
/// interrupt handler), a persistent context for inline code, a small pool of warm lambda
/// contexts, and fresh contexts for everything else. Cheap to clone (shared).
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

struct Inner {
    rt: AsyncRuntime,
    config: SandboxConfig,
    deadlines: Arc<Deadlines>,
    resolutions: ResolutionMap,
    inline: Mutex<Option<Slot>>,
    warm: Mutex<VecDeque<(String, Slot)>>,
    modules: Arc<Mutex<HashMap<String, Arc<Compiled>>>>,
    inline_cache: Mutex<HashMap<(String, bool), Arc<Prepared>>>,
    rejections: Arc<Mutex<Vec<String>>>,
    /// Bumped whenever a host call or timer finishes. rquickjs polls the futures of native
    /// async functions from whichever execution polls the runtime, so their wake-up can go to
    /// an execution that has since finished (a nested `sys_lambda`); every execution also
    /// re-polls on this signal, so no wake-up is lost.
    progress: Arc<watch::Sender<u64>>,
}

/// A prepared module: the exact source it came from and the JavaScript it became.
#[derive(Debug)]
struct Compiled {
    source: String,
    prepared: Prepared,
}

/// A context and what the sandbox knows about it.
struct Slot {
    ctx: AsyncContext,
    state: Arc<SlotState>,
    /// Modules declared into this context (QuickJS never unloads them).
    declared: HashMap<String, Arc<Compiled>>,
    network: bool,
    last_used: Instant,
}

/// Per-context state shared with the native bridge functions.
struct SlotState {
    host: Mutex<Option<Arc<dyn Host>>>,
    logs: Mutex<LogBuf>,
    /// Bumped when an execution ends: pending timers and host calls settle at once.
    cancel: watch::Sender<u64>,
    /// The sandbox-wide progress signal (see [`Inner::progress`]).
    progress: Arc<watch::Sender<u64>>,
    max_log_bytes: usize,
}

#[derive(Default)]
struct LogBuf {
    entries: Vec<LogEntry>,
    bytes: usize,
    truncated: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SlotState {
    fn push_log(&self, level: &str, message: String) {
        let level = match level {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "warn" => LogLevel::Warn,
            "error" => LogLevel::Error,
            _ => LogLevel::Log,
        };
        let mut buf = lock(&self.logs);
        if buf.truncated {
            return;
        }
        let room = self.max_log_bytes.saturating_sub(buf.bytes);
        if message.len() <= room {
            buf.bytes += message.len();
            buf.entries.push(LogEntry { level, message });
        } else {
            let mut cut = room;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            buf.bytes = self.max_log_bytes;
            buf.truncated = true;
            buf.entries.push(LogEntry {
                level,
                message: format!("{}… [console output truncated]", &message[..cut]),
            });
        }
    }

    fn take_logs(&self) -> (Vec<LogEntry>, bool) {
        let mut buf = lock(&self.logs);
        let out = (std::mem::take(&mut buf.entries), buf.truncated);
        *buf = LogBuf::default();
        out
    }

    fn begin(&self, host: Arc<dyn Host>) {
        *lock(&self.host) = Some(host);
        *lock(&self.logs) = LogBuf::default();
    }

    fn end(&self) {
        *lock(&self.host) = None;
        self.cancel.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Await `fut` unless the execution ends first.
    async fn cancellable<T>(&self, fut: impl Future<Output = T>) -> Option<T> {
        let mut rx = self.cancel.subscribe();
        tokio::select! {
            v = fut => Some(v),
            _ = rx.changed() => None,
        }
    }

    async fn call_host(self: Arc<Self>, method: String, args: String, fetch: bool) -> String {
        let host = lock(&self.host).clone();
        let Some(host) = host else {
            return tag_result(Err(HostError::new(
                "INTERNAL_ERROR",
                "the execution this call belongs to has ended",
            )));
        };
        let args: Json = match serde_json::from_str(&args) {
            Ok(v) => v,
            Err(e) => {
                return tag_result(Err(HostError::new(
                    "INVALID_INPUT",
                    format!("arguments are not JSON: {e}"),
                )));
            }
        };
        // Spawned, not polled inline: the host may itself run code in this sandbox (nested
        // sys_lambda), which needs the runtime lock this poll is holding.
        let fut = if fetch {
            host.fetch(args)
        } else {
            host.call(&method, args)
        };
        let result = match self.spawn_signalled(fut).await {
            Some(Some(r)) => r,
            Some(None) => Err(HostError::new("INTERNAL_ERROR", "the host call panicked")),
            None => Err(HostError::new(
                "TIMEOUT",
                "the execution ended before the call completed",
            )),
        };
        tag_result(result)
    }

    /// Run `fut` as a tokio task that signals progress once its result is observable; `None`
    /// when the execution ended first (the task is aborted), `Some(None)` if it panicked.
    async fn spawn_signalled<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Option<Option<T>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let progress = self.progress.clone();
        let task = tokio::spawn(async move {
            let _ = tx.send(fut.await);
            progress.send_modify(|v| *v = v.wrapping_add(1));
        });
        let abort = task.abort_handle();
        match self.cancellable(rx).await {
            Some(r) => Some(r.ok()),
            None => {
                abort.abort();
                None
            }
        }
    }
}

/// Host answers cross as one string: `1<json>`, `s<raw text>` or `0<{code,message}>`.
fn tag_result(result: Result<Json, HostError>) -> String {
    match result {
        Ok(Json::String(s)) => format!("s{s}"),
        Ok(Json::Object(map))
            if map.len() == 1 && map.get(crate::RAW_TEXT_KEY).is_some_and(Json::is_string) =>
        {
            format!("1{}", map[crate::RAW_TEXT_KEY])
        }
        Ok(v) => format!("1{v}"),
        Err(e) => format!(
            "0{}",
            serde_json::json!({ "code": e.code, "message": e.message })
        ),
    }
}

/// Execution deadlines of the runtime. QuickJS has one interrupt handler per runtime and
/// cannot tell which execution is running, so it fires when the earliest armed deadline has
/// passed. Runs on one agent rarely overlap; when they do, a run whose deadline passed is
/// either the one executing (it holds the runtime lock while it spins) or idle in an await,
/// where the outer tokio timeout ends it at the same moment.
struct Deadlines {
    epoch: Instant,
    armed: Mutex<BTreeMap<u64, u64>>,
    next: AtomicU64,
    earliest: AtomicU64,
    /// The cancel signals of armed executions (see [`Request::cancel`]); like a deadline, a
    /// signalled one interrupts whichever execution runs JavaScript now, which is the one
    /// that spins (the others wait in an await, where their own select ends them).
    cancels: Mutex<BTreeMap<u64, watch::Receiver<bool>>>,
    /// How many entries `cancels` has, so the handler skips its lock when none is armed.
    cancellable: AtomicU64,
}

impl Deadlines {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn expired(&self) -> bool {
        let e = self.earliest.load(Ordering::Relaxed);
        (e != u64::MAX && self.now_ms() >= e) || self.cancelled()
    }

    fn cancelled(&self) -> bool {
        self.cancellable.load(Ordering::Relaxed) > 0
            && lock(&self.cancels).values().any(|cancel| *cancel.borrow())
    }

    fn recompute(&self, armed: &BTreeMap<u64, u64>) {
        let min = armed.values().copied().min().unwrap_or(u64::MAX);
        self.earliest.store(min, Ordering::Relaxed);
    }

    fn arm(
        self: &Arc<Self>,
        timeout: Duration,
        cancel: Option<watch::Receiver<bool>>,
    ) -> DeadlineGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let at = self.now_ms().saturating_add(ms);
        if let Some(cancel) = cancel {
            lock(&self.cancels).insert(id, cancel);
            self.cancellable.fetch_add(1, Ordering::Relaxed);
        }
        let mut armed = lock(&self.armed);
        armed.insert(id, at);
        self.recompute(&armed);
        DeadlineGuard {
            deadlines: self.clone(),
            id,
            at,
        }
    }
}

struct DeadlineGuard {
    deadlines: Arc<Deadlines>,
    id: u64,
    at: u64,
}

impl DeadlineGuard {
    fn passed(&self) -> bool {
        self.deadlines.now_ms() >= self.at
    }
}

impl Drop for DeadlineGuard {
    fn drop(&mut self) {
        if lock(&self.deadlines.cancels).remove(&self.id).is_some() {
            self.deadlines.cancellable.fetch_sub(1, Ordering::Relaxed);
        }
        let mut armed = lock(&self.deadlines.armed);
        armed.remove(&self.id);
        self.deadlines.recompute(&armed);
    }
}

/// Where a context goes back to when the execution ends.
enum Home {
    Cold,
    Warm(String),
    Inline,
}

/// A context checked out for one execution. Dropping it (also when the execution is
/// cancelled by the outer timeout) ends the execution's timers and host calls and returns
/// the context to its home when `keep` is set.
struct Lease {
    inner: Arc<Inner>,
    slot: Option<Slot>,
    home: Home,
    keep: bool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(mut slot) = self.slot.take() else {
            return;
        };
        slot.state.end();
        if !self.keep {
            return;
        }
        slot.last_used = Instant::now();
        match &self.home {
            Home::Cold => {}
            Home::Inline => {
                let mut inline = lock(&self.inner.inline);
                if inline.is_none() {
                    *inline = Some(slot);
                }
            }
            Home::Warm(key) => {
                let mut warm = lock(&self.inner.warm);
                if !warm.iter().any(|(k, _)| k == key) {
                    warm.push_back((key.clone(), slot));
                }
                while warm.len() > self.inner.config.warm_capacity {
                    warm.pop_front();
                }
            }
        }
    }
}

/// How an error from JavaScript is to be read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Compiling: a SyntaxError is [`SandboxError::Syntax`].
    Compile,
    /// Running.
    Run,
}

/// Render a caught JavaScript error; interrupts and out-of-memory are recognised here.
fn caught<'js>(
    ctx: &Ctx<'js>,
    e: CaughtError<'js>,
    phase: Phase,
    memory_limit: usize,
) -> SandboxError {
    match e {
        CaughtError::Exception(ex) => {
            let obj = ex.as_object();
            let name: String = obj
                .get::<_, Option<String>>("name")
                .ok()
                .flatten()
                .unwrap_or_else(|| "Error".into());
            let message = ex.message().unwrap_or_default();
            if name == "InternalError" && message == "interrupted" {
                return SandboxError::Timeout { limit_ms: 0 };
            }
            if message == "out of memory" {
                return SandboxError::MemoryLimit {
                    limit: memory_limit,
                };
            }
            if phase == Phase::Compile && name == "SyntaxError" {
                let at = ex
                    .stack()
                    .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
                    .unwrap_or_default();
                return SandboxError::Syntax {
                    message: if at.is_empty() {
                        message
                    } else {
                        format!("{message} ({at})")
                    },
                };
            }
            let code = obj.get::<_, Option<String>>("code").ok().flatten();
            let stack = ex.stack().filter(|s| !s.is_empty());
            SandboxError::Thrown {
                name,
                message,
                stack,
                code,
            }
        }
        CaughtError::Value(v) => {
            if v.is_null() {
                // QuickJS reports allocation failure as a bare `null` exception (CRATES.md
                // pitfall 4), and by the time it reaches us the unwound frames have freed the
                // heap, so it cannot be confirmed: an uncaught `throw null` reads the same.
                return SandboxError::MemoryLimit {
                    limit: memory_limit,
                };
            }
            let name = js_typeof(&v).to_string();
            let message = if let Some(s) = v.as_string() {
                s.to_string().unwrap_or_default()
            } else {
                ctx.json_stringify(v.clone())
                    .ok()
                    .flatten()
                    .and_then(|s| s.to_string().ok())
                    .unwrap_or_else(|| format!("[{name}]"))
            };
            SandboxError::Thrown {
                name,
                message,
                stack: None,
                code: None,
            }
        }
        CaughtError::Error(err) => SandboxError::Internal(err.to_string()),
    }
}

/// JavaScript's `typeof` of a value.
fn js_typeof(v: &Value<'_>) -> &'static str {
    if v.is_undefined() {
        "undefined"
    } else if v.is_bool() {
        "boolean"
    } else if v.is_number() {
        "number"
    } else if v.is_string() {
        "string"
    } else if v.is_symbol() {
        "symbol"
    } else if v.is_big_int() {
        "bigint"
    } else if v.is_function() {
        "function"
    } else {
        "object"
    }
}

fn internal(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Internal(e.to_string())
}

/// A module graph ready to declare: (name, module) in load order.
type Graph = Vec<(String, Arc<Compiled>)>;

impl Sandbox {
    /// Create the agent's runtime with its limits. About a quarter of a millisecond.
    pub async fn new(config: SandboxConfig) -> Result<Sandbox, SandboxError> {
        let rt = AsyncRuntime::new().map_err(internal)?;
        rt.set_memory_limit(config.memory_limit).await;
        rt.set_max_stack_size(config.max_stack_size).await;
        let deadlines = Arc::new(Deadlines {
            epoch: Instant::now(),
            armed: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
            earliest: AtomicU64::new(u64::MAX),
            cancels: Mutex::new(BTreeMap::new()),
            cancellable: AtomicU64::new(0),
        });
        let d = deadlines.clone();
        rt.set_interrupt_handler(Some(Box::new(move || d.expired())))
            .await;
        let resolutions: ResolutionMap = Arc::default();
        let modules: Arc<Mutex<HashMap<String, Arc<Compiled>>>> = Arc::default();
        let table = modules.clone();
        rt.set_loader(
            AgentResolver {
                map: resolutions.clone(),
            },
            PreparedLoader {
                sources: Box::new(move |name| {
                    lock(&table).get(name).map(|c| c.prepared.js.clone())
                }),
            },
        )
        .await;
        let rejections: Arc<Mutex<Vec<String>>> = Arc::default();
        let r = rejections.clone();
        rt.set_host_promise_rejection_tracker(Some(Box::new(
            move |ctx: Ctx<'_>, _promise: Value<'_>, reason: Value<'_>, handled: bool| {
                let text = describe(&ctx, &reason);
                let mut list = lock(&r);
                if handled {
                    if let Some(i) = list.iter().rposition(|t| *t == text) {
                        list.remove(i);
                    }
                } else if list.len() < 100 {
                    list.push(text);
                }
            },
        )))
        .await;
        Ok(Sandbox {
            inner: Arc::new(Inner {
                rt,
                config,
                deadlines,
                resolutions,
                inline: Mutex::new(None),
                warm: Mutex::new(VecDeque::new()),
                modules,
                inline_cache: Mutex::new(HashMap::new()),
                rejections,
                progress: Arc::new(watch::channel(0u64).0),
            }),
        })
    }

    /// The limits in force.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// Run and return the value with the console output, or the failure.
    pub async fn run(&self, req: Request, host: Arc<dyn Host>) -> Result<Outcome, SandboxError> {
        let ex = self.execute(req, host).await;
        ex.result.map(|value| Outcome {
            value,
            logs: ex.logs,
            logs_truncated: ex.logs_truncated,
        })
    }

    /// Run and keep the console output whatever the result (what `sys_code` reports).
    pub async fn execute(&self, req: Request, host: Arc<dyn Host>) -> Execution {
        let limit = req.timeout;
        let cancel = req.cancel.clone();
        let state: Arc<Mutex<Option<Arc<SlotState>>>> = Arc::default();
        let deadline = self.inner.deadlines.arm(limit, cancel.clone());
        let fut = self.execute_inner(req, host, state.clone(), &deadline);
        let timed = async {
            match tokio::time::timeout(limit, fut).await {
                Ok(r) => r,
                Err(_) => Err(SandboxError::Timeout { limit_ms: 0 }),
            }
        };
        let mut result = match cancel.clone() {
            None => timed.await,
            Some(mut cancel) => {
                tokio::select! {
                    r = timed => r,
                    _ = cancel.wait_for(|cancelled| *cancelled) => Err(SandboxError::Cancelled),
                }
            }
        };
        // The interrupt handler ends a cancelled run the way it ends one out of time.
        if matches!(result, Err(SandboxError::Timeout { .. }))
            && cancel.as_ref().is_some_and(|cancel| *cancel.borrow())
        {
            result = Err(SandboxError::Cancelled);
        }
        if let Err(SandboxError::Timeout { limit_ms }) = &mut result {
            *limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
        }
        drop(deadline);
        let slot_state = lock(&state).take();
        let (mut logs, logs_truncated) = slot_state.map(|s| s.take_logs()).unwrap_or_default();
        let mut rejections = std::mem::take(&mut *lock(&self.inner.rejections));
        // The entry promise is awaited natively, which QuickJS does not count as a handler:
        // its rejection is the execution's error, not an unhandled rejection.
        if let Err(SandboxError::Thrown { name, message, .. }) = &result {
            let full = format!("{name}: {message}");
            if let Some(i) = rejections.iter().position(|r| *r == full || r == message) {
                rejections.remove(i);
            }
        }
        for r in rejections {
            logs.push(LogEntry {
                level: LogLevel::Warn,
                message: format!("unhandled promise rejection: {r}"),
            });
        }
        Execution {
            result,
            logs,
            logs_truncated,
        }
    }

    /// Drop the persistent inline context and every warm context (e.g. after a config
    /// change). The next inline execution starts with fresh globals.
    pub fn reset(&self) {
        lock(&self.inner.inline).take();
        lock(&self.inner.warm).clear();
    }

    /// Number of warm contexts currently kept.
    pub fn warm_len(&self) -> usize {
        lock(&self.inner.warm).len()
    }

    /// Heap bytes held by live objects of the runtime (all contexts), measured after a garbage
    /// collection so that the figure does not depend on when the collector last ran.
    pub async fn memory_used(&self) -> usize {
        self.inner.rt.run_gc().await;
        let u = self.inner.rt.memory_usage().await;
        usize::try_from(u.malloc_size).unwrap_or(0)
    }

    async fn execute_inner(
        &self,
        req: Request,
        host: Arc<dyn Host>,
        state_out: Arc<Mutex<Option<Arc<SlotState>>>>,
        deadline: &DeadlineGuard,
    ) -> Result<Json, SandboxError> {
        let args = serde_json::to_string(&req.args).map_err(internal)?;
        match req.entry {
            Entry::Lambda { path, function } => {
                let path = modules::normalize(path.trim_start_matches("./")).map_err(|m| {
                    SandboxError::Module {
                        path: path.clone(),
                        message: m,
                    }
                })?;
                let (entry, graph) = self.preload_lambda(&path, host.as_ref()).await?;
                let key = format!("{entry}\u{0}{}", req.network);
                let mut lease = if req.warm {
                    self.checkout_warm(&key, &graph, req.network).await?
                } else {
                    self.lease(self.new_slot(req.network, false).await?, Home::Cold)
                };
                let result = self
                    .run_in(&mut lease, &graph, host, &state_out, deadline, |ctx| {
                        call_lambda(ctx, entry.clone(), function.clone(), args.clone())
                    })
                    .await;
                lease.keep = req.warm && result.is_ok();
                result
            }
            Entry::Inline { code, typescript } => {
                let prepared = self.prepare_inline(code, typescript).await?;
                let graph = self
                    .preload(
                        vec![(INLINE_NAME.to_string(), prepared.clone())],
                        host.as_ref(),
                    )
                    .await?;
                let mut lease = self.checkout_inline(&graph, req.network).await?;
                let js = prepared.js.clone();
                let result = self
                    .run_in(&mut lease, &graph, host, &state_out, deadline, |ctx| {
                        call_inline(ctx, js.clone(), args.clone())
                    })
                    .await;
                // A heap filled by the persistent context stays filled: start it afresh.
                lease.keep = !matches!(
                    result,
                    Err(SandboxError::MemoryLimit { .. } | SandboxError::Internal(_))
                );
                result
            }
        }
    }

    fn lease(&self, slot: Slot, home: Home) -> Lease {
        let keep = matches!(home, Home::Inline);
        Lease {
            inner: self.inner.clone(),
            slot: Some(slot),
            home,
            keep,
        }
    }

    /// A context with the bridge installed: `adf`, `console`, timers, Text{En,De}coder and,
    /// with `network`, `fetch`. About 0.1 ms on an existing runtime.
    async fn new_slot(&self, network: bool, harden: bool) -> Result<Slot, SandboxError> {
        let ctx = AsyncContext::full(&self.inner.rt).await.map_err(internal)?;
        let (cancel, _) = watch::channel(0u64);
        let state = Arc::new(SlotState {
            host: Mutex::new(None),
            logs: Mutex::new(LogBuf::default()),
            cancel,
            progress: self.inner.progress.clone(),
            max_log_bytes: self.inner.config.max_log_bytes,
        });
        let st = state.clone();
        let limit = self.inner.config.memory_limit;
        ctx.with(|ctx| {
            install(&ctx, st, network, harden)
                .catch(&ctx)
                .map_err(|e| caught(&ctx, e, Phase::Run, limit))
        })
        .await?;
        Ok(Slot {
            ctx,
            state,
            declared: HashMap::new(),
            network,
            last_used: Instant::now(),
        })
    }

    async fn checkout_warm(
        &self,
        key: &str,
        graph: &Graph,
        network: bool,
    ) -> Result<Lease, SandboxError> {
        let found = {
            let mut warm = lock(&self.inner.warm);
            let ttl = self.inner.config.warm_idle_ttl;
            warm.retain(|(_, s)| s.last_used.elapsed() < ttl);
            warm.iter()
                .position(|(k, _)| k == key)
                .and_then(|i| warm.remove(i))
                .map(|(_, s)| s)
        };
        let slot = match found {
            Some(s) if !stale(&s, graph) => s,
            _ => self.new_slot(network, false).await?,
        };
        Ok(self.lease(slot, Home::Warm(key.to_string())))
    }

    async fn checkout_inline(&self, graph: &Graph, network: bool) -> Result<Lease, SandboxError> {
        let taken = lock(&self.inner.inline).take();
        match taken {
            Some(s) if s.network == network && !stale(&s, graph) => Ok(self.lease(s, Home::Inline)),
            Some(_) | None => {
                // A changed network flag or changed imported module needs a new context
                // (their globals are fixed at creation). When the persistent context is busy
                // (a nested `adf.sys_code`), `take` found nothing and this execution gets a
                // fresh context that is kept only if the slot is empty when it ends.
                let slot = self.new_slot(network, true).await?;
                Ok(self.lease(slot, Home::Inline))
            }
        }
    }

    /// Declare the graph's modules in the lease's context and run `body` there; classify
    /// failures.
    async fn run_in<F>(
        &self,
        lease: &mut Lease,
        graph: &Graph,
        host: Arc<dyn Host>,
        state_out: &Arc<Mutex<Option<Arc<SlotState>>>>,
        deadline: &DeadlineGuard,
        body: F,
    ) -> Result<Json, SandboxError>
    where
        F: for<'js> FnOnce(Ctx<'js>) -> BodyFuture<'js> + Send,
    {
        let Some(slot) = lease.slot.as_mut() else {
            return Err(internal("no context"));
        };
        slot.state.begin(host);
        *lock(state_out) = Some(slot.state.clone());
        // QuickJS declares the modules itself through the loader while linking; remember
        // which versions this context now holds (for warm/persistent staleness checks).
        for (name, c) in graph {
            if name != INLINE_NAME {
                slot.declared.insert(name.clone(), c.clone());
            }
        }
        let limit = self.inner.config.memory_limit;
        let mut progress = self.inner.progress.subscribe();
        let with = slot
            .ctx
            .async_with(async move |ctx| -> Result<String, SandboxError> {
                body(ctx.clone()).await.map_err(|e| match e {
                    BodyError::Caught(phase, e) => caught(&ctx, e, phase, limit),
                    BodyError::Sandbox(e) => e,
                })
            });
        tokio::pin!(with);
        let result = loop {
            tokio::select! {
                biased;
                r = &mut with => break r,
                _ = progress.changed() => {}
            }
        };
        match result {
            Ok(text) => serde_json::from_str(&text).map_err(internal),
            Err(SandboxError::Timeout { .. }) => Err(SandboxError::Timeout { limit_ms: 0 }),
            Err(e) => {
                if deadline.passed() {
                    Err(SandboxError::Timeout { limit_ms: 0 })
                } else {
                    Err(e)
                }
            }
        }
    }

    async fn prepare_inline(
        &self,
        code: String,
        typescript: bool,
    ) -> Result<Arc<Prepared>, SandboxError> {
        if code.len() > self.inner.config.max_source_bytes {
            return Err(SandboxError::Syntax {
                message: format!(
                    "code is {} bytes; the limit is {}",
                    code.len(),
                    self.inner.config.max_source_bytes
                ),
            });
        }
        let key = (code, typescript);
        if let Some(p) = lock(&self.inner.inline_cache).get(&key) {
            return Ok(p.clone());
        }
        let prepared = transpile::prepare_on_big_stack(
            INLINE_NAME.to_string(),
            key.0.clone(),
            typescript,
            Kind::Inline,
        )
        .await
        .map_err(|message| SandboxError::Syntax { message })?;
        let prepared = Arc::new(prepared);
        let mut cache = lock(&self.inner.inline_cache);
        if cache.len() >= INLINE_CACHE_CAP {
            cache.clear();
        }
        cache.insert(key, prepared.clone());
        Ok(prepared)
    }

    /// Load the module a lambda names (probing extensions) and everything it imports.
    async fn preload_lambda(
        &self,
        path: &str,
        host: &dyn Host,
    ) -> Result<(String, Graph), SandboxError> {
        let (entry, source) = self
            .find(path, host)
            .await
            .ok_or_else(|| SandboxError::Module {
                path: path.to_string(),
                message: "no such file".into(),
            })?;
        let compiled = self.compile(&entry, source).await?;
        let mut graph = vec![(entry.clone(), compiled.clone())];
        let rest = self
            .preload(
                vec![(entry.clone(), Arc::new(compiled.prepared.clone()))],
                host,
            )
            .await?;
        graph.extend(rest);
        Ok((entry, graph))
    }

    /// First existing candidate path for a (joined) module path.
    async fn find(&self, joined: &str, host: &dyn Host) -> Option<(String, String)> {
        for candidate in modules::candidates(joined) {
            if let Some(source) = host.load_module(&candidate).await {
                return Some((candidate, source));
            }
        }
        None
    }

    /// Transpile (or reuse) one module.
    async fn compile(&self, path: &str, source: String) -> Result<Arc<Compiled>, SandboxError> {
        if source.len() > self.inner.config.max_source_bytes {
            return Err(SandboxError::Module {
                path: path.to_string(),
                message: format!(
                    "{} bytes; the limit is {}",
                    source.len(),
                    self.inner.config.max_source_bytes
                ),
            });
        }
        if let Some(c) = lock(&self.inner.modules).get(path)
            && c.source == source
        {
            return Ok(c.clone());
        }
        let prepared = transpile::prepare_on_big_stack(
            path.to_string(),
            source.clone(),
            transpile::is_typescript(path),
            Kind::Module,
        )
        .await
        .map_err(|message| SandboxError::Syntax { message })?;
        let c = Arc::new(Compiled { source, prepared });
        lock(&self.inner.modules).insert(path.to_string(), c.clone());
        Ok(c)
    }

    /// Breadth-first load of everything the roots import: agent files by path, packages by
    /// bare specifier (packages.rs). Static imports that cannot be found fail the execution
    /// up front ([`SandboxError::Module`]); `import("…")` of a missing module is left to reject
    /// at run time.
    async fn preload(
        &self,
        roots: Vec<(String, Arc<Prepared>)>,
        host: &dyn Host,
    ) -> Result<Graph, SandboxError> {
        let mut graph: Graph = Vec::new();
        let mut seen: HashSet<String> = roots.iter().map(|(n, _)| n.clone()).collect();
        let mut queue: VecDeque<(String, Arc<Prepared>)> = roots.into();
        let mut packages = PackageFiles::default();
        while let Some((importer, prepared)) = queue.pop_front() {
            for import in &prepared.imports {
                let key = (importer.clone(), import.specifier.clone());
                let known = lock(&self.inner.resolutions).get(&key).cloned();
                if known.as_ref().is_some_and(|path| seen.contains(path)) {
                    continue;
                }
                let found = packages
                    .locate(
                        self,
                        &importer,
                        &import.specifier,
                        packages::Condition::Import,
                        host,
                    )
                    .await;
                let (path, source, format) = match found {
                    Ok(Some(found)) => found,
                    Ok(None) | Err(_) if import.dynamic => continue,
                    Ok(None) => {
                        let path = modules::join(&importer, &import.specifier)
                            .unwrap_or_else(|_| import.specifier.clone());
                        return Err(SandboxError::Module {
                            path,
                            message: format!("not found (imported by {importer})"),
                        });
                    }
                    Err(message) => {
                        return Err(SandboxError::Module {
                            path: import.specifier.clone(),
                            message: format!("{message} (imported by {importer})"),
                        });
                    }
                };
                lock(&self.inner.resolutions).insert(key, path.clone());
                if !seen.insert(path.clone()) {
                    continue;
                }
                if seen.len() > self.inner.config.max_modules {
                    return Err(SandboxError::Module {
                        path,
                        message: format!(
                            "more than {} modules in one execution",
                            self.inner.config.max_modules
                        ),
                    });
                }
                let source = match format {
                    packages::Format::Esm => source,
                    packages::Format::Json => {
                        packages::json_module(&source).map_err(|message| SandboxError::Module {
                            path: path.clone(),
                            message,
                        })?
                    }
                    packages::Format::Cjs => {
                        let mut deps = Vec::new();
                        for specifier in packages::requires(&source) {
                            // A require that names nothing installed is left to throw if it
                            // ever runs (optional dependencies are often guarded so).
                            if let Ok(Some((dep, _, _))) = packages
                                .locate(self, &path, &specifier, packages::Condition::Require, host)
                                .await
                            {
                                deps.push((specifier, dep));
                            }
                        }
                        packages::cjs_wrapper(&path, &source, &deps)
                    }
                };
                let compiled = self.compile(&path, source).await?;
                queue.push_back((path.clone(), Arc::new(compiled.prepared.clone())));
                graph.push((path, compiled));
            }
        }
        Ok(graph)
    }
}

/// What one preload learned about packages: manifests and the `type` of directories.
#[derive(Default)]
struct PackageFiles {
    manifests: HashMap<String, Option<Json>>,
}

/// A located module: its name, source and format.
type Located = (String, String, packages::Format);

impl PackageFiles {
    async fn manifest(&mut self, host: &dyn Host, id: &str, dir: &str) -> Option<Json> {
        let key = format!("{id}/{dir}");
        if let Some(known) = self.manifests.get(&key) {
            return known.clone();
        }
        let file = if dir.is_empty() {
            "package.json".to_string()
        } else {
            format!("{dir}/package.json")
        };
        let parsed = host
            .package_file(id, &file)
            .await
            .and_then(|text| serde_json::from_str::<Json>(&text).ok());
        self.manifests.insert(key, parsed.clone());
        parsed
    }

    /// Whether `.js` files at `path` are ES modules: the nearest `package.json` with a
    /// `type` says so (Node's rule; the package root's decides otherwise).
    async fn type_module(&mut self, host: &dyn Host, id: &str, path: &str) -> bool {
        let mut dir = path.rfind('/').map_or("", |i| &path[..i]).to_string();
        loop {
            if let Some(manifest) = self.manifest(host, id, &dir).await {
                return manifest.get("type").and_then(Json::as_str) == Some("module");
            }
            if dir.is_empty() {
                return false;
            }
            dir = dir.rfind('/').map_or("", |i| &dir[..i]).to_string();
        }
    }

    /// The first existing file among `candidates` of package `id`, with its format.
    async fn first_file(
        &mut self,
        host: &dyn Host,
        id: &str,
        candidates: Vec<String>,
    ) -> Option<Located> {
        for path in candidates {
            if let Some(source) = host.package_file(id, &path).await {
                let module = self.type_module(host, id, &path).await;
                return Some((
                    packages::module_name(id, &path),
                    source,
                    packages::format_of(&path, module),
                ));
            }
        }
        None
    }

    /// Where `specifier` imported by `importer` leads: `Ok(None)` when nothing is there,
    /// `Err` with the reason when the specifier cannot name a module at all.
    async fn locate(
        &mut self,
        sandbox: &Sandbox,
        importer: &str,
        specifier: &str,
        condition: packages::Condition,
        host: &dyn Host,
    ) -> Result<Option<Located>, String> {
        let relative = specifier.starts_with("./") || specifier.starts_with("../");
        if let Some((id, importer_path)) = packages::split_name(importer) {
            if let Some((target_id, path)) = packages::split_name(specifier) {
                // A CommonJS wrapper names the files it resolved; it stays in its package or
                // goes to a package resolve_package answered for it.
                let id = target_id.to_string();
                return Ok(self.first_file(host, &id, vec![path.to_string()]).await);
            }
            if relative {
                let joined = packages::join_in_package(importer_path, specifier)?;
                return Ok(self
                    .first_file(host, id, packages::candidates(&joined))
                    .await);
            }
            if specifier.starts_with('/') {
                return Err(format!(
                    "'{specifier}': a package cannot import by absolute path"
                ));
            }
            let id = id.to_string();
            return self
                .package_entry(host, Some(&id), specifier, condition)
                .await;
        }
        if relative || specifier.starts_with('/') {
            let joined = modules::join(importer, specifier)?;
            return Ok(sandbox
                .find(&joined, host)
                .await
                .map(|(path, source)| (path, source, packages::Format::Esm)));
        }
        self.package_entry(host, None, specifier, condition).await
    }

    /// The entry file of a bare specifier: the package the host resolves, then its
    /// `exports`, or the subpath, or `main`, or `index.js`.
    async fn package_entry(
        &mut self,
        host: &dyn Host,
        from: Option<&str>,
        specifier: &str,
        condition: packages::Condition,
    ) -> Result<Option<Located>, String> {
        let Some((name, subpath)) = packages::split_bare(specifier) else {
            return Err(format!(
                "module '{specifier}' is not available: the sandbox has no Node built-in \
                 modules; import the agent's own files with a relative path such as \
                 './util.ts', or an installed npm package by name"
            ));
        };
        let Some(id) = host.resolve_package(from, name).await else {
            return Err(match from {
                None => format!(
                    "package '{name}' is not installed for this agent (npm_install it, or \
                     check code_execution.packages)"
                ),
                Some(from) => format!("package '{name}' is not a dependency of {from}"),
            });
        };
        let manifest = self.manifest(host, &id, "").await.unwrap_or(Json::Null);
        if let Some(exports) = manifest.get("exports").filter(|e| !e.is_null()) {
            let wanted = if subpath.is_empty() {
                ".".to_string()
            } else {
                format!("./{subpath}")
            };
            let Some(target) = packages::exports_target(exports, &wanted, condition) else {
                return Err(format!(
                    "'{wanted}' is not exported by package '{name}' (its package.json exports)"
                ));
            };
            let target = modules::normalize(&target)?;
            return Ok(self.first_file(host, &id, vec![target]).await);
        }
        let path = if subpath.is_empty() {
            manifest
                .get("main")
                .and_then(Json::as_str)
                .map(|m| m.trim_start_matches("./").trim_end_matches('/').to_string())
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| "index".to_string())
        } else {
            subpath.to_string()
        };
        let path =
            modules::normalize(&path).map_err(|_| format!("'{specifier}' leaves its package"))?;
        let mut candidates = packages::candidates(&path);
        if subpath.is_empty() && path != "index" {
            candidates.extend(packages::candidates("index"));
        }
        Ok(self.first_file(host, &id, candidates).await)
    }
}

/// A pooled context is stale when a module it declared has changed since.
fn stale(slot: &Slot, graph: &Graph) -> bool {
    graph.iter().any(|(name, c)| {
        slot.declared
            .get(name)
            .is_some_and(|d| !Arc::ptr_eq(d, c) && d.source != c.source)
    })
}

/// Text for a rejection reason.
fn describe<'js>(ctx: &Ctx<'js>, v: &Value<'js>) -> String {
    if let Some(obj) = v.as_object() {
        let name: Option<String> = obj.get("name").ok();
        let message: Option<String> = obj.get("message").ok();
        if let Some(message) = message {
            return format!("{}: {message}", name.unwrap_or_else(|| "Error".into()));
        }
    }
    if let Some(s) = v.as_string() {
        return s.to_string().unwrap_or_default();
    }
    ctx.json_stringify(v.clone())
        .ok()
        .flatten()
        .and_then(|s| s.to_string().ok())
        .unwrap_or_else(|| format!("[{}]", v.type_name()))
}

/// Errors out of a body: a caught JavaScript exception and when it happened, or a finished
/// sandbox error.
enum BodyError<'js> {
    Caught(Phase, CaughtError<'js>),
    Sandbox(SandboxError),
}

type BodyFuture<'js> =
    std::pin::Pin<Box<dyn Future<Output = Result<String, BodyError<'js>>> + 'js>>;

/// Catch the pending exception of a failed engine call.
fn js<'js, T>(ctx: &Ctx<'js>, r: rquickjs::Result<T>, phase: Phase) -> Result<T, BodyError<'js>> {
    r.catch(ctx).map_err(|e| BodyError::Caught(phase, e))
}

fn internal_fns<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<(Function<'js>, Function<'js>)> {
    let internal: Object<'js> = ctx.globals().get("__adf_internal")?;
    Ok((internal.get("encode")?, internal.get("decode")?))
}

/// Await a value if it is a promise.
async fn settle<'js>(v: Value<'js>) -> rquickjs::Result<Value<'js>> {
    match v.as_promise() {
        Some(p) => p.clone().into_future::<Value<'js>>().await,
        None => Ok(v),
    }
}

fn call_lambda<'js>(
    ctx: Ctx<'js>,
    path: String,
    function: String,
    args: String,
) -> BodyFuture<'js> {
    Box::pin(async move {
        let (encode, decode) = js(&ctx, internal_fns(&ctx), Phase::Run)?;
        let promise: Promise<'js> = js(&ctx, Module::import(&ctx, format!("/{path}")), Phase::Run)?;
        let ns: Value<'js> = js(&ctx, settle(promise.into_value()).await, Phase::Run)?;
        let Some(ns) = ns.into_object() else {
            return Err(BodyError::Sandbox(internal(
                "module namespace is not an object",
            )));
        };
        let f: Value<'js> = js(&ctx, ns.get(function.as_str()), Phase::Run)?;
        let Some(f) = f.as_function().cloned() else {
            return Err(BodyError::Sandbox(SandboxError::NotAFunction {
                path,
                function,
            }));
        };
        let arg: Value<'js> = js(&ctx, decode.call((args,)), Phase::Run)?;
        let ret: Value<'js> = js(&ctx, f.call((arg,)), Phase::Run)?;
        let ret = js(&ctx, settle(ret).await, Phase::Run)?;
        js(&ctx, encode.call::<_, String>((ret,)), Phase::Run)
    })
}

fn call_inline<'js>(ctx: Ctx<'js>, js_src: String, args: String) -> BodyFuture<'js> {
    Box::pin(async move {
        let (encode, decode) = js(&ctx, internal_fns(&ctx), Phase::Run)?;
        // Same line as the code: line numbers in errors match the (stripped) source.
        let wrapper = format!("(async function (args) {{{js_src}\n}})");
        let mut options = EvalOptions::default();
        options.strict = false;
        options.filename = Some(INLINE_NAME.to_string());
        let f: Function<'js> = js(
            &ctx,
            ctx.eval_with_options(wrapper, options),
            Phase::Compile,
        )?;
        let arg: Value<'js> = js(&ctx, decode.call((args,)), Phase::Run)?;
        let ret: Value<'js> = js(&ctx, f.call((arg,)), Phase::Run)?;
        let ret = js(&ctx, settle(ret).await, Phase::Run)?;
        js(&ctx, encode.call::<_, String>((ret,)), Phase::Run)
    })
}

/// Create the native bridge functions and run the prelude with them.
fn install<'js>(
    ctx: &Ctx<'js>,
    st: Arc<SlotState>,
    network: bool,
    harden: bool,
) -> rquickjs::Result<()> {
    let mut options = EvalOptions::default();
    options.filename = Some("adf-bridge".to_string());
    let prelude: Function<'js> = ctx.eval_with_options(PRELUDE, options)?;
    let s = st.clone();
    let host = Function::new(
        ctx.clone(),
        Async(move |method: String, args: String| s.clone().call_host(method, args, false)),
    )?;
    let s = st.clone();
    let fetch = Function::new(
        ctx.clone(),
        Async(move |args: String| s.clone().call_host(String::new(), args, true)),
    )?;
    let s = st.clone();
    let log = Function::new(ctx.clone(), move |level: String, text: String| {
        s.push_log(&level, text);
    })?;
    let b64e = Function::new(ctx.clone(), |binary: String| -> String {
        // One char per byte (latin1), produced by the prelude.
        let bytes: Vec<u8> = binary.chars().map(|c| (c as u32 & 0xff) as u8).collect();
        STANDARD.encode(bytes)
    })?;
    let b64d = Function::new(
        ctx.clone(),
        |ctx: Ctx<'js>, text: String| -> rquickjs::Result<TypedArray<'js, u8>> {
            let bytes = STANDARD
                .decode(text.as_bytes())
                .map_err(|e| rquickjs::Exception::throw_type(&ctx, &format!("bad base64: {e}")))?;
            TypedArray::new(ctx, bytes)
        },
    )?;
    let s = st;
    let sleep = Function::new(
        ctx.clone(),
        Async(move |ms: f64| {
            let s = s.clone();
            async move {
                let ms = if ms.is_finite() && ms > 0.0 {
                    ms.min(2_147_483_647.0)
                } else {
                    0.0
                };
                let d = Duration::from_micros((ms * 1000.0) as u64);
                matches!(
                    s.spawn_signalled(tokio::time::sleep(d)).await,
                    Some(Some(()))
                )
            }
        }),
    )?;
    let opts = ctx.json_parse(format!(r#"{{"network":{network},"harden":{harden}}}"#))?;
    install_globals(ctx)?;
    prelude.call::<_, ()>((host, log, b64e, b64d, sleep, fetch, opts))
}

/// `URL` parsing and random bytes for the globals script (globals.js); installed before the
/// prelude so hardening freezes what the globals' classes extend only after they exist.
fn install_globals<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<()> {
    let mut options = EvalOptions::default();
    options.filename = Some("adf-globals".to_string());
    let globals: Function<'js> = ctx.eval_with_options(GLOBALS, options)?;
    let url_parse = Function::new(
        ctx.clone(),
        |input: String, base: Option<String>| -> String {
            let parsed = match base {
                Some(base) => url::Url::parse(&base).and_then(|b| b.join(&input)),
                None => url::Url::parse(&input),
            };
            match parsed {
                Ok(u) => {
                    let host = u.host_str().unwrap_or_default().to_string();
                    let port = u.port().map(|p| p.to_string()).unwrap_or_default();
                    serde_json::json!({
                    "href": u.as_str(),
                    "origin": u.origin().ascii_serialization(),
                    "protocol": format!("{}:", u.scheme()),
                    "username": u.username(),
                    "password": u.password().unwrap_or_default(),
                    "host": if port.is_empty() { host.clone() } else { format!("{host}:{port}") },
                    "hostname": host,
                    "port": port,
                    "pathname": u.path(),
                    "search": u.query().filter(|q| !q.is_empty()).map(|q| format!("?{q}")).unwrap_or_default(),
                    "hash": u.fragment().filter(|f| !f.is_empty()).map(|f| format!("#{f}")).unwrap_or_default(),
                })
                .to_string()
                }
                Err(e) => e.to_string(),
            }
        },
    )?;
    let random = Function::new(
        ctx.clone(),
        |ctx: Ctx<'js>, n: usize| -> rquickjs::Result<TypedArray<'js, u8>> {
            let mut bytes = vec![0u8; n.min(65_536)];
            rand::fill(&mut bytes[..]);
            TypedArray::new(ctx, bytes)
        },
    )?;
    globals.call::<_, ()>((url_parse, random))
}
