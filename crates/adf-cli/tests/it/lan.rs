//! Issue 33, "the mesh on a LAN": two `adf daemon --lan` processes in two network namespaces
//! this test creates (joined by one veth pair on a private /24; nothing else in them), each
//! with its own runtime home. Each daemon's `lan` agent finds the other's with
//! `agent_discover {scope: "all"}` (mDNS, then the card fetched through the egress policy) and
//! sends it a signed message that the receiver stores (it requires signatures); the
//! `localhost` agent of the first daemon is announced to nobody and listed to nobody.
//!
//! Needs root and `ip netns` (CI runs as root); without them it fails saying so.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Only a hung test waits this long; no assertion depends on it.
const SAFETY: Duration = Duration::from_secs(90);

/// Looks for the peer's agent among the LAN cards (bounded), sends it a message, and records
/// what it saw in `found.json`. `__SELF__` and `__PEER__` are replaced per agent.
const SEEKER: &str = r#"
export async function main(event) {
  let cards = [];
  let found = null;
  for (let i = 0; i < 120 && !found; i++) {
    cards = await adf.agent_discover({ scope: 'all' });
    found = cards.find(c => c.handle === '__PEER__' && c.source === 'lan') || null;
    if (!found) await new Promise(r => setTimeout(r, 250));
  }
  let sent = null;
  if (found) {
    try {
      sent = await adf.msg_send({ recipient: found.did, address: found.endpoints.inbox, content: 'hello from __SELF__' });
    } catch (e) { sent = { error: e.message }; }
  }
  const local = await adf.agent_discover({ scope: 'local' });
  await adf.fs_write({ path: 'found.json', mode: 'write', content: JSON.stringify({
    all: cards.map(c => ({ handle: c.handle, source: c.source, visibility: c.visibility })),
    local: local.map(c => c.handle),
    found, sent,
  }) });
}
"#;

fn fail_setup(what: &str, out: &Output) -> ! {
    panic!(
        "this test needs root and `ip netns` (iproute2) to create two network namespaces joined by a veth pair; `{what}` failed: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    )
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap_or_else(|e| {
        panic!("this test needs root and `ip netns` (iproute2): cannot run `ip`: {e}")
    });
    if !out.status.success() {
        fail_setup(&format!("ip {}", args.join(" ")), &out);
    }
}

/// Two network namespaces joined by a veth pair, each end with an address of one private
/// /24, loopback up, multicast on; deleted on drop (a panic included), which also deletes the
/// veth pair.
struct Namespaces {
    names: [String; 2],
    addresses: [String; 2],
}

impl Namespaces {
    fn create() -> Self {
        let pid = std::process::id();
        let names = [format!("adf-lan-{pid}-a"), format!("adf-lan-{pid}-b")];
        // A /24 per run, so two runs at once never share one.
        let subnet = format!("10.231.{}", pid % 200 + 20);
        let addresses = [format!("{subnet}.1"), format!("{subnet}.2")];
        let links = [
            format!("adfl{}a", pid % 100_000),
            format!("adfl{}b", pid % 100_000),
        ];
        let made = Namespaces { names, addresses };
        for name in &made.names {
            ip(&["netns", "add", name]);
        }
        ip(&[
            "link", "add", &links[0], "type", "veth", "peer", "name", &links[1],
        ]);
        for ((ns, link), address) in made.names.iter().zip(&links).zip(&made.addresses) {
            ip(&["link", "set", link, "netns", ns]);
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{address}/24"),
                "dev",
                link,
            ]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "link", "set", link, "multicast", "on", "up"]);
            // mDNS sends to 224.0.0.251; a namespace without a default route needs one for it.
            ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", link]);
        }
        made
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
    }
}

fn adf(home: &Path) -> Command {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("adf"));
    command
        .env("ADF_HOME", home)
        .env_remove("ADF_DAEMON_TOKEN")
        .env_remove("ADF_DAEMON_URL")
        .env_remove("OPENAI_API_KEY")
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

