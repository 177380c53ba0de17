//! WAL checkpoints off the writer's path.
//!
//! SQLite's automatic checkpoint runs inside the commit that crosses the threshold: that
//! commit copies the whole WAL into the database and syncs it, so one turn in every few hundred
//! stalled for tens of milliseconds — and on a shared async runtime it stalled every agent on
//! that thread. Instead, each writer connection gets a WAL hook ([`WalWatch::attach`]) that,
//! once the WAL holds [`CHECKPOINT_PAGES`] pages, hands the file to one background thread per
//! process. That thread checkpoints PASSIVE on a connection of its own, which never blocks the
//! writer: it copies what is committed and leaves the rest for next time. A clean close waits
//! for a checkpoint in flight, then truncates the WAL itself as before.
//!
//! The checkpointer keeps its connection to a file until the file closes: opening one per
//! checkpoint, and `PRAGMA wal_checkpoint` (which parses the whole schema first), cost more
//! than the writer's own turns. It calls `sqlite3_wal_checkpoint_v2` directly.
//!
//! SQLite restarts the WAL from its first frame only when a write begins with every frame
//! already copied. A writer that commits while the background pass runs (an agent whose model
//! answers at once) would never see that: its WAL would grow without bound, and every commit
//! would pay for it, since SQLite's WAL index probes linearly through all the frames of the
//! same pages. So when a background pass leaves frames behind, the writer's next commit copies
//! those few itself (a handful of pages; the bulk is already in the database), and the write
//! after it starts the WAL over. With a model that takes any time to answer, the background
//! pass finishes between commits and the writer never has to.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use rusqlite::wal::CheckpointMode;
use rusqlite::{Connection, OpenFlags};

/// WAL pages that make a commit ask for a checkpoint (SQLite's own default threshold).
pub(crate) const CHECKPOINT_PAGES: i32 = 1000;

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
}

/// One file's checkpoint state, shared by its writer connection's hook and the checkpointer.
#[derive(Debug)]
struct Shared {
    /// Tells this file's connection apart in the checkpointer (never reused in a process).
    id: u64,
    path: PathBuf,
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
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let sender = checkpointer()?.clone();
        let shared = Arc::new(Shared {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
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
            if pages < CHECKPOINT_PAGES || state.in_flight {
                return Ok(());
            }
            // What a finished pass left is what was committed while it ran: the pages written
            // since, which the pass did not copy, are few whatever the number of frames.
            if state.copied > 0 && pages > state.copied {
                state.copied = 0;
                drop(state);
                // The commit is complete here (SQLite's own automatic checkpoint runs at this
                // point too); a failure only leaves the frames for the next pass.
                if let Err(error) = wal.checkpoint_v2(CheckpointMode::PASSIVE) {
                    tracing::debug!(%error, "catching up the WAL checkpoint did not run");
                }
                return Ok(());
            }
            if sender.send(Job::Checkpoint(hooked.clone())).is_ok() {
                state.in_flight = true;
            }
            Ok(())
        }))
        .ok()?;
        Some(WalWatch { shared })
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

    #[test]
    fn a_writer_that_never_pauses_still_starts_its_wal_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("wal.db");
        let mut conn = Connection::open(&path).expect("open");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        conn.execute("CREATE TABLE t (x BLOB)", []).expect("table");
        let watch = WalWatch::attach(&mut conn, &path).expect("checkpointer thread");
        // Commit until the hook hands the file to the checkpointer, and keep committing
        // while its pass may still run, as a writer whose model answers at once does.
        while !watch.shared.state().in_flight {
            commit(&conn);
        }
        commit(&conn);
        drop(watch.shared.idle());
        assert!(frames(&watch) >= CHECKPOINT_PAGES);
        // The first commit after the pass copies what it left; the next starts the WAL over.
        commit(&conn);
        commit(&conn);
        assert!(
            frames(&watch) < 10,
            "the WAL kept growing: {} frames",
            frames(&watch)
        );
        watch.detach(&mut conn);
        conn.close().map_err(|(_, e)| e).expect("close");
        assert!(
            !crate::file::sidecar(&path, "-wal").exists(),
            "the checkpointer's connection was closed before the writer's, so SQLite removed the WAL"
        );
    }
}
