//! The executor (spec §6, §13.1, §1.5): runs turns of one loop of an agent against a model.
//!
//! Principal types: [`Executor`] (a provider, the model id and parameters, the tool registry),
//! [`Session`] (one loop's in-memory state: the system prompt snapshot, the messages read so
//! far, the counters of §6.3), [`Trigger`] (what starts a turn), [`TurnHost`] (the owner's side:
//! approvals, `ask` answers, progress events), [`TurnOutcome`] and [`ExecutorError`].
//!
//! One turn, in order, each write its own transaction so every completed step is on disk
//! before the next request (§13.1):
//!
//! 1. the checkpoint `in_progress` and the trigger row, together;
//! 2. once per session, the system prompt snapshot as a `[Context: system_prompt]` row; on the
//!    first step, the dynamic instructions as a `[Context: dynamic_instructions]` row (§1.5);
//! 3. a skills catalog changed since the snapshot, as a keyed `[Context: skills_registry]`
//!    row (§5.1; the snapshot is not rewritten); automatic compaction when the last request
//!    reached the loop's threshold (§13.2);
//! 4. the request (system prompt, the transcript without system prompt rows, the advertised
//!    tools, and for this request only the media blocks of `fs_read` calls, media.rs),
//!    streamed to the host; the assistant row with `model` and `tokens`, together with
//!    the checkpoint's `updated_at`;
//! 5. each tool call through the registry (access; an approval is awaited through the host's
//!    `TurnHost::await_approval` with the file given back and other loops free), and its
//!    `tool_result` row — capped per `limits.max_tool_result_tokens` — before the next call;
//! 6. repeat until the turn ends (§6.3): a text-only reply in an interactive loop, the fourth
//!    text-only reply in a row in an autonomous one (the loop goes idle), `sys_set_state`, or
//!    `max_active_turns` (the agent is suspended);
//! 7. the checkpoint `completed` (or `failed` with the reason).
//!
//! How turn tools reach the executor: the registry decides access and approval for `say`,
//! `ask`, `loop_compact` and `loop_clear` like any tool, and their results carry the data
//! (`{"message"}`, `{"question"}`, `{"instructions"}`); the executor, which knows the name of
//! every call it makes, then shows the message, asks the owner (`TurnHost::ask`, awaited
//! without the file; the answer becomes the tool result), compacts after the step, or resets the session after a clear. No marker values
//! travel through the model's transcript.
//!
//! Stored state (§6.1, §6.2): the executor reads `config.state` and refuses to run an agent that
//! is `off` or `suspended`. It writes it only as the runtime may: `suspended` when
//! `max_active_turns` is reached and `idle` after four text-only autonomous replies; the model
//! sets `idle`/`hibernate`/`off` through `sys_set_state`. A turn woken from idle or hibernate
//! leaves the stored state as it found it unless the turn set another, which is "return to the
//! recorded state" without the write. Provider failures never touch it: a transient failure
//! (already retried inside the provider per `recovery`) returns the loop to idle; an auth or
//! request failure puts the in-memory executor state to `error` and logs `turn_error`.

mod checkpoint;
mod compact;
mod media;
mod mesh_updates;
mod pool;
pub mod request;

use std::sync::{Arc, Mutex};

use adf_providers::{
    AssistantMessage, ChatRequest, ContentBlock, Message, ModelParams, Provider, ProviderError,
    ReplyBuilder, ResolvedModel, RetryNotice, RetryObserver, Role, StreamEvent, ToolCall, ToolSpec,
};
use adf_store::skills::REGISTRY_PATH;
use adf_store::{AdfFile, NewLog, NewLoopRow, StoreError};
use futures::StreamExt;
use serde_json::{Value, json};

use crate::prompt::{self, LoopView, PromptTexts, SystemPrompt, TurnFacts};
use crate::tools::builtin::loops::{effective_loop_tools, loop_config};
use crate::tools::{
    ApprovalRequest, Approver, CallStep, Decision, OwnerWait, ToolCaller, ToolError, ToolRegistry,
    render,
};

pub use checkpoint::{Checkpoint, Recovered, key as checkpoint_key, recover};
pub use compact::{COMPACTION_PROMPT, CompactOutcome};
pub use mesh_updates::MeshUpdates;

pub use pool::{LoopPool, LoopResults, autostart_loops, wakes};

/// An agent file that the turns of several loops share (see [`Executor::run_turn_shared`]):
/// borrowed for the whole turn ([`SharedFile::new`], `adf chat`), or leased from the file's
/// store worker one step at a time ([`SharedFile::leased`], the daemon), so that between the
/// steps — while the model answers, while a network tool runs — the worker serves the agent's
/// other jobs.
#[derive(Debug)]
pub struct SharedFile<'a> {
    file: tokio::sync::Mutex<Slot<'a>>,
    /// The config as the last tool batch of any loop left it, so a loop waiting on its model
    /// learns at once that another loop deleted or disabled it (STL-42).
    config: std::sync::Mutex<Option<Arc<Value>>>,
    config_changed: tokio::sync::Notify,
}

/// Where a [`SharedFile`]'s file is.
enum Slot<'a> {
    Borrowed(&'a mut AdfFile),
    Leased {
        handle: adf_store::StoreHandle,
        /// The lease while a step holds the file (boxed: a lease holds the whole file).
        lease: Option<Box<adf_store::Lease>>,
        hooks: Option<Arc<dyn LeaseHooks>>,
    },
}

impl std::fmt::Debug for Slot<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Slot::Borrowed(_) => f.write_str("Borrowed"),
            Slot::Leased { lease, .. } => f
                .debug_struct("Leased")
                .field("held", &lease.is_some())
                .finish_non_exhaustive(),
        }
    }
}

pub use crate::code::LeaseHooks;

impl<'a> SharedFile<'a> {
    /// Shares the borrowed file; loops take turns with it through [`Self::lock`].
    pub fn new(file: &'a mut AdfFile) -> Self {
        Self::with_slot(Slot::Borrowed(file))
    }

    /// Shares the file of `handle`, leased from its worker for each lock and given back when
    /// the guard drops; `hooks` run at each hand-over.
    pub fn leased(handle: adf_store::StoreHandle, hooks: Option<Arc<dyn LeaseHooks>>) -> Self {
        Self::with_slot(Slot::Leased {
            handle,
            lease: None,
            hooks,
        })
    }

    fn with_slot(slot: Slot<'a>) -> Self {
        SharedFile {
            file: tokio::sync::Mutex::new(slot),
            config: std::sync::Mutex::new(None),
            config_changed: tokio::sync::Notify::new(),
        }
    }

    /// Exclusive use of the file until the guard drops (a leased file is taken from its
    /// worker first: an error when the worker is gone or the file cannot be reopened).
    pub async fn lock(&self) -> Result<FileGuard<'_, 'a>, StoreError> {
        let mut slot = self.file.lock().await;
        acquire(&mut slot).await?;
        Ok(FileGuard {
            mutex: &self.file,
            slot: Some(slot),
        })
    }

    /// Publishes the config a tool batch left, waking the loops that wait on their model.
    fn publish_config(&self, config: Arc<Value>) {
        *self
            .config
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(config);
        self.config_changed.notify_waiters();
    }

    /// Completes once a published config no longer declares `loop_name` enabled; pending for
    /// `main` and as long as the loop stays.
    async fn loop_stopped(&self, loop_name: &str) {
        loop {
            // Registered before the check, so a publish between the two is not lost.
            let changed = self.config_changed.notified();
            let published = self
                .config
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            if let Some(config) = published
                && !loop_available(&config, loop_name)
            {
                return;
            }
            changed.await;
        }
    }
}

/// Whether `loop_name` may run: main, or an inner loop declared and enabled.
fn loop_available(config: &Value, loop_name: &str) -> bool {
    loop_name == "main"
        || loop_config(config, loop_name)
            .is_some_and(|l| l.get("enabled").and_then(Value::as_bool) == Some(true))
}

/// Takes a leased slot's file from its worker, if the slot does not hold it.
async fn acquire(slot: &mut Slot<'_>) -> Result<(), StoreError> {
    if let Slot::Leased {
        handle,
        lease,
        hooks,
    } = slot
        && lease.is_none()
    {
        let mut taken = handle.lease().await?;
        if let Some(hooks) = hooks {
            hooks.acquired(&mut taken);
        }
        *lease = Some(Box::new(taken));
    }
    Ok(())
}

/// Gives a leased slot's file back to its worker.
fn give_back(slot: &mut Slot<'_>) {
    if let Slot::Leased { lease, hooks, .. } = slot
        && let Some(mut held) = lease.take()
    {
        // A step cancelled mid-call: its writes are undone before anyone reads them.
        if let Err(error) = held.rollback_open_transaction() {
            tracing::warn!(%error, "cannot roll back a cancelled step");
        }
        if let Some(hooks) = hooks {
            hooks.releasing(&mut held);
        }
        drop(held);
    }
}

/// A [`SharedFile`] locked by one loop's step; a leased file goes back to its worker when
/// the guard drops.
#[derive(Debug)]
pub struct FileGuard<'g, 'a> {
    mutex: &'g tokio::sync::Mutex<Slot<'a>>,
    /// `None` only inside [`FileGuard::unlocked_while`].
    slot: Option<tokio::sync::MutexGuard<'g, Slot<'a>>>,
}

impl FileGuard<'_, '_> {
    /// For code run on this guard's file: the worker's queue a leased file came from, whose
    /// jobs the run serves while it waits (`code::FileQueue`); `None` for a borrowed file.
    pub fn file_queue(&self) -> Option<crate::code::FileQueue> {
        match self.slot.as_deref() {
            Some(Slot::Leased { handle, hooks, .. }) => {
                Some(crate::code::FileQueue::new(handle.clone(), hooks.clone()))
            }
            _ => None,
        }
    }

