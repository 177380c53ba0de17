//! The protection rules of §4.2–§4.4 through the store API, per caller, plus the config,
//! audit, skills and user-table behaviour the store owns.
use crate::common;

use adf_store::{
    AdfFile, Caller, ConfigAction, FileProtection, FileWrite, MetaProtection, StoreError,
};
use serde_json::{Value, json};

fn protected(result: Result<impl std::fmt::Debug, StoreError>) -> bool {
    matches!(result, Err(StoreError::Protected { .. }))
}

fn bypass_logs(file: &AdfFile) -> i64 {
    file.connection()
        .query_row(
            "SELECT COUNT(*) FROM adf_logs WHERE origin = 'protection' AND event = 'bypass'",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

fn write(
    file: &mut AdfFile,
    caller: Caller,
    path: &str,
    text: &str,
) -> Result<adf_store::WriteOutcome, StoreError> {
    file.file_write(caller, path, text.as_bytes(), &FileWrite::default())
}

#[test]
fn met_08_met_10_readonly_keys_refuse_the_agent() {
    let (_dir, _path, mut file) = common::new_file("meta");
    assert!(protected(file.meta_set(
        Caller::Agent,
        "adf_name",
        "x",
        None
    )));
    file.meta_set(
        Caller::Owner,
        "project",
        "adf",
        Some(MetaProtection::Readonly),
    )
    .unwrap();
    assert!(protected(file.meta_set(
        Caller::Agent,
        "project",
        "other",
        None
    )));
    assert!(protected(file.meta_delete(Caller::Agent, "project")));
    assert_eq!(file.meta_get("project").unwrap().unwrap().value, "adf");
}

#[test]
fn met_09_met_12_increment_keys_only_grow() {
    let (_dir, _path, mut file) = common::new_file("inc");
    file.meta_set(
        Caller::Agent,
        "counter",
        "5",
        Some(MetaProtection::Increment),
    )
    .unwrap();
    file.meta_set(Caller::Agent, "counter", "6", None).unwrap();
    assert!(protected(file.meta_set(
        Caller::Agent,
        "counter",
        "6",
        None
    )));
    assert!(protected(file.meta_set(
        Caller::Agent,
        "counter",
        "x",
        None
    )));
    assert!(protected(file.meta_set(
        Caller::Agent,
        "counter",
        "2",
        None
    )));
    assert_eq!(
        file.meta_increment(Caller::Agent, "counter", 1.0).unwrap(),
        "7"
    );
    assert!(protected(file.meta_increment(
        Caller::Agent,
        "counter",
        -1.0
    )));
    assert!(
        protected(file.meta_delete(Caller::Agent, "counter")),
        "MET-10"
    );
}

#[test]
fn met_11_met_19_increment_creates_and_stays_integral() {
    let (_dir, _path, mut file) = common::new_file("integral");
    assert_eq!(file.meta_increment(Caller::Agent, "n", 3.0).unwrap(), "3");
    for _ in 0..1000 {
        file.meta_increment(Caller::Agent, "n", 1.0).unwrap();
    }
    assert_eq!(file.meta_get("n").unwrap().unwrap().value, "1003");
    assert_eq!(
        file.meta_increment(Caller::Agent, "n", 0.5).unwrap(),
        "1003.5"
    );
}

#[test]
fn met_14_met_15_protection_only_on_creation() {
    let (_dir, _path, mut file) = common::new_file("create-only");
    file.meta_set(Caller::Agent, "plain", "1", None).unwrap();
    assert_eq!(
        file.meta_get("plain").unwrap().unwrap().protection,
        "none",
        "MET-15"
    );
    file.meta_set(Caller::Agent, "plain", "2", Some(MetaProtection::Readonly))
        .unwrap();
    assert_eq!(
        file.meta_get("plain").unwrap().unwrap().protection,
        "none",
        "MET-14"
    );
}

#[test]
fn met_16_met_17_authorized_code_bypasses_visibly() {
    let (_dir, _path, mut file) = common::new_file("bypass");
    file.meta_set(Caller::Owner, "locked", "a", Some(MetaProtection::Readonly))
        .unwrap();
    file.meta_set(
        Caller::Owner,
        "count",
        "10",
        Some(MetaProtection::Increment),
    )
    .unwrap();
    let outcome = file
        .meta_set(Caller::AuthorizedCode, "locked", "b", None)
        .unwrap();
    assert_eq!(outcome.bypassed.as_deref(), Some("readonly"));
    file.meta_set(Caller::AuthorizedCode, "count", "1", None)
        .unwrap();
    file.meta_delete(Caller::AuthorizedCode, "locked").unwrap();
    assert_eq!(bypass_logs(&file), 3);
    assert!(matches!(
        file.meta_set_protection(Caller::Agent, "count", MetaProtection::None),
        Err(StoreError::RequiresAuthorizedCode { .. })
    ));
    assert!(matches!(
        file.meta_set_protection(Caller::AuthorizedCode, "missing", MetaProtection::None),
        Err(StoreError::NotFound { .. })
    ));
    file.meta_set_protection(Caller::AuthorizedCode, "count", MetaProtection::None)
        .unwrap();
    assert_eq!(file.meta_get("count").unwrap().unwrap().protection, "none");
}

#[test]
fn met_02_unknown_adf_keys_are_refused() {
    let (_dir, _path, mut file) = common::new_file("reserved");
    for caller in [Caller::Agent, Caller::AuthorizedCode, Caller::Owner] {
        assert!(file.meta_set(caller, "adf_made_up", "1", None).is_err());
    }
    assert!(file.meta_get("adf_made_up").unwrap().is_none());
}

#[test]
fn fil_05_fil_07_fil_13_read_only_files() {
    let (_dir, _path, mut file) = common::new_file("ro");
    file.file_write(
        Caller::Owner,
        "docs/locked.md",
        b"v1",
        &FileWrite {
            protection_if_new: Some(FileProtection::ReadOnly),
            ..FileWrite::default()
        },
    )
    .unwrap();
    assert!(
        protected(write(&mut file, Caller::Agent, "docs/locked.md", "v2")),
        "FIL-05"
    );
    assert_eq!(
        file.file_read("docs/locked.md").unwrap().unwrap().content,
        b"v1",
        "FIL-07 readable"
    );
    let outcome = write(&mut file, Caller::AuthorizedCode, "docs/locked.md", "v3").unwrap();
    assert_eq!(
        outcome.bypassed.as_deref(),
        Some("read_only"),
        "FIL-13 marker"
    );
    assert_eq!(bypass_logs(&file), 1, "FIL-13 log");
    assert_eq!(
        file.file_read("docs/locked.md").unwrap().unwrap().content,
        b"v3"
    );
}

#[test]
fn fil_04_fil_06_fil_08_delete_and_write_rules() {
    let (_dir, _path, mut file) = common::new_file("del");
    write(&mut file, Caller::Agent, "mind.md", "# Mind\nnew").unwrap();
    assert_eq!(
        file.file_read("mind.md").unwrap().unwrap().content,
        b"# Mind\nnew",
        "FIL-08"
    );
    assert!(
        protected(file.file_delete(Caller::Agent, "README.md")),
        "FIL-04"
    );
    assert!(
        protected(file.file_delete(Caller::Agent, "mind.md")),
        "FIL-06 no_delete"
    );
    file.file_write(
        Caller::Owner,
        "x.md",
        b"x",
        &FileWrite {
            protection_if_new: Some(FileProtection::ReadOnly),
            ..FileWrite::default()
        },
    )
    .unwrap();
    assert!(
        protected(file.file_delete(Caller::Agent, "x.md")),
        "FIL-06 read_only"
    );
    file.file_delete(Caller::AuthorizedCode, "README.md")
        .unwrap();
    assert!(file.file_read("README.md").unwrap().is_none());
    write(&mut file, Caller::Agent, "free.txt", "f").unwrap();
    file.file_delete(Caller::Agent, "free.txt").unwrap();
}

#[test]
fn fil_10_fil_11_agent_writes_clear_authorization() {
    let (_dir, _path, mut file) = common::new_file("auth");
    write(
        &mut file,
        Caller::Owner,
        "lib/tool.ts",
        "export function main() {}",
    )
    .unwrap();
    file.file_set_authorized(Caller::Owner, "lib/tool.ts", true)
        .unwrap();
    write(
        &mut file,
        Caller::Agent,
        "lib/tool.ts",
        "export function main() { return 1 }",
    )
    .unwrap();
    assert!(
        !file
            .file_read("lib/tool.ts")
            .unwrap()
            .unwrap()
            .info
            .authorized,
        "FIL-10"
    );

    file.file_write(
        Caller::Owner,
        "lib/ro.ts",
        b"x",
        &FileWrite {
            protection_if_new: Some(FileProtection::ReadOnly),
            ..FileWrite::default()
        },
    )
    .unwrap();
    file.file_set_authorized(Caller::Owner, "lib/ro.ts", true)
        .unwrap();
    assert!(protected(write(&mut file, Caller::Agent, "lib/ro.ts", "y")));
    assert!(
        file.file_read("lib/ro.ts")
            .unwrap()
            .unwrap()
            .info
            .authorized,
        "FIL-11"
    );
    assert!(matches!(
        file.file_set_authorized(Caller::Agent, "lib/ro.ts", true),
        Err(StoreError::RequiresAuthorizedCode { .. })
    ));
}

#[test]
fn fil_14_protection_parameter_only_for_new_files() {
    let (_dir, _path, mut file) = common::new_file("newonly");
    write(&mut file, Caller::Agent, "a.txt", "1").unwrap();
    file.file_write(
        Caller::Agent,
        "a.txt",
        b"2",
        &FileWrite {
            protection_if_new: Some(FileProtection::ReadOnly),
            ..FileWrite::default()
        },
    )
    .unwrap();
    assert_eq!(
        file.file_read("a.txt").unwrap().unwrap().info.protection,
        "none"
    );
}

#[test]
fn fil_15_set_file_protection_rules() {
    let (_dir, _path, mut file) = common::new_file("setprot");
    assert!(matches!(
        file.file_set_protection(Caller::Agent, "README.md", FileProtection::None),
        Err(StoreError::RequiresAuthorizedCode { .. })
    ));
    assert!(matches!(
        file.file_set_protection(Caller::AuthorizedCode, "nope.md", FileProtection::None),
        Err(StoreError::NotFound { .. })
    ));
    file.file_set_protection(
        Caller::AuthorizedCode,
        "README.md",
        FileProtection::ReadOnly,
    )
    .unwrap();
    assert_eq!(
        file.file_read("README.md")
            .unwrap()
            .unwrap()
            .info
            .protection,
        "read_only"
    );
}

#[test]
fn fil_17_fil_18_fil_19_paths_sizes_and_legacy_alias() {
    let (_dir, _path, mut file) = common::new_file("paths");
    write(&mut file, Caller::Agent, "data/x.csv", "a,b").unwrap();
    write(&mut file, Caller::Agent, "u.txt", "€").unwrap();
    let entry = file.file_read("u.txt").unwrap().unwrap();
    assert_eq!(entry.info.size, 3, "FIL-18: size is the UTF-8 byte length");
    let readme = file.file_read("README.md").unwrap().unwrap().content;
    assert_eq!(
        file.file_read("document.md").unwrap().unwrap().content,
        readme,
        "FIL-19"
    );
    for bad in ["", "/abs", "a/../b", "a//b", "./a", "a\\b"] {
        assert!(
            matches!(
                write(&mut file, Caller::Owner, bad, "x"),
                Err(StoreError::InvalidInput(_))
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn sto_48_deleted_files_are_audited_when_audit_files_is_on() {
    let (_dir, _path, mut file) = common::new_file("audit");
    write(&mut file, Caller::Agent, "gone.txt", "bye").unwrap();
    file.file_delete(Caller::Agent, "gone.txt").unwrap();
    assert!(
        file.audit_list().unwrap().is_empty(),
        "audit.files is off by default"
    );
    file.config_set_path(
        Caller::Owner,
        "context.audit.files",
        ConfigAction::Set,
        json!(true),
    )
    .unwrap();
    file.file_write(
        Caller::Agent,
        "gone.bin",
        &[0, 159, 146, 150],
        &FileWrite::default(),
    )
    .unwrap();
    file.file_delete(Caller::Agent, "gone.bin").unwrap();
    let audits = file.audit_list().unwrap();
    assert_eq!(audits.len(), 1);
    assert_eq!(audits[0].source, "file");
    assert_eq!(audits[0].r#ref.as_deref(), Some("gone.bin"));
    let data = file.audit_data(audits[0].id).unwrap();
    assert_eq!(data["path"], "gone.bin");
    assert_eq!(data["content_base64"], "AJ+Slg==");
    assert_eq!(data["size"], 4);
}

#[test]
fn sto_12_unknown_config_fields_survive_and_sync_meta() {
    let (_dir, path, mut file) = common::new_file("config");
    let mut config = file.config().unwrap();
    config["future_field"] = json!({ "a": 1 });
    file.config_replace(Caller::Owner, config).unwrap();
    file.config_set_path(Caller::Owner, "name", ConfigAction::Set, json!("Renamed"))
        .unwrap();
    file.close().unwrap();
    let file = AdfFile::open(&path).unwrap();
    let config = file.config().unwrap();
    assert_eq!(config["future_field"], json!({ "a": 1 }));
    assert_eq!(
        file.meta_get("adf_name").unwrap().unwrap().value,
        "Renamed",
        "MET-06"
    );
    assert_eq!(
        file.meta_get("adf_updated_at").unwrap().unwrap().value,
        config["metadata"]["updated_at"].as_str().unwrap()
    );
    // The order of fields is kept as written.
    let keys: Vec<&String> = config.as_object().unwrap().keys().collect();
    assert_eq!(keys[0], "adf_version");
    assert_eq!(keys.last().unwrap().as_str(), "future_field");
}

#[test]
fn config_writes_reject_new_violations_and_keep_the_file() {
    let (_dir, _path, mut file) = common::new_file("validate");
    let before = file.config().unwrap();
    let error = file
        .config_set_path(
            Caller::Owner,
            "model.temperature",
            ConfigAction::Set,
            json!(7),
        )
        .unwrap_err();
    assert!(
        matches!(error, StoreError::ConfigRejected { .. }),
        "{error}"
    );
    assert!(
        file.config_set_path(Caller::Owner, "state", ConfigAction::Set, json!("error"))
            .is_err()
    );
    assert!(
        file.config_set_path(Caller::Owner, "id", ConfigAction::Set, json!("other"))
            .is_err()
    );
    assert_eq!(file.config().unwrap(), before);
    // An already-invalid config stays editable (§5).
    file.connection()
        .execute(
            "UPDATE adf_config SET config_json = json_set(config_json, '$.state', 'bogus')",
            [],
        )
        .unwrap();
    file.config_set_path(
        Caller::Owner,
        "description",
        ConfigAction::Set,
        json!("still editable"),
    )
    .unwrap();
    assert_eq!(file.config().unwrap()["description"], "still editable");
    assert!(
        file.config_set_path(Caller::Agent, "description", ConfigAction::Set, json!("x"))
            .is_err()
    );
}

#[test]
fn def_23_missing_default_tools_are_backfilled_on_open() {
    let (_dir, path, file) = common::new_file("backfill");
    drop(file);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE adf_config SET config_json = json_remove(config_json, '$.tools[22]')
             WHERE json_extract(config_json, '$.tools[22].name') = 'loop_send'",
            [],
        )
        .unwrap();
    }
    let file = AdfFile::open(&path).unwrap();
    let tools = file.config().unwrap()["tools"].as_array().unwrap().clone();
    let loop_send = tools.iter().find(|t| t["name"] == "loop_send").unwrap();
    assert_eq!(loop_send["enabled"], true);
}

#[test]
fn sto_25_vec0_tables_work() {
    let (_dir, _path, file) = common::new_file("vec");
    let conn = file.connection();
    conn.execute_batch(
        "CREATE VIRTUAL TABLE local_embeddings USING vec0(embedding float[3]);
         INSERT INTO local_embeddings(rowid, embedding) VALUES (1, '[1,0,0]'), (2, '[0,1,0]'), (3, '[0.9,0.1,0]');",
    )
    .unwrap();
    let nearest: Vec<i64> = conn
        .prepare("SELECT rowid FROM local_embeddings WHERE embedding MATCH '[1,0,0]' ORDER BY distance LIMIT 2")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(nearest, vec![1, 3]);
}

fn registry(file: &AdfFile) -> Value {
    serde_json::from_slice(
        &file
            .file_read("skills-registry.json")
            .unwrap()
            .unwrap()
            .content,
    )
    .unwrap()
}

#[test]
fn prm_18_prm_19_prm_29_writing_a_skill_indexes_it_and_grants_nothing() {
    let (_dir, _path, mut file) = common::new_file("skills");
    let tools_before = file.config().unwrap()["tools"].clone();
    write(
        &mut file,
        Caller::Agent,
        "skills/pdf-tools/SKILL.md",
        "---\nname: pdf-tools\ndescription: Read and fill PDFs\nrequires: [sys_create_adf]\n---\n# PDF tools\n",
    )
    .unwrap();
    let registry = registry(&file);
    assert_eq!(
        registry["skills"]["pdf-tools"]["description"],
        "Read and fill PDFs"
    );
    assert_eq!(registry["skills"]["pdf-tools"]["enabled"], true);
    assert_eq!(
        file.config().unwrap()["tools"],
        tools_before,
        "PRM-19: no tool enabled by a skill"
    );
    assert!(
        file.file_list("").unwrap().iter().all(|f| !f.authorized),
        "PRM-19: nothing authorized"
    );
}

#[test]
fn prm_20_prm_22_prm_23_bounds_and_rejections() {
    let (_dir, _path, mut file) = common::new_file("bounds");
    write(
        &mut file,
        Caller::Agent,
        "skills/good/SKILL.md",
        "---\nname: good\ndescription: fine\n---\n",
    )
    .unwrap();
    write(
        &mut file,
        Caller::Agent,
        "skills/bad/SKILL.md",
        "---\nname: other\ndescription: x\n---\n",
    )
    .unwrap();
    write(
        &mut file,
        Caller::Agent,
        "skills/Bad_Dir/SKILL.md",
        "---\nname: Bad_Dir\ndescription: x\n---\n",
    )
    .unwrap();
    let big = format!(
        "---\nname: big\ndescription: x\n---\n{}",
        "x".repeat(70_000)
    );
    write(&mut file, Caller::Agent, "skills/big/SKILL.md", &big).unwrap();
    write(&mut file, Caller::Agent, "skills-state.json", "{bad").unwrap();
    let registry = registry(&file);
    assert_eq!(
        registry["skills"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        vec!["good"]
    );
    let rejected = registry["rejected"].as_array().unwrap();
    let paths: Vec<&str> = rejected
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    for expected in [
        "skills/bad/SKILL.md",
        "skills/Bad_Dir/SKILL.md",
        "skills/big/SKILL.md",
        "skills-state.json",
    ] {
        assert!(
            paths.contains(&expected),
            "{expected} not rejected: {paths:?}"
        );
    }
    // PRM-23: a flood of bad skills never displaces the good one.
    for i in 0..60 {
        write(
            &mut file,
            Caller::Agent,
            &format!("skills/bad{i}/SKILL.md"),
            "no front matter",
        )
        .unwrap();
    }
    let registry = self::registry(&file);
    assert!(registry["skills"]["good"].is_object());
    assert!(registry["rejected"].as_array().unwrap().len() <= adf_store::skills::MAX_REJECTED + 1);
}

#[test]
fn prm_24_muting_is_separate_and_the_registry_is_runtime_owned() {
    let (_dir, _path, mut file) = common::new_file("mute");
    write(
        &mut file,
        Caller::Agent,
        "skills/a/SKILL.md",
        "---\nname: a\ndescription: A\n---\n",
    )
    .unwrap();
    write(
        &mut file,
        Caller::Agent,
        "skills-state.json",
        r#"{"schema":1,"disabled":["a"]}"#,
    )
    .unwrap();
    assert_eq!(registry(&file)["skills"]["a"]["enabled"], false);
    assert_eq!(
        String::from_utf8(
            file.file_read("skills/a/SKILL.md")
                .unwrap()
                .unwrap()
                .content
        )
        .unwrap(),
        "---\nname: a\ndescription: A\n---\n",
        "muting does not touch skills/"
    );
    assert!(protected(write(
        &mut file,
        Caller::Agent,
        "skills-registry.json",
        "{}"
    )));
    assert!(protected(write(
        &mut file,
        Caller::Owner,
        "skills-registry.json",
        "{}"
    )));
}

#[test]
fn sto_10_unknown_columns_survive_updates() {
    let (_dir, _path, mut file) = common::new_file("columns");
    file.connection()
        .execute("ALTER TABLE adf_files ADD COLUMN x_extra TEXT", [])
        .unwrap();
    write(&mut file, Caller::Agent, "a.txt", "1").unwrap();
    file.connection()
        .execute(
            "UPDATE adf_files SET x_extra = 'keep me' WHERE path = 'a.txt'",
            [],
        )
        .unwrap();
    write(&mut file, Caller::Agent, "a.txt", "2").unwrap();
    let extra: String = file
        .connection()
        .query_row(
            "SELECT x_extra FROM adf_files WHERE path = 'a.txt'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(extra, "keep me");
}

#[test]
fn inspect_mode_refuses_writes() {
    let (_dir, path, file) = common::new_file("ro-mode");
    file.close().unwrap();
    let mut file = AdfFile::inspect(&path).unwrap();
    assert!(matches!(
        write(&mut file, Caller::Owner, "a.txt", "x"),
        Err(StoreError::ReadOnly { .. })
    ));
}

#[test]
fn shared_config_is_reused_until_the_config_changes() {
    let (_dir, path, mut file) = common::new_file("shared-config");
    let first = file.config_shared().unwrap();
    assert!(
        std::sync::Arc::ptr_eq(&first, &file.config_shared().unwrap()),
        "reads reuse the parse"
    );
    write(&mut file, Caller::Owner, "notes.txt", "x").unwrap();
    assert!(
        std::sync::Arc::ptr_eq(&first, &file.config_shared().unwrap()),
        "writes to other tables keep the parse"
    );
    file.config_set_path(
        Caller::Owner,
        "description",
        ConfigAction::Set,
        json!("mine"),
    )
    .unwrap();
    assert_eq!(
        file.config_shared().unwrap()["description"],
        "mine",
        "own writes invalidate"
    );
    let other = rusqlite::Connection::open(&path).unwrap();
    let mine = file.config_shared().unwrap();
    other
        .execute(
            "INSERT INTO adf_logs (level, message, created_at) VALUES ('info', 'elsewhere', 0)",
            [],
        )
        .unwrap();
    assert!(
        std::sync::Arc::ptr_eq(&mine, &file.config_shared().unwrap()),
        "another connection's commit that leaves the config text alone keeps the parse"
    );
    other
        .execute(
            "UPDATE adf_config SET config_json = json_set(config_json, '$.description', 'theirs')",
            [],
        )
        .unwrap();
    assert_eq!(
        file.config_shared().unwrap()["description"],
        "theirs",
        "another connection's config change invalidates"
    );
}

/// Log rows as the store's `log` stores them under a given `config.logging`.
fn logged_under(logging: serde_json::Value, rows: &[(&str, &str)]) -> Vec<(String, String)> {
    let (_dir, path, mut file) = common::new_file("logging");
    file.config_set_path(Caller::Owner, "logging", ConfigAction::Set, logging)
        .unwrap();
    for (level, origin) in rows {
        file.log(&adf_store::NewLog {
            level,
            origin: Some(origin),
            message: "m",
            ..Default::default()
        })
        .unwrap();
    }
    let reader = rusqlite::Connection::open(&path).unwrap();
    let mut stmt = reader
        .prepare("SELECT level, origin FROM adf_logs ORDER BY id")
        .unwrap();
    stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn aud_20_default_level_is_the_minimum_stored() {
    let rows = [("debug", "a"), ("info", "a"), ("warn", "a"), ("error", "a")];
    let stored = logged_under(json!({ "default_level": "warn" }), &rows);
    let levels: Vec<&str> = stored.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(levels.len(), 2);
    assert!(levels.contains(&"warn") && levels.contains(&"error"));
    // Without a default_level the minimum is info.
    assert_eq!(logged_under(json!({}), &rows).len(), 3);
}

#[test]
fn aud_21_rules_match_origin_globs_and_the_first_match_wins() {
    let logging = json!({
        "default_level": "debug",
        "rules": [
            { "origin": "serving", "min_level": "error" },
            { "origin": "lambda*", "min_level": "warn" },
            { "origin": "lambda_x", "min_level": "debug" }
        ]
    });
    let rows = [
        ("warn", "serving"),
        ("error", "serving"),
        ("info", "lambda"),
        ("info", "lambda_x"),
        ("warn", "lambda_x"),
        ("debug", "executor"),
    ];
    let mut stored = logged_under(logging, &rows);
    stored.sort();
    let expect = |l: &str, o: &str| (l.to_owned(), o.to_owned());
    assert_eq!(
        stored,
        vec![
            expect("debug", "executor"),
            expect("error", "serving"),
            expect("warn", "lambda_x"),
        ]
    );
}

#[test]
fn aud_22_max_rows_bounds_the_table_and_null_is_unbounded() {
    let rows: Vec<(&str, &str)> = (0..25).map(|_| ("info", "o")).collect();
    assert_eq!(logged_under(json!({ "max_rows": 10 }), &rows).len(), 10);
    assert_eq!(logged_under(json!({ "max_rows": null }), &rows).len(), 25);
}

#[test]
fn aud_22_a_large_bound_is_trimmed_in_steps_and_keeps_the_newest_rows() {
    let max = 1000_u64;
    let step = adf_store::log_trim_step(max);
    assert_eq!(step, 10, "a hundredth of the bound");
    assert_eq!(adf_store::log_trim_step(10), 1, "a small bound is exact");
    assert_eq!(
        adf_store::log_trim_step(1_000_000),
        100,
        "at most 100 apart"
    );
    let (_dir, path, mut file) = common::new_file("logtrim");
    file.config_set_path(
        Caller::Owner,
        "logging",
        ConfigAction::Set,
        json!({ "max_rows": max }),
    )
    .unwrap();
    let reader = rusqlite::Connection::open(&path).unwrap();
    let (mut fullest, mut trims) = (0_u64, 0);
    for _ in 0..(max + 3 * step) {
        let id = file
            .log(&adf_store::NewLog {
                level: "info",
                origin: Some("o"),
                message: "m",
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        let (rows, oldest): (i64, i64) = reader
            .query_row("SELECT count(*), min(id) FROM adf_logs", [], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .unwrap();
        let rows = u64::try_from(rows).unwrap();
        // Whatever was trimmed is the oldest: the rows left run unbroken up to this one.
        assert_eq!(
            oldest,
            id - i64::try_from(rows).unwrap() + 1,
            "after row {id}"
        );
        assert!(rows < max + step, "{rows} rows after row {id}");
        fullest = fullest.max(rows);
        if id > i64::try_from(max).unwrap() && id % i64::try_from(step).unwrap() == 0 {
            assert_eq!(rows, max, "a trim leaves exactly max_rows (row {id})");
            trims += 1;
        }
    }
    assert_eq!(fullest, max + step - 1, "rows between trims are kept");
    assert!(trims >= 3);
}

#[test]
fn aud_20_held_log_rows_pass_the_filter_wait_in_memory_and_are_written_in_order() {
    let (_dir, path, mut file) = common::new_file("held");
    let reader = rusqlite::Connection::open(&path).unwrap();
    let messages = || -> Vec<String> {
        let mut stmt = reader
            .prepare("SELECT message FROM adf_logs WHERE origin = 'held' ORDER BY id")
            .unwrap();
        stmt.query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let entry = |level, message| adf_store::NewLog {
        level,
        origin: Some("held"),
        message,
        ..Default::default()
    };
    file.hold_logs();
    for (level, message) in [("info", "a"), ("debug", "below the minimum"), ("warn", "b")] {
        assert_eq!(file.log(&entry(level, message)).unwrap(), None);
    }
    assert!(messages().is_empty(), "held rows are not in the file yet");
    let held = file.release_held_logs();
    assert_eq!(held.len(), 2, "the filter applies when a row is held");
    file.write_held_logs(&held).unwrap();
    assert!(
        file.log(&entry("info", "c")).unwrap().is_some(),
        "released: written at once"
    );
    assert_eq!(messages(), ["a", "b", "c"]);
}

/// `adf_*` string literals in the runtime's sources that are not meta keys, with why.
const NOT_META_KEYS: [(&str, &str); 5] = [
    ("adf_session", "the daemon's session cookie name"),
    ("adf_legacy_cleanup", "a savepoint name in the migrations"),
    ("adf_archive", "a legacy table the migrations drop"),
    ("adf_peers", "a legacy table the migrations drop"),
    ("adf_future", "a table name a store unit test refuses"),
];

fn rust_sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn met_01_every_adf_key_the_runtime_names_is_in_the_registry() {
    // Tables and indexes are the other `adf_*` names in the code; read them off a new file.
    let (_dir, _path, file) = common::new_file("met01");
    let schema_names: Vec<String> = file
        .connection()
        .prepare("SELECT name FROM sqlite_master")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let tool_names: Vec<&str> = adf_store::defaults::DEFAULT_TOOLS
        .iter()
        .map(|(name, ..)| *name)
        .collect();
    let registry: Vec<&str> = adf_store::meta::REGISTRY.iter().map(|(k, _)| *k).collect();

    let crates_dir = common::repo_root().join("crates");
    let mut sources = Vec::new();
    for krate in std::fs::read_dir(&crates_dir).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            rust_sources(&src, &mut sources);
        }
    }
    assert!(sources.len() > 50, "found only {} sources", sources.len());
    let mut strays = Vec::new();
    for path in &sources {
        let text = std::fs::read_to_string(path).unwrap();
        for (start, _) in text.match_indices("\"adf_") {
            let name: String = text[start + 1..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // A bare "adf_" is the prefix itself (prefix checks), not a key.
            if name.len() > "adf_".len()
                && text[start + 1 + name.len()..].starts_with('"')
                && !registry.contains(&name.as_str())
                && !schema_names.contains(&name)
                && !tool_names.contains(&name.as_str())
                && !NOT_META_KEYS.iter().any(|(n, _)| *n == name)
            {
                strays.push(format!("{}: {name}", path.display()));
            }
        }
    }
    assert!(
        strays.is_empty(),
        "adf_* names outside the registry: {strays:#?}"
    );
}
