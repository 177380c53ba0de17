//! The Discord adapter end to end against adf-testkit's local Discord server (HTTP API and
//! Gateway WebSocket on 127.0.0.1): messages in, replies out, policy, dedup and RESUME across a
//! restart, a dropped Gateway, a zombie connection, RECONNECT/INVALID_SESSION, 429s, refused
//! and missing credentials, forms as components, attachments, chat_info.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use adf_adapters::discord::{CREDENTIAL_PURPOSE, INTENTS, MAX_RATE_LIMIT_ATTEMPTS};
use adf_adapters::{
    AdapterHost, AdapterState, Backoff, FORM_CONTENT_TYPE, HostOptions, OutboundMessage,
    state_root_for,
};
use adf_store::{AdfFile, CreateOptions, IdentityRow};
use adf_testkit::discord::{DiscordFault, DiscordServer};
use serde_json::{Map, Value, json};

use crate::common::{FileSink, RecordingSleeper, adapters_config, wait_until};

const TOKEN: &str = "MTIzNDU2.discord-test-token.abcdef";

/// A new agent file in `dir` whose `adapters.discord` points at `api_root` (plus `extra`
/// entry fields), with the bot token when `token` is given.
fn agent_file(dir: &Path, api_root: &str, extra: Value, token: Option<&str>) -> PathBuf {
    let path = dir.join("bot.adf");
    let mut file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    if let Some(token) = token {
        file.identity_put(&[IdentityRow {
            purpose: CREDENTIAL_PURPOSE.into(),
            value: token.as_bytes().to_vec(),
            encryption_algo: "plain".into(),
            salt: None,
            kdf_params: None,
            code_access: false,
        }])
        .unwrap();
    }
    let mut entry = json!({ "enabled": true, "config": { "api_root": api_root } });
    if let (Some(entry), Some(extra)) = (entry.as_object_mut(), extra.as_object()) {
        entry.extend(extra.clone());
    }
    file.config_set_path(
        adf_store::Caller::Owner,
        "adapters",
        adf_store::ConfigAction::Set,
        json!({ "discord": entry }),
    )
    .unwrap();
    file.close().unwrap();
    path
}

struct Rig {
    _dir: tempfile::TempDir,
    server: DiscordServer,
    sink: Arc<FileSink>,
    sleeper: Arc<RecordingSleeper>,
    path: PathBuf,
}

async fn rig(extra: Value, token: Option<&str>) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let server = DiscordServer::start(TOKEN, "adf-test-bot").await;
    let path = agent_file(dir.path(), &server.api_root(), extra, token);
    Rig {
        sink: FileSink::open(&path),
        _dir: dir,
        server,
        sleeper: Arc::new(RecordingSleeper::default()),
        path,
    }
}

impl Rig {
    fn host_on(&self, sink: &Arc<FileSink>) -> AdapterHost {
        AdapterHost::start(
            &adapters_config(sink),
            sink.clone(),
            HostOptions {
                sleeper: self.sleeper.clone(),
                backoff: Backoff::default(),
            },
        )
    }

    fn host(&self) -> AdapterHost {
        self.host_on(&self.sink)
    }

    async fn running(&self) -> AdapterHost {
        let host = self.host();
        wait_state(&host, AdapterState::Running).await;
        host
    }

    fn contents(&self) -> Vec<String> {
        self.sink
            .inbox()
            .iter()
            .map(|r| text(r, "content"))
            .collect()
    }

    fn state_file(&self, name: &str) -> Option<Value> {
        let path = state_root_for(&self.path).join("discord").join(name);
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
    }
}

async fn wait_state(host: &AdapterHost, state: AdapterState) {
    wait_until(&format!("the adapter is {}", state.as_str()), || {
        host.status("discord").is_some_and(|s| s.state == state)
    })
    .await;
}

