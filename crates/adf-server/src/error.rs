//! Errors: [`ServerError`] for the library API, [`ApiError`] for HTTP answers.
//!
//! Every HTTP error body is the reference's `{"error": "..."}` (plus `message` for 401), with
//! the reference's status codes: 400 bad input (a path that is not an .adf file included),
//! 401 missing token, 403 a review the owner must accept first (`{error, code:
//! "AGENT_REVIEW_REQUIRED", agentId, filePath}`) or a protected write, 404 unknown
//! agent/file/task, 409 a task that cannot be resolved or a protected file deleted without
//! `force`, 422 `AGENT_FILE_MALFORMED` a file whose stored data does not parse (config JSON), 500 the daemon's own failures, 501 operations this daemon does not run yet. The
//! front door adds 415 and 421 (`frontdoor.rs`).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use adf_store::StoreError;

/// What can go wrong starting or driving the daemon.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A path a caller named does not exist or is not a regular file (an HTTP 404); the
    /// string is the path as given.
    #[error("no such file: {0}")]
    NoSuchFile(String),

    /// The request clashes with the daemon's state, e.g. a file whose agent id is already
    /// loaded from another path (an HTTP 409); the string is the whole message.
    #[error("{0}")]
    Conflict(String),

    /// No loaded agent has this id, handle or file path (an HTTP 404); the string is the key
    /// the caller used.
    #[error("Unknown agent \"{0}\"")]
    UnknownAgent(String),

    /// An `.adf` file could not be opened, read or written; the status follows the store
    /// error (400 for a file that is not a usable `.adf`, 404 for a missing row, ...).
    #[error(transparent)]
    Store(#[from] StoreError),

    /// A filesystem or socket operation failed: 404/400/403 when the path a client named is
    /// at fault, 500 otherwise.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),

    /// `settings.json` under the ADF home is not a JSON object or cannot be written back
    /// (an HTTP 500).
    #[error("{0}")]
    Settings(String),

    /// Reserved for a failure of the daemon's own outgoing HTTP client; nothing in this crate
    /// returns it today (an HTTP 500 if it did).
    #[error("http client: {0}")]
    Client(String),

    /// The front door's settings cannot be served (`--insecure-loopback` off loopback, an
    /// empty token).
    #[error("{0}")]
    FrontDoor(String),

    /// `requireReview` and the owner has not accepted the file's current digest (`review`).
    #[error(
        "agent \"{agent_id}\" ({file_path}) must be reviewed before it is loaded: read GET /agents/review?filePath=..., then POST /agents/review/accept"
    )]
    ReviewRequired {
        /// The `id` recorded in the file's config.
        agent_id: String,
        /// The canonical path of the file awaiting review.
        file_path: String,
    },
}

/// An HTTP error answer.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status of the answer.
    pub status: StatusCode,
    /// The body's `error` string, shown to the user as is.
    pub message: String,
    /// Fields beside `error` in the body (`code`, `agentId`, `filePath` of a 403 review).
    pub details: Option<serde_json::Map<String, serde_json::Value>>,
}

impl ApiError {
    /// An answer with `status` and `message` and no extra body fields.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            details: None,
        }
    }

    /// A 400: the request itself is malformed (missing field, bad path, invalid value).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// A 404: the agent, file, task or route the request names does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// A 500: the daemon's own failure, not the client's.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// An operation that needs a model turn or the sandbox, which this daemon does not run
    /// yet: an honest 501 rather than a 202 for work that would never happen.
    pub fn executor_missing(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_IMPLEMENTED,
            format!("{what} not supported yet: the executor is not wired into the daemon"),
        )
    }
}

/// The status of an IO error caused by the path a client named (a missing file, a NUL byte,
/// a directory where a file belongs); anything else is the daemon's own failure.
fn io_status(error: &std::io::Error) -> StatusCode {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::InvalidInput
        | ErrorKind::InvalidFilename
        | ErrorKind::IsADirectory
        | ErrorKind::NotADirectory
        | ErrorKind::InvalidData => StatusCode::BAD_REQUEST,
        ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        // The file the client named holds data this runtime cannot read (config JSON that
        // does not parse, a config without an id): the request is well formed, its file is
        // not, and nothing was changed.
        if matches!(error, StoreError::Malformed(_)) {
            let mut answer = Self::new(StatusCode::UNPROCESSABLE_ENTITY, error.to_string());
            answer.details = json!({ "code": "AGENT_FILE_MALFORMED" })
                .as_object()
                .cloned();
            return answer;
        }
        let status = match &error {
            StoreError::NotFound { .. } | StoreError::FileNotFound { .. } => StatusCode::NOT_FOUND,
            StoreError::InvalidInput(_) | StoreError::ConfigRejected { .. } => {
                StatusCode::BAD_REQUEST
            }
            // The client named a file that is not a usable .adf file: its error, not ours.
            StoreError::EmptyFile { .. }
            | StoreError::NotSqlite { .. }
            | StoreError::Truncated { .. }
            | StoreError::Corrupt { .. }
            | StoreError::NotAdf { .. }
            | StoreError::NewerSchema { .. }
            | StoreError::SchemaTooOld { .. } => StatusCode::BAD_REQUEST,
            StoreError::FileExists { .. } => StatusCode::CONFLICT,
            StoreError::Protected { .. } | StoreError::RequiresAuthorizedCode { .. } => {
                StatusCode::FORBIDDEN
            }
            StoreError::Io(io) => io_status(io),
            error if error.is_unopenable_database() => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, error.to_string())
    }
}

impl From<ServerError> for ApiError {
    fn from(error: ServerError) -> Self {
        match error {
            ServerError::NoSuchFile(_) | ServerError::UnknownAgent(_) => {
                Self::not_found(error.to_string())
            }
            ServerError::Conflict(message) => Self::new(StatusCode::CONFLICT, message),
            ServerError::ReviewRequired {
                ref agent_id,
                ref file_path,
            } => {
                let details = json!({
                    "code": "AGENT_REVIEW_REQUIRED",
                    "agentId": agent_id,
                    "filePath": file_path,
                });
                let mut answer = Self::new(StatusCode::FORBIDDEN, error.to_string());
                answer.details = details.as_object().cloned();
                answer
            }
            ServerError::Store(store) => store.into(),
            ServerError::Io(ref io) => Self::new(io_status(io), error.to_string()),
            other => Self::internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = serde_json::Map::new();
        body.insert("error".into(), json!(self.message));
        body.extend(self.details.unwrap_or_default());
        (self.status, Json(serde_json::Value::Object(body))).into_response()
    }
}

/// Result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;
