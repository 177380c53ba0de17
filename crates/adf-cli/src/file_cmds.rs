//! Commands that act on an `.adf` file directly, as its owner (no daemon involved).

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::ExitCode;

use adf_store::check::Severity;
use adf_store::config::{self as store_config, ConfigAction};
use adf_store::{
    AdfFile, Caller, CreateOptions, FileProtection, FileWrite, MetaProtection, StoreError,
};
use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use crate::output::{Output, Table, clip, format_ms, format_size};
use crate::session::{open, open_read};
use crate::{ConfigCommand, MetaCommand};

/// `adf rm`: the owner may delete anything, but the store refuses a protected file until
/// `--force` says the owner means it.
pub(crate) fn rm(file: &Path, path: &str, force: bool, out: Output) -> Result<ExitCode> {
    done(out, &format!("removed {path}"), || {
        match open(file)?.file_delete_as_owner(path, force) {
            Err(StoreError::Protected { level, .. }) => {
                anyhow::bail!("{path} is {level}; use --force to delete it")
            }
            other => other.map(drop).map_err(Into::into),
        }
    })
}

/// `adf authorize` / `adf unauthorize`: the owner's trust in a file as code (§4.3).
pub(crate) fn set_authorized(
    file: &Path,
    path: &str,
    authorized: bool,
    out: Output,
) -> Result<ExitCode> {
    let verb = if authorized {
        "authorized"
    } else {
        "unauthorized"
    };
    done(out, &format!("{verb} {path}"), || {
        open(file)?.file_set_authorized(Caller::Owner, path, authorized)?;
        Ok(())
    })
}

