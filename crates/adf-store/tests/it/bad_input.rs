//! Bad input never breaks or changes a file: every refused write leaves the file
//! byte-identical (no clean-close marker removed and re-stamped, no sidecars), configs cannot
//! be written deeper than a parser reads them back, and damaged files are reported, not fatal.
use std::path::Path;

use crate::common;

use adf_store::config_depth::MAX_CONFIG_DEPTH;
use adf_store::messages::{Mailbox, MessageFilter};
use adf_store::sql::{SqlError, SqlLimits, SqlValue};
use adf_store::tables::NewLoopRow;
use adf_store::{
    AdfFile, Caller, ConfigAction, FileProtection, FileWrite, MetaProtection, StoreError,
};
use serde_json::{Value, json};

/// A cleanly closed file with a read-only file, a no-delete file and a readonly user key.
fn closed_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let (dir, path, mut file) = common::new_file("refusals");
    file.file_write(
        Caller::Owner,
        "locked.md",
        b"keep",
        &FileWrite {
            mime_type: None,
            protection_if_new: Some(FileProtection::ReadOnly),
        },
    )
    .unwrap();
    file.meta_set(Caller::Owner, "pinned", "1", Some(MetaProtection::Readonly))
        .unwrap();
    file.meta_set(
        Caller::Owner,
        "counter",
        "5",
        Some(MetaProtection::Increment),
    )
    .unwrap();
    file.close().unwrap();
    (dir, path)
}

fn assert_untouched(path: &Path, before: &[u8], what: &str) {
    let after = std::fs::read(path).unwrap();
    let first_difference = after.iter().zip(before).position(|(a, b)| a != b);
    assert!(
        after.len() == before.len() && first_difference.is_none(),
        "{what}: the file's bytes changed (lengths {} and {}, first difference at {first_difference:?})",
        after.len(),
        before.len()
    );
    for suffix in ["-wal", "-shm"] {
        assert!(
            !adf_store::sidecar(path, suffix).exists(),
            "{what}: a {suffix} sidecar was left behind"
        );
    }
}

