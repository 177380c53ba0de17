//! The executor over real HTTP against `adf-testkit`, in both wire formats: whole
//! conversations (tools, approvals, say/ask, sys_set_state), transcript rows, context rows,
//! tokens and models, tasks, files and the exact requests the provider received; retries and
//! auth failures; turn endings; checkpoints and recovery; compaction and clearing; inner loops.
use crate::common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use adf_providers::{ApiKey, Resolver};
use adf_runtime::executor::{
    ExecState, Executor, ExecutorError, LoopPool, RetryLog, Session, Trigger, TurnEnd, TurnEvent,
    TurnHost, TurnOutcome,
};
use adf_runtime::tools::{ApprovalRequest, Approver, Decision, OwnerWait, ToolError};
use adf_store::{AdfFile, ConfigAction, LoopRow};
use adf_testkit::{MockProvider, Turn, Wire};
use serde_json::{Value, json};

const KEY: &str = "sk-test-0123456789";
const MODEL: &str = "test-model";

// ---------- helpers ----------

fn set(file: &mut AdfFile, path: &str, value: Value) {
    file.config_set_path(adf_store::Caller::Owner, path, ConfigAction::Set, value)
        .unwrap();
}

/// Points the agent at the mock with fast retries.
fn wire_up(file: &mut AdfFile, mock: &MockProvider) {
    let ty = match mock.wire() {
        Wire::OpenAi => "openai-compatible",
        Wire::Anthropic => "anthropic",
    };
    set(
        file,
        "providers",
        json!([{"id": "mock", "type": ty, "name": "Mock", "baseUrl": mock.base_url()}]),
    );
    set(file, "model.provider", json!("mock"));
    set(file, "model.model_id", json!(MODEL));
    set(
        file,
        "recovery",
        json!({"auto_retry": true, "max_attempts": 3, "base_delay_ms": 1, "max_delay_ms": 5}),
    );
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

async fn setup(wire: Wire) -> (tempfile::TempDir, AdfFile, MockProvider) {
    let mock = MockProvider::start(wire).await;
    mock.require_api_key(KEY);
    let (dir, _path, mut file) = common::new_agent();
    wire_up(&mut file, &mock);
    (dir, file, mock)
}

/// A host with scripted approvals and answers that records what it was shown.
#[derive(Default)]
struct Host {
    approvals: Mutex<VecDeque<bool>>,
    answers: Mutex<VecDeque<String>>,
    log: Mutex<Vec<String>>,
}

impl Host {
    fn with(approvals: &[bool], answers: &[&str]) -> Self {
        Host {
            approvals: Mutex::new(approvals.iter().copied().collect()),
            answers: Mutex::new(answers.iter().map(|s| s.to_string()).collect()),
            log: Mutex::default(),
        }
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Approver for Host {
    fn decide(&self, _: &mut AdfFile, request: &ApprovalRequest) -> Result<Decision, ToolError> {
        let yes = self.approvals.lock().unwrap().pop_front().unwrap_or(false);
        self.log
            .lock()
            .unwrap()
            .push(format!("approval {} -> {yes}", request.tool));
        Ok(if yes {
            Decision::Approved
        } else {
            Decision::Denied("owner said no".into())
        })
    }
}

impl TurnHost for Host {
    fn approver(&self) -> &dyn Approver {
        self
    }
    fn answer(&self, question: &str) -> Option<String> {
        self.log.lock().unwrap().push(format!("ask {question}"));
        self.answers.lock().unwrap().pop_front()
    }
    fn event(&self, event: &TurnEvent<'_>) {
        let line = match event {
            TurnEvent::Say(m) => format!("say {m}"),
            TurnEvent::ToolCall(c) => format!("call {}", c.name),
            TurnEvent::Retry(n) => format!("retry {}", n.attempt),
            TurnEvent::State(s) => format!("state {s:?}"),
            _ => return,
        };
        self.log.lock().unwrap().push(line);
    }
}

async fn chat(
    ex: &Executor,
    file: &mut AdfFile,
    session: &mut Session,
    text: &str,
    host: &Host,
) -> Result<TurnOutcome, ExecutorError> {
    ex.run_turn(file, session, Trigger::Owner(text.into()), host)
        .await
}

fn texts(row: &LoopRow) -> Vec<String> {
    row.content
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b.get("text").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

fn first_text(row: &LoopRow) -> String {
    texts(row).into_iter().next().unwrap_or_default()
}

fn block_types(row: &LoopRow) -> Vec<String> {
    row.content
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap().to_owned())
        .collect()
}

/// The system text and the conversation messages of a recorded request, in either format,
/// as `(role, [block types or text])` summaries.
fn request_view(wire: Wire, body: &Value) -> (String, Vec<Value>) {
    match wire {
        Wire::OpenAi => {
            let msgs = body["messages"].as_array().unwrap();
            assert_eq!(msgs[0]["role"], "system");
            (
                msgs[0]["content"].as_str().unwrap().to_owned(),
                msgs[1..].to_vec(),
            )
        }
        Wire::Anthropic => {
            let system = match &body["system"] {
                Value::String(s) => s.clone(),
                Value::Array(blocks) => blocks
                    .iter()
                    .map(|b| b["text"].as_str().unwrap())
                    .collect::<Vec<_>>()
                    .join(""),
                other => panic!("system {other}"),
            };
            (system, body["messages"].as_array().unwrap().clone())
        }
    }
}

fn tool_names(wire: Wire, body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| match wire {
            Wire::OpenAi => t["function"]["name"].as_str().unwrap().to_owned(),
            Wire::Anthropic => t["name"].as_str().unwrap().to_owned(),
        })
        .collect()
}

/// The main loop's turn checkpoint (`adf_runtime_turn_checkpoint`), parsed.
fn main_checkpoint(file: &AdfFile) -> Value {
    let row = file
        .meta_get("adf_runtime_turn_checkpoint")
        .unwrap()
        .unwrap();
    serde_json::from_str(&row.value).unwrap()
}

fn logs(file: &AdfFile, event: &str) -> Vec<(String, String)> {
    let logs = adf_store::test_support::tables(file).logs().unwrap();
    logs.into_iter()
        .filter(|l| l.event.as_deref() == Some(event))
        .map(|l| (l.level, l.message))
        .collect()
}

fn state(file: &AdfFile) -> String {
    file.config().unwrap()["state"].as_str().unwrap().to_owned()
}

// ---------- the whole conversation (issue acceptance 1) ----------

async fn conversation(wire: Wire) {
    let (_dir, mut file, mock) = setup(wire).await;
    mock.push_all([
        Turn::reply().with_text("Writing it.").with_tool_call(
            "fs_write",
            json!({"path": "notes/a.md", "mode": "write", "content": "hello from the model"}),
        ),
        Turn::tool_call("fs_read", json!({"path": "notes/a.md"})),
        Turn::tool_call(
            "sys_update_config",
            json!({"path": "description", "value": "approved edit", "_reason": "describe myself"}),
        ),
        Turn::tool_call(
            "sys_update_config",
            json!({"path": "description", "value": "denied edit"}),
        ),
        Turn::text("All done."),
        // turn 2
        Turn::reply()
            .with_tool_call("say", json!({"message": "Let me check with you."}))
            .with_tool_call("ask", json!({"question": "Blue or green?"})),
        Turn::tool_call("sys_set_state", json!({"state": "idle"})),
    ]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let host = Host::with(&[true, false], &["green"]);

    let one = chat(&ex, &mut file, &mut session, "Please write a note.", &host)
        .await
        .unwrap();
    assert_eq!(one.end, TurnEnd::Replied);
    assert_eq!(one.steps, 5);
    assert_eq!(one.reply, "All done.");
    let two = chat(&ex, &mut file, &mut session, "What next?", &host)
        .await
        .unwrap();
    assert_eq!(two.end, TurnEnd::StateSet("idle".into()));
    assert_eq!(two.steps, 2);
    // STL-14: sys_set_state ends the turn: no request after it.
    assert_eq!(mock.request_count(), 7);
    assert_eq!(mock.remaining(), 0);
    assert_eq!(state(&file), "idle");
    assert_eq!(session.state(), ExecState::Idle);

    // Files and config.
    let note = file.file_read("notes/a.md").unwrap().unwrap();
    assert_eq!(note.content, b"hello from the model");
    assert_eq!(file.config().unwrap()["description"], "approved edit");

    // Tasks: one approved and completed, one denied.
    let tasks = file.tasks(None).unwrap();
    let mut statuses: Vec<(&str, &str)> = tasks
        .iter()
        .map(|t| (t.tool.as_str(), t.status.as_str()))
        .collect();
    statuses.sort();
    assert_eq!(
        statuses,
        [
            ("sys_update_config", "completed"),
            ("sys_update_config", "denied")
        ]
    );
    assert!(tasks.iter().any(|t| t.args["_reason"] == "describe myself"));

    // The host saw approvals, say and ask in order.
    let log = host.log();
    let pos = |s: &str| log.iter().position(|l| l == s).unwrap();
    assert!(pos("approval sys_update_config -> true") < pos("approval sys_update_config -> false"));
    // §6.1: the loop is awaiting_approval while the owner decides, then back to tool_use.
    let approval = pos("approval sys_update_config -> true");
    assert_eq!(log[approval - 1], "state AwaitingApproval", "{log:?}");
    assert_eq!(log[approval + 1], "state ToolUse", "{log:?}");
    assert!(pos("say Let me check with you.") < pos("ask Blue or green?"));

    // Transcript rows.
    let rows = file.loop_rows("main").unwrap();
    let roles: Vec<&str> = rows.iter().map(|r| r.role.as_str()).collect();
    // Turn 1: trigger, system prompt, 5 × (assistant + results), turn 2: trigger, 2 steps.
    assert_eq!(
        roles,
        [
            "user",
            "user", // trigger, [Context: system_prompt]
            "assistant",
            "user", // fs_write
            "assistant",
            "user", // fs_read
            "assistant",
            "user", // approved
            "assistant",
            "user",      // denied
            "assistant", // All done.
            "user",      // trigger 2 (same session: no new system prompt row)
            "assistant",
            "user",
            "user", // say + ask, one result row each
            "assistant",
            "user", // sys_set_state
        ]
    );
    assert_eq!(first_text(&rows[0]), "Please write a note.");
    // PRM-02: the trigger is on disk before the system prompt row, as the reference does.
    assert!(first_text(&rows[1]).starts_with("[Context: system_prompt] "));
    // PRM-34: model and tokens on every assistant row, never on user rows.
    for row in &rows {
        if row.role == "assistant" {
            assert_eq!(row.model.as_deref(), Some(MODEL));
            // The reference always writes `cache_read` and `reasoning` (0 when the vendor reports none).
            assert_eq!(
                row.tokens,
                Some(json!({"input": 10, "output": 5, "cache_read": 0, "reasoning": 0}))
            );
        } else {
            assert!(row.model.is_none() && row.tokens.is_none());
        }
    }
    // tool_use / tool_result pairing.
    let mut open: Vec<String> = Vec::new();
    for row in &rows {
        for b in row.content.as_array().unwrap() {
            match b["type"].as_str().unwrap() {
                "tool_use" => open.push(b["id"].as_str().unwrap().to_owned()),
                "tool_result" => {
                    let id = b["tool_use_id"].as_str().unwrap();
                    assert_eq!(open.remove(0), id, "results answer calls in order");
                }
                _ => {}
            }
        }
    }
    assert!(open.is_empty());
    let result = |i: usize| rows[i].content[0].clone();
    assert!(
        result(5)["content"]
            .as_str()
            .unwrap()
            .contains("hello from the model")
    );
    assert_eq!(result(7)["is_error"], false);
    assert_eq!(result(9)["is_error"], true);
    assert!(
        result(9)["content"]
            .as_str()
            .unwrap()
            .contains("owner said no")
    );
    assert_eq!(result(13)["content"], "Shown to the owner.");
    assert_eq!(result(14)["content"], "green");
    assert_eq!(block_types(&rows[12]), ["tool_use", "tool_use"]);

    // The requests the provider received.
    let reqs = mock.requests();
    let system_row = first_text(&rows[1]);
    for (i, req) in reqs.iter().enumerate() {
        let (system, msgs) = request_view(wire, &req.body);
        // PRM-01/PRM-10: the system prompt sent is the one recorded.
        assert_eq!(
            format!("[Context: system_prompt] {system}"),
            system_row,
            "request {i}"
        );
        // Context rows of the system prompt are not sent back as messages.
        let body = serde_json::to_string(&msgs).unwrap();
        assert!(!body.contains("[Context: system_prompt]"), "request {i}");
        assert_eq!(req.body["model"], MODEL);
        let tools = tool_names(wire, &req.body);
        for t in [
            "fs_write",
            "fs_read",
            "say",
            "ask",
            "sys_set_state",
            "loop_send",
        ] {
            assert!(tools.contains(&t.to_owned()), "{t} advertised");
        }
        assert!(
            !tools.contains(&"fs_delete".to_owned()),
            "disabled tools are not"
        );
    }
    // The first request: just the trigger.
    let (_, first) = request_view(wire, &reqs[0].body);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0]["role"], "user");
    // The second carries the call and its result.
    let (_, second) = request_view(wire, &reqs[1].body);
    let s = serde_json::to_string(&second).unwrap();
    assert!(s.contains("notes/a.md") && s.contains("Writing it."));
    match wire {
        Wire::OpenAi => assert_eq!(second.last().unwrap()["role"], "tool"),
        Wire::Anthropic => {
            assert_eq!(second.last().unwrap()["content"][0]["type"], "tool_result")
        }
    }
    // The sixth (turn 2, first step) carries the whole history and the new trigger.
    let (_, sixth) = request_view(wire, &reqs[5].body);
    assert!(
        serde_json::to_string(&sixth)
            .unwrap()
            .contains("What next?")
    );
    // The seventh carries both results of the say + ask step.
    let (_, seventh) = request_view(wire, &reqs[6].body);
    let s = serde_json::to_string(&seventh).unwrap();
    assert!(s.contains("Shown to the owner.") && s.contains("green"));

    // The checkpoint of the last turn is completed.
    let cp = main_checkpoint(&file);
    assert_eq!(cp["status"], "completed");
    assert_eq!(cp["event_type"], "chat");
    assert_eq!(cp["replay"], "not_attempted");
}

#[tokio::test]
async fn stl_14_stl_16_stl_18_stl_19_prm_01_prm_02_prm_10_prm_34_conversation_openai() {
    conversation(Wire::OpenAi).await;
}

#[tokio::test]
async fn stl_14_stl_16_stl_18_stl_19_prm_01_prm_02_prm_10_prm_34_conversation_anthropic() {
    conversation(Wire::Anthropic).await;
}

// ---------- provider failures (acceptance 2) ----------

async fn transient_then_success(wire: Wire) {
    let (_dir, mut file, mock) = setup(wire).await;
    mock.push_all([Turn::error(503, "overloaded"), Turn::text("made it")]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let host = Host::default();
    let out = chat(&ex, &mut file, &mut session, "hi", &host)
        .await
        .unwrap();
    assert_eq!(out.reply, "made it");
    assert_eq!(mock.request_count(), 2);
    assert_eq!(state(&file), "active");
    let warns = logs(&file, "provider_error");
    assert_eq!(warns.len(), 1);
    assert_eq!(warns[0].0, "warn");
    assert!(host.log().contains(&"retry 1".to_owned()));
    assert!(logs(&file, "turn_error").is_empty());
}

#[tokio::test]
async fn stl_09_stl_11_transient_503_retries_and_completes_openai() {
    transient_then_success(Wire::OpenAi).await;
}

#[tokio::test]
async fn stl_09_stl_11_transient_503_retries_and_completes_anthropic() {
    transient_then_success(Wire::Anthropic).await;
}

async fn auth_failure(wire: Wire) {
    let (_dir, mut file, mock) = setup(wire).await;
    mock.push(Turn::error(401, "invalid x-api-key"));
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let host = Host::default();
    let err = chat(&ex, &mut file, &mut session, "hi", &host)
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(&err, ExecutorError::Provider(e) if e.is_auth()),
        "{message}"
    );
    assert!(message.contains("mock"), "names the provider: {message}");
    assert!(message.contains("invalid x-api-key"), "{message}");
    assert_eq!(mock.request_count(), 1, "auth errors are not retried");
    // §6.2: the stored state stays; the executor state is error (in memory only).
    assert_eq!(state(&file), "active");
    assert_eq!(session.state(), ExecState::Error);
    assert_eq!(logs(&file, "turn_error").len(), 1);
    // The trigger is on disk; the checkpoint says failed with the reason.
    let rows = file.loop_rows("main").unwrap();
    assert_eq!(first_text(&rows[0]), "hi");
    let cp = main_checkpoint(&file);
    assert_eq!(cp["status"], "failed");
    assert!(cp["reason"].as_str().unwrap().contains("401"));
}

#[tokio::test]
async fn stl_01_stl_08_auth_401_fails_at_once_openai() {
    auth_failure(Wire::OpenAi).await;
}

#[tokio::test]
async fn stl_01_stl_08_auth_401_fails_at_once_anthropic() {
    auth_failure(Wire::Anthropic).await;
}

#[tokio::test]
async fn stl_10_transient_failure_exhausted_returns_loop_to_idle() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    mock.push_all([
        Turn::error(503, "a"),
        Turn::error(503, "b"),
        Turn::error(503, "c"),
    ]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let err = chat(&ex, &mut file, &mut session, "hi", &Host::default())
        .await
        .unwrap_err();
    assert!(matches!(&err, ExecutorError::Provider(e) if e.is_transient()));
    assert_eq!(session.state(), ExecState::Idle);
    assert_eq!(state(&file), "active");
    assert!(logs(&file, "turn_error").is_empty());
    assert_eq!(
        logs(&file, "provider_error").len(),
        3,
        "two retries + the final failure"
    );
}

// ---------- turn endings ----------

#[tokio::test]
async fn stl_17_prm_03_prm_32_autonomous_four_text_replies_go_idle() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    set(&mut file, "autonomous", json!(true));
    mock.push_all((0..4).map(|i| Turn::text(format!("thinking {i}"))));
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let out = chat(&ex, &mut file, &mut session, "go", &Host::default())
        .await
        .unwrap();
    assert_eq!(out.end, TurnEnd::AutonomousIdle);
    assert_eq!(mock.request_count(), 4);
    assert_eq!(state(&file), "idle");
    let rows = file.loop_rows("main").unwrap();
    let dynamic: Vec<String> = rows
        .iter()
        .map(first_text)
        .filter(|t| t.starts_with("[Context: dynamic_instructions] "))
        .collect();
    // PRM-32: the idle reminder for an autonomous agent with sys_set_state, then three
    // continuation reminders.
    assert_eq!(dynamic.len(), 4, "{dynamic:?}");
    assert!(dynamic[0].contains("sys_set_state"));
    // PRM-01: every dynamic row was sent to the model.
    let last = serde_json::to_string(&mock.requests()[3].body).unwrap();
    assert_eq!(last.matches("[Context: dynamic_instructions]").count(), 4);
}

