//! What a code run does for the rest of its agent while it waits (issue 29: an agent that
//! waits is not frozen).
//!
//! The runner holds the agent's file for the length of a run, but touches it only while it
//! services an `adf.*` call (each call one transaction) or records a call that ended. When
//! the file comes from a store worker (the daemon: a system lambda runs as a worker job, a
//! turn's code runs on a leased file), every other job of that agent — timer fires, trigger
//! deliveries, API reads and writes — queues behind the run. A [`FileQueue`] lets the run
//! carry those jobs out itself whenever it is waiting for something that is not the file (a
//! slow `sys_fetch`, a hung `model_invoke`, a nested lambda's sleep, an `await` of a timer):
//! the store rings the runner when a job is queued, and the runner runs the queued jobs with
//! its file between two calls of its own, with no transaction open. That is a lease per call
//! in effect — the file is the run's only while it services a call — without giving the
//! file back to the worker, which a run inside a worker job cannot do.
//!
//! Atomicity a run keeps: each `adf.*` call is one transaction, as before; jobs are served
//! only between calls and never while a transaction is open (a route's
//! `run_lambda_closing` transaction, until its first wait commits it), so no job joins or
//! sees half of a call. A run as a whole was never one transaction (its calls commit one by
//! one); other work of the agent may now commit between two of its calls, as a tool call of
//! a concurrent turn could already.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use adf_store::{AdfFile, QueueWatch, StoreHandle};
use serde_json::Value;
use tokio::sync::Notify;

use crate::tools::{DeferredCall, ErrorCode, ToolCaller, ToolError, ToolRegistry};

/// How long a holder with nothing in flight off the file must go without touching it before
/// it counts as waiting and serves its agent's queued jobs: a lambda that computes and
/// returns (or a shell line that runs one command after another) runs through, one that
/// sleeps or awaits something of its own does not hold its agent meanwhile.
const QUIET_BEFORE_SERVING: Duration = Duration::from_millis(100);

/// What a host does each time a leased `SharedFile` (crate::executor) takes the file from its worker and
/// gives it back (the daemon sweeps the rows written in between, so each holder's rows are
/// its own).
pub trait LeaseHooks: Send + Sync {
    /// Right after the file was taken from the worker.
    fn acquired(&self, file: &mut AdfFile);
    /// Right before the file goes back to the worker.
    fn releasing(&self, file: &mut AdfFile);
}

/// The store worker whose queued jobs a waiting run carries out, and what to do around each
/// hand-over (a daemon turn sweeps its rows so each job's rows stay its own).
#[derive(Clone)]
pub struct FileQueue {
    handle: StoreHandle,
    hooks: Option<Arc<dyn LeaseHooks>>,
}

impl std::fmt::Debug for FileQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileQueue")
            .field("handle", &self.handle)
            .field("hooks", &self.hooks.is_some())
            .finish()
    }
}

impl FileQueue {
    /// The queue of `handle`, whose file (or a lease of it) the run is given; `hooks` run
    /// before (`releasing`) and after (`acquired`) each time the run serves the queue.
    pub fn new(handle: StoreHandle, hooks: Option<Arc<dyn LeaseHooks>>) -> Self {
        FileQueue { handle, hooks }
    }

    /// The queue of the worker running the calling thread's job, if it is one (a system
    /// lambda the daemon runs as a job).
    pub fn of_this_worker() -> Option<Self> {
        StoreHandle::of_this_worker().map(|handle| Self::new(handle, None))
    }

    /// Starts listening: the returned bell holds a permit now (jobs queued before the run)
    /// and gets one whenever a job is queued, until the watch is dropped.
    pub(crate) fn listen(&self) -> Listening {
        let bell = Arc::new(Notify::new());
        let ring = Arc::clone(&bell);
        let watch = self.handle.watch_queue(move || ring.notify_one());
        bell.notify_one();
        Listening {
            queue: self.clone(),
            bell,
            _watch: watch,
        }
    }
}

thread_local! {
    /// The queue of the run this thread is carrying out a call for (see [`ServingScope`]).
    static SERVING: RefCell<Option<FileQueue>> = const { RefCell::new(None) };
}

