//! The review gate and tracked directories: what an agent file can do, whether its owner
//! accepted exactly that, and the autostart scan that only starts accepted agents.
//!
//! Principal items: [`Review`] (an agent file's summary, digest and review state),
//! [`summarize`] (the summary, read from an [`AdfFile`] without writing to it),
//! [`AutostartReport`] and the functions `review`, `accept_review`, `require_reviewed`,
//! `find_in_tracked` and `autostart` (the `Daemon` methods of the same names call them; the
//! scan loads through `Hub::load_agent`, the daemon's load).
//!
//! Where "reviewed" is kept. The reference keeps a `reviewedAgents` set in its settings store
//! and gates by agent id, so a reviewed agent whose file later gains a trigger, an authorized
//! file or an MCP server still starts unreviewed. Here the record is in the runtime home's
//! `settings.json` under [`REVIEWED_KEY`] — `{ "<config id>": { digest, filePath, reviewedAt } }`
//! — and the digest covers what the owner saw that decides what the agent can do on its own:
//! its id, `autostart`, enabled and restricted tools, trigger targets, umbilical taps, serving
//! routes, MCP servers, `code_execution`, and every authorized file with the SHA-256 of its
//! content. A file whose digest differs from the accepted one needs review again. The summary
//! also lists `notRunYet`: configured sections this runtime does not run (`adf_store::
//! unsupported`), so the owner does not accept a route or MCP server believing it runs. Left out of
//! the digest (still shown): name, handle, description, state and timers — the agent changes
//! its own timers as it runs, and what a timer lambda may do is decided by the authorized
//! files, which are in the digest.
//!
//! Reading for review never changes the file: a file that is not loaded is opened with
//! [`AdfFile::inspect`] (read-only, no migration, no sidecars); a loaded one is read through
//! its agent's worker.
//!
//! Tracked directories: `POST /agents/autostart {trackedDirs, maxDepth}` and
//! `adf daemon --track DIR` (plus the settings' [`TRACKED_KEY`], the reference's name) scan
//! for `*.adf` files at most `maxDepth` directory levels below each tracked directory (0: the
//! directory itself only; default [`DEFAULT_MAX_DEPTH`]), without following symlinked
//! directories or entering hidden ones, and load each file whose config says
//! `autostart: true` and whose current digest the owner accepted. A file already loaded is
//! skipped (one file is never loaded twice).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};

use adf_store::{AdfFile, StoreError};

use adf_runtime::home::RuntimeHome;

use crate::error::ServerError;
use crate::hub::Hub;
use crate::settings::Settings;

/// The settings key holding the owner's accepted reviews.
pub const REVIEWED_KEY: &str = "reviewedAgents";
/// The settings key listing tracked directories (the reference's `trackedDirectories`).
pub const TRACKED_KEY: &str = "trackedDirectories";
/// Directory levels scanned below a tracked directory when the request does not say.
pub const DEFAULT_MAX_DEPTH: usize = 3;
/// Deepest scan a request may ask for.
pub const MAX_DEPTH_LIMIT: usize = 32;
/// Most `.adf` files one autostart scan considers (a bound on a huge tree).
pub const MAX_SCANNED: usize = 10_000;

/// An agent file's review state.
#[derive(Debug, Clone)]
pub struct Review {
    /// The `id` in the file's config: the key the accepted digest is stored under.
    pub agent_id: String,
    /// The canonical path.
    pub file_path: String,
    /// The config's `autostart` is `true`: an autostart scan would load the file once reviewed.
    pub autostart: bool,
    /// What the owner reviews: name, handle, state, timers, tools, triggers, taps, serving,
    /// MCP servers, authorized files, code execution, and the digest.
    pub summary: Value,
    /// `sha256:<hex>` of the security-relevant part of the summary.
    pub digest: String,
    /// The owner's accepted digest for `agent_id` in the settings equals `digest`.
    pub reviewed: bool,
}

impl Review {
    /// The reference's `ReviewInfo`: `{agentId, filePath, reviewed, summary}`.
    pub fn to_json(&self) -> Value {
        json!({
            "agentId": self.agent_id,
            "filePath": self.file_path,
            "reviewed": self.reviewed,
            "summary": self.summary,
        })
    }
}

/// The reference's `AutostartReport`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AutostartReport {
    /// `.adf` files found under the tracked directories (at most [`MAX_SCANNED`]).
    pub scanned: usize,
    /// `{filePath, agentId, name}` of each agent the scan loaded.
    pub started: Vec<Value>,
    /// `{filePath, agentId, reason}` of each file left alone: already loaded, autostart off,
    /// or review required.
    pub skipped: Vec<Value>,
    /// `{filePath, error}` (plus `agentId` once known) of each unreadable directory or file and
    /// each load that failed.
    pub failed: Vec<Value>,
}

