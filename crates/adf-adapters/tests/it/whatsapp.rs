//! The WhatsApp adapter against adf-testkit's local Graph API server: signed webhooks in
//! (verification, signature first, policy, dedup across a restart, media, form answers),
//! messages out (replies quoting the message, long texts, forms as buttons and lists), rate
//! limits with backoff, platform errors, refused and missing credentials, chat_info.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use adf_adapters::{
    AdapterError, AdapterHost, AdapterState, Backoff, HostOptions, OutboundMessage, WebhookRequest,
    WebhookResponse, state_root_for,
};
use adf_store::{AdfFile, CreateOptions, IdentityRow};
use adf_testkit::whatsapp::{
    GraphFault, GraphOp, GraphServer, button_reply, list_reply, media_message, sign, status_update,
    text_message, text_reply, webhook_payload,
};
use serde_json::{Map, Value, json};

use crate::common::{FileSink, RecordingSleeper, adapters_config, wait_until};

const TOKEN: &str = "EAAG-test-access-token";
const APP_SECRET: &str = "test-app-secret";
const VERIFY: &str = "owner-chosen-verify-token";
const PHONE: &str = "106540352242922";
const ANN: &str = "16315551234";

fn credential(purpose: &str, value: &str) -> IdentityRow {
    IdentityRow {
        purpose: purpose.into(),
        value: value.as_bytes().to_vec(),
        encryption_algo: "plain".into(),
        salt: None,
        kdf_params: None,
        code_access: false,
    }
}

/// A new agent file whose `adapters.whatsapp` points at `api_root` (plus `extra` entry
/// fields), with the credentials of `credentials` (`(KEY, value)`).
fn agent_file(dir: &Path, api_root: &str, extra: Value, credentials: &[(&str, &str)]) -> PathBuf {
    let path = dir.join("wa.adf");
    let mut file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    let rows: Vec<IdentityRow> = credentials
        .iter()
        .map(|(key, value)| credential(&format!("adapter:whatsapp:{key}"), value))
        .collect();
    if !rows.is_empty() {
        file.identity_put(&rows).unwrap();
    }
    let mut entry = json!({
        "enabled": true,
        "config": { "api_root": api_root, "phone_number_id": PHONE },
    });
    if let (Some(entry), Some(extra)) = (entry.as_object_mut(), extra.as_object()) {
        entry.extend(extra.clone());
    }
    file.config_set_path(
        adf_store::Caller::Owner,
        "adapters",
        adf_store::ConfigAction::Set,
        json!({ "whatsapp": entry }),
    )
    .unwrap();
    file.close().unwrap();
    path
}

const ALL_CREDENTIALS: &[(&str, &str)] = &[
    ("WHATSAPP_ACCESS_TOKEN", TOKEN),
    ("WHATSAPP_APP_SECRET", APP_SECRET),
    ("WHATSAPP_VERIFY_TOKEN", VERIFY),
];

struct Rig {
    _dir: tempfile::TempDir,
    server: GraphServer,
    sink: Arc<FileSink>,
    sleeper: Arc<RecordingSleeper>,
    path: PathBuf,
}

async fn rig_with(extra: Value, credentials: &[(&str, &str)]) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let server = GraphServer::start(TOKEN, PHONE).await;
    let path = agent_file(dir.path(), &server.api_root(), extra, credentials);
    Rig {
        sink: FileSink::open(&path),
        _dir: dir,
        server,
        sleeper: Arc::new(RecordingSleeper::default()),
        path,
    }
}

async fn rig(extra: Value) -> Rig {
    rig_with(extra, ALL_CREDENTIALS).await
}

impl Rig {
    fn host(&self) -> AdapterHost {
        AdapterHost::start(
            &adapters_config(&self.sink),
            self.sink.clone(),
            HostOptions {
                sleeper: self.sleeper.clone(),
                backoff: Backoff::default(),
            },
        )
    }

    async fn running_host(&self) -> AdapterHost {
        let host = self.host();
        self.wait_state(&host, AdapterState::Running).await;
        host
    }

