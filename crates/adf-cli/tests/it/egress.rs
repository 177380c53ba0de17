//! Rule 2 of §5.6 across processes: a real `adf daemon` records its control API in
//! `$ADF_HOME`, and `adf tool` (as the model) and `adf code` — separate processes running agent
//! code — refuse it with `msg_send` and `sys_fetch`, as they refuse cloud metadata and private
//! addresses, while the daemon's public mesh inbox stays reachable. `msg_send` over HTTP never
//! panics: an unreachable address is a clean error and a `failed` outbox row.
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Output, Stdio};

use serde_json::{Value, json};

fn adf(home: &Path) -> Process {
    let mut command = Process::new(assert_cmd::cargo::cargo_bin("adf"));
    command.env("ADF_HOME", home).stdin(Stdio::null());
    command
}

fn new_agent(home: &Path, file: &Path) -> String {
    let out = adf(home).arg("new").arg(file).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info = adf(home)
        .arg("info")
        .arg(file)
        .arg("--json")
        .output()
        .unwrap();
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    info["did"].as_str().unwrap().to_owned()
}

fn tool(home: &Path, file: &Path, name: &str, args: &Value) -> Output {
    adf(home)
        .arg("tool")
        .arg(file)
        .args([name, "--as", "model", "--args", &args.to_string()])
        .output()
        .unwrap()
}

/// A refused call: exit code 1 (an error, not a panic's 101) naming `why`.
fn assert_refused(out: &Output, why: &str, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
    assert!(stderr.contains(why), "{what}: {stderr}");
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
}

fn outbox_statuses(file: &Path) -> Vec<String> {
    let reader = adf_store::test_support::OtherConnection::open_read_only(file).unwrap();
    let rows = reader.tables().rows("adf_outbox").unwrap();
    rows.iter()
        .map(|row| row["status"].as_str().unwrap().to_owned())
        .collect()
}

struct Setup {
    _dir: tempfile::TempDir,
    home: PathBuf,
    alice: PathBuf,
    bob: PathBuf,
    bob_did: String,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let alice = dir.path().join("alice.adf");
    let bob = dir.path().join("bob.adf");
    new_agent(&home, &alice);
    let bob_did = new_agent(&home, &bob);
    Setup {
        _dir: dir,
        home,
        alice,
        bob,
        bob_did,
    }
}

#[test]
fn srv_21_srv_22_srv_25_adf_tool_and_adf_code_refuse_the_daemons_control_api_metadata_and_private_addresses()
 {
    let s = setup();
    let daemon = crate::common::DaemonProcess::start(&s.home, &[], &s.bob);
    // The daemon recorded where its control API listens.
    let record = std::fs::read_to_string(s.home.join("daemon.json")).unwrap();
    assert!(record.contains(&format!(":{}", daemon.port())), "{record}");

    let stop_bob = format!("{}/agents/bob/stop", daemon.url);
    let cases = [
        (stop_bob.as_str(), "control API"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://10.0.0.1/agents/bob/inbox", "private"),
    ];
    for (url, why) in cases {
        let sent = tool(
            &s.home,
            &s.alice,
            "msg_send",
            &json!({ "recipient": s.bob_did, "address": url, "content": "hi" }),
        );
        assert_refused(&sent, why, &format!("adf tool msg_send {url}"));
        let fetched = tool(
            &s.home,
            &s.alice,
            "sys_fetch",
            &json!({ "url": url, "method": "POST" }),
        );
        assert_refused(&fetched, why, &format!("adf tool sys_fetch {url}"));
        assert!(String::from_utf8_lossy(&fetched.stderr).contains("sys_fetch refused"));

        // The same from agent code run by `adf code`, also through a loopback name.
        let named = url.replace("127.0.0.1", "localhost");
        let code = format!(
            "const out = [];
             for (const call of [() => adf.msg_send({{ recipient: {did}, address: {named}, content: 'hi' }}),
                                 () => adf.sys_fetch({{ url: {named}, method: 'POST' }})]) {{
               try {{ await call(); out.push('reached') }} catch (e) {{ out.push(e.message) }}
             }}
             return out",
            did = json!(s.bob_did),
            named = json!(named),
        );
        let out = adf(&s.home)
            .arg("code")
            .arg(&s.alice)
            .arg(&code)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let results: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(results.len(), 2);
        for result in &results {
            assert!(result.contains(why), "adf code {named}: {result}");
        }
    }
    // Every refused message ended failed.
    assert_eq!(outbox_statuses(&s.alice), vec!["failed"; 2 * cases.len()]);

    // Bob is untouched: still loaded, and his public mesh inbox on the same port takes a
    // message from this other process.
    let status = adf(&s.home)
        .args(["status", "bob", "--url", &daemon.url, "--json"])
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let delivered = tool(
        &s.home,
        &s.alice,
        "msg_send",
        &json!({ "recipient": s.bob_did, "address": format!("{}/agents/bob/inbox", daemon.url), "content": "hello bob" }),
    );
    assert!(
        delivered.status.success(),
        "{}",
        String::from_utf8_lossy(&delivered.stderr)
    );
    let delivered: Value = serde_json::from_slice(&delivered.stdout).unwrap();
    assert_eq!(delivered["status"], "delivered", "{delivered}");
}

#[test]
fn msg_29_adf_tool_msg_send_to_an_unreachable_address_fails_cleanly() {
    let s = setup();
    // A loopback port nobody listens on: bound, then given back.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let sent = tool(
        &s.home,
        &s.alice,
        "msg_send",
        &json!({ "recipient": s.bob_did, "address": format!("http://127.0.0.1:{port}/agents/bob/inbox"), "content": "anyone?" }),
    );
    assert_refused(&sent, "cannot reach", "msg_send to a closed port");
    assert_eq!(outbox_statuses(&s.alice), vec!["failed"]);
}
