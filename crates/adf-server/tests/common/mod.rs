//! Shared test helpers: a daemon on 127.0.0.1:0 with a temporary `$ADF_HOME` and copies of
//! the reference fixtures (the originals are never opened in place).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use adf_runtime::home::RuntimeHome;
use adf_server::client::Client;
use adf_server::{Daemon, RunningServer};
use tempfile::TempDir;

pub const FIXTURES: &str = "/work/shared/fixtures/reference-v0.4.2";
pub const TRANSCRIPTS: &str = "/work/shared/reference/daemon-transcripts";

pub struct Harness {
    pub dir: TempDir,
    pub server: RunningServer,
    pub client: Client,
}

impl Harness {
    pub async fn start() -> Self {
        Self::start_with_token(None).await
    }

    pub async fn start_with_token(token: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("agents")).unwrap();
        Self::start_in(dir, token).await
    }

    /// Starts a daemon over an existing folder (for restart tests).
    pub async fn start_in(dir: TempDir, token: Option<&str>) -> Self {
        let home = RuntimeHome::at(dir.path().join("home"));
        let server =
            RunningServer::start(Daemon::new(home), "127.0.0.1", 0, token.map(str::to_owned))
                .await
                .unwrap();
        let client = Client::new(&server.url(), token.map(str::to_owned)).unwrap();
        Self {
            dir,
            server,
            client,
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

pub fn copy_fixture(dir: &Path, fixture: &str, name: &str) -> PathBuf {
    let target = dir.join("agents").join(name);
    std::fs::copy(Path::new(FIXTURES).join(fixture), &target).unwrap();
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
