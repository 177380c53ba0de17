//! `adf_store::test_support`, the fixture API other crates' tests use instead of SQL: names
//! are checked against the schema (so it is no SQL passthrough) and its writes go through the
//! file's own connection, so the store sees them as it sees another writer's.

use adf_store::StoreError;
use adf_store::test_support::{OtherConnection, RowsWhere, tables};
use serde_json::json;

use crate::common::new_file;

#[test]
fn names_outside_the_schema_are_refused_not_spliced() {
    let (_dir, _path, file) = new_file("names.adf");
    let t = tables(&file);
    let meta = RowsWhere::new("key", "adf_name");
    let refused = [
        t.rows("adf_meta; DROP TABLE adf_meta").unwrap_err(),
        t.rows("no_such_table").unwrap_err(),
        t.set_column("adf_meta", &meta, "value = 1, key", &json!("x"))
            .unwrap_err(),
        t.set_column(
            "adf_meta",
            &RowsWhere::new("1 OR 1", 1),
            "value",
            &json!("x"),
        )
        .unwrap_err(),
        t.insert_row("adf_meta", &[("key\" TEXT, \"x", json!("y"))])
            .unwrap_err(),
        t.create_table("local_x (a); DROP TABLE adf_meta; --", &["a"])
            .unwrap_err(),
        t.add_text_column("adf_meta", "x TEXT; DROP TABLE adf_meta")
            .unwrap_err(),
    ];
    for error in refused {
        assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");
    }
    assert!(t.count("adf_meta").unwrap() > 0, "adf_meta is still there");
}

#[test]
fn a_config_tampered_through_the_files_connection_is_what_the_store_reads_next() {
    let (_dir, _path, file) = new_file("tamper.adf");
    let before = file.config().unwrap();
    let mut edited = before.clone();
    edited["description"] = json!("edited by hand");
    tables(&file).set_config_text(&edited.to_string()).unwrap();
    assert_eq!(file.config().unwrap()["description"], "edited by hand");
    assert_eq!(file.config_text().unwrap(), edited.to_string());
}

#[test]
fn another_connection_sees_and_changes_rows_and_the_log_reader_has_every_column() {
    let (_dir, path, file) = new_file("other.adf");
    let name = file.meta_get("adf_name").unwrap().unwrap().value;
    file.close().unwrap();
    let other = OtherConnection::open(&path).unwrap();
    let rows = other.tables().rows("adf_meta").unwrap();
    assert!(
        rows.iter()
            .any(|row| row["key"] == "adf_name" && row["value"] == name)
    );
    let changed = other
        .tables()
        .set_column(
            "adf_meta",
            &RowsWhere::new("key", "adf_name"),
            "value",
            &json!("renamed"),
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(other);
    let file = adf_store::AdfFile::open(&path).unwrap();
    assert_eq!(file.meta_get("adf_name").unwrap().unwrap().value, "renamed");
    let snapshot = OtherConnection::open_immutable(&path)
        .unwrap()
        .tables()
        .snapshot()
        .unwrap();
    assert!(
        snapshot["adf_meta"]
            .iter()
            .any(|row| row["key"] == "adf_name" && row["value"] == "renamed")
    );
}
