//! Triggers (spec §7): which events reach which handlers, when, and in which agent states.
//!
//! Principal types: [`TriggerKind`] (the eleven types), [`TriggerEvent`] (one event with the
//! identity of whatever produced it), [`Target`] (one configured handler, parsed and validated
//! from `config.triggers`), [`Scope`]. The pure decisions live in submodules so the daemon's
//! dispatcher only wires them to IO: [`filter`] (§7.4 filters and the self-trigger rules),
//! [`timing`] (debounce / interval / batch windows with the clock passed in), [`gating`]
//! (§7.5 state gating), [`message`] (the formatted agent-scope trigger message, §7.3) and
//! [`fire`] (timer firing order, §7.7, and the re-arm of an undeliverable `once` fire) and
//! [`nudge`] (the hibernate nudge's due time, TRG-35).
//!
//! Event payload shapes are left to the runtime (missing-tables §7.1): ours is
//! `{type, timestamp, source?, data}` with per-type `data`, and a batch is an array of those.

pub mod filter;
pub mod fire;
pub mod gating;
pub mod message;
pub mod nudge;
pub mod timing;

use serde::Serialize;
use serde_json::{Map, Value, json};

/// The eleven trigger types of §7.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerKind {
    /// The agent was started.
    OnStartup,
    /// A message was stored in `adf_inbox`.
    OnInbox,
    /// A message was queued in `adf_outbox`.
    OnOutbox,
    /// A file of the virtual filesystem was created, written or deleted.
    OnFileChange,
    /// The owner sent a chat message.
    OnChat,
    /// A timer came due (§7.7).
    OnTimer,
    /// A tool call was made (its status says how it went).
    OnToolCall,
    /// A row was added to `adf_tasks`.
    OnTaskCreate,
    /// A task reached a final status.
    OnTaskComplete,
    /// A row was written to `adf_logs`.
    OnLogs,
    /// A model request completed.
    OnLlmCall,
}

impl TriggerKind {
    /// Every trigger type, in the order of `config.triggers`.
    pub const ALL: [TriggerKind; 11] = [
        Self::OnStartup,
        Self::OnInbox,
        Self::OnOutbox,
        Self::OnFileChange,
        Self::OnChat,
        Self::OnTimer,
        Self::OnToolCall,
        Self::OnTaskCreate,
        Self::OnTaskComplete,
        Self::OnLogs,
        Self::OnLlmCall,
    ];

    /// The key under `config.triggers`, e.g. `on_inbox`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnStartup => "on_startup",
            Self::OnInbox => "on_inbox",
            Self::OnOutbox => "on_outbox",
            Self::OnFileChange => "on_file_change",
            Self::OnChat => "on_chat",
            Self::OnTimer => "on_timer",
            Self::OnToolCall => "on_tool_call",
            Self::OnTaskCreate => "on_task_create",
            Self::OnTaskComplete => "on_task_complete",
            Self::OnLogs => "on_logs",
            Self::OnLlmCall => "on_llm_call",
        }
    }

    /// The trigger type a `config.triggers` key names; `None` for an unknown key.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

/// Where a target's handler runs (§7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The code path: a lambda or command receives the raw event.
    System,
    /// The model path: a turn starts with a formatted trigger message.
    Agent,
}

/// What produced an event, so handlers never receive their own events (§7.1, TRG-02..05).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Producer {
    /// The owner, another agent, a timer, the runtime: nobody inside this agent.
    External,
    /// The agent's own model turn.
    Agent,
    /// A lambda of this agent, by reference (`path:function`).
    Lambda {
        /// The lambda's `path:function` reference.
        source: String,
    },
}

/// One event on its way to the trigger handlers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TriggerEvent {
    /// Which trigger type the event belongs to.
    pub kind: TriggerKind,
    /// Epoch milliseconds.
    pub timestamp: i64,
    /// Per-type facts: `path` for file changes, `from`/`source` for inbox rows, `tool` and
    /// `status` for tool calls and tasks, `level`/`origin`/`event` for logs, ...
    pub data: Value,
    /// Who caused the event, so a handler is not woken by its own writes.
    pub producer: Producer,
    /// The agent's stored state when the event was observed, where that is known: state
    /// gating (§7.5) then decides by it rather than by the state the dispatch finds, which
    /// may have changed since (a row written while `off` stays undelivered even when another
    /// task dispatches it after the agent is back on).
    #[serde(skip)]
    pub observed_in: Option<String>,
}

impl TriggerEvent {
    /// An event with an external producer; chain [`Self::produced_by`] otherwise.
    pub fn new(kind: TriggerKind, timestamp: i64, data: Value) -> Self {
        Self {
            kind,
            timestamp,
            data,
            producer: Producer::External,
            observed_in: None,
        }
    }

    /// The same event, attributed to `producer`.
    pub fn produced_by(mut self, producer: Producer) -> Self {
        self.producer = producer;
        self
    }

    /// The object a system-scope lambda receives: `{type, timestamp, data}`.
    pub fn payload(&self) -> Value {
        json!({ "type": self.kind.as_str(), "timestamp": self.timestamp, "data": self.data })
    }
}

/// How a target spaces its fires (§7.2; at most one per target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Timing {
    /// Fire on every event as it arrives.
    Immediate,
    /// Fire once the events stop arriving for `ms` (`debounce_ms`).
    Debounce {
        /// Quiet time before the fire, in milliseconds.
        ms: u64,
    },
    /// Fire at most once per `ms` (`interval_ms`).
    Interval {
        /// Length of one interval, in milliseconds.
        ms: u64,
    },
    /// Collect events and fire them together after `ms`, or sooner at `count` events.
    Batch {
        /// How long the batch collects after its first event, in milliseconds (`batch_ms`).
        ms: u64,
        /// Fire early once this many events are held (`batch_count`).
        count: Option<u64>,
    },
}

