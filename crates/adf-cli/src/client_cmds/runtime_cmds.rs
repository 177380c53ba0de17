//! Client commands for the daemon's runtime-level and per-agent diagnostics, named as the
//! reference CLI names them: `adf runtime [AGENT]`, `providers`, `auth` (and, beyond the
//! reference, `auth sessions` and `auth revoke ID|all` for browser sessions), `settings`,
//! `network [mesh [enable|disable]|server|tools|runtimes]`, `usage [AGENT]`,
//! `identities AGENT`, `adapters [AGENT]`, `triggers AGENT` and `tables AGENT [TABLE]`.

use anyhow::{Result, bail};
use clap::Subcommand;
use serde_json::Value;

use adf_server::client::{Client, encode};

use super::{print_json_or, rows, table};
use crate::output::Output;

#[derive(Debug, Subcommand)]
pub(crate) enum RuntimeCommand {
    /// Show the daemon's runtime diagnostics, or one agent's (status, adapters, MCP, triggers).
    Runtime { agent: Option<String> },
    /// List the runtime providers (keys shown as set or not) and which provider each agent uses.
    Providers,
    /// Show which providers have a key (subscription logins are not supported yet);
    /// `adf auth sessions` lists the Studio's browser sessions, `adf auth revoke ID` ends one
    /// and `adf auth revoke all` ends every one.
    Auth { args: Vec<String> },
    /// Summarize the daemon's settings file.
    Settings,
    /// Show the network: `adf network`, `network mesh [enable|disable]`, `network server`,
    /// `network tools`, `network runtimes`.
    Network { args: Vec<String> },
    /// Show token usage of the loaded agents, or of one agent.
    Usage { agent: Option<String> },
    /// List a daemon agent's identity purposes (never their values).
    Identities { agent: String },
    /// List the channel adapters (`adf adapters`), an agent's adapters and their states
    /// (`adf adapters AGENT|FILE`), or check an adapter's credential against its platform
    /// (`adf adapters test AGENT|FILE TYPE`).
    Adapters {
        #[arg(num_args = 0..=3)]
        args: Vec<String>,
    },
    /// List a daemon agent's configured triggers.
    Triggers { agent: String },
    /// List a daemon agent's local tables, or show rows of one.
    Tables {
        agent: String,
        table: Option<String>,
    },
}

fn pretty(value: &Value) {
    super::say!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

fn network_path(args: &[String]) -> Result<(bool, &'static str)> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    Ok(match words.as_slice() {
        [] => (false, "/runtime/network"),
        ["mesh"] | ["mesh", "status"] => (false, "/network/mesh"),
        ["mesh", "enable"] => (true, "/network/mesh/enable"),
        ["mesh", "disable"] => (true, "/network/mesh/disable"),
        ["server"] => (false, "/network/server"),
        ["tools"] => (false, "/network/mesh/recent-tools"),
        ["runtimes"] => (false, "/network/mesh/discovered-runtimes"),
        ["lan"] => (false, "/network/mesh/lan-addresses"),
        other => bail!(
            "unknown network command {other:?}: use mesh [status|enable|disable], server, tools, runtimes or lan"
        ),
    })
}

/// `adf auth [sessions | revoke ID | revoke all]`.
async fn auth(client: &Client, args: &[String], out: Output) -> Result<()> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] => pretty(&client.get("/runtime/auth").await?),
        ["sessions"] => {
            let body = client.get("/auth/sessions").await?;
            print_json_or(out, &body, || {
                if body["sessions"].as_array().is_none_or(Vec::is_empty) {
                    super::say!("No browser sessions.");
                    return;
                }
                table(
                    &["id", "created", "expires", "last seen"],
                    &rows(
                        &body["sessions"],
                        &["id", "createdAt", "expiresAt", "lastSeenAt"],
                    ),
                );
            });
        }
        ["revoke", "all"] => {
            let body = client.delete("/auth/sessions").await?;
            print_json_or(out, &body, || {
                super::say!("Ended {} session(s).", super::text(&body["revoked"]));
            });
        }
        ["revoke", id] => {
            let body = client
                .delete(&format!("/auth/sessions/{}", encode(id)))
                .await?;
            print_json_or(out, &body, || super::say!("Ended session {id}."));
        }
        other => bail!("unknown auth command {other:?}: use sessions, revoke ID or revoke all"),
    }
    Ok(())
}

