//! One file, two writers: a daemon on 127.0.0.1 holds an agent file while the test, as `adf put`,
//! `adf config set`, `adf tool … sys_set_timer` and `adf authorize` do, opens the same file with
//! adf-store's own API (another connection, as another process would be) and writes it. Each
//! change takes effect in the daemon without a reload, within a few seconds. Deletes, by any
//! writer (owner API, a lambda, a turn, another writer), fire `on_file_change` like writes.
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

// ------------------------------------------------------------------------------------ deletes

/// Writes `seen/<random>.md` holding `<operation> <path>` of the event (of each event of a
/// batch, sorted, comma-separated).
const SEEN_OPERATION: &str = r#"
export async function main(event) {
  const tag = Math.floor(Math.random() * 1e12).toString(36);
  const seen = (event.events || [event]).map(e => `${e.data.operation} ${e.data.path}`).sort();
  await adf.fs_write({ path: `seen/${tag}.md`, content: seen.join(','), mode: 'write' });
}
"#;

/// Records its run in `rm-runs/`, then deletes `docs/doomed.md`.
const REMOVER: &str = r#"
export async function main(event) {
  const tag = Math.floor(Math.random() * 1e12).toString(36);
  await adf.fs_write({ path: `rm-runs/${tag}.md`, content: event.data.path, mode: 'write' });
  await adf.fs_delete({ path: 'docs/doomed.md' });
}
"#;

