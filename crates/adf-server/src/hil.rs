//! The owner's side of daemon turns: approvals, `ask` answers and abort.
//!
//! Principal types: [`Hil`] (one per agent: the decisions a running turn waits for, and the
//! abort signals of its turns in flight), `Owner` (the turn's approvals and `ask` answers),
//! [`Verdict`] (what the owner sent), `TurnScope` (what a turn job needs to reach the
//! daemon: the agent, its event stream).
//!
//! Why a registry beside the file: the HTTP requests that answer a waiting turn must not
//! depend on who holds the file. `POST /tasks/{taskId}/resolve` and
//! `POST /asks/{requestId}/respond` find the waiting turn here and hand it the decision over a
//! channel; the waiting side records the outcome on the task row (`running` or `denied` +
//! reason, edited arguments) before `hil.resolved` goes out.
//!
//! Waiting holds nothing: a model's call that needs approval stops in the pipeline before its
//! transaction (`ToolRegistry::call_step`), and the executor awaits `Owner::await_approval`
//! (an `ask`: `Owner::ask`) with the leased file given back to the agent's store worker and
//! the turn's lock on the shared file released (`FileGuard::unlocked_while`). So while main
//! waits, the worker runs every other job itself — owner reads and writes, timer fires,
//! system lambdas, trigger deliveries — and a turn of another loop leases the file and
//! completes its steps (§6.4: loops are separate conversations; only two turns of one loop
//! take turns, `LoopPasses`). The wait is a channel receive awaited on the turn job's
//! runtime: no thread blocks in it (the job's own thread idles in that runtime). When the owner answers, the turn takes the file again and runs the approved
//! call (or records the denial) as before. An abort drops the turn with its wait; the turn
//! then settles the rows it left (`TurnScope::settle_aborted_approvals`).
//!
//! The one wait that still holds the file: a restricted call made by code the turn runs
//! (`sys_code`, `sys_lambda`, `adf_shell`, a `_async` task), which calls the pipeline
//! synchronously, maybe inside a transaction. It waits through `Approver::decide` on the
//! turn's thread and, with no transaction open, runs the jobs queued on the agent's store
//! worker meanwhile (`StoreHandle::serve_queued`, rung by `StoreHandle::watch_queue`), each on
//! a thread of its own (a lambda starts a runtime). Before serving it sweeps the turn's own
//! rows and after it starts a new observation (`TurnObserver`), so each job's rows stay its
//! own.
//!
//! Bounds: an approval or ask nobody answers waits until it is answered, the turn is aborted
//! (`POST /abort`), the agent is unloaded or the daemon shuts down (the spec sets no timeout
//! for approvals; `limits.suspend_timeout_ms` is for suspend prompts only). An approval is
//! also settled when another process resolves the row (`adf approve FILE …`): the waiter
//! re-reads it every [`EXTERNAL_CHECK`] (an awaited wait as one job on the worker).
//!
//! Cost: an idle agent holds an empty registry (no allocation, no task); an entry exists only
//! while a turn runs (its abort signal) or waits (its decision channel).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc as tmpsc;

use adf_runtime::executor::LeaseHooks;
use adf_runtime::tools::{ApprovalRequest, Approver, Decision, OwnerWait, ToolError, approval};
use adf_store::{AdfFile, StoreError, TaskRow};

use crate::hub::Hub;
use crate::registry::Agent;

mod state;

use state::{ApprovalWait, AskWait, Bell, State, Wake};
pub use state::{Hil, ORPHANED, Resolved, Verdict};
pub(crate) use state::{TurnAbort, settle_orphaned_approvals};

/// How often a waiting approval re-reads its task row for a resolution by another process.
pub const EXTERNAL_CHECK: Duration = Duration::from_secs(1);

/// Longest `ask.resolved` preview of the answer (the reference's bound).
pub const ANSWER_PREVIEW_CHARS: usize = 200;

/// The reason a pending approval of an aborted turn is denied with.
pub const ABORTED: &str = "the owner aborted the turn";