    async fn wait_state(&self, host: &AdapterHost, state: AdapterState) {
        wait_until(&format!("the adapter is {}", state.as_str()), || {
            host.status("whatsapp").is_some_and(|s| s.state == state)
        })
        .await;
    }
}

/// A POST of `payload` signed with `secret`.
fn signed_post(payload: &Value, secret: &str) -> WebhookRequest {
    let body = payload.to_string().into_bytes();
    WebhookRequest {
        method: "POST".into(),
        query: Vec::new(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("x-hub-signature-256".into(), sign(secret, &body)),
        ],
        body,
    }
}

fn messages_payload(messages: Vec<Value>) -> Value {
    webhook_payload(PHONE, &[(ANN, "Ann")], messages, Vec::new())
}

async fn post(host: &AdapterHost, payload: &Value) -> WebhookResponse {
    host.webhook("whatsapp", &signed_post(payload, APP_SECRET))
        .await
}

fn text(row: &Map<String, Value>, column: &str) -> String {
    row.get(column)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn outbound(content: &str, content_type: Option<&str>, context: Option<Value>) -> OutboundMessage {
    OutboundMessage {
        outbox_id: "out-1".into(),
        recipient: format!("whatsapp:{ANN}"),
        content: content.into(),
        content_type: content_type.map(str::to_owned),
        source_context: context,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_43_whatsapp_verification_echoes_the_challenge_and_a_signed_message_is_one_inbox_row() {
    let rig = rig(json!({})).await;
    let host = rig.running_host().await;

    let verify = |token: &str, mode: &str| WebhookRequest {
        method: "GET".into(),
        query: vec![
            ("hub.mode".into(), mode.into()),
            ("hub.verify_token".into(), token.into()),
            ("hub.challenge".into(), "1158201444".into()),
        ],
        headers: Vec::new(),
        body: Vec::new(),
    };
    let ok = host.webhook("whatsapp", &verify(VERIFY, "subscribe")).await;
    assert_eq!((ok.status, ok.body.as_slice()), (200, &b"1158201444"[..]));
    for (token, mode) in [
        ("wrong", "subscribe"),
        (VERIFY, "unsubscribe"),
        ("", "subscribe"),
    ] {
        let refused = host.webhook("whatsapp", &verify(token, mode)).await;
        assert_eq!(refused.status, 403, "{token}/{mode}");
        assert!(!String::from_utf8_lossy(&refused.body).contains("1158201444"));
    }

    let answer = post(
        &host,
        &messages_payload(vec![text_message(ANN, "wamid.IN1", "hello agent")]),
    )
    .await;
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let rows = rig.sink.inbox();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(text(row, "source"), "whatsapp");
    assert_eq!(text(row, "from"), format!("whatsapp:{ANN}"));
    assert_eq!(text(row, "sender_alias"), "Ann");
    assert_eq!(text(row, "content"), "hello agent");
    assert_eq!(text(row, "message_id"), "whatsapp:wamid.IN1");
    assert_eq!(row["source_context"]["wa_id"], json!(ANN));
    assert_eq!(row["source_context"]["message_id"], json!("wamid.IN1"));
    assert_eq!(row["source_context"]["phone_number_id"], json!(PHONE));
    assert_eq!(
        row["original_message"]["text"]["body"],
        json!("hello agent")
    );
    assert_eq!(row["sent_at"], json!(1_767_225_600_000_i64));

    // A status update and a change for another number store nothing.
    let statuses = webhook_payload(
        PHONE,
        &[],
        Vec::new(),
        vec![status_update("wamid.OUT9", ANN, "read")],
    );
    assert_eq!(post(&host, &statuses).await.status, 200);
    let elsewhere = webhook_payload(
        "999",
        &[(ANN, "Ann")],
        vec![text_message(ANN, "wamid.X", "hi")],
        Vec::new(),
    );
    assert_eq!(post(&host, &elsewhere).await.status, 200);
    assert_eq!(rig.sink.inbox().len(), 1);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whatsapp_a_webhook_with_a_bad_or_missing_signature_is_401_and_stores_nothing() {
    let rig = rig(json!({})).await;
    let host = rig.running_host().await;
    let payload = messages_payload(vec![text_message(ANN, "wamid.EVIL", "forged")]);
    let forged = host
        .webhook("whatsapp", &signed_post(&payload, "not-the-app-secret"))
        .await;
    assert_eq!(forged.status, 401);
    let mut unsigned = signed_post(&payload, APP_SECRET);
    unsigned
        .headers
        .retain(|(name, _)| name != "x-hub-signature-256");
    assert_eq!(host.webhook("whatsapp", &unsigned).await.status, 401);
    // The signature covers the exact bytes: the same JSON re-serialized with a space fails.
    let mut tampered = signed_post(&payload, APP_SECRET);
    tampered.body.push(b' ');
    assert_eq!(host.webhook("whatsapp", &tampered).await.status, 401);
    assert!(rig.sink.inbox().is_empty());
    assert!(
        !state_root_for(&rig.path)
            .join("whatsapp")
            .join("seen.json")
            .exists(),
        "nothing was recorded as seen"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_47_whatsapp_re_sent_webhooks_are_skipped_across_a_restart_by_the_state_directory() {
    let rig = rig(json!({})).await;
    let host = rig.running_host().await;
    let payload = messages_payload(vec![
        text_message(ANN, "wamid.A", "one"),
        text_message(ANN, "wamid.B", "two"),
    ]);
    assert_eq!(post(&host, &payload).await.status, 200);
    assert_eq!(rig.sink.inbox().len(), 2);
    host.stop().await;
    let seen_file = state_root_for(&rig.path).join("whatsapp").join("seen.json");
    let seen: Value = serde_json::from_str(&std::fs::read_to_string(&seen_file).unwrap()).unwrap();
    assert_eq!(seen["ids"], json!(["wamid.A", "wamid.B"]));

    // Meta re-sends the same notification to a new host, plus one new message.
    let host = rig.running_host().await;
    let again = messages_payload(vec![
        text_message(ANN, "wamid.A", "one"),
        text_message(ANN, "wamid.B", "two"),
        text_message(ANN, "wamid.C", "three"),
    ]);
    assert_eq!(post(&host, &again).await.status, 200);
    let contents: Vec<String> = rig
        .sink
        .inbox()
        .iter()
        .map(|r| text(r, "content"))
        .collect();
    assert_eq!(contents.len(), 3, "{contents:?}");
    assert!(contents.contains(&"three".to_owned()));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cfg_49_whatsapp_allow_from_decides_before_anything_is_stored() {
    let policy =
        json!({ "policy": { "dm": "allowlist", "allow_from": ["+16315551234", "4915112345678"] } });
    let rig = rig(policy).await;
    let host = rig.running_host().await;
    let payload = webhook_payload(
        PHONE,
        &[
            (ANN, "Ann"),
            ("4915112345678", "Bo"),
            ("447700900123", "Mallory"),
        ],
        vec![
            text_message(ANN, "wamid.1", "from ann"),
            text_message("447700900123", "wamid.2", "from mallory"),
            text_message("4915112345678", "wamid.3", "from bo"),
        ],
        Vec::new(),
    );
    assert_eq!(post(&host, &payload).await.status, 200);
    let mut contents: Vec<String> = rig
        .sink
        .inbox()
        .iter()
        .map(|r| text(r, "content"))
        .collect();
    contents.sort();
    assert_eq!(contents, ["from ann", "from bo"]);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_22_msg_43_whatsapp_replies_quote_the_message_and_long_texts_are_split() {
    let rig = rig(json!({})).await;
    let host = rig.running_host().await;
    let context = json!({ "wa_id": ANN, "message_id": "wamid.IN7", "phone_number_id": PHONE });
    let delivered = host
        .deliver(&outbound("pong", None, Some(context.clone())))
        .await
        .unwrap();
    assert_eq!(delivered.platform_message_ids, ["wamid.OUT1"]);
    let long = "x".repeat(5000);
    let split = host
        .deliver(&outbound(&long, None, Some(context)))
        .await
        .unwrap();
    assert_eq!(split.platform_message_ids.len(), 2);
    let sends = rig.server.sends();
    assert_eq!(sends.len(), 3);
    assert_eq!(sends[0]["messaging_product"], json!("whatsapp"));
    assert_eq!(sends[0]["to"], json!(ANN));
    assert_eq!(sends[0]["type"], json!("text"));
    assert_eq!(sends[0]["text"]["body"], json!("pong"));
    assert_eq!(sends[0]["context"]["message_id"], json!("wamid.IN7"));
    assert_eq!(
        sends[1]["text"]["body"].as_str().unwrap().chars().count(),
        4096
    );
    assert_eq!(
        sends[2]["text"]["body"].as_str().unwrap().chars().count(),
        904
    );
    assert!(
        sends[2].get("context").is_none(),
        "only the first part quotes"
    );
    // A new conversation: the recipient's number, given with a plus.
    let fresh = OutboundMessage {
        recipient: "whatsapp:+49 151 12345678".into(),
        ..outbound("hello", None, None)
    };
    host.deliver(&fresh).await.unwrap();
    assert_eq!(rig.server.sends()[3]["to"], json!("4915112345678"));
    let bad = OutboundMessage {
        recipient: "whatsapp:not-a-number".into(),
        ..outbound("hello", None, None)
    };
    assert!(matches!(
        host.deliver(&bad).await,
        Err(AdapterError::Invalid(_))
    ));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whatsapp_rate_limits_back_off_through_the_sleeper_and_other_errors_fail_with_the_reason() {
    let rig = rig(json!({})).await;
    let host = rig.running_host().await;
    rig.server
        .fault(GraphOp::Messages, GraphFault::RateLimit { code: 130_429 });
    rig.server
        .fault(GraphOp::Messages, GraphFault::RateLimit { code: 131_056 });
    let delivered = host
        .deliver(&outbound("after the wait", None, None))
        .await
        .unwrap();
    assert_eq!(delivered.platform_message_ids.len(), 1);
    assert_eq!(
        rig.sleeper.waits(),
        [Duration::from_secs(1), Duration::from_secs(2)]
    );
    assert_eq!(rig.server.sends().len(), 1);

    for _ in 0..adf_adapters::whatsapp::MAX_RATE_LIMIT_ATTEMPTS {
        rig.server
            .fault(GraphOp::Messages, GraphFault::RateLimit { code: 130_429 });
    }
    let limited = host
        .deliver(&outbound("never", None, None))
        .await
        .unwrap_err();
    assert!(
        matches!(limited, AdapterError::RateLimited { attempts: 4, .. }),
        "{limited}"
    );
    assert_eq!(limited.status_code(), Some(429));

    rig.server.fault(
        GraphOp::Messages,
        GraphFault::Error {
            status: 400,
            code: 131_026,
            message: "Message undeliverable".into(),
        },
    );
    let failed = host
        .deliver(&outbound("lost", None, None))
        .await
        .unwrap_err();
    assert_eq!(failed.status_code(), Some(400));
    assert!(
        failed.to_string().contains("131026")
            && failed.to_string().contains("Message undeliverable"),
        "{failed}"
    );
    assert_eq!(rig.server.sends().len(), 1, "nothing else was accepted");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_46_whatsapp_forms_go_out_as_buttons_lists_or_words_and_answers_come_back_threaded() {
    let rig = rig(json!({})).await;
    let host = rig.running_host().await;
    let form = json!({
        "form_id": "lunch",
        "title": "Lunch order",
        "questions": [
            { "id": "main", "text": "Main course?", "options": ["Fish", { "id": "veg", "label": "Vegetables", "value": "v" }] },
            { "id": "day", "text": "Which day?", "options": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"] },
            { "id": "note", "text": "Anything else?" },
        ],
    });
    let message = OutboundMessage {
        outbox_id: "out-form".into(),
        ..outbound(
            &form.to_string(),
            Some(adf_adapters::FORM_CONTENT_TYPE),
            None,
        )
    };
    let delivered = host.deliver(&message).await.unwrap();
    assert_eq!(
        delivered.platform_message_ids.len(),
        4,
        "heading + three questions"
    );
    let sends = rig.server.sends();
    assert_eq!(sends[0]["text"]["body"], json!("Lunch order"));
    let buttons = &sends[1];
    assert_eq!(buttons["type"], json!("interactive"));
    assert_eq!(buttons["interactive"]["type"], json!("button"));
    assert_eq!(
        buttons["interactive"]["body"]["text"],
        json!("1. Main course?")
    );
    let veg = &buttons["interactive"]["action"]["buttons"][1]["reply"];
    assert_eq!(veg["title"], json!("Vegetables"));
    let list = &sends[2];
    assert_eq!(list["interactive"]["type"], json!("list"));
    let rows = list["interactive"]["action"]["sections"][0]["rows"]
        .as_array()
        .unwrap();
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[4]["title"], json!("Friday"));
    let words = &sends[3];
    assert_eq!(words["type"], json!("text"));
    assert!(
        words["text"]["body"]
            .as_str()
            .unwrap()
            .starts_with("3. Anything else?")
    );

    let note_id = &delivered.platform_message_ids[3];
    let answers = messages_payload(vec![
        button_reply(
            ANN,
            "wamid.ANS1",
            "wamid.OUT2",
            veg["id"].as_str().unwrap(),
            "Vegetables",
        ),
        list_reply(
            ANN,
            "wamid.ANS2",
            "wamid.OUT3",
            rows[4]["id"].as_str().unwrap(),
            "Friday",
        ),
        text_reply(ANN, "wamid.ANS3", note_id, "no onions"),
    ]);
    assert_eq!(post(&host, &answers).await.status, 200);
    let inbox = rig.sink.inbox();
    assert_eq!(inbox.len(), 3, "{inbox:?}");
    let by_question = |q: &str| {
        inbox
            .iter()
            .find(|r| r["source_context"]["question_id"] == json!(q))
            .unwrap_or_else(|| panic!("no answer to {q}: {inbox:?}"))
    };
    let main = by_question("main");
    assert_eq!(text(main, "parent_id"), "out-form");
    assert_eq!(main["source_context"]["form_id"], json!("lunch"));
    assert_eq!(main["source_context"]["answer_id"], json!("veg"));
    assert_eq!(main["source_context"]["answer_value"], json!("v"));
    assert_eq!(text(main, "content"), "Vegetables");
    let day = by_question("day");
    assert_eq!(day["source_context"]["answer_id"], json!("a5"));
    assert_eq!(day["source_context"]["answer_value"], json!("Friday"));
    let note = by_question("note");
    assert_eq!(text(note, "parent_id"), "out-form");
    assert_eq!(note["source_context"]["answer_id"], Value::Null);
    assert_eq!(note["source_context"]["answer_value"], json!("no onions"));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_42_whatsapp_media_is_imported_through_the_media_url_and_over_the_limit_skipped() {
    let rig = rig(json!({ "limits": { "max_attachment_size": 1000 } })).await;
    rig.server
        .add_media("5501", b"%PDF-1.4 small", "application/pdf");
    rig.server.add_media("5502", &vec![7u8; 5000], "image/jpeg");
    let host = rig.running_host().await;
    let payload = messages_payload(vec![
        media_message(
            ANN,
            "wamid.M1",
            "document",
            "5501",
            "application/pdf",
            Some("the invoice"),
        ),
        media_message(ANN, "wamid.M2", "image", "5502", "image/jpeg", None),
    ]);
    assert_eq!(post(&host, &payload).await.status, 200);
    let rows = rig.sink.inbox();
    let row = |id: &str| {
        rows.iter()
            .find(|r| r["message_id"] == json!(format!("whatsapp:{id}")))
            .unwrap()
    };
    let small = &row("wamid.M1")["attachments"][0];
    assert_eq!(small["transfer"], json!("imported"), "{small}");
    assert_eq!(text(row("wamid.M1"), "content"), "the invoice");
    let path = small["path"].as_str().unwrap();
    assert!(path.starts_with("imported/whatsapp/"), "{path}");
    let stored = rig
        .sink
        .with_file(|file| file.file_read(path).unwrap())
        .unwrap();
    assert_eq!(stored.content, b"%PDF-1.4 small");
    let large = &row("wamid.M2")["attachments"][0];
    assert_eq!(large["transfer"], json!("skipped"), "{large}");
    assert!(
        large["reason"]
            .as_str()
            .unwrap()
            .contains("max_attachment_size")
    );
    assert!(
        !rig.server
            .calls()
            .iter()
            .any(|c| c.path == "/media-download/5502"),
        "the large one was never downloaded"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idn_37_whatsapp_missing_or_refused_credentials_fail_the_adapter_naming_the_purpose() {
    let rig = rig_with(
        json!({}),
        &[
            ("WHATSAPP_ACCESS_TOKEN", TOKEN),
            ("WHATSAPP_VERIFY_TOKEN", VERIFY),
        ],
    )
    .await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Failed).await;
    let error = host.status("whatsapp").unwrap().error.unwrap();
    assert!(
        error.contains("adapter:whatsapp:WHATSAPP_APP_SECRET"),
        "{error}"
    );
    assert!(error.contains("adf identity set"), "{error}");
    assert!(rig.server.calls().is_empty());
    // A webhook to an adapter that is not running is refused without detail.
    let answer = post(
        &host,
        &messages_payload(vec![text_message(ANN, "wamid.Z", "hi")]),
    )
    .await;
    assert_eq!(answer.status, 503);
    assert!(!String::from_utf8_lossy(&answer.body).contains("identity"));
    host.stop().await;

    let refused = rig_with(
        json!({}),
        &[
            ("WHATSAPP_ACCESS_TOKEN", "expired-token"),
            ("WHATSAPP_APP_SECRET", APP_SECRET),
            ("WHATSAPP_VERIFY_TOKEN", VERIFY),
        ],
    )
    .await;
    let host = refused.host();
    refused.wait_state(&host, AdapterState::Failed).await;
    let status = host.status("whatsapp").unwrap();
    let error = status.error.unwrap();
    assert!(
        error.contains("adapter:whatsapp:WHATSAPP_ACCESS_TOKEN") && error.contains("190"),
        "{error}"
    );
    assert_eq!(status.restarts, 0, "a refused token is not retried");
    let tested = AdapterHost::test_credential(
        &adapters_config(&refused.sink),
        "whatsapp",
        refused.sink.clone(),
        HostOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(tested, AdapterError::CredentialRefused { .. }),
        "{tested}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_48_whatsapp_test_credential_names_the_number_and_chat_info_is_honest() {
    let rig = rig(json!({})).await;
    let tested = AdapterHost::test_credential(
        &adapters_config(&rig.sink),
        "whatsapp",
        rig.sink.clone(),
        HostOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(tested["phone_number"]["id"], json!(PHONE));
    assert_eq!(
        tested["phone_number"]["verified_name"],
        json!("ADF Test Business")
    );
    assert!(
        rig.server
            .calls()
            .iter()
            .any(|c| c.path.starts_with(&format!("/v23.0/{PHONE}")))
    );
    let host = rig.running_host().await;
    let info = host
        .chat_info("whatsapp", "+1 631 555 1234", None)
        .await
        .unwrap();
    assert_eq!(info["supported"], json!(true));
    assert_eq!(info["chat"]["id"], json!(ANN));
    assert_eq!(info["chat"]["type"], json!("private"));
    assert_eq!(info["messages"]["supported"], json!(false));
    assert!(host.chat_info("whatsapp", "general", None).await.is_err());
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whatsapp_config_needs_a_numeric_phone_number_id() {
    let rig = rig(json!({ "config": { "api_root": "http://127.0.0.1:9" } })).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Failed).await;
    let error = host.status("whatsapp").unwrap().error.unwrap();
    assert!(
        error.contains("config.phone_number_id is required"),
        "{error}"
    );
    host.stop().await;
}
