//! A runtime home, agent files and calls through the whole tool pipeline.

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;

use adf_runtime::home::RuntimeHome;
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{Approver, CallOutcome, ToolCaller, ToolError, ToolRegistry};
use adf_store::{AdfFile, CreateOptions};
use serde_json::{Value, json};

/// When the tests run as root every sandbox runs as the same unprivileged user, whose
/// process-count limit the sandboxes share: one sandboxed test at a time, so the fork bomb
/// test cannot starve another test's `fork`.
static SANDBOXES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub(crate) async fn one_sandbox_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    SANDBOXES.lock().await
}

/// A temporary runtime home (mode 0700, like a real one) and directory for agent files.
pub(crate) struct World {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) home: RuntimeHome,
}

impl World {
    pub(crate) fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let home_dir = dir.path().join("home");
        std::fs::create_dir(&home_dir).unwrap();
        std::fs::set_permissions(&home_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        World {
            home: RuntimeHome::at(home_dir),
            dir,
        }
    }

    pub(crate) fn registry(&self) -> ToolRegistry {
        let mut registry = ToolRegistry::with_builtins();
        for tool in adf_compute::tools(Some(self.home.clone())) {
            registry.register(tool);
        }
        registry
    }

    /// A new agent whose `compute` section is `compute`, with compute_exec and fs_transfer
    /// enabled (compute_exec stays restricted, its default).
    pub(crate) fn agent(&self, name: &str, compute: Value) -> AdfFile {
        let mut file = AdfFile::create(
            self.dir.path().join(format!("{name}.adf")),
            &CreateOptions::default(),
        )
        .unwrap();
        let mut config = file.config().unwrap();
        config["compute"] = compute;
        for d in config["tools"].as_array_mut().unwrap() {
            if d["name"] == "compute_exec" || d["name"] == "fs_transfer" {
                d["enabled"] = Value::Bool(true);
                d["visible"] = Value::Bool(true);
            }
        }
        file.config_replace(adf_store::Caller::Owner, config)
            .unwrap();
        file
    }

    /// Writes the runtime settings file.
    pub(crate) fn settings(&self, settings: Value) {
        std::fs::write(
            self.home.dir().join("settings.json"),
            serde_json::to_vec(&settings).unwrap(),
        )
        .unwrap();
    }

    /// The host directory of an agent's isolated workspace.
    pub(crate) fn isolated_workspace(&self, file: &AdfFile) -> PathBuf {
        self.home
            .dir()
            .join("compute/isolated")
            .join(agent_id(file))
    }
}

pub(crate) fn agent_id(file: &AdfFile) -> String {
    file.config().unwrap()["id"].as_str().unwrap().to_owned()
}

pub(crate) fn enabled() -> Value {
    json!({ "enabled": true })
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

/// [`call`] as the owner (no approval needed).
pub(crate) async fn owner(
    registry: &ToolRegistry,
    file: &mut AdfFile,
    name: &str,
    args: Value,
) -> Result<Value, ToolError> {
    call(registry, file, &ToolCaller::Owner, name, args, &DenyAll).await
}

/// `compute_exec` as the owner, expected to run.
pub(crate) async fn exec(registry: &ToolRegistry, file: &mut AdfFile, args: Value) -> Value {
    owner(registry, file, "compute_exec", args).await.unwrap()
}

/// Whether a live process's command line contains `marker`.
pub(crate) fn process_alive_with(marker: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let is_pid = entry
            .file_name()
            .to_string_lossy()
            .chars()
            .all(|c| c.is_ascii_digit());
        is_pid
            && std::fs::read(entry.path().join("cmdline"))
                .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
                .is_ok_and(|cmdline| cmdline.contains(marker))
    })
}

/// Waits (bounded) until no process's command line contains `marker`; false if one remains.
pub(crate) fn no_process_with(marker: &str) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if !process_alive_with(marker) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
