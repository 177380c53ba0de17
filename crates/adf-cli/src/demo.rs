//! `adf demo`: a guided tour that needs no API key and no network. It creates an agent in a
//! folder, gives it a lambda, a skill, memory and a counter, closes, reopens and validates it;
//! then creates a second agent and starts the daemon in-process (on 127.0.0.1, a free port):
//! a timer lambda writes a report, an `on_file_change` lambda reacts to it, the second agent's
//! `on_startup` lambda greets, and the daemon's events stream to the terminal. When a provider
//! is configured (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY` or `--provider-url`), one model turn
//! that uses a tool follows. It ends with what happened and the commands to look inside.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use adf_runtime::tools::approval::{ApproveAll, DenyAll};
use adf_runtime::tools::{CallOutcome, ToolCaller, ToolError, ToolRegistry, render};
use adf_store::{AdfFile, ConfigAction, CreateOptions, FileWrite, MetaProtection};
use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use crate::output::Output;

const LAMBDA: &str = "// Counts visits and writes a report; runs on the code path, no model needed.\n\
export async function main(args: { visitor: string }) {\n\
  const count = await adf.sys_set_meta({ key: 'visits', value: 1, inc: true });\n\
  await adf.fs_write({ path: 'data/report.md', mode: 'write', content: `# Report\\nvisits: ${count}\\n` });\n\
  return { count };\n\
}\n";

const SKILL: &str = "---\nname: weekly-report\ndescription: Write the weekly report from data/*.csv\n\
requires: [fs_read, fs_write]\n---\n# Weekly report\n\n1. Read every CSV under data/.\n2. Summarize.\n";

/// The timer's lambda: writes the report (no model, no key).
const TIMER_LAMBDA: &str = "// Runs on every fire of the demo timer (system scope).\n\
export async function main(event: any) {\n\
  const n = event.data.run_count;\n\
  await adf.fs_write({ path: 'data/report.md', mode: 'write', content: `# Report\\nrun ${n}\\n` });\n\
  return { run: n };\n\
}\n";

/// Reacts to report changes (an `on_file_change` system lambda).
const DIGEST_LAMBDA: &str = "// Runs when data/report.md changes; its own writes never wake it again.\n\
export async function main(event: any) {\n\
  await adf.fs_write({ path: 'data/digest.md', mode: 'append', content: `- ${event.data.path} changed (${event.data.size} bytes)\\n` });\n\
}\n";

/// The second agent's `on_startup` lambda.
const HELLO_LAMBDA: &str = "export async function main(event: any) {\n\
  await adf.fs_write({ path: 'hello.md', mode: 'write', content: `started by ${event.type}\\n` });\n\
}\n";

/// A model provider for the optional model turn.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProviderChoice {
    /// Any OpenAI-compatible server (`http://localhost:11434/v1` for Ollama).
    pub url: Option<String>,
    pub model: Option<String>,
}

/// Runs the tour in `dir` (a fresh temporary folder when `None`).
pub(crate) fn run(dir: Option<PathBuf>, provider: ProviderChoice, out: Output) -> Result<ExitCode> {
    let dir = demo_dir(dir)?;
    let path = dir.join("Demo Agent.adf");
    if path.exists() {
        std::fs::remove_file(&path)?;
    }
    let say = |text: &str| {
        if !out.json {
            println!("{text}");
        }
    };
    let mut file = create_agent(&dir, &path, &say)?;
    let registry = add_code_and_skill(&mut file, &say)?;
    let counted = show_protections(&mut file, &say)?;
    show_tools(&mut file, &say)?;
    edit_config(&mut file, &say)?;
    let errors = close_and_check(file, &path, &say)?;
    let live = live(&dir, &path, &provider, &say)?;
    print_summary(out, &path, registry, counted, errors, &live)?;
    Ok(ExitCode::SUCCESS)
}