impl Agent {
    /// Runs `work` with the agent's file, as one job on its store worker. It never waits for
    /// a turn's model or owner: a turn holds the file only for a store step or a tool call,
    /// gives it back while it awaits an approval or an answer, and a code run waiting for an
    /// approval runs the jobs queued meanwhile (see the module docs).
    pub async fn job<R: Send + 'static>(
        &self,
        work: impl FnOnce(&mut AdfFile) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        self.store().run(work).await
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
        hub.timer_wakes().rearm(agent).await;
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
    /// The daemon's mesh and what main was last told of it (`mesh_updates`).
    pub(crate) mesh_updates: adf_runtime::executor::MeshUpdates,
    /// The rows and files the turn wrote, collected at each hand-over of its lease.
    pub(crate) observer: Arc<crate::turns::TurnObserver>,
    /// The approval tasks this turn job asked for, settled if an abort drops their waits.
    asked: Mutex<Vec<String>>,
}

impl Drop for TurnScope {
    /// The turn job leaves the registry when it ends (or never ran).
    fn drop(&mut self) {
        let mut state = self.agent.hil().lock();
        state.turns.remove(&self.turn);
        if state.turns.is_empty() {
            state.turns = HashMap::new();
        }
    }
}

impl TurnScope {
    /// A scope for a turn job of `agent`, registered as in flight from now on (so `POST
    /// /abort` reaches it while it waits for its loops' gates), and the task that
    /// publishes its events (await it after the job so they precede `turn.completed`).
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
                mesh_updates: agent.mesh_updates(|| {
                    let mesh: Arc<dyn adf_runtime::messaging::Mesh> = hub.mesh().clone();
                    mesh
                }),
                turn,
                abort,
                observer: Arc::new(crate::turns::turn_observer(Arc::clone(agent))),
                asked: Mutex::new(Vec::new()),
            },
            task,
        )
    }

    /// The turn job's abort signal.
    pub(crate) fn abort(&self) -> &Arc<TurnAbort> {
        &self.abort
    }

    pub(crate) fn emit(&self, event_type: &str, payload: Value) {
        let _closed = self.events.send((event_type.to_owned(), payload));
    }

    /// After an abort ended this turn job: an approval it asked for that is still pending is
    /// denied ([`ABORTED`], with `hil.resolved`), and an approved one still `running` fails
    /// (the abort came between the decision and the call's outcome, so the call never ran or
    /// never finished). An awaited wait is dropped with its turn, so without this the row
    /// would wait for a turn that is gone. Rows the waits settled themselves are left alone.
    pub(crate) fn settle_aborted_approvals(&self, file: &mut AdfFile) {
        let asked = std::mem::take(&mut *self.asked.lock().unwrap_or_else(PoisonError::into_inner));
        for task_id in asked {
            let status = match file.task(&task_id) {
                Ok(Some(task)) => task.status,
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(%error, task_id = %task_id, "cannot read an aborted turn's approval");
                    continue;
                }
            };
            let settled = match status.as_str() {
                "pending" | "pending_approval" => file
                    .task_update(&task_id, "denied", None, Some(ABORTED))
                    .map(|()| {
                        self.emit(
                            "hil.resolved",
                            json!({ "request_id": task_id, "task_id": task_id, "approved": false, "feedback": ABORTED }),
                        );
                    }),
                "running" => file.task_update(&task_id, "failed", None, Some(ABORTED)),
                _ => Ok(()),
            };
            if let Err(error) = settled {
                tracing::warn!(%error, task_id = %task_id, "cannot settle an aborted turn's approval");
            }
        }
    }
}

/// The owner as a daemon turn sees it: approvals and `ask` answers wait for the HTTP API.
/// The model's own calls await them without the file ([`Owner::await_approval`],
/// [`Owner::ask`]); a call made by code the turn runs (which holds the file, maybe inside a
/// transaction) waits through [`Approver::decide`], serving the queued jobs itself.
pub(crate) struct Owner<'a> {
    pub(crate) scope: &'a TurnScope,
}

