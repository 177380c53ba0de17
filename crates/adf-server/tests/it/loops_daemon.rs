//! States and loops in the daemon (spec §6.1, §6.4, §7.7): trigger targets and agent-scope
//! timers wake the loop they name, `off` stops a trigger still waiting in a debounce window,
//! and an `off` agent's file stays readable by the owner. Turns run against the testkit's
//! OpenAI-compatible mock.
use crate::common;

use std::sync::Arc;

use adf_server::Agent;
use adf_testkit::{MockProvider, Turn, Wire};
use common::{
    Harness, agent_file, drained, has_text, loop_texts_in, model_config, paths, set_state, wait_for,
};
use reqwest::Method;
use serde_json::{Value, json};

fn triage_loop() -> (&'static str, Value) {
    (
        "loops",
        json!([{ "name": "triage", "goal": "Sort incoming work.", "enabled": true, "autostart": false, "tools": [] }]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_33_an_inbox_trigger_wakes_main_and_the_loop_its_target_names() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.repeat(Turn::text("Seen."));
    let h = Harness::start().await;
    let mut config = model_config(&mock);
    config.push(triage_loop());
    config.push((
        "triggers",
        json!({ "on_inbox": { "enabled": true, "targets": [
            { "scope": "agent" },
            { "scope": "agent", "loop": "triage" }
        ] } }),
    ));
    let path = agent_file(h.dir.path(), "mailroom", &[], &config);
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    {
        // Another process adds the message; the daemon notices it on the agent's next job.
        let other = adf_store::test_support::OtherConnection::open(&path).unwrap();
        let message = [
            ("id", json!("in-1")),
            ("message_id", json!("alf-1")),
            ("from", json!("did:key:zPeer")),
            ("content", json!("hello")),
            ("source", json!("mesh")),
            ("received_at", json!(1)),
        ];
        other.tables().insert_row("adf_inbox", &message).unwrap();
    }
    h.server.daemon.notice_new_rows(&agent).await;
    wait_for("both loops woken", || async {
        has_text(&agent, "main", "[Trigger: on_inbox]").await
            && has_text(&agent, "triage", "[Trigger: on_inbox]").await
    })
    .await;
    drained(&agent).await;
    // One turn each: the targeted loop got its own trigger row, main its own.
    assert_eq!(mock.request_count(), 2);
    for name in ["main", "triage"] {
        let texts = loop_texts_in(&agent, name).await;
        assert_eq!(
            texts
                .iter()
                .filter(|t| t.contains("[Trigger: on_inbox]"))
                .count(),
            1,
            "{name}: {texts:?}"
        );
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_34_an_agent_scope_timer_wakes_the_loop_in_its_loop_column() {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.repeat(Turn::text("Tick handled."));
    let h = Harness::start().await;
    let mut config = model_config(&mock);
    config.push(triage_loop());
    config.push((
        "triggers",
        json!({ "on_timer": { "enabled": true, "targets": [{ "scope": "agent" }] } }),
    ));
    let path = agent_file(h.dir.path(), "clock", &[], &config);
    {
        // Both already due, so they fire when the agent loads: one set by triage, one by main
        // (NULL loop).
        let mut file = adf_store::AdfFile::open(&path).unwrap();
        let due = adf_store::time::now_ms() - 1_000;
        for (payload, owner) in [("triage tick", Some("triage")), ("main tick", None)] {
            file.timer_insert(&adf_store::timers::NewTimer {
                schedule: &json!({ "mode": "once", "at": due }),
                next_wake_at: due,
                payload: Some(payload),
                scope: &json!(["agent"]),
                lambda: None,
                warm: false,
                locked: false,
                r#loop: owner,
            })
            .unwrap();
        }
        file.close().unwrap();
    }
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    wait_for("both timers delivered", || async {
        has_text(&agent, "triage", "triage tick").await
            && has_text(&agent, "main", "main tick").await
    })
    .await;
    assert!(!has_text(&agent, "main", "triage tick").await);
    assert!(!has_text(&agent, "triage", "main tick").await);
    h.stop().await;
}

/// Records each delivery as a file, so a delivery that should never happen would show.
const SEEN: &str = r#"
export async function main(event) {
  await adf.fs_write({ path: `seen/${event.data.path.replaceAll('/', '_')}`, content: 'x', mode: 'write' });
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_03_off_stops_a_trigger_waiting_in_a_debounce_window() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "debounced",
        &[("lib/seen.ts", SEEN)],
        &[(
            "triggers",
            json!({ "on_file_change": { "enabled": true, "targets": [
                // Long enough that the owner's `off` lands while the event is still held.
                { "scope": "system", "lambda": "lib/seen.ts:main", "filter": { "watch": "docs/**" }, "debounce_ms": 3000 }
            ] } }),
        )],
    );
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    let put = |p: &'static str| {
        let h = &h;
        let id = agent.id.clone();
        async move {
            h.client
                .call(
                    Method::PUT,
                    &format!("/agents/{id}/files/content?path={}", p.replace('/', "%2F")),
                    Some(&json!({ "content": "1" })),
                )
                .await
                .unwrap();
        }
    };
    put("docs/held.md").await;
    set_state(&h, &agent, "off").await;
    // The window flushes into the queue after its debounce; the delivery is counted whether or
    // not it ran its handler.
    wait_for("the held event flushed", || async {
        agent.triggers().stats().delivered >= 1
    })
    .await;
    drained(&agent).await;
    assert!(
        paths(&agent, "seen/").await.is_empty(),
        "a trigger queued before off ran after it"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stl_05_an_off_agent_stays_readable_by_the_owner() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "sleeper",
        &[("docs/notes.md", "still here")],
        &[("state", json!("off"))],
    );
    let agent: Arc<Agent> = h.server.daemon.load(&path).await.unwrap().agent;
    let config = h
        .client
        .get(&format!("/agents/{}/config", agent.id))
        .await
        .unwrap();
    assert_eq!(config["config"]["state"], "off");
    let file = h
        .client
        .get(&format!(
            "/agents/{}/files/content?path=docs%2Fnotes.md",
            agent.id
        ))
        .await
        .unwrap();
    assert!(file.to_string().contains("still here"), "{file}");
    let listed = h
        .client
        .get(&format!("/agents/{}/files", agent.id))
        .await
        .unwrap();
    assert!(listed.to_string().contains("docs/notes.md"), "{listed}");
    h.stop().await;
}
