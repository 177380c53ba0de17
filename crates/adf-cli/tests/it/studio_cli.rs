//! `adf studio`: finds a running daemon, asks it for a fresh one-time login link and hands it
//! over (printed with `--no-open`, else given to `$BROWSER`), or starts a daemon in the
//! background when none answers on a loopback URL; `adf auth sessions` / `adf auth revoke`
//! list and end the sessions such links open. No link and no log line carries the token.
//! Everything runs against 127.0.0.1 on ephemeral ports.
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

/// `GET path_and_query` at `base` on a fresh connection, with `cookie` when given: the
/// status and the `adf_session=…` pair the answer set, if any.
fn visit(base: &str, path_and_query: &str, cookie: Option<&str>) -> (u16, Option<String>) {
    use std::io::{Read as _, Write as _};
    let authority = base.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let cookie = cookie.map_or(String::new(), |c| format!("Cookie: {c}\r\n"));
    write!(
        stream,
        "GET {path_and_query} HTTP/1.1\r\nHost: {authority}\r\n{cookie}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap();
    let session = answer.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("set-cookie")
            .then(|| value.trim().split(';').next().unwrap_or("").to_owned())
    });
    (status, session)
}

/// Logs in with `link` (a full URL): the session cookie pair.
fn log_in(link: &str) -> String {
    let (base, path) = link.split_at(link.find("/login").unwrap());
    let (status, session) = visit(base, path, None);
    assert_eq!(status, 303, "{link}");
    session.unwrap()
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
    let link = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let token = std::fs::read_to_string(dir.path().join("home/daemon-token")).unwrap();
    for printed in [&link, &login] {
        assert!(
            printed.starts_with(&format!("{}/login?code=", daemon.url)),
            "{printed}"
        );
        assert!(!printed.contains(token.trim()), "{printed}");
    }
    assert_ne!(link, login, "a fresh code, not the daemon's printed one");
    // Each link logs in once.
    let cookie = log_in(&link);
    let path = &link[daemon.url.len()..];
    assert_eq!(visit(&daemon.url, path, None), (401, None));
    log_in(&login);
    assert_eq!(visit(&daemon.url, "/agents", Some(&cookie)).0, 200);
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
    let link = std::fs::read_to_string(&opened).unwrap();
    assert!(
        link.starts_with(&format!("{}/login?code=", daemon.url)),
        "{link}"
    );
    assert_ne!(link, login);
    log_in(&link);
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
        let link = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(link.starts_with(&format!("{url}/login?code=")), "{link}");
        log_in(&link);
        // The daemon's log holds its one-time link, never the token.
        let log = std::fs::read_to_string(home.join("studio-daemon.log")).unwrap();
        assert!(log.contains("/login?code="), "{log}");
        assert!(!log.contains(token.trim()), "the token is in the log");
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

#[test]
fn auth_sessions_lists_the_browser_sessions_and_revoke_ends_one() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let (daemon, login) = running_daemon(dir.path());
    let auth = |args: &[&str]| {
        let out = adf(&home)
            .args(["--url", &daemon.url, "auth"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "adf auth {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listed = |text: String| -> Vec<String> {
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        value["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(listed(auth(&["sessions", "--json"])).is_empty());
    let first = log_in(&login);
    let second = log_in(&login_link(&home, &daemon.url));
    let ids = listed(auth(&["sessions", "--json"]));
    assert_eq!(ids.len(), 2);
    assert!(auth(&["sessions"]).contains(&ids[0]), "the table shows ids");
    // Which id is the first cookie's: the one whose revocation locks it out.
    auth(&["revoke", &ids[0]]);
    let (locked, open) = (
        visit(&daemon.url, "/agents", Some(&first)).0,
        visit(&daemon.url, "/agents", Some(&second)).0,
    );
    assert_eq!(
        [locked, open].iter().filter(|s| **s == 401).count(),
        1,
        "exactly one session ended"
    );
    assert_eq!(listed(auth(&["sessions", "--json"])), vec![ids[1].clone()]);
    auth(&["revoke", "all"]);
    assert_eq!(visit(&daemon.url, "/agents", Some(&first)).0, 401);
    assert_eq!(visit(&daemon.url, "/agents", Some(&second)).0, 401);
    let unknown = adf(&home)
        .args(["--url", &daemon.url, "auth", "revoke", "0000000000000000"])
        .output()
        .unwrap();
    assert!(!unknown.status.success());
}

/// A fresh login link from `adf studio --no-open`.
fn login_link(home: &Path, url: &str) -> String {
    let out = adf(home)
        .args(["studio", "--no-open", "--url", url])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
