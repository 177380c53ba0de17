//! The note a file command leaves when a running daemon holds the file it changed.
//!
//! The daemon notices other writers of the files it holds by itself (adf-server `watch.rs`),
//! so a file command writes the file directly either way; this only tells the owner which path
//! the change took, so nobody reloads an agent for nothing.

use std::path::Path;
use std::time::Duration;

use adf_runtime::home::RuntimeHome;
use serde_json::Value;

/// How long the question to each recorded daemon may take: the note is a courtesy, and a
/// file command never waits long for it.
const ASK_DAEMON_TIMEOUT: Duration = Duration::from_millis(800);

/// After a file command changed `file`: when a daemon of this home holds it, says so on
/// stderr (stdout stays the command's own output, JSON included). Silent when no daemon runs,
/// none answers in time, or none holds the file.
pub(crate) fn note_if_held(file: &Path) {
    if let Some(base) = holding_daemon(file) {
        eprintln!(
            "note: the daemon at {base} holds {}; it picks this change up by itself within a second (no reload needed)",
            file.display()
        );
    }
}

/// The base URL of a daemon recorded in `$ADF_HOME` whose agents include `file`.
fn holding_daemon(file: &Path) -> Option<String> {
    let home = RuntimeHome::from_env().ok()?;
    let addrs = adf_egress::control::recorded(&home.daemon_record_path());
    if addrs.is_empty() {
        return None;
    }
    let wanted = std::fs::canonicalize(file).ok()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        for addr in addrs {
            let base = format!("http://{addr}");
            let token = adf_server::client::token_for(
                &base,
                Some(&home),
                std::env::var(adf_server::token::TOKEN_ENV).ok(),
            );
            let Ok(client) = adf_server::client::Client::new(&base, token) else {
                continue;
            };
            let Ok(Ok(agents)) =
                tokio::time::timeout(ASK_DAEMON_TIMEOUT, client.get("/agents")).await
            else {
                continue;
            };
            if holds(&agents, &wanted) {
                return Some(base);
            }
        }
        None
    })
}

/// Whether a `GET /agents` answer lists the file at canonical path `wanted`.
fn holds(agents: &Value, wanted: &Path) -> bool {
    agents.as_array().is_some_and(|agents| {
        agents.iter().any(|agent| {
            agent
                .get("filePath")
                .and_then(Value::as_str)
                .and_then(|path| std::fs::canonicalize(path).ok())
                .is_some_and(|path| path == wanted)
        })
    })
}