    /// Awaits `work`, which does not touch the file, with a leased file given back to its
    /// worker meanwhile (the loop keeps its turn on the shared file: no other loop's step
    /// starts in between), then takes it again. A borrowed file stays where it is.
    pub async fn release_while<T>(
        &mut self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, StoreError> {
        if let Some(slot) = self.slot.as_mut() {
            give_back(slot);
        }
        let output = work.await;
        if let Some(slot) = self.slot.as_mut() {
            acquire(slot).await?;
        }
        Ok(output)
    }

    /// Awaits `work`, which does not touch the file, with the file given back to its worker
    /// and the shared file unlocked: other loops' steps run meanwhile, and so do the worker's
    /// jobs. For the owner's waits (an approval, an `ask` answer), which may take hours; the
    /// guard then locks the file and takes it again.
    pub async fn unlocked_while<T>(
        &mut self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, StoreError> {
        if let Some(mut slot) = self.slot.take() {
            give_back(&mut slot);
        }
        let output = work.await;
        let mutex = self.mutex;
        let slot = self.slot.insert(mutex.lock().await);
        acquire(slot).await?;
        Ok(output)
    }
}

impl std::ops::Deref for FileGuard<'_, '_> {
    type Target = AdfFile;

    fn deref(&self) -> &AdfFile {
        match self.slot.as_deref() {
            Some(Slot::Borrowed(file)) => file,
            Some(Slot::Leased {
                lease: Some(lease), ..
            }) => lease,
            _ => unreachable!("a guard holds its file until it drops or releases it"),
        }
    }
}

impl std::ops::DerefMut for FileGuard<'_, '_> {
    fn deref_mut(&mut self) -> &mut AdfFile {
        match self.slot.as_deref_mut() {
            Some(Slot::Borrowed(file)) => file,
            Some(Slot::Leased {
                lease: Some(lease), ..
            }) => lease,
            _ => unreachable!("a guard holds its file until it drops or releases it"),
        }
    }
}

impl Drop for FileGuard<'_, '_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.as_mut() {
            give_back(slot);
        }
    }
}

pub(crate) use crate::provider_log::log_retries;

/// Text-only replies in a row after which an autonomous loop goes idle (§6.3).
pub const AUTONOMOUS_TEXT_ONLY_LIMIT: u32 = 4;
/// The compaction threshold when neither the loop nor `context` sets one (§13.2).
pub const DEFAULT_COMPACT_THRESHOLD: u64 = 100_000;

/// What starts a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// The owner's chat message (`event_type` `chat`). Resets the `max_active_turns` count.
    Owner(String),
    /// A trigger whose text becomes the turn's first row (`event_type` names it).
    Event {
        /// The trigger type, e.g. `on_inbox` or `on_timer`, recorded with the turn.
        event_type: String,
        /// The formatted trigger message the loop reads.
        text: String,
    },
    /// A wake for rows already in the loop (`loop_send` with `wake: true`, an autostart kick):
    /// nothing new is recorded, the loop reads what is waiting.
    Wake {
        /// What woke the loop, e.g. `loop_send`.
        event_type: String,
    },
}

impl Trigger {
    fn event_type(&self) -> &str {
        match self {
            Trigger::Owner(_) => "chat",
            Trigger::Event { event_type, .. } | Trigger::Wake { event_type } => event_type,
        }
    }

    fn text(&self) -> Option<&str> {
        match self {
            Trigger::Owner(text) | Trigger::Event { text, .. } => Some(text),
            Trigger::Wake { .. } => None,
        }
    }
}

/// The in-memory executor state of a loop (§6.1); never stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecState {
    /// No turn is running; the loop waits for a trigger.
    Idle,
    /// A model request is in flight.
    Thinking,
    /// The model's tool calls are running.
    ToolUse,
    /// A restricted call waits for the owner's approval.
    AwaitingApproval,
    /// An `ask` waits for the owner's answer.
    AwaitingAsk,
    /// `max_active_turns` was reached; no turn starts until the owner resumes the agent.
    Suspended,
    /// The last turn failed on a non-transient error.
    Error,
    /// An inner loop set itself `off`; it runs no more turns.
    Stopped,
}

/// Progress of a turn, for display.
#[derive(Debug)]
#[non_exhaustive]
pub enum TurnEvent<'a> {
    /// Reply text as it streams.
    TextDelta(&'a str),
    /// Reasoning text as it streams.
    ThinkingDelta(&'a str),
    /// The model's complete reply of one step.
    Reply(&'a AssistantMessage),
    /// A tool call is about to run.
    ToolCall(&'a ToolCall),
    /// A tool call finished; `content` is what the model will read.
    ToolResult {
        /// The call that finished.
        call: &'a ToolCall,
        /// The result text as the model reads it.
        content: &'a str,
        /// The call failed or was refused; `content` explains why.
        is_error: bool,
    },
    /// `say`.
    Say(&'a str),
    /// A transient provider failure; the provider retries after the delay.
    Retry(&'a RetryNotice),
    /// A stream broke after it started; the step is requested again.
    StreamRestarted(&'a ProviderError),
    /// The transcript was compacted.
    Compacted(&'a CompactOutcome),
    /// The executor state changed.
    State(ExecState),
}

/// The owner's side of a turn.
pub trait TurnHost: Sync {
    /// Decides approvals of restricted calls and protection overrides.
    fn approver(&self) -> &dyn Approver;
    /// Answers an `ask`; `None` when no one can (the model is told so).
    fn answer(&self, question: &str) -> Option<String>;
    /// The owner's decision on `request`, whose task row (`pending_approval`) exists. Called
    /// with the file held and no transaction open, so a host can register the wait before
    /// anyone could answer it; the executor then awaits the returned wait with the file given
    /// back to its worker and other loops free to step (the daemon). The default asks
    /// [`TurnHost::approver`] right here, holding the file (a terminal prompt, a test).
    fn await_approval<'h>(
        &'h self,
        file: &mut AdfFile,
        request: &ApprovalRequest,
    ) -> OwnerWait<'h, Result<Decision, ToolError>> {
        let decision = self.approver().decide(file, request);
        Box::pin(std::future::ready(decision))
    }
    /// The owner's answer to an `ask`, awaited like [`TurnHost::await_approval`]'s wait
    /// (the file given back meanwhile); `None` when no one can answer. The default asks
    /// [`TurnHost::answer`] right here.
    fn ask<'h>(&'h self, question: &str) -> OwnerWait<'h, Option<String>> {
        Box::pin(std::future::ready(self.answer(question)))
    }
    /// Observes progress.
    fn event(&self, _event: &TurnEvent<'_>) {}
    /// Whether the owner aborted the turn. A host whose approvals and asks give up when the
    /// turn is aborted (a denial, no answer) says so here: the turn then ends after that call
    /// ([`ExecutorError::Aborted`]) instead of showing the model the denial and going on.
    fn aborted(&self) -> bool {
        false
    }
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    /// A text reply ended an interactive turn.
    Replied,
    /// `sys_set_state` set this state (for an inner loop: that loop's executor only).
    StateSet(String),
    /// An autonomous loop replied with text only four times in a row and went idle.
    AutonomousIdle,
    /// `max_active_turns` was reached: the agent is suspended.
    Suspended,
}

/// The result of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// Why the turn stopped.
    pub end: TurnEnd,
    /// Model requests made (compaction requests not counted).
    pub steps: u32,
    /// The text of the last reply.
    pub reply: String,
    /// Loops a `loop_send`/`loop_manage` of this turn asked to wake, each once.
    pub wakes: Vec<String>,
}

/// A failed turn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecutorError {
    /// Reading or writing the agent file failed; the turn stopped where it was.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The model request failed after the provider's retries.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// A tool failure the turn could not hand back to the model (it ended the turn).
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// The agent's stored state does not allow a turn.
    #[error("the agent is {state}; {fix}")]
    NotRunnable {
        /// The state that refuses turns, e.g. `off` or `suspended`.
        state: String,
        /// What the owner can do about it.
        fix: String,
    },
    /// The loop is not declared or is disabled; the dispatch was dropped and logged.
    #[error("loop '{0}' does not exist or is disabled; the dispatch was dropped")]
    LoopUnavailable(String),
    /// Another loop deleted or disabled this one while its turn ran: the turn was aborted
    /// at its next wait (a model answer in flight is dropped unrecorded, §6.4 STL-42).
    #[error("loop '{0}' was deleted or disabled; its turn was aborted")]
    LoopStopped(String),
    /// The owner aborted the turn ([`TurnHost::aborted`]): it ended after the call in
    /// progress, its checkpoint left `in_progress` for the loop's next session to recover
    /// without replay. The host records the abort.
    #[error("the owner aborted the turn")]
    Aborted,
}

/// The observer a resolver may be built with ([`adf_providers::Resolver::with_retry_observer`]).
/// The executor no longer needs it: each request's retries reach it through
/// [`adf_providers::watch_retries`], live and kept apart per loop; what this collects is
/// discarded after each request. Kept so hosts that pass one still build.
#[derive(Clone, Default)]
pub struct RetryLog(Arc<Mutex<Vec<RetryNotice>>>);

impl std::fmt::Debug for RetryLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryLog").finish_non_exhaustive()
    }
}

impl RetryLog {
    /// The observer to hand to [`adf_providers::Resolver::with_retry_observer`].
    pub fn observer(&self) -> RetryObserver {
        let inner = self.0.clone();
        Arc::new(move |notice: &RetryNotice| {
            inner
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(notice.clone());
        })
    }

