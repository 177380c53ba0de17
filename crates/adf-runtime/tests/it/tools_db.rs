//! `db_query` and `db_execute`: what an agent's SQL may read and write (spec §3.4, §10.3,
//! §5.6 `table_protections`, tools guide "Database Tools").
use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use adf_runtime::tools::{ErrorCode, ToolCaller, ToolError};
use adf_store::sql::{SqlError, SqlLimits};
use adf_store::{AdfFile, ConfigAction};
use common::{authorized, call, code, digest, enable, model, new_agent};
use serde_json::{Value, json};

/// An agent with both db tools enabled, a plain local table with two rows and a vec0 table.
fn agent() -> (tempfile::TempDir, PathBuf, AdfFile) {
    let (dir, path, mut file) = new_agent();
    enable(&mut file, "db_query");
    enable(&mut file, "db_execute");
    for sql in [
        "CREATE TABLE local_t (id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT UNIQUE)",
        "INSERT INTO local_t (v) VALUES ('a'), ('b')",
        "CREATE VIRTUAL TABLE local_e USING vec0(embedding float[3])",
        "INSERT INTO local_e (rowid, embedding) VALUES (1, '[0.1, 0.2, 0.3]')",
    ] {
        exec(&mut file, &code(), sql, json!([])).unwrap();
    }
    (dir, path, file)
}

/// One db tool call by `caller`: `tool` is `db_execute` or `db_query`.
fn db_tool(
    tool: &str,
    file: &mut AdfFile,
    caller: &ToolCaller,
    sql: &str,
    params: Value,
) -> Result<Value, ToolError> {
    call(file, caller, tool, json!({ "sql": sql, "params": params }))
}

fn exec(file: &mut AdfFile, caller: &ToolCaller, sql: &str, p: Value) -> Result<Value, ToolError> {
    db_tool("db_execute", file, caller, sql, p)
}

fn query(file: &mut AdfFile, caller: &ToolCaller, sql: &str, p: Value) -> Result<Value, ToolError> {
    db_tool("db_query", file, caller, sql, p)
}
/// The model runs `sql` through db_execute, without parameters.
fn model_exec(file: &mut AdfFile, sql: &str) -> Result<Value, ToolError> {
    exec(file, &model(), sql, json!([]))
}

/// The model runs `sql` through db_query, without parameters.
fn model_query(file: &mut AdfFile, sql: &str) -> Result<Value, ToolError> {
    query(file, &model(), sql, json!([]))
}

fn set_config(file: &mut AdfFile, path: &str, value: Value) {
    file.config_set_path(adf_store::Caller::Owner, path, ConfigAction::Set, value)
        .unwrap();
}

#[derive(Clone, Copy, Debug)]
enum Tool {
    Query,
    Execute,
}

use Tool::{Execute, Query};

