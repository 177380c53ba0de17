//! `GET /events[?agentId=][&since=]`: the event stream as Server-Sent Events.
//!
//! Wire format as in the reference: `: connected` first, then frames
//! `id: <cursor>` / `event: <event_type>` / `data: {"cursor","event"}`, and a
//! `: heartbeat <ms>` comment every 30 s. Without `since` the whole ring is replayed (as in
//! the reference); with `since=N` only frames after cursor N. The stream ends when the daemon
//! shuts down, so graceful shutdown never waits on an open stream.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderValue, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use tokio::sync::watch;
use tokio::time::{Interval, MissedTickBehavior};

use super::AppState;
use crate::error::{ApiError, ApiResult};
use crate::events::{EventBus, Frame};

/// The reference's heartbeat period.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(30);

pub(super) async fn events(
    State(state): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let since = match params.get("since") {
        None => 0,
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request("since must be an integer"))?,
    };
    // Accept a handle or name too, as path segments do; events carry the config id.
    let agent_filter = params.get("agentId").filter(|a| !a.is_empty()).map(|key| {
        state
            .daemon
            .agent(key)
            .map_or_else(|_| key.clone(), |a| a.id.clone())
    });
    let bus = state.daemon.events().clone();
    // Subscribe before reading the ring, so nothing published in between is missed.
    let newest = bus.watch();
    let pending: VecDeque<Arc<Frame>> = bus.since(since).into();
    let mut heartbeat =
        tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let stream = frames(Cursor {
        bus,
        newest,
        shutdown: state.daemon.shutdown_signal(),
        pending,
        last: since,
        agent_filter,
        heartbeat,
        connected: false,
    });
    let mut response = Sse::new(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

struct Cursor {
    bus: EventBus,
    newest: watch::Receiver<u64>,
    shutdown: watch::Receiver<bool>,
    pending: VecDeque<Arc<Frame>>,
    last: u64,
    agent_filter: Option<String>,
    heartbeat: Interval,
    connected: bool,
}

fn frames(cursor: Cursor) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold(cursor, |mut c| async move {
        if !c.connected {
            c.connected = true;
            return Some((Ok(Event::default().comment("connected")), c));
        }
        loop {
            while let Some(frame) = c.pending.pop_front() {
                c.last = frame.cursor;
                let wanted = c
                    .agent_filter
                    .as_deref()
                    .is_none_or(|id| frame.event.agent_id.as_deref() == Some(id));
                if !wanted {
                    continue;
                }
                let data = serde_json::to_string(&*frame).unwrap_or_default();
                let event = Event::default()
                    .id(frame.cursor.to_string())
                    .event(frame.event.event_type.clone())
                    .data(data);
                return Some((Ok(event), c));
            }
            if *c.shutdown.borrow() {
                return None;
            }
            tokio::select! {
                changed = c.newest.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    c.pending.extend(c.bus.since(c.last));
                }
                _ = c.shutdown.changed() => return None,
                _ = c.heartbeat.tick() => {
                    let ms = adf_store::time::now_ms();
                    return Some((Ok(Event::default().comment(format!("heartbeat {ms}"))), c));
                }
            }
        }
    })
}
