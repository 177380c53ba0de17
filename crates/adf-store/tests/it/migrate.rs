//! The migration ladder (missing-tables §17.1) against the reference runtime's own schema-28
//! files and against synthetic files in the shapes of older schemas.
//!
//! Synthetic files are built by [`old_file`]: each table has the columns it had at the given
//! schema (derived from the ladder), with newer columns absent and retired shapes present.
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use adf_store::defaults;
use adf_store::migrate::{LEGACY_CLEANUP_STEP, legacy_cleanup, read_schema_version, run_ladder};
use adf_store::schema::{SCHEMA_DDL, SCHEMA_VERSION, SYSTEM_INDEXES, SYSTEM_TABLES};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension as _, params};
use serde_json::{Value, json};
use tempfile::TempDir;

const FIXTURES: [&str; 3] = [
    "minimal-headless.adf",
    "populated-runtime.adf",
    "studio-identity.adf",
];

fn fixture_dir() -> PathBuf {
    crate::common::repo_root().join("testdata/reference-v0.4.2")
}

/// A private copy of a reference fixture (the originals must never be opened read-write).
fn copy_fixture(dir: &TempDir, name: &str) -> PathBuf {
    let target = dir.path().join(name);
    std::fs::copy(fixture_dir().join(name), &target).expect("copy fixture");
    target
}

fn open(path: &Path) -> Connection {
    Connection::open(path).expect("open")
}

/// Runs the ladder and returns the steps reported through `on_step`.
fn migrate(conn: &mut Connection, from: u32) -> Vec<u32> {
    let mut steps = Vec::new();
    if let Err((step, e)) = run_ladder(conn, from, &mut |s| steps.push(s)) {
        panic!("migration from {from} failed at step {step}: {e}");
    }
    steps
}

fn fresh() -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(SCHEMA_DDL).unwrap();
    conn
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Column {
    name: String,
    decl_type: String,
    notnull: bool,
    default: Option<String>,
    pk: i64,
}

fn table_info(conn: &Connection, table: &str) -> Vec<Column> {
    let mut stmt = conn
        .prepare("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1) ORDER BY cid")
        .unwrap();
    stmt.query_map([table], |r| {
        Ok(Column {
            name: r.get(0)?,
            decl_type: r.get(1)?,
            notnull: r.get(2)?,
            default: r.get(3)?,
            pk: r.get(4)?,
        })
    })
    .unwrap()
    .collect::<rusqlite::Result<_>>()
    .unwrap()
}

/// Column `name` of `table` exists with this declared type, NOT NULL flag and default.
fn check_column(conn: &Connection, table: &str, name: &str, expected: (&str, bool, Option<&str>)) {
    let column = table_info(conn, table)
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{table}.{name} is missing"));
    assert_eq!(
        (
            column.decl_type.as_str(),
            column.notnull,
            column.default.as_deref()
        ),
        expected,
        "{table}.{name}"
    );
}

