//! Umbilical taps (spec §5.24): lambdas the agent declares in `umbilical_taps[]` that receive
//! the umbilical events the daemon publishes for that agent, and `emit_event`'s `custom.*`
//! events.
//!
//! Principal items: [`Tap`] (one parsed `umbilical_taps[]` entry, [`parse_taps`]), [`Taps`]
//! (an agent's bounded tap queue, its per-tap token buckets and counters), and
//! [`CustomEvents`] (the `EventSink` a daemon lambda run gets, so `adf.emit_event` becomes a
//! real bus event).
//!
//! Flow. `Hub::emit` offers every agent event to `offer` right
//! before it is published. That call never waits: when the agent is known to have no tap it
//! returns at once (the parsed taps are cached until the agent's trigger targets are
//! invalidated, i.e. until the config may have changed), otherwise the envelope joins the
//! agent's tap queue of at most [`TAP_QUEUE_CAPACITY`] events (a full queue drops and counts).
//! One task per agent, alive only while that queue is non-empty, matches each event against
//! the taps and runs each matching tap's lambda as one system-scope job on the agent's worker
//! (the lambda file's `authorized` flag decides its authorization, as for trigger lambdas),
//! with the envelope as input.
//!
//! Filters. `filter.event_types` (default `["*"]`) lists exact types, `*` (everything) or
//! `prefix.*` (types starting with `prefix.`); a wildcard needs `filter.allow_wildcard: true`
//! (CFG-41): a tap that breaks the rule, or names no valid lambda, is skipped (a tracing
//! warning per config read), never run with a guessed filter. `filter.when` is accepted and
//! **not evaluated**: the spec names it without saying what it holds, so this daemon does not
//! guess an expression language; a tap with `when` receives what its `event_types` match.
//!
//! `exclude_own_origin` (default true): events published while the daemon reports a tap's own
//! run — its `lambda.started`/`lambda.completed`, the `file.written` of files it wrote, the
//! `custom.*` events it emitted — carry that tap as their origin (a task-local set around the
//! publishing) and are not delivered back to it. Other taps receive them.
//!
//! `max_rate_per_sec` (default 100) is a token bucket per tap (capacity one second of events):
//! an event that finds it empty is dropped and counted, and when the queue drains one `warn`
//! log row (`origin umbilical_tap`, event `tap_rate_limited`) per tap reports the burst.
//! The bound: [`TAP_QUEUE_CAPACITY`] queued envelopes per agent, plus at most
//! [`MAX_CUSTOM_EVENTS`] buffered custom events per lambda run.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use adf_runtime::triggers::Producer;

use crate::dispatch::sweeper;
use crate::events::Envelope;
use crate::hub::Hub;
use crate::lambdas::run_system_lambda;
use crate::registry::Agent;

pub use crate::custom_events::{
    CustomEvent, CustomEvents, MAX_CUSTOM_EVENTS, MAX_CUSTOM_PAYLOAD_BYTES,
};

mod state;

use state::{Bucket, Queued, taps_of};
pub use state::{DEFAULT_MAX_RATE, Tap, TapStats, Taps, parse_taps};

/// Most events one agent's tap queue holds; beyond it events are dropped (and counted).
pub const TAP_QUEUE_CAPACITY: usize = 256;

tokio::task_local! {
    /// The tap whose run the events published in this scope report (for `exclude_own_origin`).
    static TAP_ORIGIN: String;
}

/// Queues `envelope` for `agent`'s taps; never waits. Called by `emit` for every agent
/// event just before it is published.
pub(crate) fn offer(hub: &Arc<Hub>, agent: &Agent, envelope: &Envelope) {
    let generation = agent.triggers().generation();
    let start = {
        let mut state = agent.taps().lock();
        if let Some((seen, taps)) = &state.cached
            && *seen == generation
            && taps.is_empty()
        {
            return;
        }
        if state.pending.len() >= TAP_QUEUE_CAPACITY {
            state.queue_dropped += 1;
            state.queue_dropped_unlogged += 1;
            return;
        }
        state.pending.push_back(Queued {
            envelope: envelope.clone(),
            origin: TAP_ORIGIN.try_with(String::clone).ok(),
        });
        !std::mem::replace(&mut state.draining, true)
    };
    if !start {
        return;
    }
    // The queue task needs the shared handle; an agent being unloaded is not found, and
    // its taps stop with it.
    match hub
        .agent(&agent.id)
        .ok()
        .filter(|found| std::ptr::eq(Arc::as_ptr(found), agent))
    {
        Some(agent) => {
            let hub = Arc::clone(hub);
            tokio::spawn(async move { drain_taps(&hub, agent).await });
        }
        None => {
            let mut state = agent.taps().lock();
            state.pending.clear();
            state.draining = false;
        }
    }
}

