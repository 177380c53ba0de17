//! The `adf` file commands run as a user runs them: a real binary on real files.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use adf_store::test_support::{OtherConnection, RowsWhere};
use assert_cmd::Command;
use serde_json::{Value, json};

/// `adf` with its runtime home in `home`; each test makes `adf()` from its own fresh home.
fn adf_in(home: &Path) -> Command {
    let mut cmd = Command::cargo_bin("adf").unwrap();
    cmd.env("ADF_HOME", home);
    cmd
}

fn fixture(name: &str) -> PathBuf {
    crate::common::fixture(name)
}

fn json_of(output: &std::process::Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// Every row of every table, keyed by table, each row as text cells, read without writing.
fn rows(path: &Path) -> BTreeMap<String, Vec<BTreeMap<String, String>>> {
    let reader = OtherConnection::open_immutable(path).unwrap();
    reader.tables().snapshot().unwrap()
}

/// Statement count of the reference `iterdump` per table, to tie our comparison to the dump.
fn dump_row_counts(dump: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(dump).unwrap();
    let mut counts = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("INSERT INTO \"")) {
        let table = line["INSERT INTO \"".len()..]
            .split('"')
            .next()
            .unwrap()
            .to_owned();
        *counts.entry(table).or_insert(0) += 1;
    }
    counts
}

#[test]
fn sto_47_each_reference_fixture_migrates_and_keeps_every_row() {
    let home = tempfile::tempdir().unwrap();
    let adf = || adf_in(home.path());
    for name in ["minimal-headless", "studio-identity", "populated-runtime"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{name}.adf"));
        std::fs::copy(fixture(&format!("{name}.adf")), &path).unwrap();
        let before = rows(&path);
        let dumped = dump_row_counts(&fixture(&format!("{name}.dump.sql")));
        for (table, count) in &dumped {
            if table != "sqlite_sequence" {
                assert_eq!(
                    before[table].len(),
                    *count,
                    "{name}: {table} rows vs the reference dump"
                );
            }
        }

        let out = adf()
            .args(["--json", "migrate"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            json_of(&out)["migrated_steps"],
            serde_json::json!([29, 30, 31, 32])
        );
        let after = rows(&path);

        for (table, old_rows) in &before {
            if table == "adf_config" || table == "sqlite_sequence" {
                continue;
            }
            let new_rows = &after[table];
            for old in old_rows {
                let kept = new_rows.iter().any(|new| {
                    old.iter().all(|(column, value)| {
                        new.get(column) == Some(value)
                            // Rows the runtime itself rewrites on open: the clean-close marker is
                            // consumed, the schema bumped, registry protections corrected.
                            || (table == "adf_meta" && column != "key")
                    })
                });
                assert!(kept, "{name}: row lost from {table}: {old:?}");
            }
            assert!(
                new_rows.len() >= old_rows.len() - usize::from(table == "adf_meta"),
                "{name}: {table} shrank"
            );
        }
        // Config: every field the reference wrote is still there, unknown ones included.
        let old_config: Value =
            serde_json::from_str(&before["adf_config"][0]["config_json"]).unwrap();
        let new_config: Value =
            serde_json::from_str(&after["adf_config"][0]["config_json"]).unwrap();
        for (key, value) in old_config.as_object().unwrap() {
            if key != "tools" && key != "metadata" {
                assert_eq!(&new_config[key], value, "{name}: config.{key}");
            }
        }
        assert!(!dir.path().join(format!("{name}.adf.bak")).exists());

        let check = adf().args(["--json", "check"]).arg(&path).output().unwrap();
        let report = json_of(&check);
        assert_eq!(report["errors"], 0, "{name}: {report:#}");
        assert!(check.status.success());
    }
}

#[test]
fn check_exits_1_on_a_spec_violation() {
    let home = tempfile::tempdir().unwrap();
    let adf = || adf_in(home.path());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.adf");
    std::fs::copy(fixture("minimal-headless.adf"), &path).unwrap();
    adf().arg("migrate").arg(&path).assert().success();
    adf().arg("check").arg(&path).assert().success();
    {
        let other = OtherConnection::open(&path).unwrap();
        let tables = other.tables();
        let soul = RowsWhere::new("path", "soul.md");
        assert_eq!(tables.delete_rows("adf_files", &soul).unwrap(), 1);
        let bogus = [("key", json!("adf_bogus")), ("value", json!("x"))];
        tables.insert_row("adf_meta", &bogus).unwrap();
    }
    let out = adf().args(["--json", "check"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report = json_of(&out);
    let messages: Vec<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["message"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        messages.iter().any(|m| m.contains("soul.md")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("adf_bogus")),
        "{messages:?}"
    );
}

#[test]
fn sto_29_every_command_refuses_a_newer_schema_and_leaves_it_byte_identical() {
    let home = tempfile::tempdir().unwrap();
    let adf = || adf_in(home.path());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.adf");
    std::fs::copy(fixture("minimal-headless.adf"), &path).unwrap();
    adf().arg("migrate").arg(&path).assert().success();
    {
        let other = OtherConnection::open(&path).unwrap();
        let version = RowsWhere::new("key", "adf_schema_version");
        let changed = other
            .tables()
            .set_column("adf_meta", &version, "value", &json!("33"));
        assert_eq!(changed.unwrap(), 1);
    }
    let before = std::fs::read(&path).unwrap();
    let p = path.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["info", p],
        vec!["check", p],
        vec!["migrate", p],
        vec!["files", p],
        vec!["cat", p, "README.md"],
        vec!["put", p, "x.txt", "/dev/null"],
        vec!["rm", p, "README.md"],
        vec!["authorize", p, "README.md"],
        vec!["unauthorize", p, "README.md"],
        vec!["meta", "get", p],
        vec!["meta", "set", p, "k", "v"],
        vec!["meta", "rm", p, "status"],
        vec!["config", "get", p],
        vec!["config", "set", p, "description", "x"],
        vec!["loop", p],
        vec!["inbox", p],
        vec!["outbox", p],
        vec!["timers", p],
        vec!["tasks", p],
        vec!["logs", p],
    ];
    for args in commands {
        let out = adf().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr.contains("33") && stderr.contains("32"),
            "{args:?}: {stderr}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "{args:?} changed the file"
        );
    }
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["future.adf"]);
}

