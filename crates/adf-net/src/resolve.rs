//! One request, end to end: find the agent, read the body, then on a blocking thread with a
//! guest connection resolve `serving.api` → `public/` → `shared` → 404 (§12.1) and run the
//! route's middleware and lambda.

use std::collections::VecDeque;
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{HeaderValue, Method, header};
use axum::response::Response;
use serde_json::{Map, Value, json};

use adf_runtime::code::{
    self, Authorization, CodeEnv, LambdaRef, RunOptions, Sandbox, SandboxConfig,
};
use adf_runtime::middleware;
use adf_runtime::tools::ErrorCode as ToolCode;
use adf_runtime::tools::ToolError;
use adf_runtime::tools::approval::DenyAll;
use adf_store::{AdfFile, NewLog};

use crate::kept::LambdaRuntime;
use crate::request::{self, BadBody};
use crate::response::{self, ErrorCode, Shaped};
use crate::{
    BodyHold, LOG_ORIGIN, RESERVED_SEGMENTS, RowsThrough, ServedAgent, Serving, ServingLimits,
    Slot, error_response,
};

/// What the async side knows of a request once its body is read.
struct Incoming {
    method: Method,
    /// The path under the agent, decoded, as segments.
    segments: Vec<String>,
    /// The path under the agent as the lambda sees it (`/` + the raw rest).
    path: String,
    query: Map<String, Value>,
    headers: Map<String, Value>,
    body: Value,
    /// `method path?query`, the cache key.
    cache_key: String,
    /// Reads `true` once the client has gone (see [`LeaveSignal`]).
    abandoned: tokio::sync::watch::Receiver<bool>,
}

impl Incoming {
    fn abandoned(&self) -> bool {
        *self.abandoned.borrow()
    }
}

/// Held by the request's future: axum drops that future when the client disconnects (or the
/// request times out), and the drop tells the lane — a queued request is then skipped, a
/// running lambda interrupted (its [`CodeEnv::with_cancel`]), so requests nobody waits for
/// neither hold the agent's lane nor keep its in-flight slots.
struct LeaveSignal(tokio::sync::watch::Sender<bool>);

impl Drop for LeaveSignal {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

pub(crate) async fn serve(serving: Arc<Serving>, request: Request) -> Response {
    let uri = request.uri().clone();
    let Some((key, rest)) = request::split_agent_path(uri.path()) else {
        return error_response(ErrorCode::NotFound, "not an agent path");
    };
    let Some(agent) = serving.directory.find(key) else {
        return error_response(
            ErrorCode::AgentNotFound,
            &format!("Unknown agent \"{key}\""),
        );
    };
    let Some(segments) = request::segments(rest) else {
        return error_response(ErrorCode::BadRequest, "the path is not a valid file path");
    };
    if segments
        .first()
        .is_some_and(|first| RESERVED_SEGMENTS.contains(&first.as_str()))
    {
        return error_response(
            ErrorCode::NotFound,
            &format!("/{} is reserved for the mesh", segments.join("/")),
        );
    }
    let slot = serving.slot(&agent.id);
    let Ok(permit) = Arc::clone(&slot.in_flight).try_acquire_owned() else {
        let mut busy = error_response(
            ErrorCode::AgentBusy,
            "the agent has too many requests in flight; retry shortly",
        );
        busy.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return busy;
    };
    let method = request.method().clone();
    let cache_key = format!(
        "{method} {}",
        uri.path_and_query().map_or(uri.path(), |pq| pq.as_str())
    );
    if method == Method::GET
        && let Some(hit) = slot.cache.get(&cache_key, Instant::now())
    {
        return hit.into_response();
    }
    let (parts, body) = request.into_parts();
    if parts.headers.contains_key(header::UPGRADE) {
        drop(permit);
        return upgrade(serving, agent, segments, parts).await;
    }
    let (bytes, hold) = match serving
        .bodies
        .read(&parts.headers, body, serving.limits.max_body_bytes)
        .await
    {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let body = match request::body_value(&parts.headers, &bytes) {
        Ok(body) => body,
        Err(BadBody(why)) => return error_response(ErrorCode::BadRequest, &why),
    };
    drop(bytes);
    let (leave, abandoned) = tokio::sync::watch::channel(false);
    let _leave = LeaveSignal(leave);
    let incoming = Incoming {
        method,
        path: format!("/{rest}"),
        segments,
        query: request::query_map(&parts.uri),
        headers: request::header_map(&parts.headers),
        body,
        cache_key,
        abandoned,
    };
    let (answer, answered) = tokio::sync::oneshot::channel();
    let queued = Queued {
        incoming,
        answer,
        _permit: permit,
        _hold: hold,
    };
    enqueue(&serving, &agent, &slot, queued);
    let outcome = answered
        .await
        .map_err(|_| "the request's thread ended before it answered".to_owned());
    let Resolved {
        shaped,
        lambda_ran,
        off,
    } = match outcome {
        Ok(outcome) => outcome,
        Err(error) => Resolved::answer(Shaped::error(
            ErrorCode::Internal,
            &format!("the request failed: {error}"),
        )),
    };
    if let Some(through) = lambda_ran {
        serving.directory.lambda_ran(&agent, through);
    }
    if off {
        serving.release(&agent.id);
    } else {
        serving.watch_idle_files(&slot);
    }
    shaped.into_response()
}

/// A WebSocket upgrade: the agent's `WS` route at the path, then the connection (ws.rs).
async fn upgrade(
    serving: Arc<Serving>,
    agent: ServedAgent,
    segments: Vec<String>,
    mut parts: axum::http::request::Parts,
) -> Response {
    use axum::extract::FromRequestParts as _;
    let upgrade = match axum::extract::WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(upgrade) => upgrade,
        Err(rejection) => {
            return error_response(ErrorCode::BadRequest, &rejection.body_text());
        }
    };
    let peer = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|info| info.0.ip());
    let path = agent.path.clone();
    let found = tokio::task::spawn_blocking(move || ws_route(&path, &segments)).await;
    let route = match found {
        Ok(Ok(route)) => route,
        Ok(Err(shaped)) => return shaped.into_response(),
        Err(error) => {
            return error_response(ErrorCode::Internal, &format!("the upgrade failed: {error}"));
        }
    };
    upgrade
        .read_buffer_size(crate::ws::READ_BUFFER_BYTES)
        .on_upgrade(move |socket| crate::ws::connection(serving, agent, route, peer, socket))
}

