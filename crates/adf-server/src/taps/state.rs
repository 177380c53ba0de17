//! [`Taps`]: one agent's umbilical taps as parsed from its config ([`Tap`], [`parse_taps`]),
//! with their bounded queue, per-tap token buckets and counters: the per-agent state of the
//! taps. A leaf, so the agent record (`registry.rs`) embeds it without importing the taps'
//! delivery logic, which lives in `taps.rs` (see its module docs).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde_json::Value;

use adf_runtime::code::LambdaRef;

use crate::events::Envelope;

/// `max_rate_per_sec` when absent or not a positive number.
pub const DEFAULT_MAX_RATE: f64 = 100.0;

/// One `umbilical_taps[]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Tap {
    /// The entry's `name`, or `#<index>` when it has none; keys its rate bucket and origin.
    pub name: String,
    /// The `path:function` run with each matching envelope as input.
    pub lambda: LambdaRef,
    /// `filter.event_types`: exact types, `*` or `prefix.*` (default `["*"]`).
    pub event_types: Vec<String>,
    /// Events published while this tap's own run is reported are not delivered back to it
    /// (default true).
    pub exclude_own_origin: bool,
    /// Events per second the tap's token bucket lets through; the rest are dropped (default
    /// [`DEFAULT_MAX_RATE`]).
    pub max_rate_per_sec: f64,
}

impl Tap {
    /// Whether the tap's `event_types` select `event_type`.
    pub fn matches(&self, event_type: &str) -> bool {
        self.event_types
            .iter()
            .any(|pattern| type_matches(pattern, event_type))
    }
}

fn is_wildcard(pattern: &str) -> bool {
    pattern == "*" || pattern.ends_with(".*")
}

fn type_matches(pattern: &str, event_type: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_suffix('*') {
        // `prefix.*`: the dot stays in the prefix, so `tool.*` does not match `toolbox.x`.
        Some(prefix) if prefix.ends_with('.') => event_type.starts_with(prefix),
        _ => pattern == event_type,
    }
}

/// The valid taps of `config`, and a description of each entry that was skipped.
pub fn parse_taps(config: &Value) -> (Vec<Tap>, Vec<String>) {
    let mut taps = Vec::new();
    let mut skipped = Vec::new();
    let entries = config
        .get("umbilical_taps")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for (index, entry) in entries.iter().enumerate() {
        let name = entry
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map_or_else(|| format!("#{index}"), str::to_owned);
        let lambda = match entry
            .get("lambda")
            .and_then(Value::as_str)
            .map(LambdaRef::parse)
        {
            Some(Ok(lambda)) => lambda,
            Some(Err(error)) => {
                skipped.push(format!("tap {name}: bad lambda: {}", error.message));
                continue;
            }
            None => {
                skipped.push(format!("tap {name}: no lambda"));
                continue;
            }
        };
        let filter = entry.get("filter");
        let event_types: Vec<String> = match filter.and_then(|f| f.get("event_types")) {
            None | Some(Value::Null) => vec!["*".to_owned()],
            Some(Value::Array(types)) => types
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            Some(_) => {
                skipped.push(format!("tap {name}: filter.event_types is not an array"));
                continue;
            }
        };
        let allow_wildcard = filter
            .and_then(|f| f.get("allow_wildcard"))
            .and_then(Value::as_bool)
            == Some(true);
        if !allow_wildcard && event_types.iter().any(|t| is_wildcard(t)) {
            skipped.push(format!(
                "tap {name}: wildcard event_types require filter.allow_wildcard: true"
            ));
            continue;
        }
        let exclude_own_origin = entry
            .get("exclude_own_origin")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let max_rate_per_sec = entry
            .get("max_rate_per_sec")
            .and_then(Value::as_f64)
            .filter(|r| r.is_finite() && *r > 0.0)
            .unwrap_or(DEFAULT_MAX_RATE);
        taps.push(Tap {
            name,
            lambda,
            event_types,
            exclude_own_origin,
            max_rate_per_sec,
        });
    }
    (taps, skipped)
}

/// The taps that run for `config`: none while the agent is `off`. Skipped entries are
/// reported as tracing warnings for `agent`.
pub(super) fn taps_of(config: &Value, agent: &str) -> Arc<[Tap]> {
    let (taps, skipped) = parse_taps(config);
    for problem in skipped {
        tracing::warn!(agent, "umbilical tap skipped: {problem}");
    }
    if config.get("state").and_then(Value::as_str) == Some("off") {
        Arc::from([])
    } else {
        taps.into()
    }
}

#[derive(Debug)]
pub(super) struct Bucket {
    pub(super) rate: f64,
    pub(super) tokens: f64,
    pub(super) last: Instant,
}

impl Bucket {
    /// A full bucket at `now`; the time is a parameter so tests can drive the refill.
    pub(super) fn new(rate: f64, now: Instant) -> Self {
        Self {
            rate,
            tokens: rate.max(1.0),
            last: now,
        }
    }

    pub(super) fn take(&mut self, now: Instant) -> bool {
        let refill = now.duration_since(self.last).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.rate.max(1.0));
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[derive(Debug)]
pub(super) struct Queued {
    pub(super) envelope: Envelope,
    /// The tap whose run published it, if any.
    pub(super) origin: Option<String>,
}

#[derive(Debug, Default)]
pub(super) struct TapState {
    /// The parsed taps with the trigger generation they were read at.
    pub(super) cached: Option<(u64, Arc<[Tap]>)>,
    pub(super) pending: VecDeque<Queued>,
    pub(super) draining: bool,
    pub(super) buckets: HashMap<String, Bucket>,
    /// Rate-limited drops per tap not yet reported in a log row.
    pub(super) unlogged: HashMap<String, u64>,
    pub(super) queue_dropped_unlogged: u64,
    pub(super) delivered: u64,
    pub(super) rate_dropped: u64,
    pub(super) queue_dropped: u64,
}

/// One agent's taps: the cache, the bounded queue, the buckets and the counters.
#[derive(Debug, Default)]
pub struct Taps {
    state: Mutex<TapState>,
}

/// Counters of an agent's [`Taps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapStats {
    /// Tap lambda runs started.
    pub delivered: u64,
    /// Events a tap's `max_rate_per_sec` dropped.
    pub rate_dropped: u64,
    /// Events dropped because the tap queue was full.
    pub queue_dropped: u64,
    /// Whether a task is working through the queue.
    pub draining: bool,
}

impl Taps {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, TapState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Caches the taps of `config`, read at trigger `generation` (the load already has it).
    pub(crate) fn prime(&self, agent_id: &str, config: &Value, generation: u64) {
        let taps = taps_of(config, agent_id);
        self.lock().cached = Some((generation, taps));
    }

    /// A snapshot of the taps' counters, taken under their lock.
    pub fn stats(&self) -> TapStats {
        let state = self.lock();
        TapStats {
            delivered: state.delivered,
            rate_dropped: state.rate_dropped,
            queue_dropped: state.queue_dropped,
            draining: state.draining,
        }
    }
}
