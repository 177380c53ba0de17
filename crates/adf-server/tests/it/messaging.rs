//! Agent-to-agent messaging through the daemon (spec §8.5, §11, §12.1), end to end: lambdas
//! call `msg_send`, messages travel over the same-runtime path and over real HTTP to the
//! mesh inbox, and the rows, signatures, encryption and refusals are read back from the files.
//! Every agent here has a provisioned identity from the daemon home's owner and runtime keys.

use std::path::PathBuf;
use std::sync::Arc;

use adf_crypto::alf;
use adf_runtime::identity;
use adf_server::daemon::Agent;
use adf_store::messages::{Mailbox, MessageFilter};
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{Harness, agent_file, owner_keys, wait_for};

/// Sends what the file `send/<name>.json` asks for when it is written, and records the
/// outcome (or the error code) in `sent/<name>.json`.
const SENDER: &str = r#"
export async function main(event) {
  const name = event.data.path.replace('send/', '');
  const args = JSON.parse((await adf.fs_read({ path: event.data.path })).content);
  let out;
  try { out = await adf.msg_send(args) } catch (e) { out = { code: e.code, message: e.message } }
  await adf.fs_write({ path: `sent/${name}`, content: JSON.stringify(out), mode: 'write' });
}
"#;

/// Records each inbox event it receives.
const LISTENER: &str = r#"
export async function main(event) {
  await adf.fs_write({ path: `heard/${Date.now()}-${Math.random()}.json`, content: JSON.stringify(event.data), mode: 'write' });
}
"#;