fn set(home: &Path, file: &Path, path: &str, value: &Value) {
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

fn did(home: &Path, file: &Path) -> String {
    let info = run(home, &["info", file.to_str().unwrap(), "--json"]);
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    info["did"].as_str().unwrap().to_owned()
}

/// A new agent of `home` with `visibility`; with `seeks`, the seeker lambda runs at start
/// looking for that handle. Every agent requires signed messages.
fn agent(home: &Path, dir: &Path, handle: &str, visibility: &str, seeks: Option<&str>) -> PathBuf {
    let file = dir.join(format!("{handle}.adf"));
    run(home, &["new", file.to_str().unwrap()]);
    set(home, &file, "handle", &json!(handle));
    set(home, &file, "messaging.visibility", &json!(visibility));
    set(home, &file, "security.require_signature", &json!(true));
    if let Some(peer) = seeks {
        let code = SEEKER.replace("__SELF__", handle).replace("__PEER__", peer);
        let mut put = adf(home)
            .args(["put", file.to_str().unwrap(), "lib/seek.ts", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut put.stdin.take().unwrap(), code.as_bytes()).unwrap();
        assert!(put.wait().unwrap().success());
        set(
            home,
            &file,
            "triggers.on_startup",
            &json!({ "enabled": true, "targets": [{ "scope": "system", "lambda": "lib/seek.ts:main" }] }),
        );
    }
    file
}

/// An `adf daemon --lan` inside namespace `ns`, listening on `address`; killed on drop.
struct LanDaemon {
    url: String,
    child: Child,
}

impl LanDaemon {
    fn start(ns: &str, home: &Path, address: &str, agents: &[&Path]) -> Self {
        use std::io::{BufRead as _, BufReader};
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(assert_cmd::cargo::cargo_bin("adf"))
            .env("ADF_HOME", home)
            .env_remove("ADF_DAEMON_TOKEN")
            .env_remove("OPENAI_API_KEY")
            .args(["daemon", "--host", address, "--port", "0", "--lan"])
            .args(agents)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = loop {
            let Some(Ok(line)) = lines.next() else {
                let status = child.wait().unwrap();
                panic!("the daemon in {ns} exited before listening ({status})");
            };
            if let Some(url) = line.strip_prefix("adf daemon listening on ") {
                break url.trim().to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        LanDaemon { url, child }
    }
}

impl Drop for LanDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `found.json` of `file` once its seeker wrote it.
fn found(home: &Path, file: &Path) -> Value {
    let deadline = Instant::now() + SAFETY;
    loop {
        let out = adf(home)
            .args(["cat", file.to_str().unwrap(), "found.json"])
            .output()
            .unwrap();
        if out.status.success() {
            return serde_json::from_slice(&out.stdout).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "{} never wrote found.json",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The inbox rows of `file` from `sender` (its DID), waiting a bounded time for one.
fn inbox_from(home: &Path, file: &Path, sender: &str) -> Vec<Value> {
    let deadline = Instant::now() + SAFETY;
    loop {
        let out = run(home, &["inbox", file.to_str().unwrap(), "--json"]);
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        let rows: Vec<Value> = listed
            .get("messages")
            .unwrap_or(&listed)
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|row| row["from"] == sender)
            .collect();
        if !rows.is_empty() || Instant::now() >= deadline {
            return rows;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn msg_30_msg_31_two_daemons_on_a_lan_discover_lan_agents_and_exchange_signed_messages() {
    let nets = Namespaces::create();
    let dir = tempfile::tempdir().unwrap();
    let (home_a, home_b) = (dir.path().join("home-a"), dir.path().join("home-b"));
    let (dir_a, dir_b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&dir_a).unwrap();
    std::fs::create_dir_all(&dir_b).unwrap();
    let alpha = agent(&home_a, &dir_a, "alpha", "lan", Some("beta"));
    let secret = agent(&home_a, &dir_a, "secret", "localhost", None);
    let beta = agent(&home_b, &dir_b, "beta", "lan", Some("alpha"));
    let (alpha_did, beta_did) = (did(&home_a, &alpha), did(&home_b, &beta));

    let daemon_a = LanDaemon::start(
        &nets.names[0],
        &home_a,
        &nets.addresses[0],
        &[&alpha, &secret],
    );
    let daemon_b = LanDaemon::start(&nets.names[1], &home_b, &nets.addresses[1], &[&beta]);

    for (file, home, peer, peer_did, peer_url) in [
        (&alpha, &home_a, "beta", &beta_did, &daemon_b.url),
        (&beta, &home_b, "alpha", &alpha_did, &daemon_a.url),
    ] {
        let seen = found(home, file);
        let card = &seen["found"];
        assert_eq!(
            card["handle"],
            peer,
            "{} found no LAN card of {peer}: {seen}",
            file.display()
        );
        assert_eq!(card["did"], peer_did.as_str(), "{seen}");
        assert_eq!(card["visibility"], "lan", "{seen}");
        assert_eq!(
            card["endpoints"]["inbox"],
            format!("{peer_url}/agents/{peer}/inbox"),
            "the card's endpoint is the peer's LAN address: {seen}"
        );
        assert_eq!(seen["sent"]["status"], "delivered", "{seen}");
    }

    // The localhost agent is listed on its own daemon and to nobody else.
    let seen_by_alpha = found(&home_a, &alpha);
    assert!(
        seen_by_alpha["local"]
            .as_array()
            .unwrap()
            .contains(&json!("secret")),
        "{seen_by_alpha}"
    );
    let seen_by_beta = found(&home_b, &beta);
    assert!(
        !seen_by_beta.to_string().contains("secret"),
        "a localhost agent was listed to another machine: {seen_by_beta}"
    );

    // Each message is stored on the receiving side, which requires a valid signature, and
    // names the sender's DID.
    for (file, home, sender, content) in [
        (&alpha, &home_a, &beta_did, "hello from beta"),
        (&beta, &home_b, &alpha_did, "hello from alpha"),
    ] {
        let rows = inbox_from(home, file, sender);
        assert_eq!(rows.len(), 1, "{}: {rows:?}", file.display());
        assert_eq!(rows[0]["content"], content, "{rows:?}");
    }

    // `adf network lan` (GET /network/mesh/lan-addresses) on B lists A with alpha only.
    let token = std::fs::read_to_string(home_b.join("daemon-token")).unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", &nets.names[1]])
        .arg(assert_cmd::cargo::cargo_bin("adf"))
        .env("ADF_HOME", &home_b)
        // A client sends the home's token to a loopback daemon only; this one is on the LAN.
        .env("ADF_DAEMON_TOKEN", token.trim())
        .args(["--json", "--url", &daemon_b.url, "network", "lan"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(lan["addresses"], json!([nets.addresses[1]]), "{lan}");
    let peers = lan["peers"].as_array().unwrap();
    assert_eq!(peers.len(), 1, "{lan}");
    assert_eq!(peers[0]["url"], daemon_a.url.as_str(), "{lan}");
    assert_eq!(peers[0]["agents"], json!(["alpha"]), "{lan}");
    drop((daemon_a, daemon_b));
}
