//! Idle-memory measurement: resident set size from `/proc/self/statm`, and the idle bench
//! behind `adf bench idle` (N agents loaded, each with a timer set, nothing running).
//!
//! An idle agent's file is closed and its worker stopped: [`Daemon::load`] releases each agent
//! once its load-time jobs are done, later jobs reopen it and the idle period
//! ([`crate::daemon::AGENT_IDLE_RELEASE`]) releases it again. The bench measures with every
//! agent released, making sure of it with [`release_idle_agents`] rather than by waiting.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use adf_store::timers::NewTimer;
use adf_store::{AdfFile, CreateOptions};

use crate::daemon::Daemon;
use crate::error::ServerError;

/// Page size of `/proc/self/statm` units. 4 KiB on every Linux target this runs on
/// (x86_64, aarch64 with 4K pages); reading it from sysconf would need `unsafe` FFI.
const PAGE: u64 = 4096;

/// Resident bytes of this process, or `None` where `/proc` is absent.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(resident * PAGE)
}

/// Threads of this process, from `/proc/self/status`.
pub fn thread_count() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// What the idle bench measured.
#[derive(Debug, Clone, Serialize)]
pub struct IdleReport {
    /// How many agent files were loaded.
    pub agents: usize,
    /// RSS before loading (files already created and closed).
    pub baseline_bytes: u64,
    /// RSS with every agent loaded and idle, its file released (closed, worker stopped).
    pub loaded_bytes: u64,
    /// `(loaded_bytes - baseline_bytes) / agents`: the cost of an idle agent.
    pub per_agent_bytes: u64,
    /// Threads with every agent idle and released.
    pub threads: u64,
    /// Wall time to load every agent, one after another, in seconds.
    pub load_seconds: f64,
    /// Agents released when measured: all of them unless one still had work queued.
    pub released: usize,
}

/// Closes the file of every loaded agent that has no job queued, now rather than after the
/// daemon's idle period; returns how many were released. Each agent's next job reopens it.
pub async fn release_idle_agents(daemon: &Daemon) -> Result<usize, ServerError> {
    let stores: Vec<_> = daemon
        .agents()
        .iter()
        .map(|agent| agent.store().clone())
        .collect();
    // One blocking thread for all of them: a thread per agent would itself cost memory.
    tokio::task::spawn_blocking(move || {
        let mut released = 0;
        for store in stores {
            if store.release_if_idle()? {
                released += 1;
            }
        }
        Ok(released)
    })
    .await
    .map_err(|e| ServerError::Io(std::io::Error::other(e)))?
}

/// Creates `count` agents in `dir`, each with an interval timer, closed; returns their paths.
pub fn create_agents(dir: &Path, count: usize) -> Result<Vec<std::path::PathBuf>, ServerError> {
    let mut paths = Vec::with_capacity(count);
    for n in 0..count {
        let path = dir.join(format!("idle-{n:05}.adf"));
        let mut file = AdfFile::create(
            &path,
            &CreateOptions {
                name: Some(format!("idle {n}")),
                ..CreateOptions::default()
            },
        )?;
        let schedule = json!({ "mode": "interval", "every_ms": 3_600_000 });
        file.timer_insert(&NewTimer {
            schedule: &schedule,
            next_wake_at: adf_store::time::now_ms() + 3_600_000,
            payload: Some("hourly"),
            scope: &json!(["agent"]),
            lambda: None,
            warm: false,
            locked: false,
            r#loop: None,
        })?;
        file.close()?;
        paths.push(path);
    }
    Ok(paths)
}

/// Loads every path into `daemon` and measures resident memory before and after, with every
/// agent idle and released.
pub async fn measure_idle(
    daemon: &Daemon,
    paths: &[std::path::PathBuf],
) -> Result<IdleReport, ServerError> {
    // Let allocator caches from file creation settle before the baseline.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let baseline = resident_bytes().unwrap_or(0);
    let started = Instant::now();
    for path in paths {
        daemon.load(path).await?;
    }
    let load_seconds = started.elapsed().as_secs_f64();
    // Loading already released each agent once its load-time jobs were done; this catches
    // any that still had work queued then (an `on_startup` delivery, say).
    let released = release_idle_agents(daemon).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loaded = resident_bytes().unwrap_or(0);
    let agents = paths.len().max(1) as u64;
    Ok(IdleReport {
        agents: paths.len(),
        baseline_bytes: baseline,
        loaded_bytes: loaded,
        per_agent_bytes: loaded.saturating_sub(baseline) / agents,
        threads: thread_count().unwrap_or(0),
        load_seconds,
        released,
    })
}
