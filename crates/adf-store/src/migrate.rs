//! The migration ladder from storage schema 3 to 32 (missing-tables §17.1) and the idempotent
//! legacy pass that runs after it on every open.
//!
//! Every numbered step runs in its own transaction that also records the step's number as the
//! schema version, so a failure leaves the file at the last committed step (the caller restores
//! its backup). Steps 4..=28 follow the reference runtime at schema 28; steps 29..=32 follow the
//! reference runtime at schema 32.
//!
//! Data rules shared by every step:
//! - rows, unknown columns, unknown `adf_meta` keys and unknown config fields survive; the only
//!   data a step drops is what its table row says (the inbox/outbox recreations of steps ≤ 10,
//!   `adf_peers` at 21, retired meta keys it moves);
//! - `config_json` is patched as a `serde_json::Value` (key order preserved, removals keep the
//!   order of the remaining keys), never through a typed struct;
//! - a config that is not a JSON object is left untouched by config steps (logged), because a
//!   storage migration must not fail on something the config layer reports on its own.
//!
//! Choices where §17.1 leaves room:
//! - the "every migrating open" fixes are split in two: the structural ones the numbered steps
//!   rely on (missing `adf_loop` columns, `adf_archive`, `adf_audit`, `adf_files.protected`) run
//!   inside the first step's transaction, and [`legacy_cleanup`] (which repeats them as no-ops)
//!   runs after the last step;
//! - a legacy v1 trigger config is replaced by today's default trigger set (§14.2);
//! - step 30 sets the four `dynamic_instructions` keys to false and keeps any other key in that
//!   object (the reference replaced the whole object);
//! - step 20 merges into an existing `restricted_methods` instead of replacing it;
//! - step 28 keeps columns of the old `adf_audit` it does not know, and the table's
//!   AUTOINCREMENT high-water mark.

use std::io::Read as _;

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension as _, TransactionBehavior, params};
use serde_json::{Map, Value};

use crate::schema::{SCHEMA_DDL, SCHEMA_VERSION};
use crate::{Result, StoreError, defaults};

/// The step number [`run_ladder`] reports when the final [`legacy_cleanup`] pass fails: that
/// pass runs after step [`SCHEMA_VERSION`] has committed.
pub const LEGACY_CLEANUP_STEP: u32 = SCHEMA_VERSION + 1;

/// The first schema whose version lives under `adf_schema_version` (before it: `schema_version`).
const FIRST_PREFIXED_VERSION: u32 = 14;

/// Identity meta keys that must be readonly whatever runtime wrote them.
const IDENTITY_META_KEYS: [&str; 4] = [
    "adf_did",
    "adf_owner_did",
    "adf_runtime_did",
    "adf_did_history",
];

/// Code-execution methods that `security.require_authorized` could gate before schema 20.
const GATEABLE_CODE_METHODS: [&str; 8] = [
    "model_invoke",
    "sys_lambda",
    "task_resolve",
    "loop_inject",
    "identity_status",
    "get_identity",
    "set_identity",
    "authorize_file",
];

/// Schema version stored in the file: `adf_meta.adf_schema_version`, else the legacy key
/// `schema_version` (files older than schema 14), else 0.
///
/// Returns `Ok(None)` when the database has no `adf_meta` table (it is not an ADF file), and
/// [`StoreError::Malformed`] when the stored value is not a non-negative integer. Never writes.
pub fn read_schema_version(conn: &Connection) -> Result<Option<u32>> {
    if !table_exists(conn, "adf_meta")? {
        return Ok(None);
    }
    for key in ["adf_schema_version", "schema_version"] {
        let value: Option<SqlValue> = conn
            .query_row("SELECT value FROM adf_meta WHERE key = ?1", [key], |row| {
                row.get(0)
            })
            .optional()?;
        if let Some(value) = value {
            return parse_version(key, &value).map(Some);
        }
    }
    Ok(Some(0))
}

fn parse_version(key: &str, value: &SqlValue) -> Result<u32> {
    // A version beyond u32 is still a version, just one far newer than ours: it saturates at
    // u32::MAX so the caller reports it as newer (with the path) instead of as malformed.
    let saturate = |wide: u128| u32::try_from(wide).unwrap_or(u32::MAX);
    let parsed = match value {
        SqlValue::Integer(i) => u128::try_from(*i).ok().map(saturate),
        SqlValue::Text(s) => {
            let digits = s.trim();
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                Some(digits.parse::<u128>().map_or(u32::MAX, saturate))
            } else {
                None
            }
        }
        // A JSON-minded writer may have stored 28.0; accept whole numbers only.
        SqlValue::Real(f) if f.fract() == 0.0 && *f >= 0.0 && *f <= f64::from(u32::MAX) => {
            // In range and whole, so the cast is exact.
            Some(*f as u32)
        }
        _ => None,
    };
    parsed.ok_or_else(|| {
        StoreError::Malformed(format!(
            "adf_meta.{key} is {value:?}, not a schema version (a non-negative integer)"
        ))
    })
}

/// Runs every numbered step from `from` up to [`SCHEMA_VERSION`], in order, each step in its own
/// transaction that also sets the schema version to the step's number (`schema_version` for
/// steps below 14, `adf_schema_version` from 14 on); then runs [`legacy_cleanup`].
///
/// Calls `on_step(n)` after step `n` commits. On failure returns the failing step number and
/// the error; earlier steps stay committed (the caller restores its backup). A failure of the
/// final cleanup pass is reported as step [`LEGACY_CLEANUP_STEP`]. `from` must be in
/// `3..=SCHEMA_VERSION`: a smaller value fails at step `from + 1` (no such step exists) and a
/// larger one is refused without writing.
pub fn run_ladder(
    conn: &mut Connection,
    from: u32,
    on_step: &mut dyn FnMut(u32),
) -> std::result::Result<(), (u32, StoreError)> {
    if from > SCHEMA_VERSION {
        return Err((
            from,
            StoreError::invalid(format!(
                "schema {from} is newer than {SCHEMA_VERSION}; there is nothing to migrate and the file must not be touched"
            )),
        ));
    }
    for step in from + 1..=SCHEMA_VERSION {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| (step, StoreError::from(e)))?;
        let applied = (|| -> Result<()> {
            if step == from + 1 {
                for note in structural_fixes(&tx)? {
                    tracing::info!(step, "{note}");
                }
            }
            apply_step(&tx, step)?;
            set_schema_version(&tx, step)
        })();
        // Dropping `tx` on the error path rolls the step back.
        applied.map_err(|e| (step, e))?;
        tx.commit().map_err(|e| (step, StoreError::from(e)))?;
        tracing::info!(step, "migrated to storage schema {step}");
        on_step(step);
    }
    let notes = legacy_cleanup(conn).map_err(|e| (LEGACY_CLEANUP_STEP, e))?;
    for note in notes {
        tracing::info!("legacy cleanup: {note}");
    }
    Ok(())
}