#[tokio::test]
async fn stl_16_interactive_text_reply_ends_turn_after_one_request() {
    let (_dir, mut file, mock) = setup(Wire::Anthropic).await;
    mock.push(Turn::text("hello"));
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let out = chat(&ex, &mut file, &mut session, "hi", &Host::default())
        .await
        .unwrap();
    assert_eq!(out.end, TurnEnd::Replied);
    assert_eq!(mock.request_count(), 1);
    // PRM-32: a non-autonomous agent gets no idle reminder.
    assert!(
        file.loop_rows("main")
            .unwrap()
            .iter()
            .all(|r| !first_text(r).starts_with("[Context: dynamic_instructions]"))
    );
}

#[tokio::test]
async fn stl_20_max_active_turns_suspends() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    set(&mut file, "limits.max_active_turns", json!(2));
    mock.push_all([Turn::text("one"), Turn::text("two")]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let host = Host::default();
    for i in 0..2 {
        let trigger = Trigger::Event {
            event_type: "on_timer".into(),
            text: format!("tick {i}"),
        };
        let out = ex
            .run_turn(&mut file, &mut session, trigger, &host)
            .await
            .unwrap();
        assert_eq!(out.end, TurnEnd::Replied);
    }
    let trigger = Trigger::Event {
        event_type: "on_timer".into(),
        text: "tick 2".into(),
    };
    let out = ex
        .run_turn(&mut file, &mut session, trigger, &host)
        .await
        .unwrap();
    assert_eq!(out.end, TurnEnd::Suspended);
    assert_eq!(state(&file), "suspended");
    assert_eq!(mock.request_count(), 2);
    // A suspended agent does not run until the owner resumes it.
    let err = chat(&ex, &mut file, &mut session, "hello?", &host)
        .await
        .unwrap_err();
    assert!(matches!(err, ExecutorError::NotRunnable { .. }));
}

