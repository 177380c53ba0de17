//! [`BodyBudget`]: the daemon-wide in-flight byte budget for the bodies of unauthenticated
//! requests (mesh deliveries, served routes), so a flood of large bodies is refused (503 with
//! `Retry-After`) instead of growing the daemon's memory. A leaf: the front door, the mesh
//! routes and agent serving all read bodies through it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long an unauthenticated body may take to arrive (a 25 MB message at about 1 MB/s).
pub const DEFAULT_BODY_DEADLINE: Duration = Duration::from_secs(30);

/// Seconds a client refused for the body budget is told to wait.
const RETRY_AFTER_SECS: &str = "1";

/// The body budget: bytes of unauthenticated request bodies held in memory at once, across
/// all requests. Permits are taken as the bytes arrive (the declared length up front when
/// there is one) and returned when the request is done with them.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    semaphore: Arc<Semaphore>,
    capacity: usize,
    /// How long one body may take to arrive.
    deadline: Duration,
}

/// Why a budgeted body was not read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyRefusal {
    /// This one body is larger than its route allows (413).
    TooLarge,
    /// The budget is spent by other requests in flight (503 with `Retry-After`).
    Busy,
    /// The client went away or sent a malformed body (400).
    Broken(String),
    /// The body did not arrive within the budget's deadline (408).
    TooSlow,
}

/// The budget a read body holds; its bytes stay counted until this is dropped.
#[derive(Debug)]
pub struct BudgetHold {
    _permit: Option<OwnedSemaphorePermit>,
}

impl BodyBudget {
    /// A budget of `capacity` bytes (at most `u32::MAX`; more is clamped), each body given
    /// [`DEFAULT_BODY_DEADLINE`] to arrive.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.min(u32::MAX as usize);
        BodyBudget {
            semaphore: Arc::new(Semaphore::new(capacity)),
            capacity,
            deadline: DEFAULT_BODY_DEADLINE,
        }
    }

    /// The same budget with another deadline per body.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The budget's total size in bytes (after clamping to `u32::MAX`).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes counted against the budget right now.
    pub fn in_use(&self) -> usize {
        self.capacity
            .saturating_sub(self.semaphore.available_permits())
    }

    fn take(&self, bytes: usize, held: &mut Option<OwnedSemaphorePermit>) -> bool {
        if bytes == 0 {
            return true;
        }
        let Ok(count) = u32::try_from(bytes) else {
            return false;
        };
        match Arc::clone(&self.semaphore).try_acquire_many_owned(count) {
            Ok(permit) => {
                match held {
                    Some(existing) => existing.merge(permit),
                    None => *held = Some(permit),
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Reads `body` (at most `limit` bytes) while counting it against the budget. A declared
    /// `Content-Length` is checked and reserved before a byte is read.
    pub async fn read(
        &self,
        headers: &HeaderMap,
        body: Body,
        limit: usize,
    ) -> Result<(Vec<u8>, BudgetHold), BodyRefusal> {
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let mut permit = None;
        let mut reserved = 0usize;
        if let Some(length) = declared {
            let length = usize::try_from(length).unwrap_or(usize::MAX);
            if length > limit {
                return Err(BodyRefusal::TooLarge);
            }
            if length > self.capacity {
                return Err(BodyRefusal::TooLarge);
            }
            if !self.take(length, &mut permit) {
                return Err(BodyRefusal::Busy);
            }
            reserved = length;
        }
        let streamed = async move {
            let mut buffer = Vec::with_capacity(reserved);
            let mut stream = body.into_data_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| BodyRefusal::Broken(e.to_string()))?;
                let total = buffer.len() + chunk.len();
                if total > limit {
                    return Err(BodyRefusal::TooLarge);
                }
                if total > reserved {
                    if !self.take(total - reserved, &mut permit) {
                        return Err(BodyRefusal::Busy);
                    }
                    reserved = total;
                }
                buffer.extend_from_slice(&chunk);
            }
            Ok((buffer, BudgetHold { _permit: permit }))
        };
        // A sender trickling its body would hold its share of the budget for as long as it
        // likes; past the deadline its bytes are dropped and returned.
        tokio::time::timeout(self.deadline, streamed)
            .await
            .unwrap_or(Err(BodyRefusal::TooSlow))
    }
}

impl BodyRefusal {
    /// The answer for a refused body; `what` names the limit for a 413.
    pub fn response(&self, what: &str) -> Response {
        match self {
            BodyRefusal::TooLarge => error(StatusCode::PAYLOAD_TOO_LARGE, what),
            BodyRefusal::Busy => {
                let mut response = error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many large requests in flight; retry shortly",
                );
                response.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from_static(RETRY_AFTER_SECS),
                );
                response
            }
            BodyRefusal::TooSlow => error(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time",
            ),
            BodyRefusal::Broken(detail) => error(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the request body: {detail}"),
            ),
        }
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({ "error": message }))).into_response()
}
