//! A file made by `AdfFile::create` checked item by item against the spec text itself: the DDL
//! is parsed out of `docs/spec/adf-spec.txt`, the defaults are the §14 tables restated here.
use crate::common;

use std::collections::BTreeMap;

use adf_store::{AdfFile, CreateOptions};
use rusqlite::Connection;
use serde_json::{Value, json};

/// The `CREATE …;` statements of spec §3.2, taken from the seed text.
fn spec_ddl() -> String {
    let text = std::fs::read_to_string(common::spec_doc("adf-spec.txt")).unwrap();
    let start = text.find("CREATE TABLE IF NOT EXISTS adf_meta").unwrap();
    let end = text[start..].find("3.3Field Reference").unwrap() + start;
    text[start..end].to_owned()
}

type ColumnInfo = (String, String, i64, Option<String>, i64);

fn table_info(conn: &Connection, table: &str) -> Vec<ColumnInfo> {
    conn.prepare(&format!("PRAGMA table_info({table})"))
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn master(conn: &Connection, kind: &str) -> BTreeMap<String, String> {
    conn.prepare("SELECT name, sql FROM sqlite_master WHERE type = ?1 AND name NOT LIKE 'sqlite_%'")
        .unwrap()
        .query_map([kind], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn squash(sql: &str) -> String {
    sql.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("IF NOT EXISTS ", "")
}

#[test]
fn sto_14_sto_15_new_file_has_the_exact_spec_ddl() {
    let (_dir, _path, file) = common::new_file("ddl");
    let spec = Connection::open_in_memory().unwrap();
    spec.execute_batch(&spec_ddl()).unwrap();
    let spec_tables = master(&spec, "table");
    assert_eq!(spec_tables.len(), 12, "the spec defines twelve adf_ tables");
    let ours = master(file.connection(), "table");
    for (table, sql) in &spec_tables {
        assert_eq!(
            table_info(file.connection(), table),
            table_info(&spec, table),
            "columns of {table}"
        );
        assert_eq!(
            squash(&ours[table]),
            squash(sql),
            "CREATE statement of {table}"
        );
    }
    let spec_indexes = master(&spec, "index");
    let our_indexes = master(file.connection(), "index");
    assert!(
        spec_indexes.contains_key("idx_adf_loop_stream")
            && spec_indexes.contains_key("idx_adf_outbox_created")
    );
    for (index, sql) in &spec_indexes {
        assert_eq!(
            our_indexes.get(index).map(|s| squash(s)),
            Some(squash(sql)),
            "index {index}"
        );
    }
    let user_tables: Vec<&String> = ours
        .keys()
        .filter(|t| !t.starts_with("adf_") && !t.starts_with("sqlite_"))
        .collect();
    assert!(user_tables.is_empty(), "no other tables: {user_tables:?}");
}

#[test]
fn sto_01_to_05_pragmas_on_the_writer_connection() {
    let (_dir, path, file) = common::new_file("pragmas");
    let conn = file.connection();
    let get = |pragma: &str| -> String {
        conn.query_row(&format!("PRAGMA {pragma}"), [], |r| {
            r.get::<_, rusqlite::types::Value>(0)
        })
        .map(|v| match v {
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(t) => t,
            other => format!("{other:?}"),
        })
        .unwrap()
    };
    assert_eq!(get("encoding"), "UTF-8");
    assert_eq!(get("journal_mode"), "wal");
    assert_eq!(get("synchronous"), "1");
    assert_eq!(get("busy_timeout"), "5000");
    assert_eq!(get("foreign_keys"), "1");
    // Savepoint sub-journals never spill to a temporary file (one `pwrite` pair per page).
    assert_eq!(get("temp_store"), "2");
    let guest = adf_store::AdfFile::open_guest(&path).unwrap();
    let guest_temp_store: i64 = guest
        .connection()
        .query_row("PRAGMA temp_store", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        guest_temp_store, 2,
        "a guest (route requests) keeps them in memory too"
    );
}

#[test]
fn sto_16_sto_17_sto_18_checks_reject_bad_rows() {
    let (_dir, _path, file) = common::new_file("checks");
    let conn = file.connection();
    assert!(
        conn.execute(
            "INSERT INTO adf_meta (key, value, protection) VALUES ('k', 'v', 'x')",
            []
        )
        .is_err()
    );
    assert!(
        conn.execute(
            "INSERT INTO adf_files (path, content, size, protection, created_at, updated_at) VALUES ('p', x'', 0, 'locked', '', '')",
            []
        )
        .is_err()
    );
    assert!(
        conn.execute(
            "INSERT INTO adf_config (id, config_json, updated_at) VALUES (2, '{}', '')",
            []
        )
        .is_err()
    );
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM adf_config", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 1);
}

#[test]
fn sto_19_met_03_met_20_registry_keys_and_protections() {
    let (_dir, _path, file) = common::new_file("registry");
    let meta: BTreeMap<String, (String, String)> = file
        .meta_list()
        .unwrap()
        .into_iter()
        .map(|e| (e.key, (e.value, e.protection.to_string())))
        .collect();
    assert_eq!(meta["adf_version"], ("0.2".into(), "readonly".into()));
    assert_eq!(meta["adf_schema_version"], ("32".into(), "readonly".into()));
    for key in [
        "adf_name",
        "adf_handle",
        "adf_created_at",
        "adf_updated_at",
        "adf_parent_did",
    ] {
        assert_eq!(meta[key].1, "readonly", "{key}");
    }
    assert_eq!(meta["adf_parent_did"].0, "");
    assert_eq!(meta["status"], (String::new(), "none".into()));
    chrono::DateTime::parse_from_rfc3339(&meta["adf_created_at"].0).unwrap();
    // MET-02: only registry keys carry the adf_ prefix.
    let registry: Vec<&str> = adf_store::meta::REGISTRY.iter().map(|(k, _)| *k).collect();
    for key in meta.keys().filter(|k| k.starts_with("adf_")) {
        assert!(
            registry.contains(&key.as_str()),
            "{key} is not in the registry"
        );
    }
}

#[test]
fn fil_01_fil_02_def_10_reserved_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("Ada.adf");
    let file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    for core in ["README.md", "mind.md", "mind/log.md", "soul.md"] {
        let entry = file
            .file_read(core)
            .unwrap()
            .unwrap_or_else(|| panic!("{core} missing"));
        assert_eq!(entry.info.protection, "no_delete", "{core}");
        assert_eq!(entry.info.size as usize, entry.content.len());
        assert!(!entry.info.authorized);
    }
    let text = |p: &str| String::from_utf8(file.file_read(p).unwrap().unwrap().content).unwrap();
    let readme = text("README.md");
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    assert_eq!(
        readme,
        format!("# Ada\n\nCreated: {today}\nStatus: New agent, self-configuring.\n")
    );
    let mind = text("mind.md");
    assert!(mind.starts_with("# Mind") && mind.contains("## Always") && mind.contains("## Pages"));
    assert!(text("mind/log.md").starts_with("# Mind Log"));
    assert!(!text("soul.md").trim().is_empty());
}

#[test]
fn prm_26_prm_24_skills_registry_exists_on_a_new_file() {
    let (_dir, _path, file) = common::new_file("skills");
    let entry = file.file_read("skills-registry.json").unwrap().unwrap();
    assert_eq!(entry.info.protection, "read_only");
    let registry: Value = serde_json::from_slice(&entry.content).unwrap();
    assert_eq!(registry["skills"], json!({}));
    assert!(registry.get("rejected").is_none());
}

#[test]
fn def_01_identity_fields_from_the_file_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("My Agent.adf");
    let file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    let config = file.config().unwrap();
    assert_eq!(config["adf_version"], "0.2");
    let id = config["id"].as_str().unwrap();
    assert_eq!(id.len(), 12);
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    );
    assert_eq!(config["name"], "My Agent");
    assert_eq!(config["description"], "");
    assert_eq!(config["handle"], "my-agent");
    assert_eq!(
        config["icon"].as_str().unwrap(),
        adf_store::defaults::icon_for_id(id)
    );
    // The same id always gets the same icon (STO-33's determinism at creation).
    let again = tempfile::tempdir().unwrap();
    let other = AdfFile::create(
        again.path().join("x.adf"),
        &CreateOptions {
            id: Some(id.to_owned()),
            ..CreateOptions::default()
        },
    )
    .unwrap();
    assert_eq!(other.config().unwrap()["icon"], config["icon"]);
}