#[test]
fn bad_files_give_short_errors_and_stay_unchanged() {
    let home = tempfile::tempdir().unwrap();
    let adf = || adf_in(home.path());
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.adf");
    std::fs::write(&empty, b"").unwrap();
    let text = dir.path().join("notes.adf");
    std::fs::write(&text, "just some text\n").unwrap();
    let truncated = dir.path().join("cut.adf");
    let whole = std::fs::read(fixture("populated-runtime.adf")).unwrap();
    std::fs::write(&truncated, &whole[..whole.len() / 3]).unwrap();
    for path in [&empty, &text, &truncated] {
        let before = std::fs::read(path).unwrap();
        for command in ["info", "check", "files", "migrate"] {
            let out = adf().arg(command).arg(path).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success(),
                "{command} {} succeeded",
                path.display()
            );
            assert!(
                stderr.lines().count() <= 2 && stderr.len() < 300,
                "short error: {stderr}"
            );
            assert_eq!(std::fs::read(path).unwrap(), before);
        }
    }
}

#[test]
fn new_put_cat_files_meta_config_round_trip() {
    let home = tempfile::tempdir().unwrap();
    let adf = || adf_in(home.path());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("Helper Bot.adf");
    let out = adf()
        .args(["--json", "new"])
        .arg(&path)
        .args(["--description", "Helps"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created = json_of(&out);
    assert_eq!(created["handle"], "helper-bot");
    assert_eq!(created["name"], "Helper Bot");

    let source = dir.path().join("report.ts");
    std::fs::write(&source, "export function main() { return 1 }\n").unwrap();
    adf()
        .arg("put")
        .arg(&path)
        .arg("lib/report.ts")
        .arg(&source)
        .assert()
        .success();
    adf()
        .arg("put")
        .arg(&path)
        .arg("notes/stdin.md")
        .args(["--protection", "read_only"])
        .write_stdin("from stdin")
        .assert()
        .success();
    let cat = adf()
        .arg("cat")
        .arg(&path)
        .arg("notes/stdin.md")
        .output()
        .unwrap();
    assert_eq!(cat.stdout, b"from stdin");

    adf()
        .arg("authorize")
        .arg(&path)
        .arg("lib/report.ts")
        .assert()
        .success();
    let files = json_of(&adf().args(["--json", "files"]).arg(&path).output().unwrap());
    let report = files
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "lib/report.ts")
        .unwrap();
    assert_eq!(report["authorized"], true);
    let stdin_file = files
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "notes/stdin.md")
        .unwrap();
    assert_eq!(stdin_file["protection"], "read_only");

    adf()
        .args(["meta", "set"])
        .arg(&path)
        .args(["counter", "5", "--protection", "increment"])
        .assert()
        .success();
    let meta = json_of(
        &adf()
            .args(["--json", "meta", "get"])
            .arg(&path)
            .arg("counter")
            .output()
            .unwrap(),
    );
    assert_eq!(meta["protection"], "increment");
    assert!(
        !adf()
            .args(["meta", "set"])
            .arg(&path)
            .args(["adf_made_up", "x"])
            .output()
            .unwrap()
            .status
            .success()
    );

    adf()
        .args(["config", "set"])
        .arg(&path)
        .args(["model.temperature", "0.2"])
        .assert()
        .success();
    adf()
        .args(["config", "set"])
        .arg(&path)
        .args(["tools.fs_delete.enabled", "true"])
        .assert()
        .success();
    adf()
        .args(["config", "set", "--append"])
        .arg(&path)
        .args(["locked_fields", "model"])
        .assert()
        .success();
    let temperature = adf()
        .args(["config", "get"])
        .arg(&path)
        .arg("model.temperature")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&temperature.stdout).trim(), "0.2");
    let enabled = adf()
        .args(["config", "get"])
        .arg(&path)
        .arg("tools.fs_delete.enabled")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&enabled.stdout).trim(), "true");
    let rejected = adf()
        .args(["config", "set"])
        .arg(&path)
        .args(["model.temperature", "9"])
        .output()
        .unwrap();
    assert!(!rejected.status.success());
    assert!(String::from_utf8_lossy(&rejected.stderr).contains("model.temperature"));

    adf()
        .arg("rm")
        .arg(&path)
        .arg("lib/report.ts")
        .assert()
        .success();
    let info = json_of(&adf().args(["--json", "info"]).arg(&path).output().unwrap());
    assert_eq!(info["schema_version"], 32);
    assert_eq!(info["counts"]["files"], 6);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.ends_with("-wal") && !n.ends_with("-shm")),
        "{names:?}"
    );
}

