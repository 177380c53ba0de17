//! Built-in tools: timers (`sys_set_timer`, `sys_list_timers`, `sys_delete_timer`; spec §7.6,
//! tools guide "Timer Tools"). Storage and schedule resolution only: firing belongs to the
//! scheduler, which reuses [`crate::schedule::next_fire_after`].
//!
//! Decisions where the sources leave room:
//! - `scope` defaults to `["system"]` (\[C28\]; Appendix C #17); a bare string is read as a
//!   one-element array. `lambda` is optional even for system scope (an `on_timer` system
//!   target may handle the fire), but `lambda`/`warm` without system scope are refused, since
//!   they would never run.
//! - The `loop` column comes from the calling model's loop, never from arguments: an agent-scope
//!   timer wakes the loop that set it, and a timer set in an inner loop carries that loop so
//!   it is deleted with it (§6.4). Code and the owner create rows with `loop` NULL (= main).
//! - Inner loops may not create locked timers or system-scope lambda timers, and see and
//!   delete only their own timers (§6.4 \[IDX\]).
//! - A locked timer is deleted only by the owner: the refusal is final, with no approval path
//!   (locks are human-only; tools guide "loop_manage").
//! - Timer ids are integers; numeric strings are accepted (Appendix C #17).

use std::sync::Arc;

use adf_store::timers::NewTimer;
use adf_store::{StoreError, TimerRow, time};
use serde_json::{Value, json};

use crate::schedule::Schedule;
use crate::tools::{ErrorCode, Tool, ToolContext, ToolError};

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(SetTimer),
        Arc::new(ListTimers),
        Arc::new(DeleteTimer),
    ]
}

const MAIN_LOOP: &str = "main";

/// A timer as the tools show it: the row with ISO companions for the epoch-ms times.
fn timer_view(timer: &TimerRow) -> Value {
    let iso = |ms: i64| {
        chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
            .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
    };
    json!({
        "id": timer.id,
        "schedule": timer.schedule,
        "next_wake_at": timer.next_wake_at,
        "next_wake_at_iso": iso(timer.next_wake_at),
        "payload": timer.payload,
        "scope": timer.scope,
        "lambda": timer.lambda,
        "warm": timer.warm,
        "run_count": timer.run_count,
        "created_at": timer.created_at,
        "last_fired_at": timer.last_fired_at,
        "locked": timer.locked,
        "expired": timer.expired,
        "loop": timer.r#loop,
    })
}

/// `scope` as a deduplicated array of `system` / `agent`.
fn parse_scope(value: Option<&Value>) -> Result<Vec<&'static str>, ToolError> {
    let items: Vec<&Value> = match value {
        None | Some(Value::Null) => return Ok(vec!["system"]),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(single @ Value::String(_)) => vec![single],
        Some(other) => {
            return Err(ToolError::invalid(format!(
                "scope must be an array of \"system\" and/or \"agent\", not {other}"
            )));
        }
    };
    let mut scope = Vec::new();
    for item in items {
        let name = match item.as_str() {
            Some("system") => "system",
            Some("agent") => "agent",
            _ => {
                return Err(ToolError::invalid(format!(
                    "scope entries must be \"system\" or \"agent\", not {item}"
                )));
            }
        };
        if !scope.contains(&name) {
            scope.push(name);
        }
    }
    if scope.is_empty() {
        return Err(ToolError::invalid(
            "scope must name at least one of \"system\" and \"agent\"",
        ));
    }
    Ok(scope)
}

