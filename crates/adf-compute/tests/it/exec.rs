//! `compute_exec` in the isolated target: real python3 and sh under bubblewrap, and the
//! escape attempts the sandbox must stop.

use adf_runtime::tools::ToolCaller;
use adf_runtime::tools::approval::{ApproveAll, DenyAll};
use serde_json::json;

use crate::common::{World, agent_id, call, enabled, exec, no_process_with, one_sandbox_at_a_time};

#[tokio::test]
async fn tol_42_python3_runs_in_isolated_and_returns_stdout_stderr_exit_code() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let mut file = world.agent("py", enabled());
    let id = agent_id(&file);
    let result = exec(
        &registry,
        &mut file,
        json!({"command": "python3 -c 'import os,sys; print(6*7); print(os.getcwd()); sys.stderr.write(\"warn\\n\"); sys.exit(3)'"}),
    )
    .await;
    assert_eq!(result["exit_code"], 3, "{result}");
    assert_eq!(result["stdout"], format!("42\n/workspace/{id}\n"));
    assert_eq!(result["stderr"], "warn\n");
    assert_eq!(result["target"], "isolated");

    // The workspace persists under $ADF_HOME between calls.
    exec(
        &registry,
        &mut file,
        json!({"command": "echo kept > note.txt"}),
    )
    .await;
    let again = exec(
        &registry,
        &mut file,
        json!({"command": "cat note.txt; ls /"}),
    )
    .await;
    assert!(
        again["stdout"].as_str().unwrap().starts_with("kept\n"),
        "{again}"
    );
    assert_eq!(
        std::fs::read_to_string(world.isolated_workspace(&file).join("note.txt")).unwrap(),
        "kept\n"
    );
}

#[tokio::test]
async fn isolated_cannot_read_a_host_file_adf_home_or_another_agents_workspace() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let host_file = world.dir.path().join("host-secret.txt");
    std::fs::write(&host_file, "host-secret-value").unwrap();
    std::fs::write(
        world.home.dir().join("home-secret.txt"),
        "home-secret-value",
    )
    .unwrap();

    let mut other = world.agent("other", enabled());
    let wrote = exec(
        &registry,
        &mut other,
        json!({"command": "echo other-secret-value > mine.txt"}),
    )
    .await;
    assert_eq!(wrote["exit_code"], 0, "{wrote}");
    let other_file = world.isolated_workspace(&other).join("mine.txt");
    assert!(other_file.is_file());

    let mut file = world.agent("prober", enabled());
    for target in [
        host_file.clone(),
        world.home.dir().join("home-secret.txt"),
        other_file.clone(),
        std::path::PathBuf::from(format!("/workspace/{}/mine.txt", agent_id(&other))),
    ] {
        let command = format!(
            "cat '{}'; python3 -c 'print(open(\"{}\").read())'",
            target.display(),
            target.display()
        );
        let result = exec(&registry, &mut file, json!({"command": command})).await;
        let stdout = result["stdout"].as_str().unwrap();
        assert!(
            !stdout.contains("secret-value"),
            "{target:?} was readable: {result}"
        );
        assert_ne!(result["exit_code"], 0, "{result}");
    }
    // Nor by listing: the home and the other workspace are not in the sandbox at all.
    let listing = exec(
        &registry,
        &mut file,
        json!({"command": "ls -a /workspace; find / -xdev -name '*secret*' 2>/dev/null; true"}),
    )
    .await;
    let stdout = listing["stdout"].as_str().unwrap();
    assert!(!stdout.contains(&agent_id(&other)), "{listing}");
    assert!(!stdout.contains("secret"), "{listing}");
}

#[tokio::test]
async fn isolated_has_no_network_even_to_a_loopback_port() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut file = world.agent("net", enabled());
    let command = format!(
        "python3 -c 'import socket; s=socket.socket(); s.settimeout(3); s.connect((\"127.0.0.1\", {port})); print(\"connected\")'"
    );
    let result = exec(&registry, &mut file, json!({"command": command})).await;
    assert_ne!(result["exit_code"], 0, "{result}");
    assert!(!result["stdout"].as_str().unwrap().contains("connected"));
    assert!(
        result["stderr"]
            .as_str()
            .unwrap()
            .contains("Connection refused"),
        "{result}"
    );
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the host's listener saw a connection from the sandbox"
    );
}

