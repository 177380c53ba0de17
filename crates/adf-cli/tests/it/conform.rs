//! `adf conform`: the kit's CLI against our own daemon (a real child process on loopback) and
//! our own files; exit codes, `--json`, JUnit, `--help`, and `mesh` saying it is not there yet.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::common::{DaemonProcess, fixture};

fn adf(home: &Path, args: &[&str]) -> Output {
    Command::new(assert_cmd::cargo::cargo_bin("adf"))
        .env("ADF_HOME", home)
        .env_remove("ADF_DAEMON_TOKEN")
        .env_remove("ADF_DAEMON_URL")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn conform_daemon_passes_against_our_daemon_and_leaves_only_its_agents_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let agent = dir.path().join("resident.adf");
    let made = adf(&home, &["new", agent.to_str().unwrap()]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let daemon = DaemonProcess::start(&home, &[], &agent);
    let token = std::fs::read_to_string(home.join("daemon-token")).unwrap();
    let token = token.trim();
    let before = std::fs::read(&agent).unwrap();

    let out = adf(
        &home,
        &["conform", "daemon", &daemon.url, "--token", token, "--json"],
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        serde_json::to_string_pretty(&report).unwrap()
    );
    assert_eq!(report["subject"], "daemon");
    assert_eq!(report["ok"], true);
    assert_eq!(report["summary"]["fail"], 0);
    assert_eq!(report["summary"]["skip"], 0, "{report:#}");

    // The resident agent is the only one left and its file was not written by the kit.
    let list = adf(&home, &["--url", &daemon.url, "agents", "--json"]);
    let agents: Value = serde_json::from_slice(&list.stdout).unwrap_or(Value::Null);
    let names: Vec<&str> = agents
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["filePath"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, [agent.to_str().unwrap()], "{agents}");
    assert_eq!(std::fs::read(&agent).unwrap(), before);
}

#[test]
fn conform_daemon_without_the_token_fails_with_a_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let agent = dir.path().join("resident.adf");
    assert!(
        adf(&home, &["new", agent.to_str().unwrap()])
            .status
            .success()
    );
    let daemon = DaemonProcess::start(&home, &[], &agent);
    let out = adf(
        &home,
        &["conform", "daemon", &daemon.url, "--format", "junit"],
    );
    assert_eq!(out.status.code(), Some(1));
    let junit = String::from_utf8(out.stdout).unwrap();
    assert!(junit.starts_with("<?xml"), "{junit}");
    assert!(junit.contains("<failure "), "{junit}");
}

#[test]
fn conform_file_exit_codes_and_formats() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let file = dir.path().join("a.adf");
    assert!(
        adf(&home, &["new", file.to_str().unwrap()])
            .status
            .success()
    );
    let out = adf(&home, &["conform", "file", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let human = String::from_utf8(out.stdout).unwrap();
    assert!(
        human.contains("[storage]") && human.contains(" 0 failed"),
        "{human}"
    );

    let fixture = fixture("populated-runtime.adf");
    let out = adf(
        &home,
        &["--json", "conform", "file", fixture.to_str().unwrap()],
    );
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["schema"], 1);
    assert_eq!(report["ok"], true);

    // A broken file (not SQLite at all) is an error, exit 1.
    let junk = dir.path().join("junk.adf");
    std::fs::write(&junk, b"not a database").unwrap();
    let out = adf(&home, &["conform", "file", junk.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));

    // A broken requirement: header says rollback journal; exit 1 and the row is named.
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[18] = 1;
    bytes[19] = 1;
    std::fs::write(&file, bytes).unwrap();
    let report_path = dir.path().join("report.xml");
    let out = adf(
        &home,
        &[
            "conform",
            "file",
            file.to_str().unwrap(),
            "--format",
            "junit",
            "--output",
            report_path.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let junit = std::fs::read_to_string(&report_path).unwrap();
    assert_eq!(junit, String::from_utf8(out.stdout).unwrap());
    assert!(junit.contains("storage.wal_mode [STO-02]\">"), "{junit}");
}

#[test]
fn conform_mesh_is_not_supported_yet_and_every_subcommand_has_help() {
    let dir = tempfile::tempdir().unwrap();
    let out = adf(dir.path(), &["conform", "mesh", "http://127.0.0.1:9"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not supported yet"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for sub in ["file", "daemon", "mesh"] {
        let out = adf(dir.path(), &["conform", sub, "--help"]);
        assert!(out.status.success(), "{sub}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: adf conform"));
    }
}
