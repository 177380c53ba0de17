//! WAL checkpoints off the writer's path.
//!
//! SQLite's automatic checkpoint runs inside the commit that crosses the threshold: that
//! commit copies the whole WAL into the database and syncs it, so one turn in every few hundred
//! stalled for tens of milliseconds — and on a shared async runtime it stalled every agent on
//! that thread. Instead, each writer connection gets a WAL hook ([`WalWatch::attach`]) that,
//! once [`CHECKPOINT_PAGES`] pages of the WAL are not yet copied, hands the file to one
//! background thread per process. That thread checkpoints PASSIVE on a connection of its own,
//! which never blocks the writer: it copies what is committed and leaves the rest for next
//! time. A clean close waits for a checkpoint in flight, then truncates the WAL itself as
//! before.
//!
//! The checkpointer keeps its connection to a file until the file closes: opening one per
//! checkpoint, and `PRAGMA wal_checkpoint` (which parses the whole schema first), cost more
//! than the writer's own turns. It calls `sqlite3_wal_checkpoint_v2` directly.
//!
//! SQLite restarts the WAL from its first frame only when a write begins with every frame
//! already copied. A writer that commits while the background pass runs (an agent whose model
//! answers at once, a route under steady load) rarely sees that: a pass takes a `fsync` or two,
//! and the writer commits meanwhile. So passes repeat while the WAL grows — each copies what
//! was committed when it began, which keeps SQLite's WAL-index lookups short (a reader probes
//! only the frames after the last copied one) — and the WAL starts over whenever a pass
//! finishes with nothing left, as it does under any load that pauses. Only when the WAL
//! reaches [`WAL_BOUND_PAGES`] without such a pause does the writer's own commit copy the few
//! frames the last pass left (a handful of pages, then two `fsync`s), so the write after it
//! starts the WAL over; a pass in flight then is let finish first (the WAL may grow past the
//! bound meanwhile, never to twice it). That inline catch-up used to run after every pass; on
//! the serving lane each one held every queued request behind its `fsync`s (20–50 ms each on
//! this disk), and they set the requests' p99. So a writer whose writes can mostly wait (the
//! lane's log rows) defers the restart ([`WalWatch::defer_restart`]): at the bound its commit
//! asks for a pass, and while [`WalWatch::restart_pending`] it holds those writes, so the pass
//! copies everything and the next write starts the WAL over; it catches up itself only at
//! twice the bound.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use rusqlite::wal::CheckpointMode;
use rusqlite::{Connection, OpenFlags};

/// WAL pages not yet copied that make a commit ask for a background pass (SQLite's own
/// default threshold).
pub(crate) const CHECKPOINT_PAGES: i32 = 1000;

/// WAL pages at which the writer's commit copies what the passes left, so the WAL starts over
/// even under a load that never pauses (about 40 MB of WAL at 4 KiB pages). Under such a load
/// a restart always costs the writer a wait of two `fsync`s — SQLite starts the WAL over only
/// when a write begins with every frame copied — so the bound sets how often the writer waits.
/// Four times the bound (tried) made those waits rarer, but a WAL that keeps growing costs
/// more than one reused in place: ten agents' turns fell from 12,000–13,600 to 9,300–10,900 a
/// second (BENCHMARKS.md, "Issue 15 follow-up: where the lane waits").
pub(crate) const WAL_BOUND_PAGES: i32 = 10_000;

/// Connections the checkpointer keeps open at most; past that it closes one and reopens it
/// when that file needs a checkpoint again.
const KEPT_CONNECTIONS: usize = 64;

/// Where a file's checkpoint stands.
#[derive(Debug, Default)]
struct State {
    /// The checkpointer has a job of this file queued or running.
    in_flight: bool,
    /// The WAL frames the last background pass copied (0: none since the WAL last started
    /// over). A PASSIVE checkpoint copies the frames committed when it began.
    copied: i32,
    /// The WAL's frames after the last commit; fewer than before means it started over.
    pages: i32,
    /// Checkpoints the writer's own commits ran because the WAL reached its bound.
    inline_catch_ups: u64,
    /// The writer holds back writes it can delay while a pass runs at the bound (see
    /// [`WalWatch::defer_restart`]), so its commits ask for a pass instead of catching up.
    defers_restart: bool,
}

