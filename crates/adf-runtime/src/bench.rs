//! The turn-overhead bench, shared by `adf bench turns` and `cargo bench --bench turns`.
//!
//! It mirrors the reference's "overhead" scenario: file-backed agents created with the default
//! config (so the full default tool list rides on every request), a zero-latency in-process
//! provider answering like the reference's `MockLLMProvider` (about 120 tokens of text in 8
//! deltas, usage reported, `end_turn`), turns back to back with one in flight per agent, and
//! the loop cleared every `window` turns the way an owner clear does (audit row when
//! `context.audit.loop` is on, then the rows), standing in for the reference's compaction so
//! the figure does not depend on how long the run lasts.
//!
//! The provider is in-process, so no request body is built, sent or parsed: what is measured is
//! the executor (config reads, prompt snapshot, transcript rows and checkpoints in SQLite).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use adf_providers::{
    AssistantMessage, ChatRequest, ContentBlock, EventStream, ModelParams, Provider, ProviderError,
    StopReason, StreamEvent, Usage,
};
use adf_store::{AdfFile, CreateOptions, StoreError};
use futures::future::BoxFuture;
use serde::Serialize;

use crate::executor::{Executor, ExecutorError, Trigger, TurnHost};
use crate::tools::Approver;
use crate::tools::approval::DenyAll;

/// How many stream deltas the reference's mock splits its text into (`streamDeltas`).
pub const MIRROR_DELTAS: usize = 8;

/// The reference's mock counts one word per 1.3 tokens: `floor(tokens / 1.3)` words.
const TOKENS_PER_WORD: f64 = 1.3;

/// What the in-process provider answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reply {
    /// The reference-shaped reply of [`MirrorProvider`].
    #[default]
    Mirror,
    /// A bare "ok" in one delta (the figure BENCHMARKS.md reported before the mirror existed).
    Ok,
}

/// An in-process provider answering at once like the reference's `MockLLMProvider`: the text
/// `"mock-<n> "` repeated `floor(tokens / 1.3)` times (n counts calls), streamed in
/// [`MIRROR_DELTAS`] text deltas, then usage `{tokens, tokens}` and `end_turn`.
#[derive(Debug)]
pub struct MirrorProvider {
    tokens: u64,
    calls: AtomicU64,
}

impl MirrorProvider {
    /// A provider whose replies weigh `tokens` tokens (the reference's overhead scenario uses 120).
    pub fn new(tokens: u64) -> Self {
        MirrorProvider {
            tokens,
            calls: AtomicU64::new(0),
        }
    }

    /// The full text of reply number `call` (1-based).
    pub fn reply_text(&self, call: u64) -> String {
        let words = (self.tokens as f64 / TOKENS_PER_WORD).floor() as usize;
        format!("mock-{call} ").repeat(words)
    }

    /// The events of the next reply, in stream order.
    pub fn next_events(&self) -> Vec<StreamEvent> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let text = self.reply_text(call);
        let mut events: Vec<StreamEvent> = split_in(&text, MIRROR_DELTAS)
            .into_iter()
            .map(StreamEvent::TextDelta)
            .collect();
        events.push(StreamEvent::Usage(Usage {
            input: self.tokens,
            output: self.tokens,
            ..Usage::default()
        }));
        events.push(StreamEvent::Stop(StopReason::EndTurn));
        events
    }
}

/// `text` cut into `parts` pieces of near-equal length in chars (on char boundaries).
fn split_in(text: &str, parts: usize) -> Vec<String> {
    let parts = parts.max(1);
    let size = text.chars().count().div_ceil(parts).max(1);
    let mut pieces = Vec::with_capacity(parts);
    let mut rest = text;
    while !rest.is_empty() {
        let cut = rest
            .char_indices()
            .nth(size)
            .map_or(rest.len(), |(at, _)| at);
        let (piece, after) = rest.split_at(cut);
        pieces.push(piece.to_owned());
        rest = after;
    }
    // A short text still streams as `parts` deltas, as the reference's does.
    while pieces.len() < parts {
        pieces.push(String::new());
    }
    pieces
}

impl Provider for MirrorProvider {
    fn id(&self) -> &str {
        "mirror"
    }

    fn stream<'a>(
        &'a self,
        _req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, ProviderError>> {
        let events: Vec<Result<StreamEvent, ProviderError>> =
            self.next_events().into_iter().map(Ok).collect();
        Box::pin(async move { Ok(Box::pin(futures::stream::iter(events)) as EventStream) })
    }

    fn complete<'a>(
        &'a self,
        _req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<AssistantMessage, ProviderError>> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let text = self.reply_text(call);
        Box::pin(async move {
            Ok(AssistantMessage {
                content: vec![ContentBlock::text(text)],
                ..AssistantMessage::default()
            })
        })
    }
}

/// An in-process provider answering "ok" in one delta.
#[derive(Debug)]
pub struct OkProvider;

