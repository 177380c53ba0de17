//! `adf tool`, `adf approve`, `adf deny`, `adf tasks` as separate processes: a model call to a
//! restricted tool waits for the owner's decision made from another shell.
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command as Process, Stdio};

use assert_cmd::Command;
use serde_json::Value;

struct Agent {
    _dir: tempfile::TempDir,
    home: PathBuf,
    file: PathBuf,
}

fn agent() -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let file = dir.path().join("a.adf");
    let agent = Agent {
        home,
        file,
        _dir: dir,
    };
    adf(&agent).arg("new").arg(&agent.file).assert().success();
    agent
}

fn adf(agent: &Agent) -> Command {
    let mut cmd = Command::cargo_bin("adf").unwrap();
    cmd.env("ADF_HOME", &agent.home);
    cmd
}

fn spawn_tool(agent: &Agent, name: &str, args: &str) -> Child {
    Process::new(assert_cmd::cargo::cargo_bin("adf"))
        .env("ADF_HOME", &agent.home)
        .args(["tool"])
        .arg(&agent.file)
        .args([name, "--as", "model", "--args", args])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads the waiting call's stderr up to its announcement (`waiting for approval of … (task
/// ID): …`, printed once the task is stored) and returns the task id, checked against the
/// file, with the rest of the stderr to read after the call ends.
fn pending_task(file: &Path, child: &mut Child) -> (String, BufReader<ChildStderr>) {
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let id = loop {
        let mut line = String::new();
        let read = stderr.read_line(&mut line).unwrap();
        assert!(
            read > 0,
            "the call ended without asking for approval: {seen}"
        );
        seen.push_str(&line);
        if let Some(rest) = line.split_once("(task ").map(|(_, rest)| rest) {
            break rest.split(')').next().unwrap_or_default().to_owned();
        }
    };
    let reader = adf_store::test_support::OtherConnection::open_read_only(file).unwrap();
    let tasks = reader.tables().rows("adf_tasks").unwrap();
    let task = tasks.iter().find(|task| task["id"] == id.as_str()).unwrap();
    let status = task["status"].as_str().unwrap();
    assert_eq!(status, "pending_approval", "{seen}");
    (id, stderr)
}

/// Waits for the call to end; its stderr is the part [`pending_task`] did not read.
fn finish(child: Child, mut stderr: BufReader<ChildStderr>) -> std::process::Output {
    let mut out = child.wait_with_output().unwrap();
    stderr.read_to_end(&mut out.stderr).unwrap();
    out
}

fn config_value(agent: &Agent, path: &str) -> String {
    let out = adf(agent)
        .args(["config", "get"])
        .arg(&agent.file)
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn tol_08_model_call_waits_for_approve_from_another_shell() {
    let agent = agent();
    let mut child = spawn_tool(
        &agent,
        "sys_update_config",
        r#"{"path":"description","value":"approved edit","_reason":"update my card"}"#,
    );
    let (task, stderr) = pending_task(&agent.file, &mut child);
    let listed = adf(&agent)
        .args(["--json", "tasks"])
        .arg(&agent.file)
        .args(["--status", "pending_approval"])
        .output()
        .unwrap();
    let tasks: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(tasks[0]["id"], task.as_str());
    assert_eq!(tasks[0]["approval_meta"]["reason"], "restricted");
    assert_eq!(tasks[0]["args"]["_reason"], "update my card");

    adf(&agent)
        .arg("approve")
        .arg(&agent.file)
        .arg(&task)
        .assert()
        .success();
    let out = finish(child, stderr);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Updated description."
    );
    assert_eq!(config_value(&agent, "description"), "approved edit");
    let done = adf(&agent)
        .args(["--json", "tasks"])
        .arg(&agent.file)
        .output()
        .unwrap();
    let tasks: Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!(tasks[0]["status"], "completed");
}

#[test]
fn denied_from_another_shell_the_call_fails_and_nothing_changes() {
    let agent = agent();
    let before = config_value(&agent, "description");
    let mut child = spawn_tool(
        &agent,
        "sys_update_config",
        r#"{"path":"description","value":"nope"}"#,
    );
    let (task, stderr) = pending_task(&agent.file, &mut child);
    adf(&agent)
        .arg("deny")
        .arg(&agent.file)
        .arg(&task)
        .arg("not today")
        .assert()
        .success();
    let out = finish(child, stderr);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not today") && stderr.contains("DENIED"),
        "{stderr}"
    );
    assert_eq!(config_value(&agent, "description"), before);
}

