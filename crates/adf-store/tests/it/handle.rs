//! `StoreHandle` idle release: the worker closes the file while idle and the next job reopens
//! it, without losing, reordering or overlapping jobs. Nothing here sleeps for timing: idle
//! periods are zero or tiny and the tests wait for the observable (`wait_until_released`), with
//! a generous timeout only as a failure guard.

use crate::common;

use std::collections::HashSet;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::mpsc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use adf_store::{AdfFile, Caller, IdleRelease, OpenMode, StoreError, StoreHandle, sidecar};

/// Failure guard for waits that normally end in milliseconds.
const GUARD: Duration = Duration::from_secs(20);

fn closed_file(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let (dir, path, file) = common::new_file(name);
    file.close().unwrap();
    (dir, path)
}

/// Appends `n` to the meta key `order` (a read-modify-write, so a job that missed an earlier
/// job's write would drop a number) and returns the worker thread it ran on.
fn append(file: &mut AdfFile, n: usize) -> adf_store::Result<std::thread::ThreadId> {
    let before = file.meta_get("order")?.map(|m| m.value).unwrap_or_default();
    let after = if before.is_empty() {
        n.to_string()
    } else {
        format!("{before},{n}")
    };
    file.meta_set(Caller::Owner, "order", &after, None)?;
    Ok(std::thread::current().id())
}

/// The value of meta `key`, read through a job on `handle` (which may reopen the file).
fn meta_value(handle: &StoreHandle, key: &'static str) -> Option<String> {
    handle
        .call(move |f| Ok(f.meta_get(key)?.map(|m| m.value)))
        .unwrap()
}

fn order(handle: &StoreHandle) -> Vec<usize> {
    let text = handle
        .call(|f| Ok(f.meta_get("order")?.map(|m| m.value).unwrap_or_default()))
        .unwrap();
    text.split(',').map(|n| n.parse().unwrap()).collect()
}

fn assert_cleanly_closed(path: &Path) {
    assert!(!sidecar(path, "-wal").exists(), "-wal left behind");
    assert!(!sidecar(path, "-shm").exists(), "-shm left behind");
    let report = AdfFile::inspect(path).unwrap().open_report().clone();
    assert!(report.clean_close, "no clean-close marker");
}

#[test]
fn jobs_across_explicit_releases_keep_order_and_see_earlier_writes() {
    let (_dir, path) = closed_file("order");
    let handle = StoreHandle::open(&path).unwrap();
    let mut workers = HashSet::new();
    for n in 0..12 {
        workers.insert(handle.call(move |f| append(f, n)).unwrap());
        if n % 3 == 2 {
            assert!(
                handle.release_if_idle().unwrap(),
                "idle handle not released"
            );
            assert!(!handle.is_open());
            assert_cleanly_closed(&path);
        }
    }
    assert_eq!(order(&handle), (0..12).collect::<Vec<_>>());
    // Releases after jobs 2, 5 and 8 (and 11): the twelve jobs ran on four workers, so every
    // release really ended its thread and the next job started a new one.
    assert_eq!(workers.len(), 4);
    handle.close().unwrap();
    assert_cleanly_closed(&path);
}

#[test]
fn pipelined_jobs_keep_order_when_the_worker_releases_whenever_it_is_idle() {
    let (_dir, path) = closed_file("pipelined");
    // Zero: the worker releases the moment its queue is empty, the most racy setting.
    let handle = StoreHandle::open_with(&path, IdleRelease::After(Duration::ZERO)).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    type Pending<'a> = Pin<Box<dyn Future<Output = adf_store::Result<std::thread::ThreadId>> + 'a>>;
    let mut pending: Vec<Pending<'_>> = Vec::new();
    for n in 0..60 {
        // The first poll submits the job (without waiting for it), so submission order is n.
        let mut job: Pending<'_> = Box::pin(handle.run(move |f| append(f, n)));
        match job.as_mut().poll(&mut cx) {
            Poll::Ready(result) => {
                result.unwrap();
            }
            Poll::Pending => pending.push(job),
        }
        if n % 7 == 0 {
            // Let the queue drain sometimes, so releases happen between submissions.
            handle.call(|_| Ok(())).unwrap();
        }
    }
    // Jobs run in order, so once this one has run every earlier one has too.
    assert_eq!(order(&handle), (0..60).collect::<Vec<_>>());
    for mut job in pending {
        match job.as_mut().poll(&mut cx) {
            Poll::Ready(result) => {
                result.unwrap();
            }
            Poll::Pending => panic!("a job submitted earlier has not finished"),
        }
    }
    assert!(handle.wait_until_released(GUARD), "never released");
    assert_cleanly_closed(&path);
    handle.close().unwrap();
}

