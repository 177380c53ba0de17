//! The machine-wide daemon record (issue 28 finding 5): every daemon of every runtime home
//! and user publishes its control API where every policy on this machine reads it; stale,
//! spoofed and malformed records cannot open a hole.
#![cfg(unix)]

use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use adf_egress::machine::{
    MAX_RECORD_BYTES, MachineEntry, RECORD_PREFIX, live_in, machine_dirs, pid_namespace, publish,
    start_time,
};
use adf_egress::{Policy, Url};

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

/// A private directory (0700, root's or this user's): a safe place for records.
fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn write_entry(dir: &Path, name: &str, entry: &MachineEntry) -> PathBuf {
    let path = dir.join(format!("{RECORD_PREFIX}{name}.json"));
    std::fs::write(&path, serde_json::to_vec(entry).unwrap()).unwrap();
    path
}

fn this_process(addrs: &[SocketAddr]) -> MachineEntry {
    MachineEntry {
        pid: std::process::id(),
        started: start_time(std::process::id()),
        pid_namespace: pid_namespace(),
        addrs: addrs.to_vec(),
    }
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

/// A process that runs until killed (`sleep`), as `uid` when given.
struct Sleeper(Child);

impl Sleeper {
    fn start(uid: Option<u32>) -> Self {
        let mut command = Command::new("sleep");
        command.arg("30");
        if let Some(uid) = uid {
            std::os::unix::process::CommandExt::uid(&mut command, uid);
        }
        Sleeper(command.spawn().unwrap())
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_published_record_is_read_by_every_reader_and_removed_when_dropped() {
    let dir = private_dir();
    let apis = [addr("127.0.0.1:7385"), addr("[::1]:7385")];
    let record = publish(&[dir.path().to_path_buf()], &apis).unwrap();
    let name = record.path().file_name().unwrap().to_string_lossy();
    assert!(name.starts_with(&format!("{RECORD_PREFIX}{}.", std::process::id())));
    // Readable by every user, written only by its owner.
    let mode = std::fs::metadata(record.path()).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o644);
    assert_eq!(live_in(&[dir.path().to_path_buf()]), apis.to_vec());
    // No staging file is left beside it.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    let path = record.path().to_path_buf();
    drop(record);
    assert!(!path.exists());
    assert!(live_in(&[dir.path().to_path_buf()]).is_empty());
}

#[test]
#[cfg(target_os = "linux")]
fn a_record_of_a_dead_or_reused_pid_is_ignored_and_its_owner_cleans_it_up() {
    let dir = private_dir();
    let mut finished = Command::new("true").spawn().unwrap();
    let dead_pid = finished.id();
    finished.wait().unwrap();
    let dead = write_entry(
        dir.path(),
        "dead",
        &MachineEntry {
            pid: dead_pid,
            started: None,
            pid_namespace: None,
            addrs: vec![addr("127.0.0.1:4001")],
        },
    );
    // A dead pid of another pid namespace (a container's daemon) cannot be judged from here:
    // it still counts, and stays.
    let foreign = write_entry(
        dir.path(),
        "other-namespace",
        &MachineEntry {
            pid: dead_pid,
            started: None,
            pid_namespace: Some("pid:[1]".to_owned()),
            addrs: vec![addr("127.0.0.1:4004")],
        },
    );
    // This pid runs, but it is not the process that wrote the record: it started later.
    let reused = write_entry(
        dir.path(),
        "reused",
        &MachineEntry {
            started: start_time(std::process::id()).map(|t| t.wrapping_sub(1)),
            ..this_process(&[addr("127.0.0.1:4002")])
        },
    );
    let live = write_entry(dir.path(), "live", &this_process(&[addr("127.0.0.1:4003")]));
    let mut found = live_in(&[dir.path().to_path_buf()]);
    found.sort();
    assert_eq!(found, vec![addr("127.0.0.1:4003"), addr("127.0.0.1:4004")]);
    assert!(foreign.exists());
    assert!(!dead.exists(), "a stale record of this user is deleted");
    assert!(!reused.exists(), "a record of a reused pid is stale too");
    assert!(live.exists());
}

/// A daemon that was killed but not yet reaped by its parent (a zombie) holds no socket: its
/// port may already be another listener's, so its record no longer counts.
#[test]
#[cfg(target_os = "linux")]
fn srv_22_a_record_of_a_killed_daemon_not_yet_reaped_is_ignored() {
    let dir = private_dir();
    let mut daemon = Sleeper::start(None);
    let pid = daemon.0.id();
    let started = start_time(pid);
    assert!(started.is_some(), "a running process has a start time");
    let record = write_entry(
        dir.path(),
        "zombie",
        &MachineEntry {
            pid,
            started,
            pid_namespace: pid_namespace(),
            addrs: vec![addr("127.0.0.1:4005")],
        },
    );
    assert_eq!(
        live_in(&[dir.path().to_path_buf()]),
        vec![addr("127.0.0.1:4005")]
    );
    daemon.0.kill().unwrap();
    // Not reaped: /proc still lists the pid, in state Z, until `Sleeper` waits for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap()
        .rsplit(')')
        .next()
        .is_some_and(|rest| rest.trim_start().starts_with('Z'))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{pid} never became a zombie"
        );
        std::thread::yield_now();
    }
    assert!(live_in(&[dir.path().to_path_buf()]).is_empty());
    assert!(!record.exists(), "a stale record of this user is deleted");
}