fn text(value: Option<&Value>) -> Value {
    value
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map_or(Value::Null, |s| json!(s))
}

fn pick(object: &Value, keys: &[&str]) -> Value {
    let mut out = Map::new();
    for key in keys {
        if let Some(value) = object.get(*key).filter(|v| !v.is_null()) {
            out.insert((*key).to_owned(), value.clone());
        }
    }
    Value::Object(out)
}

fn array<'v>(config: &'v Value, pointer: &str) -> &'v [Value] {
    config
        .pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
}

/// Objects with their keys sorted, so the digest does not depend on key order in the file.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What the agent in `file` can do, and the digest of its security-relevant part. Reads only.
pub fn summarize(file: &AdfFile) -> Result<(String, Value, String), StoreError> {
    let config = file.config()?;
    let Some(id) = config.get("id").and_then(Value::as_str).map(str::to_owned) else {
        return Err(StoreError::Malformed("config has no string id".into()));
    };
    let enabled_tools: Vec<&Value> = array(&config, "/tools")
        .iter()
        .filter(|t| t.get("enabled").and_then(Value::as_bool) == Some(true))
        .collect();
    let tool_names = |restricted_only: bool| -> Vec<Value> {
        enabled_tools
            .iter()
            .filter(|t| {
                !restricted_only || t.get("restricted").and_then(Value::as_bool) == Some(true)
            })
            .filter_map(|t| t.get("name").cloned())
            .collect()
    };
    let triggers = trigger_targets(&config);
    let taps = tap_summaries(&config);
    let serving = serving_summary(&config);
    let mcp = mcp_servers(&config);
    let authorized = authorized_files(file)?;
    let timers = timer_summaries(file)?;
    let autostart = config.get("autostart").and_then(Value::as_bool) == Some(true);
    let gated = json!({
        "id": id,
        "autostart": autostart,
        "enabledTools": tool_names(false),
        "restrictedTools": tool_names(true),
        "triggers": triggers,
        "umbilicalTaps": taps,
        "authorizedFiles": authorized,
        "serving": serving,
        "mcpServers": mcp,
        "codeExecution": config.get("code_execution").cloned().unwrap_or(Value::Null),
    });
    let digest = format!(
        "sha256:{}",
        sha256_hex(canonical(&gated).to_string().as_bytes())
    );
    let mut summary = json!({
        "name": text(config.get("name")),
        "handle": text(config.get("handle")),
        "description": text(config.get("description")),
        "state": text(config.get("state")),
        "timers": timers,
        // Declared but not run by this runtime (outside the digest: it follows from the
        // config the digest already covers and from this runtime's version).
        "notRunYet": adf_store::unsupported::unsupported_sections(&config),
        // MCP tools whose definition is new or changed since the owner reviewed it (outside
        // the digest: a changed tool is disabled, which the digest's tool lists show).
        "mcpToolsToReview": adf_mcp::declare::pending_reviews(&config)
            .into_iter()
            .map(|p| json!({ "name": p.name, "status": p.status }))
            .collect::<Vec<_>>(),
    });
    if let (Value::Object(out), Value::Object(gated)) = (&mut summary, gated) {
        out.extend(gated);
        out.insert("digest".into(), json!(digest));
    }
    Ok((id, summary, digest))
}

/// The enabled targets of the enabled triggers, each with its event.
fn trigger_targets(config: &Value) -> Vec<Value> {
    let mut triggers = Vec::new();
    if let Some(kinds) = config.get("triggers").and_then(Value::as_object) {
        for (kind, spec) in kinds {
            if spec.get("enabled").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            for target in spec
                .get("targets")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice)
            {
                if target.get("enabled").and_then(Value::as_bool) == Some(false) {
                    continue;
                }
                let mut entry = pick(target, &["scope", "lambda", "command", "loop", "warm"]);
                entry["event"] = json!(kind);
                triggers.push(entry);
            }
        }
    }
    triggers
}

/// Each umbilical tap: name, lambda and filter.
fn tap_summaries(config: &Value) -> Vec<Value> {
    let taps: Vec<Value> = array(config, "/umbilical_taps")
        .iter()
        .map(|tap| {
            json!({
                "name": text(tap.get("name")),
                "lambda": text(tap.get("lambda")),
                "eventTypes": tap.pointer("/filter/event_types").cloned().unwrap_or_else(|| json!(["*"])),
                "allowWildcard": tap.pointer("/filter/allow_wildcard").cloned().unwrap_or(json!(false)),
            })
        })
        .collect();
    taps
}

