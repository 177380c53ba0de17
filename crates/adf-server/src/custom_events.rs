//! [`CustomEvents`]: the `EventSink` a daemon lambda run or turn gets, so `adf.emit_event`
//! becomes a `custom.*` event on the bus once the run's job is over. A leaf: the lambda host,
//! the turn host and the taps (`taps.rs`, which re-exports these) share it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use serde_json::{Value, json};

use adf_runtime::code::EventSink;

/// Most `custom.*` events one lambda run may emit; beyond it `emit_event` answers
/// `delivered: false`.
pub const MAX_CUSTOM_EVENTS: usize = 256;

/// A custom payload larger than this (serialized) is replaced by `{_truncated, bytes}`, as the
/// reference's replay window does with large payloads.
pub const MAX_CUSTOM_PAYLOAD_BYTES: usize = 4096;

/// A `custom.*` event emitted by agent code, published after the run's job.
#[derive(Debug, Clone)]
pub struct CustomEvent {
    /// `path:function` of the emitting code.
    pub source: String,
    /// The `custom.<name>` type the code gave `emit_event`.
    pub event_type: String,
    /// The code's payload, or `{_truncated: true, bytes}` when its JSON exceeds
    /// [`MAX_CUSTOM_PAYLOAD_BYTES`].
    pub payload: Value,
}

/// The [`EventSink`] of one lambda run: a bounded buffer the daemon publishes from once the
/// job is over (publishing needs the agent's `seq`, whose persistence needs the file the run
/// is holding).
#[derive(Debug, Default)]
pub struct CustomEvents {
    events: Mutex<Vec<CustomEvent>>,
    dropped: AtomicU64,
}

impl CustomEvents {
    /// The events emitted so far (the buffer is emptied).
    pub fn take(&self) -> Vec<CustomEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Events refused because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl EventSink for CustomEvents {
    fn emit(&self, source: &str, event_type: &str, payload: &Value) -> bool {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if events.len() >= MAX_CUSTOM_EVENTS {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let bytes = serde_json::to_string(payload).map_or(0, |s| s.len());
        let payload = if bytes > MAX_CUSTOM_PAYLOAD_BYTES {
            json!({ "_truncated": true, "bytes": bytes })
        } else {
            payload.clone()
        };
        events.push(CustomEvent {
            source: source.to_owned(),
            event_type: event_type.to_owned(),
            payload,
        });
        true
    }
}
