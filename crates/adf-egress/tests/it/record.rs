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

/// Whether every policy of this process refuses `api`'s port as a control API.
fn refused_here(api: SocketAddr) -> bool {
    adf_egress::Policy::default().is_control_api(api.ip(), api.port())
}

/// A stopped daemon's port goes back to the kernel's pool, and the next listener given it is
/// no control API: rule 2 forgets an address with its released (or dropped) registration (a
/// test process refused every earlier daemon's port for good, and a later test's own server
/// that drew one of them was never reached — the stl_04/srv_35 "WebSocket never connects"
/// flake).
#[test]
fn srv_22_a_released_or_dropped_registration_leaves_every_registry() {
    let home = tempfile::tempdir().unwrap();
    // Ports this test holds, so no other process serves on them meanwhile.
    let held_a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let held_b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (api_a, api_b) = (held_a.local_addr().unwrap(), held_b.local_addr().unwrap());
    assert!(!refused_here(api_a) && !refused_here(api_b));

    let record = home.path().join(RECORD_FILE);
    let released = adf_egress::control::register(&record, &[api_a]);
    // Two registrations of one address (a daemon that stopped, then another that got the same
    // port): releasing the first leaves the second's protection in place.
    let second = adf_egress::control::register(&record, &[api_a]);
    let dropped = adf_egress::control::register(&home.path().join("other.json"), &[api_b]);
    assert!(refused_here(api_a) && refused_here(api_b));
    let machine_record = released.machine_record().map(|p| p.to_path_buf());

    released.release();
    assert!(
        refused_here(api_a),
        "the second registration still holds it"
    );
    second.release();
    assert!(
        !refused_here(api_a),
        "released: no registry refuses the port"
    );
    assert!(read_record(&record).unwrap().is_empty());
    if let Some(path) = machine_record {
        assert!(!path.exists(), "{} outlived its release", path.display());
    }

    let home_record = home.path().join("other.json");
    assert!(!read_record(&home_record).unwrap().is_empty());
    drop(dropped);
    assert!(
        !refused_here(api_b),
        "dropped: no registry refuses the port"
    );
    assert!(read_record(&home_record).unwrap().is_empty());
}