#[tokio::test]
async fn tol_61_big_tool_result_is_previewed() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    set(&mut file, "limits.max_tool_result_tokens", json!(100));
    set(&mut file, "limits.max_tool_result_preview_chars", json!(50));
    file.file_write(
        adf_store::Caller::Owner,
        "big.txt",
        "y".repeat(2000).as_bytes(),
        &adf_store::FileWrite::default(),
    )
    .unwrap();
    mock.push_all([
        Turn::tool_call("fs_read", json!({"path": "big.txt"})),
        Turn::text("ok"),
    ]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    chat(&ex, &mut file, &mut session, "read it", &Host::default())
        .await
        .unwrap();
    let rows = file.loop_rows("main").unwrap();
    let result = rows
        .iter()
        .find(|r| block_types(r) == ["tool_result"])
        .unwrap();
    let content = result.content[0]["content"].as_str().unwrap();
    let (preview, note) = content.split_once("\n\n[Result truncated").unwrap();
    assert_eq!(preview.chars().count(), 50);
    assert!(!content.contains(&"y".repeat(60)));
    assert!(note.contains("max_tool_result_tokens = 100"));
}

#[tokio::test]
async fn cod_07_model_sys_code_runs_in_the_sandbox_during_a_turn() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    let code = "await adf.fs_write({ path: 'notes/from-code.md', mode: 'write', content: 'written by sys_code' });\n\
                await adf.loop_inject({ content: 'remember: the note exists' });\n\
                console.log('wrote it');\n\
                return 6 * 7;";
    mock.push_all([
        Turn::tool_call("sys_code", json!({ "code": code })),
        Turn::text("done"),
    ]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    chat(
        &ex,
        &mut file,
        &mut session,
        "run the code",
        &Host::default(),
    )
    .await
    .unwrap();
    let note = file.file_read("notes/from-code.md").unwrap().unwrap();
    assert_eq!(note.content, b"written by sys_code");
    let rows = file.loop_rows("main").unwrap();
    let result_at = rows
        .iter()
        .position(|r| block_types(r) == ["tool_result"])
        .unwrap();
    let content = rows[result_at].content[0]["content"].as_str().unwrap();
    let value: Value = serde_json::from_str(content).unwrap();
    assert_eq!(value["result"], 42, "{content}");
    assert!(
        content.contains("wrote it"),
        "console output comes back: {content}"
    );
    // The injected context lands after the tool result, never between a call and its result.
    let injected = rows
        .iter()
        .position(|r| first_text(r).contains("remember: the note exists"))
        .unwrap();
    assert!(injected > result_at);
    // The second request carried the tool result to the model.
    assert_eq!(mock.request_count(), 2);
}

// ---------- checkpoints ----------

#[tokio::test]
async fn stl_checkpoint_in_progress_becomes_interrupted_and_is_not_replayed() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    // What a process killed mid tool step leaves behind.
    file.meta_set_runtime(
        "adf_runtime_turn_checkpoint",
        &json!({"id": "abc", "status": "in_progress", "started_at": 1, "updated_at": 2,
                "event_type": "chat", "scope": "agent", "replay": "not_attempted"})
        .to_string(),
    )
    .unwrap();
    for (role, content) in [
        ("user", json!([{"type": "text", "text": "do it"}])),
        (
            "assistant",
            json!([{"type": "tool_use", "id": "call_1", "name": "fs_list", "input": {}}]),
        ),
    ] {
        file.loop_append(&adf_store::NewLoopRow {
            r#loop: "main",
            role,
            content: &content,
            model: None,
            tokens: None,
        })
        .unwrap();
    }
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let recovered = session.recovered.clone().unwrap();
    assert_eq!(recovered.closed_calls, ["call_1"]);
    let cp = main_checkpoint(&file);
    assert_eq!(cp["status"], "interrupted");
    assert_eq!(cp["replay"], "not_replayed");
    assert_eq!(logs(&file, "turn_checkpoint_recovered")[0].0, "warn");
    assert_eq!(mock.request_count(), 0, "nothing replayed");
    // A second open finds nothing to recover.
    assert!(
        ex.open_session(&mut file, "main")
            .unwrap()
            .recovered
            .is_none()
    );
    // The next turn's request is a valid conversation (the dangling call got its result).
    mock.push(Turn::text("resumed"));
    chat(&ex, &mut file, &mut session, "again", &Host::default())
        .await
        .unwrap();
    let body = serde_json::to_string(&mock.requests()[0].body).unwrap();
    assert!(body.contains("call_1") && body.contains("Interrupted"));
}

// ---------- compaction and clearing (§13.2) ----------

fn audit_rows(file: &AdfFile) -> Vec<adf_store::audit::AuditInfo> {
    file.audit_list().unwrap()
}

#[tokio::test]
async fn aud_02_aud_03_aud_08_prm_07_loop_compact_keeps_tail_audits_and_next_request_carries_summary()
 {
    let (_dir, mut file, mock) = setup(Wire::Anthropic).await;
    common::enable(&mut file, "loop_compact");
    mock.push_all([
        Turn::text("noted"),
        Turn::tool_call(
            "loop_compact",
            json!({"instructions": "keep the code 7Q verbatim"}),
        ),
        Turn::text("The code is 7Q; the owner wants a report."),
        Turn::text("compacted"),
    ]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let host = Host::default();
    chat(&ex, &mut file, &mut session, "Remember the code 7Q.", &host)
        .await
        .unwrap();
    let before = file.loop_rows("main").unwrap();
    let out = chat(&ex, &mut file, &mut session, "Compact now.", &host)
        .await
        .unwrap();
    assert_eq!(out.reply, "compacted");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 4);
    // AUD-03: the dedicated compaction request carries the instructions and the transcript.
    let (system, msgs) = request_view(Wire::Anthropic, &reqs[2].body);
    assert_eq!(system, adf_runtime::executor::COMPACTION_PROMPT);
    let ask = serde_json::to_string(&msgs).unwrap();
    assert!(ask.contains("keep the code 7Q verbatim") && ask.contains("Remember the code 7Q."));
    assert!(
        reqs[2]
            .body
            .get("tools")
            .is_none_or(|t| t.as_array().unwrap().is_empty())
    );

    let rows = file.loop_rows("main").unwrap();
    // Stream order: summary, then the preserved step (call + result), then the new snapshot
    // and the final reply. seq values of survivors are unchanged.
    let summary = &rows[0];
    assert!(first_text(summary).starts_with("[Loop Compacted, audited] The code is 7Q"));
    assert!(summary.ord.is_some());
    let call = &rows[1];
    assert_eq!(call.content[0]["name"], "loop_compact");
    assert!(
        summary.seq > call.seq,
        "a new row, sorted before the tail by ord"
    );
    assert!(before.iter().any(|r| r.seq == call.seq) || call.seq > before.last().unwrap().seq);
    assert_eq!(block_types(&rows[2]), ["tool_result"]);
    assert!(
        first_text(&rows[3]).starts_with("[Context: system_prompt]"),
        "session reset"
    );
    assert_eq!(rows.last().unwrap().role, "assistant");
    // Nothing of the first turn is left.
    assert!(
        rows.iter()
            .all(|r| first_text(r) != "Remember the code 7Q.")
    );
    // AUD-08: the removed rows are in a brotli loop:main snapshot with their seq range.
    let audits = audit_rows(&file);
    assert_eq!(audits.len(), 1);
    assert_eq!(audits[0].source, "loop:main");
    let data = file.audit_data(audits[0].id).unwrap();
    let seqs: Vec<i64> = data
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(audits[0].start_seq, seqs.iter().min().copied());
    assert_eq!(audits[0].end_seq, seqs.iter().max().copied());
    assert!(
        data.as_array()
            .unwrap()
            .iter()
            .any(|r| r["content_json"][0]["text"] == "Remember the code 7Q.")
    );
    // The next request carries the summary first, then the kept call and its result.
    let (_, msgs) = request_view(Wire::Anthropic, &reqs[3].body);
    assert!(
        msgs[0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("[Loop Compacted, audited]")
    );
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(msgs[1]["content"][0]["name"], "loop_compact");
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
}

#[tokio::test]
async fn aud_01_aud_02_automatic_compaction_at_the_threshold() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    set(&mut file, "context.compact_threshold", json!(300));
    set(&mut file, "context.audit.loop", json!(false));
    mock.push_all(common::compaction_script("SUMMARY one two"));
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let host = Host::default();
    for m in ["one", "two", "three"] {
        chat(&ex, &mut file, &mut session, m, &host).await.unwrap();
    }
    assert_eq!(mock.request_count(), 4);
    let reqs = mock.requests();
    assert_eq!(
        reqs[2].body["messages"][0]["content"],
        adf_runtime::executor::COMPACTION_PROMPT
    );
    let rows = file.loop_rows("main").unwrap();
    assert_eq!(first_text(&rows[0]), "[Loop Compacted] SUMMARY one two");
    assert!(
        audit_rows(&file).is_empty(),
        "audit.loop false: no snapshot"
    );
    // The preserved tail (last four rows before compaction) follows the summary.
    let texts_in_order: Vec<String> = rows.iter().map(first_text).collect();
    assert_eq!(&texts_in_order[1..4], ["r1", "two", "r2"]);
    // The next request carries the summary.
    let last = serde_json::to_string(&reqs[3].body).unwrap();
    assert!(last.contains("[Loop Compacted] SUMMARY one two") && last.contains("three"));
    assert!(!last.contains("\"one\""));
}

