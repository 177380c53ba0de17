//! [`TriggerQueue`]: one agent's trigger queue, the per-agent state of trigger dispatch (its
//! bounded deliveries, timing windows, cached targets, row marks and counters). A leaf, so the
//! agent record (`registry.rs`) embeds it without importing dispatch's logic, which lives in
//! `dispatch.rs` (see its module docs for the bound).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use adf_runtime::triggers::{Target, TriggerEvent, TriggerKind, timing};

/// Most deliveries one agent's trigger queue holds; beyond it deliveries are dropped.
pub const QUEUE_CAPACITY: usize = 256;

/// One target's events, ready to run.
#[derive(Debug)]
pub(super) struct Delivery {
    pub(super) target: Target,
    pub(super) events: Vec<TriggerEvent>,
}

/// The parsed targets and stored state, cached until the config may have changed.
#[derive(Debug)]
pub(super) struct Cached {
    pub(super) targets: Vec<Target>,
    pub(super) state: String,
}

impl QueueState {
    /// Deliveries not finished yet: queued, or handed to a loop's lane.
    pub(super) fn waiting(&self) -> usize {
        self.pending.len() + self.in_lanes
    }
}

#[derive(Debug, Default)]
pub(super) struct QueueState {
    pub(super) pending: VecDeque<Delivery>,
    pub(super) draining: bool,
    pub(super) dropped: u64,
    pub(super) dropped_unlogged: u64,
    pub(super) delivered: u64,
    pub(super) high_water: usize,
    pub(super) windows: HashMap<(TriggerKind, usize), timing::Window>,
    pub(super) flushing: HashSet<(TriggerKind, usize)>,
    pub(super) cached: Option<Arc<Cached>>,
    /// A `command` target was skipped and said so in the log (once per load).
    pub(super) command_reported: bool,
    /// The highest rowid already seen in each observed table; `None` until the first read.
    pub(super) marks: Option<RowMarks>,
    /// See [`QueueStats::rows_passed`].
    pub(super) rows_passed: u64,
    /// Bumped by every `invalidate`, so other caches of config-derived data (taps) know.
    pub(super) generation: u64,
    /// Agent-scope deliveries by target loop, taken off `pending` by the drain: each loop's
    /// lane runs its turns in order on a task of its own while the lane holds any, so a turn
    /// that waits (for the owner, a model) holds up neither the system deliveries behind it
    /// nor another loop's.
    pub(super) lanes: HashMap<String, VecDeque<Delivery>>,
    /// Deliveries in `lanes`, queued or running; they count against [`QUEUE_CAPACITY`].
    pub(super) in_lanes: usize,
}

/// The highest rowid seen in `adf_tasks`, `adf_logs`, `adf_inbox` and `adf_outbox`, in
/// `OBSERVED` order (dispatch.rs): 32 bytes per agent, the only per-agent state the row sources need.
pub(super) type RowMarks = [i64; 4];

/// One agent's trigger queue (see the module docs for the bound).
#[derive(Debug, Default)]
pub struct TriggerQueue {
    state: Mutex<QueueState>,
}

/// Counters of a [`TriggerQueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    /// Deliveries waiting now.
    pub len: usize,
    /// The most deliveries the queue holds ([`QUEUE_CAPACITY`]); beyond it they are dropped.
    pub capacity: usize,
    /// The most deliveries ever waiting at once (never above `capacity`).
    pub high_water: usize,
    /// Deliveries dropped because the queue was full, since the agent loaded.
    pub dropped: u64,
    /// Deliveries run to completion (lambda or turn finished), since the agent loaded.
    pub delivered: u64,
    /// Whether a task is draining the queue or an agent-scope delivery (a turn) it handed to
    /// its loop's lane is still queued or running.
    pub draining: bool,
    /// Route lambda runs whose rows the marks passed without a sweep (no row source among
    /// the targets), since the agent loaded.
    pub rows_passed: u64,
}

impl TriggerQueue {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A snapshot of the queue's counters, taken under its lock.
    pub fn stats(&self) -> QueueStats {
        let state = self.lock();
        QueueStats {
            len: state.pending.len() + state.in_lanes,
            capacity: QUEUE_CAPACITY,
            high_water: state.high_water,
            dropped: state.dropped,
            delivered: state.delivered,
            draining: state.draining || state.in_lanes > 0,
            rows_passed: state.rows_passed,
        }
    }

    /// Forgets the cached targets (the config changed or may have).
    pub(crate) fn invalidate(&self) {
        let mut state = self.lock();
        state.cached = None;
        state.generation += 1;
    }

    /// How many times the cached targets were invalidated (the config may have changed).
    pub(crate) fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Whether a delivery offered now would be dropped.
    pub(crate) fn is_full(&self) -> bool {
        self.lock().waiting() >= QUEUE_CAPACITY
    }

    /// Counts deliveries dropped outside `dispatch` (a timer fire that found the queue
    /// full); they are logged with the next drain's `trigger_dispatch_dropped` row.
    pub(crate) fn count_dropped(&self, dropped: u64) {
        let mut state = self.lock();
        state.dropped += dropped;
        state.dropped_unlogged += dropped;
    }
}
