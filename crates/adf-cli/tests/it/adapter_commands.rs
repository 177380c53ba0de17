//! `adf adapters` and `adf adapters test` as separate processes against a real `adf daemon`
//! child process whose agent's Telegram adapter talks to adf-testkit's Bot API server on
//! 127.0.0.1: the listing in the reference CLI's text, the agent's configured and runtime
//! adapters, and a credential check that says what is wrong (missing, refused, unreachable)
//! before it says the credential works. The owner's writes go through the daemon's API
//! (attach, seal the credential, detach).
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Output};
use std::time::{Duration, Instant};

use adf_runtime::home::RuntimeHome;
use adf_server::client::Client;
use adf_store::{AdfFile, ConfigAction, CreateOptions};
use adf_testkit::telegram::TelegramServer;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::DaemonProcess;

const TOKEN: &str = "424242:CLI-test-token";
const PURPOSE: &str = "adapter:telegram:TELEGRAM_BOT_TOKEN";

/// The reference CLI's `adf adapters` against a daemon with no registrations of its own
/// (its transcript `cli_adapters.txt`): the five built-in adapters.
const REFERENCE_LISTING: [&str; 7] = [
    "id        type      package  storage  env",
    "--------  --------  -------  -------  ---",
    "telegram  telegram           app      0  ",
    "email     email              app      0  ",
    "discord   discord            app      0  ",
    "slack     slack              app      0  ",
    "whatsapp  whatsapp           app      0  ",
];

/// The adapter entry of an agent whose Telegram adapter polls `api_root`.
fn telegram_entry(api_root: &str) -> Value {
    json!({ "enabled": true, "config": { "api_root": api_root, "poll_timeout": 1 } })
}

/// `bot.adf` with a Telegram adapter polling `server` and an identity sealed for the owner of
/// `home` (no bot token yet).
fn telegram_agent(dir: &Path, home: &Path, server: &TelegramServer) -> PathBuf {
    let path = dir.join("bot.adf");
    let mut file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    for (p, v) in [
        ("handle", json!("bot")),
        (
            "adapters",
            json!({ "telegram": telegram_entry(&server.api_root()) }),
        ),
        ("security.allow_local_fetch", json!(true)),
    ] {
        file.config_set_path(adf_store::Caller::Owner, p, ConfigAction::Set, v)
            .unwrap();
    }
    let home = RuntimeHome::at(home);
    home.init_owner(false).unwrap();
    let keys = adf_runtime::identity::LocalKeys::from_home(&home).unwrap();
    adf_runtime::identity::provision_new(&mut file, &keys).unwrap();
    file.close().unwrap();
    path
}