    fn drain(&self) -> Vec<RetryNotice> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// One loop's in-memory state across turns.
#[derive(Debug)]
pub struct Session {
    loop_name: String,
    prompt: Option<SystemPrompt>,
    /// The skills catalog (`skills-registry.json`) as last delivered to this session: in the
    /// prompt snapshot, or by a later catalog injection. `None` when the prompt does not
    /// inject the catalog.
    catalog: Option<Vec<u8>>,
    /// The files version `catalog` was read at: while it holds, the catalog is unchanged and
    /// the step does not read it again.
    catalog_version: Option<adf_store::skills::FilesVersion>,
    /// Media blocks for the next request, by the `fs_read` call they answer (never stored).
    media: std::collections::HashMap<String, Vec<ContentBlock>>,
    messages: Vec<Message>,
    /// The messages of the last request (taken back from it) and how many of `messages` they
    /// were assembled from, for the next request to extend (`request::assemble_after`).
    assembled: Option<(usize, Vec<Message>)>,
    /// How many of `messages` the request in flight was assembled from; `None` when its
    /// messages carry media for that request only, so they cannot be reused.
    assembled_len: Option<usize>,
    /// The wire bytes of this loop's messages, kept for the provider (see [`WireCaches`]).
    wire: adf_providers::WireCache,
    last_seq: i64,
    loaded: bool,
    text_only_streak: u32,
    active_turns: u64,
    context_tokens: u64,
    context_warning_given: bool,
    state: ExecState,
    /// The advertised tools, with the declarations (and loop entry) they were built from.
    tool_cache: Option<ToolCache>,
    /// Keyed `loop_inject` contexts not yet sent to the model, by key: the index of their
    /// message. A later injection with the same key replaces the pending one (COD-27).
    pending_keys: std::collections::HashMap<String, usize>,
    /// What recovery did when the session opened.
    pub recovered: Option<Recovered>,
}

/// The tools a session advertised and what they were built from. The config they came from is
/// kept: the store hands out the same parsed config until it changes, so an unchanged config is
/// recognised by identity, without comparing (or cloning) forty-odd declarations every step.
#[derive(Debug)]
struct ToolCache {
    config: Arc<Value>,
    declarations: Value,
    loop_entry: Value,
    specs: Arc<[ToolSpec]>,
}

impl Session {
    fn new(loop_name: &str, recovered: Option<Recovered>, wire: adf_providers::WireCache) -> Self {
        Session {
            loop_name: loop_name.to_owned(),
            prompt: None,
            catalog: None,
            catalog_version: None,
            media: std::collections::HashMap::new(),
            messages: Vec::new(),
            assembled: None,
            assembled_len: None,
            wire,
            last_seq: 0,
            loaded: false,
            text_only_streak: 0,
            active_turns: 0,
            context_tokens: 0,
            context_warning_given: false,
            state: ExecState::Idle,
            tool_cache: None,
            pending_keys: std::collections::HashMap::new(),
            recovered,
        }
    }

    /// The loop this session runs.
    pub fn loop_name(&self) -> &str {
        &self.loop_name
    }

    /// The executor state.
    pub fn state(&self) -> ExecState {
        self.state
    }

    /// The prompt size of the last request as the provider reported it.
    pub fn context_tokens(&self) -> u64 {
        self.context_tokens
    }

    /// Forgets the snapshot and the messages read (after compaction or a clear): the next
    /// request re-reads the transcript and records a new system prompt (§5.1 session reset).
    pub fn reset(&mut self) {
        self.prompt = None;
        self.catalog = None;
        self.catalog_version = None;
        self.media.clear();
        self.messages.clear();
        self.assembled = None;
        self.assembled_len = None;
        self.pending_keys.clear();
        self.last_seq = 0;
        self.loaded = false;
        self.context_warning_given = false;
    }

    fn set_state(&mut self, state: ExecState, host: &dyn TurnHost) {
        if self.state != state {
            self.state = state;
            host.event(&TurnEvent::State(state));
        }
    }
}

/// A step's request, prepared before the model is asked, and the config it was built from.
struct PreparedStep {
    config: Arc<Value>,
    req: ChatRequest,
}

/// Per-turn facts read from the config.
struct LoopFacts {
    autonomous: bool,
    threshold: u64,
    goal: Option<String>,
    /// `None` for main (all advertised tools).
    tools: Option<std::collections::BTreeSet<String>>,
    max_active_turns: Option<u64>,
    max_result_tokens: u64,
    preview_chars: usize,
}

/// One reply's tool calls as the step hands them to [`Executor::run_tool_batch`]: the calls,
/// the config the step's request was built with, and the reply row they answer.
struct ToolBatch<'a> {
    config: &'a Value,
    calls: &'a [ToolCall],
    assistant_seq: i64,
}

/// What one tool call asks of the executor after its result is recorded.
enum Effect {
    None,
    EndTurn(String),
    Compact(Option<String>),
    Reset,
    Wake(String),
    /// An `_async` call queued this `running` task; it runs after the batch's results are
    /// recorded, so the model's transcript holds the task reference first.
    RunTask(String),
}

/// Runs turns against one model.
#[derive(Clone)]
pub struct Executor {
    provider: Arc<dyn Provider>,
    model_id: String,
    params: ModelParams,
    registry: Arc<ToolRegistry>,
    texts: PromptTexts,
    retries: RetryLog,
    /// The code runner for deferred `sys_code` / `sys_lambda` calls; made on first use
    /// unless [`Executor::with_code`] supplied one (one sandbox per agent, §9).
    code: tokio::sync::OnceCell<Arc<crate::code::CodeEnv>>,
    /// Where `emit_event` from the model's code goes when the code runner is made here.
    events: Option<Arc<dyn crate::code::EventSink>>,
    /// The agent's wire caches, when they outlive this executor (the daemon's).
    wire: Option<WireCaches>,
    /// The host's mesh, for main's `mesh_updates` (§5.19); `None` without a mesh.
    mesh_updates: Option<MeshUpdates>,
}

/// The wire caches of one agent's loops ([`adf_providers::WireCache`], one per loop), for a
/// host that makes a new executor (and sessions) for every turn, as the daemon does: kept
/// with the agent and handed to each executor with [`Executor::with_wire_caches`], the
/// messages of earlier turns are not serialized again. Without it a session keeps its own.
#[derive(Debug, Clone, Default)]
pub struct WireCaches(Arc<Mutex<std::collections::HashMap<String, adf_providers::WireCache>>>);

impl WireCaches {
    /// The cache of `loop_name`, made on first use.
    pub fn of(&self, loop_name: &str) -> adf_providers::WireCache {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(loop_name.to_owned())
            .or_default()
            .clone()
    }
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("provider", &self.provider.id())
            .field("model_id", &self.model_id)
            .finish_non_exhaustive()
    }
}

impl Executor {
    /// An executor for `model_id` at `provider` with every built-in tool.
    pub fn new(
        provider: Arc<dyn Provider>,
        model_id: impl Into<String>,
        params: ModelParams,
    ) -> Self {
        Executor {
            provider,
            model_id: model_id.into(),
            params,
            registry: Arc::new(ToolRegistry::with_builtins()),
            texts: PromptTexts::default(),
            retries: RetryLog::default(),
            code: tokio::sync::OnceCell::new(),
            events: None,
            wire: None,
            mesh_updates: None,
        }
    }

    /// Tells main which agents of the host's mesh it can reach whenever that list changes
    /// (`mesh_updates`, §5.19); `updates` is kept by the host with the agent so the list
    /// last delivered outlives this executor.
    pub fn with_mesh_updates(mut self, updates: MeshUpdates) -> Self {
        self.mesh_updates = Some(updates);
        self
    }

    /// Keeps the sessions' wire caches in `caches` (the agent's), so they outlive this
    /// executor (see [`WireCaches`]).
    pub fn with_wire_caches(mut self, caches: WireCaches) -> Self {
        self.wire = Some(caches);
        self
    }

    /// Hands `emit_event`'s `custom.*` events of the model's code to `sink` (the daemon's
    /// bus), for the code runner this executor makes on first use.
    pub fn with_event_sink(mut self, sink: Arc<dyn crate::code::EventSink>) -> Self {
        self.events = Some(sink);
        self
    }

    /// Runs the model's `sys_code` / `sys_lambda` calls with this code environment (its
    /// sandbox, registry and keys) instead of a default one.
    pub fn with_code(self, env: Arc<crate::code::CodeEnv>) -> Self {
        let _ = self.code.set(env);
        self
    }

    /// An executor for a resolved model. Pass the [`RetryLog`] whose observer the resolver
    /// was built with, so retries are logged in the file.
    pub fn from_resolved(resolved: ResolvedModel, retries: RetryLog) -> Self {
        let mut executor = Self::new(resolved.provider, resolved.model_id, resolved.params);
        executor.retries = retries;
        executor
    }

    /// Replaces the tool registry.
    pub fn with_registry(mut self, registry: Arc<ToolRegistry>) -> Self {
        self.registry = registry;
        self
    }

    /// Replaces the runtime-authored prompt texts.
    pub fn with_prompt_texts(mut self, texts: PromptTexts) -> Self {
        self.texts = texts;
        self
    }

