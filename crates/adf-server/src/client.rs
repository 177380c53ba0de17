//! A small client of the daemon API, used by the `adf` client commands and by tests.
//!
//! Unlike the reference CLI, it sends `Authorization: Bearer <token>`: the daemon requires one
//! on every bind. [`token_for`] picks it the way the `adf` client commands do
//! (`ADF_DAEMON_TOKEN`, else `$ADF_HOME/daemon-token` for a daemon on this machine).

use futures::{Stream, StreamExt};
use reqwest::Method;
use serde_json::Value;

use eventsource_stream::Eventsource;

/// What a client call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The daemon answered with an error status; `message` is its `error` field or
    /// `HTTP <status> <reason>` as the reference CLI prints.
    #[error("{message}")]
    Http {
        /// The HTTP status code the daemon answered with (4xx or 5xx).
        status: u16,
        /// What to show the user.
        message: String,
    },
    /// The request or the event stream failed at the transport level (connection refused,
    /// reset, timeout): no HTTP answer was read.
    #[error("cannot reach the daemon at {url}: {detail}")]
    Network {
        /// The daemon's base URL the client was built with.
        url: String,
        /// The transport error's text.
        detail: String,
    },
    /// The client could not be set up (the HTTP client failed to build); no request was sent.
    #[error("{0}")]
    Other(String),
}

/// One daemon at a base URL.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// `base` like `http://127.0.0.1:7385`; a trailing `/` is dropped.
    pub fn new(base: &str, token: Option<String>) -> Result<Self, ClientError> {
        let http = adf_egress::service_client(adf_egress::ClientOptions::default())
            .map_err(|e| ClientError::Other(e.to_string()))?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token: token.filter(|t| !t.is_empty()),
            http,
        })
    }

    /// The base URL every request path is appended to, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn builder(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        request
    }

    fn network(&self, error: &reqwest::Error) -> ClientError {
        ClientError::Network {
            url: self.base.clone(),
            detail: error.to_string(),
        }
    }

    /// Sends a request and returns the status and JSON body (`null` for an empty body),
    /// whatever the status.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), ClientError> {
        let mut request = self.builder(method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| self.network(&e))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| self.network(&e))?;
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Ok((status.as_u16(), value))
    }

    /// Sends a request; an error status becomes [`ClientError::Http`].
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let (status, value) = self.raw(method, path, body).await?;
        if (200..300).contains(&status) {
            return Ok(value);
        }
        let message = value
            .get("error")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| {
                let reason = reqwest::StatusCode::from_u16(status)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("");
                format!("HTTP {status} {reason}")
            });
        Err(ClientError::Http { status, message })
    }

    /// `GET path`; an error status becomes [`ClientError::Http`].
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.call(Method::GET, path, None).await
    }

    /// `POST path` with `body` as JSON when given; an error status becomes [`ClientError::Http`].
    pub async fn post(&self, path: &str, body: Option<&Value>) -> Result<Value, ClientError> {
        self.call(Method::POST, path, body).await
    }

    /// `DELETE path`; an error status becomes [`ClientError::Http`].
    pub async fn delete(&self, path: &str) -> Result<Value, ClientError> {
        self.call(Method::DELETE, path, None).await
    }

    /// The `data` of each SSE frame of `GET path` (comments and heartbeats skipped).
    pub async fn events(
        &self,
        path: &str,
    ) -> Result<impl Stream<Item = Result<String, ClientError>> + use<>, ClientError> {
        let response = self
            .builder(Method::GET, path)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| self.network(&e))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let body: Value = response.json().await.unwrap_or(Value::Null);
            let message = body
                .get("error")
                .and_then(Value::as_str)
                .map_or_else(|| format!("HTTP {status}"), str::to_owned);
            return Err(ClientError::Http { status, message });
        }
        let base = self.base.clone();
        Ok(response.bytes_stream().eventsource().map(move |item| {
            item.map(|event| event.data)
                .map_err(|e| ClientError::Network {
                    url: base.clone(),
                    detail: e.to_string(),
                })
        }))
    }
}

/// Percent-encodes one path segment or query value.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The token a client sends to the daemon at `base`: `from_env` (`ADF_DAEMON_TOKEN`) when set;
/// else, when `base` is a loopback URL, the token file of `home` (the daemon of this machine
/// and home wrote it). The file's token never goes to another machine's daemon.
pub fn token_for(
    base: &str,
    home: Option<&adf_runtime::home::RuntimeHome>,
    from_env: Option<String>,
) -> Option<String> {
    if let Some(token) = from_env.filter(|t| !t.trim().is_empty()) {
        return Some(token);
    }
    let host = reqwest::Url::parse(base).ok()?.host_str()?.to_owned();
    if !crate::serve::is_loopback(&host) {
        return None;
    }
    crate::token::client_token(home?, None)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use adf_runtime::home::RuntimeHome;

    #[test]
    fn the_home_token_goes_to_loopback_daemons_only() {
        let dir = tempfile::tempdir().unwrap();
        let home = RuntimeHome::at(dir.path());
        let token = crate::token::daemon_token(&home, None).unwrap();
        for base in [
            "http://127.0.0.1:7385",
            "http://localhost:7385/",
            "http://[::1]:7385",
        ] {
            assert_eq!(
                token_for(base, Some(&home), None).as_deref(),
                Some(token.as_str()),
                "{base}"
            );
        }
        assert_eq!(
            token_for("http://192.168.1.9:7385", Some(&home), None),
            None
        );
        assert_eq!(
            token_for("http://evil.example:7385", Some(&home), None),
            None
        );
        assert_eq!(
            token_for("http://192.168.1.9:7385", Some(&home), Some("env".into())).as_deref(),
            Some("env")
        );
    }
}
