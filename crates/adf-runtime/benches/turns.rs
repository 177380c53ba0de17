//! Pure runtime overhead per turn: agents chat with a zero-latency `adf-testkit` provider over
//! real HTTP on 127.0.0.1, so what is measured is the executor (config reads, the system prompt
//! snapshot, transcript rows and checkpoints in SQLite, request building, the HTTP exchange and
//! SSE parsing), not a model.
//!
//! ```text
//! cargo bench -p adf-runtime --bench turns -- [--agents N] [--seconds S] [--window W]
//!     [--threads T] [--inproc]
//! ```
//!
//! `--inproc` replaces the HTTP mock by an in-process provider that answers at once (the
//! reference's `MockLLMProvider` is in-process too): then no request body is built, sent or
//! parsed, and what remains is the executor and SQLite alone.
//!
//! Each agent runs turns back to back (one in flight per agent, like the reference's
//! "sequential dispatches") on a 2-worker tokio runtime; the mock answers every request with a
//! short text reply. The history is bounded: every W turns (default 50) the owner clears the
//! loop, standing in for the reference's compaction at 100 000 tokens, so the figure does not
//! depend on how long the run lasts. Results go to BENCHMARKS.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

use std::time::{Duration, Instant};

use adf_runtime::executor::{Executor, RetryLog, Trigger, TurnHost};
use std::sync::Arc;

use adf_providers::{
    AssistantMessage, ChatRequest, ContentBlock, EventStream, ModelParams, Provider, ProviderError,
    Resolver, StopReason, StreamEvent, Usage,
};
use adf_runtime::tools::Approver;
use adf_runtime::tools::approval::DenyAll;
use adf_store::{AdfFile, ConfigAction, CreateOptions};
use adf_testkit::{MockProvider, Turn};
use futures::future::BoxFuture;
use serde_json::json;

struct Quiet;

impl TurnHost for Quiet {
    fn approver(&self) -> &dyn Approver {
        &DenyAll
    }
    fn answer(&self, _question: &str) -> Option<String> {
        None
    }
}

/// A provider that answers every request with "ok" without leaving the process.
#[derive(Debug)]
struct InProcess;

impl Provider for InProcess {
    fn id(&self) -> &str {
        "inproc"
    }

    fn stream<'a>(
        &'a self,
        _req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, ProviderError>> {
        Box::pin(async {
            let events = vec![
                Ok(StreamEvent::TextDelta("ok".into())),
                Ok(StreamEvent::Usage(Usage {
                    input: 10,
                    output: 5,
                    ..Usage::default()
                })),
                Ok(StreamEvent::Stop(StopReason::EndTurn)),
            ];
            Ok(Box::pin(futures::stream::iter(events)) as EventStream)
        })
    }

    fn complete<'a>(
        &'a self,
        _req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<AssistantMessage, ProviderError>> {
        Box::pin(async {
            Ok(AssistantMessage {
                content: vec![ContentBlock::text("ok")],
                ..AssistantMessage::default()
            })
        })
    }
}

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

async fn agent_loop(
    path: std::path::PathBuf,
    base_url: String,
    deadline: Instant,
    window: u64,
    inproc: bool,
) -> Vec<Duration> {
    let mut file = AdfFile::open(&path).unwrap();
    for (p, v) in [
        ("model.provider", json!(base_url)),
        ("model.model_id", json!("bench")),
    ] {
        file.config_set_path(adf_store::Caller::Owner, p, ConfigAction::Set, v)
            .unwrap();
    }
    let executor = if inproc {
        Executor::new(Arc::new(InProcess), "bench", ModelParams::default())
    } else {
        let resolved = Resolver::new()
            .with_env(|_| None)
            .resolve(&file.config().unwrap(), None)
            .unwrap();
        Executor::from_resolved(resolved, RetryLog::default())
    };
    let mut session = executor.open_session(&mut file, "main").unwrap();
    let mut latencies = Vec::new();
    let mut n = 0u64;
    while Instant::now() < deadline {
        let start = Instant::now();
        executor
            .run_turn(
                &mut file,
                &mut session,
                Trigger::Owner(format!("hello {n}")),
                &Quiet,
            )
            .await
            .unwrap();
        n += 1;
        if n.is_multiple_of(window) {
            let seqs: Vec<i64> = file
                .loop_rows("main")
                .unwrap()
                .iter()
                .map(|r| r.seq)
                .collect();
            file.loop_remove("main", &seqs, false).unwrap();
            session.reset();
        }
        latencies.push(start.elapsed());
    }
    file.close().unwrap();
    latencies
}

fn main() {
    // `cargo bench` passes --bench; only our flags matter.
    let agents = arg("--agents", 1).max(1) as usize;
    let seconds = arg("--seconds", 5).max(1);
    let window = arg("--window", 50).max(1);
    let inproc = flag("--inproc");
    let threads = arg("--threads", 2).max(1) as usize;
    let rt = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .unwrap()
    };
    rt.block_on(async move {
        let mock = MockProvider::openai().await;
        mock.zero_latency(true);
        mock.repeat(Turn::text("ok"));
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<_> = (0..agents)
            .map(|i| {
                let path = dir.path().join(format!("a{i}.adf"));
                AdfFile::create(&path, &CreateOptions::default())
                    .unwrap()
                    .close()
                    .unwrap();
                path
            })
            .collect();
        // Warm-up: connections, statement caches, allocator.
        let warm = Instant::now() + Duration::from_millis(500);
        let _ = agent_loop(paths[0].clone(), mock.base_url(), warm, window, inproc).await;

        let started = Instant::now();
        let deadline = started + Duration::from_secs(seconds);
        let tasks: Vec<_> = paths
            .into_iter()
            .map(|p| tokio::spawn(agent_loop(p, mock.base_url(), deadline, window, inproc)))
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        let elapsed = started.elapsed().as_secs_f64();
        all.sort();
        let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
        println!(
            "provider={} agents={agents} threads={threads} seconds={seconds} window={window} turns={} turns/s={:.0} p50={:.3}ms p99={:.3}ms max={:.3}ms",
            if inproc { "inproc" } else { "http" },
            all.len(),
            all.len() as f64 / elapsed,
            pct(0.50).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
            all.last().unwrap().as_secs_f64() * 1e3,
        );
    });
}