/// The agent's `WS` route at `segments`, read on a guest connection.
fn ws_route(path: &std::path::Path, segments: &[String]) -> Result<crate::ws::WsRoute, Shaped> {
    let file = AdfFile::open_guest(path).map_err(|error| {
        Shaped::error(
            ErrorCode::Internal,
            &format!("cannot open the agent: {error}"),
        )
    })?;
    let config = file.config_shared().map_err(|error| {
        Shaped::error(
            ErrorCode::Internal,
            &format!("cannot read the agent's config: {error}"),
        )
    })?;
    if config.get("state").and_then(Value::as_str) == Some("off") {
        return Err(Shaped::error(ErrorCode::AgentOff, "the agent is off"));
    }
    let allow_unsigned = config
        .pointer("/security/allow_unsigned")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let routes = config
        .pointer("/serving/api")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for route in &routes {
        let is_ws = route
            .get("method")
            .and_then(Value::as_str)
            .is_some_and(|m| m.eq_ignore_ascii_case("WS"));
        let pattern = route
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !is_ws || request::match_route(pattern, segments).is_none() {
            continue;
        }
        let lambda = match route.get("lambda").and_then(Value::as_str) {
            None | Some("") => None,
            Some(source) => Some(LambdaRef::parse(source).map_err(|e| {
                Shaped::error(
                    ErrorCode::Internal,
                    &format!("the route's lambda is not valid: {}", e.message),
                )
            })?),
        };
        return Ok(crate::ws::WsRoute {
            lambda,
            allow_unsigned,
        });
    }
    Err(Shaped::error(
        ErrorCode::NotFound,
        "no WebSocket route at this path",
    ))
}

/// What the blocking part of a request ends with.
struct Resolved {
    shaped: Shaped,
    /// A route lambda ran, with where the observed tables ended after it when that could
    /// be read.
    lambda_ran: Option<Option<RowsThrough>>,
    /// The agent is off.
    off: bool,
}

impl Resolved {
    fn answer(shaped: Shaped) -> Self {
        Resolved {
            shaped,
            lambda_ran: None,
            off: false,
        }
    }
}

/// Requests of one agent waiting for its lane (see [`enqueue`]).
#[derive(Default)]
pub(crate) struct RequestQueue {
    waiting: VecDeque<Queued>,
    /// A drain job is on the lane (queued or running): new requests only join the queue.
    draining: bool,
}

impl std::fmt::Debug for RequestQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestQueue")
            .field("waiting", &self.waiting.len())
            .field("draining", &self.draining)
            .finish()
    }
}

/// A request whose body is read, waiting for the agent's lane.
struct Queued {
    incoming: Incoming,
    answer: tokio::sync::oneshot::Sender<Resolved>,
    /// Counts against the agent's in-flight limit until answered.
    _permit: tokio::sync::OwnedSemaphorePermit,
    _hold: BodyHold,
}

/// Requests one commit covers at most: the first of a batch waits for all of them.
const BATCH_LIMIT: usize = 32;

/// How many log rows of requests that wrote nothing else may wait in memory while the agent
/// is busy (see [`HeldRows`]; how long: [`ServingLimits::held_logs_max_age`]). Writing them
/// costs the batch that does it about 3 µs a row, so a few hundred rows at a time keep that
/// batch's requests within a millisecond or two of the others; measured at 10 ms / 300 rows
/// against 50 ms / 3,000 (BENCHMARKS.md, "Issue 15 follow-up: the lane's log rows").
const HELD_LOGS_MAX_ROWS: usize = 300;

/// How long, and how many, such rows may wait while the WAL is at its bound and a background
/// pass copies it ([`AdfFile::wal_restart_pending`]): a pass takes two `fsync`s (20–40 ms on
/// this disk), and a write before it ends would leave the WAL to grow on, until the lane's own
/// commit caught up with two `fsync`s of its own while every queued request waited.
const HELD_LOGS_DEFER_MAX_AGE: Duration = Duration::from_millis(100);
const HELD_LOGS_DEFER_MAX_ROWS: usize = 3_000;

/// How often a drain with rows held for a pending restart looks whether the pass ended.
const HELD_LOGS_DEFER_POLL: Duration = Duration::from_millis(2);

/// Log rows of an agent's requests held in memory (see [`resolve_batch`]).
///
/// A busy agent's rows wait even when no request is queued at the moment
/// ([`ServingLimits::busy_batch_gap`]): at a steady 5,000 requests a second each request
/// arrives to an idle lane, and writing its three log rows on their own cost a WAL commit of
/// four pages a request — the checkpoints of that traffic, not the requests, set the p99
/// (BENCHMARKS.md, "Issue 15 follow-up: a fixed request rate").
#[derive(Debug)]
pub(crate) struct HeldRows {
    max_age: Duration,
    busy_gap: Duration,
    rows: Vec<adf_store::HeldLog>,
    /// When the oldest of them was held.
    since: Option<Instant>,
    /// When the last batch began.
    last_batch: Option<Instant>,
    /// The gap between batches, averaged over about the last eight (`None` until two
    /// batches ran: an agent is not busy before it has shown it).
    batch_gap: Option<Duration>,
    /// The rows wait for the WAL to start over (the longer limits apply).
    deferring: bool,
}

