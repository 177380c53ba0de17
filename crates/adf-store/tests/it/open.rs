//! Opening, refusing and closing files: the clean-close marker, sidecars, newer schemas, bad
//! files and the migration backup.
use crate::common;

use adf_store::{AdfFile, StoreError};

fn bytes(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn sto_46_clean_close_marker_and_no_sidecars() {
    let (dir, path, file) = common::new_file("close");
    file.close().unwrap();
    assert_eq!(
        common::files_like(dir.path(), "close"),
        vec!["close.adf"],
        "no -wal/-shm after close"
    );

    let before = bytes(&path);
    let file = AdfFile::open(&path).unwrap();
    assert!(file.open_report().clean_close);
    assert_eq!(
        file.open_report().integrity_check,
        None,
        "a clean file skips the integrity check"
    );
    // Until the first write the file is exactly as the clean close left it.
    assert!(file.meta_get("adf_clean_close").unwrap().is_some());
    file.close().unwrap();
    assert_eq!(
        bytes(&path),
        before,
        "a session that only reads leaves the file byte-identical"
    );

    let mut file = AdfFile::open(&path).unwrap();
    file.meta_set(adf_store::Caller::Agent, "note", "x", None)
        .unwrap();
    let marker_gone = file.meta_get("adf_clean_close").unwrap().is_none();
    // Simulate a crash after a write: the connection is never closed, so no marker is written.
    std::mem::forget(file);
    assert!(marker_gone, "the first write removes the marker");
    let reopened = AdfFile::open(&path).unwrap();
    assert!(!reopened.open_report().clean_close);
    assert_eq!(
        reopened.open_report().integrity_check,
        Some("integrity_check")
    );
    assert_eq!(reopened.meta_get("note").unwrap().unwrap().value, "x");
    reopened.close().unwrap();
    assert!(
        AdfFile::open(&path).unwrap().open_report().clean_close,
        "closing restores the marker"
    );
}

#[test]
fn sto_27_sto_28_sto_29_newer_schema_is_refused_and_untouched() {
    let (dir, path, file) = common::new_file("newer");
    drop(file);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE adf_meta SET value = '33' WHERE key = 'adf_schema_version'",
            [],
        )
        .unwrap();
    }
    let before = bytes(&path);
    for attempt in 0..2 {
        let error = if attempt == 0 {
            AdfFile::open(&path).unwrap_err()
        } else {
            AdfFile::inspect(&path).unwrap_err()
        };
        let message = error.to_string();
        assert!(
            matches!(
                error,
                StoreError::NewerSchema {
                    found: 33,
                    supported: 32,
                    ..
                }
            ),
            "{message}"
        );
        assert!(
            message.contains("33") && message.contains("32"),
            "{message}"
        );
        assert_eq!(bytes(&path), before, "byte-identical after a refused open");
        assert_eq!(common::files_like(dir.path(), "newer"), vec!["newer.adf"]);
    }
}

#[test]
fn bad_files_get_clear_errors_and_stay_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.adf");
    std::fs::write(&empty, b"").unwrap();
    let text = dir.path().join("text.adf");
    std::fs::write(&text, b"hello, I am not a database\n").unwrap();
    let (_keep, good, file) = common::new_file("good");
    file.close().unwrap();
    let truncated = dir.path().join("truncated.adf");
    let full = bytes(&good);
    std::fs::write(&truncated, &full[..full.len() / 2 + 100]).unwrap();
    let garbage_pages = dir.path().join("garbage.adf");
    let mut corrupt = full.clone();
    for byte in corrupt.iter_mut().skip(4096).take(8192) {
        *byte = 0xA5;
    }
    std::fs::write(&garbage_pages, &corrupt).unwrap();

    type Case<'a> = (&'a std::path::Path, fn(&StoreError) -> bool);
    let cases: [Case<'_>; 4] = [
        (&empty, |e| matches!(e, StoreError::EmptyFile { .. })),
        (&text, |e| matches!(e, StoreError::NotSqlite { .. })),
        (&truncated, |e| matches!(e, StoreError::Truncated { .. })),
        (&garbage_pages, |e| {
            matches!(e, StoreError::Corrupt { .. } | StoreError::NotSqlite { .. })
        }),
    ];
    for (path, expected) in cases {
        let before = bytes(path);
        for inspect in [false, true] {
            let result = if inspect {
                AdfFile::inspect(path)
            } else {
                AdfFile::open(path)
            };
            let error = result
                .err()
                .unwrap_or_else(|| panic!("{} opened", path.display()));
            assert!(expected(&error), "{}: {error}", path.display());
            assert!(error.to_string().len() < 300, "short error: {error}");
            assert_eq!(bytes(path), before, "{} changed", path.display());
        }
    }
    let stray: Vec<String> = common::files_like(dir.path(), "")
        .into_iter()
        .filter(|n| n.ends_with("-wal") || n.ends_with("-shm") || n.ends_with(".bak"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
    assert!(matches!(
        AdfFile::open(dir.path().join("missing.adf")),
        Err(StoreError::FileNotFound { .. })
    ));
    assert!(
        !dir.path().join("missing.adf").exists(),
        "opening never creates a file"
    );
}

#[test]
fn sqlite_without_adf_meta_is_not_an_adf_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    let before = bytes(&path);
    assert!(matches!(
        AdfFile::open(&path),
        Err(StoreError::NotAdf { .. })
    ));
    assert_eq!(bytes(&path), before);
}

