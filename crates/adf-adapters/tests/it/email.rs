//! The Email adapter against real mail servers (adf-testkit's private Dovecot + Postfix on
//! 127.0.0.1): mail in, dedup across a restart, policy, the attachment limit, threaded replies
//! out, SMTP refusals, forms both ways, refused and valid credentials.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adf_adapters::{
    AdapterHost, AdapterState, Backoff, FORM_CONTENT_TYPE, HostOptions, OutboundMessage,
    state_root_for,
};
use adf_store::{AdfFile, CreateOptions, IdentityRow};
use adf_testkit::mail::MailServers;
use serde_json::{Map, Value, json};

use crate::common::{FileSink, RecordingSleeper, adapters_config, wait_until};

const PURPOSE: &str = "adapter:email:EMAIL_PASSWORD";
const AGENT_PASSWORD: &str = "agent-secret";

struct Rig {
    _dir: tempfile::TempDir,
    servers: MailServers,
    sink: Arc<FileSink>,
    path: PathBuf,
}

fn agent() -> String {
    MailServers::address("agent")
}

fn alice() -> String {
    MailServers::address("alice")
}

/// An agent file whose `adapters.email` reaches `servers` (plus `extra` entry fields).
fn email_agent_file(dir: &Path, servers: &MailServers, extra: Value, password: &str) -> PathBuf {
    let path = dir.join("mailbot.adf");
    let mut file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    file.identity_put(&[IdentityRow {
        purpose: PURPOSE.into(),
        value: password.as_bytes().to_vec(),
        encryption_algo: "plain".into(),
        salt: None,
        kdf_params: None,
        code_access: false,
    }])
    .unwrap();
    let mut entry = json!({
        "enabled": true,
        "config": {
            "address": agent(),
            "display_name": "Mail Bot",
            "imap_host": "127.0.0.1",
            "imap_port": servers.imap_port(),
            "imap_security": "none",
            "smtp_host": "127.0.0.1",
            "smtp_port": servers.smtp_port(),
            "smtp_security": "none",
            "poll_interval": 1,
        },
    });
    if let (Some(entry), Some(extra)) = (entry.as_object_mut(), extra.as_object()) {
        entry.extend(extra.clone());
    }
    file.config_set_path(
        adf_store::Caller::Owner,
        "adapters",
        adf_store::ConfigAction::Set,
        json!({ "email": entry }),
    )
    .unwrap();
    file.close().unwrap();
    path
}

