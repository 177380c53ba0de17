//! The named reads and the owner's delete that the daemon's handlers and the CLI use instead
//! of SQL (views.rs, `file_delete_as_owner`).
use crate::common;

use adf_store::tables::NewLoopRow;
use adf_store::views::LogFilter;
use adf_store::{Caller, FileProtection, FileWrite, NewLog, StoreError};
use serde_json::json;

fn append(file: &mut adf_store::AdfFile, loop_name: &str, role: &str, text: &str) -> i64 {
    file.loop_append(&NewLoopRow {
        r#loop: loop_name,
        role,
        content: &json!([{ "type": "text", "text": text }]),
        model: None,
        tokens: None,
    })
    .unwrap()
}

#[test]
fn loop_counts_and_pages_follow_transcript_order() {
    let (_dir, _path, mut file) = common::new_file("views-loop");
    let first = append(&mut file, "main", "user", "one");
    let second = append(&mut file, "main", "assistant", "two");
    let third = append(&mut file, "main", "user", "three");
    append(&mut file, "side", "user", "elsewhere");

    assert_eq!(file.loop_row_count().unwrap(), 4);
    assert_eq!(file.loop_row_count_in("main").unwrap(), 3);
    assert_eq!(file.loop_row_count_in("nowhere").unwrap(), 0);

    let page = file.loop_page("main", 2, 1).unwrap();
    let seqs: Vec<i64> = page.iter().map(|row| row.seq).collect();
    assert_eq!(seqs, vec![second, third]);
    assert_eq!(page[0].role, "assistant");
    assert_eq!(
        page[1].content,
        json!([{ "type": "text", "text": "three" }])
    );
    assert!(page.iter().all(|row| row.r#loop == "main"));
    assert_eq!(file.loop_page("main", 1, 0).unwrap()[0].seq, first);
}

#[test]
fn logs_recent_filters_newest_first_and_logs_after_reads_on() {
    let (_dir, _path, mut file) = common::new_file("views-logs");
    let mut ids = Vec::new();
    for (origin, event, message) in [
        ("alpha", "start", "a1"),
        ("beta", "start", "b1"),
        ("alpha", "stop", "a2"),
    ] {
        let id = file
            .log(&NewLog {
                level: "warn",
                origin: Some(origin),
                event: Some(event),
                target: None,
                message,
                data: None,
                r#loop: None,
            })
            .unwrap()
            .expect("a warn row is kept at the default level");
        ids.push(id);
    }

    let alpha = LogFilter {
        origin: Some("alpha".into()),
        event: None,
    };
    let messages: Vec<Option<String>> = file
        .logs_recent(&alpha, 10)
        .unwrap()
        .into_iter()
        .map(|entry| entry.message)
        .collect();
    assert_eq!(messages, vec![Some("a2".to_owned()), Some("a1".to_owned())]);

    let starts = LogFilter {
        origin: None,
        event: Some("start".into()),
    };
    let newest_start = file.logs_recent(&starts, 1).unwrap();
    assert_eq!(newest_start.len(), 1);
    assert_eq!(newest_start[0].origin.as_deref(), Some("beta"));

    let after: Vec<i64> = file
        .logs_after(ids[0], 10)
        .unwrap()
        .iter()
        .map(|entry| entry.id)
        .collect();
    assert_eq!(after, vec![ids[1], ids[2]]);
    assert_eq!(file.logs_after(ids[0], 1).unwrap().len(), 1);
}

#[test]
fn record_counts_follow_the_records() {
    let (_dir, _path, mut file) = common::new_file("views-counts");
    let before = file.record_counts().unwrap();
    assert_eq!(before.files as usize, file.file_list("").unwrap().len());
    assert_eq!(before.loop_rows, 0);

    file.file_write(Caller::Owner, "notes.md", b"hi", &FileWrite::default())
        .unwrap();
    append(&mut file, "main", "user", "hello");
    let after = file.record_counts().unwrap();
    assert_eq!(after.files, before.files + 1);
    assert_eq!(after.loop_rows, 1);
    assert_eq!(after.inbox_unread, before.inbox_unread);
}

#[test]
fn owner_delete_of_a_protected_file_needs_force() {
    let (_dir, _path, mut file) = common::new_file("views-delete");
    for (path, level) in [
        ("kept.md", FileProtection::NoDelete),
        ("fixed.md", FileProtection::ReadOnly),
    ] {
        file.file_write(
            Caller::Owner,
            path,
            b"keep me",
            &FileWrite {
                mime_type: None,
                protection_if_new: Some(level),
            },
        )
        .unwrap();
    }
    file.file_write(Caller::Owner, "free.md", b"x", &FileWrite::default())
        .unwrap();

    for (path, level) in [("kept.md", "no_delete"), ("fixed.md", "read_only")] {
        match file.file_delete_as_owner(path, false) {
            Err(StoreError::Protected {
                target,
                level: found,
                ..
            }) => {
                assert_eq!(target, path);
                assert_eq!(found, level);
            }
            other => panic!("{path}: expected a protection refusal, got {other:?}"),
        }
        let entry = file
            .file_read(path)
            .unwrap()
            .expect("refused delete keeps the file");
        assert_eq!(entry.content, b"keep me");
        assert_eq!(entry.info.protection, level);
    }

    file.file_delete_as_owner("free.md", false).unwrap();
    assert!(file.file_read("free.md").unwrap().is_none());
    file.file_delete_as_owner("kept.md", true).unwrap();
    assert!(file.file_read("kept.md").unwrap().is_none());
    assert!(matches!(
        file.file_delete_as_owner("missing.md", true),
        Err(StoreError::NotFound { .. })
    ));
}

/// Two files filled alike: `main` is cleared in one and its rows removed one by one by `seq`
/// in the other, so a test can compare what the clear did with the per-row removal.
struct ClearBesideRemove {
    cleared: adf_store::AdfFile,
    removed: adf_store::AdfFile,
    _dirs: [tempfile::TempDir; 2],
}

impl ClearBesideRemove {
    fn new(name: &str, fill: impl Fn(&mut adf_store::AdfFile)) -> Self {
        let (cleared_dir, _, mut cleared) = common::new_file(&format!("clear-{name}"));
        fill(&mut cleared);
        let (removed_dir, _, mut removed) = common::new_file(&format!("remove-{name}"));
        fill(&mut removed);
        ClearBesideRemove {
            cleared,
            removed,
            _dirs: [cleared_dir, removed_dir],
        }
    }

    /// The clear's outcome, then the removal's.
    fn run(
        &mut self,
    ) -> (
        adf_store::transcript::RemoveOutcome,
        adf_store::transcript::RemoveOutcome,
    ) {
        let outcome = self.cleared.loop_clear("main", true).unwrap();
        let seqs: Vec<i64> = self
            .removed
            .loop_rows("main")
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect();
        (
            outcome,
            self.removed.loop_remove("main", &seqs, true).unwrap(),
        )
    }
}

/// A clear of the file's only loop (emptied without a `WHERE`, page by page) snapshots and
/// removes what removing every row by `seq` does, and the next row's `seq` is still above every
/// earlier one (AUTOINCREMENT keeps the highest).
#[test]
fn aud_08_sto_21_clear_of_the_only_loop_matches_loop_remove_and_never_reuses_seq() {
    let fill = |file: &mut adf_store::AdfFile| {
        for i in 0..40 {
            append(file, "main", "user", &format!("question {i}"));
            file.loop_append(&NewLoopRow {
                r#loop: "main",
                role: "assistant",
                content: &json!([{ "type": "text", "text": "an answer ".repeat(40) }]),
                model: Some("m-1"),
                tokens: Some(&json!({ "input": i, "output": 4 })),
            })
            .unwrap();
        }
        file.connection()
            .execute("UPDATE adf_loop SET created_at = 1000", [])
            .unwrap();
    };
    let mut pair = ClearBesideRemove::new("only-loop", fill);
    let highest = pair.cleared.loop_max_seq("main").unwrap();
    let (outcome, expected) = pair.run();
    let cleared = &mut pair.cleared;

    assert_eq!(outcome.removed, 80);
    assert_eq!(outcome.removed, expected.removed);
    assert_eq!(
        cleared.audit_data(outcome.audit_id.unwrap()).unwrap(),
        pair.removed.audit_data(expected.audit_id.unwrap()).unwrap()
    );
    assert_eq!(cleared.loop_row_count_in("main").unwrap(), 0);
    let integrity: String = cleared
        .connection()
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let next = append(cleared, "main", "user", "after the clear");
    assert!(next > highest, "seq {next} reused (highest was {highest})");
}

/// The owner's clear snapshots exactly what removing every row by `seq` snapshots: the same
/// rows, keys and values in the same order, a malformed row's text as a string included, and
/// leaves other loops alone.
#[test]
fn aud_08_loop_clear_snapshot_matches_loop_remove_of_every_row() {
    let fill = |file: &mut adf_store::AdfFile| {
        append(file, "main", "user", "one");
        file.loop_append(&NewLoopRow {
            r#loop: "main",
            role: "assistant",
            content: &json!([{ "type": "text", "text": "two \u{e9} \"quoted\"" }]),
            model: Some("m-1"),
            tokens: Some(&json!({ "input": 3, "output": 4 })),
        })
        .unwrap();
        let third = append(file, "main", "user", "three");
        file.connection()
            .execute(
                "UPDATE adf_loop SET content_json = 'not json {', ord = 0 WHERE seq = ?1",
                [third],
            )
            .unwrap();
        append(file, "side", "user", "elsewhere");
        // The two files are filled at different moments.
        file.connection()
            .execute("UPDATE adf_loop SET created_at = 1000", [])
            .unwrap();
    };
    let mut pair = ClearBesideRemove::new("all", fill);
    let (outcome, expected) = pair.run();
    let (cleared, removed) = (&mut pair.cleared, &mut pair.removed);

    assert_eq!(outcome.removed, 3);
    assert_eq!(outcome.removed, expected.removed);
    let blob = cleared.audit_data(outcome.audit_id.unwrap()).unwrap();
    let reference = removed.audit_data(expected.audit_id.unwrap()).unwrap();
    assert_eq!(blob, reference);
    assert_eq!(blob[0]["content_json"], json!("not json {"));
    assert_eq!(blob[2]["model"], json!("m-1"));
    let info = cleared.audit_list().unwrap();
    let theirs = removed.audit_list().unwrap();
    assert_eq!(
        (
            info[0].start_seq,
            info[0].end_seq,
            info[0].entry_count,
            info[0].size_bytes
        ),
        (
            theirs[0].start_seq,
            theirs[0].end_seq,
            theirs[0].entry_count,
            theirs[0].size_bytes
        )
    );
    assert_eq!(cleared.loop_row_count_in("main").unwrap(), 0);
    assert_eq!(cleared.loop_row_count_in("side").unwrap(), 1);
    assert_eq!(
        cleared.loop_clear("main", true).unwrap(),
        Default::default()
    );
}
