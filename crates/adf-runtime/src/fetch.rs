//! The HTTP fetch engine behind `sys_fetch` and the sandbox's native `fetch` (tools guide
//! "HTTP Fetch Tool", spec §5.6 and §9, missing-tables §5.6 and \[C28\]).
//!
//! One request is [`fetch`]: http/https only, redirects followed by hand (at most
//! [`MAX_REDIRECTS`]), and before **every** hop connects, the egress policy of `adf-egress`
//! decides it ([`adf_egress::Policy::admit`]: the host resolved, each address checked against
//! the ordered §5.6 rules, rule 2 with the control APIs of this process and of the daemons
//! recorded in the runtime home). The connection then uses exactly the admitted addresses: the
//! request's client ([`adf_egress::agent_client`]) resolves only names the policy pinned, and
//! ignores proxies from the environment.
//!
//! Choices where the guide is open, documented here: the whole request (every hop and the
//! body) shares one deadline (default [`DEFAULT_TIMEOUT_MS`]; `sys_fetch`'s schema refuses more
//! than [`MAX_TIMEOUT_MS`] with `INVALID_INPUT` rather than silently clamping); a body over the
//! cap fails the call (`TOOL_ERROR` naming the cap) rather than arriving truncated; a name that
//! resolves to several addresses is refused when any one of them is refused; a 301/302 POST
//! and any 303 become a GET without body (as browsers do) and a cross-origin hop drops the
//! `Authorization`, `Cookie` and `Proxy-Authorization` headers. `security.fetch_middleware`
//! runs in the `sys_fetch` tool before this engine; a fetch that did not pass it (native
//! `fetch`) is refused while one is configured (never a silent skip).
//!
//! Failures are [`FetchError`]s: a [`ToolError`] for the caller and one `adf_logs` row (origin
//! `sys_fetch`, event `rejected`, `error` or `timeout`) for the caller to write once it holds
//! the file again. Log rows name the URL without its query or credentials.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use adf_egress::{EgressError, EgressErrorKind, Pins};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use reqwest::{Method, Url};
use serde_json::{Map, Value, json};

use crate::tools::{DetachedOutcome, ErrorCode, LogRow, ToolError};

/// `timeout_ms` when the caller gives none.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// The largest `timeout_ms` `sys_fetch` accepts.
pub const MAX_TIMEOUT_MS: u64 = 60_000;
/// Response bodies are capped at 25 MB (tools guide).
pub const MAX_BODY_BYTES: usize = 25 * 1024 * 1024;
/// Redirects followed at most (\[C28\]).
pub const MAX_REDIRECTS: usize = 5;
/// The `adf_logs` origin of every fetch row (missing-tables §13.5).
pub const LOG_ORIGIN: &str = "sys_fetch";

pub use adf_egress::control::protect_control_api;
pub use adf_egress::{Lookup, SystemLookup};

/// What a fetch may do beyond the agent's config: the body cap and the resolver. The defaults
/// are the guide's; tests lower the cap or inject names.
#[derive(Clone)]
pub struct FetchSettings {
    /// Largest response body read, in bytes; a longer body fails the fetch.
    pub max_body_bytes: usize,
    /// The DNS resolver whose answers the egress policy checks before connecting.
    pub lookup: Arc<dyn Lookup>,
}

impl Default for FetchSettings {
    fn default() -> Self {
        FetchSettings {
            max_body_bytes: MAX_BODY_BYTES,
            lookup: Arc::new(SystemLookup),
        }
    }
}

impl std::fmt::Debug for FetchSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchSettings")
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

/// The egress policy of one agent: the §5.6 flag and rule 3's origins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// `security.allow_local_fetch`.
    pub allow_local: bool,
    /// Rule 3: URL prefixes (scheme, host, port and path) the agent itself serves. Empty until
    /// the runtime serves agents.
    pub served_origins: Vec<String>,
}

