//! `adf chat` as a separate process against an `adf-testkit` OpenAI-compatible server over
//! real HTTP: one-shot and interactive sessions, approvals and `ask` answered on stdin, auth
//! failures, and a `kill -9` in the middle of a turn that loses no completed step and is not
//! replayed.
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Output, Stdio};
use std::time::Duration;

use adf_store::{AdfFile, ConfigAction, CreateOptions};
use adf_testkit::{MockProvider, Turn};
use serde_json::{Value, json};

struct Agent {
    _dir: tempfile::TempDir,
    home: PathBuf,
    file: PathBuf,
}

/// An agent whose `model.provider` is the mock's base URL (an OpenAI-compatible server).
fn agent(mock: &MockProvider) -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let path = dir.path().join("a.adf");
    let mut file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    for (p, v) in [
        ("model.provider", json!(mock.base_url())),
        ("model.model_id", json!("local-model")),
        (
            "recovery",
            json!({"auto_retry": true, "max_attempts": 2, "base_delay_ms": 1, "max_delay_ms": 5}),
        ),
    ] {
        file.config_set_path(adf_store::Caller::Owner, p, ConfigAction::Set, v)
            .unwrap();
    }
    file.close().unwrap();
    Agent {
        _dir: dir,
        home,
        file: path,
    }
}

fn adf(agent: &Agent) -> Process {
    let mut cmd = Process::new(assert_cmd::cargo::cargo_bin("adf"));
    cmd.env("ADF_HOME", &agent.home)
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `adf chat` with `stdin` fed and waits (the mock keeps serving on the test runtime).
fn chat(agent: &Agent, args: &[&str], stdin: &str) -> Output {
    let mut child = adf(agent)
        .arg("chat")
        .arg(&agent.file)
        .args(args)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn rows(path: &Path) -> Vec<(String, Value)> {
    let reader = adf_store::test_support::OtherConnection::open_read_only(path).unwrap();
    let mut rows = reader.tables().rows("adf_loop").unwrap();
    rows.retain(|row| row["loop"] == "main");
    // Transcript order: `ord` where set, else `seq`; `seq` among equals.
    let order = |row: &serde_json::Map<String, Value>| {
        let seq = row["seq"].as_i64().unwrap();
        (row["ord"].as_i64().unwrap_or(seq), seq)
    };
    rows.sort_by_key(order);
    rows.into_iter()
        .map(|row| {
            let content = row["content_json"].as_str().unwrap();
            (
                row["role"].as_str().unwrap().to_owned(),
                serde_json::from_str(content).unwrap(),
            )
        })
        .collect()
}

fn first_text(content: &Value) -> String {
    content[0]["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_end_to_end_against_an_openai_compatible_server() {
    let mock = MockProvider::openai().await;
    let agent = agent(&mock);
    mock.push_all([
        Turn::tool_call(
            "fs_write",
            json!({"path": "notes/hello.md", "mode": "write", "content": "hi there"}),
        ),
        Turn::tool_call(
            "sys_update_config",
            json!({"path": "description", "value": "yes edit", "_reason": "testing"}),
        ),
        Turn::tool_call(
            "sys_update_config",
            json!({"path": "description", "value": "no edit"}),
        ),
        Turn::tool_call("ask", json!({"question": "Which colour?"})),
        Turn::text("Wrote notes/hello.md; you chose green."),
    ]);
    // Approvals and the ask answer come from stdin, one line each.
    let out = chat(&agent, &["Write a hello note."], "y\nn\ngreen\n");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("Wrote notes/hello.md; you chose green."),
        "{stdout}"
    );
    assert!(stderr.contains("→ fs_write("), "{stderr}");
    assert!(stderr.contains("approval needed [restricted]: sys_update_config"));
    assert!(stderr.contains("question from the agent: Which colour?"));
    assert_eq!(mock.request_count(), 5);
    // The request went to the compatible endpoint with the configured model and no key.
    let req = mock.last_request().unwrap();
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.body["model"], "local-model");
    assert!(req.header("authorization").is_none());

    let file = AdfFile::open(&agent.file).unwrap();
    assert_eq!(
        file.file_read("notes/hello.md").unwrap().unwrap().content,
        b"hi there"
    );
    assert_eq!(file.config().unwrap()["description"], "yes edit");
    drop(file);
    let stored = rows(&agent.file);
    assert_eq!(first_text(&stored[0].1), "Write a hello note.");
    assert!(first_text(&stored[1].1).starts_with("[Context: system_prompt] "));
    let answer = stored
        .iter()
        .find(|(_, c)| c[0]["content"] == "green")
        .expect("the ask answer is the tool result");
    assert_eq!(answer.0, "user");

    // `adf loop` folds the context row.
    let shown = adf(&agent).arg("loop").arg(&agent.file).output().unwrap();
    let shown = text(&shown.stdout);
    assert!(
        shown.contains("[Context: system_prompt] (folded"),
        "{shown}"
    );

    // Interactive: each stdin line is a message; one new session records a new snapshot.
    mock.push_all([Turn::text("first answer"), Turn::text("second answer")]);
    let out = chat(&agent, &["--approve-all"], "hello\n\nsecond\n");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("first answer") && stdout.contains("second answer"));
    assert_eq!(mock.request_count(), 7);
    let last = serde_json::to_string(&mock.last_request().unwrap().body).unwrap();
    assert!(last.contains("hello") && last.contains("Write a hello note."));
    let snapshots = rows(&agent.file)
        .iter()
        .filter(|(_, c)| first_text(c).starts_with("[Context: system_prompt]"))
        .count();
    assert_eq!(snapshots, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_08_chat_auth_failure_names_the_provider_and_the_fix() {
    let mock = MockProvider::openai().await;
    mock.require_api_key("sk-needed");
    let agent = agent(&mock);
    let out = chat(&agent, &["hi", "--json"], "");
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&mock.base_url()), "{stderr}");
    assert!(stderr.contains("401"), "{stderr}");
    assert_eq!(mock.request_count(), 1, "not retried");
    let stdout = text(&out.stdout);
    let line: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert!(line["error"].as_str().unwrap().contains("401"));
    // §6.2: the stored state is untouched.
    let file = AdfFile::open(&agent.file).unwrap();
    assert_eq!(file.config().unwrap()["state"], "active");
}

