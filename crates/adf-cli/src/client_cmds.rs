//! `adf daemon` and the commands that talk to a running daemon (the reference CLI's names and
//! output): `agents`, `status`, `start`, `stop`, `load`, `file`, `task`, `events`, and — when
//! their first argument is not an existing file — `files`, `inbox`, `outbox`, `timers`,
//! `tasks`, `logs`, `approve`, `deny`, `config`; and `studio`, which finds (or starts) the
//! daemon, asks it for a fresh one-time login link and opens the Studio page with it.
//!
//! Several names are shared with the file commands (`adf files agent.adf` reads the file
//! directly). The argument decides: a path that exists is a file command; anything else is
//! an agent id, handle or name on the daemon at `--url` / `ADF_DAEMON_URL`
//! (default `http://127.0.0.1:7385`). Errors print the daemon's message and exit 1, as the
//! reference CLI does.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Subcommand;
use futures::StreamExt as _;
use serde_json::{Value, json};

use adf_runtime::bench;
use adf_runtime::home::RuntimeHome;
use adf_server::client::{Client, encode};
use adf_server::serve::{self, DEFAULT_HOST, DEFAULT_PORT, FrontDoor, RunningServer};
use adf_server::{Daemon, memory};

use crate::Command;
use crate::output::Output;

/// `println!` that ignores a closed stdout (`adf config bot | head`) instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

pub(crate) use say;

mod runtime_cmds;

/// The daemon URL when neither `--url` nor `ADF_DAEMON_URL` is given.
pub(crate) const DEFAULT_URL: &str = "http://127.0.0.1:7385";