#[test]
fn sto_30_migration_backup_removed_after_success() {
    let (dir, path) = common::copy_fixture("minimal-headless.adf");
    let file = AdfFile::open(&path).unwrap();
    assert_eq!(file.open_report().schema_found, 28);
    assert_eq!(file.open_report().migrated_steps, vec![29, 30, 31, 32]);
    assert_eq!(file.schema_version().unwrap(), 32);
    file.close().unwrap();
    assert_eq!(
        common::files_like(dir.path(), "minimal"),
        vec!["minimal-headless.adf"],
        "no .bak after success"
    );
}

#[test]
fn sto_30_failed_migration_keeps_backup_and_restores_original() {
    let (dir, path) = common::copy_fixture("minimal-headless.adf");
    {
        // A trigger that makes every schema bump fail stands in for any migration fault.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TRIGGER block_bump BEFORE UPDATE ON adf_meta WHEN NEW.key = 'adf_schema_version'
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
        )
        .unwrap();
    }
    let digest = common::content_digest(&path);
    let before = bytes(&path);
    let error = AdfFile::open(&path).unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::Migration {
                from: 28,
                to: 32,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(
        bytes(&path),
        before,
        "the original is restored byte for byte"
    );
    assert_eq!(common::content_digest(&path), digest);
    assert!(
        dir.path().join("minimal-headless.adf.bak").exists(),
        "the backup is kept on failure"
    );
}

#[test]
fn sto_06_open_close_of_a_current_file_changes_only_the_marker() {
    let (_dir, path, file) = common::new_file("stable");
    file.close().unwrap();
    let before = common::content_digest(&path);
    AdfFile::open(&path).unwrap().close().unwrap();
    let after = common::content_digest(&path);
    let strip = |digest: &str| -> Vec<String> {
        digest
            .lines()
            .filter(|l| !l.contains("adf_clean_close"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(strip(&before), strip(&after));
}

#[test]
fn inspect_never_writes() {
    let (dir, path) = common::copy_fixture("populated-runtime.adf");
    let before = bytes(&path);
    let file = AdfFile::inspect(&path).unwrap();
    assert_eq!(file.schema_version().unwrap(), 28);
    let report = file.check().unwrap();
    assert!(
        !report.is_ok(),
        "an unmigrated file is reported as needing migration"
    );
    drop(file);
    assert_eq!(bytes(&path), before);
    assert_eq!(
        common::files_like(dir.path(), "populated"),
        vec!["populated-runtime.adf"]
    );
}

#[test]
fn met_04_identity_keys_are_readonly_again_after_open() {
    let (_dir, path, file) = common::new_file("rekey");
    drop(file);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("INSERT INTO adf_meta (key, value, protection) VALUES ('adf_did', 'did:key:z6Mkx', 'none')", [])
            .unwrap();
        conn.execute(
            "UPDATE adf_meta SET protection = 'none' WHERE key = 'adf_name'",
            [],
        )
        .unwrap();
    }
    let file = AdfFile::open(&path).unwrap();
    assert_eq!(
        file.meta_get("adf_did").unwrap().unwrap().protection,
        "readonly"
    );
    assert_eq!(
        file.meta_get("adf_name").unwrap().unwrap().protection,
        "readonly"
    );
}

#[test]
fn sto_11_met_05_unknown_meta_keys_survive() {
    let (_dir, path, file) = common::new_file("unknown");
    drop(file);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("INSERT INTO adf_meta (key, value) VALUES ('runtime_other_x', '1'), ('zzz_custom', 'z')", [])
            .unwrap();
    }
    let mut file = AdfFile::open(&path).unwrap();
    file.config_set_path(
        adf_store::Caller::Owner,
        "description",
        adf_store::ConfigAction::Set,
        "d".into(),
    )
    .unwrap();
    file.close().unwrap();
    let file = AdfFile::open(&path).unwrap();
    assert_eq!(
        file.meta_get("runtime_other_x").unwrap().unwrap().value,
        "1"
    );
    assert_eq!(file.meta_get("zzz_custom").unwrap().unwrap().value, "z");
}

#[test]
fn met_11_store_handle_serializes_concurrent_increments() {
    let (_dir, path, file) = common::new_file("handle");
    file.close().unwrap();
    let handle = adf_store::StoreHandle::open(&path).unwrap();
    let workers: Vec<_> = (0..50)
        .map(|_| {
            let handle = handle.clone();
            std::thread::spawn(move || {
                handle
                    .call(|f| f.meta_increment(adf_store::Caller::Agent, "hits", 1.0))
                    .unwrap()
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    // MET-11: fifty concurrent increments from separate callers land as fifty.
    let value = handle
        .call(|f| Ok(f.meta_get("hits")?.map(|e| e.value)))
        .unwrap();
    assert_eq!(value.as_deref(), Some("50"));
    handle.close().unwrap();
    assert!(
        !adf_store::AdfFile::open(&path)
            .unwrap()
            .open_report()
            .notes
            .iter()
            .any(|n| n.contains("integrity"))
    );
}
