//! The owner's side of daemon turns: approvals, `ask` answers and abort.
//!
//! Principal types: [`Hil`] (one per agent: the decisions a running turn waits for, and the
//! abort signals of its turns in flight), `Owner` (the turn's `Approver` and `ask` answerer,
//! on the agent's store worker), [`Verdict`] (what the owner sent), `TurnScope` (what a turn
//! job needs to reach the daemon: the agent, its event stream).
//!
//! Why a registry beside the file: a daemon turn is one job on the agent's store worker and
//! keeps the worker (the `&mut AdfFile`) while it waits for the owner, so the HTTP requests
//! that answer it must not need the worker. `POST /tasks/{taskId}/resolve` and
//! `POST /asks/{requestId}/respond` find the waiting turn here and hand it the decision over a
//! channel; the waiting side (on the worker) records the outcome on the task row exactly as the
//! pipeline does for any approver (`approval::request`: `running` or `denied` + reason).
//!
//! Side jobs: the short requests of [`Agent::job`] (reads and owner writes: `GET /tasks`,
//! `PUT /config`, an event's `seq` block) must not queue behind a turn that may wait for the
//! owner. While a turn job is in flight (from just before it is queued until it ends) they
//! are parked in the registry instead; a turn that starts waiting for an approval or an
//! answer (with no transaction open) runs them and every job offered during the wait, and the turn job runs
//! whatever is left when it ends. So the owner can look at the agent before deciding. A job
//! is offered, parked and taken under the registry lock: it is run exactly once. Turn jobs
//! never take this path (a turn cannot nest in a turn). A turn waiting for an `ask` answer
//! lends the file the same way (`TurnHost::answer_holding`).
//!
//! Bounds: an approval or ask nobody answers waits until it is answered, the turn is aborted
//! (`POST /abort`), the agent is unloaded or the daemon shuts down (the spec sets no timeout
//! for approvals; `limits.suspend_timeout_ms` is for suspend prompts only). An approval is
//! also settled when another process resolves the row (`adf approve FILE …`): the waiter
//! re-reads it every [`EXTERNAL_CHECK`].
//!
//! Cost: an idle agent holds an empty registry (no allocation, no task); an entry exists only
//! while a turn runs (its abort signal) or waits (its decision channel).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc as tmpsc};

use adf_runtime::tools::{ApprovalRequest, Approver, Decision, ToolError};
use adf_store::{AdfFile, StoreError, TaskRow};

use crate::hub::Hub;
use crate::registry::Agent;

/// How often a waiting approval re-reads its task row for a resolution by another process.
pub const EXTERNAL_CHECK: Duration = Duration::from_secs(1);

/// Longest `ask.resolved` preview of the answer (the reference's bound).
pub const ANSWER_PREVIEW_CHARS: usize = 200;

/// The reason a pending approval of an aborted turn is denied with.
pub const ABORTED: &str = "the owner aborted the turn";

/// A unit of work offered to a waiting turn.
pub(crate) type SideJob = Box<dyn FnOnce(&mut AdfFile) + Send>;

/// The owner's decision on a pending approval.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Run the tool call.
    Approve {
        /// Arguments the owner edited, replacing the model's (recorded on the task row); `None`
        /// runs the call as the model asked.
        modified_args: Option<Value>,
    },
    /// Refuse the tool call; the turn sees it denied.
    Deny {
        /// The owner's feedback, given to the model and stored as the task's error; `None`
        /// means `"Denied"`.
        reason: Option<String>,
    },
}

enum Wake {
    Decision(Verdict),
    Answer(String),
    Job(SideJob),
    Abort,
}

struct ApprovalWait {
    /// The row as created, for the resolve answer (the row itself is out of reach).
    task: TaskRow,
    sender: mpsc::Sender<Wake>,
    /// Whether the waiter can run side jobs (it holds the file outside any transaction).
    serves_jobs: bool,
}

