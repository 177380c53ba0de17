//! The acceptance path of MCP on the command line: `adf new`, `adf mcp add` of a real npm
//! server (`@modelcontextprotocol/server-memory`, installed into the runtime's cache), then
//! its tools from `adf tool --as model` (approval first), `adf code`, and a model turn of
//! `adf chat` against the scripted test model.

use std::path::{Path, PathBuf};
use std::process::{Command as Process, Output, Stdio};

use adf_store::AdfFile;
use adf_testkit::{MockProvider, Turn};
use serde_json::{Value, json};

fn adf(home: &Path) -> Process {
    let mut cmd = Process::new(assert_cmd::cargo::cargo_bin("adf"));
    cmd.env("ADF_HOME", home)
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `command`, panics unless it succeeds, and returns what it printed (stdout, then stderr).
fn succeeds(command: &mut Process) -> String {
    let out = command.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    text(&out)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn set_restricted(file: &Path, name: &str, restricted: bool) {
    let mut file = AdfFile::open(file).unwrap();
    let mut config = file.config().unwrap();
    for d in config["tools"].as_array_mut().unwrap() {
        if d["name"] == name {
            d["restricted"] = Value::Bool(restricted);
        }
    }
    file.config_replace(adf_store::Caller::Owner, config)
        .unwrap();
    file.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_mcp_server_added_with_adf_mcp_add_is_callable_from_tool_code_and_chat() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let file: PathBuf = dir.path().join("a.adf");
    let created = adf(&home).arg("new").arg(&file).output().unwrap();
    assert!(created.status.success(), "{}", text(&created));

    let added = succeeds(
        adf(&home)
            .args(["mcp", "add"])
            .arg(&file)
            .arg("@modelcontextprotocol/server-memory"),
    );
    assert!(added.contains("mcp_memory_create_entities"), "{added}");
    assert!(home.join("mcp/npm").is_dir());

    let listed = adf(&home)
        .args(["--json", "mcp", "list"])
        .arg(&file)
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["name"], json!("memory"));

    // A model call of a new (restricted) tool asks the owner first: denied, then approved.
    let args = r#"{"entities":[{"name":"adf","entityType":"project","observations":["one file per agent"]}]}"#;
    let denied = adf(&home)
        .arg("tool")
        .arg(&file)
        .args([
            "mcp_memory_create_entities",
            "--as",
            "model",
            "--deny-all",
            "--args",
            args,
        ])
        .output()
        .unwrap();
    assert!(!denied.status.success());
    assert!(text(&denied).contains("denied"), "{}", text(&denied));
    let approved = adf(&home)
        .arg("tool")
        .arg(&file)
        .args([
            "mcp_memory_create_entities",
            "--as",
            "model",
            "--approve-all",
            "--args",
            args,
        ])
        .output()
        .unwrap();
    assert!(approved.status.success(), "{}", text(&approved));

    // From code, once the owner lifted `restricted` (unauthorized code may not call it).
    set_restricted(&file, "mcp_memory_read_graph", false);
    let code = succeeds(
        adf(&home)
            .arg("code")
            .arg(&file)
            .arg("const g = await adf.mcp_memory_read_graph({}); return typeof g === 'string' ? g : JSON.stringify(g);"),
    );
    assert!(code.contains("one file per agent"), "{code}");

    // From a model turn with the scripted test model.
    let mock = MockProvider::openai().await;
    {
        let mut handle = AdfFile::open(&file).unwrap();
        for (p, v) in [
            ("model.provider", json!(mock.base_url())),
            ("model.model_id", json!("local-model")),
        ] {
            handle
                .config_set_path(adf_store::Caller::Owner, p, adf_store::ConfigAction::Set, v)
                .unwrap();
        }
        handle.close().unwrap();
    }
    mock.push_all([
        Turn::tool_call("mcp_memory_read_graph", json!({})),
        Turn::text("The graph has adf."),
    ]);
    let chat = succeeds(adf(&home).arg("chat").arg(&file).arg("What is in memory?"));
    assert!(chat.contains("The graph has adf."), "{chat}");
    let requests = mock.requests();
    let advertised = requests[0].body["tools"].to_string();
    assert!(advertised.contains("mcp_memory_read_graph"), "{advertised}");
    let second = requests[1].body["messages"].to_string();
    assert!(
        second.contains("one file per agent"),
        "the tool result reached the model: {second}"
    );
}
