//! Channel adapters run by the daemon (§5.13, §11.6), end to end against the testkit's Bot API
//! server on 127.0.0.1: a Telegram DM becomes an inbox row, the agent's `on_inbox` lambda
//! answers it with `msg_send` by `parent_id`, the reply reaches the platform as a
//! `sendMessage` to the right chat replying to the right message, and turning the agent off
//! stops polling. The credential is sealed in the agent's file for the daemon home's owner.
//! Also: `chat_info` from the agent's code through the running adapter (MSG-48), a platform
//! error as a `failed` outbox row with the platform's reason, and a credential sealed through
//! the API restarting the adapter with the new token.

use std::path::PathBuf;
use std::sync::Arc;

use adf_server::daemon::Agent;
use adf_store::messages::{Mailbox, MessageFilter};
use adf_store::views::LogFilter;
use adf_testkit::telegram::{TelegramFault, TelegramServer};
use serde_json::{Map, Value, json};

use crate::common::{Harness, agent_file, owner_keys, set_state, wait_for};

const TOKEN: &str = "123456:DAEMON-test-token";
const PURPOSE: &str = "adapter:telegram:TELEGRAM_BOT_TOKEN";

/// Answers every inbox row through the channel it came from: a reply by `parent_id`, so the
/// runtime finds the recipient and the `source_context` itself. Records the outcome.
const REPLIER: &str = r#"
export async function main(event) {
  let out;
  try { out = await adf.msg_send({ parent_id: event.data.id, content: 'pong: ' + event.data.id }) }
  catch (e) { out = { code: e.code, message: e.message } }
  await adf.fs_write({ path: `replied/${event.data.id}.json`, content: JSON.stringify(out), mode: 'write' });
}
"#;

/// Asks `chat_info` about the group the test's messages come from, about a platform the agent
/// runs no adapter for, and with a limit out of range; records the three answers.
const CHAT_INFO_ASKER: &str = r#"
export async function main(event) {
  const out = {};
  out.telegram = await adf.chat_info({ adapter: 'telegram', chat_id: '-100777' });
  out.one = await adf.chat_info({ adapter: 'telegram', chat_id: '-100777', limit: 1 });
  out.slack = await adf.chat_info({ adapter: 'slack', chat_id: 'C1' });
  try { out.limit = await adf.chat_info({ adapter: 'telegram', chat_id: '-100777', limit: 0 }) }
  catch (e) { out.limit = { code: e.code, message: e.message } }
  await adf.fs_write({ path: `info/${event.data.id}.json`, content: JSON.stringify(out), mode: 'write' });
}
"#;

/// A Telegram agent whose adapter polls `server`, with an identity sealed for the harness's
/// owner and, when `token` is given, the bot token sealed under its purpose; its `on_inbox`
/// lambda replies ([`REPLIER`]).
fn telegram_agent(h: &Harness, server: &TelegramServer, token: Option<&str>) -> PathBuf {
    telegram_agent_with(h, server, token, REPLIER)
}

/// [`telegram_agent`] whose `on_inbox` lambda is `lambda`.
fn telegram_agent_with(
    h: &Harness,
    server: &TelegramServer,
    token: Option<&str>,
    lambda: &str,
) -> PathBuf {
    let path = agent_file(
        h.dir.path(),
        "bot",
        &[("lib/reply.ts", lambda)],
        &[
            (
                "adapters",
                json!({ "telegram": {
                    "enabled": true,
                    "config": { "api_root": server.api_root(), "poll_timeout": 1 },
                } }),
            ),
            ("security.allow_local_fetch", json!(true)),
            (
                "triggers",
                json!({ "on_inbox": { "enabled": true, "targets": [
                    { "scope": "system", "lambda": "lib/reply.ts:main" }
                ] } }),
            ),
        ],
    );
    let keys = owner_keys(h);
    let mut file = adf_store::AdfFile::open(&path).unwrap();
    let open = adf_runtime::identity::provision_new(&mut file, &keys).unwrap();
    if let Some(token) = token {
        adf_runtime::identity::set_credential(&mut file, &open, PURPOSE, token.as_bytes(), false)
            .unwrap();
    }
    file.close().unwrap();
    path
}

