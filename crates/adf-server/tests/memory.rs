//! Resident memory of idle agents: 200 agents, each with an hourly timer, loaded into one
//! daemon, then released (files closed, workers stopped) as the daemon's idle release does.
//! Its own test binary, so no other test shares the process whose RSS it reads. The figures
//! are printed (run with `--nocapture`); the memory assertion is a loose ceiling so the test
//! catches a regression by an order of magnitude, not noise. `adf bench idle` measures 1,000
//! agents in release for BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

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
    assert_eq!(report.released, 200, "every idle agent is released");
    assert!(daemon.agents().iter().all(|a| !a.store().is_open()));
    assert!(
        report.per_agent_bytes < 1024 * 1024,
        "idle agent costs {} bytes",
        report.per_agent_bytes
    );
    // Released files are cleanly closed, and the next request reopens one transparently.
    for path in &paths {
        assert!(!adf_store::sidecar(path, "-wal").exists(), "{path:?}");
    }
    let agent = &daemon.agents()[0];
    let name = agent
        .store()
        .run(|file| Ok(file.config()?["name"].clone()))
        .await
        .unwrap();
    assert_eq!(name, "idle 0");
    assert!(agent.store().is_open());
    daemon.shutdown().await;
    for path in &paths {
        assert!(!adf_store::sidecar(path, "-wal").exists(), "{path:?}");
    }
}
