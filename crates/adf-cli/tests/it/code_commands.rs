//! `adf run`, `adf code` and `adf tool … sys_code|sys_lambda` as separate processes against a
//! real file (COD-07, 08, 09, 12, 13).
use std::path::PathBuf;

use assert_cmd::Command;
use serde_json::{Value, json};

struct Agent {
    _dir: tempfile::TempDir,
    home: PathBuf,
    file: PathBuf,
}

fn agent() -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent {
        home: dir.path().join("home"),
        file: dir.path().join("a.adf"),
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

fn put(agent: &Agent, path: &str, source: &str) {
    adf(agent)
        .arg("put")
        .arg(&agent.file)
        .arg(path)
        .write_stdin(source)
        .assert()
        .success();
}

fn json_out(cmd: &mut Command) -> (bool, Value) {
    let output = cmd.output().unwrap();
    let value: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    (output.status.success(), value)
}

const RESTRICTED: &str = "export async function main({ t }) { console.log('setting', t); await adf.sys_update_config({ path: 'model.temperature', value: t }); return { set: t } }";

#[test]
fn cod_12_adf_run_follows_the_files_authorization() {
    let agent = agent();
    put(&agent, "lib/set.ts", RESTRICTED);
    let (ok, v) = json_out(adf(&agent).args(["--json", "run"]).arg(&agent.file).args([
        "lib/set.ts",
        "--args",
        r#"{"t": 0.3}"#,
    ]));
    assert!(!ok);
    assert_eq!(v["error"]["code"], "REQUIRES_AUTHORIZED_CODE");
    assert_eq!(v["logs"][0]["message"], "setting 0.3");

    adf(&agent)
        .arg("authorize")
        .arg(&agent.file)
        .arg("lib/set.ts")
        .assert()
        .success();
    let (ok, v) = json_out(adf(&agent).args(["--json", "run"]).arg(&agent.file).args([
        "lib/set.ts:main",
        "--args",
        r#"{"t": 0.3}"#,
    ]));
    assert!(ok, "{v}");
    assert_eq!(v["result"], json!({ "set": 0.3 }));
    // Human output: the value on stdout, the console on stderr.
    let out = adf(&agent)
        .arg("run")
        .arg(&agent.file)
        .args(["lib/set.ts", "--args", r#"{"t": 0.4}"#])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"set\": 0.4"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("setting 0.4"));
}

#[test]
fn cod_07_adf_code_is_unauthorized_and_keeps_results() {
    let agent = agent();
    let (ok, v) = json_out(
        adf(&agent)
            .args(["--json", "code"])
            .arg(&agent.file)
            .arg("await adf.fs_write({ mode: 'write', path: 'out.txt', content: 'hi' }); const r = await adf.fs_read({ path: 'out.txt' }); return r.content"),
    );
    assert!(ok, "{v}");
    assert_eq!(v["result"], "hi");
    let (ok, v) = json_out(
        adf(&agent)
            .args(["--json", "code"])
            .arg(&agent.file)
            .arg("await adf.sys_update_config({ path: 'model.temperature', value: 0.1 })"),
    );
    assert!(!ok);
    assert_eq!(v["error"]["code"], "REQUIRES_AUTHORIZED_CODE");
    // TypeScript, and code from stdin.
    let out = adf(&agent)
        .arg("code")
        .arg(&agent.file)
        .args(["-", "--ts"])
        .write_stdin("const n: number = 41; return n + 1")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
}

#[test]
fn cod_08_adf_tool_sys_lambda_on_authorized_file_asks_and_runs_authorized() {
    let agent = agent();
    put(&agent, "lib/set.ts", RESTRICTED);
    adf(&agent)
        .arg("authorize")
        .arg(&agent.file)
        .arg("lib/set.ts")
        .assert()
        .success();
    let (ok, v) = json_out(adf(&agent).args(["--json", "tool"]).arg(&agent.file).args([
        "sys_lambda",
        "--deny-all",
        "--args",
        r#"{"source":"lib/set.ts","args":{"t":0.2}}"#,
    ]));
    assert!(!ok);
    assert_eq!(v["error"]["code"], "DENIED");
    let (ok, v) = json_out(adf(&agent).args(["--json", "tool"]).arg(&agent.file).args([
        "sys_lambda",
        "--approve-all",
        "--args",
        r#"{"source":"lib/set.ts","args":{"t":0.2}}"#,
    ]));
    assert!(ok, "{v}");
    assert_eq!(v["result"]["result"], json!({ "set": 0.2 }));
    assert_eq!(v["result"]["logs"], json!(["setting 0.2"]));
}

#[test]
fn cod_09_adf_tool_sys_code_and_unauthorized_sys_lambda_need_no_prompt() {
    let agent = agent();
    put(
        &agent,
        "lib/add.js",
        "export function add({ a, b }) { return a + b }",
    );
    let (ok, v) = json_out(adf(&agent).args(["--json", "tool"]).arg(&agent.file).args([
        "sys_lambda",
        "--deny-all",
        "--args",
        r#"{"source":"lib/add.js:add","args":{"a":1,"b":2}}"#,
    ]));
    assert!(ok, "{v}");
    assert_eq!(v["result"]["result"], 3);
    let (ok, v) = json_out(adf(&agent).args(["--json", "tool"]).arg(&agent.file).args([
        "sys_code",
        "--deny-all",
        "--args",
        r#"{"code":"console.log('x'); return 6 * 7"}"#,
    ]));
    assert!(ok, "{v}");
    assert_eq!(v["result"], json!({ "result": 42, "logs": ["x"] }));
}

#[test]
fn adf_run_and_adf_check_name_configured_sections_this_runtime_does_not_run() {
    let agent = agent();
    put(
        &agent,
        "lib/hello.ts",
        "export async function main() { return 'hi' }",
    );
    let quiet = adf(&agent)
        .arg("run")
        .arg(&agent.file)
        .arg("lib/hello.ts")
        .output()
        .unwrap();
    assert!(quiet.status.success());
    assert!(
        !String::from_utf8_lossy(&quiet.stderr).contains("does not run"),
        "the defaults warn about nothing"
    );

    adf(&agent)
        .args(["config", "set"])
        .arg(&agent.file)
        .args(["pre_llm_hook", "lib/hook.ts:pre"])
        .assert()
        .success();
    let warned = adf(&agent)
        .arg("run")
        .arg(&agent.file)
        .arg("lib/hello.ts")
        .output()
        .unwrap();
    assert!(warned.status.success());
    let stderr = String::from_utf8_lossy(&warned.stderr);
    assert!(stderr.contains("warning:"), "{stderr}");
    assert!(stderr.contains("pre_llm_hook"), "{stderr}");

    // `adf chat` warns before it reaches for a model (none is configured here).
    let chat = adf(&agent)
        .arg("chat")
        .arg(&agent.file)
        .arg("hello")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&chat.stderr);
    assert!(
        stderr.contains("warning:") && stderr.contains("pre_llm_hook"),
        "{stderr}"
    );

    let (_, report) = json_out(adf(&agent).args(["--json", "check"]).arg(&agent.file));
    assert!(
        report
            .to_string()
            .contains("config pre_llm_hook is declared"),
        "{report}"
    );
}