#[tokio::test]
async fn aud_05_aud_06_loop_clear_python_slice_audits_and_spares_other_loops() {
    let (_dir, mut file, mock) = setup(Wire::Anthropic).await;
    common::enable(&mut file, "loop_clear");
    file.loop_append(&adf_store::NewLoopRow {
        r#loop: "other",
        role: "user",
        content: &json!([{"type": "text", "text": "elsewhere"}]),
        model: None,
        tokens: None,
    })
    .unwrap();
    mock.push_all([
        Turn::text("r1"),
        Turn::tool_call("loop_clear", json!({"end": -2})),
        Turn::text("cleared"),
    ]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let host = Host::default();
    chat(&ex, &mut file, &mut session, "one", &host)
        .await
        .unwrap();
    let before: Vec<i64> = file
        .loop_rows("main")
        .unwrap()
        .iter()
        .map(|r| r.seq)
        .collect();
    chat(&ex, &mut file, &mut session, "two", &host)
        .await
        .unwrap();
    // At the call the loop held [one, snapshot, r1, two, call]: end=-2 cleared the first three.
    let rows = file.loop_rows("main").unwrap();
    assert_eq!(first_text(&rows[0]), "two");
    assert_eq!(rows[1].content[0]["name"], "loop_clear");
    let result = &rows[2].content[0];
    assert_eq!(result["type"], "tool_result");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("\"cleared\":3")
    );
    assert!(first_text(&rows[3]).starts_with("[Context: system_prompt]"));
    assert_eq!(file.loop_rows("other").unwrap().len(), 1);
    let audits = audit_rows(&file);
    assert_eq!(audits.len(), 1);
    assert_eq!(audits[0].source, "loop:main");
    assert_eq!(audits[0].entry_count, 3);
    assert_eq!(audits[0].start_seq, Some(before[0]));
    assert_eq!(audits[0].end_seq, Some(before[2]));
    // The request after the clear starts with the surviving trigger.
    let (_, msgs) = request_view(Wire::Anthropic, &mock.requests()[2].body);
    assert_eq!(msgs[0]["content"][0]["text"], "two");
}

// ---------- inner loops (§6.4) ----------

fn with_loops(file: &mut AdfFile, loops: Value) {
    set(file, "loops", loops);
}

#[tokio::test]
async fn stl_32_stl_46_stl_48_stl_50_stl_52_loop_send_wakes_an_inner_loop_with_its_own_transcript()
{
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    with_loops(
        &mut file,
        json!([
            {"name": "triage", "goal": "Sort incoming work.", "enabled": true, "tools": ["loop_send", "fs_read", "sys_update_config", "fs_delete"]},
            {"name": "writer", "goal": "Write things.", "enabled": true, "tools": []}
        ]),
    );
    set(&mut file, "autonomous", json!(true));
    mock.push_all([
        // main: one wake and one quiet send
        Turn::reply()
            .with_tool_call(
                "loop_send",
                json!({"to_loop": "triage", "content": "look at X", "wake": true}),
            )
            .with_tool_call(
                "loop_send",
                json!({"to_loop": "writer", "content": "later"}),
            ),
        Turn::tool_call("sys_set_state", json!({"state": "idle"})),
        // triage, woken
        Turn::tool_call(
            "loop_send",
            json!({"to_loop": "main", "content": "X sorted"}),
        ),
        Turn::text("triage done"),
    ]);
    let ex = executor(&file);
    let mut pool = LoopPool::new();
    let host = Host::default();
    let results = pool
        .run(
            &ex,
            &mut file,
            "main",
            Trigger::Owner("kick off the day".into()),
            &host,
        )
        .await
        .unwrap();
    let ends: Vec<(String, TurnEnd)> = results
        .into_iter()
        .map(|(l, r)| (l, r.unwrap().end))
        .collect();
    // STL-46: triage is not autonomous although the agent is: its text reply ends its turn.
    assert_eq!(
        ends,
        [
            ("main".to_owned(), TurnEnd::StateSet("idle".into())),
            ("triage".to_owned(), TurnEnd::Replied)
        ]
    );
    // STL-52: writer got its row but was never run.
    assert_eq!(mock.request_count(), 4);
    let writer = file.loop_rows("writer").unwrap();
    assert_eq!(writer.len(), 1);
    assert_eq!(first_text(&writer[0]), "[from loop:main] later");
    // STL-48/32: separate transcripts.
    let triage = file.loop_rows("triage").unwrap();
    assert_eq!(first_text(&triage[0]), "[from loop:main] look at X");
    assert!(first_text(&triage[1]).starts_with("[Context: system_prompt]"));
    assert!(first_text(&triage[1]).contains("Sort incoming work."));
    assert!(triage.iter().all(|r| r.r#loop == "triage"));
    let main = file.loop_rows("main").unwrap();
    assert!(
        main.iter()
            .any(|r| first_text(r) == "[from loop:triage] X sorted")
    );
    // STL-25: the triage request advertised only its effective tools.
    let triage_req = &mock.requests()[2];
    let mut tools = tool_names(Wire::OpenAi, &triage_req.body);
    tools.retain(|t| !t.is_empty());
    tools.sort();
    assert_eq!(tools, ["fs_read", "loop_send"]);
    let body = serde_json::to_string(&triage_req.body).unwrap();
    assert!(body.contains("look at X") && !body.contains("kick off the day"));
    // The checkpoint of the inner loop has its own key.
    assert!(
        file.meta_get("adf_runtime_turn_checkpoint:triage")
            .unwrap()
            .is_some()
    );
}

/// A host whose owner answers every `ask` only once two have been asked: a loop waiting for
/// the answer must let the other loop of its pool step meanwhile.
struct AnswersWhenBothAsked {
    asked: tokio::sync::watch::Sender<usize>,
}

impl TurnHost for AnswersWhenBothAsked {
    fn approver(&self) -> &dyn Approver {
        &adf_runtime::tools::approval::DenyAll
    }
    fn answer(&self, _question: &str) -> Option<String> {
        None
    }
    fn ask<'h>(&'h self, _question: &str) -> OwnerWait<'h, Option<String>> {
        self.asked.send_modify(|asked| *asked += 1);
        let mut asked = self.asked.subscribe();
        Box::pin(async move {
            asked.wait_for(|asked| *asked >= 2).await.ok()?;
            Some("teal".to_owned())
        })
    }
}

/// §6.4: the owner's wait holds no lock on the shared file. Two loops of one pool each call
/// `ask`, and the owner answers only once both have asked: the second loop can only get
/// there (its reply recorded, its call made) while the first waits. Holding the file
/// through the wait deadlocks here, which the timeout turns into a failure.
#[tokio::test]
async fn stl_32_a_loop_waiting_for_an_ask_answer_lets_the_other_loops_of_its_pool_step() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    with_loops(
        &mut file,
        json!([{"name": "side", "goal": "Ask too.", "enabled": true, "tools": ["ask"]}]),
    );
    mock.push_all([
        Turn::tool_call("ask", json!({"question": "Which colour?"})),
        Turn::tool_call("ask", json!({"question": "Which colour?"})),
    ]);
    mock.repeat(Turn::text("done"));
    let ex = executor(&file);
    let host = AnswersWhenBothAsked {
        asked: tokio::sync::watch::channel(0).0,
    };
    let trigger = || Trigger::Event {
        event_type: "test".into(),
        text: "pick a colour".into(),
    };
    let turns = vec![
        ("main".to_owned(), trigger()),
        ("side".to_owned(), trigger()),
    ];
    let results = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        LoopPool::new().run_many(&ex, &mut file, turns, &host),
    )
    .await
    .expect("a loop waiting for the owner held the other loop back")
    .unwrap();
    for (name, result) in results {
        assert_eq!(result.unwrap().end, TurnEnd::Replied, "{name}");
        let rows = file.loop_rows(&name).unwrap();
        assert!(
            rows.iter()
                .any(|r| r.content.to_string().contains(r#""content":"teal""#)),
            "{name} read the answer"
        );
    }
    assert_eq!(*host.asked.borrow(), 2);
}

#[tokio::test]
async fn stl_32_stl_43_two_inner_loops_run_side_by_side_with_their_own_transcripts_and_models() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    with_loops(
        &mut file,
        json!([
            {"name": "reader", "goal": "Read the news.", "enabled": true, "tools": ["fs_write"],
             "model": {"model_id": "small-model", "temperature": 0.1}},
            {"name": "writer", "goal": "Write the digest.", "enabled": true, "tools": ["fs_write"]}
        ]),
    );
    // Neither request is answered before both have arrived: loops run one after the other
    // would wait forever here, and the timeout below turns that into a failure.
    mock.hold_until(2);
    mock.repeat(Turn::text("noted"));
    let ex = executor(&file);
    let mut pool = LoopPool::new();
    let host = Host::default();
    let turns = vec![
        (
            "reader".to_owned(),
            Trigger::Event {
                event_type: "test".into(),
                text: "read A".into(),
            },
        ),
        (
            "writer".to_owned(),
            Trigger::Event {
                event_type: "test".into(),
                text: "write B".into(),
            },
        ),
    ];
    let results = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        pool.run_many(&ex, &mut file, turns, &host),
    )
    .await
    .expect("the two loops' requests were not in flight together")
    .unwrap();
    let ends: Vec<(String, TurnEnd)> = results
        .into_iter()
        .map(|(l, r)| (l, r.unwrap().end))
        .collect();
    assert_eq!(
        ends,
        [
            ("reader".to_owned(), TurnEnd::Replied),
            ("writer".to_owned(), TurnEnd::Replied)
        ]
    );
    // Separate transcripts: each loop holds its trigger, its prompt and its reply only.
    for (name, trigger, other) in [
        ("reader", "read A", "write B"),
        ("writer", "write B", "read A"),
    ] {
        let rows = file.loop_rows(name).unwrap();
        assert!(rows.iter().all(|r| r.r#loop == name));
        let texts: Vec<String> = rows.iter().map(first_text).collect();
        assert!(texts.iter().any(|t| t == trigger), "{name}: {texts:?}");
        assert!(!texts.iter().any(|t| t == other), "{name}: {texts:?}");
        assert_eq!(rows.last().unwrap().role, "assistant");
    }
    // STL-43 (model): the reader's request names its own model and temperature; the writer
    // uses the agent's.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let by_loop = |goal: &str| {
        requests
            .iter()
            .find(|r| r.body.to_string().contains(goal))
            .unwrap()
            .body
            .clone()
    };
    let reader = by_loop("Read the news.");
    assert_eq!(reader["model"], "small-model");
    assert_eq!(reader["temperature"], 0.1);
    let writer = by_loop("Write the digest.");
    assert_eq!(writer["model"], ex.model_id());
    assert_ne!(writer["model"], "small-model");
}

