//! Pure runtime overhead per turn. By default agents chat with a zero-latency `adf-testkit`
//! provider over real HTTP on 127.0.0.1, so what is measured is the executor (config reads, the
//! system prompt snapshot, transcript rows and checkpoints in SQLite, request building, the HTTP
//! exchange and SSE parsing), not a model.
//!
//! ```text
//! cargo bench -p adf-runtime --bench turns -- [--agents N] [--seconds S] [--window W]
//!     [--threads T] [--mock-thread] [--inproc [--mirror | --ok]]
//! ```
//!
//! `--inproc` runs the library driver `adf_runtime::bench` (the same as `adf bench turns`): an
//! in-process provider answers at once, as the reference's `MockLLMProvider` does, so no request
//! body is built, sent or parsed. Its reply is the reference-shaped one (`--mirror`, the
//! default: about 120 tokens in 8 deltas, usage reported) or a bare "ok" (`--ok`, the figure
//! BENCHMARKS.md reported before the mirror existed).
//!
//! Each agent runs turns back to back (one in flight per agent) on a T-worker tokio runtime
//! (default 2); every W turns (default 50) the owner clears the loop, standing in for the
//! reference's compaction, so the figure does not depend on how long the run lasts.
//!
//! Threads of the HTTP variant: without `--threads`, one agent runs on a current-thread
//! runtime, as the daemon runs each turn (`adf-server` `turns.rs`): one turn is sequential
//! work, and on a two-worker runtime its task, the client's connection task and the mock's
//! were spread over both workers, which then woke each other several times a turn (3.3
//! context switches a turn against 0.2; about 2,500 turns/s against 3,400 on this machine).
//! More agents get two workers. `--mock-thread` serves the mock from a thread and runtime of its
//! own instead of the agents' runtime, as a vendor's server is a process of its own: the
//! request and the reply then each wake a sleeping thread.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

use std::time::Duration;

use adf_providers::Resolver;
use adf_runtime::bench::{Reply, TurnOptions, create_agents, drive, run_turns};
use adf_runtime::executor::{Executor, RetryLog};
use adf_store::{AdfFile, Caller, ConfigAction};
use adf_testkit::{MockProvider, Turn};
use serde_json::json;

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes --bench; only our flags matter.
    let options = TurnOptions {
        agents: arg("--agents", 1).max(1) as usize,
        duration: Duration::from_secs(arg("--seconds", 5).max(1)),
        window: arg("--window", 50).max(1),
        threads: arg("--threads", 2).max(1) as usize,
        reply: if flag("--ok") {
            Reply::Ok
        } else {
            Reply::Mirror
        },
        ..TurnOptions::default()
    };
    let stats = if flag("--inproc") {
        run_turns(&options).unwrap()
    } else {
        let threads = if std::env::args().any(|a| a == "--threads") {
            options.threads
        } else {
            options.agents.min(2)
        };
        http(&TurnOptions { threads, ..options })
    };
    println!("{}", stats.line());
}

/// The HTTP variant: the testkit's OpenAI-shaped mock answering "ok" over 127.0.0.1.
fn http(options: &TurnOptions) -> adf_runtime::bench::TurnStats {
    let rt = if options.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.threads)
            .enable_all()
            .build()
            .unwrap()
    };
    let shared = (!flag("--mock-thread")).then(|| rt.block_on(mock()));
    let base_url = match &shared {
        Some(mock) => mock.base_url(),
        None => mock_thread(),
    };
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let paths = create_agents(dir.path(), options.agents).unwrap();
        for path in &paths {
            let mut file = AdfFile::open(path).unwrap();
            for (p, v) in [
                ("model.provider", json!(base_url)),
                ("model.model_id", json!("bench")),
            ] {
                file.config_set_path(Caller::Owner, p, ConfigAction::Set, v)
                    .unwrap();
            }
            file.close().unwrap();
        }
        let config = {
            let file = AdfFile::open(&paths[0]).unwrap();
            let config = file.config().unwrap();
            file.close().unwrap();
            config
        };
        let executor = || {
            let resolved = Resolver::new()
                .with_env(|_| None)
                .resolve(&config, None)
                .unwrap();
            Executor::from_resolved(resolved, RetryLog::default())
        };
        drive(
            paths,
            executor,
            "http",
            options.threads,
            options.window,
            options.duration,
            options.warmup,
        )
        .await
        .unwrap()
    })
}

async fn mock() -> MockProvider {
    let mock = MockProvider::openai().await;
    mock.zero_latency(true);
    mock.repeat(Turn::text("ok"));
    mock
}

/// Starts the mock on a thread with a current-thread runtime of its own, serving until the
/// process ends, and returns its base URL.
fn mock_thread() -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mock = mock().await;
            tx.send(mock.base_url()).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}
