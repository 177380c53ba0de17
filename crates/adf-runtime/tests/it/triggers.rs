//! Trigger targets, filters, self-trigger rules, timing windows, state gating, trigger messages
//! and timer firing (spec §7), with the clock passed in.
use crate::common;

use adf_runtime::triggers::filter::accepts;
use adf_runtime::triggers::fire::{fire, is_due, next_wake};
use adf_runtime::triggers::gating::allows;
use adf_runtime::triggers::message::format;
use adf_runtime::triggers::timing::{MAX_PENDING, Window};
use adf_runtime::triggers::{Producer, Scope, Target, Timing, TriggerEvent, TriggerKind, targets};
use serde_json::{Value, json};

fn target(kind: &str, raw: Value) -> Target {
    let config = json!({ "triggers": { kind: { "enabled": true, "targets": [raw] } } });
    let (mut found, problems) = targets(&config);
    assert!(problems.is_empty(), "{problems:?}");
    found.remove(0)
}

fn problem(kind: &str, raw: Value) -> String {
    let config = json!({ "triggers": { kind: { "enabled": true, "targets": [raw] } } });
    let (found, problems) = targets(&config);
    assert!(found.is_empty(), "accepted {found:?}");
    problems[0].message.clone()
}

fn event(kind: TriggerKind, at: i64, data: Value) -> TriggerEvent {
    TriggerEvent::new(kind, at, data)
}

#[test]
fn trg_01_the_default_triggers_parse_and_every_type_is_known() {
    let (_dir, _path, file) = common::new_agent();
    let (found, problems) = targets(&file.config().unwrap());
    assert!(problems.is_empty(), "{problems:?}");
    let kinds: Vec<&str> = found.iter().map(|t| t.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "on_inbox",
            "on_file_change",
            "on_chat",
            "on_timer",
            "on_timer",
            "on_task_complete"
        ]
    );
    assert_eq!(TriggerKind::ALL.len(), 11);
    for kind in TriggerKind::ALL {
        assert_eq!(TriggerKind::parse(kind.as_str()), Some(kind));
    }
    let file_change = &found[1];
    assert_eq!(file_change.timing, Timing::Debounce { ms: 2000 });
}

#[test]
fn trg_06_trg_16_target_validation() {
    assert!(problem("on_file_change", json!({ "scope": "agent" })).contains("watch"));
    assert!(
        problem(
            "on_tool_call",
            json!({ "scope": "system", "lambda": "lib/a.ts" })
        )
        .contains("tools")
    );
    assert!(
        problem(
            "on_chat",
            json!({ "scope": "agent", "debounce_ms": 5, "interval_ms": 5 })
        )
        .contains("at most one")
    );
    assert!(problem("on_chat", json!({ "scope": "agent", "batch_count": 3 })).contains("batch_ms"));
    assert!(problem("on_chat", json!({ "scope": "agent", "debounce_ms": 0 })).contains("positive"));
    assert!(
        problem(
            "on_inbox",
            json!({ "scope": "agent", "filter": { "path": "x" } })
        )
        .contains("not a filter")
    );
    assert!(
        problem("on_chat", json!({ "scope": "agent", "lambda": "lib/a.ts" })).contains("system")
    );
    assert!(problem("on_chat", json!({ "scope": "nobody" })).contains("scope"));
    let batch = target(
        "on_logs",
        json!({ "scope": "system", "lambda": "lib/l.ts", "batch_ms": 100, "batch_count": 3 }),
    );
    assert_eq!(
        batch.timing,
        Timing::Batch {
            ms: 100,
            count: Some(3)
        }
    );
    let routed = target("on_chat", json!({ "scope": "agent", "loop": "research" }));
    assert_eq!(routed.loop_name, "research");
}

