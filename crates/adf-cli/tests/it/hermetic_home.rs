//! A test build never runs against the user's runtime home (issue 30, finding 9): on a machine
//! whose user has an owner identity in `~/.adf`, a test agent that inherited it got a signing
//! key and its `msg_send` wrote rows a clean machine never writes. The `adf` binary the tests
//! run is built with adf-runtime's `hermetic-home`, so without an `ADF_HOME` of the test's own
//! it uses a temporary home, never `$HOME/.adf`.

use assert_cmd::Command;

/// `adf owner show` with the given `HOME` and `ADF_HOME` (unset when `None`).
fn owner_show(home: &std::path::Path, adf_home: Option<&std::path::Path>) -> std::process::Output {
    let mut cmd = Command::cargo_bin("adf").unwrap();
    cmd.env("HOME", home).env_remove("ADF_LOG");
    match adf_home {
        Some(dir) => cmd.env("ADF_HOME", dir),
        None => cmd.env_remove("ADF_HOME"),
    };
    cmd.args(["owner", "show"]).output().unwrap()
}

#[test]
fn a_test_build_never_uses_the_owner_identity_in_the_users_home() {
    let user = tempfile::tempdir().unwrap();
    let real_home = user.path().join(".adf");
    let created = Command::cargo_bin("adf")
        .unwrap()
        .env("ADF_HOME", &real_home)
        .env_remove("ADF_LOG")
        .args(["owner", "init"])
        .write_stdin("")
        .output()
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    let created = String::from_utf8_lossy(&created.stdout).into_owned();
    let did = created
        .split_whitespace()
        .find(|w| w.starts_with("did:key:"))
        .unwrap_or_else(|| panic!("no DID in {created}"))
        .to_owned();
    let files_before: Vec<_> = std::fs::read_dir(&real_home)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();

    // Named explicitly (as any test names its own home), the identity is found.
    let shown = owner_show(std::path::Path::new("/nonexistent"), Some(&real_home));
    assert!(shown.status.success(), "{shown:?}");
    assert!(String::from_utf8_lossy(&shown.stdout).contains(&did));

    // As the user's default home — `ADF_HOME` unset, or naming `$HOME/.adf` — it is not.
    for adf_home in [None, Some(real_home.as_path())] {
        let shown = owner_show(user.path(), adf_home);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&shown.stdout),
            String::from_utf8_lossy(&shown.stderr)
        );
        assert!(!shown.status.success(), "ADF_HOME {adf_home:?}: {all}");
        assert!(!all.contains(&did), "ADF_HOME {adf_home:?}: {all}");
        assert!(
            all.contains("no owner identity"),
            "ADF_HOME {adf_home:?}: {all}"
        );
        assert!(
            !all.contains(&real_home.display().to_string()),
            "ADF_HOME {adf_home:?} named the user's home: {all}"
        );
    }
    let files_after: Vec<_> = std::fs::read_dir(&real_home)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files_before, files_after, "the user's home was written");
}
