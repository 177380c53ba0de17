//! Bad input through the `adf` binary: refused commands leave the file byte-identical, a
//! too-deep config is refused, reported and repairable, managed registry keys point at the
//! right command, read-only files are read but never written, damaged files are reported.
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use assert_cmd::Command;

struct Sandbox {
    _dir: tempfile::TempDir,
    home: PathBuf,
    agents: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let agents = dir.path().join("agents");
        std::fs::create_dir_all(&agents).unwrap();
        Self {
            _dir: dir,
            home,
            agents,
        }
    }

    fn adf(&self) -> Command {
        let mut cmd = Command::cargo_bin("adf").unwrap();
        cmd.env("ADF_HOME", &self.home);
        cmd
    }

    /// Runs `adf` with `args` (the file path replaces `{}`), returning success, stdout, stderr.
    fn run(&self, args: &[&str], file: &Path) -> (bool, String, String) {
        let file = file.to_str().unwrap();
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "{}" { file } else { a })
            .collect();
        let out = self.adf().args(&args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// A new, cleanly closed agent.
    fn agent(&self, name: &str) -> PathBuf {
        let path = self.agents.join(format!("{name}.adf"));
        let (ok, _, stderr) = self.run(&["new", "{}"], &path);
        assert!(ok, "{stderr}");
        path
    }
}

fn sidecars(path: &Path) -> Vec<PathBuf> {
    ["-wal", "-shm"]
        .iter()
        .map(|suffix| PathBuf::from(format!("{}{suffix}", path.display())))
        .filter(|p| p.exists())
        .collect()
}

fn assert_same(path: &Path, before: &[u8], what: &str) {
    let after = std::fs::read(path).unwrap();
    assert!(after == before, "{what}: the file's bytes changed");
    assert!(sidecars(path).is_empty(), "{what}: {:?}", sidecars(path));
}

#[test]
fn config_set_refuses_a_path_deeper_than_a_parser_reads_and_check_and_set_repair_one() {
    let sandbox = Sandbox::new();
    let path = sandbox.agent("deep");
    let before = std::fs::read(&path).unwrap();
    let deep = vec!["a"; 130].join(".");
    let (ok, stdout, stderr) = sandbox.run(&["config", "set", "{}", &deep, "1"], &path);
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("segments"), "{stderr}");
    assert_same(&path, &before, "deep config path");

    // A config stored that deep by an older adf: reported, and repairable by replacing the key.
    {
        let other = adf_store::test_support::OtherConnection::open(&path).unwrap();
        let rows = other.tables().rows("adf_config").unwrap();
        let text = rows[0]["config_json"].as_str().unwrap();
        let nested = "{\"a\":".repeat(130) + "1" + &"}".repeat(130);
        other
            .tables()
            .set_config_text(&format!("{{\"a\":{nested},{}", &text[1..]))
            .unwrap();
    }
    let (ok, stdout, stderr) = sandbox.run(&["check", "{}"], &path);
    assert!(!ok);
    assert!(
        stdout.contains("config nested 131 levels deep"),
        "{stdout}{stderr}"
    );
    let (ok, _, stderr) = sandbox.run(&["config", "get", "{}", "name"], &path);
    assert!(!ok);
    assert!(stderr.contains("adf config set"), "{stderr}");
    let (ok, _, stderr) = sandbox.run(&["config", "set", "{}", "a", "null"], &path);
    assert!(ok, "{stderr}");
    let (_, stdout, _) = sandbox.run(&["check", "{}"], &path);
    assert!(!stdout.contains("config nested"), "{stdout}");
    let (ok, stdout, stderr) = sandbox.run(&["config", "get", "{}", "name"], &path);
    assert!(ok && stdout.trim() == "deep", "{stdout}{stderr}");
}

#[test]
fn owner_meta_set_of_managed_registry_keys_points_at_the_right_command() {
    let sandbox = Sandbox::new();
    let path = sandbox.agent("keys");
    let before = std::fs::read(&path).unwrap();
    for (key, pointer) in [
        ("adf_did", "adf claim"),
        ("adf_owner_did", "adf claim"),
        ("adf_did_history", "adf claim"),
        ("adf_runtime_did", "adf claim"),
        ("adf_handle", "adf config set"),
        ("adf_name", "adf config set"),
    ] {
        let (ok, _, stderr) = sandbox.run(&["meta", "set", "{}", key, "x"], &path);
        assert!(!ok, "{key} was set");
        assert!(
            stderr.contains(pointer) && stderr.contains("--force"),
            "{key}: {stderr}"
        );
        let (ok, _, stderr) = sandbox.run(&["meta", "rm", "{}", key], &path);
        assert!(!ok, "{key} was removed");
        assert!(stderr.contains(pointer), "{key}: {stderr}");
        assert_same(&path, &before, key);
    }
    // --force is the owner saying they mean it; ordinary keys never needed it.
    let (ok, _, stderr) = sandbox.run(
        &["meta", "set", "{}", "adf_handle", "other", "--force"],
        &path,
    );
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = sandbox.run(&["meta", "set", "{}", "status", "busy"], &path);
    assert!(ok, "{stderr}");
}

