//! The daemon registers its control API with the egress policy when it binds, so no agent's
//! `sys_fetch`, native `fetch` or `msg_send` can reach it, on any loopback spelling, flag or
//! not (SRV-22); its public mesh inbox stays reachable. A daemon agent's code is refused the
//! control API, cloud metadata and private addresses; a refused or failed delivery ends its
//! outbox row `failed` with the reason logged, and the agent keeps answering (MSG-29).

use crate::common;

use adf_runtime::fetch::{self, FetchErrorKind, FetchRequest, FetchSettings, Policy};
use std::sync::Arc;

use adf_server::daemon::Agent;
use common::Harness;

#[tokio::test]
async fn srv_22_daemon_control_api_is_never_fetchable() {
    let h = Harness::start().await;
    let port = h.server.addr.port();
    let permissive = Policy {
        allow_local: true,
        served_origins: Vec::new(),
    };
    for url in [
        h.server.url(),
        format!("http://localhost:{port}/agents"),
        format!("http://0.0.0.0:{port}/agents"),
        format!("http://[::ffff:127.0.0.1]:{port}/agents"),
    ] {
        let error = fetch::fetch(
            FetchRequest::get(url.clone()),
            permissive.clone(),
            FetchSettings::default(),
        )
        .await
        .expect_err(&url);
        assert_eq!(error.kind, FetchErrorKind::Rejected, "{url}: {error}");
        assert!(error.message.contains("control API"), "{url}: {error}");
    }
    h.stop().await;
}

// ---------- a daemon agent's code against the one egress policy ----------

/// Calls the tool that `do/<name>.json` names (`{tool, args}`) when the file is written and
/// records the result or the error in `done/<name>.json`.
const CALLER: &str = r#"
export async function main(event) {
  const name = event.data.path.replace('do/', '');
  const req = JSON.parse((await adf.fs_read({ path: event.data.path })).content);
  let out;
  try { out = { ok: await adf[req.tool](req.args) } } catch (e) { out = { code: e.code, message: e.message } }
  await adf.fs_write({ path: `done/${name}`, content: JSON.stringify(out), mode: 'write' });
}
"#;

fn caller_agent(h: &Harness, name: &str) -> std::path::PathBuf {
    let path = common::agent_file(
        h.dir.path(),
        name,
        &[("lib/caller.ts", CALLER)],
        &[(
            "triggers",
            serde_json::json!({
                "on_file_change": { "enabled": true, "targets": [
                    { "scope": "system", "lambda": "lib/caller.ts:main", "filter": { "watch": "do/**" } }
                ] },
            }),
        )],
    );
    common::provision_identity(h, &path);
    path
}

/// Has `agent`'s lambda call `tool` with `args`; what it recorded.
async fn call_tool(
    h: &Harness,
    agent: &adf_server::daemon::Agent,
    name: &str,
    tool: &str,
    args: serde_json::Value,
) -> serde_json::Value {
    let path = format!("do/{name}.json");
    h.client
        .call(
            reqwest::Method::PUT,
            &format!(
                "/agents/{}/files/content?path={}",
                agent.id,
                path.replace('/', "%2F")
            ),
            Some(&serde_json::json!({ "content": serde_json::json!({ "tool": tool, "args": args }).to_string() })),
        )
        .await
        .unwrap();
    let done = format!("done/{name}.json");
    let read = || async {
        let done = done.clone();
        agent
            .store()
            .run(move |file| file.file_read(&done))
            .await
            .unwrap()
            .map(|entry| serde_json::from_slice::<serde_json::Value>(&entry.content).unwrap())
    };
    common::wait_for("the lambda's call to finish", || async {
        read().await.is_some()
    })
    .await;
    read().await.unwrap()
}

