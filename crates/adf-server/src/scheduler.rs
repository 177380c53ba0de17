//! The timer scheduler (spec §7.6, §7.7): one task for every loaded agent, sleeping until the
//! earliest `next_wake_at` among them.
//!
//! No polling: the task keeps, per agent, the earliest wake time of its live timers (one
//! integer per agent with timers, nothing for an agent without), sleeps until the smallest, and
//! is woken early only by [`Daemon::rearm_timers`] — called when an agent loads, when a timer
//! is added or deleted through the API, and after every fire (a lambda or turn may have set or
//! deleted timers through its tools).
//!
//! Firing one agent is one job on its store worker, so it is serialized with every other write
//! to that file: the job re-reads the timers, and for each one that is due (`fire::is_due`)
//! records the fire first (`fire::fire`: next time, `run_count + 1`, `last_fired_at`; expired
//! rows stay as history), then delivers it. Because the fire is recorded before delivery and
//! the next time is computed from *now*, a timer missed while the daemon was down fires exactly
//! once on load (TRG-30, TRG-31). A second wake for the same agent racing the first finds
//! nothing due.
//!
//! Delivery (TRG-25: a scope is delivered only if the timer's scope includes it and
//! `triggers.on_timer` is enabled with a target of that scope, and the agent's state lets it
//! through, `gating::allows`):
//! - system scope: the timer's `lambda` (or the first system target's) runs on the code path
//!   (`code::run_lambda` with `Authorization::SourceFile`: the lambda file's `authorized` flag),
//!   with the event `{type: "on_timer", timestamp, data: {timer_id, payload, run_count,
//!   scheduled_at}}` as its input;
//! - agent scope: an executor turn on the timer's loop (`main` when none) with the payload as
//!   the message. With no model reachable (no provider, no key) a `warn` log row
//!   `turn_skipped` is written and nothing else happens.
//!
//! A fire that finds the agent's trigger queue full is recorded but not delivered: it counts
//! as a dropped delivery, and a fire that expired its timer (a `once`) is re-armed
//! (`fire::rearm_after_drop`: `expired` back to 0, due again a second later, TRG-29).
//!
//! The hibernate nudge (TRG-35) shares the wake map: a hibernating agent with an agent-scope
//! `on_timer` target wakes `limits.hibernate_nudge.interval_ms` (default 24 h) after the later
//! of its last nudge (meta `runtime_hibernate_nudge_at`, recorded before the turn) and its last
//! transcript row, with a nudge turn (`triggers::nudge`). Its wake is one more candidate for
//! the same per-agent integer, so it costs an idle agent nothing.
//!
//! The lambda and the turn run inside the store job, on a current-thread tokio runtime on the
//! worker thread, because both need the `&mut AdfFile` across awaits; the agent's other requests
//! wait for that one job, never for another agent. Events (`timer.fired`, `lambda.started`,
//! `lambda.completed`) are published after the job, since publishing may itself need the
//! worker (the `seq` block write).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Notify;

use adf_providers::Resolver;
use adf_runtime::code::{
    self, Authorization, CodeEnv, LambdaRef, RunOptions, Sandbox, SandboxConfig,
};
use adf_runtime::executor::{Executor, LoopPool, RetryLog, Trigger, TurnEnd, TurnEvent, TurnHost};
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{Approver, ToolRegistry};
use adf_runtime::triggers::{
    self, Producer, Scope, TriggerEvent, TriggerKind, fire, gating, nudge,
};
use adf_store::{AdfFile, Caller, MetaProtection, NewLog, TimerRow};

use crate::daemon::{Agent, Daemon};
use crate::dispatch::observe;
use crate::hil::{Owner, TurnScope};

/// Per-agent earliest wake times and the bell that wakes the scheduler task.
#[derive(Debug, Default)]
pub(crate) struct TimerWakes {
    /// Agent id → earliest `next_wake_at` of its live timers. Agents without live timers have
    /// no entry, so 1,000 idle agents without timers cost nothing here.
    wakes: Mutex<HashMap<String, i64>>,
    bell: Notify,
    started: AtomicBool,
}