/// When a file's WAL is checkpointed (the module docs explain the two numbers).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Uncopied frames that ask for a background pass.
    pub(crate) pass_pages: i32,
    /// Frames at which the writer catches up itself (when no pass is in flight; at twice
    /// this it waits for the pass first).
    pub(crate) bound_pages: i32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            pass_pages: CHECKPOINT_PAGES,
            bound_pages: WAL_BOUND_PAGES,
        }
    }
}

/// One file's checkpoint state, shared by its writer connection's hook and the checkpointer.
#[derive(Debug)]
struct Shared {
    /// Tells this file's connection apart in the checkpointer (never reused in a process).
    id: u64,
    path: PathBuf,
    limits: Limits,
    state: Mutex<State>,
    finished: Condvar,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn finish(&self, copied: i32) {
        let mut state = self.state();
        state.in_flight = false;
        state.copied = copied;
        self.finished.notify_all();
    }

    /// Blocks until no job of this file is queued or running; returns the state, locked.
    fn idle(&self) -> MutexGuard<'_, State> {
        let mut state = self.state();
        while state.in_flight {
            state = self.finished.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state
    }
}

/// What the checkpointer thread does for a file.
enum Job {
    /// A PASSIVE checkpoint.
    Checkpoint(Arc<Shared>),
    /// Close the checkpointer's connection to the file (it is closing).
    Forget(Arc<Shared>),
}

/// The WAL hook of one writer connection (see the module docs).
#[derive(Debug)]
pub(crate) struct WalWatch {
    shared: Arc<Shared>,
}

impl WalWatch {
    /// Installs the hook on `conn`, the writer connection of `path`. Without a checkpointer
    /// thread (it could not be started) nothing is installed and SQLite's automatic
    /// checkpoint stays in charge.
    pub(crate) fn attach(conn: &mut Connection, path: &Path) -> Option<WalWatch> {
        Self::attach_with(conn, path, Limits::default())
    }

    /// [`attach`](Self::attach) with other limits (tests use small ones).
    pub(crate) fn attach_with(
        conn: &mut Connection,
        path: &Path,
        limits: Limits,
    ) -> Option<WalWatch> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let sender = checkpointer()?.clone();
        let shared = Arc::new(Shared {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            limits,
            state: Mutex::new(State::default()),
            finished: Condvar::new(),
        });
        let hooked = shared.clone();
        conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
            let mut state = hooked.state();
            if pages < state.pages {
                state.copied = 0;
            }
            state.pages = pages;
            let hard_bound = limits.bound_pages.saturating_mul(2);
            // Without a pass since the WAL started over there is nothing to catch up with: a
            // pass is asked for first (below), unless the WAL is already at its hard bound.
            let catch_up = pages >= limits.bound_pages && (state.copied > 0 || pages >= hard_bound);
            if catch_up {
                if state.defers_restart && pages < hard_bound {
                    // A pass instead: the writer holds its delayable writes while it runs, so
                    // the pass copies everything and the next write starts the WAL over with
                    // no `fsync` on the writer's thread.
                    if !state.in_flight && sender.send(Job::Checkpoint(hooked.clone())).is_ok() {
                        state.in_flight = true;
                    }
                    return Ok(());
                }
                if state.in_flight {
                    // The pass may wait behind other files' passes on the one checkpointer
                    // thread: waiting for it would hold this writer's thread (and, on a shared
                    // runtime, every agent on it) for all of them. The first commit after it
                    // catches up instead; only a WAL twice its bound waits.
                    if pages < hard_bound {
                        return Ok(());
                    }
                    drop(state);
                    state = hooked.idle();
                }
                state.inline_catch_ups += 1;
                drop(state);
                // The commit is complete here (SQLite's own automatic checkpoint runs at this
                // point too); a failure only leaves the frames for the next commit.
                match wal.checkpoint_v2(CheckpointMode::PASSIVE) {
                    Ok((_, copied)) => hooked.state().copied = copied.max(0),
                    Err(error) => {
                        tracing::debug!(%error, "catching up the WAL checkpoint did not run");
                    }
                }
                return Ok(());
            }
            if !state.in_flight
                && pages - state.copied >= limits.pass_pages
                && sender.send(Job::Checkpoint(hooked.clone())).is_ok()
            {
                state.in_flight = true;
            }
            Ok(())
        }))
        .ok()?;
        Some(WalWatch { shared })
    }

    /// From now on this writer's commits at the bound ask for a background pass rather than
    /// catch up themselves (until twice the bound), and [`restart_pending`](Self::restart_pending)
    /// tells the writer when to hold back the writes it can delay. For a writer whose commits
    /// are mostly delayable (the serving lane's log rows): its catch-up `fsync`s held every
    /// queued request.
    pub(crate) fn defer_restart(&self) {
        self.shared.state().defers_restart = true;
    }

    /// Whether the WAL is at its bound with a pass running: a write now would keep the WAL
    /// from starting over after the pass, so a writer that can wait should.
    pub(crate) fn restart_pending(&self) -> bool {
        let state = self.shared.state();
        state.in_flight && state.pages >= self.shared.limits.bound_pages
    }

    /// Removes the hook from `conn`, waits until no checkpoint of this file is running and
    /// closes the checkpointer's connection to it, so the caller's own checkpoint and close
    /// leave no sidecar behind.
    pub(crate) fn detach(self, conn: &mut Connection) {
        if let Err(error) =
            conn.wal_hook(None::<fn(&mut rusqlite::hooks::Wal, i32) -> rusqlite::Result<()>>)
        {
            tracing::warn!(%error, "removing the WAL hook failed");
        }
        let mut state = self.shared.idle();
        let sent = checkpointer()
            .is_some_and(|sender| sender.send(Job::Forget(self.shared.clone())).is_ok());
        if sent {
            state.in_flight = true;
        }
        drop(state);
        drop(self.shared.idle());
    }
}