impl Provider for OkProvider {
    fn id(&self) -> &str {
        "ok"
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

/// A failed bench run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// Creating, opening or clearing an agent file failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A turn failed.
    #[error(transparent)]
    Turn(#[from] ExecutorError),
    /// The temporary folder or the async runtime could not be set up.
    #[error("bench setup failed: {0}")]
    Io(#[from] std::io::Error),
    /// An agent task panicked or was cancelled.
    #[error("an agent task failed: {0}")]
    Task(String),
    /// The run finished no turn, so there is nothing to report.
    #[error("no turn finished in the run")]
    NoTurns,
}

/// What [`run_turns`] runs.
#[derive(Debug, Clone)]
pub struct TurnOptions {
    /// Agents, each with one turn in flight at a time.
    pub agents: usize,
    /// How long turns are started, after the warm-up.
    pub duration: Duration,
    /// Turns between owner clears of the loop.
    pub window: u64,
    /// Worker threads of the async runtime (1: a current-thread runtime).
    pub threads: usize,
    /// The provider's reply.
    pub reply: Reply,
    /// Tokens per mirror reply (the reference's overhead scenario uses 120).
    pub tokens: u64,
    /// Turns run on one agent before measuring (statement caches, allocator).
    pub warmup: Duration,
}

impl Default for TurnOptions {
    fn default() -> Self {
        TurnOptions {
            agents: 1,
            duration: Duration::from_secs(5),
            window: 50,
            threads: 2,
            reply: Reply::Mirror,
            tokens: 120,
            warmup: Duration::from_millis(500),
        }
    }
}

/// The figures of one run.
#[derive(Debug, Clone, Serialize)]
pub struct TurnStats {
    /// Which provider answered (`mirror`, `ok`, `http`).
    pub provider: String,
    /// Agents run side by side.
    pub agents: usize,
    /// Worker threads.
    pub threads: usize,
    /// Turns between owner clears.
    pub window: u64,
    /// Measured wall time in seconds.
    pub seconds: f64,
    /// Turns finished.
    pub turns: usize,
    /// Turns finished per second of wall time, all agents together.
    pub turns_per_second: f64,
    /// Median turn latency in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile turn latency in milliseconds.
    pub p99_ms: f64,
    /// Slowest turn in milliseconds.
    pub max_ms: f64,
}

impl TurnStats {
    /// Figures from every turn's latency over `elapsed` of wall time.
    pub fn from_latencies(
        provider: &str,
        agents: usize,
        threads: usize,
        window: u64,
        elapsed: Duration,
        mut latencies: Vec<Duration>,
    ) -> Result<Self, BenchError> {
        latencies.sort();
        let max = *latencies.last().ok_or(BenchError::NoTurns)?;
        let pct = |p: f64| {
            let i = ((latencies.len() as f64 * p) as usize).min(latencies.len() - 1);
            latencies[i]
        };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let seconds = elapsed.as_secs_f64();
        Ok(TurnStats {
            provider: provider.to_owned(),
            agents,
            threads,
            window,
            seconds,
            turns: latencies.len(),
            turns_per_second: latencies.len() as f64 / seconds.max(f64::MIN_POSITIVE),
            p50_ms: ms(pct(0.50)),
            p99_ms: ms(pct(0.99)),
            max_ms: ms(max),
        })
    }

    /// One line in the format BENCHMARKS.md quotes.
    pub fn line(&self) -> String {
        format!(
            "provider={} agents={} threads={} seconds={:.1} window={} turns={} turns/s={:.0} p50={:.3}ms p99={:.3}ms max={:.3}ms",
            self.provider,
            self.agents,
            self.threads,
            self.seconds,
            self.window,
            self.turns,
            self.turns_per_second,
            self.p50_ms,
            self.p99_ms,
            self.max_ms
        )
    }
}

/// The bench answers no approval and no question: the mock never calls a tool.
struct Quiet;

impl TurnHost for Quiet {
    fn approver(&self) -> &dyn Approver {
        &DenyAll
    }
    fn answer(&self, _question: &str) -> Option<String> {
        None
    }
}

/// Creates `count` agent files with the default config in `dir`.
pub fn create_agents(dir: &Path, count: usize) -> Result<Vec<PathBuf>, BenchError> {
    (0..count)
        .map(|i| {
            let path = dir.join(format!("a{i}.adf"));
            AdfFile::create(&path, &CreateOptions::default())?.close()?;
            Ok(path)
        })
        .collect()
}

/// Runs turns on the agent at `path` back to back until `deadline`, clearing the main loop
/// every `window` turns as the owner's clear does, and returns each turn's latency (a clear
/// counts in the turn that triggered it).
pub async fn agent_turns(
    path: PathBuf,
    executor: Executor,
    deadline: Instant,
    window: u64,
) -> Result<Vec<Duration>, BenchError> {
    agent_turns_while(path, executor, window, |_| Instant::now() < deadline).await
}

/// Runs `turns` turns on the agent at `path` as [`agent_turns`] does: a fixed amount of work,
/// for instruction-count profiles (`examples/turn_profile.rs`).
pub async fn agent_turns_counted(
    path: PathBuf,
    executor: Executor,
    turns: u64,
    window: u64,
) -> Result<Vec<Duration>, BenchError> {
    agent_turns_while(path, executor, window, |done| done < turns).await
}

async fn agent_turns_while(
    path: PathBuf,
    executor: Executor,
    window: u64,
    keep_going: impl Fn(u64) -> bool,
) -> Result<Vec<Duration>, BenchError> {
    let mut file = AdfFile::open(&path)?;
    let mut session = executor.open_session(&mut file, "main")?;
    let mut latencies = Vec::new();
    let mut n = 0u64;
    while keep_going(n) {
        // Agents take turns with the runtime's threads between turns, as a daemon's agents
        // do while they wait for their next trigger. Without it a task that never waits (the
        // provider answers at once) yields only when tokio's cooperative budget runs out in
        // the file lock, mid-turn, and that turn's latency then holds the turns of the other
        // agents on its thread.
        tokio::task::yield_now().await;
        let start = Instant::now();
        executor
            .run_turn(
                &mut file,
                &mut session,
                Trigger::Owner(format!("hello {n}")),
                &Quiet,
            )
            .await?;
        n += 1;
        if n.is_multiple_of(window.max(1)) {
            let audit = file.audit_enabled("loop")?;
            file.loop_clear("main", audit)?;
            session.reset();
        }
        latencies.push(start.elapsed());
    }
    file.close()?;
    Ok(latencies)
}

/// Drives `agent_turns` on every path at once (one task per agent) for `duration` after a
/// `warmup` on the first agent, with executors from `executor`, and returns the figures.
pub async fn drive(
    paths: Vec<PathBuf>,
    executor: impl Fn() -> Executor,
    provider: &str,
    threads: usize,
    window: u64,
    duration: Duration,
    warmup: Duration,
) -> Result<TurnStats, BenchError> {
    let agents = paths.len();
    if let Some(first) = paths.first() {
        agent_turns(first.clone(), executor(), Instant::now() + warmup, window).await?;
    }
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = paths
        .into_iter()
        .map(|p| tokio::spawn(agent_turns(p, executor(), deadline, window)))
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.map_err(|e| BenchError::Task(e.to_string()))??);
    }
    TurnStats::from_latencies(provider, agents, threads, window, started.elapsed(), all)
}

/// Removes the bench's temporary folder however the run ends.
struct TempFolder(PathBuf);

impl Drop for TempFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the in-process turn bench described in the module docs in a fresh temporary folder.
pub fn run_turns(options: &TurnOptions) -> Result<TurnStats, BenchError> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let folder = TempFolder(
        std::env::temp_dir().join(format!("adf-bench-turns-{}-{stamp}", std::process::id())),
    );
    std::fs::create_dir_all(&folder.0)?;
    let paths = create_agents(&folder.0, options.agents.max(1))?;
    let threads = options.threads.max(1);
    let rt = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    let provider: Arc<dyn Provider> = match options.reply {
        Reply::Mirror => Arc::new(MirrorProvider::new(options.tokens)),
        Reply::Ok => Arc::new(OkProvider),
    };
    let label = provider.id().to_owned();
    let make = || Executor::new(provider.clone(), "bench", ModelParams::default());
    rt.block_on(drive(
        paths,
        make,
        &label,
        threads,
        options.window.max(1),
        options.duration,
        options.warmup,
    ))
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn split_in_cuts_on_char_boundaries_into_near_equal_pieces() {
        let pieces = split_in("héllo wörld", 3);
        assert_eq!(pieces, ["héll", "o wö", "rld"]);
        assert_eq!(split_in("ab", 4), ["a", "b", "", ""]);
    }

    #[test]
    fn mirror_reply_streams_eight_deltas_that_make_the_whole_text_and_reports_usage() {
        let provider = MirrorProvider::new(120);
        let events = provider.next_events();
        let deltas: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas.len(), 8);
        // floor(120 / 1.3) = 92 words of "mock-1 ".
        let expected = "mock-1 ".repeat(92);
        assert_eq!(deltas.concat(), expected);
        assert!(deltas.iter().all(|d| !d.is_empty()));
        let usage = events.iter().find_map(|e| match e {
            StreamEvent::Usage(u) => Some(*u),
            _ => None,
        });
        let usage = usage.expect("usage is reported");
        assert_eq!((usage.input, usage.output), (120, 120));
        assert!(matches!(
            events.last(),
            Some(StreamEvent::Stop(StopReason::EndTurn))
        ));
        // The next call numbers its words anew, like the reference's call counter.
        assert!(
            provider
                .next_events()
                .iter()
                .any(|e| matches!(e, StreamEvent::TextDelta(t) if t.starts_with("mock-2 ")))
        );
    }
}