impl TimerWakes {
    fn set(&self, agent_id: &str, wake: Option<i64>) {
        let mut wakes = self.wakes.lock().unwrap_or_else(PoisonError::into_inner);
        match wake {
            Some(at) => {
                wakes.insert(agent_id.to_owned(), at);
            }
            None => {
                wakes.remove(agent_id);
            }
        }
    }

    fn earliest(&self) -> Option<i64> {
        self.wakes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .copied()
            .min()
    }

    /// Removes and returns the agents due at `now`.
    fn take_due(&self, now: i64) -> Vec<String> {
        let mut wakes = self.wakes.lock().unwrap_or_else(PoisonError::into_inner);
        let due: Vec<String> = wakes
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            wakes.remove(id);
        }
        due
    }

    /// The earliest wake time known for `agent_id` (tests and `adf demo` read it).
    pub(crate) fn of(&self, agent_id: &str) -> Option<i64> {
        self.wakes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(agent_id)
            .copied()
    }
}

/// One delivered (or skipped) fire, reported after the store job for the event stream.
#[derive(Debug, Clone)]
struct FireReport {
    /// `None` for the hibernate nudge, which is no timer row.
    timer_id: Option<i64>,
    scope: &'static str,
    run_count: i64,
    scheduled_at: i64,
    lambda: Option<LambdaReport>,
    /// Files an agent-scope turn wrote (a lambda's are in its report).
    written: Vec<(String, i64)>,
    /// Tool calls, model calls and new rows the delivery produced, for their triggers.
    events: Vec<TriggerEvent>,
    /// The queue was full: the fire was recorded but not delivered (TRG-29).
    dropped: bool,
}

