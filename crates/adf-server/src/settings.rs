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
    "npmRegistry",
    "providers",
    "reviewedAgents",
    "sandboxMaxWorkers",
    "sandboxPackages",
    "tailnetDiscovery",
    "theme",
    "toolPrompts",
    "trackedDirectories",
];

/// The mesh port the reference reports when the settings do not set one (its mesh server's
/// default port; here the mesh shares the daemon's listener, so it is only reported).
pub const DEFAULT_MESH_PORT: u16 = 7295;

/// What a read of `key` answers when the settings file does not set it: the reference's
/// defaults for the keys it defaults, else nothing (`null`).
pub fn default_value(key: &str) -> Option<Value> {
    match key {
        "meshPort" => Some(Value::from(DEFAULT_MESH_PORT)),
        _ => None,
    }
}

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
        // Where `npm_install` resolves packages (adf-packages reads it at each install).
        "npmRegistry" => value
            .as_str()
            .is_some_and(|url| url.starts_with("http://") || url.starts_with("https://")),
        // `compute.hostAccess` is the runtime-level host-access switch adf-mcp reads (CFG-37).
        "compute" => value.is_object() && value.get("hostAccess").is_none_or(Value::is_boolean),
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

/// The provider resolver with the runtime settings' `providers` entries (`PUT
/// /settings/providers`) and their `apiKey`s: an agent whose `model.provider` names one of them
/// uses it when its own file has no entry of that id. An unreadable settings file or a bad entry
/// is logged and left out, so chat then reports the provider as not found rather than failing
/// on an unrelated setting.
pub fn runtime_resolver(home: &RuntimeHome) -> adf_providers::Resolver {
    let mut resolver = adf_providers::Resolver::new();
    let values = match Settings::in_home(home).read() {
        Ok(values) => values,
        Err(error) => {
            tracing::warn!(%error, "runtime providers unavailable");
            return resolver;
        }
    };
    let entries = values
        .get("providers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for entry in &entries {
        match adf_providers::ProviderConfig::from_json(entry) {
            Ok(provider) if !provider.id.is_empty() => {
                if let Some(key) = entry
                    .get("apiKey")
                    .and_then(Value::as_str)
                    .filter(|k| !k.is_empty())
                {
                    resolver = resolver
                        .with_runtime_key(provider.id.clone(), adf_providers::ApiKey::new(key));
                }
                resolver = resolver.with_runtime_provider(provider);
            }
            Ok(_) => tracing::warn!("a runtime provider without an id is ignored"),
            Err(error) => tracing::warn!(%error, "a runtime provider is ignored"),
        }
    }
    resolver
}

/// Settings keys whose entries may carry secrets (`apiKey`, `env` values, `token`).
const KEYED_LISTS: &[&str] = &["providers", "mcpServers", "adapters"];

/// Fields of a [`KEYED_LISTS`] entry that hold secrets; reads show them as `hasApiKey` /
/// `envKeys` / `hasToken`.
const SECRET_FIELDS: &[&str] = &["apiKey", "env", "token"];

/// Fields reads add in place of the secrets; never stored.
const REDACTION_FIELDS: &[&str] = &["hasApiKey", "envKeys", "hasToken"];

/// A settings value as clients see it: in the entries of `providers`, `mcpServers` and
/// `adapters`, `apiKey`, `token` and the values of `env` are left out (see [`redact_entry`]),
/// so no read of the settings returns a secret.
pub fn redact(key: &str, value: &Value) -> Value {
    if !KEYED_LISTS.contains(&key) {
        return value.clone();
    }
    match value.as_array() {
        Some(items) => Value::Array(items.iter().map(redact_entry).collect()),
        None => value.clone(),
    }
}

/// One settings entry with any `apiKey`, `env` values or `token` left out (their names kept
/// in `hasApiKey` / `envKeys`), for listings.
pub fn redact_entry(entry: &Value) -> Value {
    let mut entry = entry.clone();
    if let Some(object) = entry.as_object_mut() {
        if let Some(key) = object.remove("apiKey") {
            object.insert(
                "hasApiKey".into(),
                Value::Bool(key.as_str().is_some_and(|k| !k.is_empty())),
            );
        }
        if let Some(token) = object.remove("token") {
            object.insert("hasToken".into(), Value::Bool(!token.is_null()));
        }
        if let Some(env) = object.remove("env") {
            let names: Vec<Value> = match env {
                Value::Object(map) => map.keys().cloned().map(Value::String).collect(),
                Value::Array(items) => items
                    .iter()
                    .filter_map(|i| i.get("key").or(i.get("name")).cloned())
                    .collect(),
                _ => Vec::new(),
            };
            object.insert("envKeys".into(), Value::Array(names));
        }
    }
    entry
}

/// All settings, redacted (see [`redact`]).
pub fn redact_all(values: &Map<String, Value>) -> Map<String, Value> {
    values
        .iter()
        .map(|(key, value)| (key.clone(), redact(key, value)))
        .collect()
}

/// A new value for `key` with the stored secrets kept: an entry that names no `apiKey`, `env`
/// or `token` (as a redacted read hands it back) keeps the one stored for the entry of the same
/// `id` (or `name`); the redaction fields are never stored.
pub fn keep_stored_keys(key: &str, new: Value, stored: Option<&Value>) -> Value {
    if !KEYED_LISTS.contains(&key) {
        return new;
    }
    let Value::Array(items) = new else {
        return new;
    };
    let identity = |entry: &Value| {
        entry
            .get("id")
            .or(entry.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let stored_entry = |id: &str| {
        stored
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|old| identity(old).as_deref() == Some(id))
            .cloned()
    };
    Value::Array(
        items
            .into_iter()
            .map(|mut item| {
                let old = identity(&item).and_then(|id| stored_entry(&id));
                if let Some(object) = item.as_object_mut() {
                    for field in REDACTION_FIELDS {
                        object.remove(*field);
                    }
                    for field in SECRET_FIELDS {
                        if !object.contains_key(*field)
                            && let Some(value) = old.as_ref().and_then(|o| o.get(*field))
                        {
                            object.insert((*field).to_owned(), value.clone());
                        }
                    }
                }
                item
            })
            .collect(),
    )
}
