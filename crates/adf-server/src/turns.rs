//! The turn host: every daemon turn starts, runs and ends here. Entry points: an owner chat
//! ([`start_chat`], `POST /agents/{id}/chat`), the autostart loops of a loaded agent
//! ([`kick_autostart`]), an agent-scope trigger delivery ([`run_trigger_turn`], from
//! `dispatch`), and an agent-scope timer fire or hibernate nudge ([`run_observed_turn`], from
//! `scheduler`, after its fire job).
//!
//! A turn job never holds the agent's store worker while it waits. [`run_turn_job`] passes the
//! gates of its loops (one per loop, `LoopPasses`: a loop never runs two turns at once, while
//! turn jobs of different loops run side by side, §6.4), then runs on a thread of its own — a
//! current-thread runtime, since tool calls and code runs are synchronous work on the file
//! (and a code run's approval waits inside the pipeline) — over a `SharedFile::leased` file:
//! each store step and each tool call leases the file from the worker and gives it back, and
//! the model's answer (its retries and backoff included), a network tool's work (fetch, MCP,
//! delivery) and the owner's decision on an approval or an `ask` are awaited with the file
//! back on the worker (for the owner's waits, with the shared file unlocked too, so the job's
//! other loops step meanwhile). So timer fires, trigger deliveries, owner reads and writes,
//! inbox handling and other loops' turns run between the turn's steps and while it waits for
//! the owner, each one job or lease. Code a tool call runs (`sys_code`, `sys_lambda`,
//! `adf_shell`) holds the lease for its run, bounded by its time limit; when it waits for an
//! approval, it runs the queued jobs itself (`hil`).
//!
//! Each hand-over of the lease is observed ([`TurnObserver`]): rows and files that changed
//! while the turn held the file are the turn's (`Producer::Agent`), those that changed while
//! it did not were another job's, which sweeps its own. Tool and model calls are recorded as
//! `on_tool_call` / `on_llm_call` trigger events ([`Recorder`], which is also the turn's
//! `TurnHost`: approvals and `ask` answers go to the owner through `hil`). Aborting is `hil`'s
//! abort signal, raced against the pool here and reported to the executor, which ends a turn
//! whose wait the abort cut short at that call; the dropped lease rolls back a transaction
//! left open, and the approvals an abort left pending are denied here
//! (`TurnScope::settle_aborted_approvals`). After the job, the caller publishes `turn.completed`, re-arms timers and
//! dispatches the files written and the events recorded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};

use adf_runtime::executor::{
    Executor, ExecutorError, LeaseHooks, LoopPool, SharedFile, Trigger, TurnEnd, TurnEvent,
    TurnHost, WireCaches,
};
use adf_runtime::tools::{ApprovalRequest, Approver, Decision, OwnerWait, ToolError, ToolRegistry};
use adf_runtime::triggers::{Producer, Target, TriggerEvent, TriggerKind, message};
use adf_store::{AdfFile, StoreError};

use crate::dispatch::{Handled, observe};
use crate::hil::{Owner, TurnScope};
use crate::hub::Hub;
use crate::model::TurnModel;
use crate::registry::Agent;
use crate::support::{TURN_EVENT_LIMIT, current_thread, log_from};

mod observer;

pub(crate) use observer::{TurnObserver, turn_observer};

/// Starts an owner chat turn on `loop_name` in the background (`POST /agents/{id}/chat`).
/// The model is decided first ([`TurnModel`]), so a missing provider or key is reported to the
/// caller instead of being accepted and then silently skipped; the turn runs on that decision.
pub(crate) async fn start_chat(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    loop_name: String,
    text: String,
) -> Result<(), String> {
    let config = agent
        .job(|file| file.config())
        .await
        .map_err(|e| e.to_string())?;
    let model =
        TurnModel::decide(hub.home(), hub.io_runtime(), &config).map_err(|e| e.to_string())?;
    let chat = TriggerEvent::new(
        TriggerKind::OnChat,
        adf_store::time::now_ms(),
        json!({ "text": text, "loop": loop_name }),
    );
    spawn_turns(
        hub,
        agent,
        vec![(loop_name, Trigger::Owner(text))],
        Some(chat),
        Some(model),
    );
    Ok(())
}

