//! Helpers shared by the CLI's integration tests.
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The repository root, found at run time: cargo sets `CARGO_MANIFEST_DIR` for the test
/// process, and a test binary reused from a shared build cache may have been compiled in
/// another checkout, so the compile-time value could point at someone else's tree.
pub fn repo_root() -> std::path::PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir.join("../..")
}

/// A reference runtime fixture, kept in the repository under `testdata/`.
pub fn fixture(name: &str) -> PathBuf {
    repo_root().join("testdata/reference-v0.4.2").join(name)
}

/// A running `adf daemon` child process; killed on drop.
pub struct DaemonProcess {
    /// The base URL it printed once listening, e.g. `http://127.0.0.1:40123`.
    pub url: String,
    /// The line after the URL: the one-time login link (a code, never the token).
    pub login: String,
    child: Child,
}

impl DaemonProcess {
    /// Starts `adf daemon --port 0 ARGS AGENT` with its runtime home in `home` (no token or
    /// model key from this process's environment) and returns once it listens. Its stdout is
    /// drained from then on, so the daemon never blocks on a full pipe.
    pub fn start(home: &Path, args: &[&str], agent: &Path) -> Self {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("adf"))
            .env("ADF_HOME", home)
            .env_remove("OPENAI_API_KEY")
            .env_remove("ADF_DAEMON_TOKEN")
            .args(["daemon", "--port", "0"])
            .args(args)
            .arg(agent)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("the daemon exited before listening")
                .unwrap();
            if let Some(url) = line.strip_prefix("adf daemon listening on ") {
                break url.trim().to_owned();
            }
        };
        let login = lines
            .next()
            .expect("the daemon exited before printing its login URL")
            .unwrap();
        std::thread::spawn(move || for _ in lines {});
        Self { url, login, child }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().parse().unwrap()
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