/// The idempotent pass the reference runs on every migrating open (§17.1, last paragraph) plus
/// the removals and back-fills the seed requires without pinning them to a version:
///
/// - structure: missing `adf_loop.model/tokens/created_at`, `DROP TABLE adf_archive`, create
///   `adf_audit` if missing, `adf_files.protected` → `protection`, the `idx_adf_loop_stream` index;
/// - config: strip `loop_mode`, `context.document_mode`, `context.mind_mode`,
///   `security.allow_protected_writes`, `limits.compaction_threshold_tokens`; rename tool
///   `container_exec` → `compute_exec`; a legacy v1 trigger config (`triggers.document` /
///   `triggers.agent`) becomes the default trigger set;
/// - files: `document.md` → `README.md` when README is missing, then any missing core file
///   (README.md, mind.md, mind/log.md, soul.md: `no_delete`, `text/markdown`);
/// - meta: identity keys (`adf_did`, `adf_owner_did`, `adf_runtime_did`, `adf_did_history`)
///   readonly; `adf_version` = `0.2` if missing.
///
/// Returns one human-readable note per change, empty when nothing changed. Writes nothing at
/// all when nothing is needed. Runs in one savepoint, so it is atomic on its own and may also
/// be called inside the caller's transaction.
pub fn legacy_cleanup(conn: &Connection) -> Result<Vec<String>> {
    let savepoint = SavepointGuard::begin(conn, "adf_legacy_cleanup")?;
    let mut notes = structural_fixes(conn)?;
    notes.extend(config_cleanup(conn)?);
    notes.extend(backfill_core_files(conn)?);
    notes.extend(meta_cleanup(conn)?);
    savepoint.release()?;
    Ok(notes)
}

/// A named savepoint that rolls back unless released: works inside or outside a transaction.
struct SavepointGuard<'c> {
    conn: &'c Connection,
    name: &'static str,
    released: bool,
}

impl<'c> SavepointGuard<'c> {
    fn begin(conn: &'c Connection, name: &'static str) -> Result<Self> {
        conn.execute_batch(&format!("SAVEPOINT {name}"))?;
        Ok(Self {
            conn,
            name,
            released: false,
        })
    }

    fn release(mut self) -> Result<()> {
        self.conn.execute_batch(&format!("RELEASE {}", self.name))?;
        self.released = true;
        Ok(())
    }
}

