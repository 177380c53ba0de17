//! Which target a call runs in: the host behind its two gates, allowlists, and targets that
//! are not available failing closed (TOL-42, CFG-37).

use adf_runtime::tools::ToolCaller;
use adf_runtime::tools::approval::DenyAll;
use serde_json::json;

use crate::common::{World, agent_id, call, exec, no_process_with, one_sandbox_at_a_time, owner};

#[tokio::test]
async fn cfg_37_host_target_is_closed_unless_both_gates_are_open() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let host_only = json!({"enabled": false, "host_access": true, "allowed_targets": ["host"]});
    let command = json!({"command": "pwd", "target": "host"});

    // The agent allows it, the runtime setting is absent, then off.
    let mut file = world.agent("host", host_only.clone());
    for settings in [json!({}), json!({"compute": {"hostAccess": false}})] {
        world.settings(settings);
        let error = owner(&registry, &mut file, "compute_exec", command.clone())
            .await
            .unwrap_err();
        assert!(error.message.contains("compute.hostAccess"), "{error:?}");
    }
    // The runtime allows it, the agent does not.
    world.settings(json!({"compute": {"hostAccess": true}}));
    let mut closed = world.agent(
        "closed",
        json!({"enabled": false, "host_access": false, "allowed_targets": ["host"]}),
    );
    let error = owner(&registry, &mut closed, "compute_exec", command.clone())
        .await
        .unwrap_err();
    assert!(error.message.contains("compute.host_access"), "{error:?}");
    let error = owner(
        &registry,
        &mut closed,
        "fs_transfer",
        json!({"from": "vfs", "to": "host", "path": "README.md"}),
    )
    .await
    .unwrap_err();
    assert!(error.message.contains("compute.host_access"), "{error:?}");

    // Both open: it runs in the agent's host workspace, with none of the runtime's
    // environment.
    let result = exec(
        &registry,
        &mut file,
        json!({"command": "pwd; echo \"key=${ADF_TEST_SECRET_KEY:-}\"", "target": "host"}),
    )
    .await;
    let workspace = world.home.dir().join("compute/host").join(agent_id(&file));
    assert_eq!(
        result["stdout"],
        format!("{}\nkey=\n", workspace.display()),
        "{result}"
    );

    // A host process that outlives its timeout is killed with its group.
    let slow = exec(
        &registry,
        &mut file,
        json!({"command": "sleep 5417.5 & sleep 5417.25; wait", "target": "host", "timeout_ms": 500}),
    )
    .await;
    assert_eq!(slow["timed_out"], true, "{slow}");
    assert!(no_process_with("5417.5"));
    assert!(no_process_with("5417.25"));
}

#[tokio::test]
async fn tol_42_a_target_that_is_not_available_fails_closed_without_an_approval_task() {
    let world = World::new();
    let registry = world.registry();
    let model = ToolCaller::Model {
        loop_name: "main".into(),
    };

    // compute.enabled false: nothing to run in, and no fallback to the host.
    let mut off = world.agent("off", json!({"enabled": false}));
    let error = call(
        &registry,
        &mut off,
        &model,
        "compute_exec",
        json!({"command": "true"}),
        &DenyAll,
    )
    .await
    .unwrap_err();
    assert!(error.message.contains("compute.enabled"), "{error:?}");
    assert!(
        adf_store::test_support::tables(&off)
            .rows("adf_tasks")
            .unwrap()
            .is_empty(),
        "an approval task was opened for a call that cannot run"
    );

    // A target outside the allowlist.
    let mut file = world.agent(
        "list",
        json!({"enabled": true, "allowed_targets": ["isolated"]}),
    );
    let error = refusal(
        &registry,
        &mut file,
        json!({"command": "true", "target": "shared"}),
    )
    .await;
    assert!(error.contains("not allowed"), "{error}");

    // A registered container needs Podman; an unregistered id is unknown.
    world.settings(json!({"compute": {"containers": [{"id": "py-tools", "container": "py"}]}}));
    let mut containers = world.agent(
        "containers",
        json!({"enabled": true, "allowed_targets": ["isolated", "py-tools", "ghost"]}),
    );
    let podman_installed = adf_compute::status()["podman"]["available"] == true;
    if !podman_installed {
        let error = refusal(
            &registry,
            &mut containers,
            json!({"command": "true", "target": "py-tools"}),
        )
        .await;
        assert!(error.contains("podman is not installed"), "{error}");
    }
    let error = refusal(
        &registry,
        &mut containers,
        json!({"command": "true", "target": "ghost"}),
    )
    .await;
    assert!(error.contains("unknown compute target 'ghost'"), "{error}");

    // The default target must itself be available: no falling back to another.
    let mut default = world.agent(
        "default",
        json!({"enabled": true, "allowed_targets": ["isolated", "host"], "default_target": "host"}),
    );
    let error = refusal(&registry, &mut default, json!({"command": "true"})).await;
    assert!(error.contains("host compute target is closed"), "{error}");
}

