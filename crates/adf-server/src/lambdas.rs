//! The system-scope lambda host: [`run_system_lambda`] runs one lambda on the agent's store
//! worker (`code::run_lambda` with `Authorization::SourceFile`: the lambda file's `authorized`
//! flag decides; while it waits off the file it serves the worker's queued jobs,
//! `code::FileQueue`) for every caller — trigger deliveries (`dispatch`), timer fires
//! (`scheduler`) and umbilical taps (`taps`) — and reports what it did ([`LambdaReport`]):
//! timing, error, files written, row events, `custom.*` events, and its `adf.*` calls as
//! `on_tool_call` / `on_llm_call` events.
//!
//! [`observe_serving`] keeps a run's rows and files its own when it serves other jobs while
//! it waits (a shell run's too): at each hand-over of the file the rows since are swept as
//! the run's and the files whose stamp moved are its writes; the jobs it serves sweep their
//! own, so none of them is counted twice or under the wrong producer.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde_json::{Value, json};

use adf_runtime::code::{
    self, Authorization, CodeEnv, FileQueue, LambdaRef, LeaseHooks, RunOptions, Sandbox,
    SandboxConfig,
};
use adf_runtime::tools::ToolRegistry;
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::triggers::{Producer, TriggerEvent, TriggerKind};
use adf_store::{AdfFile, StoreHandle};

use crate::support::{TURN_EVENT_LIMIT, current_thread, file_stamps, log_from};

/// Sweeps the rows added to the agent's observed tables since its last sweep, as events of
/// the producer given (`dispatch::sweep` for one agent; handed in, since dispatch runs the
/// lambdas of this module).
pub(crate) type Sweep = Arc<dyn Fn(&AdfFile, &Producer) -> Vec<TriggerEvent> + Send + Sync>;

/// What a run observed with [`observe_serving`] left: its result, the files it created,
/// changed or deleted (path order) and its row events (rows of other processes found at a hand-over
/// first, as `External`).
pub(crate) struct Observed<R> {
    pub(crate) result: R,
    pub(crate) written: crate::support::FileChanges,
    pub(crate) events: Vec<TriggerEvent>,
}

/// Runs `work` as `producer` on the agent's store worker, handing it the worker's queue (with
/// this observation's hooks) for the waits of the run, and returns what the run itself did.
pub(crate) fn observe_serving<R>(
    file: &mut AdfFile,
    producer: Producer,
    sweep: Sweep,
    work: impl FnOnce(&mut AdfFile, Option<FileQueue>) -> R,
) -> Observed<R> {
    let watch = Arc::new(LeaseObserver::new(producer, sweep));
    watch.acquired(file);
    let hooks: Arc<dyn LeaseHooks> = watch.clone();
    let queue = StoreHandle::of_this_worker().map(|handle| FileQueue::new(handle, Some(hooks)));
    let result = work(file, queue);
    watch.releasing(file);
    let (written, events) = watch.take();
    Observed {
        result,
        written,
        events,
    }
}

/// One job's side of each hand-over of the agent's file ([`LeaseHooks`]) — a system run's to
/// the jobs it serves, a turn's to its worker (`turns::TurnObserver`): when the file comes
/// back, rows that appeared since are another writer's (`External`) and the file stamps are
/// taken; when it goes, the rows since are the producer's and the files whose stamp moved
/// (or that are gone) are its changes. Jobs that ran in between sweep their own rows, so none
/// of this job's rows is another's and the other way round.
pub(crate) struct LeaseObserver {
    producer: Producer,
    sweep: Sweep,
    state: Mutex<Watched>,
}

impl std::fmt::Debug for LeaseObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseObserver")
            .field("producer", &self.producer)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Watched {
    /// Each file's stamp when the run last (re)took the file.
    stamps: Option<HashMap<String, (String, i64)>>,
    /// Path → size of a file the run wrote, `None` for one it deleted.
    written: BTreeMap<String, Option<i64>>,
    events: Vec<TriggerEvent>,
}

