//! One agent's shell fed pathological input while another agent is served (issue 28 findings
//! 1 and 2): `jq` over 200,000 `[`, a filter recursing without end and one generating without
//! end once took the whole daemon down (stack overflow: SIGABRT) or kept a core busy for good.
//! Now each ends with a clear error within the agent's budget, the neighbour's requests are
//! answered meanwhile, and the next command of the same agent works.

use std::time::{Duration, Instant};

use adf_server::Agent;
use reqwest::Method;
use serde_json::json;

use crate::common::{Harness, agent_file, drained, wait_for};

/// jq runs in `adf-jq-worker` (adf-shell); a workspace test run builds it beside this test
/// binary, a run of this crate alone may not have, so it is built here if missing.
fn ensure_jq_worker() {
    if adf_shell::worker::locate().is_ok() {
        return;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args(["build", "--quiet", "-p", "adf-shell", "--bin"])
        .arg(adf_shell::worker::WORKER_BIN)
        .current_dir(crate::common::repo_root())
        .status()
        .unwrap();
    assert!(status.success(), "building the jq worker failed");
    adf_shell::worker::locate().unwrap();
}

/// The jq workers this process (the daemon runs in it) has alive (Linux `/proc`).
fn live_workers() -> usize {
    adf_testkit::processes::live_children_named("adf-jq-worker")
}

fn content_path(agent: &Agent, path: &str) -> String {
    format!(
        "/agents/{}/files/content?path={}",
        agent.id,
        path.replace('/', "%2F")
    )
}

async fn put(h: &Harness, agent: &Agent, path: &str, content: &str) {
    let answered = tokio::time::timeout(
        Duration::from_secs(20),
        h.client.call(
            Method::PUT,
            &content_path(agent, path),
            Some(&json!({ "content": content })),
        ),
    )
    .await;
    answered
        .expect("the daemon answered the write")
        .expect("the write succeeded");
}

async fn read(agent: &Agent, path: &str) -> String {
    let path = path.to_owned();
    agent
        .store()
        .run(move |file| {
            Ok(file
                .file_read(&path)?
                .map(|e| String::from_utf8_lossy(&e.content).into_owned())
                .unwrap_or_default())
        })
        .await
        .unwrap()
}

/// One round trip of the neighbour through the front door: a write and its read back.
async fn neighbour_round_trip(h: &Harness, neighbour: &Agent, n: usize) -> Duration {
    let started = Instant::now();
    let text = format!("note {n}");
    put(h, neighbour, "notes/n.md", &text).await;
    let (status, body) = tokio::time::timeout(
        Duration::from_secs(20),
        h.client
            .raw(Method::GET, &content_path(neighbour, "notes/n.md"), None),
    )
    .await
    .expect("the daemon answered the read")
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.to_string().contains(&text), "{body}");
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_pathological_jq_leaves_the_daemon_and_its_other_agents_serving() {
    ensure_jq_worker();
    let h = Harness::start().await;
    // Each filter written under `in/` runs over `data.json`; a line's budget is 3 s.
    let command = "F=$(cat \"$(echo \"$EVENT\" | jq -r .data.path)\"); jq -c \"$F\" data.json >> results.log 2>> errors.log; echo \"exit $?\" >> results.log";
    let shelled = agent_file(
        h.dir.path(),
        "shelled",
        &[("data.json", &"[".repeat(200_000))],
        &[
            ("tools.adf_shell.enabled", json!(true)),
            ("limits.execution_timeout_ms", json!(3_000)),
            (
                "triggers",
                json!({
                    "on_file_change": { "enabled": true, "targets": [
                        { "scope": "system", "command": command, "filter": { "watch": "in/**" } }
                    ] },
                }),
            ),
        ],
    );
    let neighbour = agent_file(h.dir.path(), "neighbour", &[], &[]);
    let shelled = h.server.daemon.load(&shelled).await.unwrap().agent;
    let neighbour = h.server.daemon.load(&neighbour).await.unwrap().agent;

    // Finding 1: input nested 200,000 deep, then a filter recursing without end.
    put(&h, &shelled, "in/a.jq", ".").await;
    wait_for("the deep input was refused", || async {
        read(&shelled, "results.log").await == "exit 2\n"
    })
    .await;
    put(&h, &shelled, "data.json", "[1,2]").await;
    put(&h, &shelled, "in/b.jq", "def f: [f]; f").await;
    wait_for("the recursion was stopped", || async {
        read(&shelled, "results.log").await == "exit 2\nexit 5\n"
    })
    .await;
    let errors = read(&shelled, "errors.log").await;
    assert!(errors.contains("nests deeper than"), "{errors}");
    assert!(errors.contains("recurses too deeply"), "{errors}");

    // Finding 2: a generator without end, stopped at the line's budget. While its jq worker
    // spins, the neighbour is served through the front door, round trip after round trip.
    let spinning = Instant::now();
    put(&h, &shelled, "in/c.jq", "last(range(1e15))").await;
    wait_for("the endless filter runs", || async { live_workers() > 0 }).await;
    // Other tests of this binary run jq workers too, so a count of workers alone cannot tell
    // when this one ended: the loop also outlasts the line's budget.
    let budget = Duration::from_millis(3_000);
    let mut trips = 0;
    while trips < 3 || spinning.elapsed() < budget || live_workers() > 0 {
        let took = neighbour_round_trip(&h, &neighbour, trips).await;
        assert!(
            took < Duration::from_secs(5),
            "a neighbour's round trip took {took:?}"
        );
        trips += 1;
        assert!(
            spinning.elapsed() < Duration::from_secs(60),
            "the endless filter was never stopped"
        );
    }
    // It was stopped at its 3 s budget (the command after it in the same line did not run),
    // the neighbour was answered several times meanwhile, and the next command works.
    assert_eq!(read(&shelled, "results.log").await, "exit 2\nexit 5\n");
    put(&h, &shelled, "in/d.jq", "add").await;
    wait_for("the next command ran", || async {
        read(&shelled, "results.log").await.ends_with("3\nexit 0\n")
    })
    .await;
    assert_eq!(
        read(&shelled, "results.log").await,
        "exit 2\nexit 5\n3\nexit 0\n"
    );
    drained(&shelled).await;
    h.stop().await;
}
