//! The adapter host of one agent: one supervising task per configured adapter.
//!
//! For each entry of the agent's `adapters` config the host validates the settings, reads the
//! credential through the sink (`adapter:<type>:<KEY>`; a missing row is a clear error naming
//! the key and the `adf identity set` command, and the agent keeps running without that
//! adapter), builds the adapter and runs it. A run that ends with a transient error is
//! restarted after a backoff that doubles up to [`Backoff::max`] and starts over once the
//! adapter reported `running` again; a permanent error (credential missing or refused, bad
//! config, unsupported adapter) leaves it `failed`. Every state change is reported to the
//! sink exactly once, in order.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};

use crate::config::AdapterSettings;
use crate::error::AdapterError;
use crate::message::{Delivered, OutboundMessage, parse_recipient};
use crate::platform::Building;
use crate::sink::{AdapterSink, StateChange};
use crate::webhook::{WebhookRequest, WebhookResponse};
use crate::{Adapter, Session, Sleeper, StopHandle, StopSignal, TokioSleeper, stop_pair};

/// Where an adapter is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterState {
    /// Configured with `enabled: false`.
    Disabled,
    /// Reading its credential and connecting.
    Starting,
    /// Connected and receiving.
    Running,
    /// Waiting before a restart after a transient failure.
    Backoff,
    /// Stopped for good until the owner changes something (the status carries why).
    Failed,
    /// Stopped by the host (agent `off`, unload, shutdown).
    Stopped,
}

impl AdapterState {
    /// The state's name as the API and the CLI show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Backoff => "backoff",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
        }
    }
}

/// One adapter's status, for `adf adapters` and `GET /agents/{id}/runtime/adapters`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterStatus {
    /// The adapter type.
    pub adapter: String,
    /// Its state.
    pub state: AdapterState,
    /// The last error, when it failed or is backing off.
    pub error: Option<String>,
    /// Restarts after transient failures so far.
    pub restarts: u32,
}

impl AdapterStatus {
    /// The status as JSON (`{type, state, error, restarts}`).
    pub fn to_json(&self) -> Value {
        json!({
            "type": self.adapter,
            "state": self.state.as_str(),
            "error": self.error,
            "restarts": self.restarts,
        })
    }
}

/// Restart delays: `initial`, doubled after each failed run, at most `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub initial: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The delay before restart number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// How a host waits and restarts.
#[derive(Clone)]
pub struct HostOptions {
    /// The clock every wait goes through (backoff and the platforms' `retry_after`).
    pub sleeper: Arc<dyn Sleeper>,
    /// Restart delays.
    pub backoff: Backoff,
}

impl std::fmt::Debug for HostOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostOptions")
            .field("backoff", &self.backoff)
            .finish_non_exhaustive()
    }
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            sleeper: Arc::new(TokioSleeper),
            backoff: Backoff::default(),
        }
    }
}

struct Slot {
    status: Arc<Mutex<AdapterStatus>>,
    adapter: Arc<Mutex<Option<Arc<dyn Adapter>>>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The adapters of one agent.
pub struct AdapterHost {
    sink: Arc<dyn AdapterSink>,
    slots: BTreeMap<String, Slot>,
    stop: StopHandle,
}

impl std::fmt::Debug for AdapterHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdapterHost")
            .field("adapters", &self.statuses())
            .finish_non_exhaustive()
    }
}

/// Builds the adapter of `settings.kind` with its credential, or says why it cannot.
async fn build(
    settings: &AdapterSettings,
    sink: &Arc<dyn AdapterSink>,
    sleeper: &Arc<dyn Sleeper>,
) -> Result<Arc<dyn Adapter>, AdapterError> {
    let building = Building {
        settings,
        sink,
        sleeper,
    };
    match settings.kind.as_str() {
        crate::telegram::KIND => crate::telegram::build(&building).await,
        crate::email::KIND => crate::email::build(&building).await,
        crate::slack::KIND => crate::slack::build(&building).await,
        crate::discord::KIND => crate::discord::build(&building).await,
        crate::whatsapp::KIND => crate::whatsapp::build(&building).await,
        other => Err(AdapterError::NotSupported {
            what: format!("the {other} adapter"),
        }),
    }
}

