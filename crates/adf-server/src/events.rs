//! The daemon's event bus: umbilical envelopes (§5.24) in a bounded ring of SSE frames.
//!
//! Every published envelope gets a process-local `cursor` (1, 2, 3, ...), the transport resume
//! token of `GET /events?since=N`; agent events also carry the agent's own monotonic `seq`
//! (allocated by [`SeqAllocator`], persisted in meta). Subscribers do not get their own queue:
//! they remember the last cursor they sent and read newer frames from the ring when a
//! `watch` channel says the newest cursor moved, so a slow client costs no memory beyond the
//! ring and can never block a publisher. A client that falls more than the ring's capacity
//! behind skips the frames it missed (the reference does the same with its 1000-frame buffer).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;

/// Frames kept for replay, as in the reference (`DaemonEventBus`, 1000).
pub const RING_CAPACITY: usize = 1000;

/// The canonical umbilical envelope. Field order is the reference's wire order
/// (`event_type, timestamp, source, agent_id, payload, seq`).
#[derive(Debug, Clone, Serialize)]
pub struct Envelope {
    /// What happened, in the reference's dotted names (`agent.loaded`, `file.written`, ...).
    pub event_type: String,
    /// Epoch milliseconds.
    pub timestamp: i64,
    /// `system:<subsystem>`, `agent:<turn>` or `lambda:<file>:<fn>`.
    pub source: String,
    /// The agent's config id; `null` for daemon-scope events.
    pub agent_id: Option<String>,
    /// Never secrets and never prompt text: paths, names, sizes, key names and states only.
    pub payload: Value,
    /// Per-agent monotonic sequence; `0` for daemon-scope events.
    pub seq: u64,
}

/// One SSE frame: the envelope with its cursor.
#[derive(Debug, Clone, Serialize)]
pub struct Frame {
    /// The bus's process-local position of this frame (1, 2, 3, ...): the `since=` resume token.
    pub cursor: u64,
    /// The published envelope.
    pub event: Envelope,
}

#[derive(Debug)]
struct Ring {
    next_cursor: u64,
    frames: VecDeque<Arc<Frame>>,
}

/// The process-wide bus. Cheap to clone.
#[derive(Debug, Clone)]
pub struct EventBus {
    ring: Arc<Mutex<Ring>>,
    newest: watch::Sender<u64>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new()
    }
}

impl EventBus {
    /// An empty bus; the first frame published gets cursor 1.
    pub fn new() -> Self {
        let (newest, _) = watch::channel(0);
        Self {
            ring: Arc::new(Mutex::new(Ring {
                next_cursor: 1,
                frames: VecDeque::with_capacity(64),
            })),
            newest,
        }
    }

    /// Appends an envelope, evicting the oldest frame beyond [`RING_CAPACITY`], and wakes
    /// subscribers. Returns the frame's cursor.
    pub fn publish(&self, event: Envelope) -> u64 {
        // A panic while holding this lock cannot leave the ring inconsistent (push/pop only).
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let cursor = ring.next_cursor;
        ring.next_cursor += 1;
        ring.frames.push_back(Arc::new(Frame { cursor, event }));
        while ring.frames.len() > RING_CAPACITY {
            ring.frames.pop_front();
        }
        drop(ring);
        self.newest.send_replace(cursor);
        cursor
    }

    /// Frames with a cursor greater than `after`, oldest first.
    pub fn since(&self, after: u64) -> Vec<Arc<Frame>> {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.frames
            .iter()
            .filter(|f| f.cursor > after)
            .cloned()
            .collect()
    }

    /// A receiver that changes whenever a frame is published.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.newest.subscribe()
    }
}

/// How many sequence numbers one meta write reserves, as in the reference.
pub const SEQ_BLOCK: u64 = 1000;

/// Per-agent `seq` allocation. Numbers are handed out from a block whose end is persisted in
/// meta `runtime_umbilical_next_seq` before any number of it is used, so after a crash or a
/// restart the next block starts past every number already issued: `seq` never repeats or
/// goes backwards for one file, at the price of gaps.
#[derive(Debug)]
pub struct SeqAllocator {
    next: u64,
    reserved_end: u64,
}

impl SeqAllocator {
    /// Starts at the persisted value, or at `now_ms * 1000` for a file without one (the
    /// reference's choice, so copies of a file made at different times do not collide).
    pub fn starting_at(persisted: Option<u64>, now_ms: i64) -> Self {
        let start = persisted.unwrap_or_else(|| u64::try_from(now_ms).unwrap_or(0) * 1000);
        Self {
            next: start,
            reserved_end: start,
        }
    }

    /// The next number, and the block end to persist first when a new block is needed.
    pub fn allocate(&mut self) -> (u64, Option<u64>) {
        let mut persist = None;
        if self.next >= self.reserved_end {
            self.reserved_end = self.next + SEQ_BLOCK;
            persist = Some(self.reserved_end);
        }
        let seq = self.next;
        self.next += 1;
        (seq, persist)
    }

    /// Undoes a reservation whose meta write failed, so the next call tries again.
    pub fn unreserve(&mut self) {
        self.next -= 1;
        self.reserved_end = self.next;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope(n: i64) -> Envelope {
        Envelope {
            event_type: "test".into(),
            timestamp: n,
            source: "system:test".into(),
            agent_id: None,
            payload: json!({}),
            seq: 0,
        }
    }

    #[test]
    fn ring_is_bounded_and_cursors_increase() {
        let bus = EventBus::new();
        for n in 0..(RING_CAPACITY as i64 + 10) {
            bus.publish(envelope(n));
        }
        let all = bus.since(0);
        assert_eq!(all.len(), RING_CAPACITY);
        assert_eq!(all[0].cursor, 11);
        assert!(all.windows(2).all(|w| w[0].cursor + 1 == w[1].cursor));
        assert_eq!(bus.since(RING_CAPACITY as u64 + 8).len(), 2);
    }

    #[test]
    fn seq_blocks_are_persisted_before_use() {
        let mut seq = SeqAllocator::starting_at(Some(5000), 0);
        assert_eq!(seq.allocate(), (5000, Some(6000)));
        for expected in 5001..6000 {
            assert_eq!(seq.allocate(), (expected, None));
        }
        assert_eq!(seq.allocate(), (6000, Some(7000)));
        let mut fresh = SeqAllocator::starting_at(None, 1_796_000_278_167);
        assert_eq!(fresh.allocate().0, 1_796_000_278_167_000);
    }
}