async fn drain_taps(hub: &Arc<Hub>, agent: Arc<Agent>) {
    loop {
        let next = {
            let mut state = agent.taps().lock();
            let next = state.pending.pop_front();
            if next.is_none() {
                state.draining = false;
            }
            next
        };
        let Some(queued) = next else {
            log_tap_drops(&agent).await;
            return;
        };
        let Some(taps) = current_taps(&agent).await else {
            continue;
        };
        let event_type = queued.envelope.event_type.as_str();
        for tap in taps.iter().filter(|tap| tap.matches(event_type)) {
            if tap.exclude_own_origin && queued.origin.as_deref() == Some(tap.name.as_str()) {
                continue;
            }
            let allowed = {
                let mut state = agent.taps().lock();
                let now = Instant::now();
                let bucket = state
                    .buckets
                    .entry(tap.name.clone())
                    .or_insert_with(|| Bucket::new(tap.max_rate_per_sec, now));
                if bucket.rate != tap.max_rate_per_sec {
                    *bucket = Bucket::new(tap.max_rate_per_sec, now);
                }
                let allowed = bucket.take(now);
                if allowed {
                    state.delivered += 1;
                } else {
                    state.rate_dropped += 1;
                    *state.unlogged.entry(tap.name.clone()).or_default() += 1;
                }
                allowed
            };
            if allowed {
                run_tap(hub, &agent, tap, &queued.envelope).await;
            }
        }
    }
}

/// The agent's taps, parsed from its config once per trigger generation (a config change
/// invalidates the targets, and with them these). An agent in state `off` has none.
async fn current_taps(agent: &Arc<Agent>) -> Option<Arc<[Tap]>> {
    let generation = agent.triggers().generation();
    if let Some((seen, taps)) = &agent.taps().lock().cached
        && *seen == generation
    {
        return Some(Arc::clone(taps));
    }
    let config = match agent.job(|file| file.config()).await {
        Ok(config) => config,
        Err(error) => {
            tracing::warn!(agent = %agent.id, %error, "cannot read the config for taps");
            return None;
        }
    };
    let taps = taps_of(&config, &agent.id);
    agent.taps().lock().cached = Some((generation, Arc::clone(&taps)));
    Some(taps)
}

/// Runs one tap's lambda with the envelope as input (one job), then reports the run with
/// the tap as origin of what it publishes.
async fn run_tap(hub: &Arc<Hub>, agent: &Arc<Agent>, tap: &Tap, envelope: &Envelope) {
    let registry = hub.tools();
    let observer = Arc::clone(agent);
    let lambda = tap.lambda.clone();
    let producer = Producer::Lambda {
        source: lambda.source(),
    };
    let input = serde_json::to_value(envelope).unwrap_or(Value::Null);
    let outcome = agent
        .store()
        .run(move |file| {
            let mut report =
                run_system_lambda(file, sweeper(&observer), registry, lambda, input, false);
            let events = std::mem::take(&mut report.events);
            Ok((report, events, crate::scheduler::wake_of(file)))
        })
        .await;
    // The lambda may have changed the config (targets, taps, state).
    agent.triggers().invalidate();
    match outcome {
        Ok((report, events, wake)) => {
            TAP_ORIGIN
                .scope(tap.name.clone(), async {
                    crate::dispatch::publish_lambda(hub, agent, &report, "umbilical_tap").await;
                    let written = report.written.clone();
                    crate::dispatch::dispatch_handled(hub, agent, wake, written, producer, events)
                        .await;
                })
                .await;
        }
        Err(error) => {
            tracing::warn!(agent = %agent.id, tap = %tap.name, %error, "tap run failed")
        }
    }
}

