//! The timer scheduler (spec §7.6, §7.7): one task for every loaded agent, sleeping until the
//! earliest `next_wake_at` among them.
//!
//! No polling: the task keeps, per agent, the earliest wake time of its live timers (one
//! integer per agent with timers, nothing for an agent without), sleeps until the smallest, and
//! is woken early only by `rearm` — called when an agent loads, when a timer
//! is added or deleted through the API, and after every fire (a lambda or turn may have set or
//! deleted timers through its tools).
//!
//! Each wake time is read inside a job of its agent and numbered in read order (`WakeRead`);
//! the map keeps the newest read, so a read published late (a handler's, the watcher's) never
//! undoes a later one — an older "no timer" read would otherwise clear the wake of a timer added
//! meanwhile, and it would never fire.
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
//! A system lambda runs inside the fire job, on a current-thread tokio runtime on the worker
//! thread, because it needs the `&mut AdfFile` across awaits (bounded by its time limit); an
//! agent-scope turn runs after the job as a turn job of its own (`turns::run_observed_turn`),
//! which holds the file only for its steps, so the agent's timers keep firing while it waits
//! for its model or its owner. Events (`timer.fired`, `lambda.started`, `lambda.completed`)
//! are published after the job, since publishing may itself need the worker (the `seq` block
//! write).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use adf_runtime::code::LambdaRef;
use adf_runtime::executor::Trigger;
use adf_runtime::tools::ToolRegistry;
use adf_runtime::triggers::{
    self, Producer, Scope, TriggerEvent, TriggerKind, fire, gating, nudge,
};
use adf_store::{AdfFile, TimerRow};

use crate::dispatch::sweeper;
use crate::hub::Hub;
use crate::lambdas::{LambdaReport, observe_serving, run_system_lambda};
use crate::registry::Agent;
use crate::support::log_from;

mod wakes;

pub(crate) use wakes::{TimerWakes, WakeRead, wake_of};
use wakes::{nudge_due, record_nudge};

