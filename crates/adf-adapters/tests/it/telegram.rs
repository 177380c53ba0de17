//! The Telegram adapter end to end: updates in, messages out, policy, dedup across a restart,
//! rate limits, refused and missing credentials, dropped connections, forms, chat_info.

use std::sync::Arc;
use std::time::Duration;

use adf_adapters::{
    AdapterHost, AdapterState, Backoff, HostOptions, OutboundMessage, state_root_for,
};
use adf_testkit::telegram::{TelegramFault, TelegramServer};
use serde_json::{Map, Value, json};

use crate::common::{
    FileSink, PURPOSE, RecordingSleeper, TOKEN, adapters_config, agent_file, wait_until,
};

struct Rig {
    _dir: tempfile::TempDir,
    server: TelegramServer,
    sink: Arc<FileSink>,
    sleeper: Arc<RecordingSleeper>,
    path: std::path::PathBuf,
}

async fn rig(extra: Value, token: Option<&str>) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let server = TelegramServer::start(TOKEN, "adf_test_bot").await;
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

    /// The offset the adapter persisted, if any.
    fn stored_offset(&self) -> Option<i64> {
        let path = state_root_for(&self.path)
            .join("telegram")
            .join("offset.json");
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str::<Value>(&text).ok()?["offset"].as_i64()
    }

    async fn wait_state(&self, host: &AdapterHost, state: AdapterState) {
        wait_until(&format!("the adapter is {}", state.as_str()), || {
            host.status("telegram").is_some_and(|s| s.state == state)
        })
        .await;
    }
}

fn dm(id: i64) -> Value {
    json!({ "id": id, "type": "private", "first_name": "Ann" })
}

fn user(id: i64, username: &str) -> Value {
    json!({ "id": id, "is_bot": false, "first_name": username, "username": username })
}

fn group() -> Value {
    json!({ "id": -100_777, "type": "supergroup", "title": "Team" })
}