impl HeldRows {
    pub(crate) fn new(limits: &ServingLimits) -> Self {
        HeldRows {
            max_age: limits.held_logs_max_age,
            busy_gap: limits.busy_batch_gap,
            rows: Vec::new(),
            since: None,
            last_batch: None,
            batch_gap: None,
            deferring: false,
        }
    }

    /// Notes that a batch begins at `now`.
    fn batch_begins(&mut self, now: Instant) {
        if let Some(last) = self.last_batch {
            let gap = now.saturating_duration_since(last);
            self.batch_gap = Some(match self.batch_gap {
                Some(average) => (average * 7 + gap) / 8,
                None => gap,
            });
        }
        self.last_batch = Some(now);
    }

    /// Whether batches have lately begun less than [`ServingLimits::busy_batch_gap`] apart.
    fn busy(&self) -> bool {
        self.batch_gap.is_some_and(|gap| gap < self.busy_gap)
    }

    /// Adds a batch's rows; returns every row held when they are due to be written: the batch
    /// wrote something else (its log rows commit with it, after the older ones), no request
    /// waits and the agent is not busy (so at light load an answer never comes before its
    /// rows), or the oldest row has waited [`ServingLimits::held_logs_max_age`] or the rows
    /// reach [`HELD_LOGS_MAX_ROWS`] — while the WAL waits for a pass to start over
    /// (`batch.deferring`), [`HELD_LOGS_DEFER_MAX_AGE`] or [`HELD_LOGS_DEFER_MAX_ROWS`]. Rows
    /// held with no request queued are written by the drain when they are due
    /// ([`due_in`](Self::due_in)).
    fn add(
        &mut self,
        mut rows: Vec<adf_store::HeldLog>,
        batch: BatchEnd,
        now: Instant,
    ) -> Vec<adf_store::HeldLog> {
        if !rows.is_empty() && self.since.is_none() {
            self.since = Some(now);
        }
        self.rows.append(&mut rows);
        self.deferring = batch.deferring;
        let due = batch.wrote || (batch.idle && !self.busy()) || !self.may_wait(now);
        if !due {
            return Vec::new();
        }
        self.take()
    }

    /// Whether the rows held may wait longer under the limits that apply now.
    fn may_wait(&self, now: Instant) -> bool {
        let (max_age, max_rows) = self.limits();
        self.rows.len() < max_rows && self.waited(now) < max_age
    }

    /// Called when no request is queued and the rows held look due: whether they may wait
    /// on because a background pass is about to let the WAL start over.
    fn wait_for_restart(&mut self, restart_pending: bool, now: Instant) -> bool {
        self.deferring = restart_pending;
        restart_pending && self.may_wait(now)
    }

    fn limits(&self) -> (Duration, usize) {
        if self.deferring {
            (
                self.max_age.max(HELD_LOGS_DEFER_MAX_AGE),
                HELD_LOGS_DEFER_MAX_ROWS,
            )
        } else {
            (self.max_age, HELD_LOGS_MAX_ROWS)
        }
    }

    fn waited(&self, now: Instant) -> Duration {
        self.since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
    }

    /// How long the drain may sleep before it looks at the rows held again; `None` when none
    /// are held.
    fn due_in(&self, now: Instant) -> Option<Duration> {
        if self.rows.is_empty() {
            return None;
        }
        // While deferring, rows past their usual age are not due yet: a sleep of what is
        // left of it (nothing) would spin.
        Some(if self.deferring {
            HELD_LOGS_DEFER_POLL
        } else {
            self.max_age.saturating_sub(self.waited(now))
        })
    }

    /// Every row held, oldest first.
    fn take(&mut self) -> Vec<adf_store::HeldLog> {
        self.since = None;
        std::mem::take(&mut self.rows)
    }
}

/// What [`HeldRows::add`] needs to know of the batch that just ran.
#[derive(Debug, Clone, Copy, Default)]
struct BatchEnd {
    /// It wrote something besides log rows: it commits anyway.
    wrote: bool,
    /// No request waits behind it (or the agent was released).
    idle: bool,
    /// The WAL is at its bound with a pass running ([`AdfFile::wal_restart_pending`]).
    deferring: bool,
}

fn held_rows(slot: &Slot) -> MutexGuard<'_, HeldRows> {
    slot.held_logs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