    /// The model id requests name.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The executor for `loop_name` when the loop names its own `model` (§6.4): a copy with
    /// the loop's `model_id`, `temperature`, `max_tokens` and `top_p` over the agent's. `None`
    /// when the loop has no override or the override does not apply: it must use the agent's
    /// provider, and it applies only while `sys_code` or `sys_lambda` is enabled
    /// (missing-tables §6.4). Reasoning and extra params stay the agent's.
    pub fn for_loop(&self, config: &Value, loop_name: &str) -> Option<Executor> {
        let model = loop_config(config, loop_name)?.get("model")?.as_object()?;
        let provider = model
            .get("provider")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty());
        if provider.is_some_and(|p| p != adf_providers::Resolver::provider_id(config)) {
            return None;
        }
        let (declarations, _) = crate::tools::access::declarations(config);
        let code_enabled = declarations
            .iter()
            .any(|d| d.enabled && matches!(d.name.as_str(), "sys_code" | "sys_lambda"));
        if !code_enabled {
            return None;
        }
        let mut executor = self.clone();
        if let Some(id) = model
            .get("model_id")
            .and_then(Value::as_str)
            .filter(|id| !id.trim().is_empty())
        {
            executor.model_id = id.trim().to_owned();
        }
        let number = |key: &str| model.get(key).and_then(Value::as_f64);
        if let Some(t) = number("temperature") {
            executor.params.temperature = Some(t);
        }
        if let Some(t) = model.get("max_tokens").and_then(Value::as_u64) {
            executor.params.max_tokens = Some(t);
        }
        if let Some(p) = number("top_p") {
            executor.params.top_p = Some(p);
        }
        Some(executor)
    }

    /// Opens a session on `loop_name`, recovering an interrupted turn first (never replayed).
    pub fn open_session(
        &self,
        file: &mut AdfFile,
        loop_name: &str,
    ) -> Result<Session, ExecutorError> {
        let recovered = recover(file, loop_name)?;
        let wire = match &self.wire {
            Some(caches) => caches.of(loop_name),
            None => adf_providers::WireCache::default(),
        };
        Ok(Session::new(loop_name, recovered, wire))
    }

    fn loop_facts(&self, config: &Value, loop_name: &str) -> Result<LoopFacts, ExecutorError> {
        let limits = config.get("limits");
        let limit = |name: &str| limits.and_then(|l| l.get(name)).and_then(Value::as_u64);
        let context_threshold =
            prompt::at(config, "/context/compact_threshold").and_then(Value::as_u64);
        let mut facts = LoopFacts {
            autonomous: config.get("autonomous").and_then(Value::as_bool) == Some(true),
            threshold: context_threshold.unwrap_or(DEFAULT_COMPACT_THRESHOLD),
            goal: None,
            tools: None,
            max_active_turns: limit("max_active_turns"),
            max_result_tokens: limit("max_tool_result_tokens").unwrap_or(16_000),
            preview_chars: limit("max_tool_result_preview_chars").unwrap_or(5_000) as usize,
        };
        if loop_name != "main" {
            let Some(lp) = loop_config(config, loop_name)
                .filter(|l| l.get("enabled").and_then(Value::as_bool) == Some(true))
            else {
                return Err(ExecutorError::LoopUnavailable(loop_name.to_owned()));
            };
            // Not inherited from config.autonomous (§6.4 table, STL-46).
            facts.autonomous = lp.get("autonomous").and_then(Value::as_bool) == Some(true);
            if let Some(t) = lp.get("compact_threshold").and_then(Value::as_u64) {
                facts.threshold = t;
            }
            facts.goal = lp.get("goal").and_then(Value::as_str).map(str::to_owned);
            facts.tools = Some(effective_loop_tools(config, lp));
        }
        Ok(facts)
    }

    /// Runs one turn of `session`'s loop. See the module docs for the order of writes.
    pub async fn run_turn(
        &self,
        file: &mut AdfFile,
        session: &mut Session,
        trigger: Trigger,
        host: &dyn TurnHost,
    ) -> Result<TurnOutcome, ExecutorError> {
        let shared = SharedFile::new(file);
        self.run_turn_shared(&shared, session, trigger, host).await
    }

    /// [`Executor::run_turn`] on a file other loops of the agent share: the file is locked for
    /// each store step and released while the model answers, so the turns of several loops,
    /// polled together on one task, run side by side (§6.4). Tool calls keep the lock for
    /// their whole run (one transaction each; code runs hold it too); a leased file goes back
    /// to its worker while a detached tool's network work runs ([`FileGuard::release_while`]),
    /// the loop keeping the lock; while the owner decides an approval or answers an `ask`,
    /// the loop gives back both ([`FileGuard::unlocked_while`]).
    pub async fn run_turn_shared(
        &self,
        shared: &SharedFile<'_>,
        session: &mut Session,
        trigger: Trigger,
        host: &dyn TurnHost,
    ) -> Result<TurnOutcome, ExecutorError> {
        let mut guard = shared.lock().await?;
        let file: &mut AdfFile = &mut guard;
        let config = file.config_shared()?;
        let loop_name = session.loop_name.clone();
        let facts = match self.loop_facts(&config, &loop_name) {
            Ok(facts) => facts,
            Err(ExecutorError::LoopUnavailable(name)) => {
                log_dropped(file, &name, trigger.event_type())?;
                return Err(ExecutorError::LoopUnavailable(name));
            }
            Err(e) => return Err(e),
        };
        ensure_runnable(&config, session)?;
        if matches!(trigger, Trigger::Owner(_)) {
            session.active_turns = 0;
        }
        if let Some(max) = facts.max_active_turns
            && session.active_turns >= max
        {
            self.suspend(file, session, max, host)?;
            return Ok(TurnOutcome {
                end: TurnEnd::Suspended,
                steps: 0,
                reply: String::new(),
                wakes: Vec::new(),
            });
        }
        session.active_turns += 1;
        session.text_only_streak = 0;

        let mut checkpoint = Checkpoint::start(trigger.event_type());
        // One transaction opens the turn: the checkpoint, the trigger row, the session's
        // system prompt snapshot (first turn of a session) and the dynamic instructions; and
        // the first step's request is prepared inside it. Its reads (the config and files
        // versions, the new rows) then share the transaction's lock instead of taking and
        // dropping a WAL read lock each, and while the write lock is held no other connection
        // can commit, so they see what they would see right after the commit. A failure of
        // that preparation is kept for the step, as if it had happened there.
        let mut first_step = None;
        file.atomically(|file| -> Result<(), ExecutorError> {
            checkpoint.store(file, &loop_name)?;
            if let Some(text) = trigger.text() {
                append(
                    file,
                    &loop_name,
                    "user",
                    &json!([{ "type": "text", "text": text }]),
                    None,
                    None,
                )?;
            }
            self.ensure_prompt(file, session, &config, &facts)?;
            self.append_dynamic_instructions(file, session, &config, &facts)?;
            first_step = Some(self.prepare_step(file, session, &facts));
            Ok(())
        })?;
        drop(guard);
        let result = self
            .turn_body(shared, session, &facts, &mut checkpoint, host, first_step)
            .await;
        let mut guard = shared.lock().await?;
        close_turn(&mut guard, session, &mut checkpoint, &result, host)?;
        result
    }

    /// Appends the `[Context: dynamic_instructions]` row of a turn's first step, if the
    /// config asks for any (§1.5: recorded before it is sent).
    fn append_dynamic_instructions(
        &self,
        file: &mut AdfFile,
        session: &mut Session,
        config: &Value,
        facts: &LoopFacts,
    ) -> Result<(), ExecutorError> {
        let near = facts
            .threshold
            .saturating_sub(prompt::CONTEXT_WARNING_MARGIN);
        let dynamic = prompt::dynamic_instructions(
            file,
            config,
            LoopView {
                name: &session.loop_name,
                instructions: facts.goal.as_deref(),
            },
            TurnFacts {
                context_tokens: session.context_tokens,
                context_warning_given: session.context_warning_given,
            },
        )?;
        let dynamic = match (dynamic, self.mesh_change(file, session, config)) {
            (Some(text), Some(mesh)) => Some(format!("{text}\n{mesh}")),
            (text, mesh) => text.or(mesh),
        };
        if let Some(text) = dynamic {
            if session.context_tokens >= near {
                session.context_warning_given = true;
            }
            let row =
                json!([{ "type": "text", "text": format!("{}{text}", request::DYNAMIC_MARKER) }]);
            append(file, &session.loop_name, "user", &row, None, None)?;
        }
        Ok(())
    }

    /// Main's `mesh_updates` line when the reachable agents changed since last delivered.
    fn mesh_change(&self, file: &AdfFile, session: &Session, config: &Value) -> Option<String> {
        let updates = self.mesh_updates.as_ref()?;
        let switched_on = prompt::at(config, "/context/dynamic_instructions/mesh_updates")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        // Checked every step: the cheap tests first, the tool declarations only when there may
        // be something to announce.
        if session.loop_name != "main" || !switched_on || updates.roster_unchanged() {
            return None;
        }
        let can_send = crate::tools::access::declarations(config)
            .0
            .iter()
            .any(|d| d.name == "msg_send" && d.enabled);
        if !can_send {
            return None;
        }
        updates.change(file.path())
    }

    fn suspend(
        &self,
        file: &mut AdfFile,
        session: &mut Session,
        max: u64,
        host: &dyn TurnHost,
    ) -> Result<(), ExecutorError> {
        let loop_name = session.loop_name.clone();
        if loop_name == "main" {
            file.config_set_path(
                adf_store::Caller::Owner,
                "state",
                adf_store::ConfigAction::Set,
                json!("suspended"),
            )?;
        }
        session.set_state(ExecState::Suspended, host);
        file.log(&NewLog {
            level: "warn",
            origin: Some("executor"),
            event: Some("max_active_turns"),
            target: Some(&loop_name),
            message: &format!(
                "{max} consecutive turns reached limits.max_active_turns; suspended until the owner resumes"
            ),
            data: None,
            r#loop: (loop_name != "main").then_some(loop_name.as_str()),
        })?;
        Ok(())
    }

    async fn turn_body(
        &self,
        shared: &SharedFile<'_>,
        session: &mut Session,
        facts: &LoopFacts,
        checkpoint: &mut Checkpoint,
        host: &dyn TurnHost,
        mut first_step: Option<Result<Option<PreparedStep>, ExecutorError>>,
    ) -> Result<TurnOutcome, ExecutorError> {
        let mut steps = 0u32;
        let mut wakes: Vec<String> = Vec::new();
        let loop_name = session.loop_name.clone();
        loop {
            if host.aborted() {
                return Err(ExecutorError::Aborted);
            }
            let mut guard = shared.lock().await?;
            let file: &mut AdfFile = &mut guard;
            let prepared = match first_step.take() {
                Some(prepared) => prepared?,
                None => self.prepare_step(file, session, facts)?,
            };
            let Some(PreparedStep { config, mut req }) = prepared else {
                // Compacted or not (nothing left to summarize), the context size is reset, so
                // the step prepared next goes on to the model.
                self.compact_full_context(file, session, host).await?;
                continue;
            };
            session.set_state(ExecState::Thinking, host);
            // The model's answer is the long wait of a step: other loops use the file meanwhile.
            drop(guard);
            // Deleting or disabling a loop is never refused because it is busy: its model
            // answer is abandoned instead (STL-42).
            let (reply, retried) = tokio::select! {
                reply = self.watched(host, self.request_reply(&req, host)) => reply,
                () = shared.loop_stopped(&loop_name) => {
                    return Err(ExecutorError::LoopStopped(loop_name));
                }
            };
            let mut guard = shared.lock().await?;
            let file: &mut AdfFile = &mut guard;
            log_retries(file, Some(&session.loop_name), &retried)?;
            let reply = reply?;
            let assistant_seq =
                self.record_reply(file, session, facts, checkpoint, (&req, &reply), || {
                    steps += 1;
                    host.event(&TurnEvent::Reply(&reply));
                })?;
            if let Some(len) = session.assembled_len.take() {
                session.assembled = Some((len, std::mem::take(&mut req.messages)));
            }
            let calls = reply.tool_calls();
            let text = reply.text();
            let end = if calls.is_empty() {
                self.after_text_reply(file, session, facts, host)?
            } else {
                session.text_only_streak = 0;
                let end = self
                    .run_tool_batch(
                        &mut guard,
                        session,
                        facts,
                        ToolBatch {
                            config: &config,
                            calls: &calls,
                            assistant_seq,
                        },
                        host,
                        &mut wakes,
                    )
                    .await?;
                shared.publish_config(guard.config_shared()?);
                end
            };
            if let Some(end) = end {
                return Ok(TurnOutcome {
                    end,
                    steps,
                    reply: text,
                    wakes,
                });
            }
        }
    }

    /// Compacts the loop whose context reached the threshold, then resets the context size
    /// either way: with nothing left to summarize, compacting again before the next reply
    /// reports a new size would only repeat itself.
    async fn compact_full_context(
        &self,
        file: &mut AdfFile,
        session: &mut Session,
        host: &dyn TurnHost,
    ) -> Result<(), ExecutorError> {
        let outcome = self.compact(file, session, None, None).await?;
        session.context_tokens = 0;
        if let Some(outcome) = outcome {
            host.event(&TurnEvent::Compacted(&outcome));
        }
        Ok(())
    }

    /// The request of the next step: the loop's transcript (opening with a user message), its
    /// media and the tools it may call.
    fn next_request(
        &self,
        file: &mut AdfFile,
        session: &mut Session,
        config: &Arc<Value>,
        facts: &LoopFacts,
        system: String,
    ) -> Result<ChatRequest, ExecutorError> {
        self.sync_messages(file, session)?;
        let mut messages = request::assemble_after(session.assembled.take(), &session.messages);
        if messages.first().map(|m| m.role) != Some(Role::User) {
            // After a loop_clear that took the whole conversation, the next request still
            // needs a user message first; it is recorded like any runtime text (§1.5).
            let note = format!(
                "{}The transcript before this point was cleared. Continue from here.",
                request::DYNAMIC_MARKER
            );
            append(
                file,
                &session.loop_name,
                "user",
                &json!([{ "type": "text", "text": note }]),
                None,
                None,
            )?;
            self.sync_messages(file, session)?;
            messages = request::assemble(&session.messages);
        }
        session.assembled_len = session.media.is_empty().then_some(session.messages.len());
        media::attach(&mut messages, &mut session.media);
        Ok(ChatRequest {
            model: self.model_id.clone(),
            system: Some(system).filter(|s| !s.is_empty()),
            messages,
            tools: self.tool_specs(session, config, facts),
            params: self.params.clone(),
            wire: session.wire.clone(),
        })
    }

    /// Stores the model's reply (and the checkpoint) and updates the context size; returns the
    /// reply row's sequence number. The loop must still be available when the reply arrives
    /// (STL-42); that is checked inside the reply's transaction, where its config read shares
    /// the write lock, and `accepted` runs once it passed, before anything is written.
    fn record_reply(
        &self,
        file: &mut AdfFile,
        session: &mut Session,
        facts: &LoopFacts,
        checkpoint: &mut Checkpoint,
        (req, reply): (&ChatRequest, &AssistantMessage),
        accepted: impl FnOnce(),
    ) -> Result<i64, ExecutorError> {
        let usage = reply.usage;
        session.context_tokens = if usage.prompt_tokens() + usage.output > 0 {
            usage.prompt_tokens() + usage.output
        } else {
            request::estimate_tokens(serde_json::to_string(&req.messages).map_or(0, |s| s.len()))
        };
        let content = serde_json::to_value(&reply.content).unwrap_or(Value::Array(Vec::new()));
        let tokens = serde_json::to_value(usage).ok();
        checkpoint.updated_at = adf_store::time::now_ms();
        // An interactive text reply ends the turn: its row and the `completed` checkpoint
        // are one transaction.
        if reply.tool_calls().is_empty() && !facts.autonomous {
            checkpoint.finish("completed", None);
        }
        let loop_name = &session.loop_name;
        file.atomically(|file| -> Result<i64, ExecutorError> {
            if !loop_available(&*file.config_shared()?, loop_name) {
                return Err(ExecutorError::LoopStopped(loop_name.clone()));
            }
            accepted();
            checkpoint.store(file, loop_name)?;
            Ok(append(
                file,
                loop_name,
                "assistant",
                &content,
                Some(&self.model_id),
                tokens.as_ref(),
            )?)
        })
    }

    /// The part of a step before the model is asked: the config (the loop must still be
    /// available), the system prompt snapshot, a changed skills catalog, and the request.
    /// `None` when the context reached the compaction threshold: the caller compacts first (it
    /// awaits the model, so it cannot run inside the turn's opening transaction).
    fn prepare_step(
        &self,
        file: &mut AdfFile,
        session: &mut Session,
        facts: &LoopFacts,
    ) -> Result<Option<PreparedStep>, ExecutorError> {
        let config = file.config_shared()?;
        if !loop_available(&config, &session.loop_name) {
            return Err(ExecutorError::LoopStopped(session.loop_name.clone()));
        }
        self.ensure_prompt(file, session, &config, facts)?;
        let system = system_text(session);
        self.deliver_catalog_change(file, session)?;
        if session.context_tokens >= facts.threshold {
            return Ok(None);
        }
        let req = self.next_request(file, session, &config, facts, system)?;
        Ok(Some(PreparedStep { config, req }))
    }

    /// A reply without tool calls: it ends an interactive turn; an autonomous loop goes idle
    /// after repeated text-only replies, is suspended at `max_active_turns`, or is reminded to
    /// use its tools and continues (`None`).
    fn after_text_reply(
        &self,
        file: &mut AdfFile,
        session: &mut Session,
        facts: &LoopFacts,
        host: &dyn TurnHost,
    ) -> Result<Option<TurnEnd>, ExecutorError> {
        if !facts.autonomous {
            return Ok(Some(TurnEnd::Replied));
        }
        session.text_only_streak += 1;
        if session.text_only_streak >= AUTONOMOUS_TEXT_ONLY_LIMIT {
            self.go_idle(file, session, host)?;
            return Ok(Some(TurnEnd::AutonomousIdle));
        }
        if let Some(max) = facts.max_active_turns
            && session.active_turns >= max
        {
            self.suspend(file, session, max, host)?;
            return Ok(Some(TurnEnd::Suspended));
        }
        session.active_turns += 1;
        let reminder = format!(
            "{}You replied without calling a tool. You are running autonomously: continue the work with your tools, or call sys_set_state with \"idle\" when it is done.",
            request::DYNAMIC_MARKER
        );
        append(
            file,
            &session.loop_name,
            "user",
            &json!([{ "type": "text", "text": reminder }]),
            None,
            None,
        )?;
        Ok(None)
    }

    /// Runs one reply's tool calls in order and records their results, then carries out the
    /// queued `_async` tasks, the injected contexts, a reset or compaction they asked for.
    /// Returns how the turn ends when a call set the state.
    async fn run_tool_batch(
        &self,
        guard: &mut FileGuard<'_, '_>,
        session: &mut Session,
        facts: &LoopFacts,
        batch: ToolBatch<'_>,
        host: &dyn TurnHost,
        wakes: &mut Vec<String>,
    ) -> Result<Option<TurnEnd>, ExecutorError> {
        let ToolBatch {
            config,
            calls,
            assistant_seq,
        } = batch;
        let loop_name = session.loop_name.clone();
        let mut end = None;
        let mut compact = None;
        let mut reset = false;
        let mut injections = Vec::new();
        let mut queued = Vec::new();
        for call in calls {
            let (result, effect) = self
                .run_tool(guard, session, facts, call, host, &mut injections)
                .await?;
            let (content, is_error) = result;
            let file: &mut AdfFile = guard;
            if call.name == "fs_read"
                && !is_error
                && let Some(block) = media::block_for_read(file, config, &call.input)?
            {
                session.media.insert(call.id.clone(), vec![block]);
            }
            let row = json!([{
                "type": "tool_result",
                "tool_use_id": call.id,
                "content": content,
                "is_error": is_error,
            }]);
            append(file, &loop_name, "user", &row, None, None)?;
            host.event(&TurnEvent::ToolResult {
                call,
                content: &content,
                is_error,
            });
            match effect {
                Effect::None => {}
                Effect::EndTurn(state) => end = Some(state),
                Effect::Compact(instructions) => compact = Some(instructions),
                Effect::Reset => reset = true,
                Effect::Wake(target) => {
                    if !wakes.contains(&target) {
                        wakes.push(target);
                    }
                }
                Effect::RunTask(task_id) => queued.push(task_id),
            }
            // The owner's abort ended this call's approval or ask wait early; nothing after
            // the wait runs, whether or not the host's next await would have stopped it.
            if host.aborted() {
                return Err(ExecutorError::Aborted);
            }
            // Code this call ran (`sys_code`, `sys_lambda`) may have set the agent `off`
            // through `sys_set_state`; unlike idle/hibernate, off is never deferred to the
            // end of the turn (AO:sys_set_state, §6.1): no further call and no request.
            if end.is_none()
                && file.config_shared()?.get("state").and_then(Value::as_str) == Some("off")
            {
                end = Some("off".to_owned());
                break;
            }
        }
        let queue = guard.file_queue();
        let file: &mut AdfFile = guard;
        for task_id in queued {
            self.run_queued_task(
                file,
                queue.as_ref(),
                session,
                &task_id,
                host,
                &mut injections,
            )
            .await;
        }
        // `loop_inject` contexts from code run in this batch land after its results, so a
        // context never splits a tool_use / tool_result pair.
        if !injections.is_empty() {
            crate::code::store_injections(file, &injections)?;
        }
        if reset {
            session.reset();
        }
        if let Some(instructions) = compact
            && let Some(outcome) = self
                .compact(file, session, instructions.as_deref(), Some(assistant_seq))
                .await?
        {
            host.event(&TurnEvent::Compacted(&outcome));
        }
        let Some(state) = end else {
            return Ok(None);
        };
        if loop_name != "main" && state == "off" {
            session.set_state(ExecState::Stopped, host);
        }
        Ok(Some(TurnEnd::StateSet(state)))
    }

    /// Carries out an `_async` call's `running` task and records its outcome on the task (the
    /// model reads it with `db_query` or a later trigger; `on_task_complete` sees the row). A
    /// failure is the task's, never the turn's.
    async fn run_queued_task(
        &self,
        file: &mut AdfFile,
        queue: Option<&crate::code::FileQueue>,
        session: &Session,
        task_id: &str,
        host: &dyn TurnHost,
        injections: &mut Vec<crate::code::Injection>,
    ) {
        let caller = ToolCaller::Model {
            loop_name: session.loop_name.clone(),
        };
        let outcome = match self.registry.start_task(file, task_id, &caller) {
            Ok(crate::tools::TaskRun::Done(_)) | Err(_) => return,
            Ok(crate::tools::TaskRun::Detached(future)) => {
                let outcome = future.await;
                outcome.record(file, caller.inner_loop());
                self.registry.finish_task(file, task_id, &outcome.result)
            }
            Ok(crate::tools::TaskRun::Code(call)) => match self.code_env().await {
                Ok(env) => {
                    // Like a direct code call, it serves the agent's other jobs while it waits.
                    let env = match queue {
                        Some(queue) => Arc::new((*env).clone().serving(queue.clone())),
                        None => env,
                    };
                    let options = code_options(session);
                    let approver = HostApprover(host);
                    let run =
                        crate::code::run_deferred(file, &env, &caller, &call, &approver, &options)
                            .await;
                    injections.extend(run.injections.iter().cloned());
                    Ok(())
                }
                Err(error) => self.registry.finish_task(file, task_id, &Err(error)),
            },
        };
        if let Err(error) = outcome {
            tracing::warn!(%error, task_id, "cannot record a background task's outcome");
        }
    }

    /// The code environment, made with this executor's tools on first use (so the model's
    /// code sees the same tools, sources included, as the model).
    async fn code_env(&self) -> Result<Arc<crate::code::CodeEnv>, crate::tools::ToolError> {
        self.code
            .get_or_try_init(|| async {
                let env = crate::code::CodeEnv::with_registry(Arc::clone(&self.registry)).await?;
                Ok(Arc::new(match &self.events {
                    Some(sink) => env.with_event_sink(Arc::clone(sink)),
                    None => env,
                }))
            })
            .await
            .cloned()
    }

    /// Sets the loop idle after the autonomous text-only limit (§6.3).
    fn go_idle(
        &self,
        file: &mut AdfFile,
        session: &mut Session,
        host: &dyn TurnHost,
    ) -> Result<(), ExecutorError> {
        if session.loop_name == "main" {
            let config = file.config()?;
            if config.get("state").and_then(Value::as_str) != Some("idle") {
                file.config_set_path(
                    adf_store::Caller::Owner,
                    "state",
                    adf_store::ConfigAction::Set,
                    json!("idle"),
                )?;
            }
        }
        session.set_state(ExecState::Idle, host);
        Ok(())
    }

    /// Builds and records the session's system prompt once per session (§1.5); the text is
    /// then `session.prompt` (read by [`system_text`]).
    fn ensure_prompt(
        &self,
        file: &mut AdfFile,
        session: &mut Session,
        config: &Value,
        facts: &LoopFacts,
    ) -> Result<(), ExecutorError> {
        if session.prompt.is_some() {
            return Ok(());
        }
        let built = prompt::build_system_prompt(
            file,
            config,
            &self.texts,
            LoopView {
                name: &session.loop_name,
                instructions: facts.goal.as_deref(),
            },
        )?;
        let row = json!([{ "type": "text", "text": format!("{}{}", request::SYSTEM_PROMPT_MARKER, built.text) }]);
        append(file, &session.loop_name, "user", &row, None, None)?;
        session.catalog_version = None;
        session.catalog = if built.referenced_files.iter().any(|f| f == REGISTRY_PATH) {
            session.catalog_version = file.files_version()?;
            Some(registry_bytes(file)?)
        } else {
            None
        };
        session.prompt = Some(built);
        Ok(())
    }

    /// §5.1: a skills catalog that changed after the session's snapshot is never written into
    /// that snapshot; it is delivered as a keyed `loop_inject` row (key `skills_registry`), so
    /// a later change replaces a version the model has not been sent yet (`pending_keys`). The
    /// snapshot itself refreshes at the next session reset.
    fn deliver_catalog_change(
        &self,
        file: &mut AdfFile,
        session: &mut Session,
    ) -> Result<(), ExecutorError> {
        let Some(delivered) = &session.catalog else {
            return Ok(());
        };
        let version = file.files_version()?;
        if version.is_some() && version == session.catalog_version {
            return Ok(());
        }
        let current = registry_bytes(file)?;
        if *delivered == current {
            session.catalog_version = version;
            return Ok(());
        }
        let injection = crate::code::Injection {
            loop_name: session.loop_name.clone(),
            category: "skills_registry".into(),
            key: Some("skills_registry".into()),
            origin: "runtime".into(),
            content: String::from_utf8_lossy(&current).into_owned(),
        };
        append(
            file,
            &session.loop_name,
            "user",
            &injection.row_content(),
            None,
            None,
        )?;
        session.catalog = Some(current);
        // Taken before the injection row: that row is not a file, so the version still holds.
        session.catalog_version = version;
        Ok(())
    }

    /// Reads the rows the session has not seen yet.
    fn sync_messages(&self, file: &AdfFile, session: &mut Session) -> Result<(), ExecutorError> {
        let rows = if session.loaded {
            file.loop_rows_after(&session.loop_name, session.last_seq)?
        } else {
            session.loaded = true;
            session.messages.clear();
            session.assembled = None;
            session.pending_keys.clear();
            file.loop_rows(&session.loop_name)?
        };
        for row in rows {
            session.last_seq = session.last_seq.max(row.seq);
            // An assistant row means everything before it reached the model.
            if row.role == "assistant" {
                session.pending_keys.clear();
            }
            let Some(message) = request::row_message(&row) else {
                continue;
            };
            if let Some(key) = request::injection_key(&row) {
                // The superseded version stays in the transcript for audit; it is emptied
                // here, and `assemble` leaves empty messages out.
                if let Some(&earlier) = session.pending_keys.get(key)
                    && let Some(old) = session.messages.get_mut(earlier)
                {
                    old.content.clear();
                    if session
                        .assembled
                        .as_ref()
                        .is_some_and(|(settled, _)| earlier < *settled)
                    {
                        session.assembled = None;
                    }
                }
                session
                    .pending_keys
                    .insert(key.to_owned(), session.messages.len());
            }
            session.messages.push(message);
        }
        Ok(())
    }

    /// The tools advertised in this loop, rebuilt only when the declarations (or the loop's
    /// entry) changed.
    fn tool_specs(
        &self,
        session: &mut Session,
        config: &Arc<Value>,
        facts: &LoopFacts,
    ) -> Arc<[ToolSpec]> {
        let declarations = config.get("tools").unwrap_or(&Value::Null);
        let loop_entry = if facts.tools.is_some() {
            loop_config(config, &session.loop_name).unwrap_or(&Value::Null)
        } else {
            &Value::Null
        };
        if let Some(cache) = &mut session.tool_cache {
            if Arc::ptr_eq(&cache.config, config) {
                return cache.specs.clone();
            }
            if cache.declarations == *declarations && cache.loop_entry == *loop_entry {
                cache.config = config.clone();
                return cache.specs.clone();
            }
        }
        let specs: Vec<ToolSpec> = self
            .registry
            .model_definitions(config)
            .into_iter()
            .filter_map(|d| {
                let name = d.get("name")?.as_str()?.to_owned();
                if let Some(set) = &facts.tools
                    && !set.contains(&name)
                {
                    return None;
                }
                Some(ToolSpec {
                    description: d.get("description")?.as_str()?.to_owned(),
                    input_schema: d.get("parameters")?.clone(),
                    name,
                })
            })
            .collect();
        let specs: Arc<[ToolSpec]> = specs.into();
        session.tool_cache = Some(ToolCache {
            config: config.clone(),
            declarations: declarations.clone(),
            loop_entry: loop_entry.clone(),
            specs: specs.clone(),
        });
        specs
    }

    /// Runs a model request with its retries shown to `host` as they are scheduled
    /// (`TurnEvent::Retry`, while the provider waits), and returns them with the result for
    /// the `provider_error` rows ([`log_retries`]). The request's own observer
    /// ([`adf_providers::watch_retries`]) keeps the retries of loops that run side by side
    /// apart.
    async fn watched<T>(
        &self,
        host: &dyn TurnHost,
        request: impl std::future::Future<Output = Result<T, ProviderError>>,
    ) -> (Result<T, ProviderError>, Vec<RetryNotice>) {
        let (sender, mut scheduled) = tokio::sync::mpsc::unbounded_channel::<RetryNotice>();
        let observer: RetryObserver = Arc::new(move |notice: &RetryNotice| {
            let _receiver_gone = sender.send(notice.clone());
        });
        let request = adf_providers::watch_retries(observer, request);
        tokio::pin!(request);
        let mut notices = Vec::new();
        let result = loop {
            tokio::select! {
                biased;
                Some(notice) = scheduled.recv() => {
                    host.event(&TurnEvent::Retry(&notice));
                    notices.push(notice);
                }
                result = &mut request => break result,
            }
        };
        while let Ok(notice) = scheduled.try_recv() {
            host.event(&TurnEvent::Retry(&notice));
            notices.push(notice);
        }
        // The resolver's observer saw the same retries; this request's are recorded above.
        drop(self.retries.drain());
        (result, notices)
    }

    /// Streams one reply, showing deltas as they come. A stream that breaks after it started
    /// is requested again as a whole (the provider retries per `recovery`).
    async fn request_reply(
        &self,
        req: &ChatRequest,
        host: &dyn TurnHost,
    ) -> Result<AssistantMessage, ProviderError> {
        let mut stream = self.provider.stream(req).await?;
        let mut reply = ReplyBuilder::default();
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) if error.is_transient() => {
                    host.event(&TurnEvent::StreamRestarted(&error));
                    return self.provider.complete(req).await;
                }
                Err(error) => return Err(error),
            };
            match &event {
                StreamEvent::TextDelta(t) => host.event(&TurnEvent::TextDelta(t)),
                StreamEvent::ThinkingDelta(t) => host.event(&TurnEvent::ThinkingDelta(t)),
                _ => {}
            }
            reply.push(event);
        }
        Ok(reply.finish())
    }

    /// The future of a deferred call that a detached tool carries out without the file
    /// (`DetachedTool::detach`: fetch, MCP, message delivery); `None` for code and hosted tools,
    /// which the driver runs with the file.
    fn detached(
        &self,
        file: &AdfFile,
        caller: &ToolCaller,
        call: &crate::tools::DeferredCall,
    ) -> Result<Option<crate::tools::Detached>, ExecutorError> {
        if matches!(call.tool.as_str(), "sys_code" | "sys_lambda") {
            return Ok(None);
        }
        let config = file.config_shared()?;
        Ok(self.registry.detach(call, &config, caller))
    }

    /// Runs one call and turns its outcome into the result the model reads. Deferred code
    /// calls run in the agent's sandbox; their `loop_inject` contexts go to `injections`.
    async fn run_tool(
        &self,
        guard: &mut FileGuard<'_, '_>,
        session: &mut Session,
        facts: &LoopFacts,
        call: &ToolCall,
        host: &dyn TurnHost,
        injections: &mut Vec<crate::code::Injection>,
    ) -> Result<((String, bool), Effect), ExecutorError> {
        host.event(&TurnEvent::ToolCall(call));
        session.set_state(ExecState::ToolUse, host);
        if let Some(set) = &facts.tools
            && !set.contains(&call.name)
        {
            let message = format!(
                "DISABLED: tool '{}' is not available in loop '{}'",
                call.name, session.loop_name
            );
            return Ok(((message, true), Effect::None));
        }
        let caller = ToolCaller::Model {
            loop_name: session.loop_name.clone(),
        };
        let outcome = self.call_awaiting_owner(guard, &caller, call, host).await?;
        let value = match outcome {
            Ok(crate::tools::CallOutcome::Deferred(deferred)) => {
                // A network tool (fetch, MCP, delivery) never touches the file while it
                // works: the file goes back to its worker until the answer comes.
                if let Some(work) = self.detached(guard, &caller, &deferred)? {
                    let outcome = guard.release_while(work).await?;
                    outcome.record(guard, caller.inner_loop());
                    let recorded = self
                        .registry
                        .finish_deferred(guard, &deferred, &outcome.result);
                    match outcome.result.and_then(|value| recorded.map(|()| value)) {
                        Ok(value) => value,
                        Err(error) => return Ok(((error.to_string(), true), Effect::None)),
                    }
                } else {
                    // The code serves the agent's other jobs while it waits off the file.
                    let queue = guard.file_queue();
                    let env = async {
                        let env = self.code_env().await?;
                        Ok::<_, ToolError>(match queue {
                            Some(queue) => Arc::new((*env).clone().serving(queue)),
                            None => env,
                        })
                    };
                    let file: &mut AdfFile = guard;
                    let run = crate::code::drive_deferred(
                        file,
                        &self.registry,
                        &caller,
                        &deferred,
                        env,
                        &HostApprover(host),
                        &code_options(session),
                    )
                    .await;
                    injections.extend(run.injections);
                    match run.value {
                        Ok(value) => value,
                        Err(error) => return Ok(((error.to_string(), true), Effect::None)),
                    }
                }
            }
            Ok(crate::tools::CallOutcome::Queued { task_id, status }) if status == "running" => {
                let value = json!({ "task_id": task_id, "status": status, "tool": call.name });
                return Ok(((render(&value), false), Effect::RunTask(task_id)));
            }
            Ok(outcome) => outcome.into_value(),
            Err(error) => return Ok(((error.to_string(), true), Effect::None)),
        };
        if call.name == "ask" {
            // The owner may take hours: the file goes back meanwhile, other loops step.
            let question = value
                .get("question")
                .and_then(Value::as_str)
                .unwrap_or_default();
            session.set_state(ExecState::AwaitingAsk, host);
            let answer = guard.unlocked_while(host.ask(question)).await?;
            session.set_state(ExecState::ToolUse, host);
            let (content, is_error) = match answer {
                Some(answer) => (answer, false),
                None => (NO_ANSWER.to_owned(), true),
            };
            let content =
                request::cap_result(content, facts.max_result_tokens, facts.preview_chars);
            return Ok(((content, is_error), Effect::None));
        }
        let (content, is_error, effect) = tool_effect(host, &call.name, &value);
        let content = request::cap_result(content, facts.max_result_tokens, facts.preview_chars);
        Ok(((content, is_error), effect))
    }

    /// One call through the pipeline, its approvals awaited with the host's
    /// [`TurnHost::await_approval`]: the file is given back and the shared file unlocked
    /// while the owner decides, and observers see the loop in `awaiting_approval` (§6.1),
    /// then back in `tool_use`. The outer error is the store's (taking the file back).
    async fn call_awaiting_owner(
        &self,
        guard: &mut FileGuard<'_, '_>,
        caller: &ToolCaller,
        call: &ToolCall,
        host: &dyn TurnHost,
    ) -> Result<Result<crate::tools::CallOutcome, ToolError>, ExecutorError> {
        let mut step = self
            .registry
            .call_step(guard, caller, &call.name, call.input.clone());
        loop {
            let pending = match step {
                Ok(CallStep::Done(outcome)) => return Ok(Ok(outcome)),
                Ok(CallStep::NeedsApproval(pending)) => pending,
                Err(error) => return Ok(Err(error)),
            };
            host.event(&TurnEvent::State(ExecState::AwaitingApproval));
            let wait = host.await_approval(guard, &pending.request);
            let decision = guard.unlocked_while(wait).await?;
            host.event(&TurnEvent::State(ExecState::ToolUse));
            step = match decision {
                Ok(decision) => self.registry.resume(guard, *pending, decision),
                Err(error) => Err(error),
            };
        }
    }
}

