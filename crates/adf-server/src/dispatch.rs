//! Trigger dispatch (spec §7.1–§7.5): an event of an agent → its enabled targets →
//! `gating::allows` → `filter::accepts` (self-trigger rules included) → the target's
//! `timing::Window` → a bounded per-agent queue → a system lambda on the code path or an agent
//! turn with the `message::format`ted events.
//!
//! Bounded memory and backpressure. Each agent has one [`TriggerQueue`] of at most
//! [`QUEUE_CAPACITY`] deliveries; a delivery that finds it full is dropped and counted
//! ([`QueueStats::dropped`], plus one `warn` log row per burst when the queue drains), never
//! waited for, so the code that raised the event (an HTTP handler, a lambda) never blocks. A
//! delivery holds one event, or one window's batch of at most [`timing::MAX_PENDING`] events,
//! and each target's window holds at most that many too: the bound is `QUEUE_CAPACITY`
//! deliveries plus `MAX_PENDING` held events per windowed target, whatever the burst.
//!
//! The queue is drained by one task per agent that exists only while the queue is non-empty
//! (an idle agent has no task). A system delivery is one job on the agent's store worker, so
//! other requests to the agent interleave between deliveries: a burst delays a concurrent
//! request by at most one lambda run, and never touches another agent. An agent-scope delivery
//! is a turn job (`turns::run_trigger_turn`), which holds the file only for its steps; the
//! drain hands it to its target loop's lane, a task that runs that loop's deliveries in order
//! while it has any, so a turn waiting for its owner or its model holds up neither the system
//! deliveries behind it nor another loop's turns (the lanes count against the queue's bound).
//!
//! Events produced by agent code: after a lambda or a turn, the files it wrote or deleted (an
//! `updated_at` snapshot diff, taken in the same job) become `on_file_change` events with
//! `Producer::Lambda { source }` (or `Producer::Agent` for a turn), so `filter::accepts` keeps
//! a handler from receiving its own writes and `include_self` works.
//!
//! Row sources (`on_task_create`, `on_logs`, `on_inbox`, `on_outbox`): each agent keeps the
//! highest rowid it has seen in `adf_tasks`, `adf_logs`, `adf_inbox` and `adf_outbox` (32
//! bytes, set when the agent loads). A job that runs a handler `observe`s: a sweep before the
//! work turns rows someone else added meanwhile (another process) into external events, a
//! sweep after it turns the work's own rows into events of its producer — so a lambda never
//! receives the log rows it wrote (TRG-05). Owner HTTP writes sweep through
//! `run_observed`. A sweep reads at most `SWEEP_LIMIT` rows per table and counts the
//! rest as dropped. Event data are ids, names and states, never message bodies or log text.
//!
//! Turn sources: the executor's `TurnHost` events give `on_tool_call` (each finished call:
//! completed, failed, or denied) and `on_llm_call` (each provider response, `source` `turn`;
//! the compaction call, `compaction`), recorded during the turn and dispatched after its job.
//! `on_chat` is raised by `POST /chat`.
//!
//! Invariants: raising an event never waits for a handler — events observed inside a job are
//! dispatched after it, from async code, into the bounded queue; a timer fire that finds the
//! queue full is dropped and counted like any delivery (a `once` fire is re-armed, TRG-29). An
//! idle agent holds no task and no event: only its queue record with the marks.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use adf_runtime::code::LambdaRef;
use adf_runtime::triggers::{
    self, Producer, Scope, Target, TriggerEvent, TriggerKind, filter, gating, timing,
};
use adf_store::AdfFile;
use adf_store::daemon_reads::ObservedTable;

use crate::hub::Hub;
use crate::lambdas::{LambdaReport, Sweep, observe_serving, run_system_lambda};
use crate::registry::Agent;

mod handled;
mod queue;

pub(crate) use handled::Handled;
use queue::{Cached, Delivery, RowMarks};
pub use queue::{QUEUE_CAPACITY, QueueStats, TriggerQueue};

