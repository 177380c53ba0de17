//! The daemon's client commands as separate processes against a real `adf daemon` child
//! process (HTTP on 127.0.0.1, an ephemeral port) whose agent talks to an `adf-testkit`
//! OpenAI-compatible server: `chat` starts a turn, `asks` shows the question it waits on,
//! `answer` answers it, `tasks`/`approve` settle an approval, and `abort` ends a turn that is
//! waiting, leaving the agent usable.
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use adf_store::{AdfFile, ConfigAction, CreateOptions};
use adf_testkit::{MockProvider, Turn};
use serde_json::{Value, json};

use crate::common::DaemonProcess;

/// A running `adf daemon` with one agent in its own temp dir.
struct Daemon {
    process: DaemonProcess,
    home: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Daemon {
    type Target = DaemonProcess;
    fn deref(&self) -> &DaemonProcess {
        &self.process
    }
}

fn agent_file(dir: &Path, mock: &MockProvider) -> PathBuf {
    let path = dir.join("helper.adf");
    let mut file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    for (p, v) in [
        ("model.provider", json!(mock.base_url())),
        ("model.model_id", json!("local-model")),
        ("handle", json!("helper")),
    ] {
        file.config_set_path(adf_store::Caller::Owner, p, ConfigAction::Set, v)
            .unwrap();
    }
    file.close().unwrap();
    path
}

fn start(mock: &MockProvider) -> Daemon {
    start_with(mock, &[])
}

/// `adf daemon --port 0 ARGS helper.adf`.
fn start_with(mock: &MockProvider, args: &[&str]) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let file = agent_file(dir.path(), mock);
    let process = DaemonProcess::start(&home, args, &file);
    Daemon {
        process,
        home,
        _dir: dir,
    }
}

