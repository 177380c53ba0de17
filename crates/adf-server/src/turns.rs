//! The turn host: every daemon turn starts, runs and ends here. Entry points: an owner chat
//! ([`start_chat`], `POST /agents/{id}/chat`), the autostart loops of a loaded agent
//! ([`kick_autostart`]), an agent-scope trigger delivery ([`run_trigger_turn`], from
//! `dispatch`), and an agent-scope timer fire or hibernate nudge ([`run_observed_turn`], from
//! `scheduler`, inside its fire job).
//!
//! A turn is one job on the agent's store worker: [`run_agent_turns`] resolves the model,
//! runs the turns side by side through the executor's `LoopPool` (so `loop_send` wakes are
//! served) on a current-thread runtime on the worker thread, and records each tool and model
//! call as an `on_tool_call` / `on_llm_call` trigger event ([`Recorder`], which is also the
//! turn's `TurnHost`: approvals and `ask` answers go to the owner through `hil`). Aborting is
//! `hil`'s abort signal, raced against the pool here and reported to the executor, which
//! ends a turn whose wait the abort cut short at that call. After the job, the caller
//! publishes `turn.completed`, re-arms timers and dispatches the files written and the events
//! recorded.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};

use adf_runtime::executor::{
    Executor, ExecutorError, LoopPool, RetryLog, Trigger, TurnEnd, TurnEvent, TurnHost, WireCaches,
};
use adf_runtime::tools::{Approver, ToolRegistry};
use adf_runtime::triggers::{Producer, Target, TriggerEvent, TriggerKind, message};
use adf_store::{AdfFile, StoreError};

use crate::dispatch::{Handled, observe, with_written_files};
use crate::hil::{Owner, TurnScope};
use crate::hub::Hub;
use crate::registry::Agent;
use crate::scheduler::log_from;

/// Starts an owner chat turn on `loop_name` in the background (`POST /agents/{id}/chat`).
/// The model is resolved first, so a missing provider or key is reported to the caller
/// instead of being accepted and then silently skipped.
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
    crate::settings::runtime_resolver(hub.home())
        .resolve(&config, None)
        .map_err(|e| e.to_string())?;
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
        spawn_turns(hub, agent, adf_runtime::executor::wakes(loops), None);
    }
}

