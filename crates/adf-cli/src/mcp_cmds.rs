//! `adf mcp add|list|restart|remove|review FILE …`: the owner's MCP servers of one agent file.
//! The tool registry the file commands run with (built-ins, `adf_shell` and the agent's MCP
//! tools) is `tool_cmds::registry`.

use std::path::Path;
use std::process::ExitCode;

use adf_mcp::Supervisor;
use adf_mcp::install::{InstallRequest, Kind};
use adf_mcp::manage::Manager;
use adf_runtime::home::RuntimeHome;
use anyhow::{Context as _, Result};
use serde_json::json;

use crate::McpCommand;
use crate::output::Output;

fn split_pair(text: &str, what: &str) -> Result<(String, String)> {
    let (key, value) = text
        .split_once('=')
        .with_context(|| format!("{what} takes NAME=VALUE, got '{text}'"))?;
    Ok((key.to_owned(), value.to_owned()))
}

/// Runs one `adf mcp` command.
pub(crate) fn run(command: McpCommand, out: Output) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let manager = Manager {
        home: RuntimeHome::from_env()?,
        supervisor: Supervisor::default(),
    };
    let result = runtime.block_on(async { dispatch(&manager, command, out).await });
    // Servers discovery started end with the command.
    runtime.block_on(async {
        manager
            .supervisor
            .stop_idle(std::time::Instant::now(), std::time::Duration::ZERO)
            .await
    });
    result
}

async fn dispatch(manager: &Manager, command: McpCommand, out: Output) -> Result<ExitCode> {
    match command {
        McpCommand::Add {
            file,
            package,
            kind,
            name,
            url,
            args,
            env_keys,
            headers,
            header_env,
            bearer_token_env_var,
            host,
        } => {
            let request = InstallRequest {
                kind: Kind::parse(&kind)?,
                package,
                url,
                name,
                args,
                host,
                env_keys,
                headers: headers
                    .iter()
                    .map(|h| split_pair(h, "--header"))
                    .collect::<Result<_>>()?,
                header_env: header_env
                    .iter()
                    .map(|h| split_pair(h, "--header-env"))
                    .collect::<Result<_>>()?,
                bearer_token_env_var,
            };
            let mut handle = crate::session::open(&file)?;
            let outcome = manager.add(&mut handle, &request).await;
            handle.close()?;
            let (name, report) = outcome?;
            out.emit(
                &json!({ "server": name, "added": report.added, "changed": report.changed, "removed": report.removed, "unchanged": report.unchanged }),
                || {
                    println!("attached MCP server '{name}' to {}", file.display());
                    for tool in &report.added {
                        println!("  {tool} (new: enabled, needs approval until you lift `restricted`)");
                    }
                },
            )?;
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::List { file } => {
            let handle = crate::session::open_read(&file)?;
            let config = handle.config()?;
            let servers = adf_mcp::manage::list(&config);
            out.emit(&servers, || {
                if servers.is_empty() {
                    println!("no MCP servers in {}", file.display());
                }
                for server in &servers {
                    println!(
                        "{} ({})",
                        server["name"].as_str().unwrap_or_default(),
                        server["source"]
                            .as_str()
                            .or(server["url"].as_str())
                            .unwrap_or("stdio")
                    );
                    for tool in server["tools"].as_array().into_iter().flatten() {
                        println!(
                            "  {}  enabled={} restricted={}{}",
                            tool["name"].as_str().unwrap_or_default(),
                            tool["enabled"],
                            tool["restricted"],
                            tool["status"]
                                .as_str()
                                .map(|s| format!(" status={s}"))
                                .unwrap_or_default()
                        );
                    }
                }
            })?;
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::Restart { file, name } => {
            let mut handle = crate::session::open(&file)?;
            let outcome = manager.restart(&mut handle, &name).await;
            handle.close()?;
            let report = outcome?;
            out.emit(
                &json!({ "server": name, "added": report.added, "changed": report.changed, "removed": report.removed, "unchanged": report.unchanged }),
                || {
                    println!("restarted MCP server '{name}'");
                    for tool in &report.changed {
                        println!("  {tool} changed: disabled and restricted until you accept it (`adf mcp review FILE --accept`)");
                    }
                    for tool in &report.removed {
                        println!("  {tool} removed by the server");
                    }
                },
            )?;
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::Remove { file, name } => {
            let mut handle = crate::session::open(&file)?;
            let outcome = manager.remove(&mut handle, &name).await;
            handle.close()?;
            outcome?;
            out.emit(&json!({ "removed": name }), || {
                println!("removed MCP server '{name}' and its tool declarations")
            })?;
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::Review { file, accept } => review(&file, accept, out),
    }
}

/// Lists MCP tools whose definition the owner has not reviewed; `--accept` records them.
fn review(file: &Path, accept: bool, out: Output) -> Result<ExitCode> {
    let mut handle = crate::session::open(file)?;
    let mut config = handle.config()?;
    let pending = adf_mcp::declare::pending_reviews(&config);
    let accepted = if accept && !pending.is_empty() {
        let accepted = adf_mcp::declare::accept_reviews(&mut config);
        handle.config_replace(adf_store::Caller::Owner, config)?;
        accepted
    } else {
        Vec::new()
    };
    handle.close()?;
    let listed: Vec<_> = pending
        .iter()
        .map(|p| json!({ "name": p.name, "status": p.status }))
        .collect();
    out.emit(&json!({ "pending": listed, "accepted": accepted }), || {
        if pending.is_empty() {
            println!("no MCP tool awaits review");
        }
        for p in &pending {
            println!("{}  {}", p.name, p.status);
        }
        if !accepted.is_empty() {
            println!("accepted {} definition(s)", accepted.len());
        } else if !pending.is_empty() {
            println!(
                "accept them with `adf mcp review {} --accept`",
                file.display()
            );
        }
    })?;
    Ok(ExitCode::SUCCESS)
}