struct AskWait {
    request_id: String,
    question: String,
    sender: mpsc::Sender<Wake>,
    /// The waiting turn holds the file outside any transaction and runs side jobs offered
    /// to it, as an approval wait does.
    serves_jobs: bool,
}

/// The abort signal of one turn job in flight.
#[derive(Debug, Default)]
pub(crate) struct TurnAbort {
    aborted: AtomicBool,
    notify: Notify,
}

impl TurnAbort {
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// Resolves once the turn is aborted (a permit is kept when nobody waits yet).
    pub(crate) async fn aborted(&self) {
        if !self.is_aborted() {
            self.notify.notified().await;
        }
    }
}

#[derive(Default)]
struct State {
    next_turn: u64,
    turns: HashMap<u64, Arc<TurnAbort>>,
    approvals: HashMap<String, ApprovalWait>,
    asks: Vec<AskWait>,
    /// Jobs offered while a turn job holds (or is queued for) the worker and nobody waits
    /// with the file: the next approval wait runs them, or the turn job when it ends.
    parked: Vec<SideJob>,
}

/// One agent's registry of turns in flight and the owner decisions they wait for.
#[derive(Default)]
pub struct Hil {
    state: Mutex<State>,
    /// Moves with each suspend request and answer, so a suspend timeout acts only on the
    /// suspension it was started for.
    suspend_generation: AtomicU64,
}

impl std::fmt::Debug for Hil {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Hil")
            .field("turns", &state.turns.len())
            .field("approvals", &state.approvals.len())
            .field("asks", &state.asks.len())
            .finish()
    }
}

/// What `resolve` did for a live approval: the resolution and the task as it now stands.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The HTTP answer's body: `{task_id, status: "approved"}` or `{task_id, status:
    /// "denied", reason}`.
    pub resolution: Value,
    /// The task row as the verdict leaves it (`running` with any edited args, or `denied`).
    pub task: TaskRow,
}

impl Hil {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a turn job about to be queued on the worker; [`Hil::finish_turn`] (from the
    /// job) or the drop of its [`TurnScope`] forgets it.
    pub(crate) fn begin_turn(&self) -> (u64, Arc<TurnAbort>) {
        let mut state = self.lock();
        state.next_turn += 1;
        let id = state.next_turn;
        let abort = Arc::new(TurnAbort::default());
        state.turns.insert(id, Arc::clone(&abort));
        (id, abort)
    }

    /// Ends turn job `id` from inside it and hands over the jobs parked meanwhile, to run
    /// with the file before the job returns. Under one lock, so a job offered afterwards
    /// goes to the worker.
    fn finish_turn(&self, id: u64) -> Vec<SideJob> {
        let mut state = self.lock();
        state.turns.remove(&id);
        if state.turns.is_empty() {
            state.turns = HashMap::new();
        }
        std::mem::take(&mut state.parked)
    }

    /// The executor state as `GET /status` reports it: `awaiting_approval`, `awaiting_ask`,
    /// `thinking` (a turn runs) or `idle`.
    pub fn runtime_state(&self) -> &'static str {
        let state = self.lock();
        if !state.approvals.is_empty() {
            "awaiting_approval"
        } else if !state.asks.is_empty() {
            "awaiting_ask"
        } else if !state.turns.is_empty() {
            "thinking"
        } else {
            "idle"
        }
    }

    /// Whether a turn job of this agent is running.
    pub fn turn_in_flight(&self) -> bool {
        !self.lock().turns.is_empty()
    }

    /// Aborts every turn in flight: their pending approvals are denied, their asks go
    /// unanswered, and each turn ends at its next await or right after the wait this cut
    /// short, whichever comes first. Returns how many.
    pub fn abort_all(&self) -> usize {
        let state = self.lock();
        for abort in state.turns.values() {
            abort.aborted.store(true, Ordering::SeqCst);
            abort.notify.notify_one();
        }
        for wait in state.approvals.values() {
            let _gone = wait.sender.send(Wake::Abort);
        }
        for wait in &state.asks {
            let _gone = wait.sender.send(Wake::Abort);
        }
        state.turns.len()
    }

