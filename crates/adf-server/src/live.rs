//! The live feed of an agent's turns, for the Studio: reply and reasoning text as it streams,
//! tool calls and their results, token use and executor state — what `GET /events` does not
//! carry (bus payloads never hold prompt or reply text, and one frame per token would flush
//! the 1000-frame replay ring and wake every umbilical tap).
//!
//! [`LiveFeed`] is a `tokio::sync::broadcast` channel per agent, written from the turn host
//! (`turns::Recorder`) on the worker thread without waiting, read by
//! `GET /studio/api/agents/{id}/live`. Nothing is kept: a viewer sees what happens while it
//! is connected (the transcript, `GET /chat`, has the rest), and a viewer that falls more
//! than [`LIVE_CAPACITY`] frames behind skips the frames it missed.
//!
//! The channel exists only while someone watches: a broadcast channel allocates its whole ring
//! up front (~40 KiB at [`LIVE_CAPACITY`] frames), which was more than everything else an idle
//! agent costs. The first viewer creates it; the first frame published after the last viewer
//! left drops it.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tokio::sync::broadcast;

/// Frames buffered per agent for its slowest viewer.
pub const LIVE_CAPACITY: usize = 1024;

/// One live frame: `kind` (`text`, `thinking`, `tool_call`, `tool_result`, `reply`,
/// `state`) with its fields, and `t`, the daemon's clock (epoch ms) when the turn host
/// received it — so a viewer can measure how long the frame took to reach it.
#[derive(Debug, Clone)]
pub struct LiveFrame(pub Value);

/// An agent's live feed (see the module docs).
#[derive(Debug, Default)]
pub struct LiveFeed {
    /// `None` while nobody watches (and before anyone has).
    sender: Mutex<Option<broadcast::Sender<Arc<LiveFrame>>>>,
}

impl LiveFeed {
    fn sender(&self) -> std::sync::MutexGuard<'_, Option<broadcast::Sender<Arc<LiveFrame>>>> {
        self.sender.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends a frame to the connected viewers; with none it costs one uncontended lock and
    /// the frame is not even built (`frame` is called only when someone listens).
    pub fn publish(&self, frame: impl FnOnce() -> Value) {
        let mut guard = self.sender();
        let Some(sender) = guard.as_ref() else {
            return;
        };
        if sender.receiver_count() == 0 {
            // The last viewer left: give the ring back until the next one comes.
            *guard = None;
            return;
        }
        let sender = sender.clone();
        drop(guard);
        let mut value = frame();
        if let Some(object) = value.as_object_mut() {
            object.insert("t".into(), Value::from(adf_store::time::now_ms()));
        }
        let _no_viewer_left = sender.send(Arc::new(LiveFrame(value)));
    }

    /// A new viewer, receiving frames published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<LiveFrame>> {
        self.sender()
            .get_or_insert_with(|| broadcast::channel(LIVE_CAPACITY).0)
            .subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_channel(feed: &LiveFeed) -> bool {
        feed.sender().is_some()
    }

    #[test]
    fn the_ring_exists_only_while_someone_watches() {
        let feed = LiveFeed::default();
        assert!(!has_channel(&feed), "a new agent allocates no ring");
        feed.publish(|| panic!("no viewer: the frame is never built"));
        assert!(!has_channel(&feed));

        let mut viewer = feed.subscribe();
        assert!(has_channel(&feed));
        feed.publish(|| serde_json::json!({ "kind": "text", "text": "hi" }));
        let frame = viewer.try_recv().map(|f| f.0.clone());
        assert_eq!(
            frame.as_ref().ok().and_then(|f| f.get("text")),
            Some(&Value::from("hi"))
        );
        assert!(
            frame.as_ref().ok().and_then(|f| f.get("t")).is_some(),
            "stamped with `t`"
        );

        drop(viewer);
        assert!(has_channel(&feed), "dropped lazily, by the next frame");
        feed.publish(|| panic!("the last viewer left: the frame is never built"));
        assert!(!has_channel(&feed), "the ring is given back");

        let mut again = feed.subscribe();
        feed.publish(|| serde_json::json!({ "kind": "state", "state": "Idle" }));
        assert!(
            again.try_recv().is_ok(),
            "a later viewer gets a fresh channel"
        );
    }
}
