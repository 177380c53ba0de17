//! Named reads for the owner surfaces (the daemon's HTTP handlers and the CLI): counts,
//! transcript pages and log rows. They exist so no SQL text lives outside this crate; each
//! returns plain data the caller shapes for its own output.

use serde::Serialize;
use serde_json::Value;

use crate::{AdfFile, LoopRow, Result};

/// The record counts `adf info` shows for a file at the current schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RecordCounts {
    /// Rows of `adf_files`: the agent's stored files, code and documents alike.
    pub files: i64,
    /// Transcript rows of `adf_loop`, over all loops.
    pub loop_rows: i64,
    /// Inbox messages still `unread`.
    pub inbox_unread: i64,
    /// Outbox rows, whatever their delivery status.
    pub outbox: i64,
    /// Timers that have not expired.
    pub timers: i64,
    /// Tasks still waiting or running: `pending`, `pending_approval` or `running`.
    pub tasks_pending: i64,
}

/// One `adf_logs` row as the owner surfaces show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogEntry {
    /// The row id: increasing, so a follower resumes after the last one it saw.
    pub id: i64,
    /// Severity as written (`debug`, `info`, `warn`, `error`).
    pub level: Option<String>,
    /// The subsystem that wrote the row (`executor`, `trigger`, `umbilical_tap`, `protection`).
    pub origin: Option<String>,
    /// A machine-readable event name within the origin (`bypass`, `tap_rate_limited`).
    pub event: Option<String>,
    /// What the row concerns, such as a tool name or file path.
    pub target: Option<String>,
    /// The human-readable text.
    pub message: Option<String>,
    /// Extra structured detail as JSON text, when the writer gave any.
    pub data: Option<String>,
    /// When the row was written, in epoch milliseconds.
    pub created_at: Option<i64>,
}

/// Which log rows [`AdfFile::logs_recent`] returns: optionally only one origin and/or event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFilter {
    /// Only rows with exactly this `origin`; `None` for any.
    pub origin: Option<String>,
    /// Only rows with exactly this `event`; `None` for any.
    pub event: Option<String>,
}

const LOG_COLUMNS: &str = "id, level, origin, event, target, message, data, created_at";

fn log_entry(row: &rusqlite::Row<'_>) -> rusqlite::Result<LogEntry> {
    Ok(LogEntry {
        id: row.get(0)?,
        level: row.get(1)?,
        origin: row.get(2)?,
        event: row.get(3)?,
        target: row.get(4)?,
        message: row.get(5)?,
        data: row.get(6)?,
        created_at: row.get(7)?,
    })
}

impl AdfFile {
    fn count(&self, sql: &str, params: impl rusqlite::Params) -> Result<i64> {
        Ok(self.conn.query_row(sql, params, |row| row.get(0))?)
    }

    /// The record counts of `adf info`.
    pub fn record_counts(&self) -> Result<RecordCounts> {
        Ok(RecordCounts {
            files: self.count("SELECT COUNT(*) FROM adf_files", [])?,
            loop_rows: self.loop_row_count()?,
            inbox_unread: self
                .count("SELECT COUNT(*) FROM adf_inbox WHERE status = 'unread'", [])?,
            outbox: self.count("SELECT COUNT(*) FROM adf_outbox", [])?,
            timers: self.count("SELECT COUNT(*) FROM adf_timers WHERE expired = 0", [])?,
            tasks_pending: self.count(
                "SELECT COUNT(*) FROM adf_tasks \
                 WHERE status IN ('pending', 'pending_approval', 'running')",
                [],
            )?,
        })
    }

    /// How many transcript rows the file holds, over all loops.
    pub fn loop_row_count(&self) -> Result<i64> {
        self.count("SELECT COUNT(*) FROM adf_loop", [])
    }

    /// How many transcript rows one loop holds.
    pub fn loop_row_count_in(&self, loop_name: &str) -> Result<i64> {
        self.count("SELECT COUNT(*) FROM adf_loop WHERE loop = ?1", [loop_name])
    }

    /// One page of a loop in transcript order (`COALESCE(ord, seq), seq`, as
    /// [`AdfFile::loop_rows`] reads it). A row whose content is not JSON keeps its text as a
    /// JSON string, so a page still shows what is there.
    pub fn loop_page(&self, loop_name: &str, limit: i64, offset: i64) -> Result<Vec<LoopRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT seq, role, content_json, model, tokens, created_at, ord, loop FROM adf_loop
             WHERE loop = ?1 ORDER BY COALESCE(ord, seq), seq LIMIT ?2 OFFSET ?3",
        )?;
        let parse =
            |text: Option<String>| text.and_then(|t| serde_json::from_str::<Value>(&t).ok());
        let rows = stmt.query_map((loop_name, limit, offset), |row| {
            let content: Option<String> = row.get(2)?;
            Ok(LoopRow {
                seq: row.get(0)?,
                role: row.get(1)?,
                content: parse(content.clone()).unwrap_or_else(|| Value::from(content)),
                model: row.get(3)?,
                tokens: parse(row.get(4)?),
                created_at: row.get(5)?,
                ord: row.get(6)?,
                r#loop: row.get(7)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// The newest log rows first, at most `limit`, optionally of one origin and/or event.
    pub fn logs_recent(&self, filter: &LogFilter, limit: i64) -> Result<Vec<LogEntry>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {LOG_COLUMNS} FROM adf_logs
             WHERE (?1 IS NULL OR origin = ?1) AND (?2 IS NULL OR event = ?2)
             ORDER BY id DESC LIMIT ?3"
        ))?;
        let rows = stmt.query_map((&filter.origin, &filter.event, limit), log_entry)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Log rows with an id above `after_id`, oldest first, at most `limit`: what a follower
    /// that has seen up to `after_id` reads next.
    pub fn logs_after(&self, after_id: i64, limit: i64) -> Result<Vec<LogEntry>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {LOG_COLUMNS} FROM adf_logs WHERE id > ?1 ORDER BY id LIMIT ?2"
        ))?;
        let rows = stmt.query_map((after_id, limit), log_entry)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
}
