//! The agent's MCP management tools (tools guide "MCP Management Tools"): `mcp_install`,
//! `mcp_restart` and `mcp_uninstall`, disabled by default. They run inside the call's
//! transaction like any synchronous tool: the install and the discovery run on a scoped
//! thread with a runtime of their own (the caller's thread holds the file and waits), against
//! a discovery-only [`Supervisor`] stopped before the call returns; the agent's running
//! session of a replaced or removed server is dropped so its next call starts afresh.

use std::sync::Arc;

use adf_runtime::tools::{ErrorCode, Tool, ToolContext, ToolError};
use serde_json::{Value, json};

use crate::McpError;
use crate::install::{InstallRequest, Kind};
use crate::manage::Manager;
use crate::source::McpSource;
use crate::spec::{credential_purpose, header_env, string_map, strings, valid_server_name};
use crate::supervisor::Supervisor;

/// The names these tools answer to.
pub const MANAGEMENT_TOOLS: [&str; 3] = ["mcp_install", "mcp_restart", "mcp_uninstall"];

/// The management tool `name`, bound to `source`.
pub(crate) fn management_tool(source: &McpSource, name: &str) -> Option<Arc<dyn Tool>> {
    let management = Management {
        source: source.clone(),
    };
    let tool: Arc<dyn Tool> = match name {
        "mcp_install" => Arc::new(McpInstall(management)),
        "mcp_restart" => Arc::new(McpRestart(management)),
        "mcp_uninstall" => Arc::new(McpUninstall(management)),
        _ => return None,
    };
    Some(tool)
}

/// What the three tools share: the source whose servers they manage.
#[derive(Debug)]
struct Management {
    source: McpSource,
}

#[derive(Debug)]
struct McpInstall(Management);

#[derive(Debug)]
struct McpRestart(Management);

#[derive(Debug)]
struct McpUninstall(Management);

fn failed(error: McpError) -> ToolError {
    let code = match error {
        McpError::Config(_) => ErrorCode::InvalidInput,
        McpError::NotFound(_) => ErrorCode::NotFound,
        McpError::Timeout(_) => ErrorCode::Timeout,
        _ => ErrorCode::ToolError,
    };
    ToolError::new(code, error.to_string())
}

fn text(args: &Value, field: &str) -> Option<String> {
    args.get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Runs `work` on a scoped thread with its own current-thread runtime: the caller's thread
/// (which may itself be inside a runtime) only waits.
fn run_blocking<T: Send>(
    work: impl FnOnce() -> Result<T, ToolError> + Send,
) -> Result<T, ToolError> {
    std::thread::scope(|scope| {
        scope.spawn(work).join().unwrap_or_else(|_| {
            Err(ToolError::new(
                ErrorCode::InternalError,
                "the MCP management work stopped on an internal error",
            ))
        })
    })
}

fn with_runtime<T>(
    work: impl std::future::Future<Output = Result<T, ToolError>>,
) -> Result<T, ToolError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ToolError::failed(format!("cannot start the MCP runtime: {e}")))?;
    runtime.block_on(work)
}

impl Management {
    fn manager(&self) -> Result<Manager, ToolError> {
        let home = match self.source.home() {
            Some(home) => home,
            None => adf_runtime::home::RuntimeHome::from_env()
                .map_err(|e| ToolError::failed(e.to_string()))?,
        };
        // Discovery gets its own supervisor: its processes end with this call.
        Ok(Manager {
            home,
            supervisor: Supervisor::default(),
        })
    }