/// The serving routes, and whether public and shared serving are on.
fn serving_summary(config: &Value) -> Value {
    let routes: Vec<Value> = array(config, "/serving/api")
        .iter()
        .map(|route| pick(route, &["method", "path", "lambda", "warm", "middleware"]))
        .collect();
    let serving = json!({
        "api": routes,
        "public": config.pointer("/serving/public/enabled").and_then(Value::as_bool).unwrap_or(false),
        "shared": if config.pointer("/serving/shared/enabled").and_then(Value::as_bool) == Some(true) {
            config.pointer("/serving/shared/patterns").cloned().unwrap_or_else(|| json!([]))
        } else {
            json!([])
        },
    });
    serving
}

/// Server names, how they run and what they may reach; env values are never copied.
fn mcp_servers(config: &Value) -> Vec<Value> {
    let mcp: Vec<Value> = array(config, "/mcp/servers")
        .iter()
        .map(|server| {
            pick(
                server,
                &[
                    "name",
                    "id",
                    "type",
                    "transport",
                    "command",
                    "args",
                    "url",
                    "restricted",
                    "env_keys",
                ],
            )
        })
        .collect();
    mcp
}

/// Each timer: schedule, scope, lambda and next wake (shown, outside the digest).
fn timer_summaries(file: &AdfFile) -> Result<Vec<Value>, StoreError> {
    let timers: Vec<Value> = file
        .timers()?
        .iter()
        .map(|t| {
            json!({
                "id": t.id,
                "schedule": t.schedule,
                "scope": t.scope,
                "lambda": t.lambda,
                "nextWakeAt": t.next_wake_at,
            })
        })
        .collect();
    Ok(timers)
}

/// `[{path, sha256, size}]` of every authorized file, in path order.
fn authorized_files(file: &AdfFile) -> Result<Vec<Value>, StoreError> {
    let mut files = Vec::new();
    file.for_each_authorized_file(|path, content, size| {
        files.push(json!({ "path": path, "sha256": sha256_hex(content), "size": size }));
    })?;
    Ok(files)
}

async fn canonicalize(path: &Path) -> Result<PathBuf, ServerError> {
    match tokio::fs::canonicalize(path).await {
        Ok(p) => Ok(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(ServerError::NoSuchFile(path.display().to_string()))
        }
        Err(e) => Err(e.into()),
    }
}

/// The review state of the agent file at `path` (read-only).
pub(crate) async fn review(hub: &Arc<Hub>, path: &Path) -> Result<Review, ServerError> {
    let canonical = canonicalize(path).await?;
    let loaded = hub.agents().into_iter().find(|a| a.path == canonical);
    let (agent_id, summary, digest) = match loaded {
        Some(agent) => agent.job(|file| summarize(file)).await?,
        None => {
            let opened = canonical.clone();
            tokio::task::spawn_blocking(move || {
                let file = AdfFile::inspect(&opened)?;
                summarize(&file)
            })
            .await
            .map_err(|e| ServerError::Io(std::io::Error::other(e)))??
        }
    };
    let reviewed = {
        let settings = Settings::in_home(hub.home()).read()?;
        settings
            .get(REVIEWED_KEY)
            .and_then(|r| r.get(&agent_id))
            .and_then(|r| r.get("digest"))
            .and_then(Value::as_str)
            == Some(digest.as_str())
    };
    Ok(Review {
        autostart: summary.get("autostart").and_then(Value::as_bool) == Some(true),
        agent_id,
        file_path: canonical.display().to_string(),
        summary,
        digest,
        reviewed,
    })
}

/// Records that the owner accepted what the file at `path` can do now.
pub(crate) async fn accept_review(hub: &Arc<Hub>, path: &Path) -> Result<Review, ServerError> {
    accept_mcp_definitions(hub, path).await?;
    let mut review = review(hub, path).await?;
    let _guard = hub.settings_lock().lock().await;
    let record = json!({
        "digest": review.digest,
        "filePath": review.file_path,
        "reviewedAt": adf_store::time::now_ms(),
    });
    let id = review.agent_id.clone();
    Settings::in_home(hub.home()).update(move |settings| {
        let reviewed = settings
            .entry(REVIEWED_KEY)
            .or_insert_with(|| Value::Object(Map::new()));
        if !reviewed.is_object() {
            *reviewed = Value::Object(Map::new());
        }
        if let Some(map) = reviewed.as_object_mut() {
            map.insert(id, record);
        }
    })?;
    review.reviewed = true;
    Ok(review)
}