fn objects(conn: &Connection, kind: &str) -> BTreeMap<String, Option<String>> {
    let mut stmt = conn
        .prepare("SELECT name, sql FROM sqlite_master WHERE type = ?1 AND name NOT LIKE 'sqlite_%'")
        .unwrap();
    stmt.query_map([kind], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn adf_tables(conn: &Connection) -> BTreeSet<String> {
    objects(conn, "table")
        .into_keys()
        .filter(|t| t.starts_with("adf_"))
        .collect()
}

/// Every row of a table, by rowid, with its column names.
fn rows(conn: &Connection, table: &str) -> (Vec<String>, Vec<Vec<SqlValue>>) {
    let columns: Vec<String> = table_info(conn, table)
        .into_iter()
        .map(|c| c.name)
        .collect();
    let list = columns
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut stmt = conn
        .prepare(&format!("SELECT {list} FROM \"{table}\" ORDER BY rowid"))
        .unwrap();
    let n = columns.len();
    let data = stmt
        .query_map([], |r| {
            (0..n)
                .map(|i| r.get::<_, SqlValue>(i))
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    (columns, data)
}

/// A deterministic dump: schema text plus every row of every table.
fn dump(conn: &Connection) -> String {
    let mut out = String::new();
    let mut stmt = conn
        .prepare("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        .unwrap();
    let entries: Vec<(String, String, Option<String>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (kind, name, sql) in &entries {
        out.push_str(&format!("{kind} {name}: {sql:?}\n"));
        if kind == "table" {
            let (_, data) = rows(conn, name);
            for row in data {
                out.push_str(&format!("  {row:?}\n"));
            }
        }
    }
    out
}

fn meta(conn: &Connection, key: &str) -> Option<(String, String)> {
    conn.query_row(
        "SELECT value, protection FROM adf_meta WHERE key = ?1",
        [key],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()
    .unwrap()
}

fn meta_value(conn: &Connection, key: &str) -> Option<String> {
    conn.query_row("SELECT value FROM adf_meta WHERE key = ?1", [key], |r| {
        r.get(0)
    })
    .optional()
    .unwrap()
}

fn config(conn: &Connection) -> Value {
    let text: String = conn
        .query_row("SELECT config_json FROM adf_config WHERE id = 1", [], |r| {
            r.get(0)
        })
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

fn set_config(conn: &Connection, cfg: &Value) {
    conn.execute(
        "UPDATE adf_config SET config_json = ?1 WHERE id = 1",
        [cfg.to_string()],
    )
    .unwrap();
}

/// `(content, protection, created_at, updated_at)` of a file.
fn file(conn: &Connection, path: &str) -> Option<(Vec<u8>, String, String, String)> {
    conn.query_row(
        "SELECT content, protection, created_at, updated_at FROM adf_files WHERE path = ?1",
        [path],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )
    .optional()
    .unwrap()
}

fn index_exists(conn: &Connection, name: &str) -> bool {
    objects(conn, "index").contains_key(name)
}

fn brotli_json(value: &Value) -> Vec<u8> {
    let mut writer = brotli::CompressorWriter::new(Vec::new(), 4096, 5, 22);
    writer.write_all(value.to_string().as_bytes()).unwrap();
    writer.into_inner()
}

fn is_iso_millis(s: &str) -> bool {
    chrono::DateTime::parse_from_rfc3339(s).is_ok() && s.len() == 24 && s.ends_with('Z')
}

// ---------------------------------------------------------------------------------------------
// Synthetic files of older schemas
// ---------------------------------------------------------------------------------------------

const AGENT_ID: &str = "Ab3dEf6hIj9k";

fn base_config() -> Value {
    json!({
        "adf_version": "0.2",
        "id": AGENT_ID,
        "name": "Old Agent",
        "description": "",
        "handle": "old-agent",
        "state": "idle",
        "model": { "provider": "openai", "model_id": "gpt-4o-mini", "temperature": 0.7, "max_tokens": 4096 },
        "instructions": "be useful",
        "context": { "audit": { "loop": true } },
        "tools": [
            { "name": "fs_read", "enabled": true, "visible": true },
            { "name": "sys_update_config", "enabled": true, "visible": true, "restricted": true }
        ],
        "triggers": {
            "on_inbox": { "enabled": true, "targets": [{ "scope": "agent" }] },
            "on_file_change": { "enabled": true, "targets": [{ "scope": "agent", "filter": { "watch": "README.*" } }] }
        },
        "security": { "allow_unsigned": true, "level": 1 },
        "limits": { "execution_timeout_ms": 60000 },
        "future_field": { "nested": [1, 2, 3] },
        "metadata": { "created_at": "2025-01-02T03:04:05.006Z", "updated_at": "2025-02-03T04:05:06.007Z" }
    })
}

/// Builds `<dir>/v<version>.adf` in the shape of `version`, seeded with one row per table and
/// the given config.
fn old_file(dir: &TempDir, version: u32, cfg: &Value) -> (PathBuf, Connection) {
    let path = dir.path().join(format!("v{version}.adf"));
    let conn = open(&path);
    let v = version;
    let mut ddl = String::new();

    if v >= 15 {
        ddl += "CREATE TABLE adf_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL,
                protection TEXT NOT NULL DEFAULT 'none' CHECK(protection IN ('none','readonly','increment')));\n";
    } else {
        ddl += "CREATE TABLE adf_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\n";
    }
    ddl += "CREATE TABLE adf_config (id INTEGER PRIMARY KEY CHECK (id = 1), config_json TEXT NOT NULL, updated_at TEXT NOT NULL);\n";
    ddl += &format!(
        "CREATE TABLE adf_loop (seq INTEGER PRIMARY KEY AUTOINCREMENT, role TEXT NOT NULL, content_json TEXT NOT NULL,
           model TEXT, tokens TEXT, created_at INTEGER NOT NULL{}{});\n",
        if v >= 28 { ", ord INTEGER" } else { "" },
        if v >= 29 { ", loop TEXT NOT NULL DEFAULT 'main'" } else { "" },
    );
    if v >= 29 {
        ddl += "CREATE INDEX idx_adf_loop_loop_seq ON adf_loop(loop, seq);
                CREATE INDEX idx_adf_loop_stream ON adf_loop(loop, COALESCE(ord, seq), seq);\n";
    }
    if v >= 10 {
        let without_comments: String = SCHEMA_DDL
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        for statement in without_comments.split(';') {
            let s = statement.trim();
            let wanted = s.contains(" adf_inbox ")
                || s.contains(" adf_outbox ")
                || s.contains("ON adf_inbox(")
                || s.contains("ON adf_outbox(");
            if wanted && !s.contains("idx_adf_outbox_created") {
                ddl += s;
                ddl += ";\n";
            }
        }
    } else {
        ddl += "CREATE TABLE adf_inbox (id TEXT PRIMARY KEY, sender TEXT NOT NULL, payload TEXT NOT NULL, received_at INTEGER NOT NULL);
                CREATE INDEX idx_adf_inbox_trace ON adf_inbox(sender);
                CREATE TABLE adf_outbox (id TEXT PRIMARY KEY, recipient TEXT NOT NULL, payload TEXT NOT NULL, created_at INTEGER NOT NULL);\n";
    }
    ddl += &format!(
        "CREATE TABLE adf_timers (id INTEGER PRIMARY KEY AUTOINCREMENT, schedule_json TEXT NOT NULL,
           next_wake_at INTEGER NOT NULL, payload TEXT, scope TEXT NOT NULL DEFAULT {}, {}
           run_count INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, last_fired_at INTEGER{}{}{});
         CREATE INDEX idx_adf_timers_wake ON adf_timers(next_wake_at);\n",
        if v >= 6 { "'[\"system\"]'" } else { "'system'" },
        if v >= 6 { "lambda TEXT, warm INTEGER NOT NULL DEFAULT 0," } else { "" },
        if v >= 16 { ", locked INTEGER NOT NULL DEFAULT 0" } else { "" },
        if v >= 26 { ", expired INTEGER NOT NULL DEFAULT 0" } else { "" },
        if v >= 29 { ", loop TEXT" } else { "" },
    );
    ddl += &format!(
        "CREATE TABLE adf_files (path TEXT PRIMARY KEY, content BLOB NOT NULL, mime_type TEXT, size INTEGER NOT NULL,
           protection TEXT NOT NULL DEFAULT 'none' CHECK(protection IN ('read_only','no_delete','none')),{}
           created_at TEXT NOT NULL, updated_at TEXT NOT NULL);\n",
        if v >= 17 { " authorized INTEGER NOT NULL DEFAULT 0," } else { "" },
    );
    if v >= 28 {
        ddl += "CREATE TABLE adf_audit (id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, start_seq INTEGER,
                  end_seq INTEGER, ref TEXT, entry_count INTEGER NOT NULL, size_bytes INTEGER NOT NULL, data BLOB NOT NULL,
                  created_at INTEGER NOT NULL);
                CREATE INDEX idx_adf_audit_source_start ON adf_audit(source, start_seq);\n";
    } else {
        ddl += "CREATE TABLE adf_audit (id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, start_at INTEGER NOT NULL,
                  end_at INTEGER NOT NULL, entry_count INTEGER NOT NULL, size_bytes INTEGER NOT NULL, data BLOB NOT NULL,
                  created_at INTEGER NOT NULL);
                CREATE INDEX idx_adf_audit_source ON adf_audit(source);\n";
    }
    ddl += &format!(
        "CREATE TABLE adf_identity (purpose TEXT PRIMARY KEY, value BLOB NOT NULL, encryption_algo TEXT DEFAULT 'plain',
           salt BLOB, kdf_params TEXT{});\n",
        if v >= 13 { ", code_access INTEGER NOT NULL DEFAULT 0" } else { "" },
    );
    if v >= 24 {
        ddl += "CREATE TABLE adf_attestations (id INTEGER PRIMARY KEY AUTOINCREMENT, issuer TEXT NOT NULL, subject TEXT NOT NULL,
                  role TEXT NOT NULL, issued_at TEXT NOT NULL, expires_at TEXT, scope TEXT, signature TEXT NOT NULL,
                  raw_json TEXT NOT NULL);
                CREATE INDEX idx_adf_attestations_subject ON adf_attestations(subject);\n";
    }
    if v >= 5 {
        ddl += &format!(
            "CREATE TABLE adf_tasks (id TEXT PRIMARY KEY, tool TEXT NOT NULL, args TEXT NOT NULL DEFAULT '{{}}',
               status TEXT NOT NULL DEFAULT 'pending', result TEXT, error TEXT, created_at INTEGER NOT NULL,
               completed_at INTEGER, origin TEXT{}{}{}{});
             CREATE INDEX idx_adf_tasks_status ON adf_tasks(status);
             CREATE TABLE adf_logs (id INTEGER PRIMARY KEY AUTOINCREMENT, level TEXT NOT NULL DEFAULT 'info', origin TEXT,
               event TEXT, target TEXT, message TEXT NOT NULL, data TEXT, created_at INTEGER NOT NULL{});
             CREATE INDEX idx_adf_logs_level ON adf_logs(level);
             CREATE INDEX idx_adf_logs_origin ON adf_logs(origin);\n",
            if v >= 18 { ", requires_authorization INTEGER NOT NULL DEFAULT 0" } else { "" },
            if v >= 19 { ", executor_managed INTEGER NOT NULL DEFAULT 0" } else { "" },
            if v >= 27 { ", approval_meta TEXT" } else { "" },
            if v >= 29 { ", loop TEXT" } else { "" },
            if v >= 29 { ", loop TEXT" } else { "" },
        );
    }
    if (9..=20).contains(&v) {
        let (name_col, extra) = if v >= 11 {
            ("handle", ", resolution TEXT, policies TEXT")
        } else {
            ("alias", "")
        };
        let extra12 = if v >= 12 {
            ", via TEXT, trust TEXT NOT NULL DEFAULT 'unknown'"
        } else {
            ""
        };
        ddl += &format!(
            "CREATE TABLE adf_peers (did TEXT PRIMARY KEY, {name_col} TEXT NOT NULL DEFAULT '', description TEXT NOT NULL DEFAULT '',
               icon TEXT, address TEXT NOT NULL DEFAULT '', network TEXT DEFAULT 'devnet', public_key TEXT, endpoints TEXT,
               mesh_routes TEXT, capabilities TEXT, source TEXT NOT NULL DEFAULT 'mesh', last_seen_at INTEGER NOT NULL,
               created_at INTEGER NOT NULL, meta TEXT{extra}{extra12});
             CREATE INDEX idx_adf_peers_{name_col} ON adf_peers({name_col});\n"
        );
        if v >= 12 {
            ddl += "CREATE INDEX idx_adf_peers_via ON adf_peers(via);\n";
        }
    }
    conn.execute_batch(&ddl).unwrap();

    // Meta, in the key convention of the version.
    let put_meta = |key: &str, value: &str, protection: &str| {
        if v >= 15 {
            conn.execute(
                "INSERT INTO adf_meta (key, value, protection) VALUES (?1, ?2, ?3)",
                [key, value, protection],
            )
            .unwrap();
        } else {
            conn.execute(
                "INSERT INTO adf_meta (key, value) VALUES (?1, ?2)",
                [key, value],
            )
            .unwrap();
        }
    };
    if v >= 14 {
        put_meta("adf_version", "0.2", "readonly");
        put_meta("adf_schema_version", &v.to_string(), "readonly");
        put_meta("adf_name", "Old Agent", "readonly");
        put_meta("adf_handle", "old-agent", "readonly");
        put_meta("adf_parent_did", "", "readonly");
        put_meta("adf_created_at", "2025-01-02T03:04:05.006Z", "readonly");
        put_meta("adf_updated_at", "2025-02-03T04:05:06.007Z", "readonly");
        put_meta("adf_did", "did:key:z6MkOld", "none");
        put_meta("status", "busy", "none");
    } else {
        put_meta("adf_version", "0.2", "");
        put_meta("schema_version", &v.to_string(), "");
        put_meta("format", "adf", "");
        put_meta("did", "did:key:z6MkOld", "");
        put_meta("owner_did", "did:key:z6MkOwner", "");
        put_meta("runtime_did", "did:key:z6MkRuntime", "");
        put_meta("identity_salt", "c2FsdA==", "");
        put_meta(
            "identity_kdf_params",
            "{\"iterations\":100000,\"digest\":\"sha512\",\"keyLength\":32}",
            "",
        );
    }
    put_meta("project", "x", "increment");
    conn.execute(
        "INSERT INTO adf_config (id, config_json, updated_at) VALUES (1, ?1, '2025-02-03T04:05:06.007Z')",
        [cfg.to_string()],
    )
    .unwrap();

    // Files. Before 22 the primary document is document.md; soul.md arrives at 25, mind/log.md at 28.
    let put_file = |path: &str, content: &str, protection: &str| {
        let sql = if v >= 17 {
            "INSERT INTO adf_files (path, content, mime_type, size, protection, authorized, created_at, updated_at)
             VALUES (?1, ?2, 'text/markdown', ?3, ?4, 0, '2025-01-02T03:04:05.006Z', '2025-01-03T03:04:05.006Z')"
        } else {
            "INSERT INTO adf_files (path, content, mime_type, size, protection, created_at, updated_at)
             VALUES (?1, ?2, 'text/markdown', ?3, ?4, '2025-01-02T03:04:05.006Z', '2025-01-03T03:04:05.006Z')"
        };
        conn.execute(
            sql,
            params![path, content.as_bytes(), content.len() as i64, protection],
        )
        .unwrap();
    };
    put_file(
        if v >= 22 { "README.md" } else { "document.md" },
        "# Old Agent\n\nMy document.\n",
        "no_delete",
    );
    put_file("mind.md", "# Mind\n\nlived-in\n", "no_delete");
    if v >= 25 {
        put_file("soul.md", "# Soul\n\ncustom voice\n", "no_delete");
    }
    if v >= 28 {
        put_file("mind/log.md", "# Mind Log\n\ncustom\n", "no_delete");
    }
    put_file("notes/a.md", "note", "none");

    conn.execute_batch(
        "INSERT INTO adf_loop (role, content_json, model, tokens, created_at) VALUES
           ('user', '[{\"type\":\"text\",\"text\":\"hi\"}]', NULL, NULL, 1700000000000),
           ('assistant', '[{\"type\":\"text\",\"text\":\"hello\"}]', 'gpt', '{\"input\":3,\"output\":1}', 1700000000001);
         INSERT INTO adf_identity (purpose, value) VALUES ('crypto:signing:public_key', X'0102');",
    )
    .unwrap();
    // Scope `document` was renamed at 5 and scopes became JSON arrays at 6.
    let scope = match v {
        0..5 => "document",
        5 => "system",
        _ => "[\"agent\"]",
    };
    conn.execute(
        "INSERT INTO adf_timers (schedule_json, next_wake_at, payload, scope, run_count, created_at)
         VALUES ('{\"mode\":\"once\",\"at\":1800000000000}', 1800000000000, 'ping', ?1, 0, 1700000000000)",
        [scope],
    )
    .unwrap();
    if v >= 5 {
        conn.execute_batch(
            "INSERT INTO adf_tasks (id, tool, args, status, created_at) VALUES ('task_1', 'fs_write', '{}', 'pending', 1700000000000);
             INSERT INTO adf_logs (level, origin, event, message, created_at) VALUES ('info', 'system', 'boot', 'started', 1700000000000);",
        )
        .unwrap();
    }
    if v >= 10 {
        conn.execute_batch(
            "INSERT INTO adf_inbox (id, message_id, \"from\", content, received_at) VALUES ('in1', 'm1', 'did:key:z6MkPeer', 'hi', 1700000000000);
             INSERT INTO adf_outbox (id, message_id, \"from\", \"to\", content, created_at) VALUES ('out1', 'm2', 'did:key:z6MkOld', 'did:key:z6MkPeer', 'yo', 1700000000000);",
        )
        .unwrap();
    }
    if (9..=20).contains(&v) {
        conn.execute("INSERT INTO adf_peers (did, last_seen_at, created_at) VALUES ('did:key:z6MkPeer', 1, 1)", []).unwrap();
    }
    (path, conn)
}

