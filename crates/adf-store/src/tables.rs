//! Typed access to the record tables: `adf_loop`, `adf_inbox`, `adf_outbox`, `adf_timers`,
//! `adf_tasks`, `adf_logs`, `adf_attestations`, `adf_identity`.
//!
//! Updates name the columns they change and never rewrite a whole row, so columns this
//! runtime does not know survive (§0.2, STO-10).

use rusqlite::types::ValueRef;
use rusqlite::{OptionalExtension, params};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{Result, StoreError};
use crate::file::AdfFile;
use crate::time;

/// One transcript row (§3.3 `adf_loop`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoopRow {
    /// Position in the whole transcript, unique across loops; assigned by SQLite on insert.
    pub seq: i64,
    /// Who the row speaks for, e.g. `user` or `assistant`.
    pub role: String,
    /// The content blocks, parsed; a malformed row keeps its text as a JSON string.
    pub content: Value,
    /// The model that produced an assistant row, as its provider names it.
    pub model: Option<String>,
    /// Token usage the provider reported for the turn, as stored JSON.
    pub tokens: Option<Value>,
    /// When the row was appended, in Unix milliseconds.
    pub created_at: i64,
    /// Ordering key that overrides `seq` when set, so a compaction summary sorts before the
    /// rows it preserved.
    pub ord: Option<i64>,
    /// The loop this row belongs to (`main` unless an inner loop wrote it).
    pub r#loop: String,
}

/// A transcript row to append.
#[derive(Debug, Clone)]
pub struct NewLoopRow<'a> {
    /// The loop to append to.
    pub r#loop: &'a str,
    /// Who the row speaks for, e.g. `user` or `assistant`.
    pub role: &'a str,
    /// The content blocks, stored as JSON text.
    pub content: &'a Value,
    /// The model that produced an assistant row.
    pub model: Option<&'a str>,
    /// Token usage the provider reported, stored as JSON text.
    pub tokens: Option<&'a Value>,
}

/// One task row (§3.3 `adf_tasks`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRow {
    /// The task id the runtime generated, also handed to the model.
    pub id: String,
    /// The tool the call runs or waits to run.
    pub tool: String,
    /// The tool arguments, parsed from the stored JSON.
    pub args: Value,
    /// Lifecycle state: `pending`, `pending_approval`, `running`, `completed`, `failed`,
    /// `denied` or `cancelled`.
    pub status: String,
    /// The tool's output once the task completed.
    pub result: Option<String>,
    /// Why the task failed or was denied.
    pub error: Option<String>,
    /// When the task was created, in Unix milliseconds.
    pub created_at: i64,
    /// When the task reached a final status, in Unix milliseconds.
    pub completed_at: Option<i64>,
    /// Who started the call (a loop, a lambda, the owner); `None` when the writer did not say.
    pub origin: Option<String>,
    /// Only the owner or authorized code may approve or deny the task (§13.4).
    pub requires_authorization: bool,
    /// The executor runs this task and resumes the turn when it settles, rather than a lambda
    /// resolving it.
    pub executor_managed: bool,
    /// What the approval prompt showed the owner (reason, arguments summary), as JSON.
    pub approval_meta: Option<Value>,
    /// The loop that created the task; `None` means `main`.
    pub r#loop: Option<String>,
}

/// One timer row (§3.3 `adf_timers`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimerRow {
    /// Row id assigned by SQLite; the handle timer tools take.
    pub id: i64,
    /// The resolved schedule (`mode` is `once`, `interval` or `cron`, §7.6).
    pub schedule: Value,
    /// When the timer fires next, in Unix milliseconds.
    pub next_wake_at: i64,
    /// Text delivered with the timer event.
    pub payload: Option<String>,
    /// The trigger scopes the timer fires for, a JSON array such as `["system","agent"]`.
    pub scope: Value,
    /// The `path:function` lambda a system-scope fire calls, if any.
    pub lambda: Option<String>,
    /// Keep the lambda's sandbox alive between fires.
    pub warm: bool,
    /// How many times the timer has fired.
    pub run_count: i64,
    /// When the timer was created, in Unix milliseconds.
    pub created_at: i64,
    /// When the timer last fired, in Unix milliseconds.
    pub last_fired_at: Option<i64>,
    /// Owner lock: the agent cannot change or delete the timer.
    pub locked: bool,
    /// The timer will not fire again; it is kept as history (§7.7).
    pub expired: bool,
    /// The loop an agent-scope fire wakes; `None` means `main`.
    pub r#loop: Option<String>,
}