#[derive(Debug, Subcommand)]
pub(crate) enum ClientCommand {
    /// Run the daemon: load agents, serve the HTTP API and event stream until SIGINT/SIGTERM.
    /// The control API requires the token in $ADF_HOME/daemon-token (created on first start;
    /// ADF_DAEMON_TOKEN overrides it); `adf` client commands send it. The printed login link
    /// carries a one-time code (5 minutes), never the token; `adf studio` makes new ones.
    Daemon {
        /// The address to listen on. Loopback by default; a LAN address (or 0.0.0.0) lets
        /// other machines reach the mesh routes of `lan` and `public` agents, while the
        /// control API still needs the token and a `localhost` agent still refuses them.
        #[arg(long, default_value = DEFAULT_HOST)]
        host: String,
        #[arg(long, default_value_t = DEFAULT_PORT)]
        port: u16,
        /// Serve the control API without the token, for older token-less clients (such as the
        /// reference CLI). Any local process can then drive the daemon. Loopback only; the
        /// Host and browser-origin checks stay on.
        #[arg(long)]
        insecure_loopback: bool,
        /// A host name the Host header may carry besides this daemon's own addresses
        /// (repeatable), e.g. a reverse proxy's name.
        #[arg(long = "allow-host", value_name = "NAME")]
        allow_host: Vec<String>,
        /// The port agents' own routes, files and WebSocket routes are served on, on the same
        /// host (default: --port + 1; 0 picks a free one). Never the control port: a page an
        /// agent serves must not share the Studio's origin.
        #[arg(long = "serve-port", value_name = "PORT")]
        serve_port: Option<u16>,
        /// Announce the `lan` and `public` agents over mDNS and discover other daemons' on
        /// the LAN (`agent_discover {scope: "all"}`, `adf network lan`). Needs --host with a
        /// non-loopback address.
        #[arg(long)]
        lan: bool,
        /// Agent files to load at start.
        agents: Vec<PathBuf>,
        /// A tracked directory (repeatable; the settings' `trackedDirectories` too): at start,
        /// load each agent found there with `autostart: true` that the owner reviewed
        /// (`adf review FILE --accept`).
        #[arg(long = "track", value_name = "DIR")]
        track: Vec<PathBuf>,
        /// Directory levels scanned below each tracked directory.
        #[arg(long, default_value_t = adf_server::review::DEFAULT_MAX_DEPTH)]
        max_depth: usize,
    },
    /// Show what an agent file can do and whether its owner reviewed it (the daemon's review
    /// gate for autostart and `requireReview` loads); `--accept` records the review.
    Review {
        file: PathBuf,
        /// Record that you reviewed the file as it is now; a later change to what it can do
        /// needs a new review.
        #[arg(long)]
        accept: bool,
    },
    /// Open the Studio, the web page for watching, steering and editing your agents: finds
    /// the daemon at --url / ADF_DAEMON_URL (starting one in the background on a loopback
    /// URL when none answers) and opens the browser with a fresh one-time login link.
    Studio {
        /// Print the login link instead of opening a browser (headless machines, scripts).
        /// The link logs in once, within 5 minutes; until then treat it as a secret.
        #[arg(long)]
        no_open: bool,
    },
    /// List the agents loaded in the daemon.
    Agents,
    /// Show an agent's status (AGENT = id, handle or name).
    Status { agent: String },
    /// Start an agent loaded in the daemon (or load again one stopped earlier).
    Start { agent: String },
    /// Stop and unload an agent; its file is closed cleanly.
    #[command(alias = "unload")]
    Stop { agent: String },
    /// Abort a daemon agent's turn in progress; the agent stays loaded and usable.
    Abort { agent: String },
    /// List the questions a daemon agent's turn is waiting on (`ask`).
    Asks { agent: String },
    /// Answer a pending question: `adf answer AGENT REQUEST_ID text…`.
    Answer {
        agent: String,
        request: String,
        /// The answer; several words are joined with spaces.
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
    },
    /// Load an agent file into the running daemon.
    Load { path: PathBuf },
    /// Print one file stored in a daemon agent.
    File { agent: String, path: String },
    /// Show one task of a daemon agent as JSON.
    Task { agent: String, task: String },
    /// Stream events from the daemon (all agents, or one).
    Events { agent: Option<String> },
    /// Print a daemon agent's config (`adf config AGENT`; `adf config get FILE` reads a file).
    #[command(name = "config-agent", hide = true)]
    ConfigAgent { agent: String },
    /// Runtime and agent diagnostics: runtime, providers, auth, settings, network, usage,
    /// identities, adapters, triggers, tables.
    #[command(flatten)]
    Runtime(runtime_cmds::RuntimeCommand),
    /// Measurements for BENCHMARKS.md.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum BenchCommand {
    /// Load N idle agents (each with an hourly timer) into one daemon and report resident
    /// memory per agent.
    Idle {
        #[arg(long, default_value_t = 1000)]
        agents: usize,
        /// Folder for the agent files (a temporary folder by default).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Run turns back to back against an in-process mock and report turns/s and latency.
    ///
    /// Mirrors the reference's overhead scenario: file-backed agents with the default config
    /// (the full default tool list on every request), one turn in flight per agent, a
    /// zero-latency mock answering about 120 tokens in 8 deltas with usage, and the loop
    /// cleared by the owner every W turns.
    Turns {
        /// Agents running side by side.
        #[arg(long, default_value_t = 1)]
        agents: usize,
        /// Seconds of measured turns (after a half-second warm-up on the first agent).
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Turns between owner clears of the loop.
        #[arg(long, default_value_t = 50)]
        window: u64,
        /// Worker threads of the async runtime (1: a single-threaded runtime).
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// The mock's reply: `mirror` (reference-shaped, ~120 tokens in 8 deltas) or `ok`.
        #[arg(long, value_enum, default_value_t = BenchReply::Mirror)]
        reply: BenchReply,
    },
    /// Send GET requests to a URL on this machine at a fixed rate and report latency from
    /// each request's scheduled time (an open-loop load: a stall delays every request
    /// scheduled during it, and they all count).
    ///
    /// For example, a daemon's agent route at 5,000 requests/s beside its `/health` floor:
    /// `adf bench http http://127.0.0.1:7385/agents/web/hello --rate 5000`.
    Http {
        /// An http:// URL to 127.0.0.1, `[::1]` or localhost.
        url: String,
        /// Requests scheduled per second, spread evenly.
        #[arg(long, default_value_t = 5000)]
        rate: u32,
        /// Keep-alive connections taking requests from the schedule.
        #[arg(long, default_value_t = 32)]
        connections: usize,
        /// Seconds of measured requests.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Seconds at the same rate before the measured time, not measured.
        #[arg(long, default_value_t = 2)]
        warmup: u64,
        /// Worker threads of the driver's async runtime (1: a single-threaded runtime).
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
}

/// The in-process mock's reply in `adf bench turns`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum BenchReply {
    /// About 120 tokens of `"mock-<n> "` text in 8 deltas, like the reference's mock.
    Mirror,
    /// A bare "ok" in one delta.
    Ok,
}

/// `adf config AGENT` is the daemon's config; `adf config get|set FILE ...` the file's. Clap
/// cannot have both a positional and subcommands here, so the daemon form is rewritten to
/// the hidden `config-agent` before parsing.
pub(crate) fn rewrite_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let mut i = 1;
    while i < args.len() {
        let arg = args[i].to_string_lossy();
        if arg == "--url" || arg == "-u" {
            i += 2;
            continue;
        }
        if arg.starts_with('-') {
            i += 1;
            continue;
        }
        if arg == "config"
            && let Some(next) = args.get(i + 1).map(|a| a.to_string_lossy().into_owned())
            && !matches!(next.as_str(), "get" | "set" | "help")
            && !next.starts_with('-')
        {
            args[i] = OsString::from("config-agent");
        }
        break;
    }
    args
}

/// Where a shared-name command goes.
pub(crate) enum Routed {
    Done(ExitCode),
    File(Command),
}

fn is_file(path: &std::path::Path) -> bool {
    path.exists()
}

fn agent_of(path: &std::path::Path) -> String {
    path.to_string_lossy().into_owned()
}