impl Drop for SavepointGuard<'_> {
    fn drop(&mut self) {
        if !self.released {
            let name = self.name;
            if let Err(e) = self
                .conn
                .execute_batch(&format!("ROLLBACK TO {name}; RELEASE {name}"))
            {
                tracing::warn!("rolling back savepoint {name} failed: {e}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The numbered steps
// ---------------------------------------------------------------------------------------------

fn apply_step(conn: &Connection, step: u32) -> Result<()> {
    match step {
        4 => step_04_inbox_outbox_v4(conn),
        5 => step_05_tasks_logs(conn),
        6 => step_06_timer_lambda_scope(conn),
        7 => step_07_inbox_outbox_v7(conn),
        8 => step_08_inbox_outbox_v8(conn),
        9 => step_09_peers(conn),
        10 => step_10_inbox_outbox_v10(conn),
        11 => step_11_peers_handle(conn),
        12 => step_12_peers_trust(conn),
        13 => add_column_if_missing(
            conn,
            "adf_identity",
            "code_access",
            "INTEGER NOT NULL DEFAULT 0",
        ),
        14 => step_14_meta_keys(conn),
        15 => step_15_meta_protection(conn),
        16 => add_column_if_missing(conn, "adf_timers", "locked", "INTEGER NOT NULL DEFAULT 0"),
        17 => add_column_if_missing(
            conn,
            "adf_files",
            "authorized",
            "INTEGER NOT NULL DEFAULT 0",
        ),
        18 => add_column_if_missing(
            conn,
            "adf_tasks",
            "requires_authorization",
            "INTEGER NOT NULL DEFAULT 0",
        ),
        19 => add_column_if_missing(
            conn,
            "adf_tasks",
            "executor_managed",
            "INTEGER NOT NULL DEFAULT 0",
        ),
        20 => step_20_restricted(conn),
        21 => step_21_drop_peers(conn),
        22 => step_22_readme(conn),
        23 => step_23_config_conformance(conn),
        24 => step_24_attestations(conn),
        25 => {
            insert_file_if_missing(conn, "soul.md", defaults::SOUL.as_bytes(), &now_iso()).map(drop)
        }
        26 => add_column_if_missing(conn, "adf_timers", "expired", "INTEGER NOT NULL DEFAULT 0"),
        27 => add_column_if_missing(conn, "adf_tasks", "approval_meta", "TEXT"),
        28 => step_28_ord_audit_mind(conn),
        29 => step_29_loops(conn),
        30 => step_30_bare_prompt(conn),
        31 => step_31_icon(conn),
        32 => conn
            .execute_batch(&ddl_statement(
                "CREATE INDEX IF NOT EXISTS idx_adf_outbox_created ",
            )?)
            .map_err(Into::into),
        _ => Err(StoreError::invalid(format!(
            "there is no migration step to schema {step}; the ladder covers {}..={SCHEMA_VERSION}",
            crate::schema::OLDEST_MIGRATABLE_SCHEMA + 1
        ))),
    }
}

fn set_schema_version(conn: &Connection, step: u32) -> Result<()> {
    let key = if step < FIRST_PREFIXED_VERSION {
        "schema_version"
    } else {
        "adf_schema_version"
    };
    let value = step.to_string();
    if has_column(conn, "adf_meta", "protection")? {
        // An upsert, not INSERT OR REPLACE: replacing would reset the key's protection.
        conn.execute(
            "INSERT INTO adf_meta (key, value, protection) VALUES (?1, ?2, 'readonly')
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?;
    } else {
        conn.execute(
            "INSERT INTO adf_meta (key, value) VALUES (?1, ?2)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?;
    }
    Ok(())
}

/// v4: the unified inbox/outbox. Message data is discarded by design of the step.
fn step_04_inbox_outbox_v4(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "DROP TABLE IF EXISTS adf_inbox;
         DROP TABLE IF EXISTS adf_outbox;
         CREATE TABLE adf_inbox (
           id TEXT PRIMARY KEY,
           sender TEXT NOT NULL,
           sender_name TEXT,
           trace_id TEXT,
           parent_id TEXT,
           intent TEXT,
           payload TEXT NOT NULL,
           attachments TEXT,
           source TEXT NOT NULL DEFAULT 'mesh',
           source_meta TEXT,
           header TEXT,
           signature BLOB,
           sent_at INTEGER,
           received_at INTEGER NOT NULL,
           status TEXT NOT NULL DEFAULT 'unread'
         );
         CREATE INDEX idx_adf_inbox_status ON adf_inbox(status);
         CREATE INDEX idx_adf_inbox_received ON adf_inbox(received_at);
         CREATE INDEX idx_adf_inbox_trace ON adf_inbox(trace_id);
         CREATE INDEX idx_adf_inbox_source ON adf_inbox(source);
         CREATE TABLE adf_outbox (
           id TEXT PRIMARY KEY,
           recipient TEXT NOT NULL,
           recipient_name TEXT,
           trace_id TEXT,
           parent_id TEXT,
           intent TEXT,
           payload TEXT NOT NULL,
           attachments TEXT,
           source TEXT NOT NULL DEFAULT 'mesh',
           source_meta TEXT,
           header TEXT,
           signature BLOB,
           created_at INTEGER NOT NULL,
           delivered_at INTEGER,
           status TEXT NOT NULL DEFAULT 'pending'
         );
         CREATE INDEX idx_adf_outbox_status ON adf_outbox(status);
         CREATE INDEX idx_adf_outbox_trace ON adf_outbox(trace_id);",
    )?;
    Ok(())
}

/// v5: tasks and logs tables in their first shape; timers of scope `document` become `system`.
fn step_05_tasks_logs(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS adf_tasks (
           id TEXT PRIMARY KEY,
           tool TEXT NOT NULL,
           args TEXT NOT NULL DEFAULT '{}',
           status TEXT NOT NULL DEFAULT 'pending',
           result TEXT,
           error TEXT,
           created_at INTEGER NOT NULL,
           completed_at INTEGER,
           origin TEXT
         );
         CREATE INDEX IF NOT EXISTS idx_adf_tasks_status ON adf_tasks(status);
         CREATE TABLE IF NOT EXISTS adf_logs (
           id INTEGER PRIMARY KEY AUTOINCREMENT,
           level TEXT NOT NULL DEFAULT 'info',
           origin TEXT,
           event TEXT,
           target TEXT,
           message TEXT NOT NULL,
           data TEXT,
           created_at INTEGER NOT NULL
         );
         CREATE INDEX IF NOT EXISTS idx_adf_logs_level ON adf_logs(level);
         CREATE INDEX IF NOT EXISTS idx_adf_logs_origin ON adf_logs(origin);",
    )?;
    if table_exists(conn, "adf_timers")? {
        conn.execute(
            "UPDATE adf_timers SET scope = 'system' WHERE scope = 'document'",
            [],
        )?;
    }
    Ok(())
}

/// v6: timers get `lambda` and `warm`; a bare scope string becomes a JSON array.
fn step_06_timer_lambda_scope(conn: &Connection) -> Result<()> {
    add_column_if_missing(conn, "adf_timers", "lambda", "TEXT")?;
    add_column_if_missing(conn, "adf_timers", "warm", "INTEGER NOT NULL DEFAULT 0")?;
    let rows: Vec<(i64, Option<String>)> = {
        let mut stmt = conn.prepare("SELECT id, scope FROM adf_timers")?;
        stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?
    };
    for (id, scope) in rows {
        let Some(scope) = scope else { continue };
        // Already JSON (an array, or anything else that parses) is left as it is.
        if serde_json::from_str::<Value>(&scope).is_ok() {
            continue;
        }
        let array = Value::Array(vec![Value::String(scope)]).to_string();
        conn.execute(
            "UPDATE adf_timers SET scope = ?1 WHERE id = ?2",
            params![array, id],
        )?;
    }
    Ok(())
}

/// v7: inbox/outbox in the DID + address shape. Message data is discarded.
fn step_07_inbox_outbox_v7(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "DROP TABLE IF EXISTS adf_inbox;
         DROP TABLE IF EXISTS adf_outbox;
         CREATE TABLE adf_inbox (
           id TEXT PRIMARY KEY,
           sender TEXT NOT NULL,
           reply_to TEXT,
           trace_id TEXT,
           parent_id TEXT,
           intent TEXT,
           payload TEXT NOT NULL,
           attachments TEXT,
           source TEXT NOT NULL DEFAULT 'mesh',
           source_meta TEXT,
           header TEXT,
           signature BLOB,
           sent_at INTEGER,
           received_at INTEGER NOT NULL,
           status TEXT NOT NULL DEFAULT 'unread'
         );
         CREATE INDEX idx_adf_inbox_status ON adf_inbox(status);
         CREATE INDEX idx_adf_inbox_received ON adf_inbox(received_at);
         CREATE INDEX idx_adf_inbox_trace ON adf_inbox(trace_id);
         CREATE INDEX idx_adf_inbox_source ON adf_inbox(source);
         CREATE TABLE adf_outbox (
           id TEXT PRIMARY KEY,
           recipient TEXT NOT NULL,
           address TEXT NOT NULL DEFAULT '',
           trace_id TEXT,
           parent_id TEXT,
           intent TEXT,
           payload TEXT NOT NULL,
           attachments TEXT,
           source TEXT NOT NULL,
           source_meta TEXT,
           header TEXT,
           signature BLOB,
           status_code INTEGER,
           created_at INTEGER NOT NULL,
           delivered_at INTEGER,
           status TEXT NOT NULL DEFAULT 'pending'
         );
         CREATE INDEX idx_adf_outbox_status ON adf_outbox(status);
         CREATE INDEX idx_adf_outbox_trace ON adf_outbox(trace_id);",
    )?;
    Ok(())
}

/// v8: inbox/outbox in the ALF envelope shape. Message data is discarded.
fn step_08_inbox_outbox_v8(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "DROP TABLE IF EXISTS adf_inbox;
         DROP TABLE IF EXISTS adf_outbox;
         CREATE TABLE adf_inbox (
           id TEXT PRIMARY KEY,
           \"from\" TEXT NOT NULL,
           \"to\" TEXT,
           reply_to TEXT,
           network TEXT DEFAULT 'devnet',
           thread_id TEXT,
           parent_id TEXT,
           subject TEXT,
           content TEXT NOT NULL,
           attachments TEXT,
           meta TEXT,
           sender_alias TEXT,
           recipient_alias TEXT,
           source TEXT DEFAULT 'mesh',
           source_context TEXT,
           sent_at INTEGER,
           received_at INTEGER NOT NULL,
           status TEXT NOT NULL DEFAULT 'unread',
           envelope TEXT
         );
         CREATE INDEX idx_adf_inbox_status ON adf_inbox(status);
         CREATE INDEX idx_adf_inbox_received ON adf_inbox(received_at);
         CREATE INDEX idx_adf_inbox_thread ON adf_inbox(thread_id);
         CREATE INDEX idx_adf_inbox_from ON adf_inbox(\"from\");
         CREATE INDEX idx_adf_inbox_source ON adf_inbox(source);
         CREATE TABLE adf_outbox (
           id TEXT PRIMARY KEY,
           \"from\" TEXT NOT NULL,
           \"to\" TEXT NOT NULL,
           address TEXT DEFAULT '',
           reply_to TEXT,
           network TEXT DEFAULT 'devnet',
           thread_id TEXT,
           parent_id TEXT,
           subject TEXT,
           content TEXT NOT NULL,
           attachments TEXT,
           meta TEXT,
           sender_alias TEXT,
           recipient_alias TEXT,
           status_code INTEGER,
           created_at INTEGER NOT NULL,
           delivered_at INTEGER,
           status TEXT NOT NULL DEFAULT 'pending',
           envelope TEXT
         );
         CREATE INDEX idx_adf_outbox_status ON adf_outbox(status);
         CREATE INDEX idx_adf_outbox_thread ON adf_outbox(thread_id);",
    )?;
    Ok(())
}

/// v9: the contact book (removed again at 21).
fn step_09_peers(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS adf_peers (
           did TEXT PRIMARY KEY,
           alias TEXT NOT NULL DEFAULT '',
           description TEXT NOT NULL DEFAULT '',
           icon TEXT,
           address TEXT NOT NULL DEFAULT '',
           network TEXT DEFAULT 'devnet',
           public_key TEXT,
           endpoints TEXT,
           mesh_routes TEXT,
           capabilities TEXT,
           source TEXT NOT NULL DEFAULT 'mesh',
           last_seen_at INTEGER NOT NULL,
           created_at INTEGER NOT NULL,
           meta TEXT
         );
         CREATE INDEX IF NOT EXISTS idx_adf_peers_alias ON adf_peers(alias);",
    )?;
    Ok(())
}

/// v10: inbox/outbox in today's shape (taken from the schema-32 DDL, which did not change them
/// except for the outbox `created_at` index of step 32). Message data is discarded.
fn step_10_inbox_outbox_v10(conn: &Connection) -> Result<()> {
    conn.execute_batch("DROP TABLE IF EXISTS adf_inbox; DROP TABLE IF EXISTS adf_outbox;")?;
    for prefix in [
        "CREATE TABLE IF NOT EXISTS adf_inbox ",
        "CREATE INDEX IF NOT EXISTS idx_adf_inbox_status ",
        "CREATE INDEX IF NOT EXISTS idx_adf_inbox_received ",
        "CREATE INDEX IF NOT EXISTS idx_adf_inbox_thread ",
        "CREATE INDEX IF NOT EXISTS idx_adf_inbox_from ",
        "CREATE INDEX IF NOT EXISTS idx_adf_inbox_source ",
        "CREATE INDEX IF NOT EXISTS idx_adf_inbox_message_id ",
        "CREATE TABLE IF NOT EXISTS adf_outbox ",
        "CREATE INDEX IF NOT EXISTS idx_adf_outbox_status ",
        "CREATE INDEX IF NOT EXISTS idx_adf_outbox_thread ",
        "CREATE INDEX IF NOT EXISTS idx_adf_outbox_message_id ",
    ] {
        conn.execute_batch(&ddl_statement(prefix)?)?;
    }
    Ok(())
}

/// v11: peers `alias` → `handle`, plus `resolution` and `policies`.
fn step_11_peers_handle(conn: &Connection) -> Result<()> {
    if !table_exists(conn, "adf_peers")? {
        return Ok(());
    }
    let columns = column_names(conn, "adf_peers")?;
    if columns.iter().any(|c| c == "alias") && !columns.iter().any(|c| c == "handle") {
        conn.execute_batch("ALTER TABLE adf_peers RENAME COLUMN alias TO handle")?;
    }
    add_column_if_missing(conn, "adf_peers", "resolution", "TEXT")?;
    add_column_if_missing(conn, "adf_peers", "policies", "TEXT")?;
    conn.execute_batch(
        "DROP INDEX IF EXISTS idx_adf_peers_alias;
         CREATE INDEX IF NOT EXISTS idx_adf_peers_handle ON adf_peers(handle);",
    )?;
    Ok(())
}

/// v12: peers `via`, `trust`, `capabilities`.
fn step_12_peers_trust(conn: &Connection) -> Result<()> {
    if !table_exists(conn, "adf_peers")? {
        return Ok(());
    }
    add_column_if_missing(conn, "adf_peers", "via", "TEXT")?;
    add_column_if_missing(
        conn,
        "adf_peers",
        "trust",
        "TEXT NOT NULL DEFAULT 'unknown'",
    )?;
    add_column_if_missing(conn, "adf_peers", "capabilities", "TEXT")?;
    conn.execute_batch("CREATE INDEX IF NOT EXISTS idx_adf_peers_via ON adf_peers(via)")?;
    Ok(())
}

/// v14: the `adf_*` meta key convention. The version key itself is written by the ladder.
fn step_14_meta_keys(conn: &Connection) -> Result<()> {
    conn.execute(
        "DELETE FROM adf_meta WHERE key IN ('format', 'schema_version')",
        [],
    )?;
    for (old, new) in [
        ("did", "adf_did"),
        ("owner_did", "adf_owner_did"),
        ("runtime_did", "adf_runtime_did"),
    ] {
        if let Some(value) = meta_raw(conn, old)? {
            upsert_meta(conn, new, value)?;
            conn.execute("DELETE FROM adf_meta WHERE key = ?1", [old])?;
        }
    }
    if let Some(config) = load_config(conn)? {
        let name = config
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("Untitled Agent")
            .to_owned();
        let handle = match config.get("handle").and_then(Value::as_str) {
            Some(handle) => handle.to_owned(),
            None => defaults::handle_from_name(&name),
        };
        let now = now_iso();
        let metadata = config.get("metadata");
        let stamp = |field: &str| {
            metadata
                .and_then(|m| m.get(field))
                .and_then(Value::as_str)
                .map_or_else(|| now.clone(), str::to_owned)
        };
        upsert_meta(conn, "adf_name", SqlValue::Text(name))?;
        upsert_meta(conn, "adf_handle", SqlValue::Text(handle))?;
        upsert_meta(conn, "adf_created_at", SqlValue::Text(stamp("created_at")))?;
        upsert_meta(conn, "adf_updated_at", SqlValue::Text(stamp("updated_at")))?;
        // Unlike the reference, an existing parent DID or status is never blanked.
        insert_meta_if_missing(conn, "adf_parent_did", "")?;
    }
    for (key, purpose) in [
        ("identity_salt", "crypto:kdf:salt"),
        ("identity_kdf_params", "crypto:kdf:params"),
    ] {
        if let Some(value) = meta_raw(conn, key)? {
            let bytes = match value {
                SqlValue::Text(s) => s.into_bytes(),
                SqlValue::Blob(b) => b,
                SqlValue::Integer(i) => i.to_string().into_bytes(),
                SqlValue::Real(f) => f.to_string().into_bytes(),
                SqlValue::Null => Vec::new(),
            };
            if !bytes.is_empty() {
                conn.execute(
                    "INSERT OR REPLACE INTO adf_identity (purpose, value, encryption_algo, code_access)
                     VALUES (?1, ?2, 'plain', 0)",
                    params![purpose, bytes],
                )?;
            }
            conn.execute("DELETE FROM adf_meta WHERE key = ?1", [key])?;
        }
    }
    insert_meta_if_missing(conn, "status", "")?;
    Ok(())
}

/// v15: meta protection levels; every `adf_*` key becomes readonly.
fn step_15_meta_protection(conn: &Connection) -> Result<()> {
    add_column_if_missing(
        conn,
        "adf_meta",
        "protection",
        "TEXT NOT NULL DEFAULT 'none' CHECK(protection IN ('none','readonly','increment'))",
    )?;
    // ESCAPE keeps `_` literal: LIKE 'adf_%' alone would also match e.g. `adfx`.
    conn.execute(
        "UPDATE adf_meta SET protection = 'readonly' WHERE key LIKE 'adf\\_%' ESCAPE '\\'",
        [],
    )?;
    Ok(())
}

/// v20: `require_approval` / `security.require_authorized` → `restricted` /
/// `code_execution.restricted_methods`.
fn step_20_restricted(conn: &Connection) -> Result<()> {
    with_config(conn, |cfg| {
        let gated: Vec<String> = cfg
            .get("security")
            .and_then(|s| s.get("require_authorized"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let mut changed = false;
        if let Some(tools) = cfg.get_mut("tools").and_then(Value::as_array_mut) {
            for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
                let named_gated = tool
                    .get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| gated.iter().any(|g| g == n));
                if tool.get("require_approval").is_some_and(truthy) || named_gated {
                    tool.insert("restricted".to_owned(), Value::Bool(true));
                    changed = true;
                }
                changed |= tool.shift_remove("require_approval").is_some();
            }
        }
        let methods: Vec<&String> = gated
            .iter()
            .filter(|m| GATEABLE_CODE_METHODS.contains(&m.as_str()))
            .collect();
        if !methods.is_empty() {
            let Some(code_execution) = object_entry(cfg, "code_execution") else {
                return changed;
            };
            let existing = code_execution
                .entry("restricted_methods")
                .or_insert_with(|| Value::Array(Vec::new()));
            if !existing.is_array() {
                *existing = Value::Array(Vec::new());
            }
            if let Value::Array(list) = existing {
                for method in methods {
                    if !list.iter().any(|v| v.as_str() == Some(method)) {
                        list.push(Value::String(method.clone()));
                    }
                }
            }
            changed = true;
        }
        if let Some(servers) = cfg
            .get_mut("mcp")
            .and_then(|m| m.get_mut("servers"))
            .and_then(Value::as_array_mut)
        {
            for server in servers.iter_mut().filter_map(Value::as_object_mut) {
                if server.get("require_approval").is_some_and(truthy) {
                    server.insert("restricted".to_owned(), Value::Bool(true));
                }
                changed |= server.shift_remove("require_approval").is_some();
            }
        }
        changed |= remove_path(cfg, &["security", "require_authorized"]);
        changed
    })
    .map(drop)
}

/// v21: the contact book is removed (§17.2 #4); its rows are dropped with it.
fn step_21_drop_peers(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "DROP INDEX IF EXISTS idx_adf_peers_handle;
         DROP INDEX IF EXISTS idx_adf_peers_via;
         DROP TABLE IF EXISTS adf_peers;",
    )?;
    Ok(())
}

/// v22: `document.md` → `README.md` (in place, keeping protection and timestamps) and watch
/// globs `document.*` → `README.*`.
fn step_22_readme(conn: &Connection) -> Result<()> {
    rename_document_to_readme(conn)?;
    with_config(conn, |cfg| {
        let mut changed = false;
        if let Some(targets) = cfg
            .get_mut("triggers")
            .and_then(|t| t.get_mut("on_file_change"))
            .and_then(|t| t.get_mut("targets"))
            .and_then(Value::as_array_mut)
        {
            for filter in targets.iter_mut().filter_map(|t| t.get_mut("filter")) {
                if let Some(watch) = filter.get_mut("watch")
                    && watch.as_str() == Some("document.*")
                {
                    *watch = Value::String("README.*".to_owned());
                    changed = true;
                }
            }
        }
        changed
    })
    .map(drop)
}

/// v23: strip removed loop/budget limits; fold `model.thinking_budget` into `model.reasoning`.
fn step_23_config_conformance(conn: &Connection) -> Result<()> {
    with_config(conn, |cfg| {
        let mut changed = false;
        for path in [
            ["model", "max_loop_messages"],
            ["context", "max_loop_messages"],
            ["limits", "max_loop_rows"],
            ["limits", "max_daily_budget_usd"],
        ] {
            changed |= remove_path(cfg, &path);
        }
        if let Some(model) = cfg.get_mut("model").and_then(Value::as_object_mut) {
            let has_reasoning = model.get("reasoning").is_some_and(truthy);
            let budget = model
                .get("thinking_budget")
                .filter(|b| b.as_f64().is_some_and(|n| n > 0.0))
                .cloned();
            if let (false, Some(budget)) = (has_reasoning, budget) {
                let mut reasoning = Map::new();
                reasoning.insert("enabled".to_owned(), Value::Bool(true));
                reasoning.insert("max_tokens".to_owned(), budget);
                model.insert("reasoning".to_owned(), Value::Object(reasoning));
                model.shift_remove("thinking_budget");
                changed = true;
            }
        }
        changed
    })
    .map(drop)
}

/// v24: attestations move from the meta key `adf_attestations` to their own table.
fn step_24_attestations(conn: &Connection) -> Result<()> {
    conn.execute_batch(&ddl_statement(
        "CREATE TABLE IF NOT EXISTS adf_attestations ",
    )?)?;
    conn.execute_batch(&ddl_statement(
        "CREATE INDEX IF NOT EXISTS idx_adf_attestations_subject ",
    )?)?;
    let Some(raw) = meta_raw(conn, "adf_attestations")? else {
        return Ok(());
    };
    let text = match raw {
        SqlValue::Text(s) => s,
        SqlValue::Blob(b) => String::from_utf8_lossy(&b).into_owned(),
        _ => String::new(),
    };
    let parsed = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Array(items)) => items,
        Ok(_) | Err(_) => {
            // Not an array we can read: keep the key so nothing is lost.
            tracing::warn!("meta adf_attestations is not a JSON array; left in place");
            return Ok(());
        }
    };
    for item in &parsed {
        let Some(att) = item.as_object() else {
            continue;
        };
        let field = |k: &str| att.get(k);
        if !["issuer", "subject", "signature"]
            .iter()
            .all(|k| field(k).is_some_and(truthy))
        {
            continue;
        }
        conn.execute(
            "INSERT INTO adf_attestations (issuer, subject, role, issued_at, expires_at, scope, signature, raw_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                json_to_sql(field("issuer")),
                json_to_sql(field("subject")),
                json_to_sql_or(field("role"), ""),
                json_to_sql_or(field("issued_at"), ""),
                json_to_sql(field("expires_at")),
                json_to_sql(field("scope")),
                json_to_sql(field("signature")),
                item.to_string(),
            ],
        )?;
    }
    conn.execute("DELETE FROM adf_meta WHERE key = 'adf_attestations'", [])?;
    Ok(())
}

