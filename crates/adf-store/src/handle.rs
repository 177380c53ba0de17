//! [`StoreHandle`]: an [`AdfFile`] owned by its own thread and reached through a channel (the
//! sqlx worker pattern), so that many tasks, sync or async, share one writer connection.
//!
//! Idle release ([`IdleRelease`]): an open connection and its worker thread cost ~200 KiB of
//! resident memory (schema, lookaside, statement cache, touched stack), which dominates an idle
//! agent in the daemon. A handle opened with [`IdleRelease::After`] lets its worker close the
//! file cleanly ([`AdfFile::close`]: clean-close marker, checkpoint, no `-wal`/`-shm`) and exit
//! once no job has arrived for that long; the next job reopens the file ([`AdfFile::open`]) on a
//! new worker. Callers see the same handle and the same guarantees: jobs run one at a time in
//! submission order, across any number of releases.
//!
//! How release stays race-free: every submission sends on the worker's channel while holding
//! the handle's state lock, and the worker decides to release only while holding that lock and
//! after finding its channel empty; in the same critical section it takes its sender out of the
//! state, so no job can reach a worker that has decided to stop. A job submitted afterwards
//! starts a new worker, which first waits for the old one to finish closing, so two connections
//! never overlap and the new one finds a cleanly closed file.
//!
//! Leases ([`StoreHandle::lease`]): a caller that needs the file across awaits (a daemon turn:
//! a store step, a tool call) borrows the open file itself instead of running a closure. The
//! worker hands the [`AdfFile`] over and waits until the [`Lease`] is dropped, which gives the
//! file back (rolling back a transaction left open); jobs queued meanwhile run after it, in
//! order. A lease holder that waits for something else while it holds the file (an approval,
//! an `ask` answer) runs the jobs queued meanwhile itself ([`StoreHandle::serve_queued`]),
//! so the agent's other work does not wait for the owner; [`StoreHandle::watch_queue`] rings
//! it when one arrives.
//!
//! Worker threads are detached, never joined: a joinable thread that has exited keeps its stack
//! mapping until someone joins it, and with it the ~20 KiB of stack and thread descriptor it
//! last touched — which, held by every released agent, was most of an idle agent's memory. The
//! new worker waits for the old one's close through [`Slot::closing`] instead.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::OpenMode;
use crate::error::{Result, StoreError};
use crate::file::AdfFile;
use crate::other_writers::{DiskStamp, OtherWriters, OtherWrites, Watch};

/// Whether a [`StoreHandle`] gives its file and worker thread back while nothing uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdleRelease {
    /// The file stays open until [`StoreHandle::close`] or until every handle is dropped.
    #[default]
    Never,
    /// After this long without a job the file is closed cleanly and the worker thread exits;
    /// the next job reopens the file on a new worker.
    After(Duration),
}

/// A job, handed the open file or, when reopening failed, the reason.
type Job = Box<dyn FnOnce(Result<&mut AdfFile>) + Send>;

enum Command {
    Run(Job),
    /// Hand the open file to a [`Lease`] and wait until it comes back.
    Lend(oneshot::Sender<Result<Lease>>),
    /// Release now if nothing is queued; `None`: nobody waits for the outcome (the idle
    /// timeout, [`StoreHandle::release_when_idle`]).
    Release(Option<oneshot::Sender<Result<bool>>>),
    Close(oneshot::Sender<Result<()>>),
}

enum State {
    /// A worker owns the file, or is opening it.
    Open {
        sender: mpsc::Sender<Command>,
        generation: u64,
        /// The worker's queue, reachable by a lease holder ([`StoreHandle::serve_queued`]).
        queue: Arc<Mutex<Queue>>,
    },
    /// No worker takes jobs; the worker of `generation` closed the file, or is closing it
    /// while [`Slot::closing`] is set.
    Released {
        generation: u64,
        /// A failed idle close, reported by [`StoreHandle::close`] if nothing reopened since.
        error: Option<StoreError>,
    },
    /// [`StoreHandle::close`] was called.
    Closed,
}

struct Slot {
    state: State,
    /// The generation of the newest worker.
    generation: u64,
    /// A released worker is still closing the file: the next worker opens it only after
    /// that (one worker at a time closes, since a worker releases only a file it opened).
    closing: bool,
}