async fn record(
    sink: &Arc<dyn AdapterSink>,
    status: &Mutex<AdapterStatus>,
    state: AdapterState,
    error: Option<String>,
) {
    let adapter = {
        let mut status = lock(status);
        if status.state == state && status.error == error {
            return;
        }
        status.state = state;
        status.error = error.clone();
        if state == AdapterState::Backoff {
            status.restarts += 1;
        }
        status.adapter.clone()
    };
    sink.state_changed(StateChange {
        adapter,
        state,
        error,
    })
    .await;
}

/// Runs one adapter until stop: build, run, back off and run again.
async fn supervise(
    settings: AdapterSettings,
    sink: Arc<dyn AdapterSink>,
    options: HostOptions,
    status: Arc<Mutex<AdapterStatus>>,
    built: Arc<Mutex<Option<Arc<dyn Adapter>>>>,
    stop: StopSignal,
) {
    let mut failures: u32 = 0;
    loop {
        record(&sink, &status, AdapterState::Starting, None).await;
        let existing = lock(&built).clone();
        let adapter = match existing {
            Some(adapter) => Ok(adapter),
            None => build(&settings, &sink, &options.sleeper).await,
        };
        let result = match adapter {
            Ok(adapter) => {
                *lock(&built) = Some(adapter.clone());
                let (running_tx, mut running_rx) = tokio::sync::mpsc::unbounded_channel();
                let session = Session::new(stop.clone(), running_tx);
                let run = adapter.run(&session);
                tokio::pin!(run);
                loop {
                    tokio::select! {
                        result = &mut run => break result,
                        Some(()) = running_rx.recv() => {
                            failures = 0;
                            record(&sink, &status, AdapterState::Running, None).await;
                        }
                    }
                }
            }
            Err(e) => Err(e),
        };
        if stop.is_stopped() {
            break;
        }
        let error = match result {
            // A run that ends by itself without a stop is a failure too (the platform closed).
            Ok(()) => AdapterError::Transport {
                adapter: settings.kind.clone(),
                reason: "the adapter stopped receiving".into(),
            },
            Err(e) => e,
        };
        tracing::warn!(adapter = %settings.kind, error = %error, "adapter run ended");
        if !error.is_transient() {
            record(
                &sink,
                &status,
                AdapterState::Failed,
                Some(error.to_string()),
            )
            .await;
            return;
        }
        failures = failures.saturating_add(1);
        record(
            &sink,
            &status,
            AdapterState::Backoff,
            Some(error.to_string()),
        )
        .await;
        tokio::select! {
            () = options.sleeper.sleep(options.backoff.delay(failures)) => {}
            () = stop.stopped() => break,
        }
    }
    record(&sink, &status, AdapterState::Stopped, None).await;
}

impl AdapterHost {
    /// Starts the adapters of `adapters` (the agent's `adapters` config object) for the agent
    /// behind `sink`. An entry that does not validate is `failed` with the reason; a disabled
    /// one is listed as `disabled`.
    pub fn start(adapters: &Value, sink: Arc<dyn AdapterSink>, options: HostOptions) -> Self {
        let (stop, signal) = stop_pair();
        let mut slots = BTreeMap::new();
        for (kind, entry) in adapters.as_object().into_iter().flatten() {
            let status = Arc::new(Mutex::new(AdapterStatus {
                adapter: kind.clone(),
                state: AdapterState::Stopped,
                error: None,
                restarts: 0,
            }));
            let built = Arc::new(Mutex::new(None));
            let task = match AdapterSettings::parse(kind, entry) {
                Ok(settings) if !settings.enabled => {
                    let mut status = lock(&status);
                    status.state = AdapterState::Disabled;
                    None
                }
                Ok(settings) => Some(tokio::spawn(supervise(
                    settings,
                    sink.clone(),
                    options.clone(),
                    status.clone(),
                    built.clone(),
                    signal.clone(),
                ))),
                Err(e) => {
                    let sink = sink.clone();
                    let status = status.clone();
                    Some(tokio::spawn(async move {
                        record(&sink, &status, AdapterState::Failed, Some(e.to_string())).await;
                    }))
                }
            };
            slots.insert(
                kind.clone(),
                Slot {
                    status,
                    adapter: built,
                    task,
                },
            );
        }
        AdapterHost { sink, slots, stop }
    }

    /// The status of every configured adapter, by type.
    pub fn statuses(&self) -> Vec<AdapterStatus> {
        self.slots
            .values()
            .map(|s| lock(&s.status).clone())
            .collect()
    }

