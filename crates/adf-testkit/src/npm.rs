//! A local npm registry speaking the registry's documented HTTP API
//! (<https://github.com/npm/registry/blob/main/docs/REGISTRY-API.md>): `GET /{name}` answers
//! the packument (`name`, `dist-tags`, `versions` with each version's manifest and `dist`:
//! `tarball`, `integrity` as `sha512-<base64>`, `unpackedSize`), scoped names arrive as
//! `@scope%2fname`, and `GET /-/tarballs/{file}` serves the tarballs. Tests publish packages
//! built from small sources ([`NpmPackage`]): real gzipped tarballs under `package/`, the
//! integrity computed over their bytes, and faults on purpose (a wrong integrity, an entry
//! whose path climbs out with `../`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Body;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

/// A package version to publish.
#[derive(Debug, Clone)]
pub struct NpmPackage {
    name: String,
    version: String,
    files: Vec<(String, Vec<u8>)>,
    raw_entries: Vec<(String, Vec<u8>)>,
    dependencies: Map<String, Value>,
    manifest: Map<String, Value>,
    wrong_integrity: bool,
    declare_unpacked_size: bool,
}

impl NpmPackage {
    /// `name@version` with no files yet (its `package.json` is generated).
    pub fn new(name: &str, version: &str) -> Self {
        NpmPackage {
            name: name.to_owned(),
            version: version.to_owned(),
            files: Vec::new(),
            raw_entries: Vec::new(),
            dependencies: Map::new(),
            manifest: Map::new(),
            wrong_integrity: false,
            declare_unpacked_size: true,
        }
    }

    /// A file at `path` inside the package (`index.js`, `lib/a.js`).
    pub fn file(mut self, path: &str, contents: impl Into<Vec<u8>>) -> Self {
        self.files.push((path.to_owned(), contents.into()));
        self
    }

    /// A tar entry written with exactly this path (`package/../../evil.js`), unchecked.
    pub fn raw_entry(mut self, path: &str, contents: impl Into<Vec<u8>>) -> Self {
        self.raw_entries.push((path.to_owned(), contents.into()));
        self
    }

    /// A `dependencies` entry.
    pub fn dependency(mut self, name: &str, range: &str) -> Self {
        self.dependencies.insert(name.to_owned(), json!(range));
        self
    }

    /// A `package.json` field (`type`, `main`, `exports`, `gypfile`, `scripts`, …).
    pub fn manifest(mut self, key: &str, value: Value) -> Self {
        self.manifest.insert(key.to_owned(), value);
        self
    }

    /// Publish an integrity that does not match the tarball.
    pub fn wrong_integrity(mut self) -> Self {
        self.wrong_integrity = true;
        self
    }

    /// Leave `dist.unpackedSize` out (the installer must measure while unpacking).
    pub fn without_unpacked_size(mut self) -> Self {
        self.declare_unpacked_size = false;
        self
    }

    fn package_json(&self) -> Value {
        let mut manifest = Map::new();
        manifest.insert("name".into(), json!(self.name));
        manifest.insert("version".into(), json!(self.version));
        if !self.dependencies.is_empty() {
            manifest.insert(
                "dependencies".into(),
                Value::Object(self.dependencies.clone()),
            );
        }
        for (k, v) in &self.manifest {
            manifest.insert(k.clone(), v.clone());
        }
        Value::Object(manifest)
    }

    #[allow(clippy::expect_used)]
    fn tarball(&self) -> (Vec<u8>, u64) {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut builder = tar::Builder::new(gz);
        let package_json = self.package_json().to_string().into_bytes();
        let mut size = package_json.len() as u64;
        let mut entries: Vec<(String, &[u8])> =
            vec![("package/package.json".to_owned(), &package_json[..])];
        for (path, bytes) in &self.files {
            size += bytes.len() as u64;
            entries.push((format!("package/{path}"), bytes));
        }
        for (path, bytes) in &entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            builder
                .append_data(&mut header, path, *bytes)
                .expect("adf-testkit: tar entry");
        }
        for (path, bytes) in &self.raw_entries {
            let mut header = tar::Header::new_old();
            {
                let name = &mut header.as_old_mut().name;
                let raw = path.as_bytes();
                name[..raw.len()].copy_from_slice(raw);
            }
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            header.set_cksum();
            builder
                .append(&header, &bytes[..])
                .expect("adf-testkit: raw tar entry");
        }
        let gz = builder.into_inner().expect("adf-testkit: tar");
        let mut gz = gz;
        gz.flush().expect("adf-testkit: gzip");
        (gz.finish().expect("adf-testkit: gzip"), size)
    }
}