#[test]
fn idle_release_closes_the_file_cleanly_and_the_next_job_reopens_it() {
    let (dir, path) = closed_file("idle");
    let handle =
        StoreHandle::open_with(&path, IdleRelease::After(Duration::from_millis(1))).unwrap();
    handle
        .call(|f| f.meta_set(Caller::Owner, "kept", "yes", None))
        .unwrap();
    assert!(handle.wait_until_released(GUARD), "never released");
    assert!(!handle.is_open());
    assert_cleanly_closed(&path);

    // While released the file is an ordinary closed file: another connection reads it and a
    // plain copy is a complete agent.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let kept: String = conn
        .query_row("SELECT value FROM adf_meta WHERE key = 'kept'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(kept, "yes");
    conn.close().unwrap();
    let copy = dir.path().join("copy.adf");
    std::fs::copy(&path, &copy).unwrap();
    let copied = AdfFile::open(&copy).unwrap();
    assert_eq!(copied.meta_get("kept").unwrap().unwrap().value, "yes");
    copied.close().unwrap();

    // The next job reopens transparently and sees the earlier write.
    let value = meta_value(&handle, "kept");
    assert_eq!(value.as_deref(), Some("yes"));
    assert!(handle.wait_until_released(GUARD), "never released again");
    assert_cleanly_closed(&path);
    handle.close().unwrap();
    assert_cleanly_closed(&path);
}

#[test]
fn concurrent_submitters_lose_nothing_while_the_worker_releases() {
    let (_dir, path) = closed_file("concurrent");
    // Zero: the worker releases whenever its queue is empty (mid-round too); every round
    // starts released, and its submitters race with the reopening and with an explicit
    // release asked for at the same moment.
    let handle = StoreHandle::open_with(&path, IdleRelease::After(Duration::ZERO)).unwrap();
    const THREADS: usize = 4;
    const ROUNDS: usize = 30;
    const JOBS: usize = 3;
    let start = std::sync::Barrier::new(THREADS + 1);
    let end = std::sync::Barrier::new(THREADS + 1);
    let workers = std::sync::Mutex::new(HashSet::new());
    // Failures are collected, not panicked on: a panicking thread would leave the others
    // waiting at a barrier, and the test must fail, not hang.
    let failures = std::sync::Mutex::new(Vec::<String>::new());
    let fail = |message: String| failures.lock().unwrap().push(message);
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (handle, start, end, workers, fail) =
                (handle.clone(), &start, &end, &workers, &fail);
            scope.spawn(move || {
                for n in 0..ROUNDS * JOBS {
                    if n % JOBS == 0 {
                        start.wait();
                    }
                    // Each thread's own counter must advance one by one: a job lost, run twice
                    // or run on a stale connection would break the sequence.
                    let outcome = handle.call(move |f| {
                        f.meta_increment(Caller::Owner, "hits", 1.0)?;
                        let seen = f.meta_increment(Caller::Owner, &format!("t{t}"), 1.0)?;
                        Ok((seen, std::thread::current().id()))
                    });
                    match outcome {
                        Ok((seen, worker)) => {
                            if seen != (n + 1).to_string() {
                                fail(format!("thread {t} job {n} saw count {seen}"));
                            }
                            workers.lock().unwrap().insert(worker);
                        }
                        Err(error) => fail(format!("thread {t} job {n}: {error}")),
                    }
                    if n % JOBS == JOBS - 1 {
                        end.wait();
                    }
                }
            });
        }
        for round in 0..ROUNDS {
            if !handle.wait_until_released(GUARD) {
                fail(format!("round {round}: the idle worker was not released"));
            }
            start.wait();
            if let Err(error) = handle.release_if_idle() {
                fail(format!("round {round}: release_if_idle: {error}"));
            }
            end.wait();
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{failures:#?}");
    let hits = meta_value(&handle, "hits");
    assert_eq!(
        hits.as_deref(),
        Some((THREADS * ROUNDS * JOBS).to_string().as_str())
    );
    let workers = workers.into_inner().unwrap().len();
    println!("{workers} workers over {ROUNDS} rounds");
    assert!(
        workers >= ROUNDS,
        "only {workers} workers: rounds did not reopen"
    );
    handle.close().unwrap();
    assert_cleanly_closed(&path);
}

#[test]
fn reopening_a_deleted_file_fails_the_job_clearly_and_recovers_when_it_is_back() {
    let (dir, path) = closed_file("deleted");
    let handle = StoreHandle::open(&path).unwrap();
    handle
        .call(|f| f.meta_set(Caller::Owner, "kept", "yes", None))
        .unwrap();
    assert!(handle.release_if_idle().unwrap());
    let aside = dir.path().join("aside.adf");
    std::fs::rename(&path, &aside).unwrap();

    let error = handle.call(|f| Ok(f.path().to_path_buf())).unwrap_err();
    assert!(matches!(error, StoreError::Reopen { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("could not reopen"), "{message}");
    assert!(message.contains("no such file"), "{message}");
    assert!(!handle.is_open());
    assert!(!path.exists(), "a failed reopen must not create the file");

    std::fs::rename(&aside, &path).unwrap();
    let value = meta_value(&handle, "kept");
    assert_eq!(value.as_deref(), Some("yes"));
    handle.close().unwrap();
    assert_cleanly_closed(&path);
}

#[test]
fn a_corrupted_file_fails_the_reopening_job_clearly() {
    let (_dir, path) = closed_file("corrupt");
    let handle = StoreHandle::open(&path).unwrap();
    assert!(handle.release_if_idle().unwrap());
    std::fs::write(&path, b"not an sqlite database at all, sorry").unwrap();
    let error = handle.call(|_| Ok(())).unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Reopen { .. }), "{error:?}");
    assert!(message.contains("could not reopen"), "{message}");
    assert!(message.contains("not an SQLite database"), "{message}");
    // Closing a handle whose file could not be reopened has nothing left to close.
    handle.close().unwrap();
}

#[test]
fn release_never_happens_while_a_job_runs() {
    let (_dir, path) = closed_file("busy");
    let handle =
        StoreHandle::open_with(&path, IdleRelease::After(Duration::from_millis(1))).unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let busy = handle.clone();
    let job = std::thread::spawn(move || {
        busy.call(move |f| {
            started_tx.send(()).unwrap();
            gate_rx.recv().unwrap();
            // Still the same open connection, long after the idle period.
            f.meta_set(Caller::Owner, "after_wait", "1", None)
        })
    });
    started_rx.recv().unwrap();
    // Many idle periods pass while the job holds the worker; the file must stay open. The
    // timeout is the observation here, not a wait for something to happen.
    assert!(!handle.wait_until_released(Duration::from_millis(100)));
    assert!(handle.is_open());
    // An explicit release asked for now waits behind the running job.
    let releaser = handle.clone();
    let release = std::thread::spawn(move || releaser.release_if_idle());
    assert!(handle.is_open());
    gate_tx.send(()).unwrap();
    job.join().unwrap().unwrap();
    release.join().unwrap().unwrap();
    assert!(handle.wait_until_released(GUARD), "never released");
    let value = meta_value(&handle, "after_wait");
    assert_eq!(value.as_deref(), Some("1"));
    handle.close().unwrap();
    assert_cleanly_closed(&path);
}

#[test]
fn a_released_handle_closes_cleanly_and_later_jobs_fail() {
    let (_dir, path) = closed_file("closing");
    let handle = StoreHandle::open(&path).unwrap();
    let other = handle.clone();
    handle
        .call(|f| f.meta_set(Caller::Owner, "k", "v", None))
        .unwrap();
    assert!(handle.release_if_idle().unwrap());
    handle.close().unwrap();
    assert_cleanly_closed(&path);
    assert!(matches!(
        other.call(|_| Ok(())).unwrap_err(),
        StoreError::WorkerGone
    ));
    assert!(matches!(
        other.release_if_idle().unwrap_err(),
        StoreError::WorkerGone
    ));
    assert!(!other.is_open());
}

#[test]
fn an_inspected_file_is_reopened_read_only() {
    let (_dir, path) = closed_file("inspect");
    let handle = StoreHandle::from_file(AdfFile::inspect(&path).unwrap()).unwrap();
    assert!(handle.release_if_idle().unwrap());
    let mode = handle.call(|f| Ok(f.mode())).unwrap();
    assert_eq!(mode, OpenMode::Inspect);
    handle.close().unwrap();
}

#[test]
fn a_requested_release_returns_at_once_and_yields_to_queued_jobs() {
    let (_dir, path) = closed_file("requested");
    let handle = StoreHandle::open(&path).unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let busy = handle.clone();
    let first = std::thread::spawn(move || {
        busy.call(move |f| {
            started_tx.send(()).unwrap();
            gate_rx.recv().unwrap();
            append(f, 0)
        })
    });
    started_rx.recv().unwrap();
    // Asked while a job holds the worker: returns without waiting for it.
    let (done_tx, done_rx) = mpsc::channel();
    let requester = handle.clone();
    std::thread::spawn(move || done_tx.send(requester.release_when_idle()).unwrap());
    done_rx.recv_timeout(GUARD).unwrap().unwrap();
    // A job queued behind the request: when the worker reaches the request, work is waiting,
    // so the file stays open for it.
    let mut cx = Context::from_waker(Waker::noop());
    let mut second = Box::pin(handle.run(|f| append(f, 1)));
    assert!(second.as_mut().poll(&mut cx).is_pending());
    gate_tx.send(()).unwrap();
    first.join().unwrap().unwrap();
    assert_eq!(order(&handle), vec![0, 1]);
    assert!(matches!(second.as_mut().poll(&mut cx), Poll::Ready(Ok(_))));
    drop(second);
    assert!(handle.is_open(), "released although a job was queued");
    // With nothing queued the request releases.
    handle.release_when_idle().unwrap();
    assert!(handle.wait_until_released(GUARD), "never released");
    assert_cleanly_closed(&path);
    handle.close().unwrap();
}

#[test]
fn a_panicking_job_fails_alone_rolls_back_and_the_worker_keeps_serving() {
    let (_dir, path) = closed_file("panic");
    let handle = StoreHandle::open(&path).unwrap();
    handle.call(|f| append(f, 1)).unwrap();
    let worker = handle.call(|_| Ok(std::thread::current().id())).unwrap();
    // Half a transaction, then a panic: the write must not survive, nor the open transaction.
    let error = handle
        .call(|f| -> adf_store::Result<()> {
            f.atomically(|f| -> adf_store::Result<()> {
                append(f, 2)?;
                panic!("boom in the middle of a write");
            })
        })
        .unwrap_err();
    match &error {
        StoreError::JobPanicked(message) => assert!(message.contains("boom"), "{message}"),
        other => panic!("expected JobPanicked, got {other:?}"),
    }
    // The same worker answers the next jobs, and sees only the committed write.
    assert_eq!(
        handle.call(|_| Ok(std::thread::current().id())).unwrap(),
        worker
    );
    assert_eq!(order(&handle), vec![1]);
    handle.call(|f| append(f, 3)).unwrap();
    assert_eq!(order(&handle), vec![1, 3]);
    handle.close().unwrap();
    assert_cleanly_closed(&path);
}

/// Waits for `future` by polling it (adf-store has no executor); `GUARD` bounds the wait.
fn wait<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    let deadline = std::time::Instant::now() + GUARD;
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the future never completed"
        );
        std::thread::yield_now();
    }
}

