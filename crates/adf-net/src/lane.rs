//! One long-lived thread per busy agent that runs the agent's HTTP requests in arrival order
//! ([`Lane`]).
//!
//! A request used to be a blocking-pool task of its own: under load every request woke a
//! thread that then queued on the agent's kept connections and its lambda lock (lambda runs
//! of one agent take turns anyway), so most of a warm route's time went to thread wake-ups
//! and lock hand-offs. Now the async side sends the request's blocking part down a channel to
//! the agent's lane and awaits the answer: one hand-off each way, no contention. The lane's
//! thread is started by the first request and ends once the agent has had no request for the
//! linger ([`crate::ServingLimits::idle_file_linger`]) or when the agent is released, so an
//! idle agent holds no thread.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The blocking part of one request.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// An agent's request thread (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Lane {
    shared: Arc<Mutex<LaneState>>,
}

#[derive(Debug, Default)]
struct LaneState {
    /// Where jobs go while the thread runs; `None` once it ended (or never started).
    sender: Option<Sender<Job>>,
    /// The running thread, so a test (or a shutdown) can wait for it to end.
    thread: Option<JoinHandle<()>>,
    /// Threads started over the lane's life.
    started: u64,
}

fn lock(shared: &Mutex<LaneState>) -> MutexGuard<'_, LaneState> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Lane {
    /// Runs `job` on the lane's thread after the jobs before it, starting the thread when
    /// none runs. An error only when no thread could be started.
    pub(crate) fn submit(&self, job: Job, linger: Duration) -> std::io::Result<()> {
        let mut state = lock(&self.shared);
        let job = match state.sender.as_ref() {
            Some(sender) => match sender.send(job) {
                Ok(()) => return Ok(()),
                // The thread is gone without clearing the sender: start another.
                Err(returned) => returned.0,
            },
            None => job,
        };
        let (sender, receiver) = std::sync::mpsc::channel();
        let _queued = sender.send(job);
        let shared = Arc::clone(&self.shared);
        let thread = std::thread::Builder::new()
            .name("adf-serve-lane".to_owned())
            .spawn(move || run(&shared, &receiver, linger))?;
        state.sender = Some(sender);
        state.thread = Some(thread);
        state.started += 1;
        Ok(())
    }

    /// Ends the lane: the thread finishes the jobs already sent, then exits.
    pub(crate) fn close(&self) {
        lock(&self.shared).sender = None;
    }

    /// Whether the lane's thread runs now.
    pub(crate) fn is_running(&self) -> bool {
        lock(&self.shared).sender.is_some()
    }

    /// Threads the lane started so far.
    pub(crate) fn started(&self) -> u64 {
        lock(&self.shared).started
    }

    /// The running thread's handle, taken (a release keeps it to wait for the thread's last
    /// jobs at shutdown).
    pub(crate) fn take_thread(&self) -> Option<JoinHandle<()>> {
        lock(&self.shared).thread.take()
    }

    /// Waits for the running thread (if any) to end.
    #[cfg(test)]
    pub(crate) fn join(&self) {
        let thread = lock(&self.shared).thread.take();
        if let Some(thread) = thread {
            let _panicked = thread.join();
        }
    }
}

/// Runs one job; a job that panics ends alone. The jobs sent behind it still run: a thread
/// that died with them in its channel would drop them unrun.
fn run_job(job: Job) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
        tracing::error!("a request job of an agent panicked; the agent's next requests still run");
    }
}

/// The thread: jobs in order until the lane is closed or idle for `linger`.
fn run(shared: &Mutex<LaneState>, receiver: &Receiver<Job>, linger: Duration) {
    loop {
        match receiver.recv_timeout(linger) {
            Ok(job) => run_job(job),
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                // Senders send under the lock: holding it, an empty queue stays empty.
                let mut state = lock(shared);
                match receiver.try_recv() {
                    Ok(job) => {
                        drop(state);
                        run_job(job);
                    }
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => {
                        state.sender = None;
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn answer(lane: &Lane, linger: Duration, value: u32) -> std::sync::mpsc::Receiver<u32> {
        let (tx, rx) = std::sync::mpsc::channel();
        lane.submit(
            Box::new(move || {
                tx.send(value).unwrap();
            }),
            linger,
        )
        .unwrap();
        rx
    }

    #[test]
    fn jobs_run_in_order_on_one_thread_that_ends_when_the_agent_is_idle() {
        let lane = Lane::default();
        let linger = Duration::from_millis(20);
        let (seen_tx, seen) = std::sync::mpsc::channel();
        for n in 0..5 {
            let seen_tx = seen_tx.clone();
            lane.submit(
                Box::new(move || {
                    seen_tx.send((n, std::thread::current().id())).unwrap();
                }),
                linger,
            )
            .unwrap();
        }
        let got: Vec<_> = (0..5).map(|_| seen.recv().unwrap()).collect();
        assert_eq!(
            got.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
        assert!(got.iter().all(|(_, thread)| *thread == got[0].1));
        assert_ne!(got[0].1, std::thread::current().id());
        assert_eq!(lane.started(), 1, "one thread for the burst");
        lane.join();
        assert!(!lane.is_running(), "an idle lane holds no thread");
        assert_eq!(answer(&lane, linger, 7).recv().unwrap(), 7);
        assert_eq!(lane.started(), 2, "the next request starts a thread again");
        lane.join();
    }

    #[test]
    fn a_closed_lane_finishes_what_was_sent_and_ends() {
        let lane = Lane::default();
        let linger = Duration::from_secs(3600);
        let first = answer(&lane, linger, 1);
        lane.close();
        assert!(!lane.is_running());
        assert_eq!(first.recv().unwrap(), 1);
        lane.join();
        assert_eq!(answer(&lane, linger, 2).recv().unwrap(), 2);
        lane.close();
        lane.join();
    }

    #[test]
    fn a_job_that_panics_ends_alone_and_the_jobs_behind_it_run_on_the_same_thread() {
        let lane = Lane::default();
        let linger = Duration::from_secs(3600);
        let (release, gate) = std::sync::mpsc::channel::<()>();
        // The failing job waits until the next one is in the channel behind it.
        lane.submit(
            Box::new(move || {
                gate.recv().unwrap();
                panic!("a failing job");
            }),
            linger,
        )
        .unwrap();
        let behind = answer(&lane, linger, 3);
        release.send(()).unwrap();
        assert_eq!(behind.recv().unwrap(), 3);
        assert_eq!(lane.started(), 1, "the panic did not cost the thread");
        lane.close();
        lane.join();
    }
}
