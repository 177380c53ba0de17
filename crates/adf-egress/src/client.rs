//! The only place the workspace builds an HTTP client (a test in this crate enforces it).
//!
//! reqwest is built with `rustls-no-provider`, so a client built before a rustls crypto
//! provider is installed panics ("No rustls crypto provider is configured"); every client here
//! installs ring first. Building is also guarded against any other panic inside reqwest: a
//! caller gets an [`crate::EgressError`], never an unwinding thread.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use crate::resolve::{PinnedResolver, Pins};
use crate::{EgressError, EgressErrorKind};

/// Timeouts of a client; `None` leaves reqwest's default (none).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientOptions {
    /// The whole request, connect to last body byte.
    pub timeout: Option<Duration>,
    /// Establishing the TCP (and TLS) connection.
    pub connect_timeout: Option<Duration>,
    /// Between two reads of the response.
    pub read_timeout: Option<Duration>,
}

const USER_AGENT: &str = concat!("adf/", env!("CARGO_PKG_VERSION"));

/// Installs the ring provider as the process default unless one is installed already.
pub fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another thread's install is as good as winning it.
        let _ignored = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A client for agent egress: it connects only to addresses pinned in `pins` (names only;
/// IP literals connect as written, so callers admit every URL through
/// [`crate::Policy::admit`] first), follows no redirect (each hop is the caller's to check)
/// and ignores proxies from the environment (a proxy would resolve names out of sight).
pub fn agent_client(pins: &Pins, options: ClientOptions) -> Result<reqwest::Client, EgressError> {
    let builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(PinnedResolver(pins.clone())));
    build(builder, options)
}

/// A client for the runtime's own traffic to destinations its owner configured (model
/// providers, the daemon API client), not for agent egress: system resolver, reqwest's
/// redirect policy.
pub fn service_client(options: ClientOptions) -> Result<reqwest::Client, EgressError> {
    build(reqwest::Client::builder(), options)
}

fn build(
    mut builder: reqwest::ClientBuilder,
    options: ClientOptions,
) -> Result<reqwest::Client, EgressError> {
    ensure_crypto_provider();
    builder = builder.user_agent(USER_AGENT);
    if let Some(timeout) = options.timeout {
        builder = builder.timeout(timeout);
    }
    if let Some(timeout) = options.connect_timeout {
        builder = builder.connect_timeout(timeout);
    }
    if let Some(timeout) = options.read_timeout {
        builder = builder.read_timeout(timeout);
    }
    let failed = |detail: String| {
        EgressError::new(
            EgressErrorKind::Failed,
            format!("cannot build the HTTP client: {detail}"),
        )
    };
    match catch_unwind(AssertUnwindSafe(move || builder.build())) {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(error)) => Err(failed(error.to_string())),
        Err(payload) => Err(failed(crate::panic_message(payload.as_ref()))),
    }
}
