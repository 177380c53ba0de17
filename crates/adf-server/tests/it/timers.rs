//! Timers in the daemon (spec §7.6, §7.7): the due-time scheduler fires interval and cron
//! timers, delivers system scope to the timer's lambda and agent scope to a turn, keeps
//! expired rows, fires a timer missed while the daemon was down exactly once on load, and
//! carries on across a restart (TRG-25..31, 34).
//!
//! No test sleeps for timing: each waits for the observable effect (a row, a file, an event)
//! with a bounded deadline. Cron is checked through the stored `next_wake_at` (a minute
//! boundary the scheduler is armed for) and through a fire made due by moving that time into
//! the past while the daemon is down, instead of waiting for the next minute.
use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adf_server::Agent;
use adf_store::test_support::{RowsWhere, tables};
use adf_store::{AdfFile, Caller, ConfigAction, CreateOptions, FileWrite, TimerRow};
use common::{Harness, wait_for};
use serde_json::{Value, json};

const REPORT_LAMBDA: &str = r#"
export async function main(event) {
  const n = event.data.run_count;
  await adf.fs_write({
    path: `reports/run-${n}.md`,
    content: `# Report ${n}\n${event.data.payload ?? ''}\n`,
    mode: 'write',
  });
  return { n };
}
"#;

/// A new agent in `dir/agents/<name>.adf` with `lib/report.ts` and `on_timer` targets of the
/// given scopes.
fn new_agent(dir: &Path, name: &str, scopes: &[&str]) -> PathBuf {
    let path = dir.join("agents").join(format!("{name}.adf"));
    let mut file = AdfFile::create(
        &path,
        &CreateOptions {
            name: Some(name.to_owned()),
            ..CreateOptions::default()
        },
    )
    .unwrap();
    file.file_write(
        Caller::Owner,
        "lib/report.ts",
        REPORT_LAMBDA.as_bytes(),
        &FileWrite::default(),
    )
    .unwrap();
    let targets: Vec<Value> = scopes.iter().map(|s| json!({ "scope": s })).collect();
    file.config_set_path(
        Caller::Owner,
        "triggers.on_timer",
        ConfigAction::Set,
        json!({ "enabled": true, "targets": targets }),
    )
    .unwrap();
    file.close().unwrap();
    path
}

async fn load(h: &Harness, path: &Path) -> Arc<Agent> {
    h.server.daemon.load(path).await.unwrap().agent
}

async fn timers(agent: &Agent) -> Vec<TimerRow> {
    agent.store().run(|file| file.timers()).await.unwrap()
}

async fn timer(agent: &Agent, id: i64) -> TimerRow {
    timers(agent)
        .await
        .into_iter()
        .find(|t| t.id == id)
        .expect("timer row kept")
}

async fn reports(agent: &Agent) -> Vec<String> {
    let files = agent.store().run(|file| file.file_list("reports/")).await;
    files.unwrap().into_iter().map(|info| info.path).collect()
}