    fn install(&self, cx: &mut ToolContext<'_>, args: &Value) -> Result<Value, ToolError> {
        let kind = match text(args, "type") {
            Some(kind) => Kind::parse(&kind).map_err(failed)?,
            None => Kind::Npm,
        };
        let secrets: Vec<(String, String)> = args
            .get("env")
            .and_then(Value::as_object)
            .map(|env| {
                env.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        let mut env_keys = strings(args, "env_keys");
        for (key, _) in &secrets {
            if !env_keys.contains(key) {
                env_keys.push(key.clone());
            }
        }
        let request = InstallRequest {
            kind,
            package: text(args, "package"),
            url: text(args, "url"),
            name: text(args, "name"),
            args: strings(args, "args"),
            host: args.get("host").and_then(Value::as_bool) == Some(true),
            env_keys,
            headers: string_map(args, "headers"),
            header_env: header_env(args),
            bearer_token_env_var: text(args, "bearer_token_env_var"),
        };
        let config = cx.config.clone();
        let server = crate::install::declaration(&request, &config).map_err(failed)?;
        let name = server
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if !secrets.is_empty() {
            store_credentials(cx, self.source.home(), &name, &secrets)?;
        }
        let manager = self.manager()?;
        let file = &mut *cx.file;
        let (name, report) = run_blocking(|| {
            with_runtime(async {
                let outcome = manager.add(file, &request).await;
                manager
                    .supervisor
                    .stop_idle(std::time::Instant::now(), std::time::Duration::ZERO)
                    .await;
                outcome.map_err(failed)
            })
        })?;
        self.source.supervisor().forget_server(file.path(), &name);
        Ok(
            json!({ "server": name, "tools": report.added, "restricted_until_reviewed": crate::spec::new_tools_restricted(&config) }),
        )
    }

    fn restart(&self, cx: &mut ToolContext<'_>, args: &Value) -> Result<Value, ToolError> {
        let name = text(args, "name").ok_or_else(|| ToolError::invalid("name is required"))?;
        let manager = self.manager()?;
        let file = &mut *cx.file;
        self.source.supervisor().forget_server(file.path(), &name);
        let report = run_blocking(|| {
            with_runtime(async {
                let outcome = manager.restart(file, &name).await;
                manager
                    .supervisor
                    .stop_idle(std::time::Instant::now(), std::time::Duration::ZERO)
                    .await;
                outcome.map_err(failed)
            })
        })?;
        Ok(json!({
            "server": name,
            "added": report.added,
            "changed": report.changed,
            "removed": report.removed,
            "unchanged": report.unchanged,
        }))
    }

    fn uninstall(&self, cx: &mut ToolContext<'_>, args: &Value) -> Result<Value, ToolError> {
        let name = text(args, "name").ok_or_else(|| ToolError::invalid("name is required"))?;
        let mut config = cx.file.config()?;
        if !crate::declare::remove_server(&mut config, &name) {
            return Err(ToolError::not_found(format!(
                "no MCP server named '{name}' in mcp.servers"
            )));
        }
        cx.file.config_replace(adf_store::Caller::Owner, config)?;
        self.source
            .supervisor()
            .forget_server(cx.file.path(), &name);
        Ok(json!({ "removed": name }))
    }
}

/// `env` values of `mcp_install` go to the agent's credentials as `mcp:<server>:<KEY>`.
fn store_credentials(
    cx: &mut ToolContext<'_>,
    home: Option<adf_runtime::home::RuntimeHome>,
    server: &str,
    secrets: &[(String, String)],
) -> Result<(), ToolError> {
    if !valid_server_name(server) {
        return Err(ToolError::invalid(format!(
            "'{server}' is not a server name"
        )));
    }
    let home = match home {
        Some(home) => home,
        None => adf_runtime::home::RuntimeHome::from_env()
            .map_err(|e| ToolError::failed(e.to_string()))?,
    };
    let keys = adf_runtime::identity::LocalKeys::existing(&home)
        .map_err(|e| ToolError::failed(e.to_string()))?;
    let open = adf_runtime::identity::open_identity(cx.file, &keys)
        .map_err(|e| ToolError::failed(e.to_string()))?;
    for (key, value) in secrets {
        adf_runtime::identity::set_credential(
            cx.file,
            &open,
            &credential_purpose(server, key),
            value.as_bytes(),
            false,
        )
        .map_err(|e| ToolError::failed(e.to_string()))?;
    }
    Ok(())
}

/// The arguments of `mcp_restart` and `mcp_uninstall`: the server's name.
fn server_name_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "name": { "type": "string" } },
        "required": ["name"],
        "additionalProperties": false
    })
}

impl Tool for McpInstall {
    adf_runtime::declare_tool! {
        name: "mcp_install",
        description: "Install an MCP server package (npm by default, or pypi), attach a custom command, or connect a Streamable HTTP server; its tools are discovered, enabled and protected by human approval.",
        parameters: json!({
            "type": "object",
            "properties": {
                "package": { "type": "string", "description": "npm or PyPI package, or the command for type custom" },
                "type": { "type": "string", "enum": ["npm", "pypi", "custom", "http"] },
                "url": { "type": "string" },
                "name": { "type": "string" },
                "args": { "type": "array", "items": { "type": "string" } },
                "host": { "type": "boolean" },
                "env_keys": { "type": "array", "items": { "type": "string" } },
                "env": { "type": "object", "description": "credential values, stored sealed as mcp:<name>:<KEY>" },
                "headers": { "type": "object" },
                "header_env": { "type": "array", "items": { "type": "object" } },
                "bearer_token_env_var": { "type": "string" }
            },
            "additionalProperties": true
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        self.0.install(cx, &args)
    }
}

impl Tool for McpRestart {
    adf_runtime::declare_tool! {
        name: "mcp_restart",
        description: "Reconnect an MCP server of this agent and refresh its discovered tools; existing tool choices are kept.",
        parameters: server_name_schema(),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        self.0.restart(cx, &args)
    }
}

impl Tool for McpUninstall {
    adf_runtime::declare_tool! {
        name: "mcp_uninstall",
        description: "Remove an MCP server from this agent with every mcp_<name>_* tool declaration.",
        parameters: server_name_schema(),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        self.0.uninstall(cx, &args)
    }
}
