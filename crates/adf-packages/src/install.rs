//! One install: a package and its dependencies resolved against the registry (npm's semver
//! ranges), each version downloaded once into the store, nothing ever executed.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;

use nodejs_semver::{Range, Version};
use serde_json::{Value, json};

use crate::registry::Registry;
use crate::store::{PackageRecord, PackageStore};
use crate::{Limits, agent_entries, package_id, valid_name};

/// Why an install was refused, in the guide's result shape
/// (`{success: false, error, message}`): `native_addon`, `size_limit`, `integrity`,
/// `unsafe_path`, `not_found`, `invalid`, `registry`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}: {message}")]
pub struct Refusal {
    /// The machine-readable reason.
    pub error: &'static str,
    /// What happened, for the agent.
    pub message: String,
}

impl Refusal {
    pub(crate) fn new(error: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            error,
            message: message.into(),
        }
    }

    /// `{success: false, error, message}`.
    pub fn to_json(&self) -> Value {
        json!({ "success": false, "error": self.error, "message": self.message })
    }
}

/// A finished install.
#[derive(Debug, Clone, PartialEq)]
pub struct InstallOutcome {
    /// The package name.
    pub name: String,
    /// The version installed (or already there).
    pub version: String,
    /// Unpacked megabytes of the package with its dependencies.
    pub size_mb: f64,
    /// The agent already had a version satisfying the request.
    pub already_installed: bool,
    /// The agent's `code_execution.packages` after the install.
    pub packages: Value,
}

impl InstallOutcome {
    /// The guide's success shape.
    pub fn to_json(&self) -> Value {
        if self.already_installed {
            json!({ "success": true, "name": self.name, "version": self.version, "already_installed": true })
        } else {
            json!({ "success": true, "name": self.name, "version": self.version, "size_mb": self.size_mb })
        }
    }
}

/// Progress of an install, for the command line.
pub type Progress<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// Installs `name` (`range` default `latest`) for an agent whose entries are `packages`.
pub async fn install(
    store: &PackageStore,
    packages: &Value,
    name: &str,
    range: Option<&str>,
    progress: Progress<'_>,
) -> Result<InstallOutcome, Refusal> {
    Installer::new(store, Limits::default())?
        .install(packages, name, range, progress)
        .await
}

/// Install work over one registry with its limits.
pub struct Installer<'s> {
    store: &'s PackageStore,
    limits: Limits,
    registry: Registry,
}

impl std::fmt::Debug for Installer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Installer")
            .field("store", &self.store)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// What one install has done so far.
struct Run<'p> {
    packuments: HashMap<String, Value>,
    /// Ids installed or found in this run (cycles end here).
    visited: HashMap<String, u64>,
    bytes: u64,
    progress: Progress<'p>,
}

type Step<'a> = Pin<Box<dyn Future<Output = Result<String, Refusal>> + Send + 'a>>;

/// Scripts that build native code when npm would run them (this runtime never runs any).
const BUILDING_SCRIPTS: [&str; 3] = ["preinstall", "install", "postinstall"];
const BUILD_TOOLS: [&str; 6] = [
    "node-gyp",
    "prebuild",
    "node-pre-gyp",
    "cmake-js",
    "napi",
    "node-gyp-build",
];
/// Dependencies that exist to load or build a native addon.
const NATIVE_HELPERS: [&str; 6] = [
    "node-gyp-build",
    "bindings",
    "prebuild-install",
    "node-addon-api",
    "nan",
    "@mapbox/node-pre-gyp",
];

/// Why a version's manifest says it is a native addon.
fn native_reason(manifest: &Value) -> Option<String> {
    if manifest.get("gypfile").and_then(Value::as_bool) == Some(true) {
        return Some("its package.json sets gypfile: true".into());
    }
    for script in BUILDING_SCRIPTS {
        if let Some(command) = manifest
            .pointer(&format!("/scripts/{script}"))
            .and_then(Value::as_str)
            && BUILD_TOOLS.iter().any(|tool| command.contains(tool))
        {
            return Some(format!(
                "its {script} script builds native code ({command})"
            ));
        }
    }
    for helper in NATIVE_HELPERS {
        if manifest
            .get("dependencies")
            .and_then(|d| d.get(helper))
            .is_some()
        {
            return Some(format!("it depends on {helper}, which loads native addons"));
        }
    }
    None
}

