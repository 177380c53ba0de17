//! `adf_timers` writes (§3.3, §7.6): creating a timer with its resolved schedule, reading one
//! by id, and deleting one under the owner lock.
//!
//! The store does not interpret schedules; the runtime resolves them and hands over the stored
//! form (`schedule_json` with its `mode` discriminant) and the first `next_wake_at`. What the
//! store does check is what keeps the row readable by any runtime: a schedule object with a
//! `mode`, and a scope that is a non-empty array of `system`/`agent`.

use rusqlite::{OptionalExtension, params};
use serde_json::Value;

use crate::access::Caller;
use crate::error::{ProtectedKind, Result, StoreError};
use crate::file::AdfFile;
use crate::protection::{self, Change, Decision, Protection};
use crate::tables::TimerRow;
use crate::time;

/// A timer to create. `loop` is decided by the runtime from the creating loop, never taken
/// from tool arguments (§7.6).
#[derive(Debug, Clone)]
pub struct NewTimer<'a> {
    /// The resolved schedule as stored: `{mode: once|interval|cron, ...}`.
    pub schedule: &'a Value,
    /// When the timer first fires, in Unix milliseconds.
    pub next_wake_at: i64,
    /// Text delivered with the timer event.
    pub payload: Option<&'a str>,
    /// JSON array of `system` / `agent`.
    pub scope: &'a Value,
    /// The `path:function` lambda a system-scope fire calls, if any.
    pub lambda: Option<&'a str>,
    /// Keep the lambda's sandbox alive between fires.
    pub warm: bool,
    /// Owner lock: the agent cannot change or delete the timer.
    pub locked: bool,
    /// The loop an agent-scope fire wakes; `None` means `main`.
    pub r#loop: Option<&'a str>,
}

const TIMER_COLUMNS: &str =
    "id, schedule_json, next_wake_at, payload, scope, lambda, warm, run_count, created_at,
     last_fired_at, locked, expired, loop";

fn json_column(text: Option<String>) -> Value {
    text.map_or(Value::Null, |t| {
        serde_json::from_str(&t).unwrap_or(Value::String(t))
    })
}

fn timer_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<TimerRow> {
    Ok(TimerRow {
        id: row.get(0)?,
        schedule: json_column(row.get(1)?),
        next_wake_at: row.get(2)?,
        payload: row.get(3)?,
        scope: json_column(row.get(4)?),
        lambda: row.get(5)?,
        warm: row.get::<_, i64>(6)? != 0,
        run_count: row.get(7)?,
        created_at: row.get(8)?,
        last_fired_at: row.get(9)?,
        locked: row.get::<_, i64>(10)? != 0,
        expired: row.get::<_, i64>(11)? != 0,
        r#loop: row.get(12)?,
    })
}

pub(crate) fn check_new_timer(timer: &NewTimer<'_>) -> Result<()> {
    let has_mode = timer
        .schedule
        .get("mode")
        .and_then(Value::as_str)
        .is_some_and(|m| matches!(m, "once" | "interval" | "cron"));
    if !has_mode {
        return Err(StoreError::invalid(
            "a timer schedule must be an object whose mode is once, interval or cron",
        ));
    }
    let scope_ok = timer.scope.as_array().is_some_and(|items| {
        !items.is_empty()
            && items
                .iter()
                .all(|s| matches!(s.as_str(), Some("system" | "agent")))
    });
    if !scope_ok {
        return Err(StoreError::invalid(
            "a timer scope must be a non-empty array of \"system\" and/or \"agent\"",
        ));
    }
    Ok(())
}

impl AdfFile {
    /// Creates a timer and returns its id.
    pub fn timer_insert(&mut self, timer: &NewTimer<'_>) -> Result<i64> {
        check_new_timer(timer)?;
        self.ensure_writable()?;
        self.conn.execute(
            "INSERT INTO adf_timers (schedule_json, next_wake_at, payload, scope, lambda, warm, created_at, locked, loop)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                timer.schedule.to_string(),
                timer.next_wake_at,
                timer.payload,
                timer.scope.to_string(),
                timer.lambda,
                timer.warm,
                time::now_ms(),
                timer.locked,
                timer.r#loop
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// One timer by id.
    pub fn timer(&self, id: i64) -> Result<Option<TimerRow>> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {TIMER_COLUMNS} FROM adf_timers WHERE id = ?1"),
                [id],
                timer_from_row,
            )
            .optional()?)
    }

    /// Deletes a timer. A locked timer is the owner's: only [`Caller::Owner`] removes it, and
    /// neither authorized code nor a one-time approval lifts the lock, because the tools guide
    /// gives locks "human-only semantics" everywhere (a lock is how the owner pins a timer the
    /// agent's own code must not clear).
    pub fn timer_delete(&mut self, caller: Caller, id: i64) -> Result<()> {
        let timer = self
            .timer(id)?
            .ok_or_else(|| StoreError::not_found("timer", id.to_string()))?;
        let delete = Change::Delete {
            owner_confirmed: false,
        };
        if timer.locked
            && protection::decide(caller, Protection::TimerLocked, delete) != Decision::Allow
        {
            return Err(StoreError::Protected {
                kind: ProtectedKind::Timer,
                target: id.to_string(),
                level: Protection::TimerLocked,
                why: None,
            });
        }
        self.ensure_writable()?;
        self.conn
            .execute("DELETE FROM adf_timers WHERE id = ?1", [id])?;
        Ok(())
    }

    /// Records a fire decided by the runtime (§7.7): the next wake time, the new run count, the
    /// fire time and whether the timer expired. Expired rows stay as history.
    pub fn timer_record_fire(
        &mut self,
        id: i64,
        next_wake_at: i64,
        run_count: i64,
        last_fired_at: i64,
        expired: bool,
    ) -> Result<()> {
        let changed = self.update_existing(
            "UPDATE adf_timers SET next_wake_at = ?2, run_count = ?3, last_fired_at = ?4, expired = ?5
             WHERE id = ?1",
            rusqlite::params![id, next_wake_at, run_count, last_fired_at, expired],
        )?;
        if changed == 0 {
            return Err(StoreError::not_found("timer", id.to_string()));
        }
        Ok(())
    }

    /// Re-arms a `once` timer whose fire could not be delivered, so it fires later (§7.7,
    /// TRG-29): `expired` back to 0 and the wake time set to `retry_at`.
    pub fn timer_rearm(&mut self, id: i64, retry_at: i64) -> Result<()> {
        let changed = self.update_existing(
            "UPDATE adf_timers SET expired = 0, next_wake_at = ?2 WHERE id = ?1",
            rusqlite::params![id, retry_at],
        )?;
        if changed == 0 {
            return Err(StoreError::not_found("timer", id.to_string()));
        }
        Ok(())
    }
}
