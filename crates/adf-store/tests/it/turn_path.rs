//! The store calls a turn makes on every step: the checkpoint record written in place, and
//! the files version the executor asks instead of reading the skills catalog.

use adf_store::{Caller, FileWrite, NewLoopRow};
use serde_json::json;

use crate::common::new_file;

#[test]
fn turn_checkpoint_set_creates_then_updates_in_place_with_registry_protection() {
    let (_dir, _path, mut file) = new_file("checkpoint");
    let key = "adf_runtime_turn_checkpoint:worker";
    file.turn_checkpoint_set(key, r#"{"status":"in_progress"}"#)
        .unwrap();
    let created = file.meta_get(key).unwrap().unwrap();
    assert_eq!(created.value, r#"{"status":"in_progress"}"#);
    let protection = created.protection;
    file.turn_checkpoint_set(key, r#"{"status":"completed"}"#)
        .unwrap();
    let updated = file.meta_get(key).unwrap().unwrap();
    assert_eq!(updated.value, r#"{"status":"completed"}"#);
    assert_eq!(
        updated.protection, protection,
        "the update keeps the protection"
    );
    // The same record through the general upsert gives the same row.
    file.meta_set_runtime(key, r#"{"status":"completed"}"#)
        .unwrap();
    assert_eq!(file.meta_get(key).unwrap().unwrap(), updated);
}

#[test]
fn turn_checkpoint_set_refuses_other_keys() {
    let (_dir, _path, mut file) = new_file("checkpoint-keys");
    for key in ["adf_name", "status", "adf_runtime_turn_checkpointx"] {
        let before = file.meta_get(key).unwrap();
        assert!(file.turn_checkpoint_set(key, "x").is_err(), "{key}");
        assert_eq!(file.meta_get(key).unwrap(), before, "{key} unchanged");
    }
}

#[test]
fn files_version_moves_with_file_writes_not_with_loop_rows() {
    let (_dir, _path, mut file) = new_file("files-version");
    let start = file.files_version().unwrap();
    assert!(start.is_some(), "the update hook is installed");
    file.loop_append(&NewLoopRow {
        r#loop: "main",
        role: "user",
        content: &json!([{ "type": "text", "text": "hi" }]),
        model: None,
        tokens: None,
    })
    .unwrap();
    assert_eq!(
        file.files_version().unwrap(),
        start,
        "a loop row is not a file"
    );
    file.file_write(Caller::Owner, "notes.md", b"x", &FileWrite::default())
        .unwrap();
    let after_write = file.files_version().unwrap();
    assert_ne!(after_write, start, "a file write moves the version");
}
