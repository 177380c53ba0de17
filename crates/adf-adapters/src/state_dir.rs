//! The adapter state directory beside the agent's file, `<agent>.adf.adapters/<type>/`
//! (§11.6, §16: not part of the file, not carried by a copy). Small JSON documents, each
//! replaced atomically (write a temporary file, then rename), so a crash leaves the old or
//! the new document, never half of one.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::AdapterError;

/// `<agent>.adf.adapters` for the agent file `agent_file`.
pub fn state_root_for(agent_file: &Path) -> PathBuf {
    let mut name = agent_file.as_os_str().to_owned();
    name.push(".adapters");
    PathBuf::from(name)
}

/// One adapter's state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    adapter: String,
    dir: PathBuf,
}

impl StateDir {
    /// The directory of adapter `adapter` of the agent file `agent_file` (created on first
    /// write).
    pub fn new(agent_file: &Path, adapter: &str) -> Self {
        StateDir {
            adapter: adapter.to_owned(),
            dir: state_root_for(agent_file).join(adapter),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn error(&self, path: &Path, e: impl std::fmt::Display) -> AdapterError {
        AdapterError::State {
            adapter: self.adapter.clone(),
            path: path.display().to_string(),
            reason: e.to_string(),
        }
    }

    /// The JSON document `name`, `None` when it does not exist yet.
    pub fn read_json(&self, name: &str) -> Result<Option<Value>, AdapterError> {
        let path = self.dir.join(name);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| self.error(&path, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.error(&path, e)),
        }
    }

    /// Replaces the JSON document `name` atomically.
    pub fn write_json(&self, name: &str, value: &Value) -> Result<(), AdapterError> {
        let path = self.dir.join(name);
        std::fs::create_dir_all(&self.dir).map_err(|e| self.error(&self.dir, e))?;
        let temporary = self.dir.join(format!(".{name}.tmp"));
        std::fs::write(&temporary, value.to_string()).map_err(|e| self.error(&temporary, e))?;
        std::fs::rename(&temporary, &path).map_err(|e| self.error(&path, e))
    }
}
