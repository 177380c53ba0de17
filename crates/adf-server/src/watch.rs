//! Other writers of a loaded agent's file: `adf put`, `adf config set`, `adf tool … sys_set_timer`,
//! `adf authorize` — any other process, or another connection of this one — writing the file
//! the daemon holds. The daemon notices within about a tick ([`WATCH_TICK`]) and re-reads what
//! it caches: the config (the dispatch's trigger targets, the taps, the list fields), the timers
//! (the scheduler's wake) and the rows of the trigger sources; files written (deleted) outside
//! become `file.written` (`file.deleted`) events and `on_file_change` triggers of
//! [`Producer::External`] with operation `write` (`delete`).
//!
//! Detection is adf-store's (`adf_store::other_writers`): the agent's [`StoreHandle`] is opened
//! watched, so its worker compares `PRAGMA data_version` between jobs (another connection's
//! commit moves it, the daemon's own commits never do) and, while the file is released, the `stat` of
//! the file and its `-wal` taken right after its own close. This module adds the tick: one task
//! for all agents that every [`WATCH_TICK`] asks each handle (a lock, no job) and `stat`s its two
//! files, and runs one short job on an agent only when its count of other writers' changes moved
//! or its files' stamp did. An idle agent costs two `stat`s per tick, 24 bytes here and about
//! 150 bytes plus 32 and the path per file in its handle; with very many agents a pass grows
//! (two `stat`s each), so the tick stretches to twenty times the last pass and the watcher
//! never takes more than a twentieth of a core.
//!
//! The in-process guest connections (the serving lane's route requests, the mesh's ingress) are
//! other connections too: their commits count as other writers' changes (their rows were
//! already swept; their files become external `on_file_change` events).
//!
//! [`StoreHandle`]: adf_store::StoreHandle

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use adf_runtime::triggers::{Producer, TriggerEvent};
use adf_store::other_writers::DiskStamp;

use crate::dispatch::{dispatch_all, sweep};
use crate::hub::Hub;
use crate::registry::Agent;

mod state;

pub(crate) use state::{AgentWatch, Watcher};
use state::{config_hash, network_hash};

/// How often the watcher looks at every loaded agent's file (at least; see the module docs).
pub(crate) const WATCH_TICK: Duration = Duration::from_millis(500);

/// The watcher's pass takes at most this share of its tick: the tick is stretched to this many
/// times the last pass.
const PASS_SHARE: u32 = 20;

/// Starts the watcher task once per daemon (the first agent load does it).
pub(crate) fn ensure_started(hub: &Arc<Hub>) {
    if hub.watcher().started.swap(true, Ordering::SeqCst) {
        return;
    }
    let hub = Arc::clone(hub);
    tokio::spawn(async move { watch_loop(&hub).await });
}

/// Notices what another connection just wrote (a guest connection's route request or mesh
/// ingress, another process): the rows it added to the agent's tasks, logs, inbox and outbox,
/// and the files it wrote (`on_file_change` of an outside writer, once: see
/// `watch::take_outside_writes`), and dispatches them: one short job.
pub(crate) async fn notice_new_rows(hub: &Arc<Hub>, agent: &Arc<Agent>) {
    let observer = Arc::clone(agent);
    let found = agent
        .job(move |file| {
            let written = crate::watch::take_outside_writes(&observer, file);
            Ok((written, sweep(file, &observer, &Producer::External)))
        })
        .await;
    match found {
        Ok((written, events)) => {
            crate::watch::dispatch_outside_writes(hub, agent, written).await;
            dispatch_all(hub, agent, events).await;
        }
        Err(error) => tracing::warn!(agent = %agent.id, %error, "cannot read new rows"),
    }
}

