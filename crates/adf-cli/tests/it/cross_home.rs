//! Issue 28 finding 5: two daemons of two runtime homes on one machine (loopback only). The
//! other daemon runs with `--insecure-loopback`, so its control API would answer anyone; the
//! agents of the first home — inside their daemon and in the `adf` processes of that home —
//! are refused it on every outbound path (`sys_fetch`, native `fetch`, `msg_send`,
//! `ws_connect`, `stream_bind` tcp, shell `curl`, an MCP HTTP server, the model provider URL),
//! each with the reason, while the other daemon's public mesh routes stay reachable and its
//! agent is untouched.
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::DaemonProcess;

/// Only a hung test waits this long; no assertion depends on it.
const SAFETY: Duration = Duration::from_secs(60);

/// Calls the tool `do/<name>.json` names (`{tool, args}`; `fetch` is native fetch) when the
/// file is written and records the result or the error in `done/<name>.json`.
const CALLER: &str = r#"
export async function main(event) {
  const name = event.data.path.replace('do/', '');
  const req = JSON.parse((await adf.fs_read({ path: event.data.path })).content);
  let out;
  try {
    if (req.tool === 'fetch') {
      const response = await fetch(req.args.url, { method: req.args.method });
      out = { ok: { status: response.status, body: await response.text() } };
    } else {
      out = { ok: await adf[req.tool](req.args) };
    }
  } catch (e) { out = { code: e.code, message: e.message } }
  await adf.fs_write({ path: `done/${name}`, content: JSON.stringify(out), mode: 'write' });
}
"#;

fn adf(home: &Path) -> Process {
    let mut command = Process::new(assert_cmd::cargo::cargo_bin("adf"));
    command
        .env("ADF_HOME", home)
        .env_remove("ADF_DAEMON_TOKEN")
        .env_remove("ADF_DAEMON_URL")
        .stdin(Stdio::null());
    command
}

fn run(home: &Path, args: &[&str]) -> Output {
    let out = adf(home).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "adf {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn did(home: &Path, file: &Path) -> String {
    let info = run(home, &["info", file.to_str().unwrap(), "--json"]);
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    info["did"].as_str().unwrap().to_owned()
}

fn set(home: &Path, file: &Path, path: &str, value: Value) {
    run(
        home,
        &[
            "config",
            "set",
            file.to_str().unwrap(),
            path,
            &value.to_string(),
        ],
    );
}

/// The daemon's API, as the owner of home A (its token).
struct Owner {
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
    url: String,
    token: String,
}

impl Owner {
    fn send(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.runtime.block_on(async {
            let url = format!("{}{path}", self.url);
            let request = match method {
                "PUT" => self.client.put(url),
                "POST" => self.client.post(url),
                _ => self.client.get(url),
            };
            let request = request.bearer_auth(&self.token);
            let request = match body {
                Some(body) => request.json(&body),
                None => request,
            };
            let response = tokio::time::timeout(SAFETY, request.send())
                .await
                .unwrap()
                .unwrap();
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            (
                status,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            )
        })
    }

