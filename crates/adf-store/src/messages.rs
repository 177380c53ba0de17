//! `adf_inbox` / `adf_outbox` reads and the writes the message tools make: listing with
//! filters, counting, status changes and deletes (§3.3, tools guide "Messaging Tools" and
//! "Message Deletion Tools").
//!
//! Rows are returned as JSON objects with every column, unknown ones included, and updates name
//! the one column they change, so columns this runtime does not know survive (STO-10).
//! Deleting messages writes no audit rows: the per-message `inbox_message`/`outbox_message`
//! snapshots taken at arrival and send are the only archive (§13.3, MSG-39).

use rusqlite::types::{ToSql, ValueRef};
use rusqlite::{OptionalExtension, params_from_iter};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{Result, StoreError};
use crate::file::AdfFile;

/// Which message table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mailbox {
    /// `adf_inbox`: received messages.
    Inbox,
    /// `adf_outbox`: sent and queued messages.
    Outbox,
}

impl Mailbox {
    /// `inbox` / `outbox`, as the tools name them.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "inbox" => Some(Self::Inbox),
            "outbox" => Some(Self::Outbox),
            _ => None,
        }
    }

    /// The table's short name, `inbox` or `outbox`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Inbox => "inbox",
            Self::Outbox => "outbox",
        }
    }

    fn table(self) -> &'static str {
        match self {
            Self::Inbox => "adf_inbox",
            Self::Outbox => "adf_outbox",
        }
    }

    /// The timestamp `before` compares with and listings sort by.
    fn time_column(self) -> &'static str {
        match self {
            Self::Inbox => "received_at",
            Self::Outbox => "created_at",
        }
    }

    /// The statuses a row of this table may have (§3.3).
    pub fn statuses(self) -> &'static [&'static str] {
        match self {
            Self::Inbox => &["unread", "read", "archived"],
            Self::Outbox => &["pending", "sent", "delivered", "failed"],
        }
    }

    /// The filter fields this table supports: `from` and `source` exist only on the inbox.
    pub fn filter_fields(self) -> &'static [&'static str] {
        match self {
            Self::Inbox => &["status", "from", "source", "before", "thread_id"],
            Self::Outbox => &["status", "before", "thread_id"],
        }
    }
}

/// A conjunction of message conditions; `None` fields do not constrain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageFilter {
    /// Only rows with this `status` (inbox `unread`/`read`/`archived`; outbox
    /// `pending`/`sent`/`delivered`/`failed`).
    pub status: Option<String>,
    /// Sender (`"from"` column); inbox only.
    pub from: Option<String>,
    /// Ingress channel (`mesh`, `telegram`, ...); inbox only.
    pub source: Option<String>,
    /// Rows whose timestamp (inbox `received_at`, outbox `created_at`) is before this epoch ms.
    pub before: Option<i64>,
    /// Only rows of this conversation thread.
    pub thread_id: Option<String>,
}

impl MessageFilter {
    /// The names of the fields that constrain.
    pub fn fields(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.status.is_some() {
            out.push("status");
        }
        if self.from.is_some() {
            out.push("from");
        }
        if self.source.is_some() {
            out.push("source");
        }
        if self.before.is_some() {
            out.push("before");
        }
        if self.thread_id.is_some() {
            out.push("thread_id");
        }
        out
    }

    /// The WHERE clause (without the keyword; `1` when empty) and its parameters, after
    /// refusing fields the table does not support — a dropped clause would widen a delete.
    fn to_sql(&self, mailbox: Mailbox) -> Result<(String, Vec<Box<dyn ToSql>>)> {
        let unsupported: Vec<&str> = self
            .fields()
            .into_iter()
            .filter(|f| !mailbox.filter_fields().contains(f))
            .collect();
        if !unsupported.is_empty() {
            return Err(StoreError::invalid(format!(
                "filter field(s) not supported for {}: {}; supported: {}",
                mailbox.as_str(),
                unsupported.join(", "),
                mailbox.filter_fields().join(", ")
            )));
        }
        if let Some(status) = &self.status
            && !mailbox.statuses().contains(&status.as_str())
        {
            return Err(StoreError::invalid(format!(
                "{} status must be one of {}, not '{status}'",
                mailbox.as_str(),
                mailbox.statuses().join(", ")
            )));
        }
        let mut clauses: Vec<String> = Vec::new();
        let mut values: Vec<Box<dyn ToSql>> = Vec::new();
        let mut text = |clause: &str, value: &Option<String>| {
            if let Some(value) = value {
                clauses.push(clause.to_owned());
                values.push(Box::new(value.clone()));
            }
        };
        text("status = ?", &self.status);
        text("\"from\" = ?", &self.from);
        text("source = ?", &self.source);
        text("thread_id = ?", &self.thread_id);
        if let Some(before) = self.before {
            clauses.push(format!("{} < ?", mailbox.time_column()));
            values.push(Box::new(before));
        }
        let clause = if clauses.is_empty() {
            "1".to_owned()
        } else {
            clauses.join(" AND ")
        };
        Ok((clause, values))
    }
}