/// The schema of a migrated file equals a fresh file's: same `adf_` tables, same columns
/// (in the same order when `ordered`), same index names and SQL.
fn assert_schema_matches_fresh(conn: &Connection, ordered: bool, context: &str) {
    assert_schema_matches_fresh_except(conn, ordered, &[], context);
}

/// As [`assert_schema_matches_fresh`], not comparing the defaults of the `(table, column)`s in
/// `default_differs`.
fn assert_schema_matches_fresh_except(
    conn: &Connection,
    ordered: bool,
    default_differs: &[(&str, &str)],
    context: &str,
) {
    let fresh = fresh();
    assert_eq!(adf_tables(conn), adf_tables(&fresh), "{context}: tables");
    for table in SYSTEM_TABLES {
        let without_exempt_defaults = |mut columns: Vec<Column>| {
            for column in &mut columns {
                if default_differs.contains(&(table, column.name.as_str())) {
                    column.default = None;
                }
            }
            columns
        };
        let (mut got, mut want) = (
            without_exempt_defaults(table_info(conn, table)),
            without_exempt_defaults(table_info(&fresh, table)),
        );
        if !ordered {
            got.sort();
            want.sort();
        }
        assert_eq!(got, want, "{context}: columns of {table}");
    }
    let index_sql = |c: &Connection| -> BTreeMap<String, Option<String>> {
        objects(c, "index")
            .into_iter()
            .filter(|(name, _)| name.starts_with("idx_adf_"))
            .collect()
    };
    assert_eq!(index_sql(conn), index_sql(&fresh), "{context}: indexes");
    assert_eq!(
        index_sql(conn).len(),
        SYSTEM_INDEXES.len(),
        "{context}: index count"
    );
}

// ---------------------------------------------------------------------------------------------
// Reference fixtures (schema 28)
// ---------------------------------------------------------------------------------------------

#[test]
fn sto_31_reference_fixtures_migrate_28_to_32_keeping_every_row() {
    let dir = TempDir::new().unwrap();
    for name in FIXTURES {
        let path = copy_fixture(&dir, name);
        let mut conn = open(&path);
        assert_eq!(read_schema_version(&conn).unwrap(), Some(28), "{name}");
        let tables: Vec<String> = objects(&conn, "table").into_keys().collect();
        let before: BTreeMap<String, (Vec<String>, Vec<Vec<SqlValue>>)> =
            tables.iter().map(|t| (t.clone(), rows(&conn, t))).collect();
        let sequence_before = rows(&conn, "sqlite_sequence");

        assert_eq!(migrate(&mut conn, 28), vec![29, 30, 31, 32], "{name}");
        assert_eq!(read_schema_version(&conn).unwrap(), Some(32), "{name}");

        for (table, (columns, old_rows)) in &before {
            let (new_columns, new_rows) = rows(&conn, table);
            assert_eq!(
                &new_columns[..columns.len()],
                &columns[..],
                "{name}: {table} keeps its column order"
            );
            assert_eq!(new_rows.len(), old_rows.len(), "{name}: {table} row count");
            for (old, new) in old_rows.iter().zip(&new_rows) {
                for (i, column) in columns.iter().enumerate() {
                    let expected = if table == "adf_meta"
                        && column == "value"
                        && old[0] == SqlValue::Text("adf_schema_version".into())
                    {
                        SqlValue::Text("32".into())
                    } else {
                        old[i].clone()
                    };
                    assert_eq!(new[i], expected, "{name}: {table}.{column} of {:?}", old[0]);
                }
                for (i, column) in new_columns.iter().enumerate().skip(columns.len()) {
                    let default = if table == "adf_loop" && column == "loop" {
                        SqlValue::Text("main".into())
                    } else {
                        SqlValue::Null
                    };
                    assert_eq!(new[i], default, "{name}: new column {table}.{column}");
                }
            }
        }
        assert_eq!(
            rows(&conn, "sqlite_sequence"),
            sequence_before,
            "{name}: AUTOINCREMENT state"
        );
        assert_eq!(
            objects(&conn, "table").len(),
            tables.len(),
            "{name}: no table added or dropped"
        );
    }
}

#[test]
fn sto_31_fixture_schema_equals_fresh_ddl_after_migration() {
    let dir = TempDir::new().unwrap();
    for name in FIXTURES {
        let path = copy_fixture(&dir, name);
        let mut conn = open(&path);
        migrate(&mut conn, 28);
        assert_schema_matches_fresh(&conn, true, name);
    }
}