/// The `sha512-<base64>` integrity string of `bytes`.
pub fn integrity(bytes: &[u8]) -> String {
    format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(Sha512::digest(bytes))
    )
}

#[derive(Default)]
struct Registry {
    /// name → version → manifest (with `dist`).
    packuments: BTreeMap<String, BTreeMap<String, Value>>,
    tarballs: BTreeMap<String, Vec<u8>>,
    /// Paths requested, in order.
    requests: Vec<String>,
}

/// The running registry (on 127.0.0.1, port 0). Dropping it stops it.
#[derive(Debug)]
pub struct NpmRegistry {
    state: Arc<Mutex<Registry>>,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("packages", &self.packuments.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn lock(state: &Mutex<Registry>) -> MutexGuard<'_, Registry> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for NpmRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl NpmRegistry {
    /// Starts an empty registry.
    #[allow(clippy::expect_used)]
    pub async fn start() -> Self {
        let state: Arc<Mutex<Registry>> = Arc::default();
        let shared = state.clone();
        let app = Router::new().fallback(move |uri: Uri| {
            let state = shared.clone();
            async move { answer(&state, &uri) }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("adf-testkit: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("adf-testkit: local_addr");
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("adf-testkit: npm registry stopped: {e}");
            }
        });
        NpmRegistry { state, addr, task }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Publishes a version; `dist-tags.latest` is the last version published.
    pub fn publish(&self, package: NpmPackage) {
        let (tarball, size) = package.tarball();
        let file = format!(
            "{}-{}.tgz",
            package.name.replace('/', "-").trim_start_matches('@'),
            package.version
        );
        let integrity = if package.wrong_integrity {
            integrity(b"some other bytes")
        } else {
            integrity(&tarball)
        };
        let mut manifest = package.package_json();
        let mut dist = json!({
            "tarball": format!("{}/-/tarballs/{file}", self.url()),
            "integrity": integrity,
        });
        if package.declare_unpacked_size {
            dist["unpackedSize"] = json!(size);
        }
        manifest["dist"] = dist;
        let mut state = lock(&self.state);
        state.tarballs.insert(file, tarball);
        state
            .packuments
            .entry(package.name.clone())
            .or_default()
            .insert(package.version.clone(), manifest);
        let latest = package.version;
        if let Some(versions) = state.packuments.get_mut(&package.name) {
            for manifest in versions.values_mut() {
                manifest["__latest"] = json!(latest);
            }
        }
    }

    /// The paths requested so far (`/left-pad`, `/-/tarballs/left-pad-1.0.0.tgz`).
    pub fn requests(&self) -> Vec<String> {
        lock(&self.state).requests.clone()
    }
}

fn answer(state: &Mutex<Registry>, uri: &Uri) -> Response {
    let path = uri.path().to_owned();
    let mut state = lock(state);
    state.requests.push(path.clone());
    if let Some(file) = path.strip_prefix("/-/tarballs/") {
        return match state.tarballs.get(file) {
            Some(bytes) => (
                [(header::CONTENT_TYPE, "application/octet-stream")],
                Body::from(bytes.clone()),
            )
                .into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        };
    }
    let name = path
        .trim_start_matches('/')
        .replace("%2f", "/")
        .replace("%2F", "/");
    let Some(versions) = state.packuments.get(&name) else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({ "error": "Not found" })),
        )
            .into_response();
    };
    let mut latest = String::new();
    let mut out = Map::new();
    for (version, manifest) in versions {
        let mut manifest = manifest.clone();
        if let Some(object) = manifest.as_object_mut()
            && let Some(Value::String(l)) = object.remove("__latest")
        {
            latest = l;
        }
        out.insert(version.clone(), manifest);
    }
    axum::Json(json!({
        "name": name,
        "dist-tags": { "latest": latest },
        "versions": out,
    }))
    .into_response()
}