const READERS: &[&[&str]] = &[
    &["info", "{}"],
    &["check", "{}"],
    &["files", "{}"],
    &["cat", "{}", "README.md"],
    &["meta", "get", "{}"],
    &["config", "get", "{}", "name"],
    &["loop", "{}"],
    &["inbox", "{}"],
    &["timers", "{}"],
    &["tasks", "{}"],
    &["logs", "{}"],
];

const WRITERS: &[&[&str]] = &[
    &["put", "{}", "x.txt", "/dev/null"],
    &["meta", "set", "{}", "k", "v"],
    &["config", "set", "{}", "description", "x"],
    &["rm", "{}", "README.md"],
];

/// Reads work and writes fail naming the file, with nothing written or left beside it.
fn reads_work_and_writes_refuse(sandbox: &Sandbox, path: &Path, what: &str) {
    let before = std::fs::read(path).unwrap();
    for args in READERS {
        let (ok, stdout, stderr) = sandbox.run(args, path);
        // `check` of a fresh file may report warnings; it must run, not abort.
        let ran = ok || (args[0] == "check" && stdout.contains("error(s)"));
        assert!(ran, "{what} {args:?}: {stderr}");
        assert_same(path, &before, &format!("{what} {args:?}"));
    }
    for args in WRITERS {
        let (ok, _, stderr) = sandbox.run(args, path);
        assert!(!ok, "{what} {args:?} wrote");
        assert!(
            stderr.contains(&path.display().to_string()) && stderr.contains("read-only"),
            "{what} {args:?}: {stderr}"
        );
        assert_same(path, &before, &format!("{what} {args:?}"));
    }
}

#[test]
fn read_only_files_and_directories_are_read_and_never_written() {
    // Tests run as root, whom the kernel lets write anyway: adf reads the permission bits
    // itself, so these cases exercise the behaviour for every user.
    let sandbox = Sandbox::new();
    let path = sandbox.agent("ro");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    reads_work_and_writes_refuse(&sandbox, &path, "read-only file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();

    std::fs::set_permissions(&sandbox.agents, std::fs::Permissions::from_mode(0o555)).unwrap();
    reads_work_and_writes_refuse(&sandbox, &path, "read-only directory");
    std::fs::set_permissions(&sandbox.agents, std::fs::Permissions::from_mode(0o755)).unwrap();

    // Writable again, the same write works.
    let (ok, _, stderr) = sandbox.run(&["meta", "set", "{}", "k", "v"], &path);
    assert!(ok, "{stderr}");
}

#[test]
fn sto_27_damaged_files_are_reported_not_fatal() {
    let sandbox = Sandbox::new();
    // No adf_config at all: a finding of `adf check`.
    let path = sandbox.agent("noconfig");
    adf_store::test_support::OtherConnection::open(&path)
        .unwrap()
        .tables()
        .drop_table("adf_config")
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    let (ok, stdout, stderr) = sandbox.run(&["check", "{}"], &path);
    assert!(!ok);
    assert!(stdout.contains("adf_config is missing"), "{stdout}{stderr}");
    assert_same(&path, &before, "check without adf_config");

    // A schema version far beyond ours is "newer", with the path, for every command.
    let path = sandbox.agent("future");
    let version = adf_store::test_support::RowsWhere::new("key", "adf_schema_version");
    let changed = adf_store::test_support::OtherConnection::open(&path)
        .unwrap()
        .tables()
        .set_column("adf_meta", &version, "value", &i64::MAX.into());
    assert_eq!(changed.unwrap(), 1);
    let before = std::fs::read(&path).unwrap();
    for args in [
        &["info", "{}"][..],
        &["check", "{}"],
        &["files", "{}"],
        &["meta", "set", "{}", "k", "v"],
    ] {
        let (ok, _, stderr) = sandbox.run(args, &path);
        assert!(!ok);
        assert!(
            stderr.contains("newer") && stderr.contains(&path.display().to_string()),
            "{args:?}: {stderr}"
        );
        assert_same(&path, &before, "newer schema");
    }
}