#[test]
#[cfg(target_os = "linux")]
fn another_users_record_is_honoured_and_only_removed_by_that_user() {
    let dir = private_dir();
    // Another user's live daemon: a process of that user and a record file it owns.
    let (other_uid, sleeper) = if is_root() {
        (65534, Sleeper::start(Some(65534)))
    } else {
        // Without root no file can be given away; pid 1 is another user's process, and
        // the record of it is still honoured.
        (0, Sleeper::start(None))
    };
    let pid = if is_root() { sleeper.0.id() } else { 1 };
    let entry = MachineEntry {
        pid,
        started: start_time(pid),
        pid_namespace: pid_namespace(),
        addrs: vec![addr("127.0.0.1:5001")],
    };
    let theirs = write_entry(dir.path(), "theirs", &entry);
    let dead_theirs = write_entry(
        dir.path(),
        "dead-theirs",
        &MachineEntry {
            pid,
            started: start_time(pid).map(|t| t + 1),
            pid_namespace: pid_namespace(),
            addrs: vec![addr("127.0.0.1:5002")],
        },
    );
    if is_root() {
        std::os::unix::fs::chown(&theirs, Some(other_uid), None).unwrap();
        std::os::unix::fs::chown(&dead_theirs, Some(other_uid), None).unwrap();
        assert_eq!(std::fs::metadata(&theirs).unwrap().uid(), other_uid);
    }
    assert_eq!(
        live_in(&[dir.path().to_path_buf()]),
        vec![addr("127.0.0.1:5001")]
    );
    if is_root() {
        assert!(
            dead_theirs.exists(),
            "another user's stale record is ignored, not deleted"
        );
    }
    drop(sleeper);
}

#[test]
fn a_directory_another_user_could_clean_out_is_never_used() {
    let good = private_dir();
    let shared = tempfile::tempdir().unwrap();
    // World-writable without the sticky bit: anyone could delete the record.
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let refused = publish(&[shared.path().to_path_buf()], &[addr("127.0.0.1:6001")]).unwrap_err();
    assert!(refused.to_string().contains("not sticky"), "{refused}");
    assert_eq!(
        std::fs::read_dir(shared.path()).unwrap().count(),
        0,
        "nothing left behind"
    );
    // The next directory is used instead.
    let record = publish(
        &[shared.path().to_path_buf(), good.path().to_path_buf()],
        &[addr("127.0.0.1:6001")],
    )
    .unwrap();
    assert!(record.path().starts_with(good.path()));
    // Sticky, like /tmp: only a file's owner may remove it, so the directory is safe.
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let sticky = publish(&[shared.path().to_path_buf()], &[addr("127.0.0.1:6002")]).unwrap();
    assert!(sticky.path().starts_with(shared.path()));
    drop(sticky);
    if is_root() {
        // A directory another user owns: its owner could delete any record in it.
        let owned = private_dir();
        std::os::unix::fs::chown(owned.path(), Some(65534), None).unwrap();
        let refused =
            publish(&[owned.path().to_path_buf()], &[addr("127.0.0.1:6003")]).unwrap_err();
        assert!(
            refused.to_string().contains("belongs to another user"),
            "{refused}"
        );
    }
}

