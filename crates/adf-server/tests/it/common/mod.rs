//! Shared test helpers: a daemon on 127.0.0.1:0 with a temporary `$ADF_HOME` and copies of
//! the reference fixtures (the originals are never opened in place).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use adf_runtime::home::RuntimeHome;
use adf_server::Agent;
use adf_server::client::Client;
use adf_server::{Daemon, FrontDoor, RunningServer};
use adf_store::test_support::{LogRow, Row, tables};
use tempfile::TempDir;

/// The reference runtime's fixtures, kept in the repository.
pub fn fixtures() -> PathBuf {
    repo_root().join("testdata/reference-v0.4.2")
}

/// The reference daemon's recorded transcripts, kept in the repository.
pub fn transcripts() -> PathBuf {
    repo_root().join("testdata/daemon-transcripts")
}

pub struct Harness {
    pub dir: TempDir,
    pub server: RunningServer,
    pub client: Client,
    /// The token the daemon requires (the client sends it).
    pub token: String,
}

impl Harness {
    /// A daemon with the home's token (`$ADF_HOME/daemon-token`); `client` sends it.
    pub async fn start() -> Self {
        Self::start_with_token(None).await
    }

    /// A daemon whose token is `token` (as `ADF_DAEMON_TOKEN` would set it), else the home's.
    pub async fn start_with_token(token: Option<&str>) -> Self {
        Self::start_with(fresh_dir(), |front| {
            if let Some(token) = token {
                front.token = token.to_owned();
            }
        })
        .await
    }

    /// Starts a daemon over an existing folder (for restart tests).
    pub async fn start_in(dir: TempDir, token: Option<&str>) -> Self {
        Self::start_with(dir, |front| {
            if let Some(token) = token {
                front.token = token.to_owned();
            }
        })
        .await
    }

    /// A daemon whose front door `adjust` configures (starting from the home's token); the
    /// client sends the token in the end.
    pub async fn start_with(dir: TempDir, adjust: impl FnOnce(&mut FrontDoor)) -> Self {
        capture_daemon_warnings();
        let home = RuntimeHome::at(dir.path().join("home"));
        let mut front = FrontDoor::for_home(&home, None).unwrap();
        adjust(&mut front);
        let token = front.token.clone();
        let server = RunningServer::start(Daemon::new(home), "127.0.0.1", 0, front)
            .await
            .unwrap();
        let client = Client::new(&server.url(), Some(token.clone())).unwrap();
        Self {
            dir,
            server,
            client,
            token,
        }
    }

    /// Copies a fixture into the agents folder under `name`.
    pub fn copy_fixture(&self, fixture: &str, name: &str) -> PathBuf {
        copy_fixture(self.dir.path(), fixture, name)
    }

    pub async fn stop(self) -> TempDir {
        self.server.shutdown().await.unwrap();
        self.dir
    }
}

/// The daemon's warnings go to the output of the test that caused them, shown when it fails:
/// a warning such as "ws_connections entry not opened" says why a test waited in vain.
fn capture_daemon_warnings() {
    let _set_by_an_earlier_test = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .try_init();
}

/// A temporary folder with empty `home/` and `agents/`.
pub fn fresh_dir() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    std::fs::create_dir_all(dir.path().join("agents")).unwrap();
    dir
}

pub fn copy_fixture(dir: &Path, fixture: &str, name: &str) -> PathBuf {
    let target = dir.join("agents").join(name);
    std::fs::copy(fixtures().join(fixture), &target).unwrap();
    target
}

/// The `-wal`/`-shm` sidecars of `path` that exist.
pub fn sidecars(path: &Path) -> Vec<PathBuf> {
    ["-wal", "-shm"]
        .iter()
        .map(|s| PathBuf::from(format!("{}{s}", path.display())))
        .filter(|p| p.exists())
        .collect()
}

/// Polls `check` until it holds (a failure guard of 60 s, not a timing assumption); every
/// poll is bounded too, so a request that hangs fails the test instead of blocking it.
pub async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        assert!(!left.is_zero(), "timed out: {what}");
        if tokio::time::timeout(left, check()).await == Ok(true) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A new agent file `<dir>/agents/<name>.adf` with `files` stored as the owner and `config`
