//! `sys_fetch` and native `fetch` against real HTTP: a small HTTP/1.1 server on `127.0.0.1:0`
//! (raw tokio, so every byte and every misbehaviour is under the test's control), the agent's
//! code in the sandbox, the model's view through the pipeline, every §5.6 address rule on
//! literal, DNS-resolved (injected names) and redirected destinations, the limits, and the
//! `adf_logs` rows (SRV-19..22, 24, 25, 27..30, COD-16, 17, 40, AUD-23).
use crate::common;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};

use adf_runtime::code::{self, CodeEnv, CodeRun, RunOptions, Sandbox, SandboxConfig};
use adf_runtime::fetch::{self, FetchSettings, Lookup};
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::builtin::fetch::SysFetch;
use adf_runtime::tools::{CallOutcome, ErrorCode, ToolCaller, ToolError, ToolRegistry};
use adf_store::AdfFile;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use common::{model, new_agent, owner_set};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

// ---------- the test server ----------

/// PNG magic plus bytes that are not UTF-8, so a lossy text decoding would show.
const PNG: &[u8] = &[
    0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0xff, 0xfe, 0x80, 0x01, 0x02,
];
/// A skill catalog: a JSON document naming installable skill packages (§5.1).
const CATALOG: &str = r#"{"skills":[{"name":"pdf-tools","description":"Read PDFs","path":"skills/pdf-tools/SKILL.md"}]}"#;
const MP3: &[u8] = &[0xff, 0xfb, 0x90, 0x64, 0x00, 0x00, 0x0f, 0xf0, 0xc3];

struct Server {
    addr: SocketAddr,
    /// Request lines served, in order.
    hits: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = hits.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, log.clone()));
            }
        });
        Server { addr, hits }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.addr.port())
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap().clone()
    }
}

async fn respond(
    socket: &mut TcpStream,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
    length: bool,
) {
    let mut head = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if length {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let _ = socket.write_all(head.as_bytes()).await;
    for chunk in body.chunks(64 * 1024) {
        if socket.write_all(chunk).await.is_err() {
            return;
        }
    }
    let _ = socket.shutdown().await;
}

async fn serve(mut socket: TcpStream, hits: Arc<Mutex<Vec<String>>>) {
    let Some(request) = adf_testkit::sockets::read_http_request(&mut socket).await else {
        return;
    };
    hits.lock()
        .unwrap()
        .push(format!("{} {}", request.method, request.target));
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((request.target.as_str(), ""));
    let ct = |t: &str| vec![("Content-Type", t.to_owned())];
    match path {
        "/json" => {
            respond(
                &mut socket,
                "200 OK",
                &ct("application/json"),
                br#"{"hello":"world"}"#,
                true,
            )
            .await
        }
        "/png" => respond(&mut socket, "200 OK", &ct("image/png"), PNG, true).await,
        "/skills/catalog.json" => {
            respond(
                &mut socket,
                "200 OK",
                &ct("application/json"),
                CATALOG.as_bytes(),
                true,
            )
            .await
        }
        "/svg" => respond(&mut socket, "200 OK", &ct("image/svg+xml"), b"<svg/>", true).await,
        "/noct" => respond(&mut socket, "200 OK", &[], b"plain words", true).await,
        "/tts" => {
            let authorized =
                request.headers.get("authorization").map(String::as_str) == Some("Bearer test-key");
            let input = serde_json::from_slice::<Value>(&request.body).unwrap_or_default();
            if request.method == "POST" && authorized && input["input"] == "Hello world" {
                respond(&mut socket, "200 OK", &ct("audio/mpeg"), MP3, true).await
            } else {
                respond(
                    &mut socket,
                    "400 Bad Request",
                    &ct("text/plain"),
                    b"bad",
                    true,
                )
                .await
            }
        }
        "/echo" => {
            let body = json!({
                "method": request.method,
                "authorization": request.headers.get("authorization"),
                "body": String::from_utf8_lossy(&request.body),
            });
            respond(
                &mut socket,
                "200 OK",
                &ct("application/json"),
                body.to_string().as_bytes(),
                true,
            )
            .await
        }
        "/redirect" => {
            let to = query.strip_prefix("to=").unwrap_or("/json").to_owned();
            respond(&mut socket, "302 Found", &[("Location", to)], b"", true).await
        }
        "/hang" => std::future::pending::<()>().await,
        _ => {
            if let Some(n) = path.strip_prefix("/chain/") {
                let n: usize = n.parse().unwrap_or(0);
                if n == 0 {
                    respond(&mut socket, "200 OK", &ct("text/plain"), b"end", true).await
                } else {
                    let to = format!("/chain/{}", n - 1);
                    respond(&mut socket, "302 Found", &[("Location", to)], b"", true).await
                }
            } else if let Some(n) = path.strip_prefix("/stream/") {
                // No Content-Length: the cap must hold while streaming.
                let body = vec![b'a'; n.parse().unwrap_or(0)];
                let headers = ct("application/octet-stream");
                respond(&mut socket, "200 OK", &headers, &body, false).await
            } else if let Some(n) = path.strip_prefix("/sized/") {
                let body = vec![b'a'; n.parse().unwrap_or(0)];
                let headers = ct("application/octet-stream");
                respond(&mut socket, "200 OK", &headers, &body, true).await
            } else {
                respond(
                    &mut socket,
                    "404 Not Found",
                    &ct("text/plain"),
                    b"nope",
                    true,
                )
                .await
            }
        }
    }
}

// ---------- helpers ----------

/// Names "resolved" from a table instead of DNS, so a name can point at a private address.
struct Names(HashMap<&'static str, Vec<IpAddr>>);

impl Lookup for Names {
    fn lookup(&self, host: &str, _port: u16) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let found = self.0.get(host).cloned();
        Box::pin(async move {
            found.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "unknown name"))
        })
    }
}

