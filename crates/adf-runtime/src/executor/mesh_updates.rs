//! `context.dynamic_instructions.mesh_updates` (§5.19): main is told which agents of this
//! runtime it can reach whenever that list changes.
//!
//! The list is the host's mesh ([`Mesh::reachable_agents`], visibility applied, the agent's
//! own entry left out). What was last delivered lives in [`MeshUpdates`], which the host keeps
//! with the agent across the executors it makes (the daemon makes one per turn), so an
//! unchanged list is never repeated. The first list a process sees counts as a change unless
//! it is empty: the model has not been told anything yet. A mesh that keeps a roster version
//! ([`Mesh::roster_version`], the daemon's) is listed again only when it moved, so a turn does
//! not open every hosted agent's file; a change of another agent's visibility or description
//! alone is announced at the next load or unload.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use crate::messaging::Mesh;

/// The mesh an executor lists reachable agents from, and the list it last delivered.
#[derive(Debug, Clone)]
pub struct MeshUpdates {
    mesh: Arc<dyn Mesh>,
    delivered: Arc<Mutex<Delivered>>,
}

/// What main was last told, and the mesh's roster version it was listed at.
#[derive(Debug, Default)]
struct Delivered {
    listing: Option<String>,
    version: Option<u64>,
}

impl Delivered {
    /// A list was delivered at the roster `version` (a mesh without versions is never current).
    fn is_current(&self, version: Option<u64>) -> bool {
        version.is_some() && version == self.version && self.listing.is_some()
    }
}

impl MeshUpdates {
    /// Lists from `mesh`; nothing delivered yet. Clones share what was delivered.
    pub fn new(mesh: Arc<dyn Mesh>) -> Self {
        MeshUpdates {
            mesh,
            delivered: Arc::default(),
        }
    }

    /// The reachable agents of the agent whose file is `sender`, one line each, sorted.
    fn listing(&self, sender: &Path) -> String {
        let mut lines: Vec<String> = self
            .mesh
            .reachable_agents(sender)
            .into_iter()
            .filter(|agent| agent.path != sender)
            .map(|agent| {
                let did = agent.did.map(|d| format!(" ({d})")).unwrap_or_default();
                let description = if agent.description.is_empty() {
                    String::new()
                } else {
                    format!(": {}", agent.description)
                };
                format!("- {}{did}{description}", agent.handle)
            })
            .collect();
        lines.sort();
        lines.join("\n")
    }

    /// Whether the mesh's roster has not moved since the list was last delivered (nothing
    /// to announce, without listing anything).
    pub(crate) fn roster_unchanged(&self) -> bool {
        let delivered = self
            .delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        delivered.is_current(self.mesh.roster_version())
    }

    /// The dynamic-instructions text when the list differs from the one last delivered
    /// (then remembered as delivered); `None` when it is unchanged.
    pub(crate) fn change(&self, sender: &Path) -> Option<String> {
        let mut delivered = self
            .delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Listing opens every hosted agent's config: skipped while the roster stands still.
        let version = self.mesh.roster_version();
        if delivered.is_current(version) {
            return None;
        }
        delivered.version = version;
        let listing = self.listing(sender);
        if delivered.listing.as_deref() == Some(listing.as_str()) {
            return None;
        }
        let first = delivered.listing.is_none();
        delivered.listing = Some(listing.clone());
        match (first, listing.is_empty()) {
            (true, true) => None,
            (false, true) => Some(
                "The agents you can reach on this runtime changed: none are reachable now."
                    .to_owned(),
            ),
            (_, false) => Some(format!(
                "The agents you can reach on this runtime (msg_send by handle):\n{listing}"
            )),
        }
    }
}