impl Policy {
    /// The policy of an agent config. A configured `security.fetch_middleware` refuses the
    /// fetch: only `sys_fetch` runs the chain (and hands this a config without it), and
    /// skipping it would bypass the owner's egress rules.
    pub fn from_config(config: &Value) -> Result<Policy, FetchError> {
        let middleware = config.pointer("/security/fetch_middleware");
        let configured = match middleware {
            None | Some(Value::Null) => false,
            Some(Value::Array(refs)) => !refs.is_empty(),
            Some(_) => true,
        };
        if configured {
            return Err(FetchError::new(
                FetchErrorKind::Rejected,
                "security.fetch_middleware is configured and native fetch does not run it; use adf.sys_fetch, which does (the request is refused rather than sent without it)",
            ));
        }
        Ok(Policy {
            allow_local: config
                .pointer("/security/allow_local_fetch")
                .and_then(Value::as_bool)
                == Some(true),
            served_origins: Vec::new(),
        })
    }

    /// The `adf-egress` policy of this agent, with rule 2's control APIs of the daemons
    /// recorded in the runtime home (read now, so a daemon started since is covered).
    pub fn egress(&self) -> adf_egress::Policy {
        adf_egress::Policy {
            allow_local: self.allow_local,
            served_origins: self.served_origins.clone(),
            control_apis: recorded_control_apis(None),
        }
    }
}

/// The control APIs daemons on this machine recorded in `home` (`$ADF_HOME` when `None`).
/// Unreadable records are reported and skipped: the in-process registry still holds.
pub fn recorded_control_apis(home: Option<&crate::home::RuntimeHome>) -> Vec<SocketAddr> {
    let home = match home {
        Some(home) => home.clone(),
        None => match crate::home::RuntimeHome::from_env() {
            Ok(home) => home,
            Err(_) => return Vec::new(),
        },
    };
    adf_egress::control::recorded(&home.daemon_record_path())
}

/// One request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// The absolute `http` or `https` URL to fetch.
    pub url: String,
    /// The HTTP method, e.g. `GET` or `POST`.
    pub method: String,
    /// Header names and values in the caller's order.
    pub headers: Vec<(String, String)>,
    /// The request body, if any.
    pub body: Option<Vec<u8>>,
    /// Deadline for the whole fetch, redirects and body included.
    pub timeout: Duration,
}

impl FetchRequest {
    /// A GET of `url` with the default timeout.
    pub fn get(url: impl Into<String>) -> Self {
        FetchRequest {
            url: url.into(),
            method: "GET".into(),
            headers: Vec::new(),
            body: None,
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
        }
    }
}

/// A response read to the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    /// The HTTP status code of the last hop.
    pub status: u16,
    /// The reason phrase for `status`, e.g. `Not Found`.
    pub status_text: String,
    /// Lower-case names; repeated headers joined with `", "`.
    pub headers: Vec<(String, String)>,
    /// The whole body, at most `max_body_bytes`.
    pub body: Vec<u8>,
    /// The URL of the last hop.
    pub url: String,
}

impl FetchResponse {
    /// The `Content-Type` header, if any.
    pub fn content_type(&self) -> Option<&str> {
        self.headers
            .iter()
            .find(|(name, _)| name == "content-type")
            .map(|(_, value)| value.as_str())
    }

    /// Whether the body is text by the guide's rule (see [`is_text_content_type`]).
    pub fn is_text(&self) -> bool {
        self.content_type().is_none_or(is_text_content_type)
    }

    /// The headers as a JSON object.
    pub fn headers_json(&self) -> Value {
        Value::Object(
            self.headers
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect::<Map<_, _>>(),
        )
    }