/// Dispatches `event` to `agent`'s trigger targets. Never blocks on the handlers: matching
/// deliveries are queued (or dropped when the queue is full) and run in the background.
pub(crate) async fn dispatch(hub: &Arc<Hub>, agent: &Arc<Agent>, event: TriggerEvent) {
    let Some(cached) = cached_targets(agent).await else {
        return;
    };
    let now = adf_store::time::now_ms();
    let state = event.observed_in.as_deref().unwrap_or(&cached.state);
    for target in cached.targets.iter().filter(|t| t.kind == event.kind) {
        if !gating::allows(state, target.scope, event.kind) || !filter::accepts(target, &event) {
            continue;
        }
        let key = (target.kind, target.index);
        let (ready, flush_at) = {
            let mut state = agent.triggers().lock();
            let window = state
                .windows
                .entry(key)
                .or_insert_with(|| timing::Window::new(target.timing, target.kind));
            let ready = window.push(now, event.clone());
            let deadline = window.deadline();
            let flush_at = match deadline {
                Some(at) if state.flushing.insert(key) => Some(at),
                _ => None,
            };
            (ready, flush_at)
        };
        if let Some(events) = ready {
            enqueue(
                hub,
                agent,
                Delivery {
                    target: target.clone(),
                    events,
                },
            );
        }
        if flush_at.is_some() {
            spawn_flush(hub, agent, target.clone());
        }
    }
}

/// Dispatches each of `events` in order (events observed after a job).
pub(crate) async fn dispatch_all(hub: &Arc<Hub>, agent: &Arc<Agent>, events: Vec<TriggerEvent>) {
    for event in events {
        crate::dispatch::dispatch(hub, agent, event).await;
    }
}

/// The agent's targets and state, read once and kept until the config changes. The first
/// read (on load, with `on_startup`) also sets the row marks, so rows already in the file
/// never become events.
async fn cached_targets(agent: &Arc<Agent>) -> Option<Arc<Cached>> {
    if let Some(cached) = agent.triggers().lock().cached.clone() {
        return Some(cached);
    }
    let marker = Arc::clone(agent);
    let read = agent
        .job(move |file| {
            if marker.triggers().lock().marks.is_none() {
                let marks = current_marks(file);
                marker.triggers().lock().marks = Some(marks);
            }
            file.config()
        })
        .await;
    let config = match read {
        Ok(config) => config,
        Err(error) => {
            tracing::warn!(agent = %agent.id, %error, "cannot read the config for triggers");
            return None;
        }
    };
    let cached = Arc::new(Cached {
        targets: triggers::targets(&config).0,
        state: stored_state(&config),
    });
    agent.triggers().lock().cached = Some(Arc::clone(&cached));
    Some(cached)
}

/// Logs, once per load, that a system target names neither a lambda nor a command.
async fn report_command_target(agent: &Arc<Agent>, target: &Target) {
    {
        let mut state = agent.triggers().lock();
        if state.command_reported {
            return;
        }
        state.command_reported = true;
    }
    let kind = target.kind.as_str();
    let data = json!({ "trigger": kind, "command": target.command });
    let logged = agent
        .job(move |file| {
            file.log(&adf_store::NewLog {
                level: "warn",
                origin: Some("trigger"),
                event: Some("command_unsupported"),
                target: Some(kind),
                message: "a system trigger target names neither a lambda nor a command, so its deliveries are skipped",
                data: Some(&data),
                r#loop: None,
            })
        })
        .await;
    if let Err(error) = logged {
        tracing::warn!(agent = %agent.id, %error, "cannot log a skipped command target");
    }
}

/// Sleeps until the window's deadline (which a debounce may push back) and queues what is
/// then due. One flush task per windowed target, only while it holds events.
fn spawn_flush(hub: &Arc<Hub>, agent: &Arc<Agent>, target: Target) {
    let hub = Arc::clone(hub);
    let agent = Arc::clone(agent);
    tokio::spawn(async move {
        let key = (target.kind, target.index);
        loop {
            let deadline = {
                let state = agent.triggers().lock();
                state.windows.get(&key).and_then(timing::Window::deadline)
            };
            let Some(deadline) = deadline else { break };
            let wait = u64::try_from(deadline - adf_store::time::now_ms()).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let due = {
                let mut state = agent.triggers().lock();
                state
                    .windows
                    .get_mut(&key)
                    .and_then(|w| w.due(adf_store::time::now_ms()))
            };
            if let Some(events) = due {
                enqueue(
                    &hub,
                    &agent,
                    Delivery {
                        target: target.clone(),
                        events,
                    },
                );
            }
        }
        agent.triggers().lock().flushing.remove(&key);
    });
}