fn text(row: &Map<String, Value>, column: &str) -> String {
    row.get(column)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn ann() -> Value {
    DiscordServer::user("300000000000000001", "ann")
}

fn bob() -> Value {
    DiscordServer::user("300000000000000002", "bob")
}

fn outbound(recipient: &str, content: &str, context: Option<Value>) -> OutboundMessage {
    OutboundMessage {
        outbox_id: "out-1".into(),
        recipient: recipient.into(),
        content: content.into(),
        content_type: None,
        source_context: context,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_43_discord_dms_and_guild_mentions_become_inbox_rows_and_own_messages_do_not() {
    let rig = rig(json!({ "policy": { "groups": "mention" } }), Some(TOKEN)).await;
    let host = rig.running().await;
    let identify = rig.server.gateway_ops(2);
    assert_eq!(identify.len(), 1);
    assert_eq!(identify[0]["d"]["intents"], json!(INTENTS));
    assert_eq!(
        INTENTS,
        512 | 4096 | 32768,
        "guild messages, DMs, message content"
    );
    assert_eq!(rig.server.calls_to("gateway_bot").len(), 1);

    let dm = rig.server.dm_channel("400000000000000001", &ann());
    let general = rig
        .server
        .guild_channel("400000000000000002", "500000000000000001", "general");
    let dm_id = rig.server.push_message(&dm, &ann(), "hello bot");
    rig.server
        .push_message(&general, &bob(), "chatter without the bot");
    let bot = rig.server.bot();
    rig.server.push_message(&dm, &bot, "the bot's own message");
    let mut from_bot = DiscordServer::user("300000000000000009", "otherbot");
    from_bot["bot"] = json!(true);
    rig.server.push_message(&general, &from_bot, "another bot");
    let mention = format!("<@{}> status?", rig.server.bot_id());
    let mention_id = rig.server.push_message(&general, &bob(), &mention);
    // A reply to one of the bot's messages addresses the bot too.
    let mut reply = Map::new();
    reply.insert("type".into(), json!(19));
    reply.insert(
        "referenced_message".into(),
        json!({ "id": "1", "author": bot }),
    );
    reply.insert("message_reference".into(), json!({ "message_id": "1" }));
    rig.server
        .push_message_with(&general, &bob(), "replying to the bot", reply);
    wait_until("the three admitted messages are stored", || {
        rig.sink.inbox().len() == 3
    })
    .await;
    // The last dispatch's sequence is stored only after it was handled: nothing is pending.
    wait_until("the sequence passes the last dispatch", || {
        rig.state_file("session.json")
            .is_some_and(|s| s["seq"] == json!(7))
    })
    .await;
    let rows = rig.sink.inbox();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(text(&rows[2], "content"), "replying to the bot");

    let first = &rows[0];
    assert_eq!(text(first, "source"), "discord");
    assert_eq!(text(first, "from"), "discord:400000000000000001");
    assert_eq!(text(first, "content"), "hello bot");
    assert_eq!(text(first, "sender_alias"), "ann");
    assert_eq!(first["source_context"]["channel_id"], json!(dm["id"]));
    assert_eq!(first["source_context"]["message_id"], json!(dm_id));
    assert_eq!(first["original_message"]["id"], json!(dm_id));
    assert!(
        first.get("meta").is_none_or(Value::is_null),
        "a DM has no meta.group"
    );

    let second = &rows[1];
    assert_eq!(text(second, "content"), mention);
    assert_eq!(second["source_context"]["message_id"], json!(mention_id));
    assert_eq!(
        second["source_context"]["guild_id"],
        json!("500000000000000001")
    );
    let group = &second["meta"]["group"];
    assert_eq!(group["platform"], json!("discord"));
    assert_eq!(group["chat_id"], json!("400000000000000002"));
    assert_eq!(group["participants"][0]["id"], json!("300000000000000002"));
    assert!(second["source_context"].get("group").is_none(), "MSG-44");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cfg_49_discord_policy_allowlist_and_groups_apply_before_anything_is_stored() {
    let policy = json!({ "policy": {
        "dm": "allowlist", "groups": "all", "allow_from": ["@ann", "300000000000000003"]
    }});
    let rig = rig(policy, Some(TOKEN)).await;
    let host = rig.running().await;
    let carl = DiscordServer::user("300000000000000003", "carl");
    let ann_dm = rig.server.dm_channel("401", &ann());
    let bob_dm = rig.server.dm_channel("402", &bob());
    let carl_dm = rig.server.dm_channel("403", &carl);
    let general = rig.server.guild_channel("404", "500", "general");
    rig.server.push_message(&ann_dm, &ann(), "from ann");
    rig.server.push_message(&bob_dm, &bob(), "from bob");
    rig.server.push_message(&carl_dm, &carl, "from carl");
    rig.server
        .push_message(&general, &bob(), "bob in a group, groups: all");
    wait_until("every dispatch is handled", || {
        rig.state_file("session.json")
            .is_some_and(|s| s["seq"] == json!(5))
    })
    .await;
    assert_eq!(
        rig.contents(),
        ["from ann", "from carl", "bob in a group, groups: all"]
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_47_discord_a_restart_resumes_the_stored_session_and_a_redelivery_is_not_stored_twice()
{
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.running().await;
    let dm = rig.server.dm_channel("410", &ann());
    rig.server.push_message(&dm, &ann(), "one");
    rig.server.push_message(&dm, &ann(), "two");
    wait_until("two rows", || rig.sink.inbox().len() == 2).await;
    wait_until("the sequence is stored", || {
        rig.state_file("session.json")
            .is_some_and(|s| s["seq"] == json!(3))
    })
    .await;
    host.stop().await;
    rig.sink.close();
    let first = rig.sink_inbox_first_original();

    // While the daemon is down the session goes on: this dispatch waits for a RESUME.
    rig.server.push_message(&dm, &ann(), "three, while down");
    let sink = FileSink::open(&rig.path);
    let host = rig.host_on(&sink);
    wait_until("the missed message is replayed and stored", || {
        sink.inbox().len() == 3
    })
    .await;
    let resume = rig.server.gateway_ops(6);
    assert_eq!(resume.len(), 1, "the restarted adapter resumes");
    assert_eq!(resume[0]["d"]["session_id"], json!("session-1"));
    assert_eq!(resume[0]["d"]["seq"], json!(3));
    assert_eq!(rig.server.sessions_started(), 1, "no second IDENTIFY");

    // The platform delivers a message again (at least once): no second row.
    rig.server.dispatch("MESSAGE_CREATE", first);
    rig.server.push_message(&dm, &ann(), "four");
    wait_until("four is stored", || sink.inbox().len() >= 4).await;
    let contents: Vec<String> = sink.inbox().iter().map(|r| text(r, "content")).collect();
    assert_eq!(contents, ["one", "two", "three, while down", "four"]);
    let seen = rig.state_file("seen.json").unwrap();
    assert_eq!(seen["ids"].as_array().map(Vec::len), Some(4), "{seen}");
    host.stop().await;
}

impl Rig {
    /// The raw message of the first inbox row, read from the closed file.
    fn sink_inbox_first_original(&self) -> Value {
        let sink = FileSink::open(&self.path);
        let first = sink.inbox()[0]["original_message"].clone();
        sink.close();
        first
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_a_gateway_dropped_mid_stream_is_resumed_and_loses_or_doubles_nothing() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.running().await;
    let dm = rig.server.dm_channel("420", &ann());
    rig.server.push_message(&dm, &ann(), "before");
    wait_until("the first is stored", || rig.sink.inbox().len() == 1).await;
    rig.server.drop_before_next_dispatch();
    rig.server.push_message(&dm, &ann(), "in the drop");
    wait_until("the dropped dispatch is replayed", || {
        rig.sink.inbox().len() == 2
    })
    .await;
    rig.server.push_message(&dm, &ann(), "after");
    wait_until("three rows", || rig.sink.inbox().len() == 3).await;
    assert_eq!(rig.contents(), ["before", "in the drop", "after"]);
    let resume = rig.server.gateway_ops(6);
    assert_eq!(resume.len(), 1);
    assert_eq!(
        resume[0]["d"]["seq"],
        json!(2),
        "resumed after the last stored dispatch"
    );
    assert_eq!(rig.server.connections(), 2);
    assert_eq!(rig.server.sessions_started(), 1);
    let status = host.status("discord").unwrap();
    assert_eq!(status.state, AdapterState::Running);
    assert_eq!(status.restarts, 0, "a resumable drop is not a failure");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_a_heartbeat_without_ack_is_a_zombie_connection_and_is_resumed() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    rig.server.set_heartbeat_interval_ms(300);
    rig.server.leave_heartbeats_unanswered(1);
    let host = rig.running().await;
    // The replacement connection beats slower, so a loaded machine cannot make an answered
    // beat look late.
    rig.server.set_heartbeat_interval_ms(1000);
    wait_until("the zombie connection is replaced", || {
        rig.server.connections() == 2 && rig.server.gateway_ops(6).len() == 1
    })
    .await;
    let payloads = rig.server.gateway_payloads();
    let first_resume = payloads.iter().position(|p| p["op"] == json!(6)).unwrap();
    let beats_before = payloads[..first_resume]
        .iter()
        .filter(|p| p["op"] == json!(1))
        .count();
    assert_eq!(
        beats_before, 1,
        "one unanswered beat, then a new connection"
    );
    assert_eq!(payloads[0]["op"], json!(2), "IDENTIFY first");
    assert_eq!(payloads[1]["op"], json!(1), "then the first heartbeat");
    assert_eq!(
        payloads[first_resume]["d"]["seq"],
        json!(1),
        "resumed from READY's sequence"
    );
    let dm = rig.server.dm_channel("430", &ann());
    rig.server.push_message(&dm, &ann(), "still heard");
    wait_until("the message arrives on the new connection", || {
        rig.sink.inbox().len() == 1
    })
    .await;
    wait_until("heartbeats are acknowledged again", || {
        rig.server.gateway_ops(1).len() >= 3
    })
    .await;
    assert_eq!(rig.server.connections(), 2, "acknowledged beats keep it");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_reconnect_resumes_and_an_invalid_session_identifies_anew() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.running().await;
    let dm = rig.server.dm_channel("440", &ann());
    rig.server.request_reconnect();
    wait_until("RECONNECT is followed by RESUME", || {
        rig.server.gateway_ops(6).len() == 1
    })
    .await;
    rig.server.push_message(&dm, &ann(), "after reconnect");
    wait_until("stored", || rig.sink.inbox().len() == 1).await;
    // A resumable INVALID_SESSION resumes too.
    rig.server.invalidate_session(true);
    wait_until("INVALID_SESSION true is followed by RESUME", || {
        rig.server.gateway_ops(6).len() == 2
    })
    .await;
    assert_eq!(rig.server.sessions_started(), 1);
    rig.server.invalidate_session(false);
    wait_until("a new session is identified", || {
        rig.server.sessions_started() == 2
    })
    .await;
    let wait = *rig.sleeper.waits().last().unwrap();
    assert!(
        (Duration::from_secs(1)..=Duration::from_secs(5)).contains(&wait),
        "INVALID_SESSION waits 1-5 s before identifying: {wait:?}"
    );
    wait_until("the new session is stored", || {
        rig.state_file("session.json")
            .is_some_and(|s| s["session_id"] == json!("session-2"))
    })
    .await;
    rig.server.push_message(&dm, &ann(), "new session");
    wait_until("stored in the new session", || rig.sink.inbox().len() == 2).await;
    assert_eq!(host.status("discord").unwrap().restarts, 0);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_22_msg_43_discord_replies_reference_the_message_and_long_texts_are_split() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.running().await;
    let dm = rig.server.dm_channel("450", &ann());
    let asked = rig.server.push_message(&dm, &ann(), "question?");
    wait_until("the question is stored", || rig.sink.inbox().len() == 1).await;
    let inbound = &rig.sink.inbox()[0];
    let reply = outbound(
        &text(inbound, "from"),
        &"x".repeat(4500),
        Some(inbound["source_context"].clone()),
    );
    let delivered = host.deliver(&reply).await.unwrap();
    assert_eq!(delivered.status_code, 200);
    assert_eq!(
        delivered.platform_message_ids.len(),
        3,
        "4500 chars: 2000+2000+500"
    );
    let sent = rig.server.calls_to("create_message");
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[0].path, "/channels/450/messages");
    assert_eq!(
        sent[0].body["message_reference"]["message_id"],
        json!(asked)
    );
    assert_eq!(
        sent[0].body["content"].as_str().unwrap().chars().count(),
        2000
    );
    assert!(
        sent[1].body.get("message_reference").is_none(),
        "only the first part replies"
    );
    assert_eq!(sent[2].body["content"].as_str().unwrap().len(), 500);

    // A bare `discord:<channel>` recipient replies to nothing.
    let general = rig.server.guild_channel("451", "500", "general");
    host.deliver(&outbound("discord:451", "hello channel", None))
        .await
        .unwrap();
    let last = rig.server.calls_to("create_message").pop().unwrap();
    assert_eq!(
        last.path,
        format!("/channels/{}/messages", general["id"].as_str().unwrap())
    );
    assert!(last.body.get("message_reference").is_none());

    // Discord's refusal is the failed row's reason, with its status.
    let error = host
        .deliver(&outbound("discord:999", "nowhere", None))
        .await
        .unwrap_err();
    assert_eq!(error.status_code(), Some(404));
    assert!(error.to_string().contains("Unknown Channel"), "{error}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_429_waits_the_retry_after_of_the_body_or_the_headers() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.running().await;
    rig.server.guild_channel("460", "500", "general");
    rig.server
        .fault("create_message", DiscordFault::RateLimited(2.5));
    rig.server
        .fault("create_message", DiscordFault::RateLimitedHeaderOnly(3));
    host.deliver(&outbound("discord:460", "after the waits", None))
        .await
        .unwrap();
    assert_eq!(
        rig.server.calls_to("create_message").len(),
        3,
        "refused twice, then sent"
    );
    let waits = rig.sleeper.waits();
    assert!(waits.contains(&Duration::from_millis(2500)), "{waits:?}");
    assert!(waits.contains(&Duration::from_secs(3)), "{waits:?}");

    for _ in 0..MAX_RATE_LIMIT_ATTEMPTS {
        rig.server
            .fault("create_message", DiscordFault::RateLimited(1.0));
    }
    let error = host
        .deliver(&outbound("discord:460", "never", None))
        .await
        .unwrap_err();
    assert_eq!(error.status_code(), Some(429), "{error}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idn_37_discord_a_refused_token_is_a_clear_error_naming_the_purpose_and_no_restart() {
    let rig = rig(json!({}), Some("wrong.discord-token.zzz")).await;
    let host = rig.host();
    wait_state(&host, AdapterState::Failed).await;
    let status = host.status("discord").unwrap();
    let error = status.error.unwrap();
    assert!(error.contains("401"), "{error}");
    assert!(error.contains(CREDENTIAL_PURPOSE), "{error}");
    assert!(error.contains("adf identity set"), "{error}");
    assert!(
        !error.contains("wrong.discord-token"),
        "the token never shows: {error}"
    );
    assert_eq!(status.restarts, 0);
    assert_eq!(
        rig.server.connections(),
        0,
        "no Gateway with a refused token"
    );
    let tested = AdapterHost::test_credential(
        &adapters_config(&rig.sink),
        "discord",
        rig.sink.clone(),
        HostOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(tested.to_string().contains(CREDENTIAL_PURPOSE), "{tested}");
    host.stop().await;

    // No credential at all: the same fix named, nothing called.
    let rig = self::rig(json!({}), None).await;
    let host = rig.host();
    wait_state(&host, AdapterState::Failed).await;
    let error = host.status("discord").unwrap().error.unwrap();
    assert!(error.contains(CREDENTIAL_PURPOSE), "{error}");
    assert!(error.contains("adf identity set"), "{error}");
    assert!(rig.server.calls().is_empty());
    host.stop().await;

    // A good token checks out and says who the bot is.
    let rig = self::rig(json!({}), Some(TOKEN)).await;
    let tested = AdapterHost::test_credential(
        &adapters_config(&rig.sink),
        "discord",
        rig.sink.clone(),
        HostOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(tested["bot"]["id"], json!(rig.server.bot_id()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_a_gateway_refusing_the_intents_fails_naming_the_message_content_intent() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.running().await;
    rig.server.close_gateway(4014, "Disallowed intent(s).");
    wait_state(&host, AdapterState::Failed).await;
    let error = host.status("discord").unwrap().error.unwrap();
    assert!(error.contains("4014"), "{error}");
    assert!(error.contains("Message Content intent"), "{error}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_46_discord_a_form_goes_out_as_components_and_clicks_come_back_threaded() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.running().await;
    let dm = rig.server.dm_channel("470", &ann());
    let many: Vec<Value> = (1..=7)
        .map(|n| json!({ "id": format!("d{n}"), "label": format!("Day {n}"), "value": n }))
        .collect();
    let form = json!({
        "form_id": "lunch",
        "title": "Lunch",
        "questions": [
            { "id": "main", "text": "Main course?",
              "options": [{ "id": "fish", "label": "Fish", "value": "F" },
                          { "id": "veg", "label": "Vegetables", "value": "V" }] },
            { "id": "day", "text": "Which day?", "options": many },
            { "id": "notes", "text": "Anything else?" }
        ]
    });
    let message = OutboundMessage {
        outbox_id: "out-form".into(),
        recipient: "discord:470".into(),
        content: form.to_string(),
        content_type: Some(FORM_CONTENT_TYPE.into()),
        source_context: None,
    };
    let delivered = host.deliver(&message).await.unwrap();
    assert_eq!(
        delivered.platform_message_ids.len(),
        4,
        "the title, then one per question"
    );
    let sent = rig.server.calls_to("create_message");
    let buttons = &sent[1].body["components"][0];
    assert_eq!(buttons["type"], json!(1), "an action row");
    assert_eq!(buttons["components"][1]["type"], json!(2));
    assert_eq!(buttons["components"][1]["label"], json!("Vegetables"));
    let veg = buttons["components"][1]["custom_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(veg.len() <= 100, "custom_id fits Discord's 100 characters");
    let select = &sent[2].body["components"][0]["components"][0];
    assert_eq!(
        select["type"],
        json!(3),
        "seven choices are a string select"
    );
    assert_eq!(select["options"].as_array().unwrap().len(), 7);
    let day3 = select["options"][2]["value"].as_str().unwrap().to_owned();
    assert!(sent[3].body.get("components").is_none());

    rig.server
        .push_interaction(&dm, &ann(), &delivered.platform_message_ids[1], &veg, None);
    wait_until("the click is stored", || rig.sink.inbox().len() == 1).await;
    let answer = &rig.sink.inbox()[0];
    assert_eq!(text(answer, "parent_id"), "out-form");
    assert_eq!(text(answer, "content"), "Vegetables");
    let context = &answer["source_context"];
    assert_eq!(context["form_id"], json!("lunch"));
    assert_eq!(context["question_id"], json!("main"));
    assert_eq!(context["answer_id"], json!("veg"));
    assert_eq!(context["answer_value"], json!("V"));
    wait_until("the interaction is acknowledged", || {
        !rig.server.calls_to("interaction_callback").is_empty()
    })
    .await;
    assert_eq!(
        rig.server.calls_to("interaction_callback")[0].body,
        json!({ "type": 6 }),
        "a deferred update: acknowledged, the message unchanged"
    );

    rig.server.push_interaction(
        &dm,
        &ann(),
        &delivered.platform_message_ids[2],
        select["custom_id"].as_str().unwrap(),
        Some(vec![day3]),
    );
    wait_until("the selection is stored", || rig.sink.inbox().len() == 2).await;
    let picked = &rig.sink.inbox()[1]["source_context"];
    assert_eq!(picked["question_id"], json!("day"));
    assert_eq!(picked["answer_id"], json!("d3"));
    assert_eq!(picked["answer_value"], json!(3));

    // The question without choices is answered by replying to its message.
    let mut reply = Map::new();
    reply.insert(
        "message_reference".into(),
        json!({ "message_id": delivered.platform_message_ids[3], "channel_id": "470" }),
    );
    reply.insert("type".into(), json!(19));
    rig.server.push_message_with(&dm, &ann(), "no nuts", reply);
    wait_until("the typed answer is stored", || rig.sink.inbox().len() == 3).await;
    let typed = &rig.sink.inbox()[2];
    assert_eq!(text(typed, "parent_id"), "out-form");
    assert_eq!(typed["source_context"]["question_id"], json!("notes"));
    assert_eq!(typed["source_context"]["answer_value"], json!("no nuts"));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_42_discord_attachments_are_imported_and_ones_over_the_limit_skipped() {
    let rig = rig(
        json!({ "limits": { "max_attachment_size": 1000 } }),
        Some(TOKEN),
    )
    .await;
    let host = rig.running().await;
    let dm = rig.server.dm_channel("480", &ann());
    let small = vec![7u8; 999];
    let attachments = [
        rig.server.attachment("small notes.txt", &small, 999),
        rig.server.attachment("big.pdf", &[8u8; 1001], 1001),
        // Announces a small size and serves more: the limit holds anyway.
        rig.server.attachment("lies.bin", &[9u8; 5000], 10),
    ];
    for attachment in attachments {
        let mut extra = Map::new();
        extra.insert("attachments".into(), json!([attachment]));
        rig.server.push_message_with(&dm, &ann(), "", extra);
    }
    wait_until("all three are stored", || rig.sink.inbox().len() == 3).await;
    let rows = rig.sink.inbox();
    let imported = &rows[0]["attachments"][0];
    assert_eq!(imported["transfer"], json!("imported"), "{imported}");
    let path = imported["path"].as_str().unwrap().to_owned();
    assert!(path.starts_with("imported/discord/"), "{path}");
    let stored = rig
        .sink
        .with_file(|file| file.file_read(&path).unwrap().unwrap());
    assert_eq!(stored.content, small);
    assert_eq!(rows[1]["attachments"][0]["transfer"], json!("skipped"));
    assert_eq!(rows[1]["attachments"][0]["filename"], json!("big.pdf"));
    assert_eq!(rows[2]["attachments"][0]["transfer"], json!("failed"));
    assert!(
        rows[2]["attachments"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("max_attachment_size"),
        "{:?}",
        rows[2]["attachments"]
    );
    assert_eq!(
        rig.server.calls_to("attachment").len(),
        2,
        "the skipped file is never downloaded"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_48_discord_chat_info_answers_the_channel_and_its_recent_messages() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.running().await;
    let general = rig.server.guild_channel("490", "500", "general");
    for n in 1..=3 {
        rig.server
            .push_message(&general, &bob(), &format!("message {n}"));
    }
    let info = host.chat_info("discord", "490", Some(2)).await.unwrap();
    assert_eq!(info["supported"], json!(true));
    assert_eq!(info["chat"]["name"], json!("general"));
    assert_eq!(info["chat"]["guild_id"], general["guild_id"]);
    let messages = info["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "limit is passed on");
    assert_eq!(messages[0]["content"], json!("message 3"), "newest first");
    assert_eq!(
        rig.server.calls_to("channel_messages")[0].path,
        "/channels/490/messages"
    );
    let dm = rig.server.dm_channel("491", &ann());
    let info = host.chat_info("discord", "491", None).await.unwrap();
    assert_eq!(info["chat"]["type"], json!(1));
    assert_eq!(info["member_count"], json!(2), "the recipient and the bot");
    assert_eq!(dm["id"], json!("491"));
    assert!(
        host.chat_info("discord", "../users/@me", None)
            .await
            .is_err()
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cfg_49_discord_config_gateway_url_is_used_as_given_and_a_bad_one_is_refused() {
    let server = DiscordServer::start(TOKEN, "adf-test-bot").await;
    let config = json!({ "config": {
        "api_root": server.api_root(), "gateway_url": server.gateway_url(),
    }});
    let rig = rig(config, Some(TOKEN)).await;
    let host = rig.host();
    wait_state(&host, AdapterState::Running).await;
    assert_eq!(
        server.sessions_started(),
        1,
        "the configured Gateway is used"
    );
    assert!(server.calls_to("gateway_bot").is_empty(), "no lookup");
    host.stop().await;

    let rig = self::rig(
        json!({ "config": {
            "api_root": server.api_root(), "gateway_url": "http://127.0.0.1:1/gateway",
        }}),
        Some(TOKEN),
    )
    .await;
    let host = rig.host();
    wait_state(&host, AdapterState::Failed).await;
    let error = host.status("discord").unwrap().error.unwrap();
    assert!(
        error.contains("config.gateway_url is a ws/wss URL"),
        "{error}"
    );
    assert!(rig.server.calls().is_empty());
    assert_eq!(
        server.calls_to("users_me").len(),
        1,
        "the bad entry called nothing"
    );
    assert_eq!(server.calls().len(), 1);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_45_discord_more_choices_than_a_select_holds_are_listed_and_answered_in_words() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.running().await;
    let dm = rig.server.dm_channel("475", &ann());
    let options: Vec<String> = (1..=30).map(|n| format!("Seat {n}")).collect();
    let form =
        json!({ "questions": [{ "id": "seat", "text": "Which seat?", "options": options }] });
    let message = OutboundMessage {
        outbox_id: "out-seats".into(),
        recipient: "discord:475".into(),
        content: form.to_string(),
        content_type: Some(FORM_CONTENT_TYPE.into()),
        source_context: None,
    };
    let delivered = host.deliver(&message).await.unwrap();
    let sent = rig.server.calls_to("create_message");
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].body.get("components").is_none(),
        "{:?}",
        sent[0].body
    );
    let content = sent[0].body["content"].as_str().unwrap();
    assert!(
        content.contains("Which seat?") && content.contains("Seat 30"),
        "{content}"
    );

    let mut reply = Map::new();
    reply.insert(
        "message_reference".into(),
        json!({ "message_id": delivered.platform_message_ids[0] }),
    );
    rig.server.push_message_with(&dm, &ann(), "Seat 12", reply);
    wait_until("the answer is stored", || rig.sink.inbox().len() == 1).await;
    let answer = &rig.sink.inbox()[0];
    assert_eq!(text(answer, "parent_id"), "out-seats");
    assert_eq!(answer["source_context"]["form_id"], json!("out-seats"));
    assert_eq!(answer["source_context"]["question_id"], json!("seat"));
    assert_eq!(answer["source_context"]["answer_value"], json!("Seat 12"));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_47_discord_a_stale_stored_session_falls_back_to_the_gateway_and_identifies() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    // A session kept from long ago: its resume URL refuses connections (loopback port 1) and
    // the Gateway no longer knows it.
    let dir = state_root_for(&rig.path).join("discord");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("session.json"),
        json!({ "session_id": "session-old", "resume_gateway_url": "ws://127.0.0.1:1/gateway", "seq": 40 })
            .to_string(),
    )
    .unwrap();
    let host = rig.running().await;
    let resume = rig.server.gateway_ops(6);
    assert_eq!(resume.len(), 1, "tried on the main Gateway URL");
    assert_eq!(resume[0]["d"]["session_id"], json!("session-old"));
    assert_eq!(rig.server.sessions_started(), 1, "then identified anew");
    assert_eq!(
        rig.server.calls_to("gateway_bot").len(),
        2,
        "looked up to resume there, then for the new session"
    );
    let dm = rig.server.dm_channel("495", &ann());
    rig.server.push_message(&dm, &ann(), "on the new session");
    wait_until("stored", || rig.sink.inbox().len() == 1).await;
    assert_eq!(
        rig.state_file("session.json").unwrap()["session_id"],
        json!("session-1")
    );
    host.stop().await;
}
