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

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use rusqlite::{Connection, OpenFlags};

/// WAL pages that make a commit ask for a checkpoint (SQLite's own default threshold).
pub(crate) const CHECKPOINT_PAGES: i32 = 1000;

/// One file's checkpoint state, shared by its writer connection's hook and the checkpointer.
#[derive(Debug)]
struct Shared {
    path: PathBuf,
    in_flight: Mutex<bool>,
    finished: Condvar,
}

impl Shared {
    fn finish(&self) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        *in_flight = false;
        self.finished.notify_all();
    }
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
        let sender = checkpointer()?.clone();
        let shared = Arc::new(Shared {
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            in_flight: Mutex::new(false),
            finished: Condvar::new(),
        });
        let hooked = shared.clone();
        conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: i32| {
            if pages >= CHECKPOINT_PAGES {
                let mut in_flight = hooked.in_flight.lock().unwrap_or_else(|e| e.into_inner());
                if !*in_flight && sender.send(hooked.clone()).is_ok() {
                    *in_flight = true;
                }
            }
            Ok(())
        }))
        .ok()?;
        Some(WalWatch { shared })
    }

    /// Removes the hook from `conn` and waits until no checkpoint of this file is running, so
    /// the caller's own checkpoint and close leave no sidecar behind.
    pub(crate) fn detach(self, conn: &mut Connection) {
        if let Err(error) =
            conn.wal_hook(None::<fn(&mut rusqlite::hooks::Wal, i32) -> rusqlite::Result<()>>)
        {
            tracing::warn!(%error, "removing the WAL hook failed");
        }
        let mut in_flight = self
            .shared
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        while *in_flight {
            in_flight = self
                .shared
                .finished
                .wait(in_flight)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The process's checkpointer thread, started on first use.
fn checkpointer() -> Option<&'static Sender<Arc<Shared>>> {
    static SENDER: OnceLock<Option<Sender<Arc<Shared>>>> = OnceLock::new();
    SENDER
        .get_or_init(|| {
            let (sender, receiver) = channel::<Arc<Shared>>();
            std::thread::Builder::new()
                .name("adf-wal-checkpoint".into())
                .spawn(move || {
                    for file in receiver {
                        if let Err(error) = checkpoint_passive(&file.path) {
                            tracing::debug!(path = %file.path.display(), %error, "background WAL checkpoint did not run");
                        }
                        file.finish();
                    }
                })
                .ok()
                .map(|_| sender)
        })
        .as_ref()
}

fn checkpoint_passive(path: &Path) -> rusqlite::Result<()> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
    conn.close().map_err(|(_, e)| e)
}