#[test]
fn def_02_to_def_09_def_24_def_26_config_defaults() {
    let (_dir, _path, file) = common::new_file("defaults");
    let c = file.config().unwrap();
    // DEF-02
    assert_eq!(c["state"], "active");
    assert!(c.get("start_in_state").is_none());
    assert_eq!(c["autonomous"], false);
    assert_eq!(c["autostart"], false);
    // DEF-03
    assert_eq!(c["model"]["provider"], "");
    assert_eq!(c["model"]["model_id"], "");
    assert_eq!(c["model"]["temperature"], 0.7);
    assert_eq!(c["model"]["max_tokens"], 4096);
    // DEF-04
    assert_eq!(
        c["context"]["audit"],
        json!({ "loop": true, "inbox": false, "outbox": false, "files": false })
    );
    assert_eq!(
        c["context"]["dynamic_instructions"],
        json!({ "inbox_hints": true, "context_warning": true, "idle_reminder": true, "mesh_updates": true })
    );
    assert!(c["context"].get("compact_threshold").is_none());
    // DEF-05
    assert_eq!(
        c["messaging"],
        json!({ "receive": true, "mode": "proactive", "visibility": "localhost", "inbox_mode": true })
    );
    // DEF-06
    assert_eq!(c["security"]["allow_unsigned"], true);
    assert_eq!(c["security"]["level"], 1);
    assert!(c["security"].get("allow_local_fetch").is_none());
    assert!(
        c["security"]
            .get("require_middleware_authorization")
            .is_none()
    );
    // DEF-07
    let limits = &c["limits"];
    assert_eq!(limits["execution_timeout_ms"], 60000);
    assert_eq!(limits["max_file_read_tokens"], 30000);
    assert_eq!(limits["max_file_write_bytes"], 5_000_000);
    assert_eq!(limits["max_tool_result_tokens"], 16000);
    assert_eq!(limits["max_tool_result_preview_chars"], 5000);
    assert_eq!(limits["max_active_turns"], Value::Null);
    assert_eq!(limits["max_image_size_bytes"], 5_242_880);
    assert_eq!(limits["max_audio_size_bytes"], 10_485_760);
    assert_eq!(limits["max_video_size_bytes"], 20_971_520);
    // DEF-08
    let code = &c["code_execution"];
    for method in [
        "model_invoke",
        "sys_lambda",
        "task_resolve",
        "loop_inject",
        "identity_status",
        "get_identity",
        "set_identity",
        "emit_event",
        "attestation_list",
        "attestation_add",
        "attestation_issue",
    ] {
        assert_eq!(code[method], true, "code_execution.{method}");
    }
    assert_eq!(code["network"], false);
    assert_eq!(code["restricted_methods"], json!(["attestation_issue"]));
    // DEF-09
    assert_eq!(c["compute"]["enabled"], false);
    assert_eq!(c["logging"]["default_level"], "info");
    assert_eq!(c["logging"]["max_rows"], 10000);
    assert!(c.get("loops").is_none());
    assert_eq!(c["locked_fields"], json!([]));
    // DEF-24
    assert_eq!(c["serving"]["public"]["enabled"], false);
    assert_eq!(c["serving"]["shared"]["enabled"], false);
    assert_eq!(c["serving"]["api"], json!([]));
    assert_eq!(c["ws_connections"], json!([]));
    assert_eq!(c["stream_bind"], json!({}));
    assert_eq!(c["stream_bindings"], json!([]));
    assert_eq!(c["providers"], json!([]));
    assert_ne!(c["card"].get("publish_attestations"), Some(&json!(true)));
    // DEF-26
    assert_eq!(
        c["recovery"],
        json!({ "auto_retry": true, "max_attempts": 5, "base_delay_ms": 15000, "max_delay_ms": 300000 })
    );
    // §5 validation: a new file has no violations.
    assert_eq!(adf_store::config::validate(&c), vec![]);
}

