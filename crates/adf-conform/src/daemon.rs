//! `adf conform daemon`: the daemon API's operations (the reference's OpenAPI and recorded
//! transcripts, `testdata/daemon-openapi.json`, `testdata/daemon-transcripts/`) against a live
//! daemon — status codes, JSON shapes, error shapes, SSE framing.
//!
//! The kit creates its own scratch agent file (a fresh file in a private temporary directory),
//! loads it with `POST /agents/load`, aims every agent-scoped request at that agent's id and
//! unloads it at the end; it never sends a request naming another agent. The daemon must be
//! able to read the scratch file's path, so it runs on this machine (a remote daemon gets the
//! agent-scoped rows skipped, with the reason).
//!
//! A row is data: method, path (`{id}` = the scratch agent), body, the status expected and a
//! JSON skeleton of the required shape (`"string"`, `"number"`, `"boolean"`, `"array"`,
//! `"object"`, `"null"`, `"any"`, nested objects, `[element]` for arrays). Extra keys are
//! allowed: runtimes may add fields. Where the reference answered bad input with a 500, rows
//! expect [`Expect::Error`] (any 4xx/5xx with the error shape) so that a runtime answering
//! the more precise 4xx is not marked down for it.

use std::time::{Duration, Instant};

use adf_store::{AdfFile, CreateOptions};
use serde_json::{Value, json};

use crate::{CheckResult, ConformError, Outcome, Report, Status};

/// The status a row expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Exactly this code.
    Code(u16),
    /// Any 4xx or 5xx (the reference answered some bad input with 500, others with 400).
    Error,
}

/// What a row does.
#[derive(Debug, Clone, Copy)]
pub enum Probe {
    /// One request and the expected answer.
    Exchange {
        /// HTTP method.
        method: &'static str,
        /// Path and query; `{id}` is the scratch agent's id.
        path: &'static str,
        /// JSON body, if any.
        body: Option<&'static str>,
        /// Expected status.
        expect: Expect,
        /// JSON skeleton of the required shape.
        shape: &'static str,
    },
    /// The event stream's framing (`GET /events`).
    EventStream,
}

/// One row of the daemon table.
#[derive(Debug)]
pub struct DaemonCheck {
    /// Stable name.
    pub name: &'static str,
    /// The operations (`openapi:method /path`, lowercase as OpenAPI keys them) it judges.
    pub ids: &'static [&'static str],
    /// Report section.
    pub section: &'static str,
    /// The requirement.
    pub description: &'static str,
    /// Whether it needs the scratch agent.
    pub scratch: bool,
    /// What it does.
    pub probe: Probe,
}

const ERROR_SHAPE: &str = r#"{"error":"string"}"#;
const SUCCESS_SHAPE: &str = r#"{"agentId":"string","success":"boolean"}"#;

macro_rules! row {
    ($name:literal, $op:literal, $section:literal, $desc:literal, $scratch:literal,
     $method:ident $path:literal, $body:expr, $expect:expr, $shape:expr) => {
        DaemonCheck {
            name: $name,
            ids: &[$op],
            section: $section,
            description: $desc,
            scratch: $scratch,
            probe: Probe::Exchange {
                method: stringify!($method),
                path: $path,
                body: $body,
                expect: $expect,
                shape: $shape,
            },
        }
    };
}