/// Sends the shared-name file commands whose argument is not an existing file to the daemon.
pub(crate) fn route(command: Command, url: Option<&str>, out: Output) -> Routed {
    let call = match &command {
        Command::Files { file, .. } if !is_file(file) => Call::Files(agent_of(file)),
        Command::Rm { file, path, force } if !is_file(file) => {
            Call::Rm(agent_of(file), path.clone(), *force)
        }
        Command::Inbox { file, .. } if !is_file(file) => Call::Mailbox(agent_of(file), "inbox"),
        Command::Outbox { file, .. } if !is_file(file) => Call::Mailbox(agent_of(file), "outbox"),
        Command::Timers { file } if !is_file(file) => Call::Timers(agent_of(file)),
        Command::Tasks { file, status } if !is_file(file) => {
            Call::Tasks(agent_of(file), status.clone())
        }
        Command::Logs { file, limit } if !is_file(file) => Call::Logs(agent_of(file), *limit),
        Command::Approve { file, task } if !is_file(file) => {
            Call::Resolve(agent_of(file), task.clone(), None)
        }
        Command::Deny { file, task, reason } if !is_file(file) => Call::Resolve(
            agent_of(file),
            task.clone(),
            Some(reason.clone().unwrap_or_default()),
        ),
        Command::Chat {
            file,
            message: Some(message),
            loop_name,
            ..
        } if !is_file(file) => Call::Chat(agent_of(file), message.clone(), loop_name.clone()),
        _ => return Routed::File(command),
    };
    Routed::Done(finish(client_call(call, url, out)))
}