/// A task's row as another process may have resolved it: the verdict it stands for, `None`
/// while it is still pending.
fn verdict_of_row(task: TaskRow) -> Option<Verdict> {
    match task.status.as_str() {
        "pending" | "pending_approval" => None,
        "running" | "completed" => Some(Verdict::Approve {
            modified_args: None,
        }),
        _ => Some(Verdict::Deny { reason: task.error }),
    }
}

fn aborted_verdict() -> Verdict {
    Verdict::Deny {
        reason: Some(ABORTED.into()),
    }
}

/// An awaited approval wait's entry in the registry, forgotten when the wait ends or is
/// dropped with its turn (an abort).
struct ListeningForDecision<'o> {
    hil: &'o Hil,
    task_id: String,
}

impl Drop for ListeningForDecision<'_> {
    fn drop(&mut self) {
        let mut state = self.hil.lock();
        state.approvals.remove(&self.task_id);
        if state.approvals.is_empty() {
            state.approvals = HashMap::new();
        }
    }
}

/// An awaited `ask`'s entry in the registry: forgotten, and `ask.resolved` published, when
/// the wait ends or is dropped with its turn (then unanswered).
struct ListeningForAnswer<'o> {
    owner: &'o Owner<'o>,
    request_id: String,
    answer: Option<String>,
}

impl Drop for ListeningForAnswer<'_> {
    fn drop(&mut self) {
        self.owner.stop_listening(|state| {
            state.asks.retain(|a| a.request_id != self.request_id);
            if state.asks.is_empty() {
                state.asks = Vec::new();
            }
        });
        let answer = self.answer.as_deref();
        let preview: String = answer
            .unwrap_or_default()
            .chars()
            .take(ANSWER_PREVIEW_CHARS)
            .collect();
        self.owner.scope.emit(
            "ask.resolved",
            json!({
                "request_id": self.request_id,
                "has_response": answer.is_some(),
                "response_length": answer.map_or(0, |a| a.chars().count()),
                "preview": preview,
            }),
        );
    }
}

