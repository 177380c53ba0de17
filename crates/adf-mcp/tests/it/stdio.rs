//! A stdio server that misbehaves: crashes, hangs, malformed results, schema changes, and
//! what its child process can see.

use std::time::{Duration, Instant};

use adf_runtime::tools::approval::{ApproveAll, DenyAll};
use adf_runtime::tools::{ErrorCode, ToolCaller};
use serde_json::{Value, json};

use crate::common::*;

#[test]
fn tol_12_tol_39_discovery_declares_restricted_tools_and_a_model_call_asks_first() {
    runtime().block_on(async {
        let (world, mut file) = World::with_misbehaving("a").await;
        let echo = declaration(&file, "mcp_bad_echo");
        assert_eq!(
            (
                &echo["enabled"],
                &echo["visible"],
                &echo["restricted"],
                &echo["mcp_tool_status"]
            ),
            (&json!(true), &json!(true), &json!(true), &json!("new"))
        );
        let registry = world.registry();
        let config = file.config().unwrap();
        let advertised: Vec<Value> = registry.model_definitions(&config);
        let echo_def = advertised
            .iter()
            .find(|d| d["name"] == "mcp_bad_echo")
            .unwrap();
        assert_eq!(echo_def["description"], json!("Echoes text."));
        assert!(echo_def["parameters"]["properties"]["text"].is_object());

        let denied = call(
            &registry,
            &mut file,
            &model(),
            "mcp_bad_echo",
            json!({"text": "hi"}),
            &DenyAll,
        )
        .await;
        assert_eq!(denied.unwrap_err().code, ErrorCode::Denied);
        let approved = call(
            &registry,
            &mut file,
            &model(),
            "mcp_bad_echo",
            json!({"text": "hi"}),
            &ApproveAll,
        )
        .await;
        assert_eq!(approved.unwrap(), json!("echo: hi"));
        let tasks = file.tasks(None).unwrap();
        assert!(
            tasks
                .iter()
                .any(|t| t.tool == "mcp_bad_echo" && t.status == "completed"),
            "{tasks:?}"
        );
    });
}

#[test]
fn stdio_child_gets_a_cleared_environment_and_a_scratch_dir_next_to_the_file() {
    runtime().block_on(async {
        let (world, mut file) = World::with_misbehaving("env").await;
        let registry = world.registry();
        // SAFETY of the assertion: the test process has variables the child must not see.
        let out = owner_call(&registry, &mut file, "mcp_bad_env", json!({}))
            .await
            .unwrap();
        let seen: Value = serde_json::from_str(out.as_str().unwrap()).unwrap();
        let names: Vec<&str> = seen["names"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            !names.contains(&"ADF_HOME") && !names.contains(&"CARGO_MANIFEST_DIR"),
            "{names:?}"
        );
        assert!(
            names.contains(&"PATH") && names.contains(&"HOME"),
            "{names:?}"
        );
        let scratch = format!("{}.mcp/bad", world.path("env").display());
        assert_eq!(
            std::fs::canonicalize(seen["cwd"].as_str().unwrap()).unwrap(),
            std::fs::canonicalize(&scratch).unwrap()
        );
        // Its stderr reaches the agent's logs.
        let logs = file.logs_after(0, 1000).unwrap();
        assert!(
            logs.iter().any(|l| l.origin.as_deref() == Some("mcp")
                && l.message
                    .as_deref()
                    .is_some_and(|m| m.contains("misbehaving server started"))),
            "{logs:?}"
        );
    });
}

#[test]
fn a_server_that_crashes_mid_call_is_an_error_and_restarts_on_the_next_call() {
    runtime().block_on(async {
        let (world, mut file) = World::with_misbehaving("c").await;
        let registry = world.registry();
        let starts = world.supervisor.starts();
        let crashed = owner_call(&registry, &mut file, "mcp_bad_crash", json!({})).await;
        let error = crashed.unwrap_err();
        assert!(
            error.message.contains("restarted on the next call"),
            "{error:?}"
        );
        let again = owner_call(
            &registry,
            &mut file,
            "mcp_bad_echo",
            json!({"text": "back"}),
        )
        .await;
        assert_eq!(again.unwrap(), json!("echo: back"));
        assert_eq!(
            world.supervisor.starts(),
            starts + 1,
            "the session discovery opened crashed; the next call restarted it once"
        );
    });
}