/// An agent-scope delivery the fire job recorded, run as a turn job after it.
struct PendingTurn {
    report: FireReport,
    loop_name: String,
    trigger: Trigger,
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
    /// Files an agent-scope turn wrote or deleted (a lambda's are in its report).
    written: crate::support::FileChanges,
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

/// Starts the scheduler task once (the first agent load does it, inside the runtime).
pub(crate) fn ensure_started(hub: &Arc<Hub>) {
    if hub.timer_wakes().started.swap(true, Ordering::SeqCst) {
        return;
    }
    let hub = Arc::clone(hub);
    tokio::spawn(async move { scheduler_loop(&hub).await });
}

/// The next wake time the scheduler holds for an agent (`None`: no live timer).
pub(crate) fn next_wake(hub: &Arc<Hub>, agent_id: &str) -> Option<i64> {
    hub.timer_wakes().of(agent_id)
}

pub(crate) fn forget(hub: &Arc<Hub>, agent_id: &str) {
    hub.timer_wakes().remove(agent_id);
}

async fn scheduler_loop(hub: &Arc<Hub>) {
    let mut shutdown = hub.shutdown_signal();
    loop {
        if *shutdown.borrow() {
            return;
        }
        // `notified()` is created before reading the earliest time, and `notify_one`
        // stores a permit when nobody waits, so a re-arm between the two is never lost.
        let bell = hub.timer_wakes().bell.notified();
        let sleep = hub.timer_wakes().earliest().map(|at| {
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
        for id in hub.timer_wakes().take_due(adf_store::time::now_ms()) {
            let Ok(agent) = hub.agent(&id) else { continue };
            let hub = Arc::clone(hub);
            // Each agent fires on its own task: a slow lambda on one agent never delays
            // another agent's timers.
            tokio::spawn(async move { fire_agent(&hub, agent).await });
        }
    }
}

async fn fire_agent(hub: &Arc<Hub>, agent: Arc<Agent>) {
    // A lambda or turn may change the config; trigger targets are read again after.
    agent.triggers().invalidate();
    let registry = hub.tools();
    // A timer fire is one of the agent's deliveries: when its bounded queue is full the
    // fire is dropped like any other delivery (and a `once` fire re-armed, TRG-29), so a
    // saturated agent is not handed more work than its bound.
    let queue_full = agent.triggers().is_full();
    let observer = Arc::clone(&agent);
    let fired = agent
        .store()
        .run(move |file| {
            Ok(fire_due(
                file,
                &observer,
                registry,
                adf_store::time::now_ms(),
                queue_full,
            ))
        })
        .await;
    match fired {
        Ok((reports, turns)) => {
            let dropped = reports.iter().filter(|r| r.dropped).count() as u64;
            if dropped > 0 {
                agent.triggers().count_dropped(dropped);
            }
            for report in reports {
                publish_fire(hub, &agent, report).await;
            }
            // The next wake is armed after the turns: an agent-scope timer never piles up
            // turns faster than they run (its system timers wait for them meanwhile).
            for PendingTurn {
                mut report,
                loop_name,
                trigger,
            } in turns
            {
                (report.written, report.events) =
                    crate::turns::run_observed_turn(hub, &agent, loop_name, trigger).await;
                agent.triggers().invalidate();
                publish_fire(hub, &agent, report).await;
            }
        }
        Err(error) => tracing::warn!(agent = %agent.id, %error, "timer fire failed"),
    }
    hub.timer_wakes().rearm(&agent).await;
}

async fn publish_fire(hub: &Arc<Hub>, agent: &Arc<Agent>, report: FireReport) {
    if let Some(timer_id) = report.timer_id {
        hub.emit(
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
        crate::dispatch::publish_lambda(hub, agent, &lambda, "on_timer").await;
        let producer = Producer::Lambda {
            source: lambda.lambda.source(),
        };
        crate::dispatch::dispatch_writes(hub, agent, lambda.written, producer).await;
    }
    crate::dispatch::dispatch_writes(hub, agent, report.written, Producer::Agent).await;
    crate::dispatch::dispatch_all(hub, agent, report.events).await;
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

/// Fires every timer of `file` due at `now`, in wake order, then the hibernate nudge when it is
/// due; runs on the agent's worker. With `queue_full`, fires are recorded but not delivered,
/// and a fire that expired its timer is re-armed (TRG-29).
fn fire_due(
    file: &mut AdfFile,
    agent: &Arc<Agent>,
    registry: Arc<ToolRegistry>,
    now: i64,
    queue_full: bool,
) -> (Vec<FireReport>, Vec<PendingTurn>) {
    let timers = match file.timers() {
        Ok(timers) => timers,
        Err(error) => {
            tracing::warn!(%error, "cannot read timers");
            return (Vec::new(), Vec::new());
        }
    };
    let mut reports = Vec::new();
    let mut turns = Vec::new();
    for timer in timers.iter().filter(|t| fire::is_due(t, now)) {
        let Some(update) = record_fire(file, timer, now) else {
            continue;
        };
        if queue_full {
            reports.push(drop_fire(file, timer, &update, now));
            continue;
        }
        let config = match file.config() {
            Ok(config) => config,
            Err(error) => {
                tracing::warn!(%error, "cannot read the config");
                continue;
            }
        };
        let fired = Fired {
            timer,
            update: &update,
            now,
            config: &config,
        };
        reports.extend(deliver_system_scope(file, agent, &registry, &fired));
        turns.extend(deliver_agent_scope(&fired));
    }
    turns.extend(fire_nudge(file, now));
    (reports, turns)
}

/// One recorded fire on its way to delivery.
struct Fired<'a> {
    timer: &'a TimerRow,
    update: &'a fire::TimerFire,
    now: i64,
    config: &'a Value,
}

impl Fired<'_> {
    fn state(&self) -> &str {
        self.config
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or("active")
    }

    fn report(&self, scope: &'static str) -> FireReport {
        FireReport::new(
            Some(self.timer.id),
            scope,
            self.update.run_count,
            self.timer.next_wake_at,
        )
    }

    /// The lambda's input: `{type: "on_timer", timestamp, data}`.
    fn event(&self) -> Value {
        json!({
            "type": "on_timer",
            "timestamp": self.now,
            "data": {
                "timer_id": self.timer.id,
                "payload": self.timer.payload,
                "run_count": self.update.run_count,
                "scheduled_at": self.timer.next_wake_at,
            },
        })
    }
}

/// §7.7: records the fire before it is delivered. An unreadable schedule would be due forever:
/// it is expired (kept as history) with an `error` row saying why, instead of firing in a hot
/// loop. `None` when there is nothing to deliver.
fn record_fire(file: &mut AdfFile, timer: &TimerRow, now: i64) -> Option<fire::TimerFire> {
    let update = match fire::fire(timer, now) {
        Ok(update) => update,
        Err(error) => {
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
            return None;
        }
    };
    if let Err(error) = file.timer_record_fire(
        update.timer_id,
        update.next_wake_at,
        update.run_count,
        update.last_fired_at,
        update.expired,
    ) {
        tracing::warn!(timer = timer.id, %error, "cannot record a timer fire");
        return None;
    }
    Some(update)
}

/// A fire the full queue cannot take: a fire that ended its timer must not be lost (TRG-29).
fn drop_fire(
    file: &mut AdfFile,
    timer: &TimerRow,
    update: &fire::TimerFire,
    now: i64,
) -> FireReport {
    if let Some(retry_at) = fire::rearm_after_drop(update, now)
        && let Err(error) = file.timer_rearm(timer.id, retry_at)
    {
        tracing::warn!(timer = timer.id, %error, "cannot re-arm a dropped timer fire");
    }
    let mut report = FireReport::new(Some(timer.id), "none", update.run_count, timer.next_wake_at);
    report.dropped = true;
    report
}

/// The system-scope delivery: the timer's lambda (or the first system target's) on the code
/// path, when the timer's scope, the `on_timer` targets and the state allow it.
fn deliver_system_scope(
    file: &mut AdfFile,
    agent: &Arc<Agent>,
    registry: &Arc<ToolRegistry>,
    fired: &Fired<'_>,
) -> Option<FireReport> {
    let timer = fired.timer;
    if !scope_includes(timer, "system")
        || !gating::allows(fired.state(), Scope::System, TriggerKind::OnTimer)
    {
        return None;
    }
    let target = timer_target(fired.config, Scope::System)?;
    let source = timer.lambda.clone().or(target.lambda.clone());
    // A `.sh` lambda runs headlessly through adf_shell with the event as variables.
    if let Some(script) = source.as_deref().filter(|s| s.ends_with(".sh")) {
        let mut report = fired.report("system");
        let command = format!("./{}", script.trim_start_matches("./"));
        let producer = Producer::Lambda {
            source: script.to_owned(),
        };
        let label = format!("timer:{}", timer.id);
        let observed = observe_serving(file, producer, sweeper(agent), |file, queue| {
            crate::shell_runs::run(file, registry, &label, &command, &fired.event(), queue)
        });
        report.written = observed.written;
        report.events = observed.events;
        return Some(report);
    }
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
    let mut report = fired.report("system");
    if let Some(lambda) = lambda {
        let mut run = run_system_lambda(
            file,
            sweeper(agent),
            Arc::clone(registry),
            lambda,
            fired.event(),
            timer.warm,
        );
        report.events = std::mem::take(&mut run.events);
        report.lambda = Some(run);
    }
    Some(report)
}

/// The agent-scope delivery: a turn on the timer's loop (`main` when none) with the payload as
/// the message, when the timer's scope, the `on_timer` targets and the state allow it; the
/// turn runs after the fire job.
fn deliver_agent_scope(fired: &Fired<'_>) -> Option<PendingTurn> {
    let timer = fired.timer;
    if !scope_includes(timer, "agent")
        || !gating::allows(fired.state(), Scope::Agent, TriggerKind::OnTimer)
        || timer_target(fired.config, Scope::Agent).is_none()
    {
        return None;
    }
    let text = timer
        .payload
        .clone()
        .unwrap_or_else(|| format!("Timer {} fired.", timer.id));
    Some(PendingTurn {
        report: fired.report("agent"),
        loop_name: timer.r#loop.clone().unwrap_or_else(|| "main".to_owned()),
        trigger: Trigger::Event {
            event_type: "on_timer".into(),
            text,
        },
    })
}

/// The hibernate nudge (TRG-35), when due: recorded first, like a timer fire, so a turn that
/// fails is not retried at once; the turn runs after the fire job.
fn fire_nudge(file: &mut AdfFile, now: i64) -> Option<PendingTurn> {
    let (at, interval, target) = nudge_due(file, now)?;
    if at > now {
        return None;
    }
    record_nudge(file, now);
    let hibernating = now - (at - i64::try_from(interval).unwrap_or(0));
    Some(PendingTurn {
        report: FireReport::new(None, "agent", 0, at),
        loop_name: target.loop_name,
        trigger: Trigger::Event {
            event_type: "on_timer".into(),
            text: nudge::message(hibernating),
        },
    })
}
