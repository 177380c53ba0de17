//! The daemon's front door: one middleware in front of every route that decides, in order,
//!
//! 1. **Host** (DNS rebinding): exactly one `Host` header (400 for two or more); the `Host`
//!    (or HTTP/2 authority) must name this daemon — the
//!    bound IP with its port; any loopback IP or `localhost` with the port when bound to
//!    loopback or to the unspecified address; any IP literal with the port when bound to the
//!    unspecified address (a rebinding attack needs a DNS name, and remote clients of a
//!    `0.0.0.0` daemon use the machine's addresses); or a name given with `--allow-host`.
//!    Otherwise 421 Misdirected Request.
//! 2. **Browser cross-origin**: an `Origin` that is not the daemon's own
//!    (`http://<the Host of the request>`), or `Sec-Fetch-Site: cross-site`/`same-site`, is a
//!    403 on every route. Other runtimes posting to a public inbox send neither.
//! 3. **Token**, on control routes (everything but `/health`, `/login`, the mesh routes
//!    `POST inbox`, `GET card`, `GET health`, and the adapters' `GET`/`POST
//!    adapters/{type}/webhook`): `Authorization: Bearer <token>` or the
//!    `adf_session` cookie of a live session (`sessions.rs`: `/login?code=` opens one); else
//!    401. `--insecure-loopback` skips this step only.
//!    Paths under `/agents/{handle}/` that are neither a control route (the OpenAPI table) nor
//!    a mesh route are the agent's own (its `serving.api` routes and files): served only on
//!    the serving port, so here they answer 307 to it (`crate::serving`).
//! 4. **Content type**, on mutating control requests (POST, PUT, PATCH, DELETE): a body must be
//!    `application/json`, which a web page cannot send cross-origin without a preflight; an
//!    empty body may come without a content type (`POST /agents/{id}/stop`). Else 415.
//!
//! It also holds [`BodyBudget`], the global in-flight byte budget for the bodies of
//! unauthenticated requests (the public inbox), so a flood of large posts is refused with 503
//! instead of growing the daemon's memory.

use std::collections::HashMap;
use std::net::IpAddr;
use std::str::FromStr as _;
use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::uri::Authority;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::sessions::{SESSION_TTL, Sessions};

pub use crate::budget::{BodyBudget, BodyRefusal, BudgetHold, DEFAULT_BODY_DEADLINE};
pub use crate::sessions::SESSION_COOKIE;

/// Default global budget for unauthenticated request bodies in flight: 64 MiB.
pub const DEFAULT_PUBLIC_BODY_BUDGET: usize = 64 * 1024 * 1024;

/// What the front door lets through; chosen at start ([`crate::serve::FrontDoor`]) and fixed
/// once the daemon listens. `Debug` shows neither the token nor any session secret.
pub struct Gate {
    token: String,
    /// Login codes and the browser sessions they opened.
    sessions: Sessions,
    insecure_loopback: bool,
    bound: IpAddr,
    port: u16,
    /// `--allow-host` names, lowercased, without a trailing dot.
    allowed_names: Vec<String>,
    budget: BodyBudget,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("insecure_loopback", &self.insecure_loopback)
            .field("bound", &self.bound)
            .field("port", &self.port)
            .field("allowed_names", &self.allowed_names)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Gate {
    pub(crate) fn new(
        token: String,
        insecure_loopback: bool,
        bound: IpAddr,
        port: u16,
        allowed_names: &[String],
        budget: BodyBudget,
    ) -> Self {
        Gate {
            sessions: Sessions::new(),
            token,
            insecure_loopback,
            bound,
            port,
            allowed_names: allowed_names
                .iter()
                .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
                .collect(),
            budget,
        }
    }

    /// The shared byte budget for unauthenticated request bodies in flight.
    pub fn budget(&self) -> &BodyBudget {
        &self.budget
    }

    /// The login codes and browser sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Whether the request may act with the token's full power: the bearer token itself, or
    /// no token needed (`--insecure-loopback`). A session cookie is not enough, so a session
    /// cannot mint the login codes that would outlive its expiry.
    pub(crate) fn token_holder(&self, headers: &HeaderMap) -> bool {
        self.insecure_loopback || bearer_matches(headers, &self.token)
    }

    /// The id of the live session the request's cookie names, if any.
    pub(crate) fn session_of(&self, headers: &HeaderMap) -> Option<String> {
        session_cookies(headers).find_map(|secret| self.sessions.authorize(secret))
    }

    /// Whether `authority` (a `Host` value) names this daemon.
    pub(crate) fn host_allowed(&self, authority: &str) -> bool {
        if authority.contains('@') {
            return false;
        }
        let Ok(parsed) = Authority::from_str(authority) else {
            return false;
        };
        let host = parsed
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if self.allowed_names.contains(&host) {
            return true;
        }
        if parsed.port_u16().unwrap_or(80) != self.port {
            return false;
        }
        let local = self.bound.is_loopback() || self.bound.is_unspecified();
        match host.parse::<IpAddr>() {
            Ok(ip) => {
                self.bound.is_unspecified()
                    || ip == self.bound
                    || (self.bound.is_loopback() && ip.is_loopback())
            }
            Err(_) => local && host == "localhost",
        }
    }

    /// Whether the request carries the token, or the cookie of a live session.
    fn authorized(&self, headers: &HeaderMap) -> bool {
        bearer_matches(headers, &self.token) || self.session_of(headers).is_some()
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({ "error": message }))).into_response()
}

