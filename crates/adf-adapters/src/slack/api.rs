//! Slack's Web API over HTTP (<https://api.slack.com/web>): `<api_root>/<method>` with the
//! token as `Authorization: Bearer …`, write methods with a JSON body, read methods as `GET`
//! with the arguments in the query string; every answer is `{"ok": true, …}` or `{"ok":
//! false, "error": "<code>"}`, and a rate-limited call is HTTP 429 with a `Retry-After`
//! header (seconds).
//!
//! Every request's URL is admitted by the agent's egress policy first and sent on an
//! `adf_egress::agent_client` pinned to the admitted addresses. A 429 waits the `Retry-After`
//! the platform asks for (through the host's [`Sleeper`]) and tries again, at most
//! [`MAX_RATE_LIMIT_ATTEMPTS`] times; the authentication error codes are the refused
//! credential, naming the purpose of the token that was sent.

use std::sync::Arc;
use std::time::Duration;

use adf_egress::{Pins, SystemLookup, Url};
use serde_json::Value;

use super::KIND;
use crate::Sleeper;
use crate::error::AdapterError;
use crate::sink::Secret;

/// Attempts of one call while the platform answers 429.
pub const MAX_RATE_LIMIT_ATTEMPTS: u32 = 4;

/// The longest `Retry-After` honoured; a longer one fails the call (the outbox row says so).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Time allowed for one call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The `error` codes Slack answers for a token it does not accept
/// (<https://api.slack.com/methods/auth.test>, "Errors").
const REFUSED_TOKEN_ERRORS: &[&str] = &[
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "not_allowed_token_type",
];

/// One of the adapter's two tokens, with the purpose it was read from.
pub(crate) struct Token {
    pub(crate) secret: Secret,
    pub(crate) purpose: &'static str,
}

/// How a method takes its arguments.
pub(crate) enum Args<'a> {
    /// `POST` with a JSON body (`chat.postMessage`), or none.
    Json(Option<&'a Value>),
    /// `GET` with the arguments in the query string (`conversations.info`).
    Query(&'a [(&'a str, String)]),
}

/// The adapter's connection to one Web API root.
pub(crate) struct WebApi {
    root: String,
    policy: adf_egress::Policy,
    pins: Pins,
    client: reqwest::Client,
    sleeper: Arc<dyn Sleeper>,
    file: String,
    /// Token texts to scrub from anything reported.
    secrets: Vec<String>,
}

impl WebApi {
    pub(crate) fn new(
        root: &str,
        policy: adf_egress::Policy,
        sleeper: Arc<dyn Sleeper>,
        file: String,
        tokens: &[&Token],
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
        .map_err(|e| AdapterError::Egress {
            adapter: KIND.into(),
            reason: e.to_string(),
        })?;
        Ok(WebApi {
            root: root.trim_end_matches('/').to_owned(),
            policy,
            pins,
            client,
            sleeper,
            file,
            secrets: tokens
                .iter()
                .map(|t| t.secret.expose().to_owned())
                .filter(|t| t.len() >= 4)
                .collect(),
        })
    }