#[test]
fn a_lease_lends_the_file_and_its_holder_serves_the_jobs_queued_meanwhile() {
    let (_dir, path) = closed_file("lease.adf");
    let handle = StoreHandle::open(&path).unwrap();
    let mut lease = wait(handle.lease()).unwrap();
    append(&mut lease, 1).unwrap();
    // A job queued while the file is lent waits for it...
    let (rang, bell) = mpsc::channel();
    let watch = handle.watch_queue(move || {
        let _ = rang.send(());
    });
    let queued = std::thread::spawn({
        let handle = handle.clone();
        move || handle.call(|file| append(file, 2))
    });
    bell.recv_timeout(GUARD)
        .expect("the bell rings for a queued job");
    // ...until the holder runs it with the lent file, on the holder's thread.
    let mut served = 0;
    let deadline = std::time::Instant::now() + GUARD;
    while served == 0 {
        assert!(std::time::Instant::now() < deadline, "nothing to serve");
        served = handle.serve_queued(&mut lease);
    }
    assert_eq!(served, 1);
    let ran_on = queued.join().unwrap().unwrap();
    assert_eq!(ran_on, std::thread::current().id());
    drop(watch);
    // A transaction the holder left open is rolled back when the lease goes back.
    lease.connection().execute_batch("BEGIN IMMEDIATE").unwrap();
    append(&mut lease, 3).unwrap();
    drop(lease);
    assert_eq!(order(&handle), vec![1, 2]);
    // With no lease out, nothing is served from outside the worker.
    let mut other = AdfFile::open_guest(&path).unwrap();
    assert_eq!(handle.serve_queued(&mut other), 0);
    drop(other);
    handle.close().unwrap();
    assert_cleanly_closed(&path);
}

/// A close that lands while the worker releases the idle file (the daemon unloading an agent
/// whose worker just went idle) returns: the release either sees the close's command or has
/// already given the file back, never leaving the command in a queue nobody reads.
#[test]
fn a_close_racing_the_idle_release_returns() {
    for round in 0..300 {
        let (_dir, path) = closed_file("close-race");
        // Zero: the worker releases the moment its queue is empty, racing the close below.
        let handle = StoreHandle::open_with(&path, IdleRelease::After(Duration::ZERO)).unwrap();
        let (done, closed) = mpsc::channel();
        // The job and the close on one thread, back to back: the close meets the worker as it
        // goes idle. On a thread of its own so that a hung close fails the test.
        std::thread::spawn(move || {
            let _gone = done.send(handle.call(|_| Ok(())).and_then(|()| handle.close()));
        });
        let outcome = closed
            .recv_timeout(GUARD)
            .unwrap_or_else(|_| panic!("close never returned (round {round})"));
        outcome.unwrap();
        assert_cleanly_closed(&path);
    }
}