/// `logging.max_rows` when the config does not say (§14.1).
pub const DEFAULT_LOG_MAX_ROWS: u64 = 10_000;

/// How many inserts apart `adf_logs` is trimmed back to `max_rows`: a hundredth of the bound,
/// at most 100 (the reference trims its 10,000 rows every 100 inserts), at least every insert.
/// Trimming on every insert rewrote the oldest pages of the table and of both its indexes in
/// each commit: about a tenth of the WAL a busy route writes.
pub fn log_trim_step(max_rows: u64) -> u64 {
    (max_rows / 100).clamp(1, 100)
}

/// A log row [`AdfFile::log`] kept in memory while its caller holds log rows
/// ([`AdfFile::hold_logs`]), to be written by [`AdfFile::write_held_logs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLog {
    level: String,
    origin: Option<String>,
    event: Option<String>,
    target: Option<String>,
    message: String,
    data: Option<String>,
    created_at: i64,
    r#loop: Option<String>,
}

impl HeldLog {
    fn new(entry: &NewLog<'_>) -> Self {
        HeldLog {
            level: entry.level.to_owned(),
            origin: entry.origin.map(str::to_owned),
            event: entry.event.map(str::to_owned),
            target: entry.target.map(str::to_owned),
            message: entry.message.to_owned(),
            data: entry.data.map(Value::to_string),
            created_at: time::now_ms(),
            r#loop: entry.r#loop.map(str::to_owned),
        }
    }
}

/// Inserts one log row in the open write transaction and trims the table every
/// [`log_trim_step`] rows; returns the row's id.
fn insert_log_row(
    conn: &rusqlite::Connection,
    row: &HeldLog,
    max_rows: Option<u64>,
) -> Result<i64> {
    conn.prepare_cached(
        "INSERT INTO adf_logs (level, origin, event, target, message, data, created_at, loop)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        row.level,
        row.origin,
        row.event,
        row.target,
        row.message,
        row.data,
        row.created_at,
        row.r#loop
    ])?;
    let id = conn.last_insert_rowid();
    if let Some(max) = max_rows.filter(|max| *max > 0)
        && id % i64::try_from(log_trim_step(max)).unwrap_or(1) == 0
        && let Some(newest_dropped) = id.checked_sub(i64::try_from(max).unwrap_or(i64::MAX))
        && newest_dropped > 0
    {
        // Row ids only grow, so everything at or below `id - max` is older than the newest
        // `max` rows; the primary key makes this a range delete.
        conn.prepare_cached("DELETE FROM adf_logs WHERE id <= ?1")?
            .execute(params![newest_dropped])?;
    }
    Ok(id)
}

/// `logging.max_rows` of a config's `logging` section (`None`: no bound).
fn log_max_rows(logging: Option<&Value>) -> Option<u64> {
    match logging.and_then(|l| l.get("max_rows")) {
        Some(Value::Null) => None,
        Some(v) => v.as_u64(),
        None => Some(DEFAULT_LOG_MAX_ROWS),
    }
}

/// The order of log levels; `None` for anything else.
fn log_rank(level: &str) -> Option<u8> {
    ["debug", "info", "warn", "error"]
        .iter()
        .position(|l| *l == level)
        .map(|i| i as u8)
}