    /// The `sys_fetch` result: `{status, status_text, ok, headers, body, url}`. A text body is
    /// a string (UTF-8, invalid sequences replaced); a binary body is bytes for code (a
    /// `Uint8Array` on the other side of the bridge) and base64 with `_body_encoding:
    /// "base64"` for everyone else.
    pub fn tool_value(&self, for_code: bool) -> Value {
        let mut out = json!({
            "status": self.status,
            "status_text": self.status_text,
            "ok": (200..300).contains(&self.status),
            "headers": self.headers_json(),
            "url": self.url,
        });
        let (body, encoding) = if self.is_text() {
            (
                Value::String(String::from_utf8_lossy(&self.body).into_owned()),
                None,
            )
        } else if for_code {
            (adf_sandbox::bytes_value(&self.body), None)
        } else {
            (Value::String(STANDARD.encode(&self.body)), Some("base64"))
        };
        if let Some(object) = out.as_object_mut() {
            object.insert("body".into(), body);
            if let Some(encoding) = encoding {
                object.insert("_body_encoding".into(), Value::String(encoding.into()));
            }
        }
        out
    }
}

/// Text by the tools guide: `text/*`, `application/json`, `application/xml`, `*+json`,
/// `*+xml`; parameters (`; charset=…`) and case do not matter. Everything else is binary.
pub fn is_text_content_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind == "text"
        || (kind == "application" && matches!(subtype, "json" | "xml"))
        || subtype.ends_with("+json")
        || subtype.ends_with("+xml")
}

/// How a fetch failed; decides the error code and the log event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchErrorKind {
    /// The request itself is malformed (scheme, URL, method, header): `INVALID_INPUT`, logged
    /// `rejected`.
    Invalid,
    /// The egress policy refused it (§5.6 rules, fetch middleware): `TOOL_ERROR`, logged
    /// `rejected`.
    Rejected,
    /// Network, DNS, TLS, redirect limit or body cap: `TOOL_ERROR`, logged `error`.
    Failed,
    /// The deadline passed: `TIMEOUT`, logged `timeout`.
    Timeout,
}

/// A failed fetch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FetchError {
    /// Which class of failure, which picks the error code and log event.
    pub kind: FetchErrorKind,
    /// What went wrong, for the caller to read.
    pub message: String,
    /// The URL concerned, without query or credentials (for the log row).
    pub url: Option<String>,
}

impl FetchError {
    fn new(kind: FetchErrorKind, message: impl Into<String>) -> Self {
        FetchError {
            kind,
            message: message.into(),
            url: None,
        }
    }

    fn at(mut self, url: &Url) -> Self {
        self.url = Some(loggable(url));
        self
    }

    /// A refusal or failure of the egress policy at redirect hop `hop` (0: the first request).
    fn egress(error: EgressError, hop: usize) -> Self {
        let step = if hop == 0 {
            String::new()
        } else {
            format!(" after redirect {hop}")
        };
        match error.kind {
            EgressErrorKind::Refused => FetchError::new(
                FetchErrorKind::Rejected,
                format!(
                    "sys_fetch refused {}{step}: {}",
                    error.subject.as_deref().unwrap_or("the destination"),
                    error.reason
                ),
            ),
            EgressErrorKind::Invalid => FetchError::new(FetchErrorKind::Invalid, error.reason),
            EgressErrorKind::Failed | EgressErrorKind::OffMachineInTest => {
                FetchError::new(FetchErrorKind::Failed, format!("{}{step}", error.reason))
            }
        }
    }

    /// The error the caller sees.
    pub fn tool_error(&self) -> ToolError {
        let code = match self.kind {
            FetchErrorKind::Invalid => ErrorCode::InvalidInput,
            FetchErrorKind::Rejected | FetchErrorKind::Failed => ErrorCode::ToolError,
            FetchErrorKind::Timeout => ErrorCode::Timeout,
        };
        ToolError::new(code, self.message.clone())
    }