#[test]
fn a_hanging_server_times_out_within_tool_call_timeout_ms_and_restarts() {
    runtime().block_on(async {
        let (world, mut file) = World::with_misbehaving("h").await;
        let mut config = file.config().unwrap();
        config["mcp"]["servers"][0]["tool_call_timeout_ms"] = json!(300);
        file.config_replace(adf_store::Caller::Owner, config)
            .unwrap();
        let registry = world.registry();
        let started = Instant::now();
        let hung = owner_call(&registry, &mut file, "mcp_bad_hang", json!({})).await;
        let error = hung.unwrap_err();
        assert_eq!(error.code, ErrorCode::Timeout, "{error:?}");
        assert!(error.message.contains("300 ms"), "{error:?}");
        // The bound is the configured timeout, far below the server's hour-long sleep.
        assert!(started.elapsed() < Duration::from_secs(60));
        let again = owner_call(&registry, &mut file, "mcp_bad_echo", json!({"text": "ok"})).await;
        assert_eq!(again.unwrap(), json!("echo: ok"));
    });
}

#[test]
fn malformed_results_and_is_error_are_clear_errors_and_images_keep_their_blocks() {
    runtime().block_on(async {
        let (world, mut file) = World::with_misbehaving("m").await;
        let registry = world.registry();
        let malformed = owner_call(&registry, &mut file, "mcp_bad_malformed", json!({})).await;
        assert_eq!(malformed.unwrap_err().code, ErrorCode::ToolError);
        let failed = owner_call(&registry, &mut file, "mcp_bad_fail", json!({})).await;
        assert_eq!(failed.unwrap_err().message, "it went wrong");
        let image = owner_call(&registry, &mut file, "mcp_bad_image", json!({}))
            .await
            .unwrap();
        assert_eq!(image["text"], json!("a dot"));
        assert_eq!(image["content"][1]["mimeType"], json!("image/png"));
    });
}

#[test]
fn tol_11_a_schema_change_on_restart_disables_that_tool_until_reviewed_others_keep_working() {
    runtime().block_on(async {
        let (world, mut file) = World::with_misbehaving("s").await;
        adf_mcp::declare::accept_reviews(&mut file.config().unwrap());
        let scratch = format!("{}.mcp/bad", world.path("s").display());
        std::fs::write(
            format!("{scratch}/schema.json"),
            r#"{"type": "object", "properties": {"text": {"type": "string"}, "loud": {"type": "boolean"}}}"#,
        )
        .unwrap();
        let report = world.manager().restart(&mut file, "bad").await.unwrap();
        assert_eq!(report.changed, vec!["mcp_bad_echo"]);
        let echo = declaration(&file, "mcp_bad_echo");
        assert_eq!((&echo["enabled"], &echo["restricted"], &echo["mcp_tool_status"]), (&json!(false), &json!(true), &json!("changed")));
        let registry = world.registry();
        let refused = call(&registry, &mut file, &model(), "mcp_bad_echo", json!({"text": "x"}), &ApproveAll).await;
        assert!(refused.is_err());
        // The other tools keep working.
        unrestrict(&mut file, "mcp_bad_env");
        assert!(call(&registry, &mut file, &model(), "mcp_bad_env", json!({}), &DenyAll).await.is_ok());
        // Accepting the review records the new hash and enables the tool again.
        let mut config = file.config().unwrap();
        assert_eq!(adf_mcp::declare::accept_reviews(&mut config), vec!["mcp_bad_echo".to_owned(), "mcp_bad_env".to_owned(), "mcp_bad_hang".to_owned(), "mcp_bad_crash".to_owned(), "mcp_bad_malformed".to_owned(), "mcp_bad_image".to_owned(), "mcp_bad_fail".to_owned(), "mcp_bad_wait".to_owned()]);
        file.config_replace(adf_store::Caller::Owner, config).unwrap();
        let echo = declaration(&file, "mcp_bad_echo");
        assert_eq!(echo["enabled"], json!(true));
        let again = call(&registry, &mut file, &model(), "mcp_bad_echo", json!({"text": "x", "loud": true}), &ApproveAll).await;
        assert_eq!(again.unwrap(), json!("echo: x"));
    });
}

