//! Debounce, interval and batch windows (spec §7.2) as a pure state machine per target: the
//! dispatcher feeds events with [`Window::push`], sleeps until [`Window::deadline`] and calls
//! [`Window::due`]. The clock is passed in, so the rules are tested without sleeping.
//!
//! Memory is bounded: a window holds at most [`MAX_PENDING`] events; beyond that the oldest are
//! dropped and counted, so a burst never grows a window without limit.

use super::{Timing, TriggerEvent, TriggerKind};

/// Most events one window holds before it drops the oldest.
pub const MAX_PENDING: usize = 1024;

/// The timing state of one target.
#[derive(Debug, Clone)]
pub struct Window {
    timing: Timing,
    /// \[C28\]: an `on_inbox` interval collects from its first event and fires at the window's
    /// end; other triggers fire the first event and drop the rest of the interval.
    collect_interval: bool,
    pending: Vec<TriggerEvent>,
    deadline: Option<i64>,
    last_fire: Option<i64>,
    dropped: u64,
}

impl Window {
    /// An empty window for a target of `kind` with `timing`.
    pub fn new(timing: Timing, kind: TriggerKind) -> Self {
        Self {
            timing,
            collect_interval: kind == TriggerKind::OnInbox,
            pending: Vec::new(),
            deadline: None,
            last_fire: None,
            dropped: 0,
        }
    }

    fn hold(&mut self, event: TriggerEvent) {
        if self.pending.len() == MAX_PENDING {
            self.pending.remove(0);
            self.dropped += 1;
        }
        self.pending.push(event);
    }

    fn take(&mut self, now: i64) -> Option<Vec<TriggerEvent>> {
        self.deadline = None;
        if self.pending.is_empty() {
            return None;
        }
        self.last_fire = Some(now);
        Some(std::mem::take(&mut self.pending))
    }

    /// An event arrived at `now`; returns the events to deliver right away, if any.
    pub fn push(&mut self, now: i64, event: TriggerEvent) -> Option<Vec<TriggerEvent>> {
        match self.timing {
            Timing::Immediate => {
                self.last_fire = Some(now);
                Some(vec![event])
            }
            Timing::Debounce { ms } => {
                self.hold(event);
                self.deadline = Some(now + ms as i64);
                None
            }
            Timing::Interval { ms } if self.collect_interval => {
                self.hold(event);
                if self.deadline.is_none() {
                    self.deadline = Some(now + ms as i64);
                }
                None
            }
            Timing::Interval { ms } => {
                let open = self.last_fire.is_none_or(|last| now - last >= ms as i64);
                if open {
                    self.last_fire = Some(now);
                    Some(vec![event])
                } else {
                    self.dropped += 1;
                    None
                }
            }
            Timing::Batch { ms, count } => {
                self.hold(event);
                if self.deadline.is_none() {
                    self.deadline = Some(now + ms as i64);
                }
                if count.is_some_and(|count| self.pending.len() as u64 >= count) {
                    return self.take(now);
                }
                None
            }
        }
    }

    /// When [`Window::due`] must be called next, if the window holds events.
    pub fn deadline(&self) -> Option<i64> {
        self.deadline
    }

    /// Delivers the held events once the deadline has passed.
    pub fn due(&mut self, now: i64) -> Option<Vec<TriggerEvent>> {
        match self.deadline {
            Some(deadline) if now >= deadline => self.take(now),
            _ => None,
        }
    }

    /// Events dropped so far (interval drops and overflow).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}
