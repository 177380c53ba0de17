//! Schemathesis-style fuzzing of the daemon's own OpenAPI document: for every operation the
//! served `/openapi.json` lists, a deterministic battery of malformed requests (bad and
//! missing JSON, wrong types, huge strings, NUL bytes, unknown ids, paths to non-ADF files and
//! to directories, wrong content types), sent with the token. No answer may be a 5xx, except a
//! 503 the operation documents and the 501 `NOT_SUPPORTED` of an operation documented as such.

use crate::common;

use std::time::Duration;

use serde_json::{Value, json};

use adf_server::client::encode;
use common::Harness;

/// Values for path and query parameters; `{file}`-style markers are replaced per run.
fn parameter_values(real_id: &str, paths: &Paths) -> Vec<String> {
    vec![
        real_id.to_owned(),
        "nope".to_owned(),
        String::new(),
        "a\0b".to_owned(),
        "../../etc/passwd".to_owned(),
        "-1".to_owned(),
        "99999999999999999999".to_owned(),
        "true".to_owned(),
        "x".repeat(8 * 1024),
        "ü🙂\u{7f}".to_owned(),
        paths.text.clone(),
        paths.fake_adf.clone(),
        paths.directory.clone(),
        paths.agent.clone(),
    ]
}

struct Paths {
    text: String,
    fake_adf: String,
    directory: String,
    agent: String,
}

/// JSON values of every type, and the hostile strings.
fn odd_values(paths: &Paths) -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(0),
        json!(-1),
        json!(1e308),
        json!(u64::MAX),
        json!(""),
        json!("\u{0}"),
        // Every field at once stays under the 2 MB body limit.
        json!("x".repeat(48 * 1024)),
        json!([]),
        json!([1, "a", null]),
        json!(["\u{0}"]),
        json!({}),
        json!({ "nested": { "deep": [1] } }),
        json!(paths.text),
        json!(paths.fake_adf),
        json!(paths.directory),
    ]
}

/// Body fields the daemon's operations read.
const FIELDS: &[&str] = &[
    "filePath",
    "requireReview",
    "trackedDirs",
    "maxDepth",
    "path",
    "content",
    "content_base64",
    "mime_type",
    "protection",
    "authorized",
    "value",
    "action",
    "reason",
    "modifiedArgs",
    "text",
    "loop",
    "state",
    "answer",
    "resume",
    "mode",
    "delay_ms",
    "every_ms",
    "at",
    "cron",
    "scope",
    "payload",
    "lambda",
    "event",
    "type",
    "data",
    "meshPort",
    "trackedDirectories",
];

