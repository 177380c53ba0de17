//! [`AgentWatch`]: what the daemon last re-read of one agent's other writers, the per-agent
//! state of the watcher, and [`Watcher`], its once-flag per daemon. A leaf, so the agent
//! record (`registry.rs`) embeds it and the hub holds the flag without importing the
//! watcher's logic, which lives in `watch.rs` (see its module docs).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::{Value, json};

/// The daemon's side of one agent's other writers.
#[derive(Debug, Default)]
pub(crate) struct AgentWatch {
    /// The handle's change count the daemon last re-read after.
    pub(super) seen: AtomicU64,
    /// A hash of the files' stamp at the last look while the file was open.
    pub(super) disk: AtomicU64,
    /// A re-read is queued or running.
    pub(super) in_flight: AtomicBool,
    /// A hash of the config text as last read, so a re-read drops the caches built from it only
    /// when it changed (the serving lane's commits move `data_version` all the time).
    pub(super) config: AtomicU64,
    /// A hash of the declared network sections (`ws_connections`, `stream_bindings`,
    /// `stream_bind`) the daemon last opened its connections and bindings from, so a re-read
    /// that finds them changed by another writer reconciles them, and one that does not leaves
    /// them open.
    pub(super) network: AtomicU64,
}

impl AgentWatch {
    /// The watch of an agent whose config, read at load, is `config`.
    pub(crate) fn seeded(config: &Value) -> Self {
        let watch = Self::default();
        watch.config.store(config_hash(config), Ordering::SeqCst);
        watch
    }
}

impl AgentWatch {
    /// The daemon (re)opened the agent's declared network from `config`.
    pub(crate) fn network_opened(&self, config: &Value) {
        self.network.store(network_hash(config), Ordering::SeqCst);
    }
}

pub(super) fn network_hash(config: &Value) -> u64 {
    let sections: Vec<Option<&Value>> = ["ws_connections", "stream_bindings", "stream_bind"]
        .iter()
        .map(|key| config.get(*key))
        .collect();
    config_hash(&json!(sections))
}

pub(super) fn config_hash(config: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    config.to_string().hash(&mut hasher);
    hasher.finish()
}

/// The watcher task's once-flag, per daemon.
#[derive(Debug, Default)]
pub(crate) struct Watcher {
    pub(super) started: AtomicBool,
}