fn trigger(c: &Value, kind: &str) -> (bool, Vec<Value>) {
    let t = &c["triggers"][kind];
    (
        t["enabled"].as_bool().unwrap(),
        t["targets"].as_array().unwrap().clone(),
    )
}

#[test]
fn def_12_to_def_16_default_triggers() {
    let (_dir, _path, file) = common::new_file("triggers");
    let c = file.config().unwrap();
    assert_eq!(c["triggers"].as_object().unwrap().len(), 11);
    let (on, targets) = trigger(&c, "on_inbox");
    assert!(on);
    assert_eq!(
        targets,
        vec![json!({ "scope": "agent" })],
        "DEF-12: one agent target without interval_ms"
    );
    let (on, targets) = trigger(&c, "on_file_change");
    assert!(on);
    assert_eq!(
        targets,
        vec![json!({ "scope": "agent", "filter": { "watch": "README.*" }, "debounce_ms": 2000 })]
    );
    let (on, targets) = trigger(&c, "on_chat");
    assert!(on && targets == vec![json!({ "scope": "agent" })]);
    let (on, targets) = trigger(&c, "on_timer");
    assert!(on && targets == vec![json!({ "scope": "system" }), json!({ "scope": "agent" })]);
    let (on, targets) = trigger(&c, "on_task_complete");
    assert!(on && targets == vec![json!({ "scope": "agent" })]);
    for off in [
        "on_outbox",
        "on_tool_call",
        "on_task_create",
        "on_logs",
        "on_llm_call",
        "on_startup",
    ] {
        let (on, targets) = trigger(&c, off);
        assert!(!on && targets.is_empty(), "DEF-16: {off}");
    }
}