impl FireReport {
    fn new(timer_id: Option<i64>, scope: &'static str, run_count: i64, scheduled_at: i64) -> Self {
        Self {
            timer_id,
            scope,
            run_count,
            scheduled_at,
            lambda: None,
            written: Vec::new(),
            events: Vec::new(),
            dropped: false,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct LambdaReport {
    pub(crate) lambda: LambdaRef,
    pub(crate) started_at: i64,
    pub(crate) duration_ms: f64,
    pub(crate) error: Option<String>,
    /// Files the run created or changed (path, size), for `on_file_change`.
    pub(crate) written: Vec<(String, i64)>,
    /// The run's `adf.emit_event` events, published with `lambda.started`/`completed`.
    pub(crate) custom: Vec<crate::taps::CustomEvent>,
    /// `on_tool_call` / `on_llm_call` events of the run's `adf.*` calls, produced by the
    /// lambda (so it never receives its own); the caller dispatches them with the run's other
    /// new-row events.
    pub(crate) call_events: Vec<TriggerEvent>,
}

impl Daemon {
    /// Starts the scheduler task once (the first agent load does it, inside the runtime).
    pub(crate) fn ensure_scheduler(&self) {
        if self.timer_wakes().started.swap(true, Ordering::SeqCst) {
            return;
        }
        let daemon = self.clone();
        tokio::spawn(async move { daemon.scheduler_loop().await });
    }

    /// Re-reads `agent`'s timers (and its hibernate nudge) and wakes the scheduler, so a new,
    /// changed or deleted timer moves the next wake-up. Cheap: one indexed read on the agent's
    /// worker.
    pub async fn rearm_timers(&self, agent: &Agent) {
        let next = agent.job(|file| Ok(wake_of(file))).await;
        match next {
            Ok(Some(next)) => self.timer_wakes().set(&agent.id, next),
            Ok(None) => self.timer_wakes().set(&agent.id, None),
            Err(error) => {
                tracing::warn!(agent = %agent.id, %error, "cannot read timers");
                self.timer_wakes().set(&agent.id, None);
            }
        }
        self.timer_wakes().bell.notify_one();
    }

    /// Sets the wake time a job already computed (`wake_of` inside the job that ran a handler,
    /// which may have set a timer or changed the state) and wakes the scheduler.
    pub(crate) fn set_timer_wake(&self, agent: &Agent, wake: Option<i64>) {
        self.timer_wakes().set(&agent.id, wake);
        self.timer_wakes().bell.notify_one();
    }

    /// The next wake time the scheduler holds for an agent (`None`: no live timer).
    pub fn next_timer_wake(&self, agent_id: &str) -> Option<i64> {
        self.timer_wakes().of(agent_id)
    }

    pub(crate) fn forget_timers(&self, agent_id: &str) {
        self.timer_wakes().set(agent_id, None);
    }

    async fn scheduler_loop(self) {
        let mut shutdown = self.shutdown_signal();
        loop {
            if *shutdown.borrow() {
                return;
            }
            // `notified()` is created before reading the earliest time, and `notify_one`
            // stores a permit when nobody waits, so a re-arm between the two is never lost.
            let bell = self.timer_wakes().bell.notified();
            let sleep = self.timer_wakes().earliest().map(|at| {
                let wait = u64::try_from(at - adf_store::time::now_ms()).unwrap_or(0);
                tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_millis(wait))
            });
            tokio::select! {
                () = bell => continue,
                _ = shutdown.changed() => return,
                () = async {
                    match sleep {
                        Some(sleep) => sleep.await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
            for id in self.timer_wakes().take_due(adf_store::time::now_ms()) {
                let Ok(agent) = self.agent(&id) else { continue };
                let daemon = self.clone();
                // Each agent fires on its own task: a slow lambda on one agent never delays
                // another agent's timers.
                tokio::spawn(async move { daemon.fire_agent(agent).await });
            }
        }
    }

    async fn fire_agent(&self, agent: Arc<Agent>) {
        // A lambda or turn may change the config; trigger targets are read again after.
        agent.triggers().invalidate();
        let registry = self.tools();
        // A timer fire is one of the agent's deliveries: when its bounded queue is full the
        // fire is dropped like any other delivery (and a `once` fire re-armed, TRG-29), so a
        // saturated agent is not handed more work than its bound.
        let queue_full = agent.triggers().is_full();
        let (scope, publisher) = TurnScope::new(self, &agent);
        let reports = agent
            .store()
            .run(move |file| {
                let reports = fire_due(
                    file,
                    &scope,
                    registry,
                    adf_store::time::now_ms(),
                    queue_full,
                );
                scope.finish(file);
                Ok(reports)
            })
            .await;
        // The turn's owner events (approvals, asks) go out before the fire's.
        let _ended = publisher.await;
        match reports {
            Ok(reports) => {
                let dropped = reports.iter().filter(|r| r.dropped).count() as u64;
                if dropped > 0 {
                    agent.triggers().count_dropped(dropped);
                }
                for report in reports {
                    self.publish_fire(&agent, report).await;
                }
            }
            Err(error) => tracing::warn!(agent = %agent.id, %error, "timer fire failed"),
        }
        self.rearm_timers(&agent).await;
    }

    async fn publish_fire(&self, agent: &Arc<Agent>, report: FireReport) {
        if let Some(timer_id) = report.timer_id {
            self.emit(
                agent,
                "timer.fired",
                "system:timer",
                json!({
                    "timer_id": timer_id,
                    "scope": report.scope,
                    "run_count": report.run_count,
                    "scheduled_at": report.scheduled_at,
                }),
            )
            .await;
        }
        if let Some(lambda) = report.lambda {
            self.publish_lambda(agent, &lambda, "on_timer").await;
            let producer = Producer::Lambda {
                source: lambda.lambda.source(),
            };
            self.dispatch_writes(agent, lambda.written, producer).await;
        }
        self.dispatch_writes(agent, report.written, Producer::Agent)
            .await;
        self.dispatch_all(agent, report.events).await;
    }
}

/// Whether `config.triggers.on_timer` is enabled with a target of `scope`, and that target.
fn timer_target(config: &Value, scope: Scope) -> Option<triggers::Target> {
    triggers::targets(config)
        .0
        .into_iter()
        .find(|t| t.kind == TriggerKind::OnTimer && t.scope == scope)
}

fn scope_includes(timer: &TimerRow, scope: &str) -> bool {
    timer
        .scope
        .as_array()
        .is_some_and(|items| items.iter().any(|s| s.as_str() == Some(scope)))
}

fn log(file: &mut AdfFile, level: &str, event: &str, message: &str, data: Option<&Value>) {
    log_from(file, "timer", level, event, message, data);
}

fn log_from(
    file: &mut AdfFile,
    origin: &str,
    level: &str,
    event: &str,
    message: &str,
    data: Option<&Value>,
) {
    let entry = NewLog {
        level,
        origin: Some(origin),
        event: Some(event),
        target: None,
        message,
        data,
        r#loop: None,
    };
    if let Err(error) = file.log(&entry) {
        tracing::warn!(%error, "cannot write a timer log row");
    }
}

/// The agent's next wake: the earliest live timer or the hibernate nudge (TRG-35). `None`
/// when the timers cannot be read. Starting a nudge count for an agent that has none yet is
/// this function's one write (meta [`nudge::META_KEY`]).
pub(crate) fn wake_of(file: &mut AdfFile) -> Option<Option<i64>> {
    let timers = match file.timers() {
        Ok(timers) => fire::next_wake(&timers),
        Err(error) => {
            tracing::warn!(%error, "cannot read timers");
            return None;
        }
    };
    let nudge = nudge_due(file, adf_store::time::now_ms()).map(|(at, _, _)| at);
    Some(timers.into_iter().chain(nudge).min())
}

/// When the hibernate nudge is due, with its interval and the `on_timer` agent target, if the
/// config calls for one.
fn nudge_due(file: &mut AdfFile, now: i64) -> Option<(i64, u64, triggers::Target)> {
    let config = file.config().ok()?;
    let (interval, target) = nudge::applies(&config)?;
    let last_nudge = file
        .meta_get(nudge::META_KEY)
        .ok()
        .flatten()
        .and_then(|m| m.value.trim().parse::<i64>().ok());
    let last_activity = file.last_loop_created_at().ok().flatten();
    match nudge::due_at(interval, last_nudge, last_activity) {
        Some(at) => Some((at, interval, target)),
        None => {
            // Nothing to count from: the count starts now, and is kept in the file so a
            // restart does not restart it.
            record_nudge(file, now);
            nudge::due_at(interval, Some(now), None).map(|at| (at, interval, target))
        }
    }
}

fn record_nudge(file: &mut AdfFile, now: i64) {
    let written = file.meta_set(
        Caller::Owner,
        nudge::META_KEY,
        &now.to_string(),
        Some(MetaProtection::None),
    );
    if let Err(error) = written {
        tracing::warn!(%error, "cannot record the hibernate nudge");
    }
}

/// Fires every timer of `file` due at `now`, in wake order, then the hibernate nudge when it is
/// due; runs on the agent's worker. With `queue_full`, fires are recorded but not delivered,
/// and a fire that expired its timer is re-armed (TRG-29).
fn fire_due(
    file: &mut AdfFile,
    scope: &TurnScope,
    registry: Arc<ToolRegistry>,
    now: i64,
    queue_full: bool,
) -> Vec<FireReport> {
    let agent: &Agent = &scope.agent;
    let timers = match file.timers() {
        Ok(timers) => timers,
        Err(error) => {
            tracing::warn!(%error, "cannot read timers");
            return Vec::new();
        }
    };
    let mut reports = Vec::new();
    for timer in timers.iter().filter(|t| fire::is_due(t, now)) {
        let update = match fire::fire(timer, now) {
            Ok(update) => update,
            Err(error) => {
                // An unreadable schedule would be due forever: expire it (kept as history)
                // and say why, instead of firing it in a hot loop.
                let data = json!({ "timer_id": timer.id });
                log(
                    file,
                    "error",
                    "timer_schedule_invalid",
                    &format!("timer {} has an unreadable schedule: {error}", timer.id),
                    Some(&data),
                );
                let _ignored = file.timer_record_fire(
                    timer.id,
                    timer.next_wake_at,
                    timer.run_count,
                    timer.last_fired_at.unwrap_or(now),
                    true,
                );
                continue;
            }
        };
        // §7.7: the fire is recorded before it is delivered.
        if let Err(error) = file.timer_record_fire(
            update.timer_id,
            update.next_wake_at,
            update.run_count,
            update.last_fired_at,
            update.expired,
        ) {
            tracing::warn!(timer = timer.id, %error, "cannot record a timer fire");
            continue;
        }
        if queue_full {
            // Undeliverable now: a fire that ended its timer must not be lost (TRG-29).
            if let Some(retry_at) = fire::rearm_after_drop(&update, now)
                && let Err(error) = file.timer_rearm(timer.id, retry_at)
            {
                tracing::warn!(timer = timer.id, %error, "cannot re-arm a dropped timer fire");
            }
            let mut report =
                FireReport::new(Some(timer.id), "none", update.run_count, timer.next_wake_at);
            report.dropped = true;
            reports.push(report);
            continue;
        }
        let config = match file.config() {
            Ok(config) => config,
            Err(error) => {
                tracing::warn!(%error, "cannot read the config");
                continue;
            }
        };
        let state = config
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or("active")
            .to_owned();
        let event = json!({
            "type": "on_timer",
            "timestamp": now,
            "data": {
                "timer_id": timer.id,
                "payload": timer.payload,
                "run_count": update.run_count,
                "scheduled_at": timer.next_wake_at,
            },
        });
        if scope_includes(timer, "system")
            && gating::allows(&state, Scope::System, TriggerKind::OnTimer)
            && let Some(target) = timer_target(&config, Scope::System)
        {
            let source = timer.lambda.clone().or(target.lambda.clone());
            let lambda = match source.as_deref().map(LambdaRef::parse) {
                Some(Ok(lambda)) => Some(lambda),
                Some(Err(error)) => {
                    log(file, "warn", "timer_lambda_invalid", &error.message, None);
                    None
                }
                None => {
                    log(
                        file,
                        "warn",
                        "timer_lambda_missing",
                        &format!("system-scope timer {} names no lambda", timer.id),
                        None,
                    );
                    None
                }
            };
            let mut report = FireReport::new(
                Some(timer.id),
                "system",
                update.run_count,
                timer.next_wake_at,
            );
            if let Some(lambda) = lambda {
                let producer = Producer::Lambda {
                    source: lambda.source(),
                };
                let (mut run, mut events) = observe(file, agent, producer, |file| {
                    run_system_lambda(
                        file,
                        Arc::clone(&registry),
                        lambda,
                        event.clone(),
                        timer.warm,
                    )
                });
                events.append(&mut run.call_events);
                report.lambda = Some(run);
                report.events = events;
            }
            reports.push(report);
        }
        if scope_includes(timer, "agent")
            && gating::allows(&state, Scope::Agent, TriggerKind::OnTimer)
            && timer_target(&config, Scope::Agent).is_some()
        {
            let loop_name = timer.r#loop.clone().unwrap_or_else(|| "main".to_owned());
            let text = timer
                .payload
                .clone()
                .unwrap_or_else(|| format!("Timer {} fired.", timer.id));
            let mut report = FireReport::new(
                Some(timer.id),
                "agent",
                update.run_count,
                timer.next_wake_at,
            );
            run_observed_turn(
                file,
                agent,
                &config,
                Arc::clone(&registry),
                &loop_name,
                Trigger::Event {
                    event_type: "on_timer".into(),
                    text,
                },
                scope,
                &mut report,
            );
            reports.push(report);
        }
    }
    if let Some((at, interval, target)) = nudge_due(file, now)
        && at <= now
    {
        // Recorded first, like a timer fire: a turn that fails is not retried at once.
        record_nudge(file, now);
        let hibernating = now - (at - i64::try_from(interval).unwrap_or(0));
        if let Ok(config) = file.config() {
            let mut report = FireReport::new(None, "agent", 0, at);
            run_observed_turn(
                file,
                agent,
                &config,
                Arc::clone(&registry),
                &target.loop_name,
                Trigger::Event {
                    event_type: "on_timer".into(),
                    text: nudge::message(hibernating),
                },
                scope,
                &mut report,
            );
            reports.push(report);
        }
    }
    reports
}

/// An agent-scope turn inside a fire: its writes, tool and model calls and new rows go into
/// `report` for their triggers. The outcome itself is in the file (transcript or a warn row).
#[allow(clippy::too_many_arguments)]
fn run_observed_turn(
    file: &mut AdfFile,
    agent: &Agent,
    config: &Value,
    registry: Arc<ToolRegistry>,
    loop_name: &str,
    trigger: Trigger,
    scope: &TurnScope,
    report: &mut FireReport,
) {
    let mut turn_events = Vec::new();
    let ((_outcome, written), events) = observe(file, agent, Producer::Agent, |file| {
        crate::dispatch::with_written_files(file, |file| {
            run_agent_turn(
                file,
                config,
                registry,
                loop_name,
                trigger,
                scope,
                &mut turn_events,
            )
        })
    });
    report.written = written;
    report.events = events;
    report.events.extend(turn_events);
}

fn current_thread() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => Some(runtime),
        Err(error) => {
            tracing::error!(%error, "cannot start a runtime for agent code");
            None
        }
    }
}

/// Runs a system-scope lambda with `input` on the worker thread; the authorization is the
/// lambda file's `authorized` flag. A failure is a `warn` log row, never a crash.
pub(crate) fn run_system_lambda(
    file: &mut AdfFile,
    registry: Arc<ToolRegistry>,
    lambda: LambdaRef,
    input: Value,
    warm: bool,
) -> LambdaReport {
    let started_at = adf_store::time::now_ms();
    let clock = Instant::now();
    let custom = Arc::new(crate::taps::CustomEvents::default());
    let sink: Arc<dyn adf_runtime::code::EventSink> = custom.clone();
    let mut calls = Vec::new();
    let (error, written) =
        crate::dispatch::with_written_files(file, |file| match current_thread() {
            None => Some("cannot start a runtime for agent code".to_owned()),
            Some(runtime) => runtime.block_on(async {
                let sandbox = match Sandbox::new(SandboxConfig::default()).await {
                    Ok(sandbox) => sandbox,
                    Err(error) => return Some(error.to_string()),
                };
                let env = CodeEnv::new(sandbox, registry).with_event_sink(sink);
                // The defaults: no shorter time limit, `loop_inject` straight into main.
                let options = RunOptions {
                    warm,
                    ..RunOptions::default()
                };
                let run = code::run_lambda(
                    file,
                    &env,
                    &lambda,
                    input,
                    Authorization::SourceFile,
                    &DenyAll,
                    &options,
                )
                .await;
                calls = run.calls;
                run.result
                    .err()
                    .map(|e| format!("{}: {}", e.code, e.message))
            }),
        });
    if let Some(message) = &error {
        let data = json!({ "lambda": lambda.source() });
        log(file, "warn", "lambda_error", message, Some(&data));
    }
    let call_events = call_events(&lambda.source(), calls);
    LambdaReport {
        lambda,
        started_at,
        duration_ms: clock.elapsed().as_secs_f64() * 1000.0,
        error,
        written,
        custom: custom.take(),
        call_events,
    }
}

/// The lambda's `adf.*` calls as `on_tool_call` (TRG-17) and `on_llm_call` (TRG-01, source
/// `model_invoke`) events, at most [`TURN_EVENT_LIMIT`].
fn call_events(source: &str, calls: Vec<adf_runtime::code::CallRecord>) -> Vec<TriggerEvent> {
    use adf_runtime::code::CallRecord;
    let producer = Producer::Lambda {
        source: source.to_owned(),
    };
    let now = adf_store::time::now_ms();
    calls
        .into_iter()
        .take(TURN_EVENT_LIMIT)
        .map(|call| {
            let (kind, data) = match call {
                CallRecord::Tool { tool, status } => (
                    TriggerKind::OnToolCall,
                    json!({ "tool": tool, "status": status, "lambda": source }),
                ),
                CallRecord::Model {
                    provider,
                    model,
                    input_tokens,
                    output_tokens,
                    ok,
                } => (
                    TriggerKind::OnLlmCall,
                    json!({
                        "source": "model_invoke",
                        "provider": provider,
                        "model": model,
                        "input_tokens": input_tokens,
                        "output_tokens": output_tokens,
                        "ok": ok,
                        "lambda": source,
                    }),
                ),
            };
            TriggerEvent::new(kind, now, data).produced_by(producer.clone())
        })
        .collect()
}

/// Most tool and model call events one turn records; a longer turn's extra calls are not
/// trigger events (the turn itself is bounded by its steps, this bounds the memory).
const TURN_EVENT_LIMIT: usize = 1024;

/// The owner's side of a daemon turn: approvals and `ask` answers wait for the owner through
/// the HTTP API ([`Owner`], `hil.rs`). It also records each finished tool call
/// (`on_tool_call`, TRG-17: completed, failed, or denied — a denial is an error result
/// starting `DENIED`) and each model response (`on_llm_call`, TRG-01: `source` `turn`, or
/// `compaction` for the summary call) as trigger events, dispatched after the turn's job.
/// `loop` in those events is the loop that started the job (the wakes it served share it).
struct Recorder<'a> {
    provider: String,
    model: String,
    loop_name: String,
    events: Mutex<Vec<TriggerEvent>>,
    owner: Owner<'a>,
}

impl Recorder<'_> {
    fn push(&self, kind: TriggerKind, data: Value) {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if events.len() < TURN_EVENT_LIMIT {
            events.push(
                TriggerEvent::new(kind, adf_store::time::now_ms(), data)
                    .produced_by(Producer::Agent),
            );
        }
    }

    fn llm_call(&self, source: &str, usage: Option<&adf_providers::Usage>) {
        let mut data = json!({
            "source": source,
            "provider": self.provider,
            "model": self.model,
            "loop": self.loop_name,
        });
        if let Some(usage) = usage {
            data["input_tokens"] = json!(usage.prompt_tokens());
            data["output_tokens"] = json!(usage.output);
        }
        self.push(TriggerKind::OnLlmCall, data);
    }
}

impl TurnHost for Recorder<'_> {
    fn approver(&self) -> &dyn Approver {
        &self.owner
    }