/// Kicks the agent's autostart loops (STL-44): each enabled loop with `autostart` gets a
/// wake turn when the agent starts `active` (loading it is its start in this daemon).
pub(crate) async fn kick_autostart(hub: &Arc<Hub>, agent: &Arc<Agent>) {
    let loops = match agent.job(|file| file.config()).await {
        Ok(config) => adf_runtime::executor::autostart_loops(&config),
        Err(error) => {
            tracing::warn!(agent = %agent.id, %error, "cannot read the config for autostart");
            return;
        }
    };
    if !loops.is_empty() {
        spawn_turns(hub, agent, adf_runtime::executor::wakes(loops), None, None);
    }
}

/// Runs `turns` (and the wakes they cause) as one turn job of the agent, in the background;
/// `before` is dispatched from the spawned task first (`on_chat`), so the request that
/// started the turn never waits for its targets' config read. `model` is the decision the
/// caller already made (chat), or `None` for the job to make it.
fn spawn_turns(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    turns: Vec<(String, Trigger)>,
    before: Option<TriggerEvent>,
    model: Option<TurnModel>,
) {
    let hub = Arc::clone(hub);
    let agent = Arc::clone(agent);
    tokio::spawn(async move {
        if let Some(event) = before {
            crate::dispatch::dispatch(&hub, &agent, event).await;
        }
        let outcome = run_decided_turn_job(&hub, &agent, turns, false, model).await;
        agent.triggers().invalidate();
        match outcome {
            Ok(job) => {
                for (loop_name, result) in &job.results {
                    let status = if result.is_ok() {
                        "completed"
                    } else {
                        "failed"
                    };
                    hub.emit(
                        &agent,
                        "turn.completed",
                        "agent",
                        json!({ "loop": loop_name, "status": status }),
                    )
                    .await;
                }
                crate::dispatch::dispatch_handled(
                    &hub,
                    &agent,
                    job.wake,
                    job.written,
                    Producer::Agent,
                    job.events,
                )
                .await;
            }
            Err(error) => tracing::warn!(agent = %agent.id, %error, "turn job failed"),
        }
    });
}

/// An agent-scope trigger delivery (`dispatch`): one turn job with the `message::format`ted
/// events on the target's loop. The turn's owner events (approvals, asks) are published
/// before the caller reports its writes.
pub(crate) async fn run_trigger_turn(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    target: &Target,
    delivered: &[TriggerEvent],
) -> Result<Handled, StoreError> {
    let kind = target.kind;
    // TRG-36 applies to messages that are rows of the inbox; an event posted to
    // `POST /trigger` names no row, and is delivered as given.
    let inbox_rows =
        kind == TriggerKind::OnInbox && delivered.iter().any(|e| e.data.get("id").is_some());
    let trigger = Trigger::Event {
        event_type: kind.as_str().to_owned(),
        text: message::format(delivered),
    };
    let job = run_turn_job(
        hub,
        agent,
        vec![(target.loop_name.clone(), trigger)],
        inbox_rows,
    )
    .await?;
    if job.skipped {
        return Ok(Handled::skipped());
    }
    Ok(Handled {
        report: None,
        written: job.written,
        producer: Producer::Agent,
        events: job.events,
        wake: job.wake,
    })
}

/// An agent-scope turn of a timer fire or the hibernate nudge (`scheduler`, after the fire
/// job): returns its writes and deletes, and its tool and model calls and new rows, for their triggers.
/// The outcome itself is in the file (transcript or a warn row).
pub(crate) async fn run_observed_turn(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    loop_name: String,
    trigger: Trigger,
) -> (crate::support::FileChanges, Vec<TriggerEvent>) {
    match run_turn_job(hub, agent, vec![(loop_name, trigger)], false).await {
        Ok(job) => (job.written, job.events),
        Err(error) => {
            tracing::warn!(agent = %agent.id, %error, "timer turn failed");
            (Vec::new(), Vec::new())
        }
    }
}