fn enqueue(hub: &Arc<Hub>, agent: &Arc<Agent>, delivery: Delivery) {
    let start = {
        let mut state = agent.triggers().lock();
        if state.waiting() >= QUEUE_CAPACITY {
            state.dropped += 1;
            state.dropped_unlogged += 1;
            return;
        }
        state.pending.push_back(delivery);
        state.high_water = state.high_water.max(state.waiting());
        !std::mem::replace(&mut state.draining, true)
    };
    if start {
        let hub = Arc::clone(hub);
        let agent = Arc::clone(agent);
        tokio::spawn(async move { drain(&hub, agent).await });
    }
}

async fn drain(hub: &Arc<Hub>, agent: Arc<Agent>) {
    loop {
        let next = {
            let mut state = agent.triggers().lock();
            let next = state.pending.pop_front();
            if next.is_none() {
                state.draining = false;
            }
            next
        };
        let Some(delivery) = next else {
            let dropped = std::mem::take(&mut agent.triggers().lock().dropped_unlogged);
            if dropped > 0 {
                log_dropped(&agent, dropped).await;
            }
            return;
        };
        if delivery.target.scope == Scope::Agent {
            hand_to_lane(hub, &agent, delivery);
            continue;
        }
        deliver(hub, &agent, delivery).await;
        agent.triggers().lock().delivered += 1;
    }
}

/// Queues an agent-scope delivery on its loop's lane, starting the lane's task when it was
/// idle (see [`queue::QueueState::lanes`]).
fn hand_to_lane(hub: &Arc<Hub>, agent: &Arc<Agent>, delivery: Delivery) {
    let loop_name = delivery.target.loop_name.clone();
    let start = {
        let mut state = agent.triggers().lock();
        state.in_lanes += 1;
        match state.lanes.get_mut(&loop_name) {
            Some(lane) => {
                lane.push_back(delivery);
                false
            }
            None => {
                state
                    .lanes
                    .insert(loop_name.clone(), VecDeque::from([delivery]));
                true
            }
        }
    };
    if start {
        let hub = Arc::clone(hub);
        let agent = Arc::clone(agent);
        tokio::spawn(async move { run_lane(&hub, &agent, &loop_name).await });
    }
}

/// Runs one loop's agent-scope deliveries in order until its lane is empty; the lane's entry
/// goes with its last delivery, under the queue's lock, so a delivery handed over meanwhile
/// either finds the entry (and is run here) or starts a new task.
async fn run_lane(hub: &Arc<Hub>, agent: &Arc<Agent>, loop_name: &str) {
    loop {
        let next = {
            let mut state = agent.triggers().lock();
            let next = state.lanes.get_mut(loop_name).and_then(VecDeque::pop_front);
            if next.is_none() {
                state.lanes.remove(loop_name);
            }
            next
        };
        let Some(delivery) = next else { return };
        deliver(hub, agent, delivery).await;
        let mut state = agent.triggers().lock();
        state.delivered += 1;
        state.in_lanes -= 1;
    }
}

async fn log_dropped(agent: &Agent, dropped: u64) {
    let result = agent
        .job(move |file| {
            let data = json!({ "dropped": dropped, "capacity": QUEUE_CAPACITY });
            file.log(&adf_store::NewLog {
                level: "warn",
                origin: Some("trigger"),
                event: Some("trigger_dispatch_dropped"),
                target: None,
                message: &format!(
                    "{dropped} trigger deliveries dropped: the queue holds {QUEUE_CAPACITY}"
                ),
                data: Some(&data),
                r#loop: None,
            })
        })
        .await;
    if let Err(error) = result {
        tracing::warn!(agent = %agent.id, %error, "cannot log dropped deliveries");
    }
}

