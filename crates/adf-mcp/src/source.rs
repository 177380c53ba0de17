//! The seam into the runtime: [`McpSource`] is an `adf_runtime::tools::ToolSource` answering
//! `mcp_<server>_<tool>` names with an [`McpTool`], one `Tool` per discovered tool, so every
//! call goes through `ToolRegistry::call` (access matrix, approvals, audit, one transaction,
//! one log row). The call itself is detached network/process work: `prepare` reads what
//! needs the file (the server declaration, credentials from `adf_identity`), `detach` talks
//! to the server outside any transaction.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use adf_runtime::home::RuntimeHome;
use adf_runtime::tools::{
    Detached, DetachedOutcome, DetachedTool, ErrorCode, Execution, LogRow, Tool, ToolCaller,
    ToolContext, ToolError, ToolSource,
};
use adf_store::AdfFile;
use serde_json::{Map, Value, json};
use zeroize::Zeroizing;

use crate::McpError;
use crate::connect::Launch;
use crate::declare::DEFINITION_FIELD;
use crate::spec::{ServerSpec, find_server, split_tool_name};
use crate::supervisor::{Credentials, Supervisor};

type CredentialStash = Arc<Mutex<HashMap<(PathBuf, String), Credentials>>>;

/// The MCP tools of every agent of this process, backed by one [`Supervisor`].
#[derive(Clone, Debug, Default)]
pub struct McpSource {
    supervisor: Supervisor,
    home: Option<RuntimeHome>,
    stash: Stash,
}

#[derive(Clone, Default)]
struct Stash(CredentialStash);

impl std::fmt::Debug for Stash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stash(..)")
    }
}

impl McpSource {
    /// A source on `supervisor`; `home` unlocks sealed credentials (`$ADF_HOME` when `None`).
    pub fn new(supervisor: Supervisor, home: Option<RuntimeHome>) -> Self {
        McpSource {
            supervisor,
            home,
            stash: Stash::default(),
        }
    }

    /// The supervisor running this source's servers.
    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    /// The runtime home given at construction, if any.
    pub fn home(&self) -> Option<RuntimeHome> {
        self.home.clone()
    }

    /// The runtime home given at construction, else `$ADF_HOME`.
    fn runtime_home(&self) -> Option<RuntimeHome> {
        match &self.home {
            Some(home) => Some(home.clone()),
            None => RuntimeHome::from_env().ok(),
        }
    }

    /// Whether this runtime lets agents run MCP servers on the host (CFG-37): see
    /// [`runtime_host_access`].
    pub fn host_access(&self) -> bool {
        self.runtime_home()
            .is_some_and(|home| runtime_host_access(home.dir()))
    }

    /// The package cache of the runtime home (`$ADF_HOME` when none was given).
    fn packages(&self) -> Option<crate::install::PackageCache> {
        let home = self.runtime_home()?;
        Some(crate::install::PackageCache::new(home.dir()))
    }
}

impl ToolSource for McpSource {
    fn tool(&self, config: &Value, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(tool) = crate::tools::management_tool(self, name) {
            return Some(tool);
        }
        let (server, tool) = split_tool_name(config, name)?;
        let declaration = config
            .get("tools")
            .and_then(Value::as_array)?
            .iter()
            .find(|d| d.get("name").and_then(Value::as_str) == Some(name))?;
        let definition = declaration.get(DEFINITION_FIELD);
        let description = definition
            .and_then(|d| d.get("description"))
            .and_then(Value::as_str)
            .filter(|d| !d.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| format!("Tool '{tool}' of MCP server '{server}'."));
        let parameters = definition
            .and_then(|d| d.get("input_schema"))
            .filter(|s| s.is_object())
            .cloned()
            .unwrap_or_else(|| json!({ "type": "object" }));
        Some(Arc::new(McpTool {
            name: name.to_owned(),
            server,
            tool: tool.to_owned(),
            description,
            parameters,
            removed: declaration.get("mcp_tool_status").and_then(Value::as_str) == Some("removed"),
            source: self.clone(),
        }))
    }
}

/// One discovered tool of one server, as the pipeline sees it.
#[derive(Debug)]
pub struct McpTool {
    name: String,
    server: String,
    tool: String,
    description: String,
    parameters: Value,
    removed: bool,
    source: McpSource,
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn run(&self, _cx: &mut ToolContext<'_>, _args: Value) -> Result<Value, ToolError> {
        Err(ToolError::new(
            ErrorCode::InternalError,
            format!("'{}' runs detached; this caller cannot run it", self.name),
        ))
    }