#[tokio::test]
async fn a_fork_bomb_is_bounded() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let mut file = world.agent("bomb", enabled());
    let script = "import os, time\nn = 0\nfor i in range(2000):\n    try:\n        pid = os.fork()\n    except OSError:\n        print('fork refused after', n); break\n    if pid == 0:\n        time.sleep(2); os._exit(0)\n    n += 1\nprint('forked', n)\n";
    std::fs::create_dir_all(world.isolated_workspace(&file)).unwrap();
    // Written through the sandbox itself, so it belongs to the sandbox user.
    let write = exec(
        &registry,
        &mut file,
        json!({"command": format!("cat > bomb.py <<'EOF'\n{script}EOF")}),
    )
    .await;
    assert_eq!(write["exit_code"], 0, "{write}");
    let result = exec(
        &registry,
        &mut file,
        json!({"command": "python3 bomb.py", "timeout_ms": 20000}),
    )
    .await;
    let stdout = result["stdout"].as_str().unwrap();
    assert!(stdout.contains("fork refused after"), "{result}");
    let forked: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("forked "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        forked <= adf_compute::run::MAX_PROCESSES,
        "{forked} processes"
    );
    // A classic shell fork bomb ends at its deadline, and nothing of it survives.
    let bomb = exec(
        &registry,
        &mut file,
        json!({"command": "b() { b | b & }; b; sleep 3107.5", "timeout_ms": 2000}),
    )
    .await;
    assert_eq!(bomb["timed_out"], true, "{bomb}");
    assert!(no_process_with("3107.5"));
}

#[tokio::test]
async fn a_process_that_outlives_its_timeout_is_killed_with_its_whole_tree() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let mut file = world.agent("slow", enabled());
    let result = exec(
        &registry,
        &mut file,
        json!({"command": "(sleep 4321.25; echo late > late.txt) & sleep 4321.5 & echo started; wait", "timeout_ms": 1000}),
    )
    .await;
    assert_eq!(result["timed_out"], true, "{result}");
    assert_eq!(result["exit_code"], 124);
    assert_eq!(result["stdout"], "started\n");
    assert!(no_process_with("4321.25"), "the background child survived");
    assert!(no_process_with("4321.5"), "a child survived");
    assert!(!world.isolated_workspace(&file).join("late.txt").exists());
}

#[tokio::test]
async fn output_is_capped() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let mut file = world.agent("loud", enabled());
    let result = exec(
        &registry,
        &mut file,
        json!({"command": "head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2"}),
    )
    .await;
    assert_eq!(result["exit_code"], 0, "{}", result["stderr"]);
    assert_eq!(result["truncated"], true);
    assert_eq!(
        result["stdout"].as_str().unwrap().len(),
        adf_compute::run::OUTPUT_CAP_BYTES
    );
    assert_eq!(result["stderr"], "done\n");
}

#[tokio::test]
async fn tol_42_compute_exec_is_restricted_so_the_model_needs_approval() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let mut file = world.agent("hil", enabled());
    let model = ToolCaller::Model {
        loop_name: "main".into(),
    };
    let denied = call(
        &registry,
        &mut file,
        &model,
        "compute_exec",
        json!({"command": "touch ran.txt"}),
        &DenyAll,
    )
    .await
    .unwrap_err();
    assert_eq!(denied.code.as_str(), "DENIED", "{denied:?}");
    assert!(!world.isolated_workspace(&file).join("ran.txt").exists());

    let approved = call(
        &registry,
        &mut file,
        &model,
        "compute_exec",
        json!({"command": "touch ran.txt && echo ok"}),
        &ApproveAll,
    )
    .await
    .unwrap();
    assert_eq!(approved["stdout"], "ok\n", "{approved}");
    assert!(world.isolated_workspace(&file).join("ran.txt").exists());
}