#[test]
fn trg_15_filters_per_trigger() {
    let inbox = (
        "on_inbox",
        json!({ "scope": "agent", "filter": { "source": ["telegram", "mesh"], "sender": "did:key:z6MkA" } }),
    );
    let outbox = (
        "on_outbox",
        json!({ "scope": "agent", "filter": { "to": "did:key:z6MkC" } }),
    );
    let tools = (
        "on_tool_call",
        json!({ "scope": "system", "lambda": "lib/t.ts", "filter": { "tools": ["fs_*"] } }),
    );
    let done = (
        "on_task_complete",
        json!({ "scope": "agent", "filter": { "status": ["failed"] } }),
    );
    let logs = (
        "on_logs",
        json!({ "scope": "system", "lambda": "lib/l.ts", "filter": { "level": ["error"], "origin": ["mcp*"] } }),
    );
    let llm = (
        "on_llm_call",
        json!({ "scope": "system", "lambda": "lib/m.ts", "filter": { "source": ["compaction"] } }),
    );
    use TriggerKind::*;
    // One row per case: (target, event kind, event data, accepted).
    #[rustfmt::skip]
    let cases = [
        (&inbox, OnInbox, json!({ "source": "mesh", "from": "did:key:z6MkA" }), true),
        (&inbox, OnInbox, json!({ "source": "email", "from": "did:key:z6MkA" }), false),
        (&inbox, OnInbox, json!({ "source": "mesh", "from": "did:key:z6MkB" }), false),
        (&outbox, OnOutbox, json!({ "to": "did:key:z6MkC" }), true),
        (&outbox, OnOutbox, json!({ "to": "did:key:z6MkD" }), false),
        (&tools, OnToolCall, json!({ "tool": "fs_write" }), true),
        (&tools, OnToolCall, json!({ "tool": "db_query" }), false),
        (&done, OnTaskComplete, json!({ "tool": "x", "status": "failed" }), true),
        (&done, OnTaskComplete, json!({ "tool": "x", "status": "completed" }), false),
        (&logs, OnLogs, json!({ "level": "error", "origin": "mcp:github" }), true),
        (&logs, OnLogs, json!({ "level": "warn", "origin": "mcp:github" }), false),
        (&llm, OnLlmCall, json!({ "source": "compaction" }), true),
        (&llm, OnLlmCall, json!({ "source": "turn" }), false),
        // Other kinds never match.
        (&llm, OnLogs, json!({ "source": "compaction" }), false),
    ];
    for ((trigger, raw), kind, data, expected) in cases {
        let subject = target(trigger, raw.clone());
        assert_eq!(
            accepts(&subject, &event(kind, 0, data.clone())),
            expected,
            "{trigger} {raw} on {kind:?} {data}"
        );
    }
}

#[test]
fn trg_02_trg_03_trg_04_trg_05_handlers_never_receive_their_own_events() {
    let watch = |include_self: bool, lambda: &str| {
        target(
            "on_file_change",
            json!({ "scope": "system", "lambda": lambda, "filter": { "watch": "data/*", "include_self": include_self } }),
        )
    };
    let by_a = event(
        TriggerKind::OnFileChange,
        0,
        json!({ "path": "data/x.csv" }),
    )
    .produced_by(Producer::Lambda {
        source: "lib/a.ts:main".into(),
    });
    let by_agent = event(
        TriggerKind::OnFileChange,
        0,
        json!({ "path": "data/x.csv" }),
    )
    .produced_by(Producer::Agent);
    let by_owner = event(
        TriggerKind::OnFileChange,
        0,
        json!({ "path": "data/x.csv" }),
    );
    let a = watch(true, "lib/a.ts:main");
    let b = watch(true, "lib/b.ts:main");
    assert!(
        !accepts(&a, &by_a),
        "TRG-03: A never receives its own write"
    );
    assert!(
        accepts(&b, &by_a),
        "TRG-03: B with include_self sees A's write"
    );
    let quiet = watch(false, "lib/b.ts:main");
    assert!(
        !accepts(&quiet, &by_a) && !accepts(&quiet, &by_agent),
        "TRG-04"
    );
    assert!(accepts(&quiet, &by_owner));
    let logs = target(
        "on_logs",
        json!({ "scope": "system", "lambda": "lib/l.ts:main" }),
    );
    let own_row =
        event(TriggerKind::OnLogs, 0, json!({ "level": "info" })).produced_by(Producer::Lambda {
            source: "lib/l.ts:main".into(),
        });
    assert!(!accepts(&logs, &own_row), "TRG-05");
    let agent_logs = target("on_logs", json!({ "scope": "agent" }));
    let agent_row =
        event(TriggerKind::OnLogs, 0, json!({ "level": "info" })).produced_by(Producer::Agent);
    assert!(
        !accepts(&agent_logs, &agent_row),
        "TRG-05 for agent-scope handlers"
    );
}

#[test]
fn trg_07_debounce_fires_once_after_the_quiet_period() {
    let mut window = Window::new(Timing::Debounce { ms: 500 }, TriggerKind::OnFileChange);
    for i in 0..5 {
        assert_eq!(
            window.push(
                i * 100,
                event(TriggerKind::OnFileChange, i * 100, json!({ "n": i }))
            ),
            None
        );
        assert_eq!(window.due(i * 100 + 50), None);
    }
    assert_eq!(window.deadline(), Some(900));
    assert_eq!(window.due(899), None);
    let fired = window.due(900).unwrap();
    assert_eq!(fired.len(), 5);
    assert_eq!(fired.last().unwrap().data["n"], 4);
    assert_eq!(window.due(5000), None, "exactly one fire");
}