/// The result of an `ask` no one answered.
const NO_ANSWER: &str =
    "No one is available to answer right now. Continue without the answer, or ask again later.";

/// What a call's result means for the turn: the text the model reads, whether it is an error,
/// and the effect on the loop (`say` reaches the owner, `loop_compact`, `loop_clear`, an
/// ending state and a woken loop change what happens after this step; `ask` is awaited in
/// `Executor::run_tool`).
fn tool_effect(host: &dyn TurnHost, name: &str, value: &Value) -> (String, bool, Effect) {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    match name {
        "say" => {
            let message = text(value, "message").unwrap_or_default();
            host.event(&TurnEvent::Say(&message));
            ("Shown to the owner.".to_owned(), false, Effect::None)
        }
        "loop_compact" => (
            "Compaction runs after this step.".to_owned(),
            false,
            Effect::Compact(text(value, "instructions")),
        ),
        "loop_clear" => (render(value), false, Effect::Reset),
        "sys_set_state" if value.get("ends_turn").and_then(Value::as_bool) == Some(true) => {
            let state = text(value, "state").unwrap_or_default();
            (render(value), false, Effect::EndTurn(state))
        }
        "loop_send" | "loop_manage" if value.get("wake").and_then(Value::as_bool) == Some(true) => {
            let target = text(value, "to_loop")
                .or_else(|| text(value, "created"))
                .unwrap_or_default();
            (render(value), false, Effect::Wake(target))
        }
        _ => (render(value), false, Effect::None),
    }
}

