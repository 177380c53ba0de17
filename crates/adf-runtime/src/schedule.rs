//! Timer schedules (spec §7.6, §7.7): resolving the schedule a caller gives `sys_set_timer`
//! into the stored form, reading a stored `schedule_json` back, and computing fire times.
//!
//! Everything here is pure: the current time is a parameter, so the scheduler and the tests
//! decide what "now" is.
//!
//! Input forms (`schedule.type`; `mode` is accepted as a synonym so a stored schedule can be
//! passed back in):
//!
//! | type | required | optional | stored as |
//! |---|---|---|---|
//! | `once` | `at` (epoch ms, future) | | `{mode:"once", at}` |
//! | `delay` | `delay_ms` (> 0) | | `{mode:"once", at: now + delay_ms}` |
//! | `interval` | `every_ms` (> 0) | `start_at` (future), `end_at`, `max_runs` | `{mode:"interval", every_ms, ...}` |
//! | `cron` | `cron` (5 fields) | `end_at`, `max_runs` | `{mode:"cron", cron, ...}` |
//!
//! Optional fields are omitted from the stored form when absent; readers accept `null` too.
//!
//! Time zone of cron expressions (Appendix B #7): the runtime's local zone, as the reference
//! runtime does (`TZ` is honoured through the C library's zone rules), because a schedule such
//! as `0 9 * * 1-5` is written by people meaning their own morning. The file stores no zone; a
//! timer moved to a machine in another zone fires at that machine's 9:00.
//! [`next_fire_after_in`] takes the zone explicitly for callers (and tests) that want another.
//!
//! Dialect: croner's, restricted to five fields (minute hour day-of-month month day-of-week):
//! lists, ranges, steps, names (`MON`, `JAN`), `L`, `#`, `W` and the `@daily` family; a
//! seconds or year field is refused.

use std::fmt;
use std::str::FromStr as _;

use chrono::{DateTime, Local, TimeZone, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde_json::{Map, Value, json};

/// A resolved timer schedule.
#[derive(Clone)]
pub enum Schedule {
    /// Fires once at `at`.
    Once {
        /// When to fire, in Unix milliseconds.
        at: i64,
    },
    /// Fires at `start_at` (or one interval after creation), then every `every_ms`.
    Interval {
        /// Time between fires, in milliseconds.
        every_ms: i64,
        /// First fire, in Unix milliseconds.
        start_at: Option<i64>,
        /// No fire after this time, in Unix milliseconds.
        end_at: Option<i64>,
        /// The timer expires after this many fires.
        max_runs: Option<i64>,
    },
    /// Fires at each match of a five-field cron expression.
    Cron {
        /// The expression as the caller wrote it, stored back unchanged.
        expression: String,
        /// The parsed expression that computes the next match.
        parsed: Box<Cron>,
        /// No fire after this time, in Unix milliseconds.
        end_at: Option<i64>,
        /// The timer expires after this many fires.
        max_runs: Option<i64>,
    },
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_stored().to_string())
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.to_stored() == other.to_stored()
    }
}

/// A schedule that cannot be accepted, with a message for the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(pub String);

fn error(message: impl Into<String>) -> ScheduleError {
    ScheduleError(message.into())
}

/// Parses a five-field cron expression.
pub fn parse_cron(expression: &str) -> Result<Cron, ScheduleError> {
    let fields = expression.split_whitespace().count();
    let nickname = expression.trim_start().starts_with('@');
    if !nickname && fields != 5 {
        return Err(error(format!(
            "invalid cron expression '{expression}': expected 5 fields (minute hour day-of-month month day-of-week), found {fields}"
        )));
    }
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(expression)
        .map_err(|e| error(format!("invalid cron expression '{expression}': {e}")))
}

/// An integer field of a schedule object: absent and `null` are `None`; anything but a whole
/// number is an error.
fn integer(object: &Map<String, Value>, key: &str) -> Result<Option<i64>, ScheduleError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_i64()
            .or_else(|| {
                value
                    .as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            })
            .map(Some)
            .ok_or_else(|| error(format!("schedule.{key} must be an integer, not {value}"))),
    }
}