fn done(out: Output, message: &str, action: impl FnOnce() -> Result<()>) -> Result<ExitCode> {
    action()?;
    out.emit(&json!({ "ok": true, "message": message }), || {
        println!("{message}")
    })?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn new(
    path: &Path,
    name: Option<String>,
    description: Option<String>,
    handle: Option<String>,
    out: Output,
) -> Result<ExitCode> {
    // Keys first, so a home problem never leaves a half-made file behind.
    let keys = crate::identity_cmds::keys_for_new()?;
    let mut file = AdfFile::create(
        path,
        &CreateOptions {
            name,
            description,
            handle,
            id: None,
        },
    )?;
    if let Err(error) = adf_runtime::identity::provision_new(&mut file, &keys) {
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(error).context("cannot provision the new agent's identity");
    }
    let config = file.config()?;
    let summary = json!({
        "path": path.display().to_string(),
        "id": config["id"],
        "name": config["name"],
        "handle": config["handle"],
        "icon": config["icon"],
        "did": file.meta_get("adf_did")?.map(|e| e.value),
    });
    file.close()?;
    out.emit(&summary, || {
        println!(
            "created {} {} ({})",
            summary["icon"].as_str().unwrap_or(""),
            path.display(),
            summary["name"].as_str().unwrap_or("")
        );
        println!("  id      {}", summary["id"].as_str().unwrap_or(""));
        println!("  handle  {}", summary["handle"].as_str().unwrap_or(""));
        match summary["did"].as_str() {
            Some(did) if !did.is_empty() => println!("  did     {did}"),
            _ => println!("  did     (none yet: no identity provisioned)"),
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn info(path: &Path, out: Output) -> Result<ExitCode> {
    let file = AdfFile::inspect(path)?;
    let meta = |key: &str| -> Result<Option<String>> { Ok(file.meta_get(key)?.map(|e| e.value)) };
    let config = file.config().unwrap_or(Value::Null);
    let schema = file.schema_version()?;
    let counts = if schema == adf_store::schema::SCHEMA_VERSION {
        serde_json::to_value(file.record_counts()?)?
    } else {
        Value::Null
    };
    let summary = json!({
        "path": path.display().to_string(),
        "id": config.get("id"),
        "name": config.get("name"),
        "handle": config.get("handle"),
        "icon": config.get("icon"),
        "description": config.get("description"),
        "state": config.get("state"),
        "model": { "provider": config.pointer("/model/provider"), "model_id": config.pointer("/model/model_id") },
        "adf_version": meta("adf_version")?,
        "schema_version": schema,
        "current_schema": adf_store::schema::SCHEMA_VERSION,
        "did": meta("adf_did")?,
        "owner_did": meta("adf_owner_did")?,
        "created_at": meta("adf_created_at")?,
        "updated_at": meta("adf_updated_at")?,
        "clean_close": file.open_report().clean_close,
        "counts": counts,
    });
    out.emit(&summary, || {
        let text = |v: &Value| {
            v.as_str().map(str::to_owned).unwrap_or_else(|| {
                if v.is_null() {
                    "-".into()
                } else {
                    v.to_string()
                }
            })
        };
        println!("{} {}", text(&summary["icon"]), text(&summary["name"]));
        let mut table = Table::new(&["field", "value"]);
        for (label, key) in [
            ("id", "id"),
            ("handle", "handle"),
            ("state", "state"),
            ("did", "did"),
            ("owner", "owner_did"),
            ("created", "created_at"),
            ("updated", "updated_at"),
        ] {
            table.row(vec![label.into(), text(&summary[key])]);
        }
        let model = format!(
            "{} / {}",
            text(&summary["model"]["provider"]),
            text(&summary["model"]["model_id"])
        );
        table.row(vec!["model".into(), model]);
        let schema_note = if schema < adf_store::schema::SCHEMA_VERSION {
            " (run `adf migrate`)"
        } else {
            ""
        };
        table.row(vec!["schema".into(), format!("{schema}{schema_note}")]);
        table.row(vec![
            "clean close".into(),
            summary["clean_close"].to_string(),
        ]);
        if let Some(counts) = summary["counts"].as_object() {
            for (key, value) in counts {
                table.row(vec![key.replace('_', " "), value.to_string()]);
            }
        }
        table.print();
    })?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn check(path: &Path, out: Output) -> Result<ExitCode> {
    let file = AdfFile::inspect(path)?;
    let mut report = file.check()?;
    report
        .findings
        .extend(crate::identity_cmds::check_findings(&file)?);
    // A config that cannot be read is already one of the report's findings; compute's
    // warnings need a readable one.
    if let (Ok(home), Ok(config)) = (adf_runtime::home::RuntimeHome::from_env(), file.config()) {
        report.findings.extend(
            adf_compute::check(&config, &home)
                .into_iter()
                .map(|message| adf_store::check::Finding {
                    severity: Severity::Warning,
                    rule: "§5.12",
                    message,
                }),
        );
    }
    let errors = report.errors().count();
    let warnings = report.warnings().count();
    let body = json!({ "path": path.display().to_string(), "ok": report.is_ok(), "errors": errors, "warnings": warnings, "findings": report.findings });
    out.emit(&body, || {
        for finding in &report.findings {
            let label = match finding.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            println!("{label:7} {:6} {}", finding.rule, finding.message);
        }
        println!(
            "{}: {errors} error(s), {warnings} warning(s)",
            path.display()
        );
    })?;
    Ok(if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub(crate) fn migrate(path: &Path, out: Output) -> Result<ExitCode> {
    let file = AdfFile::open(path)?;
    let report = file.open_report().clone();
    file.close()?;
    out.emit(&report, || {
        if report.migrated_steps.is_empty() {
            println!(
                "{} is already at schema {}",
                path.display(),
                adf_store::schema::SCHEMA_VERSION
            );
        } else {
            println!(
                "migrated {} from schema {} to {} ({} steps)",
                path.display(),
                report.schema_found,
                adf_store::schema::SCHEMA_VERSION,
                report.migrated_steps.len()
            );
        }
        for note in &report.notes {
            println!("  {note}");
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn files(path: &Path, prefix: &str, out: Output) -> Result<ExitCode> {
    let file = open_read(path)?;
    let list = file.file_list(prefix)?;
    out.emit(&list, || {
        let mut table = Table::new(&["path", "size", "protection", "auth", "mime", "updated"]);
        for info in &list {
            table.row(vec![
                info.path.clone(),
                format_size(info.size),
                info.protection.to_string(),
                if info.authorized {
                    "yes".into()
                } else {
                    "".into()
                },
                info.mime_type.clone().unwrap_or_default(),
                info.updated_at.clone(),
            ]);
        }
        table.print();
    })?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn cat(path: &Path, inner: &str) -> Result<ExitCode> {
    let file = open_read(path)?;
    let entry = file.file_read(inner)?.with_context(|| {
        format!(
            "no file '{inner}' in {}; list them with `adf files`",
            path.display()
        )
    })?;
    std::io::stdout().write_all(&entry.content)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn put(
    path: &Path,
    inner: &str,
    source: Option<&Path>,
    protection: Option<String>,
    mime: Option<String>,
    out: Output,
) -> Result<ExitCode> {
    let content = match source {
        Some(source) if source != Path::new("-") => {
            std::fs::read(source).with_context(|| format!("cannot read {}", source.display()))?
        }
        _ => {
            let mut buffer = Vec::new();
            std::io::stdin().read_to_end(&mut buffer)?;
            buffer
        }
    };
    let protection_if_new = protection
        .as_deref()
        .map(FileProtection::parse)
        .transpose()?;
    let mut file = open(path)?;
    let outcome = file.file_write(
        Caller::Owner,
        inner,
        &content,
        &FileWrite {
            mime_type: mime,
            protection_if_new,
        },
    )?;
    let verb = if outcome.created {
        "created"
    } else {
        "updated"
    };
    let message = format!("{verb} {inner} ({})", format_size(content.len() as i64));
    out.emit(
        &json!({ "ok": true, "path": inner, "created": outcome.created, "size": content.len() }),
        || println!("{message}"),
    )?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn meta(command: MetaCommand, out: Output) -> Result<ExitCode> {
    match command {
        MetaCommand::Get {
            file,
            key: Some(key),
        } => {
            let entry = open_read(&file)?
                .meta_get(&key)?
                .with_context(|| format!("no meta key '{key}'"))?;
            out.emit(&entry, || println!("{}", entry.value))?;
        }
        MetaCommand::Get { file, key: None } => {
            let entries = open_read(&file)?.meta_list()?;
            out.emit(&entries, || {
                let mut table = Table::new(&["key", "protection", "value"]);
                for entry in &entries {
                    table.row(vec![
                        entry.key.clone(),
                        entry.protection.to_string(),
                        clip(&entry.value, 80),
                    ]);
                }
                table.print();
            })?;
        }
        MetaCommand::Set {
            file,
            key,
            value,
            protection,
            force,
        } => {
            refuse_managed_key(&file, &key, force)?;
            let protection = protection
                .as_deref()
                .map(MetaProtection::parse)
                .transpose()?;
            open(&file)?.meta_set(Caller::Owner, &key, &value, protection)?;
            out.emit(&json!({ "ok": true, "key": key }), || println!("set {key}"))?;
        }
        MetaCommand::Rm { file, key, force } => {
            refuse_managed_key(&file, &key, force)?;
            open(&file)?.meta_delete(Caller::Owner, &key)?;
            out.emit(&json!({ "ok": true, "key": key }), || {
                println!("removed {key}")
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The command that keeps a readonly registry key right, for the keys an owner's hand-written
/// value would leave out of step with the rest of the file (§3.3 registry, §4.4).
fn managed_key_command(key: &str) -> Option<&'static str> {
    let base = key.split_once(':').map_or(key, |(base, _)| base);
    Some(match base {
        "adf_did" | "adf_did_history" | "adf_owner_did" | "adf_runtime_did" => {
            "the identity commands: `adf claim <file>` takes ownership (new DID, history kept), `adf identity status <file>` provisions a file without one"
        }
        "adf_handle" => "`adf config set <file> handle <value>`, which keeps config.handle in step",
        "adf_name" => "`adf config set <file> name <value>`, which keeps config.name in step",
        "adf_updated_at" => "any config write (`adf config set`), which stamps it",
        "adf_created_at" | "adf_parent_did" => "nothing: it is fixed when the file is created",
        "adf_effective_runtime" | "adf_runtime_turn_checkpoint" => {
            "the runtime, which writes it while the agent runs"
        }
        "adf_template_shipped" | "adf_template_description" | "adf_template_warning" => {
            "the template build, and instantiating the template removes it"
        }
        _ => return None,
    })
}

/// Refuses a hand write of a managed registry key unless `--force` says the owner means it.
/// Checked before the file is opened, so the refusal leaves it untouched.
fn refuse_managed_key(file: &Path, key: &str, force: bool) -> Result<()> {
    match managed_key_command(key) {
        Some(command) if !force => anyhow::bail!(
            "{}: '{key}' is a registry key other state depends on; change it with {command}. \
             Writing it by hand leaves a file `adf check` reports as broken; pass --force to do it anyway",
            file.display()
        ),
        _ => Ok(()),
    }
}

/// A command-line value: JSON when it parses, otherwise the text as a JSON string.
fn parse_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

pub(crate) fn config(command: ConfigCommand, out: Output) -> Result<ExitCode> {
    match command {
        ConfigCommand::Get { file, path } => {
            let config = open_read(&file)?.config()?;
            let value = match &path {
                Some(path) => store_config::get_path(&config, path)?
                    .cloned()
                    .with_context(|| format!("config has nothing at '{path}'"))?,
                None => config,
            };
            // A config value is JSON either way; --json only changes strings (quoted vs raw).
            match (&value, out.json) {
                (Value::String(text), false) => println!("{text}"),
                _ => println!("{}", serde_json::to_string_pretty(&value)?),
            }
        }
        ConfigCommand::Set {
            file,
            path,
            value,
            append,
            remove,
        } => {
            let action = match (append, remove) {
                (true, _) => ConfigAction::Append,
                (false, Some(index)) => ConfigAction::Remove { index },
                (false, None) => ConfigAction::Set,
            };
            let mut handle = open(&file)?;
            handle.config_set_path(Caller::Owner, &path, action, parse_value(&value))?;
            let message = match action {
                ConfigAction::Set => format!("Updated {path}."),
                ConfigAction::Append => format!("Appended to {path}."),
                ConfigAction::Remove { index } => format!("Removed index {index} from {path}."),
            };
            out.emit(&json!({ "ok": true, "message": message }), || {
                println!("{message}")
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The text of a content block for the transcript view.
fn block_text(block: &Value) -> String {
    match block.get("type").and_then(Value::as_str) {
        Some("text") => block
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        Some("thinking") => format!(
            "(thinking) {}",
            block
                .get("thinking")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ),
        Some("tool_use") => format!(
            "→ {}({})",
            block.get("name").and_then(Value::as_str).unwrap_or("?"),
            block.get("input").map(Value::to_string).unwrap_or_default()
        ),
        Some("tool_result") => {
            let content = block
                .get("content")
                .map(|c| {
                    c.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| c.to_string())
                })
                .unwrap_or_default();
            let marker = if block.get("is_error").and_then(Value::as_bool) == Some(true) {
                "✗"
            } else {
                "←"
            };
            format!("{marker} {content}")
        }
        Some(other) => format!("[{other}]"),
        None => block.to_string(),
    }
}

pub(crate) fn show_loop(
    path: &Path,
    loop_name: &str,
    context: bool,
    out: Output,
) -> Result<ExitCode> {
    let file = open_read(path)?;
    let rows = file.loop_rows(loop_name)?;
    out.emit(&rows, || {
        if rows.is_empty() {
            println!("(loop '{loop_name}' is empty)");
        }
        for row in &rows {
            let blocks = row.content.as_array().cloned().unwrap_or_default();
            let text: Vec<String> = blocks.iter().map(block_text).collect();
            let joined = text.join("\n  ");
            // How a turn ended is for the owner to read: never folded.
            let turn_end = joined.starts_with("[Context: turn_failed]")
                || joined.starts_with("[Context: turn_aborted]");
            let is_context = joined.starts_with("[Context:") && !turn_end;
            let shown = if is_context && !context {
                let label = joined.split(']').next().unwrap_or("[Context").to_owned() + "]";
                format!("{label} (folded; --context shows it)")
            } else {
                joined
            };
            let model = row
                .model
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default();
            println!(
                "[S{}] {} {}{model}",
                row.seq,
                format_ms(row.created_at),
                row.role
            );
            println!("  {shown}");
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

fn field(row: &serde_json::Map<String, Value>, key: &str) -> String {
    match row.get(key) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

pub(crate) fn messages(
    path: &Path,
    table_name: &str,
    limit: usize,
    out: Output,
) -> Result<ExitCode> {
    let file = open_read(path)?;
    let rows = file.table_rows(table_name, limit)?;
    out.emit(&rows, || {
        let peer = if table_name == "adf_inbox" {
            "from"
        } else {
            "to"
        };
        let time = if table_name == "adf_inbox" {
            "received_at"
        } else {
            "created_at"
        };
        let mut table = Table::new(&["id", "status", peer, "time", "content"]);
        for row in &rows {
            let when = row
                .get(time)
                .and_then(Value::as_i64)
                .map(format_ms)
                .unwrap_or_default();
            table.row(vec![
                field(row, "id"),
                field(row, "status"),
                clip(&field(row, peer), 40),
                when,
                clip(&field(row, "content"), 60),
            ]);
        }
        table.print();
    })?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn timers(path: &Path, out: Output) -> Result<ExitCode> {
    let file = open_read(path)?;
    let timers = file.timers()?;
    out.emit(&timers, || {
        let mut table = Table::new(&["id", "mode", "next", "runs", "scope", "lambda", "flags"]);
        for timer in &timers {
            let mut flags = Vec::new();
            if timer.locked {
                flags.push("locked");
            }
            if timer.expired {
                flags.push("expired");
            }
            if timer.warm {
                flags.push("warm");
            }
            table.row(vec![
                timer.id.to_string(),
                timer
                    .schedule
                    .get("mode")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned(),
                format_ms(timer.next_wake_at),
                timer.run_count.to_string(),
                timer.scope.to_string(),
                timer.lambda.clone().unwrap_or_default(),
                flags.join(","),
            ]);
        }
        table.print();
    })?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn tasks(path: &Path, status: Option<&str>, out: Output) -> Result<ExitCode> {
    let file = open_read(path)?;
    let tasks = file.tasks(status)?;
    out.emit(&tasks, || {
        let mut table = Table::new(&["id", "tool", "status", "created", "origin"]);
        for task in &tasks {
            table.row(vec![
                task.id.clone(),
                task.tool.clone(),
                task.status.clone(),
                format_ms(task.created_at),
                task.origin.clone().unwrap_or_default(),
            ]);
        }
        table.print();
    })?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn logs(path: &Path, limit: usize, out: Output) -> Result<ExitCode> {
    let file = open_read(path)?;
    let rows = file.table_rows("adf_logs", limit)?;
    out.emit(&rows, || {
        let mut table = Table::new(&["time", "level", "origin", "event", "message"]);
        for row in rows.iter().rev() {
            let when = row
                .get("created_at")
                .and_then(Value::as_i64)
                .map(format_ms)
                .unwrap_or_default();
            table.row(vec![
                when,
                field(row, "level"),
                field(row, "origin"),
                field(row, "event"),
                clip(&field(row, "message"), 80),
            ]);
        }
        table.print();
    })?;
    Ok(ExitCode::SUCCESS)
}