/// A worker's incoming commands: the channel, and the commands a lease holder that served the
/// queue could not run (a lease, a release, a close), which the worker takes first.
struct Queue {
    receiver: mpsc::Receiver<Command>,
    deferred: std::collections::VecDeque<Command>,
}

thread_local! {
    /// The handle whose worker this thread is, set once when the worker starts (see
    /// [`StoreHandle::of_this_worker`]); weak, like the worker's own reference.
    static WORKER_OF: std::cell::RefCell<Option<Weak<Shared>>> =
        const { std::cell::RefCell::new(None) };
}

/// Called after every job submission (see [`StoreHandle::watch_queue`]).
type Bell = Arc<dyn Fn() + Send + Sync>;

struct Shared {
    path: PathBuf,
    /// Who wants to know when a job is queued, by watch id.
    bells: Mutex<Vec<(u64, Bell)>>,
    next_bell: std::sync::atomic::AtomicU64,
    mode: OpenMode,
    idle: IdleRelease,
    /// Other writers of the file, for a handle opened with [`StoreHandle::open_watched`].
    watch: Option<Arc<Watch>>,
    slot: Mutex<Slot>,
    /// Signalled whenever a worker finishes releasing (or fails to reopen).
    released: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        // The state is consistent at every unlock, so a panic elsewhere cannot corrupt it.
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A cloneable handle to a file owned by a dedicated worker thread.
///
/// Jobs run one at a time in submission order, so each job sees the effects of the jobs
/// before it and a job is a natural transaction boundary. With [`IdleRelease::After`] the file
/// is closed while idle and reopened by the next job (see the module docs); per-connection
/// state (prepared statements, the config cache, SQLite's page cache) does not survive that.
#[derive(Clone)]
pub struct StoreHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for StoreHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreHandle")
            .field("path", &self.shared.path)
            .field("idle", &self.shared.idle)
            .field("open", &self.is_open())
            .finish()
    }
}

