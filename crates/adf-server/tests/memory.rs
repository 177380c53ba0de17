//! Resident memory of idle agents: 200 agents, each with an hourly timer, loaded into one
//! daemon. Its own test binary, so no other test shares the process whose RSS it reads.
//! The figure is printed (run with `--nocapture`); the assertion is a loose ceiling so the
//! test catches a regression by an order of magnitude, not noise. `adf bench idle` measures
//! 1,000 agents in release for BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use adf_runtime::home::RuntimeHome;
use adf_server::Daemon;
use adf_server::memory::{create_agents, measure_idle, resident_bytes};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_agents_cost_little_resident_memory() {
    if resident_bytes().is_none() {
        return; // no /proc here
    }
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    let paths = tokio::task::spawn_blocking(move || create_agents(&agents, 200))
        .await
        .unwrap()
        .unwrap();
    let daemon = Daemon::new(RuntimeHome::at(dir.path().join("home")));
    let report = measure_idle(&daemon, &paths).await.unwrap();
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    assert_eq!(daemon.agents().len(), 200);
    assert!(
        report.per_agent_bytes < 1024 * 1024,
        "idle agent costs {} bytes",
        report.per_agent_bytes
    );
    daemon.shutdown().await;
}
