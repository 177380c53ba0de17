//! `adf chat FILE [MESSAGE]`: talk to an agent in this process, no daemon (spec §6).
//!
//! The model comes from the agent's `model.provider` (resolved against `config.providers`, the
//! built-in ids or a URL); the key from the agent's sealed `provider:<id>:apiKey` when the file
//! has one and this installation can open its credentials, else the provider type's environment
//! variable. Reply text streams to stdout; tool calls, results and retries ("retrying in 4 s
//! (2/5): connection reset") go to stderr as they happen, and a failed turn ends with "error:
//! turn failed: …" there (its `[Context: turn_failed]` row is in the transcript). Approvals and `ask` questions read the owner's answer from the next line of stdin
//! (the terminal, or a script's pipe), unless `--approve-all`, `--deny-all` or `--answer` say
//! what to do. Without MESSAGE, every stdin line is a message until end of input.
//!
//! Each invocation is one session: the system prompt is snapshotted once and recorded as a
//! `[Context: system_prompt]` row (§1.5). Opening the session recovers a turn an earlier
//! process left `in_progress` (it is marked `interrupted` and not replayed).

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Mutex;

use adf_providers::{ApiKey, Resolver};
use adf_runtime::executor::{
    Executor, LoopPool, RetryLog, Trigger, TurnEnd, TurnEvent, TurnHost, TurnOutcome,
};
use adf_runtime::tools::{ApprovalRequest, Approver, Decision, ToolError};
use adf_store::AdfFile;
use anyhow::{Context as _, Result, anyhow};
use serde_json::{Value, json};

use crate::output::{Output, clip};

/// How approvals are decided in a chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChatApprovals {
    /// Ask on the terminal (the next stdin line: y/yes approves).
    Ask,
    ApproveAll,
    DenyAll,
}

/// Options of `adf chat`.
#[derive(Debug, Clone)]
pub(crate) struct ChatOptions {
    pub message: Option<String>,
    pub loop_name: String,
    pub approvals: ChatApprovals,
    /// Answer every `ask` with this text instead of reading stdin.
    pub answer: Option<String>,
}

/// The owner's side of the chat.
struct ChatHost {
    approvals: ChatApprovals,
    answer: Option<String>,
    json: bool,
    /// Whether the reply line is open on stdout (so tool lines start on a fresh line).
    mid_line: Mutex<bool>,
}

impl ChatHost {
    fn end_line(&self) {
        let mut mid = self.mid_line.lock().unwrap_or_else(|e| e.into_inner());
        if *mid {
            println!();
            *mid = false;
        }
    }

    fn read_line(&self, prompt: &str) -> Option<String> {
        self.end_line();
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_owned()),
        }
    }
}

impl Approver for ChatHost {
    fn decide(
        &self,
        _file: &mut AdfFile,
        request: &ApprovalRequest,
    ) -> Result<Decision, ToolError> {
        let mut args = request.args.clone();
        let reason = args
            .as_object_mut()
            .and_then(|o| o.remove("_reason"))
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| "(no reason given)".into());
        let kind = request
            .approval_meta
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("restricted");
        self.end_line();
        eprintln!(
            "approval needed [{kind}]: {}({args}) — reason: {reason} (task {})",
            request.tool, request.task_id
        );
        let decision = match self.approvals {
            ChatApprovals::ApproveAll => {
                eprintln!("  approved (--approve-all)");
                Decision::Approved
            }
            ChatApprovals::DenyAll => {
                eprintln!("  denied (--deny-all)");
                Decision::Denied("denied by --deny-all".into())
            }
            ChatApprovals::Ask => match self.read_line("  approve? [y/N] ") {
                Some(line) if matches!(line.trim(), "y" | "Y" | "yes") => Decision::Approved,
                Some(_) => Decision::Denied("the owner declined".into()),
                None => Decision::Denied("no answer from the owner (end of input)".into()),
            },
        };
        Ok(decision)
    }
}

impl TurnHost for ChatHost {
    fn approver(&self) -> &dyn Approver {
        self
    }

    fn answer(&self, question: &str) -> Option<String> {
        self.end_line();
        eprintln!("question from the agent: {question}");
        if let Some(answer) = &self.answer {
            eprintln!("  answered with --answer: {answer}");
            return Some(answer.clone());
        }
        self.read_line("  your answer: ")
    }

    fn event(&self, event: &TurnEvent<'_>) {
        if self.json {
            return;
        }
        match event {
            TurnEvent::TextDelta(text) => {
                print!("{text}");
                let _ = std::io::stdout().flush();
                *self.mid_line.lock().unwrap_or_else(|e| e.into_inner()) = !text.ends_with('\n');
            }
            TurnEvent::ToolCall(call) => {
                self.end_line();
                eprintln!(
                    "→ {}({})",
                    call.name,
                    clip(&without_reason(&call.input), 160)
                );
            }
            TurnEvent::ToolResult {
                content, is_error, ..
            } => {
                let mark = if *is_error { "✗" } else { "←" };
                eprintln!("{mark} {}", clip(content, 200));
            }
            TurnEvent::Say(message) => {
                self.end_line();
                println!("{message}");
            }
            TurnEvent::Retry(notice) => {
                self.end_line();
                eprintln!("… {}", notice.describe());
            }
            TurnEvent::StreamRestarted(error) => {
                self.end_line();
                eprintln!("… the reply stream broke ({error}); asking again");
            }
            TurnEvent::Compacted(outcome) => {
                self.end_line();
                eprintln!(
                    "… compacted loop '{}': {} rows summarized",
                    outcome.loop_name, outcome.removed
                );
            }
            _ => {}
        }
    }
}