impl Owner<'_> {
    fn hil(&self) -> &Hil {
        self.scope.agent.hil()
    }

    /// Registers a wait for `request`'s decision and publishes `hil.requested`; false (nothing
    /// registered) when the turn is aborted already.
    fn register_approval(
        &self,
        file: &AdfFile,
        request: &ApprovalRequest,
        sender: Bell,
    ) -> Result<bool, ToolError> {
        let task = file
            .task(&request.task_id)?
            .ok_or_else(|| ToolError::not_found(format!("task {} disappeared", request.task_id)))?;
        {
            let mut state = self.hil().lock();
            if self.scope.abort.is_aborted() {
                return Ok(false);
            }
            state
                .approvals
                .insert(request.task_id.clone(), ApprovalWait { task, sender });
        }
        self.scope
            .asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.task_id.clone());
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
        Ok(true)
    }

    /// What `verdict` means for the pipeline, the arguments the owner edited (to record on
    /// the row), and the `hil.resolved` payload.
    fn decision_of(
        &self,
        request: &ApprovalRequest,
        verdict: Verdict,
    ) -> (Decision, Option<Value>, Value) {
        let mut payload = json!({ "request_id": request.task_id, "task_id": request.task_id });
        match verdict {
            Verdict::Approve { modified_args } => {
                payload["approved"] = json!(true);
                (Decision::Approved, modified_args, payload)
            }
            Verdict::Deny { reason } => {
                let reason = reason.unwrap_or_else(|| "Denied".into());
                payload["approved"] = json!(false);
                payload["feedback"] = json!(reason);
                (Decision::Denied(reason), None, payload)
            }
        }
    }

    /// The owner's decision on `request`, registered now (the caller holds the file) and
    /// awaited without the file and without a thread of its own: the executor gives the file
    /// back to the agent's worker meanwhile, which serves every other job itself. The
    /// decision is recorded on the row (edited arguments, then `running` or `denied`) before
    /// `hil.resolved` goes out. A resolution by another process is seen by re-reading the row
    /// every [`EXTERNAL_CHECK`], one job on the worker.
    pub(crate) fn await_approval(
        &self,
        file: &AdfFile,
        request: &ApprovalRequest,
    ) -> OwnerWait<'_, Result<Decision, ToolError>> {
        let (sender, receiver) = tmpsc::unbounded_channel();
        let registered = self.register_approval(file, request, Bell::Awaited(sender));
        // Made now, not at the first poll: a wait dropped unpolled is forgotten too.
        let listening = matches!(registered, Ok(true)).then(|| ListeningForDecision {
            hil: self.hil(),
            task_id: request.task_id.clone(),
        });
        let request = request.clone();
        Box::pin(async move {
            if !registered? {
                return Ok(Decision::Denied(ABORTED.into()));
            }
            let verdict = self.await_verdict(&request.task_id, receiver).await;
            drop(listening);
            let (decision, modified_args, payload) = self.decision_of(&request, verdict);
            let task_id = request.task_id.clone();
            let recorded = decision.clone();
            self.scope
                .agent
                .job(move |file| {
                    if let Some(args) = &modified_args {
                        // The row records what the owner approved; the pipeline runs it.
                        file.task_set_args(&task_id, args)?;
                    }
                    Ok(approval::settle(file, &task_id, &recorded))
                })
                .await??;
            self.scope.emit("hil.resolved", payload);
            Ok(decision)
        })
    }

    /// Awaits the verdict on `task_id`: the owner's over the API, an abort (a denial), or the
    /// row resolved by another process.
    async fn await_verdict(
        &self,
        task_id: &str,
        mut receiver: tmpsc::UnboundedReceiver<Wake>,
    ) -> Verdict {
        loop {
            match tokio::time::timeout(EXTERNAL_CHECK, receiver.recv()).await {
                Ok(Some(Wake::Decision(verdict))) => return verdict,
                Ok(Some(Wake::Abort) | None) => return aborted_verdict(),
                Ok(Some(Wake::Answer(_) | Wake::Queued)) => {}
                Err(_no_wake) => {
                    let id = task_id.to_owned();
                    let row = self.scope.agent.job(move |file| file.task(&id)).await;
                    if let Some(verdict) = row.ok().flatten().and_then(verdict_of_row) {
                        return verdict;
                    }
                }
            }
        }
    }

    /// Waits for `request`'s decision, holding `file` and serving the agent's queued jobs
    /// meanwhile.
    fn wait_decision(
        &self,
        file: &mut AdfFile,
        request: &ApprovalRequest,
        receiver: &mpsc::Receiver<Wake>,
    ) -> Verdict {
        loop {
            match receiver.recv_timeout(EXTERNAL_CHECK) {
                Ok(Wake::Queued) => self.serve_queued(file),
                Ok(Wake::Decision(verdict)) => return verdict,
                Ok(Wake::Abort) | Err(RecvTimeoutError::Disconnected) => return aborted_verdict(),
                Ok(Wake::Answer(_)) => {}
                Err(RecvTimeoutError::Timeout) => {
                    let row = file.task(&request.task_id).ok().flatten();
                    if let Some(verdict) = row.and_then(verdict_of_row) {
                        return verdict;
                    }
                }
            }
        }
    }

    /// Rings `sender` whenever a job is queued on the agent's worker, for the length of a
    /// wait; `None` (no serving) when the wait holds a transaction open (code's nested call):
    /// a job run then would join that transaction.
    fn watch_queue(
        &self,
        file: &AdfFile,
        sender: &mpsc::Sender<Wake>,
    ) -> Option<adf_store::QueueWatch> {
        if file.in_transaction() {
            return None;
        }
        let bell = sender.clone();
        let watch = self.scope.agent.store().watch_queue(move || {
            let _gone = bell.send(Wake::Queued);
        });
        // Jobs queued before the bell was hung.
        let _gone = sender.send(Wake::Queued);
        Some(watch)
    }

    /// Runs the jobs queued on the agent's worker with the file this waiting turn holds: the
    /// turn's rows so far are swept first (they are the turn's), and a new observation starts
    /// after (see `TurnObserver`). On a thread of its own, since a job may start a runtime and
    /// this wait runs inside the turn's.
    fn serve_queued(&self, file: &mut AdfFile) {
        if file.in_transaction() {
            return;
        }
        let observer = &self.scope.observer;
        let store = self.scope.agent.store();
        observer.releasing(file);
        let served = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("adf-waiting-turn".into())
                .spawn_scoped(scope, || store.serve_queued(file))
                .map(|thread| thread.join())
        });
        match served {
            Ok(Ok(_ran)) => {}
            Ok(Err(_panicked)) => {
                tracing::warn!(agent = %self.scope.agent.id, "a job served during a wait panicked")
            }
            Err(error) => {
                tracing::warn!(agent = %self.scope.agent.id, %error, "cannot start a thread to serve queued jobs")
            }
        }
        observer.acquired(file);
    }

    /// Ends a wait: `unregister` removes its entry under the registry lock.
    fn stop_listening(&self, unregister: impl FnOnce(&mut State)) {
        let mut state = self.hil().lock();
        unregister(&mut state);
    }

    /// The answer to `question`, registered now (`ask.requested`) and awaited without the
    /// file and without a thread of its own; `None` when the turn is aborted. `ask.resolved`
    /// goes out when the wait ends, or is dropped with its turn.
    pub(crate) fn ask(&self, question: &str) -> OwnerWait<'_, Option<String>> {
        let (sender, mut receiver) = tmpsc::unbounded_channel();
        let request_id = format!("ask_{}", adf_store::defaults::random_id(12));
        let registered = {
            let mut state = self.hil().lock();
            let aborted = self.scope.abort.is_aborted();
            if !aborted {
                state.asks.push(AskWait {
                    request_id: request_id.clone(),
                    question: question.to_owned(),
                    sender,
                });
            }
            !aborted
        };
        if !registered {
            return Box::pin(std::future::ready(None));
        }
        self.scope.emit(
            "ask.requested",
            json!({ "request_id": request_id, "question": question }),
        );
        // Made now, not at the first poll: a wait dropped unpolled is forgotten too.
        let mut listening = ListeningForAnswer {
            owner: self,
            request_id,
            answer: None,
        };
        Box::pin(async move {
            let answer = loop {
                match receiver.recv().await {
                    Some(Wake::Answer(answer)) => break Some(answer),
                    Some(Wake::Abort) | None => break None,
                    Some(Wake::Queued | Wake::Decision(_)) => {}
                }
            };
            listening.answer.clone_from(&answer);
            answer
        })
    }
}