/// `adf runtime providers`: the providers and which agent uses which.
async fn providers(client: &Client, out: Output) -> Result<()> {
    let body = client.get("/runtime/providers").await?;
    print_json_or(out, &body, || {
        super::say!("Providers:");
        table(
            &["id", "type", "name", "model", "key"],
            &rows(
                &body["providers"],
                &["id", "type", "name", "defaultModel", "hasApiKey"],
            ),
        );
        super::say!("\nAgent usage:");
        table(
            &["agent", "provider", "model", "source"],
            &rows(
                &body["agentUsage"],
                &["handle", "providerId", "modelId", "source"],
            ),
        );
    });
    Ok(())
}

/// `adf runtime usage [AGENT]`: token totals of the runtime or of one agent.
async fn usage(client: &Client, agent: Option<String>, out: Output) -> Result<()> {
    let path = agent.map_or_else(
        || "/runtime/usage".to_owned(),
        |a| format!("/agents/{}/usage", encode(&a)),
    );
    let body = client.get(&path).await?;
    print_json_or(out, &body, || {
        let totals = &body["totals"];
        table(
            &["field", "value"],
            &[
                vec!["source".into(), super::text(&body["source"])],
                vec!["input".into(), super::text(&totals["input"])],
                vec!["output".into(), super::text(&totals["output"])],
                vec!["cacheRead".into(), super::text(&totals["cacheRead"])],
                vec!["cacheWrite".into(), super::text(&totals["cacheWrite"])],
                vec!["total".into(), super::text(&totals["total"])],
            ],
        );
    });
    Ok(())
}

/// Runs one command against the daemon.
pub(super) async fn run(client: &Client, command: RuntimeCommand, out: Output) -> Result<()> {
    match command {
        RuntimeCommand::Runtime { agent } => {
            let path = agent.map_or_else(
                || "/runtime".to_owned(),
                |a| format!("/agents/{}/runtime", encode(&a)),
            );
            pretty(&client.get(&path).await?);
        }
        RuntimeCommand::Providers => providers(client, out).await?,
        RuntimeCommand::Auth { args } => auth(client, &args, out).await?,
        RuntimeCommand::Settings => pretty(&client.get("/runtime/settings").await?),
        RuntimeCommand::Network { args } => {
            let (post, path) = network_path(&args)?;
            let body = if post {
                client.post(path, None).await?
            } else {
                client.get(path).await?
            };
            pretty(&body);
        }
        RuntimeCommand::Usage { agent } => usage(client, agent, out).await?,
        RuntimeCommand::Identities { agent } => {
            let path = format!("/agents/{}/identities", encode(&agent));
            let columns = ["purpose", "encrypted", "code_access"];
            super::list_table(client, out, &path, "identities", &columns, &columns).await?;
        }
        RuntimeCommand::Adapters { args } => {
            let words: Vec<&str> = args.iter().map(String::as_str).collect();
            match words.as_slice() {
                [] => all_adapters(client, out).await?,
                [agent] => adapters(client, agent, out).await?,
                ["test", agent, kind] => test_adapter(client, agent, kind, out).await?,
                other => bail!(
                    "unknown adapters command {other:?}: use `adf adapters`, `adf adapters AGENT|FILE` or `adf adapters test AGENT|FILE TYPE`"
                ),
            }
        }
        RuntimeCommand::Triggers { agent } => {
            let path = format!("/agents/{}/triggers", encode(&agent));
            let (header, keys) = (
                ["type", "enabled", "targets"],
                ["type", "enabled", "targetCount"],
            );
            super::list_table(client, out, &path, "configured", &header, &keys).await?;
        }
        RuntimeCommand::Tables { agent, table: None } => {
            let path = format!("/agents/{}/tables", encode(&agent));
            super::list_table(
                client,
                out,
                &path,
                "tables",
                &["name", "rows"],
                &["name", "row_count"],
            )
            .await?;
        }
        RuntimeCommand::Tables {
            agent,
            table: Some(name),
        } => {
            let body = client
                .get(&format!(
                    "/agents/{}/tables/{}",
                    encode(&agent),
                    encode(&name)
                ))
                .await?;
            print_json_or(out, &body, || {
                let columns: Vec<&str> = body["columns"]
                    .as_array()
                    .map(|c| c.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                table(&columns, &rows(&body["rows"], &columns));
            });
        }
    }
    Ok(())
}

/// The daemon's id of `agent`: a FILE is the agent the daemon loaded from it (found by its
/// path), anything else is an id, handle or name as given.
async fn agent_key(client: &Client, agent: &str) -> Result<String> {
    let Ok(path) = std::fs::canonicalize(agent) else {
        return Ok(agent.to_owned());
    };
    let loaded = client.get("/agents").await?;
    let wanted = path.to_string_lossy();
    loaded
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["filePath"].as_str() == Some(&*wanted))
        .and_then(|a| a["id"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{agent} is not loaded by the daemon: load it (adf load {agent}) to run its adapters"
            )
        })
}

