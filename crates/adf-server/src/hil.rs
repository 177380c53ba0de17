//! The owner's side of daemon turns: approvals, `ask` answers and abort.
//!
//! Principal types: [`Hil`] (one per agent: the decisions a running turn waits for, and the
//! abort signals of its turns in flight), `Owner` (the turn's `Approver` and `ask` answerer,
//! on the agent's store worker), [`Verdict`] (what the owner sent), `TurnScope` (what a turn
//! job needs to reach the daemon: the agent, its event stream).
//!
//! Why a registry beside the file: a turn waiting for the owner holds the file it leased
//! from the agent's store worker (the wait is inside the tool call's pipeline), so the HTTP
//! requests that answer it must not need the file. `POST /tasks/{taskId}/resolve` and
//! `POST /asks/{requestId}/respond` find the waiting turn here and hand it the decision over a
//! channel; the waiting side records the outcome on the task row exactly as the pipeline does
//! for any approver (`approval::request`: `running` or `denied` + reason).
//!
//! Waiting freezes nothing else: while a turn waits for an approval or an answer with no
//! transaction open, it runs every job queued on the agent's store worker meanwhile
//! (`StoreHandle::serve_queued`, rung by `StoreHandle::watch_queue`) — owner reads and writes,
//! timer fires, system lambdas, trigger deliveries — each still one transaction, on a thread
//! of its own (a lambda starts a runtime). Before serving it sweeps the turn's own rows and
//! after it starts a new observation (`TurnObserver`), so each job's rows stay its own.
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
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc as tmpsc;

use adf_runtime::executor::LeaseHooks;
use adf_runtime::tools::{ApprovalRequest, Approver, Decision, ToolError};
use adf_store::{AdfFile, StoreError};

use crate::hub::Hub;
use crate::registry::Agent;

mod state;

use state::{ApprovalWait, AskWait, State, Wake};
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
    /// and a turn waiting for an approval or an answer runs the jobs queued meanwhile (see
    /// the module docs).
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
                observer: Arc::new(crate::turns::TurnObserver::new(Arc::clone(agent))),
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
}

/// The owner as a daemon turn sees it: approvals and `ask` answers wait for the HTTP API.
pub(crate) struct Owner<'a> {
    pub(crate) scope: &'a TurnScope,
}

impl Owner<'_> {
    fn hil(&self) -> &Hil {
        self.scope.agent.hil()
    }

    /// Waits for `request`'s decision, serving the agent's queued jobs meanwhile.
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
                Ok(Wake::Queued) => self.serve_queued(file),
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

    /// Waits for the answer to `question`, serving the queued jobs with `file` meanwhile; `None`
    /// when the turn is aborted.
    pub(crate) fn ask(&self, file: &mut AdfFile, question: &str) -> Option<String> {
        let (sender, receiver) = mpsc::channel();
        let request_id = format!("ask_{}", adf_store::defaults::random_id(12));
        let watch = self.watch_queue(file, &sender);
        {
            let mut state = self.hil().lock();
            if self.scope.abort.is_aborted() {
                return None;
            }
            state.asks.push(AskWait {
                request_id: request_id.clone(),
                question: question.to_owned(),
                sender,
            });
        }
        self.scope.emit(
            "ask.requested",
            json!({ "request_id": request_id, "question": question }),
        );
        let answer = loop {
            match receiver.recv() {
                Ok(Wake::Answer(answer)) => break Some(answer),
                Ok(Wake::Abort) | Err(_) => break None,
                Ok(Wake::Queued) => self.serve_queued(file),
                Ok(Wake::Decision(_)) => {}
            }
        };
        drop(watch);
        self.stop_listening(|state| {
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
        let watch = self.watch_queue(file, &sender);
        {
            let mut state = self.hil().lock();
            if self.scope.abort.is_aborted() {
                drop(state);
                return Ok(Decision::Denied(ABORTED.into()));
            }
            state
                .approvals
                .insert(request.task_id.clone(), ApprovalWait { task, sender });
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
        drop(watch);
        self.stop_listening(|state| {
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
        });
        assert_eq!(hil.abort_all(), 1);
        assert!(abort.is_aborted());
        assert!(matches!(receiver.recv().unwrap(), Wake::Abort));
        hil.lock().turns.remove(&id);
        assert!(!hil.turn_in_flight());
    }
}