/// The highest version of `packument` that `range` accepts (a dist-tag such as `latest`
/// names one directly).
fn pick_version(packument: &Value, name: &str, range: &str) -> Result<String, Refusal> {
    if let Some(tagged) = packument
        .pointer(&format!("/dist-tags/{range}"))
        .and_then(Value::as_str)
    {
        return Ok(tagged.to_owned());
    }
    let parsed = Range::parse(range).map_err(|e| {
        Refusal::new(
            "invalid",
            format!("'{range}' is neither a version range nor a dist-tag of '{name}': {e}"),
        )
    })?;
    let versions: Vec<Version> = packument
        .get("versions")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(v, _)| Version::parse(v).ok())
        .collect();
    // npm prefers `latest` when it satisfies the range.
    if let Some(latest) = packument
        .pointer("/dist-tags/latest")
        .and_then(Value::as_str)
        .and_then(|v| Version::parse(v).ok())
        && parsed.satisfies(&latest)
    {
        return Ok(latest.to_string());
    }
    parsed
        .max_satisfying(&versions)
        .map(ToString::to_string)
        .ok_or_else(|| {
            Refusal::new(
                "not_found",
                format!("no version of '{name}' satisfies '{range}'"),
            )
        })
}

impl<'s> Installer<'s> {
    /// An installer against the store's registry.
    pub fn new(store: &'s PackageStore, limits: Limits) -> Result<Self, Refusal> {
        Ok(Installer {
            store,
            limits,
            registry: Registry::new(&store.registry())?,
        })
    }

    /// Installs `name@range` and answers the agent's new entries (the package added, or its
    /// entry replaced by the new version).
    pub async fn install(
        &self,
        packages: &Value,
        name: &str,
        range: Option<&str>,
        progress: Progress<'_>,
    ) -> Result<InstallOutcome, Refusal> {
        if !valid_name(name) {
            return Err(Refusal::new(
                "invalid",
                format!("'{name}' is not an npm package name"),
            ));
        }
        let asked = range.map(str::trim).filter(|r| !r.is_empty());
        let range = asked.unwrap_or("latest");
        let entries = agent_entries(packages);
        if let Some((_, have)) = entries.iter().find(|(n, _)| n == name) {
            // No version asked: any installed one will do (the guide's "same install twice").
            // A dist-tag is resolved below and compared then.
            let satisfied = asked.is_none()
                || match (Range::parse(range), Version::parse(have)) {
                    (Ok(r), Ok(v)) => r.satisfies(&v),
                    _ => range == have,
                };
            if satisfied && self.store.record(&package_id(name, have)).is_some() {
                return Ok(InstallOutcome {
                    name: name.to_owned(),
                    version: have.clone(),
                    size_mb: mb(self.store.closure_size([package_id(name, have)])),
                    already_installed: true,
                    packages: packages.clone(),
                });
            }
        } else if entries.len() >= self.limits.packages {
            return Err(Refusal::new(
                "size_limit",
                format!(
                    "the agent has {} packages; the limit is {}",
                    entries.len(),
                    self.limits.packages
                ),
            ));
        }
        let mut run = Run {
            packuments: HashMap::new(),
            visited: HashMap::new(),
            bytes: 0,
            progress,
        };
        let id = self
            .ensure(&mut run, name.to_owned(), range.to_owned())
            .await?;
        let version = id[name.len() + 1..].to_owned();
        if entries.iter().any(|(n, v)| n == name && *v == version) {
            return Ok(InstallOutcome {
                name: name.to_owned(),
                version,
                size_mb: mb(self.store.closure_size([id])),
                already_installed: true,
                packages: packages.clone(),
            });
        }
        let size = self.store.closure_size([id.clone()]);
        if size > self.limits.package_bytes {
            return Err(Refusal::new(
                "size_limit",
                format!(
                    "{id} with its dependencies is {:.1} MB; the limit is {} MB",
                    mb(size),
                    self.limits.package_bytes / (1024 * 1024)
                ),
            ));
        }
        let mut next: Vec<Value> = Vec::new();
        let mut replaced = false;
        for entry in packages.as_array().into_iter().flatten() {
            if entry.get("name").and_then(Value::as_str) == Some(name) {
                next.push(json!({ "name": name, "version": version }));
                replaced = true;
            } else {
                next.push(entry.clone());
            }
        }
        if !replaced {
            next.push(json!({ "name": name, "version": version }));
        }
        let next = Value::Array(next);
        let roots = agent_entries(&next)
            .into_iter()
            .map(|(n, v)| package_id(&n, &v));
        let total = self.store.closure_size(roots);
        if total > self.limits.total_bytes {
            return Err(Refusal::new(
                "size_limit",
                format!(
                    "the agent's packages would take {:.1} MB; the limit is {} MB",
                    mb(total),
                    self.limits.total_bytes / (1024 * 1024)
                ),
            ));
        }
        Ok(InstallOutcome {
            name: name.to_owned(),
            version,
            size_mb: mb(size),
            already_installed: false,
            packages: next,
        })
    }

