//! The Slack adapter end to end against adf-testkit's local Slack server (Web API over real
//! HTTP, Socket Mode over a real WebSocket, both on 127.0.0.1): events in, messages out,
//! policy, dedup across a restart, attachments, forms both ways, 429, refused and missing
//! tokens, a dropped socket, chat_info.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use adf_adapters::slack::{APP_TOKEN_PURPOSE, BOT_TOKEN_PURPOSE, MAX_RATE_LIMIT_ATTEMPTS};
use adf_adapters::{
    AdapterHost, AdapterState, Backoff, FORM_CONTENT_TYPE, HostOptions, OutboundMessage,
    state_root_for,
};
use adf_store::{AdfFile, CreateOptions, IdentityRow};
use adf_testkit::slack::{BOT_ID, BOT_USER_ID, SlackFault, SlackServer, SocketFault};
use serde_json::{Map, Value, json};

use crate::common::{FileSink, RecordingSleeper, adapters_config, wait_until};

const BOT_TOKEN: &str = "xoxb-1111-2222-adftestbottoken";
const APP_TOKEN: &str = "xapp-1-A0ADFAPP-3333-adftestapptoken";

const DM: &str = "D0ANN";
const CHANNEL: &str = "C0TEAM";
const ANN: &str = "U0ANN";
const BOB: &str = "U0BOB";

struct Rig {
    _dir: tempfile::TempDir,
    server: SlackServer,
    sink: Arc<FileSink>,
    sleeper: Arc<RecordingSleeper>,
    path: PathBuf,
}

/// A new agent file whose `adapters.slack` points at `api_root` (plus `extra` entry fields),
/// with the tokens given.
fn agent_file(
    dir: &Path,
    api_root: &str,
    extra: Value,
    bot: Option<&str>,
    app: Option<&str>,
) -> PathBuf {
    let path = dir.join("bot.adf");
    let mut file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    let rows: Vec<IdentityRow> = [(BOT_TOKEN_PURPOSE, bot), (APP_TOKEN_PURPOSE, app)]
        .into_iter()
        .filter_map(|(purpose, token)| {
            Some(IdentityRow {
                purpose: purpose.into(),
                value: token?.as_bytes().to_vec(),
                encryption_algo: "plain".into(),
                salt: None,
                kdf_params: None,
                code_access: false,
            })
        })
        .collect();
    if !rows.is_empty() {
        file.identity_put(&rows).unwrap();
    }
    let mut entry = json!({ "enabled": true, "config": { "api_root": api_root } });
    if let (Some(entry), Some(extra)) = (entry.as_object_mut(), extra.as_object()) {
        entry.extend(extra.clone());
    }
    file.config_set_path(
        adf_store::Caller::Owner,
        "adapters",
        adf_store::ConfigAction::Set,
        json!({ "slack": entry }),
    )
    .unwrap();
    file.close().unwrap();
    path
}

async fn rig_with(extra: Value, bot: Option<&str>, app: Option<&str>) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let server = SlackServer::start(BOT_TOKEN, APP_TOKEN).await;
    server.add_channel(DM, "im", "ann", &[ANN, BOT_USER_ID]);
    server.add_channel(
        CHANNEL,
        "channel",
        "team",
        &[ANN, BOB, BOT_USER_ID, "U0C", "U0D"],
    );
    server.add_user(ANN, "ann", "Ann");
    server.add_user(BOB, "bob", "Bob");
    let path = agent_file(dir.path(), &server.api_root(), extra, bot, app);
    Rig {
        sink: FileSink::open(&path),
        _dir: dir,
        server,
        sleeper: Arc::new(RecordingSleeper::default()),
        path,
    }
}

async fn rig(extra: Value) -> Rig {
    rig_with(extra, Some(BOT_TOKEN), Some(APP_TOKEN)).await
}

impl Rig {
    fn host(&self) -> AdapterHost {
        host_on(&self.sink, &self.sleeper)
    }

