//! The Bot API over HTTP (<https://core.telegram.org/bots/api#making-requests>): `POST
//! <api_root>/bot<token>/<method>` with a JSON body, answered `{ok, result}` or `{ok: false,
//! error_code, description, parameters?: {retry_after}}`.
//!
//! Every request's URL is admitted by the agent's egress policy first and sent on an
//! `adf_egress::agent_client` pinned to the admitted addresses. A 429 waits the
//! `retry_after` the platform asks for (through the host's [`Sleeper`]) and tries again, at most
//! [`MAX_RATE_LIMIT_ATTEMPTS`] times; a 401 is the refused credential. The token is part of the
//! URL, so transport errors are reported without their URL and any platform text is scrubbed.

use std::sync::Arc;
use std::time::Duration;

use adf_egress::{Pins, SystemLookup, Url};
use serde_json::Value;

use crate::Sleeper;
use crate::error::AdapterError;
use crate::sink::Secret;

/// Attempts of one call while the platform answers 429.
pub const MAX_RATE_LIMIT_ATTEMPTS: u32 = 4;

/// The longest `retry_after` honoured; a longer one fails the call (the outbox row says so).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Time allowed for a call other than a long poll.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// One bot's connection to a Bot API server.
pub(crate) struct BotApi {
    root: String,
    token: Secret,
    policy: adf_egress::Policy,
    pins: Pins,
    client: reqwest::Client,
    sleeper: Arc<dyn Sleeper>,
    file: String,
}

impl BotApi {
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
            adapter: super::KIND.into(),
            reason: e.to_string(),
        })?;
        Ok(BotApi {
            root: root.trim_end_matches('/').to_owned(),
            token,
            policy,
            pins,
            client,
            sleeper,
            file,
        })
    }

    fn scrub(&self, text: &str) -> String {
        let token = self.token.expose();
        if token.len() >= 4 {
            text.replace(token, "[token]")
        } else {
            text.to_owned()
        }
    }

    fn transport(&self, e: &reqwest::Error) -> AdapterError {
        // Without the URL: it holds the token.
        let reason = match e.source_chain_text() {
            text if text.is_empty() => "the request failed".to_owned(),
            text => text,
        };
        AdapterError::Transport {
            adapter: super::KIND.into(),
            reason: self.scrub(&reason),
        }
    }

    /// Downloads `file_path` (from `getFile`) from `<api_root>/file/bot<token>/`, refusing
    /// more than `limit` bytes whatever the platform announced.
    pub(crate) async fn download(
        &self,
        file_path: &str,
        limit: u64,
    ) -> Result<Vec<u8>, AdapterError> {
        let url = Url::parse(&format!(
            "{}/file/bot{}/{file_path}",
            self.root,
            self.token.expose()
        ))
        .map_err(|e| AdapterError::Invalid(format!("file path '{file_path}': {e}")))?;
        self.policy
            .admit("GET", &url, &SystemLookup, &self.pins)
            .await
            .map_err(|e| AdapterError::Egress {
                adapter: super::KIND.into(),
                reason: self.scrub(&e.to_string()),
            })?;
        let mut response = self
            .client
            .get(url)
            .timeout(CALL_TIMEOUT * 4)
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(AdapterError::Platform {
                adapter: super::KIND.into(),
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

    /// Calls `method` with `params`; `wait` extends the timeout for a long poll.
    pub(crate) async fn call(
        &self,
        method: &str,
        params: &Value,
        wait: Duration,
    ) -> Result<Value, AdapterError> {
        let url = Url::parse(&format!(
            "{}/bot{}/{method}",
            self.root,
            self.token.expose()
        ))
        .map_err(|e| AdapterError::Config {
            adapter: super::KIND.into(),
            message: format!("config.api_root '{}' does not make a URL: {e}", self.root),
        })?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.policy
                .admit("POST", &url, &SystemLookup, &self.pins)
                .await
                .map_err(|e| AdapterError::Egress {
                    adapter: super::KIND.into(),
                    reason: self.scrub(&e.to_string()),
                })?;
            let response = self
                .client
                .post(url.clone())
                .json(params)
                .timeout(CALL_TIMEOUT + wait)
                .send()
                .await
                .map_err(|e| self.transport(&e))?;
            let status = response.status().as_u16();
            let body = response.bytes().await.map_err(|e| self.transport(&e))?;
            let answer: Value =
                serde_json::from_slice(&body).map_err(|e| AdapterError::Transport {
                    adapter: super::KIND.into(),
                    reason: format!(
                        "the Bot API answered {status} with a body that is not JSON: {e}"
                    ),
                })?;
            if answer.get("ok").and_then(Value::as_bool) == Some(true) {
                return Ok(answer.get("result").cloned().unwrap_or(Value::Null));
            }
            let code = answer
                .get("error_code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(status);
            let description = self.scrub(
                answer
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or("no description"),
            );
            match code {
                401 => {
                    return Err(AdapterError::CredentialRefused {
                        adapter: super::KIND.into(),
                        purpose: super::CREDENTIAL_PURPOSE.into(),
                        reason: format!("401 {description}"),
                        file: self.file.clone(),
                    });
                }
                429 => {
                    let retry_after = answer
                        .pointer("/parameters/retry_after")
                        .and_then(Value::as_u64)
                        .unwrap_or(1);
                    let delay = Duration::from_secs(retry_after);
                    if attempt >= MAX_RATE_LIMIT_ATTEMPTS || delay > MAX_RETRY_AFTER {
                        return Err(AdapterError::RateLimited {
                            adapter: super::KIND.into(),
                            retry_after_secs: retry_after,
                            attempts: attempt,
                        });
                    }
                    tracing::info!(method, retry_after, "telegram asked to retry later");
                    self.sleeper.sleep(delay).await;
                }
                _ => {
                    return Err(AdapterError::Platform {
                        adapter: super::KIND.into(),
                        status: code,
                        reason: description,
                    });
                }
            }
        }
    }
}

/// The text of an error and its sources, without reqwest's URL.
trait SourceChainText {
    fn source_chain_text(&self) -> String;
}

impl SourceChainText for reqwest::Error {
    fn source_chain_text(&self) -> String {
        let mut parts = Vec::new();
        let mut kind = if self.is_timeout() {
            "timed out".to_owned()
        } else if self.is_connect() {
            "could not connect".to_owned()
        } else if self.is_body() || self.is_decode() {
            "the connection dropped while reading the answer".to_owned()
        } else {
            "the request failed".to_owned()
        };
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            parts.push(cause.to_string());
            source = cause.source();
        }
        if !parts.is_empty() {
            kind.push_str(": ");
            kind.push_str(&parts.join(": "));
        }
        kind
    }
}
