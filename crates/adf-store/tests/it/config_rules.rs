//! Config and skills-registry rules the store owns: loading an invalid config (§5), the audit
//! precedence (§5.19), the runtime-owned skills registry (§5.1) and the `adf check` advice on
//! unsigned messages to a public agent (§8.5).
use crate::common;

use std::sync::{Arc, Mutex};

use adf_store::{AdfFile, Caller, ConfigAction, FileWrite};
use serde_json::{Value, json};

fn write(file: &mut AdfFile, path: &str, text: &str) {
    file.file_write(Caller::Agent, path, text.as_bytes(), &FileWrite::default())
        .unwrap();
}

fn registry_text(file: &AdfFile) -> String {
    String::from_utf8(
        file.file_read(adf_store::skills::REGISTRY_PATH)
            .unwrap()
            .unwrap()
            .content,
    )
    .unwrap()
}

fn registry_protection(file: &AdfFile) -> String {
    file.connection()
        .query_row(
            "SELECT protection FROM adf_files WHERE path = ?1",
            [adf_store::skills::REGISTRY_PATH],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn prm_21_rejected_is_omitted_when_every_package_is_valid_and_listed_otherwise() {
    let (_dir, _path, mut file) = common::new_file("rejected");
    write(
        &mut file,
        "skills/notes/SKILL.md",
        "---\nname: notes\ndescription: Take notes\n---\n",
    );
    write(
        &mut file,
        "skills-state.json",
        r#"{"schema":1,"disabled":[]}"#,
    );
    let registry: Value = serde_json::from_str(&registry_text(&file)).unwrap();
    assert!(registry["skills"]["notes"].is_object(), "{registry}");
    assert!(
        registry.get("rejected").is_none(),
        "a valid-only set carries no rejected key: {registry}"
    );

    // One bad package: the top-level array names it with a reason.
    write(
        &mut file,
        "skills/broken/SKILL.md",
        "---\nname: other\ndescription: x\n---\n",
    );
    let registry: Value = serde_json::from_str(&registry_text(&file)).unwrap();
    let rejected = registry["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 1, "{registry}");
    assert_eq!(rejected[0]["path"], "skills/broken/SKILL.md");
    assert!(
        rejected[0]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{registry}"
    );

    // Fixing it drops the key again.
    file.file_delete(Caller::Agent, "skills/broken/SKILL.md")
        .unwrap();
    let registry: Value = serde_json::from_str(&registry_text(&file)).unwrap();
    assert!(registry.get("rejected").is_none(), "{registry}");
}

#[test]
fn prm_25_an_agent_written_registry_is_taken_over_on_open() {
    let (_dir, path, mut file) = common::new_file("takeover");
    write(
        &mut file,
        "skills/notes/SKILL.md",
        "---\nname: notes\ndescription: Take notes\n---\n",
    );
    let indexed = registry_text(&file);
    // A file written elsewhere: the agent put its own text at the registry path and left it
    // unprotected (the store API would refuse this write, so it is arranged in SQL).
    file.connection()
        .execute(
            "UPDATE adf_files SET content = CAST('{\"skills\":{\"evil\":{}}}' AS BLOB),
               protection = 'none' WHERE path = ?1",
            [adf_store::skills::REGISTRY_PATH],
        )
        .unwrap();
    file.close().unwrap();

    let file = AdfFile::open(&path).unwrap();
    assert_eq!(registry_protection(&file), "read_only");
    assert_eq!(
        registry_text(&file),
        indexed,
        "the agent's text is replaced by the index"
    );
    assert!(
        file.open_report()
            .notes
            .iter()
            .any(|n| n.contains("skills-registry.json")),
        "{:?}",
        file.open_report().notes
    );
}

/// Collects the level and message of every event (a `tracing` subscriber just for this test).
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<(tracing::Level, String)>>>);

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl tracing::Subscriber for Events {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn cfg_04_a_config_failing_validation_is_loaded_with_a_warning() {
    let (_dir, path, mut file) = common::new_file("invalid");
    file.config_set_path(
        Caller::Owner,
        "triggers.on_inbox.targets",
        ConfigAction::Append,
        json!({ "scope": "agent" }),
    )
    .unwrap();
    // Corrupted outside the runtime (a validated write would refuse the bad scope).
    file.connection()
        .execute(
            "UPDATE adf_config SET config_json =
               json_set(config_json, '$.triggers.on_inbox.targets[0].scope', 'planet') WHERE id = 1",
            [],
        )
        .unwrap();
    file.close().unwrap();

    let events = Events::default();
    let opened = tracing::subscriber::with_default(events.clone(), || AdfFile::open(&path));
    let file = opened.expect("an invalid config does not refuse the file");
    assert_eq!(
        file.config().unwrap()["triggers"]["on_inbox"]["targets"][0]["scope"],
        "planet",
        "the config is loaded as stored"
    );
    let violations = &file.open_report().config_violations;
    assert!(
        violations
            .iter()
            .any(|v| v.path == "triggers.on_inbox.targets[].scope"),
        "{violations:?}"
    );
    let events = events.0.lock().unwrap();
    assert!(
        events
            .iter()
            .any(|(level, text)| *level == tracing::Level::WARN
                && text.contains("triggers.on_inbox.targets[].scope")),
        "{events:?}"
    );
}

#[test]
fn cfg_04_a_valid_config_opens_without_violations() {
    let (_dir, path, file) = common::new_file("valid");
    file.close().unwrap();
    let file = AdfFile::open(&path).unwrap();
    assert!(
        file.open_report().config_violations.is_empty(),
        "{:?}",
        file.open_report().config_violations
    );
}

fn audited_file_count(file: &AdfFile) -> i64 {
    file.connection()
        .query_row(
            "SELECT COUNT(*) FROM adf_audit WHERE source = 'file'",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

fn set(file: &mut AdfFile, path: &str, value: Value) {
    file.config_set_path(Caller::Owner, path, ConfigAction::Set, value)
        .unwrap();
}

#[test]
fn cfg_32_context_audit_wins_over_top_level_audit_without_merging() {
    let (_dir, _path, mut file) = common::new_file("audit");
    set(&mut file, "context.audit", json!({ "files": false }));
    set(&mut file, "audit", json!({ "files": true, "loop": true }));
    write(&mut file, "a.txt", "one");
    file.file_delete(Caller::Agent, "a.txt").unwrap();
    assert_eq!(
        audited_file_count(&file),
        0,
        "context.audit.files=false wins"
    );
    assert!(
        !file.audit_enabled("loop").unwrap(),
        "not merged: context.audit has no loop key, so the top-level loop=true is not used"
    );

    // Without context.audit, the top-level section applies.
    let mut config = file.config().unwrap();
    config["context"].as_object_mut().unwrap().remove("audit");
    file.config_replace(Caller::Owner, config).unwrap();
    write(&mut file, "b.txt", "two");
    file.file_delete(Caller::Agent, "b.txt").unwrap();
    assert_eq!(audited_file_count(&file), 1);
}

#[test]
fn stl_23_no_one_can_declare_a_loop_named_main_not_even_the_owner() {
    let (_dir, _path, mut file) = common::new_file("main-loop");
    let before = file.config().unwrap();
    for name in ["main", "Main"] {
        let refused = file.config_set_path(
            Caller::Owner,
            "loops",
            ConfigAction::Set,
            json!([{ "name": name, "goal": "Shadow main.", "enabled": true }]),
        );
        assert!(refused.is_err(), "{name}: {refused:?}");
        assert_eq!(file.config().unwrap(), before, "nothing changed");
    }
    file.config_set_path(
        Caller::Owner,
        "loops",
        ConfigAction::Set,
        json!([{ "name": "mainly", "goal": "Fine.", "enabled": true }]),
    )
    .unwrap();
}

#[test]
fn msg_18_check_warns_when_a_public_agent_accepts_unsigned_messages() {
    let advice = |report: &adf_store::check::CheckReport| {
        report
            .warnings()
            .filter(|f| f.message.contains("security.allow_unsigned"))
            .count()
    };
    let (_dir, path, mut file) = common::new_file("public");
    let set = |file: &mut AdfFile, key: &str, value: serde_json::Value| {
        file.config_set_path(Caller::Owner, key, ConfigAction::Set, value)
            .unwrap();
    };
    // Localhost (the default) with unsigned messages allowed (the default): nothing to say.
    assert_eq!(advice(&file.check().unwrap()), 0);
    set(&mut file, "messaging.visibility", json!("public"));
    let report = file.check().unwrap();
    assert_eq!(advice(&report), 1, "{:?}", report.findings);
    assert!(report.warnings().any(|f| f.rule == "§8.5"));
    // Refusing unsigned messages answers it; the default allow_unsigned counts as true.
    set(&mut file, "security.allow_unsigned", json!(false));
    assert_eq!(advice(&file.check().unwrap()), 0);
    set(&mut file, "security", json!({ "level": 1 }));
    assert_eq!(advice(&file.check().unwrap()), 1);
    set(&mut file, "messaging.visibility", json!("lan"));
    assert_eq!(advice(&file.check().unwrap()), 0);
    drop(path);
}