async fn watch_loop(hub: &Arc<Hub>) {
    let mut shutdown = hub.shutdown_signal();
    let mut tick = WATCH_TICK;
    loop {
        tokio::select! {
            () = tokio::time::sleep(tick) => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
        let agents = hub.agents();
        let started = Instant::now();
        // `stat`s block: off the async threads.
        let due = tokio::task::spawn_blocking(move || {
            agents
                .into_iter()
                .filter(|agent| needs_look(agent))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        tick = WATCH_TICK.max(started.elapsed() * PASS_SHARE);
        for agent in due {
            if agent.watch().in_flight.swap(true, Ordering::SeqCst) {
                // The running re-read may have read the file before the change this look saw:
                // forget the stamp, so the next tick looks again rather than take it as seen.
                agent.watch().disk.store(0, Ordering::SeqCst);
                continue;
            }
            let hub = Arc::clone(hub);
            tokio::spawn(async move {
                reread(&hub, &agent).await;
                agent.watch().in_flight.store(false, Ordering::SeqCst);
            });
        }
    }
}

/// Whether `agent`'s file may have been written by someone else since the last look: its
/// handle counted a change the daemon has not re-read after, or its files' stamp moved (while
/// released: from the stamp its own close left; while open: since the last look, which a job
/// then settles through `data_version`). Each stamp is looked at once.
fn needs_look(agent: &Agent) -> bool {
    let Some(writers) = agent.store().other_writers() else {
        return false;
    };
    let watch = agent.watch();
    if writers.changes != watch.seen.load(Ordering::SeqCst) {
        return true;
    }
    let now = DiskStamp::of(&agent.path);
    let hash = now.digest();
    // Acted on once per stamp: a file that cannot be reopened (gone, unreadable) is not
    // retried every tick.
    let moved = watch.disk.swap(hash, Ordering::SeqCst) != hash;
    match writers.released {
        Some(released) if !writers.open => moved && now != released,
        _ => moved,
    }
}

/// What one re-read job found.
struct Reread {
    config: Value,
    handle_meta: Option<String>,
    did: Option<String>,
    wake: Option<crate::scheduler::WakeRead>,
    changed: crate::support::FileChanges,
    unreported: u64,
    events: Vec<TriggerEvent>,
}

/// One job on the agent's worker: takes what other writers did (the worker checked right
/// before, and the job checks again, in case it runs inside a long job) and, if anything, reads
/// the config, the next wake and the new rows; then the caches are dropped, the scheduler
/// re-armed and the events dispatched.
async fn reread(hub: &Arc<Hub>, agent: &Arc<Agent>) {
    let observer = Arc::clone(agent);
    let found = agent
        .job(move |file| {
            observer.store().notice_other_writers(file);
            let Some(writes) = observer.store().take_other_writes() else {
                return Ok(None);
            };
            let seen = observer.watch().seen.swap(writes.changes, Ordering::SeqCst);
            if seen == writes.changes && writes.written.is_empty() && writes.deleted.is_empty() {
                return Ok(None);
            }
            let config = file.config()?;
            let handle_meta = file.meta_get("adf_handle")?.map(|m| m.value);
            let did = adf_runtime::messaging::agent_did(file)?;
            let events = crate::dispatch::sweep(file, &observer, &Producer::External);
            Ok(Some(Reread {
                config,
                handle_meta,
                did,
                wake: crate::scheduler::wake_of(file),
                unreported: writes.unreported,
                changed: file_changes(writes),
                events,
            }))
        })
        .await;
    let found = match found {
        Ok(Some(found)) => found,
        Ok(None) => return,
        Err(error) => {
            tracing::warn!(agent = %agent.id, %error, "cannot re-read a file another writer changed");
            return;
        }
    };
    let hash = config_hash(&found.config);
    let config_changed = agent.watch().config.swap(hash, Ordering::SeqCst) != hash;
    if config_changed {
        agent.triggers().invalidate();
        let network = network_hash(&found.config);
        if agent.watch().network.load(Ordering::SeqCst) != network {
            // Declared connections and bindings follow the new declaration, as after a
            // config change through the API (in the background: a connect may take long).
            agent.watch().network_opened(&found.config);
            let hub = Arc::clone(hub);
            let agent = Arc::clone(agent);
            tokio::spawn(async move {
                crate::network::reconcile_configured_connections(&hub, &agent).await;
            });
        }
    }
    let fresh = crate::registry::info_from_config(&found.config, found.handle_meta);
    agent.update_info(|info| {
        info.name = fresh.name;
        info.handle = fresh.handle;
        info.autostart = fresh.autostart;
        info.did = found.did;
    });
    if let Some(wake) = found.wake {
        hub.timer_wakes().set(agent, wake);
    }
    let files = found.changed.len() as u64 + found.unreported;
    if config_changed || files > 0 {
        tracing::info!(
            agent = %agent.id,
            config_changed,
            files,
            "another writer changed the file; config, timers and triggers re-read"
        );
        let paths = |deleted: bool| -> Vec<&str> {
            found
                .changed
                .iter()
                .filter(|(_, size)| size.is_none() == deleted)
                .map(|(path, _)| path.as_str())
                .collect()
        };
        hub.emit(
            agent,
            "agent.changed_outside",
            "system:watch",
            json!({
                "config_changed": config_changed,
                "files": paths(false),
                "files_deleted": paths(true),
                "files_unnamed": found.unreported,
            }),
        )
        .await;
    }
    dispatch_outside_writes(hub, agent, found.changed).await;
    crate::dispatch::dispatch_all(hub, agent, found.events).await;
}

/// Inside a job of the agent: the files other connections wrote or deleted that no one has
/// reported yet (the worker checked right before the job). Taking them here leaves the change
/// count, so the watcher still re-reads the config and timers, but never reports these files
/// again: each outside write or delete is one `on_file_change`, whoever notices it first.
pub(crate) fn take_outside_writes(
    agent: &Agent,
    file: &adf_store::AdfFile,
) -> crate::support::FileChanges {
    agent.store().notice_other_writers(file);
    agent
        .store()
        .take_other_writes()
        .map(file_changes)
        .unwrap_or_default()
}

/// The files of `writes`, written and deleted, in path order.
fn file_changes(writes: adf_store::other_writers::OtherWrites) -> crate::support::FileChanges {
    let mut changes: crate::support::FileChanges = writes
        .written
        .into_iter()
        .map(|(path, size)| (path, Some(size)))
        .chain(writes.deleted.into_iter().map(|path| (path, None)))
        .collect();
    changes.sort();
    changes
}

/// Files written or deleted outside the daemon's own jobs become `file.written` /
/// `file.deleted` events and `on_file_change` triggers of [`Producer::External`].
pub(crate) async fn dispatch_outside_writes(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    changes: crate::support::FileChanges,
) {
    crate::dispatch::dispatch_file_changes(hub, agent, changes, "external", &Producer::External)
        .await;
}
