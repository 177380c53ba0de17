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
    /// 429, 5xx, timeouts, connection failures and resets, streams cut short: worth retrying.
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

impl ProviderError {
    /// Whether retrying the same request may succeed (§6.2: rate limits, 5xx, timeouts, resets).
    pub fn is_transient(&self) -> bool {
        matches!(self, ProviderError::Transient { .. })
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
        if let ProviderError::Transient { attempts, .. } = &mut self {
            *attempts = n;
        }
        self
    }
}