#[test]
fn sto_31_loop_column_added_and_rows_become_main() {
    let dir = TempDir::new().unwrap();
    let path = copy_fixture(&dir, "populated-runtime.adf");
    let mut conn = open(&path);
    let loop_rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM adf_loop", [], |r| r.get(0))
        .unwrap();
    assert!(loop_rows > 0, "the fixture has a transcript");
    migrate(&mut conn, 28);

    check_column(&conn, "adf_loop", "loop", ("TEXT", true, Some("'main'")));
    let mains: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM adf_loop WHERE loop = 'main'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(mains, loop_rows);
    for table in ["adf_timers", "adf_logs", "adf_tasks"] {
        let col = table_info(&conn, table)
            .into_iter()
            .find(|c| c.name == "loop")
            .unwrap();
        assert_eq!(
            (col.decl_type.as_str(), col.notnull, col.default),
            ("TEXT", false, None),
            "{table}"
        );
        let non_null: i64 = conn
            .query_row(
                &format!("SELECT COUNT(*) FROM {table} WHERE loop IS NOT NULL"),
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(non_null, 0, "{table}: existing rows belong to no loop");
    }
    let fresh = fresh();
    for index in ["idx_adf_loop_loop_seq", "idx_adf_loop_stream"] {
        assert_eq!(
            objects(&conn, "index").get(index),
            objects(&fresh, "index").get(index),
            "{index}"
        );
    }
    // New rows without a loop land in main.
    conn.execute(
        "INSERT INTO adf_loop (role, content_json, created_at) VALUES ('user', '[]', 1)",
        [],
    )
    .unwrap();
    let last: String = conn
        .query_row(
            "SELECT loop FROM adf_loop ORDER BY seq DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(last, "main");
}

#[test]
fn sto_26_steps_run_in_order_each_committing_its_version() {
    let dir = TempDir::new().unwrap();
    let (path, conn) = old_file(&dir, 27, &base_config());
    drop(conn);
    let mut conn = open(&path);
    // A second connection sees what each step committed.
    let observer = open(&path);
    let mut seen = Vec::new();
    run_ladder(&mut conn, 27, &mut |step| {
        let stored: String = observer
            .query_row(
                "SELECT value FROM adf_meta WHERE key = 'adf_schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        seen.push((step, stored));
    })
    .map_err(|(s, e)| format!("step {s}: {e}"))
    .unwrap();
    let expected: Vec<(u32, String)> = (28..=32).map(|s| (s, s.to_string())).collect();
    assert_eq!(seen, expected);
    assert_eq!(
        meta(&conn, "adf_schema_version"),
        Some(("32".into(), "readonly".into()))
    );
}

#[test]
fn sto_26_ladder_from_every_schema_3_to_31_reaches_the_fresh_schema() {
    let dir = TempDir::new().unwrap();
    for from in 3..SCHEMA_VERSION {
        let (_, mut conn) = old_file(&dir, from, &base_config());
        assert_eq!(read_schema_version(&conn).unwrap(), Some(from));
        let steps = migrate(&mut conn, from);
        assert_eq!(
            steps,
            (from + 1..=SCHEMA_VERSION).collect::<Vec<_>>(),
            "from {from}"
        );
        assert_eq!(
            read_schema_version(&conn).unwrap(),
            Some(SCHEMA_VERSION),
            "from {from}"
        );
        assert_eq!(meta_value(&conn, "schema_version"), None, "from {from}");
        // Before 17 `authorized` (and before 6 `lambda`/`warm`) are appended, not in DDL order.
        // Step 6 turns scope values into arrays but, like the reference, cannot change the
        // column's declared default without rebuilding the table.
        let exempt: &[(&str, &str)] = if from < 6 {
            &[("adf_timers", "scope")]
        } else {
            &[]
        };
        assert_schema_matches_fresh_except(&conn, from >= 17, exempt, &format!("from {from}"));

        let context = format!("from {from}");
        let cfg = config(&conn);
        assert_eq!(
            cfg["future_field"],
            json!({ "nested": [1, 2, 3] }),
            "{context}"
        );
        let icon = if from < 31 {
            json!(defaults::icon_for_id(AGENT_ID))
        } else {
            Value::Null
        };
        assert_eq!(cfg["icon"], icon, "{context}: step 31 sets the icon");
        let loop_rows: Vec<(String, String)> = conn
            .prepare("SELECT role, loop FROM adf_loop ORDER BY seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            loop_rows,
            vec![
                ("user".into(), "main".into()),
                ("assistant".into(), "main".into())
            ],
            "{context}"
        );
        let scope: String = conn
            .query_row("SELECT scope FROM adf_timers", [], |r| r.get(0))
            .unwrap();
        let expected_scope = if from >= 6 {
            "[\"agent\"]"
        } else {
            "[\"system\"]"
        };
        assert_eq!(scope, expected_scope, "{context}");
        let readme = file(&conn, "README.md").unwrap();
        assert_eq!(readme.0, b"# Old Agent\n\nMy document.\n", "{context}");
        assert_eq!(file(&conn, "notes/a.md").unwrap().0, b"note", "{context}");
        assert_eq!(
            file(&conn, "mind.md").unwrap().0,
            b"# Mind\n\nlived-in\n",
            "{context}"
        );
        for core in defaults::CORE_FILES {
            assert_eq!(
                file(&conn, core).map(|f| f.1),
                Some("no_delete".to_owned()),
                "{context}: {core}"
            );
        }
        let messages: i64 = conn
            .query_row("SELECT COUNT(*) FROM adf_inbox", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            messages,
            i64::from(from >= 10),
            "{context}: inbox kept from schema 10 on"
        );
        let tasks: i64 = conn
            .query_row("SELECT COUNT(*) FROM adf_tasks", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tasks, i64::from(from >= 5), "{context}");
        assert_eq!(
            meta(&conn, "project").map(|m| m.0),
            Some("x".into()),
            "{context}"
        );
        assert_eq!(
            meta(&conn, "adf_did"),
            Some(("did:key:z6MkOld".into(), "readonly".into())),
            "{context}"
        );
        assert!(
            legacy_cleanup(&conn).unwrap().is_empty(),
            "{context}: cleanup already done"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// One test per ladder item
// ---------------------------------------------------------------------------------------------

#[test]
fn sto_32_bare_prompt_switches_off_dynamic_instructions() {
    let dir = TempDir::new().unwrap();
    let mut cfg = base_config();
    cfg["bare_prompt"] = json!(true);
    let (_, mut conn) = old_file(&dir, 29, &cfg);
    migrate(&mut conn, 29);
    let after = config(&conn);
    assert_eq!(
        after["context"]["dynamic_instructions"],
        json!({ "inbox_hints": false, "context_warning": false, "idle_reminder": false, "mesh_updates": false })
    );
    assert_eq!(
        after["context"]["audit"],
        json!({ "loop": true }),
        "the rest of context is kept"
    );

    // Existing switches are overridden, unknown keys inside survive; non-bare agents are untouched.
    let dir = TempDir::new().unwrap();
    let mut cfg = base_config();
    cfg["bare_prompt"] = json!(true);
    cfg["context"]["dynamic_instructions"] = json!({ "inbox_hints": true, "custom": 1 });
    let (_, mut conn) = old_file(&dir, 29, &cfg);
    migrate(&mut conn, 29);
    assert_eq!(
        config(&conn)["context"]["dynamic_instructions"],
        json!({ "inbox_hints": false, "custom": 1, "context_warning": false, "idle_reminder": false, "mesh_updates": false })
    );

    let dir = TempDir::new().unwrap();
    let mut cfg = base_config();
    cfg["bare_prompt"] = json!(false);
    let (_, mut conn) = old_file(&dir, 29, &cfg);
    migrate(&mut conn, 29);
    assert!(
        config(&conn)["context"]
            .get("dynamic_instructions")
            .is_none()
    );
}

#[test]
fn sto_33_icon_is_set_from_id_deterministically() {
    let dir_a = TempDir::new().unwrap();
    let dir_b = TempDir::new().unwrap();
    let mut icons = Vec::new();
    for dir in [&dir_a, &dir_b] {
        let (_, mut conn) = old_file(dir, 30, &base_config());
        migrate(&mut conn, 30);
        icons.push(config(&conn)["icon"].clone());
    }
    assert_eq!(icons[0], icons[1]);
    assert_eq!(icons[0], json!(defaults::icon_for_id(AGENT_ID)));

    // An icon the owner chose is kept; an empty one is filled.
    let dir = TempDir::new().unwrap();
    let mut cfg = base_config();
    cfg["icon"] = json!("🤖");
    let (_, mut conn) = old_file(&dir, 30, &cfg);
    migrate(&mut conn, 30);
    assert_eq!(config(&conn)["icon"], json!("🤖"));

    let dir = TempDir::new().unwrap();
    let mut cfg = base_config();
    cfg["icon"] = json!("");
    let (_, mut conn) = old_file(&dir, 30, &cfg);
    migrate(&mut conn, 30);
    assert_eq!(
        config(&conn)["icon"],
        json!(defaults::icon_for_id(AGENT_ID))
    );
}

#[test]
fn sto_34_outbox_created_index_is_created() {
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 31, &base_config());
    assert!(!index_exists(&conn, "idx_adf_outbox_created"));
    assert_eq!(migrate(&mut conn, 31), vec![32]);
    assert_eq!(
        objects(&conn, "index").get("idx_adf_outbox_created"),
        objects(&fresh(), "index").get("idx_adf_outbox_created")
    );
}

#[test]
fn sto_35_audit_rebuilt_with_seq_ranges_and_refs_keeping_ids() {
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 27, &base_config());
    let loop_blob = brotli_json(&json!([
        { "seq": 4, "role": "user", "content_json": [], "created_at": 1 },
        { "seq": 5, "role": "assistant", "content_json": [], "created_at": 2 },
        { "seq": 9, "role": "user", "content_json": [], "created_at": 3 }
    ]));
    let inbox_blob = brotli_json(&json!({ "id": "msg_123", "payload": { "content": "hi" } }));
    let file_blob = brotli_json(
        &json!({ "path": "docs/old.md", "content_base64": "", "mime_type": "text/markdown", "size": 0 }),
    );
    let legacy_blob = brotli_json(&json!([{ "id": "x" }]));
    let rows: [(i64, &str, Vec<u8>); 5] = [
        (3, "loop", loop_blob),
        (7, "inbox_message", inbox_blob),
        (8, "file", file_blob),
        (10, "inbox", legacy_blob),
        (12, "loop", b"not brotli at all".to_vec()),
    ];
    for (id, source, data) in &rows {
        conn.execute(
            "INSERT INTO adf_audit (id, source, start_at, end_at, entry_count, size_bytes, data, created_at)
             VALUES (?1, ?2, 100, 200, 1, 10, ?3, 1700000000000)",
            params![id, source, data],
        )
        .unwrap();
    }
    // A deleted snapshot leaves the AUTOINCREMENT high-water mark above the last id.
    conn.execute_batch(
        "INSERT INTO adf_audit (id, source, start_at, end_at, entry_count, size_bytes, data, created_at)
         VALUES (20, 'loop', 0, 0, 0, 0, X'', 0);
         DELETE FROM adf_audit WHERE id = 20;",
    )
    .unwrap();

    migrate(&mut conn, 27);

    type AuditRow = (
        i64,
        String,
        Option<i64>,
        Option<i64>,
        Option<String>,
        Vec<u8>,
    );
    let got: Vec<AuditRow> = conn
        .prepare("SELECT id, source, start_seq, end_seq, ref, data FROM adf_audit ORDER BY id")
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let summary: Vec<_> = got
        .iter()
        .map(|r| (r.0, r.1.as_str(), r.2, r.3, r.4.as_deref()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (3, "loop", Some(4), Some(9), None),
            (7, "inbox_message", None, None, Some("msg_123")),
            (8, "file", None, None, Some("docs/old.md")),
            (10, "inbox", None, None, None),
            (12, "loop", None, None, None),
        ]
    );
    for (row, original) in got.iter().zip(&rows) {
        assert_eq!(row.5, original.2, "blob of {} kept byte for byte", row.0);
    }
    let seq: i64 = conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'adf_audit'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(seq, 20);
    let ord = table_info(&conn, "adf_loop")
        .into_iter()
        .find(|c| c.name == "ord")
        .unwrap();
    assert_eq!((ord.decl_type.as_str(), ord.notnull), ("INTEGER", false));
    assert!(
        !index_exists(&conn, "idx_adf_audit_source"),
        "old audit index went with the old table"
    );
    assert_schema_matches_fresh(&conn, true, "from 27");
}

#[test]
fn sto_35_audit_rebuild_keeps_unknown_columns() {
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 27, &base_config());
    conn.execute_batch(
        "ALTER TABLE adf_audit ADD COLUMN note TEXT;
         INSERT INTO adf_audit (id, source, start_at, end_at, entry_count, size_bytes, data, created_at, note)
         VALUES (1, 'other', 0, 0, 0, 0, X'00', 5, 'keep me');",
    )
    .unwrap();
    migrate(&mut conn, 27);
    let note: String = conn
        .query_row("SELECT note FROM adf_audit WHERE id = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(note, "keep me");
    assert_eq!(table_info(&conn, "adf_audit").last().unwrap().name, "note");
}

#[test]
fn sto_36_meta_attestations_move_to_their_table() {
    // Real attestations signed by the reference runtime, in the pre-24 meta-key form.
    let dir = TempDir::new().unwrap();
    let studio = open(&copy_fixture(&dir, "studio-identity.adf"));
    let signed: Vec<(String, String, String, String, String, String)> = studio
        .prepare("SELECT issuer, subject, role, issued_at, signature, raw_json FROM adf_attestations ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(signed.len(), 2);
    let mut array: Vec<Value> = signed
        .iter()
        .map(|s| serde_json::from_str(&s.5).unwrap())
        .collect();
    array.push(json!({ "issuer": "did:key:z6MkX", "subject": "did:key:z6MkY" })); // unsigned: skipped
    array.push(json!("not an object"));

    let (_, mut conn) = old_file(&dir, 23, &base_config());
    conn.execute(
        "INSERT INTO adf_meta (key, value, protection) VALUES ('adf_attestations', ?1, 'readonly')",
        [Value::Array(array).to_string()],
    )
    .unwrap();
    migrate(&mut conn, 23);

    assert_eq!(meta(&conn, "adf_attestations"), None);
    let migrated: Vec<(String, String, String, String, String, String)> = conn
        .prepare("SELECT issuer, subject, role, issued_at, signature, raw_json FROM adf_attestations ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    // raw_json is byte-identical, so the signatures verify exactly as they did in the source file.
    assert_eq!(migrated, signed);
    assert!(index_exists(&conn, "idx_adf_attestations_subject"));
}

#[test]
fn sto_37_document_md_becomes_readme_and_watch_globs_follow() {
    let dir = TempDir::new().unwrap();
    let mut cfg = base_config();
    cfg["triggers"]["on_file_change"]["targets"] = json!([
        { "scope": "agent", "filter": { "watch": "document.*" }, "debounce_ms": 2000 },
        { "scope": "system", "filter": { "watch": "data/*" } }
    ]);
    let (_, mut conn) = old_file(&dir, 21, &cfg);
    let document = file(&conn, "document.md").unwrap();
    conn.execute("INSERT INTO adf_files (path, content, mime_type, size, protection, authorized, created_at, updated_at)
                  VALUES ('document.txt', X'41', 'text/plain', 1, 'none', 0, 'a', 'b')", []).unwrap();
    migrate(&mut conn, 21);

    assert_eq!(file(&conn, "document.md"), None);
    assert_eq!(
        file(&conn, "README.md").unwrap(),
        document,
        "content, protection and timestamps kept"
    );
    assert!(
        file(&conn, "document.txt").is_some(),
        "other document.* files are left alone"
    );
    assert_eq!(
        config(&conn)["triggers"]["on_file_change"]["targets"],
        json!([
            { "scope": "agent", "filter": { "watch": "README.*" }, "debounce_ms": 2000 },
            { "scope": "system", "filter": { "watch": "data/*" } }
        ])
    );
}

#[test]
fn sto_37_existing_readme_is_not_clobbered_by_document_md() {
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 21, &base_config());
    conn.execute("INSERT INTO adf_files (path, content, mime_type, size, protection, authorized, created_at, updated_at)
                  VALUES ('README.md', X'52', 'text/markdown', 1, 'none', 0, 'a', 'b')", []).unwrap();
    migrate(&mut conn, 21);
    assert_eq!(file(&conn, "README.md").unwrap().0, b"R");
    assert!(file(&conn, "document.md").is_some());
}

#[test]
fn sto_38_thinking_budget_folds_into_reasoning_and_removed_limits_go() {
    let dir = TempDir::new().unwrap();
    let mut cfg = base_config();
    cfg["model"]["thinking_budget"] = json!(8000);
    cfg["model"]["max_loop_messages"] = json!(50);
    cfg["context"]["max_loop_messages"] = json!(50);
    cfg["limits"]["max_loop_rows"] = json!(100);
    cfg["limits"]["max_daily_budget_usd"] = json!(5);
    let (_, mut conn) = old_file(&dir, 22, &cfg);
    migrate(&mut conn, 22);
    let after = config(&conn);
    assert_eq!(
        after["model"]["reasoning"],
        json!({ "enabled": true, "max_tokens": 8000 })
    );
    assert!(after["model"].get("thinking_budget").is_none());
    assert!(after["model"].get("max_loop_messages").is_none());
    assert!(after["context"].get("max_loop_messages").is_none());
    assert_eq!(after["limits"], json!({ "execution_timeout_ms": 60000 }));
    // Key order of what remains is unchanged.
    let keys: Vec<&String> = after["model"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "provider",
            "model_id",
            "temperature",
            "max_tokens",
            "reasoning"
        ]
    );

    // An explicit reasoning block wins and thinking_budget is left for the config layer.
    let dir = TempDir::new().unwrap();
    let mut cfg = base_config();
    cfg["model"]["thinking_budget"] = json!(8000);
    cfg["model"]["reasoning"] = json!({ "enabled": false });
    let (_, mut conn) = old_file(&dir, 22, &cfg);
    migrate(&mut conn, 22);
    assert_eq!(
        config(&conn)["model"]["reasoning"],
        json!({ "enabled": false })
    );
    assert_eq!(config(&conn)["model"]["thinking_budget"], json!(8000));
}

#[test]
fn sto_39_require_approval_and_require_authorized_become_restricted() {
    let dir = TempDir::new().unwrap();
    let mut cfg = base_config();
    cfg["tools"] = json!([
        { "name": "fs_write", "enabled": true, "require_approval": true, "visible": true },
        { "name": "db_execute", "enabled": true, "require_approval": false },
        { "name": "sys_fetch", "enabled": true },
        { "name": "fs_read", "enabled": true }
    ]);
    cfg["security"]["require_authorized"] = json!([
        "sys_fetch",
        "model_invoke",
        "set_identity",
        "unknown_method"
    ]);
    cfg["mcp"] = json!({ "servers": [
        { "name": "gh", "require_approval": true },
        { "name": "fs", "require_approval": false, "x": 1 }
    ]});
    let (_, mut conn) = old_file(&dir, 19, &cfg);
    migrate(&mut conn, 19);
    let after = config(&conn);
    assert_eq!(
        after["tools"],
        json!([
            { "name": "fs_write", "enabled": true, "visible": true, "restricted": true },
            { "name": "db_execute", "enabled": true },
            { "name": "sys_fetch", "enabled": true, "restricted": true },
            { "name": "fs_read", "enabled": true }
        ])
    );
    assert_eq!(
        after["code_execution"]["restricted_methods"],
        json!(["model_invoke", "set_identity"])
    );
    assert_eq!(
        after["mcp"]["servers"],
        json!([{ "name": "gh", "restricted": true }, { "name": "fs", "x": 1 }])
    );
    assert_eq!(
        after["security"],
        json!({ "allow_unsigned": true, "level": 1 })
    );
}

#[test]
fn sto_40_adf_peers_is_dropped() {
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 20, &base_config());
    assert!(adf_tables(&conn).contains("adf_peers"));
    migrate(&mut conn, 20);
    assert!(!adf_tables(&conn).contains("adf_peers"));
    assert!(objects(&conn, "index").keys().all(|i| !i.contains("peers")));

    // The peers steps 9..12 themselves work on the way there.
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 8, &base_config());
    migrate(&mut conn, 8);
    assert!(!adf_tables(&conn).contains("adf_peers"));
}

#[test]
fn sto_41_soul_and_mind_log_backfilled_without_clobbering() {
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 24, &base_config());
    assert!(file(&conn, "soul.md").is_none() && file(&conn, "mind/log.md").is_none());
    migrate(&mut conn, 24);
    for (path, content) in [
        ("soul.md", defaults::SOUL),
        ("mind/log.md", defaults::MIND_LOG),
    ] {
        let (bytes, protection, created, updated) = file(&conn, path).unwrap();
        assert_eq!(
            (bytes.as_slice(), protection.as_str()),
            (content.as_bytes(), "no_delete"),
            "{path}"
        );
        assert!(
            is_iso_millis(&created) && created == updated,
            "{path}: {created}"
        );
        let (mime, size, authorized): (String, i64, i64) = conn
            .query_row(
                "SELECT mime_type, size, authorized FROM adf_files WHERE path = ?1",
                [path],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(
            (mime.as_str(), size, authorized),
            ("text/markdown", content.len() as i64, 0),
            "{path}"
        );
    }

    // Custom files are never overwritten.
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 24, &base_config());
    let custom = "# Soul\n\nmine\n";
    conn.execute(
        "INSERT INTO adf_files (path, content, mime_type, size, protection, authorized, created_at, updated_at)
         VALUES ('soul.md', ?1, 'text/markdown', 13, 'none', 0, 'a', 'b')",
        [custom.as_bytes()],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO adf_files (path, content, mime_type, size, protection, authorized, created_at, updated_at)
         VALUES ('mind/log.md', X'4C', 'text/markdown', 1, 'none', 0, 'a', 'b')",
        [],
    )
    .unwrap();
    migrate(&mut conn, 24);
    assert_eq!(
        file(&conn, "soul.md").unwrap(),
        (
            custom.as_bytes().to_vec(),
            "none".into(),
            "a".into(),
            "b".into()
        )
    );
    assert_eq!(file(&conn, "mind/log.md").unwrap().0, b"L");
}

#[test]
fn sto_41_blank_mind_md_gets_the_skeleton_at_28() {
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 27, &base_config());
    conn.execute(
        "UPDATE adf_files SET content = ?1, size = 5 WHERE path = 'mind.md'",
        ["\u{feff}\n \t\n".as_bytes()],
    )
    .unwrap();
    migrate(&mut conn, 27);
    assert_eq!(
        file(&conn, "mind.md").unwrap().0,
        defaults::MIND_SKELETON.as_bytes()
    );
}

#[test]
fn sto_42_allow_protected_writes_is_stripped() {
    let dir = TempDir::new().unwrap();
    let path = copy_fixture(&dir, "minimal-headless.adf");
    let mut conn = open(&path);
    let mut cfg = config(&conn);
    cfg["security"]["allow_protected_writes"] = json!(true);
    set_config(&conn, &cfg);
    migrate(&mut conn, 28);
    let after = config(&conn);
    assert!(after["security"].get("allow_protected_writes").is_none());
    cfg["security"]
        .as_object_mut()
        .unwrap()
        .shift_remove("allow_protected_writes");
    assert_eq!(
        after.to_string(),
        cfg.to_string(),
        "nothing else changed, order included"
    );
}

#[test]
fn sto_43_compaction_threshold_tokens_is_removed() {
    let dir = TempDir::new().unwrap();
    let path = copy_fixture(&dir, "populated-runtime.adf");
    let mut conn = open(&path);
    let mut cfg = config(&conn);
    cfg["limits"]["compaction_threshold_tokens"] = json!(90000);
    set_config(&conn, &cfg);
    migrate(&mut conn, 28);
    assert!(
        config(&conn)["limits"]
            .get("compaction_threshold_tokens")
            .is_none()
    );
    assert_eq!(
        config(&conn)["limits"]["execution_timeout_ms"],
        cfg["limits"]["execution_timeout_ms"]
    );
}

#[test]
fn sto_13_only_fields_listed_as_removed_are_removed() {
    let dir = TempDir::new().unwrap();
    let mut cfg = base_config();
    cfg["loop_mode"] = json!("autonomous");
    cfg["context"]["mind_mode"] = json!("index");
    cfg["context"]["document_mode"] = json!("full");
    cfg["security"]["allow_protected_writes"] = json!(false);
    cfg["security"]["future_guard"] = json!(true);
    cfg["model"]["future_knob"] = json!(3);
    let (_, mut conn) = old_file(&dir, 28, &cfg);
    migrate(&mut conn, 28);
    let after = config(&conn);
    assert!(after.get("loop_mode").is_none());
    assert!(after["context"].get("mind_mode").is_none());
    assert!(after["context"].get("document_mode").is_none());
    assert!(after["security"].get("allow_protected_writes").is_none());
    assert_eq!(after["future_field"], json!({ "nested": [1, 2, 3] }));
    assert_eq!(after["security"]["future_guard"], json!(true));
    assert_eq!(after["model"]["future_knob"], json!(3));
    assert_eq!(after["context"]["audit"], json!({ "loop": true }));
}

#[test]
fn sto_44_timers_below_26_get_expired() {
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 25, &base_config());
    assert!(
        !table_info(&conn, "adf_timers")
            .iter()
            .any(|c| c.name == "expired")
    );
    migrate(&mut conn, 25);
    check_column(&conn, "adf_timers", "expired", ("INTEGER", true, Some("0")));
    let value: i64 = conn
        .query_row("SELECT expired FROM adf_timers", [], |r| r.get(0))
        .unwrap();
    assert_eq!(value, 0);
    assert_schema_matches_fresh(&conn, true, "from 25");
}

#[test]
fn sto_45_schema_version_key_read_below_14_and_meta_keys_renamed() {
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 13, &base_config());
    assert_eq!(read_schema_version(&conn).unwrap(), Some(13));
    migrate(&mut conn, 13);
    assert_eq!(meta_value(&conn, "schema_version"), None);
    assert_eq!(
        meta(&conn, "adf_schema_version"),
        Some(("32".into(), "readonly".into()))
    );
    for key in [
        "format",
        "did",
        "owner_did",
        "runtime_did",
        "identity_salt",
        "identity_kdf_params",
    ] {
        assert_eq!(meta(&conn, key), None, "{key} retired");
    }
    assert_eq!(
        meta(&conn, "adf_did"),
        Some(("did:key:z6MkOld".into(), "readonly".into()))
    );
    assert_eq!(
        meta(&conn, "adf_owner_did"),
        Some(("did:key:z6MkOwner".into(), "readonly".into()))
    );
    assert_eq!(
        meta(&conn, "adf_runtime_did"),
        Some(("did:key:z6MkRuntime".into(), "readonly".into()))
    );
    assert_eq!(
        meta(&conn, "adf_name"),
        Some(("Old Agent".into(), "readonly".into()))
    );
    assert_eq!(
        meta(&conn, "adf_handle"),
        Some(("old-agent".into(), "readonly".into()))
    );
    assert_eq!(
        meta(&conn, "adf_parent_did"),
        Some((String::new(), "readonly".into()))
    );
    assert_eq!(
        meta(&conn, "adf_created_at").unwrap().0,
        "2025-01-02T03:04:05.006Z"
    );
    assert_eq!(
        meta(&conn, "adf_updated_at").unwrap().0,
        "2025-02-03T04:05:06.007Z"
    );
    assert_eq!(meta(&conn, "status"), Some((String::new(), "none".into())));
    assert_eq!(
        meta(&conn, "project"),
        Some(("x".into(), "none".into())),
        "agent keys keep value"
    );
    let kdf: Vec<(String, Vec<u8>, String, i64)> = conn
        .prepare("SELECT purpose, value, encryption_algo, code_access FROM adf_identity WHERE purpose LIKE 'crypto:kdf:%' ORDER BY purpose")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        kdf,
        vec![
            (
                "crypto:kdf:params".into(),
                b"{\"iterations\":100000,\"digest\":\"sha512\",\"keyLength\":32}".to_vec(),
                "plain".into(),
                0
            ),
            (
                "crypto:kdf:salt".into(),
                b"c2FsdA==".to_vec(),
                "plain".into(),
                0
            ),
        ]
    );
}