/// One configured handler of one trigger type.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    /// The trigger type this target is configured under.
    pub kind: TriggerKind,
    /// Position in `triggers.<kind>.targets`, for logs and timing state.
    pub index: usize,
    /// Whether the handler is code (system) or a model turn (agent).
    pub scope: Scope,
    /// The `path:function` lambda a system target calls.
    pub lambda: Option<String>,
    /// The command a system target runs instead of a lambda.
    pub command: Option<String>,
    /// Keep the lambda's sandbox alive between fires.
    pub warm: bool,
    /// The §7.4 filter keys this target set; an event must match all of them.
    pub filter: Map<String, Value>,
    /// How fires are spaced (debounce, interval, batch).
    pub timing: Timing,
    /// Owner lock: the agent cannot change or remove this target.
    pub locked: bool,
    /// The loop an agent-scope fire wakes (`main` when absent).
    pub loop_name: String,
}

/// A configuration problem with one target; the target is skipped, the rest still work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetProblem {
    /// The config path of the skipped entry, e.g. `triggers.on_inbox.targets.2`.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

/// Filter keys each trigger accepts (§7.4); \[C28\] treats unknown keys as errors.
fn allowed_filter_keys(kind: TriggerKind) -> &'static [&'static str] {
    match kind {
        TriggerKind::OnInbox => &["source", "sender"],
        TriggerKind::OnOutbox => &["to"],
        TriggerKind::OnFileChange => &["watch", "include_self"],
        TriggerKind::OnToolCall => &["tools"],
        TriggerKind::OnTaskCreate => &["tools"],
        TriggerKind::OnTaskComplete => &["tools", "status"],
        TriggerKind::OnLogs => &["level", "origin", "event"],
        TriggerKind::OnLlmCall => &["source", "provider"],
        TriggerKind::OnStartup | TriggerKind::OnChat | TriggerKind::OnTimer => &[],
    }
}

fn positive(target: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match target.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(format!("{key} must be a positive integer")),
        },
    }
}

fn parse_target(kind: TriggerKind, index: usize, raw: &Value) -> Result<Target, String> {
    let object = raw.as_object().ok_or("a target must be an object")?;
    let scope = match object.get("scope").and_then(Value::as_str) {
        Some("system") => Scope::System,
        Some("agent") => Scope::Agent,
        _ => return Err("scope must be system or agent".into()),
    };
    let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_owned);
    let lambda = text("lambda");
    let command = text("command");
    if scope == Scope::Agent && (lambda.is_some() || command.is_some()) {
        return Err("lambda and command belong to system targets".into());
    }
    if lambda.is_some() && command.is_some() {
        return Err("lambda and command are mutually exclusive".into());
    }
    let filter = match object.get("filter") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(filter)) => filter.clone(),
        Some(_) => return Err("filter must be an object".into()),
    };
    let allowed = allowed_filter_keys(kind);
    if let Some(unknown) = filter.keys().find(|key| !allowed.contains(&key.as_str())) {
        return Err(format!(
            "filter key '{unknown}' is not a filter of {}",
            kind.as_str()
        ));
    }
    if kind == TriggerKind::OnFileChange && filter.get("watch").and_then(Value::as_str).is_none() {
        return Err("on_file_change targets need filter.watch (a glob)".into());
    }
    if kind == TriggerKind::OnToolCall && filter.get("tools").and_then(Value::as_array).is_none() {
        return Err("on_tool_call targets need filter.tools (a list of globs)".into());
    }
    let debounce = positive(object, "debounce_ms")?;
    let interval = positive(object, "interval_ms")?;
    let batch = positive(object, "batch_ms")?;
    let batch_count = positive(object, "batch_count")?;
    let timing = match (debounce, interval, batch) {
        (None, None, None) if batch_count.is_some() => {
            return Err("batch_count requires batch_ms".into());
        }
        (None, None, None) => Timing::Immediate,
        (Some(ms), None, None) => Timing::Debounce { ms },
        (None, Some(ms), None) => Timing::Interval { ms },
        (None, None, Some(ms)) => Timing::Batch {
            ms,
            count: batch_count,
        },
        _ => return Err("use at most one of debounce_ms, interval_ms and batch_ms".into()),
    };
    let loop_name = text("loop").unwrap_or_else(|| "main".to_owned());
    if scope == Scope::System && object.contains_key("loop") {
        return Err("loop belongs to agent targets".into());
    }
    Ok(Target {
        kind,
        index,
        scope,
        lambda,
        command,
        warm: object.get("warm").and_then(Value::as_bool).unwrap_or(false),
        filter,
        timing,
        locked: object
            .get("locked")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        loop_name,
    })
}

/// The enabled targets of `config.triggers`, in configuration order, and the problems of the
/// targets that were skipped.
pub fn targets(config: &Value) -> (Vec<Target>, Vec<TargetProblem>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let Some(triggers) = config.get("triggers").and_then(Value::as_object) else {
        return (out, problems);
    };
    for (name, trigger) in triggers {
        let Some(kind) = TriggerKind::parse(name) else {
            problems.push(TargetProblem {
                path: format!("triggers.{name}"),
                message: "not a trigger type".into(),
            });
            continue;
        };
        if trigger.get("enabled").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let list = trigger
            .get("targets")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (index, raw) in list.iter().enumerate() {
            match parse_target(kind, index, raw) {
                Ok(target) => out.push(target),
                Err(message) => problems.push(TargetProblem {
                    path: format!("triggers.{name}.targets.{index}"),
                    message,
                }),
            }
        }
    }
    (out, problems)
}