async fn inbox(agent: &Arc<Agent>) -> Vec<Map<String, Value>> {
    agent
        .store()
        .run(|file| file.messages(Mailbox::Inbox, &MessageFilter::default(), None))
        .await
        .unwrap()
        .into_iter()
        .filter(|row| row.get("source").and_then(Value::as_str) == Some("telegram"))
        .collect()
}

async fn outbox(agent: &Arc<Agent>) -> Vec<Map<String, Value>> {
    agent
        .store()
        .run(|file| file.messages(Mailbox::Outbox, &MessageFilter::default(), None))
        .await
        .unwrap()
}

/// The adapter's state as `GET /agents/{id}/runtime/adapters` reports it.
async fn adapter_state(h: &Harness, agent: &Agent) -> Value {
    let body = h
        .client
        .get(&format!("/agents/{}/runtime/adapters", agent.id))
        .await
        .unwrap();
    body["states"]
        .as_array()
        .and_then(|states| states.iter().find(|s| s["type"] == "telegram"))
        .cloned()
        .unwrap_or(Value::Null)
}

fn json_column(row: &Map<String, Value>, column: &str) -> Value {
    match row.get(column) {
        Some(Value::String(text)) => serde_json::from_str(text).unwrap_or(Value::Null),
        Some(other) => other.clone(),
        None => Value::Null,
    }
}

