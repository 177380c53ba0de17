//! Transcript maintenance for the executor (spec §13.1–§13.3): incremental reads, removing rows
//! with an audit snapshot (`loop_clear`, loop deletion), and compaction (delete the summarized
//! rows, insert the summary with `ord` before the preserved tail).
//!
//! `seq` is never renumbered or reused: removals delete rows, the summary is a new row, and
//! the stream order `COALESCE(ord, seq), seq` puts the summary where it belongs (§3.3).
//! Each operation is one transaction, so a crash leaves either the old or the new transcript.

use rusqlite::params;
use serde_json::{Value, json};

use crate::audit;
use crate::error::{Result, StoreError};
use crate::file::AdfFile;
use crate::tables::{LoopRow, NewLoopRow};
use crate::time;

/// What a removal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoveOutcome {
    /// Rows deleted.
    pub removed: usize,
    /// The `adf_audit` row holding them, when a snapshot was written.
    pub audit_id: Option<i64>,
}

/// The audit blob of loop rows (\[C28\] layout: `{seq, role, content_json, model?, tokens?,
/// created_at, ord?}` per row).
fn snapshot(rows: &[LoopRow]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                let mut o = json!({
                    "seq": r.seq,
                    "role": r.role,
                    "content_json": r.content,
                    "created_at": r.created_at,
                });
                if let Some(m) = &r.model {
                    o["model"] = json!(m);
                }
                if let Some(t) = &r.tokens {
                    o["tokens"] = t.clone();
                }
                if let Some(ord) = r.ord {
                    o["ord"] = json!(ord);
                }
                o
            })
            .collect(),
    )
}

/// One row of the audit blob, in the key order of [`snapshot`], borrowing the stored text.
#[derive(serde::Serialize)]
struct SnapshotRow<'a> {
    seq: i64,
    role: &'a str,
    content_json: StoredJson<'a>,
    created_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens: Option<StoredJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ord: Option<i64>,
}

/// A JSON column as [`LoopRow`] reads it: the stored JSON, a malformed text as a JSON string,
/// NULL as null.
enum StoredJson<'a> {
    Json(&'a serde_json::value::RawValue),
    Text(&'a str),
    Null,
}

impl<'a> StoredJson<'a> {
    fn of(text: Option<&'a str>) -> Self {
        match text {
            None => StoredJson::Null,
            Some(text) => match serde_json::from_str::<&serde_json::value::RawValue>(text) {
                Ok(raw) => StoredJson::Json(raw),
                Err(_) => StoredJson::Text(text),
            },
        }
    }
}

impl serde::Serialize for StoredJson<'_> {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match self {
            StoredJson::Json(raw) => raw.serialize(serializer),
            StoredJson::Text(text) => serializer.serialize_str(text),
            StoredJson::Null => serializer.serialize_unit(),
        }
    }
}

impl AdfFile {
    /// Writes a turn checkpoint record (`adf_runtime_turn_checkpoint[:<loop>]`, a registry
    /// key), as [`AdfFile::meta_set_runtime`] does: a record that exists is updated in place
    /// (its protection unchanged, as the upsert leaves it), which costs a turn a third less
    /// than the upsert's refused insert; the first one is created by `meta_set_runtime`.
    pub fn turn_checkpoint_set(&mut self, key: &str, value: &str) -> Result<()> {
        if key != "adf_runtime_turn_checkpoint" && !key.starts_with("adf_runtime_turn_checkpoint:")
        {
            return Err(StoreError::invalid(format!(
                "'{key}' is not a turn checkpoint key"
            )));
        }
        self.ensure_writable()?;
        let changed = self
            .conn
            .prepare_cached("UPDATE adf_meta SET value = ?2 WHERE key = ?1")?
            .execute(params![key, value])?;
        if changed == 0 {
            self.meta_set_runtime(key, value)?;
        }
        Ok(())
    }

