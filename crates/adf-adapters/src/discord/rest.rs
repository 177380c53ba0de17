//! Discord's HTTP API (<https://discord.com/developers/docs/reference>): `<api_root>/<route>`
//! with `Authorization: Bot <token>` and a `DiscordBot (url, version)` user agent; JSON bodies;
//! errors as `{code, message}`; rate limits as 429 with `retry_after` (seconds, a float) in the
//! body and `Retry-After` / `X-RateLimit-Reset-After` headers.
//!
//! Every request's URL is admitted by the agent's egress policy first and sent on an
//! `adf_egress::agent_client` pinned to the admitted addresses. A 429 waits what the platform
//! asks for (through the host's [`Sleeper`]) and tries again, at most
//! [`MAX_RATE_LIMIT_ATTEMPTS`] times; a 401 is the refused credential. The token travels in a
//! header only; platform text is scrubbed of it all the same.

use std::sync::Arc;
use std::time::Duration;

use adf_egress::{Pins, SystemLookup, Url};
use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::Sleeper;
use crate::error::AdapterError;
use crate::sink::Secret;

/// Attempts of one call while the platform answers 429.
pub const MAX_RATE_LIMIT_ATTEMPTS: u32 = 4;

/// The longest wait honoured for one 429; a longer one fails the call (the outbox row says so).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
const USER_AGENT: &str = concat!(
    "DiscordBot (https://github.com/adf-runtime, ",
    env!("CARGO_PKG_VERSION"),
    ")"
);

/// One bot's connection to Discord's HTTP API.
pub(crate) struct RestApi {
    root: String,
    token: Secret,
    policy: adf_egress::Policy,
    pins: Pins,
    client: reqwest::Client,
    sleeper: Arc<dyn Sleeper>,
    file: String,
}

fn kind() -> String {
    super::KIND.to_owned()
}

impl RestApi {
    pub(crate) fn new(
        root: &str,
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
        .map_err(|e| AdapterError::Egress {
            adapter: kind(),
            reason: e.to_string(),
        })?;
        Ok(RestApi {
            root: root.trim_end_matches('/').to_owned(),
            token,
            policy,
            pins,
            client,
            sleeper,
            file,
        })
    }

    /// The bot token, for the Gateway's IDENTIFY and RESUME.
    pub(crate) fn token(&self) -> &Secret {
        &self.token
    }

    /// The agent's egress policy (the Gateway connection is admitted by it too).
    pub(crate) fn policy(&self) -> &adf_egress::Policy {
        &self.policy
    }

    pub(crate) fn scrub(&self, text: &str) -> String {
        let token = self.token.expose();
        if token.len() >= 4 {
            text.replace(token, "[token]")
        } else {
            text.to_owned()
        }
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
            adapter: kind(),
            reason: self.scrub(&reason),
        }
    }

    async fn admit(&self, method: &str, url: &Url) -> Result<(), AdapterError> {
        self.policy
            .admit(method, url, &SystemLookup, &self.pins)
            .await
            .map(|_| ())
            .map_err(|e| AdapterError::Egress {
                adapter: kind(),
                reason: self.scrub(&e.to_string()),
            })
    }

    /// `GET <route>`.
    pub(crate) async fn get(&self, route: &str) -> Result<Value, AdapterError> {
        self.call(Method::GET, route, None).await
    }

    /// `POST <route>` with a JSON body.
    pub(crate) async fn post(&self, route: &str, body: &Value) -> Result<Value, AdapterError> {
        self.call(Method::POST, route, Some(body)).await
    }

    async fn call(
        &self,
        method: Method,
        route: &str,
        body: Option<&Value>,
    ) -> Result<Value, AdapterError> {
        let url =
            Url::parse(&format!("{}{route}", self.root)).map_err(|e| AdapterError::Config {
                adapter: kind(),
                message: format!("config.api_root '{}' does not make a URL: {e}", self.root),
            })?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.admit(method.as_str(), &url).await?;
            let mut request = self
                .client
                .request(method.clone(), url.clone())
                .header("Authorization", format!("Bot {}", self.token.expose()))
                .header("User-Agent", USER_AGENT)
                .timeout(CALL_TIMEOUT);
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request.send().await.map_err(|e| self.transport(&e))?;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let bytes = response.bytes().await.map_err(|e| self.transport(&e))?;
            // 204 No Content (an interaction callback) has no body.
            let answer: Value = if bytes.is_empty() {
                Value::Null
            } else {
                match serde_json::from_slice(&bytes) {
                    Ok(value) => value,
                    Err(_) if (200..300).contains(&status) => Value::Null,
                    Err(_) => Value::String(String::from_utf8_lossy(&bytes).into_owned()),
                }
            };
            if (200..300).contains(&status) {
                return Ok(answer);
            }
            let message = self.scrub(&error_message(&answer));
            match status {
                401 => {
                    return Err(AdapterError::CredentialRefused {
                        adapter: kind(),
                        purpose: super::CREDENTIAL_PURPOSE.into(),
                        // Discord's own text already reads "401: Unauthorized".
                        reason: if message.starts_with("401") {
                            message
                        } else {
                            format!("401 {message}")
                        },
                        file: self.file.clone(),
                    });
                }
                429 => {
                    let delay = retry_after(&answer, &headers);
                    if attempt >= MAX_RATE_LIMIT_ATTEMPTS || delay > MAX_RETRY_AFTER {
                        return Err(AdapterError::RateLimited {
                            adapter: kind(),
                            retry_after_secs: delay.as_secs_f64().ceil() as u64,
                            attempts: attempt,
                        });
                    }
                    tracing::info!(route, ?delay, "discord asked to retry later");
                    self.sleeper.sleep(delay).await;
                }
                _ => {
                    return Err(AdapterError::Platform {
                        adapter: kind(),
                        status,
                        reason: message,
                    });
                }
            }
        }
    }

    /// Downloads an attachment from its CDN `url` (no credential sent: the CDN needs none),
    /// refusing more than `limit` bytes whatever the platform announced.
    pub(crate) async fn download(&self, url: &str, limit: u64) -> Result<Vec<u8>, AdapterError> {
        let url = Url::parse(url)
            .map_err(|e| AdapterError::Invalid(format!("attachment URL '{url}': {e}")))?;
        self.admit("GET", &url).await?;
        let mut response = self
            .client
            .get(url)
            .header("User-Agent", USER_AGENT)
            .timeout(CALL_TIMEOUT * 4)
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(AdapterError::Platform {
                adapter: kind(),
                status,
                reason: "the attachment download was refused".into(),
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
}

/// Discord's error text: `message`, with the JSON error `code` when there is one.
fn error_message(answer: &Value) -> String {
    let message = answer
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| answer.as_str())
        .unwrap_or("no message");
    match answer.get("code").and_then(Value::as_u64) {
        Some(code) if code != 0 => format!("{message} (code {code})"),
        _ => message.to_owned(),
    }
}

/// How long a 429 asks to wait: the body's `retry_after` (seconds, fractional), else the
/// `X-RateLimit-Reset-After` header, else `Retry-After`, else one second.
pub(crate) fn retry_after(answer: &Value, headers: &HeaderMap) -> Duration {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let seconds = answer
        .get("retry_after")
        .and_then(Value::as_f64)
        .or_else(|| header("x-ratelimit-reset-after"))
        .or_else(|| header("retry-after"))
        .unwrap_or(1.0);
    // A negative, NaN or absurd value must not panic the conversion; past the cap it fails
    // the call anyway.
    Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or(MAX_RETRY_AFTER * 2)
}