impl StoreHandle {
    /// Opens `path` (with migration) on a new worker thread; the file stays open.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, IdleRelease::Never)
    }

    /// Opens `path` (with migration) on a new worker thread, releasing it while idle as
    /// `idle` says. Opening errors are returned here; later reopen errors go to the job.
    pub fn open_with(path: impl AsRef<Path>, idle: IdleRelease) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let opener = path.clone();
        Self::start(path, OpenMode::ReadWrite, idle, None, move || {
            AdfFile::open(opener)
        })
    }

    /// [`StoreHandle::open_with`], also watching for other writers of the file (another
    /// process, another connection): see [`crate::other_writers`]. Costs two `PRAGMA
    /// data_version` reads per job, two `stat`s per release and 32 bytes plus the path per file.
    pub fn open_watched(path: impl AsRef<Path>, idle: IdleRelease) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let opener = path.clone();
        let watch = Some(Arc::new(Watch::default()));
        Self::start(path, OpenMode::ReadWrite, idle, watch, move || {
            AdfFile::open(opener)
        })
    }

    /// What this handle knows of other writers, without a job; `None` when it was not opened
    /// with [`StoreHandle::open_watched`].
    pub fn other_writers(&self) -> Option<OtherWriters> {
        self.shared.watch.as_ref().map(|watch| watch.snapshot())
    }

    /// The files other writers changed since the last take (and the change count), clearing
    /// them; `None` when not watched. Inside a job it includes what the worker found just
    /// before that job.
    pub fn take_other_writes(&self) -> Option<OtherWrites> {
        self.shared.watch.as_ref().map(|watch| watch.take())
    }

    /// Checks for other writers now, from inside a job of this handle (`file` is the file the
    /// job was handed): a job that runs long (a turn waiting for its owner) holds the worker,
    /// whose own checks run only between jobs. Does nothing when not watched.
    pub fn notice_other_writers(&self, file: &AdfFile) {
        if let Some(watch) = &self.shared.watch {
            watch.check(file);
        }
    }

    /// Moves an already open file onto a new worker thread; it stays open.
    pub fn from_file(file: AdfFile) -> Result<Self> {
        let path = file.path().to_path_buf();
        let mode = file.mode();
        Self::start(path, mode, IdleRelease::Never, None, move || Ok(file))
    }

    fn start(
        path: PathBuf,
        mode: OpenMode,
        idle: IdleRelease,
        watch: Option<Arc<Watch>>,
        open: impl FnOnce() -> Result<AdfFile> + Send + 'static,
    ) -> Result<Self> {
        let shared = Arc::new(Shared {
            path,
            bells: Mutex::new(Vec::new()),
            next_bell: std::sync::atomic::AtomicU64::new(0),
            mode,
            idle,
            watch,
            slot: Mutex::new(Slot {
                state: State::Closed,
                generation: 0,
                closing: false,
            }),
            released: Condvar::new(),
        });
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<()>>(1);
        {
            let mut slot = shared.lock();
            spawn_worker(&shared, &mut slot, Some(ready_tx), open)?;
        }
        ready_rx.recv().map_err(|_| StoreError::WorkerGone)??;
        Ok(Self { shared })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The idle-release policy this handle was opened with.
    pub fn idle_release(&self) -> IdleRelease {
        self.shared.idle
    }

    /// Whether a worker holds the file open (or is opening or still closing it). False once
    /// the file is released or closed.
    pub fn is_open(&self) -> bool {
        let slot = self.shared.lock();
        match &slot.state {
            State::Open { .. } => true,
            State::Released { .. } => slot.closing,
            State::Closed => false,
        }
    }

    /// Waits until the file is released (closed by an idle worker) or closed, at most
    /// `timeout`; true if it is. For tests and diagnostics: nothing needs to wait for this.
    pub fn wait_until_released(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut slot = self.shared.lock();
        loop {
            match &slot.state {
                State::Released { .. } if !slot.closing => return true,
                State::Closed => return true,
                State::Open { .. } | State::Released { .. } => {}
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            slot = self
                .shared
                .released
                .wait_timeout(slot, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Releases the file now unless jobs are waiting: after the jobs already submitted, the
    /// worker closes the file cleanly and exits, and this returns once it has. True if the file
    /// is released on return (also when it already was), false if other jobs were queued
    /// behind this request (the worker then keeps the file). Blocks: not inside async code.
    pub fn release_if_idle(&self) -> Result<bool> {
        let receiver = {
            let mut slot = self.shared.lock();
            match &slot.state {
                State::Open { sender, .. } => {
                    let (reply, receiver) = oneshot::channel();
                    sender
                        .send(Command::Release(Some(reply)))
                        .map_err(|_| StoreError::WorkerGone)?;
                    receiver
                }
                State::Released { .. } => {
                    // Some worker is closing or has closed it; wait for the close to finish.
                    loop {
                        match &slot.state {
                            State::Released { .. } if slot.closing => {
                                slot = self
                                    .shared
                                    .released
                                    .wait(slot)
                                    .unwrap_or_else(PoisonError::into_inner);
                            }
                            State::Released { .. } => return Ok(true),
                            // A job reopened it meanwhile, or it was closed for good.
                            State::Open { .. } => return Ok(false),
                            State::Closed => return Err(StoreError::WorkerGone),
                        }
                    }
                }
                State::Closed => return Err(StoreError::WorkerGone),
            }
        };
        receiver
            .blocking_recv()
            .map_err(|_| StoreError::WorkerGone)?
    }

    /// Asks the worker to release the file once the jobs already submitted are done, if no
    /// other job is waiting by then, and returns at once (a running job, say a turn waiting for
    /// its owner, can take any time). Does nothing if the file is already released.
    pub fn release_when_idle(&self) -> Result<()> {
        match &self.shared.lock().state {
            State::Open { sender, .. } => sender
                .send(Command::Release(None))
                .map_err(|_| StoreError::WorkerGone),
            State::Released { .. } => Ok(()),
            State::Closed => Err(StoreError::WorkerGone),
        }
    }

    /// Sends `command` to the worker, starting one (reopening the file) if it was released.
    fn send(&self, command: Command) -> Result<()> {
        let mut slot = self.shared.lock();
        if let State::Released { .. } = slot.state {
            let path = self.shared.path.clone();
            let open: fn(&Path) -> Result<AdfFile> = match self.shared.mode {
                OpenMode::ReadWrite => |p| AdfFile::open(p),
                OpenMode::Inspect => |p| AdfFile::inspect(p),
                OpenMode::Guest => |p| AdfFile::open_guest(p),
            };
            spawn_worker(&self.shared, &mut slot, None, move || open(&path))?;
        }
        match &slot.state {
            State::Open { sender, .. } => sender.send(command).map_err(|_| StoreError::WorkerGone),
            State::Released { .. } | State::Closed => Err(StoreError::WorkerGone),
        }
    }

    fn submit<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut AdfFile) -> Result<R> + Send + 'static,
    ) -> Result<oneshot::Receiver<Result<R>>> {
        let (reply, receiver) = oneshot::channel();
        let job: Job = Box::new(move |file| {
            let _ignored = reply.send(file.and_then(|file| run_guarded(file, job)));
        });
        self.send(Command::Run(job))?;
        self.ring();
        Ok(receiver)
    }

    fn ring(&self) {
        let bells: Vec<Bell> = self
            .shared
            .bells
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(_, bell)| Arc::clone(bell))
            .collect();
        for bell in bells {
            bell();
        }
    }

    /// Borrows the open file itself (reopening it if it was released): the worker waits, and
    /// the jobs submitted meanwhile queue, until the [`Lease`] is dropped. For a caller that
    /// holds the file across awaits for one short step at a time (a daemon turn); a lease held
    /// for long keeps every other job of the file waiting, unless its holder serves them
    /// ([`StoreHandle::serve_queued`]).
    pub async fn lease(&self) -> Result<Lease> {
        let (reply, receiver) = oneshot::channel();
        self.send(Command::Lend(reply))?;
        receiver.await.map_err(|_| StoreError::WorkerGone)?
    }

    /// Runs, with `file`, the jobs queued on the worker right now (commands that need the
    /// worker itself — a lease, a release, a close — stay queued for it, in order). Returns how
    /// many ran. Only for the holder of this handle's [`Lease`] (or a job of this handle), who
    /// waits for something else and would otherwise keep those jobs waiting: `file` must be the
    /// leased file. Does nothing when the worker is waiting for jobs itself (no lease is out).
    /// The jobs run on the calling thread, so a caller inside an async runtime runs this on a
    /// thread of its own (a job may start a runtime).
    pub fn serve_queued(&self, file: &mut AdfFile) -> usize {
        let queue = match &self.shared.lock().state {
            State::Open { queue, .. } => Arc::clone(queue),
            State::Released { .. } | State::Closed => return 0,
        };
        // The worker holds the queue while it waits for jobs: then no lease is out.
        let Ok(mut queue) = queue.try_lock() else {
            return 0;
        };
        let mut ran = 0;
        while let Ok(command) = queue.receiver.try_recv() {
            match command {
                Command::Run(job) => {
                    job(Ok(&mut *file));
                    ran += 1;
                }
                other => queue.deferred.push_back(other),
            }
        }
        ran
    }

    /// The handle whose worker runs on the calling thread, for a job that waits for something
    /// else (agent code awaiting the network) and serves the jobs queued behind it meanwhile
    /// ([`Self::serve_queued`], [`Self::watch_queue`]) without being handed the handle.
    /// `None` on any other thread, including the threads such a job serves from.
    pub fn of_this_worker() -> Option<StoreHandle> {
        WORKER_OF
            .with(|worker| worker.borrow().as_ref().and_then(Weak::upgrade))
            .map(|shared| StoreHandle { shared })
    }

    /// Calls `bell` after every job submitted from now on until the returned [`QueueWatch`]
    /// is dropped (a lease holder that waits learns there is work to serve). The bell runs on
    /// the submitting thread: it must only signal.
    pub fn watch_queue(&self, bell: impl Fn() + Send + Sync + 'static) -> QueueWatch {
        let id = self
            .shared
            .next_bell
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.shared
            .bells
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, Arc::new(bell)));
        QueueWatch {
            shared: Arc::downgrade(&self.shared),
            id,
        }
    }

    /// Runs `job` on the worker and waits for it (for sync callers; not inside async code).
    pub fn call<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut AdfFile) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        self.submit(job)?
            .blocking_recv()
            .map_err(|_| StoreError::WorkerGone)?
    }

    /// Runs `job` on the worker; the returned future resolves when it finishes.
    pub async fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut AdfFile) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        self.submit(job)?
            .await
            .map_err(|_| StoreError::WorkerGone)?
    }

    /// Closes the file cleanly after every job submitted before this call; jobs submitted
    /// after it (through other clones) fail with [`StoreError::WorkerGone`].
    pub fn close(self) -> Result<()> {
        let mut slot = self.shared.lock();
        let previous = std::mem::replace(&mut slot.state, State::Closed);
        match previous {
            State::Open { sender, .. } => {
                let (reply, receiver) = oneshot::channel();
                // Sent under the slot lock, like every job: a worker going idle takes that lock
                // before it looks at its queue for the last time, so it either finds this
                // command there or released the file before this call took the state. Sent
                // after the lock, the command could reach a worker that had already left.
                let sent = sender.send(Command::Close(reply));
                drop(slot);
                self.shared.released.notify_all();
                sent.map_err(|_| StoreError::WorkerGone)?;
                receiver
                    .blocking_recv()
                    .map_err(|_| StoreError::WorkerGone)?
            }
            State::Released { error, .. } => {
                self.shared.released.notify_all();
                // A worker still closing the file: return once it has.
                while slot.closing {
                    slot = self
                        .shared
                        .released
                        .wait(slot)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                error.map_or(Ok(()), Err)
            }
            State::Closed => Err(StoreError::WorkerGone),
        }
    }
}