/// `(status, content)` of every outbox row of `agent`.
async fn outbox(agent: &adf_server::daemon::Agent) -> Vec<(String, String)> {
    agent
        .store()
        .run(|file| {
            file.messages(
                adf_store::messages::Mailbox::Outbox,
                &adf_store::messages::MessageFilter::default(),
                None,
            )
        })
        .await
        .unwrap()
        .into_iter()
        .map(|row| {
            (
                row["status"].as_str().unwrap().to_owned(),
                row["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Messages of the `mesh`/`delivery_failed` log rows of `agent`.
async fn delivery_failures(agent: &adf_server::daemon::Agent) -> Vec<String> {
    let rows = common::logs_of(agent, "mesh").await.into_iter();
    rows.filter(|row| row.event.as_deref() == Some("delivery_failed"))
        .map(|row| row.message)
        .collect()
}

async fn did(agent: &adf_server::daemon::Agent) -> String {
    agent
        .store()
        .run(|file| Ok(file.meta_get("adf_did")?.unwrap().value))
        .await
        .unwrap()
}

/// The agent's status route still answers with its status object.
async fn still_answers(h: &Harness, agent: &Agent) {
    let status = h
        .client
        .get(&format!("/agents/{}/status", agent.id))
        .await
        .unwrap();
    assert!(status.is_object(), "{status}");
}

/// Loads the two caller agents every mesh test here uses: alice sends, bob receives.
async fn alice_and_bob(h: &Harness) -> (Arc<Agent>, Arc<Agent>, String) {
    let mut loaded = Vec::new();
    for name in ["alice", "bob"] {
        let agent = h
            .server
            .daemon
            .load(&caller_agent(h, name))
            .await
            .unwrap()
            .agent;
        loaded.push(agent);
    }
    let bob = loaded.pop().unwrap();
    let alice = loaded.pop().unwrap();
    let bob_did = did(&bob).await;
    (alice, bob, bob_did)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_21_srv_22_srv_25_msg_29_daemon_code_reaches_no_control_api_metadata_or_private_address()
 {
    let h = Harness::start().await;
    let (alice, bob, bob_did) = alice_and_bob(&h).await;
    let stop_bob = format!("{}/agents/{}/stop", h.server.url(), bob.id);
    let cases = [
        (stop_bob.as_str(), "control API"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://10.0.0.1/agents/bob/inbox", "private"),
    ];
    for (n, (url, why)) in cases.iter().enumerate() {
        let sent = call_tool(
            &h,
            &alice,
            &format!("send-{n}"),
            "msg_send",
            serde_json::json!({ "recipient": bob_did, "address": url, "content": format!("message {n}") }),
        )
        .await;
        let message = sent["message"].as_str().unwrap_or_default();
        assert!(message.contains(why), "msg_send to {url}: {sent}");
        let fetched = call_tool(
            &h,
            &alice,
            &format!("fetch-{n}"),
            "sys_fetch",
            serde_json::json!({ "url": url, "method": "POST" }),
        )
        .await;
        let message = fetched["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("sys_fetch refused"),
            "sys_fetch {url}: {fetched}"
        );
        assert!(message.contains(why), "sys_fetch {url}: {fetched}");
    }
    // Every refused message ends failed, with its reason logged.
    let rows = outbox(&alice).await;
    assert_eq!(rows.len(), cases.len(), "{rows:?}");
    assert!(
        rows.iter().all(|(status, _)| status == "failed"),
        "{rows:?}"
    );
    let reasons = delivery_failures(&alice).await;
    assert_eq!(reasons.len(), cases.len(), "{reasons:?}");
    for (_, why) in cases {
        assert!(
            reasons.iter().any(|r| r.contains(why)),
            "{why}: {reasons:?}"
        );
    }
    // Bob was never stopped: still loaded, still answering, and still reachable through the
    // public mesh inbox on the very port whose control routes were refused.
    still_answers(&h, &bob).await;
    let delivered = call_tool(
        &h,
        &alice,
        "send-inbox",
        "msg_send",
        serde_json::json!({ "recipient": bob_did, "address": format!("{}/agents/bob/inbox", h.server.url()), "content": "hello bob" }),
    )
    .await;
    assert_eq!(delivered["ok"]["status"], "delivered", "{delivered}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_29_a_send_to_an_unreachable_port_fails_and_the_agent_keeps_answering() {
    let h = Harness::start().await;
    let (alice, _, bob_did) = alice_and_bob(&h).await;
    // A loopback port nobody listens on: bound, then given back.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let sent = call_tool(
        &h,
        &alice,
        "unreachable",
        "msg_send",
        serde_json::json!({ "recipient": bob_did, "address": format!("http://127.0.0.1:{port}/agents/bob/inbox"), "content": "anyone?" }),
    )
    .await;
    assert!(
        sent["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot reach"),
        "{sent}"
    );
    assert_eq!(
        outbox(&alice).await,
        vec![("failed".to_owned(), "anyone?".to_owned())]
    );
    let reasons = delivery_failures(&alice).await;
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].contains(&format!("127.0.0.1:{port}")),
        "{reasons:?}"
    );
    // The agent keeps serving: its API answers and its next send, by handle, is delivered.
    still_answers(&h, &alice).await;
    let next = call_tool(
        &h,
        &alice,
        "next",
        "msg_send",
        serde_json::json!({ "recipient": "bob", "content": "still here" }),
    )
    .await;
    assert_eq!(next["ok"]["status"], "delivered", "{next}");
    h.stop().await;
}