/// The minimum level stored for `origin` under `config.logging` (default `info`).
fn min_log_rank(logging: Option<&Value>, origin: &str) -> u8 {
    let rank_of = |v: Option<&Value>| v.and_then(Value::as_str).and_then(log_rank);
    let rule = logging
        .and_then(|l| l.get("rules"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|rule| {
            rule.get("origin")
                .and_then(Value::as_str)
                .is_some_and(|glob| crate::glob::matches(glob, origin))
        });
    match rule {
        Some(rule) => rank_of(rule.get("min_level")).unwrap_or(0),
        None => rank_of(logging.and_then(|l| l.get("default_level"))).unwrap_or(1),
    }
}

/// A log row to append (§3.3 `adf_logs`).
#[derive(Debug, Clone, Default)]
pub struct NewLog<'a> {
    /// `debug`, `info`, `warn` or `error`; rows below the configured minimum are dropped.
    pub level: &'a str,
    /// The subsystem that logged, such as `executor` or `loop_inject`; matched by
    /// `logging.rules`.
    pub origin: Option<&'a str>,
    /// A short machine-readable event name.
    pub event: Option<&'a str>,
    /// What the event concerns, such as a tool name or file path.
    pub target: Option<&'a str>,
    /// The human-readable log line.
    pub message: &'a str,
    /// Structured detail, stored as JSON text.
    pub data: Option<&'a Value>,
    /// The loop the event happened in; `None` means `main` or no loop.
    pub r#loop: Option<&'a str>,
}

/// One `adf_identity` row. `value` is never exposed through `Debug` or serialization.
#[derive(Clone, PartialEq, Eq)]
pub struct IdentityRow {
    /// What the entry is for, e.g. `crypto:signing:private_key` or a provider key name; the
    /// primary key.
    pub purpose: String,
    /// The stored bytes: plaintext when `encryption_algo` is `plain`, otherwise sealed ciphertext.
    pub value: Vec<u8>,
    /// `plain`, or `env:identity` / `env:credentials` naming the envelope that sealed `value`.
    pub encryption_algo: String,
    /// Key-derivation salt stored with a sealed entry, if its scheme uses one.
    pub salt: Option<Vec<u8>>,
    /// Key-derivation parameters stored with a sealed entry, as JSON text.
    pub kdf_params: Option<String>,
    /// Lambdas may read this entry through `get_identity`.
    pub code_access: bool,
}

impl std::fmt::Debug for IdentityRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityRow")
            .field("purpose", &self.purpose)
            .field("value", &format_args!("<{} bytes>", self.value.len()))
            .field("encryption_algo", &self.encryption_algo)
            .field("code_access", &self.code_access)
            .finish_non_exhaustive()
    }
}

/// One `adf_attestations` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttestationRow {
    /// Row id assigned by SQLite.
    pub id: i64,
    /// The DID that signed the statement.
    pub issuer: String,
    /// The DID the statement is about (this agent).
    pub subject: String,
    /// `owner`, `operator`, or a past-event role such as `clone` or `rotation`.
    pub role: String,
    /// When the statement was signed, as an ISO-8601 text timestamp.
    pub issued_at: String,
    /// When the statement stops holding, if it expires.
    pub expires_at: Option<String>,
    /// What the statement permits, if it is scoped.
    pub scope: Option<String>,
    /// The issuer's signature over the statement.
    pub signature: String,
    /// The full signed statement as received, kept so the signature can be rechecked.
    pub raw_json: String,
}

impl LoopRow {
    /// The row of a `SELECT seq, role, content_json, model, tokens, created_at, ord, loop`.
    pub(crate) fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(LoopRow {
            seq: row.get(0)?,
            role: row.get(1)?,
            content: parse_json_text(row.get(2)?).unwrap_or(Value::Null),
            model: row.get(3)?,
            tokens: parse_json_text(row.get(4)?),
            created_at: row.get(5)?,
            ord: row.get(6)?,
            r#loop: row.get(7)?,
        })
    }
}

fn parse_json_text(text: Option<String>) -> Option<Value> {
    text.map(|t| serde_json::from_str(&t).unwrap_or(Value::String(t)))
}

