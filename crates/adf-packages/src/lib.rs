//! `adf-packages`: npm packages for agent code (tools guide "Package Management Tools").
//!
//! Principal types: [`PackageStore`] (one runtime-owned, content-addressed store under
//! `$ADF_HOME/packages`, shared by every agent of the installation), [`install`] (resolve a
//! package and its dependencies against an npm registry's documented HTTP API, check each
//! tarball's `dist.integrity`, unpack it, refuse native addons and oversize packages; never
//! run a package script), the agent tools `npm_install` / `npm_uninstall` ([`tools`]) and the
//! sandbox's view of the store ([`PackageStore`] implements
//! [`adf_runtime::code::PackageModules`]). A binary attaches both where it assembles its
//! runtime; the runtime core names none of this.
//!
//! Store layout (`$ADF_HOME/packages`): `store/<sha512 hex of the tarball>/` holds a
//! package's files (the tarball's first path component dropped), `ids/<name@version>.json`
//! its record (`name`, `version`, `integrity`, `hash`, `size`, `dependencies` as
//! `{name: "name@version"}`), written after the files and the dependencies are in place, so a
//! record names only complete installs. `tmp/` holds unpacks in progress.

mod install;
mod registry;
mod store;
pub mod tools;
mod unpack;

pub use install::{InstallOutcome, Installer, Progress, Refusal, install, uninstall};
pub use store::{PackageRecord, PackageStore};

/// The one seam: registers `npm_install` / `npm_uninstall` on `registry` and makes `store`
/// the source of agent code's bare imports.
pub fn attach(registry: &mut adf_runtime::tools::ToolRegistry, store: PackageStore) {
    for tool in tools::tools(store.clone()) {
        registry.register(tool);
    }
    registry.attach_packages(std::sync::Arc::new(store));
}

/// The registry `npm_install` resolves against unless the runtime setting `npmRegistry`
/// names another.
pub const DEFAULT_REGISTRY: &str = "https://registry.npmjs.org";

/// Limits of the tools guide: per package (with its dependencies), per agent, entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Unpacked bytes of one package with its dependencies (50 MB).
    pub package_bytes: u64,
    /// Unpacked bytes of all of one agent's packages with their dependencies (200 MB).
    pub total_bytes: u64,
    /// Entries of `code_execution.packages` (50), and packages one install may bring in.
    pub packages: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            package_bytes: 50 * 1024 * 1024,
            total_bytes: 200 * 1024 * 1024,
            packages: 50,
        }
    }
}

/// Why the store or an install failed (other than a [`Refusal`] the agent is told about).
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// Reading or writing the store.
    #[error("package store: {0}")]
    Io(#[from] std::io::Error),
    /// A record in the store that does not parse.
    #[error("package store record {0}: {1}")]
    Record(String, String),
}

/// An agent's `code_execution.packages` entries as `(name, version)`.
pub fn agent_entries(packages: &serde_json::Value) -> Vec<(String, String)> {
    packages
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            Some((
                entry.get("name")?.as_str()?.to_owned(),
                entry.get("version")?.as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// `name@version`.
pub fn package_id(name: &str, version: &str) -> String {
    format!("{name}@{version}")
}

/// Whether `name` is a valid npm package name (lowercase, URL-safe, optional `@scope/`).
pub fn valid_name(name: &str) -> bool {
    let body_ok = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && !s.starts_with('_')
            && s.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | '_' | '~')
            })
    };
    if name.len() > 214 {
        return false;
    }
    match name.strip_prefix('@') {
        Some(scoped) => match scoped.split_once('/') {
            Some((scope, rest)) => body_ok(scope) && body_ok(rest),
            None => false,
        },
        None => body_ok(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("lodash"));
        assert!(valid_name("@scope/pkg.js"));
        assert!(!valid_name("../etc"));
        assert!(!valid_name("@scope"));
        assert!(!valid_name("Upper"));
        assert!(!valid_name("a/b"));
    }
}