    fn check(&self, cx: &ToolContext<'_>, _args: &Value) -> Result<(), ToolError> {
        self.callable(cx.config).map(|_| ())
    }

    fn execution(&self) -> Execution<'_> {
        Execution::Detached(self)
    }
}

impl DetachedTool for McpTool {
    fn prepare(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let spec = self.callable(cx.config)?;
        let file = cx.file.path().to_path_buf();
        let credentials = read_credentials(cx.file, self.source.home.as_ref(), &spec)?;
        if let Ok(mut stash) = self.source.stash.0.lock() {
            stash.insert((file.clone(), spec.name.clone()), credentials);
        }
        Ok(json!({ "file": file, "arguments": args }))
    }

    fn detach(&self, config: &Value, caller: &ToolCaller, args: Value) -> Option<Detached> {
        let _ = caller;
        let source = self.source.clone();
        let server = self.server.clone();
        let tool = self.tool.clone();
        let config = config.clone();
        Some(Box::pin(async move {
            let file = PathBuf::from(args.get("file").and_then(Value::as_str).unwrap_or_default());
            let arguments = match args.get("arguments") {
                Some(Value::Object(map)) => map.clone(),
                _ => Map::new(),
            };
            let credentials = source
                .stash
                .0
                .lock()
                .ok()
                .and_then(|mut stash| stash.remove(&(file.clone(), server.clone())))
                .unwrap_or_default();
            let secrets = redactions(&credentials);
            let result = call(
                &source,
                &config,
                &file,
                &server,
                &tool,
                arguments,
                credentials,
            )
            .await;
            // A server that prints a credential (stderr, an error) does not put it in the logs.
            let mut logs: Vec<LogRow> = source
                .supervisor
                .drain_stderr(&file, &server)
                .into_iter()
                .map(|line| LogRow {
                    level: "info",
                    origin: "mcp",
                    event: "server_stderr",
                    target: Some(server.clone()),
                    message: crate::result::redact(&line, &secrets),
                    data: None,
                })
                .collect();
            let result = result.map_err(|mut error| {
                error.message = crate::result::redact(&error.message, &secrets);
                error
            });
            if let Err(error) = &result {
                logs.push(LogRow {
                    level: "warn",
                    origin: "mcp",
                    event: "call_failed",
                    target: Some(format!("mcp_{server}_{tool}")),
                    message: error.message.clone(),
                    data: None,
                });
            }
            DetachedOutcome {
                result,
                logs,
                deliveries: Vec::new(),
            }
        }))
    }
}

impl McpTool {
    /// The server's declaration, when a call may go to it now.
    fn callable(&self, config: &Value) -> Result<ServerSpec, ToolError> {
        if self.removed {
            return Err(ToolError::new(
                ErrorCode::ToolError,
                format!(
                    "MCP server '{}' no longer lists '{}' (mcp_tool_status: removed)",
                    self.server, self.tool
                ),
            ));
        }
        let spec = find_server(config, &self.server).map_err(to_tool_error)?;
        if spec.run_location.as_deref() == Some("host")
            && config
                .pointer("/compute/host_access")
                .and_then(Value::as_bool)
                != Some(true)
        {
            return Err(ToolError::new(
                ErrorCode::ToolError,
                format!(
                    "MCP server '{}' has run_location 'host', which needs compute.host_access: true",
                    self.server
                ),
            ));
        }
        if spec.run_location.as_deref() == Some("host") && !self.source.host_access() {
            return Err(ToolError::new(
                ErrorCode::ToolError,
                format!(
                    "MCP server '{}' has run_location 'host', and this runtime's host access is off: the owner turns it on with the runtime setting {HOST_ACCESS_SETTING}: true (`$ADF_HOME/settings.json`, `PUT /settings/compute`)",
                    self.server
                ),
            ));
        }
        if matches!(spec.run_location.as_deref(), Some(location) if location != "host" && location != "shared" && location != "local")
        {
            return Err(ToolError::new(
                ErrorCode::ToolError,
                format!(
                    "MCP server '{}': run_location '{}' needs a container runtime, which this runtime does not provide; refusing rather than running it elsewhere",
                    self.server,
                    spec.run_location.as_deref().unwrap_or_default()
                ),
            ));
        }
        Ok(spec)
    }
}

