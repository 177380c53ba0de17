//! `adf review` and `adf daemon --track` as separate processes against a real `adf daemon`
//! child process (HTTP on 127.0.0.1, an ephemeral port): the review the owner accepts with
//! `adf review FILE --accept` is what lets `--track DIR` start an `autostart: true` agent at
//! the next daemon start; an unreviewed one stays stopped, and reviewing leaves the file as it
//! was.
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};

use adf_store::{AdfFile, ConfigAction, CreateOptions};
use serde_json::{Value, json};

/// A running `adf daemon`; killed on drop.
struct Daemon {
    url: String,
    /// Its stdout lines after the "listening" line, up to the autostart summary (if any).
    autostart: Option<String>,
    child: Child,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent(dir: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("{name}.adf"));
    let mut file = AdfFile::create(
        &path,
        &CreateOptions {
            name: Some(name.to_owned()),
            id: Some(format!("{name}-id")),
            ..CreateOptions::default()
        },
    )
    .unwrap();
    file.config_set_path(
        adf_store::Caller::Owner,
        "autostart",
        ConfigAction::Set,
        json!(true),
    )
    .unwrap();
    file.close().unwrap();
    path
}

/// Starts `adf daemon --port 0 ARGS` and reads its stdout up to the URL, and with `--track`
/// up to the autostart summary (printed once the scan is over).
fn start(home: &Path, args: &[&str]) -> Daemon {
    let mut child = Process::new(assert_cmd::cargo::cargo_bin("adf"))
        .env("ADF_HOME", home)
        .args(["daemon", "--port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut next = || lines.next().expect("the daemon exited early").unwrap();
    let url = loop {
        if let Some(url) = next().strip_prefix("adf daemon listening on ") {
            break url.trim().to_owned();
        }
    };
    let autostart = args.contains(&"--track").then(|| {
        loop {
            let line = next();
            if line.starts_with("autostart:") {
                break line;
            }
        }
    });
    // Keep draining stdout so the daemon never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Daemon {
        url,
        autostart,
        child,
    }
}

fn client(home: &Path, daemon: &Daemon, args: &[&str]) -> Value {
    let out = Process::new(assert_cmd::cargo::cargo_bin("adf"))
        .env("ADF_HOME", home)
        .args(args)
        .args(["--url", &daemon.url, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "adf {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn adf_review_accept_lets_daemon_track_start_the_reviewed_autostart_agent_only() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let tracked = dir.path().join("tracked");
    let reviewed = agent(&tracked, "reviewed");
    let unreviewed = agent(&tracked.join("team"), "unreviewed");
    let before = std::fs::read(&reviewed).unwrap();

    {
        let daemon = start(&home, &[]);
        let info = client(&home, &daemon, &["review", reviewed.to_str().unwrap()]);
        assert_eq!(info["reviewed"], false, "{info}");
        assert_eq!(info["agentId"], "reviewed-id");
        assert_eq!(info["summary"]["autostart"], true);
        let accepted = client(
            &home,
            &daemon,
            &["review", reviewed.to_str().unwrap(), "--accept"],
        );
        assert_eq!(accepted["reviewed"], true, "{accepted}");
        let other = client(&home, &daemon, &["review", unreviewed.to_str().unwrap()]);
        assert_eq!(other["reviewed"], false);
        // The human summary names configured sections this runtime does not run.
        let declared = agent(&dir.path().join("elsewhere"), "declared");
        let mut file = AdfFile::open(&declared).unwrap();
        file.config_set_path(
            adf_store::Caller::Owner,
            "pre_llm_hook",
            ConfigAction::Set,
            json!("lib/hook.ts:pre"),
        )
        .unwrap();
        file.close().unwrap();
        let out = Process::new(assert_cmd::cargo::cargo_bin("adf"))
            .env("ADF_HOME", &home)
            .args(["review", declared.to_str().unwrap(), "--url", &daemon.url])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("not run by this runtime yet: pre_llm_hook (the hook is not called"),
            "{stdout}"
        );
        // Nothing was loaded by reviewing.
        assert_eq!(client(&home, &daemon, &["agents"]), json!([]));
    }
    assert_eq!(std::fs::read(&reviewed).unwrap(), before);

    let daemon = start(&home, &["--track", tracked.to_str().unwrap()]);
    assert_eq!(
        daemon.autostart.as_deref(),
        Some("autostart: 2 scanned, 1 started, 1 skipped, 0 failed")
    );
    let agents = client(&home, &daemon, &["agents"]);
    let ids: Vec<&str> = agents
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["id"].as_str())
        .collect();
    assert_eq!(ids, ["reviewed-id"], "{agents}");
}