    /// The `adf_logs` event of missing-tables §13.5.
    pub fn log_event(&self) -> &'static str {
        match self.kind {
            FetchErrorKind::Invalid | FetchErrorKind::Rejected => "rejected",
            FetchErrorKind::Failed => "error",
            FetchErrorKind::Timeout => "timeout",
        }
    }

    /// The log row of this failure; `via` is `sys_fetch` or `fetch` (native).
    pub fn log_row(&self, via: &str, method: &str) -> LogRow {
        LogRow {
            level: if self.kind == FetchErrorKind::Failed {
                "error"
            } else {
                "warn"
            },
            origin: LOG_ORIGIN,
            event: self.log_event(),
            target: self.url.clone(),
            message: self.message.clone(),
            data: Some(json!({ "via": via, "method": method, "url": self.url })),
        }
    }

    /// The outcome of a failed detached call: the error and its log row.
    pub fn outcome(&self, via: &str, method: &str) -> DetachedOutcome {
        DetachedOutcome {
            result: Err(self.tool_error()),
            logs: vec![self.log_row(via, method)],
            deliveries: Vec::new(),
        }
    }
}

/// Carries out `request` under `policy`, every hop checked before it connects.
pub async fn fetch(
    request: FetchRequest,
    policy: Policy,
    settings: FetchSettings,
) -> Result<FetchResponse, FetchError> {
    let timeout = request.timeout;
    let start = Url::parse(&request.url).ok();
    let policy = policy.egress();
    match tokio::time::timeout(timeout, run(request, &policy, &settings)).await {
        Ok(result) => result,
        Err(_) => {
            let error = FetchError::new(
                FetchErrorKind::Timeout,
                format!(
                    "the request timed out after {} ms (timeout_ms)",
                    timeout.as_millis()
                ),
            );
            Err(match &start {
                Some(url) => error.at(url),
                None => error,
            })
        }
    }
}

async fn run(
    request: FetchRequest,
    policy: &adf_egress::Policy,
    settings: &FetchSettings,
) -> Result<FetchResponse, FetchError> {
    let mut url = Url::parse(&request.url).map_err(|e| {
        FetchError::new(
            FetchErrorKind::Invalid,
            format!("'{}' is not a valid URL: {e}", redact(&request.url)),
        )
    })?;
    let mut method = Method::from_bytes(request.method.trim().to_ascii_uppercase().as_bytes())
        .map_err(|_| {
            FetchError::new(
                FetchErrorKind::Invalid,
                format!("'{}' is not an HTTP method", request.method),
            )
        })?;
    if method == Method::CONNECT {
        return Err(FetchError::new(
            FetchErrorKind::Invalid,
            "CONNECT is not allowed (it would open a tunnel past the egress guard)",
        ));
    }
    let mut headers = header_map(&request.headers)?;
    let mut body = request.body;

    let pins = Pins::default();
    let client = adf_egress::agent_client(&pins, adf_egress::ClientOptions::default())
        .map_err(|e| FetchError::egress(e, 0).at(&url))?;
    for hop in 0..=MAX_REDIRECTS {
        check_scheme(&url)?;
        policy
            .admit(method.as_str(), &url, settings.lookup.as_ref(), &pins)
            .await
            .map_err(|e| FetchError::egress(e, hop).at(&url))?;
        let mut builder = client
            .request(method.clone(), url.clone())
            .headers(headers.clone());
        if let Some(bytes) = &body {
            builder = builder.body(bytes.clone());
        }
        let response = builder.send().await.map_err(|e| failed(&e).at(&url))?;
        let status = response.status();
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let redirect = matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308);
        let Some(location) = location.filter(|_| redirect) else {
            return read(response, &url, settings.max_body_bytes).await;
        };
        if hop == MAX_REDIRECTS {
            return Err(FetchError::new(
                FetchErrorKind::Failed,
                format!("too many redirects (sys_fetch follows at most {MAX_REDIRECTS})"),
            )
            .at(&url));
        }
        let next = url.join(&location).map_err(|e| {
            FetchError::new(
                FetchErrorKind::Failed,
                format!(
                    "redirect to an invalid location '{}': {e}",
                    redact(&location)
                ),
            )
            .at(&url)
        })?;
        // As browsers do: 303 (and 301/302 after a POST) turn into a body-less GET.
        let to_get = status.as_u16() == 303 && method != Method::HEAD
            || matches!(status.as_u16(), 301 | 302) && method == Method::POST;
        if to_get {
            method = Method::GET;
            body = None;
            for name in ["content-type", "content-length", "content-encoding"] {
                headers.remove(name);
            }
        }
        // Credentials meant for one origin never follow a redirect to another.
        if next.origin() != url.origin() {
            for name in ["authorization", "cookie", "proxy-authorization"] {
                headers.remove(name);
            }
        }
        url = next;
    }
    // The loop returns on every path; reaching here would mean MAX_REDIRECTS changed shape.
    Err(FetchError::new(FetchErrorKind::Failed, "too many redirects").at(&url))
}