/// An agent with an identity, the sender lambda on `send/**` and the listener on `on_inbox`.
fn messaging_agent(h: &Harness, name: &str, config: &[(&str, Value)]) -> PathBuf {
    let mut settings: Vec<(&str, Value)> = vec![(
        "triggers",
        json!({
            "on_file_change": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/send.ts:main", "filter": { "watch": "send/**" } }
            ] },
            "on_inbox": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/listen.ts:main" }
            ] },
        }),
    )];
    settings.extend(config.iter().cloned());
    let path = agent_file(
        h.dir.path(),
        name,
        &[("lib/send.ts", SENDER), ("lib/listen.ts", LISTENER)],
        &settings,
    );
    let keys = owner_keys(h);
    let mut file = adf_store::AdfFile::open(&path).unwrap();
    identity::provision_new(&mut file, &keys).unwrap();
    file.close().unwrap();
    path
}

async fn load(h: &Harness, path: &std::path::Path) -> Arc<Agent> {
    h.server.daemon.load(path).await.unwrap().agent
}

/// Asks `agent` to send `args`; returns what its lambda recorded.
async fn send(h: &Harness, agent: &Arc<Agent>, name: &str, args: Value) -> Value {
    let path = format!("send/{name}.json");
    h.client
        .call(
            Method::PUT,
            &format!(
                "/agents/{}/files/content?path={}",
                agent.id,
                path.replace('/', "%2F")
            ),
            Some(&json!({ "content": args.to_string() })),
        )
        .await
        .unwrap();
    let outcome = format!("sent/{name}.json");
    wait_for("the send to finish", || async {
        json_file(agent, &outcome).await.is_some()
    })
    .await;
    json_file(agent, &outcome).await.unwrap()
}

/// Sends `args` through `agent`'s msg_send and checks the outcome's `field` is `expected`.
async fn check_send(
    h: &Harness,
    agent: &Arc<Agent>,
    name: &str,
    args: Value,
    field: &str,
    expected: &str,
) {
    let out = send(h, agent, name, args).await;
    assert_eq!(out[field], expected, "{name}: {out}");
}

/// A JSON file of the agent, once it exists.
async fn json_file(agent: &Arc<Agent>, path: &str) -> Option<Value> {
    let path = path.to_owned();
    agent
        .store()
        .run(move |file| file.file_read(&path))
        .await
        .unwrap()
        .map(|entry| serde_json::from_slice(&entry.content).unwrap())
}

async fn rows(agent: &Arc<Agent>, mailbox: Mailbox) -> Vec<serde_json::Map<String, Value>> {
    agent
        .store()
        .run(move |file| file.messages(mailbox, &MessageFilter::default(), None))
        .await
        .unwrap()
}

async fn did(agent: &Arc<Agent>) -> String {
    agent
        .store()
        .run(|file| Ok(file.meta_get("adf_did")?.unwrap().value))
        .await
        .unwrap()
}

fn parsed(row: &serde_json::Map<String, Value>, column: &str) -> Value {
    serde_json::from_str(row[column].as_str().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_01_msg_03_msg_09_msg_29_msg_34_msg_49_a_local_send_by_handle_is_signed_stored_and_raises_on_inbox()
 {
    let h = Harness::start().await;
    let alice = load(
        &h,
        &messaging_agent(&h, "alice", &[("security.level", json!(2))]),
    )
    .await;
    let bob = load(
        &h,
        &messaging_agent(&h, "bob", &[("context.audit.inbox", json!(true))]),
    )
    .await;
    check_send(&h, &alice, "hello", json!({ "recipient": "bob", "content": "Hello Bob", "subject": "Hi", "meta": { "k": 1, "message_verified": true } }), "status", "delivered").await;

    // The sender's outbox row: delivered, plaintext, original tombstoned.
    let outbox = rows(&alice, Mailbox::Outbox).await;
    assert_eq!(outbox.len(), 1);
    assert_eq!(outbox[0]["status"], "delivered");
    assert_eq!(outbox[0]["status_code"], 202);
    assert!(outbox[0]["delivered_at"].as_i64().is_some());
    assert_eq!(outbox[0]["content"], "Hello Bob");
    assert_eq!(outbox[0]["to"].as_str().unwrap(), did(&bob).await);
    // inbox_mode (default true) keeps the sender's own copy, already read.
    let own = rows(&alice, Mailbox::Inbox).await;
    assert_eq!(own.len(), 1);
    assert_eq!(own[0]["status"], "read");

    // The recipient's row: verified signatures, no encryption on the same runtime (MSG-09),
    // wire trust keys replaced by the receiver's own stamps.
    wait_for("bob's on_inbox lambda", || async {
        let bob = Arc::clone(&bob);
        !bob.store()
            .run(|file| file.file_list("heard/"))
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    let inbox = rows(&bob, Mailbox::Inbox).await;
    assert_eq!(inbox.len(), 1);
    let row = &inbox[0];
    assert_eq!(row["from"].as_str().unwrap(), did(&alice).await);
    assert_eq!(row["content"], "Hello Bob");
    assert_eq!(row["subject"], "Hi");
    assert_eq!(row["status"], "unread");
    assert_eq!(row["source"], "mesh");
    assert_eq!(row["sender_alias"], "alice");
    assert_eq!(row["message_id"], outbox[0]["message_id"]);
    assert!(row["owner"].as_str().unwrap().starts_with("did:key:"));
    let meta = parsed(row, "meta");
    assert_eq!(meta["k"], 1);
    assert_eq!(meta["message_verified"], true);
    assert_eq!(meta["payload_verified"], true);
    assert!(meta.get("payload_encrypted").is_none(), "{meta}");
    let original = parsed(row, "original_message");
    assert_eq!(original["payload"]["content"], "[flattened]");
    assert_eq!(original["payload"]["content_type"], "text/plain");
    assert!(
        original["signature"]
            .as_str()
            .unwrap()
            .starts_with("ed25519:")
    );
    // MSG-49: with audit.inbox the arrival is archived, its ref the ALF id.
    let audits = bob.store().run(|file| file.audit_list()).await.unwrap();
    let archived = audits
        .iter()
        .find(|a| a.source == "inbox_message")
        .expect("an inbox_message audit row");
    assert_eq!(archived.r#ref.as_deref(), row["message_id"].as_str());
    assert!(rows(&alice, Mailbox::Outbox).await.len() == 1);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_02_msg_05_msg_06_msg_08_msg_16_msg_24_msg_29_an_http_send_at_level_2_is_encrypted_on_the_wire_and_plain_in_the_inbox()
 {
    let h = Harness::start().await;
    let alice = load(
        &h,
        &messaging_agent(&h, "alice", &[("security.level", json!(2))]),
    )
    .await;
    let bob = load(&h, &messaging_agent(&h, "bob", &[])).await;
    let bob_did = did(&bob).await;
    // A DID with the URL of a mesh inbox this test serves: the wire message is captured there
    // and then handed to the daemon's real inbox unchanged.
    let capture = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let capture_url = format!("http://{}/inbox", capture.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<Value>();
    let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
    let forward_to = format!("{}/agents/bob/inbox", h.server.url());
    let app = axum::Router::new().route(
        "/inbox",
        axum::routing::post(move |body: axum::body::Bytes| {
            let tx = Arc::clone(&tx);
            let forward_to = forward_to.clone();
            async move {
                let wire: Value = serde_json::from_slice(&body).unwrap();
                if let Some(tx) = tx.lock().unwrap().take() {
                    let _ = tx.send(wire);
                }
                let response = reqwest::Client::new()
                    .post(&forward_to)
                    .body(body.to_vec())
                    .header("content-type", "application/json")
                    .send()
                    .await
                    .unwrap();
                axum::http::StatusCode::from_u16(response.status().as_u16()).unwrap()
            }
        }),
    );
    tokio::spawn(async move { axum::serve(capture, app).await });

    check_send(&h, &alice, "secret", json!({ "recipient": bob_did, "address": capture_url, "content": "the plan", "meta": { "private": true }, "message_meta": { "priority": "high", "identity_verified": true } }), "status", "delivered").await;
    let wire = rx.await.unwrap();
    // MSG-02: the ALF shape.
    for field in [
        "version",
        "network",
        "id",
        "timestamp",
        "from",
        "to",
        "reply_to",
        "payload",
        "signature",
    ] {
        assert!(wire.get(field).is_some(), "wire lacks {field}: {wire}");
    }
    assert!(wire["id"].as_str().unwrap().len() >= 20);
    // MSG-24 / MSG-16: meta only inside the ciphertext; message_meta in clear, trust keys gone.
    assert_eq!(wire["payload"]["content_type"], alf::ENCRYPTED_CONTENT_TYPE);
    assert!(!wire.to_string().contains("the plan"));
    assert!(!wire["payload"].to_string().contains("private"));
    assert_eq!(wire["meta"]["priority"], "high");
    assert!(wire["meta"].get("identity_verified").is_none());
    let inbox = rows(&bob, Mailbox::Inbox).await;
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0]["content"], "the plan", "MSG-08: plaintext stored");
    let meta = parsed(&inbox[0], "meta");
    assert_eq!(meta["private"], true);
    assert_eq!(meta["payload_encrypted"], true);
    assert_eq!(meta["payload_verified"], true);

    // MSG-06: a tampered ciphertext is refused before decryption, and nothing is stored.
    let mut tampered = wire.clone();
    let content = tampered["payload"]["content"].as_str().unwrap().to_owned();
    let flipped = if content.starts_with('A') { "B" } else { "A" };
    tampered["payload"]["content"] = json!(format!("{flipped}{}", &content[1..]));
    tampered["id"] = json!("another-message-id-0001");
    let (status, body) = h
        .client
        .raw(Method::POST, "/agents/bob/inbox", Some(&tampered))
        .await
        .unwrap();
    assert_eq!(status, 403, "{body}");
    assert_eq!(rows(&bob, Mailbox::Inbox).await.len(), 1);

    // MSG-29: a delivery nobody accepts fails, stays failed, and is not retried.
    check_send(&h, &alice, "lost", json!({ "recipient": bob_did, "address": "http://127.0.0.1:9/agents/bob/inbox", "content": "anyone?" }), "code", "TOOL_ERROR").await;
    let outbox = rows(&alice, Mailbox::Outbox).await;
    let lost = outbox.iter().find(|r| r["content"] == "anyone?").unwrap();
    assert_eq!(lost["status"], "failed");
    assert!(lost["delivered_at"].is_null());
    h.stop().await;
}

fn foreign_key() -> adf_crypto::SigningKey {
    adf_crypto::SigningKey::from_bytes(&rand::random())
}

/// A wire message from a fresh key to `to`, signed or not.
fn foreign_message(to: &str, signed: bool, meta: Value, payload_meta: Value) -> (Value, String) {
    foreign_message_from(&foreign_key(), to, signed, meta, payload_meta)
}

/// A wire message from `key` to `to`, signed or not.
fn foreign_message_from(
    key: &adf_crypto::SigningKey,
    to: &str,
    signed: bool,
    meta: Value,
    payload_meta: Value,
) -> (Value, String) {
    let from = adf_crypto::did_from_public(&key.verifying_key());
    let message = json!({
        "version": "1.0", "network": "devnet",
        "id": adf_store::defaults::random_id(20),
        "timestamp": adf_store::time::now_iso(),
        "from": from, "to": to, "reply_to": "http://127.0.0.1:9/agents/x/inbox",
        "meta": meta,
        "payload": { "meta": payload_meta, "sender_alias": "Owner", "content_type": "text/plain",
                     "content": "hi", "sent_at": adf_store::time::now_iso() }
    });
    let wire = if signed {
        alf::egress(message, Some(key), 1, false, &mut rand::rng()).unwrap()
    } else {
        message
    };
    (wire, from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_10_msg_11_msg_14_msg_15_msg_17_msg_32_msg_33_ingress_applies_the_receivers_rules() {
    let h = Harness::start().await;
    let open = load(&h, &messaging_agent(&h, "open", &[])).await;
    let strict = load(
        &h,
        &messaging_agent(&h, "strict", &[("security.allow_unsigned", json!(false))]),
    )
    .await;
    let deaf = load(
        &h,
        &messaging_agent(&h, "deaf", &[("messaging.receive", json!(false))]),
    )
    .await;
    let open_did = did(&open).await;

    // MSG-10 / MSG-14 / MSG-15 / MSG-17: unsigned accepted, claims dropped, no owner.
    let (unsigned, _) = foreign_message(
        &open_did,
        false,
        json!({ "owner": "did:key:z6MkFake" }),
        json!({ "identity_verified": true, "message_verified": true }),
    );
    let (status, body) = h
        .client
        .raw(Method::POST, "/agents/open/inbox", Some(&unsigned))
        .await
        .unwrap();
    assert_eq!(status, 202, "{body}");
    let row = rows(&open, Mailbox::Inbox).await.remove(0);
    let meta = parsed(&row, "meta");
    assert_eq!(meta["message_verified"], false);
    assert_eq!(meta["identity_verified"], false);
    assert!(
        row["owner"].is_null(),
        "owner kept only when the signature verified"
    );
    assert!(
        row["sender_alias"].is_null(),
        "the reserved alias 'Owner' is dropped"
    );

    // MSG-15: a signed message keeps its owner.
    let (signed, _) = foreign_message(
        &open_did,
        true,
        json!({ "owner": "did:key:z6MkReal" }),
        json!({}),
    );
    crate::common::assert_status(&h, Method::POST, "/agents/open/inbox", Some(&signed), 202).await;
    let rows_now = rows(&open, Mailbox::Inbox).await;
    assert!(rows_now.iter().any(|r| r["owner"] == "did:key:z6MkReal"));

    // MSG-11: allow_unsigned false refuses an unsigned message.
    let (unsigned, _) = foreign_message(&did(&strict).await, false, json!({}), json!({}));
    crate::common::assert_status(
        &h,
        Method::POST,
        "/agents/strict/inbox",
        Some(&unsigned),
        403,
    )
    .await;
    assert!(rows(&strict, Mailbox::Inbox).await.is_empty());

    // MSG-33: receive false is off the mesh.
    let (msg, _) = foreign_message(&did(&deaf).await, true, json!({}), json!({}));
    crate::common::assert_status(&h, Method::POST, "/agents/deaf/inbox", Some(&msg), 404).await;

    // MSG-32: block_list refuses the listed sender; a non-empty allow_list admits only its
    // own and refuses messages without a sender DID.
    let blocked = foreign_key();
    let blocked_did = adf_crypto::did_from_public(&blocked.verifying_key());
    let picky = load(
        &h,
        &messaging_agent(
            &h,
            "picky",
            &[("messaging.block_list", json!([blocked_did]))],
        ),
    )
    .await;
    let friend = foreign_key();
    let friend_did = adf_crypto::did_from_public(&friend.verifying_key());
    let exclusive = load(
        &h,
        &messaging_agent(
            &h,
            "exclusive",
            &[("messaging.allow_list", json!([friend_did]))],
        ),
    )
    .await;
    let picky_did = did(&picky).await;
    let exclusive_did = did(&exclusive).await;
    let cases = [
        (
            "picky",
            foreign_message_from(&blocked, &picky_did, true, json!({}), json!({})).0,
            403,
        ),
        (
            "picky",
            foreign_message(&picky_did, true, json!({}), json!({})).0,
            202,
        ),
        (
            "exclusive",
            foreign_message(&exclusive_did, true, json!({}), json!({})).0,
            403,
        ),
        (
            "exclusive",
            foreign_message_from(&friend, &exclusive_did, true, json!({}), json!({})).0,
            202,
        ),
    ];
    for (handle, message, expected) in cases {
        let (status, body) = h
            .client
            .raw(
                Method::POST,
                &format!("/agents/{handle}/inbox"),
                Some(&message),
            )
            .await
            .unwrap();
        assert_eq!(status, expected, "{handle}: {body}");
    }
    let mut sender_less = foreign_message(&exclusive_did, false, json!({}), json!({})).0;
    sender_less["from"] = json!("some-handle");
    crate::common::assert_status(
        &h,
        Method::POST,
        "/agents/exclusive/inbox",
        Some(&sender_less),
        403,
    )
    .await;
    assert_eq!(rows(&picky, Mailbox::Inbox).await.len(), 1);
    assert_eq!(rows(&exclusive, Mailbox::Inbox).await.len(), 1);
    let (msg, _) = foreign_message(&open_did, true, json!({}), json!({}));
    // Unknown recipients are 404 (reference behaviour).
    crate::common::assert_status(&h, Method::POST, "/agents/nobody/inbox", Some(&msg), 404).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_20_msg_21_msg_27_msg_30_replies_modes_and_visibility() {
    let h = Harness::start().await;
    let alice = load(&h, &messaging_agent(&h, "alice", &[])).await;
    let bob = load(
        &h,
        &messaging_agent(&h, "bob", &[("messaging.mode", json!("respond_only"))]),
    )
    .await;
    let hermit = load(
        &h,
        &messaging_agent(&h, "hermit", &[("messaging.visibility", json!("off"))]),
    )
    .await;
    let quiet = load(
        &h,
        &messaging_agent(&h, "quiet", &[("messaging.mode", json!("listen_only"))]),
    )
    .await;

    // MSG-27: respond_only cannot start a conversation, listen_only never sends.
    check_send(
        &h,
        &bob,
        "first",
        json!({ "recipient": "alice", "content": "hi" }),
        "code",
        "DISABLED",
    )
    .await;
    check_send(
        &h,
        &quiet,
        "any",
        json!({ "recipient": "alice", "content": "hi" }),
        "code",
        "DISABLED",
    )
    .await;

    // MSG-30: an `off` agent is unreachable but can still send.
    check_send(
        &h,
        &alice,
        "to-hermit",
        json!({ "recipient": "hermit", "content": "hi" }),
        "code",
        "DENIED",
    )
    .await;
    assert!(rows(&hermit, Mailbox::Inbox).await.is_empty());
    check_send(
        &h,
        &hermit,
        "out",
        json!({ "recipient": "alice", "content": "from the dark" }),
        "status",
        "delivered",
    )
    .await;

    // A hosted agent's DID needs no address: it is found on this runtime.
    let bob_did = did(&bob).await;
    check_send(
        &h,
        &alice,
        "by-did",
        json!({ "recipient": bob_did, "content": "by did" }),
        "status",
        "delivered",
    )
    .await;
    assert!(
        rows(&bob, Mailbox::Inbox)
            .await
            .iter()
            .any(|r| r["content"] == "by did")
    );
    // An unknown DID without an address cannot be delivered anywhere.
    let stranger = adf_crypto::did_from_public(&foreign_key().verifying_key());
    check_send(
        &h,
        &alice,
        "stranger",
        json!({ "recipient": stranger, "content": "hi" }),
        "code",
        "INVALID_INPUT",
    )
    .await;

    // MSG-21: a handle no local agent has is an error, not a remote lookup.
    check_send(
        &h,
        &alice,
        "ghost",
        json!({ "recipient": "ghost", "content": "hi" }),
        "code",
        "NOT_FOUND",
    )
    .await;

    // MSG-20: bob replies by parent_id only; the reply lands at alice in the same thread.
    check_send(
        &h,
        &alice,
        "ask",
        json!({ "recipient": "bob", "content": "status?", "thread_id": "t-1" }),
        "status",
        "delivered",
    )
    .await;
    let inbox = rows(&bob, Mailbox::Inbox).await;
    let parent = inbox.iter().find(|r| r["content"] == "status?").unwrap();
    let parent_id = parent["id"].as_str().unwrap().to_owned();
    check_send(
        &h,
        &bob,
        "reply",
        json!({ "parent_id": parent_id, "content": "all good" }),
        "status",
        "delivered",
    )
    .await;
    let alice_inbox = rows(&alice, Mailbox::Inbox).await;
    let reply = alice_inbox
        .iter()
        .find(|r| r["content"] == "all good")
        .expect("the reply reached alice");
    assert_eq!(reply["thread_id"], "t-1");
    assert_eq!(reply["parent_id"], parent["message_id"]);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_40_msg_41_agent_discover_lists_signed_cards_of_reachable_agents_only() {
    let h = Harness::start().await;
    let seeker = messaging_agent(&h, "seeker", &[]);
    let mut file = adf_store::AdfFile::open(&seeker).unwrap();
    let finder = r#"
export async function main(event) {
  const all = await adf.agent_discover({});
  const filtered = await adf.agent_discover({ handle: 'MON' });
  await adf.fs_write({ path: 'found.json', content: JSON.stringify({ all, filtered }), mode: 'write' });
}
"#;
    file.file_write(
        adf_store::Caller::Owner,
        "lib/find.ts",
        finder.as_bytes(),
        &adf_store::FileWrite::default(),
    )
    .unwrap();
    file.config_set_path(
        adf_store::Caller::Owner,
        "triggers.on_startup",
        adf_store::ConfigAction::Set,
        json!({ "enabled": true, "targets": [{ "scope": "system", "lambda": "lib/find.ts:main" }] }),
    )
    .unwrap();
    file.close().unwrap();
    let _monitor = load(
        &h,
        &messaging_agent(
            &h,
            "monitor",
            &[("description", json!("Monitors resources"))],
        ),
    )
    .await;
    let _hidden = load(
        &h,
        &messaging_agent(&h, "hidden", &[("messaging.visibility", json!("off"))]),
    )
    .await;
    let seeker = load(&h, &seeker).await;
    wait_for("the discovery", || async {
        json_file(&seeker, "found.json").await.is_some()
    })
    .await;
    let found = json_file(&seeker, "found.json").await.unwrap();
    let handles: Vec<&str> = found["all"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["handle"].as_str().unwrap())
        .collect();
    assert_eq!(
        handles,
        ["monitor"],
        "hidden and self are not listed: {found}"
    );
    let card = &found["filtered"][0];
    assert_eq!(card["handle"], "monitor");
    assert_eq!(card["visibility"], "localhost");
    assert_eq!(card["source"], "local-runtime");
    assert_eq!(card["in_subdirectory"], false);
    assert!(
        card["endpoints"]["inbox"]
            .as_str()
            .unwrap()
            .ends_with("/agents/monitor/inbox")
    );
    adf_crypto::verify_card(card).expect("a signed card");
    // The card route serves the same signed card to a loopback requester.
    let served: Value = h.client.get("/agents/monitor/card").await.unwrap();
    adf_crypto::verify_card(&served).unwrap();
    crate::common::assert_status(&h, Method::GET, "/agents/hidden/card", None, 404).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_19_msg_23_msg_25_msg_26_msg_send_checks_its_arguments_before_anything_is_stored() {
    let h = Harness::start().await;
    let alice = load(&h, &messaging_agent(&h, "alice", &[])).await;
    let bob = load(&h, &messaging_agent(&h, "bob", &[])).await;
    let stranger = adf_crypto::did_from_public(&foreign_key().verifying_key());
    let form = adf_runtime::messaging::send::FORM_CONTENT_TYPE;
    let refused = [
        // MSG-19: a remote DID needs an http(s) inbox URL as its address.
        (
            "no-address",
            json!({ "recipient": stranger, "content": "hi" }),
        ),
        (
            "bad-address",
            json!({ "recipient": stranger, "address": "not a url", "content": "hi" }),
        ),
        (
            "ftp-address",
            json!({ "recipient": stranger, "address": "ftp://127.0.0.1/inbox", "content": "hi" }),
        ),
        ("no-content", json!({ "recipient": "bob" })),
        // MSG-26: no intent or trace_id parameters.
        (
            "intent",
            json!({ "recipient": "bob", "content": "hi", "intent": "inform" }),
        ),
        (
            "trace",
            json!({ "recipient": "bob", "content": "hi", "trace_id": "t1" }),
        ),
        // MSG-25: the content must match its declared type.
        (
            "bad-json",
            json!({ "recipient": "bob", "content": "{nope", "content_type": "application/json" }),
        ),
        (
            "empty-form",
            json!({ "recipient": "bob", "content": "{}", "content_type": form }),
        ),
        (
            "not-a-type",
            json!({ "recipient": "bob", "content": "hi", "content_type": "plain" }),
        ),
    ];
    for (name, args) in refused {
        check_send(&h, &alice, name, args, "code", "INVALID_INPUT").await;
    }
    assert!(
        rows(&alice, Mailbox::Outbox).await.is_empty(),
        "a refused send stored a row"
    );
    assert!(rows(&bob, Mailbox::Inbox).await.is_empty());

    // MSG-23: `content` is the body; `payload` is accepted as its alias.
    check_send(
        &h,
        &alice,
        "alias",
        json!({ "recipient": "bob", "payload": "via the alias" }),
        "status",
        "delivered",
    )
    .await;
    let form_content = json!({ "questions": [{ "id": "q1", "text": "ok?" }] }).to_string();
    check_send(
        &h,
        &alice,
        "form",
        json!({ "recipient": "bob", "content": form_content, "content_type": form }),
        "status",
        "delivered",
    )
    .await;
    let mut contents: Vec<String> = rows(&bob, Mailbox::Inbox)
        .await
        .into_iter()
        .map(|r| r["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    contents.sort();
    let mut expected = vec!["via the alias".to_owned(), form_content];
    expected.sort();
    assert_eq!(contents, expected);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_sending_to_each_other_at_once_both_deliver() {
    let h = Harness::start().await;
    let alice = load(&h, &messaging_agent(&h, "alice", &[])).await;
    let bob = load(&h, &messaging_agent(&h, "bob", &[])).await;
    // Each lambda holds its own agent's worker while it delivers to the other.
    let (a, b) = tokio::join!(
        send(
            &h,
            &alice,
            "ping",
            json!({ "recipient": "bob", "content": "ping" })
        ),
        send(
            &h,
            &bob,
            "pong",
            json!({ "recipient": "alice", "content": "pong" })
        ),
    );
    assert_eq!(a["status"], "delivered", "{a}");
    assert_eq!(b["status"], "delivered", "{b}");
    let unread = |rows: Vec<serde_json::Map<String, Value>>| {
        rows.into_iter()
            .filter(|r| r["status"] == "unread")
            .map(|r| r["content"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(unread(rows(&alice, Mailbox::Inbox).await), ["pong"]);
    assert_eq!(unread(rows(&bob, Mailbox::Inbox).await), ["ping"]);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_endpoints_need_no_bearer_token_and_the_control_api_still_does() {
    let h = Harness::start_with_token(Some("secret")).await;
    let _bob = load(&h, &messaging_agent(&h, "bob", &[])).await;
    let anonymous = adf_server::client::Client::new(&h.server.url(), None).unwrap();
    let (status, body) = anonymous
        .raw(Method::GET, "/agents/bob/health", None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["handle"], "bob");
    let (status, _) = anonymous
        .raw(Method::GET, "/agents/bob/card", None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    // A bad message is refused by ingress (400), not by the token check (401).
    let (status, _) = anonymous
        .raw(
            Method::POST,
            "/agents/bob/inbox",
            Some(&json!({ "not": "alf" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 400);
    for path in ["/agents", "/agents/bob/inbox", "/agents/bob/config"] {
        let (status, _) = anonymous.raw(Method::GET, path, None).await.unwrap();
        assert_eq!(status, 401, "{path}");
    }
    h.stop().await;
}

/// Adds `lib/mw.ts` to an agent file that is not loaded yet, authorized.
fn with_middleware(path: &std::path::Path, source: &str) {
    let mut file = adf_store::AdfFile::open(path).unwrap();
    file.file_write(
        adf_store::Caller::Owner,
        "lib/mw.ts",
        source.as_bytes(),
        &adf_store::FileWrite::default(),
    )
    .unwrap();
    file.file_set_authorized(adf_store::Caller::Owner, "lib/mw.ts", true)
        .unwrap();
    file.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_15_srv_17_srv_18_inbox_middleware_over_http_answers_the_reject_code_and_changes_what_is_stored()
 {
    let h = Harness::start().await;
    let path = messaging_agent(
        &h,
        "guarded",
        &[(
            "security.middleware.inbox",
            json!([{ "lambda": "lib/mw.ts:gate" }, { "lambda": "lib/mw.ts:tag" }]),
        )],
    );
    with_middleware(
        &path,
        r#"
export async function gate(input) {
  if (input.data.payload.content.includes('spam')) return { reject: { code: 429, reason: 'slow down' } }
}
export async function tag(input) {
  await adf.fs_write({ path: 'tagged.txt', content: input.data.payload.content, mode: 'append' })
  input.data.payload.content += ' (checked)'
  return { data: input.data }
}
"#,
    );
    let guarded = load(&h, &path).await;
    let to = did(&guarded).await;

    let (mut spam, _) = foreign_message(&to, false, json!({}), json!({}));
    spam["payload"]["content"] = json!("spam please");
    let (status, body) = h
        .client
        .raw(Method::POST, "/agents/guarded/inbox", Some(&spam))
        .await
        .unwrap();
    assert_eq!(status, 429, "{body}");
    assert!(body.to_string().contains("slow down"), "{body}");
    assert!(rows(&guarded, Mailbox::Inbox).await.is_empty());
    assert!(
        json_file(&guarded, "tagged.txt").await.is_none(),
        "the chain stopped at the rejection"
    );

    let (hello, _) = foreign_message(&to, true, json!({}), json!({}));
    let (status, body) = h
        .client
        .raw(Method::POST, "/agents/guarded/inbox", Some(&hello))
        .await
        .unwrap();
    assert_eq!(status, 202, "{body}");
    let inbox = rows(&guarded, Mailbox::Inbox).await;
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0]["content"], "hi (checked)");
    assert_eq!(parsed(&inbox[0], "meta")["message_verified"], true);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_17_srv_18_outbox_middleware_changes_the_message_before_it_is_signed() {
    let h = Harness::start().await;
    let sender_path = messaging_agent(
        &h,
        "stamper",
        &[(
            "security.middleware.outbox",
            json!([{ "lambda": "lib/mw.ts:stamp" }]),
        )],
    );
    with_middleware(
        &sender_path,
        r#"
export async function stamp(input) {
  if (input.point !== 'outbox' || input.data.transport.method !== 'local') {
    return { reject: { code: 400, reason: 'unexpected input ' + JSON.stringify(input) } }
  }
  input.data.message.payload.content += ' [stamped]'
  return { data: input.data }
}
"#,
    );
    let sender = load(&h, &sender_path).await;
    let receiver = load(&h, &messaging_agent(&h, "reader", &[])).await;
    check_send(
        &h,
        &sender,
        "one",
        json!({ "recipient": "reader", "content": "hello" }),
        "status",
        "delivered",
    )
    .await;
    assert_eq!(
        rows(&sender, Mailbox::Outbox).await[0]["content"],
        "hello [stamped]"
    );
    let inbox = rows(&receiver, Mailbox::Inbox).await;
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0]["content"], "hello [stamped]");
    // The receiver verified the sender's signatures over the stamped message: the
    // middleware ran before signing.
    let meta = parsed(&inbox[0], "meta");
    assert_eq!(meta["message_verified"], true, "{meta}");
    assert_eq!(meta["payload_verified"], true, "{meta}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prm_33_loading_a_new_local_agent_tells_main_the_reachable_agents_at_its_next_turn() {
    use adf_testkit::{MockProvider, Turn, Wire};
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.repeat(Turn::text("noted"));
    let h = Harness::start().await;
    let mut config = crate::common::model_config(&mock);
    config.push(("handle", json!("lead")));
    let lead_path = agent_file(h.dir.path(), "lead", &[], &config);
    let lead = h.server.daemon.load(&lead_path).await.unwrap().agent;
    let turns_ended = |n: usize| {
        let lead = Arc::clone(&lead);
        async move {
            let texts = crate::common::loop_texts_in(&lead, "main").await;
            texts.iter().filter(|t| t.contains("noted")).count() >= n
        }
    };
    // Alone on the runtime: nothing to announce.
    crate::common::chat(&h, &lead, "first").await;
    wait_for("the first turn", || turns_ended(1)).await;
    let listing = "agents you can reach on this runtime";
    assert!(!crate::common::has_text(&lead, "main", listing).await);
    // Another agent is loaded: lead's next turn carries the list, once.
    let helper_path = agent_file(
        h.dir.path(),
        "helper",
        &[],
        &[
            ("handle", json!("helper")),
            ("description", json!("Answers questions")),
        ],
    );
    h.server.daemon.load(&helper_path).await.unwrap();
    crate::common::chat(&h, &lead, "second").await;
    wait_for("the second turn", || turns_ended(2)).await;
    crate::common::chat(&h, &lead, "third").await;
    wait_for("the third turn", || turns_ended(3)).await;
    let texts = crate::common::loop_texts_in(&lead, "main").await;
    let listed: Vec<&String> = texts.iter().filter(|t| t.contains(listing)).collect();
    assert_eq!(listed.len(), 1, "{texts:?}");
    assert!(listed[0].contains("- helper"), "{}", listed[0]);
    assert!(listed[0].contains("Answers questions"), "{}", listed[0]);
    assert!(!listed[0].contains("- lead"), "{}", listed[0]);
    h.stop().await;
}