fn queue(slot: &Slot) -> MutexGuard<'_, RequestQueue> {
    slot.queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Wakes a drain that waits to write held log rows (the slot was released: it writes them
/// now). Taking the queue's lock first orders this after the drain's check of `released`.
pub(crate) fn wake_drain(slot: &Slot) {
    drop(queue(slot));
    slot.arrived.notify_all();
}

/// Requests in `slot`'s queue now.
pub(crate) fn waiting(slot: &Slot) -> usize {
    queue(slot).waiting.len()
}

/// Queues `queued` for the agent's lane and, when no drain job is on the lane, puts one there.
///
/// Under load, requests pile up while the lane runs a batch; the next drain takes them all
/// and commits them as one transaction (`resolve_batch`). Each request's rows still go in
/// order, a throwing lambda still rolls back only its own writes, and no answer leaves
/// before the commit that holds its writes — but the WAL pages the requests share (the log
/// table's last leaf, its indexes) are written once per batch instead of once per request,
/// and the log rows of batches that wrote nothing else once per few batches ([`HeldRows`]).
fn enqueue(serving: &Arc<Serving>, agent: &ServedAgent, slot: &Arc<Slot>, queued: Queued) {
    let schedule = {
        let mut waiting = queue(slot);
        waiting.waiting.push_back(queued);
        !std::mem::replace(&mut waiting.draining, true)
    };
    if !schedule {
        // The drain may be waiting to write held log rows: this request goes first.
        slot.arrived.notify_one();
        return;
    }
    let job_serving = Arc::clone(serving);
    let job_agent = agent.clone();
    let job_slot = Arc::clone(slot);
    let submitted = slot.lane.submit(
        Box::new(move || drain(&job_serving, &job_agent, &job_slot)),
        serving.limits.idle_file_linger,
    );
    if let Err(error) = submitted {
        let stranded = {
            let mut waiting = queue(slot);
            waiting.draining = false;
            std::mem::take(&mut waiting.waiting)
        };
        for queued in stranded {
            let _gone = queued.answer.send(Resolved::answer(Shaped::error(
                ErrorCode::Internal,
                &format!("cannot start the agent's request thread: {error}"),
            )));
        }
    }
}

/// Empties the queue a batch at a time, on the lane's thread.
fn drain(serving: &Serving, agent: &ServedAgent, slot: &Slot) {
    let _unwinding = DrainGuard(slot);
    loop {
        let batch: Vec<Queued> = {
            let mut waiting = queue(slot);
            if waiting.waiting.is_empty() {
                // Rows held while the agent is busy are written when they are due, or at
                // once when the agent is released; a request arriving first takes them along.
                let Some(due_in) = held_rows(slot).due_in(Instant::now()) else {
                    waiting.draining = false;
                    return;
                };
                if !released(slot) {
                    waiting = slot
                        .arrived
                        .wait_timeout(waiting, due_in)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                if waiting.waiting.is_empty() {
                    drop(waiting);
                    write_held_rows(serving, agent, slot);
                    continue;
                }
            }
            let take = waiting.waiting.len().min(BATCH_LIMIT);
            waiting.waiting.drain(..take).collect()
        };
        let (incomings, answers): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .map(|queued| {
                (
                    queued.incoming,
                    (queued.answer, queued._permit, queued._hold),
                )
            })
            .unzip();
        let resolved = resolve_batch(serving, agent, slot, incomings);
        for ((answer, _permit, _hold), resolved) in answers.into_iter().zip(resolved) {
            let _gone = answer.send(resolved);
        }
    }
}

/// Whether the agent's serving was released (it was unloaded or turned `off`).
fn released(slot: &Slot) -> bool {
    *slot.closers.borrow()
}

/// Writes the rows held for the agent in a transaction of their own and tells the host where
/// the rows end. A file that cannot be opened (the agent's file was removed) loses them,
/// with a warning.
fn write_held_rows(serving: &Serving, agent: &ServedAgent, slot: &Slot) {
    let mut file = match slot.files.checkout(&agent.path) {
        Ok(file) => file,
        Err(error) => {
            let lost = held_rows(slot).take().len();
            tracing::warn!(%error, rows = lost, "cannot write the log rows of route requests");
            return;
        }
    };
    let rows = {
        let mut held = held_rows(slot);
        let pending = file.wal_restart_pending();
        if !released(slot) && held.wait_for_restart(pending, Instant::now()) {
            Vec::new()
        } else {
            held.take()
        }
    };
    if !rows.is_empty() {
        match file.write_held_logs(&rows) {
            Ok(()) => serving.directory.lambda_ran(agent, rows_through(&file)),
            Err(error) => {
                tracing::warn!(%error, rows = rows.len(), "cannot write the log rows of route requests");
            }
        }
    }
    drop(slot.files.checkin(&agent.path, file));
}

/// When a request panics, the drain ends there (the lane's thread lives on, see `lane`): the
/// requests still queued are dropped (each answers 500, "ended before it answered") and the
/// next request schedules a drain again, so the agent never stops answering.
struct DrainGuard<'a>(&'a Slot);

impl Drop for DrainGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let dropped = {
                let mut waiting = queue(self.0);
                waiting.draining = false;
                std::mem::take(&mut waiting.waiting)
            };
            drop(dropped);
        }
    }
}

/// One batch of requests on one of the slot's kept guest connections (see `kept`), in one
/// transaction (see [`enqueue`]); one answer per request, in order. The connection holds the
/// batch's log rows ([`AdfFile::hold_logs`]); the slot's [`HeldRows`] decides whether they, and
/// the rows earlier batches left, are written before this batch commits.
fn resolve_batch(
    serving: &Serving,
    agent: &ServedAgent,
    slot: &Slot,
    batch: Vec<Incoming>,
) -> Vec<Resolved> {
    let mut file = match slot.files.checkout(&agent.path) {
        Ok(file) => file,
        Err(error) => {
            return batch
                .iter()
                .map(|_| {
                    Resolved::answer(Shaped::error(
                        ErrorCode::Internal,
                        &format!("cannot open the agent: {error}"),
                    ))
                })
                .collect();
        }
    };
    held_rows(slot).batch_begins(Instant::now());
    let changes_before = file.changes_made();
    file.hold_logs();
    let mut transaction = Batch::new();
    let mut answers = Vec::with_capacity(batch.len());
    let mut last_ran = None;
    for (index, incoming) in batch.into_iter().enumerate() {
        if incoming.abandoned() {
            // Its client left while it queued: nobody reads the answer, and running it would
            // keep the requests behind it waiting.
            answers.push(Resolved::answer(Shaped::error(
                ErrorCode::RequestTimeout,
                "the client left before the request ran",
            )));
            continue;
        }
        transaction.begin(&file, index);
        let (shaped, ran, off) = resolve_on(serving, slot, &mut file, &mut transaction, incoming);
        if ran {
            last_ran = Some(index);
        }
        answers.push(Resolved {
            shaped,
            lambda_ran: None,
            off,
        });
    }
    let batch_end = BatchEnd {
        wrote: file.changes_made() != changes_before,
        idle: waiting(slot) == 0 || released(slot),
        deferring: file.wal_restart_pending(),
    };
    let due = held_rows(slot).add(file.release_held_logs(), batch_end, Instant::now());
    let flushed = !due.is_empty();
    if flushed && let Err(error) = file.write_held_logs(&due) {
        tracing::warn!(%error, rows = due.len(), "cannot write the log rows of route requests");
    }
    transaction.settle(&file);
    for (index, key, ttl, shaped) in transaction.to_cache {
        if !transaction.lost.contains(&index) {
            slot.cache.put(key, ttl, Instant::now(), shaped);
        }
    }
    for lost in transaction.lost {
        if let Some(answer) = answers.get_mut(lost) {
            *answer = Resolved::answer(Shaped::error(
                ErrorCode::Internal,
                "the request ran but its rows could not be committed",
            ));
        }
    }
    // The host hears once per batch where the rows end, after they committed.
    let told = last_ran.or_else(|| flushed.then(|| answers.len().saturating_sub(1)));
    if let Some(answer) = told.and_then(|index| answers.get_mut(index)) {
        answer.lambda_ran = Some(rows_through(&file));
    }
    drop(slot.files.checkin(&agent.path, file));
    answers
}

