//! The content-addressed store and the sandbox's reads of it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{DEFAULT_REGISTRY, PackageError, agent_entries, package_id};

/// One installed `name@version`: what `ids/<id>.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageRecord {
    /// The package name.
    pub name: String,
    /// The exact version.
    pub version: String,
    /// The registry's `dist.integrity` the tarball matched.
    pub integrity: String,
    /// The store directory (`store/<hash>`): the SHA-512 of the tarball in hex.
    pub hash: String,
    /// Unpacked bytes of this package alone.
    pub size: u64,
    /// Its dependencies as installed: `{name: "name@version"}`.
    pub dependencies: BTreeMap<String, String>,
}

impl PackageRecord {
    /// `name@version`.
    pub fn id(&self) -> String {
        package_id(&self.name, &self.version)
    }
}

/// The store under `$ADF_HOME/packages`, shared by the agents of one installation. Cheap to
/// clone. Records are immutable once written, so they are cached.
#[derive(Clone)]
pub struct PackageStore {
    root: PathBuf,
    settings: Option<PathBuf>,
    records: Arc<Mutex<HashMap<String, Arc<PackageRecord>>>>,
}

impl std::fmt::Debug for PackageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackageStore")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// `@s/n@1.0.0` as a file name: `/` cannot appear in one.
fn id_file(id: &str) -> String {
    format!("{}.json", id.replace('/', "%2f"))
}

impl PackageStore {
    /// The store of the runtime home `home` (`$ADF_HOME`): `home/packages`, with the runtime
    /// settings (`npmRegistry`, `sandboxPackages`) read from `home/settings.json`.
    pub fn for_home(home: &Path) -> Self {
        PackageStore {
            root: home.join("packages"),
            settings: Some(home.join("settings.json")),
            records: Arc::default(),
        }
    }

    /// A store at `root` with no runtime settings (tests, tools).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        PackageStore {
            root: root.into(),
            settings: None,
            records: Arc::default(),
        }
    }

    /// The store's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn setting(&self, key: &str) -> Option<Value> {
        let path = self.settings.as_ref()?;
        let text = std::fs::read_to_string(path).ok()?;
        let settings: Value = serde_json::from_str(&text).ok()?;
        settings.get(key).cloned()
    }

    /// The registry URL: the runtime setting `npmRegistry`, else [`DEFAULT_REGISTRY`]; the
    /// environment's `ADF_NPM_REGISTRY` overrides both (an owner's one-off).
    pub fn registry(&self) -> String {
        if let Ok(url) = std::env::var("ADF_NPM_REGISTRY")
            && !url.trim().is_empty()
        {
            return url.trim().trim_end_matches('/').to_owned();
        }
        self.setting("npmRegistry")
            .and_then(|v| v.as_str().map(str::to_owned))
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_REGISTRY.to_owned())
            .trim_end_matches('/')
            .to_owned()
    }

    /// The runtime tier (tools guide "Package Tiers"): the setting `sandboxPackages`, a list
    /// of `{name, version}` every agent of this installation may import.
    pub fn runtime_packages(&self) -> Value {
        self.setting("sandboxPackages")
            .filter(Value::is_array)
            .unwrap_or(Value::Array(Vec::new()))
    }

    pub(crate) fn content_dir(&self, hash: &str) -> PathBuf {
        self.root.join("store").join(hash)
    }

    pub(crate) fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// The record of `id` when it is installed.
    pub fn record(&self, id: &str) -> Option<Arc<PackageRecord>> {
        if let Ok(cache) = self.records.lock()
            && let Some(found) = cache.get(id)
        {
            return Some(found.clone());
        }
        let path = self.root.join("ids").join(id_file(id));
        let text = std::fs::read_to_string(path).ok()?;
        let record: PackageRecord = serde_json::from_str(&text).ok()?;
        if record.id() != id || !self.content_dir(&record.hash).is_dir() {
            return None;
        }
        let record = Arc::new(record);
        if let Ok(mut cache) = self.records.lock() {
            cache.insert(id.to_owned(), record.clone());
        }
        Some(record)
    }

    /// Writes `record` (its files are in place) through a temporary file and a rename.
    pub(crate) fn write_record(&self, record: &PackageRecord) -> Result<(), PackageError> {
        let dir = self.root.join("ids");
        std::fs::create_dir_all(&dir)?;
        let text = serde_json::to_vec_pretty(record)
            .map_err(|e| PackageError::Record(record.id(), e.to_string()))?;
        let tmp = dir.join(format!(".{}.{}", id_file(&record.id()), std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, dir.join(id_file(&record.id())))?;
        Ok(())
    }

    /// Every id `roots` reach through recorded dependencies (roots included), each once.
    pub fn closure(&self, roots: impl IntoIterator<Item = String>) -> Vec<Arc<PackageRecord>> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let mut queue: VecDeque<String> = roots.into_iter().collect();
        while let Some(id) = queue.pop_front() {
            if !seen.insert(id.clone()) {
                continue;
            }
            if let Some(record) = self.record(&id) {
                queue.extend(record.dependencies.values().cloned());
                out.push(record);
            }
        }
        out
    }

    /// Unpacked bytes of everything `roots` reach.
    pub fn closure_size(&self, roots: impl IntoIterator<Item = String>) -> u64 {
        self.closure(roots).iter().map(|r| r.size).sum()
    }

    fn tier_ids(&self, packages: &Value) -> impl Iterator<Item = String> {
        agent_entries(packages)
            .into_iter()
            .chain(agent_entries(&self.runtime_packages()))
            .map(|(name, version)| package_id(&name, &version))
    }
}

/// A path inside a package, or `None` when it could leave it.
fn inside(dir: &Path, path: &str) -> Option<PathBuf> {
    let relative = Path::new(path);
    if path.is_empty()
        || !relative
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
    {
        return None;
    }
    Some(dir.join(relative))
}

impl adf_runtime::code::PackageModules for PackageStore {
    fn resolve(&self, packages: &Value, from: Option<&str>, name: &str) -> Option<String> {
        match from {
            // Agent packages, then the runtime's; this runtime bundles no standard-library
            // packages (the third tier is empty).
            None => agent_entries(packages)
                .into_iter()
                .chain(agent_entries(&self.runtime_packages()))
                .find(|(n, _)| n == name)
                .map(|(n, v)| package_id(&n, &v))
                .filter(|id| self.record(id).is_some()),
            Some(from) => self.record(from)?.dependencies.get(name).cloned(),
        }
    }

    fn read(&self, packages: &Value, id: &str, path: &str) -> Option<String> {
        // Only what the run may import: a package's code cannot name another agent's package
        // by its store id.
        if !self
            .closure(self.tier_ids(packages))
            .iter()
            .any(|r| r.id() == id)
        {
            return None;
        }
        let record = self.record(id)?;
        let file = inside(&self.content_dir(&record.hash), path)?;
        let meta = std::fs::symlink_metadata(&file).ok()?;
        if !meta.is_file() {
            return None;
        }
        std::fs::read_to_string(file).ok()
    }
}
