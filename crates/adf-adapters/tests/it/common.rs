//! Fixtures: a real `.adf` file behind a test implementation of the seam ([`FileSink`]), a
//! clock that records waits instead of sleeping, and a bounded condition wait.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use adf_adapters::{AdapterSink, BoxFuture, Secret, SinkError, Sleeper, StateChange};
use adf_store::messages::{Mailbox, MessageFilter};
use adf_store::{AdfFile, CreateOptions, IdentityRow, NewLog};
use serde_json::{Map, Value, json};

pub(crate) const TOKEN: &str = "123456:TEST-token-abcdef";
pub(crate) const PURPOSE: &str = "adapter:telegram:TELEGRAM_BOT_TOKEN";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The seam on a real file, through adf-store's typed APIs: inbound messages are inbox rows
/// (one per `message_id`), credentials are plain `adf_identity` rows, state changes are log
/// rows (and kept in memory for assertions).
pub(crate) struct FileSink {
    path: PathBuf,
    file: Mutex<Option<AdfFile>>,
    changes: Mutex<Vec<StateChange>>,
}

impl FileSink {
    pub(crate) fn open(path: &Path) -> Arc<Self> {
        Arc::new(FileSink {
            path: path.to_owned(),
            file: Mutex::new(Some(AdfFile::open(path).unwrap())),
            changes: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn with_file<T>(&self, f: impl FnOnce(&mut AdfFile) -> T) -> T {
        let mut guard = lock(&self.file);
        f(guard.as_mut().unwrap())
    }

    /// Inbox rows, oldest first, with JSON columns parsed.
    pub(crate) fn inbox(&self) -> Vec<Map<String, Value>> {
        let mut rows = self.with_file(|file| {
            file.messages(Mailbox::Inbox, &MessageFilter::default(), None)
                .unwrap()
        });
        rows.sort_by_key(|r| {
            r.get("message_id")
                .and_then(Value::as_str)
                .and_then(|m| m.rsplit(':').next())
                .and_then(|n| n.parse::<i64>().ok())
                .unwrap_or_default()
        });
        for row in &mut rows {
            for column in ["source_context", "original_message", "meta", "attachments"] {
                if let Some(Value::String(text)) = row.get(column)
                    && let Ok(parsed) = serde_json::from_str::<Value>(text)
                {
                    row.insert(column.into(), parsed);
                }
            }
        }
        rows
    }

    pub(crate) fn changes(&self) -> Vec<StateChange> {
        lock(&self.changes).clone()
    }

    /// Closes the file (a daemon restart closes it too).
    pub(crate) fn close(&self) {
        if let Some(file) = lock(&self.file).take() {
            file.close().unwrap();
        }
    }
}

impl AdapterSink for FileSink {
    fn write_inbound(
        &self,
        message: adf_adapters::InboundMessage,
    ) -> BoxFuture<'_, Result<String, SinkError>> {
        let result = self.with_file(|file| {
            if let Some(id) = file
                .inbox_id_by_message_id(&message.message_id)
                .map_err(|e| SinkError(e.to_string()))?
            {
                return Ok(id);
            }
            file.message_insert(Mailbox::Inbox, &message.to_inbox_row(), None)
                .map_err(|e| SinkError(e.to_string()))
        });
        Box::pin(async move { result })
    }

    fn write_file<'a>(
        &'a self,
        dir: &'a str,
        filename: &'a str,
        bytes: Vec<u8>,
        content_type: Option<String>,
    ) -> BoxFuture<'a, Result<String, SinkError>> {
        let written = self.with_file(|file| {
            let mut path = format!("{dir}/{filename}");
            let mut n = 1;
            while file
                .file_read(&path)
                .map_err(|e| SinkError(e.to_string()))?
                .is_some()
            {
                path = format!("{dir}/{n}-{filename}");
                n += 1;
            }
            file.file_write(
                adf_store::Caller::Owner,
                &path,
                &bytes,
                &adf_store::FileWrite {
                    mime_type: content_type,
                    protection_if_new: None,
                },
            )
            .map_err(|e| SinkError(e.to_string()))?;
            Ok(path)
        });
        Box::pin(async move { written })
    }

    fn credential<'a>(
        &'a self,
        purpose: &'a str,
    ) -> BoxFuture<'a, Result<Option<Secret>, SinkError>> {
        let found = self.with_file(|file| {
            file.identity_rows()
                .map_err(|e| SinkError(e.to_string()))
                .map(|rows| {
                    rows.into_iter()
                        .find(|r| r.purpose == purpose && r.encryption_algo == "plain")
                        .map(|r| Secret::new(String::from_utf8_lossy(&r.value).into_owned()))
                })
        });
        Box::pin(async move { found })
    }

    fn state_changed(&self, change: StateChange) -> BoxFuture<'_, ()> {
        let message = format!(
            "adapter {} {}{}",
            change.adapter,
            change.state.as_str(),
            change
                .error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
        self.with_file(|file| {
            file.log(&NewLog {
                level: if change.error.is_some() {
                    "warn"
                } else {
                    "info"
                },
                origin: Some("adapter"),
                event: Some("adapter.status.changed"),
                target: Some(&change.adapter),
                message: &message,
                ..NewLog::default()
            })
            .unwrap();
        });
        lock(&self.changes).push(change);
        Box::pin(async {})
    }

    fn agent_file(&self) -> PathBuf {
        self.path.clone()
    }

    fn egress_policy(&self) -> adf_egress::Policy {
        adf_egress::Policy::default()
    }
}

/// A new agent file in `dir` whose `adapters.telegram` points at `api_root` (plus `extra`
/// entry fields), with the bot token when `token` is given.
pub(crate) fn agent_file(dir: &Path, api_root: &str, extra: Value, token: Option<&str>) -> PathBuf {
    let path = dir.join("bot.adf");
    let mut file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    if let Some(token) = token {
        file.identity_put(&[IdentityRow {
            purpose: PURPOSE.into(),
            value: token.as_bytes().to_vec(),
            encryption_algo: "plain".into(),
            salt: None,
            kdf_params: None,
            code_access: false,
        }])
        .unwrap();
    }
    let mut entry = json!({
        "enabled": true,
        "config": { "api_root": api_root, "poll_timeout": 2 },
    });
    if let (Some(entry), Some(extra)) = (entry.as_object_mut(), extra.as_object()) {
        entry.extend(extra.clone());
    }
    file.config_set_path(
        adf_store::Caller::Owner,
        "adapters",
        adf_store::ConfigAction::Set,
        json!({ "telegram": entry }),
    )
    .unwrap();
    file.close().unwrap();
    path
}

/// The `adapters` config of a sink's file.
pub(crate) fn adapters_config(sink: &FileSink) -> Value {
    sink.with_file(|file| file.config().unwrap()["adapters"].clone())
}

/// Records each wait and returns at once.
#[derive(Default)]
pub(crate) struct RecordingSleeper(Mutex<Vec<Duration>>);

impl RecordingSleeper {
    pub(crate) fn waits(&self) -> Vec<Duration> {
        lock(&self.0).clone()
    }
}

impl Sleeper for RecordingSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'_, ()> {
        lock(&self.0).push(duration);
        Box::pin(tokio::task::yield_now())
    }
}

/// Waits until `condition` holds, checking every few milliseconds, for at most 15 s.
pub(crate) async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