/// The transaction a batch's requests share (see [`enqueue`]); a batch of one has it too, so
/// the log rows written after the last request commit with that request's writes.
struct Batch {
    /// The request that opened the transaction open now, if the batch opened one.
    open_since: Option<usize>,
    /// The request running now.
    current: usize,
    /// Requests whose rows a failed commit rolled back.
    lost: Vec<usize>,
    /// Responses to cache once their request's rows committed: request, key, time to live.
    to_cache: Vec<(usize, String, Duration, Shaped)>,
}

impl Batch {
    fn new() -> Self {
        Batch {
            open_since: None,
            current: 0,
            lost: Vec::new(),
            to_cache: Vec::new(),
        }
    }

    /// Before request `index`: (re)opens the shared transaction when none is open (the first
    /// request, or a run committed it before a wait off the file).
    fn begin(&mut self, file: &AdfFile, index: usize) {
        self.current = index;
        if file.in_transaction() {
            return;
        }
        self.open_since = None;
        if file.begin_held_transaction().is_ok() {
            self.open_since = Some(index);
        }
    }

    /// Commits what the batch holds so far: at its end, and before a request that must run
    /// outside it (route middleware runs lambdas on a thread of its own, which must not
    /// meet this connection's write lock).
    fn settle(&mut self, file: &AdfFile) {
        let Some(since) = self.open_since.take() else {
            return;
        };
        if !file.in_transaction() {
            return;
        }
        if let Err(error) = file.commit_open_transaction() {
            tracing::warn!(%error, "cannot commit a batch of route requests (rolled back)");
            self.lost.extend(since..=self.current);
        }
    }
}

/// Where the tables whose rows are trigger events end now (see [`RowsThrough`]); `None`
/// when they cannot be read (the host then sweeps).
fn rows_through(file: &AdfFile) -> Option<RowsThrough> {
    file.observed_rows_through().ok()
}

/// [`resolve_answer`], with `Content-Security-Policy: sandbox` added unless the owner turned
/// it off for this agent (`serving.csp_sandbox: false`).
fn resolve_on(
    serving: &Serving,
    slot: &Slot,
    file: &mut AdfFile,
    batch: &mut Batch,
    incoming: Incoming,
) -> (Shaped, bool, bool) {
    let (mut shaped, ran, off) = resolve_answer(serving, slot, file, batch, incoming);
    sandbox_unless_opted_out(file, &mut shaped);
    (shaped, ran, off)
}

fn sandbox_unless_opted_out(file: &AdfFile, shaped: &mut Shaped) {
    let opted_out = file.config_shared().is_ok_and(|config| {
        config.pointer(CSP_SANDBOX_KEY).and_then(Value::as_bool) == Some(false)
    });
    if !opted_out {
        shaped.sandbox();
    }
}

/// The config switch (a JSON pointer) by which the owner lets an agent's pages run in the
/// serving origin instead of an opaque one. Locked for agents (`sys_update_config`).
pub const CSP_SANDBOX_KEY: &str = "/serving/csp_sandbox";

fn resolve_answer(
    serving: &Serving,
    slot: &Slot,
    file: &mut AdfFile,
    batch: &mut Batch,
    incoming: Incoming,
) -> (Shaped, bool, bool) {
    let config = match file.config_shared() {
        Ok(config) => config,
        Err(error) => {
            return (
                Shaped::error(
                    ErrorCode::Internal,
                    &format!("cannot read the agent's config: {error}"),
                ),
                false,
                false,
            );
        }
    };
    if config.get("state").and_then(Value::as_str) == Some("off") {
        return (
            Shaped::error(ErrorCode::AgentOff, "the agent is off"),
            false,
            true,
        );
    }
    let routes = config
        .pointer("/serving/api")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut path_matched = Vec::new();
    for route in routes {
        let Some(pattern) = route.get("path").and_then(Value::as_str) else {
            continue;
        };
        let Some(params) = request::match_route(pattern, &incoming.segments) else {
            continue;
        };
        let route_method = route
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("GET")
            .to_ascii_uppercase();
        if route_method == "WS" {
            // Reached only by an upgrade (`upgrade`), never by a plain request.
            continue;
        }
        if route_method != incoming.method.as_str() {
            path_matched.push(route_method);
            continue;
        }
        let shaped = run_route(serving, slot, file, batch, route, params, incoming);
        return (shaped, true, false);
    }
    let is_read = incoming.method == Method::GET || incoming.method == Method::HEAD;
    if is_read && let Some(found) = static_file(file, &config, &incoming.segments) {
        return (found, false, false);
    }
    if !path_matched.is_empty() {
        let mut shaped = Shaped::error(
            ErrorCode::MethodNotAllowed,
            &format!("{} is not served for {}", incoming.path, incoming.method),
        );
        shaped
            .headers
            .push(("allow".into(), path_matched.join(", ")));
        return (shaped, false, false);
    }
    (
        Shaped::error(
            ErrorCode::NotFound,
            &format!("nothing is served at {}", incoming.path),
        ),
        false,
        false,
    )
}