/// Record tables that can be listed generically as JSON objects, every column included.
pub const LISTABLE: [&str; 8] = [
    "adf_inbox",
    "adf_outbox",
    "adf_timers",
    "adf_tasks",
    "adf_logs",
    "adf_audit",
    "adf_attestations",
    "adf_loop",
];

impl AdfFile {
    /// Appends a transcript row and returns its `seq`.
    pub fn loop_append(&mut self, row: &NewLoopRow<'_>) -> Result<i64> {
        if !matches!(row.role, "user" | "assistant") {
            return Err(StoreError::invalid(format!(
                "loop role must be user or assistant, not '{}'",
                row.role
            )));
        }
        if !row.content.is_array() {
            return Err(StoreError::invalid(
                "loop content must be an array of content blocks",
            ));
        }
        self.ensure_writable()?;
        // `serde_json::to_string` writes the bytes `Value`'s `Display` does, straight into a
        // buffer instead of through a `fmt::Formatter`.
        let encode = |value: &Value| {
            serde_json::to_string(value)
                .map_err(|e| StoreError::invalid(format!("loop row is not JSON: {e}")))
        };
        let content = encode(row.content)?;
        let tokens = row.tokens.map(encode).transpose()?;
        self.conn.prepare_cached(
            "INSERT INTO adf_loop (role, content_json, model, tokens, created_at, loop) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?.execute(
            params![
                row.role,
                content,
                row.model,
                tokens,
                time::now_ms(),
                row.r#loop
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// A loop's transcript in stream order (`COALESCE(ord, seq), seq`).
    pub fn loop_rows(&self, loop_name: &str) -> Result<Vec<LoopRow>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, role, content_json, model, tokens, created_at, ord, loop FROM adf_loop
             WHERE loop = ?1 ORDER BY COALESCE(ord, seq), seq",
        )?;
        let rows = stmt.query_map([loop_name], LoopRow::from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The names of loops that have transcript rows, `main` first.
    pub fn loop_names(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT loop FROM adf_loop ORDER BY loop = 'main' DESC, loop")?;
        let rows = stmt.query_map([], |row| row.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every row of a record table as JSON objects with all columns, unknown ones included,
    /// newest first, at most `limit` rows. Blobs appear as their byte length.
    pub fn table_rows(&self, table: &str, limit: usize) -> Result<Vec<Map<String, Value>>> {
        if !LISTABLE.contains(&table) {
            return Err(StoreError::invalid(format!(
                "'{table}' is not a record table"
            )));
        }
        let order = match table {
            "adf_loop" => "seq",
            "adf_inbox" => "received_at",
            "adf_outbox" | "adf_tasks" | "adf_logs" | "adf_audit" => "created_at",
            _ => "rowid",
        };
        let mut stmt = self.conn.prepare(&format!(
            "SELECT * FROM {table} ORDER BY {order} DESC, rowid DESC LIMIT ?1"
        ))?;
        let names: Vec<String> = stmt.column_names().map(str::to_owned).collect();
        let mut rows = stmt.query([limit as i64])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
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
            out.push(object);
        }
        Ok(out)
    }

    /// Tasks, newest first; only those with `status` when given.
    pub fn tasks(&self, status: Option<&str>) -> Result<Vec<TaskRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, tool, args, status, result, error, created_at, completed_at, origin,
                    requires_authorization, executor_managed, approval_meta, loop
             FROM adf_tasks WHERE ?1 IS NULL OR status = ?1 ORDER BY created_at DESC, id",
        )?;
        let rows = stmt.query_map([status], task_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// One task.
    pub fn task(&self, id: &str) -> Result<Option<TaskRow>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, tool, args, status, result, error, created_at, completed_at, origin,
                        requires_authorization, executor_managed, approval_meta, loop
                 FROM adf_tasks WHERE id = ?1",
                [id],
                task_from_row,
            )
            .optional()?)
    }

    /// Timers ordered by next wake time.
    pub fn timers(&self) -> Result<Vec<TimerRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, schedule_json, next_wake_at, payload, scope, lambda, warm, run_count, created_at,
                    last_fired_at, locked, expired, loop
             FROM adf_timers ORDER BY expired, next_wake_at, id",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok(TimerRow {
                id: row.get(0)?,
                schedule: parse_json_text(row.get(1)?).unwrap_or(Value::Null),
                next_wake_at: row.get(2)?,
                payload: row.get(3)?,
                scope: parse_json_text(row.get(4)?).unwrap_or(Value::Null),
                lambda: row.get(5)?,
                warm: row.get::<_, i64>(6)? != 0,
                run_count: row.get(7)?,
                created_at: row.get(8)?,
                last_fired_at: row.get(9)?,
                locked: row.get::<_, i64>(10)? != 0,
                expired: row.get::<_, i64>(11)? != 0,
                r#loop: row.get(12)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Appends a log row unless `config.logging` filters it out (§5.10: the first `rules`
    /// entry whose `origin` glob matches sets the minimum level, else `default_level`), then,
    /// when the new row's id is a multiple of [`log_trim_step`], trims the oldest rows beyond
    /// `logging.max_rows` (`null`: no bound), so between trims the table passes its bound by
    /// the rows written since the last one (fewer than a step when every row comes through
    /// here). Returns the new row's id; `None` when the level is below the minimum, or when
    /// the row is held in memory ([`hold_logs`](Self::hold_logs)).
    pub fn log(&mut self, entry: &NewLog<'_>) -> Result<Option<i64>> {
        let Some(level) = log_rank(entry.level) else {
            return Err(StoreError::invalid(format!(
                "log level must be debug, info, warn or error, not '{}'",
                entry.level
            )));
        };
        let config = self.config_shared()?;
        let logging = config.get("logging");
        if level < min_log_rank(logging, entry.origin.unwrap_or("")) {
            return Ok(None);
        }
        if let Some(held) = self.held_logs.as_mut() {
            held.push(HeldLog::new(entry));
            return Ok(None);
        }
        self.ensure_writable()?;
        let max_rows = log_max_rows(logging);
        // The row and the pruning behind it commit together: one WAL commit per row, not two.
        let tx = crate::file::write_tx(&mut self.conn)?;
        let id = insert_log_row(&tx, &HeldLog::new(entry), max_rows)?;
        tx.commit()?;
        Ok(Some(id))
    }

    /// From now on [`log`](Self::log) keeps the rows that pass its filter in memory instead of
    /// writing them, until [`release_held_logs`](Self::release_held_logs). A caller that runs
    /// many short units of work on this connection (the serving lane's route requests) writes
    /// their log rows later in one transaction ([`write_held_logs`](Self::write_held_logs)),
    /// so a unit that wrote nothing else commits nothing.
    pub fn hold_logs(&mut self) {
        self.held_logs.get_or_insert_with(Vec::new);
    }

    /// Ends [`hold_logs`](Self::hold_logs) and returns the rows held, oldest first.
    pub fn release_held_logs(&mut self) -> Vec<HeldLog> {
        self.held_logs.take().unwrap_or_default()
    }

    /// Writes held log rows, oldest first, in one write transaction (nested in the caller's
    /// when one is open), trimming as [`log`](Self::log) does.
    pub fn write_held_logs(&mut self, rows: &[HeldLog]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let max_rows = log_max_rows(self.config_shared()?.get("logging"));
        self.ensure_writable()?;
        let tx = crate::file::write_tx(&mut self.conn)?;
        for row in rows {
            insert_log_row(&tx, row, max_rows)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Every identity row. Values stay sealed; callers decide what may be shown.
    pub fn identity_rows(&self) -> Result<Vec<IdentityRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT purpose, value, COALESCE(encryption_algo, 'plain'), salt, kdf_params, code_access
             FROM adf_identity ORDER BY purpose",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok(IdentityRow {
                purpose: row.get(0)?,
                value: row.get(1)?,
                encryption_algo: row.get(2)?,
                salt: row.get(3)?,
                kdf_params: row.get(4)?,
                code_access: row.get::<_, i64>(5)? != 0,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Writes identity rows as the runtime, in one transaction; an existing row keeps its
    /// `code_access` flag (§3.3: overwriting never changes it).
    pub fn identity_put(&mut self, rows: &[IdentityRow]) -> Result<()> {
        self.check_writable()?;
        let tx = crate::file::write_tx(&mut self.conn)?;
        for row in rows {
            tx.execute(
                "INSERT INTO adf_identity (purpose, value, encryption_algo, salt, kdf_params, code_access)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT(purpose) DO UPDATE SET value = excluded.value,
                   encryption_algo = excluded.encryption_algo, salt = excluded.salt, kdf_params = excluded.kdf_params",
                params![row.purpose, row.value, row.encryption_algo, row.salt, row.kdf_params, row.code_access],
            )?;
        }
        crate::file::consume_marker(&tx, &self.marker_pending)?;
        tx.commit()?;
        Ok(())
    }

    /// Removes identity rows by purpose; returns how many existed.
    pub fn identity_delete(&mut self, purposes: &[&str]) -> Result<usize> {
        self.check_writable()?;
        let tx = crate::file::write_tx(&mut self.conn)?;
        let mut removed = 0;
        for purpose in purposes {
            removed += tx.execute("DELETE FROM adf_identity WHERE purpose = ?1", [purpose])?;
        }
        crate::file::consume_marker(&tx, &self.marker_pending)?;
        tx.commit()?;
        Ok(removed)
    }

    /// Every attestation in insertion order.
    pub fn attestations(&self) -> Result<Vec<AttestationRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, issuer, subject, role, issued_at, expires_at, scope, signature, raw_json
             FROM adf_attestations ORDER BY id",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok(AttestationRow {
                id: row.get(0)?,
                issuer: row.get(1)?,
                subject: row.get(2)?,
                role: row.get(3)?,
                issued_at: row.get(4)?,
                expires_at: row.get(5)?,
                scope: row.get(6)?,
                signature: row.get(7)?,
                raw_json: row.get(8)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Inserts an attestation unless an identical one (issuer, subject, role, signature)
    /// exists; `owner`/`operator` rows replace earlier rows of that role (§3.3 lifecycle).
    /// Returns whether a row was inserted.
    pub fn attestation_insert(&mut self, row: &AttestationRow) -> Result<bool> {
        self.check_writable()?;
        let tx = crate::file::write_tx(&mut self.conn)?;
        let duplicate = tx
            .query_row(
                "SELECT 1 FROM adf_attestations WHERE issuer = ?1 AND subject = ?2 AND role = ?3 AND signature = ?4",
                params![row.issuer, row.subject, row.role, row.signature],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        if duplicate {
            return Ok(false);
        }
        if matches!(row.role.as_str(), "owner" | "operator") {
            tx.execute("DELETE FROM adf_attestations WHERE role = ?1", [&row.role])?;
        }
        tx.execute(
            "INSERT INTO adf_attestations (issuer, subject, role, issued_at, expires_at, scope, signature, raw_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![row.issuer, row.subject, row.role, row.issued_at, row.expires_at, row.scope, row.signature, row.raw_json],
        )?;
        crate::file::consume_marker(&tx, &self.marker_pending)?;
        tx.commit()?;
        Ok(true)
    }
}

fn task_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRow> {
    Ok(TaskRow {
        id: row.get(0)?,
        tool: row.get(1)?,
        args: parse_json_text(row.get(2)?).unwrap_or(Value::Null),
        status: row.get(3)?,
        result: row.get(4)?,
        error: row.get(5)?,
        created_at: row.get(6)?,
        completed_at: row.get(7)?,
        origin: row.get(8)?,
        requires_authorization: row.get::<_, i64>(9)? != 0,
        executor_managed: row.get::<_, i64>(10)? != 0,
        approval_meta: parse_json_text(row.get(11)?),
        r#loop: row.get(12)?,
    })
}