/// The open file of a [`StoreHandle`], lent by its worker ([`StoreHandle::lease`]) until this
/// is dropped. Dropping it rolls back a transaction left open (a holder cancelled mid-step)
/// and gives the file back to the worker.
pub struct Lease {
    file: Option<AdfFile>,
    back: mpsc::SyncSender<AdfFile>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("path", &self.file.as_ref().map(AdfFile::path))
            .finish()
    }
}

impl std::ops::Deref for Lease {
    type Target = AdfFile;

    fn deref(&self) -> &AdfFile {
        // Present from creation until `drop` takes it.
        match &self.file {
            Some(file) => file,
            None => unreachable!("a lease holds its file until dropped"),
        }
    }
}

impl std::ops::DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut AdfFile {
        match &mut self.file {
            Some(file) => file,
            None => unreachable!("a lease holds its file until dropped"),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(mut file) = self.file.take() {
            file.abandon_open_transaction();
            // The worker waits on the other end; if it is gone, the file closes here.
            let _gone = self.back.send(file);
        }
    }
}

/// Stops the bell of [`StoreHandle::watch_queue`] when dropped.
pub struct QueueWatch {
    shared: Weak<Shared>,
    id: u64,
}

impl fmt::Debug for QueueWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueWatch").field("id", &self.id).finish()
    }
}

