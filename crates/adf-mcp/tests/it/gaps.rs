//! What the agent sees of its MCP tools besides calling them: `sys_get_config {section:
//! "tools"}` reports them implemented, and `run_location: host` needs the runtime's own
//! host-access setting as well as `compute.host_access` (CFG-37).

use adf_runtime::tools::ErrorCode;
use serde_json::json;

use crate::common::*;

#[test]
fn sys_get_config_tools_lists_declared_mcp_tools_as_implemented_with_their_definition() {
    runtime().block_on(async {
        let (world, mut file) = World::with_misbehaving("listing").await;
        let registry = world.registry();
        let echo = listed_tool(&registry, &mut file, "mcp_bad_echo").await;
        assert_eq!(echo["implemented"], json!(true), "{echo}");
        assert_eq!(echo["source"], json!("mcp"));
        assert_eq!(echo["description"], json!("Echoes text."));
        assert!(
            echo["parameters"]["properties"]["text"].is_object(),
            "{echo}"
        );
        // A declaration no tool answers is still reported as not implemented.
        let mut config = file.config().unwrap();
        config["tools"].as_array_mut().unwrap().push(
            json!({"name": "mcp_gone_tool", "enabled": true, "visible": true, "restricted": false}),
        );
        file.config_replace(adf_store::Caller::Owner, config)
            .unwrap();
        let gone = listed_tool(&registry, &mut file, "mcp_gone_tool").await;
        assert_eq!(gone["implemented"], json!(false), "{gone}");
    });
}

/// Declares the misbehaving server `bad` with `run_location: host` and `compute.host_access`.
fn host_server(file: &mut adf_store::AdfFile) {
    let mut config = file.config().unwrap();
    config["compute"]["host_access"] = json!(true);
    for server in config["mcp"]["servers"].as_array_mut().unwrap() {
        server["run_location"] = json!("host");
    }
    file.config_replace(adf_store::Caller::Owner, config)
        .unwrap();
}

#[test]
fn cfg_37_host_run_location_needs_the_runtime_host_access_setting_too() {
    runtime().block_on(async {
        let (world, mut file) = World::with_misbehaving("host").await;
        host_server(&mut file);
        let registry = world.registry();
        let starts = world.supervisor.starts();

        // compute.host_access is true, the runtime setting is absent: refused, nothing starts.
        let refused = owner_call(&registry, &mut file, "mcp_bad_echo", json!({"text": "hi"}))
            .await
            .unwrap_err();
        assert_eq!(refused.code, ErrorCode::ToolError);
        assert!(
            refused.message.contains("compute.hostAccess"),
            "{}",
            refused.message
        );
        std::fs::create_dir_all(world.home.dir()).unwrap();
        let settings = world.home.dir().join("settings.json");
        std::fs::write(&settings, r#"{"compute": {"hostAccess": false}}"#).unwrap();
        let refused = owner_call(&registry, &mut file, "mcp_bad_echo", json!({"text": "hi"}))
            .await
            .unwrap_err();
        assert!(
            refused.message.contains("host access is off"),
            "{}",
            refused.message
        );
        assert_eq!(world.supervisor.starts(), starts, "no server was started");

        // The owner turns the runtime setting on: the same declaration runs.
        std::fs::write(&settings, r#"{"compute": {"hostAccess": true}}"#).unwrap();
        let out = owner_call(&registry, &mut file, "mcp_bad_echo", json!({"text": "hi"}))
            .await
            .unwrap();
        assert_eq!(out, json!("echo: hi"));

        // With the runtime setting on, compute.host_access false still refuses.
        let mut config = file.config().unwrap();
        config["compute"]["host_access"] = json!(false);
        file.config_replace(adf_store::Caller::Owner, config)
            .unwrap();
        let refused = owner_call(&registry, &mut file, "mcp_bad_echo", json!({"text": "hi"}))
            .await
            .unwrap_err();
        assert!(
            refused.message.contains("compute.host_access: true"),
            "{}",
            refused.message
        );
    });
}
