//! Stream bindings (spec §5.23, tools guide "Stream Binding Tools"): byte streams the runtime
//! pumps between two endpoints outside the model loop.
//!
//! Principal types: [`Streams`] (every binding of a host, by agent), [`BindRequest`] and
//! [`Endpoint`] (what a binding asks for), [`Gates`] (the agent's `stream_bind` gates, locked
//! for every agent by the config rules), [`BindingEvents`] (where `binding.*` umbilical events
//! go) and [`StreamTools`] (`stream_bind`, `stream_unbind`, `stream_bindings`).
//!
//! Endpoints: `tcp` connects through `adf_egress::connect_tcp` only (the agent's egress
//! policy, after `allow_tcp_bind` and the `tcp_allowlist`); `process` (`isolation: host`,
//! `host_process_bind`) is a child with a cleared environment (`PATH` plus the endpoint's
//! `env`), no shell, killed when the binding ends — container isolations are "not supported
//! yet"; `umbilical` (only as `a`) is the agent's umbilical events, one JSON object per line,
//! fed by [`Streams::offer_event`] (a binding that falls 256 events behind
//! loses events rather than slowing the agent); `ws` is an open outbound connection of the
//! agent (by connection id or config id): the binary frames it receives feed the binding and
//! bytes written to it go out as binary frames, while its text frames stay ALF messages.
//!
//! A binding ends on `stream_unbind`, on release of its agent (`off`, unload, shutdown:
//! [`Streams::release`], STL-04), at `idle_timeout_ms` without traffic, at
//! `max_duration_ms`, once `max_bytes` (both directions together) were pumped, or when an
//! endpoint ends (a bidirectional binding keeps the other direction when the matching
//! `close_*_on_*_close` is false). Declared `stream_bindings` are materialized when the agent
//! loads ([`Streams::materialize`]); one with `reconnect: true` opens its endpoints again,
//! backing off from 1 s to 60 s, after an endpoint ended or failed to open.

mod endpoint;
mod pump;
mod spec;
mod tools;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use adf_egress::Lookup;

use crate::outbound::Outbound;
pub(crate) use endpoint::ws_frame;
use endpoint::{Context, Opened};
use pump::{Direction, EndReason, RECONNECT_FIRST, RECONNECT_MAX};
pub use spec::{BindRequest, Endpoint, Gates, Isolation, Options, StreamError, matches_event};
pub use tools::StreamTools;

/// Where a host sends a binding's umbilical events (`binding.created`, `binding.materialized`,
/// `binding.error`, `binding.reconnecting`, `binding.threshold_exceeded`,
/// `binding.flow_summary`, `binding.terminated`; source `system:stream_bind`).
pub trait BindingEvents: Send + Sync + 'static {
    /// Emits one event of the agent `agent_id`. Must not wait.
    fn emit(&self, agent_id: &str, event_type: &str, payload: Value);
}

/// How the pump emits an event about its binding.
type Emit = dyn Fn(&Binding, &str, Value) + Send + Sync;

/// One binding as listed.
#[derive(Debug)]
struct Binding {
    id: String,
    agent_id: String,
    a: Value,
    b: Value,
    bidirectional: bool,
    declarative: bool,
    created_at: i64,
    /// `pending`, `active`, `reconnecting` or `error`, and the last error.
    status: Mutex<(&'static str, Option<String>)>,
    bytes_a_to_b: AtomicU64,
    bytes_b_to_a: AtomicU64,
    stop: watch::Sender<Option<EndReason>>,
}

impl Binding {
    fn total(&self) -> u64 {
        self.bytes_a_to_b.load(Ordering::Relaxed) + self.bytes_b_to_a.load(Ordering::Relaxed)
    }

    fn counters(&self) -> Value {
        json!({
            "binding_id": self.id,
            "bytes_a_to_b": self.bytes_a_to_b.load(Ordering::Relaxed),
            "bytes_b_to_a": self.bytes_b_to_a.load(Ordering::Relaxed),
        })
    }