impl Drop for QueueWatch {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared
                .bells
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|(id, _)| *id != self.id);
        }
    }
}

/// Runs one job so that its panic is its own error: the transaction it left open is rolled
/// back and the worker, with every later job of the agent, carries on.
fn run_guarded<R>(file: &mut AdfFile, job: impl FnOnce(&mut AdfFile) -> Result<R>) -> Result<R> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut *file))) {
        Ok(result) => result,
        Err(payload) => {
            file.abandon_open_transaction();
            let message = if let Some(text) = payload.downcast_ref::<&str>() {
                (*text).to_owned()
            } else if let Some(text) = payload.downcast_ref::<String>() {
                text.clone()
            } else {
                "a panic without a message".to_owned()
            };
            Err(StoreError::JobPanicked(message))
        }
    }
}

/// Starts the worker of the next generation and records it in `slot` (locked by the caller, so
/// no job can be sent before the state says where to send it).
fn spawn_worker(
    shared: &Arc<Shared>,
    slot: &mut Slot,
    ready: Option<mpsc::SyncSender<Result<()>>>,
    open: impl FnOnce() -> Result<AdfFile> + Send + 'static,
) -> Result<()> {
    let generation = slot.generation + 1;
    let (sender, receiver) = mpsc::channel::<Command>();
    let queue = Arc::new(Mutex::new(Queue {
        receiver,
        deferred: std::collections::VecDeque::new(),
    }));
    let name = format!(
        "adf-store:{}",
        shared
            .path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    );
    let worker = Worker {
        shared: Arc::downgrade(shared),
        generation,
        idle: shared.idle,
        queue: Arc::clone(&queue),
        path: shared.path.clone(),
        watch: shared.watch.clone(),
    };
    // Dropping the join handle detaches the thread (see the module docs).
    let _detached = thread::Builder::new()
        .name(name)
        .spawn(move || worker.run(ready, open))?;
    slot.generation = generation;
    slot.state = State::Open {
        sender,
        generation,
        queue,
    };
    Ok(())
}

