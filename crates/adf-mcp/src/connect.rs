//! Opening one MCP session: a child process with a cleared environment and its own scratch
//! directory (stdio), or Streamable HTTP on a client `adf-egress` built after its policy
//! admitted the URL.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use rmcp::RoleClient;
use rmcp::ServiceExt as _;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::io::AsyncBufReadExt as _;
use zeroize::Zeroizing;

use crate::McpError;
use crate::spec::{ServerSpec, Transport};

/// A live MCP session.
pub(crate) type Session = RunningService<RoleClient, ()>;

/// Lines of a server's stderr kept until the next call writes them to `adf_logs`.
pub const STDERR_LINES: usize = 64;
/// Longest stderr line kept (longer lines are cut).
pub const STDERR_LINE_BYTES: usize = 1_000;

/// The bounded tail of a server's stderr.
#[derive(Debug, Default, Clone)]
pub struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    fn push(&self, mut line: String) {
        if line.len() > STDERR_LINE_BYTES {
            let mut cut = STDERR_LINE_BYTES;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
            line.push('…');
        }
        if let Ok(mut lines) = self.0.lock() {
            if lines.len() == STDERR_LINES {
                lines.pop_front();
            }
            lines.push_back(line);
        }
    }

    /// Takes every line kept so far.
    pub fn drain(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|mut lines| lines.drain(..).collect())
            .unwrap_or_default()
    }
}

/// Where and with what a server starts.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The agent's file (the scratch directory goes next to it).
    pub file: PathBuf,
    /// Credential values by variable name, from `adf_identity`.
    pub credentials: BTreeMap<String, Zeroizing<String>>,
    /// The egress policy the agent's HTTP servers are admitted by.
    pub egress: adf_egress::Policy,
    /// Where `npm:`/`pypi:` sources are installed (`None`: such servers cannot start).
    pub packages: Option<crate::install::PackageCache>,
}

/// The scratch directory of server `name` of the agent at `file`: `<file>.mcp/<name>`.
pub fn scratch_dir(file: &Path, name: &str) -> PathBuf {
    let mut dir = file.as_os_str().to_owned();
    dir.push(".mcp");
    PathBuf::from(dir).join(name)
}

/// The variables a child process gets: nothing inherited but `PATH` (so `node`/`python3`
/// resolve), `HOME` set to its scratch directory, the declared static `env` and its
/// credentials. `$ADF_HOME` and everything else of the runtime's environment stay out.
pub(crate) fn child_env(
    spec: &ServerSpec,
    scratch: &Path,
    credentials: &BTreeMap<String, Zeroizing<String>>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert(
        "PATH".to_owned(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned()),
    );
    env.insert("HOME".to_owned(), scratch.display().to_string());
    for (key, value) in &spec.env {
        env.insert(key.clone(), value.clone());
    }
    for (key, value) in credentials {
        env.insert(key.clone(), value.to_string());
    }
    env
}

/// Opens a session with `spec`'s server.
pub(crate) async fn open(
    spec: &ServerSpec,
    launch: &Launch,
    stderr: &StderrTail,
) -> Result<Session, McpError> {
    match &spec.transport {
        Transport::Stdio { command, args } => {
            let scratch = scratch_dir(&launch.file, &spec.name);
            std::fs::create_dir_all(&scratch).map_err(|e| {
                McpError::Start(format!(
                    "cannot create the scratch directory {}: {e}",
                    scratch.display()
                ))
            })?;
            let (program, mut leading) = match spec.source.as_deref() {
                Some(source) if source.starts_with("npm:") || source.starts_with("pypi:") => {
                    let cache = launch.packages.as_ref().ok_or_else(|| {
                        McpError::Start(format!(
                            "MCP server '{}' comes from {source}, and this runtime has no package cache",
                            spec.name
                        ))
                    })?;
                    match cache.resolve(source) {
                        Some(resolved) => resolved?,
                        None => (command.clone(), Vec::new()),
                    }
                }
                _ => (command.clone(), Vec::new()),
            };
            leading.extend(args.iter().cloned());
            let mut command_line = tokio::process::Command::new(&program);
            command_line
                .args(&leading)
                .env_clear()
                .envs(child_env(spec, &scratch, &launch.credentials))
                .current_dir(&scratch)
                .kill_on_drop(true);
            let (transport, child_stderr) = TokioChildProcess::builder(command_line)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| {
                    McpError::Start(format!(
                        "cannot start MCP server '{}' ({program}): {e}",
                        spec.name
                    ))
                })?;
            if let Some(child_stderr) = child_stderr {
                let tail = stderr.clone();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(child_stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tail.push(line);
                    }
                });
            }
            ().serve(transport).await.map_err(|e| {
                McpError::Start(format!(
                    "MCP server '{}' did not complete the MCP handshake: {e}",
                    spec.name
                ))
            })
        }
        Transport::Http {
            url,
            headers,
            header_env,
            bearer_token_env,
        } => {
            let parsed = reqwest::Url::parse(url).map_err(|e| {
                McpError::Config(format!("MCP server '{}': bad url: {e}", spec.name))
            })?;
            let pins = adf_egress::resolve::Pins::default();
            launch
                .egress
                .admit("POST", &parsed, &adf_egress::resolve::SystemLookup, &pins)
                .await
                .map_err(|e| McpError::Refused(format!("MCP server '{}': {e}", spec.name)))?;
            let client = adf_egress::client::agent_client(&pins, Default::default())
                .map_err(|e| McpError::Start(e.to_string()))?;
            let mut custom = std::collections::HashMap::new();
            let mut add = |name: &str, value: &str| -> Result<(), McpError> {
                let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| McpError::Config(format!("header '{name}': {e}")))?;
                let mut value = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
                    McpError::Config(format!("header '{name}' has an invalid value"))
                })?;
                value.set_sensitive(true);
                custom.insert(header, value);
                Ok(())
            };
            for (name, value) in headers {
                add(name, value)?;
            }
            for (name, env) in header_env {
                if let Some(value) = launch.credentials.get(env) {
                    add(name, value)?;
                }
            }
            let mut config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            if let Some(token) = bearer_token_env
                .as_ref()
                .and_then(|env| launch.credentials.get(env))
            {
                config = config.auth_header(token.to_string());
            }
            let transport = StreamableHttpClientTransport::with_client(client, config);
            ().serve(transport).await.map_err(|e| {
                McpError::Start(format!(
                    "MCP server '{}' at {url} did not complete the MCP handshake: {e}",
                    spec.name
                ))
            })
        }
    }
}