/// The host's approver as the model's code runs use it, holding the file (`Sync`, because
/// code runs span awaits and what they hold must be shareable): while the owner decides,
/// observers see the loop in `awaiting_approval` (§6.1), then back in `tool_use`. The
/// model's own calls await the owner without the file instead (`call_awaiting_owner`).
struct HostApprover<'h>(&'h dyn TurnHost);

impl Approver for HostApprover<'_> {
    fn decide(
        &self,
        file: &mut AdfFile,
        request: &crate::tools::ApprovalRequest,
    ) -> Result<crate::tools::Decision, crate::tools::ToolError> {
        self.0.event(&TurnEvent::State(ExecState::AwaitingApproval));
        let decision = self.0.approver().decide(file, request);
        self.0.event(&TurnEvent::State(ExecState::ToolUse));
        decision
    }
}

/// How the model's code calls run in `session`'s loop: `loop_inject` contexts collected for
/// after the batch, and the inner-loop profile outside main (§6.4).
fn code_options(session: &Session) -> crate::code::RunOptions {
    crate::code::RunOptions {
        inject: crate::code::InjectMode::Collect {
            loop_name: session.loop_name.clone(),
        },
        profile: if session.loop_name == "main" {
            crate::code::CodeProfile::Agent
        } else {
            crate::code::CodeProfile::InnerLoop
        },
        ..crate::code::RunOptions::default()
    }
}