#[test]
fn def_17_to_def_22_default_tools() {
    let (_dir, _path, file) = common::new_file("tools");
    let c = file.config().unwrap();
    let tools = c["tools"].as_array().unwrap();
    let get = |name: &str| -> (bool, bool, bool) {
        let t = tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} not declared"));
        (
            t["enabled"].as_bool().unwrap(),
            t["visible"].as_bool().unwrap(),
            t.get("restricted")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        )
    };
    for name in [
        "fs_read",
        "fs_write",
        "fs_list",
        "msg_send",
        "agent_discover",
        "msg_list",
        "msg_read",
        "msg_update",
        "sys_code",
        "sys_lambda",
        "sys_set_timer",
        "sys_list_timers",
        "sys_delete_timer",
        "sys_get_config",
        "db_query",
        "loop_send",
        "loop_list",
        "loop_manage",
        "say",
        "ask",
        "sys_set_state",
        "sys_get_meta",
        "sys_set_meta",
        "sys_delete_meta",
        "sys_fetch",
    ] {
        assert_eq!(get(name), (true, true, false), "DEF-17: {name}");
    }
    assert_eq!(get("sys_update_config"), (true, true, true), "DEF-18");
    assert_eq!(get("chat_info"), (true, false, false), "DEF-19");
    for name in [
        "fs_delete",
        "db_execute",
        "loop_compact",
        "loop_clear",
        "msg_delete",
        "adf_shell",
        "ws_connect",
        "ws_disconnect",
        "ws_connections",
        "ws_send",
        "stream_bind",
        "stream_unbind",
        "stream_bindings",
        "fs_transfer",
        "mcp_install",
        "mcp_restart",
        "mcp_uninstall",
    ] {
        assert_eq!(get(name), (false, false, false), "DEF-20: {name}");
    }
    assert_eq!(get("sys_create_adf"), (false, false, true), "DEF-21");
    assert_eq!(get("compute_exec"), (false, false, true), "DEF-21");
    assert!(
        tools
            .iter()
            .all(|t| t["name"] != "npm_install" && t["name"] != "npm_uninstall"),
        "DEF-22"
    );
    assert_eq!(tools.len(), 46);
}

