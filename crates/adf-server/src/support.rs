//! Small helpers the subsystems share, with no dependency on any of them (a leaf of the
//! layering: see ARCHITECTURE.md): an agent log row, the current-thread runtime agent code
//! and turn jobs run on, and the bound on one turn's recorded events.

use std::collections::HashMap;

use serde_json::Value;

use adf_store::{AdfFile, NewLog};

/// Writes one `adf_logs` row from `origin` (`timer`, `executor`, `lambda`, `shell`, …); a
/// failed write is only traced (a log row never fails the work it describes).
pub(crate) fn log_from(
    file: &mut AdfFile,
    origin: &str,
    level: &str,
    event: &str,
    message: &str,
    data: Option<&Value>,
) {
    let entry = NewLog {
        level,
        origin: Some(origin),
        event: Some(event),
        target: None,
        message,
        data,
        r#loop: None,
    };
    if let Err(error) = file.log(&entry) {
        tracing::warn!(%error, "cannot write a log row");
    }
}

/// A current-thread runtime for agent code that holds the `&mut AdfFile` across awaits (a
/// system lambda on the store worker) or for a turn job's thread.
pub(crate) fn current_thread() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => Some(runtime),
        Err(error) => {
            tracing::error!(%error, "cannot start a runtime for agent code");
            None
        }
    }
}

/// Most tool and model call events one turn records; a longer turn's extra calls are not
/// trigger events (the turn itself is bounded by its steps, this bounds the memory).
pub(crate) const TURN_EVENT_LIMIT: usize = 1024;

/// Each file's change stamp and size, by path (empty when they cannot be read).
pub(crate) fn file_stamps(file: &AdfFile) -> HashMap<String, (String, i64)> {
    file.file_stamps().unwrap_or_default()
}

/// Files a job created, changed or deleted, in path order: `(path, Some(size))` for a file
/// created or written, `(path, None)` for one deleted.
pub(crate) type FileChanges = Vec<(String, Option<i64>)>;

/// The files whose stamp moved from `before` to `after` (size) or that are gone (`None`), in
/// path order.
pub(crate) fn changed_files(
    before: &HashMap<String, (String, i64)>,
    after: HashMap<String, (String, i64)>,
) -> FileChanges {
    let mut changes: FileChanges = before
        .keys()
        .filter(|path| !after.contains_key(*path))
        .map(|path| (path.clone(), None))
        .collect();
    changes.extend(
        after
            .into_iter()
            .filter(|(path, (stamp, _))| before.get(path).is_none_or(|(old, _)| old != stamp))
            .map(|(path, (_, size))| (path, Some(size))),
    );
    changes.sort();
    changes
}