/// Runs `turns` (and the wakes they cause) as one job on the agent's worker, in the
/// background; `before` is dispatched from the spawned task first (`on_chat`), so the
/// request that started the turn never waits for its targets' config read.
fn spawn_turns(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    turns: Vec<(String, Trigger)>,
    before: Option<TriggerEvent>,
) {
    let hub = Arc::clone(hub);
    let agent = Arc::clone(agent);
    let registry = hub.tools();
    tokio::spawn(async move {
        if let Some(event) = before {
            crate::dispatch::dispatch(&hub, &agent, event).await;
        }
        let observer = Arc::clone(&agent);
        let (scope, publisher) = TurnScope::new(&hub, &agent);
        let outcome = agent
            .store()
            .run(move |file| {
                let config = match file.config() {
                    Ok(config) => config,
                    Err(error) => {
                        scope.finish(file);
                        return Err(error);
                    }
                };
                let mut turn_events = Vec::new();
                let ((results, written), mut events) =
                    observe(file, &observer, Producer::Agent, |file| {
                        with_written_files(file, |file| {
                            run_agent_turns(
                                file,
                                &config,
                                registry,
                                turns,
                                &scope,
                                &mut turn_events,
                            )
                        })
                    });
                events.extend(turn_events);
                let wake = crate::scheduler::wake_of(file);
                scope.finish(file);
                Ok((results, written, events, wake))
            })
            .await;
        let _ended = publisher.await;
        agent.triggers().invalidate();
        match outcome {
            Ok((results, written, events, wake)) => {
                for (loop_name, result) in results {
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
                    wake,
                    written,
                    Producer::Agent,
                    events,
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
    let registry = hub.tools();
    let observer = Arc::clone(agent);
    let kind = target.kind;
    // TRG-36 applies to messages that are rows of the inbox; an event posted to
    // `POST /trigger` names no row, and is delivered as given.
    let inbox_rows =
        kind == TriggerKind::OnInbox && delivered.iter().any(|e| e.data.get("id").is_some());
    let loop_name = target.loop_name.clone();
    let text = message::format(delivered);
    let (scope, publisher) = TurnScope::new(hub, agent);
    let handled = agent
        .store()
        .run(move |file| {
            let handled = deliver_turn(
                file, &observer, &scope, registry, inbox_rows, &loop_name, kind, text,
            );
            scope.finish(file);
            handled
        })
        .await;
    let _ended = publisher.await;
    handled
}

/// The body of an agent-scope delivery job: a turn with the formatted trigger message.
#[allow(clippy::too_many_arguments)]
fn deliver_turn(
    file: &mut AdfFile,
    observer: &Agent,
    scope: &TurnScope,
    registry: Arc<adf_runtime::tools::ToolRegistry>,
    inbox_rows: bool,
    loop_name: &str,
    kind: TriggerKind,
    text: String,
) -> Result<Handled, adf_store::StoreError> {
    // TRG-36: a system lambda may have read every new message already; a turn about an empty
    // inbox would only cost tokens.
    if inbox_rows && file.inbox_counts()?.unread == 0 {
        return Ok(Handled::skipped());
    }
    let config = file.config()?;
    let trigger = Trigger::Event {
        event_type: kind.as_str().to_owned(),
        text,
    };
    let (written, events) =
        run_observed_turn(file, observer, &config, registry, loop_name, trigger, scope);
    Ok(Handled {
        report: None,
        written,
        producer: Producer::Agent,
        events,
        wake: crate::scheduler::wake_of(file),
    })
}

/// An agent-scope turn inside a handler job (a trigger delivery, a timer fire): returns its writes, and its tool and model calls
/// and new rows, for their triggers. The outcome itself is in the file (transcript or a warn
/// row).
pub(crate) fn run_observed_turn(
    file: &mut AdfFile,
    agent: &Agent,
    config: &Value,
    registry: Arc<ToolRegistry>,
    loop_name: &str,
    trigger: Trigger,
    scope: &TurnScope,
) -> (Vec<(String, i64)>, Vec<TriggerEvent>) {
    let mut turn_events = Vec::new();
    let ((_outcome, written), mut events) = observe(file, agent, Producer::Agent, |file| {
        with_written_files(file, |file| {
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
    events.extend(turn_events);
    (written, events)
}

/// A runtime on the worker thread for agent code, which holds the `&mut AdfFile` across
/// awaits.
pub(crate) fn current_thread() -> Option<tokio::runtime::Runtime> {
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

/// Most tool and model call events one turn records; a longer turn's extra calls are not
/// trigger events (the turn itself is bounded by its steps, this bounds the memory).
pub(crate) const TURN_EVENT_LIMIT: usize = 1024;

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

    /// Without the file (a caller that cannot lend it) nobody can answer.
    fn answer(&self, _question: &str) -> Option<String> {
        None
    }

    fn answer_holding(&self, file: &mut AdfFile, question: &str) -> Option<String> {
        self.owner.ask(file, question)
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

/// Runs one executor turn on `loop_name` started by `trigger`, then the `loop_send` wakes it
/// causes (see [`run_agent_turns`]); the result is the first turn's reply.
fn run_agent_turn(
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
/// `POST /abort` cancels the whole job at its next await, or right after the approval or ask
/// wait it ended (`ExecutorError::Aborted`): its checkpoint stays `in_progress`, so the next
/// session of the loop recovers it without replay (an `info` row `turn_aborted` says so).
/// Never panics. Tool and model calls are appended to `events`.
fn run_agent_turns(
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
    let (executor, custom) = match turn_executor(config, registry, scope) {
        Ok(built) => built,
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
    let Some(runtime) = current_thread() else {
        return every("cannot start a runtime for the turn");
    };
    let host = Recorder::new(config, first_loop, scope);
    let abort = Arc::clone(scope.abort());
    let outcome = runtime.block_on(async {
        let mut pool = LoopPool::new();
        tokio::select! {
            biased;
            () = abort.aborted() => None,
            results = pool.run_many(&executor, file, turns.clone(), &host) => Some(results),
        }
    });
    // A turn whose approval or ask wait the abort ended stops right there on its own
    // (`ExecutorError::Aborted`, through `Recorder::aborted`): the select above only sees
    // aborts that come while the turn awaits, and the rest of an aborted turn may run to its
    // end without awaiting (a model error already relayed back, a batch of synchronous calls).
    let outcome = outcome.filter(|outcome| !ended_by_abort(outcome));
    events.extend(
        host.events
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner),
    );
    announce_turned_off(file, config, scope);
    // `emit_event` from the turn's code (`sys_code`, `sys_lambda`): on the bus after the
    // calls that made them, with the turn's other events.
    for event in custom.take() {
        scope.emit(&event.event_type, event.payload);
    }
    match outcome {
        None => every(&record_abort(file, &data)),
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
            every(&message)
        }
        Some(Ok(results)) => turn_results(file, scope, &event_type, results),
    }
}

/// Whether a turn of the job stopped because the owner aborted it: the job then ends as an
/// abort (see [`record_abort`]), whatever the other loops of its round did.
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
    /// The wire caches of the agent whose store worker this thread is (turns run on their
    /// agent's worker, one thread per open file): each turn gets a new executor, and these let
    /// it reuse the request JSON of earlier turns' messages instead of encoding the whole
    /// conversation again. Made on a worker's first turn and dropped with the thread when the
    /// agent's file is idle-released, so an idle agent holds none.
    static WIRE_CACHES: Arc<WireCaches> = Arc::default();
}

/// This worker thread's wire caches (see [`WIRE_CACHES`]).
fn worker_wire_caches() -> Arc<WireCaches> {
    WIRE_CACHES.with(Arc::clone)
}

/// The executor for a daemon turn, with the config's model resolved (the error when none can
/// be reached) and the sink that collects its code's `emit_event` calls.
fn turn_executor(
    config: &Value,
    registry: Arc<ToolRegistry>,
    scope: &TurnScope,
) -> Result<(Executor, Arc<crate::taps::CustomEvents>), adf_providers::ProviderError> {
    let retries = RetryLog::default();
    let resolved = scope
        .resolver
        .clone()
        .with_retry_observer(retries.observer())
        .resolve(config, None)?;
    let custom = Arc::new(crate::taps::CustomEvents::default());
    let executor = Executor::from_resolved(resolved, retries)
        .with_wire_caches(WireCaches::clone(&worker_wire_caches()))
        .with_registry(registry)
        .with_event_sink(custom.clone())
        .with_mesh_updates(scope.mesh_updates.clone());
    Ok((executor, custom))
}

/// After `POST /abort` cancelled the job between two awaits: no store step is half done, but
/// a tool call's transaction could be open if code was running, so it is rolled back. Returns
/// the message each turn ends with.
fn record_abort(file: &mut AdfFile, data: &Value) -> String {
    if let Err(error) = file.rollback_open_transaction() {
        tracing::warn!(%error, "cannot roll back an aborted turn");
    }
    // The transcript says so too (the executor wrote it already when it saw the abort).
    let loop_name = data.get("loop").and_then(Value::as_str).unwrap_or("main");
    if let Err(error) = adf_runtime::executor::record_turn_aborted(file, loop_name) {
        tracing::warn!(%error, "cannot record the aborted turn in the transcript");
    }
    let message =
        "the owner aborted the turn; it is recovered (not replayed) when the loop runs next";
    log_from(
        file,
        "executor",
        "info",
        "turn_aborted",
        message,
        Some(data),
    );
    message.to_owned()
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
