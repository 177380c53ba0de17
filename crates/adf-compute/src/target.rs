//! Which compute environment a call runs in (§5.12, tools guide "Compute Tools"): the
//! agent's `compute` config, the runtime settings and what is installed on this machine,
//! decided in one function, [`Targets::resolve`], that fails closed: a target that is not
//! allowed, not enabled or not installed is an error naming what to enable or install,
//! never a fallback to another target.

use std::path::{Path, PathBuf};

use adf_runtime::home::RuntimeHome;
use serde_json::Value;

use crate::error::ComputeError;
use crate::status::{self, Availability};

/// The runtime setting that must also be on for the `host` target (CFG-37): the key
/// `hostAccess` of the `compute` object in the runtime home's `settings.json` (the same switch
/// adf-mcp reads for host MCP servers).
pub const HOST_ACCESS_SETTING: &str = "compute.hostAccess";

/// The runtime setting that registers external containers: `compute.containers` in
/// `settings.json`, a list of `{id, container, engine?: "podman"}`; an agent reaches one by
/// listing its `id` in `compute.allowed_targets`.
pub const CONTAINERS_SETTING: &str = "compute.containers";

/// Longest list `compute.allowed_targets` may hold ([C28]).
const MAX_ALLOWED_TARGETS: usize = 20;

/// One compute environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The agent's own bubblewrap sandbox over `/workspace/{agentId}`.
    Isolated,
    /// One bubblewrap environment for every agent that allows it: `/workspace` is shared.
    Shared,
    /// A registered external container, run with `podman exec`.
    Container {
        /// The alias the agent names it by.
        id: String,
        /// The container's name for the engine.
        container: String,
    },
    /// The host itself, with process limits only.
    Host,
}

impl Target {
    /// The name an agent gives the target.
    pub fn name(&self) -> &str {
        match self {
            Target::Isolated => "isolated",
            Target::Shared => "shared",
            Target::Container { id, .. } => id,
            Target::Host => "host",
        }
    }
}

/// The targets of one agent on this runtime: its config, the runtime home and its settings.
#[derive(Debug, Clone)]
pub struct Targets<'a> {
    config: &'a Value,
    home: &'a RuntimeHome,
    settings: Value,
}

impl<'a> Targets<'a> {
    /// The targets of the agent whose config is `config`, on the runtime of `home`.
    pub fn new(config: &'a Value, home: &'a RuntimeHome) -> Self {
        Targets {
            config,
            home,
            settings: read_settings(home.dir()),
        }
    }