    /// Hands `verdict` to the turn waiting on `task_id`; `None` when no live turn waits on it
    /// (the caller then resolves the row on the worker as usual).
    pub fn resolve(&self, task_id: &str, verdict: Verdict) -> Option<Resolved> {
        let mut state = self.lock();
        let wait = state.approvals.get(task_id)?;
        let mut task = wait.task.clone();
        let resolution = match &verdict {
            Verdict::Approve { modified_args } => {
                task.status = "running".into();
                if let Some(args) = modified_args {
                    task.args = args.clone();
                }
                json!({ "task_id": task_id, "status": "approved" })
            }
            Verdict::Deny { reason } => {
                let reason = reason.clone().unwrap_or_else(|| "Denied".into());
                task.status = "denied".into();
                task.completed_at = Some(adf_store::time::now_ms());
                task.error = Some(reason.clone());
                json!({ "task_id": task_id, "status": "denied", "reason": reason })
            }
        };
        if wait.sender.send(Wake::Decision(verdict)).is_err() {
            return None;
        }
        // Answered once: a second resolve goes to the row (409 once it left pending).
        state.approvals.remove(task_id);
        Some(Resolved { resolution, task })
    }

    /// The task a live turn waits on, as the row stands (`pending_approval`).
    pub fn pending_task(&self, task_id: &str) -> Option<TaskRow> {
        self.lock().approvals.get(task_id).map(|w| w.task.clone())
    }

    /// Pending asks, oldest first: `(request_id, question)`.
    pub fn asks(&self) -> Vec<(String, String)> {
        self.lock()
            .asks
            .iter()
            .map(|a| (a.request_id.clone(), a.question.clone()))
            .collect()
    }

    /// Answers a pending ask; false when no ask has this id.
    pub fn answer(&self, request_id: &str, answer: String) -> bool {
        let mut state = self.lock();
        let Some(index) = state.asks.iter().position(|a| a.request_id == request_id) else {
            return false;
        };
        let wait = state.asks.remove(index);
        wait.sender.send(Wake::Answer(answer)).is_ok()
    }

    /// Offers `job` to a turn waiting with the file, or parks it while a turn job holds or
    /// is queued for the worker; hands it back when no turn is in flight.
    fn offer(&self, job: SideJob) -> Result<(), SideJob> {
        let mut state = self.lock();
        let waiting = state
            .approvals
            .values()
            .filter(|w| w.serves_jobs)
            .map(|w| &w.sender)
            .chain(
                state
                    .asks
                    .iter()
                    .filter(|a| a.serves_jobs)
                    .map(|a| &a.sender),
            )
            .next();
        let Some(sender) = waiting else {
            if state.turns.is_empty() {
                return Err(job);
            }
            state.parked.push(job);
            return Ok(());
        };
        // Sent under the lock, and the waiter removes its entry under the same lock before it
        // drops the receiver, so this send cannot fail; if it did, the job's reply channel
        // would close and its requester get `WorkerGone`, never hang.
        let _sent = sender.send(Wake::Job(job));
        Ok(())
    }
}

impl Agent {
    /// Runs `work` with the agent's file: on the store worker, or — while a turn waits for
    /// the owner's approval holding the worker — inside that wait (see the module docs).
    /// Every short request uses this; turn and lambda jobs go to the store worker directly.
    pub async fn job<R: Send + 'static>(
        &self,
        work: impl FnOnce(&mut AdfFile) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let (reply, result) = tokio::sync::oneshot::channel();
        let job: SideJob = Box::new(move |file| {
            let _gone = reply.send(work(file));
        });
        if let Err(job) = self.hil().offer(job) {
            self.store()
                .run(move |file| {
                    job(file);
                    Ok(())
                })
                .await?;
        }
        result.await.map_err(|_| StoreError::WorkerGone)?
    }
}

