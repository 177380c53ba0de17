//! The reads a daemon makes around an agent's handlers, named so the daemon holds no SQL:
//! rowid marks and new rows of the tables that are trigger sources (`on_task_create`,
//! `on_logs`, `on_inbox`, `on_outbox`), the files' change stamps (which files a handler
//! wrote), the authorized files (what a review digest covers) and the newest transcript row
//! (the hibernate nudge counts from it). Transaction control (an aborted turn's rollback
//! included) is held.rs.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::error::Result;
use crate::file::AdfFile;

/// A table whose new rows are trigger events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObservedTable {
    /// `adf_tasks`: new rows raise `on_task_create`.
    Tasks,
    /// `adf_logs`: new rows raise `on_logs`.
    Logs,
    /// `adf_inbox`: new rows (messages received) raise `on_inbox`.
    Inbox,
    /// `adf_outbox`: new rows (messages sent) raise `on_outbox`.
    Outbox,
}

impl ObservedTable {
    fn name(self) -> &'static str {
        match self {
            Self::Tasks => "adf_tasks",
            Self::Logs => "adf_logs",
            Self::Inbox => "adf_inbox",
            Self::Outbox => "adf_outbox",
        }
    }

    fn rows_after(self) -> &'static str {
        match self {
            Self::Tasks => {
                "SELECT rowid, id, tool, status, origin, loop FROM adf_tasks
                 WHERE rowid > ?1 ORDER BY rowid LIMIT ?2"
            }
            Self::Logs => {
                "SELECT rowid, id, level, origin, event, target, loop FROM adf_logs
                 WHERE rowid > ?1 ORDER BY rowid LIMIT ?2"
            }
            Self::Inbox => {
                "SELECT rowid, id, message_id, \"from\", source, thread_id, status FROM adf_inbox
                 WHERE rowid > ?1 ORDER BY rowid LIMIT ?2"
            }
            Self::Outbox => {
                "SELECT rowid, id, message_id, \"to\", status FROM adf_outbox
                 WHERE rowid > ?1 ORDER BY rowid LIMIT ?2"
            }
        }
    }

    /// The event data of one row: ids, names and states, never bodies (message content, log
    /// messages and task arguments stay in the file for the handler to read).
    fn event_data(self, row: &rusqlite::Row<'_>) -> rusqlite::Result<Value> {
        Ok(match self {
            Self::Tasks => json!({
                "task_id": row.get::<_, String>(1)?,
                "tool": row.get::<_, String>(2)?,
                "status": row.get::<_, String>(3)?,
                "origin": row.get::<_, Option<String>>(4)?,
                "loop": row.get::<_, Option<String>>(5)?,
            }),
            Self::Logs => json!({
                "log_id": row.get::<_, i64>(1)?,
                "level": row.get::<_, String>(2)?,
                "origin": row.get::<_, Option<String>>(3)?,
                "event": row.get::<_, Option<String>>(4)?,
                "target": row.get::<_, Option<String>>(5)?,
                "loop": row.get::<_, Option<String>>(6)?,
            }),
            Self::Inbox => json!({
                "id": row.get::<_, String>(1)?,
                "message_id": row.get::<_, Option<String>>(2)?,
                "from": row.get::<_, String>(3)?,
                "source": row.get::<_, Option<String>>(4)?,
                "thread_id": row.get::<_, Option<String>>(5)?,
                "status": row.get::<_, String>(6)?,
            }),
            Self::Outbox => json!({
                "id": row.get::<_, String>(1)?,
                "message_id": row.get::<_, Option<String>>(2)?,
                "to": row.get::<_, String>(3)?,
                "status": row.get::<_, String>(4)?,
            }),
        })
    }
}

impl AdfFile {
    /// The highest rowid in `table` (0 when it is empty).
    pub fn max_rowid(&self, table: ObservedTable) -> Result<i64> {
        Ok(self.conn.query_row(
            &format!("SELECT COALESCE(max(rowid), 0) FROM {}", table.name()),
            [],
            |row| row.get(0),
        )?)
    }