#[test]
fn sto_45_handle_derived_from_name_when_config_has_none() {
    let dir = TempDir::new().unwrap();
    let mut cfg = base_config();
    cfg.as_object_mut().unwrap().shift_remove("handle");
    cfg["name"] = json!("My Old  Agent!");
    let (_, mut conn) = old_file(&dir, 13, &cfg);
    migrate(&mut conn, 13);
    assert_eq!(meta(&conn, "adf_handle").unwrap().0, "my-old-agent");
}

#[test]
fn read_schema_version_handles_missing_table_and_keys() {
    let conn = Connection::open_in_memory().unwrap();
    assert_eq!(read_schema_version(&conn).unwrap(), None);
    conn.execute_batch("CREATE TABLE adf_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        .unwrap();
    assert_eq!(read_schema_version(&conn).unwrap(), Some(0));
    conn.execute("INSERT INTO adf_meta VALUES ('schema_version', '9')", [])
        .unwrap();
    assert_eq!(read_schema_version(&conn).unwrap(), Some(9));
    conn.execute("INSERT INTO adf_meta VALUES ('adf_schema_version', 30)", [])
        .unwrap();
    assert_eq!(
        read_schema_version(&conn).unwrap(),
        Some(30),
        "the prefixed key wins, stored as integer too"
    );
    conn.execute(
        "UPDATE adf_meta SET value = 'thirty' WHERE key = 'adf_schema_version'",
        [],
    )
    .unwrap();
    assert!(read_schema_version(&conn).is_err());
}

// ---------------------------------------------------------------------------------------------
// Legacy cleanup and reserved files
// ---------------------------------------------------------------------------------------------

#[test]
fn fil_03_missing_core_files_are_recreated_when_migrating() {
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 24, &base_config());
    conn.execute(
        "DELETE FROM adf_files WHERE path IN ('README.md', 'mind.md')",
        [],
    )
    .unwrap();
    migrate(&mut conn, 24);
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let expected = [
        ("README.md", defaults::readme("Old Agent", &today)),
        ("mind.md", defaults::MIND_SKELETON.to_owned()),
        ("mind/log.md", defaults::MIND_LOG.to_owned()),
        ("soul.md", defaults::SOUL.to_owned()),
    ];
    for (path, content) in expected {
        let (bytes, protection, created, _) = file(&conn, path).unwrap();
        assert_eq!(String::from_utf8(bytes).unwrap(), content, "{path}");
        assert_eq!(protection, "no_delete", "{path}");
        assert!(is_iso_millis(&created), "{path}: {created}");
    }
}