/// `public/<path>` (the index for a directory) when `serving.public.enabled`, else the file
/// at `<path>` when `serving.shared.enabled` and a pattern matches it.
fn static_file(file: &AdfFile, config: &Value, segments: &[String]) -> Option<Shaped> {
    let enabled = |section: &str| {
        config
            .pointer(&format!("/serving/{section}/enabled"))
            .and_then(Value::as_bool)
            == Some(true)
    };
    let joined = segments.join("/");
    if enabled("public") {
        let index = config
            .pointer("/serving/public/index")
            .and_then(Value::as_str)
            .filter(|i| !i.is_empty())
            .unwrap_or("index.html");
        let mut candidates = vec![];
        if joined.is_empty() {
            candidates.push(format!("public/{index}"));
        } else {
            candidates.push(format!("public/{joined}"));
            candidates.push(format!("public/{joined}/{index}"));
        }
        for candidate in candidates {
            if let Some(found) = read_file(file, &candidate) {
                return Some(found);
            }
        }
    }
    if enabled("shared") && !joined.is_empty() {
        let patterns = config
            .pointer("/serving/shared/patterns")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let shared = patterns
            .iter()
            .filter_map(Value::as_str)
            .any(|pattern| adf_store::glob::matches(pattern, &joined));
        if shared && let Some(found) = read_file(file, &joined) {
            return Some(found);
        }
    }
    None
}

fn read_file(file: &AdfFile, path: &str) -> Option<Shaped> {
    // A `document.md` alias must not make README.md appear under another name.
    if path.ends_with("/document.md") || path == "document.md" {
        return None;
    }
    let entry = file.file_read(path).ok()??;
    let mime = entry
        .info
        .mime_type
        .clone()
        .unwrap_or_else(|| adf_store::mime::guess_mime(path).to_owned());
    Some(Shaped::file(&mime, entry.content))
}

/// Middleware, then the lambda, then the cache and the `api_response` log row.
fn run_route(
    serving: &Serving,
    slot: &Slot,
    file: &mut AdfFile,
    batch: &mut Batch,
    route: &Value,
    params: Map<String, Value>,
    incoming: Incoming,
) -> Shaped {
    let started = Instant::now();
    let method = incoming.method.to_string();
    let path = incoming.path.clone();
    let cache_key = incoming.cache_key.clone();
    let is_get = incoming.method == Method::GET;
    let abandoned = incoming.abandoned.clone();
    let http_request = request::http_request(
        &method,
        &path,
        params,
        incoming.query,
        incoming.headers,
        incoming.body,
    );
    let target = route.get("lambda").and_then(Value::as_str);
    let log_response = |file: &mut AdfFile, shaped: &Shaped| {
        let data = json!({
            "method": method,
            "path": path,
            "status": shaped.status,
            "duration_ms": started.elapsed().as_secs_f64() * 1000.0,
        });
        let level = if shaped.status >= 500 { "warn" } else { "info" };
        if let Err(error) = file.log(&NewLog {
            level,
            origin: Some(LOG_ORIGIN),
            event: Some("api_response"),
            target,
            message: &format!("{method} {path} → {}", shaped.status),
            data: Some(&data),
            r#loop: None,
        }) {
            tracing::warn!(%error, "cannot write a serving log row");
        }
    };
    let (mut shaped, logged) = route_answer(
        serving,
        slot,
        file,
        batch,
        route,
        RouteInput {
            http_request,
            abandoned,
        },
        &log_response,
    );
    if !logged {
        log_response(file, &shaped);
    }
    // Before the cache keeps it: a cached answer is served as it is.
    sandbox_unless_opted_out(file, &mut shaped);
    let ttl = route
        .get("cache_ttl_ms")
        .and_then(Value::as_u64)
        .filter(|ttl| *ttl > 0);
    if let Some(ttl) = ttl
        && is_get
    {
        // Cached only once the rows behind it committed (after the batch).
        batch.to_cache.push((
            batch.current,
            cache_key,
            Duration::from_millis(ttl),
            shaped.clone(),
        ));
    }
    shaped
}

