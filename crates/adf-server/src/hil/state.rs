//! [`Hil`]: one agent's registry of turns in flight and the owner decisions they wait for,
//! the per-agent state of the owner's side of daemon turns, and the settling of approvals an
//! earlier process left behind (the load's first job). A leaf, so the agent record
//! (`registry.rs`) embeds it without importing the waiting and answering logic of `hil.rs`
//! (see its module docs).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc as tmpsc};

use adf_store::{AdfFile, StoreError, TaskRow};

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

pub(super) enum Wake {
    Decision(Verdict),
    Answer(String),
    /// A job was queued on the agent's store worker: the waiter serves it.
    Queued,
    Abort,
}

/// Where a waiting approval's wakes go: a wait that blocks its thread (a code run's call,
/// which holds the file) or one the executor awaits without the file.
pub(super) enum Bell {
    Blocking(mpsc::Sender<Wake>),
    Awaited(tmpsc::UnboundedSender<Wake>),
}

impl Bell {
    /// False when the waiter is gone.
    pub(super) fn ring(&self, wake: Wake) -> bool {
        match self {
            Bell::Blocking(sender) => sender.send(wake).is_ok(),
            Bell::Awaited(sender) => sender.send(wake).is_ok(),
        }
    }
}

pub(super) struct ApprovalWait {
    /// The row as created, for the resolve answer (the row itself is out of reach).
    pub(super) task: TaskRow,
    pub(super) sender: Bell,
}

pub(super) struct AskWait {
    pub(super) request_id: String,
    pub(super) question: String,
    pub(super) sender: tmpsc::UnboundedSender<Wake>,
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
pub(super) struct State {
    pub(super) next_turn: u64,
    pub(super) turns: HashMap<u64, Arc<TurnAbort>>,
    pub(super) approvals: HashMap<String, ApprovalWait>,
    pub(super) asks: Vec<AskWait>,
}

/// One agent's registry of turns in flight and the owner decisions they wait for.
#[derive(Default)]
pub struct Hil {
    state: Mutex<State>,
    /// Moves with each suspend request and answer, so a suspend timeout acts only on the
    /// suspension it was started for.
    pub(super) suspend_generation: AtomicU64,
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
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a turn job about to run; the drop of its `TurnScope` (hil.rs) forgets it.
    pub(crate) fn begin_turn(&self) -> (u64, Arc<TurnAbort>) {
        let mut state = self.lock();
        state.next_turn += 1;
        let id = state.next_turn;
        let abort = Arc::new(TurnAbort::default());
        state.turns.insert(id, Arc::clone(&abort));
        (id, abort)
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
            let _gone = wait.sender.ring(Wake::Abort);
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
        if !wait.sender.ring(Wake::Decision(verdict)) {
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
}

/// Why an orphaned approval is cancelled (or an approved call failed) on load.
pub const ORPHANED: &str = "orphaned: the turn waiting for this approval ended with its process";

/// Settles the approvals a turn of an earlier process left behind (reference behaviour on
/// load): an executor-managed `pending_approval` task is `cancelled`, an executor-managed
/// `running` one (approved, outcome never recorded) `failed`. Without this an owner could
/// approve a call no turn will ever make. Runs in the load's first job, before any turn of
/// this process can exist; returns `(task_id, former status)` for
/// `report_orphaned_approvals` (hil.rs).
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
