//! The owner's operations on an agent's servers (`adf mcp add|list|restart|remove`): attach
//! (install, discover, declare), rediscover, detach. Each validates before it writes and
//! writes the config once, as the owner; a failure leaves the file as it was.

use adf_runtime::home::RuntimeHome;
use adf_store::AdfFile;
use serde_json::{Value, json};

use crate::McpError;
use crate::connect::Launch;
use crate::declare::{DiscoveryReport, apply_discovery, remove_server, upsert_server};
use crate::install::{InstallRequest, Kind, PackageCache, declaration};
use crate::source::{egress_policy, read_credentials};
use crate::spec::{ServerSpec, find_server};
use crate::supervisor::Supervisor;

/// What the owner's operations need from the runtime.
#[derive(Debug, Clone)]
pub struct Manager {
    /// The runtime home (package cache, unlocking sealed credentials).
    pub home: RuntimeHome,
    /// Runs the servers discovery talks to.
    pub supervisor: Supervisor,
}

impl Manager {
    /// The package cache under the home.
    pub fn packages(&self) -> PackageCache {
        PackageCache::new(self.home.dir())
    }

    fn launch(
        &self,
        file: &mut AdfFile,
        config: &Value,
        spec: &ServerSpec,
    ) -> Result<Launch, McpError> {
        let credentials = read_credentials(file, Some(&self.home), spec)
            .map_err(|e| McpError::Config(e.message))?;
        Ok(Launch {
            file: file.path().to_path_buf(),
            credentials,
            egress: egress_policy(config),
            packages: Some(self.packages()),
        })
    }

    /// Attaches a server: validates the request (TOL-36..38), installs its package into the
    /// cache, starts it, lists its tools and stores the server with its declarations.
    pub async fn add(
        &self,
        file: &mut AdfFile,
        request: &InstallRequest,
    ) -> Result<(String, DiscoveryReport), McpError> {
        let mut config = file.config()?;
        let server = declaration(request, &config)?;
        let spec = ServerSpec::parse(&server)?;
        let package = request.package.as_deref().unwrap_or_default();
        match request.kind {
            Kind::Npm => self.packages().install_npm(package).await?,
            Kind::Pypi => self.packages().install_pypi(package).await?,
            Kind::Custom | Kind::Http => {}
        }
        let launch = self.launch(file, &config, &spec)?;
        // A re-added server starts from its new declaration.
        self.supervisor.stop_server(&launch.file, &spec.name).await;
        let tools = self.supervisor.discover(&spec, &launch).await?;
        upsert_server(&mut config, server);
        let report = apply_discovery(&mut config, &spec, &tools);
        file.config_replace(adf_store::Caller::Owner, config)?;
        Ok((spec.name, report))
    }

    /// Restarts server `name` and refreshes its declarations, keeping the owner's choices
    /// (TOL-40); a changed definition is disabled and restricted until reviewed (TOL-11).
    pub async fn restart(
        &self,
        file: &mut AdfFile,
        name: &str,
    ) -> Result<DiscoveryReport, McpError> {
        let mut config = file.config()?;
        let spec = find_server(&config, name)?;
        let launch = self.launch(file, &config, &spec)?;
        self.supervisor.stop_server(&launch.file, name).await;
        let tools = self.supervisor.discover(&spec, &launch).await?;
        let report = apply_discovery(&mut config, &spec, &tools);
        file.config_replace(adf_store::Caller::Owner, config)?;
        Ok(report)
    }

    /// Removes server `name` and every `mcp_<name>_*` declaration (TOL-41), stopping it.
    pub async fn remove(&self, file: &mut AdfFile, name: &str) -> Result<(), McpError> {
        let mut config = file.config()?;
        if !remove_server(&mut config, name) {
            return Err(McpError::NotFound(format!(
                "no MCP server named '{name}' in mcp.servers"
            )));
        }
        self.supervisor.stop_server(file.path(), name).await;
        file.config_replace(adf_store::Caller::Owner, config)?;
        Ok(())
    }
}

/// The servers of `config` with their declared tools, as `adf mcp list` shows them.
pub fn list(config: &Value) -> Vec<Value> {
    crate::spec::servers(config)
        .into_iter()
        .map(|server| {
            let name = server.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let prefix = format!("mcp_{name}_");
            let tools: Vec<Value> = config
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|d| {
                    d.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| n.starts_with(&prefix))
                })
                .map(|d| {
                    json!({
                        "name": d.get("name"),
                        "enabled": d.get("enabled").and_then(Value::as_bool).unwrap_or(false),
                        "restricted": d.get("restricted").and_then(Value::as_bool).unwrap_or(false),
                        "status": d.get("mcp_tool_status"),
                    })
                })
                .collect();
            json!({
                "name": name,
                "transport": server.get("transport").cloned().unwrap_or_else(|| json!(if server.get("url").is_some() { "http" } else { "stdio" })),
                "source": server.get("source"),
                "url": server.get("url"),
                "restricted": server.get("restricted").and_then(Value::as_bool).unwrap_or(false),
                "tools": tools,
            })
        })
        .collect()
}