#[test]
fn create_refuses_to_overwrite_and_leaves_nothing_behind_on_error() {
    let (dir, path, file) = common::new_file("exists");
    drop(file);
    let before = std::fs::read(&path).unwrap();
    assert!(matches!(
        AdfFile::create(&path, &CreateOptions::default()),
        Err(adf_store::StoreError::FileExists { .. })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let missing_dir = dir.path().join("no/such/dir/a.adf");
    assert!(AdfFile::create(&missing_dir, &CreateOptions::default()).is_err());
    assert!(!missing_dir.exists());
}

#[test]
fn sto_07_sto_08_timestamps_and_flags() {
    let (_dir, _path, file) = common::new_file("stamps");
    let conn = file.connection();
    let created: String = conn
        .query_row(
            "SELECT created_at FROM adf_files WHERE path = 'README.md'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    chrono::DateTime::parse_from_rfc3339(&created).unwrap();
    let kind: String = conn
        .query_row(
            "SELECT typeof(authorized) FROM adf_files WHERE path = 'README.md'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kind, "integer");
}

#[test]
fn sto_03_a_created_file_is_whole_on_disk_in_wal_mode_and_marked_clean() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("whole.adf");
    AdfFile::create(&path, &CreateOptions::default())
        .unwrap()
        .close()
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    // Header bytes 18/19 = 2: the file is in WAL mode before any connection switches it.
    assert_eq!((bytes[18], bytes[19]), (2, 2));
    for suffix in ["-wal", "-shm", "-journal"] {
        assert!(!dir.path().join(format!("whole.adf{suffix}")).exists());
    }
    // A plain SQLite reader (no adf code) finds an intact database with the schema and rows.
    let reader = Connection::open_with_flags(
        format!("file:{}?immutable=1", path.display()),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap();
    let integrity: String = reader
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let handle: String = reader
        .query_row(
            "SELECT value FROM adf_meta WHERE key = 'adf_handle'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(handle, "whole");
    drop(reader);
    let reopened = AdfFile::open(&path).unwrap();
    assert!(reopened.open_report().clean_close);
    assert!(reopened.open_report().notes.is_empty());
    reopened.close().unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "open + close wrote nothing"
    );
}

#[test]
fn sto_03_a_transaction_that_only_reads_keeps_the_clean_close_marker() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reads.adf");
    AdfFile::create(&path, &CreateOptions::default())
        .unwrap()
        .close()
        .unwrap();
    let closed = std::fs::read(&path).unwrap();
    let marker = |file: &AdfFile| -> bool {
        file.connection()
            .query_row(
                "SELECT COUNT(*) FROM adf_meta WHERE key = 'adf_clean_close'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
            == 1
    };
    let mut file = AdfFile::open(&path).unwrap();
    file.atomically(|f| f.config().map(drop)).unwrap();
    assert!(marker(&file), "a read-only unit of work leaves the marker");
    file.close().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), closed);

    let mut file = AdfFile::open(&path).unwrap();
    file.atomically(|f| f.meta_set_runtime("note", "x"))
        .unwrap();
    assert!(!marker(&file), "the first write removes the marker");
    file.close().unwrap();
    let reopened = AdfFile::open(&path).unwrap();
    assert!(reopened.open_report().clean_close, "close puts it back");
}

#[test]
fn sto_04_a_long_session_checkpoints_in_the_background_and_closes_without_sidecars() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.adf");
    let mut file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    // About 6 MB of rows in small commits: the WAL passes the checkpoint threshold several
    // times, so background checkpoints run while commits continue.
    let row = "x".repeat(3000);
    for i in 0..2000 {
        file.meta_set_runtime(&format!("k{}", i % 50), &format!("{i}{row}"))
            .unwrap();
    }
    let wal = std::fs::metadata(dir.path().join("busy.adf-wal"))
        .unwrap()
        .len();
    assert!(wal > 0);
    file.close().unwrap();
    for suffix in ["-wal", "-shm"] {
        assert!(!dir.path().join(format!("busy.adf{suffix}")).exists());
    }
    let reopened = AdfFile::open(&path).unwrap();
    let value = reopened.meta_get("k49").unwrap().unwrap().value;
    assert!(value.starts_with("1999"));
}

#[test]
fn sto_03_a_name_too_long_for_the_page_image_still_makes_a_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.adf");
    // Rows this large do not fit the one-leaf page image; the file is built through SQLite.
    let name = "n".repeat(3_900);
    let options = CreateOptions {
        name: Some(name.clone()),
        handle: Some("long".into()),
        ..CreateOptions::default()
    };
    AdfFile::create(&path, &options).unwrap().close().unwrap();
    let file = AdfFile::open(&path).unwrap();
    let integrity: String = file
        .connection()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    assert_eq!(file.meta_get("adf_name").unwrap().unwrap().value, name);
    let readme = file.file_read("README.md").unwrap().unwrap();
    assert!(String::from_utf8_lossy(&readme.content).starts_with(&format!("# {name}\n")));
    file.close().unwrap();
}