async fn deliver(hub: &Arc<Hub>, agent: &Arc<Agent>, delivery: Delivery) {
    let registry = hub.tools();
    let kind = delivery.target.kind;
    // Gated again now, not only at dispatch: a delivery that waited in a window or the
    // queue must not run once the state forbids it (`off` stops pending triggers, §6.1).
    if let Some(cached) = cached_targets(agent).await
        && !gating::allows(&cached.state, delivery.target.scope, kind)
    {
        return;
    }
    let observer = Arc::clone(agent);
    let outcome = match delivery.target.scope {
        Scope::System => {
            let Some(source) = delivery.target.lambda.clone() else {
                // A `command` target (TRG-37) runs through adf_shell with the event as
                // variables; a target with neither is said once per load.
                let Some(command) = delivery.target.command.clone() else {
                    report_command_target(agent, &delivery.target).await;
                    return;
                };
                let input = lambda_input(kind, &delivery.events);
                let source = format!("trigger:{}", kind.as_str());
                let producer = Producer::Lambda {
                    source: source.clone(),
                };
                let outcome = agent
                    .store()
                    .run(move |file| {
                        let observed = observe_serving(
                            file,
                            producer.clone(),
                            sweeper(&observer),
                            |file, queue| {
                                crate::shell_runs::run(
                                    file, &registry, &source, &command, &input, queue,
                                )
                            },
                        );
                        Ok(Handled {
                            report: None,
                            written: observed.written,
                            producer,
                            events: observed.events,
                            wake: crate::scheduler::wake_of(file),
                        })
                    })
                    .await;
                agent.triggers().invalidate();
                match outcome {
                    Ok(handled) => {
                        dispatch_handled(
                            hub,
                            agent,
                            handled.wake,
                            handled.written,
                            handled.producer,
                            handled.events,
                        )
                        .await;
                    }
                    Err(error) => {
                        tracing::warn!(agent = %agent.id, %error, "trigger delivery failed")
                    }
                }
                return;
            };
            let lambda = match LambdaRef::parse(&source) {
                Ok(lambda) => lambda,
                Err(error) => {
                    tracing::warn!(agent = %agent.id, %source, error = %error.message, "bad lambda");
                    return;
                }
            };
            let input = lambda_input(kind, &delivery.events);
            let warm = delivery.target.warm;
            let producer = Producer::Lambda {
                source: source.clone(),
            };
            agent
                .store()
                .run(move |file| {
                    let mut report =
                        run_system_lambda(file, sweeper(&observer), registry, lambda, input, warm);
                    let events = std::mem::take(&mut report.events);
                    Ok(Handled {
                        written: report.written.clone(),
                        report: Some(report),
                        producer,
                        events,
                        wake: crate::scheduler::wake_of(file),
                    })
                })
                .await
        }
        Scope::Agent => run_turn(hub, agent, &delivery).await,
    };
    // The handler may have changed the config (targets, state).
    agent.triggers().invalidate();
    match outcome {
        Ok(handled) => {
            if let Some(report) = handled.report {
                crate::dispatch::publish_lambda(hub, agent, &report, kind.as_str()).await;
            }
            dispatch_handled(
                hub,
                agent,
                handled.wake,
                handled.written,
                handled.producer,
                handled.events,
            )
            .await;
        }
        Err(error) => tracing::warn!(agent = %agent.id, %error, "trigger delivery failed"),
    }
}

/// An agent-scope delivery: one turn job on the target's loop, run by the turn host
/// (`turns::run_trigger_turn`, above dispatch, so reached through the hub's `Subsystems`).
fn run_turn<'a>(
    hub: &'a Arc<Hub>,
    agent: &'a Arc<Agent>,
    delivery: &'a Delivery,
) -> futures::future::BoxFuture<'a, Result<Handled, adf_store::StoreError>> {
    hub.subsystems()
        .run_trigger_turn(hub, agent, &delivery.target, &delivery.events)
}

/// Runs `work` as one owner job on the agent's worker (an HTTP write) and dispatches the
/// task, log, inbox and outbox rows that appeared by then, produced by nobody inside the
/// agent. Rows another process added since the agent's last job are caught here too.
pub(crate) async fn run_observed<R: Send + 'static>(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    work: impl FnOnce(&mut AdfFile) -> Result<R, adf_store::StoreError> + Send + 'static,
) -> Result<R, adf_store::StoreError> {
    let observer = Arc::clone(agent);
    let (result, events) = agent
        .job(move |file| {
            let result = work(file);
            let events = sweep(file, &observer, &Producer::External);
            Ok((result, events))
        })
        .await?;
    crate::dispatch::dispatch_all(hub, agent, events).await;
    result
}