fn positive(
    object: &Map<String, Value>,
    key: &str,
    unit: &str,
) -> Result<Option<i64>, ScheduleError> {
    match integer(object, key)? {
        Some(n) if n <= 0 => Err(error(format!(
            "schedule.{key} must be a positive number of {unit}, not {n}"
        ))),
        other => Ok(other),
    }
}

/// The schedule's type, from `type` or its alias `mode` (a `delay` given as `mode: once`
/// agrees).
fn schedule_kind(object: &Map<String, Value>) -> Result<&str, ScheduleError> {
    match (
        object.get("type").and_then(Value::as_str),
        object.get("mode").and_then(Value::as_str),
    ) {
        (Some(t), Some(m)) if t != m && !(t == "delay" && m == "once") => Err(error(format!(
            "schedule.type '{t}' and schedule.mode '{m}' disagree; give one"
        ))),
        (Some(t), _) => Ok(t),
        (None, Some(m)) => Ok(m),
        (None, None) => Err(error(
            "schedule.type is required: once, delay, interval or cron",
        )),
    }
}

fn required(value: Option<i64>, key: &str, kind: &str) -> Result<i64, ScheduleError> {
    value.ok_or_else(|| error(format!("a {kind} schedule needs schedule.{key}")))
}

fn iso(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
    )
}

impl Schedule {
    /// Resolves the schedule object a caller passed to `sys_set_timer` at time `now_ms`, and
    /// returns it with its first fire time.
    pub fn resolve(input: &Value, now_ms: i64) -> Result<(Self, i64), ScheduleError> {
        Self::resolve_in(input, now_ms, &Local)
    }

    /// [`Schedule::resolve`] with cron expressions evaluated in `zone`.
    pub fn resolve_in<Tz: TimeZone>(
        input: &Value,
        now_ms: i64,
        zone: &Tz,
    ) -> Result<(Self, i64), ScheduleError> {
        let object = input.as_object().ok_or_else(|| {
            error("schedule must be an object such as {\"type\": \"delay\", \"delay_ms\": 60000}")
        })?;
        let kind = schedule_kind(object)?;
        let schedule = match kind {
            "once" if object.contains_key("delay_ms") && !object.contains_key("at") => {
                Self::delay(object, now_ms)?
            }
            "once" => {
                let at = required(positive(object, "at", "epoch milliseconds")?, "at", "once")?;
                if at <= now_ms {
                    return Err(error(format!(
                        "schedule.at must be in the future: it is {at} ({}), now is {now_ms} ({})",
                        iso(at),
                        iso(now_ms)
                    )));
                }
                Self::Once { at }
            }
            "delay" => Self::delay(object, now_ms)?,
            "interval" => Self::interval(object, now_ms)?,
            "cron" => Self::cron(object)?,
            other => {
                return Err(error(format!(
                    "schedule.type must be once, delay, interval or cron, not '{other}'"
                )));
            }
        };
        if let Self::Interval {
            start_at: Some(start),
            end_at: Some(end),
            ..
        } = &schedule
            && end < start
        {
            return Err(error(format!(
                "schedule.end_at ({}) is before schedule.start_at ({})",
                iso(*end),
                iso(*start)
            )));
        }
        if let Some(end) = schedule.end_at()
            && end <= now_ms
        {
            return Err(error(format!(
                "schedule.end_at must be in the future: it is {end} ({}), now is {now_ms} ({})",
                iso(end),
                iso(now_ms)
            )));
        }
        let first = next_fire_after_in(&schedule, now_ms, 0, zone).ok_or_else(|| {
            error(match schedule.end_at() {
                Some(end) => format!(
                    "the timer would never fire: its first fire time is after schedule.end_at ({})",
                    iso(end)
                ),
                None => "the timer would never fire: the cron expression matches no future time"
                    .to_owned(),
            })
        })?;
        Ok((schedule, first))
    }