/// While alive, code started on this thread for a call of a serving run — a middleware
/// chain in `sys_fetch`'s preparation — serves the run's queue (with its hooks) while it
/// waits, as the run does. It stays set across an awaited hosted body (`adf_shell`, whose
/// inner `curl` prepares on this thread); runs are driven by `block_on` on one thread, so
/// another run interleaved there meanwhile (a loop of the same turn job) sees a queue of the
/// same agent, or none once this scope ends — it then only holds the file while it waits.
pub(crate) struct ServingScope {
    previous: Option<FileQueue>,
}

impl ServingScope {
    pub(crate) fn enter(queue: Option<&FileQueue>) -> Self {
        let previous = SERVING.with(|serving| serving.replace(queue.cloned()));
        ServingScope { previous }
    }
}

impl Drop for ServingScope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SERVING.with(|serving| *serving.borrow_mut() = previous);
    }
}

/// The queue code started on this thread serves while it waits: the run's whose call this
/// thread carries out, else the worker's whose job runs on it (an owner's tool call), else
/// none.
pub(crate) fn current_queue() -> Option<FileQueue> {
    SERVING
        .with(|serving| serving.borrow().clone())
        .or_else(FileQueue::of_this_worker)
}

/// A run's end of a [`FileQueue`]: rung when there is work to serve.
pub(crate) struct Listening {
    queue: FileQueue,
    pub(crate) bell: Arc<Notify>,
    _watch: QueueWatch,
}

impl Listening {
    /// The queue this end listens to.
    pub(crate) fn queue(&self) -> &FileQueue {
        &self.queue
    }

    /// Completes when a job of the agent waits for the file and its holder waits too: at
    /// once when the holder waits off the file (`off_file`: a call in flight), otherwise once
    /// it has gone [`QUIET_BEFORE_SERVING`] without touching the file.
    pub(crate) fn queued(&self, off_file: bool) -> impl Future<Output = ()> + Send + use<> {
        let bell = Arc::clone(&self.bell);
        async move {
            if !off_file {
                tokio::time::sleep(QUIET_BEFORE_SERVING).await;
            }
            bell.notified().await
        }
    }

    /// Awaits `future` — work off the file, which it does not borrow — serving the queued
    /// jobs with `file` whenever one waits meanwhile.
    pub(crate) async fn serve_while<T>(
        &self,
        file: &mut AdfFile,
        future: impl Future<Output = T>,
    ) -> T {
        tokio::pin!(future);
        loop {
            tokio::select! {
                biased;
                value = &mut future => return value,
                () = self.queued(true) => self.serve(file),
            }
        }
    }

    /// Runs the jobs queued now with `file`, unless a transaction is open (a job run then
    /// would join it; the runner rings again once it commits). On a thread of its own: a job
    /// may start a runtime (a system lambda), and this runs inside the run's. The run's own
    /// futures wait meanwhile; each job is one short transaction, or a run of its own.
    pub(crate) fn serve(&self, file: &mut AdfFile) {
        if file.in_transaction() {
            return;
        }
        let hooks = self.queue.hooks.as_deref();
        if let Some(hooks) = hooks {
            hooks.releasing(file);
        }
        let handle = &self.queue.handle;
        let served = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("adf-waiting-code".into())
                .spawn_scoped(scope, || handle.serve_queued(file))
                .map(|thread| thread.join())
        });
        match served {
            Ok(Ok(_ran)) => {}
            Ok(Err(_panicked)) => tracing::warn!("a job served while code waited panicked"),
            Err(error) => {
                tracing::warn!(%error, "cannot start a thread to serve queued jobs")
            }
        }
        if let Some(hooks) = hooks {
            hooks.acquired(file);
        }
    }
}

/// Carries out a deferred call of a detached tool (`curl` → `sys_fetch` inside a shell line)
/// like [`ToolRegistry::run_detached`], serving the queued jobs with `file` while the request
/// is in flight when `waiting` is given.
pub(crate) async fn run_detached_serving(
    registry: &ToolRegistry,
    file: &mut AdfFile,
    caller: &ToolCaller,
    call: &DeferredCall,
    waiting: Option<&Listening>,
) -> Result<Value, ToolError> {
    let Some(waiting) = waiting else {
        return registry.run_detached(file, caller, call).await;
    };
    let config = file.config_shared()?;
    let future = registry.detach(call, &config, caller).ok_or_else(|| {
        ToolError::new(
            ErrorCode::InternalError,
            format!("'{}' cannot run in this context", call.tool),
        )
    })?;
    let outcome = waiting.serve_while(file, future).await;
    outcome.record(file, caller.inner_loop());
    registry.finish_deferred(file, call, &outcome.result)?;
    outcome.result
}