/// Accepting a review accepts the MCP tool definitions it lists as new or changed: their
/// declarations record the current definition's hash (`mcp_tool_hash`) as the owner's, one
/// owner write; a file with none pending is not touched.
async fn accept_mcp_definitions(hub: &Arc<Hub>, path: &Path) -> Result<(), ServerError> {
    let pending = review(hub, path).await?.summary["mcpToolsToReview"]
        .as_array()
        .is_some_and(|tools| !tools.is_empty());
    if !pending {
        return Ok(());
    }
    let canonical = canonicalize(path).await?;
    let accept = |file: &mut AdfFile| -> Result<(), adf_store::StoreError> {
        let mut config = file.config()?;
        if adf_mcp::declare::accept_reviews(&mut config).is_empty() {
            return Ok(());
        }
        file.config_replace(adf_store::Caller::Owner, config)
    };
    match hub.agents().into_iter().find(|a| a.path == canonical) {
        Some(agent) => agent.job(accept).await?,
        None => tokio::task::spawn_blocking(move || {
            let mut file = AdfFile::open(&canonical)?;
            let outcome = accept(&mut file);
            file.close()?;
            outcome
        })
        .await
        .map_err(|e| ServerError::Io(std::io::Error::other(e)))??,
    }
    Ok(())
}

/// `Ok` when the owner accepted the file's current digest, else
/// [`ServerError::ReviewRequired`] (403 `AGENT_REVIEW_REQUIRED`).
pub(crate) async fn require_reviewed(hub: &Arc<Hub>, path: &Path) -> Result<Review, ServerError> {
    let review = review(hub, path).await?;
    if review.reviewed {
        Ok(review)
    } else {
        Err(ServerError::ReviewRequired {
            agent_id: review.agent_id,
            file_path: review.file_path,
        })
    }
}

/// The tracked directories listed in the settings (`trackedDirectories`).
pub(crate) fn tracked_directories(home: &RuntimeHome) -> Vec<PathBuf> {
    Settings::in_home(home)
        .read()
        .ok()
        .and_then(|s| s.get(TRACKED_KEY).cloned())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_str)
        .map(PathBuf::from)
        .collect()
}

/// Loads the agent `key` (config id, then handle, then name, as `{id}` lookups rank
/// them) from the first file in the settings' tracked directories that declares it:
/// `POST /agents/{id}/start` of an agent that is neither loaded nor stopped in this
/// process. An explicit start by the owner, so not gated by review (like a load without
/// `requireReview`); files that cannot be read are passed over.
pub(crate) async fn find_in_tracked(
    home: &RuntimeHome,
    key: &str,
) -> Result<Option<PathBuf>, ServerError> {
    let roots = tracked_directories(home);
    let wanted = key.to_owned();
    let found = tokio::task::spawn_blocking(move || {
        let (candidates, _) = scan(&roots, DEFAULT_MAX_DEPTH);
        let mut best: Option<(u8, PathBuf)> = None;
        for path in candidates {
            let Ok(config) = AdfFile::inspect(&path).and_then(|file| file.config()) else {
                continue;
            };
            let field = |name: &str| config.get(name).and_then(Value::as_str);
            let rank = if field("id") == Some(wanted.as_str()) {
                0
            } else if field("handle") == Some(wanted.as_str()) {
                1
            } else if field("name") == Some(wanted.as_str()) {
                2
            } else {
                continue;
            };
            if best.as_ref().is_none_or(|(r, _)| rank < *r) {
                best = Some((rank, path));
            }
        }
        best.map(|(_, path)| path)
    })
    .await
    .map_err(|e| ServerError::Io(std::io::Error::other(e)))?;
    Ok(found)
}