#[test]
fn trg_08_interval_at_most_once_per_interval() {
    let mut window = Window::new(Timing::Interval { ms: 1000 }, TriggerKind::OnChat);
    assert_eq!(
        window
            .push(0, event(TriggerKind::OnChat, 0, json!({})))
            .map(|e| e.len()),
        Some(1)
    );
    for at in [100, 500, 999] {
        assert_eq!(
            window.push(at, event(TriggerKind::OnChat, at, json!({}))),
            None
        );
    }
    assert_eq!(window.dropped(), 3);
    assert!(
        window
            .push(1000, event(TriggerKind::OnChat, 1000, json!({})))
            .is_some()
    );

    // on_inbox: the first event opens a window that fires at its end with everything in it.
    let mut inbox = Window::new(Timing::Interval { ms: 1000 }, TriggerKind::OnInbox);
    for at in [0, 200, 400, 600, 800] {
        assert_eq!(
            inbox.push(at, event(TriggerKind::OnInbox, at, json!({}))),
            None
        );
    }
    assert_eq!(inbox.due(999), None);
    assert_eq!(inbox.due(1000).unwrap().len(), 5);
}

#[test]
fn trg_09_batches_collect_and_fire_early_at_the_count() {
    let mut window = Window::new(
        Timing::Batch {
            ms: 10_000,
            count: Some(3),
        },
        TriggerKind::OnLogs,
    );
    assert_eq!(
        window.push(0, event(TriggerKind::OnLogs, 0, json!({}))),
        None
    );
    assert_eq!(
        window.push(1, event(TriggerKind::OnLogs, 1, json!({}))),
        None
    );
    assert_eq!(
        window
            .push(2, event(TriggerKind::OnLogs, 2, json!({})))
            .unwrap()
            .len(),
        3
    );
    assert_eq!(window.deadline(), None);
    let mut timed = Window::new(
        Timing::Batch {
            ms: 100,
            count: None,
        },
        TriggerKind::OnLogs,
    );
    timed.push(0, event(TriggerKind::OnLogs, 0, json!({})));
    timed.push(50, event(TriggerKind::OnLogs, 50, json!({})));
    assert_eq!(timed.due(100).unwrap().len(), 2);
}

#[test]
fn a_burst_never_grows_a_window_past_its_bound() {
    let mut window = Window::new(
        Timing::Batch {
            ms: 1_000_000,
            count: None,
        },
        TriggerKind::OnInbox,
    );
    for i in 0..10_000 {
        window.push(i, event(TriggerKind::OnInbox, i, json!({ "i": i })));
    }
    let fired = window.due(1_000_000).unwrap();
    assert_eq!(fired.len(), MAX_PENDING);
    assert_eq!(
        fired.last().unwrap().data["i"],
        9_999,
        "the newest events are kept"
    );
    assert_eq!(window.dropped(), 10_000 - MAX_PENDING as u64);
}

#[test]
fn trg_11_trg_12_state_gating_table() {
    let states = ["active", "idle", "hibernate", "suspended", "off"];
    for state in states {
        assert_eq!(
            allows(state, Scope::System, TriggerKind::OnInbox),
            state != "off",
            "system in {state}"
        );
    }
    let agent = |state| {
        (
            allows(state, Scope::Agent, TriggerKind::OnInbox),
            allows(state, Scope::Agent, TriggerKind::OnTimer),
        )
    };
    assert_eq!(agent("active"), (true, true));
    assert_eq!(agent("idle"), (true, true));
    assert_eq!(agent("hibernate"), (false, true));
    assert_eq!(agent("suspended"), (false, false));
    assert_eq!(agent("off"), (false, false));
    assert!(!allows("bogus", Scope::System, TriggerKind::OnInbox));
}

