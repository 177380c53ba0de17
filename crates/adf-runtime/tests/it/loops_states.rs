//! States, turns and loops (spec §6, conformance section 6 "STL") at the executor, loop and
//! tool level: start states, the implicit `main`, loop tool rules (default lists, the
//! intersection property, gating), a woken turn's return to the recorded state, loop compaction
//! thresholds and `loop_send` wake coalescing. Daemon-level STL rows live in
//! `adf-server/tests/it/loops_daemon.rs`.
use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use adf_providers::{ApiKey, Resolver};
use adf_runtime::executor::{Executor, LoopPool, RetryLog, Trigger, TurnEnd, TurnEvent, TurnHost};
use adf_runtime::tools::builtin::loops::effective_loop_tools;
use adf_runtime::tools::{ApprovalRequest, Approver, Decision, ToolCaller, ToolError};
use adf_store::{AdfFile, ConfigAction, LoopRow};
use adf_testkit::{MockProvider, Turn, Wire};
use proptest::prelude::*;
use serde_json::{Value, json};

const KEY: &str = "sk-test-0123456789";

// ---------- helpers ----------

fn set(file: &mut AdfFile, path: &str, value: Value) {
    file.config_set_path(adf_store::Caller::Owner, path, ConfigAction::Set, value)
        .unwrap();
}

async fn setup() -> (tempfile::TempDir, AdfFile, MockProvider) {
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.require_api_key(KEY);
    let (dir, _path, mut file) = common::new_agent();
    set(
        &mut file,
        "providers",
        json!([{"id": "mock", "type": "openai-compatible", "name": "Mock", "baseUrl": mock.base_url()}]),
    );
    set(&mut file, "model.provider", json!("mock"));
    set(&mut file, "model.model_id", json!("test-model"));
    (dir, file, mock)
}

fn executor(file: &AdfFile) -> Executor {
    let retries = RetryLog::default();
    let resolved = Resolver::new()
        .with_env(|_| None)
        .with_retry_observer(retries.observer())
        .resolve(&file.config().unwrap(), Some(ApiKey::new(KEY)))
        .unwrap();
    Executor::from_resolved(resolved, retries)
}

/// Approves everything and counts how often it was asked, so a test can tell "ran without
/// approval" from "ran after approval".
#[derive(Default)]
struct Counting {
    asked: AtomicUsize,
}

impl Approver for Counting {
    fn decide(&self, _: &mut AdfFile, _: &ApprovalRequest) -> Result<Decision, ToolError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(Decision::Approved)
    }
}

