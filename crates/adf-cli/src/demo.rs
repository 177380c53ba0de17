//! `adf demo`: a guided tour that needs no API key and no network. It creates an agent in a
//! folder, gives it a lambda, a skill, memory and a counter, closes and reopens it, validates
//! it, and prints the commands to look inside.
//!
//! The runtime parts (model turns, lambdas running, timers firing, the daemon) join the tour as
//! they land; until then the tour covers the file, which is the agent's whole body.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use adf_runtime::tools::approval::{ApproveAll, DenyAll};
use adf_runtime::tools::{CallOutcome, Caller, ToolError, ToolRegistry, render};
use adf_store::{AdfFile, ConfigAction, CreateOptions, FileWrite, MetaProtection};
use anyhow::{Context as _, Result};
use serde_json::json;

use crate::output::Output;

const LAMBDA: &str = "// Counts visits and writes a report; runs on the code path, no model needed.\n\
export async function main(args: { visitor: string }) {\n\
  const count = await adf.sys_set_meta({ key: 'visits', value: 1, inc: true });\n\
  await adf.fs_write({ path: 'data/report.md', mode: 'write', content: `# Report\\nvisits: ${count}\\n` });\n\
  return { count };\n\
}\n";

const SKILL: &str = "---\nname: weekly-report\ndescription: Write the weekly report from data/*.csv\n\
requires: [fs_read, fs_write]\n---\n# Weekly report\n\n1. Read every CSV under data/.\n2. Summarize.\n";

/// Runs the tour in `dir` (a fresh temporary folder when `None`).
pub fn run(dir: Option<PathBuf>, out: Output) -> Result<ExitCode> {
    let dir = match dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            dir
        }
        None => std::env::temp_dir().join(format!("adf-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("Demo Agent.adf");
    if path.exists() {
        std::fs::remove_file(&path)?;
    }
    let say = |text: &str| {
        if !out.json {
            println!("{text}");
        }
    };

    say("1. Creating an agent: one SQLite file holds its config, memory, files and records.");
    let mut file = AdfFile::create(
        &path,
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

    say("5. The model's hands: tools run through one pipeline with the access rules of spec §8.7:");
    let tools = ToolRegistry::with_builtins();
    let model = Caller::Model {
        loop_name: "main".into(),
    };
    let wrote = tools.call(
        &mut file,
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
        &mut file,
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
        &mut file,
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

    say("7. Closing cleanly (no -wal/-shm left), reopening and validating against the spec:");
    file.close()?;
    let sidecars = [sidecar(&path, "-wal"), sidecar(&path, "-shm")]
        .iter()
        .any(|p| p.exists());
    let file = AdfFile::open(&path)?;
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

    let shown = path.display().to_string();
    let summary = json!({
        "file": shown,
        "registry": registry,
        "visits": counted,
        "check_errors": errors,
        "next": [
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
        println!("Done. Look inside the agent with:");
        if let Some(next) = summary["next"].as_array() {
            for command in next {
                println!("  {}", command.as_str().unwrap_or_default());
            }
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

fn outcome_text(outcome: Result<CallOutcome, ToolError>) -> String {
    match outcome {
        Ok(outcome) => render(&outcome.into_value()),
        Err(error) => format!("refused: {} ({})", error.message, error.code),
    }
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