/// The process's checkpointer thread, started on first use.
fn checkpointer() -> Option<&'static Sender<Job>> {
    static SENDER: OnceLock<Option<Sender<Job>>> = OnceLock::new();
    SENDER
        .get_or_init(|| {
            let (sender, receiver) = channel::<Job>();
            std::thread::Builder::new()
                .name("adf-wal-checkpoint".into())
                .spawn(move || {
                    let mut connections = Connections::default();
                    for job in receiver {
                        match job {
                            Job::Checkpoint(file) => {
                                let copied = connections.checkpoint(&file);
                                file.finish(copied);
                            }
                            Job::Forget(file) => {
                                connections.open.remove(&file.id);
                                file.finish(0);
                            }
                        }
                    }
                })
                .ok()
                .map(|_| sender)
        })
        .as_ref()
}

/// The checkpointer's connections, by file.
#[derive(Default)]
struct Connections {
    open: HashMap<u64, Connection>,
}

impl Connections {
    /// One PASSIVE checkpoint of `file`; the frames it copied (0 when it could not run).
    fn checkpoint(&mut self, file: &Shared) -> i32 {
        let result = self.connection(file).and_then(|conn| {
            conn.wal_checkpoint_v2(Some(rusqlite::MAIN_DB), CheckpointMode::PASSIVE)
        });
        match result {
            Ok((_, copied)) => copied.max(0),
            Err(error) => {
                tracing::debug!(path = %file.path.display(), %error, "background WAL checkpoint did not run");
                self.open.remove(&file.id);
                0
            }
        }
    }