    /// The agent's id, checked to be one path segment (it names its workspace directory).
    pub fn agent_id(&self) -> Result<&'a str, ComputeError> {
        let id = self
            .config
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let safe = !id.is_empty()
            && id.len() <= 128
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if safe {
            Ok(id)
        } else {
            Err(ComputeError::BadAgentId(id.to_owned()))
        }
    }

    fn compute(&self, key: &str) -> Option<&'a Value> {
        self.config.get("compute").and_then(|c| c.get(key))
    }

    fn enabled(&self) -> bool {
        self.compute("enabled").and_then(Value::as_bool) == Some(true)
    }

    fn host_gates(&self) -> (bool, bool) {
        let agent = self.compute("host_access").and_then(Value::as_bool) == Some(true);
        let runtime = self
            .settings
            .pointer("/compute/hostAccess")
            .and_then(Value::as_bool)
            == Some(true);
        (agent, runtime)
    }

    /// `compute.allowed_targets`, or when absent the least-privileged list: `isolated` when
    /// compute is enabled, `host` when `compute.host_access` is on.
    pub fn allowed(&self) -> Vec<String> {
        if let Some(list) = self.compute("allowed_targets").and_then(Value::as_array) {
            return list
                .iter()
                .filter_map(Value::as_str)
                .take(MAX_ALLOWED_TARGETS)
                .map(str::to_owned)
                .collect();
        }
        if let Some(legacy) = self.compute("target").and_then(Value::as_str) {
            return vec![legacy.to_owned()];
        }
        let mut allowed = Vec::new();
        if self.enabled() {
            allowed.push("isolated".to_owned());
        }
        if self.host_gates().0 {
            allowed.push("host".to_owned());
        }
        allowed
    }

    /// The target a call runs in: `requested`, else `compute.default_target`, else the first
    /// allowed target. Every gate of that target must be open and its tool installed.
    pub fn resolve(&self, requested: Option<&str>) -> Result<Target, ComputeError> {
        let allowed = self.allowed();
        let name = match requested
            .or_else(|| self.compute("default_target").and_then(Value::as_str))
            .or(allowed.first().map(String::as_str))
        {
            Some(name) => name.to_owned(),
            None => return Err(ComputeError::NoTarget),
        };
        if !allowed.contains(&name) {
            return Err(ComputeError::NotAllowed {
                target: name,
                allowed,
            });
        }
        match name.as_str() {
            "isolated" | "shared" => {
                if !self.enabled() {
                    return Err(ComputeError::ComputeDisabled { target: name });
                }
                if let Availability::Missing(what) = status::bubblewrap() {
                    return Err(ComputeError::NotInstalled { target: name, what });
                }
                Ok(if name == "isolated" {
                    Target::Isolated
                } else {
                    Target::Shared
                })
            }
            "host" => match self.host_gates() {
                (true, true) => Ok(Target::Host),
                (false, _) => Err(ComputeError::HostClosed(
                    "the agent's compute.host_access is off".into(),
                )),
                (true, false) => Err(ComputeError::HostClosed(format!(
                    "the runtime setting {HOST_ACCESS_SETTING} is off"
                ))),
            },
            _ => self.container(&name),
        }
    }

    fn container(&self, id: &str) -> Result<Target, ComputeError> {
        let registered = self
            .settings
            .pointer("/compute/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c.get("id").and_then(Value::as_str) == Some(id));
        let Some(entry) = registered else {
            return Err(ComputeError::UnknownTarget(id.to_owned()));
        };
        let engine = entry
            .get("engine")
            .and_then(Value::as_str)
            .unwrap_or("podman");
        if engine != "podman" {
            return Err(ComputeError::NotSupported(format!(
                "container engine '{engine}' of target '{id}' (only podman is supported)"
            )));
        }
        let container = entry
            .get("container")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty() && !c.starts_with('-'))
            .ok_or_else(|| ComputeError::UnknownTarget(id.to_owned()))?;
        if let Availability::Missing(what) = status::podman() {
            return Err(ComputeError::NotInstalled {
                target: id.to_owned(),
                what,
            });
        }
        Ok(Target::Container {
            id: id.to_owned(),
            container: container.to_owned(),
        })
    }

    /// The host directory behind a target's `/workspace/{agentId}` (the host target's working
    /// directory); `None` for external containers, which are not transfer endpoints.
    pub fn workspace(&self, target: &Target) -> Result<Option<PathBuf>, ComputeError> {
        let id = self.agent_id()?;
        let root = compute_root(self.home);
        Ok(match target {
            Target::Isolated => Some(root.join("isolated").join(id)),
            Target::Shared => Some(root.join("shared").join(id)),
            Target::Host => Some(root.join("host").join(id)),
            Target::Container { .. } => None,
        })
    }

    /// The host directory mounted at `/workspace` in the shared environment.
    pub fn shared_root(&self) -> PathBuf {
        compute_root(self.home).join("shared")
    }

    /// `compute.packages.pip`: the pip requirements the agent's environment installs.
    pub fn pip_packages(&self) -> Vec<String> {
        self.compute("packages")
            .and_then(|p| p.get("pip"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    }

    /// The runtime setting `compute.pipFindLinks`: a directory of wheels and sdists pip
    /// installs from (the sandboxes have no network, so there is no index).
    pub fn pip_find_links(&self) -> Option<PathBuf> {
        self.settings
            .pointer("/compute/pipFindLinks")
            .and_then(Value::as_str)
            .filter(|p| Path::new(p).is_absolute())
            .map(PathBuf::from)
    }

    /// The runtime setting `compute.pipIndexUrl`, which this runtime refuses (see
    /// `pip.rs`).
    pub fn pip_index_url(&self) -> Option<&str> {
        self.settings
            .pointer("/compute/pipIndexUrl")
            .and_then(Value::as_str)
    }
}

/// Where the runtime keeps every compute workspace: `$ADF_HOME/compute`.
pub fn compute_root(home: &RuntimeHome) -> PathBuf {
    home.dir().join("compute")
}

/// The runtime settings (`settings.json` in the home); an absent or unreadable file is empty,
/// so every gate it holds stays shut.
fn read_settings(home: &Path) -> Value {
    std::fs::read(home.join("settings.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or(Value::Null)
}