/// Routes served without the token: probes, the login exchange, the mesh endpoints
/// (messages carry their own signatures; visibility applies) and the adapters' webhooks (the
/// adapter checks the platform's signature before storing anything).
fn is_public(method: &Method, path: &str) -> bool {
    path == "/health"
        || (path == "/login" && method == Method::GET)
        || crate::mesh::is_mesh_route(method, path)
        || crate::adapters::webhook::is_webhook_route(method, path)
}

fn is_mutating(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// The authority the request was sent to: the HTTP/2 `:authority`, else `Host`.
fn authority_of(request: &Request) -> Option<String> {
    if let Some(authority) = request.uri().authority() {
        return Some(authority.as_str().to_owned());
    }
    request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Why a browser request from another site is refused, if it is.
fn cross_origin(headers: &HeaderMap, authority: &str) -> Option<&'static str> {
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site") {
        return Some("cross-site browser requests are refused");
    }
    let origin = headers.get(header::ORIGIN)?;
    let own = format!("http://{authority}");
    let same = origin
        .to_str()
        .is_ok_and(|origin| origin.eq_ignore_ascii_case(&own));
    (!same).then_some("requests from another origin are refused")
}

/// A body is JSON, or absent with no content type.
fn json_or_empty(headers: &HeaderMap) -> bool {
    match headers.get(header::CONTENT_TYPE) {
        Some(value) => value.to_str().is_ok_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
        }),
        None => {
            let length = headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .map(str::trim);
            match length {
                Some(length) => length == "0",
                None => !headers.contains_key(header::TRANSFER_ENCODING),
            }
        }
    }
}

/// What the middleware reads: the gate's rules and the mesh (whose serving port a served
/// path is sent to). Not the API's `AppState`: the front door sits below the router.
#[derive(Clone)]
pub(crate) struct DoorState {
    pub(crate) gate: Arc<Gate>,
    pub(crate) mesh: Arc<crate::mesh::DaemonMesh>,
}

/// The middleware (see the module docs for the order of the checks).
pub(crate) async fn front_door(
    State(state): State<DoorState>,
    request: Request,
    next: Next,
) -> Response {
    let gate = &state.gate;
    // Two `Host` headers would let a proxy and this daemon disagree on which one counts.
    if request
        .headers()
        .get_all(header::HOST)
        .iter()
        .nth(1)
        .is_some()
    {
        return error(
            StatusCode::BAD_REQUEST,
            "the request carries more than one Host header",
        );
    }
    let Some(authority) = authority_of(&request).filter(|a| gate.host_allowed(a)) else {
        return error(
            StatusCode::MISDIRECTED_REQUEST,
            "the Host header does not name this daemon (start it with --allow-host NAME to accept a name)",
        );
    };
    if let Some(reason) = cross_origin(request.headers(), &authority) {
        return error(StatusCode::FORBIDDEN, reason);
    }
    let method = request.method().clone();
    if is_public(&method, request.uri().path()) {
        return next.run(request).await;
    }
    // An agent's own routes and files (adf-net) have an origin of their own: the serving port.
    if crate::serving::is_served(&method, request.uri().path()) {
        return crate::serving::elsewhere(&state.mesh, &request);
    }
    if !gate.insecure_loopback && !gate.authorized(request.headers()) {
        if method == Method::GET && wants_html(request.headers()) {
            return login_needed_page();
        }
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({
                "error": "unauthorized",
                "message": "Missing or invalid token: send Authorization: Bearer <token> ($ADF_HOME/daemon-token or ADF_DAEMON_TOKEN), or open a one-time login link from `adf studio`.",
            })),
        )
            .into_response();
    }
    if is_mutating(&method) && !json_or_empty(request.headers()) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the request body must be application/json",
        );
    }
    next.run(request).await
}

/// A browser asking for a page (the Studio at `/`) rather than an API client.
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"))
}