/// Attempts that must all be refused, leaving the file exactly as it was. Each names the error
/// code and a fragment of the message that proves the refusal came from the policy, not from a
/// typo in the attack.
const HOSTILE: &[(Tool, &str, ErrorCode, &str)] = &[
    // Direct reads of the three secret tables, and spellings of their names.
    (
        Query,
        "SELECT * FROM adf_meta",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "SELECT * FROM adf_config",
        ErrorCode::InvalidInput,
        "adf_config is not readable",
    ),
    (
        Query,
        "SELECT * FROM adf_identity",
        ErrorCode::InvalidInput,
        "adf_identity is not readable",
    ),
    (
        Query,
        "SELECT count(*) FROM adf_meta",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "SELECT rowid FROM adf_identity",
        ErrorCode::InvalidInput,
        "adf_identity is not readable",
    ),
    (
        Query,
        "SELECT * FROM ADF_META",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "SELECT * FROM \"adf_meta\"",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "SELECT * FROM [adf_meta]",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "SELECT * FROM `Adf_Meta`",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "SELECT * FROM main.adf_meta",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "SELECT * FROM \"main\".\"ADF_CONFIG\"",
        ErrorCode::InvalidInput,
        "adf_config is not readable",
    ),
    // Comments around and inside the statement.
    (
        Query,
        "SELECT/**/value/**/FROM/**/adf_meta",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "SELECT value FROM -- the registry\n adf_meta",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "/* local_t */ SELECT * FROM adf_identity -- local_t",
        ErrorCode::InvalidInput,
        "adf_identity is not readable",
    ),
    // Joins, subqueries, CTEs, unions, functions over a secret table.
    (
        Query,
        "SELECT l.v, m.value FROM local_t l JOIN adf_meta m",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "SELECT * FROM local_t WHERE v IN (SELECT value FROM adf_identity)",
        ErrorCode::InvalidInput,
        "adf_identity is not readable",
    ),
    (
        Query,
        "SELECT (SELECT config_json FROM adf_config)",
        ErrorCode::InvalidInput,
        "adf_config is not readable",
    ),
    (
        Query,
        "WITH x AS (SELECT * FROM adf_config) SELECT * FROM x",
        ErrorCode::InvalidInput,
        "adf_config is not readable",
    ),
    (
        Query,
        "SELECT v FROM local_t UNION SELECT value FROM adf_meta",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "SELECT EXISTS(SELECT 1 FROM adf_identity WHERE purpose LIKE 'crypto%')",
        ErrorCode::InvalidInput,
        "adf_identity is not readable",
    ),
    (
        Query,
        "SELECT * FROM json_each((SELECT config_json FROM adf_config))",
        ErrorCode::InvalidInput,
        "adf_config is not readable",
    ),
    (
        Query,
        "EXPLAIN SELECT * FROM adf_meta",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    // Pragmas and pragma functions.
    (
        Query,
        "SELECT * FROM pragma_table_info('adf_meta')",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "SELECT name FROM pragma_table_info('ADF_IDENTITY')",
        ErrorCode::InvalidInput,
        "adf_identity is not readable",
    ),
    (
        Query,
        "SELECT * FROM pragma_index_list('adf_identity')",
        ErrorCode::InvalidInput,
        "adf_identity is not readable",
    ),
    (
        Query,
        "SELECT * FROM pragma_table_info('adf_' || 'meta')",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Query,
        "SELECT * FROM pragma_table_info('adf_identity', 'main')",
        ErrorCode::InvalidInput,
        "adf_identity is not readable",
    ),
    (
        Query,
        "PRAGMA table_info(adf_config)",
        ErrorCode::InvalidInput,
        "adf_config is not readable",
    ),
    (
        Query,
        "SELECT * FROM pragma_database_list",
        ErrorCode::InvalidInput,
        "PRAGMA database_list is not allowed",
    ),
    (
        Query,
        "PRAGMA writable_schema = 1",
        ErrorCode::InvalidInput,
        "PRAGMA writable_schema is not allowed",
    ),
    // Other tables outside the allow-list.
    (
        Query,
        "SELECT * FROM adf_attestations",
        ErrorCode::InvalidInput,
        "adf_attestations is not readable",
    ),
    (
        Query,
        "SELECT * FROM dbstat",
        ErrorCode::InvalidInput,
        "dbstat is not readable",
    ),
    // Functions and statements that are not a read.
    (
        Query,
        "SELECT load_extension('/tmp/evil')",
        ErrorCode::InvalidInput,
        "load_extension() is not allowed",
    ),
    (
        Query,
        "INSERT INTO local_t (v) VALUES ('x')",
        ErrorCode::WriteError,
        "db_query runs one read-only statement",
    ),
    (
        Query,
        "DELETE FROM local_t",
        ErrorCode::WriteError,
        "db_query runs one read-only statement",
    ),
    (
        Query,
        "BEGIN",
        ErrorCode::InvalidInput,
        "transaction statement",
    ),
    // More than one statement.
    (
        Query,
        "SELECT 1; DELETE FROM adf_logs",
        ErrorCode::InvalidInput,
        "one statement per call",
    ),
    (
        Query,
        "SELECT * FROM local_t; SELECT * FROM local_t",
        ErrorCode::InvalidInput,
        "one statement per call",
    ),
    (
        Execute,
        "INSERT INTO local_t (v) VALUES ('c'); DELETE FROM adf_logs",
        ErrorCode::InvalidInput,
        "one statement per call",
    ),
    (
        Execute,
        "INSERT INTO local_t (v) VALUES ('c');/* */ INSERT INTO local_t (v) VALUES ('d')",
        ErrorCode::InvalidInput,
        "one statement per call",
    ),
    // Writes to system tables in disguise.
    (
        Execute,
        "/* local_t */ DELETE FROM adf_logs",
        ErrorCode::WriteError,
        "adf_logs is a system table",
    ),
    (
        Execute,
        "DELETE FROM \"ADF_LOGS\"",
        ErrorCode::WriteError,
        "adf_logs is a system table",
    ),
    (
        Execute,
        "DELETE FROM main.adf_logs",
        ErrorCode::WriteError,
        "adf_logs is a system table",
    ),
    (
        Execute,
        "WITH x AS (SELECT 1) DELETE FROM adf_logs WHERE 1 IN x",
        ErrorCode::WriteError,
        "adf_logs is a system table",
    ),
    (
        Execute,
        "REPLACE INTO adf_meta (key, value, protection) VALUES ('adf_name', 'x', 'none')",
        ErrorCode::WriteError,
        "adf_meta is a system table",
    ),
    (
        Execute,
        "INSERT OR REPLACE INTO adf_config (id, config_json, updated_at) VALUES (1, '{}', 0)",
        ErrorCode::WriteError,
        "adf_config is a system table",
    ),
    (
        Execute,
        "UPDATE adf_files SET content = 'x'",
        ErrorCode::WriteError,
        "adf_files is a system table",
    ),
    (
        Execute,
        "UPDATE adf_identity SET value = x''",
        ErrorCode::WriteError,
        "adf_identity is a system table",
    ),
    // Secret data smuggled into a local table.
    (
        Execute,
        "INSERT INTO local_t (v) SELECT value FROM adf_identity",
        ErrorCode::InvalidInput,
        "adf_identity is not readable",
    ),
    (
        Execute,
        "UPDATE local_t SET v = (SELECT value FROM adf_meta LIMIT 1)",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Execute,
        "INSERT INTO local_t (v) VALUES ((SELECT config_json FROM adf_config))",
        ErrorCode::InvalidInput,
        "adf_config is not readable",
    ),
    (
        Execute,
        "CREATE TABLE local_copy AS SELECT * FROM adf_meta",
        ErrorCode::InvalidInput,
        "adf_meta is not readable",
    ),
    (
        Execute,
        "CREATE TABLE local_cols AS SELECT * FROM pragma_table_info('adf_identity')",
        ErrorCode::InvalidInput,
        "adf_identity is not readable",
    ),
    (
        Execute,
        "INSERT INTO local_t (v) VALUES (load_extension('/tmp/evil'))",
        ErrorCode::WriteError,
        "load_extension() is not allowed",
    ),
    // Views, triggers and temp objects that would run later without the policy.
    (
        Execute,
        "CREATE VIEW local_v AS SELECT * FROM adf_meta",
        ErrorCode::WriteError,
        "CREATE VIEW is not allowed",
    ),
    (
        Execute,
        "CREATE TRIGGER local_tr AFTER INSERT ON local_t BEGIN DELETE FROM adf_logs; END",
        ErrorCode::WriteError,
        "CREATE TRIGGER is not allowed",
    ),
    (
        Execute,
        "CREATE TRIGGER local_tr AFTER INSERT ON adf_logs BEGIN INSERT INTO local_t (v) VALUES ('x'); END",
        ErrorCode::WriteError,
        "CREATE TRIGGER is not allowed",
    ),
    (
        Execute,
        "CREATE TEMP TRIGGER local_tt AFTER INSERT ON adf_files BEGIN SELECT 1; END",
        ErrorCode::WriteError,
        "CREATE TRIGGER is not allowed",
    ),
    (
        Execute,
        "CREATE TEMP TABLE local_tmp (x)",
        ErrorCode::WriteError,
        "TEMP object",
    ),
    // The database itself.
    (
        Execute,
        "ATTACH DATABASE 'file:/tmp/adf-db-attack.db' AS x",
        ErrorCode::WriteError,
        "ATTACH is not allowed",
    ),
    (
        Execute,
        "DETACH DATABASE main",
        ErrorCode::WriteError,
        "DETACH is not allowed",
    ),
    (
        Execute,
        "PRAGMA writable_schema = ON",
        ErrorCode::WriteError,
        "PRAGMA writable_schema is not allowed",
    ),
    (
        Execute,
        "PRAGMA foreign_keys = OFF",
        ErrorCode::WriteError,
        "PRAGMA foreign_keys is not allowed",
    ),
    (
        Execute,
        "UPDATE sqlite_master SET sql = '' WHERE name = 'adf_meta'",
        ErrorCode::InvalidInput,
        "sqlite_master may not be modified",
    ),
    (
        Execute,
        "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES ('table', 'x', 'x', 0, '')",
        ErrorCode::InvalidInput,
        "sqlite_master may not be modified",
    ),
    (
        Execute,
        "DELETE FROM sqlite_sequence",
        ErrorCode::WriteError,
        "sqlite_sequence is a system table",
    ),
    (
        Execute,
        "VACUUM",
        ErrorCode::WriteError,
        "db_execute runs INSERT",
    ),
    (
        Execute,
        "REINDEX",
        ErrorCode::WriteError,
        "REINDEX is not allowed",
    ),
    (Execute, "ANALYZE", ErrorCode::WriteError, "sqlite_stat1"),
    (
        Execute,
        "ANALYZE local_t",
        ErrorCode::WriteError,
        "sqlite_stat1",
    ),
    (
        Execute,
        "COMMIT",
        ErrorCode::WriteError,
        "transaction statement",
    ),
    (
        Execute,
        "RELEASE adf_atomic",
        ErrorCode::WriteError,
        "SAVEPOINT/RELEASE",
    ),
    (
        Execute,
        "SELECT 1",
        ErrorCode::WriteError,
        "use db_query to read",
    ),
    // Schema changes that reach system tables.
    (
        Execute,
        "CREATE TABLE foo (x)",
        ErrorCode::WriteError,
        "must be named local_*",
    ),
    (
        Execute,
        "CREATE INDEX local_i ON adf_files (path)",
        ErrorCode::WriteError,
        "adf_files is a system table",
    ),
    (
        Execute,
        "DROP INDEX idx_adf_loop_loop_seq",
        ErrorCode::WriteError,
        "adf_loop is a system table",
    ),
    (
        Execute,
        "ALTER TABLE local_t RENAME TO adf_evil",
        ErrorCode::WriteError,
        "ALTER TABLE is not allowed",
    ),
    (
        Execute,
        "CREATE TABLE local_fk (k TEXT REFERENCES adf_meta (key))",
        ErrorCode::WriteError,
        "foreign key to adf_meta",
    ),
    // vec0 and other virtual table tricks.
    (
        Execute,
        "CREATE VIRTUAL TABLE adf_x USING vec0(embedding float[3])",
        ErrorCode::WriteError,
        "must be named local_*",
    ),
    (
        Execute,
        "CREATE VIRTUAL TABLE local_s USING dbstat",
        ErrorCode::WriteError,
        "dbstat are not allowed",
    ),
    (
        Execute,
        "INSERT INTO local_e_rowids (rowid) VALUES (99)",
        ErrorCode::InvalidInput,
        "may not be modified",
    ),
    (
        Execute,
        "UPDATE local_e_chunks SET size = 0",
        ErrorCode::InvalidInput,
        "may not be modified",
    ),
    (
        Execute,
        "DROP TABLE local_e_chunks",
        ErrorCode::InvalidInput,
        "may not be dropped",
    ),
];

/// Every statement form against every system table of `file` (as its schema lists them, which
/// the model may read): none of them may change it.
fn writes_to_every_system_table(file: &mut AdfFile) -> Vec<String> {
    let listed = model_query(
        file,
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'adf\\_%' ESCAPE '\\'",
    )
    .unwrap();
    let tables: Vec<String> = listed["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(tables.len() >= 12, "the twelve system tables: {tables:?}");
    tables
        .iter()
        .flat_map(|t| {
            [
                format!("INSERT INTO {t} DEFAULT VALUES"),
                format!("UPDATE {t} SET rowid = rowid"),
                format!("DELETE FROM {t}"),
                format!("DROP TABLE {t}"),
                format!("ALTER TABLE {t} ADD COLUMN evil TEXT"),
                format!("ALTER TABLE {t} RENAME TO local_{t}"),
            ]
        })
        .collect()
}

#[test]
fn tol_26_tol_29_met_22_sto_23_hostile_sql_is_refused_and_leaves_the_file_unchanged() {
    let (dir, _path, mut file) = agent();
    let before = digest(&file);
    let mut attempts = 0;
    for caller in [model(), code(), authorized()] {
        for (tool, sql, code, fragment) in HOSTILE {
            let result = match tool {
                Query => query(&mut file, &caller, sql, json!([])),
                Execute => exec(&mut file, &caller, sql, json!([])),
            };
            let error = result.expect_err(&format!("{caller:?} {tool:?} `{sql}` must be refused"));
            assert_eq!(
                (error.code, error.message.contains(fragment)),
                (*code, true),
                "{tool:?} `{sql}` as {caller:?}: {error}"
            );
            assert!(
                error.protection.is_none(),
                "`{sql}`: not an approvable protection"
            );
            assert_eq!(digest(&file), before, "{tool:?} `{sql}` changed the file");
            attempts += 1;
        }
        for sql in writes_to_every_system_table(&mut file) {
            let error = exec(&mut file, &caller, &sql, json!([])).expect_err(&sql);
            // Refused as a write, or earlier as a read of a table the statement also reads.
            assert!(
                matches!(error.code, ErrorCode::WriteError | ErrorCode::InvalidInput)
                    && (error.message.contains("system table")
                        || error.message.contains("not readable")
                        || error.message.contains("ALTER TABLE is not allowed")),
                "`{sql}` as {caller:?}: {error}"
            );
            assert_eq!(digest(&file), before, "`{sql}` changed the file");
            attempts += 1;
        }
    }
    assert!(HOSTILE.len() >= 40, "at least 40 distinct attacks");
    assert!(attempts >= 3 * (HOSTILE.len() + 72));
    // ATTACH into this test's own directory: refused, and nothing is created there.
    let attached = dir.path().join("attack.db");
    let sql = format!("ATTACH DATABASE 'file:{}' AS x", attached.display());
    let error = exec(&mut file, &code(), &sql, json!([])).unwrap_err();
    assert_eq!(error.code, ErrorCode::WriteError, "{error}");
    assert!(error.message.contains("ATTACH is not allowed"), "{error}");
    assert!(!attached.exists());
    assert_eq!(digest(&file), before);

    // VACUUM INTO would copy every table, secrets included, to a file of the agent's choosing.
    let target = dir.path().join("copy.db");
    let sql = format!("VACUUM INTO '{}'", target.display());
    let error = exec(&mut file, &code(), &sql, json!([])).unwrap_err();
    assert_eq!(error.code, ErrorCode::WriteError, "{error}");
    assert!(!target.exists());
    assert_eq!(digest(&file), before);
}

#[test]
fn met_22_secret_tables_are_not_readable_by_any_caller() {
    let (_dir, _path, mut file) = agent();
    for caller in [model(), code(), authorized(), ToolCaller::Owner] {
        for table in ["adf_meta", "adf_config", "adf_identity"] {
            let error = query(
                &mut file,
                &caller,
                &format!("SELECT * FROM {table}"),
                json!([]),
            )
            .unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidInput);
            assert!(
                error.message.contains(&format!("{table} is not readable")),
                "{error}"
            );
        }
    }
}

#[test]
fn tol_26_db_query_reads_local_and_listed_system_tables() {
    let (_dir, _path, mut file) = agent();
    for table in [
        "local_t",
        "adf_loop",
        "adf_inbox",
        "adf_outbox",
        "adf_timers",
        "adf_files",
        "adf_audit",
        "adf_logs",
        "adf_tasks",
    ] {
        let result = query(
            &mut file,
            &model(),
            &format!("SELECT * FROM {table}"),
            json!([]),
        )
        .unwrap_or_else(|e| panic!("{table}: {e}"));
        assert_eq!(result["truncated"], json!(false), "{table}");
    }
    let result = model_query(&mut file, "SELECT id, v FROM local_t ORDER BY id").unwrap();
    assert_eq!(
        result,
        json!({
            "columns": ["id", "v"],
            "row_count": 2,
            "total_rows": 2,
            "truncated": false,
            "rows": [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}],
        })
    );
    // The core files are there to read (adf_files is readable).
    let files = query(
        &mut file,
        &code(),
        "SELECT path FROM adf_files WHERE path = 'mind.md'",
        json!([]),
    )
    .unwrap();
    assert_eq!(files["rows"], json!([{"path": "mind.md"}]));

    // The schema is visible (names and DDL), the data of secret tables is not.
    let schema = model_query(
        &mut file,
        "SELECT name FROM sqlite_master WHERE name IN ('adf_meta', 'local_t') ORDER BY name",
    )
    .unwrap();
    assert_eq!(
        schema["rows"],
        json!([{"name": "adf_meta"}, {"name": "local_t"}])
    );
    let columns = model_query(&mut file, "SELECT name FROM pragma_table_info('local_t')").unwrap();
    assert_eq!(columns["rows"], json!([{"name": "id"}, {"name": "v"}]));

    // A trailing semicolon and comment are not a second statement.
    let trailing = model_query(&mut file, "SELECT 1 AS x; -- done\n").unwrap();
    assert_eq!(trailing["rows"], json!([{"x": 1}]));

    // Recursive CTEs, VALUES and table-valued JSON functions are reads too.
    let values = model_query(&mut file, "VALUES (1, 'x')").unwrap();
    assert_eq!(values["rows"], json!([{"column1": 1, "column2": "x"}]));
    let series = model_query(&mut file, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3) SELECT sum(x) AS s FROM c")
    .unwrap();
    assert_eq!(series["rows"], json!([{"s": 6}]));
    let each = model_query(&mut file, "SELECT value FROM json_each('[7, 8]')").unwrap();
    assert_eq!(each["rows"], json!([{"value": 7}, {"value": 8}]));

    // A repeated column name keeps both values.
    let joined = model_query(
        &mut file,
        "SELECT a.id, b.id FROM local_t a JOIN local_t b ON b.id = a.id + 1",
    )
    .unwrap();
    assert_eq!(joined["columns"], json!(["id", "id:2"]));
    assert_eq!(joined["rows"], json!([{"id": 1, "id:2": 2}]));

    // A write through db_query is refused.
    let error = model_query(&mut file, "UPDATE local_t SET v = 'z'").unwrap_err();
    assert_eq!(error.code, ErrorCode::WriteError);
}