#[test]
fn trg_13_trg_14_trg_34_agent_messages_and_system_payloads() {
    let inbox = event(
        TriggerKind::OnInbox,
        5,
        json!({ "from": "did:key:z6MkA", "content": "secret body" }),
    );
    let text = format(std::slice::from_ref(&inbox));
    assert!(text.contains("msg_read") && text.contains("did:key:z6MkA"));
    assert!(
        !text.contains("secret body"),
        "TRG-14: the message body is not copied in"
    );
    assert_eq!(
        inbox.payload(),
        json!({ "type": "on_inbox", "timestamp": 5, "data": inbox.data })
    );
    let timer = event(
        TriggerKind::OnTimer,
        0,
        json!({ "timer_id": 3, "payload": "Check the feeds" }),
    );
    assert_eq!(format(&[timer]), "Check the feeds");
    let chat = event(TriggerKind::OnChat, 0, json!({ "text": "hello" }));
    assert_eq!(format(&[chat]), "hello");
    let many: Vec<TriggerEvent> = (0..3)
        .map(|i| event(TriggerKind::OnInbox, i, json!({})))
        .collect();
    assert!(format(&many).contains("3 new messages"));
    let deleted = event(
        TriggerKind::OnFileChange,
        0,
        json!({ "path": "docs/plan.md", "operation": "delete" }),
    );
    let text = format(&[deleted]);
    assert!(
        text.contains("docs/plan.md") && text.contains("deleted"),
        "a delete says so: {text}"
    );
}

#[test]
fn trg_26_trg_27_trg_28_trg_30_trg_31_timer_firing() {
    let (_dir, _path, mut file) = common::new_agent();
    common::enable(&mut file, "sys_set_timer");
    let now = chrono::Utc::now().timestamp_millis();
    let created = common::call(
        &mut file,
        &common::model(),
        "sys_set_timer",
        json!({ "schedule": { "type": "interval", "every_ms": 60_000, "max_runs": 2 }, "scope": ["agent"], "payload": "tick" }),
    )
    .unwrap();
    let id = created["id"].as_i64().unwrap();
    let first = timer_row(&file, id);
    assert!(!is_due(&first, now));
    // Ten minutes offline: on load the timer is due once, and the next time is one interval
    // after that fire, not every missed occurrence (TRG-30, TRG-31).
    let load = first.next_wake_at + 10 * 60_000;
    assert!(is_due(&first, load));
    let update = fire(&first, load).unwrap();
    assert_eq!(
        (update.run_count, update.last_fired_at, update.expired),
        (1, load, false)
    );
    assert_eq!(update.next_wake_at, load + 60_000);
    file.timer_record_fire(
        id,
        update.next_wake_at,
        update.run_count,
        update.last_fired_at,
        update.expired,
    )
    .unwrap();
    let second = timer_row(&file, id);
    assert!(
        !is_due(&second, load + 1),
        "fired once, not once per missed minute"
    );
    let update = fire(&second, second.next_wake_at).unwrap();
    assert!(update.expired, "max_runs 2 reached");
    file.timer_record_fire(
        id,
        update.next_wake_at,
        update.run_count,
        update.last_fired_at,
        update.expired,
    )
    .unwrap();
    let last = timer_row(&file, id);
    assert!(
        last.expired && last.run_count == 2,
        "TRG-28: the row stays as history"
    );
    assert_eq!(
        next_wake(&file.timers().unwrap()),
        None,
        "an expired timer never wakes the scheduler"
    );
}

fn timer_row(file: &adf_store::AdfFile, id: i64) -> adf_store::TimerRow {
    file.timers()
        .unwrap()
        .into_iter()
        .find(|t| t.id == id)
        .unwrap()
}

#[test]
fn trg_29_an_undeliverable_once_fire_is_rearmed() {
    let (_dir, _path, mut file) = common::new_agent();
    common::enable(&mut file, "sys_set_timer");
    let created = common::call(
        &mut file,
        &common::model(),
        "sys_set_timer",
        json!({ "schedule": { "type": "delay", "delay_ms": 1000 }, "scope": ["agent"] }),
    )
    .unwrap();
    let id = created["id"].as_i64().unwrap();
    let row = file
        .timers()
        .unwrap()
        .into_iter()
        .find(|t| t.id == id)
        .unwrap();
    let update = fire(&row, row.next_wake_at).unwrap();
    assert!(update.expired, "a once timer expires when it fires");
    file.timer_record_fire(
        id,
        update.next_wake_at,
        update.run_count,
        update.last_fired_at,
        true,
    )
    .unwrap();
    file.timer_rearm(id, row.next_wake_at + 5000).unwrap();
    let rearmed = file
        .timers()
        .unwrap()
        .into_iter()
        .find(|t| t.id == id)
        .unwrap();
    assert!(!rearmed.expired);
    assert_eq!(rearmed.next_wake_at, row.next_wake_at + 5000);
}