/// Runs `adf ARGS --url …` (with `--json` when `json`).
fn adf(daemon: &DaemonProcess, home: &Path, args: &[&str], json: bool) -> Output {
    let mut command = Process::new(assert_cmd::cargo::cargo_bin("adf"));
    command
        .env("ADF_HOME", home)
        .env_remove("ADF_DAEMON_TOKEN")
        .args(args)
        .args(["--url", &daemon.url]);
    if json {
        command.arg("--json");
    }
    command.output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `adf ARGS --json`, which must succeed; its JSON.
fn adf_json(daemon: &DaemonProcess, home: &Path, args: &[&str]) -> Value {
    let out = adf(daemon, home, args, true);
    assert!(out.status.success(), "adf {args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The telegram state `adf adapters bot --json` reports.
fn telegram_state(daemon: &DaemonProcess, home: &Path) -> Value {
    adf_json(daemon, home, &["adapters", "bot"])["states"]
        .as_array()
        .and_then(|states| states.iter().find(|s| s["type"] == "telegram"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Waits (at most a minute) until the adapter's state is `want`; a timeout is a failure.
fn wait_for_state(daemon: &DaemonProcess, home: &Path, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = telegram_state(daemon, home);
        if state["state"] == want {
            return state;
        }
        assert!(
            Instant::now() < deadline,
            "the adapter never became {want}: {state}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The owner's API client (the token the daemon wrote in its home).
fn owner(daemon: &DaemonProcess, home: &Path) -> Client {
    let token = std::fs::read_to_string(home.join("daemon-token")).unwrap();
    Client::new(&daemon.url, Some(token.trim().to_owned())).unwrap()
}

// The client commands block the test thread; the Bot API server serves on the runtime's other
// worker, and the owner's API calls run on it too.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adapters_lists_like_the_reference_cli_and_test_says_what_is_wrong_with_the_credential() {
    let server = TelegramServer::start(TOKEN, "adf_cli_bot").await;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let file = telegram_agent(dir.path(), &home, &server);
    let daemon = DaemonProcess::start(&home, &[], &file);
    let api = owner(&daemon, &home);

    // Without its token the adapter fails; the agent runs on.
    let failed = wait_for_state(&daemon, &home, "failed");
    assert!(
        failed["error"]
            .as_str()
            .unwrap_or_default()
            .contains(PURPOSE),
        "{failed}"
    );

    // The listing: the reference's table first, then this agent's adapter and its state.
    let out = adf(&daemon, &home, &["adapters"], false);
    assert!(out.status.success(), "{}", stderr(&out));
    let listing = stdout(&out);
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines[..7], REFERENCE_LISTING, "{listing}");
    assert!(
        lines[7..]
            .iter()
            .any(|l| l.starts_with("bot ") && l.contains("telegram") && l.contains("failed")),
        "{listing}"
    );
    let all = adf_json(&daemon, &home, &["adapters"]);
    assert_eq!(all["adapters"].as_array().map(Vec::len), Some(5), "{all}");
    assert_eq!(all["agents"][0]["states"][0]["state"], "failed", "{all}");

    // One agent: the reference CLI's two parts.
    let out = adf(&daemon, &home, &["adapters", "bot"], false);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let configured = text.find("Configured adapters:").expect(&text);
    let runtime = text.find("Runtime adapters:").expect(&text);
    assert!(configured < runtime, "{text}");
    assert!(
        text[configured..runtime]
            .lines()
            .any(|l| l.starts_with("telegram") && l.contains("true")),
        "{text}"
    );
    assert!(
        text[runtime..]
            .lines()
            .any(|l| l.starts_with("telegram") && l.contains("failed") && l.contains(PURPOSE)),
        "{text}"
    );
    // The FILE form names the same agent.
    let by_file = adf_json(&daemon, &home, &["adapters", file.to_str().unwrap()]);
    assert_eq!(by_file["states"][0]["state"], "failed", "{by_file}");

    // Missing: the check names the command that fixes it, and never reached the platform.
    let out = adf(
        &daemon,
        &home,
        &["adapters", "test", "bot", "telegram"],
        false,
    );
    assert!(
        !out.status.success(),
        "a missing credential is a failed check"
    );
    let said = stderr(&out);
    assert!(
        said.contains(&format!("adf identity set {}", file.display())) && said.contains(PURPOSE),
        "{said}"
    );
    assert!(server.calls_of("getMe").is_empty(), "{:?}", server.calls());

    // Refused: a token the platform does not know.
    api.call(
        Method::PUT,
        "/agents/bot/adapters/credentials",
        Some(&json!({ "adapterType": "telegram", "envKey": "TELEGRAM_BOT_TOKEN", "value": "1:not-the-bot" })),
    )
    .await
    .unwrap();
    let out = adf(
        &daemon,
        &home,
        &["adapters", "test", "bot", "telegram"],
        true,
    );
    assert!(
        !out.status.success(),
        "a refused credential is a failed check"
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["problem"], "credential_refused", "{answer}");
    assert!(stderr(&out).contains(PURPOSE), "{}", stderr(&out));
    assert!(
        !stdout(&out).contains("not-the-bot"),
        "the token never comes back"
    );
    let listed = api
        .get("/agents/bot/adapters/credentials?adapterType=telegram")
        .await
        .unwrap();
    assert_eq!(
        listed["credentials"]["TELEGRAM_BOT_TOKEN"]["set"], true,
        "{listed}"
    );
    assert!(!listed.to_string().contains("not-the-bot"), "{listed}");

    // Unreachable: the adapter attached anew at a loopback port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_root = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    api.call(
        Method::POST,
        "/agents/bot/runtime/adapters",
        Some(&json!({ "adapterType": "telegram", "config": telegram_entry(&dead_root) })),
    )
    .await
    .unwrap();
    let out = adf(
        &daemon,
        &home,
        &["adapters", "test", "bot", "telegram"],
        true,
    );
    assert!(
        !out.status.success(),
        "an unreachable platform is a failed check"
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["problem"], "unreachable", "{answer}");

    // The right token at the right address: the check passes and the adapter runs.
    api.call(
        Method::POST,
        "/agents/bot/runtime/adapters",
        Some(&json!({ "adapterType": "telegram", "config": telegram_entry(&server.api_root()) })),
    )
    .await
    .unwrap();
    api.call(
        Method::PUT,
        "/agents/bot/adapters/credentials",
        Some(&json!({ "adapterType": "telegram", "envKey": "TELEGRAM_BOT_TOKEN", "value": TOKEN })),
    )
    .await
    .unwrap();
    let out = adf(
        &daemon,
        &home,
        &["adapters", "test", "bot", "telegram"],
        false,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("@adf_cli_bot"), "{}", stdout(&out));
    wait_for_state(&daemon, &home, "running");

    // Detached: config entry and credential gone; the reference's empty listing.
    let detached = api.delete("/agents/bot/adapters/telegram").await.unwrap();
    assert_eq!(detached["removed"], true, "{detached}");
    assert_eq!(detached["deletedCredentials"], 1, "{detached}");
    let out = adf(&daemon, &home, &["adapters", "bot"], false);
    assert_eq!(
        stdout(&out),
        "Configured adapters: none\n\nRuntime adapters: none\n",
        "the reference's text (cli_adapters_<agent>.txt)"
    );
}