/// v28: `adf_loop.ord`; the seq-addressable `adf_audit`; `mind/log.md`; an empty `mind.md`
/// gets the skeleton.
fn step_28_ord_audit_mind(conn: &Connection) -> Result<()> {
    add_column_if_missing(conn, "adf_loop", "ord", "INTEGER")?;
    if table_exists(conn, "adf_audit")? && has_column(conn, "adf_audit", "start_at")? {
        rebuild_audit(conn)?;
    }
    let now = now_iso();
    insert_file_if_missing(conn, "mind/log.md", defaults::MIND_LOG.as_bytes(), &now)?;
    let mind: Option<SqlValue> = conn
        .query_row(
            "SELECT content FROM adf_files WHERE path = 'mind.md'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    let blank = match &mind {
        Some(SqlValue::Blob(b)) => is_blank(&String::from_utf8_lossy(b)),
        Some(SqlValue::Text(s)) => is_blank(s),
        Some(SqlValue::Null) => true,
        _ => false,
    };
    if blank {
        let skeleton = defaults::MIND_SKELETON.as_bytes();
        conn.execute(
            "UPDATE adf_files SET content = ?1, size = ?2, updated_at = ?3 WHERE path = 'mind.md'",
            params![skeleton, byte_len(skeleton), now],
        )?;
    }
    Ok(())
}

