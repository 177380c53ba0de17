//! Provider errors, classified by what the caller should do: retry, fix a key, fix the request.

use std::time::Duration;

use thiserror::Error;

/// A failed model request. Every message names the provider (its id, e.g. `anthropic` or
/// `custom:local`) and, for errors a person must fix, says what to change. No variant ever
/// carries an API key: response bodies are scrubbed of the key before they land here.
#[derive(Debug, Clone, Error, PartialEq)]
#[non_exhaustive]
pub enum ProviderError {
    /// 401/403: the key is missing, wrong or lacks permission. Not retried.
    #[error("{provider} rejected the API key ({status}): {message}. {fix}")]
    Auth {
        /// Provider id.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The vendor's message.
        message: String,
        /// What to do about it.
        fix: String,
    },
    /// No key could be found for a provider that needs one. Not retried.
    #[error("no API key for {provider}. {fix}")]
    MissingKey {
        /// Provider id.
        provider: String,
        /// What to do about it.
        fix: String,
    },
    /// 400/404/413/422 and other client errors: the request itself is wrong. Not retried.
    #[error("{provider} rejected the request ({status}): {message}. {fix}")]
    Request {
        /// Provider id.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The vendor's message.
        message: String,
        /// What to check.
        fix: String,
    },
    /// 429, 5xx, timeouts, connection resets, streams cut short: worth retrying.
    #[error("{provider} failed transiently{}: {message}{}", status.map(|s| format!(" ({s})")).unwrap_or_default(), if *attempts > 1 { format!(" (after {attempts} attempts)") } else { String::new() })]
    Transient {
        /// Provider id.
        provider: String,
        /// HTTP status, `None` for network errors.
        status: Option<u16>,
        /// What happened.
        message: String,
        /// The server's `Retry-After`, if any.
        retry_after: Option<Duration>,
        /// How many attempts were made before giving up (1 when not retried).
        attempts: u32,
        /// What kind of failure it was (the reason a retry names).
        kind: FailureKind,
    },
    /// No connection: the model server refused it, or its name did not resolve. Transient
    /// (§6.2: the loop goes back to idle), but a server on this machine or its private network
    /// that refuses is not starting up in the next minutes: it gets one quick retry
    /// ([`crate::RetryPolicy`]).
    #[error("model server {url} {} ({provider}{}). {fix}", if *refused { "refused the connection" } else { "could not be found (its name did not resolve)" }, if *attempts > 1 { format!(", {attempts} attempts") } else { String::new() })]
    Unreachable {
        /// Provider id.
        provider: String,
        /// The provider's API root, as configured (`http://127.0.0.1:8088/v1`).
        url: String,
        /// Refused (`true`) or a name that did not resolve (`false`).
        refused: bool,
        /// The server is on this machine or its private network (see
        /// [`crate::is_local_model_server`]).
        local: bool,
        /// How many attempts were made before giving up.
        attempts: u32,
        /// What to do about it.
        fix: String,
    },
    /// The response could not be understood (bad JSON, an unknown event shape).
    #[error("{provider} sent a response that could not be read: {message}")]
    Protocol {
        /// Provider id.
        provider: String,
        /// What was wrong.
        message: String,
    },
    /// `model.provider` / `config.providers` do not describe a usable provider.
    #[error("provider {provider:?} is not usable: {message}")]
    Config {
        /// The provider id as configured (may be empty).
        provider: String,
        /// What is wrong and what to set.
        message: String,
    },
}

/// What kind of transient failure an attempt met: what a retry says it is retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// The connection was refused.
    Refused,
    /// The server's name did not resolve.
    NameNotResolved,
    /// Connecting or reading timed out.
    Timeout,
    /// The connection was reset or closed before the response.
    Reset,
    /// The response stream ended before its end marker.
    CutShort,
    /// 429 or another "come back later" status (408, 409, 425).
    RateLimited,
    /// A 5xx answer.
    ServerError,
    /// Any other network failure.
    Network,
}

impl FailureKind {
    /// Short words for a retry line ("connection reset").
    pub fn reason(self) -> &'static str {
        match self {
            FailureKind::Refused => "connection refused",
            FailureKind::NameNotResolved => "name not resolved",
            FailureKind::Timeout => "timed out",
            FailureKind::Reset => "connection reset",
            FailureKind::CutShort => "stream cut short",
            FailureKind::RateLimited => "rate limited",
            FailureKind::ServerError => "server error",
            FailureKind::Network => "network error",
        }
    }
}

impl ProviderError {
    /// Whether retrying the same request may succeed (§6.2: rate limits, 5xx, timeouts,
    /// resets, an unreachable server).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ProviderError::Transient { .. } | ProviderError::Unreachable { .. }
        )
    }

    /// The kind of a transient failure (`None` for the others).
    pub fn failure_kind(&self) -> Option<FailureKind> {
        match self {
            ProviderError::Transient { kind, .. } => Some(*kind),
            ProviderError::Unreachable { refused: true, .. } => Some(FailureKind::Refused),
            ProviderError::Unreachable { .. } => Some(FailureKind::NameNotResolved),
            _ => None,
        }
    }

    /// What a retry line says it is retrying: the failure kind, with the status when there
    /// is one ("rate limited (429)", "connection reset").
    pub fn retry_reason(&self) -> String {
        let kind = self.failure_kind().map_or("error", FailureKind::reason);
        match self.status() {
            Some(status) => format!("{kind} ({status})"),
            None => kind.to_owned(),
        }
    }

    /// Whether this is a credentials problem (401/403 or no key).
    pub fn is_auth(&self) -> bool {
        matches!(
            self,
            ProviderError::Auth { .. } | ProviderError::MissingKey { .. }
        )
    }

    /// The HTTP status, when the error came from one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::Auth { status, .. } | ProviderError::Request { status, .. } => {
                Some(*status)
            }
            ProviderError::Transient { status, .. } => *status,
            _ => None,
        }
    }

    pub(crate) fn with_attempts(mut self, n: u32) -> Self {
        if let ProviderError::Transient { attempts, .. }
        | ProviderError::Unreachable { attempts, .. } = &mut self
        {
            *attempts = n;
        }
        self
    }
}