/// `adf adapters`: the channel adapters as the reference CLI lists them (`id type package
/// storage env`), then, when a loaded agent configures any, each agent's adapter states.
async fn all_adapters(client: &Client, out: Output) -> Result<()> {
    let body = client.get("/runtime/adapters").await?;
    print_json_or(out, &body, || {
        if body["adapters"].as_array().is_none_or(Vec::is_empty) {
            super::say!("No adapters registered.");
        } else {
            table(
                &["id", "type", "package", "storage", "env"],
                &rows(
                    &body["adapters"],
                    &["id", "type", "package", "storage", "env"],
                ),
            );
        }
        let states: Vec<Vec<String>> = body["agents"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|agent| {
                let name = agent["handle"]
                    .as_str()
                    .or(agent["agentId"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                rows(&agent["states"], &["type", "state", "error", "restarts"])
                    .into_iter()
                    .map(move |row| std::iter::once(name.clone()).chain(row).collect())
            })
            .collect();
        if !states.is_empty() {
            super::say!("\nAgent adapters:");
            table(&["agent", "type", "state", "error", "restarts"], &states);
        }
    });
    Ok(())
}

/// `adf adapters AGENT|FILE`: the agent's configured adapters and their live states, in the
/// reference CLI's two parts (`Configured adapters:` and `Runtime adapters:`).
async fn adapters(client: &Client, agent: &str, out: Output) -> Result<()> {
    let key = agent_key(client, agent).await?;
    let body = client
        .get(&format!("/agents/{}/runtime/adapters", encode(&key)))
        .await?;
    print_json_or(out, &body, || {
        let part = |title: &str, list: &Value, header: &[&str], keys: &[&str]| {
            if list.as_array().is_none_or(Vec::is_empty) {
                super::say!("{title}: none");
            } else {
                super::say!("{title}:");
                table(header, &rows(list, keys));
            }
        };
        part(
            "Configured adapters",
            &body["configured"],
            &["type", "enabled"],
            &["type", "enabled"],
        );
        super::say!();
        let columns = ["type", "state", "error", "restarts"];
        part("Runtime adapters", &body["states"], &columns, &columns);
    });
    Ok(())
}

/// `adf adapters test AGENT|FILE TYPE`: checks the credential against the platform and says
/// what is wrong in plain words; a failed check exits non-zero.
async fn test_adapter(client: &Client, agent: &str, kind: &str, out: Output) -> Result<()> {
    let key = agent_key(client, agent).await?;
    let body = client
        .post(
            &format!("/agents/{}/adapters/{}/test", encode(&key), encode(kind)),
            None,
        )
        .await?;
    let ok = body["ok"] == true;
    print_json_or(out, &body, || {
        if ok {
            let who = body["bot"]["username"]
                .as_str()
                .map(|name| format!(" as @{name}"))
                .unwrap_or_default();
            super::say!("{kind}: the credential works: the platform accepted it{who}.");
        }
    });
    if !ok {
        let error = super::text(&body["error"]);
        let hint = match body["problem"].as_str() {
            Some("unreachable") => {
                " (is the platform's address right — config.api_root — and reachable from this machine?)"
            }
            Some("egress_refused") => {
                " (a local address needs security.allow_local_fetch in the agent's config)"
            }
            _ => "",
        };
        bail!("{kind}: {error}{hint}");
    }
    Ok(())
}