    /// Has alice's lambda call `tool` with `args`; what it recorded.
    fn call(&self, name: &str, tool: &str, args: Value) -> Value {
        let request = json!({ "tool": tool, "args": args }).to_string();
        let (status, body) = self.send(
            "PUT",
            &format!("/agents/alice/files/content?path=do%2F{name}.json"),
            Some(json!({ "content": request })),
        );
        assert!(status < 300, "writing do/{name}.json: {status} {body}");
        let deadline = Instant::now() + SAFETY;
        loop {
            let (status, body) = self.send(
                "GET",
                &format!("/agents/alice/files/content?path=done%2F{name}.json"),
                None,
            );
            if status == 200 {
                return serde_json::from_str(body["content"].as_str().unwrap()).unwrap();
            }
            assert!(
                Instant::now() < deadline,
                "alice's lambda never finished {name} ({status} {body})"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Every outbound path that was not refused as rule 2 demands; asserted empty at the end, so
/// one run reports every path that reached the other daemon.
#[derive(Default)]
struct Leaks(Vec<String>);

impl Leaks {
    /// A refusal recorded by the lambda, naming rule 2.
    fn control_refused(&mut self, what: &str, result: &Value) {
        let message = result["message"].as_str().unwrap_or_default();
        if result.get("ok").is_some() || !message.contains("control API") {
            self.0
                .push(format!("{what} was not refused as a control API: {result}"));
        }
    }

    /// A failed command whose stderr names rule 2 (and no panic).
    fn command_refused(&mut self, what: &str, out: &Output) {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !stderr.contains("control API") || stderr.contains("panicked") {
            self.0.push(format!(
                "{what} was not refused as a control API ({:?}): {stderr}",
                out.status.code()
            ));
        }
    }

    fn check(&mut self, what: &str, refused: bool, detail: &str) {
        if !refused {
            self.0.push(format!("{what}: {detail}"));
        }
    }
}

struct Homes {
    _dir: tempfile::TempDir,
    home_a: PathBuf,
    alice: PathBuf,
    carol: PathBuf,
    home_b: PathBuf,
    bob: PathBuf,
}

fn homes() -> Homes {
    let dir = tempfile::tempdir().unwrap();
    let home_a = dir.path().join("home-a");
    let home_b = dir.path().join("home-b");
    let alice = dir.path().join("alice.adf");
    let carol = dir.path().join("carol.adf");
    let bob = dir.path().join("bob.adf");
    for (home, file) in [(&home_a, &alice), (&home_a, &carol), (&home_b, &bob)] {
        run(home, &["new", file.to_str().unwrap()]);
    }
    Homes {
        _dir: dir,
        home_a,
        alice,
        carol,
        home_b,
        bob,
    }
}

#[test]
fn srv_22_agents_of_one_home_never_reach_another_homes_daemon_but_its_mesh_routes() {
    let h = homes();
    let bob_did = did(&h.home_b, &h.bob);
    // The other install: its control API needs no token.
    let other = DaemonProcess::start(&h.home_b, &["--insecure-loopback"], &h.bob);
    let port = other.port();
    let mut leaks = Leaks::default();
    let base = format!("http://127.0.0.1:{port}");

    // Carol (home A, run by `adf` processes): an MCP HTTP server and a model provider that
    // are the other daemon.
    let mcp = adf(&h.home_a)
        .args(["mcp", "add", h.carol.to_str().unwrap(), "--type", "http"])
        .args(["--name", "other", "--url", &format!("{base}/mcp")])
        .output()
        .unwrap();
    leaks.command_refused("adf mcp add (an HTTP server at the other daemon)", &mcp);
    set(
        &h.home_a,
        &h.carol,
        "model.provider",
        json!(format!("{base}/v1")),
    );
    set(&h.home_a, &h.carol, "model.model_id", json!("local-model"));
    let chat = adf(&h.home_a)
        .args(["chat", h.carol.to_str().unwrap(), "hello"])
        .output()
        .unwrap();
    leaks.command_refused("adf chat (the provider URL is the other daemon)", &chat);
    let code = adf(&h.home_a)
        .args(["code", h.carol.to_str().unwrap()])
        .arg(format!(
            "const out = [];
             for (const call of [() => adf.sys_fetch({{ url: '{base}/agents' }}),
                                 () => adf.msg_send({{ recipient: '{bob_did}', address: 'http://localhost:{port}/agents/bob/stop', content: 'stop' }})]) {{
               try {{ await call(); out.push('reached') }} catch (e) {{ out.push(e.message) }}
             }}
             return out"
        ))
        .output()
        .unwrap();
    assert!(
        code.status.success(),
        "{}",
        String::from_utf8_lossy(&code.stderr)
    );
    let results: Vec<String> = serde_json::from_slice(&code.stdout).unwrap();
    assert_eq!(results.len(), 2);
    for result in &results {
        leaks.check("adf code", result.contains("control API"), result);
    }

    // Alice, inside the daemon of home A, with every outbound tool enabled and the other
    // daemon's port on her stream binding allowlist.
    let mut put = adf(&h.home_a)
        .args(["put", h.alice.to_str().unwrap(), "lib/caller.ts", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut put.stdin.take().unwrap(), CALLER.as_bytes()).unwrap();
    assert!(put.wait().unwrap().success());
    set(&h.home_a, &h.alice, "handle", json!("alice"));
    set(
        &h.home_a,
        &h.alice,
        "triggers",
        json!({ "on_file_change": { "enabled": true, "targets": [
            { "scope": "system", "lambda": "lib/caller.ts:main", "filter": { "watch": "do/**" } }
        ] } }),
    );
    set(&h.home_a, &h.alice, "code_execution.network", json!(true));
    for tool in ["ws_connect", "stream_bind", "adf_shell"] {
        set(
            &h.home_a,
            &h.alice,
            &format!("tools.{tool}.enabled"),
            json!(true),
        );
    }
    set(
        &h.home_a,
        &h.alice,
        "stream_bind",
        json!({ "allow_tcp_bind": true, "tcp_allowlist": [{ "host": "127.0.0.1", "port": port }] }),
    );
    let daemon_a = DaemonProcess::start(&h.home_a, &[], &h.alice);
    let owner = Owner {
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        client: adf_egress::service_client(adf_egress::ClientOptions {
            timeout: Some(SAFETY),
            ..Default::default()
        })
        .unwrap(),
        url: daemon_a.url.clone(),
        token: std::fs::read_to_string(h.home_a.join("daemon-token"))
            .unwrap()
            .trim()
            .to_owned(),
    };

    let stop = format!("{base}/agents/bob/stop");
    leaks.control_refused(
        "sys_fetch",
        &owner.call(
            "sys_fetch",
            "sys_fetch",
            json!({ "url": format!("{base}/agents/bob/files") }),
        ),
    );
    leaks.control_refused(
        "native fetch",
        &owner.call("fetch", "fetch", json!({ "url": stop, "method": "POST" })),
    );
    leaks.control_refused(
        "msg_send over HTTP",
        &owner.call(
            "msg_send",
            "msg_send",
            json!({ "recipient": bob_did, "address": stop, "content": "stop" }),
        ),
    );
    leaks.control_refused(
        "ws_connect",
        &owner.call(
            "ws_connect",
            "ws_connect",
            json!({ "url": format!("ws://127.0.0.1:{port}/agents") }),
        ),
    );
    leaks.control_refused(
        "stream_bind tcp",
        &owner.call(
            "stream_bind",
            "stream_bind",
            json!({
                "a": { "kind": "tcp", "host": "127.0.0.1", "port": port },
                "b": { "kind": "tcp", "host": "127.0.0.1", "port": port },
            }),
        ),
    );
    let curl = owner.call(
        "curl",
        "adf_shell",
        json!({ "command": format!("curl -X POST {stop}") }),
    );
    leaks.check(
        "shell curl",
        curl["ok"]["exit_code"] != 0
            && curl["ok"]["stderr"]
                .as_str()
                .unwrap_or_default()
                .contains("control API"),
        &curl.to_string(),
    );
    assert!(
        leaks.0.is_empty(),
        "outbound paths that reached the other daemon's control API:\n{}",
        leaks.0.join("\n")
    );

    // The other daemon's public mesh routes stay reachable: its card and health, and its
    // inbox takes alice's message.
    for route in ["card", "health"] {
        let got = owner.call(
            route,
            "sys_fetch",
            json!({ "url": format!("{base}/agents/bob/{route}") }),
        );
        assert_eq!(got["ok"]["status"], 200, "GET {route}: {got}");
    }
    let delivered = owner.call(
        "inbox",
        "msg_send",
        json!({ "recipient": bob_did, "address": format!("{base}/agents/bob/inbox"), "content": "hello bob" }),
    );
    assert_eq!(delivered["ok"]["status"], "delivered", "{delivered}");

    // Bob is untouched: still loaded and running, his message in.
    let status = run(&h.home_b, &["status", "bob", "--url", &other.url, "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_ne!(status.to_string(), "null", "{status}");
    let inbox = run(&h.home_b, &["inbox", "bob", "--url", &other.url, "--json"]);
    assert!(
        String::from_utf8_lossy(&inbox.stdout).contains("hello bob"),
        "{}",
        String::from_utf8_lossy(&inbox.stdout)
    );
    drop(daemon_a);
    drop(other);
}