    /// Without the file (a caller that cannot lend it) nobody can answer.
    fn answer(&self, _question: &str) -> Option<String> {
        None
    }

    fn answer_holding(&self, file: &mut AdfFile, question: &str) -> Option<String> {
        self.owner.ask(file, question)
    }

    fn event(&self, event: &TurnEvent<'_>) {
        match event {
            TurnEvent::ToolResult {
                call,
                content,
                is_error,
            } => {
                let status = match (*is_error, content.starts_with("DENIED")) {
                    (false, _) => "completed",
                    (true, true) => "denied",
                    (true, false) => "failed",
                };
                self.push(
                    TriggerKind::OnToolCall,
                    json!({
                        "tool": call.name,
                        "call_id": call.id,
                        "status": status,
                        "loop": self.loop_name,
                    }),
                );
            }
            TurnEvent::Reply(reply) => self.llm_call("turn", Some(&reply.usage)),
            TurnEvent::Compacted(_) => self.llm_call("compaction", None),
            _ => {}
        }
    }
}

/// Runs one executor turn on `loop_name` started by `trigger`, then the `loop_send` wakes it
/// causes (see [`run_agent_turns`]); the result is the first turn's reply.
pub(crate) fn run_agent_turn(
    file: &mut AdfFile,
    config: &Value,
    registry: Arc<ToolRegistry>,
    loop_name: &str,
    trigger: Trigger,
    scope: &TurnScope,
    events: &mut Vec<TriggerEvent>,
) -> Result<String, String> {
    let turns = vec![(loop_name.to_owned(), trigger)];
    run_agent_turns(file, config, registry, turns, scope, events)
        .into_iter()
        .next()
        .map_or_else(|| Err("the turn did not run".to_owned()), |(_, r)| r)
}