/// Runs one inner-loop turn whose model calls `sys_code` with `code`; the code's result.
async fn loop_code(
    file: &mut AdfFile,
    mock: &MockProvider,
    session: &mut Session,
    code: &str,
) -> Value {
    mock.push_all([
        Turn::tool_call("sys_code", json!({ "code": code })),
        Turn::text("done"),
    ]);
    let ex = executor(file);
    ex.run_turn(
        file,
        session,
        Trigger::Event {
            event_type: "test".into(),
            text: "run it".into(),
        },
        &Host::default(),
    )
    .await
    .unwrap();
    let rows = file.loop_rows(session.loop_name()).unwrap();
    let result = rows
        .iter()
        .rev()
        .find(|r| block_types(r) == ["tool_result"])
        .unwrap();
    let content = result.content[0]["content"].as_str().unwrap();
    serde_json::from_str::<Value>(content).unwrap()["result"].clone()
}

/// The code probes every profile method and reports each one's outcome.
const PROBE: &str = "const out = {};\n\
    for (const [m, args] of [['get_identity', { purpose: 'x' }], ['set_identity', { purpose: 'x', value: 'y' }], ['task_resolve', { task_id: 't', action: 'deny' }], ['attestation_list', {}], ['attestation_add', { attestation: {} }], ['attestation_issue', { subject: 'did:key:z6Mk', role: 'member' }], ['identity_status', {}], ['model_invoke', { prompt: 'p' }], ['loop_inject', { content: 'c' }]]) {\n\
      try { await adf[m](args); out[m] = 'ok' } catch (e) { out[m] = e.code }\n\
    }\n\
    out.fetch = typeof fetch;\n\
    return out;";

#[tokio::test]
async fn stl_28_stl_29_stl_30_stl_31_inner_loop_code_runs_under_the_inner_loop_profile() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    with_loops(
        &mut file,
        json!([{"name": "worker", "goal": "Work.", "enabled": true, "tools": ["sys_code"]}]),
    );
    // The agent: network on, model_invoke off (STL-28), loop_inject restricted (STL-30).
    set(&mut file, "code_execution.network", json!(true));
    set(&mut file, "code_execution.model_invoke", json!(false));
    set(
        &mut file,
        "code_execution.restricted_methods",
        json!(["loop_inject"]),
    );
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "worker").unwrap();
    let out = loop_code(&mut file, &mock, &mut session, PROBE).await;
    // STL-29: the profile's methods are off whatever the agent allows; no native fetch.
    for m in [
        "get_identity",
        "set_identity",
        "task_resolve",
        "attestation_list",
        "attestation_add",
        "attestation_issue",
    ] {
        assert_eq!(out[m], "DISABLED", "{m}: {out}");
    }
    assert_eq!(out["fetch"], "undefined", "{out}");
    // STL-28: the agent's own switch still applies to what the profile allows.
    assert_eq!(out["model_invoke"], "DISABLED", "{out}");
    assert_eq!(out["identity_status"], "ok", "{out}");
    // STL-30: restricted_methods is the union, so unauthorized loop code is refused.
    assert_eq!(out["loop_inject"], "REQUIRES_AUTHORIZED_CODE", "{out}");

    // The same probe from main's code: the agent's profile (only its own switches apply).
    let mut main = ex.open_session(&mut file, "main").unwrap();
    let main_out = loop_code(&mut file, &mock, &mut main, PROBE).await;
    assert_eq!(main_out["attestation_list"], "ok", "{main_out}");
    assert_eq!(main_out["fetch"], "function", "{main_out}");

    // STL-31: the profile follows the agent's config as it changes.
    set(&mut file, "code_execution.identity_status", json!(false));
    set(&mut file, "code_execution.restricted_methods", json!([]));
    let out = loop_code(&mut file, &mock, &mut session, PROBE).await;
    assert_eq!(out["identity_status"], "DISABLED", "{out}");
    assert_eq!(out["loop_inject"], "ok", "{out}");
    // attestation_issue stays restricted by the profile's own list even when the agent's is
    // empty (it is also off; the profile wins either way).
    assert_eq!(out["attestation_issue"], "DISABLED", "{out}");
}

#[tokio::test]
async fn cod_27_stored_keyed_injections_coalesce_until_delivered_and_after_restart() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    let env = adf_runtime::code::CodeEnv::with_builtins().await.unwrap();
    // Outside any turn, injections are stored at once (immediate mode), each its own row.
    let inject = async |file: &mut AdfFile, code: &str| {
        let run = adf_runtime::code::run_inline(
            file,
            &env,
            code,
            false,
            &adf_runtime::tools::approval::DenyAll,
            &adf_runtime::code::RunOptions::default(),
        )
        .await;
        assert!(run.result.is_ok(), "{:?}", run.result);
    };
    inject(
        &mut file,
        "await adf.loop_inject({ content: 'catalog v1', key: 'catalog' })",
    )
    .await;
    inject(
        &mut file,
        "await adf.loop_inject({ content: 'one-shot note' })",
    )
    .await;
    inject(
        &mut file,
        "await adf.loop_inject({ content: 'catalog v2', key: 'catalog' })",
    )
    .await;
    let stored: Vec<String> = file
        .loop_rows("main")
        .unwrap()
        .iter()
        .map(first_text)
        .collect();
    assert!(
        stored.iter().any(|t| t.ends_with("catalog v1")),
        "every version stays in the transcript for audit: {stored:?}"
    );

    mock.push_all([Turn::text("first"), Turn::text("second")]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    chat(&ex, &mut file, &mut session, "hello", &Host::default())
        .await
        .unwrap();
    let sent = |i: usize| serde_json::to_string(&mock.requests()[i].body).unwrap();
    assert!(sent(0).contains("catalog v2") && sent(0).contains("one-shot note"));
    assert!(
        !sent(0).contains("catalog v1"),
        "the pending v1 was replaced"
    );

    // Once delivered, a keyed value is history: a new version is added, not swapped in.
    inject(
        &mut file,
        "await adf.loop_inject({ content: 'catalog v3', key: 'catalog' })",
    )
    .await;
    // A restart: a fresh session rebuilds from the transcript.
    let mut session = ex.open_session(&mut file, "main").unwrap();
    chat(&ex, &mut file, &mut session, "again", &Host::default())
        .await
        .unwrap();
    let second = sent(1);
    assert!(!second.contains("catalog v1"), "{second}");
    assert_eq!(second.matches("catalog v2").count(), 1, "{second}");
    assert_eq!(second.matches("catalog v3").count(), 1, "{second}");
    assert_eq!(second.matches("one-shot note").count(), 1, "{second}");
}

#[tokio::test]
async fn stl_44_agent_start_kicks_enabled_autostart_loops_when_active() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    with_loops(
        &mut file,
        json!([
            {"name": "watcher", "goal": "Watch the feed.", "enabled": true, "autostart": true},
            {"name": "manual", "goal": "Wait to be asked.", "enabled": true, "autostart": false},
            {"name": "parked", "goal": "Parked.", "enabled": false, "autostart": true}
        ]),
    );
    let config = file.config().unwrap();
    assert_eq!(adf_runtime::executor::autostart_loops(&config), ["watcher"]);
    for state in ["idle", "hibernate"] {
        let mut other = config.clone();
        other["state"] = json!(state);
        assert!(
            adf_runtime::executor::autostart_loops(&other).is_empty(),
            "{state}"
        );
    }
    // The kick runs beside the owner's turn: a wake turn that reads the loop's goal.
    mock.repeat(Turn::text("ok"));
    let ex = executor(&file);
    let mut turns = vec![("main".to_owned(), Trigger::Owner("hi".into()))];
    turns.extend(adf_runtime::executor::wakes(
        adf_runtime::executor::autostart_loops(&config),
    ));
    let results = LoopPool::new()
        .run_many(&ex, &mut file, turns, &Host::default())
        .await
        .unwrap();
    let loops: Vec<&str> = results.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(loops, ["main", "watcher"]);
    assert!(results.iter().all(|(_, r)| r.is_ok()));
    assert!(
        mock.requests()
            .iter()
            .any(|r| r.body.to_string().contains("Watch the feed."))
    );
    assert!(file.loop_rows("manual").unwrap().is_empty());
}

#[tokio::test]
async fn aud_16_model_async_calls_return_a_task_and_run_after_the_batch() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    mock.push_all([
        Turn::reply()
            .with_tool_call(
                "fs_write",
                json!({"mode": "write", "path": "bg.txt", "content": "background", "_async": true}),
            )
            .with_tool_call("sys_code", json!({"code": "return 6 * 7", "_async": true})),
        Turn::text("started both"),
    ]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    chat(&ex, &mut file, &mut session, "go", &Host::default())
        .await
        .unwrap();
    // The model read task references with status running, in its transcript.
    let rows = file.loop_rows("main").unwrap();
    let results: Vec<Value> = rows
        .iter()
        .filter(|r| block_types(r) == ["tool_result"])
        .map(|r| serde_json::from_str(r.content[0]["content"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(results.len(), 2);
    assert!(
        results.iter().all(|r| r["status"] == "running"),
        "{results:?}"
    );
    // Both tasks ran and recorded their outcomes.
    let tasks = file.tasks(None).unwrap();
    let status = |tool: &str| {
        tasks
            .iter()
            .find(|t| t.tool == tool)
            .map(|t| (t.status.clone(), t.result.clone().unwrap_or_default()))
            .unwrap()
    };
    assert_eq!(status("fs_write").0, "completed");
    let (code_status, code_result) = status("sys_code");
    assert_eq!(code_status, "completed");
    assert!(code_result.contains("42"), "{code_result}");
    assert_eq!(
        file.file_read("bg.txt").unwrap().unwrap().content,
        b"background"
    );
}

#[tokio::test]
async fn stl_03_an_agent_that_is_off_or_suspended_runs_no_loop_at_all() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    with_loops(
        &mut file,
        json!([{"name": "worker", "goal": "Work.", "enabled": true, "tools": []}]),
    );
    mock.repeat(Turn::text("should not be asked"));
    let ex = executor(&file);
    for state in ["off", "suspended"] {
        set(&mut file, "state", json!(state));
        for loop_name in ["main", "worker"] {
            let mut session = ex.open_session(&mut file, loop_name).unwrap();
            let outcome = ex
                .run_turn(
                    &mut file,
                    &mut session,
                    Trigger::Event {
                        event_type: "test".into(),
                        text: "work".into(),
                    },
                    &Host::default(),
                )
                .await;
            assert!(
                matches!(outcome, Err(ExecutorError::NotRunnable { .. })),
                "{state}/{loop_name}: {outcome:?}"
            );
        }
    }
    assert_eq!(mock.request_count(), 0);
}

#[tokio::test]
async fn stl_35_dispatch_to_a_missing_or_disabled_loop_is_dropped_and_logged() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    with_loops(
        &mut file,
        json!([{"name": "sleepy", "goal": "Nap.", "enabled": false, "tools": []}]),
    );
    let ex = executor(&file);
    let mut pool = LoopPool::new();
    let host = Host::default();
    let served = pool
        .drain_wakes(&ex, &mut file, vec!["ghost".into(), "sleepy".into()], &host)
        .await
        .unwrap();
    assert!(served.is_empty());
    let mut session = ex.open_session(&mut file, "sleepy").unwrap();
    let err = ex
        .run_turn(
            &mut file,
            &mut session,
            Trigger::Event {
                event_type: "on_timer".into(),
                text: "tick".into(),
            },
            &host,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ExecutorError::LoopUnavailable(_)));
    assert_eq!(logs(&file, "loop_dispatch_dropped").len(), 3);
    assert_eq!(mock.request_count(), 0, "main was not woken instead");
    assert!(file.loop_rows("main").unwrap().is_empty());
    assert!(file.loop_rows("sleepy").unwrap().is_empty());
}