/// Runs a client command; its JSON output.
fn client(daemon: &Daemon, args: &[&str]) -> Value {
    let out = Process::new(assert_cmd::cargo::cargo_bin("adf"))
        .env("ADF_HOME", &daemon.home)
        .env_remove("ADF_DAEMON_TOKEN")
        .args(args)
        .args(["--url", &daemon.url, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "adf {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// The daemon's event stream, read by `adf events --json` (a child process) line by line.
struct Events {
    child: Child,
    frames: mpsc::Receiver<Value>,
}

impl Drop for Events {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Follows the daemon's events (it runs one agent); the stream replays the daemon's ring first,
/// so nothing published before the command connects is missed.
fn events(daemon: &Daemon) -> Events {
    let mut child = Process::new(assert_cmd::cargo::cargo_bin("adf"))
        .env("ADF_HOME", &daemon.home)
        .args(["events", "--url", &daemon.url, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (sender, frames) = mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let frame = serde_json::from_str(&line).unwrap_or(Value::Null);
            if sender.send(frame).is_err() {
                break;
            }
        }
    });
    Events { child, frames }
}

impl Events {
    /// Reads the stream up to the next event of `event_type`. The timeout only turns a hang
    /// into a failure: each read waits for the daemon to publish.
    fn next_of(&self, event_type: &str) -> Value {
        loop {
            let frame = self
                .frames
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("no {event_type} event: {e}"));
            if frame["event"]["event_type"] == event_type {
                return frame["event"].clone();
            }
        }
    }
}

/// Returns once the mock has received `count` requests (a failure after a minute, not a
/// timing assumption: the wait ends on the request's arrival).
async fn requests_arrived(mock: &MockProvider, count: usize) {
    tokio::time::timeout(Duration::from_secs(60), mock.requests_arrived(count))
        .await
        .unwrap_or_else(|_| panic!("the mock never received {count} requests"));
}

fn request_text(mock: &MockProvider, i: usize) -> String {
    serde_json::to_string(&mock.requests()[i].body).unwrap()
}

// The client commands block the test thread; the mock serves on the runtime's other worker.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_and_answer_settle_a_question_the_daemon_turn_waits_on() {
    let mock = MockProvider::openai().await;
    mock.push_all([
        Turn::tool_call("ask", json!({"question": "Which colour?"})),
        Turn::text("Green it is."),
    ]);
    let daemon = start(&mock);
    let events = events(&daemon);
    client(&daemon, &["chat", "helper", "Pick a colour"]);
    let requested = events.next_of("ask.requested");
    let asks = client(&daemon, &["asks", "helper"]);
    assert!(
        asks["asks"].as_array().is_some_and(|a| !a.is_empty()),
        "{asks}"
    );
    assert_eq!(asks["asks"][0]["question"], "Which colour?");
    let request = asks["asks"][0]["requestId"].as_str().unwrap().to_owned();
    assert_eq!(requested["payload"]["request_id"], request.as_str());
    let answered = client(&daemon, &["answer", "helper", &request, "green", "please"]);
    assert_eq!(answered["answered"], true, "{answered}");
    // The model's next request carries the answer as the ask's result.
    requests_arrived(&mock, 2).await;
    assert!(request_text(&mock, 1).contains("green please"));
    events.next_of("ask.resolved");
    let asks = client(&daemon, &["asks", "helper"]);
    assert!(asks["asks"].as_array().is_some_and(Vec::is_empty), "{asks}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_ends_a_waiting_turn_and_the_agent_takes_the_next_chat() {
    let mock = MockProvider::openai().await;
    mock.push_all([
        Turn::tool_call("ask", json!({"question": "Still there?"})),
        Turn::text("Back to work."),
    ]);
    let daemon = start(&mock);
    let events = events(&daemon);
    client(&daemon, &["chat", "helper", "Check in"]);
    events.next_of("ask.requested");
    let asks = client(&daemon, &["asks", "helper"]);
    assert!(
        asks["asks"].as_array().is_some_and(|a| !a.is_empty()),
        "{asks}"
    );
    client(&daemon, &["abort", "helper"]);
    let resolved = events.next_of("ask.resolved");
    assert_eq!(resolved["payload"]["has_response"], false, "{resolved}");
    let asks = client(&daemon, &["asks", "helper"]);
    assert!(asks["asks"].as_array().is_some_and(Vec::is_empty), "{asks}");
    // The agent is still loaded and runs the next chat (the second scripted turn).
    client(&daemon, &["chat", "helper", "Carry on"]);
    requests_arrived(&mock, 2).await;
    let next = request_text(&mock, 1);
    assert!(next.contains("Carry on"), "{next}");
    let status = client(&daemon, &["status", "helper"]);
    assert_eq!(status["handle"], "helper", "{status}");
}

/// `GET path` with no token, written by hand: the status code.
fn status_without_token(daemon: &Daemon, path: &str) -> u16 {
    use std::io::{Read as _, Write as _};
    let authority = daemon.url.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_the_daemons_token_from_its_home_and_rm_needs_force() {
    let mock = MockProvider::openai().await;
    let daemon = start(&mock);
    // The daemon on loopback requires its token ...
    assert_eq!(status_without_token(&daemon, "/agents"), 401);
    let token = std::fs::read_to_string(daemon.home.join("daemon-token")).unwrap();
    assert_eq!(token.trim().len(), 64);
    // The printed login link is a one-time code, never the token.
    assert!(
        daemon
            .login
            .contains(&format!("{}/login?code=", daemon.url)),
        "{}",
        daemon.login
    );
    assert!(!daemon.login.contains(token.trim()), "{}", daemon.login);
    // ... and the client commands of the same home send it with no flag.
    let agents = client(&daemon, &["agents"]);
    assert_eq!(agents[0]["handle"], "helper", "{agents}");
    let refused = Process::new(assert_cmd::cargo::cargo_bin("adf"))
        .env("ADF_HOME", &daemon.home)
        .env_remove("ADF_DAEMON_TOKEN")
        .args(["--url", &daemon.url, "rm", "helper", "README.md"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--force"), "{stderr}");
    let files = client(&daemon, &["files", "helper"]);
    assert!(
        files["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == "README.md"),
        "{files}"
    );
    client(&daemon, &["rm", "helper", "README.md", "--force"]);
    let files = client(&daemon, &["files", "helper"]);
    assert!(
        !files["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == "README.md"),
        "{files}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_loopback_serves_tokenless_clients_and_is_refused_off_loopback() {
    let mock = MockProvider::openai().await;
    let daemon = start_with(&mock, &["--insecure-loopback"]);
    assert_eq!(status_without_token(&daemon, "/agents"), 200);
    refused(
        &daemon.home,
        &[
            "daemon",
            "--port",
            "0",
            "--host",
            "0.0.0.0",
            "--insecure-loopback",
        ],
        "loopback",
    );
}

/// The JSON a command printed; it must have succeeded.
fn json_output(output: &std::process::Output) -> Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Runs `adf ARGS` with `home` as `ADF_HOME`; it must fail with `why` in its error.
fn refused(home: &Path, args: &[&str], why: &str) {
    let output = Process::new(assert_cmd::cargo::cargo_bin("adf"))
        .env("ADF_HOME", home)
        .args(args)
        .output()
        .unwrap();
    assert!(!output.status.success(), "adf {args:?} succeeded");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(why), "{stderr}");
}

#[test]
fn bench_turns_json_reports_finished_turns() {
    let home = tempfile::tempdir().unwrap();
    let output = assert_cmd::Command::cargo_bin("adf")
        .unwrap()
        .env("ADF_HOME", home.path())
        .env("TMPDIR", home.path())
        .args([
            "bench",
            "turns",
            "--agents",
            "1",
            "--seconds",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    let report = json_output(&output);
    assert!(report["turns"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["provider"], "mirror");
    assert_eq!(report["agents"], 1);
    // The temporary agent folder is removed when the run ends.
    let left: Vec<_> = std::fs::read_dir(home.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("adf-bench-turns-")
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `adf bench http` sends exactly the requests its schedule holds (rate × seconds), counts
/// answers by status class, and loads only this machine: an address elsewhere is refused
/// before any connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_http_sends_the_scheduled_requests_and_counts_their_answers() {
    let mock = MockProvider::start(adf_testkit::Wire::OpenAi).await;
    let daemon = start(&mock);
    let bench = |path: &str, rate: &str| {
        let output = Process::new(assert_cmd::cargo::cargo_bin("adf"))
            .args(["bench", "http", &format!("{}{path}", daemon.url)])
            .args(["--rate", rate, "--seconds", "1", "--warmup", "0"])
            .args(["--connections", "4", "--json"])
            .output()
            .unwrap();
        json_output(&output)
    };
    let health = bench("/health", "200");
    assert_eq!(health["scheduled"], 200, "{health}");
    assert_eq!(health["ok"], 200, "{health}");
    assert_eq!(health["non_2xx"], 0, "{health}");
    assert_eq!(health["failed"], 0, "{health}");
    let latency = &health["latency_ms"];
    let (p50, max) = (
        latency["p50"].as_f64().unwrap(),
        latency["max"].as_f64().unwrap(),
    );
    assert!(p50 > 0.0 && p50 <= max, "{health}");
    // The control API without a token answers 401: counted, not failed.
    let unauthorized = bench("/agents", "50");
    assert_eq!(unauthorized["scheduled"], 50, "{unauthorized}");
    assert_eq!(unauthorized["non_2xx"], 50, "{unauthorized}");
    assert_eq!(unauthorized["ok"], 0, "{unauthorized}");

    refused(
        &daemon.home,
        &["bench", "http", "http://192.0.2.1:7385/health"],
        "this machine only",
    );
}

/// The runtime commands reach the routes added with the Studio: providers from the settings
/// with `hasApiKey` only, the mesh switch, usage, identities, triggers and tables of an agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_commands_read_and_switch_the_daemon_through_its_api() {
    let mock = MockProvider::start(adf_testkit::Wire::OpenAi).await;
    let daemon = start(&mock);
    let settings = daemon.home.join("settings.json");
    let mut values: Value = std::fs::read_to_string(&settings)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({}));
    values["providers"] = json!([{ "id": "shared", "type": "openai", "apiKey": "sk-cli-hidden" }]);
    std::fs::write(&settings, values.to_string()).unwrap();

    let providers = client(&daemon, &["providers"]);
    assert_eq!(providers["providers"][0]["id"], "shared");
    assert_eq!(providers["providers"][0]["hasApiKey"], true);
    assert!(!providers.to_string().contains("sk-cli-hidden"));

    let disabled = client(&daemon, &["network", "mesh", "disable"]);
    assert_eq!(disabled["meshEnabled"], false);
    assert_eq!(client(&daemon, &["network", "mesh"])["meshEnabled"], false);
    client(&daemon, &["network", "mesh", "enable"]);
    assert_eq!(client(&daemon, &["network", "mesh"])["meshEnabled"], true);

    assert_eq!(client(&daemon, &["usage", "helper"])["source"], "adf_loop");
    assert!(client(&daemon, &["identities", "helper"])["identities"].is_array());
    assert!(client(&daemon, &["triggers", "helper"])["configured"].is_array());
    assert_eq!(client(&daemon, &["tables", "helper"])["tables"], json!([]));
    assert_eq!(
        client(&daemon, &["settings"])["packageCounts"]["providers"],
        1
    );
    assert!(client(&daemon, &["runtime"])["agents"].is_array());
}

/// The open-file limit in force for process `pid`: (soft, hard) from `/proc`.
#[cfg(target_os = "linux")]
fn open_file_limit(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap();
    let mut numbers = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .map(str::to_owned);
    (numbers.next().unwrap(), numbers.next().unwrap())
}

#[cfg(target_os = "linux")]
#[test]
fn the_daemon_raises_its_soft_open_file_limit_to_the_hard_one() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let agent = dir.path().join("one.adf");
    AdfFile::create(&agent, &CreateOptions::default())
        .unwrap()
        .close()
        .unwrap();
    // Started with a low soft limit, as a login shell's `ulimit -n 256` would leave it.
    let mut child = Process::new("sh")
        .arg("-c")
        .arg("ulimit -S -n 256 && exec \"$0\" daemon --port 0 \"$1\"")
        .arg(assert_cmd::cargo::cargo_bin("adf"))
        .arg(&agent)
        .env("ADF_HOME", &home)
        .env_remove("ADF_DAEMON_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let listening = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.starts_with("adf daemon listening on "));
    let limit = listening.then(|| open_file_limit(pid));
    let _ = child.kill();
    let _ = child.wait();
    assert!(listening, "the daemon did not start");
    let (soft, hard) = limit.unwrap();
    assert_ne!(soft, "256", "the soft limit was not raised");
    assert_eq!(soft, hard);
}

/// Issue 29 (one file, two writers): a file command that writes a file a daemon of the same
/// home holds says that the daemon picks the change up; a file no daemon holds gets no note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_command_on_a_file_the_daemon_holds_says_the_daemon_picks_it_up() {
    let mock = MockProvider::openai().await;
    let daemon = start(&mock);
    let held = daemon._dir.path().join("helper.adf");
    let loose = daemon._dir.path().join("loose.adf");
    AdfFile::create(&loose, &CreateOptions::default())
        .unwrap()
        .close()
        .unwrap();
    let put = |file: &Path| {
        let mut child = Process::new(assert_cmd::cargo::cargo_bin("adf"))
            .env("ADF_HOME", &daemon.home)
            .env_remove("ADF_DAEMON_TOKEN")
            .args(["put", file.to_str().unwrap(), "notes.md"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"hello").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = put(&held);
    assert!(
        stderr.contains(&format!("the daemon at {} holds", daemon.url)),
        "{stderr}"
    );
    let stderr = put(&loose);
    assert!(!stderr.contains("holds"), "{stderr}");
}