/// The wait for an answer to a suspend request when `limits.suspend_timeout_ms` is absent
/// (missing-tables §5.7): 20 minutes.
pub const DEFAULT_SUSPEND_TIMEOUT_MS: u64 = 1_200_000;

/// Moves a `suspended` agent to `active` (`resume`) or `off` as the owner, and emits
/// `suspend.resolved{resumed, timed_out}`; false (and nothing changes) when it was not
/// suspended.
pub(crate) async fn answer_suspend(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    resume: bool,
    timed_out: bool,
) -> Result<bool, StoreError> {
    let target = if resume { "active" } else { "off" };
    let moved = crate::dispatch::run_observed(hub, agent, move |file| {
        let config = file.config()?;
        if config.get("state").and_then(Value::as_str) != Some("suspended") {
            return Ok(false);
        }
        file.config_set_path(
            adf_store::Caller::Owner,
            "state",
            adf_store::ConfigAction::Set,
            json!(target),
        )?;
        Ok(true)
    })
    .await?;
    if moved {
        agent
            .hil()
            .suspend_generation
            .fetch_add(1, Ordering::SeqCst);
        agent.triggers().invalidate();
        crate::scheduler::rearm(hub, agent).await;
        hub.emit(
            agent,
            "suspend.resolved",
            "system:daemon",
            json!({ "resumed": resume, "timed_out": timed_out }),
        )
        .await;
    }
    Ok(moved)
}

/// STL-21: a suspend request nobody answers within `limits.suspend_timeout_ms` turns the
/// agent `off`. One sleeping task per suspension (never for an idle agent); the deadline is
/// not persisted, so a daemon restart starts no new wait (the agent stays `suspended` until
/// the owner answers).
async fn suspend_watch(hub: Arc<Hub>, agent: Arc<Agent>, generation: u64) {
    let timeout = agent
        .job(|file| {
            Ok(file
                .config()?
                .pointer("/limits/suspend_timeout_ms")
                .and_then(Value::as_u64))
        })
        .await
        .ok()
        .flatten()
        .unwrap_or(DEFAULT_SUSPEND_TIMEOUT_MS);
    let mut shutdown = hub.shutdown_signal();
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(timeout)) => {}
        _ = shutdown.changed() => return,
    }
    if agent.hil().suspend_generation.load(Ordering::SeqCst) != generation {
        return;
    }
    if let Err(error) = answer_suspend(&hub, &agent, false, true).await {
        tracing::warn!(agent = %agent.id, %error, "cannot end an unanswered suspension");
    }
}

/// Why an orphaned approval is cancelled (or an approved call failed) on load.
pub const ORPHANED: &str = "orphaned: the turn waiting for this approval ended with its process";

/// Settles the approvals a turn of an earlier process left behind (reference behaviour on
/// load): an executor-managed `pending_approval` task is `cancelled`, an executor-managed
/// `running` one (approved, outcome never recorded) `failed`. Without this an owner could
/// approve a call no turn will ever make. Runs in the load's first job, before any turn of
/// this process can exist; returns `(task_id, former status)` for
/// [`report_orphaned_approvals`].
pub(crate) fn settle_orphaned_approvals(
    file: &mut AdfFile,
) -> Result<Vec<(String, &'static str)>, StoreError> {
    let mut settled = Vec::new();
    for (status, to) in [("pending_approval", "cancelled"), ("running", "failed")] {
        for task in file.tasks(Some(status))? {
            if task.executor_managed {
                file.task_update(&task.id, to, None, Some(ORPHANED))?;
                settled.push((task.id, status));
            }
        }
    }
    Ok(settled)
}