#[tokio::test]
async fn stl_07_inner_loop_sys_set_state_changes_only_its_executor() {
    let (_dir, mut file, mock) = setup(Wire::Anthropic).await;
    with_loops(
        &mut file,
        json!([{"name": "worker", "goal": "Work.", "enabled": true, "tools": ["sys_set_state"]}]),
    );
    mock.push(Turn::tool_call("sys_set_state", json!({"state": "off"})));
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "worker").unwrap();
    let out = ex
        .run_turn(
            &mut file,
            &mut session,
            Trigger::Event {
                event_type: "loop_send".into(),
                text: "[from loop:main] go".into(),
            },
            &Host::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.end, TurnEnd::StateSet("off".into()));
    assert_eq!(session.state(), ExecState::Stopped);
    assert_eq!(state(&file), "active");
}

#[test]
fn stl_24_stl_36_stl_37_stl_38_stl_39_stl_40_stl_41_stl_49_stl_53_stl_54_loop_tools_rules() {
    use adf_runtime::tools::{CallOutcome, ToolCaller, ToolRegistry};
    let (_dir, _path, mut file) = common::new_agent();
    let registry = ToolRegistry::with_builtins();
    let main = common::model();
    let inner = ToolCaller::Model {
        loop_name: "l0".into(),
    };
    let call = |file: &mut AdfFile, caller: &ToolCaller, name: &str, args: Value| {
        registry
            .call(
                file,
                caller,
                name,
                args,
                &adf_runtime::tools::approval::DenyAll,
            )
            .map(CallOutcome::into_value)
    };
    // STL-54: no loops: loop_list is just main, loop_send to anything errors.
    let list = call(&mut file, &main, "loop_list", json!({})).unwrap();
    assert_eq!(list["loops"].as_array().unwrap().len(), 1);
    assert_eq!(list["loops"][0]["you"], true);
    assert!(
        call(
            &mut file,
            &main,
            "loop_send",
            json!({"to_loop": "x", "content": "hi"})
        )
        .is_err()
    );
    // STL-24: main is refused for every action.
    for action in ["create", "get", "update", "delete"] {
        let err = call(
            &mut file,
            &main,
            "loop_manage",
            json!({"action": action, "name": "main", "config": {"goal": "g"}}),
        )
        .unwrap_err();
        assert!(err.message.contains("main is implicit"), "{action}");
    }
    // STL-37: 16 loops, not 17.
    for i in 0..16 {
        let out = call(
            &mut file,
            &main,
            "loop_manage",
            json!({"action": "create", "name": format!("l{i}"), "config": {"goal": "g", "autostart": false}}),
        )
        .unwrap();
        assert_eq!(
            out["loop"]["tools"],
            json!(["loop_send", "loop_list", "sys_set_state"])
        );
    }
    let err = call(
        &mut file,
        &main,
        "loop_manage",
        json!({"action": "create", "name": "l16", "config": {"goal": "g"}}),
    )
    .unwrap_err();
    assert!(err.message.contains("at most 16"));
    // STL-36: not from an inner loop.
    assert!(
        call(
            &mut file,
            &inner,
            "loop_manage",
            json!({"action": "get", "name": "l1"})
        )
        .is_err()
    );
    // STL-39: no renaming.
    let err = call(
        &mut file,
        &main,
        "loop_manage",
        json!({"action": "update", "name": "l1", "config": {"name": "zz"}}),
    )
    .unwrap_err();
    assert!(err.message.contains("renamed"));
    // STL-49: 48,000 characters pass, 48,001 do not.
    let ok = call(
        &mut file,
        &main,
        "loop_send",
        json!({"to_loop": "l1", "content": "x".repeat(48_000)}),
    )
    .unwrap();
    assert_eq!(ok["delivered"], true);
    assert!(
        call(
            &mut file,
            &main,
            "loop_send",
            json!({"to_loop": "l1", "content": "x".repeat(48_001)})
        )
        .is_err()
    );
    // STL-53: a disabled target lands the row, says so, never wakes.
    call(
        &mut file,
        &main,
        "loop_manage",
        json!({"action": "update", "name": "l2", "config": {"enabled": false}}),
    )
    .unwrap();
    let sent = call(
        &mut file,
        &main,
        "loop_send",
        json!({"to_loop": "l2", "content": "hi", "wake": true}),
    )
    .unwrap();
    assert_eq!(sent["wake"], false);
    assert!(sent["note"].as_str().unwrap().contains("disabled"));
    assert_eq!(file.loop_rows("l2").unwrap().len(), 1);
    // STL-40/41: delete archives the transcript whatever audit.loop says, keeps locked timers.
    set(&mut file, "context.audit.loop", json!(false));
    for locked in [true, false] {
        file.timer_insert(&adf_store::timers::NewTimer {
            schedule: &json!({"mode": "once", "at": 4_000_000_000_000i64}),
            next_wake_at: 4_000_000_000_000,
            payload: None,
            scope: &json!(["agent"]),
            lambda: None,
            warm: false,
            locked,
            r#loop: Some("l1"),
        })
        .unwrap();
    }
    let deleted = call(
        &mut file,
        &main,
        "loop_manage",
        json!({"action": "delete", "name": "l1"}),
    )
    .unwrap();
    assert_eq!(deleted["archived_rows"], 1);
    assert_eq!(
        (
            deleted["timers_deleted"].clone(),
            deleted["timers_kept"].clone()
        ),
        (json!(1), json!(1))
    );
    assert!(file.loop_rows("l1").unwrap().is_empty());
    assert!(
        file.audit_list()
            .unwrap()
            .iter()
            .any(|a| a.source == "loop:l1")
    );
    let timers = file.timers().unwrap();
    assert_eq!(timers.len(), 1);
    assert!(timers[0].locked);
    assert_eq!(logs(&file, "loop_timers_dropped").len(), 1);
    // STL-38: locked loops refuse changes with the exact sentence.
    set(&mut file, "locked_fields", json!(["loops"]));
    let err = call(
        &mut file,
        &main,
        "loop_manage",
        json!({"action": "delete", "name": "l3"}),
    )
    .unwrap_err();
    assert_eq!(err.message, "'loops' is locked.");
    assert!(
        call(
            &mut file,
            &main,
            "loop_manage",
            json!({"action": "get", "name": "l3"})
        )
        .is_ok()
    );
}

/// A listener on `127.0.0.1:0` that accepts every connection and closes it unanswered, so
/// each `sys_fetch` to it ends in an `error` log row; the count tells how often it was dialed.
async fn closing_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://127.0.0.1:{}/",
        listener.local_addr().unwrap().port()
    );
    let dialed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = dialed.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(socket);
        }
    });
    (url, dialed)
}

/// The `loop` column of every `sys_fetch` log row, oldest first.
fn fetch_log_loops(file: &AdfFile) -> Vec<(String, Option<String>)> {
    let logs = adf_store::test_support::tables(file).logs().unwrap();
    logs.into_iter()
        .filter(|l| l.origin.as_deref() == Some("sys_fetch"))
        .map(|l| (l.event.unwrap(), l.loop_name))
        .collect()
}

#[tokio::test]
async fn aud_19_sys_fetch_log_rows_of_an_inner_loop_carry_its_name_and_main_leaves_null() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    let (url, dialed) = closing_server().await;
    with_loops(
        &mut file,
        json!([{"name": "worker", "goal": "Work.", "enabled": true,
                "tools": ["sys_fetch", "sys_code"]}]),
    );
    let code = format!(
        "try {{ await adf.sys_fetch({{ url: '{url}' }}) }} catch (e) {{ return e.code }}\n\
         return 'fetched'"
    );
    mock.push_all([
        // worker: the model's own call (run_detached), an `_async` one (the executor's task
        // path) and one from the code it runs (the code runner's completion).
        Turn::tool_call("sys_fetch", json!({ "url": url })),
        Turn::tool_call("sys_fetch", json!({ "url": url, "_async": true })),
        Turn::tool_call("sys_code", json!({ "code": code })),
        Turn::text("worker done"),
        // main: the same call leaves `loop` NULL.
        Turn::tool_call("sys_fetch", json!({ "url": url })),
        Turn::text("main done"),
    ]);
    let ex = executor(&file);
    let host = Host::default();
    let mut worker = ex.open_session(&mut file, "worker").unwrap();
    ex.run_turn(&mut file, &mut worker, Trigger::Owner("go".into()), &host)
        .await
        .unwrap();
    let mut main = ex.open_session(&mut file, "main").unwrap();
    ex.run_turn(&mut file, &mut main, Trigger::Owner("go".into()), &host)
        .await
        .unwrap();
    assert_eq!(mock.remaining(), 0);
    let rows = fetch_log_loops(&file);
    assert!(
        dialed.load(std::sync::atomic::Ordering::SeqCst) >= 4,
        "every call reached the server: {rows:?}"
    );
    let worker = Some("worker".to_owned());
    assert_eq!(
        rows,
        [
            ("error".to_owned(), worker.clone()),
            ("error".to_owned(), worker.clone()),
            ("error".to_owned(), worker),
            ("error".to_owned(), None),
        ]
    );
}