    /// Makes sure a version of `name` satisfying `range` is in the store with its
    /// dependencies; its id.
    fn ensure<'a>(&'a self, run: &'a mut Run<'_>, name: String, range: String) -> Step<'a> {
        Box::pin(async move {
            if !valid_name(&name) {
                return Err(Refusal::new(
                    "invalid",
                    format!("'{name}' is not an npm package name"),
                ));
            }
            if !run.packuments.contains_key(&name) {
                (run.progress)(&format!("resolving {name}@{range}"));
                let packument = self.registry.packument(&name).await?;
                run.packuments.insert(name.clone(), packument);
            }
            let packument = run.packuments.get(&name).cloned().unwrap_or(Value::Null);
            let version = pick_version(&packument, &name, &range)?;
            let id = package_id(&name, &version);
            if run.visited.contains_key(&id) {
                return Ok(id);
            }
            if let Some(record) = self.store.record(&id) {
                run.visited.insert(id.clone(), record.size);
                return Ok(id);
            }
            if run.visited.len() >= self.limits.packages {
                return Err(Refusal::new(
                    "size_limit",
                    format!(
                        "installing brings in more than {} packages",
                        self.limits.packages
                    ),
                ));
            }
            let manifest = packument
                .pointer(&format!(
                    "/versions/{}",
                    version.replace('~', "~0").replace('/', "~1")
                ))
                .cloned()
                .ok_or_else(|| {
                    Refusal::new(
                        "registry",
                        format!("the packument has no manifest for {id}"),
                    )
                })?;
            if let Some(reason) = native_reason(&manifest) {
                return Err(Refusal::new(
                    "native_addon",
                    format!(
                        "{id} is a native addon: {reason}; only pure JavaScript/WASM packages can be installed"
                    ),
                ));
            }
            let budget = self.limits.package_bytes.saturating_sub(run.bytes);
            if let Some(declared) = manifest
                .pointer("/dist/unpackedSize")
                .and_then(Value::as_u64)
                && declared > budget
            {
                return Err(Refusal::new(
                    "size_limit",
                    format!(
                        "{id} unpacks to {:.1} MB; the limit with its dependencies is {} MB",
                        mb(declared),
                        self.limits.package_bytes / (1024 * 1024)
                    ),
                ));
            }
            run.visited.insert(id.clone(), 0);
            let tarball = manifest
                .pointer("/dist/tarball")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let integrity = manifest
                .pointer("/dist/integrity")
                .and_then(Value::as_str)
                .unwrap_or_default();
            (run.progress)(&format!("downloading {id}"));
            let (hash, bytes) = self.registry.tarball(tarball, integrity, budget).await?;
            let size = self.unpack_into_store(&hash, &bytes, budget)?;
            run.bytes = run.bytes.saturating_add(size);
            run.visited.insert(id.clone(), size);
            let mut dependencies = BTreeMap::new();
            let wanted: Vec<(String, String)> = manifest
                .get("dependencies")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(dep, r)| (dep.clone(), r.as_str().unwrap_or("*").to_owned()))
                .collect();
            for (dep, dep_range) in wanted {
                let dep_id = self.ensure(run, dep.clone(), dep_range).await?;
                dependencies.insert(dep, dep_id);
            }
            let record = PackageRecord {
                name: name.clone(),
                version: version.clone(),
                integrity: integrity.to_owned(),
                hash,
                size,
                dependencies,
            };
            self.store
                .write_record(&record)
                .map_err(|e| Refusal::new("registry", e.to_string()))?;
            (run.progress)(&format!("installed {id}"));
            Ok(id)
        })
    }

    /// Unpacks into `tmp/` and renames into `store/<hash>`; content already there is kept
    /// (the same bytes, by their hash).
    fn unpack_into_store(&self, hash: &str, bytes: &[u8], budget: u64) -> Result<u64, Refusal> {
        let target = self.store.content_dir(hash);
        let tmp = self
            .store
            .tmp_dir()
            .join(format!("{hash}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let result = crate::unpack::unpack(bytes, &tmp, budget);
        let size = match result {
            Ok(size) => size,
            Err(refusal) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(refusal);
            }
        };
        if target.is_dir() {
            let _ = std::fs::remove_dir_all(&tmp);
            return Ok(size);
        }
        let io = |e: std::io::Error| Refusal::new("registry", format!("package store: {e}"));
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        if let Err(e) = std::fs::rename(&tmp, &target) {
            let _ = std::fs::remove_dir_all(&tmp);
            if !target.is_dir() {
                return Err(io(e));
            }
        }
        Ok(size)
    }
}