/// Acceptance: kill -9 in the middle of a turn, reopen, nothing completed is lost and the
/// turn is not replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_crash_kill_9_mid_turn_keeps_completed_steps_and_does_not_replay() {
    let mock = MockProvider::openai().await;
    let agent = agent(&mock);
    mock.push_all([
        Turn::tool_call(
            "fs_write",
            json!({"path": "done.md", "mode": "write", "content": "step one"}),
        ),
        // The next step hangs long enough to be killed in.
        Turn::text("never seen").with_delay(Duration::from_secs(60)),
    ]);
    let mut child = adf(&agent)
        .arg("chat")
        .arg(&agent.file)
        .arg("do the thing")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // The second request's arrival, not a poll; the timeout only turns a hang into a failure.
    tokio::time::timeout(Duration::from_secs(60), mock.requests_arrived(2))
        .await
        .expect("the second request never came");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    // Every completed step is on disk: trigger, snapshot, the call, its result, the file.
    let before = rows(&agent.file);
    let roles: Vec<&str> = before.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(roles, ["user", "user", "assistant", "user"]);
    assert_eq!(first_text(&before[0].1), "do the thing");
    assert_eq!(before[2].1[0]["name"], "fs_write");
    assert_eq!(before[3].1[0]["type"], "tool_result");
    assert_eq!(before[3].1[0]["is_error"], false);

    let mut file = AdfFile::open(&agent.file).unwrap();
    assert_eq!(
        file.file_read("done.md").unwrap().unwrap().content,
        b"step one"
    );
    let stored = |file: &AdfFile| -> Value {
        serde_json::from_str(
            &file
                .meta_get("adf_runtime_turn_checkpoint")
                .unwrap()
                .unwrap()
                .value,
        )
        .unwrap()
    };
    assert_eq!(stored(&file)["status"], "in_progress");
    let killed_id = stored(&file)["id"].clone();
    // Recovery (what every executor session runs on open) marks it interrupted.
    let recovered = adf_runtime::executor::recover(&mut file, "main")
        .unwrap()
        .unwrap();
    assert!(recovered.closed_calls.is_empty(), "the call had its result");
    assert_eq!(stored(&file)["status"], "interrupted");
    assert_eq!(stored(&file)["replay"], "not_replayed");
    assert_eq!(stored(&file)["id"], killed_id);
    let recovered: Vec<String> = adf_store::test_support::tables(&file)
        .logs()
        .unwrap()
        .into_iter()
        .filter(|l| l.event.as_deref() == Some("turn_checkpoint_recovered"))
        .map(|l| l.level)
        .collect();
    assert_eq!(recovered, ["warn"]);
    file.close().unwrap();

    // The next chat runs only the new message: exactly one more request, nothing replayed.
    mock.push(Turn::text("back again"));
    let out = chat(&agent, &["what happened?"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(mock.request_count(), 3);
    let body = serde_json::to_string(&mock.last_request().unwrap().body).unwrap();
    assert!(body.contains("what happened?") && body.contains("step one"));
    assert_eq!(body.matches("do the thing").count(), 1);
    let after = rows(&agent.file);
    assert_eq!(
        after
            .iter()
            .filter(|(_, c)| first_text(c) == "do the thing")
            .count(),
        1
    );
}

/// `adf chat AGENT MESSAGE` where AGENT is not a file: the message goes to the running daemon,
/// which runs the turn (202) against the agent's model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_with_an_agent_name_sends_the_message_to_the_daemon() {
    let mock = MockProvider::openai().await;
    let agent = agent(&mock);
    mock.push(Turn::text("Hello from the daemon."));
    let home = adf_runtime::home::RuntimeHome::at(&agent.home);
    // The daemon's token lives in the home the client command reads: no flag needed.
    let front = adf_server::FrontDoor::for_home(&home, None).unwrap();
    let daemon = adf_server::Daemon::new(home);
    let server = adf_server::RunningServer::start(daemon.clone(), "127.0.0.1", 0, front)
        .await
        .unwrap();
    let loaded = daemon.load(&agent.file).await.unwrap().agent;
    let id = loaded.id.clone();
    let mut published = daemon.events().watch();
    let mut cmd = adf(&agent);
    // A nanoid may start with '-': `--` keeps clap from reading it as a flag (about 1 run in 64).
    cmd.args(["--url", &server.url(), "chat", "--", &id, "Say hello."]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("accepted: turn_"),
        "{}",
        text(&out.stdout)
    );
    // Checked again on every event the daemon publishes (the turn's end is one); the timeout
    // only turns a hang into a failure.
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let replied = loaded
                .store()
                .run(|file| {
                    let rows = adf_store::test_support::tables(file).rows("adf_loop")?;
                    let replied = rows.iter().filter(|row| {
                        let content = row["content_json"].as_str().unwrap_or_default();
                        content.contains("Hello from the daemon.")
                    });
                    Ok(replied.count())
                })
                .await
                .unwrap();
            if replied == 1 {
                break;
            }
            published.changed().await.unwrap();
        }
    })
    .await
    .expect("the daemon turn never replied");
    assert_eq!(mock.request_count(), 1);
    server.shutdown().await.unwrap();
}