async fn rig(extra: Value, password: &str) -> Rig {
    let servers = MailServers::start(&[
        ("agent", AGENT_PASSWORD),
        ("alice", "alice-secret"),
        ("bob", "bob-secret"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = email_agent_file(dir.path(), &servers, extra, password);
    Rig {
        sink: FileSink::open(&path),
        _dir: dir,
        servers,
        path,
    }
}

impl Rig {
    fn host(&self) -> AdapterHost {
        AdapterHost::start(
            &adapters_config(&self.sink),
            self.sink.clone(),
            HostOptions {
                sleeper: Arc::new(RecordingSleeper::default()),
                backoff: Backoff::default(),
            },
        )
    }

    async fn running(&self) -> AdapterHost {
        let host = self.host();
        wait_until("the email adapter is running", || {
            host.status("email")
                .is_some_and(|s| s.state == AdapterState::Running)
        })
        .await;
        host
    }

    async fn mail(&self, from: &str, subject: &str, message_id: &str, body: &str) {
        let raw = format!(
            "From: {from}\nTo: {}\nSubject: {subject}\nMessage-ID: {message_id}\nDate: Mon, 7 Dec 2026 10:00:00 +0000\n\n{body}\n",
            agent()
        );
        self.servers.send(from, &agent(), &raw).await.unwrap();
    }

    fn last_uid(&self) -> Option<u64> {
        let path = state_root_for(&self.path)
            .join("email")
            .join("mailbox.json");
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str::<Value>(&text).ok()?["last_uid"].as_u64()
    }
}

async fn test_credential(rig: &Rig) -> Result<Value, adf_adapters::AdapterError> {
    AdapterHost::test_credential(
        &adapters_config(&rig.sink),
        "email",
        rig.sink.clone(),
        HostOptions {
            sleeper: Arc::new(RecordingSleeper::default()),
            backoff: Backoff::default(),
        },
    )
    .await
}

fn text(row: &Map<String, Value>, column: &str) -> String {
    row.get(column)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn header<'a>(mail: &'a str, name: &str) -> Option<&'a str> {
    let head = mail.split("\n\n").next().unwrap_or(mail);
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim_end_matches('\r').trim())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_43_a_mail_becomes_one_inbox_row_and_a_restart_neither_loses_nor_repeats_one() {
    let rig = rig(json!({}), AGENT_PASSWORD).await;
    let host = rig.running().await;
    let boundary = "b-123";
    let raw = format!(
        "From: Alice <{a}>\nTo: {agent}\nSubject: Quarterly numbers\nMessage-ID: <q1@example.test>\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{boundary}\"\n\n--{boundary}\nContent-Type: multipart/alternative; boundary=\"alt\"\n\n--alt\nContent-Type: text/plain; charset=utf-8\n\nHi agent, see the attached numbers.\n--alt\nContent-Type: text/html; charset=utf-8\n\n<p>Hi agent, <b>see</b> the attached numbers.</p>\n--alt--\n--{boundary}\nContent-Type: text/csv; name=\"q3.csv\"\nContent-Disposition: attachment; filename=\"q3.csv\"\n\nmonth,total\njuly,42\n--{boundary}--\n",
        a = alice(),
        agent = agent(),
    );
    rig.servers.send(&alice(), &agent(), &raw).await.unwrap();
    wait_until("the mail is stored", || rig.sink.inbox().len() == 1).await;
    let rows = rig.sink.inbox();
    let row = &rows[0];
    assert_eq!(text(row, "source"), "email");
    assert_eq!(text(row, "from"), format!("email:{}", alice()));
    assert_eq!(text(row, "sender_alias"), "Alice");
    assert_eq!(text(row, "content"), "Hi agent, see the attached numbers.");
    assert_eq!(text(row, "thread_id"), "email:<q1@example.test>");
    let context = &row["source_context"];
    assert_eq!(context["message_id"], json!("<q1@example.test>"));
    assert_eq!(context["subject"], json!("Quarterly numbers"));
    assert_eq!(context["from"], json!(alice()));
    assert_eq!(context["to"][0]["address"], json!(agent()));
    let original = &row["original_message"];
    assert!(
        original["headers"]
            .as_str()
            .is_some_and(|h| h.contains("Subject: Quarterly numbers")),
        "{original}"
    );
    assert!(original["parts"].as_array().is_some_and(|p| p.len() >= 3));
    let attachment = &row["attachments"][0];
    assert_eq!(attachment["transfer"], json!("imported"), "{attachment}");
    let stored = attachment["path"].as_str().unwrap().to_owned();
    assert!(stored.starts_with("imported/email/"), "{stored}");
    let bytes = rig
        .sink
        .with_file(|file| file.file_read(&stored).unwrap())
        .unwrap();
    assert!(
        String::from_utf8_lossy(&bytes.content).contains("july,42"),
        "{bytes:?}"
    );
    host.stop().await;
    assert_eq!(rig.last_uid(), Some(1));

    // A mail that arrives while the adapter is stopped is taken after the restart, once.
    rig.mail(&alice(), "Still there?", "<q2@example.test>", "ping")
        .await;
    rig.servers.wait_delivered(&agent(), 2).await;
    let host = rig.running().await;
    wait_until("the second mail is stored", || rig.sink.inbox().len() == 2).await;
    wait_until("its UID is persisted", || rig.last_uid() == Some(2)).await;
    host.stop().await;
    let rows = rig.sink.inbox();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        rows.iter().filter(|r| text(r, "content") == "ping").count(),
        1,
        "{rows:?}"
    );
    assert_eq!(
        rows.iter()
            .filter(|r| r["source_context"]["message_id"] == json!("<q1@example.test>"))
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_44_the_allowlist_keeps_mail_from_others_out_of_the_inbox() {
    let rig = rig(
        json!({ "policy": { "dm": "allowlist", "allow_from": ["ALICE@example.test"] } }),
        AGENT_PASSWORD,
    )
    .await;
    let host = rig.running().await;
    let bob = MailServers::address("bob");
    rig.mail(&bob, "Let me in", "<b1@example.test>", "from bob")
        .await;
    rig.mail(&alice(), "Hello", "<a1@example.test>", "from alice")
        .await;
    // Mail is taken in UID order: once alice's (the later one) is stored, bob's was decided.
    wait_until("alice's mail is stored", || !rig.sink.inbox().is_empty()).await;
    wait_until("both UIDs are taken", || rig.last_uid() == Some(2)).await;
    host.stop().await;
    let rows = rig.sink.inbox();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(text(&rows[0], "content"), "from alice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_47_attachments_over_the_size_limit_are_recorded_as_skipped() {
    let rig = rig(
        json!({ "limits": { "max_attachment_size": 2000 } }),
        AGENT_PASSWORD,
    )
    .await;
    let host = rig.running().await;
    let big = "x".repeat(5000);
    let raw = format!(
        "From: {a}\nTo: {agent}\nSubject: Files\nMessage-ID: <f1@example.test>\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"zz\"\n\n--zz\nContent-Type: text/plain\n\nTwo files.\n--zz\nContent-Type: text/plain; name=\"small.txt\"\nContent-Disposition: attachment; filename=\"small.txt\"\n\nsmall one\n--zz\nContent-Type: text/plain; name=\"big.txt\"\nContent-Disposition: attachment; filename=\"big.txt\"\n\n{big}\n--zz--\n",
        a = alice(),
        agent = agent(),
    );
    rig.servers.send(&alice(), &agent(), &raw).await.unwrap();
    wait_until("the mail is stored", || rig.sink.inbox().len() == 1).await;
    host.stop().await;
    let row = &rig.sink.inbox()[0];
    assert_eq!(text(row, "content"), "Two files.");
    let attachments = row["attachments"].as_array().unwrap();
    let by_name = |name: &str| {
        attachments
            .iter()
            .find(|a| a["filename"] == json!(name))
            .unwrap_or_else(|| panic!("{name} missing: {attachments:?}"))
    };
    assert_eq!(by_name("small.txt")["transfer"], json!("imported"));
    let skipped = by_name("big.txt");
    assert_eq!(skipped["transfer"], json!("skipped"), "{skipped}");
    assert!(
        skipped["reason"]
            .as_str()
            .is_some_and(|r| r.contains("max_attachment_size")),
        "{skipped}"
    );
    assert!(skipped.get("path").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_47_a_mail_far_over_the_limit_keeps_its_text_and_skips_its_attachments() {
    let rig = rig(
        json!({ "limits": { "max_attachment_size": 1000 } }),
        AGENT_PASSWORD,
    )
    .await;
    let host = rig.running().await;
    // Past the limit plus the text allowance (1 MiB), only the mail's start is fetched.
    let huge = "y".repeat(1_200_000);
    let raw = format!(
        "From: {a}\nTo: {agent}\nSubject: Huge\nMessage-ID: <h1@example.test>\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"hh\"\n\n--hh\nContent-Type: text/plain\n\nThe text survives.\n--hh\nContent-Type: application/octet-stream; name=\"huge.bin\"\nContent-Disposition: attachment; filename=\"huge.bin\"\n\n{huge}\n--hh--\n",
        a = alice(),
        agent = agent(),
    );
    rig.servers.send(&alice(), &agent(), &raw).await.unwrap();
    wait_until("the mail is stored", || rig.sink.inbox().len() == 1).await;
    host.stop().await;
    let row = &rig.sink.inbox()[0];
    assert_eq!(text(row, "content"), "The text survives.");
    assert_eq!(row["original_message"]["truncated"], json!(true), "{row:?}");
    let attachment = &row["attachments"][0];
    assert_eq!(attachment["filename"], json!("huge.bin"), "{attachment}");
    assert_eq!(attachment["transfer"], json!("skipped"), "{attachment}");
    assert!(
        attachment["reason"]
            .as_str()
            .is_some_and(|r| r.contains("max_attachment_size")),
        "{attachment}"
    );
    let stored = rig
        .sink
        .with_file(|file| file.file_read("imported/email/huge.bin").unwrap().is_some());
    assert!(!stored, "nothing of the skipped file is stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_43_a_reply_arrives_in_the_senders_mailbox_threaded() {
    let rig = rig(json!({}), AGENT_PASSWORD).await;
    let host = rig.running().await;
    rig.mail(
        &alice(),
        "Lunch?",
        "<lunch-1@example.test>",
        "Shall we have lunch?",
    )
    .await;
    wait_until("the mail is stored", || rig.sink.inbox().len() == 1).await;
    let row = rig.sink.inbox().remove(0);
    let delivered = host
        .deliver(&OutboundMessage {
            outbox_id: "out-1".into(),
            recipient: text(&row, "from"),
            content: "Yes, at noon.".into(),
            content_type: None,
            source_context: Some(row["source_context"].clone()),
        })
        .await
        .unwrap();
    assert_eq!(delivered.status_code, 250);
    let mails = rig.servers.wait_delivered(&alice(), 1).await;
    let reply = &mails[0];
    assert_eq!(header(reply, "In-Reply-To"), Some("<lunch-1@example.test>"));
    assert_eq!(header(reply, "References"), Some("<lunch-1@example.test>"));
    assert_eq!(header(reply, "Subject"), Some("Re: Lunch?"));
    assert_eq!(
        header(reply, "Message-ID"),
        Some(delivered.platform_message_ids[0].as_str())
    );
    assert!(
        header(reply, "From").is_some_and(|f| f.contains(&agent())),
        "{reply}"
    );
    assert!(reply.contains("Yes, at noon."), "{reply}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_42_an_smtp_refusal_fails_the_delivery_with_the_servers_reason() {
    let rig = rig(json!({}), AGENT_PASSWORD).await;
    let host = rig.running().await;
    let error = host
        .deliver(&OutboundMessage {
            outbox_id: "out-2".into(),
            recipient: "email:nobody@example.test".into(),
            content: "Anyone?".into(),
            content_type: None,
            source_context: None,
        })
        .await
        .unwrap_err();
    assert_eq!(error.status_code(), Some(550), "{error}");
    assert!(error.to_string().contains("User unknown"), "{error}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_46_a_form_goes_out_as_a_questionnaire_and_the_reply_is_the_answer_row() {
    let rig = rig(json!({}), AGENT_PASSWORD).await;
    let host = rig.running().await;
    let form = json!({
        "form_id": "lunch-form",
        "title": "Lunch order",
        "questions": [
            { "id": "main", "text": "Main course?", "options": ["Fish", { "id": "veg", "label": "Vegetables", "value": "v" }] },
            { "id": "note", "text": "Anything else?" },
        ],
    });
    let delivered = host
        .deliver(&OutboundMessage {
            outbox_id: "out-form".into(),
            recipient: format!("email:{}", alice()),
            content: form.to_string(),
            content_type: Some(FORM_CONTENT_TYPE.into()),
            source_context: None,
        })
        .await
        .unwrap();
    let mails = rig.servers.wait_delivered(&alice(), 1).await;
    assert_eq!(header(&mails[0], "Subject"), Some("Lunch order"));
    assert!(mails[0].contains("1. Main course?"), "{}", mails[0]);
    assert!(mails[0].contains("b) Vegetables"), "{}", mails[0]);
    let form_id = &delivered.platform_message_ids[0];
    let answer = format!(
        "From: {a}\nTo: {agent}\nSubject: Re: Lunch order\nMessage-ID: <ans-1@example.test>\nIn-Reply-To: {form_id}\nReferences: {form_id}\n\n1 b\n2 no nuts\n\n> 1. Main course?\n> 1 a\n",
        a = alice(),
        agent = agent(),
    );
    rig.servers.send(&alice(), &agent(), &answer).await.unwrap();
    wait_until("the answer is stored", || rig.sink.inbox().len() == 1).await;
    host.stop().await;
    let row = &rig.sink.inbox()[0];
    assert_eq!(text(row, "parent_id"), "out-form");
    let context = &row["source_context"];
    assert_eq!(context["form_id"], json!("lunch-form"));
    assert_eq!(context["question_id"], json!("main"));
    assert_eq!(context["answer_id"], json!("veg"));
    assert_eq!(context["answer_value"], json!("v"));
    assert_eq!(context["answers"][1]["answer_value"], json!("no nuts"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idn_37_a_refused_password_fails_naming_the_purpose_key_and_a_valid_one_tests_ok() {
    let rig = rig(json!({}), "not-the-password").await;
    let host = rig.host();
    wait_until("the adapter fails", || {
        host.status("email")
            .is_some_and(|s| s.state == AdapterState::Failed)
    })
    .await;
    let status = host.status("email").unwrap();
    let error = status.error.clone().unwrap_or_default();
    assert!(error.contains(PURPOSE), "{error}");
    assert!(error.contains("adf identity set"), "{error}");
    assert!(
        error.contains("IMAP LOGIN refused"),
        "the server's words are kept: {error}"
    );
    let tested = test_credential(&rig).await.unwrap_err();
    assert!(tested.to_string().contains(PURPOSE), "{tested}");
    host.stop().await;
    // SMTP refuses it too when a delivery tries: the error names the purpose key.
    let sender = direct_adapter(
        &rig,
        (rig.servers.imap_port(), "none"),
        (rig.servers.smtp_port(), "none"),
        adf_adapters::email::MailTrust::System,
        "not-the-password",
    );
    let refused = adf_adapters::Adapter::deliver(
        &sender,
        &OutboundMessage {
            outbox_id: "out-refused".into(),
            recipient: format!("email:{}", alice()),
            content: "hello".into(),
            content_type: None,
            source_context: None,
        },
    )
    .await
    .unwrap_err();
    assert!(
        refused.to_string().contains("SMTP AUTH refused") && refused.to_string().contains(PURPOSE),
        "{refused}"
    );
    assert_eq!(refused.status_code(), Some(401));

    // The same servers with the right password: IMAP login and SMTP AUTH both pass.
    rig.sink.with_file(|file| {
        file.identity_put(&[IdentityRow {
            purpose: PURPOSE.into(),
            value: AGENT_PASSWORD.as_bytes().to_vec(),
            encryption_algo: "plain".into(),
            salt: None,
            kdf_params: None,
            code_access: false,
        }])
        .unwrap();
    });
    let host = rig.running().await;
    let ok = test_credential(&rig).await.unwrap();
    assert_eq!(ok["imap"]["login"], json!("ok"), "{ok}");
    assert_eq!(ok["smtp"]["auth"], json!("ok"), "{ok}");
    let info = host.chat_info("email", &agent(), Some(10)).await.unwrap();
    assert_eq!(info["chat"]["type"], json!("mailbox"), "{info}");
    assert_eq!(info["mailbox"]["messages"], json!(0), "{info}");
    host.stop().await;
}

/// An adapter built directly (as a host with a private CA would) for `servers`' TLS ports.
fn tls_adapter(
    rig: &Rig,
    imap: (u16, &str),
    smtp: (u16, &str),
    trust: adf_adapters::email::MailTrust,
) -> adf_adapters::email::EmailAdapter {
    direct_adapter(rig, imap, smtp, trust, AGENT_PASSWORD)
}

/// An adapter built directly, outside a host, logging in with `password`.
fn direct_adapter(
    rig: &Rig,
    imap: (u16, &str),
    smtp: (u16, &str),
    trust: adf_adapters::email::MailTrust,
    password: &str,
) -> adf_adapters::email::EmailAdapter {
    let settings = adf_adapters::AdapterSettings::parse(
        "email",
        &json!({ "config": {
            "address": agent(),
            "imap_host": "127.0.0.1",
            "imap_port": imap.0,
            "imap_security": imap.1,
            "smtp_host": "127.0.0.1",
            "smtp_port": smtp.0,
            "smtp_security": smtp.1,
        } }),
    )
    .unwrap();
    adf_adapters::email::EmailAdapter::new(
        &settings,
        adf_adapters::Secret::new(password),
        rig.sink.clone(),
        trust,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_42_starttls_and_implicit_tls_carry_login_and_mail_and_verify_the_certificate() {
    use adf_adapters::Adapter as _;
    use adf_adapters::email::MailTrust;

    let servers =
        MailServers::start_tls(&[("agent", AGENT_PASSWORD), ("alice", "alice-secret")]).await;
    let dir = tempfile::tempdir().unwrap();
    let path = email_agent_file(dir.path(), &servers, json!({}), AGENT_PASSWORD);
    let rig = Rig {
        sink: FileSink::open(&path),
        _dir: dir,
        servers,
        path,
    };
    let ca = MailTrust::Certificates(vec![rig.servers.ca_certificate_der().unwrap()]);
    let starttls = tls_adapter(
        &rig,
        (rig.servers.imap_port(), "starttls"),
        (rig.servers.smtp_port(), "starttls"),
        ca.clone(),
    );
    let implicit = tls_adapter(
        &rig,
        (rig.servers.imaps_port().unwrap(), "tls"),
        (rig.servers.smtps_port().unwrap(), "tls"),
        ca,
    );
    for (n, adapter) in [&starttls, &implicit].into_iter().enumerate() {
        let tested = adapter.test_credential().await.unwrap();
        assert_eq!(tested["imap"]["login"], json!("ok"), "{tested}");
        assert_eq!(tested["smtp"]["auth"], json!("ok"), "{tested}");
        adapter
            .deliver(&OutboundMessage {
                outbox_id: format!("out-tls-{n}"),
                recipient: format!("email:{}", alice()),
                content: format!("over TLS #{n}"),
                content_type: None,
                source_context: None,
            })
            .await
            .unwrap();
        let mails = rig.servers.wait_delivered(&alice(), n + 1).await;
        assert!(
            mails.iter().any(|m| m.contains(&format!("over TLS #{n}"))),
            "{mails:?}"
        );
    }
    // The test CA is not among the system's roots: both ways refuse the certificate.
    for (imap, smtp) in [
        (
            (rig.servers.imap_port(), "starttls"),
            (rig.servers.smtp_port(), "starttls"),
        ),
        (
            (rig.servers.imaps_port().unwrap(), "tls"),
            (rig.servers.smtps_port().unwrap(), "tls"),
        ),
    ] {
        let untrusted = tls_adapter(&rig, imap, smtp, MailTrust::System);
        let error = untrusted.test_credential().await.unwrap_err();
        assert!(
            error.to_string().to_lowercase().contains("certificate"),
            "{error}"
        );
    }
}
