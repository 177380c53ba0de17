//! [`TimerWakes`]: the earliest wake time of each agent with live timers and the bell of the
//! scheduler task, and [`WakeRead`], one numbered read of an agent's next wake ([`wake_of`]):
//! the state the scheduler shares with every handler that may move a wake. Below dispatch, the
//! turn host, HIL and the watcher, which publish the wakes their jobs read; the firing of timers
//! lives in `scheduler.rs` (see its module docs).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use tokio::sync::Notify;

use adf_runtime::triggers::{self, fire, nudge};
use adf_store::{AdfFile, Caller, MetaProtection};

use crate::registry::Agent;

/// Per-agent earliest wake times and the bell that wakes the scheduler task.
#[derive(Debug, Default)]
pub(crate) struct TimerWakes {
    /// Agent id → earliest `next_wake_at` of its live timers. Agents without live timers have
    /// no entry, so 1,000 idle agents without timers cost nothing here.
    wakes: Mutex<HashMap<String, i64>>,
    pub(super) bell: Notify,
    pub(super) started: AtomicBool,
}

/// Numbers every read of a wake time ([`wake_of`]), in the order the reads happen. An
/// agent's reads run inside its jobs (or its turn's lease), one at a time, so a larger number
/// is a later look at its timers.
static WAKE_READS: AtomicU64 = AtomicU64::new(1);

/// An agent's next wake time as one job read it (`at`: `None` for no live timer), numbered so
/// that a read published late never overwrites a later one ([`TimerWakes::apply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WakeRead {
    at: Option<i64>,
    read: u64,
}

impl WakeRead {
    /// A wake read now, where no job could read the timers (they are unreadable): no wake.
    fn unreadable() -> Self {
        Self {
            at: None,
            read: WAKE_READS.fetch_add(1, Ordering::SeqCst),
        }
    }
}

impl TimerWakes {
    /// Takes `wake` unless a later read of the agent's timers was taken already. A job reads
    /// the wake and the async code that ran it publishes it afterwards, so two publications
    /// can arrive in either order (the watcher's re-read, a handler, a `rearm` after an API
    /// write): without the order, an old read taken before a timer was added would clear the
    /// wake that the add set, and the timer would never fire.
    fn apply(&self, agent: &Agent, wake: WakeRead) {
        let mut wakes = self.wakes.lock().unwrap_or_else(PoisonError::into_inner);
        // Under the map's lock: the check and the write are one step for every publisher.
        if agent.wake_read().fetch_max(wake.read, Ordering::SeqCst) > wake.read {
            return;
        }
        match wake.at {
            Some(at) => {
                wakes.insert(agent.id.clone(), at);
            }
            None => {
                wakes.remove(&agent.id);
            }
        }
    }

    /// Forgets an unloaded agent's wake.
    pub(super) fn remove(&self, agent_id: &str) {
        self.wakes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(agent_id);
    }

    pub(super) fn earliest(&self) -> Option<i64> {
        self.wakes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .copied()
            .min()
    }

    /// Removes and returns the agents due at `now`.
    pub(super) fn take_due(&self, now: i64) -> Vec<String> {
        let mut wakes = self.wakes.lock().unwrap_or_else(PoisonError::into_inner);
        let due: Vec<String> = wakes
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            wakes.remove(id);
        }
        due
    }

    /// The earliest wake time known for `agent_id` (tests and `adf demo` read it).
    pub(crate) fn of(&self, agent_id: &str) -> Option<i64> {
        self.wakes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(agent_id)
            .copied()
    }

    /// Re-reads `agent`'s timers (and its hibernate nudge) and wakes the scheduler, so a new,
    /// changed or deleted timer moves the next wake-up. Cheap: one indexed read on the agent's
    /// worker.
    pub(crate) async fn rearm(&self, agent: &Agent) {
        let next = agent.job(|file| Ok(wake_of(file))).await;
        let wake = match next {
            Ok(Some(next)) => next,
            Ok(None) => WakeRead::unreadable(),
            Err(error) => {
                tracing::warn!(agent = %agent.id, %error, "cannot read timers");
                WakeRead::unreadable()
            }
        };
        self.set(agent, wake);
    }

    /// Sets the wake time a job already read (`wake_of` inside the job that ran a handler,
    /// which may have set a timer or changed the state) and wakes the scheduler; a read older than
    /// one already taken is ignored.
    pub(crate) fn set(&self, agent: &Agent, wake: WakeRead) {
        self.apply(agent, wake);
        self.bell.notify_one();
    }
}

/// The agent's next wake: the earliest live timer or the hibernate nudge (TRG-35). `None`
/// when the timers cannot be read. Starting a nudge count for an agent that has none yet is
/// this function's one write (meta [`nudge::META_KEY`]).
pub(crate) fn wake_of(file: &mut AdfFile) -> Option<WakeRead> {
    // Numbered before the read: a read numbered later sees at least what this one sees.
    let read = WAKE_READS.fetch_add(1, Ordering::SeqCst);
    let timers = match file.timers() {
        Ok(timers) => fire::next_wake(&timers),
        Err(error) => {
            tracing::warn!(%error, "cannot read timers");
            return None;
        }
    };
    let nudge = nudge_due(file, adf_store::time::now_ms()).map(|(at, _, _)| at);
    Some(WakeRead {
        at: timers.into_iter().chain(nudge).min(),
        read,
    })
}

/// When the hibernate nudge is due, with its interval and the `on_timer` agent target, if the
/// config calls for one.
pub(super) fn nudge_due(file: &mut AdfFile, now: i64) -> Option<(i64, u64, triggers::Target)> {
    let config = file.config().ok()?;
    let (interval, target) = nudge::applies(&config)?;
    let last_nudge = file
        .meta_get(nudge::META_KEY)
        .ok()
        .flatten()
        .and_then(|m| m.value.trim().parse::<i64>().ok());
    let last_activity = file.last_loop_created_at().ok().flatten();
    match nudge::due_at(interval, last_nudge, last_activity) {
        Some(at) => Some((at, interval, target)),
        None => {
            // Nothing to count from: the count starts now, and is kept in the file so a
            // restart does not restart it.
            record_nudge(file, now);
            nudge::due_at(interval, Some(now), None).map(|at| (at, interval, target))
        }
    }
}

pub(super) fn record_nudge(file: &mut AdfFile, now: i64) {
    let written = file.meta_set(
        Caller::Owner,
        nudge::META_KEY,
        &now.to_string(),
        Some(MetaProtection::None),
    );
    if let Err(error) = written {
        tracing::warn!(%error, "cannot record the hibernate nudge");
    }
}