/// One `warn` row per tap that dropped events in the burst that just ended, and one for
/// events the full queue dropped.
async fn log_tap_drops(agent: &Agent) {
    let (per_tap, queue) = {
        let mut state = agent.taps().lock();
        let queue = std::mem::take(&mut state.queue_dropped_unlogged);
        // Events queued before the config was read, for an agent that turned out to have
        // no tap, lost nothing: no row for them.
        let has_taps = state
            .cached
            .as_ref()
            .is_some_and(|(_, taps)| !taps.is_empty());
        (
            std::mem::take(&mut state.unlogged),
            if has_taps { queue } else { 0 },
        )
    };
    if per_tap.is_empty() && queue == 0 {
        return;
    }
    let result = agent
        .job(move |file| {
            let mut per_tap: Vec<(String, u64)> = per_tap.into_iter().collect();
            per_tap.sort();
            for (tap, dropped) in per_tap {
                let data = json!({ "tap": tap, "dropped": dropped });
                file.log(&adf_store::NewLog {
                    level: "warn",
                    origin: Some("umbilical_tap"),
                    event: Some("tap_rate_limited"),
                    target: Some(&tap),
                    message: &format!(
                        "{dropped} umbilical events dropped by tap {tap}: over its max_rate_per_sec"
                    ),
                    data: Some(&data),
                    r#loop: None,
                })?;
            }
            if queue > 0 {
                let data = json!({ "dropped": queue, "capacity": TAP_QUEUE_CAPACITY });
                file.log(&adf_store::NewLog {
                    level: "warn",
                    origin: Some("umbilical_tap"),
                    event: Some("tap_queue_dropped"),
                    target: None,
                    message: &format!(
                        "{queue} umbilical events dropped: the tap queue holds {TAP_QUEUE_CAPACITY}"
                    ),
                    data: Some(&data),
                    r#loop: None,
                })?;
            }
            Ok(())
        })
        .await;
    if let Err(error) = result {
        tracing::warn!(agent = %agent.id, %error, "cannot log tap drops");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use adf_runtime::code::EventSink;
    use std::time::Duration;

    #[test]
    fn cfg_41_wildcards_need_allow_wildcard_and_defaults_apply() {
        let config = json!({ "umbilical_taps": [
            { "name": "all", "lambda": "lib/t.ts:all" },
            { "name": "tools", "lambda": "lib/t.ts:t", "filter": { "event_types": ["tool.*"] } },
            { "name": "ok", "lambda": "lib/t.ts:ok", "filter": { "event_types": ["tool.*", "custom.x"], "allow_wildcard": true }, "exclude_own_origin": false, "max_rate_per_sec": 5 },
            { "name": "exact", "lambda": "lib/t.ts", "filter": { "event_types": ["file.written"] } },
            { "name": "nolambda" },
        ]});
        let (taps, skipped) = parse_taps(&config);
        let names: Vec<&str> = taps.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["ok", "exact"]);
        assert_eq!(skipped.len(), 3, "{skipped:?}");
        assert!(!taps[0].exclude_own_origin);
        assert!((taps[0].max_rate_per_sec - 5.0).abs() < f64::EPSILON);
        assert!(taps[1].exclude_own_origin);
        assert!((taps[1].max_rate_per_sec - DEFAULT_MAX_RATE).abs() < f64::EPSILON);
        assert_eq!(taps[1].lambda.function, "main");
        assert!(taps[0].matches("tool.called"));
        assert!(!taps[0].matches("toolbox.x"));
        assert!(taps[0].matches("custom.x"));
        assert!(!taps[0].matches("custom.y"));
        assert!(taps[1].matches("file.written") && !taps[1].matches("file.deleted"));
    }

    #[test]
    fn a_bucket_holds_one_second_of_events() {
        let start = Instant::now();
        let mut bucket = Bucket::new(3.0, start);
        assert!(bucket.take(start) && bucket.take(start) && bucket.take(start));
        assert!(!bucket.take(start));
        // A third of a second refills one event at 3/s, no more.
        let third = start + Duration::from_millis(334);
        assert!(bucket.take(third));
        assert!(!bucket.take(third));
        // A long quiet spell refills one second's worth, not more.
        let later = third + Duration::from_secs(60);
        assert!(bucket.take(later) && bucket.take(later) && bucket.take(later));
        assert!(!bucket.take(later));
    }

    #[test]
    fn a_bucket_below_one_event_per_second_still_holds_one() {
        let start = Instant::now();
        let mut bucket = Bucket::new(0.5, start);
        assert!(bucket.take(start));
        assert!(!bucket.take(start + Duration::from_secs(1)));
        assert!(bucket.take(start + Duration::from_secs(2)));
    }

    #[test]
    fn the_custom_event_buffer_is_bounded_and_truncates_big_payloads() {
        let sink = CustomEvents::default();
        let big = json!({ "text": "x".repeat(MAX_CUSTOM_PAYLOAD_BYTES) });
        assert!(sink.emit("lib/a.ts:main", "custom.big", &big));
        for _ in 1..MAX_CUSTOM_EVENTS {
            assert!(sink.emit("lib/a.ts:main", "custom.x", &json!({})));
        }
        assert!(!sink.emit("lib/a.ts:main", "custom.x", &json!({})));
        assert_eq!(sink.dropped(), 1);
        let events = sink.take();
        assert_eq!(events.len(), MAX_CUSTOM_EVENTS);
        assert_eq!(events[0].payload["_truncated"], true);
    }
}