/// The 401 a browser gets without a session: how to log in, in words (no token, no script).
fn login_needed_page() -> Response {
    html_page(
        StatusCode::UNAUTHORIZED,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>ADF Studio: log in</title></head>\
<body><h1>ADF Studio</h1><p>This browser has no session with this daemon, or its session ended. Run <code>adf studio</code> \
(or <code>adf studio --no-open</code> and open the link it prints): the one-time login link opens a session.</p></body></html>",
    )
}

fn html_page(status: StatusCode, page: &'static str) -> Response {
    let mut response = (status, page).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

/// `GET /login?code=…`: spends a one-time login code (`sessions.rs`) and answers with the
/// `adf_session` cookie of a new session (HttpOnly, SameSite=Strict, `Max-Age` its lifetime)
/// and a redirect to `/`, so a browser holds a session that ends, never the token.
pub(crate) async fn login(
    State(gate): State<Arc<Gate>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let opened = params
        .get("code")
        .and_then(|code| gate.sessions.redeem(code));
    let Some(opened) = opened else {
        const WHY: &str = "this login link is not valid: it was already used, it is older than 5 minutes, or it is not a login link; run `adf studio` for a new one";
        if wants_html(&headers) {
            return html_page(
                StatusCode::UNAUTHORIZED,
                "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>ADF Studio: log in</title></head>\
<body><h1>ADF Studio</h1><p>This login link is not valid: it was already used, or it is older than 5 minutes. \
Run <code>adf studio</code> (or <code>adf studio --no-open</code>) for a new one.</p></body></html>",
            );
        }
        return error(StatusCode::UNAUTHORIZED, WHY);
    };
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, HeaderValue::from_static("/"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Hex digits only, so the value is always a valid header.
    if let Ok(value) = HeaderValue::from_str(&session_cookie(&opened.secret)) {
        headers.insert(header::SET_COOKIE, value);
    }
    response
}

/// The `Set-Cookie` value of a session: the browser forgets it when the session ends.
fn session_cookie(secret: &str) -> String {
    format!(
        "{SESSION_COOKIE}={secret}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        SESSION_TTL.as_secs()
    )
}

/// Compares every byte whatever the first difference, so timing does not reveal a prefix.
fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.strip_prefix("Bearer "))
        .any(|given| constant_time_eq(given.trim().as_bytes(), token.as_bytes()))
}

