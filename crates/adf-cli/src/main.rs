//! `adf`: the command line of the ADF runtime.
//!
//! Principal pieces: [`Cli`] (the clap command tree), `dispatch` (which module runs each command
//! that acts on a file directly), `file_cmds` (the owner's file commands), `session` (opening a
//! file, shared by the command modules), `client_cmds` (`adf daemon` and the clients of a
//! running daemon; shared names such as `files` go to the daemon when their argument is not an
//! existing file), `http_load` (`adf bench http`, a fixed-rate HTTP load) and `output` (tables
//! and `--json`).

mod chat_cmds;
mod client_cmds;
mod code_cmds;
mod conform_cmds;
mod demo;
mod dispatch;
mod file_cmds;
mod held;
mod http_load;
mod identity_cmds;
mod mcp_cmds;
mod output;
mod package_cmds;
mod session;
mod tool_cmds;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::output::Output;

/// ADF runtime: create, inspect, migrate and run agent files (.adf).
#[derive(Debug, Parser)]
#[command(name = "adf", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,

    /// Daemon URL for the client commands (agents, status, ...).
    #[arg(long, short = 'u', global = true, env = "ADF_DAEMON_URL")]
    url: Option<String>,

    #[command(subcommand)]
    command: TopCommand,
}

/// The file commands and the daemon commands, flattened into one `adf` command list.
#[derive(Debug, Subcommand)]
enum TopCommand {
    #[command(flatten)]
    File(Command),
    #[command(flatten)]
    Client(client_cmds::ClientCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// A guided tour with no API key and no network: two agents, one validated, both run by the
    /// in-process daemon (timer and file-change lambdas, events); a model turn with a provider.
    Demo {
        /// Folder to create the demo agent in (a fresh temporary folder by default).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// An OpenAI-compatible server for the optional model turn (e.g. http://localhost:11434/v1).
        #[arg(long)]
        provider_url: Option<String>,
        /// The model id for the model turn (a small default per provider).
        #[arg(long)]
        model: Option<String>,
    },
    /// Create a new agent file with the default config, reserved files and registry keys.
    New {
        /// Path of the .adf file to create.
        file: PathBuf,
        /// Display name (defaults to the file name).
        #[arg(long)]
        name: Option<String>,
        /// What the agent does.
        #[arg(long)]
        description: Option<String>,
        /// Mesh handle (defaults to the name as a slug).
        #[arg(long)]
        handle: Option<String>,
    },
    /// Show a file's identity, schema, state and contents at a glance (never modifies it).
    Info { file: PathBuf },
    /// Validate a file against the spec; exits 1 when it finds an error.
    Check { file: PathBuf },
    /// The conformance kit: judge any runtime's file, daemon or mesh peer against the
    /// checklist (docs/conformance.md); exits 1 when a check fails.
    #[command(subcommand)]
    Conform(conform_cmds::ConformCommand),
    /// Migrate a file to the current storage schema (32), keeping a backup until it succeeds.
    Migrate { file: PathBuf },
    /// List the files inside an agent file (or, if FILE is not a file, of the daemon agent
    /// with that id, handle or name).
    Files {
        file: PathBuf,
        /// Only paths starting with this prefix.
        prefix: Option<String>,
    },
    /// Print a file stored in the agent to stdout (raw bytes).
    Cat { file: PathBuf, path: String },
    /// Store a file in the agent, from SOURCE or from stdin.
    Put {
        file: PathBuf,
        /// Path inside the agent, e.g. `lib/report.ts`.
        path: String,
        /// File to read; stdin when omitted or `-`.
        source: Option<PathBuf>,
        /// Protection for a new file: none, no_delete or read_only.
        #[arg(long)]
        protection: Option<String>,
        /// MIME type (guessed from the extension when omitted).
        #[arg(long)]
        mime: Option<String>,
    },
    /// Delete a file stored in the agent (or, if FILE is not a file, in the daemon agent with
    /// that id, handle or name). A read_only or no_delete file needs --force.
    Rm {
        file: PathBuf,
        path: String,
        /// Delete even a read_only or no_delete file.
        #[arg(long)]
        force: bool,
    },
    /// Trust a stored file as code (spec §4.3): its lambdas may call restricted tools.
    Authorize { file: PathBuf, path: String },
    /// Withdraw the trust `authorize` granted.
    Unauthorize { file: PathBuf, path: String },
    /// Read and write adf_meta.
    #[command(subcommand)]
    Meta(MetaCommand),
    /// Read and write the agent config with dot paths (`model.temperature`, `tools.fs_delete.enabled`).
    /// `adf config AGENT` prints a daemon agent's config instead.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print a loop's transcript.
    Loop {
        file: PathBuf,
        /// Loop name.
        #[arg(long = "loop", default_value = "main")]
        loop_name: String,
        /// Show runtime context rows in full instead of folding them.
        #[arg(long)]
        context: bool,
    },
    /// List received messages (FILE, or a daemon agent id/handle/name).
    Inbox {
        file: PathBuf,
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// List sent messages (FILE, or a daemon agent id/handle/name).
    Outbox {
        file: PathBuf,
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// List timers (FILE, or a daemon agent id/handle/name).
    Timers { file: PathBuf },
    /// List tasks (asynchronous tool calls and approvals) of FILE, or of a daemon agent.
    Tasks {
        file: PathBuf,
        /// Only tasks with this status, e.g. pending_approval.
        #[arg(long)]
        status: Option<String>,
    },
    /// Show recent runtime log rows (FILE, or a daemon agent id/handle/name).
    Logs {
        file: PathBuf,
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// The owner identity of this installation (kept in $ADF_HOME, default ~/.adf).
    #[command(subcommand)]
    Owner(OwnerCommand),
    /// An agent's identity: envelope status and sealed credentials.
    #[command(subcommand)]
    Identity(IdentityCommand),
    /// An agent's MCP servers: add (install and discover), list, restart, remove, review.
    #[command(subcommand)]
    Mcp(Box<McpCommand>),
    /// An agent's npm packages (code_execution.packages): list (default), install NAME or NAME@RANGE
    /// into the shared store under $ADF_HOME/packages, remove NAME. Pure JavaScript only;
    /// native addons are refused and no package script ever runs.
    Packages {
        file: PathBuf,
        #[command(subcommand)]
        action: Option<PackagesAction>,
    },
    /// Run a tool against the file as the model, agent code, authorized code or the owner,
    /// with the same access rules and approvals the runtime applies.
    Tool {
        file: PathBuf,
        /// Tool name, e.g. fs_write or sys_update_config.
        name: String,
        /// Arguments as a JSON object, e.g. '{"path":"a.md","mode":"write","content":"hi"}'.
        #[arg(long)]
        args: Option<String>,
        /// Who calls: model (restricted tools need approval), code, authorized or owner.
        #[arg(long = "as", value_enum, default_value = "model")]
        call_as: tool_cmds::CallAs,
        /// Approve every approval request without asking.
        #[arg(long, conflicts_with = "deny_all")]
        approve_all: bool,
        /// Deny every approval request without asking.
        #[arg(long)]
        deny_all: bool,
    },
    /// Approve a task waiting for the owner (a restricted call or a protection override).
    /// FILE may be a daemon agent id/handle/name instead.
    Approve { file: PathBuf, task: String },
    /// Deny a task waiting for the owner (FILE, or a daemon agent id/handle/name).
    Deny {
        file: PathBuf,
        task: String,
        /// Why; the agent sees it.
        reason: Option<String>,
    },
    /// Talk to the agent: runs turns in this process against its model (`model.provider`),
    /// streaming the reply. Without MESSAGE, each line of stdin is a message until end of input.
    /// When FILE is not an existing file it names an agent of the running daemon (id, handle or
    /// name) and MESSAGE is sent there (`POST /agents/{id}/chat`); the turn runs in the daemon.
    Chat {
        file: PathBuf,
        /// The message; omit it for an interactive session.
        message: Option<String>,
        /// Which loop to talk to.
        #[arg(long = "loop", default_value = "main")]
        loop_name: String,
        /// Approve every approval request without asking.
        #[arg(long, conflicts_with = "deny_all")]
        approve_all: bool,
        /// Deny every approval request without asking.
        #[arg(long)]
        deny_all: bool,
        /// Answer every `ask` from the agent with this text instead of reading stdin.
        #[arg(long)]
        answer: Option<String>,
    },
    /// Run a lambda of the agent (`lib/a.ts:fn`, function default `main`) as a trigger would:
    /// authorized exactly when its file and every module it imports are authorized.
    Run {
        file: PathBuf,
        /// `path/file.ts:functionName`.
        lambda: String,
        /// The function's single argument, a JSON object.
        #[arg(long)]
        args: Option<String>,
        /// Time limit in ms (at most limits.execution_timeout_ms).
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Run inline JavaScript (or TypeScript with --ts) as `sys_code` does: unauthorized, with
    /// the `adf` object; `-` reads the code from stdin.
    Code {
        file: PathBuf,
        /// The code: the body of an async function (`return` gives the result).
        code: String,
        /// Strip TypeScript types first.
        #[arg(long)]
        ts: bool,
        /// Time limit in ms (at most limits.execution_timeout_ms).
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Take ownership of a file whose identity is foreign here: new DID, `clone` attestation,
    /// old DID kept in adf_did_history. A file with no identity yet is provisioned instead.
    Claim {
        file: PathBuf,
        /// Also adopt credentials shared with `adf identity share`: the share password is read
        /// from stdin.
        #[arg(long)]
        password_stdin: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum OwnerCommand {
    /// Create the owner identity from a fresh recovery phrase (refuses to replace one).
    Init {
        /// Replace an existing owner: files it provisioned become foreign here.
        #[arg(long)]
        force: bool,
    },
    /// Show the owner and runtime DIDs (public information only).
    Show,
    /// Print the owner's recovery phrase (the only command that prints a secret).
    ExportMnemonic,
    /// Restore the owner from its recovery phrase, read from stdin.
    Import {
        /// Replace a different existing owner.
        #[arg(long)]
        force: bool,
    },
}

/// `adf packages FILE …`.
#[derive(Debug, Subcommand)]
pub(crate) enum PackagesAction {
    /// The agent's packages with their installed size.
    List,
    /// Resolve NAME or NAME@RANGE against the npm registry (the runtime setting npmRegistry) and add
    /// it to the agent.
    Install {
        /// `lodash`, `lodash@^4.17.0`, `@scope/pkg@latest`.
        spec: String,
    },
    /// Remove NAME from the agent (the shared store keeps its files).
    Remove { name: String },
}

/// `adf mcp …`.
#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Install a server package (npm by default, or PyPI), or attach a command or an HTTP
    /// server, then discover its tools (enabled, restricted by default).
    Add {
        file: PathBuf,
        /// The npm or PyPI package, or the command for --type custom.
        package: Option<String>,
        /// npm (default), pypi, custom or http.
        #[arg(long = "type", default_value = "npm")]
        kind: String,
        /// The server name (SERVER in the tool names mcp_SERVER_TOOL); derived from the package.
        #[arg(long)]
        name: Option<String>,
        /// The endpoint of an http server.
        #[arg(long)]
        url: Option<String>,
        /// An argument for the server (repeatable).
        #[arg(long = "arg", allow_hyphen_values = true)]
        args: Vec<String>,
        /// A credential the server reads, set with `adf identity set FILE mcp:<server>:<KEY>`.
        #[arg(long = "env-key")]
        env_keys: Vec<String>,
        /// A static, non-secret HTTP header NAME=VALUE.
        #[arg(long = "header")]
        headers: Vec<String>,
        /// An HTTP header whose value is a credential: HEADER=KEY.
        #[arg(long = "header-env")]
        header_env: Vec<String>,
        /// The credential sent as `Authorization: Bearer …`.
        #[arg(long)]
        bearer_token_env_var: Option<String>,
        /// Run on the host (needs compute.host_access).
        #[arg(long)]
        host: bool,
    },
    /// The servers and their tool declarations.
    List { file: PathBuf },
    /// Restart a server and refresh its tools (owner choices kept; changed tools disabled).
    Restart { file: PathBuf, name: String },
    /// Remove a server and every mcp_NAME_* declaration.
    Remove { file: PathBuf, name: String },
    /// MCP tools that are new or changed since the owner last reviewed them.
    Review {
        file: PathBuf,
        /// Record the current definitions as reviewed (re-enables changed tools).
        #[arg(long)]
        accept: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum IdentityCommand {
    /// Envelope states (unlocked, locked, foreign, absent), DIDs and slots; provisions a file
    /// that has no identity yet and adds a runtime slot after an owner-slot unlock.
    Status { file: PathBuf },
    /// Seal a secret into the credentials envelope; the value is read from stdin.
    Set {
        file: PathBuf,
        /// Name of the secret, e.g. `provider:openai:apiKey` or `adapter:telegram:TELEGRAM_BOT_TOKEN`.
        purpose: String,
        /// Let the agent's own code read it (`get_identity`); off by default.
        #[arg(long)]
        code_access: bool,
    },
    /// List identity purposes and how each is stored (never the values).
    List { file: PathBuf },
    /// Add a password slot to the credentials envelope so another owner can adopt them; the
    /// password is read from stdin. The identity envelope is never shared.
    Share { file: PathBuf },
}

#[derive(Debug, Subcommand)]
pub(crate) enum MetaCommand {
    /// Print one key's value, or every key when KEY is omitted.
    Get { file: PathBuf, key: Option<String> },
    /// Set a key (created with --protection, default none).
    Set {
        file: PathBuf,
        key: String,
        value: String,
        #[arg(long)]
        protection: Option<String>,
        /// Write a registry key that another command keeps in step (identity DIDs, name,
        /// handle, …) anyway; `adf check` may then call the file broken.
        #[arg(long)]
        force: bool,
    },
    /// Delete a key.
    Rm {
        file: PathBuf,
        key: String,
        /// Delete a registry key that another command keeps in step anyway.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the config, or the value at PATH.
    Get { file: PathBuf, path: Option<String> },
    /// Set PATH to a JSON value (a bare word is taken as a string).
    Set {
        file: PathBuf,
        path: String,
        /// JSON value, e.g. `0.5`, `true`, `"text"`, `{"a":1}`.
        value: String,
        /// Append VALUE to the array at PATH instead of replacing it.
        #[arg(long, conflicts_with = "remove")]
        append: bool,
        /// Remove element N of the array at PATH (VALUE is ignored).
        #[arg(long, value_name = "N")]
        remove: Option<usize>,
    },
}

fn main() -> ExitCode {
    // `adf` is also the jq worker of its own shells (adf-shell `worker`): a child it started
    // serves one request and ends before anything else runs.
    if let Some(code) = adf_shell::worker::run_if_requested() {
        return ExitCode::from(code);
    }
    let cli = Cli::parse_from(client_cmds::rewrite_args(std::env::args_os()));
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("ADF_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let out = Output { json: cli.json };
    let command = match cli.command {
        TopCommand::Client(command) => return client_cmds::run(command, cli.url.as_deref(), out),
        TopCommand::File(command) => match client_cmds::route(command, cli.url.as_deref(), out) {
            client_cmds::Routed::Done(code) => return code,
            client_cmds::Routed::File(command) => command,
        },
    };
    match dispatch::run(command, out) {
        Ok(code) => code,
        Err(error) => {
            if out.json {
                let body = serde_json::json!({ "error": format!("{error:#}") });
                println!("{body}");
            }
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