/// `hil.resolved{orphaned: true}` for each approval [`settle_orphaned_approvals`] settled,
/// and one `loop.recovered{reason: "orphaned_tasks"}`.
pub(crate) async fn report_orphaned_approvals(
    hub: &Arc<Hub>,
    agent: &Agent,
    settled: Vec<(String, &'static str)>,
) {
    if settled.is_empty() {
        return;
    }
    for (task_id, _) in &settled {
        hub.emit(
            agent,
            "hil.resolved",
            "system:runtime",
            json!({ "request_id": task_id, "task_id": task_id, "approved": false, "orphaned": true }),
        )
        .await;
    }
    let awaiting = settled
        .iter()
        .filter(|(_, status)| *status == "pending_approval")
        .count();
    hub.emit(
        agent,
        "loop.recovered",
        "system:runtime",
        json!({
            "reason": "orphaned_tasks",
            "running": settled.len() - awaiting,
            "awaiting_approval": awaiting,
        }),
    )
    .await;
}

/// What a turn job needs from the daemon: the agent (its registry) and an ordered event
/// stream (events are published by one task per turn job, so `hil.requested` always precedes
/// its `hil.resolved`).
pub(crate) struct TurnScope {
    pub(crate) agent: Arc<Agent>,
    events: tmpsc::UnboundedSender<(String, Value)>,
    turn: u64,
    abort: Arc<TurnAbort>,
    /// Providers and keys of the runtime settings (`PUT /settings/providers`), read when the
    /// turn was queued.
    pub(crate) resolver: adf_providers::Resolver,
    /// The daemon's mesh and what main was last told of it (`mesh_updates`).
    pub(crate) mesh_updates: adf_runtime::executor::MeshUpdates,
}

impl Drop for TurnScope {
    /// A job that never ran (its worker is gone) still leaves the registry; the requests
    /// parked for it fail as the worker did (their reply channels close).
    fn drop(&mut self) {
        let orphans = {
            let mut state = self.agent.hil().lock();
            if state.turns.remove(&self.turn).is_some() && state.turns.is_empty() {
                std::mem::take(&mut state.parked)
            } else {
                Vec::new()
            }
        };
        drop(orphans);
    }
}

impl TurnScope {
    /// A scope for a turn job of `agent`, registered as in flight from now on (create it just
    /// before queueing the job: requests offered meanwhile are parked for the job instead of
    /// queueing behind it), and the task that publishes its events (await it after the job
    /// so they precede `turn.completed`).
    pub(crate) fn new(hub: &Arc<Hub>, agent: &Arc<Agent>) -> (Self, tokio::task::JoinHandle<()>) {
        let (turn, abort) = agent.hil().begin_turn();
        let (events, mut receiver) = tmpsc::unbounded_channel::<(String, Value)>();
        let publisher = Arc::clone(hub);
        let target = Arc::clone(agent);
        let task = tokio::spawn(async move {
            while let Some((event_type, payload)) = receiver.recv().await {
                if event_type == "suspend.requested" {
                    let generation = target
                        .hil()
                        .suspend_generation
                        .fetch_add(1, Ordering::SeqCst)
                        + 1;
                    tokio::spawn(suspend_watch(
                        publisher.clone(),
                        Arc::clone(&target),
                        generation,
                    ));
                }
                publisher.emit(&target, &event_type, "agent", payload).await;
            }
        });
        (
            Self {
                agent: Arc::clone(agent),
                events,
                resolver: crate::settings::runtime_resolver(hub.home())
                    .with_io_runtime(hub.io_runtime()),
                mesh_updates: agent.mesh_updates(|| {
                    let mesh: Arc<dyn adf_runtime::messaging::Mesh> = hub.mesh().clone();
                    mesh
                }),
                turn,
                abort,
            },
            task,
        )
    }

    /// The turn job's abort signal.
    pub(crate) fn abort(&self) -> &Arc<TurnAbort> {
        &self.abort
    }

    /// Ends the turn job from inside it: runs the requests parked for it (see
    /// [`Hil::offer`]) with the file. Call last in the job.
    pub(crate) fn finish(&self, file: &mut AdfFile) {
        for job in self.agent.hil().finish_turn(self.turn) {
            job(file);
        }
    }

    pub(crate) fn emit(&self, event_type: &str, payload: Value) {
        let _closed = self.events.send((event_type.to_owned(), payload));
    }
}

/// The owner as a daemon turn sees it: approvals and `ask` answers wait for the HTTP API.
pub(crate) struct Owner<'a> {
    pub(crate) scope: &'a TurnScope,
}