#[test]
fn tool_runs_as_each_caller_with_json_output() {
    let agent = agent();
    let write = r#"{"path":"notes/a.md","mode":"write","content":"hello"}"#;
    for call_as in ["model", "code", "authorized", "owner"] {
        let out = adf(&agent)
            .args(["--json", "tool"])
            .arg(&agent.file)
            .args(["fs_write", "--as", call_as, "--args", write])
            .output()
            .unwrap();
        let body: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(body["ok"], true, "{call_as}: {body}");
    }
    // Unauthorized code cannot call a restricted tool and no task is created.
    let out = adf(&agent)
        .args(["--json", "tool"])
        .arg(&agent.file)
        .args([
            "sys_update_config",
            "--as",
            "code",
            "--args",
            r#"{"path":"description","value":"x"}"#,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["error"]["code"], "REQUIRES_AUTHORIZED_CODE");
    // --deny-all answers the approval at once.
    let out = adf(&agent)
        .arg("tool")
        .arg(&agent.file)
        .args([
            "sys_update_config",
            "--deny-all",
            "--args",
            r#"{"path":"description","value":"x"}"#,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    // Bad arguments are refused with a clear error.
    let out = adf(&agent)
        .arg("tool")
        .arg(&agent.file)
        .args(["fs_write", "--args", "{not json"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--args is not valid JSON"));
}

/// `adf tool FILE adf_shell --args '{"command": …}'`: the line runs through the pipeline as the
/// model; its writes land in the file and a restricted inner call is refused under `--deny-all`.
#[test]
fn adf_tool_runs_adf_shell_lines() {
    let agent = agent();
    // Disabled by default: the refusal tells the owner how to turn it on.
    let refused = adf(&agent)
        .arg("tool")
        .arg(&agent.file)
        .args(["adf_shell", "--args", r#"{"command":"true"}"#])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("tools.adf_shell.enabled true"),
        "no hint in: {stderr}"
    );
    for (path, value) in [
        ("tools.adf_shell.enabled", "true"),
        ("tools.db_execute.enabled", "true"),
        ("tools.db_execute.restricted", "true"),
    ] {
        adf(&agent)
            .args(["config", "set"])
            .arg(&agent.file)
            .args([path, value])
            .assert()
            .success();
    }
    let run = |command: &str, approval: &str| -> Value {
        let args = serde_json::json!({ "command": command }).to_string();
        let output = adf(&agent)
            .args(["--json", "tool"])
            .arg(&agent.file)
            .args(["adf_shell", "--as", "model", approval, "--args", &args])
            .output()
            .unwrap();
        let body: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(body["ok"], true, "{body}");
        body["result"].clone()
    };
    let result = run(
        "echo '{\"n\":[3,1,2]}' | jq -c '.n | sort' > sorted.json && cat sorted.json",
        "--deny-all",
    );
    assert_eq!(result["stdout"], "[1,2,3]\n");
    assert_eq!(result["exit_code"], 0);
    let result = run(
        "sqlite3 'CREATE TABLE local_x(a)' || echo refused",
        "--deny-all",
    );
    assert_eq!(result["stdout"], "refused\n", "{result}");
    // Deferred inner calls run too: `node` in the sandbox, on the command's own runtime.
    let result = run("node -e 'console.log(6 * 7)' | tr 4 X", "--deny-all");
    assert_eq!(result["stdout"], "X2\n", "{result}");
    let shown = adf(&agent)
        .arg("cat")
        .arg(&agent.file)
        .arg("sorted.json")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&shown.stdout), "[1,2,3]\n");
}
