//! Runs a fixed number of mirrored turns on one file-backed agent, for instruction-count
//! profiles that do not depend on the machine's load:
//! `valgrind --tool=callgrind target/release/examples/turn_profile 2000`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use adf_runtime::bench::{MirrorProvider, agent_turns_counted, create_agents};
use adf_runtime::executor::Executor;

fn main() {
    let turns: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir().unwrap();
    let paths = create_agents(dir.path(), 1).unwrap();
    let provider = Arc::new(MirrorProvider::new(120));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let executor = Executor::new(provider, "bench", Default::default());
    let latencies = rt
        .block_on(agent_turns_counted(paths[0].clone(), executor, turns, 50))
        .unwrap();
    let total: Duration = latencies.iter().sum();
    eprintln!(
        "{} turns, mean {:.1} µs",
        latencies.len(),
        total.as_secs_f64() * 1e6 / latencies.len().max(1) as f64
    );
    // Every 50th turn carries the owner clear (`agent_turns_counted` clears after it).
    let (mut clearing, mut plain): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
    for (i, latency) in latencies.iter().enumerate() {
        if (i + 1) % 50 == 0 {
            clearing.push(*latency);
        } else {
            plain.push(*latency);
        }
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    eprintln!(
        "median µs: turns without a clear {:.1}, turns with the clear {:.1} ({} of them)",
        median(&mut plain),
        median(&mut clearing),
        clearing.len()
    );
    // Where the mean goes: the plain turns' tail (a WAL catch-up's `fsync`s, page faults).
    let us = |d: &Duration| d.as_secs_f64() * 1e6;
    let at = |p: f64| {
        plain
            .get(((plain.len() as f64 * p) as usize).min(plain.len().saturating_sub(1)))
            .map_or(0.0, us)
    };
    let slow: f64 = plain.iter().map(us).filter(|&t| t > 1000.0).sum();
    eprintln!(
        "plain turns µs: p90 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1}; {:.1} µs a turn in plain turns over 1 ms; mean of plain turns {:.1}",
        at(0.90),
        at(0.99),
        at(0.999),
        plain.last().map_or(0.0, us),
        slow / latencies.len().max(1) as f64,
        plain.iter().map(us).sum::<f64>() / plain.len().max(1) as f64,
    );
}