    fn set_status(&self, status: &'static str, error: Option<String>) {
        *self.status.lock().unwrap_or_else(PoisonError::into_inner) = (status, error);
    }

    fn listed(&self) -> Value {
        let (status, error) = self
            .status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut entry = json!({
            "binding_id": self.id,
            "a": self.a,
            "b": self.b,
            "bidirectional": self.bidirectional,
            "origin": if self.declarative { "declarative" } else { "imperative" },
            "status": status,
            "created_at": self.created_at,
            "bytes_a_to_b": self.bytes_a_to_b.load(Ordering::Relaxed),
            "bytes_b_to_a": self.bytes_b_to_a.load(Ordering::Relaxed),
        });
        if let Some(error) = error {
            entry["error"] = json!(error);
        }
        entry
    }
}

type Subscriber = (Vec<String>, mpsc::Sender<Vec<u8>>);

/// The umbilical endpoints of every agent: who reads which events.
#[derive(Debug, Default)]
struct UmbilicalFeed {
    subscribers: Mutex<HashMap<String, Vec<Subscriber>>>,
}

impl UmbilicalFeed {
    fn subscribe(&self, agent_id: &str, event_types: Vec<String>, sender: mpsc::Sender<Vec<u8>>) {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(agent_id.to_owned())
            .or_default()
            .push((event_types, sender));
    }

    fn offer(&self, agent_id: &str, event_type: &str, event: impl FnOnce() -> Value) {
        let mut subscribers = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(list) = subscribers.get_mut(agent_id) else {
            return;
        };
        list.retain(|(_, sender)| !sender.is_closed());
        let mut line: Option<Vec<u8>> = None;
        let mut event = Some(event);
        for (patterns, sender) in list.iter() {
            if !matches_event(patterns, event_type) {
                continue;
            }
            let bytes = line.get_or_insert_with(|| {
                let value = event.take().map(|build| build()).unwrap_or(Value::Null);
                let mut text = value.to_string().into_bytes();
                text.push(b'\n');
                text
            });
            // Emitting never waits for a binding: a full queue loses this event.
            let _ = sender.try_send(bytes.clone());
        }
        if list.is_empty() {
            subscribers.remove(agent_id);
        }
    }
}

/// Every stream binding of a host (see the module docs).
pub struct Streams {
    outbound: Arc<Outbound>,
    lookup: Arc<dyn Lookup>,
    events: Arc<dyn BindingEvents>,
    bindings: Mutex<HashMap<(String, String), Arc<Binding>>>,
    umbilical: UmbilicalFeed,
    /// The host's runtime: a tool call may run on a short-lived runtime (a route lambda's,
    /// a turn's), and a binding's sockets and pump must outlive it.
    runtime: Option<tokio::runtime::Handle>,
}

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streams").finish_non_exhaustive()
    }
}

