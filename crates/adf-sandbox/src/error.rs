//! Errors: [`SandboxError`] for an execution, [`HostError`] for one host call.

use std::fmt;

/// Why an execution did not produce a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The time limit passed: JavaScript was interrupted, or an await did not settle in time.
    #[error("execution timed out after {limit_ms} ms")]
    Timeout {
        /// The limit that applied.
        limit_ms: u64,
    },
    /// The runtime's memory limit was reached.
    #[error("memory limit of {limit} bytes exceeded")]
    MemoryLimit {
        /// The configured limit in bytes.
        limit: usize,
    },
    /// The code does not parse (TypeScript or JavaScript); the message carries `name:line:col`.
    #[error("syntax error: {message}")]
    Syntax {
        /// Readable diagnostics.
        message: String,
    },
    /// An imported module could not be found or loaded.
    #[error("module {path}: {message}")]
    Module {
        /// The module path or specifier concerned.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The code threw (or its promise rejected) and nothing caught it.
    #[error("{name}: {message}")]
    Thrown {
        /// `err.name` for Error objects; for other thrown values their `typeof`.
        name: String,
        /// `err.message`, or the thrown value rendered as text.
        message: String,
        /// `err.stack`, when present.
        stack: Option<String>,
        /// `err.code` when it is a string (e.g. an `adf.*` error rethrown).
        code: Option<String>,
    },
    /// The lambda file has no exported function of that name.
    #[error("{path} does not export a function named '{function}'")]
    NotAFunction {
        /// The lambda file.
        path: String,
        /// The requested export.
        function: String,
    },
    /// The execution's cancel signal fired ([`crate::Request::cancel`]): nobody waits for its
    /// result any more.
    #[error("execution cancelled: nobody waits for its result")]
    Cancelled,
    /// A fault of the sandbox itself (never caused by well-formed input).
    #[error("internal sandbox error: {0}")]
    Internal(String),
}

impl SandboxError {
    /// The `adf` proxy error code this failure maps to when it is reported to calling code
    /// (e.g. a nested `adf.sys_lambda`): `TIMEOUT`, a rethrown error's own code, `FN_ERROR`
    /// for other lambda failures, `INTERNAL_ERROR` for sandbox faults.
    pub fn proxy_code(&self) -> &str {
        match self {
            SandboxError::Timeout { .. } | SandboxError::Cancelled => "TIMEOUT",
            SandboxError::Thrown {
                code: Some(code), ..
            } => code,
            SandboxError::Internal(_) => "INTERNAL_ERROR",
            _ => "FN_ERROR",
        }
    }
}

/// A failed host call: `code` becomes `err.code` in JavaScript, `message` `err.message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    /// A stable code from the `adf` proxy table (`NOT_FOUND`, `TOOL_ERROR`, ...).
    pub code: String,
    /// Human-readable message.
    pub message: String,
}

impl HostError {
    /// Build a host error.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        HostError {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for HostError {}
