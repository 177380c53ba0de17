//! `adf studio`: finds a running daemon and hands over its one-time login link (printed with
//! `--no-open`, else given to `$BROWSER`), or starts a daemon in the background when none
//! answers on a loopback URL. Everything runs against 127.0.0.1 on ephemeral ports.
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use adf_store::{AdfFile, CreateOptions};

use crate::common::DaemonProcess;

fn adf(home: &Path) -> Command {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("adf"));
    command
        .env("ADF_HOME", home)
        .env_remove("ADF_DAEMON_TOKEN")
        .env_remove("ADF_DAEMON_URL")
        .env_remove("BROWSER");
    command
}

/// A running daemon (own home) with one agent; the login URL it printed.
fn running_daemon(dir: &Path) -> (DaemonProcess, String) {
    let home = dir.join("home");
    let agent = dir.join("one.adf");
    AdfFile::create(&agent, &CreateOptions::default())
        .unwrap()
        .close()
        .unwrap();
    let daemon = DaemonProcess::start(&home, &[], &agent);
    let login = daemon
        .login
        .split_once(": ")
        .map(|(_, url)| url.trim().to_owned())
        .unwrap();
    (daemon, login)
}

#[test]
fn studio_no_open_prints_the_login_link_of_the_running_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, login) = running_daemon(dir.path());
    let out = adf(&dir.path().join("home"))
        .args(["studio", "--no-open", "--url", &daemon.url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), login);
    assert!(login.starts_with(&format!("{}/login?token=", daemon.url)));
}

#[test]
fn studio_opens_the_link_with_the_browser_command() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, login) = running_daemon(dir.path());
    let opened = dir.path().join("opened.txt");
    let browser = dir.path().join("browser.sh");
    std::fs::write(
        &browser,
        format!("#!/bin/sh\nprintf '%s' \"$1\" > '{}'\n", opened.display()),
    )
    .unwrap();
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = adf(&dir.path().join("home"))
        .env("BROWSER", &browser)
        .env("ADF_DAEMON_URL", &daemon.url)
        .arg("studio")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&opened).unwrap(), login);
    assert!(
        out.stdout.is_empty(),
        "the link is not printed when a browser took it"
    );
}

#[test]
fn studio_refuses_a_token_the_daemon_does_not_accept() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, _) = running_daemon(dir.path());
    let out = adf(&dir.path().join("home"))
        .env("ADF_DAEMON_TOKEN", "not-the-token")
        .args(["studio", "--no-open", "--url", &daemon.url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "no link is printed for a wrong token"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("refused this token"), "{stderr}");
}

#[test]
fn studio_starts_a_daemon_when_none_answers_on_a_loopback_url() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = adf(&home)
        .args(["studio", "--no-open", "--url", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // The started daemon is this test's to stop, whatever else happens.
    let pid = stderr
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .map(str::to_owned);
    let stop = || {
        if let Some(pid) = &pid {
            let _ = Command::new("kill").arg(pid).status();
        }
    };
    let checks = std::panic::catch_unwind(|| {
        assert!(out.status.success(), "{stderr}");
        assert!(pid.is_some(), "{stderr}");
        let token = std::fs::read_to_string(home.join("daemon-token")).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("{url}/login?token={}", token.trim())
        );
        assert!(home.join("studio-daemon.log").is_file());
        // A second run finds it instead of starting another.
        let again = adf(&home)
            .args(["studio", "--no-open", "--url", &url])
            .output()
            .unwrap();
        assert!(again.status.success());
        assert!(!String::from_utf8_lossy(&again.stderr).contains("started adf daemon"));
    });
    stop();
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic);
    }
}
