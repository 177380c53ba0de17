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
/// providers, the daemon API client), not for agent egress: system resolver, and redirects
/// followed (up to 10) except a hop to another origin that reaches a runtime control API on
/// this machine (§5.6 rule 2): a model server (whose URL an agent's config names) must not
/// bounce a request into a daemon. Callers check the first URL themselves.
pub fn service_client(options: ClientOptions) -> Result<reqwest::Client, EgressError> {
    build(
        reqwest::Client::builder().redirect(guarded_redirects()),
        options,
    )
}

fn guarded_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        if attempt.previous().len() > 10 {
            return attempt.error("too many redirects (more than 10)");
        }
        let same_origin = attempt.previous().last().is_some_and(|previous| {
            previous.scheme() == attempt.url().scheme()
                && previous.host_str() == attempt.url().host_str()
                && previous.port_or_known_default() == attempt.url().port_or_known_default()
        });
        match (same_origin, redirect_to_control_api(attempt.url())) {
            (false, Some(reason)) => attempt.error(reason),
            _ => attempt.follow(),
        }
    })
}

/// Why a redirect hop to `url` is refused: one of the addresses its host resolves to (the
/// system resolver, blocking: redirects are rare on these connections) reaches a known
/// control API.
fn redirect_to_control_api(url: &reqwest::Url) -> Option<String> {
    let apis = crate::control::known(&[]);
    if apis.is_empty() {
        return None;
    }
    let host = url.host_str()?;
    let port = url.port_or_known_default()?;
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .ok();
    let ips: Vec<std::net::IpAddr> = match literal {
        Some(ip) => vec![ip],
        None => std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
            .map(|addrs| addrs.map(|a| a.ip()).collect())
            .unwrap_or_default(),
    };
    ips.into_iter()
        .find(|ip| crate::control::reaches(&apis, *ip, port))
        .map(|ip| {
            format!(
                "the redirect to {url} reaches {ip}:{port}, a runtime control API on this machine, which is never followed (§5.6 rule 2)"
            )
        })
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