impl Owner<'_> {
    fn hil(&self) -> &Hil {
        self.scope.agent.hil()
    }

    /// Waits for `request`'s decision, serving side jobs meanwhile.
    fn wait_decision(
        &self,
        file: &mut AdfFile,
        request: &ApprovalRequest,
        receiver: &mpsc::Receiver<Wake>,
    ) -> Verdict {
        let external = |file: &AdfFile| -> Option<Verdict> {
            let task = file.task(&request.task_id).ok()??;
            match task.status.as_str() {
                "pending" | "pending_approval" => None,
                "running" | "completed" => Some(Verdict::Approve {
                    modified_args: None,
                }),
                _ => Some(Verdict::Deny { reason: task.error }),
            }
        };
        loop {
            match receiver.recv_timeout(EXTERNAL_CHECK) {
                Ok(Wake::Job(job)) => job(file),
                Ok(Wake::Decision(verdict)) => return verdict,
                Ok(Wake::Abort) | Err(RecvTimeoutError::Disconnected) => {
                    return Verdict::Deny {
                        reason: Some(ABORTED.into()),
                    };
                }
                Ok(Wake::Answer(_)) => {}
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(verdict) = external(file) {
                        return verdict;
                    }
                }
            }
        }
    }

    /// Ends a wait: `unregister` removes its entry under the registry lock (so no job is
    /// offered to it after), then the jobs offered meanwhile run with `file`.
    fn stop_listening(
        &self,
        file: &mut AdfFile,
        receiver: &mpsc::Receiver<Wake>,
        unregister: impl FnOnce(&mut State),
    ) {
        let leftover: Vec<SideJob> = {
            let mut state = self.hil().lock();
            unregister(&mut state);
            receiver
                .try_iter()
                .filter_map(|wake| match wake {
                    Wake::Job(job) => Some(job),
                    _ => None,
                })
                .collect()
        };
        for job in leftover {
            job(file);
        }
    }

    /// Waits for the answer to `question`, serving side jobs with `file` meanwhile; `None`
    /// when the turn is aborted.
    pub(crate) fn ask(&self, file: &mut AdfFile, question: &str) -> Option<String> {
        let (sender, receiver) = mpsc::channel();
        let request_id = format!("ask_{}", adf_store::defaults::random_id(12));
        let serves_jobs = file.connection().is_autocommit();
        let parked = {
            let mut state = self.hil().lock();
            if self.scope.abort.is_aborted() {
                return None;
            }
            state.asks.push(AskWait {
                request_id: request_id.clone(),
                question: question.to_owned(),
                sender,
                serves_jobs,
            });
            if serves_jobs {
                std::mem::take(&mut state.parked)
            } else {
                Vec::new()
            }
        };
        for job in parked {
            job(file);
        }
        self.scope.emit(
            "ask.requested",
            json!({ "request_id": request_id, "question": question }),
        );
        let answer = loop {
            match receiver.recv() {
                Ok(Wake::Answer(answer)) => break Some(answer),
                Ok(Wake::Abort) | Err(_) => break None,
                Ok(Wake::Job(job)) => job(file),
                Ok(Wake::Decision(_)) => {}
            }
        };
        self.stop_listening(file, &receiver, |state| {
            state.asks.retain(|a| a.request_id != request_id);
            if state.asks.is_empty() {
                state.asks = Vec::new();
            }
        });
        let preview: String = answer
            .as_deref()
            .unwrap_or_default()
            .chars()
            .take(ANSWER_PREVIEW_CHARS)
            .collect();
        self.scope.emit(
            "ask.resolved",
            json!({
                "request_id": request_id,
                "has_response": answer.is_some(),
                "response_length": answer.as_deref().map_or(0, |a| a.chars().count()),
                "preview": preview,
            }),
        );
        answer
    }
}