/// What one turn job did, for the caller to publish and dispatch.
pub(crate) struct TurnJob {
    /// Each turn's reply, or why it failed.
    pub(crate) results: Vec<(String, Result<String, String>)>,
    /// Files the turn created, changed or deleted.
    pub(crate) written: crate::support::FileChanges,
    /// Its tool and model calls and the rows it added, as trigger events.
    pub(crate) events: Vec<TriggerEvent>,
    /// The agent's next timer wake after the turn (`None`: unreadable).
    pub(crate) wake: Option<crate::scheduler::WakeRead>,
    /// Nothing ran: an inbox delivery found every message read already (TRG-36).
    pub(crate) skipped: bool,
}

impl TurnJob {
    fn skipped() -> Self {
        Self {
            results: Vec::new(),
            written: Vec::new(),
            events: Vec::new(),
            wake: None,
            skipped: true,
        }
    }
}

/// The trigger type of a turn job (its first turn's) and the data its log rows carry.
fn trigger_facts(turns: &[(String, Trigger)]) -> (String, Value) {
    let Some((first_loop, first_trigger)) = turns.first() else {
        return (String::new(), Value::Null);
    };
    let event_type = match first_trigger {
        Trigger::Owner(_) => "chat".to_owned(),
        Trigger::Event { event_type, .. } | Trigger::Wake { event_type } => event_type.clone(),
    };
    let data = json!({ "trigger": event_type, "loop": first_loop });
    (event_type, data)
}

/// Runs `turns` as one turn job: registers it (`hil`, from then on `POST /abort` reaches it),
/// waits for its loops' gates (`LoopPasses`), then runs them on a thread of its own over the leased
/// file (see the module docs); the turn's owner events are all published when it returns.
/// With `inbox_rows`, nothing runs when the inbox has no unread message left (TRG-36: a
/// system lambda may have read them).
pub(crate) async fn run_turn_job(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    turns: Vec<(String, Trigger)>,
    inbox_rows: bool,
) -> Result<TurnJob, StoreError> {
    run_decided_turn_job(hub, agent, turns, inbox_rows, None).await
}