/// Blank as JavaScript's `trim()` sees it: whitespace, line breaks and the BOM.
fn is_blank(text: &str) -> bool {
    text.chars().all(|c| c.is_whitespace() || c == '\u{feff}')
}

fn rebuild_audit(conn: &Connection) -> Result<()> {
    let new_columns = [
        "id",
        "source",
        "start_seq",
        "end_seq",
        "ref",
        "entry_count",
        "size_bytes",
        "data",
        "created_at",
    ];
    let retired = ["start_at", "end_at"];
    let old = table_columns(conn, "adf_audit")?;
    // Columns both shapes know are copied; columns neither knows are kept after the known ones.
    let copied: Vec<&str> = old
        .iter()
        .map(|c| c.name.as_str())
        .filter(|n| new_columns.contains(n))
        .collect();
    let extras: Vec<&ColumnInfo> = old
        .iter()
        .filter(|c| !new_columns.contains(&c.name.as_str()) && !retired.contains(&c.name.as_str()))
        .collect();

    let ddl = ddl_statement("CREATE TABLE IF NOT EXISTS adf_audit ")?;
    let (Some(open), Some(close)) = (ddl.find('('), ddl.rfind(')')) else {
        return Err(internal("the adf_audit DDL has no column list"));
    };
    let mut body = ddl[open + 1..close].trim_end().to_owned();
    for extra in &extras {
        body.push_str(&format!(
            ",\n  {} {}",
            quote_ident(&extra.name),
            extra.decl_type
        ));
    }
    let previous_seq: Option<i64> = if table_exists(conn, "sqlite_sequence")? {
        conn.query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'adf_audit'",
            [],
            |row| row.get(0),
        )
        .optional()?
    } else {
        None
    };
    let column_list = copied
        .iter()
        .copied()
        .chain(extras.iter().map(|c| c.name.as_str()))
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(", ");
    conn.execute_batch(&format!(
        "DROP TABLE IF EXISTS adf_audit_new;
         CREATE TABLE adf_audit_new ({body}\n);
         INSERT INTO adf_audit_new ({column_list}) SELECT {column_list} FROM adf_audit;
         DROP TABLE adf_audit;
         ALTER TABLE adf_audit_new RENAME TO adf_audit;"
    ))?;
    conn.execute_batch(&ddl_statement(
        "CREATE INDEX IF NOT EXISTS idx_adf_audit_source_start ",
    )?)?;
    // AUTOINCREMENT must never hand out an id the old table already used, even a deleted one.
    if let Some(previous) = previous_seq {
        let updated = conn.execute(
            "UPDATE sqlite_sequence SET seq = MAX(seq, ?1) WHERE name = 'adf_audit'",
            [previous],
        )?;
        if updated == 0 && previous > 0 {
            conn.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('adf_audit', ?1)",
                [previous],
            )?;
        }
    }
    backfill_audit(conn)
}

