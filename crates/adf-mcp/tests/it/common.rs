//! Fresh homes, agent files and calls through the tool pipeline.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adf_mcp::install::{InstallRequest, Kind};
use adf_mcp::manage::Manager;
use adf_mcp::{McpSource, Supervisor};
use adf_runtime::home::RuntimeHome;
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{Approver, CallOutcome, ToolCaller, ToolError, ToolRegistry};
use adf_store::{AdfFile, CreateOptions};
use serde_json::{Value, json};

/// A temporary runtime home and directory for agent files.
pub(crate) struct World {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) home: RuntimeHome,
    pub(crate) supervisor: Supervisor,
}

impl World {
    pub(crate) fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let home = RuntimeHome::at(dir.path().join("home"));
        World {
            dir,
            home,
            supervisor: Supervisor::default(),
        }
    }

    pub(crate) fn manager(&self) -> Manager {
        Manager {
            home: self.home.clone(),
            supervisor: self.supervisor.clone(),
        }
    }

    pub(crate) fn registry(&self) -> ToolRegistry {
        let mut registry = ToolRegistry::with_builtins();
        registry.add_source(Arc::new(McpSource::new(
            self.supervisor.clone(),
            Some(self.home.clone()),
        )));
        registry
    }

    pub(crate) fn agent(&self, name: &str) -> AdfFile {
        AdfFile::create(
            self.dir.path().join(format!("{name}.adf")),
            &CreateOptions::default(),
        )
        .unwrap()
    }

    /// A fresh world and its agent `name` with the misbehaving server attached as `bad`.
    pub(crate) async fn with_misbehaving(name: &str) -> (World, AdfFile) {
        let world = World::new();
        let mut file = world.agent(name);
        attach_misbehaving(&world, &mut file, "bad").await;
        (world, file)
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.adf"))
    }
}

pub(crate) fn misbehaving_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/servers/misbehaving.py")
}

/// Attaches the misbehaving server as `name` (type custom: `python3 misbehaving.py`).
pub(crate) async fn attach_misbehaving(world: &World, file: &mut AdfFile, name: &str) {
    let request = InstallRequest {
        kind: Kind::Custom,
        package: Some("python3".into()),
        name: Some(name.into()),
        args: vec![misbehaving_script().display().to_string()],
        ..InstallRequest::default()
    };
    world.manager().add(file, &request).await.unwrap();
}

pub(crate) fn model() -> ToolCaller {
    ToolCaller::Model {
        loop_name: "main".into(),
    }
}

/// One call through the whole pipeline, a detached call carried out as `adf tool` does.
pub(crate) async fn call(
    registry: &ToolRegistry,
    file: &mut AdfFile,
    caller: &ToolCaller,
    name: &str,
    args: Value,
    approver: &dyn Approver,
) -> Result<Value, ToolError> {
    match registry.call(file, caller, name, args, approver)? {
        CallOutcome::Deferred(deferred) => registry.run_detached(file, caller, &deferred).await,
        other => Ok(other.into_value()),
    }
}

/// [`call`] as the owner, with every approval denied.
pub(crate) async fn owner_call(
    registry: &ToolRegistry,
    file: &mut AdfFile,
    name: &str,
    args: Value,
) -> Result<Value, ToolError> {
    call(registry, file, &ToolCaller::Owner, name, args, &DenyAll).await
}

/// Gives the agent an identity under the world's owner and seals `value` in `adf_identity` as
/// the credential `purpose` (`mcp:<server>:<KEY>`, IDN-38).
pub(crate) fn seal_credential(world: &World, file: &mut AdfFile, purpose: &str, value: &[u8]) {
    world.home.init_owner(false).unwrap();
    let keys = adf_runtime::identity::LocalKeys::from_home(&world.home).unwrap();
    let open = adf_runtime::identity::provision_new(file, &keys).unwrap();
    adf_runtime::identity::set_credential(file, &open, purpose, value, false).unwrap();
}

/// The tool `name` as the owner's `sys_get_config` `tools` section lists it (null when absent).
pub(crate) async fn listed_tool(registry: &ToolRegistry, file: &mut AdfFile, name: &str) -> Value {
    let tools = owner_call(
        registry,
        file,
        "sys_get_config",
        json!({"section": "tools"}),
    )
    .await
    .unwrap();
    tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

/// The declaration `name` of the file's config.
pub(crate) fn declaration(file: &AdfFile, name: &str) -> Value {
    file.config().unwrap()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

/// Lifts `restricted` off a declaration (the owner's choice).
pub(crate) fn unrestrict(file: &mut AdfFile, name: &str) {
    let mut config = file.config().unwrap();
    for d in config["tools"].as_array_mut().unwrap() {
        if d["name"] == name {
            d["restricted"] = Value::Bool(false);
        }
    }
    file.config_replace(adf_store::Caller::Owner, config)
        .unwrap();
}

/// A two-thread runtime for a test that also calls the synchronous tool pipeline.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
