//! Local message tools (`msg_read`, `msg_list`, `msg_update`, `msg_delete`) against the
//! populated reference fixture: inbox `bQGgCokqa8` (unread, mesh, thread thr-1) and
//! `3zR0SxkMOu` (read, telegram); outbox `biRVWTR71Z` (pending, thr-1), `HmfallhNRN`
//! (delivered) and `Uo035VXSlu` (failed).
use crate::common;

use std::path::{Path, PathBuf};

use adf_runtime::tools::ErrorCode;
use adf_store::messages::{Mailbox, MessageFilter};
use adf_store::test_support::{OtherConnection, RowsWhere, Tables, tables};
use adf_store::{AdfFile, Caller as StoreCaller, ConfigAction};
use common::{call, code, digest, enable, model, refused};
use serde_json::{Value, json};

const UNREAD: &str = "bQGgCokqa8";
const TELEGRAM: &str = "3zR0SxkMOu";

fn fixture() -> (tempfile::TempDir, PathBuf, AdfFile) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("populated.adf");
    std::fs::copy(common::fixture("populated-runtime.adf"), &path).unwrap();
    let file = AdfFile::open(&path).unwrap();
    (dir, path, file)
}

/// Changes rows of the closed file as another writer (test setup the tools cannot do), then
/// reopens it.
fn with_other_writer(path: &Path, file: AdfFile, change: impl FnOnce(Tables<'_>)) -> AdfFile {
    file.close().unwrap();
    change(OtherConnection::open(path).unwrap().tables());
    AdfFile::open(path).unwrap()
}

fn inbox_status(file: &AdfFile, id: &str) -> Option<String> {
    file.message(Mailbox::Inbox, id)
        .unwrap()
        .map(|row| row["status"].as_str().unwrap().to_owned())
}

fn ids(file: &AdfFile, mailbox: Mailbox) -> Vec<String> {
    let mut ids: Vec<String> = file
        .messages(mailbox, &MessageFilter::default(), None)
        .unwrap()
        .iter()
        .map(|row| row["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn audit_rows(file: &AdfFile) -> i64 {
    tables(file).count("adf_audit").unwrap()
}

#[test]
fn msg_35_read_returns_unread_marks_them_read_and_strips_the_original() {
    let (_dir, path, file) = fixture();
    let mut file = with_other_writer(&path, file, |tables| {
        let original = json!({"platform": "telegram", "update_id": 7}).to_string();
        let row = RowsWhere::new("id", "3zR0SxkMOu");
        let changed = tables.set_column("adf_inbox", &row, "original_message", &json!(original));
        assert_eq!(changed.unwrap(), 1);
    });
    let read = call(&mut file, &model(), "msg_read", json!({})).unwrap();
    let read = read.as_array().unwrap();
    assert_eq!(read.len(), 1);
    let message = &read[0];
    assert_eq!(message["id"], json!(UNREAD));
    assert_eq!(
        message["status"],
        json!("unread"),
        "returned as it was read"
    );
    assert_eq!(message["content"], json!("Hello from a peer"));
    assert_eq!(message["from"], json!("did:key:z6MkSenderGolden"));
    assert_eq!(
        message["meta"],
        json!({"priority": "high"}),
        "JSON text parsed"
    );
    assert!(message.get("original_message").is_none());
    assert_eq!(inbox_status(&file, UNREAD).as_deref(), Some("read"));
    // Reading again: nothing unread is left.
    assert_eq!(
        call(&mut file, &model(), "msg_read", json!({})).unwrap(),
        json!([])
    );

    // Read messages newest first, with a limit; reading read rows changes nothing.
    let before = digest(&file);
    let newest = call(
        &mut file,
        &code(),
        "msg_read",
        json!({"status": "read", "limit": 1}),
    )
    .unwrap();
    assert_eq!(newest.as_array().unwrap().len(), 1);
    assert_eq!(newest[0]["id"], json!(TELEGRAM));
    assert!(newest[0].get("original_message").is_none());
    assert_eq!(newest[0]["source_context"], json!({"chat_id": 12345}));
    assert_eq!(digest(&file), before);

    let full = call(
        &mut file,
        &code(),
        "msg_read",
        json!({"status": "read", "include_original": true}),
    )
    .unwrap();
    let full = full.as_array().unwrap();
    assert_eq!(full.len(), 2);
    assert_eq!(
        full[0]["original_message"],
        json!({"platform": "telegram", "update_id": 7})
    );
    assert_eq!(full[1]["original_message"], Value::Null);

    let error = call(
        &mut file,
        &model(),
        "msg_read",
        json!({"status": "deleted"}),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert_eq!(digest(&file), before);
}

#[test]
fn msg_36_list_counts_by_status() {
    let (_dir, _path, mut file) = fixture();
    assert_eq!(
        call(&mut file, &model(), "msg_list", json!({})).unwrap(),
        json!({"unread": 1, "read": 1, "archived": 0, "total": 2})
    );
    call(
        &mut file,
        &model(),
        "msg_update",
        json!({"message_ids": TELEGRAM, "status": "archived"}),
    )
    .unwrap();
    assert_eq!(
        call(&mut file, &code(), "msg_list", json!({})).unwrap(),
        json!({"unread": 1, "read": 0, "archived": 1, "total": 2})
    );
}

#[test]
fn msg_37_update_takes_one_id_an_array_or_the_ids_alias() {
    let (_dir, _path, mut file) = fixture();
    assert_eq!(
        call(
            &mut file,
            &model(),
            "msg_update",
            json!({"message_ids": UNREAD, "status": "read"})
        )
        .unwrap(),
        json!("Marked 1 message as read.")
    );
    assert_eq!(inbox_status(&file, UNREAD).as_deref(), Some("read"));
    assert_eq!(
        call(
            &mut file,
            &model(),
            "msg_update",
            json!({"message_ids": [UNREAD, TELEGRAM, UNREAD], "status": "archived"})
        )
        .unwrap(),
        json!("Marked 2 messages as archived.")
    );
    assert_eq!(inbox_status(&file, TELEGRAM).as_deref(), Some("archived"));
    assert_eq!(
        call(
            &mut file,
            &code(),
            "msg_update",
            json!({"ids": [TELEGRAM], "status": "read"})
        )
        .unwrap(),
        json!("Marked 1 message as read.")
    );
    assert_eq!(inbox_status(&file, TELEGRAM).as_deref(), Some("read"));
}

#[test]
fn msg_37_delete_only_removes_archived_messages() {
    let (_dir, _path, mut file) = fixture();
    let error = refused(
        &mut file,
        &model(),
        "msg_update",
        json!({"message_ids": UNREAD, "status": "delete"}),
    );
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert!(
        error
            .message
            .contains("only archived messages can be deleted"),
        "{error}"
    );
    assert!(error.message.contains("status unread"), "{error}");

    call(
        &mut file,
        &model(),
        "msg_update",
        json!({"message_ids": TELEGRAM, "status": "archived"}),
    )
    .unwrap();
    // One archived and one not: all-or-nothing, nothing deleted.
    let archived = digest(&file);
    let error = call(
        &mut file,
        &model(),
        "msg_update",
        json!({"message_ids": [TELEGRAM, UNREAD], "status": "delete"}),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert_eq!(digest(&file), archived);

    assert_eq!(
        call(
            &mut file,
            &model(),
            "msg_update",
            json!({"message_ids": [TELEGRAM], "status": "delete"})
        )
        .unwrap(),
        json!("Deleted 1 archived message.")
    );
    assert_eq!(inbox_status(&file, TELEGRAM), None);
    assert_eq!(ids(&file, Mailbox::Inbox), vec![UNREAD.to_owned()]);
}

#[test]
fn msg_37_bad_ids_and_statuses_change_nothing() {
    let (_dir, _path, mut file) = fixture();
    let before = digest(&file);
    let cases = [
        (
            json!({"message_ids": [UNREAD, "nope"], "status": "archived"}),
            ErrorCode::NotFound,
        ),
        (
            json!({"message_ids": "nope", "status": "read"}),
            ErrorCode::NotFound,
        ),
        (
            json!({"message_ids": [], "status": "read"}),
            ErrorCode::InvalidInput,
        ),
        (
            json!({"message_ids": [""], "status": "read"}),
            ErrorCode::InvalidInput,
        ),
        (
            json!({"message_ids": [UNREAD], "ids": [UNREAD], "status": "read"}),
            ErrorCode::InvalidInput,
        ),
        (json!({"status": "read"}), ErrorCode::InvalidInput),
        (json!({"message_ids": UNREAD}), ErrorCode::InvalidInput),
        (
            json!({"message_ids": UNREAD, "status": "unread"}),
            ErrorCode::InvalidInput,
        ),
        (
            json!({"message_ids": 42, "status": "read"}),
            ErrorCode::InvalidInput,
        ),
    ];
    for (args, code) in cases {
        let error = call(&mut file, &model(), "msg_update", args.clone()).unwrap_err();
        assert_eq!(error.code, code, "{args}: {error}");
    }
    assert_eq!(digest(&file), before);
    assert_eq!(inbox_status(&file, UNREAD).as_deref(), Some("unread"));
}

#[test]
fn sto_10_status_updates_preserve_unknown_columns() {
    let (_dir, path, file) = fixture();
    let mut file = with_other_writer(&path, file, |tables| {
        tables.add_text_column("adf_inbox", "x_extra").unwrap();
        for row in tables.rows("adf_inbox").unwrap() {
            let extra = json!(format!("keep-{}", row["id"].as_str().unwrap()));
            let this_row = RowsWhere::new("id", row["id"].clone());
            tables
                .set_column("adf_inbox", &this_row, "x_extra", &extra)
                .unwrap();
        }
    });
    let extra = |file: &AdfFile, id: &str| -> String {
        let rows = tables(file).rows("adf_inbox").unwrap();
        let row = rows.iter().find(|row| row["id"] == id).unwrap();
        row["x_extra"].as_str().unwrap().to_owned()
    };
    call(
        &mut file,
        &model(),
        "msg_update",
        json!({"message_ids": [UNREAD, TELEGRAM], "status": "archived"}),
    )
    .unwrap();
    assert_eq!(extra(&file, UNREAD), format!("keep-{UNREAD}"));
    assert_eq!(extra(&file, TELEGRAM), format!("keep-{TELEGRAM}"));
    call(
        &mut file,
        &model(),
        "msg_update",
        json!({"message_ids": UNREAD, "status": "read"}),
    )
    .unwrap();
    assert_eq!(extra(&file, UNREAD), format!("keep-{UNREAD}"));
    // The unknown column is shown to readers as it is.
    let read = call(&mut file, &model(), "msg_read", json!({"status": "read"})).unwrap();
    assert_eq!(read[0]["x_extra"], json!(format!("keep-{UNREAD}")));
    assert_eq!(extra(&file, UNREAD), format!("keep-{UNREAD}"));
}

#[test]
fn msg_38_delete_needs_a_supported_filter() {
    let (_dir, _path, mut file) = fixture();
    enable(&mut file, "msg_delete");
    let before = digest(&file);
    let cases = [
        json!({"source": "inbox", "filter": {}}),
        json!({"source": "inbox", "filter": {"status": null, "from": ""}}),
        json!({"source": "outbox", "filter": {"from": "did:key:z6MkOther"}}),
        json!({"source": "outbox", "filter": {"source": "mesh"}}),
        json!({"source": "outbox", "filter": {"status": "failed", "source": "mesh"}}),
        json!({"source": "inbox", "filter": {"sender": "x"}}),
        json!({"source": "inbox", "filter": {"status": "pending"}}),
        json!({"source": "outbox", "filter": {"status": "unread"}}),
        json!({"source": "inbox", "filter": {"before": "yesterday"}}),
        json!({"source": "archive", "filter": {"status": "read"}}),
        json!({"source": "inbox"}),
    ];
    for args in cases {
        let error = call(&mut file, &model(), "msg_delete", args.clone()).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidInput, "{args}: {error}");
    }
    let error = call(
        &mut file,
        &model(),
        "msg_delete",
        json!({"source": "outbox", "filter": {"from": "x"}}),
    )
    .unwrap_err();
    assert!(
        error.message.contains("not supported for outbox: from"),
        "{error}"
    );
    assert_eq!(digest(&file), before);
    assert_eq!(ids(&file, Mailbox::Outbox).len(), 3);
    assert_eq!(ids(&file, Mailbox::Inbox).len(), 2);
}

#[test]
fn msg_38_delete_applies_every_filter_field() {
    let (_dir, _path, mut file) = fixture();
    enable(&mut file, "msg_delete");
    let delete = |file: &mut AdfFile, args: Value| call(file, &code(), "msg_delete", args).unwrap();

    assert_eq!(
        delete(
            &mut file,
            json!({"source": "inbox", "filter": {"source": "slack"}})
        ),
        json!("No inbox messages matched the filter.")
    );
    // Conditions are a conjunction.
    assert_eq!(
        delete(
            &mut file,
            json!({"source": "inbox", "filter": {"from": "did:key:z6MkSenderGolden", "thread_id": "thr-2"}})
        ),
        json!("No inbox messages matched the filter.")
    );
    assert_eq!(
        delete(
            &mut file,
            json!({"source": "inbox", "filter": {"source": "telegram", "status": "read"}})
        ),
        json!("Deleted 1 message from the inbox.")
    );
    assert_eq!(ids(&file, Mailbox::Inbox), vec![UNREAD.to_owned()]);
    // `before` compares the outbox's created_at: only the pending row is older than 446746.
    assert_eq!(
        delete(
            &mut file,
            json!({"source": "outbox", "filter": {"before": 1_795_999_446_746_i64}})
        ),
        json!("Deleted 1 message from the outbox.")
    );
    assert_eq!(
        ids(&file, Mailbox::Outbox),
        vec!["HmfallhNRN".to_owned(), "Uo035VXSlu".to_owned()]
    );
    assert_eq!(
        delete(
            &mut file,
            json!({"source": "outbox", "filter": {"status": "failed"}})
        ),
        json!("Deleted 1 message from the outbox.")
    );
    assert_eq!(ids(&file, Mailbox::Outbox), vec!["HmfallhNRN".to_owned()]);
    assert_eq!(
        delete(
            &mut file,
            json!({"source": "inbox", "filter": {"thread_id": "thr-1", "before": 1_795_999_444_247_i64}})
        ),
        json!("Deleted 1 message from the inbox.")
    );
    assert!(ids(&file, Mailbox::Inbox).is_empty());
}

#[test]
fn msg_39_aud_10_message_deletes_write_no_audit_rows() {
    let (_dir, _path, mut file) = fixture();
    enable(&mut file, "msg_delete");
    for path in [
        "context.audit.inbox",
        "context.audit.outbox",
        "audit.inbox",
        "audit.outbox",
    ] {
        file.config_set_path(StoreCaller::Owner, path, ConfigAction::Set, json!(true))
            .unwrap();
    }
    assert!(file.audit_enabled("inbox").unwrap() && file.audit_enabled("outbox").unwrap());
    let audits = audit_rows(&file);
    call(
        &mut file,
        &model(),
        "msg_delete",
        json!({"source": "outbox", "filter": {"status": "delivered"}}),
    )
    .unwrap();
    call(
        &mut file,
        &model(),
        "msg_delete",
        json!({"source": "inbox", "filter": {"source": "telegram"}}),
    )
    .unwrap();
    call(
        &mut file,
        &model(),
        "msg_update",
        json!({"message_ids": UNREAD, "status": "archived"}),
    )
    .unwrap();
    call(
        &mut file,
        &model(),
        "msg_update",
        json!({"message_ids": UNREAD, "status": "delete"}),
    )
    .unwrap();
    assert!(ids(&file, Mailbox::Inbox).is_empty());
    assert_eq!(ids(&file, Mailbox::Outbox).len(), 2);
    assert_eq!(audit_rows(&file), audits, "no audit rows at delete time");
}

#[test]
fn tol_07_disabled_msg_delete_is_refused_for_unauthorized_code() {
    let (_dir, _path, mut file) = fixture();
    let error = refused(
        &mut file,
        &code(),
        "msg_delete",
        json!({"source": "inbox", "filter": {"status": "read"}}),
    );
    assert_eq!(error.code, ErrorCode::Disabled);
}