    /// An `interval` schedule: `every_ms`, optionally from a future `start_at`, until
    /// `end_at` or `max_runs`.
    fn interval(object: &Map<String, Value>, now_ms: i64) -> Result<Self, ScheduleError> {
        let every_ms = required(
            positive(object, "every_ms", "milliseconds")?,
            "every_ms",
            "interval",
        )?;
        let start_at = positive(object, "start_at", "epoch milliseconds")?;
        if let Some(start) = start_at
            && start <= now_ms
        {
            return Err(error(format!(
                "schedule.start_at must be in the future: it is {start} ({}), now is {now_ms} ({})",
                iso(start),
                iso(now_ms)
            )));
        }
        Ok(Self::Interval {
            every_ms,
            start_at,
            end_at: positive(object, "end_at", "epoch milliseconds")?,
            max_runs: positive(object, "max_runs", "runs")?,
        })
    }

    /// A `cron` schedule: its expression, until `end_at` or `max_runs`.
    fn cron(object: &Map<String, Value>) -> Result<Self, ScheduleError> {
        let expression = object
            .get("cron")
            .and_then(Value::as_str)
            .ok_or_else(|| error("a cron schedule needs schedule.cron, e.g. \"0 9 * * 1-5\""))?
            .trim()
            .to_owned();
        let parsed = parse_cron(&expression)?;
        Ok(Self::Cron {
            expression,
            parsed: Box::new(parsed),
            end_at: positive(object, "end_at", "epoch milliseconds")?,
            max_runs: positive(object, "max_runs", "runs")?,
        })
    }

    fn delay(object: &Map<String, Value>, now_ms: i64) -> Result<Self, ScheduleError> {
        let delay = required(
            positive(object, "delay_ms", "milliseconds")?,
            "delay_ms",
            "delay",
        )?;
        let at = now_ms
            .checked_add(delay)
            .ok_or_else(|| error("schedule.delay_ms is too large"))?;
        Ok(Self::Once { at })
    }

    /// Reads a stored `schedule_json` (discriminant `mode`; optional fields absent or `null`).
    pub fn from_stored(stored: &Value) -> Result<Self, ScheduleError> {
        let object = stored
            .as_object()
            .ok_or_else(|| error("schedule_json is not an object"))?;
        match object.get("mode").and_then(Value::as_str) {
            Some("once") => Ok(Self::Once {
                at: required(integer(object, "at")?, "at", "once")?,
            }),
            Some("interval") => Ok(Self::Interval {
                every_ms: required(
                    positive(object, "every_ms", "milliseconds")?,
                    "every_ms",
                    "interval",
                )?,
                start_at: integer(object, "start_at")?,
                end_at: integer(object, "end_at")?,
                max_runs: integer(object, "max_runs")?,
            }),
            Some("cron") => {
                let expression = object
                    .get("cron")
                    .and_then(Value::as_str)
                    .ok_or_else(|| error("a cron schedule needs schedule.cron"))?
                    .to_owned();
                // Stored rows may come from runtimes with a laxer parser; read what croner
                // reads rather than refusing a six-field row outright.
                let parsed = match parse_cron(&expression) {
                    Ok(parsed) => parsed,
                    Err(strict) => Cron::from_str(&expression).map_err(|_| strict)?,
                };
                Ok(Self::Cron {
                    expression,
                    parsed: Box::new(parsed),
                    end_at: integer(object, "end_at")?,
                    max_runs: integer(object, "max_runs")?,
                })
            }
            Some(other) => Err(error(format!("unknown schedule mode '{other}'"))),
            None => Err(error("schedule_json has no mode")),
        }
    }

    /// The stored form: `mode` plus the fields that are set.
    pub fn to_stored(&self) -> Value {
        let mut object = Map::new();
        let mut put = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                object.insert(key.to_owned(), value);
            }
        };
        match self {
            Self::Once { at } => {
                put("mode", Some(json!("once")));
                put("at", Some(json!(at)));
            }
            Self::Interval {
                every_ms,
                start_at,
                end_at,
                max_runs,
            } => {
                put("mode", Some(json!("interval")));
                put("every_ms", Some(json!(every_ms)));
                put("start_at", start_at.map(Value::from));
                put("end_at", end_at.map(Value::from));
                put("max_runs", max_runs.map(Value::from));
            }
            Self::Cron {
                expression,
                end_at,
                max_runs,
                ..
            } => {
                put("mode", Some(json!("cron")));
                put("cron", Some(json!(expression)));
                put("end_at", end_at.map(Value::from));
                put("max_runs", max_runs.map(Value::from));
            }
        }
        Value::Object(object)
    }

    /// `once`, `interval` or `cron`.
    pub fn mode(&self) -> &'static str {
        match self {
            Self::Once { .. } => "once",
            Self::Interval { .. } => "interval",
            Self::Cron { .. } => "cron",
        }
    }

    fn end_at(&self) -> Option<i64> {
        match self {
            Self::Once { .. } => None,
            Self::Interval { end_at, .. } | Self::Cron { end_at, .. } => *end_at,
        }
    }

    fn max_runs(&self) -> Option<i64> {
        match self {
            Self::Once { .. } => Some(1),
            Self::Interval { max_runs, .. } | Self::Cron { max_runs, .. } => *max_runs,
        }
    }
}