impl TurnHost for Counting {
    fn approver(&self) -> &dyn Approver {
        self
    }
    fn answer(&self, _: &str) -> Option<String> {
        None
    }
    fn event(&self, _: &TurnEvent<'_>) {}
}

fn state(file: &AdfFile) -> String {
    file.config().unwrap()["state"].as_str().unwrap().to_owned()
}

fn first_text(row: &LoopRow) -> String {
    row.content[0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn timer_event(text: &str) -> Trigger {
    Trigger::Event {
        event_type: "on_timer".into(),
        text: text.into(),
    }
}

// ---------- STL-02: start_in_state ----------

#[test]
fn stl_02_start_in_state_accepts_active_idle_hibernate_and_is_unset_by_default() {
    let (_dir, _path, mut file) = common::new_agent();
    // Absent on a new file, and the agent starts active (missing-tables §5.3: absent ⇒ active).
    let config = file.config().unwrap();
    assert!(config.get("start_in_state").is_none(), "{config}");
    assert_eq!(state(&file), "active");
    // `off` is not a start state, whoever writes it.
    let err = file.config_set_path(
        adf_store::Caller::Owner,
        "start_in_state",
        ConfigAction::Set,
        json!("off"),
    );
    assert!(err.is_err(), "owner wrote start_in_state off");
    // Approved, so the refusal is validation, not the owner's gate on sys_update_config.
    let err = common::call_approved(
        &mut file,
        &common::model(),
        "sys_update_config",
        json!({"path": "start_in_state", "value": "off"}),
    )
    .unwrap_err();
    assert!(err.message.contains("start_in_state"), "{err}");
    assert!(file.config().unwrap().get("start_in_state").is_none());
    for ok in ["active", "idle", "hibernate"] {
        set(&mut file, "start_in_state", json!(ok));
        assert_eq!(file.config().unwrap()["start_in_state"], ok);
    }
}

// ---------- STL-23: main is implicit ----------

#[test]
fn stl_23_main_exists_without_declaration_and_cannot_be_declared() {
    let (_dir, _path, mut file) = common::new_agent();
    // Nothing declares main, yet it is listed and addressable.
    assert!(
        file.config().unwrap()["loops"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
    let list = common::call(&mut file, &common::model(), "loop_list", json!({})).unwrap();
    assert_eq!(list["loops"][0]["name"], "main");
    let inner = ToolCaller::Model {
        loop_name: "helper".into(),
    };
    set(
        &mut file,
        "loops",
        json!([{"name": "helper", "goal": "Help.", "enabled": true, "tools": ["loop_send"]}]),
    );
    let sent = common::call(
        &mut file,
        &inner,
        "loop_send",
        json!({"to_loop": "main", "content": "hi"}),
    )
    .unwrap();
    assert_eq!(sent["delivered"], true);
    // Declaring it is a config violation (CFG-35, §5.17's field rules).
    let before = file.config().unwrap();
    // Approved, so the refusal below is the field rule, not the owner's gate.
    let model = common::call_approved(
        &mut file,
        &common::model(),
        "sys_update_config",
        json!({"path": "loops", "action": "append", "value": {"name": "main", "goal": "g", "enabled": true}}),
    );
    let err = model.unwrap_err();
    assert!(err.message.contains("'main' always exists"), "{err}");
    assert_eq!(file.config().unwrap(), before);
}

// ---------- STL-45: default tool list / mute loop ----------

#[test]
fn stl_45_created_loop_gets_the_default_tools_and_an_empty_list_is_mute() {
    let (_dir, _path, mut file) = common::new_agent();
    let main = common::model();
    common::call(
        &mut file,
        &main,
        "loop_manage",
        json!({"action": "create", "name": "seeded", "config": {"goal": "g", "autostart": false}}),
    )
    .unwrap();
    common::call(
        &mut file,
        &main,
        "loop_manage",
        json!({"action": "create", "name": "mute", "config": {"goal": "g", "autostart": false, "tools": []}}),
    )
    .unwrap();
    let config = file.config().unwrap();
    let loop_cfg = |name: &str| {
        adf_runtime::tools::builtin::loops::loop_config(&config, name)
            .unwrap()
            .clone()
    };
    // The seeded list is stored, so the derived set is the defaults (all enabled by default).
    assert_eq!(
        loop_cfg("seeded")["tools"],
        json!(["loop_send", "loop_list", "sys_set_state"])
    );
    let seeded: Vec<String> = effective_loop_tools(&config, &loop_cfg("seeded"))
        .into_iter()
        .collect();
    assert_eq!(seeded, ["loop_list", "loop_send", "sys_set_state"]);
    // `[]` stays `[]`: no tools at all (loop_compact/loop_clear are off on a new agent).
    assert_eq!(loop_cfg("mute")["tools"], json!([]));
    assert!(effective_loop_tools(&config, &loop_cfg("mute")).is_empty());
}

// ---------- STL-55: loop_list ----------

#[test]
fn stl_55_loop_list_reports_name_goal_enabled_running_and_marks_the_caller() {
    let (_dir, _path, mut file) = common::new_agent();
    let long_goal = format!("Sort the inbox.\n{}", "detail ".repeat(100));
    set(
        &mut file,
        "loops",
        json!([
            {"name": "triage", "goal": long_goal, "enabled": true, "tools": ["loop_list"]},
            {"name": "sleepy", "goal": "Nap.", "enabled": false, "tools": []}
        ]),
    );
    let caller = ToolCaller::Model {
        loop_name: "triage".into(),
    };
    let list = common::call(&mut file, &caller, "loop_list", json!({})).unwrap();
    let loops = list["loops"].as_array().unwrap();
    let names: Vec<&str> = loops.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["main", "triage", "sleepy"]);
    for l in loops {
        for field in ["name", "goal", "enabled", "running", "you"] {
            assert!(l.get(field).is_some(), "{field} missing in {l}");
        }
    }
    // The goal is a summary: its first line, not the whole text.
    assert_eq!(loops[1]["goal"], "Sort the inbox.");
    assert_eq!(
        loops
            .iter()
            .map(|l| l["enabled"].as_bool().unwrap())
            .collect::<Vec<_>>(),
        [true, true, false]
    );
    // Exactly the caller is marked, and the caller's loop is running (it is making the call).
    let you: Vec<&str> = loops
        .iter()
        .filter(|l| l["you"] == true)
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(you, ["triage"]);
    assert_eq!(loops[1]["running"], true);
    assert_eq!(loops[2]["running"], false);
}

// ---------- STL-56: loop_manage gating ----------

#[test]
fn stl_56_loop_manage_needs_no_approval_until_restricted() {
    let (_dir, _path, mut file) = common::new_agent();
    let main = common::model();
    let approver = Counting::default();
    let create = |name: &str| json!({"action": "create", "name": name, "config": {"goal": "g", "autostart": false}});
    // Shipped ungated: the call runs without asking anyone.
    common::call_with(&mut file, &main, "loop_manage", create("a"), &approver).unwrap();
    assert_eq!(approver.asked.load(Ordering::SeqCst), 0);
    // Restricting it puts the owner back in the loop: denied without approval...
    let mut tools = file.config().unwrap()["tools"].clone();
    for t in tools.as_array_mut().unwrap() {
        if t["name"] == "loop_manage" {
            t["restricted"] = json!(true);
        }
    }
    set(&mut file, "tools", tools);
    assert!(common::call(&mut file, &main, "loop_manage", create("b")).is_err());
    assert!(
        adf_runtime::tools::builtin::loops::loop_config(&file.config().unwrap(), "b").is_none()
    );
    // ...and run once the owner approves.
    common::call_with(&mut file, &main, "loop_manage", create("c"), &approver).unwrap();
    assert_eq!(approver.asked.load(Ordering::SeqCst), 1);
    assert!(
        adf_runtime::tools::builtin::loops::loop_config(&file.config().unwrap(), "c").is_some()
    );
}

// ---------- STL-57: inner-loop timers ----------

#[test]
fn stl_57_inner_loops_cannot_create_locked_or_system_lambda_timers() {
    let (_dir, _path, mut file) = common::new_agent();
    let inner = ToolCaller::Model {
        loop_name: "worker".into(),
    };
    let delay = json!({"type": "delay", "delay_ms": 60_000});
    let locked = common::call_approved(
        &mut file,
        &inner,
        "sys_set_timer",
        json!({"schedule": delay, "scope": ["agent"], "locked": true}),
    );
    assert!(locked.is_err());
    let lambda = common::call_approved(
        &mut file,
        &inner,
        "sys_set_timer",
        json!({"schedule": delay, "scope": ["system"], "lambda": "lib/a.ts:f"}),
    );
    assert!(lambda.is_err());
    assert!(file.timers().unwrap().is_empty());
    // A plain agent-scope timer is fine, and belongs to the loop.
    let ok = common::call(
        &mut file,
        &inner,
        "sys_set_timer",
        json!({"schedule": delay, "scope": ["agent"]}),
    )
    .unwrap();
    assert_eq!(ok["loop"], "worker");
}

// ---------- STL-27: the intersection property ----------

/// Tool names the generator draws from: ordinary tools, the three prohibited ones, the two
/// transcript tools and tools of two MCP servers.
const POOL: [&str; 12] = [
    "fs_read",
    "fs_write",
    "db_execute",
    "sys_set_timer",
    "loop_send",
    "sys_update_config",
    "loop_manage",
    "sys_create_adf",
    "loop_compact",
    "loop_clear",
    "mcp_a_search",
    "mcp_b_fetch",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// STL-27: whatever the agent declares and the loop lists, every tool the inner loop holds
    /// is one main holds (declared, enabled by its first declaration) and none needs approval
    /// (no declaration restricted, its MCP server not restricted) or is prohibited.
    #[test]
    fn stl_27_inner_loop_never_holds_a_tool_main_lacks_or_one_needing_approval(
        declared in proptest::collection::vec((0..POOL.len(), any::<bool>(), any::<bool>()), 0..20),
        listed in proptest::collection::vec(0..POOL.len(), 0..12),
        server_a_restricted in any::<bool>(),
        server_b_restricted in any::<bool>(),
    ) {
        let tools: Vec<Value> = declared
            .iter()
            .map(|&(i, enabled, restricted)| {
                json!({"name": POOL[i], "enabled": enabled, "visible": enabled, "restricted": restricted})
            })
            .collect();
        let config = json!({
            "tools": tools,
            "mcp": {"servers": [
                {"name": "a", "restricted": server_a_restricted},
                {"name": "b", "restricted": server_b_restricted}
            ]}
        });
        let loop_cfg = json!({
            "name": "l",
            "goal": "g",
            "enabled": true,
            "tools": listed.iter().map(|&i| POOL[i]).collect::<Vec<_>>()
        });
        // Main's view, straight from the declarations: the first one decides `enabled`,
        // any restricted duplicate restricts.
        let main_holds = |name: &str| {
            declared.iter().find(|d| POOL[d.0] == name).is_some_and(|d| d.1)
        };
        let needs_approval = |name: &str| {
            declared.iter().any(|d| POOL[d.0] == name && d.2)
                || (name.starts_with("mcp_a_") && server_a_restricted)
                || (name.starts_with("mcp_b_") && server_b_restricted)
        };
        let effective = effective_loop_tools(&config, &loop_cfg);
        for tool in &effective {
            prop_assert!(main_holds(tool), "{tool} held but main lacks it");
            prop_assert!(!needs_approval(tool), "{tool} held but needs approval");
            prop_assert!(
                !["sys_update_config", "loop_manage", "sys_create_adf"].contains(&tool.as_str()),
                "{tool} is prohibited in inner loops"
            );
        }
        // Not vacuous: a listed tool that passes every rule is held.
        let prohibited = ["sys_update_config", "loop_manage", "sys_create_adf"];
        let expected: BTreeSet<String> = listed
            .iter()
            .map(|&i| POOL[i])
            .filter(|t| main_holds(t) && !needs_approval(t) && !prohibited.contains(t))
            .map(str::to_owned)
            .collect();
        prop_assert!(expected.is_subset(&effective), "{expected:?} ⊄ {effective:?}");
    }
}

// ---------- STL-06: return to the recorded state ----------

#[tokio::test]
async fn stl_06_a_woken_turn_returns_to_the_recorded_state_unless_it_set_another() {
    let (_dir, mut file, mock) = setup().await;
    set(&mut file, "state", json!("hibernate"));
    mock.push_all([
        Turn::text("tick handled"),
        Turn::tool_call("sys_set_state", json!({"state": "idle"})),
    ]);
    let ex = executor(&file);
    let host = Counting::default();
    let mut session = ex.open_session(&mut file, "main").unwrap();
    // A timer wakes the hibernating agent; its turn ends with text: back to hibernate.
    let out = ex
        .run_turn(&mut file, &mut session, timer_event("tick"), &host)
        .await
        .unwrap();
    assert_eq!(out.end, TurnEnd::Replied);
    assert_eq!(state(&file), "hibernate");
    // The next woken turn sets idle itself: that state wins over the recorded one.
    let out = ex
        .run_turn(&mut file, &mut session, timer_event("tick"), &host)
        .await
        .unwrap();
    assert_eq!(out.end, TurnEnd::StateSet("idle".into()));
    assert_eq!(state(&file), "idle");
    assert_eq!(mock.request_count(), 2);
}

// ---------- STL-47: loop compaction threshold ----------

#[tokio::test]
async fn stl_47_an_inner_loop_compacts_at_the_agent_threshold_by_default() {
    let (_dir, mut file, mock) = setup().await;
    // Far below the default threshold, so only an inherited value can trigger compaction.
    set(&mut file, "context.compact_threshold", json!(300));
    set(
        &mut file,
        "loops",
        json!([{"name": "worker", "goal": "Work.", "enabled": true, "tools": []}]),
    );
    mock.push_all(common::compaction_script("SUMMARY of work"));
    let ex = executor(&file);
    let host = Counting::default();
    let mut session = ex.open_session(&mut file, "worker").unwrap();
    for text in ["one", "two", "three"] {
        ex.run_turn(&mut file, &mut session, timer_event(text), &host)
            .await
            .unwrap();
    }
    assert_eq!(mock.request_count(), 4);
    assert_eq!(
        mock.requests()[2].body["messages"][0]["content"],
        adf_runtime::executor::COMPACTION_PROMPT
    );
    let rows = file.loop_rows("worker").unwrap();
    let summary = first_text(&rows[0]);
    assert!(
        summary.starts_with("[Loop Compacted") && summary.ends_with("SUMMARY of work"),
        "{summary}"
    );
    assert!(file.loop_rows("main").unwrap().is_empty());
}

// ---------- STL-51: wake coalescing ----------

#[tokio::test]
async fn stl_51_two_waking_sends_in_one_turn_give_one_kick_and_each_content_once() {
    let (_dir, mut file, mock) = setup().await;
    set(
        &mut file,
        "loops",
        json!([{"name": "triage", "goal": "Sort.", "enabled": true, "tools": []}]),
    );
    mock.push_all([
        // main: two waking sends in two steps of one turn, then done
        Turn::tool_call(
            "loop_send",
            json!({"to_loop": "triage", "content": "first item", "wake": true}),
        ),
        Turn::tool_call(
            "loop_send",
            json!({"to_loop": "triage", "content": "second item", "wake": true}),
        ),
        Turn::text("sent both"),
        // triage: one kick turn
        Turn::text("sorted"),
    ]);
    let ex = executor(&file);
    let mut pool = LoopPool::new();
    let host = Counting::default();
    let results = pool
        .run(&ex, &mut file, "main", Trigger::Owner("go".into()), &host)
        .await
        .unwrap();
    let loops: Vec<&str> = results.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        loops,
        ["main", "triage"],
        "at most one kick turn for triage"
    );
    assert_eq!(mock.request_count(), 4);
    assert_eq!(mock.remaining(), 0);
    // The kick turn's request carries each message exactly once.
    let body = serde_json::to_string(&mock.requests()[3].body).unwrap();
    assert_eq!(body.matches("first item").count(), 1, "{body}");
    assert_eq!(body.matches("second item").count(), 1, "{body}");
    // And the transcript holds each once (durable, not duplicated by the wake).
    let triage = file.loop_rows("triage").unwrap();
    let texts: Vec<String> = triage.iter().map(first_text).collect();
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.as_str() == "[from loop:main] first item")
            .count(),
        1
    );
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.as_str() == "[from loop:main] second item")
            .count(),
        1
    );
}

