//! One file, two writers: a daemon on 127.0.0.1 holds an agent file while the test, as `adf put`,
//! `adf config set`, `adf tool … sys_set_timer` and `adf authorize` do, opens the same file with
//! adf-store's own API (another connection, as another process would be) and writes it. Each
//! change takes effect in the daemon without a reload, within a few seconds.
use crate::common;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use adf_runtime::tools::approval::ApproveAll;
use adf_runtime::tools::{ToolCaller, ToolRegistry};
use adf_server::Agent;
use adf_store::{AdfFile, Caller, ConfigAction, FileProtection, FileWrite};
use common::{Harness, agent_file, drained, file_text, paths, put_file};
use serde_json::json;

/// Writes `seen/<random>.md` holding the path the event names.
const SEEN: &str = r#"
export async function main(event) {
  const tag = Math.floor(Math.random() * 1e12).toString(36);
  await adf.fs_write({ path: `seen/${tag}.md`, content: event.data.path, mode: 'write' });
}
"#;

/// Writes `ticks/<random>.md` for each timer fire.
const TICK: &str = r#"
export async function main(event) {
  const tag = Math.floor(Math.random() * 1e12).toString(36);
  await adf.fs_write({ path: `ticks/${tag}.md`, content: String(event.data.timer_id), mode: 'write' });
}
"#;

/// Overwrites the `read_only` file `locked.md`: only authorized code may.
const GUARD: &str = r#"
export async function main(event) {
  await adf.fs_write({ path: 'locked.md', content: 'by the lambda', mode: 'write' });
}
"#;

/// How long the daemon may take to notice another writer and act on it (its watcher ticks
/// every 500 ms); a bound on a polled condition, not a sleep, with room for a loaded machine.
const NOTICE_WITHIN: Duration = Duration::from_secs(10);

/// Polls `check` until it holds; fails the test past [`NOTICE_WITHIN`].
async fn within<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + NOTICE_WITHIN;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "not within {NOTICE_WITHIN:?}: {what}");
        if tokio::time::timeout(left, check()).await == Ok(true) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Another writer's session on the file, as one file command: open, `work`, close.
async fn outside(path: &Path, work: impl FnOnce(&mut AdfFile) + Send + 'static) {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut file = AdfFile::open(&path).unwrap();
        work(&mut file);
        file.close().unwrap();
    })
    .await
    .unwrap();
}

fn write(file: &mut AdfFile, path: &str, content: &str) {
    file.file_write(
        Caller::Owner,
        path,
        content.as_bytes(),
        &FileWrite::default(),
    )
    .unwrap();
}

/// The contents of the agent's files under `prefix`, sorted.
async fn contents(agent: &Agent, prefix: &str) -> Vec<String> {
    let mut texts = Vec::new();
    for path in paths(agent, prefix).await {
        texts.push(file_text(agent, &path).await.unwrap());
    }
    texts.sort();
    texts
}

fn watching_docs(lambda: &str) -> serde_json::Value {
    json!({
        "on_file_change": { "enabled": true, "targets": [
            { "scope": "system", "lambda": lambda, "filter": { "watch": "docs/**" } }
        ] }
    })
}