fn mb(bytes: u64) -> f64 {
    (bytes as f64 / (1024.0 * 1024.0) * 10.0).round() / 10.0
}

/// The agent's entries without `name`; `None` when it had none.
pub fn uninstall(packages: &Value, name: &str) -> Option<Value> {
    let items = packages.as_array()?;
    let kept: Vec<Value> = items
        .iter()
        .filter(|e| e.get("name").and_then(Value::as_str) != Some(name))
        .cloned()
        .collect();
    (kept.len() != items.len()).then_some(Value::Array(kept))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn picks_versions_like_npm() {
        let packument = json!({
            "dist-tags": { "latest": "1.2.0", "next": "2.0.0-beta.1" },
            "versions": { "1.0.0": {}, "1.2.0": {}, "1.3.0": {}, "2.0.0-beta.1": {} }
        });
        assert_eq!(pick_version(&packument, "p", "latest").unwrap(), "1.2.0");
        assert_eq!(
            pick_version(&packument, "p", "next").unwrap(),
            "2.0.0-beta.1"
        );
        assert_eq!(pick_version(&packument, "p", "^1.0.0").unwrap(), "1.2.0");
        assert_eq!(
            pick_version(&packument, "p", ">=1.3.0 <2").unwrap(),
            "1.3.0"
        );
        assert_eq!(
            pick_version(&packument, "p", "1.0.x || 3").unwrap(),
            "1.0.0"
        );
        assert_eq!(
            pick_version(&packument, "p", "^3").unwrap_err().error,
            "not_found"
        );
    }

    #[test]
    fn native_manifests() {
        assert!(native_reason(&json!({"gypfile": true})).is_some());
        assert!(native_reason(&json!({"scripts": {"install": "node-gyp rebuild"}})).is_some());
        assert!(native_reason(&json!({"dependencies": {"node-gyp-build": "^4"}})).is_some());
        assert!(native_reason(&json!({"scripts": {"postinstall": "echo thanks"}})).is_none());
    }
}