/// The next fire time of a timer that has fired `run_count` times, strictly after `after_ms`
/// for repeating schedules, or `None` when it is finished (a `once` that fired, `max_runs`
/// reached, or the next time past `end_at`) and the timer expires (§7.7). Cron expressions are
/// evaluated in the runtime's local zone.
///
/// - `once`: `at` while it has not fired (even when `at` has passed: a missed timer fires
///   once on load), else none.
/// - `interval`: before the first fire, `start_at` when it is still ahead, else
///   `after_ms + every_ms`; afterwards `after_ms + every_ms` — counted from the fire, so
///   after downtime the missed occurrences collapse into the one fire on load (§7.7).
/// - `cron`: the first match after `after_ms`.
pub fn next_fire_after(schedule: &Schedule, after_ms: i64, run_count: i64) -> Option<i64> {
    next_fire_after_in(schedule, after_ms, run_count, &Local)
}

/// [`next_fire_after`] with cron expressions evaluated in `zone`.
pub fn next_fire_after_in<Tz: TimeZone>(
    schedule: &Schedule,
    after_ms: i64,
    run_count: i64,
    zone: &Tz,
) -> Option<i64> {
    if schedule.max_runs().is_some_and(|max| run_count >= max) {
        return None;
    }
    let next = match schedule {
        Schedule::Once { at } => *at,
        Schedule::Interval {
            every_ms, start_at, ..
        } => match start_at {
            Some(start) if run_count == 0 && *start > after_ms => *start,
            _ => after_ms.checked_add(*every_ms)?,
        },
        Schedule::Cron { parsed, .. } => next_cron_match(parsed, after_ms, zone)?,
    };
    match schedule.end_at() {
        Some(end) if next > end => None,
        _ => Some(next),
    }
}

fn next_cron_match<Tz: TimeZone>(cron: &Cron, after_ms: i64, zone: &Tz) -> Option<i64> {
    let mut from = DateTime::<Utc>::from_timestamp_millis(after_ms)?.with_timezone(zone);
    // croner works at whole seconds; a match at or before `after_ms` (from a truncated
    // sub-second start) is stepped past rather than returned.
    for _ in 0..4 {
        let next = cron.find_next_occurrence(&from, false).ok()?;
        let ms = next.timestamp_millis();
        if ms > after_ms {
            return Some(ms);
        }
        from = next;
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use chrono::FixedOffset;

    const NOW: i64 = 1_800_000_000_000; // 2027-01-15T08:00:00Z

    #[test]
    fn sub_second_start_never_returns_a_past_match() {
        let cron = parse_cron("* * * * *").unwrap();
        let next = next_cron_match(&cron, NOW + 500, &Utc).unwrap();
        assert_eq!(next, NOW + 60_000);
    }

    #[test]
    fn zone_shifts_cron_matches() {
        let (_, utc) =
            Schedule::resolve_in(&json!({"type": "cron", "cron": "0 9 * * *"}), NOW, &Utc).unwrap();
        assert_eq!(utc, NOW + 3_600_000);
        let plus_two = FixedOffset::east_opt(2 * 3600).unwrap();
        let (_, local) = Schedule::resolve_in(
            &json!({"type": "cron", "cron": "0 9 * * *"}),
            NOW,
            &plus_two,
        )
        .unwrap();
        // 09:00 at +02:00 is 07:00Z, already past today: tomorrow's.
        assert_eq!(local, NOW - 3_600_000 + 86_400_000);
    }
}