/// Issue 29: `adf chat AGENT` on the daemon path follows its turn: each retry the daemon
/// publishes (`turn.retry`) is a line on stderr, and the command returns when the turn ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_with_an_agent_name_shows_the_daemons_retries_and_waits_for_the_turn() {
    let mock = MockProvider::openai().await;
    let agent = agent(&mock);
    mock.push_all([Turn::reset(), Turn::text("Back after a retry.")]);
    let home = adf_runtime::home::RuntimeHome::at(&agent.home);
    let front = adf_server::FrontDoor::for_home(&home, None).unwrap();
    let daemon = adf_server::Daemon::new(home);
    let server = adf_server::RunningServer::start(daemon.clone(), "127.0.0.1", 0, front)
        .await
        .unwrap();
    let loaded = daemon.load(&agent.file).await.unwrap().agent;
    let id = loaded.id.clone();
    let mut cmd = adf(&agent);
    cmd.args(["--url", &server.url(), "chat", "--", &id, "Still there?"]);
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || cmd.output().unwrap()),
    )
    .await
    .expect("adf chat returns when the turn ends")
    .unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let retries: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("retrying in "))
        .collect();
    assert_eq!(retries.len(), 1, "{stderr}");
    assert!(retries[0].ends_with("(2/2): connection reset"), "{stderr}");
    assert!(
        text(&out.stdout).contains("turn completed"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(mock.request_count(), 2);
    server.shutdown().await.unwrap();
}

/// Acceptance (issue 29.3/29.4): a model server that is not running fails the chat within
/// seconds, says it retried once and names the URL; the transcript keeps the failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_against_a_refused_local_model_server_fails_fast_naming_the_url() {
    let mock = MockProvider::openai().await;
    let agent = agent(&mock);
    let url = adf_testkit::refused_base_url();
    {
        let mut file = AdfFile::open(&agent.file).unwrap();
        for (p, v) in [("model.provider", json!(url)), ("recovery", json!({}))] {
            file.config_set_path(adf_store::Caller::Owner, p, ConfigAction::Set, v)
                .unwrap();
        }
        file.close().unwrap();
    }
    let started = std::time::Instant::now();
    let out = chat(&agent, &["hello?"], "");
    let took = started.elapsed();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}: {stderr}");
    assert!(
        stderr.contains("retrying in 0.5 s (2/2): connection refused"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "error: turn failed: model server {url} refused the connection"
        )),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("retrying in").count(),
        1,
        "one quick retry: {stderr}"
    );
    // The transcript keeps the failure where the owner reads it, unfolded.
    let stored = rows(&agent.file);
    let last = first_text(&stored.last().unwrap().1);
    assert!(
        last.starts_with(&format!(
            "[Context: turn_failed] turn failed: model server {url} refused the connection"
        )),
        "{last}"
    );
    let shown = adf(&agent).arg("loop").arg(&agent.file).output().unwrap();
    let shown = text(&shown.stdout);
    assert!(
        shown.contains(&format!(
            "turn failed: model server {url} refused the connection"
        )),
        "{shown}"
    );
    assert_eq!(mock.request_count(), 0);
}