    /// [`max_rowid`](Self::max_rowid) of every observed table at once, in the order
    /// tasks, logs, inbox, outbox: where the tables whose rows are trigger events end now.
    pub fn observed_rows_through(&self) -> Result<[i64; 4]> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT (SELECT COALESCE(max(rowid), 0) FROM adf_tasks),
                        (SELECT COALESCE(max(rowid), 0) FROM adf_logs),
                        (SELECT COALESCE(max(rowid), 0) FROM adf_inbox),
                        (SELECT COALESCE(max(rowid), 0) FROM adf_outbox)",
            )?
            .query_row([], |row| {
                Ok([row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?])
            })?)
    }

    /// The event data of at most `limit` rows of `table` with a rowid above `after`, oldest
    /// first.
    pub fn observed_rows_after(
        &self,
        table: ObservedTable,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Value>> {
        let mut stmt = self.conn.prepare_cached(table.rows_after())?;
        let rows = stmt.query_map((after, limit), |row| table.event_data(row))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Every file's `updated_at` and size by path: two stamps differ when the file was
    /// written between them.
    pub fn file_stamps(&self) -> Result<HashMap<String, (String, i64)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT path, updated_at, size FROM adf_files")?;
        let rows = stmt.query_map([], |row| Ok((row.get(0)?, (row.get(1)?, row.get(2)?))))?;
        Ok(rows.collect::<rusqlite::Result<HashMap<_, _>>>()?)
    }

    /// Calls `visit(path, content, size)` for each authorized file, in path order, one row at
    /// a time (the contents are never all in memory at once).
    pub fn for_each_authorized_file(&self, mut visit: impl FnMut(&str, &[u8], i64)) -> Result<()> {
        let mut stmt = self.conn.prepare(
            "SELECT path, content, size FROM adf_files WHERE authorized = 1 ORDER BY path",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let path: String = row.get(0)?;
            let content: Vec<u8> = row.get(1)?;
            visit(&path, &content, row.get(2)?);
        }
        Ok(())
    }

    /// `created_at` of the newest transcript row of any loop, if there is one.
    pub fn last_loop_created_at(&self) -> Result<Option<i64>> {
        use rusqlite::OptionalExtension;
        Ok(self
            .conn
            .query_row(
                "SELECT created_at FROM adf_loop ORDER BY seq DESC LIMIT 1",
                [],
                |row| row.get(0),
            )
            .optional()?)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::{CreateOptions, NewLog};

    fn fresh(dir: &tempfile::TempDir) -> AdfFile {
        AdfFile::create(dir.path().join("a.adf"), &CreateOptions::default()).unwrap()
    }

    #[test]
    fn new_log_rows_are_read_after_a_mark_without_their_message() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = fresh(&dir);
        let mark = file.max_rowid(ObservedTable::Logs).unwrap();
        for message in ["first secret", "second secret"] {
            file.log(&NewLog {
                level: "error",
                origin: Some("test"),
                event: Some("probe"),
                target: None,
                message,
                data: None,
                r#loop: None,
            })
            .unwrap();
        }
        assert_eq!(file.max_rowid(ObservedTable::Logs).unwrap(), mark + 2);
        let first = file
            .observed_rows_after(ObservedTable::Logs, mark, 1)
            .unwrap();
        assert_eq!(first.len(), 1, "the limit bounds the read");
        assert_eq!(first[0]["event"], "probe");
        assert_eq!(first[0]["level"], "error");
        assert!(!first[0].to_string().contains("secret"));
        let after_both = file
            .observed_rows_after(ObservedTable::Logs, mark + 2, 10)
            .unwrap();
        assert!(after_both.is_empty());
    }

    #[test]
    fn only_an_open_transaction_is_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        let file = fresh(&dir);
        assert!(!file.rollback_open_transaction().unwrap());
        file.connection().execute_batch("BEGIN").unwrap();
        assert!(file.rollback_open_transaction().unwrap());
        assert!(file.connection().is_autocommit());
    }
}
