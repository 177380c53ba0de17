//! The hibernate nudge (missing-tables §5.7 `limits.hibernate_nudge`, TRG-35): a hibernating
//! agent is woken with a nudge turn every `interval_ms` (default 24 h), only while
//! `triggers.on_timer` is enabled with an agent-scope target (a nudge is an agent-scope
//! `on_timer` fire, so TRG-25's rule applies to it as to any timer).
//!
//! The decisions are pure, with the clock passed in: the daemon's timer scheduler asks
//! [`due_at`] for the agent's next nudge and sleeps until the earliest of that and its timers.
//! The interval is counted from the later of the last nudge and the last transcript row, so an
//! agent that just went to sleep (its `sys_set_state` turn wrote rows) is not nudged at once.

use serde_json::Value;

use super::{Scope, Target, TriggerKind, targets};

/// `limits.hibernate_nudge.interval_ms` when absent: 24 hours.
pub const DEFAULT_INTERVAL_MS: u64 = 86_400_000;

/// The meta key where the daemon records when it last nudged (epoch ms). Recorded before the
/// nudge turn runs, like a timer's fire, so a failing turn is not retried in a hot loop.
pub const META_KEY: &str = "runtime_hibernate_nudge_at";

/// The nudge interval and the `on_timer` agent target the nudge turn goes to, when `config`
/// calls for nudges: stored state `hibernate`, the nudge not disabled, and `on_timer` enabled
/// with an agent-scope target.
pub fn applies(config: &Value) -> Option<(u64, Target)> {
    if config.get("state").and_then(Value::as_str) != Some("hibernate") {
        return None;
    }
    let nudge = config.pointer("/limits/hibernate_nudge");
    if nudge
        .and_then(|n| n.get("enabled"))
        .and_then(Value::as_bool)
        == Some(false)
    {
        return None;
    }
    let interval = nudge
        .and_then(|n| n.get("interval_ms"))
        .and_then(Value::as_u64)
        .filter(|ms| *ms > 0)
        .unwrap_or(DEFAULT_INTERVAL_MS);
    let target = targets(config)
        .0
        .into_iter()
        .find(|t| t.kind == TriggerKind::OnTimer && t.scope == Scope::Agent)?;
    Some((interval, target))
}

/// When the next nudge is due: `interval_ms` after the later of the last nudge and the last
/// transcript row. `None` when neither is known (the daemon then records "now" as the start).
pub fn due_at(
    interval_ms: u64,
    last_nudge: Option<i64>,
    last_activity: Option<i64>,
) -> Option<i64> {
    let base = last_nudge.into_iter().chain(last_activity).max()?;
    Some(base.saturating_add(i64::try_from(interval_ms).unwrap_or(i64::MAX)))
}

/// The nudge turn's message (the reference delivers a `[System] You have been hibernating …`
/// payload).
pub fn message(hibernating_ms: i64) -> String {
    let hours = hibernating_ms.max(0) as f64 / 3_600_000.0;
    format!(
        "[System] You have been hibernating for {hours:.1} h. Check whether anything needs your attention; call sys_set_state with \"hibernate\" to go back to sleep."
    )
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config(state: &str, nudge: Value, on_timer: Value) -> Value {
        json!({ "state": state, "limits": { "hibernate_nudge": nudge }, "triggers": { "on_timer": on_timer } })
    }

    #[test]
    fn trg_35_a_nudge_needs_hibernate_an_enabled_nudge_and_an_agent_on_timer_target() {
        let agent_timer =
            json!({ "enabled": true, "targets": [{ "scope": "agent", "loop": "main" }] });
        let on = config(
            "hibernate",
            json!({ "interval_ms": 500 }),
            agent_timer.clone(),
        );
        let (interval, target) = applies(&on).expect("applies");
        assert_eq!((interval, target.loop_name.as_str()), (500, "main"));
        let default = config("hibernate", Value::Null, agent_timer.clone());
        assert_eq!(applies(&default).map(|a| a.0), Some(DEFAULT_INTERVAL_MS));
        assert!(applies(&config("idle", json!({}), agent_timer.clone())).is_none());
        assert!(
            applies(&config(
                "hibernate",
                json!({ "enabled": false }),
                agent_timer
            ))
            .is_none()
        );
        let system_only =
            json!({ "enabled": true, "targets": [{ "scope": "system", "lambda": "a.ts:f" }] });
        assert!(applies(&config("hibernate", json!({}), system_only)).is_none());
        let disabled = json!({ "enabled": false, "targets": [{ "scope": "agent" }] });
        assert!(applies(&config("hibernate", json!({}), disabled)).is_none());
    }

    #[test]
    fn trg_35_the_interval_counts_from_the_last_nudge_or_the_last_activity() {
        let day = DEFAULT_INTERVAL_MS as i64;
        assert_eq!(due_at(DEFAULT_INTERVAL_MS, None, None), None);
        assert_eq!(
            due_at(DEFAULT_INTERVAL_MS, Some(1_000), None),
            Some(1_000 + day)
        );
        assert_eq!(
            due_at(DEFAULT_INTERVAL_MS, Some(1_000), Some(5_000)),
            Some(5_000 + day)
        );
        assert_eq!(due_at(DEFAULT_INTERVAL_MS, None, Some(7)), Some(7 + day));
        assert!(message(2 * 3_600_000).contains("hibernating for 2.0 h"));
    }
}