/// Every daemon check, in the order they run (writes before the reads that see them).
pub const DAEMON_CHECKS: &[DaemonCheck] = &[
    row!("daemon.health", "openapi:get /health", "daemon", "health answers {ok}", false,
        GET "/health", None, Expect::Code(200), r#"{"ok":"boolean"}"#),
    row!("daemon.openapi", "openapi:get /openapi.json", "daemon", "the OpenAPI document is served", false,
        GET "/openapi.json", None, Expect::Code(200), r#"{"openapi":"string","paths":"object"}"#),
    row!("daemon.diagnostics", "openapi:get /diagnostics", "daemon", "diagnostics carry daemon uptime/pid and agents", false,
        GET "/diagnostics", None, Expect::Code(200),
        r#"{"daemon":{"uptime":"number","pid":"number"},"agents":"array"}"#),
    row!("daemon.runtime_providers", "openapi:get /runtime/providers", "daemon", "provider list", false,
        GET "/runtime/providers", None, Expect::Code(200), r#"{"providers":"array"}"#),
    row!("daemon.runtime_auth", "openapi:get /runtime/auth", "daemon", "auth status per provider", false,
        GET "/runtime/auth", None, Expect::Code(200),
        r#"{"chatgpt":{"authenticated":"boolean"},"grok":{"authenticated":"boolean"},"providers":"array"}"#),
    row!("daemon.runtime_usage", "openapi:get /runtime/usage", "daemon", "aggregated usage", false,
        GET "/runtime/usage", None, Expect::Code(200), r#"{"source":"string","note":"string"}"#),
    row!("daemon.runtime_settings", "openapi:get /runtime/settings", "daemon", "runtime settings view", false,
        GET "/runtime/settings", None, Expect::Code(200),
        r#"{"configured":"boolean","trackedDirectories":"array","maxDirectoryScanDepth":"number"}"#),
    row!("daemon.setting_unknown", "openapi:get /settings/{key}", "daemon", "an unknown setting answers {key, value}", false,
        GET "/settings/adfConformNoSuchKey", None, Expect::Code(200), r#"{"key":"string","value":"any"}"#),
    row!("daemon.events_bad_since", "openapi:get /events", "errors", "a non-integer since is a 400 with the error shape", false,
        GET "/events?since=abc", None, Expect::Code(400), ERROR_SHAPE),
    row!("agents.list", "openapi:get /agents", "agents", "agent list entries carry id, filePath, name, handle, autostart", false,
        GET "/agents", None, Expect::Code(200),
        r#"[{"id":"string","filePath":"string","name":"string","handle":"string","autostart":"boolean"}]"#),
    row!("agents.load_requires_path", "openapi:post /agents/load", "errors", "load without filePath is a 400", false,
        POST "/agents/load", Some("{}"), Expect::Code(400), ERROR_SHAPE),
    row!("agents.status_unknown", "openapi:get /agents/{id}/status", "errors", "an unknown agent is a 404 with the error shape", false,
        GET "/agents/adf-conform-no-such-agent/status", None, Expect::Code(404), ERROR_SHAPE),
    row!("agents.status", "openapi:get /agents/{id}/status", "agents", "agent status fields", true,
        GET "/agents/{id}/status", None, Expect::Code(200),
        r#"{"id":"string","filePath":"string","name":"string","handle":"string","autostart":"boolean","loopCount":"number","runtimeState":"string","targetState":"any"}"#),
    row!("agents.runtime", "openapi:get /agents/{id}/runtime", "agents", "agent runtime view", true,
        GET "/agents/{id}/runtime", None, Expect::Code(200), r#"{"agentId":"string","status":"object"}"#),
    row!("agents.triggers", "openapi:get /agents/{id}/triggers", "agents", "configured triggers", true,
        GET "/agents/{id}/triggers", None, Expect::Code(200),
        r#"{"agentId":"string","displayState":"string","configured":[{"type":"string","enabled":"boolean","targetCount":"number"}]}"#),
    row!("agents.loop", "openapi:get /agents/{id}/loop", "agents", "a transcript page", true,
        GET "/agents/{id}/loop?limit=3", None, Expect::Code(200),
        r#"{"agentId":"string","total":"number","limit":"number","offset":"number","entries":"array"}"#),
    row!("agents.chat", "openapi:get /agents/{id}/chat", "agents", "chat history", true,
        GET "/agents/{id}/chat?limit=4", None, Expect::Code(200), r#"{"agentId":"string","chatHistory":"object"}"#),
    row!("agents.chat_requires_text", "openapi:post /agents/{id}/chat", "errors", "chat without text is a 400", true,
        POST "/agents/{id}/chat", Some("{}"), Expect::Code(400), ERROR_SHAPE),
    row!("agents.trigger_bad_type", "openapi:post /agents/{id}/trigger", "errors", "an unknown trigger type is a 400", true,
        POST "/agents/{id}/trigger", Some(r#"{"type":"not_a_type"}"#), Expect::Code(400), ERROR_SHAPE),
    row!("agents.state_bad", "openapi:post /agents/{id}/state", "errors", "an unknown state is a 400", true,
        POST "/agents/{id}/state", Some(r#"{"state":"thinking"}"#), Expect::Code(400), ERROR_SHAPE),
    row!("files.put_text", "openapi:put /agents/{id}/files/content", "files", "writing a text file answers success", true,
        PUT "/agents/{id}/files/content?path=conform/new.md", Some(r#"{"content":"hi there","protection":"none"}"#),
        Expect::Code(200), SUCCESS_SHAPE),
    row!("files.get_text", "openapi:get /agents/{id}/files/content", "files", "reading it back gives metadata and content", true,
        GET "/agents/{id}/files/content?path=conform/new.md", None, Expect::Code(200),
        r#"{"agentId":"string","path":"string","mime_type":"string","size":"number","protection":"string","authorized":"boolean","created_at":"string","updated_at":"string","content":"string"}"#),
    row!("files.put_binary", "openapi:put /agents/{id}/files/content", "files", "writing base64 content answers success", true,
        PUT "/agents/{id}/files/content?path=conform/x.bin", Some(r#"{"content_base64":"AAECAw==","mime_type":"application/octet-stream"}"#),
        Expect::Code(200), SUCCESS_SHAPE),
    row!("files.get_binary", "openapi:get /agents/{id}/files/content", "files", "binary content comes back as content_base64", true,
        GET "/agents/{id}/files/content?path=conform/x.bin", None, Expect::Code(200),
        r#"{"agentId":"string","path":"string","size":"number","content_base64":"string"}"#),
    row!("files.list", "openapi:get /agents/{id}/files", "files", "file list entries", true,
        GET "/agents/{id}/files", None, Expect::Code(200),
        r#"{"agentId":"string","files":[{"path":"string","size":"number","mime_type":"string","protection":"string","authorized":"boolean"}]}"#),
    row!("files.missing", "openapi:get /agents/{id}/files/content", "errors", "a missing file is a 404", true,
        GET "/agents/{id}/files/content?path=conform/missing.md", None, Expect::Code(404), ERROR_SHAPE),
    row!("files.rename", "openapi:post /agents/{id}/files/rename", "files", "rename answers success", true,
        POST "/agents/{id}/files/rename", Some(r#"{"oldPath":"conform/new.md","newPath":"conform/renamed.md"}"#),
        Expect::Code(200), SUCCESS_SHAPE),
    row!("files.protection_bad", "openapi:patch /agents/{id}/files/protection", "errors", "an unknown protection is a 400", true,
        PATCH "/agents/{id}/files/protection", Some(r#"{"path":"conform/renamed.md","protection":"bogus"}"#),
        Expect::Code(400), ERROR_SHAPE),
    row!("files.document", "openapi:get /agents/{id}/document", "files", "README content", true,
        GET "/agents/{id}/document", None, Expect::Code(200), r#"{"agentId":"string","content":"string"}"#),
    row!("files.mind", "openapi:get /agents/{id}/mind", "files", "mind.md content", true,
        GET "/agents/{id}/mind", None, Expect::Code(200), r#"{"agentId":"string","content":"string"}"#),
    row!("messages.inbox", "openapi:get /agents/{id}/inbox", "messages", "inbox list", true,
        GET "/agents/{id}/inbox", None, Expect::Code(200), r#"{"agentId":"string","messages":"array"}"#),
    row!("messages.inbox_bad_status", "openapi:get /agents/{id}/inbox", "errors", "an unknown status filter is a 400", true,
        GET "/agents/{id}/inbox?status=bogus", None, Expect::Code(400), ERROR_SHAPE),
    row!("messages.outbox", "openapi:get /agents/{id}/outbox", "messages", "outbox list", true,
        GET "/agents/{id}/outbox", None, Expect::Code(200), r#"{"agentId":"string","messages":"array"}"#),
    row!("timers.create", "openapi:post /agents/{id}/timers", "timers", "creating a timer answers its id", true,
        POST "/agents/{id}/timers", Some(r#"{"mode":"once_delay","delay_ms":600000,"scope":["agent"],"payload":"conform"}"#),
        Expect::Code(200), r#"{"agentId":"string","success":"boolean","id":"number"}"#),
    row!("timers.list", "openapi:get /agents/{id}/timers", "timers", "timer list entries", true,
        GET "/agents/{id}/timers", None, Expect::Code(200),
        r#"{"agentId":"string","timers":[{"id":"number","schedule":"object","next_wake_at":"number"}]}"#),
    row!("timers.bad_mode", "openapi:post /agents/{id}/timers", "errors", "an unknown timer mode is an error (reference: 500)", true,
        POST "/agents/{id}/timers", Some(r#"{"mode":"bogus"}"#), Expect::Error, ERROR_SHAPE),
    row!("meta.put", "openapi:put /agents/{id}/meta/{key}", "meta", "setting a meta key answers success", true,
        PUT "/agents/{id}/meta/conform_color", Some(r#"{"value":"blue","protection":"none"}"#),
        Expect::Code(200), SUCCESS_SHAPE),
    row!("meta.list", "openapi:get /agents/{id}/meta", "meta", "meta entries carry key, value, protection", true,
        GET "/agents/{id}/meta", None, Expect::Code(200),
        r#"{"agentId":"string","entries":[{"key":"string","value":"string","protection":"string"}]}"#),
    row!("meta.delete", "openapi:delete /agents/{id}/meta/{key}", "meta", "deleting a meta key answers success", true,
        DELETE "/agents/{id}/meta/conform_color", None, Expect::Code(200), SUCCESS_SHAPE),
    row!("tasks.list", "openapi:get /agents/{id}/tasks", "tasks", "task list", true,
        GET "/agents/{id}/tasks", None, Expect::Code(200), r#"{"agentId":"string","tasks":"array"}"#),
    row!("tasks.unknown", "openapi:get /agents/{id}/tasks/{taskId}", "errors", "an unknown task is a 404", true,
        GET "/agents/{id}/tasks/adf-conform-nope", None, Expect::Code(404), ERROR_SHAPE),
    row!("tasks.asks", "openapi:get /agents/{id}/asks", "tasks", "pending asks", true,
        GET "/agents/{id}/asks", None, Expect::Code(200), r#"{"agentId":"string","asks":"array"}"#),
    row!("logs.list", "openapi:get /agents/{id}/logs", "logs", "log page", true,
        GET "/agents/{id}/logs?limit=3", None, Expect::Code(200), r#"{"agentId":"string","logs":"array"}"#),
    row!("logs.after", "openapi:get /agents/{id}/logs/after", "logs", "logs after an id", true,
        GET "/agents/{id}/logs/after?afterId=1", None, Expect::Code(200), r#"{"agentId":"string","logs":"array"}"#),
    row!("tables.list", "openapi:get /agents/{id}/tables", "tables", "table list", true,
        GET "/agents/{id}/tables", None, Expect::Code(200), r#"{"agentId":"string","tables":[{"name":"string","row_count":"number"}]}"#),
    row!("tables.system_refused", "openapi:get /agents/{id}/tables/{table}", "errors", "a system table is refused (reference: 500)", true,
        GET "/agents/{id}/tables/adf_inbox", None, Expect::Error, ERROR_SHAPE),
    row!("identity.identities", "openapi:get /agents/{id}/identities", "identity", "identity rows without values", true,
        GET "/agents/{id}/identities", None, Expect::Code(200),
        r#"{"agentId":"string","identities":[{"purpose":"string","encrypted":"boolean","code_access":"boolean"}]}"#),
    row!("identity.purposes", "openapi:get /agents/{id}/identity", "identity", "identity purposes", true,
        GET "/agents/{id}/identity", None, Expect::Code(200), r#"{"agentId":"string","purposes":"array"}"#),
    row!("identity.did", "openapi:get /agents/{id}/identity/did", "identity", "the agent's DID", true,
        GET "/agents/{id}/identity/did", None, Expect::Code(200), r#"{"agentId":"string","did":"any"}"#),
    row!("identity.password", "openapi:get /agents/{id}/identity/password", "identity", "password state", true,
        GET "/agents/{id}/identity/password", None, Expect::Code(200),
        r#"{"agentId":"string","needsPassword":"boolean","unlocked":"boolean"}"#),
    row!("agents.usage", "openapi:get /agents/{id}/usage", "agents", "per-agent usage", true,
        GET "/agents/{id}/usage", None, Expect::Code(200), r#"{"agentId":"string","source":"string"}"#),
    DaemonCheck {
        name: "events.sse_framing",
        ids: &["openapi:get /events"],
        section: "events",
        description: "the event stream is text/event-stream with `:` comments and id/event/data frames whose data is an event object",
        scratch: true,
        probe: Probe::EventStream,
    },
    row!("agents.unload", "openapi:post /agents/{id}/unload", "agents", "unloading the scratch agent answers 200", true,
        POST "/agents/{id}/unload", None, Expect::Code(200), "any"),
];

/// How long the kit reads the event stream for frames.
const SSE_WINDOW: Duration = Duration::from_secs(3);

struct Session {
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
    base: String,
    token: Option<String>,
}

struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

impl Session {
    fn call(&self, method: &str, path: &str, body: Option<&str>) -> Result<Answer, String> {
        let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        self.runtime.block_on(async {
            let response = request.send().await.map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            let content_type = content_type(&response);
            let body = response.text().await.map_err(|e| e.to_string())?;
            Ok(Answer {
                status,
                content_type,
                body,
            })
        })
    }

    /// Reads the event stream for [`SSE_WINDOW`] (or until 64 KiB) and returns what came.
    fn stream(&self, path: &str) -> Result<Answer, String> {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        self.runtime.block_on(async {
            let mut response = request.send().await.map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            let content_type = content_type(&response);
            let deadline = Instant::now() + SSE_WINDOW;
            let mut bytes = Vec::new();
            while bytes.len() < 64 * 1024 {
                let left = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, response.chunk()).await {
                    Ok(Ok(Some(chunk))) => bytes.extend_from_slice(&chunk),
                    Ok(Ok(None)) | Err(_) => break,
                    Ok(Err(e)) => return Err(e.to_string()),
                }
            }
            Ok(Answer {
                status,
                content_type,
                body: String::from_utf8_lossy(&bytes).into_owned(),
            })
        })
    }
}

fn content_type(response: &reqwest::Response) -> String {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// Judges the daemon at `url` (its API token in `token`, if it needs one).
pub fn check_daemon(url: &str, token: Option<&str>) -> Result<Report, ConformError> {
    let base = url.trim_end_matches('/').to_owned();
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(ConformError::BadUrl(format!(
            "{url} is not an http(s) URL of a daemon"
        )));
    }
    adf_egress::client::ensure_crypto_provider();
    let client = adf_egress::client::service_client(adf_egress::client::ClientOptions {
        timeout: None,
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_secs(30)),
    })
    .map_err(|e| ConformError::Client(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let session = Session {
        runtime,
        client,
        base,
        token: token.map(str::to_owned),
    };
    let scratch_dir = tempfile::tempdir()?;
    let scratch = load_scratch(&session, scratch_dir.path());
    let mut results = Vec::new();
    let mut unloaded = false;
    for check in DAEMON_CHECKS {
        let outcome = match (&scratch, check.scratch) {
            (Err(why), true) => Outcome::skip(why.clone()),
            (Ok(id), _) => judge(&session, check, id),
            (Err(_), false) => judge(&session, check, ""),
        };
        if check.name == "agents.unload" && outcome.status == Status::Pass {
            unloaded = true;
        }
        results.push(CheckResult {
            name: check.name,
            ids: check.ids,
            section: check.section,
            description: check.description,
            status: outcome.status,
            detail: outcome.detail,
        });
    }
    if let (Ok(id), false) = (&scratch, unloaded) {
        // The unload row failed: still try once, so the scratch agent does not stay loaded.
        let _ignored = session.call("POST", &format!("/agents/{id}/unload"), None);
    }
    Ok(Report {
        subject: "daemon",
        target: session.base.clone(),
        results,
    })
}

/// Creates and loads the scratch agent; its id, or why the agent-scoped rows cannot run.
fn load_scratch(session: &Session, dir: &std::path::Path) -> Result<String, String> {
    let path = dir.join("adf-conform-scratch.adf");
    let options = CreateOptions {
        name: Some("adf-conform scratch".into()),
        description: Some("created by adf conform daemon; unloaded when it ends".into()),
        handle: None,
        id: None,
    };
    AdfFile::create(&path, &options)
        .and_then(AdfFile::close)
        .map_err(|e| format!("could not create the scratch agent file: {e}"))?;
    let body = json!({ "filePath": path.display().to_string() }).to_string();
    let answer = session
        .call("POST", "/agents/load", Some(&body))
        .map_err(|e| format!("could not load the scratch agent: {e}"))?;
    let value: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
    match (answer.status, value.get("id").and_then(Value::as_str)) {
        (200, Some(id)) => Ok(id.to_owned()),
        (status, _) => Err(format!(
            "POST /agents/load of the scratch agent answered {status} {}: the daemon must run on this machine to read the file the kit creates",
            truncate(&answer.body)
        )),
    }
}

fn judge(session: &Session, check: &DaemonCheck, id: &str) -> Outcome {
    match check.probe {
        Probe::Exchange {
            method,
            path,
            body,
            expect,
            shape,
        } => {
            let path = path.replace("{id}", id);
            match session.call(method, &path, body) {
                Err(e) => Outcome::fail(format!("{method} {path}: {e}")),
                Ok(answer) => judge_exchange(&answer, expect, shape),
            }
        }
        Probe::EventStream => match session.stream(&format!("/events?agentId={id}&since=0")) {
            Err(e) => Outcome::fail(format!("GET /events: {e}")),
            Ok(answer) => judge_event_stream(&answer),
        },
    }
}

fn judge_exchange(answer: &Answer, expect: Expect, shape: &str) -> Outcome {
    let status_ok = match expect {
        Expect::Code(code) => answer.status == code,
        Expect::Error => answer.status >= 400,
    };
    if !status_ok {
        let wanted = match expect {
            Expect::Code(code) => code.to_string(),
            Expect::Error => "4xx/5xx".to_owned(),
        };
        return Outcome::fail(format!(
            "status {} (expected {wanted}): {}",
            answer.status,
            truncate(&answer.body)
        ));
    }
    if shape == "any" {
        return Outcome::pass();
    }
    if !answer.content_type.starts_with("application/json") {
        return Outcome::fail(format!(
            "content-type is '{}', not application/json",
            answer.content_type
        ));
    }
    let Ok(value) = serde_json::from_str::<Value>(&answer.body) else {
        return Outcome::fail(format!("body is not JSON: {}", truncate(&answer.body)));
    };
    let Ok(skeleton) = serde_json::from_str::<Value>(shape) else {
        return Outcome::fail(format!(
            "the kit's own shape for this row is not JSON: {shape}"
        ));
    };
    let mut problems = Vec::new();
    shape_problems(&value, &skeleton, "$", &mut problems);
    Outcome::from_problems(problems)
}

/// Compares `value` against the skeleton; every required key and type, extra keys allowed.
pub fn shape_problems(value: &Value, skeleton: &Value, at: &str, problems: &mut Vec<String>) {
    match skeleton {
        Value::String(kind) => {
            let ok = match kind.as_str() {
                "string" => value.is_string(),
                "number" => value.is_number(),
                "boolean" => value.is_boolean(),
                "array" => value.is_array(),
                "object" => value.is_object(),
                "null" => value.is_null(),
                _ => true,
            };
            if !ok {
                problems.push(format!("{at} is {}, expected {kind}", kind_of(value)));
            }
        }
        Value::Object(fields) => {
            let Some(object) = value.as_object() else {
                problems.push(format!("{at} is {}, expected object", kind_of(value)));
                return;
            };
            for (key, inner) in fields {
                match object.get(key) {
                    None => problems.push(format!("{at}.{key} is missing")),
                    Some(found) => shape_problems(found, inner, &format!("{at}.{key}"), problems),
                }
            }
        }
        Value::Array(element) => {
            let Some(items) = value.as_array() else {
                problems.push(format!("{at} is {}, expected array", kind_of(value)));
                return;
            };
            if let Some(element) = element.first() {
                for (index, item) in items.iter().enumerate() {
                    shape_problems(item, element, &format!("{at}[{index}]"), problems);
                }
            }
        }
        _ => {}
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// SSE framing (the reference's `sse-raw-agent.txt`): blocks separated by a blank line; lines
/// are `: comment`, `id: …`, `event: …` or `data: …`; each data is `{cursor, event}` with the
/// cursor equal to `id:` and `event.event_type` equal to `event:`.
fn judge_event_stream(answer: &Answer) -> Outcome {
    if answer.status != 200 {
        return Outcome::fail(format!(
            "status {}: {}",
            answer.status,
            truncate(&answer.body)
        ));
    }
    if !answer.content_type.starts_with("text/event-stream") {
        return Outcome::fail(format!(
            "content-type is '{}', not text/event-stream",
            answer.content_type
        ));
    }
    if answer.body.is_empty() {
        return Outcome::fail(format!(
            "nothing arrived within {} s (the reference sends `: connected` at once)",
            SSE_WINDOW.as_secs()
        ));
    }
    let mut problems = Vec::new();
    // The last block may be cut by the read window; judge complete blocks only.
    let complete = match answer.body.rfind("\n\n") {
        Some(end) => &answer.body[..end],
        None => "",
    };
    if complete.is_empty() {
        problems.push("no complete SSE block (a block ends with a blank line)".to_owned());
    }
    for block in complete.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut data = String::new();
        let mut id = None;
        let mut event_name = None;
        for line in block.lines() {
            if line.starts_with(':') {
                continue;
            }
            match line.split_once(':') {
                Some(("data", rest)) => data.push_str(rest.strip_prefix(' ').unwrap_or(rest)),
                Some(("id", rest)) => id = Some(rest.trim().to_owned()),
                Some(("event", rest)) => event_name = Some(rest.trim().to_owned()),
                Some(("retry", _)) => {}
                _ => problems.push(format!("not an SSE field line: {}", truncate(line))),
            }
        }
        if data.is_empty() {
            continue;
        }
        let Ok(frame) = serde_json::from_str::<Value>(&data) else {
            problems.push(format!("data is not JSON: {}", truncate(&data)));
            continue;
        };
        shape_problems(&frame, &event_frame_shape(), "data", &mut problems);
        let cursor = frame.get("cursor").map(Value::to_string);
        if id.is_some() && cursor != id {
            problems.push(format!("id: {id:?} differs from data.cursor {cursor:?}"));
        }
        let event_type = frame
            .pointer("/event/event_type")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if event_name.is_some() && event_type != event_name {
            problems.push(format!(
                "event: {event_name:?} differs from data.event.event_type {event_type:?}"
            ));
        }
    }
    Outcome::from_problems(problems)
}

/// One frame's data (the reference's `sse-raw-agent.txt`): the cursor and the event object.
fn event_frame_shape() -> Value {
    json!({
        "cursor": "number",
        "event": {
            "event_type": "string",
            "timestamp": "number",
            "source": "string",
            "agent_id": "any",
            "payload": "any",
            "seq": "number"
        }
    })
}

fn truncate(text: &str) -> String {
    let mut out: String = text.chars().take(200).collect();
    if text.chars().count() > 200 {
        out.push('…');
    }
    out
}
