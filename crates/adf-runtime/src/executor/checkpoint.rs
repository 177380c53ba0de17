//! Turn checkpoints (`adf_runtime_turn_checkpoint[:<loop>]`, missing-tables §3.3 registry) and
//! crash recovery.
//!
//! A turn writes an `in_progress` record together with its trigger row, refreshes
//! `updated_at` with every step, and ends `completed` or `failed`. When a session opens a loop
//! whose record is still `in_progress`, the process that ran the turn died: the record becomes
//! `interrupted` with `replay: "not_replayed"`, a `turn_checkpoint_recovered` warning is
//! logged, and the turn is NOT run again (its completed steps are already on disk, §13.1). Tool
//! calls the dead process never answered get an error `tool_result` row, so the transcript
//! stays a valid conversation for the next request (recorded, not invented at send time, §1.5).

use std::collections::HashSet;

use adf_store::{AdfFile, NewLog, NewLoopRow};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The registry key of `loop_name`'s checkpoint.
pub fn key(loop_name: &str) -> String {
    if loop_name == "main" {
        "adf_runtime_turn_checkpoint".to_owned()
    } else {
        format!("adf_runtime_turn_checkpoint:{loop_name}")
    }
}

/// The checkpoint JSON (\[C28\] shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// A random id of this turn's record.
    pub id: String,
    /// `in_progress`, `completed`, `interrupted` or `failed`.
    pub status: String,
    /// When the turn started, in Unix milliseconds.
    pub started_at: i64,
    /// When the record last changed, in Unix milliseconds.
    pub updated_at: i64,
    /// When the turn finished (completed or failed), in Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<i64>,
    /// What woke the loop: `chat`, `loop_send`, `wake`, a trigger type.
    pub event_type: String,
    /// `agent` or `system`.
    pub scope: String,
    /// `not_attempted` while nothing needed replaying, `not_replayed` after a recovery.
    pub replay: String,
    /// Why the turn failed or was interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Checkpoint {
    /// A fresh `in_progress` record.
    pub fn start(event_type: &str) -> Self {
        let now = adf_store::time::now_ms();
        Checkpoint {
            id: adf_store::defaults::random_id(10),
            status: "in_progress".into(),
            started_at: now,
            updated_at: now,
            completed_at: None,
            event_type: event_type.into(),
            scope: "agent".into(),
            replay: "not_attempted".into(),
            reason: None,
        }
    }

    /// The record as stored.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Marks the record finished with `status`.
    pub fn finish(&mut self, status: &str, reason: Option<String>) {
        let now = adf_store::time::now_ms();
        self.status = status.into();
        self.updated_at = now;
        self.completed_at = Some(now);
        self.reason = reason;
    }

    /// Writes the record.
    pub fn store(&self, file: &mut AdfFile, loop_name: &str) -> adf_store::Result<()> {
        file.turn_checkpoint_set(&key(loop_name), &self.to_json())
    }
}

/// What a recovery found for one loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The loop whose turn was cut short.
    pub loop_name: String,
    /// Its record as rewritten by the recovery (status `interrupted`).
    pub checkpoint: Checkpoint,
    /// Tool calls that got an "interrupted" error result.
    pub closed_calls: Vec<String>,
}

/// Recovers `loop_name` if its last turn was cut short (see the module docs). Returns what it
/// did, or `None` when the record was not `in_progress`.
pub fn recover(file: &mut AdfFile, loop_name: &str) -> adf_store::Result<Option<Recovered>> {
    let Some(entry) = file.meta_get(&key(loop_name))? else {
        return Ok(None);
    };
    let Ok(mut checkpoint) = serde_json::from_str::<Checkpoint>(&entry.value) else {
        return Ok(None);
    };
    if checkpoint.status != "in_progress" {
        return Ok(None);
    }
    file.atomically(|file| {
        checkpoint.status = "interrupted".into();
        checkpoint.replay = "not_replayed".into();
        checkpoint.updated_at = adf_store::time::now_ms();
        checkpoint.reason = Some("the process running the turn stopped before it finished".into());
        checkpoint.store(file, loop_name)?;
        let closed_calls = close_dangling_calls(file, loop_name)?;
        file.log(&NewLog {
            level: "warn",
            origin: Some("executor"),
            event: Some("turn_checkpoint_recovered"),
            target: Some(loop_name),
            message: &format!(
                "turn {} of loop '{loop_name}' was interrupted; it is not replayed",
                checkpoint.id
            ),
            data: Some(&json!({ "checkpoint": checkpoint, "closed_calls": closed_calls })),
            r#loop: (loop_name != "main").then_some(loop_name),
        })?;
        Ok(Recovered {
            loop_name: loop_name.to_owned(),
            checkpoint: checkpoint.clone(),
            closed_calls,
        })
    })
    .map(Some)
}

/// Appends an error result for every `tool_use` of the last assistant row that has no
/// `tool_result` after it.
fn close_dangling_calls(file: &mut AdfFile, loop_name: &str) -> adf_store::Result<Vec<String>> {
    let rows = file.loop_rows(loop_name)?;
    let Some(last_assistant) = rows.iter().rposition(|r| r.role == "assistant") else {
        return Ok(Vec::new());
    };
    let blocks = |i: usize| rows[i].content.as_array().cloned().unwrap_or_default();
    let answered: HashSet<String> = (last_assistant + 1..rows.len())
        .flat_map(blocks)
        .filter(|b| b.get("type").and_then(|t| t.as_str()) == Some("tool_result"))
        .filter_map(|b| {
            b.get("tool_use_id")
                .and_then(|t| t.as_str())
                .map(str::to_owned)
        })
        .collect();
    let mut closed = Vec::new();
    for block in blocks(last_assistant) {
        if block.get("type").and_then(|t| t.as_str()) != Some("tool_use") {
            continue;
        }
        let Some(id) = block.get("id").and_then(|t| t.as_str()) else {
            continue;
        };
        if answered.contains(id) {
            continue;
        }
        let content = json!([{
            "type": "tool_result",
            "tool_use_id": id,
            "content": "Interrupted: the runtime stopped before this call finished; it was not run again. Check its effects before retrying.",
            "is_error": true,
        }]);
        file.loop_append(&NewLoopRow {
            r#loop: loop_name,
            role: "user",
            content: &content,
            model: None,
            tokens: None,
        })?;
        closed.push(id.to_owned());
    }
    Ok(closed)
}