/// `lambda.started` / `lambda.completed` for a system-scope run.
pub(crate) async fn publish_lambda(
    hub: &Arc<Hub>,
    agent: &Agent,
    report: &LambdaReport,
    trigger: &str,
) {
    let source = format!("lambda:{}", report.lambda.source());
    let base = json!({
        "lambda_path": report.lambda.path,
        "function_name": report.lambda.function,
        "kind": "system_scope",
        "trigger": trigger,
        "started_at": report.started_at,
    });
    hub.emit(agent, "lambda.started", &source, base.clone())
        .await;
    // `adf.emit_event` calls of the run, in order, between its start and its end.
    for custom in &report.custom {
        let from = format!("lambda:{}", custom.source);
        hub.emit(agent, &custom.event_type, &from, custom.payload.clone())
            .await;
    }
    let mut done = base;
    done["duration_ms"] = json!(report.duration_ms);
    if let Some(error) = &report.error {
        done["error"] = json!(error);
    }
    hub.emit(agent, "lambda.completed", &source, done).await;
}

/// What follows every handler job (trigger delivery, tap, turn): the scheduler takes the
/// wake the job computed (it may have set a timer or changed the state), then the files it
/// wrote or deleted and the events it produced are dispatched.
pub(crate) async fn dispatch_handled(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    wake: Option<crate::scheduler::WakeRead>,
    written: crate::support::FileChanges,
    producer: Producer,
    events: Vec<TriggerEvent>,
) {
    if let Some(wake) = wake {
        hub.timer_wakes().set(agent, wake);
    }
    dispatch_writes(hub, agent, written, producer).await;
    dispatch_all(hub, agent, events).await;
}

/// Files written or deleted by agent code become `file.written` / `file.deleted` events and
/// `on_file_change` triggers carrying who wrote them.
pub(crate) async fn dispatch_writes(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    written: crate::support::FileChanges,
    producer: Producer,
) {
    let source = match &producer {
        Producer::Lambda { source } => format!("lambda:{source}"),
        Producer::Agent => "agent".to_owned(),
        Producer::External => "system:daemon".to_owned(),
    };
    dispatch_file_changes(hub, agent, written, &source, &producer).await;
}

/// Each of `changes` as a `file.written` (`file.deleted`) event from `source` and an
/// `on_file_change` trigger of `producer` with operation `write` (`delete`): every writer's
/// file changes take this one shape (FIL-20).
pub(crate) async fn dispatch_file_changes(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    changes: crate::support::FileChanges,
    source: &str,
    producer: &Producer,
) {
    for (path, size) in changes {
        let (event_type, payload, data) = match size {
            Some(bytes) => (
                "file.written",
                json!({ "path": path, "bytes": bytes }),
                json!({ "path": path, "operation": "write", "size": bytes }),
            ),
            None => (
                "file.deleted",
                json!({ "path": path }),
                json!({ "path": path, "operation": "delete" }),
            ),
        };
        hub.emit(agent, event_type, source, payload).await;
        let event = TriggerEvent::new(TriggerKind::OnFileChange, adf_store::time::now_ms(), data)
            .produced_by(producer.clone());
        crate::dispatch::dispatch(hub, agent, event).await;
    }
}

/// The tables whose new rows are trigger events, in [`RowMarks`] order.
const OBSERVED: [(ObservedTable, TriggerKind); 4] = [
    (ObservedTable::Tasks, TriggerKind::OnTaskCreate),
    (ObservedTable::Logs, TriggerKind::OnLogs),
    (ObservedTable::Inbox, TriggerKind::OnInbox),
    (ObservedTable::Outbox, TriggerKind::OnOutbox),
];

/// Most new rows of one table one sweep turns into events; beyond it the rows are skipped
/// (the mark still moves past them) and counted as dropped, so a lambda that writes 100,000
/// log rows costs one bounded read, not 100,000 events.
const SWEEP_LIMIT: i64 = 256;

fn current_marks(file: &AdfFile) -> RowMarks {
    OBSERVED.map(|(table, _)| file.max_rowid(table).unwrap_or(0))
}

