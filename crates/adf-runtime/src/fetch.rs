//! The HTTP fetch engine behind `sys_fetch` and the sandbox's native `fetch` (tools guide
//! "HTTP Fetch Tool", spec §5.6 and §9, missing-tables §5.6 and [C28]).
//!
//! One request is [`fetch`]: http/https only, redirects followed by hand (at most
//! [`MAX_REDIRECTS`]), and before **every** hop connects, its host is resolved here and each
//! address checked against the ordered §5.6 rules ([`check_address`]). The connection then
//! uses exactly the checked addresses: the per-request client's DNS resolver only answers
//! names this module pinned, so reqwest can never resolve a name by itself (a rebinding name
//! cannot swap in a private address between the check and the connect), and proxies from the
//! environment are ignored (a proxy would resolve the name out of our sight).
//!
//! The rules, in order (§5.6):
//! 1. link-local and cloud-metadata addresses (`169.254.0.0/16`, `fe80::/10`, AWS's
//!    `fd00:ec2::254`, Alibaba's `100.100.100.200`), also as IPv4-mapped/-compatible/NAT64
//!    IPv6, are refused whatever `security.allow_local_fetch` says;
//! 2. the runtime's own control API ([`protect_control_api`], called by the daemon when it
//!    binds) is refused on every loopback or unspecified spelling of its port, and on its own
//!    address;
//! 3. the agent's own served origin ([`Policy::served_origins`]; empty until serving exists) is
//!    allowed;
//! 4. `allow_local_fetch: true` allows everything else;
//! 5. otherwise loopback is allowed and private, CGNAT, unspecified, multicast, reserved and
//!    unique-local addresses are refused.
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

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures::future::BoxFuture;
use reqwest::{Method, Url};
use serde_json::{Map, Value, json};

use crate::tools::{DetachedOutcome, ErrorCode, LogRow, ToolError};

/// `timeout_ms` when the caller gives none.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// The largest `timeout_ms` `sys_fetch` accepts.
pub const MAX_TIMEOUT_MS: u64 = 60_000;
/// Response bodies are capped at 25 MB (tools guide).
pub const MAX_BODY_BYTES: usize = 25 * 1024 * 1024;
/// Redirects followed at most ([C28]).
pub const MAX_REDIRECTS: usize = 5;
/// The `adf_logs` origin of every fetch row (missing-tables §13.5).
pub const LOG_ORIGIN: &str = "sys_fetch";

/// Control API addresses of this process (rule 2), registered by the daemon when it binds.
static CONTROL_APIS: Mutex<Vec<SocketAddr>> = Mutex::new(Vec::new());

/// Registers the runtime's own control API address: it is never fetchable (rule 2), on any
/// loopback or unspecified spelling of its port nor on the address itself.
pub fn protect_control_api(addr: SocketAddr) {
    let mut apis = CONTROL_APIS.lock().unwrap_or_else(PoisonError::into_inner);
    if !apis.contains(&addr) {
        apis.push(addr);
    }
}

/// Looks host names up. The system resolver by default; tests inject a table so that a name
/// can "resolve" to a private or metadata address without real DNS.
pub trait Lookup: Send + Sync + 'static {
    /// Every address `host` resolves to.
    fn lookup(&self, host: &str, port: u16) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>>;
}

/// The operating system's resolver (`getaddrinfo` through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: &str, port: u16) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let host = host.to_owned();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), port)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// What a fetch may do beyond the agent's config: the body cap and the resolver. The defaults
/// are the guide's; tests lower the cap or inject names.
#[derive(Clone)]
pub struct FetchSettings {
    pub max_body_bytes: usize,
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

    fn serves(&self, url: &Url) -> bool {
        self.served_origins
            .iter()
            .filter_map(|o| Url::parse(o).ok())
            .any(|o| {
                o.scheme() == url.scheme()
                    && o.host_str() == url.host_str()
                    && o.port_or_known_default() == url.port_or_known_default()
                    && url.path().starts_with(o.path())
            })
    }
}