/// Inbox counts by status (`msg_list`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct InboxCounts {
    /// Inbox rows the agent has not read.
    pub unread: i64,
    /// Inbox rows read but kept.
    pub read: i64,
    /// Inbox rows moved out of the active view.
    pub archived: i64,
    /// Every inbox row.
    pub total: i64,
}

fn row_to_object(
    row: &rusqlite::Row<'_>,
    names: &[String],
) -> rusqlite::Result<Map<String, Value>> {
    let mut object = Map::new();
    for (index, name) in names.iter().enumerate() {
        let value = match row.get_ref(index)? {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::from(i),
            ValueRef::Real(f) => Value::from(f),
            ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Value::String(format!("<{} bytes>", b.len())),
        };
        object.insert(name.clone(), value);
    }
    Ok(object)
}

impl AdfFile {
    /// Messages matching `filter`, newest first, at most `limit`; every column of each row.
    pub fn messages(
        &self,
        mailbox: Mailbox,
        filter: &MessageFilter,
        limit: Option<usize>,
    ) -> Result<Vec<Map<String, Value>>> {
        let (clause, mut values) = filter.to_sql(mailbox)?;
        // SQLite reads a negative LIMIT as "no limit".
        values.push(Box::new(limit.map_or(-1, |l| l as i64)));
        let mut stmt = self.conn.prepare(&format!(
            "SELECT * FROM {} WHERE {clause} ORDER BY {} DESC, rowid DESC LIMIT ?",
            mailbox.table(),
            mailbox.time_column()
        ))?;
        let names: Vec<String> = stmt.column_names().map(str::to_owned).collect();
        let rows = stmt.query_map(params_from_iter(values.iter()), |row| {
            row_to_object(row, &names)
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// One message by its row id, every column.
    pub fn message(&self, mailbox: Mailbox, id: &str) -> Result<Option<Map<String, Value>>> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT * FROM {} WHERE id = ?1", mailbox.table()))?;
        let names: Vec<String> = stmt.column_names().map(str::to_owned).collect();
        Ok(stmt
            .query_row([id], |row| row_to_object(row, &names))
            .optional()?)
    }

    /// Inbox counts by status.
    pub fn inbox_counts(&self) -> Result<InboxCounts> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT COALESCE(SUM(status = 'unread'), 0), COALESCE(SUM(status = 'read'), 0),
                    COALESCE(SUM(status = 'archived'), 0), COUNT(*)
             FROM adf_inbox",
            )?
            .query_row([], |row| {
                Ok(InboxCounts {
                    unread: row.get(0)?,
                    read: row.get(1)?,
                    archived: row.get(2)?,
                    total: row.get(3)?,
                })
            })?)
    }

    /// Sets the status of the messages `ids`, changing no other column. Every id must exist,
    /// or nothing changes.
    pub fn messages_set_status(
        &mut self,
        mailbox: Mailbox,
        ids: &[String],
        status: &str,
    ) -> Result<usize> {
        self.check_writable()?;
        if !mailbox.statuses().contains(&status) {
            return Err(StoreError::invalid(format!(
                "{} status must be one of {}, not '{status}'",
                mailbox.as_str(),
                mailbox.statuses().join(", ")
            )));
        }
        let tx = crate::file::write_tx(&mut self.conn)?;
        let sql = format!("UPDATE {} SET status = ?2 WHERE id = ?1", mailbox.table());
        for id in ids {
            if tx.execute(&sql, [id.as_str(), status])? == 0 {
                return Err(StoreError::not_found("message", id.clone()));
            }
        }
        crate::file::consume_marker(&tx, &self.marker_pending)?;
        tx.commit()?;
        Ok(ids.len())
    }

    /// Deletes the messages `ids`. Every id must exist, or nothing is deleted.
    pub fn messages_delete_ids(&mut self, mailbox: Mailbox, ids: &[String]) -> Result<usize> {
        self.check_writable()?;
        let tx = crate::file::write_tx(&mut self.conn)?;
        let sql = format!("DELETE FROM {} WHERE id = ?1", mailbox.table());
        for id in ids {
            if tx.execute(&sql, [id.as_str()])? == 0 {
                return Err(StoreError::not_found("message", id.clone()));
            }
        }
        crate::file::consume_marker(&tx, &self.marker_pending)?;
        tx.commit()?;
        Ok(ids.len())
    }

    /// Deletes every message matching `filter` and returns how many. An empty filter is
    /// refused: it would empty the table.
    pub fn messages_delete(&mut self, mailbox: Mailbox, filter: &MessageFilter) -> Result<usize> {
        if filter.fields().is_empty() {
            return Err(StoreError::invalid(format!(
                "at least one filter field is required ({}) so a delete cannot empty the {}",
                mailbox.filter_fields().join(", "),
                mailbox.as_str()
            )));
        }
        let (clause, values) = filter.to_sql(mailbox)?;
        self.ensure_writable()?;
        Ok(self.conn.execute(
            &format!("DELETE FROM {} WHERE {clause}", mailbox.table()),
            params_from_iter(values.iter()),
        )?)
    }
}