#[test]
fn tol_41_remove_drops_the_server_and_its_declarations() {
    runtime().block_on(async {
        let (world, mut file) = World::with_misbehaving("r").await;
        world.manager().remove(&mut file, "bad").await.unwrap();
        let config = file.config().unwrap();
        assert!(
            config["tools"]
                .as_array()
                .unwrap()
                .iter()
                .all(|d| !d["name"].as_str().unwrap().starts_with("mcp_bad_"))
        );
        assert_eq!(config["mcp"]["servers"], json!([]));
    });
}

#[test]
fn hundred_idle_agents_declaring_a_server_start_no_process_until_a_call() {
    runtime().block_on(async {
        let (world, first) = World::with_misbehaving("agent0").await;
        let declared = first.config().unwrap();
        world
            .supervisor
            .stop_idle(Instant::now(), Duration::ZERO)
            .await;
        let starts = world.supervisor.starts();
        let registry = world.registry();
        let mut files = Vec::new();
        for i in 1..=100 {
            let mut file = world.agent(&format!("agent{i}"));
            let mut config = file.config().unwrap();
            config["mcp"] = declared["mcp"].clone();
            config["tools"] = declared["tools"].clone();
            file.config_replace(adf_store::Caller::Owner, config)
                .unwrap();
            // What loading and a turn's request building do: read the tool list.
            let config = file.config().unwrap();
            assert!(
                registry
                    .model_definitions(&config)
                    .iter()
                    .any(|d| d["name"] == "mcp_bad_echo")
            );
            files.push(file);
        }
        assert_eq!(world.supervisor.starts(), starts);
        assert_eq!(world.supervisor.running().await, 0);
        let out = call(
            &registry,
            &mut files[41],
            &ToolCaller::Owner,
            "mcp_bad_echo",
            json!({"text": "one"}),
            &DenyAll,
        )
        .await;
        assert_eq!(out.unwrap(), json!("echo: one"));
        assert_eq!(world.supervisor.starts(), starts + 1);
        assert_eq!(world.supervisor.running().await, 1);
        // The idle stop, with the clock passed in: not idle for an hour yet, then it is.
        let hour = Duration::from_secs(3600);
        assert_eq!(world.supervisor.stop_idle(Instant::now(), hour).await, 0);
        assert_eq!(
            world
                .supervisor
                .stop_idle(Instant::now() + 2 * hour, hour)
                .await,
            1
        );
        assert_eq!(world.supervisor.running().await, 0);
        let out = call(
            &registry,
            &mut files[41],
            &ToolCaller::Owner,
            "mcp_bad_echo",
            json!({"text": "again"}),
            &DenyAll,
        )
        .await;
        assert_eq!(
            out.unwrap(),
            json!("echo: again"),
            "an idle-stopped server starts again on the next call"
        );
        // STL-04's half in this crate: stopping the agent stops its servers.
        assert_eq!(world.supervisor.stop_agent(files[41].path()).await, 1);
        assert_eq!(world.supervisor.running().await, 0);
    });
}