#[test]
fn fil_03_legacy_cleanup_backfills_core_files_of_a_current_file() {
    let dir = TempDir::new().unwrap();
    let path = copy_fixture(&dir, "studio-identity.adf");
    let mut conn = open(&path);
    migrate(&mut conn, 28);
    conn.execute(
        "DELETE FROM adf_files WHERE path IN ('soul.md', 'README.md')",
        [],
    )
    .unwrap();
    let notes = legacy_cleanup(&conn).unwrap();
    assert_eq!(
        notes,
        vec![
            "created missing core file README.md",
            "created missing core file soul.md"
        ]
    );
    let readme = String::from_utf8(file(&conn, "README.md").unwrap().0).unwrap();
    assert!(
        readme.starts_with("# Golden Studio Agent\n\nCreated: "),
        "{readme}"
    );
    assert!(legacy_cleanup(&conn).unwrap().is_empty());
}

#[test]
fn legacy_cleanup_is_a_no_op_on_a_migrated_file() {
    let dir = TempDir::new().unwrap();
    for name in FIXTURES {
        let path = copy_fixture(&dir, name);
        let mut conn = open(&path);
        migrate(&mut conn, 28);
        let observer = open(&path);
        let data_version = |c: &Connection| -> i64 {
            c.query_row("PRAGMA data_version", [], |r| r.get(0))
                .unwrap()
        };
        let before = (dump(&conn), conn.total_changes(), data_version(&observer));
        let notes = legacy_cleanup(&conn).unwrap();
        assert!(notes.is_empty(), "{name}: {notes:?}");
        assert_eq!(
            (dump(&conn), conn.total_changes(), data_version(&observer)),
            before,
            "{name}"
        );
    }
}