/// MSG-22, MSG-43, STL-04: a DM in, the lambda's reply out through the adapter (to the DM's
/// chat, replying to its message), the outbox row `delivered`; `off` stops polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_22_msg_43_stl_04_a_telegram_dm_is_answered_through_the_daemon_and_off_stops_polling() {
    let server = TelegramServer::start(TOKEN, "adf_daemon_bot").await;
    let h = Harness::start().await;
    let path = telegram_agent(&h, &server, Some(TOKEN));
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    wait_for("the adapter runs", || async {
        adapter_state(&h, &agent).await["state"] == "running"
    })
    .await;

    let chat = json!({ "id": 4242, "type": "private", "first_name": "Ann" });
    let from = json!({ "id": 4242, "is_bot": false, "first_name": "Ann", "username": "ann" });
    server.push_message(chat, from, "ping");
    wait_for("the DM is an inbox row", || async {
        !inbox(&agent).await.is_empty()
    })
    .await;
    let row = inbox(&agent).await.remove(0);
    assert_eq!(row["from"], "telegram:4242", "{row:?}");
    assert_eq!(row["content"], "ping");
    let context = json_column(&row, "source_context");
    assert_eq!(context["chat_id"], 4242, "{context}");
    let replied_to = context["message_id"].clone();
    assert!(replied_to.is_i64(), "{context}");

    wait_for("the reply reached the platform", || async {
        !server.calls_of("sendMessage").is_empty()
    })
    .await;
    let sent = server.calls_of("sendMessage").remove(0).params;
    assert_eq!(
        sent["chat_id"].to_string().trim_matches('"'),
        "4242",
        "{sent:?}"
    );
    let row_id = row["id"].as_str().unwrap();
    assert_eq!(sent["text"], format!("pong: {row_id}"), "{sent:?}");
    assert_eq!(
        sent["reply_to_message_id"].to_string().trim_matches('"'),
        replied_to.to_string(),
        "MSG-43: the reply carries the parent's source_context: {sent:?}"
    );
    wait_for("the outbox row is delivered", || async {
        outbox(&agent)
            .await
            .iter()
            .any(|r| r["to"] == "telegram:4242" && r["status"] == "delivered")
    })
    .await;

    // STL-04: off stops the adapter; no poll reaches the platform any more.
    set_state(&h, &agent, "off").await;
    wait_for("the adapter stopped", || async {
        adapter_state(&h, &agent).await["state"] == "stopped"
    })
    .await;
    // `stopped` is reported after the adapter's task ended: nothing polls any more. Proved
    // over more than two long polls (poll_timeout 1 s), which a running adapter would make.
    let polls = server.calls_of("getUpdates").len();
    let polled_again = tokio::time::timeout(std::time::Duration::from_millis(2_500), async {
        while server.calls_of("getUpdates").len() == polls {
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(polled_again.is_err(), "an agent that is off does not poll");
    h.stop().await;
}

/// IDN-37: without the credential the agent runs on, the adapter is `failed` with an error
/// naming the purpose key; no request reached the platform.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idn_37_a_missing_telegram_credential_fails_the_adapter_and_names_the_purpose_key() {
    let server = TelegramServer::start(TOKEN, "adf_daemon_bot").await;
    let h = Harness::start().await;
    let path = telegram_agent(&h, &server, None);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    wait_for("the adapter failed", || async {
        adapter_state(&h, &agent).await["state"] == "failed"
    })
    .await;
    let state = adapter_state(&h, &agent).await;
    let error = state["error"].as_str().unwrap_or_default();
    assert!(error.contains(PURPOSE), "{state}");
    assert!(
        h.server.daemon.agent(&agent.id).is_ok(),
        "the agent runs on"
    );
    assert!(server.calls().is_empty(), "{:?}", server.calls());
    let filter = LogFilter {
        origin: Some("adapter".into()),
        ..LogFilter::default()
    };
    let logged = agent
        .store()
        .run(move |file| file.logs_recent(&filter, 50))
        .await
        .unwrap();
    assert!(
        logged
            .iter()
            .any(|r| r.message.as_deref().is_some_and(|m| m.contains(PURPOSE))),
        "a log row (origin adapter) names the key: {logged:?}"
    );
    h.stop().await;
}

async fn file_json(agent: &Arc<Agent>, path: &str) -> Option<Value> {
    let path = path.to_owned();
    let bytes = agent
        .store()
        .run(move |file| file.file_read(&path))
        .await
        .unwrap()?;
    Some(serde_json::from_slice(&bytes.content).unwrap_or(Value::Null))
}

/// MSG-48: `chat_info` from the agent's code reaches the running Telegram adapter through the
/// daemon (`getChat` on the platform), answers `{supported: false, reason}` for a platform the
/// agent runs no adapter for, and refuses a limit out of 1–100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_48_chat_info_reaches_the_running_telegram_adapter_through_the_daemon() {
    let server = TelegramServer::start(TOKEN, "adf_daemon_bot").await;
    let h = Harness::start().await;
    let path = telegram_agent_with(&h, &server, Some(TOKEN), CHAT_INFO_ASKER);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    wait_for("the adapter runs", || async {
        adapter_state(&h, &agent).await["state"] == "running"
    })
    .await;
    let group = json!({ "id": -100_777, "type": "supergroup", "title": "Team" });
    let from = json!({ "id": 5, "is_bot": false, "first_name": "Ann", "username": "ann" });
    server.push_message(group, from, "@adf_daemon_bot who is here?");
    wait_for("the group message is an inbox row", || async {
        !inbox(&agent).await.is_empty()
    })
    .await;
    let row_id = inbox(&agent).await.remove(0)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let written = format!("info/{row_id}.json");
    wait_for("the lambda recorded the answers", || async {
        file_json(&agent, &written).await.is_some()
    })
    .await;
    let out = file_json(&agent, &written).await.unwrap();
    assert_eq!(out["telegram"]["supported"], true, "{out}");
    assert_eq!(out["telegram"]["title"], "Team", "{out}");
    assert_eq!(out["telegram"]["chat_type"], "supergroup", "{out}");
    assert_eq!(out["telegram"]["participants_scope"], "admins", "{out}");
    assert!(
        out["telegram"]["participants"].as_array().is_some_and(|p| p
            .iter()
            .any(|p| p["name"] == "ann" && p["role"] == "creator")),
        "{out}"
    );
    assert_eq!(
        out["one"]["participants"].as_array().map(Vec::len),
        Some(1),
        "{out}"
    );
    assert_eq!(out["one"]["participants_truncated"], true, "{out}");
    assert!(
        server
            .calls_of("getChat")
            .iter()
            .any(|c| c.params["chat_id"].to_string().trim_matches('"') == "-100777"),
        "{:?}",
        server.calls()
    );
    assert_eq!(out["slack"]["supported"], false, "{out}");
    assert!(
        out["slack"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("slack")),
        "{out}"
    );
    assert_eq!(out["limit"]["code"], "INVALID_INPUT", "{out}");
    h.stop().await;
}