fn check_scheme(url: &Url) -> Result<(), FetchError> {
    if matches!(url.scheme(), "http" | "https") {
        Ok(())
    } else {
        Err(FetchError::new(
            FetchErrorKind::Invalid,
            format!(
                "only http and https URLs can be fetched, not '{}:'",
                url.scheme()
            ),
        )
        .at(url))
    }
}

fn header_map(headers: &[(String, String)]) -> Result<reqwest::header::HeaderMap, FetchError> {
    let mut map = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            FetchError::new(
                FetchErrorKind::Invalid,
                format!("'{name}' is not a valid header name"),
            )
        })?;
        // The value is never echoed: it may be a credential.
        let value = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
            FetchError::new(
                FetchErrorKind::Invalid,
                format!("the value of header '{name}' is not a valid header value"),
            )
        })?;
        map.append(name, value);
    }
    Ok(map)
}

fn failed(error: &reqwest::Error) -> FetchError {
    // Without the URL: the caller knows it, and its query may hold a key.
    let mut message = format!("the request failed: {}", strip_url(error));
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    FetchError::new(FetchErrorKind::Failed, message)
}

fn strip_url(error: &reqwest::Error) -> String {
    let mut copy = format!("{error}");
    if let Some(url) = error.url() {
        copy = copy.replace(&format!(" for url ({url})"), "");
        copy = copy.replace(url.as_str(), &loggable(url));
    }
    copy
}

async fn read(
    mut response: reqwest::Response,
    url: &Url,
    cap: usize,
) -> Result<FetchResponse, FetchError> {
    let too_big = || {
        FetchError::new(
            FetchErrorKind::Failed,
            format!(
                "the response body exceeds the {} cap of sys_fetch",
                size(cap)
            ),
        )
        .at(url)
    };
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_big());
    }
    let status = response.status();
    let mut headers: Vec<(String, String)> = Vec::new();
    for (name, value) in response.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.iter_mut().find(|(n, _)| n == name.as_str()) {
            Some((_, existing)) => {
                existing.push_str(", ");
                existing.push_str(&value);
            }
            None => headers.push((name.as_str().to_owned(), value)),
        }
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(&e).at(url))? {
        if body.len() + chunk.len() > cap {
            return Err(too_big());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(FetchResponse {
        status: status.as_u16(),
        status_text: status.canonical_reason().unwrap_or("").to_owned(),
        headers,
        body,
        url: url.to_string(),
    })
}

/// `25 MB` for whole mebibytes, else bytes.
fn size(bytes: usize) -> String {
    const MB: usize = 1024 * 1024;
    if bytes >= MB && bytes.is_multiple_of(MB) {
        format!("{} MB", bytes / MB)
    } else {
        format!("{bytes}-byte")
    }
}

/// The URL as logs may show it: no credentials, no query, no fragment.
fn loggable(url: &Url) -> String {
    let mut copy = url.clone();
    let _ = copy.set_username("");
    let _ = copy.set_password(None);
    copy.set_query(None);
    copy.set_fragment(None);
    copy.to_string()
}

/// A URL string that did not parse, shortened and without a query.
fn redact(text: &str) -> String {
    let head = text.split(['?', '#']).next().unwrap_or("");
    head.chars().take(200).collect()
}

// ---------- the two callers' shapes ----------

/// A `sys_fetch` call's arguments (validated by the tool's schema) as a request.
pub fn request_from_tool_args(args: &Value) -> Result<FetchRequest, FetchError> {
    let url = args
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| FetchError::new(FetchErrorKind::Invalid, "sys_fetch needs 'url'"))?;
    let method = args
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("GET")
        .to_owned();
    let headers = headers_from(args.get("headers"))?;
    let body = args
        .get("body")
        .and_then(Value::as_str)
        .map(|b| b.as_bytes().to_vec());
    let timeout = args
        .get("timeout_ms")
        .and_then(Value::as_f64)
        .filter(|t| *t >= 1.0)
        .map_or(DEFAULT_TIMEOUT_MS, |t| (t as u64).min(MAX_TIMEOUT_MS));
    Ok(FetchRequest {
        url: url.to_owned(),
        method,
        headers,
        body,
        timeout: Duration::from_millis(timeout),
    })
}