type Refusal = (&'static str, fn(&mut AdfFile) -> Result<(), String>);

fn err<T>(result: Result<T, impl std::fmt::Display>) -> Result<(), String> {
    match result {
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

fn deep_path(segments: usize) -> String {
    vec!["a"; segments].join(".")
}

fn nested(levels: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..levels {
        value = json!({ "n": value });
    }
    value
}

const REFUSALS: &[Refusal] = &[
    ("owner renames a read_only file", |f| {
        err(f.file_rename("locked.md", "moved.md"))
    }),
    ("owner renames onto a taken name", |f| {
        err(f.file_rename("mind/log.md", "mind.md"))
    }),
    ("rename of a missing file", |f| {
        err(f.file_rename("nope.md", "x.md"))
    }),
    ("rename to a bad path", |f| {
        err(f.file_rename("mind/log.md", "../x"))
    }),
    ("rename of a missing folder", |f| {
        err(f.file_rename_folder("nowhere", "elsewhere"))
    }),
    ("folder moved into itself", |f| {
        err(f.file_rename_folder("mind", "mind/deeper"))
    }),
    ("drop of a system table", |f| {
        err(f.local_table_drop("adf_logs"))
    }),
    ("drop of a missing local table", |f| {
        err(f.local_table_drop("local_missing"))
    }),
    ("update of a missing timer", |f| {
        let schedule = serde_json::json!({ "mode": "interval", "every_ms": 1000 });
        let scope = serde_json::json!(["agent"]);
        err(f.timer_update(
            999,
            &adf_store::timers::NewTimer {
                schedule: &schedule,
                next_wake_at: 1,
                payload: None,
                scope: &scope,
                lambda: None,
                warm: false,
                locked: false,
                r#loop: None,
            },
        ))
    }),
    ("code access of a runtime key", |f| {
        err(f.identity_set_code_access("crypto:signing:private_key", true))
    }),
    ("code access of a missing purpose", |f| {
        err(f.identity_set_code_access("app:nope", true))
    }),
    ("agent writes a read_only file", |f| {
        err(f.file_write(Caller::Agent, "locked.md", b"x", &FileWrite::default()))
    }),
    ("agent deletes a no_delete file", |f| {
        err(f.file_delete(Caller::Agent, "mind.md"))
    }),
    ("delete of a missing file", |f| {
        err(f.file_delete(Caller::Owner, "nope.md"))
    }),
    ("bad file path", |f| {
        err(f.file_write(Caller::Owner, "../x", b"x", &FileWrite::default()))
    }),
    ("agent changes file protection", |f| {
        err(f.file_set_protection(Caller::Agent, "locked.md", FileProtection::None))
    }),
    ("protection of a missing file", |f| {
        err(f.file_set_protection(Caller::Owner, "nope.md", FileProtection::None))
    }),
    ("authorize a missing file", |f| {
        err(f.file_set_authorized(Caller::Owner, "nope.md", true))
    }),
    ("agent sets a readonly registry key", |f| {
        err(f.meta_set(Caller::Agent, "adf_name", "x", None))
    }),
    ("agent sets a readonly user key", |f| {
        err(f.meta_set(Caller::Agent, "pinned", "2", None))
    }),
    ("agent lowers an increment key", |f| {
        err(f.meta_set(Caller::Agent, "counter", "1", None))
    }),
    ("unregistered adf_ key", |f| {
        err(f.meta_set(Caller::Owner, "adf_bogus", "x", None))
    }),
    ("empty meta key", |f| {
        err(f.meta_set(Caller::Owner, "", "x", None))
    }),
    ("increment of an adf_ key", |f| {
        err(f.meta_increment(Caller::Owner, "adf_x", 1.0))
    }),
    ("delete of a missing meta key", |f| {
        err(f.meta_delete(Caller::Owner, "nope"))
    }),
    ("agent deletes a readonly key", |f| {
        err(f.meta_delete(Caller::Agent, "pinned"))
    }),
    ("protection of a missing meta key", |f| {
        err(f.meta_set_protection(Caller::Owner, "nope", MetaProtection::None))
    }),
    ("config violation", |f| {
        err(f.config_set_path(
            Caller::Owner,
            "model.temperature",
            ConfigAction::Set,
            json!(99),
        ))
    }),
    ("config id change", |f| {
        err(f.config_set_path(Caller::Owner, "id", ConfigAction::Set, json!("x")))
    }),
    ("config path deeper than a parser reads", |f| {
        err(f.config_set_path(Caller::Owner, &deep_path(130), ConfigAction::Set, json!(1)))
    }),
    ("config value nested past the limit", |f| {
        err(f.config_set_path(
            Caller::Owner,
            "extra",
            ConfigAction::Set,
            nested(MAX_CONFIG_DEPTH),
        ))
    }),
    ("agent replaces the config", |f| {
        let config = f.config().unwrap();
        err(f.config_replace(Caller::Agent, config))
    }),
    ("checked config write past a lock by the agent", |f| {
        let config = f.config().unwrap();
        err(f.config_write_checked(Caller::Agent, config, Some("model")))
    }),
    ("checked config write too deep", |f| {
        let mut config = f.config().unwrap();
        config["extra"] = nested(MAX_CONFIG_DEPTH);
        err(f.config_write_checked(Caller::Owner, config, None))
    }),
    ("unknown task", |f| {
        err(f.task_require_authorization("task_nope"))
    }),
    ("unknown pending task", |f| {
        err(f.task_set_args("task_nope", &json!({})))
    }),
    ("bad loop role", |f| {
        err(f.loop_append(&NewLoopRow {
            r#loop: "main",
            role: "system",
            content: &json!([]),
            model: None,
            tokens: None,
        }))
    }),
    ("delete with an empty filter", |f| {
        err(f.messages_delete(Mailbox::Inbox, &MessageFilter::default()))
    }),
    ("bad outbox status", |f| {
        err(f.outbox_set_delivery("x", "lost", None, None))
    }),
    ("unknown outbox row", |f| {
        err(f.outbox_set_delivery("nope", "delivered", None, None))
    }),
    ("agent SQL on a system table", |f| {
        err(f.sql_execute(
            Caller::Agent,
            "DELETE FROM adf_meta",
            &[],
            &SqlLimits::default(),
        ))
    }),
    ("agent SQL that fails while running", |f| {
        err(f.sql_execute(
            Caller::Agent,
            "INSERT INTO local_missing VALUES (1)",
            &[],
            &SqlLimits::default(),
        ))
    }),
    ("agent SQL with a wrong parameter count", |f| {
        err(f.sql_execute(
            Caller::Agent,
            "CREATE TABLE local_t (x)",
            &[SqlValue::Integer(1)],
            &SqlLimits::default(),
        ))
    }),
    ("agent SQL making a value past the length limit", |f| {
        err(f.sql_execute(
            Caller::Agent,
            "CREATE TABLE local_big AS SELECT randomblob(20000000) AS b",
            &[],
            &SqlLimits::default(),
        ))
    }),
    ("a refused call inside atomically", |f| {
        f.atomically(|f| {
            f.file_write(Caller::Agent, "locked.md", b"x", &FileWrite::default())
                .map(|_| ())
        })
        .map_err(|e: StoreError| e.to_string())
    }),
];

#[test]
fn sto_46_cfg_03_refused_writes_leave_the_file_byte_identical() {
    let (_dir, path) = closed_file();
    let before = std::fs::read(&path).unwrap();
    for (what, refusal) in REFUSALS {
        let mut file = AdfFile::open(&path).unwrap();
        let outcome = refusal(&mut file);
        assert!(outcome.is_err(), "{what}: expected a refusal");
        file.close().unwrap();
        assert_untouched(&path, &before, what);
    }
    // The same file still takes a real write, and that one does change it.
    let mut file = AdfFile::open(&path).unwrap();
    file.meta_set(Caller::Owner, "status", "ok", None).unwrap();
    file.close().unwrap();
    assert_ne!(std::fs::read(&path).unwrap(), before);
}

/// A config stored deeper than serde reads (written by an older adf or by hand).
fn store_deep_config(path: &Path, levels: usize) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let text: String = conn
        .query_row("SELECT config_json FROM adf_config", [], |r| r.get(0))
        .unwrap();
    let deep = "{\"a\":".repeat(levels) + "1" + &"}".repeat(levels);
    let replaced = format!("{{\"deep\":{deep},{}", &text[1..]);
    conn.execute("UPDATE adf_config SET config_json = ?1", [replaced])
        .unwrap();
}

/// The owner sets config `path` to `value`.
fn owner_set(file: &mut AdfFile, path: &str, value: Value) -> adf_store::Result<()> {
    file.config_set_path(Caller::Owner, path, ConfigAction::Set, value)
}

#[test]
fn config_deeper_than_the_parse_limit_is_refused_reported_and_repairable() {
    let (_dir, path, mut file) = common::new_file("deep");
    // The 130-segment path of the issue, and the boundary: 63 segments is the most a path
    // may have, and that leaf then holds a scalar at level 63.
    let error = owner_set(&mut file, &deep_path(130), json!(1)).unwrap_err();
    assert!(error.to_string().contains("at most 64"), "{error}");
    // 64 segments ending in a scalar are 64 levels: the most there may be.
    owner_set(
        &mut file,
        &format!("y.{}", deep_path(MAX_CONFIG_DEPTH - 1)),
        json!(1),
    )
    .unwrap();
    let error = owner_set(
        &mut file,
        &format!("y.{}", deep_path(MAX_CONFIG_DEPTH)),
        json!(1),
    )
    .unwrap_err();
    assert!(error.to_string().contains("65 segments"), "{error}");
    owner_set(
        &mut file,
        &format!("x.{}", deep_path(MAX_CONFIG_DEPTH - 2)),
        json!(1),
    )
    .unwrap();
    let error = owner_set(
        &mut file,
        &format!("x.{}", deep_path(MAX_CONFIG_DEPTH - 2)),
        json!({ "one": { "more": 1 } }),
    )
    .unwrap_err();
    assert!(error.to_string().contains("nested 65 levels"), "{error}");
    assert!(file.config().is_ok());
    file.close().unwrap();

    store_deep_config(&path, 200);
    let inspected = AdfFile::inspect(&path).unwrap();
    let report = inspected.check().unwrap();
    let finding = report
        .errors()
        .find(|f| f.message.contains("config nested"))
        .unwrap_or_else(|| panic!("no depth finding in {:?}", report.findings));
    assert!(finding.message.contains("'deep'"), "{}", finding.message);
    drop(inspected);

    let mut file = AdfFile::open(&path).unwrap();
    assert!(
        file.config()
            .unwrap_err()
            .to_string()
            .contains("adf config set")
    );
    // An edit that leaves the deep key in place is refused and names it.
    let error = owner_set(&mut file, "description", json!("still deep")).unwrap_err();
    assert!(error.to_string().contains("'deep'"), "{error}");
    // Replacing the deep key repairs the file; everything else in the config survives.
    let id_before: String = file
        .connection()
        .query_row(
            "SELECT json_extract(config_json, '$.id') FROM adf_config",
            [],
            |r| r.get(0),
        )
        .unwrap();
    owner_set(&mut file, "deep", Value::Null).unwrap();
    let config = file.config().unwrap();
    assert_eq!(config["deep"], Value::Null);
    assert_eq!(config["id"], json!(id_before));
    file.close().unwrap();
    let report = AdfFile::inspect(&path).unwrap().check().unwrap();
    assert!(
        !report
            .findings
            .iter()
            .any(|f| f.message.contains("config nested")),
        "{:?}",
        report.findings
    );
}

fn set_schema_version(path: &Path, value: rusqlite::types::Value) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute(
        "UPDATE adf_meta SET value = ?1 WHERE key = 'adf_schema_version'",
        [value],
    )
    .unwrap();
}

#[test]
fn sto_27_schema_far_beyond_ours_is_reported_as_newer_with_the_path() {
    for version in [
        rusqlite::types::Value::Integer(9999),
        rusqlite::types::Value::Integer(i64::MAX),
        rusqlite::types::Value::Text(i64::MAX.to_string()),
    ] {
        let (_dir, path, file) = common::new_file("future");
        file.close().unwrap();
        set_schema_version(&path, version.clone());
        let before = std::fs::read(&path).unwrap();
        for result in [AdfFile::open(&path), AdfFile::inspect(&path)] {
            let error = result.unwrap_err();
            assert!(
                matches!(error, StoreError::NewerSchema { .. }),
                "{version:?}: {error:?}"
            );
            let text = error.to_string();
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(text.contains("newer"), "{text}");
        }
        assert_untouched(&path, &before, "newer schema");
    }
}

#[test]
fn missing_config_is_a_check_finding_not_an_abort() {
    for damage in ["DELETE FROM adf_config", "DROP TABLE adf_config"] {
        let (_dir, path, file) = common::new_file("noconfig");
        file.close().unwrap();
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(damage, []).unwrap();
        drop(conn);
        let report = AdfFile::inspect(&path).unwrap().check().unwrap();
        assert!(
            report.errors().any(|f| f.message.contains("adf_config")),
            "{damage}: {:?}",
            report.findings
        );
    }
}

fn agent_query(
    file: &mut AdfFile,
    sql: &str,
    limits: &SqlLimits,
) -> Result<adf_store::sql::QueryOutput, SqlError> {
    file.sql_query(sql, &[], limits)
}

#[test]
fn agent_sql_cannot_exhaust_memory_or_time() {
    let (_dir, path, mut file) = common::new_file("budget");
    // The query of the issue peaked at 5.9 GB: each value is refused before it is allocated.
    let error = agent_query(
        &mut file,
        "SELECT randomblob(999999999), randomblob(999999999), randomblob(999999999)",
        &SqlLimits::default(),
    )
    .unwrap_err();
    assert!(matches!(error, SqlError::LimitExceeded(_)), "{error:?}");
    assert!(error.to_string().contains("SQLITE_LIMIT_LENGTH"), "{error}");

    let deep_expression = format!("SELECT {}1", "1+".repeat(200));
    let error = agent_query(&mut file, &deep_expression, &SqlLimits::default()).unwrap_err();
    assert!(error.to_string().contains("depth"), "{error}");
    let wide = format!("SELECT {}", vec!["1"; 150].join(", "));
    let error = agent_query(&mut file, &wide, &SqlLimits::default()).unwrap_err();
    assert!(error.to_string().contains("columns"), "{error}");

    // A runaway statement stops at a step budget, whatever the clock says.
    let runaway = "WITH RECURSIVE local_c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM local_c) SELECT count(*) FROM local_c";
    let error = agent_query(
        &mut file,
        runaway,
        &SqlLimits {
            max_steps: Some(20),
            ..SqlLimits::default()
        },
    )
    .unwrap_err();
    assert!(matches!(error, SqlError::LimitExceeded(_)), "{error:?}");
    assert!(error.to_string().contains("budget of 20 steps"), "{error}");

    // Normal large reads still work: thousands of rows and a value of several MB.
    file.sql_execute(
        Caller::Agent,
        "CREATE TABLE local_t (id INTEGER PRIMARY KEY, body TEXT)",
        &[],
        &SqlLimits::default(),
    )
    .unwrap();
    file.sql_execute(
        Caller::Agent,
        "INSERT INTO local_t (body) WITH RECURSIVE local_c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM local_c WHERE x < 5000) SELECT printf('%.1000c', 'x') FROM local_c",
        &[],
        &SqlLimits::default(),
    )
    .unwrap();
    let all = agent_query(
        &mut file,
        "SELECT id, body FROM local_t",
        &SqlLimits::default(),
    )
    .unwrap();
    assert_eq!(all.rows.len(), 5000);
    let big = agent_query(
        &mut file,
        "SELECT randomblob(6000000) AS b",
        &SqlLimits::default(),
    )
    .unwrap();
    assert!(matches!(&big.rows[0][0], SqlValue::Blob(bytes) if bytes.len() == 6_000_000));
    // The accumulated result is capped.
    let error = agent_query(
        &mut file,
        "SELECT id, body FROM local_t",
        &SqlLimits {
            max_result_bytes: Some(100_000),
            ..SqlLimits::default()
        },
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("exceeds 100000 bytes"),
        "{error}"
    );

    // The limits held only while the agent's statements ran: the owner still writes a file
    // larger than an agent value may be.
    let large = vec![b'a'; 12 * 1024 * 1024];
    file.file_write(Caller::Owner, "large.bin", &large, &FileWrite::default())
        .unwrap();
    assert_eq!(
        file.file_read("large.bin").unwrap().unwrap().content.len(),
        large.len()
    );
    file.close().unwrap();
    let reopened = AdfFile::open(&path).unwrap();
    assert_eq!(
        reopened
            .file_read("large.bin")
            .unwrap()
            .unwrap()
            .content
            .len(),
        large.len()
    );
}