struct Worker {
    /// Weak, so that dropping every handle drops the sender and ends the worker.
    shared: Weak<Shared>,
    generation: u64,
    idle: IdleRelease,
    queue: Arc<Mutex<Queue>>,
    path: PathBuf,
    watch: Option<Arc<Watch>>,
}

impl Worker {
    fn run(
        self,
        ready: Option<mpsc::SyncSender<Result<()>>>,
        open: impl FnOnce() -> Result<AdfFile>,
    ) {
        WORKER_OF.with(|worker| *worker.borrow_mut() = Some(Weak::clone(&self.shared)));
        // The previous worker may still be closing the file: never two connections at once.
        if let Some(shared) = self.shared.upgrade() {
            let mut slot = shared.lock();
            while slot.closing {
                slot = shared
                    .released
                    .wait(slot)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
        let file = match (open(), ready) {
            (Ok(file), ready) => {
                if let Some(watch) = &self.watch {
                    watch.opened(&file);
                }
                if let Some(ready) = ready {
                    let _ignored = ready.send(Ok(()));
                }
                file
            }
            // The first open: `StoreHandle::open` returns the error and no handle.
            (Err(error), Some(ready)) => {
                let _ignored = ready.send(Err(error));
                return;
            }
            (Err(error), None) => return self.fail_queued(&error),
        };
        self.serve(file);
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next command: one a lease holder left for the worker first, then the channel's.
    /// The queue stays locked while the worker waits, so no lease holder serves it then.
    fn next(&self) -> Option<Command> {
        let mut queue = self.queue();
        if let Some(command) = queue.deferred.pop_front() {
            return Some(command);
        }
        match self.idle {
            IdleRelease::Never => queue.receiver.recv().ok(),
            IdleRelease::After(period) => match queue.receiver.recv_timeout(period) {
                Ok(command) => Some(command),
                Err(RecvTimeoutError::Timeout) => Some(Command::Release(None)),
                Err(RecvTimeoutError::Disconnected) => None,
            },
        }
    }

    fn serve(self, mut file: AdfFile) {
        let mut pending = None;
        loop {
            let Some(command) = pending.take().or_else(|| self.next()) else {
                // Every handle was dropped without `close`: still an orderly shutdown.
                drop(file);
                return;
            };
            match command {
                Command::Run(job) => {
                    if let Some(watch) = &self.watch {
                        watch.check(&file);
                    }
                    job(Ok(&mut file));
                    if let Some(watch) = &self.watch {
                        watch.check(&file);
                    }
                }
                Command::Lend(reply) => {
                    // A lease is a long job: other writers are sorted from its own writes on
                    // both sides of it, as around any job.
                    if let Some(watch) = &self.watch {
                        watch.check(&file);
                    }
                    let (back, returned) = mpsc::sync_channel(1);
                    let lease = Lease {
                        file: Some(file),
                        back,
                    };
                    // A requester that went away hands the lease back at once (its drop).
                    if let Err(Ok(lease)) = reply.send(Ok(lease)) {
                        drop(lease);
                    }
                    file = match returned.recv() {
                        Ok(file) => file,
                        // Only a lease forgotten without its drop gets here: nothing to serve.
                        Err(_) => return,
                    };
                    if let Some(watch) = &self.watch {
                        watch.check(&file);
                    }
                }
                Command::Close(reply) => {
                    let _ignored = reply.send(file.close());
                    return;
                }
                Command::Release(reply) => {
                    let Some(shared) = self.shared.upgrade() else {
                        drop(file);
                        return;
                    };
                    let mut slot = shared.lock();
                    let mut queue = self.queue();
                    let next = match queue.deferred.pop_front() {
                        Some(command) => Ok(command),
                        None => queue.receiver.try_recv(),
                    };
                    drop(queue);
                    match next {
                        Ok(next) => {
                            // Work arrived: it runs first and the file stays open.
                            pending = Some(next);
                            drop(slot);
                            if let Some(reply) = reply {
                                let _ignored = reply.send(Ok(false));
                            }
                            continue;
                        }
                        Err(TryRecvError::Empty) => {}
                        // `close` took the sender and its command was already received.
                        Err(TryRecvError::Disconnected) => {
                            drop(slot);
                            drop(file);
                            return;
                        }
                    }
                    // Under the lock with an empty queue: taking the sender out of the state
                    // guarantees that no job reaches this worker from now on.
                    slot.state = State::Released {
                        generation: self.generation,
                        error: None,
                    };
                    slot.closing = true;
                    drop(slot);
                    if let Some(watch) = &self.watch {
                        watch.check(&file);
                    }
                    // A panic must still end the release, or the next worker would wait forever.
                    let closed =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| file.close()))
                            .unwrap_or_else(|_| {
                                Err(StoreError::JobPanicked("closing the file panicked".into()))
                            });
                    // Before the next worker may open (`closing` still holds it back).
                    if let Some(watch) = &self.watch {
                        watch.released(DiskStamp::of(&self.path));
                    }
                    self.finish_release(&shared, closed, reply);
                    return;
                }
            }
        }
    }

    /// Marks this generation's release as done and reports how the close went.
    fn finish_release(
        &self,
        shared: &Shared,
        closed: Result<()>,
        reply: Option<oneshot::Sender<Result<bool>>>,
    ) {
        let mut slot = shared.lock();
        let ours = matches!(
            &slot.state,
            State::Released { generation, .. } if *generation == self.generation
        );
        let (to_reply, to_keep) = match (closed, &reply) {
            (Ok(()), _) => (Ok(true), None),
            (Err(error), Some(_)) => (Err(error), None),
            (Err(error), None) => {
                tracing::warn!(path = %self.path.display(), %error, "closing an idle file failed");
                (Ok(true), Some(error))
            }
        };
        slot.closing = false;
        if let State::Released { error, .. } = &mut slot.state
            && ours
        {
            *error = to_keep;
        }
        drop(slot);
        shared.released.notify_all();
        if let Some(reply) = reply {
            let _ignored = reply.send(to_reply);
        }
    }

    /// Reopening failed: every job already sent to this worker gets the error, and the next
    /// submission starts a new worker (the file may be back by then).
    fn fail_queued(self, error: &StoreError) {
        let detail = error.to_string();
        tracing::warn!(path = %self.path.display(), %detail, "reopening a released file failed");
        if let Some(shared) = self.shared.upgrade() {
            let mut slot = shared.lock();
            if let State::Open { generation, .. } = &slot.state
                && *generation == self.generation
            {
                slot.state = State::Released {
                    generation: self.generation,
                    error: None,
                };
            }
            drop(slot);
            shared.released.notify_all();
        }
        // The sender is out of the state now, so this drains everything that will ever come.
        let mut queue = self.queue();
        let mut commands: Vec<Command> = queue.deferred.drain(..).collect();
        commands.extend(queue.receiver.try_iter());
        drop(queue);
        for command in commands {
            match command {
                Command::Lend(reply) => {
                    let _ignored = reply.send(Err(StoreError::Reopen {
                        path: self.path.clone(),
                        detail: detail.clone(),
                    }));
                }
                Command::Run(job) => job(Err(StoreError::Reopen {
                    path: self.path.clone(),
                    detail: detail.clone(),
                })),
                Command::Release(reply) => {
                    if let Some(reply) = reply {
                        let _ignored = reply.send(Ok(true));
                    }
                }
                // Nothing is open, so there is nothing to close.
                Command::Close(reply) => {
                    let _ignored = reply.send(Ok(()));
                }
            }
        }
    }
}