/// [`run_turn_job`] on the model the caller decided (`Some`: an owner chat, whose answer
/// reported that decision), or on the one the job decides when it starts (`None`).
async fn run_decided_turn_job(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    turns: Vec<(String, Trigger)>,
    inbox_rows: bool,
    model: Option<TurnModel>,
) -> Result<TurnJob, StoreError> {
    // A turn with nothing to read (TRG-36) or no model to ask is one short job, as any: no
    // registration, no thread, no lease.
    let home = hub.home().clone();
    let io = hub.io_runtime();
    let (event_type, data) = trigger_facts(&turns);
    let names: Vec<String> = turns.iter().map(|(name, _)| name.clone()).collect();
    let loops = names.clone();
    let observer_agent = Arc::clone(agent);
    let decided = agent
        .job(move |file| {
            if inbox_rows && file.inbox_counts()?.unread == 0 {
                return Ok(Err(TurnJob::skipped()));
            }
            let error = match model {
                Some(model) => return Ok(Ok(model)),
                None => match TurnModel::decide(&home, io, &file.config()?) {
                    Ok(model) => return Ok(Ok(model)),
                    Err(error) => error,
                },
            };
            let message = format!("no model turn for {event_type}: {error}");
            let ((), events) = observe(file, &observer_agent, Producer::Agent, |file| {
                log_from(
                    file,
                    "executor",
                    "warn",
                    "turn_skipped",
                    &message,
                    Some(&data),
                );
            });
            Ok(Err(TurnJob {
                results: names
                    .into_iter()
                    .map(|name| (name, Err(message.clone())))
                    .collect(),
                written: Vec::new(),
                events,
                wake: crate::scheduler::wake_of(file),
                skipped: false,
            }))
        })
        .await?;
    let model = match decided {
        Ok(model) => model,
        Err(job) => return Ok(job),
    };
    let (scope, publisher) = TurnScope::new(hub, agent);
    let passes = Arc::new(LoopPasses::enter(hub, agent, &loops).await);
    // The wire caches live on the worker thread (dropped with it when the file is released
    // idle), so an idle agent keeps none; the turn borrows them for its length.
    let caches = agent.store().run(|_| Ok(worker_wire_caches())).await?;
    let registry = hub.tools();
    let observer = Arc::clone(&scope.observer);
    let handle = agent.store().clone();
    let body = move || -> Result<TurnJob, StoreError> {
        let Some(runtime) = current_thread() else {
            return Err(StoreError::JobPanicked(
                "cannot start a runtime for the turn".into(),
            ));
        };
        runtime.block_on(async move {
            let hooks: Arc<dyn LeaseHooks> = scope.observer.clone();
            let shared = SharedFile::leased(handle, Some(hooks));
            let config = shared.lock().await?.config()?;
            let claim = |loop_name: &str| passes.claim(loop_name);
            let executor = turn_executor(model, registry, &scope, caches);
            let (results, events) =
                run_agent_turns(&shared, &config, executor, turns, &scope, &claim).await;
            let mut guard = shared.lock().await?;
            announce_turned_off(&guard, &config, &scope);
            let wake = crate::scheduler::wake_of(&mut guard);
            drop(guard);
            Ok(TurnJob {
                results,
                written: Vec::new(),
                events,
                wake,
                skipped: false,
            })
        })
    };
    let job = tokio::task::spawn_blocking(body).await;
    let _ended = publisher.await;
    let mut job = job.map_err(|error| StoreError::JobPanicked(error.to_string()))??;
    let (written, mut observed) = observer.take();
    job.written = written;
    observed.append(&mut job.events);
    job.events = observed;
    Ok(job)
}

/// The loops one turn job runs, each held through its gate (`registry::LoopGates`) until the
/// job ends: the loops it starts with, waited for in name order (so two jobs that start with
/// several loops never wait for each other in a circle), and the loops its turns wake
/// (`loop_send`), taken only when free. A wake for a loop another job runs becomes a turn job
/// of its own at once, which waits for that loop's gate, so no wake is lost and no job waits
/// for another while holding a loop.
struct LoopPasses {
    hub: Arc<Hub>,
    agent: Arc<Agent>,
    runtime: tokio::runtime::Handle,
    held: Mutex<BTreeMap<String, crate::registry::LoopPass>>,
}

impl LoopPasses {
    async fn enter(hub: &Arc<Hub>, agent: &Arc<Agent>, loops: &[String]) -> Self {
        let mut held = BTreeMap::new();
        let names: std::collections::BTreeSet<&String> = loops.iter().collect();
        for name in names {
            held.insert(name.clone(), agent.loop_gates().enter(name).await);
        }
        Self {
            hub: Arc::clone(hub),
            agent: Arc::clone(agent),
            runtime: tokio::runtime::Handle::current(),
            held: Mutex::new(held),
        }
    }

    /// Whether this job may run a turn of `loop_name` now (called from the turn's thread).
    fn claim(&self, loop_name: &str) -> bool {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.contains_key(loop_name) {
            return true;
        }
        if let Some(pass) = self.agent.loop_gates().try_enter(loop_name) {
            held.insert(loop_name.to_owned(), pass);
            return true;
        }
        drop(held);
        let hub = Arc::clone(&self.hub);
        let agent = Arc::clone(&self.agent);
        let wake = adf_runtime::executor::wakes(vec![loop_name.to_owned()]);
        self.runtime
            .spawn(async move { spawn_turns(&hub, &agent, wake, None, None) });
        false
    }
}

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
    /// `umbilical.stream_deltas`: each text and thinking delta is a `turn.delta` event.
    stream_deltas: bool,
}

