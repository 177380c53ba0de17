//! The daemon record in the runtime home: what other processes read to keep rule 2.

use std::net::SocketAddr;

use adf_egress::control::{RECORD_FILE, RecordError, read_record, remove_record, write_record};

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

#[test]
fn a_record_round_trips_privately_and_is_removed_on_shutdown() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("nested").join(RECORD_FILE);
    assert!(
        read_record(&path).unwrap().is_empty(),
        "no record, no addresses"
    );
    write_record(&path, &[addr("127.0.0.1:7385"), addr("[::1]:7385")]).unwrap();
    assert_eq!(
        read_record(&path).unwrap(),
        vec![addr("127.0.0.1:7385"), addr("[::1]:7385")]
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    // Rebinding replaces this process's entry instead of adding one.
    write_record(&path, &[addr("127.0.0.1:9000")]).unwrap();
    assert_eq!(read_record(&path).unwrap(), vec![addr("127.0.0.1:9000")]);
    remove_record(&path).unwrap();
    assert!(!path.exists());
    remove_record(&path).unwrap();
}

#[test]
fn another_daemons_entry_survives_this_ones_shutdown() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join(RECORD_FILE);
    // pid 0 is never a user process: an entry that can only be another daemon's.
    std::fs::write(
        &path,
        r#"{"daemons":[{"pid":0,"addrs":["127.0.0.1:4000"]}]}"#,
    )
    .unwrap();
    write_record(&path, &[addr("127.0.0.1:5000")]).unwrap();
    assert_eq!(
        read_record(&path).unwrap(),
        vec![addr("127.0.0.1:4000"), addr("127.0.0.1:5000")]
    );
    remove_record(&path).unwrap();
    assert_eq!(read_record(&path).unwrap(), vec![addr("127.0.0.1:4000")]);
}

#[test]
fn a_damaged_record_is_an_error_not_an_empty_list() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join(RECORD_FILE);
    std::fs::write(&path, "{not json").unwrap();
    assert!(matches!(
        read_record(&path),
        Err(RecordError::Malformed { .. })
    ));
}

#[test]
fn the_cached_read_follows_every_rewrite_of_the_record() {
    use adf_egress::control::recorded;
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join(RECORD_FILE);
    assert!(recorded(&path).is_empty(), "no record, no addresses");
    // Same length, written within the same instant: only the rewrite itself tells them apart.
    write_record(&path, &[addr("127.0.0.1:7385")]).unwrap();
    assert_eq!(recorded(&path), vec![addr("127.0.0.1:7385")]);
    assert_eq!(
        recorded(&path),
        vec![addr("127.0.0.1:7385")],
        "unchanged: the cache"
    );
    write_record(&path, &[addr("127.0.0.1:7386")]).unwrap();
    assert_eq!(recorded(&path), vec![addr("127.0.0.1:7386")]);
    remove_record(&path).unwrap();
    assert!(recorded(&path).is_empty(), "removed: nothing to refuse");
    std::fs::write(&path, "not json").unwrap();
    assert!(
        recorded(&path).is_empty(),
        "a damaged record counts as empty"
    );
}