#[test]
fn malformed_records_are_skipped_and_never_block_the_reader() {
    let dir = private_dir();
    let path = |name: &str| dir.path().join(format!("{RECORD_PREFIX}{name}.json"));
    std::fs::write(path("garbage"), "{not json").unwrap();
    std::fs::write(path("wrong-shape"), r#"{"pid":"x","addrs":[1]}"#).unwrap();
    let mut oversized = serde_json::to_vec(&this_process(&[addr("127.0.0.1:7001")])).unwrap();
    oversized.resize(MAX_RECORD_BYTES as usize + 10, b' ');
    std::fs::write(path("oversized"), oversized).unwrap();
    // A link under a record name to a valid record elsewhere is not followed.
    let elsewhere = private_dir();
    let target = write_entry(
        elsewhere.path(),
        "target",
        &this_process(&[addr("127.0.0.1:7002")]),
    );
    std::os::unix::fs::symlink(&target, path("link")).unwrap();
    std::fs::create_dir(path("a-directory")).unwrap();
    // A FIFO would block a reader that opened it for reading: it is skipped instead.
    let fifo = Command::new("mkfifo").arg(path("fifo")).status().unwrap();
    assert!(fifo.success());
    write_entry(
        dir.path(),
        "valid",
        &this_process(&[addr("127.0.0.1:7003")]),
    );
    // Not a record name at all: never read.
    std::fs::write(
        dir.path().join("other.json"),
        serde_json::to_vec(&this_process(&[addr("127.0.0.1:7004")])).unwrap(),
    )
    .unwrap();

    let dirs = vec![dir.path().to_path_buf()];
    let (done, read) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(live_in(&dirs)).unwrap());
    let found = read
        .recv_timeout(Duration::from_secs(20))
        .expect("the reader blocked on a planted file");
    assert_eq!(found, vec![addr("127.0.0.1:7003")]);
}

#[test]
fn a_daemon_in_the_machine_wide_record_is_refused_by_every_policy_but_its_mesh_routes() {
    // A port this test holds, so no other process can be serving on it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let api = listener.local_addr().unwrap();
    let policy = Policy::default();
    let control = Url::parse(&format!("http://127.0.0.1:{}/agents/x/stop", api.port())).unwrap();
    let inbox = Url::parse(&format!("http://127.0.0.1:{}/agents/x/inbox", api.port())).unwrap();
    let loopback = "127.0.0.1".parse().unwrap();
    assert!(
        policy
            .check_address(loopback, api.port(), "POST", &control)
            .is_ok(),
        "unrecorded, a loopback port is reachable (§5.6 rule 5)"
    );
    let record = publish(&machine_dirs(), &[api]).unwrap();
    let refused = policy
        .check_address(loopback, api.port(), "POST", &control)
        .unwrap_err();
    assert!(refused.contains("control API"), "{refused}");
    // Through another loopback spelling too.
    assert!(
        policy
            .check_address("127.0.0.2".parse().unwrap(), api.port(), "GET", &control)
            .is_err()
    );
    policy
        .check_address(loopback, api.port(), "POST", &inbox)
        .unwrap();
    drop(record);
    assert!(
        policy
            .check_address(loopback, api.port(), "POST", &control)
            .is_ok(),
        "the record is gone with the daemon"
    );
}