/// Runs `turns` side by side through a [`LoopPool`] (one round), then the rounds of wakes
/// they cause (`loop_send` with `wake: true`, served one round after another). When no model
/// can be reached (no provider configured, no key) it writes a `warn` row `turn_skipped` and
/// returns the reason for each turn; a failed turn is a `warn` row `trigger_turn_failed`.
/// `POST /abort` cancels the whole job at its next await: its checkpoint stays
/// `in_progress`, so the next session of the loop recovers it without replay (an `info` row
/// `turn_aborted` says so). Never panics. Tool and model calls are appended to `events`.
pub(crate) fn run_agent_turns(
    file: &mut AdfFile,
    config: &Value,
    registry: Arc<ToolRegistry>,
    turns: Vec<(String, Trigger)>,
    scope: &TurnScope,
    events: &mut Vec<TriggerEvent>,
) -> Vec<(String, Result<String, String>)> {
    let Some((first_loop, first_trigger)) = turns.first().cloned() else {
        return Vec::new();
    };
    let event_type = match &first_trigger {
        Trigger::Owner(_) => "chat".to_owned(),
        Trigger::Event { event_type, .. } | Trigger::Wake { event_type } => event_type.clone(),
    };
    let data = json!({ "trigger": event_type, "loop": first_loop });
    let every = |message: &str| -> Vec<(String, Result<String, String>)> {
        turns
            .iter()
            .map(|(name, _)| (name.clone(), Err(message.to_owned())))
            .collect()
    };
    let retries = RetryLog::default();
    let resolved = match Resolver::new()
        .with_retry_observer(retries.observer())
        .resolve(config, None)
    {
        Ok(resolved) => resolved,
        Err(error) => {
            let message = format!("no model turn for {event_type}: {error}");
            log_from(
                file,
                "executor",
                "warn",
                "turn_skipped",
                &message,
                Some(&data),
            );
            return every(&message);
        }
    };
    let custom = Arc::new(crate::taps::CustomEvents::default());
    let executor = Executor::from_resolved(resolved, retries)
        .with_registry(registry)
        .with_event_sink(custom.clone());
    let Some(runtime) = current_thread() else {
        return every("cannot start a runtime for the turn");
    };
    let text = |pointer: &str| {
        config
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let abort = Arc::clone(scope.abort());
    let host = Recorder {
        provider: text("/model/provider"),
        model: text("/model/model_id"),
        loop_name: first_loop.clone(),
        events: Mutex::new(Vec::new()),
        owner: Owner { scope },
    };
    let outcome = runtime.block_on(async {
        let mut pool = LoopPool::new();
        tokio::select! {
            biased;
            () = abort.aborted() => None,
            results = pool.run_many(&executor, file, turns.clone(), &host) => Some(results),
        }
    });
    events.extend(
        host.events
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner),
    );
    // `emit_event` from the turn's code (`sys_code`, `sys_lambda`): on the bus after the
    // calls that made them, with the turn's other events.
    for event in custom.take() {
        scope.emit(&event.event_type, event.payload);
    }
    let results = match outcome {
        None => {
            // Cancelled between two awaits: no store step is half done, but a tool call's
            // transaction could be open if code was running.
            if let Err(error) = file.rollback_open_transaction() {
                tracing::warn!(%error, "cannot roll back an aborted turn");
            }
            let message = "the owner aborted the turn; it is recovered (not replayed) when the loop runs next";
            log_from(
                file,
                "executor",
                "info",
                "turn_aborted",
                message,
                Some(&data),
            );
            return every(message);
        }
        Some(Err(error)) => {
            let message = error.to_string();
            log_from(
                file,
                "executor",
                "warn",
                "trigger_turn_failed",
                &message,
                Some(&data),
            );
            return every(&message);
        }
        Some(Ok(results)) => results,
    };
    results
        .into_iter()
        .map(|(name, outcome)| {
            let result = match outcome {
                Ok(outcome) => {
                    if outcome.end == TurnEnd::Suspended {
                        scope.emit(
                            "suspend.requested",
                            json!({ "reason": "max_active_turns", "loop": name }),
                        );
                    }
                    Ok(outcome.reply)
                }
                Err(error) => {
                    let message = error.to_string();
                    let data = json!({ "trigger": event_type, "loop": name });
                    log_from(
                        file,
                        "executor",
                        "warn",
                        "trigger_turn_failed",
                        &message,
                        Some(&data),
                    );
                    Err(message)
                }
            };
            (name, result)
        })
        .collect()
}
