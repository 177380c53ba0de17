//! The Graph API over HTTP (WhatsApp Business Cloud API): `GET`/`POST
//! <api_root>/<api_version>/<path>` with `Authorization: Bearer <access token>` and JSON
//! bodies; an error is answered `{error: {message, type, code, error_subcode?, error_data?:
//! {details}}}`.
//!
//! Every request's URL is admitted by the agent's egress policy first and sent on an
//! `adf_egress::agent_client` pinned to the admitted addresses. A refused token (HTTP 401 or
//! Graph error code 190) is the refused credential. A rate limit (HTTP 429, or one of
//! [`RATE_LIMIT_CODES`]) waits through the host's [`Sleeper`] — the `Retry-After` the answer
//! names, else 1 s, 2 s, 4 s — and tries again, at most [`MAX_RATE_LIMIT_ATTEMPTS`] times. Any
//! other error is the platform's, with its code and message.

use std::sync::Arc;
use std::time::Duration;

use adf_egress::{Pins, SystemLookup, Url};
use serde_json::Value;

use crate::Sleeper;
use crate::error::AdapterError;
use crate::sink::Secret;

/// Attempts of one call while the platform answers with a rate limit.
pub const MAX_RATE_LIMIT_ATTEMPTS: u32 = 4;

/// The longest `Retry-After` honoured; a longer one fails the call (the outbox row says so).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Graph error codes that mean "too many requests, try later": 4 (application request
/// limit), 80007 (business account rate limit), 130429 (Cloud API throughput), 131048 (spam
/// rate limit), 131056 (business/consumer pair rate limit), 133016 (registration rate limit).
pub const RATE_LIMIT_CODES: &[u64] = &[4, 80007, 130_429, 131_048, 131_056, 133_016];

/// The Graph error code of an invalid or expired access token.
const TOKEN_REFUSED_CODE: u64 = 190;

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// One business phone number's connection to a Graph API server.
pub(crate) struct GraphApi {
    root: String,
    version: String,
    token: Secret,
    policy: adf_egress::Policy,
    pins: Pins,
    client: reqwest::Client,
    sleeper: Arc<dyn Sleeper>,
    file: String,
}

fn egress_error(e: &impl std::fmt::Display) -> AdapterError {
    AdapterError::Egress {
        adapter: super::KIND.into(),
        reason: e.to_string(),
    }
}

/// A transport failure in words, without reqwest's URL.
fn transport(e: &reqwest::Error) -> AdapterError {
    let mut reason = if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connect() {
        "could not connect".to_owned()
    } else if e.is_body() || e.is_decode() {
        "the connection dropped while reading the answer".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        reason.push_str(": ");
        reason.push_str(&cause.to_string());
        source = cause.source();
    }
    AdapterError::Transport {
        adapter: super::KIND.into(),
        reason,
    }
}

impl GraphApi {
    pub(crate) fn new(
        root: &str,
        version: &str,
        token: Secret,
        policy: adf_egress::Policy,
        sleeper: Arc<dyn Sleeper>,
        file: String,
    ) -> Result<Self, AdapterError> {
        let pins = Pins::default();
        let client = adf_egress::agent_client(
            &pins,
            adf_egress::ClientOptions {
                timeout: None,
                connect_timeout: Some(CONNECT_TIMEOUT),
                read_timeout: None,
            },
        )
        .map_err(|e| egress_error(&e))?;
        Ok(GraphApi {
            root: root.trim_end_matches('/').to_owned(),
            version: version.to_owned(),
            token,
            policy,
            pins,
            client,
            sleeper,
            file,
        })
    }

    fn url(&self, path: &str) -> Result<Url, AdapterError> {
        Url::parse(&format!("{}/{}/{path}", self.root, self.version)).map_err(|e| {
            AdapterError::Config {
                adapter: super::KIND.into(),
                message: format!("config.api_root '{}' does not make a URL: {e}", self.root),
            }
        })
    }

    /// `GET <root>/<version>/<path>`.
    pub(crate) async fn get(&self, path: &str) -> Result<Value, AdapterError> {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// `POST <root>/<version>/<path>` with a JSON body.
    pub(crate) async fn post(&self, path: &str, body: &Value) -> Result<Value, AdapterError> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, AdapterError> {
        let url = self.url(path)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.policy
                .admit(method.as_str(), &url, &SystemLookup, &self.pins)
                .await
                .map_err(|e| egress_error(&e))?;
            let mut request = self
                .client
                .request(method.clone(), url.clone())
                .bearer_auth(self.token.expose())
                .timeout(CALL_TIMEOUT);
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request.send().await.map_err(|e| transport(&e))?;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let bytes = response.bytes().await.map_err(|e| transport(&e))?;
            let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if (200..300).contains(&status) {
                return Ok(answer);
            }
            let error = answer.get("error").cloned().unwrap_or(Value::Null);
            let code = error.get("code").and_then(Value::as_u64);
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            let details = error
                .pointer("/error_data/details")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty() && !message.contains(*d));
            let reason = match (code, details) {
                (Some(code), Some(details)) => format!("(#{code}) {message}: {details}"),
                (Some(code), None) if !message.starts_with('(') => {
                    format!("(#{code}) {message}")
                }
                _ => message.to_owned(),
            };
            if status == 401 || code == Some(TOKEN_REFUSED_CODE) {
                return Err(AdapterError::CredentialRefused {
                    adapter: super::KIND.into(),
                    purpose: super::ACCESS_TOKEN_PURPOSE.into(),
                    reason: format!("{status} {reason}"),
                    file: self.file.clone(),
                });
            }
            let rate_limited = status == 429 || code.is_some_and(|c| RATE_LIMIT_CODES.contains(&c));
            if !rate_limited {
                return Err(AdapterError::Platform {
                    adapter: super::KIND.into(),
                    status,
                    reason,
                });
            }
            // The Cloud API rarely names a wait: back off 1 s, 2 s, 4 s unless it does.
            let wait_secs = retry_after.unwrap_or(1 << (attempt - 1).min(8));
            let delay = Duration::from_secs(wait_secs);
            if attempt >= MAX_RATE_LIMIT_ATTEMPTS || delay > MAX_RETRY_AFTER {
                return Err(AdapterError::RateLimited {
                    adapter: super::KIND.into(),
                    retry_after_secs: wait_secs,
                    attempts: attempt,
                });
            }
            tracing::info!(
                adapter = super::KIND,
                path,
                wait_secs,
                reason,
                "rate limited; waiting"
            );
            self.sleeper.sleep(delay).await;
        }
    }

    /// Downloads a media `url` (from `GET /<media id>`) with the token; `None` once more than
    /// `limit` bytes arrive, whatever the platform announced.
    pub(crate) async fn download(
        &self,
        url: &str,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, AdapterError> {
        let url = Url::parse(url)
            .map_err(|e| AdapterError::Invalid(format!("the media URL does not parse: {e}")))?;
        self.policy
            .admit("GET", &url, &SystemLookup, &self.pins)
            .await
            .map_err(|e| egress_error(&e))?;
        let mut response = self
            .client
            .get(url)
            .bearer_auth(self.token.expose())
            .timeout(DOWNLOAD_TIMEOUT)
            .send()
            .await
            .map_err(|e| transport(&e))?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(AdapterError::Platform {
                adapter: super::KIND.into(),
                status,
                reason: "the media download was refused".into(),
            });
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| transport(&e))? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > limit {
                return Ok(None);
            }
        }
        Ok(Some(bytes))
    }
}