/// Scans `dirs` and loads every reviewed `autostart: true` agent found there; emits
/// `daemon.autostart.report{report}`.
pub(crate) async fn autostart(
    hub: &Arc<Hub>,
    dirs: &[PathBuf],
    max_depth: usize,
) -> AutostartReport {
    let mut report = AutostartReport::default();
    let roots = dirs.to_vec();
    let depth = max_depth.min(MAX_DEPTH_LIMIT);
    let scan = tokio::task::spawn_blocking(move || scan(&roots, depth)).await;
    let (candidates, unreadable) = match scan {
        Ok(found) => found,
        Err(error) => (Vec::new(), vec![(PathBuf::new(), error.to_string())]),
    };
    for (dir, error) in unreadable {
        report
            .failed
            .push(json!({ "filePath": dir.display().to_string(), "error": error }));
    }
    report.scanned = candidates.len();
    let mut seen = HashSet::new();
    for path in candidates {
        let shown = path.display().to_string();
        let canonical = match canonicalize(&path).await {
            Ok(p) => p,
            Err(error) => {
                report
                    .failed
                    .push(json!({ "filePath": shown, "error": error.to_string() }));
                continue;
            }
        };
        if !seen.insert(canonical.clone()) {
            continue;
        }
        if let Some(agent) = hub.agents().into_iter().find(|a| a.path == canonical) {
            report.skipped.push(json!({
                "filePath": agent.file_path(), "agentId": agent.id, "reason": "already loaded",
            }));
            continue;
        }
        let review = match review(hub, &canonical).await {
            Ok(review) => review,
            Err(error) => {
                report
                    .failed
                    .push(json!({ "filePath": shown, "error": error.to_string() }));
                continue;
            }
        };
        let skip = if !review.autostart {
            Some("autostart is off")
        } else if !review.reviewed {
            Some("review required")
        } else {
            None
        };
        if let Some(reason) = skip {
            report.skipped.push(json!({
                "filePath": review.file_path, "agentId": review.agent_id, "reason": reason,
            }));
            continue;
        }
        match hub.load_agent(canonical.clone()).await {
            Ok(loaded) => report.started.push(json!({
                "filePath": loaded.agent.file_path(),
                "agentId": loaded.agent.id,
                "name": loaded.agent.info().name,
            })),
            Err(error) => report.failed.push(json!({
                "filePath": review.file_path, "agentId": review.agent_id, "error": error.to_string(),
            })),
        }
    }
    hub.emit_daemon(
        "daemon.autostart.report",
        json!({ "report": {
            "scanned": report.scanned,
            "started": report.started.len(),
            "skipped": report.skipped.len(),
            "failed": report.failed.len(),
        } }),
    );
    report
}

/// The `*.adf` files under `roots` (breadth first, sorted per directory), and the roots or
/// directories that could not be read.
fn scan(roots: &[PathBuf], max_depth: usize) -> (Vec<PathBuf>, Vec<(PathBuf, String)>) {
    let mut found = Vec::new();
    let mut failed = Vec::new();
    for root in roots {
        let mut queue = std::collections::VecDeque::from([(root.clone(), 0usize)]);
        while let Some((dir, depth)) = queue.pop_front() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(error) => {
                    failed.push((dir, error.to_string()));
                    continue;
                }
            };
            let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
            entries.sort_by_key(std::fs::DirEntry::file_name);
            for entry in entries {
                if found.len() >= MAX_SCANNED {
                    return (found, failed);
                }
                let name = entry.file_name();
                let hidden = name.to_string_lossy().starts_with('.');
                // `file_type` does not follow symlinks: a symlinked directory is never entered
                // (no cycles); a symlink to a file is loaded through its canonical path.
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                let path = entry.path();
                if kind.is_dir() {
                    if !hidden && depth < max_depth {
                        queue.push_back((path, depth + 1));
                    }
                } else if path.extension().is_some_and(|e| e == "adf") && !hidden {
                    found.push(path);
                }
            }
        }
    }
    (found, failed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_ignores_key_order() {
        let a = json!({ "b": 1, "a": { "y": [1, { "q": 1, "p": 2 }], "x": null } });
        let b = json!({ "a": { "x": null, "y": [1, { "p": 2, "q": 1 }] }, "b": 1 });
        assert_eq!(canonical(&a).to_string(), canonical(&b).to_string());
        assert_ne!(
            canonical(&a).to_string(),
            canonical(&json!({ "a": 1, "b": 1 })).to_string()
        );
    }

    #[test]
    fn the_scan_respects_depth_and_skips_hidden_directories() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for sub in ["a/b/c", ".hidden"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        for file in [
            "top.adf",
            "a/one.adf",
            "a/b/two.adf",
            "a/b/c/three.adf",
            ".hidden/h.adf",
            "a/not.txt",
        ] {
            std::fs::write(root.join(file), b"x").unwrap();
        }
        let names = |depth| {
            let (found, failed) = scan(&[root.to_path_buf()], depth);
            assert!(failed.is_empty());
            found
                .iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(0), ["top.adf"]);
        assert_eq!(names(1), ["top.adf", "one.adf"]);
        assert_eq!(names(3), ["top.adf", "one.adf", "two.adf", "three.adf"]);
    }
}
