//! The per-agent umbilical replay log (§5.24, CFG-42): with `umbilical.log.enabled`, the last
//! `max_events` (default 2000) events of the agent, minus `exclude_types` (exact names or
//! `prefix.*`), kept in memory only — never persisted, so a restart starts empty. The
//! high-rate [`NEVER_LOGGED`] types (`turn.delta`, `binding.flow_summary`) are never kept, so
//! a streaming reply cannot flush the window.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use serde_json::Value;

/// The default window (`umbilical.log.max_events`).
pub const DEFAULT_MAX_EVENTS: usize = 2000;
/// Event types the window never keeps (as in the reference runtime).
pub const NEVER_LOGGED: [&str; 2] = ["turn.delta", "binding.flow_summary"];
/// The largest window an agent may ask for.
pub const MAX_MAX_EVENTS: usize = 100_000;

#[derive(Debug)]
struct AgentLog {
    max: usize,
    exclude: Vec<String>,
    events: VecDeque<(u64, Value)>,
}

/// The replay logs of every agent that enabled one.
#[derive(Debug, Default)]
pub struct UmbilicalLogs {
    logs: Mutex<HashMap<String, AgentLog>>,
}

fn excluded(patterns: &[String], event_type: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => event_type.starts_with(prefix),
        None => p == event_type,
    })
}

impl UmbilicalLogs {
    /// Applies the agent's `umbilical.log` (on load and after each config change): enabled
    /// keeps (and trims) its window, anything else drops it.
    pub fn configure(&self, agent_id: &str, config: &Value) {
        let log = config.pointer("/umbilical/log");
        let enabled = log.and_then(|l| l.get("enabled")).and_then(Value::as_bool) == Some(true);
        let mut logs = self.logs.lock().unwrap_or_else(PoisonError::into_inner);
        if !enabled {
            logs.remove(agent_id);
            return;
        }
        let max = log
            .and_then(|l| l.get("max_events"))
            .and_then(Value::as_u64)
            .and_then(|m| usize::try_from(m).ok())
            .unwrap_or(DEFAULT_MAX_EVENTS)
            .clamp(1, MAX_MAX_EVENTS);
        let exclude = log
            .and_then(|l| l.get("exclude_types"))
            .and_then(Value::as_array)
            .map(|types| {
                types
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let entry = logs.entry(agent_id.to_owned()).or_insert_with(|| AgentLog {
            max,
            exclude: Vec::new(),
            events: VecDeque::new(),
        });
        entry.max = max;
        entry.exclude = exclude;
        while entry.events.len() > entry.max {
            entry.events.pop_front();
        }
    }

    /// Records one event (`seq` is the agent's sequence number) when the agent keeps a log.
    pub fn record(
        &self,
        agent_id: &str,
        event_type: &str,
        seq: u64,
        event: impl FnOnce() -> Value,
    ) {
        let mut logs = self.logs.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(log) = logs.get_mut(agent_id) else {
            return;
        };
        if NEVER_LOGGED.contains(&event_type) || excluded(&log.exclude, event_type) {
            return;
        }
        if log.events.len() >= log.max {
            log.events.pop_front();
        }
        log.events.push_back((seq, event()));
    }

    /// The agent's logged events after `since` (a `seq`), oldest first, at most `limit`;
    /// `None` when the agent keeps no log.
    pub fn events(&self, agent_id: &str, since: u64, limit: usize) -> Option<Vec<Value>> {
        let logs = self.logs.lock().unwrap_or_else(PoisonError::into_inner);
        let log = logs.get(agent_id)?;
        Some(
            log.events
                .iter()
                .filter(|(seq, _)| *seq > since)
                .take(limit)
                .map(|(_, event)| event.clone())
                .collect(),
        )
    }

    /// Drops the agent's log (unload).
    pub fn release(&self, agent_id: &str) {
        self.logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(agent_id);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn types(logs: &UmbilicalLogs, since: u64) -> Vec<String> {
        logs.events("a", since, 100)
            .unwrap()
            .iter()
            .map(|e| e["event_type"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn cfg_42_the_log_is_off_by_default_and_keeps_a_window() {
        let logs = UmbilicalLogs::default();
        logs.record("a", "x", 1, || json!({}));
        assert!(logs.events("a", 0, 10).is_none(), "off by default");
        logs.configure(
            "a",
            &json!({ "umbilical": { "log": { "enabled": true, "max_events": 2, "exclude_types": ["timer.*", "lambda.started"] } } }),
        );
        for (seq, kind) in [
            (1, "a.one"),
            (2, "timer.fired"),
            (3, "lambda.started"),
            (4, "a.two"),
            (5, "a.three"),
        ] {
            logs.record("a", kind, seq, || json!({ "event_type": kind }));
        }
        assert_eq!(types(&logs, 0), ["a.two", "a.three"]);
        assert_eq!(types(&logs, 4), ["a.three"]);
        logs.configure(
            "a",
            &json!({ "umbilical": { "log": { "enabled": false } } }),
        );
        assert!(logs.events("a", 0, 10).is_none());
    }

    #[test]
    fn cfg_42_the_default_window_is_2000_events() {
        let logs = UmbilicalLogs::default();
        logs.configure("a", &json!({ "umbilical": { "log": { "enabled": true } } }));
        for seq in 1..=2100 {
            logs.record("a", "e", seq, || json!({ "event_type": "e", "seq": seq }));
        }
        let kept = logs.events("a", 0, 10_000).unwrap();
        assert_eq!(kept.len(), DEFAULT_MAX_EVENTS);
        assert_eq!(kept[0]["seq"], 101);
    }
}