#[tokio::test]
async fn stl_42_deleting_a_loop_whose_model_answer_is_in_flight_succeeds_and_aborts_its_turn() {
    let (_dir, mut file, main_mock) = setup(Wire::OpenAi).await;
    with_loops(
        &mut file,
        json!([{"name": "worker", "goal": "Work.", "enabled": true, "tools": []}]),
    );
    // The worker's model never answers (its request is held): only an abort ends its turn.
    let worker_mock = MockProvider::start(Wire::OpenAi).await;
    worker_mock.require_api_key(KEY);
    worker_mock.hold_until(u64::MAX);
    worker_mock.push(Turn::text("must never be recorded"));
    wire_up(&mut file, &worker_mock);
    let worker_ex = executor(&file);
    wire_up(&mut file, &main_mock);
    let main_ex = executor(&file);
    main_mock.push_all([
        Turn::tool_call("loop_manage", json!({"action": "delete", "name": "worker"})),
        Turn::text("deleted it"),
    ]);
    let host = Host::default();
    let mut worker = worker_ex.open_session(&mut file, "worker").unwrap();
    let mut main = main_ex.open_session(&mut file, "main").unwrap();
    let shared = adf_runtime::executor::SharedFile::new(&mut file);
    let worker_turn = worker_ex.run_turn_shared(
        &shared,
        &mut worker,
        Trigger::Event {
            event_type: "test".into(),
            text: "start working".into(),
        },
        &host,
    );
    // main deletes the worker only once the worker's request reached its model.
    let main_turn = async {
        worker_mock.requests_arrived(1).await;
        main_ex
            .run_turn_shared(&shared, &mut main, Trigger::Owner("drop it".into()), &host)
            .await
    };
    let (worker_out, main_out) = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        futures::future::join(worker_turn, main_turn),
    )
    .await
    .expect("the deleted loop's turn went on waiting for its model");
    drop(shared);
    assert_eq!(main_out.unwrap().reply, "deleted it");
    match worker_out {
        Err(ExecutorError::LoopStopped(name)) => assert_eq!(name, "worker"),
        other => panic!("the worker's turn was not aborted: {other:?}"),
    }
    // The delete went through: the loop is gone and its transcript archived, and the
    // aborted turn wrote nothing after it.
    let loops = file.config().unwrap()["loops"].clone();
    assert_eq!(loops, json!([]));
    assert!(file.loop_rows("worker").unwrap().is_empty());
    assert!(
        file.audit_list()
            .unwrap()
            .iter()
            .any(|a| a.source == "loop:worker")
    );
    let aborted: Vec<(String, Option<String>)> = adf_store::test_support::tables(&file)
        .logs()
        .unwrap()
        .into_iter()
        .filter(|l| l.event.as_deref() == Some("turn_aborted"))
        .map(|l| (l.target.unwrap(), l.loop_name))
        .collect();
    assert_eq!(aborted, [("worker".to_owned(), Some("worker".to_owned()))]);
    let checkpoint: Value = serde_json::from_str(
        &file
            .meta_get("adf_runtime_turn_checkpoint:worker")
            .unwrap()
            .unwrap()
            .value,
    )
    .unwrap();
    assert_eq!(checkpoint["status"], "interrupted", "{checkpoint}");
    assert_eq!(worker_mock.request_count(), 1);
}

/// A runtime's directory of hosted agents whose list the test changes.
#[derive(Debug, Default)]
struct Directory {
    agents: Mutex<Vec<adf_runtime::messaging::LocalAgent>>,
    /// The roster version it reports (`None`: keeps none).
    version: Mutex<Option<u64>>,
    /// How often the agents were listed.
    listed: std::sync::atomic::AtomicUsize,
}

impl Directory {
    fn host(&self, handle: &str, path: &std::path::Path, description: &str) {
        self.agents
            .lock()
            .unwrap()
            .push(adf_runtime::messaging::LocalAgent {
                handle: handle.into(),
                did: None,
                description: description.into(),
                path: path.to_path_buf(),
                tier: adf_runtime::messaging::Tier::Localhost,
                inbox_url: format!("http://127.0.0.1:1/agents/{handle}/inbox"),
                card: json!({}),
            });
    }
}

impl adf_runtime::messaging::Mesh for Directory {
    fn reachable_agents(
        &self,
        _sender: &std::path::Path,
    ) -> Vec<adf_runtime::messaging::LocalAgent> {
        self.listed
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.agents.lock().unwrap().clone()
    }
    fn roster_version(&self) -> Option<u64> {
        *self.version.lock().unwrap()
    }
    fn find(&self, _: &str, _: Option<&str>) -> Option<adf_runtime::messaging::LocalAgent> {
        None
    }
    fn inbox_url(&self, _: &str) -> Option<String> {
        None
    }
    fn deliver(
        &self,
        _: &adf_runtime::messaging::LocalAgent,
        _: &std::path::Path,
        _: Value,
    ) -> futures::future::BoxFuture<'static, adf_runtime::messaging::Delivery> {
        Box::pin(async { adf_runtime::messaging::Delivery::failed(None, "not in this test") })
    }
}

/// The texts of `loop_name`'s rows that list reachable agents, oldest first.
fn mesh_listings(file: &AdfFile, loop_name: &str) -> Vec<String> {
    file.loop_rows(loop_name)
        .unwrap()
        .iter()
        .map(first_text)
        .filter(|t| t.contains("agents you can reach"))
        .collect()
}

#[tokio::test]
async fn prm_33_main_is_told_the_reachable_agents_when_the_list_changes() {
    let (dir, mut file, mock) = setup(Wire::OpenAi).await;
    with_loops(
        &mut file,
        json!([{"name": "worker", "goal": "Work.", "enabled": true, "tools": ["msg_send"]}]),
    );
    mock.repeat(Turn::text("ok"));
    let mesh = Arc::new(Directory::default());
    let own = file.path().to_path_buf();
    mesh.host("me", &own, "this agent itself");
    mesh.host(
        "helper",
        &dir.path().join("helper.adf"),
        "Answers questions",
    );
    // Kept by the host across the executors it makes, as the daemon does per turn.
    let updates = adf_runtime::executor::MeshUpdates::new(mesh.clone());
    async fn turn_with(
        updates: &adf_runtime::executor::MeshUpdates,
        file: &mut AdfFile,
        loop_name: &str,
    ) {
        let ex = executor(file).with_mesh_updates(updates.clone());
        let mut session = ex.open_session(file, loop_name).unwrap();
        ex.run_turn(
            file,
            &mut session,
            Trigger::Owner("hi".into()),
            &Host::default(),
        )
        .await
        .unwrap();
    }
    turn_with(&updates, &mut file, "main").await;
    let listed = mesh_listings(&file, "main");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(
        listed[0].contains("- helper: Answers questions"),
        "{}",
        listed[0]
    );
    assert!(
        !listed[0].contains("- me"),
        "its own entry is left out: {}",
        listed[0]
    );
    // Unchanged: not repeated, even by a new executor.
    turn_with(&updates, &mut file, "main").await;
    assert_eq!(mesh_listings(&file, "main").len(), 1);
    // A new local agent: the next turn of main carries the new list; inner loops never do.
    mesh.host("scribe", &dir.path().join("scribe.adf"), "Writes reports");
    turn_with(&updates, &mut file, "worker").await;
    assert!(mesh_listings(&file, "worker").is_empty());
    turn_with(&updates, &mut file, "main").await;
    let listed = mesh_listings(&file, "main");
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(
        listed[1].contains("- helper: Answers questions\n- scribe: Writes reports"),
        "{}",
        listed[1]
    );
    // A mesh that keeps a roster version is listed again only when the version moved.
    *mesh.version.lock().unwrap() = Some(7);
    turn_with(&updates, &mut file, "main").await;
    let listed = mesh.listed.load(std::sync::atomic::Ordering::SeqCst);
    turn_with(&updates, &mut file, "main").await;
    assert_eq!(
        mesh.listed.load(std::sync::atomic::Ordering::SeqCst),
        listed
    );
    mesh.host("courier", &dir.path().join("courier.adf"), "Delivers");
    *mesh.version.lock().unwrap() = Some(8);
    turn_with(&updates, &mut file, "main").await;
    let listed = mesh_listings(&file, "main");
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(listed[2].contains("- courier: Delivers"), "{}", listed[2]);
    // Switched off: a change goes unannounced.
    set(
        &mut file,
        "context.dynamic_instructions.mesh_updates",
        json!(false),
    );
    mesh.host("auditor", &dir.path().join("auditor.adf"), "Checks");
    *mesh.version.lock().unwrap() = Some(9);
    turn_with(&updates, &mut file, "main").await;
    assert_eq!(mesh_listings(&file, "main").len(), 3);
}

#[tokio::test]
async fn aud_07_prm_07_a_session_reset_by_loop_clear_or_compaction_rereads_templated_files() {
    let (_dir, mut file, mock) = setup(Wire::Anthropic).await;
    common::enable(&mut file, "loop_clear");
    common::enable(&mut file, "loop_compact");
    set(
        &mut file,
        "instructions",
        json!("Standing notes: {{notes.md}}"),
    );
    let write_notes = |file: &mut AdfFile, text: &str| {
        file.file_write(
            adf_store::Caller::Owner,
            "notes.md",
            text.as_bytes(),
            &adf_store::FileWrite::default(),
        )
        .unwrap();
    };
    write_notes(&mut file, "NOTE-ONE");
    mock.push_all([
        Turn::text("read them"),
        // After the edit: the same session keeps its snapshot until loop_clear resets it.
        Turn::tool_call("loop_clear", json!({})),
        Turn::text("cleared"),
        // After another edit: compaction resets the session too.
        Turn::tool_call("loop_compact", json!({})),
        Turn::text("Summary of the conversation."),
        Turn::text("compacted"),
    ]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let host = Host::default();
    chat(&ex, &mut file, &mut session, "one", &host)
        .await
        .unwrap();
    write_notes(&mut file, "NOTE-TWO");
    chat(&ex, &mut file, &mut session, "two", &host)
        .await
        .unwrap();
    write_notes(&mut file, "NOTE-THREE");
    let out = chat(&ex, &mut file, &mut session, "three", &host)
        .await
        .unwrap();
    assert_eq!(out.reply, "compacted");
    let systems: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| request_view(Wire::Anthropic, &r.body).0)
        .collect();
    assert_eq!(systems.len(), 6);
    let notes = |system: &str| {
        ["NOTE-ONE", "NOTE-TWO", "NOTE-THREE"]
            .into_iter()
            .filter(|n| system.contains(n))
            .collect::<Vec<_>>()
    };
    // Requests 0-1: the first snapshot, edit or not; 2-3: after loop_clear; 4 is the
    // compaction request itself; 5: after compaction.
    assert_eq!(notes(&systems[0]), ["NOTE-ONE"]);
    assert_eq!(
        notes(&systems[1]),
        ["NOTE-ONE"],
        "a mid-session edit is not picked up"
    );
    assert_eq!(notes(&systems[2]), ["NOTE-TWO"], "loop_clear refreshed it");
    assert_eq!(notes(&systems[3]), ["NOTE-TWO"]);
    assert_eq!(systems[4], adf_runtime::executor::COMPACTION_PROMPT);
    assert_eq!(
        notes(&systems[5]),
        ["NOTE-THREE"],
        "compaction refreshed it"
    );
}

