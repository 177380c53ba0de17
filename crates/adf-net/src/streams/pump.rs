//! One binding's pump: moves chunks a → b (and b → a when bidirectional) until an end
//! condition, counting bytes, and says why it stopped.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::endpoint::{Sink, Source};
use super::spec::Options;
use super::{Binding, Emit};

/// Why a pump stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EndReason {
    /// `stream_unbind`.
    Unbound,
    /// The agent was released (turned `off`, unloaded, the daemon stopped).
    Released,
    /// No byte moved for `idle_timeout_ms`.
    IdleTimeout,
    /// `max_duration_ms` passed.
    MaxDuration,
    /// `max_bytes` were pumped.
    MaxBytes,
    /// An endpoint ended (EOF) or failed, per the close policy.
    EndpointClosed,
}

impl EndReason {
    pub(super) fn name(self) -> &'static str {
        match self {
            EndReason::Unbound => "unbound",
            EndReason::Released => "released",
            EndReason::IdleTimeout => "idle_timeout",
            EndReason::MaxDuration => "max_duration",
            EndReason::MaxBytes => "max_bytes",
            EndReason::EndpointClosed => "endpoint_closed",
        }
    }

    /// Whether a declared binding with `reconnect` opens its endpoints again.
    pub(super) fn reconnects(self) -> bool {
        self == EndReason::EndpointClosed
    }
}

/// One direction's ends.
pub(super) struct Direction {
    pub(super) source: Source,
    pub(super) sink: Sink,
}

async fn next_or_pending(
    direction: &mut Option<Direction>,
    buffer: &mut [u8],
) -> std::io::Result<Option<Vec<u8>>> {
    match direction {
        Some(d) => d.source.next(buffer).await,
        None => std::future::pending().await,
    }
}

async fn at_or_pending(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Pumps until an end condition. `deadline` is the binding's `max_duration` end (it spans
/// reconnects); `stop` carries `Some(reason)` when the host ends the binding.
pub(super) async fn run(
    binding: &Binding,
    mut a_to_b: Option<Direction>,
    mut b_to_a: Option<Direction>,
    options: Options,
    deadline: Option<Instant>,
    stop: &mut watch::Receiver<Option<EndReason>>,
    emit: &Emit,
) -> EndReason {
    let mut forward = Source::buffer(options.queue_high_water_bytes);
    let mut backward = Source::buffer(options.queue_high_water_bytes);
    let idle = options.idle_timeout;
    let mut idle_at = idle.map(|d| Instant::now() + d);
    let mut summary = options
        .flow_summary_interval
        .map(|every| tokio::time::interval_at(Instant::now() + every, every));
    let reason = loop {
        if let Some(reason) = *stop.borrow() {
            break reason;
        }
        if a_to_b.is_none() && b_to_a.is_none() {
            break EndReason::EndpointClosed;
        }
        tokio::select! {
            changed = stop.changed() => {
                if changed.is_err() {
                    break EndReason::Released;
                }
            }
            chunk = next_or_pending(&mut a_to_b, &mut forward) => {
                match moved(binding, &mut a_to_b, chunk, true, options, stop).await {
                    Flow::Moved(limit) => {
                        idle_at = idle.map(|d| Instant::now() + d);
                        if let Some(reason) = limit { break reason; }
                    }
                    Flow::Ended => {
                        if options.close_b_on_a_close || b_to_a.is_none() {
                            break EndReason::EndpointClosed;
                        }
                    }
                }
            }
            chunk = next_or_pending(&mut b_to_a, &mut backward) => {
                match moved(binding, &mut b_to_a, chunk, false, options, stop).await {
                    Flow::Moved(limit) => {
                        idle_at = idle.map(|d| Instant::now() + d);
                        if let Some(reason) = limit { break reason; }
                    }
                    Flow::Ended => {
                        if options.close_a_on_b_close || a_to_b.is_none() {
                            break EndReason::EndpointClosed;
                        }
                    }
                }
            }
            () = at_or_pending(idle_at) => break EndReason::IdleTimeout,
            () = at_or_pending(deadline) => break EndReason::MaxDuration,
            _ = async {
                match summary.as_mut() {
                    Some(every) => every.tick().await,
                    None => std::future::pending().await,
                }
            } => emit(binding, "binding.flow_summary", binding.counters()),
        }
    };
    // Ending the binding may also end an endpoint (release drops the umbilical feed); the
    // host's reason is the one that counts.
    let reason = stop.borrow().unwrap_or(reason);
    for direction in [a_to_b.as_mut(), b_to_a.as_mut()].into_iter().flatten() {
        let _gave_up = tokio::time::timeout(options.drain_timeout, direction.sink.finish()).await;
    }
    reason
}

enum Flow {
    /// Bytes moved; `Some` when a limit now ends the binding.
    Moved(Option<EndReason>),
    /// The source ended or a side failed: the direction is gone.
    Ended,
}

async fn moved(
    binding: &Binding,
    direction: &mut Option<Direction>,
    chunk: std::io::Result<Option<Vec<u8>>>,
    forward: bool,
    options: Options,
    stop: &mut watch::Receiver<Option<EndReason>>,
) -> Flow {
    let Some(d) = direction.as_mut() else {
        return Flow::Ended;
    };
    let Ok(Some(mut bytes)) = chunk else {
        // The other side learns the stream ended (a half-close), unless the policy ends all.
        let _gave_up = tokio::time::timeout(options.drain_timeout, d.sink.finish()).await;
        *direction = None;
        return Flow::Ended;
    };
    let mut limit = None;
    if let Some(max) = options.max_bytes {
        let left = max.saturating_sub(binding.total());
        let left = usize::try_from(left).unwrap_or(usize::MAX);
        if bytes.len() >= left {
            bytes.truncate(left);
            limit = Some(EndReason::MaxBytes);
        }
    }
    let count = bytes.len() as u64;
    if !bytes.is_empty() && !written(d, bytes, options, stop).await {
        *direction = None;
        return Flow::Ended;
    }
    let counter = if forward {
        &binding.bytes_a_to_b
    } else {
        &binding.bytes_b_to_a
    };
    counter.fetch_add(count, Ordering::Relaxed);
    Flow::Moved(limit)
}

/// Writes one chunk; when the binding is ended meanwhile, the write gets
/// `drain_timeout_ms` more to finish (a sink that never drains cannot hold the binding).
async fn written(
    d: &mut Direction,
    bytes: Vec<u8>,
    options: Options,
    stop: &mut watch::Receiver<Option<EndReason>>,
) -> bool {
    let write = d.sink.write(bytes);
    tokio::pin!(write);
    tokio::select! {
        result = &mut write => return result.is_ok(),
        () = ended(stop) => {}
    }
    matches!(
        tokio::time::timeout(options.drain_timeout, write).await,
        Ok(Ok(()))
    )
}

/// Resolves once the host ends the binding (or drops its handle).
async fn ended(stop: &mut watch::Receiver<Option<EndReason>>) {
    while stop.borrow_and_update().is_none() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// The first delay before a declared binding reopens, and the longest.
pub(super) const RECONNECT_FIRST: Duration = Duration::from_secs(1);
pub(super) const RECONNECT_MAX: Duration = Duration::from_secs(60);