/// Derives `start_seq`/`end_seq`/`ref` from each snapshot blob; unreadable blobs keep NULLs.
fn backfill_audit(conn: &Connection) -> Result<()> {
    let rows: Vec<(i64, Option<String>, SqlValue)> = {
        let mut stmt = conn.prepare("SELECT id, source, data FROM adf_audit")?;
        stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?
    };
    for (id, source, data) in rows {
        let bytes = match data {
            SqlValue::Blob(b) => b,
            SqlValue::Text(s) => s.into_bytes(),
            _ => continue,
        };
        let Some(snapshot) = decompress_json(&bytes) else {
            continue;
        };
        match source.as_deref() {
            Some("loop") => {
                let Some(entries) = snapshot.as_array() else {
                    continue;
                };
                let seq = |v: Option<&Value>| v.and_then(|e| e.get("seq")).and_then(json_integer);
                if let (Some(first), Some(last)) = (seq(entries.first()), seq(entries.last())) {
                    conn.execute(
                        "UPDATE adf_audit SET start_seq = ?1, end_seq = ?2 WHERE id = ?3",
                        params![first, last, id],
                    )?;
                }
            }
            Some(kind @ ("inbox_message" | "outbox_message" | "file")) => {
                let key = if kind == "file" { "path" } else { "id" };
                if let Some(reference) = snapshot
                    .get(key)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                {
                    conn.execute(
                        "UPDATE adf_audit SET ref = ?1 WHERE id = ?2",
                        params![reference, id],
                    )?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn decompress_json(bytes: &[u8]) -> Option<Value> {
    let mut json = Vec::new();
    brotli::Decompressor::new(bytes, 4096)
        .read_to_end(&mut json)
        .ok()?;
    serde_json::from_slice(&json).ok()
}

/// A JSON number that is a whole number, as JavaScript's `typeof n === 'number'` would accept.
fn json_integer(value: &Value) -> Option<i64> {
    value.as_i64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            // Whole and well inside i64, so the cast is exact.
            .map(|f| f as i64)
    })
}

/// v29: named loops. Existing transcript rows become `main` through the column default.
fn step_29_loops(conn: &Connection) -> Result<()> {
    add_column_if_missing(conn, "adf_loop", "loop", "TEXT NOT NULL DEFAULT 'main'")?;
    add_column_if_missing(conn, "adf_timers", "loop", "TEXT")?;
    add_column_if_missing(conn, "adf_logs", "loop", "TEXT")?;
    add_column_if_missing(conn, "adf_tasks", "loop", "TEXT")?;
    conn.execute_batch(&ddl_statement(
        "CREATE INDEX IF NOT EXISTS idx_adf_loop_loop_seq ",
    )?)?;
    conn.execute_batch(&ddl_statement(
        "CREATE INDEX IF NOT EXISTS idx_adf_loop_stream ",
    )?)?;
    Ok(())
}

/// v30: `bare_prompt` no longer silences dynamic instructions, so a bare agent gets all four
/// switched off explicitly to keep its behaviour.
fn step_30_bare_prompt(conn: &Connection) -> Result<()> {
    with_config(conn, |cfg| {
        if cfg.get("bare_prompt") != Some(&Value::Bool(true)) {
            return false;
        }
        let Some(context) = object_entry(cfg, "context") else {
            return false;
        };
        let dynamic = context
            .entry("dynamic_instructions")
            .or_insert_with(|| Value::Object(Map::new()));
        if !dynamic.is_object() {
            *dynamic = Value::Object(Map::new());
        }
        if let Value::Object(dynamic) = dynamic {
            for key in [
                "inbox_hints",
                "context_warning",
                "idle_reminder",
                "mesh_updates",
            ] {
                dynamic.insert(key.to_owned(), Value::Bool(false));
            }
        }
        true
    })
    .map(drop)
}

/// v31: every agent stores its icon, chosen from its id.
fn step_31_icon(conn: &Connection) -> Result<()> {
    with_config(conn, |cfg| {
        if cfg.get("icon").is_some_and(truthy) {
            return false;
        }
        let Some(id) = cfg
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
        else {
            return false;
        };
        let icon = defaults::icon_for_id(id).to_owned();
        cfg.insert("icon".to_owned(), Value::String(icon));
        true
    })
    .map(drop)
}

// ---------------------------------------------------------------------------------------------
// The legacy pass
// ---------------------------------------------------------------------------------------------

/// Structural repairs of pre-ladder shapes; the numbered steps rely on them.
fn structural_fixes(conn: &Connection) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    if table_exists(conn, "adf_loop")? {
        // TEXT for tokens as in today's DDL (the reference used INTEGER; the values are JSON).
        for (column, decl) in [
            ("model", "TEXT"),
            ("tokens", "TEXT"),
            ("created_at", "INTEGER NOT NULL DEFAULT 0"),
        ] {
            if !has_column(conn, "adf_loop", column)? {
                add_column(conn, "adf_loop", column, decl)?;
                notes.push(format!("added missing column adf_loop.{column}"));
            }
        }
    }
    if table_exists(conn, "adf_archive")? {
        conn.execute_batch("DROP TABLE adf_archive")?;
        notes.push("dropped the retired adf_archive table".to_owned());
    }
    if !table_exists(conn, "adf_audit")? {
        conn.execute_batch(&ddl_statement("CREATE TABLE IF NOT EXISTS adf_audit ")?)?;
        conn.execute_batch(&ddl_statement(
            "CREATE INDEX IF NOT EXISTS idx_adf_audit_source_start ",
        )?)?;
        notes.push("created the missing adf_audit table".to_owned());
    }
    if table_exists(conn, "adf_files")?
        && has_column(conn, "adf_files", "protected")?
        && !has_column(conn, "adf_files", "protection")?
    {
        add_column(
            conn,
            "adf_files",
            "protection",
            "TEXT NOT NULL DEFAULT 'none' CHECK(protection IN ('read_only','no_delete','none'))",
        )?;
        conn.execute(
            "UPDATE adf_files SET protection = CASE WHEN protected = 1 THEN 'no_delete' ELSE 'none' END",
            [],
        )?;
        notes.push("converted adf_files.protected to adf_files.protection".to_owned());
    }
    if table_exists(conn, "adf_loop")?
        && has_column(conn, "adf_loop", "loop")?
        && has_column(conn, "adf_loop", "ord")?
        && !object_exists(conn, "index", "idx_adf_loop_stream")?
    {
        conn.execute_batch(&ddl_statement(
            "CREATE INDEX IF NOT EXISTS idx_adf_loop_stream ",
        )?)?;
        notes.push("created the missing index idx_adf_loop_stream".to_owned());
    }
    Ok(notes)
}

fn config_cleanup(conn: &Connection) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    with_config(conn, |cfg| {
        for (path, field) in [
            (&["loop_mode"][..], "loop_mode"),
            (&["context", "document_mode"][..], "context.document_mode"),
            (&["context", "mind_mode"][..], "context.mind_mode"),
            (
                &["security", "allow_protected_writes"][..],
                "security.allow_protected_writes",
            ),
            (
                &["limits", "compaction_threshold_tokens"][..],
                "limits.compaction_threshold_tokens",
            ),
        ] {
            if remove_path(cfg, path) {
                notes.push(format!("removed config field {field}"));
            }
        }
        if let Some(tools) = cfg.get_mut("tools").and_then(Value::as_array_mut) {
            for name in tools.iter_mut().filter_map(|t| t.get_mut("name")) {
                if name.as_str() == Some("container_exec") {
                    *name = Value::String("compute_exec".to_owned());
                    notes.push("renamed tool container_exec to compute_exec".to_owned());
                }
            }
        }
        let legacy_triggers = cfg.get("triggers").is_some_and(|t| {
            t.get("document").is_some_and(truthy) || t.get("agent").is_some_and(truthy)
        });
        if legacy_triggers {
            cfg.insert("triggers".to_owned(), defaults::default_triggers());
            notes.push(
                "replaced the legacy v1 trigger config with the default trigger set".to_owned(),
            );
        }
        !notes.is_empty()
    })?;
    Ok(notes)
}

fn backfill_core_files(conn: &Connection) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    if !table_exists(conn, "adf_files")? {
        return Ok(notes);
    }
    if rename_document_to_readme(conn)? {
        notes.push("renamed document.md to README.md".to_owned());
    }
    let now = now_iso();
    let today = &now[..10];
    let name = agent_name(conn)?;
    for path in defaults::CORE_FILES {
        let Some(content) = defaults::core_file_content(path, &name, today) else {
            continue;
        };
        if insert_file_if_missing(conn, path, content.as_bytes(), &now)? {
            notes.push(format!("created missing core file {path}"));
        }
    }
    Ok(notes)
}