/// One request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub url: String,
    pub method: String,
    /// Header names and values in the caller's order.
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
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
    pub status: u16,
    pub status_text: String,
    /// Lower-case names; repeated headers joined with `", "`.
    pub headers: Vec<(String, String)>,
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
    pub kind: FetchErrorKind,
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

/// The names this request may resolve, with the addresses checked for them.
type Pins = Arc<Mutex<HashMap<String, Vec<SocketAddr>>>>;

/// reqwest's resolver for one request: answers only pinned names, so no connection ever uses
/// an address this module did not check.
struct PinnedResolver(Pins);

impl reqwest::dns::Resolve for PinnedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let pinned = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&name.as_str().to_ascii_lowercase())
            .cloned();
        Box::pin(async move {
            match pinned {
                Some(addrs) => Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs),
                None => {
                    Err(format!("{} was not checked by the egress guard", name.as_str()).into())
                }
            }
        })
    }
}

async fn run(
    request: FetchRequest,
    policy: &Policy,
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

    let pins: Pins = Arc::default();
    let client = client(pins.clone()).map_err(|e| e.at(&url))?;
    for hop in 0..=MAX_REDIRECTS {
        check_scheme(&url)?;
        let addrs = guard(&url, hop, policy, settings)
            .await
            .map_err(|e| e.at(&url))?;
        if let Some(name) = domain(&url) {
            pins.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(name, addrs);
        }
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

fn client(pins: Pins) -> Result<reqwest::Client, FetchError> {
    // reqwest is built with `rustls-no-provider`: install ring before the first client
    // (harmless when another part of the process already did).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(PinnedResolver(pins)))
        .user_agent(concat!("adf/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| {
            FetchError::new(
                FetchErrorKind::Failed,
                format!("cannot build the HTTP client: {e}"),
            )
        })
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

/// The host of `url` when it is a name (not an IP literal), lower case.
fn domain(url: &Url) -> Option<String> {
    let host = url.host_str()?;
    if host.starts_with('[') || host.parse::<IpAddr>().is_ok() {
        None
    } else {
        Some(host.to_ascii_lowercase())
    }
}

/// Resolves the hop's host and checks every address; the addresses to connect to.
async fn guard(
    url: &Url,
    hop: usize,
    policy: &Policy,
    settings: &FetchSettings,
) -> Result<Vec<SocketAddr>, FetchError> {
    let host = url.host_str().ok_or_else(|| {
        FetchError::new(FetchErrorKind::Invalid, "the URL has no host".to_owned())
    })?;
    let port = url.port_or_known_default().ok_or_else(|| {
        FetchError::new(FetchErrorKind::Invalid, "the URL has no port".to_owned())
    })?;
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok();
    let ips = match literal {
        Some(ip) => vec![ip],
        None => settings.lookup.lookup(host, port).await.map_err(|e| {
            FetchError::new(
                FetchErrorKind::Failed,
                format!("cannot resolve {host}: {e}"),
            )
        })?,
    };
    if ips.is_empty() {
        return Err(FetchError::new(
            FetchErrorKind::Failed,
            format!("{host} resolves to no address"),
        ));
    }
    let served = policy.serves(url);
    for ip in &ips {
        if let Err(reason) = check_address(*ip, port, served, policy.allow_local) {
            let subject = match literal {
                Some(_) => format!("{ip}"),
                None => format!("{host} (resolved to {ip})"),
            };
            let step = if hop == 0 {
                String::new()
            } else {
                format!(" after redirect {hop}")
            };
            return Err(FetchError::new(
                FetchErrorKind::Rejected,
                format!("sys_fetch refused {subject}{step}: {reason}"),
            ));
        }
    }
    Ok(ips
        .into_iter()
        .map(|ip| SocketAddr::new(ip, port))
        .collect())
}

/// The §5.6 rules for one resolved address, in order. `served`: the URL is under the agent's
/// own served origin (rule 3). `Err` carries the reason.
pub fn check_address(ip: IpAddr, port: u16, served: bool, allow_local: bool) -> Result<(), String> {
    let ip = canonical(ip);
    if let Some(what) = link_local_or_metadata(ip) {
        return Err(format!(
            "{ip} is a {what} address, never fetchable (even with security.allow_local_fetch)"
        ));
    }
    if is_control_api(ip, port) {
        return Err(format!(
            "{ip}:{port} is this runtime's own control API, never fetchable"
        ));
    }
    if served || allow_local || ip.is_loopback() {
        return Ok(());
    }
    match local_kind(ip) {
        Some(what) => Err(format!(
            "{ip} is a {what} address; private and local destinations need security.allow_local_fetch: true (an owner-approved config change)"
        )),
        None => Ok(()),
    }
}

/// IPv4 addresses written as IPv6 (mapped `::ffff:a.b.c.d`, the deprecated compatible
/// `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`) are judged as the IPv4 address they reach.
fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let embedded = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let compatible = s[..6] == [0; 6] && !v6.is_unspecified() && !v6.is_loopback();
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    if compatible || nat64 {
        IpAddr::V4(embedded)
    } else {
        ip
    }
}

/// Rule 1.
fn link_local_or_metadata(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) if v4.is_link_local() => Some("link-local/cloud-metadata"),
        IpAddr::V4(v4) if v4 == Ipv4Addr::new(100, 100, 100, 200) => Some("cloud-metadata"),
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => Some("link-local"),
        IpAddr::V6(v6) if v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) => {
            Some("cloud-metadata")
        }
        _ => None,
    }
}

