//! Forking an agent: a new `.adf` file holding the parent's current state (config, files,
//! loop, inbox/outbox, tables, timers, tasks, logs) as a different agent — its own id,
//! name and handle, `adf_parent_did` pointing at the parent, and no identity at all.
//!
//! The identity is left out on purpose: the agent key is what makes an agent itself, so a
//! copy that kept it would speak as its parent. The sealed credentials go with it (they are
//! under the parent's credentials envelope). The caller provisions a fresh identity on the
//! returned file, as `adf new` does (`adf_runtime::identity::provision_new`).
//!
//! The copy is taken with SQLite's online backup (a turn in flight never yields a torn file),
//! rewritten beside the target under a temporary name and moved into place only when whole,
//! so a failed fork leaves no file behind. The parent is only read.
//!
//! Principal type: [`ForkOptions`].

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::defaults;
use crate::error::{Result, StoreError};
use crate::file::{AdfFile, sidecar};
use crate::meta::set_runtime_key;
use crate::time;

/// Who the fork is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForkOptions {
    /// Display name of the copy.
    pub name: String,
    /// Handle; defaults to the slug of the name.
    pub handle: Option<String>,
    /// Fixed agent id (tests); defaults to a fresh nanoid.
    pub id: Option<String>,
}

impl AdfFile {
    /// Copies this file's current state to `target` as a new agent (module docs) and opens
    /// the copy. `target` must not exist; on any error nothing is left at `target`.
    pub fn fork_to(&self, target: &Path, options: &ForkOptions) -> Result<AdfFile> {
        if target.exists() {
            return Err(StoreError::FileExists {
                path: target.to_path_buf(),
            });
        }
        if options.name.trim().is_empty() {
            return Err(StoreError::invalid("the fork needs a name"));
        }
        let scratch = scratch_path(target);
        let result = self.write_fork(&scratch, target, options);
        if result.is_err() {
            for leftover in [
                scratch.clone(),
                sidecar(&scratch, "-wal"),
                sidecar(&scratch, "-shm"),
            ] {
                let _ignored = fs::remove_file(leftover);
            }
        }
        result
    }

    fn write_fork(&self, scratch: &Path, target: &Path, options: &ForkOptions) -> Result<AdfFile> {
        self.conn
            .backup(rusqlite::MAIN_DB, scratch, rusqlite::backup::NO_PROGRESS)?;
        let parent_did = self
            .meta_get("adf_did")?
            .map(|entry| entry.value)
            .unwrap_or_default();
        let handle = options
            .handle
            .clone()
            .filter(|h| !h.trim().is_empty())
            .unwrap_or_else(|| defaults::handle_from_name(&options.name));
        let id = options.id.clone().unwrap_or_else(defaults::new_agent_id);

        let mut copy = AdfFile::open(scratch)?;
        copy.atomically(|copy| -> Result<()> {
            let now = time::now_iso();
            let mut config = copy.config()?;
            if let Some(object) = config.as_object_mut() {
                object.insert("id".into(), Value::String(id.clone()));
                object.insert("name".into(), Value::String(options.name.clone()));
                object.insert("handle".into(), Value::String(handle.clone()));
                if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    metadata.insert("created_at".into(), Value::String(now.clone()));
                }
            }
            // Not `config_replace`: its "id never changes" guards an agent's own id, and this
            // file is a different agent from here on.
            copy.persist_config(&mut config)?;
            // The parent's keys, sealed credentials and the attestations about its DID.
            copy.conn.execute("DELETE FROM adf_identity", [])?;
            copy.conn.execute("DELETE FROM adf_attestations", [])?;
            for (key, value) in [
                ("adf_name", options.name.as_str()),
                ("adf_handle", handle.as_str()),
                ("adf_parent_did", parent_did.as_str()),
                ("adf_did", ""),
                ("adf_did_history", ""),
                ("adf_owner_did", ""),
                ("adf_runtime_did", ""),
                ("adf_created_at", now.as_str()),
                ("adf_updated_at", now.as_str()),
            ] {
                set_runtime_key(&copy.conn, key, value)?;
            }
            Ok(())
        })?;
        copy.close()?;
        // A hard link refuses an existing target even if one appeared since the check above;
        // the scratch name then goes, leaving exactly one file.
        fs::hard_link(scratch, target).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => StoreError::FileExists {
                path: target.to_path_buf(),
            },
            _ => StoreError::Io(e),
        })?;
        fs::remove_file(scratch)?;
        for leftover in [sidecar(scratch, "-wal"), sidecar(scratch, "-shm")] {
            let _ignored = fs::remove_file(leftover);
        }
        AdfFile::open(target)
    }
}

/// A name beside `target` for the copy while it is rewritten.
fn scratch_path(target: &Path) -> PathBuf {
    let nonce: u64 = rand::random();
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "agent.adf".to_owned());
    target.with_file_name(format!(".{name}.fork-{nonce:016x}"))
}