// ---------- STL-15: sys_set_state from code during a turn ----------

#[tokio::test]
async fn stl_15_code_setting_idle_waits_for_the_turn_and_off_stops_it_at_once() {
    let (_dir, mut file, mock) = setup().await;
    let idle = "await adf.sys_set_state({ state: 'idle' }); return 'set';";
    let off = "await adf.sys_set_state({ state: 'off' }); return 'set';";
    mock.push_all([
        Turn::tool_call("sys_code", json!({ "code": idle })),
        Turn::text("carried on"),
        Turn::tool_call("sys_code", json!({ "code": off })),
        Turn::text("must never be requested"),
    ]);
    let ex = executor(&file);
    let host = Counting::default();
    let mut session = ex.open_session(&mut file, "main").unwrap();
    // idle from code is deferred: the turn goes on to its next model request and ends
    // normally, then the agent is idle.
    let out = ex
        .run_turn(&mut file, &mut session, Trigger::Owner("one".into()), &host)
        .await
        .unwrap();
    assert_eq!(out.end, TurnEnd::Replied);
    assert_eq!(out.reply, "carried on");
    assert_eq!(mock.request_count(), 2);
    assert_eq!(state(&file), "idle");
    // off from code is never deferred: no request after the call.
    let out = ex
        .run_turn(&mut file, &mut session, Trigger::Owner("two".into()), &host)
        .await;
    assert_eq!(mock.request_count(), 3, "a request after off: {out:?}");
    assert_eq!(out.unwrap().end, TurnEnd::StateSet("off".into()));
    assert_eq!(state(&file), "off");
    assert_eq!(mock.remaining(), 1);
}

#[test]
fn stl_32_tasks_and_timers_an_inner_loop_creates_carry_its_name() {
    let (_dir, _path, mut file) = common::new_agent();
    let inner = ToolCaller::Model {
        loop_name: "worker".into(),
    };
    let delay = json!({"type": "delay", "delay_ms": 60_000});
    common::call(
        &mut file,
        &inner,
        "sys_set_timer",
        json!({"schedule": delay, "scope": ["agent"]}),
    )
    .unwrap();
    // A restricted call asks the owner: its approval task belongs to the loop that asked.
    common::call_approved(
        &mut file,
        &inner,
        "sys_update_config",
        json!({"path": "model.temperature", "value": 0.2}),
    )
    .unwrap();
    let timers = file.timers().unwrap();
    assert_eq!(timers.len(), 1);
    assert_eq!(timers[0].r#loop.as_deref(), Some("worker"));
    let tasks = file.tasks(None).unwrap();
    assert!(!tasks.is_empty(), "the restricted call left no task");
    for task in &tasks {
        assert_eq!(task.r#loop.as_deref(), Some("worker"), "{}", task.tool);
    }
}