impl LeaseObserver {
    pub(crate) fn new(producer: Producer, sweep: Sweep) -> Self {
        Self {
            producer,
            sweep,
            state: Mutex::new(Watched::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watched> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The files changed (path order) and the row events observed so far, in order; the
    /// observation goes on empty.
    pub(crate) fn take(&self) -> (crate::support::FileChanges, Vec<TriggerEvent>) {
        let mut state = self.lock();
        let written = std::mem::take(&mut state.written).into_iter().collect();
        (written, std::mem::take(&mut state.events))
    }
}

impl LeaseHooks for LeaseObserver {
    fn acquired(&self, file: &mut AdfFile) {
        // Rows no job swept (another process wrote them) are outside events, as they would
        // have been at the start of a job.
        let external = (self.sweep)(file, &Producer::External);
        let stamps = file_stamps(file);
        let mut state = self.lock();
        state.events.extend(external);
        state.stamps = Some(stamps);
    }

    fn releasing(&self, file: &mut AdfFile) {
        let own = (self.sweep)(file, &self.producer);
        // Taken in a statement of its own: a `let … else` would keep the guard through `else`.
        let before = self.lock().stamps.take();
        let after = before.as_ref().map(|_| file_stamps(file));
        let mut state = self.lock();
        state.events.extend(own);
        let (Some(before), Some(after)) = (before, after) else {
            return;
        };
        state
            .written
            .extend(crate::support::changed_files(&before, after));
    }
}

#[derive(Debug, Clone)]
pub(crate) struct LambdaReport {
    pub(crate) lambda: LambdaRef,
    pub(crate) started_at: i64,
    pub(crate) duration_ms: f64,
    pub(crate) error: Option<String>,
    /// Files the run created, changed or deleted, for `on_file_change`.
    pub(crate) written: crate::support::FileChanges,
    /// The run's `adf.emit_event` events, published with `lambda.started`/`completed`.
    pub(crate) custom: Vec<crate::custom_events::CustomEvent>,
    /// The run's row events (as [`Observed::events`]), then `on_tool_call` / `on_llm_call`
    /// events of its `adf.*` calls, produced by the lambda (so it never receives its own);
    /// the caller dispatches them.
    pub(crate) events: Vec<TriggerEvent>,
}

/// Runs a system-scope lambda with `input` on the worker thread, observed as its own producer
/// ([`observe_serving`], `sweep` being the agent's); the authorization is the lambda file's
/// `authorized` flag. A failure is a `warn` log row, never a crash.
pub(crate) fn run_system_lambda(
    file: &mut AdfFile,
    sweep: Sweep,
    registry: Arc<ToolRegistry>,
    lambda: LambdaRef,
    input: Value,
    warm: bool,
) -> LambdaReport {
    let started_at = adf_store::time::now_ms();
    let clock = Instant::now();
    let custom = Arc::new(crate::custom_events::CustomEvents::default());
    let sink: Arc<dyn adf_runtime::code::EventSink> = custom.clone();
    let mut calls = Vec::new();
    let producer = Producer::Lambda {
        source: lambda.source(),
    };
    let observed = observe_serving(file, producer, sweep, |file, queue| {
        let error = match current_thread() {
            None => Some("cannot start a runtime for agent code".to_owned()),
            Some(runtime) => runtime.block_on(async {
                let sandbox = match Sandbox::new(SandboxConfig::default()).await {
                    Ok(sandbox) => sandbox,
                    Err(error) => return Some(error.to_string()),
                };
                let mut env = CodeEnv::new(sandbox, registry).with_event_sink(sink);
                // A job of the agent's worker: while the lambda waits off the file (a slow
                // fetch, a hung model), it runs the agent's jobs queued behind it.
                if let Some(queue) = queue {
                    env = env.serving(queue);
                }
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
        };
        if let Some(message) = &error {
            let data = json!({ "lambda": lambda.source() });
            // Origin `timer`, whatever ran it: the row predates the other lambda hosts.
            log_from(file, "timer", "warn", "lambda_error", message, Some(&data));
        }
        error
    });
    let mut events = observed.events;
    events.extend(call_events(&lambda.source(), calls));
    LambdaReport {
        lambda,
        started_at,
        duration_ms: clock.elapsed().as_secs_f64() * 1000.0,
        error: observed.result,
        written: observed.written,
        custom: custom.take(),
        events,
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