/// §11.2: a platform error is a `failed` outbox row with the platform's status, and the
/// platform's reason reaches the sender (the `msg_send` result) and the agent's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_22_a_platform_error_is_a_failed_outbox_row_with_the_platforms_reason() {
    let server = TelegramServer::start(TOKEN, "adf_daemon_bot").await;
    let h = Harness::start().await;
    let path = telegram_agent(&h, &server, Some(TOKEN));
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    wait_for("the adapter runs", || async {
        adapter_state(&h, &agent).await["state"] == "running"
    })
    .await;
    server.fault(
        "sendMessage",
        TelegramFault::Error {
            code: 400,
            description: "Bad Request: chat not found".into(),
        },
    );
    let chat = json!({ "id": 4343, "type": "private", "first_name": "Bo" });
    let from = json!({ "id": 4343, "is_bot": false, "first_name": "Bo", "username": "bo" });
    server.push_message(chat, from, "ping");
    wait_for("the reply's outbox row failed", || async {
        outbox(&agent)
            .await
            .iter()
            .any(|r| r["to"] == "telegram:4343" && r["status"] == "failed")
    })
    .await;
    let row = outbox(&agent)
        .await
        .into_iter()
        .find(|r| r["to"] == "telegram:4343")
        .unwrap();
    assert_eq!(row["status_code"], 400, "{row:?}");
    assert_eq!(
        server.calls_of("sendMessage").len(),
        1,
        "the platform's refusal is final: no resend"
    );
    let inbound = inbox(&agent).await.remove(0);
    let replied = format!("replied/{}.json", inbound["id"].as_str().unwrap());
    wait_for("the lambda recorded msg_send's answer", || async {
        file_json(&agent, &replied).await.is_some()
    })
    .await;
    let answer = file_json(&agent, &replied).await.unwrap();
    assert!(
        answer.to_string().contains("chat not found"),
        "the sender sees the platform's reason: {answer}"
    );
    let filter = LogFilter {
        origin: Some("mesh".into()),
        ..LogFilter::default()
    };
    let logged = agent
        .store()
        .run(move |file| file.logs_recent(&filter, 50))
        .await
        .unwrap();
    assert!(
        logged.iter().any(|r| r
            .message
            .as_deref()
            .is_some_and(|m| m.contains("chat not found"))),
        "a delivery_failed log row carries the reason: {logged:?}"
    );
    h.stop().await;
}

/// A credential sealed through the API (`PUT /agents/{id}/adapters/credentials`) restarts the
/// adapter, which reads it again: refused before, `running` with the new token after. The
/// credential listing says it is set and never returns its value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idn_37_a_credential_set_through_the_api_restarts_the_adapter_with_the_new_token() {
    let server = TelegramServer::start(TOKEN, "adf_daemon_bot").await;
    let h = Harness::start().await;
    let path = telegram_agent(&h, &server, Some("1:a-token-the-platform-refuses"));
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    wait_for("the refused adapter failed", || async {
        adapter_state(&h, &agent).await["state"] == "failed"
    })
    .await;
    let refused = adapter_state(&h, &agent).await;
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains(PURPOSE)),
        "{refused}"
    );
    assert!(
        server.calls_of("getUpdates").is_empty(),
        "{:?}",
        server.calls()
    );

    h.client
        .call(
            reqwest::Method::PUT,
            &format!("/agents/{}/adapters/credentials", agent.id),
            Some(&json!({ "adapterType": "telegram", "envKey": "TELEGRAM_BOT_TOKEN", "value": TOKEN })),
        )
        .await
        .unwrap();
    wait_for("the adapter runs with the new token", || async {
        adapter_state(&h, &agent).await["state"] == "running"
    })
    .await;
    wait_for("it polls the platform", || async {
        !server.calls_of("getUpdates").is_empty()
    })
    .await;
    let listed = h
        .client
        .get(&format!(
            "/agents/{}/adapters/credentials?adapterType=telegram",
            agent.id
        ))
        .await
        .unwrap();
    assert_eq!(
        listed["credentials"]["TELEGRAM_BOT_TOKEN"]["set"], true,
        "{listed}"
    );
    assert!(!listed.to_string().contains(TOKEN), "{listed}");
    h.stop().await;
}

/// The email agent's adapter entry for `servers` (plain text: loopback only).
fn email_adapter(servers: &adf_testkit::mail::MailServers) -> Value {
    json!({ "email": {
        "enabled": true,
        "config": {
            "address": adf_testkit::mail::MailServers::address("agent"),
            "imap_host": "127.0.0.1",
            "imap_port": servers.imap_port(),
            "imap_security": "none",
            "smtp_host": "127.0.0.1",
            "smtp_port": servers.smtp_port(),
            "smtp_security": "none",
        },
    } })
}

