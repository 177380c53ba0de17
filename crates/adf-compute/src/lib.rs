//! Compute environments for ADF agents (spec §5.12, tools guide "Compute Tools"): the
//! `compute_exec` and `fs_transfer` tools, plugged into the runtime through one seam,
//! [`tools`], which the binaries register next to the built-ins.
//!
//! - `target.rs` decides which environment a call runs in ([`Targets::resolve`]: the agent's
//!   `compute` config, the runtime settings, what is installed), failing closed.
//! - `run.rs` runs a command in one: the bubblewrap sandbox of `isolated` and `shared`, a
//!   registered Podman container, or the host, with rlimits, a wall-time deadline that kills
//!   the whole process group, and capped output.
//! - `exec.rs` is `compute_exec` (a detached tool: the program runs outside every store
//!   transaction), `pip.rs` the agent's `compute.packages.pip` virtualenv, `transfer.rs`
//!   `fs_transfer`, and `status.rs` what `adf runtime` shows.
//!
//! Workspaces live under `$ADF_HOME/compute`: `isolated/{agentId}` (the sandbox's
//! `/workspace/{agentId}`), `shared/` (the shared environment's `/workspace`) and
//! `host/{agentId}` (the host target's working directory).

use std::sync::Arc;

use adf_runtime::home::RuntimeHome;
use adf_runtime::tools::Tool;

mod error;
mod exec;
mod pip;
pub mod run;
pub mod status;
pub mod target;
mod transfer;

pub use error::ComputeError;
pub use exec::{ComputeExec, run_in};
pub use status::status;
pub use target::{Target, Targets};
pub use transfer::FsTransfer;

/// `compute_exec` and `fs_transfer` over the workspaces of `home` (`None`: every call fails
/// with "needs a runtime home").
pub fn tools(home: Option<RuntimeHome>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ComputeExec { home: home.clone() }),
        Arc::new(FsTransfer { home }),
    ]
}

/// What `adf check` warns about in the agent's `compute` config on this machine: each allowed
/// target that could not run now (not enabled, not installed, a host gate shut) and pip
/// packages with nothing to install them from. Empty when compute is off or runnable.
pub fn check(config: &serde_json::Value, home: &RuntimeHome) -> Vec<String> {
    let targets = Targets::new(config, home);
    let mut problems: Vec<String> = targets
        .allowed()
        .iter()
        .filter_map(|name| targets.resolve(Some(name)).err())
        .map(|error| error.to_string())
        .collect();
    if !targets.pip_packages().is_empty() && targets.pip_find_links().is_none() {
        problems.push(
            "compute.packages.pip cannot be installed: set the runtime setting compute.pipFindLinks to a directory of wheels (installing from an index is not supported yet)".into(),
        );
    }
    problems
}