async fn add_timer(h: &Harness, agent: &Agent, body: Value) -> i64 {
    let added = h
        .client
        .post(&format!("/agents/{}/timers", agent.id), Some(&body))
        .await
        .unwrap();
    added["id"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_26_trg_27_trg_28_trg_34_an_interval_timer_fires_its_lambda_across_a_restart_and_expires_as_history()
 {
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), "ticker", &["system"]);
    let agent = load(&h, &path).await;
    let id = add_timer(
        &h,
        &agent,
        json!({ "mode": "interval", "every_ms": 150, "max_runs": 4, "scope": ["system"],
                "lambda": "lib/report.ts:main", "payload": "hello from the timer" }),
    )
    .await;
    wait_for("two fires", || async {
        timer(&agent, id).await.run_count >= 2
    })
    .await;
    let row = timer(&agent, id).await;
    assert!(row.last_fired_at.is_some(), "TRG-27: last_fired_at set");
    assert!(!row.expired);
    // TRG-34: the payload reached the lambda, which wrote its report.
    wait_for("reports", || async { reports(&agent).await.len() >= 2 }).await;
    let report = agent
        .store()
        .run(|file| file.file_read("reports/run-1.md"))
        .await
        .unwrap()
        .expect("the first report");
    assert!(String::from_utf8_lossy(&report.content).contains("hello from the timer"));

    // Restart: the timer carries on in the new daemon and expires after max_runs.
    let dir = h.stop().await;
    let h = Harness::start_in(dir, None).await;
    let agent = load(&h, &path).await;
    wait_for("expiry", || async { timer(&agent, id).await.expired }).await;
    let row = timer(&agent, id).await;
    assert_eq!(row.run_count, 4, "TRG-26: max_runs 4 then expired");
    assert_eq!(
        h.server.daemon.next_timer_wake(&agent.id),
        None,
        "an expired timer arms nothing"
    );
    // TRG-28: the expired row stays as history.
    assert_eq!(timers(&agent).await.len(), 1);
    wait_for("four reports", || async {
        reports(&agent).await.len() == 4
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_30_trg_31_a_timer_due_while_the_daemon_was_down_fires_exactly_once_on_load() {
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), "sleeper", &["system"]);
    let now = adf_store::time::now_ms();
    {
        // Every minute, last due ten minutes ago: ten occurrences were missed.
        let mut file = AdfFile::open(&path).unwrap();
        file.timer_insert(&adf_store::timers::NewTimer {
            schedule: &json!({ "mode": "interval", "every_ms": 60_000 }),
            next_wake_at: now - 600_000,
            payload: Some("missed"),
            scope: &json!(["system"]),
            lambda: Some("lib/report.ts:main"),
            warm: false,
            locked: false,
            r#loop: None,
        })
        .unwrap();
        file.close().unwrap();
    }
    let agent = load(&h, &path).await;
    wait_for("the catch-up fire", || async {
        reports(&agent).await.len() == 1
    })
    .await;
    let row = timers(&agent).await.remove(0);
    assert_eq!(
        row.run_count, 1,
        "TRG-31: missed occurrences are not replayed"
    );
    assert!(row.next_wake_at > adf_store::time::now_ms() + 50_000);
    // The scheduler is armed for the next occurrence, a minute away: nothing else is due. It
    // re-arms when the fire's job has answered, which may be just after the report appears.
    let next = row.next_wake_at;
    wait_for("the scheduler re-armed for the next occurrence", || async {
        h.server.daemon.next_timer_wake(&agent.id) == Some(next)
    })
    .await;
    assert_eq!(reports(&agent).await, vec!["reports/run-1.md".to_owned()]);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_26_trg_30_a_cron_timer_arms_the_next_minute_and_fires_across_a_restart() {
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), "crony", &["system"]);
    let agent = load(&h, &path).await;
    let before = adf_store::time::now_ms();
    let id = add_timer(
        &h,
        &agent,
        json!({ "mode": "cron", "cron": "* * * * *", "scope": ["system"],
                "lambda": "lib/report.ts:main" }),
    )
    .await;
    let row = timer(&agent, id).await;
    assert_eq!(row.next_wake_at % 60_000, 0, "a minute boundary");
    assert!(row.next_wake_at > before && row.next_wake_at <= before + 60_000);
    assert_eq!(
        h.server.daemon.next_timer_wake(&agent.id),
        Some(row.next_wake_at),
        "the scheduler sleeps until the cron time"
    );
    // Down across the boundary: move the wake time into the past, as if it passed meanwhile.
    let dir = h.stop().await;
    {
        let file = AdfFile::open(&path).unwrap();
        let passed = json!(row.next_wake_at - 120_000);
        let this_timer = RowsWhere::new("id", id);
        let changed = tables(&file).set_column("adf_timers", &this_timer, "next_wake_at", &passed);
        assert_eq!(changed.unwrap(), 1);
        file.close().unwrap();
    }
    let h = Harness::start_in(dir, None).await;
    let agent = load(&h, &path).await;
    wait_for("the cron fire", || async {
        timer(&agent, id).await.run_count == 1
    })
    .await;
    let row = timer(&agent, id).await;
    let now = adf_store::time::now_ms();
    assert_eq!(row.next_wake_at % 60_000, 0);
    assert!(row.next_wake_at > now - 1_000 && row.next_wake_at <= now + 60_000);
    assert!(!row.expired);
    wait_for("the report", || async { reports(&agent).await.len() == 1 }).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_25_trg_28_a_scope_is_delivered_only_with_a_target_and_a_once_timer_is_kept_expired() {
    let h = Harness::start().await;
    // Only a system target: an agent-scope timer fires (recorded) but wakes nothing.
    let path = new_agent(h.dir.path(), "quiet", &["system"]);
    let agent = load(&h, &path).await;
    let id = add_timer(
        &h,
        &agent,
        json!({ "mode": "once_delay", "delay_ms": 50, "scope": ["agent"], "payload": "wake up" }),
    )
    .await;
    wait_for("the once fire", || async {
        timer(&agent, id).await.expired
    })
    .await;
    let row = timer(&agent, id).await;
    assert_eq!(row.run_count, 1);
    let loop_rows = agent
        .store()
        .run(|file| file.loop_row_count())
        .await
        .unwrap();
    assert_eq!(loop_rows, 0, "TRG-25: no agent target, no turn");

    // With an agent target and no model reachable: a warn row, never a crash.
    let path = new_agent(h.dir.path(), "nomodel", &["agent"]);
    let agent = load(&h, &path).await;
    agent
        .store()
        .run(|file| {
            file.config_set_path(
                Caller::Owner,
                "model.provider",
                ConfigAction::Set,
                json!("no-such-provider"),
            )
        })
        .await
        .unwrap();
    let id = add_timer(
        &h,
        &agent,
        json!({ "mode": "once_delay", "delay_ms": 50, "scope": ["agent"], "payload": "wake up" }),
    )
    .await;
    wait_for("the skipped turn", || async {
        let warned = ["turn_skipped", "trigger_turn_failed"];
        let rows = agent.store().run(|file| tables(file).logs()).await.unwrap();
        rows.iter()
            .filter(|row| row.origin.as_deref() == Some("executor") && row.level == "warn")
            .filter(|row| row.event.as_deref().is_some_and(|e| warned.contains(&e)))
            .count()
            == 1
    })
    .await;
    assert!(timer(&agent, id).await.expired, "TRG-28: kept, expired");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trg_37_a_sh_timer_lambda_runs_the_whole_script_through_adf_shell() {
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), "scripted", &["system"]);
    {
        let mut file = AdfFile::open(&path).unwrap();
        let script = "#!/bin/sh\n# a headless job\nN=$(echo \"$EVENT\" | jq .data.run_count)\ncat <<EOF > reports/sh-run-$N.md\n$EVENT_TYPE run $N\nEOF\nnode -e 'console.log(\"from node \" + 6 * 7)' >> reports/sh-run-$N.md\n";
        file.file_write(
            Caller::Owner,
            "jobs/report.sh",
            script.as_bytes(),
            &FileWrite::default(),
        )
        .unwrap();
        file.config_set_path(
            Caller::Owner,
            "tools.adf_shell.enabled",
            ConfigAction::Set,
            json!(true),
        )
        .unwrap();
        file.close().unwrap();
    }
    let agent = load(&h, &path).await;
    add_timer(
        &h,
        &agent,
        json!({ "mode": "interval", "every_ms": 150, "max_runs": 2, "scope": ["system"], "lambda": "jobs/report.sh" }),
    )
    .await;
    wait_for("two script reports", || async {
        reports(&agent).await == ["reports/sh-run-1.md", "reports/sh-run-2.md"]
    })
    .await;
    let report = agent
        .store()
        .run(|file| file.file_read("reports/sh-run-2.md"))
        .await
        .unwrap()
        .expect("the second report");
    // `node` inside the script ran in the sandbox through the daemon's deferred-call driver.
    assert_eq!(
        String::from_utf8_lossy(&report.content),
        "on_timer run 2\nfrom node 42\n"
    );
    h.stop().await;
}