/// The route's answer, and whether its `api_response` row is written already (committed with
/// the lambda's `result` row).
fn route_answer(
    serving: &Serving,
    slot: &Slot,
    file: &mut AdfFile,
    batch: &mut Batch,
    route: &Value,
    input: RouteInput,
    log_response: &dyn Fn(&mut AdfFile, &Shaped),
) -> (Shaped, bool) {
    let RouteInput {
        http_request,
        abandoned,
    } = input;
    let lambda = route
        .get("lambda")
        .and_then(Value::as_str)
        .ok_or_else(|| Shaped::error(ErrorCode::Internal, "the route names no lambda"))
        .and_then(|source| {
            LambdaRef::parse(source).map_err(|e| {
                Shaped::error(
                    ErrorCode::Internal,
                    &format!("the route's lambda is not valid: {}", e.message),
                )
            })
        });
    let lambda = match lambda {
        Ok(lambda) => lambda,
        Err(shaped) => return (shaped, false),
    };
    let references = match route.get("middleware") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        // Not an array: one reference, which fails closed as malformed.
        Some(other) => vec![other.clone()],
    };
    if !references.is_empty() {
        batch.settle(file);
    }
    let http_request = match middleware::run_route_chain(file, references, http_request, Map::new())
    {
        Ok(passed) => passed.data,
        Err(rejection) => {
            let code = if rejection.failed {
                ErrorCode::Internal
            } else {
                ErrorCode::MiddlewareRejected
            };
            let shaped =
                Shaped::error_with_status(rejection.code.min(599), code, &rejection.reason);
            return (shaped, false);
        }
    };
    let warm = route.get("warm").and_then(Value::as_bool) == Some(true);
    let mut answer = None;
    let call = LambdaCall {
        lambda: &lambda,
        input: http_request,
        warm,
        cancel: Some(abandoned),
    };
    let ran = run_lambda_with(serving, slot, file, call, |file, outcome| {
        let shaped = shape(outcome);
        log_response(file, &shaped);
        answer = Some(shaped);
    });
    match answer {
        Some(shaped) => (shaped, true),
        // The run never got to its closing rows (no runtime or sandbox).
        None => (shape(&ran), false),
    }
}

fn shape(outcome: &Result<Value, LambdaFailure>) -> Shaped {
    match outcome {
        Ok(value) => response::from_lambda(value)
            .unwrap_or_else(|why| Shaped::error(ErrorCode::InvalidRouteResponse, &why)),
        Err(failure) => Shaped::error(failure.code, &failure.message),
    }
}

/// A route's request as its middleware and lambda get it, and whether its client left.
struct RouteInput {
    http_request: Value,
    abandoned: tokio::sync::watch::Receiver<bool>,
}

/// One lambda run on the agent's sandbox.
struct LambdaCall<'a> {
    lambda: &'a LambdaRef,
    input: Value,
    warm: bool,
    /// Interrupts the run once it reads `true` (the request's client left).
    cancel: Option<tokio::sync::watch::Receiver<bool>>,
}

/// Why a lambda run gave no value.
#[derive(Debug)]
pub(crate) struct LambdaFailure {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
}

/// Runs `lambda` with `input` on this (blocking) thread against `file`, on the agent's
/// sandbox, one run at a time per agent, under the source file's authorization.
pub(crate) fn run_lambda_blocking(
    serving: &Serving,
    slot: &Slot,
    file: &mut AdfFile,
    lambda: &LambdaRef,
    input: Value,
    warm: bool,
) -> Result<Value, LambdaFailure> {
    let call = LambdaCall {
        lambda,
        input,
        warm,
        cancel: None,
    };
    run_lambda_with(serving, slot, file, call, |_, _| {})
}

/// [`run_lambda_blocking`], with `closing` writing rows that commit with the run's `result`
/// row (before the agent's next run may start).
fn run_lambda_with(
    serving: &Serving,
    slot: &Slot,
    file: &mut AdfFile,
    call: LambdaCall<'_>,
    closing: impl FnOnce(&mut AdfFile, &Result<Value, LambdaFailure>),
) -> Result<Value, LambdaFailure> {
    let LambdaCall {
        lambda,
        input,
        warm,
        cancel,
    } = call;
    let internal = |message: String| LambdaFailure {
        code: ErrorCode::Internal,
        message,
    };
    let options = RunOptions {
        warm,
        timeout: Some(serving.limits.lambda_timeout),
        ..RunOptions::default()
    };
    // One run at a time on the agent's sandbox; the request timeout bounds the wait.
    let mut turn = slot.runs.lock().unwrap_or_else(PoisonError::into_inner);
    if turn.is_none() {
        *turn = Some(
            LambdaRuntime::new()
                .map_err(|e| internal(format!("cannot start a runtime for the lambda: {e}")))?,
        );
    }
    let runtime = turn
        .as_ref()
        .ok_or_else(|| internal("the lambda runtime is gone".to_owned()))?;
    let mut outcome = None;
    runtime
        .block_on(async {
            let sandbox = agent_sandbox(slot).await.map_err(internal)?;
            let mut env = CodeEnv::new(sandbox, Arc::clone(&serving.tools));
            if let Some(cancel) = cancel {
                env = env.with_cancel(cancel);
            }
            code::run_lambda_closing(
                file,
                &env,
                lambda,
                input,
                Authorization::SourceFile,
                &DenyAll,
                &options,
                |file, run| {
                    let result = lambda_outcome(&run.result);
                    closing(file, &result);
                    outcome = Some(result);
                },
            )
            .await;
            Ok::<_, LambdaFailure>(())
        })
        .ok_or_else(|| internal("the lambda runtime is shut down".to_owned()))??;
    drop(turn);
    outcome.ok_or_else(|| internal("the lambda run left no outcome".to_owned()))?
}

fn lambda_outcome(result: &Result<Value, ToolError>) -> Result<Value, LambdaFailure> {
    match result {
        Ok(value) => Ok(value.clone()),
        Err(error) if error.code == ToolCode::Timeout => Err(LambdaFailure {
            code: ErrorCode::LambdaTimeout,
            message: format!("the lambda timed out: {}", error.message),
        }),
        Err(error) => Err(LambdaFailure {
            code: ErrorCode::LambdaError,
            message: format!("the lambda failed ({}): {}", error.code, error.message),
        }),
    }
}

