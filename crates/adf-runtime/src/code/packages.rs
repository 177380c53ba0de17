//! The seam agent code's npm packages come through. The runtime core knows no registry nor
//! store: a binary attaches a [`PackageModules`] (adf-packages) to the tool registry, and the
//! runner answers the sandbox's package questions with it, passing the agent's
//! `code_execution.packages` as the run's config shows it (empty for inner loops, §6.4).

use serde_json::Value;

/// Installed packages as the sandbox sees them (ids are `name@version`).
pub trait PackageModules: Send + Sync {
    /// The id a bare import of `name` resolves to: from the agent's code (`from: None`,
    /// its `packages` first, then the runtime's and the standard library's tiers) or from
    /// inside the installed package `from` (its recorded dependencies).
    fn resolve(&self, packages: &Value, from: Option<&str>, name: &str) -> Option<String>;

    /// The text of `path` inside package `id` when `id` is reachable from `packages`
    /// (the agent's packages and their dependencies, or the other tiers); `None` otherwise.
    fn read(&self, packages: &Value, id: &str, path: &str) -> Option<String>;
}
