//! How rows are keyed and stored (§0.2, §3.3, §13.2): `seq` is one sequence across loops, never
//! reused or renumbered, only a compaction summary carries `ord`, structured columns hold JSON,
//! and new audit snapshots use the current sources and read back whole.

use adf_store::NewLoopRow;
use serde_json::json;

use crate::common::new_file;

fn text_row<'a>(
    loop_name: &'a str,
    role: &'a str,
    content: &'a serde_json::Value,
) -> NewLoopRow<'a> {
    NewLoopRow {
        r#loop: loop_name,
        role,
        content,
        model: None,
        tokens: None,
    }
}

#[test]
fn sto_20_seq_is_unique_across_loops_and_loops_select_their_own_rows() {
    let (_dir, _path, mut file) = new_file("loops");
    let content = json!([{ "type": "text", "text": "x" }]);
    let mut main_seqs = Vec::new();
    let mut inner_seqs = Vec::new();
    for i in 0..4 {
        let target = if i % 2 == 0 { "main" } else { "inner" };
        let seq = file
            .loop_append(&text_row(target, "user", &content))
            .unwrap();
        if target == "main" {
            main_seqs.push(seq);
        } else {
            inner_seqs.push(seq);
        }
    }
    let read_main: Vec<i64> = file
        .loop_rows("main")
        .unwrap()
        .iter()
        .map(|r| r.seq)
        .collect();
    let read_inner: Vec<i64> = file
        .loop_rows("inner")
        .unwrap()
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(read_main, main_seqs);
    assert_eq!(read_inner, inner_seqs);
    assert!(
        read_main.iter().all(|s| !read_inner.contains(s)),
        "{read_main:?} / {read_inner:?}"
    );
}

#[test]
fn sto_21_sto_22_compaction_keeps_survivors_seq_and_orders_the_summary_by_ord() {
    let (_dir, _path, mut file) = new_file("compact");
    let content = json!([{ "type": "text", "text": "turn" }]);
    let mut seqs = Vec::new();
    for i in 0..6 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        seqs.push(file.loop_append(&text_row("main", role, &content)).unwrap());
    }
    let max_before = *seqs.iter().max().unwrap();
    let (removed, kept) = seqs.split_at(4);

    let (summary_seq, outcome) = file
        .loop_compact_apply("main", removed, "[Loop Compacted] four rows", false)
        .unwrap();
    assert_eq!(outcome.removed, 4);

    let rows = file.loop_rows("main").unwrap();
    let order: Vec<i64> = rows.iter().map(|r| r.seq).collect();
    // The summary is a new row (a seq above every earlier one) that sorts before the survivors,
    // which keep their seqs.
    assert!(
        summary_seq > max_before,
        "summary seq {summary_seq} reuses an old one"
    );
    assert_eq!(order, [&[summary_seq][..], kept].concat());
    let summary = &rows[0];
    assert_eq!(summary.ord, Some(kept[0] - 1));
    assert!(
        rows[1..].iter().all(|r| r.ord.is_none()),
        "only the summary carries ord"
    );

    // A row appended after compaction continues the sequence and sorts last.
    let next = file
        .loop_append(&text_row("main", "user", &content))
        .unwrap();
    assert!(next > summary_seq);
    let last = file.loop_rows("main").unwrap().last().map(|r| r.seq);
    assert_eq!(last, Some(next));
}