/// An agent whose `lib/seen.ts` records each `on_file_change` under `docs/**` (`include_self`:
/// its other lambdas' and its turns' changes count too), holding `files` besides, with
/// `fs_delete` enabled and `config` set.
fn recording_agent(
    dir: &Path,
    name: &str,
    files: &[(&str, &str)],
    more_targets: &[serde_json::Value],
    config: Vec<(&'static str, serde_json::Value)>,
) -> std::path::PathBuf {
    let mut all = vec![("lib/seen.ts", SEEN_OPERATION)];
    all.extend_from_slice(files);
    let mut targets = vec![json!({
        "scope": "system", "lambda": "lib/seen.ts:main",
        "filter": { "watch": "docs/**", "include_self": true }
    })];
    targets.extend_from_slice(more_targets);
    let mut config = config;
    config.extend([
        (
            "triggers",
            json!({ "on_file_change": { "enabled": true, "targets": targets } }),
        ),
        ("tools.fs_delete.enabled", json!(true)),
        ("tools.fs_delete.visible", json!(true)),
    ]);
    agent_file(dir, name, &all, &config)
}

/// What `lib/seen.ts` recorded, once everything before now has been dispatched: another
/// writer's `docs/zz-barrier.md` goes through the watcher after any change made before it
/// (a change reported twice would show up by then), and the queue drains.
async fn recorded_when_settled(path: &Path, agent: &Arc<Agent>) -> Vec<String> {
    outside(path, |file| write(file, "docs/zz-barrier.md", "barrier")).await;
    within("the barrier write fires on_file_change", || async {
        contents(agent, "seen/")
            .await
            .contains(&"write docs/zz-barrier.md".to_owned())
    })
    .await;
    drained(agent).await;
    contents(agent, "seen/").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fil_20_an_owner_delete_fires_on_file_change_once_and_an_unwatched_one_nothing() {
    let h = Harness::start().await;
    let path = recording_agent(
        h.dir.path(),
        "owner-deletes",
        &[("docs/plan.md", "plan"), ("notes/scratch.md", "scratch")],
        &[],
        Vec::new(),
    );
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    for file in ["docs%2Fplan.md", "notes%2Fscratch.md"] {
        h.client
            .call(
                reqwest::Method::DELETE,
                &format!("/agents/{}/files/content?path={file}", agent.id),
                None,
            )
            .await
            .unwrap();
    }
    within("the owner's delete fires on_file_change", || async {
        contents(&agent, "seen/")
            .await
            .contains(&"delete docs/plan.md".to_owned())
    })
    .await;
    assert_eq!(
        recorded_when_settled(&path, &agent).await,
        ["delete docs/plan.md", "write docs/zz-barrier.md"]
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fil_20_trg_03_a_lambda_delete_fires_on_file_change_once_and_never_for_the_lambda_itself() {
    let h = Harness::start().await;
    // The remover reacts to `cmd/**` and also watches the file it deletes, with include_self,
    // so only TRG-03 keeps it from receiving its own delete.
    let path = recording_agent(
        h.dir.path(),
        "lambda-deletes",
        &[("lib/rm.ts", REMOVER), ("docs/doomed.md", "doomed")],
        &[
            json!({ "scope": "system", "lambda": "lib/rm.ts:main", "filter": { "watch": "cmd/**" } }),
            json!({
                "scope": "system", "lambda": "lib/rm.ts:main",
                "filter": { "watch": "docs/doomed.md", "include_self": true }
            }),
        ],
        Vec::new(),
    );
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    put_file(&h, &agent, "cmd/go.md", "delete it").await;
    within("the lambda's delete fires on_file_change", || async {
        contents(&agent, "seen/")
            .await
            .contains(&"delete docs/doomed.md".to_owned())
    })
    .await;
    assert!(common::paths(&agent, "docs/doomed.md").await.is_empty());
    assert_eq!(
        recorded_when_settled(&path, &agent).await,
        ["delete docs/doomed.md", "write docs/zz-barrier.md"]
    );
    // The remover ran once, for the owner's put.
    assert_eq!(contents(&agent, "rm-runs/").await, ["cmd/go.md"]);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fil_20_a_delete_by_another_writer_fires_on_file_change_once_released_or_open() {
    let h = Harness::start().await;
    let path = recording_agent(
        h.dir.path(),
        "outside-deletes",
        &[
            ("docs/released.md", "one"),
            ("docs/open.md", "two"),
            ("notes/unwatched.md", "three"),
        ],
        &[],
        Vec::new(),
    );
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    // The daemon releases the file right after loading: the first delete finds it closed.
    assert!(released(&agent).await);
    // `adf rm FILE docs/released.md` while the daemon holds the file.
    outside(&path, |file| {
        file.file_delete_as_owner("docs/released.md", false)
            .unwrap();
    })
    .await;
    within("the delete while released fires on_file_change", || async {
        contents(&agent, "seen/").await == ["delete docs/released.md"]
    })
    .await;
    assert!(agent.store().is_open());
    outside(&path, |file| {
        file.file_delete_as_owner("docs/open.md", false).unwrap();
        file.file_delete_as_owner("notes/unwatched.md", false)
            .unwrap();
    })
    .await;
    within("the delete while open fires on_file_change", || async {
        contents(&agent, "seen/")
            .await
            .contains(&"delete docs/open.md".to_owned())
    })
    .await;
    assert_eq!(
        recorded_when_settled(&path, &agent).await,
        [
            "delete docs/open.md",
            "delete docs/released.md",
            "write docs/zz-barrier.md"
        ]
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fil_20_a_models_fs_delete_in_a_turn_fires_on_file_change_once() {
    use adf_testkit::{MockProvider, Turn, Wire};
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        Turn::tool_call("fs_delete", json!({ "path": "docs/doomed.md" })),
        Turn::text("deleted it"),
    ]);
    let h = Harness::start().await;
    let path = recording_agent(
        h.dir.path(),
        "turn-deletes",
        &[("docs/doomed.md", "doomed")],
        &[],
        common::model_config(&mock),
    );
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    common::chat(&h, &agent, "delete docs/doomed.md").await;
    within("the turn's delete fires on_file_change", || async {
        contents(&agent, "seen/")
            .await
            .contains(&"delete docs/doomed.md".to_owned())
    })
    .await;
    assert!(common::paths(&agent, "docs/doomed.md").await.is_empty());
    assert_eq!(
        recorded_when_settled(&path, &agent).await,
        ["delete docs/doomed.md", "write docs/zz-barrier.md"]
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fil_20_trg_07_outside_deletes_and_writes_share_a_debounced_targets_one_fire() {
    let h = Harness::start().await;
    // A quiet period long enough that one outside session's changes, dispatched together,
    // always fall in one window.
    let path = recording_agent(
        h.dir.path(),
        "debounced-deletes",
        &[("batched/a.md", "a"), ("batched/b.md", "b")],
        &[json!({
            "scope": "system", "lambda": "lib/seen.ts:main", "debounce_ms": 2500,
            "filter": { "watch": "batched/**" }
        })],
        Vec::new(),
    );
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    outside(&path, |file| {
        file.file_delete_as_owner("batched/a.md", false).unwrap();
        file.file_delete_as_owner("batched/b.md", false).unwrap();
        write(file, "batched/c.md", "c");
    })
    .await;
    let batch = "delete batched/a.md,delete batched/b.md,write batched/c.md";
    within("the debounced target fires", || async {
        contents(&agent, "seen/").await.contains(&batch.to_owned())
    })
    .await;
    assert_eq!(
        recorded_when_settled(&path, &agent).await,
        [batch, "write docs/zz-barrier.md"]
    );
    h.stop().await;
}