enum Call {
    Files(String),
    Mailbox(String, &'static str),
    Timers(String),
    Tasks(String, Option<String>),
    Logs(String, usize),
    /// Approve (`None`) or deny with a reason.
    Resolve(String, String, Option<String>),
    /// `adf chat AGENT MESSAGE`: an owner turn in the daemon (agent, message, loop).
    Chat(String, String, String),
    /// `adf rm AGENT PATH [--force]`.
    Rm(String, String, bool),
}

/// Runs a daemon or client command.
pub(crate) fn run(command: ClientCommand, url: Option<&str>, out: Output) -> ExitCode {
    finish(run_inner(command, url, out))
}

/// Client failures print the daemon's message alone and exit 1, like the reference CLI.
fn finish(result: Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// A client of the daemon at `url`, sending `ADF_DAEMON_TOKEN` or, to a daemon on this
/// machine, the token of `$ADF_HOME` — so no flag is needed.
fn client(url: Option<&str>) -> Result<Client> {
    let base = url.unwrap_or(DEFAULT_URL);
    let home = RuntimeHome::from_env().ok();
    let token = adf_server::client::token_for(
        base,
        home.as_ref(),
        std::env::var(adf_server::token::TOKEN_ENV).ok(),
    );
    Ok(Client::new(base, token)?)
}

fn run_inner(command: ClientCommand, url: Option<&str>, out: Output) -> Result<ExitCode> {
    match command {
        ClientCommand::Daemon {
            host,
            port,
            insecure_loopback,
            allow_host,
            serve_port,
            lan,
            agents,
            track,
            max_depth,
        } => {
            let access = Access {
                insecure_loopback,
                allow_host,
                serve_port,
                lan,
            };
            daemon(&host, port, &access, &agents, &track, max_depth)
        }
        ClientCommand::Studio { no_open } => studio(url, no_open),
        ClientCommand::Bench(BenchCommand::Idle { agents, dir }) => bench_idle(agents, dir, out),
        ClientCommand::Bench(BenchCommand::Turns {
            agents,
            seconds,
            window,
            threads,
            reply,
        }) => bench_turns(agents, seconds, window, threads, reply, out),
        ClientCommand::Bench(BenchCommand::Http {
            url,
            rate,
            connections,
            seconds,
            warmup,
            threads,
        }) => {
            let options = crate::http_load::LoadOptions {
                target: crate::http_load::Target::parse(&url)?,
                rate,
                connections,
                duration: std::time::Duration::from_secs(seconds.max(1)),
                warmup: std::time::Duration::from_secs(warmup),
            };
            eprintln!(
                "{url}: {rate} requests/s for {warmup} s warm-up and {} s measured",
                seconds.max(1)
            );
            let report = crate::http_load::run(&options, threads)?;
            print_json_or(out, &serde_json::to_value(&report)?, || {
                say!("{}", report.line());
            });
            Ok(ExitCode::SUCCESS)
        }
        other => {
            let client = client(url)?;
            runtime()?.block_on(client_command(&client, other, out))
        }
    }
}

fn client_call(call: Call, url: Option<&str>, out: Output) -> Result<ExitCode> {
    let client = client(url)?;
    runtime()?.block_on(async move {
        match call {
            Call::Chat(agent, message, loop_name) => {
                daemon_chat(&client, agent, message, loop_name, out).await?
            }
            Call::Rm(agent, path, force) => daemon_rm(&client, agent, path, force, out).await?,
            Call::Files(agent) => daemon_files(&client, agent, out).await?,
            Call::Mailbox(agent, which) => daemon_mailbox(&client, agent, which, out).await?,
            Call::Timers(agent) => daemon_timers(&client, agent, out).await?,
            Call::Tasks(agent, status) => daemon_tasks(&client, agent, status, out).await?,
            Call::Logs(agent, limit) => daemon_logs(&client, agent, limit, out).await?,
            Call::Resolve(agent, task, reason) => {
                daemon_resolve(&client, agent, task, reason, out).await?
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

async fn daemon_chat(
    client: &Client,
    agent: String,
    message: String,
    loop_name: String,
    out: Output,
) -> Result<()> {
    let body = client
        .post(
            &format!("/agents/{}/chat", encode(&agent)),
            Some(&serde_json::json!({ "text": message, "loop": loop_name })),
        )
        .await?;
    print_json_or(out, &body, || {
        println!(
            "accepted: {} (the turn runs in the daemon; follow it with `adf events {agent}`)",
            body["turnId"].as_str().unwrap_or_default()
        );
    });
    if out.json {
        return Ok(());
    }
    // A daemon that names no cursor (an older one) leaves the turn to `adf events`.
    let (Some(cursor), Some(id)) = (body["cursor"].as_u64(), body["agentId"].as_str()) else {
        return Ok(());
    };
    follow_chat_turn(client, id, cursor, &loop_name).await
}

/// Follows the daemon's events from `cursor` until the turn on `loop_name` ends: each
/// `turn.retry` is a line ("retrying in 4 s (2/5): connection reset"), and a failed turn is
/// an error naming where its reason is.
async fn follow_chat_turn(
    client: &Client,
    agent_id: &str,
    cursor: u64,
    loop_name: &str,
) -> Result<()> {
    let path = format!("/events?agentId={}&since={cursor}", encode(agent_id));
    let mut stream = Box::pin(client.events(&path).await?);
    while let Some(data) = stream.next().await {
        let frame: Value = serde_json::from_str(&data?).unwrap_or(Value::Null);
        let event = &frame["event"];
        let payload = &event["payload"];
        if payload["loop"].as_str().unwrap_or("main") != loop_name {
            continue;
        }
        match event["event_type"].as_str() {
            Some("turn.retry") => eprintln!("{}", text(&payload["message"])),
            Some("turn.completed") => {
                if payload["status"] == "failed" {
                    anyhow::bail!(
                        "the turn on loop {loop_name} failed; its reason is in the transcript (`adf loop {agent_id}`) and the logs (`adf logs {agent_id}`)"
                    );
                }
                say!("turn completed (loop {loop_name})");
                return Ok(());
            }
            _ => {}
        }
    }
    anyhow::bail!("the daemon closed the event stream before the turn ended")
}

async fn daemon_rm(
    client: &Client,
    agent: String,
    path: String,
    force: bool,
    out: Output,
) -> Result<()> {
    let force = if force { "&force=true" } else { "" };
    let body = match client
        .delete(&format!(
            "/agents/{}/files/content?path={}{force}",
            encode(&agent),
            encode(&path)
        ))
        .await
    {
        Err(adf_server::client::ClientError::Http {
            status: 409,
            message,
        }) => {
            anyhow::bail!("{message} (adf rm: use --force)")
        }
        other => other?,
    };
    print_json_or(out, &body, || say!("removed {path}"));
    Ok(())
}

async fn daemon_files(client: &Client, agent: String, out: Output) -> Result<()> {
    let path = format!("/agents/{}/files", encode(&agent));
    let header = ["path", "size", "mime", "protection"];
    let keys = ["path", "size", "mime_type", "protection"];
    list_table(client, out, &path, "files", &header, &keys).await
}

async fn daemon_mailbox(client: &Client, agent: String, which: &str, out: Output) -> Result<()> {
    let path = format!("/agents/{}/{which}", encode(&agent));
    let party = if which == "inbox" { "from" } else { "to" };
    let columns = ["id", "status", party, "content"];
    list_table(client, out, &path, "messages", &columns, &columns).await
}

async fn daemon_timers(client: &Client, agent: String, out: Output) -> Result<()> {
    let body = client
        .get(&format!("/agents/{}/timers", encode(&agent)))
        .await?;
    print_json_or(out, &body, || {
        let mut cells = rows(
            &body["timers"],
            &["id", "next_wake_at", "run_count", "payload"],
        );
        for row in &mut cells {
            if let Ok(ms) = row[1].parse::<i64>() {
                row[1] = iso_ms(ms);
            }
        }
        table(&["id", "next_wake_at", "runs", "payload"], &cells);
    });
    Ok(())
}

async fn daemon_tasks(
    client: &Client,
    agent: String,
    status: Option<String>,
    out: Output,
) -> Result<()> {
    let query = status.map_or(String::new(), |s| format!("?status={}", encode(&s)));
    let path = format!("/agents/{}/tasks{query}", encode(&agent));
    let header = ["id", "status", "tool", "origin", "auth"];
    let keys = ["id", "status", "tool", "origin", "requires_authorization"];
    list_table(client, out, &path, "tasks", &header, &keys).await
}

async fn daemon_logs(client: &Client, agent: String, limit: usize, out: Output) -> Result<()> {
    let path = format!("/agents/{}/logs?limit={limit}", encode(&agent));
    let columns = ["id", "level", "origin", "event", "message"];
    list_table(client, out, &path, "logs", &columns, &columns).await
}

async fn daemon_resolve(
    client: &Client,
    agent: String,
    task: String,
    reason: Option<String>,
    out: Output,
) -> Result<()> {
    let body = match &reason {
        None => json!({ "action": "approve" }),
        Some(reason) if reason.is_empty() => json!({ "action": "deny" }),
        Some(reason) => json!({ "action": "deny", "reason": reason }),
    };
    let answer = client
        .post(
            &format!("/agents/{}/tasks/{}/resolve", encode(&agent), encode(&task)),
            Some(&body),
        )
        .await?;
    let verb = if reason.is_none() {
        "Approved"
    } else {
        "Denied"
    };
    print_json_or(out, &answer, || {
        say!("{verb} {task} ({})", text(&answer["task"]["status"]));
    });
    Ok(())
}

async fn client_command(client: &Client, command: ClientCommand, out: Output) -> Result<ExitCode> {
    match command {
        ClientCommand::Agents => {
            let body = client.get("/agents").await?;
            let columns = ["id", "handle", "name", "autostart"];
            print_json_or(out, &body, || table(&columns, &rows(&body, &columns)));
        }
        ClientCommand::Status { agent } => show_status(client, agent, out).await?,
        ClientCommand::Start { agent } => {
            let body = client
                .post(&format!("/agents/{}/start", encode(&agent)), None)
                .await?;
            print_json_or(out, &body, || say!("Started {agent}"));
        }
        ClientCommand::Stop { agent } => {
            let body = client
                .post(&format!("/agents/{}/stop", encode(&agent)), None)
                .await?;
            print_json_or(out, &body, || say!("Stopped {agent}"));
        }
        ClientCommand::Abort { agent } => {
            let body = client
                .post(&format!("/agents/{}/abort", encode(&agent)), None)
                .await?;
            print_json_or(out, &body, || say!("Aborted {agent}'s turn"));
        }
        ClientCommand::Asks { agent } => show_asks(client, agent, out).await?,
        ClientCommand::Answer {
            agent,
            request,
            text,
        } => answer_ask(client, agent, request, text, out).await?,
        ClientCommand::Review { file, accept } => review(client, file, accept, out).await?,
        ClientCommand::Load { path } => load(client, path, out).await?,
        ClientCommand::File { agent, path } => show_file(client, agent, path, out).await?,
        ClientCommand::Task { agent, task } => {
            let body = client
                .get(&format!(
                    "/agents/{}/tasks/{}",
                    encode(&agent),
                    encode(&task)
                ))
                .await?;
            say!("{}", serde_json::to_string_pretty(&body)?);
        }
        ClientCommand::ConfigAgent { agent } => {
            let body = client
                .get(&format!("/agents/{}/config", encode(&agent)))
                .await?;
            say!("{}", serde_json::to_string_pretty(&body)?);
        }
        ClientCommand::Events { agent } => follow_events(client, agent, out).await?,
        ClientCommand::Runtime(command) => runtime_cmds::run(client, command, out).await?,
        ClientCommand::Daemon { .. } | ClientCommand::Studio { .. } | ClientCommand::Bench(_) => {}
    }
    Ok(ExitCode::SUCCESS)
}

async fn show_status(client: &Client, agent: String, out: Output) -> Result<()> {
    let body = client
        .get(&format!("/agents/{}/status", encode(&agent)))
        .await?;
    print_json_or(out, &body, || {
        let fields = [
            "id",
            "handle",
            "name",
            "runtimeState",
            "targetState",
            "loopCount",
            "filePath",
        ];
        let cells: Vec<Vec<String>> = fields
            .iter()
            .map(|f| vec![(*f).to_owned(), text(&body[*f])])
            .collect();
        table(&["field", "value"], &cells);
    });
    Ok(())
}

async fn show_asks(client: &Client, agent: String, out: Output) -> Result<()> {
    let body = client
        .get(&format!("/agents/{}/asks", encode(&agent)))
        .await?;
    print_json_or(out, &body, || {
        if body["asks"].as_array().is_none_or(Vec::is_empty) {
            say!("No pending questions.");
        } else {
            table(
                &["requestId", "question"],
                &rows(&body["asks"], &["requestId", "question"]),
            );
        }
    });
    Ok(())
}

async fn answer_ask(
    client: &Client,
    agent: String,
    request: String,
    text: Vec<String>,
    out: Output,
) -> Result<()> {
    let body = client
        .post(
            &format!(
                "/agents/{}/asks/{}/respond",
                encode(&agent),
                encode(&request)
            ),
            Some(&json!({ "answer": text.join(" ") })),
        )
        .await?;
    print_json_or(out, &body, || say!("Answered {request}"));
    Ok(())
}

async fn review(client: &Client, file: PathBuf, accept: bool, out: Output) -> Result<()> {
    let absolute =
        std::path::absolute(&file).with_context(|| format!("cannot resolve {}", file.display()))?;
    let body = if accept {
        client
            .post(
                "/agents/review/accept",
                Some(&json!({ "filePath": absolute })),
            )
            .await?
    } else {
        client
            .get(&format!(
                "/agents/review?filePath={}",
                encode(&absolute.display().to_string())
            ))
            .await?
    };
    print_json_or(out, &body, || {
        let state = if body["reviewed"] == true {
            "reviewed"
        } else {
            "NOT reviewed"
        };
        say!(
            "{} ({}): {state}",
            text(&body["agentId"]),
            text(&body["filePath"])
        );
        for section in body["summary"]["notRunYet"]
            .as_array()
            .into_iter()
            .flatten()
        {
            say!(
                "not run by this runtime yet: {} ({})",
                text(&section["path"]),
                text(&section["what"])
            );
        }
        for tool in body["summary"]["mcpToolsToReview"]
            .as_array()
            .into_iter()
            .flatten()
        {
            say!(
                "MCP tool {} is {} since your last review{}",
                text(&tool["name"]),
                text(&tool["status"]),
                if accept { " (accepted)" } else { "" }
            );
        }
        match serde_json::to_string_pretty(&body["summary"]) {
            Ok(summary) => say!("{summary}"),
            Err(_) => say!("{}", body["summary"]),
        }
    });
    Ok(())
}

async fn load(client: &Client, path: PathBuf, out: Output) -> Result<()> {
    // The daemon resolves relative paths against its own folder; send an absolute one.
    let absolute =
        std::path::absolute(&path).with_context(|| format!("cannot resolve {}", path.display()))?;
    let body = client
        .post("/agents/load", Some(&json!({ "filePath": absolute })))
        .await?;
    print_json_or(out, &body, || {
        say!("Loaded {} ({})", text(&body["id"]), text(&body["filePath"]));
    });
    Ok(())
}

async fn show_file(client: &Client, agent: String, path: String, out: Output) -> Result<()> {
    let body = client
        .get(&format!(
            "/agents/{}/files/content?path={}",
            encode(&agent),
            encode(&path)
        ))
        .await?;
    print_json_or(out, &body, || {
        match body.get("content").and_then(Value::as_str) {
            Some(content) => {
                use std::io::Write as _;
                let _ = write!(std::io::stdout(), "{content}");
            }
            None => say!("{}", text(&body["content_base64"])),
        }
    });
    Ok(())
}

async fn follow_events(client: &Client, agent: Option<String>, out: Output) -> Result<()> {
    let path = agent.map_or_else(
        || "/events".to_owned(),
        |a| format!("/events?agentId={}", encode(&a)),
    );
    let mut stream = Box::pin(client.events(&path).await?);
    while let Some(data) = stream.next().await {
        let data = data?;
        if out.json {
            say!("{data}");
            continue;
        }
        let frame: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
        let event = &frame["event"];
        let detail = event["payload"]
            .get("message")
            .or(event["payload"].get("type"))
            .map(text);
        let mut line = format!(
            "[{}] {} {}",
            text(&frame["cursor"]),
            text(&event["event_type"]),
            text(&event["agent_id"])
        );
        if let Some(detail) = detail {
            line.push(' ');
            line.push_str(&detail);
        }
        say!("{}", line.trim_end());
    }
    Ok(())
}

/// Who may use the daemon beyond its token-holders (`adf daemon` flags).
struct Access {
    insecure_loopback: bool,
    allow_host: Vec<String>,
    /// `--serve-port`: where agents' content is served.
    serve_port: Option<u16>,
    /// `--lan`: mDNS announcement and discovery.
    lan: bool,
}

fn daemon(
    host: &str,
    port: u16,
    access: &Access,
    agents: &[PathBuf],
    track: &[PathBuf],
    max_depth: usize,
) -> Result<ExitCode> {
    if access.insecure_loopback && !serve::is_loopback(host) {
        anyhow::bail!(
            "--insecure-loopback serves the control API without a token, so it is allowed only on a loopback address (127.0.0.1, ::1, localhost), not {host}"
        );
    }
    let home = RuntimeHome::from_env()?;
    let mut front = FrontDoor::for_home(&home, std::env::var(adf_server::token::TOKEN_ENV).ok())?;
    front.insecure_loopback = access.insecure_loopback;
    front.allowed_hosts.clone_from(&access.allow_host);
    front.serve_port = access.serve_port;
    front.lan = access.lan;
    runtime()?.block_on(async move {
        let daemon = Daemon::new(home);
        for path in agents {
            let loaded = daemon
                .load(path)
                .await
                .with_context(|| format!("cannot load {}", path.display()))?;
            eprintln!("loaded {} ({})", loaded.agent.id, loaded.agent.file_path());
        }
        let server = RunningServer::start(daemon, host, port, front).await?;
        say!("adf daemon listening on {}", server.url());
        // A one-time code, never the token: this line may end up in a log file.
        say!(
            "login URL (one-time, valid for 5 minutes; `adf studio` makes another): {}",
            server.login_url()
        );
        say!("agents' routes and files served on {}", server.serve_url());
        if access.insecure_loopback {
            eprintln!(
                "warning: --insecure-loopback: the control API needs no token; any process on this machine can drive the daemon"
            );
        }
        // Tracked directories: the command line's, then the settings' (as the reference does
        // after its server is up); only reviewed `autostart: true` agents start.
        let mut tracked: Vec<PathBuf> = track
            .iter()
            .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone()))
            .collect();
        tracked.extend(server.daemon.tracked_directories());
        if !tracked.is_empty() {
            let report = server.daemon.autostart(&tracked, max_depth).await;
            say!(
                "autostart: {} scanned, {} started, {} skipped, {} failed",
                report.scanned,
                report.started.len(),
                report.skipped.len(),
                report.failed.len()
            );
            for entry in report.skipped.iter().chain(&report.failed) {
                let why = entry
                    .get("reason")
                    .or_else(|| entry.get("error"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                eprintln!("  {}: {why}", text(&entry["filePath"]));
            }
        }
        serve::termination_signal().await;
        eprintln!("shutting down: closing agent files");
        server.shutdown().await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// How long `adf studio` waits for a daemon it started to answer.
const STUDIO_START_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `adf studio`: find or start the daemon, then hand the browser the login link.
fn studio(url: Option<&str>, no_open: bool) -> Result<ExitCode> {
    let base = url.unwrap_or(DEFAULT_URL).trim_end_matches('/').to_owned();
    let rt = runtime()?;
    let answers = |base: &str| -> Result<bool> {
        let probe = Client::new(base, None)?;
        Ok(rt.block_on(async { probe.get("/health").await.is_ok() }))
    };
    if !answers(&base)? {
        let (host, port) = loopback_host_port(&base).with_context(|| {
            format!("no daemon answers at {base}, and `adf studio` starts one only on a loopback URL such as {DEFAULT_URL}")
        })?;
        let (pid, log) = start_background_daemon(&host, port)?;
        let deadline = std::time::Instant::now() + STUDIO_START_WAIT;
        while !answers(&base)? {
            if std::time::Instant::now() > deadline {
                anyhow::bail!(
                    "started a daemon for {base}, but it did not answer within {} s; see {}",
                    STUDIO_START_WAIT.as_secs(),
                    log.display()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        eprintln!(
            "started adf daemon (pid {pid}) at {base}; it keeps running (log: {})",
            log.display()
        );
    }
    let home = RuntimeHome::from_env().ok();
    let token = adf_server::client::token_for(
        &base,
        home.as_ref(),
        std::env::var(adf_server::token::TOKEN_ENV).ok(),
    )
    .with_context(|| {
        format!("no token for the daemon at {base}: set ADF_DAEMON_TOKEN to the token it prints")
    })?;
    // A fresh one-time code from the daemon (the token never goes to the browser); a wrong
    // token is a clear error here.
    let client = Client::new(&base, Some(token))?;
    let minted = rt
        .block_on(async { client.post("/auth/login-codes", None).await })
        .with_context(|| format!("the daemon at {base} refused this token"))?;
    let path = minted["loginPath"]
        .as_str()
        .filter(|path| path.starts_with("/login?code="))
        .with_context(|| format!("the daemon at {base} answered no login link: {minted}"))?;
    let link = format!("{base}{path}");
    if no_open {
        say!("{link}");
        return Ok(ExitCode::SUCCESS);
    }
    match open_browser(&link) {
        Ok(()) => eprintln!("opened the Studio at {base} in your browser"),
        Err(error) => {
            eprintln!("cannot open a browser ({error:#}); open this link yourself:");
            say!("{link}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The host and port of a loopback `http://` URL (the only kind `adf studio` starts a
/// daemon for).
fn loopback_host_port(base: &str) -> Option<(String, u16)> {
    let authority = base.strip_prefix("http://")?.split('/').next()?;
    let (host, port) = authority.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    serve::is_loopback(host).then(|| Some((host.to_owned(), port.parse().ok()?)))?
}

/// Starts `adf daemon --host HOST --port PORT` in its own process group (so closing this
/// terminal's foreground job does not stop it), its output appended to
/// `$ADF_HOME/studio-daemon.log`; returns its process id and the log's path.
fn start_background_daemon(host: &str, port: u16) -> Result<(u32, PathBuf)> {
    use std::os::unix::process::CommandExt as _;
    let home = RuntimeHome::from_env()?;
    std::fs::create_dir_all(home.dir())
        .with_context(|| format!("cannot create {}", home.dir().display()))?;
    let log_path = home.dir().join("studio-daemon.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let exe = std::env::current_exe().context("cannot find the adf binary to start the daemon")?;
    let child = std::process::Command::new(exe)
        .args(["daemon", "--host", host, "--port", &port.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start the daemon")?;
    Ok((child.id(), log_path))
}

/// Opens `link` with `$BROWSER`, else the desktop's opener.
fn open_browser(link: &str) -> Result<()> {
    let opener = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| {
            if cfg!(target_os = "macos") {
                "open"
            } else {
                "xdg-open"
            }
            .to_owned()
        });
    let status = std::process::Command::new(&opener)
        .arg(link)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .with_context(|| format!("cannot run {opener}"))?;
    anyhow::ensure!(status.success(), "{opener} exited with {status}");
    Ok(())
}

fn bench_idle(count: usize, dir: Option<PathBuf>, out: Output) -> Result<ExitCode> {
    // A scratch dir of our own is removed on every way out, errors included (a bench of
    // 10,000 agents leaves ~1.6 GB behind otherwise).
    let scratch;
    let dir = match dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir)?;
            dir
        }
        None => {
            scratch = tempfile::Builder::new().prefix("adf-bench-").tempdir()?;
            scratch.path().to_path_buf()
        }
    };
    eprintln!("creating {count} agents in {}", dir.display());
    let paths = memory::create_agents(&dir, count)?;
    let report = runtime()?.block_on(async {
        let daemon = Daemon::new(RuntimeHome::at(dir.join("home")));
        let report = memory::measure_idle(&daemon, &paths).await;
        daemon.shutdown().await;
        report
    })?;
    print_json_or(out, &serde_json::to_value(&report)?, || {
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0));
        say!("agents loaded        {}", report.agents);
        say!("baseline RSS         {}", mib(report.baseline_bytes));
        say!("RSS with agents      {}", mib(report.loaded_bytes));
        say!(
            "per idle agent       {:.1} KiB",
            report.per_agent_bytes as f64 / 1024.0
        );
        say!("agents released      {}", report.released);
        say!("threads              {}", report.threads);
        say!("load time            {:.2} s", report.load_seconds);
    });
    Ok(ExitCode::SUCCESS)
}

fn bench_turns(
    agents: usize,
    seconds: u64,
    window: u64,
    threads: usize,
    reply: BenchReply,
    out: Output,
) -> Result<ExitCode> {
    let options = bench::TurnOptions {
        agents: agents.max(1),
        duration: std::time::Duration::from_secs(seconds.max(1)),
        window: window.max(1),
        threads: threads.max(1),
        reply: match reply {
            BenchReply::Mirror => bench::Reply::Mirror,
            BenchReply::Ok => bench::Reply::Ok,
        },
        ..bench::TurnOptions::default()
    };
    let stats = bench::run_turns(&options).context("the turn bench failed")?;
    print_json_or(out, &serde_json::to_value(&stats)?, || {
        say!("{}", stats.line())
    });
    Ok(ExitCode::SUCCESS)
}

/// `GET path`, printed as JSON under `--json`, else its array `list` as a table of the items'
/// `keys` under `header`.
async fn list_table(
    client: &Client,
    out: Output,
    path: &str,
    list: &str,
    header: &[&str],
    keys: &[&str],
) -> Result<()> {
    let body = client.get(path).await?;
    print_json_or(out, &body, || table(header, &rows(&body[list], keys)));
    Ok(())
}

fn print_json_or(out: Output, value: &Value, human: impl FnOnce()) {
    if out.json {
        say!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        );
    } else {
        human();
    }
}

/// A JSON value as a table cell: strings bare, null empty.
fn text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn rows(list: &Value, keys: &[&str]) -> Vec<Vec<String>> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .map(|item| {
                    keys.iter()
                        .map(|k| text(&item[*k]).replace(['\n', '\r'], " "))
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The reference CLI's table: every column padded to its widest cell (the last one too),
/// two spaces between columns, a dashed rule under the header.
fn table(header: &[&str], cells: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in cells {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let width = widths.get(i).copied().unwrap_or(0);
                format!("{c}{}", " ".repeat(width.saturating_sub(c.chars().count())))
            })
            .collect();
        say!("{}", padded.join("  "));
    };
    line(header.iter().map(|h| (*h).to_owned()).collect());
    line(widths.iter().map(|w| "-".repeat(*w)).collect());
    for row in cells {
        line(row.clone());
    }
}

/// Epoch ms as the reference prints it: `2026-11-30T00:59:03.176Z`.
fn iso_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        rewrite_args(list.iter().map(OsString::from))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn config_with_an_agent_goes_to_the_daemon() {
        assert_eq!(
            args(&["adf", "config", "bot"]),
            ["adf", "config-agent", "bot"]
        );
        assert_eq!(
            args(&["adf", "--json", "--url", "http://x", "config", "bot"]),
            ["adf", "--json", "--url", "http://x", "config-agent", "bot"]
        );
        assert_eq!(args(&["adf", "config", "get", "a.adf"])[1], "config");
        assert_eq!(args(&["adf", "config", "--help"])[1], "config");
        assert_eq!(args(&["adf", "files", "config"])[1], "files");
    }
}
