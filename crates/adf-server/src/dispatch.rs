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
//! (an idle agent has no task). Each delivery is one job on the agent's store worker, so other
//! requests to the agent interleave between deliveries: a burst delays a concurrent request by
//! at most one lambda run, and never touches another agent.
//!
//! Events produced by agent code: after a lambda or a turn, the files it wrote (an `updated_at`
//! snapshot diff, taken in the same job) become `on_file_change` events with
//! `Producer::Lambda { source }` (or `Producer::Agent` for a turn), so `filter::accepts` keeps
//! a handler from receiving its own writes and `include_self` works.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};

use adf_runtime::code::LambdaRef;
use adf_runtime::executor::Trigger;
use adf_runtime::triggers::{
    self, Producer, Scope, Target, TriggerEvent, TriggerKind, filter, gating, message, timing,
};
use adf_store::AdfFile;

use crate::daemon::{Agent, Daemon};
use crate::scheduler::{LambdaReport, run_agent_turn, run_system_lambda};

/// Most deliveries one agent's trigger queue holds; beyond it deliveries are dropped.
pub const QUEUE_CAPACITY: usize = 256;

/// One target's events, ready to run.
#[derive(Debug)]
struct Delivery {
    target: Target,
    events: Vec<TriggerEvent>,
}

/// The parsed targets and stored state, cached until the config may have changed.
#[derive(Debug)]
struct Cached {
    targets: Vec<Target>,
    state: String,
}

#[derive(Debug, Default)]
struct QueueState {
    pending: VecDeque<Delivery>,
    draining: bool,
    dropped: u64,
    dropped_unlogged: u64,
    delivered: u64,
    high_water: usize,
    windows: HashMap<(TriggerKind, usize), timing::Window>,
    flushing: HashSet<(TriggerKind, usize)>,
    cached: Option<Arc<Cached>>,
}

/// One agent's trigger queue (see the module docs for the bound).
#[derive(Debug, Default)]
pub struct TriggerQueue {
    state: Mutex<QueueState>,
}

/// Counters of a [`TriggerQueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    /// Deliveries waiting now.
    pub len: usize,
    pub capacity: usize,
    /// The most deliveries ever waiting at once (never above `capacity`).
    pub high_water: usize,
    pub dropped: u64,
    pub delivered: u64,
    /// Whether a task is draining the queue.
    pub draining: bool,
}

impl TriggerQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn stats(&self) -> QueueStats {
        let state = self.lock();
        QueueStats {
            len: state.pending.len(),
            capacity: QUEUE_CAPACITY,
            high_water: state.high_water,
            dropped: state.dropped,
            delivered: state.delivered,
            draining: state.draining,
        }
    }

    /// Forgets the cached targets (the config changed or may have).
    pub(crate) fn invalidate(&self) {
        self.lock().cached = None;
    }
}

impl Daemon {
    /// Dispatches `event` to `agent`'s trigger targets. Never blocks on the handlers: matching
    /// deliveries are queued (or dropped when the queue is full) and run in the background.
    pub async fn dispatch(&self, agent: &Arc<Agent>, event: TriggerEvent) {
        let Some(cached) = self.cached_targets(agent).await else {
            return;
        };
        let now = adf_store::time::now_ms();
        for target in cached.targets.iter().filter(|t| t.kind == event.kind) {
            if !gating::allows(&cached.state, target.scope, event.kind)
                || !filter::accepts(target, &event)
            {
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
                self.enqueue(
                    agent,
                    Delivery {
                        target: target.clone(),
                        events,
                    },
                );
            }
            if flush_at.is_some() {
                self.spawn_flush(agent, target.clone());
            }
        }
    }