#[test]
fn sto_09_structured_columns_hold_json_text() {
    use adf_store::messages::Mailbox;
    use adf_store::tasks::NewTask;
    use adf_store::timers::NewTimer;

    let (_dir, path, mut file) = new_file("json-columns");
    let mut row = serde_json::Map::new();
    row.insert("from".into(), json!("did:key:sender"));
    row.insert("content".into(), json!("hello"));
    row.insert("received_at".into(), json!(1));
    row.insert(
        "attachments".into(),
        json!([{ "name": "a.txt", "size": 3 }]),
    );
    row.insert("meta".into(), json!({ "k": "v" }));
    file.message_insert(Mailbox::Inbox, &row, None).unwrap();
    row.remove("received_at");
    row.insert("to".into(), json!("did:key:recipient"));
    row.insert("created_at".into(), json!(1));
    file.message_insert(Mailbox::Outbox, &row, None).unwrap();
    let schedule = json!({ "mode": "interval", "every_ms": 60_000 });
    let scope = json!(["system"]);
    file.timer_insert(&NewTimer {
        schedule: &schedule,
        next_wake_at: 60_000,
        payload: None,
        scope: &scope,
        lambda: None,
        warm: false,
        locked: false,
        r#loop: None,
    })
    .unwrap();
    let args = json!({ "path": "x.md" });
    let approval = json!({ "reason": "write" });
    file.task_create(&NewTask {
        tool: "fs_write",
        args: &args,
        status: "pending_approval",
        origin: None,
        requires_authorization: false,
        executor_managed: false,
        approval_meta: Some(&approval),
        r#loop: None,
    })
    .unwrap();
    drop(file);

    let conn = rusqlite::Connection::open(&path).unwrap();
    for (table, column) in [
        ("adf_inbox", "attachments"),
        ("adf_inbox", "meta"),
        ("adf_outbox", "attachments"),
        ("adf_outbox", "meta"),
        ("adf_timers", "schedule_json"),
        ("adf_tasks", "args"),
        ("adf_tasks", "approval_meta"),
    ] {
        let (rows, valid): (i64, i64) = conn
            .query_row(
                &format!("SELECT COUNT(*), COALESCE(SUM(json_valid({column})), 0) FROM {table}"),
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((rows, valid), (1, 1), "{table}.{column}");
    }
}

#[test]
fn aud_09_aud_12_aud_26_new_snapshots_use_current_sources_and_read_back_whole() {
    use adf_store::messages::Mailbox;
    use adf_store::{Caller, ConfigAction, FileWrite};

    let (_dir, _path, mut file) = new_file("audit-sources");
    for kind in ["inbox", "outbox", "files"] {
        file.config_set_path(
            Caller::Owner,
            &format!("context.audit.{kind}"),
            ConfigAction::Set,
            json!(true),
        )
        .unwrap();
    }
    // A file, deleted with `audit.files` on: its snapshot holds path, base64 content, mime, size.
    let bytes = b"hello \xff audit";
    file.file_write(Caller::Agent, "notes/a.bin", bytes, &FileWrite::default())
        .unwrap();
    file.file_delete(Caller::Agent, "notes/a.bin").unwrap();
    // A message into each mailbox, with its ALF form audited.
    let alf = json!({ "id": "alf_1", "payload": { "content": "hi" } });
    let mut row = serde_json::Map::new();
    row.insert("from".into(), json!("did:key:a"));
    row.insert("content".into(), json!("hi"));
    row.insert("received_at".into(), json!(1));
    file.message_insert(Mailbox::Inbox, &row, Some(("alf_1", &alf)))
        .unwrap();
    row.remove("received_at");
    row.insert("to".into(), json!("did:key:b"));
    row.insert("created_at".into(), json!(1));
    file.message_insert(Mailbox::Outbox, &row, Some(("alf_1", &alf)))
        .unwrap();
    // And a loop clear.
    let content = json!([{ "type": "text", "text": "x" }]);
    file.loop_append(&text_row("main", "user", &content))
        .unwrap();
    file.loop_clear("main", true).unwrap();

    let audits = file.audit_list().unwrap();
    let mut sources: Vec<&str> = audits.iter().map(|a| a.source.as_str()).collect();
    sources.sort_unstable();
    // AUD-09: the legacy `loop`, `inbox` and `outbox` sources are never written.
    assert_eq!(
        sources,
        ["file", "inbox_message", "loop:main", "outbox_message"]
    );

    // AUD-12/AUD-26: the owner's read decodes the file snapshot whole.
    let snapshot = audits.iter().find(|a| a.source == "file").unwrap();
    assert_eq!(snapshot.r#ref.as_deref(), Some("notes/a.bin"));
    let blob = file.audit_data(snapshot.id).unwrap();
    assert_eq!(blob["path"], "notes/a.bin");
    assert_eq!(blob["size"], json!(bytes.len()));
    assert!(blob.get("mime_type").is_some(), "{blob}");
    let decoded = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        blob["content_base64"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(decoded, bytes);
    let message = audits.iter().find(|a| a.source == "inbox_message").unwrap();
    assert_eq!(file.audit_data(message.id).unwrap(), alf);
}