/// The stored skills catalog (empty when the file has none).
/// The system prompt of the session's snapshot, for one request.
fn system_text(session: &Session) -> String {
    session
        .prompt
        .as_ref()
        .map(|p| p.text.clone())
        .unwrap_or_default()
}

fn registry_bytes(file: &AdfFile) -> Result<Vec<u8>, StoreError> {
    Ok(file
        .file_read(REGISTRY_PATH)?
        .map(|entry| entry.content)
        .unwrap_or_default())
}

fn append(
    file: &mut AdfFile,
    loop_name: &str,
    role: &str,
    content: &Value,
    model: Option<&str>,
    tokens: Option<&Value>,
) -> Result<i64, StoreError> {
    file.loop_append(&NewLoopRow {
        r#loop: loop_name,
        role,
        content,
        model,
        tokens,
    })
}

/// The stored state is the agent's: off or suspended, no loop runs (§6.1). A loop that
/// set itself off stays stopped until a restart (§6.4).
fn ensure_runnable(config: &Value, session: &Session) -> Result<(), ExecutorError> {
    let state = config
        .get("state")
        .and_then(Value::as_str)
        .unwrap_or("active");
    match state {
        "off" => {
            return Err(ExecutorError::NotRunnable {
                state: state.into(),
                fix: "the owner restarts it with `adf config set FILE state active`".into(),
            });
        }
        "suspended" => {
            return Err(ExecutorError::NotRunnable {
                state: state.into(),
                fix: "it was stopped for safety (max_active_turns); the owner resumes it with `adf config set FILE state active`".into(),
            });
        }
        _ => {}
    }
    let loop_name = &session.loop_name;
    if loop_name != "main" && session.state == ExecState::Stopped {
        return Err(ExecutorError::NotRunnable {
            state: "off".into(),
            fix: format!("loop '{loop_name}' set itself off; it runs again after a restart"),
        });
    }
    Ok(())
}