/// The rows added to the observed tables since the last sweep, as events of `producer`.
/// Runs inside a job on the agent's worker, so sweeps of one agent never overlap; a sweep
/// before the agent's first read only sets the marks.
pub(crate) fn sweep(file: &AdfFile, agent: &Agent, producer: &Producer) -> Vec<TriggerEvent> {
    // Copied out first: a `let … else` keeps its scrutinee's guard alive through the `else`.
    let known = agent.triggers().lock().marks;
    let Some(mut marks) = known else {
        agent.triggers().lock().marks = Some(current_marks(file));
        return Vec::new();
    };
    let now = adf_store::time::now_ms();
    let mut events = Vec::new();
    let mut skipped = 0u64;
    for (slot, (table, kind)) in OBSERVED.iter().enumerate() {
        let newest = file.max_rowid(*table).unwrap_or(0);
        if newest <= marks[slot] {
            continue;
        }
        match file.observed_rows_after(*table, marks[slot], SWEEP_LIMIT) {
            Ok(rows) => {
                skipped += u64::try_from(newest - marks[slot])
                    .unwrap_or(0)
                    .saturating_sub(rows.len() as u64);
                events.extend(
                    rows.into_iter().map(|data| {
                        TriggerEvent::new(*kind, now, data).produced_by(producer.clone())
                    }),
                );
            }
            Err(error) => {
                tracing::warn!(agent = %agent.id, ?table, %error, "cannot read new rows");
            }
        }
        marks[slot] = newest;
    }
    // Merged, not stored: marks only move forward, also past a concurrent
    // `pass_unobserved_rows`.
    {
        let mut state = agent.triggers().lock();
        let merged = match state.marks {
            Some(current) => std::array::from_fn(|slot| marks[slot].max(current[slot])),
            None => marks,
        };
        state.marks = Some(merged);
    }
    if skipped > 0 {
        agent.triggers().count_dropped(skipped);
    }
    if !events.is_empty() {
        // Another sweeper (the watcher, a turn's lease) may dispatch these after a state
        // change; they are gated by the state they were written in.
        let state = file.config().ok().map(|config| stored_state(&config));
        for event in &mut events {
            event.observed_in.clone_from(&state);
        }
    }
    events
}

/// The config's `state` (a missing one is `active`).
fn stored_state(config: &Value) -> String {
    config
        .get("state")
        .and_then(Value::as_str)
        .unwrap_or("active")
        .to_owned()
}

/// Moves the agent's row marks to `through` (never back) instead of sweeping, when no new
/// row is one a target reacts to: each observed table (`adf_tasks`, `adf_logs`, `adf_inbox`,
/// `adf_outbox`) either has no target of its kind (`on_task_create`, `on_logs`, `on_inbox`,
/// `on_outbox`: its rows concern nobody) or no row past its mark (a route writes log rows; the
/// default `on_inbox` target does not care). Rows nothing reacts to need no job on the agent's
/// worker. False (the caller sweeps) while the targets are unknown (not read yet, or the
/// config changed), or when a watched table has new rows.
pub(crate) fn pass_unobserved_rows(agent: &Agent, through: RowMarks) -> bool {
    let mut state = agent.triggers().lock();
    let Some(cached) = state.cached.clone() else {
        return false;
    };
    let Some(marks) = state.marks.as_mut() else {
        return false;
    };
    let watched = OBSERVED.map(|(_, kind)| cached.targets.iter().any(|t| t.kind == kind));
    if (0..OBSERVED.len()).any(|slot| watched[slot] && through[slot] > marks[slot]) {
        return false;
    }
    for (mark, end) in marks.iter_mut().zip(through) {
        *mark = (*mark).max(end);
    }
    state.rows_passed += 1;
    true
}

/// [`sweep`] for `agent`, for a run that sweeps at each hand-over of the file while it serves
/// the agent's queued jobs (`lambdas::observe_serving`).
pub(crate) fn sweeper(agent: &Arc<Agent>) -> Sweep {
    let agent = Arc::clone(agent);
    Arc::new(move |file, producer| sweep(file, &agent, producer))
}

/// Runs `work` between two sweeps: rows that appeared before it (another process) are
/// external events, rows that appeared during it are `producer`'s.
pub(crate) fn observe<R>(
    file: &mut AdfFile,
    agent: &Agent,
    producer: Producer,
    work: impl FnOnce(&mut AdfFile) -> R,
) -> (R, Vec<TriggerEvent>) {
    let mut events = sweep(file, agent, &Producer::External);
    let result = work(file);
    events.extend(sweep(file, agent, &producer));
    (result, events)
}

/// What a system lambda receives: the event `{type, timestamp, data}`, or for a batch
/// `{type, timestamp, events: [...]}`.
fn lambda_input(kind: TriggerKind, events: &[TriggerEvent]) -> Value {
    match events {
        [only] => only.payload(),
        many => json!({
            "type": kind.as_str(),
            "timestamp": adf_store::time::now_ms(),
            "events": many.iter().map(TriggerEvent::payload).collect::<Vec<_>>(),
        }),
    }
}
