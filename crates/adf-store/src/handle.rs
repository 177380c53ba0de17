//! [`StoreHandle`]: an [`AdfFile`] owned by its own thread and reached through a channel (the
//! sqlx worker pattern), so that many tasks, sync or async, share one writer connection.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;

use tokio::sync::oneshot;

use crate::error::{Result, StoreError};
use crate::file::AdfFile;

type Job = Box<dyn FnOnce(&mut AdfFile) + Send>;

enum Command {
    Run(Job),
    Close(oneshot::Sender<Result<()>>),
}

/// A cloneable handle to a file owned by a dedicated worker thread.
///
/// Jobs run one at a time in submission order, so each job sees the effects of the jobs
/// before it and a job is a natural transaction boundary.
#[derive(Debug, Clone)]
pub struct StoreHandle {
    sender: mpsc::Sender<Command>,
    path: PathBuf,
}

impl StoreHandle {
    /// Opens `path` (with migration) on a new worker thread.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let opener = path.clone();
        Self::spawn(path, move || AdfFile::open(opener))
    }

    /// Moves an already open file onto a new worker thread.
    pub fn from_file(file: AdfFile) -> Result<Self> {
        let path = file.path().to_path_buf();
        Self::spawn(path, move || Ok(file))
    }

    fn spawn(
        path: PathBuf,
        open: impl FnOnce() -> Result<AdfFile> + Send + 'static,
    ) -> Result<Self> {
        let (sender, receiver) = mpsc::channel::<Command>();
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<()>>(1);
        let name = format!(
            "adf-store:{}",
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        );
        thread::Builder::new().name(name).spawn(move || {
            let mut file = match open() {
                Ok(file) => {
                    let _ignored = ready_tx.send(Ok(()));
                    file
                }
                Err(error) => {
                    let _ignored = ready_tx.send(Err(error));
                    return;
                }
            };
            while let Ok(command) = receiver.recv() {
                match command {
                    Command::Run(job) => job(&mut file),
                    Command::Close(reply) => {
                        let _ignored = reply.send(file.close());
                        return;
                    }
                }
            }
            // Every handle was dropped without `close`: still an orderly shutdown.
            drop(file);
        })?;
        ready_rx.recv().map_err(|_| StoreError::WorkerGone)??;
        Ok(Self { sender, path })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn submit<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut AdfFile) -> Result<R> + Send + 'static,
    ) -> Result<oneshot::Receiver<Result<R>>> {
        let (reply, receiver) = oneshot::channel();
        let job: Job = Box::new(move |file| {
            let _ignored = reply.send(job(file));
        });
        self.sender
            .send(Command::Run(job))
            .map_err(|_| StoreError::WorkerGone)?;
        Ok(receiver)
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

    /// Closes the file cleanly after every job submitted before this call.
    pub fn close(self) -> Result<()> {
        let (reply, receiver) = oneshot::channel();
        self.sender
            .send(Command::Close(reply))
            .map_err(|_| StoreError::WorkerGone)?;
        receiver
            .blocking_recv()
            .map_err(|_| StoreError::WorkerGone)?
    }
}
