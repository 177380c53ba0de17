//! `adf conform daemon` against a stub daemon (a tiny HTTP server on 127.0.0.1:0 in this
//! test): wrong shapes, wrong codes and broken SSE framing fail the rows that judge them, and
//! the kit aims agent-scoped requests only at the scratch agent it loaded. Our real daemon
//! passes in adf-cli's `conform` tests (it needs the `adf` binary).

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use adf_conform::Status;
use adf_conform::daemon::{DAEMON_CHECKS, check_daemon};

/// Answers like a conforming daemon except where `wrong` says; records every request line.
struct Stub {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

const SCRATCH_ID: &str = "scratch123";

fn answer(method: &str, path: &str, wrong: bool) -> (u16, &'static str, String) {
    let json = "application/json";
    let path_only = path.split('?').next().unwrap_or(path);
    let ok = |body: &str| (200, json, body.to_owned());
    let err = |code: u16| (code, json, r#"{"error":"nope"}"#.to_owned());
    if path_only == "/events" && path.contains("since=abc") {
        return err(400);
    }
    if path_only == "/events" {
        let frame = if wrong {
            // `id:` disagrees with the cursor and data is not the {cursor, event} object.
            ": connected\n\nid: 7\nevent: agent.loaded\ndata: {\"cursor\":1}\n\n".to_owned()
        } else {
            ": connected\n\nid: 1\nevent: agent.loaded\ndata: {\"cursor\":1,\"event\":{\"event_type\":\"agent.loaded\",\"timestamp\":1,\"source\":\"system:lifecycle\",\"agent_id\":\"scratch123\",\"payload\":{},\"seq\":1}}\n\n".to_owned()
        };
        return (200, "text/event-stream", frame);
    }
    let agent = format!("/agents/{SCRATCH_ID}");
    match (method, path_only) {
        ("GET", "/health") if wrong => ok(r#"{"ok":"yes"}"#),
        ("GET", "/health") => ok(r#"{"ok":true}"#),
        ("GET", "/openapi.json") => ok(r#"{"openapi":"3.0.0","paths":{}}"#),
        ("GET", "/diagnostics") => ok(r#"{"daemon":{"uptime":1.5,"pid":1},"agents":[]}"#),
        ("GET", "/runtime/providers") => ok(r#"{"providers":[]}"#),
        ("GET", "/runtime/auth") => ok(
            r#"{"chatgpt":{"authenticated":false},"grok":{"authenticated":false},"providers":[]}"#,
        ),
        ("GET", "/runtime/usage") => ok(r#"{"source":"x","note":"y"}"#),
        ("GET", "/runtime/settings") => {
            ok(r#"{"configured":true,"trackedDirectories":[],"maxDirectoryScanDepth":5}"#)
        }
        ("GET", p) if p.starts_with("/settings/") => ok(r#"{"key":"k","value":null}"#),
        ("GET", "/agents") => {
            ok(r#"[{"id":"scratch123","filePath":"/x","name":"n","handle":"h","autostart":false}]"#)
        }
        ("POST", "/agents/load") if path == "/agents/load" => (0, json, String::new()),
        (_, p) if p.starts_with(&agent) => scratch_answer(method, &p[agent.len()..], wrong),
        _ => err(404),
    }
}

fn scratch_answer(method: &str, rest: &str, wrong: bool) -> (u16, &'static str, String) {
    let json = "application/json";
    let ok = |body: &str| (200, json, body.to_owned());
    let err = |code: u16| (code, json, r#"{"error":"nope"}"#.to_owned());
    let success = r#"{"agentId":"scratch123","success":true}"#;
    match (method, rest) {
        ("GET", "/status") => ok(
            r#"{"id":"scratch123","filePath":"/x","name":"n","handle":"h","autostart":false,"loopCount":0,"runtimeState":"idle","targetState":null}"#,
        ),
        ("GET", "/runtime") => ok(r#"{"agentId":"scratch123","status":{}}"#),
        ("GET", "/triggers") => ok(
            r#"{"agentId":"scratch123","displayState":"idle","configured":[{"type":"on_chat","enabled":true,"targetCount":1}]}"#,
        ),
        ("GET", "/loop") => {
            ok(r#"{"agentId":"scratch123","total":0,"limit":3,"offset":0,"entries":[]}"#)
        }
        ("GET", "/chat") => ok(r#"{"agentId":"scratch123","chatHistory":{}}"#),
        ("POST", "/chat" | "/trigger" | "/state") => err(400),
        ("PUT", "/files/content") => ok(success),
        // A conforming daemon answers 404 for a missing file; the wrong stub answers 200.
        ("GET", "/files/content") if rest.is_empty() => err(404),
        ("GET", "/files") if wrong => ok(
            r#"{"agentId":"scratch123","files":[{"path":"a","size":"12","mime_type":"text/plain","protection":"none","authorized":false}]}"#,
        ),
        ("GET", "/files") => ok(
            r#"{"agentId":"scratch123","files":[{"path":"a","size":12,"mime_type":"text/plain","protection":"none","authorized":false}]}"#,
        ),
        ("POST", "/files/rename") => ok(success),
        ("PATCH", "/files/protection") => err(400),
        ("GET", "/document" | "/mind") => ok(r#"{"agentId":"scratch123","content":"x"}"#),
        ("GET", "/inbox" | "/outbox") => ok(r#"{"agentId":"scratch123","messages":[]}"#),
        ("POST", "/timers") => ok(r#"{"agentId":"scratch123","success":true,"id":1}"#),
        ("GET", "/timers") => {
            ok(r#"{"agentId":"scratch123","timers":[{"id":1,"schedule":{},"next_wake_at":5}]}"#)
        }
        (m, "/meta/conform_color") if m != "GET" => ok(success),
        ("GET", "/meta") => ok(
            r#"{"agentId":"scratch123","entries":[{"key":"k","value":"v","protection":"none"}]}"#,
        ),
        ("GET", "/tasks") => ok(r#"{"agentId":"scratch123","tasks":[]}"#),
        ("GET", "/tasks/adf-conform-nope") if wrong => {
            ok(r#"{"agentId":"scratch123","task":null}"#)
        }
        ("GET", "/tasks/adf-conform-nope") => err(404),
        ("GET", "/asks") => ok(r#"{"agentId":"scratch123","asks":[]}"#),
        ("GET", "/logs" | "/logs/after") => ok(r#"{"agentId":"scratch123","logs":[]}"#),
        ("GET", "/tables") => ok(r#"{"agentId":"scratch123","tables":[]}"#),
        ("GET", "/tables/adf_inbox") => err(500),
        ("GET", "/identities") => ok(r#"{"agentId":"scratch123","identities":[]}"#),
        ("GET", "/identity") => ok(r#"{"agentId":"scratch123","purposes":[]}"#),
        ("GET", "/identity/did") => ok(r#"{"agentId":"scratch123","did":""}"#),
        ("GET", "/identity/password") => {
            ok(r#"{"agentId":"scratch123","needsPassword":false,"unlocked":false}"#)
        }
        ("GET", "/usage") => ok(r#"{"agentId":"scratch123","source":"adf_loop"}"#),
        ("POST", "/unload") => ok(r#"{"success":true}"#),
        _ => err(404),
    }
}

/// Files the stub answers for `GET /files/content?path=…`.
fn file_content(path: &str) -> Option<String> {
    let query = path.split_once("path=")?.1;
    match query {
        "conform/new.md" => Some(r#"{"agentId":"scratch123","path":"conform/new.md","mime_type":"text/markdown","size":8,"protection":"none","authorized":false,"created_at":"t","updated_at":"t","content":"hi there"}"#.to_owned()),
        "conform/x.bin" => Some(r#"{"agentId":"scratch123","path":"conform/x.bin","size":4,"content_base64":"AAECAw=="}"#.to_owned()),
        _ => None,
    }
}

fn serve(stream: TcpStream, wrong: bool, seen: &Mutex<Vec<String>>) {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        if header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    seen.lock().unwrap().push(format!("{method} {path}"));
    let (mut status, mut kind, mut text) = answer(&method, &path, wrong);
    if method == "POST" && path == "/agents/load" {
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        (status, kind, text) = match body.get("filePath") {
            Some(_) => (
                200,
                "application/json",
                format!(r#"{{"id":"{SCRATCH_ID}"}}"#),
            ),
            None => (
                400,
                "application/json",
                r#"{"error":"filePath is required"}"#.to_owned(),
            ),
        };
    }
    // Bad input the kit sends on purpose: a bogus inbox filter, a bogus timer mode.
    if path.contains("status=bogus")
        || (method == "POST" && String::from_utf8_lossy(&body).contains("\"bogus\""))
    {
        (status, kind, text) = (
            400,
            "application/json",
            r#"{"error":"bad input"}"#.to_owned(),
        );
    }
    if method == "GET" && path.starts_with(&format!("/agents/{SCRATCH_ID}/files/content")) {
        (status, kind, text) = match file_content(&path) {
            Some(found) => (200, "application/json", found),
            None => (
                404,
                "application/json",
                r#"{"error":"Unknown file"}"#.to_owned(),
            ),
        };
    }
    let mut stream = stream;
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        text.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(text.as_bytes());
}

fn stub(wrong: bool) -> Stub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        // Bounded: the kit sends one request per row plus the load; a few hundred is plenty.
        for stream in listener.incoming().take(500) {
            let Ok(stream) = stream else { return };
            serve(stream, wrong, &log);
        }
    });
    Stub { url, seen }
}

#[test]
fn a_stub_answering_like_the_reference_passes_every_row() {
    let stub = stub(false);
    let report = check_daemon(&stub.url, None).unwrap();
    assert_eq!(
        report.failures(),
        Vec::<&str>::new(),
        "{}",
        report.to_human()
    );
    assert_eq!(report.results.len(), DAEMON_CHECKS.len());
    assert!(report.results.iter().all(|r| r.status == Status::Pass));
}

#[test]
fn a_stub_answering_wrong_shapes_fails_exactly_the_rows_judging_them() {
    let stub = stub(true);
    let report = check_daemon(&stub.url, None).unwrap();
    assert_eq!(
        report.failures(),
        [
            "daemon.health",
            "files.list",
            "tasks.unknown",
            "events.sse_framing"
        ],
        "{}",
        report.to_human()
    );
    let detail = |name: &str| report.result(name).unwrap().detail.clone();
    assert!(detail("daemon.health").contains("$.ok is string, expected boolean"));
    assert!(detail("files.list").contains("$.files[0].size is string, expected number"));
    assert!(detail("tasks.unknown").contains("status 200 (expected 404)"));
    assert!(detail("events.sse_framing").contains("data.event is missing"));
    assert!(detail("events.sse_framing").contains("differs from data.cursor"));
}

#[test]
fn agent_scoped_requests_name_only_the_scratch_agent_and_it_is_unloaded() {
    let stub = stub(false);
    check_daemon(&stub.url, None).unwrap();
    let seen = stub.seen.lock().unwrap().clone();
    let agents: BTreeSet<&str> = seen
        .iter()
        .filter_map(|line| line.split_whitespace().nth(1)?.strip_prefix("/agents/"))
        .filter_map(|rest| rest.split(['/', '?']).next())
        .filter(|name| !["load"].contains(name))
        .collect();
    // The unknown-agent row names an id no agent has, by design.
    assert_eq!(
        agents,
        BTreeSet::from([SCRATCH_ID, "adf-conform-no-such-agent"])
    );
    assert_eq!(
        seen.iter()
            .filter(|l| l.starts_with("POST /agents/load"))
            .count(),
        2,
        "the scratch load and the missing-filePath row"
    );
    assert_eq!(
        seen.last().unwrap(),
        &format!("POST /agents/{SCRATCH_ID}/unload")
    );
}

#[test]
fn a_daemon_refusing_the_scratch_agent_skips_the_agent_rows_with_the_reason() {
    // Nothing but 404s: the load fails, agent rows skip, global rows fail on their own.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(200) {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 404 X\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}");
        }
    });
    let report = check_daemon(&url, None).unwrap();
    let scratch_rows: Vec<_> = DAEMON_CHECKS.iter().filter(|c| c.scratch).collect();
    for row in &scratch_rows {
        let result = report.result(row.name).unwrap();
        assert_eq!(result.status, Status::Skip, "{}", row.name);
        assert!(
            result
                .detail
                .contains("POST /agents/load of the scratch agent answered 404")
        );
    }
    assert_eq!(report.result("daemon.health").unwrap().status, Status::Fail);
    assert!(report.failed());
}