async fn refusal(
    registry: &adf_runtime::tools::ToolRegistry,
    file: &mut adf_store::AdfFile,
    args: serde_json::Value,
) -> String {
    owner(registry, file, "compute_exec", args)
        .await
        .unwrap_err()
        .message
}

#[tokio::test]
async fn shared_is_one_workspace_for_the_agents_that_allow_it() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let both = json!({"enabled": true, "allowed_targets": ["isolated", "shared"]});
    let mut a = world.agent("a", both.clone());
    let mut b = world.agent("b", both);
    let a_id = agent_id(&a);
    let wrote = exec(
        &registry,
        &mut a,
        json!({"command": "echo from-a > note.txt", "target": "shared"}),
    )
    .await;
    assert_eq!(wrote["exit_code"], 0, "{wrote}");
    let read = exec(
        &registry,
        &mut b,
        json!({"command": format!("cat /workspace/{a_id}/note.txt"), "target": "shared"}),
    )
    .await;
    assert_eq!(read["stdout"], "from-a\n", "{read}");
    // The isolated workspace of the same agent is another place.
    let isolated = exec(&registry, &mut a, json!({"command": "cat note.txt"})).await;
    assert_ne!(isolated["exit_code"], 0, "{isolated}");
}

#[test]
fn status_names_the_isolation_tool_this_machine_has() {
    let status = adf_compute::status();
    // scripts/setup.d/40-compute-bubblewrap.sh installs bubblewrap wherever the tests run.
    assert_eq!(status["isolation"], "bubblewrap", "{status}");
    assert_eq!(status["bubblewrap"]["available"], true);
    assert!(
        status["bubblewrap"]["path"]
            .as_str()
            .unwrap()
            .ends_with("/bwrap")
    );
    assert_eq!(
        status["limits"]["processes"],
        adf_compute::run::MAX_PROCESSES
    );
    let podman = &status["podman"];
    assert!(
        podman["available"] == true || podman["install"].as_str().unwrap().contains("podman"),
        "{podman}"
    );
}

#[test]
fn adf_check_warns_only_about_targets_that_cannot_run_here() {
    let world = World::new();
    let id = json!("agentcheck");
    let runnable = json!({"id": id, "compute": {"enabled": true}});
    assert_eq!(
        adf_compute::check(&runnable, &world.home),
        Vec::<String>::new()
    );
    let off = json!({"id": id, "compute": {"enabled": false}});
    assert_eq!(adf_compute::check(&off, &world.home), Vec::<String>::new());

    let host = json!({"id": id, "compute": {"enabled": true, "host_access": true, "allowed_targets": ["isolated", "host"], "packages": {"pip": ["requests"]}}});
    let problems = adf_compute::check(&host, &world.home);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("compute.hostAccess"), "{problems:?}");
    assert!(problems[1].contains("compute.pipFindLinks"), "{problems:?}");
    world.settings(json!({"compute": {"hostAccess": true, "pipFindLinks": "/nonexistent-wheels"}}));
    assert_eq!(adf_compute::check(&host, &world.home), Vec::<String>::new());
}