/// The tour's folder: `dir` when given (created if needed), else a fresh one under the
/// system's temporary folder.
fn demo_dir(dir: Option<PathBuf>) -> Result<PathBuf> {
    let dir = match dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            dir
        }
        None => std::env::temp_dir().join(format!("adf-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Step 1: a new agent file with its identity, keys kept in the tour's own folder.
fn create_agent(dir: &Path, path: &Path, say: &dyn Fn(&str)) -> Result<AdfFile> {
    say("1. Creating an agent: one SQLite file holds its config, memory, files and records.");
    let mut file = AdfFile::create(
        path,
        &CreateOptions {
            description: Some("Shows what an .adf file holds".into()),
            ..CreateOptions::default()
        },
    )?;
    // The demo keeps its owner and runtime identities in its own folder, not in ~/.adf.
    let home = adf_runtime::home::RuntimeHome::at(dir.join("home"));
    home.ensure_owner()?;
    let keys = adf_runtime::identity::LocalKeys::from_home(&home)?;
    adf_runtime::identity::provision_new(&mut file, &keys)?;
    let config = file.config()?;
    say(&format!(
        "   {} {} (id {}, handle {})",
        config["icon"].as_str().unwrap_or_default(),
        path.display(),
        config["id"].as_str().unwrap_or_default(),
        config["handle"].as_str().unwrap_or_default()
    ));
    say(&format!(
        "   identity {} (signing key sealed for the owner and this runtime)",
        file.meta_get("adf_did")?
            .map(|e| e.value)
            .unwrap_or_default()
    ));

    Ok(file)
}

/// Steps 2 and 3: an authorized lambda and a skill; returns the skills registry it produced.
fn add_code_and_skill(file: &mut AdfFile, say: &dyn Fn(&str)) -> Result<Value> {
    say("2. Giving it a lambda and trusting it as code (the owner authorizes files, §4.3).");
    file.file_write(
        adf_store::Caller::Owner,
        "lib/report.ts",
        LAMBDA.as_bytes(),
        &FileWrite::default(),
    )?;
    file.file_set_authorized(adf_store::Caller::Owner, "lib/report.ts", true)?;

    say(
        "3. Installing a skill: a plain file write; the runtime indexes it into skills-registry.json.",
    );
    file.file_write(
        adf_store::Caller::Agent,
        "skills/weekly-report/SKILL.md",
        SKILL.as_bytes(),
        &FileWrite::default(),
    )?;
    let registry: serde_json::Value = serde_json::from_slice(
        &file
            .file_read("skills-registry.json")?
            .context("the registry is missing")?
            .content,
    )?;
    say(&format!("   catalog: {}", registry["skills"]));

    Ok(registry)
}

/// Step 4: protections stop the agent and not the owner; returns the visit counter.
fn show_protections(file: &mut AdfFile, say: &dyn Fn(&str)) -> Result<String> {
    say("4. Protections hold for the agent and give way to the owner:");
    file.meta_set(
        adf_store::Caller::Owner,
        "visits",
        "0",
        Some(MetaProtection::Increment),
    )?;
    let refused = file
        .meta_set(adf_store::Caller::Agent, "visits", "-5", None)
        .is_err();
    let counted = file.meta_increment(adf_store::Caller::Agent, "visits", 1.0)?;
    say(&format!(
        "   agent lowering an increment-only counter refused: {refused}; agent increment -> {counted}"
    ));
    let readme_kept = file
        .file_delete(adf_store::Caller::Agent, "README.md")
        .is_err();
    say(&format!(
        "   agent deleting README.md (no_delete) refused: {readme_kept}"
    ));

    Ok(counted)
}

/// Step 5: tool calls through the one pipeline, with its access rules.
fn show_tools(file: &mut AdfFile, say: &dyn Fn(&str)) -> Result<()> {
    say("5. The model's hands: tools run through one pipeline with the access rules of spec §8.7:");
    let tools = ToolRegistry::with_builtins();
    let model = ToolCaller::Model {
        loop_name: "main".into(),
    };
    let wrote = tools.call(
        file,
        &model,
        "fs_write",
        json!({ "path": "data/notes.md", "mode": "write", "content": "# Notes\nfirst entry\n" }),
        &DenyAll,
    );
    say(&format!(
        "   fs_write data/notes.md -> {}",
        outcome_text(wrote)
    ));
    let hidden = tools.call(
        file,
        &model,
        "fs_delete",
        json!({ "path": "data/notes.md" }),
        &DenyAll,
    );
    say(&format!(
        "   fs_delete (disabled by default) -> {}",
        outcome_text(hidden)
    ));
    let restricted = tools.call(
        file,
        &model,
        "sys_update_config",
        json!({ "path": "description", "value": "Edited by the agent", "_reason": "keep my card accurate" }),
        &ApproveAll,
    );
    say(&format!(
        "   sys_update_config (restricted: the owner approves) -> {}",
        outcome_text(restricted)
    ));
    let tasks = file.tasks(None)?;
    if let Some(task) = tasks.first() {
        say(&format!(
            "   approval recorded as task {} ({})",
            task.id, task.status
        ));
    }

    Ok(())
}

/// Step 6: config edits by dot path.
fn edit_config(file: &mut AdfFile, say: &dyn Fn(&str)) -> Result<()> {
    say("6. Editing config with a dot path; unknown fields survive, invalid values are refused:");
    file.config_set_path(
        adf_store::Caller::Owner,
        "model.temperature",
        ConfigAction::Set,
        json!(0.3),
    )?;
    let invalid = file
        .config_set_path(
            adf_store::Caller::Owner,
            "model.temperature",
            ConfigAction::Set,
            json!(5),
        )
        .is_err();
    say(&format!(
        "   temperature 0.3 accepted; 5 refused: {invalid}"
    ));

    Ok(())
}

/// Step 7: close cleanly, reopen and check; returns the check's errors.
fn close_and_check(file: AdfFile, path: &Path, say: &dyn Fn(&str)) -> Result<Vec<String>> {
    say("7. Closing cleanly (no -wal/-shm left), reopening and validating against the spec:");
    file.close()?;
    let sidecars = [
        adf_store::sidecar(path, "-wal"),
        adf_store::sidecar(path, "-shm"),
    ]
    .iter()
    .any(|p| p.exists());
    let file = AdfFile::open(path)?;
    let report = file.check()?;
    let errors: Vec<String> = report.errors().map(|f| f.message.clone()).collect();
    say(&format!(
        "   sidecars after close: {sidecars}; clean close seen on reopen: {}",
        file.open_report().clean_close
    ));
    say(&format!(
        "   check: {} error(s), {} warning(s)",
        errors.len(),
        report.warnings().count()
    ));
    for error in &errors {
        say(&format!("     - {error}"));
    }
    drop(file);

    Ok(errors)
}

/// The tour's summary: JSON with `--json`, else what happened and where to look next.
fn print_summary(
    out: Output,
    path: &Path,
    registry: Value,
    counted: String,
    errors: Vec<String>,
    live: &Live,
) -> Result<()> {
    let shown = path.display().to_string();
    let summary = json!({
        "file": shown,
        "registry": registry,
        "visits": counted,
        "check_errors": errors,
        "daemon": live.summary,
        "next": [
            format!("adf cat '{shown}' data/report.md"),
            format!("adf cat '{shown}' data/digest.md"),
            format!("adf timers '{shown}'"),
            format!("adf logs '{shown}'"),
            format!("adf cat '{}' hello.md", live.helper.display()),
            format!("adf info '{shown}'"),
            format!("adf files '{shown}'"),
            format!("adf cat '{shown}' lib/report.ts"),
            format!("adf meta get '{shown}'"),
            format!("adf config get '{shown}' tools.sys_update_config"),
            format!("adf check '{shown}'"),
        ],
    });
    out.emit(&summary, || {
        println!();
        println!("What happened:");
        for line in &live.story {
            println!("  - {line}");
        }
        println!();
        println!("Done. Look inside the agents with:");
        if let Some(next) = summary["next"].as_array() {
            for command in next {
                println!("  {}", command.as_str().unwrap_or_default());
            }
        }
    })?;
    Ok(())
}

fn outcome_text(outcome: Result<CallOutcome, ToolError>) -> String {
    match outcome {
        Ok(outcome) => render(&outcome.into_value()),
        Err(error) => format!("refused: {} ({})", error.message, error.code),
    }
}

/// What the daemon part of the tour did.
struct Live {
    summary: Value,
    story: Vec<String>,
    helper: PathBuf,
}

/// Part two: a second agent, the daemon in-process, a timer lambda, a reacting lambda, events
/// on the terminal, then (with a provider) one model turn.
fn live(dir: &Path, path: &Path, provider: &ProviderChoice, say: &dyn Fn(&str)) -> Result<Live> {
    say("8. Two agents living on their own in the daemon (no model, no key):");
    add_timer_and_reaction(path)?;
    let helper = dir.join("Helper.adf");
    if helper.exists() {
        std::fs::remove_file(&helper)?;
    }
    create_helper(&helper)?;
    say("   timer: every 300 ms, twice -> lib/timer-report.ts writes data/report.md");
    say(
        "   on_file_change data/report.md (include_self: writes by this agent's other lambdas count)",
    );
    say("     -> lib/digest.ts appends to data/digest.md");
    say("   Helper.adf: on_startup -> lib/hello.ts writes hello.md");

    let (events, fires, digested) = watch_daemon(dir, path, &helper, say)?;
    let mut story = Vec::new();
    story.push(format!(
        "the timer fired {fires} time(s); each fire ran lib/timer-report.ts, which wrote data/report.md"
    ));
    story.push(format!(
        "{digested} report write(s) woke lib/digest.ts (on_file_change), which appended to data/digest.md; its own writes did not wake it"
    ));
    story.push("loading Helper.adf fired on_startup: lib/hello.ts wrote hello.md".into());
    story.push(format!(
        "{events} events streamed; every file was closed cleanly at shutdown"
    ));

    let model = model_turn(path, provider, say)?;
    if let Some(line) = &model {
        story.push(line.clone());
    } else {
        story.push("no model turn: set OPENAI_API_KEY or ANTHROPIC_API_KEY, or pass --provider-url, to add one".into());
    }
    Ok(Live {
        summary: json!({ "timer_fires": fires, "digest_lines": digested, "events": events, "model_turn": model }),
        story,
        helper,
    })
}

/// The demo agent's part of step 8: a timer whose lambda writes the report, and an
/// `on_file_change` lambda that digests each report write.
fn add_timer_and_reaction(path: &Path) -> Result<()> {
    let now = adf_store::time::now_ms();
    let mut file = AdfFile::open(path)?;
    let owner = adf_store::Caller::Owner;
    for (lib, source) in [
        ("lib/timer-report.ts", TIMER_LAMBDA),
        ("lib/digest.ts", DIGEST_LAMBDA),
    ] {
        file.file_write(owner, lib, source.as_bytes(), &FileWrite::default())?;
    }
    file.config_set_path(
        owner,
        "triggers.on_timer",
        ConfigAction::Set,
        json!({ "enabled": true, "targets": [{ "scope": "system" }] }),
    )?;
    file.config_set_path(
        owner,
        "triggers.on_file_change",
        ConfigAction::Set,
        json!({ "enabled": true, "targets": [{ "scope": "system", "lambda": "lib/digest.ts:main",
                 "filter": { "watch": "data/report.md", "include_self": true } }] }),
    )?;
    file.timer_insert(&adf_store::timers::NewTimer {
        schedule: &json!({ "mode": "interval", "every_ms": 300, "max_runs": 2 }),
        next_wake_at: now + 300,
        payload: Some("write the report"),
        scope: &json!(["system"]),
        lambda: Some("lib/timer-report.ts:main"),
        warm: false,
        locked: false,
        r#loop: None,
    })?;
    file.close()?;
    Ok(())
}

/// The second agent: an `on_startup` lambda greets when the daemon loads it.
fn create_helper(helper: &Path) -> Result<()> {
    let mut file = AdfFile::create(
        helper,
        &CreateOptions {
            description: Some("Greets when the daemon loads it".into()),
            ..CreateOptions::default()
        },
    )?;
    let owner = adf_store::Caller::Owner;
    file.file_write(
        owner,
        "lib/hello.ts",
        HELLO_LAMBDA.as_bytes(),
        &FileWrite::default(),
    )?;
    file.config_set_path(
        owner,
        "triggers.on_startup",
        ConfigAction::Set,
        json!({ "enabled": true, "targets": [{ "scope": "system", "lambda": "lib/hello.ts:main" }] }),
    )?;
    file.close()?;
    Ok(())
}

/// Runs the daemon in-process with both agents until the timer is done and its writes are
/// digested (or 8 s pass), printing its events; returns (events seen, timer fires, digest
/// lines).
fn watch_daemon(
    dir: &Path,
    path: &Path,
    helper: &Path,
    say: &dyn Fn(&str),
) -> Result<(usize, i64, usize)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let home = adf_runtime::home::RuntimeHome::at(dir.join("home"));
    let front = adf_server::FrontDoor::for_home(&home, None)?;
    runtime.block_on(async {
        let daemon = adf_server::Daemon::new(home);
        let server =
            adf_server::RunningServer::start(daemon.clone(), "127.0.0.1", 0, front).await?;
        say(&format!(
            "   daemon listening on {} (events below)",
            server.url()
        ));
        let main = daemon.load(path).await?.agent;
        daemon.load(helper).await?;
        let mut cursor = 0;
        let mut seen = 0_usize;
        let mut fires: i64;
        let mut digested: usize;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(8);
        loop {
            for frame in daemon.events().since(cursor) {
                cursor = frame.cursor;
                seen += 1;
                let event = &frame.event;
                say(&format!(
                    "   event {:<18} {:<28} {}",
                    event.event_type, event.source, event.payload
                ));
            }
            let (timer_done, digest_lines) = main
                .store()
                .run(|file| {
                    let done = file.timers()?.iter().all(|t| t.expired);
                    let fires = file.timers()?.iter().map(|t| t.run_count).sum::<i64>();
                    let digest = file
                        .file_read("data/digest.md")?
                        .map(|f| String::from_utf8_lossy(&f.content).lines().count())
                        .unwrap_or(0);
                    Ok(((done, fires), digest))
                })
                .await?;
            fires = timer_done.1;
            digested = digest_lines;
            let drained = !main.triggers().stats().draining;
            if timer_done.0 && digest_lines >= 2 && drained {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                say("   (stopping after 8 s)");
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        server.shutdown().await?;
        anyhow::Ok((seen, fires, digested))
    })
}

/// One model turn that uses a tool, when a provider is configured; `None` otherwise.
fn model_turn(
    path: &Path,
    provider: &ProviderChoice,
    say: &dyn Fn(&str),
) -> Result<Option<String>> {
    let (provider_id, default_model) = if let Some(url) = &provider.url {
        (url.clone(), "default")
    } else if std::env::var_os("OPENAI_API_KEY").is_some() {
        ("openai".to_owned(), "gpt-4o-mini")
    } else if std::env::var_os("ANTHROPIC_API_KEY").is_some() {
        ("anthropic".to_owned(), "claude-3-5-haiku-latest")
    } else {
        return Ok(None);
    };
    let model = provider
        .model
        .clone()
        .unwrap_or_else(|| default_model.to_owned());
    say(&format!(
        "9. One model turn ({provider_id}, {model}) that uses a tool:"
    ));
    let mut file = AdfFile::open(path)?;
    let owner = adf_store::Caller::Owner;
    file.config_set_path(
        owner,
        "model.provider",
        ConfigAction::Set,
        json!(provider_id),
    )?;
    file.config_set_path(owner, "model.model_id", ConfigAction::Set, json!(model))?;
    // A tour should fail fast when the server is unreachable: one retry, not the default ladder.
    file.config_set_path(
        owner,
        "recovery",
        ConfigAction::Set,
        json!({ "max_attempts": 2, "base_delay_ms": 500 }),
    )?;
    let config = file.config()?;
    let retries = adf_runtime::executor::RetryLog::default();
    let resolved = match adf_providers::Resolver::new()
        .with_retry_observer(retries.observer())
        .resolve(&config, None)
    {
        Ok(resolved) => resolved,
        Err(error) => {
            file.close()?;
            say(&format!("   skipped: {error}"));
            return Ok(Some(format!("model turn skipped: {error}")));
        }
    };
    let executor = adf_runtime::executor::Executor::from_resolved(resolved, retries);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let host = DemoHost;
    let outcome = runtime.block_on(async {
        let mut session = executor.open_session(&mut file, "main")?;
        executor
            .run_turn(
                &mut file,
                &mut session,
                adf_runtime::executor::Trigger::Owner(
                    "Read data/digest.md with fs_read, then reply with one sentence about it."
                        .into(),
                ),
                &host,
            )
            .await
    });
    file.close()?;
    Ok(Some(match outcome {
        Ok(outcome) => {
            say(&format!("   reply: {}", outcome.reply.trim()));
            format!(
                "a model turn of {} step(s) read data/digest.md with fs_read",
                outcome.steps
            )
        }
        Err(error) => {
            say(&format!("   the turn failed: {error}"));
            format!("the model turn failed: {error}")
        }
    }))
}

struct DemoHost;

impl adf_runtime::executor::TurnHost for DemoHost {
    fn approver(&self) -> &dyn adf_runtime::tools::Approver {
        &DenyAll
    }

    fn answer(&self, _question: &str) -> Option<String> {
        None
    }
}
