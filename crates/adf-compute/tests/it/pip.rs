//! `compute.packages.pip`: a local wheel directory installed into the agent's virtualenv in the
//! sandbox (never an index, never the network).

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use serde_json::json;

use crate::common::{World, exec, one_sandbox_at_a_time, owner};

/// Builds `demo_pkg-0.1-py3-none-any.whl` in `dir` with the host's python3 (zipfile only).
fn build_wheel(dir: &Path) {
    let script = r#"
import base64, hashlib, sys, zipfile, os
out = sys.argv[1]
files = {
    "demo_pkg/__init__.py": b"def answer():\n    return 42\n",
    "demo_pkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 0.1\n",
    "demo_pkg-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: adf-compute-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = ""
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record += f"{name},sha256={digest},{len(data)}\n"
record += "demo_pkg-0.1.dist-info/RECORD,,\n"
with zipfile.ZipFile(os.path.join(out, "demo_pkg-0.1-py3-none-any.whl"), "w") as whl:
    for name, data in files.items():
        whl.writestr(name, data)
    whl.writestr("demo_pkg-0.1.dist-info/RECORD", record)
"#;
    let status = std::process::Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn compute_packages_pip_installs_from_a_local_wheel_directory_into_the_agents_venv() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let wheels = world.dir.path().join("wheels");
    std::fs::create_dir(&wheels).unwrap();
    build_wheel(&wheels);
    // The sandbox user reads the directory.
    for path in [
        world.dir.path().to_path_buf(),
        wheels.clone(),
        wheels.join("demo_pkg-0.1-py3-none-any.whl"),
    ] {
        let mode = if path.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let mut file = world.agent(
        "pip",
        json!({"enabled": true, "packages": {"pip": ["demo-pkg==0.1"]}}),
    );
    let check = "python3 -c 'import demo_pkg; print(demo_pkg.answer())'";

    // Without a wheel directory there is nothing to install from: not supported, not PyPI.
    let error = owner(
        &registry,
        &mut file,
        "compute_exec",
        json!({"command": check}),
    )
    .await
    .unwrap_err();
    assert!(error.message.contains("not supported yet"), "{error:?}");
    assert!(error.message.contains("compute.pipFindLinks"), "{error:?}");

    world.settings(json!({"compute": {"pipFindLinks": wheels}}));
    let result = exec(
        &registry,
        &mut file,
        json!({"command": check, "timeout_ms": 120000}),
    )
    .await;
    assert_eq!(result["stdout"], "42\n", "{result}");
    assert!(
        world
            .isolated_workspace(&file)
            .join(".venv/bin/python3")
            .exists()
    );
    // The venv is the agent's: the system python3 does not have the package.
    let system = exec(
        &registry,
        &mut file,
        json!({"command": "/usr/bin/python3 -c 'import demo_pkg' 2>&1; echo rc=$?"}),
    )
    .await;
    assert!(
        system["stdout"]
            .as_str()
            .unwrap()
            .contains("ModuleNotFoundError"),
        "{system}"
    );
}
