//! What can go wrong in an adapter, each in words an owner can act on. No variant carries a
//! credential: platform text that could echo one is scrubbed before it gets here.

/// An adapter failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    /// The credential row is missing from `adf_identity` (§8.2: no fallback).
    #[error(
        "the {adapter} adapter needs the credential '{purpose}' in the agent's identity store, and it is not there; set it with `adf identity set {file} {purpose}` (the value is read from stdin)"
    )]
    MissingCredential {
        /// The adapter type.
        adapter: String,
        /// The exact purpose key, `adapter:<type>:<KEY>`.
        purpose: String,
        /// The agent's file, as the fixing command names it.
        file: String,
    },
    /// The platform refused the credential (Telegram: 401 Unauthorized).
    #[error(
        "{adapter} refused the credential '{purpose}' ({reason}); set a valid one with `adf identity set {file} {purpose}` (the value is read from stdin)"
    )]
    CredentialRefused {
        /// The adapter type.
        adapter: String,
        /// The exact purpose key.
        purpose: String,
        /// The platform's answer, e.g. `401 Unauthorized`.
        reason: String,
        /// The agent's file.
        file: String,
    },
    /// The adapter's config entry is invalid (CFG-49 and the like).
    #[error("adapters.{adapter}: {message}")]
    Config {
        /// The adapter type.
        adapter: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// The platform answered with an error (a `failed` outbox row carries this reason).
    #[error("{adapter} answered {status}: {reason}")]
    Platform {
        /// The adapter type.
        adapter: String,
        /// The HTTP status (or the platform's error code).
        status: u16,
        /// The platform's description.
        reason: String,
    },
    /// The platform kept answering 429 after the waits it asked for.
    #[error(
        "{adapter} is rate limiting this bot (retry after {retry_after_secs} s), still after {attempts} attempts"
    )]
    RateLimited {
        /// The adapter type.
        adapter: String,
        /// The last `retry_after`, in seconds.
        retry_after_secs: u64,
        /// Attempts made.
        attempts: u32,
    },
    /// The connection failed or dropped (transient: the host restarts the adapter).
    #[error("{adapter}: connection to the platform failed: {reason}")]
    Transport {
        /// The adapter type.
        adapter: String,
        /// What failed, without the URL (it may hold the credential).
        reason: String,
    },
    /// The egress policy refused the platform's address.
    #[error("{adapter}: {reason}")]
    Egress {
        /// The adapter type.
        adapter: String,
        /// The policy's reason.
        reason: String,
    },
    /// The host could not store what arrived (the sink's error).
    #[error("{adapter}: could not store an inbound message: {reason}")]
    Sink {
        /// The adapter type.
        adapter: String,
        /// The sink's reason.
        reason: String,
    },
    /// The adapter's state directory could not be read or written.
    #[error("{adapter}: adapter state in {path}: {reason}")]
    State {
        /// The adapter type.
        adapter: String,
        /// The file or directory.
        path: String,
        /// The IO error.
        reason: String,
    },
    /// Something this runtime does not do (yet); says what.
    #[error("{what} is not supported yet")]
    NotSupported {
        /// The missing capability, e.g. `the slack adapter`.
        what: String,
    },
    /// The request itself is invalid (recipient, chat id, limit).
    #[error("{0}")]
    Invalid(String),
}

impl AdapterError {
    /// Whether a restart may help: connection failures, rate limits, state and sink hiccups.
    /// A missing or refused credential, bad config or an unsupported adapter stay failed until
    /// the owner changes something.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Transport { .. }
                | Self::RateLimited { .. }
                | Self::Sink { .. }
                | Self::State { .. }
                | Self::Platform { .. }
        )
    }

    /// The status code a `failed` outbox row records for this error, when there is one.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Self::Platform { status, .. } => Some(*status),
            Self::CredentialRefused { .. } => Some(401),
            Self::RateLimited { .. } => Some(429),
            _ => None,
        }
    }
}