    /// The agent's targets and state, read once and kept until the config changes.
    async fn cached_targets(&self, agent: &Agent) -> Option<Arc<Cached>> {
        if let Some(cached) = agent.triggers().lock().cached.clone() {
            return Some(cached);
        }
        let config = match agent.store().run(|file| file.config()).await {
            Ok(config) => config,
            Err(error) => {
                tracing::warn!(agent = %agent.id, %error, "cannot read the config for triggers");
                return None;
            }
        };
        let cached = Arc::new(Cached {
            targets: triggers::targets(&config).0,
            state: config
                .get("state")
                .and_then(Value::as_str)
                .unwrap_or("active")
                .to_owned(),
        });
        agent.triggers().lock().cached = Some(Arc::clone(&cached));
        Some(cached)
    }

    /// Sleeps until the window's deadline (which a debounce may push back) and queues what is
    /// then due. One flush task per windowed target, only while it holds events.
    fn spawn_flush(&self, agent: &Arc<Agent>, target: Target) {
        let daemon = self.clone();
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
                    daemon.enqueue(
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

    fn enqueue(&self, agent: &Arc<Agent>, delivery: Delivery) {
        let start = {
            let mut state = agent.triggers().lock();
            if state.pending.len() >= QUEUE_CAPACITY {
                state.dropped += 1;
                state.dropped_unlogged += 1;
                return;
            }
            state.pending.push_back(delivery);
            state.high_water = state.high_water.max(state.pending.len());
            !std::mem::replace(&mut state.draining, true)
        };
        if start {
            let daemon = self.clone();
            let agent = Arc::clone(agent);
            tokio::spawn(async move { daemon.drain(agent).await });
        }
    }

    async fn drain(&self, agent: Arc<Agent>) {
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
                    self.log_dropped(&agent, dropped).await;
                }
                return;
            };
            self.deliver(&agent, delivery).await;
            agent.triggers().lock().delivered += 1;
        }
    }

    async fn log_dropped(&self, agent: &Agent, dropped: u64) {
        let result = agent
            .store()
            .run(move |file| {
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

    async fn deliver(&self, agent: &Arc<Agent>, delivery: Delivery) {
        let registry = self.tools();
        let kind = delivery.target.kind;
        let outcome = match delivery.target.scope {
            Scope::System => {
                let Some(source) = delivery.target.lambda.clone() else {
                    // `command` targets (shell) are not run by this daemon yet.
                    tracing::debug!(agent = %agent.id, "system target without lambda skipped");
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
                        let (report, written) = with_written_files(file, |file| {
                            run_system_lambda(file, registry, lambda, input, warm)
                        });
                        Ok((Some(report), written, producer))
                    })
                    .await
            }
            Scope::Agent => {
                let loop_name = delivery.target.loop_name.clone();
                let text = message::format(&delivery.events);
                agent
                    .store()
                    .run(move |file| {
                        let config = file.config()?;
                        let trigger = Trigger::Event {
                            event_type: kind.as_str().to_owned(),
                            text,
                        };
                        let (_outcome, written) = with_written_files(file, |file| {
                            run_agent_turn(file, &config, registry, &loop_name, trigger)
                        });
                        Ok((None, written, Producer::Agent))
                    })
                    .await
            }
        };
        // The handler may have changed the config (targets, state).
        agent.triggers().invalidate();
        match outcome {
            Ok((report, written, producer)) => {
                if let Some(report) = report {
                    self.publish_lambda(agent, &report, kind.as_str()).await;
                }
                self.dispatch_writes(agent, written, producer).await;
            }
            Err(error) => tracing::warn!(agent = %agent.id, %error, "trigger delivery failed"),
        }
    }

    /// `lambda.started` / `lambda.completed` for a system-scope run.
    pub(crate) async fn publish_lambda(&self, agent: &Agent, report: &LambdaReport, trigger: &str) {
        let source = format!("lambda:{}", report.lambda.source());
        let base = json!({
            "lambda_path": report.lambda.path,
            "function_name": report.lambda.function,
            "kind": "system_scope",
            "trigger": trigger,
            "started_at": report.started_at,
        });
        self.emit(agent, "lambda.started", &source, base.clone())
            .await;
        let mut done = base;
        done["duration_ms"] = json!(report.duration_ms);
        if let Some(error) = &report.error {
            done["error"] = json!(error);
        }
        self.emit(agent, "lambda.completed", &source, done).await;
    }

    /// Files written by agent code become `file.written` events and `on_file_change`
    /// triggers carrying who wrote them.
    pub(crate) async fn dispatch_writes(
        &self,
        agent: &Arc<Agent>,
        written: Vec<(String, i64)>,
        producer: Producer,
    ) {
        let source = match &producer {
            Producer::Lambda { source } => format!("lambda:{source}"),
            Producer::Agent => "agent".to_owned(),
            Producer::External => "system:daemon".to_owned(),
        };
        for (path, bytes) in written {
            self.emit(
                agent,
                "file.written",
                &source,
                json!({ "path": path, "bytes": bytes }),
            )
            .await;
            let event = TriggerEvent::new(
                TriggerKind::OnFileChange,
                adf_store::time::now_ms(),
                json!({ "path": path, "operation": "write", "size": bytes }),
            )
            .produced_by(producer.clone());
            self.dispatch(agent, event).await;
        }
    }
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

fn file_stamps(file: &AdfFile) -> HashMap<String, (String, i64)> {
    let read = || -> rusqlite::Result<HashMap<String, (String, i64)>> {
        let mut stmt = file
            .connection()
            .prepare("SELECT path, updated_at, size FROM adf_files")?;
        let rows = stmt.query_map([], |row| Ok((row.get(0)?, (row.get(1)?, row.get(2)?))))?;
        rows.collect()
    };
    read().unwrap_or_default()
}

/// Runs `work` and returns, beside its result, the files it created or changed (path, size).
pub(crate) fn with_written_files<R>(
    file: &mut AdfFile,
    work: impl FnOnce(&mut AdfFile) -> R,
) -> (R, Vec<(String, i64)>) {
    let before = file_stamps(file);
    let result = work(file);
    let mut written: Vec<(String, i64)> = file_stamps(file)
        .into_iter()
        .filter(|(path, (stamp, _))| before.get(path).is_none_or(|(old, _)| old != stamp))
        .map(|(path, (_, size))| (path, size))
        .collect();
    written.sort();
    (result, written)
}

impl Daemon {
    /// Starts an owner chat turn on `loop_name` in the background (`POST /agents/{id}/chat`).
    /// The model is resolved first, so a missing provider or key is reported to the caller
    /// instead of being accepted and then silently skipped.
    pub async fn start_chat(
        &self,
        agent: &Arc<Agent>,
        loop_name: String,
        text: String,
    ) -> Result<(), String> {
        let config = agent
            .store()
            .run(|file| file.config())
            .await
            .map_err(|e| e.to_string())?;
        adf_runtime::providers::Resolver::new()
            .resolve(&config, None)
            .map_err(|e| e.to_string())?;
        let daemon = self.clone();
        let agent = Arc::clone(agent);
        let registry = self.tools();
        tokio::spawn(async move {
            let loop_for_job = loop_name.clone();
            let outcome = agent
                .store()
                .run(move |file| {
                    let config = file.config()?;
                    Ok(with_written_files(file, |file| {
                        run_agent_turn(file, &config, registry, &loop_for_job, Trigger::Owner(text))
                    }))
                })
                .await;
            agent.triggers().invalidate();
            match outcome {
                Ok((result, written)) => {
                    let payload = match &result {
                        Ok(_) => json!({ "loop": loop_name, "status": "completed" }),
                        Err(_) => json!({ "loop": loop_name, "status": "failed" }),
                    };
                    daemon
                        .emit(&agent, "turn.completed", "agent", payload)
                        .await;
                    daemon
                        .dispatch_writes(&agent, written, Producer::Agent)
                        .await;
                }
                Err(error) => tracing::warn!(agent = %agent.id, %error, "chat turn failed"),
            }
        });
        Ok(())
    }
}