/// A timer id from a number or a numeric string.
pub fn parse_timer_id(value: Option<&Value>) -> Result<i64, ToolError> {
    let id = match value {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
        Some(Value::String(s)) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    match id {
        Some(id) if id > 0 => Ok(id),
        _ => Err(ToolError::invalid(format!(
            "id must be a timer id (a positive integer, as sys_list_timers shows it), not {}",
            value.map_or_else(|| "nothing".to_owned(), Value::to_string)
        ))),
    }
}

/// `sys_set_timer`.
#[derive(Debug)]
struct SetTimer;

impl Tool for SetTimer {
    declare_tool! {
        name: "sys_set_timer",
        description: "Schedule a timer. Set schedule.type to \"once\" (at: epoch ms), \"delay\" (delay_ms), \"interval\" (every_ms, optional start_at/end_at/max_runs) or \"cron\" (5-field expression, optional end_at/max_runs). Scope \"agent\" starts a turn in this loop with the payload as its message; \"system\" runs the lambda without a turn. Returns the timer with its id and next fire time.",
        parameters: json!({
            "type": "object",
            "properties": {
                "schedule": {
                    "type": "object",
                    "description": "When to fire. {type:\"once\", at} | {type:\"delay\", delay_ms} | {type:\"interval\", every_ms, start_at?, end_at?, max_runs?} | {type:\"cron\", cron, end_at?, max_runs?}. Times are epoch milliseconds; cron uses the runtime's local time zone.",
                    "properties": {
                        "type": { "type": "string", "enum": ["once", "delay", "interval", "cron"] },
                        "at": { "type": "integer", "description": "Fire once at this Unix time (ms); must be in the future." },
                        "delay_ms": { "type": "integer", "minimum": 1, "description": "Fire once after this many ms." },
                        "every_ms": { "type": "integer", "minimum": 1, "description": "Repeat every this many ms." },
                        "start_at": { "type": "integer", "description": "First fire (Unix ms). Default: now + every_ms." },
                        "end_at": { "type": "integer", "description": "No fires after this Unix time (ms)." },
                        "max_runs": { "type": "integer", "minimum": 1, "description": "Stop after this many fires." },
                        "cron": { "type": "string", "description": "Five-field cron: minute hour day-of-month month day-of-week, e.g. \"0 9 * * 1-5\"." }
                    }
                },
                "scope": {
                    "type": ["array", "string"],
                    "items": { "type": "string", "enum": ["system", "agent"] },
                    "description": "Who handles the fire: [\"agent\"] (a turn with the payload as message), [\"system\"] (the lambda, no turn) or both. Default [\"system\"]."
                },
                "payload": { "type": "string", "description": "Text delivered when the timer fires; for agent scope it becomes the turn's message." },
                "lambda": { "type": "string", "description": "System scope: \"path/file.ts:function\" or a shell script \"path/file.sh\"." },
                "warm": { "type": "boolean", "description": "System scope: keep the sandbox warm between fires. Default false." },
                "locked": { "type": "boolean", "description": "Lock the timer so the agent cannot delete it; only the owner can. Default false." }
            },
            "required": ["schedule"]
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let schedule_input = args
            .get("schedule")
            .ok_or_else(|| ToolError::invalid("schedule is required"))?;
        let (schedule, next_wake_at) = Schedule::resolve(schedule_input, time::now_ms())
            .map_err(|e| ToolError::invalid(e.to_string()))?;
        let scope = parse_scope(args.get("scope"))?;
        let system = scope.contains(&"system");
        let agent = scope.contains(&"agent");
        let lambda = match args.get("lambda") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) if text.trim().is_empty() => {
                return Err(ToolError::invalid("lambda must not be empty"));
            }
            Some(Value::String(text)) => Some(text.trim()),
            Some(other) => {
                return Err(ToolError::invalid(format!(
                    "lambda must be a string, not {other}"
                )));
            }
        };
        let warm = args.get("warm").and_then(Value::as_bool).unwrap_or(false);
        let locked = args.get("locked").and_then(Value::as_bool).unwrap_or(false);
        if !system && (lambda.is_some() || warm) {
            return Err(ToolError::invalid(
                "lambda and warm apply to system scope only; add \"system\" to scope or drop them",
            ));
        }
        if let Some(inner) = cx.caller.inner_loop() {
            if locked {
                return Err(ToolError::invalid(format!(
                    "inner loop '{inner}' cannot create locked timers"
                )));
            }
            if system && lambda.is_some() {
                return Err(ToolError::invalid(format!(
                    "inner loop '{inner}' cannot create system-scope lambda timers"
                )));
            }
        }
        // The row names the loop that set it when that loop is to be woken (agent scope) or
        // must own it (an inner loop); NULL reads as main.
        let loop_name = cx
            .caller
            .loop_name()
            .filter(|name| agent || *name != MAIN_LOOP);
        let stored = schedule.to_stored();
        let scope_value = json!(scope);
        let id = cx.file.timer_insert(&NewTimer {
            schedule: &stored,
            next_wake_at,
            payload: args.get("payload").and_then(Value::as_str),
            scope: &scope_value,
            lambda,
            warm,
            locked,
            r#loop: loop_name,
        })?;
        let timer = cx
            .file
            .timer(id)?
            .ok_or_else(|| ToolError::new(ErrorCode::InternalError, "the new timer vanished"))?;
        Ok(timer_view(&timer))
    }
}

/// `sys_list_timers`.
#[derive(Debug)]
struct ListTimers;

impl Tool for ListTimers {
    declare_tool! {
        name: "sys_list_timers",
        description: "List scheduled timers with their schedules, next fire times and run counts. Expired timers are kept as history; pass include_expired: true to see them.",
        parameters: json!({
            "type": "object",
            "properties": {
                "include_expired": { "type": "boolean", "description": "Also list expired (finished) timers. Default false." }
            }
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let include_expired = args
            .get("include_expired")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let own_loop = cx.caller.inner_loop();
        let timers: Vec<Value> = cx
            .file
            .timers()?
            .iter()
            .filter(|t| include_expired || !t.expired)
            .filter(|t| own_loop.is_none_or(|name| t.r#loop.as_deref() == Some(name)))
            .map(timer_view)
            .collect();
        Ok(Value::Array(timers))
    }
}

/// `sys_delete_timer`.
#[derive(Debug)]
struct DeleteTimer;

impl Tool for DeleteTimer {
    declare_tool! {
        name: "sys_delete_timer",
        description: "Cancel and delete a timer by id (active or expired). Locked timers can only be deleted by the owner.",
        parameters: json!({
            "type": "object",
            "properties": {
                "id": { "type": ["integer", "string"], "description": "The timer id from sys_list_timers." }
            },
            "required": ["id"]
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let id = parse_timer_id(args.get("id"))?;
        let timer = cx
            .file
            .timer(id)?
            .ok_or_else(|| ToolError::not_found(format!("timer {id} not found")))?;
        if let Some(inner) = cx.caller.inner_loop()
            && timer.r#loop.as_deref() != Some(inner)
        {
            return Err(ToolError::failed(format!(
                "timer {id} belongs to another loop; loop '{inner}' can delete only the timers it set"
            )));
        }
        match cx.file.timer_delete(cx.store_caller(), id) {
            Ok(()) => Ok(Value::String(format!("Timer {id} deleted."))),
            // Final: a timer lock has no one-time approval (see the module docs).
            Err(StoreError::Protected { .. }) => Err(ToolError::new(
                ErrorCode::WriteError,
                format!("timer {id} is locked; only the owner can delete it"),
            )),
            Err(other) => Err(other.into()),
        }
    }
}
