//! The daemon's settings file, `$ADF_HOME/settings.json`: a JSON object of free-form keys
//! (providers, ports, tracked directories...). It may hold provider keys, so it is written
//! with mode 0600 in the 0700 home, through a temporary file and a rename.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use adf_runtime::home::RuntimeHome;

use crate::error::ServerError;

/// The settings keys a client may write: the reference's `AppSettings` and defaults, and this
/// daemon's own (`reviewedAgents`, `trackedDirectories`). Anything else is refused, so a typo
/// or a stray field never lands in a file the daemon reads at start.
pub const KNOWN_KEYS: &[&str] = &[
    "adapters",
    "agentsFolder",
    "autoCompactThreshold",
    "compactionPrompt",
    "compute",
    "defaultProviderId",
    "globalSystemPrompt",
    "maxDirectoryScanDepth",
    "mcpServers",
    "meshEnabled",
    "meshLan",
    "meshManualPeers",
    "meshPort",
    "providers",
    "reviewedAgents",
    "sandboxMaxWorkers",
    "sandboxPackages",
    "tailnetDiscovery",
    "theme",
    "toolPrompts",
    "trackedDirectories",
];

/// Why a client's value for `key` is refused (`None`: accepted). Unknown keys are refused, and
/// the keys this daemon reads must have the shape it reads.
pub fn check_value(key: &str, value: &Value) -> Option<String> {
    if !KNOWN_KEYS.contains(&key) {
        return Some(format!(
            "unknown setting \"{key}\" (known: {})",
            KNOWN_KEYS.join(", ")
        ));
    }
    let shape_ok = match key {
        "trackedDirectories" | "meshManualPeers" => value
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string)),
        "reviewedAgents" => value.is_object(),
        "maxDirectoryScanDepth" | "autoCompactThreshold" | "sandboxMaxWorkers" => value.is_u64(),
        "meshPort" => value.as_u64().is_some_and(|p| p <= u64::from(u16::MAX)),
        "meshEnabled" | "meshLan" | "tailnetDiscovery" => value.is_boolean(),
        "providers" | "mcpServers" | "adapters" | "sandboxPackages" => value.is_array(),
        _ => true,
    };
    (!shape_ok).then(|| format!("setting \"{key}\" has the wrong type"))
}

/// The settings file of one runtime home.
#[derive(Debug, Clone)]
pub struct Settings {
    path: PathBuf,
}

impl Settings {
    /// The settings of `home`: `settings.json` in its folder (not read until asked).
    pub fn in_home(home: &RuntimeHome) -> Self {
        Self {
            path: home.dir().join("settings.json"),
        }
    }

    /// Where the settings file lives, whether or not it exists yet.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The settings; an absent file is an empty object.
    pub fn read(&self) -> Result<Map<String, Value>, ServerError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
            Err(e) => return Err(e.into()),
        };
        match serde_json::from_str(&text) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(ServerError::Settings(format!(
                "{} is not a JSON object",
                self.path.display()
            ))),
            Err(e) => Err(ServerError::Settings(format!(
                "{} is not valid JSON: {e}",
                self.path.display()
            ))),
        }
    }

    /// Reads, applies `change`, writes back, and returns the new settings. Callers serialize
    /// updates (the daemon holds a lock) so concurrent patches do not lose each other.
    pub fn update(
        &self,
        change: impl FnOnce(&mut Map<String, Value>),
    ) -> Result<Map<String, Value>, ServerError> {
        let mut values = self.read()?;
        change(&mut values);
        let dir = self
            .path
            .parent()
            .ok_or_else(|| ServerError::Settings("settings path has no folder".into()))?;
        create_private_dir(dir)?;
        let text = serde_json::to_string_pretty(&Value::Object(values.clone()))
            .map_err(|e| ServerError::Settings(e.to_string()))?;
        let temp = dir.join(format!(".settings.json.{}.tmp", std::process::id()));
        {
            let mut file = private_file(&temp)?;
            file.write_all(text.as_bytes())?;
            file.write_all(b"\n")?;
            file.sync_all()?;
        }
        std::fs::rename(&temp, &self.path)?;
        Ok(values)
    }
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::create(path)
}