impl Approver for Owner<'_> {
    /// A code run's call: the wait holds the file (and the turn's thread), serving the
    /// agent's queued jobs meanwhile unless a transaction is open.
    fn decide(&self, file: &mut AdfFile, request: &ApprovalRequest) -> Result<Decision, ToolError> {
        let (sender, receiver) = mpsc::channel();
        let watch = self.watch_queue(file, &sender);
        if !self.register_approval(file, request, Bell::Blocking(sender))? {
            return Ok(Decision::Denied(ABORTED.into()));
        }
        let verdict = self.wait_decision(file, request, &receiver);
        drop(watch);
        self.stop_listening(|state| {
            state.approvals.remove(&request.task_id);
            if state.approvals.is_empty() {
                state.approvals = HashMap::new();
            }
        });
        let (decision, modified_args, payload) = self.decision_of(request, verdict);
        if let Some(args) = &modified_args {
            // The row records what the owner approved; the pipeline runs it.
            file.task_set_args(&request.task_id, args)?;
        }
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
        let (sender, mut receiver) = tmpsc::unbounded_channel();
        hil.lock().asks.push(AskWait {
            request_id: "r".into(),
            question: "q".into(),
            sender,
        });
        assert_eq!(hil.abort_all(), 1);
        assert!(abort.is_aborted());
        assert!(matches!(receiver.try_recv().unwrap(), Wake::Abort));
        hil.lock().turns.remove(&id);
        assert!(!hil.turn_in_flight());
    }
}