impl<'a> Recorder<'a> {
    fn new(config: &Value, loop_name: String, scope: &'a TurnScope) -> Self {
        let text = |pointer: &str| {
            config
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Self {
            provider: text("/model/provider"),
            model: text("/model/model_id"),
            loop_name,
            events: Mutex::new(Vec::new()),
            owner: Owner { scope },
            stream_deltas: config
                .pointer("/umbilical/stream_deltas")
                .and_then(Value::as_bool)
                == Some(true),
        }
    }

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

impl Recorder<'_> {
    /// Forwards the turn's progress to the agent's live feed (the Studio's view of the turn).
    fn live(&self, event: &TurnEvent<'_>) {
        let feed = self.owner.scope.agent.live();
        let loop_name = &self.loop_name;
        match event {
            TurnEvent::TextDelta(text) => {
                feed.publish(|| json!({ "kind": "text", "loop": loop_name, "text": text }));
            }
            TurnEvent::ThinkingDelta(text) => {
                feed.publish(|| json!({ "kind": "thinking", "loop": loop_name, "text": text }));
            }
            TurnEvent::ToolCall(call) => feed.publish(|| {
                json!({ "kind": "tool_call", "loop": loop_name, "id": call.id, "name": call.name, "input": call.input })
            }),
            TurnEvent::ToolResult {
                call,
                content,
                is_error,
            } => feed.publish(|| {
                json!({ "kind": "tool_result", "loop": loop_name, "id": call.id, "name": call.name, "text": content, "is_error": is_error })
            }),
            TurnEvent::Reply(reply) => feed.publish(|| {
                json!({ "kind": "reply", "loop": loop_name, "model": self.model, "usage": reply.usage })
            }),
            TurnEvent::State(state) => feed.publish(|| {
                json!({ "kind": "state", "loop": loop_name, "state": format!("{state:?}") })
            }),
            TurnEvent::Retry(notice) => feed.publish(|| {
                let mut frame = retry_payload(loop_name, notice);
                frame["kind"] = json!("retry");
                frame
            }),
            _ => {}
        }
    }
}

/// `turn.retry`: a model request failed and is retried after `wait_ms`; `attempt` is the
/// attempt the retry makes (2 for the first) out of `max_attempts`, `message` the line
/// `adf chat` prints.
fn retry_payload(loop_name: &str, notice: &adf_providers::RetryNotice) -> Value {
    json!({
        "loop": loop_name,
        "provider": notice.provider,
        "reason": notice.reason,
        "attempt": notice.attempt + 1,
        "max_attempts": notice.max_attempts,
        "wait_ms": u64::try_from(notice.delay.as_millis()).unwrap_or(u64::MAX),
        "message": notice.describe(),
    })
}

impl TurnHost for Recorder<'_> {
    fn approver(&self) -> &dyn Approver {
        &self.owner
    }

    /// Only awaited ([`TurnHost::ask`]): the owner answers over the API.
    fn answer(&self, _question: &str) -> Option<String> {
        None
    }

    fn await_approval<'h>(
        &'h self,
        file: &mut AdfFile,
        request: &ApprovalRequest,
    ) -> OwnerWait<'h, Result<Decision, ToolError>> {
        self.owner.await_approval(file, request)
    }

    fn ask<'h>(&'h self, question: &str) -> OwnerWait<'h, Option<String>> {
        self.owner.ask(question)
    }

    fn aborted(&self) -> bool {
        self.owner.scope.abort().is_aborted()
    }

    fn event(&self, event: &TurnEvent<'_>) {
        self.live(event);
        match event {
            TurnEvent::TextDelta(text) if self.stream_deltas => self.owner.scope.emit(
                "turn.delta",
                json!({ "kind": "text", "text": text, "loop": self.loop_name }),
            ),
            TurnEvent::ThinkingDelta(text) if self.stream_deltas => self.owner.scope.emit(
                "turn.delta",
                json!({ "kind": "thinking", "text": text, "loop": self.loop_name }),
            ),
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
            TurnEvent::Retry(notice) => self
                .owner
                .scope
                .emit("turn.retry", retry_payload(&self.loop_name, notice)),
            _ => {}
        }
    }
}