async fn agent_sandbox(slot: &Slot) -> Result<Sandbox, String> {
    let existing = slot
        .sandbox
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if let Some(sandbox) = existing {
        return Ok(sandbox);
    }
    let sandbox = Sandbox::new(SandboxConfig::default())
        .await
        .map_err(|e| format!("cannot create the sandbox: {e}"))?;
    *slot.sandbox.lock().unwrap_or_else(PoisonError::into_inner) = Some(sandbox.clone());
    Ok(sandbox)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `count` held log rows, made the way the lane makes them.
    fn held(count: usize) -> Vec<adf_store::HeldLog> {
        let dir = tempfile::tempdir().unwrap();
        let mut file = AdfFile::create(
            dir.path().join("held.adf"),
            &adf_store::CreateOptions::default(),
        )
        .unwrap();
        file.hold_logs();
        for _ in 0..count {
            file.log(&NewLog {
                level: "info",
                origin: Some("serving"),
                message: "GET /hello → 200",
                ..Default::default()
            })
            .unwrap();
        }
        file.release_held_logs()
    }

    const QUEUED: BatchEnd = BatchEnd {
        wrote: false,
        idle: false,
        deferring: false,
    };
    const IDLE: BatchEnd = BatchEnd {
        idle: true,
        ..QUEUED
    };
    const WROTE: BatchEnd = BatchEnd {
        wrote: true,
        ..QUEUED
    };

    fn held_rows() -> HeldRows {
        HeldRows::new(&ServingLimits::default())
    }

    #[test]
    fn srv_05_log_rows_wait_while_requests_queue_until_a_write_an_idle_lane_or_enough_rows() {
        let now = Instant::now();
        let mut rows = held_rows();
        assert!(rows.add(held(3), QUEUED, now).is_empty(), "requests wait");
        assert_eq!(rows.add(held(3), WROTE, now).len(), 6, "the batch wrote");
        assert!(rows.add(held(3), QUEUED, now).is_empty());
        assert_eq!(rows.add(held(3), IDLE, now).len(), 6, "no request waits");
        assert_eq!(
            rows.add(held(HELD_LOGS_MAX_ROWS), QUEUED, now).len(),
            HELD_LOGS_MAX_ROWS,
            "enough rows gathered"
        );
        assert!(rows.add(held(1), QUEUED, now).is_empty());
        let max_age = ServingLimits::default().held_logs_max_age;
        assert_eq!(
            rows.add(held(1), QUEUED, now + max_age).len(),
            2,
            "old enough"
        );
        assert!(rows.add(Vec::new(), IDLE, now).is_empty(), "nothing held");
    }

    /// An agent whose batches begin less than `busy_batch_gap` apart keeps its rows while no
    /// request is queued, until they are old enough; the drain sleeps until then.
    #[test]
    fn srv_05_a_busy_agents_log_rows_wait_with_no_request_queued() {
        let limits = ServingLimits::default();
        let mut rows = held_rows();
        let mut now = Instant::now();
        rows.batch_begins(now);
        assert_eq!(
            rows.add(held(3), IDLE, now).len(),
            3,
            "one batch shows no load"
        );
        now += limits.busy_batch_gap * 50;
        rows.batch_begins(now);
        assert_eq!(rows.add(held(3), IDLE, now).len(), 3, "batches far apart");
        // Batches a fifth of the gap apart, long enough for the average to follow.
        for _ in 0..40 {
            now += limits.busy_batch_gap / 5;
            rows.batch_begins(now);
        }
        assert!(
            rows.add(held(3), IDLE, now).is_empty(),
            "busy: the rows wait"
        );
        assert_eq!(rows.due_in(now), Some(limits.held_logs_max_age));
        let later = now + limits.held_logs_max_age / 2;
        assert_eq!(rows.due_in(later), Some(limits.held_logs_max_age / 2));
        let due = rows.add(held(1), IDLE, now + limits.held_logs_max_age);
        assert_eq!(due.len(), 4, "old enough, with the newest row");
        assert_eq!(rows.due_in(now), None);
        // The load stops: far-apart batches bring the average back up.
        for _ in 0..40 {
            now += limits.busy_batch_gap * 10;
            rows.batch_begins(now);
        }
        assert_eq!(rows.add(held(3), IDLE, now).len(), 3, "idle again");
    }

    /// While a background pass copies a WAL at its bound, rows wait longer, and the drain
    /// looks every few milliseconds whether the pass ended; once it has, they are due.
    #[test]
    fn srv_05_log_rows_wait_for_the_wal_to_start_over_within_their_own_limits() {
        let limits = ServingLimits::default();
        let deferring = BatchEnd {
            deferring: true,
            ..QUEUED
        };
        let now = Instant::now();
        let mut rows = held_rows();
        assert!(rows.add(held(3), deferring, now).is_empty());
        let past_max_age = now + limits.held_logs_max_age;
        assert!(
            rows.add(held(3), deferring, past_max_age).is_empty(),
            "older than the usual limit, still waiting for the restart"
        );
        assert_eq!(
            rows.due_in(past_max_age),
            Some(HELD_LOGS_DEFER_POLL),
            "the drain looks again in a while, it does not spin"
        );
        assert!(
            rows.wait_for_restart(true, past_max_age),
            "the pass runs on"
        );
        assert!(
            !rows.wait_for_restart(false, past_max_age),
            "the pass ended"
        );
        assert!(
            !rows.wait_for_restart(true, now + HELD_LOGS_DEFER_MAX_AGE),
            "waited as long as a restart may take"
        );
        assert_eq!(
            rows.add(held(1), deferring, now + HELD_LOGS_DEFER_MAX_AGE)
                .len(),
            7
        );
        assert_eq!(
            rows.add(held(HELD_LOGS_DEFER_MAX_ROWS), deferring, now)
                .len(),
            HELD_LOGS_DEFER_MAX_ROWS,
            "too many rows to wait"
        );
    }
}