fn text(row: &Map<String, Value>, column: &str) -> String {
    row.get(column)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_43_telegram_updates_become_inbox_rows_with_source_context_and_original_message() {
    let rig = rig(json!({ "policy": { "groups": "mention" } }), Some(TOKEN)).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    let dm_update = rig
        .server
        .push_message(dm(501), user(501, "ann"), "hello bot");
    let mut entities = Map::new();
    entities.insert(
        "entities".into(),
        json!([{ "type": "mention", "offset": 4, "length": 13 }]),
    );
    let group_update = rig.server.push_message_with(
        group(),
        user(502, "bob"),
        "hey @adf_test_bot, status?",
        entities,
    );
    wait_until("both updates are stored", || rig.sink.inbox().len() == 2).await;
    let rows = rig.sink.inbox();

    let first = &rows[0];
    assert_eq!(text(first, "source"), "telegram");
    assert_eq!(text(first, "from"), "telegram:501");
    assert_eq!(text(first, "content"), "hello bot");
    assert_eq!(text(first, "status"), "unread");
    assert_eq!(first["source_context"]["chat_id"], json!(501));
    assert!(first["source_context"]["message_id"].is_i64(), "{first:?}");
    assert_eq!(first["original_message"]["update_id"], json!(dm_update));
    assert_eq!(
        first["original_message"]["message"]["text"],
        json!("hello bot")
    );
    assert!(
        first.get("meta").is_none_or(Value::is_null),
        "a DM has no meta.group"
    );

    let second = &rows[1];
    assert_eq!(text(second, "from"), "telegram:-100777");
    assert_eq!(second["original_message"]["update_id"], json!(group_update));
    let meta_group = &second["meta"]["group"];
    assert_eq!(meta_group["platform"], json!("telegram"));
    assert_eq!(meta_group["title"], json!("Team"));
    assert_eq!(meta_group["participants"][0]["id"], json!("502"));
    assert_eq!(meta_group["participants_truncated"], json!(false));
    assert!(
        second["source_context"].get("group").is_none(),
        "meta.group is descriptive and stays out of source_context (MSG-44)"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cfg_49_telegram_policy_allowlist_and_group_mentions_apply_before_anything_is_stored() {
    let policy = json!({ "policy": { "dm": "allowlist", "groups": "mention", "allow_from": ["@alice", "42"] } });
    let rig = rig(policy, Some(TOKEN)).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    rig.server
        .push_message(dm(10), user(10, "alice"), "from alice");
    rig.server
        .push_message(dm(11), user(11, "mallory"), "from mallory");
    rig.server
        .push_message(dm(42), user(42, "noname"), "from 42");
    rig.server
        .push_message(group(), user(11, "mallory"), "group chatter");
    let last = rig
        .server
        .push_message(group(), user(11, "mallory"), "@adf_test_bot ping");
    wait_until("every update is past the offset", || {
        rig.stored_offset() == Some(last + 1)
    })
    .await;
    let contents: Vec<String> = rig
        .sink
        .inbox()
        .iter()
        .map(|r| text(r, "content"))
        .collect();
    assert_eq!(contents, ["from alice", "from 42", "@adf_test_bot ping"]);
    host.stop().await;

    // An invalid enum never starts the adapter, and says what is allowed.
    let rig = rig_with_bad_policy().await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Failed).await;
    let error = host.status("telegram").unwrap().error.unwrap();
    assert!(error.contains("all, allowlist or none"), "{error}");
    assert!(rig.server.calls().is_empty(), "nothing was called");
    host.stop().await;
}

async fn rig_with_bad_policy() -> Rig {
    rig(json!({ "policy": { "dm": "everyone" } }), Some(TOKEN)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_47_dedup_across_a_host_restart_resumes_from_the_offset_in_the_state_directory() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    rig.server.push_message(dm(1), user(1, "ann"), "one");
    let second = rig.server.push_message(dm(1), user(1, "ann"), "two");
    wait_until("two rows", || rig.sink.inbox().len() == 2).await;
    wait_until("the offset is stored", || {
        rig.stored_offset() == Some(second + 1)
    })
    .await;
    host.stop().await;
    rig.sink.close();
    let polls_before = rig.server.calls_of("getUpdates").len();

    // A new host on the reopened file, as after a daemon restart.
    let third = rig.server.push_message(dm(1), user(1, "ann"), "three");
    let sink = FileSink::open(&rig.path);
    let host = AdapterHost::start(
        &adapters_config(&sink),
        sink.clone(),
        HostOptions {
            sleeper: rig.sleeper.clone(),
            backoff: Backoff::default(),
        },
    );
    wait_until("three rows", || sink.inbox().len() == 3).await;
    wait_until("the offset moves on", || {
        rig.stored_offset() == Some(third + 1)
    })
    .await;
    let contents: Vec<String> = sink.inbox().iter().map(|r| text(r, "content")).collect();
    assert_eq!(contents, ["one", "two", "three"]);
    let resumed = &rig.server.calls_of("getUpdates")[polls_before];
    assert_eq!(
        resumed.params.get("offset"),
        Some(&json!(second + 1)),
        "the restarted adapter asks from the first update not stored"
    );
    assert!(
        state_root_for(&rig.path).join("telegram").is_dir(),
        "state lives beside the file in <agent>.adf.adapters/telegram/"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_22_msg_43_outbound_replies_go_to_the_chat_and_message_of_the_copied_source_context() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    rig.server
        .push_message(dm(555), user(555, "ann"), "question?");
    wait_until("the question is stored", || rig.sink.inbox().len() == 1).await;
    let inbound = &rig.sink.inbox()[0];

    let reply = OutboundMessage {
        outbox_id: "out-1".into(),
        recipient: text(inbound, "from"),
        content: "answer".into(),
        content_type: None,
        source_context: Some(inbound["source_context"].clone()),
    };
    let delivered = host.deliver(&reply).await.unwrap();
    assert_eq!(delivered.status_code, 200);
    let sent = rig.server.calls_of("sendMessage");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].params["chat_id"], json!(555));
    assert_eq!(sent[0].params["text"], json!("answer"));
    assert_eq!(
        sent[0].params["reply_to_message_id"],
        inbound["source_context"]["message_id"]
    );

    // A bare `telegram:<chat>` recipient needs no address and replies to nothing.
    let fresh = OutboundMessage {
        outbox_id: "out-2".into(),
        recipient: "telegram:123".into(),
        content: "x".repeat(5000),
        content_type: None,
        source_context: None,
    };
    let delivered = host.deliver(&fresh).await.unwrap();
    let sent = rig.server.calls_of("sendMessage");
    assert_eq!(
        delivered.platform_message_ids.len(),
        2,
        "5000 chars are two messages"
    );
    assert_eq!(sent[1].params["chat_id"], json!(123));
    assert!(sent[1].params.get("reply_to_message_id").is_none());
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_429_waits_the_retry_after_the_platform_asks_for() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    rig.server
        .fault("sendMessage", TelegramFault::RetryAfter(7));
    let message = OutboundMessage {
        outbox_id: "out-1".into(),
        recipient: "telegram:9".into(),
        content: "after the wait".into(),
        content_type: None,
        source_context: None,
    };
    host.deliver(&message).await.unwrap();
    assert_eq!(
        rig.server.calls_of("sendMessage").len(),
        2,
        "refused once, then sent"
    );
    assert!(
        rig.sleeper.waits().contains(&Duration::from_secs(7)),
        "waited the retry_after: {:?}",
        rig.sleeper.waits()
    );

    // A platform that keeps refusing ends in a failed delivery with 429 as its status code.
    for _ in 0..adf_adapters::telegram::MAX_RATE_LIMIT_ATTEMPTS {
        rig.server
            .fault("sendMessage", TelegramFault::RetryAfter(1));
    }
    let error = host.deliver(&message).await.unwrap_err();
    assert_eq!(error.status_code(), Some(429), "{error}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idn_37_a_missing_credential_fails_the_adapter_naming_the_purpose_and_the_fix() {
    let rig = rig(json!({}), None).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Failed).await;
    let error = host.status("telegram").unwrap().error.unwrap();
    assert!(error.contains(PURPOSE), "{error}");
    assert!(error.contains("adf identity set"), "{error}");
    assert!(error.contains(&rig.path.display().to_string()), "{error}");
    assert!(rig.server.calls().is_empty(), "no fallback, no call");
    let states: Vec<AdapterState> = rig.sink.changes().iter().map(|c| c.state).collect();
    assert_eq!(states, [AdapterState::Starting, AdapterState::Failed]);
    let delivery = host
        .deliver(&OutboundMessage {
            outbox_id: "o".into(),
            recipient: "telegram:1".into(),
            content: "hi".into(),
            content_type: None,
            source_context: None,
        })
        .await
        .unwrap_err();
    assert!(delivery.to_string().contains(PURPOSE), "{delivery}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_a_token_the_platform_refuses_is_a_clear_error_and_no_restart() {
    let rig = rig(json!({}), Some("999:wrong-token")).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Failed).await;
    let status = host.status("telegram").unwrap();
    let error = status.error.unwrap();
    assert!(error.contains("401"), "{error}");
    assert!(error.contains(PURPOSE), "{error}");
    assert!(error.contains("adf identity set"), "{error}");
    assert!(
        !error.contains("wrong-token"),
        "the token never shows: {error}"
    );
    assert_eq!(status.restarts, 0, "a refused token is not retried");
    assert_eq!(rig.server.calls_of("getMe").len(), 1);

    // `adf adapters test` says the same without starting anything.
    let tested = AdapterHost::test_credential(
        &adapters_config(&rig.sink),
        "telegram",
        rig.sink.clone(),
        HostOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(tested.to_string().contains(PURPOSE), "{tested}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_a_connection_dropped_mid_poll_loses_and_duplicates_no_update() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    rig.server
        .fault("getUpdates", TelegramFault::DropConnection);
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    let first = rig.server.push_message(dm(3), user(3, "ann"), "first");
    wait_until("the first update is stored", || rig.sink.inbox().len() == 1).await;
    let second = rig.server.push_message(dm(3), user(3, "ann"), "second");
    wait_until("the offset passes the second", || {
        rig.stored_offset() == Some(second + 1)
    })
    .await;
    let rows = rig.sink.inbox();
    let ids: Vec<Value> = rows
        .iter()
        .map(|r| r["original_message"]["update_id"].clone())
        .collect();
    assert_eq!(ids, [json!(first), json!(second)]);
    let status = host.status("telegram").unwrap();
    assert_eq!(status.restarts, 1, "the drop restarted the poller once");
    assert_eq!(
        rig.sleeper.waits().first(),
        Some(&Backoff::default().initial)
    );
    let states: Vec<AdapterState> = rig.sink.changes().iter().map(|c| c.state).collect();
    assert_eq!(
        states,
        [
            AdapterState::Starting,
            AdapterState::Running,
            AdapterState::Backoff,
            AdapterState::Starting,
            AdapterState::Running,
        ],
        "one record per change"
    );
    let drop_error = rig.sink.changes()[2].error.clone().unwrap();
    assert!(
        !drop_error.contains(TOKEN),
        "the URL's token never shows: {drop_error}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_46_a_form_goes_out_as_an_inline_keyboard_and_a_press_comes_back_threaded() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    let form = json!({
        "form_id": "lunch",
        "questions": [{ "id": "main", "text": "Main course?",
                        "options": [{ "id": "fish", "label": "Fish", "value": "F" },
                                    { "id": "veg", "label": "Vegetables", "value": "V" }] },
                      { "id": "notes", "text": "Anything else?" }]
    });
    let message = OutboundMessage {
        outbox_id: "out-form".into(),
        recipient: "telegram:77".into(),
        content: form.to_string(),
        content_type: Some(adf_adapters::FORM_CONTENT_TYPE.into()),
        source_context: None,
    };
    let delivered = host.deliver(&message).await.unwrap();
    let sent = rig.server.calls_of("sendMessage");
    let keyboard = &sent[0].params["reply_markup"]["inline_keyboard"];
    assert_eq!(keyboard[1][0]["text"], json!("Vegetables"));
    let data = keyboard[1][0]["callback_data"].as_str().unwrap().to_owned();
    assert!(
        data.len() <= 64,
        "callback_data fits the Bot API's 64 bytes"
    );

    let bot_message: i64 = delivered.platform_message_ids[0].parse().unwrap();
    rig.server
        .push_callback_query(dm(77), user(77, "ann"), bot_message, &data);
    wait_until("the answer is stored", || rig.sink.inbox().len() == 1).await;
    let answer = &rig.sink.inbox()[0];
    assert_eq!(text(answer, "parent_id"), "out-form");
    let context = &answer["source_context"];
    assert_eq!(context["form_id"], json!("lunch"));
    assert_eq!(context["question_id"], json!("main"));
    assert_eq!(context["answer_id"], json!("veg"));
    assert_eq!(context["answer_value"], json!("V"));
    wait_until("the button press is acknowledged", || {
        !rig.server.calls_of("answerCallbackQuery").is_empty()
    })
    .await;

    // The question without choices is answered by replying to its message.
    assert!(sent[1].params.get("reply_markup").is_none());
    let question_message: i64 = delivered.platform_message_ids[1].parse().unwrap();
    let mut reply = Map::new();
    reply.insert(
        "reply_to_message".into(),
        json!({ "message_id": question_message, "from": rig.server.bot() }),
    );
    rig.server
        .push_message_with(dm(77), user(77, "ann"), "no nuts", reply);
    wait_until("the typed answer is stored", || rig.sink.inbox().len() == 2).await;
    let typed = &rig.sink.inbox()[1];
    assert_eq!(text(typed, "parent_id"), "out-form");
    assert_eq!(typed["source_context"]["question_id"], json!("notes"));
    assert_eq!(typed["source_context"]["answer_value"], json!("no nuts"));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_48_chat_info_answers_metadata_or_supported_false() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    rig.server
        .push_message(group(), user(5, "ann"), "@adf_test_bot hi");
    wait_until("the group is known", || rig.sink.inbox().len() == 1).await;
    let info = host.chat_info("telegram", "-100777", None).await.unwrap();
    assert_eq!(info["supported"], json!(true));
    assert_eq!(info["chat"]["title"], json!("Team"));
    assert!(info["member_count"].is_u64(), "{info}");
    assert_eq!(info["chat_type"], json!("supergroup"), "{info}");
    assert_eq!(info["participants_scope"], json!("admins"), "{info}");
    let names: Vec<&Value> = info["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["name"])
        .collect();
    assert!(names.contains(&&json!("ann")), "the creator: {info}");
    let one = host
        .chat_info("telegram", "-100777", Some(1))
        .await
        .unwrap();
    assert_eq!(
        one["participants"].as_array().map(Vec::len),
        Some(1),
        "{one}"
    );
    assert_eq!(one["participants_truncated"], json!(true), "{one}");
    let slack = host.chat_info("slack", "C1", None).await.unwrap();
    assert_eq!(slack["supported"], json!(false));
    assert!(
        slack["reason"].as_str().unwrap().contains("slack"),
        "{slack}"
    );
    assert!(
        host.chat_info("telegram", "-100777", Some(0))
            .await
            .is_err()
    );
    assert!(
        host.chat_info("telegram", "-100777", Some(101))
            .await
            .is_err()
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_04_stopping_the_host_ends_the_long_poll_and_records_stopped() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    wait_until("a long poll is in flight", || {
        !rig.server.calls_of("getUpdates").is_empty()
    })
    .await;
    tokio::time::timeout(Duration::from_secs(5), host.stop())
        .await
        .expect("stop does not wait for the long poll to time out");
    let polls = rig.server.calls_of("getUpdates").len();
    assert_eq!(
        rig.sink.changes().last().map(|c| c.state),
        Some(AdapterState::Stopped)
    );
    rig.server.push_message(dm(1), user(1, "ann"), "after stop");
    assert_eq!(
        rig.server.calls_of("getUpdates").len(),
        polls,
        "no poll after stop"
    );
    assert!(rig.sink.inbox().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_42_telegram_attachments_are_imported_and_ones_over_the_limit_skipped() {
    let rig = rig(
        json!({ "limits": { "max_attachment_size": 1000 } }),
        Some(TOKEN),
    )
    .await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    let small = vec![7u8; 999];
    rig.server.add_file("small", &small);
    rig.server.add_file("big", &[8u8; 1001]);
    // `lies` announces a small size and serves a larger file: the limit holds anyway.
    rig.server.add_file("lies", &[9u8; 5000]);
    for (id, name, size) in [
        ("small", "small notes.txt", 999),
        ("big", "big.pdf", 1001),
        ("lies", "x.bin", 10),
    ] {
        let mut extra = Map::new();
        extra.insert(
            "document".into(),
            json!({ "file_id": id, "file_name": name, "file_size": size, "mime_type": "text/plain" }),
        );
        rig.server
            .push_message_with(dm(8), user(8, "ann"), "", extra);
    }
    wait_until("all three are stored", || rig.sink.inbox().len() == 3).await;
    let rows = rig.sink.inbox();
    let imported = &rows[0]["attachments"][0];
    assert_eq!(imported["transfer"], json!("imported"), "{imported}");
    let path = imported["path"].as_str().unwrap().to_owned();
    assert!(path.starts_with("imported/telegram/"), "{path}");
    let stored = rig
        .sink
        .with_file(|file| file.file_read(&path).unwrap().unwrap());
    assert_eq!(stored.content, small);
    assert_eq!(rows[1]["attachments"][0]["transfer"], json!("skipped"));
    assert_eq!(rows[1]["attachments"][0]["filename"], json!("big.pdf"));
    assert_eq!(rows[2]["attachments"][0]["transfer"], json!("failed"));
    assert!(
        rig.server.calls_of("file").len() == 2,
        "the skipped file is never downloaded: {:?}",
        rig.server.calls_of("file")
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn por_03_por_04_a_copied_file_carries_its_credential_but_not_its_adapter_state() {
    let rig = rig(json!({}), Some(TOKEN)).await;
    let host = rig.host();
    rig.wait_state(&host, AdapterState::Running).await;
    let update = rig
        .server
        .push_message(dm(4), user(4, "ann"), "before the copy");
    wait_until("the offset is stored", || {
        rig.stored_offset() == Some(update + 1)
    })
    .await;
    host.stop().await;
    rig.sink.close();

    // Copy the file alone, as a transfer to another machine would.
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = elsewhere.path().join("bot.adf");
    std::fs::copy(&rig.path, &copy).unwrap();
    // Checked before the copy's host runs: once it polls, it keeps state of its own.
    assert!(!state_root_for(&copy).exists());
    let sink = FileSink::open(&copy);
    let polls_before = rig.server.calls_of("getUpdates").len();
    let host = AdapterHost::start(
        &adapters_config(&sink),
        sink.clone(),
        HostOptions {
            sleeper: rig.sleeper.clone(),
            backoff: Backoff::default(),
        },
    );
    wait_until(
        "the copy's adapter runs with the credential it carries",
        || {
            host.status("telegram")
                .is_some_and(|s| s.state == AdapterState::Running)
        },
    )
    .await;
    wait_until("the copy polls", || {
        rig.server.calls_of("getUpdates").len() > polls_before
    })
    .await;
    let first_poll = &rig.server.calls_of("getUpdates")[polls_before];
    assert!(
        first_poll.params.get("offset").is_none(),
        "the state directory stayed behind, so the copy starts without an offset: {:?}",
        first_poll.params
    );
    host.stop().await;
}
