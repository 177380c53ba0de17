//! `adf_tasks` writes: asynchronous tool calls and approvals (§13.4).

use rusqlite::{OptionalExtension, params};
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::file::AdfFile;
use crate::{defaults, time};

/// Task statuses (§13.4).
pub const TASK_STATUSES: [&str; 7] = [
    "pending",
    "pending_approval",
    "running",
    "completed",
    "failed",
    "denied",
    "cancelled",
];

/// Whether a status ends a task.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "denied" | "cancelled")
}

/// A task to create.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    /// The tool the task runs or waits to run.
    pub tool: &'a str,
    /// The tool arguments, stored as JSON text.
    pub args: &'a Value,
    /// The initial status, usually `pending` or `pending_approval`.
    pub status: &'a str,
    /// Who started the call (a loop, a lambda, the owner).
    pub origin: Option<&'a str>,
    /// Only the owner or authorized code may approve or deny the task (§13.4).
    pub requires_authorization: bool,
    /// The executor runs the task and resumes the turn when it settles.
    pub executor_managed: bool,
    /// What the approval prompt shows the owner, as JSON.
    pub approval_meta: Option<&'a Value>,
    /// The loop that created the task; `None` means `main`.
    pub r#loop: Option<&'a str>,
}

impl AdfFile {
    /// Creates a task and returns its id (`task_` + 12-character nanoid).
    pub fn task_create(&mut self, task: &NewTask<'_>) -> Result<String> {
        if !TASK_STATUSES.contains(&task.status) || is_terminal(task.status) {
            return Err(StoreError::invalid(format!(
                "a new task cannot start as '{}'",
                task.status
            )));
        }
        let id = format!("task_{}", defaults::random_id(12));
        self.ensure_writable()?;
        self.conn.execute(
            "INSERT INTO adf_tasks (id, tool, args, status, created_at, origin, requires_authorization,
                                    executor_managed, approval_meta, loop)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                id,
                task.tool,
                task.args.to_string(),
                task.status,
                time::now_ms(),
                task.origin,
                task.requires_authorization,
                task.executor_managed,
                task.approval_meta.map(Value::to_string),
                task.r#loop
            ],
        )?;
        Ok(id)
    }

    /// Moves a task to `status`; terminal statuses set `completed_at` and record `result` or
    /// `error`. Refuses to move a task that already ended.
    pub fn task_update(
        &mut self,
        id: &str,
        status: &str,
        result: Option<&str>,
        error: Option<&str>,
    ) -> Result<()> {
        self.check_writable()?;
        if !TASK_STATUSES.contains(&status) {
            return Err(StoreError::invalid(format!(
                "unknown task status '{status}'"
            )));
        }
        let tx = crate::file::write_tx(&mut self.conn)?;
        let current: String = tx
            .query_row("SELECT status FROM adf_tasks WHERE id = ?1", [id], |row| {
                row.get(0)
            })
            .optional()?
            .ok_or_else(|| StoreError::not_found("task", id))?;
        if is_terminal(&current) {
            return Err(StoreError::invalid(format!(
                "task {id} already ended as {current}"
            )));
        }
        let completed_at = is_terminal(status).then(time::now_ms);
        tx.execute(
            "UPDATE adf_tasks SET status = ?2, result = COALESCE(?3, result), error = COALESCE(?4, error),
                    completed_at = COALESCE(?5, completed_at)
             WHERE id = ?1",
            params![id, status, result, error, completed_at],
        )?;
        crate::file::consume_marker(&tx, &self.marker_pending)?;
        tx.commit()?;
        Ok(())
    }

    /// Sets `requires_authorization` on a task; the flag only goes from 0 to 1 (§3.3).
    pub fn task_require_authorization(&mut self, id: &str) -> Result<()> {
        let changed = self.update_existing(
            "UPDATE adf_tasks SET requires_authorization = 1 WHERE id = ?1",
            [id],
        )?;
        if changed == 0 {
            return Err(StoreError::not_found("task", id));
        }
        Ok(())
    }

    /// Replaces a pending task's arguments (`task_resolve` with `modified_args`).
    pub fn task_set_args(&mut self, id: &str, args: &Value) -> Result<()> {
        let changed = self.update_existing(
            "UPDATE adf_tasks SET args = ?2 WHERE id = ?1 AND status IN ('pending', 'pending_approval')",
            params![id, args.to_string()],
        )?;
        if changed == 0 {
            return Err(StoreError::not_found("pending task", id));
        }
        Ok(())
    }
}