    fn connection(&mut self, file: &Shared) -> rusqlite::Result<&Connection> {
        if !self.open.contains_key(&file.id)
            && self.open.len() >= KEPT_CONNECTIONS
            && let Some(&evicted) = self.open.keys().next()
        {
            self.open.remove(&evicted);
        }
        Ok(match self.open.entry(file.id) {
            Entry::Occupied(kept) => kept.into_mut(),
            Entry::Vacant(slot) => {
                let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
                let conn = Connection::open_with_flags(&file.path, flags)?;
                // A checkpoint needs the connection's WAL open, which takes a first read; the
                // schema cookie is one page and no schema parse.
                conn.query_row("PRAGMA schema_version", [], |_| Ok(()))?;
                slot.insert(conn)
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn commit(conn: &Connection) {
        conn.execute("INSERT INTO t (x) VALUES (randomblob(3000))", [])
            .expect("insert");
    }

    /// The frames in the WAL after the writer's last commit, as its hook saw them.
    fn frames(watch: &WalWatch) -> i32 {
        watch.shared.state().pages
    }

    fn wal_file(path: &Path) -> Connection {
        let conn = Connection::open(path).expect("open");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        // As the store's connections run: no sync at commit, only at checkpoints.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .expect("synchronous");
        conn.execute("CREATE TABLE t (x BLOB)", []).expect("table");
        conn
    }

    /// A new WAL file in a temporary directory, its writer watched with `limits`.
    fn watched_wal_file(limits: Limits) -> (tempfile::TempDir, PathBuf, Connection, WalWatch) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("wal.db");
        let mut conn = wal_file(&path);
        let watch = WalWatch::attach_with(&mut conn, &path, limits).expect("checkpointer thread");
        (dir, path, conn, watch)
    }

    fn close(mut conn: Connection, watch: WalWatch, path: &Path) {
        watch.detach(&mut conn);
        conn.close().map_err(|(_, e)| e).expect("close");
        assert!(
            !crate::file::sidecar(path, "-wal").exists(),
            "the checkpointer's connection was closed before the writer's, so SQLite removed the WAL"
        );
    }

    #[test]
    fn a_writer_that_never_pauses_keeps_its_wal_within_the_bound_and_starts_it_over() {
        let limits = Limits {
            pass_pages: 20,
            bound_pages: 200,
        };
        let hard_bound = 2 * limits.bound_pages;
        let (_dir, path, conn, watch) = watched_wal_file(limits);
        let (mut largest, mut restarts, mut before) = (0, 0, 0);
        // Commits back to back, as a writer whose model answers at once does. How far the WAL
        // grows between restarts depends on when the background passes get the CPU, so what is
        // asserted is what the writer itself enforces: a commit that leaves the WAL at twice
        // its bound waits for the pass in flight and catches up on its own thread, so the next
        // commit always starts the WAL over — past the hard bound the WAL never grows by more
        // than the one commit that crossed it.
        for _ in 0..1_200 {
            commit(&conn);
            let now = frames(&watch);
            largest = largest.max(now);
            if now < before {
                restarts += 1;
            }
            assert!(
                before < hard_bound || now < before,
                "the WAL held {before} frames (its hard bound is {hard_bound}) and the next commit grew it to {now} instead of starting it over"
            );
            before = now;
        }
        assert!(
            restarts > 0,
            "the WAL never started over (largest: {largest} frames)"
        );
        close(conn, watch, &path);
    }

    #[test]
    fn below_its_bound_the_writer_never_checkpoints_and_a_pause_starts_the_wal_over() {
        let limits = Limits {
            pass_pages: 20,
            bound_pages: i32::MAX,
        };
        let (_dir, path, conn, watch) = watched_wal_file(limits);
        for _ in 0..100 {
            commit(&conn);
        }
        // A pause: the pass asked for after the last commit copies everything, so the next
        // write begins with every frame copied and SQLite starts the WAL over.
        drop(watch.shared.idle());
        while !watch.shared.state().in_flight {
            commit(&conn);
        }
        drop(watch.shared.idle());
        let grown = frames(&watch);
        assert!(grown >= limits.pass_pages);
        commit(&conn);
        assert!(
            frames(&watch) < grown,
            "the WAL did not start over after a pause: {} frames after {grown}",
            frames(&watch)
        );
        assert_eq!(
            watch.shared.state().inline_catch_ups,
            0,
            "a commit below the bound checkpointed on the writer's thread"
        );
        close(conn, watch, &path);
    }

    /// A writer that defers the restart (the serving lane) never catches up on its own thread
    /// below twice the bound: its commit at the bound asks for a pass and says so
    /// (`restart_pending`); holding its writes until the pass ends lets the next one start
    /// the WAL over.
    #[test]
    fn a_deferring_writer_leaves_the_catch_up_to_a_pass_and_a_pause_starts_the_wal_over() {
        let limits = Limits {
            pass_pages: 20,
            bound_pages: 200,
        };
        let (_dir, path, conn, watch) = watched_wal_file(limits);
        watch.defer_restart();
        let mut commits = 0;
        while !watch.restart_pending() {
            commit(&conn);
            commits += 1;
            assert!(
                frames(&watch) < 2 * limits.bound_pages,
                "the WAL reached twice its bound without a pass pending"
            );
            assert!(commits < 100_000, "the WAL never reached its bound");
        }
        assert!(frames(&watch) >= limits.bound_pages);
        // The writer waits for the pass; a pass that began before the writer's last commit
        // leaves that commit's frames, and the next commit asks for another.
        let mut restarted = false;
        for _ in 0..4 {
            drop(watch.shared.idle());
            assert!(!watch.restart_pending());
            let grown = frames(&watch);
            commit(&conn);
            if frames(&watch) < grown {
                restarted = true;
                break;
            }
        }
        assert!(
            restarted,
            "the WAL did not start over after the writer waited"
        );
        assert_eq!(
            watch.shared.state().inline_catch_ups,
            0,
            "the deferring writer checkpointed on its own thread"
        );
        close(conn, watch, &path);
    }
}