    async fn wait_state(&self, host: &AdapterHost, state: AdapterState) {
        wait_until(&format!("the adapter is {}", state.as_str()), || {
            host.status("slack").is_some_and(|s| s.state == state)
        })
        .await;
    }

    /// Waits until every envelope pushed so far is acknowledged: the adapter is done with it.
    async fn wait_acknowledged(&self) {
        wait_until("every envelope is acknowledged", || {
            self.server.pending_envelopes() == 0
        })
        .await;
    }

    fn seen_file(&self) -> PathBuf {
        state_root_for(&self.path).join("slack").join("seen.json")
    }
}

fn host_on(sink: &Arc<FileSink>, sleeper: &Arc<RecordingSleeper>) -> AdapterHost {
    AdapterHost::start(
        &adapters_config(sink),
        sink.clone(),
        HostOptions {
            sleeper: sleeper.clone(),
            backoff: Backoff::default(),
        },
    )
}

fn text(row: &Map<String, Value>, column: &str) -> String {
    row.get(column)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Inbox rows, oldest first. The store lists newest first; Slack's message ids end in a `ts`
/// (not an integer), so the shared fixture's sort by id keeps that order and it is reversed.
fn inbox(sink: &FileSink) -> Vec<Map<String, Value>> {
    let mut rows = sink.inbox();
    rows.reverse();
    rows
}

fn contents(sink: &FileSink) -> Vec<String> {
    inbox(sink).iter().map(|r| text(r, "content")).collect()
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

fn extra(fields: Value) -> Map<String, Value> {
    fields.as_object().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_43_slack_dm_becomes_an_inbox_row_with_source_context_and_original_message() {
    let rig = rig(json!({})).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    // Slack escapes `&`, `<` and `>` in message text; the row has the text as written.
    let ts = rig
        .server
        .push_message(DM, "im", ANN, "hello bot, 1 &lt; 2 &amp; 3");
    // Neither the bot's own post nor an edit is a new message for the agent.
    rig.server.push_message_with(
        DM,
        "im",
        BOT_USER_ID,
        "my own words",
        extra(json!({ "bot_id": BOT_ID })),
    );
    rig.server.push_message_with(
        DM,
        "im",
        ANN,
        "edited",
        extra(json!({ "subtype": "message_changed" })),
    );
    rig.wait_acknowledged().await;
    let rows = inbox(&rig.sink);
    assert_eq!(contents(&rig.sink), ["hello bot, 1 < 2 & 3"]);
    let row = &rows[0];
    assert_eq!(text(row, "source"), "slack");
    assert_eq!(text(row, "from"), format!("slack:{DM}"));
    assert_eq!(text(row, "status"), "unread");
    assert_eq!(
        text(row, "sender_alias"),
        "Ann",
        "the name users.info gives"
    );
    assert_eq!(row["source_context"]["channel"], json!(DM));
    assert_eq!(row["source_context"]["ts"], json!(ts));
    assert!(
        row["source_context"].get("thread_ts").is_none(),
        "a DM outside a thread is answered in the conversation: {row:?}"
    );
    assert_eq!(
        row["original_message"]["event"]["text"],
        json!("hello bot, 1 &lt; 2 &amp; 3")
    );
    assert!(row["original_message"]["event_id"].is_string(), "{row:?}");
    assert!(
        row.get("meta").is_none_or(Value::is_null),
        "a DM has no meta.group"
    );
    assert_eq!(
        rig.server.acknowledged().len(),
        3,
        "every envelope is acknowledged, stored or not"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cfg_49_slack_policy_allowlist_and_group_mentions_apply_before_anything_is_stored() {
    let policy =
        json!({ "policy": { "dm": "allowlist", "groups": "mention", "allow_from": [ANN] } });
    let rig = rig(policy).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    rig.server.push_message(DM, "im", ANN, "from ann");
    rig.server
        .push_message("D0MAL", "im", "U0MALLORY", "from mallory");
    rig.server
        .push_message(CHANNEL, "channel", BOB, "channel chatter");
    let mention = format!("<@{BOT_USER_ID}> status?");
    // Slack sends a `message` and an `app_mention` event for it: one row.
    let ts = rig.server.push_mention(CHANNEL, BOB, &mention);
    // A reply in a thread the bot started addresses the bot; one in someone else's does not.
    let thread =
        |parent: &str| extra(json!({ "thread_ts": "1767225500.000001", "parent_user_id": parent }));
    rig.server.push_message_with(
        CHANNEL,
        "channel",
        ANN,
        "in the bot's thread",
        thread(BOT_USER_ID),
    );
    rig.server
        .push_message_with(CHANNEL, "channel", ANN, "in bob's thread", thread(BOB));
    rig.wait_acknowledged().await;
    assert_eq!(
        contents(&rig.sink),
        ["from ann", mention.as_str(), "in the bot's thread"]
    );
    let row = &inbox(&rig.sink)[1];
    let group = &row["meta"]["group"];
    assert_eq!(group["platform"], json!("slack"));
    assert_eq!(group["chat_id"], json!(CHANNEL));
    assert_eq!(group["participants"][0]["id"], json!(BOB));
    assert_eq!(group["participants"][0]["name"], json!("Bob"));
    assert_eq!(group["title"], json!("team"), "the channel's name");
    assert_eq!(group["participants_truncated"], json!(false));
    assert_eq!(
        row["source_context"]["thread_ts"],
        json!(ts),
        "a reply in a channel goes into the message's thread"
    );
    assert!(
        row["source_context"].get("group").is_none(),
        "meta.group stays out of source_context (MSG-44)"
    );
    host.stop().await;

    // `groups: none` drops even a mention; an invalid enum never starts the adapter.
    let rig = rig_with(
        json!({ "policy": { "groups": "none" } }),
        Some(BOT_TOKEN),
        Some(APP_TOKEN),
    )
    .await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    rig.server.push_mention(CHANNEL, BOB, &mention);
    rig.wait_acknowledged().await;
    assert!(inbox(&rig.sink).is_empty());
    host.stop().await;
    let rig = rig_with(
        json!({ "policy": { "groups": "everyone" } }),
        Some(BOT_TOKEN),
        Some(APP_TOKEN),
    )
    .await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Failed).await;
    let error = host.status("slack").unwrap().error.unwrap();
    assert!(error.contains("all, mention or none"), "{error}");
    assert!(rig.server.calls().is_empty(), "nothing was called");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_47_slack_dedup_across_a_host_restart_keeps_seen_events_in_the_state_directory() {
    let rig = rig(json!({})).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    let file = rig
        .server
        .add_file("notes.txt", "text/plain", b"notes", None);
    let first = rig.server.push_message_with(
        DM,
        "im",
        ANN,
        "one",
        extra(json!({ "subtype": "file_share", "files": [file.clone()] })),
    );
    rig.server.push_message(DM, "im", ANN, "two");
    rig.wait_acknowledged().await;
    host.stop().await;
    rig.sink.close();
    let seen = std::fs::read_to_string(rig.seen_file()).unwrap();
    assert!(
        seen.contains(&format!("slack:{DM}:{first}")),
        "the stored message's key is kept beside the file: {seen}"
    );

    // After a restart Slack delivers the first message again (its acknowledgement was lost)
    // and a new one; only the new one is a new row.
    rig.server.push_event(json!({
        "type": "message", "subtype": "file_share", "channel": DM, "user": ANN, "text": "one",
        "ts": first, "event_ts": first, "channel_type": "im", "files": [file],
    }));
    rig.server.push_message(DM, "im", ANN, "three");
    let sink = FileSink::open(&rig.path);
    let host = host_on(&sink, &rig.sleeper);
    rig.wait_acknowledged().await;
    assert_eq!(contents(&sink), ["one", "two", "three"]);
    assert!(rig.server.connections() >= 2);
    let second_copy = sink.with_file(|file| file.file_read("imported/slack/1-notes.txt").unwrap());
    assert!(
        second_copy.is_none(),
        "the redelivered message's file is not fetched and stored again"
    );
    assert!(
        sink.with_file(|file| file.file_read("imported/slack/notes.txt").unwrap())
            .is_some()
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_a_socket_dropped_mid_stream_reconnects_losing_and_duplicating_nothing() {
    let rig = rig(json!({})).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    // The connection drops right after the first envelope goes out: its acknowledgement is
    // lost and Slack delivers it again on the next connection.
    rig.server.socket_fault(SocketFault::DropAfterNextEnvelope);
    rig.server.push_message(DM, "im", ANN, "one");
    rig.server.push_message(DM, "im", ANN, "two");
    rig.server.push_message(DM, "im", ANN, "three");
    rig.wait_acknowledged().await;
    assert_eq!(contents(&rig.sink), ["one", "two", "three"]);
    assert_eq!(rig.server.connections(), 2);
    let states: Vec<AdapterState> = rig.sink.changes().iter().map(|c| c.state).collect();
    assert!(
        states.contains(&AdapterState::Backoff),
        "the drop is a transient failure the host restarts: {states:?}"
    );
    assert_eq!(
        rig.sleeper.waits().first(),
        Some(&Backoff::default().delay(1)),
        "restarted after the first backoff"
    );
    rig.wait_state(&host, AdapterState::Running).await;

    // A `disconnect` request reconnects at once, without a failure.
    let backoffs = rig.sleeper.waits().len();
    rig.server
        .socket_fault(SocketFault::Disconnect("refresh_requested".into()));
    wait_until("a third connection", || rig.server.connections() == 3).await;
    rig.server.push_message(DM, "im", ANN, "four");
    rig.wait_acknowledged().await;
    assert_eq!(contents(&rig.sink), ["one", "two", "three", "four"]);
    assert_eq!(
        rig.sleeper.waits().len(),
        backoffs,
        "no backoff for a disconnect"
    );
    assert_eq!(host.status("slack").unwrap().state, AdapterState::Running);

    // Too many connections: the next one waits the host's backoff.
    rig.server
        .socket_fault(SocketFault::Disconnect("too_many_websockets".into()));
    wait_until("a fourth connection", || rig.server.connections() == 4).await;
    assert_eq!(
        rig.sleeper.waits().len(),
        backoffs + 1,
        "{:?}",
        rig.sleeper.waits()
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_42_slack_files_within_the_limit_are_imported_and_larger_ones_skipped() {
    let rig = rig(json!({ "limits": { "max_attachment_size": 1000 } })).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    let small = rig
        .server
        .add_file("notes.txt", "text/plain", b"small file bytes", None);
    let big = rig
        .server
        .add_file("big.pdf", "application/pdf", &[7u8; 1500], None);
    // Announced small, sent large: the download is cut at the limit.
    let liar = rig.server.add_file(
        "liar.bin",
        "application/octet-stream",
        &[1u8; 4000],
        Some(10),
    );
    for (text, file) in [("small", small), ("big", big), ("liar", liar)] {
        rig.server.push_message_with(
            DM,
            "im",
            ANN,
            text,
            extra(json!({ "subtype": "file_share", "files": [file] })),
        );
    }
    rig.wait_acknowledged().await;
    let rows = inbox(&rig.sink);
    assert_eq!(contents(&rig.sink), ["small", "big", "liar"]);
    let imported = &rows[0]["attachments"][0];
    assert_eq!(imported["transfer"], json!("imported"), "{imported}");
    let path = imported["path"].as_str().unwrap().to_owned();
    assert!(path.starts_with("imported/slack/"), "{path}");
    let stored = rig
        .sink
        .with_file(|file| file.file_read(&path).unwrap().unwrap());
    assert_eq!(stored.content, b"small file bytes");
    assert_eq!(rows[1]["attachments"][0]["transfer"], json!("skipped"));
    assert!(
        rows[1]["attachments"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("max_attachment_size")
    );
    assert_eq!(rows[2]["attachments"][0]["transfer"], json!("failed"));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_22_msg_43_slack_replies_go_into_the_thread_of_the_copied_source_context() {
    let rig = rig(json!({})).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    let ts = rig
        .server
        .push_mention(CHANNEL, BOB, &format!("<@{BOT_USER_ID}> question?"));
    rig.wait_acknowledged().await;
    let inbound = &inbox(&rig.sink)[0];
    let reply = outbound(
        &text(inbound, "from"),
        "answer",
        Some(inbound["source_context"].clone()),
    );
    let delivered = host.deliver(&reply).await.unwrap();
    let posted = rig.server.posted();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0]["channel"], json!(CHANNEL));
    assert_eq!(posted[0]["text"], json!("answer"));
    assert_eq!(posted[0]["thread_ts"], json!(ts));
    assert_eq!(
        delivered.platform_message_ids,
        [posted[0]["ts"].as_str().unwrap()]
    );
    let post = &rig.server.calls_of("chat.postMessage")[0];
    assert_eq!(
        post.token, "bot",
        "the Web API is called with the bot token"
    );

    // A bare `slack:<channel>` recipient needs no address and starts no thread.
    host.deliver(&outbound(
        &format!("slack:{DM}"),
        &format!("hi <@{ANN}>, a<b"),
        None,
    ))
    .await
    .unwrap();
    let posted = rig.server.posted();
    assert_eq!(posted[1]["channel"], json!(DM));
    assert_eq!(
        posted[1]["text"],
        json!(format!("hi <@{ANN}>, a&lt;b")),
        "a mention stays, a bare < is escaped"
    );
    assert!(posted[1].get("thread_ts").is_none(), "{}", posted[1]);

    // Slack's `ok: false` is a failed delivery carrying Slack's error code.
    let error = host
        .deliver(&outbound("slack:C0NOWHERE", "lost", None))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("channel_not_found"), "{error}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_46_slack_form_goes_out_as_block_kit_and_answers_come_back_threaded() {
    let rig = rig(json!({})).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    let form = json!({
        "form_id": "lunch",
        "title": "Lunch order",
        "questions": [
            { "id": "main", "text": "Main course?", "options": ["Fish", { "id": "veg", "label": "Vegetables", "value": "v" }] },
            { "id": "day", "text": "Which day?", "options": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"] },
            { "id": "notes", "text": "Anything else?" }
        ]
    });
    let message = OutboundMessage {
        outbox_id: "out-form".into(),
        recipient: format!("slack:{DM}"),
        content: form.to_string(),
        content_type: Some(FORM_CONTENT_TYPE.into()),
        source_context: None,
    };
    let delivered = host.deliver(&message).await.unwrap();
    let posted = rig.server.posted();
    assert_eq!(posted.len(), 4, "the title, then one message per question");
    assert_eq!(delivered.platform_message_ids.len(), 4);
    assert_eq!(posted[0]["text"], json!("Lunch order"));

    let buttons = &posted[1]["blocks"][1];
    assert_eq!(buttons["type"], json!("actions"));
    let elements = buttons["elements"].as_array().unwrap();
    assert_eq!(elements.len(), 2);
    assert!(elements.iter().all(|e| e["type"] == json!("button")));
    assert_eq!(elements[1]["text"]["text"], json!("Vegetables"));
    let select = &posted[2]["blocks"][1]["elements"][0];
    assert_eq!(
        select["type"],
        json!("static_select"),
        "seven choices are a select"
    );
    assert_eq!(select["options"].as_array().unwrap().len(), 7);
    assert!(
        posted[3]["blocks"].to_string().contains("thread"),
        "a question without choices asks for a reply in its thread: {}",
        posted[3]
    );

    // A press on "Vegetables" comes back as the answer row, threaded to the form.
    let ts1 = posted[1]["ts"].as_str().unwrap();
    let veg = elements[1]["action_id"].as_str().unwrap();
    assert!(rig.server.click(ANN, ts1, veg));
    let ts2 = posted[2]["ts"].as_str().unwrap();
    let tuesday = select["options"][1]["value"].as_str().unwrap();
    assert!(rig.server.select(ANN, ts2, tuesday));
    let ts3 = posted[3]["ts"].as_str().unwrap().to_owned();
    rig.server
        .push_message_with(DM, "im", ANN, "no nuts", extra(json!({ "thread_ts": ts3 })));
    rig.wait_acknowledged().await;
    let rows = inbox(&rig.sink);
    assert_eq!(rows.len(), 3, "{rows:?}");
    let answer = &rows[0];
    assert_eq!(text(answer, "parent_id"), "out-form");
    assert_eq!(text(answer, "content"), "Vegetables");
    let context = &answer["source_context"];
    assert_eq!(context["form_id"], json!("lunch"));
    assert_eq!(context["question_id"], json!("main"));
    assert_eq!(context["answer_id"], json!("veg"));
    assert_eq!(context["answer_value"], json!("v"));
    let picked = &rows[1]["source_context"];
    assert_eq!(picked["question_id"], json!("day"));
    assert_eq!(picked["answer_value"], json!("Tue"));
    let typed = &rows[2];
    assert_eq!(text(typed, "parent_id"), "out-form");
    assert_eq!(typed["source_context"]["question_id"], json!("notes"));
    assert_eq!(typed["source_context"]["answer_value"], json!("no nuts"));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_429_waits_the_retry_after_header() {
    let rig = rig(json!({})).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    rig.server
        .fault("chat.postMessage", SlackFault::RateLimited(7));
    let message = outbound(&format!("slack:{DM}"), "after the wait", None);
    host.deliver(&message).await.unwrap();
    assert_eq!(
        rig.server.calls_of("chat.postMessage").len(),
        2,
        "refused once, then sent"
    );
    assert_eq!(rig.server.posted().len(), 1);
    assert!(
        rig.sleeper.waits().contains(&Duration::from_secs(7)),
        "waited the Retry-After: {:?}",
        rig.sleeper.waits()
    );

    // A platform that keeps refusing ends in a failed delivery with 429 as its status code.
    for _ in 0..MAX_RATE_LIMIT_ATTEMPTS {
        rig.server
            .fault("chat.postMessage", SlackFault::RateLimited(1));
    }
    let error = host.deliver(&message).await.unwrap_err();
    assert_eq!(error.status_code(), Some(429), "{error}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idn_37_slack_missing_tokens_fail_the_adapter_naming_the_purpose_and_the_fix() {
    for (bot, app, missing) in [
        (None, Some(APP_TOKEN), BOT_TOKEN_PURPOSE),
        (Some(BOT_TOKEN), None, APP_TOKEN_PURPOSE),
    ] {
        let rig = rig_with(json!({}), bot, app).await;
        let host = rig.host();
        rig.wait_state(&host, AdapterState::Failed).await;
        let error = host.status("slack").unwrap().error.unwrap();
        assert!(error.contains(missing), "{error}");
        assert!(error.contains("adf identity set"), "{error}");
        assert!(error.contains(&rig.path.display().to_string()), "{error}");
        assert!(rig.server.calls().is_empty(), "no fallback, no call");
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_a_token_the_platform_refuses_is_a_clear_error_and_no_restart() {
    for (bot, app, refused) in [
        ("xoxb-wrong-token", APP_TOKEN, BOT_TOKEN_PURPOSE),
        (BOT_TOKEN, "xapp-wrong-token", APP_TOKEN_PURPOSE),
    ] {
        let rig = rig_with(json!({}), Some(bot), Some(app)).await;
        let host = rig.host();
        rig.wait_state(&host, AdapterState::Failed).await;
        let status = host.status("slack").unwrap();
        let error = status.error.unwrap();
        assert!(error.contains(refused), "{error}");
        assert!(error.contains("invalid_auth"), "{error}");
        assert!(error.contains("adf identity set"), "{error}");
        assert!(
            !error.contains("wrong-token"),
            "no token in errors: {error}"
        );
        assert_eq!(status.restarts, 0, "a refused token is not retried");
        let checked = AdapterHost::test_credential(
            &adapters_config(&rig.sink),
            "slack",
            rig.sink.clone(),
            HostOptions::default(),
        )
        .await
        .unwrap_err();
        assert!(checked.to_string().contains(refused), "{checked}");
        host.stop().await;
    }
    let rig = rig(json!({})).await;
    let checked = AdapterHost::test_credential(
        &adapters_config(&rig.sink),
        "slack",
        rig.sink.clone(),
        HostOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(checked["bot"]["user_id"], json!(BOT_USER_ID));
    assert_eq!(rig.server.calls_of("apps.connections.open")[0].token, "app");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_48_slack_chat_info_answers_conversations_info_with_capped_members() {
    let rig = rig(json!({})).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    let info = host.chat_info("slack", CHANNEL, Some(3)).await.unwrap();
    assert_eq!(info["supported"], json!(true));
    assert_eq!(info["chat"]["id"], json!(CHANNEL));
    assert_eq!(info["chat"]["name"], json!("team"));
    assert_eq!(info["chat"]["type"], json!("channel"));
    assert_eq!(info["member_count"], json!(5));
    assert_eq!(info["members"].as_array().unwrap().len(), 3);
    assert_eq!(info["members_truncated"], json!(true));
    let dm = host.chat_info("slack", DM, None).await.unwrap();
    assert_eq!(dm["chat"]["type"], json!("im"));
    assert_eq!(dm["members_truncated"], json!(false));
    let missing = host
        .chat_info("slack", "C0NOWHERE", None)
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("channel_not_found"),
        "{missing}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_socket_and_file_urls_go_through_the_egress_policy() {
    // Addresses the policy refuses are decided by `Policy::admit` before any connection, so
    // nothing is ever sent to them.
    const METADATA: &str = "169.254.169.254";
    let rig = rig(json!({})).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    let file = json!({
        "id": "F0OUT", "name": "x.txt", "mimetype": "text/plain", "size": 3,
        "url_private": format!("http://{METADATA}/latest/meta-data/"),
    });
    rig.server.push_message_with(
        DM,
        "im",
        ANN,
        "a file elsewhere",
        extra(json!({ "subtype": "file_share", "files": [file] })),
    );
    rig.wait_acknowledged().await;
    let attachment = &inbox(&rig.sink)[0]["attachments"][0];
    assert_eq!(attachment["transfer"], json!("failed"), "{attachment}");
    assert!(
        attachment["reason"].as_str().unwrap().contains(METADATA),
        "{attachment}"
    );

    // The next Socket Mode URL points at the metadata address: refused, and not retried.
    rig.server
        .answer_socket_url(&format!("ws://{METADATA}/link/?ticket=t"));
    rig.server
        .socket_fault(SocketFault::Disconnect("refresh_requested".into()));
    rig.wait_state(&host, AdapterState::Failed).await;
    let error = host.status("slack").unwrap().error.unwrap();
    assert!(error.contains(METADATA), "{error}");
    assert_eq!(rig.server.connections(), 1);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_socket_mode_turned_off_is_a_failure_that_says_so() {
    let rig = rig(json!({})).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    rig.server
        .socket_fault(SocketFault::Disconnect("link_disabled".into()));
    rig.wait_state(&host, AdapterState::Failed).await;
    let status = host.status("slack").unwrap();
    assert!(
        status
            .error
            .as_deref()
            .unwrap()
            .contains("Socket Mode is turned off"),
        "{status:?}"
    );
    assert_eq!(status.restarts, 0);
    assert_eq!(rig.server.calls_of("apps.connections.open").len(), 1);
    host.stop().await;
}