async fn call(
    source: &McpSource,
    config: &Value,
    file: &std::path::Path,
    server: &str,
    tool: &str,
    arguments: Map<String, Value>,
    credentials: Credentials,
) -> Result<Value, ToolError> {
    let spec = find_server(config, server).map_err(to_tool_error)?;
    let launch = Launch {
        file: file.to_path_buf(),
        credentials,
        egress: egress_policy(config),
        packages: source.packages(),
    };
    let result = source
        .supervisor
        .call(&spec, &launch, tool, arguments)
        .await
        .map_err(to_tool_error)?;
    crate::result::map(result, &redactions(&launch.credentials))
}

/// The credential values a result, an error or a log row must never carry.
fn redactions(credentials: &Credentials) -> Vec<Zeroizing<String>> {
    credentials
        .values()
        .filter(|v| v.len() >= 4)
        .cloned()
        .collect()
}

/// The runtime-level setting `compute.host_access` also needs (CFG-37, missing-tables §5.12):
/// the key `hostAccess` of the `compute` object in the runtime home's `settings.json`.
pub const HOST_ACCESS_SETTING: &str = "compute.hostAccess";

/// Whether the runtime setting [`HOST_ACCESS_SETTING`] is on in the runtime home `home`
/// (`settings.json` there). Off when the file, the key or a readable boolean is missing: host
/// access is what an owner grants, never a default.
pub fn runtime_host_access(home: &std::path::Path) -> bool {
    std::fs::read(home.join("settings.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .and_then(|settings| {
            settings
                .pointer("/compute/hostAccess")
                .and_then(Value::as_bool)
        })
        == Some(true)
}

/// The agent's egress policy for an HTTP server: `security.allow_local_fetch` and the
/// control APIs recorded in the runtime home (§5.6 rule 2).
pub fn egress_policy(config: &Value) -> adf_egress::Policy {
    adf_egress::Policy {
        allow_local: config
            .pointer("/security/allow_local_fetch")
            .and_then(Value::as_bool)
            == Some(true),
        served_origins: Vec::new(),
        control_apis: adf_runtime::fetch::recorded_control_apis(None),
    }
}

/// Reads `spec`'s credentials from the agent's `adf_identity` (`mcp:<server>:<KEY>`). A
/// missing required one is an error naming the key and the command that sets it.
pub fn read_credentials(
    file: &mut AdfFile,
    home: Option<&RuntimeHome>,
    spec: &ServerSpec,
) -> Result<Credentials, ToolError> {
    let keys = spec.credential_keys();
    let mut credentials = Credentials::new();
    if keys.is_empty() {
        return Ok(credentials);
    }
    let rows = file.identity_rows()?;
    let mut open = None;
    for key in keys {
        let purpose = spec.purpose(&key.key);
        let Some(row) = rows.iter().find(|r| r.purpose == purpose) else {
            if key.required {
                return Err(ToolError::new(
                    ErrorCode::ToolError,
                    format!(
                        "MCP server '{}' needs the credential {}; set it with `adf identity set {} {purpose}` (the value is read from stdin)",
                        spec.name,
                        key.key,
                        file.path().display()
                    ),
                ));
            }
            continue;
        };
        let bytes: Zeroizing<Vec<u8>> = if row.encryption_algo == "plain" {
            Zeroizing::new(row.value.clone())
        } else {
            if open.is_none() {
                let home = match home {
                    Some(home) => home.clone(),
                    None => {
                        RuntimeHome::from_env().map_err(|e| ToolError::failed(e.to_string()))?
                    }
                };
                let keys = adf_runtime::identity::LocalKeys::existing(&home)
                    .map_err(|e| ToolError::failed(e.to_string()))?;
                open = Some(
                    adf_runtime::identity::open_identity(file, &keys)
                        .map_err(|e| ToolError::failed(e.to_string()))?,
                );
            }
            let Some(identity) = open.as_ref() else {
                continue;
            };
            adf_runtime::identity::read_credential(file, identity, &purpose)
                .map_err(|e| {
                    ToolError::failed(format!(
                        "cannot unseal {purpose} for MCP server '{}': {e}",
                        spec.name
                    ))
                })?
                .unwrap_or_default()
        };
        let text = String::from_utf8(bytes.to_vec())
            .map_err(|_| ToolError::failed(format!("{purpose} is not text")))?;
        credentials.insert(key.key.clone(), Zeroizing::new(text));
    }
    Ok(credentials)
}

fn to_tool_error(error: McpError) -> ToolError {
    let code = match &error {
        McpError::Timeout(_) => ErrorCode::Timeout,
        McpError::NotFound(_) => ErrorCode::NotFound,
        McpError::Refused(_) => ErrorCode::ToolError,
        _ => ErrorCode::ToolError,
    };
    ToolError::new(code, error.to_string())
}