#[test]
fn idn_38_a_missing_required_credential_names_the_key_and_the_command() {
    runtime().block_on(async {
        let (world, mut file) = World::with_misbehaving("k").await;
        let mut config = file.config().unwrap();
        config["mcp"]["servers"][0]["env_schema"] =
            json!([{"key": "API_TOKEN", "scope": "agent", "required": true}]);
        file.config_replace(adf_store::Caller::Owner, config)
            .unwrap();
        let registry = world.registry();
        let error = owner_call(&registry, &mut file, "mcp_bad_env", json!({}))
            .await
            .unwrap_err();
        assert!(
            error.message.contains("API_TOKEN")
                && error.message.contains("adf identity set")
                && error.message.contains("mcp:bad:API_TOKEN"),
            "{error:?}"
        );
        // Set (sealed), the server gets it in its environment; echoed back, it is redacted.
        seal_credential(&world, &mut file, "mcp:bad:API_TOKEN", b"sekrit-value-42");
        let out = owner_call(&registry, &mut file, "mcp_bad_env", json!({}))
            .await
            .unwrap();
        let seen: Value = serde_json::from_str(out.as_str().unwrap()).unwrap();
        assert_eq!(seen["token"], json!("__redacted__"));
        assert!(
            seen["names"]
                .as_array()
                .unwrap()
                .contains(&json!("API_TOKEN"))
        );
        assert!(!out.to_string().contains("sekrit-value-42"));
    });
}

#[test]
fn tol_36_tol_40_tol_41_management_tools_install_restart_and_uninstall_through_the_pipeline() {
    runtime().block_on(async {
        let world = World::new();
        let mut file = world.agent("tools");
        let registry = world.registry();
        let script = misbehaving_script().display().to_string();
        let invalid = owner_call(
            &registry,
            &mut file,
            "mcp_install",
            json!({"type": "custom", "package": "python3"}),
        )
        .await;
        assert!(
            invalid
                .unwrap_err()
                .message
                .contains("requires an explicit name")
        );
        let installed = owner_call(
            &registry,
            &mut file,
            "mcp_install",
            json!({"type": "custom", "name": "bad", "package": "python3", "args": [script]}),
        )
        .await
        .unwrap();
        assert!(
            installed["tools"]
                .as_array()
                .unwrap()
                .contains(&json!("mcp_bad_echo")),
            "{installed}"
        );
        let out = owner_call(&registry, &mut file, "mcp_bad_echo", json!({"text": "t"})).await;
        assert_eq!(out.unwrap(), json!("echo: t"));

        // The owner's choice survives a restart (TOL-40).
        let mut config = file.config().unwrap();
        for d in config["tools"].as_array_mut().unwrap() {
            if d["name"] == "mcp_bad_env" {
                d["enabled"] = json!(false);
            }
        }
        file.config_replace(adf_store::Caller::Owner, config)
            .unwrap();
        let restarted = owner_call(&registry, &mut file, "mcp_restart", json!({"name": "bad"}))
            .await
            .unwrap();
        assert!(
            restarted["unchanged"]
                .as_array()
                .unwrap()
                .contains(&json!("mcp_bad_env")),
            "{restarted}"
        );
        assert_eq!(declaration(&file, "mcp_bad_env")["enabled"], json!(false));
        let out = owner_call(
            &registry,
            &mut file,
            "mcp_bad_echo",
            json!({"text": "after"}),
        )
        .await;
        assert_eq!(
            out.unwrap(),
            json!("echo: after"),
            "the server restarts on the next call"
        );

        owner_call(
            &registry,
            &mut file,
            "mcp_uninstall",
            json!({"name": "bad"}),
        )
        .await
        .unwrap();
        let config = file.config().unwrap();
        assert!(
            config["tools"]
                .as_array()
                .unwrap()
                .iter()
                .all(|d| !d["name"].as_str().unwrap().starts_with("mcp_bad_"))
        );
        assert_eq!(config["mcp"]["servers"], json!([]));
        let gone = owner_call(
            &registry,
            &mut file,
            "mcp_uninstall",
            json!({"name": "bad"}),
        )
        .await;
        assert_eq!(gone.unwrap_err().code, ErrorCode::NotFound);
    });
}
