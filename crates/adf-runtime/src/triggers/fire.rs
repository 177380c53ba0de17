//! Timer firing (spec §7.7): compute the next fire time first, then `run_count + 1` and
//! `last_fired_at = now`, then deliver. A timer with no next time expires and stays as history.

use adf_store::TimerRow;

use crate::schedule::{Schedule, ScheduleError, next_fire_after};

/// The row update one fire makes, decided before the fire is delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerFire {
    /// The `adf_timers` row that fires.
    pub timer_id: i64,
    /// The next wake time; unchanged (the fire time) when the timer expired.
    pub next_wake_at: i64,
    /// The row's fire count including this fire.
    pub run_count: i64,
    /// This fire's time, in Unix milliseconds.
    pub last_fired_at: i64,
    /// The schedule has no next time, so the timer stays as history and never fires again.
    pub expired: bool,
}

/// Whether `timer` is due at `now`: not expired and its wake time reached. A timer that was due
/// while the runtime was down is due once on load, whatever it missed (TRG-30, TRG-31).
pub fn is_due(timer: &TimerRow, now: i64) -> bool {
    !timer.expired && timer.next_wake_at <= now
}

/// The update of firing `timer` at `now`.
pub fn fire(timer: &TimerRow, now: i64) -> Result<TimerFire, ScheduleError> {
    let schedule = Schedule::from_stored(&timer.schedule)?;
    let run_count = timer.run_count + 1;
    let next = next_fire_after(&schedule, now, run_count);
    Ok(TimerFire {
        timer_id: timer.id,
        next_wake_at: next.unwrap_or(timer.next_wake_at),
        run_count,
        last_fired_at: now,
        expired: next.is_none(),
    })
}

/// The earliest wake time among live timers: the scheduler sleeps until then, never polling.
pub fn next_wake(timers: &[TimerRow]) -> Option<i64> {
    timers
        .iter()
        .filter(|t| !t.expired)
        .map(|t| t.next_wake_at)
        .min()
}

/// How long an undeliverable `once` fire waits before it is tried again.
pub const RETRY_MS: i64 = 1_000;

/// The wake time to re-arm `fire` at when its delivery could not happen (the agent's queue was
/// full): a fire that expired the timer (a `once`, or the last run) must not be lost, so
/// `expired` goes back to 0 and it fires again at `now + RETRY_MS` (§7.7, TRG-29). A recurring
/// timer keeps its next occurrence; the missed delivery is only counted.
pub fn rearm_after_drop(fire: &TimerFire, now: i64) -> Option<i64> {
    fire.expired.then_some(now + RETRY_MS)
}
