//! Tool errors and their stable codes (the `adf` proxy guide's error table, missing-tables §9).

use adf_store::{Protection, StoreError};
use serde::Serialize;

/// The stable error codes callers see: code gets them as `err.code`, the model as a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum ErrorCode {
    /// Unknown tool, task, key or file.
    NotFound,
    /// Tool disabled or not declared; code method disabled.
    Disabled,
    /// Restricted tool or method, or a `requires_authorization` task, from unauthorized code.
    RequiresAuthorizedCode,
    /// Unauthorized code calling an authorized lambda file.
    RequiresAuthorizedCaller,
    /// The tool ran and failed.
    ToolError,
    /// Lambda recursion A→B→A.
    CircularCall,
    /// Tools code may not call (`say`, `ask`, `loop_compact`, `loop_clear`).
    ExcludedTool,
    /// A lambda failed.
    FnError,
    /// Missing or invalid parameters.
    InvalidInput,
    /// A task that is not pending cannot be resolved.
    InvalidState,
    /// A `model_invoke` request failed at the provider (unknown provider, HTTP or stream error).
    ModelError,
    /// The model answered but returned no text.
    ModelRefused,
    /// The runtime itself failed (sandbox bridge, serialization), not the caller's input.
    InternalError,
    /// A write the protection rules refused, or that failed in the database.
    WriteError,
    /// A mesh tool was called while messaging is not enabled for the agent.
    MeshNotEnabled,
    /// The call ran past its time limit (code execution, SQL statement, fetch).
    Timeout,
    /// The owner denied an approval request.
    Denied,
}

impl ErrorCode {
    /// The code as callers see it, e.g. `NOT_FOUND`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotFound => "NOT_FOUND",
            Self::Disabled => "DISABLED",
            Self::RequiresAuthorizedCode => "REQUIRES_AUTHORIZED_CODE",
            Self::RequiresAuthorizedCaller => "REQUIRES_AUTHORIZED_CALLER",
            Self::ToolError => "TOOL_ERROR",
            Self::CircularCall => "CIRCULAR_CALL",
            Self::ExcludedTool => "EXCLUDED_TOOL",
            Self::FnError => "FN_ERROR",
            Self::InvalidInput => "INVALID_INPUT",
            Self::InvalidState => "INVALID_STATE",
            Self::ModelError => "MODEL_ERROR",
            Self::ModelRefused => "MODEL_REFUSED",
            Self::InternalError => "INTERNAL_ERROR",
            Self::WriteError => "WRITE_ERROR",
            Self::MeshNotEnabled => "MESH_NOT_ENABLED",
            Self::Timeout => "TIMEOUT",
            Self::Denied => "DENIED",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A protection a call ran into, which the owner may lift once (§4.2, §4.4, §5.17 step 9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProtectionHit {
    /// `file`, `meta key`, `config path`, ...
    pub kind: String,
    /// The protected path, key or id.
    pub target: String,
    /// The level that refused the call, e.g. `read_only` or `locked`.
    pub level: Protection,
    /// What the level means here when the level alone does not say (a file the runtime
    /// generates, an increment that does not raise the number).
    #[serde(skip)]
    pub why: Option<&'static str>,
}

impl ProtectionHit {
    /// The level with what it means here, as refusals word it: `read_only`, or
    /// `increment (only strictly greater values)`.
    pub fn level_described(&self) -> String {
        match self.why {
            Some(why) => format!("{} ({why})", self.level),
            None => self.level.to_string(),
        }
    }
}

/// A failed tool call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// The stable code callers branch on.
    pub code: ErrorCode,
    /// What went wrong, for the model or the code to read.
    pub message: String,
    /// Set when the refusal came from a protection that an owner may override once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protection: Option<ProtectionHit>,
}

impl ToolError {
    /// An error with this code and message and no protection hit.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            protection: None,
        }
    }

    /// An [`ErrorCode::InvalidInput`] error: the caller's arguments are wrong.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidInput, message)
    }

    /// An [`ErrorCode::ToolError`] error: the tool ran and failed.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ToolError, message)
    }

    /// An [`ErrorCode::NotFound`] error: the named tool, task, key or file does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
}

impl From<StoreError> for ToolError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Protected {
                kind,
                target,
                level,
                why,
            } => {
                let hit = ProtectionHit {
                    kind: kind.to_string(),
                    target,
                    level,
                    why,
                };
                Self {
                    code: ErrorCode::WriteError,
                    message: format!("{kind} '{}' is {}", hit.target, hit.level_described()),
                    protection: Some(hit),
                }
            }
            StoreError::RequiresAuthorizedCode { action } => Self::new(
                ErrorCode::RequiresAuthorizedCode,
                format!("only the owner or authorized code may {action}"),
            ),
            StoreError::NotFound { what, name } => {
                Self::new(ErrorCode::NotFound, format!("{what} not found: {name}"))
            }
            StoreError::InvalidInput(message) => Self::new(ErrorCode::InvalidInput, message),
            StoreError::ConfigRejected { violations } => Self::new(
                ErrorCode::InvalidInput,
                format!("config rejected: {}", violations.join("; ")),
            ),
            StoreError::ReadOnly { .. } => Self::new(ErrorCode::WriteError, error.to_string()),
            other => Self::new(ErrorCode::InternalError, other.to_string()),
        }
    }
}