/// set path by path (`"triggers"`, `"state"`, ...).
pub fn agent_file(
    dir: &Path,
    name: &str,
    files: &[(&str, &str)],
    config: &[(&str, serde_json::Value)],
) -> PathBuf {
    use adf_store::{AdfFile, Caller, ConfigAction, CreateOptions, FileWrite};
    let path = dir.join("agents").join(format!("{name}.adf"));
    let mut file = AdfFile::create(
        &path,
        &CreateOptions {
            name: Some(name.to_owned()),
            ..CreateOptions::default()
        },
    )
    .unwrap();
    for (path, source) in files {
        file.file_write(
            Caller::Owner,
            path,
            source.as_bytes(),
            &FileWrite::default(),
        )
        .unwrap();
    }
    for (key, value) in config {
        file.config_set_path(Caller::Owner, key, ConfigAction::Set, value.clone())
            .unwrap();
    }
    file.close().unwrap();
    path
}

/// The paths of an agent's files under `prefix`, sorted.
pub async fn paths(agent: &Agent, prefix: &str) -> Vec<String> {
    let prefix = prefix.to_owned();
    agent
        .job(move |file| file.file_list(&prefix))
        .await
        .unwrap()
        .into_iter()
        .map(|info| info.path)
        .collect()
}

/// Every row of `table` in the agent's file, in rowid order. Read through `Agent::job`, so it
/// also answers while a turn waits for the owner.
pub async fn table_rows(agent: &Agent, table: &'static str) -> Vec<Row> {
    agent
        .job(move |file| tables(file).rows(table))
        .await
        .unwrap()
}

/// The text column `column` of every row of `table`, in rowid order.
pub async fn column_texts(agent: &Agent, table: &'static str, column: &str) -> Vec<String> {
    table_rows(agent, table)
        .await
        .iter()
        .map(|row| row[column].as_str().unwrap().to_owned())
        .collect()
}

/// Every log row of the agent's file, oldest first.
pub async fn log_rows(agent: &Agent) -> Vec<LogRow> {
    agent.job(|file| tables(file).logs()).await.unwrap()
}

/// The log rows of one `origin`, oldest first.
pub async fn logs_of(agent: &Agent, origin: &str) -> Vec<LogRow> {
    let mut rows = log_rows(agent).await;
    rows.retain(|row| row.origin.as_deref() == Some(origin));
    rows
}

/// `origin event level` of every log row of `origins`, oldest first.
pub async fn origin_event_levels(agent: &Agent, origins: &[&str]) -> Vec<String> {
    let rows = log_rows(agent).await.into_iter();
    rows.filter(|row| row.origin.as_deref().is_some_and(|o| origins.contains(&o)))
        .map(|row| {
            let event = row.event.unwrap_or_default();
            format!("{} {event} {}", row.origin.unwrap_or_default(), row.level)
        })
        .collect()
}

/// The content of the agent's file at `path` as text, if it exists.
pub async fn file_text(agent: &Agent, path: &str) -> Option<String> {
    let path = path.to_owned();
    agent
        .job(move |file| file.file_read(&path))
        .await
        .unwrap()
        .map(|entry| String::from_utf8(entry.content).unwrap())
}

/// The text of every transcript row, in order, all loops together.
pub async fn loop_texts(agent: &Agent) -> Vec<String> {
    transcript(agent, None).await
}

/// The text of every transcript row of `loop_name`, in order.
pub async fn loop_texts_in(agent: &Agent, loop_name: &str) -> Vec<String> {
    transcript(agent, Some(loop_name)).await
}

/// The stored `content_json` of every transcript row (of one loop, or all), in `seq` order.
async fn transcript(agent: &Agent, loop_name: Option<&str>) -> Vec<String> {
    let mut rows = table_rows(agent, "adf_loop").await;
    rows.retain(|row| loop_name.is_none_or(|name| row["loop"] == name));
    rows.sort_by_key(|row| row["seq"].as_i64());
    rows.iter()
        .map(|row| row["content_json"].as_str().unwrap().to_owned())
        .collect()
}

/// Whether a transcript row of `loop_name` contains `needle`.
pub async fn has_text(agent: &Agent, loop_name: &str, needle: &str) -> bool {
    loop_texts_in(agent, loop_name)
        .await
        .iter()
        .any(|t| t.contains(needle))
}

/// `POST /agents/{id}/chat` with `text`; the daemon must accept it (202). Returns the body.
pub async fn chat(h: &Harness, agent: &Agent, text: &str) -> serde_json::Value {
    let (status, body) = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        h.client.raw(
            reqwest::Method::POST,
            &format!("/agents/{}/chat", agent.id),
            Some(&serde_json::json!({ "text": text })),
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("POST chat did not answer"))
    .unwrap();
    assert_eq!(status, 202, "{body}");
    body
}

