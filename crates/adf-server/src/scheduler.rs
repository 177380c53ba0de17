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

use adf_runtime::code::{
    self, Authorization, CodeEnv, InjectMode, LambdaRef, RunOptions, Sandbox, SandboxConfig,
};
use adf_runtime::executor::{Executor, RetryLog, Trigger, TurnHost};
use adf_runtime::providers::Resolver;
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{Approver, ToolRegistry};
use adf_runtime::triggers::{self, Producer, Scope, TriggerKind, fire, gating};
use adf_store::{AdfFile, NewLog, TimerRow};

use crate::daemon::{Agent, Daemon};

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
    timer_id: i64,
    scope: &'static str,
    run_count: i64,
    scheduled_at: i64,
    lambda: Option<LambdaReport>,
}

#[derive(Debug, Clone)]
pub(crate) struct LambdaReport {
    pub(crate) lambda: LambdaRef,
    pub(crate) started_at: i64,
    pub(crate) duration_ms: f64,
    pub(crate) error: Option<String>,
    /// Files the run created or changed (path, size), for `on_file_change`.
    pub(crate) written: Vec<(String, i64)>,
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

    /// Re-reads `agent`'s timers and wakes the scheduler, so a new, changed or deleted timer
    /// moves the next wake-up. Cheap: one indexed read on the agent's worker.
    pub async fn rearm_timers(&self, agent: &Agent) {
        let next = agent
            .store()
            .run(|file| Ok(fire::next_wake(&file.timers()?)))
            .await;
        match next {
            Ok(next) => self.timer_wakes().set(&agent.id, next),
            Err(error) => {
                tracing::warn!(agent = %agent.id, %error, "cannot read timers");
                self.timer_wakes().set(&agent.id, None);
            }
        }
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
        let reports = agent
            .store()
            .run(move |file| Ok(fire_due(file, registry, adf_store::time::now_ms())))
            .await;
        match reports {
            Ok(reports) => {
                for report in reports {
                    self.publish_fire(&agent, report).await;
                }
            }
            Err(error) => tracing::warn!(agent = %agent.id, %error, "timer fire failed"),
        }
        self.rearm_timers(&agent).await;
    }

    async fn publish_fire(&self, agent: &Arc<Agent>, report: FireReport) {
        self.emit(
            agent,
            "timer.fired",
            "system:timer",
            json!({
                "timer_id": report.timer_id,
                "scope": report.scope,
                "run_count": report.run_count,
                "scheduled_at": report.scheduled_at,
            }),
        )
        .await;
        if let Some(lambda) = report.lambda {
            self.publish_lambda(agent, &lambda, "on_timer").await;
            let producer = Producer::Lambda {
                source: lambda.lambda.source(),
            };
            self.dispatch_writes(agent, lambda.written, producer).await;
        }
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

/// Fires every timer of `file` due at `now`, in wake order; runs on the agent's worker.
fn fire_due(file: &mut AdfFile, registry: Arc<ToolRegistry>, now: i64) -> Vec<FireReport> {
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
            let lambda = lambda.map(|lambda| {
                run_system_lambda(
                    file,
                    Arc::clone(&registry),
                    lambda,
                    event.clone(),
                    timer.warm,
                )
            });
            reports.push(FireReport {
                timer_id: timer.id,
                scope: "system",
                run_count: update.run_count,
                scheduled_at: timer.next_wake_at,
                lambda,
            });
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
            // The outcome is in the file (transcript or a warn row); nothing more to report.
            let _outcome = run_agent_turn(
                file,
                &config,
                Arc::clone(&registry),
                &loop_name,
                Trigger::Event {
                    event_type: "on_timer".into(),
                    text,
                },
            );
            reports.push(FireReport {
                timer_id: timer.id,
                scope: "agent",
                run_count: update.run_count,
                scheduled_at: timer.next_wake_at,
                lambda: None,
            });
        }
    }
    reports
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
    let (error, written) =
        crate::dispatch::with_written_files(file, |file| match current_thread() {
            None => Some("cannot start a runtime for agent code".to_owned()),
            Some(runtime) => runtime.block_on(async {
                let sandbox = match Sandbox::new(SandboxConfig::default()).await {
                    Ok(sandbox) => sandbox,
                    Err(error) => return Some(error.to_string()),
                };
                let env = CodeEnv::new(sandbox, registry);
                let options = RunOptions {
                    warm,
                    timeout: None,
                    inject: InjectMode::Immediate {
                        loop_name: "main".into(),
                    },
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
                run.result
                    .err()
                    .map(|e| format!("{}: {}", e.code, e.message))
            }),
        });
    if let Some(message) = &error {
        let data = json!({ "lambda": lambda.source() });
        log(file, "warn", "lambda_error", message, Some(&data));
    }
    LambdaReport {
        lambda,
        started_at,
        duration_ms: clock.elapsed().as_secs_f64() * 1000.0,
        error,
        written,
    }
}

/// The owner's side of a turn nobody watches: restricted calls are denied, `ask` has no
/// answer (the model is told so).
struct Unattended;

impl TurnHost for Unattended {
    fn approver(&self) -> &dyn Approver {
        &DenyAll
    }

    fn answer(&self, _question: &str) -> Option<String> {
        None
    }
}

/// Runs one executor turn on `loop_name` started by `trigger`. When no model can be reached
/// (no provider configured, no key) it writes a `warn` row `turn_skipped` and returns the
/// reason; a failed turn is a `warn` row `trigger_turn_failed`. Never panics.
pub(crate) fn run_agent_turn(
    file: &mut AdfFile,
    config: &Value,
    registry: Arc<ToolRegistry>,
    loop_name: &str,
    trigger: Trigger,
) -> Result<String, String> {
    let event_type = match &trigger {
        Trigger::Owner(_) => "chat".to_owned(),
        Trigger::Event { event_type, .. } | Trigger::Wake { event_type } => event_type.clone(),
    };
    let data = json!({ "trigger": event_type, "loop": loop_name });
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
            return Err(message);
        }
    };
    let executor = Executor::from_resolved(resolved, retries).with_registry(registry);
    let Some(runtime) = current_thread() else {
        return Err("cannot start a runtime for the turn".into());
    };
    let outcome = runtime.block_on(async {
        let mut session = executor.open_session(file, loop_name)?;
        executor
            .run_turn(file, &mut session, trigger, &Unattended)
            .await
    });
    match outcome {
        Ok(outcome) => Ok(outcome.reply),
        Err(error) => {
            let message = error.to_string();
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
    }
}
