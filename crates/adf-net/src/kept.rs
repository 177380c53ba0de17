//! What an agent's slot keeps between requests so a busy route does not pay for it on every
//! one: a few guest connections to the agent's file ([`KeptFiles`]) and the runtime its
//! lambdas run on ([`LambdaRuntime`]).
//!
//! Opening a guest connection costs a header check, a schema probe and the pragmas; closing
//! the last connection to the file checkpoints its WAL. Per request that was most of a warm
//! route's time. A kept connection is closed once the agent has had no request for
//! [`crate::ServingLimits::idle_file_linger`], so an idle agent still holds no file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use adf_store::{AdfFile, StoreError};

/// Guest connections per agent: a request beyond this many at once waits for one (lambda runs
/// take turns anyway; connections past a few only add opens, closes and WAL checkpoints).
const MAX_KEPT: usize = 4;

/// The guest connections of one agent's slot (see the module docs).
#[derive(Debug)]
pub(crate) struct KeptFiles {
    state: Mutex<Kept>,
    /// Signalled when a connection is given back or closed.
    returned: Condvar,
    /// Whether a task is watching for the linger to run out.
    watched: AtomicBool,
}

#[derive(Debug)]
struct Kept {
    /// The file the kept connections are open on (an agent's path can change on reload).
    path: Option<PathBuf>,
    files: Vec<AdfFile>,
    /// Connections open now: kept, or checked out.
    open: usize,
    last_used: Instant,
}

impl Default for KeptFiles {
    fn default() -> Self {
        KeptFiles {
            state: Mutex::new(Kept {
                path: None,
                files: Vec::new(),
                open: 0,
                last_used: Instant::now(),
            }),
            returned: Condvar::new(),
            watched: AtomicBool::new(false),
        }
    }
}

