//! npm packages on the command line against a local registry (adf-testkit's, 127.0.0.1):
//! `adf config set F tools.npm_install.enabled true` declares the tool, `adf packages F install
//! NAME@RANGE` (progress on stderr), `adf code` importing it, `adf packages F --json` listing
//! it, `adf check` not listing `code_execution.packages` as stored but not run, and
//! `adf packages F remove` taking it away from the next run.

use std::path::Path;
use std::process::{Command as Process, Output, Stdio};

use adf_testkit::npm::{NpmPackage, NpmRegistry};
use serde_json::{Value, json};

fn adf(home: &Path, registry: &str) -> Process {
    let mut cmd = Process::new(assert_cmd::cargo::cargo_bin("adf"));
    cmd.env("ADF_HOME", home)
        .env("ADF_NPM_REGISTRY", registry)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn succeeds(command: &mut Process) -> Output {
    let out = command.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    out
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tol_33_adf_packages_installs_lists_and_removes_and_code_imports_it() {
    let npm = NpmRegistry::start().await;
    npm.publish(NpmPackage::new("shout", "1.4.0").file(
        "index.js",
        "module.exports = (s) => String(s).toUpperCase() + '!';",
    ));
    npm.publish(
        NpmPackage::new("shout", "2.0.0").file("index.js", "module.exports = () => 'wrong major';"),
    );
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let file = dir.path().join("a.adf");
    succeeds(adf(&home, &npm.url()).arg("new").arg(&file));

    // Not declared by default (DEF-22), declared by the owner's edit.
    succeeds(
        adf(&home, &npm.url())
            .args(["config", "set"])
            .arg(&file)
            .args(["tools.npm_install.enabled", "true"]),
    );
    let enabled = succeeds(
        adf(&home, &npm.url())
            .args(["config", "get"])
            .arg(&file)
            .arg("tools.npm_install.enabled"),
    );
    assert_eq!(String::from_utf8_lossy(&enabled.stdout).trim(), "true");

    let installed = succeeds(
        adf(&home, &npm.url())
            .arg("packages")
            .arg(&file)
            .args(["install", "shout@^1.0.0"]),
    );
    let said = text(&installed);
    assert!(said.contains("downloading shout@1.4.0"), "progress: {said}");
    assert!(said.contains("installed shout@1.4.0"), "{said}");

    let listed = json_of(&succeeds(
        adf(&home, &npm.url())
            .arg("--json")
            .arg("packages")
            .arg(&file),
    ));
    assert_eq!(listed[0]["name"], "shout");
    assert_eq!(listed[0]["version"], "1.4.0");
    assert_eq!(listed[0]["installed"], true);

    let ran = succeeds(
        adf(&home, &npm.url())
            .arg("code")
            .arg(&file)
            .arg("const { default: shout } = await import('shout'); return shout('hi');"),
    );
    assert!(
        String::from_utf8_lossy(&ran.stdout).contains("HI!"),
        "{}",
        text(&ran)
    );

    let checked = adf(&home, &npm.url())
        .args(["--json", "check"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        !text(&checked).contains("code_execution.packages"),
        "packages run now: {}",
        text(&checked)
    );

    let removed = json_of(&succeeds(
        adf(&home, &npm.url())
            .arg("--json")
            .arg("packages")
            .arg(&file)
            .args(["remove", "shout"]),
    ));
    assert_eq!(
        removed,
        json!({ "success": true, "name": "shout", "removed": true })
    );
    let failed = adf(&home, &npm.url())
        .arg("code")
        .arg(&file)
        .arg("const { default: shout } = await import('shout'); return shout('hi');")
        .output()
        .unwrap();
    assert!(
        text(&failed).contains("not installed"),
        "the import fails clearly: {}",
        text(&failed)
    );
}