#[test]
fn legacy_cleanup_is_a_no_op_on_a_fresh_file_and_works_inside_a_transaction() {
    let mut conn = fresh();
    let now = "2026-01-01T00:00:00.000Z";
    let cfg = defaults::default_config(&defaults::NewAgent {
        id: AGENT_ID,
        name: "Fresh",
        handle: "fresh",
        description: "",
        now_iso: now,
    });
    conn.execute(
        "INSERT INTO adf_config VALUES (1, ?1, ?2)",
        [cfg.to_string(), now.to_owned()],
    )
    .unwrap();
    conn.execute_batch(
        "INSERT INTO adf_meta VALUES ('adf_version', '0.2', 'readonly'), ('adf_schema_version', '32', 'readonly'),
                                     ('adf_did', 'did:key:z', 'readonly');",
    )
    .unwrap();
    for path in defaults::CORE_FILES {
        let content = defaults::core_file_content(path, "Fresh", "2026-01-01").unwrap();
        conn.execute(
            "INSERT INTO adf_files (path, content, mime_type, size, protection, created_at, updated_at)
             VALUES (?1, ?2, 'text/markdown', ?3, 'no_delete', ?4, ?4)",
            params![path, content.as_bytes(), content.len() as i64, now],
        )
        .unwrap();
    }
    let changes = conn.total_changes();
    assert!(legacy_cleanup(&conn).unwrap().is_empty());
    assert_eq!(conn.total_changes(), changes);

    // Inside the caller's transaction: its changes and ours commit or roll back together.
    conn.execute(
        "UPDATE adf_meta SET protection = 'none' WHERE key = 'adf_did'",
        [],
    )
    .unwrap();
    let tx = conn.transaction().unwrap();
    tx.execute("DELETE FROM adf_files WHERE path = 'soul.md'", [])
        .unwrap();
    let notes = legacy_cleanup(&tx).unwrap();
    assert_eq!(
        notes,
        vec![
            "created missing core file soul.md",
            "made 1 identity meta key(s) readonly"
        ]
    );
    tx.rollback().unwrap();
    assert_eq!(
        meta(&conn, "adf_did").unwrap().1,
        "none",
        "rolled back with the caller"
    );
    assert_eq!(file(&conn, "soul.md").unwrap().1, "no_delete");
}