/// Raw bodies: not JSON, not an object, or JSON of the wrong shape.
fn raw_bodies() -> Vec<String> {
    [
        "",
        "{",
        "[]",
        "null",
        "42",
        "\"text\"",
        "{}",
        "{\"a\":",
        "\u{0}",
        "{\"x\":1}",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

fn bodies(paths: &Paths) -> Vec<String> {
    let mut bodies = raw_bodies();
    let odd = odd_values(paths);
    // Every field at once with the same odd value, so handlers get past their first check.
    for value in &odd {
        let object: serde_json::Map<String, Value> = FIELDS
            .iter()
            .map(|f| ((*f).to_owned(), value.clone()))
            .collect();
        bodies.push(Value::Object(object).to_string());
    }
    // One field at a time, with a few of the values.
    let some = [
        json!(5),
        json!("\u{0}"),
        json!([]),
        json!({}),
        json!(paths.fake_adf),
        json!(paths.directory),
    ];
    for field in FIELDS {
        for value in &some {
            bodies.push(json!({ *field: value }).to_string());
        }
    }
    bodies
}

struct Target {
    method: String,
    template: String,
    query: Vec<String>,
    documented_503: bool,
    documented_501: bool,
}

fn targets(doc: &Value) -> Vec<Target> {
    let mut out = Vec::new();
    for (path, methods) in doc["paths"].as_object().unwrap() {
        for (method, op) in methods.as_object().unwrap() {
            let query = op["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["in"] == "query")
                .map(|p| p["name"].as_str().unwrap().to_owned())
                .collect();
            out.push(Target {
                method: method.to_uppercase(),
                template: path.clone(),
                query,
                documented_503: op["responses"].get("503").is_some(),
                documented_501: op["responses"].get("501").is_some(),
            });
        }
    }
    out
}

/// The template with every `{param}` replaced by `value` (the agent's id for `{id}` unless the
/// value is meant for it).
fn fill(template: &str, id: &str, other: &str) -> String {
    template
        .split('/')
        .map(|segment| match segment {
            "{id}" => encode(id),
            s if s.starts_with('{') => encode(other),
            s => s.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// What came back: the status (`None` when the connection closed without an answer, as a
/// panicking handler would leave it) and the head and start of the body, for the report.
struct Exchanged {
    status: Option<u16>,
    head: String,
}

/// One request written by hand, its body sent while the answer is read: a server may answer
/// (413, 400, 415...) before it has read a body, and the status must still be seen.
async fn exchange(
    addr: std::net::SocketAddr,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&(&'static str, String)>,
) -> Exchanged {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n"
    )
    .into_bytes();
    match body {
        Some((content_type, body)) => {
            request.extend_from_slice(
                format!(
                    "Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            );
            request.extend_from_slice(body.as_bytes());
        }
        None if method != "GET" => request.extend_from_slice(b"Content-Length: 0\r\n\r\n"),
        None => request.extend_from_slice(b"\r\n"),
    }
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let writing = tokio::spawn(async move {
        // The server may close early; what it answered is read below either way.
        let _ = writer.write_all(&request).await;
        writer
    });
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    // The head, and a little of the body; an event stream never ends, so stop there.
    while received.len() < 2048 {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
        }
        if received.windows(4).any(|w| w == b"\r\n\r\n") && received.len() > 512 {
            break;
        }
        if path.starts_with("/events") && received.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    writing.abort();
    let head = String::from_utf8_lossy(&received).into_owned();
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok());
    Exchanged { status, head }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_operations_answer_malformed_requests_without_server_errors() {
    let h = Harness::start().await;
    let dir = h.dir.path();
    let agent = common::agent_file(
        dir,
        "fuzzed",
        &[("notes/a.md", "hello")],
        &[("handle", json!("fuzzed"))],
    );
    let text = dir.join("agents/notes.txt");
    std::fs::write(&text, "plain text\n").unwrap();
    let fake_adf = dir.join("agents/fake.adf");
    std::fs::write(&fake_adf, "not sqlite").unwrap();
    let paths = Paths {
        text: text.display().to_string(),
        fake_adf: fake_adf.display().to_string(),
        directory: dir.join("agents").display().to_string(),
        agent: agent.display().to_string(),
    };
    let load = json!({ "filePath": agent });
    let loaded = h.client.post("/agents/load", Some(&load)).await.unwrap();
    let id = loaded["id"].as_str().unwrap().to_owned();

    let doc = h.client.get("/openapi.json").await.unwrap();
    let params = parameter_values(&id, &paths);
    let bodies = bodies(&paths);
    let mut failures = Vec::new();
    let mut sent = 0usize;
    for target in targets(&doc) {
        let mutating = target.method != "GET";
        let mut requests: Vec<(String, Option<(&'static str, String)>)> = Vec::new();
        // Path parameters, one at a time (the agent's id elsewhere).
        for value in &params {
            requests.push((fill(&target.template, value, "x"), None));
            requests.push((fill(&target.template, &id, value), None));
        }
        // Query parameters, one at a time.
        let path = fill(&target.template, &id, "x");
        for name in &target.query {
            for value in &params {
                requests.push((format!("{path}?{name}={}", encode(value)), None));
            }
            requests.push((format!("{path}?{name}=%ZZ&{name}=2"), None));
        }
        if mutating {
            let query: String = target
                .query
                .iter()
                .map(|name| format!("{name}=notes%2Fa.md"))
                .collect::<Vec<_>>()
                .join("&");
            let with_query = if query.is_empty() {
                path.clone()
            } else {
                format!("{path}?{query}")
            };
            for body in &bodies {
                requests.push((with_query.clone(), Some(("application/json", body.clone()))));
            }
            requests.push((with_query.clone(), Some(("text/plain", "{}".to_owned()))));
            requests.push((
                with_query,
                Some(("application/x-www-form-urlencoded", "a=1".to_owned())),
            ));
        }
        for (url_path, body) in requests {
            sent += 1;
            // A failure guard: a request that hangs fails the test instead of blocking it.
            let answer = tokio::time::timeout(
                Duration::from_secs(60),
                exchange(
                    h.server.addr,
                    &h.token,
                    &target.method,
                    &url_path,
                    body.as_ref(),
                ),
            )
            .await
            .unwrap_or_else(|_| panic!("{} {url_path} hung", target.method));
            let allowed = match answer.status {
                Some(status) => {
                    status < 500
                        || (status == 503 && target.documented_503)
                        || (status == 501 && target.documented_501)
                }
                None => false,
            };
            if !allowed {
                let shown: String = body
                    .map(|(_, b)| b.chars().take(120).collect())
                    .unwrap_or_default();
                failures.push(format!(
                    "{} {} body={shown:?}: {:?} {}",
                    target.method,
                    url_path.chars().take(160).collect::<String>(),
                    answer.status,
                    answer.head.chars().take(300).collect::<String>()
                ));
            }
        }
        // Stop, unload or a deleted file must not starve the next operation of its agent.
        let _ = h
            .client
            .raw(reqwest::Method::POST, "/agents/load", Some(&load))
            .await;
    }
    assert!(sent > 5000, "only {sent} requests were sent");
    assert!(
        failures.is_empty(),
        "{} server errors:\n{}",
        failures.len(),
        failures.join("\n")
    );
    h.stop().await;
}