/// MSG-22, MSG-43 over email, end to end: the password sealed in the agent's file, a mail to
/// the agent's mailbox (real Postfix → Dovecot) becomes an inbox row, the agent's model
/// (adf-testkit's mock) answers it with `msg_send` by `parent_id`, and the reply lands in the
/// sender's mailbox threaded to the mail it answers. Fails, naming the setup script, where the
/// mail servers are not installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_22_msg_43_an_email_is_answered_by_the_agents_model_through_real_mail_servers() {
    use adf_testkit::mail::MailServers;
    use adf_testkit::{MockProvider, Turn, Wire};

    let servers = MailServers::start(&[("agent", "agent-secret"), ("alice", "alice-secret")]).await;
    let mock = MockProvider::start(Wire::OpenAi).await;
    // The model's reply names the inbox row, known only once the mail arrived.
    mock.await_turns(std::time::Duration::from_secs(20));
    let h = Harness::start().await;
    let mut config = crate::common::model_config(&mock);
    config.extend([
        ("adapters", email_adapter(&servers)),
        ("security.allow_local_fetch", json!(true)),
        (
            "triggers",
            json!({ "on_inbox": { "enabled": true, "targets": [{ "scope": "agent" }] } }),
        ),
    ]);
    let path = agent_file(h.dir.path(), "mailbot", &[], &config);
    let keys = owner_keys(&h);
    let mut file = adf_store::AdfFile::open(&path).unwrap();
    let open = adf_runtime::identity::provision_new(&mut file, &keys).unwrap();
    adf_runtime::identity::set_credential(
        &mut file,
        &open,
        "adapter:email:EMAIL_PASSWORD",
        b"agent-secret",
        false,
    )
    .unwrap();
    file.close().unwrap();
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    wait_for("the email adapter runs", || async {
        let body = h
            .client
            .get(&format!("/agents/{}/runtime/adapters", agent.id))
            .await
            .unwrap();
        body["states"].as_array().is_some_and(|s| {
            s.iter()
                .any(|s| s["type"] == "email" && s["state"] == "running")
        })
    })
    .await;

    let alice = MailServers::address("alice");
    let mail = format!(
        "From: Alice <{alice}>\nTo: {}\nSubject: Weekly report\nMessage-ID: <e2e-1@example.test>\n\nCould you send the weekly report?\n",
        MailServers::address("agent")
    );
    servers
        .send(&alice, &MailServers::address("agent"), &mail)
        .await
        .unwrap();
    let email_rows = || async {
        agent
            .store()
            .run(|file| file.messages(Mailbox::Inbox, &MessageFilter::default(), None))
            .await
            .unwrap()
            .into_iter()
            .filter(|row| row.get("source").and_then(Value::as_str) == Some("email"))
            .collect::<Vec<_>>()
    };
    wait_for("the mail is an inbox row", || async {
        !email_rows().await.is_empty()
    })
    .await;
    let row = email_rows().await.remove(0);
    assert_eq!(row["from"], format!("email:{alice}"), "{row:?}");
    assert_eq!(row["content"], "Could you send the weekly report?");
    let row_id = row["id"].as_str().unwrap().to_owned();
    mock.push_all([
        Turn::tool_call(
            "msg_send",
            json!({ "parent_id": row_id, "content": "Here is the weekly report." }),
        ),
        Turn::text("Replied by email."),
    ]);

    let replies = servers.wait_delivered(&alice, 1).await;
    let reply = &replies[0];
    let head = reply.split("\n\n").next().unwrap_or_default();
    let header = |name: &str| {
        head.lines()
            .find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.eq_ignore_ascii_case(name)
                    .then(|| value.trim_end_matches('\r').trim().to_owned())
            })
            .unwrap_or_default()
    };
    assert_eq!(header("In-Reply-To"), "<e2e-1@example.test>", "{reply}");
    assert_eq!(header("Subject"), "Re: Weekly report", "{reply}");
    assert!(reply.contains("Here is the weekly report."), "{reply}");
    wait_for("the outbox row is delivered", || async {
        outbox(&agent)
            .await
            .iter()
            .any(|r| r["to"] == format!("email:{alice}") && r["status"] == "delivered")
    })
    .await;
    h.stop().await;
}