fn headers_from(value: Option<&Value>) -> Result<Vec<(String, String)>, FetchError> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let object = value.as_object().ok_or_else(|| {
        FetchError::new(
            FetchErrorKind::Invalid,
            "'headers' must be an object of name: value",
        )
    })?;
    object
        .iter()
        .map(|(name, value)| {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => {
                    return Err(FetchError::new(
                        FetchErrorKind::Invalid,
                        format!("header '{name}' must be a string"),
                    ));
                }
            };
            Ok((name.clone(), text))
        })
        .collect()
}

/// The sandbox's native `fetch` (`Host::fetch`): `request` is `{url, method, headers, body:
/// null | string | bytes}`; the answer `{status, statusText, headers, body: string | bytes,
/// url}`, the body a string for text content types and bytes otherwise. Same engine and same
/// §5.6 policy as `sys_fetch`, so the network flag is no way around the egress guard.
pub fn native(config: &Value, request: &Value, settings: FetchSettings) -> crate::tools::Detached {
    let method = request
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("GET")
        .to_owned();
    let prepared = Policy::from_config(config).and_then(|policy| {
        let url = request
            .get("url")
            .and_then(Value::as_str)
            .ok_or_else(|| FetchError::new(FetchErrorKind::Invalid, "fetch needs a URL"))?;
        let body = match request.get("body") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.as_bytes().to_vec()),
            Some(other) => Some(adf_sandbox::value_bytes(other).ok_or_else(|| {
                FetchError::new(
                    FetchErrorKind::Invalid,
                    "fetch body must be a string or bytes",
                )
            })?),
        };
        let request = FetchRequest {
            url: url.to_owned(),
            method: method.clone(),
            headers: headers_from(request.get("headers"))?,
            body,
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
        };
        Ok((request, policy))
    });
    Box::pin(async move {
        let result = match prepared {
            Ok((request, policy)) => fetch(request, policy, settings).await,
            Err(error) => Err(error),
        };
        match result {
            Ok(response) => {
                let body = if response.is_text() {
                    Value::String(String::from_utf8_lossy(&response.body).into_owned())
                } else {
                    adf_sandbox::bytes_value(&response.body)
                };
                DetachedOutcome::from(Ok(json!({
                    "status": response.status,
                    "statusText": response.status_text,
                    "headers": response.headers_json(),
                    "body": body,
                    "url": response.url,
                })))
            }
            Err(error) => error.outcome("fetch", &method),
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn text_content_types_follow_the_guide() {
        for t in [
            "text/plain",
            "text/html; charset=utf-8",
            "application/json",
            "Application/JSON",
            "application/xml",
            "application/ld+json",
            "image/svg+xml",
        ] {
            assert!(is_text_content_type(t), "{t}");
        }
        for t in [
            "image/png",
            "audio/mpeg",
            "application/octet-stream",
            "application/pdf",
            "",
        ] {
            assert!(!is_text_content_type(t), "{t}");
        }
    }
}