// ---------- owner abort ----------

/// A host whose owner aborts the turn while it waits for an approval: the wait ends in a
/// denial (as the daemon's does) and the host reports the turn aborted from then on.
#[derive(Default)]
struct AbortingHost {
    aborted: std::sync::atomic::AtomicBool,
}

impl Approver for AbortingHost {
    fn decide(&self, _: &mut AdfFile, _: &ApprovalRequest) -> Result<Decision, ToolError> {
        self.aborted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(Decision::Denied("the owner aborted the turn".into()))
    }
}

impl TurnHost for AbortingHost {
    fn approver(&self) -> &dyn Approver {
        self
    }
    fn answer(&self, _: &str) -> Option<String> {
        None
    }
    fn aborted(&self) -> bool {
        self.aborted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// An abort that ends an approval wait ends the turn at that call: the later call of the same
/// reply does not run, no model request follows (nothing is scripted for one: it would fail
/// the turn), and the checkpoint stays `in_progress` for recovery without replay.
#[tokio::test]
async fn an_abort_that_ends_an_approval_wait_ends_the_turn_at_that_call() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    mock.push(
        Turn::tool_call(
            "sys_update_config",
            json!({"path": "description", "value": "never"}),
        )
        .with_tool_call(
            "fs_write",
            json!({"path": "after-abort.md", "mode": "write", "content": "too late"}),
        ),
    );
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let host = AbortingHost::default();
    let err = ex
        .run_turn(
            &mut file,
            &mut session,
            Trigger::Owner("two calls".into()),
            &host,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ExecutorError::Aborted), "{err}");
    assert_eq!(mock.request_count(), 1, "no model request after the abort");
    assert!(file.file_read("after-abort.md").unwrap().is_none());
    let results: Vec<Value> = file
        .loop_rows("main")
        .unwrap()
        .iter()
        .flat_map(|row| row.content.as_array().cloned().unwrap_or_default())
        .filter(|block| block["type"] == "tool_result")
        .collect();
    assert_eq!(
        results.len(),
        1,
        "only the denied call has a result: {results:?}"
    );
    assert_eq!(results[0]["is_error"], true);
    let cp = main_checkpoint(&file);
    assert_eq!(cp["status"], "in_progress");
    assert!(logs(&file, "turn_error").is_empty());
    assert_eq!(session.state(), ExecState::Idle);
}

// ---------- failed and aborted turns in the transcript (issue 29.3, 29.4) ----------

/// The text of the loop's last row.
fn last_text(file: &AdfFile) -> String {
    let rows = file.loop_rows("main").unwrap();
    first_text(rows.last().unwrap())
}

/// Whether any request body the mock received mentions `needle`.
fn sent(mock: &MockProvider, needle: &str) -> bool {
    mock.requests()
        .iter()
        .any(|r| r.body.to_string().contains(needle))
}

#[tokio::test]
async fn stl_10_a_failed_turn_leaves_a_row_the_owner_sees_and_the_model_does_not() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    mock.push_all([
        Turn::unavailable(),
        Turn::unavailable(),
        Turn::unavailable(),
    ]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let host = Host::default();
    let err = chat(&ex, &mut file, &mut session, "hi", &host)
        .await
        .unwrap_err();
    assert!(matches!(&err, ExecutorError::Provider(e) if e.is_transient()));
    let retries: Vec<String> = host
        .log()
        .into_iter()
        .filter(|l| l.starts_with("retry"))
        .collect();
    assert_eq!(retries, ["retry 1", "retry 2"]);
    let row = last_text(&file);
    assert!(
        row.starts_with("[Context: turn_failed] turn failed: mock failed transiently (503)"),
        "{row}"
    );
    assert!(row.contains("send the message again later"), "{row}");
    let rows = file.loop_rows("main").unwrap();
    let failed = rows.last().unwrap();
    assert_eq!(failed.role, "user");
    assert_eq!(failed.content[0]["context"]["category"], "turn_failed");

    // The next turn runs as if the failure row were not there: the model never reads it.
    mock.push(Turn::text("back"));
    let out = chat(&ex, &mut file, &mut session, "again", &host)
        .await
        .unwrap();
    assert_eq!(out.reply, "back");
    assert!(sent(&mock, "again"));
    assert!(
        !sent(&mock, "turn_failed"),
        "the failure row is for the owner"
    );
    assert!(
        file.loop_rows("main")
            .unwrap()
            .iter()
            .any(|r| first_text(r).starts_with("[Context: turn_failed]")),
        "the row stays in the transcript"
    );
}

#[tokio::test]
async fn a_refused_local_model_server_fails_the_turn_fast_naming_its_url() {
    let (_dir, mut file, _mock) = setup(Wire::OpenAi).await;
    let url = adf_testkit::refused_base_url();
    set(
        &mut file,
        "providers",
        json!([{"id": "mock", "type": "openai-compatible", "name": "Mock", "baseUrl": url}]),
    );
    // The §5.20 defaults: five attempts from 15 s.
    set(&mut file, "recovery", json!({}));
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let host = Host::default();
    let started = std::time::Instant::now();
    let err = chat(&ex, &mut file, &mut session, "hi", &host)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(&err, ExecutorError::Provider(e) if e.is_transient()),
        "{err}"
    );
    assert_eq!(
        session.state(),
        ExecState::Idle,
        "§6.2: transient, back to idle"
    );
    let row = last_text(&file);
    assert!(
        row.starts_with(&format!(
            "[Context: turn_failed] turn failed: model server {url} refused the connection"
        )),
        "{row}"
    );
    assert!(row.contains("Start the model server"), "{row}");
    let retries: Vec<String> = host
        .log()
        .into_iter()
        .filter(|l| l.starts_with("retry"))
        .collect();
    assert_eq!(retries, ["retry 1"], "one quick retry");
    let warns = logs(&file, "provider_error");
    assert_eq!(warns.len(), 2, "the retry and the failure: {warns:?}");
}

/// A host that notes, at each retry, how many requests the model server had received.
struct Watching {
    mock: Arc<MockProvider>,
    seen_at_retry: Mutex<Vec<(usize, String, u32, u32)>>,
}

impl Approver for Watching {
    fn decide(&self, _: &mut AdfFile, _: &ApprovalRequest) -> Result<Decision, ToolError> {
        Ok(Decision::Denied("no".into()))
    }
}

impl TurnHost for Watching {
    fn approver(&self) -> &dyn Approver {
        self
    }
    fn answer(&self, _: &str) -> Option<String> {
        None
    }
    fn event(&self, event: &TurnEvent<'_>) {
        if let TurnEvent::Retry(n) = event {
            self.seen_at_retry.lock().unwrap().push((
                self.mock.request_count(),
                n.reason.clone(),
                n.attempt,
                n.max_attempts,
            ));
        }
    }
}

#[tokio::test]
async fn retries_reach_the_host_while_the_provider_waits() {
    let (_dir, mut file, mock) = setup(Wire::Anthropic).await;
    let mock = Arc::new(mock);
    mock.push_all([Turn::reset(), Turn::rate_limited(0), Turn::text("done")]);
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let host = Watching {
        mock: mock.clone(),
        seen_at_retry: Mutex::default(),
    };
    let out = ex
        .run_turn(&mut file, &mut session, Trigger::Owner("hi".into()), &host)
        .await
        .unwrap();
    assert_eq!(out.reply, "done");
    assert_eq!(
        *host.seen_at_retry.lock().unwrap(),
        vec![
            (1, "connection reset".to_owned(), 1, 3),
            (2, "rate limited (429)".to_owned(), 2, 3)
        ],
        "each retry is shown before the next attempt is sent"
    );
}

/// A host whose owner aborted the turn.
struct Aborting;

impl Approver for Aborting {
    fn decide(&self, _: &mut AdfFile, _: &ApprovalRequest) -> Result<Decision, ToolError> {
        Ok(Decision::Denied("aborted".into()))
    }
}

impl TurnHost for Aborting {
    fn approver(&self) -> &dyn Approver {
        self
    }
    fn answer(&self, _: &str) -> Option<String> {
        None
    }
    fn aborted(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn an_aborted_turn_leaves_one_row_whoever_records_it() {
    let (_dir, mut file, mock) = setup(Wire::OpenAi).await;
    let ex = executor(&file);
    let mut session = ex.open_session(&mut file, "main").unwrap();
    let err = ex
        .run_turn(
            &mut file,
            &mut session,
            Trigger::Owner("hi".into()),
            &Aborting,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ExecutorError::Aborted));
    assert_eq!(mock.request_count(), 0);
    assert!(
        last_text(&file).starts_with("[Context: turn_aborted] turn aborted by the owner"),
        "{}",
        last_text(&file)
    );
    let before = file.loop_rows("main").unwrap().len();
    // A host that cancelled the turn itself records it too, once.
    assert!(!adf_runtime::executor::record_turn_aborted(&mut file, "main").unwrap());
    assert_eq!(file.loop_rows("main").unwrap().len(), before);
    // On a loop whose last row says nothing of it, the row is written.
    mock.push(Turn::text("ok"));
    chat(&ex, &mut file, &mut session, "next", &Host::default())
        .await
        .unwrap();
    assert!(
        !sent(&mock, "turn_aborted"),
        "the abort row is for the owner"
    );
    assert!(adf_runtime::executor::record_turn_aborted(&mut file, "main").unwrap());
    assert!(last_text(&file).starts_with("[Context: turn_aborted]"));
}