fn without_reason(input: &Value) -> String {
    let mut input = input.clone();
    if let Some(o) = input.as_object_mut() {
        o.remove("_reason");
    }
    input.to_string()
}

/// The agent's own key for its provider, when the file holds one this installation can open.
/// Anything that stops us (no home, a foreign file) just means "no agent key": the resolver
/// then tries the runtime settings and the environment.
fn agent_key(file: &mut AdfFile, config: &Value) -> Option<ApiKey> {
    let id = Resolver::provider_id(config);
    let purpose = format!("provider:{id}:apiKey");
    let listed = adf_runtime::identity::list_purposes(file).ok()?;
    if !listed.iter().any(|p| p.purpose == purpose) {
        return None;
    }
    let home = adf_runtime::home::RuntimeHome::from_env().ok()?;
    let keys = adf_runtime::identity::LocalKeys::from_home(&home).ok()?;
    let open = adf_runtime::identity::open_identity(file, &keys).ok()?;
    let value = adf_runtime::identity::read_credential(file, &open, &purpose).ok()??;
    let text = String::from_utf8(value.to_vec()).ok()?;
    Some(ApiKey::new(text.trim()))
}

fn end_label(end: &TurnEnd) -> String {
    match end {
        TurnEnd::Replied => "replied".into(),
        TurnEnd::StateSet(state) => format!("state:{state}"),
        TurnEnd::AutonomousIdle => "autonomous_idle".into(),
        TurnEnd::Suspended => "suspended".into(),
    }
}

/// Runs `adf chat`.
pub(crate) fn run(path: &Path, options: ChatOptions, out: Output) -> Result<ExitCode> {
    let mut file = crate::session::open(path)?;
    crate::session::warn_not_run(&file);
    let config = file.config()?;
    let key = agent_key(&mut file, &config);
    let retries = RetryLog::default();
    let resolved = Resolver::new()
        .with_retry_observer(retries.observer())
        .resolve(&config, key)
        .context("cannot reach the agent's model")?;
    let executor = Executor::from_resolved(resolved, retries)
        .with_registry(std::sync::Arc::new(crate::tool_cmds::registry()));
    let host = ChatHost {
        approvals: options.approvals,
        answer: options.answer.clone(),
        json: out.json,
        mid_line: Mutex::new(false),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let mut pool = LoopPool::new();
    let session = pool.session(&executor, &mut file, &options.loop_name)?;
    if let Some(recovered) = &session.recovered {
        eprintln!(
            "note: the previous turn ({}) was interrupted; it was not replayed{}",
            recovered.checkpoint.id,
            if recovered.closed_calls.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} unfinished tool call(s) marked interrupted)",
                    recovered.closed_calls.len()
                )
            }
        );
    }
    let mut failed = false;
    // Starting the agent kicks its autostart loops (§6.4); they run beside the first turn.
    let mut kicks = adf_runtime::executor::wakes(adf_runtime::executor::autostart_loops(&config));
    kicks.retain(|(name, _)| *name != options.loop_name);
    let mut turn = |file: &mut AdfFile, text: String| -> Result<()> {
        let mut turns = vec![(options.loop_name.clone(), Trigger::Owner(text))];
        turns.append(&mut kicks);
        let results = runtime.block_on(pool.run_many(&executor, file, turns, &host))?;
        host.end_line();
        for (loop_name, result) in results {
            match result {
                Ok(outcome) => report(&loop_name, &outcome, out),
                Err(error) => {
                    failed = true;
                    if out.json {
                        println!(
                            "{}",
                            json!({ "loop": loop_name, "error": error.to_string() })
                        );
                    }
                    eprintln!("error: turn failed: {}", anyhow!(error));
                }
            }
        }
        Ok(())
    };
    match options.message {
        Some(message) => turn(&mut file, message)?,
        None => {
            let interactive = std::io::stdin().is_terminal();
            loop {
                if interactive {
                    eprint!("> ");
                    let _ = std::io::stderr().flush();
                }
                let mut line = String::new();
                if std::io::stdin().lock().read_line(&mut line)? == 0 {
                    break;
                }
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                turn(&mut file, line.to_owned())?;
            }
        }
    }
    file.close()?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn report(loop_name: &str, outcome: &TurnOutcome, out: Output) {
    if out.json {
        println!(
            "{}",
            json!({
                "loop": loop_name,
                "reply": outcome.reply,
                "end": end_label(&outcome.end),
                "steps": outcome.steps,
            })
        );
        return;
    }
    match &outcome.end {
        TurnEnd::Replied => {}
        TurnEnd::StateSet(state) => eprintln!("(the agent set its state to {state})"),
        TurnEnd::AutonomousIdle => {
            eprintln!("(four replies without tool calls: the agent is now idle)")
        }
        TurnEnd::Suspended => eprintln!(
            "(limits.max_active_turns reached: the agent is suspended; resume it with `adf config set FILE state active`)"
        ),
    }
}