/// Length of the local row id of a message (`\[C28\]` nanoid(10)).
pub const MESSAGE_ROW_ID_LEN: usize = 10;

impl AdfFile {
    /// Inserts one message row and returns its local id. `row` maps column names to values:
    /// strings, numbers, booleans and null are stored as they are, objects and arrays as JSON
    /// text. An `id` is generated when absent. When `audit` names the full ALF message and the
    /// agent audits this mailbox (§5.19), an `inbox_message`/`outbox_message` snapshot whose
    /// `ref` is the ALF id is written in the same transaction (MSG-49).
    pub fn message_insert(
        &mut self,
        mailbox: Mailbox,
        row: &Map<String, Value>,
        audit: Option<(&str, &Value)>,
    ) -> Result<String> {
        self.check_writable()?;
        let audited = match audit {
            Some(_) => self.audit_enabled(mailbox.as_str())?,
            None => false,
        };
        let id = match row.get("id").and_then(Value::as_str) {
            Some(id) => id.to_owned(),
            None => crate::defaults::random_id(MESSAGE_ROW_ID_LEN),
        };
        let mut columns = vec!["\"id\"".to_owned()];
        let mut values: Vec<Box<dyn ToSql>> = vec![Box::new(id.clone())];
        for (name, value) in row {
            if name == "id" {
                continue;
            }
            // Names are spliced into the SQL; SQLite itself refuses a column the table lacks.
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                return Err(StoreError::invalid(format!(
                    "'{name}' is not a column name of {}",
                    mailbox.table()
                )));
            }
            columns.push(format!("\"{name}\""));
            values.push(match value {
                Value::Null => Box::new(rusqlite::types::Null),
                Value::Bool(b) => Box::new(i64::from(*b)),
                Value::Number(n) => match n.as_i64() {
                    Some(i) => Box::new(i),
                    None => Box::new(n.as_f64().unwrap_or_default()),
                },
                Value::String(s) => Box::new(s.clone()),
                other => Box::new(other.to_string()),
            });
        }
        let placeholders = vec!["?"; columns.len()].join(", ");
        let tx = crate::file::write_tx(&mut self.conn)?;
        tx.execute(
            &format!(
                "INSERT INTO {} ({}) VALUES ({placeholders})",
                mailbox.table(),
                columns.join(", ")
            ),
            params_from_iter(values.iter()),
        )?;
        if let (true, Some((alf_id, message))) = (audited, audit) {
            let source = match mailbox {
                Mailbox::Inbox => "inbox_message",
                Mailbox::Outbox => "outbox_message",
            };
            crate::audit::insert_snapshot(&tx, source, None, Some(alf_id), 1, message)?;
        }
        crate::file::consume_marker(&tx, &self.marker_pending)?;
        tx.commit()?;
        Ok(id)
    }

    /// Records how the delivery of outbox row `id` ended (§11.2: `delivered` or `failed`;
    /// `sent` is reserved and never written).
    pub fn outbox_set_delivery(
        &mut self,
        id: &str,
        status: &str,
        status_code: Option<i64>,
        delivered_at: Option<i64>,
    ) -> Result<()> {
        if !matches!(status, "pending" | "delivered" | "failed") {
            return Err(StoreError::invalid(format!(
                "an outbox delivery ends delivered or failed, not '{status}'"
            )));
        }
        let changed = self.update_existing(
            "UPDATE adf_outbox SET status = ?2, status_code = ?3, delivered_at = ?4 WHERE id = ?1",
            rusqlite::params![id, status, status_code, delivered_at],
        )?;
        if changed == 0 {
            return Err(StoreError::not_found("message", id.to_owned()));
        }
        Ok(())
    }

    /// The local id of the inbox row holding ALF message `message_id`, if any.
    pub fn inbox_id_by_message_id(&self, message_id: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id FROM adf_inbox WHERE message_id = ?1 LIMIT 1",
                [message_id],
                |row| row.get(0),
            )
            .optional()?)
    }
}