async fn released(agent: &Arc<Agent>) -> bool {
    let store = agent.store().clone();
    tokio::task::spawn_blocking(move || store.wait_until_released(NOTICE_WITHIN))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fil_20_a_file_put_by_another_writer_fires_on_file_change_released_or_open_and_own_writes_once()
 {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "watched",
        &[("lib/seen.ts", SEEN)],
        &[("triggers", watching_docs("lib/seen.ts:main"))],
    );
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    // The daemon releases the file right after loading: the first put finds it closed.
    assert!(released(&agent).await);
    outside(&path, |file| write(file, "docs/released.md", "one")).await;
    within("the put while released fires on_file_change", || async {
        contents(&agent, "seen/").await == ["docs/released.md"]
    })
    .await;
    // The re-read reopened the file and the worker keeps it open now: its own write through
    // the API, then one from outside.
    assert!(agent.store().is_open());
    put_file(&h, &agent, "docs/api.md", "two").await;
    outside(&path, |file| write(file, "docs/open.md", "three")).await;
    within("the put while open fires on_file_change", || async {
        contents(&agent, "seen/")
            .await
            .contains(&"docs/open.md".to_owned())
    })
    .await;
    drained(&agent).await;
    // Each write fired once: the daemon's own write is not found again as another writer's.
    assert_eq!(
        contents(&agent, "seen/").await,
        ["docs/api.md", "docs/open.md", "docs/released.md"]
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_configured_by_another_writer_takes_effect_without_a_reload() {
    let h = Harness::start().await;
    let path = agent_file(h.dir.path(), "configured", &[("lib/seen.ts", SEEN)], &[]);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    put_file(&h, &agent, "docs/before.md", "no trigger yet").await;
    drained(&agent).await;
    assert!(contents(&agent, "seen/").await.is_empty());
    // `adf config set triggers …` while the daemon holds the file.
    outside(&path, |file| {
        file.config_set_path(
            Caller::Owner,
            "triggers",
            ConfigAction::Set,
            watching_docs("lib/seen.ts:main"),
        )
        .unwrap();
    })
    .await;
    let mut n = 0;
    within("an owner write fires the trigger set outside", || {
        n += 1;
        let name = format!("docs/after-{n}.md");
        let (h, agent) = (&h, &agent);
        async move {
            put_file(h, agent, &name, "now watched").await;
            drained(agent).await;
            contents(agent, "seen/").await.contains(&name)
        }
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_set_by_another_writer_fires_without_a_reload() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "timed",
        &[("lib/tick.ts", TICK)],
        &[(
            "triggers",
            json!({ "on_timer": { "enabled": true, "targets": [
                { "scope": "system", "lambda": "lib/tick.ts:main" }
            ] } }),
        )],
    );
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    assert_eq!(h.server.daemon.next_timer_wake(&agent.id), None);
    // `adf tool FILE sys_set_timer --as owner` while the daemon holds the file.
    outside(&path, |file| {
        let set = ToolRegistry::with_builtins().call(
            file,
            &ToolCaller::Owner,
            "sys_set_timer",
            json!({
                "schedule": { "type": "delay", "delay_ms": 200 },
                "scope": ["system"],
                "lambda": "lib/tick.ts:main",
            }),
            &ApproveAll,
        );
        assert!(set.is_ok(), "{set:?}");
    })
    .await;
    within("the timer set outside fires", || async {
        !contents(&agent, "ticks/").await.is_empty()
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lambda_authorized_by_another_writer_runs_authorized_on_its_put() {
    let h = Harness::start().await;
    let path = agent_file(
        h.dir.path(),
        "guarded",
        &[
            ("lib/guard.ts", GUARD),
            ("locked.md", "as the owner left it"),
        ],
        &[("triggers", watching_docs("lib/guard.ts:main"))],
    );
    outside(&path, |file| {
        file.file_set_protection(Caller::Owner, "locked.md", FileProtection::ReadOnly)
            .unwrap();
    })
    .await;
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    // Unauthorized, the lambda cannot touch the read-only file.
    put_file(&h, &agent, "docs/first.md", "x").await;
    drained(&agent).await;
    assert_eq!(
        contents(&agent, "locked.md").await,
        ["as the owner left it"]
    );
    // `adf authorize FILE lib/guard.ts`, then `adf put FILE docs/second.md`.
    outside(&path, |file| {
        file.file_set_authorized(Caller::Owner, "lib/guard.ts", true)
            .unwrap();
        write(file, "docs/second.md", "y");
    })
    .await;
    within(
        "the put outside runs the lambda authorized outside",
        || async { contents(&agent, "locked.md").await == ["by the lambda"] },
    )
    .await;
    h.stop().await;
}