/// Runs `turns` side by side through a [`LoopPool`] (one round), then the rounds of wakes
/// they cause (`loop_send` with `wake: true`, served one round after another), over the
/// leased file. When no model can be reached (no provider configured, no key) it writes a
/// `warn` row `turn_skipped` and returns the reason for each turn; a failed turn is a `warn`
/// row `trigger_turn_failed`. `POST /abort` cancels the whole job at its next await, or right
/// after the approval or ask wait it ended (`ExecutorError::Aborted`): its checkpoint stays
/// `in_progress`, so the next session of the loop recovers it without replay (an `info` row
/// `turn_aborted` says so). Never panics. Returns each turn's result and the tool and model
/// calls as events.
async fn run_agent_turns(
    shared: &SharedFile<'_>,
    config: &Value,
    (executor, custom): (Executor, Arc<crate::custom_events::CustomEvents>),
    turns: Vec<(String, Trigger)>,
    scope: &TurnScope,
    claim: &(dyn Fn(&str) -> bool + Sync),
) -> (Vec<(String, Result<String, String>)>, Vec<TriggerEvent>) {
    let Some((first_loop, _)) = turns.first().cloned() else {
        return (Vec::new(), Vec::new());
    };
    let (event_type, data) = trigger_facts(&turns);
    let every = |message: &str| -> Vec<(String, Result<String, String>)> {
        turns
            .iter()
            .map(|(name, _)| (name.clone(), Err(message.to_owned())))
            .collect()
    };
    let log = |event: &'static str, level: &'static str, message: String| async move {
        match shared.lock().await {
            Ok(mut file) => log_from(&mut file, "executor", level, event, &message, Some(&data)),
            Err(error) => tracing::warn!(%error, "cannot log the turn's end"),
        }
        message
    };
    let host = Recorder::new(config, first_loop, scope);
    let abort = Arc::clone(scope.abort());
    let outcome = {
        let mut pool = LoopPool::new();
        tokio::select! {
            biased;
            () = abort.aborted() => None,
            results = pool.run_many_claimed(&executor, shared, turns.clone(), &host, claim) => Some(results),
        }
    };
    // A turn whose approval or ask wait the abort ended stops right there on its own
    // (`ExecutorError::Aborted`, through `Recorder::aborted`): the select above only sees
    // aborts that come while the turn awaits, and the rest of an aborted turn may run to its
    // end without awaiting (a model error already relayed back, a batch of synchronous calls).
    let outcome = outcome.filter(|outcome| !ended_by_abort(outcome));
    let events = host
        .events
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    // `emit_event` from the turn's code (`sys_code`, `sys_lambda`): on the bus after the
    // calls that made them, with the turn's other events.
    for event in custom.take() {
        scope.emit(&event.event_type, event.payload);
    }
    let results = match outcome {
        // The cancelled step's lease rolled back the transaction it left open.
        None => {
            // The transcript says so too, once (the executor wrote it already when it saw
            // the abort at an approval or ask wait).
            match shared.lock().await {
                Ok(mut file) => {
                    scope.settle_aborted_approvals(&mut file);
                    for (loop_name, _) in &turns {
                        if let Err(error) =
                            adf_runtime::executor::record_turn_aborted(&mut file, loop_name)
                        {
                            tracing::warn!(%error, "cannot record the aborted turn in the transcript");
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, "cannot record the aborted turn"),
            }
            every(&log("turn_aborted", "info", ABORTED_TURN.to_owned()).await)
        }
        Some(Err(error)) => every(&log("trigger_turn_failed", "warn", error.to_string()).await),
        Some(Ok(results)) => match shared.lock().await {
            Ok(mut file) => turn_results(&mut file, scope, &event_type, results),
            Err(error) => every(&error.to_string()),
        },
    };
    (results, events)
}

/// How an aborted turn ends, in its `turn_aborted` row and result.
const ABORTED_TURN: &str =
    "the owner aborted the turn; it is recovered (not replayed) when the loop runs next";

/// Whether a turn of the job stopped because the owner aborted it: the job then ends as an
/// abort (a `turn_aborted` transcript row and log row), whatever the other loops of its round did.
fn ended_by_abort(outcome: &Result<adf_runtime::executor::LoopResults, ExecutorError>) -> bool {
    match outcome {
        Err(error) => matches!(error, ExecutorError::Aborted),
        Ok(results) => results
            .iter()
            .any(|(_, result)| matches!(result, Err(ExecutorError::Aborted))),
    }
}

/// An agent whose turn set it `off` (`sys_set_state`, from the model or its code) stops as
/// when the owner turns it off: `agent.state.changed` goes out, and the hub releases its
/// network resources (routes, WebSockets, bindings) and MCP server processes on that event
/// (STL-04).
fn announce_turned_off(file: &AdfFile, before: &Value, scope: &TurnScope) {
    let is_off = |config: &Value| config.get("state").and_then(Value::as_str) == Some("off");
    if is_off(before) || !file.config_shared().is_ok_and(|after| is_off(&after)) {
        return;
    }
    scope
        .agent
        .update_info(|info| info.display_state = "off".to_owned());
    scope.emit(
        "agent.state.changed",
        json!({ "filePath": scope.agent.file_path(), "state": "off" }),
    );
}

thread_local! {
    /// The wire caches of the agent whose store worker this thread is (one thread per open
    /// file; a turn job borrows them with a job on it): each turn gets a new executor, and
    /// these let it reuse the request JSON of earlier turns' messages instead of encoding the
    /// whole conversation again. Made on a worker's first turn and dropped with the thread
    /// when the agent's file is idle-released, so an idle agent holds none.
    static WIRE_CACHES: Arc<WireCaches> = Arc::default();
}

/// This worker thread's wire caches (see [`WIRE_CACHES`]).
fn worker_wire_caches() -> Arc<WireCaches> {
    WIRE_CACHES.with(Arc::clone)
}

/// The executor for a daemon turn, on the job's decided model, and the sink that collects its
/// code's `emit_event` calls.
fn turn_executor(
    model: TurnModel,
    registry: Arc<ToolRegistry>,
    scope: &TurnScope,
    caches: Arc<WireCaches>,
) -> (Executor, Arc<crate::custom_events::CustomEvents>) {
    let custom = Arc::new(crate::custom_events::CustomEvents::default());
    let executor = model
        .executor()
        .with_wire_caches(WireCaches::clone(&caches))
        .with_registry(registry)
        .with_event_sink(custom.clone())
        .with_mesh_updates(scope.mesh_updates.clone());
    (executor, custom)
}

/// Each turn's reply, or its error (also a `warn` row `trigger_turn_failed`); a turn that
/// hit `max_active_turns` asks the owner for a suspend decision.
fn turn_results(
    file: &mut AdfFile,
    scope: &TurnScope,
    event_type: &str,
    results: Vec<(
        String,
        Result<adf_runtime::executor::TurnOutcome, adf_runtime::executor::ExecutorError>,
    )>,
) -> Vec<(String, Result<String, String>)> {
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

#[cfg(test)]
mod wire_cache_tests {
    use super::*;

    #[test]
    fn wire_caches_are_kept_per_worker_thread_and_dropped_when_it_exits() {
        let (shared, left) = std::thread::spawn(|| {
            let first = worker_wire_caches();
            let again = worker_wire_caches();
            (Arc::ptr_eq(&first, &again), Arc::downgrade(&first))
        })
        .join()
        .unwrap_or_else(|_| panic!("the worker thread panicked"));
        assert!(shared, "every turn of one worker shares its caches");
        assert!(
            left.upgrade().is_none(),
            "a released worker's caches go with its thread"
        );
    }
}