    /// `text` without any token in it.
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.secrets.iter().fold(text.to_owned(), |text, secret| {
            text.replace(secret, "[token]")
        })
    }

    fn transport(&self, e: &reqwest::Error) -> AdapterError {
        let mut reason = if e.is_timeout() {
            "timed out".to_owned()
        } else if e.is_connect() {
            "could not connect".to_owned()
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
            adapter: KIND.into(),
            reason: self.scrub(&reason),
        }
    }

    async fn admit(&self, method: &str, url: &Url) -> Result<(), AdapterError> {
        self.policy
            .admit(method, url, &SystemLookup, &self.pins)
            .await
            .map(|_| ())
            .map_err(|e| AdapterError::Egress {
                adapter: KIND.into(),
                reason: self.scrub(&e.to_string()),
            })
    }

    /// The egress policy (the Socket Mode WebSocket is admitted through it too).
    pub(crate) fn policy(&self) -> &adf_egress::Policy {
        &self.policy
    }

    /// Calls `method` with `token`; `Ok` is the whole `{"ok": true, …}` answer.
    pub(crate) async fn call(
        &self,
        method: &str,
        token: &Token,
        args: Args<'_>,
    ) -> Result<Value, AdapterError> {
        let mut url =
            Url::parse(&format!("{}/{method}", self.root)).map_err(|e| AdapterError::Config {
                adapter: KIND.into(),
                message: format!("config.api_root '{}' does not make a URL: {e}", self.root),
            })?;
        if let Args::Query(pairs) = &args {
            let mut query = url.query_pairs_mut();
            for (name, value) in pairs.iter() {
                query.append_pair(name, value);
            }
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let http_method = match args {
                Args::Json(_) => "POST",
                Args::Query(_) => "GET",
            };
            self.admit(http_method, &url).await?;
            let request = match args {
                Args::Json(Some(body)) => self.client.post(url.clone()).json(body),
                Args::Json(None) => self.client.post(url.clone()),
                Args::Query(_) => self.client.get(url.clone()),
            };
            let response = request
                .bearer_auth(token.secret.expose())
                .timeout(CALL_TIMEOUT)
                .send()
                .await
                .map_err(|e| self.transport(&e))?;
            let status = response.status().as_u16();
            if status == 429 {
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(1);
                let delay = Duration::from_secs(retry_after);
                if attempt >= MAX_RATE_LIMIT_ATTEMPTS || delay > MAX_RETRY_AFTER {
                    return Err(AdapterError::RateLimited {
                        adapter: KIND.into(),
                        retry_after_secs: retry_after,
                        attempts: attempt,
                    });
                }
                tracing::info!(method, retry_after, "slack asked to retry later");
                self.sleeper.sleep(delay).await;
                continue;
            }
            let body = response.bytes().await.map_err(|e| self.transport(&e))?;
            let answer: Value =
                serde_json::from_slice(&body).map_err(|e| AdapterError::Platform {
                    adapter: KIND.into(),
                    status,
                    reason: format!(
                        "{method} answered HTTP {status} with a body that is not JSON: {e}"
                    ),
                })?;
            if answer.get("ok").and_then(Value::as_bool) == Some(true) {
                return Ok(answer);
            }
            let error = self.scrub(
                answer
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown_error"),
            );
            if REFUSED_TOKEN_ERRORS.contains(&error.as_str()) {
                return Err(AdapterError::CredentialRefused {
                    adapter: KIND.into(),
                    purpose: token.purpose.into(),
                    reason: format!("{method}: {error}"),
                    file: self.file.clone(),
                });
            }
            return Err(AdapterError::Platform {
                adapter: KIND.into(),
                status,
                reason: format!("{method}: {error}"),
            });
        }
    }

    /// Downloads a file's `url_private` with `token`, refusing more than `limit` bytes
    /// whatever the platform announced.
    pub(crate) async fn download(
        &self,
        url: &str,
        token: &Token,
        limit: u64,
    ) -> Result<Vec<u8>, AdapterError> {
        let url = Url::parse(url)
            .map_err(|e| AdapterError::Invalid(format!("a file URL that does not parse: {e}")))?;
        self.admit("GET", &url).await?;
        let mut response = self
            .client
            .get(url)
            .bearer_auth(token.secret.expose())
            .timeout(CALL_TIMEOUT * 4)
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(AdapterError::Platform {
                adapter: KIND.into(),
                status,
                reason: "the file download was refused".into(),
            });
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport(&e))? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > limit {
                return Err(AdapterError::Invalid(format!(
                    "the file is larger than limits.max_attachment_size ({limit} bytes)"
                )));
            }
        }
        Ok(bytes)
    }

    /// Opens the Socket Mode WebSocket at `url` (from `apps.connections.open`) after the
    /// egress policy admitted it.
    pub(crate) async fn connect_socket(
        &self,
        url: &str,
    ) -> Result<adf_egress::socket::WebSocket, AdapterError> {
        let url = Url::parse(url).map_err(|e| AdapterError::Transport {
            adapter: KIND.into(),
            reason: format!("apps.connections.open answered a URL that does not parse: {e}"),
        })?;
        let (socket, _addr) =
            adf_egress::connect_websocket(self.policy(), &url, &SystemLookup, CALL_TIMEOUT)
                .await
                .map_err(|e| {
                    let reason = self.scrub(&e.to_string());
                    if e.kind == adf_egress::EgressErrorKind::Failed {
                        AdapterError::Transport {
                            adapter: KIND.into(),
                            reason,
                        }
                    } else {
                        AdapterError::Egress {
                            adapter: KIND.into(),
                            reason,
                        }
                    }
                })?;
        Ok(socket)
    }
}