impl Streams {
    /// Bindings whose `ws` endpoints are `outbound`'s connections, resolving `tcp` hosts
    /// through `lookup`, emitting their events to `events`. Bindings run on the runtime this
    /// is called on (when there is one).
    pub fn new(
        outbound: Arc<Outbound>,
        lookup: Arc<dyn Lookup>,
        events: Arc<dyn BindingEvents>,
    ) -> Arc<Self> {
        Arc::new(Streams {
            outbound,
            lookup,
            events,
            bindings: Mutex::new(HashMap::new()),
            umbilical: UmbilicalFeed::default(),
            runtime: tokio::runtime::Handle::try_current().ok(),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<Binding>>> {
        self.bindings.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Offers one umbilical event of the agent to its `umbilical` endpoints; `event` is built
    /// only when one of them wants `event_type`.
    pub fn offer_event(&self, agent_id: &str, event_type: &str, event: impl FnOnce() -> Value) {
        self.umbilical.offer(agent_id, event_type, event);
    }

    /// `stream_bind`: checks the gates of `config`, opens both endpoints and starts pumping,
    /// on the host's runtime whatever runtime calls. Returns the `binding_id`.
    pub async fn bind(
        self: &Arc<Self>,
        agent_id: &str,
        config: &Value,
        request: BindRequest,
    ) -> Result<String, StreamError> {
        let Some(runtime) = self.runtime.clone() else {
            return self.bind_here(agent_id, config, request).await;
        };
        let streams = Arc::clone(self);
        let (agent_id, config) = (agent_id.to_owned(), config.clone());
        runtime
            .spawn(async move { streams.bind_here(&agent_id, &config, request).await })
            .await
            .unwrap_or_else(|e| Err(StreamError::Failed(format!("the binding task failed: {e}"))))
    }

    async fn bind_here(
        self: &Arc<Self>,
        agent_id: &str,
        config: &Value,
        request: BindRequest,
    ) -> Result<String, StreamError> {
        let gates = Gates::from_config(config);
        gates.check(&request.a)?;
        gates.check(&request.b)?;
        let policy = crate::tools::ws_policy(config);
        let opened = self.open_pair(agent_id, &policy, &request).await?;
        let id = format!("sb_{}", adf_store::defaults::random_id(12));
        let binding = self.register(agent_id, &id, &request, false)?;
        self.events
            .emit(agent_id, "binding.created", binding.listed());
        self.spawn(binding, request, policy, Some(opened));
        Ok(id)
    }

    /// Materializes the agent's declared `stream_bindings` (enabled ones; none while the
    /// config's `state` is `off`): each is listed at once and opens in the background. Returns the declarations refused outright (bad
    /// shape, a closed gate), which are also listed with status `error`.
    pub fn materialize(
        self: &Arc<Self>,
        agent_id: &str,
        config: &Value,
    ) -> Vec<(String, StreamError)> {
        // An agent stored `off` holds no runtime resources (§6.1).
        if config.get("state").and_then(Value::as_str) == Some("off") {
            return Vec::new();
        }
        let gates = Gates::from_config(config);
        let policy = crate::tools::ws_policy(config);
        let mut refused = Vec::new();
        let declared = config
            .get("stream_bindings")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (index, declaration) in declared.iter().enumerate() {
            if declaration.get("enabled").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            let id = declaration
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .map_or_else(|| format!("stream_bindings[{index}]"), str::to_owned);
            let checked = BindRequest::parse(declaration).and_then(|request| {
                gates.check(&request.a)?;
                gates.check(&request.b)?;
                Ok(request)
            });
            match checked {
                Ok(request) => match self.register(agent_id, &id, &request, true) {
                    Ok(binding) => self.spawn(binding, request, policy.clone(), None),
                    Err(error) => refused.push((id, error)),
                },
                Err(error) => {
                    let binding = Arc::new(Binding {
                        id: id.clone(),
                        agent_id: agent_id.to_owned(),
                        a: declaration.get("a").cloned().unwrap_or(Value::Null),
                        b: declaration.get("b").cloned().unwrap_or(Value::Null),
                        bidirectional: false,
                        declarative: true,
                        created_at: adf_store::time::now_ms(),
                        status: Mutex::new(("error", Some(error.to_string()))),
                        bytes_a_to_b: AtomicU64::new(0),
                        bytes_b_to_a: AtomicU64::new(0),
                        stop: watch::channel(None).0,
                    });
                    let mut event = binding.counters();
                    event["error"] = json!(error.to_string());
                    self.events.emit(agent_id, "binding.error", event);
                    self.table()
                        .insert((agent_id.to_owned(), id.clone()), binding);
                    refused.push((id, error));
                }
            }
        }
        refused
    }

    /// `stream_unbind`: ends the binding; false when the agent has none by that id.
    pub fn unbind(&self, agent_id: &str, binding_id: &str) -> bool {
        let removed = self
            .table()
            .remove(&(agent_id.to_owned(), binding_id.to_owned()));
        match removed {
            Some(binding) => {
                binding.stop.send_replace(Some(EndReason::Unbound));
                true
            }
            None => false,
        }
    }

    /// `stream_bindings`: the agent's bindings, oldest first.
    pub fn list(&self, agent_id: &str) -> Vec<Value> {
        let mut mine: Vec<Arc<Binding>> = self
            .table()
            .values()
            .filter(|b| b.agent_id == agent_id)
            .cloned()
            .collect();
        mine.sort_by(|x, y| x.created_at.cmp(&y.created_at).then(x.id.cmp(&y.id)));
        mine.iter().map(|b| b.listed()).collect()
    }

    /// Ends every binding of the agent (STL-04: `off`, unload, shutdown) and drops its
    /// umbilical readers.
    pub fn release(&self, agent_id: &str) {
        self.table().retain(|_, binding| {
            let mine = binding.agent_id == agent_id;
            if mine {
                binding.stop.send_replace(Some(EndReason::Released));
            }
            !mine
        });
        self.umbilical
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(agent_id);
    }

    /// Ends the agent's declared bindings (their config changed; `stream_bind` ones stay):
    /// [`Streams::materialize`] opens the new declarations afterwards.
    pub fn release_declared(&self, agent_id: &str) {
        self.table().retain(|_, binding| {
            let declared = binding.agent_id == agent_id && binding.declarative;
            if declared {
                binding.stop.send_replace(Some(EndReason::Unbound));
            }
            !declared
        });
    }

    fn register(
        &self,
        agent_id: &str,
        id: &str,
        request: &BindRequest,
        declarative: bool,
    ) -> Result<Arc<Binding>, StreamError> {
        let binding = Arc::new(Binding {
            id: id.to_owned(),
            agent_id: agent_id.to_owned(),
            a: request.a.summary(),
            b: request.b.summary(),
            bidirectional: request.bidirectional,
            declarative,
            created_at: adf_store::time::now_ms(),
            status: Mutex::new(("pending", None)),
            bytes_a_to_b: AtomicU64::new(0),
            bytes_b_to_a: AtomicU64::new(0),
            stop: watch::channel(None).0,
        });
        let mut table = self.table();
        let key = (agent_id.to_owned(), id.to_owned());
        if table.contains_key(&key) {
            return Err(StreamError::Invalid(format!(
                "the binding '{id}' is already materialized"
            )));
        }
        table.insert(key, Arc::clone(&binding));
        Ok(binding)
    }

    async fn open_pair(
        &self,
        agent_id: &str,
        policy: &adf_egress::Policy,
        request: &BindRequest,
    ) -> Result<(Opened, Opened), StreamError> {
        let cx = Context {
            agent_id,
            policy,
            lookup: self.lookup.as_ref(),
            outbound: &self.outbound,
            umbilical: &self.umbilical,
        };
        let a = endpoint::open(&request.a, true, request.bidirectional, &cx).await?;
        let b = endpoint::open(&request.b, request.bidirectional, true, &cx).await?;
        Ok((a, b))
    }

    fn spawn(
        self: &Arc<Self>,
        binding: Arc<Binding>,
        request: BindRequest,
        policy: adf_egress::Policy,
        opened: Option<(Opened, Opened)>,
    ) {
        let streams = Arc::clone(self);
        let supervised = async move {
            streams.supervise(binding, request, policy, opened).await;
        };
        match &self.runtime {
            Some(runtime) => drop(runtime.spawn(supervised)),
            None => drop(tokio::spawn(supervised)),
        }
    }

    /// Runs one binding to its end, reopening a declared `reconnect` binding.
    async fn supervise(
        self: Arc<Self>,
        binding: Arc<Binding>,
        request: BindRequest,
        policy: adf_egress::Policy,
        mut opened: Option<(Opened, Opened)>,
    ) {
        let events = Arc::clone(&self.events);
        let emit = move |b: &Binding, event_type: &str, payload: Value| {
            events.emit(&b.agent_id, event_type, payload);
        };
        let mut stop = binding.stop.subscribe();
        let deadline = request.options.max_duration.map(|d| Instant::now() + d);
        let mut backoff = RECONNECT_FIRST;
        let mut first = true;
        let reason = loop {
            let pair = match opened.take() {
                Some(pair) => Ok(pair),
                None => self.open_pair(&binding.agent_id, &policy, &request).await,
            };
            let (a, b) = match pair {
                Ok(pair) => pair,
                Err(error) => {
                    // The daemon's log says it too (once per run of failed attempts): a
                    // binding that never connects is otherwise explained only by an event
                    // nobody may be reading.
                    if backoff == RECONNECT_FIRST {
                        tracing::warn!(agent = %binding.agent_id, binding = %binding.id, %error, "stream binding endpoints not opened");
                    }
                    let mut event = binding.counters();
                    event["error"] = json!(error.to_string());
                    emit(&binding, "binding.error", event);
                    if !request.reconnect {
                        // Listed with its error until unbound or released.
                        binding.set_status("error", Some(error.to_string()));
                        return;
                    }
                    binding.set_status("pending", Some(error.to_string()));
                    match wait(&mut stop, backoff, deadline).await {
                        Some(reason) => break reason,
                        None => {
                            backoff = (backoff * 2).min(RECONNECT_MAX);
                            continue;
                        }
                    }
                }
            };
            binding.set_status("active", None);
            if binding.declarative && first {
                emit(&binding, "binding.materialized", binding.listed());
            }
            first = false;
            backoff = RECONNECT_FIRST;
            let Opened {
                source: a_source,
                sink: a_sink,
                guard: a_guard,
            } = a;
            let Opened {
                source: b_source,
                sink: b_sink,
                guard: b_guard,
            } = b;
            let a_to_b = a_source
                .zip(b_sink)
                .map(|(source, sink)| Direction { source, sink });
            let b_to_a = if request.bidirectional {
                b_source
                    .zip(a_sink)
                    .map(|(source, sink)| Direction { source, sink })
            } else {
                None
            };
            let reason = pump::run(
                &binding,
                a_to_b,
                b_to_a,
                request.options,
                deadline,
                &mut stop,
                &emit,
            )
            .await;
            drop((a_guard, b_guard));
            if reason == EndReason::MaxBytes {
                let mut event = binding.counters();
                event["limit"] = json!("max_bytes");
                emit(&binding, "binding.threshold_exceeded", event);
            }
            if !(request.reconnect && reason.reconnects()) {
                break reason;
            }
            binding.set_status("reconnecting", None);
            emit(&binding, "binding.reconnecting", binding.counters());
            if let Some(reason) = wait(&mut stop, backoff, deadline).await {
                break reason;
            }
        };
        let mut event = binding.counters();
        event["reason"] = json!(reason.name());
        emit(&binding, "binding.terminated", event);
        // An unbound or released binding is already gone from the table; one that ended by
        // itself leaves it now (unless a newer binding took its declared id).
        let mut table = self.table();
        let key = (binding.agent_id.clone(), binding.id.clone());
        if table.get(&key).is_some_and(|b| Arc::ptr_eq(b, &binding)) {
            table.remove(&key);
        }
    }
}

/// Waits `delay` before reopening; `Some(reason)` when the binding ends meanwhile.
async fn wait(
    stop: &mut watch::Receiver<Option<EndReason>>,
    delay: std::time::Duration,
    deadline: Option<Instant>,
) -> Option<EndReason> {
    let until = Instant::now() + delay;
    loop {
        if let Some(reason) = *stop.borrow() {
            return Some(reason);
        }
        if deadline.is_some_and(|d| d <= until) {
            tokio::select! {
                () = tokio::time::sleep_until(deadline.unwrap_or(until)) => return Some(EndReason::MaxDuration),
                changed = stop.changed() => if changed.is_err() { return Some(EndReason::Released) },
            }
        } else {
            tokio::select! {
                () = tokio::time::sleep_until(until) => return None,
                changed = stop.changed() => if changed.is_err() { return Some(EndReason::Released) },
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use endpoint::{Sink, Source};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    fn binding() -> Arc<Binding> {
        Arc::new(Binding {
            id: "sb_test".into(),
            agent_id: "agent".into(),
            a: Value::Null,
            b: Value::Null,
            bidirectional: false,
            declarative: false,
            created_at: 0,
            status: Mutex::new(("active", None)),
            bytes_a_to_b: AtomicU64::new(0),
            bytes_b_to_a: AtomicU64::new(0),
            stop: watch::channel(None).0,
        })
    }

    /// Runs `binding`'s pump a → b over `direction` until it ends, emitting nothing.
    fn spawn_pump(
        binding: &Arc<Binding>,
        direction: Direction,
        options: Options,
    ) -> tokio::task::JoinHandle<EndReason> {
        let pumped = Arc::clone(binding);
        let mut stop = binding.stop.subscribe();
        tokio::spawn(async move {
            let emit = |_: &Binding, _: &str, _: Value| {};
            pump::run(
                &pumped,
                Some(direction),
                None,
                options,
                None,
                &mut stop,
                &emit,
            )
            .await
        })
    }

    /// On a paused clock: traffic moves the idle deadline, silence reaches it.
    #[tokio::test(start_paused = true)]
    async fn srv_39_traffic_keeps_a_binding_from_its_idle_timeout() {
        let (mut writer, a_side) = tokio::io::duplex(64);
        let (b_side, mut reader) = tokio::io::duplex(64);
        let binding = binding();
        let options = Options::parse(Some(&json!({ "idle_timeout_ms": 1000 }))).unwrap();
        let direction = Direction {
            source: Source::Io(Box::new(a_side)),
            sink: Sink::Io(Box::new(b_side)),
        };
        let pump = spawn_pump(&binding, direction, options);
        for round in 0..3u8 {
            tokio::time::advance(Duration::from_millis(700)).await;
            writer.write_all(&[round]).await.unwrap();
            let mut got = [0u8; 1];
            reader.read_exact(&mut got).await.unwrap();
            assert_eq!(got, [round]);
            assert!(
                !pump.is_finished(),
                "round {round}: 2.1 s passed, never 1 s quiet"
            );
        }
        let reason = pump.await.unwrap();
        assert_eq!(reason, EndReason::IdleTimeout);
        assert_eq!(binding.bytes_a_to_b.load(Ordering::Relaxed), 3);
    }

    /// A sink that accepts no byte, ever: its first write says so on `entered` and stays
    /// pending without registering a waker, so only the pump giving up can end that write.
    struct NeverDrains {
        entered: Option<tokio::sync::oneshot::Sender<()>>,
    }

    impl tokio::io::AsyncWrite for NeverDrains {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            if let Some(entered) = self.entered.take() {
                let _ = entered.send(());
            }
            std::task::Poll::Pending
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Pending
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Pending
        }
    }

    /// On a paused clock: a binding ended while its pump is stuck in a write to a sink that
    /// never drains gives the write `drain_timeout_ms` and ends. Without that timeout the
    /// only timer left is the safety one, which fails the test.
    #[tokio::test(start_paused = true)]
    async fn srv_39_drain_timeout_gives_up_a_write_a_sink_never_drains() {
        let (mut writer, a_side) = tokio::io::duplex(64);
        let (entered, in_write) = tokio::sync::oneshot::channel();
        let binding = binding();
        let options = Options::parse(Some(&json!({ "drain_timeout_ms": 20 }))).unwrap();
        let direction = Direction {
            source: Source::Io(Box::new(a_side)),
            sink: Sink::Io(Box::new(NeverDrains {
                entered: Some(entered),
            })),
        };
        let pump = spawn_pump(&binding, direction, options);
        writer.write_all(b"stuck").await.unwrap();
        in_write.await.unwrap();
        binding.stop.send_replace(Some(EndReason::Unbound));
        let reason = tokio::time::timeout(Duration::from_secs(3600), pump)
            .await
            .unwrap_or_else(|_| panic!("the stuck write held the binding past its drain timeout"))
            .unwrap();
        assert_eq!(reason, EndReason::Unbound);
        assert_eq!(
            binding.bytes_a_to_b.load(Ordering::Relaxed),
            0,
            "no byte was written"
        );
    }
}