#[test]
fn tol_27_db_query_caps_at_500_rows_with_a_footer_and_full_returns_all() {
    let (_dir, _path, mut file) = agent();
    exec(
        &mut file,
        &code(),
        "CREATE TABLE local_n (n INTEGER)",
        json!([]),
    )
    .unwrap();
    let inserted = exec(
        &mut file,
        &code(),
        "INSERT INTO local_n (n) WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 600) SELECT x FROM c",
        json!([]),
    )
    .unwrap();
    assert_eq!(inserted["changes"], json!(600));

    let sql = json!({ "sql": "SELECT n FROM local_n ORDER BY n", "_full": true });
    // The model never gets _full: its results stay capped.
    let capped = call(&mut file, &model(), "db_query", sql.clone()).unwrap();
    assert_eq!(capped["row_count"], json!(500));
    assert_eq!(capped["total_rows"], json!(600));
    assert_eq!(capped["truncated"], json!(true));
    assert_eq!(capped["rows"].as_array().unwrap().len(), 500);
    assert_eq!(capped["rows"][499], json!({"n": 500}));
    assert_eq!(
        capped["footer"],
        json!(
            "Showing 500 of 600 rows. Add LIMIT/OFFSET to read the rest, or pass _full: true from code."
        )
    );

    let code_capped = query(&mut file, &code(), "SELECT n FROM local_n", json!([])).unwrap();
    assert_eq!(code_capped["row_count"], json!(500));

    let full = call(&mut file, &code(), "db_query", sql).unwrap();
    assert_eq!(full["row_count"], json!(600));
    assert_eq!(full["truncated"], json!(false));
    assert_eq!(full["rows"][599], json!({"n": 600}));
    assert!(full.get("footer").is_none());

    // Exactly 500 rows is not truncated.
    let exact = model_query(&mut file, "SELECT n FROM local_n LIMIT 500").unwrap();
    assert_eq!(
        (exact["row_count"].clone(), exact["truncated"].clone()),
        (json!(500), json!(false))
    );
}