/// The values of every `adf_session` cookie the request carries.
fn session_cookies(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use axum::body::Body;
    use futures::StreamExt as _;
    use std::time::Duration;

    fn gate(bound: &str, names: &[&str]) -> Gate {
        Gate::new(
            "secret".into(),
            false,
            bound.parse().unwrap(),
            7385,
            &names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
            BodyBudget::new(1024),
        )
    }

    #[test]
    fn loopback_daemon_accepts_its_own_names_only() {
        let g = gate("127.0.0.1", &[]);
        for host in [
            "127.0.0.1:7385",
            "localhost:7385",
            "LOCALHOST:7385",
            "localhost.:7385",
            "[::1]:7385",
            "127.0.0.2:7385",
        ] {
            assert!(g.host_allowed(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:7385",
            "127.0.0.1:7386",
            "127.0.0.1",
            "localhost",
            "192.168.1.2:7385",
            "user@127.0.0.1:7385",
            "",
            "localhost.evil.example:7385",
        ] {
            assert!(!g.host_allowed(host), "{host}");
        }
    }

    #[test]
    fn unspecified_and_specific_binds() {
        let any = gate("0.0.0.0", &["studio.lan"]);
        assert!(any.host_allowed("192.168.1.2:7385"));
        assert!(any.host_allowed("localhost:7385"));
        assert!(any.host_allowed("studio.lan:443"));
        assert!(!any.host_allowed("evil.example:7385"));
        let lan = gate("192.168.1.2", &[]);
        assert!(lan.host_allowed("192.168.1.2:7385"));
        assert!(!lan.host_allowed("localhost:7385"));
        assert!(!lan.host_allowed("127.0.0.1:7385"));
    }

    #[test]
    fn origin_must_be_the_requests_own() {
        let mut headers = HeaderMap::new();
        assert_eq!(cross_origin(&headers, "127.0.0.1:7385"), None);
        headers.insert(header::ORIGIN, "http://127.0.0.1:7385".parse().unwrap());
        assert_eq!(cross_origin(&headers, "127.0.0.1:7385"), None);
        assert!(cross_origin(&headers, "localhost:7385").is_some());
        headers.insert(header::ORIGIN, "null".parse().unwrap());
        assert!(cross_origin(&headers, "127.0.0.1:7385").is_some());
        let mut fetch = HeaderMap::new();
        fetch.insert("sec-fetch-site", "same-site".parse().unwrap());
        assert!(cross_origin(&fetch, "127.0.0.1:7385").is_some());
        fetch.insert("sec-fetch-site", "same-origin".parse().unwrap());
        assert_eq!(cross_origin(&fetch, "127.0.0.1:7385"), None);
    }

    #[test]
    fn content_type_rule() {
        let mut headers = HeaderMap::new();
        assert!(json_or_empty(&headers), "no body at all");
        headers.insert(header::CONTENT_LENGTH, "0".parse().unwrap());
        assert!(json_or_empty(&headers));
        headers.insert(header::CONTENT_LENGTH, "5".parse().unwrap());
        assert!(!json_or_empty(&headers), "a body without a type");
        headers.insert(
            header::CONTENT_TYPE,
            "Application/JSON; charset=utf-8".parse().unwrap(),
        );
        assert!(json_or_empty(&headers));
        headers.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(!json_or_empty(&headers));
        let mut chunked = HeaderMap::new();
        chunked.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        assert!(!json_or_empty(&chunked));
    }

    #[test]
    fn bearer_and_cookie_need_the_exact_secret() {
        let g = gate("127.0.0.1", &[]);
        let mut headers = HeaderMap::new();
        assert!(!g.authorized(&headers));
        headers.insert(header::AUTHORIZATION, "Bearer secret".parse().unwrap());
        assert!(g.authorized(&headers));
        headers.insert(header::AUTHORIZATION, "Bearer secreT".parse().unwrap());
        assert!(!g.authorized(&headers));
        headers.insert(header::AUTHORIZATION, "Basic secret".parse().unwrap());
        assert!(!g.authorized(&headers));
        let opened = g
            .sessions()
            .redeem(&g.sessions().issue_code().code)
            .unwrap();
        let mut cookies = HeaderMap::new();
        let jar = format!("theme=dark; {SESSION_COOKIE}={}", opened.secret);
        cookies.insert(header::COOKIE, jar.parse().unwrap());
        assert!(g.authorized(&cookies));
        assert_eq!(g.session_of(&cookies), Some(opened.info.id.clone()));
        assert!(!g.token_holder(&cookies), "a session is not the token");
        // The raw token is not a session value.
        cookies.insert(
            header::COOKIE,
            format!("{SESSION_COOKIE}=secret").parse().unwrap(),
        );
        assert!(!g.authorized(&cookies));
        // A revoked session no longer authorizes.
        cookies.insert(header::COOKIE, jar.parse().unwrap());
        assert!(g.sessions().revoke(&opened.info.id));
        assert!(!g.authorized(&cookies));
    }

    #[test]
    fn the_session_cookie_is_strict_http_only_and_ends_with_the_session() {
        let cookie = session_cookie("abc");
        for part in [
            "adf_session=abc",
            "HttpOnly",
            "SameSite=Strict",
            "Path=/",
            &format!("Max-Age={}", SESSION_TTL.as_secs()),
        ] {
            assert!(cookie.split("; ").any(|p| p == part), "{cookie}");
        }
    }

    #[tokio::test]
    async fn budget_counts_a_body_while_it_is_held() {
        let budget = BodyBudget::new(10);
        let mut headers = HeaderMap::new();
        let (bytes, held) = budget
            .read(&headers, Body::from("123456"), 100)
            .await
            .unwrap();
        assert_eq!(bytes, b"123456");
        assert_eq!(budget.in_use(), 6);
        assert_eq!(
            budget.read(&headers, Body::from("12345"), 100).await.err(),
            Some(BodyRefusal::Busy)
        );
        assert_eq!(budget.in_use(), 6, "a refused body holds nothing");
        headers.insert(header::CONTENT_LENGTH, "5".parse().unwrap());
        assert_eq!(
            budget.read(&headers, Body::from("12345"), 100).await.err(),
            Some(BodyRefusal::Busy)
        );
        drop(held);
        assert_eq!(budget.in_use(), 0);
        assert_eq!(
            budget.read(&headers, Body::from("12345"), 4).await.err(),
            Some(BodyRefusal::TooLarge)
        );
    }

    #[tokio::test]
    async fn a_body_that_never_ends_is_dropped_at_the_deadline_and_returns_its_bytes() {
        let budget = BodyBudget::new(10).with_deadline(Duration::ZERO);
        let first = futures::stream::iter([Ok::<_, std::io::Error>(b"1234".to_vec())]);
        let trickle = Body::from_stream(first.chain(futures::stream::pending()));
        assert_eq!(
            budget.read(&HeaderMap::new(), trickle, 100).await.err(),
            Some(BodyRefusal::TooSlow)
        );
        assert_eq!(budget.in_use(), 0);
    }
}