fn meta_cleanup(conn: &Connection) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    if !has_column(conn, "adf_meta", "protection")? {
        return Ok(notes);
    }
    let changed = conn.execute(
        "UPDATE adf_meta SET protection = 'readonly'
         WHERE key IN (?1, ?2, ?3, ?4) AND protection != 'readonly'",
        IDENTITY_META_KEYS,
    )?;
    if changed > 0 {
        notes.push(format!("made {changed} identity meta key(s) readonly"));
    }
    if meta_raw(conn, "adf_version")?.is_none() {
        conn.execute(
            "INSERT INTO adf_meta (key, value, protection) VALUES ('adf_version', ?1, 'readonly')",
            [crate::schema::FORMAT_VERSION],
        )?;
        notes.push(format!(
            "added the missing adf_version meta key ({})",
            crate::schema::FORMAT_VERSION
        ));
    }
    Ok(notes)
}

/// The display name for a back-filled README: config name, else `adf_name`, else the default.
fn agent_name(conn: &Connection) -> Result<String> {
    if let Some(name) = load_config(conn)?
        .as_ref()
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.trim().is_empty())
    {
        return Ok(name.to_owned());
    }
    if let Some(SqlValue::Text(name)) = meta_raw(conn, "adf_name")?
        && !name.trim().is_empty()
    {
        return Ok(name);
    }
    Ok("Untitled Agent".to_owned())
}

/// Renames `document.md` to `README.md` in place when only the former exists.
fn rename_document_to_readme(conn: &Connection) -> Result<bool> {
    let changed = conn.execute(
        "UPDATE adf_files SET path = 'README.md'
         WHERE path = 'document.md' AND NOT EXISTS (SELECT 1 FROM adf_files WHERE path = 'README.md')",
        [],
    )?;
    Ok(changed > 0)
}

/// Inserts a core file (`no_delete`, `text/markdown`) unless the path exists. Returns whether
/// it inserted.
fn insert_file_if_missing(
    conn: &Connection,
    path: &str,
    content: &[u8],
    now: &str,
) -> Result<bool> {
    let columns = column_names(conn, "adf_files")?;
    let has = |c: &str| columns.iter().any(|n| n == c);
    let mut names = vec!["path", "content", "mime_type", "size", "protection"];
    let mut values = vec!["?1", "?2", "'text/markdown'", "?3", "'no_delete'"];
    if has("authorized") {
        names.push("authorized");
        values.push("0");
    }
    // Files still carrying the pre-`protection` flag get it set consistently.
    if has("protected") {
        names.push("protected");
        values.push("1");
    }
    names.extend(["created_at", "updated_at"]);
    values.extend(["?4", "?4"]);
    let sql = format!(
        "INSERT INTO adf_files ({}) SELECT {} WHERE NOT EXISTS (SELECT 1 FROM adf_files WHERE path = ?1)",
        names.join(", "),
        values.join(", ")
    );
    let inserted = conn.execute(&sql, params![path, content, byte_len(content), now])?;
    Ok(inserted > 0)
}

// ---------------------------------------------------------------------------------------------
// Config helpers
// ---------------------------------------------------------------------------------------------

/// The stored config as a JSON object; `None` when there is no row or it is not an object.
fn load_config(conn: &Connection) -> Result<Option<Map<String, Value>>> {
    if !table_exists(conn, "adf_config")? {
        return Ok(None);
    }
    let text: Option<String> = conn
        .query_row(
            "SELECT config_json FROM adf_config WHERE id = 1",
            [],
            |row| row.get(0),
        )
        .optional()?;
    let Some(text) = text else { return Ok(None) };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(_) | Err(_) => {
            tracing::warn!(
                "adf_config.config_json is not a JSON object; config migrations skipped"
            );
            Ok(None)
        }
    }
}

/// Applies `patch` to the config and writes it back only when `patch` reports a change.
fn with_config(
    conn: &Connection,
    patch: impl FnOnce(&mut Map<String, Value>) -> bool,
) -> Result<bool> {
    let Some(mut config) = load_config(conn)? else {
        return Ok(false);
    };
    if !patch(&mut config) {
        return Ok(false);
    }
    let text = serde_json::to_string(&Value::Object(config))
        .map_err(|e| StoreError::Malformed(format!("config could not be serialized: {e}")))?;
    conn.execute(
        "UPDATE adf_config SET config_json = ?1 WHERE id = 1",
        [text],
    )?;
    Ok(true)
}

/// Removes `path` (object keys) from `cfg`, keeping the order of the remaining keys.
fn remove_path(cfg: &mut Map<String, Value>, path: &[&str]) -> bool {
    match path {
        [] => false,
        [last] => cfg.shift_remove(*last).is_some(),
        [first, rest @ ..] => match cfg.get_mut(*first) {
            Some(Value::Object(inner)) => remove_path(inner, rest),
            _ => false,
        },
    }
}

/// The object under `key`, created (or replacing a non-object) if needed.
fn object_entry<'m>(
    cfg: &'m mut Map<String, Value>,
    key: &str,
) -> Option<&'m mut Map<String, Value>> {
    let entry = cfg.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut()
}