impl Approver for Owner<'_> {
    fn decide(&self, file: &mut AdfFile, request: &ApprovalRequest) -> Result<Decision, ToolError> {
        let (sender, receiver) = mpsc::channel();
        let task = file
            .task(&request.task_id)?
            .ok_or_else(|| ToolError::not_found(format!("task {} disappeared", request.task_id)))?;
        let serves_jobs = file.connection().is_autocommit();
        let parked = {
            let mut state = self.hil().lock();
            if self.scope.abort.is_aborted() {
                drop(state);
                return Ok(Decision::Denied(ABORTED.into()));
            }
            state.approvals.insert(
                request.task_id.clone(),
                ApprovalWait {
                    task,
                    sender,
                    serves_jobs,
                },
            );
            if serves_jobs {
                std::mem::take(&mut state.parked)
            } else {
                Vec::new()
            }
        };
        for job in parked {
            job(file);
        }
        let reason = request
            .approval_meta
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("restricted");
        self.scope.emit(
            "hil.requested",
            json!({
                "request_id": request.task_id,
                "task_id": request.task_id,
                "tool": request.tool,
                "reason": reason,
                "input": input_outline(&request.args),
            }),
        );
        let verdict = self.wait_decision(file, request, &receiver);
        self.stop_listening(file, &receiver, |state| {
            state.approvals.remove(&request.task_id);
            if state.approvals.is_empty() {
                state.approvals = HashMap::new();
            }
        });
        let mut payload = json!({ "request_id": request.task_id, "task_id": request.task_id });
        let decision = match verdict {
            Verdict::Approve { modified_args } => {
                if let Some(args) = &modified_args {
                    // The row records what the owner approved; the pipeline runs it.
                    file.task_set_args(&request.task_id, args)?;
                }
                payload["approved"] = json!(true);
                Decision::Approved
            }
            Verdict::Deny { reason } => {
                let reason = reason.unwrap_or_else(|| "Denied".into());
                payload["approved"] = json!(false);
                payload["feedback"] = json!(reason);
                Decision::Denied(reason)
            }
        };
        self.scope.emit("hil.resolved", payload);
        Ok(decision)
    }
}

/// The arguments of a call as an event shows them: each name with its JSON type, never the
/// value (arguments carry file contents and config values; the owner reads them from the
/// task). `_reason` is the model's text and is left out.
pub(crate) fn input_outline(args: &Value) -> Value {
    let Some(object) = args.as_object() else {
        return json!({});
    };
    Value::Object(
        object
            .iter()
            .filter(|(name, _)| !name.starts_with('_'))
            .map(|(name, value)| {
                let kind = match value {
                    Value::Null => "null",
                    Value::Bool(_) => "boolean",
                    Value::Number(_) => "number",
                    Value::String(_) => "string",
                    Value::Array(_) => "array",
                    Value::Object(_) => "object",
                };
                (name.clone(), json!(kind))
            })
            .collect(),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn input_outline_keeps_names_and_types_only() {
        let args = json!({ "path": "a.md", "content": "secret", "n": 1, "_reason": "why" });
        assert_eq!(
            input_outline(&args),
            json!({ "path": "string", "content": "string", "n": "number" })
        );
    }

    #[test]
    fn abort_reaches_turns_and_waits() {
        let hil = Hil::default();
        let (id, abort) = hil.begin_turn();
        let (sender, receiver) = mpsc::channel();
        hil.lock().asks.push(AskWait {
            request_id: "r".into(),
            question: "q".into(),
            sender,
            serves_jobs: true,
        });
        assert_eq!(hil.abort_all(), 1);
        assert!(abort.is_aborted());
        assert!(matches!(receiver.recv().unwrap(), Wake::Abort));
        assert!(hil.finish_turn(id).is_empty());
        assert!(!hil.turn_in_flight());
    }

    #[test]
    fn a_job_with_no_waiting_turn_is_handed_back() {
        let hil = Hil::default();
        let job: SideJob = Box::new(|_| {});
        assert!(hil.offer(job).is_err());
    }
}