fn names(table: &[(&'static str, &[&str])]) -> FetchSettings {
    let map = table
        .iter()
        .map(|(name, ips)| (*name, ips.iter().map(|ip| ip.parse().unwrap()).collect()))
        .collect();
    FetchSettings {
        lookup: Arc::new(Names(map)),
        ..FetchSettings::default()
    }
}

fn registry_with(settings: FetchSettings) -> ToolRegistry {
    let mut registry = ToolRegistry::with_builtins();
    registry.register(Arc::new(SysFetch::with_settings(settings)));
    registry
}

async fn env_with(registry: ToolRegistry) -> CodeEnv {
    let sandbox = Sandbox::new(SandboxConfig::default()).await.unwrap();
    CodeEnv::new(sandbox, Arc::new(registry))
}

/// A `sys_fetch` call through the whole pipeline, carried out as the executor and `adf tool`
/// do (`run_detached`, which writes the log rows).
async fn call(
    registry: &ToolRegistry,
    file: &mut AdfFile,
    caller: &ToolCaller,
    args: Value,
) -> Result<Value, ToolError> {
    match registry.call(file, caller, "sys_fetch", args, &DenyAll)? {
        CallOutcome::Deferred(deferred) => registry.run_detached(file, caller, &deferred).await,
        other => panic!("sys_fetch must be deferred, got {other:?}"),
    }
}

async fn model_fetch(file: &mut AdfFile, args: Value) -> Result<Value, ToolError> {
    call(&ToolRegistry::with_builtins(), file, &model(), args).await
}

async fn inline(file: &mut AdfFile, env: &CodeEnv, source: &str) -> CodeRun {
    code::run_inline(file, env, source, false, &DenyAll, &RunOptions::default()).await
}

fn ok(run: CodeRun) -> Value {
    match run.result {
        Ok(v) => v,
        Err(e) => panic!("code failed: {e}; console: {:?}", run.logs),
    }
}

/// `(event, level, target, message, data)` of every `sys_fetch` log row.
fn fetch_logs(file: &AdfFile) -> Vec<(String, String, Option<String>, String, Value)> {
    let logs = adf_store::test_support::tables(file).logs().unwrap();
    logs.into_iter()
        .filter(|l| l.origin.as_deref() == Some("sys_fetch"))
        .map(|l| {
            let data = l.data.and_then(|d| serde_json::from_str(&d).ok());
            (
                l.event.unwrap(),
                l.level,
                l.target,
                l.message,
                data.unwrap_or(Value::Null),
            )
        })
        .collect()
}

fn events(file: &AdfFile) -> Vec<String> {
    fetch_logs(file).into_iter().map(|row| row.0).collect()
}

fn assert_refused(result: Result<Value, ToolError>, what: &str) -> ToolError {
    let error = result.expect_err(what);
    assert_eq!(error.code, ErrorCode::ToolError, "{what}: {error}");
    assert!(error.message.contains("refused"), "{what}: {error}");
    error
}

// ---------- bodies: text, binary, model and code views (SRV-29, COD-17, COD-40) ----------

#[tokio::test]
async fn srv_29_cod_17_text_json_body_from_code() {
    let server = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    let env = env_with(ToolRegistry::with_builtins()).await;
    let source = format!(
        r#"
        const res = await adf.sys_fetch({{ url: '{json}' }})
        const parsed = JSON.parse(res.body)
        const plain = await adf.sys_fetch({{ url: '{noct}' }})
        const svg = await adf.sys_fetch({{ url: '{svg}' }})
        return {{
            hello: parsed.hello, status: res.status, ok: res.ok, type: res.headers['content-type'],
            bodyType: typeof res.body, plain: plain.body, svg: svg.body, url: res.url,
        }}
        "#,
        json = server.url("/json"),
        noct = server.url("/noct"),
        svg = server.url("/svg"),
    );
    let v = ok(inline(&mut file, &env, &source).await);
    assert_eq!(v["hello"], "world");
    assert_eq!(v["status"], 200);
    assert_eq!(v["ok"], true);
    assert_eq!(v["type"], "application/json");
    assert_eq!(v["bodyType"], "string");
    // No Content-Type → text; `*+xml` → text.
    assert_eq!(v["plain"], "plain words");
    assert_eq!(v["svg"], "<svg/>");
    assert_eq!(v["url"], server.url("/json"));
    assert!(
        events(&file).is_empty(),
        "a success writes no fetch log row"
    );
}

#[tokio::test]
async fn srv_29_cod_40_binary_body_is_bytes_in_code_and_fs_write_stores_them() {
    let server = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    let env = env_with(ToolRegistry::with_builtins()).await;
    // The guide's two examples, pointed at the local server.
    let source = format!(
        r#"
        const resp = await adf.sys_fetch({{ url: '{png}' }})
        await adf.fs_write({{ mode: 'write', path: 'image.png', content: resp.body }})

        const audio = await adf.sys_fetch({{
          url: '{tts}',
          method: 'POST',
          headers: {{ 'Authorization': 'Bearer test-key', 'Content-Type': 'application/json' }},
          body: JSON.stringify({{ model: 'tts-1', input: 'Hello world', voice: 'alloy' }})
        }})
        await adf.fs_write({{ mode: 'write', path: 'speech.mp3', content: audio.body }})
        return {{
            isBytes: resp.body instanceof Uint8Array, length: resp.body.length, first: resp.body[0],
            audioStatus: audio.status, audioBytes: audio.body instanceof Uint8Array,
        }}
        "#,
        png = server.url("/png"),
        tts = server.url("/tts"),
    );
    let v = ok(inline(&mut file, &env, &source).await);
    assert_eq!(v["isBytes"], true);
    assert_eq!(v["length"], PNG.len());
    assert_eq!(v["first"], 0x89);
    assert_eq!(v["audioStatus"], 200);
    assert_eq!(v["audioBytes"], true);
    assert_eq!(file.file_read("image.png").unwrap().unwrap().content, PNG);
    assert_eq!(file.file_read("speech.mp3").unwrap().unwrap().content, MP3);
}

#[tokio::test]
async fn srv_29_model_sees_binary_as_base64_with_body_encoding() {
    let server = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    let png = model_fetch(&mut file, json!({ "url": server.url("/png") }))
        .await
        .unwrap();
    assert_eq!(png["_body_encoding"], "base64");
    assert_eq!(STANDARD.decode(png["body"].as_str().unwrap()).unwrap(), PNG);
    assert_eq!(png["status"], 200);
    assert_eq!(png["status_text"], "OK");
    assert_eq!(png["headers"]["content-type"], "image/png");

    let text = model_fetch(&mut file, json!({ "url": server.url("/json") }))
        .await
        .unwrap();
    assert_eq!(text["body"], r#"{"hello":"world"}"#);
    assert!(text.get("_body_encoding").is_none());
    let plain = model_fetch(&mut file, json!({ "url": server.url("/noct") }))
        .await
        .unwrap();
    assert_eq!(plain["body"], "plain words");
    assert!(plain.get("_body_encoding").is_none());

    // A request body and headers reach the server.
    let echo = model_fetch(
        &mut file,
        json!({ "url": server.url("/echo"), "method": "put", "body": "payload",
                "headers": { "Authorization": "Bearer x" } }),
    )
    .await
    .unwrap();
    let echoed: Value = serde_json::from_str(echo["body"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["method"], "PUT");
    assert_eq!(echoed["body"], "payload");
    assert_eq!(echoed["authorization"], "Bearer x");
}

// ---------- the §5.6 rules (SRV-19..25) ----------

#[tokio::test]
async fn srv_25_srv_21_private_and_link_local_literals_refused_by_default() {
    let (_d, _p, mut file) = new_agent();
    let urls = [
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
        "http://[::]/",
        "http://[fe80::1]/",
        "http://[::ffff:10.0.0.1]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[fd00::1]/",
        "http://224.0.0.1/",
        // WHATWG spellings of 10.0.0.1 parse to the same address.
        "http://167772161/",
        "http://0x0a.0.0.1/",
    ];
    for url in urls {
        assert_refused(model_fetch(&mut file, json!({ "url": url })).await, url);
    }
    let logs = fetch_logs(&file);
    assert_eq!(logs.len(), urls.len());
    assert!(
        logs.iter()
            .all(|(event, level, ..)| event == "rejected" && level == "warn")
    );
}

#[tokio::test]
async fn srv_21_link_local_refused_even_with_allow_local_fetch() {
    let (_d, _p, mut file) = new_agent();
    owner_set(&mut file, "security.allow_local_fetch", json!(true));
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://169.254.0.1/",
        "http://[fe80::1]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[::ffff:a9fe:a9fe]/",
    ] {
        let error = assert_refused(model_fetch(&mut file, json!({ "url": url })).await, url);
        assert!(error.message.contains("never reachable"), "{error}");
    }
}

#[tokio::test]
async fn srv_24_allow_local_fetch_true_allows_other_local_addresses() {
    let server = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    // 0.0.0.0 reaches this host's listener: refused by rule 5, allowed by rule 4.
    let unspecified = format!("http://0.0.0.0:{}/json", server.port());
    assert_refused(
        model_fetch(&mut file, json!({ "url": unspecified })).await,
        "0.0.0.0 with the flag off",
    );
    owner_set(&mut file, "security.allow_local_fetch", json!(true));
    let v = model_fetch(&mut file, json!({ "url": unspecified }))
        .await
        .unwrap();
    assert_eq!(v["body"], r#"{"hello":"world"}"#);
    // A private address passes the policy with the flag on. Tests never dial off this
    // machine: the test build's dial guard stops it after the policy said yes, naming what it
    // would have dialed, so this is the policy's decision without a packet sent.
    let private = model_fetch(&mut file, json!({ "url": "http://10.255.255.1:9/" }))
        .await
        .unwrap_err();
    assert!(
        private.message.contains("would have dialed 10.255.255.1:9"),
        "{private}"
    );
    assert!(!private.message.contains("sys_fetch refused"), "{private}");
    // Only the flag-off 0.0.0.0 attempt was a refusal.
    let events = events(&file);
    assert_eq!(
        events.iter().filter(|e| *e == "rejected").count(),
        1,
        "{events:?}"
    );
}

#[tokio::test]
async fn srv_23_own_served_origin_allowed_under_its_prefix_only() {
    let server = Server::start().await;
    // 0.0.0.0 (refused by rule 5) stands in for a served origin on a local address.
    let base = format!("http://0.0.0.0:{}", server.port());
    let policy = fetch::Policy {
        allow_local: false,
        served_origins: vec![format!("{base}/json")],
    };
    let own = fetch::fetch(
        fetch::FetchRequest::get(format!("{base}/json")),
        policy.clone(),
        FetchSettings::default(),
    )
    .await
    .unwrap();
    assert_eq!(own.status, 200);
    assert_eq!(own.body, br#"{"hello":"world"}"#);
    let other = fetch::fetch(
        fetch::FetchRequest::get(format!("{base}/png")),
        policy,
        FetchSettings::default(),
    )
    .await
    .expect_err("outside the served prefix");
    assert_eq!(other.kind, fetch::FetchErrorKind::Rejected);
    assert_eq!(other.log_event(), "rejected");
}

#[tokio::test]
async fn srv_19_checks_the_dns_resolved_address() {
    let server = Server::start().await;
    let settings = names(&[
        ("rebind.test", &["10.0.0.1"]),
        ("mixed.test", &["127.0.0.1", "10.0.0.1"]),
        ("metadata.test", &["169.254.169.254"]),
        ("mapped.test", &["::ffff:192.168.0.1"]),
        ("loop.test", &["127.0.0.1"]),
    ]);
    let registry = registry_with(settings);
    let (_d, _p, mut file) = new_agent();
    let port = server.port();
    for host in ["rebind.test", "mixed.test", "metadata.test", "mapped.test"] {
        let url = format!("http://{host}:{port}/json");
        let error = assert_refused(
            call(&registry, &mut file, &model(), json!({ "url": url })).await,
            host,
        );
        assert!(error.message.contains("resolved to"), "{error}");
    }
    assert!(server.hits().is_empty(), "no refused name was connected to");
    // A name resolving to loopback is allowed and connects to the checked address.
    let url = format!("http://loop.test:{port}/json");
    let v = call(&registry, &mut file, &model(), json!({ "url": url }))
        .await
        .unwrap();
    assert_eq!(v["status"], 200);
    // The metadata name stays refused with the flag on.
    owner_set(&mut file, "security.allow_local_fetch", json!(true));
    let url = format!("http://metadata.test:{port}/");
    assert_refused(
        call(&registry, &mut file, &model(), json!({ "url": url })).await,
        "metadata name with the flag on",
    );
}

#[tokio::test]
async fn prm_30_skill_catalogs_come_through_sys_fetch_and_its_address_rules() {
    let server = Server::start().await;
    let port = server.port();
    let registry = registry_with(names(&[
        ("catalog.test", &["127.0.0.1"]),
        ("internal-catalog.test", &["10.1.2.3"]),
    ]));
    let (_d, _p, mut file) = new_agent();
    // A catalog on an allowed host is an ordinary JSON fetch.
    let allowed = format!("http://catalog.test:{port}/skills/catalog.json");
    let v = call(&registry, &mut file, &model(), json!({ "url": allowed }))
        .await
        .unwrap();
    let catalog: Value = serde_json::from_str(v["body"].as_str().unwrap()).unwrap();
    assert_eq!(catalog["skills"][0]["name"], "pdf-tools");
    // A catalog whose name resolves to a private address, or a private literal, is refused
    // before any connection, from the model and from code alike.
    let private_name = format!("http://internal-catalog.test:{port}/skills/catalog.json");
    let private_literal = "http://192.168.10.10/skills/catalog.json";
    for url in [private_name.as_str(), private_literal] {
        assert_refused(
            call(&registry, &mut file, &model(), json!({ "url": url })).await,
            url,
        );
    }
    let env = env_with(registry).await;
    let source = format!(
        "try {{ await adf.sys_fetch({{ url: '{private_name}' }}); return 'fetched' }} catch (e) {{ return e.code }}"
    );
    assert_eq!(ok(inline(&mut file, &env, &source).await), "TOOL_ERROR");
    assert_eq!(server.hits(), ["GET /skills/catalog.json"]);
    let rejected: Vec<Option<String>> = fetch_logs(&file)
        .into_iter()
        .filter(|row| row.0 == "rejected")
        .map(|row| row.2)
        .collect();
    assert_eq!(rejected.len(), 3, "{rejected:?}");
    assert!(
        rejected
            .iter()
            .all(|t| t.as_deref().unwrap().contains("catalog"))
    );
}

#[tokio::test]
async fn srv_20_every_redirect_hop_is_checked() {
    let server = Server::start().await;
    let settings = names(&[
        ("public.test", &["127.0.0.1"]),
        ("private.test", &["192.168.1.1"]),
    ]);
    let registry = registry_with(settings);
    let (_d, _p, mut file) = new_agent();
    let port = server.port();
    for to in [
        "http://10.0.0.1/".to_owned(),
        "http://192.168.1.1/admin".to_owned(),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://private.test/".to_owned(),
    ] {
        let url = format!("http://public.test:{port}/redirect?to={to}");
        let error = assert_refused(
            call(&registry, &mut file, &model(), json!({ "url": url })).await,
            &to,
        );
        assert!(error.message.contains("after redirect 1"), "{error}");
    }
    // With the flag on, the metadata hop is still stopped.
    owner_set(&mut file, "security.allow_local_fetch", json!(true));
    let url = server.url("/redirect?to=http://169.254.169.254/");
    assert_refused(
        call(&registry, &mut file, &model(), json!({ "url": url })).await,
        "redirect to metadata with the flag on",
    );
    // A redirect to an allowed place is followed.
    let v = call(
        &registry,
        &mut file,
        &model(),
        json!({ "url": server.url("/redirect?to=/json") }),
    )
    .await
    .unwrap();
    assert_eq!(v["body"], r#"{"hello":"world"}"#);
    assert_eq!(v["url"], server.url("/json"));
}

#[tokio::test]
async fn srv_20_cross_origin_redirect_drops_credentials() {
    let first = Server::start().await;
    let second = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    let headers = json!({ "Authorization": "Bearer secret" });
    let same = model_fetch(
        &mut file,
        json!({ "url": first.url("/redirect?to=/echo"), "headers": headers }),
    )
    .await
    .unwrap();
    let same: Value = serde_json::from_str(same["body"].as_str().unwrap()).unwrap();
    assert_eq!(same["authorization"], "Bearer secret");
    let url = first.url(&format!("/redirect?to={}", second.url("/echo")));
    let other = model_fetch(&mut file, json!({ "url": url, "headers": headers }))
        .await
        .unwrap();
    let other: Value = serde_json::from_str(other["body"].as_str().unwrap()).unwrap();
    assert_eq!(other["authorization"], Value::Null);
}

/// A stand-in control API for the process: bound for the life of the test binary so its port
/// is never reused by another test's server while registered.
fn control_api() -> &'static std::net::TcpListener {
    static CONTROL: OnceLock<std::net::TcpListener> = OnceLock::new();
    CONTROL.get_or_init(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        fetch::protect_control_api(listener.local_addr().unwrap());
        listener
    })
}

#[tokio::test]
async fn srv_22_control_api_refused_on_every_loopback_spelling_even_with_the_flag() {
    let control = control_api();
    let port = control.local_addr().unwrap().port();
    let server = Server::start().await;
    let settings = names(&[("localhost", &["127.0.0.1", "::1"])]);
    let registry = registry_with(settings);
    let (_d, _p, mut file) = new_agent();
    owner_set(&mut file, "security.allow_local_fetch", json!(true));
    for host in [
        "127.0.0.1",
        "localhost",
        "127.0.0.2",
        "0.0.0.0",
        "[::1]",
        "[::]",
        "[::ffff:127.0.0.1]",
        "2130706433",
    ] {
        let url = format!("http://{host}:{port}/agents");
        let error = assert_refused(
            call(&registry, &mut file, &model(), json!({ "url": url })).await,
            host,
        );
        assert!(error.message.contains("control API"), "{error}");
    }
    // Nor through a redirect.
    let url = server.url(&format!("/redirect?to=http://127.0.0.1:{port}/agents"));
    assert_refused(
        call(&registry, &mut file, &model(), json!({ "url": url })).await,
        "redirect to the control API",
    );
    // Nothing ever connected to it.
    assert!(
        control.accept().is_err(),
        "the control API saw a connection"
    );
    // Another loopback port stays reachable.
    let v = call(
        &registry,
        &mut file,
        &model(),
        json!({ "url": server.url("/json") }),
    )
    .await
    .unwrap();
    assert_eq!(v["status"], 200);
}

// ---------- schemes, redirects, limits (SRV-27, SRV-28, [C28]) ----------

#[tokio::test]
async fn srv_27_only_http_and_https() {
    let server = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    for url in [
        "file:///etc/passwd",
        "ftp://example.com/file",
        "data:text/plain,hello",
        "gopher://example.com/",
    ] {
        let error = model_fetch(&mut file, json!({ "url": url }))
            .await
            .expect_err(url);
        assert_eq!(error.code, ErrorCode::InvalidInput, "{url}: {error}");
        assert!(error.message.contains("only http and https"), "{error}");
    }
    // Not by a redirect either.
    let error = model_fetch(
        &mut file,
        json!({ "url": server.url("/redirect?to=file:///etc/passwd") }),
    )
    .await
    .expect_err("redirect to file:");
    assert!(error.message.contains("only http and https"), "{error}");
    assert!(events(&file).iter().all(|e| e == "rejected"));
    assert_eq!(events(&file).len(), 5);
}

#[tokio::test]
async fn srv_27_c28_at_most_five_redirects() {
    let server = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    let v = model_fetch(&mut file, json!({ "url": server.url("/chain/5") }))
        .await
        .unwrap();
    assert_eq!(v["body"], "end");
    assert_eq!(v["url"], server.url("/chain/0"));
    let error = model_fetch(&mut file, json!({ "url": server.url("/chain/6") }))
        .await
        .expect_err("six redirects");
    assert_eq!(error.code, ErrorCode::ToolError);
    assert!(error.message.contains("too many redirects"), "{error}");
    assert_eq!(events(&file), ["error"]);
    // Six requests each; the sixth redirect's target (/chain/0 of the second call) was never
    // requested.
    let hits = server.hits();
    assert_eq!(
        hits.iter().filter(|h| h.starts_with("GET /chain/")).count(),
        12
    );
    assert_eq!(hits.iter().filter(|h| *h == "GET /chain/0").count(), 1);
}

#[tokio::test]
async fn srv_28_timeout_ms_bounds_the_request() {
    let server = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    let error = model_fetch(
        &mut file,
        json!({ "url": server.url("/hang"), "timeout_ms": 200 }),
    )
    .await
    .expect_err("the server never answers");
    assert_eq!(error.code, ErrorCode::Timeout);
    assert!(error.message.contains("200 ms"), "{error}");
    assert_eq!(events(&file), ["timeout"]);

    // Above the maximum is refused, not clamped; the default is 30 s.
    let error = model_fetch(
        &mut file,
        json!({ "url": server.url("/json"), "timeout_ms": 90000 }),
    )
    .await
    .expect_err("timeout_ms 90000");
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert!(error.message.contains("60000"), "{error}");
    let request = fetch::request_from_tool_args(&json!({ "url": "http://x/" })).unwrap();
    assert_eq!(request.timeout.as_millis(), 30_000);
}

#[tokio::test]
async fn srv_27_body_capped_while_streaming() {
    assert_eq!(FetchSettings::default().max_body_bytes, 25 * 1024 * 1024);
    let server = Server::start().await;
    let registry = registry_with(FetchSettings {
        max_body_bytes: 1024,
        ..FetchSettings::default()
    });
    let (_d, _p, mut file) = new_agent();
    let at_cap = call(
        &registry,
        &mut file,
        &model(),
        json!({ "url": server.url("/stream/1024") }),
    )
    .await
    .unwrap();
    assert_eq!(
        STANDARD
            .decode(at_cap["body"].as_str().unwrap())
            .unwrap()
            .len(),
        1024
    );
    for path in ["/stream/1025", "/stream/300000", "/sized/5000"] {
        let error = call(
            &registry,
            &mut file,
            &model(),
            json!({ "url": server.url(path) }),
        )
        .await
        .expect_err(path);
        assert_eq!(error.code, ErrorCode::ToolError);
        assert!(error.message.contains("1024-byte cap"), "{error}");
    }
    assert_eq!(events(&file), ["error", "error", "error"]);
}

/// Stores an authorized lambda file as the owner.
fn put_authorized(file: &mut AdfFile, path: &str, source: &str) {
    file.file_write(
        adf_store::Caller::Owner,
        path,
        source.as_bytes(),
        &adf_store::FileWrite::default(),
    )
    .unwrap();
    file.file_set_authorized(adf_store::Caller::Owner, path, true)
        .unwrap();
}

const FETCH_MIDDLEWARE: &str = r#"
export async function gate(input) {
  if (input.data.url.includes('/json')) {
    return { reject: { code: 403, reason: 'no JSON for you: ' + input.point } }
  }
}
export async function marker(input) {
  await adf.fs_write({ path: 'ran/marker.txt', content: 'ran', mode: 'write' })
}
export async function rewrite(input) {
  await adf.fs_write({ path: 'seen/fetch.json', content: JSON.stringify(input), mode: 'write' })
  const data = { ...input.data, url: input.meta.target ?? input.data.url.replace('/png', '/echo'),
                 method: 'POST', body: 'from middleware', headers: { authorization: 'Bearer mw' } }
  return { data }
}
export async function toControl(input) {
  return { meta: { target: input.data.url.replace(/:\d+\//, ':' + input.data.headers['x-port'] + '/') } }
}
"#;

#[tokio::test]
async fn srv_30_srv_15_fetch_middleware_rejection_is_the_sys_fetch_error_and_stops_the_chain() {
    let server = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    put_authorized(&mut file, "lib/mw.ts", FETCH_MIDDLEWARE);
    owner_set(
        &mut file,
        "security.fetch_middleware",
        json!([{ "lambda": "lib/mw.ts:gate" }, { "lambda": "lib/mw.ts:marker" }]),
    );
    owner_set(&mut file, "code_execution.network", json!(true));
    let error = model_fetch(&mut file, json!({ "url": server.url("/json") }))
        .await
        .expect_err("middleware rejects");
    assert_eq!(error.code, ErrorCode::ToolError);
    assert!(error.message.contains("no JSON for you: fetch"), "{error}");
    assert!(error.message.contains("403"), "{error}");
    assert!(server.hits().is_empty());
    assert!(
        file.file_read("ran/marker.txt").unwrap().is_none(),
        "the second middleware never ran"
    );

    // What the chain lets through is fetched, after every middleware ran.
    let fetched = model_fetch(&mut file, json!({ "url": server.url("/noct") }))
        .await
        .unwrap();
    assert_eq!(fetched["body"], "plain words");
    assert!(file.file_read("ran/marker.txt").unwrap().is_some());

    // Code's sys_fetch meets the same chain.
    let env = env_with(ToolRegistry::with_builtins()).await;
    let source = format!(
        "try {{ await adf.sys_fetch({{ url: '{}' }}); return 'fetched' }} catch (e) {{ return e.message }}",
        server.url("/json")
    );
    let v = ok(inline(&mut file, &env, &source).await);
    assert!(v.as_str().unwrap().contains("no JSON for you"), "{v}");
    // Native fetch does not run the chain, so it stays refused while one is configured.
    let source = format!(
        "try {{ await fetch('{}'); return 'fetched' }} catch (e) {{ return e.message }}",
        server.url("/noct")
    );
    let v = ok(inline(&mut file, &env, &source).await);
    assert!(v.as_str().unwrap().contains("fetch_middleware"), "{v}");
    assert_eq!(server.hits().len(), 1, "{:?}", server.hits());
}

#[tokio::test]
async fn srv_30_srv_17_srv_18_fetch_middleware_gets_the_parameters_and_its_changes_are_the_request()
{
    let server = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    put_authorized(&mut file, "lib/mw.ts", FETCH_MIDDLEWARE);
    owner_set(
        &mut file,
        "security.fetch_middleware",
        json!([{ "lambda": "lib/mw.ts:rewrite" }]),
    );
    let echoed = model_fetch(&mut file, json!({ "url": server.url("/png") }))
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(echoed["body"].as_str().unwrap()).unwrap(),
        json!({ "method": "POST", "authorization": "Bearer mw", "body": "from middleware" })
    );
    assert_eq!(server.hits().len(), 1);
    let seen: Value =
        serde_json::from_slice(&file.file_read("seen/fetch.json").unwrap().unwrap().content)
            .unwrap();
    assert_eq!(
        seen,
        json!({ "point": "fetch", "data": { "url": server.url("/png") }, "meta": {} })
    );

    // A URL the middleware chose still meets the address rules: here the control API.
    let control = control_api().local_addr().unwrap();
    owner_set(
        &mut file,
        "security.fetch_middleware",
        json!([{ "lambda": "lib/mw.ts:toControl" }, { "lambda": "lib/mw.ts:rewrite" }]),
    );
    let refused = model_fetch(
        &mut file,
        json!({ "url": server.url("/png"), "headers": { "x-port": control.port().to_string() } }),
    )
    .await;
    assert_refused(refused, "the control API");
    assert_eq!(server.hits().len(), 1);

    // Parameters sys_fetch does not take are refused.
    file.file_write(
        adf_store::Caller::Owner,
        "lib/bad.ts",
        b"export async function main(input) { return { data: { url: 42 } } }",
        &adf_store::FileWrite::default(),
    )
    .unwrap();
    file.file_set_authorized(adf_store::Caller::Owner, "lib/bad.ts", true)
        .unwrap();
    owner_set(
        &mut file,
        "security.fetch_middleware",
        json!([{ "lambda": "lib/bad.ts:main" }]),
    );
    let error = model_fetch(&mut file, json!({ "url": server.url("/noct") }))
        .await
        .expect_err("bad parameters");
    assert_eq!(error.code, ErrorCode::InvalidInput, "{error}");
    assert_eq!(server.hits().len(), 1);
}

// ---------- native fetch (COD-16) ----------

#[tokio::test]
async fn cod_16_native_fetch_is_undefined_without_network() {
    let server = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    let env = env_with(ToolRegistry::with_builtins()).await;
    let source = format!(
        "const kind = typeof fetch
         try {{ await fetch('{}'); return 'fetched' }} catch (e) {{ return {{ kind, name: e.name }} }}",
        server.url("/json")
    );
    let v = ok(inline(&mut file, &env, &source).await);
    assert_eq!(v, json!({ "kind": "undefined", "name": "ReferenceError" }));
    assert!(server.hits().is_empty());
}

#[tokio::test]
async fn cod_16_srv_19_native_fetch_with_network_works_and_is_guarded() {
    let server = Server::start().await;
    let control = control_api().local_addr().unwrap();
    let (_d, _p, mut file) = new_agent();
    owner_set(&mut file, "code_execution.network", json!(true));
    let env = env_with(ToolRegistry::with_builtins()).await;
    let source = format!(
        r#"
        const r = await fetch('{json}')
        const data = await r.json()
        const img = await (await fetch('{png}')).bytes()
        const post = await (await fetch('{echo}', {{ method: 'POST', body: 'hi' }})).json()
        const refused = []
        for (const url of ['http://169.254.169.254/latest/meta-data/', 'http://10.0.0.1/',
                           '{redirect}', 'http://localhost:{control}/', 'http://[::ffff:192.168.0.1]/']) {{
          try {{ await fetch(url); refused.push('fetched ' + url) }}
          catch (e) {{ refused.push(e.code) }}
        }}
        return {{ hello: data.hello, ok: r.ok, status: r.status, type: r.headers.get('content-type'),
                 imgLen: img.length, imgFirst: img[0], post, refused }}
        "#,
        json = server.url("/json"),
        png = server.url("/png"),
        echo = server.url("/echo"),
        redirect = server.url("/redirect?to=http://10.0.0.1/"),
        control = control.port(),
    );
    let v = ok(inline(&mut file, &env, &source).await);
    assert_eq!(v["hello"], "world");
    assert_eq!(v["ok"], true);
    assert_eq!(v["status"], 200);
    assert_eq!(v["type"], "application/json");
    assert_eq!(v["imgLen"], PNG.len());
    assert_eq!(v["imgFirst"], 0x89);
    assert_eq!(v["post"]["method"], "POST");
    assert_eq!(v["post"]["body"], "hi");
    assert_eq!(v["refused"], json!(vec!["TOOL_ERROR"; 5]));
    let logs = fetch_logs(&file);
    assert_eq!(logs.len(), 5);
    assert!(
        logs.iter()
            .all(|(event, _, _, _, data)| event == "rejected" && data["via"] == "fetch")
    );
}

// ---------- log rows (AUD-23) ----------

#[tokio::test]
async fn aud_23_sys_fetch_log_rows_for_rejected_error_and_timeout_without_secrets() {
    let server = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    let env = env_with(ToolRegistry::with_builtins()).await;
    // From code (the runner writes the rows) ...
    let source = format!(
        r#"
        const codes = []
        for (const args of [
          {{ url: 'http://10.0.0.1/?key=SECRET-KEY' }},
          {{ url: '{chain}' }},
          {{ url: '{hang}?token=SECRET-TOKEN', timeout_ms: 100 }},
        ]) {{
          try {{ await adf.sys_fetch(args); codes.push('ok') }} catch (e) {{ codes.push(e.code) }}
        }}
        return codes
        "#,
        chain = server.url("/chain/9"),
        hang = server.url("/hang"),
    );
    let v = ok(inline(&mut file, &env, &source).await);
    assert_eq!(v, json!(["TOOL_ERROR", "TOOL_ERROR", "TIMEOUT"]));
    // ... and from the model (run_detached writes them).
    model_fetch(&mut file, json!({ "url": "http://192.168.0.1/" }))
        .await
        .unwrap_err();
    let logs = fetch_logs(&file);
    let events: Vec<&str> = logs.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(events, ["rejected", "error", "timeout", "rejected"]);
    assert_eq!(logs[0].2.as_deref(), Some("http://10.0.0.1/"));
    assert_eq!(logs[0].4["via"], "sys_fetch");
    assert_eq!(logs[0].4["method"], "GET");
    for (event, level, target, message, data) in &logs {
        let all = format!("{event} {level} {target:?} {message} {data}");
        assert!(!all.contains("SECRET"), "a secret reached the log: {all}");
    }
}

#[tokio::test]
async fn aud_16_async_sys_fetch_from_code_returns_a_running_task_that_completes() {
    let server = Server::start().await;
    let (_d, _p, mut file) = new_agent();
    let env = env_with(ToolRegistry::with_builtins()).await;
    let source = format!(
        "const task = await adf.sys_fetch({{ url: '{}', _async: true }})\nreturn task",
        server.url("/json")
    );
    let task = ok(inline(&mut file, &env, &source).await);
    assert_eq!(
        task["status"], "running",
        "the call returns at once: {task}"
    );
    assert_eq!(task["tool"], "sys_fetch");
    // The run reports only after its background tasks ended, so the row is final.
    let row = file
        .task(task["task_id"].as_str().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(row.status, "completed", "{row:?}");
    let result: Value = serde_json::from_str(row.result.as_deref().unwrap()).unwrap();
    assert_eq!(result["status"], 200);
    assert!(result["body"].as_str().unwrap().contains("world"));
}