/// JavaScript truthiness, which the reference's config checks use.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// A JSON value as an SQL value the way better-sqlite3 binds it (NULL for absent/null).
fn json_to_sql(value: Option<&Value>) -> SqlValue {
    match value {
        None | Some(Value::Null) => SqlValue::Null,
        Some(Value::String(s)) => SqlValue::Text(s.clone()),
        Some(Value::Bool(b)) => SqlValue::Integer(i64::from(*b)),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(SqlValue::Integer)
            .or_else(|| n.as_f64().map(SqlValue::Real))
            .unwrap_or(SqlValue::Null),
        Some(other) => SqlValue::Text(other.to_string()),
    }
}

/// As [`json_to_sql`], with `fallback` for absent/null (JavaScript `??`).
fn json_to_sql_or(value: Option<&Value>, fallback: &str) -> SqlValue {
    match json_to_sql(value) {
        SqlValue::Null => SqlValue::Text(fallback.to_owned()),
        other => other,
    }
}

// ---------------------------------------------------------------------------------------------
// SQL helpers
// ---------------------------------------------------------------------------------------------

fn byte_len(bytes: &[u8]) -> i64 {
    i64::try_from(bytes.len()).unwrap_or(i64::MAX)
}

fn now_iso() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn internal(message: &str) -> StoreError {
    StoreError::invalid(format!("internal migration error: {message}"))
}

/// The statement of [`SCHEMA_DDL`] that starts with `prefix`, so migrated files get exactly the
/// objects a new file gets.
fn ddl_statement(prefix: &str) -> Result<String> {
    // Comments go first: they may contain semicolons.
    let without_comments = SCHEMA_DDL
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    without_comments
        .split(';')
        .map(str::trim)
        .find(|statement| statement.starts_with(prefix))
        .map(str::to_owned)
        .ok_or_else(|| {
            internal(&format!(
                "the schema DDL has no statement starting with {prefix:?}"
            ))
        })
}

fn object_exists(conn: &Connection, kind: &str, name: &str) -> Result<bool> {
    Ok(conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = ?1 AND name = ?2",
            [kind, name],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

fn table_exists(conn: &Connection, table: &str) -> Result<bool> {
    object_exists(conn, "table", table)
}

#[derive(Debug)]
struct ColumnInfo {
    name: String,
    decl_type: String,
}

fn table_columns(conn: &Connection, table: &str) -> Result<Vec<ColumnInfo>> {
    let mut stmt = conn.prepare("SELECT name, type FROM pragma_table_info(?1) ORDER BY cid")?;
    let columns = stmt
        .query_map([table], |row| {
            Ok(ColumnInfo {
                name: row.get(0)?,
                decl_type: row.get(1)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(columns)
}

fn column_names(conn: &Connection, table: &str) -> Result<Vec<String>> {
    Ok(table_columns(conn, table)?
        .into_iter()
        .map(|c| c.name)
        .collect())
}

fn has_column(conn: &Connection, table: &str, column: &str) -> Result<bool> {
    Ok(column_names(conn, table)?.iter().any(|c| c == column))
}

fn add_column(conn: &Connection, table: &str, column: &str, decl: &str) -> Result<()> {
    conn.execute_batch(&format!(
        "ALTER TABLE {table} ADD COLUMN {} {decl}",
        quote_ident(column)
    ))?;
    Ok(())
}

/// Column additions check first: files created from a newer DDL than their recorded version
/// (the reference's own fixtures do this) already have the column.
fn add_column_if_missing(conn: &Connection, table: &str, column: &str, decl: &str) -> Result<()> {
    if !has_column(conn, table, column)? {
        add_column(conn, table, column, decl)?;
    }
    Ok(())
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn meta_raw(conn: &Connection, key: &str) -> Result<Option<SqlValue>> {
    Ok(conn
        .query_row("SELECT value FROM adf_meta WHERE key = ?1", [key], |row| {
            row.get(0)
        })
        .optional()?)
}

/// Sets a meta value, keeping the key's protection when it exists.
fn upsert_meta(conn: &Connection, key: &str, value: SqlValue) -> Result<()> {
    conn.execute(
        "INSERT INTO adf_meta (key, value) VALUES (?1, ?2)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        params![key, value],
    )?;
    Ok(())
}

fn insert_meta_if_missing(conn: &Connection, key: &str, value: &str) -> Result<()> {
    conn.execute(
        "INSERT OR IGNORE INTO adf_meta (key, value) VALUES (?1, ?2)",
        [key, value],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ddl_statement_the_ladder_uses_exists() {
        for prefix in [
            "CREATE TABLE IF NOT EXISTS adf_inbox ",
            "CREATE TABLE IF NOT EXISTS adf_outbox ",
            "CREATE TABLE IF NOT EXISTS adf_audit ",
            "CREATE TABLE IF NOT EXISTS adf_attestations ",
            "CREATE INDEX IF NOT EXISTS idx_adf_loop_loop_seq ",
            "CREATE INDEX IF NOT EXISTS idx_adf_loop_stream ",
            "CREATE INDEX IF NOT EXISTS idx_adf_outbox_created ",
            "CREATE INDEX IF NOT EXISTS idx_adf_audit_source_start ",
            "CREATE INDEX IF NOT EXISTS idx_adf_attestations_subject ",
            "CREATE INDEX IF NOT EXISTS idx_adf_inbox_message_id ",
        ] {
            let statement = ddl_statement(prefix).unwrap_or_default();
            assert!(statement.starts_with(prefix), "{prefix}");
            assert!(!statement.contains("--"), "{statement}");
        }
        assert!(
            ddl_statement("CREATE TABLE IF NOT EXISTS adf_loop ")
                .unwrap_or_default()
                .contains("loop TEXT NOT NULL DEFAULT 'main'")
        );
    }

    #[test]
    fn versions_parse_like_the_reference_stores_them() {
        assert_eq!(
            parse_version("k", &SqlValue::Text("28".into())).ok(),
            Some(28)
        );
        assert_eq!(
            parse_version("k", &SqlValue::Text(" 7 ".into())).ok(),
            Some(7)
        );
        assert_eq!(parse_version("k", &SqlValue::Integer(32)).ok(), Some(32));
        assert!(parse_version("k", &SqlValue::Text("x".into())).is_err());
        assert!(parse_version("k", &SqlValue::Integer(-1)).is_err());
    }

    #[test]
    fn removal_keeps_key_order() {
        let mut cfg: Map<String, Value> = serde_json::from_str(
            r#"{"a":1,"security":{"x":1,"allow_protected_writes":true,"y":2},"z":3}"#,
        )
        .unwrap_or_default();
        assert!(remove_path(
            &mut cfg,
            &["security", "allow_protected_writes"]
        ));
        assert_eq!(
            Value::Object(cfg).to_string(),
            r#"{"a":1,"security":{"x":1,"y":2},"z":3}"#
        );
    }

    #[test]
    fn truthiness_matches_javascript() {
        for (v, t) in [
            ("0", false),
            ("1", true),
            ("\"\"", false),
            ("\"a\"", true),
            ("null", false),
            ("[]", true),
        ] {
            assert_eq!(
                truthy(&serde_json::from_str(v).unwrap_or(Value::Null)),
                t,
                "{v}"
            );
        }
    }

    #[test]
    fn blank_mind_includes_bom_and_newlines() {
        assert!(is_blank("\u{feff}\n\r\t "));
        assert!(!is_blank("# Mind"));
    }
}
