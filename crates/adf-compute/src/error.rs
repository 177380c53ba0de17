//! What a compute call fails with, and how it reaches the caller as a tool error.

use adf_runtime::tools::{ErrorCode, ToolError};

/// A compute call that cannot be carried out.
#[derive(Debug, thiserror::Error)]
pub enum ComputeError {
    /// The agent allows no target at all.
    #[error(
        "no compute target is available: set compute.enabled true for the isolated target, or list targets in compute.allowed_targets"
    )]
    NoTarget,
    /// The target is not in the agent's allowlist.
    #[error(
        "compute target '{target}' is not allowed for this agent (allowed: {allowed:?}); add it to compute.allowed_targets"
    )]
    NotAllowed {
        /// The target asked for.
        target: String,
        /// `compute.allowed_targets` as resolved.
        allowed: Vec<String>,
    },
    /// `isolated` or `shared` while `compute.enabled` is off.
    #[error("compute target '{target}' needs compute.enabled true")]
    ComputeDisabled {
        /// The target asked for.
        target: String,
    },
    /// The host target with one of its two gates shut.
    #[error(
        "the host compute target is closed: {0}; it needs both compute.host_access true and the runtime setting compute.hostAccess true"
    )]
    HostClosed(String),
    /// The tool a target runs with is missing on this machine.
    #[error("compute target '{target}' is not available on this machine: {what}")]
    NotInstalled {
        /// The target asked for.
        target: String,
        /// What to install.
        what: String,
    },
    /// A target name that is neither built in nor a registered container.
    #[error(
        "unknown compute target '{0}': not isolated, shared or host, and no runtime setting compute.containers registers it"
    )]
    UnknownTarget(String),
    /// The agent's config id cannot name a workspace directory.
    #[error(
        "the agent's config id '{0}' cannot name a compute workspace (letters, digits, '-' and '_')"
    )]
    BadAgentId(String),
    /// A path outside the workspace, or through a symbolic link.
    #[error("invalid path '{path}': {why}")]
    BadPath {
        /// The path given.
        path: String,
        /// Why it is refused.
        why: String,
    },
    /// A transfer over the size limit.
    #[error(
        "'{path}' is {size} bytes, over the transfer limit of {limit} bytes (limits.max_file_write_bytes)"
    )]
    TooLarge {
        /// The path given.
        path: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Something this runtime does not do yet.
    #[error("not supported yet: {0}")]
    NotSupported(String),
    /// Starting or talking to the program failed.
    #[error("{0}")]
    Io(String),
}

impl From<ComputeError> for ToolError {
    fn from(error: ComputeError) -> Self {
        let code = match &error {
            ComputeError::NotAllowed { .. }
            | ComputeError::ComputeDisabled { .. }
            | ComputeError::HostClosed(_)
            | ComputeError::NoTarget
            | ComputeError::NotInstalled { .. }
            | ComputeError::NotSupported(_) => ErrorCode::Disabled,
            ComputeError::UnknownTarget(_)
            | ComputeError::BadPath { .. }
            | ComputeError::TooLarge { .. } => ErrorCode::InvalidInput,
            ComputeError::BadAgentId(_) => ErrorCode::InvalidState,
            ComputeError::Io(_) => ErrorCode::ToolError,
        };
        ToolError::new(code, error.to_string())
    }
}
