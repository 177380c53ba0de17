//! The daemon's front door over real HTTP on 127.0.0.1: the Host check (DNS rebinding), the
//! browser cross-origin check, the token on every bind (and the `--insecure-loopback`
//! opt-out), the JSON content type of mutating requests, the login cookie, the budget for
//! unauthenticated bodies, 4xx (never 5xx) for bad input, and `force` for deleting a protected
//! file. Requests that need exact headers are written by hand on a TCP stream.

use crate::common;

use std::net::SocketAddr;

use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use adf_server::client::{Client, encode};
use common::{Harness, fresh_dir};

/// A hand-written HTTP/1.1 exchange: status, raw header block, body.
struct Answer {
    status: u16,
    headers: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// Sends one request; `headers` may override `Host` (else the daemon's own address).
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        headers: head.to_owned(),
        body: body.to_owned(),
    }
}

fn bearer(h: &Harness) -> String {
    format!("Bearer {}", h.token)
}

async fn loaded_count(h: &Harness) -> usize {
    h.client
        .get("/agents")
        .await
        .unwrap()
        .as_array()
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_header_is_misdirected_on_every_route() {
    let h = Harness::start().await;
    let addr = h.server.addr;
    let auth = bearer(&h);
    let foreign = format!("evil.example:{}", addr.port());
    for path in ["/agents", "/health", "/agents/bob/card", "/openapi.json"] {
        let answer = send(
            addr,
            "GET",
            path,
            &[("Host", &foreign), ("Authorization", &auth)],
            "",
        )
        .await;
        assert_eq!(answer.status, 421, "{path}: {}", answer.body);
        assert!(answer.json()["error"].is_string(), "{}", answer.body);
    }
    // A rebinding page's POST never reaches the handler.
    let file = h.copy_fixture("minimal-headless.adf", "rebind.adf");
    let body = json!({ "filePath": file }).to_string();
    let answer = send(
        addr,
        "POST",
        "/agents/load",
        &[
            ("Host", &foreign),
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        &body,
    )
    .await;
    assert_eq!(answer.status, 421);
    assert_eq!(loaded_count(&h).await, 0);
    // The daemon's own names pass.
    for host in [
        addr.to_string(),
        format!("localhost:{}", addr.port()),
        format!("[::1]:{}", addr.port()),
    ] {
        let answer = send(
            addr,
            "GET",
            "/agents",
            &[("Host", &host), ("Authorization", &auth)],
            "",
        )
        .await;
        assert_eq!(answer.status, 200, "{host}: {}", answer.body);
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_host_name_is_served_with_its_own_origin() {
    let h = Harness::start_with(fresh_dir(), |front| {
        front.allowed_hosts = vec!["Studio.Test".into()];
    })
    .await;
    let addr = h.server.addr;
    let auth = bearer(&h);
    // A reverse proxy may forward on another port.
    for host in ["studio.test:8443", "studio.test"] {
        let answer = send(
            addr,
            "GET",
            "/agents",
            &[
                ("Host", host),
                ("Authorization", &auth),
                ("Origin", &format!("http://{host}")),
            ],
            "",
        )
        .await;
        assert_eq!(answer.status, 200, "{host}: {}", answer.body);
    }
    let other = send(
        addr,
        "GET",
        "/agents",
        &[("Host", "other.test"), ("Authorization", &auth)],
        "",
    )
    .await;
    assert_eq!(other.status, 421);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_origin_text_plain_load_is_refused_and_loads_nothing() {
    let h = Harness::start().await;
    let addr = h.server.addr;
    let auth = bearer(&h);
    let file = h.copy_fixture("minimal-headless.adf", "csrf.adf");
    let body = json!({ "filePath": file }).to_string();
    // What a web page can send without a preflight: text/plain, its own Origin. Even a
    // request that somehow carries the token is refused for its origin.
    let cross: [&[(&str, &str)]; 4] = [
        &[
            ("Origin", "http://evil.example"),
            ("Content-Type", "text/plain"),
        ],
        &[
            ("Origin", "http://evil.example"),
            ("Content-Type", "text/plain"),
            ("Authorization", &auth),
        ],
        &[
            ("Sec-Fetch-Site", "cross-site"),
            ("Content-Type", "application/json"),
            ("Authorization", &auth),
        ],
        &[("Origin", "null"), ("Content-Type", "text/plain")],
    ];
    for headers in cross {
        let answer = send(addr, "POST", "/agents/load", headers, &body).await;
        assert_eq!(answer.status, 403, "{headers:?}: {}", answer.body);
    }
    // The public inbox refuses a browser from elsewhere too.
    let answer = send(
        addr,
        "POST",
        "/agents/nobody/inbox",
        &[
            ("Origin", "http://evil.example"),
            ("Content-Type", "text/plain"),
        ],
        "{}",
    )
    .await;
    assert_eq!(answer.status, 403);
    assert_eq!(loaded_count(&h).await, 0, "nothing was loaded");
    // The token holder without a JSON body: 415, still nothing loaded.
    let answer = send(
        addr,
        "POST",
        "/agents/load",
        &[("Content-Type", "text/plain"), ("Authorization", &auth)],
        &body,
    )
    .await;
    assert_eq!(answer.status, 415, "{}", answer.body);
    assert_eq!(loaded_count(&h).await, 0);
    // The daemon's own origin (the Studio) with JSON and the token loads.
    let own = format!("http://{addr}");
    let answer = send(
        addr,
        "POST",
        "/agents/load",
        &[
            ("Origin", &own),
            ("Sec-Fetch-Site", "same-origin"),
            ("Content-Type", "application/json"),
            ("Authorization", &auth),
        ],
        &body,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(loaded_count(&h).await, 1);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_03_a_loopback_daemon_requires_the_token_and_mesh_routes_stay_public() {
    let h = Harness::start().await;
    // The token came from the home and is kept there, private.
    let token_file = h.dir.path().join("home/daemon-token");
    assert_eq!(
        std::fs::read_to_string(&token_file).unwrap().trim(),
        h.token
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let file = common::agent_file(h.dir.path(), "bob", &[], &[("handle", json!("bob"))]);
    let anonymous = Client::new(&h.server.url(), None).unwrap();
    let (status, body) = anonymous
        .raw(
            Method::POST,
            "/agents/load",
            Some(&json!({ "filePath": file })),
        )
        .await
        .unwrap();
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"], "unauthorized");
    assert_eq!(loaded_count(&h).await, 0);
    for path in [
        "/agents",
        "/openapi.json",
        "/settings",
        "/events",
        "/nowhere",
    ] {
        let (status, _) = anonymous.raw(Method::GET, path, None).await.unwrap();
        assert_eq!(status, 401, "{path}");
    }
    let wrong = Client::new(&h.server.url(), Some(format!("{}x", h.token))).unwrap();
    assert_eq!(
        wrong.raw(Method::GET, "/agents", None).await.unwrap().0,
        401
    );
    // Public: probes and the mesh endpoints.
    h.client
        .post("/agents/load", Some(&json!({ "filePath": file })))
        .await
        .unwrap();
    assert_eq!(
        anonymous.get("/health").await.unwrap(),
        json!({ "ok": true })
    );
    assert_eq!(
        anonymous
            .raw(Method::GET, "/agents/bob/card", None)
            .await
            .unwrap()
            .0,
        200
    );
    assert_eq!(
        anonymous
            .raw(Method::GET, "/agents/bob/health", None)
            .await
            .unwrap()
            .0,
        200
    );
    let (status, _) = anonymous
        .raw(
            Method::POST,
            "/agents/bob/inbox",
            Some(&json!({ "not": "alf" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 400, "refused by ingress, not by the token check");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_loopback_admits_a_tokenless_client_but_keeps_host_and_origin_checks() {
    let h = Harness::start_with(fresh_dir(), |front| front.insecure_loopback = true).await;
    let addr = h.server.addr;
    let file = h.copy_fixture("minimal-headless.adf", "old-cli.adf");
    // As the reference CLI talks: no token, JSON bodies, bodiless POSTs.
    let anonymous = Client::new(&h.server.url(), None).unwrap();
    let loaded = anonymous
        .post("/agents/load", Some(&json!({ "filePath": file })))
        .await
        .unwrap();
    let id = loaded["id"].as_str().unwrap().to_owned();
    let answer = send(addr, "POST", &format!("/agents/{id}/stop"), &[], "").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // Host and browser-origin checks still apply.
    let foreign = format!("evil.example:{}", addr.port());
    assert_eq!(
        send(addr, "GET", "/agents", &[("Host", &foreign)], "")
            .await
            .status,
        421
    );
    let body = json!({ "filePath": file }).to_string();
    let answer = send(
        addr,
        "POST",
        "/agents/load",
        &[
            ("Origin", "http://evil.example"),
            ("Content-Type", "text/plain"),
        ],
        &body,
    )
    .await;
    assert_eq!(answer.status, 403);
    assert_eq!(loaded_count(&h).await, 0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_loopback_is_refused_off_loopback() {
    let dir = fresh_dir();
    let home = adf_runtime::home::RuntimeHome::at(dir.path().join("home"));
    let front = adf_server::FrontDoor::for_home(&home, None)
        .unwrap()
        .insecure_loopback();
    // Refused before anything binds.
    let error =
        adf_server::RunningServer::start(adf_server::Daemon::new(home), "0.0.0.0", 0, front)
            .await
            .unwrap_err();
    assert!(error.to_string().contains("--insecure-loopback"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_link_is_a_single_use_code_for_an_expiring_revocable_session() {
    let h = Harness::start().await;
    let addr = h.server.addr;
    let login = h.server.login_url();
    let path = login.strip_prefix(&format!("http://{addr}")).unwrap();
    assert!(path.starts_with("/login?code="), "{path}");
    assert!(
        !login.contains(&h.token),
        "the link never carries the token"
    );
    // The token is no login link, and neither is a made-up code.
    for refused in [
        format!("/login?token={}", h.token),
        "/login?code=nope".into(),
    ] {
        let wrong = send(addr, "GET", &refused, &[], "").await;
        assert_eq!(wrong.status, 401, "{refused}");
        assert_eq!(wrong.header("set-cookie"), None);
    }
    let answer = send(addr, "GET", path, &[("Sec-Fetch-Site", "none")], "").await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(answer.header("location").as_deref(), Some("/"));
    let cookie = answer.header("set-cookie").unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(cookie.split("; ").any(|a| a == attribute), "{cookie}");
    }
    let pair = cookie.split(';').next().unwrap().to_owned();
    let (name, value) = pair.split_once('=').unwrap();
    assert_eq!(name, "adf_session");
    assert!(
        !value.contains(&h.token),
        "the cookie does not hold the token"
    );
    // Single use: the same link again opens nothing; a browser is told why.
    let again = send(addr, "GET", path, &[("Accept", "text/html")], "").await;
    assert_eq!(again.status, 401);
    assert_eq!(again.header("set-cookie"), None);
    assert!(again.body.contains("adf studio"), "{}", again.body);
    // The cookie alone authorizes, from the daemon's own origin.
    let own = format!("http://{addr}");
    let answer = send(
        addr,
        "GET",
        "/agents",
        &[("Cookie", &pair), ("Origin", &own)],
        "",
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let forged = send(
        addr,
        "GET",
        "/agents",
        &[("Cookie", "adf_session=forged")],
        "",
    )
    .await;
    assert_eq!(forged.status, 401);
    // The session is listed (this request's own marked), with its server-side expiry.
    let listed = send(addr, "GET", "/auth/sessions", &[("Cookie", &pair)], "").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let sessions = listed.json()["sessions"].as_array().unwrap().clone();
    assert_eq!(sessions.len(), 1, "{}", listed.body);
    assert_eq!(sessions[0]["current"], true);
    let created =
        chrono::DateTime::parse_from_rfc3339(sessions[0]["createdAt"].as_str().unwrap()).unwrap();
    let expires =
        chrono::DateTime::parse_from_rfc3339(sessions[0]["expiresAt"].as_str().unwrap()).unwrap();
    assert_eq!((expires - created).num_hours(), 12);
    // A session cannot mint login codes (it would renew itself past its expiry) ...
    let minted = send(
        addr,
        "POST",
        "/auth/login-codes",
        &[("Cookie", &pair), ("Content-Type", "application/json")],
        "{}",
    )
    .await;
    assert_eq!(minted.status, 403, "{}", minted.body);
    assert_eq!(minted.json()["code"], "TOKEN_REQUIRED");
    // ... the token's holder can, and that link works once.
    let minted = h.client.post("/auth/login-codes", None).await.unwrap();
    let fresh = minted["loginPath"].as_str().unwrap();
    assert!(!fresh.contains(&h.token));
    assert_eq!(minted["expiresInSeconds"], 300);
    let second = send(addr, "GET", fresh, &[], "").await;
    assert_eq!(second.status, 303, "{}", second.body);
    assert_eq!(
        h.client.get("/auth/sessions").await.unwrap()["sessions"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // Revoking ends the session at once, without rotating the token.
    let id = sessions[0]["id"].as_str().unwrap();
    let revoked = h
        .client
        .delete(&format!("/auth/sessions/{id}"))
        .await
        .unwrap();
    assert_eq!(revoked["success"], true);
    let after = send(addr, "GET", "/agents", &[("Cookie", &pair)], "").await;
    assert_eq!(after.status, 401);
    let (status, missing) = h
        .client
        .raw(Method::DELETE, &format!("/auth/sessions/{id}"), None)
        .await
        .unwrap();
    assert_eq!(status, 404);
    assert_eq!(missing["code"], "SESSION_NOT_FOUND");
    let all = h.client.delete("/auth/sessions").await.unwrap();
    assert_eq!(all["revoked"], 1);
    assert!(
        h.client.get("/auth/sessions").await.unwrap()["sessions"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        h.client.get("/agents").await.unwrap(),
        json!([]),
        "the token still works"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_protected_file_needs_force() {
    let h = Harness::start().await;
    let file = common::agent_file(
        h.dir.path(),
        "keeper",
        &[("notes/plain.md", "plain")],
        &[("handle", json!("keeper"))],
    );
    h.client
        .post("/agents/load", Some(&json!({ "filePath": file })))
        .await
        .unwrap();
    h.client
        .raw(
            Method::PUT,
            "/agents/keeper/files/content?path=notes/locked.md",
            Some(&json!({ "content": "x", "protection": "read_only" })),
        )
        .await
        .unwrap();
    let exists = |path: &'static str| {
        let client = h.client.clone();
        async move {
            client
                .raw(
                    Method::GET,
                    &format!("/agents/keeper/files/content?path={path}"),
                    None,
                )
                .await
                .unwrap()
                .0
                == 200
        }
    };
    for (path, level) in [("README.md", "no_delete"), ("notes/locked.md", "read_only")] {
        let (status, body) = h
            .client
            .raw(
                Method::DELETE,
                &format!("/agents/keeper/files/content?path={path}"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(status, 409, "{path}: {body}");
        assert_eq!(body["code"], "FILE_PROTECTED");
        assert_eq!(body["protection"], level);
        assert_eq!(body["success"], false);
        assert!(exists(path).await, "{path} was kept");
        let (status, body) = h
            .client
            .raw(
                Method::DELETE,
                &format!("/agents/keeper/files/content?path={path}&force=true"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(status, 200, "{path}: {body}");
        assert!(!exists(path).await, "{path} was deleted with force");
    }
    // An unprotected file needs no force.
    let (status, _) = h
        .client
        .raw(
            Method::DELETE,
            "/agents/keeper/files/content?path=notes/plain.md",
            None,
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    let (status, _) = h
        .client
        .raw(
            Method::DELETE,
            "/agents/keeper/files/content?path=notes/plain.md&force=maybe",
            None,
        )
        .await
        .unwrap();
    assert_eq!(status, 400);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_that_are_not_adf_files_are_client_errors_and_stay_unchanged() {
    let h = Harness::start().await;
    let agents = h.dir.path().join("agents");
    let text = agents.join("notes.adf");
    std::fs::write(&text, "just some text\n").unwrap();
    let empty = agents.join("empty.adf");
    std::fs::write(&empty, b"").unwrap();
    let sqlite = agents.join("plain.sqlite");
    {
        let plain = adf_store::test_support::OtherConnection::open(&sqlite).unwrap();
        plain.tables().create_table("t", &["x"]).unwrap();
        plain.tables().insert_row("t", &[("x", json!(1))]).unwrap();
    }
    let before: Vec<Vec<u8>> = [&text, &empty, &sqlite]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let bad_paths: Vec<Value> = vec![
        json!(text),
        json!(empty),
        json!(sqlite),
        json!(agents),
        json!(format!("{}/a\u{0}b.adf", agents.display())),
        json!("a\u{0}"),
        json!(agents.join("missing.adf")),
    ];
    for path in &bad_paths {
        let body = json!({ "filePath": path });
        for (method, route) in [
            (Method::POST, "/agents/load".to_owned()),
            (Method::POST, "/agents/review/accept".to_owned()),
            (
                Method::GET,
                format!("/agents/review?filePath={}", encode(path.as_str().unwrap())),
            ),
        ] {
            let body = (method == Method::POST).then_some(&body);
            let (status, answer) = h.client.raw(method.clone(), &route, body).await.unwrap();
            assert!(
                (400..500).contains(&status),
                "{method} {route} {path}: {status} {answer}"
            );
            assert!(answer["error"].is_string(), "{answer}");
        }
    }
    for wrong in [json!(5), json!(null), json!([]), json!({ "a": 1 })] {
        let (status, _) = h
            .client
            .raw(
                Method::POST,
                "/agents/review/accept",
                Some(&json!({ "filePath": wrong })),
            )
            .await
            .unwrap();
        assert_eq!(status, 400, "{wrong}");
    }
    let after: Vec<Vec<u8>> = [&text, &empty, &sqlite]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert_eq!(before, after, "bad input leaves every file byte-identical");
    assert_eq!(loaded_count(&h).await, 0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_writes_refuse_unknown_keys_and_wrong_shapes() {
    let h = Harness::start().await;
    let settings_file = h.dir.path().join("home/settings.json");
    h.client
        .call(
            Method::PATCH,
            "/settings",
            Some(&json!({ "meshPort": 7295 })),
        )
        .await
        .unwrap();
    let before = std::fs::read(&settings_file).unwrap();
    for (method, path, body) in [
        (
            Method::PATCH,
            "/settings",
            json!({ "meshPort": 1, "bogus": true }),
        ),
        (
            Method::PATCH,
            "/settings",
            json!({ "trackedDirectories": "/" }),
        ),
        (
            Method::PATCH,
            "/settings",
            json!({ "maxDirectoryScanDepth": -1 }),
        ),
        (Method::PUT, "/settings/bogus", json!({ "value": 1 })),
        (Method::PUT, "/settings/meshPort", json!({ "value": 70000 })),
    ] {
        let (status, answer) = h
            .client
            .raw(method.clone(), path, Some(&body))
            .await
            .unwrap();
        assert_eq!(status, 400, "{method} {path} {body}: {answer}");
    }
    assert_eq!(std::fs::read(&settings_file).unwrap(), before);
    h.stop().await;
}

/// A chunked request body the test feeds piece by piece.
fn streamed_body() -> (
    tokio::sync::mpsc::Sender<Result<Vec<u8>, std::io::Error>>,
    reqwest::Body,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    (tx, reqwest::Body::wrap_stream(stream))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_inbox_bodies_share_one_in_flight_budget() {
    const BUDGET: usize = 256 * 1024;
    const PIECE: usize = 100 * 1024;
    let h = Harness::start_with(fresh_dir(), |front| front.public_body_budget = BUDGET).await;
    let file = common::agent_file(h.dir.path(), "bob", &[], &[("handle", json!("bob"))]);
    h.client
        .post("/agents/load", Some(&json!({ "filePath": file })))
        .await
        .unwrap();
    let budget = h.server.public_body_budget().clone();
    assert_eq!(budget.capacity(), BUDGET);
    let inbox = format!("{}/agents/bob/inbox", h.server.url());
    // A fresh connection per request: the daemon closes one whose body it refused unread.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    // Two posts hold PIECE bytes each, their bodies still open.
    let mut feeders = Vec::new();
    let mut posts = Vec::new();
    for _ in 0..2 {
        let (tx, body) = streamed_body();
        tx.send(Ok(vec![b' '; PIECE])).await.unwrap();
        feeders.push(tx);
        let request = http
            .post(&inbox)
            .header("content-type", "application/json")
            .body(body)
            .send();
        posts.push(tokio::spawn(request));
    }
    common::wait_for("both bodies counted", || {
        let budget = budget.clone();
        async move { budget.in_use() == 2 * PIECE }
    })
    .await;
    // A third large post finds the budget spent: 503 with Retry-After, nothing held.
    let refused = http
        .post(&inbox)
        .header("content-type", "application/json")
        .body(vec![b' '; PIECE])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().get("retry-after").is_some());
    assert_eq!(budget.in_use(), 2 * PIECE, "the refused body holds nothing");
    // A small one still fits.
    let small = http
        .post(&inbox)
        .header("content-type", "application/json")
        .body(r#"{"not":"alf"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(small.status(), 400);
    // The held bodies end; their bytes are returned to the budget.
    for tx in &feeders {
        tx.send(Ok(b"{}".to_vec())).await.unwrap();
    }
    drop(feeders);
    for post in posts {
        let response = post.await.unwrap().unwrap();
        assert!(response.status().is_client_error(), "{}", response.status());
    }
    common::wait_for("the budget returns to zero", || {
        let budget = budget.clone();
        async move { budget.in_use() == 0 }
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbox_body_declared_above_the_limit_is_413_before_it_is_read() {
    let h = Harness::start().await;
    let file = common::agent_file(h.dir.path(), "bob", &[], &[("handle", json!("bob"))]);
    h.client
        .post("/agents/load", Some(&json!({ "filePath": file })))
        .await
        .unwrap();
    let declared = (adf_server::mesh::MAX_BODY_BYTES + 1).to_string();
    let head = format!(
        "POST /agents/bob/inbox HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n",
        h.server.addr
    );
    let mut stream = tokio::net::TcpStream::connect(h.server.addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut first = [0u8; 12];
    stream.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 413");
    assert_eq!(h.server.public_body_budget().in_use(), 0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_host_header_is_a_bad_request_whatever_it_names() {
    let h = Harness::start().await;
    let addr = h.server.addr;
    let auth = bearer(&h);
    let own = addr.to_string();
    for (first, second) in [
        (own.as_str(), "evil.example"),
        (own.as_str(), own.as_str()),
        ("evil.example", own.as_str()),
    ] {
        let answer = send(
            addr,
            "GET",
            "/agents",
            &[("Host", first), ("Host", second), ("Authorization", &auth)],
            "",
        )
        .await;
        assert_eq!(answer.status, 400, "{first} + {second}: {}", answer.body);
        assert!(answer.json()["error"].is_string(), "{}", answer.body);
    }
    // One Host header naming the daemon still passes.
    let answer = send(addr, "GET", "/agents", &[("Authorization", &auth)], "").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_whose_config_json_is_malformed_is_a_422_and_stays_unchanged() {
    let h = Harness::start().await;
    let path = common::agent_file(h.dir.path(), "broken", &[], &[]);
    {
        let other = adf_store::test_support::OtherConnection::open(&path).unwrap();
        let malformed = r#"{"id": "broken", "name": "#;
        other.tables().set_config_text(malformed).unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let body = json!({ "filePath": path });
    for (method, route) in [
        (Method::POST, "/agents/load".to_owned()),
        (Method::POST, "/agents/review/accept".to_owned()),
        (
            Method::GET,
            format!(
                "/agents/review?filePath={}",
                encode(&path.display().to_string())
            ),
        ),
    ] {
        let body = (method == Method::POST).then_some(&body);
        let (status, answer) = h.client.raw(method.clone(), &route, body).await.unwrap();
        assert_eq!(status, 422, "{method} {route}: {answer}");
        assert_eq!(answer["code"], "AGENT_FILE_MALFORMED", "{answer}");
        assert!(
            answer["error"].as_str().unwrap().contains("not valid JSON"),
            "{answer}"
        );
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file is unchanged"
    );
    assert_eq!(loaded_count(&h).await, 0);
    h.stop().await;
}