/// Ends a turn: the loop's state and checkpoint follow the result, and a failure is logged
/// (§6.2).
fn close_turn(
    file: &mut AdfFile,
    session: &mut Session,
    checkpoint: &mut Checkpoint,
    result: &Result<TurnOutcome, ExecutorError>,
    host: &dyn TurnHost,
) -> Result<(), ExecutorError> {
    let loop_name = session.loop_name.clone();
    let loop_name = loop_name.as_str();
    // A turn that ended on a text reply stored `completed` with that reply already.
    let finished = checkpoint.status == "completed";
    match result {
        Err(ExecutorError::LoopStopped(_)) => {
            let reason = "the loop was deleted or disabled while its turn ran";
            checkpoint.finish("interrupted", Some(reason.to_owned()));
            session.set_state(ExecState::Stopped, host);
            file.log(&NewLog {
                level: "info",
                origin: Some("executor"),
                event: Some("turn_aborted"),
                target: Some(loop_name),
                message: reason,
                data: None,
                r#loop: Some(loop_name),
            })?;
        }
        Err(ExecutorError::Aborted) => {
            // The checkpoint stays `in_progress` as stored, for recovery without replay.
            session.set_state(ExecState::Idle, host);
            append_turn_end(file, loop_name, request::TURN_ABORTED_MARKER, ABORTED_TEXT)?;
            return Ok(());
        }
        Ok(_) => {
            checkpoint.finish("completed", None);
            if session.state != ExecState::Stopped && session.state != ExecState::Suspended {
                session.set_state(ExecState::Idle, host);
            }
        }
        Err(error) => {
            checkpoint.finish("failed", Some(error.to_string()));
            let transient = matches!(error, ExecutorError::Provider(e) if e.is_transient());
            let message = error.to_string();
            // §6.2: transient failures return the loop to idle; anything else is an
            // executor error (in memory only, never config.state).
            let (level, event, state) = if transient {
                ("warn", "provider_error", ExecState::Idle)
            } else {
                ("error", "turn_error", ExecState::Error)
            };
            session.set_state(state, host);
            file.log(&NewLog {
                level,
                origin: Some("executor"),
                event: Some(event),
                target: Some(loop_name),
                message: &message,
                data: None,
                r#loop: (loop_name != "main").then_some(loop_name),
            })?;
            let text = format!("turn failed: {message}{}", next_step(error));
            append_turn_end(file, loop_name, request::TURN_FAILED_MARKER, &text)?;
        }
    }
    if !(finished && result.is_ok()) {
        checkpoint.store(file, loop_name)?;
    }
    Ok(())
}

/// The text of the row an owner's abort leaves in the loop.
const ABORTED_TEXT: &str = "turn aborted by the owner; the step in progress was dropped and is not replayed. Send a message to continue.";

/// What the owner can do after a failed turn, after the error's own text (which, for key,
/// request, configuration and unreachable-server errors, already says what to fix).
fn next_step(error: &ExecutorError) -> &'static str {
    match error {
        ExecutorError::Provider(ProviderError::Transient { .. }) => {
            ". The model server kept failing through its retries (config `recovery`); send the message again later."
        }
        ExecutorError::Provider(_) => " Then send the message again.",
        _ => ". `adf logs` has the details; send the message again to retry.",
    }
}

/// Appends the row that records how a turn ended (§13.1 "state transitions"): a `user` row
/// whose one text block starts with `marker` (`[Context: turn_failed]` or `[Context:
/// turn_aborted]`) and carries `{v: 1, category, origin: "runtime"}` beside the text, as
/// `loop_inject` rows do. Shown by `adf loop`, `GET /loop`, `GET /chat` and the Studio; never
/// sent to the model (request.rs).
fn append_turn_end(
    file: &mut AdfFile,
    loop_name: &str,
    marker: &str,
    text: &str,
) -> Result<i64, StoreError> {
    let category = marker
        .trim_start_matches("[Context: ")
        .trim_end_matches("] ");
    let block = json!([{
        "type": "text",
        "text": format!("{marker}{text}"),
        "context": { "v": 1, "category": category, "origin": "runtime" },
    }]);
    append(file, loop_name, "user", &block, None, None)
}

/// Records in `loop_name`'s transcript that the owner aborted its turn, unless the loop's
/// last row already says so: for a host that cancels a turn between two awaits (the daemon's
/// `POST /abort`), where the executor never sees the abort. Returns whether a row was
/// written.
pub fn record_turn_aborted(file: &mut AdfFile, loop_name: &str) -> Result<bool, StoreError> {
    let total = file.loop_row_count_in(loop_name)?;
    let last = file.loop_page(loop_name, 1, total.saturating_sub(1))?;
    let recorded = last.first().is_some_and(|row| {
        row.role == "user"
            && row
                .content
                .pointer("/0/text")
                .and_then(Value::as_str)
                .is_some_and(|text| text.starts_with(request::TURN_ABORTED_MARKER))
    });
    if recorded {
        return Ok(false);
    }
    append_turn_end(file, loop_name, request::TURN_ABORTED_MARKER, ABORTED_TEXT)?;
    Ok(true)
}

/// Logs a dispatch to a loop that does not exist or is disabled (§6.4, STL-35).
pub(crate) fn log_dropped(
    file: &mut AdfFile,
    loop_name: &str,
    event_type: &str,
) -> Result<(), StoreError> {
    file.log(&NewLog {
        level: "warn",
        origin: Some("executor"),
        event: Some("loop_dispatch_dropped"),
        target: Some(loop_name),
        message: &format!(
            "a {event_type} dispatch to loop '{loop_name}' was dropped: the loop does not exist or is disabled"
        ),
        data: None,
        r#loop: None,
    })?;
    Ok(())
}