#[test]
fn tol_28_params_bind_positionally() {
    let (_dir, _path, mut file) = agent();
    model_exec(
        &mut file,
        "CREATE TABLE local_p (a TEXT, b INTEGER, c REAL, d BLOB, e TEXT, f INTEGER)",
    )
    .unwrap();
    let inserted = exec(
        &mut file,
        &model(),
        "INSERT INTO local_p VALUES (?, ?, ?, ?, ?, ?)",
        json!(["x'); DROP TABLE local_t; --", 42, 1.5, {"$blob": "AAEC"}, {"k": [1]}, true]),
    )
    .unwrap();
    assert_eq!(inserted, json!({"changes": 1, "last_insert_rowid": 1}));

    let rows = query(
        &mut file,
        &code(),
        "SELECT * FROM local_p WHERE b = ?1 AND f = ?2",
        json!([42, 1]),
    )
    .unwrap();
    assert_eq!(
        rows["rows"],
        json!([{
            "a": "x'); DROP TABLE local_t; --",
            "b": 42,
            "c": 1.5,
            "d": {"$blob": "AAEC"},
            "e": "{\"k\":[1]}",
            "f": 1
        }])
    );
    // The model sees a BLOB's size, not its bytes.
    let for_model = model_query(&mut file, "SELECT d FROM local_p").unwrap();
    assert_eq!(for_model["rows"], json!([{"d": {"$blob_bytes": 3}}]));
    // local_t survived the string that looked like SQL.
    let count = model_query(&mut file, "SELECT count(*) AS n FROM local_t").unwrap();
    assert_eq!(count["rows"], json!([{"n": 2}]));

    let before = digest(&file);
    let error = model_query(&mut file, "SELECT * FROM local_p WHERE a = ?").unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert!(error.message.contains("1 parameter(s) but 0"), "{error}");
    let error = exec(
        &mut file,
        &model(),
        "INSERT INTO local_p (a) VALUES (?)",
        json!(["x", "y"]),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    let error = exec(
        &mut file,
        &model(),
        "INSERT INTO local_p (d) VALUES (?)",
        json!([{"$blob": "%%"}]),
    )
    .unwrap_err();
    assert!(error.message.contains("params[0]"), "{error}");
    let error = call(
        &mut file,
        &model(),
        "db_query",
        json!({"sql": "SELECT 1", "params": "x"}),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert_eq!(digest(&file), before);
}

#[test]
fn tol_29_sto_24_db_execute_writes_local_tables_only() {
    let (_dir, _path, mut file) = agent();
    let created = model_exec(&mut file, "CREATE TABLE local_foo (x INTEGER)").unwrap();
    assert_eq!(created["changes"], json!(0));
    let inserted = model_exec(&mut file, "INSERT INTO local_foo (x) VALUES (1), (2), (3)").unwrap();
    assert_eq!(inserted, json!({"changes": 3, "last_insert_rowid": 3}));
    let updated = model_exec(&mut file, "UPDATE local_foo SET x = x * 10 WHERE x > 1").unwrap();
    assert_eq!(updated["changes"], json!(2));
    let deleted = model_exec(&mut file, "DELETE FROM local_foo WHERE x = 1").unwrap();
    assert_eq!(deleted["changes"], json!(1));
    model_exec(&mut file, "CREATE INDEX local_foo_x ON local_foo (x)").unwrap();
    model_exec(&mut file, "DROP INDEX local_foo_x").unwrap();
    model_exec(
        &mut file,
        "CREATE TABLE IF NOT EXISTS local_foo (x INTEGER)",
    )
    .unwrap();
    let returning = model_exec(
        &mut file,
        "INSERT INTO local_foo (x) VALUES (7) RETURNING x",
    )
    .unwrap();
    assert_eq!(returning["changes"], json!(1));
    // A local table that references another local table is fine.
    model_exec(
        &mut file,
        "CREATE TABLE local_child (t INTEGER REFERENCES local_t (id))",
    )
    .unwrap();
    model_exec(&mut file, "DROP TABLE local_child").unwrap();
    // Dropping an AUTOINCREMENT table also drops its counter.
    model_exec(&mut file, "DROP TABLE local_t").unwrap();
    let gone = model_query(
        &mut file,
        "SELECT count(*) AS n FROM sqlite_sequence WHERE name = 'local_t'",
    )
    .unwrap();
    assert_eq!(gone["rows"], json!([{"n": 0}]));

    let before = digest(&file);
    let error = model_exec(&mut file, "CREATE TABLE foo (x)").unwrap_err();
    assert_eq!(error.code, ErrorCode::WriteError);
    let error = model_exec(&mut file, "UPDATE adf_files SET content = 'x'").unwrap_err();
    assert_eq!(error.code, ErrorCode::WriteError);
    assert_eq!(digest(&file), before);
}

#[test]
fn sto_23_aud_11_system_tables_cannot_be_written_dropped_or_altered() {
    let (_dir, _path, mut file) = agent();
    let before = digest(&file);
    for sql in [
        "DELETE FROM adf_logs",
        "DROP TABLE adf_meta",
        "ALTER TABLE adf_files ADD COLUMN x TEXT",
        "DELETE FROM adf_audit",
        "UPDATE adf_audit SET data = x''",
    ] {
        for caller in [model(), authorized(), ToolCaller::Owner] {
            let error = exec(&mut file, &caller, sql, json!([])).unwrap_err();
            assert_eq!(error.code, ErrorCode::WriteError, "{sql}: {error}");
        }
    }
    assert_eq!(digest(&file), before);
}

#[test]
fn db_execute_failure_mid_statement_leaves_the_file_unchanged() {
    let (_dir, _path, mut file) = agent();
    let before = digest(&file);
    // The third row violates UNIQUE(v): the two before it must not stay.
    let error = model_exec(
        &mut file,
        "INSERT INTO local_t (v) VALUES ('c'), ('d'), ('a')",
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::ToolError);
    assert!(error.message.contains("UNIQUE"), "{error}");
    let error = model_exec(&mut file, "INSERT INTO local_missing VALUES (1)").unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert!(error.message.contains("no such table"), "{error}");
    let error = model_exec(&mut file, "INSERT INTO").unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    let error = model_exec(&mut file, "  -- nothing\n").unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert_eq!(digest(&file), before);
}

fn protect(file: &mut AdfFile, table: &str, level: &str) {
    set_config(
        file,
        &format!("security.table_protections.{table}"),
        json!(level),
    );
}

#[test]
fn tol_30_table_protections_append_only() {
    let (_dir, _path, mut file) = agent();
    exec(
        &mut file,
        &code(),
        "CREATE TABLE local_ledger (id INTEGER PRIMARY KEY, entry TEXT)",
        json!([]),
    )
    .unwrap();
    protect(&mut file, "local_ledger", "append_only");
    for caller in [model(), code(), authorized()] {
        exec(
            &mut file,
            &caller,
            "INSERT INTO local_ledger (entry) VALUES ('x')",
            json!([]),
        )
        .unwrap();
    }
    let before = digest(&file);
    for caller in [model(), code(), authorized()] {
        for sql in [
            "UPDATE local_ledger SET entry = 'y'",
            "DELETE FROM local_ledger",
            "DROP TABLE local_ledger",
            "REPLACE INTO local_ledger (id, entry) VALUES (1, 'rewritten')",
            "INSERT OR REPLACE INTO local_ledger (id, entry) VALUES (1, 'rewritten')",
            "INSERT INTO local_ledger (id, entry) VALUES (1, 'y') ON CONFLICT (id) DO UPDATE SET entry = 'y'",
        ] {
            let error = exec(&mut file, &caller, sql, json!([])).unwrap_err();
            assert_eq!(
                error.code,
                ErrorCode::WriteError,
                "{sql} as {caller:?}: {error}"
            );
            assert!(error.message.contains("append_only"), "{error}");
            assert!(error.protection.is_none());
            assert_eq!(digest(&file), before, "{sql}");
        }
    }
    // INSERT OR IGNORE keeps history and is allowed; the owner is not bound.
    model_exec(
        &mut file,
        "INSERT OR IGNORE INTO local_ledger (id, entry) VALUES (1, 'dup')",
    )
    .unwrap();
    exec(
        &mut file,
        &ToolCaller::Owner,
        "UPDATE local_ledger SET entry = 'fixed' WHERE id = 1",
        json!([]),
    )
    .unwrap();
    // An unlisted table stays writable.
    model_exec(&mut file, "DELETE FROM local_t").unwrap();
}

#[test]
fn tol_30_table_protections_authorized() {
    let (_dir, _path, mut file) = agent();
    protect(&mut file, "local_secret", "authorized");
    // CREATE is the one write open to everyone.
    model_exec(
        &mut file,
        "CREATE TABLE local_secret (k TEXT PRIMARY KEY, v TEXT)",
    )
    .unwrap();
    model_exec(&mut file, "CREATE INDEX local_secret_v ON local_secret (v)").unwrap();
    let before = digest(&file);
    for caller in [model(), code()] {
        for sql in [
            "INSERT INTO local_secret (k, v) VALUES ('a', '1')",
            "UPDATE local_secret SET v = '2'",
            "DELETE FROM local_secret",
            "DROP TABLE local_secret",
        ] {
            let error = exec(&mut file, &caller, sql, json!([])).unwrap_err();
            assert_eq!(
                error.code,
                ErrorCode::RequiresAuthorizedCode,
                "{sql}: {error}"
            );
            assert_eq!(digest(&file), before, "{sql}");
        }
    }
    // Reading stays open.
    model_query(&mut file, "SELECT * FROM local_secret").unwrap();

    let logs_before = bypass_logs(&mut file);
    exec(
        &mut file,
        &authorized(),
        "INSERT INTO local_secret (k, v) VALUES ('a', '1')",
        json!([]),
    )
    .unwrap();
    exec(
        &mut file,
        &authorized(),
        "UPDATE local_secret SET v = '2'",
        json!([]),
    )
    .unwrap();
    assert_eq!(
        bypass_logs(&mut file),
        logs_before + 2,
        "each bypass is logged"
    );
    exec(
        &mut file,
        &ToolCaller::Owner,
        "DELETE FROM local_secret",
        json!([]),
    )
    .unwrap();
    exec(
        &mut file,
        &authorized(),
        "DROP TABLE local_secret",
        json!([]),
    )
    .unwrap();
}

fn bypass_logs(file: &mut AdfFile) -> i64 {
    let result = query(
        file,
        &code(),
        "SELECT count(*) AS n FROM adf_logs WHERE origin = 'protection' AND event = 'bypass' AND target = 'local_secret'",
        json!([]),
    )
    .unwrap();
    result["rows"][0]["n"].as_i64().unwrap()
}

#[test]
fn sto_25_vec0_create_insert_and_knn_query_through_the_tools() {
    let (_dir, _path, mut file) = new_agent();
    enable(&mut file, "db_execute");
    model_exec(
        &mut file,
        "CREATE VIRTUAL TABLE local_docs USING vec0(embedding float[3])",
    )
    .unwrap();
    for (id, vector) in [
        (1, json!([1.0, 0.0, 0.0])),
        (2, json!([0.0, 1.0, 0.0])),
        (3, json!([0.9, 0.1, 0.0])),
    ] {
        let inserted = exec(
            &mut file,
            &model(),
            "INSERT INTO local_docs (rowid, embedding) VALUES (?, ?)",
            json!([id, vector]),
        )
        .unwrap();
        assert_eq!(inserted["changes"], json!(1));
    }
    let nearest = query(
        &mut file,
        &model(),
        "SELECT rowid FROM local_docs WHERE embedding MATCH ? AND k = 2 ORDER BY distance",
        json!([[1.0, 0.0, 0.0]]),
    )
    .unwrap();
    assert_eq!(nearest["rows"], json!([{"rowid": 1}, {"rowid": 3}]));
    // The extension maintains its shadow tables itself; deleting through the table works.
    let deleted = model_exec(&mut file, "DELETE FROM local_docs WHERE rowid = 1").unwrap();
    assert_eq!(deleted["changes"], json!(1));
    let nearest = query(
        &mut file,
        &model(),
        "SELECT rowid FROM local_docs WHERE embedding MATCH ? AND k = 1",
        json!([[1.0, 0.0, 0.0]]),
    )
    .unwrap();
    assert_eq!(nearest["rows"], json!([{"rowid": 3}]));
    model_exec(&mut file, "DROP TABLE local_docs").unwrap();
    let left = model_query(
        &mut file,
        "SELECT count(*) AS n FROM sqlite_master WHERE name LIKE 'local_docs%'",
    )
    .unwrap();
    assert_eq!(left["rows"], json!([{"n": 0}]));
}

#[test]
fn tol_26_a_runaway_statement_is_interrupted_by_the_execution_timeout() {
    let (_dir, _path, mut file) = agent();
    set_config(&mut file, "limits.execution_timeout_ms", json!(200));
    let error = query(
        &mut file,
        &code(),
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c",
        json!([]),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::Timeout, "{error}");
    // The connection is usable again, with the policy gone from it.
    let rows = query(
        &mut file,
        &code(),
        "SELECT count(*) AS n FROM local_t",
        json!([]),
    )
    .unwrap();
    assert_eq!(rows["rows"], json!([{"n": 2}]));
    assert!(
        file.meta_get("adf_name").unwrap().is_some(),
        "the store reads adf_meta as before"
    );
}

#[test]
fn met_22_a_local_full_text_index_over_adf_meta_still_cannot_read_it() {
    let (_dir, _path, mut file) = agent();
    // Creating an external-content index reads nothing; every later read of the content table
    // happens inside a policed statement and is refused there.
    model_exec(
        &mut file,
        "CREATE VIRTUAL TABLE local_f USING fts5(value, content='adf_meta')",
    )
    .unwrap();
    let before = digest(&file);
    let error = model_query(&mut file, "SELECT value FROM local_f").unwrap_err();
    assert!(
        error.message.contains("adf_meta is not readable"),
        "{error}"
    );
    let error = model_exec(
        &mut file,
        "INSERT INTO local_f (local_f) VALUES ('rebuild')",
    )
    .unwrap_err();
    assert!(
        error.message.contains("adf_meta is not readable"),
        "{error}"
    );
    assert_eq!(digest(&file), before);
    // An ordinary full-text table works.
    model_exec(
        &mut file,
        "CREATE VIRTUAL TABLE local_notes USING fts5(body)",
    )
    .unwrap();
    model_exec(
        &mut file,
        "INSERT INTO local_notes (body) VALUES ('the quick brown fox'), ('lazy dog')",
    )
    .unwrap();
    let hits = model_query(
        &mut file,
        "SELECT body FROM local_notes WHERE local_notes MATCH 'fox'",
    )
    .unwrap();
    assert_eq!(hits["rows"], json!([{"body": "the quick brown fox"}]));
}

#[test]
fn tol_29_a_runaway_write_is_interrupted_and_nothing_is_kept() {
    let (_dir, _path, mut file) = agent();
    set_config(&mut file, "limits.execution_timeout_ms", json!(200));
    let runaway = "INSERT INTO local_t (v) WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT 'r' || x FROM c";
    let before = digest(&file);

    // The store call on its own reports the timeout; SQLite rolled back everything it wrote.
    let limits = SqlLimits {
        max_rows: None,
        timeout: Some(Duration::from_millis(200)),
        ..SqlLimits::default()
    };
    let error = file
        .sql_execute(adf_store::Caller::Agent, runaway, &[], &limits)
        .unwrap_err();
    assert!(matches!(error, SqlError::Timeout(_)), "{error}");
    assert_eq!(digest(&file), before);

    // Through the tool the call fails as a timeout and keeps nothing, although the interrupted
    // write ended every enclosing transaction, the pipeline's savepoint included.
    let error = exec(&mut file, &code(), runaway, json!([])).unwrap_err();
    assert_eq!(error.code, ErrorCode::Timeout, "{error}");
    assert_eq!(digest(&file), before);
    // The next call works normally and its effect is kept.
    exec(
        &mut file,
        &code(),
        "INSERT INTO local_t (v) VALUES ('after')",
        json!([]),
    )
    .unwrap();
    let rows = query(
        &mut file,
        &code(),
        "SELECT count(*) AS n FROM local_t",
        json!([]),
    )
    .unwrap();
    assert_eq!(rows["rows"], json!([{"n": 3}]));
}

/// The file's bytes, and whether a sidecar is left beside it.
fn bytes_and_sidecars(path: &std::path::Path) -> (Vec<u8>, bool) {
    let sidecars = ["-wal", "-shm"]
        .iter()
        .any(|suffix| adf_store::sidecar(path, suffix).exists());
    (std::fs::read(path).unwrap(), sidecars)
}

#[test]
fn model_sql_past_the_agent_limits_is_a_clear_error_and_the_file_stays_byte_identical() {
    let (_dir, path, file) = agent();
    file.close().unwrap();
    let before = bytes_and_sidecars(&path);
    assert!(!before.1);
    let refused: [(&str, &str, &str); 6] = [
        (
            "db_query",
            "SELECT randomblob(999999999), randomblob(999999999), randomblob(999999999)",
            "SQLITE_LIMIT_LENGTH",
        ),
        (
            "db_execute",
            "INSERT INTO local_t (v) VALUES (zeroblob(999999999))",
            "SQLITE_LIMIT_LENGTH",
        ),
        ("db_execute", "DELETE FROM adf_meta", "adf_meta"),
        ("db_query", "SELECT * FROM adf_identity", "adf_identity"),
        (
            "db_query",
            "SELECT 1 FROM local_t WHERE v LIKE ?1",
            "parameter",
        ),
        (
            "db_execute",
            "INSERT INTO local_t (v) VALUES ('a')",
            "UNIQUE",
        ),
    ];
    for (tool, sql, fragment) in refused {
        let mut file = AdfFile::open(&path).unwrap();
        let error = call(&mut file, &model(), tool, json!({ "sql": sql })).unwrap_err();
        assert!(error.message.contains(fragment), "{sql}: {error}");
        file.close().unwrap();
        assert!(
            bytes_and_sidecars(&path) == before,
            "{sql}: the file changed"
        );
    }
    // Bad arguments never reach SQLite, and leave the file as it was too.
    let mut file = AdfFile::open(&path).unwrap();
    let error = call(&mut file, &model(), "db_query", json!({ "sql": 5 })).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    file.close().unwrap();
    assert!(
        bytes_and_sidecars(&path) == before,
        "bad args: the file changed"
    );
}

#[test]
fn refused_tool_calls_leave_a_cleanly_closed_file_byte_identical() {
    let (_dir, path, mut file) = agent();
    file.meta_set(
        adf_store::Caller::Owner,
        "pinned",
        "1",
        Some(adf_store::MetaProtection::Readonly),
    )
    .unwrap();
    file.close().unwrap();
    let before = bytes_and_sidecars(&path);
    let deep_path = vec!["a"; 130].join(".");
    // sys_update_config is restricted: the model's call becomes an approval request, a
    // recorded task even when denied, so its bad input is sent by authorized code instead.
    let refused: Vec<(ToolCaller, &str, Value)> = vec![
        (
            model(),
            "sys_set_meta",
            json!({ "key": "adf_did", "value": "did:key:x" }),
        ),
        (model(), "sys_set_meta", json!({ "key": "" })),
        (model(), "sys_delete_meta", json!({ "key": "adf_name" })),
        (model(), "sys_delete_meta", json!({ "key": "missing" })),
        (
            authorized(),
            "sys_update_config",
            json!({ "path": "model.temperature", "value": 99 }),
        ),
        (
            authorized(),
            "sys_update_config",
            json!({ "path": deep_path, "value": 1 }),
        ),
        (
            authorized(),
            "sys_update_config",
            json!({ "path": "id", "value": "x" }),
        ),
        (
            model(),
            "fs_write",
            json!({ "path": "../escape.md", "content": "x" }),
        ),
        (model(), "fs_delete", json!({ "path": "missing.md" })),
        (model(), "no_such_tool", json!({})),
        (
            model(),
            "db_query",
            json!({ "sql": "SELECT * FROM adf_meta" }),
        ),
        (
            model(),
            "db_query",
            json!({ "sql": "SELECT 1", "extra": true }),
        ),
    ];
    for (caller, tool, args) in refused {
        let mut file = AdfFile::open(&path).unwrap();
        let outcome = call(&mut file, &caller, tool, args.clone());
        assert!(outcome.is_err(), "{tool} {args}: {outcome:?}");
        file.close().unwrap();
        assert!(
            bytes_and_sidecars(&path) == before,
            "{tool} {args}: the file changed"
        );
    }
}