    /// The status of one adapter.
    pub fn status(&self, adapter: &str) -> Option<AdapterStatus> {
        self.slots.get(adapter).map(|s| lock(&s.status).clone())
    }

    fn adapter(&self, kind: &str) -> Result<Arc<dyn Adapter>, AdapterError> {
        let slot = self.slots.get(kind).ok_or_else(|| {
            if crate::KNOWN_ADAPTERS.contains(&kind) {
                AdapterError::Invalid(format!(
                    "the agent has no {kind} adapter configured (adapters.{kind})"
                ))
            } else {
                AdapterError::Invalid(format!("'{kind}' is not a channel adapter type"))
            }
        })?;
        if let Some(adapter) = lock(&slot.adapter).clone() {
            return Ok(adapter);
        }
        let status = lock(&slot.status).clone();
        Err(AdapterError::Invalid(format!(
            "the {kind} adapter is {}{}",
            status.state.as_str(),
            status.error.map(|e| format!(": {e}")).unwrap_or_default()
        )))
    }

    /// Delivers one outbox row addressed `type:id` through its adapter. `Ok` is a `delivered`
    /// row, `Err` a `failed` one with [`AdapterError::status_code`] and the error as reason.
    pub async fn deliver(&self, message: &OutboundMessage) -> Result<Delivered, AdapterError> {
        let (kind, _) = parse_recipient(&message.recipient).ok_or_else(|| {
            AdapterError::Invalid(format!(
                "'{}' is not an adapter recipient (type:id)",
                message.recipient
            ))
        })?;
        self.adapter(kind)?.deliver(message).await
    }

    /// Hands a request of the agent's webhook route to adapter `kind`. Only a `running`
    /// adapter takes one (a platform retries a 503 later); the answers name no file, no
    /// credential and no error detail, since anyone may call the route.
    pub async fn webhook(&self, kind: &str, request: &WebhookRequest) -> WebhookResponse {
        let Some(slot) = self.slots.get(kind) else {
            return WebhookResponse::error(404, &format!("no {kind} adapter is configured"));
        };
        let running = lock(&slot.status).state == AdapterState::Running;
        let adapter = lock(&slot.adapter).clone();
        match adapter {
            Some(adapter) if running => adapter.webhook(request).await,
            _ => WebhookResponse::error(503, &format!("the {kind} adapter is not running")),
        }
    }

    /// `chat_info` (MSG-48): the chat's metadata, or `{supported: false, reason}` when this
    /// agent has no working adapter of that type. `limit` defaults to 50 and must be 1–100.
    pub async fn chat_info(
        &self,
        adapter: &str,
        chat_id: &str,
        limit: Option<u32>,
    ) -> Result<Value, AdapterError> {
        let limit = limit.unwrap_or(50);
        if !(1..=100).contains(&limit) {
            return Err(AdapterError::Invalid(format!(
                "limit is 1 to 100, not {limit}"
            )));
        }
        match self.adapter(adapter) {
            Ok(adapter) => adapter.chat_info(chat_id, limit).await,
            Err(e) => Ok(json!({ "supported": false, "reason": e.to_string() })),
        }
    }

    /// Checks adapter `kind`'s credential against its platform (`adf adapters test`), without
    /// starting it.
    pub async fn test_credential(
        adapters: &Value,
        kind: &str,
        sink: Arc<dyn AdapterSink>,
        options: HostOptions,
    ) -> Result<Value, AdapterError> {
        let entry = adapters.get(kind).ok_or_else(|| {
            AdapterError::Invalid(format!("the agent has no {kind} adapter configured"))
        })?;
        let settings = AdapterSettings::parse(kind, entry)?;
        build(&settings, &sink, &options.sleeper)
            .await?
            .test_credential()
            .await
    }

    /// Stops every adapter and waits for them (STL-04); each ends `stopped`.
    pub async fn stop(mut self) {
        self.stop.stop();
        for slot in self.slots.values_mut() {
            if let Some(task) = slot.task.take() {
                // A supervisor that panicked has nothing left to stop.
                let _ended = task.await;
            }
        }
        // Keep the sink alive until every supervisor has reported its last state.
        let _sink = &self.sink;
    }
}

impl Drop for AdapterHost {
    fn drop(&mut self) {
        // A host dropped without `stop` still stops its adapters (they see the signal).
        self.stop.stop();
    }
}
