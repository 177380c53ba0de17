//! The daemon over real HTTP on 127.0.0.1: loading, lookup, lifecycle, events, tasks, auth,
//! shutdown. Fixtures are copies of the reference's golden files.

use crate::common;

use std::time::Duration;

use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use adf_server::client::Client;
use common::Harness;

const ID: &str = "NmwsgR5N7k59";

async fn load(h: &Harness, path: &std::path::Path) -> (u16, Value) {
    h.client
        .raw(
            Method::POST,
            "/agents/load",
            Some(&json!({ "filePath": path })),
        )
        .await
        .unwrap()
}

/// Collects the `data` JSON of every SSE frame of `path` into a channel.
async fn subscribe(client: &Client, path: &str) -> mpsc::UnboundedReceiver<Value> {
    let mut stream = Box::pin(client.events(path).await.unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(data)) = stream.next().await {
            if let Ok(value) = serde_json::from_str::<Value>(&data) {
                let _ = tx.send(value);
            }
        }
    });
    rx
}

/// The next frame whose event type is `kind` (earlier frames are dropped).
async fn next_of(rx: &mut mpsc::UnboundedReceiver<Value>, kind: &str) -> Value {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let frame = rx.recv().await.expect("stream ended");
            if frame["event"]["event_type"] == kind {
                return frame;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {kind} event"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_is_idempotent_by_canonical_path_and_a_missing_path_creates_nothing() {
    let h = Harness::start().await;
    let path = h.copy_fixture("populated-runtime.adf", "e2e.adf");
    let (status, first) = load(&h, &path).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["id"], ID);
    // Another spelling of the same file, and a symlink to it: the same agent, not a second.
    let dotted = h.dir.path().join("agents/../agents/./e2e.adf");
    let link = h.dir.path().join("agents/link.adf");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    for other in [&dotted, &link] {
        let (status, again) = load(&h, other).await;
        assert_eq!(status, 200);
        assert_eq!(again["filePath"], first["filePath"]);
    }
    let list = h.client.get("/agents").await.unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);

    let missing = h.dir.path().join("agents/missing.adf");
    let (status, body) = load(&h, &missing).await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("no such file"));
    assert!(
        !missing.exists(),
        "loading a missing path must create nothing"
    );

    let (status, body) = h
        .client
        .raw(Method::POST, "/agents/load", Some(&json!({})))
        .await
        .unwrap();
    assert_eq!(
        (status, body),
        (400, json!({ "error": "filePath is required" }))
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_file_with_the_same_agent_id_is_a_conflict() {
    let h = Harness::start().await;
    let a = h.copy_fixture("populated-runtime.adf", "a.adf");
    let b = h.copy_fixture("populated-runtime.adf", "b.adf");
    assert_eq!(load(&h, &a).await.0, 200);
    let (status, body) = load(&h, &b).await;
    assert_eq!(status, 409, "{body}");
    let dir = h.stop().await;
    // The refused file was closed again, cleanly.
    assert!(common::sidecars(&dir.path().join("agents/b.adf")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_are_found_by_id_handle_or_name_and_stop_start_reload() {
    let h = Harness::start().await;
    let path = h.copy_fixture("populated-runtime.adf", "e2e.adf");
    load(&h, &path).await;
    for key in [ID, "golden-populated", "Golden%20Populated"] {
        let status = h
            .client
            .get(&format!("/agents/{key}/status"))
            .await
            .unwrap();
        assert_eq!(status["id"], ID);
        assert_eq!(status["loopCount"], 7);
        assert_eq!(status["runtimeState"], "idle");
    }
    let err = h.client.get("/agents/nope/status").await.unwrap_err();
    assert_eq!(err.to_string(), "Unknown agent \"nope\"");

    let stopped = h
        .client
        .post("/agents/golden-populated/stop", None)
        .await
        .unwrap();
    assert_eq!(stopped["success"], true);
    assert!(common::sidecars(&path).is_empty(), "stop closes the file");
    assert_eq!(h.client.get("/agents").await.unwrap(), json!([]));
    // `start` loads an agent stopped in this process again.
    let started = h
        .client
        .post(&format!("/agents/{ID}/start"), None)
        .await
        .unwrap();
    assert_eq!(started["loaded"], true);
    assert_eq!(started["agent"]["id"], ID);
    let again = h
        .client
        .post(&format!("/agents/{ID}/start"), None)
        .await
        .unwrap();
    assert_eq!(again["loaded"], false);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_carry_cursor_and_persisted_seq_replay_since_and_hold_no_secrets() {
    let h = Harness::start().await;
    let path = h.copy_fixture("populated-runtime.adf", "e2e.adf");
    let mut all = subscribe(&h.client, "/events").await;
    let started = next_of(&mut all, "daemon.started").await;
    assert_eq!(started["event"]["seq"], 0);
    assert_eq!(started["event"]["agent_id"], Value::Null);

    load(&h, &path).await;
    let loaded = next_of(&mut all, "agent.loaded").await;
    assert_eq!(loaded["event"]["agent_id"], ID);
    assert_eq!(loaded["event"]["source"], "system:lifecycle");
    assert_eq!(loaded["event"]["payload"]["handle"], "golden-populated");
    let first_seq = loaded["event"]["seq"].as_u64().unwrap();
    assert!(
        first_seq > 1_000_000_000_000_000,
        "seq starts at now_ms*1000"
    );

    // A file with a secret-looking body, a config change and a state move.
    let secret = "sk-THIS-MUST-NOT-LEAK-42";
    h.client
        .call(
            Method::PUT,
            &format!("/agents/{ID}/files/content?path=notes%2Fkey.md"),
            Some(&json!({ "content": secret })),
        )
        .await
        .unwrap();
    let written = next_of(&mut all, "file.written").await;
    assert_eq!(
        written["event"]["payload"],
        json!({ "path": "notes/key.md", "bytes": secret.len() })
    );
    let mut config = h.client.get(&format!("/agents/{ID}/config")).await.unwrap()["config"].clone();
    config["description"] = json!(format!("described with {secret}"));
    h.client
        .call(Method::PUT, &format!("/agents/{ID}/config"), Some(&config))
        .await
        .unwrap();
    let changed = next_of(&mut all, "config.changed").await;
    assert_eq!(
        changed["event"]["payload"]["changed_keys"],
        json!(["description"])
    );
    h.client
        .post(
            &format!("/agents/{ID}/state"),
            Some(&json!({ "state": "hibernate" })),
        )
        .await
        .unwrap();
    let state = next_of(&mut all, "agent.state.changed").await;
    assert_eq!(state["event"]["payload"]["state"], "hibernate");
    let last_seq = state["event"]["seq"].as_u64().unwrap();
    // The fixture's overdue timers fire on load, so other events of this agent interleave:
    // count every frame of the agent up to the state change.
    let agent_frames = h
        .server
        .daemon
        .events()
        .since(loaded["cursor"].as_u64().unwrap())
        .iter()
        .map(|f| serde_json::to_value(&**f).unwrap())
        .filter(|f| {
            f["event"]["agent_id"] == ID && f["cursor"].as_u64() <= state["cursor"].as_u64()
        })
        .count() as u64;
    assert!(agent_frames >= 3);
    assert_eq!(
        last_seq,
        first_seq + agent_frames,
        "seq is per agent and gapless within a block"
    );
    assert!(state["cursor"].as_u64() > written["cursor"].as_u64());

    // `since` replays only later frames; an agent filter by handle keeps only its events.
    let mut later = subscribe(&h.client, &format!("/events?since={}", written["cursor"])).await;
    let replayed = next_of(&mut later, "config.changed").await;
    assert_eq!(replayed["cursor"], changed["cursor"]);
    let mut agent_only = subscribe(&h.client, "/events?agentId=golden-populated").await;
    let frame = tokio::time::timeout(Duration::from_secs(10), agent_only.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        frame["event"]["event_type"], "agent.loaded",
        "daemon.started is filtered out"
    );

    // Nothing in the ring carries the secret.
    let frames: Vec<_> = h.server.daemon.events().since(0);
    let text: String = frames
        .iter()
        .map(|f| serde_json::to_string(&**f).unwrap())
        .collect();
    assert!(!text.contains(secret), "{text}");

    let (status, body) = h
        .client
        .raw(Method::GET, "/events?since=abc", None)
        .await
        .unwrap();
    assert_eq!(
        (status, body),
        (400, json!({ "error": "since must be an integer" }))
    );

    // After a restart the agent's seq continues above every number issued before.
    let dir = h.stop().await;
    let h = Harness::start_in(dir, None).await;
    let mut all = subscribe(&h.client, "/events").await;
    load(&h, &path).await;
    let reloaded = next_of(&mut all, "agent.loaded").await;
    assert!(reloaded["event"]["seq"].as_u64().unwrap() > last_seq);
    let meta = h.client.get(&format!("/agents/{ID}/meta")).await.unwrap();
    let persisted = meta["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == "runtime_umbilical_next_seq")
        .unwrap()["value"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert!(persisted > reloaded["event"]["seq"].as_u64().unwrap());
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aud_14_owner_approves_a_task_requiring_authorization_over_http() {
    let h = Harness::start().await;
    let path = h.copy_fixture("populated-runtime.adf", "e2e.adf");
    load(&h, &path).await;
    let mut events = subscribe(&h.client, "/events").await;
    let task = h
        .client
        .get(&format!("/agents/{ID}/tasks/task_golden_1"))
        .await
        .unwrap();
    assert_eq!(task["task"]["requires_authorization"], true);
    assert_eq!(task["task"]["status"], "pending");
    let resolved = h
        .client
        .post(
            &format!("/agents/{ID}/tasks/task_golden_1/resolve"),
            Some(&json!({ "action": "approve" })),
        )
        .await
        .unwrap();
    assert_eq!(resolved["taskId"], "task_golden_1");
    assert_eq!(resolved["task"]["status"], "running");
    let hil = next_of(&mut events, "hil.resolved").await;
    assert_eq!(hil["event"]["payload"]["approved"], true);

    // A completed task cannot be resolved: 409 with the reference's message.
    let err = h
        .client
        .post(
            &format!("/agents/{ID}/tasks/task_golden_2/resolve"),
            Some(&json!({ "action": "deny", "reason": "nope" })),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Task \"task_golden_2\" is in status \"completed\" - can only resolve pending or pending_approval tasks"
    );
    let (status, _) = h
        .client
        .raw(
            Method::POST,
            &format!("/agents/{ID}/tasks/nope/resolve"),
            Some(&json!({ "action": "approve" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 404);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aud_13_a_denied_task_is_terminal_with_completed_at_and_reason() {
    let h = Harness::start().await;
    let path = h.copy_fixture("populated-runtime.adf", "e2e.adf");
    load(&h, &path).await;
    let resolved = h
        .client
        .post(
            &format!("/agents/{ID}/tasks/task_golden_1/resolve"),
            Some(&json!({ "action": "deny", "reason": "not today" })),
        )
        .await
        .unwrap();
    let task = &resolved["task"];
    assert_eq!(task["status"], "denied");
    assert_eq!(task["error"], "not today");
    assert!(task["completed_at"].is_number(), "{task}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_operations_answer_without_a_turn_chat_needs_a_model_and_trigger_dispatches() {
    let h = Harness::start().await;
    let path = h.copy_fixture("populated-runtime.adf", "e2e.adf");
    load(&h, &path).await;
    // The fixture's missed `once` timer (agent scope) fires on load, a turn in the background;
    // its `timer.fired` is published once that job is over, so wait for it before asserting
    // that no turn is in flight (otherwise abort may find that turn).
    let mut published = h.server.daemon.events().watch();
    let fired = || {
        h.server
            .daemon
            .events()
            .since(0)
            .iter()
            .any(|f| f.event.event_type == "timer.fired" && f.event.payload["timer_id"] == 1)
    };
    // Checked again on every publish; the timeout only turns a hang into a failure.
    tokio::time::timeout(Duration::from_secs(30), async {
        while !fired() {
            published.changed().await.unwrap();
        }
    })
    .await
    .expect("the missed timer never fired");
    // With no turn in flight: abort has nothing to abort, no ask is pending, the agent is
    // not suspended (tests/hil.rs drives each with a running turn).
    for (route, body, status, expected) in [
        (
            "abort",
            None,
            200,
            json!({ "agentId": ID, "success": true, "aborted": false }),
        ),
        (
            "asks/r1/respond",
            Some(json!({ "answer": "yes" })),
            404,
            json!({ "error": "Unknown ask request \"r1\"" }),
        ),
        (
            "suspend/respond",
            Some(json!({ "resume": true })),
            200,
            json!({ "agentId": ID, "resume": true, "resolved": false }),
        ),
    ] {
        let (got, answer) = h
            .client
            .raw(
                Method::POST,
                &format!("/agents/{ID}/{route}"),
                body.as_ref(),
            )
            .await
            .unwrap();
        assert_eq!(got, status, "{route}: {answer}");
        assert_eq!(answer, expected, "{route}");
    }
    // Chat needs a model: the fixture has no provider, so 503 with the reason, not a 202.
    let (status, body) = h
        .client
        .raw(
            Method::POST,
            &format!("/agents/{ID}/chat"),
            Some(&json!({ "text": "hi" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("no model is reachable")
    );
    // A trigger is dispatched to the agent's targets.
    let (status, body) = h
        .client
        .raw(
            Method::POST,
            &format!("/agents/{ID}/trigger"),
            Some(&json!({ "type": "startup" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 202, "{body}");
    assert!(body["turnId"].as_str().unwrap().starts_with("trigger_"));
    // Nothing is pending.
    let asks = h.client.get(&format!("/agents/{ID}/asks")).await.unwrap();
    assert_eq!(asks, json!({ "agentId": ID, "asks": [] }));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_guards_every_path_but_health() {
    let h = Harness::start_with_token(Some("s3cret-token")).await;
    let anonymous = Client::new(&h.server.url(), None).unwrap();
    assert_eq!(
        anonymous.get("/health").await.unwrap(),
        json!({ "ok": true })
    );
    let (status, body) = anonymous.raw(Method::GET, "/agents", None).await.unwrap();
    assert_eq!(status, 401);
    assert_eq!(body["error"], "unauthorized");
    let wrong = Client::new(&h.server.url(), Some("s3cret-tokeX".into())).unwrap();
    assert_eq!(
        wrong.raw(Method::GET, "/agents", None).await.unwrap().0,
        401
    );
    assert_eq!(h.client.get("/agents").await.unwrap(), json!([]));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_writes_files_meta_timers_and_settings_and_shutdown_closes_cleanly() {
    let h = Harness::start().await;
    let path = h.copy_fixture("populated-runtime.adf", "e2e.adf");
    load(&h, &path).await;
    let base = format!("/agents/{ID}");
    // Binary round trip.
    h.client
        .call(
            Method::PUT,
            &format!("{base}/files/content?path=bin%2Fx.bin"),
            Some(&json!({ "content_base64": "AAECAw==", "mime_type": "application/octet-stream" })),
        )
        .await
        .unwrap();
    let file = h
        .client
        .get(&format!("{base}/files/content?path=bin%2Fx.bin"))
        .await
        .unwrap();
    assert_eq!(file["encoding"], "base64");
    assert_eq!(file["content_base64"], "AAECAw==");
    let text = h
        .client
        .get(&format!("{base}/files/content?path=docs%2Fplan.md"))
        .await
        .unwrap();
    assert_eq!(text["content"], "# Plan\n- step 1\n- step 2\n");
    // Timers: add an interval, list it, delete it; a locked timer is the owner's to delete.
    let added = h
        .client
        .post(
            &format!("{base}/timers"),
            Some(&json!({ "mode": "interval", "every_ms": 60000, "payload": "tick" })),
        )
        .await
        .unwrap();
    let timer_id = added["id"].as_i64().unwrap();
    let timers = h.client.get(&format!("{base}/timers")).await.unwrap();
    assert!(
        timers["timers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == timer_id)
    );
    for id in [timer_id, 3] {
        h.client
            .call(Method::DELETE, &format!("{base}/timers/{id}"), None)
            .await
            .unwrap();
    }
    let (status, _) = h
        .client
        .raw(Method::DELETE, &format!("{base}/timers/999"), None)
        .await
        .unwrap();
    assert_eq!(status, 404);
    // Settings live in $ADF_HOME/settings.json.
    let patched = h
        .client
        .call(
            Method::PATCH,
            "/settings",
            Some(&json!({ "meshPort": 7295 })),
        )
        .await
        .unwrap();
    assert_eq!(patched["settings"]["meshPort"], 7295);
    let one = h.client.get("/settings/meshPort").await.unwrap();
    assert_eq!(one, json!({ "key": "meshPort", "value": 7295 }));
    assert!(h.dir.path().join("home/settings.json").is_file());
    // Our own OpenAPI document lists what we serve.
    let doc = h.client.get("/openapi.json").await.unwrap();
    assert!(doc["paths"]["/agents/{id}/tasks/{taskId}/resolve"]["post"].is_object());

    let dir = h.stop().await;
    let path = dir.path().join("agents/e2e.adf");
    assert!(
        common::sidecars(&path).is_empty(),
        "no -wal/-shm after shutdown"
    );
    let file = adf_store::AdfFile::inspect(&path).unwrap();
    assert!(file.meta_get("adf_clean_close").unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_02_start_in_state_is_entered_on_load_but_never_overrides_off() {
    let h = Harness::start().await;
    let starts_idle = common::agent_file(
        h.dir.path(),
        "starts-idle",
        &[],
        &[("start_in_state", json!("idle"))],
    );
    let stays_off = common::agent_file(
        h.dir.path(),
        "stays-off",
        &[],
        &[("start_in_state", json!("active")), ("state", json!("off"))],
    );
    let plain = common::agent_file(h.dir.path(), "plain", &[], &[]);
    let state_of = |path: std::path::PathBuf| {
        let daemon = h.server.daemon.clone();
        async move {
            let agent = daemon.load(&path).await.unwrap().agent;
            agent
                .store()
                .run(|file| file.config())
                .await
                .unwrap()
                .get("state")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("active")
                .to_owned()
        }
    };
    assert_eq!(state_of(starts_idle).await, "idle");
    assert_eq!(state_of(stays_off).await, "off");
    assert_eq!(state_of(plain).await, "active", "absent: the stored state");
    h.stop().await;
}