    /// Rows of `loop_name` with `seq > after`, in `seq` order: what a running session has not
    /// seen yet (rows appended by itself, `loop_send` from other loops, `adf` from a shell).
    pub fn loop_rows_after(&self, loop_name: &str, after: i64) -> Result<Vec<LoopRow>> {
        // Sorted here, not by SQL: with `ORDER BY COALESCE(ord, seq)` beside the range on
        // `seq`, SQLite marked the plan as depending on the bound value and re-prepared the
        // statement on every call (a tenth of a turn's cost); a session reads only the few
        // rows of its last step.
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, role, content_json, model, tokens, created_at, ord, loop FROM adf_loop
             WHERE loop = ?1 AND seq > ?2",
        )?;
        let rows = stmt.query_map(params![loop_name, after], LoopRow::from_row)?;
        let mut rows: Vec<LoopRow> = rows.collect::<rusqlite::Result<_>>()?;
        rows.sort_by_key(|row| (row.ord.unwrap_or(row.seq), row.seq));
        Ok(rows)
    }

    /// The highest `seq` of a loop, or 0 when it is empty.
    pub fn loop_max_seq(&self, loop_name: &str) -> Result<i64> {
        Ok(self.conn.query_row(
            "SELECT COALESCE(MAX(seq), 0) FROM adf_loop WHERE loop = ?1",
            [loop_name],
            |row| row.get(0),
        )?)
    }

    /// Appends several rows of one loop in one transaction (a step and its checkpoint land
    /// together). Returns their `seq`s.
    pub fn loop_append_all(&mut self, rows: &[NewLoopRow<'_>]) -> Result<Vec<i64>> {
        self.atomically(|file| rows.iter().map(|r| file.loop_append(r)).collect())
    }

    /// Deletes the rows of `loop_name` whose `seq` is in `seqs`, snapshotting them first to
    /// `adf_audit` as `loop:<name>` when `audit` is true. Rows of other loops are never touched.
    pub fn loop_remove(
        &mut self,
        loop_name: &str,
        seqs: &[i64],
        audit_rows: bool,
    ) -> Result<RemoveOutcome> {
        if seqs.is_empty() {
            return Ok(RemoveOutcome::default());
        }
        self.atomically(|file| {
            let wanted: std::collections::HashSet<i64> = seqs.iter().copied().collect();
            let rows: Vec<LoopRow> = file
                .loop_rows(loop_name)?
                .into_iter()
                .filter(|r| wanted.contains(&r.seq))
                .collect();
            let audit_id = if audit_rows && !rows.is_empty() {
                Some(file.audit_loop_rows(loop_name, &rows)?)
            } else {
                None
            };
            let mut removed = 0;
            let mut delete = file
                .conn
                .prepare_cached("DELETE FROM adf_loop WHERE seq = ?1 AND loop = ?2")?;
            for row in &rows {
                removed += delete.execute(params![row.seq, loop_name])?;
            }
            Ok(RemoveOutcome { removed, audit_id })
        })
    }

    /// Deletes every row of `loop_name` (the owner's clear, `DELETE /chat`), snapshotting
    /// them first to `adf_audit` as `loop:<name>` when `audit` is true: what [`Self::loop_remove`]
    /// does with every `seq` of the loop, in one statement each. The rows' stored JSON goes
    /// into the snapshot as it is, without parsing and re-serializing each one; the blob holds
    /// the same rows in the same layout.
    pub fn loop_clear(&mut self, loop_name: &str, audit_rows: bool) -> Result<RemoveOutcome> {
        self.atomically(|file| {
            let audit_id = if audit_rows {
                file.audit_whole_loop(loop_name)?
            } else {
                None
            };
            let removed = if file.only_loop_is(loop_name)? {
                // With no `WHERE`, SQLite empties the table and its two indexes page by page
                // (its truncate optimization) instead of one b-tree delete per row and index:
                // a 50-turn clear's delete went from ~0.7 M instructions to a few thousand.
                // It counts the rows it removes, and `seq` stays unique: AUTOINCREMENT keeps
                // the highest one in `sqlite_sequence`.
                file.conn
                    .prepare_cached("DELETE FROM adf_loop")?
                    .execute([])?
            } else {
                file.conn
                    .prepare_cached("DELETE FROM adf_loop WHERE loop = ?1")?
                    .execute([loop_name])?
            };
            Ok(RemoveOutcome { removed, audit_id })
        })
    }

    /// Whether every row of `adf_loop` belongs to `loop_name` (and there is at least one): the
    /// lowest and highest `loop` through `idx_adf_loop_loop_seq`, two index seeks.
    fn only_loop_is(&self, loop_name: &str) -> Result<bool> {
        let (lowest, highest): (Option<String>, Option<String>) = self
            .conn
            .prepare_cached(
                "SELECT (SELECT MIN(loop) FROM adf_loop), (SELECT MAX(loop) FROM adf_loop)",
            )?
            .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(lowest.as_deref() == Some(loop_name) && highest.as_deref() == Some(loop_name))
    }

    /// The `loop:<name>` snapshot of every row of the loop, or `None` when it has none.
    fn audit_whole_loop(&mut self, loop_name: &str) -> Result<Option<i64>> {
        // Sorted here by `(COALESCE(ord, seq), seq)`, not by SQL: with that `ORDER BY` SQLite
        // expired the statement at every binding and re-prepared it on each clear (as it did
        // for `loop_rows_after`).
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, role, content_json, model, tokens, created_at, ord FROM adf_loop
             WHERE loop = ?1",
        )?;
        let mut rows = stmt.query([loop_name])?;
        // Each row's JSON lands in `written`; `order` keeps its sort key and where it lies.
        let mut written: Vec<u8> = Vec::with_capacity(64 * 1024);
        let mut order: Vec<((i64, i64), std::ops::Range<usize>)> = Vec::new();
        while let Some(row) = rows.next()? {
            let seq: i64 = row.get(0)?;
            let text_at = |i: usize| -> Result<Option<&str>> {
                row.get_ref(i)?
                    .as_str_or_null()
                    .map_err(|e| StoreError::Malformed(format!("loop row {seq}, column {i}: {e}")))
            };
            let ord: Option<i64> = row.get(6)?;
            let snapshot_row = SnapshotRow {
                seq,
                role: text_at(1)?.unwrap_or_default(),
                content_json: StoredJson::of(text_at(2)?),
                created_at: row.get(5)?,
                model: text_at(3)?,
                tokens: text_at(4)?.map(|t| StoredJson::of(Some(t))),
                ord,
            };
            let start = written.len();
            serde_json::to_writer(&mut written, &snapshot_row)
                .map_err(|e| StoreError::Malformed(format!("snapshot row {seq}: {e}")))?;
            order.push(((ord.unwrap_or(seq), seq), start..written.len()));
        }
        drop(rows);
        drop(stmt);
        order.sort_unstable_by_key(|(key, _)| *key);
        let mut text: Vec<u8> = Vec::with_capacity(written.len() + order.len() + 2);
        text.push(b'[');
        for (i, (_, span)) in order.iter().enumerate() {
            if i > 0 {
                text.push(b',');
            }
            text.extend_from_slice(&written[span.clone()]);
        }
        text.push(b']');
        let count = order.len() as i64;
        let seqs = order.iter().map(|((_, seq), _)| *seq);
        let range = seqs.clone().min().zip(seqs.max());
        let Some(range) = range else {
            return Ok(None);
        };
        self.ensure_writable()?;
        Ok(Some(audit::insert_snapshot_text(
            &self.conn,
            &format!("loop:{loop_name}"),
            Some(range),
            None,
            count,
            &text,
        )?))
    }

    /// Compaction (§13.2 steps 2–4) in one transaction: snapshot `removed` when `audit_rows`,
    /// delete them, and insert `summary` (already prefixed with `[Loop Compacted]` or
    /// `[Loop Compacted, audited]`) as a user row with `ord` one below the first preserved
    /// row's sort key, so it sorts before the tail. Returns the summary's `seq`.
    pub fn loop_compact_apply(
        &mut self,
        loop_name: &str,
        removed: &[i64],
        summary: &str,
        audit_rows: bool,
    ) -> Result<(i64, RemoveOutcome)> {
        self.atomically(|file| {
            let outcome = file.loop_remove(loop_name, removed, audit_rows)?;
            let first_kept: Option<i64> = file.conn.query_row(
                "SELECT MIN(COALESCE(ord, seq)) FROM adf_loop WHERE loop = ?1",
                [loop_name],
                |row| row.get(0),
            )?;
            let content = json!([{ "type": "text", "text": summary }]);
            let seq = file.loop_append(&NewLoopRow {
                r#loop: loop_name,
                role: "user",
                content: &content,
                model: None,
                tokens: None,
            })?;
            if let Some(key) = first_kept {
                file.conn.execute(
                    "UPDATE adf_loop SET ord = ?1 WHERE seq = ?2",
                    params![key - 1, seq],
                )?;
            }
            Ok((seq, outcome))
        })
    }

    /// Writes a `loop:<name>` snapshot of `rows` (loop deletion archives whatever
    /// `audit.loop` says, §6.4).
    pub fn audit_loop_rows(&mut self, loop_name: &str, rows: &[LoopRow]) -> Result<i64> {
        let (Some(first), Some(last)) = (
            rows.iter().map(|r| r.seq).min(),
            rows.iter().map(|r| r.seq).max(),
        ) else {
            return Err(StoreError::invalid("nothing to audit"));
        };
        self.ensure_writable()?;
        audit::insert_snapshot(
            &self.conn,
            &format!("loop:{loop_name}"),
            Some((first, last)),
            None,
            rows.len() as i64,
            &snapshot(rows),
        )
    }

    /// Deletes every row of a loop after archiving them to `adf_audit` (loop deletion, §6.4).
    pub fn loop_archive_and_delete(&mut self, loop_name: &str) -> Result<RemoveOutcome> {
        self.loop_clear(loop_name, true)
    }

    /// The current time in epoch ms, as the store stamps rows.
    pub fn now_ms() -> i64 {
        time::now_ms()
    }
}