/// Rule 2: the port of a registered control API on a loopback or unspecified address, or its
/// own address. When the API listens on every interface, the machine's private addresses
/// reach it too.
fn is_control_api(ip: IpAddr, port: u16) -> bool {
    let apis = CONTROL_APIS.lock().unwrap_or_else(PoisonError::into_inner);
    apis.iter().filter(|a| a.port() == port).any(|api| {
        let bound = canonical(api.ip());
        ip.is_loopback()
            || ip.is_unspecified()
            || ip == bound
            || (bound.is_unspecified() && local_kind(ip).is_some())
    })
}

/// Rule 5's refused kinds (loopback is allowed and not listed).
fn local_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            match (a, b, c) {
                (0, _, _) => Some("unspecified"),
                (10, _, _) => Some("private (10.0.0.0/8)"),
                (172, 16..=31, _) => Some("private (172.16.0.0/12)"),
                (192, 168, _) => Some("private (192.168.0.0/16)"),
                (100, 64..=127, _) => Some("CGNAT (100.64.0.0/10)"),
                (224..=239, _, _) => Some("multicast"),
                (240..=255, _, _) => Some("reserved"),
                (192, 0, 0) | (192, 0, 2) | (198, 51, 100) | (203, 0, 113) | (198, 18..=19, _) => {
                    Some("reserved")
                }
                _ => None,
            }
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if v6.is_unspecified() {
                Some("unspecified")
            } else if s[0] & 0xff00 == 0xff00 {
                Some("multicast")
            } else if s[0] & 0xfe00 == 0xfc00 {
                Some("unique-local (fc00::/7)")
            } else if s[0] & 0xffc0 == 0xfec0 {
                Some("site-local")
            } else if s[0] == 0x2001 && s[1] == 0x0db8 || s[..4] == [0x100, 0, 0, 0] {
                Some("reserved")
            } else {
                None
            }
        }
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

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

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

    #[test]
    fn address_rules_in_order() {
        let refused = |a: &str, local: bool| check_address(ip(a), 80, false, local).is_err();
        // Rule 1 holds with the flag on.
        for a in [
            "169.254.169.254",
            "fe80::1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "fd00:ec2::254",
        ] {
            assert!(refused(a, true), "{a}");
            assert!(refused(a, false), "{a}");
        }
        // Rule 5 with the flag off; rule 4 with it on.
        for a in [
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "fc00::1",
            "fd12::1",
            "ff02::1",
            "::ffff:10.0.0.1",
            "::ffff:192.168.0.1",
        ] {
            assert!(refused(a, false), "{a}");
            assert!(!refused(a, true), "{a}");
        }
        for a in [
            "127.0.0.1",
            "127.8.9.10",
            "::1",
            "93.184.216.34",
            "172.32.0.1",
            "2606:4700::1",
        ] {
            assert!(!refused(a, false), "{a}");
        }
    }
}