/// Waits until the agent's trigger queue has nothing left to drain.
pub async fn drained(agent: &Agent) {
    wait_for("the trigger queue drained", || async {
        !agent.triggers().stats().draining
    })
    .await;
}

/// Sets the agent's `state` through the config API (read, change, `PUT` back).
pub async fn set_state(h: &Harness, agent: &Agent, state: &str) {
    let mut config = stored_config(h, agent).await;
    config["state"] = serde_json::json!(state);
    h.client
        .call(
            reqwest::Method::PUT,
            &format!("/agents/{}/config", agent.id),
            Some(&config),
        )
        .await
        .unwrap();
}

/// The config paths that point an agent at the mock provider.
pub fn model_config(mock: &adf_testkit::MockProvider) -> Vec<(&'static str, serde_json::Value)> {
    vec![
        (
            "providers",
            serde_json::json!([{ "id": "mock", "type": "openai-compatible", "name": "Mock", "baseUrl": mock.base_url() }]),
        ),
        ("model.provider", serde_json::json!("mock")),
        ("model.model_id", serde_json::json!("mock-model")),
        (
            "recovery",
            serde_json::json!({ "auto_retry": false, "max_attempts": 1, "base_delay_ms": 1, "max_delay_ms": 5 }),
        ),
    ]
}

/// The repository root, found at run time: cargo sets `CARGO_MANIFEST_DIR` for the test
/// process, and a test binary reused from a shared build cache may have been compiled in
/// another checkout, so the compile-time value could point at someone else's tree.
pub fn repo_root() -> std::path::PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir.join("../..")
}

/// `method path` with `body` through the harness's client: the status and the JSON answer.
pub async fn status(
    h: &Harness,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    h.client.raw(method, path, body.as_ref()).await.unwrap()
}

/// Panics unless `method path` with `body` answers `expected`, showing the answer.
pub async fn assert_status(
    h: &Harness,
    method: reqwest::Method,
    path: &str,
    body: Option<&serde_json::Value>,
    expected: u16,
) {
    let (status, answer) = h.client.raw(method, path, body).await.unwrap();
    assert_eq!(status, expected, "{path}: {answer}");
}

/// Writes the agent's file `path` as the owner, through `PUT /agents/{id}/files/content`.
pub async fn put_file(h: &Harness, agent: &Agent, path: &str, content: &str) {
    h.client
        .call(
            reqwest::Method::PUT,
            &format!(
                "/agents/{}/files/content?path={}",
                agent.id,
                path.replace('/', "%2F")
            ),
            Some(&serde_json::json!({ "content": content })),
        )
        .await
        .unwrap();
}

/// The agent's DID as `GET /agents/{id}/identity/did` answers it.
pub async fn did_of(h: &Harness, id: &str) -> String {
    h.client
        .get(&format!("/agents/{id}/identity/did"))
        .await
        .unwrap()["did"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The owner's local keys in the harness's home, created on first use.
pub fn owner_keys(h: &Harness) -> adf_runtime::identity::LocalKeys {
    let home = RuntimeHome::at(h.dir.path().join("home"));
    if home.load_owner().unwrap().is_none() {
        home.init_owner(false).unwrap();
    }
    adf_runtime::identity::LocalKeys::from_home(&home).unwrap()
}

/// Gives the closed agent file at `path` an identity sealed for this harness's owner, so the
/// daemon can sign as it.
pub fn provision_identity(h: &Harness, path: &std::path::Path) {
    let keys = owner_keys(h);
    let mut file = adf_store::AdfFile::open(path).unwrap();
    adf_runtime::identity::provision_new(&mut file, &keys).unwrap();
    file.close().unwrap();
}

/// Replaces the agent's config with `PUT /agents/{id}/config` (the owner's edit); panics when
/// the daemon refuses it.
pub async fn put_config(h: &Harness, agent: &Agent, config: &serde_json::Value) {
    h.client
        .call(
            reqwest::Method::PUT,
            &format!("/agents/{}/config", agent.id),
            Some(config),
        )
        .await
        .unwrap();
}

/// The agent's config as `GET /agents/{id}/config` answers it (what its file holds).
pub async fn stored_config(h: &Harness, agent: &Agent) -> serde_json::Value {
    h.client
        .get(&format!("/agents/{}/config", agent.id))
        .await
        .unwrap()["config"]
        .clone()
}