impl KeptFiles {
    fn state(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A kept connection to `path`, or a newly opened one; waits while [`MAX_KEPT`] are
    /// checked out.
    pub(crate) fn checkout(&self, path: &Path) -> Result<AdfFile, StoreError> {
        let mut kept = self.state();
        let mut stale = Vec::new();
        if kept.path.as_deref() != Some(path) {
            // The agent's file moved: what is kept is for the old one.
            kept.open -= kept.files.len();
            stale.append(&mut kept.files);
            kept.path = Some(path.to_owned());
        }
        loop {
            kept.last_used = Instant::now();
            if let Some(file) = kept.files.pop() {
                drop(kept);
                drop(stale);
                return Ok(file);
            }
            if kept.open < MAX_KEPT {
                kept.open += 1;
                drop(kept);
                drop(stale);
                // Serving's connections are the lane's: their log rows can wait for a
                // checkpoint pass, so they leave the WAL's catch-up to it.
                let opened = AdfFile::open_guest(path);
                if let Ok(file) = &opened {
                    file.defer_wal_restart();
                }
                if opened.is_err() {
                    self.state().open -= 1;
                    self.returned.notify_one();
                }
                return opened;
            }
            kept = self
                .returned
                .wait(kept)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Gives `file` back after a request. What is not kept (the pool is full, the path
    /// changed, the connection is inside a transaction) is returned for the caller to close
    /// outside the lock.
    pub(crate) fn checkin(&self, path: &Path, file: AdfFile) -> Vec<AdfFile> {
        let mut kept = self.state();
        kept.last_used = Instant::now();
        // A connection left inside a transaction (a lambda that timed out mid-write) would
        // hold the write lock for the next request, and one to an old path serves nobody:
        // close it instead.
        let closing = if !file.in_transaction() && kept.path.as_deref() == Some(path) {
            kept.files.push(file);
            Vec::new()
        } else {
            kept.open -= 1;
            vec![file]
        };
        drop(kept);
        self.returned.notify_one();
        closing
    }

    /// Every kept connection, when none was used for `linger` before `now`.
    pub(crate) fn take_idle(&self, now: Instant, linger: Duration) -> Option<Vec<AdfFile>> {
        let mut kept = self.state();
        if now.saturating_duration_since(kept.last_used) < linger {
            return None;
        }
        let taken = std::mem::take(&mut kept.files);
        kept.open -= taken.len();
        Some(taken)
    }

    /// Every kept connection (the agent is released).
    pub(crate) fn take_all(&self) -> Vec<AdfFile> {
        let mut kept = self.state();
        let taken = std::mem::take(&mut kept.files);
        kept.open -= taken.len();
        taken
    }

    /// How many connections are kept now.
    pub(crate) fn len(&self) -> usize {
        self.state().files.len()
    }

    /// Claims the watch over the linger; false when a watcher already runs.
    pub(crate) fn claim_watch(&self) -> bool {
        !self.watched.swap(true, Ordering::AcqRel)
    }

    /// The watcher is done (it closed the connections, or the slot is gone).
    pub(crate) fn end_watch(&self) {
        self.watched.store(false, Ordering::Release);
    }
}

/// Closes connections off the async threads: closing the last one checkpoints the WAL.
pub(crate) fn close_later(files: Vec<AdfFile>) {
    if files.is_empty() {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn_blocking(move || drop(files));
        }
        Err(_) => drop(files),
    }
}

/// The current-thread runtime an agent's lambdas are driven on, built once per slot (a
/// runtime per request cost an epoll instance, a timer wheel and their teardown).
#[derive(Debug)]
pub(crate) struct LambdaRuntime(Option<tokio::runtime::Runtime>);

impl LambdaRuntime {
    pub(crate) fn new() -> std::io::Result<Self> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map(|runtime| LambdaRuntime(Some(runtime)))
    }

    pub(crate) fn block_on<F: std::future::Future>(&self, future: F) -> Option<F::Output> {
        self.0.as_ref().map(|runtime| runtime.block_on(future))
    }
}

impl Drop for LambdaRuntime {
    fn drop(&mut self) {
        // A slot can be dropped on an async thread, where dropping a runtime panics.
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn agent_file(dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        AdfFile::create(&path, &adf_store::CreateOptions::default())
            .unwrap()
            .close()
            .unwrap();
        path
    }

    #[test]
    fn a_checked_in_connection_is_reused_and_released_after_the_linger() {
        let dir = tempfile::tempdir().unwrap();
        let path = agent_file(dir.path(), "a.adf");
        let kept = KeptFiles::default();
        let file = kept.checkout(&path).unwrap();
        assert!(kept.checkin(&path, file).is_empty());
        assert_eq!(kept.len(), 1);
        let again = kept.checkout(&path).unwrap();
        assert_eq!(kept.len(), 0, "the kept connection was handed out");
        assert!(kept.checkin(&path, again).is_empty());
        let start = Instant::now();
        let linger = Duration::from_secs(10);
        assert!(kept.take_idle(start, linger).is_none());
        let released = kept.take_idle(start + linger, linger).unwrap();
        assert_eq!(released.len(), 1);
        assert_eq!(kept.len(), 0);
    }

    #[test]
    fn connections_of_another_path_or_inside_a_transaction_are_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = agent_file(dir.path(), "a.adf");
        let second = agent_file(dir.path(), "b.adf");
        let kept = KeptFiles::default();
        assert!(
            kept.checkin(&first, kept.checkout(&first).unwrap())
                .is_empty()
        );
        let old = kept.checkout(&first).unwrap();
        let fresh = kept.checkout(&second).unwrap();
        assert_eq!(
            kept.checkin(&first, old).len(),
            1,
            "the old path's connection closes"
        );
        assert!(kept.checkin(&second, fresh).is_empty());
        assert_eq!(kept.len(), 1);
        let busy = kept.checkout(&second).unwrap();
        busy.begin_held_transaction().unwrap();
        assert_eq!(kept.checkin(&second, busy).len(), 1);
        assert_eq!(kept.state().open, 0);
    }

    #[test]
    fn a_request_past_the_limit_waits_for_a_connection_given_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = agent_file(dir.path(), "a.adf");
        let kept = std::sync::Arc::new(KeptFiles::default());
        let mut held: Vec<AdfFile> = (0..MAX_KEPT)
            .map(|_| kept.checkout(&path).unwrap())
            .collect();
        let (got_tx, got) = std::sync::mpsc::channel();
        let waiter = {
            let kept = std::sync::Arc::clone(&kept);
            let path = path.clone();
            std::thread::spawn(move || {
                let file = kept.checkout(&path).unwrap();
                got_tx.send(()).unwrap();
                kept.checkin(&path, file)
            })
        };
        assert!(kept.checkin(&path, held.pop().unwrap()).is_empty());
        got.recv().unwrap();
        assert!(waiter.join().unwrap().is_empty());
        assert_eq!(
            kept.state().open,
            MAX_KEPT,
            "the waiter reused the given-back one"
        );
        for file in held {
            assert!(kept.checkin(&path, file).is_empty());
        }
        assert_eq!(kept.len(), MAX_KEPT);
    }
}
