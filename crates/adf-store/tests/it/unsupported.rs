//! Config sections the runtime stores but does not run are named, never silently accepted:
//! the one list (`adf_store::unsupported`) and its `adf check` finding.
use crate::common;

use adf_store::unsupported::{UNIMPLEMENTED_TOOLS, unsupported_sections, warning_line};
use adf_store::{AdfFile, Caller, ConfigAction};
use serde_json::{Value, json};

fn paths(config: &Value) -> Vec<String> {
    unsupported_sections(config)
        .into_iter()
        .map(|s| s.path)
        .collect()
}

#[test]
fn a_new_files_defaults_declare_nothing_unsupported() {
    let (_dir, _path, file) = common::new_file("defaults");
    let config = file.config().unwrap();
    assert_eq!(paths(&config), Vec::<String>::new());
    assert_eq!(warning_line(&config), None);
    let report = file.check().unwrap();
    assert!(
        !report
            .findings
            .iter()
            .any(|f| f.message.contains("does not run it yet")),
        "{:?}",
        report.findings
    );
}

#[test]
fn each_declared_section_is_named() {
    let config = json!({
        "code_execution": { "packages": [{ "name": "vega-lite", "version": "^5" }] },
        "mcp": { "servers": [{ "name": "github", "transport": "stdio", "command": "node" }] },
        "compute": { "enabled": true },
        "adapters": { "telegram": { "enabled": true }, "slack": { "enabled": true }, "matrix": { "enabled": true }, "email": { "enabled": false } },
        "serving": {
            "public": { "enabled": true },
            "shared": { "enabled": true, "patterns": ["*.html"] },
            "api": [
                { "method": "GET", "path": "/s", "lambda": "lib/a.ts:s", "middleware": [{ "lambda": "lib/auth.ts:check" }] },
                { "method": "WS", "path": "/ws", "lambda": "lib/ws.ts:on" }
            ]
        },
        "ws_connections": [{ "id": "relay", "url": "wss://relay.invalid/ws", "enabled": true }],
        "stream_bindings": [{ "id": "db" }],
        "pre_llm_hook": "lib/hook.ts:pre",
        "umbilical": { "stream_deltas": true, "log": { "enabled": true } },
        "tools": [
            { "name": "stream_bind", "enabled": true, "visible": true },
            { "name": "fs_transfer", "enabled": true, "visible": true },
            { "name": "chat_info", "enabled": true, "visible": false },
            { "name": "mcp_install", "enabled": false, "visible": true },
            { "name": "fs_read", "enabled": true }
        ]
    });
    assert_eq!(paths(&config), ["adapters.matrix", "pre_llm_hook"]);
    let line = warning_line(&config).unwrap();
    assert!(line.contains("pre_llm_hook"), "{line}");
    assert!(
        !line.contains("code_execution.packages"),
        "packages are installed and imported (adf-packages): {line}"
    );
    assert!(!line.contains("mcp"), "MCP servers run: {line}");
    assert!(
        !line.contains("telegram"),
        "the daemon runs Telegram: {line}"
    );
    assert!(!line.contains("slack"), "the daemon runs Slack: {line}");
    assert!(
        !line.contains("stream"),
        "stream bindings and deltas run: {line}"
    );
}

#[test]
fn switched_off_and_empty_sections_are_not_named() {
    let config = json!({
        "mcp": { "servers": [] },
        "compute": { "enabled": false },
        "adapters": { "telegram": { "enabled": false } },
        "serving": { "public": { "enabled": false }, "shared": { "enabled": false }, "api": [] },
        "ws_connections": [{ "id": "relay", "enabled": false }],
        "stream_bindings": [],
        "pre_llm_hook": null,
        "umbilical": { "stream_deltas": false },
        "tools": [{ "name": "ws_connect", "enabled": false }]
    });
    assert_eq!(paths(&config), Vec::<String>::new());
    // adf-compute runs compute_exec and fs_transfer.
    assert!(!UNIMPLEMENTED_TOOLS.contains(&"compute_exec"));
}

#[test]
fn check_reports_each_unsupported_section_and_stays_read_only() {
    let (_dir, path, mut file) = common::new_file("declared");
    file.config_set_path(
        Caller::Owner,
        "code_execution.packages",
        ConfigAction::Set,
        json!([{ "name": "vega-lite", "version": "^5" }]),
    )
    .unwrap();
    file.config_set_path(
        Caller::Owner,
        "pre_llm_hook",
        ConfigAction::Set,
        json!("lib/hook.ts:pre"),
    )
    .unwrap();
    file.close().unwrap();
    let before = std::fs::read(&path).unwrap();
    let file = AdfFile::inspect(&path).unwrap();
    let report = file.check().unwrap();
    let named: Vec<&str> = report
        .warnings()
        .filter(|f| f.message.contains("does not run it yet"))
        .map(|f| f.message.as_str())
        .collect();
    // Packages are installed and imported now (adf-packages): declared, but not listed.
    assert_eq!(named.len(), 1, "{named:?}");
    assert!(
        !named
            .iter()
            .any(|m| m.contains("config code_execution.packages")),
        "{named:?}"
    );
    assert!(
        named.iter().any(|m| m.contains("config pre_llm_hook")),
        "{named:?}"
    );
    assert!(
        !report
            .errors()
            .any(|f| f.message.contains("does not run it yet")),
        "warnings, not errors: {:?}",
        report.findings
    );
    drop(file);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}