#[test]
fn legacy_cleanup_applies_every_legacy_fix() {
    let dir = TempDir::new().unwrap();
    let path = copy_fixture(&dir, "populated-runtime.adf");
    let mut conn = open(&path);
    migrate(&mut conn, 28);
    let mut cfg = config(&conn);
    cfg["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "name": "container_exec", "enabled": false, "restricted": true }));
    cfg["triggers"] = json!({ "document": { "enabled": true }, "agent": { "enabled": true } });
    cfg["context"]["mind_mode"] = json!("x");
    set_config(&conn, &cfg);
    conn.execute_batch(
        "UPDATE adf_meta SET protection = 'none' WHERE key = 'adf_did';
         INSERT INTO adf_meta VALUES ('adf_did_history', '[]', 'none');
         DELETE FROM adf_meta WHERE key = 'adf_version';
         CREATE TABLE adf_archive (id INTEGER);
         DROP INDEX idx_adf_loop_stream;",
    )
    .unwrap();
    let notes = legacy_cleanup(&conn).unwrap();
    assert_eq!(
        notes,
        vec![
            "dropped the retired adf_archive table",
            "created the missing index idx_adf_loop_stream",
            "removed config field context.mind_mode",
            "renamed tool container_exec to compute_exec",
            "replaced the legacy v1 trigger config with the default trigger set",
            "made 2 identity meta key(s) readonly",
            "added the missing adf_version meta key (0.2)",
        ]
    );
    let after = config(&conn);
    assert_eq!(after["triggers"], defaults::default_triggers());
    assert_eq!(
        after["tools"].as_array().unwrap().last().unwrap(),
        &json!({ "name": "compute_exec", "enabled": false, "restricted": true })
    );
    assert_eq!(meta(&conn, "adf_did_history").unwrap().1, "readonly");
    assert_eq!(
        meta(&conn, "adf_version"),
        Some(("0.2".into(), "readonly".into()))
    );
    assert_schema_matches_fresh(&conn, true, "after cleanup");
    assert!(legacy_cleanup(&conn).unwrap().is_empty());
}

#[test]
fn legacy_structures_are_repaired_before_the_ladder_needs_them() {
    // A schema-3 file as early runtimes wrote it: no loop model/tokens/created_at, an archive
    // table, no audit table, and the boolean `protected` file flag.
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("v3-legacy.adf");
    let mut conn = open(&path);
    conn.execute_batch(
        "CREATE TABLE adf_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         INSERT INTO adf_meta VALUES ('schema_version', '3'), ('adf_version', '0.2');
         CREATE TABLE adf_config (id INTEGER PRIMARY KEY CHECK (id = 1), config_json TEXT NOT NULL, updated_at TEXT NOT NULL);
         CREATE TABLE adf_loop (seq INTEGER PRIMARY KEY AUTOINCREMENT, role TEXT NOT NULL, content_json TEXT NOT NULL);
         INSERT INTO adf_loop (role, content_json) VALUES ('user', '[]');
         CREATE TABLE adf_archive (id INTEGER PRIMARY KEY, data BLOB);
         CREATE TABLE adf_inbox (id TEXT PRIMARY KEY);
         CREATE TABLE adf_outbox (id TEXT PRIMARY KEY);
         CREATE TABLE adf_timers (id INTEGER PRIMARY KEY AUTOINCREMENT, schedule_json TEXT NOT NULL, next_wake_at INTEGER NOT NULL,
           payload TEXT, scope TEXT NOT NULL DEFAULT 'system', run_count INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL,
           last_fired_at INTEGER);
         CREATE TABLE adf_files (path TEXT PRIMARY KEY, content BLOB NOT NULL, mime_type TEXT, size INTEGER NOT NULL,
           protected INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
         INSERT INTO adf_files VALUES ('document.md', X'44', 'text/markdown', 1, 1, 'a', 'b'), ('x.md', X'58', NULL, 1, 0, 'a', 'b');
         CREATE TABLE adf_identity (purpose TEXT PRIMARY KEY, value BLOB NOT NULL, encryption_algo TEXT DEFAULT 'plain',
           salt BLOB, kdf_params TEXT);",
    )
    .unwrap();
    conn.execute(
        "INSERT INTO adf_config VALUES (1, ?1, 'a')",
        [base_config().to_string()],
    )
    .unwrap();
    migrate(&mut conn, 3);
    assert_eq!(read_schema_version(&conn).unwrap(), Some(32));
    assert!(!adf_tables(&conn).contains("adf_archive"));
    assert!(adf_tables(&conn).contains("adf_audit"));
    let loop_row: (String, i64, String) = conn
        .query_row("SELECT role, created_at, loop FROM adf_loop", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(loop_row, ("user".into(), 0, "main".into()));
    assert_eq!(
        file(&conn, "README.md").unwrap().1,
        "no_delete",
        "protected=1 became no_delete, then renamed"
    );
    assert_eq!(file(&conn, "x.md").unwrap().1, "none");
    let soul_protected: i64 = conn
        .query_row(
            "SELECT protected FROM adf_files WHERE path = 'soul.md'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        soul_protected, 1,
        "back-filled files keep the legacy flag consistent"
    );
    assert_eq!(
        meta(&conn, "adf_version"),
        Some(("0.2".into(), "readonly".into()))
    );
    assert!(legacy_cleanup(&conn).unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Failure
// ---------------------------------------------------------------------------------------------

#[test]
fn failing_step_reports_its_number_and_keeps_earlier_steps() {
    let dir = TempDir::new().unwrap();
    let path = copy_fixture(&dir, "populated-runtime.adf");
    let mut conn = open(&path);
    // An object with the name step 32 creates makes that step fail.
    conn.execute_batch("CREATE TABLE idx_adf_outbox_created (x)")
        .unwrap();
    let mut steps = Vec::new();
    let Err((step, error)) = run_ladder(&mut conn, 28, &mut |s| steps.push(s)) else {
        panic!("the ladder should fail");
    };
    assert_eq!(step, 32);
    assert!(
        error.to_string().contains("idx_adf_outbox_created"),
        "{error}"
    );
    assert_eq!(steps, vec![29, 30, 31]);
    assert_eq!(
        read_schema_version(&conn).unwrap(),
        Some(31),
        "steps 29..31 committed, 32 rolled back"
    );
    assert!(index_exists(&conn, "idx_adf_loop_loop_seq"));
    assert!(conn.is_autocommit(), "no transaction left open");
    conn.query_row("SELECT COUNT(*) FROM adf_meta", [], |r| r.get::<_, i64>(0))
        .unwrap();
}

#[test]
fn failing_step_rolls_back_its_own_partial_changes() {
    let dir = TempDir::new().unwrap();
    let (_, mut conn) = old_file(&dir, 28, &base_config());
    // Step 29 adds columns to four tables, then creates the indexes; the second index fails.
    conn.execute_batch("CREATE TABLE idx_adf_loop_stream (x)")
        .unwrap();
    let Err((step, _)) = run_ladder(&mut conn, 28, &mut |_| {}) else {
        panic!("the ladder should fail")
    };
    assert_eq!(step, 29);
    assert_eq!(read_schema_version(&conn).unwrap(), Some(28));
    for table in ["adf_loop", "adf_timers", "adf_logs", "adf_tasks"] {
        assert!(
            !table_info(&conn, table).iter().any(|c| c.name == "loop"),
            "{table}: ALTER rolled back"
        );
    }
}

#[test]
fn newer_or_unsupported_versions_are_refused_without_writing() {
    let dir = TempDir::new().unwrap();
    let path = copy_fixture(&dir, "minimal-headless.adf");
    let mut conn = open(&path);
    let before = dump(&conn);
    let Err((step, _)) = run_ladder(&mut conn, 33, &mut |_| {}) else {
        panic!("33 is newer than 32")
    };
    assert_eq!(step, 33);
    assert_eq!(dump(&conn), before);

    let mut ancient = Connection::open_in_memory().unwrap();
    ancient
        .execute_batch("CREATE TABLE adf_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); INSERT INTO adf_meta VALUES ('schema_version', '2');")
        .unwrap();
    let Err((step, error)) = run_ladder(&mut ancient, 2, &mut |_| {}) else {
        panic!("no step to 3")
    };
    assert_eq!(step, 3);
    assert!(
        error.to_string().contains("no migration step to schema 3"),
        "{error}"
    );
    assert_eq!(LEGACY_CLEANUP_STEP, SCHEMA_VERSION + 1);
}