#[test]
fn listing_commands_show_fixture_records() {
    let home = tempfile::tempdir().unwrap();
    let adf = || adf_in(home.path());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.adf");
    std::fs::copy(fixture("populated-runtime.adf"), &path).unwrap();
    let transcript = json_of(&adf().args(["--json", "loop"]).arg(&path).output().unwrap());
    assert_eq!(transcript.as_array().unwrap().len(), 7);
    let human = adf().arg("loop").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("[Context: system_prompt] (folded"), "{text}");
    assert!(text.contains("→ fs_write"), "{text}");
    assert_eq!(
        json_of(&adf().args(["--json", "inbox"]).arg(&path).output().unwrap())
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        json_of(
            &adf()
                .args(["--json", "outbox"])
                .arg(&path)
                .output()
                .unwrap()
        )
        .as_array()
        .unwrap()
        .len(),
        3
    );
    assert_eq!(
        json_of(
            &adf()
                .args(["--json", "timers"])
                .arg(&path)
                .output()
                .unwrap()
        )
        .as_array()
        .unwrap()
        .len(),
        3
    );
    let tasks = json_of(
        &adf()
            .args(["--json", "tasks", "--status", "pending"])
            .arg(&path)
            .output()
            .unwrap(),
    );
    assert_eq!(tasks.as_array().unwrap().len(), 1);
    assert_eq!(
        json_of(&adf().args(["--json", "logs"]).arg(&path).output().unwrap())
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn every_command_has_help() {
    let home = tempfile::tempdir().unwrap();
    let adf = || adf_in(home.path());
    let top = adf().arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&top.stdout).into_owned();
    let commands: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 18, "{commands:?}");
    for command in commands {
        let out = adf().arg(&command).arg("--help").output().unwrap();
        assert!(out.status.success(), "{command} --help");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage:"),
            "{command}"
        );
    }
}

#[test]
fn the_demo_runs_to_completion_and_leaves_a_valid_agent() {
    let home = tempfile::tempdir().unwrap();
    let adf = || adf_in(home.path());
    let dir = tempfile::tempdir().unwrap();
    let out = adf()
        .args(["--json", "demo", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = json_of(&out);
    assert_eq!(summary["check_errors"], serde_json::json!([]));
    // The daemon part: the timer lambda fired twice and the on_file_change lambda reacted to
    // each report it wrote (no model, no key, no network).
    assert_eq!(summary["daemon"]["timer_fires"], 2, "{summary}");
    assert_eq!(summary["daemon"]["digest_lines"], 2, "{summary}");
    let file = dir.path().join("Demo Agent.adf");
    let check = adf().args(["--json", "check"]).arg(&file).output().unwrap();
    assert_eq!(
        json_of(&check)["errors"],
        0,
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let notes = adf()
        .arg("cat")
        .arg(&file)
        .arg("data/notes.md")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&notes.stdout),
        "# Notes\nfirst entry\n",
        "the model's fs_write landed"
    );
}

#[test]
fn rm_keeps_a_protected_file_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let adf = || adf_in(home.path());
    let path = dir.path().join("keep.adf");
    std::fs::copy(fixture("minimal-headless.adf"), &path).unwrap();
    adf().arg("migrate").arg(&path).assert().success();
    let protection = |file: &str| {
        let files = json_of(&adf().args(["--json", "files"]).arg(&path).output().unwrap());
        files
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == file)
            .map(|f| f["protection"].as_str().unwrap().to_owned())
    };
    assert_eq!(protection("README.md").as_deref(), Some("no_delete"));
    let before = std::fs::read(&path).unwrap();
    let refused = adf()
        .arg("rm")
        .arg(&path)
        .arg("README.md")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("no_delete") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "refused: file unchanged"
    );
    adf()
        .args(["rm", "--force"])
        .arg(&path)
        .arg("README.md")
        .assert()
        .success();
    assert_eq!(protection("README.md"), None);
}
